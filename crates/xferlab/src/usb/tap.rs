//! The TAP device of xferlab's own USB network link (both ends): a
//! non-persistent TAP, so the kernel removes it when the process ends,
//! after SIGKILL too; optionally with offloads (a `virtio_net_hdr` before
//! each packet, TCP super-frames and checksums left to us).

use std::fs::File;
use std::io::IoSlice;
use std::os::fd::AsFd;

use anyhow::{anyhow, bail};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use xferlab_sys::tun;

/// The largest Ethernet frame the TAP hands us (MTU 1500 + header; VLAN
/// tags and jumbo frames are not carried).
pub const FRAME_MAX: usize = 1518;

/// TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6.
const OFFLOADS: libc::c_uint = tun::TUN_F_CSUM | tun::TUN_F_TSO4 | tun::TUN_F_TSO6;

/// A non-persistent TAP device (IFF_TAP | IFF_NO_PI): one read() or
/// write() is one Ethernet frame. With `offload`, each read() and write()
/// starts with a `virtio_net_hdr` (xferlab_core::usb::net::gso), and the
/// kernel hands over TCP super-frames of up to 64 KB with their checksums
/// to fill in (TSO and checksum offload), as it does to a virtual NIC.
pub fn open_tap(name: &str, offload: bool) -> anyhow::Result<File> {
    if name.is_empty() || name.len() > 15 || name.contains(['/', ' ']) {
        bail!("--tap {name}: an interface name is 1 to 15 characters, no '/' or spaces");
    }
    let f = tun::Tun::open(libc::O_NONBLOCK).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            anyhow!("no /dev/net/tun: load the tun module (`modprobe tun`)")
        }
        std::io::ErrorKind::PermissionDenied => {
            anyhow!("cannot open /dev/net/tun: a TAP device needs root (or CAP_NET_ADMIN)")
        }
        _ => anyhow!("cannot open /dev/net/tun: {e}"),
    })?;
    let mut req = tun::IfReq::new(name);
    req.set_short(tun::IFF_TAP | tun::IFF_NO_PI | if offload { tun::IFF_VNET_HDR } else { 0 });
    if let Err(e) = f.set_iff(&mut req) {
        bail!("cannot create TAP device {name}: {e} (is the name taken? `ip link show {name}`)");
    }
    if offload {
        if let Err(e) = f.set_offload(OFFLOADS) {
            bail!("cannot enable TSO and checksum offload on TAP device {name}: {e}");
        }
    }
    Ok(f.into_file())
}

/// Writes one packet to a TAP opened with `offload`: its `virtio_net_hdr`
/// (the GRO merger's: all zeros for a frame as it came, or a TCP
/// super-frame's) and the Ethernet frame.
pub fn write_vnet(tap: &File, hdr: &[u8], frame: &[u8]) -> std::io::Result<usize> {
    let iov = [IoSlice::new(hdr), IoSlice::new(frame)];
    Ok(rustix::io::writev(tap, &iov)?)
}

/// The wait until `due` (the coalescer's open transfer's deadline, on
/// `clock::now()`'s time line) from `now`, never longer than 50 ms, so a
/// link's loop sees its stop flag: for ppoll.
pub fn wait_until(
    due: Option<xferlab_core::time::Time>,
    now: xferlab_core::time::Time,
) -> Timespec {
    const MAX_WAIT_NS: u64 = 50_000_000;
    let wait_ns = due
        .map(|d| d.as_nanos().saturating_sub(now.as_nanos()))
        .unwrap_or(MAX_WAIT_NS)
        .min(MAX_WAIT_NS);
    Timespec {
        tv_sec: 0,
        tv_nsec: wait_ns as _,
    }
}

/// Waits until the TAP `fd` has a frame, or until [`wait_until`]'s time.
pub fn wait_frame(fd: impl AsFd, due: Option<xferlab_core::time::Time>) {
    let ts = wait_until(due, crate::sys::clock::now());
    let mut p = [PollFd::new(&fd, PollFlags::IN)];
    poll(&mut p, Some(&ts)).ok();
}
