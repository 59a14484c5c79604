//! Threads: waking one blocked in a system call (a signal whose handler
//! does nothing, installed without SA_RESTART, so the call returns EINTR),
//! and real-time scheduling for the calling one.

use std::io;
use std::os::unix::thread::JoinHandleExt;
use std::thread::JoinHandle;

extern "C" fn wake_only(_: libc::c_int) {}

/// Installs the do-nothing handler for SIGUSR1 (process-wide).
pub fn install_wake_signal() -> io::Result<()> {
    // SAFETY: a handler that does nothing (async-signal-safe), installed
    // without SA_RESTART so that an interrupted call returns EINTR; the
    // sigaction struct is zeroed (valid) and ours.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = wake_only as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sends SIGUSR1 to `t` (see [`install_wake_signal`]): a blocked call
/// of its returns EINTR.
pub fn wake<T>(t: &JoinHandle<T>) {
    // SAFETY: the handle is borrowed, so the thread is not joined (nor
    // detached): its pthread_t is valid, finished or not.
    unsafe { libc::pthread_kill(t.as_pthread_t(), libc::SIGUSR1) };
}

/// SCHED_FIFO at `priority` for the calling thread; whether it took
/// (it needs CAP_SYS_NICE). Plain libc: neither rustix nor nix wraps
/// sched_setscheduler.
pub fn set_fifo(priority: i32) -> bool {
    let p = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: a valid sched_param for the calling thread (pid 0), read
    // during the call.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0 }
}
