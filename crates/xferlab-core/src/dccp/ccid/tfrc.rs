//! TFRC (RFC 5348) arithmetic shared by CCID3's halves: the throughput
//! equation, its inverse for the first loss interval, the weighted
//! average of loss intervals, and the receiver's arrival rate.

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Time;

/// The TCP throughput equation of RFC 5348 sec. 3.1 in bytes/s, with b = 1
/// and t_RTO = 4R: X = s / (R sqrt(2bp/3) + t_RTO (3 sqrt(3bp/8)) p (1+32p^2)).
pub fn x_calc(s: f64, rtt: Duration, p: f64) -> f64 {
    let r = rtt.as_secs_f64();
    let t_rto = 4.0 * r;
    let b = 1.0;
    let denom = r * (2.0 * b * p / 3.0).sqrt()
        + t_rto * (3.0 * (3.0 * b * p / 8.0).sqrt()) * p * (1.0 + 32.0 * p * p);
    s / denom
}

/// The loss event rate at which [`x_calc`] gives `x` (sec. 6.3.1), found by
/// bisection (the equation falls monotonically in p).
pub fn p_for_rate(s: f64, rtt: Duration, x: f64) -> f64 {
    let (mut lo, mut hi) = (1e-9f64, 1.0f64);
    if x_calc(s, rtt, lo) <= x {
        return lo;
    }
    if x_calc(s, rtt, hi) >= x {
        return hi;
    }
    for _ in 0..100 {
        let mid = (lo * hi).sqrt();
        if x_calc(s, rtt, mid) > x {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// Weights of the n = 8 most recent intervals (sec. 5.4).
const WEIGHTS: [f64; 8] = [1.0, 1.0, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2];

/// Loss intervals in packets, newest first: `[0]` is the open interval
/// since the latest loss event, then up to eight closed ones.
#[derive(Clone, Debug, Default)]
pub struct LossIntervals {
    lens: VecDeque<u64>,
}

impl LossIntervals {
    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }
    /// A new loss event closes the open interval: `first` is the synthetic
    /// length of the first interval (sec. 6.3.1) when there was none.
    pub fn new_event(&mut self, first: Option<u64>) {
        if self.lens.is_empty() {
            self.lens.push_front(first.unwrap_or(1).max(1));
        }
        self.lens.push_front(0);
        self.lens.truncate(9);
    }
    /// One more packet in the open interval.
    pub fn count(&mut self, packets: u64) {
        if let Some(open) = self.lens.front_mut() {
            *open += packets;
        }
    }
    /// I_mean of sec. 5.4: the larger of the averages with and without
    /// the open interval.
    pub fn mean(&self) -> Option<f64> {
        if self.lens.len() < 2 {
            return None;
        }
        let k = (self.lens.len() - 1).min(8);
        let (mut tot0, mut tot1, mut wtot) = (0.0, 0.0, 0.0);
        for (i, &w) in WEIGHTS.iter().enumerate().take(k) {
            tot0 += self.lens[i] as f64 * w;
            tot1 += self.lens[i + 1] as f64 * w;
            wtot += w;
        }
        Some(tot0.max(tot1) / wtot)
    }
    /// The loss event rate p = 1 / I_mean, 0 before any loss.
    pub fn p(&self) -> f64 {
        self.mean().map_or(0.0, |m| 1.0 / m.max(1.0))
    }
}

/// Slots an [`ArrivalRate`] keeps: 2 R at R/32 a slot, plus the open one.
const RATE_SLOTS: usize = 65;

#[derive(Clone, Copy, Debug)]
struct Slot {
    start: Time,
    /// The slot's last arrival, and the bytes counted up to it.
    last: Time,
    cum: u64,
}

/// The bytes that arrived over the last two round trips, in slots of
/// R/32 (at least 100 us): each slot holds its last arrival time and the
/// running byte count up to it. A rate over a window is then exact to
/// within one slot, i.e. biased at most 1/32 toward the older rate, in a
/// fixed ring that never allocates once full.
#[derive(Clone, Debug)]
pub struct ArrivalRate {
    slots: VecDeque<Slot>,
    total: u64,
}

impl Default for ArrivalRate {
    fn default() -> Self {
        ArrivalRate {
            slots: VecDeque::with_capacity(RATE_SLOTS + 1),
            total: 0,
        }
    }
}

impl ArrivalRate {
    /// `bytes` arrived at `at` (non-decreasing); `rtt` sets the slot width
    /// and how far back the ring reaches.
    pub fn push(&mut self, at: Time, bytes: u64, rtt: Duration) {
        self.total += bytes;
        let width = (rtt / 32).max(Duration::from_micros(100));
        match self.slots.back_mut() {
            Some(s) if at.duration_since(s.start) < width => {
                s.last = s.last.max(at);
                s.cum = self.total;
            }
            _ => {
                if self.slots.len() >= RATE_SLOTS {
                    self.slots.pop_front();
                }
                self.slots.push_back(Slot {
                    start: at,
                    last: at,
                    cum: self.total,
                });
            }
        }
        // The newest slot at least two round trips old is as far back as
        // any window reaches: older ones go.
        while self.slots.len() > 1 && at.duration_since(self.slots[1].last) >= rtt * 2 {
            self.slots.pop_front();
        }
    }

    /// Bytes per second that arrived after the newest slot that ended at
    /// or before `end - len` (the oldest slot kept if none did), up to
    /// `end`: a span of at least `len` where the ring reaches back so far.
    /// None while that span is empty (a single slot, or one GRO buffer's
    /// stamp).
    pub fn rate_over(&self, end: Time, len: Duration) -> Option<f64> {
        let from = end.checked_sub(len).unwrap_or(Time::ZERO);
        let start = self
            .slots
            .iter()
            .rev()
            .find(|s| s.last <= from)
            .or(self.slots.front())?;
        let span = end.checked_duration_since(start.last)?;
        if span.is_zero() {
            return None;
        }
        Some((self.total - start.cum) as f64 / span.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equation_matches_rfc_5348_by_hand() {
        // s = 1460, R = 100 ms, p = 1%: the two denominator terms by hand:
        // 0.1*sqrt(0.02/3) = 0.0081650, 0.4*3*sqrt(0.00375)*0.01*1.0032 =
        // 0.00073722; X = 1460 / 0.0089022 = 164 005 B/s.
        let x = x_calc(1460.0, Duration::from_millis(100), 0.01);
        assert!((x - 164_005.0).abs() < 50.0, "{x}");
        // Higher p or RTT, lower rate.
        assert!(x_calc(1460.0, Duration::from_millis(100), 0.02) < x);
        assert!(x_calc(1460.0, Duration::from_millis(200), 0.01) < x);
        let p = p_for_rate(1460.0, Duration::from_millis(100), x);
        assert!((p - 0.01).abs() < 1e-6, "{p}");
    }

    #[test]
    fn weighted_average_of_loss_intervals() {
        let mut li = LossIntervals::default();
        assert_eq!(li.p(), 0.0);
        li.new_event(Some(100));
        li.count(50);
        // Open interval 50 < closed 100: the average without it wins.
        assert_eq!(li.mean(), Some(100.0));
        let mut li = LossIntervals::default();
        li.new_event(Some(100));
        for len in [10, 20, 30, 40, 50, 60, 70, 80, 90] {
            li.count(len);
            li.new_event(None);
        }
        li.count(50);
        // Intervals now [50, 90, 80, 70, 60, 50, 40, 30, 20] (the oldest
        // fell off): tot0 = 50+90+80+70 + .8*60+.6*50+.4*40+.2*30 = 390,
        // tot1 = 90+80+70+60 + .8*50+.6*40+.4*30+.2*20 = 380, W = 6.
        let m = li.mean().unwrap();
        assert!((m - 65.0).abs() < 1e-9, "{m}");
        assert!((li.p() - 1.0 / 65.0).abs() < 1e-12);
    }

    #[test]
    fn arrival_rate_over_a_window() {
        const MS: Duration = Duration::from_millis(1);
        let rtt = 32 * MS; // 1 ms slots
        let mut r = ArrivalRate::default();
        assert_eq!(r.rate_over(Time::ZERO, rtt), None);
        // 1000 B every 100 us for 40 ms (10 MB/s), then 2000 B every
        // 100 us for 40 ms (20 MB/s); the last arrival at 79.9 ms.
        let mut t = Time::ZERO;
        for i in 0..800u64 {
            t = Time::from_nanos(i * 100_000);
            r.push(t, if i < 400 { 1000 } else { 2000 }, rtt);
        }
        let near = |x: Option<f64>, want: f64| {
            let x = x.unwrap();
            assert!((x / want - 1.0).abs() < 1e-9, "{x} against {want}");
        };
        // The last R: from the slot ending at 47.9 ms, 320 arrivals of
        // 2000 B over 32 ms.
        near(r.rate_over(t, rtt), 20e6);
        // 2R: from the slot ending at 15.9 ms, 240 x 1000 B + 400 x 2000 B
        // over 64 ms.
        near(r.rate_over(t, 2 * rtt), 16.25e6);
        // Nothing older is kept (the slot ending at 15.9 ms is the oldest),
        // so a longer window gives the same span, not a made-up one, and
        // the ring stays within its capacity.
        near(r.rate_over(t, 10 * rtt), 16.25e6);
        assert_eq!(r.slots.len(), 65);
        assert_eq!(r.slots[0].last, Time::from_nanos(15_900_000));
        // 10 ms of silence, then one packet: the last R reaches back to
        // the slot ending at 57.9 ms, 220 + 1 arrivals of 2000 B.
        r.push(t + 10 * MS, 2000, rtt);
        near(r.rate_over(t + 10 * MS, rtt), 2000.0 * 221.0 / 0.032);
        // One stamp for a whole GRO buffer: one slot, no zero span.
        let mut g = ArrivalRate::default();
        g.push(Time::from_nanos(5), 64_000, rtt);
        assert_eq!(g.rate_over(Time::from_nanos(5), rtt), None);
    }
}
