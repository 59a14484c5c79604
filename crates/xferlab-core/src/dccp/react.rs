//! The application side of SafeUDP: how a constant-rate sender answers
//! the CCID's [`CongestionEvent`]s (`--on-congestion ignore|step-down|
//! tfrc`), as a state machine from events to the rate it offers.

use std::fmt;
use std::str::FromStr;

use super::ccid::{CongestionEvent, Site};

/// Lowest rate step-down goes to, as a fraction of the nominal rate: six
/// halvings. A constant-rate application below 1/64 of its rate is not
/// carrying its content any more; the CCID's enforcement takes over.
const STEP_DOWN_FLOOR: f64 = 1.0 / 64.0;

/// What the application does when told of persistent network congestion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// A constant-rate application's offered rate under a policy, bytes/s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reaction {
    policy: OnCongestion,
    nominal: f64,
    rate: f64,
}

impl Reaction {
    pub fn new(policy: OnCongestion, nominal: f64) -> Self {
        Reaction {
            policy,
            nominal,
            rate: nominal,
        }
    }

    pub fn policy(&self) -> OnCongestion {
        self.policy
    }

    /// The rate the application offers now, bytes/s.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Takes one event from the CCID; returns the new offered rate.
    /// End-host congestion is the receiver's to fix (a bigger buffer, a
    /// faster reader), not the path's: no policy lowers the rate for it.
    pub fn on_event(&mut self, ev: &CongestionEvent) -> f64 {
        if self.policy == OnCongestion::Ignore {
            return self.rate;
        }
        match *ev {
            CongestionEvent::Persistent {
                site: Site::Network,
                bound,
                ..
            } => {
                self.rate = match self.policy {
                    OnCongestion::StepDown => (self.rate / 2.0).max(self.nominal * STEP_DOWN_FLOOR),
                    _ => bound.min(self.nominal),
                };
            }
            CongestionEvent::Enforcing { rate } => self.rate = self.rate.min(rate),
            CongestionEvent::Cleared {
                site: Site::Network,
                ..
            } => self.rate = self.nominal,
            _ => {}
        }
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dccp::ccid::safeudp::tests::{cbr, lossy, CbrLog};
    use crate::dccp::ccid::{CcidState, SafeUdpConfig};
    use crate::time::Time;
    use std::time::Duration;

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
        let mut ignore = Reaction::new(OnCongestion::Ignore, 1e6);
        for ev in [
            persistent(1e5),
            CongestionEvent::Enforcing { rate: 1e5 },
            CLEARED,
        ] {
            assert_eq!(ignore.on_event(&ev), 1e6);
        }

        let mut step = Reaction::new(OnCongestion::StepDown, 1e6);
        assert_eq!(step.on_event(&persistent(1e5)), 5e5);
        assert_eq!(step.on_event(&persistent(1e5)), 2.5e5);
        for _ in 0..10 {
            step.on_event(&persistent(1e5));
        }
        assert_eq!(step.rate(), 1e6 / 64.0, "the floor");
        let host = CongestionEvent::Persistent {
            site: Site::EndHost,
            bound: f64::INFINITY,
            deadline: None,
        };
        assert_eq!(step.on_event(&CLEARED), 1e6);
        assert_eq!(step.on_event(&host), 1e6, "end-host congestion: no step");

        let mut tfrc = Reaction::new(OnCongestion::Tfrc, 1e6);
        assert_eq!(tfrc.on_event(&persistent(183_000.0)), 183_000.0);
        assert_eq!(tfrc.on_event(&persistent(2e6)), 1e6, "never above nominal");
        assert_eq!(
            tfrc.on_event(&CongestionEvent::Enforcing { rate: 9e5 }),
            9e5
        );
        assert_eq!(tfrc.on_event(&CLEARED), 1e6);
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
}
