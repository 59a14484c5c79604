//! The client of the stream pattern: connects one socket per flow once
//! the server welcomed the test, and runs them as this side's [`Side`].

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;
use xferlab_core::time::Time;

use xferlab_core::proto::wire::{Attach, AttachReply, ConnKind, Preamble};
use xferlab_core::proto::Welcome;
use xferlab_core::result::Endpoint;

use super::side::{ConnectedFlow, Side};
use crate::driver::Workload;
use crate::net;
use crate::net::FlowSocket;
use crate::output::{Reporter, StartInfo};
use crate::session::client::{parse_token, ClientConfig, ClientEnv, ClientPattern};
use crate::session::PatternError;
use crate::transport::{self, Carrier, SetupError};

/// The stream pattern's client: its flows, between the welcome and the
/// start.
#[derive(Default)]
pub struct StreamClient {
    flows: Vec<ConnectedFlow>,
}

impl ClientPattern for StreamClient {
    fn connect(&mut self, env: &ClientEnv<'_>, w: &Welcome) -> Result<(), PatternError> {
        self.flows = connect_flows(env.cfg, env.server, w)?;
        Ok(())
    }

    fn start(
        &mut self,
        env: &ClientEnv<'_>,
        session: &str,
        reporter: &mut dyn Reporter,
    ) -> Result<(Box<dyn Workload>, Time), PatternError> {
        let cfg = env.cfg;
        let mut side = Side::prepare(
            Endpoint::Client,
            cfg.embedded,
            &cfg.spec,
            std::mem::take(&mut self.flows),
            env.tally.clone(),
            crate::control::flow_done_notifier(env.tx),
        );
        side.start()?;
        reporter
            .start(&StartInfo {
                spec: &cfg.spec,
                server: &cfg.server,
                embedded: cfg.embedded,
                session,
                flows: &side.flow_starts(),
            })
            .ok();
        let at = side.started_at();
        Ok((Box::new(side), at))
    }
}

/// Opens every flow's socket, presents the session token and waits for
/// the server to accept each one.
pub(crate) fn connect_flows(
    cfg: &ClientConfig,
    server: SocketAddr,
    w: &Welcome,
) -> Result<Vec<ConnectedFlow>, PatternError> {
    let token = parse_token(&w.session)?;
    let plans = cfg.spec.flows();
    let carrier = cfg.spec.transport.carrier();
    if carrier == Carrier::Datagrams && w.udp_ports.len() != plans.len() {
        return Err(PatternError::Ports {
            offered: w.udp_ports.len(),
            flows: plans.len(),
        });
    }
    if carrier == Carrier::UsbBulk {
        return Err(SetupError::UsbNotSockets.into());
    }
    let attach = |i: usize, flow: u32| -> Result<FlowSocket, PatternError> {
        let mut hello = Preamble::new(ConnKind::Data).encode().to_vec();
        hello.extend_from_slice(&Attach { token, flow }.encode());
        Ok(match carrier {
            Carrier::Datagrams => {
                let to = SocketAddr::new(server.ip(), w.udp_ports[i]);
                FlowSocket::Datagram(attach_datagram(cfg, to, &hello, flow)?)
            }
            _ => FlowSocket::Stream(attach_stream(cfg, server, &hello, flow)?),
        })
    };
    // All flows connect at once, one short-lived thread each: one after
    // another, 20 flows over a path that loses 20 % of SYNs (a lab hop
    // dropping Not-ECT packets) took longer than the server waits, since
    // every lost SYN costs a second or more.
    let sockets: Vec<Result<FlowSocket, PatternError>> = if plans.len() == 1 {
        vec![attach(0, plans[0].id)]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = plans
                .iter()
                .enumerate()
                .map(|(i, plan)| {
                    let attach = &attach;
                    let flow = plan.id;
                    std::thread::Builder::new()
                        .name("xfer-attach".into())
                        .spawn_scoped(scope, move || attach(i, flow))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h {
                    Ok(h) => h.join().unwrap_or_else(|_| Err(PatternError::Panicked)),
                    Err(e) => Err(PatternError::Thread(e)),
                })
                .collect()
        })
    };
    let mut out = Vec::with_capacity(plans.len());
    for (plan, socket) in plans.into_iter().zip(sockets) {
        out.push(ConnectedFlow::new(
            plan,
            socket?,
            Endpoint::Client,
            &cfg.spec,
        )?);
    }
    Ok(out)
}

fn attach_stream(
    cfg: &ClientConfig,
    server: SocketAddr,
    hello: &[u8],
    flow: u32,
) -> Result<TcpStream, PatternError> {
    let mut stream = transport::connect(&cfg.spec, server, cfg.connect_timeout)?;
    stream.set_nodelay(true).ok();
    stream
        .write_all(hello)
        .map_err(PatternError::io(format!("attach flow {}", flow + 1)))?;
    // The reply may wait for retransmissions as long as the connect did.
    stream.set_read_timeout(Some(cfg.attach_wait())).ok();
    let mut reply = [0u8; 1];
    stream
        .read_exact(&mut reply)
        .map_err(|err| PatternError::NotAccepted {
            flow: flow + 1,
            err,
        })?;
    check_reply(reply[0], flow)?;
    stream.set_read_timeout(None).ok();
    stream.set_nodelay(cfg.spec.knobs.nodelay).ok();
    Ok(stream)
}

/// How often, and how many times, a datagram flow's attach datagram is
/// sent before the server must have answered.
const UDP_ATTACH_RETRY: Duration = Duration::from_millis(100);
const UDP_ATTACH_TRIES: u32 = 30;

fn attach_datagram(
    cfg: &ClientConfig,
    to: SocketAddr,
    hello: &[u8],
    flow: u32,
) -> Result<UdpSocket, PatternError> {
    let io = transport::io(cfg.spec.transport)?;
    let sock = match io.connect_datagram(&cfg.spec, to, cfg.connect_timeout) {
        Some(sock) => sock?,
        None => {
            let sock = transport::bind(
                cfg.spec.transport,
                net::any_port(to),
                &cfg.spec.knobs,
                false,
            )?;
            sock.connect(to)
                .map_err(PatternError::io(format!("reach {to} over UDP")))?;
            sock
        }
    };
    if let Some(attached) = io.attach_in_band(&cfg.spec, &sock, hello, cfg.attach_wait()) {
        attached.map_err(|e| PatternError::from(e).of_flow(flow + 1))?;
        return Ok(sock);
    }
    sock.set_read_timeout(Some(UDP_ATTACH_RETRY)).ok();
    let mut reply = [0u8; 1];
    for _ in 0..UDP_ATTACH_TRIES {
        sock.send(hello)
            .map_err(PatternError::io(format!("send to {to} over UDP")))?;
        match sock.recv(&mut reply) {
            Ok(1) => {
                check_reply(reply[0], flow)?;
                sock.set_read_timeout(None).ok();
                return Ok(sock);
            }
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                return Err(PatternError::PortClosed {
                    port: to.port(),
                    flow: flow + 1,
                });
            }
            _ => {}
        }
    }
    Err(PatternError::NoAnswer {
        flow: flow + 1,
        to,
        seconds: (UDP_ATTACH_RETRY * UDP_ATTACH_TRIES).as_secs_f64(),
    })
}

fn check_reply(code: u8, flow: u32) -> Result<(), PatternError> {
    match AttachReply::from_byte(code) {
        Some(AttachReply::Ok) => Ok(()),
        Some(r) => Err(PatternError::Refused {
            flow: flow + 1,
            why: r.describe(),
        }),
        None => Err(PatternError::UnknownReply {
            flow: flow + 1,
            code,
        }),
    }
}
