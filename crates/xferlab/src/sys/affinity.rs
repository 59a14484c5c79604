//! CPU affinity and timing of data threads: which CPUs this process may
//! use, pinning the calling thread to one of them (`-A`), and the timer
//! slack of threads that pace.

use std::io;

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

/// The CPUs this process may run on (its affinity mask: cgroup and
/// taskset limits included), ascending.
pub fn usable_cpus() -> io::Result<Vec<u32>> {
    // None: the calling thread.
    let set = sched_getaffinity(None)?;
    Ok((0..CpuSet::MAX_CPU)
        .filter(|&c| set.is_set(c))
        .map(|c| c as u32)
        .collect())
}

/// Why a thread may not be pinned where `-A` asked: the one line printed.
#[derive(Debug, thiserror::Error)]
pub enum AffinityError {
    #[error("cannot read the CPU affinity: {0}")]
    Read(io::Error),
    #[error("-A/--affinity: {whose} cannot run on CPU {cpu}; it may use CPUs {usable}")]
    NotUsable {
        whose: &'static str,
        cpu: u32,
        /// The usable CPUs, runs folded ("0-3,6").
        usable: String,
    },
}

/// Ok when `cpu` is one this process may use; otherwise why not
/// (`whose` says which end: "this machine", "the server").
pub fn check(cpu: u32, whose: &'static str) -> Result<(), AffinityError> {
    let cpus = usable_cpus().map_err(AffinityError::Read)?;
    if cpus.contains(&cpu) {
        return Ok(());
    }
    Err(AffinityError::NotUsable {
        whose,
        cpu,
        usable: list(&cpus),
    })
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: u32) -> io::Result<()> {
    let cpu = cpu as usize;
    if cpu >= CpuSet::MAX_CPU {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set)?;
    Ok(())
}

/// Sets the calling thread's timer slack to 1 ns: the default 50 us would
/// make every paced wake-up late.
pub fn tighten_timer_slack() {
    rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1)).ok();
}

/// Pins the calling data thread to `cpu`, if any. The CPU was checked
/// when the test was set up; should pinning fail now (the mask changed
/// since), the thread runs where the scheduler puts it.
pub fn pin_data_thread(cpu: Option<u32>) {
    if let Some(c) = cpu {
        pin_current_thread(c).ok();
    }
}

/// "0-3,6,8-9": runs of consecutive CPUs folded, as in
/// /sys/devices/system/cpu/online.
fn list(cpus: &[u32]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        while i + 1 < cpus.len() && cpus[i + 1] == cpus[i] + 1 {
            i += 1;
        }
        out.push(if cpus[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", cpus[i])
        });
        i += 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_fold_runs() {
        assert_eq!(list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
        assert_eq!(list(&[5]), "5");
        assert_eq!(list(&[]), "");
    }

    #[test]
    fn a_thread_pinned_to_a_usable_cpu_reports_only_that_cpu() {
        let cpus = usable_cpus().unwrap();
        assert!(!cpus.is_empty());
        let last = *cpus.last().unwrap();
        let seen = std::thread::spawn(move || {
            pin_current_thread(last).unwrap();
            (
                usable_cpus().unwrap(),
                rustix::thread::sched_getcpu() as i32,
            )
        })
        .join()
        .unwrap();
        assert_eq!(seen, (vec![last], last as i32));
        assert!(check(last, "this machine").is_ok());
    }

    #[test]
    fn a_cpu_out_of_the_mask_is_refused_with_the_usable_ones_named() {
        let e = check(1023, "the server").unwrap_err().to_string();
        assert!(
            e.starts_with("-A/--affinity: the server cannot run on CPU 1023; it may use CPUs "),
            "{e}"
        );
    }
}
