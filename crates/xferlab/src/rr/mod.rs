//! The request/response pattern (`xferlab rr`): TCP RR, TCP CRR and UDP
//! RR flows driven by a few event-driven threads each side (epoll, not a
//! thread per flow), optionally next to background stream flows. The
//! bookkeeping is sans-IO in `xferlab_core::rr`; this module owns sockets,
//! clocks and threads.

pub mod client;
mod client_flow;
mod counters;

use xferlab_sys::poller;
#[cfg(feature = "quic")]
mod quic;
mod server_engine;
pub mod session;
mod side;
mod workload;

/// Raises RLIMIT_NOFILE to its hard limit: every rr flow is a socket on
/// each end (two in one process with the embedded server), and the soft
/// limit is often 1024. Returns the limit now in force.
pub fn raise_nofile_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    // None is RLIM_INFINITY.
    let rl = getrlimit(Resource::Nofile);
    let now = if rl.current != rl.maximum
        && setrlimit(
            Resource::Nofile,
            Rlimit {
                current: rl.maximum,
                maximum: rl.maximum,
            },
        )
        .is_ok()
    {
        rl.maximum
    } else {
        rl.current
    };
    now.unwrap_or(u64::MAX)
}

/// Engine threads for `flows` flows: one per core, at most 4, never more
/// than there are flows.
pub fn engine_threads(flows: u32) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.clamp(1, 4).min(flows.max(1) as usize)
}

/// A client engine thread of quic-rr/quic-crr ([`quic`]); a build
/// without QUIC refused the test before any thread started.
fn quic_client(
    plan: std::sync::Arc<client_flow::ClientPlan>,
    ids: Vec<u32>,
    counters: std::sync::Arc<[counters::FlowCounters]>,
    flags: std::sync::Arc<side::EngineFlags>,
) -> Vec<side::FlowResult> {
    #[cfg(feature = "quic")]
    return quic::run_client(plan, ids, counters, flags);
    #[cfg(not(feature = "quic"))]
    {
        let _ = (plan, ids, counters, flags);
        Vec::new()
    }
}

/// The server's engine thread of quic-rr/quic-crr ([`quic`]).
fn quic_server(
    plan: std::sync::Arc<server_engine::ServerPlan>,
    counters: std::sync::Arc<[counters::FlowCounters]>,
    flags: std::sync::Arc<side::EngineFlags>,
) -> Vec<side::FlowResult> {
    #[cfg(feature = "quic")]
    return quic::run_server(plan, counters, flags);
    #[cfg(not(feature = "quic"))]
    {
        let _ = (plan, counters, flags);
        Vec::new()
    }
}
