//! `usb gadget --function net --via raw-gadget`: the device side of
//! xferlab's own network link as a whole USB device of its own, through
//! Linux's raw-gadget (/dev/raw-gadget, drivers/usb/gadget/legacy/
//! raw_gadget.c). Unlike a FunctionFS function it answers ep0 itself, so
//! it can announce the CDC functional descriptors that the host's
//! cdc_ether and cdc_ncm need (the core's [`CdcDevice`] decides every
//! reply); the host's own class driver then runs the other end.
//!
//! raw-gadget's calls all block (no poll, no AIO), so each concern is a
//! thread: ep0 (events and control requests), TAP -> bulk IN, bulk OUT ->
//! TAP, and the link-up notifications on the interrupt endpoint; one
//! transfer is in flight per direction. A thread is woken from a blocked
//! call by SIGUSR1 (a handler that does nothing, so the call returns
//! EINTR); closing the descriptor would not wake it. Everything raw-gadget
//! creates goes with the descriptor: after a SIGKILL too, nothing is left.

use std::fs::File;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use xferlab_core::usb::cdc_device::{CdcDevice, Change, Identity, Reply, Setup, MAX_POWER_2MA};
use xferlab_core::usb::net::{
    decoder, Coalescer, EcmFraming, EemFraming, Encap, Framing, Limits, NcmFraming, NtbParams,
};

use super::ffs_io::{wait_enabled, Shared};
use super::net_io::{self, Link, NetCounters};
use crate::sys::clock;
use crate::usb::tap::{wait_frame, FRAME_MAX};
use xferlab_sys::raw_gadget::{self, Io, RawGadget, IO_HEADER};
use xferlab_sys::thread;

pub use xferlab_sys::raw_gadget::DEVICE;

const EVENT_CONNECT: u32 = 1;
const EVENT_CONTROL: u32 = 2;
const IO_FLAGS_ZERO: u16 = 1;
const SPEED_HIGH: u8 = 3;
const EPS_NUM_MAX: usize = 30;
const EP_INFO_SIZE: usize = 32;
const _: () = assert!(EPS_NUM_MAX * EP_INFO_SIZE == raw_gadget::EPS_INFO_LEN);
const EP_ADDR_ANY: u32 = 0xff;
const CAP_BULK: u32 = 1 << 2;
const CAP_INT: u32 = 1 << 3;
const CAP_IN: u32 = 1 << 4;
const CAP_OUT: u32 = 1 << 5;

/// The raw-gadget descriptor; every call may block.
type Raw = RawGadget;

/// One endpoint raw-gadget offers (struct usb_raw_ep_info).
#[derive(Debug, Clone, Copy)]
struct EpInfo {
    /// Its fixed number, or EP_ADDR_ANY.
    addr: u32,
    caps: u32,
}

fn eps_info(raw: &Raw) -> io::Result<Vec<EpInfo>> {
    let mut b = [0u8; raw_gadget::EPS_INFO_LEN];
    let n = raw.eps_info(&mut b)?;
    Ok(b.chunks(EP_INFO_SIZE)
        .take(n.min(EPS_NUM_MAX))
        .map(|e| EpInfo {
            addr: u32::from_ne_bytes([e[16], e[17], e[18], e[19]]),
            caps: u32::from_ne_bytes([e[20], e[21], e[22], e[23]]),
        })
        .collect())
}

/// Endpoint numbers for bulk IN, bulk OUT and interrupt IN: the first
/// endpoints that can be each, at their fixed number or at a free one.
fn pick_endpoints(eps: &[EpInfo]) -> Option<(u8, u8, u8)> {
    let mut used = [false; EPS_NUM_MAX];
    let mut taken = [false; 16];
    for e in eps {
        if e.addr != EP_ADDR_ANY && (e.addr as usize) < 16 {
            taken[e.addr as usize] = true;
        }
    }
    let mut pick = |want: u32| -> Option<u8> {
        let (i, e) = eps
            .iter()
            .enumerate()
            .find(|(i, e)| !used[*i] && e.caps & want == want)?;
        used[i] = true;
        if e.addr != EP_ADDR_ANY {
            return Some(e.addr as u8);
        }
        let n = (1..16).find(|&n| !taken[n])?;
        taken[n] = true;
        Some(n as u8)
    };
    Some((
        pick(CAP_BULK | CAP_IN)?,
        pick(CAP_BULK | CAP_OUT)?,
        pick(CAP_INT | CAP_IN)?,
    ))
}

/// The UDC driver's name (raw-gadget matches it against the gadget's):
/// `dummy_udc` for `dummy_udc.0`.
fn udc_driver(udc: &str) -> String {
    std::fs::read_link(format!("/sys/class/udc/{udc}/device/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| udc.rsplit_once('.').map_or(udc, |(d, _)| d).to_string())
}

/// A locally administered address for the host's interface, unique per
/// process (the gadget's own side is the TAP's).
fn host_mac() -> [u8; 6] {
    let p = std::process::id().to_be_bytes();
    [0x02, 0x78, 0x66, p[1], p[2], p[3]]
}

/// Endpoint handles (raw-gadget's indices), -1 until enabled.
struct Handles {
    bulk_in: AtomicI32,
    bulk_out: AtomicI32,
    notify: AtomicI32,
    /// Bumped each time the host selects the data path: the notification
    /// thread reports the link up once per selection.
    selected: AtomicU64,
    /// NCM: the largest NTB the host takes.
    ntb_in_max: AtomicUsize,
}

/// What the raw-gadget device did, for the report.
pub struct RawReport {
    pub udc: String,
    pub endpoints: (u8, u8, u8),
    pub host_mac: [u8; 6],
    pub control_requests: u64,
    pub stalled: u64,
    pub control_errors: u64,
    pub notifications: u64,
    pub packet_filter: u16,
    pub ntb_in_max: usize,
}

/// Who the device is and where it plugs in.
pub struct Device {
    pub udc: String,
    /// VID, PID.
    pub id: (u16, u16),
    pub serial: String,
}

/// A raw-gadget device being served: its threads and what they count.
/// The descriptor goes with the last thread's handle, and with it
/// everything raw-gadget made.
pub struct RawRun {
    threads: Vec<JoinHandle<()>>,
    s: Arc<Shared>,
    h: Arc<Handles>,
    ep0_state: Arc<Mutex<Ep0Counts>>,
    notifications: Arc<AtomicU64>,
    udc: String,
    endpoints: (u8, u8, u8),
    mac: [u8; 6],
}

/// Makes the device and starts its threads; the caller reports from `s`
/// and `c` once [`RawRun::finish`] returns.
pub fn start(
    Device { udc, id, serial }: Device,
    tap: File,
    link: Link,
    s: &Arc<Shared>,
    c: &Arc<NetCounters>,
) -> anyhow::Result<RawRun> {
    if !std::path::Path::new(DEVICE).exists() {
        bail!(
            "no {DEVICE}: load the raw-gadget module (`modprobe raw_gadget`; Debian's kernels do not \
             build it, lab/vm/build-raw-gadget builds one for the lab VM), or use --via functionfs"
        );
    }
    let raw = Arc::new(RawGadget::open().with_context(|| format!("cannot open {DEVICE}"))?);
    let mut init = [0u8; raw_gadget::INIT_LEN];
    let driver = udc_driver(&udc);
    init[..driver.len().min(127)].copy_from_slice(&driver.as_bytes()[..driver.len().min(127)]);
    init[128..128 + udc.len().min(127)].copy_from_slice(&udc.as_bytes()[..udc.len().min(127)]);
    init[256] = SPEED_HIGH;
    raw.init(&mut init)
        .with_context(|| format!("raw-gadget refused UDC `{udc}` (driver `{driver}`)"))?;
    raw.run().map_err(|e| {
        anyhow!("raw-gadget cannot take UDC `{udc}`: {e}; is another gadget bound to it (`xferlab usb gadget --cleanup`)?")
    })?;
    let infos = eps_info(&raw).context("raw-gadget: EPS_INFO")?;
    let endpoints = pick_endpoints(&infos).ok_or_else(|| {
        anyhow!("UDC `{udc}` has no bulk IN, bulk OUT and interrupt IN endpoints to offer")
    })?;
    let mac = host_mac();
    let dev = CdcDevice::new(
        link.encap,
        Identity {
            vid: id.0,
            pid: id.1,
            serial,
            host_mac: mac,
        },
        endpoints.0,
        endpoints.1,
        endpoints.2,
    );
    let notes = dev.link_up_notifications();
    // SIGUSR1 interrupts a blocked raw-gadget call instead of killing us.
    thread::install_wake_signal().context("cannot install the SIGUSR1 handler")?;
    let h = Arc::new(Handles {
        bulk_in: AtomicI32::new(-1),
        bulk_out: AtomicI32::new(-1),
        notify: AtomicI32::new(-1),
        selected: AtomicU64::new(0),
        ntb_in_max: AtomicUsize::new(dev.ntb_in_max()),
    });
    let notifications = Arc::new(AtomicU64::new(0));
    let ep0_state = Arc::new(Mutex::new(Ep0Counts::default()));
    let mut threads = Vec::new();
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .context("cannot start a thread")
    };
    let tap_rx = tap
        .try_clone()
        .context("cannot duplicate the TAP descriptor")?;
    {
        let (raw, s, h, st) = (raw.clone(), s.clone(), h.clone(), ep0_state.clone());
        threads.push(spawn(
            "raw-ep0",
            Box::new(move || ep0_loop(&raw, dev, &s, &h, &st)),
        )?);
    }
    {
        let (raw, s, c, h) = (raw.clone(), s.clone(), c.clone(), h.clone());
        threads.push(spawn(
            "raw-tx",
            Box::new(move || tx_loop(&raw, tap, link, &s, &c, &h)),
        )?);
    }
    {
        let (raw, s, c, h) = (raw.clone(), s.clone(), c.clone(), h.clone());
        threads.push(spawn(
            "raw-rx",
            Box::new(move || rx_loop(&raw, tap_rx, link, &s, &c, &h)),
        )?);
    }
    // EEM has no notifications.
    if let Some(notes) = notes {
        let (raw, s, h, n) = (raw.clone(), s.clone(), h.clone(), notifications.clone());
        threads.push(spawn(
            "raw-notify",
            Box::new(move || notify_loop(&raw, notes, &s, &h, &n)),
        )?);
    }
    Ok(RawRun {
        threads,
        s: s.clone(),
        h,
        ep0_state,
        notifications,
        udc,
        endpoints,
        mac,
    })
}

impl RawRun {
    /// What the device did so far (the counts are final after [`Self::finish`]).
    pub fn report(&self) -> RawReport {
        let st = self
            .ep0_state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        RawReport {
            udc: self.udc.clone(),
            endpoints: self.endpoints,
            host_mac: self.mac,
            control_requests: st.requests,
            stalled: st.stalled,
            control_errors: st.errors,
            notifications: self.notifications.load(Relaxed),
            packet_filter: st.packet_filter,
            ntb_in_max: self.h.ntb_in_max.load(Relaxed),
        }
    }

    /// A thread ended on its own (the device went away, or a call failed
    /// for good): the run is over.
    pub fn any_finished(&self) -> bool {
        self.threads.iter().any(|t| t.is_finished())
    }

    pub fn all_finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Raises the stop flag and wakes each live thread from its blocked
    /// call; a thread may be between calls when woken, so the driver
    /// repeats this at each pass until every thread has seen the flag.
    pub fn kick(&self) {
        self.s.stop.store(true, Relaxed);
        for t in self.threads.iter().filter(|t| !t.is_finished()) {
            thread::wake(t);
        }
    }

    /// Joins the threads that ended and reports. The driver's drain has
    /// already woken them ([`Self::kick`]) for as long as it allows; one
    /// still blocked then is left behind (the process exits soon after,
    /// and the device goes with the descriptor).
    pub fn finish(mut self) -> RawReport {
        self.s.stop.store(true, Relaxed);
        for t in std::mem::take(&mut self.threads) {
            if t.is_finished() {
                let _ = t.join();
            }
        }
        self.report()
    }
}

#[derive(Debug, Clone, Default)]
struct Ep0Counts {
    requests: u64,
    stalled: u64,
    /// Replies raw-gadget refused (the host gave up on the request).
    errors: u64,
    packet_filter: u16,
}

/// Control requests, answered as the core's [`CdcDevice`] says.
fn ep0_loop(raw: &Raw, mut dev: CdcDevice, s: &Shared, h: &Handles, st: &Mutex<Ep0Counts>) {
    let mut ev = [0u8; IO_HEADER + 8];
    let mut data = vec![0u8; IO_HEADER + 4096];
    let eps = dev.endpoints();
    // The 9-byte endpoint descriptor EP_ENABLE takes.
    let enable = |d: [u8; 7], slot: &AtomicI32| {
        if slot.load(Relaxed) >= 0 {
            return;
        }
        let mut b = [0u8; 9];
        b[..7].copy_from_slice(&d);
        if let Ok(n) = raw.ep_enable(&mut b) {
            slot.store(n as i32, Relaxed);
        } else {
            s.input.errors.fetch_add(1, Relaxed);
        }
    };
    while !s.stop.load(Relaxed) {
        if let Err(e) = raw.event_fetch(&mut ev) {
            // EINTR is a wake-up (stop) or a stray signal; anything else
            // (raw-gadget's queue overflowed and it gave up) is counted,
            // and not spun on.
            if e.raw_os_error() != Some(libc::EINTR) {
                st.lock().unwrap_or_else(|e| e.into_inner()).errors += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            continue;
        }
        let kind = u32::from_ne_bytes([ev[0], ev[1], ev[2], ev[3]]);
        if kind == EVENT_CONNECT {
            continue;
        }
        if kind != EVENT_CONTROL {
            continue;
        }
        let Some(setup) = Setup::parse(&ev[IO_HEADER..]) else {
            continue;
        };
        let (reply, change) = dev.setup(&setup);
        match change {
            Some(Change::Configuration(1)) => {
                if let Some(n) = eps.notify {
                    enable(n, &h.notify);
                }
                // Both take their argument as the value itself.
                let _ = raw.vbus_draw(u32::from(MAX_POWER_2MA));
                let _ = raw.configure();
            }
            Some(Change::Configuration(_)) | Some(Change::DataAlt(_)) | None => {}
        }
        if dev.data_ready() {
            // raw-gadget cannot disable an endpoint with a transfer
            // queued, so the bulk pair stays enabled once it is.
            enable(eps.bulk_in, &h.bulk_in);
            enable(eps.bulk_out, &h.bulk_out);
            if s.max_packet.swap(512, Relaxed) == 0 {
                s.enables.fetch_add(1, Relaxed);
            }
            if matches!(
                change,
                Some(Change::DataAlt(1)) | Some(Change::Configuration(1))
            ) {
                h.selected.fetch_add(1, Relaxed);
            }
        } else if change.is_some() {
            s.max_packet.store(0, Relaxed);
        }
        let stalled = reply == Reply::Stall;
        let r = match reply {
            Reply::Send(b) if setup.length > 0 => {
                data[IO_HEADER..IO_HEADER + b.len()].copy_from_slice(&b);
                // Shorter than asked: a packet-sized reply must end with a
                // zero-length packet, or the host waits for more.
                let zlp = if b.len() < usize::from(setup.length) {
                    IO_FLAGS_ZERO
                } else {
                    0
                };
                raw.io(Io::Ep0Write, 0, zlp, &mut data[..IO_HEADER + b.len()])
            }
            Reply::Send(_) => raw.io(Io::Ep0Read, 0, 0, &mut data[..IO_HEADER]),
            Reply::Receive(n) => {
                let n = usize::from(n).min(data.len() - IO_HEADER);
                let r = raw.io(Io::Ep0Read, 0, 0, &mut data[..IO_HEADER + n]);
                if let Ok(got) = r {
                    dev.data_out(&setup, &data[IO_HEADER..IO_HEADER + got.min(n)]);
                    h.ntb_in_max.store(dev.ntb_in_max(), Relaxed);
                }
                r
            }
            Reply::Stall => raw.ep0_stall(),
        };
        // Counted after the call: the report reads these once the
        // threads are stopped, and a thread still blocked in a call when
        // the run gives up on it must not hold the lock.
        let mut counts = st.lock().unwrap_or_else(|e| e.into_inner());
        counts.requests += 1;
        counts.stalled += u64::from(stalled);
        counts.packet_filter = dev.packet_filter;
        if r.is_err() && !s.stop.load(Relaxed) {
            counts.errors += 1;
        }
    }
}

/// The endpoint handle once the host has selected the data path, or None at stop.
fn handle(slot: &AtomicI32, s: &Shared) -> Option<u16> {
    loop {
        wait_enabled(s)?;
        let h = slot.load(Relaxed);
        if h >= 0 {
            return Some(h as u16);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// TAP -> coalescer -> bulk IN, one transfer at a time.
fn tx_loop(raw: &Raw, tap: File, l: Link, s: &Shared, c: &NetCounters, h: &Handles) {
    if handle(&h.bulk_in, s).is_none() {
        return;
    }
    let mut limits = l.limits;
    if l.encap == Encap::Ncm {
        limits.max_transfer = limits.max_transfer.min(h.ntb_in_max.load(Relaxed));
    }
    let mp = 512;
    match l.encap {
        Encap::Ecm => tx_with(
            raw,
            Coalescer::new(EcmFraming::new(mp), limits),
            tap,
            s,
            c,
            h,
        ),
        Encap::Eem => tx_with(
            raw,
            Coalescer::new(EemFraming::new(mp, l.crc), limits),
            tap,
            s,
            c,
            h,
        ),
        Encap::Ncm => {
            let mut p = NtbParams::LINUX_GADGET;
            p.max_size = limits.max_transfer;
            tx_with(
                raw,
                Coalescer::new(NcmFraming::new(p, mp), limits),
                tap,
                s,
                c,
                h,
            )
        }
    }
}

fn tx_with<F: Framing>(
    raw: &Raw,
    mut co: Coalescer<F>,
    mut tap: File,
    s: &Shared,
    c: &NetCounters,
    h: &Handles,
) {
    let Limits { max_transfer, .. } = co.limits();
    let mut io_buf = vec![0u8; IO_HEADER + max_transfer.max(FRAME_MAX)];
    let mut frame = vec![0u8; 65536];
    let mut send = |co: &mut Coalescer<F>, t: xferlab_core::usb::net::coalesce::Transfer| {
        let n = t.buf.len();
        io_buf[IO_HEADER..IO_HEADER + n].copy_from_slice(&t.buf);
        let (frames, zlp) = (t.frames, t.zlp);
        co.recycle(t.buf);
        let ep = h.bulk_in.load(Relaxed) as u16;
        let flags = if zlp { IO_FLAGS_ZERO } else { 0 };
        match raw.io(Io::EpWrite, ep, flags, &mut io_buf[..IO_HEADER + n]) {
            Ok(_) => net_io::count_sent(s, c, n, frames),
            // Host gone or reset, or a wake-up: the frames are lost, as on a wire.
            Err(_) => {
                if !s.stop.load(Relaxed) {
                    s.input.errors.fetch_add(1, Relaxed);
                }
            }
        }
    };
    while !s.stop.load(Relaxed) {
        if wait_enabled(s).is_none() {
            break;
        }
        wait_frame(&tap, co.poll_timeout());
        while let Ok(n) = tap.read(&mut frame) {
            net_io::push_frame(&mut co, clock::now(), &frame[..n], c, &mut send);
            if s.stop.load(Relaxed) {
                return;
            }
        }
        if let Some(t) = co.poll_transfer(clock::now()) {
            send(&mut co, t);
        }
    }
}

/// Bulk OUT -> decoder -> TAP, one read of `rx_size` at a time.
fn rx_loop(raw: &Raw, mut tap: File, l: Link, s: &Shared, c: &NetCounters, h: &Handles) {
    let mut dec = decoder(l.encap, 65535);
    let mut io_buf = vec![0u8; IO_HEADER + l.rx_size];
    while let Some(ep) = handle(&h.bulk_out, s) {
        match raw.io(Io::EpRead, ep, 0, &mut io_buf) {
            Ok(n) => {
                let n = n.min(l.rx_size);
                s.output.transfers.fetch_add(1, Relaxed);
                s.output.bytes.fetch_add(n as u64, Relaxed);
                dec.decode(&io_buf[IO_HEADER..IO_HEADER + n], &mut |f| {
                    if tap.write(f).is_err() {
                        c.tap_drops.fetch_add(1, Relaxed);
                    }
                });
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(_) => {
                // ESHUTDOWN: the host reset or went; wait for it to return.
                if !s.stop.load(Relaxed) {
                    s.output.errors.fetch_add(1, Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
    *c.decode.lock().unwrap_or_else(|e| e.into_inner()) = *dec.stats();
}

/// Reports the link up (speed, then connection) each time the host
/// selects the data path; cdc_ether and cdc_ncm keep the carrier off
/// until the connection notification, which they read once the host's
/// interface is up.
fn notify_loop(raw: &Raw, notes: [Vec<u8>; 2], s: &Shared, h: &Handles, sent: &AtomicU64) {
    let mut done = 0u64;
    let mut buf = [0u8; IO_HEADER + 16];
    while !s.stop.load(Relaxed) {
        let want = h.selected.load(Relaxed);
        let ep = h.notify.load(Relaxed);
        if want == done || ep < 0 {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let mut ok = true;
        for n in &notes {
            buf[IO_HEADER..IO_HEADER + n.len()].copy_from_slice(n);
            if raw
                .io(Io::EpWrite, ep as u16, 0, &mut buf[..IO_HEADER + n.len()])
                .is_err()
            {
                ok = false;
                break;
            }
            sent.fetch_add(1, Relaxed);
        }
        if ok {
            done = want;
        } else if !s.stop.load(Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(addr: u32, caps: u32) -> EpInfo {
        EpInfo { addr, caps }
    }

    #[test]
    fn endpoints_take_fixed_numbers_first_and_free_ones_for_any() {
        // dummy_udc's: fixed ep1in-bulk, ep2out-bulk, ep5in-int first.
        let fixed = [
            ep(1, CAP_BULK | CAP_IN),
            ep(2, CAP_BULK | CAP_OUT),
            ep(3, CAP_IN),
            ep(5, CAP_INT | CAP_BULK | CAP_IN),
        ];
        assert_eq!(pick_endpoints(&fixed), Some((1, 2, 5)));
        // Configurable endpoints get numbers no fixed one has.
        let any = [
            ep(1, CAP_BULK | CAP_IN),
            ep(EP_ADDR_ANY, CAP_BULK | CAP_INT | CAP_IN | CAP_OUT),
            ep(EP_ADDR_ANY, CAP_BULK | CAP_INT | CAP_IN | CAP_OUT),
        ];
        assert_eq!(pick_endpoints(&any), Some((1, 2, 3)));
        assert_eq!(pick_endpoints(&fixed[..2]), None);
    }

    #[test]
    fn the_udc_driver_is_the_name_before_the_instance_without_sysfs() {
        assert_eq!(udc_driver("no-such-udc.0"), "no-such-udc");
        assert_eq!(udc_driver("plain"), "plain");
    }
}
