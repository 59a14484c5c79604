//! A bulk run as the driver's [`Workload`]: the endpoints' data threads,
//! an interval of each at every boundary, the stop, and at the end the
//! host's side of the result with what went wrong.

use crate::sys::clock;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use xferlab_core::time::Time;

use xferlab_core::interval::IntervalClock;
use xferlab_core::usb::stats::UsbReport;

use super::pipe::Pipe;
use super::side;
use crate::driver::{Finished, Workload};
use crate::output::Reporter;
use crate::usb::engine::RunControl;
use crate::usb::outcome;

pub struct BulkWorkload {
    pipes: Vec<Pipe>,
    ctl: Arc<RunControl>,
    clock: IntervalClock,
    /// The next interval boundary, in seconds since `start`.
    boundary: Option<f64>,
    start: Time,
    /// The device's `usb` section; the pipes' reports join it at the end.
    usb: UsbReport,
    /// The process's CPU times (user, system) at the start.
    cpu_start: (f64, f64),
    warnings: Vec<String>,
}

impl BulkWorkload {
    /// The run of `pipes`, started at `start` under `ctl`.
    pub fn new(
        pipes: Vec<Pipe>,
        ctl: Arc<RunControl>,
        clock: IntervalClock,
        start: Time,
        usb: UsbReport,
        cpu_start: (f64, f64),
    ) -> Self {
        BulkWorkload {
            pipes,
            ctl,
            clock,
            boundary: clock.next_boundary(0.0),
            start,
            usb,
            cpu_start,
            warnings: Vec::new(),
        }
    }

    fn stopped(&self) -> bool {
        self.ctl.stop.load(Relaxed)
    }
}

impl Workload for BulkWorkload {
    /// At each boundary before the stop: every endpoint's interval. The
    /// tail after the stop is closed in `finish`.
    fn tick(&mut self, now: Time, out: Option<&mut dyn Reporter>) {
        let t = now.duration_since(self.start).as_secs_f64();
        let Some(b) = self.boundary.filter(|&b| t >= b && !self.stopped()) else {
            return;
        };
        let (flows, usb): (Vec<_>, Vec<_>) =
            self.pipes.iter_mut().filter_map(|p| p.sample(t, b)).unzip();
        if let Some(out) = out {
            let _ = out.usb_interval(&flows, &usb);
        }
        self.boundary = self.clock.next_boundary(t);
    }

    fn next_tick(&self) -> Option<Time> {
        let b = self.boundary.filter(|_| !self.stopped())?;
        self.start.checked_add(Duration::from_secs_f64(b))
    }

    /// Every endpoint cancels what it has queued and ends (a transfer the
    /// device never completes is given up after --transfer-timeout).
    fn stop(&mut self, _now: Time) {
        self.ctl.stop.store(true, Relaxed);
    }

    /// As `stop`: an endpoint's thread cannot be ended sooner.
    fn abort(&mut self, why: &str) {
        self.ctl.stop.store(true, Relaxed);
        self.warnings.push(why.to_string());
    }

    fn all_done(&self) -> bool {
        self.pipes.iter().all(Pipe::is_finished)
    }

    fn finish(self: Box<Self>) -> Finished {
        let BulkWorkload {
            pipes,
            ctl,
            start,
            usb,
            cpu_start,
            warnings,
            ..
        } = *self;
        ctl.stop.store(true, Relaxed);
        let wall = clock::since(start).as_secs_f64();
        let ends = pipes.into_iter().map(|p| p.finish(wall)).collect();
        side::side(usb, ends, outcome::cpu_since(cpu_start, wall), warnings)
    }
}
