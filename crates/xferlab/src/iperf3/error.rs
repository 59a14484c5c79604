//! Why a test with a stock iperf3 peer could not run, or a stream of one
//! could not be opened or taken: one line naming the cause.

use std::io;
use std::net::SocketAddr;

use xferlab_core::iperf3::convert::Inexpressible;

use crate::net::sockopt::SockoptError;
use crate::net::NetError;
use crate::session::PatternError;
use crate::transport::SetupError;

#[derive(Debug, thiserror::Error)]
pub enum Iperf3Error {
    #[error(transparent)]
    Inexpressible(#[from] Inexpressible),
    #[error("no randomness for the cookie: {0}")]
    Randomness(getrandom::Error),
    #[error(transparent)]
    Net(#[from] NetError),
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error(transparent)]
    Sockopt(#[from] SockoptError),
    #[error(transparent)]
    Pattern(#[from] PatternError),
    #[error("the control connection: {0}")]
    Control(io::Error),
    #[error("the iperf3 server asked for {asked} streams where {planned} were planned")]
    Streams { asked: usize, planned: usize },
    #[error("iperf3 servers speak TCP and UDP only")]
    NotTcpUdp,
    #[error("cannot open iperf3 stream {id}: {err}")]
    OpenStream { id: u32, err: io::Error },
    #[error("cannot {what} {server} over UDP: {err}")]
    Udp {
        what: &'static str,
        server: SocketAddr,
        err: io::Error,
    },
    #[error("no answer to UDP stream {id}'s handshake from {server} within {seconds} s: is UDP to that port blocked?")]
    NoUdpAnswer {
        id: u32,
        server: SocketAddr,
        seconds: u64,
    },
    #[error("the iperf3 server's UDP port {port} is closed (stream {id})")]
    UdpPortClosed { port: u16, id: u32 },
    /// The test ended before its streams started: the driver's reason.
    #[error("{0}")]
    NotStarted(String),
    #[error("closed a data connection that no stream was due for")]
    NoStreamDue,
    #[error("stream {0} does not fit the test")]
    Misfit(u32),
}
