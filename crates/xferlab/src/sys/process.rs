//! This process and the children it starts: whether it runs as root,
//! children that die with it, signalling a child.

use std::io;
use std::process::{Child, Command};

use rustix::process::{kill_process, Pid};

pub use rustix::process::Signal;

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Arranges for the child that `cmd` spawns to get `signal` when this
/// process dies, even by SIGKILL (Linux's parent-death signal), so no
/// child outlives a killed xferlab. Spawning fails if this process died
/// before the child could arrange it.
pub fn die_with_parent(cmd: &mut Command, signal: Signal) {
    xferlab_sys::process::die_with_parent(cmd, signal);
}

/// Sends `signal` to a child that has not been reaped yet.
pub fn signal_child(child: &Child, signal: Signal) -> io::Result<()> {
    Ok(kill_process(Pid::from_child(child), signal)?)
}

/// Sends `signal` to process `pid` (a leftover of a dead lab).
pub fn signal_pid(pid: i32, signal: Signal) -> io::Result<()> {
    let pid = Pid::from_raw(pid).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    Ok(kill_process(pid, signal)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;
    use std::time::{Duration, Instant};

    fn wait(child: &mut Child) -> ExitStatus {
        let t = Instant::now();
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "the child is still running"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The parent-death signal fires when the *thread* that spawned the
    /// child ends, which lets a test watch it without dying itself.
    #[test]
    fn a_child_gets_the_signal_when_its_parent_goes() {
        let mut child = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("30");
            die_with_parent(&mut cmd, Signal::TERM);
            cmd.spawn().expect("spawn sleep")
        })
        .join()
        .unwrap();
        assert_eq!(wait(&mut child).signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn a_child_is_signalled() {
        let mut child = Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        signal_child(&child, Signal::KILL).unwrap();
        assert_eq!(wait(&mut child).signal(), Some(libc::SIGKILL));
    }
}
