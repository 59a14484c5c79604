//! The rendering half of `xferlab compare A B`: given the repeated values
//! of every metric of two sets of runs (A, the baseline, and B), test each
//! metric present in both with Welch's t-test and print the answer as an
//! aligned table or as JSON.
//!
//! Loading the sets (from the results store or from result files) is the
//! caller's; the statistics are `xferlab_core::experiment::stats`, the
//! units and number formatting `xferlab_core::experiment::metrics`. The
//! verdicts only say "higher" or "lower": whether higher is better depends
//! on the metric (throughput against latency), which the reader knows.
//!
//! Rows come in a fixed order, the headline metrics first ([`HEADLINE`]),
//! then the rest alphabetically, so two comparisons of the same kind of
//! test line up.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde_json::{json, Value};
use xferlab_core::experiment::metrics::format_value;
use xferlab_core::experiment::stats::{self, Comparison, Summary};

/// The metrics shown first, in this order, when present.
pub const HEADLINE: &[&str] = &[
    "throughput_bps",
    "c2s_bps",
    "s2c_bps",
    "tps",
    "latency_p50_us",
    "latency_p99_us",
    "latency_mean_us",
    "loss_fraction",
    "retransmits",
    "rtt_mean_us",
    "jitter_us",
    "sustained",
    "best_bps_max",
    "best_bps_median",
    "cpu_client_pct",
    "cpu_server_pct",
    "ok",
];

/// One metric of the comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareRow {
    pub metric: String,
    pub unit: String,
    /// Welch's test of B against A; `None` when either side has fewer
    /// than two finite values.
    pub cmp: Option<Comparison>,
    /// `None` when that side has no finite value.
    pub a: Option<Summary>,
    pub b: Option<Summary>,
}

/// Values of each metric over the runs of one set, with its unit.
pub type MetricSet = BTreeMap<String, (Vec<f64>, String)>;

/// Where a metric goes: headline ones by their place in [`HEADLINE`],
/// then everything else alphabetically.
fn order_key(metric: &str) -> (usize, &str) {
    let rank = HEADLINE
        .iter()
        .position(|h| *h == metric)
        .unwrap_or(HEADLINE.len());
    (rank, metric)
}

/// Compares every metric present in both sets (see the module docs for
/// the order). The unit is A's, B's if A has none.
pub fn compare(a: &MetricSet, b: &MetricSet) -> Vec<CompareRow> {
    let mut rows: Vec<CompareRow> = a
        .iter()
        .filter_map(|(metric, (va, unit_a))| {
            let (vb, unit_b) = b.get(metric)?;
            let unit = if unit_a.is_empty() { unit_b } else { unit_a };
            Some(CompareRow {
                metric: metric.clone(),
                unit: unit.clone(),
                cmp: stats::welch(va, vb),
                a: stats::summarize(va),
                b: stats::summarize(vb),
            })
        })
        .collect();
    rows.sort_by(|x, y| order_key(&x.metric).cmp(&order_key(&y.metric)));
    rows
}

/// Metrics present in only one of the sets: (only in A, only in B). Worth
/// a note under the table: a metric that vanished is itself a difference.
pub fn unmatched(a: &MetricSet, b: &MetricSet) -> (Vec<String>, Vec<String>) {
    let only = |x: &MetricSet, y: &MetricSet| {
        x.keys()
            .filter(|k| !y.contains_key(*k))
            .cloned()
            .collect::<Vec<_>>()
    };
    (only(a, b), only(b, a))
}

/// The unit differences and interval widths are shown in: a bool's mean
/// is a share of runs, so its differences are shares too.
fn spread_unit(unit: &str) -> &str {
    if unit == "bool" {
        "fraction"
    } else {
        unit
    }
}

/// A signed figure: "+" for positive values, as differences are shown.
fn signed(value: f64, unit: &str) -> String {
    let s = format_value(value, unit);
    if value > 0.0 {
        format!("+{s}")
    } else {
        s
    }
}

/// "mean ± half-width" of one side, "mean" alone for n = 1, "-" for none.
fn cell(s: Option<&Summary>, unit: &str) -> String {
    match s {
        None => "-".to_string(),
        Some(s) => match s.ci95_half_width() {
            Some(hw) => format!(
                "{} ± {}",
                format_value(s.mean, unit),
                format_value(hw, spread_unit(unit))
            ),
            None => format_value(s.mean, unit),
        },
    }
}

/// A p-value for people: three decimals, "<0.001" below that.
pub fn format_p(p: f64) -> String {
    if p < 0.001 {
        "<0.001".to_string()
    } else {
        format!("{p:.3}")
    }
}

/// The row's conclusion in words.
pub fn verdict(row: &CompareRow) -> String {
    match &row.cmp {
        None => "n<2: cannot test".to_string(),
        Some(c) if c.significant => format!(
            "B {}, significant (p{})",
            if c.diff > 0.0 { "higher" } else { "lower" },
            match format_p(c.p) {
                p if p.starts_with('<') => p,
                p => format!("={p}"),
            }
        ),
        Some(_) => "no significant difference".to_string(),
    }
}

/// The cells of one row, in the table's column order.
fn cells(row: &CompareRow) -> [String; 9] {
    let unit = row.unit.as_str();
    let du = spread_unit(unit);
    let n = |s: &Option<Summary>| s.as_ref().map_or(0, |s| s.n);
    let (diff, rel, ci, p) = match &row.cmp {
        Some(c) => (
            signed(c.diff, du),
            c.rel.map_or("-".to_string(), |r| {
                let pct = format_value(r, "fraction");
                if r > 0.0 {
                    format!("+{pct}")
                } else {
                    pct
                }
            }),
            format!("[{}, {}]", signed(c.ci95.0, du), signed(c.ci95.1, du)),
            format_p(c.p),
        ),
        None => {
            // Without a test the difference of the means is still worth
            // showing when both sides have one.
            let diff = match (&row.a, &row.b) {
                (Some(a), Some(b)) => signed(b.mean - a.mean, du),
                _ => "-".to_string(),
            };
            (diff, "-".to_string(), "-".to_string(), "-".to_string())
        }
    };
    [
        row.metric.clone(),
        format!("{}/{}", n(&row.a), n(&row.b)),
        cell(row.a.as_ref(), unit),
        cell(row.b.as_ref(), unit),
        diff,
        rel,
        ci,
        p,
        verdict(row),
    ]
}

const HEADER: [&str; 9] = [
    "metric",
    "n A/B",
    "A mean ± 95% CI",
    "B mean ± 95% CI",
    "diff (B-A)",
    "diff %",
    "95% CI of diff",
    "p",
    "verdict",
];

/// Writes the comparison as an aligned text table, A and B named by their
/// labels above it, and the metrics only one side has ([`unmatched`])
/// under it.
pub fn render_text(
    a_label: &str,
    b_label: &str,
    rows: &[CompareRow],
    only: (&[String], &[String]),
    out: &mut dyn Write,
) -> io::Result<()> {
    writeln!(out, "A: {a_label}")?;
    writeln!(out, "B: {b_label}")?;
    if rows.is_empty() {
        writeln!(out, "no metric is present in both A and B")?;
    } else {
        table_text(rows, out)?;
    }
    for (side, names) in [("A", only.0), ("B", only.1)] {
        if !names.is_empty() {
            writeln!(out, "only in {side}: {}", names.join(", "))?;
        }
    }
    Ok(())
}

fn table_text(rows: &[CompareRow], out: &mut dyn Write) -> io::Result<()> {
    let table: Vec<[String; 9]> = rows.iter().map(cells).collect();
    let mut widths = HEADER.map(|h| h.chars().count());
    for r in &table {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |out: &mut dyn Write, cols: &[&str]| -> io::Result<()> {
        let mut s = String::new();
        for (i, (c, w)) in cols.iter().zip(widths).enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            // Text left, figures right; the last column is not padded.
            match i {
                0 | 8 => s.push_str(&format!("{c:<w$}")),
                _ => s.push_str(&format!("{c:>w$}")),
            }
        }
        writeln!(out, "{}", s.trim_end())
    };
    line(out, &HEADER)?;
    for r in &table {
        let cols: Vec<&str> = r.iter().map(String::as_str).collect();
        line(out, &cols)?;
    }
    writeln!(
        out,
        "Welch's t-test, two-sided; significant: p < {}. diff % is relative to A's mean.",
        stats::ALPHA
    )
}

/// The comparison as JSON: the labels and, per metric, both summaries,
/// the test (null when n < 2) and the verdict; then the metrics only one
/// side has. Non-finite figures (t of two different constants) are
/// written as null.
pub fn render_json(
    a_label: &str,
    b_label: &str,
    rows: &[CompareRow],
    only: (&[String], &[String]),
) -> Value {
    let metrics: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "metric": r.metric,
                "unit": r.unit,
                "a": r.a,
                "b": r.b,
                "comparison": r.cmp,
                "verdict": verdict(r),
            })
        })
        .collect();
    json!({
        "a": a_label,
        "b": b_label,
        "alpha": stats::ALPHA,
        "metrics": metrics,
        "only_in_a": only.0,
        "only_in_b": only.1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(entries: &[(&str, &[f64], &str)]) -> MetricSet {
        entries
            .iter()
            .map(|(m, v, u)| (m.to_string(), (v.to_vec(), u.to_string())))
            .collect()
    }

    fn row<'a>(rows: &'a [CompareRow], metric: &str) -> &'a CompareRow {
        rows.iter().find(|r| r.metric == metric).unwrap()
    }

    #[test]
    fn big_difference_is_significant_identical_is_not_single_runs_cannot_be_tested() {
        let a = set(&[
            (
                "throughput_bps",
                &[9.0e9, 9.1e9, 8.9e9, 9.05e9, 8.95e9],
                "bit/s",
            ),
            ("retransmits", &[3.0, 5.0, 4.0, 6.0, 2.0], "count"),
            ("latency_p99_us", &[40.0], "us"),
        ]);
        let b = set(&[
            (
                "throughput_bps",
                &[9.6e9, 9.5e9, 9.7e9, 9.55e9, 9.65e9],
                "bit/s",
            ),
            ("retransmits", &[3.0, 5.0, 4.0, 6.0, 2.0], "count"),
            ("latency_p99_us", &[41.0, 39.0], "us"),
        ]);
        let rows = compare(&a, &b);

        let t = row(&rows, "throughput_bps");
        let c = t.cmp.as_ref().unwrap();
        assert!(c.significant && c.p < 0.001, "{c:?}");
        assert!((c.diff - 0.6e9).abs() < 1.0);
        assert_eq!(verdict(t), "B higher, significant (p<0.001)");

        let r = row(&rows, "retransmits");
        assert_eq!(r.cmp.as_ref().unwrap().p, 1.0);
        assert_eq!(verdict(r), "no significant difference");

        let l = row(&rows, "latency_p99_us");
        assert_eq!(l.cmp, None);
        assert_eq!(l.a.as_ref().unwrap().n, 1);
        assert_eq!(verdict(l), "n<2: cannot test");

        let mut text = Vec::new();
        render_text("base", "tuned", &rows, (&[], &[]), &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.starts_with("A: base\nB: tuned\n"), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        let tp = lines
            .iter()
            .find(|l| l.starts_with("throughput_bps"))
            .unwrap();
        assert!(tp.contains("9.00 Gbit/s ± "), "{tp}");
        assert!(tp.contains("+600 Mbit/s"), "{tp}");
        assert!(tp.contains("+6.67 %"), "{tp}");
        assert!(tp.contains("5/5"), "{tp}");
        let lat = lines
            .iter()
            .find(|l| l.starts_with("latency_p99_us"))
            .unwrap();
        assert!(lat.contains("40.0 µs"), "{lat}");
        assert!(lat.ends_with("n<2: cannot test"), "{lat}");
        // Aligned: every verdict starts in the same column.
        let header = lines.iter().find(|l| l.starts_with("metric")).unwrap();
        let verdict_col = header.find("verdict").unwrap();
        let verdict_chars = header[..verdict_col].chars().count();
        for l in lines
            .iter()
            .filter(|l| l.contains(" µs") || l.contains("bit/s"))
        {
            let prefix: String = l.chars().take(verdict_chars).collect();
            assert!(prefix.ends_with("  "), "misaligned: {l}");
        }
    }

    #[test]
    fn lower_and_order_and_unmatched() {
        let a = set(&[
            ("zeta", &[1.0, 1.1, 0.9], "count"),
            ("latency_p99_us", &[100.0, 101.0, 99.0], "us"),
            ("throughput_bps", &[1.0, 1.0, 1.0], "bit/s"),
            ("alpha", &[1.0, 2.0], "count"),
            ("only_a", &[1.0, 2.0], "count"),
        ]);
        let b = set(&[
            ("zeta", &[1.0, 1.1, 0.9], "count"),
            ("latency_p99_us", &[50.0, 51.0, 49.0], "us"),
            ("throughput_bps", &[1.0, 1.0, 1.0], "bit/s"),
            ("alpha", &[1.0, 2.0], "count"),
            ("only_b", &[1.0], "count"),
        ]);
        let rows = compare(&a, &b);
        let names: Vec<&str> = rows.iter().map(|r| r.metric.as_str()).collect();
        assert_eq!(names, ["throughput_bps", "latency_p99_us", "alpha", "zeta"]);
        assert!(verdict(&rows[1]).starts_with("B lower, significant (p"));
        let (only_a, only_b) = unmatched(&a, &b);
        assert_eq!(
            (&only_a, &only_b),
            (&vec!["only_a".to_string()], &vec!["only_b".to_string()])
        );
        // Both renderings say what only one side has.
        let mut text = Vec::new();
        render_text("a", "b", &rows, (&only_a, &only_b), &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.ends_with("only in A: only_a\nonly in B: only_b\n"),
            "{text}"
        );
        let v = render_json("a", "b", &rows, (&only_a, &only_b));
        assert_eq!(v["only_in_a"], json!(["only_a"]));
        assert_eq!(v["only_in_b"], json!(["only_b"]));
    }

    #[test]
    fn json_carries_summaries_tests_and_verdicts() {
        let a = set(&[
            ("tps", &[100.0, 102.0, 98.0], "1/s"),
            ("ok", &[1.0, 1.0], "bool"),
            ("jitter_us", &[5.0], "us"),
        ]);
        let b = set(&[
            ("tps", &[200.0, 202.0, 198.0], "1/s"),
            ("ok", &[0.0, 0.0], "bool"),
            ("jitter_us", &[f64::NAN], "us"),
        ]);
        let rows = compare(&a, &b);
        let v = render_json("A run", "B run", &rows, (&[], &[]));
        assert_eq!(v["a"], "A run");
        assert_eq!(v["b"], "B run");
        let m = v["metrics"].as_array().unwrap();
        assert_eq!(m[0]["metric"], "tps");
        assert_eq!(m[0]["unit"], "1/s");
        assert_eq!(m[0]["a"]["mean"], 100.0);
        assert_eq!(m[0]["b"]["n"], 3);
        assert_eq!(m[0]["comparison"]["diff"], 100.0);
        assert_eq!(m[0]["comparison"]["significant"], true);
        // Two different constants: t is infinite, written as null.
        let ok = m.iter().find(|x| x["metric"] == "ok").unwrap();
        assert_eq!(ok["comparison"]["t"], Value::Null);
        assert_eq!(ok["comparison"]["p"], 0.0);
        assert_eq!(ok["verdict"], "B lower, significant (p<0.001)");
        // B's only value is NaN: no summary, no test.
        let j = m.iter().find(|x| x["metric"] == "jitter_us").unwrap();
        assert_eq!(j["b"], Value::Null);
        assert_eq!(j["comparison"], Value::Null);
        assert_eq!(j["verdict"], "n<2: cannot test");

        let mut text = Vec::new();
        render_text("a", "b", &rows, (&[], &[]), &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        let ok_line = text.lines().find(|l| l.starts_with("ok ")).unwrap();
        // A bool's difference is a share of runs.
        assert!(ok_line.contains("-100 %"), "{ok_line}");
        assert!(ok_line.contains("yes ± 0 %"), "{ok_line}");
    }

    #[test]
    fn nothing_in_common() {
        let a = set(&[("tps", &[1.0, 2.0], "1/s")]);
        let b = set(&[("throughput_bps", &[1.0, 2.0], "bit/s")]);
        let rows = compare(&a, &b);
        assert!(rows.is_empty());
        let mut text = Vec::new();
        render_text("x", "y", &rows, (&[], &[]), &mut text).unwrap();
        assert!(String::from_utf8(text)
            .unwrap()
            .contains("no metric is present in both A and B"));
    }

    #[test]
    fn p_values_for_people() {
        assert_eq!(format_p(0.0), "<0.001");
        assert_eq!(format_p(0.0004), "<0.001");
        assert_eq!(format_p(0.003), "0.003");
        assert_eq!(format_p(0.07939), "0.079");
        assert_eq!(format_p(1.0), "1.000");
    }
}
