//! `usb mon` as the driver's [`Workload`]: the [`Monitor`] reads the bus
//! on a thread of its own and hands each interval it cuts to the loop,
//! which shows it as two flows (host OUT: c2s sender; host IN: s2c
//! receiver) through the common reporter. The bus report itself leaves
//! through a channel when the workload finishes: it goes into the
//! result's `usbmon`, not into the side.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use anyhow::{anyhow, Context};
use xferlab_core::interval::IntervalClock;
use xferlab_core::result::FlowRole;
use xferlab_core::spec::FlowDirection;
use xferlab_core::time::Time;
use xferlab_core::usb::usbmon::{BusReport, BusSample};

use super::monitor::Monitor;
use crate::driver::{Finished, Workload};
use crate::output::{FlowStart, LiveFlow, Reporter};
use crate::sys::clock;
use crate::usb::alone::{self, MeteredFlow};
use crate::usb::outcome;

/// One direction of the bus as a flow.
struct BusFlow {
    flow: MeteredFlow,
    /// Bytes so far (the samples carry each interval's).
    bytes: u64,
}

impl BusFlow {
    fn new(id: u32, direction: FlowDirection, role: FlowRole, clock: IntervalClock) -> Self {
        BusFlow {
            flow: MeteredFlow::new(id, direction, role, clock),
            bytes: 0,
        }
    }

    /// Feeds one cut interval; the live flow when the meter closed one.
    fn add(&mut self, s: &BusSample) -> Option<LiveFlow> {
        self.bytes += s.bytes;
        self.flow.sample(s.end_s, s.end_s, self.bytes)
    }
}

pub struct MonWorkload {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<anyhow::Result<BusReport>>,
    /// (host IN, host OUT) of each interval the monitor cut.
    cuts: mpsc::Receiver<(BusSample, BusSample)>,
    /// host OUT, host IN.
    flows: [BusFlow; 2],
    local: String,
    remote: String,
    start: Time,
    cpu_start: (f64, f64),
    warnings: Vec<String>,
    /// Where the bus report goes at the end.
    report_to: mpsc::Sender<BusReport>,
}

impl MonWorkload {
    /// Starts `mon` on its thread, cutting every `step` seconds; each cut
    /// wakes the loop through `wake`.
    pub fn start(
        mon: Monitor,
        step: f64,
        wake: Arc<dyn Fn(u32) + Send + Sync>,
        report_to: mpsc::Sender<BusReport>,
        cpu_start: (f64, f64),
    ) -> anyhow::Result<MonWorkload> {
        let (local, remote) = (mon.path().to_string(), mon.address());
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (tx, cuts) = mpsc::channel();
        let start = clock::now();
        let thread = std::thread::Builder::new()
            .name("xl-usbmon".into())
            .spawn(move || {
                // Once per interval, not per event: the clone of the two
                // samples and the send stay off the reader's hot path.
                let cut_to = |i: &BusSample, o: &BusSample| {
                    if tx.send((i.clone(), o.clone())).is_ok() {
                        wake(0);
                    }
                };
                let r = mon.run(
                    std::time::Duration::from_secs_f64(step),
                    || flag.load(Relaxed),
                    cut_to,
                );
                // An ended reader is this run's only flow ending.
                wake(0);
                r
            })
            .context("cannot start the usbmon thread")?;
        let clock = IntervalClock::new(step, 0.0);
        Ok(MonWorkload {
            stop,
            thread,
            cuts,
            flows: [
                BusFlow::new(0, FlowDirection::C2s, FlowRole::Sender, clock),
                BusFlow::new(1, FlowDirection::S2c, FlowRole::Receiver, clock),
            ],
            local,
            remote,
            start,
            cpu_start,
            warnings: Vec::new(),
            report_to,
        })
    }

    /// The flows as the run starts.
    pub fn flow_starts(&self) -> Vec<FlowStart> {
        self.flows
            .iter()
            .map(|f| f.flow.start(&self.local, &self.remote))
            .collect()
    }
}

/// Every interval cut so far, through the meters; the live flows of each
/// to `out`.
fn drain(
    cuts: &mpsc::Receiver<(BusSample, BusSample)>,
    flows: &mut [BusFlow; 2],
    mut out: Option<&mut dyn Reporter>,
) {
    while let Ok((inn, o)) = cuts.try_recv() {
        let live: Vec<LiveFlow> = [flows[0].add(&o), flows[1].add(&inn)]
            .into_iter()
            .flatten()
            .collect();
        if let Some(out) = out.as_deref_mut().filter(|_| live.len() == 2) {
            let _ = out.interval(&live);
        }
    }
}

impl Workload for MonWorkload {
    /// The monitor keeps its own intervals (its reads must not wait for
    /// the loop); the loop shows them as they come.
    fn tick(&mut self, _now: Time, out: Option<&mut dyn Reporter>) {
        if !self.stop.load(Relaxed) {
            drain(&self.cuts, &mut self.flows, out);
        }
    }

    /// Each cut wakes the loop: nothing to wait for.
    fn next_tick(&self) -> Option<Time> {
        None
    }

    /// The reader looks at the flag at least every 20 ms.
    fn stop(&mut self, _now: Time) {
        self.stop.store(true, Relaxed);
    }

    fn abort(&mut self, why: &str) {
        self.stop.store(true, Relaxed);
        self.warnings.push(why.to_string());
    }

    /// The reader ended: stopped, or it could not read (a device gone
    /// away ends nothing; usbmon still reads its bus).
    fn all_done(&self) -> bool {
        self.thread.is_finished()
    }

    fn finish(self: Box<Self>) -> Finished {
        let MonWorkload {
            stop,
            thread,
            cuts,
            mut flows,
            local,
            remote,
            start,
            cpu_start,
            warnings,
            report_to,
        } = *self;
        stop.store(true, Relaxed);
        let joined = thread.join();
        // The tail the reader cut at its stop.
        drain(&cuts, &mut flows, None);
        let wall = clock::since(start).as_secs_f64();
        let mut errors = Vec::new();
        // The flows end on the bus report's totals (a tail shorter than
        // 1 ms is in them but in no interval), so both say the same.
        let (end_s, totals) = match joined
            .map_err(|_| anyhow!("the usbmon thread panicked"))
            .and_then(|r| r)
        {
            Ok(bus) => {
                let t = &bus.host_out.total;
                let end = (t.end_s, [t.bytes, bus.host_in.total.bytes]);
                let _ = report_to.send(bus);
                end
            }
            Err(e) => {
                errors.push(format!("{e:#}"));
                (wall, [flows[0].bytes, flows[1].bytes])
            }
        };
        let flows = flows
            .into_iter()
            .zip(totals)
            .map(|(f, bytes)| f.flow.finish(end_s, bytes, &local, &remote))
            .collect();
        let cpu = outcome::cpu_since(cpu_start, wall);
        let report = alone::side(flows, end_s, cpu, warnings, None);
        Finished { report, errors }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(start_s: f64, end_s: f64, bytes: u64) -> BusSample {
        BusSample {
            start_s,
            end_s,
            bytes,
            frame_bytes: 0,
            transfers: 0,
            transfers_per_second: 0.0,
            frames: 0,
            frames_per_transfer: 0.0,
            frames_per_transfer_hist: Vec::new(),
            undecoded: 0,
            errors: 0,
            mbytes_per_second: 0.0,
            bus_percent: 0.0,
        }
    }

    /// Each cut of the monitor is one interval of its direction's flow,
    /// with the cut's bytes, and the flow's total is the bus total.
    #[test]
    fn bus_cuts_become_flow_intervals() {
        let clock = IntervalClock::new(1.0, 0.0);
        let mut f = BusFlow::new(0, FlowDirection::C2s, FlowRole::Sender, clock);
        let a = f.add(&cut(0.0, 1.0, 1_000_000)).expect("an interval");
        assert_eq!(a.interval.bytes, 1_000_000);
        assert_eq!(a.interval.bits_per_second, 8e6);
        let b = f.add(&cut(1.0, 2.0, 500_000)).expect("an interval");
        assert_eq!((b.interval.start_s, b.interval.bytes), (1.0, 500_000));
        let flow = f.flow.finish(2.0, 1_500_000, "usbmon1", "usb 1.2");
        assert_eq!(flow.intervals.len(), 2);
        assert_eq!(flow.total.bytes_all, 1_500_000);
    }
}
