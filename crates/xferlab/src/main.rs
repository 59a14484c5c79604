//! `xferlab`: a transport-performance lab (see README.md and DESIGN.md).

mod cli;
mod control;
mod net;
mod output;
mod server;
mod stream;
mod sys;

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use clap::Parser;
use xferlab_core::proto::wire::VERSION;
use xferlab_core::result::Software;

use cli::{Cli, Command, ServerArgs, StreamArgs};
use server::{Server, ServerConfig};
use stream::client::{self, ClientConfig};

/// Ctrl-C presses, counted by the signal handler.
static INTERRUPTS: AtomicU32 = AtomicU32::new(0);

pub fn software() -> Software {
    Software {
        name: "xferlab".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        protocol: VERSION,
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return usage_error(&e),
    };
    match cli.command {
        Command::Server(a) => run_server(&a),
        Command::Stream(a) => run_stream(&a),
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
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines
        .next()
        .unwrap_or("bad usage")
        .trim_start_matches("error: ");
    let tips: Vec<&str> = lines.filter_map(|l| l.strip_prefix("tip: ")).collect();
    let mut msg = first.to_string();
    for t in tips {
        msg.push_str("; ");
        msg.push_str(t);
    }
    eprintln!("xferlab: {msg} (see `xferlab --help`)");
    ExitCode::from(2)
}

fn fail(msg: &str, code: u8) -> ExitCode {
    eprintln!("xferlab: {msg}");
    ExitCode::from(code)
}

fn run_server(a: &ServerArgs) -> ExitCode {
    if !(a.max_duration.is_finite() && a.max_duration > 0.0) {
        return fail(
            &format!(
                "--max-duration must be a positive duration (got {})",
                a.max_duration
            ),
            2,
        );
    }
    if a.max_sessions == 0 {
        return fail("--max-sessions must be at least 1", 2);
    }
    let cfg = ServerConfig {
        bind: a.bind,
        port: a.port,
        max_duration: Duration::from_secs_f64(a.max_duration),
        max_sessions: a.max_sessions,
        one_off: a.one_off,
        embedded: false,
        log: true,
    };
    let server = match Server::bind(cfg) {
        Ok(s) => s,
        Err(e) => return fail(&e, 1),
    };
    let addr = server
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    println!("xferlab server listening on {addr} (control protocol v{VERSION})");
    io::stdout().flush().ok();
    server.run();
    ExitCode::SUCCESS
}

fn run_stream(a: &StreamArgs) -> ExitCode {
    let spec = match a.spec() {
        Ok(s) => s,
        Err(e) => return fail(&e, 2),
    };
    let out: Box<dyn Write + Send> = match &a.output {
        Some(path) => match std::fs::File::create(path) {
            Ok(f) => Box::new(io::BufWriter::new(f)),
            Err(e) => return fail(&format!("cannot write {}: {e}", path.display()), 2),
        },
        None => Box::new(io::stdout()),
    };
    // No server named: serve ourselves on loopback, in this process.
    let mut _embedded = None;
    let (server_label, addrs, embedded) = match &a.host {
        Some(host) => match net::resolve(host, a.port, a.family()) {
            Ok(addrs) => (host.clone(), addrs, false),
            Err(e) => return fail(&e, 1),
        },
        None => {
            let loopback = if a.family() == net::Family::V6 {
                IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1])
            } else {
                IpAddr::V4(Ipv4Addr::LOCALHOST)
            };
            let cfg = ServerConfig {
                bind: Some(loopback),
                port: 0,
                max_duration: Duration::from_secs(86_400),
                max_sessions: 1,
                one_off: true,
                embedded: true,
                log: false,
            };
            let started = Server::bind(cfg).and_then(|s| {
                let addr = s.local_addr().map_err(|e| e.to_string())?;
                let handle = s.spawn().map_err(|e| e.to_string())?;
                Ok((addr, handle))
            });
            match started {
                Ok((addr, handle)) => {
                    _embedded = Some(handle);
                    (addr.to_string(), vec![addr], true)
                }
                Err(e) => return fail(&format!("cannot start the in-process server: {e}"), 1),
            }
        }
    };
    install_interrupt_handler();
    let cfg = ClientConfig {
        spec,
        server: server_label,
        addrs,
        connect_timeout: Duration::from_secs_f64(a.connect_timeout),
        embedded,
    };
    let mut reporter = output::reporter(a.format(), a.units, out);
    match client::run(&cfg, reporter.as_mut(), &INTERRUPTS) {
        Ok(outcome) => {
            if let Err(e) = reporter.finish(&outcome.result) {
                return fail(&format!("cannot write the result: {e}"), 1);
            }
            match (&outcome.error, outcome.interrupted) {
                (None, _) => ExitCode::SUCCESS,
                (Some(e), true) => fail(e, 130),
                (Some(e), false) => fail(e, 1),
            }
        }
        Err(e) => fail(
            &e,
            if INTERRUPTS.load(Ordering::Relaxed) > 0 {
                130
            } else {
                1
            },
        ),
    }
}

extern "C" fn on_interrupt(_: libc::c_int) {
    // Only an atomic add: async-signal-safe.
    INTERRUPTS.fetch_add(1, Ordering::Relaxed);
}

/// Ctrl-C once: stop the test early and still exchange results. Twice:
/// abort at once.
fn install_interrupt_handler() {
    // SAFETY: installs a handler that only touches an atomic.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_interrupt as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}
