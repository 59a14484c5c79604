//! Linux native AIO (io_setup/io_submit/io_getevents) on FunctionFS
//! endpoint files: the "AIO user space" of study 4, with a configurable
//! number of requests in flight. Raw syscalls; the structs are the kernel's
//! uapi layout (include/uapi/linux/aio_abi.h, little-endian x86_64/arm64).

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

pub const CMD_PREAD: u16 = 0;
pub const CMD_PWRITE: u16 = 1;

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct Iocb {
    pub data: u64,
    pub key: u32,
    pub rw_flags: i32,
    pub opcode: u16,
    pub reqprio: i16,
    pub fildes: u32,
    pub buf: u64,
    pub nbytes: u64,
    pub offset: i64,
    pub reserved2: u64,
    pub flags: u32,
    pub resfd: u32,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct IoEvent {
    pub data: u64,
    pub obj: u64,
    pub res: i64,
    pub res2: i64,
}

/// One AIO context; destroyed (cancelling what is in flight) on drop.
pub struct Context {
    ctx: libc::c_ulong,
}

impl Context {
    /// The io_* calls are raw syscalls: neither rustix nor nix wraps
    /// Linux AIO (the FunctionFS data path's interface).
    pub fn new(max_events: u32) -> io::Result<Context> {
        let mut ctx: libc::c_ulong = 0;
        // SAFETY: io_setup writes the context id into `ctx`.
        let r = unsafe { libc::syscall(libc::SYS_io_setup, max_events as libc::c_long, &mut ctx) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Context { ctx })
    }

    /// Submits one request. The buffer behind `cb.buf` must stay put until
    /// its event comes back (the caller owns the buffers for the context's life).
    pub fn submit(&self, cb: &mut Iocb) -> io::Result<()> {
        let mut p: *mut Iocb = cb;
        // SAFETY: one valid iocb pointer; the kernel copies the iocb itself.
        let r = unsafe { libc::syscall(libc::SYS_io_submit, self.ctx, 1 as libc::c_long, &mut p) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout` for at least one completion.
    pub fn get_events(&self, events: &mut [IoEvent], timeout: Duration) -> io::Result<usize> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: events is a valid array of len entries.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_getevents,
                self.ctx,
                1 as libc::c_long,
                events.len() as libc::c_long,
                events.as_mut_ptr(),
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
        Ok(r as usize)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: destroys our own context; waits for requests in flight.
        unsafe { libc::syscall(libc::SYS_io_destroy, self.ctx) };
    }
}

pub fn iocb(fd: RawFd, opcode: u16, buf: &mut [u8], data: u64) -> Iocb {
    Iocb {
        data,
        opcode,
        fildes: fd as u32,
        buf: buf.as_mut_ptr() as u64,
        nbytes: buf.len() as u64,
        ..Iocb::default()
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
        use std::os::fd::AsRawFd;
        let ctx = Context::new(4).unwrap();
        let mut buf = vec![0u8; 64];
        let mut cb = iocb(f.as_raw_fd(), CMD_PREAD, &mut buf, 7);
        ctx.submit(&mut cb).unwrap();
        let mut ev = [IoEvent::default(); 4];
        let n = ctx.get_events(&mut ev, Duration::from_secs(5)).unwrap();
        assert_eq!(n, 1);
        assert_eq!((ev[0].data, ev[0].res), (7, 9));
        assert_eq!(&buf[..9], b"hello aio");
        std::fs::remove_file(&path).ok();
    }
}
