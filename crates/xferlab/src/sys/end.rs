//! A session's end as a file descriptor: threads that wait on a session's
//! behalf (for UDP attach datagrams, for stream hellos) poll it beside
//! their sockets and stop the moment the session is over, instead of
//! holding threads and sockets until a deadline of their own.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::pipe::{pipe_with, PipeFlags};

/// Held by the session; dropping it (the session ended, however) wakes
/// every [`EndWatch`].
pub struct SessionEnd {
    _write: OwnedFd,
}

/// The waiting side: readable (hung up) once the session has ended.
#[derive(Clone)]
pub struct EndWatch {
    read: Arc<OwnedFd>,
}

/// A new end signal and its watch.
pub fn session_end() -> io::Result<(SessionEnd, EndWatch)> {
    let (read, write) = pipe_with(PipeFlags::CLOEXEC)?;
    Ok((
        SessionEnd { _write: write },
        EndWatch {
            read: Arc::new(read),
        },
    ))
}

impl EndWatch {
    /// Whether the session has ended (does not block).
    pub fn ended(&self) -> bool {
        let mut fds = [PollFd::new(&*self.read, PollFlags::IN)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0)
    }
}

impl AsFd for EndWatch {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_fires_when_the_end_is_dropped() {
        let (end, watch) = session_end().unwrap();
        let other = watch.clone();
        assert!(!watch.ended());
        drop(end);
        assert!(watch.ended() && other.ended());
    }
}
