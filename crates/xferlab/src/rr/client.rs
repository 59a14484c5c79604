//! The client of an rr test: the control loop around [`ClientControl`],
//! connecting the rr flows and any background stream flows, driving the
//! engine threads and assembling the result.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use xferlab_core::interval::IntervalClock;
use xferlab_core::proto::{ClientControl, ClientEvent, ErrorCode, Welcome};
use xferlab_core::result::{Endpoint, SideReport};
use xferlab_core::rr::wire::encode_tcp_hello;
use xferlab_core::rr::{RrMode, RrSpec};
use xferlab_core::spec::{Knobs, Transport};

use super::client_flow::{self, ClientConn, ClientPlan};
use super::side::RrSide;
use crate::control::{ControlIo, Wake};
use crate::net::{self, sockopt};
use crate::output::{Reporter, StartInfo};
use crate::stream::client::{
    conclude, connect_flows, parse_token, ClientConfig, Ended, Interrupts, Outcome,
};
use crate::stream::side::Side;
use crate::sys::cpu::CpuTally;

const INTERRUPT_POLL: Duration = Duration::from_millis(100);

/// The interface whose /proc/net/dev line belongs to `ip`.
pub fn interface(ip: IpAddr) -> Option<String> {
    crate::sys::counters::interface_for(ip)
}

/// Runs one rr test (see [`crate::stream::client::run`] for the contract).
pub fn run(
    cfg: &ClientConfig,
    reporter: &mut dyn Reporter,
    interrupts: &Interrupts,
) -> Result<Outcome, String> {
    let rr = cfg.spec.rr.clone().ok_or("not an rr test")?;
    let limit = super::raise_nofile_limit();
    let need = u64::from(rr.flows) * if cfg.embedded { 2 } else { 1 } + 64;
    if rr.mode != RrMode::TcpCrr && limit < need {
        return Err(format!(
            "{} flows need about {need} open files but the limit is {limit}; raise it (ulimit -n) or use fewer -F flows",
            rr.flows
        ));
    }
    if let Some(cc) = &cfg.spec.knobs.congestion {
        sockopt::check_congestion(cc)?;
    }
    let stream = net::connect_control(&cfg.addrs, cfg.connect_timeout)?;
    let server_addr = stream.peer_addr().map_err(|e| e.to_string())?;
    let local_ip = stream.local_addr().map_err(|e| e.to_string())?.ip();
    let (tx, rx) = mpsc::channel();
    let mut io = ControlIo::new(stream, tx.clone()).map_err(|e| e.to_string())?;
    let tally = Arc::new(CpuTally::default());
    let cpu_guard = tally.track();
    let wall_start = SystemTime::now();
    let counters_before = crate::sys::counters::snapshot(interface(local_ip).as_deref());
    let mut ctl = ClientControl::new(Instant::now(), crate::software(), cfg.spec.clone());
    let bg_cfg = ClientConfig {
        spec: cfg.spec.background_spec(),
        ..cfg.clone()
    };
    let clock = IntervalClock::new(cfg.spec.interval_s, cfg.spec.omit_s);

    let mut session = String::new();
    let mut background: Option<Side> = None;
    let mut rr_side: Option<RrSide> = None;
    let mut conns: Vec<(u32, ClientConn)> = Vec::new();
    let mut plan: Option<Arc<ClientPlan>> = None;
    let mut test_end: Option<Instant> = None;
    let mut stopping = false;
    let mut stop_sent = false;
    let mut server_report: Option<Box<SideReport>> = None;
    let mut error: Option<String> = None;
    let mut interrupted = false;

    'run: loop {
        let now = Instant::now();
        ctl.handle_timeout(now);
        while let Some(ev) = ctl.poll_event() {
            match ev {
                ClientEvent::Welcome(w) => {
                    session = w.session.clone();
                    let connected = connect_rr(cfg, &rr, server_addr, &w).and_then(|(p, c)| {
                        let flows = if bg_cfg.spec.parallel > 0 {
                            connect_flows(&bg_cfg, server_addr, &w)?
                        } else {
                            Vec::new()
                        };
                        Ok((p, c, flows))
                    });
                    match connected {
                        Ok((p, c, flows)) => {
                            plan = Some(Arc::new(p));
                            conns = c;
                            if !flows.is_empty() {
                                let notify = crate::control::flow_done_notifier(&tx);
                                background = Some(Side::prepare(
                                    Endpoint::Client,
                                    cfg.embedded,
                                    &bg_cfg.spec,
                                    flows,
                                    tally.clone(),
                                    notify,
                                ));
                            }
                        }
                        Err(e) => {
                            ctl.abort(ErrorCode::Aborted, &e);
                            error = Some(e);
                        }
                    }
                }
                ClientEvent::Started => {
                    let Some(p) = plan.clone() else { continue };
                    let mut side = RrSide::new(Endpoint::Client, rr.mode, p.wait, rr.flows, clock);
                    if let Some(b) = background.as_mut() {
                        if let Err(e) = b.start() {
                            ctl.abort(ErrorCode::Internal, &e);
                            error = Some(e);
                            continue;
                        }
                    }
                    let start = Instant::now();
                    side.set_start(start);
                    let mut p2 = ClientPlan { ..clone_plan(&p) };
                    p2.measure_from = start + Duration::from_secs_f64(cfg.spec.omit_s);
                    let p = Arc::new(p2);
                    if let Err(e) = spawn_engines(
                        &mut side,
                        &p,
                        std::mem::take(&mut conns),
                        cfg.spec.affinity.client,
                        &tally,
                        &tx,
                    ) {
                        ctl.abort(ErrorCode::Internal, &e);
                        error = Some(e);
                    }
                    let flows = background
                        .as_ref()
                        .map(Side::flow_starts)
                        .unwrap_or_default();
                    reporter
                        .start(&StartInfo {
                            spec: &cfg.spec,
                            server: &cfg.server,
                            embedded: cfg.embedded,
                            session: &session,
                            flows: &flows,
                        })
                        .ok();
                    test_end = cfg
                        .spec
                        .planned_seconds()
                        .map(|t| start + Duration::from_secs_f64(t));
                    rr_side = Some(side);
                }
                ClientEvent::PeerResults(r) => server_report = Some(r),
                ClientEvent::Failed(e) => {
                    error.get_or_insert(e.to_string());
                }
            }
        }
        if let Some(side) = rr_side.as_mut() {
            if let Some(b) = background.as_mut() {
                b.reap();
                let live = b.tick(now);
                if !live.is_empty() {
                    reporter.interval(&live).ok();
                }
            }
            if let Some(iv) = side.tick(now) {
                reporter.rr_interval(&iv).ok();
            }
            let presses = interrupts.load(Ordering::Relaxed);
            if presses >= 2 {
                error = Some("interrupted twice: aborted without the server's results".into());
                side.abort("aborted by the user");
                if let Some(b) = background.as_mut() {
                    b.abort("aborted by the user");
                }
                ctl.abort(ErrorCode::Aborted, "the user aborted the client");
            }
            let time_up = test_end.is_some_and(|t| now >= t);
            if !stopping && (time_up || presses == 1) {
                if presses == 1 && !time_up {
                    interrupted = true;
                }
                side.stop(now);
                if let Some(b) = background.as_mut() {
                    b.stop(now);
                }
                stopping = true;
            }
            // The server is told to stop once every transaction has been
            // answered (or given up on), so both ends count the same ones.
            if stopping && !stop_sent && side.all_done() {
                ctl.stop(now);
                stop_sent = true;
            }
            let bg_done = background.as_ref().is_none_or(|b| b.all_done());
            if let Some(b) = background.as_mut() {
                if b.drain_deadline().is_some_and(|d| now >= d) && !b.all_done() {
                    b.abort("no end of stream within 10 s after the test stopped: flows cut");
                }
            }
            if server_report.is_some() && side.all_done() && bg_done {
                break 'run;
            }
        } else if interrupts.load(Ordering::Relaxed) > 0 && error.is_none() {
            ctl.abort(
                ErrorCode::Aborted,
                "the user interrupted the client before the test started",
            );
            error = Some("interrupted before the test started".into());
        }
        if let Some(bytes) = ctl.poll_transmit() {
            if let Err(e) = io.send(&bytes) {
                error.get_or_insert(format!("lost the control connection to {server_addr}: {e}"));
                break 'run;
            }
        }
        if error.is_some() {
            break 'run;
        }
        let wait = [
            rr_side.as_ref().and_then(RrSide::next_tick),
            background.as_ref().and_then(Side::next_tick),
            test_end.filter(|_| !stopping),
            ctl.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
        .map_or(INTERRUPT_POLL, |t| {
            t.saturating_duration_since(Instant::now())
        })
        .min(INTERRUPT_POLL);
        match rx.recv_timeout(wait) {
            Ok(Wake::Control(b)) => ctl.handle_input(Instant::now(), &b),
            Ok(Wake::ControlClosed) => ctl.handle_eof(),
            Ok(Wake::FlowDone | Wake::Attach(..)) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => unreachable!("the loop holds a sender"),
        }
    }

    let Some(mut side) = rr_side else {
        return Err(error.unwrap_or_else(|| "the test ended before it started".into()));
    };
    if error.is_some() {
        side.abort("the test ended early");
        if let Some(b) = background.as_mut() {
            b.abort("the test ended early");
        }
    }
    drop(cpu_guard);
    let client = super::session::build_report(
        Endpoint::Client,
        side,
        background,
        cfg.embedded,
        &tally,
        &counters_before,
        local_ip,
    );
    Ok(conclude(
        cfg,
        ctl,
        io,
        Ended {
            session,
            wall_start,
            client,
            server: server_report.map(|b| *b),
            error,
            interrupted,
        },
    ))
}

fn clone_plan(p: &ClientPlan) -> ClientPlan {
    ClientPlan {
        rr: p.rr.clone(),
        server: p.server,
        token: p.token,
        knobs: p.knobs.clone(),
        measure_from: p.measure_from,
        wait: p.wait,
    }
}

/// Connects the rr flows (TCP RR: one connection each, announced with
/// the token; UDP: one connected socket each; CRR: nothing yet).
fn connect_rr(
    cfg: &ClientConfig,
    rr: &RrSpec,
    server: SocketAddr,
    w: &Welcome,
) -> Result<(ClientPlan, Vec<(u32, ClientConn)>), String> {
    let token = parse_token(&w.session)?;
    let port = w
        .rr_port
        .ok_or("the server did not offer an rr port: is it an older xferlab?")?;
    let to = SocketAddr::new(server.ip(), port);
    let plan = ClientPlan {
        rr: rr.clone(),
        server: to,
        token,
        knobs: cfg.spec.knobs.clone(),
        measure_from: Instant::now(),
        wait: rr.wait.resolve(
            &cfg.spec.affinity,
            crate::net::canonical(to).ip().is_loopback(),
        ),
    };
    let mut conns = Vec::with_capacity(rr.flows as usize);
    for id in 0..rr.flows {
        let c = match rr.mode {
            RrMode::TcpRr => {
                let mut s = crate::transport::connect(&cfg.spec, to, cfg.connect_timeout)?;
                s.set_nodelay(true).ok();
                s.write_all(&encode_tcp_hello(&token, id))
                    .map_err(|e| format!("cannot open rr flow {}: {e}", id + 1))?;
                s.set_nonblocking(true).map_err(|e| e.to_string())?;
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
                    .map_err(|e| format!("cannot reach {to} over UDP: {e}"))?;
                s.set_nonblocking(true).map_err(|e| e.to_string())?;
                ClientConn::Udp(s)
            }
            RrMode::TcpCrr => ClientConn::Crr,
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
) -> Result<(), String> {
    let n = super::engine_threads(plan.rr.flows);
    let mut shares: Vec<Vec<(u32, ClientConn)>> = (0..n).map(|_| Vec::new()).collect();
    for (k, c) in conns.into_iter().enumerate() {
        shares[k % n].push(c);
    }
    for (k, share) in shares.into_iter().enumerate() {
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
                let out = client_flow::run(plan, share, counters, flags);
                drop(cpu);
                done.send(Wake::FlowDone).ok();
                out
            })
            .map_err(|e| format!("cannot start an rr thread: {e}"))?;
        side.add_thread(t);
    }
    Ok(())
}
