//! `xferlab server`: its flags.

use std::net::IpAddr;

use clap::Args;
use xferlab_core::units::{parse_rate, parse_seconds};

use crate::net::DEFAULT_PORT;
use crate::session::DoorLimits;

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
    /// Failed authentication attempts one client address may make per
    /// --auth-window; then it is refused until the window is over.
    #[arg(long, default_value_t = crate::session::auth::MAX_FAILURES, value_name = "N")]
    pub auth_max_failures: u32,
    /// The window failed authentication attempts are counted in.
    #[arg(long, default_value_t = crate::session::auth::WINDOW.as_secs_f64(), value_parser = parse_seconds, value_name = "DURATION")]
    pub auth_window: f64,
    /// Require iperf3 clients to authenticate with iperf3's own scheme:
    /// the RSA private key (PEM) their --rsa-public-key-path matches.
    #[arg(long, value_name = "FILE", requires = "authorized_users_path")]
    pub rsa_private_key_path: Option<std::path::PathBuf>,
    /// iperf3 users and their passwords: `user,sha256hex` per line, the
    /// hash of "{user}password" (as iperf3's server reads it).
    #[arg(long, value_name = "FILE", requires = "rsa_private_key_path")]
    pub authorized_users_path: Option<std::path::PathBuf>,
    /// How long a new connection may take, in total, to say what it is
    /// (its first bytes: xferlab's preamble and attach record, or iperf3's
    /// cookie); then it is closed. A trickle of bytes does not extend it.
    #[arg(long, default_value_t = DoorLimits::PREAMBLE_TIMEOUT.as_secs_f64(), value_parser = parse_seconds, value_name = "DURATION")]
    pub preamble_timeout: f64,
    /// Connections from one client address that have not yet said what
    /// they are; past it the oldest of them is closed (and logged). Leave
    /// room for a client's largest test (iperf3 -P 128 opens 129 at once).
    #[arg(long, default_value_t = DoorLimits::MAX_PENDING_PER_CLIENT, value_name = "N")]
    pub max_pending_per_client: usize,
    /// Connections from everyone that have not yet said what they are
    /// (at most a quarter of the open-file limit is used); past it the
    /// oldest is closed (and logged).
    #[arg(long, default_value_t = DoorLimits::MAX_PENDING, value_name = "N")]
    pub max_pending: usize,
    /// Control connections from one client address that have said what
    /// they are but not yet asked for a test (and, with --auth-key,
    /// authenticated); past it more are refused as busy. They never count
    /// against --max-sessions: a client that connects and stays silent
    /// cannot keep others out.
    #[arg(long, default_value_t = DoorLimits::MAX_HANDSHAKES_PER_CLIENT, value_name = "N")]
    pub max_handshakes_per_client: usize,
    /// Such connections from everyone (a thread each, for at most 10 s);
    /// past it more are refused as busy.
    #[arg(long, default_value_t = DoorLimits::MAX_HANDSHAKES, value_name = "N")]
    pub max_handshakes: usize,
    /// IPv6 clients whose addresses share their first N bits count as one
    /// address for every per-address limit (pending connections,
    /// handshakes, sessions, failed authentication): one host commonly
    /// holds a whole /64. 128: per address.
    #[arg(long, default_value_t = DoorLimits::IPV6_PREFIX, value_name = "N")]
    pub ipv6_prefix: u8,
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
    /// Networks an agent order's or a probe's server may be in
    /// (CIDR,...; an address alone is that host); none by default, so
    /// every order is refused. Every address the server resolves to must
    /// be inside.
    #[arg(long, value_name = "CIDR,...", value_delimiter = ',', value_parser = parse_cidr)]
    pub agent_targets: Vec<ipnet::IpNet>,
    /// Be an agent: a controller holding one of the --auth-key keys may
    /// order this host to run a test (stream, rr, cbr, sweep) as the
    /// client against a server in --agent-targets, within this server's
    /// budgets (--max-duration, --max-flows, --max-rate, --min-interval),
    /// and gets the result back (`xferlab order`). Needs --auth-key:
    /// whoever holds a key can make this host send traffic to those
    /// networks.
    #[arg(long)]
    pub agent: bool,
    /// Orders an agent runs at once; more are refused as busy (two
    /// tests from one host at once measure each other).
    #[arg(long, default_value_t = 1, value_name = "N", requires = "agent")]
    pub agent_max_orders: usize,
    /// Serve Prometheus on ADDR (e.g. 0.0.0.0:9290): /metrics, this
    /// server's counters, and /probe with --probe-modules. No
    /// authentication: bind it to an address only your Prometheus reaches.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Probe modules for /probe?module=NAME&target=HOST: a TOML file of
    /// `[modules.NAME]` tables with `command = "stream -t 5"` (an xferlab
    /// test without its server; see contrib/probe-modules.toml). Probes
    /// run as agent orders: their targets must be in --agent-targets and
    /// they are held to this server's budgets.
    #[arg(long, value_name = "FILE", requires = "metrics")]
    pub probe_modules: Option<std::path::PathBuf>,
    /// Probes running at once; more are answered 503.
    #[arg(long, default_value_t = crate::metrics::probe::MAX_PROBES, value_name = "N")]
    pub max_probes: usize,
    /// The certificate QUIC flows present (`--quic-cert`, `--quic-key`).
    #[cfg(feature = "quic")]
    #[command(flatten)]
    pub quic: crate::transport::quic::args::QuicServerArgs,
}

/// A port, or `off` for none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortOrOff(pub Option<u16>);

fn parse_port_or_off(s: &str) -> Result<PortOrOff, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(PortOrOff(None));
    }
    s.parse::<u16>()
        .map(|p| PortOrOff(Some(p)))
        .map_err(|_| format!("'{s}' is not a port: use 0-65535 or off"))
}

/// A network (`10.0.0.0/8`), or one address (`10.0.0.2`: that host).
fn parse_cidr(s: &str) -> Result<crate::agent::order::Cidr, String> {
    let s = s.trim();
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(ip.into());
    }
    s.parse().map_err(|_| {
        format!("'{s}' is not a network: use ADDRESS/PREFIX (10.0.0.0/8, fd00::/8) or an address")
    })
}
