//! Why a transport could not open, bind, connect or listen: the one line a
//! client prints and a server sends its peer in the refusal. A flow that
//! fails once running ends with [`super::flow::FlowEnd::Aborted`] instead,
//! whose reason the result keeps.

use std::io;
use std::net::SocketAddr;

use crate::net::sockopt::SockoptError;
use crate::net::NetError;

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("USB bulk tests run with `xferlab usb`")]
    UsbNotSockets,
    #[error("this xferlab has no driver for {0}")]
    NoDriver(&'static str),
    #[error("cannot open a {transport} socket: {err}")]
    Socket {
        transport: &'static str,
        err: io::Error,
    },
    #[error("cannot open an MPTCP socket: {0}; MPTCP needs Linux >= 5.6 with net.mptcp.enabled = 1 (sysctl -w net.mptcp.enabled=1)")]
    NoMptcp(io::Error),
    #[error("cannot share a {transport} port (SO_REUSEADDR): {err}")]
    ReuseAddr {
        transport: &'static str,
        err: io::Error,
    },
    #[error("cannot bind a {transport} socket to {addr}: {err}")]
    Bind {
        transport: &'static str,
        addr: SocketAddr,
        err: io::Error,
    },
    #[error(transparent)]
    Sockopt(#[from] SockoptError),
    #[error(transparent)]
    Net(#[from] NetError),
    /// A transport's own refusal (its module's error type, which
    /// converts into this one there), so a new transport adds no variant
    /// here.
    #[error(transparent)]
    Own(Box<dyn std::error::Error + Send + Sync>),
}
