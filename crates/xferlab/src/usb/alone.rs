//! What the USB verbs that watch or carry traffic (`usb net`, `usb mon`)
//! share on the driver loop: their test ([`spec`]), a direction as a flow
//! kept by a [`FlowMeter`] ([`MeteredFlow`]), this side's report from
//! those flows ([`side`], which `usb bulk` uses too), and the run from the
//! start line to the exit code ([`run`], [`finish`]).

use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use xferlab_core::interval::{FlowMeter, IntervalClock, Reading};
use xferlab_core::knobs::Knobs;
use xferlab_core::result::{
    sum_intervals, CpuUsage, Endpoint, FlowEnd, FlowReport, FlowRole, KernelCounters,
    PatternReport, SideReport, SideTransportReport, SocketSettings, TestResult,
};
use xferlab_core::spec::{Direction, FlowDirection, Limit, Pattern, TestSpec, Transport};
use xferlab_core::time::Time;

use super::{outcome, Fail, ReportTo};
use crate::control::Wake;
use crate::driver::client::drive_alone;
use crate::driver::{Interrupts, Workload, DRAIN};
use crate::output::{FlowStart, LiveFlow, Reporter, StartInfo};

/// One direction as a flow: bytes read at boundaries into a meter.
pub struct MeteredFlow {
    id: u32,
    direction: FlowDirection,
    role: FlowRole,
    meter: FlowMeter,
}

impl MeteredFlow {
    pub fn new(id: u32, direction: FlowDirection, role: FlowRole, clock: IntervalClock) -> Self {
        MeteredFlow {
            id,
            direction,
            role,
            meter: FlowMeter::new(clock, Reading::bytes(0)),
        }
    }

    pub fn start(&self, local: &str, remote: &str) -> FlowStart {
        FlowStart {
            id: self.id,
            direction: self.direction,
            role: self.role,
            local: local.to_string(),
            remote: remote.to_string(),
        }
    }

    /// `bytes` so far, read at `t` for the clock's `boundary`; the
    /// interval it closed, if any.
    pub fn sample(&mut self, t: f64, boundary: f64, bytes: u64) -> Option<LiveFlow> {
        self.meter.sample(t, boundary, Reading::bytes(bytes));
        self.meter.last_interval().map(|iv| LiveFlow {
            id: self.id,
            direction: self.direction,
            role: self.role,
            interval: iv.clone(),
        })
    }

    /// The flow closed at `t` with `bytes` in all.
    pub fn finish(self, t: f64, bytes: u64, local: &str, remote: &str) -> FlowReport {
        let (intervals, total) = self.meter.finish(t, Reading::bytes(bytes));
        FlowReport {
            id: self.id,
            direction: self.direction,
            role: self.role,
            local: local.to_string(),
            remote: remote.to_string(),
            socket: SocketSettings::default(),
            intervals,
            total,
            end: FlowEnd::Completed,
        }
    }
}

/// The test such a verb is to the reporters: both directions at once,
/// for `time` seconds or until Ctrl-C (`Limit::Open`).
pub fn spec(time: Option<f64>, interval_s: f64, report: &ReportTo) -> TestSpec {
    TestSpec {
        pattern: Pattern::Stream,
        transport: Transport::UsbBulk,
        direction: Direction::Bidir,
        parallel: 1,
        limit: time.map_or(Limit::Open, |seconds| Limit::Duration { seconds }),
        omit_s: 0.0,
        interval_s,
        knobs: Knobs::default(),
        title: report.title.clone(),
        affinity: Default::default(),
    }
}

/// This process's side of a run of `duration_s` seconds.
pub fn side(
    flows: Vec<FlowReport>,
    duration_s: f64,
    cpu: CpuUsage,
    warnings: Vec<String>,
    transport: Option<SideTransportReport>,
) -> SideReport {
    SideReport {
        endpoint: Endpoint::Client,
        host: crate::sys::host::host_info(),
        embedded: false,
        duration_s,
        sums: sum_intervals(&flows),
        flows,
        cpu,
        counters: KernelCounters::default(),
        warnings,
        pattern: PatternReport::Stream,
        transport,
    }
}

/// A run as the reporters see it.
pub struct Shown<'a> {
    pub spec: TestSpec,
    /// Where the run is: the result's `server_address`.
    pub address: String,
    /// The one line the human table starts with.
    pub line: &'a str,
    pub session: String,
    pub wall_start: SystemTime,
}

/// Runs `workload` (started at `start`, its flows `flows`) on the driver
/// loop until `-t`, Ctrl-C or its own end, and builds the result; also
/// whether a press stopped it.
pub fn run(
    shown: Shown<'_>,
    workload: Box<dyn Workload>,
    (start, flows): (Time, &[FlowStart]),
    rx: &mpsc::Receiver<Wake>,
    reporter: &mut dyn Reporter,
    interrupts: &Interrupts,
) -> (TestResult, bool) {
    let Shown {
        spec,
        address,
        line,
        session,
        wall_start,
    } = shown;
    let info = StartInfo {
        spec: &spec,
        server: &address,
        embedded: false,
        session: &session,
        flows,
    };
    let _ = reporter.usb_link_start(&info, line);
    let planned = spec.planned_seconds().map(Duration::from_secs_f64);
    let driven = drive_alone(workload, (start, planned), DRAIN, rx, reporter, interrupts);
    let pressed = driven.run.interrupted();
    let mut finished = driven
        .workload
        .expect("drive_alone starts the workload on its first pass")
        .finish();
    finished.errors.extend(driven.error);
    let cut_short = outcome::cut_short(&spec, pressed);
    let result = outcome::result(spec, address, finished, wall_start, cut_short);
    (result, pressed)
}

/// Writes the result (the reporter is dropped after, so a file of `-o`
/// is complete), its warnings and errors on stderr; the exit code.
pub fn finish(
    mut reporter: Box<dyn Reporter + Send>,
    result: &TestResult,
    pressed: bool,
) -> Result<ExitCode, Fail> {
    reporter
        .finish(result)
        .map_err(|e| Fail::run(format!("cannot write the result: {e}")))?;
    drop(reporter);
    for w in &result.client.warnings {
        eprintln!("xferlab: warning: {w}");
    }
    for e in &result.errors {
        eprintln!("xferlab: {e}");
    }
    Ok(outcome::exit_code(result, pressed))
}
