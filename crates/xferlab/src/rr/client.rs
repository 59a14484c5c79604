//! The client of an rr test: connects the rr flows and any background
//! stream flows once the server welcomed the test, and starts the engine
//! threads as this side's [`RrWorkload`].

use crate::sys::clock;
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use xferlab_core::time::Time;

use xferlab_core::interval::IntervalClock;
use xferlab_core::proto::Welcome;
use xferlab_core::result::Endpoint;
use xferlab_core::rr::wire::encode_tcp_hello;
use xferlab_core::rr::{RrMode, RrSpec};
use xferlab_core::spec::{Knobs, Transport};

use super::client_flow::{self, ClientConn, ClientPlan};
use super::side::RrSide;
use super::workload::RrWorkload;
use crate::control::Wake;
use crate::driver::Workload;
use crate::net;
use crate::output::{Reporter, StartInfo};
use crate::session::client::{parse_token, ClientConfig, ClientEnv, ClientPattern};
use crate::session::PatternError;
use crate::stream::client::connect_flows;
use crate::stream::side::{ConnectedFlow, Side};
use crate::sys::cpu::CpuTally;

/// The rr pattern's client: the flows between the welcome and the start.
pub struct RrClient {
    rr: RrSpec,
    /// The background stream flows' spec.
    bg_cfg: ClientConfig,
    plan: Option<ClientPlan>,
    conns: Vec<(u32, ClientConn)>,
    background: Vec<ConnectedFlow>,
    counters_before: Option<(xferlab_core::counters::CounterSnapshot, Vec<String>)>,
}

impl RrClient {
    /// Checks that this process may open the files the flows need.
    pub fn new(env: &ClientEnv<'_>) -> Result<Self, PatternError> {
        let cfg = env.cfg;
        let rr = cfg.spec.pattern.rr().cloned().ok_or(PatternError::NotRr)?;
        let limit = super::raise_nofile_limit();
        let need = u64::from(rr.flows) * if cfg.embedded { 2 } else { 1 } + 64;
        if rr.mode != RrMode::TcpCrr && limit < need {
            return Err(PatternError::OpenFiles {
                flows: rr.flows,
                need,
                limit,
            });
        }
        let iface = crate::sys::counters::interface_for(env.local_ip);
        Ok(RrClient {
            rr,
            bg_cfg: ClientConfig {
                spec: cfg.spec.background_spec(),
                ..cfg.clone()
            },
            plan: None,
            conns: Vec::new(),
            background: Vec::new(),
            counters_before: Some(crate::sys::counters::snapshot(iface.as_deref())),
        })
    }
}

impl ClientPattern for RrClient {
    fn connect(&mut self, env: &ClientEnv<'_>, w: &Welcome) -> Result<(), PatternError> {
        let (plan, conns) = connect_rr(env.cfg, &self.rr, env.server, w)?;
        if self.bg_cfg.spec.parallel > 0 {
            self.background = connect_flows(&self.bg_cfg, env.server, w)?;
        }
        self.plan = Some(plan);
        self.conns = conns;
        Ok(())
    }

    fn start(
        &mut self,
        env: &ClientEnv<'_>,
        session: &str,
        reporter: &mut dyn Reporter,
    ) -> Result<(Box<dyn Workload>, Time), PatternError> {
        let cfg = env.cfg;
        let mut plan = self.plan.take().ok_or(PatternError::NotWelcomed)?;
        let clock = IntervalClock::new(cfg.spec.interval_s, cfg.spec.omit_s);
        let mut side = RrSide::new(self.rr.mode, plan.wait, self.rr.flows, clock);
        #[cfg(feature = "quic")]
        if self.rr.mode.transport() == Transport::Quic {
            side.track_quic();
        }
        let mut background = None;
        if !self.background.is_empty() {
            let mut b = Side::prepare(
                Endpoint::Client,
                cfg.embedded,
                &self.bg_cfg.spec,
                std::mem::take(&mut self.background),
                env.tally.clone(),
                crate::control::flow_done_notifier(env.tx),
            );
            b.start()?;
            background = Some(b);
        }
        let start = clock::now();
        side.set_start(start);
        plan.measure_from = start + Duration::from_secs_f64(cfg.spec.omit_s);
        let flows = background
            .as_ref()
            .map(Side::flow_starts)
            .unwrap_or_default();
        let mut workload = RrWorkload {
            rr: side,
            background,
            endpoint: Endpoint::Client,
            embedded: cfg.embedded,
            tally: env.tally.clone(),
            counters_before: self.counters_before.take().unwrap_or_default(),
            local_ip: env.local_ip,
            rr_drain: None,
        };
        if let Err(e) = spawn_engines(
            &mut workload.rr,
            &Arc::new(plan),
            std::mem::take(&mut self.conns),
            cfg.spec.affinity.client,
            env.tally,
            env.tx,
        ) {
            workload.abort(&e.to_string());
            return Err(e);
        }
        reporter
            .start(&StartInfo {
                spec: &cfg.spec,
                server: &cfg.server,
                embedded: cfg.embedded,
                session,
                flows: &flows,
            })
            .ok();
        Ok((Box::new(workload), start))
    }
}

/// Connects the rr flows (TCP RR: one connection each, announced with
/// the token; UDP: one connected socket each; CRR: nothing yet).
fn connect_rr(
    cfg: &ClientConfig,
    rr: &RrSpec,
    server: SocketAddr,
    w: &Welcome,
) -> Result<(ClientPlan, Vec<(u32, ClientConn)>), PatternError> {
    let token = parse_token(&w.session)?;
    let port = w.rr_port.ok_or(PatternError::NoRrPort)?;
    let to = SocketAddr::new(server.ip(), port);
    let plan = ClientPlan {
        rr: rr.clone(),
        server: to,
        token,
        knobs: cfg.spec.knobs.clone(),
        measure_from: clock::now(),
        wait: rr
            .wait
            .resolve(&cfg.spec.affinity, net::canonical(to).ip().is_loopback()),
    };
    let mut conns = Vec::with_capacity(rr.flows as usize);
    if rr.mode.transport() == Transport::Quic {
        // The QUIC engine threads open their endpoints and connections
        // themselves (a build without QUIC fails here).
        crate::transport::io(Transport::Quic)?;
        return Ok((plan, conns));
    }
    for id in 0..rr.flows {
        let c = match rr.mode {
            RrMode::TcpRr => {
                let mut s = crate::transport::connect(&cfg.spec, to, cfg.connect_timeout)?;
                s.set_nodelay(true).ok();
                s.write_all(&encode_tcp_hello(&token, id))
                    .map_err(PatternError::io(format!("open rr flow {}", id + 1)))?;
                s.set_nonblocking(true)
                    .map_err(PatternError::io("make an rr socket non-blocking"))?;
                ClientConn::Tcp(s)
            }
            RrMode::UdpRr => {
                let knobs = Knobs {
                    buffer: cfg.spec.knobs.buffer,
                    tos: cfg.spec.knobs.tos,
                    ..Knobs::default()
                };
                let s: UdpSocket =
                    crate::transport::bind(Transport::Udp, net::any_port(to), &knobs, false)?;
                s.connect(to)
                    .map_err(PatternError::io(format!("reach {to} over UDP")))?;
                s.set_nonblocking(true)
                    .map_err(PatternError::io("make an rr socket non-blocking"))?;
                ClientConn::Udp(s)
            }
            RrMode::TcpCrr => ClientConn::Crr,
            RrMode::QuicRr | RrMode::QuicCrr => unreachable!("returned above"),
        };
        conns.push((id, c));
    }
    Ok((plan, conns))
}

/// Deals the flows round-robin to the engine threads and starts them
/// (pinned to `cpu`, with `-A`).
fn spawn_engines(
    side: &mut RrSide,
    plan: &Arc<ClientPlan>,
    conns: Vec<(u32, ClientConn)>,
    cpu: Option<u32>,
    tally: &Arc<CpuTally>,
    tx: &mpsc::Sender<Wake>,
) -> Result<(), PatternError> {
    let n = super::engine_threads(plan.rr.flows);
    let quic = plan.rr.mode.transport() == Transport::Quic;
    let mut shares: Vec<Vec<(u32, ClientConn)>> = (0..n).map(|_| Vec::new()).collect();
    for (k, c) in conns.into_iter().enumerate() {
        shares[k % n].push(c);
    }
    // QUIC: the flows' ids only, dealt the same way.
    let mut ids: Vec<Vec<u32>> = (0..n).map(|_| Vec::new()).collect();
    if quic {
        for id in 0..plan.rr.flows {
            ids[id as usize % n].push(id);
        }
    }
    for (k, (share, ids)) in shares.into_iter().zip(ids).enumerate() {
        let (plan, counters, flags, tally, done) = (
            plan.clone(),
            side.counters.clone(),
            side.flags.clone(),
            tally.clone(),
            tx.clone(),
        );
        let t = std::thread::Builder::new()
            .name(format!("xfer-rr-{k}"))
            .spawn(move || {
                crate::sys::affinity::pin_data_thread(cpu);
                let cpu = tally.track();
                let ended = flags.clone();
                let out = if quic {
                    super::quic_client(plan, ids, counters, flags)
                } else {
                    client_flow::run(plan, share, counters, flags)
                };
                drop(cpu);
                ended
                    .ended
                    .fetch_add(1, std::sync::atomic::Ordering::Release);
                done.send(Wake::FlowDone).ok();
                out
            })
            .map_err(PatternError::io("start an rr thread"))?;
        side.add_thread(t);
    }
    Ok(())
}
