//! The client of xferlab's own control protocol, for every pattern: it
//! connects the control channel, lets the pattern connect its flows once
//! the server welcomed the test, runs the one client loop
//! ([`crate::driver::client::drive`]) and builds the result.

use crate::sys::clock;
use std::net::{IpAddr, SocketAddr};
use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime};
use xferlab_core::time::Time;

use xferlab_core::proto::wire::TOKEN_LEN;
use xferlab_core::proto::{ClientControl, ClientEvent, ErrorCode, Welcome};
use xferlab_core::result::{FlowEnd, SideReport, Status, Summary, TestResult, SCHEMA};
use xferlab_core::run::{Policy, Role};
use xferlab_core::spec::{Limit, TestSpec};

use crate::control::{ControlIo, Wake};
use crate::driver::client::{drive, interruption, ClientRole, Cx};
use crate::driver::Interrupts;
use crate::driver::{Workload, DRAIN};
use crate::net::{self, sockopt};
use crate::output::Reporter;
use crate::session::{ClientError, PatternError};
use crate::sys::cpu::CpuTally;

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
    /// The key that answers the server's challenge (`--auth-key`).
    pub auth_key: Option<Vec<u8>>,
}

impl ClientConfig {
    /// How long the flows may take to attach, asked of the server: they
    /// connect at once, each within the connect timeout and then its
    /// attach reply; twice the timeout covers both (the server keeps at
    /// least its handshake timeout and at most `proto::MAX_ATTACH_WAIT`).
    pub fn attach_wait(&self) -> Duration {
        xferlab_core::proto::attach_wait(Some((self.connect_timeout * 2).as_secs_f64()))
    }
}

/// A test that ran, completely or in part.
pub struct Outcome {
    pub result: TestResult,
    /// Set when the test did not end normally; the result still holds what
    /// was measured.
    pub error: Option<String>,
    pub interrupted: bool,
}

/// What a client pattern gets to set itself up.
pub struct ClientEnv<'a> {
    pub cfg: &'a ClientConfig,
    /// The server's control address.
    pub server: SocketAddr,
    /// Our end of the control connection.
    pub local_ip: IpAddr,
    /// Wakes the loop (flow threads send `FlowDone`).
    pub tx: &'a mpsc::Sender<Wake>,
    /// The CPU accounting of this side's threads.
    pub tally: &'a Arc<CpuTally>,
}

/// A pattern's client side on xferlab's control protocol.
pub trait ClientPattern {
    /// The server welcomed the test: connect the pattern's flows.
    fn connect(&mut self, env: &ClientEnv<'_>, welcome: &Welcome) -> Result<(), PatternError>;
    /// The server started the test: start the workload and tell the
    /// reporter. Returns the workload and the moment it started.
    fn start(
        &mut self,
        env: &ClientEnv<'_>,
        session: &str,
        reporter: &mut dyn Reporter,
    ) -> Result<(Box<dyn Workload>, Time), PatternError>;
}

/// Makes the client side of the pattern a test asks for (the
/// registrations are in [`crate::patterns`]).
pub type ClientPatterns = fn(&ClientEnv<'_>) -> Result<Box<dyn ClientPattern>, PatternError>;

struct XferlabClient<'a> {
    ctl: ClientControl,
    env: ClientEnv<'a>,
    pattern: Box<dyn ClientPattern>,
    session: String,
    server_report: Option<Box<SideReport>>,
}

impl ClientRole for XferlabClient<'_> {
    type Ctl = ClientControl;

    fn ctl(&mut self) -> &mut ClientControl {
        &mut self.ctl
    }

    fn on_event(&mut self, ev: ClientEvent, cx: &mut Cx<'_>) {
        match ev {
            ClientEvent::Welcome(w) => {
                self.session = w.session.clone();
                if let Err(e) = self.pattern.connect(&self.env, &w) {
                    let e = e.to_string();
                    self.ctl.abort(ErrorCode::Aborted, &e);
                    cx.fail(e);
                }
            }
            ClientEvent::Started => {
                match self.pattern.start(&self.env, &self.session, cx.reporter) {
                    Ok((w, at)) => {
                        let planned = self
                            .env
                            .cfg
                            .spec
                            .planned_seconds()
                            .map(Duration::from_secs_f64);
                        cx.started(w, at, planned);
                    }
                    Err(e) => {
                        let e = e.to_string();
                        self.ctl.abort(ErrorCode::Internal, &e);
                        cx.fail(e);
                    }
                }
            }
            ClientEvent::PeerResults(r) => self.server_report = Some(r),
            ClientEvent::Failed(e) => cx.fail(e.to_string()),
        }
    }

    fn end_peer(&mut self, now: Time) {
        self.ctl.stop(now);
    }

    fn abort_peer(&mut self, why: &str) {
        self.ctl.abort(ErrorCode::Aborted, why);
    }

    fn peer_done(&self) -> bool {
        self.server_report.is_some()
    }
}

/// Runs one test of any pattern against an xferlab server. `Err` means
/// nothing was measured (could not connect, the server refused); once
/// flows have started, problems end up in [`Outcome::error`] next to the
/// partial result.
pub fn run(
    cfg: &ClientConfig,
    patterns: ClientPatterns,
    reporter: &mut dyn Reporter,
    interrupts: &Interrupts,
) -> Result<Outcome, ClientError> {
    let kernel_cc = !cfg.spec.transport.model().own_congestion();
    if let Some(cc) = cfg.spec.knobs.congestion.as_ref().filter(|_| kernel_cc) {
        sockopt::check_congestion(cc)?;
    }
    crate::transport::io(cfg.spec.transport)?.check(&cfg.spec.knobs)?;
    let stream = net::connect_control(&cfg.addrs, cfg.connect_timeout, net::Server::Xferlab)?;
    let server = stream.peer_addr().map_err(ClientError::Control)?;
    let local_ip = stream.local_addr().map_err(ClientError::Control)?.ip();
    let (tx, rx) = mpsc::channel();
    let mut io = ControlIo::new(stream, tx.clone()).map_err(ClientError::Control)?;
    let tally = Arc::new(CpuTally::default());
    let cpu_guard = tally.track();
    let wall_start = SystemTime::now();
    let env = ClientEnv {
        cfg,
        server,
        local_ip,
        tx: &tx,
        tally: &tally,
    };
    let pattern = patterns(&env)?;
    let mut role = XferlabClient {
        ctl: ClientControl::new(
            clock::now(),
            crate::software(),
            cfg.spec.clone(),
            Some(cfg.attach_wait()),
        )
        .with_auth_key(cfg.auth_key.clone()),
        env,
        pattern,
        session: String::new(),
        server_report: None,
    };
    let policy = Policy {
        role: Role::Client,
        max_duration: None,
        drain: DRAIN,
        // Waits for the workload to say so (rr: every transaction
        // answered); a stream says so at once.
        quiesce: DRAIN,
    };
    let control = Some((&mut io, server));
    let driven = drive(&mut role, control, &rx, reporter, interrupts, policy);
    let mut error = driven.error;
    let Some(mut workload) = driven.workload.filter(|_| driven.run.started()) else {
        return Err(ClientError::NotStarted(
            error.unwrap_or_else(|| "the test ended before it started".into()),
        ));
    };
    if error.is_some() {
        workload.abort("the test ended early");
    }
    drop(cpu_guard);
    let client = workload.finish().into_report(&mut error);
    let XferlabClient {
        mut ctl,
        session,
        server_report,
        ..
    } = role;
    if error.is_none() {
        ctl.send_results(&client);
        while let Some(bytes) = xferlab_core::outbox::Machine::poll_transmit(&mut ctl) {
            if let Err(e) = io.send(&bytes) {
                error = Some(format!("could not send results to the server: {e}"));
                break;
            }
        }
    }
    drop(io);
    let interrupted = driven.run.interrupted();
    if interrupted {
        error.get_or_insert_with(|| interruption(client.duration_s));
    }
    let server_report = server_report.map(|b| *b);
    let result = assemble(
        cfg,
        session,
        wall_start,
        client,
        server_report,
        error.clone(),
    );
    Ok(Outcome {
        result,
        error,
        interrupted,
    })
}

pub(crate) fn parse_token(hex: &str) -> Result<[u8; TOKEN_LEN], PatternError> {
    let bad = || PatternError::BadSession(hex.to_string());
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

/// The result of a client's test, from both sides' reports.
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
        s.rr()
            .is_none_or(|r| r.flows.iter().all(|f| f.end == FlowEnd::Completed))
    };
    // A time-limited test's flows that were still draining a lossy path
    // when the drain ran out measured their whole window (the warning
    // stays); a byte-limited test's did not deliver their bytes.
    let timed = matches!(cfg.spec.limit, Limit::Duration { .. });
    let all_completed = client
        .flows
        .iter()
        .chain(server.iter().flat_map(|s| s.flows.iter()))
        .all(|f| f.end == FlowEnd::Completed || (timed && crate::driver::cut_by_drain(&f.end)))
        && rr_completed(&client)
        && server.as_ref().is_none_or(rr_completed);
    let moved = client.flows.iter().any(|f| f.total.bytes_all > 0)
        || client.rr().is_some_and(|r| r.total.transactions_all > 0);
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
        usbmon: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_cut_spoils_only_byte_limited_tests() {
        let r = xferlab_core::sample::bidir_result();
        let mut cfg = ClientConfig {
            spec: r.spec.clone(),
            server: "x".into(),
            addrs: Vec::new(),
            connect_timeout: Duration::from_secs(5),
            embedded: false,
            auth_key: None,
        };
        let status = |cfg: &ClientConfig, end: FlowEnd| {
            let mut server = r.server.clone().unwrap();
            server.flows[0].end = end;
            let out = assemble(
                cfg,
                String::new(),
                SystemTime::now(),
                r.client.clone(),
                Some(server),
                None,
            );
            out.status
        };
        assert!(matches!(cfg.spec.limit, Limit::Duration { .. }));
        assert_eq!(status(&cfg, FlowEnd::Completed), Status::Ok);
        let cut = || FlowEnd::Aborted(crate::driver::CUT_SERVER.into());
        assert_eq!(status(&cfg, cut()), Status::Ok);
        assert_eq!(
            status(&cfg, FlowEnd::Aborted("connection reset by peer".into())),
            Status::Partial
        );
        cfg.spec.limit = Limit::Bytes { bytes: 1 << 20 };
        assert_eq!(status(&cfg, cut()), Status::Partial);
    }

    #[test]
    fn tokens_round_trip_and_bad_ones_are_refused() {
        let t = [0xab; TOKEN_LEN];
        assert_eq!(
            parse_token(&xferlab_core::proto::wire::token_hex(&t)).unwrap(),
            t
        );
        assert!(parse_token("zz").is_err());
        assert!(parse_token(&"g".repeat(32)).is_err());
        assert!(parse_token(&"é".repeat(16)).is_err());
    }
}
