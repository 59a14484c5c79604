//! Socket options and socket-queue ioctls that neither socket2 nor rustix
//! names (SO_RXQ_OVFL, SO_TIMESTAMPNS, UDP_GRO, UDP_SEGMENT, SO_ZEROCOPY,
//! the *BUFFORCE sizes, SO_MAX_PACING_RATE, SO_MEMINFO, SOL_MPTCP and
//! SOL_DCCP reads, TIOCOUTQ): plain setsockopt/getsockopt/ioctl through
//! libc, on a borrowed socket.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// Sets an int option. The caller picks level and option: the kernel reads
/// one int, which cannot hold an address, and refuses (EINVAL) an option
/// that takes more.
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

/// Sets SO_MAX_PACING_RATE (bytes/s) as a u64 (the kernel reads u32 or
/// u64 depending on optlen).
pub fn set_max_pacing_rate(fd: impl AsFd, value: u64) -> io::Result<()> {
    // SAFETY: the value pointer is valid for reads of the stated length
    // (one u64) for the whole call; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
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

// From linux/mptcp.h (libc does not have them).
const SOL_MPTCP: libc::c_int = 284;
const MPTCP_INFO: libc::c_int = 1;
const MPTCP_TCPINFO: libc::c_int = 2;
const MPTCP_SUBFLOW_ADDRS: libc::c_int = 3;

/// An option [`get_bytes`] reads: only those whose structs hold data and
/// no user address the kernel would write through (TCP_ZEROCOPY_RECEIVE
/// names two, and is [`crate::zerocopy`]'s alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Get {
    /// IPPROTO_TCP TCP_INFO: struct tcp_info.
    TcpInfo,
    /// SOL_SOCKET SO_MEMINFO: u32 sk_meminfo counters.
    MemInfo,
    /// SOL_MPTCP MPTCP_INFO: struct mptcp_info.
    MptcpInfo,
    /// SOL_MPTCP MPTCP_TCPINFO: a struct mptcp_subflow_data header (input
    /// too), then each subflow's struct tcp_info.
    MptcpTcpInfo,
    /// SOL_MPTCP MPTCP_SUBFLOW_ADDRS: the header, then each subflow's
    /// struct mptcp_subflow_addrs.
    MptcpSubflowAddrs,
    /// SOL_DCCP DCCP_SOCKOPT_CCID_TX_INFO: struct tfrc_tx_info.
    DccpCcidTxInfo,
    /// IPPROTO_IP IP_MTU: a connected socket's path MTU (int).
    IpMtu,
    /// IPPROTO_IPV6 IPV6_MTU: the same for an IPv6 socket.
    Ipv6Mtu,
}

impl Get {
    fn level_and_name(self) -> (libc::c_int, libc::c_int) {
        match self {
            Get::TcpInfo => (libc::IPPROTO_TCP, libc::TCP_INFO),
            Get::MemInfo => (libc::SOL_SOCKET, SO_MEMINFO),
            Get::MptcpInfo => (SOL_MPTCP, MPTCP_INFO),
            Get::MptcpTcpInfo => (SOL_MPTCP, MPTCP_TCPINFO),
            Get::MptcpSubflowAddrs => (SOL_MPTCP, MPTCP_SUBFLOW_ADDRS),
            Get::DccpCcidTxInfo => (libc::SOL_DCCP, libc::DCCP_SOCKOPT_CCID_TX_INFO),
            Get::IpMtu => (libc::IPPROTO_IP, libc::IP_MTU),
            Get::Ipv6Mtu => (libc::IPPROTO_IPV6, libc::IPV6_MTU),
        }
    }
}

/// getsockopt of `opt` into `buf` (which may carry input, as MPTCP's
/// subflow calls' header does); the length the kernel wrote, at most
/// `buf.len()`.
pub fn get_bytes(fd: impl AsFd, opt: Get, buf: &mut [u8]) -> io::Result<usize> {
    let (level, name) = opt.level_and_name();
    let mut len = libc::socklen_t::try_from(buf.len()).unwrap_or(libc::socklen_t::MAX);
    // SAFETY: `buf` is valid for reads and writes of `len` bytes (at most
    // its length); the kernel writes at most `len` bytes and stores the
    // count in `len`, and none of the `Get` options holds an address it
    // would write through.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
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
    let len = get_bytes(fd, Get::MemInfo, &mut mem).ok()?;
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
    fn an_int_option_is_set_and_read_back_in_meminfo() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        set_int(&s, libc::SOL_SOCKET, libc::SO_RCVBUF, 65536).unwrap();
        let mut v = [0u8; 36];
        let n = get_bytes(&s, Get::MemInfo, &mut v).unwrap();
        // SK_MEMINFO_RCVBUF: the doubled size.
        assert_eq!(
            (n, u32::from_ne_bytes(v[4..8].try_into().unwrap())),
            (36, 131072)
        );
        assert_eq!(meminfo_drops(&s), Some(0));
        assert!(get_bytes(&s, Get::TcpInfo, &mut v).is_err(), "not TCP");
    }
}
