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
use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use xferlab_core::usb::usbmon::{
    BusDirection, BusMeter, BusReport, BusSample, DirCounters, MonEvent, HS_BULK_CAPACITY_BPS,
    MON_BIN_HDR_LEN,
};

use super::device;
use crate::cli::usb::{MonArgs, UsbMonSpec};
use xferlab_core::usb::net::Encap;

/// struct mon_bin_mfetch { offvec, nfetch, nflush } (drivers/usb/mon/mon_bin.c).
#[repr(C)]
struct MonBinMfetch {
    offvec: *mut u32,
    nfetch: u32,
    nflush: u32,
}

const MON_IOC_MAGIC: u64 = 0x92;
/// _IOWR(0x92, 7, struct mon_bin_mfetch): flush `nflush` events, then
/// return the ring offsets of up to `nfetch` queued ones.
const MON_IOCX_MFETCH: u64 =
    (3 << 30) | ((size_of::<MonBinMfetch>() as u64) << 16) | (MON_IOC_MAGIC << 8) | 7;
/// _IO(0x92, 4): set the ring size (data captured per event is at most a
/// fifth of it).
const MON_IOCT_RING_SIZE: u64 = (MON_IOC_MAGIC << 8) | 4;
/// _IO(0x92, 5): the ring size, as the return value.
const MON_IOCQ_RING_SIZE: u64 = (MON_IOC_MAGIC << 8) | 5;
/// _IOR(0x92, 3, struct mon_bin_stats { u32 queued, dropped }).
const MON_IOCG_STATS: u64 = (2 << 30) | (8 << 16) | (MON_IOC_MAGIC << 8) | 3;
/// The kernel's largest ring (BUFF_MAX, 1200 KiB): captures up to 240 KiB
/// per event, more than an NTB or a coalesced EEM transfer holds.
const RING_SIZE: libc::c_ulong = 1200 * 1024;
/// Events fetched per ioctl. One GETX ioctl per event lost thousands of
/// events a second to a full ring under TCG with an ECM link at ~10k
/// events/s; fetching in batches from the mapped ring lost none.
const BATCH: usize = 256;

/// The ring, mapped read-only: events stay put until they are flushed.
struct Ring {
    base: *const u8,
    len: usize,
}

impl Ring {
    fn map(fd: i32, len: usize) -> std::io::Result<Ring> {
        // SAFETY: a fresh shared read-only mapping of the usbmon ring.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Ring {
            base: p as *const u8,
            len,
        })
    }

    /// The bytes of one fetched (and not yet flushed) event: the kernel
    /// does not write there until we flush it.
    fn bytes(&self, off: usize, len: usize) -> Option<&[u8]> {
        let end = off.checked_add(len)?;
        // SAFETY: in bounds of the mapping, and stable while unflushed.
        (end <= self.len).then(|| unsafe { std::slice::from_raw_parts(self.base.add(off), len) })
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

pub fn run(a: &MonArgs, interrupts: &AtomicU32) -> ExitCode {
    match record(a, interrupts) {
        Ok(report) => match print(a, &report) {
            Ok(()) => {
                // The text report holds it; a JSON one only counts the drops.
                if let Some(d) = drops_line(&report).filter(|_| a.json) {
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

fn knobs(a: &MonArgs) -> anyhow::Result<BTreeMap<String, String>> {
    a.knobs
        .iter()
        .map(|k| {
            k.split_once('=')
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .ok_or_else(|| anyhow!("--knob {k}: write it as NAME=VALUE, e.g. --knob mtu=1500"))
        })
        .collect()
}

fn record(a: &MonArgs, interrupts: &AtomicU32) -> anyhow::Result<BusReport> {
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
    file: std::fs::File,
    ring: Ring,
    bus: u8,
    devnum: u8,
    speed: Option<String>,
    encap: Option<Encap>,
    knobs: BTreeMap<String, String>,
}

// SAFETY: the ring is a read-only shared mapping owned by the monitor; it
// is read by whichever one thread runs the monitor.
unsafe impl Send for Ring {}

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
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => anyhow!(
                    "no {path}: load usbmon (`modprobe usbmon`; CONFIG_USB_MON) and mount devtmpfs"
                ),
                std::io::ErrorKind::PermissionDenied => {
                    anyhow!("cannot open {path}: reading usbmon needs root; run it with sudo")
                }
                _ => anyhow!("cannot open {path}: {e}"),
            })?;
        let fd = file.as_raw_fd();
        // SAFETY: ioctls on our own usbmon fd with integer arguments.
        let ring_len = unsafe {
            libc::ioctl(fd, MON_IOCT_RING_SIZE as _, RING_SIZE);
            libc::ioctl(fd, MON_IOCQ_RING_SIZE as _)
        };
        if ring_len <= 0 {
            bail!(
                "{path}: cannot read the usbmon ring size ({})",
                std::io::Error::last_os_error()
            );
        }
        let ring =
            Ring::map(fd, ring_len as usize).with_context(|| format!("cannot map {path}"))?;
        Ok(Monitor {
            path,
            file,
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
            file,
            ring,
            bus,
            devnum,
            speed,
            encap,
            knobs,
        } = self;
        let fd = file.as_raw_fd();
        // The reader must keep up with the link it watches, which may hold
        // the CPU (one CPU under TCG: with an ECM link at full speed the
        // ring still overflowed by ~360 events in 5 s at nice 0, by none at
        // nice -10; with traffic both ways on one CPU it still may: the
        // report counts it). A higher priority only changes when it runs,
        // not how much: root may raise it.
        // SAFETY: setpriority on this thread (Linux: per thread).
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -20) };
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
            let mut m = MonBinMfetch {
                offvec: offsets.as_mut_ptr(),
                nfetch: BATCH as u32,
                nflush: flush,
            };
            // SAFETY: MFETCH writes at most `nfetch` offsets into `offsets` and
            // the counts into `m`, both ours and live for the call.
            let r = unsafe { libc::ioctl(fd, MON_IOCX_MFETCH as _, &mut m as *mut MonBinMfetch) };
            // The flush is done before the fetch can fail (EAGAIN, EINTR).
            flush = 0;
            let idle = if r == 0 {
                let mut oldest = true;
                for &off in &offsets[..(m.nfetch as usize).min(BATCH)] {
                    let off = off as usize;
                    // Fillers at the ring's end ('@') do not parse: skipped.
                    let Some(ev) = ring.bytes(off, MON_BIN_HDR_LEN).and_then(MonEvent::parse)
                    else {
                        continue;
                    };
                    if oldest {
                        // One clock read per fetch: the oldest event's age.
                        oldest = false;
                        lag_max_us = lag_max_us.max(realtime_us() - ev.ts_us);
                    }
                    let data = ring
                        .bytes(off + MON_BIN_HDR_LEN, ev.len_cap as usize)
                        .unwrap_or(&[]);
                    meter.record(&ev, data);
                }
                flush = m.nfetch;
                since_check += m.nfetch;
                m.nfetch == 0
            } else {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => true,
                    Some(libc::EINTR) => false,
                    _ => return Err(e).with_context(|| format!("reading {path}")),
                }
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
                    let mut p = libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one pollfd of ours.
                    unsafe { libc::poll(&mut p, 1, 20) };
                }
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        if secs - last_cut > 1e-3 {
            cut(&meter, &mut prev_in, &mut prev_out, last_cut, secs);
        }
        let mut stats = [0u32; 2];
        // SAFETY: MON_IOCG_STATS writes two u32 into `stats`.
        unsafe { libc::ioctl(fd, MON_IOCG_STATS as _, stats.as_mut_ptr()) };
        let zero = DirCounters::default();
        Ok(BusReport {
            bus: u16::from(bus),
            devnum: Some(devnum),
            speed,
            encap,
            knobs,
            dropped_events: u64::from(stats[1]),
            ring_bytes: ring.len as u64,
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
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec of ours.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
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

fn print(a: &MonArgs, r: &BusReport) -> anyhow::Result<()> {
    let text = if a.json {
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
    match &a.output {
        Some(p) => std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display())),
        None => {
            std::io::stdout().write_all(text.as_bytes())?;
            Ok(())
        }
    }
}
