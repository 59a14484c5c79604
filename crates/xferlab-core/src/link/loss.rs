//! Random loss: Bernoulli or the Gilbert-Elliott two-state model.

use super::config::LossModel;
use super::rng::Rng;

#[derive(Debug, Clone)]
pub struct Loss {
    model: LossModel,
    /// Gilbert-Elliott: in the bad state.
    bad: bool,
}

impl Loss {
    pub fn new(model: LossModel) -> Self {
        Loss { model, bad: false }
    }

    /// Decides the fate of the next packet: true = lose it.
    pub fn lose(&mut self, rng: &mut Rng) -> bool {
        match self.model {
            LossModel::None => false,
            LossModel::Bernoulli { p } => rng.chance(p),
            LossModel::GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
            } => {
                // Transition first, then draw the loss in the new state
                // (netem's order).
                if self.bad {
                    if rng.chance(r) {
                        self.bad = false;
                    }
                } else if rng.chance(p) {
                    self.bad = true;
                }
                rng.chance(if self.bad { loss_bad } else { loss_good })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bounds of a 99.9 % normal-approximation interval for a binomial count.
    fn interval(n: f64, p: f64) -> (f64, f64) {
        let sd = (n * p * (1.0 - p)).sqrt();
        (n * p - 3.3 * sd, n * p + 3.3 * sd)
    }

    #[test]
    fn bernoulli_within_binomial_interval() {
        for seed in 1..=5 {
            let mut rng = Rng::new(seed);
            let mut l = Loss::new(LossModel::Bernoulli { p: 0.01 });
            let n = 200_000;
            let k = (0..n).filter(|_| l.lose(&mut rng)).count() as f64;
            let (lo, hi) = interval(n as f64, 0.01);
            assert!(k >= lo && k <= hi, "seed {seed}: {k} not in [{lo}, {hi}]");
        }
    }

    #[test]
    fn gilbert_elliott_mean_loss_and_burst_length() {
        let model = LossModel::GilbertElliott {
            p: 0.01,
            r: 0.25,
            loss_bad: 1.0,
            loss_good: 0.0,
        };
        let mut rng = Rng::new(11);
        let mut l = Loss::new(model);
        let n = 1_000_000;
        let (mut lost, mut bursts, mut prev) = (0u64, 0u64, false);
        for _ in 0..n {
            let x = l.lose(&mut rng);
            lost += u64::from(x);
            if x && !prev {
                bursts += 1;
            }
            prev = x;
        }
        let mean = lost as f64 / n as f64;
        assert!(
            (mean - model.mean_loss()).abs() < 0.004,
            "mean loss {mean} vs {}",
            model.mean_loss()
        );
        let burst = lost as f64 / bursts as f64;
        assert!(
            (burst - 4.0).abs() < 0.2,
            "mean burst {burst}, expected 1/r = 4"
        );
    }
}
