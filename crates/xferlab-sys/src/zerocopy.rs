//! The byte stream's zero-copy paths that need raw calls:
//! send(MSG_ZEROCOPY) with its completion queue on the sending side,
//! TCP_ZEROCOPY_RECEIVE (pages mapped into the receiver) on the receiving
//! side. Each is set up once per flow; per call it costs the one system
//! call of its copying counterpart, plus for MSG_ZEROCOPY a non-blocking
//! read of the error queue.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

/// SO_ZEROCOPY (asm-generic/socket.h; the libc crate does not name it).
const SO_ZEROCOPY: libc::c_int = 60;
/// sock_extended_err.ee_origin of a MSG_ZEROCOPY completion.
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// ee_code bit: the kernel copied the data after all (loopback always
/// does: a looped-back skb may not keep user pages).
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;
/// The length of a cmsg that holds a sock_extended_err.
// SAFETY: CMSG_LEN is a pure size computation.
const EE_CMSG_LEN: usize =
    unsafe { libc::CMSG_LEN(size_of::<libc::sock_extended_err>() as u32) } as usize;

/// send(MSG_ZEROCOPY) on one socket. The kernel reads the sent pages
/// after the call returns: the caller's buffer must stay unchanged until
/// the send completes, or the peer may get the new bytes. It cannot be
/// freed while the kernel reads: the kernel holds its own reference to
/// the pages. Completions are only read to free the kernel's notification
/// memory and to learn whether it copied after all.
pub struct MsgZerocopy<'a> {
    fd: BorrowedFd<'a>,
    /// Completions seen, and how many of them say the kernel copied.
    pub completed: u64,
    pub copied: u64,
}

impl<'a> MsgZerocopy<'a> {
    /// Sets SO_ZEROCOPY on the socket.
    pub fn enable(sock: &'a impl AsFd) -> io::Result<Self> {
        let fd = sock.as_fd();
        crate::sockopt::set_int(fd, libc::SOL_SOCKET, SO_ZEROCOPY, 1)?;
        Ok(MsgZerocopy {
            fd,
            completed: 0,
            copied: 0,
        })
    }

    /// One send(MSG_ZEROCOPY), then the completions queued so far.
    /// Out of notification memory (ENOBUFS) reads as Interrupted: the
    /// drain made room, and the send may be tried again.
    pub fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: buf is valid for its length; the kernel only reads it
        // (pinning the pages it sends from past the call).
        let r = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_ZEROCOPY,
            )
        };
        // The send's error, read before the drain's own failing recvmsg
        // (EAGAIN when the queue is empty) overwrites errno.
        let e = (r < 0).then(io::Error::last_os_error);
        self.drain();
        if let Some(e) = e {
            // Out of notification memory: the drain above made room.
            if e.raw_os_error() == Some(libc::ENOBUFS) {
                return Err(io::Error::from(io::ErrorKind::Interrupted));
            }
            return Err(e);
        }
        Ok(r as usize)
    }

    /// Reads every completion queued on the error queue (non-blocking).
    fn drain(&mut self) {
        loop {
            let mut control = [0u64; 16];
            // SAFETY: an all-zero msghdr is valid (no name, no iovec).
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = size_of_val(&control) as _;
            // SAFETY: msg points at live buffers of the stated sizes.
            let r = unsafe {
                libc::recvmsg(
                    self.fd.as_raw_fd(),
                    &mut msg,
                    libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
                )
            };
            if r < 0 {
                return;
            }
            // SAFETY: the kernel filled msg_control with well-formed cmsgs
            // and shortened msg_controllen to them; CMSG_FIRSTHDR and
            // CMSG_NXTHDR stay within it, and a cmsg long enough to hold a
            // sock_extended_err (every error-queue cmsg is) is read as one,
            // unaligned.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&msg);
                while !c.is_null() {
                    if ((*c).cmsg_len as usize) < EE_CMSG_LEN {
                        c = libc::CMSG_NXTHDR(&msg, c);
                        continue;
                    }
                    let ee: libc::sock_extended_err =
                        std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    if ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY {
                        // ee_info..=ee_data: the range of sends completed.
                        let n = u64::from(ee.ee_data.wrapping_sub(ee.ee_info)) + 1;
                        self.completed += n;
                        if ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0 {
                            self.copied += n;
                        }
                    }
                    c = libc::CMSG_NXTHDR(&msg, c);
                }
            }
        }
    }
}

/// struct tcp_zerocopy_receive (linux/tcp.h, 6.x layout).
#[repr(C)]
#[derive(Default)]
struct TcpZerocopyReceive {
    address: u64,
    length: u32,
    recv_skip_hint: u32,
    inq: u32,
    err: i32,
    copybuf_address: u64,
    copybuf_len: i32,
    flags: u32,
    msg_control: u64,
    msg_controllen: u64,
    msg_flags: u32,
    reserved: u32,
}

/// What one zero-copy receive call gave.
pub struct ZcRead {
    /// Bytes mapped into the window (not copied).
    pub mapped: usize,
    /// Bytes that must be read (copied) before the next mappable ones.
    pub skip: usize,
}

/// A read-only window onto the socket's receive queue: the kernel maps
/// whole received pages into it (TCP_ZEROCOPY_RECEIVE). The mapped bytes
/// are counted, never read: the window hands out no slice of them.
pub struct ZerocopyWindow<'a> {
    fd: BorrowedFd<'a>,
    addr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping belongs to this value alone (unmapped in Drop), no
// reference into it is ever handed out, and it is used through `&mut self`
// only, so the thread the value is moved to is its only user.
unsafe impl Send for ZerocopyWindow<'_> {}

impl<'a> ZerocopyWindow<'a> {
    /// Maps a window of `len` bytes (rounded up to pages) on the socket.
    pub fn new(sock: &'a impl AsFd, len: usize) -> io::Result<Self> {
        let len = len.max(4096).div_ceil(4096) * 4096;
        let fd = sock.as_fd();
        // SAFETY: a fresh shared read-only mapping of the socket at an
        // address the kernel picks (no existing mapping is replaced); the
        // kernel fills it only through TCP_ZEROCOPY_RECEIVE.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(ZerocopyWindow { fd, addr, len })
    }

    /// Maps what the kernel can of the queued data (replacing what the
    /// window held); never blocks.
    pub fn receive(&mut self) -> io::Result<ZcRead> {
        let mut zc = TcpZerocopyReceive {
            address: self.addr as u64,
            length: u32::try_from(self.len).unwrap_or(u32::MAX),
            ..TcpZerocopyReceive::default()
        };
        let mut optlen = size_of::<TcpZerocopyReceive>() as libc::socklen_t;
        // SAFETY: zc is a valid tcp_zerocopy_receive of the stated length;
        // address is our mapping of this socket, which the kernel replaces
        // with the received pages (no copy buffer, no control buffer).
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_ZEROCOPY_RECEIVE,
                (&mut zc as *mut TcpZerocopyReceive).cast(),
                &mut optlen,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        if zc.err != 0 {
            return Err(io::Error::from_raw_os_error(zc.err.abs()));
        }
        Ok(ZcRead {
            mapped: zc.length as usize,
            skip: zc.recv_skip_hint as usize,
        })
    }
}

impl Drop for ZerocopyWindow<'_> {
    fn drop(&mut self) {
        // SAFETY: our own mapping, of `len` bytes, unmapped once; nothing
        // refers into it.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}
