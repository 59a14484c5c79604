//! Numbers with units, both ways: parsing command-line values and writing
//! figures a person reads at a glance.
//!
//! Sizes (`-l`, `-w`, `-n`) use binary multipliers as iperf3 does
//! (`128K` = 131072); rates (`--fq-rate`) use decimal ones (`100M` = 1e8
//! bit/s).

use std::fmt;

/// Parses `128K`, `1.5M`, `4096`, `2G` (K/M/G/T = 2^10/2^20/2^30/2^40; an
/// optional `B`, `iB` suffix is accepted).
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let bad = || UnitError::Size(s.to_owned());
    let (num, mult) = split_suffix(s, 1024.0).ok_or_else(bad)?;
    let v = num * mult;
    if !(v.is_finite() && (0.0..1.8e19).contains(&v)) || v.fract() != 0.0 && mult == 1.0 {
        return Err(bad());
    }
    Ok(v.round() as u64)
}

/// A value that is not the size, rate, duration or unit asked for; the
/// message quotes it and shows the accepted spelling.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("'{0}' is not a size: use a whole number of bytes with an optional K, M, G or T suffix (binary: 128K = 131072)")]
    Size(String),
    #[error("'{0}' is not a rate: use bits per second with an optional k, M, G or T suffix (decimal: 100M = 100000000)")]
    Rate(String),
    #[error("'{0}' is not a duration: use seconds (10, 2.5) or a unit (500ms, 3s, 2m, 1h)")]
    Duration(String),
    #[error("'{0}' is not a unit: use k, m, g, t (bit/s), K, M, G, T (bytes/s), b (auto bits) or B (auto bytes)")]
    RateUnit(String),
    #[error("--gap is microseconds between datagrams, 0 to 10000000 (got {0})")]
    Gap(String),
}

/// The rate that spaces datagrams of `size` bytes `us` microseconds apart
/// (None: back to back), as `sweep --spacing` and `--gap` compute it.
pub fn gap_rate(size: u64, us: f64) -> Result<Option<u64>, UnitError> {
    if !(us.is_finite() && (0.0..=10_000_000.0).contains(&us)) {
        return Err(UnitError::Gap(us.to_string()));
    }
    Ok((us > 0.0).then(|| ((size as f64 * 8.0 / (us * 1e-6)).round() as u64).max(1)))
}

/// Parses a rate in bit/s: `100M`, `2.5G`, `800k` (k/M/G/T = 10^3/10^6/10^9/10^12).
pub fn parse_rate(s: &str) -> Result<u64, UnitError> {
    let help = || UnitError::Rate(s.to_owned());
    let (num, mult) = split_suffix(s, 1000.0).ok_or_else(help)?;
    let v = num * mult;
    if !(v.is_finite() && (0.0..1.8e19).contains(&v)) {
        return Err(help());
    }
    Ok(v.round() as u64)
}

/// Parses seconds: `10`, `2.5`, `500ms`, `3s`, `2m`, `1h`. Negative values
/// parse (so the caller can say why they are wrong).
pub fn parse_seconds(s: &str) -> Result<f64, UnitError> {
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v * mult),
        _ => Err(UnitError::Duration(s.to_owned())),
    }
}

fn split_suffix(s: &str, base: f64) -> Option<(f64, f64)> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let t = t
        .strip_suffix("bit")
        .or_else(|| t.strip_suffix("bps"))
        .unwrap_or(t);
    let (digits, mult) = match t.chars().last()? {
        'k' | 'K' => (&t[..t.len() - 1], base),
        'm' | 'M' => (&t[..t.len() - 1], base.powi(2)),
        'g' | 'G' => (&t[..t.len() - 1], base.powi(3)),
        't' | 'T' => (&t[..t.len() - 1], base.powi(4)),
        _ => (t, 1.0),
    };
    let num: f64 = digits.parse().ok()?;
    Some((num, mult))
}

/// How rates are written in human output (iperf3's `-f`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RateUnit {
    /// bit/s, scaled to Kbit/Mbit/Gbit.
    #[default]
    AutoBits,
    /// bytes/s, scaled to KB/MB/GB (binary, as iperf3).
    AutoBytes,
    Fixed {
        bytes: bool,
        prefix: char,
    },
}

impl RateUnit {
    /// iperf3's `-f` letters: k m g t (bits), K M G T (bytes), plus `b`/`B`
    /// for automatic bits/bytes.
    pub fn parse(s: &str) -> Result<Self, UnitError> {
        match s {
            "b" | "bits" | "auto" => Ok(RateUnit::AutoBits),
            "B" | "bytes" => Ok(RateUnit::AutoBytes),
            "k" | "m" | "g" | "t" => Ok(RateUnit::Fixed {
                bytes: false,
                prefix: s.chars().next().unwrap(),
            }),
            "K" | "M" | "G" | "T" => Ok(RateUnit::Fixed {
                bytes: true,
                prefix: s.chars().next().unwrap(),
            }),
            _ => Err(UnitError::RateUnit(s.to_owned())),
        }
    }

    pub fn format_rate(self, bits_per_second: f64) -> String {
        match self {
            RateUnit::AutoBits => scaled(bits_per_second, 1000.0, None, "bits/sec"),
            RateUnit::AutoBytes => scaled(bits_per_second / 8.0, 1024.0, None, "Bytes/sec"),
            RateUnit::Fixed {
                bytes: false,
                prefix,
            } => scaled(bits_per_second, 1000.0, Some(prefix), "bits/sec"),
            RateUnit::Fixed {
                bytes: true,
                prefix,
            } => scaled(bits_per_second / 8.0, 1024.0, Some(prefix), "Bytes/sec"),
        }
    }
}

/// A byte count as iperf3 writes transfers: `23.4 GBytes` (binary).
pub fn format_bytes(bytes: u64) -> String {
    scaled(bytes as f64, 1024.0, None, "Bytes")
}

fn scaled(v: f64, base: f64, fixed: Option<char>, unit: &str) -> String {
    const PREFIXES: [&str; 5] = ["", "K", "M", "G", "T"];
    let exp = match fixed {
        Some(p) => "kmgt".find(p.to_ascii_lowercase()).map_or(0, |i| i + 1),
        None => {
            let mut e = 0;
            let mut x = v.abs();
            while x >= base && e < PREFIXES.len() - 1 {
                x /= base;
                e += 1;
            }
            e
        }
    };
    let x = v / base.powi(exp as i32);
    // Decided on the value as it will print, so 99.96 reads "100", not
    // "100.0" next to a neighbouring "100".
    let digits = if x.abs() >= 99.95 {
        0
    } else if x.abs() >= 9.995 {
        1
    } else {
        2
    };
    format!("{x:.digits$} {}{unit}", PREFIXES[exp])
}

/// Microseconds as `12 us`, `3.4 ms`.
pub struct Micros(pub u64);

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= 10_000 {
            write!(f, "{:.1} ms", self.0 as f64 / 1000.0)
        } else {
            write!(f, "{} us", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_binary_rates_decimal() {
        assert_eq!(parse_size("128K"), Ok(131072));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1.5K"), Ok(1536));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert!(parse_size("10X").is_err());
        assert!(parse_size("-5").is_err());
        assert!(parse_size("").is_err());
        assert_eq!(parse_rate("100M"), Ok(100_000_000));
        assert_eq!(parse_rate("2.5G"), Ok(2_500_000_000));
        assert!(parse_rate("10X")
            .unwrap_err()
            .to_string()
            .contains("not a rate"));
    }

    #[test]
    fn a_gap_is_the_rate_that_spaces_datagrams() {
        // 1250 bytes every 100 us: 100 Mbit/s; no gap: back to back.
        assert_eq!(gap_rate(1250, 100.0), Ok(Some(100_000_000)));
        assert_eq!(gap_rate(1250, 0.0), Ok(None));
        // Never a zero rate, however long the gap.
        assert_eq!(gap_rate(1, 10_000_000.0), Ok(Some(1)));
        for bad in [-1.0, f64::NAN, f64::INFINITY, 10_000_001.0] {
            let e = gap_rate(1250, bad).unwrap_err().to_string();
            assert!(
                e.starts_with("--gap is microseconds between datagrams"),
                "{e}"
            );
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_seconds("10"), Ok(10.0));
        assert_eq!(parse_seconds("500ms"), Ok(0.5));
        assert_eq!(parse_seconds("2m"), Ok(120.0));
        assert_eq!(parse_seconds("-1"), Ok(-1.0));
        assert!(parse_seconds("soon").is_err());
        assert!(parse_seconds("inf").is_err());
    }

    #[test]
    fn formatting_reads_like_iperf3() {
        assert_eq!(RateUnit::AutoBits.format_rate(20.9e9), "20.9 Gbits/sec");
        assert_eq!(RateUnit::AutoBits.format_rate(941.0e6), "941 Mbits/sec");
        assert_eq!(RateUnit::AutoBits.format_rate(99.96e6), "100 Mbits/sec");
        assert_eq!(RateUnit::AutoBits.format_rate(9.996e6), "10.0 Mbits/sec");
        assert_eq!(
            RateUnit::AutoBytes.format_rate(8.0 * 1024.0 * 1024.0 * 5.5),
            "5.50 MBytes/sec"
        );
        assert_eq!(
            RateUnit::parse("M")
                .unwrap()
                .format_rate(8.0 * 1024.0 * 1024.0 * 2048.0),
            "2048 MBytes/sec"
        );
        assert_eq!(format_bytes(3 * (1 << 30)), "3.00 GBytes");
        assert_eq!(format_bytes(512), "512 Bytes");
        assert!(RateUnit::parse("x").is_err());
    }
}
