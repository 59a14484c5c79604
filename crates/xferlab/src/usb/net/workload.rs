//! A `usb net` run as the driver's [`Workload`]: the link's two threads,
//! its two directions as flows (tx: TAP to bulk OUT, c2s sender; rx: bulk
//! IN to TAP, s2c receiver) read at each interval boundary, the stop, and
//! at the end the interface given back and this side's report.

use std::sync::Arc;
use std::time::Duration;

use xferlab_core::interval::IntervalClock;
use xferlab_core::result::{FlowRole, SideTransportReport};
use xferlab_core::spec::FlowDirection;
use xferlab_core::time::Time;
use xferlab_core::usb::net::report::ThreadUse;

use super::link::{Shared, Threads};
use super::outcome::{self, LinkShape};
use crate::driver::{Finished, Workload};
use crate::output::{FlowStart, LiveFlow, Reporter};
use crate::sys::clock;
use crate::usb::alone::{self, MeteredFlow};

/// What a device that went away leaves in the side's warnings; the run
/// still ends well (exit 0): the link is over, not broken.
pub const DEVICE_GONE: &str = "the device went away: the link ended";

pub struct NetWorkload {
    shared: Arc<Shared>,
    threads: Threads,
    /// tx, rx.
    flows: [MeteredFlow; 2],
    local: String,
    remote: String,
    clock: IntervalClock,
    /// The next interval boundary, in seconds since `start`.
    boundary: Option<f64>,
    start: Time,
    cpu_start: (f64, f64),
    warnings: Vec<String>,
    info: nusb::DeviceInfo,
    shape: LinkShape,
}

/// Where the figures of a run come from: the link, its threads, and the
/// device to give back at the end.
pub struct Running {
    pub shared: Arc<Shared>,
    pub threads: Threads,
    pub info: nusb::DeviceInfo,
    pub shape: LinkShape,
    /// The TAP's name and the device's address, for the flows.
    pub local: String,
    pub remote: String,
}

impl NetWorkload {
    pub fn new(r: Running, clock: IntervalClock, start: Time, cpu_start: (f64, f64)) -> Self {
        let flow = |id, direction, role| MeteredFlow::new(id, direction, role, clock);
        NetWorkload {
            shared: r.shared,
            threads: r.threads,
            flows: [
                flow(0, FlowDirection::C2s, FlowRole::Sender),
                flow(1, FlowDirection::S2c, FlowRole::Receiver),
            ],
            local: r.local,
            remote: r.remote,
            clock,
            boundary: clock.next_boundary(0.0),
            start,
            cpu_start,
            warnings: Vec::new(),
            info: r.info,
            shape: r.shape,
        }
    }

    pub fn flow_starts(&self) -> Vec<FlowStart> {
        self.flows
            .iter()
            .map(|f| f.start(&self.local, &self.remote))
            .collect()
    }

    /// Bytes of each direction so far: tx sent, rx received.
    fn bytes(&self) -> [u64; 2] {
        use std::sync::atomic::Ordering::Relaxed;
        [
            self.shared.tx.bytes.load(Relaxed),
            self.shared.rx.bytes.load(Relaxed),
        ]
    }

    fn stopped(&self) -> bool {
        self.threads.tx.is_finished() && self.threads.rx.is_finished()
    }
}

impl Workload for NetWorkload {
    /// At each boundary: both directions' interval.
    fn tick(&mut self, now: Time, out: Option<&mut dyn Reporter>) {
        let t = now.duration_since(self.start).as_secs_f64();
        let Some(b) = self.boundary.filter(|&b| t >= b) else {
            return;
        };
        let bytes = self.bytes();
        let live: Vec<LiveFlow> = self
            .flows
            .iter_mut()
            .zip(bytes)
            .filter_map(|(f, n)| f.sample(t, b, n))
            .collect();
        if let Some(out) = out.filter(|_| live.len() == 2) {
            let _ = out.interval(&live);
        }
        self.boundary = self.clock.next_boundary(t);
    }

    fn next_tick(&self) -> Option<Time> {
        let b = self.boundary.filter(|_| !self.stopped())?;
        self.start.checked_add(Duration::from_secs_f64(b))
    }

    /// Both threads see the flag within one bounded poll (50 ms).
    fn stop(&mut self, _now: Time) {
        self.shared.stop();
    }

    fn abort(&mut self, why: &str) {
        self.shared.stop();
        self.warnings.push(why.to_string());
    }

    /// Both threads ended: stopped, or the device went (the receiving
    /// thread then stops the sending one).
    fn all_done(&self) -> bool {
        self.stopped()
    }

    /// A link has no end of its own: only `-t`, Ctrl-C or the device
    /// going away end it.
    fn limit_reached(&self) -> bool {
        false
    }

    fn finish(self: Box<Self>) -> Finished {
        let NetWorkload {
            shared,
            threads,
            flows,
            local,
            remote,
            start,
            cpu_start,
            mut warnings,
            info,
            shape,
            ..
        } = *self;
        shared.stop();
        let mut errors = Vec::new();
        let tx = threads.tx.join().unwrap_or_else(|_| {
            errors.push("the link's sending thread panicked".to_string());
            ThreadUse::default()
        });
        let rx = threads.rx.join().ok();
        if rx.is_none() {
            errors.push("the link's receiving thread panicked".to_string());
        }
        let wall = clock::since(start).as_secs_f64();
        let report = match Arc::try_unwrap(shared) {
            Ok(mut sh) => {
                sh.urbs.cancel_all(Duration::from_secs(1));
                if sh.lost() {
                    warnings.push(DEVICE_GONE.to_string());
                }
                let buffers = sh.urbs.layout().label();
                let bytes = {
                    use std::sync::atomic::Ordering::Relaxed;
                    [sh.tx.bytes.load(Relaxed), sh.rx.bytes.load(Relaxed)]
                };
                let section = outcome::section(shape, buffers, &sh, tx, rx);
                // Releasing the interface asks the kernel to bind a driver
                // to it again.
                drop(sh);
                outcome::rebind(&info);
                Some((section, bytes))
            }
            Err(_) => {
                errors.push("the link's threads still hold it: the device stays detached".into());
                None
            }
        };
        let (section, bytes) = match report {
            Some((s, b)) => (Some(s), b),
            None => (None, [0, 0]),
        };
        let flows = flows
            .into_iter()
            .zip(bytes)
            .map(|(f, n)| f.finish(wall, n, &local, &remote))
            .collect();
        let cpu = crate::usb::outcome::cpu_since(cpu_start, wall);
        let transport = section.map(SideTransportReport::UsbNet);
        let report = alone::side(flows, wall, cpu, warnings, transport);
        Finished { report, errors }
    }
}
