//! A server session's event loop, for every pattern and both control
//! protocols: wait on one channel with one deadline, feed the control
//! machine, take the flows that attach, tick the workload, and perform
//! what [`TestRun`] decides once the client asks to stop.

use crate::sys::clock;
use std::sync::mpsc;
use std::time::Duration;
use xferlab_core::time::Time;

use xferlab_core::outbox::Machine;
use xferlab_core::result::SideReport;
use xferlab_core::run::{Action, Policy, Progress, TestRun};

use super::Workload;
use crate::control::{ControlIo, Wake};
use crate::net::FlowSocket;

/// The longest sleep with no deadline: every flow or engine thread wakes
/// the loop when it ends (after recording its end), so this only bounds
/// how stale a missed wake-up can leave the session.
const IDLE_WAKE: Duration = Duration::from_secs(1);

/// What the loop shares with the role while it handles an event.
pub struct SessionCx<'a> {
    pub now: Time,
    pub workload: &'a mut Option<Box<dyn Workload>>,
    pub run: &'a mut TestRun,
    /// Why the session ended early, for the log.
    pub failure: &'a mut Option<String>,
}

impl SessionCx<'_> {
    /// The workload started at `at`; `planned` is the test's length (it
    /// caps what the server sends, see [`Workload::capped_by_plan`]).
    pub fn started(&mut self, w: Box<dyn Workload>, at: Time, planned: Option<Duration>) {
        let cap = planned.filter(|_| w.capped_by_plan());
        *self.workload = Some(w);
        self.run.start(at, cap);
    }

    /// Records the first failure.
    pub fn fail(&mut self, why: String) {
        self.failure.get_or_insert(why);
    }
}

/// A server's side of one control protocol.
pub trait SessionRole {
    type Ctl: Machine;
    fn ctl(&mut self) -> &mut Self::Ctl;
    /// One event of the control machine (the client asked for a test, to
    /// stop, sent its results, failed).
    fn on_event(&mut self, ev: <Self::Ctl as Machine>::Event, cx: &mut SessionCx<'_>);
    /// A data connection or UDP socket presented this session's token.
    fn on_attach(&mut self, flow: u32, socket: FlowSocket, cx: &mut SessionCx<'_>);
    /// On every wake: start the workload once every flow is here.
    fn step(&mut self, _cx: &mut SessionCx<'_>) {}
    /// The workload ended after the stop: send this side's report.
    fn report(&mut self, now: Time, report: SideReport);
    /// The exchange is over (results traded, or failed).
    fn finished(&self) -> bool;
}

/// Runs a session until the exchange is over, the control connection is
/// lost or the machine closes. Returns why it ended early, if it did;
/// a workload still running then is aborted with that reason.
pub fn serve<R: SessionRole>(
    role: &mut R,
    io: &mut ControlIo,
    rx: &mpsc::Receiver<Wake>,
    policy: Policy,
    cut: &str,
) -> Option<String> {
    let mut run = TestRun::new(policy);
    let mut workload: Option<Box<dyn Workload>> = None;
    let mut failure: Option<String> = None;
    loop {
        let now = clock::now();
        role.ctl().handle_timeout(now);
        let mut cx = SessionCx {
            now,
            workload: &mut workload,
            run: &mut run,
            failure: &mut failure,
        };
        while let Some(ev) = role.ctl().poll_event() {
            role.on_event(ev, &mut cx);
        }
        role.step(&mut cx);
        // After the events, so a stop that arrives when every flow has
        // already ended is answered at once rather than at the next wake.
        if !role.finished() {
            if let Some(w) = workload.as_mut() {
                w.tick(now, None);
            }
            loop {
                let p = Progress {
                    all_done: workload.as_ref().is_none_or(|w| w.all_done()),
                    quiesced: true,
                    peer_done: role.finished(),
                    ..Progress::default()
                };
                match run.poll(now, &p) {
                    None => break,
                    Some(Action::Stop) => workload.iter_mut().for_each(|w| w.stop(now)),
                    Some(Action::Cut) => workload.iter_mut().for_each(|w| w.abort(cut)),
                    Some(Action::Report) => {
                        if let Some(w) = workload.take() {
                            let mut report = w.finish().into_report(&mut failure);
                            report.warnings.extend(run.capped());
                            role.report(clock::now(), report);
                        }
                    }
                    Some(_) => {}
                }
            }
        }
        let mut lost = false;
        while let Some(bytes) = role.ctl().poll_transmit() {
            if io.send(&bytes).is_err() {
                failure.get_or_insert_with(|| "control connection lost".into());
                lost = true;
                break;
            }
        }
        if lost || role.finished() || role.ctl().is_closed() {
            break;
        }
        let wait = [
            workload.as_ref().and_then(|w| w.next_tick()),
            run.next_deadline(),
            role.ctl().poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
        .map_or(IDLE_WAKE, |t| t.duration_since(clock::now()));
        match rx.recv_timeout(wait) {
            Ok(Wake::Control(b)) => role.ctl().handle_input(clock::now(), &b),
            Ok(Wake::ControlClosed) => role.ctl().handle_eof(),
            // The loop reaps and re-checks on every wake.
            Ok(Wake::FlowDone) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(Wake::Attach(flow, socket)) => {
                let mut cx = SessionCx {
                    now: clock::now(),
                    workload: &mut workload,
                    run: &mut run,
                    failure: &mut failure,
                };
                role.on_attach(flow, socket, &mut cx);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if let Some(mut w) = workload {
        w.abort(failure.as_deref().unwrap_or("session ended"));
    }
    failure
}
