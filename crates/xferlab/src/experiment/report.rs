//! `xferlab report`: an experiment's stored runs as tables (Markdown, CSV)
//! and plots (SVG), all gathered in one self-contained HTML page.
//!
//! What to show comes from the scenario's `[report]` section (stored with
//! the experiment, so a report can be made again later from the database
//! alone); without one, a table and a plot of the headline metric against
//! the first axes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use xferlab_core::experiment::metrics;
use xferlab_core::experiment::scenario::{
    PlotKindSpec, PlotSpec, Point, ReportSpec, Scale, Scenario, TableSpec, Value,
};
use xferlab_core::experiment::stats::{self, Aggregate, Summary};

use super::html::{self, HtmlSection};
use super::plot::{self, Plot, PlotKind, PlotPoint, Series};
use super::store::{RunRow, Store};

/// `xferlab-reports/NAME-ID` under the current directory.
pub fn default_dir(name: &str, experiment: i64) -> PathBuf {
    PathBuf::from("xferlab-reports").join(format!("{name}-{experiment}"))
}

/// A unit as shown: values are divided by `div` and labelled `label`.
#[derive(Debug, Clone)]
pub struct Shown {
    div: f64,
    label: String,
}

impl Shown {
    /// The display unit for values of `unit` whose largest magnitude is
    /// `max`: Mbit/s for 300e6 bit/s, ms for 2500 µs, % for fractions.
    pub fn for_values(unit: &str, max: f64) -> Shown {
        let prefixed = |base: &str, max: f64| {
            let (div, p) = if max >= 1e9 {
                (1e9, "G")
            } else if max >= 1e6 {
                (1e6, "M")
            } else if max >= 1e3 {
                (1e3, "k")
            } else {
                (1.0, "")
            };
            Shown {
                div,
                label: format!("{p}{base}"),
            }
        };
        match unit {
            "bit/s" => prefixed("bit/s", max),
            "B/s" => prefixed("B/s", max),
            "1/s" => {
                let s = prefixed("", max);
                Shown {
                    label: format!("{}/s", s.label),
                    ..s
                }
            }
            "us" if max >= 1e4 => Shown {
                div: 1e3,
                label: "ms".into(),
            },
            "us" => Shown {
                div: 1.0,
                label: "µs".into(),
            },
            "fraction" => Shown {
                div: 0.01,
                label: "%".into(),
            },
            other => Shown {
                div: 1.0,
                label: other.to_string(),
            },
        }
    }

    pub fn value(&self, v: f64) -> f64 {
        v / self.div
    }

    pub fn text(&self, v: f64) -> String {
        let x = self.value(v);
        let a = x.abs();
        if a == 0.0 {
            "0".into()
        } else if a >= 100.0 {
            format!("{x:.0}")
        } else if a >= 10.0 {
            format!("{x:.1}")
        } else if a >= 0.1 {
            format!("{x:.2}")
        } else {
            format!("{x:.3}")
        }
    }
}

/// One run with what the report reads of it.
struct RunData {
    metrics: BTreeMap<String, (f64, String)>,
    doc: Option<serde_json::Value>,
}

/// The stored runs of an experiment, grouped by point.
struct Data {
    scenario: Scenario,
    points: Vec<Point>,
    /// Per point (same index as `points`): its valid runs, the only ones
    /// any table or plot reads.
    runs: Vec<Vec<RunData>>,
    /// Runs the lab marked invalid: listed with their reasons, never
    /// averaged in.
    invalid: Vec<RunRow>,
    /// Of `runs`, those whose lab missed its targets but which the
    /// scenario keeps with `--allow-invalid` (the lab VM's, say).
    kept_invalid: usize,
    /// Attempts the lab marked invalid that a later attempt of the same
    /// run replaced (`--retry-invalid`): not in any number either, but
    /// counted, so the report says how many runs the lab refused.
    retried_invalid: usize,
    failed: Vec<RunRow>,
}

impl Data {
    fn load(store: &Store, experiment: i64) -> anyhow::Result<(Data, String, String)> {
        let e = store
            .experiment(experiment)
            .map_err(super::line)?
            .ok_or_else(|| {
                anyhow!("no experiment {experiment} in the database; `xferlab db list` shows them")
            })?;
        let text = store.scenario_text(experiment).map_err(super::line)?;
        let scale = if e.scale == "quick" {
            Scale::Quick
        } else {
            Scale::Full
        };
        let scenario = Scenario::parse(&text, scale)
            .map_err(|err| anyhow!("the stored scenario of experiment {experiment} no longer parses ({err}); report it with an older xferlab"))?;
        let points = scenario.points();
        let index: BTreeMap<String, usize> = points
            .iter()
            .enumerate()
            .map(|(i, p)| (p.key(), i))
            .collect();
        let mut runs: Vec<Vec<RunData>> = points.iter().map(|_| Vec::new()).collect();
        let mut failed = Vec::new();
        let mut invalid = Vec::new();
        let mut kept_invalid = 0;
        for r in store.latest_runs(experiment).map_err(super::line)? {
            let Some(i) = r.point_key.as_ref().and_then(|k| index.get(k)) else {
                continue;
            };
            match r.status.as_str() {
                "ok" => {}
                "invalid" => {
                    invalid.push(r);
                    continue;
                }
                _ => {
                    failed.push(r);
                    continue;
                }
            }
            let metrics = store
                .metrics_of_run(r.id)
                .map_err(super::line)?
                .into_iter()
                .map(|(n, v, u)| (n, (v, u)))
                .collect();
            let doc = r
                .result_json
                .as_deref()
                .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok());
            if doc
                .as_ref()
                .and_then(|d| d.pointer("/lab/accuracy/valid"))
                .and_then(serde_json::Value::as_bool)
                == Some(false)
            {
                kept_invalid += 1;
            }
            runs[*i].push(RunData { metrics, doc });
        }
        let retried_invalid = store
            .all_runs(experiment)
            .map_err(super::line)?
            .iter()
            .filter(|r| r.status == "invalid")
            .count()
            .saturating_sub(invalid.len());
        Ok((
            Data {
                scenario,
                points,
                runs,
                invalid,
                kept_invalid,
                retried_invalid,
                failed,
            },
            e.name,
            e.title,
        ))
    }

    /// "40 valid runs, 2 invalid (left out), 1 failed", the invalid
    /// attempts run again, and a note when valid runs include lab runs
    /// kept with `--allow-invalid`.
    fn counts_text(&self) -> String {
        let valid: usize = self.runs.iter().map(Vec::len).sum();
        let mut t = format!(
            "{valid} valid runs, {} invalid (left out), {} failed",
            self.invalid.len(),
            self.failed.len()
        );
        match self.retried_invalid {
            0 => {}
            1 => t.push_str("; 1 more attempt the lab marked invalid was run again (left out too)"),
            n => {
                let _ = write!(
                    t,
                    "; {n} more attempts the lab marked invalid were run again (left out too)"
                );
            }
        }
        if self.kept_invalid > 0 {
            let _ = write!(
                t,
                " ({} of the valid runs missed the lab's accuracy targets and are kept because the scenario passes --allow-invalid)",
                self.kept_invalid
            );
        }
        t
    }

    fn values(&self, point: usize, metric: &str) -> (Vec<f64>, Option<String>) {
        let mut unit = None;
        let v = self.runs[point]
            .iter()
            .filter_map(|r| r.metrics.get(metric))
            .map(|(v, u)| {
                unit.get_or_insert_with(|| u.clone());
                *v
            })
            .collect();
        (v, unit)
    }

    /// Values of an axis knob, in the scenario's order.
    fn axis_values(&self, knob: &str) -> Vec<Value> {
        for a in &self.scenario.axes {
            if let Some(k) = a.knobs.iter().position(|k| k.knob.to_string() == knob) {
                return a.values.iter().map(|step| step[k].clone()).collect();
            }
        }
        Vec::new()
    }

    /// The steps of the axis `knob` is on, in the scenario's order, each
    /// as its knobs' values: one pair on a plain axis, one per knob of a
    /// zip group (so rows by `lab --ecn` of an ECN/SACK group tell
    /// "SACK only" from "neither").
    fn axis_steps(&self, knob: &str) -> Vec<Vec<(String, Value)>> {
        for a in &self.scenario.axes {
            if a.knobs.iter().any(|k| k.knob.to_string() == knob) {
                return a
                    .values
                    .iter()
                    .map(|step| {
                        a.knobs
                            .iter()
                            .zip(step)
                            .map(|(k, v)| (k.knob.to_string(), v.clone()))
                            .collect()
                    })
                    .collect();
            }
        }
        Vec::new()
    }

    /// The knobs of the axes other than those of `used` (a zip group
    /// counts as used when one of its knobs is: its other knobs' values
    /// follow).
    fn other_axes(&self, used: &[&str]) -> Vec<String> {
        self.scenario
            .axes
            .iter()
            // An axis with one value (a quick scale's) tells no points apart.
            .filter(|a| {
                a.values.len() > 1
                    && !a
                        .knobs
                        .iter()
                        .any(|k| used.contains(&k.knob.to_string().as_str()))
            })
            .flat_map(|a| a.knobs.iter().map(|k| k.knob.to_string()))
            .collect()
    }

    /// The knobs of the axis `knob` is on (several for a zip group), so
    /// a series names every value that differs between its points.
    fn axis_of(&self, knob: &str) -> Vec<String> {
        self.scenario
            .axes
            .iter()
            .find(|a| a.knobs.iter().any(|k| k.knob.to_string() == knob))
            .map(|a| a.knobs.iter().map(|k| k.knob.to_string()).collect())
            .unwrap_or_else(|| vec![knob.to_string()])
    }

    fn unit_of(&self, metric: &str) -> String {
        for r in self.runs.iter().flatten() {
            if let Some((_, u)) = r.metrics.get(metric) {
                return u.clone();
            }
        }
        metrics::unit_of(metric).unwrap_or("").to_string()
    }

    fn default_metric(&self) -> String {
        for name in ["tps", "throughput_bps", "best_bps_max"] {
            if self
                .runs
                .iter()
                .flatten()
                .any(|r| r.metrics.contains_key(name))
            {
                return name.into();
            }
        }
        self.runs
            .iter()
            .flatten()
            .flat_map(|r| r.metrics.keys())
            .next()
            .cloned()
            .unwrap_or_else(|| "ok".into())
    }
}

/// Combinations of values of `knobs` that occur among the points, in
/// point order.
fn combos(points: &[Point], knobs: &[String]) -> Vec<Vec<(String, Value)>> {
    let mut out: Vec<Vec<(String, Value)>> = Vec::new();
    for p in points {
        let c: Vec<(String, Value)> = knobs
            .iter()
            .filter_map(|k| p.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

fn matches(p: &Point, fixed: &[(String, Value)]) -> bool {
    fixed.iter().all(|(k, v)| p.get(k) == Some(v))
}

fn aggregate_name(a: Aggregate, n_max: usize) -> String {
    format!("{} of {n_max}", a.as_str())
}

/// A rendered table: Markdown, CSV and HTML of the same cells.
struct TableOut {
    title: String,
    markdown: String,
    csv: String,
    html: String,
}

use html::escape_html as html_escape;

/// "1 run", "2 runs".
fn runs_word(n: usize) -> String {
    if n == 1 {
        "1 run".into()
    } else {
        format!("{n} runs")
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn tables(d: &Data, spec: &TableSpec, default_agg: Aggregate) -> Vec<TableOut> {
    let agg = spec.aggregate.unwrap_or(default_agg);
    let rows = d.axis_steps(&spec.rows);
    let cols: Vec<Option<Value>> = match &spec.cols {
        Some(c) => d.axis_values(c).into_iter().map(Some).collect(),
        None => vec![None],
    };
    let mut used = vec![spec.rows.as_str()];
    if let Some(c) = &spec.cols {
        used.push(c);
    }
    let others = d.other_axes(&used);
    let unit = d.unit_of(&spec.metric);
    let labels = &d.scenario.report;
    let rows_label = labels.knob_label(&spec.rows);
    let mut out = Vec::new();
    for fixed in combos(&d.points, &others) {
        // cells[r][c]
        let mut cells: Vec<Vec<Option<Summary>>> = Vec::new();
        let mut max_abs: f64 = 0.0;
        let mut n_max = 0;
        for r in &rows {
            let mut line = Vec::new();
            for c in &cols {
                let mut vals = Vec::new();
                for (i, p) in d.points.iter().enumerate() {
                    if !matches(p, r) || !matches(p, &fixed) {
                        continue;
                    }
                    if let (Some(ck), Some(cv)) = (&spec.cols, c) {
                        if p.get(ck) != Some(cv) {
                            continue;
                        }
                    }
                    vals.extend(d.values(i, &spec.metric).0);
                }
                let s = stats::summarize(&vals);
                if let Some(s) = &s {
                    max_abs = max_abs.max(s.get(agg).abs());
                    n_max = n_max.max(s.n);
                }
                line.push(s);
            }
            cells.push(line);
        }
        let shown = Shown::for_values(&unit, max_abs);
        let mut title = format!(
            "{} ({}, {})",
            spec.title
                .as_deref()
                .unwrap_or(labels.metric_label(&spec.metric)),
            shown.label,
            aggregate_name(agg, n_max)
        );
        if !fixed.is_empty() {
            title.push_str(&format!(" — {}", labels.combo_label(&fixed)));
        }
        let col_names: Vec<String> = cols
            .iter()
            .map(|c| match (c, &spec.cols) {
                (Some(v), Some(k)) => labels.combo_label(&[(k.clone(), v.clone())]),
                _ => format!("{} ({})", labels.metric_label(&spec.metric), shown.label),
            })
            .collect();
        let cell_text = |s: &Option<Summary>| match s {
            None => "–".to_string(),
            Some(s) if s.n < n_max => format!("{} (n={})", shown.text(s.get(agg)), s.n),
            Some(s) => shown.text(s.get(agg)),
        };
        // Markdown
        let mut md = format!("**{title}**\n\n| {rows_label} |");
        for c in &col_names {
            let _ = write!(md, " {c} |");
        }
        md.push_str("\n|---|");
        for _ in &col_names {
            md.push_str("---:|");
        }
        md.push('\n');
        let row_name = |r: &[(String, Value)]| match r {
            [(k, v)] => labels.value_label(k, v),
            group => labels.combo_label(group),
        };
        for (r, line) in rows.iter().zip(&cells) {
            let _ = write!(md, "| {} |", row_name(r));
            for c in line {
                let _ = write!(md, " {} |", cell_text(c));
            }
            md.push('\n');
        }
        // CSV: one line per cell, full statistics in the metric's base unit.
        let mut csv = String::new();
        let _ =
            writeln!(
            csv,
            "{},{},{}{}metric,unit,aggregate,value,n,min,median,max,mean,stddev,ci95_low,ci95_high",
            // A zip group's row names every knob of it.
            csv_field(
                &rows
                    .first()
                    .map(|r| r.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(" / "))
                    .unwrap_or_else(|| spec.rows.clone())
            ),
            csv_field(spec.cols.as_deref().unwrap_or("column")),
            fixed.iter().map(|(k, _)| csv_field(k)).collect::<Vec<_>>().join(","),
            if fixed.is_empty() { "" } else { "," },
        );
        for (r, line) in rows.iter().zip(&cells) {
            for (c, s) in cols.iter().zip(line) {
                let Some(s) = s else { continue };
                let _ = writeln!(
                    csv,
                    "{},{},{}{}{},{},{},{},{},{},{},{},{},{},{},{}",
                    csv_field(
                        &r.iter()
                            .map(|(_, v)| v.label())
                            .collect::<Vec<_>>()
                            .join(" / ")
                    ),
                    csv_field(&c.as_ref().map(|v| v.label()).unwrap_or_default()),
                    fixed
                        .iter()
                        .map(|(_, v)| csv_field(&v.label()))
                        .collect::<Vec<_>>()
                        .join(","),
                    if fixed.is_empty() { "" } else { "," },
                    spec.metric,
                    csv_field(&unit),
                    agg.as_str(),
                    s.get(agg),
                    s.n,
                    s.min,
                    s.median,
                    s.max,
                    s.mean,
                    s.stddev,
                    s.ci95.map(|c| c.0.to_string()).unwrap_or_default(),
                    s.ci95.map(|c| c.1.to_string()).unwrap_or_default(),
                );
            }
        }
        // HTML
        let mut html = format!(
            "<table><caption>{}</caption><tr><th>{}</th>",
            html_escape(&title),
            html_escape(rows_label)
        );
        for c in &col_names {
            let _ = write!(html, "<th>{}</th>", html_escape(c));
        }
        html.push_str("</tr>");
        for (r, line) in rows.iter().zip(&cells) {
            let _ = write!(html, "<tr><th>{}</th>", html_escape(&row_name(r)));
            for c in line {
                let _ = write!(html, "<td>{}</td>", html_escape(&cell_text(c)));
            }
            html.push_str("</tr>");
        }
        html.push_str("</table>");
        out.push(TableOut {
            title,
            markdown: md,
            csv,
            html,
        });
    }
    out
}

fn filter_of(p: &PlotSpec) -> Vec<(String, Value)> {
    p.filter
        .iter()
        .map(|(k, v)| {
            let val = match v {
                toml::Value::Boolean(b) => Value::Switch(*b),
                toml::Value::String(s) => Value::Arg(s.clone()),
                other => Value::Arg(other.to_string()),
            };
            (k.clone(), val)
        })
        .collect()
}

/// The series label of a point: the values of the series knob and of
/// every axis not otherwise fixed.
fn series_label(labels: &ReportSpec, p: &Point, knobs: &[String]) -> String {
    let c: Vec<(String, Value)> = knobs
        .iter()
        .filter_map(|k| p.get(k).map(|v| (k.clone(), v.clone())))
        .collect();
    if c.is_empty() {
        "all runs".into()
    } else {
        labels.combo_label(&c)
    }
}

fn knob_plot(d: &Data, spec: &PlotSpec, default_agg: Aggregate) -> Option<Plot> {
    let metric = spec.metric.clone()?;
    let x = spec.x.clone()?;
    let labels = &d.scenario.report;
    let agg = spec.aggregate.unwrap_or(default_agg);
    let filter = filter_of(spec);
    let xs = d.axis_values(&x);
    let mut used: Vec<&str> = vec![x.as_str()];
    used.extend(filter.iter().map(|(k, _)| k.as_str()));
    let mut series_knobs: Vec<String> = Vec::new();
    if let Some(s) = &spec.series {
        series_knobs.extend(d.axis_of(s));
        used.push(s);
    }
    series_knobs.extend(d.other_axes(&used));
    let unit = d.unit_of(&metric);
    // Raw aggregates first, to pick the display unit.
    let mut raw: Vec<(String, Vec<(usize, Summary)>)> = Vec::new();
    for combo in combos(&d.points, &series_knobs) {
        let mut pts = Vec::new();
        for (xi, xv) in xs.iter().enumerate() {
            let mut vals = Vec::new();
            for (i, p) in d.points.iter().enumerate() {
                if p.get(&x) == Some(xv) && matches(p, &combo) && matches(p, &filter) {
                    vals.extend(d.values(i, &metric).0);
                }
            }
            if let Some(s) = stats::summarize(&vals) {
                pts.push((xi, s));
            }
        }
        if !pts.is_empty() {
            let label = if combo.is_empty() {
                labels.metric_label(&metric).to_string()
            } else {
                labels.combo_label(&combo)
            };
            raw.push((label, pts));
        }
    }
    let max = raw
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, s)| s.max.abs()))
        .fold(0.0, f64::max);
    let shown = Shown::for_values(&unit, max);
    let n_max = raw
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, s)| s.n))
        .max()
        .unwrap_or(0);
    let series = raw
        .into_iter()
        .map(|(label, pts)| Series {
            label,
            points: pts
                .into_iter()
                .map(|(xi, s)| PlotPoint {
                    x: xi as f64,
                    y: shown.value(s.get(agg)),
                    err: match agg {
                        Aggregate::Mean => s.ci95.map(|(l, h)| (shown.value(l), shown.value(h))),
                        _ if s.n > 1 => Some((shown.value(s.min), shown.value(s.max))),
                        _ => None,
                    },
                })
                .collect(),
        })
        .collect();
    let whiskers = match agg {
        Aggregate::Mean => "95 % confidence interval of the mean",
        _ => "min to max of the runs",
    };
    Some(Plot {
        title: spec.title.clone().unwrap_or_else(|| {
            format!(
                "{} against {}",
                labels.metric_label(&metric),
                labels.knob_label(&x)
            )
        }),
        kind: if spec.kind == PlotKindSpec::Bars {
            PlotKind::Bars
        } else {
            PlotKind::Lines
        },
        x_label: spec
            .x_label
            .clone()
            .unwrap_or_else(|| labels.knob_label(&x).to_string()),
        y_label: format!("{} ({})", labels.metric_label(&metric), shown.label),
        x_categories: Some(xs.iter().map(|v| labels.value_label(&x, v)).collect()),
        log_x: false,
        series,
        caption: format!(
            "{} of up to {n_max} runs per point; whiskers: {whiskers}{}.",
            agg.as_str(),
            if filter.is_empty() {
                String::new()
            } else {
                format!("; only {}", labels.combo_label(&filter))
            }
        ),
    })
}

fn run_plot(d: &Data, spec: &PlotSpec) -> Option<Plot> {
    let filter = filter_of(spec);
    let mut label_knobs: Vec<String> = Vec::new();
    let mut used: Vec<&str> = filter.iter().map(|(k, _)| k.as_str()).collect();
    if let Some(s) = &spec.series {
        label_knobs.extend(d.axis_of(s));
        used.push(s);
    }
    label_knobs.extend(d.other_axes(&used));
    let mut series = Vec::new();
    let mut max = 0.0_f64;
    let mut runs = 0;
    let metric = spec.metric.clone().unwrap_or_default();
    let labels = &d.scenario.report;
    let mut raw = Vec::new();
    for (i, p) in d.points.iter().enumerate() {
        if !matches(p, &filter) {
            continue;
        }
        let label = series_label(labels, p, &label_knobs);
        for r in &d.runs[i] {
            let Some(doc) = &r.doc else { continue };
            let pts = match spec.kind {
                PlotKindSpec::Time => metrics::series(doc, &metric),
                _ => metrics::latency_cdf(doc),
            };
            if let Some(pts) = pts.filter(|p| !p.is_empty()) {
                for (x, y) in &pts {
                    max = max.max(if spec.kind == PlotKindSpec::Time {
                        y.abs()
                    } else {
                        x.abs()
                    });
                }
                runs += 1;
                raw.push((label.clone(), pts));
            }
        }
    }
    if raw.is_empty() {
        return None;
    }
    let (plot_kind, title, x_label, y_label, shown, caption) = match spec.kind {
        PlotKindSpec::Time => {
            let unit = metrics::unit_of(&metric).unwrap_or("");
            let shown = Shown::for_values(unit, max);
            (
                PlotKind::Time,
                format!("{} over time", labels.metric_label(&metric)),
                "time (s)".to_string(),
                format!("{} ({})", labels.metric_label(&metric), shown.label),
                shown,
                format!(
                    "{} overlaid; one colour per configuration; per reporting interval.",
                    runs_word(runs)
                ),
            )
        }
        _ => {
            let shown = Shown::for_values("us", max);
            (
                PlotKind::Cdf,
                "transaction latency, CDF".to_string(),
                format!("latency ({})", shown.label),
                "fraction of transactions".to_string(),
                shown,
                format!(
                    "{} overlaid; from each run's merged latency percentiles (0 to 100 %).",
                    runs_word(runs)
                ),
            )
        }
    };
    for (label, pts) in raw {
        series.push(Series {
            label,
            points: pts
                .into_iter()
                .map(|(x, y)| match spec.kind {
                    PlotKindSpec::Time => PlotPoint {
                        x,
                        y: shown.value(y),
                        err: None,
                    },
                    _ => PlotPoint {
                        x: shown.value(x),
                        y,
                        err: None,
                    },
                })
                .collect(),
        });
    }
    Some(Plot {
        title: spec.title.clone().unwrap_or(title),
        kind: plot_kind,
        x_label,
        y_label,
        x_categories: None,
        log_x: spec.log_x,
        series,
        caption,
    })
}

/// Writes the report of an experiment into `dir` (report.md, report.html,
/// table-N.csv, plot-N.svg, with `png` also plot-N.png for slides) and
/// prints its tables and the page's path.
pub fn write(
    store: &Store,
    experiment: i64,
    dir: &Path,
    png: bool,
    out: &mut dyn Write,
) -> anyhow::Result<PathBuf> {
    let (d, name, title) = Data::load(store, experiment)?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // A report made again must not leave an earlier one's extra tables
    // and plots beside it.
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if (n.starts_with("table-") && n.ends_with(".csv"))
                || (n.starts_with("plot-") && (n.ends_with(".svg") || n.ends_with(".png")))
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let rep = &d.scenario.report;
    let default_agg = rep.aggregate.unwrap_or(Aggregate::Median);
    let axes = d.scenario.axis_names();
    let mut table_specs = rep.table.clone();
    let mut plot_specs = rep.plot.clone();
    if table_specs.is_empty() && plot_specs.is_empty() && !axes.is_empty() {
        let metric = d.default_metric();
        table_specs.push(TableSpec {
            metric: metric.clone(),
            rows: axes[0].clone(),
            cols: axes.get(1).cloned(),
            aggregate: None,
            title: None,
        });
        plot_specs.push(PlotSpec {
            kind: PlotKindSpec::Lines,
            metric: Some(metric),
            x: Some(axes[0].clone()),
            series: axes.get(1).cloned(),
            aggregate: None,
            log_x: false,
            title: None,
            x_label: None,
            filter: BTreeMap::new(),
        });
    }
    let mut md = format!("# {title}\n\n");
    if !d.scenario.description.trim().is_empty() {
        md.push_str(d.scenario.description.trim());
        md.push_str("\n\n");
    }
    let counts = d.counts_text();
    let _ = writeln!(
        md,
        "Experiment {experiment} (`{name}`): {} points, {counts}. {}.\n",
        d.points.len(),
        commands_text(&d.scenario, "`")
    );
    let mut sections = vec![HtmlSection::Paragraph(format!(
        "Experiment {experiment} ({name}): {} points, {counts}. {}",
        d.points.len(),
        commands_text(&d.scenario, "")
    ))];
    let mut printed = String::new();
    let mut n_table = 0;
    for spec in &table_specs {
        for t in tables(&d, spec, default_agg) {
            n_table += 1;
            let csv_name = format!("table-{n_table}.csv");
            std::fs::write(dir.join(&csv_name), &t.csv)
                .with_context(|| format!("cannot write {}", dir.join(&csv_name).display()))?;
            md.push_str(&t.markdown);
            let _ = writeln!(md, "\n([CSV]({csv_name}))\n");
            printed.push_str(&t.markdown);
            printed.push('\n');
            sections.push(HtmlSection::Heading(t.title.clone()));
            sections.push(HtmlSection::TableHtml(t.html));
        }
    }
    let mut n_plot = 0;
    for spec in &plot_specs {
        let p = match spec.kind {
            PlotKindSpec::Lines | PlotKindSpec::Bars => knob_plot(&d, spec, default_agg),
            PlotKindSpec::Time | PlotKindSpec::Cdf => run_plot(&d, spec),
        };
        let Some(p) = p.filter(|p| p.series.iter().any(|s| !s.points.is_empty())) else {
            // Said where the plot would stand, on both pages: a reader
            // must see that a figure is missing, and why.
            let what = spec
                .title
                .clone()
                .or_else(|| {
                    let m = spec.metric.as_deref()?;
                    Some(d.scenario.report.metric_label(m).to_string())
                })
                .unwrap_or_else(|| "latency".into());
            let line = format!("(plot \"{what}\": no valid run of its points yet)");
            let _ = writeln!(md, "_{line}_\n");
            sections.push(HtmlSection::Paragraph(line));
            continue;
        };
        let svg = match plot::render_svg(&p) {
            Ok(s) => s,
            Err(e) => {
                let _ = writeln!(md, "_(plot {}: {e})_\n", p.title);
                continue;
            }
        };
        n_plot += 1;
        let svg_name = format!("plot-{n_plot}.svg");
        std::fs::write(dir.join(&svg_name), &svg)
            .with_context(|| format!("cannot write {}", dir.join(&svg_name).display()))?;
        if png {
            plot::svg_to_png(&svg, &dir.join(format!("plot-{n_plot}.png")))?;
        }
        let _ = writeln!(md, "![{}]({svg_name})\n\n{}\n", p.title, p.caption);
        sections.push(HtmlSection::Plot {
            svg,
            caption: p.caption.clone(),
        });
    }
    for (heading, rows) in [
        (
            "Invalid runs (left out of every table and plot)",
            &d.invalid,
        ),
        ("Failed runs", &d.failed),
    ] {
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(md, "## {heading}\n");
        let mut list = String::from("<ul>");
        for r in rows {
            let line = format!(
                "point {} repeat {}: {} — {}",
                r.point_idx.map(|i| i + 1).unwrap_or(0),
                r.repeat.unwrap_or(0),
                r.status,
                r.error.as_deref().unwrap_or("no error text")
            );
            let _ = writeln!(md, "* {line}");
            let _ = write!(list, "<li>{}</li>", html_escape(&line));
        }
        list.push_str("</ul>");
        md.push('\n');
        sections.push(HtmlSection::Heading(heading.into()));
        sections.push(HtmlSection::TableHtml(list));
    }
    std::fs::write(dir.join("report.md"), &md)
        .with_context(|| format!("cannot write {}", dir.join("report.md").display()))?;
    let html = html::html_page(&title, d.scenario.description.trim(), &sections);
    let page = dir.join("report.html");
    std::fs::write(&page, html).with_context(|| format!("cannot write {}", page.display()))?;
    let _ = write!(out, "{printed}");
    let _ = writeln!(out, "report: {}", page.display());
    Ok(page)
}

/// "Command: `xferlab ...`", or with named commands "Commands: NAME
/// `xferlab ...`; ..." (`quote` around each command line).
fn commands_text(s: &Scenario, quote: &str) -> String {
    let line = |c: &xferlab_core::experiment::scenario::Command| {
        format!("{quote}xferlab {}{quote}", c.words.join(" "))
    };
    match &s.commands[..] {
        [one] if one.name.is_empty() => format!("Command: {}", line(one)),
        named => format!(
            "Commands: {}",
            named
                .iter()
                .map(|c| format!("{} {}", c.name, line(c)))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::store::tests::{metrics, run, TempDir};
    use crate::experiment::store::{NewExperiment, NewPoint};

    /// A run the lab refused and `--retry-invalid` ran again is in no
    /// number, but the report counts it: a reader sees every run the lab
    /// refused, not only those still invalid at the end.
    #[test]
    fn invalid_attempts_run_again_are_counted() {
        let text = "title = \"t\"\ncommand = \"stream -t 1\"\nrepeat = 2\n";
        let dir = TempDir::new("retried");
        let store = Store::open(&dir.db()).unwrap();
        let e = store
            .create_experiment(&NewExperiment {
                name: "t",
                title: "t",
                scale: "full",
                scenario_path: "t.toml",
                scenario_text: text,
                scenario_hash: "0",
                created_at: "",
                xferlab_version: "0.1.0",
            })
            .unwrap();
        let key = Scenario::parse(text, Scale::Full).unwrap().points()[0].key();
        let p = store
            .ensure_point(
                e,
                &NewPoint {
                    idx: 0,
                    key: &key,
                    knobs_json: "{}",
                    args_json: "[]",
                },
            )
            .unwrap();
        let m = metrics(1e9);
        // Repeat 1: refused twice, then valid; repeat 2: refused, not run
        // again.
        for status in ["invalid", "invalid", "ok"] {
            store
                .insert_run(&run(Some(e), Some(p), Some(1), status, &m))
                .unwrap();
        }
        store
            .insert_run(&run(Some(e), Some(p), Some(2), "invalid", &m))
            .unwrap();
        let (d, _, _) = Data::load(&store, e).unwrap();
        assert_eq!(
            d.counts_text(),
            "1 valid runs, 1 invalid (left out), 0 failed; 2 more attempts the lab marked invalid were run again (left out too)"
        );
    }

    #[test]
    fn display_units() {
        let s = Shown::for_values("bit/s", 2.5e9);
        assert_eq!(s.label, "Gbit/s");
        assert_eq!(s.text(2.5e9), "2.50");
        assert_eq!(Shown::for_values("us", 25_000.0).label, "ms");
        let f = Shown::for_values("fraction", 0.5);
        assert_eq!(f.text(0.012), "1.20");
        assert_eq!(Shown::for_values("1/s", 55_000.0).label, "k/s");
    }
}
