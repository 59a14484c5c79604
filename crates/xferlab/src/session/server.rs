//! The server's side of xferlab's control protocol, for every pattern:
//! admission (limits, placement, congestion control), the session token
//! and its registration, the welcome, then the one session loop
//! ([`crate::driver::session::serve`]) with the test's pattern.

use crate::sys::clock;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use xferlab_core::time::Time;

use xferlab_core::proto::auth::ServerAuth;
use xferlab_core::proto::wire::{token_hex, TOKEN_LEN};
use xferlab_core::proto::{
    ErrorCode, ProtoError, ServerControl, ServerEvent, ServerPolicy, Welcome,
};
use xferlab_core::result::SideReport;
use xferlab_core::run::{Policy, Role};
use xferlab_core::spec::TestSpec;

use super::auth;
use super::budget::{OverBudget, RateGrant};
use super::metrics::{ActiveFlows, Protocol, Reason};
use super::shared::{lock, HandshakeSlot, SessionSlot, Shared};
use super::{AdmitError, PatternError};
use crate::control::{ControlIo, Wake};
use crate::driver::session::{serve as serve_loop, SessionCx, SessionRole};
use crate::driver::{Workload, DRAIN};
use crate::net::FlowSocket;
use crate::net::{self, sockopt};
use crate::sys::cpu::CpuTally;
use crate::sys::end::{session_end, EndWatch};

/// What a pattern's server side gets to set itself up.
pub struct SessionEnv<'a> {
    pub shared: &'a Shared,
    pub peer: SocketAddr,
    /// The address the client reached us on (flow sockets bind to it).
    pub local_ip: IpAddr,
    pub tx: &'a mpsc::Sender<Wake>,
    pub tally: &'a Arc<CpuTally>,
    pub token: [u8; TOKEN_LEN],
    /// Fires when the session ends: helpers waiting on its behalf stop.
    pub end: &'a EndWatch,
}

/// What a pattern offers the client in the welcome.
#[derive(Default)]
pub struct Offer {
    pub udp_ports: Vec<u16>,
    pub rr_port: Option<u16>,
    /// What the log says after "accepted".
    pub describe: String,
}

/// A pattern's server side on xferlab's control protocol.
pub trait SessionPattern {
    /// The test was admitted: open the pattern's sockets. An error
    /// refuses the test.
    fn open(&mut self, env: &SessionEnv<'_>) -> Result<Offer, PatternError>;
    /// A data connection or UDP socket presented this session's token.
    fn attach(&mut self, flow: u32, socket: FlowSocket) -> Result<(), PatternError>;
    /// Every flow is here.
    fn ready(&self) -> bool;
    /// Starts the workload; returns it and when it started.
    fn start(&mut self, env: &SessionEnv<'_>) -> Result<(Box<dyn Workload>, Time), PatternError>;
    /// One line of what this side did, for the log.
    fn outcome_line(&self, ours: Option<&SideReport>) -> String;
}

/// Makes the server side of the pattern a test asks for (the
/// registrations are in [`crate::patterns`]).
pub type SessionPatterns = fn(&TestSpec) -> Box<dyn SessionPattern>;

/// Removes the session's token and gives back its places when the session
/// ends, whichever way it ends.
struct Registration<'a> {
    shared: &'a Shared,
    token: Option<[u8; TOKEN_LEN]>,
    /// Held until the hello is in (and authenticated), then given back
    /// for `slot`.
    handshake: Option<HandshakeSlot>,
    /// Its place among the running sessions, from the hello on.
    slot: Option<SessionSlot<'a>>,
    /// The test's share of the server-wide rate.
    rate: Option<RateGrant<'a>>,
    /// Its flows in the active-flows gauge.
    flows: Option<ActiveFlows>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.token {
            lock(&self.shared.registry).remove(&t);
        }
    }
}

struct XferlabSession<'a> {
    ctl: ServerControl,
    shared: &'a Shared,
    peer: SocketAddr,
    local_ip: IpAddr,
    tx: &'a mpsc::Sender<Wake>,
    tally: &'a Arc<CpuTally>,
    end: &'a EndWatch,
    reg: Registration<'a>,
    patterns: SessionPatterns,
    pattern: Option<Box<dyn SessionPattern>>,
    label: String,
    /// The admitted test's planned length.
    planned: Option<Duration>,
    report: Option<SideReport>,
    finished: bool,
}

impl XferlabSession<'_> {
    fn env(&self, token: [u8; TOKEN_LEN]) -> SessionEnv<'_> {
        SessionEnv {
            shared: self.shared,
            peer: self.peer,
            local_ip: self.local_ip,
            tx: self.tx,
            tally: self.tally,
            token,
            end: self.end,
        }
    }

    fn refuse(
        &mut self,
        code: ErrorCode,
        reason: Reason,
        why: impl std::fmt::Display,
        cx: &mut SessionCx<'_>,
    ) {
        let why = why.to_string();
        self.shared.metrics.refused(Protocol::Xferlab, reason);
        self.ctl.reject(code, &why);
        let line = format_args!("{}: refused: {why}", self.peer);
        match code {
            ErrorCode::Busy => self.shared.log_refused(self.peer, "busy", line),
            _ => self.shared.log(line),
        }
        cx.fail(why);
    }

    /// Admits the test, opens its pattern, registers the token and
    /// welcomes the client.
    fn accept(&mut self, mut spec: TestSpec, cx: &mut SessionCx<'_>) {
        // The hello is in (and authenticated): a session's place now, the
        // handshake's back.
        match self.shared.enter(self.peer.ip()) {
            Ok(slot) => {
                self.reg.slot = Some(slot);
                self.reg.handshake = None;
            }
            Err(busy) => return self.refuse(ErrorCode::Busy, Reason::Busy, busy, cx),
        }
        if let Err(why) = admit(self.shared, &mut spec) {
            return self.refuse(ErrorCode::InvalidSpec, Reason::Invalid, why, cx);
        }
        match self.shared.budget(&mut spec) {
            Ok(grant) => self.reg.rate = grant,
            Err(OverBudget::Busy(why)) => {
                return self.refuse(ErrorCode::Busy, Reason::Busy, why, cx)
            }
            Err(e) => {
                let why = e.message().to_string();
                return self.refuse(ErrorCode::InvalidSpec, Reason::OverBudget, why, cx);
            }
        }
        let token = match new_token() {
            Ok(t) => t,
            Err(e) => {
                let why = format_args!("no randomness for a session token: {e}");
                return self.refuse(ErrorCode::Internal, Reason::Internal, why, cx);
            }
        };
        let mut pattern = (self.patterns)(&spec);
        let offer = match pattern.open(&self.env(token)) {
            Ok(o) => o,
            Err(why) => {
                return self.refuse(
                    ErrorCode::Internal,
                    Reason::Internal,
                    format_args!("on the server: {why}"),
                    cx,
                )
            }
        };
        self.reg.flows = Some(self.shared.metrics.served(Protocol::Xferlab, &spec));
        lock(&self.shared.registry).insert(token, self.tx.clone());
        self.reg.token = Some(token);
        self.ctl.accept(
            clock::now(),
            Welcome {
                session: token_hex(&token),
                software: crate::software(),
                host: crate::sys::host::host_info(),
                max_duration_s: self.shared.cfg.max_duration.as_secs_f64(),
                udp_ports: offer.udp_ports,
                rr_port: offer.rr_port,
            },
        );
        self.label = token_hex(&token)[..8].to_string();
        self.shared.log(format_args!(
            "{} {}: accepted {}{}",
            self.label,
            self.peer,
            offer.describe,
            placement(&spec)
        ));
        self.planned = spec.planned_seconds().map(Duration::from_secs_f64);
        self.pattern = Some(pattern);
    }
}

impl SessionRole for XferlabSession<'_> {
    type Ctl = ServerControl;

    fn ctl(&mut self) -> &mut ServerControl {
        &mut self.ctl
    }

    fn on_event(&mut self, ev: ServerEvent, cx: &mut SessionCx<'_>) {
        match ev {
            ServerEvent::TestRequested(spec) => self.accept(*spec, cx),
            ServerEvent::StopRequested => {
                if cx.run.started() {
                    cx.run.peer_stopped(cx.now);
                } else {
                    // Stopped before all flows arrived: nothing to run.
                    self.ctl
                        .reject(ErrorCode::Aborted, "stopped before the test started");
                }
            }
            ServerEvent::PeerResults(_) => {
                let line = self.pattern.as_ref().map_or_else(
                    || "no local report".into(),
                    |p| p.outcome_line(self.report.as_ref()),
                );
                self.shared
                    .log(format_args!("{} {}: done: {line}", self.label, self.peer));
                self.finished = true;
            }
            ServerEvent::Failed(e) => {
                // A challenge left unanswered (the connection closed or
                // timed out) is a failed attempt too: else an address
                // could hold challenges open without ever being locked
                // out.
                let auth = matches!(
                    e,
                    ProtoError::AuthFailed
                        | ProtoError::Peer {
                            code: ErrorCode::AuthFailed,
                            ..
                        }
                ) || self.ctl.challenge_unanswered();
                if auth {
                    let failures = &self.shared.auth_failures;
                    let n = failures.record(self.shared.auth_client(self.peer.ip()));
                    let m = &self.shared.metrics;
                    m.auth_failed();
                    m.refused(Protocol::Xferlab, Reason::Auth);
                    self.shared.log(format_args!(
                        "{}: authentication failed ({})",
                        self.peer,
                        failures.describe(n)
                    ));
                } else if matches!(e, ProtoError::Malformed(_)) && self.reg.slot.is_none() {
                    // A hello the control machine refused before
                    // admission (longer than --max-duration, or not a
                    // test it can read).
                    let m = &self.shared.metrics;
                    m.refused(Protocol::Xferlab, Reason::Invalid);
                }
                cx.fail(e.to_string());
                self.finished = true;
            }
        }
    }

    fn on_attach(&mut self, flow: u32, socket: FlowSocket, _cx: &mut SessionCx<'_>) {
        let Some(p) = self.pattern.as_mut() else {
            return;
        };
        if let Err(why) = p.attach(flow, socket) {
            self.shared
                .log(format_args!("{} {}: {why}", self.label, self.peer));
        }
    }

    fn step(&mut self, cx: &mut SessionCx<'_>) {
        let (Some(token), false) = (self.reg.token, cx.run.started() || self.finished) else {
            return;
        };
        if !self.pattern.as_ref().is_some_and(|p| p.ready()) {
            return;
        }
        let mut pattern = self.pattern.take().expect("checked");
        let started = pattern.start(&self.env(token));
        match started {
            Ok((w, at)) => {
                let planned = self.planned;
                self.ctl.flows_attached(at, planned);
                cx.started(w, at, planned);
            }
            Err(e) => {
                let e = e.to_string();
                self.ctl.reject(ErrorCode::Internal, &e);
                cx.fail(e);
            }
        }
        self.pattern = Some(pattern);
    }

    fn report(&mut self, now: Time, report: SideReport) {
        self.shared.metrics.report(Protocol::Xferlab, &report);
        self.ctl.send_results(now, &report);
        self.report = Some(report);
    }

    fn finished(&self) -> bool {
        self.finished
    }
}

/// Serves one control connection until its test is over.
pub fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    peer_version: u16,
    shared: &Shared,
    handshake: HandshakeSlot,
    patterns: SessionPatterns,
) {
    stream.set_read_timeout(None).ok();
    stream.set_nodelay(true).ok();
    // UDP flow sockets bind to the address the client reached us on.
    let local_ip = stream
        .local_addr()
        .map_or(IpAddr::from([0u8, 0, 0, 0]), |a| net::canonical(a).ip());
    net::keepalive(&stream);
    let policy = ServerPolicy {
        max_duration: shared.cfg.max_duration,
    };
    let (tx, rx) = mpsc::channel();
    let Ok(mut io) = ControlIo::new(stream, tx.clone()) else {
        return;
    };
    let mut ctl = ServerControl::new(clock::now(), peer_version, policy);
    let reg = Registration {
        shared,
        token: None,
        handshake: Some(handshake),
        slot: None,
        rate: None,
        flows: None,
    };
    let Ok((end_signal, end)) = session_end() else {
        return;
    };
    if shared.cfg.auth_on() && shared.cfg.auth_keys.is_none() {
        let why = "this server authenticates iperf3 clients only (it has no --auth-key for xferlab clients)";
        shared.metrics.refused(Protocol::Xferlab, Reason::Auth);
        shared.log_refused(peer, "no key", format_args!("{peer}: refused: {why}"));
        ctl.reject(ErrorCode::AuthFailed, why);
    } else if let Some(keys) = &shared.cfg.auth_keys {
        if let Some(wait) = shared
            .auth_failures
            .locked_out(shared.auth_client(peer.ip()))
        {
            let why = format!(
                "too many failed authentication attempts from {}; try again in {} s",
                peer.ip(),
                wait.as_secs() + 1
            );
            shared.metrics.refused(Protocol::Xferlab, Reason::LockedOut);
            shared.log_refused(peer, "locked out", format_args!("{peer}: refused: {why}"));
            ctl.reject(ErrorCode::AuthFailed, &why);
        } else {
            match auth::nonce() {
                Ok(nonce) => ctl.require_auth(ServerAuth {
                    keys: keys.clone(),
                    nonce,
                }),
                Err(e) => ctl.reject(
                    ErrorCode::Internal,
                    &format!("no randomness for a challenge: {e}"),
                ),
            }
        }
    }
    let tally = Arc::new(CpuTally::default());
    let cpu_guard = tally.track();
    let mut role = XferlabSession {
        ctl,
        shared,
        peer,
        local_ip,
        tx: &tx,
        tally: &tally,
        end: &end,
        reg,
        patterns,
        pattern: None,
        label: String::from("--------"),
        planned: None,
        report: None,
        finished: false,
    };
    let run = Policy {
        role: Role::Server,
        max_duration: Some(shared.cfg.max_duration),
        drain: DRAIN,
        quiesce: Duration::ZERO,
    };
    let failure = serve_loop(&mut role, &mut io, &rx, run, crate::driver::CUT_SERVER);
    drop(cpu_guard);
    drop(end_signal);
    if let Some(why) = failure {
        shared.log(format_args!("{} {peer}: ended: {why}", role.label));
    }
}

/// What only the server can check of a test, for every pattern: where
/// its data threads may run (the spec gets the server's CPU) and whether
/// its congestion control exists here.
fn admit(shared: &Shared, spec: &mut TestSpec) -> Result<(), AdmitError> {
    shared.place(spec)?;
    shared.budget_intervals(spec);
    let kernel_cc = !spec.transport.model().own_congestion();
    if let Some(cc) = spec.knobs.congestion.as_ref().filter(|_| kernel_cc) {
        sockopt::check_congestion(cc).map_err(AdmitError::Congestion)?;
    }
    Ok(())
}

/// A fresh random session token.
fn new_token() -> Result<[u8; TOKEN_LEN], getrandom::Error> {
    let mut token = [0u8; TOKEN_LEN];
    getrandom::fill(&mut token)?;
    Ok(token)
}

/// ", data threads on CPU N" when this server pins them (`-A`), for its
/// log lines.
pub(crate) fn placement(s: &TestSpec) -> String {
    s.affinity
        .server
        .map_or(String::new(), |c| format!(", data threads on CPU {c}"))
}
