//! The application's outgoing datagrams, waiting for the CCID to let them
//! go: a bounded FIFO whose buffers are reused, so the steady state
//! allocates nothing per datagram.

use std::collections::VecDeque;

#[derive(Debug, Default)]
pub struct DatagramQueue {
    queued: VecDeque<Vec<u8>>,
    spare: Vec<Vec<u8>>,
    bytes: usize,
    cap_bytes: usize,
}

impl DatagramQueue {
    pub fn new(cap_bytes: usize) -> Self {
        DatagramQueue {
            cap_bytes,
            ..Default::default()
        }
    }

    /// Queues a copy of `data`; false (and nothing queued) when full.
    pub fn push(&mut self, data: &[u8]) -> bool {
        if self.bytes + data.len() > self.cap_bytes {
            return false;
        }
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(data);
        self.bytes += data.len();
        self.queued.push_back(b);
        true
    }

    pub fn front(&self) -> Option<&[u8]> {
        self.queued.front().map(Vec::as_slice)
    }

    /// Drops the front datagram (it was sent), keeping its buffer.
    pub fn pop(&mut self) {
        if let Some(b) = self.queued.pop_front() {
            self.bytes -= b.len();
            self.spare.push(b);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    pub fn len(&self) -> usize {
        self.queued.len()
    }

    /// Bytes that fit before the queue refuses.
    pub fn room(&self) -> usize {
        self.cap_bytes - self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_fifo_reuses_buffers() {
        let mut q = DatagramQueue::new(10);
        assert!(q.push(b"abcd"));
        assert!(q.push(b"efgh"));
        assert!(!q.push(b"ijk"));
        assert_eq!(q.room(), 2);
        assert_eq!(q.front(), Some(&b"abcd"[..]));
        q.pop();
        assert!(q.push(b"ijk"));
        assert_eq!(q.spare.len(), 0, "the freed buffer was reused");
        assert_eq!(q.len(), 2);
        q.pop();
        q.pop();
        assert!(q.is_empty());
    }
}
