//! One datagram (or one UDP_GRO train) received straight into the spare
//! room of a `BytesMut`, for a receiver that hands the bytes on as owned
//! buffers (quinn-proto takes each QUIC packet as a `BytesMut` and
//! decrypts it in place): no copy between the kernel's and the owner's.

use std::io;
use std::mem::zeroed;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};

use bytes::BytesMut;

use super::recv::sockaddr;

/// Room for the UDP_GRO control message (and any other the socket asks
/// for: IP_TOS, a time stamp).
const CMSG_SPACE: usize = 128;

/// What one [`RecvInto::recv`] took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    /// Bytes appended to the buffer.
    pub len: usize,
    /// GRO segment size: the bytes are several datagrams of this size
    /// (the last maybe shorter).
    pub segment: Option<usize>,
    /// The sender's address.
    pub source: Option<SocketAddr>,
}

/// The message header's own buffers (name and control), built once.
pub struct RecvInto {
    name: libc::sockaddr_storage,
    ctrl: [u8; CMSG_SPACE],
}

impl Default for RecvInto {
    fn default() -> Self {
        RecvInto {
            // SAFETY: an all-zero sockaddr_storage is valid (AF_UNSPEC).
            name: unsafe { zeroed() },
            ctrl: [0; CMSG_SPACE],
        }
    }
}

impl RecvInto {
    /// Takes one queued datagram (without waiting: WouldBlock when none)
    /// into `buf`'s spare room, at most `max` bytes (reserved here),
    /// appending it to `buf`.
    pub fn recv(&mut self, fd: impl AsFd, buf: &mut BytesMut, max: usize) -> io::Result<Taken> {
        buf.reserve(max);
        let spare = buf.spare_capacity_mut();
        let mut iov = libc::iovec {
            iov_base: spare.as_mut_ptr().cast(),
            iov_len: spare.len().min(max),
        };
        // SAFETY: an all-zero msghdr is valid; the fields set below point
        // at live buffers of the stated sizes.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_name = (&mut self.name as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = size_of::<libc::sockaddr_storage>() as _;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = self.ctrl.as_mut_ptr().cast();
        msg.msg_controllen = CMSG_SPACE as _;
        // SAFETY: the iovec points at `iov_len` bytes of `buf`'s spare
        // capacity (reserved above, not aliased: `buf` is borrowed
        // mutably for the call), the name and control buffers are this
        // struct's own; the kernel writes within those lengths.
        let n = unsafe { libc::recvmsg(fd.as_fd().as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let len = n as usize;
        // SAFETY: the kernel initialised the first `len` bytes of the
        // spare capacity (recvmsg's return), `len <= iov_len <=` spare.
        unsafe { buf.set_len(buf.len() + len) };
        let mut segment = None;
        // SAFETY: msg_control points at `ctrl` and msg_controllen is at
        // most its length (the kernel shortens it to what it wrote, well
        // formed); CMSG_FIRSTHDR/NXTHDR return only headers within it, and
        // UDP_GRO's data is one int, read unaligned.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if ((*c).cmsg_level, (*c).cmsg_type) == (libc::SOL_UDP, libc::UDP_GRO) {
                    let seg: libc::c_int = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    segment = usize::try_from(seg).ok().filter(|&s| s > 0);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        Ok(Taken {
            len,
            segment,
            source: sockaddr(&self.name, msg.msg_namelen),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn a_datagram_lands_after_what_the_buffer_holds() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(&[7; 300], rx.local_addr().unwrap()).unwrap();
        let mut buf = BytesMut::from(&b"ab"[..]);
        let mut r = RecvInto::default();
        rx.set_nonblocking(false).unwrap();
        // Blocking until it is there, then the call that takes it.
        let mut peek = [0u8; 1];
        rx.peek(&mut peek).unwrap();
        let t = r.recv(&rx, &mut buf, 65_536).unwrap();
        assert_eq!((t.len, t.segment), (300, None));
        assert_eq!(t.source, Some(tx.local_addr().unwrap()));
        assert_eq!(&buf[..2], b"ab");
        assert!(buf[2..].iter().all(|&b| b == 7) && buf.len() == 302);
        let e = r.recv(&rx, &mut buf, 65_536).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(buf.len(), 302, "a failed receive appends nothing");
    }
}
