//! `xferlab usb gadget`: the device half of a USB bulk test on a machine
//! with a USB device controller (UDC). A configfs gadget carries either
//! xferlab's own source/sink over FunctionFS (IN: writes the pattern, OUT:
//! reads and checks it; synchronous or Linux AIO with a queue of
//! requests), xferlab's fixed-rate device over FunctionFS (`usb cbr`'s
//! peer), the device side of xferlab's own network link over FunctionFS
//! (`usb net`'s peer), the kernel's SourceSink function, or its network
//! functions. Everything it creates
//! (configfs directories, the FunctionFS mount) is removed on exit, also
//! after an error or Ctrl-C; `--cleanup` removes what a killed run left.

//!
//! The phases, each in its own module: the checks ([`plan`]), making the
//! device ([`setup`]: configfs, or raw-gadget through [`raw`]), serving
//! it on the driver loop until `-t` or Ctrl-C ([`workload`], which also
//! tears it down), and the result ([`outcome`]), reported through the
//! common [`Reporter`](crate::output::Reporter)s as every verb's.

mod cbr_io;
mod configfs;
mod ffs_io;
mod net_io;
mod outcome;
mod plan;
mod raw;
mod setup;
mod workload;

use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use clap::ValueEnum;
use xferlab_core::interval::IntervalClock;
use xferlab_core::units::RateUnit;
use xferlab_core::usb::net::Encap;
use xferlab_core::usb::Pattern;

use super::{Fail, LinkRequest, ReportTo};
use crate::driver::client::drive_alone;
use crate::output::{self, GadgetStart, StartInfo};
use crate::sys::clock;
pub use configfs::cleanup;
use workload::{GadgetWorkload, Served};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GadgetFunction {
    /// xferlab's own source/sink over FunctionFS (ep1 IN, ep2 OUT).
    Ffs,
    /// xferlab's fixed-rate device over FunctionFS: produces (IN) or
    /// consumes (OUT) samples at the rate, buffer and request size that
    /// `xferlab usb cbr` sets per trial, counting overruns and underruns.
    Cbr,
    /// The kernel's SourceSink function (usb_f_ss_lb), as g_zero: 0525:a4a0.
    Sourcesink,
    /// The kernel's CDC-ECM network function (usb_f_ecm; host: cdc_ether).
    Ecm,
    /// The kernel's CDC-EEM network function (usb_f_eem; host: cdc_eem).
    Eem,
    /// The kernel's CDC-NCM network function (usb_f_ncm; host: cdc_ncm).
    Ncm,
    /// xferlab's own network link over FunctionFS: a TAP device bridged to
    /// bulk IN/OUT in --encap framing (EEM: a CDC-EEM interface the host's
    /// cdc_eem binds; ECM and NCM: vendor-specific, for `xferlab usb net`).
    Net,
}

impl GadgetFunction {
    /// The kernel network functions: (configfs function type, module).
    pub fn net_kind(self) -> Option<(&'static str, &'static str)> {
        match self {
            GadgetFunction::Ecm => Some(("ecm", "usb_f_ecm")),
            GadgetFunction::Eem => Some(("eem", "usb_f_eem")),
            GadgetFunction::Ncm => Some(("ncm", "usb_f_ncm")),
            GadgetFunction::Ffs
            | GadgetFunction::Cbr
            | GadgetFunction::Sourcesink
            | GadgetFunction::Net => None,
        }
    }
}

/// How `--function net` makes its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GadgetVia {
    /// A FunctionFS function of a configfs gadget, with AIO.
    Functionfs,
    /// A whole device through /dev/raw-gadget, announcing real CDC
    /// interfaces (one transfer in flight per direction).
    RawGadget,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GadgetIo {
    /// One blocking read()/write() at a time per endpoint.
    Sync,
    /// Linux AIO (io_submit) with --queue requests in flight per endpoint.
    Aio,
}

/// `usb gadget` as asked for (`--cleanup` is [`super::UsbRequest::GadgetCleanup`]).
#[derive(Debug, Clone)]
pub struct GadgetRequest {
    pub function: GadgetFunction,
    pub io: GadgetIo,
    /// Requests in flight per endpoint.
    pub queue: u32,
    pub qmult: Option<u32>,
    /// Bytes per request.
    pub size: u64,
    pub pattern: Pattern,
    /// None is the only UDC in /sys/class/udc.
    pub udc: Option<String>,
    /// The gadget's name under configfs.
    pub name: String,
    /// VID:PID to announce, checked by the verb; None is the function's default.
    pub id: Option<String>,
    pub serial: String,
    /// Seconds to serve; None is until interrupted.
    pub time: Option<f64>,
    /// Seconds between interval reports (0 = none).
    pub interval: f64,
    /// `--function net`'s framing.
    pub encap: Option<Encap>,
    pub via: GadgetVia,
    pub link: LinkRequest,
    pub report: ReportTo,
}

pub fn run(a: &GadgetRequest, interrupts: &AtomicU32) -> ExitCode {
    gadget(a, interrupts).unwrap_or_else(|f| {
        eprintln!("xferlab: {}", f.msg);
        ExitCode::from(f.code)
    })
}

fn gadget(a: &GadgetRequest, interrupts: &AtomicU32) -> Result<ExitCode, Fail> {
    let plan = plan::check(a)?;
    let out = output::open(a.report.output.as_deref()).map_err(Fail::usage)?;
    let mut reporter = output::reporter(a.report.format, RateUnit::AutoBits, out);
    let spec = outcome::spec(a);
    let clock = IntervalClock::new(a.interval, 0.0);
    let (_tx, rx) = mpsc::channel();
    let (served, shared, net, udc, ifname) = if a.via == GadgetVia::RawGadget {
        let (run, shared, net) = setup::raw(a, &plan)?;
        let udc = run.report().udc;
        (Served::Raw(run), shared, net, udc, None)
    } else {
        let r = setup::configfs(a, &plan)?;
        let (shared, net, udc, ifname) = (
            r.shared.clone(),
            r.net.clone(),
            r.udc.clone(),
            r.ifname.clone(),
        );
        (Served::Configfs(r), shared, net, udc, ifname)
    };
    // The run starts once the host can see the device: -t counts from here.
    let cpu_start = super::process_cpu();
    let wall_start = SystemTime::now();
    let start = clock::now();
    let section = outcome::section(a, &plan, &udc, ifname);
    // The kernel's own functions move the data without us: no flows.
    let threads = matches!(
        a.function,
        GadgetFunction::Ffs | GadgetFunction::Cbr | GadgetFunction::Net
    );
    let flows = workload::flows(threads, clock);
    let flow_starts = workload::flow_starts(&flows, &udc);
    let raw_endpoints = match &served {
        Served::Raw(r) => Some(r.report().endpoints),
        Served::Configfs(_) => None,
    };
    let session = format!("usb-gadget-{}", a.name);
    let started = StartInfo {
        spec: &spec,
        server: &udc,
        embedded: false,
        session: &session,
        flows: &flow_starts,
    };
    let limits = a.encap.map(|e| net_io::limits(e, &a.link));
    let _ = reporter.usb_gadget_start(
        &started,
        &GadgetStart {
            gadget: &section,
            max_frames: limits.map(|l| l.max_frames as u64),
            max_transfer: limits.map(|l| l.max_transfer as u64),
            raw_endpoints: raw_endpoints.map(|e| (e.0 | 0x80, e.1)),
        },
    );
    let workload = GadgetWorkload {
        served,
        section,
        shared,
        net,
        flows,
        clock,
        boundary: clock.next_boundary(0.0),
        start,
        cpu_start,
        name: a.name.clone(),
        udc: udc.clone(),
        stopped: false,
        cut: false,
        warnings: Vec::new(),
    };
    let planned = spec.planned_seconds().map(Duration::from_secs_f64);
    let driven = drive_alone(
        Box::new(workload),
        (start, planned),
        workload::DRAIN,
        &rx,
        &mut *reporter,
        interrupts,
    );
    // An open run has no end but Ctrl-C: stopped by it, it is whole. The
    // exit code follows any Ctrl-C or SIGTERM, a second press too.
    let interrupted = driven.run.interrupted() && planned.is_some();
    let signalled = interrupts.load(Relaxed) > 0;
    let mut finished = driven
        .workload
        .expect("drive_alone starts the workload on its first pass")
        .finish();
    finished.errors.extend(driven.error);
    let result = super::outcome::result(spec, udc, finished, wall_start, interrupted);
    reporter
        .finish(&result)
        .map_err(|e| Fail::run(format!("cannot write the result: {e}")))?;
    for e in &result.errors {
        eprintln!("xferlab: {e}");
    }
    Ok(outcome::exit_code(&result, signalled))
}
