//! The command line. Verbs are the patterns of docs/design.md; flags follow
//! iperf3's names where the concept is the same.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches, Parser, Subcommand};
use xferlab_core::spec::{Affinity, Direction, Knobs, Limit, RecvMode, TestSpec, Transport};
use xferlab_core::transport::Carrier;
use xferlab_core::units::{parse_rate, parse_seconds, parse_size, RateUnit};

use crate::net::{Family, DEFAULT_PORT};
use crate::output::Format;

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
}

impl Cli {
    /// Parses a command line without printing or exiting: the error is the
    /// one line the tool would print (`xferlab run` checks every point of
    /// a scenario this way before anything runs).
    pub fn try_parse_from_args<I: IntoIterator<Item = String>>(args: I) -> Result<Cli, String> {
        Cli::try_parse_from(args).map_err(|e| one_line(&e))
    }

    /// The checks a verb makes on its values before it runs (ranges,
    /// combinations), without running anything.
    pub fn check_values(self) -> Result<(), String> {
        match &self.command {
            Command::Stream(a) => a.spec().map(drop),
            Command::Rr(a) => a.spec().map(drop),
            Command::Cbr(a) => a.stream.spec_with(true, 5.0).map(drop),
            Command::Sweep(a) => a.stream.spec_with(true, 1.0).map(drop),
            Command::Lab(a) => {
                crate::lab::check(a)?;
                let inner = std::iter::once("xferlab".to_string()).chain(a.command.iter().cloned());
                Cli::try_parse_from_args(inner)?.check_values()
            }
            _ => Ok(()),
        }
    }
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
    for t in lines.filter_map(|l| l.strip_prefix("tip: ")) {
        msg.push_str("; ");
        msg.push_str(t);
    }
    msg
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve tests from xferlab and stock iperf3 clients, several at once.
    Server(ServerArgs),
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
    Usb(crate::usb::cli::UsbArgs),
    /// Client and server in network namespaces joined by xferlab's own
    /// link emulator (rate, delay, jitter, loss, queue, ECN marking):
    /// `xferlab lab [LINK/HOST FLAGS] VERB [ARGS]`, or `xferlab lab clean`.
    Lab(Box<crate::lab::LabArgs>),
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
    /// The results database: list experiments, show runs, export them as
    /// CSV, JSON lines or SQL.
    Db(crate::experiment::db::DbArgs),
}

/// The results database, for every experiment command.
#[derive(Debug, Args)]
pub struct DbPathArg {
    /// The results database (SQLite).
    #[arg(long, default_value = "xferlab.db", value_name = "PATH")]
    pub db: PathBuf,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The scenario (TOML; see scenarios/ and docs/experiments.md).
    pub scenario: PathBuf,
    /// The scenario's quick scale (its [quick] section): fewer points,
    /// repeats and seconds, as CI runs it.
    #[arg(long)]
    pub quick: bool,
    /// List the expanded points and their command lines; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Start a new experiment even if this scenario has stored runs.
    #[arg(long, conflicts_with = "resume_anyway")]
    pub fresh: bool,
    /// Resume the stored experiment even though the scenario file changed
    /// since (points are matched by their knob values).
    #[arg(long)]
    pub resume_anyway: bool,
    /// Where the report goes (default xferlab-reports/NAME-ID).
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,
    /// Skip the report at the end.
    #[arg(long)]
    pub no_report: bool,
    #[command(flatten)]
    pub db: DbPathArg,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Experiment id or scenario name (default: the newest experiment).
    pub experiment: Option<String>,
    /// Output directory (default xferlab-reports/NAME-ID).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub db: DbPathArg,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// A run (`run:N`) or a point with all its repeats (`EXPERIMENT/POINT`,
    /// e.g. `udpmon/3` or `4/3`; POINT numbered as in --dry-run).
    pub a: String,
    /// The other run or point.
    pub b: String,
    /// Only these metrics (repeatable).
    #[arg(short = 'm', long = "metric", value_name = "NAME")]
    pub metrics: Vec<String>,
    /// JSON instead of a table.
    #[arg(short = 'J', long = "json")]
    pub json: bool,
    #[command(flatten)]
    pub db: DbPathArg,
}

/// `--mode` values of `xferlab rr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RrModeArg {
    /// Persistent TCP connection per flow (netperf TCP_RR).
    TcpRr,
    /// New TCP connection per transaction: connect, request, response,
    /// close (netperf TCP_CRR).
    TcpCrr,
    /// One datagram each way with a sequence number; lost ones time out.
    UdpRr,
}

/// `--wait` values of `xferlab rr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RrWaitArg {
    /// As `read` when both ends are pinned to one CPU over loopback
    /// (-A N,N), where that is cheapest; as `epoll` otherwise.
    Auto,
    /// Sleep in epoll_wait(), then read: how event-driven applications
    /// wait, the same for one flow and for thousands.
    Epoll,
    /// One ping-pong TCP flow per thread sleeps in read() itself, as
    /// netperf, sockperf and iperf2 do: a system call less per
    /// transaction, faster when both ends share a CPU, slower when a
    /// wake-up crosses CPUs (the woken reader waits for the socket lock).
    Read,
    /// Busy-poll: spin on the socket (or on epoll) instead of sleeping;
    /// lower latency and more transactions per second for a busy CPU.
    Spin,
}

#[derive(Debug, Args)]
pub struct RrArgs {
    #[command(flatten)]
    pub stream: StreamArgs,
    /// How a transaction is carried.
    #[arg(long, value_enum, default_value_t = RrModeArg::TcpRr)]
    pub mode: RrModeArg,
    /// Bytes per request (K/M suffixes). UDP datagrams are at least 16
    /// bytes (sequence number and flow id).
    #[arg(short = 'r', long = "request-size", value_parser = parse_size, default_value = "1", value_name = "SIZE")]
    pub request_size: u64,
    /// Bytes per response.
    #[arg(short = 's', long = "response-size", value_parser = parse_size, default_value = "1", value_name = "SIZE")]
    pub response_size: u64,
    /// Transactions outstanding per flow (1 = ping-pong; more = pipelined).
    #[arg(
        long,
        default_value_t = 1,
        allow_negative_numbers = true,
        value_name = "N"
    )]
    pub depth: i64,
    /// Request/response flows, spread over a few event-driven threads.
    #[arg(
        short = 'F',
        long = "flows",
        default_value_t = 1,
        allow_negative_numbers = true,
        value_name = "N"
    )]
    pub flows: i64,
    /// A transaction without its response after this long counts as timed
    /// out and the flow moves on (udp-rr, tcp-crr).
    #[arg(long, default_value = "1", value_parser = parse_seconds, allow_negative_numbers = true, value_name = "DURATION")]
    pub timeout: f64,
    /// Long-lived TCP stream flows running at the same time, reported as
    /// their own group. The client sends them; with -R the server does,
    /// with --bidir both (K each way).
    #[arg(
        long,
        default_value_t = 0,
        allow_negative_numbers = true,
        value_name = "K"
    )]
    pub background: i64,
    /// Diagnostic (udp-rr): the server leaves the Nth request of every
    /// flow unanswered, to show a loss is timed out and the flow goes on.
    #[arg(long = "drop-request", value_name = "N")]
    pub drop_request: Option<u64>,
    /// How both ends wait for the peer's next message. Part of what is
    /// measured: on loopback a thread's wake-up is most of a
    /// transaction's cost.
    #[arg(long, value_enum, default_value_t = RrWaitArg::Auto, value_name = "HOW")]
    pub wait: RrWaitArg,
}

impl RrArgs {
    /// The rr test this command line asks for, validated.
    pub fn spec(&self) -> Result<TestSpec, String> {
        use xferlab_core::rr::{RrMode, RrSpec, RrWait};
        use xferlab_core::spec::Pattern;
        let a = &self.stream;
        let stream_only = [
            (
                a.parallel != 1,
                "-P/--parallel (rr uses -F/--flows and --background)",
            ),
            (
                (a.reverse || a.bidir) && self.background == 0,
                "-R/--bidir without --background",
            ),
            (
                a.transport.0 == Some(Transport::Udp),
                "-u/--udp (use --mode udp-rr)",
            ),
            (a.bitrate.is_some(), "-b/--bitrate"),
            (a.batch.is_some(), "--batch"),
            (a.gso, "--gso"),
            (a.bytes.is_some(), "-n/--bytes (rr runs for a time, -t)"),
            (a.skip_rx_copy, "--skip-rx-copy"),
            (a.dont_fragment, "--dont-fragment"),
        ];
        if let Some((_, flag)) = stream_only.iter().find(|(given, _)| *given) {
            return Err(format!(
                "{flag} is a stream option; see `xferlab rr --help`"
            ));
        }
        if let Some(t) = a.transport.0 {
            return Err(format!(
                "{} is a stream option: rr runs over TCP, or UDP with --mode udp-rr",
                TransportArg::name(t)
            ));
        }
        let int = |flag: &str, v: i64| {
            u32::try_from(v).map_err(|_| format!("{flag} must be a positive number (got {v})"))
        };
        let mode = match self.mode {
            RrModeArg::TcpRr => RrMode::TcpRr,
            RrModeArg::TcpCrr => RrMode::TcpCrr,
            RrModeArg::UdpRr => RrMode::UdpRr,
        };
        let background = int("--background", self.background)?;
        let mut spec = a.spec_with(false, 10.0)?;
        spec.pattern = Pattern::Rr;
        spec.transport = mode.transport();
        spec.parallel = background;
        spec.rr = Some(RrSpec {
            mode,
            request_size: self.request_size,
            response_size: self.response_size,
            depth: int("--depth", self.depth)?,
            flows: int("-F/--flows", self.flows)?,
            timeout_s: self.timeout,
            background,
            drop_request: self.drop_request,
            wait: match self.wait {
                RrWaitArg::Auto => RrWait::Auto,
                RrWaitArg::Epoll => RrWait::Epoll,
                RrWaitArg::Read => RrWait::Read,
                RrWaitArg::Spin => RrWait::Spin,
            },
        });
        spec.validate().map_err(|e| e.to_string())?;
        Ok(spec)
    }
}

#[derive(Debug, Args)]
pub struct CbrArgs {
    #[command(flatten)]
    pub stream: StreamArgs,
    /// Rates to try in ascending order, comma separated (e.g.
    /// 128M,146.4M,170.4M); the series stops at the first one not
    /// sustained.
    #[arg(long, value_delimiter = ',', value_parser = parse_rate, value_name = "RATES", conflicts_with = "search")]
    pub ladder: Vec<u64>,
    /// Bisect between LOW:HIGH[:RESOLUTION] (bit/s, k/M/G suffixes;
    /// default resolution 1 % of HIGH).
    #[arg(long, value_name = "LOW:HIGH[:RES]")]
    pub search: Option<String>,
    /// Runs of the whole ladder or search; max and median are reported.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeat: u32,
    /// Largest datagram loss, in percent, still counted as sustained.
    #[arg(long, default_value_t = 0.0, value_name = "PERCENT")]
    pub max_loss: f64,
    /// Largest number of receive-buffer overruns (host drops) allowed.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub max_host_drops: u64,
    /// Largest share, in percent, of datagrams sent more than 1 ms late
    /// (sender underruns) allowed.
    #[arg(long, default_value_t = 0.0, value_name = "PERCENT")]
    pub max_late: f64,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub stream: StreamArgs,
    /// Datagram sizes FROM:TO:STEP in bytes, at the -b rate.
    #[arg(
        long = "size",
        value_name = "FROM:TO:STEP",
        conflicts_with = "spacing",
        required_unless_present = "spacing"
    )]
    pub sizes: Option<String>,
    /// Microseconds between datagrams FROM:TO:STEP (0 = back to back), at
    /// the -l size.
    #[arg(long, value_name = "FROM:TO:STEP")]
    pub spacing: Option<String>,
}

/// The rate that spaces datagrams of `size` bytes `us` microseconds apart
/// (None: back to back), as `sweep --spacing` computes it.
pub fn gap_rate(size: u64, us: f64) -> Result<Option<u64>, String> {
    if !(us.is_finite() && (0.0..=10_000_000.0).contains(&us)) {
        return Err(format!(
            "--gap is microseconds between datagrams, 0 to 10000000 (got {us})"
        ));
    }
    Ok((us > 0.0).then(|| ((size as f64 * 8.0 / (us * 1e-6)).round() as u64).max(1)))
}

/// Parses `FROM:TO:STEP` into the values from FROM up to TO inclusive.
pub fn parse_steps(
    flag: &str,
    s: &str,
    parse: impl Fn(&str) -> Result<f64, String>,
) -> Result<Vec<f64>, String> {
    let help = || format!("{flag} takes FROM:TO:STEP with FROM <= TO and STEP > 0 (got '{s}')");
    let parts: Vec<&str> = s.split(':').collect();
    let [from, to, step] = parts[..] else {
        return Err(help());
    };
    let (from, to, step) = (parse(from)?, parse(to)?, parse(step)?);
    if !(from <= to && step > 0.0 && from >= 0.0) {
        return Err(help());
    }
    let n = ((to - from) / step + 1e-9).floor() as usize + 1;
    if n > 1000 {
        return Err(format!("{flag}: {n} points is too many (at most 1000)"));
    }
    Ok((0..n).map(|i| from + i as f64 * step).collect())
}

/// Parses `LOW:HIGH[:RES]` rates for `--search`.
pub fn parse_search(s: &str) -> Result<(u64, u64, u64), String> {
    let help = || format!("--search takes LOW:HIGH[:RESOLUTION] rates with LOW < HIGH (got '{s}')");
    let parts: Vec<&str> = s.split(':').collect();
    let rate = |r| parse_rate(r).map_err(|e| e.to_string());
    let (low, high, res) = match parts[..] {
        [l, h] => (rate(l)?, rate(h)?, None),
        [l, h, r] => (rate(l)?, rate(h)?, Some(rate(r)?)),
        _ => return Err(help()),
    };
    if low >= high {
        return Err(help());
    }
    Ok((low, high, res.unwrap_or((high / 100).max(1))))
}

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Port to listen on.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// A second port, for stock iperf3 clients, or `off`. Both ports serve
    /// both protocols (recognised by a connection's first bytes).
    #[arg(long, default_value = "5201", value_parser = parse_port_or_off, value_name = "PORT|off")]
    pub iperf3_port: PortOrOff,
    /// Listen on this address only (default: every IPv6 and IPv4 address).
    #[arg(short = 'B', long = "bind", value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// Longest test accepted, warm-up included (seconds or 10m, 1h).
    #[arg(long, default_value = "1h", value_parser = parse_seconds, value_name = "DURATION")]
    pub max_duration: f64,
    /// Tests served at the same time; more are refused as busy.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub max_sessions: usize,
    /// Tests served at the same time for one client address (default:
    /// --max-sessions); more are refused as busy.
    #[arg(long, value_name = "N")]
    pub max_sessions_per_client: Option<usize>,
    /// Accept UDP flows from any address, not only from the address of
    /// the test's control connection (for clients behind NATs that map
    /// UDP and TCP to different addresses). This lets a client direct a
    /// UDP test's data at a third party: leave it off on public servers.
    #[arg(long)]
    pub udp_any_peer: bool,
    /// Most this server sends for one test (bit/s, e.g. 100M): flows it
    /// sends are paced to their share; tests asking for more with -b are
    /// refused.
    #[arg(long, value_parser = parse_rate, value_name = "RATE")]
    pub max_rate: Option<u64>,
    /// Most this server sends for all tests together (bit/s); a test that
    /// does not fit in what is left is refused as busy.
    #[arg(long, value_parser = parse_rate, value_name = "RATE")]
    pub max_total_rate: Option<u64>,
    /// Most flows one test may have (both directions together).
    #[arg(long, value_name = "N")]
    pub max_flows: Option<usize>,
    /// Require clients to authenticate: xferlab clients prove they hold
    /// one of the keys in FILE (one per line, at least 16 bytes; their
    /// --auth-key). iperf3 clients then need --rsa-private-key-path and
    /// --authorized-users-path, or are refused.
    #[arg(long, value_name = "FILE")]
    pub auth_key: Option<std::path::PathBuf>,
    /// Require iperf3 clients to authenticate with iperf3's own scheme:
    /// the RSA private key (PEM) their --rsa-public-key-path matches.
    #[arg(long, value_name = "FILE", requires = "authorized_users_path")]
    pub rsa_private_key_path: Option<std::path::PathBuf>,
    /// iperf3 users and their passwords: `user,sha256hex` per line, the
    /// hash of "{user}password" (as iperf3's server reads it).
    #[arg(long, value_name = "FILE", requires = "rsa_private_key_path")]
    pub authorized_users_path: Option<std::path::PathBuf>,
    /// Shortest -i a client may ask for (seconds; -i 0 is always allowed).
    #[arg(long, value_parser = parse_seconds, value_name = "DURATION")]
    pub min_interval: Option<f64>,
    /// Exit after serving one test.
    #[arg(short = '1', long)]
    pub one_off: bool,
    /// Pin the data threads of every test to CPU N, unless the client
    /// asks for another (its -A n,m).
    #[arg(short = 'A', long, value_name = "N")]
    pub affinity: Option<u32>,
}

#[derive(Debug, Args)]
pub struct StreamArgs {
    /// Server: HOST, HOST:PORT, IPv6 or [IPv6]:PORT; iperf3://HOST[:PORT]
    /// is a stock iperf3 server (as --iperf3). Without it, an in-process
    /// server on loopback is used.
    pub host: Option<String>,
    /// Server port, when HOST does not name one (default 5290, or 5201
    /// with --iperf3).
    #[arg(short, long)]
    pub port: Option<u16>,
    /// The server is a stock iperf3 server (3.x): speak iperf3's protocol.
    /// Intervals come from this side, totals from both.
    #[arg(long)]
    pub iperf3: bool,
    /// With --iperf3: fetch the iperf3 server's own output for the test.
    #[arg(long, requires = "iperf3")]
    pub get_server_output: bool,

    /// Measured seconds, after the warm-up (or 500ms, 2m).
    #[arg(short = 't', long = "time", value_parser = parse_seconds, allow_negative_numbers = true, value_name = "DURATION", conflicts_with = "bytes")]
    pub time: Option<f64>,
    /// Bytes to move per direction instead of a duration (K/M/G suffixes),
    /// split evenly over the parallel flows.
    #[arg(short = 'n', long = "bytes", value_parser = parse_size, value_name = "SIZE")]
    pub bytes: Option<u64>,
    /// Blocks of -l bytes to move per direction instead of a duration
    /// (K/M/G suffixes; the same as -n of N x -l).
    #[arg(short = 'k', long = "blockcount", value_parser = parse_size, value_name = "N", conflicts_with_all = ["bytes", "time"])]
    pub blocks: Option<u64>,
    /// Warm-up seconds: reported, but excluded from the totals.
    #[arg(short = 'O', long = "omit", value_parser = parse_seconds, allow_negative_numbers = true, default_value = "0", value_name = "DURATION")]
    pub omit: f64,
    /// Seconds between interval reports; 0 turns them off.
    #[arg(short = 'i', long = "interval", value_parser = parse_seconds, allow_negative_numbers = true, default_value = "1", value_name = "DURATION")]
    pub interval: f64,
    /// Parallel flows (per direction with --bidir).
    #[arg(
        short = 'P',
        long = "parallel",
        default_value_t = 1,
        allow_negative_numbers = true,
        value_name = "N"
    )]
    pub parallel: i64,
    /// Reverse: the server sends, the client receives.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once.
    #[arg(long)]
    pub bidir: bool,

    /// TCP: bytes per write() call (default 1M; iperf3 uses 128K, and a
    /// larger default keeps the sending application from being the
    /// bottleneck; receivers read at least 512K per call). UDP: datagram
    /// size, header included (default 1400).
    #[arg(short = 'l', long = "length", value_parser = parse_size, value_name = "SIZE")]
    pub length: Option<u64>,

    /// The transport flags (`-u/--udp`, ...), from the transport registry.
    #[command(flatten)]
    pub transport: TransportArg,
    /// UDP target rate per flow in bit/s (k/M/G suffixes); 0 = unlimited.
    /// Default 1M, as iperf3.
    #[arg(short = 'b', long = "bitrate", value_parser = parse_rate, value_name = "RATE")]
    pub bitrate: Option<u64>,
    /// UDP: microseconds between the datagrams of a flow (UDPmon's
    /// spacing; 0 = back to back), instead of -b: the rate becomes
    /// -l x 8 / gap.
    #[arg(long, value_name = "US", conflicts_with = "bitrate")]
    pub gap: Option<f64>,
    /// UDP datagrams per system call (sendmmsg/recvmmsg), or per GSO/GRO
    /// buffer with --gso (default 32).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub batch: Option<i64>,
    /// UDP: coalesce datagrams into one buffer per call (UDP_SEGMENT on
    /// send, UDP_GRO on receive).
    #[arg(long)]
    pub gso: bool,
    /// UDP: set don't-fragment; too-large datagrams fail instead.
    #[arg(long)]
    pub dont_fragment: bool,
    /// Socket buffer size (SO_SNDBUF and SO_RCVBUF) on every data socket,
    /// both ends. Past net.core.[rw]mem_max only with CAP_NET_ADMIN; the
    /// kernel doubles the value; the result shows what was applied.
    #[arg(short = 'w', long = "window", value_parser = parse_size, value_name = "SIZE")]
    pub window: Option<u64>,
    /// Congestion control for every data socket, both ends (per socket).
    #[arg(short = 'C', long = "congestion", value_name = "ALGO")]
    pub congestion: Option<String>,
    /// Set TCP_NODELAY (disable Nagle).
    #[arg(short = 'N', long = "no-delay")]
    pub no_delay: bool,
    /// TCP maximum segment size, set before connecting.
    #[arg(short = 'M', long = "set-mss", value_name = "BYTES")]
    pub mss: Option<u32>,
    /// IP type-of-service byte (decimal or 0x hex).
    #[arg(short = 'S', long = "tos", value_parser = parse_tos, value_name = "TOS", conflicts_with = "dscp")]
    pub tos: Option<u8>,
    /// DSCP codepoint: 0-63 or a name (EF, AF41, CS1, LE ...).
    #[arg(long = "dscp", value_parser = parse_dscp, value_name = "DSCP")]
    pub dscp: Option<u8>,
    /// Cap each sending socket's pacing rate (SO_MAX_PACING_RATE), bit/s
    /// with k/M/G suffixes.
    #[arg(long = "fq-rate", value_parser = parse_rate, value_name = "RATE")]
    pub fq_rate: Option<u64>,
    /// Receive with recv(MSG_TRUNC): the kernel discards the data without
    /// copying it to user space (labelled in results).
    #[arg(long = "skip-rx-copy")]
    pub skip_rx_copy: bool,

    /// Use IPv4 only.
    #[arg(short = '4', long = "version4", conflicts_with = "v6")]
    pub v4: bool,
    /// Use IPv6 only.
    #[arg(short = '6', long = "version6")]
    pub v6: bool,
    /// Seconds to wait for each connection.
    #[arg(long, default_value = "5", value_parser = parse_seconds, value_name = "DURATION")]
    pub connect_timeout: f64,
    /// Answer the server's authentication challenge with the first key in
    /// FILE (one key per line, at least 16 bytes).
    #[arg(long, value_name = "FILE")]
    pub auth_key: Option<std::path::PathBuf>,
    /// Free text stored with the result.
    #[arg(short = 'T', long)]
    pub title: Option<String>,
    /// Pin this side's data threads to CPU N and, with ",M", the
    /// server's to CPU M (as iperf3 -A n,m). Placement is part of what is
    /// measured: a ping-pong whose two ends share a CPU never pays a
    /// cross-CPU wake-up.
    #[arg(short = 'A', long, value_parser = parse_affinity, value_name = "N[,M]")]
    pub affinity: Option<Affinity>,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// Shorthand for --format json.
    #[arg(short = 'J', long = "json", conflicts_with = "format")]
    pub json: bool,
    /// Rate units in human output: k m g t (bit/s), K M G T (bytes/s),
    /// b (auto bits), B (auto bytes, e.g. MB/s).
    #[arg(short = 'f', long = "units", value_parser = RateUnit::parse, default_value = "b", value_name = "UNIT")]
    pub units: RateUnit,
    /// Write the output to this file instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also store the result, with its metrics, in this results database
    /// (stream and rr; see `xferlab db`).
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
}

impl StreamArgs {
    /// Whether the server is a stock iperf3 server.
    pub fn iperf3_mode(&self) -> bool {
        self.iperf3
            || self
                .host
                .as_deref()
                .is_some_and(|h| h.starts_with(IPERF3_SCHEME))
    }

    /// The server as named, without an `iperf3://` prefix.
    pub fn host_name(&self) -> Option<&str> {
        self.host
            .as_deref()
            .map(|h| h.strip_prefix(IPERF3_SCHEME).unwrap_or(h))
    }

    pub fn port(&self) -> u16 {
        self.port.unwrap_or(if self.iperf3_mode() {
            crate::iperf3::IPERF3_PORT
        } else {
            DEFAULT_PORT
        })
    }

    pub fn family(&self) -> Family {
        match (self.v4, self.v6) {
            (true, _) => Family::V4,
            (_, true) => Family::V6,
            _ => Family::Any,
        }
    }

    pub fn format(&self) -> Format {
        if self.json {
            Format::Json
        } else {
            self.format
        }
    }

    /// The test this command line asks for, validated.
    pub fn spec(&self) -> Result<TestSpec, String> {
        self.spec_with(false, 10.0)
    }

    /// As [`StreamArgs::spec`], for patterns that send datagrams (UDP
    /// unless a datagram transport's flag says otherwise) and whose tests
    /// default to another length.
    pub fn spec_with(&self, datagrams: bool, default_seconds: f64) -> Result<TestSpec, String> {
        let parallel = u32::try_from(self.parallel).map_err(|_| {
            format!(
                "-P/--parallel must be between 1 and 128 (got {})",
                self.parallel
            )
        })?;
        let transport = match (self.transport.0, datagrams) {
            (Some(t), true) if t.carrier() != Carrier::Datagrams => {
                return Err(format!(
                    "{} does not carry datagrams: cbr and sweep run over UDP (-u, the default)",
                    TransportArg::name(t)
                ))
            }
            (Some(t), _) => t,
            (None, true) => Transport::Udp,
            (None, false) => Transport::Tcp,
        };
        let udp = transport.carrier() == Carrier::Datagrams;
        let batch = match self.batch {
            Some(b) => u32::try_from(b)
                .map_err(|_| format!("--batch must be between 1 and 1024 datagrams (got {b})"))?,
            None if udp => DEFAULT_UDP_BATCH,
            None => 1,
        };
        // iperf3 paces TCP to -b too; against an iperf3 server the
        // kernel's pacing cap does that job (as --fq-rate).
        let tcp_rate = if !udp && self.bitrate.is_some() {
            if !self.iperf3_mode() {
                return Err(
                    "-b/--bitrate paces UDP (-u); for TCP cap the rate with --fq-rate".into(),
                );
            }
            self.bitrate.filter(|&b| b > 0)
        } else {
            None
        };
        let size = self.length.unwrap_or(if udp {
            DEFAULT_UDP_SIZE
        } else {
            DEFAULT_TCP_SIZE
        });
        let limit = match (self.bytes, self.blocks, self.time) {
            (Some(bytes), _, _) => Limit::Bytes { bytes },
            (None, Some(blocks), _) => Limit::Bytes {
                bytes: blocks.checked_mul(size).ok_or_else(|| {
                    format!("-k/--blockcount: {blocks} blocks of {size} bytes is too many")
                })?,
            },
            (None, None, t) => Limit::Duration {
                seconds: t.unwrap_or(default_seconds),
            },
        };
        let direction = if self.bidir {
            Direction::Bidir
        } else if self.reverse {
            Direction::Reverse
        } else {
            Direction::Forward
        };
        let spec = TestSpec {
            direction,
            parallel,
            limit,
            omit_s: self.omit,
            interval_s: self.interval,
            transport,
            knobs: Knobs {
                size,
                buffer: self.window,
                congestion: self.congestion.clone(),
                nodelay: self.no_delay,
                mss: self.mss,
                tos: self.tos.or(self.dscp.map(|d| d << 2)),
                max_pacing_rate: self.fq_rate.or(tcp_rate).map(|bits| (bits / 8).max(1)),
                recv_mode: if self.skip_rx_copy {
                    RecvMode::Discard
                } else {
                    RecvMode::Copy
                },
                rate: if udp {
                    match self.gap {
                        Some(us) => gap_rate(size, us)?,
                        None => Some(self.bitrate.unwrap_or(DEFAULT_UDP_RATE)).filter(|&r| r > 0),
                    }
                } else if self.gap.is_some() {
                    return Err("--gap spaces UDP datagrams; add -u".into());
                } else {
                    None
                },
                batch,
                gso: self.gso,
                dont_fragment: self.dont_fragment,
            },
            title: self.title.clone(),
            affinity: self.affinity.unwrap_or_default(),
            ..TestSpec::default_stream()
        };
        spec.validate().map_err(|e| e.to_string())?;
        if let Some(cpu) = spec.affinity.client {
            crate::sys::affinity::check(cpu, "this machine")?;
        }
        if !(self.connect_timeout.is_finite() && self.connect_timeout > 0.0) {
            return Err(format!(
                "--connect-timeout must be a positive duration (got {})",
                self.connect_timeout
            ));
        }
        Ok(spec)
    }
}

/// The transport a command line picks with its flag (`-u/--udp`, ...);
/// None: the default (TCP, or UDP for the datagram verbs). The flags are
/// those of [`crate::transport::REGISTRY`], so a new transport's flag
/// appears here without an edit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportArg(pub Option<Transport>);

impl TransportArg {
    /// How messages name `t`'s flag (`-u/--udp`).
    pub fn name(t: Transport) -> String {
        crate::transport::io(t)
            .ok()
            .and_then(|io| io.flag())
            .map_or_else(|| t.label().to_string(), |f| f.name())
    }
}

impl FromArgMatches for TransportArg {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut arg = TransportArg::default();
        arg.update_from_arg_matches(m)?;
        Ok(arg)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        for io in crate::transport::REGISTRY {
            if io.flag().is_some_and(|f| m.get_flag(f.long)) {
                self.0 = Some(io.transport());
            }
        }
        Ok(())
    }
}

impl Args for TransportArg {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        let flags: Vec<_> = crate::transport::REGISTRY
            .iter()
            .filter_map(|io| io.flag())
            .collect();
        for f in &flags {
            let others = flags.iter().filter(|o| o.long != f.long).map(|o| o.long);
            let mut arg = Arg::new(f.long)
                .long(f.long)
                .help(f.help)
                .action(ArgAction::SetTrue)
                .conflicts_with_all(others);
            if let Some(c) = f.short {
                arg = arg.short(c);
            }
            cmd = cmd.arg(arg);
        }
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        TransportArg::augment_args(cmd)
    }
}

/// TCP bytes per write (see `-l`).
const DEFAULT_TCP_SIZE: u64 = 1 << 20;
/// UDP datagram size: fits an Ethernet MTU over IPv4 and IPv6 with room
/// for a tunnel header.
const DEFAULT_UDP_SIZE: u64 = 1400;
/// UDP rate per flow when `-b` is not given, as iperf3.
const DEFAULT_UDP_RATE: u64 = 1_000_000;
/// Datagrams per call: batching costs nothing at low rates (a paced
/// sender gathers at most ~50 us of datagrams) and is what lets a host
/// reach high packet rates.
const DEFAULT_UDP_BATCH: u32 = 32;

/// `iperf3://HOST[:PORT]` names a stock iperf3 server.
const IPERF3_SCHEME: &str = "iperf3://";

/// A port, or `off` for none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortOrOff(pub Option<u16>);

/// `N` or `N,M` (iperf3's -A): this side's CPU, and the server's.
fn parse_affinity(s: &str) -> Result<Affinity, String> {
    let cpu = |v: &str| {
        v.trim()
            .parse::<u32>()
            .map_err(|_| format!("'{s}' is not N or N,M with CPU numbers (e.g. 0 or 0,1)"))
    };
    Ok(match s.split_once(',') {
        None => Affinity {
            client: Some(cpu(s)?),
            server: None,
        },
        Some((n, m)) => Affinity {
            client: if n.is_empty() { None } else { Some(cpu(n)?) },
            server: Some(cpu(m)?),
        },
    })
}

fn parse_port_or_off(s: &str) -> Result<PortOrOff, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(PortOrOff(None));
    }
    s.parse::<u16>()
        .map(|p| PortOrOff(Some(p)))
        .map_err(|_| format!("'{s}' is not a port: use 0-65535 or off"))
}

fn parse_tos(s: &str) -> Result<u8, String> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => s.parse::<u8>(),
    };
    v.map_err(|_| format!("'{s}' is not a TOS byte: use 0-255 or 0x00-0xff"))
}

/// DSCP names from RFC 2474/2597/3246/5865/8622.
fn parse_dscp(s: &str) -> Result<u8, String> {
    let help = || format!("'{s}' is not a DSCP: use 0-63 or a name like EF, AF41, CS1, VA, LE");
    let up = s.to_ascii_uppercase();
    let v = if let Ok(n) = s.parse::<u8>() {
        n
    } else if let Some(n) = up.strip_prefix("CS") {
        n.parse::<u8>()
            .ok()
            .filter(|&c| c <= 7)
            .map(|c| c * 8)
            .ok_or_else(help)?
    } else if let Some(n) = up.strip_prefix("AF") {
        let d: Vec<u8> = n.bytes().map(|b| b.wrapping_sub(b'0')).collect();
        match d[..] {
            [class @ 1..=4, drop @ 1..=3] => class * 8 + drop * 2,
            _ => return Err(help()),
        }
    } else {
        match up.as_str() {
            "EF" => 46,
            "VA" | "VOICE-ADMIT" => 44,
            "LE" => 1,
            "BE" | "DF" => 0,
            _ => return Err(help()),
        }
    };
    if v > 63 {
        return Err(help());
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<TestSpec, String> {
        let mut all = vec!["xferlab", "stream"];
        all.extend_from_slice(args);
        let cli = Cli::try_parse_from(all).map_err(|e| e.to_string())?;
        let Command::Stream(s) = cli.command else {
            unreachable!()
        };
        s.spec()
    }

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

    #[test]
    fn iperf3_flags_build_the_spec() {
        let s = parse(&[
            "-t", "3", "-P", "4", "-R", "-l", "64K", "-w", "256K", "-C", "reno", "-N", "--dscp",
            "EF",
        ])
        .unwrap();
        assert_eq!(
            (s.parallel, s.direction, s.knobs.size, s.knobs.buffer),
            (4, Direction::Reverse, 65536, Some(262144))
        );
        assert_eq!(s.knobs.tos, Some(46 << 2));
        assert_eq!(s.limit, Limit::Duration { seconds: 3.0 });
        let s = parse(&["-n", "1G", "--bidir", "--skip-rx-copy", "--fq-rate", "100M"]).unwrap();
        assert_eq!(s.limit, Limit::Bytes { bytes: 1 << 30 });
        assert_eq!(s.knobs.recv_mode, RecvMode::Discard);
        assert_eq!(s.knobs.max_pacing_rate, Some(12_500_000));
    }

    #[test]
    fn nonsense_values_name_the_flag() {
        assert!(parse(&["-t", "-1"]).unwrap_err().contains("-t/--time"));
        assert!(parse(&["-l", "0"]).unwrap_err().contains("-l/--length"));
        assert!(parse(&["-P", "100000"])
            .unwrap_err()
            .contains("-P/--parallel"));
        assert!(parse(&["-P", "-3"]).unwrap_err().contains("-P/--parallel"));
        assert!(parse(&["-O", "-2"]).unwrap_err().contains("-O/--omit"));
        assert!(parse(&["-t", "3", "-n", "1M"]).is_err());
        assert!(parse(&["-R", "--bidir"]).is_err());
    }

    #[test]
    fn udp_flags_and_their_errors() {
        let s = parse(&["-u", "-b", "100M", "-l", "64", "--batch", "8", "--gso"]).unwrap();
        assert_eq!(
            (
                s.transport,
                s.knobs.rate,
                s.knobs.size,
                s.knobs.batch,
                s.knobs.gso
            ),
            (Transport::Udp, Some(100_000_000), 64, 8, true)
        );
        let s = parse(&["-u"]).unwrap();
        assert_eq!(
            (s.knobs.rate, s.knobs.size, s.knobs.batch),
            (Some(1_000_000), 1400, 32)
        );
        assert_eq!(parse(&["-u", "-b", "0"]).unwrap().knobs.rate, None);
        assert!(parse(&["-u", "-b", "10X"])
            .unwrap_err()
            .contains("not a rate"));
        assert!(parse(&["-u", "-l", "65508"]).unwrap_err().contains("65507"));
        assert!(parse(&["-u", "--batch", "0"])
            .unwrap_err()
            .contains("--batch"));
        assert!(parse(&["-b", "10M"]).unwrap_err().contains("-u"));
        assert!(parse(&["--gso"]).unwrap_err().contains("UDP"));
        assert_eq!(parse(&[]).unwrap().knobs.size, 1 << 20);
    }

    #[test]
    fn sweep_and_search_ranges() {
        let num = |v: &str| v.parse::<f64>().map_err(|e| e.to_string());
        assert_eq!(
            parse_steps("--spacing", "0:20:10", num),
            Ok(vec![0.0, 10.0, 20.0])
        );
        assert_eq!(parse_steps("--spacing", "5:6:2", num), Ok(vec![5.0]));
        assert!(parse_steps("--size", "9:1:1", num)
            .unwrap_err()
            .contains("FROM <= TO"));
        assert!(parse_steps("--size", "1:9", num).is_err());
        assert!(parse_steps("--size", "0:1000000:1", num)
            .unwrap_err()
            .contains("too many"));
        assert_eq!(
            parse_search("100M:1G"),
            Ok((100_000_000, 1_000_000_000, 10_000_000))
        );
        assert_eq!(parse_search("1M:2M:5k"), Ok((1_000_000, 2_000_000, 5_000)));
        assert!(parse_search("2G:1G").is_err());
        assert!(parse_search("1G").is_err());
    }

    #[test]
    fn dscp_names() {
        assert_eq!(parse_dscp("AF41"), Ok(34));
        assert_eq!(parse_dscp("cs1"), Ok(8));
        assert_eq!(parse_dscp("ef"), Ok(46));
        assert!(parse_dscp("AF51").is_err());
        assert!(parse_dscp("64").is_err());
        assert_eq!(parse_tos("0x10"), Ok(16));
    }
}
