//! The one event loop per role that every test runs on, and the
//! [`Workload`] interface a pattern implements to run on it.
//!
//! A test is three things: a control protocol (a sans-IO
//! [`Machine`](xferlab_core::outbox::Machine): xferlab's own or iperf3's),
//! a workload (the data threads of a pattern: stream flows, rr engines)
//! and the decisions of when to stop, drain, cut or abort, which
//! [`TestRun`](xferlab_core::run::TestRun) makes on the time passed in.
//! The loops here only wait, feed and perform: [`client::drive`] for the
//! client of any protocol, [`client::drive_alone`] for a test without a
//! peer (USB bulk), [`session::serve`] for a server session.
//!
//! # Adding a pattern
//! 1. The spec and the report in the core (`xferlab_core::spec`, `result`).
//! 2. A [`Workload`] in the binary: the threads that move the data, with
//!    their per-interval output and their report.
//! 3. A [`ClientPattern`](crate::session::client::ClientPattern) (connect
//!    the pattern's flows once the server welcomed the test, then start
//!    the workload) and a
//!    [`SessionPattern`](crate::session::server::SessionPattern) (the
//!    server's sockets, attachments and workload), each registered by one
//!    line in [`crate::patterns`].
//!
//! The loops, Ctrl-C, the drain and the results exchange come for free.

pub mod client;
pub mod session;

use std::sync::atomic::AtomicU32;
use std::time::Duration;
use xferlab_core::time::Time;

use xferlab_core::result::SideReport;

use crate::output::Reporter;

/// Ctrl-C presses seen so far (set from the signal handler).
pub type Interrupts = AtomicU32;

/// How long the flows of a stopped test may take to end by themselves
/// (receivers read what is still in flight) before they are cut.
pub const DRAIN: Duration = Duration::from_secs(10);

/// How a flow cut by the drain ends, on the client and on the server.
pub const CUT_CLIENT: &str = "no end of stream within 10 s after the test stopped: flows cut";
pub const CUT_SERVER: &str = "no end of stream within 10 s after the client stopped: flows cut";

/// Whether a flow ended because the drain after a stop ran out: of a
/// time-limited test, what it measured is whole (the window ended at the
/// stop; what was still queued behind a lossy path is not part of it).
pub fn cut_by_drain(end: &xferlab_core::result::FlowEnd) -> bool {
    matches!(end, xferlab_core::result::FlowEnd::Aborted(r) if r == CUT_CLIENT || r == CUT_SERVER)
}

/// The data side of one running test, as the loops drive it. Every method
/// is called from the loop's thread, never from the data path.
pub trait Workload {
    /// Reaps flows that ended and hands the intervals that ended by `now`
    /// to `out` (a server session has none).
    fn tick(&mut self, now: Time, out: Option<&mut dyn Reporter>);
    /// When `tick` has an interval to report next.
    fn next_tick(&self) -> Option<Time>;
    /// Stops the senders; receivers keep reading what is in flight.
    fn stop(&mut self, now: Time);
    /// Ends every flow now; `why` goes into the report's warnings.
    fn abort(&mut self, why: &str);
    /// Ends every flow now, receivers too, keeping what they counted as a
    /// normal end (a stock iperf3 peer ends a test on the control
    /// connection without closing its data connections first).
    fn cut(&mut self, now: Time) {
        self.stop(now);
        self.abort("cut at the end of the test");
    }
    /// Every flow has ended.
    fn all_done(&self) -> bool;
    /// Whether a server's sending stops at the test's planned length
    /// (plus [`xferlab_core::run::SEND_GRACE`]) when the client's stop has
    /// not come. A workload whose sending answers the client says no (rr:
    /// the client says stop only once its last transaction is answered,
    /// which a lossy path may delay past that): it is capped at the
    /// server's --max-duration alone.
    fn capped_by_plan(&self) -> bool {
        true
    }
    /// A test without a planned duration reached its own end (a byte
    /// limit: every sender sent its share).
    fn limit_reached(&self) -> bool {
        self.all_done()
    }
    /// After the stop: the peer may be told the test is over. A stream
    /// says yes at once; rr once every transaction was answered, so both
    /// ends count the same ones.
    fn quiesced(&self) -> bool {
        true
    }
    /// The peer's count of what it sent per flow (flow id, bytes), when
    /// its results arrive before ours go out (an iperf3 client's do):
    /// receivers may end once they have it.
    fn peer_sent(&mut self, _sent: &[(u32, u64)]) {}
    /// Waits for the threads and builds this side's report.
    fn finish(self: Box<Self>) -> Finished;
}

/// What a workload ends with: this side's report, and what went wrong that
/// the report cannot say, one actionable line each, for the result's
/// errors (a USB endpoint that stalled, data that broke the pattern).
/// Socket workloads have none: a flow's end is in its report.
pub struct Finished {
    pub report: SideReport,
    pub errors: Vec<String>,
}

impl From<SideReport> for Finished {
    fn from(report: SideReport) -> Self {
        Finished {
            report,
            errors: Vec::new(),
        }
    }
}

impl Finished {
    /// The report, the workload's errors folded into `error`: the one
    /// error line of a test that has a peer (the first error wins, as in
    /// the loops).
    pub fn into_report(self, error: &mut Option<String>) -> SideReport {
        if let Some(e) = self.errors.into_iter().next() {
            error.get_or_insert(e);
        }
        self.report
    }
}
