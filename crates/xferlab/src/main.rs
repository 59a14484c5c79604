//! `xferlab`: a transport-performance lab (see README.md and docs/design.md).
//!
//! No unsafe code: what needs it (raw system calls, ioctls, mappings,
//! mmsghdr batches) is `xferlab_sys`'s, behind safe APIs.
#![forbid(unsafe_code)]

/// `println!` for a command's own output on stdout that never panics: a
/// reader gone away (`xferlab run --dry-run | head -2`) drops the rest of
/// the output and the command goes on to its end and its cleanup. std's
/// `println!` panics there, because Rust ignores SIGPIPE (and the data path
/// needs it ignored: a write to a closed peer must be an error, not death).
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

mod agent;
mod calibrate;
mod cli;
mod control;
mod driver;
mod experiment;
mod iperf3;
mod lab;
mod logging;
mod metrics;
mod model;
mod net;
mod output;
mod patterns;
#[cfg(feature = "quic")]
mod quicperf;
mod rr;
mod series;
mod server;
mod session;
mod software;
mod stream;
mod sys;
mod transport;
mod usb;

pub use software::software;

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use xferlab_core::datagram::{Criterion, Plan};
use xferlab_core::proto::wire::VERSION;
use xferlab_core::spec::TestSpec;

use cli::rr::RrArgs;
use cli::series::{CbrArgs, SweepArgs};
use cli::server::ServerArgs;
use cli::stream::StreamArgs;
use cli::{Cli, Command};
use series::CbrPlan;
use server::{Server, ServerHandle};
use session::client::{self, ClientConfig};
use session::ServerConfig;

/// Ctrl-C presses, counted by the signal handler.
static INTERRUPTS: AtomicU32 = AtomicU32::new(0);

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return usage_error(&e),
    };
    logging::init(cli.verbose);
    // A damaged calibration stops every verb but the one that rewrites it
    // (and `generate`, which only describes the command line: a package
    // build must not depend on the builder's calibration).
    if !matches!(cli.command, Command::Calibrate(_) | Command::Generate(_)) {
        if let Err(e) = sys::calibration::current() {
            return fail(e, 2);
        }
    }
    let load = match cli.load.map(sys::load::Load::start).transpose() {
        Ok(l) => l,
        Err(e) => return fail(format!("cannot start the --load workers: {e}"), 1),
    };
    let usbmon = match cli
        .usbmon
        .as_ref()
        .map(usb::mon::Background::start)
        .transpose()
    {
        Ok(m) => m,
        Err(e) => return fail(format!("--usbmon: {e:#}"), 1),
    };
    let output = cli.command.output_path().map(std::path::Path::to_path_buf);
    let code = run_command(cli.command);
    // Both reports are written (or said) even when one of them fails.
    let mut failure = None;
    if let Some(mon) = usbmon {
        failure = mon
            .stop()
            .context("--usbmon")
            .and_then(|r| add_member(&output, "usbmon", &r, || usb::mon::summary(&r)))
            .err();
    }
    if let Some(load) = load {
        let report = load.stop();
        if let Err(e) = add_member(&output, "load", &report, || report.line()) {
            failure.get_or_insert(e);
        }
    }
    match failure {
        Some(e) => fail(format_args!("{e:#}"), 1),
        None => code,
    }
}

/// A global option's report: into the JSON document written with -o as
/// member `key`; otherwise `line()` on stderr (stdout is the verb's own
/// output, JSON or live table).
fn add_member<T: serde::Serialize>(
    output: &Option<std::path::PathBuf>,
    key: &str,
    report: &T,
    line: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    let doc = output
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok());
    match (
        output,
        doc.and_then(|d| output::inject_member(&d, key, report)),
    ) {
        (Some(path), Some(text)) => {
            std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
        }
        _ => {
            eprintln!("xferlab: {}", line());
            Ok(())
        }
    }
}

/// Runs one verb.
fn run_command(command: Command) -> ExitCode {
    match command {
        Command::Server(a) => run_server(&a),
        Command::Stream(a) => run_stream(&a),
        Command::Cbr(a) => run_cbr(&a),
        Command::Sweep(a) => run_sweep(&a),
        Command::Usb(a) => {
            install_interrupt_handler();
            usb::run(&a.request(), &INTERRUPTS)
        }
        Command::Lab(a) => cli::lab::run(&a),
        Command::Model(a) => match &a.command {
            cli::model::ModelCommand::Usb(u) => model::run(&u.request()),
        },
        Command::Calibrate(a) => calibrate::run(&a.request()),
        Command::Rr(a) => run_rr(&a),
        Command::Run(a) => {
            install_interrupt_handler();
            experiment::runner::run(
                &experiment::runner::RunOptions {
                    scenario: a.scenario,
                    scale: if a.quick {
                        xferlab_core::experiment::scenario::Scale::Quick
                    } else {
                        xferlab_core::experiment::scenario::Scale::Full
                    },
                    db: a.db.db,
                    dry_run: a.dry_run,
                    fresh: a.fresh,
                    resume_anyway: a.resume_anyway,
                    report_dir: a.report_dir,
                    no_report: a.no_report,
                    retry_invalid: a.retry_invalid,
                    grammar: cli::grammar(),
                },
                &INTERRUPTS,
            )
        }
        Command::Report(a) => experiment::report_cmd(
            &a.db.db,
            a.experiment.as_deref(),
            a.output.as_deref(),
            a.png,
        ),
        Command::Compare(a) => experiment::compare_cmd(&a.db.db, &a.a, &a.b, &a.metrics, a.json),
        Command::Order(a) => run_order(&a),
        Command::Generate(a) => cli::generate::run(&a),
        Command::Db(a) => match experiment::db::run(&a.db, &a.request(), &mut io::stdout()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e.to_string(), 1),
        },
    }
}

/// clap's multi-line errors, folded into the one line this tool promises.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.print().ok();
        return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        };
    }
    let msg = cli::one_line(e);
    eprintln!("xferlab: {msg} (see `xferlab --help`)");
    ExitCode::from(2)
}

/// A test that moved nothing because its flows failed (a transport's
/// handshake refused, say) is an error too: the first flow's reason, this side's
/// first. The result was written with status `failed` already.
fn why_nothing_moved(r: &xferlab_core::result::TestResult) -> Option<String> {
    if r.status != xferlab_core::result::Status::Failed {
        return None;
    }
    let aborted = |end: &xferlab_core::result::FlowEnd| match end {
        xferlab_core::result::FlowEnd::Aborted(why) => Some(why.clone()),
        _ => None,
    };
    r.client
        .flows
        .iter()
        .chain(r.server.iter().flat_map(|s| s.flows.iter()))
        .find_map(|f| aborted(&f.end))
        // An rr test's request/response flows (rr over QUIC whose
        // handshake was refused, say).
        .or_else(|| {
            r.client
                .rr()
                .into_iter()
                .chain(r.server.as_ref().and_then(|s| s.rr()))
                .flat_map(|rr| rr.flows.iter())
                .find_map(|f| aborted(&f.end))
        })
}

fn fail(msg: impl std::fmt::Display, code: u8) -> ExitCode {
    eprintln!("xferlab: {msg}");
    ExitCode::from(code)
}

fn run_server(a: &ServerArgs) -> ExitCode {
    #[cfg(feature = "quic")]
    if let Err(e) = a.quic.apply() {
        return fail(e.to_string(), 2);
    }
    if !(a.max_duration.is_finite() && a.max_duration > 0.0) {
        return fail(
            format!(
                "--max-duration must be a positive duration (got {})",
                a.max_duration
            ),
            2,
        );
    }
    if a.max_sessions == 0 {
        return fail("--max-sessions must be at least 1", 2);
    }
    if a.max_sessions_per_client == Some(0) {
        return fail("--max-sessions-per-client must be at least 1", 2);
    }
    for (flag, v) in [
        ("--max-rate", a.max_rate),
        ("--max-total-rate", a.max_total_rate),
    ] {
        if v == Some(0) {
            return fail(
                format!("{flag} must be above 0 (leave it out for no limit)"),
                2,
            );
        }
    }
    if a.max_flows == Some(0) {
        return fail("--max-flows must be at least 1", 2);
    }
    if !(a.preamble_timeout > 0.0 && a.preamble_timeout <= 3600.0) {
        return fail(
            format!(
                "--preamble-timeout must be above 0 and at most 1h (got {} s); the default is 5 s",
                a.preamble_timeout
            ),
            2,
        );
    }
    if a.auth_max_failures == 0 {
        return fail(
            "--auth-max-failures must be at least 1: every client would be refused after its first attempt",
            2,
        );
    }
    if !(a.auth_window > 0.0 && a.auth_window <= 86_400.0) {
        return fail(
            format!(
                "--auth-window must be above 0 and at most 1 day (got {} s); the default is 60 s",
                a.auth_window
            ),
            2,
        );
    }
    for (flag, v) in [
        ("--max-pending-per-client", a.max_pending_per_client),
        ("--max-pending", a.max_pending),
        ("--max-handshakes-per-client", a.max_handshakes_per_client),
        ("--max-handshakes", a.max_handshakes),
    ] {
        if v == 0 {
            return fail(
                format!("{flag} must be at least 1: every such connection would be refused"),
                2,
            );
        }
    }
    if !(1..=128).contains(&a.ipv6_prefix) {
        return fail(
            format!(
                "--ipv6-prefix must be 1 to 128 bits (got {}); the default, 64, counts a /64 as one client",
                a.ipv6_prefix
            ),
            2,
        );
    }
    // The perf protocol has no authentication: an authenticated server
    // does not serve unauthenticated load unless told to.
    if a.quic_perf.is_some() && a.auth_key.is_some() && !a.quic_perf_unauthenticated {
        return fail(
            "--quic-perf is not served beside --auth-key: the QUIC performance protocol has no authentication, so anyone reaching the port could make this server send; add --quic-perf-unauthenticated to serve it anyway",
            2,
        );
    }
    if a.agent && a.auth_key.is_none() {
        return fail(
            "--agent needs --auth-key FILE: an agent runs tests for whoever holds a key, so it takes orders from key holders only",
            2,
        );
    }
    if a.agent && a.agent_max_orders == 0 {
        return fail("--agent-max-orders must be at least 1", 2);
    }
    let auth_keys = match &a.auth_key {
        Some(path) => match session::auth::load_keys(path) {
            Ok(k) => Some(std::sync::Arc::new(k)),
            Err(e) => return fail(&e, 2),
        },
        None => None,
    };
    let iperf3_users = match (&a.rsa_private_key_path, &a.authorized_users_path) {
        (Some(key), Some(users)) => match session::auth::Iperf3Users::load(key, users) {
            Ok(u) => Some(std::sync::Arc::new(u)),
            Err(e) => return fail(&e, 2),
        },
        _ => None,
    };
    let cfg = ServerConfig {
        auth_keys,
        iperf3_users,
        bind: a.bind,
        port: a.port,
        iperf3_port: a.iperf3_port.0,
        max_duration: Duration::from_secs_f64(a.max_duration),
        max_sessions: a.max_sessions,
        max_sessions_per_client: a.max_sessions_per_client.unwrap_or(a.max_sessions),
        one_off: a.one_off,
        embedded: false,
        log: true,
        affinity: a.affinity,
        udp_any_peer: a.udp_any_peer,
        budgets: session::budget::Budgets {
            max_rate: a.max_rate,
            max_total_rate: a.max_total_rate,
            max_flows: a.max_flows,
            min_interval: a.min_interval,
        },
        auth_max_failures: a.auth_max_failures,
        auth_window: Duration::from_secs_f64(a.auth_window),
        door: session::DoorLimits {
            preamble_timeout: Duration::from_secs_f64(a.preamble_timeout),
            max_pending_per_client: a.max_pending_per_client,
            max_pending: a.max_pending,
            max_handshakes_per_client: a.max_handshakes_per_client,
            max_handshakes: a.max_handshakes,
            ipv6_prefix: a.ipv6_prefix,
        },
    };
    if let Some(cpu) = a.affinity {
        if let Err(e) = sys::affinity::check(cpu, "this server") {
            return fail(e.to_string(), 2);
        }
    }
    if !(1..=metrics::probe::MAX_MAX_PROBES).contains(&a.max_probes) {
        return fail(
            format!(
                "--max-probes must be 1 to {} (got {}); each is a test, and a thread answers it",
                metrics::probe::MAX_MAX_PROBES,
                a.max_probes
            ),
            2,
        );
    }
    // Bad probe modules are bad input: said before anything listens.
    let prober = match &a.probe_modules {
        Some(file) => {
            let policy = agent_policy(a);
            match metrics::probe::Modules::load(file, &policy) {
                Ok(m) => Some(metrics::probe::Prober::new(m, policy, a.max_probes)),
                Err(e) => return fail(&e, 2),
            }
        }
        None => None,
    };
    // rr tests hold a socket per flow: lift the open-file limit.
    rr::raise_nofile_limit();
    let agent = a
        .agent
        .then(|| agent::session::Agent::new(agent_policy(a), a.agent_max_orders));
    let bind = cfg.bind;
    let mut server = match Server::bind(cfg) {
        Ok(s) => s,
        Err(e) => return fail(&e, 1),
    };
    let perf = match a.quic_perf.map(|port| quic_perf_port(bind, port)) {
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => return fail(&e, 1),
        None => None,
    };
    let metrics = match a.metrics {
        Some(addr) => {
            let cfg = metrics::MetricsConfig { addr, prober };
            match metrics::start(cfg, server.shared()) {
                Ok(m) => Some(m),
                Err(e) => return fail(&e, 1),
            }
        }
        None => None,
    };
    let agent_line = agent.as_ref().map(|ag| {
        let t = &ag.policy.targets;
        if t.is_empty() {
            "agent: no --agent-targets, every order is refused".to_string()
        } else {
            let nets: Vec<String> = t.iter().map(ToString::to_string).collect();
            format!("agent: orders to {}", nets.join(","))
        }
    });
    if let Some(ag) = agent {
        server = server.with_agent(ag);
    }
    let addr = server
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    match server.iperf3_addr() {
        Some(i) => outln!(
            "xferlab server listening on {addr} (control protocol v{VERSION}) and {i} (iperf3); both ports serve both protocols"
        ),
        None => outln!("xferlab server listening on {addr} (control protocol v{VERSION})"),
    }
    let perf_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Some(p) = perf {
        let line = format!(
            "quic-perf listening on {} (UDP, draft-banks-quic-performance, ALPN perf)",
            p.local_addr().map(|a| a.to_string()).unwrap_or_default()
        );
        if let Err(e) = p.spawn(server.shared(), perf_stop.clone()) {
            return fail(format!("cannot start the --quic-perf thread: {e}"), 1);
        }
        outln!("{line}");
    }
    if let Some(l) = agent_line {
        outln!("{l}");
    }
    if let Some(m) = &metrics {
        outln!("metrics on http://{}/metrics", m.local_addr());
    }
    io::stdout().flush().ok();
    server.run();
    perf_stop.store(true, Ordering::Relaxed);
    drop(metrics);
    ExitCode::SUCCESS
}

/// `server --quic-perf PORT`, bound (a port in use is said before the
/// server says it listens).
#[cfg(feature = "quic")]
fn quic_perf_port(bind: Option<IpAddr>, port: u16) -> anyhow::Result<quicperf::server::PerfPort> {
    // The certificate files `--quic-cert`/`--quic-key` named, recorded
    // (and read) when the server started.
    Ok(quicperf::server::PerfPort::bind(
        bind,
        port,
        &transport::quic::tls::files(),
    )?)
}

#[cfg(not(feature = "quic"))]
fn quic_perf_port(_bind: Option<IpAddr>, _port: u16) -> anyhow::Result<NoPerf> {
    anyhow::bail!("--quic-perf: this xferlab was built without QUIC (cargo feature quic)")
}

/// Stands for the perf port in a build without QUIC (never made).
#[cfg(not(feature = "quic"))]
enum NoPerf {}

#[cfg(not(feature = "quic"))]
impl NoPerf {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        match *self {}
    }
    fn spawn(
        self,
        _: std::sync::Arc<session::Shared>,
        _: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> io::Result<()> {
        match self {}
    }
}

/// What an agent order, and a probe, may do on this server: its
/// --agent-targets, budgets, --max-duration and key.
fn agent_policy(a: &ServerArgs) -> agent::order::Policy {
    agent::order::Policy {
        targets: a.agent_targets.clone(),
        budgets: session::budget::Budgets {
            max_rate: a.max_rate,
            max_total_rate: a.max_total_rate,
            max_flows: a.max_flows,
            min_interval: a.min_interval,
        },
        max_duration: Duration::from_secs_f64(a.max_duration),
        key_file: a.auth_key.clone(),
        plan: cli::order::planner(),
    }
}

/// `xferlab order`: the agent's lines on stdout as they come, its refusal
/// or failure as the one line on stderr.
fn run_order(a: &cli::order::OrderArgs) -> ExitCode {
    let key = match session::auth::load_keys(&a.auth_key) {
        Ok(k) => k.into_iter().next().unwrap_or_default(),
        Err(e) => return fail(&e, 2),
    };
    let mut on_line = |l: &str| outln!("{l}");
    install_interrupt_handler();
    match agent::client::order_until(&a.agent, &key, &a.argv, Some(&INTERRUPTS), &mut on_line) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e @ agent::client::AgentError::Stopped { .. }) => fail(&e, 130),
        Err(
            e @ (agent::client::AgentError::Refused { .. }
            | agent::client::AgentError::Version { .. }),
        ) => fail(&e, 2),
        Err(e) => fail(&e, 1),
    }
}

/// Where a client command's tests go: the named server, or an in-process
/// server on loopback (kept up for a whole series of tests when
/// `series` is set), and the handle that keeps that server alive.
struct Target {
    label: String,
    addrs: Vec<SocketAddr>,
    embedded: bool,
    _server: Option<ServerHandle>,
}

fn target(a: &StreamArgs, series: bool) -> anyhow::Result<Target> {
    if let Some(host) = a.host_name() {
        let addrs = net::resolve(host, a.port(), a.family())?;
        return Ok(Target {
            label: host.to_string(),
            addrs,
            embedded: false,
            _server: None,
        });
    }
    let loopback = if a.family() == net::Family::V6 {
        IpAddr::V6(Ipv6Addr::LOCALHOST)
    } else {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    };
    let cfg = ServerConfig::embedded(loopback, !series);
    let what = "cannot start the in-process server";
    let server = Server::bind(cfg).context(what)?;
    let addr = server.local_addr().context(what)?;
    let handle = server.spawn().context(what)?;
    Ok(Target {
        label: addr.to_string(),
        addrs: vec![addr],
        embedded: true,
        _server: Some(handle),
    })
}

fn open_output(a: &StreamArgs) -> Result<Box<dyn Write + Send>, output::OpenError> {
    output::open(a.output.as_deref())
}

fn client_config(
    a: &StreamArgs,
    spec: TestSpec,
    t: &Target,
) -> Result<ClientConfig, session::auth::KeyFileError> {
    let auth_key = match &a.auth_key {
        Some(path) => session::auth::load_keys(path)?.into_iter().next(),
        None => None,
    };
    Ok(ClientConfig {
        spec,
        server: t.label.clone(),
        addrs: t.addrs.clone(),
        connect_timeout: Duration::from_secs_f64(a.connect_timeout),
        embedded: t.embedded,
        auth_key,
    })
}

fn interrupted_or(code: u8) -> u8 {
    if INTERRUPTS.load(Ordering::Relaxed) > 0 {
        130
    } else {
        code
    }
}

/// `stream --quic --quic-perf`: the test against a QUIC perf server.
#[cfg(feature = "quic")]
fn quic_perf_client(
    cfg: &ClientConfig,
    reporter: &mut dyn output::Reporter,
) -> anyhow::Result<client::Outcome> {
    quicperf::client::run(cfg, reporter, &INTERRUPTS).map_err(anyhow::Error::from)
}

#[cfg(not(feature = "quic"))]
fn quic_perf_client(
    _cfg: &ClientConfig,
    _reporter: &mut dyn output::Reporter,
) -> anyhow::Result<client::Outcome> {
    anyhow::bail!("--quic-perf: this xferlab was built without QUIC (cargo feature quic)")
}

/// What `stream --quic-perf` needs besides a valid spec: QUIC, and a
/// server (a perf server is never in-process).
fn check_quic_perf(a: &StreamArgs, spec: &TestSpec) -> Result<(), String> {
    if !a.quic_perf {
        return Ok(());
    }
    if spec.transport != xferlab_core::spec::Transport::Quic {
        return Err("--quic-perf speaks QUIC: add --quic".into());
    }
    if a.host_name().is_none() {
        return Err(
            "--quic-perf needs the server: xferlab stream --quic --quic-perf HOST[:PORT]".into(),
        );
    }
    Ok(())
}

fn run_stream(a: &StreamArgs) -> ExitCode {
    let spec = match a.spec() {
        Ok(s) => s,
        Err(e) => return fail(&e, 2),
    };
    if let Err(e) = check_quic_perf(a, &spec) {
        return fail(&e, 2);
    }
    let out = match open_output(a) {
        Ok(o) => o,
        Err(e) => return fail(&e, 2),
    };
    let t = match target(a, false) {
        Ok(t) => t,
        Err(e) => return fail(format_args!("{e:#}"), 1),
    };
    install_interrupt_handler();
    let cfg = match client_config(a, spec, &t) {
        Ok(c) => c,
        Err(e) => return fail(&e, 2),
    };
    let mut reporter = output::reporter(a.format(), a.units, out);
    let ran = if a.iperf3_mode() {
        iperf3::client::run(&cfg, a.get_server_output, reporter.as_mut(), &INTERRUPTS)
            .map_err(anyhow::Error::from)
    } else if a.quic_perf {
        quic_perf_client(&cfg, reporter.as_mut())
    } else {
        client::run(&cfg, patterns::client, reporter.as_mut(), &INTERRUPTS)
            .map_err(anyhow::Error::from)
    };
    match ran {
        Ok(outcome) => {
            if let Err(e) = reporter.finish(&outcome.result) {
                return fail(format!("cannot write the result: {e}"), 1);
            }
            store_result(a, &outcome.result, outcome.error.is_none());
            match (&outcome.error, outcome.interrupted) {
                (None, _) => match why_nothing_moved(&outcome.result) {
                    Some(why) => fail(&why, 1),
                    None => ExitCode::SUCCESS,
                },
                (Some(e), true) => fail(e, 130),
                (Some(e), false) => fail(e, 1),
            }
        }
        Err(e) => fail(&e, interrupted_or(1)),
    }
}

fn run_rr(a: &RrArgs) -> ExitCode {
    let spec = match a.spec() {
        Ok(s) => s,
        Err(e) => return fail(&e, 2),
    };
    if a.stream.quic_perf {
        return fail(
            "rr needs an xferlab server (the QUIC performance protocol has no transactions); use stream --quic --quic-perf for perf servers",
            2,
        );
    }
    if a.stream.format() == output::Format::Iperf3Json {
        return fail(
            "--format iperf3-json is for stream tests; use json, jsonl, csv or human",
            2,
        );
    }
    let out = match open_output(&a.stream) {
        Ok(o) => o,
        Err(e) => return fail(&e, 2),
    };
    let t = match target(&a.stream, false) {
        Ok(t) => t,
        Err(e) => return fail(format_args!("{e:#}"), 1),
    };
    install_interrupt_handler();
    let cfg = match client_config(&a.stream, spec, &t) {
        Ok(c) => c,
        Err(e) => return fail(&e, 2),
    };
    let mut reporter = output::reporter(a.stream.format(), a.stream.units, out);
    match client::run(&cfg, patterns::client, reporter.as_mut(), &INTERRUPTS) {
        Ok(outcome) => {
            if let Err(e) = reporter.finish(&outcome.result) {
                return fail(format!("cannot write the result: {e}"), 1);
            }
            store_result(&a.stream, &outcome.result, outcome.error.is_none());
            match (&outcome.error, outcome.interrupted) {
                (None, _) => match why_nothing_moved(&outcome.result) {
                    Some(why) => fail(&why, 1),
                    None => ExitCode::SUCCESS,
                },
                (Some(e), true) => fail(e, 130),
                (Some(e), false) => fail(e, 1),
            }
        }
        Err(e) => fail(&e, interrupted_or(1)),
    }
}

/// `--db PATH`: the result, with its metrics, as a single run in the
/// results database. A failure to store is reported but does not change
/// the test's own exit status (the result was already written).
fn store_result(a: &StreamArgs, result: &xferlab_core::result::TestResult, ok: bool) {
    let Some(db) = &a.db else { return };
    let doc = match serde_json::to_value(result) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!("cannot store the result in {}: {e}", db.display());
            return;
        }
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match experiment::store_single(db, &argv, if ok { 0 } else { 1 }, &doc) {
        Ok(id) => eprintln!("stored as run {id} in {}", db.display()),
        Err(e) => tracing::warn!("cannot store the result in {}: {e}", db.display()),
    }
}

/// What a series command (`cbr`, `sweep`) needs once its plan is valid:
/// where output goes, the client configuration, and the target whose
/// in-process server must stay up for the whole series.
struct SeriesRun {
    out: Box<dyn Write + Send>,
    cfg: ClientConfig,
    json: bool,
    _target: Target,
}

fn prepare_series(a: &StreamArgs, spec: TestSpec) -> Result<SeriesRun, ExitCode> {
    let format = a.format();
    if a.db.is_some() {
        return Err(fail(
            "--db stores stream and rr results; run cbr and sweep through a scenario (`xferlab run`), which stores every run",
            2,
        ));
    }
    if a.iperf3_mode() {
        return Err(fail(
            "cbr and sweep need an xferlab server (they read per-datagram counters iperf3 does not report); use stream --iperf3 for iperf3 servers",
            2,
        ));
    }
    if a.quic_perf {
        return Err(fail(
            "cbr and sweep need an xferlab server (the QUIC performance protocol has no datagrams); use stream --quic --quic-perf for perf servers",
            2,
        ));
    }
    if !matches!(format, output::Format::Human | output::Format::Json) {
        return Err(fail(
            "cbr and sweep print a table or, with -J, one JSON report; the other --format values are for stream",
            2,
        ));
    }
    let out = open_output(a).map_err(|e| fail(&e, 2))?;
    let target = target(a, true).map_err(|e| fail(format_args!("{e:#}"), 1))?;
    install_interrupt_handler();
    Ok(SeriesRun {
        out,
        cfg: client_config(a, spec, &target).map_err(|e| fail(&e, 2))?,
        json: format == output::Format::Json,
        _target: target,
    })
}

fn run_cbr(a: &CbrArgs) -> ExitCode {
    let spec = match a.stream.spec_with(true, 5.0) {
        Ok(s) => s,
        Err(e) => return fail(&e, 2),
    };
    let search = match (&a.search, a.ladder.is_empty()) {
        (Some(s), _) => match cli::series::parse_search(s) {
            Ok((low, high, resolution)) => Some(Plan::Bisect {
                low,
                high,
                resolution,
            }),
            Err(e) => return fail(e.to_string(), 2),
        },
        (None, false) => Some(Plan::Ladder(a.ladder.clone())),
        (None, true) => None,
    };
    if search.is_none() && spec.knobs.rate.is_none() {
        return fail("cbr needs a rate: -b RATE, --ladder or --search", 2);
    }
    for (flag, pct) in [("--max-loss", a.max_loss), ("--max-late", a.max_late)] {
        if !(0.0..=100.0).contains(&pct) {
            return fail(
                format!("{flag} is a percentage between 0 and 100 (got {pct})"),
                2,
            );
        }
    }
    if a.repeat == 0 || a.repeat > 1000 {
        return fail(
            format!("--repeat must be between 1 and 1000 (got {})", a.repeat),
            2,
        );
    }
    let plan = CbrPlan {
        search,
        repeat: a.repeat,
        criterion: Criterion {
            max_loss_fraction: a.max_loss / 100.0,
            max_host_drops: a.max_host_drops,
            max_late_fraction: a.max_late / 100.0,
        },
    };
    let mut run = match prepare_series(&a.stream, spec) {
        Ok(r) => r,
        Err(code) => return code,
    };
    match series::run_cbr(&run.cfg, &plan, run.json, &mut run.out, &INTERRUPTS) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => fail(format!("{e:#}"), interrupted_or(1)),
    }
}

fn run_sweep(a: &SweepArgs) -> ExitCode {
    let spec = match a.stream.spec_with(true, 1.0) {
        Ok(s) => s,
        Err(e) => return fail(&e, 2),
    };
    let axis = a.axis();
    let specs = match axis.and_then(|axis| series::sweep_specs(&spec, &axis)) {
        Ok(x) => x,
        Err(e) => return fail(format!("{e:#}"), 2),
    };
    let mut run = match prepare_series(&a.stream, spec) {
        Ok(r) => r,
        Err(code) => return code,
    };
    match series::run_sweep(&run.cfg, specs, run.json, &mut run.out, &INTERRUPTS) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(format!("{e:#}"), interrupted_or(1)),
    }
}

/// Ctrl-C once: stop the test early and still exchange results. Twice:
/// abort at once.
fn install_interrupt_handler() {
    use sys::signals::{count_into, SIGINT, SIGTERM};
    if let Err(e) = count_into(&INTERRUPTS, &[SIGINT, SIGTERM]) {
        tracing::warn!("cannot catch Ctrl-C ({e}); it stops the test without results");
    }
}
