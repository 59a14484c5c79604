//! The knobs of a test: those every socket transport shares ([`Knobs`])
//! and each transport's own ([`OwnKnobs`]), their bounds, and what a
//! transport's model refuses in them ([`KnobError`]). Below the
//! transports' models, which check them, and the spec, which carries
//! them (and re-exports all of this).

use serde::{Deserialize, Serialize};

/// Upper bounds of the knobs (the spec's [`crate::spec::limits`] adds the
/// test's own and re-exports these).
pub mod limits {
    /// Bytes per write/read call (`-l`).
    pub const MAX_WRITE_SIZE: u64 = 64 << 20;
    /// Bytes per read call (`--read-size`) and wake-up batch
    /// (`--rcvlowat`).
    pub const MAX_READ_SIZE: u64 = 64 << 20;
    /// Socket buffer request (`-w`).
    pub const MAX_SOCKET_BUFFER: u64 = 1 << 30;
    /// Congestion-control names are at most TCP_CA_NAME_MAX-1 bytes.
    pub const MAX_CC_NAME: usize = 15;
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
    /// buffer with `gso` (`--batch`). Datagram transports.
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub batch: u32,
    /// Coalesce datagrams into one buffer: UDP_SEGMENT on send, UDP_GRO
    /// on receive (`--gso`). Datagram transports over UDP sockets (a
    /// transport's own help says how it forms its trains).
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

/// The knobs of the transports that have knobs of their own, a field per
/// such transport (the lower half of the transport registry, next to the
/// knob types it names). A spec's knobs hold them flat, each under its
/// transport's name next to the shared ones (`"dccp": {...}`); the
/// transport's model checks their values
/// (`TransportModel::check_knobs`), the registry their owner
/// (`transport::check_owner`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OwnKnobs {
    /// DCCP's CCID, service code and stack (`--ccid`, `--dccp-service`,
    /// `--dccp-stack`); None: CCID2, xferlab's service code, xferlab's
    /// stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dccp: Option<crate::dccp::knobs::DccpKnobs>,
    /// QUIC's streams per connection (`--streams`); None: one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic: Option<QuicKnobs>,
}

/// The congestion controllers QUIC's `-C` picks from (quinn-proto's).
pub const CONGESTION_CONTROLLERS: &[&str] = &["cubic", "newreno", "bbr"];

/// Most concurrent streams per QUIC connection (`--streams`).
pub const MAX_QUIC_STREAMS: u32 = 1024;

/// QUIC's own knobs (the model is `transport::quic`; they sit here,
/// below it, as DCCP's sit in `dccp::knobs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QuicKnobs {
    /// Concurrent unidirectional streams each flow's connection moves
    /// its bytes on.
    #[schemars(range(min = 1, max = 1024))]
    pub streams: u32,
}

impl Default for QuicKnobs {
    fn default() -> Self {
        QuicKnobs { streams: 1 }
    }
}

impl QuicKnobs {
    pub fn check(&self) -> Result<(), QuicKnobError> {
        if !(1..=MAX_QUIC_STREAMS).contains(&self.streams) {
            return Err(QuicKnobError::Streams(self.streams));
        }
        Ok(())
    }
}

/// What QUIC's model refuses.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuicKnobError {
    #[error("--streams must be between 1 and {MAX_QUIC_STREAMS} (got {0})")]
    Streams(u32),
    #[error("-C/--congestion over QUIC is one of quinn-proto's controllers: cubic, newreno or bbr (got '{0}')")]
    Congestion(String),
    #[error(
        "-l/--length: a QUIC DATAGRAM frame (with -b) carries {min} to {max} bytes (got {got})"
    )]
    DatagramLength { got: u64, min: u64, max: u64 },
    #[error(
        "--fq-rate caps QUIC streams; with -b (DATAGRAM frames) the rate is -b's: leave out one"
    )]
    PacingDatagrams,
    #[error("-M, -N, -Z, --skip-rx-copy, --rx-zerocopy, --read-size, --rcvlowat, --read-fill, --rx-stamps, --gso and --dont-fragment do not apply to QUIC (--quic): QUIC paces and batches its own packets; leave them out")]
    OtherOptions,
    #[error("--streams is for QUIC: add --quic")]
    WithoutQuic,
}

/// What a transport's model refuses in a test's knobs
/// (`TransportModel::check_knobs`): the checks several transports share,
/// and a variant per transport with checks of its own, whose type says
/// the line. Each message names the flag to change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KnobError {
    #[error("-l/--length: a UDP datagram must be between {min} and {max} bytes (got {0})", min = limits::MIN_DATAGRAM, max = limits::MAX_DATAGRAM)]
    DatagramLength(u64),
    #[error("--batch must be between 1 and {max} datagrams (got {0})", max = limits::MAX_BATCH)]
    Batch(u32),
    #[error("--skip-rx-copy is for TCP: every UDP datagram's header is read")]
    SkipRxCopyOnUdp,
    #[error("-C, -M, -N, --fq-rate, -Z, --rx-zerocopy, --read-size, --rcvlowat and --read-fill are TCP options; pace UDP with -b")]
    TcpOptionsOnUdp,
    #[error("-b/--bitrate paces UDP; for TCP cap the rate with --fq-rate")]
    BitrateOnTcp,
    #[error("--gso, --batch, --dont-fragment and --rx-stamps apply to UDP (-u)")]
    UdpOptionsOnTcp,
    #[error("--fq-rate (and -b against an iperf3 server) cannot pace MPTCP: Linux has no SO_MAX_PACING_RATE for MPTCP sockets; leave out --mptcp or the rate")]
    PacingOnMptcp,
    #[error(transparent)]
    Dccp(#[from] crate::dccp::knobs::KnobError),
    #[error(transparent)]
    Quic(#[from] QuicKnobError),
}
