//! DCCP's knobs as a test spec carries them (`"dccp": {...}` among the
//! knobs): which stack, CCID, service code and carrier, and what does not
//! fit together. Here, with the protocol, below the spec and the
//! transports' models that check them (`transport::dccp` re-exports them).

use serde::{Deserialize, Serialize};

use super::react::OnCongestion;

/// The service code xferlab's DCCP servers accept (RFC 4340 sec. 8.1.2):
/// "XFLB" in ASCII, as a port names a service.
pub const SERVICE_CODE: u32 = u32::from_be_bytes(*b"XFLB");
/// Largest application datagram: the UDP payload limit less DCCP's
/// longest header (Response/Reset, 28 bytes) and its largest options area
/// (1020 bytes, RFC 4340 sec. 5.8).
pub const MAX_PAYLOAD: u64 = 65_507 - 28 - 1020;

/// What DCCP's model refuses in a spec's knobs, one line each that names
/// the flag to change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KnobError {
    /// The length `got` outside `min` (the datagram header every
    /// datagram transport's spec limits) to [`MAX_PAYLOAD`].
    #[error(
        "-l/--length: a DCCP datagram must be between {min} and {MAX_PAYLOAD} bytes (got {got})"
    )]
    Length { got: u64, min: u64 },
    #[error("--ccid {0}: xferlab's DCCP has CCID 2 (TCP-like), CCID 3 (TFRC) and CCID 248 (SafeUDP); use --ccid 2, 3 or 248")]
    Ccid(u8),
    #[error("--ccid, --dccp-service, --dccp-stack, --dccp-server-stack, --dccp-carrier and --on-congestion apply to DCCP (--dccp)")]
    WithoutDccp,
    #[error("--on-congestion answers SafeUDP's congestion notifications (got --ccid {0}): use --ccid 248")]
    OnCongestionCcid(u8),
    #[error("{0}")]
    Combination(&'static str),
    #[error("--on-congestion lowers a constant rate: add -b RATE")]
    OnCongestionRate,
    #[error("-C, -M, -N, --fq-rate, -Z, --skip-rx-copy, --rx-zerocopy, --read-size, --rcvlowat, --read-fill and --rx-stamps do not apply to DCCP: its CCID (--ccid) paces it and -b is the application's offer")]
    OtherOptions,
    #[error("--gso batches xferlab's own DCCP over UDP; the kernel's DCCP and --dccp-carrier ip send packet by packet: leave out --gso")]
    Gso,
}

/// Which DCCP runs a flow (`--dccp-stack`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum DccpStack {
    /// xferlab's own, in userspace ([`crate::dccp`]).
    #[default]
    Xferlab,
    /// The kernel's SOCK_DCCP sockets (Linux before 6.16 with dccp_ipv4).
    Kernel,
}

impl DccpStack {
    pub fn label(self) -> &'static str {
        match self {
            DccpStack::Xferlab => "xferlab",
            DccpStack::Kernel => "kernel",
        }
    }
}

/// What carries xferlab's own DCCP (`--dccp-carrier`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum DccpCarrier {
    /// UDP encapsulation (RFC 6773): unprivileged, any host.
    #[default]
    Udp,
    /// IP protocol 33 on a raw socket, as the kernel's DCCP (needs
    /// CAP_NET_RAW; wire-compatible with kernel DCCP).
    Ip,
}

/// DCCP's own knobs (`--ccid`, `--dccp-service`, `--dccp-stack`,
/// `--on-congestion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DccpKnobs {
    /// The CCID of both half-connections: 2 (TCP-like, RFC 4341), 3
    /// (TFRC, RFC 4342) or 248 (SafeUDP, experimental; docs/safeudp.md).
    pub ccid: u8,
    /// The service code the client asks for; xferlab's servers accept
    /// only [`SERVICE_CODE`].
    pub service: u32,
    /// Which DCCP the client runs, and the server unless `server_stack`
    /// says otherwise.
    #[serde(default)]
    pub stack: DccpStack,
    /// The server's DCCP when it is not the client's (interop, over raw
    /// IP): xferlab's client against the kernel's DCCP, or the kernel's
    /// client against xferlab's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_stack: Option<DccpStack>,
    /// What carries xferlab's own DCCP (both ends; with a kernel client,
    /// the server's).
    #[serde(default)]
    pub carrier: DccpCarrier,
    /// SafeUDP only: how the sending application answers congestion
    /// notifications (its -b rate is the nominal rate); None sends at -b
    /// whatever the CCID says, as `ignore`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_congestion: Option<OnCongestion>,
}

impl Default for DccpKnobs {
    fn default() -> Self {
        DccpKnobs {
            ccid: 2,
            service: SERVICE_CODE,
            stack: DccpStack::Xferlab,
            server_stack: None,
            carrier: DccpCarrier::Udp,
            on_congestion: None,
        }
    }
}

impl DccpKnobs {
    /// The DCCP the server runs.
    pub fn server(&self) -> DccpStack {
        self.server_stack.unwrap_or(self.stack)
    }

    /// Whether packets go in trains (GSO) unless `--no-gso`: xferlab's own
    /// DCCP over UDP at both ends. The packets on the wire are the same,
    /// and without trains CCID2 stayed at 800-890 Mbit/s on the 1 Gbit/s,
    /// 94 ms lab path at 20 % of a core, with them 964 at 9 % (docs/dccp.md,
    /// "Batching with --gso").
    pub fn batches_by_default(&self) -> bool {
        self.stack == DccpStack::Xferlab
            && self.server() == DccpStack::Xferlab
            && self.carrier == DccpCarrier::Udp
    }

    /// Whether xferlab's client stack presents its flows' attach records
    /// inside the DCCP connection (a kernel DCCP server reads it as the
    /// first message) instead of in a UDP datagram before it. (A kernel
    /// client's socket carries the record as its first message anyway.)
    pub fn attach_in_band(&self) -> bool {
        self.stack == DccpStack::Xferlab && self.server() == DccpStack::Kernel
    }

    /// Whether xferlab's server stack takes its flows' attach records
    /// inside the DCCP connection: a kernel DCCP client's, over raw IP.
    pub fn accept_in_band(&self) -> bool {
        self.stack == DccpStack::Kernel && self.server() == DccpStack::Xferlab
    }

    /// What does not fit together, as the flag to change.
    pub fn check(&self) -> Result<(), KnobError> {
        use DccpStack::{Kernel, Xferlab};
        match (self.stack, self.server(), self.carrier) {
            (Kernel, Kernel, DccpCarrier::Ip) => Err(KnobError::Combination(
                "--dccp-carrier ip carries xferlab's own DCCP; the kernel's runs over IP anyway: leave out --dccp-carrier",
            )),
            (Kernel, Xferlab, DccpCarrier::Udp) => Err(KnobError::Combination(
                "kernel DCCP has no UDP encapsulation: add --dccp-carrier ip (the server's xferlab DCCP over raw IP, as root) to reach an xferlab DCCP server",
            )),
            (Xferlab, Kernel, DccpCarrier::Udp) => Err(KnobError::Combination(
                "kernel DCCP has no UDP encapsulation: add --dccp-carrier ip (raw IP, as root) to reach a kernel DCCP server",
            )),
            _ => Ok(()),
        }
    }
}
