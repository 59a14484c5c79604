//! `xferlab rr`: request/response flags on top of the stream flags, and
//! the rr test spec they make.

use clap::Args;
use xferlab_core::spec::{TestSpec, Transport};
use xferlab_core::units::{parse_seconds, parse_size};

use super::stream::{StreamArgs, TransportArg};

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
    /// Persistent QUIC connection per flow, a new bidirectional stream
    /// per transaction (request, FIN; response to FIN). `--quic` with
    /// tcp-rr picks it.
    QuicRr,
    /// New QUIC connection per transaction: a full handshake each (no
    /// resumption, no 0-RTT), one stream, close. `--quic` with tcp-crr
    /// picks it.
    QuicCrr,
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
            (a.rx_zerocopy, "--rx-zerocopy"),
            (a.zerocopy.is_some(), "-Z/--zerocopy"),
            (a.read_size.is_some(), "--read-size"),
            (a.rcvlowat.is_some(), "--rcvlowat"),
            (a.read_fill.is_some(), "--read-fill"),
            (a.dont_fragment, "--dont-fragment"),
            (a.rx_stamps.is_some(), "--rx-stamps"),
        ];
        if let Some((_, flag)) = stream_only.iter().find(|(given, _)| *given) {
            return Err(format!(
                "{flag} is a stream option; see `xferlab rr --help`"
            ));
        }
        let quic = a.transport.0 == Some(Transport::Quic);
        if let Some(t) = a.transport.0.filter(|_| !quic) {
            return Err(format!(
                "{} is a stream option: rr runs over TCP, UDP with --mode udp-rr, or QUIC with --quic",
                TransportArg::name(t)
            ));
        }
        let int = |flag: &str, v: i64| {
            u32::try_from(v).map_err(|_| format!("{flag} must be a positive number (got {v})"))
        };
        // --quic carries rr's two TCP modes over QUIC: a stream per
        // transaction, or a connection per transaction.
        let mode = match (self.mode, quic) {
            (RrModeArg::TcpRr, false) => RrMode::TcpRr,
            (RrModeArg::TcpCrr, false) => RrMode::TcpCrr,
            (RrModeArg::UdpRr, false) => RrMode::UdpRr,
            (RrModeArg::TcpRr | RrModeArg::QuicRr, _) => RrMode::QuicRr,
            (RrModeArg::TcpCrr | RrModeArg::QuicCrr, _) => RrMode::QuicCrr,
            (RrModeArg::UdpRr, true) => {
                return Err(
                    "--mode udp-rr carries bare datagrams; with --quic use --mode quic-rr (a stream per transaction) or quic-crr (a connection per transaction)"
                        .into(),
                )
            }
        };
        if mode.transport() == Transport::Quic && self.background > 0 {
            return Err(
                "--background runs TCP stream flows beside the rr flows; with quic-rr/quic-crr leave it out (run `xferlab stream --quic` for QUIC bulk flows)"
                    .into(),
            );
        }
        let background = int("--background", self.background)?;
        let mut spec = a.spec_with(false, 10.0)?;
        spec.transport = mode.transport();
        if quic {
            // What --quic sets up for datagram flows (batches, GSO,
            // receive stamps) is the stream pattern's; a QUIC rr
            // endpoint batches on its own.
            spec.knobs.batch = 1;
            spec.knobs.gso = false;
            spec.knobs.rx_stamps = None;
        }
        spec.parallel = background;
        spec.pattern = Pattern::Rr(RrSpec {
            mode,
            request_size: self.request_size,
            response_size: self.response_size,
            depth: int("--depth", self.depth)?,
            flows: int("-F/--flows", self.flows)?,
            timeout_s: self.timeout,
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
