//! `xferlab cbr` and `xferlab sweep`: the series verbs' flags on top of
//! the stream flags, and their range syntax (`FROM:TO:STEP`,
//! `LOW:HIGH[:RES]`).

use clap::Args;
use xferlab_core::units::{parse_rate, UnitError};

use super::stream::StreamArgs;

#[derive(Debug, Args)]
pub struct CbrArgs {
    #[command(flatten)]
    pub stream: StreamArgs,
    /// Rates to try in ascending order, comma separated (e.g.
    /// 128M,146.4M,170.4M); the series stops at the first one not
    /// sustained.
    #[arg(long, value_delimiter = ',', value_parser = parse_rate, value_name = "RATES", conflicts_with = "search")]
    pub ladder: Vec<u64>,
    /// Bisect between LOW:HIGH[:RESOLUTION] (bit/s, k/M/G suffixes;
    /// default resolution 1 % of HIGH).
    #[arg(long, value_name = "LOW:HIGH[:RES]")]
    pub search: Option<String>,
    /// Runs of the whole ladder or search; max and median are reported.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeat: u32,
    /// Largest datagram loss, in percent, still counted as sustained.
    #[arg(long, default_value_t = 0.0, value_name = "PERCENT")]
    pub max_loss: f64,
    /// Largest number of receive-buffer overruns (host drops) allowed.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub max_host_drops: u64,
    /// Largest share, in percent, of datagrams sent more than 1 ms late
    /// (sender underruns) allowed.
    #[arg(long, default_value_t = 0.0, value_name = "PERCENT")]
    pub max_late: f64,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub stream: StreamArgs,
    /// Datagram sizes FROM:TO:STEP in bytes, at the -b rate.
    #[arg(
        long = "size",
        value_name = "FROM:TO:STEP",
        conflicts_with = "spacing",
        required_unless_present = "spacing"
    )]
    pub sizes: Option<String>,
    /// Microseconds between datagrams FROM:TO:STEP (0 = back to back), at
    /// the -l size.
    #[arg(long, value_name = "FROM:TO:STEP")]
    pub spacing: Option<String>,
}

impl SweepArgs {
    /// The axis `--size` or `--spacing` asks for.
    pub fn axis(&self) -> anyhow::Result<crate::series::SweepAxis> {
        use crate::series::SweepAxis;
        match (&self.sizes, &self.spacing) {
            (Some(s), _) => parse_steps("--size", s, |v| {
                xferlab_core::units::parse_size(v)
                    .map(|b| b as f64)
                    .map_err(|e| e.to_string())
            })
            .map(|v| SweepAxis::Size(v.into_iter().map(|b| b as u64).collect()))
            .map_err(anyhow::Error::from),
            (None, Some(s)) => parse_steps("--spacing", s, |v| {
                v.parse::<f64>()
                    .map_err(|_| format!("'{v}' is not a number of microseconds"))
            })
            .map(SweepAxis::Spacing)
            .map_err(anyhow::Error::from),
            (None, None) => Err(anyhow::anyhow!("sweep needs --size or --spacing")),
        }
    }
}

/// A range flag of `sweep` or `cbr` that does not parse: the one line printed.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum RangeError {
    #[error("{flag} takes FROM:TO:STEP with FROM <= TO and STEP > 0 (got '{got}')")]
    Steps { flag: String, got: String },
    /// One of the values: the value parser's own line.
    #[error("{0}")]
    Value(String),
    #[error("{flag}: {n} points is too many (at most 1000)")]
    TooMany { flag: String, n: usize },
    #[error("--search takes LOW:HIGH[:RESOLUTION] rates with LOW < HIGH (got '{0}')")]
    Search(String),
    #[error(transparent)]
    Rate(#[from] UnitError),
}

/// Parses `FROM:TO:STEP` into the values from FROM up to TO inclusive.
pub fn parse_steps<E: std::fmt::Display>(
    flag: &str,
    s: &str,
    parse: impl Fn(&str) -> Result<f64, E>,
) -> Result<Vec<f64>, RangeError> {
    let help = || RangeError::Steps {
        flag: flag.to_string(),
        got: s.to_string(),
    };
    let parts: Vec<&str> = s.split(':').collect();
    let [from, to, step] = parts[..] else {
        return Err(help());
    };
    let value = |v| parse(v).map_err(|e| RangeError::Value(e.to_string()));
    let (from, to, step) = (value(from)?, value(to)?, value(step)?);
    if !(from <= to && step > 0.0 && from >= 0.0) {
        return Err(help());
    }
    let n = ((to - from) / step + 1e-9).floor() as usize + 1;
    if n > 1000 {
        return Err(RangeError::TooMany {
            flag: flag.to_string(),
            n,
        });
    }
    Ok((0..n).map(|i| from + i as f64 * step).collect())
}

/// Parses `LOW:HIGH[:RES]` rates for `--search`.
pub fn parse_search(s: &str) -> Result<(u64, u64, u64), RangeError> {
    let help = || RangeError::Search(s.to_string());
    let parts: Vec<&str> = s.split(':').collect();
    let (low, high, res) = match parts[..] {
        [l, h] => (parse_rate(l)?, parse_rate(h)?, None),
        [l, h, r] => (parse_rate(l)?, parse_rate(h)?, Some(parse_rate(r)?)),
        _ => return Err(help()),
    };
    if low >= high {
        return Err(help());
    }
    Ok((low, high, res.unwrap_or((high / 100).max(1))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_and_search_ranges() {
        let num = |v: &str| v.parse::<f64>().map_err(|e| e.to_string());
        assert_eq!(
            parse_steps("--spacing", "0:20:10", num),
            Ok(vec![0.0, 10.0, 20.0])
        );
        assert_eq!(parse_steps("--spacing", "5:6:2", num), Ok(vec![5.0]));
        assert!(parse_steps("--size", "9:1:1", num)
            .unwrap_err()
            .to_string()
            .contains("FROM <= TO"));
        assert!(parse_steps("--size", "1:9", num).is_err());
        assert!(parse_steps("--size", "0:1000000:1", num)
            .unwrap_err()
            .to_string()
            .contains("too many"));
        assert_eq!(
            parse_search("100M:1G"),
            Ok((100_000_000, 1_000_000_000, 10_000_000))
        );
        assert_eq!(parse_search("1M:2M:5k"), Ok((1_000_000, 2_000_000, 5_000)));
        assert!(parse_search("2G:1G").is_err());
        assert!(parse_search("1G").is_err());
    }
}
