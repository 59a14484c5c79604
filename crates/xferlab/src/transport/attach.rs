//! The wait for a session's datagram flows to attach: the socket of each
//! flow, once a datagram with the session's token and its flow number
//! comes from the control peer's address, is connected to the sender,
//! acknowledged and handed to the session's event loop.

use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use xferlab_core::proto::wire::{
    Attach, AttachReply, ConnKind, Preamble, ATTACH_LEN, PREAMBLE_LEN, TOKEN_LEN, VERSION,
};
use xferlab_core::time::Time;

use crate::control::Wake;
use crate::net::FlowSocket;
use crate::sys::clock;
use crate::sys::end::EndWatch;

/// One session's wait for its UDP flows' attach datagrams, on one thread
/// for all of them: each socket, once a datagram with the session's token
/// and its flow number comes from the control peer's address, is
/// connected to the sender, acknowledged and handed to the session.
/// Anything else is ignored. The wait ends when every flow is here, at
/// the handshake deadline, or the moment the session ends. (A transport
/// whose flows connect in their own way waits with the same rules:
/// [`crate::transport::TransportIo::listen_flows`].)
#[derive(Clone)]
pub(crate) struct AttachWait {
    pub token: [u8; TOKEN_LEN],
    /// The control peer: flows attach from its address only...
    pub peer: SocketAddr,
    /// ...unless `--udp-any-peer`.
    pub any_peer: bool,
    pub tx: mpsc::Sender<Wake>,
    pub end: EndWatch,
    pub deadline: Time,
}

impl AttachWait {
    /// Time left until the setup deadline; None once it has passed.
    pub fn left(&self) -> Option<Duration> {
        Some(self.deadline.duration_since(clock::now())).filter(|d| !d.is_zero())
    }

    /// The flow an attach record names, if `msg` is one with this
    /// session's token.
    pub fn flow_of(&self, msg: &[u8]) -> Option<u32> {
        if msg.len() != PREAMBLE_LEN + ATTACH_LEN {
            return None;
        }
        let mut pre = [0u8; PREAMBLE_LEN];
        pre.copy_from_slice(&msg[..PREAMBLE_LEN]);
        let mut raw = [0u8; ATTACH_LEN];
        raw.copy_from_slice(&msg[PREAMBLE_LEN..]);
        let attach = Attach::decode(&raw);
        let ours = matches!(Preamble::decode(&pre), Ok(p) if p.kind == ConnKind::Data && p.version == VERSION);
        (ours && attach.token == self.token).then_some(attach.flow)
    }

    pub fn run(self, mut socks: Vec<(u32, UdpSocket)>) {
        for (_, s) in &socks {
            s.set_nonblocking(true).ok();
        }
        let mut buf = [0u8; PREAMBLE_LEN + ATTACH_LEN + 1];
        while !socks.is_empty() {
            let left = self.deadline.duration_since(clock::now());
            if left.is_zero() {
                return;
            }
            let Ok(left) = Timespec::try_from(left) else {
                return;
            };
            let mut fds: Vec<PollFd<'_>> = socks
                .iter()
                .map(|(_, s)| PollFd::new(s, PollFlags::IN))
                .collect();
            fds.push(PollFd::new(&self.end, PollFlags::IN));
            if !poll(&mut fds, Some(&left)).is_ok_and(|n| n > 0) {
                continue;
            }
            if !fds.pop().expect("the end's").revents().is_empty() {
                return;
            }
            let ready: Vec<usize> = (0..fds.len())
                .filter(|&i| !fds[i].revents().is_empty())
                .collect();
            drop(fds);
            for i in ready.into_iter().rev() {
                let (flow, sock) = &socks[i];
                if self.attached(sock, *flow, &mut buf) {
                    let (flow, sock) = socks.swap_remove(i);
                    sock.set_nonblocking(false).ok();
                    if self
                        .tx
                        .send(Wake::Attach(flow, FlowSocket::Datagram(sock)))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    }

    /// Reads what is queued on `sock`; true once a valid attach for
    /// `flow` came and the socket is connected and has answered.
    fn attached(&self, sock: &UdpSocket, flow: u32, buf: &mut [u8]) -> bool {
        while let Ok((n, from)) = sock.recv_from(buf) {
            if self.flow_of(&buf[..n]) != Some(flow) {
                continue;
            }
            if !self.any_peer && crate::net::canonical(from).ip() != self.peer.ip() {
                tracing::debug!(%from, peer = %self.peer, flow, "UDP attach from another address than the control connection's; ignored");
                continue;
            }
            if sock.connect(from).is_err() {
                continue;
            }
            sock.send(&[AttachReply::Ok as u8]).ok();
            return true;
        }
        false
    }
}
