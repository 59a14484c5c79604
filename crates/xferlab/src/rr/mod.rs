//! The request/response pattern (`xferlab rr`): TCP RR, TCP CRR and UDP
//! RR flows driven by a few event-driven threads each side (epoll, not a
//! thread per flow), optionally next to background stream flows. The
//! bookkeeping is sans-IO in `xferlab_core::rr`; this module owns sockets,
//! clocks and threads.

pub mod client;
mod client_flow;
mod counters;

mod poller;
mod server_engine;
pub mod session;
mod side;
mod workload;

/// Raises RLIMIT_NOFILE to its hard limit: every rr flow is a socket on
/// each end (two in one process with the embedded server), and the soft
/// limit is often 1024. Returns the limit now in force.
pub fn raise_nofile_limit() -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid, owned struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) != 0 {
            return 1024;
        }
        if rl.rlim_cur < rl.rlim_max {
            let want = libc::rlimit {
                rlim_cur: rl.rlim_max,
                rlim_max: rl.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                rl.rlim_cur = rl.rlim_max;
            }
        }
    }
    rl.rlim_cur
}

/// Engine threads for `flows` flows: one per core, at most 4, never more
/// than there are flows.
pub fn engine_threads(flows: u32) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.clamp(1, 4).min(flows.max(1) as usize)
}
