//! The server's side of the rr pattern: the session's one rr socket (a
//! TCP listener for the rr flows' connections, or one UDP socket for
//! every flow), the engine threads that answer, and the background
//! stream flows' data connections, run together as an [`RrWorkload`].

use crate::sys::clock;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use xferlab_core::time::Time;

use socket2::{Domain, Socket, Type};
use xferlab_core::interval::IntervalClock;
use xferlab_core::result::{Endpoint, SideReport};
use xferlab_core::rr::budget::SharedRate;
use xferlab_core::rr::{RrMode, RrSpec};
use xferlab_core::spec::{Knobs, TestSpec, Transport};

use super::server_engine::{self, RrSocket, ServerPlan};
use super::side::RrSide;
use super::workload::RrWorkload;
use crate::control::Wake;
use crate::driver::Workload;
use crate::net;
use crate::net::FlowSocket;
use crate::session::server::{Offer, SessionEnv, SessionPattern};
use crate::session::PatternError;
use crate::stream::session::attach_flow;
use crate::stream::side::{ConnectedFlow, Side};

/// Socket buffer of the server's one UDP rr socket unless -w says.
const UDP_SERVER_BUFFER: u64 = 4 << 20;
/// How long, after the client's stop, the rr engine may take to finish.
const RR_DRAIN: Duration = Duration::from_secs(5);

/// The rr pattern's server side, from the welcome to the start.
pub struct RrSession {
    spec: TestSpec,
    bg_spec: TestSpec,
    /// The background stream flows as they attach.
    pending: Vec<Option<ConnectedFlow>>,
    plan: Option<Arc<ServerPlan>>,
    rr_side: Option<RrSide>,
    counters_before: Option<(xferlab_core::counters::CounterSnapshot, Vec<String>)>,
}

impl RrSession {
    pub fn new(spec: TestSpec) -> Self {
        let bg_spec = spec.background_spec();
        let pending = (0..bg_spec.flows().len()).map(|_| None).collect();
        RrSession {
            spec,
            bg_spec,
            pending,
            plan: None,
            rr_side: None,
            counters_before: None,
        }
    }
}

/// A session that ends before its test started still has engine threads
/// waiting for flows: they are told to end.
impl Drop for RrSession {
    fn drop(&mut self) {
        if let Some(r) = self.rr_side.as_mut() {
            r.abort("session ended");
        }
    }
}

impl SessionPattern for RrSession {
    /// Opens the rr socket and starts the engine threads, which take the
    /// rr flows' connections (TCP RR) or datagrams (UDP RR) as they come.
    fn open(&mut self, env: &SessionEnv<'_>) -> Result<Offer, PatternError> {
        let spec = &self.spec;
        let rr = spec.pattern.rr().cloned().ok_or(PatternError::NotRr)?;
        super::raise_nofile_limit();
        let socket = open_socket(spec, &rr, SocketAddr::new(env.local_ip, 0))?;
        let rr_port = match &socket {
            RrSocket::Tcp(l) => l.local_addr().map_or(0, |a| a.port()),
            RrSocket::Udp(s) => s.local_addr().map_or(0, |a| a.port()),
        };
        let peer_ip = net::canonical(env.peer).ip();
        let clock = IntervalClock::new(spec.interval_s, spec.omit_s);
        let wait = rr.wait.resolve(&spec.affinity, peer_ip.is_loopback());
        let mut rr_side = RrSide::new(rr.mode, wait, rr.flows, clock);
        rr_side.set_default_addrs(
            SocketAddr::new(env.local_ip, rr_port).to_string(),
            peer_ip.to_string(),
        );
        let notify_tx = env.tx.clone();
        let (pacing, budget) = answer_rate(spec, &rr);
        let quic = rr.mode.transport() == Transport::Quic;
        let plan = Arc::new(ServerPlan {
            pacing,
            budget,
            congestion: spec.knobs.congestion.clone(),
            wait,
            rr: rr.clone(),
            token: env.token,
            peer_ip,
            socket,
            claimed: (0..rr.flows).map(|_| AtomicBool::new(false)).collect(),
            attached: AtomicU32::new(0),
            notify: Box::new(move || {
                notify_tx.send(Wake::FlowDone).ok();
            }),
        });
        let pinned = spec.affinity.server;
        // QUIC: one endpoint, one thread (a connection's state is one
        // thread's).
        let threads = if quic {
            1
        } else {
            super::engine_threads(rr.flows)
        };
        for k in 0..threads {
            let (plan, counters, flags, tally, done) = (
                plan.clone(),
                rr_side.counters.clone(),
                rr_side.flags.clone(),
                env.tally.clone(),
                env.tx.clone(),
            );
            let t = std::thread::Builder::new()
                .name(format!("xfer-rr-srv-{k}"))
                .spawn(move || {
                    crate::sys::affinity::pin_data_thread(pinned);
                    let cpu = tally.track();
                    let ended = flags.clone();
                    let out = if quic {
                        super::quic_server(plan, counters, flags)
                    } else {
                        server_engine::run(plan, counters, flags)
                    };
                    drop(cpu);
                    ended.ended.fetch_add(1, Ordering::Release);
                    done.send(Wake::FlowDone).ok();
                    out
                })
                .map_err(PatternError::Thread);
            match t {
                Ok(t) => rr_side.add_thread(t),
                Err(e) => {
                    rr_side.abort(&e.to_string());
                    return Err(e);
                }
            }
        }
        let iface = crate::sys::counters::interface_for(env.local_ip);
        self.counters_before = Some(crate::sys::counters::snapshot(iface.as_deref()));
        self.plan = Some(plan);
        self.rr_side = Some(rr_side);
        Ok(Offer {
            udp_ports: Vec::new(),
            rr_port: Some(rr_port),
            describe: format!(
                "rr {} x{} ({}+{} bytes, depth {}) with {} background flows",
                rr.mode.label(),
                rr.flows,
                rr.request_size,
                rr.response_size,
                rr.depth,
                spec.parallel,
            ),
        })
    }

    fn attach(&mut self, flow: u32, socket: FlowSocket) -> Result<(), PatternError> {
        attach_flow(&mut self.pending, flow, socket, &self.bg_spec)
    }

    /// Every background flow is here and, for TCP RR, every rr flow's
    /// connection was claimed by an engine.
    fn ready(&self) -> bool {
        let Some(plan) = self.plan.as_ref() else {
            return false;
        };
        self.pending.iter().all(Option::is_some)
            && (plan.rr.mode != RrMode::TcpRr
                || plan.attached.load(Ordering::Relaxed) == plan.rr.flows)
    }

    fn start(&mut self, env: &SessionEnv<'_>) -> Result<(Box<dyn Workload>, Time), PatternError> {
        let mut rr_side = self.rr_side.take().ok_or(PatternError::NotOpened)?;
        let mut background = None;
        if !self.pending.is_empty() {
            let mut b = Side::prepare(
                Endpoint::Server,
                env.shared.cfg.embedded,
                &self.bg_spec,
                self.pending.drain(..).flatten().collect(),
                env.tally.clone(),
                crate::control::flow_done_notifier(env.tx),
            );
            if let Err(e) = b.start() {
                rr_side.abort(&e.to_string());
                return Err(e);
            }
            background = Some(b);
        }
        let now = clock::now();
        rr_side.set_start(now);
        let workload = RrWorkload {
            rr: rr_side,
            background,
            endpoint: Endpoint::Server,
            embedded: env.shared.cfg.embedded,
            tally: env.tally.clone(),
            counters_before: self.counters_before.take().unwrap_or_default(),
            local_ip: env.local_ip,
            rr_drain: Some(RR_DRAIN),
        };
        Ok((Box::new(workload), now))
    }

    fn outcome_line(&self, ours: Option<&SideReport>) -> String {
        let mut line = outcome_line(ours);
        if let Some(plan) = &self.plan {
            line.push_str(&budget_note(plan));
        }
        line
    }
}

/// How the server's answers are held to the rate each flow may send
/// (`knobs.max_pacing_rate`, bytes/s: the client's --fq-rate, or this
/// server's share of its --max-rate, see [`crate::session::budget`]):
/// TCP RR connections are paced by the kernel; UDP RR and CRR answers
/// share one rate for all flows, and an answer that could only go after
/// the client's --timeout is dropped.
fn answer_rate(spec: &TestSpec, rr: &RrSpec) -> (Option<u64>, Option<SharedRate>) {
    let Some(per_flow) = spec.knobs.max_pacing_rate else {
        return (None, None);
    };
    match rr.mode {
        RrMode::TcpRr => (Some(per_flow), None),
        // quic-rr too: one endpoint answers every flow's streams.
        RrMode::TcpCrr | RrMode::UdpRr | RrMode::QuicRr | RrMode::QuicCrr => {
            let bits = per_flow
                .saturating_mul(8)
                .saturating_mul(u64::from(rr.flows));
            let wait = Duration::from_secs_f64(rr.timeout_s);
            let wait_ns = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
            (None, Some(SharedRate::new(bits, wait_ns)))
        }
    }
}

/// Makes the session's rr socket.
fn open_socket(spec: &TestSpec, rr: &RrSpec, bind: SocketAddr) -> Result<RrSocket, PatternError> {
    match rr.mode {
        RrMode::QuicRr | RrMode::QuicCrr => {
            // Fails here in a build without QUIC.
            crate::transport::io(Transport::Quic)?;
            let knobs = Knobs {
                buffer: spec.knobs.buffer.or(Some(UDP_SERVER_BUFFER)),
                tos: spec.knobs.tos,
                ..Knobs::default()
            };
            let s = crate::transport::bind(Transport::Udp, bind, &knobs, false)?;
            Ok(RrSocket::Udp(s))
        }
        RrMode::UdpRr => {
            // One socket takes every flow's requests: give it room for a
            // burst from all of them (-w still decides when given).
            let knobs = Knobs {
                buffer: spec.knobs.buffer.or(Some(UDP_SERVER_BUFFER)),
                tos: spec.knobs.tos,
                ..Knobs::default()
            };
            let s = crate::transport::bind(Transport::Udp, bind, &knobs, false)?;
            s.set_nonblocking(true)
                .map_err(PatternError::io("make the rr socket non-blocking"))?;
            Ok(RrSocket::Udp(s))
        }
        _ => rr_listener(bind).map(RrSocket::Tcp),
    }
}

fn rr_listener(bind: SocketAddr) -> Result<std::net::TcpListener, PatternError> {
    let s = Socket::new(Domain::for_address(bind), Type::STREAM, None)
        .map_err(PatternError::io("open the rr listener"))?;
    s.set_reuse_address(true).ok();
    s.bind(&bind.into())
        .map_err(PatternError::io("bind the rr listener"))?;
    s.listen(4096)
        .map_err(PatternError::io("listen for rr flows"))?;
    s.set_nonblocking(true)
        .map_err(PatternError::io("make the rr listener non-blocking"))?;
    Ok(s.into())
}

/// What the rate budget did to the answers, for the log line.
fn budget_note(plan: &ServerPlan) -> String {
    let r = |bits: u64| xferlab_core::units::RateUnit::AutoBits.format_rate(bits as f64);
    if let Some(bytes) = plan.pacing {
        return format!(", answers paced to {} per flow", r(bytes.saturating_mul(8)));
    }
    let Some(b) = &plan.budget else {
        return String::new();
    };
    format!(
        ", answers held to {}: {} waited for their turn, {} dropped",
        r(b.rate_bps()),
        b.held(),
        b.dropped()
    )
}

fn outcome_line(r: Option<&SideReport>) -> String {
    let Some(rr) = r.and_then(|r| r.rr()) else {
        return "no local report".into();
    };
    format!(
        "answered {} transactions ({:.0}/s), cpu {:.0}%",
        rr.total.transactions_all,
        rr.total.per_second,
        r.map_or(0.0, |r| r.cpu.percent)
    )
}
