//! The byte stream's copy-free paths: sendfile() from a memfd holding the
//! pattern and send(MSG_ZEROCOPY) with its completion queue on the
//! sending side, TCP_ZEROCOPY_RECEIVE (pages mapped into the receiver) on
//! the receiving side. Each is set up once per flow; per call it costs the
//! one system call of its copying counterpart, plus for MSG_ZEROCOPY a
//! non-blocking read of the error queue. The raw calls of the last two
//! are [`xferlab_sys::zerocopy`]'s.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{memfd_create, sendfile, MemfdFlags};
pub use xferlab_sys::zerocopy::{MsgZerocopy, ZerocopyWindow};

/// A file holding `len` bytes of the send pattern, for sendfile().
pub struct SendfileSource {
    file: OwnedFd,
}

impl SendfileSource {
    pub fn new(pattern: &[u8]) -> io::Result<Self> {
        let file = memfd_create("xferlab-send", MemfdFlags::CLOEXEC)?;
        let mut done = 0;
        while done < pattern.len() {
            done += rustix::io::write(&file, &pattern[done..])?;
        }
        Ok(SendfileSource { file })
    }

    /// Sends the file's first `len` bytes (or what the socket takes).
    pub fn send(&self, sock: impl AsFd, len: usize) -> io::Result<usize> {
        let mut offset = 0u64;
        Ok(sendfile(sock, &self.file, Some(&mut offset), len)?)
    }
}

/// send(MSG_ZEROCOPY) on one socket. The pattern buffer never changes, so
/// a send never waits for its completion before the buffer is reused;
/// completions are only read to free the kernel's notification memory
/// and to learn whether it copied after all.
pub fn enable_msg_zerocopy(sock: &impl AsFd) -> Result<MsgZerocopy<'_>, ZerocopyError> {
    MsgZerocopy::enable(sock).map_err(ZerocopyError::Send)
}

/// Why a flow cannot use zero-copy: the reason its result records.
#[derive(Debug, thiserror::Error)]
pub enum ZerocopyError {
    #[error("the kernel refuses SO_ZEROCOPY ({0}): use -Z (sendfile) instead of --zerocopy msg")]
    Send(io::Error),
    #[error(
        "this socket cannot be mapped for TCP_ZEROCOPY_RECEIVE ({0}); leave out --rx-zerocopy"
    )]
    Receive(io::Error),
}

/// What the result should say about the copies, if the kernel made any.
pub fn msg_zerocopy_note(z: &MsgZerocopy<'_>) -> Option<String> {
    (z.copied > 0).then(|| {
        format!(
            "MSG_ZEROCOPY: the kernel copied {} of {} completed sends after all (it always does on loopback)",
            z.copied, z.completed
        )
    })
}

/// A read-only window of `len` bytes (rounded up to pages) onto the
/// socket's receive queue, for TCP_ZEROCOPY_RECEIVE.
pub fn zerocopy_window(sock: &impl AsFd, len: usize) -> Result<ZerocopyWindow<'_>, ZerocopyError> {
    ZerocopyWindow::new(sock, len).map_err(ZerocopyError::Receive)
}

/// The note a zero-copy receiver leaves in the result.
pub fn receive_note(mapped: u64, total: u64) -> Option<String> {
    (total > 0).then(|| {
        format!(
            "TCP_ZEROCOPY_RECEIVE mapped {:.1} % of the bytes received; the rest was copied (partial or unaligned pages)",
            mapped as f64 * 100.0 / total as f64
        )
    })
}
