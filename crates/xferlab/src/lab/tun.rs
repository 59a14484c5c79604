//! TUN devices with virtio-net headers and offloads (so GSO superpackets
//! pass whole), and the few interface ioctls the lab needs (address,
//! point-to-point peer, MTU, queue length, up). Everything acts on the
//! calling thread's network namespace.

use anyhow::Context;
use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};

use rustix::net::AddressFamily;
use xferlab_sys::tun::{
    self, IfCtl, IfReq, IfRequest, Tun, IFF_NO_PI, IFF_TUN, IFF_VNET_HDR, TUN_F_CSUM, TUN_F_TSO4,
    TUN_F_TSO6, TUN_F_USO4, TUN_F_USO6,
};

/// An interface ioctl on `ctl` for `r`, its error naming `what` and the
/// interface.
fn ioctl(ctl: &IfCtl, req: IfRequest, r: &mut IfReq, what: &str) -> anyhow::Result<()> {
    ctl.ioctl(req, r)
        .with_context(|| format!("{what} on {}", r.name()))
}

/// Creates TUN device `name` (IP packets, no packet-info header, with a
/// virtio-net header) in the calling thread's namespace; with `offload`
/// the kernel may hand it checksum-less GSO superpackets. Non-blocking.
/// The device disappears when the returned file is closed. Also returns
/// whether UDP segmentation offload took.
pub fn open(name: &str, offload: bool) -> anyhow::Result<(File, bool)> {
    let open = || Tun::open(libc::O_NONBLOCK);
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
    f.set_iff(&mut r)
        .with_context(|| format!("TUNSETIFF on {}", r.name()))?;
    if offload {
        // UDP segmentation offload too (Linux 6.2): a UDP GSO send (`-u
        // --gso`, DCCP with --gso) crosses the emulator as one superpacket
        // instead of one read, departure and write per datagram. Without
        // it the lab's forwarder spent a whole core on DCCP's 86k
        // datagrams/s at 1 Gbit/s (11 us each, a third of it arming the
        // wake-up timer), and starved the hosts' threads on 2 CPUs. Older
        // kernels refuse the flags: TCP offload alone then.
        let tcp = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
        if f.set_offload(tcp | TUN_F_USO4 | TUN_F_USO6).is_ok() {
            return Ok((f.into_file(), true));
        }
        f.set_offload(tcp).context("TUNSETOFFLOAD")?;
    } else {
        f.set_offload(0).context("TUNSETOFFLOAD")?;
    }
    Ok((f.into_file(), false))
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
    let s = IfCtl::new(AddressFamily::INET).context("socket")?;
    let mut r = IfReq::new(name);
    ioctl(&s, IfRequest::GetFlags, &mut r, "SIOCGIFFLAGS")?;
    let flags = r.short() | libc::IFF_UP as i16;
    r.set_short(flags);
    ioctl(&s, IfRequest::SetFlags, &mut r, "bringing the interface up")
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
    let s = IfCtl::new(AddressFamily::INET).context("socket")?;
    let fd = &s;
    let mut r = IfReq::new(name);
    r.set_ipv4(local);
    ioctl(fd, IfRequest::SetAddr, &mut r, "setting the address")?;
    let mut r = IfReq::new(name);
    r.set_ipv4(mask);
    ioctl(fd, IfRequest::SetNetmask, &mut r, "setting the netmask")?;
    let mut r = IfReq::new(name);
    r.set_ipv4(peer);
    ioctl(
        fd,
        IfRequest::SetDstAddr,
        &mut r,
        "setting the peer address",
    )?;
    let mut r = IfReq::new(name);
    r.set_int(mtu as i32);
    ioctl(fd, IfRequest::SetMtu, &mut r, "setting the MTU")?;
    let mut r = IfReq::new(name);
    r.set_int(txqueuelen as i32);
    ioctl(fd, IfRequest::SetTxQueueLen, &mut r, "setting txqueuelen")?;
    set_up(name)
}

/// Adds an IPv6 address with its on-link prefix to `name` (a TUN device
/// is point-to-point and NOARP: no neighbour discovery, no DAD wait).
pub fn add_ipv6(name: &str, addr: Ipv6Addr, prefixlen: u32) -> anyhow::Result<()> {
    let s = IfCtl::new(AddressFamily::INET).context("socket")?;
    let mut r = IfReq::new(name);
    ioctl(&s, IfRequest::GetIndex, &mut r, "SIOCGIFINDEX")?;
    let ifindex = r.int();
    tun::add_ipv6(addr, prefixlen, ifindex)
        .with_context(|| format!("adding {addr}/{prefixlen} to {name}"))
}
