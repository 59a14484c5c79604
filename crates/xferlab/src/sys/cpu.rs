//! CPU accounting per test.
//!
//! A server runs several tests at once, and with an embedded server client
//! and server share one process, so process-wide rusage would mix them.
//! Instead every thread working for a test holds a [`ThreadCpuGuard`] that
//! adds that thread's own CPU time (RUSAGE_THREAD) to the test's
//! [`CpuTally`] when the work ends.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use xferlab_core::result::CpuUsage;
use xferlab_sys::rusage::{self, Who};

/// (user, system) seconds of `who`, or zeros if getrusage fails (it can
/// only fail on an invalid argument, which would be a bug here, and a
/// missing CPU figure must not abort a test).
fn rusage_times(who: Who) -> (f64, f64) {
    rusage::times(who).unwrap_or((0.0, 0.0))
}

/// User and system CPU seconds used so far by the calling thread.
pub fn thread_times() -> (f64, f64) {
    rusage_times(Who::Thread)
}

/// User and system CPU seconds used so far by the whole process.
pub fn process_times() -> (f64, f64) {
    rusage_times(Who::Process)
}

/// All CPUs' time so far, steal included (/proc/stat); None where the
/// file cannot be read or has no steal column.
pub fn cpu_ticks() -> Option<xferlab_core::steal::CpuTicks> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    xferlab_core::steal::parse_proc_stat(&text)
}

/// CPU time summed over the threads that worked for one test. Held as
/// integer nanoseconds so threads can add to it without a lock.
#[derive(Debug, Default)]
pub struct CpuTally {
    user_ns: AtomicU64,
    system_ns: AtomicU64,
}

impl CpuTally {
    /// Starts accounting the calling thread; its CPU time until the guard
    /// is dropped is added to this tally.
    pub fn track(self: &Arc<Self>) -> ThreadCpuGuard {
        ThreadCpuGuard {
            tally: Arc::clone(self),
            start: thread_times(),
            _same_thread: PhantomData,
        }
    }

    /// Adds the calling thread's CPU time since `start` (a value of
    /// [`thread_times`] taken earlier on this same thread).
    pub fn add_current_thread_since(&self, start: (f64, f64)) {
        let (user, system) = thread_times();
        self.user_ns
            .fetch_add(to_ns(user - start.0), Ordering::Relaxed);
        self.system_ns
            .fetch_add(to_ns(system - start.1), Ordering::Relaxed);
    }

    /// The tally so far, over `wall_s` seconds of wall-clock time.
    pub fn usage(&self, wall_s: f64) -> CpuUsage {
        let secs = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 * 1e-9;
        CpuUsage::new(secs(&self.user_ns), secs(&self.system_ns), wall_s)
    }
}

/// Seconds to nanoseconds; a negative difference (a start value taken on
/// another thread by mistake) counts as nothing rather than wrapping.
fn to_ns(secs: f64) -> u64 {
    if secs > 0.0 {
        (secs * 1e9).round() as u64
    } else {
        0
    }
}

/// Adds the CPU time of the thread that created it to a [`CpuTally`] when
/// dropped. It is `!Send` because RUSAGE_THREAD reads the *current*
/// thread: dropping it elsewhere would subtract one thread's time from
/// another's.
#[must_use = "the thread's CPU time is added when the guard is dropped"]
pub struct ThreadCpuGuard {
    tally: Arc<CpuTally>,
    start: (f64, f64),
    _same_thread: PhantomData<*const ()>,
}

impl Drop for ThreadCpuGuard {
    fn drop(&mut self) {
        self.tally.add_current_thread_since(self.start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Keeps the calling thread on the CPU until it has used `secs` of CPU
    /// time (not wall time, so a busy test machine only makes it slower).
    fn burn(secs: f64) {
        let (u0, s0) = thread_times();
        let mut x = 0u64;
        while {
            let (u, s) = thread_times();
            u + s - u0 - s0 < secs
        } {
            for i in 0..10_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
    }

    #[test]
    fn guard_adds_the_cpu_its_thread_burned() {
        let tally = Arc::new(CpuTally::default());
        let t = Arc::clone(&tally);
        let (p_user0, p_sys0) = process_times();
        let (m_user0, m_sys0) = thread_times();
        std::thread::spawn(move || {
            let _guard = t.track();
            burn(0.2);
        })
        .join()
        .unwrap();
        let used = tally.usage(1.0).total_s();
        assert!((0.15..1.0).contains(&used), "tally {used}");
        // The burn shows up process-wide but not in this (waiting) thread.
        let (p_user, p_sys) = process_times();
        assert!(p_user + p_sys - p_user0 - p_sys0 >= 0.15);
        let (m_user, m_sys) = thread_times();
        assert!(m_user + m_sys - m_user0 - m_sys0 < 0.1);
    }

    #[test]
    fn sleeping_thread_adds_almost_nothing() {
        let tally = Arc::new(CpuTally::default());
        {
            let _guard = tally.track();
            std::thread::sleep(Duration::from_millis(200));
        }
        let u = tally.usage(0.2);
        assert!(u.total_s() < 0.02, "{u:?}");
        assert!(u.percent < 10.0, "{u:?}");
    }

    #[test]
    fn usage_reports_percent_of_one_core() {
        let tally = CpuTally::default();
        tally.user_ns.store(1_500_000_000, Ordering::Relaxed);
        tally.system_ns.store(500_000_000, Ordering::Relaxed);
        let u = tally.usage(4.0);
        assert_eq!((u.user_s, u.system_s, u.wall_s), (1.5, 0.5, 4.0));
        assert!((u.percent - 50.0).abs() < 1e-9);
    }

    #[test]
    fn start_from_the_future_adds_nothing() {
        let tally = CpuTally::default();
        tally.add_current_thread_since((1e9, 1e9));
        assert_eq!(tally.usage(1.0).total_s(), 0.0);
    }
}
