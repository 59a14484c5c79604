//! `xferlab server`: its flags.

use std::net::IpAddr;

use clap::Args;
use xferlab_core::units::parse_seconds;

use crate::net::DEFAULT_PORT;

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
    /// Exit after serving one test.
    #[arg(short = '1', long)]
    pub one_off: bool,
    /// Pin the data threads of every test to CPU N, unless the client
    /// asks for another (its -A n,m).
    #[arg(short = 'A', long, value_name = "N")]
    pub affinity: Option<u32>,
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
