//! TUN devices with virtio-net headers and offloads (so GSO superpackets
//! pass whole), and the few interface ioctls the lab needs (address,
//! point-to-point peer, MTU, queue length, up). Everything acts on the
//! calling thread's network namespace.

use anyhow::Context;
use std::fs::{File, OpenOptions};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

use rustix::net::{socket_with, AddressFamily, SocketFlags, SocketType};

// The ioctls below (TUNSETIFF, TUNSETOFFLOAD, SIOC[GS]IF*) stay plain libc
// calls: neither rustix nor nix wraps them, and their generic ioctl
// helpers need a raw opcode and pointer all the same. They run once per device
// while the lab is set up.

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const IFF_TUN: i16 = 0x0001;
const IFF_NO_PI: i16 = 0x1000;
const IFF_VNET_HDR: i16 = 0x4000;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;
const TUN_F_TSO6: libc::c_uint = 0x04;
const TUN_F_USO4: libc::c_uint = 0x20;
const TUN_F_USO6: libc::c_uint = 0x40;

const SIOCGIFFLAGS: libc::c_ulong = 0x8913;
const SIOCSIFFLAGS: libc::c_ulong = 0x8914;
const SIOCSIFADDR: libc::c_ulong = 0x8916;
const SIOCSIFDSTADDR: libc::c_ulong = 0x8918;
const SIOCSIFNETMASK: libc::c_ulong = 0x891c;
const SIOCSIFMTU: libc::c_ulong = 0x8922;
const SIOCSIFTXQLEN: libc::c_ulong = 0x8943;
const SIOCGIFINDEX: libc::c_ulong = 0x8933;

/// `struct ifreq`: a name and a 24-byte union.
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    data: [u8; 24],
}

impl IfReq {
    fn new(name: &str) -> Self {
        let mut r = IfReq {
            name: [0; 16],
            data: [0; 24],
        };
        let n = name.as_bytes();
        r.name[..n.len().min(15)].copy_from_slice(&n[..n.len().min(15)]);
        r
    }

    fn set_short(&mut self, v: i16) {
        self.data[..2].copy_from_slice(&v.to_ne_bytes());
    }

    fn set_int(&mut self, v: i32) {
        self.data[..4].copy_from_slice(&v.to_ne_bytes());
    }

    fn set_ipv4(&mut self, a: Ipv4Addr) {
        self.data[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        self.data[4..8].copy_from_slice(&a.octets());
    }
}

fn ioctl(fd: i32, req: libc::c_ulong, r: &mut IfReq, what: &str) -> anyhow::Result<()> {
    // SAFETY: r is a valid ifreq for these requests.
    if unsafe { libc::ioctl(fd, req as _, r as *mut IfReq) } != 0 {
        return Err(io::Error::last_os_error()).with_context(|| {
            format!(
                "{what} on {}",
                String::from_utf8_lossy(&r.name).trim_end_matches('\0')
            )
        });
    }
    Ok(())
}

/// A socket to hang interface ioctls on (in the calling thread's namespace).
fn ctl_socket(family: AddressFamily) -> io::Result<OwnedFd> {
    Ok(socket_with(
        family,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Creates TUN device `name` (IP packets, no packet-info header, with a
/// virtio-net header) in the calling thread's namespace; with `offload`
/// the kernel may hand it checksum-less GSO superpackets. Non-blocking.
/// The device disappears when the returned file is closed. Also returns
/// whether UDP segmentation offload took.
pub fn open(name: &str, offload: bool) -> anyhow::Result<(File, bool)> {
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
    };
    let f = match open() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Minimal containers may lack the node though the kernel has
            // TUN: create it (character device 10:200) and retry.
            make_tun_node();
            open()
        }
        r => r,
    }
    .map_err(|e| anyhow::anyhow!("cannot open /dev/net/tun: {e} (is the tun module loaded?)"))?;
    let mut r = IfReq::new(name);
    r.set_short(IFF_TUN | IFF_NO_PI | IFF_VNET_HDR);
    ioctl(f.as_raw_fd(), TUNSETIFF, &mut r, "TUNSETIFF")?;
    if offload {
        // UDP segmentation offload too (Linux 6.2): a UDP GSO send (`-u
        // --gso`, DCCP with --gso) crosses the emulator as one superpacket
        // instead of one read, departure and write per datagram. Without
        // it the lab's forwarder spent a whole core on DCCP's 86k
        // datagrams/s at 1 Gbit/s (11 us each, a third of it arming the
        // wake-up timer), and starved the hosts' threads on 2 CPUs. Older
        // kernels refuse the flags: TCP offload alone then.
        let tcp = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
        if set_offload(&f, tcp | TUN_F_USO4 | TUN_F_USO6).is_ok() {
            return Ok((f, true));
        }
        set_offload(&f, tcp).context("TUNSETOFFLOAD")?;
    } else {
        set_offload(&f, 0).context("TUNSETOFFLOAD")?;
    }
    Ok((f, false))
}

fn set_offload(f: &File, flags: libc::c_uint) -> io::Result<()> {
    // SAFETY: TUNSETOFFLOAD takes an unsigned int by value.
    if unsafe { libc::ioctl(f.as_raw_fd(), TUNSETOFFLOAD as _, flags as libc::c_ulong) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn make_tun_node() {
    use rustix::fs::{makedev, mknodat, FileType, Mode, CWD};
    let _ = std::fs::create_dir_all("/dev/net");
    // Failure just leaves the open error.
    let _ = mknodat(
        CWD,
        "/dev/net/tun",
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o666),
        makedev(10, 200),
    );
}

/// Brings interface `name` up.
pub fn set_up(name: &str) -> anyhow::Result<()> {
    let s = ctl_socket(AddressFamily::INET).context("socket")?;
    let mut r = IfReq::new(name);
    ioctl(s.as_raw_fd(), SIOCGIFFLAGS, &mut r, "SIOCGIFFLAGS")?;
    let flags = i16::from_ne_bytes([r.data[0], r.data[1]]) | libc::IFF_UP as i16;
    r.set_short(flags);
    ioctl(
        s.as_raw_fd(),
        SIOCSIFFLAGS,
        &mut r,
        "bringing the interface up",
    )
}

/// Configures a point-to-point interface: local address, peer (the
/// prefix `peer & mask` is routed through it), MTU and transmit queue
/// length, then up.
pub fn configure(
    name: &str,
    local: Ipv4Addr,
    peer: Ipv4Addr,
    mask: Ipv4Addr,
    mtu: u32,
    txqueuelen: u32,
) -> anyhow::Result<()> {
    let s = ctl_socket(AddressFamily::INET).context("socket")?;
    let fd = s.as_raw_fd();
    let mut r = IfReq::new(name);
    r.set_ipv4(local);
    ioctl(fd, SIOCSIFADDR, &mut r, "setting the address")?;
    let mut r = IfReq::new(name);
    r.set_ipv4(mask);
    ioctl(fd, SIOCSIFNETMASK, &mut r, "setting the netmask")?;
    let mut r = IfReq::new(name);
    r.set_ipv4(peer);
    ioctl(fd, SIOCSIFDSTADDR, &mut r, "setting the peer address")?;
    let mut r = IfReq::new(name);
    r.set_int(mtu as i32);
    ioctl(fd, SIOCSIFMTU, &mut r, "setting the MTU")?;
    let mut r = IfReq::new(name);
    r.set_int(txqueuelen as i32);
    ioctl(fd, SIOCSIFTXQLEN, &mut r, "setting txqueuelen")?;
    set_up(name)
}

/// `struct in6_ifreq`.
#[repr(C)]
struct In6IfReq {
    addr: [u8; 16],
    prefixlen: u32,
    ifindex: i32,
}

/// Adds an IPv6 address with its on-link prefix to `name` (a TUN device
/// is point-to-point and NOARP: no neighbour discovery, no DAD wait).
pub fn add_ipv6(name: &str, addr: Ipv6Addr, prefixlen: u32) -> anyhow::Result<()> {
    let s = ctl_socket(AddressFamily::INET).context("socket")?;
    let mut r = IfReq::new(name);
    ioctl(s.as_raw_fd(), SIOCGIFINDEX, &mut r, "SIOCGIFINDEX")?;
    let ifindex = i32::from_ne_bytes([r.data[0], r.data[1], r.data[2], r.data[3]]);
    let fd6 = ctl_socket(AddressFamily::INET6).context("IPv6 socket")?;
    let mut req = In6IfReq {
        addr: addr.octets(),
        prefixlen,
        ifindex,
    };
    // SAFETY: SIOCSIFADDR on an AF_INET6 socket takes an in6_ifreq.
    if unsafe { libc::ioctl(fd6.as_raw_fd(), SIOCSIFADDR as _, &mut req as *mut In6IfReq) } != 0 {
        return Err(io::Error::last_os_error())
            .with_context(|| format!("adding {addr}/{prefixlen} to {name}"));
    }
    Ok(())
}
