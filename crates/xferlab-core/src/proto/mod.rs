//! xferlab's control protocol as sans-IO state machines (docs/protocol.md).
//!
//! [`ClientControl`] and [`ServerControl`] never touch a socket or a clock:
//! the driver feeds them received bytes and the current `Time`, writes out
//! what `poll_transmit` returns, sleeps until `poll_timeout`, and acts on the
//! events from `poll_event`. Every wait has a deadline, so a silent or
//! half-open peer always ends in an event rather than a hang.

pub mod auth;
mod client;
#[cfg(any(test, feature = "fuzz"))]
pub(crate) mod fixtures;
mod message;
pub mod order;
mod server;
pub mod wire;

pub use client::{ClientControl, ClientEvent};
pub use message::{ClientMsg, ErrorCode, ServerMsg, Welcome};
pub use server::{PolicyError, ServerControl, ServerEvent, ServerPolicy};

use std::time::Duration;

use crate::result::SideReport;
use crate::spec::TestSpec;

/// Largest frame accepted during the handshake and while running.
pub const MAX_SMALL_FRAME: u32 = 64 * 1024;
/// Largest results frame of any test (a side's full report with every
/// interval); a test's own limit is [`results_frame_limit`].
pub const MAX_RESULTS_FRAME: u32 = 64 * 1024 * 1024;
/// Room left in a results frame for the message around the report.
const FRAMING: usize = 4096;
/// Upper bounds, with room, on a report's JSON: the report around its
/// flows (host, software, CPU, warnings), each flow's totals, each
/// interval of a flow or of a per-direction sum. Measured on loopback
/// (`stream -J -i 0.2`): a TCP flow's interval with its TCP_INFO sample
/// is 390 bytes, a UDP one 330, a flow's totals under 400 bytes, the
/// rest a few KiB.
const REPORT_JSON: u64 = 256 * 1024;
const FLOW_JSON: u64 = 16 * 1024;
const INTERVAL_JSON: u64 = 1024;
/// Most intervals a side keeps for a test's flows together (see
/// [`interval_budget`]).
pub const INTERVAL_BUDGET: u64 = 64 * 1024;

/// Every flow a side reports on: the stream flows (an rr test's
/// background streams among them) and an rr test's request/response
/// flows.
fn flow_count(spec: &TestSpec) -> usize {
    let rr = match &spec.pattern {
        crate::spec::Pattern::Rr(r) => r.flows as usize,
        crate::spec::Pattern::Stream => 0,
    };
    spec.flows().len() + rr
}

/// The largest results frame for `spec` on a server whose tests last at
/// most `max_duration`: what a report with all of the test's flows and
/// intervals needs, never more than [`MAX_RESULTS_FRAME`]. Both sides
/// know it (the client from the welcome); a side's report is trimmed to
/// fit it, and a larger frame from the peer is refused on its length
/// prefix. So what a peer can make the other side buffer and parse is
/// proportional to its own test's flows x intervals.
pub fn results_frame_limit(spec: &TestSpec, max_duration: Duration) -> u32 {
    let secs = spec
        .planned_seconds()
        .unwrap_or(f64::INFINITY)
        .min(max_duration.as_secs_f64());
    frame_bytes(flow_count(spec) as u64, 0, secs, spec.interval_s)
}

/// What a flow that did nothing (never attached, made no transaction)
/// adds to a report: its id, addresses, an empty total and how it ended
/// (an rr flow's is about 300 bytes).
const IDLE_FLOW_JSON: u64 = 1024;

/// The largest results frame a server takes from its client once the
/// test is over: [`results_frame_limit`]'s arithmetic on what the test
/// actually did instead of what it planned, namely the flows of the
/// server's own report that moved data or answered a request, the others
/// at [`IDLE_FLOW_JSON`], over the time the server's side ran (twice it,
/// for the client's clock), never more than `planned`. A hello that
/// plans 8,192 rr flows and attaches none leaves the client room for
/// 8 MiB, not the 64 MiB cap (issue 34).
pub fn results_frame_limit_done(spec: &TestSpec, own: &SideReport, planned: u32) -> u32 {
    let rr_busy = own.rr().map_or(0, |rr| {
        rr.flows
            .iter()
            .filter(|f| f.total.requests > 0 || f.total.transactions > 0)
            .count()
    });
    let busy = (own.flows.len() + rr_busy) as u64;
    let idle = (flow_count(spec) as u64).saturating_sub(busy);
    let secs = 2.0 * own.duration_s.max(0.0) + 1.0;
    frame_bytes(busy, idle, secs, spec.interval_s).min(planned)
}

/// A report's JSON bound for `flows` with intervals over `secs` at
/// `interval_s`, and `idle` flows that did nothing.
fn frame_bytes(flows: u64, idle: u64, secs: f64, interval_s: f64) -> u32 {
    let intervals = if interval_s > 0.0 {
        (secs / interval_s).ceil().min(u32::MAX as f64) as u64 + 2
    } else {
        2
    };
    // Per-direction sums are series of their own.
    let series = flows + 4;
    let n = REPORT_JSON
        .saturating_add(FLOW_JSON.saturating_mul(flows))
        .saturating_add(IDLE_FLOW_JSON.saturating_mul(idle))
        .saturating_add(
            INTERVAL_JSON
                .saturating_mul(series)
                .saturating_mul(intervals),
        );
    n.min(u64::from(MAX_RESULTS_FRAME)) as u32
}

/// The interval (seconds) a server keeps its own side's intervals at:
/// the client's `-i`, or coarser when the test's flows x intervals would
/// exceed [`INTERVAL_BUDGET`] (a multiple of `-i`, so boundaries still
/// line up). Bounds what one long test with many flows and fine
/// intervals makes the server hold.
pub fn interval_budget(spec: &TestSpec, max_duration: Duration) -> f64 {
    let i = spec.interval_s;
    if i <= 0.0 {
        return i;
    }
    let flows = flow_count(spec).max(1) as f64;
    let secs = spec
        .planned_seconds()
        .unwrap_or(f64::INFINITY)
        .min(max_duration.as_secs_f64());
    let wanted = flows * secs / i;
    if wanted <= INTERVAL_BUDGET as f64 {
        return i;
    }
    i * (wanted / INTERVAL_BUDGET as f64).ceil()
}
/// How long each handshake step may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a server waits for a test's data connections, whatever the
/// client asks (`attach_wait_s` in its hello): long enough for a TCP
/// connect whose SYNs meet 20 % loss five times (retries after 1, 3, 7,
/// 15 and 31 s), short enough that a client that never attaches holds a
/// session slot for one minute at most.
pub const MAX_ATTACH_WAIT: Duration = Duration::from_secs(60);

/// How long both ends wait, after the welcome, for every data connection
/// to attach: what the client asked, within [`HANDSHAKE_TIMEOUT`] and
/// [`MAX_ATTACH_WAIT`].
pub fn attach_wait(asked_s: Option<f64>) -> Duration {
    asked_s
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .unwrap_or(HANDSHAKE_TIMEOUT)
        .clamp(HANDSHAKE_TIMEOUT, MAX_ATTACH_WAIT)
}
/// How long, after stopping, a side may take to drain its flows and send
/// its results.
pub const RESULTS_TIMEOUT: Duration = Duration::from_secs(30);
/// Slack a running duration test gets past its planned end before the
/// server gives up on the client.
pub const RUNNING_GRACE: Duration = Duration::from_secs(15);

/// A side's report as it goes on the wire: whole when it fits in `limit`
/// bytes of JSON, else without per-flow intervals (per-direction sums and
/// totals stay) and with a warning saying so. A long `-P 128` test with
/// fine intervals can outgrow a results frame; the test's totals must not
/// be lost for it.
fn fit_report(report: &SideReport, limit: usize) -> Box<SideReport> {
    let size = serde_json::to_vec(report).map_or(usize::MAX, |v| v.len());
    let mut r = Box::new(report.clone());
    if size > limit {
        for f in &mut r.flows {
            f.intervals.clear();
        }
        if let crate::result::PatternReport::Rr(rr) = &mut r.pattern {
            for f in &mut rr.flows {
                f.intervals.clear();
            }
        }
        r.warnings.push(format!(
            "per-flow intervals left out of this side's report: {size} bytes of JSON exceed the {limit}-byte results limit (per-direction sums are kept)"
        ));
    }
    r
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The first bytes are not xferlab's magic.
    #[error("the peer does not speak the xferlab protocol")]
    NotXferlab,
    /// The peer speaks another protocol version.
    #[error("protocol version mismatch: this side speaks v{ours}, the peer v{theirs}; run the same xferlab release on both ends")]
    VersionMismatch { ours: u16, theirs: u16 },
    /// A frame or message that does not parse or is not allowed now.
    #[error("malformed control message: {0}")]
    Malformed(String),
    /// A frame longer than the current limit.
    #[error("control message of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: u32, max: u32 },
    /// The peer closed the connection at a point where it must not.
    #[error("the peer closed the control connection {0}")]
    Closed(&'static str),
    /// A step took longer than its deadline.
    #[error("timed out {0}")]
    Timeout(&'static str),
    /// The server asks for a key and this client has none.
    #[error("the server requires authentication: pass --auth-key FILE with a key it holds")]
    AuthRequired,
    /// The client's answer to the challenge does not verify.
    #[error(
        "authentication failed: the client's key does not match any key of the server (--auth-key)"
    )]
    AuthFailed,
    /// The peer sent an error message.
    #[error("peer reported {}: {message}", code.as_str())]
    Peer { code: ErrorCode, message: String },
}

impl ProtoError {
    /// The code sent to the peer when this side fails for this reason.
    pub fn code(&self) -> ErrorCode {
        match self {
            ProtoError::VersionMismatch { .. } => ErrorCode::VersionMismatch,
            ProtoError::NotXferlab | ProtoError::Malformed(_) | ProtoError::TooLarge { .. } => {
                ErrorCode::BadMessage
            }
            ProtoError::Timeout(_) => ErrorCode::Timeout,
            ProtoError::AuthRequired | ProtoError::AuthFailed => ErrorCode::AuthFailed,
            ProtoError::Closed(_) | ProtoError::Peer { .. } => ErrorCode::Aborted,
        }
    }
}

#[cfg(test)]
mod tests;
