//! Time the hypervisor took from this machine's CPUs: the `steal` column
//! of /proc/stat's `cpu` line, as a share of all CPU time between two
//! readings.
//!
//! Why the lab reads it: a virtual CPU that the host deschedules cannot
//! depart a packet on time, spin or no spin. On a Firecracker guest
//! (2026-11-27) a thread spinning on the clock alone on its CPU saw gaps
//! of 2-4 ms about once a second, /proc/stat counted 4-33 % steal over
//! 5 s lab runs, and the lab's departures ran p99 1-12 ms late whatever
//! its spin and scheduling. Naming the steal in the
//! verdict says whose lateness it is and what to do about it.

/// Cumulative CPU time of all CPUs, in the kernel's clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTicks {
    /// Every column summed (user .. steal; guest time is already in user).
    pub total: u64,
    pub steal: u64,
}

/// Steal at or above this share of the CPU time is named in the verdict
/// of a run that missed its timing: a quiet host shows none.
pub const NOTABLE_STEAL_PERCENT: f64 = 1.0;

/// The `cpu` line of /proc/stat. None when it is missing or has no steal
/// column (kernels before 2.6.11).
pub fn parse_proc_stat(text: &str) -> Option<CpuTicks> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let cols: Vec<u64> = line
        .split_ascii_whitespace()
        .skip(1)
        .map(|c| c.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]:
    // guest and guest_nice are already counted in user and nice.
    let steal = *cols.get(7)?;
    Some(CpuTicks {
        total: cols.iter().take(8).sum(),
        steal,
    })
}

/// The steal share of the CPU time between two readings, in percent.
/// None when no time passed (or the counters went backwards).
pub fn steal_percent(before: CpuTicks, after: CpuTicks) -> Option<f64> {
    let total = after.total.checked_sub(before.total)?;
    let steal = after.steal.checked_sub(before.steal)?;
    (total > 0).then(|| 100.0 * steal as f64 / total as f64)
}

/// The steal share when it is notable enough to explain a missed timing
/// target (at least [`NOTABLE_STEAL_PERCENT`]), else None.
pub fn notable(steal_percent: Option<f64>) -> Option<f64> {
    steal_percent.filter(|&p| p >= NOTABLE_STEAL_PERCENT)
}

/// The verdict's line for a run that missed a timing target while the
/// host took notable time, or None.
pub fn blame(steal_percent: Option<f64>, timing_missed: bool) -> Option<String> {
    let p = notable(steal_percent)?;
    timing_missed.then(|| {
        format!(
            "host: the hypervisor held this machine's CPUs for {p:.1} % of the run (steal time in /proc/stat), \
             which delays departures however the lab waits: run the lab on a host whose CPUs are not shared"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  1016066 0 226822 783652 7559 0 36205 75325 0 0\n\
                        cpu0 508033 0 113411 391826 3779 0 18102 37662 0 0\n\
                        intr 1 2 3\n";

    #[test]
    fn the_cpu_line_is_read_and_guest_time_not_counted_twice() {
        let t = parse_proc_stat(STAT).unwrap();
        assert_eq!(t.steal, 75325);
        assert_eq!(
            t.total,
            1016066 + 226822 + 783652 + 7559 + 36205 + 75325,
            "guest columns left out"
        );
    }

    #[test]
    fn malformed_or_old_stat_files_give_nothing() {
        assert_eq!(parse_proc_stat(""), None);
        assert_eq!(parse_proc_stat("cpu0 1 2 3 4 5 6 7 8\n"), None);
        assert_eq!(
            parse_proc_stat("cpu  1 2 3 4 5 6 7\n"),
            None,
            "no steal column"
        );
        assert_eq!(parse_proc_stat("cpu  1 2 x 4 5 6 7 8\n"), None);
    }

    #[test]
    fn the_share_is_of_the_time_between_readings() {
        let a = CpuTicks {
            total: 1000,
            steal: 10,
        };
        let b = CpuTicks {
            total: 2000,
            steal: 60,
        };
        assert_eq!(steal_percent(a, b), Some(5.0));
        assert_eq!(steal_percent(b, a), None, "backwards");
        assert_eq!(steal_percent(a, a), None, "no time passed");
    }

    #[test]
    fn steal_is_blamed_only_for_a_missed_timing_target() {
        assert!(blame(Some(5.0), true).unwrap().contains("5.0 %"));
        assert_eq!(
            blame(Some(5.0), false),
            None,
            "timing kept: nothing to explain"
        );
        assert_eq!(blame(Some(0.5), true), None, "a quiet host");
        assert_eq!(blame(None, true), None, "no reading");
    }
}
