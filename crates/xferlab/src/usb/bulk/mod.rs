//! `xferlab usb bulk`: a host-side run over one or two bulk endpoints,
//! reported through the same result type and [`Reporter`]s as every
//! transport. The steps, each in its own module: check the arguments
//! ([`plan`]), claim the device ([`claim`]), run one data thread per
//! endpoint ([`pipe`], on [`super::engine`]), watch the clock and report
//! intervals (here), and turn what the endpoints did into the result
//! ([`outcome`]).

mod claim;
mod outcome;
mod pipe;
mod plan;

use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use xferlab_core::interval::IntervalClock;
use xferlab_core::spec::Limit;
use xferlab_core::units::RateUnit;

use self::claim::Claimed;
use self::pipe::Pipe;
use super::engine::{PipeSetup, RunControl};
use crate::cli::usb::BulkArgs;
use crate::output::{self, Format, Reporter, StartInfo};

/// Why a run could not start or report: the one line printed, and the
/// exit code (2 for arguments, 1 for the device or the system).
pub struct Fail {
    code: u8,
    msg: String,
}

impl Fail {
    fn usage(msg: impl Into<String>) -> Fail {
        Fail {
            code: 2,
            msg: msg.into(),
        }
    }

    fn run(msg: impl Into<String>) -> Fail {
        Fail {
            code: 1,
            msg: msg.into(),
        }
    }
}

pub fn run(a: &BulkArgs, interrupts: &AtomicU32) -> ExitCode {
    bulk(a, interrupts).unwrap_or_else(|f| {
        eprintln!("xferlab: {}", f.msg);
        ExitCode::from(f.code)
    })
}

fn bulk(a: &BulkArgs, interrupts: &AtomicU32) -> Result<ExitCode, Fail> {
    plan::validate(a).map_err(Fail::usage)?;
    let dev = Claimed::open(a)?;
    let format = if a.json { Format::Json } else { a.format };
    let out = output::open(a.output.as_deref()).map_err(Fail::usage)?;
    let mut reporter = output::reporter(format, RateUnit::AutoBits, out);

    let spec = plan::spec(a);
    let clock = IntervalClock::new(a.interval, 0.0);
    let ctl = Arc::new(RunControl::default());
    let cpu_start = super::process_cpu();
    let wall_start = SystemTime::now();
    let start = Instant::now();
    let mut pipes = start_pipes(a, &dev, clock, start, &ctl).map_err(Fail::run)?;

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

    let limit = match spec.limit {
        Limit::Duration { seconds } => Some(Duration::from_secs_f64(seconds)),
        Limit::Bytes { .. } => None,
    };
    let interrupted = watch(
        &mut pipes,
        &ctl,
        clock,
        (start, limit),
        interrupts,
        &mut *reporter,
    );

    let wall = start.elapsed().as_secs_f64();
    let ends: Vec<_> = pipes.into_iter().map(|p| p.finish(wall)).collect();
    let usb = dev.report(Vec::new());
    // Release the interface (and give it back to its driver) before reporting.
    drop(dev);
    let cpu = outcome::cpu_since(cpu_start, wall);
    let result = outcome::result(spec, usb, ends, cpu, wall_start, interrupted);
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
    a: &BulkArgs,
    dev: &Claimed,
    clock: IntervalClock,
    start: Instant,
    ctl: &Arc<RunControl>,
) -> Result<Vec<Pipe>, String> {
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
        match Pipe::start(id, ep, dev, setup, clock, start, ctl) {
            Ok(p) => pipes.push(p),
            Err(e) => {
                // Stop the endpoints already running before giving up.
                ctl.stop.store(true, Relaxed);
                for p in pipes {
                    let _ = p.finish(0.0);
                }
                return Err(e);
            }
        }
    }
    Ok(pipes)
}

/// How often the reporting thread looks at the clock, Ctrl-C and the
/// endpoint threads: interval boundaries land within this of their time.
const TICK: Duration = Duration::from_millis(20);

/// Reports an interval at each boundary until every endpoint is done, and
/// stops them at the time limit (`limit`, from `start`) or on Ctrl-C.
/// True when Ctrl-C ended the run.
fn watch(
    pipes: &mut [Pipe],
    ctl: &RunControl,
    clock: IntervalClock,
    (start, limit): (Instant, Option<Duration>),
    interrupts: &AtomicU32,
    reporter: &mut dyn Reporter,
) -> bool {
    let mut interrupted = false;
    let mut boundary = clock.next_boundary(0.0);
    while !pipes.iter().all(Pipe::is_finished) {
        let now = start.elapsed();
        if interrupts.load(Relaxed) > 0 && !interrupted {
            interrupted = true;
            ctl.stop.store(true, Relaxed);
        }
        if limit.is_some_and(|d| now >= d) {
            ctl.stop.store(true, Relaxed);
        }
        let t = now.as_secs_f64();
        if let Some(b) = boundary.filter(|&b| t >= b && !ctl.stop.load(Relaxed)) {
            let (flows, usb): (Vec<_>, Vec<_>) =
                pipes.iter_mut().filter_map(|p| p.sample(t, b)).unzip();
            let _ = reporter.usb_interval(&flows, &usb);
            boundary = clock.next_boundary(t);
        }
        let left = limit.map_or(TICK, |d| {
            d.saturating_sub(now).max(Duration::from_millis(1))
        });
        std::thread::sleep(TICK.min(left));
    }
    ctl.stop.store(true, Relaxed);
    interrupted
}
