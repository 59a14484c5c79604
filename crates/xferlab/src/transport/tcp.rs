//! TCP's driver: a plain SOCK_STREAM socket; senders read TCP_INFO every
//! interval.

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use socket2::{Domain, Socket, Type};
use xferlab_core::interval::Reading;
use xferlab_core::result::FlowRole;

use super::flow::FlowShared;
use super::{FlowSocket, SetupError, Transport, TransportIo};
use crate::sys;

pub struct Tcp;

impl TransportIo for Tcp {
    fn transport(&self) -> Transport {
        Transport::Tcp
    }

    fn socket(&self, domain: Domain) -> Result<Socket, SetupError> {
        Socket::new(domain, Type::STREAM, None).map_err(|err| SetupError::Socket {
            transport: "TCP",
            err,
        })
    }

    fn read(&self, socket: &FlowSocket, role: FlowRole, shared: &FlowShared) -> Reading {
        Reading {
            bytes: shared.bytes.load(Ordering::Relaxed),
            tcp: sender_tcp_info(socket, role),
            ..Reading::default()
        }
    }
}

/// TCP_INFO of a sending socket (a receiver's says little about the
/// transfer); None for receivers or when it cannot be read.
pub(super) fn sender_tcp_info(
    socket: &FlowSocket,
    role: FlowRole,
) -> Option<xferlab_core::result::TcpCounters> {
    (role == FlowRole::Sender)
        .then(|| sys::tcp_info::read(socket.as_fd()).ok())
        .flatten()
}
