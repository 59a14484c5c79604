//! The server's side of one test for a stock iperf3 client: iperf3's
//! control protocol (the sans-IO [`Iperf3Server`]) as a session role on
//! the one session loop, running the test with the stream pattern's flows.
//!
//! TCP streams reach the session through the server's front door (they
//! open with this session's cookie). UDP streams open with a 4-byte
//! datagram to the same port number the control connection used: the
//! session binds a socket there, and for each stream connects it to the
//! sender and answers (iperf3's own scheme), so the kernel hands every
//! stream its own socket. Sessions waiting for UDP streams on the same
//! address share that port's door ([`crate::session::udp_door`]), which
//! gives each session the hellos from its own client's address.

use crate::sys::clock;
use std::net::{SocketAddr, TcpStream};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use xferlab_core::time::Time;

use xferlab_core::iperf3::convert::{plan_for_stream, results_from_side, spec_from_params};
use xferlab_core::iperf3::wire::UDP_CONNECT_REPLY;
use xferlab_core::iperf3::{
    i_errno, stream_index, Cookie, Iperf3Server, Params, ServerEvent, UdpHeader, SETUP_TIMEOUT,
    WATCHDOG_GRACE,
};
use xferlab_core::result::{Endpoint, FlowRole, SideReport};
use xferlab_core::run::{Policy, Role};
use xferlab_core::spec::{FlowPlan, TestSpec};
use xferlab_core::units::RateUnit;

use super::{Iperf3Error, RESULTS_DRAIN};
use crate::control::{ControlIo, Wake};
use crate::driver::session::{serve as serve_loop, SessionCx, SessionRole};
use crate::driver::{Finished, Workload};
use crate::net::FlowSocket;
use crate::net::{self, sockopt};
use crate::output::Reporter;
use crate::session::budget::{OverBudget, RateGrant};
use crate::session::metrics::{ActiveFlows, Protocol, Reason};
use crate::session::server::placement;
use crate::session::shared::{lock, HandshakeSlot, SessionSlot, Shared};
use crate::session::udp_door::Waiter;
use crate::stream::session::{describe, outcome_line};
use crate::stream::{ConnectedFlow, Side};
use crate::sys::cpu::CpuTally;
use crate::sys::end::{session_end, EndWatch};
use crate::transport::datagram::DatagramWire;
use crate::transport::{self, Carrier};

/// How often a stopped session looks whether its receivers have all the
/// client sent.
const CATCH_UP_POLL: Duration = Duration::from_millis(1);

/// Removes the session's cookie when the session ends, whichever way it
/// ends.
struct Registration<'a> {
    shared: &'a Shared,
    cookie: Cookie,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        lock(&self.shared.iperf3).remove(&self.cookie);
    }
}

/// The test as accepted: what to run and the flows in stream order.
struct Accepted<'a> {
    /// Its share of the server-wide rate.
    _rate: Option<RateGrant<'a>>,
    /// Its flows in the active-flows gauge.
    _flows: ActiveFlows,
    spec: TestSpec,
    plans: Vec<FlowPlan>,
    wire: DatagramWire,
    get_server_output: bool,
}

/// Serves one iperf3 control connection (its cookie already read) until
/// its test is over.
pub fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    cookie: Cookie,
    shared: &Arc<Shared>,
    handshake: HandshakeSlot,
) {
    stream.set_read_timeout(None).ok();
    stream.set_nodelay(true).ok();
    net::keepalive(&stream);
    let (tx, rx) = mpsc::channel();
    let _reg = Registration { shared, cookie };
    let local = match stream.local_addr() {
        Ok(a) => net::canonical(a),
        Err(_) => return,
    };
    let Ok((end_signal, end)) = session_end() else {
        return;
    };
    lock(&shared.iperf3).insert(cookie, tx.clone());
    let Ok(mut io) = ControlIo::new(stream, tx.clone()) else {
        return;
    };
    let tally = Arc::new(CpuTally::default());
    let cpu_guard = tally.track();
    let mut role = Iperf3Session {
        ctl: Iperf3Server::new(clock::now(), &cookie),
        shared,
        peer,
        local,
        tx: &tx,
        tally: &tally,
        end: &end,
        label: String::from_utf8_lossy(&cookie[..8]).into_owned(),
        test: None,
        connected: Vec::new(),
        handshake: Some(handshake),
        slot: None,
        report: None,
        finished: false,
    };
    // TEST_END stops the senders; the receivers are cut once they have
    // what the client sent (or after RESULTS_DRAIN), and flows still
    // running RESULTS_DRAIN later are aborted.
    let policy = Policy {
        role: Role::Server,
        max_duration: Some(shared.cfg.max_duration),
        drain: 2 * RESULTS_DRAIN,
        quiesce: Duration::ZERO,
    };
    let failure = serve_loop(
        &mut role,
        &mut io,
        &rx,
        policy,
        "flows did not stop within 2 s of TEST_END: cut",
    );
    drop(cpu_guard);
    drop(end_signal);
    if let Some(why) = failure {
        shared.log(format_args!("{} {peer}: ended: {why}", role.label));
    }
}

/// The server's side of iperf3's control protocol.
struct Iperf3Session<'a> {
    ctl: Iperf3Server,
    shared: &'a Arc<Shared>,
    peer: SocketAddr,
    local: SocketAddr,
    tx: &'a mpsc::Sender<Wake>,
    tally: &'a Arc<CpuTally>,
    end: &'a EndWatch,
    label: String,
    test: Option<Accepted<'a>>,
    /// The streams as they attach, in stream order.
    connected: Vec<ConnectedFlow>,
    /// Held until the parameters are in, then given back for `slot`.
    handshake: Option<HandshakeSlot>,
    /// Its place among the running sessions, from the parameters on.
    slot: Option<SessionSlot<'a>>,
    report: Option<SideReport>,
    finished: bool,
}

impl SessionRole for Iperf3Session<'_> {
    type Ctl = Iperf3Server;

    fn ctl(&mut self) -> &mut Iperf3Server {
        &mut self.ctl
    }

    fn on_event(&mut self, ev: ServerEvent, cx: &mut SessionCx<'_>) {
        let (label, peer, shared) = (&self.label, self.peer, self.shared);
        match ev {
            ServerEvent::ParamsReceived(p) => {
                // The parameters are in: a session's place now.
                match shared.enter(peer.ip()) {
                    Ok(slot) => {
                        self.slot = Some(slot);
                        self.handshake = None;
                    }
                    Err(busy) => {
                        shared.metrics.refused(Protocol::Iperf3, Reason::Busy);
                        shared.log_refused(
                            peer,
                            "busy",
                            format_args!("{peer}: iperf3 client refused: {busy}"),
                        );
                        self.ctl.deny();
                        cx.fail(busy.to_string());
                        return;
                    }
                }
                match accept(&p, shared, self.tx, self.end, peer, self.local) {
                    Ok(a) => {
                        shared.log(format_args!(
                            "{label} {peer}: iperf3 {} client: accepted {}{}",
                            p.client_version.as_deref().unwrap_or("(unknown)"),
                            describe(&a.spec),
                            placement(&a.spec)
                        ));
                        let unbounded = shared.cfg.max_duration + WATCHDOG_GRACE;
                        self.ctl
                            .accept(clock::now(), p.watchdog(WATCHDOG_GRACE, unbounded));
                        self.test = Some(a);
                    }
                    Err((code, why)) => {
                        shared
                            .metrics
                            .refused(Protocol::Iperf3, refusal_reason(code));
                        shared.log(format_args!("{peer}: iperf3 client refused: {why}"));
                        self.ctl.refuse(code);
                        cx.fail(why);
                    }
                }
            }
            ServerEvent::Running => {
                let Some(t) = self.test.as_ref() else { return };
                let mut s = Side::prepare(
                    Endpoint::Server,
                    shared.cfg.embedded,
                    &t.spec,
                    std::mem::take(&mut self.connected),
                    self.tally.clone(),
                    crate::control::flow_done_notifier(self.tx),
                );
                s.set_datagram_wire(t.wire);
                match s.start() {
                    Ok(()) => {
                        let at = s.started_at();
                        // The planned length caps the senders of a -R
                        // test (driver::session, run::Policy::max_duration).
                        let planned = t
                            .spec
                            .planned_seconds()
                            .and_then(|s| Duration::try_from_secs_f64(s).ok());
                        let streams = Receivers {
                            side: s,
                            stopped_at: None,
                            cut: false,
                            peer_sent: None,
                        };
                        cx.started(Box::new(streams), at, planned);
                    }
                    Err(e) => {
                        shared.log(format_args!("{label} {peer}: {e}"));
                        self.ctl.refuse(i_errno::IEINITTEST);
                        cx.fail(e.to_string());
                    }
                }
            }
            // TEST_END: senders stop now. Receivers go on until they have
            // what the client says it sent (its results come next), so
            // both ends' totals agree; a stock iperf3 server would stop
            // counting here.
            ServerEvent::Stop => cx.run.peer_stopped(cx.now),
            ServerEvent::PeerResults(r) => {
                let sent: Vec<(u32, u64)> = r
                    .streams
                    .iter()
                    .filter_map(|s| Some((stream_index(s.id)? as u32, s.bytes)))
                    .collect();
                if let Some(w) = cx.workload.as_mut() {
                    w.peer_sent(&sent);
                }
            }
            ServerEvent::Done => {
                shared.log(format_args!(
                    "{label} {peer}: done: {}",
                    outcome_line(self.report.as_ref())
                ));
                self.finished = true;
            }
            ServerEvent::Aborted => {
                cx.fail("the iperf3 client was interrupted".into());
                self.finished = true;
            }
            ServerEvent::Failed(e) => {
                cx.fail(e.to_string());
                self.finished = true;
            }
        }
    }

    fn on_attach(&mut self, _flow: u32, socket: FlowSocket, _cx: &mut SessionCx<'_>) {
        let Some(t) = self.test.as_ref() else { return };
        if let Err(why) = attach(&mut self.ctl, &mut self.connected, t, socket) {
            self.shared
                .log(format_args!("{} {}: {why}", self.label, self.peer));
        }
    }

    fn report(&mut self, now: Time, r: SideReport) {
        self.shared.metrics.report(Protocol::Iperf3, &r);
        if let Some(t) = self.test.as_ref() {
            let mut results = results_from_side(&r, t.spec.transport);
            if t.get_server_output {
                results.server_output_text = Some(server_output(&t.spec, &r, self.peer));
            }
            self.ctl.send_results(now, &results);
        }
        self.report = Some(r);
    }

    fn finished(&self) -> bool {
        self.finished
    }
}

/// The session's streams after TEST_END: receivers are cut (keeping
/// what they counted) once they have what the client sent, or after
/// RESULTS_DRAIN. UDP receivers also end by themselves once the stream
/// has been quiet for a moment after the stop.
struct Receivers {
    side: Side,
    stopped_at: Option<Time>,
    cut: bool,
    peer_sent: Option<Vec<(u32, u64)>>,
}

impl Workload for Receivers {
    fn tick(&mut self, now: Time, out: Option<&mut dyn Reporter>) {
        Workload::tick(&mut self.side, now, out);
        let Some(t) = self.stopped_at.filter(|_| !self.cut) else {
            return;
        };
        let caught_up = self
            .peer_sent
            .as_ref()
            .is_some_and(|p| self.side.receivers_caught_up(p));
        if caught_up || now >= t + RESULTS_DRAIN {
            self.side.cut(now);
            self.cut = true;
        }
    }

    /// While waiting for receivers to catch up: look again soon.
    fn next_tick(&self) -> Option<Time> {
        let catch_up = self
            .stopped_at
            .filter(|_| !self.cut)
            .map(|_| clock::now() + CATCH_UP_POLL);
        self.side.next_tick().into_iter().chain(catch_up).min()
    }

    fn stop(&mut self, now: Time) {
        self.side.stop(now);
        self.stopped_at.get_or_insert(now);
    }

    fn abort(&mut self, why: &str) {
        self.side.abort(why);
    }

    fn all_done(&self) -> bool {
        self.side.all_done()
    }

    fn peer_sent(&mut self, sent: &[(u32, u64)]) {
        self.peer_sent = Some(sent.to_vec());
    }

    fn finish(self: Box<Self>) -> Finished {
        self.side.finish().into()
    }
}

/// The metrics' reason for a refusal [`accept`] answered with `code`.
fn refusal_reason(code: i32) -> Reason {
    match code {
        i_errno::IEAUTHTEST => Reason::Auth,
        i_errno::IENUMSTREAMS | i_errno::IETOTALRATE => Reason::OverBudget,
        i_errno::IEACCESSDENIED => Reason::Busy,
        i_errno::IELISTEN => Reason::Internal,
        _ => Reason::Invalid,
    }
}

/// Checks the parameters against what this server runs, and for UDP
/// opens the first stream socket before CREATE_STREAMS goes out.
fn accept<'a>(
    p: &Params,
    shared: &'a Arc<Shared>,
    tx: &mpsc::Sender<Wake>,
    end: &EndWatch,
    peer: SocketAddr,
    local: SocketAddr,
) -> Result<Accepted<'a>, (i32, String)> {
    authenticate(p, shared, peer)?;
    let mut spec = spec_from_params(p).map_err(|r| (r.i_errno, r.reason))?;
    shared
        .place(&mut spec)
        .map_err(|e| (i_errno::IEAFFINITY, e.to_string()))?;
    shared.budget_intervals(&mut spec);
    let rate = shared.budget(&mut spec).map_err(|e| {
        let code = match e {
            OverBudget::Flows(_) => i_errno::IENUMSTREAMS,
            OverBudget::Rate(_) => i_errno::IETOTALRATE,
            OverBudget::Busy(_) => i_errno::IEACCESSDENIED,
            OverBudget::Test(_) => i_errno::IEINITTEST,
        };
        (code, e.message().to_string())
    })?;
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
        sockopt::check_congestion(cc).map_err(|e| (i_errno::IEINITTEST, e.to_string()))?;
    }
    let plans = spec.flows();
    if spec.transport.carrier() == Carrier::Datagrams {
        let (transport, knobs) = (spec.transport, spec.knobs.clone());
        let waiter = Waiter::new(
            peer,
            shared.cfg.udp_any_peer,
            plans.len(),
            tx.clone(),
            end.clone(),
            clock::now() + SETUP_TIMEOUT,
            Box::new(move || transport::bind(transport, local, &knobs, true)),
            UDP_HELLO_LEN,
            &UDP_CONNECT_REPLY,
        );
        let knobs = spec.knobs.clone();
        shared
            .udp_doors
            .wait(local, waiter, || {
                transport::bind(transport, local, &knobs, true)
            })
            .map_err(|e| (i_errno::IELISTEN, e.to_string()))?;
    }
    Ok(Accepted {
        _rate: rate,
        _flows: shared.metrics.served(Protocol::Iperf3, &spec),
        wire: DatagramWire::Iperf3(UdpHeader {
            counters_64bit: p.udp_counters_64bit,
        }),
        get_server_output: p.get_server_output,
        spec,
        plans,
    })
}

/// With authentication on, the client's `authtoken` must name a user of
/// `--authorized-users-path` with the right password (iperf3's scheme,
/// see [`crate::session::auth::Iperf3Users`]); failures count against the
/// client's address.
fn authenticate(p: &Params, shared: &Shared, peer: SocketAddr) -> Result<(), (i32, String)> {
    if !shared.cfg.auth_on() {
        return Ok(());
    }
    let refuse = |why: String| (i_errno::IEAUTHTEST, why);
    if let Some(wait) = shared
        .auth_failures
        .locked_out(shared.auth_client(peer.ip()))
    {
        return Err(refuse(format!(
            "too many failed authentication attempts from {}; try again in {} s",
            peer.ip(),
            wait.as_secs() + 1
        )));
    }
    let Some(users) = &shared.cfg.iperf3_users else {
        return Err(refuse(
            "this server requires authentication and has no iperf3 credentials (--rsa-private-key-path, --authorized-users-path)".into(),
        ));
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let checked = match p.authtoken.as_deref() {
        None => Err(crate::session::auth::TokenError::Missing),
        Some(t) => users.check(t, now),
    };
    match checked {
        Ok(user) => {
            tracing::debug!(%peer, user, "iperf3 client authenticated");
            Ok(())
        }
        Err(why) => {
            let n = shared.auth_failures.record(shared.auth_client(peer.ip()));
            shared.metrics.auth_failed();
            Err(refuse(format!(
                "authentication failed: {why} ({})",
                shared.auth_failures.describe(n)
            )))
        }
    }
}

/// Takes a data stream that presented this session's cookie (or answered
/// the UDP handshake) as the next stream of the test.
fn attach(
    ctl: &mut Iperf3Server,
    connected: &mut Vec<ConnectedFlow>,
    t: &Accepted<'_>,
    socket: FlowSocket,
) -> Result<(), Iperf3Error> {
    let Some(info) = ctl.stream_attached(clock::now()) else {
        return Err(Iperf3Error::NoStreamDue);
    };
    let Some(plan) = plan_for_stream(&t.plans, &info) else {
        ctl.refuse(i_errno::IESTREAMID);
        return Err(Iperf3Error::Misfit(info.id));
    };
    transport::io(t.spec.transport)?.accepted(&socket, &t.spec.knobs)?;
    match ConnectedFlow::new(plan, socket, Endpoint::Server, &t.spec) {
        Ok(f) => {
            connected.push(f);
            Ok(())
        }
        Err(e) => {
            ctl.refuse(i_errno::IECREATESTREAM);
            Err(e.into())
        }
    }
}

/// What an iperf3 UDP stream's hello is: 4 bytes (iperf3 servers ignore
/// their content).
const UDP_HELLO_LEN: usize = 4;

/// The text an iperf3 client prints under "Server output:".
fn server_output(spec: &TestSpec, r: &SideReport, peer: SocketAddr) -> String {
    let mut out = format!(
        "xferlab {} serving iperf3 client {peer}: {}{}\n",
        env!("CARGO_PKG_VERSION"),
        describe(spec),
        placement(spec)
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
