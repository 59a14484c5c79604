//! The order the runs of an experiment are made in, and which of them are
//! still to do when an interrupted experiment resumes.

use super::scenario::Order;

/// One run to make: a point (index into the scenario's points) and a
/// repeat (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunSlot {
    pub point: usize,
    pub repeat: u32,
}

/// splitmix64: a tiny, well-mixed generator, so a seed gives the same
/// order on every machine and release.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0), without modulo bias.
    fn below(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next();
            if x < zone {
                return x % n;
            }
        }
    }
}

/// Every run of `points` x `repeat`, in the scenario's order.
pub fn order(points: usize, repeat: u32, order: Order) -> Vec<RunSlot> {
    let mut v = Vec::with_capacity(points * repeat as usize);
    match order {
        Order::Sequential => {
            for point in 0..points {
                for repeat in 1..=repeat {
                    v.push(RunSlot { point, repeat });
                }
            }
        }
        Order::Interleaved | Order::Shuffled { .. } => {
            for repeat in 1..=repeat {
                for point in 0..points {
                    v.push(RunSlot { point, repeat });
                }
            }
        }
    }
    if let Order::Shuffled { seed } = order {
        let mut rng = SplitMix(seed);
        for i in (1..v.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
    v
}

/// The runs still to make: those of `all` for which `done` says no (a
/// stored run that succeeded), in the original order.
pub fn pending(all: &[RunSlot], done: impl Fn(RunSlot) -> bool) -> Vec<RunSlot> {
    all.iter().copied().filter(|s| !done(*s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_and_interleaved() {
        let s = order(2, 2, Order::Sequential);
        let p: Vec<_> = s.iter().map(|r| (r.point, r.repeat)).collect();
        assert_eq!(p, [(0, 1), (0, 2), (1, 1), (1, 2)]);
        let s = order(2, 2, Order::Interleaved);
        let p: Vec<_> = s.iter().map(|r| (r.point, r.repeat)).collect();
        assert_eq!(p, [(0, 1), (1, 1), (0, 2), (1, 2)]);
    }

    #[test]
    fn shuffled_is_a_seeded_permutation() {
        let a = order(5, 3, Order::Shuffled { seed: 7 });
        let b = order(5, 3, Order::Shuffled { seed: 7 });
        let c = order(5, 3, Order::Shuffled { seed: 8 });
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut sorted = a.clone();
        sorted.sort();
        let mut all = order(5, 3, Order::Sequential);
        all.sort();
        assert_eq!(sorted, all);
        assert_ne!(a, order(5, 3, Order::Interleaved));
    }

    #[test]
    fn pending_keeps_order() {
        let all = order(3, 2, Order::Interleaved);
        let left = pending(&all, |s| s.point == 1);
        assert_eq!(left.len(), 4);
        assert!(left.iter().all(|s| s.point != 1));
        assert_eq!(
            left[0],
            RunSlot {
                point: 0,
                repeat: 1
            }
        );
        assert_eq!(
            left[1],
            RunSlot {
                point: 2,
                repeat: 1
            }
        );
    }
}
