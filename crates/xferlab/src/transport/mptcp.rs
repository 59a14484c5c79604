//! MPTCP's driver: IPPROTO_MPTCP sockets, picked with `-m/--mptcp` (as
//! iperf3's `-m`), and a listener for the server's ports that takes MPTCP
//! and plain TCP alike. Its data path is the byte stream's. Every interval
//! it reads the connection's MPTCP_INFO and each subflow's addresses and
//! TCP_INFO (MPTCP_SUBFLOW_ADDRS, MPTCP_TCPINFO, Linux >= 5.16) on both
//! ends; senders also read the MPTCP socket's own TCP_INFO, which fills
//! the `tcp` columns as for TCP.

use std::io;
use std::mem::{offset_of, size_of};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;

use socket2::{Domain, Protocol, Socket, Type};
use xferlab_core::interval::Reading;
use xferlab_core::result::FlowRole;
use xferlab_core::transport::mptcp::{MptcpCounters, MptcpInfo, SubflowCounters};
use xferlab_core::transport::TransportCounters;
use xferlab_sys::sockopt::Get;

use super::flow::FlowShared;
use super::{tcp, Flag, FlowSocket, SetupError, Transport, TransportIo};
use crate::sys::tcp_info::{self, TCP_INFO_LEN};

pub struct Mptcp;

impl TransportIo for Mptcp {
    fn transport(&self) -> Transport {
        Transport::Mptcp
    }

    fn flag(&self) -> Option<Flag> {
        Some(Flag {
            long: "mptcp",
            short: Some('m'),
            help: "MPTCP instead of TCP (as iperf3 -m): data connections are multipath; every interval shows the subflows and their TCP_INFO.",
        })
    }

    fn socket(&self, domain: Domain) -> Result<Socket, SetupError> {
        Socket::new(domain, Type::STREAM, Some(Protocol::MPTCP)).map_err(SetupError::NoMptcp)
    }

    /// An MPTCP listener accepts plain TCP connections as plain TCP
    /// sockets (SO_PROTOCOL 6), so TCP tests through it keep TCP's data
    /// path; only MP_CAPABLE connections become MPTCP sockets.
    fn listener(&self, domain: Domain) -> Option<Socket> {
        Socket::new(domain, Type::STREAM, Some(Protocol::MPTCP)).ok()
    }

    fn read(&self, socket: &FlowSocket, role: FlowRole, shared: &FlowShared) -> Reading {
        Reading {
            bytes: shared.bytes.load(Ordering::Relaxed),
            tcp: tcp::sender_tcp_info(socket, role),
            transport: state(socket.as_fd()).map(TransportCounters::Mptcp),
            ..Reading::default()
        }
    }
}

// From linux/mptcp.h (libc does not have it).
const MPTCP_INFO_FLAG_FALLBACK: u32 = 1;
/// Subflows read per interval. Linux caps a connection's extra subflows
/// at 8 (MPTCP_PM_ADDR_MAX); more are left out of the list.
const MAX_SUBFLOWS: usize = 16;

/// Mirror of `struct mptcp_info` (Linux 6.11+), for its offsets. Kernels
/// before 6.5 write only the first 48 bytes (up to `csum_enabled`), so
/// every field is read only where the kernel wrote it.
#[repr(C)]
#[allow(dead_code)]
struct MptcpInfoRaw {
    subflows: u8,
    add_addr_signal: u8,
    add_addr_accepted: u8,
    subflows_max: u8,
    add_addr_signal_max: u8,
    add_addr_accepted_max: u8,
    flags: u32,
    token: u32,
    write_seq: u64,
    snd_una: u64,
    rcv_nxt: u64,
    local_addr_used: u8,
    local_addr_max: u8,
    csum_enabled: u8,
    retransmits: u32,
    bytes_retrans: u64,
    bytes_sent: u64,
    bytes_received: u64,
    bytes_acked: u64,
    subflows_total: u8,
    reserved: [u8; 3],
    last_data_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
}

/// `struct mptcp_subflow_data`: the header the kernel reads (element
/// size) and writes back (count, its element size) before an array.
const HEADER_LEN: usize = 16;
/// `struct mptcp_subflow_addrs`: local then remote, a
/// `sockaddr_storage` each.
const ADDRS_LEN: usize = 256;

/// The connection's state now; None when the socket cannot be read at
/// all (closed).
fn state(fd: BorrowedFd<'_>) -> Option<MptcpCounters> {
    let mut raw = [0u8; size_of::<MptcpInfoRaw>()];
    let info = match getsockopt(fd, Get::MptcpInfo, &mut raw) {
        Ok(n) => decode_info(&raw[..n]),
        // A connection that fell back to TCP (EOPNOTSUPP), or a plain TCP
        // socket the server accepted for an MPTCP test (ENOPROTOOPT).
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOPROTOOPT)) => {
            return Some(MptcpCounters {
                fallback: true,
                ..MptcpCounters::default()
            })
        }
        Err(_) => return None,
    };
    let (fallback, info) = info;
    Some(MptcpCounters {
        fallback,
        info: Some(info),
        subflows: subflows(fd).unwrap_or_default(),
    })
}

/// The fields of a `struct mptcp_info` the kernel wrote into `raw`, and
/// whether it says the connection fell back to TCP.
fn decode_info(raw: &[u8]) -> (bool, MptcpInfo) {
    macro_rules! field {
        ($name:ident: $t:ty) => {{
            let at = offset_of!(MptcpInfoRaw, $name);
            raw.get(at..at + size_of::<$t>())
                .and_then(|b| b.try_into().ok())
                .map_or(0, <$t>::from_ne_bytes)
        }};
    }
    let flags = field!(flags: u32);
    let info = MptcpInfo {
        add_addr_signal: field!(add_addr_signal: u8),
        add_addr_accepted: field!(add_addr_accepted: u8),
        retransmits: field!(retransmits: u32),
        bytes_retrans: field!(bytes_retrans: u64),
        bytes_sent: field!(bytes_sent: u64),
        bytes_received: field!(bytes_received: u64),
        bytes_acked: field!(bytes_acked: u64),
    };
    (flags & MPTCP_INFO_FLAG_FALLBACK != 0, info)
}

/// Every subflow's addresses and TCP_INFO, paired by position (both
/// calls list the subflows in the same order; when one appeared or went
/// between the two calls, the addresses are left out).
fn subflows(fd: BorrowedFd<'_>) -> io::Result<Vec<SubflowCounters>> {
    let infos = subflow_array(fd, Get::MptcpTcpInfo, TCP_INFO_LEN)?;
    let addrs = subflow_array(fd, Get::MptcpSubflowAddrs, ADDRS_LEN).unwrap_or_default();
    let paired = addrs.len() == infos.len();
    Ok(infos
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            let (local, remote) = match addrs.get(i).filter(|_| paired) {
                Some(a) => (sockaddr(&a[..ADDRS_LEN / 2]), sockaddr(&a[ADDRS_LEN / 2..])),
                None => (None, None),
            };
            // A subflow being torn down can report its local address as
            // 0.0.0.0 with its port, or its remote one as 127.0.0.1:0
            // (both seen in the reading taken at a close the peer
            // started): unknown, not an address.
            let show = |a: Option<SocketAddr>| {
                a.filter(|a| !a.ip().is_unspecified() && a.port() != 0)
                    .map(|a| crate::net::canonical(a).to_string())
                    .unwrap_or_default()
            };
            SubflowCounters {
                local: show(local),
                remote: show(remote),
                tcp: tcp_info::decode(raw),
            }
        })
        .collect())
}

/// One of the subflow getsockopts: a `struct mptcp_subflow_data` header
/// asking for elements of `size` bytes, then the array. Returns each
/// element as the kernel wrote it (shorter than `size` when the kernel's
/// struct is).
fn subflow_array(fd: BorrowedFd<'_>, opt: Get, size: usize) -> io::Result<Vec<Vec<u8>>> {
    let mut buf = vec![0u8; HEADER_LEN + MAX_SUBFLOWS * size];
    let u32_at =
        |b: &[u8], at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"));
    buf[0..4].copy_from_slice(&(HEADER_LEN as u32).to_ne_bytes());
    buf[12..16].copy_from_slice(&(size as u32).to_ne_bytes());
    getsockopt(fd, opt, &mut buf)?;
    let count = (u32_at(&buf, 4) as usize).min(MAX_SUBFLOWS);
    let each = (u32_at(&buf, 8) as usize).min(size);
    Ok((0..count)
        .map(|i| {
            let at = HEADER_LEN + i * size;
            buf[at..at + each].to_vec()
        })
        .collect())
}

/// A `sockaddr_storage` as the kernel wrote it: IPv4 or IPv6.
fn sockaddr(raw: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes(raw.get(0..2)?.try_into().ok()?);
    let port = u16::from_be_bytes(raw.get(2..4)?.try_into().ok()?);
    match libc::c_int::from(family) {
        libc::AF_INET => {
            let ip: [u8; 4] = raw.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::from((Ipv4Addr::from(ip), port)))
        }
        libc::AF_INET6 => {
            let ip: [u8; 16] = raw.get(8..24)?.try_into().ok()?;
            let scope = u32::from_ne_bytes(raw.get(24..28)?.try_into().ok()?);
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(ip),
                port,
                0,
                scope,
            )))
        }
        _ => None,
    }
}

/// getsockopt(SOL_MPTCP, `opt`) into `buf` (which may carry input, as
/// the subflow calls' header does); the length the kernel wrote.
fn getsockopt(fd: BorrowedFd<'_>, opt: Get, buf: &mut [u8]) -> io::Result<usize> {
    xferlab_sys::sockopt::get_bytes(fd, opt, buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn layout_matches_linux_mptcp_h() {
        // Offsets of the 6.18 struct, printed from a live socket's
        // MPTCP_INFO (bytes_sent and bytes_acked equal what was written).
        assert_eq!(offset_of!(MptcpInfoRaw, flags), 8);
        assert_eq!(offset_of!(MptcpInfoRaw, rcv_nxt), 32);
        assert_eq!(offset_of!(MptcpInfoRaw, retransmits), 44);
        assert_eq!(offset_of!(MptcpInfoRaw, bytes_sent), 56);
        assert_eq!(offset_of!(MptcpInfoRaw, bytes_acked), 72);
        assert_eq!(offset_of!(MptcpInfoRaw, subflows_total), 80);
        assert_eq!(size_of::<MptcpInfoRaw>(), 96);
        // A pre-6.5 kernel's 48 bytes: flags, but no byte counters.
        let mut old = vec![0u8; 48];
        old[8] = 1;
        old[2] = 3;
        let (fallback, info) = decode_info(&old);
        assert!(fallback);
        assert_eq!((info.add_addr_accepted, info.bytes_sent), (3, 0));
    }

    #[test]
    fn sockaddrs_of_both_families_are_read() {
        let mut v4 = [0u8; 128];
        v4[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&5290u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[10, 0, 0, 1]);
        assert_eq!(sockaddr(&v4), Some("10.0.0.1:5290".parse().unwrap()));
        let mut v6 = [0u8; 128];
        v6[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[2..4].copy_from_slice(&80u16.to_be_bytes());
        v6[23] = 1;
        assert_eq!(sockaddr(&v6), Some("[::1]:80".parse().unwrap()));
        assert_eq!(sockaddr(&[0u8; 128]), None);
    }

    /// A loopback MPTCP connection, both ends; None where the kernel has
    /// no MPTCP (the test says so and fails: the transport is part of
    /// what this binary promises on Linux >= 5.16).
    fn connection() -> (TcpStream, TcpStream) {
        let listener = Mptcp
            .listener(Domain::IPV4)
            .expect("this kernel has no MPTCP (net.mptcp.enabled = 0?)");
        listener
            .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        listener.listen(1).unwrap();
        let listener: TcpListener = listener.into();
        let client = Mptcp.socket(Domain::IPV4).unwrap();
        client
            .connect(&listener.local_addr().unwrap().into())
            .unwrap();
        let (server, _) = listener.accept().unwrap();
        (client.into(), server)
    }

    #[test]
    fn a_loopback_connection_shows_its_subflow_with_addresses_and_tcp_info() {
        let (mut client, mut server) = connection();
        client.write_all(&[7u8; 1 << 16]).unwrap();
        server.read_exact(&mut [0u8; 1 << 16]).unwrap();
        for (end, s) in [("client", &client), ("server", &server)] {
            let c = state(s.as_fd()).unwrap();
            assert!(!c.fallback, "{end}: {c:?}");
            assert_eq!(c.subflows.len(), 1, "{end}: {c:?}");
            let sf = &c.subflows[0];
            assert_eq!(sf.local, s.local_addr().unwrap().to_string(), "{end}");
            assert_eq!(sf.remote, s.peer_addr().unwrap().to_string(), "{end}");
            assert!(sf.tcp.snd_mss > 0 && sf.tcp.rtt_us > 0, "{end}: {sf:?}");
        }
        let sent = state(client.as_fd()).unwrap().info.unwrap();
        assert_eq!(sent.bytes_sent, 1 << 16);
    }

    #[test]
    fn a_plain_tcp_peer_is_a_fallback() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = Mptcp.socket(Domain::IPV4).unwrap();
        client
            .connect(&listener.local_addr().unwrap().into())
            .unwrap();
        let (server, _) = listener.accept().unwrap();
        assert!(state(client.as_fd()).unwrap().fallback);
        assert!(state(server.as_fd()).unwrap().fallback);
    }
}
