//! Equal-sized datagrams out: sendmmsg, or one UDP_SEGMENT buffer.

use std::io;
use std::mem::zeroed;
use std::os::fd::{AsFd, AsRawFd};

/// `n` datagram buffers of `size` bytes back to back, with one message
/// header each.
pub struct SendBatch {
    size: usize,
    bufs: Vec<u8>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers inside point into the struct's own heap
// buffers, which never move after construction and go with it.
unsafe impl Send for SendBatch {}

impl SendBatch {
    /// `per_call` datagrams of `size` bytes, byte `i` of the buffers
    /// (all datagrams back to back) holding `fill(i)`.
    pub fn new(size: usize, per_call: usize, fill: impl FnMut(usize) -> u8) -> Self {
        let bufs: Vec<u8> = (0..size * per_call).map(fill).collect();
        let iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: size,
        };
        // SAFETY: an all-zero mmsghdr is valid (no name, no control).
        let mut m: libc::mmsghdr = unsafe { zeroed() };
        m.msg_hdr.msg_iovlen = 1;
        SendBatch {
            size,
            bufs,
            iovs: vec![iov; per_call],
            msgs: vec![m; per_call],
        }
    }

    /// Points every iovec at its datagram and every header at its iovec,
    /// from one base pointer per buffer (see the module's comment).
    fn link(&mut self) {
        let bufs = self.bufs.as_mut_ptr();
        for (i, iov) in self.iovs.iter_mut().enumerate() {
            iov.iov_base = bufs.wrapping_add(i * self.size).cast();
        }
        let iovs = self.iovs.as_mut_ptr();
        for (i, m) in self.msgs.iter_mut().enumerate() {
            m.msg_hdr.msg_iov = iovs.wrapping_add(i);
        }
    }

    /// Datagrams one call sends at most.
    pub fn capacity(&self) -> usize {
        self.msgs.len()
    }

    /// The buffers from datagram `i`'s first byte to the end of the last.
    pub fn from_datagram(&mut self, i: usize) -> &mut [u8] {
        &mut self.bufs[i * self.size..]
    }

    /// Sends the first `n` datagrams (at most the capacity) with sendmmsg;
    /// how many went out.
    pub fn send(&mut self, fd: impl AsFd, n: usize) -> io::Result<usize> {
        let n = n.min(self.msgs.len());
        self.link();
        // SAFETY: link() just pointed msgs[..n] at live iovecs and buffers
        // (see the module's comment), and `n` is within `msgs`.
        let r = unsafe {
            libc::sendmmsg(
                fd.as_fd().as_raw_fd(),
                self.msgs.as_mut_ptr(),
                n as libc::c_uint,
                0,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }

    /// Sends the first `n` datagrams (at most the capacity) as one buffer
    /// on a socket with UDP_SEGMENT set to the datagram size: the kernel
    /// cuts it into datagrams. The bytes sent.
    pub fn send_segmented(&mut self, fd: impl AsFd, n: usize) -> io::Result<usize> {
        let n = n.min(self.msgs.len());
        Ok(rustix::net::send(
            fd,
            &self.bufs[..n * self.size],
            rustix::net::SendFlags::empty(),
        )?)
    }

    /// Keeps only the first `n` messages (a kernel that takes fewer
    /// segments per send).
    pub fn truncate(&mut self, n: usize) {
        self.msgs.truncate(n);
        self.iovs.truncate(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::Duration;

    #[test]
    fn a_batch_arrives_as_its_datagrams_in_order() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let mut b = SendBatch::new(100, 4, |_| 0);
        for i in 0..4 {
            b.from_datagram(i)[0] = i as u8;
        }
        assert_eq!(b.send(&tx, 3).unwrap(), 3);
        let mut buf = [0u8; 200];
        for i in 0..3 {
            assert_eq!(rx.recv(&mut buf).unwrap(), 100);
            assert_eq!(buf[0], i);
        }
        b.truncate(2);
        assert_eq!(b.capacity(), 2);
        assert_eq!(b.send(&tx, 4).unwrap(), 2);
    }
}
