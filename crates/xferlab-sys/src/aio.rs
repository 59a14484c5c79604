//! Linux native AIO (io_setup/io_submit/io_getevents) on FunctionFS
//! endpoint files: the "AIO user space" of study 4, with a configurable
//! number of requests in flight. Raw syscalls; the structs are the kernel's
//! uapi layout (include/uapi/linux/aio_abi.h, little-endian x86_64/arm64).
//!
//! A request's buffer is the kernel's while it is in flight: [`Aio::submit`]
//! takes it by value and the completion gives it back, so no one can touch
//! it meanwhile, and the context is destroyed (waiting for what is in
//! flight) before the buffers it holds are freed.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

const CMD_PREAD: u16 = 0;
const CMD_PWRITE: u16 = 1;

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct Iocb {
    data: u64,
    key: u32,
    rw_flags: i32,
    opcode: u16,
    reqprio: i16,
    fildes: u32,
    buf: u64,
    nbytes: u64,
    offset: i64,
    reserved2: u64,
    flags: u32,
    resfd: u32,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

/// One AIO context; destroyed (cancelling what is in flight) on drop.
struct Context {
    ctx: libc::c_ulong,
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: destroys our own context; waits for requests in flight.
        unsafe { libc::syscall(libc::SYS_io_destroy, self.ctx) };
    }
}

/// Which way a request moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Read from the file into the buffer.
    Read,
    /// Write the buffer to the file.
    Write,
}

/// A completed request.
pub struct Completion {
    /// The slot it was submitted in.
    pub slot: usize,
    /// Bytes moved, or a negative errno.
    pub res: i64,
    /// The request's buffer, back from the kernel.
    pub buf: Vec<u8>,
}

/// An AIO context with `n` request slots, each holding its request's
/// buffer while the kernel does.
pub struct Aio {
    // Dropped first: io_destroy waits for the requests in flight, whose
    // buffers `slots` still holds.
    ctx: Context,
    slots: Vec<Option<Vec<u8>>>,
    events: Vec<IoEvent>,
    ready: usize,
}

impl Aio {
    /// A context for `n` requests in flight.
    ///
    /// The io_* calls are raw syscalls: neither rustix nor nix wraps
    /// Linux AIO (the FunctionFS data path's interface).
    pub fn new(n: usize) -> io::Result<Aio> {
        let mut ctx: libc::c_ulong = 0;
        // SAFETY: io_setup writes the context id into `ctx`.
        let r = unsafe { libc::syscall(libc::SYS_io_setup, n as libc::c_long, &mut ctx) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Aio {
            ctx: Context { ctx },
            slots: (0..n).map(|_| None).collect(),
            events: vec![IoEvent::default(); n],
            ready: 0,
        })
    }

    /// How many slots there are.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Whether `slot` has a request in flight.
    pub fn in_flight(&self, slot: usize) -> bool {
        self.slots[slot].is_some()
    }

    /// Submits one request in the free `slot`: `op` on `fd` with the
    /// first `len` bytes of `buf`. The buffer is the kernel's until its
    /// completion hands it back; on an error it comes back at once.
    pub fn submit(
        &mut self,
        slot: usize,
        fd: impl AsFd,
        op: Op,
        mut buf: Vec<u8>,
        len: usize,
    ) -> Result<(), (io::Error, Vec<u8>)> {
        assert!(self.slots[slot].is_none(), "AIO slot {slot} is in flight");
        assert!(
            len <= buf.len(),
            "{len} bytes of a {}-byte buffer",
            buf.len()
        );
        let mut cb = Iocb {
            data: slot as u64,
            opcode: match op {
                Op::Read => CMD_PREAD,
                Op::Write => CMD_PWRITE,
            },
            fildes: fd.as_fd().as_raw_fd() as u32,
            buf: buf.as_mut_ptr() as u64,
            nbytes: len as u64,
            ..Iocb::default()
        };
        let mut p: *mut Iocb = &mut cb;
        // SAFETY: one valid iocb pointer; the kernel copies the iocb itself,
        // and the buffer it names (`len` bytes of `buf`'s heap memory, which
        // does not move with the Vec) is kept in `slots` until the request's
        // event is taken, or the context destroyed.
        let r =
            unsafe { libc::syscall(libc::SYS_io_submit, self.ctx.ctx, 1 as libc::c_long, &mut p) };
        if r < 0 {
            return Err((io::Error::last_os_error(), buf));
        }
        self.slots[slot] = Some(buf);
        Ok(())
    }

    /// Waits up to `timeout` for at least one completion; how many came
    /// (take them with [`Aio::completion`]).
    pub fn wait(&mut self, timeout: Duration) -> io::Result<usize> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        self.ready = 0;
        // SAFETY: events is a valid array of len entries.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_getevents,
                self.ctx.ctx,
                1 as libc::c_long,
                self.events.len() as libc::c_long,
                self.events.as_mut_ptr(),
                &ts,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        self.ready = r as usize;
        Ok(self.ready)
    }

    /// Completion `k` of the last [`Aio::wait`], with its buffer; None if
    /// taken already.
    pub fn completion(&mut self, k: usize) -> Option<Completion> {
        if k >= self.ready {
            return None;
        }
        let ev = self.events[k];
        let slot = ev.data as usize;
        let buf = self.slots.get_mut(slot)?.take()?;
        Some(Completion {
            slot,
            res: ev.res,
            buf,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uapi_layout() {
        assert_eq!(size_of::<Iocb>(), 64);
        assert_eq!(size_of::<IoEvent>(), 32);
    }

    /// AIO on a plain file: the same calls the gadget makes on ep files.
    #[test]
    fn reads_a_file_through_aio() {
        let path = std::env::temp_dir().join(format!("xferlab-aio-{}", std::process::id()));
        std::fs::write(&path, b"hello aio").unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let mut aio = Aio::new(4).unwrap();
        aio.submit(3, &f, Op::Read, vec![0u8; 64], 64)
            .map_err(|(e, _)| e)
            .unwrap();
        assert!(aio.in_flight(3));
        let n = aio.wait(Duration::from_secs(5)).unwrap();
        assert_eq!(n, 1);
        let c = aio.completion(0).unwrap();
        assert_eq!((c.slot, c.res), (3, 9));
        assert_eq!(&c.buf[..9], b"hello aio");
        assert!(aio.completion(0).is_none(), "taken once");
        assert!(!aio.in_flight(3));
        std::fs::remove_file(&path).ok();
    }
}
