//! The operator's budgets for a public server: how many flows a test may
//! have, how fine its intervals may be, and how fast the server sends
//! for one test and for all tests together. Checked at admission with a
//! refusal that names the limit, and enforced while the test runs: the
//! rate the server grants a test becomes the pacing of every flow it
//! sends (SO_MAX_PACING_RATE for TCP, the datagram pacer for UDP, the
//! rr server's shared answer rate for UDP RR and CRR answers), and the
//! grant is held against the server-wide budget until the session ends.
//! An rr test counts its request/response flows as flows the server
//! sends on (it answers on every one).

use std::sync::Mutex;

use xferlab_core::spec::{FlowDirection, Pattern, TestSpec};
use xferlab_core::units::RateUnit;

use super::shared::lock;

/// Budgets from the command line; None is no limit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Budgets {
    /// bit/s one test may make the server send (`--max-rate`).
    pub max_rate: Option<u64>,
    /// bit/s all tests together may make the server send
    /// (`--max-total-rate`).
    pub max_total_rate: Option<u64>,
    /// Flows of one test, both directions (`--max-flows`).
    pub max_flows: Option<usize>,
    /// Shortest interval, seconds (`--min-interval`); 0 (no intervals)
    /// is always allowed.
    pub min_interval: Option<f64>,
}

/// Why a test does not fit the budgets.
#[derive(Debug, Clone, PartialEq)]
pub enum OverBudget {
    /// Never fits on this server (names the limit).
    Test(String),
    /// Flows are over [`Budgets::max_flows`] (iperf3 has a code for it).
    Flows(String),
    /// Over the rate (iperf3 has a code for it).
    Rate(String),
    /// Does not fit now: other tests hold the server-wide rate.
    Busy(String),
}

impl OverBudget {
    pub fn message(&self) -> &str {
        match self {
            OverBudget::Test(m)
            | OverBudget::Flows(m)
            | OverBudget::Rate(m)
            | OverBudget::Busy(m) => m,
        }
    }
}

/// The server-wide rate in use by running tests.
#[derive(Default)]
pub struct RateBook {
    reserved: Mutex<u64>,
}

/// A test's share of the server-wide rate, given back when dropped.
pub struct RateGrant<'a> {
    book: &'a RateBook,
    bits: u64,
}

impl Drop for RateGrant<'_> {
    fn drop(&mut self) {
        let mut r = lock(&self.book.reserved);
        *r = r.saturating_sub(self.bits);
    }
}

fn rate(bits: u64) -> String {
    RateUnit::AutoBits.format_rate(bits as f64)
}

/// The lowest per-flow rate granted to a test that did not ask for one:
/// below it, the test is refused as busy rather than run uselessly slow.
const MIN_GRANT_PER_FLOW: u64 = 100_000;

impl Budgets {
    /// Checks `spec` against the budgets and, where a rate budget is
    /// set, paces the flows this server sends to the test's share
    /// (changing this server's copy of the spec). The grant holds the
    /// share until dropped.
    pub fn admit<'a>(
        &self,
        book: &'a RateBook,
        spec: &mut TestSpec,
    ) -> Result<Option<RateGrant<'a>>, OverBudget> {
        let plans = spec.flows();
        // An rr test's request/response flows, besides its background
        // stream flows (`plans`): the server answers on every one.
        let rr_flows = spec.pattern.rr().map_or(0, |r| r.flows as u64);
        let flows = plans.len() as u64 + rr_flows;
        if let Some(max) = self.max_flows {
            if flows > max as u64 {
                return Err(OverBudget::Flows(format!(
                    "{flows} flows is more than this server's --max-flows of {max}"
                )));
            }
        }
        if let Some(min) = self.min_interval {
            if spec.interval_s > 0.0 && spec.interval_s < min {
                return Err(OverBudget::Test(format!(
                    "-i {} s is finer than this server's --min-interval of {min} s",
                    spec.interval_s
                )));
            }
        }
        if self.max_rate.is_none() && self.max_total_rate.is_none() {
            return Ok(None);
        }
        // UDP stream flows are paced by their -b (`knobs.rate`); TCP
        // flows, and an rr test's answers, by `knobs.max_pacing_rate`
        // (bytes/s per flow: SO_MAX_PACING_RATE, or the rr server's
        // shared rate for UDP and CRR answers).
        // (A transport's own say: QUIC's streams are paced like TCP's.)
        let udp =
            spec.pattern == Pattern::Stream && spec.transport.model().counts_datagrams(&spec.knobs);
        // What each flow asked for, bit/s (None: as fast as it can).
        let asked = if udp {
            spec.knobs.rate
        } else {
            spec.knobs.max_pacing_rate.map(|b| b.saturating_mul(8))
        };
        let sent_by_us = plans
            .iter()
            .filter(|p| p.direction == FlowDirection::S2c)
            .count() as u64;
        let ours = sent_by_us + rr_flows;
        let theirs = plans.len() as u64 - sent_by_us;
        // Whether `budget` split over our flows leaves each too little.
        let too_thin = |budget: u64| {
            budget
                .checked_div(ours)
                .is_some_and(|f| f < MIN_GRANT_PER_FLOW)
        };
        // The client's own unpaced datagrams cannot be throttled from
        // here: such a test must say its rate.
        if udp && asked.is_none() && theirs > 0 {
            return Err(OverBudget::Rate(format!(
                "unpaced UDP: this server takes UDP tests with -b of at most {} in total",
                rate(self.max_rate.or(self.max_total_rate).unwrap_or(0))
            )));
        }
        if let Some(max) = self.max_rate.filter(|_| asked.is_none()) {
            if too_thin(max) {
                return Err(OverBudget::Rate(format!(
                    "{ours} flows sent by the server would get less than {} each of its --max-rate of {}: use fewer flows",
                    rate(MIN_GRANT_PER_FLOW),
                    rate(max)
                )));
            }
        }
        let mut reserved = lock(&book.reserved);
        let left = self
            .max_total_rate
            .map_or(u64::MAX, |t| t.saturating_sub(*reserved));
        let cap = self.max_rate.unwrap_or(u64::MAX).min(left);
        let bits = match asked {
            Some(per_flow) => {
                let total = per_flow.saturating_mul(flows);
                if let Some(max) = self.max_rate.filter(|m| total > *m) {
                    return Err(OverBudget::Rate(format!(
                        "{} in total (-b x {flows} flows) is more than this server's --max-rate of {}",
                        rate(total),
                        rate(max)
                    )));
                }
                if total > left {
                    return Err(OverBudget::Busy(format!(
                        "server busy: {} of its --max-total-rate of {} is in use; try again later or ask for less with -b",
                        rate(*reserved),
                        rate(self.max_total_rate.unwrap_or(0))
                    )));
                }
                total
            }
            None => {
                // Only the client sends (ours == 0), under TCP's own
                // control: no share of the server's sending rate.
                if let Some(per_flow) = cap.checked_div(ours) {
                    if too_thin(cap) {
                        return Err(OverBudget::Busy(format!(
                            "server busy: {} of its --max-total-rate of {} is in use; try again later",
                            rate(*reserved),
                            rate(self.max_total_rate.unwrap_or(0))
                        )));
                    }
                    if udp {
                        spec.knobs.rate = Some(per_flow);
                    } else {
                        spec.knobs.max_pacing_rate = Some((per_flow / 8).max(1));
                    }
                    per_flow * ours
                } else {
                    0
                }
            }
        };
        *reserved += bits;
        Ok(Some(RateGrant { book, bits }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xferlab_core::spec::{Direction, Transport};

    fn tcp(direction: Direction, parallel: u32) -> TestSpec {
        let mut s = TestSpec::default_stream();
        s.direction = direction;
        s.parallel = parallel;
        s
    }

    const M: u64 = 1_000_000;

    #[test]
    fn flows_and_intervals_are_checked() {
        let b = Budgets {
            max_flows: Some(4),
            min_interval: Some(0.5),
            ..Budgets::default()
        };
        let book = RateBook::default();
        assert!(b.admit(&book, &mut tcp(Direction::Bidir, 2)).is_ok());
        let e = b.admit(&book, &mut tcp(Direction::Bidir, 3)).err().unwrap();
        assert!(
            matches!(e, OverBudget::Flows(ref m) if m.contains("--max-flows of 4")),
            "{e:?}"
        );
        let mut s = tcp(Direction::Forward, 1);
        s.interval_s = 0.1;
        let e = b.admit(&book, &mut s).err().unwrap();
        assert!(e.message().contains("--min-interval of 0.5"), "{e:?}");
        s.interval_s = 0.0;
        assert!(b.admit(&book, &mut s).is_ok());
    }

    #[test]
    fn unpaced_server_flows_get_the_share_and_give_it_back() {
        let b = Budgets {
            max_rate: Some(100 * M),
            max_total_rate: Some(150 * M),
            ..Budgets::default()
        };
        let book = RateBook::default();
        let mut s = tcp(Direction::Reverse, 4);
        let g = b.admit(&book, &mut s).unwrap();
        assert_eq!(s.knobs.max_pacing_rate, Some(25 * M / 8));
        // 50 Mbit/s left: the next test gets that.
        let mut s2 = tcp(Direction::Reverse, 1);
        let g2 = b.admit(&book, &mut s2).unwrap();
        assert_eq!(s2.knobs.max_pacing_rate, Some(50 * M / 8));
        // Nothing left.
        let e = b
            .admit(&book, &mut tcp(Direction::Reverse, 1))
            .err()
            .unwrap();
        assert!(matches!(e, OverBudget::Busy(_)), "{e:?}");
        drop((g, g2));
        assert!(b.admit(&book, &mut tcp(Direction::Reverse, 1)).is_ok());
        // Forward TCP sends nothing from here: no share needed.
        let mut f = tcp(Direction::Forward, 8);
        assert!(b.admit(&book, &mut f).is_ok());
        assert_eq!(f.knobs.max_pacing_rate, None);
    }

    #[test]
    fn asked_rates_over_the_budget_are_refused() {
        let b = Budgets {
            max_rate: Some(100 * M),
            ..Budgets::default()
        };
        let book = RateBook::default();
        let mut u = tcp(Direction::Reverse, 2);
        u.transport = Transport::Udp;
        u.knobs.rate = Some(60 * M);
        let e = b.admit(&book, &mut u).err().unwrap();
        assert!(
            matches!(e, OverBudget::Rate(ref m) if m.contains("--max-rate")),
            "{e:?}"
        );
        u.knobs.rate = Some(50 * M);
        assert!(b.admit(&book, &mut u).is_ok());
        // Unpaced UDP from the client cannot be held to any budget.
        let mut f = tcp(Direction::Forward, 1);
        f.transport = Transport::Udp;
        f.knobs.rate = None;
        assert!(matches!(b.admit(&book, &mut f), Err(OverBudget::Rate(_))));
    }

    #[test]
    fn rr_flows_count_and_their_answers_get_a_share() {
        use xferlab_core::rr::RrMode;
        let b = Budgets {
            max_rate: Some(10 * M),
            max_total_rate: Some(15 * M),
            max_flows: Some(8),
            ..Budgets::default()
        };
        let book = RateBook::default();
        let rr = |flows: u32| {
            let mut s = TestSpec::default_rr(RrMode::UdpRr);
            if let Pattern::Rr(r) = &mut s.pattern {
                r.flows = flows;
            }
            s
        };
        let e = b.admit(&book, &mut rr(9)).err().unwrap();
        assert!(e.message().contains("9 flows"), "{e:?}");
        let mut s = rr(4);
        let g = b.admit(&book, &mut s).unwrap();
        assert_eq!(s.knobs.max_pacing_rate, Some(10 * M / 4 / 8));
        // 5 Mbit/s left for the next one.
        let mut s2 = rr(1);
        let _g2 = b.admit(&book, &mut s2).unwrap();
        assert_eq!(s2.knobs.max_pacing_rate, Some(5 * M / 8));
        drop(g);
        // Too many flows for a useful share of --max-rate.
        let b = Budgets {
            max_rate: Some(M),
            ..Budgets::default()
        };
        let e = b.admit(&book, &mut rr(20)).err().unwrap();
        assert!(
            matches!(e, OverBudget::Rate(ref m) if m.contains("use fewer flows")),
            "{e:?}"
        );
    }
}
