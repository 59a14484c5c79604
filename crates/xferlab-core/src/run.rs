//! When a running test stops, drains, is cut or aborted: the decisions
//! every xferlab event loop makes (stream, rr, the iperf3 client and
//! sessions), as one sans-IO state machine on the time passed in.
//!
//! The driver feeds it what it sees (the time, Ctrl-C presses, whether the
//! workload's flows ended, whether the peer's results are in) and performs
//! the [`Action`]s it polls out, in order, until there are none:
//!
//! ```text
//!   Setup --start--> Running --Stop--> Stopping --EndPeer--> ... --Finish--> Over
//!     |                 |                  |--Cut (drain limit passed)
//!     +--Abort (Ctrl-C before start)       +--Abort (second Ctrl-C)
//! ```
//!
//! * A **client** stops when the planned time is up, when a test without
//!   a planned time (a byte limit) reached its limit, when every flow of
//!   the workload has ended before either (errors ended them: nothing is
//!   left to measure), or at the first Ctrl-C (then the result says
//!   *interrupted*). A second Ctrl-C aborts
//!   without waiting for the peer's results; one before the test started
//!   aborts it.
//! * A **server session** stops when the peer asks ([`TestRun::peer_stopped`]).
//!   Its own senders stop earlier if the peer does not ask in time: at
//!   the planned length, capped by the server's `--max-duration`
//!   ([`Policy::max_duration`]; a byte-limited test at the cap), plus
//!   [`SEND_GRACE`], counted from the start. A client that never says
//!   stop gets no more data than that.
//! * Either way, after the stop the workload has [`Policy::drain`] to end
//!   by itself (receivers read what is in flight) before it is cut; the
//!   peer is told the test is over once the workload is quiesced (its
//!   own rule: at once for a stream, when every transaction is answered
//!   for rr) or after [`Policy::quiesce`] at the latest.

use std::time::Duration;

use crate::time::Time;

/// Which end of the control connection this run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Decides when the test ends, and hears the user's Ctrl-C.
    Client,
    /// Ends the test when the client asks.
    Server,
}

/// How long a server's senders run past the test's planned length (or
/// past the server's `--max-duration`, whichever is shorter) when the
/// client's stop has not come: the client counts its length from when it
/// saw `start`, half a round trip after the server sent it, and its stop
/// takes the other half back, so a second covers round trips up to about
/// a second and still bounds a `--max-duration 5` test to 6 s of sending.
pub const SEND_GRACE: Duration = Duration::from_secs(1);

/// A run's time limits.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub role: Role,
    /// A server's longest test: its senders stop at the planned length,
    /// or at this for a test without one, whichever comes first, plus
    /// [`SEND_GRACE`]. None: no cap (a client).
    pub max_duration: Option<Duration>,
    /// How long after the stop the workload may take to end by itself.
    pub drain: Duration,
    /// The longest wait after the stop before the peer is told, when the
    /// workload does not say it is quiesced earlier.
    pub quiesce: Duration,
}

/// Why a run was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abort {
    /// Ctrl-C before the test started.
    InterruptedBeforeStart,
    /// A second Ctrl-C while the test was ending.
    InterruptedTwice,
}

impl Abort {
    /// What the result says.
    pub fn message(self) -> &'static str {
        match self {
            Abort::InterruptedBeforeStart => "interrupted before the test started",
            Abort::InterruptedTwice => "interrupted twice: aborted without the server's results",
        }
    }

    /// What the peer is told.
    pub fn peer_message(self) -> &'static str {
        match self {
            Abort::InterruptedBeforeStart => {
                "the user interrupted the client before the test started"
            }
            Abort::InterruptedTwice => "the user aborted the client",
        }
    }
}

/// What the driver must do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Stop the workload's senders; receivers keep reading.
    Stop,
    /// Tell the peer the test is over (a client's stop message).
    EndPeer,
    /// The workload did not end within the drain limit: cut its flows.
    Cut,
    /// The workload ended after the stop: build and send this side's
    /// report (server sessions).
    Report,
    /// Give up now: abort the workload and tell the peer why.
    Abort(Abort),
    /// Everything is in: leave the loop.
    Finish,
}

/// What the driver sees at one wake.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    /// Ctrl-C presses so far (always 0 for a server session).
    pub presses: u32,
    /// Every flow of the workload has ended.
    pub all_done: bool,
    /// The workload reached its own end (a byte limit); asked only when
    /// the test has no planned duration.
    pub limit_reached: bool,
    /// The workload may tell the peer it is over (see [`Policy::quiesce`]).
    pub quiesced: bool,
    /// The peer's part is complete (a client: its results arrived).
    pub peer_done: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Setup,
    Running,
    Stopping,
    Over,
}

/// One test's life, from start to finish (see the module docs).
#[derive(Debug)]
pub struct TestRun {
    policy: Policy,
    phase: Phase,
    planned_end: Option<Time>,
    /// A server's: when its senders stop if the peer has not asked.
    send_end: Option<Time>,
    /// A server's senders were stopped at `send_end`.
    capped: bool,
    stopped_at: Option<Time>,
    /// The `Stop` action was handed out (a server's stop comes from
    /// [`TestRun::peer_stopped`] and is handed out at the next poll).
    stop_issued: bool,
    peer_told: bool,
    cut: bool,
    reported: bool,
    interrupted: bool,
}

impl TestRun {
    pub fn new(policy: Policy) -> Self {
        TestRun {
            policy,
            phase: Phase::Setup,
            planned_end: None,
            send_end: None,
            capped: false,
            stopped_at: None,
            stop_issued: false,
            peer_told: false,
            cut: false,
            reported: false,
            interrupted: false,
        }
    }

    /// The workload started at `now`; `planned` is the test's length when
    /// it has one (a byte-limited test ends by itself). A planned end past
    /// what `Time` can hold means none.
    pub fn start(&mut self, now: Time, planned: Option<Duration>) {
        if self.phase == Phase::Setup {
            self.phase = Phase::Running;
            self.planned_end = planned.and_then(|p| now.checked_add(p));
            if self.policy.role == Role::Server {
                if let Some(max) = self.policy.max_duration {
                    let limit = planned.map_or(max, |p| p.min(max));
                    self.send_end = now.checked_add(limit + SEND_GRACE);
                }
            }
        }
    }

    /// The server's senders were stopped at their cap, before the peer
    /// asked (see [`Policy::max_duration`]): what the report says.
    pub fn capped(&self) -> Option<String> {
        self.capped.then(|| {
            format!(
                "the client's stop did not come: the server's senders stopped {} s after the test's length (capped by the server's --max-duration)",
                SEND_GRACE.as_secs_f64()
            )
        })
    }

    /// The peer asked to stop (a server session).
    pub fn peer_stopped(&mut self, now: Time) {
        if self.phase == Phase::Running {
            self.begin_stop(now);
            // The peer already knows.
            self.peer_told = true;
        }
    }

    fn begin_stop(&mut self, now: Time) {
        self.phase = Phase::Stopping;
        self.stopped_at = Some(now);
    }

    pub fn started(&self) -> bool {
        self.phase != Phase::Setup
    }

    /// The test was stopped by the first Ctrl-C, before its planned end.
    pub fn interrupted(&self) -> bool {
        self.interrupted
    }

    /// Stopped, and the peer not yet told: the workload is quiescing.
    pub fn quiescing(&self) -> bool {
        self.phase == Phase::Stopping && !self.peer_told
    }

    /// When the stop was decided, if it was.
    pub fn stopped_at(&self) -> Option<Time> {
        self.stopped_at
    }

    /// The next moment at which [`TestRun::poll`] can decide something by
    /// time alone.
    pub fn next_deadline(&self) -> Option<Time> {
        match self.phase {
            Phase::Running if self.policy.role == Role::Client => self.planned_end,
            Phase::Running if !self.stop_issued => self.send_end,
            Phase::Stopping => {
                let at = self.stopped_at?;
                let quiesce = (!self.peer_told).then(|| at + self.policy.quiesce);
                let drain = (!self.cut).then(|| at + self.policy.drain);
                quiesce.into_iter().chain(drain).min()
            }
            _ => None,
        }
    }

    /// The next thing to do, given what the driver sees at `now`. Call it
    /// until it returns `None`; each action is returned once.
    pub fn poll(&mut self, now: Time, p: &Progress) -> Option<Action> {
        let client = self.policy.role == Role::Client;
        match self.phase {
            Phase::Over => None,
            Phase::Setup if client && p.presses > 0 => {
                self.phase = Phase::Over;
                Some(Action::Abort(Abort::InterruptedBeforeStart))
            }
            Phase::Setup => None,
            Phase::Running | Phase::Stopping if client && p.presses >= 2 => {
                self.phase = Phase::Over;
                Some(Action::Abort(Abort::InterruptedTwice))
            }
            Phase::Running if client => {
                let time_up = self.planned_end.is_some_and(|t| now >= t);
                let limit = self.planned_end.is_none() && p.limit_reached;
                if time_up || limit || p.all_done || p.presses == 1 {
                    self.interrupted = p.presses == 1 && !time_up;
                    self.begin_stop(now);
                    self.stop_issued = true;
                    return Some(Action::Stop);
                }
                None
            }
            Phase::Running => {
                // A server's senders at their cap: stopped, the rest of
                // the session waits for the peer as before.
                if !self.stop_issued && self.send_end.is_some_and(|t| now >= t) {
                    self.stop_issued = true;
                    self.capped = true;
                    return Some(Action::Stop);
                }
                None
            }
            Phase::Stopping => {
                let at = self.stopped_at.expect("stopping has a stop time");
                if !self.stop_issued {
                    self.stop_issued = true;
                    return Some(Action::Stop);
                }
                if !self.peer_told && (p.quiesced || now >= at + self.policy.quiesce) {
                    self.peer_told = true;
                    return Some(Action::EndPeer);
                }
                if !self.cut && !p.all_done && now >= at + self.policy.drain {
                    self.cut = true;
                    return Some(Action::Cut);
                }
                if !client && p.all_done && !self.reported {
                    self.reported = true;
                    return Some(Action::Report);
                }
                if p.all_done && p.peer_done && self.peer_told {
                    self.phase = Phase::Over;
                    return Some(Action::Finish);
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn client() -> TestRun {
        TestRun::new(Policy {
            role: Role::Client,
            max_duration: None,
            drain: 10 * S,
            quiesce: Duration::ZERO,
        })
    }

    fn server() -> TestRun {
        TestRun::new(Policy {
            role: Role::Server,
            max_duration: None,
            drain: 10 * S,
            quiesce: Duration::ZERO,
        })
    }

    /// Every action `poll` hands out at `now`, in order.
    fn drain(r: &mut TestRun, now: Time, p: Progress) -> Vec<Action> {
        std::iter::from_fn(|| r.poll(now, &p)).collect()
    }

    fn done() -> Progress {
        Progress {
            all_done: true,
            quiesced: true,
            ..Progress::default()
        }
    }

    #[test]
    fn a_timed_client_stops_at_the_planned_end_and_finishes_with_the_results() {
        let t0 = Time::ZERO;
        let mut r = client();
        assert_eq!(drain(&mut r, t0, Progress::default()), []);
        r.start(t0, Some(5 * S));
        assert_eq!(r.next_deadline(), Some(t0 + 5 * S));
        let live = Progress {
            quiesced: true,
            ..Progress::default()
        };
        assert_eq!(drain(&mut r, t0 + 4 * S, live), []);
        assert_eq!(
            drain(&mut r, t0 + 5 * S, live),
            [Action::Stop, Action::EndPeer]
        );
        assert!(!r.interrupted());
        // Flows still reading: nothing until the drain limit.
        assert_eq!(r.next_deadline(), Some(t0 + 15 * S));
        assert_eq!(drain(&mut r, t0 + 6 * S, live), []);
        let results = Progress {
            peer_done: true,
            ..done()
        };
        assert_eq!(drain(&mut r, t0 + 7 * S, results), [Action::Finish]);
        assert_eq!(drain(&mut r, t0 + 8 * S, results), []);
    }

    #[test]
    fn flows_that_do_not_end_within_the_drain_limit_are_cut_once() {
        let t0 = Time::ZERO;
        let mut r = client();
        r.start(t0, Some(S));
        let live = Progress {
            quiesced: true,
            ..Progress::default()
        };
        assert_eq!(drain(&mut r, t0 + S, live), [Action::Stop, Action::EndPeer]);
        assert_eq!(
            drain(&mut r, t0 + 11 * S - Duration::from_nanos(1), live),
            []
        );
        assert_eq!(drain(&mut r, t0 + 11 * S, live), [Action::Cut]);
        assert_eq!(drain(&mut r, t0 + 12 * S, live), []);
        assert_eq!(r.next_deadline(), None);
    }

    #[test]
    fn a_byte_limited_client_stops_when_the_workload_reaches_its_limit() {
        let t0 = Time::ZERO;
        let mut r = client();
        r.start(t0, None);
        assert_eq!(r.next_deadline(), None);
        assert_eq!(drain(&mut r, t0 + 100 * S, Progress::default()), []);
        let reached = Progress {
            limit_reached: true,
            ..done()
        };
        assert_eq!(
            drain(&mut r, t0 + 101 * S, reached),
            [Action::Stop, Action::EndPeer]
        );
        assert!(!r.interrupted());
    }

    #[test]
    fn a_timed_client_whose_flows_all_ended_early_stops_at_once() {
        let t0 = Time::ZERO;
        let mut r = client();
        r.start(t0, Some(10 * S));
        assert_eq!(
            drain(&mut r, t0 + 2 * S, done()),
            [Action::Stop, Action::EndPeer]
        );
        assert!(!r.interrupted());
        let results = Progress {
            peer_done: true,
            ..done()
        };
        assert_eq!(drain(&mut r, t0 + 2 * S, results), [Action::Finish]);
    }

    #[test]
    fn the_first_ctrl_c_stops_and_marks_interrupted_the_second_aborts() {
        let t0 = Time::ZERO;
        let mut r = client();
        r.start(t0, Some(10 * S));
        let one = Progress {
            presses: 1,
            quiesced: true,
            ..Progress::default()
        };
        assert_eq!(
            drain(&mut r, t0 + 2 * S, one),
            [Action::Stop, Action::EndPeer]
        );
        assert!(r.interrupted());
        assert_eq!(r.stopped_at(), Some(t0 + 2 * S));
        let two = Progress { presses: 2, ..one };
        assert_eq!(
            drain(&mut r, t0 + 3 * S, two),
            [Action::Abort(Abort::InterruptedTwice)]
        );
        assert_eq!(drain(&mut r, t0 + 4 * S, two), []);
    }

    #[test]
    fn a_ctrl_c_at_the_planned_end_is_not_an_interruption() {
        let t0 = Time::ZERO;
        let mut r = client();
        r.start(t0, Some(S));
        let one = Progress {
            presses: 1,
            quiesced: true,
            ..Progress::default()
        };
        assert_eq!(drain(&mut r, t0 + S, one), [Action::Stop, Action::EndPeer]);
        assert!(!r.interrupted());
    }

    #[test]
    fn ctrl_c_before_the_start_aborts() {
        let mut r = client();
        let one = Progress {
            presses: 1,
            ..Progress::default()
        };
        assert_eq!(
            drain(&mut r, Time::ZERO, one),
            [Action::Abort(Abort::InterruptedBeforeStart)]
        );
        assert_eq!(
            Abort::InterruptedBeforeStart.message(),
            "interrupted before the test started"
        );
    }

    #[test]
    fn the_peer_is_told_once_quiesced_or_after_the_quiesce_limit() {
        let t0 = Time::ZERO;
        let mut r = TestRun::new(Policy {
            role: Role::Client,
            max_duration: None,
            drain: 10 * S,
            quiesce: S,
        });
        r.start(t0, Some(S));
        let busy = Progress::default();
        assert_eq!(drain(&mut r, t0 + S, busy), [Action::Stop]);
        assert_eq!(r.next_deadline(), Some(t0 + 2 * S));
        assert_eq!(drain(&mut r, t0 + S + S / 2, busy), []);
        assert_eq!(drain(&mut r, t0 + 2 * S, busy), [Action::EndPeer]);

        let mut r = TestRun::new(Policy {
            role: Role::Client,
            max_duration: None,
            drain: 10 * S,
            quiesce: 60 * S,
        });
        r.start(t0, Some(S));
        assert_eq!(drain(&mut r, t0 + S, busy), [Action::Stop]);
        let quiet = Progress {
            quiesced: true,
            ..busy
        };
        assert_eq!(drain(&mut r, t0 + 2 * S, quiet), [Action::EndPeer]);
    }

    fn capped_server(max: Duration) -> TestRun {
        TestRun::new(Policy {
            role: Role::Server,
            max_duration: Some(max),
            drain: 10 * S,
            quiesce: Duration::ZERO,
        })
    }

    #[test]
    fn a_server_stops_its_senders_at_the_planned_end_plus_grace_without_the_peer() {
        let t0 = Time::ZERO;
        let live = Progress::default();
        // Asked for 5 s under a 60 s cap: the senders stop at 6 s.
        let mut r = capped_server(60 * S);
        r.start(t0, Some(5 * S));
        assert_eq!(r.next_deadline(), Some(t0 + 6 * S));
        assert_eq!(drain(&mut r, t0 + 5 * S, live), []);
        assert_eq!(r.capped(), None);
        assert_eq!(drain(&mut r, t0 + 6 * S, live), [Action::Stop]);
        assert!(r.capped().is_some_and(|w| w.contains("--max-duration")));
        // Nothing more by time alone until the peer stops; then no second
        // Stop, and the session ends as usual.
        assert_eq!(r.next_deadline(), None);
        assert_eq!(drain(&mut r, t0 + 60 * S, live), []);
        r.peer_stopped(t0 + 70 * S);
        assert_eq!(drain(&mut r, t0 + 70 * S, done()), [Action::Report]);

        // A byte-limited test (no planned length) stops at the cap.
        let mut r = capped_server(5 * S);
        r.start(t0, None);
        assert_eq!(r.next_deadline(), Some(t0 + 6 * S));
        assert_eq!(drain(&mut r, t0 + 6 * S, live), [Action::Stop]);

        // A peer that stops in time never meets the cap.
        let mut r = capped_server(5 * S);
        r.start(t0, Some(5 * S));
        r.peer_stopped(t0 + 5 * S);
        assert_eq!(drain(&mut r, t0 + 5 * S, live), [Action::Stop]);
        assert_eq!(drain(&mut r, t0 + 7 * S, done()), [Action::Report]);
        assert_eq!(r.capped(), None);
    }

    #[test]
    fn a_server_stops_when_asked_reports_when_done_and_finishes_with_the_peer() {
        let t0 = Time::ZERO;
        let mut r = server();
        // No planned end and no Ctrl-C on a server: only the peer stops it.
        r.start(t0, Some(S));
        let one = Progress {
            presses: 1,
            ..Progress::default()
        };
        assert_eq!(drain(&mut r, t0 + 5 * S, one), []);
        r.peer_stopped(t0 + 5 * S);
        assert_eq!(
            drain(&mut r, t0 + 5 * S, Progress::default()),
            [Action::Stop]
        );
        assert_eq!(drain(&mut r, t0 + 6 * S, done()), [Action::Report]);
        assert_eq!(drain(&mut r, t0 + 6 * S, done()), []);
        let results = Progress {
            peer_done: true,
            ..done()
        };
        assert_eq!(drain(&mut r, t0 + 7 * S, results), [Action::Finish]);
    }

    #[test]
    fn a_server_cuts_flows_that_outlive_the_drain_and_then_reports() {
        let t0 = Time::ZERO;
        let mut r = server();
        r.start(t0, None);
        r.peer_stopped(t0);
        assert_eq!(drain(&mut r, t0, Progress::default()), [Action::Stop]);
        assert_eq!(r.next_deadline(), Some(t0 + 10 * S));
        assert_eq!(
            drain(&mut r, t0 + 10 * S, Progress::default()),
            [Action::Cut]
        );
        assert_eq!(drain(&mut r, t0 + 10 * S, done()), [Action::Report]);
    }

    #[test]
    fn a_stop_before_the_start_is_ignored_and_a_planned_end_past_instant_is_none() {
        let t0 = Time::ZERO;
        let mut r = server();
        r.peer_stopped(t0);
        assert!(!r.started());
        assert_eq!(drain(&mut r, t0, done()), []);
        let mut c = client();
        c.start(t0, Some(Duration::MAX));
        assert_eq!(c.next_deadline(), None);
    }
}
