//! Who measured: host name, kernel, CPU count, model and caches for the
//! report header.

use xferlab_core::result::HostInfo;

const UNKNOWN: &str = "unknown";

/// Identity of this host. Never fails: anything unavailable reads
/// "unknown" (or 0 CPUs), since a report without it is still useful.
pub fn host_info() -> HostInfo {
    HostInfo {
        hostname: hostname().unwrap_or_else(|| UNKNOWN.to_string()),
        kernel: kernel().unwrap_or_else(|| UNKNOWN.to_string()),
        cpus: std::thread::available_parallelism()
            .map_or(0, |n| u32::try_from(n.get()).unwrap_or(u32::MAX)),
        cpu_model: super::cache::cpu_model(),
        caches: Some(Box::new(super::cache::caches(None))),
        size_calibration: None,
    }
}

/// The node name uname reports, which is what gethostname returns on
/// Linux.
fn hostname() -> Option<String> {
    let name = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    (!name.is_empty()).then_some(name)
}

/// `uname -sr`, e.g. "Linux 6.18.4".
fn kernel() -> Option<String> {
    let uts = rustix::system::uname();
    Some(format!(
        "{} {}",
        uts.sysname().to_string_lossy(),
        uts.release().to_string_lossy()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_value(path: &str) -> String {
        std::fs::read_to_string(path).unwrap().trim().to_string()
    }

    #[test]
    fn matches_what_the_kernel_reports_in_proc() {
        let h = host_info();
        assert_eq!(h.hostname, proc_value("/proc/sys/kernel/hostname"));
        let release = proc_value("/proc/sys/kernel/osrelease");
        assert_eq!(
            h.kernel,
            format!("{} {release}", proc_value("/proc/sys/kernel/ostype"))
        );
        assert!(h.cpus >= 1);
    }
}
