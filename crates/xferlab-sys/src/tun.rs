//! TUN/TAP devices and the interface ioctls on them: `/dev/net/tun`
//! opened and bound to an interface (TUNSETIFF), its offloads
//! (TUNSETOFFLOAD), and the `struct ifreq` calls that configure an
//! interface (address, peer, netmask, MTU, queue length, flags, index).
//!
//! The ioctls stay plain libc calls: neither rustix nor nix wraps them,
//! and their generic ioctl helpers need a raw opcode and pointer all the
//! same. They run once per device while a link or the lab is set up.

use std::fs::{File, OpenOptions};
use std::io;
use std::net::Ipv6Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

use rustix::net::{socket_with, AddressFamily, SocketFlags, SocketType};

/// `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `_IOW('T', 208, unsigned int)`.
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;

/// IFF_TUN, IFF_TAP, IFF_NO_PI, IFF_VNET_HDR (linux/if_tun.h).
pub const IFF_TUN: i16 = 0x0001;
pub const IFF_TAP: i16 = 0x0002;
pub const IFF_NO_PI: i16 = 0x1000;
pub const IFF_VNET_HDR: i16 = 0x4000;
/// TUNSETOFFLOAD's flags.
pub const TUN_F_CSUM: libc::c_uint = 0x01;
pub const TUN_F_TSO4: libc::c_uint = 0x02;
pub const TUN_F_TSO6: libc::c_uint = 0x04;
pub const TUN_F_USO4: libc::c_uint = 0x20;
pub const TUN_F_USO6: libc::c_uint = 0x40;

/// `struct ifreq`: a name and a 24-byte union.
#[repr(C)]
pub struct IfReq {
    pub name: [u8; 16],
    pub data: [u8; 24],
}

impl IfReq {
    /// For interface `name` (cut to 15 bytes), the union zeroed.
    pub fn new(name: &str) -> Self {
        let mut r = IfReq {
            name: [0; 16],
            data: [0; 24],
        };
        let n = name.as_bytes();
        r.name[..n.len().min(15)].copy_from_slice(&n[..n.len().min(15)]);
        r
    }

    pub fn set_short(&mut self, v: i16) {
        self.data[..2].copy_from_slice(&v.to_ne_bytes());
    }

    pub fn short(&self) -> i16 {
        i16::from_ne_bytes([self.data[0], self.data[1]])
    }

    pub fn set_int(&mut self, v: i32) {
        self.data[..4].copy_from_slice(&v.to_ne_bytes());
    }

    pub fn int(&self) -> i32 {
        i32::from_ne_bytes([self.data[0], self.data[1], self.data[2], self.data[3]])
    }

    pub fn set_ipv4(&mut self, a: std::net::Ipv4Addr) {
        self.data[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        self.data[4..8].copy_from_slice(&a.octets());
    }

    /// The interface name, for messages.
    pub fn name(&self) -> String {
        String::from_utf8_lossy(&self.name)
            .trim_end_matches('\0')
            .to_string()
    }
}

/// An open `/dev/net/tun` (the clone device; the interface comes with
/// [`Tun::set_iff`] and goes when the file is closed).
pub struct Tun(File);

impl Tun {
    /// Opens `/dev/net/tun` read-write with `flags` (e.g. O_NONBLOCK)
    /// added; close-on-exec.
    pub fn open(flags: libc::c_int) -> io::Result<Tun> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(flags | libc::O_CLOEXEC)
            .open("/dev/net/tun")?;
        Ok(Tun(f))
    }

    /// TUNSETIFF: creates (or attaches to) the interface `r` names, with
    /// the IFF_* flags in its union; the kernel writes the name back.
    pub fn set_iff(&self, r: &mut IfReq) -> io::Result<()> {
        // SAFETY: TUNSETIFF reads and writes one struct ifreq, which `r` is
        // (40 bytes, live for the call).
        if unsafe { libc::ioctl(self.0.as_raw_fd(), TUNSETIFF as _, r as *mut IfReq) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// TUNSETOFFLOAD with the TUN_F_* `flags`.
    pub fn set_offload(&self, flags: libc::c_uint) -> io::Result<()> {
        // SAFETY: TUNSETOFFLOAD takes an unsigned int by value.
        if unsafe {
            libc::ioctl(
                self.0.as_raw_fd(),
                TUNSETOFFLOAD as _,
                flags as libc::c_ulong,
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The device's file: one read() or write() per packet.
    pub fn into_file(self) -> File {
        self.0
    }
}

/// An interface ioctl that takes a `struct ifreq`.
#[derive(Debug, Clone, Copy)]
pub enum IfRequest {
    GetFlags,
    SetFlags,
    SetAddr,
    SetDstAddr,
    SetNetmask,
    SetMtu,
    SetTxQueueLen,
    GetIndex,
}

impl IfRequest {
    fn code(self) -> libc::c_ulong {
        match self {
            IfRequest::GetFlags => 0x8913,
            IfRequest::SetFlags => 0x8914,
            IfRequest::SetAddr => 0x8916,
            IfRequest::SetDstAddr => 0x8918,
            IfRequest::SetNetmask => 0x891c,
            IfRequest::SetMtu => 0x8922,
            IfRequest::SetTxQueueLen => 0x8943,
            IfRequest::GetIndex => 0x8933,
        }
    }
}

/// A datagram socket to hang interface ioctls on, in the calling thread's
/// network namespace.
pub struct IfCtl(OwnedFd);

/// `struct in6_ifreq`.
#[repr(C)]
struct In6IfReq {
    addr: [u8; 16],
    prefixlen: u32,
    ifindex: i32,
}

impl IfCtl {
    /// A socket of `family`.
    pub fn new(family: AddressFamily) -> io::Result<IfCtl> {
        Ok(IfCtl(socket_with(
            family,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC,
            None,
        )?))
    }

    /// One `struct ifreq` call.
    pub fn ioctl(&self, req: IfRequest, r: &mut IfReq) -> io::Result<()> {
        // SAFETY: every IfRequest reads or writes one struct ifreq, which
        // `r` is, on a socket of ours.
        if unsafe { libc::ioctl(self.0.as_raw_fd(), req.code() as _, r as *mut IfReq) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// SIOCSIFADDR with an in6_ifreq, on an INET6 socket of its own: adds
/// `addr` with its on-link prefix to interface `ifindex`.
pub fn add_ipv6(addr: Ipv6Addr, prefixlen: u32, ifindex: i32) -> io::Result<()> {
    let s = IfCtl::new(AddressFamily::INET6)?;
    let mut req = In6IfReq {
        addr: addr.octets(),
        prefixlen,
        ifindex,
    };
    // SAFETY: SIOCSIFADDR on an AF_INET6 socket reads one in6_ifreq, which
    // `req` is, live for the call.
    let r = unsafe {
        libc::ioctl(
            s.0.as_raw_fd(),
            IfRequest::SetAddr.code() as _,
            &mut req as *mut In6IfReq,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
