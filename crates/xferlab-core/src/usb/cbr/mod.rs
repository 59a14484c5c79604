//! Fixed-rate USB streaming (`xferlab usb cbr`), sans-IO: the device's
//! fixed-rate buffer with its overruns and underruns ([`rate`]), the
//! control requests that start a stream and fetch the device's report
//! ([`wire`]), the criterion that judges a trial, for the rate search
//! of [`crate::datagram::RateSearch`], and the document of a run ([`report`]).

pub mod rate;
pub mod report;
pub mod wire;

use crate::datagram::{Judge, Verdict};
use rate::{Faults, RateReport};
use serde::{Deserialize, Serialize};

/// What a trial may show and still count as sustained (each compared with
/// `>`: exactly at a threshold passes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CbrCriterion {
    /// Largest number of overrun samples (RX: due with the buffer full).
    pub max_overruns: u64,
    /// Largest number of underrun samples (TX: due with the buffer empty).
    pub max_underruns: u64,
}

/// One trial as the device reported it (STOP's answer), and whether the
/// host's own streaming failed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CbrOutcome {
    pub rx: Option<RateReport>,
    pub tx: Option<RateReport>,
    /// The host stream's error: it fails the rate whatever the device saw.
    pub host_error: Option<String>,
}

impl CbrOutcome {
    pub fn overruns(&self) -> u64 {
        self.rx.map_or(0, |r| r.overruns.samples) + self.tx.map_or(0, |r| r.overruns.samples)
    }
    pub fn underruns(&self) -> u64 {
        self.rx.map_or(0, |r| r.underruns.samples) + self.tx.map_or(0, |r| r.underruns.samples)
    }
}

fn first_at(f: &Faults) -> String {
    match f.kept().first() {
        Some(e) => format!(
            "{} episode(s), first at {:.3} s",
            f.episodes,
            e.start_ns as f64 / 1e9
        ),
        None => format!("{} episode(s)", f.episodes),
    }
}

impl Judge for CbrCriterion {
    type Outcome = CbrOutcome;

    fn judge(&self, o: &CbrOutcome) -> Verdict {
        if let Some(e) = &o.host_error {
            return Verdict::Failed(format!("the host stream failed: {e}"));
        }
        let reports = [o.rx, o.tx];
        let streamed = reports.iter().flatten().any(|r| r.samples_due > 0);
        if !streamed {
            return Verdict::Failed(
                "the device streamed nothing (no sample fell due; TX: the host never filled the prefill)"
                    .into(),
            );
        }
        let mut failed = Vec::new();
        if o.overruns() > self.max_overruns {
            let f = o.rx.map(|r| r.overruns).unwrap_or_default();
            failed.push(format!(
                "overruns {} > {} ({})",
                o.overruns(),
                self.max_overruns,
                first_at(&f)
            ));
        }
        if o.underruns() > self.max_underruns {
            let f = o.tx.map(|r| r.underruns).unwrap_or_default();
            failed.push(format!(
                "underruns {} > {} ({})",
                o.underruns(),
                self.max_underruns,
                first_at(&f)
            ));
        }
        if failed.is_empty() {
            Verdict::Sustained
        } else {
            Verdict::Failed(failed.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::rate::{RateBuffer, Role};
    use super::*;
    use crate::datagram::{Plan, RateSearch};

    /// A host that takes `host_rate` bytes/s from a 1000-byte device buffer
    /// in 100-byte pieces, for 1 s of virtual time.
    fn trial(rate: u64, host_rate: u64) -> CbrOutcome {
        let mut b = RateBuffer::new(Role::Source, rate, 4, 1000).unwrap();
        b.start(0);
        let step = 100 * 1_000_000_000 / host_rate;
        let mut t = 0;
        while t < 1_000_000_000 {
            t += step;
            b.advance(t);
            b.drained(100);
        }
        CbrOutcome {
            rx: Some(b.report()),
            ..CbrOutcome::default()
        }
    }

    #[test]
    fn a_ladder_of_device_trials_finds_the_host_limit() {
        let c = CbrCriterion {
            max_overruns: 0,
            max_underruns: 0,
        };
        let mut s = RateSearch::new(Plan::Ladder(vec![8_000, 20_000, 10_000, 12_000]), c);
        while let Some(rate) = s.next_rate() {
            s.record(rate, &trial(rate, 10_000));
        }
        assert_eq!(s.best(), Some(10_000));
        let tried: Vec<u64> = s.trials().iter().map(|t| t.0).collect();
        assert_eq!(tried, vec![8_000, 10_000, 12_000]);
        let Verdict::Failed(why) = &s.trials()[2].1 else {
            panic!("12 kB/s from a 10 kB/s host must fail");
        };
        // 2 kB/s more than the host takes: after 45 steps of 10 ms the
        // fill is 900 B, so of the 30 samples due by 460 ms 25 fit and
        // sample 1376 (due at 458.67 ms) is the first overrun.
        assert!(why.starts_with("overruns "), "{why}");
        let at: f64 = why
            .split("first at ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(at, 0.459, "{why}");
    }

    #[test]
    fn the_criterion_allows_what_it_says_and_needs_a_stream() {
        let c = CbrCriterion {
            max_overruns: 5,
            max_underruns: 0,
        };
        let mut o = trial(12_000, 10_000);
        let n = o.overruns();
        assert!(n > 5);
        o.rx.as_mut().unwrap().overruns.samples = 5;
        assert_eq!(c.judge(&o), Verdict::Sustained);
        assert!(
            matches!(c.judge(&CbrOutcome::default()), Verdict::Failed(w) if w.contains("streamed nothing"))
        );
        // A failed host stream fails the rate whatever the device saw.
        let broken = CbrOutcome {
            host_error: Some("no such device".into()),
            ..o.clone()
        };
        assert!(
            matches!(c.judge(&broken), Verdict::Failed(w) if w == "the host stream failed: no such device")
        );
        let mut sink = RateBuffer::new(Role::Sink { prefill: 8 }, 1000, 4, 8).unwrap();
        sink.start(0);
        sink.filled(0, 8);
        sink.advance(1_000_000_000);
        let o = CbrOutcome {
            tx: Some(sink.report()),
            ..CbrOutcome::default()
        };
        assert_eq!(o.underruns(), 248);
        let Verdict::Failed(w) = c.judge(&o) else {
            panic!()
        };
        assert_eq!(w, "underruns 248 > 0 (1 episode(s), first at 0.012 s)");
    }
}
