//! Interval bookkeeping, clock-free: the driver passes in "seconds since this
//! side started" and cumulative counters; these types turn them into
//! [`FlowInterval`]s and a [`FlowTotal`].
//!
//! Boundaries fall every `interval` seconds from the start while inside the
//! warm-up, then exactly at the end of the warm-up, then every `interval`
//! seconds after it, so measured intervals line up with the measured window.

mod flow;

pub use flow::{
    FlowEnd, FlowInterval, FlowTotal, TcpTotals, Throughput, UdpCounters, UdpSample, UdpTotal,
};

use crate::transport::tcp::{TcpCounters, TcpSample};
use crate::transport::{TransportCounters, TransportSection};

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

/// What the driver reads from a flow at a boundary: its byte counter and,
/// where the transport has them, TCP_INFO, the datagram counters, or
/// state of the transport's own.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reading {
    pub bytes: u64,
    pub tcp: Option<TcpCounters>,
    pub udp: Option<UdpCounters>,
    pub transport: Option<TransportCounters>,
}

/// One interval's figures: bytes, then the TCP, datagram and transport
/// parts where both ends of the interval have them.
type Delta = (
    u64,
    Option<TcpSample>,
    Option<UdpSample>,
    Option<TransportSection>,
);

impl Reading {
    pub fn bytes(bytes: u64) -> Self {
        Reading {
            bytes,
            ..Reading::default()
        }
    }

    /// The interval from `prev` to `self`, TCP, datagram and transport
    /// parts where both readings have them.
    fn delta(&self, prev: &Reading) -> Delta {
        let tcp = match (self.tcp, prev.tcp) {
            (Some(now), Some(before)) => Some(now.sample(&before)),
            _ => None,
        };
        let udp = match (self.udp, prev.udp) {
            (Some(now), Some(before)) => Some(now.sample(&before)),
            _ => None,
        };
        let transport = match (&self.transport, &prev.transport) {
            (Some(now), Some(before)) => now.sample(before),
            _ => None,
        };
        (self.bytes.saturating_sub(prev.bytes), tcp, udp, transport)
    }

    /// Keeps the last known TCP, datagram and transport parts when this
    /// reading lacks them (a socket that could not be read at the very
    /// end).
    fn or(self, older: &Reading) -> Reading {
        Reading {
            bytes: self.bytes,
            tcp: self.tcp.or(older.tcp),
            udp: self.udp.or(older.udp),
            transport: self.transport.or_else(|| older.transport.clone()),
        }
    }
}

/// Accumulates one flow's samples.
#[derive(Debug, Clone)]
pub struct FlowMeter {
    clock: IntervalClock,
    last_t: f64,
    last: Reading,
    /// The reading at the start of the newest recorded interval (to
    /// re-derive it when a final sliver is folded in).
    newest_start: Reading,
    omit_mark: Reading,
    intervals: Vec<FlowInterval>,
    rtt: RttStats,
    /// Windowed maxima of the datagram counters over the measured window.
    udp_max: (u64, u64),
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
    /// `start` is the flow's reading at the start; its TCP and datagram
    /// parts decide which of those fields this flow's intervals carry.
    pub fn new(clock: IntervalClock, start: Reading) -> Self {
        FlowMeter {
            clock,
            last_t: 0.0,
            last: start.clone(),
            newest_start: start.clone(),
            omit_mark: start,
            intervals: Vec::new(),
            rtt: RttStats::default(),
            udp_max: (0, 0),
        }
    }

    /// Records the reading taken at time `t` for the clock's `boundary`
    /// (the driver wakes a little after the boundary; rates use the real
    /// time `t`, classification uses the boundary it woke for).
    pub fn sample(&mut self, t: f64, boundary: f64, now: Reading) {
        if t <= self.last_t {
            return;
        }
        let now = now.or(&self.last);
        let omitted = boundary <= self.clock.omit_s + EPS;
        if self.clock.interval_s > 0.0 {
            self.push_interval(t, &now, omitted);
        }
        if omitted && (boundary - self.clock.omit_s).abs() < EPS {
            self.omit_mark = now.clone();
        }
        if !omitted {
            self.measure(&now);
        }
        self.last_t = t;
        self.last = now;
    }

    /// Folds a measured-window reading into the running extremes.
    fn measure(&mut self, r: &Reading) {
        if let Some(c) = r.tcp {
            self.rtt.add(c.rtt_us);
        }
        if let Some(u) = r.udp {
            self.udp_max.0 = self.udp_max.0.max(u.owd_excess_max_ns);
            self.udp_max.1 = self.udp_max.1.max(u.lateness_max_ns);
        }
    }

    pub fn interval_count(&self) -> usize {
        self.intervals.len()
    }

    pub fn last_interval(&self) -> Option<&FlowInterval> {
        self.intervals.last()
    }

    fn push_interval(&mut self, t: f64, now: &Reading, omitted: bool) {
        let (bytes, tcp, udp, transport) = now.delta(&self.last);
        self.newest_start = self.last.clone();
        self.intervals.push(FlowInterval {
            start_s: self.last_t,
            end_s: t,
            omitted,
            bytes,
            bits_per_second: rate(bytes, t - self.last_t),
            tcp,
            udp,
            transport,
        });
    }

    /// Closes the flow at `t` (its last byte, or its end of stream) and
    /// returns its intervals and its total over the measured window.
    pub fn finish(mut self, t: f64, end: Reading) -> (Vec<FlowInterval>, FlowTotal) {
        let end = end.or(&self.last);
        let t = t.max(self.last_t);
        let tail = t - self.last_t;
        let ends_in_warmup = t <= self.clock.omit_s + EPS;
        if t > self.last_t || end.bytes > self.last.bytes {
            let fold = self.clock.interval_s > 0.0
                && tail < SLIVER * self.clock.interval_s
                && self
                    .intervals
                    .last()
                    .is_some_and(|iv| !iv.omitted || ends_in_warmup);
            if fold {
                let (bytes, tcp, udp, transport) = end.delta(&self.newest_start);
                let iv = self.intervals.last_mut().expect("checked above");
                iv.end_s = t;
                iv.bytes = bytes;
                iv.bits_per_second = rate(bytes, iv.end_s - iv.start_s);
                iv.tcp = tcp.or(iv.tcp);
                // The fold's datagram maxima only cover the tail since the
                // last reading; the interval keeps the larger of both.
                iv.udp = match (udp, iv.udp) {
                    (Some(mut new), Some(old)) => {
                        new.owd_var_max_us = new.owd_var_max_us.max(old.owd_var_max_us);
                        new.max_lateness_us = new.max_lateness_us.max(old.max_lateness_us);
                        Some(new)
                    }
                    (new, old) => new.or(old),
                };
                iv.transport = transport.or(iv.transport.take());
            } else if self.clock.interval_s > 0.0 {
                self.push_interval(t, &end, ends_in_warmup);
            }
            if !ends_in_warmup {
                self.measure(&end);
            }
        }
        if ends_in_warmup {
            // Nothing was measured: the window is empty.
            self.omit_mark = end.clone();
        }
        let start_s = self.clock.omit_s.min(t);
        let (measured, tcp, udp, transport) = end.delta(&self.omit_mark);
        let total = FlowTotal {
            start_s,
            end_s: t,
            bytes: measured,
            bits_per_second: rate(measured, t - start_s),
            bytes_all: end.bytes,
            tcp: tcp.map(|whole| self.tcp_totals(whole)),
            udp: udp.zip(end.udp).map(|(mut window, all)| {
                window.owd_var_max_us = self.udp_max.0 as f64 / 1e3;
                window.max_lateness_us = self.udp_max.1 as f64 / 1e3;
                UdpTotal {
                    window,
                    packets_all: all.packets,
                    host_drops_all: all.host_drops,
                }
            }),
            transport,
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
            rtt_mean_us: self.rtt.sum.checked_div(self.rtt.n).unwrap_or(0) as u32,
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

    fn tcp(bytes: u64, c: TcpCounters) -> Reading {
        Reading {
            bytes,
            tcp: Some(c),
            ..Reading::default()
        }
    }

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
        let mut m = FlowMeter::new(IntervalClock::new(1.0, 1.0), Reading::default());
        m.sample(1.0, 1.0, Reading::bytes(500));
        m.sample(2.0, 2.0, Reading::bytes(1500));
        let (ivs, total) = m.finish(3.0, Reading::bytes(2500));
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
        let mut m = FlowMeter::new(IntervalClock::new(1.0, 1.0), Reading::default());
        m.sample(1.0004, 1.0, Reading::bytes(700));
        let (ivs, total) = m.finish(2.0, Reading::bytes(1700));
        assert!(ivs[0].omitted && !ivs[1].omitted);
        assert_eq!(total.bytes, 1000);
    }

    #[test]
    fn a_final_sliver_is_folded_into_the_previous_interval() {
        let mut m = FlowMeter::new(IntervalClock::new(1.0, 0.0), Reading::default());
        m.sample(1.0, 1.0, Reading::bytes(100));
        m.sample(2.0, 2.0, Reading::bytes(200));
        let (ivs, total) = m.finish(2.05, Reading::bytes(210));
        assert_eq!(ivs.len(), 2);
        assert_eq!(
            (ivs[1].start_s, ivs[1].end_s, ivs[1].bytes),
            (1.0, 2.05, 110)
        );
        assert_eq!(total.bytes, 210);
    }

    #[test]
    fn a_longer_tail_gets_its_own_interval() {
        let mut m = FlowMeter::new(IntervalClock::new(1.0, 0.0), Reading::default());
        m.sample(1.0, 1.0, Reading::bytes(100));
        let (ivs, _) = m.finish(1.5, Reading::bytes(150));
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
        let mut m = FlowMeter::new(IntervalClock::new(1.0, 1.0), tcp(0, c(0, 0)));
        m.sample(1.0, 1.0, tcp(10, c(3, 900)));
        m.sample(2.0, 2.0, tcp(20, c(4, 100)));
        let (ivs, total) = m.finish(3.0, tcp(30, c(9, 300)));
        assert_eq!(ivs[0].tcp.unwrap().retransmits, 3);
        let t = total.tcp.unwrap();
        assert_eq!(
            (t.retransmits, t.rtt_min_us, t.rtt_max_us, t.rtt_mean_us),
            (6, 100, 300, 200)
        );
    }

    #[test]
    fn a_flow_ending_inside_the_warmup_measures_nothing() {
        let m = FlowMeter::new(IntervalClock::new(1.0, 5.0), Reading::default());
        let (_, total) = m.finish(0.5, Reading::bytes(99));
        assert_eq!(
            (total.bytes, total.bytes_all, total.bits_per_second),
            (0, 99, 0.0)
        );
    }

    #[test]
    fn datagram_totals_exclude_the_warmup_but_keep_whole_run_counts() {
        let u = |packets, host_drops, owd_max| Reading {
            bytes: packets * 100,
            udp: Some(UdpCounters {
                packets,
                host_drops,
                owd_excess_max_ns: owd_max,
                ..Default::default()
            }),
            ..Reading::default()
        };
        let mut m = FlowMeter::new(IntervalClock::new(1.0, 1.0), u(0, 0, 0));
        m.sample(1.0, 1.0, u(10, 1, 9_000_000)); // warm-up: its max does not count
        m.sample(2.0, 2.0, u(30, 1, 2_000));
        let (ivs, total) = m.finish(3.0, u(50, 4, 5_000));
        assert_eq!(ivs[0].udp.unwrap().packets, 10);
        assert_eq!(ivs[1].udp.unwrap().packets, 20);
        let t = total.udp.unwrap();
        assert_eq!(
            (
                t.window.packets,
                t.window.host_drops,
                t.packets_all,
                t.host_drops_all
            ),
            (40, 3, 50, 4)
        );
        assert_eq!(t.window.owd_var_max_us, 5.0);
    }

    #[test]
    fn folding_a_sliver_keeps_the_intervals_datagram_maxima() {
        let u = |packets, late_max| Reading {
            bytes: packets,
            udp: Some(UdpCounters {
                packets,
                lateness_max_ns: late_max,
                ..Default::default()
            }),
            ..Reading::default()
        };
        let mut m = FlowMeter::new(IntervalClock::new(1.0, 0.0), u(0, 0));
        m.sample(1.0, 1.0, u(10, 7_000));
        m.sample(2.0, 2.0, u(20, 9_000));
        let (ivs, total) = m.finish(2.02, u(21, 0));
        assert_eq!(ivs.len(), 2);
        assert_eq!(ivs[1].udp.unwrap().max_lateness_us, 9.0);
        assert_eq!(total.udp.unwrap().window.max_lateness_us, 9.0);
    }
}
