//! DCCP's flags, flattened into every verb that runs a test over a
//! transport (`stream`, `rr`, `cbr`, `sweep`): the command line of this
//! transport lives with it, and [`DccpArgs::knobs`] turns them into its
//! knobs.

use clap::Args;
use xferlab_core::dccp::ccid::safeudp;
use xferlab_core::dccp::react::{OnCongestion, ParseOnCongestionError};
use xferlab_core::transport::dccp::{DccpCarrier, DccpKnobs, DccpStack};

#[derive(Debug, Clone, Default, Args)]
pub struct DccpArgs {
    /// DCCP (--dccp): the CCID of both directions, 2 (TCP-like AIMD,
    /// RFC 4341), 3 (TFRC, RFC 4342) or 248 / safeudp (SafeUDP, an
    /// experimental CCID for constant-rate data: docs/safeudp.md).
    /// Default 2.
    #[arg(long, value_parser = parse_ccid, value_name = "N")]
    pub ccid: Option<u8>,
    /// DCCP with --ccid 248: how the sending application answers
    /// SafeUDP's persistent-congestion notices: ignore (the CCID enforces
    /// TFRC's rate after its deadline), step-down (halve the -b rate per
    /// notice) or tfrc (go to the notice's TFRC bound); both climb back
    /// once congestion clears.
    #[arg(long, value_parser = parse_on_congestion, value_name = "POLICY")]
    pub on_congestion: Option<OnCongestion>,
    /// DCCP (--dccp): the service code the client asks for (default
    /// xferlab's, which xferlab servers accept).
    #[arg(long, value_name = "CODE")]
    pub dccp_service: Option<u32>,
    /// DCCP (--dccp): which DCCP runs the test, both ends: `xferlab`
    /// (default; userspace, over UDP, any host) or `kernel` (the kernel's
    /// DCCP sockets: Linux before 6.16 with dccp_ipv4, e.g. the lab VM).
    #[arg(long, value_name = "STACK", value_parser = ["xferlab", "kernel"])]
    pub dccp_stack: Option<String>,
    /// DCCP (--dccp): the server's DCCP when it is not the client's
    /// (interop, with --dccp-carrier ip): `kernel` runs xferlab's client
    /// against a server's kernel DCCP (the lab VM's guest); `xferlab` with
    /// --dccp-stack kernel runs the kernel's client against an xferlab
    /// server's own DCCP over raw IP.
    #[arg(long, value_name = "STACK", value_parser = ["xferlab", "kernel"])]
    pub dccp_server_stack: Option<String>,
    /// DCCP (--dccp): what carries xferlab's own DCCP, both ends: `udp`
    /// (default; RFC 6773, unprivileged) or `ip` (IP protocol 33 on a raw
    /// socket, as root; wire-compatible with kernel DCCP, and only where
    /// the kernel has no DCCP of its own, which would reset it).
    #[arg(long, value_name = "CARRIER", value_parser = ["udp", "ip"])]
    pub dccp_carrier: Option<String>,
    /// DCCP over UDP (xferlab's own stack): send and receive packet by
    /// packet, as the kernel's DCCP does, instead of in trains (--gso:
    /// equal packets that follow each other share one send, coalesced
    /// ones are split on receive), which are that stack's default: 964
    /// against 800-890 Mbit/s on a 1 Gbit/s, 94 ms path, on half the
    /// CPU.
    #[arg(long, conflicts_with = "gso")]
    pub no_gso: bool,
}

impl DccpArgs {
    /// The knobs the flags name, or None when no DCCP flag was given (the
    /// spec's check then says whether the transport takes them).
    pub fn knobs(&self) -> Option<DccpKnobs> {
        let given = self.ccid.is_some()
            || self.dccp_service.is_some()
            || self.dccp_stack.is_some()
            || self.dccp_server_stack.is_some()
            || self.dccp_carrier.is_some()
            || self.on_congestion.is_some();
        given.then(|| {
            let d = DccpKnobs::default();
            let stack = |s: &str| match s {
                "kernel" => DccpStack::Kernel,
                _ => DccpStack::Xferlab,
            };
            DccpKnobs {
                ccid: self.ccid.unwrap_or(d.ccid),
                service: self.dccp_service.unwrap_or(d.service),
                stack: self.dccp_stack.as_deref().map_or(d.stack, stack),
                server_stack: self.dccp_server_stack.as_deref().map(stack),
                carrier: match self.dccp_carrier.as_deref() {
                    Some("ip") => DccpCarrier::Ip,
                    _ => DccpCarrier::Udp,
                },
                on_congestion: self.on_congestion,
            }
        })
    }

    /// Whether a flow batches (`gso`: `--gso` given), over DCCP or not
    /// (`dccp`): xferlab's DCCP over UDP does unless `--no-gso`.
    pub fn gso(&self, dccp: bool, gso: bool) -> Result<bool, String> {
        if self.no_gso && !dccp {
            return Err("--no-gso is for DCCP (its own stack batches by default); UDP sends packet by packet unless --gso".into());
        }
        // DccpKnobs::batches_by_default says where.
        Ok(gso || (dccp && !self.no_gso && self.knobs().unwrap_or_default().batches_by_default()))
    }
}

/// `--ccid`: a number, or `safeudp` for CCID 248. Which numbers the
/// stack has is the spec's check (one line naming them).
fn parse_ccid(s: &str) -> Result<u8, String> {
    if s.trim().eq_ignore_ascii_case("safeudp") {
        return Ok(safeudp::CCID);
    }
    s.trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a CCID: use 2, 3 or 248 (safeudp)"))
}

fn parse_on_congestion(s: &str) -> Result<OnCongestion, String> {
    s.parse().map_err(|e: ParseOnCongestionError| e.to_string())
}
