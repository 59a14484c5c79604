//! Trace-driven rates: delivery opportunities at given times, repeating,
//! as mahimahi's trace format has them (one millisecond timestamp per
//! line, each line one opportunity to deliver 1500 bytes), or built from
//! a schedule of rates and outages ("10M for 5 s, then 2M").

use serde::{Deserialize, Serialize};

use super::config::LinkError;
use crate::units::parse_rate;

/// Bytes one opportunity delivers (mahimahi's `PACKET_SIZE`).
pub const OPPORTUNITY_BYTES: u64 = 1500;

/// Most opportunities a schedule may expand to (8 bytes each).
const MAX_OPPORTUNITIES: usize = 4_000_000;

/// The opportunities of one period; the period repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Trace {
    /// Where it came from: the trace file, or the schedule as given.
    pub source: String,
    /// Length of one period, ns.
    pub period_ns: u64,
    /// Opportunities per period.
    pub opportunities: u64,
    /// Opportunity times within the period, ns, non-decreasing (not in
    /// the result: the source names them).
    #[serde(skip)]
    #[schemars(skip)]
    pub times_ns: Vec<u64>,
}

impl Trace {
    /// Parses a mahimahi trace (the text of the file named `source`).
    pub fn mahimahi(source: &str, text: &str) -> Result<Self, LinkError> {
        let mut times = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() {
                continue;
            }
            let ms: u64 = l.parse().map_err(|_| {
                LinkError::NotTrace(format!(
                    "{source} line {}: '{l}' is not a whole number of milliseconds",
                    i + 1
                ))
            })?;
            if times.last().is_some_and(|&t| ms * 1_000_000 < t) {
                return Err(LinkError::NotTrace(format!(
                    "{source} line {}: {ms} ms comes before the line above it",
                    i + 1
                )));
            }
            times.push(ms * 1_000_000);
        }
        let period_ns = *times
            .last()
            .ok_or_else(|| LinkError::NotTrace(format!("{source}: no opportunities in it")))?;
        if period_ns == 0 {
            return Err(LinkError::NotTrace(format!(
                "{source}: the last timestamp (the period) must be above 0 ms"
            )));
        }
        Ok(Trace {
            source: source.to_string(),
            period_ns,
            opportunities: times.len() as u64,
            times_ns: times,
        })
    }

    /// `RATE:DURATION,...` with `off` for an outage (`10M:5s,off:1s,2M:5s`):
    /// evenly spaced opportunities at each rate; the schedule repeats.
    pub fn schedule(spec: &str) -> Result<Self, LinkError> {
        let help = || LinkError::NotSchedule(spec.to_string());
        let mut times = Vec::new();
        let mut start = 0u64;
        for step in spec.split(',') {
            let (rate, dur) = step.split_once(':').ok_or_else(help)?;
            let dur = super::config::parse_delay(dur).map_err(|_| help())?;
            if dur == 0 {
                return Err(help());
            }
            if rate.trim() != "off" {
                let r = parse_rate(rate.trim()).map_err(|_| help())?;
                if r == 0 {
                    return Err(help());
                }
                // One opportunity per 1500 bytes at the rate, the first
                // one opportunity-time into the step.
                let gap = OPPORTUNITY_BYTES as f64 * 8.0 * 1e9 / r as f64;
                let n = (dur as f64 / gap).floor() as usize;
                if times.len() + n > MAX_OPPORTUNITIES {
                    return Err(LinkError::ScheduleTooDense(spec.to_string()));
                }
                times.extend((1..=n).map(|i| start + (i as f64 * gap).round() as u64));
            }
            start += dur;
        }
        Ok(Trace {
            source: format!("schedule {spec}"),
            period_ns: start,
            opportunities: times.len() as u64,
            times_ns: times,
        })
    }

    /// Time of opportunity `k` (counting over the repetitions).
    pub fn time(&self, k: u64) -> u64 {
        let n = self.times_ns.len() as u64;
        (k / n) * self.period_ns + self.times_ns[(k % n) as usize]
    }

    /// The first opportunity at or after `t`.
    pub fn first_at_or_after(&self, t: u64) -> u64 {
        let n = self.times_ns.len() as u64;
        let rep = t / self.period_ns;
        let offset = t - rep * self.period_ns;
        let i = self.times_ns.partition_point(|&x| x < offset) as u64;
        rep * n + i
    }

    /// Opportunities in (a, b].
    pub fn count_between(&self, a: u64, b: u64) -> u64 {
        self.first_at_or_after(b + 1)
            .saturating_sub(self.first_at_or_after(a + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mahimahi_traces_repeat_and_count() {
        let t = Trace::mahimahi("t", "1\n1\n3\n\n4\n").unwrap();
        assert_eq!((t.period_ns, t.opportunities), (4_000_000, 4));
        assert_eq!(t.time(0), 1_000_000);
        assert_eq!(t.time(4), 5_000_000);
        assert_eq!(t.first_at_or_after(1_500_000), 2);
        assert_eq!(t.first_at_or_after(4_000_001), 4);
        // (0, 8 ms]: two periods.
        assert_eq!(t.count_between(0, 8_000_000), 8);
        assert!(Trace::mahimahi("t", "3\n2\n").is_err());
        assert!(Trace::mahimahi("t", "x\n").is_err());
        assert!(Trace::mahimahi("t", "").is_err());
    }

    #[test]
    fn schedules_space_opportunities_at_each_rate() {
        // 12 Mbit/s: one 1500-byte opportunity per ms.
        let t = Trace::schedule("12M:1s,off:500ms,1.2M:1s").unwrap();
        assert_eq!(t.period_ns, 2_500_000_000);
        assert_eq!(t.opportunities, 1000 + 100);
        assert_eq!(t.time(0), 1_000_000);
        assert_eq!(t.time(1000), 1_510_000_000);
        assert!(Trace::schedule("12M").is_err());
        assert!(Trace::schedule("100G:100s").is_err());
    }
}
