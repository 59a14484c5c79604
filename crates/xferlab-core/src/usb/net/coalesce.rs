//! Packing frames into transfers: a [`Coalescer`] opens a transfer with
//! the first frame, adds frames while they fit under the size limit and
//! the frames-per-transfer limit, and closes it when either is reached or
//! when the oldest frame has waited the coalescing timeout (time passed
//! in). The byte layout is the [`Framing`]'s (ECM, EEM or NCM).
//!
//! Buffers are recycled: [`Coalescer::take`] hands out the closed
//! transfer and [`Coalescer::recycle`] gives its buffer back once the
//! driver's transfer completed, so a steady link allocates nothing.

use std::time::Duration;

use crate::time::Time;

/// The byte layout of one encapsulation.
pub trait Framing {
    /// Bytes a frame of `frame_len` adds to a transfer that holds `frames`
    /// frames in `used` bytes, including the final headers/tables that
    /// closing will need; `None` if a frame of that size can never be sent.
    fn cost(&self, used: usize, frames: usize, frame_len: usize) -> Option<usize>;
    /// Bytes closing a transfer of `used` bytes and `frames` frames adds
    /// (NCM's pointer table, EEM's zero-length packet), at most.
    fn close_cost(&self, used: usize, frames: usize) -> usize;
    /// Starts a transfer in an empty `buf` (NCM reserves its header).
    fn open(&mut self, buf: &mut Vec<u8>);
    /// Appends one frame.
    fn append(&mut self, buf: &mut Vec<u8>, frame: &[u8]);
    /// Finishes the transfer; true when it must be followed by a
    /// zero-length packet (its length is a multiple of the max packet and
    /// the framing has no padding of its own).
    fn close(&mut self, buf: &mut Vec<u8>) -> bool;
}

/// Limits of one direction of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Frames per transfer (the study's "datagrams per transfer").
    pub max_frames: usize,
    /// Bytes per transfer (NCM: the peer's NTB max size).
    pub max_transfer: usize,
    /// How long the first frame of a transfer may wait for company.
    pub timeout: Duration,
}

/// What [`Coalescer::push`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Push {
    /// Added to the open transfer.
    Added,
    /// The open transfer has no room for it: [`Coalescer::take`] the
    /// closed transfer, then push the frame again.
    Full,
    /// Larger than any transfer can carry: dropped (and counted).
    TooLarge,
}

/// A transfer ready to submit.
#[derive(Debug)]
pub struct Transfer {
    pub buf: Vec<u8>,
    pub frames: usize,
    /// Send a zero-length packet after it (ECM frames of a multiple of the
    /// max packet).
    pub zlp: bool,
}

#[derive(Debug)]
pub struct Coalescer<F> {
    framing: F,
    limits: Limits,
    buf: Vec<u8>,
    frames: usize,
    opened_at: Option<Time>,
    closed: bool,
    zlp: bool,
    spare: Vec<Vec<u8>>,
    /// Frames dropped as too large for any transfer.
    pub too_large: u64,
}

impl<F: Framing> Coalescer<F> {
    pub fn new(framing: F, limits: Limits) -> Self {
        let limits = Limits {
            max_frames: limits.max_frames.max(1),
            ..limits
        };
        Coalescer {
            framing,
            buf: Vec::with_capacity(limits.max_transfer),
            limits,
            frames: 0,
            opened_at: None,
            closed: false,
            zlp: false,
            spare: Vec::new(),
            too_large: 0,
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Frames in the open (or closed, not yet taken) transfer.
    pub fn pending(&self) -> usize {
        self.frames
    }

    /// Adds `frame` at `now`. A transfer that reaches its frame limit is
    /// closed at once: check [`Coalescer::poll_transfer`] after each push.
    pub fn push(&mut self, now: Time, frame: &[u8]) -> Push {
        if self.closed {
            return Push::Full;
        }
        let Some(empty_cost) = self.framing.cost(0, 0, frame.len()) else {
            self.too_large += 1;
            return Push::TooLarge;
        };
        if empty_cost + self.framing.close_cost(empty_cost, 1) > self.limits.max_transfer {
            self.too_large += 1;
            return Push::TooLarge;
        }
        if self.frames > 0 {
            let used = self.buf.len();
            let fits = self
                .framing
                .cost(used, self.frames, frame.len())
                .is_some_and(|c| {
                    used + c + self.framing.close_cost(used + c, self.frames + 1)
                        <= self.limits.max_transfer
                });
            if !fits {
                self.close();
                return Push::Full;
            }
        } else {
            self.buf.clear();
            self.framing.open(&mut self.buf);
            self.opened_at = Some(now);
        }
        self.framing.append(&mut self.buf, frame);
        self.frames += 1;
        if self.frames >= self.limits.max_frames {
            self.close();
        }
        Push::Added
    }

    fn close(&mut self) {
        if !self.closed && self.frames > 0 {
            self.zlp = self.framing.close(&mut self.buf);
            self.closed = true;
        }
    }

    /// When the open transfer's timeout expires (drivers sleep until then).
    pub fn poll_timeout(&self) -> Option<Time> {
        match (self.closed, self.opened_at) {
            (false, Some(t)) if self.frames > 0 => Some(t + self.limits.timeout),
            _ => None,
        }
    }

    /// A closed transfer, if any: full, or its timeout passed at `now`.
    pub fn poll_transfer(&mut self, now: Time) -> Option<Transfer> {
        if !self.closed && self.poll_timeout().is_some_and(|t| now >= t) {
            self.close();
        }
        self.closed.then(|| self.take())
    }

    /// Closes and hands out whatever is pending (end of a burst, or the
    /// driver has an idle pipe and wants no wait), or `None`.
    pub fn flush(&mut self) -> Option<Transfer> {
        self.close();
        self.closed.then(|| self.take())
    }

    fn take(&mut self) -> Transfer {
        let cap = self.limits.max_transfer;
        let next = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(cap));
        let t = Transfer {
            buf: std::mem::replace(&mut self.buf, next),
            frames: self.frames,
            zlp: self.zlp,
        };
        self.buf.clear();
        self.frames = 0;
        self.opened_at = None;
        self.closed = false;
        self.zlp = false;
        t
    }

    /// Gives a taken transfer's buffer back for reuse.
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        buf.clear();
        self.spare.push(buf);
    }
}
