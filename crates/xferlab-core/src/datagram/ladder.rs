//! "The highest rate this path sustains": the method behind tables of
//! maximum sustained rate per transfer size and buffer size.
//!
//! A rate is run as a trial, the trial is judged pass or fail by an
//! explicit criterion (so a table says what "sustained" meant: [`Criterion`]
//! for datagrams, any other [`Judge`], e.g. USB overruns), and a
//! [`RateSearch`] picks the next rate from the verdicts. One search gives
//! one best rate; since a busy host can fail a rate it sustains most of the
//! time, the whole search is repeated and [`repeat_summary`] reports max,
//! median and min of the runs. Running the trials is the driver's job: this
//! is only the bookkeeping, so it is deterministic and tested without a
//! network.

use serde::{Deserialize, Serialize};

/// What a trial must stay within to count as sustained. Each threshold is
/// compared with `>`: a trial exactly at a threshold passes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Criterion {
    /// Largest share of datagrams sent that may go missing (0.01 = 1 %).
    pub max_loss_fraction: f64,
    /// Largest number of datagrams the receiving host may drop itself
    /// (socket buffer overflow): separate from loss because a rate that
    /// only works when the path drops nothing but the host does is a host
    /// limit, and some tables want none at all.
    pub max_host_drops: u64,
    /// Largest share of datagrams the sender may send late (behind its
    /// schedule by more than the pacer's slack): a sender that cannot keep
    /// up has not sustained the rate even if nothing was lost.
    pub max_late_fraction: f64,
}

/// What one trial at one rate measured, from both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TrialOutcome {
    pub sent: u64,
    pub received: u64,
    pub host_drops: u64,
    pub late: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Sustained,
    /// Which thresholds were exceeded, with the numbers, e.g.
    /// `loss 2.31 % > 1 % (231 of 10000 datagrams)`; several are joined
    /// with `; `.
    Failed(String),
}

impl Verdict {
    pub fn is_sustained(&self) -> bool {
        matches!(self, Verdict::Sustained)
    }
}

/// A fraction as a percentage, with enough decimals that a small non-zero
/// value does not print as 0, and no trailing zeros.
fn percent(fraction: f64) -> String {
    let p = fraction * 100.0;
    let decimals = if p > 0.0 && p < 0.01 {
        ((-p.log10()).floor() as usize + 2).min(12)
    } else {
        2
    };
    let s = format!("{p:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A pass/fail rule for one trial: what the search asks of every rate.
pub trait Judge {
    /// What a trial measured.
    type Outcome;
    fn judge(&self, outcome: &Self::Outcome) -> Verdict;
}

impl Judge for Criterion {
    type Outcome = TrialOutcome;
    fn judge(&self, t: &TrialOutcome) -> Verdict {
        Criterion::judge(self, t)
    }
}

impl Criterion {
    pub fn judge(&self, t: &TrialOutcome) -> Verdict {
        if t.sent == 0 {
            // Nothing to judge by, and a sender that sent nothing did not
            // sustain anything.
            return Verdict::Failed("nothing was sent".to_string());
        }
        let mut failed = Vec::new();
        let lost = t.sent.saturating_sub(t.received);
        let loss = lost as f64 / t.sent as f64;
        if loss > self.max_loss_fraction {
            failed.push(format!(
                "loss {} % > {} % ({lost} of {} datagrams)",
                percent(loss),
                percent(self.max_loss_fraction),
                t.sent
            ));
        }
        if t.host_drops > self.max_host_drops {
            failed.push(format!(
                "host drops {} > {}",
                t.host_drops, self.max_host_drops
            ));
        }
        let late = t.late as f64 / t.sent as f64;
        if late > self.max_late_fraction {
            failed.push(format!(
                "late {} % > {} % ({} of {} datagrams sent late)",
                percent(late),
                percent(self.max_late_fraction),
                t.late,
                t.sent
            ));
        }
        if failed.is_empty() {
            Verdict::Sustained
        } else {
            Verdict::Failed(failed.join("; "))
        }
    }
}

/// Which rates to try, in bit/s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Fixed rungs, tried in ascending order (sorted and deduplicated
    /// first) until the first failure: the usual way to fill a table with
    /// comparable rows, since every row tries the same rates.
    Ladder(Vec<u64>),
    /// Binary search between `low` and `high` (swapped if given the wrong
    /// way round) until they are at most `resolution` apart (at least 1),
    /// assuming a path that sustains a rate sustains every lower one.
    Bisect {
        low: u64,
        high: u64,
        resolution: u64,
    },
}

#[derive(Debug, Clone)]
enum State {
    Ladder {
        rates: Vec<u64>,
        next: usize,
        stopped: bool,
    },
    Bisect {
        /// Sustained (if `lo_tested`) or assumed to be.
        lo: u64,
        /// Failed, once `top_tested`.
        hi: u64,
        resolution: u64,
        top_tested: bool,
        lo_tested: bool,
        done: bool,
    },
}

/// A search for the highest sustained rate: ask [`RateSearch::next_rate`],
/// run a trial at that rate, [`RateSearch::record`] its outcome, repeat
/// until `next_rate` is None.
#[derive(Debug, Clone)]
pub struct RateSearch<J: Judge = Criterion> {
    criterion: J,
    state: State,
    best: Option<u64>,
    trials: Vec<(u64, Verdict)>,
}

impl<J: Judge> RateSearch<J> {
    pub fn new(plan: Plan, criterion: J) -> Self {
        let state = match plan {
            Plan::Ladder(mut rates) => {
                rates.sort_unstable();
                rates.dedup();
                State::Ladder {
                    rates,
                    next: 0,
                    stopped: false,
                }
            }
            Plan::Bisect {
                low,
                high,
                resolution,
            } => State::Bisect {
                lo: low.min(high),
                hi: low.max(high),
                resolution: resolution.max(1),
                top_tested: false,
                lo_tested: false,
                done: false,
            },
        };
        RateSearch {
            criterion,
            state,
            best: None,
            trials: Vec::new(),
        }
    }

    /// The rate to try next, None when the search is over.
    pub fn next_rate(&self) -> Option<u64> {
        match &self.state {
            State::Ladder {
                rates,
                next,
                stopped,
            } => {
                if *stopped {
                    None
                } else {
                    rates.get(*next).copied()
                }
            }
            &State::Bisect {
                lo,
                hi,
                resolution,
                top_tested,
                lo_tested,
                done,
            } => {
                if done {
                    None
                } else if !top_tested {
                    Some(hi)
                } else if hi - lo > resolution {
                    Some(lo + (hi - lo) / 2)
                } else if !lo_tested {
                    // Every midpoint failed: whether even `low` is
                    // sustained is still open, so try it rather than
                    // report an untested rate.
                    Some(lo)
                } else {
                    None
                }
            }
        }
    }

    /// Judges a trial at `rate` and moves the search on. A rate other than
    /// [`RateSearch::next_rate`] is judged and listed in the trials but
    /// does not steer the search or count towards [`RateSearch::best`]:
    /// off-plan trials would break the search's assumptions.
    pub fn record(&mut self, rate: u64, outcome: &J::Outcome) -> Verdict {
        let verdict = self.criterion.judge(outcome);
        let ok = verdict.is_sustained();
        if self.next_rate() == Some(rate) {
            if ok {
                self.best = Some(self.best.map_or(rate, |b| b.max(rate)));
            }
            match &mut self.state {
                State::Ladder { next, stopped, .. } => {
                    if ok {
                        *next += 1;
                    } else {
                        *stopped = true;
                    }
                }
                State::Bisect {
                    lo,
                    hi,
                    top_tested,
                    lo_tested,
                    done,
                    ..
                } => {
                    if !*top_tested {
                        *top_tested = true;
                        // Sustained at the top, or nothing left below it.
                        *done = ok || *lo == *hi;
                    } else if rate == *lo {
                        *lo_tested = true;
                        *done = true;
                    } else if ok {
                        *lo = rate;
                        *lo_tested = true;
                    } else {
                        *hi = rate;
                    }
                }
            }
        }
        self.trials.push((rate, verdict.clone()));
        verdict
    }

    /// The highest rate sustained so far on the search's own plan.
    pub fn best(&self) -> Option<u64> {
        self.best
    }

    /// Every trial recorded, in order.
    pub fn trials(&self) -> &[(u64, Verdict)] {
        &self.trials
    }
}

/// The best rates of repeated searches, summarised.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct RepeatSummary {
    pub max: Option<u64>,
    /// Median over the runs that found a sustained rate (see
    /// [`repeat_summary`]).
    pub median: Option<u64>,
    pub min: Option<u64>,
    pub runs: u64,
    pub runs_without_a_sustained_rate: u64,
}

impl RepeatSummary {
    /// The summary's text line, each rate (bit/s) written by `show`: one
    /// wording for every cbr (sockets and USB).
    pub fn line(&self, show: impl Fn(u64) -> String) -> String {
        let show = |r: Option<u64>| r.map_or("none".to_string(), &show);
        let without = match self.runs_without_a_sustained_rate {
            0 => String::new(),
            n => format!(" ({n} run(s) sustained no rate)"),
        };
        format!(
            "highest sustained rate over {} run(s): max {}, median {}, min {}{without}",
            self.runs,
            show(self.max),
            show(self.median),
            show(self.min),
        )
    }
}

/// Summarises the best rate of each run (None: the run sustained nothing).
///
/// The median is taken over the runs that found a rate only, since a run
/// without one has no number to rank (counting it as 0 would drag the
/// median down on a path that mostly works); how many such runs there were
/// is reported beside it. With an even count the lower of the two middle
/// values is taken: a rate a run actually sustained, and the conservative
/// one.
pub fn repeat_summary(bests: &[Option<u64>]) -> RepeatSummary {
    let mut found: Vec<u64> = bests.iter().flatten().copied().collect();
    found.sort_unstable();
    RepeatSummary {
        max: found.last().copied(),
        median: found.get(found.len().saturating_sub(1) / 2).copied(),
        min: found.first().copied(),
        runs: bests.len() as u64,
        runs_without_a_sustained_rate: (bests.len() - found.len()) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB_S: f64 = 8e6;

    fn criterion() -> Criterion {
        Criterion {
            max_loss_fraction: 0.01,
            max_host_drops: 0,
            max_late_fraction: 0.01,
        }
    }

    /// A path that delivers everything up to `limit` bit/s and drops the
    /// excess above it.
    fn path(limit: u64) -> impl Fn(u64) -> TrialOutcome {
        move |rate| {
            let sent = 1_000_000;
            let received = if rate <= limit {
                sent
            } else {
                (sent as u128 * limit as u128 / rate as u128) as u64
            };
            TrialOutcome {
                sent,
                received,
                ..Default::default()
            }
        }
    }

    fn run(search: &mut RateSearch, path: impl Fn(u64) -> TrialOutcome) {
        let mut guard = 0;
        while let Some(rate) = search.next_rate() {
            search.record(rate, &path(rate));
            guard += 1;
            assert!(guard < 200, "the search must end");
        }
    }

    fn usrp_ladder() -> Vec<u64> {
        [16.0, 18.3, 21.3, 25.6, 32.0, 42.6]
            .iter()
            .map(|mb| (mb * MB_S).round() as u64)
            .collect()
    }

    #[test]
    fn a_ladder_finds_the_top_rung_the_path_sustains() {
        let limit = (42.6 * MB_S).round() as u64;
        assert_eq!(limit, 340_800_000);
        let mut s = RateSearch::new(Plan::Ladder(usrp_ladder()), criterion());
        run(&mut s, path(limit));
        assert_eq!(s.best(), Some(limit));
        assert_eq!(s.trials().len(), 6);
        assert!(s.trials().iter().all(|(_, v)| v.is_sustained()));
        // Extra rungs, given out of order: it stops at the first failure.
        let mut rungs = usrp_ladder();
        rungs.extend([(64.0 * MB_S) as u64, (51.2 * MB_S) as u64, 128_000_000]);
        rungs.reverse();
        let mut s = RateSearch::new(Plan::Ladder(rungs), criterion());
        run(&mut s, path(limit));
        assert_eq!(s.best(), Some(limit));
        let tried: Vec<u64> = s.trials().iter().map(|t| t.0).collect();
        assert_eq!(tried.len(), 7, "64 MB/s is never tried: {tried:?}");
        assert_eq!(tried[6], 409_600_000);
        assert!(!s.trials()[6].1.is_sustained());
    }

    #[test]
    fn a_ladder_whose_first_rung_fails_finds_nothing() {
        let mut s = RateSearch::new(Plan::Ladder(usrp_ladder()), criterion());
        run(&mut s, path(100_000_000));
        assert_eq!((s.best(), s.trials().len()), (None, 1));
        let empty = RateSearch::new(Plan::Ladder(vec![]), criterion());
        assert_eq!((empty.next_rate(), empty.best()), (None, None));
    }

    #[test]
    fn bisection_converges_within_the_resolution() {
        for threshold in [733_333_333, 1_000_001, 9_999_999_999, 5_000_000_000] {
            let resolution = 1_000_000;
            // No loss allowed, so the path's limit is a sharp threshold.
            let lossless = Criterion {
                max_loss_fraction: 0.0,
                ..criterion()
            };
            let mut s = RateSearch::new(
                Plan::Bisect {
                    low: 1_000_000,
                    high: 10_000_000_000,
                    resolution,
                },
                lossless,
            );
            run(&mut s, path(threshold));
            let best = s.best().unwrap();
            assert!(
                best <= threshold && best + resolution > threshold,
                "{threshold}: {best}"
            );
            // The top, log2(9999) rounded up = 14 halvings, and perhaps
            // the bottom when every midpoint failed.
            assert!(s.trials().len() <= 16, "{}", s.trials().len());
            for (rate, v) in s.trials() {
                assert_eq!(v.is_sustained(), *rate <= threshold);
            }
        }
    }

    #[test]
    fn bisection_stops_at_once_when_the_top_passes() {
        let plan = Plan::Bisect {
            low: 10,
            high: 1_000,
            resolution: 5,
        };
        let mut s = RateSearch::new(plan, criterion());
        assert_eq!(s.next_rate(), Some(1_000));
        run(&mut s, path(u64::MAX));
        assert_eq!((s.best(), s.trials().len()), (Some(1_000), 1));
    }

    #[test]
    fn bisection_tries_the_bottom_before_giving_up() {
        let plan = Plan::Bisect {
            low: 1_000,
            high: 10,
            resolution: 0,
        };
        let mut s = RateSearch::new(plan.clone(), criterion());
        run(&mut s, path(5));
        assert_eq!(s.best(), None);
        assert_eq!(s.trials().last().unwrap().0, 10, "low, after the swap");
        let mut s = RateSearch::new(plan, criterion());
        run(&mut s, path(10));
        assert_eq!(s.best(), Some(10));
        // A single rate is tried once.
        let single = Plan::Bisect {
            low: 7,
            high: 7,
            resolution: 1,
        };
        let mut s = RateSearch::new(single, criterion());
        run(&mut s, path(1));
        assert_eq!((s.best(), s.trials().len()), (None, 1));
    }

    #[test]
    fn off_plan_trials_are_listed_but_do_not_steer() {
        let mut s = RateSearch::new(Plan::Ladder(vec![10, 20]), criterion());
        let all = TrialOutcome {
            sent: 100,
            received: 100,
            ..Default::default()
        };
        assert!(s.record(99, &all).is_sustained());
        assert_eq!(
            (s.next_rate(), s.best(), s.trials().len()),
            (Some(10), None, 1)
        );
    }

    #[test]
    fn verdicts_name_the_threshold_that_failed() {
        let c = criterion();
        let t = |received, host_drops, late| TrialOutcome {
            sent: 10_000,
            received,
            host_drops,
            late,
        };
        assert_eq!(
            c.judge(&t(9_769, 0, 0)),
            Verdict::Failed("loss 2.31 % > 1 % (231 of 10000 datagrams)".into())
        );
        assert_eq!(
            c.judge(&t(10_000, 12, 0)),
            Verdict::Failed("host drops 12 > 0".into())
        );
        assert_eq!(
            c.judge(&t(10_000, 0, 500)),
            Verdict::Failed("late 5 % > 1 % (500 of 10000 datagrams sent late)".into())
        );
        let Verdict::Failed(all) = c.judge(&t(0, 1, 10_000)) else {
            panic!("must fail");
        };
        assert_eq!(all.split("; ").count(), 3, "{all}");
        assert!(all.starts_with("loss 100 % > 1 %"), "{all}");
        // Exactly at the thresholds passes; more received than sent is no
        // loss (duplicates); nothing sent fails.
        assert_eq!(c.judge(&t(9_900, 0, 100)), Verdict::Sustained);
        assert_eq!(c.judge(&t(10_050, 0, 0)), Verdict::Sustained);
        assert_eq!(
            c.judge(&TrialOutcome::default()),
            Verdict::Failed("nothing was sent".into())
        );
        let strict = Criterion {
            max_loss_fraction: 0.0,
            ..c
        };
        assert_eq!(
            strict.judge(&TrialOutcome {
                sent: 1_000_000,
                received: 999_990,
                ..Default::default()
            }),
            Verdict::Failed("loss 0.001 % > 0 % (10 of 1000000 datagrams)".into())
        );
    }

    #[test]
    fn repeat_summary_takes_the_median_of_runs_that_found_a_rate() {
        let s = repeat_summary(&[Some(5), None, Some(1), Some(3), Some(9)]);
        assert_eq!(
            s,
            RepeatSummary {
                max: Some(9),
                median: Some(3),
                min: Some(1),
                runs: 5,
                runs_without_a_sustained_rate: 1,
            }
        );
        assert_eq!(repeat_summary(&[Some(4), Some(2), Some(7)]).median, Some(4));
        assert_eq!(repeat_summary(&[Some(4)]).median, Some(4));
        let none = repeat_summary(&[None, None]);
        assert_eq!((none.max, none.median, none.min), (None, None, None));
        assert_eq!((none.runs, none.runs_without_a_sustained_rate), (2, 2));
        assert_eq!(repeat_summary(&[]), RepeatSummary::default());
    }

    #[test]
    fn summary_and_criterion_serialise_with_snake_case_fields() {
        let s = repeat_summary(&[Some(340_800_000), None]);
        let json = serde_json::to_value(s).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "max": 340_800_000u64, "median": 340_800_000u64, "min": 340_800_000u64,
                "runs": 2, "runs_without_a_sustained_rate": 1
            })
        );
        assert_eq!(serde_json::from_value::<RepeatSummary>(json).unwrap(), s);
        let c = criterion();
        let json = serde_json::to_value(c).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "max_loss_fraction": 0.01, "max_host_drops": 0, "max_late_fraction": 0.01
            })
        );
        assert_eq!(serde_json::from_value::<Criterion>(json).unwrap(), c);
    }
}
