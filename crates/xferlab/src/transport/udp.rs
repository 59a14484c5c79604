//! UDP's driver: a SOCK_DGRAM socket per flow, picked with `-u`; the
//! datagram counters its flow threads publish are its interval state.

use std::net::UdpSocket;
use std::sync::atomic::Ordering;

use socket2::{Domain, Socket, Type};
use xferlab_core::interval::Reading;
use xferlab_core::result::FlowRole;
use xferlab_core::spec::{Knobs, RxStamps};

use super::flow::FlowShared;
use super::{datagram, Flag, FlowSocket, SetupError, Transport, TransportIo};

pub struct Udp;

impl TransportIo for Udp {
    fn transport(&self) -> Transport {
        Transport::Udp
    }

    fn flag(&self) -> Option<Flag> {
        Some(Flag {
            long: "udp",
            short: Some('u'),
            help: "UDP instead of TCP: every datagram carries a sequence number and a send time; loss, reordering, duplicates and jitter are measured.",
        })
    }

    fn socket(&self, domain: Domain) -> Result<Socket, SetupError> {
        Socket::new(domain, Type::DGRAM, None).map_err(|err| SetupError::Socket {
            transport: "UDP",
            err,
        })
    }

    /// A receiver gets its large buffer and, where its flow wants them,
    /// the kernel's arrival stamps.
    fn prepare_flow(&self, sock: &UdpSocket, role: FlowRole, knobs: &Knobs) -> Option<RxStamps> {
        (role == FlowRole::Receiver).then(|| {
            datagram::size_receive_buffer(sock, knobs);
            datagram::stamp_arrivals(sock, knobs)
        })
    }

    fn read(&self, _socket: &FlowSocket, _role: FlowRole, shared: &FlowShared) -> Reading {
        Reading {
            bytes: shared.bytes.load(Ordering::Relaxed),
            udp: Some(shared.udp.read()),
            ..Reading::default()
        }
    }
}
