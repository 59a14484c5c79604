//! `xferlab usb bulk`: a host-side run over one or two bulk endpoints,
//! reported through the same result type and [`Reporter`]s as every
//! transport, on the same driver loop ([`crate::driver`]) as every test.
//! The steps, each in its own module: check the arguments ([`plan`]),
//! claim the device ([`claim`]), run one data thread per endpoint
//! ([`pipe`], on [`super::engine`]) as the loop's [`workload`], and turn
//! what the endpoints did into this side's report ([`side`]).
//!
//! [`Reporter`]: crate::output::Reporter

pub(super) mod claim;
mod pipe;
pub(super) mod plan;
mod side;
mod workload;

use crate::sys::clock;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime};

use xferlab_core::interval::IntervalClock;
use xferlab_core::units::RateUnit;
use xferlab_core::usb::Pattern;

use self::claim::Claimed;
use self::pipe::{Pipe, RunLink};
use self::workload::BulkWorkload;
use super::engine::{PipeSetup, RunControl};
use super::{outcome, Fail, ReportTo, Selection, UsbDir};
use crate::driver::client::drive_alone;
use crate::driver::DRAIN;
use crate::output::{self, StartInfo};

/// `usb bulk` as asked for.
#[derive(Debug, Clone)]
pub struct BulkRequest {
    pub select: Selection,
    /// Endpoint addresses; None takes them from the descriptors.
    pub ep_in: Option<u8>,
    pub ep_out: Option<u8>,
    pub dir: UsbDir,
    /// Bytes per transfer.
    pub size: u64,
    /// Transfers in flight per endpoint.
    pub depth: u32,
    pub time: Option<f64>,
    /// Bytes per direction instead of a time.
    pub bytes: Option<u64>,
    pub pattern: Pattern,
    /// Seconds after which a transfer not done means the device stopped answering.
    pub transfer_timeout: f64,
    /// Seconds between interval reports (0 = none).
    pub interval: f64,
    pub report: ReportTo,
}

pub fn run(a: &BulkRequest, interrupts: &AtomicU32) -> ExitCode {
    bulk(a, interrupts).unwrap_or_else(|f| {
        eprintln!("xferlab: {}", f.msg);
        ExitCode::from(f.code)
    })
}

fn bulk(a: &BulkRequest, interrupts: &AtomicU32) -> Result<ExitCode, Fail> {
    plan::validate(a).map_err(Fail::usage)?;
    let dev = Claimed::open(a)?;
    let out = output::open(a.report.output.as_deref()).map_err(Fail::usage)?;
    let mut reporter = output::reporter(a.report.format, RateUnit::AutoBits, out);

    let spec = plan::spec(a);
    let clock = IntervalClock::new(a.interval, 0.0);
    let (tx, rx) = mpsc::channel();
    let cpu_start = super::process_cpu();
    let wall_start = SystemTime::now();
    let link = RunLink {
        ctl: Arc::new(RunControl::default()),
        start: clock::now(),
        done: crate::control::flow_done_notifier(&tx),
    };
    let pipes = start_pipes(a, &dev, clock, &link).map_err(Fail::run)?;

    let flows: Vec<_> = pipes.iter().map(Pipe::flow_start).collect();
    let session = format!("usb-{}", dev.name.replace([' ', ':', '.'], "-"));
    let started = StartInfo {
        spec: &spec,
        server: &dev.remote(),
        embedded: false,
        session: &session,
        flows: &flows,
    };
    let usb = dev.report(pipes.iter().map(Pipe::report_start).collect());
    let _ = reporter.usb_start(&started, &usb);

    let workload = BulkWorkload::new(
        pipes,
        link.ctl.clone(),
        clock,
        link.start,
        dev.report(Vec::new()),
        cpu_start,
    );
    let planned = spec.planned_seconds().map(Duration::from_secs_f64);
    // A stopped endpoint gives up a transfer the device never completes
    // after --transfer-timeout: only then may the loop call it stuck.
    let drain = DRAIN.max(Duration::from_secs_f64(a.transfer_timeout + 1.0));
    let driven = drive_alone(
        Box::new(workload),
        (link.start, planned),
        drain,
        &rx,
        &mut *reporter,
        interrupts,
    );
    let interrupted = driven.run.interrupted();
    let mut finished = driven
        .workload
        .expect("drive_alone starts the workload on its first pass")
        .finish();
    finished.errors.extend(driven.error);
    let server_address = dev.address();
    // Release the interface (and give it back to its driver) before reporting.
    drop(dev);
    let result = outcome::result(spec, server_address, finished, wall_start, interrupted);
    reporter
        .finish(&result)
        .map_err(|e| Fail::run(format!("cannot write the result: {e}")))?;
    for e in &result.errors {
        eprintln!("xferlab: {e}");
    }
    Ok(outcome::exit_code(&result, interrupted))
}

/// One data thread per endpoint the direction needs, OUT first.
fn start_pipes(
    a: &BulkRequest,
    dev: &Claimed,
    clock: IntervalClock,
    link: &RunLink,
) -> anyhow::Result<Vec<Pipe>> {
    let mut pipes = Vec::new();
    for (id, ep) in (0u32..).zip(dev.endpoints(a.dir)) {
        let setup = PipeSetup {
            address: ep.address,
            max_packet: usize::from(ep.max_packet.max(1)),
            // -l is at most 64M (plan::validate): it fits.
            size: a.size as usize,
            depth: a.depth as usize,
            quota: a.bytes,
            pattern: a.pattern,
            transfer_timeout: Duration::from_secs_f64(a.transfer_timeout),
            speed: dev.speed,
            sysfs: dev.info.sysfs_path().to_path_buf(),
        };
        match Pipe::start(id, ep, dev, setup, clock, link) {
            Ok(p) => pipes.push(p),
            Err(e) => {
                // Stop the endpoints already running before giving up.
                link.ctl.stop.store(true, Relaxed);
                for p in pipes {
                    let _ = p.finish(0.0);
                }
                return Err(e);
            }
        }
    }
    Ok(pipes)
}
