//! `xferlab stream`: the flags every network test shares (server, length,
//! transport, socket knobs, output), and the test spec they make.

use std::path::PathBuf;

use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches};
use xferlab_core::spec::{
    limits, Affinity, Direction, Knobs, Limit, RecvMode, RxStamps, SendMode, TestSpec, Transport,
};
use xferlab_core::transport::Carrier;
use xferlab_core::units::{gap_rate, parse_rate, parse_seconds, parse_size, RateUnit};

use crate::net::{Family, DEFAULT_PORT};
use crate::output::Format;
use crate::transport::OwnArgs;

/// `-Z/--zerocopy` values: how a TCP sender avoids copying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ZerocopyArg {
    /// sendfile() from a file holding the pattern, as iperf3 -Z.
    Sendfile,
    /// send(MSG_ZEROCOPY) from the pattern buffer.
    Msg,
}

/// `--rx-stamps` values: where a UDP receiver takes arrival times from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RxStampsArg {
    /// The kernel's receive time stamp (SO_TIMESTAMPNS).
    Kernel,
    /// The clock when the receive call returned.
    Read,
}

#[derive(Debug, Args)]
pub struct StreamArgs {
    /// Server: HOST, HOST:PORT, IPv6 or [IPv6]:PORT; iperf3://HOST[:PORT]
    /// is a stock iperf3 server (as --iperf3). Without it, an in-process
    /// server on loopback is used.
    pub host: Option<String>,
    /// Server port, when HOST does not name one (default 5290, 5201 with
    /// --iperf3, 4433 with --quic-perf).
    #[arg(short, long)]
    pub port: Option<u16>,
    /// The server is a stock iperf3 server (3.x): speak iperf3's protocol.
    /// Intervals come from this side, totals from both.
    #[arg(long)]
    pub iperf3: bool,
    /// With --iperf3: fetch the iperf3 server's own output for the test.
    #[arg(long, requires = "iperf3")]
    pub get_server_output: bool,
    /// The server speaks the QUIC performance protocol
    /// (draft-banks-quic-performance, ALPN perf: quinn's perf_server,
    /// secnetperf, picoquic's quicperf, `xferlab server --quic-perf`);
    /// needs --quic and HOST (port 4433 unless given). Uploads, or with
    /// -R downloads (with -t: asks for 2^64-1 bytes and stops reading at
    /// the deadline); -P connections, --streams request streams on each.
    /// Only this end is reported: the protocol has no results exchange.
    #[arg(long, conflicts_with = "iperf3")]
    pub quic_perf: bool,

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

    /// TCP: bytes per write() call (default: 128K, iperf3's, or what
    /// `xferlab calibrate` measured on this machine; the result's
    /// socket.write_size says what each sender used; receivers read
    /// --read-size per call). UDP: datagram size, header included
    /// (default 1400).
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
    /// Datagrams per system call (sendmmsg/recvmmsg) of a datagram
    /// transport, or per GSO/GRO buffer with --gso (default 32; with
    /// --gso, as many as the kernel cuts from one send: 128, or 64 on
    /// kernels before that limit rose).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub batch: Option<i64>,
    /// Datagram transports: coalesce equal datagrams that follow each
    /// other into one buffer per call (UDP_SEGMENT on send, UDP_GRO on
    /// receive, split again here); the datagrams on the wire are the
    /// same. A transport that batches by default says so in its flags.
    #[arg(long)]
    pub gso: bool,
    /// UDP receivers: where each datagram's arrival time comes from, for
    /// jitter and delay: kernel (the kernel's receive stamp, when the
    /// datagram entered the stack) or read (the clock when the receive
    /// call returned, as iperf3 measures). Default: kernel on a paced
    /// flow, read with -b 0, where the stamp, which the kernel then takes
    /// for every packet the host receives, cost a 64-byte loopback flow
    /// about 10 % of its rate. The result's socket.rx_stamps says which.
    #[arg(long = "rx-stamps", value_enum, value_name = "FROM")]
    pub rx_stamps: Option<RxStampsArg>,
    /// UDP: set don't-fragment; too-large datagrams fail instead.
    #[arg(long)]
    pub dont_fragment: bool,
    #[command(flatten)]
    pub own: OwnArgs,
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
    /// TCP: receive with TCP_ZEROCOPY_RECEIVE: the kernel maps whole
    /// received pages instead of copying them; the rest is copied
    /// (labelled in results, with the share mapped).
    #[arg(long = "rx-zerocopy", conflicts_with = "skip_rx_copy")]
    pub rx_zerocopy: bool,
    /// TCP: send without copying: sendfile() from a file holding the
    /// pattern (-Z, as iperf3), or send(MSG_ZEROCOPY) with `--zerocopy
    /// msg` (labelled in results).
    #[arg(short = 'Z', long = "zerocopy", value_enum, num_args = 0..=1, require_equals = false, default_missing_value = "sendfile", value_name = "HOW")]
    pub zerocopy: Option<ZerocopyArg>,
    /// TCP: bytes per read() call on receivers (default: 128K, iperf3's,
    /// or what `xferlab calibrate` measured on this machine). The result's
    /// socket.read_size says what each receiver used.
    #[arg(long = "read-size", value_parser = parse_size, value_name = "SIZE")]
    pub read_size: Option<u64>,
    /// TCP: let receivers batch their wake-ups with SO_RCVLOWAT, up to
    /// SIZE (at most one read; about 1 ms of data at the flow's rate).
    /// Default off: it did not pay on loopback here.
    #[arg(long = "rcvlowat", value_parser = parse_size, value_name = "SIZE")]
    pub rcvlowat: Option<u64>,
    /// TCP: whether each read asks for the rest of the receive buffer,
    /// filling it to its end as iperf3 reads a block (on), or the whole
    /// buffer every time (off). Default: on while a side runs fewer flows
    /// than it may use CPUs and its buffer is at most 128K, off otherwise
    /// (measured: one flow gained with 128K buffers on AMD and Intel,
    /// lost with 256K and 512K, eight flows lost). The result's
    /// socket.read_fill says what each used.
    #[arg(long = "read-fill", value_enum)]
    pub read_fill: Option<super::lab::OnOff>,

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
    pub auth_key: Option<PathBuf>,
    /// Free text stored with the result.
    #[arg(short = 'T', long)]
    pub title: Option<String>,
    /// Pin this side's data threads to CPU N and, with ",M", the
    /// server's to CPU M (as iperf3 -A n,m). Placement is part of what is
    /// measured: a ping-pong whose two ends share a CPU never pays a
    /// cross-CPU wake-up.
    #[arg(short = 'A', long, value_parser = parse_affinity, value_name = "N[,M]")]
    pub affinity: Option<Affinity>,
    /// Pin flow i's data thread to CPU i (mod the CPUs each end may use)
    /// on both ends: on one host, each flow's sender and receiver then
    /// share a CPU and its cache. -A wins for its end; a stock iperf3
    /// server places its own threads. Each flow's CPU is in its
    /// `socket.cpu`.
    #[arg(long)]
    pub pin_flows: bool,

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
        } else if self.quic_perf {
            xferlab_core::transport::quic::perf::PORT
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
        let gso = self.own.gso(transport, self.gso)?;
        let batch = match self.batch {
            Some(b) => u32::try_from(b)
                .map_err(|_| format!("--batch must be between 1 and 1024 datagrams (got {b})"))?,
            // One GSO send per system call: the more segments, the fewer
            // calls. 64-byte datagrams, unlimited, loopback: 10.7M sent in
            // 2 s with 32 per send, 20.3M with 64 (`stream -u -b 0 -l 64
            // --gso --batch N`).
            None if udp && gso => limits::MAX_GSO_SEGMENTS,
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
            DEFAULT_TCP_BLOCK
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
                } else if self.rx_zerocopy {
                    RecvMode::Zerocopy
                } else {
                    RecvMode::Copy
                },
                send_mode: match self.zerocopy {
                    None => SendMode::Copy,
                    Some(ZerocopyArg::Sendfile) => SendMode::Sendfile,
                    Some(ZerocopyArg::Msg) => SendMode::MsgZerocopy,
                },
                read_size: self.read_size,
                write_size: self.length.filter(|_| !udp),
                rcvlowat: self.rcvlowat,
                read_fill: self.read_fill.map(|f| f == super::lab::OnOff::On),
                rx_stamps: self.rx_stamps.map(|s| match s {
                    RxStampsArg::Kernel => RxStamps::Kernel,
                    RxStampsArg::Read => RxStamps::Read,
                }),
                rate: if udp {
                    match self.gap {
                        Some(us) => gap_rate(size, us).map_err(|e| e.to_string())?,
                        None if transport.model().congestion_controlled() => {
                            self.bitrate.filter(|&r| r > 0)
                        }
                        None => Some(self.bitrate.unwrap_or(DEFAULT_UDP_RATE)).filter(|&r| r > 0),
                    }
                } else if self.gap.is_some() {
                    return Err("--gap spaces UDP datagrams; add -u".into());
                } else {
                    None
                },
                batch,
                gso,
                dont_fragment: self.dont_fragment,
                own: self.own.knobs(),
            },
            title: self.title.clone(),
            affinity: Affinity {
                flows: self.pin_flows,
                ..self.affinity.unwrap_or_default()
            },
            ..TestSpec::default_stream()
        };
        let mut spec = spec;
        // `--quic-perf` is a knob of QUIC's flows (recorded in the spec,
        // so the result says what it was measured against); without
        // --quic the command line is refused before the test.
        if self.quic_perf && spec.transport == Transport::Quic {
            let q = spec.knobs.own.quic.get_or_insert_with(Default::default);
            q.perf = true;
        }
        spec.validate().map_err(|e| e.to_string())?;
        if let Some(cpu) = spec.affinity.client {
            crate::sys::affinity::check(cpu, "this machine").map_err(|e| e.to_string())?;
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

/// TCP's unit without `-l`: what `-k` counts and what an iperf3 server is
/// told, iperf3's own default block (a calibrated machine's senders may
/// write another size: `transport::sizing`).
const DEFAULT_TCP_BLOCK: u64 = crate::transport::sizing::DEFAULT_SIZE as u64;
/// UDP datagram size: fits an Ethernet MTU over IPv4 and IPv6 with room
/// for a tunnel header.
const DEFAULT_UDP_SIZE: u64 = 1400;
/// UDP rate per flow when `-b` is not given, as iperf3.
const DEFAULT_UDP_RATE: u64 = 1_000_000;
/// Datagrams per call (every datagram transport): batching costs nothing at low
/// rates (a paced sender gathers at most a 200 us burst) and is what lets
/// a host reach high packet rates. Measured on loopback (AMD EPYC, L1d
/// 32K, L2 512K; `stream -u -b 0 -t 2 --batch N`, three interleaved
/// runs, received kpps): at 64 B, 1: 192-228, 8: 332-381, 16: 319-384,
/// 32: 371-387, 64: 298-391, 128: 289-391; at 1400 B, 1: 155-221, 8:
/// 256-353, 16: 265-340, 32: 271-302, 64: 245-289, 128: 246-365. So the
/// system call is most of the cost at one per call, and past 8 the
/// differences are within this machine's run-to-run spread; 32 keeps the
/// most at 64 B, and 32 x 1400 B (45 KB) still fits any L2. Userspace
/// DCCP CCID2 at 1400 B (`stream --dccp --ccid 2 -t 2 --batch N`, Gbit/s):
/// 1: 2.0, 8: 3.0, 32: 3.1-3.4, 64: 3.4. The same on an Intel Xeon (2 MiB
/// L2; `bench/udp-constants`, medians of 5 interleaved 2 s rounds,
/// 2026-11-29), received kpps at 64 B / 1400 B: 1: 509 / 467, 8: 630 /
/// 593, 16: 697 / 588, 32: 686 / 645, 64: 670 / 664: past 8 within the
/// spread again, 32 within 3 % of the best at both sizes on both CPUs.
const DEFAULT_UDP_BATCH: u32 = 32;

/// `iperf3://HOST[:PORT]` names a stock iperf3 server.
const IPERF3_SCHEME: &str = "iperf3://";

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
            ..Affinity::default()
        },
        Some((n, m)) => Affinity {
            client: if n.is_empty() { None } else { Some(cpu(n)?) },
            server: Some(cpu(m)?),
            ..Affinity::default()
        },
    })
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
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<TestSpec, String> {
        let mut all = vec!["xferlab", "stream"];
        all.extend_from_slice(args);
        let cli = Cli::try_parse_from(all).map_err(|e| e.to_string())?;
        let Command::Stream(s) = cli.command else {
            unreachable!()
        };
        s.spec()
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
        let tcp = parse(&[]).unwrap().knobs;
        assert_eq!((tcp.size, tcp.write_size), (128 << 10, None));
        let tcp = parse(&["-l", "64K"]).unwrap().knobs;
        assert_eq!((tcp.size, tcp.write_size), (64 << 10, Some(64 << 10)));
        assert_eq!(parse(&["-u"]).unwrap().knobs.write_size, None);
    }

    #[test]
    fn quic_perf_is_a_knob_of_quic_flows() {
        let s = parse(&["--quic", "--quic-perf", "-R", "--streams", "4"]).unwrap();
        let q = s.knobs.own.quic.unwrap();
        assert!(q.perf && q.streams == 4, "{q:?}");
        let s = parse(&["--quic", "--quic-perf"]).unwrap();
        assert!(s.knobs.own.quic.unwrap().perf);
        // Plain --quic flows are xferlab's own.
        assert!(!parse(&["--quic"])
            .unwrap()
            .knobs
            .own
            .quic
            .is_some_and(|q| q.perf));
        // The protocol has no datagrams.
        assert!(parse(&["--quic", "--quic-perf", "-b", "10M"])
            .unwrap_err()
            .contains("no datagrams"));
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
