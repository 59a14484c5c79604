//! `xferlab usb net`: the host side of xferlab's own USB network link. A
//! TAP device (Ethernet frames) is bridged to a device's bulk pipes: frames
//! read from the TAP are packed by the core's [`Coalescer`] (ECM, EEM or
//! NCM framing, up to N frames a transfer, a coalescing timeout) and sent
//! with `-Q` OUT transfers in flight; `-Q` IN transfers stay queued, and
//! each completed one is split by the core's decoder into frames written to
//! the TAP (TCP segments merged into super-frames first, core
//! `usb::net::gro`). Malformed transfers are counted and dropped. The TAP
//! is not persistent: the kernel removes it when the process ends, SIGKILL
//! too. Two threads share the device's usbfs node (URBs of our own,
//! xferlab-sys/src/usbfs.rs): one sends, one reaps and receives ([`Shared`]).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::process::ExitCode;
use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use rustix::event::{poll, PollFd, PollFlags};
use xferlab_core::usb::descriptor::PipeRequest;
use xferlab_core::usb::net::{
    coalesce::Transfer, decoder, default_depth, gro::Merger, gso::Segmenter, BusSpeed, Coalescer,
    EcmFraming, EemFraming, Encap, Framing, Limits, NcmFraming, NtbParams, Push, MAX_DEPTH,
};

use super::device;
use super::tap::{open_tap, wait_until, write_vnet, FRAME_MAX};
use super::usbfs::{Completion, Layout, Urbs};
use super::ReportTo;
use crate::sys::clock;

#[derive(Default)]
struct Counters {
    tx_frames: u64,
    tx_transfers: u64,
    tx_bytes: u64,
    tx_errors: u64,
    tx_too_large: u64,
    /// Packets from the TAP the segmenter could not cut (gso.rs).
    tx_malformed: u64,
    rx_transfers: u64,
    rx_bytes: u64,
    rx_errors: u64,
    /// Frames the TAP would not take (its queue was full).
    tap_drops: u64,
    /// ppoll() calls of the link's threads (each a sleep unless a
    /// descriptor was ready): the wake-ups the frames cost.
    polls: u64,
    /// CPU seconds (user + system) of the thread that counted; per
    /// thread only ([`Counters::add`] leaves it out).
    cpu_s: f64,
}

/// What one of the link's threads cost: where the host side's CPU goes.
fn thread_use(c: &Counters) -> serde_json::Value {
    serde_json::json!({ "cpu_s": c.cpu_s, "polls": c.polls })
}

/// CPU seconds the calling thread has used.
fn thread_cpu_s() -> f64 {
    let (user, system) = crate::sys::cpu::thread_times();
    user + system
}

impl Counters {
    /// Adds the other thread's counts.
    fn add(&mut self, o: &Counters) {
        self.tx_frames += o.tx_frames;
        self.tx_transfers += o.tx_transfers;
        self.tx_bytes += o.tx_bytes;
        self.tx_errors += o.tx_errors;
        self.tx_too_large += o.tx_too_large;
        self.tx_malformed += o.tx_malformed;
        self.rx_transfers += o.rx_transfers;
        self.rx_bytes += o.rx_bytes;
        self.rx_errors += o.rx_errors;
        self.tap_drops += o.tap_drops;
        self.polls += o.polls;
    }
}

/// `usb net` as asked for.
#[derive(Debug, Clone)]
pub struct NetRequest {
    /// VID:PID or BUS.ADDR.
    pub device: String,
    pub encap: Encap,
    /// Transfers in flight per direction; None sizes them from usbnet's queue.
    pub depth: Option<usize>,
    pub link: LinkRequest,
    /// Seconds to run; None is until interrupted.
    pub time: Option<f64>,
    pub report: ReportTo,
}

/// The settings both ends of xferlab's own USB network link share (`usb
/// net` on the host, `usb gadget --function net` on the device).
#[derive(Debug, Clone)]
pub struct LinkRequest {
    /// Ethernet frames per transfer this end sends, at most.
    pub frames_per_transfer: usize,
    /// How long the first frame of a transfer waits for more.
    pub coalesce_us: u64,
    /// Bytes per transfer this end sends, at most; None is the framing's default.
    pub max_transfer: Option<u64>,
    /// EEM: a real CRC-32 instead of the sentinel.
    pub crc: bool,
    /// The TAP device to create.
    pub tap: String,
}

/// A link setting out of range: the one line printed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("--frames-per-transfer must be 1 to 256 (got {0})")]
    FramesPerTransfer(usize),
    #[error("--max-transfer must be 64 to 65535 bytes")]
    MaxTransfer,
}

impl LinkRequest {
    pub fn check(&self) -> Result<(), LinkError> {
        if self.frames_per_transfer == 0 || self.frames_per_transfer > 256 {
            return Err(LinkError::FramesPerTransfer(self.frames_per_transfer));
        }
        if self
            .max_transfer
            .is_some_and(|m| !(64..=65535).contains(&m))
        {
            return Err(LinkError::MaxTransfer);
        }
        Ok(())
    }
}

pub fn run(a: &NetRequest, interrupts: &AtomicU32) -> ExitCode {
    match link(a, interrupts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xferlab: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn link(a: &NetRequest, interrupts: &AtomicU32) -> anyhow::Result<()> {
    a.link.check()?;
    if let Some(q) = a.depth.filter(|&q| q == 0 || q > MAX_DEPTH) {
        bail!("-Q must be 1 to {MAX_DEPTH} transfers in flight (got {q})");
    }
    let sel = device::parse_selector(Some(&a.device))?;
    let info = device::select(&sel, None)?;
    // nusb finds the device and reads its descriptors; the transfers run
    // on a usbfs descriptor of our own (xferlab-sys/src/usbfs.rs), polled
    // with the TAP.
    let (dev, _cfg, pipes) = device::open(&info, PipeRequest::default())?;
    drop(dev);
    let (Some(ep_in), Some(ep_out)) = (pipes.bulk_in, pipes.bulk_out) else {
        bail!(
            "{} has no interface with a bulk IN and a bulk OUT endpoint",
            device::describe(&info)
        );
    };
    // The class driver (cdc_ether, cdc_eem, cdc_ncm) holds the interface:
    // usbfs detaches it for the run, and we rebind it at exit.
    let node = device::open_node(&info, &pipes)?;
    let max_packet = usize::from(ep_out.max_packet.max(1));
    // TSO and checksum offload: TCP's super-frames are cut here, one
    // read() for up to 64 KB (gso.rs).
    let tap = open_tap(&a.link.tap, true)?;
    let limits = Limits {
        max_frames: if a.encap == Encap::Ecm {
            1
        } else {
            a.link.frames_per_transfer
        },
        max_transfer: match (a.encap, a.link.max_transfer) {
            (Encap::Ecm, _) => FRAME_MAX,
            (_, Some(m)) => m as usize,
            // f_eem's OUT requests are sized for one frame (u_ether: MTU +
            // header + 20, rounded up to packets: 1536 B at MTU 1500); a
            // longer transfer is split across requests and f_eem drops the
            // pieces (seen: TCP at 0.04 MB/s with 9 KB transfers). Frames
            // that fit together (ACKs) still share a transfer.
            (Encap::Eem, None) => 1536,
            // f_ncm's dwNtbOutMaxSize (GET_NTB_PARAMETERS is not asked).
            (Encap::Ncm, None) => NtbParams::LINUX_GADGET.max_size,
        },
        timeout: Duration::from_micros(a.link.coalesce_us),
    };
    // IN transfers: whole packets, room for the largest the device sends.
    let rx_size = match a.encap {
        Encap::Ecm => FRAME_MAX.div_ceil(max_packet) * max_packet,
        Encap::Eem | Encap::Ncm => 16384,
    };
    // IN transfers are sized for the largest the device may send, but the
    // kernel's f_ecm and f_eem send one frame each: the IN depth counts
    // frames for them, as usbnet's rx_qlen counts its hard_mtu URBs.
    let in_typical = match a.encap {
        Encap::Ecm | Encap::Eem => FRAME_MAX,
        Encap::Ncm => rx_size,
    };
    let depth = Depth::of(a.depth, info.speed(), limits.max_transfer, in_typical);
    // Slots 0..depth.out are OUT URBs, the rest IN URBs.
    let slots: Vec<(u8, usize)> =
        std::iter::repeat_n((ep_out.address, limits.max_transfer), depth.out)
            .chain(std::iter::repeat_n((ep_in.address, rx_size), depth.inn))
            .collect();
    let urbs = Urbs::new(node, &slots);
    let say = |m: String| {
        if a.report.json() {
            eprintln!("{m}")
        } else {
            println!("{m}")
        }
    };
    say(format!(
        "{} {}: TAP {} <-> bulk 0x{:02x}/0x{:02x}, {} x{} frames per transfer, {} us coalescing, {} OUT and {} IN transfers in flight{}",
        device::describe(&info),
        device::speed_label(info.speed()).unwrap_or("?"),
        a.link.tap,
        ep_out.address,
        ep_in.address,
        a.encap.label(),
        limits.max_frames,
        a.link.coalesce_us,
        depth.out,
        depth.inn,
        if depth.from_flag { " (-Q)" } else { " (twice usbnet's queue at this speed)" },
    ));
    let t0 = Instant::now();
    let end = a.time.map(|t| t0 + Duration::from_secs_f64(t));
    let mut urbs = urbs;
    let sh = Shared {
        urbs: &urbs,
        tap: &tap,
        out_slots: depth.out,
        free: FreeSlots::all(depth.out),
        tx_waiting: AtomicBool::new(false),
        wake: eventfd()?,
        gone: AtomicBool::new(false),
    };
    let crc = a.link.crc;
    let stop = || interrupts.load(Relaxed) > 0 || end.is_some_and(|e| Instant::now() >= e);
    let mut rx = Rx {
        dec: decoder(a.encap, 65535),
        gro: Merger::default(),
        rx_size,
        c: Counters::default(),
    };
    let tx_c = std::thread::scope(|scope| {
        let (sh, stop) = (&sh, &stop);
        let tx = std::thread::Builder::new()
            .name("xfer-usbnet-tx".into())
            .spawn_scoped(scope, move || match a.encap {
                Encap::Ecm => sh.tx(Coalescer::new(EcmFraming::new(max_packet), limits), stop),
                Encap::Eem => sh.tx(
                    Coalescer::new(EemFraming::new(max_packet, crc), limits),
                    stop,
                ),
                Encap::Ncm => sh.tx(
                    Coalescer::new(NcmFraming::new(NtbParams::LINUX_GADGET, max_packet), limits),
                    stop,
                ),
            });
        let tx = match tx {
            Ok(tx) => tx,
            Err(e) => return Err(anyhow!("cannot start the link's sending thread: {e}")),
        };
        sh.rx(&mut rx, stop);
        // The receiving side has stopped (asked to, or the device went):
        // the sending side stops too, even if it waits for a slot.
        sh.gone.store(true, SeqCst);
        sh.wake();
        tx.join()
            .map_err(|_| anyhow!("the link's sending thread panicked"))
    })?;
    drop(sh);
    urbs.cancel_all(Duration::from_secs(1));
    let secs = t0.elapsed().as_secs_f64();
    let layout = urbs.layout();
    // Releasing the interface asks the kernel to bind a driver to it again.
    drop(urbs);
    rebind(&info);
    report(a, &depth, layout, &tx_c, &rx, secs);
    Ok(())
}

/// Transfers in flight per direction: `-Q` for both, or by the device's
/// speed and each direction's transfer size (the core's `default_depth`).
struct Depth {
    out: usize,
    inn: usize,
    from_flag: bool,
}

impl Depth {
    fn of(
        flag: Option<usize>,
        speed: Option<nusb::Speed>,
        out_bytes: usize,
        in_bytes: usize,
    ) -> Depth {
        if let Some(q) = flag {
            return Depth {
                out: q,
                inn: q,
                from_flag: true,
            };
        }
        let speed = match speed {
            Some(nusb::Speed::Low | nusb::Speed::Full) => BusSpeed::LowFull,
            Some(nusb::Speed::High) | None => BusSpeed::High,
            Some(_) => BusSpeed::Super,
        };
        Depth {
            out: default_depth(speed, out_bytes),
            inn: default_depth(speed, in_bytes),
            from_flag: false,
        }
    }
}

/// Gives the device back to its class driver. usbfs reattaches the driver
/// of the interface it took, but cdc_ether and cdc_ncm bind through the
/// control interface and let go of both: ask the kernel to probe every
/// interface left without a driver.
fn rebind(info: &nusb::DeviceInfo) {
    for i in info.interfaces() {
        let n = i.interface_number();
        if device::interface_driver(info, n).is_none() {
            if let Some(name) = device::sysfs_interface(info, n) {
                let _ = std::fs::write("/sys/bus/usb/drivers_probe", name);
            }
        }
    }
}

/// The device went away: URBs complete with these, and usbfs refuses new ones.
fn is_gone(errno: i32) -> bool {
    matches!(errno, libc::ENODEV | libc::ESHUTDOWN)
}

/// The link's two threads and what they share. The sending thread reads
/// the TAP, cuts and packs frames and submits OUT URBs; the receiving
/// thread reaps every completed URB, hands OUT slots back through
/// [`FreeSlots`], decodes IN transfers to the TAP and resubmits them.
/// One thread doing both was CPU-bound in the lab VM (85-95 % of a CPU,
/// the kernel ECM link's sender and receiver run in their own contexts):
/// split, the reaping, decoding and the TCP work that writing to the TAP
/// runs (ACKs that release more data) no longer wait behind the cutting
/// and submitting. The threads meet only at the slot set and, when the
/// sender has no free slot, one eventfd wake-up per batch of completions.
struct Shared<'a> {
    urbs: &'a Urbs,
    tap: &'a File,
    /// OUT slots are 0..out_slots; IN slots follow.
    out_slots: usize,
    free: FreeSlots,
    /// The sending thread sleeps until a slot comes free.
    tx_waiting: AtomicBool,
    /// An eventfd: the receiving thread's wake-up of the sending one.
    wake: File,
    /// The device went away, or the link is stopping.
    gone: AtomicBool,
}

/// The receiving thread's own state.
struct Rx {
    dec: Box<dyn xferlab_core::usb::net::Decode + Send>,
    /// Received TCP segments merged into super-frames for the TAP.
    gro: Merger,
    rx_size: usize,
    c: Counters,
}

/// OUT slots not in flight: a bit per slot. Only the sending thread takes
/// (clears) bits and only the receiving thread returns (sets) them, so a
/// load and a `fetch_and` claim a slot without a retry loop.
struct FreeSlots([AtomicU64; MAX_DEPTH / 64]);

impl FreeSlots {
    fn all(n: usize) -> Self {
        let f = FreeSlots(Default::default());
        for i in 0..n {
            f.put(i);
        }
        f
    }

    fn put(&self, slot: usize) {
        self.0[slot / 64].fetch_or(1 << (slot % 64), SeqCst);
    }

    fn any(&self) -> bool {
        self.0.iter().any(|w| w.load(SeqCst) != 0)
    }

    fn take(&self) -> Option<usize> {
        for (i, w) in self.0.iter().enumerate() {
            let v = w.load(SeqCst);
            if v != 0 {
                let bit = v.trailing_zeros() as usize;
                w.fetch_and(!(1 << bit), SeqCst);
                return Some(i * 64 + bit);
            }
        }
        None
    }
}

fn eventfd() -> anyhow::Result<File> {
    let fd = rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
    )
    .map_err(|e| anyhow!("eventfd: {e}"))?;
    Ok(File::from(fd))
}

impl Shared<'_> {
    /// Wakes the sending thread if it waits for a slot.
    fn wake(&self) {
        let _ = (&self.wake).write(&1u64.to_ne_bytes());
    }

    fn stopping(&self, stop: &impl Fn() -> bool) -> bool {
        self.gone.load(Relaxed) || stop()
    }

    /// The sending thread: the TAP's frames go through `co` into OUT
    /// transfers, one per free OUT slot.
    fn tx<F: Framing>(&self, mut co: Coalescer<F>, stop: &(impl Fn() -> bool + Sync)) -> Counters {
        let mut c = Counters::default();
        // A packet from the TAP (virtio_net_hdr + up to 64 KB) and the
        // frame being cut from it.
        let mut pkt = vec![0u8; 65536 + 256];
        let mut pkt_len = 0;
        let mut seg = Segmenter::default();
        let mut frame = vec![0u8; 65536];
        // Whether the TAP may hold a frame (it was not read empty).
        let mut tap_ready = true;
        let mut tap = self.tap;
        while !self.stopping(stop) {
            let mut now = clock::now();
            while self.free.any() {
                // The next frame of the packet at hand, or the next packet.
                let Some(n) = seg.next(&pkt[..pkt_len], &mut frame) else {
                    if !tap_ready {
                        break;
                    }
                    match tap.read(&mut pkt) {
                        Ok(n) => {
                            pkt_len = n;
                            seg.start(&pkt[..n]);
                        }
                        Err(_) => tap_ready = false,
                    }
                    continue;
                };
                now = clock::now();
                match co.push(now, &frame[..n]) {
                    Push::Added => {}
                    Push::TooLarge => c.tx_too_large += 1,
                    Push::Full => {
                        // The closed transfer takes the free slot; the
                        // frame opens the next one (never Full again).
                        if let Some(t) = co.poll_transfer(now) {
                            self.send(t, &mut co, &mut c);
                        }
                        co.push(now, &frame[..n]);
                    }
                }
                if !self.free.any() {
                    break;
                }
                if let Some(t) = co.poll_transfer(now) {
                    self.send(t, &mut co, &mut c);
                }
            }
            if self.free.any() {
                if let Some(t) = co.poll_transfer(now) {
                    self.send(t, &mut co, &mut c);
                }
            }
            if !self.free.any() {
                // Every OUT URB is in flight: sleep until the receiving
                // thread returns one (it wakes us if we say we wait).
                self.tx_waiting.store(true, SeqCst);
                if !self.free.any() && !self.stopping(stop) {
                    c.polls += 1;
                    poll_in(&[self.wake.as_fd()], None, now);
                    let mut b = [0u8; 8];
                    let _ = (&self.wake).read(&mut b);
                }
                self.tx_waiting.store(false, SeqCst);
                continue;
            }
            if tap_ready {
                // Stopped reading for want of a slot, and one came free.
                continue;
            }
            // Wait for a frame, at most until the open transfer's deadline.
            c.polls += 1;
            tap_ready = poll_in(&[tap.as_fd()], co.poll_timeout(), now);
        }
        c.tx_malformed = seg.malformed;
        c.cpu_s = thread_cpu_s();
        c
    }

    /// Copies a closed transfer into a free OUT URB and submits it (ending
    /// it with a ZLP when its framing needs one); its buffer goes back to
    /// the coalescer.
    fn send<F: Framing>(&self, t: Transfer, co: &mut Coalescer<F>, c: &mut Counters) {
        let Some(slot) = self.free.take() else {
            unreachable!("a transfer is taken only while an OUT URB is free")
        };
        let n = t.buf.len();
        // A slot taken from the free set is this thread's until it is
        // submitted (and, after a failed submission, put back).
        let Some(mut held) = self.urbs.claim(slot) else {
            unreachable!("a free OUT slot is idle")
        };
        held.buf_mut()[..n].copy_from_slice(&t.buf);
        let r = held.submit(n, t.zlp);
        match r {
            Ok(()) => {
                c.tx_transfers += 1;
                c.tx_frames += t.frames as u64;
                c.tx_bytes += n as u64;
            }
            Err(e) => {
                c.tx_errors += 1;
                if e.raw_os_error().is_some_and(is_gone) {
                    self.gone.store(true, SeqCst);
                }
                self.free.put(slot);
            }
        }
        co.recycle(t.buf);
    }

    /// The receiving thread: keeps every IN slot queued and reaps until
    /// `stop()` says so or the device goes.
    fn rx(&self, r: &mut Rx, stop: &impl Fn() -> bool) {
        // This runs on the command's main thread: its set-up is not the
        // link's cost.
        let cpu0 = thread_cpu_s();
        for slot in self.out_slots..self.urbs.slots() {
            self.submit_in(r, slot);
        }
        while !self.stopping(stop) {
            self.reap_all(r);
            r.c.polls += 1;
            let fd = self.urbs.fd();
            let mut p = [PollFd::new(&fd, PollFlags::OUT)];
            let ts = wait_until(None, clock::now());
            poll(&mut p, Some(&ts)).ok();
        }
        r.c.cpu_s = thread_cpu_s() - cpu0;
    }

    /// Reaps every completed URB: OUT slots go back to the sending
    /// thread, IN transfers are decoded to the TAP and resubmitted. What
    /// the merger still holds goes up at the end, before the thread may
    /// sleep.
    fn reap_all(&self, r: &mut Rx) {
        let mut returned = false;
        loop {
            match self.urbs.reap() {
                Ok(Some(done)) if done.slot < self.out_slots => {
                    if done.errno != 0 {
                        r.c.tx_errors += 1;
                        if is_gone(done.errno) {
                            self.gone.store(true, SeqCst);
                        }
                    }
                    self.free.put(done.slot);
                    returned = true;
                }
                Ok(Some(done)) => self.received(r, done),
                Ok(None) => break,
                // ENODEV: the device is gone and everything is reaped.
                Err(_) => {
                    self.gone.store(true, SeqCst);
                    break;
                }
            }
        }
        if returned && self.tx_waiting.load(SeqCst) {
            self.wake();
        }
        let (tap, c) = (self.tap, &mut r.c);
        r.gro.flush(&mut |h, f| {
            if write_vnet(tap, h, f).is_err() {
                c.tap_drops += 1;
            }
        });
    }

    fn received(&self, r: &mut Rx, done: Completion) {
        if done.errno == 0 {
            r.c.rx_transfers += 1;
            r.c.rx_bytes += done.len as u64;
            let (tap, c, gro) = (self.tap, &mut r.c, &mut r.gro);
            // The slot was just reaped by this thread.
            let Some(held) = self.urbs.claim(done.slot) else {
                unreachable!("a reaped IN slot is idle")
            };
            r.dec.decode(held.data(done.len), &mut |f| {
                gro.push(f, &mut |h, f| {
                    if write_vnet(tap, h, f).is_err() {
                        c.tap_drops += 1;
                    }
                })
            });
        } else {
            r.c.rx_errors += 1;
            if is_gone(done.errno) {
                self.gone.store(true, SeqCst);
            }
        }
        if !self.gone.load(Relaxed) {
            self.submit_in(r, done.slot);
        }
    }

    fn submit_in(&self, r: &mut Rx, slot: usize) {
        // IN slots belong to this thread whenever they are not in flight:
        // at the start, and once reaped.
        let Some(held) = self.urbs.claim(slot) else {
            unreachable!("an IN slot not in flight is idle")
        };
        if let Err(e) = held.submit(r.rx_size, false) {
            r.c.rx_errors += 1;
            if e.raw_os_error().is_some_and(is_gone) {
                self.gone.store(true, SeqCst);
            }
        }
    }
}

/// Sleeps in ppoll() until one of `fds` is readable or `due` (never longer
/// than [`wait_until`]'s bound); whether one was.
fn poll_in(
    fds: &[BorrowedFd<'_>],
    due: Option<xferlab_core::time::Time>,
    now: xferlab_core::time::Time,
) -> bool {
    let mut p = [
        PollFd::new(&fds[0], PollFlags::IN),
        PollFd::new(fds.get(1).unwrap_or(&fds[0]), PollFlags::IN),
    ];
    let ts = wait_until(due, now);
    let n = fds.len().min(2);
    poll(&mut p[..n], Some(&ts)).is_ok_and(|r| r > 0)
}

fn report(a: &NetRequest, depth: &Depth, layout: Layout, tx: &Counters, rx: &Rx, secs: f64) {
    // Each thread counted its own side; the report has their sum.
    let mut c = Counters::default();
    c.add(tx);
    c.add(&rx.c);
    let v = serde_json::json!({
        "schema": "xferlab.usb-net/1",
        "polls": c.polls,
        // Per thread: CPU seconds and ppoll() calls.
        "threads": { "tx": thread_use(tx), "rx": thread_use(&rx.c) },
        "encap": a.encap.label(),
        "frames_per_transfer_max": a.link.frames_per_transfer,
        "coalesce_us": a.link.coalesce_us,
        "depth": {
            "out": depth.out,
            "in": depth.inn,
            "from": if depth.from_flag { "flag" } else { "twice_usbnet_queue_memory" },
        },
        // Where the URBs' buffers are (xferlab-sys/src/usbfs.rs): "heap" costs a copy
        // in usbfs per transfer.
        "buffers": layout.label(),
        "seconds": secs,
        "tx": {
            "transfers": c.tx_transfers,
            "frames": c.tx_frames,
            "bytes": c.tx_bytes,
            "errors": c.tx_errors,
            "too_large": c.tx_too_large,
            "malformed": c.tx_malformed,
        },
        "rx": {
            "transfers": c.rx_transfers,
            "bytes": c.rx_bytes,
            "errors": c.rx_errors,
            "decode": rx.dec.stats(),
            "gro": &rx.gro.stats,
            "tap_drops": c.tap_drops,
        },
    });
    if a.report.json() {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!("{v}");
    }
    let _ = std::io::stdout().flush();
}
