//! `xferlab cbr` and `xferlab sweep`: the series verbs' flags on top of
//! the stream flags, and their range syntax (`FROM:TO:STEP`,
//! `LOW:HIGH[:RES]`).

use clap::Args;
use xferlab_core::units::parse_rate;

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

/// Parses `FROM:TO:STEP` into the values from FROM up to TO inclusive.
pub fn parse_steps(
    flag: &str,
    s: &str,
    parse: impl Fn(&str) -> Result<f64, String>,
) -> Result<Vec<f64>, String> {
    let help = || format!("{flag} takes FROM:TO:STEP with FROM <= TO and STEP > 0 (got '{s}')");
    let parts: Vec<&str> = s.split(':').collect();
    let [from, to, step] = parts[..] else {
        return Err(help());
    };
    let (from, to, step) = (parse(from)?, parse(to)?, parse(step)?);
    if !(from <= to && step > 0.0 && from >= 0.0) {
        return Err(help());
    }
    let n = ((to - from) / step + 1e-9).floor() as usize + 1;
    if n > 1000 {
        return Err(format!("{flag}: {n} points is too many (at most 1000)"));
    }
    Ok((0..n).map(|i| from + i as f64 * step).collect())
}

/// Parses `LOW:HIGH[:RES]` rates for `--search`.
pub fn parse_search(s: &str) -> Result<(u64, u64, u64), String> {
    let help = || format!("--search takes LOW:HIGH[:RESOLUTION] rates with LOW < HIGH (got '{s}')");
    let parts: Vec<&str> = s.split(':').collect();
    let rate = |r| parse_rate(r).map_err(|e| e.to_string());
    let (low, high, res) = match parts[..] {
        [l, h] => (rate(l)?, rate(h)?, None),
        [l, h, r] => (rate(l)?, rate(h)?, Some(rate(r)?)),
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
            .contains("FROM <= TO"));
        assert!(parse_steps("--size", "1:9", num).is_err());
        assert!(parse_steps("--size", "0:1000000:1", num)
            .unwrap_err()
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
