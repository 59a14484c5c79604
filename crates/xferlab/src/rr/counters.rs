//! Per-flow counters the engine threads publish and the side's control
//! loop samples at interval boundaries (relaxed atomics: one store per
//! field per event on the client, where one thread owns a flow; an add on
//! the server, where any engine thread may serve any flow's request).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use xferlab_core::rr::meter::TxReading;
use xferlab_core::rr::tracker::TxCounts;

#[derive(Debug, Default)]
#[repr(align(64))]
pub struct FlowCounters {
    pub sent: AtomicU64,
    pub completed: AtomicU64,
    pub timed_out: AtomicU64,
    pub failed: AtomicU64,
    pub late: AtomicU64,
    pub latency_n: AtomicU64,
    pub latency_sum_ns: AtomicU64,
    pub dropped: AtomicU64,
    /// rr over QUIC, client: the flow's connection state and counters,
    /// published by its engine thread (a few times per interval).
    #[cfg(feature = "quic")]
    pub quic: Option<crate::transport::quic::QuicShared>,
}

impl FlowCounters {
    /// Client: the owning thread's current counts.
    pub fn publish(&self, c: &TxCounts, latency_n: u64, latency_sum_ns: u64) {
        self.sent.store(c.sent, Relaxed);
        self.completed.store(c.completed, Relaxed);
        self.timed_out.store(c.timed_out, Relaxed);
        self.failed.store(c.failed, Relaxed);
        self.late.store(c.late, Relaxed);
        self.latency_n.store(latency_n, Relaxed);
        self.latency_sum_ns.store(latency_sum_ns, Relaxed);
    }

    pub fn reading(&self) -> TxReading {
        TxReading {
            tx: TxCounts {
                sent: self.sent.load(Relaxed),
                completed: self.completed.load(Relaxed),
                timed_out: self.timed_out.load(Relaxed),
                failed: self.failed.load(Relaxed),
                late: self.late.load(Relaxed),
                unexpected: 0,
            },
            latency_n: self.latency_n.load(Relaxed),
            latency_sum_ns: u128::from(self.latency_sum_ns.load(Relaxed)),
            dropped: self.dropped.load(Relaxed),
            #[cfg(feature = "quic")]
            transport: self
                .quic
                .as_ref()
                .map(|q| xferlab_core::transport::TransportCounters::Quic(q.read())),
            #[cfg(not(feature = "quic"))]
            transport: None,
        }
    }
}
