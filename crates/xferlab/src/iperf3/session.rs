//! The server's side of one test for a stock iperf3 client: a thin event
//! loop around the sans-IO [`Iperf3Server`], running the test with the
//! stream pattern's flows.
//!
//! TCP streams reach the session through the server's front door (they
//! open with this session's cookie). UDP streams open with a 4-byte
//! datagram to the same port number the control connection used: the
//! session binds a socket there, and for each stream connects it to the
//! sender, binds the next one and answers (iperf3's own scheme), so the
//! kernel hands every stream its own socket. One session at a time may
//! wait for UDP streams on a given address; others queue for it.

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use xferlab_core::iperf3::convert::{plan_for_stream, results_from_side, spec_from_params};
use xferlab_core::iperf3::wire::{access_denied, UDP_CONNECT_REPLY};
use xferlab_core::iperf3::{
    i_errno, stream_index, Cookie, Iperf3Server, Params, ServerEvent, UdpHeader, SETUP_TIMEOUT,
    WATCHDOG_GRACE,
};
use xferlab_core::result::{Endpoint, FlowRole, SideReport};
use xferlab_core::spec::{FlowPlan, Knobs, TestSpec, Transport};
use xferlab_core::units::RateUnit;

use super::RESULTS_DRAIN;
use crate::control::{ControlIo, Wake};
use crate::net::{self, sockopt};
use crate::server::Shared;
use crate::stream::session::{describe, outcome_line};
use crate::stream::{ConnectedFlow, Side};
use crate::sys::cpu::CpuTally;
use crate::transport::datagram::DatagramWire;
use crate::transport::{self, Carrier, FlowSocket};

/// How often a stopped session looks whether its receivers have all the
/// client sent.
const CATCH_UP_POLL: Duration = Duration::from_millis(1);

/// Removes the session's cookie and its count when the session ends,
/// whichever way it ends.
struct Registration<'a> {
    shared: &'a Shared,
    cookie: Cookie,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.shared
            .iperf3
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.cookie);
        self.shared.sessions.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The test as accepted: what to run and the flows in stream order.
struct Accepted {
    spec: TestSpec,
    plans: Vec<FlowPlan>,
    wire: DatagramWire,
    get_server_output: bool,
}

/// Serves one iperf3 control connection (its cookie already read) until
/// its test is over.
pub fn serve(mut stream: TcpStream, peer: SocketAddr, cookie: Cookie, shared: &Arc<Shared>) {
    stream.set_read_timeout(None).ok();
    stream.set_nodelay(true).ok();
    crate::net::keepalive(&stream);
    let running = shared.sessions.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = mpsc::channel();
    let _reg = Registration { shared, cookie };
    if running >= shared.cfg.max_sessions {
        // What a busy iperf3 server answers; every iperf3 client reports
        // it as "the server is busy running a test".
        use std::io::Write;
        stream.write_all(&access_denied()).ok();
        shared.log(format_args!(
            "{peer}: iperf3 client refused: {running} tests running (--max-sessions)"
        ));
        return;
    }
    let local = match stream.local_addr() {
        Ok(a) => net::canonical(a),
        Err(_) => return,
    };
    shared
        .iperf3
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(cookie, tx.clone());
    let Ok(mut io) = ControlIo::new(stream, tx.clone()) else {
        return;
    };
    let label = String::from_utf8_lossy(&cookie[..8]).into_owned();
    let tally = Arc::new(CpuTally::default());
    let cpu_guard = tally.track();
    let mut ctl = Iperf3Server::new(Instant::now(), &cookie);
    let mut test: Option<Accepted> = None;
    let mut connected: Vec<ConnectedFlow> = Vec::new();
    let mut side: Option<Side> = None;
    let mut stopped_at: Option<Instant> = None;
    let mut cut_at: Option<Instant> = None;
    let mut peer_sent: Option<Vec<(u32, u64)>> = None;
    let mut report: Option<SideReport> = None;
    let mut failure: Option<String> = None;

    loop {
        let now = Instant::now();
        ctl.handle_timeout(now);
        let mut finished = false;
        while let Some(ev) = ctl.poll_event() {
            match ev {
                ServerEvent::ParamsReceived(p) => match accept(&p, shared, local, &tx) {
                    Ok(a) => {
                        shared.log(format_args!(
                            "{label} {peer}: iperf3 {} client: accepted {}",
                            p.client_version.as_deref().unwrap_or("(unknown)"),
                            describe(&a.spec)
                        ));
                        let unbounded = shared.cfg.max_duration + WATCHDOG_GRACE;
                        ctl.accept(Instant::now(), p.watchdog(WATCHDOG_GRACE, unbounded));
                        test = Some(a);
                    }
                    Err((code, why)) => {
                        shared.log(format_args!("{peer}: iperf3 client refused: {why}"));
                        ctl.refuse(code);
                        failure = Some(why);
                    }
                },
                ServerEvent::Running => {
                    let Some(t) = test.as_ref() else { continue };
                    let notify = crate::control::flow_done_notifier(&tx);
                    let mut s = Side::prepare(
                        Endpoint::Server,
                        shared.cfg.embedded,
                        &t.spec,
                        std::mem::take(&mut connected),
                        tally.clone(),
                        notify,
                    );
                    s.set_datagram_wire(t.wire);
                    match s.start() {
                        Ok(()) => side = Some(s),
                        Err(e) => {
                            shared.log(format_args!("{label} {peer}: {e}"));
                            ctl.refuse(i_errno::IEINITTEST);
                            failure = Some(e);
                        }
                    }
                }
                ServerEvent::Stop => {
                    // TEST_END: senders stop now. Receivers go on until
                    // they have what the client says it sent (its results
                    // come next), so both ends' totals agree; a stock
                    // iperf3 server would stop counting here.
                    stopped_at = Some(now);
                    if let Some(s) = side.as_mut() {
                        s.stop(now);
                    }
                }
                ServerEvent::PeerResults(r) => {
                    peer_sent = Some(
                        r.streams
                            .iter()
                            .filter_map(|s| Some((stream_index(s.id)? as u32, s.bytes)))
                            .collect(),
                    );
                }
                ServerEvent::Done => {
                    shared.log(format_args!(
                        "{label} {peer}: done: {}",
                        outcome_line(report.as_ref())
                    ));
                    finished = true;
                }
                ServerEvent::Aborted => {
                    failure.get_or_insert_with(|| "the iperf3 client was interrupted".into());
                    finished = true;
                }
                ServerEvent::Failed(e) => {
                    failure.get_or_insert(e.to_string());
                    finished = true;
                }
            }
        }
        if let Some(s) = side.as_mut().filter(|_| !finished) {
            s.reap();
            s.tick(now);
            if let Some(t) = stopped_at {
                // UDP receivers also end by themselves once the stream
                // has been quiet for a moment after the stop.
                let caught_up = peer_sent.as_ref().is_some_and(|p| s.receivers_caught_up(p));
                if cut_at.is_none() && (caught_up || now >= t + RESULTS_DRAIN) {
                    s.cut(now);
                    cut_at = Some(now);
                }
                if cut_at.is_some_and(|c| now >= c + RESULTS_DRAIN) && !s.all_done() {
                    s.abort("flows did not stop within 2 s of TEST_END: cut");
                }
                if s.all_done() {
                    let r = side.take().expect("checked").finish();
                    if let Some(t) = test.as_ref() {
                        let mut results = results_from_side(&r, t.spec.transport);
                        if t.get_server_output {
                            results.server_output_text = Some(server_output(&t.spec, &r, peer));
                        }
                        ctl.send_results(Instant::now(), &results);
                    }
                    report = Some(r);
                }
            }
        }
        let mut lost = false;
        while let Some(bytes) = ctl.poll_transmit() {
            if io.send(&bytes).is_err() {
                failure.get_or_insert_with(|| "control connection lost".into());
                lost = true;
                break;
            }
        }
        if lost || finished || ctl.is_closed() {
            break;
        }
        let wait = side
            .as_ref()
            .and_then(Side::next_tick)
            .into_iter()
            .chain(ctl.poll_timeout())
            .chain(stopped_at.map(|t| t + RESULTS_DRAIN))
            .chain(cut_at.map(|t| t + RESULTS_DRAIN))
            // Waiting for receivers to catch up: look again soon.
            .chain(
                stopped_at
                    .filter(|_| cut_at.is_none())
                    .map(|_| now + CATCH_UP_POLL),
            )
            .min()
            .map_or(Duration::from_secs(1), |t| {
                t.saturating_duration_since(Instant::now())
            });
        match rx.recv_timeout(wait) {
            Ok(Wake::Control(b)) => ctl.handle_input(Instant::now(), &b),
            Ok(Wake::ControlClosed) => ctl.handle_eof(),
            Ok(Wake::FlowDone) => {}
            Ok(Wake::Attach(_, socket)) => {
                let Some(t) = test.as_ref() else { continue };
                if let Err(why) = attach(&mut ctl, &mut connected, t, socket) {
                    shared.log(format_args!("{label} {peer}: {why}"));
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

/// Checks the parameters against what this server runs, and for UDP
/// opens the first stream socket before CREATE_STREAMS goes out.
fn accept(
    p: &Params,
    shared: &Arc<Shared>,
    local: SocketAddr,
    tx: &mpsc::Sender<Wake>,
) -> Result<Accepted, (i32, String)> {
    let mut spec = spec_from_params(p).map_err(|r| (r.i_errno, r.reason))?;
    shared
        .place(&mut spec)
        .map_err(|e| (i_errno::IEAFFINITY, e))?;
    if let Some(d) = spec.planned_seconds() {
        if d > shared.cfg.max_duration.as_secs_f64() {
            return Err((
                i_errno::IEDURATION,
                format!(
                    "{d} s is longer than this server's --max-duration of {} s",
                    shared.cfg.max_duration.as_secs_f64()
                ),
            ));
        }
    }
    if let Some(cc) = &spec.knobs.congestion {
        sockopt::check_congestion(cc).map_err(|e| (i_errno::IEINITTEST, e))?;
    }
    let plans = spec.flows();
    if spec.transport.carrier() == Carrier::Datagrams {
        start_udp_streams(shared, local, spec.transport, &spec.knobs, plans.len(), tx)
            .map_err(|e| (i_errno::IELISTEN, e))?;
    }
    Ok(Accepted {
        wire: DatagramWire::Iperf3(UdpHeader {
            counters_64bit: p.udp_counters_64bit,
        }),
        get_server_output: p.get_server_output,
        spec,
        plans,
    })
}

/// Takes a data stream that presented this session's cookie (or answered
/// the UDP handshake) as the next stream of the test.
fn attach(
    ctl: &mut Iperf3Server,
    connected: &mut Vec<ConnectedFlow>,
    t: &Accepted,
    socket: FlowSocket,
) -> Result<(), String> {
    let Some(info) = ctl.stream_attached(Instant::now()) else {
        return Err("closed a data connection that no stream was due for".into());
    };
    let Some(plan) = plan_for_stream(&t.plans, &info) else {
        ctl.refuse(i_errno::IESTREAMID);
        return Err(format!("stream {} does not fit the test", info.id));
    };
    transport::io(t.spec.transport)?.accepted(&socket, &t.spec.knobs)?;
    match ConnectedFlow::new(plan, socket, Endpoint::Server, &t.spec) {
        Ok(f) => {
            connected.push(f);
            Ok(())
        }
        Err(e) => {
            ctl.refuse(i_errno::IECREATESTREAM);
            Err(e)
        }
    }
}

/// Holds an address for one session's UDP stream setup; released when
/// the setup thread ends, however it ends.
struct UdpSetupClaim {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

impl Drop for UdpSetupClaim {
    fn drop(&mut self) {
        self.shared
            .udp_setup
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.addr);
    }
}

/// How often a session waiting for another one's UDP setup looks again.
const UDP_CLAIM_POLL: Duration = Duration::from_millis(20);

fn start_udp_streams(
    shared: &Arc<Shared>,
    local: SocketAddr,
    transport: Transport,
    knobs: &Knobs,
    count: usize,
    tx: &mpsc::Sender<Wake>,
) -> Result<(), String> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    while !shared
        .udp_setup
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(local)
    {
        if Instant::now() >= deadline {
            return Err(format!(
                "another iperf3 UDP test kept {local} busy for {} s",
                SETUP_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(UDP_CLAIM_POLL);
    }
    let claim = UdpSetupClaim {
        shared: shared.clone(),
        addr: local,
    };
    let first = transport::bind(transport, local, knobs, true)?;
    let (knobs, tx) = (knobs.clone(), tx.clone());
    std::thread::Builder::new()
        .name("xfer-iperf3-udp".into())
        .spawn(move || {
            let _claim = claim;
            accept_udp_streams(first, local, transport, &knobs, count, &tx);
        })
        .map(|_| ())
        .map_err(|e| format!("cannot start a thread: {e}"))
}

/// For each stream: wait for the client's 4 bytes, connect the socket to
/// their sender, bind the next socket (before answering, so the client's
/// next hello finds it), answer, and hand the socket to the session.
fn accept_udp_streams(
    mut sock: UdpSocket,
    local: SocketAddr,
    transport: Transport,
    knobs: &Knobs,
    count: usize,
    tx: &mpsc::Sender<Wake>,
) {
    let mut buf = [0u8; 64];
    for i in 0..count {
        let deadline = Instant::now() + SETUP_TIMEOUT;
        sock.set_read_timeout(Some(Duration::from_millis(200))).ok();
        let peer = loop {
            if Instant::now() >= deadline {
                return;
            }
            match sock.recv_from(&mut buf) {
                // iperf3 servers ignore the content; its size is 4.
                Ok((4, peer)) => break peer,
                Ok(_) => {}
                Err(_) => {
                    // The session is gone (its receiver was dropped).
                    if tx.send(Wake::FlowDone).is_err() {
                        return;
                    }
                }
            }
        };
        if sock.connect(peer).is_err() {
            return;
        }
        let next = if i + 1 < count {
            match transport::bind(transport, local, knobs, true) {
                Ok(s) => Some(s),
                Err(_) => return,
            }
        } else {
            None
        };
        sock.send(&UDP_CONNECT_REPLY).ok();
        sock.set_read_timeout(None).ok();
        if tx
            .send(Wake::Attach(i as u32, FlowSocket::Datagram(sock)))
            .is_err()
        {
            return;
        }
        match next {
            Some(s) => sock = s,
            None => return,
        }
    }
}

/// The text an iperf3 client prints under "Server output:".
fn server_output(spec: &TestSpec, r: &SideReport, peer: SocketAddr) -> String {
    let mut out = format!(
        "xferlab {} serving iperf3 client {peer}: {}\n",
        env!("CARGO_PKG_VERSION"),
        describe(spec)
    );
    for f in &r.flows {
        let t = &f.total;
        out.push_str(&format!(
            "[{:3}] {:6.2}-{:<6.2} sec  {}  {}  {}\n",
            xferlab_core::iperf3::stream_id(f.id as usize),
            t.start_s,
            t.end_s,
            xferlab_core::units::format_bytes(t.bytes),
            RateUnit::AutoBits.format_rate(t.bits_per_second),
            match f.role {
                FlowRole::Sender => "sender",
                FlowRole::Receiver => "receiver",
            }
        ));
    }
    out.push_str(&outcome_line(Some(r)));
    out.push('\n');
    out
}
