//! One endpoint's request/response group: the engine threads, the
//! per-flow counters they publish, interval sampling on the control
//! thread, and the fold into an [`RrSideReport`].

use crate::sys::clock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use xferlab_core::time::Time;

use xferlab_core::interval::IntervalClock;
use xferlab_core::latency::LatencyRecorder;
use xferlab_core::result::FlowEnd;
use xferlab_core::rr::meter::TxMeter;
use xferlab_core::rr::report::{sum_intervals, sum_totals, RrFlowReport, RrInterval, RrSideReport};
use xferlab_core::rr::{RrMode, RrWait};

use super::counters::FlowCounters;

/// Flags for every engine thread of one side.
#[derive(Debug, Default)]
pub struct EngineFlags {
    /// No new transactions; finish the outstanding ones, then end.
    pub stop: AtomicBool,
    /// End now.
    pub abort: AtomicBool,
    /// Engine threads that have returned their results. Counted before
    /// the thread's last wake-up goes out, so the loop that wakes sees it
    /// (a JoinHandle is not finished until the thread has exited).
    pub ended: AtomicUsize,
}

/// What an engine thread hands back for one flow it owned.
pub struct FlowResult {
    pub id: u32,
    pub local: String,
    pub remote: String,
    pub latency: Option<LatencyRecorder>,
    pub connect: Option<LatencyRecorder>,
    pub end: FlowEnd,
    pub end_at: Time,
    /// The transport's own section over the test (QUIC's).
    pub transport: Option<xferlab_core::transport::TransportSection>,
}

/// How often idle engine threads look at the stop and abort flags.
pub const FLAG_POLL: Duration = Duration::from_millis(20);

pub struct RrSide {
    mode: RrMode,
    /// How this end's engine threads wait (resolved, never `Auto`).
    wait: RrWait,
    start: Time,
    clock: IntervalClock,
    next_boundary: Option<f64>,
    pub counters: Arc<[FlowCounters]>,
    meters: Vec<TxMeter>,
    pub flags: Arc<EngineFlags>,
    threads: Vec<JoinHandle<Vec<FlowResult>>>,
    /// Addresses for flows no thread reports itself (server crr/udp).
    default_local: String,
    default_remote: String,
    warnings: Vec<String>,
    stopped_at: Option<Time>,
}

impl RrSide {
    pub fn new(mode: RrMode, wait: RrWait, flows: u32, clock: IntervalClock) -> RrSide {
        let counters: Arc<[FlowCounters]> = (0..flows).map(|_| FlowCounters::default()).collect();
        RrSide {
            mode,
            wait,
            start: clock::now(),
            clock,
            next_boundary: clock.next_boundary(0.0),
            counters,
            meters: (0..flows).map(|_| TxMeter::new(clock)).collect(),
            flags: Arc::new(EngineFlags::default()),
            threads: Vec::new(),
            default_local: String::new(),
            default_remote: String::new(),
            warnings: Vec::new(),
            stopped_at: None,
        }
    }

    /// rr over QUIC, client: every flow gets a slot for its connection's
    /// counters, read into its intervals' `quic` section. Before the
    /// engine threads start.
    #[cfg(feature = "quic")]
    pub fn track_quic(&mut self) {
        self.counters = (0..self.meters.len())
            .map(|_| FlowCounters {
                quic: Some(Default::default()),
                ..FlowCounters::default()
            })
            .collect();
    }

    /// Restarts the clock (the test starts now).
    pub fn set_start(&mut self, at: Time) {
        self.start = at;
        self.next_boundary = self.clock.next_boundary(0.0);
    }

    pub fn started_at(&self) -> Time {
        self.start
    }

    pub fn set_default_addrs(&mut self, local: String, remote: String) {
        self.default_local = local;
        self.default_remote = remote;
    }

    pub fn add_thread(&mut self, t: JoinHandle<Vec<FlowResult>>) {
        self.threads.push(t);
    }

    pub fn next_tick(&self) -> Option<Time> {
        self.next_boundary
            .map(|b| self.start + Duration::from_secs_f64(b))
    }

    /// Samples every flow if a boundary has passed; returns the interval
    /// of all flows summed, for live output.
    pub fn tick(&mut self, now: Time) -> Option<RrInterval> {
        let boundary = self.next_boundary?;
        let t = now.duration_since(self.start).as_secs_f64();
        if t < boundary {
            return None;
        }
        self.next_boundary = self.clock.next_boundary(boundary);
        for (m, c) in self.meters.iter_mut().zip(self.counters.iter()) {
            m.sample(boundary, c.reading());
        }
        sum_intervals(self.meters.iter().map(|m| m.intervals()))
            .last()
            .cloned()
            .filter(|_| self.clock.interval_s > 0.0)
    }

    pub fn stop(&mut self, now: Time) {
        if self.stopped_at.is_none() {
            self.stopped_at = Some(now);
            self.flags.stop.store(true, Ordering::Relaxed);
        }
    }

    pub fn stopped_at(&self) -> Option<Time> {
        self.stopped_at
    }

    pub fn abort(&mut self, why: &str) {
        if !self.flags.abort.swap(true, Ordering::Relaxed) {
            self.warnings.push(why.to_string());
        }
    }

    pub fn all_done(&self) -> bool {
        // A thread that panicked never counts itself, but has exited.
        self.flags.ended.load(Ordering::Acquire) >= self.threads.len()
            || self.threads.iter().all(|t| t.is_finished())
    }

    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Joins the threads and builds the report.
    pub fn finish(mut self) -> RrSideReport {
        if !self.all_done() && self.stopped_at.is_none() {
            self.flags.abort.store(true, Ordering::Relaxed);
        }
        let now = clock::now();
        let mut results: Vec<Option<FlowResult>> = (0..self.meters.len()).map(|_| None).collect();
        for t in std::mem::take(&mut self.threads) {
            match t.join() {
                Ok(rs) => {
                    for r in rs {
                        if let Some(slot) = results.get_mut(r.id as usize) {
                            *slot = Some(r);
                        }
                    }
                }
                Err(_) => self.warnings.push("an rr engine thread panicked".into()),
            }
        }
        let mut merged = LatencyRecorder::new(3);
        let mut merged_connect = LatencyRecorder::new(3);
        let mut any_connect = false;
        let mut flows = Vec::with_capacity(self.meters.len());
        let meters = std::mem::take(&mut self.meters);
        for (id, m) in meters.into_iter().enumerate() {
            let r = results[id].take();
            let at = r.as_ref().map_or(now, |r| r.end_at);
            let t = at.duration_since(self.start).as_secs_f64();
            let (intervals, total) = m.finish(t, self.counters[id].reading());
            let (local, remote, end, lat, con, transport) = match r {
                Some(r) => (r.local, r.remote, r.end, r.latency, r.connect, r.transport),
                None => (
                    self.default_local.clone(),
                    self.default_remote.clone(),
                    if self.flags.abort.load(Ordering::Relaxed) {
                        FlowEnd::Aborted(crate::transport::flow::ABORTED.into())
                    } else {
                        FlowEnd::Completed
                    },
                    None,
                    None,
                    None,
                ),
            };
            if let Some(l) = &lat {
                merged.merge(l);
            }
            if let Some(c) = &con {
                merged_connect.merge(c);
                any_connect = true;
            }
            flows.push(RrFlowReport {
                id: id as u32,
                local,
                remote,
                intervals,
                total,
                latency: lat.as_ref().and_then(LatencyRecorder::summary),
                connect: con.as_ref().and_then(LatencyRecorder::summary),
                end,
                transport,
            });
        }
        let total = sum_totals(flows.iter().map(|f| &f.total));
        let sums = sum_intervals(flows.iter().map(|f| f.intervals.as_slice()));
        RrSideReport {
            mode: self.mode,
            wait: Some(self.wait),
            sums,
            total,
            latency: merged.summary(),
            percentiles: merged.percentiles(),
            connect: if any_connect {
                merged_connect.summary()
            } else {
                None
            },
            flows,
        }
    }
}

impl Drop for RrSide {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.flags.abort.store(true, Ordering::Relaxed);
            for t in self.threads.drain(..) {
                t.join().ok();
            }
        }
    }
}

/// The per-flow histogram precision: 3 significant digits for a few
/// flows, 2 (about 30 KB each instead of 230 KB) for many.
pub fn flow_digits(flows: u32) -> u8 {
    if flows > 64 {
        2
    } else {
        3
    }
}
