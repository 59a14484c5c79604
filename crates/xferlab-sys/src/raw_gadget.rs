//! Linux's raw-gadget (/dev/raw-gadget, drivers/usb/gadget/legacy/
//! raw_gadget.c): a whole USB device from user space, every call an ioctl
//! that may block.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;

/// The device node.
pub const DEVICE: &str = "/dev/raw-gadget";

// include/uapi/linux/usb/raw_gadget.h (Linux 6.1): _IOC('U', nr) with
// the sizes of its structures.
const INIT: libc::c_ulong = 0x4101_5500;
const RUN: libc::c_ulong = 0x5501;
const EVENT_FETCH: libc::c_ulong = 0x8008_5502;
const EP0_WRITE: libc::c_ulong = 0x4008_5503;
const EP0_READ: libc::c_ulong = 0xc008_5504;
const EP_ENABLE: libc::c_ulong = 0x4009_5505;
const EP_WRITE: libc::c_ulong = 0x4008_5507;
const EP_READ: libc::c_ulong = 0xc008_5508;
const CONFIGURE: libc::c_ulong = 0x5509;
const VBUS_DRAW: libc::c_ulong = 0x4004_550a;
const EPS_INFO: libc::c_ulong = 0x83c0_550b;
const EP0_STALL: libc::c_ulong = 0x550c;

/// struct usb_raw_event / usb_raw_ep_io: a u32/u16 header, then the data.
pub const IO_HEADER: usize = 8;
/// struct usb_raw_init: driver and device names (128 bytes each), speed.
pub const INIT_LEN: usize = 257;
/// struct usb_raw_eps_info: up to 30 struct usb_raw_ep_info of 32 bytes.
pub const EPS_INFO_LEN: usize = 30 * 32;

/// A data transfer on an endpoint (struct usb_raw_ep_io and its data).
#[derive(Debug, Clone, Copy)]
pub enum Io {
    Ep0Write,
    Ep0Read,
    EpWrite,
    EpRead,
}

/// The raw-gadget descriptor; every call may block.
pub struct RawGadget(File);

impl RawGadget {
    /// Opens [`DEVICE`] read-write.
    pub fn open() -> io::Result<RawGadget> {
        Ok(RawGadget(
            OpenOptions::new().read(true).write(true).open(DEVICE)?,
        ))
    }

    fn ioctl(&self, request: libc::c_ulong, arg: *mut u8) -> io::Result<usize> {
        // SAFETY: each caller passes a buffer of the size `request` names
        // (or, for the I/O calls, a header and the length it states), or
        // no pointer for the calls that take none or a value.
        let r = unsafe { libc::ioctl(self.0.as_raw_fd(), request as _, arg) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }

    /// USB_RAW_IOCTL_INIT with a struct usb_raw_init.
    pub fn init(&self, init: &mut [u8; INIT_LEN]) -> io::Result<usize> {
        self.ioctl(INIT, init.as_mut_ptr())
    }

    pub fn run(&self) -> io::Result<usize> {
        self.ioctl(RUN, std::ptr::null_mut())
    }

    pub fn configure(&self) -> io::Result<usize> {
        self.ioctl(CONFIGURE, std::ptr::null_mut())
    }

    pub fn ep0_stall(&self) -> io::Result<usize> {
        self.ioctl(EP0_STALL, std::ptr::null_mut())
    }

    /// USB_RAW_IOCTL_VBUS_DRAW: the current drawn, in 2 mA units (a value,
    /// not a pointer).
    pub fn vbus_draw(&self, units_2ma: u32) -> io::Result<usize> {
        self.ioctl(VBUS_DRAW, units_2ma as usize as *mut u8)
    }

    /// USB_RAW_IOCTL_EP_ENABLE with a 9-byte endpoint descriptor; the
    /// endpoint's handle.
    pub fn ep_enable(&self, desc: &mut [u8; 9]) -> io::Result<usize> {
        self.ioctl(EP_ENABLE, desc.as_mut_ptr())
    }

    /// USB_RAW_IOCTL_EPS_INFO: how many endpoints it described.
    pub fn eps_info(&self, buf: &mut [u8; EPS_INFO_LEN]) -> io::Result<usize> {
        self.ioctl(EPS_INFO, buf.as_mut_ptr())
    }

    /// USB_RAW_IOCTL_EVENT_FETCH into `buf`: its header (written here:
    /// any type, room for `buf.len() - IO_HEADER` bytes), then the event's
    /// data.
    pub fn event_fetch(&self, buf: &mut [u8]) -> io::Result<usize> {
        assert!(buf.len() >= IO_HEADER, "an event buffer holds its header");
        let len = u32::try_from(buf.len() - IO_HEADER).unwrap_or(u32::MAX);
        buf[..4].copy_from_slice(&0u32.to_ne_bytes());
        buf[4..8].copy_from_slice(&len.to_ne_bytes());
        self.ioctl(EVENT_FETCH, buf.as_mut_ptr())
    }

    /// A call on an 8-byte header and its data: `buf[..8]` is written
    /// here, the data follows it. The byte count moved.
    pub fn io(&self, request: Io, ep: u16, flags: u16, buf: &mut [u8]) -> io::Result<usize> {
        assert!(buf.len() >= IO_HEADER, "an I/O buffer holds its header");
        let len = u32::try_from(buf.len() - IO_HEADER).unwrap_or(u32::MAX);
        buf[..2].copy_from_slice(&ep.to_ne_bytes());
        buf[2..4].copy_from_slice(&flags.to_ne_bytes());
        buf[4..8].copy_from_slice(&len.to_ne_bytes());
        let request = match request {
            Io::Ep0Write => EP0_WRITE,
            Io::Ep0Read => EP0_READ,
            Io::EpWrite => EP_WRITE,
            Io::EpRead => EP_READ,
        };
        self.ioctl(request, buf.as_mut_ptr())
    }
}
