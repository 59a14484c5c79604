//! What a test asks for: pattern x transport x knobs (docs/design.md).
//!
//! A [`TestSpec`] is built by the client from its command line, sent to the
//! server in the control protocol's `Hello`, validated by both sides with
//! [`TestSpec::validate`], and copied verbatim into the result so a result
//! file says exactly what was measured.

use serde::{Deserialize, Serialize};

pub mod rr;

/// Upper bounds that keep a test (and a server serving strangers) sane.
pub mod limits {
    /// Parallel flows per direction (`-P`).
    pub const MAX_PARALLEL: u32 = 128;
    /// Highest CPU number `-A` takes (glibc's cpu_set_t holds 1024).
    pub const MAX_CPU: u32 = 1023;
    /// Bytes per write/read call (`-l`).
    pub const MAX_WRITE_SIZE: u64 = 64 << 20;
    /// Bytes per read call (`--read-size`) and wake-up batch
    /// (`--rcvlowat`).
    pub const MAX_READ_SIZE: u64 = 64 << 20;
    /// Socket buffer request (`-w`).
    pub const MAX_SOCKET_BUFFER: u64 = 1 << 30;
    /// Test duration a client may ask for (`-t`); servers may lower it.
    pub const MAX_DURATION_S: f64 = 86_400.0;
    /// Warm-up (`-O`).
    pub const MAX_OMIT_S: f64 = 600.0;
    /// Reporting interval (`-i`), when not 0 (= no intervals).
    pub const MIN_INTERVAL_S: f64 = 0.05;
    pub const MAX_INTERVAL_S: f64 = 3600.0;
    /// Congestion-control names are at most TCP_CA_NAME_MAX-1 bytes.
    pub const MAX_CC_NAME: usize = 15;
    pub const MAX_TITLE: usize = 256;
    /// Largest UDP payload over IPv4 (65535 - 20 - 8).
    pub const MAX_DATAGRAM: u64 = 65_507;
    /// Every datagram starts with a 16-byte header (sequence, send time).
    pub const MIN_DATAGRAM: u64 = 16;
    /// Datagrams per system call (`--batch`).
    pub const MAX_BATCH: u32 = 1024;
    /// Segments the kernel accepts in one UDP_SEGMENT send: 128 on
    /// recent kernels (6.18 here: 128 sent, 129 EINVAL), 64 on older ones
    /// ([`OLD_GSO_SEGMENTS`]; a sender that meets EINVAL falls back).
    pub const MAX_GSO_SEGMENTS: u32 = 128;
    /// UDP_MAX_SEGMENTS of kernels before it was raised to 128.
    pub const OLD_GSO_SEGMENTS: u32 = 64;
}

/// What the application does, with the settings only that pattern has
/// (`"pattern": {"kind": "rr", ...}` in a result).
///
/// Add a variant for a new pattern, with its own settings type, and its
/// entry in the binary's pattern registry (`xferlab::patterns`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Pattern {
    /// Move as much as possible, one way, reverse or both ways.
    Stream,
    /// Request/response transactions; `parallel` counts the optional
    /// background stream flows (0 = none), as it counts a stream test's.
    Rr(rr::RrSpec),
}

impl Pattern {
    /// The name results and the command line use: `stream`, `rr`.
    pub fn name(&self) -> &'static str {
        match self {
            Pattern::Stream => "stream",
            Pattern::Rr(_) => "rr",
        }
    }

    /// The request/response settings of an rr test.
    pub fn rr(&self) -> Option<&rr::RrSpec> {
        match self {
            Pattern::Rr(rr) => Some(rr),
            Pattern::Stream => None,
        }
    }
}

pub use crate::transport::{OwnKnobs, Transport};

/// Which way data flows, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Client sends, server receives (the default).
    Forward,
    /// Server sends, client receives (`-R`).
    Reverse,
    /// Both at once, `parallel` flows each way (`--bidir`).
    Bidir,
}

/// Direction of one flow.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FlowDirection {
    /// client -> server
    C2s,
    /// server -> client
    S2c,
}

impl FlowDirection {
    pub fn label(self) -> &'static str {
        match self {
            FlowDirection::C2s => "c2s",
            FlowDirection::S2c => "s2c",
        }
    }
}

/// How the receiving side consumes data.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RecvMode {
    /// read() into a user buffer: what applications do (the default).
    #[default]
    Copy,
    /// recv(MSG_TRUNC): the kernel discards the data without copying it to
    /// user space. Measures the transport without the final copy.
    Discard,
    /// TCP_ZEROCOPY_RECEIVE: the kernel maps whole received pages into the
    /// receiver's address space instead of copying them; what it cannot
    /// map (partial pages, unaligned segments) is copied (`--rx-zerocopy`).
    Zerocopy,
}

/// Where a UDP receiver takes each datagram's arrival time from, for the
/// jitter and delay figures (`--rx-stamps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RxStamps {
    /// The kernel's receive time stamp (SO_TIMESTAMPNS): when the datagram
    /// entered the host's stack, however long it then waited in the
    /// socket. Asking for it makes the kernel stamp every packet the host
    /// receives, on the CPU that runs the receive path.
    Kernel,
    /// The clock read once when a receive call returns, for every
    /// datagram it brought: when the application got the datagram, as
    /// iperf3 measures it.
    Read,
}

/// How byte-stream senders hand data to the kernel.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SendMode {
    /// write() from a user buffer (the default).
    #[default]
    Copy,
    /// sendfile() from a file holding the pattern, as iperf3 `-Z`: the
    /// kernel attaches page-cache pages instead of copying (`-Z`).
    Sendfile,
    /// send(MSG_ZEROCOPY): the kernel pins the user buffer's pages; the
    /// completions are read from the error queue (`--zerocopy msg`).
    MsgZerocopy,
}

impl SendMode {
    pub fn is_copy(&self) -> bool {
        *self == SendMode::Copy
    }
}

/// When a test ends.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// Measured seconds, after the warm-up (`-t`).
    Duration { seconds: f64 },
    /// Bytes per direction, split evenly over the parallel flows (`-n`).
    Bytes { bytes: u64 },
}

/// The knobs every socket transport shares (docs/design.md has the table
/// of knobs per transport and pattern).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Knobs {
    /// Bytes per write() / read() call (`-l`). Byte streams write
    /// `write_size` and read `read_size` instead; for them this is the
    /// unit of `-k` and the length an iperf3 peer is told.
    pub size: u64,
    /// SO_SNDBUF and SO_RCVBUF request on every data socket, both ends.
    pub buffer: Option<u64>,
    /// TCP_CONGESTION for every data socket, both ends.
    pub congestion: Option<String>,
    /// TCP_NODELAY on every data socket.
    pub nodelay: bool,
    /// TCP_MAXSEG set on the client's sockets before connect (so both
    /// directions use it).
    pub mss: Option<u32>,
    /// IP_TOS / IPV6_TCLASS byte (DSCP << 2 | ECN).
    pub tos: Option<u8>,
    /// SO_MAX_PACING_RATE, bytes per second, on sending sockets.
    pub max_pacing_rate: Option<u64>,
    /// How receivers consume data.
    pub recv_mode: RecvMode,
    /// How byte-stream senders hand data to the kernel.
    #[serde(default, skip_serializing_if = "SendMode::is_copy")]
    pub send_mode: SendMode,
    /// Bytes per read() on byte-stream receivers (`--read-size`); None:
    /// each receiver picks it from its own CPU's L2 cache size (the
    /// result's `socket.read_size` says what it picked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_size: Option<u64>,
    /// Bytes per write() on byte-stream senders (`-l`); None: each sender
    /// picks it from its own CPU's L2 cache size (the result's
    /// `socket.write_size` says what it picked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_size: Option<u64>,
    /// Largest SO_RCVLOWAT a byte-stream receiver may set to batch its
    /// wake-ups (`--rcvlowat`); Some(0) turns batching off; None: the
    /// receiver's default (the result's `socket.rcvlowat`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcvlowat: Option<u64>,
    /// Copying byte-stream receivers: whether each read() asks for the rest
    /// of the buffer, filling it to its end (`--read-fill on`), or the
    /// whole buffer every time (`off`); None: each side chooses by how
    /// crowded its CPUs are and how large its buffer is (the result's
    /// `socket.read_fill`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_fill: Option<bool>,
    /// UDP receivers: where arrival times come from (`--rx-stamps`);
    /// None: the kernel's stamp, except on an unpaced flow (no `rate`),
    /// where it would slow the path (the result's `socket.rx_stamps`
    /// says what each receiver used; [`crate::transport::udp::rx_stamps`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_stamps: Option<RxStamps>,
    /// Target rate per flow, bit/s (`-b`); None = as fast as possible.
    /// UDP only for now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub rate: Option<u64>,
    /// Datagrams per system call (sendmmsg/recvmmsg), or per GSO/GRO
    /// buffer with `gso` (`--batch`). UDP and DCCP.
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub batch: u32,
    /// Coalesce datagrams into one buffer: UDP_SEGMENT on send, UDP_GRO
    /// on receive (`--gso`). UDP, and xferlab's DCCP over UDP (where
    /// equal packets that follow each other share a send).
    #[serde(default)]
    pub gso: bool,
    /// Forbid fragmentation (IP_PMTUDISC_DO / IPV6_DONTFRAG).
    #[serde(default)]
    pub dont_fragment: bool,
    /// The knobs of transports that have their own, each under its
    /// transport's name among these ([`OwnKnobs`]).
    #[serde(flatten)]
    pub own: OwnKnobs,
}

fn one() -> u32 {
    1
}

impl Default for Knobs {
    /// Nothing set, one datagram per call, 128 KiB units; callers set
    /// `size` for their pattern and transport.
    fn default() -> Self {
        Knobs {
            size: 128 * 1024,
            buffer: None,
            congestion: None,
            nodelay: false,
            mss: None,
            tos: None,
            max_pacing_rate: None,
            recv_mode: RecvMode::Copy,
            send_mode: SendMode::Copy,
            read_size: None,
            write_size: None,
            rcvlowat: None,
            read_fill: None,
            rx_stamps: None,
            rate: None,
            batch: 1,
            gso: false,
            dont_fragment: false,
            own: OwnKnobs::default(),
        }
    }
}

/// A complete test request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TestSpec {
    pub pattern: Pattern,
    pub transport: Transport,
    pub direction: Direction,
    /// Stream flows per direction (an rr test's background flows).
    pub parallel: u32,
    pub limit: Limit,
    /// Warm-up seconds excluded from totals.
    pub omit_s: f64,
    /// Reporting interval in seconds; 0 = no interval reports.
    pub interval_s: f64,
    pub knobs: Knobs,
    /// Free text carried into the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// CPUs the data threads run on (`-A`).
    #[serde(default, skip_serializing_if = "Affinity::is_unset")]
    pub affinity: Affinity,
}

/// The CPU each end's data threads (flow and rr engine threads) are
/// pinned to, as iperf3's `-A n[,m]`; None leaves placement to the
/// scheduler. Placement is part of what is measured: a ping-pong whose
/// two ends share a CPU never pays a cross-CPU wake-up.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Affinity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = limits::MAX_CPU))]
    pub client: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = limits::MAX_CPU))]
    pub server: Option<u32>,
    /// Each end pins flow i's data thread to the (i mod n)-th of the n
    /// CPUs it may use (`--pin-flows`); an end with its own CPU above
    /// keeps that one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flows: bool,
}

impl Affinity {
    pub fn is_unset(&self) -> bool {
        self.client.is_none() && self.server.is_none() && !self.flows
    }
}

/// One flow of a test, as both sides number it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowPlan {
    /// 0-based flow id, stable across both sides.
    pub id: u32,
    pub direction: FlowDirection,
    /// Byte quota for `Limit::Bytes`; None for duration tests.
    pub quota: Option<u64>,
}

/// Why a [`TestSpec`] cannot run. The message names the flag and the
/// accepted range, so both the CLI and a server answering a remote client
/// can pass it on as is.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error(transparent)]
    Rr(#[from] rr::RrSpecError),
    #[error("-P/--parallel must be between 1 and {max} (got {0})", max = limits::MAX_PARALLEL)]
    Parallel(u32),
    #[error("-A/--affinity takes CPU numbers from 0 to {max} (got {0})", max = limits::MAX_CPU)]
    Cpu(u32),
    #[error("-t/--time must be a positive number of seconds up to {max} (got {0})", max = limits::MAX_DURATION_S)]
    Time(f64),
    #[error("-n/--bytes must be greater than 0")]
    NoBytes,
    #[error("-O/--omit must be between 0 and {max} seconds (got {0})", max = limits::MAX_OMIT_S)]
    Omit(f64),
    #[error("-i/--interval must be 0 (off) or between {min} and {max} seconds (got {0})", min = limits::MIN_INTERVAL_S, max = limits::MAX_INTERVAL_S)]
    Interval(f64),
    #[error("-l/--length must be between 1 byte and {max} MiB (got {0})", max = limits::MAX_WRITE_SIZE >> 20)]
    Length(u64),
    #[error("-w/--window must be between 1 byte and {max} MiB (got {0})", max = limits::MAX_SOCKET_BUFFER >> 20)]
    Window(u64),
    #[error("-C/--congestion: '{0}' is not a congestion-control name (letters, digits, '_' or '-', at most {max})", max = limits::MAX_CC_NAME)]
    Congestion(String),
    #[error("-M/--set-mss must be between 88 and 65495 bytes (got {0})")]
    Mss(u32),
    #[error("-b, --gso, --batch, --dont-fragment and --rx-stamps are stream options; rr sends one request per transaction")]
    StreamOptionsInRr,
    #[error("-l/--length: a UDP datagram must be between {min} and {max} bytes (got {0})", min = limits::MIN_DATAGRAM, max = limits::MAX_DATAGRAM)]
    DatagramLength(u64),
    #[error("--batch must be between 1 and {max} datagrams (got {0})", max = limits::MAX_BATCH)]
    Batch(u32),
    #[error("--skip-rx-copy is for TCP: every UDP datagram's header is read")]
    SkipRxCopyOnUdp,
    #[error("-C, -M, -N, --fq-rate, -Z, --rx-zerocopy, --read-size, --rcvlowat and --read-fill are TCP options; pace UDP with -b")]
    TcpOptionsOnUdp,
    #[error("--read-size must be between 1 and 64M bytes (got {0})")]
    ReadSize(u64),
    #[error("--rcvlowat must be between 0 (off) and 64M bytes (got {0})")]
    Rcvlowat(u64),
    #[error("-b/--bitrate paces UDP; for TCP cap the rate with --fq-rate")]
    BitrateOnTcp,
    #[error("--gso, --batch, --dont-fragment and --rx-stamps apply to UDP (-u)")]
    UdpOptionsOnTcp,
    #[error("--fq-rate (and -b against an iperf3 server) cannot pace MPTCP: Linux has no SO_MAX_PACING_RATE for MPTCP sockets; leave out --mptcp or the rate")]
    PacingOnMptcp,
    #[error("--fq-rate must be greater than 0")]
    NoFqRate,
    #[error("-T/--title is limited to {max} bytes", max = limits::MAX_TITLE)]
    TitleTooLong,
    /// A transport's own knobs refused by its model.
    #[error(transparent)]
    Transport(#[from] crate::transport::KnobError),
}

impl TestSpec {
    /// The defaults: TCP stream, forward, 1 flow, 10 s, 1 s intervals,
    /// 128 KiB blocks (iperf3's); each end sizes its writes and reads from
    /// its own L2 cache (`-l` and `--read-size` set them instead).
    pub fn default_stream() -> Self {
        TestSpec {
            pattern: Pattern::Stream,
            transport: Transport::Tcp,
            direction: Direction::Forward,
            parallel: 1,
            limit: Limit::Duration { seconds: 10.0 },
            omit_s: 0.0,
            interval_s: 1.0,
            knobs: Knobs::default(),
            title: None,
            affinity: Affinity::default(),
        }
    }

    /// Checks every field against [`limits`]. The message names the flag and
    /// the accepted range, so both the CLI and a server answering a remote
    /// client can pass it on as is.
    pub fn validate(&self) -> Result<(), SpecError> {
        use limits::*;
        match &self.pattern {
            Pattern::Rr(rr) => rr.validate(self)?,
            Pattern::Stream => {
                if self.parallel == 0 || self.parallel > MAX_PARALLEL {
                    return Err(SpecError::Parallel(self.parallel));
                }
            }
        }
        for cpu in [self.affinity.client, self.affinity.server]
            .into_iter()
            .flatten()
        {
            if cpu > MAX_CPU {
                return Err(SpecError::Cpu(cpu));
            }
        }
        match self.limit {
            Limit::Duration { seconds } => {
                if !(seconds.is_finite() && seconds > 0.0 && seconds <= MAX_DURATION_S) {
                    return Err(SpecError::Time(seconds));
                }
            }
            Limit::Bytes { bytes } => {
                if bytes == 0 {
                    return Err(SpecError::NoBytes);
                }
            }
        }
        if !(self.omit_s.is_finite() && self.omit_s >= 0.0 && self.omit_s <= MAX_OMIT_S) {
            return Err(SpecError::Omit(self.omit_s));
        }
        if !(self.interval_s == 0.0
            || (self.interval_s.is_finite()
                && (MIN_INTERVAL_S..=MAX_INTERVAL_S).contains(&self.interval_s)))
        {
            return Err(SpecError::Interval(self.interval_s));
        }
        let k = &self.knobs;
        if k.size == 0 || k.size > MAX_WRITE_SIZE {
            return Err(SpecError::Length(k.size));
        }
        if let Some(r) = k.read_size {
            if r == 0 || r > MAX_READ_SIZE {
                return Err(SpecError::ReadSize(r));
            }
        }
        if let Some(w) = k.write_size {
            if w == 0 || w > MAX_WRITE_SIZE {
                return Err(SpecError::Length(w));
            }
        }
        if k.rcvlowat.is_some_and(|l| l > MAX_READ_SIZE) {
            return Err(SpecError::Rcvlowat(k.rcvlowat.unwrap_or(0)));
        }
        if let Some(b) = k.buffer {
            if b == 0 || b > MAX_SOCKET_BUFFER {
                return Err(SpecError::Window(b));
            }
        }
        if let Some(cc) = &k.congestion {
            let ok = !cc.is_empty()
                && cc.len() <= MAX_CC_NAME
                && cc
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !ok {
                return Err(SpecError::Congestion(cc.clone()));
            }
        }
        if let Some(mss) = k.mss {
            if !(88..=65_495).contains(&mss) {
                return Err(SpecError::Mss(mss));
            }
        }
        if let Pattern::Rr(_) = self.pattern {
            // Background flows are TCP streams; the UDP knobs of the stream
            // pattern do not apply to transactions.
            if k.rate.is_some() || k.gso || k.batch != 1 || k.dont_fragment || k.rx_stamps.is_some()
            {
                return Err(SpecError::StreamOptionsInRr);
            }
        } else {
            self.transport.model().check_knobs(k)?;
        }
        k.own.check_owner(self.transport)?;
        if k.max_pacing_rate == Some(0) {
            return Err(SpecError::NoFqRate);
        }
        if let Some(t) = &self.title {
            if t.len() > MAX_TITLE {
                return Err(SpecError::TitleTooLong);
            }
        }
        Ok(())
    }

    /// The flows of this test, numbered the same way on both sides:
    /// forward flows first, then reverse flows.
    pub fn flows(&self) -> Vec<FlowPlan> {
        let dirs: &[FlowDirection] = match self.direction {
            Direction::Forward => &[FlowDirection::C2s],
            Direction::Reverse => &[FlowDirection::S2c],
            Direction::Bidir => &[FlowDirection::C2s, FlowDirection::S2c],
        };
        let p = self.parallel as u64;
        let mut out = Vec::new();
        for &direction in dirs {
            for i in 0..p {
                let quota = match self.limit {
                    // Split evenly; the first flows take the remainder.
                    Limit::Bytes { bytes } => Some(bytes / p + u64::from(i < bytes % p)),
                    Limit::Duration { .. } => None,
                };
                out.push(FlowPlan {
                    id: out.len() as u32,
                    direction,
                    quota,
                });
            }
        }
        out
    }

    /// Seconds from start to the planned end of a duration test, warm-up
    /// included; None for byte-limited tests.
    pub fn planned_seconds(&self) -> Option<f64> {
        match self.limit {
            Limit::Duration { seconds } => Some(self.omit_s + seconds),
            Limit::Bytes { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        TestSpec::default_stream().validate().unwrap();
    }

    #[test]
    fn byte_quota_is_split_exactly() {
        let mut s = TestSpec::default_stream();
        s.parallel = 3;
        s.direction = Direction::Bidir;
        s.limit = Limit::Bytes { bytes: 10 };
        let flows = s.flows();
        assert_eq!(flows.len(), 6);
        let c2s: u64 = flows
            .iter()
            .filter(|f| f.direction == FlowDirection::C2s)
            .map(|f| f.quota.unwrap())
            .sum();
        let s2c: u64 = flows
            .iter()
            .filter(|f| f.direction == FlowDirection::S2c)
            .map(|f| f.quota.unwrap())
            .sum();
        assert_eq!((c2s, s2c), (10, 10));
        assert_eq!(
            flows.iter().map(|f| f.id).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4, 5]
        );
        assert_eq!(flows[0].quota, Some(4));
    }

    #[test]
    fn affinity_takes_cpus_up_to_the_cpu_set_size_and_is_left_out_when_unset() {
        let mut s = TestSpec::default_stream();
        assert!(!serde_json::to_string(&s).unwrap().contains("affinity"));
        s.affinity.server = Some(limits::MAX_CPU);
        s.validate().unwrap();
        s.affinity.client = Some(limits::MAX_CPU + 1);
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .contains("-A/--affinity"));
    }

    #[test]
    fn rejects_nonsense_with_the_flag_name() {
        let mut s = TestSpec::default_stream();
        s.parallel = 100_000;
        assert!(s.validate().unwrap_err().to_string().contains("-P"));
        let mut s = TestSpec::default_stream();
        s.limit = Limit::Duration { seconds: -1.0 };
        assert!(s.validate().unwrap_err().to_string().contains("-t"));
        let mut s = TestSpec::default_stream();
        s.knobs.size = 0;
        assert!(s.validate().unwrap_err().to_string().contains("-l"));
        let mut s = TestSpec::default_stream();
        s.knobs.congestion = Some("cubic; rm -rf".into());
        assert!(s.validate().unwrap_err().to_string().contains("-C"));
        let mut s = TestSpec::default_stream();
        s.interval_s = f64::NAN;
        assert!(s.validate().unwrap_err().to_string().contains("-i"));
    }

    /// The CLI, the server's reply and tests show these texts; the typed
    /// errors keep them word for word, limits included.
    #[test]
    fn error_texts_name_the_flag_and_the_range() {
        let mut s = TestSpec::default_stream();
        s.parallel = 0;
        assert_eq!(
            s.validate().unwrap_err().to_string(),
            "-P/--parallel must be between 1 and 128 (got 0)"
        );
        let mut s = TestSpec::default_stream();
        s.limit = Limit::Duration { seconds: 1e6 };
        assert_eq!(
            s.validate().unwrap_err().to_string(),
            "-t/--time must be a positive number of seconds up to 86400 (got 1000000)"
        );
        let mut s = TestSpec::default_stream();
        s.knobs.size = 1 << 30;
        assert_eq!(
            s.validate().unwrap_err().to_string(),
            "-l/--length must be between 1 byte and 64 MiB (got 1073741824)"
        );
        let mut s = TestSpec::default_rr(crate::rr::RrMode::UdpRr);
        if let Pattern::Rr(rr) = &mut s.pattern {
            rr.timeout_s = 0.0;
        }
        assert_eq!(
            s.validate().unwrap_err().to_string(),
            "--timeout must be between 1 ms and 60 s (got 0 s)"
        );
    }
}
