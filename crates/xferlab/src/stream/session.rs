//! The server's side of the stream pattern: one socket per flow (TCP
//! data connections that present the session token, or UDP sockets that
//! wait for an attach datagram), run as this side's [`Side`].

use crate::sys::clock;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use xferlab_core::time::Time;

use xferlab_core::proto::wire::AttachReply;
use xferlab_core::proto::HANDSHAKE_TIMEOUT;
use xferlab_core::result::{Endpoint, FlowRole, SideReport, Throughput};
use xferlab_core::spec::{Direction, Limit, TestSpec};
use xferlab_core::units::RateUnit;

use super::side::{ConnectedFlow, Side};

use crate::driver::Workload;
use crate::net::FlowSocket;
use crate::session::server::{Offer, SessionEnv, SessionPattern};
use crate::session::PatternError;
use crate::transport::attach::AttachWait;
use crate::transport::{self, Carrier};

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
    fn open(&mut self, env: &SessionEnv<'_>) -> Result<Offer, PatternError> {
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
                .map_err(PatternError::Thread)?;
        }
        Ok(Offer {
            udp_ports,
            rr_port: None,
            describe: describe(&self.spec),
        })
    }

    fn attach(&mut self, flow: u32, socket: FlowSocket) -> Result<(), PatternError> {
        attach_flow(&mut self.pending, flow, socket, &self.spec)
    }

    fn ready(&self) -> bool {
        !self.pending.is_empty() && self.pending.iter().all(Option::is_some)
    }

    fn start(&mut self, env: &SessionEnv<'_>) -> Result<(Box<dyn Workload>, Time), PatternError> {
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

/// Takes a flow socket that presented our token (a data connection,
/// answered here, or a datagram socket already acknowledged) and keeps it
/// until every flow is here.
pub(crate) fn attach_flow(
    pending: &mut [Option<ConnectedFlow>],
    flow: u32,
    socket: FlowSocket,
    spec: &TestSpec,
) -> Result<(), PatternError> {
    let answer = |socket: &FlowSocket, reply: AttachReply| {
        if let FlowSocket::Stream(s) = socket {
            let mut w: &TcpStream = s;
            w.write_all(&[reply as u8])
                .map_err(|e| PatternError::io("answer the attach")(e).of_flow(flow))
        } else {
            Ok(())
        }
    };
    let plans = spec.flows();
    let Some(slot) = pending.get_mut(flow as usize).filter(|s| s.is_none()) else {
        answer(&socket, AttachReply::BadFlow).ok();
        return Err(PatternError::UnknownFlow(flow));
    };
    let applied = transport::io(spec.transport).and_then(|io| io.accepted(&socket, &spec.knobs));
    if let Err(why) = applied {
        answer(&socket, AttachReply::BadFlow).ok();
        return Err(PatternError::from(why).of_flow(flow));
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
        Limit::Open => "until Ctrl-C".into(),
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
