//! Transactions over time, clock-free: the driver passes "seconds since
//! this side started" and cumulative counts at every interval boundary
//! (boundaries from [`IntervalClock`], so rr intervals line up with the
//! stream intervals of the background group) and once at the end.

use crate::interval::IntervalClock;
use crate::transport::TransportCounters;

use super::report::{rate, RrInterval, RrTotal};
use super::tracker::TxCounts;

/// Intervals shorter than this share of the interval at the very end are
/// folded into the previous one.
const SLIVER: f64 = 0.1;
const EPS: f64 = 1e-9;

/// Cumulative counts of one flow at one moment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TxReading {
    pub tx: TxCounts,
    /// Latencies recorded so far (client) and their sum.
    pub latency_n: u64,
    pub latency_sum_ns: u128,
    /// Server: requests deliberately left unanswered.
    pub dropped: u64,
    /// The transport's own counters (rr over QUIC, client), for the
    /// intervals' transport section.
    pub transport: Option<TransportCounters>,
}

#[derive(Debug, Clone)]
pub struct TxMeter {
    clock: IntervalClock,
    last_t: f64,
    last: TxReading,
    /// The counts at the start of the last interval (to fold a sliver in).
    before_last: TxReading,
    window: Option<(f64, TxReading)>,
    intervals: Vec<RrInterval>,
}

impl TxMeter {
    pub fn new(clock: IntervalClock) -> Self {
        TxMeter {
            clock,
            last_t: 0.0,
            last: TxReading::default(),
            before_last: TxReading::default(),
            window: (clock.omit_s <= 0.0).then_some((0.0, TxReading::default())),
            intervals: Vec::new(),
        }
    }

    /// The first boundary strictly after `t`.
    pub fn next_boundary(&self, t: f64) -> Option<f64> {
        self.clock.next_boundary(t)
    }

    /// Closes the interval ending at boundary `t` with the counts `now`.
    pub fn sample(&mut self, t: f64, now: TxReading) {
        if t <= self.last_t + EPS {
            return;
        }
        if self.clock.interval_s > 0.0 || t <= self.clock.omit_s + EPS {
            let iv = interval(
                self.last_t,
                t,
                &self.last,
                &now,
                t <= self.clock.omit_s + EPS,
            );
            if self.clock.interval_s > 0.0 {
                self.intervals.push(iv);
            }
        }
        if self.window.is_none() && t + EPS >= self.clock.omit_s {
            self.window = Some((t, now.clone()));
        }
        self.last_t = t;
        self.before_last = std::mem::replace(&mut self.last, now);
    }

    pub fn intervals(&self) -> &[RrInterval] {
        &self.intervals
    }

    /// The last interval (up to `t`) and the totals.
    pub fn finish(mut self, t: f64, now: TxReading) -> (Vec<RrInterval>, RrTotal) {
        if self.clock.interval_s > 0.0 && t > self.last_t + EPS {
            let omitted = t <= self.clock.omit_s + EPS;
            let short = t - self.last_t < SLIVER * self.clock.interval_s;
            match self.intervals.last_mut() {
                Some(prev) if short && prev.omitted == omitted => {
                    *prev = interval(prev.start_s, t, &self.before_last, &now, omitted);
                }
                _ => {
                    let iv = interval(self.last_t, t, &self.last, &now, omitted);
                    self.intervals.push(iv);
                }
            }
        }
        let (w_start, w) = self.window.clone().unwrap_or((t, now.clone()));
        let transactions = now.tx.completed - w.tx.completed;
        let total = RrTotal {
            start_s: w_start,
            end_s: t.max(w_start),
            transactions,
            per_second: rate(transactions, t - w_start),
            transactions_all: now.tx.completed,
            requests: now.tx.sent,
            timed_out: now.tx.timed_out,
            failed: now.tx.failed,
            late: now.tx.late,
            dropped: now.dropped,
        };
        (self.intervals, total)
    }
}

fn interval(start: f64, end: f64, a: &TxReading, b: &TxReading, omitted: bool) -> RrInterval {
    let transactions = b.tx.completed - a.tx.completed;
    let n = b.latency_n - a.latency_n;
    RrInterval {
        start_s: start,
        end_s: end,
        omitted,
        transactions,
        per_second: rate(transactions, end - start),
        timed_out: b.tx.timed_out - a.tx.timed_out,
        failed: b.tx.failed - a.tx.failed,
        mean_latency_us: (n > 0)
            .then(|| (b.latency_sum_ns - a.latency_sum_ns) as f64 / n as f64 / 1e3),
        transport: b.transport.as_ref().and_then(|now| {
            let zero = now.zero();
            now.sample(a.transport.as_ref().or(zero.as_ref())?)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(completed: u64, lat_us: u64) -> TxReading {
        TxReading {
            tx: TxCounts {
                sent: completed,
                completed,
                ..TxCounts::default()
            },
            latency_n: completed,
            latency_sum_ns: u128::from(completed * lat_us * 1000),
            dropped: 0,
            transport: None,
        }
    }

    #[test]
    fn intervals_count_transactions_and_the_warm_up_is_left_out_of_the_total() {
        let mut m = TxMeter::new(IntervalClock::new(1.0, 1.0));
        let mut t = 0.0;
        let mut n = 0;
        while let Some(b) = m.next_boundary(t).filter(|&b| b <= 3.0) {
            n += 1000;
            m.sample(b, reading(n, 50));
            t = b;
        }
        let (ivs, total) = m.finish(3.02, reading(3010, 50));
        assert_eq!(ivs.len(), 3);
        assert!(ivs[0].omitted && !ivs[1].omitted);
        assert_eq!(ivs[0].transactions, 1000);
        // The 20 ms sliver is folded into the last interval.
        assert_eq!(ivs[2].transactions, 1010);
        assert_eq!(ivs[2].end_s, 3.02);
        assert_eq!(ivs[1].mean_latency_us, Some(50.0));
        assert_eq!(total.transactions, 2010);
        assert_eq!(total.transactions_all, 3010);
        assert!((total.per_second - 2010.0 / 2.02).abs() < 1e-6);
    }

    #[test]
    fn no_intervals_still_gives_totals() {
        let mut m = TxMeter::new(IntervalClock::new(0.0, 0.0));
        assert_eq!(m.next_boundary(0.0), None);
        m.sample(1.0, reading(5, 1));
        let (ivs, total) = m.finish(2.0, reading(10, 1));
        assert!(ivs.is_empty());
        assert_eq!((total.transactions, total.per_second), (10, 5.0));
    }
}
