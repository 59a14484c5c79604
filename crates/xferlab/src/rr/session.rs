//! The server's side of one rr test: the control loop around
//! [`ServerControl`] once the hello asked for the rr pattern. It opens
//! the session's rr socket, runs the engine threads, takes the background
//! stream flows' data connections like a stream session, and reports.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};
use xferlab_core::interval::IntervalClock;
use xferlab_core::proto::wire::{token_hex, TOKEN_LEN};
use xferlab_core::proto::{ErrorCode, ServerControl, ServerEvent, Welcome};
use xferlab_core::result::{Endpoint, SideReport};
use xferlab_core::rr::{RrMode, RrSpec};
use xferlab_core::spec::{Knobs, TestSpec, Transport};

use super::server_engine::{self, RrSocket, ServerPlan};
use super::side::RrSide;
use crate::control::{ControlIo, Wake};
use crate::server::Shared;
use crate::stream::session::attach_flow;
use crate::stream::side::{ConnectedFlow, Side};
use crate::sys::cpu::CpuTally;

/// Socket buffer of the server's one UDP rr socket unless -w says.
const UDP_SERVER_BUFFER: u64 = 4 << 20;
/// How long, after the client's stop, the rr engine may take to finish.
const RR_DRAIN: Duration = Duration::from_secs(5);

/// Serves an rr test on an accepted control connection. `reg_token` is
/// the session's registration: set it so the token is removed when the
/// session ends.
#[allow(clippy::too_many_arguments)]
pub fn serve(
    ctl: &mut ServerControl,
    io: &mut ControlIo,
    tx: &mpsc::Sender<Wake>,
    rx: &mpsc::Receiver<Wake>,
    reg_token: &mut Option<[u8; TOKEN_LEN]>,
    peer: SocketAddr,
    local_ip: IpAddr,
    shared: &Shared,
    spec: TestSpec,
) {
    let Some(rr) = spec.rr.clone() else { return };
    super::raise_nofile_limit();
    let tally = Arc::new(CpuTally::default());
    let cpu_guard = tally.track();
    let (token, socket) = match open(ctl, &spec, &rr, local_ip) {
        Ok(x) => x,
        Err(why) => {
            shared.log(format_args!("{peer}: refused: {why}"));
            flush(ctl, io);
            return;
        }
    };
    let rr_port = match &socket {
        RrSocket::Tcp(l) => l.local_addr().map_or(0, |a| a.port()),
        RrSocket::Udp(s) => s.local_addr().map_or(0, |a| a.port()),
    };
    let label = token_hex(&token)[..8].to_string();
    shared
        .registry
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(token, tx.clone());
    *reg_token = Some(token);
    let clock = IntervalClock::new(spec.interval_s, spec.omit_s);
    let wait = rr.wait.resolve(
        &spec.affinity,
        crate::net::canonical(peer).ip().is_loopback(),
    );
    let mut rr_side = RrSide::new(Endpoint::Server, rr.mode, wait, rr.flows, clock);
    rr_side.set_default_addrs(
        SocketAddr::new(local_ip, rr_port).to_string(),
        crate::net::canonical(peer).ip().to_string(),
    );
    let notify_tx = tx.clone();
    let plan = Arc::new(ServerPlan {
        wait,
        rr: rr.clone(),
        token,
        peer_ip: crate::net::canonical(peer).ip(),
        socket,
        claimed: (0..rr.flows).map(|_| AtomicBool::new(false)).collect(),
        attached: AtomicU32::new(0),
        notify: Box::new(move || {
            notify_tx.send(Wake::FlowDone).ok();
        }),
    });
    let pinned = spec.affinity.server;
    for k in 0..super::engine_threads(rr.flows) {
        let (plan, counters, flags, tally, done) = (
            plan.clone(),
            rr_side.counters.clone(),
            rr_side.flags.clone(),
            tally.clone(),
            tx.clone(),
        );
        let t = std::thread::Builder::new()
            .name(format!("xfer-rr-srv-{k}"))
            .spawn(move || {
                crate::sys::affinity::pin_data_thread(pinned);
                let cpu = tally.track();
                let out = server_engine::run(plan, counters, flags);
                drop(cpu);
                done.send(Wake::FlowDone).ok();
                out
            });
        match t {
            Ok(t) => rr_side.add_thread(t),
            Err(e) => {
                ctl.reject(ErrorCode::Internal, &format!("cannot start a thread: {e}"));
                flush(ctl, io);
                return;
            }
        }
    }
    ctl.accept(
        Instant::now(),
        Welcome {
            session: token_hex(&token),
            software: crate::software(),
            host: crate::sys::host::host_info(),
            max_duration_s: shared.cfg.max_duration.as_secs_f64(),
            udp_ports: Vec::new(),
            rr_port: Some(rr_port),
        },
    );
    shared.log(format_args!(
        "{label} {peer}: accepted rr {} x{} ({}+{} bytes, depth {}) with {} background flows{}",
        rr.mode.label(),
        rr.flows,
        rr.request_size,
        rr.response_size,
        rr.depth,
        rr.background,
        crate::stream::session::placement(&spec)
    ));

    let bg_spec = spec.background_spec();
    let mut pending: Vec<Option<ConnectedFlow>> =
        (0..bg_spec.flows().len()).map(|_| None).collect();
    let mut background: Option<Side> = None;
    let mut started = false;
    let mut rr_side = Some(rr_side);
    let mut report: Option<SideReport> = None;
    let mut failure: Option<String> = None;
    let counters_before =
        crate::sys::counters::snapshot(super::client::interface(local_ip).as_deref());

    loop {
        let now = Instant::now();
        ctl.handle_timeout(now);
        let mut finished = false;
        while let Some(ev) = ctl.poll_event() {
            match ev {
                ServerEvent::TestRequested(_) => {}
                ServerEvent::StopRequested => {
                    if let Some(r) = rr_side.as_mut() {
                        r.stop(Instant::now());
                    }
                    if let Some(b) = background.as_mut() {
                        b.stop(Instant::now());
                    }
                    if !started {
                        ctl.reject(ErrorCode::Aborted, "stopped before the test started");
                    }
                }
                ServerEvent::PeerResults(_) => {
                    shared.log(format_args!(
                        "{label} {peer}: done: {}",
                        outcome_line(report.as_ref())
                    ));
                    finished = true;
                }
                ServerEvent::Failed(e) => {
                    failure.get_or_insert(e.to_string());
                    finished = true;
                }
            }
        }
        if !started
            && !finished
            && pending.iter().all(Option::is_some)
            && (rr.mode != RrMode::TcpRr || plan.attached.load(Ordering::Relaxed) == rr.flows)
        {
            started = true;
            let now = Instant::now();
            if !pending.is_empty() {
                let flows = pending.drain(..).flatten().collect();
                let notify = crate::control::flow_done_notifier(tx);
                let mut s = Side::prepare(
                    Endpoint::Server,
                    shared.cfg.embedded,
                    &bg_spec,
                    flows,
                    tally.clone(),
                    notify,
                );
                if let Err(e) = s.start() {
                    ctl.reject(ErrorCode::Internal, &e);
                }
                background = Some(s);
            }
            if let Some(r) = rr_side.as_mut() {
                r.set_start(now);
            }
            ctl.flows_attached(now, spec.planned_seconds().map(Duration::from_secs_f64));
        }
        if let Some(b) = background.as_mut() {
            b.reap();
            b.tick(now);
            if b.drain_deadline().is_some_and(|d| now >= d) && !b.all_done() {
                b.abort("no end of stream within 10 s after the client stopped: flows cut");
            }
        }
        if let Some(r) = rr_side.as_mut() {
            r.tick(now);
            if r.stopped_at().is_some_and(|t| now >= t + RR_DRAIN) && !r.all_done() {
                r.abort("rr flows still busy 5 s after the client stopped: cut");
            }
        }
        let rr_done = rr_side
            .as_ref()
            .is_some_and(|r| r.stopped_at().is_some() && r.all_done());
        let bg_done = background.as_ref().is_none_or(|b| b.all_done());
        if rr_done && bg_done && report.is_none() && !finished {
            let r = rr_side.take().expect("checked");
            let rep = build_report(
                Endpoint::Server,
                r,
                background.take(),
                shared.cfg.embedded,
                &tally,
                &counters_before,
                local_ip,
            );
            ctl.send_results(Instant::now(), &rep);
            report = Some(rep);
        }
        flush(ctl, io);
        if finished || ctl.is_closed() {
            break;
        }
        let wait = [
            rr_side.as_ref().and_then(RrSide::next_tick),
            background.as_ref().and_then(Side::next_tick),
            ctl.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
        .map_or(Duration::from_millis(100), |t| {
            t.saturating_duration_since(Instant::now())
        })
        .min(Duration::from_millis(100));
        match rx.recv_timeout(wait) {
            Ok(Wake::Control(b)) => ctl.handle_input(Instant::now(), &b),
            Ok(Wake::ControlClosed) => ctl.handle_eof(),
            Ok(Wake::FlowDone) => {}
            Ok(Wake::Attach(flow, sock)) => {
                if let Err(why) = attach_flow(&mut pending, flow, sock, &bg_spec) {
                    shared.log(format_args!("{label} {peer}: {why}"));
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    drop(cpu_guard);
    if let Some(mut r) = rr_side.take() {
        r.abort(failure.as_deref().unwrap_or("session ended"));
    }
    if let Some(mut b) = background.take() {
        b.abort(failure.as_deref().unwrap_or("session ended"));
    }
    if let Some(why) = failure {
        shared.log(format_args!("{label} {peer}: ended: {why}"));
    }
}

fn flush(ctl: &mut ServerControl, io: &mut ControlIo) {
    while let Some(bytes) = ctl.poll_transmit() {
        if io.send(&bytes).is_err() {
            break;
        }
    }
}

/// Makes the token and the rr socket, or refuses the test.
fn open(
    ctl: &mut ServerControl,
    spec: &TestSpec,
    rr: &RrSpec,
    local_ip: IpAddr,
) -> Result<([u8; TOKEN_LEN], RrSocket), String> {
    let refuse = |ctl: &mut ServerControl, code, why: String| {
        ctl.reject(code, &why);
        Err(why)
    };
    let token = match crate::stream::session::new_token() {
        Ok(t) => t,
        Err(why) => return refuse(ctl, ErrorCode::Internal, why),
    };
    let bind = SocketAddr::new(local_ip, 0);
    let socket = match rr.mode {
        RrMode::UdpRr => {
            // One socket takes every flow's requests: give it room for a
            // burst from all of them (-w still decides when given).
            let knobs = Knobs {
                buffer: spec.knobs.buffer.or(Some(UDP_SERVER_BUFFER)),
                tos: spec.knobs.tos,
                ..Knobs::default()
            };
            crate::transport::bind(Transport::Udp, bind, &knobs, false).and_then(|s| {
                s.set_nonblocking(true).map_err(|e| e.to_string())?;
                Ok(RrSocket::Udp(s))
            })
        }
        _ => rr_listener(bind).map(RrSocket::Tcp),
    };
    match socket {
        Ok(s) => Ok((token, s)),
        Err(why) => refuse(ctl, ErrorCode::Internal, format!("on the server: {why}")),
    }
}

fn rr_listener(bind: SocketAddr) -> Result<std::net::TcpListener, String> {
    let s =
        Socket::new(Domain::for_address(bind), Type::STREAM, None).map_err(|e| e.to_string())?;
    s.set_reuse_address(true).ok();
    s.bind(&bind.into())
        .map_err(|e| format!("cannot bind the rr listener: {e}"))?;
    s.listen(4096).map_err(|e| format!("cannot listen: {e}"))?;
    s.set_nonblocking(true).map_err(|e| e.to_string())?;
    Ok(s.into())
}

/// This side's report: the background group (if any) in `flows`, the rr
/// group in `rr`, CPU and counters over the whole test.
#[allow(clippy::too_many_arguments)]
pub fn build_report(
    endpoint: Endpoint,
    rr_side: RrSide,
    background: Option<Side>,
    embedded: bool,
    tally: &Arc<CpuTally>,
    before: &(xferlab_core::counters::CounterSnapshot, Vec<String>),
    local_ip: IpAddr,
) -> SideReport {
    let start = rr_side.started_at();
    let mut rr_side = rr_side;
    let mut warnings = rr_side.take_warnings();
    let rr = rr_side.finish();
    let mut report = match background {
        Some(b) => b.finish(),
        None => {
            let wall = start.elapsed().as_secs_f64();
            let iface = super::client::interface(local_ip);
            let (after, more) = crate::sys::counters::snapshot(iface.as_deref());
            warnings.extend(more);
            SideReport {
                endpoint,
                host: crate::sys::host::host_info(),
                embedded,
                duration_s: rr.total.end_s,
                flows: Vec::new(),
                sums: Vec::new(),
                cpu: tally.usage(wall),
                counters: xferlab_core::result::KernelCounters {
                    interface: iface,
                    deltas: after.delta(&before.0),
                },
                warnings: before.1.clone(),
                usb: None,
                rr: None,
            }
        }
    };
    report.warnings.extend(warnings);
    report.duration_s = report.duration_s.max(rr.total.end_s);
    report.rr = Some(rr);
    report
}

fn outcome_line(r: Option<&SideReport>) -> String {
    let Some(rr) = r.and_then(|r| r.rr.as_ref()) else {
        return "no local report".into();
    };
    format!(
        "answered {} transactions ({:.0}/s), cpu {:.0}%",
        rr.total.transactions_all,
        rr.total.per_second,
        r.map_or(0.0, |r| r.cpu.percent)
    )
}
