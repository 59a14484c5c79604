//! The application side of SafeUDP: how a constant-rate sender answers
//! the CCID's [`CongestionEvent`]s (`--on-congestion ignore|step-down|
//! tfrc`), as a state machine from events to the rate it offers.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::ccid::{CongestionEvent, Site};
use crate::time::Time;

/// Lowest rate step-down goes to, as a fraction of the nominal rate: six
/// halvings. A constant-rate application below 1/64 of its rate is not
/// carrying its content any more; the CCID's enforcement takes over.
const STEP_DOWN_FLOOR: f64 = 1.0 / 64.0;

/// What the application does when told of persistent network congestion.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum OnCongestion {
    /// Keep the nominal rate (the CCID enforces after its deadline).
    Ignore,
    /// Halve the rate on each notice; back to nominal when it clears.
    StepDown,
    /// Go to the TFRC bound the notice carries; back when it clears.
    Tfrc,
}

impl OnCongestion {
    pub const ALL: [OnCongestion; 3] = [
        OnCongestion::Ignore,
        OnCongestion::StepDown,
        OnCongestion::Tfrc,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OnCongestion::Ignore => "ignore",
            OnCongestion::StepDown => "step-down",
            OnCongestion::Tfrc => "tfrc",
        }
    }
}

impl fmt::Display for OnCongestion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is not one of [`OnCongestion::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown --on-congestion `{0}`; use one of: ignore, step-down, tfrc")]
pub struct ParseOnCongestionError(pub String);

impl FromStr for OnCongestion {
    type Err = ParseOnCongestionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let word = s.trim().to_ascii_lowercase();
        OnCongestion::ALL
            .into_iter()
            .find(|p| p.as_str() == word)
            .ok_or_else(|| ParseOnCongestionError(s.to_string()))
    }
}

/// Back up after congestion cleared: an eighth of the nominal rate per
/// step, a step every 500 ms (from half the rate to all of it in 2 s).
/// Slower than the CCID's 200 ms transient window plus an RTT, so each
/// step is judged before the next; jumping straight back to the nominal
/// rate made both policies oscillate between overload and half rate on a
/// bottleneck the flow congests itself (24-30 % loss in the sim's
/// 16-into-10 Mbit/s run).
const RECOVER_EVERY: Duration = Duration::from_millis(500);
const RECOVER_STEPS: f64 = 8.0;

/// A constant-rate application's offered rate under a policy, bytes/s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reaction {
    policy: OnCongestion,
    nominal: f64,
    rate: f64,
    /// When the rate next climbs towards nominal (congestion cleared).
    recover_at: Option<Time>,
}

impl Reaction {
    pub fn new(policy: OnCongestion, nominal: f64) -> Self {
        Reaction {
            policy,
            nominal,
            rate: nominal,
            recover_at: None,
        }
    }

    pub fn policy(&self) -> OnCongestion {
        self.policy
    }

    /// The rate the application offers now, bytes/s.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// When [`Reaction::poll`] next changes the rate.
    pub fn next_change(&self) -> Option<Time> {
        self.recover_at
    }

    /// Takes one event from the CCID at `now`; returns the new offered
    /// rate. End-host congestion is the receiver's to fix (a bigger
    /// buffer, a faster reader), not the path's: no policy lowers the
    /// rate for it.
    pub fn on_event(&mut self, now: Time, ev: &CongestionEvent) -> f64 {
        if self.policy == OnCongestion::Ignore {
            return self.rate;
        }
        match *ev {
            CongestionEvent::Onset {
                site: Site::Network,
            } => self.recover_at = None,
            CongestionEvent::Persistent {
                site: Site::Network,
                bound,
                ..
            } => {
                self.recover_at = None;
                self.rate = match self.policy {
                    OnCongestion::StepDown => (self.rate / 2.0).max(self.nominal * STEP_DOWN_FLOOR),
                    _ => bound.min(self.nominal),
                };
            }
            CongestionEvent::Enforcing { rate } => self.rate = self.rate.min(rate),
            CongestionEvent::Cleared {
                site: Site::Network,
                ..
            }
            | CongestionEvent::Released
                if self.rate < self.nominal =>
            {
                self.recover_at = Some(now + RECOVER_EVERY);
            }
            _ => {}
        }
        self.rate
    }

    /// Climbs back towards the nominal rate while nothing new happens;
    /// returns the offered rate at `now`.
    pub fn poll(&mut self, now: Time) -> f64 {
        while let Some(t) = self.recover_at.filter(|&t| t <= now) {
            self.rate = (self.rate + self.nominal / RECOVER_STEPS).min(self.nominal);
            self.recover_at = (self.rate < self.nominal).then(|| t + RECOVER_EVERY);
        }
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dccp::ccid::safeudp::tests::{add_bulk, cbr, drive, lossy, open_with, CbrLog, SIZE};
    use crate::dccp::ccid::safeudp::CCID;
    use crate::dccp::ccid::{CcidState, SafeUdpConfig};
    use crate::dccp::sim::Path;

    /// The senders the fairness runs compare: SafeUDP that never enforces
    /// (plain CBR), SafeUDP with each application policy, and CCID3.
    fn comparison_runs() -> [(&'static str, u8, SafeUdpConfig, OnCongestion); 5] {
        let never = SafeUdpConfig {
            react_deadline: Duration::from_secs(1_000_000),
            ..SafeUdpConfig::default()
        };
        let safe = SafeUdpConfig::default();
        [
            ("plain-cbr", CCID, never, OnCongestion::Ignore),
            ("ignore", CCID, safe, OnCongestion::Ignore),
            ("step-down", CCID, safe, OnCongestion::StepDown),
            ("tfrc", CCID, safe, OnCongestion::Tfrc),
            ("ccid3", 3, safe, OnCongestion::Ignore),
        ]
    }

    fn persistent(bound: f64) -> CongestionEvent {
        CongestionEvent::Persistent {
            site: Site::Network,
            bound,
            deadline: Some(Time::ZERO),
        }
    }

    const CLEARED: CongestionEvent = CongestionEvent::Cleared {
        site: Site::Network,
        lasted: Duration::ZERO,
        persistent: true,
    };

    #[test]
    fn policies_map_events_to_rates() {
        let t0 = Time::ZERO;
        let mut ignore = Reaction::new(OnCongestion::Ignore, 1e6);
        for ev in [
            persistent(1e5),
            CongestionEvent::Enforcing { rate: 1e5 },
            CLEARED,
        ] {
            assert_eq!(ignore.on_event(t0, &ev), 1e6);
        }
        assert_eq!(ignore.next_change(), None);

        let mut step = Reaction::new(OnCongestion::StepDown, 1e6);
        assert_eq!(step.on_event(t0, &persistent(1e5)), 5e5);
        assert_eq!(step.on_event(t0, &persistent(1e5)), 2.5e5);
        for _ in 0..10 {
            step.on_event(t0, &persistent(1e5));
        }
        assert_eq!(step.rate(), 1e6 / 64.0, "the floor");
        let host = CongestionEvent::Persistent {
            site: Site::EndHost,
            bound: f64::INFINITY,
            deadline: None,
        };
        assert_eq!(step.on_event(t0, &host), 1e6 / 64.0, "end-host: no step");
        // Cleared: an eighth of nominal back per 500 ms, not at once.
        assert_eq!(step.on_event(t0, &CLEARED), 1e6 / 64.0);
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(step.next_change(), Some(at(500)));
        assert_eq!(step.poll(at(499)), 1e6 / 64.0);
        assert_eq!(step.poll(at(500)), 1e6 / 64.0 + 125_000.0);
        assert_eq!(step.poll(at(1000)), 1e6 / 64.0 + 250_000.0);
        // A new onset holds the rate where it is.
        step.on_event(
            at(1100),
            &CongestionEvent::Onset {
                site: Site::Network,
            },
        );
        assert_eq!(step.next_change(), None);
        assert_eq!(step.poll(at(5000)), 1e6 / 64.0 + 250_000.0);
        step.on_event(at(5000), &CLEARED);
        assert_eq!(step.poll(at(60_000)), 1e6, "never above nominal");
        assert_eq!(step.next_change(), None);

        let mut tfrc = Reaction::new(OnCongestion::Tfrc, 1e6);
        assert_eq!(tfrc.on_event(t0, &persistent(183_000.0)), 183_000.0);
        assert_eq!(
            tfrc.on_event(t0, &persistent(2e6)),
            1e6,
            "never above nominal"
        );
        tfrc.on_event(t0, &persistent(183_000.0));
        assert_eq!(
            tfrc.on_event(t0, &CongestionEvent::Enforcing { rate: 150_000.0 }),
            150_000.0
        );
        tfrc.on_event(t0, &CongestionEvent::Released);
        assert_eq!(tfrc.poll(at(500)), 275_000.0);
    }

    #[test]
    fn policy_words_parse_and_bad_ones_name_the_choices() {
        for p in OnCongestion::ALL {
            assert_eq!(p.as_str().parse::<OnCongestion>(), Ok(p));
        }
        assert_eq!(" Step-Down ".parse(), Ok(OnCongestion::StepDown));
        let e = "slow".parse::<OnCongestion>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown --on-congestion `slow`; use one of: ignore, step-down, tfrc"
        );
    }

    fn dropped(log: &CbrLog) -> u64 {
        log.net.a.stats().dropped_by_ccid
    }

    fn enforced(log: &CbrLog) -> bool {
        log.events
            .iter()
            .any(|(_, e, _)| matches!(e, CongestionEvent::Enforcing { .. }))
    }

    /// The cooperative path: under persistent 2 % loss the application
    /// lowers its rate itself, within the deadline, and the CCID never
    /// drops anything.
    #[test]
    fn a_cooperating_application_is_never_enforced() {
        for policy in [OnCongestion::Tfrc, OnCongestion::StepDown] {
            let log = cbr(lossy(20_000), SafeUdpConfig::default(), policy, 6.0);
            assert!(!enforced(&log), "{policy}: {:?}", log.events);
            assert_eq!(dropped(&log), 0, "{policy}");
            let Some(CcidState::SafeUdp { bound, offered, .. }) = log.net.a.ccid_state() else {
                panic!()
            };
            // It answered: offered within the tolerance of the bound,
            // well under the 1 MB/s it started at.
            assert!(offered <= 2.0 * bound, "{policy}: {offered} vs {bound}");
            assert!(log.app.rate() < 500_000.0, "{policy}: {}", log.app.rate());
            let notices = log
                .events
                .iter()
                .filter(|(_, e, _)| matches!(e, CongestionEvent::Persistent { .. }))
                .count();
            assert!(notices >= 1, "{policy}");
        }
    }

    /// The enforced path, same loss: the ignoring application keeps
    /// offering 1 MB/s and the CCID drops what exceeds the bound.
    #[test]
    fn an_ignoring_application_is_enforced() {
        let log = cbr(
            lossy(20_000),
            SafeUdpConfig::default(),
            OnCongestion::Ignore,
            6.0,
        );
        assert!(enforced(&log), "{:?}", log.events);
        assert_eq!(log.app.rate(), 1e6);
        // Most of what it offers after the deadline is dropped.
        assert!(
            dropped(&log) > log.sent / 3,
            "{} of {}",
            dropped(&log),
            log.sent
        );
    }

    /// SafeUDP constant-rate flows through a simulated bottleneck, each
    /// application policy, against plain CBR (SafeUDP never enforcing:
    /// UDP with notices nobody reads) and CCID3 carrying the same offered
    /// load. Prints delivered rate, loss, CCID drops and when each step
    /// happened. Run with `cargo test -p xferlab-core --lib
    /// dccp::react -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement (prints numbers), ~1 min in debug builds"]
    fn safeudp_through_a_bottleneck() {
        let paths = [
            (
                "10 Mbit/s bottleneck, 40 ms RTT, 50-packet drop-tail, offered 16 Mbit/s",
                Path {
                    delay: Duration::from_millis(20),
                    rate: 10_000_000 / 8,
                    buffer: 50,
                    loss_ppm: 0,
                },
                2e6,
            ),
            (
                "100 Mbit/s, 40 ms RTT, 1 % random loss, offered 8 Mbit/s",
                Path {
                    delay: Duration::from_millis(20),
                    rate: 100_000_000 / 8,
                    buffer: 1000,
                    loss_ppm: 10_000,
                },
                1e6,
            ),
        ];
        let secs = 20.0;
        for (name, path, nominal) in paths {
            println!("{name}, {secs} s:");
            println!(
                "  {:<10} {:>9} {:>9} {:>7} {:>9} {:>8} {:>8} {:>8} {:>9}",
                "sender",
                "offered",
                "deliv.",
                "loss%",
                "ccid-drop",
                "notice",
                "lowered",
                "enforce",
                "bound"
            );
            let runs = comparison_runs();
            for (label, ccid, cfg, policy) in runs {
                let mut log = open_with(ccid, cfg, Reaction::new(policy, nominal));
                log.net.ab = path;
                let start = log.net.now;
                drive(&mut log, secs);
                let time_of = |f: &dyn Fn(&CongestionEvent) -> bool| {
                    log.first(f).map_or("-".to_string(), |t| {
                        format!("{:.2}", t.duration_since(start).as_secs_f64())
                    })
                };
                let notice = time_of(&|e| matches!(e, CongestionEvent::Persistent { .. }));
                let enforce = time_of(&|e| matches!(e, CongestionEvent::Enforcing { .. }));
                let lowered = log.rate_changes.first().map_or("-".to_string(), |(t, _)| {
                    format!("{:.2}", t.duration_since(start).as_secs_f64())
                });
                let stats = log.net.a.stats();
                let offered = log.sent as f64 * SIZE as f64 / (secs - start.as_secs_f64());
                let delivered = log.delivered(secs / 2.0, secs);
                let to_link = stats.data_sent;
                let loss = 100.0 * log.net.stats.data_drops as f64 / to_link.max(1) as f64;
                let bound = match log.net.a.ccid_state() {
                    Some(CcidState::SafeUdp { bound, .. }) => format!("{:.0}", bound * 8.0 / 1e3),
                    Some(CcidState::Ccid3 { x, .. }) => format!("x {:.0}", x * 8.0 / 1e3),
                    _ => "-".into(),
                };
                println!(
                    "  {:<10} {:>9.0} {:>9.0} {:>7.2} {:>9} {:>8} {:>8} {:>8} {:>9}",
                    label,
                    offered * 8.0 / 1e3,
                    delivered * 8.0 / 1e3,
                    loss,
                    stats.dropped_by_ccid + stats.queue_full,
                    notice,
                    lowered,
                    enforce,
                    bound,
                );
            }
            println!("  (rates in kbit/s; delivered over the second half; loss of what entered the link;");
            println!("   times in s from the start; ccid-drop counts CCID drops, or refusals of a full queue for ccid3)");
        }
    }

    /// The fairness question on the sim: one constant-rate flow offering
    /// 8 Mbit/s against 1 and 4 CCID2 (TCP-like) bulk flows through a 10
    /// Mbit/s, 40 ms RTT, 50-packet drop-tail bottleneck. Prints the CBR
    /// flow's delivered rate and loss, the bulk flows' total and share,
    /// CCID drops and when the CCID noticed and enforced. Run with `cargo
    /// test -p xferlab-core --lib dccp::react -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement (prints numbers), ~3 min in debug builds"]
    fn safeudp_against_tcp_like_flows() {
        let secs = 15.0;
        let path = Path {
            delay: Duration::from_millis(20),
            rate: 10_000_000 / 8,
            buffer: 50,
            loss_ppm: 0,
        };
        let runs = comparison_runs();
        for n in [1, 4] {
            println!(
                "CBR 8 Mbit/s vs {n} CCID2 flow(s), 10 Mbit/s, 40 ms RTT, 50-packet drop-tail, {secs} s \
                 (rates kbit/s over the second half):"
            );
            println!(
                "  {:<10} {:>8} {:>6} {:>9} {:>8} {:>7} {:>7} {:>7}",
                "cbr via", "cbr", "loss%", "ccid-drop", "ccid2", "share%", "notice", "enforce"
            );
            for (label, ccid, cfg, policy) in runs {
                let mut log = open_with(ccid, cfg, Reaction::new(policy, 1e6));
                add_bulk(&mut log, 2, n);
                log.net.ab = path;
                let start = log.net.now;
                drive(&mut log, secs);
                let time_of = |f: &dyn Fn(&CongestionEvent) -> bool| {
                    log.first(f).map_or("-".to_string(), |t| {
                        format!("{:.2}", t.duration_since(start).as_secs_f64())
                    })
                };
                let notice = time_of(&|e| matches!(e, CongestionEvent::Persistent { .. }));
                let enforce = time_of(&|e| matches!(e, CongestionEvent::Enforcing { .. }));
                let half = secs / 2.0;
                let cbr = log.delivered(half, secs);
                let bulk: f64 = (0..n).map(|k| log.bulk_delivered(k, half, secs)).sum();
                let stats = log.net.a.stats();
                let sent = stats.data_sent.max(1);
                let lost = sent.saturating_sub(log.net.b.stats().data_received);
                println!(
                    "  {:<10} {:>8.0} {:>6.2} {:>9} {:>8.0} {:>7.1} {:>7} {:>7}",
                    label,
                    cbr * 8.0 / 1e3,
                    100.0 * lost as f64 / sent as f64,
                    stats.dropped_by_ccid + stats.queue_full,
                    bulk * 8.0 / 1e3,
                    100.0 * bulk / (bulk + cbr),
                    notice,
                    enforce,
                );
            }
        }
    }
}
