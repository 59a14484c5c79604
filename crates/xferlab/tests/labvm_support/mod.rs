//! Runs commands in the lab VM (`lab/vm/run`: Debian 12's 6.1 kernel under
//! QEMU TCG with busybox and a static xferlab) from integration tests.
//!
//! Boots are expensive (~3 s boot plus TCG slowness), so tests batch several
//! commands into one guest script and boots take turns ([`vm_lock`]). Every
//! VM test carries
//! `#[cfg_attr(labvm_skip, ignore = "XFERLAB_LABVM=skip: ...")]`: built with
//! `XFERLAB_LABVM=skip` (machines without QEMU; CI installs it, see .ci/run)
//! they are listed as ignored, with that reason (crates/xferlab/build.rs);
//! otherwise they run, and fail when the VM cannot boot.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One VM at a time: two TCG guests on a 2-core host distort each other.
pub fn vm_lock() -> MutexGuard<'static, ()> {
    static LOCK: OnceLock<Mutex<()>> = OnceLock::new();
    LOCK.get_or_init(|| Mutex::new(()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug)]
pub struct VmRun {
    /// The guest command's exit status (124 timeout, 125 lab failure).
    pub code: i32,
    /// The guest command's output (stdout and stderr interleaved).
    pub out: String,
    /// The lab script's own log: kernel version, step times, console tail on failure.
    pub log: String,
    pub wall: Duration,
}

/// Runs `lab/vm/run ARGS -- SCRIPT` with a host-side deadline on top of the
/// script's own timeouts (it kills its QEMU on every path; this only
/// catches a hung script).
pub fn run_vm(args: &[&str], script: &str, deadline: Duration) -> VmRun {
    let t0 = Instant::now();
    let dir = std::env::temp_dir().join(format!("xferlab-labvm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script_path = dir.join(format!("guest-{}.sh", t0.elapsed().as_nanos()));
    std::fs::write(&script_path, script).unwrap();
    let mut cmd = Command::new(repo_root().join("lab/vm/run"));
    cmd.args(args)
        .arg("--script")
        .arg(&script_path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start lab/vm/run: {e} (needs python3)"));
    let pid = child.id();
    // A watchdog: SIGTERM makes the script kill its QEMU and exit. It wakes
    // when the run ends (the sender is dropped) or at the deadline.
    let (finished, wake) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if wake.recv_timeout(deadline) != Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            return false;
        }
        // SAFETY: signals our own child.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        true
    });
    let output = child.wait_with_output().expect("wait for lab/vm/run");
    drop(finished);
    let timed_out = watchdog.join().unwrap_or(false);
    std::fs::remove_file(&script_path).ok();
    let run = VmRun {
        code: output.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&output.stdout).into_owned(),
        log: String::from_utf8_lossy(&output.stderr).into_owned(),
        wall: t0.elapsed(),
    };
    // The whole guest output, for reading after a failure.
    let keep = repo_root().join("target").join("labvm-last-output.txt");
    std::fs::write(&keep, format!("{}\n--- lab log ---\n{}", run.out, run.log)).ok();
    eprintln!(
        "lab VM: exit {} in {:.1} s (output kept in {})\n--- lab log ---\n{}--- guest output ---\n{}",
        run.code,
        run.wall.as_secs_f64(),
        keep.display(),
        run.log,
        run.out
    );
    assert!(
        !timed_out,
        "lab/vm/run overran the test's {deadline:?} deadline"
    );
    assert_ne!(run.code, 125, "the lab VM itself failed:\n{}", run.log);
    run
}

/// The lines of `out` between `== NAME ==` and the next `== ` header.
pub fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let start_tag = format!("== {name} ==\n");
    let Some(i) = out.find(&start_tag) else {
        panic!("no section `{name}` in the guest output");
    };
    let rest = &out[i + start_tag.len()..];
    let end = rest.find("\n== ").map(|j| j + 1).unwrap_or(rest.len());
    &rest[..end]
}

/// `KEY=VALUE` lines the guest script printed (e.g. `rc=1`).
pub fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// No qemu process is left: the lab script's promise, checked after every boot.
pub fn assert_no_qemu_left() {
    let mut left = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let comm = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // Zombies (state Z) of a SIGKILLed parent are being reaped; count live ones.
            if comm.contains("(qemu-system-x86") && !comm.contains(") Z ") {
                // Only ours: its parent chain must lead to this test process.
                if is_descendant(&e.path(), std::process::id()) {
                    left.push(e.file_name().to_string_lossy().into_owned());
                }
            }
        }
    }
    assert!(left.is_empty(), "qemu processes left behind: {left:?}");
}

fn is_descendant(proc_dir: &std::path::Path, ancestor: u32) -> bool {
    let mut dir = proc_dir.to_path_buf();
    for _ in 0..64 {
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            return false;
        };
        let ppid: u32 = after
            .split(' ')
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        if ppid == ancestor {
            return true;
        }
        if ppid <= 1 {
            return false;
        }
        dir = PathBuf::from(format!("/proc/{ppid}"));
    }
    false
}

/// Runs one of lab/vm's build scripts (cached builds for the guest:
/// build-testusb, build-raw-gadget) and returns the path it prints.
pub fn lab_build(script: &str) -> String {
    let out = Command::new(repo_root().join("lab/vm").join(script))
        .output()
        .unwrap_or_else(|e| panic!("run lab/vm/{script}: {e}"));
    assert!(
        out.status.success(),
        "lab/vm/{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
