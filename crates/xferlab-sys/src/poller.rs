//! A level-triggered epoll set. Level-triggered so a handler may read
//! once per wake-up and leave the rest for the next one, instead of
//! draining every socket to EAGAIN (one wasted syscall per transaction).
//!
//! epoll and the busy poll below stay hand-written libc calls: they run
//! once per transaction, the rate `rr` measures. rustix's epoll makes the
//! same system calls (epoll_ctl; epoll_pwait with the timeout rounded up
//! to milliseconds, as here) as safe calls; moving this path to it is
//! for a change that runs `bench/rr-vs-peers` before and after.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// An epoll set and the buffer its reports land in.
pub struct Poller {
    epfd: OwnedFd,
    events: Vec<libc::epoll_event>,
    ready: usize,
}

/// One readiness report.
#[derive(Debug, Clone, Copy)]
pub struct Ready {
    pub token: u64,
    pub readable: bool,
    pub writable: bool,
}

fn mask(read: bool, write: bool) -> u32 {
    let mut m = 0;
    if read {
        m |= libc::EPOLLIN | libc::EPOLLRDHUP;
    }
    if write {
        m |= libc::EPOLLOUT;
    }
    m as u32
}

impl Poller {
    pub fn new(capacity: usize) -> io::Result<Poller> {
        // SAFETY: plain syscall; the fd is owned right away.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Poller {
            // SAFETY: a fresh fd nobody else owns (checked non-negative above).
            epfd: unsafe { OwnedFd::from_raw_fd(fd) },
            events: vec![libc::epoll_event { events: 0, u64: 0 }; capacity.max(1)],
            ready: 0,
        })
    }

    fn ctl(
        &self,
        op: libc::c_int,
        fd: BorrowedFd<'_>,
        token: u64,
        read: bool,
        write: bool,
    ) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: mask(read, write),
            u64: token,
        };
        // SAFETY: valid epoll fd and event struct, which the kernel only
        // reads during the call.
        if unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, fd.as_raw_fd(), &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub fn add(&self, fd: &impl AsFd, token: u64, read: bool, write: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd.as_fd(), token, read, write)
    }

    pub fn modify(&self, fd: &impl AsFd, token: u64, read: bool, write: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd.as_fd(), token, read, write)
    }

    pub fn delete(&self, fd: &impl AsFd) {
        self.ctl(libc::EPOLL_CTL_DEL, fd.as_fd(), 0, false, false)
            .ok();
    }

    /// Waits up to `timeout` (None = 0, i.e. a non-blocking look), rounded
    /// up to whole milliseconds; returns how many reports are ready.
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        let ms = timeout.map_or(0, |t| {
            let us = t.as_micros();
            us.div_ceil(1000).min(i32::MAX as u128) as i32
        });
        // SAFETY: the buffer holds `events.len()` entries, and the kernel
        // writes at most that many.
        let n = unsafe {
            libc::epoll_wait(
                self.epfd.as_raw_fd(),
                self.events.as_mut_ptr(),
                self.events.len() as i32,
                ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            self.ready = 0;
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(0)
            } else {
                Err(e)
            };
        }
        self.ready = n as usize;
        Ok(self.ready)
    }

    pub fn get(&self, i: usize) -> Ready {
        let e = self.events[i];
        let bits = e.events;
        let err = bits & (libc::EPOLLERR | libc::EPOLLHUP | libc::EPOLLRDHUP) as u32 != 0;
        Ready {
            token: e.u64,
            // Errors and hang-ups surface through read()/write().
            readable: bits & libc::EPOLLIN as u32 != 0 || err,
            writable: bits & libc::EPOLLOUT as u32 != 0 || err,
        }
    }
}

impl Poller {
    /// As [`Poller::add`] for reading, with EPOLLEXCLUSIVE: of several
    /// threads watching one listening socket, only one is woken.
    pub fn add_exclusive(&self, fd: &impl AsFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32,
            u64: token,
        };
        // SAFETY: valid epoll fd and event struct.
        if unsafe {
            libc::epoll_ctl(
                self.epfd.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd.as_fd().as_raw_fd(),
                &mut ev,
            )
        } < 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Waits up to `budget` for `fd` to become readable by polling it without
/// sleeping (busy-poll); true when it did. The clock is read every few
/// polls only.
pub fn spin_readable(fd: impl AsFd, budget: Duration) -> bool {
    let start = std::time::Instant::now();
    let mut pfd = libc::pollfd {
        fd: fd.as_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        for _ in 0..16 {
            // SAFETY: one valid pollfd, which the kernel writes revents of
            // during the call; zero timeout.
            if unsafe { libc::poll(&mut pfd, 1, 0) } > 0 {
                return true;
            }
            // Yield rather than spin: the peer may have been woken on this
            // very CPU, and it must run for the awaited message to come.
            std::thread::yield_now();
        }
        if start.elapsed() >= budget {
            return false;
        }
    }
}
