//! The drivers' clock: CLOCK_MONOTONIC read as the core's one time type,
//! [`Time`]. Everything handed to a core state machine comes from here.

use std::time::Duration;

use rustix::time::{clock_gettime, ClockId};
use xferlab_core::time::Time;

/// Now, on the monotonic clock `std::time::Instant` also reads (the same
/// vDSO call, so it costs what `Instant::now()` costs).
pub fn now() -> Time {
    let ts = clock_gettime(ClockId::Monotonic);
    Time::from_nanos(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Time passed since `t`.
pub fn since(t: Time) -> Duration {
    now().duration_since(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_clock_std_reads() {
        let a = now();
        let i = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let (b, j) = (now(), std::time::Instant::now());
        let ours = b - a;
        let std = j - i;
        assert!(ours >= Duration::from_millis(20), "{ours:?}");
        assert!(
            ours.abs_diff(std) < Duration::from_millis(5),
            "{ours:?} {std:?}"
        );
        assert!(since(a) >= ours);
    }
}
