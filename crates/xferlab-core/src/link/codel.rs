//! CoDel (RFC 8289): the head-of-queue decision at dequeue time. The
//! pipeline keeps the waiting packets; when the serializer takes the head
//! it asks [`Codel::decide`] with the head's sojourn time, and drops or
//! CE-marks it (ECT packets are marked instead of dropped, as Linux's
//! codel with ecn does).

/// What to do with the head packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Mark,
    Drop,
}

/// Below this many bytes left in the queue nothing is dropped (RFC 8289
/// `MAXPACKET`: one MTU-sized packet).
const MAX_PACKET: u64 = 1514;

#[derive(Debug, Clone)]
pub struct Codel {
    target_ns: u64,
    interval_ns: u64,
    first_above_time: u64,
    drop_next: u64,
    count: u32,
    last_count: u32,
    dropping: bool,
}

impl Codel {
    pub fn new(target_ns: u64, interval_ns: u64) -> Self {
        Codel {
            target_ns,
            interval_ns,
            first_above_time: 0,
            drop_next: 0,
            count: 0,
            last_count: 0,
            dropping: false,
        }
    }

    /// `t + interval / sqrt(count)`.
    fn control_law(&self, t: u64, count: u32) -> u64 {
        t + (self.interval_ns as f64 / f64::from(count.max(1)).sqrt()) as u64
    }

    /// RFC 8289's dodequeue: has the sojourn stayed above target for an
    /// interval?
    fn ok_to_drop(&mut self, now: u64, sojourn: u64, backlog_after: u64) -> bool {
        if sojourn < self.target_ns || backlog_after <= MAX_PACKET {
            self.first_above_time = 0;
            return false;
        }
        if self.first_above_time == 0 {
            self.first_above_time = now + self.interval_ns;
            return false;
        }
        now >= self.first_above_time
    }

    /// The head packet leaves the queue at `now` after `sojourn` ns;
    /// `backlog_after` bytes stay behind it. One call per head packet: the
    /// RFC's drop loop is successive calls at the same `now`.
    pub fn decide(&mut self, now: u64, sojourn: u64, backlog_after: u64, ect: bool) -> Verdict {
        let ok = self.ok_to_drop(now, sojourn, backlog_after);
        let hit = if ect { Verdict::Mark } else { Verdict::Drop };
        if self.dropping {
            if !ok {
                self.dropping = false;
                return Verdict::Pass;
            }
            if now >= self.drop_next {
                self.count += 1;
                self.drop_next = self.control_law(self.drop_next, self.count);
                return hit;
            }
            return Verdict::Pass;
        }
        if ok {
            self.dropping = true;
            // Re-enter near the last drop rate when the last dropping
            // state ended recently (RFC 8289 section 5.5).
            let delta = self.count.saturating_sub(self.last_count);
            self.count = if delta > 1 && now.saturating_sub(self.drop_next) < 16 * self.interval_ns
            {
                delta
            } else {
                1
            };
            self.drop_next = self.control_law(now, self.count);
            self.last_count = self.count;
            return hit;
        }
        Verdict::Pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn nothing_happens_below_target_or_for_less_than_an_interval() {
        let mut c = Codel::new(5 * MS, 100 * MS);
        for t in 0..1000 {
            assert_eq!(c.decide(t * MS, 4 * MS, 100_000, false), Verdict::Pass);
        }
        // Above target, but only for 99 ms.
        for t in 1000..1100 {
            assert_eq!(c.decide(t * MS, 10 * MS, 100_000, false), Verdict::Pass);
        }
        assert_eq!(c.decide(1100 * MS, 10 * MS, 100_000, false), Verdict::Drop);
        // One packet left behind: never dropped.
        let mut c = Codel::new(5 * MS, 100 * MS);
        for t in 0..1000 {
            assert_eq!(c.decide(t * MS, 50 * MS, 1500, false), Verdict::Pass);
        }
    }

    #[test]
    fn drops_come_faster_by_the_square_root_of_their_count() {
        let mut c = Codel::new(5 * MS, 100 * MS);
        let mut drops = Vec::new();
        // A standing 50 ms queue; one head packet per 0.1 ms.
        for i in 0..20_000u64 {
            let now = i * MS / 10;
            if c.decide(now, 50 * MS, 1_000_000, false) == Verdict::Drop {
                drops.push(now);
            }
        }
        // First at 100 ms, then 100/sqrt(1), 100/sqrt(2) ... ms apart.
        assert_eq!(drops[0], 100 * MS);
        let gaps: Vec<f64> = drops
            .windows(2)
            .map(|w| (w[1] - w[0]) as f64 / 1e6)
            .collect();
        for (k, g) in gaps.iter().take(8).enumerate() {
            let want = 100.0 / ((k + 1) as f64).sqrt();
            assert!((g - want).abs() < 0.2, "gap {k}: {g} ms, want {want}");
        }
        // ECT packets are marked instead.
        let mut c = Codel::new(5 * MS, 100 * MS);
        c.decide(0, 50 * MS, 1_000_000, true);
        assert_eq!(c.decide(100 * MS, 50 * MS, 1_000_000, true), Verdict::Mark);
    }
}
