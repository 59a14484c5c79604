//! The client of a stream test: a thin event loop that feeds the sans-IO
//! [`ClientControl`] and drives this side's flows.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use xferlab_core::proto::wire::{Attach, AttachReply, ConnKind, Preamble, TOKEN_LEN};
use xferlab_core::proto::{ClientControl, ClientEvent, ErrorCode, Welcome, HANDSHAKE_TIMEOUT};
use xferlab_core::result::{Endpoint, FlowEnd, SideReport, Status, Summary, TestResult, SCHEMA};
use xferlab_core::spec::TestSpec;

use super::side::{ConnectedFlow, Side};
use crate::control::{ControlIo, Wake};
use crate::net::{self, sockopt};
use crate::output::{Reporter, StartInfo};
use crate::sys::cpu::CpuTally;
use crate::transport::{self, Carrier, FlowSocket};

/// What to run against which server.
#[derive(Clone)]
pub struct ClientConfig {
    pub spec: TestSpec,
    /// The server as the user named it.
    pub server: String,
    pub addrs: Vec<SocketAddr>,
    pub connect_timeout: Duration,
    /// The server runs in this process (no server named).
    pub embedded: bool,
}

/// A test that ran, completely or in part.
pub struct Outcome {
    pub result: TestResult,
    /// Set when the test did not end normally; the result still holds what
    /// was measured.
    pub error: Option<String>,
    pub interrupted: bool,
}

/// Ctrl-C presses seen so far (set from the signal handler).
pub type Interrupts = AtomicU32;

/// How often the loop looks at the Ctrl-C counter while idle.
const INTERRUPT_POLL: Duration = Duration::from_millis(100);

/// Runs one test. `Err` means nothing was measured (could not connect,
/// the server refused); once flows have started, problems end up in
/// [`Outcome::error`] next to the partial result.
pub fn run(
    cfg: &ClientConfig,
    reporter: &mut dyn Reporter,
    interrupts: &Interrupts,
) -> Result<Outcome, String> {
    if let Some(cc) = &cfg.spec.knobs.congestion {
        sockopt::check_congestion(cc)?;
    }
    let stream = net::connect_control(&cfg.addrs, cfg.connect_timeout)?;
    let server_addr = stream.peer_addr().map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel();
    let mut io = ControlIo::new(stream, tx.clone()).map_err(|e| e.to_string())?;
    let tally = Arc::new(CpuTally::default());
    let cpu_guard = tally.track();
    let wall_start = SystemTime::now();
    let mut ctl = ClientControl::new(Instant::now(), crate::software(), cfg.spec.clone());

    let mut session = String::new();
    let mut side: Option<Side> = None;
    let mut test_end: Option<Instant> = None;
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
                    match connect_flows(cfg, server_addr, &w) {
                        Ok(flows) => {
                            let notify = crate::control::flow_done_notifier(&tx);
                            side = Some(Side::prepare(
                                Endpoint::Client,
                                cfg.embedded,
                                &cfg.spec,
                                flows,
                                tally.clone(),
                                notify,
                            ));
                        }
                        Err(e) => {
                            ctl.abort(ErrorCode::Aborted, &e);
                            error = Some(e);
                        }
                    }
                }
                ClientEvent::Started => {
                    if let Some(s) = side.as_mut() {
                        if let Err(e) = s.start() {
                            ctl.abort(ErrorCode::Internal, &e);
                            error = Some(e);
                            continue;
                        }
                        let flows = s.flow_starts();
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
                            .map(|t| s.started_at() + Duration::from_secs_f64(t));
                    }
                }
                ClientEvent::PeerResults(r) => server_report = Some(r),
                ClientEvent::Failed(e) => {
                    error.get_or_insert(e.to_string());
                }
            }
        }
        // After the events, so conditions they change (results arrived, a
        // flow ended) are acted on at once rather than at the next wake.
        if let Some(s) = side.as_mut().filter(|s| s.was_started()) {
            s.reap();
            let live = s.tick(now);
            if !live.is_empty() {
                reporter.interval(&live).ok();
            }
            let presses = interrupts.load(Ordering::Relaxed);
            if presses >= 2 {
                error = Some("interrupted twice: aborted without the server's results".into());
                s.abort("aborted by the user");
                ctl.abort(ErrorCode::Aborted, "the user aborted the client");
            }
            let time_up = test_end.is_some_and(|t| now >= t);
            if !stop_sent && (time_up || presses == 1 || (test_end.is_none() && s.all_done())) {
                if presses == 1 && !time_up {
                    interrupted = true;
                }
                s.stop(now);
                ctl.stop(now);
                stop_sent = true;
            }
            if s.drain_deadline().is_some_and(|d| now >= d) && !s.all_done() {
                s.abort("no end of stream within 10 s after the test stopped: flows cut");
            }
            if server_report.is_some() && s.all_done() {
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
            side.as_ref().and_then(Side::next_tick),
            test_end.filter(|_| !stop_sent),
            ctl.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .chain(side.as_ref().and_then(Side::drain_deadline))
        .min()
        .map_or(INTERRUPT_POLL, |t| {
            t.saturating_duration_since(Instant::now())
                .min(INTERRUPT_POLL)
        });
        match rx.recv_timeout(wait) {
            Ok(Wake::Control(b)) => ctl.handle_input(Instant::now(), &b),
            Ok(Wake::ControlClosed) => ctl.handle_eof(),
            // The loop reaps and re-checks on every wake.
            Ok(Wake::FlowDone | Wake::Attach(..)) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => unreachable!("the loop holds a sender"),
        }
    }

    let Some(mut side) = side.filter(Side::was_started) else {
        return Err(error.unwrap_or_else(|| "the test ended before it started".into()));
    };
    if error.is_some() {
        side.abort("the test ended early");
    }
    drop(cpu_guard);
    let client = side.finish();
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

/// How a client's test ended, as its event loop saw it.
pub(crate) struct Ended {
    pub session: String,
    pub wall_start: SystemTime,
    pub client: SideReport,
    pub server: Option<SideReport>,
    pub error: Option<String>,
    pub interrupted: bool,
}

/// The end of every xferlab client (stream, rr): sends this side's report
/// to the server (unless the test failed), closes the control connection
/// and builds the result.
pub(crate) fn conclude(
    cfg: &ClientConfig,
    mut ctl: ClientControl,
    mut io: ControlIo,
    e: Ended,
) -> Outcome {
    let Ended {
        session,
        wall_start,
        client,
        server,
        mut error,
        interrupted,
    } = e;
    if error.is_none() {
        ctl.send_results(&client);
        if let Some(bytes) = ctl.poll_transmit() {
            if let Err(e) = io.send(&bytes) {
                error = Some(format!("could not send results to the server: {e}"));
            }
        }
    }
    drop(io);
    if interrupted && error.is_none() {
        error = Some(format!(
            "interrupted by the user after {:.1} s",
            client.duration_s
        ));
    }
    let result = assemble(cfg, session, wall_start, client, server, error.clone());
    Outcome {
        result,
        error,
        interrupted,
    }
}

/// Opens every flow's socket, presents the session token and waits for
/// the server to accept each one.
pub(crate) fn connect_flows(
    cfg: &ClientConfig,
    server: SocketAddr,
    w: &Welcome,
) -> Result<Vec<ConnectedFlow>, String> {
    let token = parse_token(&w.session)?;
    let plans = cfg.spec.flows();
    let carrier = cfg.spec.transport.carrier();
    if carrier == Carrier::Datagrams && w.udp_ports.len() != plans.len() {
        return Err(format!(
            "the server offered {} UDP ports for {} flows",
            w.udp_ports.len(),
            plans.len()
        ));
    }
    let mut out = Vec::with_capacity(plans.len());
    for (i, plan) in plans.into_iter().enumerate() {
        let mut hello = Preamble::new(ConnKind::Data).encode().to_vec();
        hello.extend_from_slice(
            &Attach {
                token,
                flow: plan.id,
            }
            .encode(),
        );
        let socket = match carrier {
            Carrier::Bytes => FlowSocket::Stream(attach_stream(cfg, server, &hello, plan.id)?),
            Carrier::Datagrams => {
                let to = SocketAddr::new(server.ip(), w.udp_ports[i]);
                FlowSocket::Datagram(attach_datagram(cfg, to, &hello, plan.id)?)
            }
            Carrier::UsbBulk => return Err("USB bulk tests run with `xferlab usb`".into()),
        };
        out.push(ConnectedFlow::new(
            plan,
            socket,
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
) -> Result<TcpStream, String> {
    let mut stream = transport::connect(&cfg.spec, server, cfg.connect_timeout)?;
    stream.set_nodelay(true).ok();
    stream
        .write_all(hello)
        .map_err(|e| format!("cannot attach flow {}: {e}", flow + 1))?;
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).ok();
    let mut reply = [0u8; 1];
    stream
        .read_exact(&mut reply)
        .map_err(|e| format!("the server did not accept flow {}: {e}", flow + 1))?;
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
) -> Result<UdpSocket, String> {
    let sock = transport::bind(
        cfg.spec.transport,
        net::any_port(to),
        &cfg.spec.knobs,
        false,
    )?;
    sock.connect(to)
        .map_err(|e| format!("cannot reach {to} over UDP: {e}"))?;
    sock.set_read_timeout(Some(UDP_ATTACH_RETRY)).ok();
    let mut reply = [0u8; 1];
    for _ in 0..UDP_ATTACH_TRIES {
        sock.send(hello)
            .map_err(|e| format!("cannot send to {to} over UDP: {e}"))?;
        match sock.recv(&mut reply) {
            Ok(1) => {
                check_reply(reply[0], flow)?;
                sock.set_read_timeout(None).ok();
                return Ok(sock);
            }
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                return Err(format!(
                    "the server's UDP port {} for flow {} is closed",
                    to.port(),
                    flow + 1
                ));
            }
            _ => {}
        }
    }
    Err(format!(
        "no answer to flow {}'s UDP attach at {to} within {:.0} s: is UDP to that port blocked by a firewall?",
        flow + 1,
        (UDP_ATTACH_RETRY * UDP_ATTACH_TRIES).as_secs_f64()
    ))
}

fn check_reply(code: u8, flow: u32) -> Result<(), String> {
    match AttachReply::from_byte(code) {
        Some(AttachReply::Ok) => Ok(()),
        Some(r) => Err(format!(
            "the server refused flow {}: {}",
            flow + 1,
            r.describe()
        )),
        None => Err(format!(
            "the server answered flow {} with unknown code {code}",
            flow + 1
        )),
    }
}

pub(crate) fn parse_token(hex: &str) -> Result<[u8; TOKEN_LEN], String> {
    let bad = || format!("the server sent a malformed session id '{hex}'");
    if hex.len() != 2 * TOKEN_LEN {
        return Err(bad());
    }
    let mut t = [0u8; TOKEN_LEN];
    for (i, b) in t.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16)
            .map_err(|_| bad())?;
    }
    Ok(t)
}

pub(crate) fn assemble(
    cfg: &ClientConfig,
    session: String,
    wall_start: SystemTime,
    client: SideReport,
    server: Option<SideReport>,
    error: Option<String>,
) -> TestResult {
    let summary = Summary::from_sides(&client, server.as_ref());
    // An rr test's transaction flows count like stream flows. Failed and
    // timed-out transactions are measurements, not a broken test.
    let rr_completed = |s: &SideReport| {
        s.rr.as_ref()
            .is_none_or(|r| r.flows.iter().all(|f| f.end == FlowEnd::Completed))
    };
    let all_completed = client
        .flows
        .iter()
        .chain(server.iter().flat_map(|s| s.flows.iter()))
        .all(|f| f.end == FlowEnd::Completed)
        && rr_completed(&client)
        && server.as_ref().is_none_or(rr_completed);
    let moved = client.flows.iter().any(|f| f.total.bytes_all > 0)
        || client
            .rr
            .as_ref()
            .is_some_and(|r| r.total.transactions_all > 0);
    let status = if error.is_none() && server.is_some() && all_completed {
        Status::Ok
    } else if moved {
        Status::Partial
    } else {
        Status::Failed
    };
    TestResult {
        schema: SCHEMA.into(),
        id: session,
        started_at: humantime::format_rfc3339_millis(wall_start).to_string(),
        software: crate::software(),
        spec: cfg.spec.clone(),
        server_address: cfg.server.clone(),
        client,
        server,
        summary,
        status,
        errors: error.into_iter().collect(),
        server_output: None,
        lab: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_bad_ones_are_refused() {
        let t = [0xab; TOKEN_LEN];
        assert_eq!(
            parse_token(&xferlab_core::proto::wire::token_hex(&t)),
            Ok(t)
        );
        assert!(parse_token("zz").is_err());
        assert!(parse_token(&"g".repeat(32)).is_err());
        assert!(parse_token(&"é".repeat(16)).is_err());
    }
}
