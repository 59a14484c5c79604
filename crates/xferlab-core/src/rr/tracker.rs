//! Transactions of one flow: which are outstanding and since when, how
//! many completed, timed out, failed or answered late. Clock-free: every
//! call takes the current `Time`. Nothing here allocates after
//! construction, so a driver can call it per transaction.

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Time;

/// Cumulative counts of one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxCounts {
    /// Requests issued.
    pub sent: u64,
    /// Responses received in time.
    pub completed: u64,
    /// Requests whose response did not arrive within the timeout.
    pub timed_out: u64,
    /// Transactions that failed (connection refused or reset, short
    /// response).
    pub failed: u64,
    /// Responses that arrived after their request had timed out.
    pub late: u64,
    /// Responses to nothing outstanding or late (duplicates, strangers).
    pub unexpected: u64,
}

/// What a response turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Answered an outstanding request after this long.
    Completed(Duration),
    /// Answered a request that had already timed out.
    Late,
    /// Matches nothing sent and not yet answered.
    Unexpected,
}

/// How many timed-out sequence numbers are remembered to recognise late
/// replies (older ones count as unexpected).
const LATE_MEMORY: usize = 256;

/// The outstanding transactions of one flow, at most `depth` of them.
#[derive(Debug, Clone)]
pub struct Tracker {
    depth: usize,
    timeout: Option<Duration>,
    /// (sequence, sent at), in send order: the front is the oldest and so
    /// the first to time out.
    outstanding: VecDeque<(u64, Time)>,
    expired: VecDeque<u64>,
    next_seq: u64,
    counts: TxCounts,
}

impl Tracker {
    /// `timeout` None: transactions never time out (a TCP stream delivers
    /// or fails as a whole).
    pub fn new(depth: u32, timeout: Option<Duration>) -> Self {
        Tracker {
            depth: depth.max(1) as usize,
            timeout,
            outstanding: VecDeque::with_capacity(depth.max(1) as usize),
            expired: VecDeque::with_capacity(LATE_MEMORY),
            next_seq: 0,
            counts: TxCounts::default(),
        }
    }

    pub fn counts(&self) -> TxCounts {
        self.counts
    }

    /// Whether another request may go out now.
    pub fn can_send(&self) -> bool {
        self.outstanding.len() < self.depth
    }

    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// Records a request sent at `now`; returns its sequence number.
    pub fn on_send(&mut self, now: Time) -> u64 {
        debug_assert!(self.can_send());
        let seq = self.next_seq;
        self.next_seq += 1;
        self.outstanding.push_back((seq, now));
        self.counts.sent += 1;
        seq
    }

    /// A response on an ordered transport (TCP): it answers the oldest
    /// outstanding request.
    pub fn on_response_in_order(&mut self, now: Time) -> Reply {
        match self.outstanding.pop_front() {
            Some((_, sent)) => {
                self.counts.completed += 1;
                Reply::Completed(now.duration_since(sent))
            }
            None => {
                self.counts.unexpected += 1;
                Reply::Unexpected
            }
        }
    }

    /// A response carrying sequence number `seq` (UDP).
    pub fn on_response(&mut self, seq: u64, now: Time) -> Reply {
        if let Some(i) = self.outstanding.iter().position(|&(s, _)| s == seq) {
            let (_, sent) = self.outstanding.remove(i).expect("found");
            self.counts.completed += 1;
            return Reply::Completed(now.duration_since(sent));
        }
        if let Some(i) = self.expired.iter().position(|&s| s == seq) {
            self.expired.remove(i);
            self.counts.late += 1;
            return Reply::Late;
        }
        self.counts.unexpected += 1;
        Reply::Unexpected
    }

    /// The oldest outstanding transaction failed (CRR connection refused,
    /// reset, short response).
    pub fn fail_oldest(&mut self) {
        if self.outstanding.pop_front().is_some() {
            self.counts.failed += 1;
        }
    }

    /// Every outstanding transaction failed (a TCP RR connection broke).
    pub fn fail_all(&mut self) {
        self.counts.failed += self.outstanding.len() as u64;
        self.outstanding.clear();
    }

    /// When the oldest outstanding transaction times out.
    pub fn deadline(&self) -> Option<Time> {
        let t = self.timeout?;
        self.outstanding.front().map(|&(_, sent)| sent + t)
    }

    /// Times out every transaction whose deadline is at or before `now`;
    /// returns how many.
    pub fn expire(&mut self, now: Time) -> u32 {
        let Some(t) = self.timeout else { return 0 };
        let mut n = 0;
        while let Some(&(seq, sent)) = self.outstanding.front() {
            if now < sent + t {
                break;
            }
            self.outstanding.pop_front();
            if self.expired.len() == LATE_MEMORY {
                self.expired.pop_front();
            }
            self.expired.push_back(seq);
            self.counts.timed_out += 1;
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn depth_limits_outstanding_and_in_order_replies_measure_latency() {
        let t0 = Time::ZERO;
        let mut t = Tracker::new(2, None);
        t.on_send(t0);
        t.on_send(t0 + ms(1));
        assert!(!t.can_send());
        assert_eq!(t.on_response_in_order(t0 + ms(5)), Reply::Completed(ms(5)));
        assert!(t.can_send());
        assert_eq!(t.on_response_in_order(t0 + ms(5)), Reply::Completed(ms(4)));
        assert_eq!(t.on_response_in_order(t0 + ms(6)), Reply::Unexpected);
        assert_eq!(t.deadline(), None);
        let c = t.counts();
        assert_eq!((c.sent, c.completed, c.unexpected), (2, 2, 1));
    }

    #[test]
    fn a_lost_reply_times_out_frees_its_slot_and_is_recognised_when_late() {
        let t0 = Time::ZERO;
        let mut t = Tracker::new(1, Some(ms(100)));
        let s0 = t.on_send(t0);
        assert_eq!(t.deadline(), Some(t0 + ms(100)));
        assert_eq!(t.expire(t0 + ms(99)), 0);
        assert_eq!(t.expire(t0 + ms(100)), 1);
        assert!(t.can_send());
        let s1 = t.on_send(t0 + ms(100));
        // The first reply straggles in while the second is outstanding.
        assert_eq!(t.on_response(s0, t0 + ms(120)), Reply::Late);
        assert_eq!(t.on_response(s1, t0 + ms(130)), Reply::Completed(ms(30)));
        // A duplicate of either is unexpected.
        assert_eq!(t.on_response(s1, t0 + ms(131)), Reply::Unexpected);
        assert_eq!(t.on_response(s0, t0 + ms(131)), Reply::Unexpected);
        let c = t.counts();
        assert_eq!(
            (c.sent, c.completed, c.timed_out, c.late, c.unexpected),
            (2, 1, 1, 1, 2)
        );
    }

    #[test]
    fn out_of_order_udp_replies_match_their_own_request() {
        let t0 = Time::ZERO;
        let mut t = Tracker::new(3, Some(ms(50)));
        let a = t.on_send(t0);
        let b = t.on_send(t0 + ms(1));
        let c = t.on_send(t0 + ms(2));
        assert_eq!(t.on_response(c, t0 + ms(3)), Reply::Completed(ms(1)));
        assert_eq!(t.on_response(a, t0 + ms(4)), Reply::Completed(ms(4)));
        // b times out at t0 + 51 ms, not earlier.
        assert_eq!(t.deadline(), Some(t0 + ms(51)));
        assert_eq!(t.expire(t0 + ms(60)), 1);
        assert_eq!(t.on_response(b, t0 + ms(70)), Reply::Late);
        assert_eq!(t.outstanding(), 0);
    }

    #[test]
    fn failures_free_slots() {
        let t0 = Time::ZERO;
        let mut t = Tracker::new(4, None);
        for _ in 0..3 {
            t.on_send(t0);
        }
        t.fail_oldest();
        t.fail_all();
        assert_eq!(t.counts().failed, 3);
        assert_eq!(t.outstanding(), 0);
    }
}
