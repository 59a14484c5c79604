//! The raw IP carrier of xferlab's DCCP (`--dccp-carrier ip`): a flow's
//! raw socket for IP protocol 33, as the kernel's DCCP puts it on the
//! wire. The flow keeps its UDP socket for the attach and for its port
//! number (the DCCP ports are the UDP socket's, so flows of one host
//! never share a port); its DCCP packets go through this socket.
//!
//! Every raw socket for protocol 33 on a host gets a copy of every such
//! packet from its peer address (on loopback both ends' sockets see both
//! directions), so each socket carries a filter that keeps only its own
//! connection's ports: without it every flow would wake for, and drop,
//! the others' packets. IPv4 reads start at the IP header (stripped by
//! [`payload`]); IPv6 reads at the DCCP header.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, SockFilter, Socket, Type};
use xferlab_core::dccp::checksum::{Pseudo, IPPROTO_DCCP};

use super::super::datagram::transient;
use super::DccpError;
use crate::net::canonical;

// Classic BPF opcodes (linux/bpf_common.h, linux/filter.h).
const LD_H_ABS: u16 = 0x28; // BPF_LD | BPF_H | BPF_ABS
const LD_H_IND: u16 = 0x48; // BPF_LD | BPF_H | BPF_IND
const LDX_B_MSH: u16 = 0xb1; // BPF_LDX | BPF_B | BPF_MSH: X = 4 * (pkt[k] & 0xf)
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K
/// What a filter that keeps a packet returns: the bytes to keep, all.
const KEEP: u32 = u32::MAX;

/// A raw socket for IP protocol 33, or the one line naming the privilege
/// it needs.
pub(super) fn socket(domain: Domain) -> Result<Socket, DccpError> {
    Socket::new(
        domain,
        Type::RAW,
        Some(Protocol::from(i32::from(IPPROTO_DCCP))),
    )
    .map_err(|err| match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => DccpError::RawNotAllowed(err),
        _ => raw_error("open it", err),
    })
}

fn raw_error(what: impl Into<String>, err: io::Error) -> DccpError {
    DccpError::Raw {
        what: what.into(),
        err,
    }
}

/// A raw protocol-33 socket for the DCCP connection between `local` and
/// `peer` (their ports are the connection's DCCP ports): bound and
/// connected to the two addresses, filtered to the two ports,
/// non-blocking. Packets that reached it before the filter are drained.
pub(super) fn open(local: SocketAddr, peer: SocketAddr) -> Result<Socket, DccpError> {
    let (local, peer) = (canonical(local), canonical(peer));
    filtered(local, peer, Some(peer.port()))
}

/// A raw protocol-33 socket that waits for a connection from any port of
/// `peer`'s address to `local`'s port (a server's flow, whose client's
/// port it learns from the Request): as [`open`], filtered to the local
/// port only (flow ports are unique on a host, being UDP sockets' ports).
pub(super) fn listen(local: SocketAddr, peer: SocketAddr) -> Result<Socket, DccpError> {
    filtered(canonical(local), canonical(peer), None)
}

fn filtered(
    local: SocketAddr,
    peer: SocketAddr,
    peer_port: Option<u16>,
) -> Result<Socket, DccpError> {
    let s = socket(Domain::for_address(peer))?;
    // Nothing until the socket is connected and drained, then only ours:
    // the connect filters by address, the port filter by connection.
    s.attach_filter(&[SockFilter::new(RET_K, 0, 0, 0)])
        .map_err(|e| raw_error("filter it", e))?;
    let unported = |a: SocketAddr| SocketAddr::new(a.ip(), 0);
    s.bind(&unported(local).into())
        .map_err(|e| raw_error(format!("bind it to {}", local.ip()), e))?;
    s.connect(&unported(peer).into())
        .map_err(|e| raw_error(format!("reach {}", peer.ip()), e))?;
    s.set_nonblocking(true)
        .map_err(|e| raw_error("make it non-blocking", e))?;
    let mut junk = [0u8; 2048];
    loop {
        if let Err(e) = rustix::net::recv(&s, &mut junk[..], rustix::net::RecvFlags::empty()) {
            let e = io::Error::from(e);
            if transient(&e) {
                break;
            }
            return Err(raw_error("read it", e));
        }
    }
    s.attach_filter(&port_filter(peer.is_ipv4(), local.port(), peer_port))
        .map_err(|e| raw_error("filter it", e))?;
    Ok(s)
}

/// Keeps packets from `peer_port` (any port: None) to `local_port` (the
/// DCCP header's first two fields); IPv4 packets come with their IP
/// header first.
fn port_filter(v4: bool, local_port: u16, peer_port: Option<u16>) -> Vec<SockFilter> {
    let dst = u32::from(local_port);
    // Loads the half-word at DCCP header offset `k`.
    let load = |k: u32| {
        if v4 {
            SockFilter::new(LD_H_IND, 0, 0, k)
        } else {
            SockFilter::new(LD_H_ABS, 0, 0, k)
        }
    };
    let mut f = Vec::with_capacity(7);
    if v4 {
        f.push(SockFilter::new(LDX_B_MSH, 0, 0, 0));
    }
    if let Some(src) = peer_port {
        f.push(load(0));
        f.push(SockFilter::new(JEQ_K, 0, 3, u32::from(src)));
    }
    f.push(load(2));
    f.push(SockFilter::new(JEQ_K, 0, 1, dst));
    f.push(SockFilter::new(RET_K, 0, 0, KEEP));
    f.push(SockFilter::new(RET_K, 0, 0, 0));
    f
}

/// The DCCP packet in what a raw socket read returned: IPv4 reads carry
/// the IP header (IHL words), IPv6 reads do not. None for a read too
/// short to hold its own header.
pub(super) fn payload(v4: bool, read: &[u8]) -> Option<&[u8]> {
    if !v4 {
        return Some(read);
    }
    let ihl = usize::from(read.first()? & 0x0f) * 4;
    read.get(ihl..)
}

/// The RFC 4340 sec. 9.1 pseudo-header of packets from `local` to `peer`
/// (a v4-mapped pair of a dual-stack UDP socket travels as IPv4).
pub(super) fn pseudo(local: SocketAddr, peer: SocketAddr) -> Pseudo {
    use std::net::IpAddr::{V4, V6};
    match (canonical(local).ip(), canonical(peer).ip()) {
        (V4(s), V4(d)) => Pseudo::V4 {
            src: s.octets(),
            dst: d.octets(),
        },
        (V6(s), V6(d)) => Pseudo::V6 {
            src: s.octets(),
            dst: d.octets(),
        },
        // A connected socket's two ends are of one family.
        _ => Pseudo::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_reads_lose_their_ip_header() {
        let mut pkt = vec![0x46u8; 24]; // IHL 6: a 24-byte header with options
        pkt.extend_from_slice(&[0x12, 0x34, 0x56, 0x78]);
        assert_eq!(payload(true, &pkt), Some(&[0x12, 0x34, 0x56, 0x78][..]));
        assert_eq!(payload(false, &pkt[24..]), Some(&pkt[24..]));
        assert_eq!(payload(true, &[0x4f; 8]), None);
        assert_eq!(payload(true, &[]), None);
    }

    #[test]
    fn a_v4_mapped_pair_checksums_as_ipv4() {
        let l: SocketAddr = "[::ffff:10.0.0.1]:5000".parse().unwrap();
        let p: SocketAddr = "[::ffff:10.0.0.2]:6000".parse().unwrap();
        assert_eq!(
            pseudo(l, p),
            Pseudo::V4 {
                src: [10, 0, 0, 1],
                dst: [10, 0, 0, 2]
            }
        );
    }
}
