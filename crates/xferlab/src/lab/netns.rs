//! Named network namespaces without iproute2: a thread unshares its
//! network namespace and bind-mounts it at /run/netns/NAME (as `ip netns
//! add` does, so `ip netns exec NAME ...` works during a run). Work inside
//! a namespace happens on a short-lived thread that joins it with setns;
//! child processes join it in pre_exec.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;

use rustix::mount::{mount_bind, unmount, UnmountFlags};
use rustix::thread::{move_into_link_name_space, LinkNameSpaceType, UnshareFlags};

pub const NETNS_DIR: &str = "/run/netns";

/// Names of namespaces this tool owns: `xferlab-<owner pid>-<role>`.
pub const PREFIX: &str = "xferlab-";

pub fn path(name: &str) -> PathBuf {
    PathBuf::from(NETNS_DIR).join(name)
}

fn os_err(what: &str, e: rustix::io::Errno) -> String {
    format!("{what}: {}", io::Error::from(e))
}

/// Creates the named namespace (with its loopback up).
pub fn create(name: &str) -> Result<(), String> {
    fs::create_dir_all(NETNS_DIR).map_err(|e| format!("cannot create {NETNS_DIR}: {e}"))?;
    let target = path(name);
    File::create(&target).map_err(|e| format!("cannot create {}: {e}", target.display()))?;
    let t = target.clone();
    let made = std::thread::spawn(move || -> Result<(), String> {
        // SAFETY: only the network namespace is unshared, on this thread;
        // the file-descriptor table (UnshareFlags::FILES, the hazard) is kept.
        unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }
            .map_err(|e| os_err("unshare(CLONE_NEWNET)", e))?;
        mount_bind("/proc/thread-self/ns/net", &t)
            .map_err(|e| os_err("bind-mounting the namespace", e))?;
        super::tun::set_up("lo")
    })
    .join()
    .map_err(|_| "namespace thread panicked".to_string())?;
    if let Err(e) = made {
        let _ = fs::remove_file(&target);
        return Err(e);
    }
    Ok(())
}

/// Unmounts and removes a named namespace. It is freed once no process
/// is left in it.
pub fn delete(name: &str) -> Result<(), String> {
    let p = path(name);
    // Not mounted (a leftover file) is fine: the file goes either way.
    let _ = unmount(&p, UnmountFlags::DETACH);
    match fs::remove_file(&p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot remove {}: {e}", p.display())),
    }
}

/// Opens a namespace's handle (for setns).
pub fn open(name: &str) -> Result<File, String> {
    File::open(path(name)).map_err(|e| format!("cannot open namespace {name}: {e}"))
}

/// Runs `f` on a new thread inside namespace `name` and returns its
/// result. Threads `f` spawns stay in the namespace too.
pub fn run_in<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let ns = open(name)?;
    spawn_in(ns, name, f)?
        .join()
        .map_err(|_| "namespace thread panicked".to_string())?
}

/// Spawns a named thread inside the namespace whose handle is `ns`.
pub fn spawn_in<T: Send + 'static>(
    ns: File,
    thread_name: &str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<std::thread::JoinHandle<Result<T, String>>, String> {
    std::thread::Builder::new()
        .name(thread_name.chars().take(15).collect())
        .spawn(move || {
            move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network))
                .map_err(|e| os_err("setns", e))?;
            drop(ns);
            f()
        })
        .map_err(|e| format!("cannot spawn a thread: {e}"))
}

/// Writes a sysctl of the calling thread's namespace
/// (`net.ipv4.tcp_sack` -> /proc/sys/net/ipv4/tcp_sack).
pub fn write_sysctl(key: &str, value: &str) -> Result<(), String> {
    if !key.starts_with("net.") || key.contains("..") || key.contains('/') {
        return Err(format!(
            "sysctl '{key}': only per-namespace net.* keys can be set per host"
        ));
    }
    let p = PathBuf::from("/proc/sys").join(key.replace('.', "/"));
    fs::write(&p, value).map_err(|e| format!("cannot set {key}={value} in the lab namespace: {e}"))
}

/// The calling thread's namespace counters (/proc/thread-self/net/...).
pub fn read_net_file(file: &str) -> Result<String, String> {
    fs::read_to_string(format!("/proc/thread-self/net/{file}"))
        .map_err(|e| format!("cannot read /proc/net/{file} in the lab namespace: {e}"))
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
