//! Hooks that run in a child between fork and exec: dying with the parent,
//! entering a network namespace.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use rustix::process::{getpid, getppid, set_parent_process_death_signal, Signal};
use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};

/// Arranges for the child that `cmd` spawns to get `signal` when this
/// process dies, even by SIGKILL (Linux's parent-death signal), so no
/// child outlives a killed parent. Spawning fails if this process died
/// before the child could arrange it.
pub fn die_with_parent(cmd: &mut Command, signal: Signal) {
    let parent = getpid();
    // SAFETY: the hook runs between fork and exec; it only makes two
    // system calls (prctl, getppid), which are async-signal-safe, and
    // neither allocates nor takes a lock.
    unsafe {
        cmd.pre_exec(move || {
            set_parent_process_death_signal(Some(signal))?;
            if getppid() != Some(parent) {
                // The parent died before the prctl took effect.
                return Err(rustix::io::Errno::SRCH.into());
            }
            Ok(())
        });
    }
}

/// Has the child that `cmd` spawns enter the network namespace `ns` (an
/// open namespace file) before it execs.
pub fn enter_network_namespace(cmd: &mut Command, ns: OwnedFd) {
    // SAFETY: the hook runs between fork and exec and makes one system
    // call (setns), which is async-signal-safe and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network))?;
            Ok(())
        });
    }
}

/// Moves the calling thread into a new network namespace of its own
/// (unshare(CLONE_NEWNET)).
pub fn unshare_network_namespace() -> std::io::Result<()> {
    // SAFETY: only the network namespace is unshared, on this thread; the
    // file-descriptor table (UnshareFlags::FILES, the hazard) is kept.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }?;
    Ok(())
}
