//! Whether to mark a packet CE: a fixed probability ("1 in 50", as test
//! routers are configured) or RED on the average queue length.

use super::config::EcnMarking;
use super::rng::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Pass,
    /// Set CE (only ever returned for ECT packets).
    Mark,
    /// RED would have marked, but the packet is not ECT: drop it.
    Drop,
}

#[derive(Debug, Clone)]
pub struct Marker {
    mode: EcnMarking,
    /// RED's exponentially weighted average queue, bytes.
    avg: f64,
    /// RED: packets since the last mark/drop while between the thresholds.
    count: u64,
}

impl Marker {
    pub fn new(mode: EcnMarking) -> Self {
        Marker {
            mode,
            avg: 0.0,
            count: 0,
        }
    }

    /// Decides for one arriving packet, given the queue (bytes) it finds.
    pub fn decide(&mut self, queue_bytes: u64, ect: bool, rng: &mut Rng) -> Decision {
        let signal = |ect: bool| if ect { Decision::Mark } else { Decision::Drop };
        match self.mode {
            EcnMarking::None => Decision::Pass,
            EcnMarking::Fixed { p, drop_not_ect } => {
                if (ect || drop_not_ect) && rng.chance(p) {
                    signal(ect)
                } else {
                    Decision::Pass
                }
            }
            EcnMarking::Red {
                min_bytes,
                max_bytes,
                max_p,
                weight,
            } => {
                self.avg += weight * (queue_bytes as f64 - self.avg);
                if self.avg < min_bytes as f64 {
                    self.count = 0;
                    return Decision::Pass;
                }
                if self.avg >= max_bytes as f64 {
                    self.count = 0;
                    return signal(ect);
                }
                let pb = max_p * (self.avg - min_bytes as f64) / (max_bytes - min_bytes) as f64;
                // Spread marks evenly (RED's count correction).
                let denom = 1.0 - self.count as f64 * pb;
                let pa = if denom <= 0.0 { 1.0 } else { pb / denom };
                self.count += 1;
                if rng.chance(pa) {
                    self.count = 0;
                    signal(ect)
                } else {
                    Decision::Pass
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_marks_one_in_n_of_ect_only() {
        let mut m = Marker::new(EcnMarking::Fixed {
            p: 1.0 / 20.0,
            drop_not_ect: false,
        });
        let mut rng = Rng::new(2);
        let n = 100_000;
        let marks = (0..n)
            .filter(|_| m.decide(0, true, &mut rng) == Decision::Mark)
            .count() as f64;
        let sd = (n as f64 * 0.05 * 0.95).sqrt();
        assert!((marks - 5000.0).abs() < 3.3 * sd, "{marks}");
        assert!((0..1000).all(|_| m.decide(0, false, &mut rng) == Decision::Pass));
    }

    #[test]
    fn fixed_with_drop_drops_not_ect_packets_as_often_as_it_marks() {
        let mut m = Marker::new(EcnMarking::Fixed {
            p: 1.0 / 5.0,
            drop_not_ect: true,
        });
        let mut rng = Rng::new(3);
        let n = 100_000;
        let count = |m: &mut Marker, rng: &mut Rng, ect: bool, want: Decision| {
            (0..n).filter(|_| m.decide(0, ect, rng) == want).count() as f64
        };
        let sd = (n as f64 * 0.2 * 0.8).sqrt();
        let marks = count(&mut m, &mut rng, true, Decision::Mark);
        let drops = count(&mut m, &mut rng, false, Decision::Drop);
        assert!((marks - 20_000.0).abs() < 3.3 * sd, "{marks}");
        assert!((drops - 20_000.0).abs() < 3.3 * sd, "{drops}");
        // ECT packets are never dropped, Not-ECT ones never marked.
        assert_eq!(count(&mut m, &mut rng, true, Decision::Drop), 0.0);
        assert_eq!(count(&mut m, &mut rng, false, Decision::Mark), 0.0);
    }

    #[test]
    fn red_marks_by_average_queue() {
        let red = EcnMarking::Red {
            min_bytes: 10_000,
            max_bytes: 30_000,
            max_p: 0.1,
            weight: 0.5,
        };
        let mut rng = Rng::new(4);
        let mut m = Marker::new(red);
        assert!((0..1000).all(|_| m.decide(5_000, true, &mut rng) == Decision::Pass));
        let mut m = Marker::new(red);
        for _ in 0..50 {
            m.decide(40_000, true, &mut rng);
        }
        assert_eq!(m.decide(40_000, true, &mut rng), Decision::Mark);
        assert_eq!(m.decide(40_000, false, &mut rng), Decision::Drop);
        // Halfway between the thresholds: about max_p / 2 of packets, and
        // (with the count correction) at least that many.
        let mut m = Marker::new(red);
        let n = 100_000;
        let marks = (0..n)
            .filter(|_| m.decide(20_000, true, &mut rng) == Decision::Mark)
            .count() as f64
            / n as f64;
        assert!(marks > 0.05 && marks < 0.11, "{marks}");
    }
}
