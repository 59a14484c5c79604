//! The send side of a DCCP flow's socket: packet buffers and message
//! headers for sendmmsg, built once ([`xferlab_sys::mmsg::TxBatch`]); the
//! connection writes each packet straight into its place. With `--gso` on
//! the UDP carrier, packets of one length that follow each other travel
//! as one message with UDP_SEGMENT (a "train"): the kernel cuts it into
//! the same datagrams, each with its own UDP header and checksum, after
//! one pass through the socket layer and the route. DCCP's own header and
//! checksum are per packet and already written.

use std::io;
use std::os::fd::BorrowedFd;

use xferlab_core::spec::limits::OLD_GSO_SEGMENTS;
use xferlab_sys::mmsg;

use super::super::datagram::transient;

/// Datagrams per train: the limit of every kernel that has UDP_SEGMENT
/// (128 from Linux 6.2 on, 64 before), so no send meets EINVAL for it.
const MAX_TRAIN_PACKETS: usize = OLD_GSO_SEGMENTS as usize;

pub(super) struct TxBatch(mmsg::TxBatch);

impl TxBatch {
    /// Room for `n` packets of at most `cap` bytes each.
    pub(super) fn new(cap: usize, n: usize, gso: bool) -> Self {
        TxBatch(mmsg::TxBatch::new(cap, n, gso, MAX_TRAIN_PACKETS))
    }

    /// The next free slot, None when the batch is full.
    pub(super) fn slot(&mut self) -> Option<&mut [u8]> {
        self.0.slot()
    }

    /// Takes the `len` bytes just written into the slot.
    pub(super) fn commit(&mut self, len: usize) {
        self.0.commit(len);
    }

    /// Packets written and not yet cleared.
    pub(super) fn filled(&self) -> usize {
        self.0.filled()
    }

    /// Whether written packets wait for room in the socket.
    pub(super) fn pending(&self) -> bool {
        self.0.pending()
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }

    /// Sends what is written and not yet sent on `fd`; returns how many
    /// messages the socket took (a full socket buffer takes fewer, or
    /// none).
    pub(super) fn flush(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        match self.0.flush(fd) {
            Err(e) if transient(&e) => Ok(0),
            Err(e)
                if self.0.gso() && matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EIO)) =>
            {
                // A kernel or route without UDP GSO: packet by packet
                // from now on.
                tracing::debug!(error = %e, "UDP_SEGMENT refused; DCCP sends packet by packet");
                self.0.refuse_gso();
                self.flush(fd)
            }
            r => r,
        }
    }
}
