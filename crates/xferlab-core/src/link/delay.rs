//! Propagation delay with optional jitter (uniform or normal, optionally
//! correlated with the previous packet's).

use super::config::{Jitter, JitterDistribution};
use super::rng::Rng;

#[derive(Debug, Clone)]
pub struct Delay {
    base_ns: u64,
    jitter: Option<Jitter>,
    /// Previous jitter draw (ns), for correlation.
    last: f64,
}

impl Delay {
    pub fn new(base_ns: u64, jitter: Option<Jitter>) -> Self {
        Delay {
            base_ns,
            jitter,
            last: 0.0,
        }
    }

    /// The delay of the next packet, never negative.
    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        let Some(j) = self.jitter else {
            return self.base_ns;
        };
        let a = j.amount_ns as f64;
        let fresh = match j.distribution {
            JitterDistribution::Uniform => (rng.unit() * 2.0 - 1.0) * a,
            JitterDistribution::Normal => rng.normal() * a,
        };
        let c = j.correlation.clamp(0.0, 1.0);
        let x = c * self.last + (1.0 - c) * fresh;
        self.last = x;
        (self.base_ns as f64 + x).max(0.0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(d: &mut Delay, n: usize) -> (f64, f64, u64, u64) {
        let mut rng = Rng::new(5);
        let xs: Vec<u64> = (0..n).map(|_| d.next(&mut rng)).collect();
        let mean = xs.iter().sum::<u64>() as f64 / n as f64;
        let sd = (xs.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        (
            mean,
            sd,
            *xs.iter().min().unwrap(),
            *xs.iter().max().unwrap(),
        )
    }

    #[test]
    fn uniform_and_normal_jitter_have_the_configured_spread() {
        let mut u = Delay::new(
            10_000_000,
            Some(Jitter {
                distribution: JitterDistribution::Uniform,
                amount_ns: 1_000_000,
                correlation: 0.0,
            }),
        );
        let (mean, sd, min, max) = stats(&mut u, 100_000);
        assert!((mean - 1e7).abs() < 2e4, "{mean}");
        assert!((sd - 1e6 / 3f64.sqrt()).abs() < 1e4, "{sd}");
        assert!(min >= 9_000_000 && max <= 11_000_000);
        let mut n = Delay::new(
            10_000_000,
            Some(Jitter {
                distribution: JitterDistribution::Normal,
                amount_ns: 1_000_000,
                correlation: 0.0,
            }),
        );
        let (mean, sd, _, _) = stats(&mut n, 100_000);
        assert!((mean - 1e7).abs() < 2e4, "{mean}");
        assert!((sd - 1e6).abs() < 2e4, "{sd}");
    }

    #[test]
    fn correlation_smooths_successive_draws() {
        let j = |c| {
            Some(Jitter {
                distribution: JitterDistribution::Uniform,
                amount_ns: 1_000_000,
                correlation: c,
            })
        };
        let step = |c| {
            let mut d = Delay::new(5_000_000, j(c));
            let mut rng = Rng::new(9);
            let xs: Vec<f64> = (0..10_000).map(|_| d.next(&mut rng) as f64).collect();
            xs.windows(2).map(|w| (w[1] - w[0]).abs()).sum::<f64>() / xs.len() as f64
        };
        assert!(step(0.75) < step(0.0) / 2.0);
    }
}
