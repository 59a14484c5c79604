//! Latency distributions, one type for every pattern and transport: a
//! [`LatencyRecorder`] on the data path (an HdrHistogram for the
//! percentiles plus exact count, sum, sum of squares, min and max) and the
//! [`LatencySummary`] it reduces to in the result (rr request/response and
//! connect latency, USB completion latency).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// A latency distribution in microseconds. `min`, `mean`, `stddev` and
/// `max` are exact; the percentiles come from an HdrHistogram and are
/// within its precision (1 %, or 0.1 % for merged and small tests).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatencySummary {
    pub count: u64,
    pub min_us: f64,
    pub mean_us: f64,
    /// Absent in USB results written before the summary types were one.
    #[serde(default)]
    pub stddev_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// One point of a latency distribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Percentile {
    pub percentile: f64,
    pub us: f64,
}

/// Largest latency recorded exactly in the histogram; longer ones are
/// clamped to it (an rr timeout is at most 60 s, a USB transfer timeout
/// ends the run long before). Min, max and mean stay exact.
const MAX_NS: u64 = 100_000_000_000;
/// The percentiles listed for a merged distribution.
pub const PERCENTILES: [f64; 9] = [0.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0];

#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    hist: Histogram<u64>,
    count: u64,
    sum_ns: u128,
    sum_sq: f64,
    min_ns: u64,
    max_ns: u64,
}

impl LatencyRecorder {
    /// `digits` significant decimal digits (2 or 3): 3 costs ~230 KB per
    /// recorder, 2 about 30 KB, which matters with thousands of flows.
    pub fn new(digits: u8) -> Self {
        LatencyRecorder {
            hist: Histogram::new_with_bounds(1, MAX_NS, digits.clamp(1, 3))
                .expect("valid histogram bounds"),
            count: 0,
            sum_ns: 0,
            sum_sq: 0.0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }

    pub fn record(&mut self, ns: u64) {
        let v = ns.clamp(1, MAX_NS);
        self.hist.saturating_record(v);
        self.count += 1;
        self.sum_ns += u128::from(ns);
        self.sum_sq += (ns as f64) * (ns as f64);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of recorded latencies, ns.
    pub fn sum_ns(&self) -> u128 {
        self.sum_ns
    }

    pub fn merge(&mut self, other: &LatencyRecorder) {
        self.hist.add(&other.hist).ok();
        self.count += other.count;
        self.sum_ns += other.sum_ns;
        self.sum_sq += other.sum_sq;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// None when nothing was recorded.
    pub fn summary(&self) -> Option<LatencySummary> {
        if self.count == 0 {
            return None;
        }
        let n = self.count as f64;
        let mean = self.sum_ns as f64 / n;
        let var = (self.sum_sq / n - mean * mean).max(0.0);
        let q = |p: f64| self.quantile_us(p);
        Some(LatencySummary {
            count: self.count,
            min_us: self.min_ns as f64 / 1e3,
            mean_us: mean / 1e3,
            stddev_us: var.sqrt() / 1e3,
            p50_us: q(50.0),
            p90_us: q(90.0),
            p99_us: q(99.0),
            p999_us: q(99.9),
            max_us: self.max_ns as f64 / 1e3,
        })
    }

    /// The value at `pct` percent, µs, kept within [min, max] so the
    /// histogram's bucket rounding never reports a percentile outside the
    /// values actually seen.
    fn quantile_us(&self, pct: f64) -> f64 {
        let v = self.hist.value_at_quantile(pct / 100.0);
        v.clamp(self.min_ns, self.max_ns) as f64 / 1e3
    }

    pub fn percentiles(&self) -> Vec<Percentile> {
        if self.count == 0 {
            return Vec::new();
        }
        PERCENTILES
            .iter()
            .map(|&p| Percentile {
                percentile: p,
                us: self.quantile_us(p),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_is_exact_where_it_can_be_and_percentiles_are_monotone() {
        let mut r = LatencyRecorder::new(3);
        assert_eq!(r.summary(), None);
        for us in 1..=1000u64 {
            r.record(us * 1000);
        }
        let s = r.summary().unwrap();
        assert_eq!(s.count, 1000);
        assert_eq!((s.min_us, s.max_us), (1.0, 1000.0));
        assert!((s.mean_us - 500.5).abs() < 1e-9);
        assert!((s.stddev_us - 288.67).abs() < 0.01);
        assert!((s.p50_us - 500.0).abs() <= 1.0, "{}", s.p50_us);
        assert!((s.p99_us - 990.0).abs() <= 1.0, "{}", s.p99_us);
        assert!(s.min_us <= s.p50_us && s.p50_us <= s.p90_us && s.p90_us <= s.p99_us);
        assert!(s.p99_us <= s.p999_us && s.p999_us <= s.max_us);
        let p = r.percentiles();
        assert!(p.windows(2).all(|w| w[0].us <= w[1].us));
        assert_eq!(p.last().unwrap().us, 1000.0);
    }

    #[test]
    fn merging_coarse_flows_into_a_fine_total_keeps_counts_and_extremes() {
        let mut a = LatencyRecorder::new(2);
        let mut b = LatencyRecorder::new(2);
        a.record(10_000);
        b.record(30_000);
        b.record(50_000);
        let mut all = LatencyRecorder::new(3);
        all.merge(&a);
        all.merge(&b);
        let s = all.summary().unwrap();
        assert_eq!(
            (s.count, s.min_us, s.max_us, s.mean_us),
            (3, 10.0, 50.0, 30.0)
        );
        assert!((s.p50_us - 30.0).abs() < 0.5);
    }
}
