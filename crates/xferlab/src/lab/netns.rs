//! Named network namespaces without iproute2: a thread unshares its
//! network namespace and bind-mounts it at /run/netns/NAME (as `ip netns
//! add` does, so `ip netns exec NAME ...` works during a run). Work inside
//! a namespace happens on a short-lived thread that joins it with setns;
//! child processes join it in pre_exec.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context};
use rustix::mount::{mount_bind, unmount, UnmountFlags};
use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};

pub const NETNS_DIR: &str = "/run/netns";

/// Names of namespaces this tool owns: `xferlab-<owner pid>-<role>`.
pub const PREFIX: &str = "xferlab-";

pub fn path(name: &str) -> PathBuf {
    PathBuf::from(NETNS_DIR).join(name)
}

/// The OS error number at the root of `e`, if an OS call failed: what a
/// caller branches on, rather than the text.
pub fn errno(e: &anyhow::Error) -> Option<i32> {
    e.chain()
        .find_map(|c| c.downcast_ref::<io::Error>())
        .and_then(io::Error::raw_os_error)
}

/// Creates the named namespace (with its loopback up).
pub fn create(name: &str) -> anyhow::Result<()> {
    fs::create_dir_all(NETNS_DIR).with_context(|| format!("cannot create {NETNS_DIR}"))?;
    let target = path(name);
    File::create(&target).with_context(|| format!("cannot create {}", target.display()))?;
    let t = target.clone();
    let made = std::thread::spawn(move || -> anyhow::Result<()> {
        // Only the network namespace is unshared, on this thread.
        xferlab_sys::process::unshare_network_namespace().context("unshare(CLONE_NEWNET)")?;
        mount_bind("/proc/thread-self/ns/net", &t)
            .map_err(io::Error::from)
            .context("bind-mounting the namespace")?;
        super::tun::set_up("lo")
    })
    .join()
    .map_err(|_| anyhow!("namespace thread panicked"))?;
    if let Err(e) = made {
        let _ = fs::remove_file(&target);
        return Err(e);
    }
    Ok(())
}

/// Unmounts and removes a named namespace. It is freed once no process
/// is left in it.
pub fn delete(name: &str) -> anyhow::Result<()> {
    let p = path(name);
    // Not mounted (a leftover file) is fine: the file goes either way.
    let _ = unmount(&p, UnmountFlags::DETACH);
    match fs::remove_file(&p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove {}", p.display())),
    }
}

/// Opens a namespace's handle (for setns).
pub fn open(name: &str) -> anyhow::Result<File> {
    File::open(path(name)).with_context(|| format!("cannot open namespace {name}"))
}

/// Runs `f` on a new thread inside namespace `name` and returns its
/// result. Threads `f` spawns stay in the namespace too.
pub fn run_in<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    let ns = open(name)?;
    spawn_in(ns, name, f)?
        .join()
        .map_err(|_| anyhow!("namespace thread panicked"))?
}

/// Spawns a named thread inside the namespace whose handle is `ns`.
pub fn spawn_in<T: Send + 'static>(
    ns: File,
    thread_name: &str,
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<T>>> {
    std::thread::Builder::new()
        .name(thread_name.chars().take(15).collect())
        .spawn(move || {
            move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network))
                .map_err(io::Error::from)
                .context("setns")?;
            drop(ns);
            f()
        })
        .context("cannot spawn a thread")
}

/// Writes a sysctl of the calling thread's namespace
/// (`net.ipv4.tcp_sack` -> /proc/sys/net/ipv4/tcp_sack).
pub fn write_sysctl(key: &str, value: &str) -> anyhow::Result<()> {
    if !key.starts_with("net.") || key.contains("..") || key.contains('/') {
        bail!("sysctl '{key}': only per-namespace net.* keys can be set per host");
    }
    let p = PathBuf::from("/proc/sys").join(key.replace('.', "/"));
    fs::write(&p, value).with_context(|| format!("cannot set {key}={value} in the lab namespace"))
}

/// The calling thread's namespace counters (/proc/thread-self/net/...).
pub fn read_net_file(file: &str) -> anyhow::Result<String> {
    fs::read_to_string(format!("/proc/thread-self/net/{file}"))
        .with_context(|| format!("cannot read /proc/net/{file} in the lab namespace"))
}

/// Names of this tool's namespaces with their owner pid.
pub fn list_owned() -> Vec<(String, u32)> {
    let Ok(dir) = fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|name| {
            let pid = name.strip_prefix(PREFIX)?.split('-').next()?.parse().ok()?;
            Some((name, pid))
        })
        .collect()
}

/// Pids of processes whose network namespace is the named one.
pub fn pids_in(name: &str) -> Vec<i32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(target) = fs::metadata(path(name)) else {
        return Vec::new();
    };
    let Ok(proc_dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc_dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::metadata(format!("/proc/{pid}/ns/net"))
                .map(|m| m.ino() == target.ino() && m.dev() == target.dev())
                .unwrap_or(false)
        })
        .collect()
}

/// Is the lab owner `pid` still running? Any live process with that pid
/// counts: after a pid reuse a dead lab's leftovers wait a little longer,
/// but a running lab is never cleaned away.
pub fn owner_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod errno_tests {
    use super::*;

    /// Callers branch on the OS error under any context, never on text.
    #[test]
    fn errno_is_found_under_contexts_and_absent_without_an_os_error() {
        let e = Err::<(), _>(io::Error::from_raw_os_error(libc::EPERM))
            .context("unshare(CLONE_NEWNET)")
            .context("cannot create network namespace x")
            .unwrap_err();
        assert_eq!(errno(&e), Some(libc::EPERM));
        assert!(format!("{e:#}").starts_with("cannot create network namespace x: unshare"));
        assert_eq!(errno(&anyhow!("no OS call failed")), None);
    }
}
