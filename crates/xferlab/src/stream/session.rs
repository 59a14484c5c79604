//! The server's side of one test: a thin event loop around the sans-IO
//! [`ServerControl`], owning this test's flows and nothing else.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use xferlab_core::proto::wire::{
    token_hex, Attach, AttachReply, ConnKind, Preamble, ATTACH_LEN, PREAMBLE_LEN, TOKEN_LEN,
    VERSION,
};
use xferlab_core::proto::{
    ErrorCode, ServerControl, ServerEvent, ServerPolicy, Welcome, HANDSHAKE_TIMEOUT,
};
use xferlab_core::result::{Endpoint, FlowRole, SideReport, Throughput};
use xferlab_core::spec::{Direction, Limit, Pattern, TestSpec};
use xferlab_core::units::RateUnit;

use super::side::{ConnectedFlow, Side};
use crate::control::{ControlIo, Wake};
use crate::net::{self, sockopt};
use crate::server::Shared;
use crate::sys::cpu::CpuTally;
use crate::transport::{self, Carrier, FlowSocket};

/// Removes the session's token and its count when the session ends,
/// whichever way it ends.
struct Registration<'a> {
    shared: &'a Shared,
    token: Option<[u8; TOKEN_LEN]>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.token {
            self.shared
                .registry
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&t);
        }
        self.shared.sessions.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves one control connection until its test is over.
pub fn serve(stream: TcpStream, peer: SocketAddr, peer_version: u16, shared: &Shared) {
    stream.set_read_timeout(None).ok();
    stream.set_nodelay(true).ok();
    // UDP flow sockets bind to the address the client reached us on.
    let local_ip = stream
        .local_addr()
        .map_or(IpAddr::from([0u8, 0, 0, 0]), |a| net::canonical(a).ip());
    crate::net::keepalive(&stream);
    let policy = ServerPolicy {
        max_duration: shared.cfg.max_duration,
    };
    let (tx, rx) = mpsc::channel();
    let Ok(mut io) = ControlIo::new(stream, tx.clone()) else {
        return;
    };
    let mut ctl = ServerControl::new(Instant::now(), peer_version, policy);
    let running = shared.sessions.fetch_add(1, Ordering::Relaxed);
    let mut reg = Registration {
        shared,
        token: None,
    };
    if running >= shared.cfg.max_sessions {
        ctl.reject(
            ErrorCode::Busy,
            &format!(
                "server busy: {running} tests running (its --max-sessions limit); try again later"
            ),
        );
    }
    let tally = Arc::new(CpuTally::default());
    let cpu_guard = tally.track();
    let mut spec: Option<TestSpec> = None;
    let mut pending: Vec<Option<ConnectedFlow>> = Vec::new();
    let mut side: Option<Side> = None;
    let mut report: Option<SideReport> = None;
    let mut label = String::from("--------");
    let mut failure: Option<String> = None;

    loop {
        let now = Instant::now();
        ctl.handle_timeout(now);
        let mut finished = false;
        while let Some(ev) = ctl.poll_event() {
            let ev = match ev {
                ServerEvent::TestRequested(mut s) => match admit(shared, &mut s) {
                    Ok(()) => ServerEvent::TestRequested(s),
                    Err(why) => {
                        ctl.reject(ErrorCode::InvalidSpec, &why);
                        shared.log(format_args!("{peer}: refused: {why}"));
                        failure = Some(why);
                        continue;
                    }
                },
                ev => ev,
            };
            match ev {
                ServerEvent::TestRequested(s) if s.pattern == Pattern::Rr => {
                    // The rr pattern has its own loop; this session's
                    // registration and CPU guard still frame it.
                    crate::rr::session::serve(
                        &mut ctl,
                        &mut io,
                        &tx,
                        &rx,
                        &mut reg.token,
                        peer,
                        local_ip,
                        shared,
                        *s,
                    );
                    return;
                }
                ServerEvent::TestRequested(s) => {
                    match accept_test(&mut ctl, &mut reg, &tx, &s, local_ip, shared) {
                        Ok(token) => {
                            label = token_hex(&token)[..8].to_string();
                            shared.log(format_args!("{label} {peer}: accepted {}", describe(&s)));
                            pending = (0..s.flows().len()).map(|_| None).collect();
                        }
                        Err(why) => {
                            shared.log(format_args!("{peer}: refused: {why}"));
                            failure = Some(why);
                        }
                    }
                    spec = Some(*s);
                }
                ServerEvent::StopRequested => {
                    if let Some(s) = side.as_mut() {
                        s.stop(Instant::now());
                    } else {
                        // Stopped before all flows arrived: nothing to run.
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
        // After the events, so a stop that arrives when every flow has
        // already ended is answered at once rather than at the next wake.
        if let Some(s) = side.as_mut().filter(|_| !finished) {
            s.reap();
            s.tick(now);
            if s.drain_deadline().is_some_and(|d| now >= d) && !s.all_done() {
                s.abort("no end of stream within 10 s after the client stopped: flows cut");
            }
            if s.drain_deadline().is_some() && s.all_done() {
                let done = side.take().expect("checked");
                let r = done.finish();
                ctl.send_results(Instant::now(), &r);
                report = Some(r);
            }
        }
        if let Some(bytes) = ctl.poll_transmit() {
            if io.send(&bytes).is_err() {
                failure.get_or_insert_with(|| "control connection lost".into());
                break;
            }
        }
        if finished || ctl.is_closed() {
            break;
        }
        let wait = side
            .as_ref()
            .and_then(Side::next_tick)
            .into_iter()
            .chain(ctl.poll_timeout())
            .chain(side.as_ref().and_then(Side::drain_deadline))
            .min()
            .map_or(Duration::from_secs(1), |t| {
                t.saturating_duration_since(Instant::now())
            });
        match rx.recv_timeout(wait) {
            Ok(Wake::Control(b)) => ctl.handle_input(Instant::now(), &b),
            Ok(Wake::ControlClosed) => ctl.handle_eof(),
            // The loop reaps and re-checks on every wake.
            Ok(Wake::FlowDone) => {}
            Ok(Wake::Attach(flow, stream)) => {
                let Some(sp) = spec.as_ref() else { continue };
                if let Err(why) = attach_flow(&mut pending, flow, stream, sp) {
                    shared.log(format_args!("{label} {peer}: {why}"));
                    continue;
                }
                if !pending.is_empty() && pending.iter().all(Option::is_some) {
                    let flows = pending.drain(..).flatten().collect();
                    let notify = crate::control::flow_done_notifier(&tx);
                    let mut s = Side::prepare(
                        Endpoint::Server,
                        shared.cfg.embedded,
                        sp,
                        flows,
                        tally.clone(),
                        notify,
                    );
                    match s.start() {
                        Ok(()) => {
                            let planned = sp.planned_seconds().map(Duration::from_secs_f64);
                            ctl.flows_attached(s.started_at(), planned);
                            side = Some(s);
                        }
                        Err(e) => ctl.reject(ErrorCode::Internal, &e),
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => unreachable!("the loop holds a sender"),
        }
    }
    drop(cpu_guard);
    if let Some(mut s) = side.take() {
        s.abort(failure.as_deref().unwrap_or("session ended"));
    }
    if let Some(why) = failure {
        shared.log(format_args!("{label} {peer}: ended: {why}"));
    }
}

/// What only the server can check of a test, for both patterns: where
/// its data threads may run (the spec gets the server's CPU) and whether
/// its congestion control exists here.
fn admit(shared: &Shared, spec: &mut TestSpec) -> Result<(), String> {
    shared.place(spec)?;
    if let Some(cc) = &spec.knobs.congestion {
        sockopt::check_congestion(cc).map_err(|why| format!("on the server: {why}"))?;
    }
    Ok(())
}

/// A fresh random session token.
pub(crate) fn new_token() -> Result<[u8; TOKEN_LEN], String> {
    let mut token = [0u8; TOKEN_LEN];
    getrandom::fill(&mut token).map_err(|e| format!("no randomness for a session token: {e}"))?;
    Ok(token)
}

/// Registers the session's token and welcomes the client.
fn accept_test(
    ctl: &mut ServerControl,
    reg: &mut Registration<'_>,
    tx: &mpsc::Sender<Wake>,
    spec: &TestSpec,
    local_ip: IpAddr,
    shared: &Shared,
) -> Result<[u8; TOKEN_LEN], String> {
    let refuse = |ctl: &mut ServerControl, code, why: String| {
        ctl.reject(code, &why);
        Err(why)
    };
    let token = match new_token() {
        Ok(t) => t,
        Err(why) => return refuse(ctl, ErrorCode::Internal, why),
    };
    let mut udp_ports = Vec::new();
    if spec.transport.carrier() == Carrier::Datagrams {
        for plan in spec.flows() {
            let bind = SocketAddr::new(local_ip, 0);
            let sock = match transport::bind(spec.transport, bind, &spec.knobs, false) {
                Ok(s) => s,
                Err(why) => {
                    return refuse(ctl, ErrorCode::Internal, format!("on the server: {why}"))
                }
            };
            udp_ports.push(sock.local_addr().map_or(0, |a| a.port()));
            let tx = tx.clone();
            let spawned = std::thread::Builder::new()
                .name("xfer-udp-attach".into())
                .spawn(move || await_udp_attach(sock, plan.id, token, &tx));
            if let Err(e) = spawned {
                return refuse(
                    ctl,
                    ErrorCode::Internal,
                    format!("cannot start a thread: {e}"),
                );
            }
        }
    }
    shared
        .registry
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(token, tx.clone());
    reg.token = Some(token);
    ctl.accept(
        Instant::now(),
        Welcome {
            session: token_hex(&token),
            software: crate::software(),
            host: crate::sys::host::host_info(),
            max_duration_s: shared.cfg.max_duration.as_secs_f64(),
            udp_ports,
            rr_port: None,
        },
    );
    Ok(token)
}

/// Waits on one datagram flow socket for the client's attach datagram, then
/// connects the socket to the sender, acknowledges, and hands the socket
/// to the session. Datagrams with another token or flow are ignored; the
/// wait ends at the handshake deadline (or when the session is gone).
fn await_udp_attach(sock: UdpSocket, flow: u32, token: [u8; TOKEN_LEN], tx: &mpsc::Sender<Wake>) {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    sock.set_read_timeout(Some(Duration::from_millis(200))).ok();
    let mut buf = [0u8; PREAMBLE_LEN + ATTACH_LEN + 1];
    while Instant::now() < deadline {
        let Ok((n, peer)) = sock.recv_from(&mut buf) else {
            continue;
        };
        if n != PREAMBLE_LEN + ATTACH_LEN {
            continue;
        }
        let mut pre = [0u8; PREAMBLE_LEN];
        pre.copy_from_slice(&buf[..PREAMBLE_LEN]);
        let mut raw = [0u8; ATTACH_LEN];
        raw.copy_from_slice(&buf[PREAMBLE_LEN..n]);
        let attach = Attach::decode(&raw);
        let ours = matches!(Preamble::decode(&pre), Ok(p) if p.kind == ConnKind::Data && p.version == VERSION);
        if !ours || attach.token != token || attach.flow != flow || sock.connect(peer).is_err() {
            continue;
        }
        sock.send(&[AttachReply::Ok as u8]).ok();
        sock.set_read_timeout(None).ok();
        tx.send(Wake::Attach(flow, FlowSocket::Datagram(sock))).ok();
        return;
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
        "{} stream {dir} x{} {limit}{}",
        s.transport.label(),
        s.parallel,
        placement(s)
    )
}

/// ", data threads on CPU N" when this server pins them (`-A`), for its
/// log lines.
pub(crate) fn placement(s: &TestSpec) -> String {
    s.affinity
        .server
        .map_or(String::new(), |c| format!(", data threads on CPU {c}"))
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
