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
//! until `-t` or Ctrl-C, the teardown, and the report ([`outcome`]).

mod cbr_io;
mod configfs;
mod ffs_io;
mod net_io;
mod outcome;
mod plan;
mod raw;
mod setup;

use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::{Duration, Instant};

use clap::ValueEnum;
use xferlab_core::usb::net::Encap;
use xferlab_core::usb::Pattern;

use super::{Fail, LinkRequest, ReportTo};
pub use configfs::cleanup;
use plan::Plan;

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
    if a.via == GadgetVia::RawGadget {
        return run_raw(a, &plan, interrupts);
    }
    let mut running = setup::configfs(a, &plan)?;
    let t0 = Instant::now();
    let cpu0 = super::process_cpu();
    say(
        a,
        outcome::start_line(a, &plan, &running.udc, running.ifname.as_deref()),
    );
    let limit = a.time.map(Duration::from_secs_f64);
    while interrupts.load(Relaxed) == 0 && limit.is_none_or(|l| t0.elapsed() < l) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let secs = t0.elapsed().as_secs_f64();
    // Teardown: stop, unbind (ends every transfer in flight), join, unmount, remove.
    running.stop();
    running.join(Instant::now() + Duration::from_secs(5));
    let (shared, net, ifname) = (
        running.shared.clone(),
        running.net.clone(),
        running.ifname.clone(),
    );
    let leftover = running.remove(&a.name);
    let cpu1 = super::process_cpu();
    outcome::report(
        a,
        &shared,
        &net,
        secs,
        (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1),
        ifname.as_deref(),
        None,
    );
    if leftover {
        return Err(Fail::run(format!(
            "could not remove everything of gadget `{}`; run `xferlab usb gadget --cleanup --name {}`",
            a.name, a.name
        )));
    }
    Ok(exit_code(interrupts))
}

/// `--via raw-gadget`: the link as a device of its own (gadget/raw.rs).
fn run_raw(a: &GadgetRequest, plan: &Plan, interrupts: &AtomicU32) -> Result<ExitCode, Fail> {
    let t0 = Instant::now();
    let cpu0 = super::process_cpu();
    let (run, shared, net) = setup::raw(a, plan)?;
    say(a, outcome::raw_start_line(a, plan, &run.report()));
    let limit = a.time.map(Duration::from_secs_f64);
    let stop = || interrupts.load(Relaxed) > 0 || limit.is_some_and(|l| t0.elapsed() >= l);
    while !stop() && !run.any_finished() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = run.finish();
    let secs = t0.elapsed().as_secs_f64();
    let cpu1 = super::process_cpu();
    outcome::report(
        a,
        &shared,
        &net,
        secs,
        (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1),
        None,
        Some(&r),
    );
    Ok(exit_code(interrupts))
}

/// The start line; with -J stdout carries only the JSON document.
fn say(a: &GadgetRequest, msg: String) {
    if a.report.json() {
        eprintln!("{msg}");
    } else {
        outln!("{msg}");
        let _ = io::stdout().flush();
    }
}

fn exit_code(interrupts: &AtomicU32) -> ExitCode {
    if interrupts.load(Relaxed) > 0 {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    }
}
