//! The command line: [`Cli`] and its verbs ([`Command`]), one submodule of
//! clap `Args` per verb group. Verbs are the patterns of docs/design.md;
//! flags follow iperf3's names where the concept is the same.

pub mod calibrate;
pub mod db;
pub mod experiment;
pub mod generate;
pub mod lab;
pub mod lab_topology;
pub mod model;
pub mod order;
pub mod rr;
pub mod series;
pub mod server;
pub mod stream;
pub mod usb;

use clap::{Parser, Subcommand};

use calibrate::CalibrateArgs;
use db::DbArgs;
use experiment::{CompareArgs, ReportArgs, RunArgs};
use generate::GenerateArgs;
use lab::LabArgs;
use model::ModelArgs;
use rr::RrArgs;
use series::{CbrArgs, SweepArgs};
use server::ServerArgs;
use stream::StreamArgs;
use usb::UsbArgs;

#[derive(Debug, Parser)]
#[command(
    name = "xferlab",
    version,
    about = "Measure how fast data really moves through a transport, and why.",
    long_about = "Measure how fast data really moves through a transport, and why.\n\n\
        Every test is pattern x transport x knobs -> measurements. With no server named, \
        a test runs against an in-process server on loopback.",
    after_help = "Exit status: 0 test ok; 1 test failed or incomplete (partial results are still written); \
        2 bad usage; 130 interrupted (results so far are written)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Diagnostics on stderr: -v debug (connections, sessions), -vv trace.
    /// The server's log lines on stdout are printed either way.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Background load while the verb runs, as `stress -c N -m M`: N CPU
    /// spinners and M workers touching vm-bytes (default 256M) of fresh
    /// memory each round. What each worker achieved (% of a core, from its
    /// own CPU time) is added to a JSON result written with -o as `load`,
    /// or printed on stderr.
    #[arg(long, global = true, value_name = "cpu=N,mem=M[,vm-bytes=SIZE]")]
    pub load: Option<xferlab_core::load::LoadSpec>,
    /// Bus accounting beside the verb: usbmon reads the bus of this USB
    /// device (VID:PID or BUS.ADDR; `,ecm|eem|ncm` counts the link's
    /// Ethernet frames per transfer) from start to end. Payload MB/s,
    /// transfers/s, frames per transfer and % of the high-speed bulk
    /// capacity per direction go into a JSON result written with -o as
    /// `usbmon`, or on stderr. Needs root and the usbmon module.
    #[arg(long, global = true, value_name = "DEVICE[,ENCAP]")]
    pub usbmon: Option<crate::usb::mon::UsbMonSpec>,
}

impl Cli {
    /// Parses a command line without printing or exiting: the error is the
    /// one line the tool would print (`xferlab run` checks every point of
    /// a scenario this way before anything runs).
    pub fn try_parse_from_args<I: IntoIterator<Item = String>>(args: I) -> Result<Cli, CheckError> {
        Cli::try_parse_from(args).map_err(CheckError::Parse)
    }
}

/// The command line as the experiment runner checks a scenario's points
/// against it (see [`crate::experiment::argv::Grammar`]).
pub fn grammar() -> crate::experiment::argv::Grammar {
    use clap::CommandFactory;
    let mut root = Cli::command();
    root.build();
    crate::experiment::argv::Grammar {
        root,
        check: |args| {
            Cli::try_parse_from_args(args)
                .and_then(|cli| cli.command.check_values())
                .map_err(|e| e.to_string())
        },
    }
}

/// Why a command line cannot run, found without running it: the one line
/// the tool would print.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// clap refused it (an unknown flag, a value its parser rejects).
    #[error("{}", one_line(.0))]
    Parse(clap::Error),
    /// The verb's own checks of its values refused it.
    #[error("{0}")]
    Values(String),
}

/// clap's multi-line error, folded into the one line this tool promises:
/// the message, then its tips after `;`.
pub fn one_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines
        .next()
        .unwrap_or("bad usage")
        .trim_start_matches("error: ");
    let mut msg = first.to_string();
    // "the following required arguments were not provided:" lists them
    // on lines of their own, before its usage line: without them the line
    // names nothing to add.
    let lines: Vec<&str> = lines.collect();
    if first.ends_with("were not provided:") {
        let missing: Vec<&str> = lines
            .iter()
            .take_while(|l| !l.starts_with("Usage:"))
            .copied()
            .collect();
        msg.push(' ');
        msg.push_str(&missing.join(", "));
    }
    // The fix: clap's tips, and the values an enum flag takes (without
    // them "invalid value 'x' for '--read-fill'" names no way out).
    for l in lines {
        let fix = l.strip_prefix("tip: ").or_else(|| {
            l.strip_prefix('[')
                .and_then(|l| l.strip_suffix(']'))
                .filter(|l| l.starts_with("possible values: "))
        });
        if let Some(t) = fix {
            msg.push_str("; ");
            msg.push_str(t);
        }
    }
    msg
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve tests from xferlab and stock iperf3 clients, several at once.
    Server(Box<ServerArgs>),
    /// Bulk transfer: as much data as possible (TCP), or datagrams at a
    /// rate (UDP, -u), one way, reverse or both ways, in parallel flows.
    Stream(Box<StreamArgs>),
    /// Constant rate over UDP with a pass/fail verdict: was rate R
    /// sustained without loss, receive-buffer overruns or late sends? With
    /// --ladder or --search, the highest sustained rate (max and median of
    /// --repeat runs).
    Cbr(Box<CbrArgs>),
    /// UDPmon-style sweep over UDP: throughput and loss versus datagram
    /// size (--size) or versus the spacing between datagrams (--spacing).
    Sweep(Box<SweepArgs>),
    /// USB bulk throughput: host side through usbfs (`usb bulk`), device
    /// side as a configfs gadget (`usb gadget`), `usb list`.
    Usb(UsbArgs),
    /// Timing models: `model usb` predicts what real USB controllers
    /// achieve for a transfer size, depth and direction, and why.
    Model(ModelArgs),
    /// Measure the TCP write and read sizes that move the most on this
    /// machine (loopback, a few seconds) and keep them for every later
    /// test here; without a calibration, tests use iperf3's 128 KiB.
    Calibrate(CalibrateArgs),
    /// Client and server in network namespaces joined by xferlab's own
    /// link emulator (rate, delay, jitter, loss, queue, ECN marking):
    /// `xferlab lab [LINK/HOST FLAGS] VERB [ARGS]`, or `xferlab lab clean`.
    Lab(Box<LabArgs>),
    /// Request/response transactions: TCP RR (persistent connection),
    /// TCP CRR (a connection per transaction) or UDP RR (with a timeout),
    /// many flows at once, optionally next to background stream flows.
    /// Reports transactions per second over time and latency percentiles.
    Rr(Box<RrArgs>),
    /// Run an experiment: a scenario file's grid of knob values x repeats,
    /// each point an ordinary xferlab invocation, stored run by run in an
    /// SQLite database; ends with its report. Run it again to resume.
    Run(RunArgs),
    /// Tables (Markdown, CSV) and plots (SVG, one HTML page) of a stored
    /// experiment (default: the newest).
    Report(ReportArgs),
    /// Did this change help? Per metric, the difference between two runs
    /// or points with its 95 % confidence interval and Welch's t-test.
    Compare(CompareArgs),
    /// Order an agent (`xferlab server --agent`) to run a test as the
    /// client against another host; its JSON lines and result come back
    /// here: `xferlab order --agent HOST --auth-key FILE stream SERVER -t 5`.
    Order(order::OrderArgs),
    /// The results database: list experiments, show runs, export them as
    /// CSV, JSON lines or SQL.
    Db(DbArgs),
    /// Man pages (`generate man DIR`: one per verb) and shell completion
    /// scripts (`generate completions bash|zsh|fish|...`), made from the
    /// same definitions as --help.
    Generate(GenerateArgs),
}

impl Command {
    /// The checks a verb makes on its values before it runs (ranges,
    /// combinations), without running anything.
    pub fn check_values(&self) -> Result<(), CheckError> {
        let values = |e: &dyn std::fmt::Display| CheckError::Values(format!("{e:#}"));
        match self {
            Command::Stream(a) => a.spec().map(drop).map_err(|e| values(&e)),
            Command::Rr(a) => a.spec().map(drop).map_err(|e| values(&e)),
            Command::Cbr(a) => a
                .stream
                .spec_with(true, 5.0)
                .map(drop)
                .map_err(|e| values(&e)),
            Command::Sweep(a) => a
                .stream
                .spec_with(true, 1.0)
                .map(drop)
                .map_err(|e| values(&e)),
            Command::Lab(a) => {
                let lab = a.check().map_err(|e| CheckError::Values(e.message))?;
                let checked = lab.parsed.iter().try_for_each(|t| t.command.check_values());
                checked
            }
            _ => Ok(()),
        }
    }

    /// The file a verb writes its result to (`-o`), if any.
    pub fn output_path(&self) -> Option<&std::path::Path> {
        match self {
            Command::Usb(u) => match &u.command {
                usb::UsbCommand::Bulk(b) => b.output.as_deref(),
                usb::UsbCommand::Gadget(g) => g.output.as_deref(),
                _ => None,
            },
            Command::Model(m) => match &m.command {
                model::ModelCommand::Usb(u) => u.output.as_deref(),
            },
            _ => self.stream_args().and_then(|s| s.output.as_deref()),
        }
    }

    /// The network flags of a test verb over sockets (stream, cbr, sweep,
    /// rr); None for the others.
    pub fn stream_args(&self) -> Option<&StreamArgs> {
        match self {
            Command::Stream(s) => Some(s),
            Command::Cbr(c) => Some(&c.stream),
            Command::Sweep(s) => Some(&s.stream),
            Command::Rr(r) => Some(&r.stream),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own consistency checks over every verb: the global `-v`
    /// must not collide with any verb's short flags.
    #[test]
    fn the_command_tree_is_consistent_and_v_counts_anywhere() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let v = |args: &[&str]| Cli::try_parse_from(args).unwrap().verbose;
        assert_eq!(v(&["xferlab", "server"]), 0);
        assert_eq!(v(&["xferlab", "-v", "server"]), 1);
        assert_eq!(v(&["xferlab", "server", "-vv"]), 2);
        assert_eq!(v(&["xferlab", "stream", "-v", "-t", "1", "-v"]), 2);
    }
}
