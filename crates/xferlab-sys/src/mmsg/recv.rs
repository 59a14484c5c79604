//! Datagrams in: recvmmsg into buffers built once, with each message's
//! control messages (kernel receive time, drop count, TOS, GRO segment
//! size) read out on demand.

use std::io;
use std::mem::zeroed;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd};

/// Room for SCM_TIMESTAMPNS, SO_RXQ_OVFL and UDP_GRO control messages
/// (and IP_TOS / IPV6_TCLASS), per message.
const CMSG_SPACE: usize = 128;

/// What one received message carried.
pub struct Received<'a> {
    pub data: &'a [u8],
    pub stamp_ns: Option<u64>,
    pub drops: Option<u32>,
    /// GRO segment size: `data` holds several datagrams of this size.
    pub segment: Option<usize>,
    /// The IP header's TOS / traffic class byte, where IP_RECVTOS or
    /// IPV6_RECVTCLASS asked for it (its low two bits are ECN).
    pub tos: Option<u8>,
    /// The sender's address, from the message header (an unconnected
    /// socket's datagrams come from many peers).
    pub source: Option<SocketAddr>,
}

/// Receive buffers, control buffers and message headers, built once.
pub struct RecvBatch {
    buf_len: usize,
    bufs: Vec<u8>,
    ctrl: Vec<u8>,
    iovs: Vec<libc::iovec>,
    /// Each message's sender address.
    names: Vec<libc::sockaddr_storage>,
    msgs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers inside point into the struct's own heap
// buffers, which never move after construction and go with it.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// `n` messages of up to `buf_len` bytes each.
    pub fn new(buf_len: usize, n: usize) -> Self {
        let iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: buf_len,
        };
        // SAFETY: an all-zero mmsghdr is valid.
        let mut m: libc::mmsghdr = unsafe { zeroed() };
        m.msg_hdr.msg_iovlen = 1;
        RecvBatch {
            buf_len,
            bufs: vec![0u8; buf_len * n],
            ctrl: vec![0u8; CMSG_SPACE * n],
            iovs: vec![iov; n],
            // SAFETY: an all-zero sockaddr_storage is valid (AF_UNSPEC).
            names: vec![unsafe { zeroed() }; n],
            msgs: vec![m; n],
        }
    }

    /// Readies every header for a call: its iovec, buffer and control
    /// buffer, from one base pointer per buffer (see the module's
    /// comment), and the lengths the last call shortened.
    fn link(&mut self) {
        let bufs = self.bufs.as_mut_ptr();
        for (i, iov) in self.iovs.iter_mut().enumerate() {
            iov.iov_base = bufs.wrapping_add(i * self.buf_len).cast();
        }
        let (iovs, ctrl) = (self.iovs.as_mut_ptr(), self.ctrl.as_mut_ptr());
        let names = self.names.as_mut_ptr();
        for (i, m) in self.msgs.iter_mut().enumerate() {
            m.msg_hdr.msg_iov = iovs.wrapping_add(i);
            m.msg_hdr.msg_name = names.wrapping_add(i).cast();
            m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as _;
            m.msg_hdr.msg_control = ctrl.wrapping_add(i * CMSG_SPACE).cast();
            m.msg_hdr.msg_controllen = CMSG_SPACE as _;
            m.msg_hdr.msg_flags = 0;
        }
    }

    /// Waits for at least one datagram (up to the socket's read timeout),
    /// then takes whatever else is queued, up to the batch size.
    pub fn recv(&mut self, fd: impl AsFd) -> io::Result<usize> {
        self.recv_flags(fd, libc::MSG_WAITFORONE)
    }

    /// Takes what is queued, up to the batch size, without waiting:
    /// WouldBlock when the queue is empty.
    pub fn recv_queued(&mut self, fd: impl AsFd) -> io::Result<usize> {
        self.recv_flags(fd, libc::MSG_DONTWAIT)
    }

    fn recv_flags(&mut self, fd: impl AsFd, flags: libc::c_int) -> io::Result<usize> {
        self.link();
        // SAFETY: link() just pointed every header at live buffers of the
        // stated sizes (see the module's comment); the kernel writes
        // within them and into the headers' length fields.
        let r = unsafe {
            libc::recvmmsg(
                fd.as_fd().as_raw_fd(),
                self.msgs.as_mut_ptr(),
                self.msgs.len() as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }

    /// Messages one call takes at most.
    pub fn capacity(&self) -> usize {
        self.msgs.len()
    }

    /// Message `i` of the last call (below what it returned).
    pub fn message(&self, i: usize) -> Received<'_> {
        let m = &self.msgs[i];
        let len = (m.msg_len as usize).min(self.buf_len);
        let mut out = Received {
            data: &self.bufs[i * self.buf_len..i * self.buf_len + len],
            stamp_ns: None,
            drops: None,
            segment: None,
            tos: None,
            source: sockaddr(&self.names[i], m.msg_hdr.msg_namelen),
        };
        // SAFETY: msg_control points at this message's CMSG_SPACE bytes of
        // `ctrl` and msg_controllen is at most that (the kernel shortens it
        // to what it wrote); the kernel filled them with well-formed cmsgs,
        // CMSG_FIRSTHDR/CMSG_NXTHDR return only headers that lie within
        // msg_controllen, and the reads below take each cmsg's data
        // unaligned and no longer than its type defines.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
            while !c.is_null() {
                let data = libc::CMSG_DATA(c);
                match ((*c).cmsg_level, (*c).cmsg_type) {
                    (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
                        let ts: libc::timespec = std::ptr::read_unaligned(data.cast());
                        out.stamp_ns = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                    }
                    (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => {
                        out.drops = Some(std::ptr::read_unaligned(data.cast::<u32>()));
                    }
                    (libc::IPPROTO_IP, libc::IP_TOS) => out.tos = Some(*data),
                    (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                        let tclass: libc::c_int = std::ptr::read_unaligned(data.cast());
                        out.tos = Some(tclass as u8);
                    }
                    (libc::SOL_UDP, libc::UDP_GRO) => {
                        let seg: libc::c_int = std::ptr::read_unaligned(data.cast());
                        out.segment = usize::try_from(seg).ok();
                    }
                    _ => {}
                }
                c = libc::CMSG_NXTHDR(&m.msg_hdr, c);
            }
        }
        out
    }
}

/// The address the kernel wrote into a message's name (`len` bytes of
/// it), if it is an IPv4 or IPv6 one.
fn sockaddr(s: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match libc::c_int::from(s.ss_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in,
            // and sockaddr_storage is large and aligned enough for it.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::Duration;

    #[test]
    fn datagrams_arrive_with_their_stamps() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        crate::sockopt::set_int(&rx, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        tx.send(&[1, 2, 3]).unwrap();
        tx.send(&[4; 10]).unwrap();
        let mut b = RecvBatch::new(64, 4);
        let mut got = Vec::new();
        while got.len() < 2 {
            let n = b.recv(&rx).unwrap();
            for i in 0..n {
                let m = b.message(i);
                assert!(m.stamp_ns.is_some());
                assert_eq!((m.drops, m.segment), (None, None));
                assert_eq!(m.source, Some(tx.local_addr().unwrap()));
                got.push(m.data.to_vec());
            }
        }
        assert_eq!(got, [vec![1, 2, 3], vec![4; 10]]);
        assert!(b.recv_queued(&rx).is_err(), "nothing queued");
    }
}
