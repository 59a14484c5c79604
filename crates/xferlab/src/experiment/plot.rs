//! Plots for experiment reports: a small data model ([`Plot`], [`Series`], [`PlotPoint`]) and
//! [`render_svg`], which draws it as a fixed-size SVG with `plotters`' SVG backend.
//!
//! This module owns the look of every report plot, so that all plots of a report share one
//! palette, one font scale and one set of range and tick rules. Choices and why:
//!
//! * **Fixed 800x500 px.** Reports are read side by side; one size makes plots comparable and
//!   lets the HTML page scale them uniformly.
//! * **Legend in a panel right of the plot area**, never inside it, so it cannot hide data however
//!   many series there are. Series with the same label share a colour and one legend entry: a
//!   time plot overlays one series per run and labels each run with its configuration. A label
//!   too long for the panel wraps onto more lines, never cut; entries that do not fit the panel
//!   are counted in "+N more".
//! * **Palette of 10 opaque colours** without black or grey (those are the axes, text and grid),
//!   so every series colour can be told apart from chrome, also by the tests, which count
//!   exact palette colours in the rendered pixels. More than 10 labels reuse colours in order.
//! * **Own x axis type** ([`XAxis`]): linear, log (ticks on 1-2-5 per decade, which plotters'
//!   log axis does not give for ranges under a decade) and categorical (one tick per knob value,
//!   point x = index into [`Plot::x_categories`]).
//! * **Y range from 0** unless the data are far from 0 (all values above half the maximum, or
//!   the mirror for negative data), padded by 5%; bars always include 0.
//! * **Short tick labels** (`1.5k`, `10M`): SI-style, three significant digits.
//! * Invalid input (no series, non-finite numbers, log of non-positive values, category indexes
//!   out of range, CDF fractions outside 0..1) is a [`PlotError`] naming the plot and the fix,
//!   never a blank or misleading picture.
//!
//! The SVG has text as `<text>` elements (no font is embedded; the viewer's sans-serif is used).

use std::fmt;
use std::ops::Range;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
#[cfg(feature = "png")]
use resvg::tiny_skia::Pixmap;
#[cfg(feature = "png")]
use resvg::usvg;
#[cfg(feature = "png")]
use std::sync::{Arc, OnceLock};

/// Width of every rendered plot, in pixels.
pub const WIDTH: u32 = 800;
/// Height of every rendered plot, in pixels.
pub const HEIGHT: u32 = 500;

/// Series colours, in the order labels are assigned them (d3's category10 with its grey
/// replaced by a dark indigo). None is black, white or grey.
pub const PALETTE: [(u8, u8, u8); 10] = [
    (0x1f, 0x77, 0xb4), // blue
    (0xff, 0x7f, 0x0e), // orange
    (0x2c, 0xa0, 0x2c), // green
    (0xd6, 0x27, 0x28), // red
    (0x94, 0x67, 0xbd), // purple
    (0x8c, 0x56, 0x4b), // brown
    (0xe3, 0x77, 0xc2), // pink
    (0xbc, 0xbd, 0x22), // olive
    (0x17, 0xbe, 0xcf), // cyan
    (0x39, 0x3b, 0x79), // indigo
];

const FONT: &str = "sans-serif";
// plotters writes `font-size = size / 1.24` into the SVG; these give about 19, 15, 13.7
// and 12.9 px.
const TITLE_SIZE: f64 = 24.0;
const DESC_SIZE: f64 = 19.0;
const TICK_SIZE: f64 = 17.0;
const LEGEND_SIZE: f64 = 16.0;
/// The legend panel's width: room for the swatch and gaps, and at most this much in all.
const LEGEND_PAD_PX: f64 = 36.0;
const LEGEND_MAX_PX: f64 = 300.0;
const LEGEND_ROW_PX: i32 = 20;
/// Rough width of one tick-label character at TICK_SIZE.
const TICK_CHAR_PX: f64 = 8.0;
/// Category labels longer than this are cut in the middle.
const MAX_CATEGORY_CHARS: usize = 20;
const GRID_BOLD: RGBColor = RGBColor(0xd0, 0xd0, 0xd0);
const GRID_LIGHT: RGBColor = RGBColor(0xee, 0xee, 0xee);
const WHISKER_ON_BARS: RGBColor = RGBColor(0x22, 0x22, 0x22);

/// What a plot shows and so how it is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlotKind {
    /// A metric against a knob: one line per series, a marker per point, error whiskers.
    Lines,
    /// Grouped bars: one group per x category, one bar per series, error whiskers.
    Bars,
    /// A metric against time, runs overlaid: thin lines, no markers; series with the same
    /// label (a configuration) share a colour and one legend entry. `err` is not drawn.
    Time,
    /// Cumulative distribution: x a value (latency), y the fraction of samples at or below it
    /// (0..1), drawn as steps. Points are (value, fraction) pairs, e.g. from [`cdf_points`].
    /// `err` is not drawn.
    Cdf,
}

/// One data point. `err` is an interval `(low, high)` in absolute y units (a CI95, min..max,
/// ...), drawn as a whisker; the caption says what it means.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlotPoint {
    pub x: f64,
    pub y: f64,
    pub err: Option<(f64, f64)>,
}

// Tests build plots by hand; the report code builds points as literals.
#[cfg(test)]
impl PlotPoint {
    /// A point without an error interval.
    pub fn new(x: f64, y: f64) -> Self {
        PlotPoint { x, y, err: None }
    }

    /// A point with an error interval `low..=high` (absolute y values).
    pub fn with_err(x: f64, y: f64, low: f64, high: f64) -> Self {
        PlotPoint {
            x,
            y,
            err: Some((low, high)),
        }
    }
}

/// One named set of points. Series with equal labels share a colour and a legend entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<PlotPoint>,
}

/// Everything needed to draw one plot.
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    pub title: String,
    pub kind: PlotKind,
    /// With unit, e.g. "datagram size (bytes)", "time (s)", "latency (µs)".
    pub x_label: String,
    /// With unit, e.g. "throughput (Mbit/s)".
    pub y_label: String,
    /// Categorical x axis: a point's x is an index into this (knob values like "64K").
    /// `Bars` without categories use the distinct x values, formatted short, as categories.
    /// `log_x` is ignored on a categorical axis.
    pub x_categories: Option<Vec<String>>,
    pub log_x: bool,
    pub series: Vec<Series>,
    /// One sentence shown under the plot in HTML (aggregate, n, error-bar meaning). Not drawn
    /// into the SVG.
    pub caption: String,
}

/// Why a plot cannot be drawn. Messages name the plot and what to change.
#[derive(Debug, Clone, PartialEq)]
pub enum PlotError {
    /// No series, or no points in any series.
    Empty(String),
    /// The data cannot be drawn as asked (non-finite values, log of non-positive values, ...).
    Invalid(String),
    /// The drawing backend failed (a bug here rather than in the data).
    Render(String),
}

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlotError::Empty(m) => write!(f, "nothing to plot: {m}"),
            PlotError::Invalid(m) => write!(f, "cannot plot: {m}"),
            PlotError::Render(m) => write!(f, "drawing the plot failed: {m}"),
        }
    }
}

impl std::error::Error for PlotError {}

fn render_err<E: fmt::Display>(e: E) -> PlotError {
    PlotError::Render(e.to_string())
}

/// Points of an empirical CDF of `samples`: at most `max_points` (value, fraction at or below)
/// pairs, exact at the points kept, ending at (max, 1.0). Non-finite samples are skipped. The
/// report's CDFs come from each run's merged latency percentiles; tests build theirs with this.
#[cfg(test)]
pub fn cdf_points(samples: &[f64], max_points: usize) -> Vec<PlotPoint> {
    let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() || max_points == 0 {
        return Vec::new();
    }
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let m = max_points.min(n);
    let mut out: Vec<PlotPoint> = Vec::with_capacity(m);
    for k in 1..=m {
        // Last index of the k-th of m equal shares, so the final one is n - 1.
        let mut idx = (k * n).div_ceil(m) - 1;
        // Ties: the CDF at a value counts every sample equal to it.
        while idx + 1 < n && sorted[idx + 1] == sorted[idx] {
            idx += 1;
        }
        let p = PlotPoint::new(sorted[idx], (idx + 1) as f64 / n as f64);
        match out.last_mut() {
            Some(last) if last.x == p.x => *last = p,
            _ => out.push(p),
        }
    }
    out
}

/// Short tick label: SI suffix (k, M, G, T) and at most three significant digits, trailing
/// zeros dropped: 1500 -> "1.5k", 10e6 -> "10M", 0.25 -> "0.25".
pub fn fmt_short(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v.is_finite() {
            "0".into()
        } else {
            v.to_string()
        };
    }
    let a = v.abs();
    let (div, suffix) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(d, _)| a >= *d * 0.9995)
        .unwrap_or((1.0, ""));
    let m = v / div;
    let am = m.abs();
    let decimals = if am >= 99.95 {
        0
    } else if am >= 9.995 {
        1
    } else if am >= 1.0 {
        2
    } else {
        // Below 1 (no suffix): three significant digits.
        ((-am.log10().floor()) as usize + 2).min(12)
    };
    let mut s = format!("{m:.decimals$}");
    if s.contains('.') {
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
    }
    if s == "-0" {
        s = "0".into();
    }
    s + suffix
}

/// The x axis of a plot: plotters' coordinate trait implemented once for the three kinds so
/// the drawing code is not generic over them.
#[derive(Debug, Clone)]
enum XAxis {
    Linear { lo: f64, hi: f64 },
    Log { lo: f64, hi: f64 },
    Category { n: usize },
}

impl XAxis {
    /// Axis bounds in the space where mapping is linear.
    fn linear_bounds(&self) -> (f64, f64) {
        match *self {
            XAxis::Linear { lo, hi } => (lo, hi),
            XAxis::Log { lo, hi } => (lo.ln(), hi.ln()),
            XAxis::Category { n } => (-0.5, n as f64 - 0.5),
        }
    }
}

impl Ranged for XAxis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let (a, b) = self.linear_bounds();
        let v = match self {
            XAxis::Log { .. } => value.ln(),
            _ => *value,
        };
        let t = (v - a) / (b - a);
        (f64::from(limit.0) + t * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        let max = hint.max_num_points();
        match *self {
            XAxis::Linear { lo, hi } => RangedCoordf64::from(lo..hi).key_points(hint),
            XAxis::Log { lo, hi } => {
                let pts = log_key_points(lo, hi, max);
                if pts.len() >= 2 {
                    pts
                } else {
                    // Less than two 1-2-5 ticks in range (a narrow range): linear ticks.
                    RangedCoordf64::from(lo..hi).key_points(hint)
                }
            }
            XAxis::Category { n } => {
                if max == 0 {
                    return Vec::new();
                }
                let step = n.div_ceil(max).max(1);
                (0..n).step_by(step).map(|i| i as f64).collect()
            }
        }
    }

    fn range(&self) -> Range<f64> {
        match *self {
            XAxis::Linear { lo, hi } | XAxis::Log { lo, hi } => lo..hi,
            XAxis::Category { n } => -0.5..(n as f64 - 0.5),
        }
    }
}

impl ValueFormatter<f64> for XAxis {
    fn format(value: &f64) -> String {
        fmt_short(*value)
    }
}

/// Ticks on a log axis: the densest of mantissa sets {1..9}, {1,2,5}, {1} per decade that
/// gives at most `max` ticks in `lo..=hi`; with too many decades even for {1}, every k-th decade.
fn log_key_points(lo: f64, hi: f64, max: usize) -> Vec<f64> {
    if max == 0 || lo <= 0.0 || hi <= lo {
        return Vec::new();
    }
    let d0 = lo.log10().floor() as i32;
    let d1 = hi.log10().ceil() as i32;
    let in_range = |v: f64| v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9);
    let sets: [&[f64]; 3] = [
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
        &[1.0, 2.0, 5.0],
        &[1.0],
    ];
    for set in sets {
        let pts: Vec<f64> = (d0..=d1)
            .flat_map(|d| set.iter().map(move |m| m * 10f64.powi(d)))
            .filter(|v| in_range(*v))
            .collect();
        if pts.len() <= max {
            return pts;
        }
    }
    let decades: Vec<f64> = (d0..=d1)
        .map(|d| 10f64.powi(d))
        .filter(|v| in_range(*v))
        .collect();
    let step = decades.len().div_ceil(max).max(1);
    decades.into_iter().step_by(step).collect()
}

/// A validated plot, ready to draw.
struct Prepared<'a> {
    plot: &'a Plot,
    x: XAxis,
    /// Tick labels of a categorical axis.
    categories: Option<Vec<String>>,
    y: (f64, f64),
    /// Points per series, sorted by x, x mapped to category index where categorical.
    series: Vec<Vec<PlotPoint>>,
    /// Palette index per series.
    colour: Vec<usize>,
    /// Distinct non-empty labels with their palette index, in order of first appearance.
    legend: Vec<(String, usize)>,
}

fn palette(i: usize) -> RGBColor {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

/// Labels past the palette reuse its colours, told apart by an open style: dashed lines,
/// hollow markers, outlined bars and legend swatches.
fn open_style(i: usize) -> bool {
    i >= PALETTE.len()
}

/// Checks the data and works out axes, colours and legend.
fn prepare(plot: &Plot) -> Result<Prepared<'_>, PlotError> {
    let name = if plot.title.is_empty() {
        "(untitled plot)".to_string()
    } else {
        format!("plot \"{}\"", plot.title)
    };
    if plot.series.is_empty() {
        return Err(PlotError::Empty(format!(
            "{name} has no series; give it at least one series with points, or leave it out of the report"
        )));
    }
    if plot.series.iter().all(|s| s.points.is_empty()) {
        return Err(PlotError::Empty(format!(
            "{name} has {} series but no points; check that the experiment produced results for this metric, or leave the plot out",
            plot.series.len()
        )));
    }
    for s in &plot.series {
        for p in &s.points {
            let errs = p.err.is_none_or(|(l, h)| l.is_finite() && h.is_finite());
            if !p.x.is_finite() || !p.y.is_finite() || !errs {
                return Err(PlotError::Invalid(format!(
                    "{name}: series \"{}\" has a non-finite value at x={}, y={}, err={:?}; drop such points before plotting",
                    s.label, p.x, p.y, p.err
                )));
            }
        }
    }

    // Categorical axis: given, or for bars made from the distinct x values.
    let bar_xs: Option<Vec<f64>> = match (&plot.x_categories, plot.kind) {
        (None, PlotKind::Bars) => {
            let mut xs: Vec<f64> = plot
                .series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.x))
                .collect();
            xs.sort_by(f64::total_cmp);
            xs.dedup();
            Some(xs)
        }
        _ => None,
    };
    let categories = match (&plot.x_categories, &bar_xs) {
        (Some(c), _) => Some(c.clone()),
        (None, Some(xs)) => Some(xs.iter().map(|x| fmt_short(*x)).collect()),
        (None, None) => None,
    };

    let mut series: Vec<Vec<PlotPoint>> = Vec::with_capacity(plot.series.len());
    for s in &plot.series {
        let mut pts = s.points.clone();
        if let Some(xs) = &bar_xs {
            for p in &mut pts {
                // Exact: the categories were made from these very values.
                p.x = xs.iter().position(|x| *x == p.x).unwrap_or(0) as f64;
            }
        } else if let Some(cats) = &categories {
            for p in &pts {
                let i = p.x.round();
                if (p.x - i).abs() > 1e-9 || i < 0.0 || i >= cats.len() as f64 {
                    return Err(PlotError::Invalid(format!(
                        "{name}: series \"{}\" has x={} but the x axis is categorical with {} categories; x must be an index 0..{}",
                        s.label,
                        p.x,
                        cats.len(),
                        cats.len()
                    )));
                }
            }
            for p in &mut pts {
                p.x = p.x.round();
            }
        }
        pts.sort_by(|a, b| a.x.total_cmp(&b.x));
        series.push(pts);
    }
    let all = || series.iter().flatten();

    if let Some(cats) = &categories {
        if cats.is_empty() {
            return Err(PlotError::Invalid(format!(
                "{name}: the categorical x axis has no categories; pass the knob values as x_categories"
            )));
        }
    }

    // X axis.
    let x = if let Some(cats) = &categories {
        XAxis::Category { n: cats.len() }
    } else {
        let lo = all().map(|p| p.x).fold(f64::INFINITY, f64::min);
        let hi = all().map(|p| p.x).fold(f64::NEG_INFINITY, f64::max);
        let pad_frac = if plot.kind == PlotKind::Time {
            0.0
        } else {
            0.05
        };
        if plot.log_x {
            if lo <= 0.0 {
                return Err(PlotError::Invalid(format!(
                    "{name}: log x axis but x goes down to {lo}; use a linear axis or drop non-positive x values"
                )));
            }
            let (l, h) = (lo.log10(), hi.log10());
            let pad = if h > l { (h - l) * 0.05 } else { 0.5 };
            XAxis::Log {
                lo: 10f64.powf(l - pad),
                hi: 10f64.powf(h + pad),
            }
        } else {
            let (lo, hi) = pad_range(lo, hi, pad_frac);
            XAxis::Linear { lo, hi }
        }
    };

    // Y range.
    let y = match plot.kind {
        PlotKind::Cdf => {
            if let Some(p) = all().find(|p| !(0.0..=1.0).contains(&p.y)) {
                return Err(PlotError::Invalid(format!(
                    "{name}: a CDF's y is a fraction in 0..1 but one point has y={}; pass fractions, not percentages or counts",
                    p.y
                )));
            }
            (0.0, 1.05)
        }
        kind => {
            let with_err = kind != PlotKind::Time;
            let ys = || {
                all().flat_map(move |p| {
                    let (l, h) = match (with_err, p.err) {
                        (true, Some((l, h))) => (l, h),
                        _ => (p.y, p.y),
                    };
                    [p.y, l, h]
                })
            };
            let lo = ys().fold(f64::INFINITY, f64::min);
            let hi = ys().fold(f64::NEG_INFINITY, f64::max);
            y_range(lo, hi, kind == PlotKind::Bars)
        }
    };

    // Colours and legend by distinct label.
    let mut legend: Vec<(String, usize)> = Vec::new();
    let mut labels: Vec<&str> = Vec::new();
    let mut colour = Vec::with_capacity(plot.series.len());
    for s in &plot.series {
        let i = match labels.iter().position(|l| *l == s.label) {
            Some(i) => i,
            None => {
                labels.push(&s.label);
                if !s.label.is_empty() {
                    legend.push((s.label.clone(), labels.len() - 1));
                }
                labels.len() - 1
            }
        };
        colour.push(i);
    }

    Ok(Prepared {
        plot,
        x,
        categories,
        y,
        series,
        colour,
        legend,
    })
}

/// `lo..hi` widened by `frac` of its span on both sides; a zero span gets a width.
fn pad_range(lo: f64, hi: f64, frac: f64) -> (f64, f64) {
    if hi > lo {
        let pad = (hi - lo) * frac;
        (lo - pad, hi + pad)
    } else {
        let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        (lo - d, hi + d)
    }
}

/// The y range for data in `lo..=hi`: from 0 unless the data are far from 0 (or always, for
/// bars), padded by 5% away from 0.
fn y_range(mut lo: f64, mut hi: f64, always_zero: bool) -> (f64, f64) {
    if always_zero || (lo >= 0.0 && lo <= 0.5 * hi) {
        lo = lo.min(0.0);
    }
    if always_zero || (hi <= 0.0 && hi >= 0.5 * lo) {
        hi = hi.max(0.0);
    }
    if hi <= lo {
        if lo == 0.0 {
            return (0.0, 1.0);
        }
        let d = lo.abs() * 0.1;
        return (lo - d, hi + d);
    }
    let pad = (hi - lo) * 0.05;
    (
        if lo == 0.0 { 0.0 } else { lo - pad },
        if hi == 0.0 { 0.0 } else { hi + pad },
    )
}

/// Width in pixels of `s` set in sans-serif at `size` (plotters' size; it writes
/// `font-size = size / 1.24`), from DejaVu Sans's advance widths in ems: the sans-serif
/// fontconfig picks on Debian, and wider than Liberation Sans or Arial, so text sized by it
/// fits those too. Against rsvg-convert at 12.9 px (estimated / measured, px): "command
/// dummy_hcd, --load off" 214 / 214; "command dummy_hcd, --load cpu=1,mem=1,vm-bytes=64M"
/// 396 / 397; "command dummy_h…1,vm-bytes=64M" 254 / 255; the alphabet 189 / 188; upper case
/// 235 / 225. A flat 7.4 px a character, used before, put the third 25 px past the legend's
/// edge, out of the picture.
fn text_px(s: &str, size: f64) -> f64 {
    let em: f64 = s
        .chars()
        .map(|c| match c {
            'i' | 'j' | 'l' => 0.278,
            'f' => 0.352,
            't' => 0.392,
            'r' => 0.411,
            's' => 0.521,
            'z' => 0.525,
            'c' => 0.550,
            'k' => 0.579,
            'v' | 'x' | 'y' => 0.592,
            'm' => 0.974,
            'w' => 0.818,
            'a'..='z' => 0.63,
            '0'..='9' => 0.636,
            'A'..='Z' => 0.70,
            ' ' | ',' | '.' => 0.3179, // 651 of 2048 units
            ':' | ';' | '/' | '|' => 0.337,
            '-' => 0.361,
            '(' | ')' | '[' | ']' => 0.390,
            '_' | '*' => 0.5,
            '=' | '+' | '<' | '>' | '#' => 0.838,
            '%' => 0.950,
            '…' | '@' => 1.0,
            _ => 0.65,
        })
        .sum();
    em * size / 1.24
}

/// `s` as it fits `px` pixels at `size`: whole, or cut in the middle (see
/// [`truncate_middle`]).
fn fit_px(s: &str, size: f64, px: f64) -> String {
    let mut max = s.chars().count();
    loop {
        let t = truncate_middle(s, max);
        if max <= 4 || text_px(&t, size) <= px {
            return t;
        }
        max -= 1;
    }
}

/// Cuts `s` to at most `max` characters by replacing its middle with "…": configuration
/// labels often share a prefix and differ at the end.
fn truncate_middle(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let keep = max.saturating_sub(1);
    let head = keep.div_ceil(2);
    let tail = keep - head;
    let mut t: String = s.chars().take(head).collect();
    t.push('…');
    t.extend(s.chars().skip(n - tail));
    t
}

/// Draws `plot` as an 800x500 SVG document (see the module doc for the rules).
pub fn render_svg(plot: &Plot) -> Result<String, PlotError> {
    let prep = prepare(plot)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(render_err)?;
        let title_size = if plot.title.chars().count() > 60 {
            TITLE_SIZE * 0.8
        } else {
            TITLE_SIZE
        };
        let body = root
            .titled(&plot.title, (FONT, title_size).into_font().color(&BLACK))
            .map_err(render_err)?;
        let body = body.margin(0, 5, 5, 5);

        let (chart_area, legend_area) = if prep.legend.is_empty() {
            (body, None)
        } else {
            let longest = prep
                .legend
                .iter()
                .map(|(l, _)| text_px(l, LEGEND_SIZE))
                .fold(0.0, f64::max);
            let w = (LEGEND_PAD_PX + 4.0 + longest).clamp(100.0, LEGEND_MAX_PX) as u32;
            let (b, w) = (body.dim_in_pixel().0, w);
            let (c, l) = body.split_horizontally(b.saturating_sub(w));
            (c, Some(l))
        };

        draw_chart(&prep, &chart_area)?;
        if let Some(area) = legend_area {
            draw_legend(&prep, &area)?;
        }
        root.present().map_err(render_err)?;
    }
    Ok(svg)
}

type Area<'b> = DrawingArea<SVGBackend<'b>, plotters::coord::Shift>;

fn draw_chart(prep: &Prepared<'_>, area: &Area<'_>) -> Result<(), PlotError> {
    let plot = prep.plot;
    let tick_font = (FONT, TICK_SIZE).into_font().color(&BLACK);
    let desc_font = (FONT, DESC_SIZE).into_font().color(&BLACK);

    // Category labels that do not fit side by side are written vertically (drawn here, as
    // plotters centres axis labels on their tick whatever their rotation); when even that does
    // not fit, every k-th category is labelled.
    let plot_width = f64::from(area.dim_in_pixel().0) - 90.0;
    let (x_labels, rotated) = match &prep.categories {
        Some(cats) => {
            let longest = cats
                .iter()
                .map(|c| c.chars().count().min(MAX_CATEGORY_CHARS))
                .max()
                .unwrap_or(1) as f64;
            let fit = (plot_width / (longest * TICK_CHAR_PX + 14.0)).floor() as usize;
            if fit >= cats.len() {
                (cats.len(), None)
            } else {
                let fit_rotated = (plot_width / 18.0).floor().max(1.0) as usize;
                let height = (longest * 7.0) as u32 + 6;
                (fit_rotated.min(cats.len()), Some(height))
            }
        }
        None => (10, None),
    };

    let mut chart = ChartBuilder::on(area)
        .margin_top(10)
        .margin_right(15)
        .x_label_area_size(rotated.map_or(52, |h| 34 + h))
        .y_label_area_size(72)
        .build_cartesian_2d(prep.x.clone(), prep.y.0..prep.y.1)
        .map_err(render_err)?;

    let cats = prep.categories.clone();
    let category = move |v: f64| -> Option<String> {
        let c = cats.as_ref()?;
        let i = v.round();
        (i >= 0.0 && (i as usize) < c.len())
            .then(|| truncate_middle(&c[i as usize], MAX_CATEGORY_CHARS))
    };
    let x_fmt = |v: &f64| -> String {
        match (&prep.categories, rotated) {
            (Some(_), Some(_)) => String::new(),
            (Some(_), None) => category(*v).unwrap_or_default(),
            (None, _) => fmt_short(*v),
        }
    };
    let y_fmt = |v: &f64| fmt_short(*v);
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(plot.x_label.as_str())
        .y_desc(plot.y_label.as_str())
        .x_labels(x_labels)
        .y_labels(8)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style(tick_font.clone())
        .axis_desc_style(desc_font)
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID_LIGHT)
        .max_light_lines(2)
        .axis_style(BLACK);
    if prep.categories.is_some() {
        // Vertical grid lines through bar groups or category points only add clutter.
        mesh.disable_x_mesh();
    }
    mesh.draw().map_err(render_err)?;

    if rotated.is_some() {
        let font = tick_font
            .transform(FontTransform::Rotate270)
            .pos(Pos::new(HPos::Right, VPos::Center));
        let (bx, by) = area.get_base_pixel();
        for x in prep.x.key_points(x_labels) {
            let Some(label) = category(x) else { continue };
            let (px, py) = chart.backend_coord(&(x, prep.y.0));
            area.draw(&Text::new(label, (px - bx, py - by + 8), font.clone()))
                .map_err(render_err)?;
        }
    }

    let nseries = prep.series.len();
    for (si, pts) in prep.series.iter().enumerate() {
        if pts.is_empty() {
            continue;
        }
        let c = palette(prep.colour[si]);
        let open = open_style(prep.colour[si]);
        match plot.kind {
            PlotKind::Lines => {
                draw_line(&mut chart, pts.iter().map(|p| (p.x, p.y)), c, 2, open)?;
                draw_whiskers(&mut chart, pts.iter().map(|p| (p.x, p.err)), c)?;
                let marker = if open { c.stroke_width(2) } else { c.filled() };
                chart
                    .draw_series(pts.iter().map(|p| Circle::new((p.x, p.y), 4, marker)))
                    .map_err(render_err)?;
            }
            PlotKind::Bars => {
                // Group of width 0.8 around each category index; bar si of nseries inside it.
                let w = 0.8 / nseries as f64;
                let gap = w * 0.08;
                chart
                    .draw_series(pts.iter().map(|p| {
                        let x0 = p.x - 0.4 + si as f64 * w + gap;
                        let x1 = p.x - 0.4 + (si + 1) as f64 * w - gap;
                        let style = if open { c.stroke_width(2) } else { c.filled() };
                        Rectangle::new([(x0, 0.0), (x1, p.y)], style)
                    }))
                    .map_err(render_err)?;
                draw_whiskers(
                    &mut chart,
                    pts.iter()
                        .map(|p| (p.x - 0.4 + (si as f64 + 0.5) * w, p.err)),
                    WHISKER_ON_BARS,
                )?;
            }
            PlotKind::Time => {
                draw_line(&mut chart, pts.iter().map(|p| (p.x, p.y)), c, 1, open)?;
            }
            PlotKind::Cdf => {
                draw_line(&mut chart, cdf_steps(pts), c, 2, open)?;
            }
        }
    }
    Ok(())
}

/// The vertices of a step line through CDF points sorted by x: up from 0 at the first value,
/// then along each fraction to the next value and up to its fraction (2 vertices per point).
fn cdf_steps(pts: &[PlotPoint]) -> Vec<(f64, f64)> {
    let mut v = Vec::with_capacity(pts.len() * 2);
    let mut prev = 0.0;
    for p in pts {
        v.push((p.x, prev));
        v.push((p.x, p.y));
        prev = p.y;
    }
    v
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<XAxis, RangedCoordf64>>;

/// A polyline through `points`: solid, or dashed for the open style.
fn draw_line(
    chart: &mut Chart<'_, '_>,
    points: impl IntoIterator<Item = (f64, f64)>,
    colour: RGBColor,
    width: u32,
    open: bool,
) -> Result<(), PlotError> {
    let style = colour.stroke_width(width);
    if open {
        let pts: Vec<(f64, f64)> = points.into_iter().collect();
        chart
            .draw_series(DashedLineSeries::new(pts, 7, 5, style))
            .map_err(render_err)?;
    } else {
        chart
            .draw_series(LineSeries::new(points, style))
            .map_err(render_err)?;
    }
    Ok(())
}

/// Vertical whiskers with 10 px caps at each `(x, Some((low, high)))`.
fn draw_whiskers(
    chart: &mut Chart<'_, '_>,
    items: impl Iterator<Item = (f64, Option<(f64, f64)>)>,
    colour: RGBColor,
) -> Result<(), PlotError> {
    let style = colour.stroke_width(2);
    for (x, err) in items {
        let Some((lo, hi)) = err else { continue };
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, lo), (x, hi)],
                style,
            )))
            .map_err(render_err)?;
        chart
            .draw_series(
                [lo, hi].into_iter().map(|y| {
                    EmptyElement::at((x, y)) + PathElement::new(vec![(-5, 0), (5, 0)], style)
                }),
            )
            .map_err(render_err)?;
    }
    Ok(())
}

/// The legend panel: a filled swatch and the label per distinct label, top-aligned with the
/// plot area; entries that do not fit are summarised as "+N more".
fn draw_legend(prep: &Prepared<'_>, area: &Area<'_>) -> Result<(), PlotError> {
    let (w, h) = area.dim_in_pixel();
    let font = (FONT, LEGEND_SIZE)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    let room = f64::from(w) - LEGEND_PAD_PX;
    let top = 14;
    let rows = ((h as i32 - top - 60) / LEGEND_ROW_PX).max(1) as usize;
    // A label too long for one line wraps onto more, never cut: a reader
    // must be able to tell every series apart. Entries that do not fit
    // the panel at all are counted in "+N more".
    let entries: Vec<(Vec<String>, usize)> = prep
        .legend
        .iter()
        .map(|(l, ci)| (wrap_px(l, LEGEND_SIZE, room), *ci))
        .collect();
    let mut used = 0;
    let mut shown = 0;
    for (k, (lines, _)) in entries.iter().enumerate() {
        let more = if k + 1 < entries.len() { 1 } else { 0 };
        if used + lines.len() + more > rows {
            break;
        }
        used += lines.len();
        shown += 1;
    }
    let mut row = 0;
    for (lines, ci) in entries.iter().take(shown) {
        let y = top + row * LEGEND_ROW_PX;
        let style = if open_style(*ci) {
            palette(*ci).stroke_width(2)
        } else {
            palette(*ci).filled()
        };
        area.draw(&Rectangle::new([(8, y - 6), (24, y + 6)], style))
            .map_err(render_err)?;
        for line in lines {
            let y = top + row * LEGEND_ROW_PX;
            area.draw(&Text::new(line.clone(), (30, y), font.clone()))
                .map_err(render_err)?;
            row += 1;
        }
    }
    if shown < entries.len() {
        let y = top + row * LEGEND_ROW_PX;
        area.draw(&Text::new(
            format!("+{} more", entries.len() - shown),
            (30, y),
            font.clone(),
        ))
        .map_err(render_err)?;
    }
    Ok(())
}

/// `s` broken into lines of at most `px` pixels at `size`: between the
/// ", "-separated parts of a configuration label first (so a flag stays
/// with its value), between words inside a part that is too long alone;
/// a single word wider than a line is cut in the middle.
fn wrap_px(s: &str, size: f64, px: f64) -> Vec<String> {
    let fits = |t: &str| text_px(t.trim_end(), size) <= px;
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for part in s.split_inclusive(", ") {
        if !line.is_empty() && !fits(&format!("{line}{part}")) {
            lines.push(std::mem::take(&mut line));
        }
        line.push_str(part);
        if fits(&line) {
            continue;
        }
        // A part too long by itself: break it between words.
        let whole = std::mem::take(&mut line);
        for w in whole.split_inclusive(' ') {
            if !line.is_empty() && !fits(&format!("{line}{w}")) {
                lines.push(std::mem::take(&mut line));
            }
            line.push_str(w);
        }
    }
    lines.push(line);
    lines
        .into_iter()
        .map(|l| fit_px(l.trim_end(), size, px))
        .filter(|l| !l.is_empty())
        .collect()
}

/// System fonts, loaded once: text renders where fonts exist and is skipped where none do.
#[cfg(feature = "png")]
fn fontdb() -> Arc<usvg::fontdb::Database> {
    static DB: OnceLock<Arc<usvg::fontdb::Database>> = OnceLock::new();
    DB.get_or_init(|| {
        let mut db = usvg::fontdb::Database::new();
        db.load_system_fonts();
        // fontdb's generic sans-serif is Arial, absent on most Linux systems.
        if db
            .faces()
            .any(|f| f.families.iter().any(|(n, _)| n == "DejaVu Sans"))
        {
            db.set_sans_serif_family("DejaVu Sans");
        }
        Arc::new(db)
    })
    .clone()
}

/// `svg` drawn to pixels with resvg, with the system fonts for text.
#[cfg(feature = "png")]
pub fn rasterize(svg: &str) -> anyhow::Result<Pixmap> {
    use anyhow::Context;
    let opt = usvg::Options {
        fontdb: fontdb(),
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_str(svg, &opt).context("parsing SVG")?;
    let size = tree.size().to_int_size();
    let mut pixmap = Pixmap::new(size.width(), size.height()).context("zero-sized SVG")?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    Ok(pixmap)
}

/// Renders `svg` to a PNG file at `path` (`xferlab report --png`, and
/// tests that look at plots).
#[cfg(feature = "png")]
pub fn svg_to_png(svg: &str, path: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    rasterize(svg)?
        .save_png(path)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// A build without the `png` feature (the lab VM's guest binary) draws
/// no pixels.
#[cfg(not(feature = "png"))]
pub fn svg_to_png(_svg: &str, path: &std::path::Path) -> anyhow::Result<()> {
    anyhow::bail!(
        "cannot draw {}: this xferlab was built without PNG support (cargo feature `png`); leave out --png",
        path.display()
    )
}

#[cfg(all(test, feature = "png"))]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Renders, saves SVG and PNG under $XFERLAB_PLOT_PNG_DIR when set, returns the pixels.
    fn render_and_rasterize(name: &str, plot: &Plot) -> (String, Pixmap) {
        let svg = render_svg(plot).expect("render_svg");
        let pixmap = rasterize(&svg).expect("SVG parses and renders");
        assert_eq!((pixmap.width(), pixmap.height()), (WIDTH, HEIGHT));
        if let Some(dir) = std::env::var_os("XFERLAB_PLOT_PNG_DIR") {
            let dir = std::path::Path::new(&dir);
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(format!("{name}.svg")), &svg).unwrap();
            svg_to_png(&svg, &dir.join(format!("{name}.png"))).unwrap();
        }
        (svg, pixmap)
    }

    /// For looking at a report's plots: renders every `*.svg` in
    /// $XFERLAB_SVG_DIR to a PNG beside it.
    #[test]
    #[ignore = "a tool: XFERLAB_SVG_DIR=DIR cargo test -p xferlab --bin xferlab svg_dir_to_png -- --ignored"]
    fn svg_dir_to_png() {
        let dir = std::env::var_os("XFERLAB_SVG_DIR").expect("set XFERLAB_SVG_DIR");
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "svg") {
                let svg = std::fs::read_to_string(&path).unwrap();
                svg_to_png(&svg, &path.with_extension("png")).unwrap();
            }
        }
    }

    /// Pixels that are not (opaque) white.
    fn non_white(p: &Pixmap) -> usize {
        p.pixels()
            .iter()
            .filter(|c| (c.red(), c.green(), c.blue(), c.alpha()) != (255, 255, 255, 255))
            .count()
    }

    /// Palette indexes with at least a few opaque pixels of exactly that colour (anti-aliased
    /// edges blend with the background and never match exactly).
    fn palette_colours(p: &Pixmap) -> BTreeSet<usize> {
        let mut counts = [0usize; PALETTE.len()];
        for c in p.pixels() {
            if c.alpha() != 255 {
                continue;
            }
            if let Some(i) = PALETTE
                .iter()
                .position(|&rgb| rgb == (c.red(), c.green(), c.blue()))
            {
                counts[i] += 1;
            }
        }
        (0..PALETTE.len()).filter(|&i| counts[i] >= 4).collect()
    }

    fn hex(rgb: (u8, u8, u8)) -> String {
        format!("#{:02X}{:02X}{:02X}", rgb.0, rgb.1, rgb.2)
    }

    fn attr<'a>(element: &'a str, name: &str) -> Option<&'a str> {
        let key = format!(" {name}=\"");
        let start = element.find(&key)? + key.len();
        let len = element[start..].find('"')?;
        Some(&element[start..start + len])
    }

    /// SVG elements `<tag ...>` (plotters writes one per line).
    fn elements<'a>(svg: &'a str, tag: &str) -> Vec<&'a str> {
        let open = format!("<{tag} ");
        svg.lines()
            .filter(|l| l.trim_start().starts_with(&open))
            .collect()
    }

    fn is_palette(colour: Option<&str>) -> bool {
        colour.is_some_and(|c| PALETTE.iter().any(|&rgb| hex(rgb) == c))
    }

    /// Vertices of each polyline stroked in `pred`'s colours.
    fn polylines(svg: &str, pred: impl Fn(Option<&str>) -> bool) -> Vec<Vec<(f64, f64)>> {
        elements(svg, "polyline")
            .into_iter()
            .filter(|e| pred(attr(e, "stroke")))
            .map(|e| {
                attr(e, "points")
                    .unwrap()
                    .split_whitespace()
                    .map(|xy| {
                        let (x, y) = xy.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect()
            })
            .collect()
    }

    fn texts(svg: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut lines = svg.lines();
        while let Some(l) = lines.next() {
            if l.trim_start().starts_with("<text ") {
                out.push(lines.next().unwrap_or("").trim().to_string());
            }
        }
        out
    }

    fn base(kind: PlotKind, series: Vec<Series>) -> Plot {
        Plot {
            title: "test".into(),
            kind,
            x_label: "x (s)".into(),
            y_label: "y (Mbit/s)".into(),
            x_categories: None,
            log_x: false,
            series,
            caption: String::new(),
        }
    }

    fn assert_not_blank(p: &Pixmap) {
        let n = non_white(p);
        let total = (p.width() * p.height()) as usize;
        assert!(n > total / 100, "only {n} of {total} pixels are not white");
    }

    #[test]
    fn lines_show_each_series_point_and_whisker() {
        let series: Vec<Series> = ["cubic", "bbr", "reno & <vegas>"]
            .iter()
            .enumerate()
            .map(|(s, label)| Series {
                label: (*label).into(),
                points: [64.0, 256.0, 1024.0, 4096.0, 16384.0]
                    .iter()
                    .enumerate()
                    .map(|(i, &x)| {
                        let y = 100.0 * (s + 1) as f64 + 150.0 * i as f64;
                        if i % 2 == 0 {
                            PlotPoint::with_err(x, y, y - 40.0, y + 30.0)
                        } else {
                            PlotPoint::new(x, y)
                        }
                    })
                    .collect(),
            })
            .collect();
        let mut plot = base(PlotKind::Lines, series);
        plot.title = "UDP throughput by datagram size & algorithm".into();
        plot.x_label = "datagram size (bytes)".into();
        plot.y_label = "throughput (Mbit/s)".into();
        plot.log_x = true;
        let (svg, px) = render_and_rasterize("lines", &plot);
        assert_not_blank(&px);
        assert_eq!(palette_colours(&px), BTreeSet::from([0, 1, 2]));
        let markers = elements(&svg, "circle")
            .into_iter()
            .filter(|e| is_palette(attr(e, "fill")))
            .count();
        assert_eq!(markers, 15, "one marker per point");
        let two_point = polylines(&svg, is_palette)
            .into_iter()
            .filter(|v| v.len() == 2)
            .collect::<Vec<_>>();
        let vertical = two_point.iter().filter(|v| v[0].0 == v[1].0).count();
        let caps = two_point.iter().filter(|v| v[0].1 == v[1].1).count();
        assert_eq!(
            vertical, 9,
            "one whisker per point with err (3 of 5 in 3 series)"
        );
        assert_eq!(caps, 18, "two caps per whisker");
        let t = texts(&svg);
        assert!(t.contains(&"datagram size (bytes)".to_string()));
        assert!(t.contains(&"throughput (Mbit/s)".to_string()));
        assert!(t.contains(&"reno &amp; &lt;vegas&gt;".to_string()), "{t:?}");
        assert!(t.contains(&"UDP throughput by datagram size &amp; algorithm".to_string()));
        // Log axis ticks: 1-2-5 per decade, short labels.
        assert!(
            t.contains(&"1k".to_string()) && t.contains(&"10k".to_string()),
            "{t:?}"
        );
    }

    #[test]
    fn bars_show_each_series_and_bar() {
        let cats: Vec<String> = ["c2s:1/50", "c2s:4/50", "s2c:1/50"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let series: Vec<Series> = (0..4)
            .map(|s| Series {
                label: format!("{}K buffer", 64 << s),
                points: (0..3)
                    .map(|c| {
                        let y = 200.0 + 90.0 * s as f64 + 40.0 * c as f64;
                        PlotPoint::with_err(c as f64, y, y * 0.9, y * 1.08)
                    })
                    .collect(),
            })
            .collect();
        let mut plot = base(PlotKind::Bars, series);
        plot.title = "Throughput by direction and socket buffer".into();
        plot.x_label = "direction:streams/ms".into();
        plot.y_label = "throughput (Mbit/s)".into();
        plot.x_categories = Some(cats);
        let (svg, px) = render_and_rasterize("bars", &plot);
        assert_not_blank(&px);
        assert_eq!(palette_colours(&px), BTreeSet::from([0, 1, 2, 3]));
        let rects = elements(&svg, "rect")
            .into_iter()
            .filter(|e| is_palette(attr(e, "fill")))
            .count();
        assert_eq!(
            rects,
            12 + 4,
            "one rect per point plus one legend swatch per series"
        );
        let whiskers = polylines(&svg, |c| c == Some(&hex((0x22, 0x22, 0x22))[..]))
            .into_iter()
            .filter(|v| v.len() == 2 && v[0].0 == v[1].0)
            .count();
        assert_eq!(whiskers, 12);
        let t = texts(&svg);
        for c in ["c2s:1/50", "c2s:4/50", "s2c:1/50"] {
            assert_eq!(
                t.iter().filter(|x| *x == c).count(),
                1,
                "category {c}: {t:?}"
            );
        }
    }

    #[test]
    fn bars_without_categories_use_distinct_x() {
        let series = vec![Series {
            label: "a".into(),
            points: vec![PlotPoint::new(1500.0, 3.0), PlotPoint::new(64.0, 5.0)],
        }];
        let (svg, px) = render_and_rasterize("bars_numeric", &base(PlotKind::Bars, series));
        assert_eq!(palette_colours(&px), BTreeSet::from([0]));
        let t = texts(&svg);
        let i64 = t.iter().position(|x| x == "64").expect("64 label");
        let i1500 = t.iter().position(|x| x == "1.5k").expect("1.5k label");
        assert!(i64 < i1500, "categories sorted by x: {t:?}");
    }

    #[test]
    fn time_overlays_runs_coloured_by_config() {
        let mut series = Vec::new();
        for run in 0..6 {
            let config = if run % 2 == 0 { "cubic 64K" } else { "bbr 64K" };
            series.push(Series {
                label: config.into(),
                points: (0..50)
                    .map(|i| {
                        let t = i as f64 * 0.2;
                        let base = if run % 2 == 0 { 900.0 } else { 600.0 };
                        PlotPoint::new(t, base + 40.0 * ((t + run as f64).sin()))
                    })
                    .collect(),
            });
        }
        let mut plot = base(PlotKind::Time, series);
        plot.title = "Throughput over time, 3 runs per configuration".into();
        plot.x_label = "time (s)".into();
        plot.y_label = "throughput (Mbit/s)".into();
        let (svg, px) = render_and_rasterize("time", &plot);
        assert_not_blank(&px);
        assert_eq!(
            palette_colours(&px),
            BTreeSet::from([0, 1]),
            "one colour per config"
        );
        let lines = polylines(&svg, is_palette);
        assert_eq!(lines.len(), 6, "one line per run");
        assert_eq!(
            lines.iter().map(Vec::len).sum::<usize>(),
            300,
            "one vertex per point"
        );
        assert!(elements(&svg, "circle").is_empty(), "no markers");
        let t = texts(&svg);
        assert_eq!(
            t.iter().filter(|x| *x == "cubic 64K").count(),
            1,
            "legend once"
        );
        assert_eq!(
            t.iter().filter(|x| *x == "bbr 64K").count(),
            1,
            "legend once"
        );
        // Runs of one config share its colour.
        let strokes: Vec<&str> = elements(&svg, "polyline")
            .into_iter()
            .filter_map(|e| attr(e, "stroke"))
            .filter(|c| is_palette(Some(c)))
            .collect();
        assert_eq!(strokes[0], strokes[2]);
        assert_eq!(strokes[0], strokes[4]);
        assert_eq!(strokes[1], strokes[3]);
        assert_ne!(strokes[0], strokes[1]);
    }

    #[test]
    fn cdf_draws_steps_per_series() {
        // Deterministic latency samples, 10 µs .. ~2 ms.
        let a: Vec<f64> = (0..500)
            .map(|i| 10.0 + (i as f64 * 0.37).exp() % 2000.0)
            .collect();
        let b: Vec<f64> = (0..300).map(|i| 30.0 + (i * i % 997) as f64).collect();
        let series = vec![
            Series {
                label: "rr 1 flow".into(),
                points: cdf_points(&a, 100),
            },
            Series {
                label: "rr 8 flows".into(),
                points: cdf_points(&b, 100),
            },
        ];
        let n: Vec<usize> = series.iter().map(|s| s.points.len()).collect();
        let mut plot = base(PlotKind::Cdf, series);
        plot.title = "Request-response latency CDF".into();
        plot.x_label = "latency (µs)".into();
        plot.y_label = "fraction of requests".into();
        plot.log_x = true;
        let (svg, px) = render_and_rasterize("cdf", &plot);
        assert_not_blank(&px);
        assert_eq!(palette_colours(&px), BTreeSet::from([0, 1]));
        let lines = polylines(&svg, is_palette);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].len(), 2 * n[0], "two step vertices per point");
        assert_eq!(lines[1].len(), 2 * n[1]);
        // Steps: every other segment is vertical, the others horizontal.
        for w in lines[0].windows(2).step_by(2) {
            assert_eq!(w[0].0, w[1].0);
        }
        assert!(texts(&svg).contains(&"latency (µs)".to_string()));
    }

    #[test]
    fn more_series_than_palette_reuse_colours() {
        let series = (0..12)
            .map(|s| Series {
                label: format!("s{s}"),
                points: vec![
                    PlotPoint::new(0.0, s as f64),
                    PlotPoint::new(1.0, s as f64 + 1.0),
                ],
            })
            .collect();
        let (svg, px) = render_and_rasterize("many", &base(PlotKind::Lines, series));
        assert_eq!(palette_colours(&px).len(), PALETTE.len());
        let circles = elements(&svg, "circle");
        assert_eq!(circles.len(), 24);
        // The two labels past the palette: hollow markers and swatches in reused colours.
        let hollow: Vec<_> = circles
            .iter()
            .filter(|e| attr(e, "fill") == Some("none"))
            .collect();
        assert_eq!(hollow.len(), 4);
        assert_eq!(attr(hollow[0], "stroke"), Some(&hex(PALETTE[0])[..]));
        let outlined = elements(&svg, "rect")
            .into_iter()
            .filter(|e| attr(e, "fill") == Some("none") && is_palette(attr(e, "stroke")))
            .count();
        assert_eq!(outlined, 2);
    }

    #[test]
    fn categorical_lines_label_every_category() {
        let cats: Vec<String> = ["16K", "64K", "256K", "1M", "4M"]
            .map(String::from)
            .to_vec();
        let series = vec![Series {
            label: String::new(),
            points: (0..5)
                .map(|i| PlotPoint::new(i as f64, 10.0 + i as f64))
                .collect(),
        }];
        let mut plot = base(PlotKind::Lines, series);
        plot.x_categories = Some(cats.clone());
        let (svg, px) = render_and_rasterize("lines_categories", &plot);
        assert_eq!(palette_colours(&px), BTreeSet::from([0]));
        let t = texts(&svg);
        for c in &cats {
            assert!(t.contains(c), "{c} missing from {t:?}");
        }
        // Unlabelled single series: no legend swatch.
        assert!(elements(&svg, "rect")
            .iter()
            .all(|e| !is_palette(attr(e, "fill"))));
        // Data far from 0 (10..14): the y axis does not start at 0.
        assert!(!t.contains(&"0".to_string()), "{t:?}");
    }

    #[test]
    fn many_long_categories_are_thinned_not_overlapped() {
        let cats: Vec<String> = (0..24).map(|i| format!("c2s:{i}/50 reno")).collect();
        let series = vec![Series {
            label: "median".into(),
            points: (0..24)
                .map(|i| PlotPoint::new(i as f64, 100.0 + i as f64))
                .collect(),
        }];
        let mut plot = base(PlotKind::Bars, series);
        plot.x_categories = Some(cats.clone());
        let (svg, _) = render_and_rasterize("bars_many_categories", &plot);
        let shown: Vec<&String> = cats.iter().filter(|c| texts(&svg).contains(c)).collect();
        assert_eq!(shown.len(), 24, "all labels, written vertically");
        let vertical = elements(&svg, "text")
            .into_iter()
            .filter(|e| attr(e, "transform").is_some_and(|t| t.starts_with("rotate(270")))
            .count();
        assert_eq!(vertical, 24 + 1, "category labels and the y axis label");
    }

    #[test]
    fn empty_input_is_an_error() {
        let p = base(PlotKind::Lines, vec![]);
        assert!(matches!(render_svg(&p), Err(PlotError::Empty(m)) if m.contains("no series")));
        for kind in [
            PlotKind::Lines,
            PlotKind::Bars,
            PlotKind::Time,
            PlotKind::Cdf,
        ] {
            let p = base(
                kind,
                vec![Series {
                    label: "a".into(),
                    points: vec![],
                }],
            );
            assert!(matches!(render_svg(&p), Err(PlotError::Empty(m)) if m.contains("no points")));
        }
    }

    #[test]
    fn invalid_input_is_an_error() {
        let one = |x: f64, y: f64| {
            vec![Series {
                label: "a".into(),
                points: vec![PlotPoint::new(x, y)],
            }]
        };
        let mut p = base(PlotKind::Lines, one(0.0, 1.0));
        p.log_x = true;
        assert!(matches!(render_svg(&p), Err(PlotError::Invalid(m)) if m.contains("log x")));

        let p = base(PlotKind::Lines, one(f64::NAN, 1.0));
        assert!(matches!(render_svg(&p), Err(PlotError::Invalid(m)) if m.contains("non-finite")));

        let mut p = base(PlotKind::Bars, one(3.0, 1.0));
        p.x_categories = Some(vec!["a".into(), "b".into()]);
        assert!(matches!(render_svg(&p), Err(PlotError::Invalid(m)) if m.contains("categorical")));

        let p = base(PlotKind::Cdf, one(5.0, 50.0));
        assert!(matches!(render_svg(&p), Err(PlotError::Invalid(m)) if m.contains("fraction")));

        let mut p = base(PlotKind::Lines, one(1.0, 1.0));
        p.series[0].points[0].err = Some((f64::NEG_INFINITY, 2.0));
        assert!(matches!(render_svg(&p), Err(PlotError::Invalid(_))));
    }

    #[test]
    fn short_numbers() {
        assert_eq!(fmt_short(0.0), "0");
        assert_eq!(fmt_short(1.0), "1");
        assert_eq!(fmt_short(1000.0), "1k");
        assert_eq!(fmt_short(1500.0), "1.5k");
        assert_eq!(fmt_short(1250.0), "1.25k");
        assert_eq!(fmt_short(10e6), "10M");
        assert_eq!(fmt_short(250e9), "250G");
        assert_eq!(fmt_short(-2e3), "-2k");
        assert_eq!(fmt_short(0.25), "0.25");
        assert_eq!(fmt_short(0.30000000000000004), "0.3");
        assert_eq!(fmt_short(0.001), "0.001");
        assert_eq!(fmt_short(999.0), "999");
        assert_eq!(fmt_short(123.4), "123");
    }

    #[test]
    fn log_ticks_are_1_2_5() {
        assert_eq!(
            log_key_points(1.0, 1000.0, 10),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]
        );
        assert_eq!(
            log_key_points(1.0, 1e6, 10),
            vec![1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]
        );
        assert_eq!(log_key_points(150.0, 450.0, 10), vec![200.0, 300.0, 400.0]);
        assert_eq!(log_key_points(1.0, 1e12, 4), vec![1.0, 1e4, 1e8, 1e12]);
    }

    #[test]
    fn y_range_rules() {
        assert_eq!(y_range(100.0, 200.0, false), (0.0, 210.0));
        let (lo, hi) = y_range(940.0, 960.0, false);
        assert!((lo - 939.0).abs() < 1e-9 && (hi - 961.0).abs() < 1e-9);
        assert_eq!(y_range(940.0, 960.0, true), (0.0, 1008.0));
        assert_eq!(y_range(0.0, 0.0, false), (0.0, 1.0));
        assert_eq!(y_range(-200.0, -100.0, false), (-210.0, 0.0));
    }

    #[test]
    fn cdf_points_are_exact() {
        let p = cdf_points(&[3.0, 1.0, 2.0, 2.0, f64::NAN], 10);
        assert_eq!(
            p,
            vec![
                PlotPoint::new(1.0, 0.25),
                PlotPoint::new(2.0, 0.75),
                PlotPoint::new(3.0, 1.0)
            ]
        );
        let many: Vec<f64> = (1..=1000).map(f64::from).collect();
        let p = cdf_points(&many, 4);
        assert_eq!(
            p.iter().map(|p| (p.x, p.y)).collect::<Vec<_>>(),
            vec![(250.0, 0.25), (500.0, 0.5), (750.0, 0.75), (1000.0, 1.0)]
        );
        assert!(cdf_points(&[], 10).is_empty());
    }

    #[test]
    fn long_legend_labels_wrap_and_extra_entries_are_counted() {
        let series = (0..30)
            .map(|s| Series {
                label: format!(
                    "a very long configuration label number {s} with knobs and more words"
                ),
                points: vec![
                    PlotPoint::new(0.0, s as f64),
                    PlotPoint::new(10.0, 1.0 + s as f64),
                ],
            })
            .collect();
        let mut plot = base(PlotKind::Time, series);
        plot.title = "Thirty runs with long labels".into();
        let (svg, _) = render_and_rasterize("long_legend", &plot);
        let t = texts(&svg);
        assert!(
            t.iter().any(|x| x.starts_with('+') && x.ends_with("more")),
            "{t:?}"
        );
        // Wrapped whole: no cut, and the distinguishing end is on a line
        // of its own.
        assert!(!t.iter().any(|x| x.contains('…')), "{t:?}");
        assert!(t.iter().any(|x| x.starts_with("a very long")), "{t:?}");
        assert!(t.iter().any(|x| x.ends_with("more words")), "{t:?}");
        let lines = wrap_px(
            "command dummy_hcd, --load cpu=1,mem=1,vm-bytes=64M",
            LEGEND_SIZE,
            264.0,
        );
        assert_eq!(
            lines,
            ["command dummy_hcd,", "--load cpu=1,mem=1,vm-bytes=64M"]
        );
        assert_eq!(wrap_px("short", LEGEND_SIZE, 264.0), ["short"]);
    }

    /// Legend text is sized from the font's advance widths: within 3 % of what rsvg-convert
    /// draws with DejaVu Sans at the legend's 12.9 px, and cut in the middle to fit.
    #[test]
    fn text_widths_follow_the_measured_font() {
        for (s, px) in [
            ("command dummy_hcd, --load off", 214.0),
            ("command dummy_hcd, --load cpu=1,mem=1,vm-bytes=64M", 397.0),
            ("command dummy_h…1,vm-bytes=64M", 255.0),
            ("abcdefghijklmnopqrstuvwxyz", 188.0),
            ("--dir rx, -l 4K, --host-buffer 32K", 198.0),
        ] {
            let est = text_px(s, LEGEND_SIZE);
            assert!((est - px).abs() <= 0.03 * px, "{s}: {est} against {px}");
        }
        let long = "command dummy_hcd, --load cpu=1,mem=1,vm-bytes=64M";
        let cut = fit_px(long, LEGEND_SIZE, 264.0);
        assert!(text_px(&cut, LEGEND_SIZE) <= 264.0, "{cut}");
        assert!(cut.contains('…') && cut.ends_with("64M"), "{cut}");
        assert_eq!(fit_px("short", LEGEND_SIZE, 264.0), "short");
    }
}
