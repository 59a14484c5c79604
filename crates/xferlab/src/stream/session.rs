//! The server's side of the stream pattern: one socket per flow (TCP
//! data connections that present the session token, or UDP sockets that
//! wait for an attach datagram), run as this side's [`Side`].

use crate::sys::clock;
use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::mpsc;
use std::time::Duration;
use xferlab_core::time::Time;

use xferlab_core::proto::wire::{
    Attach, AttachReply, ConnKind, Preamble, ATTACH_LEN, PREAMBLE_LEN, TOKEN_LEN, VERSION,
};
use xferlab_core::proto::HANDSHAKE_TIMEOUT;
use xferlab_core::result::{Endpoint, FlowRole, SideReport, Throughput};
use xferlab_core::spec::{Direction, Limit, TestSpec};
use xferlab_core::units::RateUnit;

use super::side::{ConnectedFlow, Side};
use rustix::event::{poll, PollFd, PollFlags, Timespec};

use crate::control::Wake;
use crate::driver::Workload;
use crate::session::end::EndWatch;
use crate::session::server::{Offer, SessionEnv, SessionPattern};
use crate::transport::{self, Carrier, FlowSocket};

/// The stream pattern's server side: the flows as they attach.
pub struct StreamSession {
    spec: TestSpec,
    pending: Vec<Option<ConnectedFlow>>,
}

impl StreamSession {
    pub fn new(spec: TestSpec) -> Self {
        let pending = (0..spec.flows().len()).map(|_| None).collect();
        StreamSession { spec, pending }
    }
}

impl SessionPattern for StreamSession {
    /// UDP flows get a socket each, waiting for the client's attach
    /// datagram on a thread of its own; TCP flows arrive on the server's
    /// port and are routed here by token.
    fn open(&mut self, env: &SessionEnv<'_>) -> Result<Offer, String> {
        let mut udp_ports = Vec::new();
        let wait = AttachWait {
            token: env.token,
            peer: env.peer,
            any_peer: env.shared.cfg.udp_any_peer,
            tx: env.tx.clone(),
            end: env.end.clone(),
            deadline: clock::now() + HANDSHAKE_TIMEOUT,
        };
        let io = transport::io(self.spec.transport)?;
        if let Some(ports) = io.listen_flows(&self.spec, env.local_ip, &wait) {
            udp_ports = ports?;
        } else if self.spec.transport.carrier() == Carrier::Datagrams {
            let mut socks = Vec::new();
            for plan in self.spec.flows() {
                let bind = SocketAddr::new(env.local_ip, 0);
                let sock = transport::bind(self.spec.transport, bind, &self.spec.knobs, false)?;
                udp_ports.push(sock.local_addr().map_or(0, |a| a.port()));
                socks.push((plan.id, sock));
            }
            std::thread::Builder::new()
                .name("xfer-udp-attach".into())
                .spawn(move || wait.run(socks))
                .map_err(|e| format!("cannot start a thread: {e}"))?;
        }
        Ok(Offer {
            udp_ports,
            rr_port: None,
            describe: describe(&self.spec),
        })
    }

    fn attach(&mut self, flow: u32, socket: FlowSocket) -> Result<(), String> {
        attach_flow(&mut self.pending, flow, socket, &self.spec)
    }

    fn ready(&self) -> bool {
        !self.pending.is_empty() && self.pending.iter().all(Option::is_some)
    }

    fn start(&mut self, env: &SessionEnv<'_>) -> Result<(Box<dyn Workload>, Time), String> {
        let mut side = Side::prepare(
            Endpoint::Server,
            env.shared.cfg.embedded,
            &self.spec,
            self.pending.drain(..).flatten().collect(),
            env.tally.clone(),
            crate::control::flow_done_notifier(env.tx),
        );
        side.start()?;
        let at = side.started_at();
        Ok((Box::new(side), at))
    }

    fn outcome_line(&self, ours: Option<&SideReport>) -> String {
        outcome_line(ours)
    }
}

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

    fn run(self, mut socks: Vec<(u32, UdpSocket)>) {
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

/// Takes a flow socket that presented our token (a data connection,
/// answered here, or a datagram socket already acknowledged) and keeps it
/// until every flow is here.
pub(crate) fn attach_flow(
    pending: &mut [Option<ConnectedFlow>],
    flow: u32,
    socket: FlowSocket,
    spec: &TestSpec,
) -> Result<(), String> {
    let answer = |socket: &FlowSocket, reply: AttachReply| {
        if let FlowSocket::Stream(s) = socket {
            let mut w: &TcpStream = s;
            w.write_all(&[reply as u8])
                .map_err(|e| format!("flow {flow}: {e}"))
        } else {
            Ok(())
        }
    };
    let plans = spec.flows();
    let Some(slot) = pending.get_mut(flow as usize).filter(|s| s.is_none()) else {
        answer(&socket, AttachReply::BadFlow).ok();
        return Err(format!(
            "rejected data connection for flow {flow} (unknown or duplicate)"
        ));
    };
    let applied = transport::io(spec.transport).and_then(|io| io.accepted(&socket, &spec.knobs));
    if let Err(why) = applied {
        answer(&socket, AttachReply::BadFlow).ok();
        return Err(format!("flow {flow}: {why}"));
    }
    answer(&socket, AttachReply::Ok)?;
    *slot = Some(ConnectedFlow::new(
        plans[flow as usize],
        socket,
        Endpoint::Server,
        spec,
    )?);
    Ok(())
}

pub(crate) fn describe(s: &TestSpec) -> String {
    let dir = match s.direction {
        Direction::Forward => "forward",
        Direction::Reverse => "reverse",
        Direction::Bidir => "bidir",
    };
    let limit = match s.limit {
        Limit::Duration { seconds } => format!("{seconds} s"),
        Limit::Bytes { bytes } => format!("{bytes} bytes"),
    };
    format!(
        "{} stream {dir} x{} {limit}",
        s.transport.label(),
        s.parallel
    )
}

/// One line of what this server received and sent.
pub(crate) fn outcome_line(ours: Option<&SideReport>) -> String {
    let Some(r) = ours else {
        return "no local report".into();
    };
    let mut parts = Vec::new();
    for role in [FlowRole::Receiver, FlowRole::Sender] {
        let flows: Vec<_> = r.flows.iter().filter(|f| f.role == role).collect();
        if flows.is_empty() {
            continue;
        }
        let bytes: u64 = flows.iter().map(|f| f.total.bytes).sum();
        let secs = flows
            .iter()
            .map(|f| f.total.end_s - f.total.start_s)
            .fold(0.0, f64::max);
        let rate = RateUnit::AutoBits.format_rate(Throughput::new(bytes, secs).bits_per_second);
        parts.push(format!(
            "{} {rate}",
            if role == FlowRole::Receiver {
                "received"
            } else {
                "sent"
            }
        ));
    }
    parts.push(format!("cpu {:.0}%", r.cpu.percent));
    parts.join(", ")
}
