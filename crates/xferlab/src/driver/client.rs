//! The client's event loop, for every pattern and both control protocols
//! (xferlab's own and iperf3's) and for tests without one (USB bulk): wait
//! on one channel with one deadline, feed the control machine, tick the
//! workload, and perform what [`TestRun`] decides.

use crate::sys::clock;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;
use xferlab_core::time::Time;

use xferlab_core::outbox::{Machine, NoPeer};
use xferlab_core::run::{Action, Policy, Progress, Role, TestRun};

use super::{Interrupts, Workload};
use crate::control::{ControlIo, Wake};
use crate::output::Reporter;

/// How often the loop looks at the Ctrl-C counter while idle.
const INTERRUPT_POLL: Duration = Duration::from_millis(100);

/// What the loop shares with the role while it handles an event.
pub struct Cx<'a> {
    pub now: Time,
    pub workload: &'a mut Option<Box<dyn Workload>>,
    pub run: &'a mut TestRun,
    pub reporter: &'a mut dyn Reporter,
    /// The first error ends the loop (after this pass).
    pub error: &'a mut Option<String>,
}

impl Cx<'_> {
    /// The workload started at `at`: the run's clock starts.
    pub fn started(&mut self, w: Box<dyn Workload>, at: Time, planned: Option<Duration>) {
        *self.workload = Some(w);
        self.run.start(at, planned);
    }

    /// Records the first error.
    pub fn fail(&mut self, why: String) {
        self.error.get_or_insert(why);
    }
}

/// A client's side of one control protocol.
pub trait ClientRole {
    type Ctl: Machine;
    fn ctl(&mut self) -> &mut Self::Ctl;
    /// One event of the control machine. Starting the workload is the
    /// role's job ([`Cx::started`]).
    fn on_event(&mut self, ev: <Self::Ctl as Machine>::Event, cx: &mut Cx<'_>);
    /// Tells the server the test is over.
    fn end_peer(&mut self, now: Time);
    /// Gives up, telling the server why.
    fn abort_peer(&mut self, why: &str);
    /// The server's part is complete (its results arrived).
    fn peer_done(&self) -> bool;
    /// Anything the protocol does on every wake besides the run's
    /// decisions (iperf3: hand over results when asked).
    fn step(&mut self, _cx: &mut Cx<'_>) {}
    /// When `step` must run next.
    fn deadline(&self, _run: &TestRun) -> Option<Time> {
        None
    }
}

/// How the loop ended: the workload (if it started), the run, and the
/// first error.
pub struct Driven {
    pub workload: Option<Box<dyn Workload>>,
    pub run: TestRun,
    pub error: Option<String>,
}

/// What a result says when the first Ctrl-C ended the test after
/// `duration_s` seconds and nothing else went wrong.
pub fn interruption(duration_s: f64) -> String {
    format!("interrupted by the user after {duration_s:.1} s")
}

/// The connection a client's control machine talks to its peer over, and
/// the peer's address (for messages).
pub type Control<'a> = (&'a mut ControlIo, SocketAddr);

/// Runs the client's loop until the run finishes, an error ends it or
/// the control connection closes. `control` is None for a test without
/// one (see [`drive_alone`]), whose machine sends nothing.
pub fn drive<R: ClientRole>(
    role: &mut R,
    mut control: Option<Control<'_>>,
    rx: &mpsc::Receiver<Wake>,
    reporter: &mut dyn Reporter,
    interrupts: &Interrupts,
    policy: Policy,
) -> Driven {
    let mut run = TestRun::new(policy);
    let mut workload: Option<Box<dyn Workload>> = None;
    let mut error: Option<String> = None;
    let mut finished = false;
    'run: loop {
        let now = clock::now();
        role.ctl().handle_timeout(now);
        let mut cx = Cx {
            now,
            workload: &mut workload,
            run: &mut run,
            reporter,
            error: &mut error,
        };
        while let Some(ev) = role.ctl().poll_event() {
            role.on_event(ev, &mut cx);
        }
        // After the events, so conditions they change (results arrived, a
        // flow ended) are acted on at once rather than at the next wake.
        if let Some(w) = cx.workload.as_mut().filter(|_| cx.run.started()) {
            w.tick(now, Some(&mut *cx.reporter));
        }
        role.step(&mut cx);
        loop {
            let p = Progress {
                presses: interrupts.load(Ordering::Relaxed),
                all_done: workload.as_ref().is_none_or(|w| w.all_done()),
                limit_reached: workload.as_ref().is_some_and(|w| w.limit_reached()),
                quiesced: workload.as_ref().is_none_or(|w| w.quiesced()),
                peer_done: role.peer_done(),
            };
            let Some(action) = run.poll(now, &p) else {
                break;
            };
            match action {
                Action::Stop => workload.iter_mut().for_each(|w| w.stop(now)),
                Action::EndPeer => role.end_peer(now),
                Action::Cut => workload.iter_mut().for_each(|w| w.abort(super::CUT_CLIENT)),
                Action::Abort(why) => {
                    error = Some(why.message().into());
                    workload
                        .iter_mut()
                        .for_each(|w| w.abort("aborted by the user"));
                    role.abort_peer(why.peer_message());
                }
                // What the machine queued last (iperf3's IPERF_DONE) still
                // goes out.
                Action::Finish => finished = true,
                // Only a server session reports on its own.
                Action::Report => {}
            }
        }
        while let Some(bytes) = role.ctl().poll_transmit() {
            let Some((io, server)) = control.as_mut() else {
                unreachable!("a test without a control connection has a machine that sends nothing")
            };
            if let Err(e) = io.send(&bytes) {
                error.get_or_insert(format!("lost the control connection to {server}: {e}"));
                break 'run;
            }
        }
        if finished || error.is_some() || role.ctl().is_closed() {
            break 'run;
        }
        let wait = [
            workload.as_ref().and_then(|w| w.next_tick()),
            run.next_deadline(),
            role.ctl().poll_timeout(),
            role.deadline(&run),
        ]
        .into_iter()
        .flatten()
        .min()
        .map_or(INTERRUPT_POLL, |t| {
            t.duration_since(clock::now()).min(INTERRUPT_POLL)
        });
        match rx.recv_timeout(wait) {
            Ok(Wake::Control(b)) => role.ctl().handle_input(clock::now(), &b),
            Ok(Wake::ControlClosed) => role.ctl().handle_eof(),
            // The loop reaps and re-checks on every wake.
            Ok(Wake::FlowDone | Wake::Attach(..)) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => unreachable!("the loop holds a sender"),
        }
    }
    Driven {
        workload,
        run,
        error,
    }
}

/// The client's side of a test without a control connection: its workload
/// starts before the loop, and the loop only keeps the test's time, the
/// intervals, Ctrl-C and the drain.
struct Alone {
    ctl: NoPeer,
    start: Option<(Box<dyn Workload>, Time, Option<Duration>)>,
}

impl ClientRole for Alone {
    type Ctl = NoPeer;

    fn ctl(&mut self) -> &mut NoPeer {
        &mut self.ctl
    }

    fn on_event(&mut self, ev: std::convert::Infallible, _cx: &mut Cx<'_>) {
        match ev {}
    }

    fn end_peer(&mut self, _now: Time) {}

    fn abort_peer(&mut self, _why: &str) {}

    fn peer_done(&self) -> bool {
        true
    }

    fn step(&mut self, cx: &mut Cx<'_>) {
        if let Some((w, at, planned)) = self.start.take() {
            cx.started(w, at, planned);
        }
    }
}

/// Runs `workload`, started at `at` for `planned` (None: until it reaches
/// its own limit), on the client's loop without a peer: the loop stops it
/// at the planned end or the first Ctrl-C, and cuts it when it has not
/// ended `drain` after the stop. Its threads wake the loop through `rx`'s
/// sender.
pub fn drive_alone(
    workload: Box<dyn Workload>,
    (at, planned): (Time, Option<Duration>),
    drain: Duration,
    rx: &mpsc::Receiver<Wake>,
    reporter: &mut dyn Reporter,
    interrupts: &Interrupts,
) -> Driven {
    let mut role = Alone {
        ctl: NoPeer::new(),
        start: Some((workload, at, planned)),
    };
    let policy = Policy {
        role: Role::Client,
        max_duration: None,
        drain,
        // No peer to tell.
        quiesce: Duration::ZERO,
    };
    drive(&mut role, None, rx, reporter, interrupts, policy)
}
