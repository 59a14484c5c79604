//! The rr pattern's [`Workload`]: the engine threads of the rr flows and
//! the optional background stream flows, ended and reported together.

use crate::sys::clock;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use xferlab_core::time::Time;

use xferlab_core::counters::CounterSnapshot;
use xferlab_core::result::{Endpoint, KernelCounters, SideReport};

use super::side::RrSide;
use crate::driver::{Finished, Workload};
use crate::output::Reporter;
use crate::stream::Side;
use crate::sys::cpu::CpuTally;

/// One side of a running rr test.
pub struct RrWorkload {
    pub rr: RrSide,
    pub background: Option<Side>,
    pub endpoint: Endpoint,
    pub embedded: bool,
    pub tally: Arc<CpuTally>,
    /// The interface counters when the test started, and their warnings.
    pub counters_before: (CounterSnapshot, Vec<String>),
    pub local_ip: IpAddr,
    /// A server cuts rr flows still busy this long after the stop (the
    /// client's own flows end when their transactions are answered or
    /// time out).
    pub rr_drain: Option<Duration>,
}

impl Workload for RrWorkload {
    fn capped_by_plan(&self) -> bool {
        false
    }

    fn tick(&mut self, now: Time, mut out: Option<&mut dyn Reporter>) {
        if let Some(b) = self.background.as_mut() {
            b.reap();
            let live = b.tick(now);
            if let Some(out) = out.as_deref_mut().filter(|_| !live.is_empty()) {
                out.interval(&live).ok();
            }
        }
        if let Some(iv) = self.rr.tick(now) {
            if let Some(out) = out {
                out.rr_interval(&iv).ok();
            }
        }
        let overdue = self
            .rr_drain
            .zip(self.rr.stopped_at())
            .is_some_and(|(d, t)| now >= t + d);
        if overdue && !self.rr.all_done() {
            self.rr
                .abort("rr flows still busy 5 s after the client stopped: cut");
        }
    }

    /// The next interval boundary, or the moment a server cuts rr flows
    /// still busy after the stop.
    fn next_tick(&self) -> Option<Time> {
        let bg = self.background.as_ref().and_then(Side::next_tick);
        let cut = self
            .rr_drain
            .zip(self.rr.stopped_at())
            .filter(|_| !self.rr.all_done())
            .map(|(d, t)| t + d);
        self.rr.next_tick().into_iter().chain(bg).chain(cut).min()
    }

    fn stop(&mut self, now: Time) {
        self.rr.stop(now);
        if let Some(b) = self.background.as_mut() {
            b.stop(now);
        }
    }

    fn abort(&mut self, why: &str) {
        self.rr.abort(why);
        if let Some(b) = self.background.as_mut() {
            b.abort(why);
        }
    }

    fn all_done(&self) -> bool {
        self.rr.all_done() && self.background.as_ref().is_none_or(Side::all_done)
    }

    /// The peer is told once every transaction has been answered (or
    /// given up on), so both ends count the same ones.
    fn quiesced(&self) -> bool {
        self.rr.all_done()
    }

    /// This side's report: the background group (if any) in `flows`, the
    /// rr group in `rr`, CPU and counters over the whole test.
    fn finish(self: Box<Self>) -> Finished {
        let RrWorkload {
            mut rr,
            background,
            endpoint,
            embedded,
            tally,
            counters_before: before,
            local_ip,
            ..
        } = *self;
        let start = rr.started_at();
        let mut warnings = rr.take_warnings();
        let rr = rr.finish();
        let mut report = match background {
            Some(b) => b.finish(),
            None => {
                let wall = clock::since(start).as_secs_f64();
                let iface = crate::sys::counters::interface_for(local_ip);
                let (after, more) = crate::sys::counters::snapshot(iface.as_deref());
                warnings.extend(more);
                SideReport {
                    endpoint,
                    host: crate::sys::host::host_info(),
                    embedded,
                    duration_s: rr.total.end_s,
                    flows: Vec::new(),
                    sums: Vec::new(),
                    cpu: tally.usage(wall),
                    counters: KernelCounters {
                        interface: iface,
                        deltas: after.delta(&before.0),
                    },
                    warnings: before.1,
                    pattern: xferlab_core::result::PatternReport::Stream,
                    transport: None,
                }
            }
        };
        report.warnings.extend(warnings);
        report.duration_s = report.duration_s.max(rr.total.end_s);
        report.pattern = xferlab_core::result::PatternReport::Rr(rr);
        report.into()
    }
}
