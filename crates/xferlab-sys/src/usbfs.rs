//! Bulk URBs on a usbfs device node of our own (/dev/bus/usb/BBB/DDD):
//! claiming an interface (detaching its kernel driver), a fixed set of
//! URBs with preallocated buffers, and submitting, reaping and
//! discarding them with the usbfs ioctls. The node's descriptor is
//! exposed so a thread can poll it (POLLOUT: a URB completed) next to
//! its other descriptors: nusb completes URBs on its own event thread and
//! wakes the waiting one, two wake-ups per transfer that a link of one
//! frame per transfer cannot afford (docs/usb-net.md). Two threads may
//! share the set: one reaps, and each slot belongs to one thread at a
//! time (see [`Urbs`]).
//!
//! Buffers are mapped from the usbfs node (its mmap) when the kernel
//! allows, so neither submitting nor reaping copies; otherwise plain memory,
//! which usbfs copies.
//!
//! Who may touch a slot is checked at run time: a slot is idle, held by
//! one thread (a [`Held`] guard from [`Urbs::claim`]), or the kernel's
//! (submitted, until reaped); a claim is one compare-and-swap.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_uint, c_void};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// `struct usbdevfs_urb` (linux/usbdevice_fs.h), without ISO descriptors.
#[repr(C)]
struct Urb {
    kind: u8,
    endpoint: u8,
    status: c_int,
    flags: c_uint,
    buffer: *mut c_void,
    buffer_length: c_int,
    actual_length: c_int,
    start_frame: c_int,
    stream_id: c_uint,
    error_count: c_int,
    signr: c_uint,
    usercontext: *mut c_void,
}

#[repr(C)]
struct DisconnectClaim {
    interface: c_uint,
    flags: c_uint,
    driver: [u8; 256],
}

#[repr(C)]
struct SetInterface {
    interface: c_uint,
    alt_setting: c_uint,
}

#[repr(C)]
struct IoctlArg {
    interface: c_int,
    ioctl_code: c_int,
    data: *mut c_void,
}

const U: u32 = b'U' as u32;
const SETINTERFACE: libc::Ioctl = libc::_IOR::<SetInterface>(U, 4);
const SUBMITURB: libc::Ioctl = libc::_IOR::<Urb>(U, 10);
const DISCARDURB: libc::Ioctl = libc::_IO(U, 11);
const REAPURBNDELAY: libc::Ioctl = libc::_IOW::<*mut c_void>(U, 13);
const RELEASEINTERFACE: libc::Ioctl = libc::_IOR::<c_uint>(U, 16);
const IOCTL: libc::Ioctl = libc::_IOWR::<IoctlArg>(U, 18);
const CONNECT: libc::Ioctl = libc::_IO(U, 23);
const DISCONNECT_CLAIM: libc::Ioctl = libc::_IOR::<DisconnectClaim>(U, 27);
const URB_TYPE_BULK: u8 = 3;
const URB_ZERO_PACKET: c_uint = 0x40;
/// DISCONNECT_CLAIM: detach any driver but usbfs itself (named in `driver`).
const DISCONNECT_CLAIM_EXCEPT_DRIVER: c_uint = 0x02;
/// The character major of USB device nodes (USB_DEVICE_MAJOR).
const USB_DEVICE_MAJOR: u32 = 189;

fn check(r: c_int) -> io::Result<c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// An open usbfs device node with at most one interface claimed; the
/// claim is released (and the kernel asked to bind a driver again) on drop.
pub struct Node {
    fd: OwnedFd,
    claimed: Option<u8>,
}

impl Node {
    /// Opens the usbfs node at `path`. Anything but a USB device node
    /// (character major 189) is refused: the usbfs ioctls below would mean
    /// something else to another driver.
    pub fn open(path: &str) -> io::Result<Node> {
        let fd = rustix::fs::open(
            path,
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        let st = rustix::fs::fstat(&fd)?;
        let chr = rustix::fs::FileType::from_raw_mode(st.st_mode)
            == rustix::fs::FileType::CharacterDevice;
        if !chr || rustix::fs::major(st.st_rdev) != USB_DEVICE_MAJOR {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{path} is not a USB device node"),
            ));
        }
        Ok(Node { fd, claimed: None })
    }

    /// Claims `interface`, detaching the kernel driver that holds it.
    pub fn detach_and_claim(&mut self, interface: u8) -> io::Result<()> {
        let mut dc = DisconnectClaim {
            interface: interface.into(),
            flags: DISCONNECT_CLAIM_EXCEPT_DRIVER,
            driver: [0; 256],
        };
        dc.driver[..5].copy_from_slice(b"usbfs");
        // SAFETY: the ioctl reads one struct usbdevfs_disconnect_claim of ours.
        check(unsafe { libc::ioctl(self.fd.as_raw_fd(), DISCONNECT_CLAIM, &mut dc) })?;
        self.claimed = Some(interface);
        Ok(())
    }

    pub fn set_interface(&self, interface: u8, alt: u8) -> io::Result<()> {
        let mut s = SetInterface {
            interface: interface.into(),
            alt_setting: alt.into(),
        };
        // SAFETY: the ioctl reads one struct usbdevfs_setinterface of ours.
        check(unsafe { libc::ioctl(self.fd.as_raw_fd(), SETINTERFACE, &mut s) }).map(drop)
    }

    fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let Some(n) = self.claimed else { return };
        let fd = self.fd.as_raw_fd();
        let mut intf = c_uint::from(n);
        // SAFETY: RELEASEINTERFACE reads one unsigned int of ours.
        if unsafe { libc::ioctl(fd, RELEASEINTERFACE, &mut intf) } == 0 {
            let mut arg = IoctlArg {
                interface: n.into(),
                ioctl_code: CONNECT as c_int,
                data: std::ptr::null_mut(),
            };
            // SAFETY: USBDEVFS_IOCTL reads one struct usbdevfs_ioctl of ours;
            // CONNECT takes no data.
            unsafe { libc::ioctl(fd, IOCTL, &mut arg) };
        }
    }
}

/// Buffer memory: a mapping of the usbfs node, or plain memory.
enum Mem {
    Mapped(*mut u8, usize),
    Heap(Box<[u8]>),
}

impl Mem {
    /// A shared mapping of `len` bytes of the usbfs node: memory the host
    /// controller uses directly (usbfs allocates it physically
    /// contiguous, so a large one can fail where small ones do not).
    fn map(fd: RawFd, len: usize) -> Option<Mem> {
        // SAFETY: a fresh shared mapping of the usbfs node at an address
        // the kernel picks (no existing mapping is replaced).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        (p != libc::MAP_FAILED).then_some(Mem::Mapped(p.cast(), len))
    }

    fn ptr(&mut self) -> *mut u8 {
        match self {
            Mem::Mapped(p, _) => *p,
            Mem::Heap(b) => b.as_mut_ptr(),
        }
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        if let Mem::Mapped(p, n) = *self {
            // SAFETY: our own mapping of `n` bytes, no longer referenced.
            unsafe { libc::munmap(p.cast(), n) };
        }
    }
}

/// How the URBs' buffers were laid out, for the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One mapping of the node holds every buffer.
    OneMapping,
    /// A mapping per URB (the one large mapping was refused).
    MappingPerUrb,
    /// Plain memory, which usbfs copies (the node cannot be mapped).
    Heap,
}

impl Layout {
    pub fn label(self) -> &'static str {
        match self {
            Layout::OneMapping => "one_mapping",
            Layout::MappingPerUrb => "mapping_per_urb",
            Layout::Heap => "heap",
        }
    }
}

/// Buffers within one mapping start at multiples of this: a high-speed
/// bulk packet (no buffer starts mid-cache-line or mid-packet).
const ALIGN: usize = 512;

/// A slot's states: nobody's, one thread's (a [`Held`]), the kernel's.
const IDLE: u8 = 0;
const HELD: u8 = 1;
const SUBMITTED: u8 = 2;

struct Slot {
    urb: UnsafeCell<Urb>,
    /// The slot's buffer, in memory [`Urbs`] owns.
    buf: *mut u8,
    len: usize,
    state: AtomicU8,
}

/// A reaped URB.
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    pub slot: usize,
    /// 0, or the errno the transfer failed with (ENOENT/ECONNRESET when
    /// discarded, ESHUTDOWN/ENODEV when the device went, EPIPE a stall).
    pub errno: i32,
    pub len: usize,
}

/// A fixed set of bulk URBs on one device node, each with its own
/// endpoint and buffer. `slots` must not move while the kernel holds a
/// URB (it writes the status back into it when reaped): it is a boxed
/// slice allocated once. Fields drop in order, so the node closes (usbfs
/// kills what is still in flight) before the buffers are freed.
///
/// Shared by threads (`&Urbs`), a slot has one holder at a time: the
/// thread that claims, fills and submits it, then the kernel, then the
/// thread that reaps it and claims it again (or hands its number on to
/// another thread, which claims it). A claim of a slot someone holds, or
/// the kernel does, fails.
pub struct Urbs {
    node: Node,
    slots: Box<[Slot]>,
    busy: AtomicUsize,
    /// The memory the slots' buffers point into.
    _mem: Vec<Mem>,
    layout: Layout,
}

// SAFETY: a slot's URB and buffer are touched only by the one thread that
// holds it (its state, claimed with compare-and-swap, and handed over with
// release/acquire ordering) or by the reaping thread while the kernel hands
// it back; the node is a file descriptor, the count atomic.
unsafe impl Sync for Urbs {}
// SAFETY: the raw pointers are into memory the set owns.
unsafe impl Send for Urbs {}

/// One slot, held by the thread that claimed it: its buffer to fill or
/// read, and its submission. Dropped unsubmitted, the slot is idle again.
pub struct Held<'a> {
    urbs: &'a Urbs,
    slot: usize,
}

impl Urbs {
    /// One URB per `(endpoint, buffer size)`, slot numbers in that order.
    ///
    /// The buffers share one mapping of the node when the kernel grants
    /// it. usbfs finds a submitted URB's mapping by walking the node's
    /// list of mappings, interrupts off, on every submission
    /// (`find_memory_area`, Linux 6.1): with a mapping per URB, the 120
    /// URBs of an ECM link at usbnet's depth made every submission walk
    /// 60 of them on average.
    pub fn new(node: Node, urbs: &[(u8, usize)]) -> Urbs {
        let fd = node.raw_fd();
        let total: usize = urbs
            .iter()
            .map(|&(_, len)| len.next_multiple_of(ALIGN))
            .sum();
        let mut mem = Vec::new();
        let (bufs, layout): (Vec<*mut u8>, Layout) = match Mem::map(fd, total) {
            Some(mut m) => {
                let base = m.ptr();
                mem.push(m);
                let mut at = 0;
                let bufs = urbs
                    .iter()
                    .map(|&(_, len)| {
                        // SAFETY: offsets stay within the `total` bytes mapped.
                        let p = unsafe { base.add(at) };
                        at += len.next_multiple_of(ALIGN);
                        p
                    })
                    .collect();
                (bufs, Layout::OneMapping)
            }
            None => {
                let mut layout = Layout::MappingPerUrb;
                let bufs = urbs
                    .iter()
                    .map(|&(_, len)| {
                        let mut m = Mem::map(fd, len).unwrap_or_else(|| {
                            layout = Layout::Heap;
                            Mem::Heap(vec![0; len].into_boxed_slice())
                        });
                        let p = m.ptr();
                        mem.push(m);
                        p
                    })
                    .collect();
                (bufs, layout)
            }
        };
        let slots = urbs
            .iter()
            .zip(bufs)
            .map(|(&(ep, len), buf)| Slot {
                urb: UnsafeCell::new(Urb {
                    kind: URB_TYPE_BULK,
                    endpoint: ep,
                    status: 0,
                    flags: 0,
                    buffer: std::ptr::null_mut(),
                    buffer_length: 0,
                    actual_length: 0,
                    start_frame: 0,
                    stream_id: 0,
                    error_count: 0,
                    signr: 0,
                    usercontext: std::ptr::null_mut(),
                }),
                buf,
                len,
                state: AtomicU8::new(IDLE),
            })
            .collect();
        Urbs {
            node,
            slots,
            busy: 0.into(),
            _mem: mem,
            layout,
        }
    }

    /// How the buffers were laid out.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The node's descriptor, to poll (POLLOUT: a URB completed).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.node.fd.as_fd()
    }

    /// How many URBs (slots) there are.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Takes `slot` for this thread; None while another thread holds it
    /// or the kernel does (submitted and not yet reaped).
    pub fn claim(&self, slot: usize) -> Option<Held<'_>> {
        self.slots[slot]
            .state
            .compare_exchange(IDLE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Held { urbs: self, slot })
    }

    /// A completed URB, without waiting: `Ok(None)` when none is; ENODEV
    /// once the device is gone and every URB has been reaped. The reaped
    /// slot is idle, for the caller to claim. One thread reaps.
    pub fn reap(&self) -> io::Result<Option<Completion>> {
        let mut p: *mut Urb = std::ptr::null_mut();
        // SAFETY: REAPURBNDELAY stores one pointer into `p`: one of the URBs
        // we submitted, whose status the kernel has written back.
        let r = unsafe { libc::ioctl(self.node.raw_fd(), REAPURBNDELAY, &mut p) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) => Ok(None),
                _ => Err(e),
            };
        }
        // SAFETY: `p` points at one of our slots' URBs (only this set
        // submits on its node, always a slot's URB); the kernel is done with
        // it, and no thread can claim the slot before the store below.
        let (slot, status, actual) =
            unsafe { ((*p).usercontext as usize, (*p).status, (*p).actual_length) };
        let s = &self.slots[slot];
        debug_assert_eq!(s.state.load(Ordering::Relaxed), SUBMITTED);
        s.state.store(IDLE, Ordering::Release);
        self.busy.fetch_sub(1, Ordering::Relaxed);
        Ok(Some(Completion {
            slot,
            errno: -status,
            len: actual.max(0) as usize,
        }))
    }

    /// Asks the kernel to cancel every URB in flight (they complete with
    /// ENOENT, to be reaped).
    pub fn discard_all(&mut self) {
        let fd = self.node.raw_fd();
        for s in self.slots.iter_mut() {
            if *s.state.get_mut() != SUBMITTED {
                continue;
            }
            let urb: *mut Urb = s.urb.get_mut();
            // SAFETY: DISCARDURB takes the address of a URB we submitted;
            // the kernel only looks it up among its own.
            unsafe { libc::ioctl(fd, DISCARDURB, urb) };
        }
    }

    /// Discards everything in flight and reaps it, waiting up to `wait`.
    pub fn cancel_all(&mut self, wait: std::time::Duration) {
        self.discard_all();
        let end = std::time::Instant::now() + wait;
        while *self.busy.get_mut() > 0 {
            match self.reap() {
                Ok(Some(_)) => continue,
                Ok(None) => {}
                Err(_) => break,
            }
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            let mut p = [rustix::event::PollFd::new(
                &self.node.fd,
                rustix::event::PollFlags::OUT,
            )];
            let ms = left.as_millis().max(1);
            let ts = rustix::event::Timespec {
                tv_sec: (ms / 1000) as _,
                tv_nsec: ((ms % 1000) * 1_000_000) as _,
            };
            rustix::event::poll(&mut p, Some(&ts)).ok();
        }
    }
}

impl Held<'_> {
    fn slot(&self) -> &Slot {
        &self.urbs.slots[self.slot]
    }

    /// The slot's number.
    pub fn number(&self) -> usize {
        self.slot
    }

    /// The slot's whole buffer, to fill before an OUT submission.
    pub fn buf_mut(&mut self) -> &mut [u8] {
        let s = self.slot();
        // SAFETY: `len` bytes at `buf` are this slot's alone, alive as long
        // as the `Urbs`, and this thread holds the slot (`&mut self`: one
        // borrow at a time).
        unsafe { std::slice::from_raw_parts_mut(s.buf, s.len) }
    }

    /// The first `len` bytes of the buffer (of a reaped IN transfer).
    pub fn data(&self, len: usize) -> &[u8] {
        let s = self.slot();
        // SAFETY: as in `buf_mut`; shared, as `&self` is.
        let buf = unsafe { std::slice::from_raw_parts(s.buf, s.len) };
        &buf[..len]
    }

    /// Submits the slot's URB for `len` bytes (an IN URB: up to `len`);
    /// `zlp` ends an OUT transfer that fills its last packet with a
    /// zero-length packet. The slot is the kernel's until reaped; on an
    /// error it is idle again.
    pub fn submit(self, len: usize, zlp: bool) -> io::Result<()> {
        let s = self.slot();
        assert!(
            len <= s.len,
            "a {len}-byte transfer in a {}-byte buffer",
            s.len
        );
        let fd = self.urbs.node.raw_fd();
        // SAFETY: this thread holds the slot, so nobody else touches its URB.
        let urb = unsafe { &mut *s.urb.get() };
        urb.status = 0;
        urb.actual_length = 0;
        urb.flags = if zlp { URB_ZERO_PACKET } else { 0 };
        urb.buffer = s.buf.cast();
        urb.buffer_length = len as c_int;
        urb.usercontext = self.slot as *mut c_void;
        let urb: *mut Urb = urb;
        s.state.store(SUBMITTED, Ordering::Relaxed);
        self.urbs.busy.fetch_add(1, Ordering::Relaxed);
        // The slot is the kernel's now (or idle again below), not ours.
        let slot = self.slot;
        let urbs = self.urbs;
        std::mem::forget(self);
        // SAFETY: the URB and its buffer live in `urbs.slots` and the
        // mapping, which do not move or drop while the kernel holds them
        // (see the struct's doc); the buffer holds `len` bytes.
        if let Err(e) = check(unsafe { libc::ioctl(fd, SUBMITURB, urb) }) {
            urbs.busy.fetch_sub(1, Ordering::Relaxed);
            urbs.slots[slot].state.store(IDLE, Ordering::Release);
            return Err(e);
        }
        Ok(())
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.slot().state.store(IDLE, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request numbers match linux/usbdevice_fs.h on x86_64 (as
    /// linux-raw-sys has them): the structs have the kernel's sizes.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn ioctl_numbers_are_the_kernels() {
        assert_eq!(SUBMITURB as u32, 0x8038_550a);
        assert_eq!(DISCARDURB as u32, 0x550b);
        assert_eq!(REAPURBNDELAY as u32, 0x4008_550d);
        assert_eq!(SETINTERFACE as u32, 0x8008_5504);
        assert_eq!(RELEASEINTERFACE as u32, 0x8004_5510);
        assert_eq!(IOCTL as u32, 0xc010_5512);
        assert_eq!(CONNECT as u32, 0x5517);
        assert_eq!(DISCONNECT_CLAIM as u32, 0x8108_551b);
    }
}
