//! Receiving a byte stream without copying it out: recv(MSG_TRUNC), which
//! for TCP drops the data in the kernel.

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

/// A byte-stream socket read with recv(MSG_TRUNC), up to `len` bytes a
/// call.
pub struct Discard<'a> {
    fd: BorrowedFd<'a>,
    len: usize,
    /// Where the kernel may write. For TCP, which never writes with
    /// MSG_TRUNC, one byte; for any other protocol (MPTCP), the full
    /// `len` bytes, allocated zeroed and never touched by us, so a kernel
    /// that copies after all writes into memory that is ours.
    buf: Vec<u8>,
}

impl<'a> Discard<'a> {
    /// Reads up to `len` bytes a call from `sock`. Looks the protocol up
    /// once (SO_PROTOCOL).
    pub fn new(sock: &'a TcpStream, len: usize) -> Self {
        let tcp = rustix::net::sockopt::socket_protocol(sock)
            .ok()
            .flatten()
            .is_some_and(|p| p == rustix::net::ipproto::TCP);
        Discard {
            fd: sock.as_fd(),
            len,
            buf: vec![0u8; if tcp { 1 } else { len }],
        }
    }

    /// One recv(MSG_TRUNC): the bytes dropped, 0 at end of stream.
    pub fn recv(&mut self) -> io::Result<usize> {
        // SAFETY: the kernel writes at most `len` bytes at the pointer and
        // only where the protocol copies: TCP never does under MSG_TRUNC
        // (tcp_recvmsg skips the copy; `buf` then holds 1 byte), and for
        // every other protocol `buf` holds `len` bytes.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr().cast(),
                self.len,
                libc::MSG_TRUNC,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    #[test]
    fn a_tcp_stream_is_dropped_in_the_kernel_and_counted() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (rx, _) = l.accept().unwrap();
        tx.write_all(&[7u8; 100_000]).unwrap();
        drop(tx);
        let mut d = Discard::new(&rx, 4 << 20);
        assert_eq!(d.buf.len(), 1);
        let mut got = 0;
        loop {
            match d.recv().unwrap() {
                0 => break,
                n => got += n,
            }
        }
        assert_eq!(got, 100_000);
    }
}
