//! CPU time used so far: getrusage for the calling thread or the whole
//! process (rustix has no getrusage).

/// Whose CPU time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// The calling thread (RUSAGE_THREAD).
    Thread,
    /// The whole process (RUSAGE_SELF).
    Process,
}

/// (user, system) seconds of `who`; None if getrusage fails (it can only
/// fail on an invalid argument).
pub fn times(who: Who) -> Option<(f64, f64)> {
    let who = match who {
        Who::Thread => libc::RUSAGE_THREAD,
        Who::Process => libc::RUSAGE_SELF,
    };
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes one struct rusage into the pointer, which is
    // valid for that write.
    if unsafe { libc::getrusage(who, ru.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: getrusage succeeded, so it wrote the whole struct.
    let ru = unsafe { ru.assume_init() };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    Some((secs(ru.ru_utime), secs(ru.ru_stime)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_uses_cpu_time() {
        let (u0, s0) = times(Who::Thread).unwrap();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let (u1, s1) = times(Who::Thread).unwrap();
        assert!(u1 + s1 > u0 + s0);
        // The process has run at least this thread. Compared as sums: the
        // kernel splits a task's run time into user and system time by its
        // tick samples (cputime_adjust), per thread and for the process
        // separately, so the process's user part alone can come out below
        // one thread's (seen once in a full test run: the other test
        // threads' time was mostly system time).
        let (pu, ps) = times(Who::Process).unwrap();
        assert!(pu + ps >= u1 + s1 - 1e-3, "{pu} + {ps} < {u1} + {s1}");
    }
}
