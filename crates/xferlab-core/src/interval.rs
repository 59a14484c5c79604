//! Interval bookkeeping, clock-free: the driver passes in "seconds since this
//! side started" and cumulative counters; these types turn them into
//! [`FlowInterval`]s and a [`FlowTotal`].
//!
//! Boundaries fall every `interval` seconds from the start while inside the
//! warm-up, then exactly at the end of the warm-up, then every `interval`
//! seconds after it, so measured intervals line up with the measured window.

use crate::result::{FlowInterval, FlowTotal, TcpCounters, TcpSample, TcpTotals, Throughput};

/// Intervals shorter than this share of the interval at the very end are
/// folded into the previous one instead of printing a sliver.
const SLIVER: f64 = 0.1;
const EPS: f64 = 1e-9;

/// Where interval boundaries fall.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IntervalClock {
    pub interval_s: f64,
    pub omit_s: f64,
}

impl IntervalClock {
    pub fn new(interval_s: f64, omit_s: f64) -> Self {
        IntervalClock { interval_s, omit_s }
    }

    /// The first boundary strictly after `t`, or None when there is none
    /// (intervals off and the warm-up over).
    pub fn next_boundary(&self, t: f64) -> Option<f64> {
        let i = self.interval_s;
        if t + EPS < self.omit_s {
            let next = if i > 0.0 {
                ((t / i).floor() + 1.0) * i
            } else {
                f64::INFINITY
            };
            return Some(next.min(self.omit_s));
        }
        if i <= 0.0 {
            return None;
        }
        let k = ((t - self.omit_s) / i + EPS).floor() + 1.0;
        Some(self.omit_s + k * i)
    }
}

/// Accumulates one flow's samples.
#[derive(Debug, Clone)]
pub struct FlowMeter {
    clock: IntervalClock,
    last_t: f64,
    last_bytes: u64,
    last_tcp: Option<TcpCounters>,
    /// Counters at the start of the newest recorded interval (to re-derive it
    /// when a final sliver is folded in).
    newest_start: (u64, Option<TcpCounters>),
    omit_mark: (u64, Option<TcpCounters>),
    intervals: Vec<FlowInterval>,
    rtt: RttStats,
}

#[derive(Debug, Clone, Copy, Default)]
struct RttStats {
    min: u32,
    max: u32,
    sum: u64,
    n: u64,
}

impl RttStats {
    fn add(&mut self, rtt_us: u32) {
        if rtt_us == 0 {
            return;
        }
        self.min = if self.n == 0 {
            rtt_us
        } else {
            self.min.min(rtt_us)
        };
        self.max = self.max.max(rtt_us);
        self.sum += u64::from(rtt_us);
        self.n += 1;
    }
}

fn rate(bytes: u64, seconds: f64) -> f64 {
    Throughput::new(bytes, seconds).bits_per_second
}

impl FlowMeter {
    /// `tcp` is the flow's TCP_INFO at the start, when it is sampled at all
    /// (senders); None keeps TCP fields out of this flow's intervals.
    pub fn new(clock: IntervalClock, tcp: Option<TcpCounters>) -> Self {
        FlowMeter {
            clock,
            last_t: 0.0,
            last_bytes: 0,
            last_tcp: tcp,
            newest_start: (0, tcp),
            omit_mark: (0, tcp),
            intervals: Vec::new(),
            rtt: RttStats::default(),
        }
    }

    /// Records the counters read at time `t` for the clock's `boundary`
    /// (the driver wakes a little after the boundary; rates use the real
    /// time `t`, classification uses the boundary it woke for).
    pub fn sample(&mut self, t: f64, boundary: f64, bytes: u64, tcp: Option<TcpCounters>) {
        if t <= self.last_t {
            return;
        }
        let omitted = boundary <= self.clock.omit_s + EPS;
        if self.clock.interval_s > 0.0 {
            self.push_interval(t, bytes, tcp, omitted);
        }
        if omitted && (boundary - self.clock.omit_s).abs() < EPS {
            self.omit_mark = (bytes, tcp);
        }
        if !omitted {
            if let Some(c) = tcp {
                self.rtt.add(c.rtt_us);
            }
        }
        self.last_t = t;
        self.last_bytes = bytes;
        self.last_tcp = tcp.or(self.last_tcp);
    }

    pub fn interval_count(&self) -> usize {
        self.intervals.len()
    }

    pub fn last_interval(&self) -> Option<&FlowInterval> {
        self.intervals.last()
    }

    fn push_interval(&mut self, t: f64, bytes: u64, tcp: Option<TcpCounters>, omitted: bool) {
        let delta = bytes - self.last_bytes;
        let sample = match (tcp, self.last_tcp) {
            (Some(now), Some(prev)) => Some(now.sample(&prev)),
            _ => None,
        };
        self.newest_start = (self.last_bytes, self.last_tcp);
        self.intervals.push(FlowInterval {
            start_s: self.last_t,
            end_s: t,
            omitted,
            bytes: delta,
            bits_per_second: rate(delta, t - self.last_t),
            tcp: sample,
        });
    }

    /// Closes the flow at `t` (its last byte, or its end of stream) and
    /// returns its intervals and its total over the measured window.
    pub fn finish(
        mut self,
        t: f64,
        bytes: u64,
        tcp: Option<TcpCounters>,
    ) -> (Vec<FlowInterval>, FlowTotal) {
        let t = t.max(self.last_t);
        let tail = t - self.last_t;
        let ends_in_warmup = t <= self.clock.omit_s + EPS;
        if t > self.last_t || bytes > self.last_bytes {
            let fold = self.clock.interval_s > 0.0
                && tail < SLIVER * self.clock.interval_s
                && self
                    .intervals
                    .last()
                    .is_some_and(|iv| !iv.omitted || ends_in_warmup);
            if fold {
                let (start_bytes, start_tcp) = self.newest_start;
                let iv = self.intervals.last_mut().expect("checked above");
                iv.end_s = t;
                iv.bytes = bytes - start_bytes;
                iv.bits_per_second = rate(iv.bytes, iv.end_s - iv.start_s);
                if let (Some(now), Some(prev)) = (tcp, start_tcp) {
                    iv.tcp = Some(now.sample(&prev));
                }
            } else if self.clock.interval_s > 0.0 {
                self.push_interval(t, bytes, tcp, ends_in_warmup);
            }
            if !ends_in_warmup {
                if let Some(c) = tcp {
                    self.rtt.add(c.rtt_us);
                }
            }
        }
        if ends_in_warmup {
            // Nothing was measured: the window is empty.
            self.omit_mark = (bytes, tcp.or(self.last_tcp));
        }
        let start_s = self.clock.omit_s.min(t);
        let measured = bytes - self.omit_mark.0;
        let tcp_totals = match (tcp.or(self.last_tcp), self.omit_mark.1) {
            (Some(end), Some(start)) => Some(self.tcp_totals(end.sample(&start))),
            _ => None,
        };
        let total = FlowTotal {
            start_s,
            end_s: t,
            bytes: measured,
            bits_per_second: rate(measured, t - start_s),
            bytes_all: bytes,
            tcp: tcp_totals,
        };
        (self.intervals, total)
    }

    fn tcp_totals(&self, whole: TcpSample) -> TcpTotals {
        let frac = |part: u64| {
            if whole.busy_us > 0 {
                part as f64 / whole.busy_us as f64
            } else {
                0.0
            }
        };
        TcpTotals {
            retransmits: whole.retransmits,
            rtt_min_us: self.rtt.min,
            rtt_mean_us: if self.rtt.n > 0 {
                (self.rtt.sum / self.rtt.n) as u32
            } else {
                0
            },
            rtt_max_us: self.rtt.max,
            rwnd_limited_fraction: frac(whole.rwnd_limited_us),
            sndbuf_limited_fraction: frac(whole.sndbuf_limited_us),
            delivered_ce: whole.delivered_ce,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boundaries(clock: IntervalClock, until: f64) -> Vec<f64> {
        let mut out = vec![];
        let mut t = 0.0;
        while let Some(b) = clock.next_boundary(t) {
            if b > until {
                break;
            }
            out.push(b);
            t = b;
        }
        out
    }

    #[test]
    fn boundaries_align_to_the_end_of_the_warmup() {
        assert_eq!(
            boundaries(IntervalClock::new(1.0, 0.0), 3.0),
            vec![1.0, 2.0, 3.0]
        );
        assert_eq!(
            boundaries(IntervalClock::new(1.0, 1.5), 3.6),
            vec![1.0, 1.5, 2.5, 3.5]
        );
        assert_eq!(boundaries(IntervalClock::new(0.0, 2.0), 9.0), vec![2.0]);
        assert_eq!(
            boundaries(IntervalClock::new(0.0, 0.0), 9.0),
            Vec::<f64>::new()
        );
    }

    #[test]
    fn warmup_bytes_are_excluded_from_the_total() {
        let mut m = FlowMeter::new(IntervalClock::new(1.0, 1.0), None);
        m.sample(1.0, 1.0, 500, None);
        m.sample(2.0, 2.0, 1500, None);
        let (ivs, total) = m.finish(3.0, 2500, None);
        assert_eq!(ivs.len(), 3);
        assert!(ivs[0].omitted && !ivs[1].omitted && !ivs[2].omitted);
        assert_eq!(
            (total.bytes, total.bytes_all, total.start_s, total.end_s),
            (2000, 2500, 1.0, 3.0)
        );
        assert!((total.bits_per_second - 8000.0).abs() < 1e-6);
    }

    #[test]
    fn a_late_wakeup_at_the_end_of_the_warmup_still_marks_it() {
        let mut m = FlowMeter::new(IntervalClock::new(1.0, 1.0), None);
        m.sample(1.0004, 1.0, 700, None);
        let (ivs, total) = m.finish(2.0, 1700, None);
        assert!(ivs[0].omitted && !ivs[1].omitted);
        assert_eq!(total.bytes, 1000);
    }

    #[test]
    fn a_final_sliver_is_folded_into_the_previous_interval() {
        let mut m = FlowMeter::new(IntervalClock::new(1.0, 0.0), None);
        m.sample(1.0, 1.0, 100, None);
        m.sample(2.0, 2.0, 200, None);
        let (ivs, total) = m.finish(2.05, 210, None);
        assert_eq!(ivs.len(), 2);
        assert_eq!(
            (ivs[1].start_s, ivs[1].end_s, ivs[1].bytes),
            (1.0, 2.05, 110)
        );
        assert_eq!(total.bytes, 210);
    }

    #[test]
    fn a_longer_tail_gets_its_own_interval() {
        let mut m = FlowMeter::new(IntervalClock::new(1.0, 0.0), None);
        m.sample(1.0, 1.0, 100, None);
        let (ivs, _) = m.finish(1.5, 150, None);
        assert_eq!(ivs.len(), 2);
        assert_eq!((ivs[1].start_s, ivs[1].end_s, ivs[1].bytes), (1.0, 1.5, 50));
    }

    #[test]
    fn tcp_totals_cover_the_measured_window_only() {
        let c = |retrans, rtt| TcpCounters {
            total_retrans: retrans,
            rtt_us: rtt,
            ..Default::default()
        };
        let mut m = FlowMeter::new(IntervalClock::new(1.0, 1.0), Some(c(0, 0)));
        m.sample(1.0, 1.0, 10, Some(c(3, 900)));
        m.sample(2.0, 2.0, 20, Some(c(4, 100)));
        let (ivs, total) = m.finish(3.0, 30, Some(c(9, 300)));
        assert_eq!(ivs[0].tcp.unwrap().retransmits, 3);
        let t = total.tcp.unwrap();
        assert_eq!(
            (t.retransmits, t.rtt_min_us, t.rtt_max_us, t.rtt_mean_us),
            (6, 100, 300, 200)
        );
    }

    #[test]
    fn a_flow_ending_inside_the_warmup_measures_nothing() {
        let m = FlowMeter::new(IntervalClock::new(1.0, 5.0), None);
        let (_, total) = m.finish(0.5, 99, None);
        assert_eq!(
            (total.bytes, total.bytes_all, total.bits_per_second),
            (0, 99, 0.0)
        );
    }
}
