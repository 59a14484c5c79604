//! Patterns made of a series of tests against one server.
//!
//! * `cbr`: can this path/host sustain rate R? One run is judged against an
//!   explicit [`Criterion`]; a ladder or a bisection finds the highest
//!   sustained rate, repeated N times (max and median reported), the
//!   method behind "max sustained rate per transfer size and buffer size"
//!   tables.
//! * `sweep`: UDPmon-style throughput and loss versus datagram size or
//!   versus the spacing between datagrams.
//!
//! The search itself is the sans-IO [`RateSearch`]; this module only runs
//! the tests it asks for and prints what happened.

use std::io::Write;
use std::sync::atomic::Ordering;

use anyhow::bail;
use serde::Serialize;
use xferlab_core::datagram::{
    repeat_summary, Criterion, Plan, RateSearch, RepeatSummary, TrialOutcome, Verdict,
};
use xferlab_core::result::{Status, TestResult};
use xferlab_core::spec::TestSpec;
use xferlab_core::transport::{Carrier, TrialSection};
use xferlab_core::units::{gap_rate, RateUnit};

use crate::driver::Interrupts;
use crate::output::Quiet;
use crate::session::client::{self, ClientConfig};

/// What one test of a series measured, both directions summed.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// Offered rate per flow, bit/s; None = unlimited.
    pub rate_bps: Option<u64>,
    pub size: u64,
    /// Microseconds between datagrams of one flow (sweeps by spacing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spacing_us: Option<f64>,
    pub sent: u64,
    /// Over a congestion-controlled transport
    /// (`TransportModel::congestion_controlled`): the datagrams the
    /// application offered at the trial's rate, which the verdict judges
    /// against (`sent` is what its congestion control let out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered: Option<u64>,
    pub received: u64,
    /// Lost of those sent (`sent` - `received`).
    pub loss_fraction: f64,
    pub host_drops: u64,
    pub network_lost: u64,
    pub late: u64,
    pub sender_bps: f64,
    pub receiver_bps: f64,
    pub jitter_us: f64,
    /// The hypervisor's share of all CPU time while the test ran (steal
    /// in /proc/stat); None where the kernel does not count it. A sender
    /// held up by the host cannot win its timing back.
    pub host_steal_percent: Option<f64>,
    /// The test itself did not complete (its error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the transport keeps of the test beyond these figures
    /// (`TransportModel::trial_section`), under its own name.
    #[serde(flatten)]
    pub own: Option<TrialSection>,
}

impl Point {
    fn from_result(spec: &TestSpec, r: &TestResult, spacing_us: Option<f64>) -> Point {
        let mut p = Point {
            rate_bps: spec.knobs.rate,
            size: spec.knobs.size,
            spacing_us,
            sent: 0,
            offered: None,
            received: 0,
            loss_fraction: 0.0,
            host_drops: 0,
            network_lost: 0,
            late: 0,
            sender_bps: 0.0,
            receiver_bps: 0.0,
            jitter_us: 0.0,
            host_steal_percent: None,
            error: (r.status != Status::Ok)
                .then(|| r.errors.join("; "))
                .filter(|e| !e.is_empty()),
            own: serde_json::to_value(r)
                .ok()
                .and_then(|doc| spec.transport.model().trial_section(&spec.knobs, &doc)),
        };
        for d in &r.summary.directions {
            p.sender_bps += d.sender.bits_per_second;
            p.receiver_bps += d.receiver.map_or(0.0, |t| t.bits_per_second);
            if let Some(u) = d.udp {
                p.sent += u.sent;
                p.received += u.received;
                p.host_drops += u.host_drops;
                p.network_lost += u.network_lost;
                p.late += u.late;
                p.jitter_us = p.jitter_us.max(u.jitter_us);
            }
        }
        // A congestion-controlled transport may carry less than the rate
        // asked of it: its congestion control holds the application back
        // or drops its datagrams. A constant rate is sustained only when
        // what the application offered arrived, so the verdict counts the
        // datagrams it offered at -b over the test (a RED bottleneck that
        // marked ECN-capable packets instead of dropping them left such
        // trials with no loss at all while most of the offer never left:
        // 4.5 of 80 Mbit/s sent in safeudp-fairness, 2026-11-28).
        if let Some(rate) = spec
            .knobs
            .rate
            .filter(|&r| r > 0 && spec.transport.model().congestion_controlled())
        {
            let offered: f64 = r
                .summary
                .directions
                .iter()
                .map(|d| {
                    rate as f64 * d.sender.seconds * f64::from(d.flows)
                        / 8.0
                        / spec.knobs.size.max(1) as f64
                })
                .sum();
            p.offered = Some((offered.round() as u64).max(p.sent));
        }
        p.loss_fraction = if p.sent > 0 {
            p.sent.saturating_sub(p.received) as f64 / p.sent as f64
        } else {
            0.0
        };
        p
    }

    fn outcome(&self) -> TrialOutcome {
        TrialOutcome {
            sent: self.offered.unwrap_or(self.sent),
            received: self.received,
            host_drops: self.host_drops,
            late: self.late,
        }
    }
}

/// Runs one test of the series; a test that could not start at all ends
/// the series (the server is unreachable or refuses).
fn run_point(
    base: &ClientConfig,
    spec: TestSpec,
    spacing_us: Option<f64>,
    interrupts: &Interrupts,
) -> anyhow::Result<Point> {
    let cfg = ClientConfig {
        spec,
        ..base.clone()
    };
    let before = crate::sys::cpu::cpu_ticks();
    let outcome = client::run(&cfg, crate::patterns::client, &mut Quiet, interrupts)?;
    let mut p = Point::from_result(&cfg.spec, &outcome.result, spacing_us);
    p.host_steal_percent = before
        .zip(crate::sys::cpu::cpu_ticks())
        .and_then(|(b, a)| xferlab_core::steal::steal_percent(b, a));
    if p.error.is_none() {
        p.error = outcome.error;
    }
    Ok(p)
}

/// How `cbr` chooses its rates.
pub struct CbrPlan {
    /// None: one run at the spec's rate.
    pub search: Option<Plan>,
    pub repeat: u32,
    pub criterion: Criterion,
}

#[derive(Serialize)]
struct CbrTrial {
    #[serde(flatten)]
    point: Point,
    sustained: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

#[derive(Serialize)]
struct CbrRun {
    trials: Vec<CbrTrial>,
    best_bps: Option<u64>,
}

#[derive(Serialize)]
struct CbrReport<'a> {
    schema: &'static str,
    spec: &'a TestSpec,
    server_address: &'a str,
    criterion: Criterion,
    runs: Vec<CbrRun>,
    summary: RepeatSummary,
}

/// Runs `cbr`; returns whether a rate was sustained (the one rate asked
/// for, or at least one rate of the search in every run).
pub fn run_cbr(
    base: &ClientConfig,
    plan: &CbrPlan,
    json: bool,
    out: &mut dyn Write,
    interrupts: &Interrupts,
) -> anyhow::Result<bool> {
    let unit = RateUnit::AutoBits;
    let single = plan.search.is_none();
    let mut runs = Vec::new();
    for run in 1..=plan.repeat.max(1) {
        let search_plan = plan
            .search
            .clone()
            .unwrap_or_else(|| Plan::Ladder(base.spec.knobs.rate.into_iter().collect()));
        let mut search = RateSearch::new(search_plan, plan.criterion);
        let mut trials = Vec::new();
        while let Some(rate) = search.next_rate() {
            if interrupts.load(Ordering::Relaxed) > 0 {
                bail!("interrupted");
            }
            let mut spec = base.spec.clone();
            spec.knobs.rate = Some(rate);
            let point = run_point(base, spec, None, interrupts)?;
            let verdict = match &point.error {
                Some(e) => {
                    search.record(rate, &TrialOutcome::default());
                    Verdict::Failed(format!("the test failed: {e}"))
                }
                None => match search.record(rate, &point.outcome()) {
                    Verdict::Failed(why) => {
                        Verdict::Failed(host_note(why, point.host_steal_percent))
                    }
                    v => v,
                },
            };
            if !json {
                let shown = match &verdict {
                    Verdict::Sustained => "sustained".to_string(),
                    Verdict::Failed(why) => format!("FAILED: {why}"),
                };
                writeln!(
                    out,
                    "run {run}  {:>16}  sent {:>9}  received {:>9}  loss {:>7.3} %  host drops {:>6}  late {:>6}  -> {shown}",
                    unit.format_rate(rate as f64),
                    point.sent,
                    point.received,
                    point.loss_fraction * 100.0,
                    point.host_drops,
                    point.late
                )?;
                if let Some(own) = &point.own {
                    writeln!(out, "        {}", own.describe())?;
                }
                out.flush().ok();
            }
            let reason = match verdict {
                Verdict::Sustained => None,
                Verdict::Failed(why) => Some(why),
            };
            trials.push(CbrTrial {
                sustained: reason.is_none(),
                reason,
                point,
            });
        }
        runs.push(CbrRun {
            best_bps: search.best(),
            trials,
        });
    }
    let bests: Vec<Option<u64>> = runs.iter().map(|r| r.best_bps).collect();
    let summary = repeat_summary(&bests);
    let ok = if single {
        runs.iter().all(|r| r.best_bps.is_some())
    } else {
        summary.runs_without_a_sustained_rate == 0
    };
    if json {
        let report = CbrReport {
            schema: "xferlab.cbr/1",
            spec: &base.spec,
            server_address: &base.server,
            criterion: plan.criterion,
            runs,
            summary,
        };
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else if single {
        writeln!(
            out,
            "{}",
            if ok {
                "constant rate sustained"
            } else {
                "constant rate NOT sustained"
            }
        )?;
    } else {
        let line = summary.line(|r| unit.format_rate(r as f64));
        writeln!(out, "{line}")?;
    }
    Ok(ok)
}

/// A missed criterion's reason, with the host's share of the trial when
/// the hypervisor took notable CPU time: late and lost datagrams are then
/// likely its doing, not the path's.
fn host_note(why: String, steal_percent: Option<f64>) -> String {
    match xferlab_core::steal::notable(steal_percent) {
        Some(p) => format!(
            "{why} (host: the hypervisor held this machine's CPUs for {p:.1} % of the trial; \
             repeat it, or run on a host whose CPUs are not shared)"
        ),
        None => why,
    }
}

/// What a sweep varies.
pub enum SweepAxis {
    /// Datagram sizes, at the spec's rate.
    Size(Vec<u64>),
    /// Microseconds between datagrams of a flow, at the spec's size
    /// (0 = back to back).
    Spacing(Vec<f64>),
}

#[derive(Serialize)]
struct SweepReport<'a> {
    schema: &'static str,
    spec: &'a TestSpec,
    server_address: &'a str,
    points: Vec<Point>,
}

/// The tests of a sweep, each validated, before any of them runs.
pub fn sweep_specs(
    base: &TestSpec,
    axis: &SweepAxis,
) -> anyhow::Result<Vec<(TestSpec, Option<f64>)>> {
    let specs: Vec<(TestSpec, Option<f64>)> = match axis {
        SweepAxis::Size(sizes) => sizes
            .iter()
            .map(|&size| {
                let mut s = base.clone();
                s.knobs.size = size;
                // A byte stream's swept size is its write size (as -l).
                if s.transport.carrier() == Carrier::Bytes {
                    s.knobs.write_size = Some(size);
                }
                (s, None)
            })
            .collect(),
        SweepAxis::Spacing(gaps) => gaps
            .iter()
            .map(|&us| {
                let mut s = base.clone();
                s.knobs.rate = gap_rate(s.knobs.size, us)?;
                Ok((s, Some(us)))
            })
            .collect::<anyhow::Result<_>>()?,
    };
    for (s, _) in &specs {
        s.validate()?;
    }
    Ok(specs)
}

/// Runs a sweep and prints one line per point (or the JSON report).
pub fn run_sweep(
    base: &ClientConfig,
    specs: Vec<(TestSpec, Option<f64>)>,
    json: bool,
    out: &mut dyn Write,
    interrupts: &Interrupts,
) -> anyhow::Result<()> {
    if !json {
        writeln!(
            out,
            "{:>6} {:>10} {:>16} {:>10} {:>10} {:>8} {:>10} {:>16} {:>10}",
            "size",
            "spacing us",
            "offered",
            "sent",
            "received",
            "loss %",
            "host drop",
            "received rate",
            "jitter us"
        )?;
    }
    let unit = RateUnit::AutoBits;
    let mut points = Vec::new();
    for (spec, spacing) in specs {
        if interrupts.load(Ordering::Relaxed) > 0 {
            bail!("interrupted");
        }
        let p = run_point(base, spec, spacing, interrupts)?;
        if !json {
            writeln!(
                out,
                "{:>6} {:>10} {:>16} {:>10} {:>10} {:>8.3} {:>10} {:>16} {:>10.1}{}",
                p.size,
                p.spacing_us.map_or("-".to_string(), |s| format!("{s}")),
                p.rate_bps
                    .map_or("unlimited".to_string(), |r| unit.format_rate(r as f64)),
                p.sent,
                p.received,
                p.loss_fraction * 100.0,
                p.host_drops,
                unit.format_rate(p.receiver_bps),
                p.jitter_us,
                p.error
                    .as_ref()
                    .map_or(String::new(), |e| format!("  (failed: {e})"))
            )?;
            out.flush().ok();
        }
        points.push(p);
    }
    if json {
        let report = SweepReport {
            schema: "xferlab.sweep/1",
            spec: &base.spec,
            server_address: &base.server,
            points,
        };
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_miss_names_the_host_only_when_it_took_notable_time() {
        let why = || "late 12 > 10".to_string();
        assert_eq!(host_note(why(), None), "late 12 > 10");
        assert_eq!(host_note(why(), Some(0.4)), "late 12 > 10");
        let noted = host_note(why(), Some(7.3));
        assert!(noted.starts_with("late 12 > 10 (host: "), "{noted}");
        assert!(noted.contains("7.3 % of the trial"), "{noted}");
    }
}
