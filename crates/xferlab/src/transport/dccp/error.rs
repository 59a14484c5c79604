//! Why a DCCP socket, connection or listener could not be set up: one line
//! naming the cause and, where there is one, the flag or command that
//! fixes it.

use std::io;
use std::net::{IpAddr, SocketAddr};

use crate::net::NetError;
use crate::transport::SetupError;

#[derive(Debug, thiserror::Error)]
pub enum DccpError {
    #[error("--dccp-stack kernel: this kernel ({release}) has no DCCP sockets ({err}); Linux removed DCCP in 6.16 and older ones need `modprobe dccp_ipv4`: use --dccp-stack xferlab, or run kernel DCCP in the lab VM (lab/vm/run)")]
    NoKernelDccp { release: String, err: io::Error },
    #[error("cannot set DCCP service code {service}: {err}")]
    ServiceCode { service: u32, err: io::Error },
    #[error("--ccid {ccid}: this kernel's DCCP refuses it ({err})")]
    CcidRefused { ccid: u8, err: io::Error },
    #[error("the DCCP server at {to} refused service code {service} (xferlab's servers accept {accepted}): leave out --dccp-service")]
    ServiceRefused {
        to: SocketAddr,
        service: u32,
        accepted: u32,
    },
    #[error("the DCCP server at {to} refused CCID {ccid} (its kernel lacks it): try --ccid {}", if *.ccid == 2 { 3 } else { 2 })]
    CcidUnsupported { to: SocketAddr, ccid: u8 },
    #[error("the DCCP port {} at {} is closed: is the server's kernel DCCP up (modprobe dccp_ipv4)?", .to.port(), .to.ip())]
    PortClosed { to: SocketAddr },
    #[error("-l {size}: the kernel's DCCP connection to {to} carries at most {mps} bytes per packet (its path MTU less headers): lower -l")]
    PacketTooLarge { size: u64, to: SocketAddr, mps: u32 },
    #[error("cannot set the DCCP listener's service code: {0}")]
    ListenerService(io::Error),
    #[error("cannot bind a DCCP listener to {local}: {err}")]
    ListenerBind { local: IpAddr, err: io::Error },
    #[error("cannot listen for DCCP on {local}: {err}")]
    Listen { local: IpAddr, err: io::Error },
    #[error("cannot bind a DCCP flow port on {local}: {err}")]
    FlowPort { local: IpAddr, err: io::Error },
    #[error("--dccp-carrier ip needs a raw socket for IP protocol 33 ({0}): run as root (or `setcap cap_net_raw+ep` on xferlab), or use --dccp-carrier udp")]
    RawNotAllowed(io::Error),
    #[error("the raw DCCP socket (IP protocol 33): cannot {what}: {err}")]
    Raw { what: String, err: io::Error },
    #[error("a DCCP flow's socket: cannot {what}: {err}")]
    Flow { what: &'static str, err: io::Error },
    #[error("the server refused the flow: {0}")]
    FlowRefused(&'static str),
    #[error("the server's DCCP sent an empty message where the answer to the flow's attach record belongs")]
    EmptyAnswer,
    /// The attach failed the way a running flow fails: the reason its
    /// result would record.
    #[error("{0}")]
    AttachEnded(String),
    #[error("the DCCP server at {0} closed the connection before answering the attach")]
    ClosedBeforeAnswer(SocketAddr),
    #[error("no answer to the attach record from the kernel DCCP server at {peer} within {seconds:.0} s")]
    NoAnswer { peer: SocketAddr, seconds: f64 },
    #[error("cannot start a thread: {0}")]
    Thread(io::Error),
    #[error(transparent)]
    Sockopt(#[from] crate::net::sockopt::SockoptError),
    #[error(transparent)]
    Net(#[from] NetError),
}

impl From<DccpError> for SetupError {
    fn from(e: DccpError) -> Self {
        SetupError::Own(Box::new(e))
    }
}
