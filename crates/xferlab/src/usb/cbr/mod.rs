//! `xferlab usb cbr`: fixed-rate streaming against xferlab's fixed-rate
//! device (`usb gadget --function cbr`). Each trial starts the device's
//! stream over ep0 (START: rate, sample size, device buffer, request
//! size), runs the host application on the bulk pipes for -t seconds,
//! stops the device (STOP returns its overruns and underruns with their
//! times) and is judged by the core's [`CbrCriterion`]; one rate is one
//! trial, a ladder is the core's [`RateSearch`], repeated. The report is
//! an `xferlab.cbr/1` document like `xferlab cbr -J`'s, with USB fields
//! ([`UsbCbrReport`]), or a line per trial.
//!
//! The steps, each in its own module: check the request ([`plan`]),
//! claim the device and check it over ep0 ([`ep0`]), run each trial on
//! the driver loop ([`trial`], on [`stream`]'s threads), and show what
//! came of it ([`report`]).

mod ep0;
mod plan;
mod report;
mod stream;
mod trial;

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use clap::ValueEnum;
use xferlab_core::datagram::{Plan, RateSearch};
use xferlab_core::usb::cbr::report::{CbrDirection, CbrRun, HostStall, UsbCbrReport, UsbCbrSetup};
use xferlab_core::usb::cbr::wire::StartParams;
use xferlab_core::usb::cbr::CbrCriterion;

use self::ep0::{Endpoints, Ep0};
use super::bulk::claim::{Claimed, Want};
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

pub fn run(a: &CbrRequest, interrupts: &AtomicU32) -> ExitCode {
    cbr(a, interrupts).unwrap_or_else(|f| {
        eprintln!("xferlab: {}", f.msg);
        ExitCode::from(f.code)
    })
}

fn cbr(a: &CbrRequest, interrupts: &AtomicU32) -> Result<ExitCode, Fail> {
    let s = plan::check(a)?;
    let dev = Claimed::open_for(&Want {
        select: &a.select,
        ep_in: None,
        ep_out: None,
        dir: a.dir.usb(),
        size: a.size,
    })?;
    let ep0 = Ep0::of(&dev);
    ep0.check_device()?;
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
        w(&mut out, report::device_line(&dev))?;
        w(&mut out, report::test_line(a, &s))?;
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
            let params = StartParams {
                rate: bps / 8,
                ..s.params
            };
            let ran = trial::run(
                &ep0,
                &mut eps,
                s.app,
                params,
                a.time,
                &mut search,
                interrupts,
            )?;
            if let Some(t) = ran.trial {
                if !a.report.json() {
                    w(&mut out, report::trial_line(run, &t))?;
                }
                trials.push(t);
            }
            // A press during a trial ends it (it is shown) and the runs,
            // as one between trials does.
            if ran.interrupted {
                interrupted = true;
                break 'runs;
            }
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
