//! `xferlab usb mon` and the global `--usbmon` beside any verb
//! ([`Background`]): bus accounting from usbmon's binary interface. Maps
//! the ring of `/dev/usbmonN` and fetches events in batches
//! (MON_IOCX_MFETCH, non-blocking, with poll() when the ring is empty)
//! for the bus of one device, feeds its bulk events to the core's
//! [`BusMeter`] and reports per direction and interval: payload bytes,
//! transfers/s, frames per transfer and the share of the high-speed bulk
//! capacity; and how far it fell behind the bus, which explains any
//! events the ring dropped.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use xferlab_sys::usbmon::{OpenError, Usbmon};

// The sys crate reads events by the core's header length.
const _: () = assert!(xferlab_sys::usbmon::HDR_LEN == MON_BIN_HDR_LEN);
use xferlab_core::usb::usbmon::{
    BusDirection, BusMeter, BusReport, BusSample, DirCounters, MonEvent, HS_BULK_CAPACITY_BPS,
    MON_BIN_HDR_LEN,
};

use super::device;
use super::ReportTo;
use xferlab_core::usb::net::Encap;

/// The kernel's largest ring (BUFF_MAX, 1200 KiB): captures up to 240 KiB
/// per event, more than an NTB or a coalesced EEM transfer holds.
const RING_SIZE: usize = 1200 * 1024;
/// Events fetched per ioctl. One GETX ioctl per event lost thousands of
/// events a second to a full ring under TCG with an ECM link at ~10k
/// events/s; fetching in batches from the mapped ring lost none.
const BATCH: usize = 256;

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
    match record(a, interrupts) {
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

fn knobs(a: &MonRequest) -> anyhow::Result<BTreeMap<String, String>> {
    a.knobs
        .iter()
        .map(|k| {
            k.split_once('=')
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .ok_or_else(|| anyhow!("--knob {k}: write it as NAME=VALUE, e.g. --knob mtu=1500"))
        })
        .collect()
}

fn record(a: &MonRequest, interrupts: &AtomicU32) -> anyhow::Result<BusReport> {
    if a.interval.is_nan() || a.interval <= 0.0 {
        bail!("-i/--interval must be above 0 s (got {})", a.interval);
    }
    let knobs = knobs(a)?;
    let mon = Monitor::open(&a.device, a.encap, knobs)?;
    let t0 = Instant::now();
    let end = a.time.map(|t| t0 + Duration::from_secs_f64(t));
    mon.run(Duration::from_secs_f64(a.interval), || {
        interrupts.load(Relaxed) > 0 || end.is_some_and(|e| Instant::now() >= e)
    })
}

/// One device's bus, opened for reading: the device found, its bus's
/// usbmon ring mapped.
pub struct Monitor {
    path: String,
    ring: Usbmon,
    bus: u8,
    devnum: u8,
    speed: Option<String>,
    encap: Option<Encap>,
    knobs: BTreeMap<String, String>,
}

impl Monitor {
    /// Finds `device` (VID:PID or BUS.ADDR) and maps its bus's ring; every
    /// failure is one line naming the fix.
    pub fn open(
        device: &str,
        encap: Option<Encap>,
        knobs: BTreeMap<String, String>,
    ) -> anyhow::Result<Monitor> {
        let sel = device::parse_selector(Some(device))?;
        let dev = device::select(&sel, None)?;
        let bus = dev.busnum();
        let path = format!("/dev/usbmon{bus}");
        let ring = Usbmon::open(bus, RING_SIZE).map_err(|e| match e {
            OpenError::Open(e) => match e.kind() {
                std::io::ErrorKind::NotFound => anyhow!(
                    "no {path}: load usbmon (`modprobe usbmon`; CONFIG_USB_MON) and mount devtmpfs"
                ),
                std::io::ErrorKind::PermissionDenied => {
                    anyhow!("cannot open {path}: reading usbmon needs root; run it with sudo")
                }
                _ => anyhow!("cannot open {path}: {e}"),
            },
            OpenError::RingSize(e) => anyhow!("{path}: cannot read the usbmon ring size ({e})"),
            OpenError::Map(e) => anyhow::Error::from(e).context(format!("cannot map {path}")),
        })?;
        Ok(Monitor {
            path,
            ring,
            bus,
            devnum: dev.device_address(),
            speed: device::speed_label(dev.speed()).map(str::to_string),
            encap,
            knobs,
        })
    }

    /// Reads the bus until `stop` says so, cutting an interval every
    /// `step`, and reports.
    pub fn run(self, step: Duration, stop: impl Fn() -> bool) -> anyhow::Result<BusReport> {
        let Monitor {
            path,
            mut ring,
            bus,
            devnum,
            speed,
            encap,
            knobs,
        } = self;
        // The reader must keep up with the link it watches, which may hold
        // the CPU (one CPU under TCG: with an ECM link at full speed the
        // ring still overflowed by ~360 events in 5 s at nice 0, by none at
        // nice -10; with traffic both ways on one CPU it still may: the
        // report counts it). A higher priority only changes when it runs,
        // not how much: root may raise it.
        // setpriority on this thread (Linux: per thread).
        let _ = rustix::process::setpriority_process(None, -20);
        let mut meter = BusMeter::new(encap, Some(devnum));
        let mut offsets = [0u32; BATCH];
        let mut flush = 0u32;
        let t0 = Instant::now();
        let mut next = t0 + step;
        let (mut prev_in, mut prev_out) = (meter.host_in, meter.host_out);
        let (mut ins, mut outs) = (Vec::new(), Vec::new());
        let mut since_check = 0u32;
        let mut cut = |meter: &BusMeter,
                       prev_in: &mut DirCounters,
                       prev_out: &mut DirCounters,
                       from: f64,
                       to: f64| {
            ins.push(meter.host_in.sample(prev_in, from, to));
            outs.push(meter.host_out.sample(prev_out, from, to));
            *prev_in = meter.host_in;
            *prev_out = meter.host_out;
        };
        let mut last_cut = 0.0;
        let mut lag_max_us = 0i64;
        loop {
            // The flush is done before the fetch can fail (EAGAIN, EINTR).
            let fetched = ring.fetch(&mut offsets, flush);
            flush = 0;
            let idle = match fetched {
                Ok(batch) => {
                    let mut oldest = true;
                    for i in 0..batch.len() {
                        // Fillers at the ring's end ('@') do not parse: skipped.
                        let Some(ev) = batch.header(i).and_then(MonEvent::parse) else {
                            continue;
                        };
                        if oldest {
                            // One clock read per fetch: the oldest event's age.
                            oldest = false;
                            lag_max_us = lag_max_us.max(realtime_us() - ev.ts_us);
                        }
                        meter.record(&ev, batch.data(i));
                    }
                    let n = batch.len() as u32;
                    flush = n;
                    since_check += n;
                    n == 0
                }
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) => true,
                    Some(libc::EINTR) => false,
                    _ => return Err(e).with_context(|| format!("reading {path}")),
                },
            };
            if idle || since_check >= 256 {
                since_check = 0;
                let now = Instant::now();
                while now >= next {
                    let to = (next - t0).as_secs_f64();
                    cut(&meter, &mut prev_in, &mut prev_out, last_cut, to);
                    last_cut = to;
                    next += step;
                }
                if stop() {
                    break;
                }
                if idle {
                    // Polling beat sleeping 5 ms between fetches under TCG
                    // (2763 vs 0-360 events lost in 5 s): a sleeping reader
                    // wakes late and the 1.2 MB ring (~30 ms of a busy link)
                    // overflows.
                    let fd = ring.fd();
                    let mut p = [PollFd::new(&fd, PollFlags::IN)];
                    let ms20 = Timespec {
                        tv_sec: 0,
                        tv_nsec: 20_000_000,
                    };
                    poll(&mut p, Some(&ms20)).ok();
                }
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        if secs - last_cut > 1e-3 {
            cut(&meter, &mut prev_in, &mut prev_out, last_cut, secs);
        }
        let (_, dropped) = ring.stats().unwrap_or((0, 0));
        let zero = DirCounters::default();
        Ok(BusReport {
            bus: u16::from(bus),
            devnum: Some(devnum),
            speed,
            encap,
            knobs,
            dropped_events: u64::from(dropped),
            ring_bytes: ring.ring_len() as u64,
            reader_lag_max_ms: lag_max_us as f64 / 1e3,
            capacity_bytes_per_second: HS_BULK_CAPACITY_BPS,
            host_in: BusDirection {
                intervals: ins,
                total: meter.host_in.sample(&zero, 0.0, secs),
            },
            host_out: BusDirection {
                intervals: outs,
                total: meter.host_out.sample(&zero, 0.0, secs),
            },
        })
    }
}

/// CLOCK_REALTIME in microseconds: usbmon stamps its events with it.
fn realtime_us() -> i64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    ts.tv_sec * 1_000_000 + ts.tv_nsec / 1_000
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
