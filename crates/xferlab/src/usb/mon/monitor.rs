//! The usbmon reader: one device's bus, its ring mapped, read in batches
//! until told to stop, cut into intervals on the core's [`BusMeter`].

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use xferlab_core::usb::net::Encap;
use xferlab_core::usb::usbmon::{
    BusDirection, BusMeter, BusReport, BusSample, DirCounters, MonEvent, HS_BULK_CAPACITY_BPS,
    MON_BIN_HDR_LEN,
};
use xferlab_sys::usbmon::{OpenError, Usbmon};

use crate::usb::device;

// The sys crate reads events by the core's header length.
const _: () = assert!(xferlab_sys::usbmon::HDR_LEN == MON_BIN_HDR_LEN);

/// The kernel's largest ring (BUFF_MAX, 1200 KiB): captures up to 240 KiB
/// per event, more than an NTB or a coalesced EEM transfer holds.
const RING_SIZE: usize = 1200 * 1024;
/// Events fetched per ioctl. One GETX ioctl per event lost thousands of
/// events a second to a full ring under TCG with an ECM link at ~10k
/// events/s; fetching in batches from the mapped ring lost none.
const BATCH: usize = 256;

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

    /// `usb BUS.DEVNUM`: where the device is, for the result.
    pub fn address(&self) -> String {
        format!("usb {}.{}", self.bus, self.devnum)
    }

    /// What is read, in one line for the human table's start.
    pub fn describe(&self) -> String {
        format!(
            "usbmon bus {} device {}: {} (capacity {:.3} MB/s: 13 x 512 B per 125 us microframe)",
            self.bus,
            self.devnum,
            self.encap.map(|e| e.label()).unwrap_or("no framing given"),
            HS_BULK_CAPACITY_BPS / 1e6
        )
    }

    /// The ring read: `/dev/usbmonN`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Reads the bus until `stop` says so, cutting an interval every
    /// `step` (and a last one at the stop), each also handed to `cut_to`
    /// (host IN, host OUT) as it is cut, and reports.
    pub fn run(
        self,
        step: Duration,
        stop: impl Fn() -> bool,
        mut cut_to: impl FnMut(&BusSample, &BusSample),
    ) -> anyhow::Result<BusReport> {
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
            let (i, o) = (
                meter.host_in.sample(prev_in, from, to),
                meter.host_out.sample(prev_out, from, to),
            );
            cut_to(&i, &o);
            ins.push(i);
            outs.push(o);
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
