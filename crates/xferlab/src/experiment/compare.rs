//! `xferlab compare A B`: per metric, B's mean against A's, the
//! difference with its 95 % confidence interval and Welch's t-test, so
//! "did this change help?" is one command.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde_json::json;
use xferlab_core::experiment::metrics::format_value;
use xferlab_core::experiment::stats::{self, Comparison, Summary};

/// One metric of a comparison.
pub struct CompareRow {
    pub metric: String,
    pub unit: String,
    pub a: Option<Summary>,
    pub b: Option<Summary>,
    /// None when either side has fewer than two values.
    pub cmp: Option<Comparison>,
}

/// Metrics shown first, in this order; the rest follow alphabetically.
const HEADLINE: &[&str] = &[
    "throughput_bps",
    "tps",
    "best_bps_max",
    "latency_p50_us",
    "latency_p99_us",
    "loss_fraction",
    "jitter_us",
    "retransmits",
    "cpu_client_pct",
    "cpu_server_pct",
];

pub type Side = BTreeMap<String, (Vec<f64>, String)>;

/// Compares the metrics present on both sides.
pub fn compare(a: &Side, b: &Side) -> Vec<CompareRow> {
    let mut names: Vec<&String> = a.keys().filter(|k| b.contains_key(*k)).collect();
    names.sort_by_key(|n| {
        (
            HEADLINE.iter().position(|h| h == n).unwrap_or(HEADLINE.len()),
            n.to_string(),
        )
    });
    names
        .into_iter()
        .map(|n| {
            let (va, unit) = &a[n];
            let (vb, _) = &b[n];
            CompareRow {
                metric: n.clone(),
                unit: unit.clone(),
                a: stats::summarize(va),
                b: stats::summarize(vb),
                cmp: stats::welch(va, vb),
            }
        })
        .collect()
}

fn verdict(r: &CompareRow) -> String {
    match (&r.cmp, &r.a, &r.b) {
        (Some(c), _, _) if c.significant => format!(
            "B {}, significant (p={:.3})",
            if c.diff > 0.0 { "higher" } else { "lower" },
            c.p
        ),
        (Some(c), _, _) => format!("no significant difference (p={:.2})", c.p),
        (None, Some(a), Some(b)) => format!("n={}/{}: too few runs to test", a.n, b.n),
        _ => "no values".into(),
    }
}

fn mean_text(s: &Option<Summary>, unit: &str) -> String {
    match s {
        None => "–".into(),
        Some(s) => match s.ci95 {
            Some((lo, hi)) => format!("{} ±{} (n={})", format_value(s.mean, unit), format_value((hi - lo) / 2.0, unit), s.n),
            None => format!("{} (n={})", format_value(s.mean, unit), s.n),
        },
    }
}

/// An aligned table, one metric per line.
pub fn render_text(a_label: &str, b_label: &str, rows: &[CompareRow], out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "A = {a_label}, B = {b_label}; means ± 95 % CI half-width, Welch's t-test")?;
    let mut lines = vec![[
        "metric".to_string(),
        "A".into(),
        "B".into(),
        "B - A".into(),
        "95 % CI of B - A".into(),
        "verdict".into(),
    ]];
    for r in rows {
        let (diff, ci) = match (&r.cmp, &r.a, &r.b) {
            (Some(c), _, _) => (
                format!(
                    "{}{}",
                    format_value(c.diff, &r.unit),
                    c.rel.map(|x| format!(" ({:+.1} %)", x * 100.0)).unwrap_or_default()
                ),
                format!("{} .. {}", format_value(c.ci95.0, &r.unit), format_value(c.ci95.1, &r.unit)),
            ),
            (None, Some(a), Some(b)) => (format_value(b.mean - a.mean, &r.unit), "–".into()),
            _ => ("–".into(), "–".into()),
        };
        lines.push([
            r.metric.clone(),
            mean_text(&r.a, &r.unit),
            mean_text(&r.b, &r.unit),
            diff,
            ci,
            verdict(r),
        ]);
    }
    let mut w = [0usize; 6];
    for l in &lines {
        for (i, c) in l.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    for l in &lines {
        let mut s = String::new();
        for (i, c) in l.iter().enumerate() {
            let pad = w[i] - c.chars().count();
            s.push_str(c);
            if i + 1 < l.len() {
                s.push_str(&" ".repeat(pad + 2));
            }
        }
        writeln!(out, "{}", s.trim_end())?;
    }
    if rows.is_empty() {
        writeln!(out, "(no metric is present on both sides)")?;
    }
    Ok(())
}

/// The same as JSON (`xferlab compare -J`).
pub fn render_json(a_label: &str, b_label: &str, rows: &[CompareRow]) -> serde_json::Value {
    json!({
        "schema": "xferlab.compare/1",
        "a": a_label,
        "b": b_label,
        "metrics": rows.iter().map(|r| json!({
            "metric": r.metric,
            "unit": r.unit,
            "a": r.a,
            "b": r.b,
            "diff": r.cmp.as_ref().map(|c| c.diff),
            "relative": r.cmp.as_ref().and_then(|c| c.rel),
            "ci95": r.cmp.as_ref().map(|c| [c.ci95.0, c.ci95.1]),
            "t": r.cmp.as_ref().map(|c| c.t),
            "df": r.cmp.as_ref().map(|c| c.df),
            "p": r.cmp.as_ref().map(|c| c.p),
            "significant": r.cmp.as_ref().map(|c| c.significant),
            "verdict": verdict(r),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(v: &[f64]) -> Side {
        let mut m = Side::new();
        m.insert("throughput_bps".into(), (v.to_vec(), "bit/s".into()));
        m.insert("only_here".into(), (v.to_vec(), "count".into()));
        m
    }

    #[test]
    fn a_big_difference_is_significant_and_noise_is_not() {
        let a = side(&[10e9, 10.1e9, 9.9e9, 10.05e9]);
        let b = side(&[12e9, 12.1e9, 11.9e9, 12.05e9]);
        let mut b2 = Side::new();
        b2.insert("throughput_bps".into(), (vec![10.02e9, 9.95e9, 10.1e9, 10.0e9], "bit/s".into()));
        let rows = compare(&a, &b);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].metric, "throughput_bps");
        assert!(rows[0].cmp.as_ref().unwrap().significant);
        assert!(verdict(&rows[0]).starts_with("B higher, significant"));
        let rows = compare(&a, &b2);
        assert_eq!(rows.len(), 1, "only metrics on both sides");
        assert!(!rows[0].cmp.as_ref().unwrap().significant);
        let mut text = Vec::new();
        render_text("x/1", "x/2", &rows, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("no significant difference"), "{text}");
    }

    #[test]
    fn single_runs_cannot_be_tested() {
        let rows = compare(&side(&[1.0]), &side(&[2.0]));
        assert!(rows[0].cmp.is_none());
        assert_eq!(verdict(&rows[0]), "n=1/1: too few runs to test");
        let j = render_json("run:1", "run:2", &rows);
        assert_eq!(j["metrics"][0]["p"], serde_json::Value::Null);
    }
}
