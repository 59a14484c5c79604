//! Receiver accounting for one datagram flow, in the style of UDPmon and
//! RFC 3550: loss, reordering and duplication from sequence numbers;
//! jitter and one-way-delay variation from send times.
//!
//! Every datagram costs O(1) time and no allocation: the state is a few
//! counters and a fixed 1024-bit map of recently seen sequence numbers, so
//! this can sit inside a recvmmsg loop at millions of datagrams a second.
//!
//! Sender and receiver are usually different hosts whose clocks are not
//! synchronised, so the absolute transit time `recv_ns - send_ns` means
//! nothing (it may even be negative). Only its *changes* are reported:
//! jitter is built from differences of consecutive transits, and the delay
//! figures are measured above the smallest transit seen, which stands in
//! for the path's fixed delay plus the clock offset.

/// How many sequence numbers, counting down from the highest seen, are
/// remembered for duplicate detection. Reordering deeper than this is
/// still counted, but duplicates that deep are not recognised.
const WINDOW: u64 = 1024;
const WORDS: usize = (WINDOW / 64) as usize;

/// RFC 3550 section 6.4.1: the estimator's gain is 1/16, a compromise
/// between noise reduction and following changes.
const JITTER_GAIN: f64 = 1.0 / 16.0;

/// A snapshot of [`RecvStats`], published by the receiver after each batch.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RecvCounters {
    /// Distinct datagrams received (duplicates excluded).
    pub received: u64,
    /// Datagrams whose sequence number was already seen, within the last
    /// 1024 below the highest (older ones cannot be checked).
    pub duplicates: u64,
    /// Datagrams that arrived after one with a higher sequence number (late,
    /// not duplicate). They also take back the loss their gap was counted as.
    pub out_of_order: u64,
    /// Sequence numbers not seen so far: `(highest_seq + 1) - received`,
    /// never negative. A datagram lost after the last one received is not
    /// visible here; only the sender's count tells.
    pub lost: u64,
    pub highest_seq: Option<u64>,
    /// RFC 3550 interarrival jitter estimate, ns: `J += (|D| - J) / 16` over
    /// consecutive arrivals, `D` the change in transit time.
    pub jitter_ns: f64,
    /// Smallest transit (`recv_ns - send_ns`) seen: path delay plus clock
    /// offset, the baseline for delay variation. 0 before any datagram.
    pub owd_min_ns: i64,
    /// Sum over datagrams of their transit above the minimum at the time
    /// they arrived; divided by a datagram count it gives the mean queueing
    /// delay. Cumulative, so interval figures are differences.
    pub owd_excess_sum_ns: u128,
    /// Largest such excess since the last [`RecvStats::take_owd_max`].
    pub owd_excess_max_ns: u64,
}

/// Accounting state of one receiving flow.
#[derive(Debug, Clone)]
pub struct RecvStats {
    received: u64,
    duplicates: u64,
    out_of_order: u64,
    highest: Option<u64>,
    /// Bit `seq % WINDOW` is set when `seq` (within `WINDOW` of `highest`,
    /// `highest` included) has been received.
    seen: [u64; WORDS],
    last_transit: Option<i64>,
    jitter_ns: f64,
    owd_min: Option<i64>,
    owd_excess_sum: u128,
    owd_excess_max: u64,
}

impl Default for RecvStats {
    fn default() -> Self {
        Self::new()
    }
}

/// `recv - send` as i64, saturating: only hosts whose clocks are centuries
/// apart would get there, and then a clamped value beats a panic.
fn transit(send_ns: u64, recv_ns: u64) -> i64 {
    (i128::from(recv_ns) - i128::from(send_ns)).clamp(i128::from(i64::MIN), i128::from(i64::MAX))
        as i64
}

impl RecvStats {
    pub fn new() -> Self {
        RecvStats {
            received: 0,
            duplicates: 0,
            out_of_order: 0,
            highest: None,
            seen: [0; WORDS],
            last_transit: None,
            jitter_ns: 0.0,
            owd_min: None,
            owd_excess_sum: 0,
            owd_excess_max: 0,
        }
    }

    /// Accounts one datagram: `seq` and `send_ns` from its header, `recv_ns`
    /// the receiver's clock when it arrived (kernel timestamp if available).
    ///
    /// Duplicates are only counted: they add nothing to jitter or delay,
    /// since a copy says nothing new about the path's timing for that
    /// sequence number and would weigh it twice.
    pub fn on_datagram(&mut self, seq: u64, send_ns: u64, recv_ns: u64) {
        match self.highest {
            None => {
                self.highest = Some(seq);
                self.mark(seq);
            }
            Some(high) if seq > high => {
                // The slots of high+1..=seq held sequence numbers that now
                // fall out of the window.
                self.clear(high + 1, seq - high);
                self.mark(seq);
                self.highest = Some(seq);
            }
            Some(high) if high - seq >= WINDOW => {
                // Too old to check against the map: assume a late original.
                self.out_of_order += 1;
            }
            Some(_) => {
                if self.is_marked(seq) {
                    self.duplicates += 1;
                    return;
                }
                self.mark(seq);
                self.out_of_order += 1;
            }
        }
        self.received += 1;
        self.on_timing(transit(send_ns, recv_ns));
    }

    fn on_timing(&mut self, transit: i64) {
        if let Some(prev) = self.last_transit {
            let d = (i128::from(transit) - i128::from(prev)).unsigned_abs() as f64;
            self.jitter_ns += (d - self.jitter_ns) * JITTER_GAIN;
        }
        self.last_transit = Some(transit);
        let min = self.owd_min.map_or(transit, |m| m.min(transit));
        self.owd_min = Some(min);
        // transit >= min, and two i64s differ by at most u64::MAX.
        let excess = (i128::from(transit) - i128::from(min)) as u64;
        self.owd_excess_sum += u128::from(excess);
        self.owd_excess_max = self.owd_excess_max.max(excess);
    }

    fn mark(&mut self, seq: u64) {
        let pos = seq % WINDOW;
        self.seen[(pos / 64) as usize] |= 1 << (pos % 64);
    }

    fn is_marked(&self, seq: u64) -> bool {
        let pos = seq % WINDOW;
        self.seen[(pos / 64) as usize] & (1 << (pos % 64)) != 0
    }

    /// Clears the slots of `count` sequence numbers starting at `from`, a
    /// word at a time, so a jump costs at most `WORDS` + 1 steps.
    fn clear(&mut self, from: u64, count: u64) {
        if count >= WINDOW {
            self.seen = [0; WORDS];
            return;
        }
        let mut pos = (from % WINDOW) as usize;
        let mut left = count as usize;
        while left > 0 {
            let bit = pos % 64;
            let n = left.min(64 - bit);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << bit
            };
            self.seen[pos / 64] &= !mask;
            left -= n;
            pos = (pos + n) % WINDOW as usize;
        }
    }

    pub fn counters(&self) -> RecvCounters {
        let lost = self.highest.map_or(0, |h| {
            let expected = u128::from(h) + 1;
            expected.saturating_sub(u128::from(self.received)) as u64
        });
        RecvCounters {
            received: self.received,
            duplicates: self.duplicates,
            out_of_order: self.out_of_order,
            lost,
            highest_seq: self.highest,
            jitter_ns: self.jitter_ns,
            owd_min_ns: self.owd_min.unwrap_or(0),
            owd_excess_sum_ns: self.owd_excess_sum,
            owd_excess_max_ns: self.owd_excess_max,
        }
    }

    /// Returns the largest delay excess since the previous call and starts
    /// a new window, so each reporting interval gets its own maximum.
    pub fn take_owd_max(&mut self) -> u64 {
        std::mem::take(&mut self.owd_excess_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds sequence numbers with a constant 1 ms transit.
    fn feed(s: &mut RecvStats, seqs: impl IntoIterator<Item = u64>) {
        for seq in seqs {
            s.on_datagram(seq, seq * 1000, seq * 1000 + 1_000_000);
        }
    }

    /// (received, duplicates, out_of_order, lost)
    fn counts(s: &RecvStats) -> (u64, u64, u64, u64) {
        let c = s.counters();
        (c.received, c.duplicates, c.out_of_order, c.lost)
    }

    #[test]
    fn nothing_received_reports_zeros() {
        let c = RecvStats::new().counters();
        assert_eq!(c, RecvCounters::default());
        assert_eq!(c.highest_seq, None);
    }

    #[test]
    fn an_in_order_stream_has_no_loss_or_reordering() {
        let mut s = RecvStats::new();
        feed(&mut s, 0..5000);
        assert_eq!(counts(&s), (5000, 0, 0, 0));
        assert_eq!(s.counters().highest_seq, Some(4999));
        assert_eq!(s.counters().jitter_ns, 0.0);
    }

    #[test]
    fn a_gap_is_loss_and_a_late_arrival_takes_it_back() {
        let mut s = RecvStats::new();
        feed(&mut s, [0, 1, 2, 5, 6]);
        assert_eq!(counts(&s), (5, 0, 0, 2));
        feed(&mut s, [3]);
        assert_eq!(counts(&s), (6, 0, 1, 1));
        feed(&mut s, [4]);
        assert_eq!(counts(&s), (7, 0, 2, 0));
    }

    #[test]
    fn a_stream_starting_above_zero_counts_the_missing_start_as_lost() {
        let mut s = RecvStats::new();
        feed(&mut s, [3, 4]);
        assert_eq!(counts(&s), (2, 0, 0, 3));
    }

    #[test]
    fn duplicates_are_counted_once_and_never_as_received() {
        let mut s = RecvStats::new();
        feed(&mut s, [0, 1, 2, 2, 1, 3]);
        assert_eq!(counts(&s), (4, 2, 0, 0));
        // A late original, then its copy.
        feed(&mut s, [5, 4, 4]);
        assert_eq!(counts(&s), (6, 3, 1, 0));
    }

    #[test]
    fn the_window_slides_without_forgetting_or_inventing() {
        let mut s = RecvStats::new();
        feed(&mut s, 0..=1000);
        // Jump across the ring's wrap: slots of 1001..=1030 are cleared.
        feed(&mut s, [1030]);
        feed(&mut s, [1010]);
        assert_eq!(counts(&s), (1003, 0, 1, 28), "1010 never seen: late");
        feed(&mut s, [7]);
        assert_eq!(s.counters().duplicates, 1, "7 is 1023 below: still known");
        // A jump of more than the window clears everything: 3172 shares its
        // slot with 100, which was received, but 3172 itself was not.
        feed(&mut s, [3572, 3172]);
        let c = s.counters();
        assert_eq!((c.duplicates, c.out_of_order), (1, 2));
        feed(&mut s, [3172]);
        assert_eq!(s.counters().duplicates, 2);
    }

    #[test]
    fn a_datagram_older_than_the_window_is_late_and_cannot_be_checked() {
        let mut s = RecvStats::new();
        feed(&mut s, [0, 2000]);
        assert_eq!(counts(&s), (2, 0, 0, 1999));
        feed(&mut s, [5]);
        assert_eq!(counts(&s), (3, 0, 1, 1998));
        // Its copy is just as old: indistinguishable from a late original.
        feed(&mut s, [5]);
        assert_eq!(counts(&s), (4, 0, 2, 1997));
        // Lost never goes negative even when such copies outnumber the gaps.
        for _ in 0..3000 {
            s.on_datagram(0, 0, 1_000_000);
        }
        assert_eq!(s.counters().lost, 0);
    }

    #[test]
    fn jitter_follows_the_rfc_3550_estimator_for_alternating_delays() {
        // Transit alternates 1 us and 3 us, so |D| = 2000 ns on every
        // arrival after the first, and J_n = 2000 * (1 - (15/16)^n).
        let mut s = RecvStats::new();
        let send = |i: u64| i * 10_000;
        let delay = |i: u64| [1000, 3000][(i % 2) as usize];
        let at = |s: &mut RecvStats, i: u64| s.on_datagram(i, send(i), send(i) + delay(i));
        at(&mut s, 0);
        assert_eq!(s.counters().jitter_ns, 0.0);
        at(&mut s, 1);
        assert_eq!(s.counters().jitter_ns, 125.0);
        at(&mut s, 2);
        assert_eq!(s.counters().jitter_ns, 125.0 + (2000.0 - 125.0) / 16.0);
        for i in 3..=200 {
            at(&mut s, i);
        }
        let expected = 2000.0 * (1.0 - (15.0f64 / 16.0).powi(200));
        let j = s.counters().jitter_ns;
        assert!((j - expected).abs() < 1e-6, "{j} vs {expected}");
        assert!((j - 2000.0).abs() < 1e-2);
    }

    #[test]
    fn delay_variation_ignores_a_constant_clock_offset() {
        // The receiver's clock runs 3 s behind the sender's: every transit
        // is negative, yet nothing varies.
        let mut s = RecvStats::new();
        let offset: i64 = -3_000_000_000;
        let path = 40_000;
        let start = 10_000_000_000u64;
        let recv = |send: u64, extra: i64| (send as i64 + offset + path + extra) as u64;
        for i in 0..100 {
            let send = start + i * 1_000_000;
            s.on_datagram(i, send, recv(send, 0));
        }
        let c = s.counters();
        assert_eq!(c.owd_min_ns, offset + path);
        assert_eq!((c.owd_excess_sum_ns, c.owd_excess_max_ns), (0, 0));
        assert_eq!(c.jitter_ns, 0.0);
        // A queue builds for two datagrams: 500 ns, then 200 ns extra.
        let send = start + 100 * 1_000_000;
        s.on_datagram(100, send, recv(send, 500));
        s.on_datagram(101, send + 1_000_000, recv(send + 1_000_000, 200));
        let c = s.counters();
        assert_eq!((c.owd_excess_sum_ns, c.owd_excess_max_ns), (700, 500));
        assert_eq!(s.take_owd_max(), 500);
        assert_eq!(s.counters().owd_excess_max_ns, 0, "window restarts");
        assert_eq!(s.counters().owd_excess_sum_ns, 700, "the sum does not");
        // A new, lower minimum becomes the baseline from then on.
        s.on_datagram(102, send + 2_000_000, recv(send + 2_000_000, -100));
        s.on_datagram(103, send + 3_000_000, recv(send + 3_000_000, 0));
        let c = s.counters();
        assert_eq!(c.owd_min_ns, offset + path - 100);
        assert_eq!((c.owd_excess_sum_ns, s.take_owd_max()), (800, 100));
    }

    #[test]
    fn extreme_sequence_numbers_and_times_do_not_panic() {
        let mut s = RecvStats::new();
        s.on_datagram(u64::MAX, u64::MAX, 0);
        assert_eq!(s.counters().lost, u64::MAX, "2^64 expected, 1 received");
        s.on_datagram(0, 0, u64::MAX);
        s.on_datagram(u64::MAX, 0, 0);
        s.on_datagram(u64::MAX - 1, u64::MAX, u64::MAX);
        s.on_datagram(u64::MAX - 5000, 1, u64::MAX);
        let c = s.counters();
        assert_eq!((c.received, c.duplicates, c.out_of_order), (4, 1, 3));
        assert_eq!(c.highest_seq, Some(u64::MAX));
        assert_eq!(c.owd_min_ns, i64::MIN);
        assert_eq!(c.owd_excess_max_ns, u64::MAX);
        assert!(c.jitter_ns.is_finite() && c.jitter_ns > 0.0);
        // And a fresh stream straight at the top of the range.
        let mut s = RecvStats::new();
        s.on_datagram(u64::MAX - 2, 0, 0);
        s.on_datagram(u64::MAX, 0, 0);
        assert_eq!(counts(&s), (2, 0, 0, u64::MAX - 1));
    }
}
