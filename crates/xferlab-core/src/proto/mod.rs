//! xferlab's control protocol as sans-IO state machines (docs/protocol.md).
//!
//! [`ClientControl`] and [`ServerControl`] never touch a socket or a clock:
//! the driver feeds them received bytes and the current `Time`, writes out
//! what `poll_transmit` returns, sleeps until `poll_timeout`, and acts on the
//! events from `poll_event`. Every wait has a deadline, so a silent or
//! half-open peer always ends in an event rather than a hang.

mod client;
mod message;
mod server;
pub mod wire;

pub use client::{ClientControl, ClientEvent};
pub use message::{ClientMsg, ErrorCode, ServerMsg, Welcome};
pub use server::{PolicyError, ServerControl, ServerEvent, ServerPolicy};

use std::time::Duration;

use crate::result::SideReport;

/// Largest frame accepted during the handshake and while running.
pub const MAX_SMALL_FRAME: u32 = 64 * 1024;
/// Largest results frame (a side's full report with every interval).
pub const MAX_RESULTS_FRAME: u32 = 64 * 1024 * 1024;
/// Reports are trimmed to fit below this (room left for the framing).
const RESULTS_LIMIT: usize = MAX_RESULTS_FRAME as usize - 4096;
/// How long each handshake step may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
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
            ProtoError::Closed(_) | ProtoError::Peer { .. } => ErrorCode::Aborted,
        }
    }
}

#[cfg(test)]
mod tests;
