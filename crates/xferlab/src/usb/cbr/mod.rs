//! `xferlab usb cbr`: fixed-rate streaming against xferlab's fixed-rate
//! device (`usb gadget --function cbr`). Each trial starts the device's
//! stream over ep0 (START: rate, sample size, device buffer, request
//! size), runs the host application on the bulk pipes for -t seconds,
//! stops the device (STOP returns its overruns and underruns with their
//! times) and is judged by the core's [`CbrCriterion`]; one rate is one
//! trial, a ladder is the core's [`RateSearch`], repeated. The report is
//! an `xferlab.cbr/1` document like `xferlab cbr -J`'s, with USB fields.

mod report;
mod stream;

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::time::{Duration, Instant};

use clap::ValueEnum;
use nusb::transfer::{Bulk, ControlIn, ControlOut, ControlType, In, Out, Recipient};
use nusb::Endpoint;
use nusb::MaybeFuture;
use xferlab_core::datagram::{Plan, RateSearch};
use xferlab_core::units::parse_seconds;
use xferlab_core::usb::cbr::report::{
    CbrDirection, CbrRun, CbrTrial, HostStall, PerDirection, UsbCbrReport, UsbCbrSetup,
};
use xferlab_core::usb::cbr::wire::{self, StartParams, Status};
use xferlab_core::usb::cbr::{CbrCriterion, CbrOutcome};

use self::stream::{App, HostCounts};
use super::bulk::claim::{Claimed, Want};
use super::bulk::plan;
use super::device;
use super::Fail;
use super::{ReportTo, Selection, UsbDir};

/// The direction of the stream, as the radio names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CbrDir {
    /// Device to host (bulk IN): the device produces, the host reads.
    Rx,
    /// Host to device (bulk OUT): the host writes, the device consumes.
    Tx,
    /// Both at once, each at the rate; reported as a sum.
    Both,
}

impl CbrDir {
    /// As the document names it.
    pub fn report(self) -> CbrDirection {
        match self {
            CbrDir::Rx => CbrDirection::Rx,
            CbrDir::Tx => CbrDirection::Tx,
            CbrDir::Both => CbrDirection::Both,
        }
    }

    pub fn usb(self) -> UsbDir {
        match self {
            CbrDir::Rx => UsbDir::In,
            CbrDir::Tx => UsbDir::Out,
            CbrDir::Both => UsbDir::Both,
        }
    }
}

/// `usb cbr` as asked for.
#[derive(Debug, Clone)]
pub struct CbrRequest {
    pub select: Selection,
    pub dir: CbrDir,
    /// Bytes per host transfer.
    pub size: u64,
    /// Host transfers in flight per direction.
    pub depth: u32,
    /// The host buffer per direction instead of `depth`.
    pub host_buffer: Option<u64>,
    /// The application's read/write size (default: `size`).
    pub app_size: Option<u64>,
    /// One rate, bytes/s per direction, or else `ladder`.
    pub rate: Option<u64>,
    pub ladder: Vec<u64>,
    pub repeat: u32,
    pub max_overruns: u64,
    pub max_underruns: u64,
    /// Seconds per trial.
    pub time: f64,
    pub device_buffer: u64,
    pub device_request: u64,
    pub sample_size: u64,
    pub prefill: Option<u64>,
    /// `EVERY:FOR`, checked by the verb.
    pub host_stall: Option<String>,
    pub report: ReportTo,
}

const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);

pub fn run(a: &CbrRequest, interrupts: &AtomicU32) -> ExitCode {
    cbr(a, interrupts).unwrap_or_else(|f| {
        eprintln!("xferlab: {}", f.msg);
        ExitCode::from(f.code)
    })
}

/// The checked command line.
struct Setup {
    app: App,
    params: StartParams,
    rates: Vec<u64>,
}

fn check(a: &CbrRequest) -> Result<Setup, Fail> {
    let bad = |m: String| Err(Fail::usage(m));
    let depth = match a.host_buffer {
        None => a.depth,
        Some(b) if a.size > 0 && b % a.size == 0 && b / a.size <= u64::from(u32::MAX) => {
            (b / a.size) as u32
        }
        Some(b) => {
            return bad(format!(
            "--host-buffer ({b}) must be a whole number of -l/--size transfers ({}): it is -l x -Q",
            a.size
        ))
        }
    };
    plan::check_transfers(a.size, depth).map_err(Fail::usage)?;
    plan::check_usbfs_memory(a.size, depth, a.dir == CbrDir::Both).map_err(Fail::usage)?;
    let call = a.app_size.unwrap_or(a.size);
    if call == 0 || call > plan::MAX_SIZE {
        return bad(format!(
            "--app-size must be 1 byte up to 64M per call (got {call})"
        ));
    }
    if !(a.time > 0.0 && a.time.is_finite()) {
        return bad(format!(
            "-t/--time must be a positive duration (got {})",
            a.time
        ));
    }
    if a.repeat == 0 || a.repeat > 1000 {
        return bad(format!(
            "--repeat must be 1 to 1000 runs (got {})",
            a.repeat
        ));
    }
    if a.device_buffer == 0 || a.device_buffer > wire::MAX_BUFFER {
        return bad(format!(
            "--device-buffer must be 1 byte to 64M (got {})",
            a.device_buffer
        ));
    }
    if a.device_request == 0 || a.device_request > a.device_buffer {
        return bad(format!(
            "--device-request ({}) must be 1 byte up to --device-buffer ({}): the device hands its controller whole requests from its buffer",
            a.device_request, a.device_buffer
        ));
    }
    if a.sample_size == 0 || a.sample_size > a.device_buffer {
        return bad(format!(
            "--sample-size ({}) must be 1 byte up to --device-buffer ({})",
            a.sample_size, a.device_buffer
        ));
    }
    let prefill = a.prefill.unwrap_or((a.device_buffer / 2).max(1));
    if prefill == 0 || prefill > a.device_buffer {
        return bad(format!(
            "--prefill ({prefill}) must be 1 byte up to --device-buffer ({})",
            a.device_buffer
        ));
    }
    let stall = match &a.host_stall {
        None => None,
        Some(s) => Some(parse_stall(s).map_err(Fail::usage)?),
    };
    let rates = match a.rate {
        Some(r) => vec![r],
        None if a.ladder.is_empty() => {
            return bad("give a rate (-b/--rate BYTES/S) or a --ladder of rates".into())
        }
        None => a.ladder.clone(),
    };
    Ok(Setup {
        app: App {
            size: a.size as usize,
            depth: depth as usize,
            call: call as usize,
            stall,
        },
        params: StartParams {
            rx: a.dir != CbrDir::Tx,
            tx: a.dir != CbrDir::Rx,
            rate: 0,
            sample: a.sample_size,
            buffer: a.device_buffer,
            request: a.device_request,
            prefill,
        },
        rates,
    })
}

/// `EVERY:FOR`, FOR shorter than EVERY.
fn parse_stall(s: &str) -> Result<(Duration, Duration), String> {
    let help = || {
        format!("--host-stall takes EVERY:FOR durations with 0 < FOR < EVERY, e.g. 500ms:100ms (got '{s}')")
    };
    let (every, len) = s.split_once(':').ok_or_else(help)?;
    let every = parse_seconds(every).map_err(|_| help())?;
    let len = parse_seconds(len).map_err(|_| help())?;
    if !(len > 0.0 && every > len && every.is_finite()) {
        return Err(help());
    }
    Ok((Duration::from_secs_f64(every), Duration::from_secs_f64(len)))
}

fn control_out(
    dev: &Claimed,
    request: u8,
    data: &[u8],
) -> Result<(), nusb::transfer::TransferError> {
    dev.interface()
        .control_out(
            ControlOut {
                control_type: ControlType::Vendor,
                recipient: Recipient::Interface,
                request,
                value: 0,
                index: u16::from(dev.pipes.interface),
                data,
            },
            CONTROL_TIMEOUT,
        )
        .wait()
}

fn control_in(
    dev: &Claimed,
    request: u8,
    length: usize,
) -> Result<Vec<u8>, nusb::transfer::TransferError> {
    dev.interface()
        .control_in(
            ControlIn {
                control_type: ControlType::Vendor,
                recipient: Recipient::Interface,
                request,
                value: 0,
                index: u16::from(dev.pipes.interface),
                length: length as u16,
            },
            CONTROL_TIMEOUT,
        )
        .wait()
}

/// The device must be xferlab's fixed-rate device.
fn check_device(dev: &Claimed) -> Result<(), Fail> {
    let hint = "run `xferlab usb gadget --function cbr` on the device side";
    let info = control_in(dev, wire::REQ_INFO, wire::INFO_LEN).map_err(|e| {
        Fail::run(format!(
            "{}: it refused xferlab's fixed-rate INFO request ({e}); {hint}",
            dev.name
        ))
    })?;
    wire::check_info(&info).map_err(|m| Fail::run(format!("{}: {m}; {hint}", dev.name)))
}

/// The bulk endpoints the trials stream on, opened once for the whole
/// run: each trial borrows them. (Opened per trial, the next trial could
/// find an endpoint still held: nusb lets go of it from its event thread
/// a moment after the last transfer was seen complete, and a ladder of 40
/// trials once failed with "endpoint already in use".)
struct Endpoints {
    rx: Option<Endpoint<Bulk, In>>,
    tx: Option<Endpoint<Bulk, Out>>,
}

impl Endpoints {
    fn open(dev: &Claimed, params: &StartParams) -> Result<Endpoints, Fail> {
        let intf = dev.interface();
        let fail =
            |addr: u8, e: nusb::Error| Fail::run(format!("cannot open endpoint 0x{addr:02x}: {e}"));
        let rx = match dev.pipes.bulk_in.filter(|_| params.rx) {
            Some(ep) => Some(
                intf.endpoint::<Bulk, In>(ep.address)
                    .map_err(|e| fail(ep.address, e))?,
            ),
            None => None,
        };
        let tx = match dev.pipes.bulk_out.filter(|_| params.tx) {
            Some(ep) => Some(
                intf.endpoint::<Bulk, Out>(ep.address)
                    .map_err(|e| fail(ep.address, e))?,
            ),
            None => None,
        };
        Ok(Endpoints { rx, tx })
    }
}

/// Runs one trial at `rate` bytes/s per direction and judges it with `search`.
fn trial(
    dev: &Claimed,
    eps: &mut Endpoints,
    s: &Setup,
    a: &CbrRequest,
    rate: u64,
    search: &mut RateSearch<CbrCriterion>,
    interrupts: &AtomicU32,
) -> Result<CbrTrial, Fail> {
    let stop = AtomicBool::new(false);
    let params = StartParams { rate, ..s.params };
    let (rx, tx, status) = std::thread::scope(|scope| -> Result<_, Fail> {
        let (app, stop) = (s.app, &stop);
        let rx = eps
            .rx
            .as_mut()
            .map(|e| scope.spawn(move || stream::run(e, true, app, stop)));
        let tx = eps
            .tx
            .as_mut()
            .map(|e| scope.spawn(move || stream::run(e, false, app, stop)));
        let started = control_out(dev, wire::REQ_START, &params.encode());
        let t0 = Instant::now();
        let limit = Duration::from_secs_f64(a.time);
        if started.is_ok() {
            while t0.elapsed() < limit
                && interrupts.load(Relaxed) == 0
                && !rx.as_ref().is_some_and(|t| t.is_finished())
                && !tx.as_ref().is_some_and(|t| t.is_finished())
            {
                std::thread::sleep(
                    Duration::from_millis(10).min(limit.saturating_sub(t0.elapsed())),
                );
            }
        }
        let status = started.and_then(|()| control_in(dev, wire::REQ_STOP, wire::STATUS_LEN));
        stop.store(true, Relaxed);
        let join = |t: Option<std::thread::ScopedJoinHandle<'_, HostCounts>>| {
            t.map(|t| {
                t.join().unwrap_or_else(|_| HostCounts {
                    error: Some("the host stream's thread panicked".into()),
                    ..HostCounts::default()
                })
            })
        };
        let (rx, tx) = (join(rx), join(tx));
        let status = status.map_err(|e| Fail::run(format!(
            "{}: the fixed-rate device did not answer {} ({e}); is `xferlab usb gadget --function cbr` still running?",
            dev.name, "START/STOP"
        )))?;
        Ok((rx, tx, status))
    })?;
    let status = Status::decode(&status).ok_or_else(|| {
        Fail::run(format!(
            "{}: STOP's answer is too short: run the same xferlab on both sides",
            dev.name
        ))
    })?;
    let outcome = CbrOutcome {
        rx: status.rx,
        tx: status.tx,
        host_error: rx.iter().chain(tx.iter()).find_map(|c| c.error.clone()),
    };
    let verdict = search.record(rate * 8, &outcome);
    let host = PerDirection {
        rx: rx.as_ref().map(report::host_side),
        tx: tx.as_ref().map(report::host_side),
    };
    Ok(CbrTrial::new(
        rate,
        status.elapsed_ns,
        &outcome,
        host,
        &verdict,
    ))
}

fn cbr(a: &CbrRequest, interrupts: &AtomicU32) -> Result<ExitCode, Fail> {
    let s = check(a)?;
    let dev = Claimed::open_for(&Want {
        select: &a.select,
        ep_in: None,
        ep_out: None,
        dir: a.dir.usb(),
        size: a.size,
    })?;
    check_device(&dev)?;
    let mut eps = Endpoints::open(&dev, &s.params)?;
    let mut out = crate::output::open(a.report.output.as_deref()).map_err(Fail::usage)?;
    let criterion = CbrCriterion {
        max_overruns: a.max_overruns,
        max_underruns: a.max_underruns,
    };
    let w = |out: &mut Box<dyn Write + Send>, line: String| -> Result<(), Fail> {
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|e| Fail::run(format!("cannot write the output: {e}")))
    };
    if !a.report.json() {
        w(
            &mut out,
            format!(
                "Device {} at {} speed \"{}\", interface {}",
                dev.name,
                dev.speed,
                dev.info.product_string().unwrap_or(""),
                dev.pipes.interface
            ),
        )?;
        w(&mut out, format!(
            "Test: USB fixed-rate {}, {} B per transfer, {} in flight, application calls of {} B, device buffer {} B in {} B requests, {}-byte samples, {} s per trial{}",
            report::dir_label(a.dir),
            a.size,
            s.app.depth,
            s.app.call,
            a.device_buffer,
            a.device_request,
            a.sample_size,
            a.time,
            s.app.stall.map(|(e, l)| format!(", host stalls {:.3} s every {:.3} s", l.as_secs_f64(), e.as_secs_f64())).unwrap_or_default()
        ))?;
    }
    let mut runs = Vec::new();
    let mut interrupted = false;
    'runs: for run in 1..=a.repeat {
        // The search counts in bit/s, as `cbr` does; the device in bytes/s.
        let mut search = RateSearch::new(
            Plan::Ladder(s.rates.iter().map(|r| r * 8).collect()),
            criterion,
        );
        let mut trials = Vec::new();
        while let Some(bps) = search.next_rate() {
            if interrupts.load(Relaxed) > 0 {
                interrupted = true;
                break 'runs;
            }
            let t = trial(&dev, &mut eps, &s, a, bps / 8, &mut search, interrupts)?;
            if !a.report.json() {
                w(&mut out, report::trial_line(run, &t))?;
            }
            trials.push(t);
        }
        runs.push(CbrRun::new(trials, search.best().map(|b| b / 8)));
    }
    let doc = UsbCbrReport::new(
        device::info_of(&dev.info),
        UsbCbrSetup {
            dir: a.dir.report(),
            interface: dev.pipes.interface,
            transfer_size: a.size,
            depth: s.app.depth as u64,
            app_size: s.app.call as u64,
            device_buffer: a.device_buffer,
            device_request: a.device_request,
            sample_size: a.sample_size,
            prefill: s.params.prefill,
            seconds_per_trial: a.time,
            host_stall: s.app.stall.map(|(e, l)| HostStall {
                every_s: e.as_secs_f64(),
                for_s: l.as_secs_f64(),
            }),
            rates_bytes_per_s: s.rates.clone(),
        },
        criterion,
        runs,
        interrupted,
    );
    let ok = doc.sustained();
    if a.report.json() {
        let text = serde_json::to_string_pretty(&doc).map_err(|e| Fail::run(e.to_string()))?;
        w(&mut out, text)?;
    } else {
        w(&mut out, report::summary_line(&doc, a.rate.is_some()))?;
    }
    drop(dev);
    if interrupted {
        return Ok(ExitCode::from(130));
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
