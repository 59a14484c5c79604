//! The USB transport: `xferlab usb list | bulk | cbr | gadget | mon | net`. The sans-IO parts
//! (descriptors, patterns, queue bookkeeping, counters, error texts) live in
//! xferlab_core::usb; this module holds the usbfs and configfs/FunctionFS
//! drivers.

mod alone;
mod bulk;
mod cbr;
mod device;
mod engine;
mod gadget;
pub mod mon;
mod net;
mod outcome;
mod tap;
use xferlab_sys::usbfs;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicU32;

use clap::ValueEnum;

pub use self::bulk::BulkRequest;
pub use self::cbr::{CbrDir, CbrRequest};
pub use self::device::Selection;
pub use self::gadget::{GadgetFunction, GadgetIo, GadgetRequest, GadgetVia};
pub use self::mon::MonRequest;
pub use self::net::{LinkRequest, NetRequest};
use crate::output::Format;

/// The direction of a bulk run (`usb bulk`, `model usb`). A ValueEnum
/// here, below cli, so the verbs take it as a plain value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UsbDir {
    /// Device to host (bulk IN).
    In,
    /// Host to device (bulk OUT).
    Out,
    /// IN and OUT at once, one thread each.
    Both,
}

/// A `usb` verb as the command line asked for it, in plain values: the
/// verbs check them (their one-line errors name the flags) and run.
#[derive(Debug)]
pub enum UsbRequest {
    List,
    Bulk(Box<BulkRequest>),
    Cbr(Box<CbrRequest>),
    Gadget(Box<GadgetRequest>),
    /// `usb gadget --cleanup --name NAME`: remove what a killed run left.
    GadgetCleanup {
        name: String,
    },
    Mon(Box<MonRequest>),
    Net(Box<NetRequest>),
}

/// Where and how a verb writes its report.
#[derive(Debug, Clone)]
pub struct ReportTo {
    /// `-J` is already folded in.
    pub format: Format,
    /// `-o`; None is stdout.
    pub output: Option<PathBuf>,
    /// `-T`, stored in the result.
    pub title: Option<String>,
}

impl ReportTo {
    pub fn json(&self) -> bool {
        self.format == Format::Json
    }
}

/// Why a run could not start or report: the one line printed, and the
/// exit code (2 for arguments, 1 for the device or the system).
pub struct Fail {
    pub code: u8,
    pub msg: String,
}

impl Fail {
    /// `why` is a message or an error with its context, printed `{:#}`
    /// (each cause after a colon).
    pub fn usage(why: impl std::fmt::Display) -> Fail {
        Fail {
            code: 2,
            msg: format!("{why:#}"),
        }
    }

    pub fn run(why: impl std::fmt::Display) -> Fail {
        Fail {
            code: 1,
            msg: format!("{why:#}"),
        }
    }
}

/// (user, system) CPU seconds of the whole process. A USB run owns its
/// process, and nusb reaps URBs on its own event thread, so process-wide
/// rusage is the honest figure here.
pub(crate) fn process_cpu() -> (f64, f64) {
    crate::sys::cpu::process_times()
}

pub fn run(r: &UsbRequest, interrupts: &AtomicU32) -> ExitCode {
    match r {
        UsbRequest::List => list(),
        UsbRequest::Bulk(b) => bulk::run(b, interrupts),
        UsbRequest::Cbr(c) => cbr::run(c, interrupts),
        UsbRequest::Gadget(g) => gadget::run(g, interrupts),
        UsbRequest::GadgetCleanup { name } => gadget::cleanup(name),
        UsbRequest::Mon(m) => mon::run(m, interrupts),
        UsbRequest::Net(n) => net::run(n, interrupts),
    }
}

fn list() -> ExitCode {
    let devs = match device::list_devices() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("xferlab: {e:#}");
            return ExitCode::from(1);
        }
    };
    outln!("BUS.ADDR  VID:PID    SPEED       DRIVERS            PRODUCT");
    for d in &devs {
        let drivers: Vec<String> = d
            .interfaces()
            .map(|i| {
                let drv =
                    device::interface_driver(d, i.interface_number()).unwrap_or_else(|| "-".into());
                format!("{}:{drv}", i.interface_number())
            })
            .collect();
        outln!(
            "{:<9} {:04x}:{:04x}  {:<10}  {:<17}  {}{}",
            format!("{}.{}", d.busnum(), d.device_address()),
            d.vendor_id(),
            d.product_id(),
            device::speed_label(d.speed()).unwrap_or("?"),
            if drivers.is_empty() {
                "-".into()
            } else {
                drivers.join(",")
            },
            d.product_string().unwrap_or(""),
            d.serial_number()
                .map(|s| format!(" (serial {s})"))
                .unwrap_or_default()
        );
    }
    ExitCode::SUCCESS
}
