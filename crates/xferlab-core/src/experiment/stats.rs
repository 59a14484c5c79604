//! Statistics over repeated measurements: the summary of one point of an
//! experiment (n, min, median, max, mean, sample standard deviation, 95 %
//! confidence interval of the mean) and Welch's two-sample t-test behind
//! `xferlab compare`.
//!
//! Why these choices:
//!
//! * **Student's t, not the normal approximation.** Experiments repeat a
//!   point a handful of times (3–10); with n = 5 the 97.5 % quantile is
//!   2.776, not 1.96, and using 1.96 would make intervals ~30 % too narrow.
//!   Quantiles and p-values come from `statrs` (`StudentsT`).
//! * **Welch, not the pooled-variance t-test.** Two configurations of a
//!   network stack rarely have the same spread (a tuned one is often both
//!   faster and steadier), and Welch's test does not assume they do. It
//!   loses almost nothing when the variances are in fact equal.
//! * **Non-finite values are ignored.** A `NaN` (or ±∞) in a metric column
//!   means "not measured" or a division by zero upstream, never a
//!   measurement; letting one in would turn every figure into `NaN`.
//!   [`Summary::n`] and [`Comparison::n_a`]/[`Comparison::n_b`] count only
//!   the finite values actually used.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Which figure of a [`Summary`] stands for a point in tables and plots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Aggregate {
    Min,
    Median,
    Max,
    Mean,
}

impl Aggregate {
    /// Every aggregate, in the order the error message lists them.
    pub const ALL: [Aggregate; 4] = [
        Aggregate::Min,
        Aggregate::Median,
        Aggregate::Max,
        Aggregate::Mean,
    ];

    /// The word used in scenarios and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Aggregate::Min => "min",
            Aggregate::Median => "median",
            Aggregate::Max => "max",
            Aggregate::Mean => "mean",
        }
    }
}

impl fmt::Display for Aggregate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An aggregate word that is not one of [`Aggregate::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown aggregate `{0}`; use one of: min, median, max, mean")]
pub struct ParseAggregateError(pub String);

impl FromStr for Aggregate {
    type Err = ParseAggregateError;

    /// Accepts the lower-case words (surrounding blanks and case ignored).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let word = s.trim().to_ascii_lowercase();
        Aggregate::ALL
            .into_iter()
            .find(|a| a.as_str() == word)
            .ok_or_else(|| ParseAggregateError(s.to_string()))
    }
}

/// The repeats of one point summarized.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Finite values summarized.
    pub n: usize,
    pub min: f64,
    /// Middle value; the mean of the two middle values for even `n`.
    pub median: f64,
    pub max: f64,
    pub mean: f64,
    /// Sample standard deviation (divisor n − 1); 0 for n = 1.
    pub stddev: f64,
    /// 95 % confidence interval of the mean, mean ± t(0.975, n−1)·s/√n;
    /// `None` for n < 2 (nothing to estimate a spread from).
    pub ci95: Option<(f64, f64)>,
}

impl Summary {
    /// The figure an [`Aggregate`] names.
    pub fn get(&self, a: Aggregate) -> f64 {
        match a {
            Aggregate::Min => self.min,
            Aggregate::Median => self.median,
            Aggregate::Max => self.max,
            Aggregate::Mean => self.mean,
        }
    }

    /// Half the width of [`Summary::ci95`] (the "± x" of a table), `None`
    /// for n < 2.
    pub fn ci95_half_width(&self) -> Option<f64> {
        self.ci95.map(|(lo, hi)| (hi - lo) / 2.0)
    }
}

/// The finite values of a sample, in order.
fn finite(values: &[f64]) -> Vec<f64> {
    values.iter().copied().filter(|v| v.is_finite()).collect()
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Sample variance (divisor n − 1); 0 for fewer than two values.
fn variance(v: &[f64], mean: f64) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (v.len() - 1) as f64
}

/// The 97.5 % quantile of the standard normal distribution.
const Z975: f64 = 1.959_963_984_540_054;

/// Degrees of freedom above which t is the normal distribution to far
/// better than the figures shown (the difference is ~1e-6 at 1e6).
const DF_NORMAL: f64 = 1e6;

/// The 97.5 % quantile of Student's t with `df` degrees of freedom
/// (the factor of a two-sided 95 % interval).
///
/// Very large (or infinite) `df` use the normal quantile directly: statrs'
/// `inverse_cdf` goes through the inverse incomplete beta function with
/// `a = df / 2`, which does not terminate for `df = ∞`.
fn t975(df: f64) -> f64 {
    if df > DF_NORMAL {
        return Z975;
    }
    match StudentsT::new(0.0, 1.0, df) {
        Ok(t) => t.inverse_cdf(0.975),
        // Only a non-positive or NaN df gets here, which the callers rule
        // out; NaN keeps such a bug visible instead of inventing a width.
        Err(_) => f64::NAN,
    }
}

/// Two-sided p-value of a t statistic with `df` degrees of freedom.
fn two_sided_p(t: f64, df: f64) -> f64 {
    match StudentsT::new(0.0, 1.0, df) {
        Ok(dist) => (2.0 * dist.sf(t.abs())).clamp(0.0, 1.0),
        Err(_) => f64::NAN,
    }
}

/// Summarizes a sample; `None` when it holds no finite value. Non-finite
/// values (`NaN`, ±∞) are left out (see the module docs).
pub fn summarize(values: &[f64]) -> Option<Summary> {
    let mut v = finite(values);
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    let m = mean(&v);
    let stddev = variance(&v, m).sqrt();
    let ci95 = (n >= 2).then(|| {
        let half = t975((n - 1) as f64) * stddev / (n as f64).sqrt();
        (m - half, m + half)
    });
    Some(Summary {
        n,
        min: v[0],
        median,
        max: v[n - 1],
        mean: m,
        stddev,
        ci95,
    })
}

/// Welch's two-sample t-test of B against A.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Finite values used from each sample.
    pub n_a: usize,
    pub n_b: usize,
    pub mean_a: f64,
    pub mean_b: f64,
    /// `mean_b − mean_a`: positive when B is higher.
    pub diff: f64,
    /// `diff / mean_a`; `None` when `mean_a` is 0.
    pub rel: Option<f64>,
    /// 95 % confidence interval of `diff`.
    pub ci95: (f64, f64),
    /// Welch's t statistic, `diff / √(s_a²/n_a + s_b²/n_b)`; ±∞ when both
    /// samples are constant and differ (see [`welch`]).
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// `p < 0.05`.
    pub significant: bool,
}

/// Significance level of [`Comparison::significant`].
pub const ALPHA: f64 = 0.05;

/// Welch's t-test of `b` against `a`; `None` if either sample has fewer
/// than two finite values (no variance to test with).
///
/// Zero variance in **both** samples (each a constant, as counts such as
/// `retransmits = 0` often are) leaves the standard error at 0, where the
/// t statistic is undefined. The convention here: equal means give t = 0,
/// p = 1 and the interval (0, 0) — no evidence of a difference; different
/// means give t = ±∞, p = 0 and the interval (diff, diff) — every repeat
/// of B differs from every repeat of A by exactly `diff`, which is as
/// certain as repeated measurement gets. `df` is then `n_a + n_b − 2`
/// (the Welch–Satterthwaite formula is 0/0). When only one sample is
/// constant the ordinary formulas apply.
pub fn welch(a: &[f64], b: &[f64]) -> Option<Comparison> {
    let a = finite(a);
    let b = finite(b);
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (mean_a, mean_b) = (mean(&a), mean(&b));
    let (qa, qb) = (variance(&a, mean_a) / na, variance(&b, mean_b) / nb);
    let se2 = qa + qb;
    let diff = mean_b - mean_a;
    let rel = (mean_a != 0.0).then(|| diff / mean_a);
    let (t, df, p, ci95) = if se2 > 0.0 {
        let se = se2.sqrt();
        let df = se2 * se2 / (qa * qa / (na - 1.0) + qb * qb / (nb - 1.0));
        let t = diff / se;
        let half = t975(df) * se;
        (t, df, two_sided_p(t, df), (diff - half, diff + half))
    } else {
        let df = na + nb - 2.0;
        if diff == 0.0 {
            (0.0, df, 1.0, (0.0, 0.0))
        } else {
            (f64::INFINITY.copysign(diff), df, 0.0, (diff, diff))
        }
    };
    Some(Comparison {
        n_a: a.len(),
        n_b: b.len(),
        mean_a,
        mean_b,
        diff,
        rel,
        ci95,
        t,
        df,
        p,
        significant: p < ALPHA,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-300)
    }

    #[track_caller]
    fn assert_close(got: f64, want: f64, rel_tol: f64) {
        assert!(close(got, want, rel_tol), "got {got}, want {want}");
    }

    #[test]
    fn t_quantiles_match_tables() {
        // Reference values: qt(0.975, df) in R.
        assert_close(t975(1.0), 12.706_204_736, 1e-7);
        assert_close(t975(4.0), 2.776_445_105, 1e-8);
        assert_close(t975(9.0), 2.262_157_163, 1e-8);
        assert_close(t975(30.0), 2.042_272_456, 1e-8);
        assert_close(t975(f64::INFINITY), 1.959_963_985, 1e-8);
    }

    #[test]
    fn aggregate_words_round_trip_and_bad_words_list_the_valid_ones() {
        for a in Aggregate::ALL {
            assert_eq!(a.as_str().parse::<Aggregate>().unwrap(), a);
            assert_eq!(serde_json::to_value(a).unwrap(), a.as_str());
        }
        assert_eq!(" Median ".parse::<Aggregate>().unwrap(), Aggregate::Median);
        let err = "avg".parse::<Aggregate>().unwrap_err().to_string();
        assert!(err.contains("`avg`"), "{err}");
        assert!(err.contains("min, median, max, mean"), "{err}");
    }

    #[test]
    fn summary_of_a_known_sample() {
        // mean 5, s = sqrt(32/7) = 2.13809; t(0.975, 7) = 2.364624.
        let s = summarize(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(s.n, 8);
        assert_eq!((s.min, s.median, s.max, s.mean), (2.0, 4.5, 9.0, 5.0));
        assert_close(s.stddev, 2.138_089_935, 1e-9);
        let (lo, hi) = s.ci95.unwrap();
        assert_close(lo, 3.212_512_082, 1e-8);
        assert_close(hi, 6.787_487_918, 1e-8);
        assert_close(s.ci95_half_width().unwrap(), 1.787_487_918, 1e-8);
        assert_eq!(s.get(Aggregate::Median), 4.5);
        assert_eq!(s.get(Aggregate::Max), 9.0);
    }

    #[test]
    fn summary_odd_n_unsorted_and_single_value() {
        let s = summarize(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.min, s.median, s.max, s.mean), (1.0, 2.0, 3.0, 2.0));
        // s = 1, t(0.975, 2) = 4.302653 -> half width 4.302653 / sqrt(3).
        assert_close(
            s.ci95_half_width().unwrap(),
            4.302_652_730 / 3f64.sqrt(),
            1e-8,
        );

        let one = summarize(&[42.0]).unwrap();
        assert_eq!(one.n, 1);
        assert_eq!(one.stddev, 0.0);
        assert_eq!(one.ci95, None);
        assert_eq!(one.get(Aggregate::Min), 42.0);
    }

    #[test]
    fn summary_ignores_non_finite_values_and_is_none_when_empty() {
        assert_eq!(summarize(&[]), None);
        assert_eq!(summarize(&[f64::NAN, f64::INFINITY]), None);
        let s = summarize(&[1.0, f64::NAN, 3.0, f64::NEG_INFINITY]).unwrap();
        assert_eq!((s.n, s.mean, s.median), (2, 2.0, 2.0));
    }

    #[test]
    fn constant_sample_has_a_zero_width_interval() {
        let s = summarize(&[7.0; 5]).unwrap();
        assert_eq!(s.stddev, 0.0);
        assert_eq!(s.ci95, Some((7.0, 7.0)));
    }

    #[test]
    fn welch_matches_r_on_the_sleep_data() {
        // R: t.test(extra ~ group, data = sleep)
        //   t = -1.8608, df = 17.776, p-value = 0.07939
        //   95 percent confidence interval: -3.3654832  0.2054832
        // R reports group1 - group2; here diff = b - a, so signs flip.
        let g1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0];
        let g2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4];
        let c = welch(&g1, &g2).unwrap();
        assert_eq!((c.n_a, c.n_b), (10, 10));
        assert_close(c.mean_a, 0.75, 1e-12);
        assert_close(c.mean_b, 2.33, 1e-12);
        assert_close(c.diff, 1.58, 1e-12);
        assert_close(c.rel.unwrap(), 1.58 / 0.75, 1e-12);
        assert_close(c.t, 1.860_813_467, 1e-8);
        assert_close(c.df, 17.776_473_516, 1e-8);
        assert_close(c.p, 0.079_394_140, 1e-6);
        assert_close(c.ci95.0, -0.205_483_231, 1e-6);
        assert_close(c.ci95.1, 3.365_483_231, 1e-7);
        assert!(!c.significant);
    }

    #[test]
    fn welch_unequal_sizes_and_variances() {
        // Reference computed with mpmath (incomplete beta, 30 digits).
        let a = [10.1, 9.8, 10.3, 10.0];
        let b = [11.2, 10.9, 11.8, 11.0, 11.5, 10.7];
        let c = welch(&a, &b).unwrap();
        assert_close(c.t, 5.780_173_408, 1e-8);
        assert_close(c.df, 7.714_057_426, 1e-8);
        assert_close(c.p, 0.000_474_401_716, 1e-6);
        assert_close(c.ci95.0, 0.678_255_249, 1e-7);
        assert_close(c.ci95.1, 1.588_411_418, 1e-7);
        assert!(c.significant);

        // Swapping the samples flips the sign and keeps p.
        let r = welch(&b, &a).unwrap();
        assert_close(r.t, -5.780_173_408, 1e-8);
        assert_close(r.p, c.p, 1e-12);
        assert_close(r.ci95.0, -1.588_411_418, 1e-7);
    }

    #[test]
    fn welch_needs_two_values_per_sample() {
        assert_eq!(welch(&[1.0], &[1.0, 2.0]), None);
        assert_eq!(welch(&[1.0, 2.0], &[]), None);
        assert_eq!(welch(&[1.0, f64::NAN], &[1.0, 2.0]), None);
    }

    #[test]
    fn welch_zero_variance_conventions() {
        let same = welch(&[0.0, 0.0, 0.0], &[0.0, 0.0]).unwrap();
        assert_eq!((same.t, same.p, same.ci95), (0.0, 1.0, (0.0, 0.0)));
        assert_eq!(same.df, 3.0);
        assert_eq!(same.rel, None);
        assert!(!same.significant);

        let differ = welch(&[5.0, 5.0], &[3.0, 3.0, 3.0]).unwrap();
        assert_eq!(differ.t, f64::NEG_INFINITY);
        assert_eq!(differ.p, 0.0);
        assert_eq!(differ.ci95, (-2.0, -2.0));
        assert_eq!(differ.rel, Some(-0.4));
        assert!(differ.significant);

        // One constant sample: the ordinary formulas, df = n_b - 1.
        let one = welch(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]).unwrap();
        assert_close(one.df, 2.0, 1e-12);
        assert_close(one.t, 1.0 / (1.0f64 / 3.0).sqrt(), 1e-12);
    }
}
