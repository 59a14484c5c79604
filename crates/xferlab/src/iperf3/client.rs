//! `xferlab stream --iperf3`: the stream pattern against a stock iperf3
//! server. The event loop has the shape of [`crate::stream::client`]'s;
//! the differences are iperf3's: only the client ends the test (TEST_END),
//! the server closes the data connections, results are totals exchanged
//! after the test, and UDP streams are opened with a 4-byte handshake.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use xferlab_core::iperf3::convert::{params_from_spec, results_from_side, side_from_results};
use xferlab_core::iperf3::wire::{is_udp_connect_reply, UDP_CONNECT_MSG};
use xferlab_core::iperf3::{
    i_errno, make_cookie, ClientEvent, Cookie, Iperf3Client, Results, UdpHeader,
};
use xferlab_core::result::{Endpoint, FlowRole, SideReport};
use xferlab_core::spec::{Limit, TestSpec, Transport};

use super::{RESULTS_DRAIN, UDP_HANDSHAKE_TIMEOUT};
use crate::control::{ControlIo, Wake};
use crate::net::{self, sockopt};
use crate::output::{Reporter, StartInfo};
use crate::stream::client::{assemble, ClientConfig, Interrupts, Outcome};
use crate::stream::datagram::DatagramWire;
use crate::stream::{ConnectedFlow, FlowSocket, Side};
use crate::sys::cpu::CpuTally;

/// How often the loop looks at the Ctrl-C counter while idle.
const INTERRUPT_POLL: Duration = Duration::from_millis(100);
/// Longest wait, after the senders stop, for their data to be
/// acknowledged before TEST_END goes out; and how often to look.
const END_DRAIN: Duration = Duration::from_secs(1);
const END_DRAIN_POLL: Duration = Duration::from_millis(1);

/// Runs one test against an iperf3 server. `Err` means nothing was
/// measured; once flows have started, problems end up in
/// [`Outcome::error`] next to the partial result.
pub fn run(
    cfg: &ClientConfig,
    get_server_output: bool,
    reporter: &mut dyn Reporter,
    interrupts: &Interrupts,
) -> Result<Outcome, String> {
    let spec = &cfg.spec;
    let params = params_from_spec(spec, get_server_output).map_err(|e| e.to_string())?;
    if let Some(cc) = &spec.knobs.congestion {
        sockopt::check_congestion(cc)?;
    }
    let mut random = [0u8; 36];
    getrandom::fill(&mut random).map_err(|e| format!("no randomness for the cookie: {e}"))?;
    let cookie = make_cookie(&random);
    let stream = net::connect_control(&cfg.addrs, cfg.connect_timeout).map_err(|e| {
        e.replace(
            net::XFERLAB_SERVER_HINT,
            "is an iperf3 server (`iperf3 -s`) running there (default port 5201, see -p)?",
        )
    })?;
    let server_addr = stream.peer_addr().map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel();
    let mut io = ControlIo::new(stream, tx.clone()).map_err(|e| e.to_string())?;
    let tally = Arc::new(CpuTally::default());
    let cpu_guard = tally.track();
    let wall_start = SystemTime::now();
    let wire = DatagramWire::Iperf3(UdpHeader {
        counters_64bit: params.udp_counters_64bit,
    });
    let mut ctl = Iperf3Client::new(Instant::now(), cookie, params);

    let session = String::from_utf8_lossy(&cookie[..cookie.len() - 1]).into_owned();
    let mut side: Option<Side> = None;
    let mut report: Option<SideReport> = None;
    let mut test_end: Option<Instant> = None;
    let mut stop_sent = false;
    let mut end_by: Option<Instant> = None;
    let mut results_due: Option<Instant> = None;
    let mut peer: Option<Box<Results>> = None;
    let mut done = false;
    let mut error: Option<String> = None;
    let mut interrupted = false;

    'run: loop {
        let now = Instant::now();
        ctl.handle_timeout(now);
        while let Some(ev) = ctl.poll_event() {
            match ev {
                ClientEvent::OpenStreams { count } => {
                    match open_streams(cfg, server_addr, &cookie, count) {
                        Ok(flows) => {
                            let notify = crate::control::flow_done_notifier(&tx);
                            let mut s = Side::prepare(
                                Endpoint::Client,
                                false,
                                spec,
                                flows,
                                tally.clone(),
                                notify,
                            );
                            s.set_datagram_wire(wire);
                            side = Some(s);
                            ctl.streams_open(Instant::now());
                        }
                        Err(e) => {
                            ctl.abort();
                            error = Some(e);
                        }
                    }
                }
                ClientEvent::Started => {}
                ClientEvent::Running => {
                    if let Some(s) = side.as_mut() {
                        if let Err(e) = s.start() {
                            ctl.abort();
                            error = Some(e);
                            continue;
                        }
                        let flows = s.flow_starts();
                        reporter
                            .start(&StartInfo {
                                spec,
                                server: &cfg.server,
                                embedded: false,
                                session: &session,
                                flows: &flows,
                            })
                            .ok();
                        test_end = spec
                            .planned_seconds()
                            .map(|t| s.started_at() + Duration::from_secs_f64(t));
                    }
                }
                ClientEvent::ResultsRequested => {
                    results_due.get_or_insert(now);
                }
                ClientEvent::PeerResults(r) => peer = Some(r),
                ClientEvent::Done => done = true,
                ClientEvent::ServerBusy => {
                    error = Some(format!(
                        "the iperf3 server at {server_addr} is busy running another test: try again later"
                    ));
                }
                ClientEvent::ServerError { i_errno, errno } => {
                    let what = i_errno::describe(i_errno).unwrap_or("unknown error");
                    let os = errno
                        .filter(|e| *e != 0)
                        .map(|e| format!(", {}", std::io::Error::from_raw_os_error(e)))
                        .unwrap_or_default();
                    error = Some(format!(
                        "the iperf3 server at {server_addr} reported: {what} (i_errno {i_errno}{os})"
                    ));
                }
                ClientEvent::ServerTerminated => {
                    error = Some(format!(
                        "the iperf3 server at {server_addr} was stopped during the test"
                    ));
                }
                ClientEvent::Failed(e) => {
                    error.get_or_insert(format!("iperf3 server at {server_addr}: {e}"));
                }
            }
        }
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
                ctl.abort();
            }
            let time_up = test_end.is_some_and(|t| now >= t);
            if !stop_sent && (time_up || presses == 1 || byte_limit_reached(spec, s)) {
                if presses == 1 && !time_up {
                    interrupted = true;
                }
                // Only the client ends an iperf3 test, and an iperf3
                // server stops counting at TEST_END: send it once what our
                // senders wrote has arrived (bounded), so both ends' totals
                // agree. Receivers keep draining until the server closes
                // the data connections.
                s.stop(now);
                stop_sent = true;
                end_by = Some(now + END_DRAIN);
            }
            if let Some(by) = end_by {
                let senders_idle = !s.any_of_role(FlowRole::Sender)
                    || (s.all_of_role_done(FlowRole::Sender) && s.unacked_bytes() == 0);
                if senders_idle || now >= by {
                    ctl.end_test(now);
                    end_by = None;
                }
            }
            if let Some(since) = results_due {
                if !s.all_done() && now >= since + RESULTS_DRAIN {
                    s.cut(now);
                }
            }
        }
        if results_due.is_some() && report.is_none() {
            if let Some(s) = side.take_if(|s| s.all_done() || !s.was_started()) {
                let r = s.finish();
                ctl.send_results(Instant::now(), &results_from_side(&r, spec.transport));
                report = Some(r);
            }
        }
        while let Some(bytes) = ctl.poll_transmit() {
            if let Err(e) = io.send(&bytes) {
                error.get_or_insert(format!("lost the control connection to {server_addr}: {e}"));
                break 'run;
            }
        }
        if done || error.is_some() || ctl.is_closed() {
            break 'run;
        }
        let wait = [
            side.as_ref().and_then(Side::next_tick),
            test_end.filter(|_| !stop_sent),
            results_due.map(|t| t + RESULTS_DRAIN),
            end_by.map(|_| now + END_DRAIN_POLL),
            ctl.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
        .map_or(INTERRUPT_POLL, |t| {
            t.saturating_duration_since(Instant::now())
                .min(INTERRUPT_POLL)
        });
        match rx.recv_timeout(wait) {
            Ok(Wake::Control(b)) => ctl.handle_input(Instant::now(), &b),
            Ok(Wake::ControlClosed) => ctl.handle_eof(),
            Ok(Wake::FlowDone | Wake::Attach(..)) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => unreachable!("the loop holds a sender"),
        }
    }
    drop(io);
    let client = match (report, side) {
        (Some(r), _) => r,
        (None, Some(mut s)) if s.was_started() => {
            s.abort("the test ended early");
            s.finish()
        }
        _ => {
            return Err(error.unwrap_or_else(|| "the test ended before it started".into()));
        }
    };
    drop(cpu_guard);
    if !done && error.is_none() {
        error = Some(format!(
            "the iperf3 server at {server_addr} ended the session before the results exchange finished"
        ));
    }
    if interrupted && error.is_none() {
        error = Some(format!(
            "interrupted by the user after {:.1} s",
            client.duration_s
        ));
    }
    let server_output = peer.as_ref().and_then(|r| {
        r.server_output_text.clone().or_else(|| {
            r.server_output_json
                .as_ref()
                .and_then(|j| serde_json::to_string_pretty(j).ok())
        })
    });
    let server = peer.map(|r| side_from_results(&r, &client, &format!("iperf3 at {server_addr}")));
    let mut result = assemble(cfg, session, wall_start, client, server, error.clone());
    result.server_output = server_output;
    Ok(Outcome {
        result,
        error,
        interrupted,
    })
}

/// Whether a byte-limited test is complete, counted as iperf3 counts:
/// every local sender reached its quota, or the bytes received reached
/// the limit (a reverse test ends when the server's data has arrived).
fn byte_limit_reached(spec: &TestSpec, s: &Side) -> bool {
    let Limit::Bytes { bytes } = spec.limit else {
        return false;
    };
    s.all_of_role_done(FlowRole::Sender) || s.bytes_of_role(FlowRole::Receiver) >= bytes
}

/// Opens the `count` data streams the server asked for, one after
/// another as iperf3 does, in the order of [`TestSpec::flows`] (see
/// [`xferlab_core::iperf3::convert::plan_for_stream`]).
fn open_streams(
    cfg: &ClientConfig,
    server: SocketAddr,
    cookie: &Cookie,
    count: usize,
) -> Result<Vec<ConnectedFlow>, String> {
    let plans = cfg.spec.flows();
    if plans.len() != count {
        return Err(format!(
            "the iperf3 server asked for {count} streams where {} were planned",
            plans.len()
        ));
    }
    let mut out = Vec::with_capacity(count);
    for plan in plans {
        let socket = match cfg.spec.transport {
            Transport::Tcp => FlowSocket::Tcp(open_tcp(cfg, server, cookie, plan.id)?),
            Transport::Udp => FlowSocket::Udp(open_udp(cfg, server, plan.id)?),
            Transport::UsbBulk => return Err("iperf3 servers speak TCP and UDP only".into()),
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

fn open_tcp(
    cfg: &ClientConfig,
    server: SocketAddr,
    cookie: &Cookie,
    id: u32,
) -> Result<TcpStream, String> {
    let (mut stream, _sock) = net::connect_data(server, &cfg.spec.knobs, cfg.connect_timeout)?;
    stream
        .write_all(cookie)
        .map_err(|e| format!("cannot open iperf3 stream {id}: {e}"))?;
    stream.set_nodelay(cfg.spec.knobs.nodelay).ok();
    Ok(stream)
}

/// Connects a UDP socket to the server's port, sends the 4-byte hello and
/// waits for the answer. In reverse mode the server may already send data
/// on the stream before its answer arrives; that is skipped.
fn open_udp(cfg: &ClientConfig, server: SocketAddr, id: u32) -> Result<UdpSocket, String> {
    let any = if server.is_ipv6() {
        IpAddr::from([0u16; 8])
    } else {
        IpAddr::from([0u8; 4])
    };
    let sock = net::udp_socket(SocketAddr::new(any, 0), &cfg.spec.knobs)?;
    sock.connect(server)
        .map_err(|e| format!("cannot reach {server} over UDP: {e}"))?;
    sock.send(&UDP_CONNECT_MSG)
        .map_err(|e| format!("cannot send to {server} over UDP: {e}"))?;
    let deadline = Instant::now() + UDP_HANDSHAKE_TIMEOUT;
    let mut buf = vec![0u8; 65_536];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "no answer to UDP stream {id}'s handshake from {server} within {} s: is UDP to that port blocked?",
                UDP_HANDSHAKE_TIMEOUT.as_secs()
            ));
        }
        sock.set_read_timeout(Some(left)).ok();
        match sock.recv(&mut buf) {
            Ok(n) if is_udp_connect_reply(&buf[..n]) => {
                sock.set_read_timeout(None).ok();
                return Ok(sock);
            }
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                return Err(format!(
                    "the iperf3 server's UDP port {} is closed (stream {id})",
                    server.port()
                ))
            }
            Err(_) => {}
        }
    }
}
