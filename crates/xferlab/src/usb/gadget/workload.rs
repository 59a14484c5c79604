//! A gadget run as the driver's [`Workload`]: the device is made before
//! the loop (as bulk claims its device), the loop keeps `-t`, the
//! intervals and Ctrl-C, and the workload's stop ends the function. The
//! flows are what the FunctionFS threads count (IN and OUT, from their
//! atomics, read only at interval boundaries); the kernel's own
//! functions have no threads here and no flows.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use xferlab_core::interval::IntervalClock;
use xferlab_core::result::FlowRole;
use xferlab_core::spec::FlowDirection;
use xferlab_core::time::Time;
use xferlab_core::usb::gadget::UsbGadgetReport;

use super::ffs_io::{DirCounters, Shared};
use super::net_io::NetCounters;
use super::outcome::{self, Teardown};
use super::raw::RawRun;
use super::setup::Running;
use crate::driver::{Finished, Workload};
use crate::output::{FlowStart, Reporter};
use crate::sys::clock;
use crate::usb::alone::MeteredFlow;
use crate::usb::outcome::cpu_since;

/// The device being served.
pub enum Served {
    Configfs(Running),
    Raw(RawRun),
}

/// One direction the gadget's own threads move, metered as the other
/// peerless verbs' flows are ([`MeteredFlow`]).
pub struct DirFlow {
    is_in: bool,
    flow: MeteredFlow,
}

impl DirFlow {
    fn counters<'a>(&self, s: &'a Shared) -> &'a DirCounters {
        if self.is_in {
            &s.input
        } else {
            &s.output
        }
    }

    fn label(&self) -> &'static str {
        if self.is_in {
            "IN"
        } else {
            "OUT"
        }
    }
}

/// IN and OUT when the gadget's threads move the data, else none.
pub fn flows(threads: bool, clock: IntervalClock) -> Vec<DirFlow> {
    if !threads {
        return Vec::new();
    }
    [true, false]
        .into_iter()
        .zip(0u32..)
        .map(|(is_in, id)| {
            // The gadget is the device end: IN goes to the host (s2c, it
            // sends), OUT comes from it (c2s, it receives).
            let (direction, role) = if is_in {
                (FlowDirection::S2c, FlowRole::Sender)
            } else {
                (FlowDirection::C2s, FlowRole::Receiver)
            };
            DirFlow {
                is_in,
                flow: MeteredFlow::new(id, direction, role, clock),
            }
        })
        .collect()
}

/// The remote end every gadget flow names.
const HOST: &str = "usb host";

/// The flows as they start, for [`crate::output::StartInfo`].
pub fn flow_starts(flows: &[DirFlow], udc: &str) -> Vec<FlowStart> {
    flows
        .iter()
        .map(|f| f.flow.start(&format!("{udc} {}", f.label()), HOST))
        .collect()
}

pub struct GadgetWorkload {
    pub served: Served,
    /// The `usb_gadget` section as set up; the counts join it at the end.
    pub section: UsbGadgetReport,
    pub shared: Arc<Shared>,
    pub net: Arc<NetCounters>,
    pub flows: Vec<DirFlow>,
    pub clock: IntervalClock,
    /// The next interval boundary, in seconds since `start`.
    pub boundary: Option<f64>,
    pub start: Time,
    /// The process's CPU times (user, system) at the start.
    pub cpu_start: (f64, f64),
    /// The gadget's `--name`, for the leftover check.
    pub name: String,
    pub udc: String,
    pub stopped: bool,
    /// The drain ran out: threads still blocked are given up on.
    pub cut: bool,
    pub warnings: Vec<String>,
}

/// How long the threads may take to end after the stop: the unbind (or
/// SIGUSR1 for raw-gadget) ends their calls at once, so this only bounds
/// a stuck one.
pub const DRAIN: Duration = Duration::from_secs(5);

impl GadgetWorkload {
    fn end(&mut self) {
        self.stopped = true;
        match &mut self.served {
            Served::Configfs(r) => r.stop(),
            Served::Raw(r) => r.kick(),
        }
    }
}

impl Workload for GadgetWorkload {
    /// At each boundary before the stop: each direction's bytes; after
    /// the stop, raw-gadget's threads are woken until they have seen it.
    fn tick(&mut self, now: Time, out: Option<&mut dyn Reporter>) {
        if self.stopped {
            if let Served::Raw(r) = &self.served {
                r.kick();
            }
            return;
        }
        let t = now.duration_since(self.start).as_secs_f64();
        let Some(b) = self.boundary.filter(|&b| t >= b) else {
            return;
        };
        let mut live = Vec::with_capacity(self.flows.len());
        for f in &mut self.flows {
            let bytes = f.counters(&self.shared).bytes.load(Relaxed);
            live.extend(f.flow.sample(t, b, bytes));
        }
        if let Some(out) = out {
            let _ = out.interval(&live);
        }
        self.boundary = self.clock.next_boundary(t);
    }

    fn next_tick(&self) -> Option<Time> {
        let b = self.boundary.filter(|_| !self.stopped)?;
        self.start.checked_add(Duration::from_secs_f64(b))
    }

    /// Configfs: the stop flag and the unbind, which ends every transfer
    /// in flight; raw-gadget: the flag and SIGUSR1 to each thread.
    fn stop(&mut self, _now: Time) {
        self.end();
    }

    fn abort(&mut self, why: &str) {
        self.end();
        self.cut = true;
        self.warnings.push(why.to_string());
    }

    /// Before the stop, only a raw-gadget thread that ended by itself (the
    /// host went away) ends the run; a configfs function serves until `-t`
    /// or Ctrl-C. After it, every thread has ended (none for a kernel
    /// function), or the drain gave up on them.
    fn all_done(&self) -> bool {
        match &self.served {
            Served::Raw(r) if !self.stopped => r.any_finished(),
            _ if !self.stopped => false,
            _ if self.cut => true,
            Served::Configfs(r) => r.threads.iter().all(|t| t.is_finished()),
            Served::Raw(r) => r.all_finished(),
        }
    }

    /// No limit of its own: `-t` is the planned end, else Ctrl-C.
    fn limit_reached(&self) -> bool {
        false
    }

    fn finish(self: Box<Self>) -> Finished {
        let GadgetWorkload {
            served,
            section,
            shared,
            net,
            flows,
            start,
            cpu_start,
            name,
            udc,
            warnings,
            ..
        } = *self;
        let wall = clock::since(start).as_secs_f64();
        let teardown = match served {
            Served::Configfs(mut r) => {
                r.stop();
                // What the drain left still running is not waited for again.
                r.join(Instant::now());
                Teardown::Configfs {
                    leftover: r.remove(&name),
                }
            }
            Served::Raw(r) => Teardown::Raw(r.finish()),
        };
        let flows = flows
            .into_iter()
            .map(|f| {
                let bytes = f.counters(&shared).bytes.load(Relaxed);
                let local = format!("{udc} {}", f.label());
                f.flow.finish(wall, bytes, &local, HOST)
            })
            .collect();
        outcome::side(outcome::Ended {
            section,
            shared: &shared,
            net: &net,
            flows,
            wall,
            cpu: cpu_since(cpu_start, wall),
            warnings,
            teardown,
        })
    }
}
