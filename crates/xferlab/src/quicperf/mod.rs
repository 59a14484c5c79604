//! The QUIC performance protocol (draft-banks-quic-performance-00, ALPN
//! `perf`; the state machines are [`xferlab_core::transport::quic::perf`])
//! with foreign peers, as [`crate::iperf3`] is iperf3's:
//!
//! * [`client`]: `xferlab stream --quic --quic-perf HOST` tests against any
//!   perf server (quinn's perf_server, secnetperf, picoquic, aioquic-based
//!   ones, `xferlab server --quic-perf`), its flows the QUIC transport's
//!   flows speaking the protocol (`transport::quic::perf`);
//! * [`server`]: `xferlab server --quic-perf PORT` serves any perf client
//!   on a UDP port of its own, under the server's limits and budgets.

pub mod client;
pub mod server;

use std::io;

/// Why the perf port or a perf client cannot start: one line naming the
/// cause and the fix.
#[derive(Debug, thiserror::Error)]
pub enum QuicPerfError {
    #[error("UDP port {port} is already in use: stop the other server or pick another port with --quic-perf")]
    PortInUse { port: u16 },
    #[error("cannot bind UDP port {port} for --quic-perf: {err}")]
    Bind { port: u16, err: io::Error },
    #[error("--quic-perf needs the server: xferlab stream --quic --quic-perf HOST[:PORT]")]
    NoHost,
    #[error("--quic-perf: {0}")]
    Tls(String),
    #[error(transparent)]
    Setup(#[from] crate::transport::SetupError),
    #[error(transparent)]
    Pattern(#[from] crate::session::PatternError),
    #[error("cannot reach {server} for --quic-perf: {err}")]
    Reach {
        server: std::net::SocketAddr,
        err: io::Error,
    },
}
