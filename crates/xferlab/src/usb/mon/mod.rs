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

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use xferlab_core::usb::net::Encap;
use xferlab_core::usb::usbmon::{BusReport, BusSample};

use self::monitor::Monitor;
use super::{Fail, ReportTo};

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
    let knobs = match check(a) {
        Ok(k) => k,
        Err(f) => {
            eprintln!("xferlab: {}", f.msg);
            return ExitCode::from(f.code);
        }
    };
    match record(a, knobs, interrupts) {
        Ok(report) => match print(a, &report) {
            Ok(()) => {
                // The text report holds it; a JSON one only counts the drops.
                if let Some(d) = drops_line(&report).filter(|_| a.report.json()) {
                    eprintln!("xferlab: warning: {d}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("xferlab: {e:#}");
                ExitCode::from(1)
            }
        },
        Err(e) => {
            eprintln!("xferlab: {e:#}");
            ExitCode::from(1)
        }
    }
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

fn record(
    a: &MonRequest,
    knobs: BTreeMap<String, String>,
    interrupts: &AtomicU32,
) -> anyhow::Result<BusReport> {
    let mon = Monitor::open(&a.device, a.encap, knobs)?;
    let t0 = Instant::now();
    let end = a.time.map(|t| t0 + Duration::from_secs_f64(t));
    mon.run(Duration::from_secs_f64(a.interval), || {
        interrupts.load(Relaxed) > 0 || end.is_some_and(|e| Instant::now() >= e)
    })
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
            .spawn(move || mon.run(Duration::from_secs(1), || flag.load(Relaxed)))
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

fn print(a: &MonRequest, r: &BusReport) -> anyhow::Result<()> {
    let text = if a.report.json() {
        serde_json::to_string_pretty(&serde_json::json!({
            "schema": "xferlab.usbmon/1",
            "usbmon": r,
        }))? + "\n"
    } else {
        let mut t = format!(
            "usbmon bus {} device {}: {} (capacity {:.3} MB/s: 13 x 512 B per 125 us microframe)\n",
            r.bus,
            r.devnum.unwrap_or(0),
            r.encap.map(|e| e.label()).unwrap_or("no framing given"),
            r.capacity_bytes_per_second / 1e6
        );
        for (i, o) in r.host_in.intervals.iter().zip(&r.host_out.intervals) {
            let span = format!("{:.1}-{:.1} s", i.start_s, i.end_s);
            t += &format!(
                "{}  | {}\n",
                line(&format!("{span} IN"), i),
                line("OUT", o).trim_start()
            );
        }
        t += &format!(
            "{}  | {}\n",
            line("total IN", &r.host_in.total),
            line("OUT", &r.host_out.total).trim_start()
        );
        if let Some(d) = drops_line(r) {
            t += &d;
            t += "\n";
        }
        t
    };
    match &a.report.output {
        Some(p) => std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display())),
        None => {
            std::io::stdout().write_all(text.as_bytes())?;
            Ok(())
        }
    }
}
