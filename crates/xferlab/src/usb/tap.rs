//! The TAP device of xferlab's own USB network link (both ends): a
//! non-persistent TAP, so the kernel removes it when the process ends,
//! after SIGKILL too; optionally with offloads (a `virtio_net_hdr` before
//! each packet, TCP super-frames and checksums left to us).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

use anyhow::{anyhow, bail};

/// The largest Ethernet frame the TAP hands us (MTU 1500 + header; VLAN
/// tags and jumbo frames are not carried).
pub const FRAME_MAX: usize = 1518;

/// IFF_VNET_HDR (linux/if_tun.h).
const IFF_VNET_HDR: libc::c_int = 0x4000;
/// TUNSETOFFLOAD, `_IOW('T', 208, unsigned int)`.
const TUNSETOFFLOAD: libc::Ioctl = libc::_IOW::<libc::c_uint>(b'T' as u32, 208);
/// TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6.
const OFFLOADS: libc::c_ulong = 0x01 | 0x02 | 0x04;

/// A non-persistent TAP device (IFF_TAP | IFF_NO_PI): one read() or
/// write() is one Ethernet frame. With `offload`, each read() and write()
/// starts with a `virtio_net_hdr` (xferlab_core::usb::net::gso), and the
/// kernel hands over TCP super-frames of up to 64 KB with their checksums
/// to fill in (TSO and checksum offload), as it does to a virtual NIC.
pub fn open_tap(name: &str, offload: bool) -> anyhow::Result<File> {
    if name.is_empty() || name.len() > 15 || name.contains(['/', ' ']) {
        bail!("--tap {name}: an interface name is 1 to 15 characters, no '/' or spaces");
    }
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/net/tun")
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                anyhow!("no /dev/net/tun: load the tun module (`modprobe tun`)")
            }
            std::io::ErrorKind::PermissionDenied => {
                anyhow!("cannot open /dev/net/tun: a TAP device needs root (or CAP_NET_ADMIN)")
            }
            _ => anyhow!("cannot open /dev/net/tun: {e}"),
        })?;
    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    let mut req = IfReq {
        name: [0; 16],
        flags: (libc::IFF_TAP | libc::IFF_NO_PI | if offload { IFF_VNET_HDR } else { 0 })
            as libc::c_short,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes one struct ifreq of ours.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::TUNSETIFF as _, &mut req as *mut IfReq) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        bail!("cannot create TAP device {name}: {e} (is the name taken? `ip link show {name}`)");
    }
    if offload {
        // SAFETY: TUNSETOFFLOAD takes its flags by value.
        let r = unsafe { libc::ioctl(f.as_raw_fd(), TUNSETOFFLOAD, OFFLOADS) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            bail!("cannot enable TSO and checksum offload on TAP device {name}: {e}");
        }
    }
    Ok(f)
}

/// Writes one packet to a TAP opened with `offload`: its `virtio_net_hdr`
/// (the GRO merger's: all zeros for a frame as it came, or a TCP
/// super-frame's) and the Ethernet frame.
pub fn write_vnet(tap: &File, hdr: &[u8], frame: &[u8]) -> std::io::Result<usize> {
    let iov = [
        libc::iovec {
            iov_base: hdr.as_ptr() as *mut libc::c_void,
            iov_len: hdr.len(),
        },
        libc::iovec {
            iov_base: frame.as_ptr() as *mut libc::c_void,
            iov_len: frame.len(),
        },
    ];
    // SAFETY: two iovecs over memory we own that writev only reads.
    let n = unsafe { libc::writev(tap.as_raw_fd(), iov.as_ptr(), 2) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// The wait until `due` (the coalescer's open transfer's deadline, on
/// `clock::now()`'s time line) from `now`, never longer than 50 ms, so a
/// link's loop sees its stop flag: for ppoll.
pub fn wait_until(
    due: Option<xferlab_core::time::Time>,
    now: xferlab_core::time::Time,
) -> libc::timespec {
    const MAX_WAIT_NS: u64 = 50_000_000;
    let wait_ns = due
        .map(|d| d.as_nanos().saturating_sub(now.as_nanos()))
        .unwrap_or(MAX_WAIT_NS)
        .min(MAX_WAIT_NS);
    libc::timespec {
        tv_sec: 0,
        tv_nsec: wait_ns as libc::c_long,
    }
}

/// Waits until the TAP `fd` has a frame, or until [`wait_until`]'s time.
pub fn wait_frame(fd: std::os::fd::RawFd, due: Option<xferlab_core::time::Time>) {
    let ts = wait_until(due, crate::sys::clock::now());
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd and a timespec of ours.
    unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
}
