//! One endpoint of a bulk run as the driver's loop sees it: the data
//! thread it starts ([`engine::run_pipe`]), the counters it samples at
//! interval boundaries, and at the end the endpoint's flow report, its
//! `usb` pipe report and what went wrong.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;
use std::thread::JoinHandle;
use xferlab_core::time::Time;

use nusb::transfer::{Bulk, In, Out};
use xferlab_core::interval::{FlowMeter, IntervalClock, Reading};
use xferlab_core::result::{FlowEnd, FlowReport, FlowRole, SocketSettings};
use xferlab_core::spec::FlowDirection;
use xferlab_core::usb::descriptor::EndpointDesc;
use xferlab_core::usb::stats::{ErrorKind, UsbCounters, UsbPipeReport, UsbSample};
use xferlab_core::usb::Pattern;

use super::claim::Claimed;
use crate::output::{FlowStart, LiveFlow};
use crate::usb::engine::{self, LiveCounters, PipeOutcome, PipeSetup, RunControl};

/// What every endpoint's thread shares with the loop: the run's stop
/// flag and time origin, and the wake-up it sends when it ends.
#[derive(Clone)]
pub struct RunLink {
    pub ctl: Arc<RunControl>,
    pub start: Time,
    pub done: Arc<dyn Fn(u32) + Send + Sync>,
}

impl RunLink {
    /// Runs endpoint `flow`'s data path, then marks it `ended` and wakes
    /// the loop.
    fn run(
        self,
        flow: u32,
        ended: &AtomicBool,
        data_path: impl FnOnce(Time, Arc<RunControl>) -> PipeOutcome,
    ) -> PipeOutcome {
        let outcome = data_path(self.start, self.ctl);
        ended.store(true, Release);
        (self.done)(flow);
        outcome
    }
}

pub struct Pipe {
    flow_id: u32,
    ep: EndpointDesc,
    /// The flow's two ends, as the result names them.
    local: String,
    remote: String,
    transfer_size: u64,
    depth: u32,
    pattern: Pattern,
    live: Arc<LiveCounters>,
    /// Set by the data thread as it ends, before it wakes the loop.
    ended: Arc<AtomicBool>,
    meter: FlowMeter,
    /// The counters at the last boundary, and when it was.
    prev: UsbCounters,
    prev_t: f64,
    samples: Vec<UsbSample>,
    thread: JoinHandle<PipeOutcome>,
}

/// How one endpoint ended: its reports, or why it has none.
pub struct PipeEnd {
    pub flow: FlowReport,
    pub usb: UsbPipeReport,
    /// Why the run is not clean, one actionable line each.
    pub errors: Vec<String>,
}

impl Pipe {
    /// Starts the data thread of endpoint `ep` of `dev` as flow
    /// `flow_id`; times count from `link.start`.
    pub fn start(
        flow_id: u32,
        ep: EndpointDesc,
        dev: &Claimed,
        setup: PipeSetup,
        clock: IntervalClock,
        link: &RunLink,
    ) -> Result<Pipe, String> {
        let intf = dev.interface();
        let live = Arc::new(LiveCounters::default());
        let (transfer_size, depth, pattern) =
            (setup.size as u64, setup.depth as u32, setup.pattern);
        let ended = Arc::new(AtomicBool::new(false));
        let (l2, link2, e2) = (live.clone(), link.clone(), ended.clone());
        let no_endpoint = |e| format!("cannot open endpoint 0x{:02x}: {e}", ep.address);
        let thread = if ep.is_in() {
            let e = intf.endpoint::<Bulk, In>(ep.address).map_err(no_endpoint)?;
            std::thread::Builder::new()
                .name(format!("usb-in-{:02x}", ep.address))
                .spawn(move || {
                    link2.run(flow_id, &e2, |start, ctl| {
                        engine::run_pipe(e, true, setup, start, l2, ctl)
                    })
                })
        } else {
            let e = intf
                .endpoint::<Bulk, Out>(ep.address)
                .map_err(no_endpoint)?;
            std::thread::Builder::new()
                .name(format!("usb-out-{:02x}", ep.address))
                .spawn(move || {
                    link2.run(flow_id, &e2, |start, ctl| {
                        engine::run_pipe(e, false, setup, start, l2, ctl)
                    })
                })
        }
        .map_err(|e| format!("cannot start a thread: {e}"))?;
        Ok(Pipe {
            flow_id,
            ep,
            local: dev.local(&ep),
            remote: dev.remote(),
            transfer_size,
            depth,
            pattern,
            live,
            ended,
            meter: FlowMeter::new(clock, Reading::bytes(0)),
            prev: UsbCounters::default(),
            prev_t: 0.0,
            samples: Vec::new(),
            thread,
        })
    }

    /// The data thread ended (or died).
    pub fn is_finished(&self) -> bool {
        self.ended.load(Acquire) || self.thread.is_finished()
    }

    /// The host is the client: IN data flows from the device to it.
    fn direction(&self) -> FlowDirection {
        if self.ep.is_in() {
            FlowDirection::S2c
        } else {
            FlowDirection::C2s
        }
    }

    fn role(&self) -> FlowRole {
        if self.ep.is_in() {
            FlowRole::Receiver
        } else {
            FlowRole::Sender
        }
    }

    /// The flow as it starts, for [`crate::output::StartInfo`].
    pub fn flow_start(&self) -> FlowStart {
        FlowStart {
            id: self.flow_id,
            direction: self.direction(),
            role: self.role(),
            local: self.local.clone(),
            remote: self.remote.clone(),
        }
    }

    /// The endpoint's `usb` report before any transfer.
    pub fn report_start(&self) -> UsbPipeReport {
        UsbPipeReport {
            flow_id: self.flow_id,
            endpoint: self.ep.address,
            max_packet: self.ep.max_packet,
            transfer_size: self.transfer_size,
            depth: self.depth,
            pattern: self.pattern,
            intervals: Vec::new(),
            total: Default::default(),
        }
    }

    /// Interval boundary `boundary` passed, read at `t`: the interval just
    /// ended, when the meter closed one.
    pub fn sample(&mut self, t: f64, boundary: f64) -> Option<(LiveFlow, UsbSample)> {
        let c = self.live.read();
        self.meter.sample(t, boundary, Reading::bytes(c.bytes));
        let s = c.sample(&self.prev, self.prev_t, t);
        self.prev = c;
        self.prev_t = t;
        self.samples.push(s);
        let iv = self.meter.last_interval()?;
        let flow = LiveFlow {
            id: self.flow_id,
            direction: self.direction(),
            role: self.role(),
            interval: iv.clone(),
        };
        Some((flow, s))
    }

    /// Waits for the data thread and closes the books at the endpoint's
    /// last completion, or at `wall` seconds when it had none. Err when
    /// the thread panicked.
    pub fn finish(self, wall: f64) -> Result<PipeEnd, String> {
        let (direction, role) = (self.direction(), self.role());
        let Pipe {
            flow_id,
            ep,
            local,
            remote,
            transfer_size,
            depth,
            pattern,
            live,
            ended: _,
            meter,
            prev,
            prev_t,
            mut samples,
            thread,
        } = self;
        let outcome = thread
            .join()
            .map_err(|_| format!("endpoint 0x{:02x}: its thread panicked", ep.address))?;
        let c = live.read();
        let end_s = if outcome.end_s > 0.0 {
            outcome.end_s
        } else {
            wall
        };
        let (intervals, total) = meter.finish(end_s, Reading::bytes(c.bytes));
        // The meter either added a last (tail) interval or folded the tail
        // into its last one; the USB samples follow it.
        let tail = c.sample(&prev, prev_t, end_s.max(prev_t));
        if intervals.len() > samples.len() {
            samples.push(tail);
        } else if let Some(last) = samples.last_mut() {
            last.absorb(&tail, end_s);
        }
        let errors = problems(&ep, &c, &outcome);
        let latency = outcome.latency.summary().unwrap_or_default();
        let usb = UsbPipeReport {
            flow_id,
            endpoint: ep.address,
            max_packet: ep.max_packet,
            transfer_size,
            depth,
            pattern,
            intervals: samples,
            total: c.totals(total.end_s - total.start_s, latency),
        };
        let flow = FlowReport {
            id: flow_id,
            direction,
            role,
            local,
            remote,
            socket: SocketSettings::default(),
            intervals,
            total,
            end: match outcome.error {
                Some(e) => FlowEnd::Aborted(e),
                None => FlowEnd::Completed,
            },
        };
        Ok(PipeEnd { flow, usb, errors })
    }
}

/// What went wrong on one endpoint, one actionable line each: the error
/// that ended it, stalls it recovered from, data that broke the pattern.
fn problems(ep: &EndpointDesc, c: &UsbCounters, outcome: &PipeOutcome) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(e) = &outcome.error {
        out.push(e.clone());
    }
    let stalls = c.error(ErrorKind::Stall);
    if stalls > 0 && outcome.error.is_none() {
        out.push(format!(
            "endpoint 0x{:02x} stalled {stalls} times (each cleared and the run went on): the device halted it, \
             e.g. a SourceSink sink rejecting data that breaks its pattern (--pattern)",
            ep.address
        ));
    }
    if let Some(m) = &outcome.first_mismatch {
        out.push(format!(
            "pattern check failed in {} transfer(s); first: {m}",
            c.pattern_errors
        ));
    }
    out
}
