//! Bookkeeping of the transfers in flight on one endpoint: how many to
//! keep queued (depth), how long each is, when the byte quota or a stop
//! ends submission, and each completion's latency. usbfs completes the
//! bulk transfers of one endpoint in submission order, so a FIFO of submit
//! times pairs every completion with its submission.
//!
//! Time is nanoseconds since the run started, passed in by the driver.

use std::collections::VecDeque;

use crate::time::Time;

#[derive(Debug, Clone)]
pub struct TransferQueue {
    size: usize,
    depth: usize,
    /// IN transfers must be whole packets: lengths are rounded up to this.
    granule: usize,
    quota: Option<u64>,
    submitted_bytes: u64,
    stopping: bool,
    /// (submit time ns, requested length), oldest first. Capacity = depth,
    /// reserved up front: no allocation per transfer.
    in_flight: VecDeque<(Time, usize)>,
}

/// What one completion meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completed {
    pub requested: usize,
    pub latency_ns: u64,
    /// Fewer bytes than requested (a short packet ended the transfer).
    pub short: bool,
}

impl TransferQueue {
    /// `size` bytes per transfer, `depth` transfers in flight (1 = a
    /// synchronous loop), at most `quota` bytes in all when given.
    pub fn new(size: usize, depth: usize, granule: usize, quota: Option<u64>) -> Self {
        let depth = depth.max(1);
        TransferQueue {
            size: size.max(1),
            depth,
            granule: granule.max(1),
            quota,
            submitted_bytes: 0,
            stopping: false,
            in_flight: VecDeque::with_capacity(depth),
        }
    }

    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The length of the next transfer to submit now, if one should be.
    pub fn next_submission(&self) -> Option<usize> {
        if self.stopping || self.in_flight.len() >= self.depth {
            return None;
        }
        let len = match self.quota {
            None => self.size,
            Some(q) => {
                let left = q.saturating_sub(self.submitted_bytes);
                if left == 0 {
                    return None;
                }
                let len = (left.min(self.size as u64)) as usize;
                len.div_ceil(self.granule) * self.granule
            }
        };
        Some(len)
    }

    pub fn on_submit(&mut self, now: Time, len: usize) {
        debug_assert!(self.in_flight.len() < self.depth);
        self.submitted_bytes += len as u64;
        self.in_flight.push_back((now, len));
    }

    /// A transfer completed (successfully or not) with `actual` bytes.
    /// None if nothing was in flight (a driver bug; counted by the caller).
    pub fn on_complete(&mut self, now: Time, actual: usize) -> Option<Completed> {
        let (t, requested) = self.in_flight.pop_front()?;
        Some(Completed {
            requested,
            latency_ns: now.duration_since(t).as_nanos() as u64,
            short: actual < requested,
        })
    }

    /// No more submissions (time is up, an error, a disconnect); what is in
    /// flight still completes or is cancelled.
    pub fn stop(&mut self) {
        self.stopping = true;
    }

    pub fn stopping(&self) -> bool {
        self.stopping
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Nothing in flight and nothing more to submit.
    pub fn is_done(&self) -> bool {
        self.in_flight.is_empty() && self.next_submission().is_none()
    }

    /// Submit time of the oldest transfer in flight (for a stall timeout).
    pub fn oldest_submit(&self) -> Option<Time> {
        self.in_flight.front().map(|&(t, _)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(t: u64) -> Time {
        Time::from_nanos(t)
    }

    #[test]
    fn depth_one_is_a_synchronous_loop() {
        let mut q = TransferQueue::new(512, 1, 512, None);
        assert_eq!(q.next_submission(), Some(512));
        q.on_submit(ns(0), 512);
        assert_eq!(q.next_submission(), None, "one in flight at a time");
        let c = q.on_complete(ns(125_000), 512).unwrap();
        assert_eq!(
            c,
            Completed {
                requested: 512,
                latency_ns: 125_000,
                short: false
            }
        );
        assert_eq!(q.next_submission(), Some(512));
    }

    #[test]
    fn depth_n_keeps_n_queued_and_pairs_completions_in_order() {
        let mut q = TransferQueue::new(4096, 4, 512, None);
        let mut t = 0;
        while let Some(len) = q.next_submission() {
            q.on_submit(ns(t), len);
            t += 10;
        }
        assert_eq!(q.in_flight(), 4);
        let c = q.on_complete(ns(100), 1000).unwrap();
        assert_eq!((c.latency_ns, c.short), (100, true));
        assert_eq!(q.next_submission(), Some(4096));
        assert_eq!(q.on_complete(ns(200), 4096).unwrap().latency_ns, 190);
    }

    #[test]
    fn the_quota_ends_submission_and_rounds_in_transfers_to_packets() {
        let mut q = TransferQueue::new(4096, 8, 512, Some(10_000));
        let mut lens = vec![];
        while let Some(len) = q.next_submission() {
            q.on_submit(ns(0), len);
            lens.push(len);
        }
        assert_eq!(
            lens,
            vec![4096, 4096, 2048],
            "10000 - 8192 = 1808 -> 2048 (whole packets)"
        );
        assert!(!q.is_done());
        for _ in 0..3 {
            q.on_complete(ns(1), 4096);
        }
        assert!(q.is_done());
        assert!(q.on_complete(ns(2), 0).is_none(), "nothing in flight");
    }

    #[test]
    fn stop_drains_without_new_submissions() {
        let mut q = TransferQueue::new(512, 2, 1, None);
        q.on_submit(ns(0), 512);
        q.on_submit(ns(0), 512);
        q.stop();
        q.on_complete(ns(5), 512);
        assert_eq!(q.next_submission(), None);
        assert_eq!(q.oldest_submit(), Some(ns(0)));
        q.on_complete(ns(6), 0);
        assert!(q.is_done());
    }
}
