//! How late this machine's timer wake-ups come, measured at lab start
//! under the forwarders' own scheduling (SCHED_FIFO when permitted, 1 ns
//! timer slack), and the busy-wait before each departure that follows
//! from it (`--spin-us auto`).
//!
//! Why measure: the wake-up lateness is the hypervisor's and the CPU's,
//! not ours. On the previous machines it was ~20-50 us; on a nested
//! Firecracker guest (2026-11-24) a 500 us ppoll overshot by p50 25 us,
//! p99 71-137 us, and an idle 3-hop lab with no spin departed p50 68 us,
//! p99 240-290 us late, at or past the 250 us target. With the spin set
//! from the p99 (100 us there) the loaded study-3 lab departed p50 1 us,
//! p99 24-38 us late (`bench`-free check: `xferlab lab --chain 3 ... @bg
//! stream -P 20 @ref rr --mode tcp-crr`, spin 0 vs 100).

use std::time::Instant;

use rustix::event::{poll, Timespec};
use xferlab_core::link::report::TimerWakeup;

/// Sleeps measured. 100 x 500 us is ~55 ms of lab start-up.
const SAMPLES: usize = 100;
/// The sleep measured: a departure gap at 20 Mbit/s (1500 B take 600 us);
/// longer sleeps overshoot more (2 ms: p50 38 us vs 25 us at 500 us).
const SLEEP_NS: u64 = 500_000;
/// The most an automatic spin busy-waits per departure: past this a
/// machine's wake-ups are too noisy for spinning to pay (and the spin
/// budget in the forwarder would cut it off anyway).
const MAX_AUTO_SPIN_US: u64 = 200;

/// Measures the wake-up overshoot of [`SAMPLES`] sleeps on a thread tuned
/// as the forwarders are.
pub fn calibrate(realtime: bool) -> TimerWakeup {
    let measure = move || {
        super::forward::tune_thread(realtime);
        let mut late: Vec<u64> = Vec::with_capacity(SAMPLES);
        let ts = Timespec {
            tv_sec: 0,
            tv_nsec: SLEEP_NS as _,
        };
        for _ in 0..SAMPLES {
            let t0 = Instant::now();
            poll(&mut [], Some(&ts)).ok();
            late.push((t0.elapsed().as_nanos() as u64).saturating_sub(SLEEP_NS));
        }
        late
    };
    let mut late = std::thread::Builder::new()
        .name("xl-wakeup".into())
        .spawn(measure)
        .ok()
        .and_then(|h| h.join().ok())
        .unwrap_or_default();
    late.sort_unstable();
    let q = |p: f64| {
        late.get(((late.len() as f64 - 1.0) * p).round() as usize)
            .map_or(0.0, |&ns| ns as f64 / 1e3)
    };
    TimerWakeup {
        samples: late.len() as u32,
        sleep_us: SLEEP_NS / 1000,
        p50_us: q(0.5),
        p99_us: q(0.99),
    }
}

/// The automatic spin: the p99 overshoot rounded up to 10 us, so 99 % of
/// timer wake-ups land before the departure and the rest is busy-waited.
pub fn auto_spin_us(w: &TimerWakeup) -> u64 {
    ((w.p99_us / 10.0).ceil() as u64 * 10).min(MAX_AUTO_SPIN_US)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(p99_us: f64) -> TimerWakeup {
        TimerWakeup {
            samples: 100,
            sleep_us: 500,
            p50_us: p99_us / 4.0,
            p99_us,
        }
    }

    #[test]
    fn auto_spin_covers_the_p99_in_steps_of_10_us_up_to_a_cap() {
        assert_eq!(auto_spin_us(&w(0.0)), 0);
        assert_eq!(auto_spin_us(&w(3.2)), 10);
        assert_eq!(auto_spin_us(&w(117.0)), 120);
        assert_eq!(auto_spin_us(&w(5000.0)), MAX_AUTO_SPIN_US);
    }

    #[test]
    fn calibration_measures_every_sample() {
        let c = calibrate(false);
        assert_eq!((c.samples, c.sleep_us), (SAMPLES as u32, 500));
        assert!(c.p50_us <= c.p99_us, "{c:?}");
    }
}
