//! What an rr test asks for ([`RrSpec`], the settings of a
//! [`Pattern::Rr`]), and its checks. The pattern's bookkeeping is
//! `crate::rr`'s.

use serde::{Deserialize, Serialize};

use super::{Affinity, Pattern, TestSpec, Transport};

/// Upper bounds for rr tests.
pub mod limits {
    /// Request/response flows (`-F`): each is a socket on both ends.
    pub const MAX_FLOWS: u32 = 8192;
    /// Transactions outstanding per flow (`--depth`).
    pub const MAX_DEPTH: u32 = 1024;
    /// Request and response size (`-r`, `-s`), TCP.
    pub const MAX_SIZE: u64 = 16 << 20;
    /// Per-transaction timeout (`--timeout`).
    pub const MIN_TIMEOUT_S: f64 = 0.001;
    pub const MAX_TIMEOUT_S: f64 = 60.0;
    /// Background stream flows (`--background`).
    pub const MAX_BACKGROUND: u32 = 128;
}

/// How one transaction is carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RrMode {
    /// A persistent TCP connection per flow (netperf TCP_RR).
    TcpRr,
    /// A new TCP connection per transaction: connect, request, response,
    /// close (netperf TCP_CRR).
    TcpCrr,
    /// One datagram each way, with a sequence number and a timeout.
    UdpRr,
    /// A long-lived QUIC connection per flow, a bidirectional stream per
    /// transaction: open, request, FIN; response to FIN.
    QuicRr,
    /// A new QUIC connection per transaction (a full handshake each, no
    /// resumption or 0-RTT, as TCP CRR pays its SYN), one stream on it,
    /// then a close: the CRR analogue.
    QuicCrr,
}

impl RrMode {
    pub fn label(self) -> &'static str {
        match self {
            RrMode::TcpRr => "tcp-rr",
            RrMode::TcpCrr => "tcp-crr",
            RrMode::UdpRr => "udp-rr",
            RrMode::QuicRr => "quic-rr",
            RrMode::QuicCrr => "quic-crr",
        }
    }

    pub fn transport(self) -> Transport {
        match self {
            RrMode::UdpRr => Transport::Udp,
            RrMode::QuicRr | RrMode::QuicCrr => Transport::Quic,
            RrMode::TcpRr | RrMode::TcpCrr => Transport::Tcp,
        }
    }

    /// A connection per transaction (tcp-crr, quic-crr): one request
    /// outstanding, a timeout, a connect time per transaction.
    pub fn per_connection(self) -> bool {
        matches!(self, RrMode::TcpCrr | RrMode::QuicCrr)
    }

    /// Transactions time out (`--timeout`): datagrams may be lost, and a
    /// connection per transaction may never be answered; a long-lived
    /// reliable connection delivers or fails as a whole.
    pub fn times_out(self) -> bool {
        !matches!(self, RrMode::TcpRr | RrMode::QuicRr)
    }
}

/// The settings of an rr test (its [`Pattern::Rr`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RrSpec {
    pub mode: RrMode,
    /// Bytes per request (`-r`). UDP datagrams are at least
    /// [`crate::rr::wire::UDP_HEADER_LEN`] bytes whatever this says.
    pub request_size: u64,
    /// Bytes per response (`-s`).
    pub response_size: u64,
    /// Transactions outstanding per flow (1 = ping-pong).
    pub depth: u32,
    /// Request/response flows.
    pub flows: u32,
    /// A transaction without its response after this long is counted as
    /// timed out and the flow moves on (UDP, and CRR connections).
    pub timeout_s: f64,
    /// Diagnostic: the server ignores the Nth request (1-based) of every
    /// UDP flow, to prove that a lost datagram does not stall a flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_request: Option<u64>,
    /// How both ends wait for the peer's next message (`--wait`).
    #[serde(default, skip_serializing_if = "RrWait::is_default")]
    pub wait: RrWait,
}

/// How a flow's thread waits for the peer's next message. This is part
/// of what is measured: on loopback the wake-up of a sleeping thread is
/// most of a transaction's cost, so each choice gives other figures.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum RrWait {
    /// `Read` when both ends are pinned to one CPU over loopback,
    /// `Epoll` otherwise (see [`RrWait::resolve`]).
    #[default]
    Auto,
    /// Sleep in epoll_wait(), then read what is ready: how event-driven
    /// applications wait, the same for one flow and for thousands.
    Epoll,
    /// A thread with a single ping-pong TCP RR flow (depth 1, request
    /// and response up to 4 KiB) sleeps in read() itself, as netperf,
    /// sockperf and iperf2 do: one system call less per transaction.
    /// Other threads wait as with `Epoll`.
    Read,
    /// Busy-poll: spin on the socket (one ping-pong flow per thread) or
    /// on epoll, without sleeping: lower latency, a CPU kept busy.
    Spin,
}

impl RrWait {
    fn is_default(&self) -> bool {
        *self == RrWait::Auto
    }

    /// The wait an end uses, `Auto` decided. Two ends pinned to the same
    /// CPU of one machine take turns on it: a wake-up is a plain context
    /// switch, and epoll's extra system call and bookkeeping cost about a
    /// fifth of a transaction (measured on loopback). On different CPUs a reader
    /// sleeping in read() is woken while the writer still holds the
    /// socket lock and then waits for it; waking from epoll_wait() first
    /// returns to user space, by when the lock is free — faster there.
    pub fn resolve(self, affinity: &Affinity, loopback: bool) -> RrWait {
        match self {
            RrWait::Auto => {
                let one_cpu = affinity.client.is_some() && affinity.client == affinity.server;
                if loopback && one_cpu {
                    RrWait::Read
                } else {
                    RrWait::Epoll
                }
            }
            w => w,
        }
    }
}

impl RrSpec {
    /// 1-byte requests and responses, one flow, depth 1, 1 s timeout.
    pub fn new(mode: RrMode) -> Self {
        RrSpec {
            mode,
            request_size: 1,
            response_size: 1,
            depth: 1,
            flows: 1,
            timeout_s: 1.0,
            drop_request: None,
            wait: RrWait::Epoll,
        }
    }

    pub fn validate(&self, spec: &TestSpec) -> Result<(), RrSpecError> {
        use limits::*;
        if spec.transport != self.mode.transport() {
            return Err(RrSpecError::ModeTransport {
                mode: self.mode.label(),
                transport: self.mode.transport().label(),
            });
        }
        if self.flows == 0 || self.flows > MAX_FLOWS {
            return Err(RrSpecError::Flows(self.flows));
        }
        if self.depth == 0 || self.depth > MAX_DEPTH {
            return Err(RrSpecError::Depth(self.depth));
        }
        let max = if self.mode == RrMode::UdpRr {
            super::limits::MAX_DATAGRAM
        } else {
            MAX_SIZE
        };
        for (flag, got) in [
            ("-r/--request-size", self.request_size),
            ("-s/--response-size", self.response_size),
        ] {
            if got == 0 || got > max {
                return Err(RrSpecError::Size {
                    flag,
                    max,
                    mode: self.mode.label(),
                    got,
                });
            }
        }
        if !(self.timeout_s.is_finite()
            && (MIN_TIMEOUT_S..=MAX_TIMEOUT_S).contains(&self.timeout_s))
        {
            return Err(RrSpecError::Timeout(self.timeout_s));
        }
        if spec.parallel > MAX_BACKGROUND {
            return Err(RrSpecError::Background(spec.parallel));
        }
        if self.mode.per_connection() && self.depth != 1 {
            return Err(RrSpecError::DepthOnCrr);
        }
        if self.drop_request == Some(0) {
            return Err(RrSpecError::DropRequestZero);
        }
        if self.drop_request.is_some() && self.mode != RrMode::UdpRr {
            return Err(RrSpecError::DropRequestNotUdp);
        }
        if !matches!(spec.limit, super::Limit::Duration { .. }) {
            return Err(RrSpecError::ByteLimit);
        }
        Ok(())
    }
}

/// Why the request/response settings of a test cannot run; the message
/// names the flag and the accepted range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RrSpecError {
    #[error("--mode {mode} runs over {transport}")]
    ModeTransport {
        mode: &'static str,
        transport: &'static str,
    },
    #[error("-F/--flows must be between 1 and {max} (got {0})", max = limits::MAX_FLOWS)]
    Flows(u32),
    #[error("--depth must be between 1 and {max} (got {0})", max = limits::MAX_DEPTH)]
    Depth(u32),
    #[error("{flag} must be between 1 byte and {max} bytes for {mode} (got {got})")]
    Size {
        flag: &'static str,
        max: u64,
        mode: &'static str,
        got: u64,
    },
    #[error("--timeout must be between {min} ms and {max} s (got {0} s)", min = limits::MIN_TIMEOUT_S * 1e3, max = limits::MAX_TIMEOUT_S)]
    Timeout(f64),
    #[error("--background must be between 0 and {max} stream flows (got {0})", max = limits::MAX_BACKGROUND)]
    Background(u32),
    #[error("--depth applies to tcp-rr, udp-rr and quic-rr; tcp-crr and quic-crr carry one transaction per connection (use -F for concurrency)")]
    DepthOnCrr,
    #[error("--drop-request counts from 1 (the first request)")]
    DropRequestZero,
    #[error("--drop-request is a udp-rr diagnostic")]
    DropRequestNotUdp,
    #[error("rr tests run for a time (-t), not a byte count (-n)")]
    ByteLimit,
}

impl TestSpec {
    /// The defaults of an rr test: `mode`, 1-byte requests and responses,
    /// depth 1, one flow, 10 s, no background flows.
    pub fn default_rr(mode: RrMode) -> Self {
        let mut s = TestSpec::default_stream();
        s.pattern = Pattern::Rr(RrSpec::new(mode));
        s.transport = mode.transport();
        s.parallel = 0;
        s
    }

    /// The stream test the background flows of an rr test run: TCP,
    /// in `direction`, `parallel` flows (per direction), the same knobs and clock.
    pub fn background_spec(&self) -> TestSpec {
        let mut s = self.clone();
        s.pattern = Pattern::Stream;
        s.transport = Transport::Tcp;
        s
    }
}
