//! Sending datagrams at a target bit rate, clock-free: the driver passes in
//! its clock and asks how many datagrams are due.
//!
//! The schedule is absolute: datagram `n` is due at
//! `start + floor(n * size * 8e9 / rate)` ns, computed afresh in u128 for
//! every `n` instead of adding a rounded interval again and again. A
//! rounded interval drifts (64 B at 3 Mbit/s is 170 666.67 ns; rounding to
//! 170 667 ns is 1 s slow after six days), and a sender that merely sleeps
//! "one interval" after each send loses the time spent sending and waking.
//!
//! A sender that falls behind (a scheduler hiccup, a full socket buffer)
//! catches up, at most `batch` datagrams per call, until it is back on the
//! schedule: the average rate stays the target, which is what a constant-
//! rate source (a radio, a detector) would need. Each datagram sent more
//! than the slack after its due time is counted late: an underrun such a
//! source would have suffered.

use crate::time::Time;

const NS_PER_S: u128 = 1_000_000_000;
/// Default tolerance before a datagram counts as late.
pub const DEFAULT_SLACK_NS: u64 = 1_000_000;

/// The send schedule of one flow and how well it has been kept.
#[derive(Debug, Clone)]
pub struct Pacer {
    rate_bps: u64,
    /// Bits per datagram times ns per second: datagram `n` is due
    /// `n * bit_ns / rate_bps` ns after the start. 0 for empty datagrams.
    bit_ns: u128,
    batch: u32,
    start_ns: u64,
    slack_ns: u64,
    /// Datagrams sent so far, i.e. the index of the next one.
    sent: u64,
    late: u64,
    max_lateness: u64,
    window_max_lateness: u64,
}

impl Pacer {
    /// `rate_bps` 0 means unlimited: every call may send a full batch. So
    /// does a `size` of 0, whose datagrams take no time at any rate. A
    /// `batch` of 0 is taken as 1, since a pacer that never lets anything
    /// out is no use to anyone.
    pub fn new(rate_bps: u64, size: usize, batch: u32, start: Time) -> Self {
        let start_ns = start.as_nanos();
        Pacer {
            rate_bps,
            bit_ns: (size as u128) * 8 * NS_PER_S,
            batch: batch.max(1),
            start_ns,
            slack_ns: DEFAULT_SLACK_NS,
            sent: 0,
            late: 0,
            max_lateness: 0,
            window_max_lateness: 0,
        }
    }

    /// How long after its due time a datagram may go out before it counts
    /// as late (default 1 ms: below that is ordinary wake-up jitter).
    pub fn with_slack(mut self, slack_ns: u64) -> Self {
        self.slack_ns = slack_ns;
        self
    }

    fn unlimited(&self) -> bool {
        self.rate_bps == 0 || self.bit_ns == 0
    }

    /// When datagram `n` is due; u64::MAX (never) past the clock's range.
    fn due_at(&self, n: u64) -> u64 {
        let offset = u128::from(n)
            .checked_mul(self.bit_ns)
            .map_or(u128::MAX, |x| x / u128::from(self.rate_bps));
        self.start_ns
            .saturating_add(u64::try_from(offset).unwrap_or(u64::MAX))
    }

    /// How many datagrams are due at or before `t`: datagram `n` is iff
    /// `floor(n * bit_ns / rate) <= t - start`, that is
    /// `n * bit_ns <= (t - start + 1) * rate - 1`. The product is below
    /// 2^128 for any u64 operands, so this is exact for any clock value.
    fn due_by(&self, t: u64) -> u64 {
        let Some(elapsed) = t.checked_sub(self.start_ns) else {
            return 0;
        };
        let limit = (u128::from(elapsed) + 1) * u128::from(self.rate_bps) - 1;
        u64::try_from(limit / self.bit_ns + 1).unwrap_or(u64::MAX)
    }

    /// How many datagrams may be sent now: those due and not yet sent, at
    /// most `batch` (so catching up never turns into one unbounded burst).
    /// Unlimited pacers always allow a full batch.
    pub fn due(&self, now: Time) -> u32 {
        let now_ns = now.as_nanos();
        if self.unlimited() {
            return self.batch;
        }
        let owed = self.due_by(now_ns).saturating_sub(self.sent);
        owed.min(u64::from(self.batch)) as u32
    }

    /// Records that `n` datagrams actually went out at `now_ns`: fewer
    /// than [`Pacer::due`] said if the socket took fewer, more if the caller
    /// chose to run ahead (those are simply early). O(1) whatever `n`.
    pub fn sent(&mut self, n: u32, now: Time) {
        let now_ns = now.as_nanos();
        if n == 0 {
            return;
        }
        if !self.unlimited() {
            // Due times only grow with n, so the first of these is the
            // latest, and the late ones are a prefix: those due before
            // now - slack.
            let lateness = now_ns.saturating_sub(self.due_at(self.sent));
            self.max_lateness = self.max_lateness.max(lateness);
            self.window_max_lateness = self.window_max_lateness.max(lateness);
            if let Some(cutoff) = now_ns
                .checked_sub(self.slack_ns)
                .and_then(|t| t.checked_sub(1))
            {
                let late = self.due_by(cutoff).saturating_sub(self.sent);
                self.late += late.min(u64::from(n));
            }
        }
        self.sent = self.sent.saturating_add(u64::from(n));
    }

    /// When the next datagram is due, for the driver to sleep until; None
    /// when unlimited (send as fast as the socket takes them).
    pub fn next_due(&self) -> Option<Time> {
        (!self.unlimited()).then(|| Time::from_nanos(self.due_at(self.sent)))
    }

    /// How far behind the schedule the sender is: the age of the oldest due
    /// datagram not yet sent, 0 when nothing is overdue.
    pub fn behind(&self, now: Time) -> std::time::Duration {
        match self.next_due() {
            Some(due) => now.duration_since(due),
            None => std::time::Duration::ZERO,
        }
    }

    /// Datagrams sent more than the slack after their due time.
    pub fn late_count(&self) -> u64 {
        self.late
    }

    /// The worst lateness of any datagram sent so far, ns.
    pub fn max_lateness_ns(&self) -> u64 {
        self.max_lateness
    }

    /// The worst lateness since the previous call, resetting it, so each
    /// reporting interval gets its own maximum.
    pub fn take_max_lateness(&mut self) -> u64 {
        std::mem::take(&mut self.window_max_lateness)
    }

    /// Datagrams recorded by [`Pacer::sent`] so far.
    pub fn sent_count(&self) -> u64 {
        self.sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ns: u64) -> Time {
        Time::from_nanos(ns)
    }

    const MS: u64 = 1_000_000;
    const US: u64 = 1_000;

    /// Deterministic wake-up latency in `0..max`.
    struct Jitter(u64);
    impl Jitter {
        fn next(&mut self, max: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % max
        }
    }

    fn ideal(rate: u64, size: usize, elapsed_ns: u64) -> f64 {
        elapsed_ns as f64 * rate as f64 / (size as f64 * 8.0 * 1e9)
    }

    /// A driver that sleeps until the next due time, wakes up to 20 us
    /// late, and spends 1 us per send call; it goes back to sleep once a
    /// call returns less than a full batch (it has caught up).
    fn simulate(rate: u64, size: usize, batch: u32, start: u64, run_ns: u64) -> (Pacer, u64) {
        let mut p = Pacer::new(rate, size, batch, t(start));
        let mut jitter = Jitter(0x9E37_79B9_7F4A_7C15);
        let end = start + run_ns;
        let (mut now, mut last_call) = (start, start);
        while now <= end {
            loop {
                let n = p.due(t(now));
                assert!(n <= batch);
                p.sent(n, t(now));
                last_call = now;
                if n < batch {
                    break;
                }
                now += US;
            }
            // Caught up: never ahead, never behind by a datagram, at every
            // wake-up over the whole run: no drift. (Due times are rounded
            // down to whole ns, hence a hair over one datagram.)
            let err = p.sent_count() as f64 - ideal(rate, size, now - start);
            assert!(
                err > 0.0 && err <= 1.001,
                "{rate} bit/s {size} B at {now}: {err}"
            );
            now = now.max(p.next_due().map(Time::as_nanos).unwrap()) + jitter.next(20 * US);
        }
        // Whatever fell due by the end goes out at the end.
        let last = end.max(last_call);
        while p.due(t(last)) > 0 {
            p.sent(p.due(t(last)), t(last));
        }
        (p, last - start)
    }

    #[test]
    fn long_runs_match_the_rate_within_one_datagram() {
        let cases = [
            (10_000_000, 1400),
            (10_000_000, 64),
            (100_000_000, 1400),
            (100_000_000, 64),
            (1_000_000_000, 1400),
            (1_000_000_000, 64),
            // Intervals that are not whole nanoseconds.
            (3_000_000, 64),
            (340_800_000, 1400),
            (999_999_937, 1472),
        ];
        for (rate, size) in cases {
            let (p, elapsed) = simulate(rate, size, 32, 5 * MS, 2_000 * MS);
            let ideal = ideal(rate, size, elapsed);
            let sent = p.sent_count() as f64;
            assert!(
                (sent - ideal).abs() <= 1.0,
                "{rate} bit/s {size} B: {sent} vs {ideal}"
            );
            assert_eq!(p.late_count(), 0, "{rate} bit/s {size} B");
            assert!(p.max_lateness_ns() <= 25 * US, "{}", p.max_lateness_ns());
        }
    }

    #[test]
    fn the_schedule_does_not_drift_over_days() {
        // 64 B at 3 Mbit/s: 170 666.67 ns apart, so every third datagram is
        // due on a whole 512 us. Three billion datagrams is ~6 days.
        let start = 123;
        let mut p = Pacer::new(3_000_000, 64, 1, t(start));
        p.sent(3_000_000_000, t(start));
        assert_eq!(
            p.next_due().map(Time::as_nanos),
            Some(start + 512_000 * 1_000_000_000)
        );
        p.sent(1, t(0));
        assert_eq!(
            p.next_due().map(Time::as_nanos),
            Some(start + 512_000 * 1_000_000_000 + 170_666)
        );
    }

    #[test]
    fn lateness_is_counted_per_datagram_against_the_slack() {
        // 1000 B at 8 Mbit/s: one datagram per millisecond, from t = 0.
        let mut p = Pacer::new(8_000_000, 1000, 64, t(0));
        assert_eq!(p.due(t(5 * MS)), 6);
        // Sent 5, 4, 3, 2, 1 and 0 ms late: exactly the slack is not late.
        p.sent(6, t(5 * MS));
        assert_eq!((p.late_count(), p.max_lateness_ns()), (4, 5 * MS));
        // Sending fewer than due leaves the rest owed.
        assert_eq!(p.due(t(9 * MS + 500 * US)), 4);
        p.sent(1, t(9 * MS + 500 * US));
        assert_eq!(p.due(t(9 * MS + 500 * US)), 3);
        assert_eq!(
            p.behind(t(9 * MS + 500 * US)).as_nanos() as u64,
            2 * MS + 500 * US
        );
        assert_eq!(p.late_count(), 5);
        assert_eq!(p.take_max_lateness(), 5 * MS);
        assert_eq!(p.take_max_lateness(), 0);
        assert_eq!(p.max_lateness_ns(), 5 * MS, "the all-time max stays");
        let mut strict = Pacer::new(8_000_000, 1000, 64, t(0)).with_slack(0);
        strict.sent(6, t(5 * MS));
        assert_eq!(strict.late_count(), 5);
    }

    #[test]
    fn a_stalled_sender_is_reported_late_and_catches_up_a_batch_at_a_time() {
        // 1400 B at 100 Mbit/s: 112 us apart.
        let (rate, size, batch) = (100_000_000, 1400, 8);
        let mut p = Pacer::new(rate, size, batch, t(0));
        let mut now = 0;
        while now < 1_000 * MS {
            let n = p.due(t(now));
            p.sent(n, t(now));
            now = p.next_due().map(Time::as_nanos).unwrap();
        }
        assert_eq!((p.late_count(), p.max_lateness_ns()), (0, 0));
        // No calls for 50 ms.
        let stall_from = p.next_due().map(Time::as_nanos).unwrap();
        now = stall_from + 50 * MS;
        assert_eq!(p.behind(t(now)).as_nanos() as u64, 50 * MS);
        let owed = (50 * MS) / (112 * US) + 1;
        assert_eq!(p.due(t(now)), batch, "a full batch, not the whole debt");
        let mut calls = 0;
        while p.due(t(now)) > 0 {
            let n = p.due(t(now));
            assert!(n <= batch);
            p.sent(n, t(now));
            calls += 1;
            now += 10 * US;
        }
        // Catching up takes at least the stall's debt in batches (more fall
        // due meanwhile).
        assert!(calls * u64::from(batch) >= owed, "{calls}");
        assert_eq!(p.behind(t(now)).as_nanos() as u64, 0);
        let expected_late = (49 * MS) / (112 * US);
        assert!(
            p.late_count() >= expected_late && p.late_count() <= owed + 100,
            "{}",
            p.late_count()
        );
        assert_eq!(p.max_lateness_ns(), 50 * MS);
        let err = p.sent_count() as f64 - ideal(rate, size, now);
        assert!((0.0..=1.0).contains(&err), "back on schedule: {err}");
    }

    #[test]
    fn unlimited_always_allows_a_full_batch() {
        for (rate, size) in [(0, 1400), (1_000_000, 0)] {
            let mut p = Pacer::new(rate, size, 16, t(1_000));
            assert_eq!(p.next_due().map(Time::as_nanos), None);
            for now in [0, 1_000, u64::MAX] {
                assert_eq!(p.due(t(now)), 16);
                p.sent(16, t(now));
            }
            assert_eq!(p.sent_count(), 48);
            assert_eq!((p.late_count(), p.max_lateness_ns()), (0, 0));
            assert_eq!(p.behind(t(u64::MAX)).as_nanos() as u64, 0);
        }
        assert_eq!(Pacer::new(0, 1400, 0, t(0)).due(t(0)), 1, "batch 0 is 1");
    }

    #[test]
    fn nothing_is_due_before_the_start() {
        let p = Pacer::new(1_000_000, 1400, 4, t(10 * MS));
        assert_eq!(p.due(t(10 * MS - 1)), 0);
        assert_eq!(p.behind(t(0)).as_nanos() as u64, 0);
        assert_eq!(p.next_due().map(Time::as_nanos), Some(10 * MS));
        assert_eq!(p.due(t(10 * MS)), 1);
    }

    #[test]
    fn extreme_rates_and_clocks_do_not_overflow() {
        // Huge rate, tiny datagrams, whole clock range.
        let mut p = Pacer::new(u64::MAX, 1, 1024, t(0));
        assert_eq!(p.due(t(u64::MAX)), 1024);
        for _ in 0..4 {
            p.sent(u32::MAX, t(u64::MAX));
        }
        assert_eq!(p.due(t(u64::MAX)), 1024);
        assert!(p.next_due().map(Time::as_nanos).unwrap() < 10);
        // A slow rate whose schedule runs off the end of the clock.
        let mut p = Pacer::new(1, 65_507, 4, t(u64::MAX - 10));
        assert_eq!(p.due(t(u64::MAX)), 1);
        p.sent(u32::MAX, t(u64::MAX));
        assert_eq!(p.next_due().map(Time::as_nanos), Some(u64::MAX));
        assert_eq!(
            (p.due(t(u64::MAX)), p.behind(t(u64::MAX)).as_nanos() as u64),
            (0, 0)
        );
        // A week at 400 Gbit/s in 64-byte datagrams, read once.
        let week = 7 * 24 * 3600 * 1_000 * MS;
        let mut p = Pacer::new(400_000_000_000, 64, 64, t(1)).with_slack(u64::MAX);
        assert_eq!(p.due(t(week)), 64);
        p.sent(u32::MAX, t(week));
        assert_eq!(p.late_count(), 0, "an infinite slack never counts late");
        assert_eq!(p.max_lateness_ns(), week - 1);
        assert_eq!(
            p.behind(t(week)).as_nanos() as u64,
            week - 1 - u64::from(u32::MAX) * 1280 / 1000
        );
    }
}
