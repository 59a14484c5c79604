//! TFRC (RFC 5348) arithmetic shared by CCID3's halves: the throughput
//! equation, its inverse for the first loss interval, and the weighted
//! average of loss intervals.

use std::collections::VecDeque;
use std::time::Duration;

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
}
