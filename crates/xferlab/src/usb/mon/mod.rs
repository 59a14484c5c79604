//! `xferlab usb mon` and the global `--usbmon` beside any verb
//! ([`Background`]): bus accounting from usbmon's binary interface. Maps
//! the ring of `/dev/usbmonN` and fetches events in batches
//! (MON_IOCX_MFETCH, non-blocking, with poll() when the ring is empty)
//! for the bus of one device, feeds its bulk events to the core's
//! [`BusMeter`] and reports per direction and interval: payload bytes,
//! transfers/s, frames per transfer and the share of the high-speed bulk
//! capacity; and how far it fell behind the bus, which explains any
//! events the ring dropped. The reader is [`Monitor`]; this module is
//! the verb and the background run.

mod monitor;
mod workload;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, Context};
use xferlab_core::units::RateUnit;
use xferlab_core::usb::net::Encap;
use xferlab_core::usb::usbmon::{BusReport, BusSample};

use self::monitor::Monitor;
use self::workload::MonWorkload;
use super::alone::{self, Shown};
use super::{Fail, ReportTo};
use crate::output::{self, Format};
use crate::sys::clock;

/// `usb mon` as asked for.
#[derive(Debug, Clone)]
pub struct MonRequest {
    /// VID:PID or BUS.ADDR.
    pub device: String,
    /// The link's framing, to count Ethernet frames per transfer.
    pub encap: Option<Encap>,
    /// Seconds to record; None is until interrupted.
    pub time: Option<f64>,
    /// Seconds between interval samples.
    pub interval: f64,
    /// `NAME=VALUE`, checked by the verb.
    pub knobs: Vec<String>,
    pub report: ReportTo,
}

pub fn run(a: &MonRequest, interrupts: &AtomicU32) -> ExitCode {
    record(a, interrupts).unwrap_or_else(|f| {
        eprintln!("xferlab: {}", f.msg);
        ExitCode::from(f.code)
    })
}

/// The request's usage errors (exit 2, before any device is looked
/// up), and its knobs.
fn check(a: &MonRequest) -> Result<BTreeMap<String, String>, Fail> {
    if a.interval.is_nan() || a.interval <= 0.0 {
        return Err(Fail::usage(format!(
            "-i/--interval must be above 0 s (got {})",
            a.interval
        )));
    }
    if let Some(t) = a.time.filter(|t| !(t.is_finite() && *t > 0.0)) {
        return Err(Fail::usage(format!(
            "-t/--time must be a positive duration (got {t})"
        )));
    }
    if a.report.format == Format::Iperf3Json {
        return Err(Fail::usage(
            "--format iperf3-json has no shape for USB results; use json, jsonl or csv",
        ));
    }
    a.knobs
        .iter()
        .map(|k| {
            k.split_once('=')
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .ok_or_else(|| {
                    Fail::usage(format!(
                        "--knob {k}: write it as NAME=VALUE, e.g. --knob mtu=1500"
                    ))
                })
        })
        .collect()
}

/// Reads the bus on the driver loop until `-t` or Ctrl-C, then reports
/// through the common reporter with the bus report in `usbmon`.
fn record(a: &MonRequest, interrupts: &AtomicU32) -> Result<ExitCode, Fail> {
    let knobs = check(a)?;
    let mon = Monitor::open(&a.device, a.encap, knobs).map_err(Fail::run)?;
    let out = output::open(a.report.output.as_deref()).map_err(Fail::usage)?;
    let mut reporter = output::reporter(a.report.format, RateUnit::AutoBits, out);
    // Both directions of the bus: host OUT as c2s, host IN as s2c.
    let spec = alone::spec(a.time, a.interval, &a.report);
    let (tx, rx) = mpsc::channel();
    let (report_to, bus) = mpsc::channel();
    let wall_start = SystemTime::now();
    let address = mon.address();
    let line = mon.describe();
    let workload = MonWorkload::start(
        mon,
        a.interval,
        crate::control::flow_done_notifier(&tx),
        report_to,
        super::process_cpu(),
    )
    .map_err(Fail::run)?;
    let start = clock::now();
    let flows = workload.flow_starts();
    let shown = Shown {
        session: format!("usbmon-{}", address.replace([' ', '.'], "-")),
        spec,
        address,
        line: &line,
        wall_start,
    };
    let (mut result, pressed) = alone::run(
        shown,
        Box::new(workload),
        (start, &flows),
        &rx,
        &mut *reporter,
        interrupts,
    );
    result.usbmon = bus.try_recv().ok();
    let code = alone::finish(reporter, &result, pressed)?;
    if let Some(r) = &result.usbmon {
        bus_lines(a, r)?;
    }
    Ok(code)
}

/// What only the bus has, after the common report: the text format's
/// totals per direction, or a JSON report's drops on stderr.
fn bus_lines(a: &MonRequest, r: &BusReport) -> Result<(), Fail> {
    if a.report.format != Format::Human {
        // The text report holds it; other formats only count the drops.
        if let Some(d) = drops_line(r) {
            eprintln!("xferlab: warning: {d}");
        }
        return Ok(());
    }
    let text = summary(r) + "\n";
    let written = match &a.report.output {
        Some(p) => std::fs::OpenOptions::new()
            .append(true)
            .open(p)
            .and_then(|mut f| f.write_all(text.as_bytes())),
        None => std::io::stdout().write_all(text.as_bytes()),
    };
    written.map_err(|e| Fail::run(format!("cannot write the bus report: {e}")))
}

/// The line that explains dropped events, or none.
fn drops_line(r: &BusReport) -> Option<String> {
    (r.dropped_events > 0).then(|| {
        format!(
            "usbmon dropped {} events: its ring ({} KiB) filled while the reader was up to \
             {:.0} ms behind the bus, so the counts are low; give the reader a CPU of its own \
             (fewer busy threads beside it; in a VM, a host that does not take its vCPU away)",
            r.dropped_events,
            r.ring_bytes / 1024,
            r.reader_lag_max_ms
        )
    })
}

/// `--usbmon DEVICE[,ENCAP]`: the device (VID:PID or BUS.ADDR) whose bus
/// usbmon reads beside the verb, and the link's framing to count frames
/// per transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsbMonSpec {
    pub device: String,
    pub encap: Option<Encap>,
}

impl std::str::FromStr for UsbMonSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (device, encap) = match s.split_once(',') {
            Some((d, e)) => {
                let encap = Encap::parse(e).ok_or_else(|| {
                    format!("'{e}' is no USB network framing: ecm, eem or ncm (e.g. 1.2,ncm)")
                })?;
                (d, Some(encap))
            }
            None => (s, None),
        };
        if device.is_empty() {
            return Err("name the device: VID:PID or BUS.ADDR, e.g. 0525:a4a1 or 1.2,ecm".into());
        }
        Ok(UsbMonSpec {
            device: device.to_string(),
            encap,
        })
    }
}

/// `--usbmon DEVICE[,ENCAP]` beside any verb: the device's bus read on a
/// thread of its own from before the verb starts until it ends.
pub struct Background {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<anyhow::Result<BusReport>>,
}

impl Background {
    pub fn start(spec: &UsbMonSpec) -> anyhow::Result<Background> {
        let mon = Monitor::open(&spec.device, spec.encap, BTreeMap::new())?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xl-usbmon".into())
            .spawn(move || mon.run(Duration::from_secs(1), || flag.load(Relaxed), |_, _| {}))
            .context("cannot start the usbmon thread")?;
        Ok(Background { stop, thread })
    }

    pub fn stop(self) -> anyhow::Result<BusReport> {
        self.stop.store(true, Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow!("the usbmon thread panicked"))?
    }
}

/// The totals of a report in one line per direction, for stderr.
pub fn summary(r: &BusReport) -> String {
    let mut t = format!(
        "usbmon bus {} device {} ({}):\n{}\n{}",
        r.bus,
        r.devnum.unwrap_or(0),
        r.encap.map(|e| e.label()).unwrap_or("no framing given"),
        line("IN", &r.host_in.total),
        line("OUT", &r.host_out.total)
    );
    if let Some(d) = drops_line(r) {
        t += "\n";
        t += &d;
    }
    t
}

fn line(label: &str, s: &BusSample) -> String {
    format!(
        "{label:>13}  {:>7.2} MB/s {:>5.1}% bus  {:>8.0} tr/s  {:>5.2} frames/tr",
        s.mbytes_per_second, s.bus_percent, s.transfers_per_second, s.frames_per_transfer
    )
}
