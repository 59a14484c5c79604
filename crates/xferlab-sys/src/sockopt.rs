//! Socket options and socket-queue ioctls that neither socket2 nor rustix
//! names (SO_RXQ_OVFL, SO_TIMESTAMPNS, UDP_GRO, UDP_SEGMENT, SO_ZEROCOPY,
//! the *BUFFORCE sizes, SO_MAX_PACING_RATE, SO_MEMINFO, SOL_MPTCP and
//! SOL_DCCP reads, TIOCOUTQ): plain setsockopt/getsockopt/ioctl through
//! libc, on a borrowed socket.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// Sets an int option. The caller picks level and option; an option that
/// takes no int is refused by the kernel (EINVAL), never misread.
pub fn set_int(
    fd: impl AsFd,
    level: libc::c_int,
    opt: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the value pointer is valid for reads of the stated length
    // (one c_int) for the whole call; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            opt,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets a u64 option (SO_MAX_PACING_RATE reads u32 or u64 depending on
/// optlen).
pub fn set_u64(fd: impl AsFd, level: libc::c_int, opt: libc::c_int, value: u64) -> io::Result<()> {
    // SAFETY: the value pointer is valid for reads of the stated length
    // (one u64) for the whole call; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            opt,
            (&value as *const u64).cast(),
            size_of::<u64>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// getsockopt into `buf` (which may carry input, as MPTCP's subflow calls'
/// header does); the length the kernel wrote, at most `buf.len()`.
pub fn get_bytes(
    fd: impl AsFd,
    level: libc::c_int,
    opt: libc::c_int,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut len = libc::socklen_t::try_from(buf.len()).unwrap_or(libc::socklen_t::MAX);
    // SAFETY: `buf` is valid for reads and writes of `len` bytes (at most
    // its length); the kernel writes at most `len` bytes and stores the
    // count in `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            opt,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((len as usize).min(buf.len()))
}

/// SO_MEMINFO: asm-generic's value (x86, arm, riscv); the libc crate does
/// not export it for these targets.
const SO_MEMINFO: libc::c_int = 55;

/// The socket's drop counter (SO_MEMINFO's SK_MEMINFO_DROPS); None if the
/// kernel refuses (before Linux 4.6).
pub fn meminfo_drops(fd: impl AsFd) -> Option<u32> {
    let mut mem = [0u8; 4 * (libc::SK_MEMINFO_DROPS as usize + 1)];
    let len = get_bytes(fd, libc::SOL_SOCKET, SO_MEMINFO, &mut mem).ok()?;
    let at = 4 * libc::SK_MEMINFO_DROPS as usize;
    (len >= mem.len()).then(|| u32::from_ne_bytes(mem[at..at + 4].try_into().expect("4 bytes")))
}

/// Bytes written to a stream socket that the peer has not yet
/// acknowledged (SIOCOUTQ, alias TIOCOUTQ).
pub fn outq(fd: impl AsFd) -> io::Result<u64> {
    let mut queued: libc::c_int = 0;
    // SAFETY: TIOCOUTQ writes one int through the pointer, which is valid
    // for that write during the call.
    let r = unsafe { libc::ioctl(fd.as_fd().as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    if r == 0 {
        Ok(queued.max(0) as u64)
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn an_int_option_is_set_and_read_back() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        set_int(&s, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1).unwrap();
        let mut v = [0u8; 4];
        let n = get_bytes(&s, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &mut v).unwrap();
        assert_eq!((n, i32::from_ne_bytes(v)), (4, 1));
        assert_eq!(meminfo_drops(&s), Some(0));
    }
}
