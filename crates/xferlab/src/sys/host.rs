//! Who measured: host name, kernel and CPU count for the report header.

use std::ffi::CStr;

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
    }
}

fn hostname() -> Option<String> {
    // Linux host names are at most 64 bytes; the rest is headroom.
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its full length, which we pass.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return None;
    }
    // POSIX leaves termination unspecified on truncation; require a NUL.
    let name = CStr::from_bytes_until_nul(&buf).ok()?.to_string_lossy();
    (!name.is_empty()).then(|| name.into_owned())
}

/// `uname -sr`, e.g. "Linux 6.18.4".
fn kernel() -> Option<String> {
    // SAFETY: utsname is plain C chars; all-zero is a valid value.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid, writable utsname.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return None;
    }
    let field = |chars: &[libc::c_char]| {
        // c_char is i8 or u8 depending on the target; reinterpret as bytes.
        let bytes: Vec<u8> = chars.iter().map(|&c| c as u8).collect();
        CStr::from_bytes_until_nul(&bytes)
            .ok()
            .map(|s| s.to_string_lossy().into_owned())
    };
    Some(format!("{} {}", field(&uts.sysname)?, field(&uts.release)?))
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
