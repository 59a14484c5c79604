//! What one direction of the emulator did, for its accuracy self-report:
//! counters by cause, a histogram of departure lateness and the achieved
//! rate over >= 1 s windows in which the link was busy throughout.

use serde::{Deserialize, Serialize};

/// Lateness buckets: 1 us wide up to 1 ms, then 100 us wide up to 100 ms,
/// then one overflow bucket.
const FINE: usize = 1000;
const COARSE: usize = 990;
const BUCKETS: usize = FINE + COARSE + 1;

/// Departure lateness (actual minus scheduled), fixed buckets, no
/// allocation after creation.
#[derive(Debug, Clone)]
pub struct LatenessHistogram {
    counts: Box<[u64; BUCKETS]>,
    total: u64,
    max_ns: u64,
    sum_ns: u128,
}

impl Default for LatenessHistogram {
    fn default() -> Self {
        LatenessHistogram {
            counts: Box::new([0; BUCKETS]),
            total: 0,
            max_ns: 0,
            sum_ns: 0,
        }
    }
}

impl LatenessHistogram {
    pub fn record(&mut self, late_ns: u64) {
        let us = late_ns / 1000;
        let i = if us < FINE as u64 {
            us as usize
        } else {
            (FINE + ((us - FINE as u64) / 100) as usize).min(BUCKETS - 1)
        };
        self.counts[i] += 1;
        self.total += 1;
        self.max_ns = self.max_ns.max(late_ns);
        self.sum_ns += u128::from(late_ns);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// Upper edge (us) of the bucket holding quantile `q` (0..1); None
    /// when empty.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let edge = if i < FINE {
                    (i + 1) as f64
                } else if i < BUCKETS - 1 {
                    (FINE + (i - FINE + 1) * 100) as f64
                } else {
                    self.max_ns as f64 / 1000.0
                };
                return Some(edge.min(self.max_ns as f64 / 1000.0).max(0.0));
            }
        }
        None
    }

    pub fn mean_us(&self) -> Option<f64> {
        (self.total > 0).then(|| self.sum_ns as f64 / self.total as f64 / 1000.0)
    }

    pub fn max_us(&self) -> f64 {
        self.max_ns as f64 / 1000.0
    }
}

/// Achieved rate over windows of at least `WINDOW_NS` inside one busy
/// period, measured on actual departure times.
#[derive(Debug, Clone, Default)]
pub struct RateMeter {
    period: Option<u64>,
    window_start: u64,
    window_bits: u64,
    /// Finished windows: count and ratio (achieved / configured) extremes.
    pub windows: u64,
    pub min_ratio: f64,
    pub max_ratio: f64,
    sum_ratio: f64,
}

pub const WINDOW_NS: u64 = 1_000_000_000;

impl RateMeter {
    /// One departure at actual time `now` of `bits` (wire, incl.
    /// overhead) from busy period `period`.
    pub fn depart(&mut self, now: u64, bits: u64, period: u64, rate_bps: u64) {
        self.depart_against(now, bits, period, |start, end| {
            rate_bps as f64 * (end - start) as f64 / 1e9
        });
    }

    /// As `depart`, against what the link could carry between two
    /// instants (a trace's opportunities in that span).
    pub fn depart_against(
        &mut self,
        now: u64,
        bits: u64,
        period: u64,
        capacity_bits: impl FnOnce(u64, u64) -> f64,
    ) {
        if self.period != Some(period) {
            // The first packet of a period only marks the start: its bits
            // were serialized before this instant.
            self.period = Some(period);
            self.window_start = now;
            self.window_bits = 0;
            return;
        }
        self.window_bits += bits;
        let span = now.saturating_sub(self.window_start);
        if span >= WINDOW_NS {
            let ratio = self.window_bits as f64 / capacity_bits(self.window_start, now);
            if self.windows == 0 {
                self.min_ratio = ratio;
                self.max_ratio = ratio;
            } else {
                self.min_ratio = self.min_ratio.min(ratio);
                self.max_ratio = self.max_ratio.max(ratio);
            }
            self.sum_ratio += ratio;
            self.windows += 1;
            self.window_start = now;
            self.window_bits = 0;
        }
    }

    pub fn mean_ratio(&self) -> Option<f64> {
        (self.windows > 0).then(|| self.sum_ratio / self.windows as f64)
    }
}

/// Counters of one direction. Packets are what the emulator handled (a
/// GSO superpacket is one); segments are what the wire carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LinkCounters {
    pub arrived_packets: u64,
    pub arrived_segments: u64,
    /// Arrivals that were ECN-capable (ECT(0)/ECT(1)): what a marker
    /// could mark.
    pub arrived_ect_packets: u64,
    pub dropped_loss_packets: u64,
    pub dropped_loss_segments: u64,
    /// Runs of consecutive loss-model drops (mean burst length =
    /// dropped_loss_packets / loss_bursts).
    pub loss_bursts: u64,
    pub dropped_queue_packets: u64,
    pub dropped_queue_segments: u64,
    /// Non-ECT packets the marker dropped where it would have marked an
    /// ECT one (RED, or fixed marking with `drop:`).
    pub dropped_red_packets: u64,
    pub dropped_red_segments: u64,
    /// Dropped at dequeue by the queue discipline (CoDel).
    #[serde(default)]
    pub dropped_qdisc_packets: u64,
    #[serde(default)]
    pub dropped_qdisc_segments: u64,
    /// CE marks the queue discipline set at dequeue (also in
    /// `marked_packets`).
    #[serde(default)]
    pub marked_qdisc_packets: u64,
    /// CE-marked packets sent on (a duplicated marked packet counts
    /// twice: the receiver sees both). One mark covers every segment of a superpacket;
    /// the receiver's IpExtInCEPkts counts a superpacket written to its TUN
    /// device once, so `marked_packets` is what it must match.
    pub marked_packets: u64,
    pub marked_segments: u64,
    pub duplicated_packets: u64,
    pub reordered_packets: u64,
    pub departed_packets: u64,
    pub departed_segments: u64,
    /// Bytes on the wire, per segment, without overhead.
    pub departed_wire_bytes: u64,
    /// Largest queue seen by an arriving packet, bytes.
    pub max_queue_bytes: u64,
}

/// One direction's self-report, as stored in a result file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DirectionReport {
    pub counters: LinkCounters,
    /// Departures with a lateness sample.
    pub lateness_samples: u64,
    pub lateness_p50_us: Option<f64>,
    pub lateness_p99_us: Option<f64>,
    pub lateness_p999_us: Option<f64>,
    pub lateness_max_us: Option<f64>,
    /// Configured rate and the achieved one over >= 1 s windows in which
    /// the link was busy throughout (none when it never was, or when
    /// jitter/reordering make departure order differ from serialization).
    pub rate_bps: Option<u64>,
    pub rate_windows: u64,
    pub rate_ratio_min: Option<f64>,
    pub rate_ratio_max: Option<f64>,
    pub rate_ratio_mean: Option<f64>,
    /// Queueing delay (arrival to start of serialization) of packets that
    /// arrived after the first 2 s, on a shaped link.
    #[serde(default)]
    pub sojourn_samples: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sojourn_mean_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sojourn_p99_us: Option<f64>,
    /// FQ-CoDel: flow queues that ever held a packet (fewer than the
    /// flows that crossed the link when their hashes collided).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fq_flows: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles() {
        let mut h = LatenessHistogram::default();
        for i in 0..1000u64 {
            h.record(i * 1000 + 500); // 0.5 .. 999.5 us
        }
        assert_eq!(h.quantile_us(0.5), Some(500.0));
        assert_eq!(h.quantile_us(0.99), Some(990.0));
        h.record(5_000_000);
        assert_eq!(h.quantile_us(1.0), Some(5000.0));
        assert_eq!(LatenessHistogram::default().quantile_us(0.5), None);
    }

    #[test]
    fn rate_windows_within_busy_periods() {
        let mut m = RateMeter::default();
        // 1000-byte packets every 80 us = 100 Mbit/s, for 2.5 s.
        for i in 0..=31_250u64 {
            m.depart(i * 80_000, 8000, 1, 100_000_000);
        }
        assert_eq!(m.windows, 2);
        assert!((m.mean_ratio().unwrap() - 1.0).abs() < 1e-9);
        // A new busy period restarts the window.
        m.depart(10_000_000_000, 8000, 2, 100_000_000);
        m.depart(10_500_000_000, 8000, 2, 100_000_000);
        assert_eq!(m.windows, 2);
    }
}
