//! usbmon's binary interface (drivers/usb/mon/mon_bin.c): `/dev/usbmonN`
//! with its ring mapped read-only, events fetched in batches
//! (MON_IOCX_MFETCH, non-blocking), and the drop counter.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;

/// struct mon_bin_mfetch { offvec, nfetch, nflush } (drivers/usb/mon/mon_bin.c).
#[repr(C)]
struct MonBinMfetch {
    offvec: *mut u32,
    nfetch: u32,
    nflush: u32,
}

const MON_IOC_MAGIC: u64 = 0x92;
/// _IOWR(0x92, 7, struct mon_bin_mfetch): flush `nflush` events, then
/// return the ring offsets of up to `nfetch` queued ones.
const MON_IOCX_MFETCH: u64 =
    (3 << 30) | ((size_of::<MonBinMfetch>() as u64) << 16) | (MON_IOC_MAGIC << 8) | 7;
/// _IO(0x92, 4): set the ring size (data captured per event is at most a
/// fifth of it).
const MON_IOCT_RING_SIZE: u64 = (MON_IOC_MAGIC << 8) | 4;
/// _IO(0x92, 5): the ring size, as the return value.
const MON_IOCQ_RING_SIZE: u64 = (MON_IOC_MAGIC << 8) | 5;
/// _IOR(0x92, 3, struct mon_bin_stats { u32 queued, dropped }).
const MON_IOCG_STATS: u64 = (2 << 30) | (8 << 16) | (MON_IOC_MAGIC << 8) | 3;
/// struct mon_bin_hdr's size: an event's header, its captured data after.
pub const HDR_LEN: usize = 64;
/// Where mon_bin_hdr holds len_cap (the bytes captured after it).
const LEN_CAP_AT: usize = 36;

/// `/dev/usbmonN`, its ring mapped read-only: events stay put until they
/// are flushed.
pub struct Usbmon {
    file: File,
    base: *const u8,
    len: usize,
}

// SAFETY: the ring is a read-only shared mapping owned by this value; it
// is read through `&mut self` borrows only (see `fetch`), by whichever one
// thread holds the value.
unsafe impl Send for Usbmon {}

/// What [`Usbmon::open`] failed at.
pub enum OpenError {
    /// Opening the node.
    Open(io::Error),
    /// Setting or reading the ring size.
    RingSize(io::Error),
    /// Mapping the ring.
    Map(io::Error),
}

impl Usbmon {
    /// Opens bus `bus`'s node (`/dev/usbmonN`, 0 for all buses),
    /// non-blocking, asks for a ring of `ring_size` bytes and maps what the
    /// kernel granted.
    pub fn open(bus: u8, ring_size: usize) -> Result<Usbmon, OpenError> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(format!("/dev/usbmon{bus}"))
            .map_err(OpenError::Open)?;
        let fd = file.as_raw_fd();
        // SAFETY: usbmon's ring-size ioctls on the node we just opened,
        // with an integer argument and none.
        let ring_len = unsafe {
            libc::ioctl(fd, MON_IOCT_RING_SIZE as _, ring_size as libc::c_ulong);
            libc::ioctl(fd, MON_IOCQ_RING_SIZE as _)
        };
        if ring_len <= 0 {
            return Err(OpenError::RingSize(io::Error::last_os_error()));
        }
        let len = ring_len as usize;
        // SAFETY: a fresh shared read-only mapping of the usbmon ring at an
        // address the kernel picks (no existing mapping is replaced).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(OpenError::Map(io::Error::last_os_error()));
        }
        Ok(Usbmon {
            file,
            base: p as *const u8,
            len,
        })
    }

    /// The ring's size in bytes.
    pub fn ring_len(&self) -> usize {
        self.len
    }

    /// The node, to poll (POLLIN: events queued).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// Flushes the `flush` events fetched last (the kernel may reuse their
    /// bytes from now on), then fetches the ring offsets of up to
    /// `offsets.len()` queued events into `offsets`, without waiting. The
    /// batch reads those events; it borrows the ring, so no other fetch
    /// (and flush) can happen while it lives.
    pub fn fetch<'a>(&'a mut self, offsets: &'a mut [u32], flush: u32) -> io::Result<Batch<'a>> {
        let mut m = MonBinMfetch {
            offvec: offsets.as_mut_ptr(),
            nfetch: u32::try_from(offsets.len()).unwrap_or(u32::MAX),
            nflush: flush,
        };
        // SAFETY: MFETCH writes at most `nfetch` offsets into `offsets` and
        // the counts into `m`, both ours and live for the call.
        let r = unsafe {
            libc::ioctl(
                self.file.as_raw_fd(),
                MON_IOCX_MFETCH as _,
                &mut m as *mut MonBinMfetch,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let n = (m.nfetch as usize).min(offsets.len());
        Ok(Batch {
            ring: self,
            offsets: &offsets[..n],
        })
    }

    /// Bytes at ring offset `off`, if within the ring.
    fn bytes(&self, off: usize, len: usize) -> Option<&[u8]> {
        let end = off.checked_add(len)?;
        // SAFETY: in bounds of the mapping; only called for an event of a
        // live batch, which the kernel does not write until it is flushed
        // (by a fetch, which the batch's borrow rules out meanwhile).
        (end <= self.len).then(|| unsafe { std::slice::from_raw_parts(self.base.add(off), len) })
    }

    /// usbmon's counters: events queued now and dropped so far.
    pub fn stats(&self) -> io::Result<(u32, u32)> {
        let mut stats = [0u32; 2];
        // SAFETY: MON_IOCG_STATS writes two u32 into `stats`.
        let r = unsafe {
            libc::ioctl(
                self.file.as_raw_fd(),
                MON_IOCG_STATS as _,
                stats.as_mut_ptr(),
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((stats[0], stats[1]))
    }
}

impl Drop for Usbmon {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `len` bytes, unmapped once; no batch
        // (and so no slice into it) outlives the value.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// The events one fetch returned, until the next fetch flushes them.
pub struct Batch<'a> {
    ring: &'a Usbmon,
    offsets: &'a [u32],
}

impl<'a> Batch<'a> {
    /// How many events were fetched.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Event `i`'s header (HDR_LEN bytes), None past the ring's end.
    pub fn header(&self, i: usize) -> Option<&'a [u8]> {
        self.ring.bytes(self.offsets[i] as usize, HDR_LEN)
    }

    /// Event `i`'s captured data (len_cap bytes after its header), empty
    /// when it would run past the ring's end.
    pub fn data(&self, i: usize) -> &'a [u8] {
        let Some(h) = self.header(i) else {
            return &[];
        };
        let cap = u32::from_ne_bytes(h[LEN_CAP_AT..LEN_CAP_AT + 4].try_into().expect("4 bytes"));
        self.ring
            .bytes(self.offsets[i] as usize + HDR_LEN, cap as usize)
            .unwrap_or(&[])
    }
}
