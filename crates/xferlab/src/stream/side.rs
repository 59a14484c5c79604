//! One endpoint's half of a stream test, the same code on client and
//! server: start the flow threads, sample them at interval boundaries, stop
//! or abort them, and fold everything into a [`SideReport`].

use crate::sys::clock;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use xferlab_core::time::Time;

use socket2::SockRef;
use xferlab_core::interval::{FlowMeter, IntervalClock, Reading};
use xferlab_core::result::{
    sum_intervals, Endpoint, FlowEnd, FlowReport, FlowRole, KernelCounters, SideReport, SizeSource,
    SocketSettings,
};
use xferlab_core::spec::{Direction, FlowDirection, FlowPlan, Knobs, TestSpec};

use crate::net::sockopt;
use crate::net::FlowSocket;
use crate::output::{FlowStart, LiveFlow};
use crate::session::PatternError;
use crate::sys::{self, cpu::CpuTally};
use crate::transport::datagram::DatagramWire;
use crate::transport::flow::{self, FlowOutcome, FlowShared, SideFlags, ABORTED};
use crate::transport::sizing::StreamSizes;
use crate::transport::{self, FlowJob, TransportIo};

/// Which flows a side sends on.
pub fn role_of(endpoint: Endpoint, direction: FlowDirection) -> FlowRole {
    match (endpoint, direction) {
        (Endpoint::Client, FlowDirection::C2s) | (Endpoint::Server, FlowDirection::S2c) => {
            FlowRole::Sender
        }
        _ => FlowRole::Receiver,
    }
}

/// Where this end runs a flow's data thread: the end's own CPU (`-A`),
/// else with `--pin-flows` the (id mod n)-th of the n CPUs this process
/// may use (`usable`), so that both ends of flow `id` on one host pick
/// the same CPU; else None, the scheduler's choice.
///
/// Pinning is a condition to measure under, not the default: see
/// `transport::sizing`'s notes on placement for the measurements.
fn flow_cpu(endpoint: Endpoint, spec: &TestSpec, id: u32, usable: &[u32]) -> Option<u32> {
    let own = match endpoint {
        Endpoint::Client => spec.affinity.client,
        Endpoint::Server => spec.affinity.server,
    };
    if own.is_some() || !spec.affinity.flows || usable.is_empty() {
        return own;
    }
    Some(usable[id as usize % usable.len()])
}

/// A connected data socket waiting for the start.
pub struct ConnectedFlow {
    pub plan: FlowPlan,
    pub socket: FlowSocket,
    pub settings: SocketSettings,
    sizes: StreamSizes,
    io: &'static dyn TransportIo,
}

impl ConnectedFlow {
    /// Applies the pacing cap to senders (only meaningful on the sending
    /// socket), lets the transport prepare a datagram flow's socket, then
    /// reads back the socket's settings.
    pub fn new(
        plan: FlowPlan,
        socket: FlowSocket,
        endpoint: Endpoint,
        spec: &TestSpec,
    ) -> Result<Self, PatternError> {
        let io = transport::io(spec.transport)?;
        let role = role_of(endpoint, plan.direction);
        if role == FlowRole::Sender {
            if let Some(rate) = spec.knobs.max_pacing_rate {
                sockopt::set_max_pacing_rate(socket.as_fd(), rate)?;
            }
        }
        let stamps = match &socket {
            FlowSocket::Datagram(s) => io.prepare_flow(s, role, &spec.knobs),
            FlowSocket::Stream(_) => None,
        };
        let mut settings = sockopt::read_back(&SockRef::from(&socket), &spec.knobs, role);
        settings.rx_stamps = stamps;
        let usable = sys::affinity::usable_cpus().unwrap_or_default();
        let cpu = flow_cpu(endpoint, spec, plan.id, &usable);
        settings.cpu = cpu;
        let flows = u64::from(spec.parallel)
            * if spec.direction == Direction::Bidir {
                2
            } else {
                1
            };
        let cpus = usable.len().max(1);
        let sizes = StreamSizes::for_flow(
            &spec.knobs,
            sys::calibration::current().ok().flatten(),
            transport::sizing::crowded(flows, cpus),
        );
        if matches!(socket, FlowSocket::Stream(_)) {
            match role {
                FlowRole::Sender => {
                    settings.send_mode = Some(spec.knobs.send_mode);
                    settings.write_size = Some(sizes.write_size as u64);
                    settings.write_size_from = Some(sizes.write_size_from);
                }
                FlowRole::Receiver => {
                    settings.read_size = Some(sizes.read_size as u64);
                    settings.read_size_from = Some(sizes.read_size_from);
                    settings.rcvlowat = Some(sizes.rcvlowat as u64);
                    settings.read_fill = (spec.knobs.recv_mode
                        == xferlab_core::spec::RecvMode::Copy)
                        .then_some(sizes.read_fill);
                }
            }
        }
        Ok(ConnectedFlow {
            plan,
            socket,
            settings,
            sizes,
            io,
        })
    }

    pub fn start_info(&self, endpoint: Endpoint) -> FlowStart {
        FlowStart {
            id: self.plan.id,
            direction: self.plan.direction,
            role: role_of(endpoint, self.plan.direction),
            local: addr(self.socket.local_addr()),
            remote: addr(self.socket.peer_addr()),
        }
    }
}

fn addr(a: std::io::Result<std::net::SocketAddr>) -> String {
    a.map(|a| crate::net::canonical(a).to_string())
        .unwrap_or_default()
}

struct RunningFlow {
    plan: FlowPlan,
    role: FlowRole,
    io: &'static dyn TransportIo,
    info: FlowStart,
    settings: SocketSettings,
    sizes: StreamSizes,
    socket: Arc<FlowSocket>,
    shared: Arc<FlowShared>,
    meter: Option<FlowMeter>,
    thread: Option<JoinHandle<()>>,
    /// Filled by the flow thread just before it notifies the event loop,
    /// so the loop never races the thread's exit.
    slot: Arc<Mutex<Option<FlowOutcome>>>,
    outcome: Option<FlowOutcome>,
}

impl RunningFlow {
    /// The flow's counters now: bytes, plus what its transport reads
    /// (TCP_INFO for TCP senders, the datagram counters of UDP flows).
    fn reading(&self) -> Reading {
        self.io.read(&self.socket, self.role, &self.shared)
    }
}

/// One side of a running test.
pub struct Side {
    endpoint: Endpoint,
    embedded: bool,
    start: Time,
    clock: IntervalClock,
    next_boundary: Option<f64>,
    flows: Vec<RunningFlow>,
    flags: Arc<SideFlags>,
    tally: Arc<CpuTally>,
    knobs: Arc<Knobs>,
    /// This end's `-A` CPU: the host caches the report gives are that
    /// CPU's.
    cpu: Option<u32>,
    wire: DatagramWire,
    done: Arc<dyn Fn(u32) + Send + Sync>,
    counters_before: xferlab_core::counters::CounterSnapshot,
    interface: Option<String>,
    warnings: Vec<String>,
    /// Why the side aborted its flows (the first reason): each aborted
    /// flow's end names it.
    abort_why: Option<String>,
    stopped_at: Option<Time>,
}

impl Side {
    /// Holds the connected flows until [`Side::start`]. `done` is called
    /// with a flow id whenever a flow thread ends, so the caller's event
    /// loop wakes up.
    pub fn prepare(
        endpoint: Endpoint,
        embedded: bool,
        spec: &TestSpec,
        connected: Vec<ConnectedFlow>,
        tally: Arc<CpuTally>,
        done: Arc<dyn Fn(u32) + Send + Sync>,
    ) -> Side {
        let interface = connected
            .first()
            .and_then(|f| f.socket.local_addr().ok())
            .and_then(|a| sys::counters::interface_for(a.ip()));
        let flows = connected
            .into_iter()
            .map(|c| RunningFlow {
                plan: c.plan,
                role: role_of(endpoint, c.plan.direction),
                io: c.io,
                info: c.start_info(endpoint),
                settings: c.settings,
                sizes: c.sizes,
                socket: Arc::new(c.socket),
                shared: Arc::new(FlowShared::of(c.io, &spec.knobs)),
                meter: None,
                thread: None,
                slot: Arc::default(),
                outcome: None,
            })
            .collect();
        Side {
            endpoint,
            embedded,
            start: clock::now(),
            clock: IntervalClock::new(spec.interval_s, spec.omit_s),
            next_boundary: None,
            knobs: Arc::new(spec.knobs.clone()),
            cpu: match endpoint {
                Endpoint::Client => spec.affinity.client,
                Endpoint::Server => spec.affinity.server,
            },
            wire: DatagramWire::Xferlab,
            flows,
            flags: Arc::new(SideFlags::default()),
            tally,
            done,
            counters_before: Default::default(),
            interface,
            warnings: Vec::new(),
            abort_why: None,
            stopped_at: None,
        }
    }

    /// Which header UDP flows put on their datagrams (before the start).
    pub fn set_datagram_wire(&mut self, wire: DatagramWire) {
        self.wire = wire;
    }

    /// Takes the "before" counters and starts every flow thread now.
    pub fn start(&mut self) -> Result<(), PatternError> {
        let (before, warnings) = sys::counters::snapshot(self.interface.as_deref());
        self.counters_before = before;
        self.warnings.extend(warnings);
        self.start = clock::now();
        self.next_boundary = self.clock.next_boundary(0.0);
        for i in 0..self.flows.len() {
            let start = self.flows[i].reading();
            let f = &mut self.flows[i];
            f.meter = Some(FlowMeter::new(self.clock, start));
            let (socket, shared, flags, tally, done, slot, knobs) = (
                f.socket.clone(),
                f.shared.clone(),
                self.flags.clone(),
                self.tally.clone(),
                self.done.clone(),
                f.slot.clone(),
                self.knobs.clone(),
            );
            let (role, quota, id, wire, cpu, io, sizes) = (
                f.role,
                f.plan.quota,
                f.plan.id,
                self.wire,
                f.settings.cpu,
                f.io,
                f.sizes,
            );
            let endpoint = self.endpoint;
            let name = format!(
                "xfer-{}-{}",
                if role == FlowRole::Sender { "tx" } else { "rx" },
                id
            );
            let thread = flow::spawn(name, move || {
                sys::affinity::pin_data_thread(cpu);
                let cpu = tally.track();
                let out = io.run(FlowJob {
                    socket: &socket,
                    endpoint,
                    role,
                    knobs: &knobs,
                    quota,
                    shared: &shared,
                    flags: &flags,
                    wire,
                    sizes,
                });
                drop(cpu);
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(out);
                done(id);
            });
            match thread {
                Ok(t) => f.thread = Some(t),
                Err(e) => {
                    let e = PatternError::io("start a flow thread")(e);
                    self.abort(&e.to_string());
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    pub fn started_at(&self) -> Time {
        self.start
    }

    pub fn flow_starts(&self) -> Vec<FlowStart> {
        self.flows.iter().map(|f| f.info.clone()).collect()
    }

    /// When the next interval boundary falls.
    pub fn next_tick(&self) -> Option<Time> {
        self.next_boundary
            .map(|b| self.start + Duration::from_secs_f64(b))
    }

    /// Samples every flow still running if a boundary has passed; returns
    /// the finished intervals for live output (empty when no boundary).
    pub fn tick(&mut self, now: Time) -> Vec<LiveFlow> {
        let Some(boundary) = self.next_boundary else {
            return Vec::new();
        };
        let t = now.duration_since(self.start).as_secs_f64();
        if t < boundary {
            return Vec::new();
        }
        self.next_boundary = self.clock.next_boundary(boundary);
        let mut live = Vec::new();
        for f in &mut self.flows {
            if f.outcome.is_some() {
                continue;
            }
            let reading = f.reading();
            let Some(meter) = f.meter.as_mut() else {
                continue;
            };
            let before = meter.interval_count();
            meter.sample(t, boundary, reading);
            if let Some(iv) = meter
                .last_interval()
                .filter(|_| meter.interval_count() > before)
            {
                live.push(LiveFlow {
                    id: f.plan.id,
                    direction: f.plan.direction,
                    role: f.role,
                    interval: iv.clone(),
                });
            }
        }
        live
    }

    /// Collects the outcomes of flows that have ended (after a `done`
    /// notification, or whenever the loop wakes).
    pub fn reap(&mut self) {
        for f in &mut self.flows {
            if f.outcome.is_some() {
                continue;
            }
            // Look at the thread first: a thread that had finished before
            // the slot was read and left it empty has panicked.
            let finished = f.thread.as_ref().is_some_and(|t| t.is_finished());
            f.outcome = f.slot.lock().unwrap_or_else(|p| p.into_inner()).take();
            if f.outcome.is_none() && finished {
                f.outcome = Some(FlowOutcome {
                    end: FlowEnd::Aborted("flow thread panicked".into()),
                    at: clock::now(),
                    bytes: f.shared.bytes.load(Ordering::Relaxed),
                    note: None,
                });
            }
        }
    }

    pub fn all_done(&self) -> bool {
        self.flows.iter().all(|f| f.outcome.is_some())
    }

    pub fn any_of_role(&self, role: FlowRole) -> bool {
        self.flows.iter().any(|f| f.role == role)
    }

    /// Whether this side has flows in `role` and all of them have ended.
    pub fn all_of_role_done(&self, role: FlowRole) -> bool {
        let mut of_role = self.flows.iter().filter(|f| f.role == role).peekable();
        of_role.peek().is_some() && of_role.all(|f| f.outcome.is_some())
    }

    /// Bytes this side's byte-stream senders wrote that the peer has not
    /// yet acknowledged (SIOCOUTQ): what is still in flight or queued.
    pub fn unacked_bytes(&self) -> u64 {
        self.flows
            .iter()
            .filter(|f| f.role == FlowRole::Sender)
            .filter_map(|f| f.socket.unacked_bytes())
            .sum()
    }

    /// Whether every receiving flow named in `targets` (flow id, bytes
    /// its peer sent) has received at least that much.
    pub fn receivers_caught_up(&self, targets: &[(u32, u64)]) -> bool {
        targets.iter().all(|&(id, sent)| {
            self.flows
                .iter()
                .find(|f| f.plan.id == id && f.role == FlowRole::Receiver)
                .is_none_or(|f| f.shared.bytes.load(Ordering::Relaxed) >= sent)
        })
    }

    /// Bytes moved so far by this side's flows in `role`.
    pub fn bytes_of_role(&self, role: FlowRole) -> u64 {
        self.flows
            .iter()
            .filter(|f| f.role == role)
            .map(|f| f.shared.bytes.load(Ordering::Relaxed))
            .sum()
    }

    /// Asks senders to finish; receivers keep reading to end of stream.
    pub fn stop(&mut self, now: Time) {
        if self.stopped_at.is_none() {
            self.stopped_at = Some(now);
            self.flags.stop.store(true, Ordering::Relaxed);
        }
    }

    /// Stops senders and receivers alike, keeping what they counted: a
    /// stock iperf3 peer ends a test on the control connection without
    /// closing its data connections first.
    pub fn cut(&mut self, now: Time) {
        self.stop(now);
        self.flags.cut.store(true, Ordering::Relaxed);
    }

    /// Ends every flow now: flags for the threads, shutdown() to wake any
    /// that sit in a syscall.
    pub fn abort(&mut self, why: &str) {
        if self.flags.abort.swap(true, Ordering::Relaxed) {
            return;
        }
        self.warnings.push(why.to_string());
        self.abort_why = Some(why.to_string());
        for f in &self.flows {
            if f.outcome.is_none() {
                f.socket.interrupt();
            }
        }
    }

    /// Waits for the threads and builds this side's report.
    pub fn finish(mut self) -> SideReport {
        if !self.all_done() && !self.flags.abort.load(Ordering::Relaxed) {
            self.abort("flows were still running at the end of the test");
        }
        for f in &mut self.flows {
            if let Some(t) = f.thread.take() {
                t.join().ok();
            }
        }
        self.reap();
        let now = clock::now();
        let mut flows = Vec::with_capacity(self.flows.len());
        for mut f in std::mem::take(&mut self.flows) {
            let mut end = f.reading();
            let outcome = f.outcome.take().unwrap_or(FlowOutcome {
                end: FlowEnd::Aborted("flow thread panicked".into()),
                at: now,
                bytes: f.shared.bytes.load(Ordering::Relaxed),
                note: None,
            });
            if let Some(note) = &outcome.note {
                self.warnings.push(format!("flow {}: {note}", f.plan.id));
            }
            let t = outcome.at.duration_since(self.start).as_secs_f64();
            let meter = f
                .meter
                .take()
                .unwrap_or_else(|| FlowMeter::new(self.clock, Reading::default()));
            end.bytes = outcome.bytes;
            let (intervals, total) = meter.finish(t, end);
            flows.push(FlowReport {
                id: f.plan.id,
                direction: f.plan.direction,
                role: f.role,
                local: f.info.local,
                remote: f.info.remote,
                socket: f.settings,
                intervals,
                total,
                end: match outcome.end {
                    FlowEnd::Aborted(r) if r == ABORTED => {
                        FlowEnd::Aborted(self.abort_why.clone().unwrap_or(r))
                    }
                    end => end,
                },
            });
        }
        let wall = now.duration_since(self.start).as_secs_f64();
        let (after, more) = sys::counters::snapshot(self.interface.as_deref());
        self.warnings.extend(more);
        let duration_s = flows.iter().map(|f| f.total.end_s).fold(0.0, f64::max);
        let mut host = sys::host::host_info();
        // The caches of the pinned CPU, and the calibration the flows'
        // sizes came from, when one did (an unreadable file was refused at
        // start-up, in main).
        host.caches = Some(Box::new(sys::cache::caches(self.cpu)));
        let calibrated = Some(SizeSource::Calibrated);
        if flows.iter().any(|f| {
            f.socket.write_size_from == calibrated || f.socket.read_size_from == calibrated
        }) {
            host.size_calibration = sys::calibration::current()
                .ok()
                .flatten()
                .map(|c| Box::new(c.clone()));
        }
        SideReport {
            endpoint: self.endpoint,
            host,
            embedded: self.embedded,
            duration_s,
            sums: sum_intervals(&flows),
            flows,
            cpu: self.tally.usage(wall),
            counters: KernelCounters {
                interface: self.interface.clone(),
                deltas: after.delta(&self.counters_before),
            },
            warnings: std::mem::take(&mut self.warnings),
            pattern: xferlab_core::result::PatternReport::Stream,
            transport: None,
        }
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        // A side dropped without finish() (error path): never leave flow
        // threads running.
        if self.flows.iter().any(|f| f.thread.is_some()) {
            self.flags.abort.store(true, Ordering::Relaxed);
            for f in &mut self.flows {
                f.socket.interrupt();
                if let Some(t) = f.thread.take() {
                    t.join().ok();
                }
            }
        }
    }
}
