//! The binary's half of every transport: socket setup, the data path and
//! the per-interval reading of a flow's state, behind [`TransportIo`], and
//! the registry the command line, the patterns and the server find them
//! in.
//!
//! # Adding a transport
//!
//! A transport is one module in the core, one here and a registration,
//! much like iperf3's `struct protocol`:
//!
//! 1. **Its model**, `xferlab_core::transport::<name>`: a unit struct
//!    implementing [`TransportModel`] — label, [`Carrier`], the knobs it
//!    accepts, how iperf3 names it — plus, if it reads state of its own
//!    every interval (TCP_INFO-like: a DCCP CCID's, MPTCP's subflows), the
//!    counters and the sample they become. Register it: a variant of
//!    [`Transport`] and its arm in `Transport::model` (and for own state a
//!    variant of `TransportCounters` and of `TransportSection`, the
//!    result's section, with their arms), all in
//!    `xferlab_core::transport`.
//! 2. **Its driver**, a module here: a unit struct implementing
//!    [`TransportIo`]. Most of it has defaults; what a transport must give
//!    is its [`Transport`], the [`TransportIo::socket`] its flows use and
//!    [`TransportIo::read`] (what a flow's interval carries). It overrides
//!    [`TransportIo::flag`] to be picked on the command line,
//!    [`TransportIo::listener`] when the server's ports must accept its
//!    connections, [`TransportIo::prepare_flow`] to set up its datagram
//!    flows' sockets and [`TransportIo::run`] for a data path other than
//!    its carrier's. Register it in [`REGISTRY`]; flags of its own are a
//!    clap `Args` struct in its module and a field of [`OwnArgs`], state
//!    its flow threads publish for `read` a variant of [`OwnShared`]
//!    ([`TransportIo::own_shared`]).
//!
//! MPTCP is the worked example: `xferlab_core::transport::mptcp` (model,
//! subflow counters and their section) and `mptcp` here (socket, listener,
//! the SOL_MPTCP reads), listed in the two registries.
//!
//! The rest is generic: `stream` (and `cbr`/`sweep` for datagram
//! transports) gets the flag, both control protocols (xferlab's and
//! iperf3's) carry the transport's name, data connections and flows are
//! opened with [`connect`] and [`bind`] and attached with the handshake
//! every pattern has for the carrier, the server's ports listen with
//! [`listener`], the JSON results carry the transport's section and the
//! human output prints it under each interval's row.

pub mod attach;
pub mod datagram;
pub mod dccp;
mod error;
pub mod flow;
mod mptcp;
#[cfg(feature = "quic")]
pub mod quic;
pub mod sizing;
mod tcp;
mod udp;
mod zerocopy;

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use socket2::{Domain, SockRef, Socket};
use xferlab_core::interval::Reading;
pub use xferlab_core::knobs::OwnKnobs;
use xferlab_core::result::{Endpoint, FlowRole};
use xferlab_core::spec::{Knobs, RxStamps, TestSpec};
#[cfg(doc)]
use xferlab_core::transport::TransportModel;
pub use xferlab_core::transport::{Carrier, Transport};

use crate::net::{sockopt, FlowSocket, NetError};
use attach::AttachWait;
use datagram::DatagramWire;
pub use error::SetupError;
use flow::{FlowOutcome, FlowShared, SideFlags};
use sizing::StreamSizes;

/// Every transport this binary drives, in the order the command line
/// lists their flags. The server's ports listen with the first
/// [`TransportIo::listener`] the kernel grants, so a transport whose
/// listener also accepts plain TCP comes before TCP.
pub const REGISTRY: &[&dyn TransportIo] = &[
    &tcp::Tcp,
    &udp::Udp,
    &mptcp::Mptcp,
    &dccp::Dccp,
    #[cfg(feature = "quic")]
    &quic::Quic,
];

/// The flags of the transports that have flags of their own, a field per
/// such transport (its registration), flattened into every verb that runs
/// a test over a transport; each transport's own type turns them into its
/// knobs (`xferlab_core::knobs::OwnKnobs`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OwnArgs {
    #[command(flatten)]
    pub dccp: dccp::args::DccpArgs,
    #[cfg(feature = "quic")]
    #[command(flatten)]
    pub quic: quic::args::QuicArgs,
}

impl OwnArgs {
    /// The knobs these flags name; the spec's check refuses those of a
    /// transport the test does not run over.
    pub fn knobs(&self) -> OwnKnobs {
        OwnKnobs {
            dccp: self.dccp.knobs(),
            #[cfg(feature = "quic")]
            quic: self.quic.knobs(),
            #[cfg(not(feature = "quic"))]
            quic: None,
        }
    }

    /// Whether the flows batch into GSO trains: `--gso`, or the
    /// transport's own default.
    pub fn gso(&self, transport: Transport, gso: bool) -> Result<bool, String> {
        self.dccp.gso(transport == Transport::Dccp, gso)
    }
}

/// What a flow thread publishes for the interval reader beyond its bytes
/// and datagram counters: a variant per transport that reads such state
/// (its registration), made by [`TransportIo::own_shared`].
// One per flow, made once and shared behind its Arc: the size of the
// variants costs nothing, and boxing would add a pointer hop to every
// publication of the data path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Default)]
pub enum OwnShared {
    #[default]
    None,
    Dccp(dccp::DccpShared),
    #[cfg(feature = "quic")]
    Quic(quic::QuicShared),
}

/// The driver of `t`, or why this binary cannot run it over sockets.
pub fn io(t: Transport) -> Result<&'static dyn TransportIo, SetupError> {
    REGISTRY
        .iter()
        .copied()
        .find(|io| io.transport() == t)
        .ok_or_else(|| match t.carrier() {
            Carrier::UsbBulk => SetupError::UsbNotSockets,
            _ => SetupError::NoDriver(t.label()),
        })
}

/// The flag that picks a transport on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag {
    /// `udp` for `--udp`; also the argument's id.
    pub long: &'static str,
    pub short: Option<char>,
    /// The help line.
    pub help: &'static str,
}

impl Flag {
    /// `-u/--udp`, as error messages name it.
    pub fn name(&self) -> String {
        match self.short {
            Some(c) => format!("-{c}/--{}", self.long),
            None => format!("--{}", self.long),
        }
    }
}

/// What a flow thread runs with.
pub struct FlowJob<'a> {
    pub socket: &'a FlowSocket,
    /// Which end of the test runs the flow (a DCCP client connects, its
    /// server listens).
    pub endpoint: Endpoint,
    pub role: FlowRole,
    pub knobs: &'a Knobs,
    /// Bytes to send (`-n`); None: until stopped.
    pub quota: Option<u64>,
    /// Where the thread publishes its counters for [`TransportIo::read`].
    pub shared: &'a FlowShared,
    pub flags: &'a SideFlags,
    /// The header datagrams carry (xferlab's or a stock iperf3 peer's).
    pub wire: DatagramWire,
    /// A byte-stream flow's per-call sizes.
    pub sizes: StreamSizes,
}

/// The binary's half of a transport (see the module docs for the whole
/// recipe). Implemented by a unit struct per transport and listed in
/// [`REGISTRY`]; methods with a default follow the transport's
/// [`Carrier`].
pub trait TransportIo: Sync {
    /// The transport this drives (its model: [`Transport::model`]).
    fn transport(&self) -> Transport;

    /// The command-line flag that picks this transport for `stream` (and
    /// for `cbr`/`sweep` if it carries datagrams); None for the default,
    /// TCP.
    fn flag(&self) -> Option<Flag> {
        None
    }

    /// A new socket for one flow, of the peer's address family, before
    /// the knobs are applied: a byte stream's is connected by [`connect`],
    /// a datagram transport's bound by [`bind`].
    fn socket(&self, domain: Domain) -> Result<Socket, SetupError>;

    /// A listening socket that accepts this transport's connections *and
    /// plain TCP's*, for the server's ports, where it needs one other than
    /// TCP's; None when the kernel offers none. The server takes the first
    /// one in [`REGISTRY`] order.
    fn listener(&self, _domain: Domain) -> Option<Socket> {
        None
    }

    /// What this host must offer for `knobs` (a kernel module, a
    /// privilege), checked before a test starts so that its absence is
    /// one line naming the fix.
    fn check(&self, _knobs: &Knobs) -> Result<(), SetupError> {
        Ok(())
    }

    /// For a transport whose client flows present their attach record
    /// inside their own connection (xferlab's DCCP against a kernel DCCP
    /// server, which reads it as the connection's first message): sets
    /// up that connection on `sock` (bound and connected to the server's
    /// flow port), presents `hello` and checks the answer, within
    /// `timeout`. None: the record goes in a datagram first.
    fn attach_in_band(
        &self,
        _spec: &TestSpec,
        _sock: &UdpSocket,
        _hello: &[u8],
        _timeout: Duration,
    ) -> Option<Result<(), SetupError>> {
        None
    }

    /// A client flow's datagram socket connected to the server's flow
    /// port `to`, for a transport whose flow sockets connect there
    /// themselves (kernel DCCP); None: bound and connected by [`bind`].
    fn connect_datagram(
        &self,
        _spec: &TestSpec,
        _to: SocketAddr,
        _timeout: Duration,
    ) -> Option<Result<UdpSocket, SetupError>> {
        None
    }

    /// The server's ports for a session's datagram flows, for a
    /// transport that listens for them itself (kernel DCCP: a listener
    /// that hands each flow to `wait.tx` once its attach record came,
    /// under `wait`'s rules); None: one bound UDP socket per flow.
    fn listen_flows(
        &self,
        _spec: &TestSpec,
        _local: IpAddr,
        _wait: &AttachWait,
    ) -> Option<Result<Vec<u16>, SetupError>> {
        None
    }

    /// Sets up a datagram flow's socket for its `role` at either end,
    /// before the side reads its settings back, so the result's `socket`
    /// section records what the flow runs with. Returns where a receiver
    /// takes arrival times from, for transports whose receivers stamp
    /// them through the carrier's path (UDP's); None for the rest.
    fn prepare_flow(&self, _sock: &UdpSocket, _role: FlowRole, _knobs: &Knobs) -> Option<RxStamps> {
        None
    }

    /// Applies the knobs to a flow socket the server was handed (the
    /// accepted end of a data connection; a datagram socket got them when
    /// [`bind`] made it).
    fn accepted(&self, socket: &FlowSocket, knobs: &Knobs) -> Result<(), SetupError> {
        match socket {
            FlowSocket::Stream(s) => {
                sockopt::apply(&SockRef::from(s), knobs, sockopt::SocketEnd::Accepted)?;
                Ok(())
            }
            FlowSocket::Datagram(_) => Ok(()),
        }
    }

    /// The slot in [`FlowShared`] where this transport's flow threads
    /// publish state of their own for [`TransportIo::read`], for a test
    /// with `knobs` (what the flow publishes may depend on them: a QUIC
    /// flow with -b counts datagrams, one without moves streams).
    fn own_shared(&self, _knobs: &Knobs) -> OwnShared {
        OwnShared::None
    }

    /// The flow's state at an interval boundary: its byte count, and what
    /// the transport reads of its own (TCP_INFO, the datagram counters, a
    /// CCID's or the subflows' state). Called once per interval per flow
    /// from the side's event loop, never on the data path.
    fn read(&self, socket: &FlowSocket, role: FlowRole, shared: &FlowShared) -> Reading;

    /// The data path: one flow thread's whole life, until its quota, the
    /// stop or abort flags, or the peer end it. By default the carrier's
    /// (write/read on a byte stream, paced datagrams).
    fn run(&self, job: FlowJob<'_>) -> FlowOutcome {
        let k = job.knobs;
        match (job.socket, job.role) {
            (FlowSocket::Stream(s), FlowRole::Sender) => flow::send(
                s,
                job.sizes.write_size,
                k.send_mode,
                job.quota,
                job.shared,
                job.flags,
            ),
            (FlowSocket::Stream(s), FlowRole::Receiver) => {
                flow::receive(s, job.sizes, k.recv_mode, job.shared, job.flags)
            }
            (FlowSocket::Datagram(s), FlowRole::Sender) => {
                datagram::send(s, k, job.quota, job.shared, job.flags, job.wire)
            }
            (FlowSocket::Datagram(s), FlowRole::Receiver) => {
                datagram::receive(s, k, job.shared, job.flags, job.wire)
            }
        }
    }
}

/// Opens a data connection of `spec`'s byte-stream transport to `addr`,
/// with its knobs applied before the handshake (buffers shape the window
/// scale; the MSS goes into the SYN).
pub fn connect(
    spec: &TestSpec,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<TcpStream, SetupError> {
    let sock = io(spec.transport)?.socket(Domain::for_address(addr))?;
    sockopt::apply(&sock, &spec.knobs, sockopt::SocketEnd::Connecting)?;
    sock.connect_timeout(&addr.into(), timeout)
        .map_err(|e| NetError::connect(addr, e))?;
    Ok(sock.into())
}

/// A socket of datagram transport `t` bound to `addr`, with the knobs
/// applied (buffers, TOS, don't-fragment). With `shared_port`,
/// SO_REUSEADDR: an iperf3 server binds one socket per stream to the same
/// port and connects each to its client, so the kernel delivers every
/// stream to its own socket.
pub fn bind(
    t: Transport,
    addr: SocketAddr,
    knobs: &Knobs,
    shared_port: bool,
) -> Result<UdpSocket, SetupError> {
    let sock = io(t)?.socket(Domain::for_address(addr))?;
    if shared_port {
        sock.set_reuse_address(true)
            .map_err(|err| SetupError::ReuseAddr {
                transport: t.label(),
                err,
            })?;
    }
    // A transport with its own congestion controller (QUIC) takes -C
    // itself; the kernel's TCP_CONGESTION means nothing on its socket.
    let own_cc;
    let knobs = if knobs.congestion.is_some() && t.model().own_congestion() {
        own_cc = Knobs {
            congestion: None,
            ..knobs.clone()
        };
        &own_cc
    } else {
        knobs
    };
    sockopt::apply(&sock, knobs, sockopt::SocketEnd::Accepted)?;
    if knobs.dont_fragment {
        sockopt::forbid_fragmentation(&sock, addr.is_ipv6())?;
    }
    sock.bind(&addr.into()).map_err(|err| SetupError::Bind {
        transport: t.label(),
        addr,
        err,
    })?;
    Ok(sock.into())
}

/// A listening socket for the server's ports (not yet bound): the first
/// transport listener the kernel grants, else plain TCP.
pub fn listener(domain: Domain) -> io::Result<Socket> {
    match REGISTRY.iter().find_map(|io| io.listener(domain)) {
        Some(s) => Ok(s),
        None => Socket::new(domain, socket2::Type::STREAM, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_socket_transport_has_one_driver_and_flags_are_distinct() {
        for t in Transport::ALL {
            let found = REGISTRY.iter().filter(|io| io.transport() == *t).count();
            match t.carrier() {
                Carrier::UsbBulk => {
                    assert!(io(*t).is_err_and(|e| e.to_string().contains("xferlab usb")))
                }
                // A build without the `quic` feature has no QUIC driver,
                // and says so.
                _ if cfg!(not(feature = "quic")) && *t == Transport::Quic => {
                    assert!(io(*t).is_err_and(|e| e.to_string().contains("no driver for QUIC")))
                }
                _ => assert_eq!(found, 1, "{t:?}"),
            }
        }
        let flags: Vec<Flag> = REGISTRY.iter().filter_map(|io| io.flag()).collect();
        for (i, f) in flags.iter().enumerate() {
            assert!(flags[..i]
                .iter()
                .all(|o| o.long != f.long && (o.short.is_none() || o.short != f.short)));
        }
    }
}
