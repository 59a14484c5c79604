//! Why a pattern could not set up, attach or start its flows (the seam
//! between a session and its pattern, both ends), and why a client test
//! could not run at all. Each is the one line the user sees; a server
//! sends it to its peer in the refusal.

use std::io;
use std::net::{IpAddr, SocketAddr};

use crate::net::sockopt::SockoptError;
use crate::net::NetError;
use crate::transport::SetupError;

#[derive(Debug, thiserror::Error)]
pub enum PatternError {
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error(transparent)]
    Sockopt(#[from] SockoptError),
    #[error("cannot {what}: {err}")]
    Io { what: String, err: io::Error },
    #[error("cannot start a thread: {0}")]
    Thread(io::Error),
    #[error("a flow's connect thread panicked")]
    Panicked,
    #[error("the server sent a malformed session id '{0}'")]
    BadSession(String),
    #[error("the server offered {offered} UDP ports for {flows} flows")]
    Ports { offered: usize, flows: usize },
    /// `flow` counts from 1, as every message about flows does.
    #[error("the server refused flow {flow}: {why}")]
    Refused { flow: u32, why: &'static str },
    #[error("the server did not accept flow {flow}: {err}")]
    NotAccepted { flow: u32, err: io::Error },
    #[error("the server answered flow {flow} with unknown code {code}")]
    UnknownReply { flow: u32, code: u8 },
    #[error("the server's UDP port {port} for flow {flow} is closed")]
    PortClosed { port: u16, flow: u32 },
    #[error("no answer to flow {flow}'s UDP attach at {to} within {seconds:.0} s: is UDP to that port blocked by a firewall?")]
    NoAnswer {
        flow: u32,
        to: SocketAddr,
        seconds: f64,
    },
    #[error("rejected data connection for flow {0} (unknown or duplicate)")]
    UnknownFlow(u32),
    #[error("{flows} flows need about {need} open files but the limit is {limit}; raise it (ulimit -n) or use fewer -F flows")]
    OpenFiles { flows: u32, need: u64, limit: u64 },
    #[error("not an rr test")]
    NotRr,
    #[error("the rr test was not opened")]
    NotOpened,
    #[error("the server started before welcoming")]
    NotWelcomed,
    #[error("the server did not offer an rr port: is it an older xferlab?")]
    NoRrPort,
    /// What went wrong with one flow (`flow` as the wire numbers it).
    #[error("flow {flow}: {err}")]
    Flow { flow: u32, err: Box<PatternError> },
}

impl PatternError {
    /// An I/O error of the step `what` ("bind the rr listener").
    pub fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> Self {
        let what = what.into();
        move |err| Self::Io { what, err }
    }

    /// This error, about flow `flow`.
    pub fn of_flow(self, flow: u32) -> Self {
        Self::Flow {
            flow,
            err: Box::new(self),
        }
    }
}

/// Why the server turns a connection or a test away for now: the line it
/// sends the client and logs.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Busy {
    #[error("server busy: {running} tests running (its --max-sessions limit); try again later")]
    Sessions { running: usize },
    #[error("server busy: {mine} tests from {client} running (its --max-sessions-per-client limit); try again later")]
    ClientSessions { mine: usize, client: IpAddr },
    #[error("server busy: {mine} connections from {client} have not finished their handshake (its --max-handshakes-per-client limit); try again later")]
    ClientHandshakes { mine: usize, client: IpAddr },
    #[error("server busy: {total} connections have not finished their handshake (its --max-handshakes limit); try again later")]
    Handshakes { total: usize },
}

/// What only the server can refuse of a test, whatever its pattern.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    #[error(transparent)]
    Place(#[from] crate::sys::affinity::AffinityError),
    #[error("on the server: {0}")]
    Congestion(SockoptError),
}

/// Why a client's test did not run: nothing was measured.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
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
    /// The test ended before its flows started: the driver's reason (a
    /// refusal the server sent, the peer gone).
    #[error("{0}")]
    NotStarted(String),
}
