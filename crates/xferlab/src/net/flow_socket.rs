//! A flow's socket, whatever carries it: what the control connection's
//! event loop hands a session when a data connection or a UDP flow socket
//! presents its token, and what the transports run their flows on.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};

/// A flow's socket, by carrier: a connected byte stream (TCP, MPTCP), or
/// a datagram socket connected to the peer's flow socket.
pub enum FlowSocket {
    Stream(TcpStream),
    Datagram(UdpSocket),
}

impl AsFd for FlowSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            FlowSocket::Stream(s) => s.as_fd(),
            FlowSocket::Datagram(s) => s.as_fd(),
        }
    }
}

impl FlowSocket {
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            FlowSocket::Stream(s) => s.local_addr(),
            FlowSocket::Datagram(s) => s.local_addr(),
        }
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        match self {
            FlowSocket::Stream(s) => s.peer_addr(),
            FlowSocket::Datagram(s) => s.peer_addr(),
        }
    }

    /// Wakes a thread blocked on this socket at once. A datagram socket
    /// has nothing to shut down; its threads see the abort flag within one
    /// poll.
    pub fn interrupt(&self) {
        if let FlowSocket::Stream(s) = self {
            s.shutdown(Shutdown::Both).ok();
        }
    }

    /// Bytes written that the peer has not yet acknowledged (SIOCOUTQ) on
    /// a byte stream; None for datagrams.
    pub fn unacked_bytes(&self) -> Option<u64> {
        let FlowSocket::Stream(s) = self else {
            return None;
        };
        xferlab_sys::sockopt::outq(s).ok()
    }
}
