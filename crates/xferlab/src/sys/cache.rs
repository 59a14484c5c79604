//! The CPU this process runs on: its model name (/proc/cpuinfo) and cache
//! sizes (sysfs), which results report and the size calibration is keyed
//! by.

use xferlab_core::result::CacheSizes;
use xferlab_core::units::parse_size;

/// Cache sizes of `cpu` (default: the first CPU this process may use).
/// Fields the kernel does not report are None.
pub fn caches(cpu: Option<u32>) -> CacheSizes {
    let cpu = cpu
        .or_else(|| {
            super::affinity::usable_cpus()
                .ok()
                .and_then(|c| c.first().copied())
        })
        .unwrap_or(0);
    let mut found = CacheSizes::default();
    for index in 0..8 {
        let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cache/index{index}");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            break;
        };
        let size = sysfs_size(&size);
        match (level.trim(), kind.trim()) {
            ("1", "Data") => found.l1d = size,
            ("2", "Unified" | "Data") => found.l2 = size,
            ("3", "Unified" | "Data") => found.l3 = size,
            _ => {}
        }
    }
    found
}

/// The CPU's model name, as /proc/cpuinfo gives it.
pub fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    model_name(&info)
}

fn model_name(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        matches!(key.trim(), "model name" | "Model" | "cpu model")
            .then(|| value.trim().to_string())
            .filter(|v| !v.is_empty())
    })
}

/// sysfs writes cache sizes as "512K" (KiB) or "32M".
fn sysfs_size(s: &str) -> Option<u64> {
    parse_size(s.trim()).ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_sizes_are_binary() {
        assert_eq!(sysfs_size("512K\n"), Some(512 << 10));
        assert_eq!(sysfs_size("32768K"), Some(32 << 20));
        assert_eq!(sysfs_size("2M"), Some(2 << 20));
        assert_eq!(sysfs_size(""), None);
    }

    #[test]
    fn the_model_name_is_the_first_model_line() {
        let info =
            "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n";
        assert_eq!(model_name(info).as_deref(), Some("AMD EPYC"));
        assert_eq!(model_name("processor : 0\n"), None);
    }

    #[test]
    fn this_machine_reports_what_sysfs_lists() {
        let c = caches(Some(0));
        let listed = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache")
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(c.l2.is_some(), listed > 2, "{c:?}");
        assert!(!c.l2_override);
    }
}
