//! `xferlab usb net`: the host side of xferlab's own USB network link. A
//! TAP device (Ethernet frames) is bridged to a device's bulk pipes: frames
//! read from the TAP are packed by the core's [`Coalescer`] (ECM, EEM or
//! NCM framing, up to N frames a transfer, a coalescing timeout) and sent
//! with `-Q` OUT transfers in flight; `-Q` IN transfers stay queued, and
//! each completed one is split by the core's decoder into frames written to
//! the TAP. Malformed transfers are counted and dropped. The TAP is not
//! persistent: the kernel removes it when the process ends, SIGKILL too.
//! One thread does all of it, polling the TAP and the device's usbfs node
//! together (URBs of our own, usb/usbfs.rs).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use xferlab_core::usb::descriptor::PipeRequest;
use xferlab_core::usb::net::{
    coalesce::Transfer,
    decoder, default_depth,
    gro::{GroStats, Merger},
    gso::Segmenter,
    BusSpeed, Coalescer, DecodeStats, EcmFraming, EemFraming, Encap, Framing, Limits, NcmFraming,
    NtbParams, Push, MAX_DEPTH,
};

use super::device;
use super::tap::{open_tap, wait_until, write_vnet, FRAME_MAX};
use super::usbfs::{Completion, Urbs};
use crate::cli::usb::NetArgs;
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
    /// ppoll() calls of the link's thread (each a sleep unless a
    /// descriptor was ready): the wake-ups the frames cost.
    polls: u64,
}

pub fn run(a: &NetArgs, interrupts: &AtomicU32) -> ExitCode {
    match link(a, interrupts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xferlab: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn link(a: &NetArgs, interrupts: &AtomicU32) -> anyhow::Result<()> {
    a.link.check().map_err(|e| anyhow!(e))?;
    if let Some(q) = a.depth.filter(|&q| q == 0 || q > MAX_DEPTH) {
        bail!("-Q must be 1 to {MAX_DEPTH} transfers in flight (got {q})");
    }
    let sel = device::parse_selector(Some(&a.device))?;
    let info = device::select(&sel, None)?;
    // nusb finds the device and reads its descriptors; the transfers run
    // on a usbfs descriptor of our own (usb/usbfs.rs), polled with the TAP.
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
        if a.json {
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
        if depth.from_flag { " (-Q)" } else { " (usbnet's queue at this speed)" },
    ));
    let t0 = Instant::now();
    let end = a.time.map(|t| t0 + Duration::from_secs_f64(t));
    let mut l = Link {
        urbs,
        tap,
        out_slots: depth.out,
        rx_size,
        out_free: (0..depth.out).rev().collect(),
        dec: decoder(a.encap, 65535),
        gro: Merger::default(),
        c: Counters::default(),
        gone: false,
    };
    let crc = a.link.crc;
    let stop = || interrupts.load(Relaxed) > 0 || end.is_some_and(|e| Instant::now() >= e);
    match a.encap {
        Encap::Ecm => l.run(Coalescer::new(EcmFraming::new(max_packet), limits), stop),
        Encap::Eem => l.run(
            Coalescer::new(EemFraming::new(max_packet, crc), limits),
            stop,
        ),
        Encap::Ncm => l.run(
            Coalescer::new(NcmFraming::new(NtbParams::LINUX_GADGET, max_packet), limits),
            stop,
        ),
    }
    let secs = t0.elapsed().as_secs_f64();
    let Link {
        urbs, c, dec, gro, ..
    } = l;
    // Releasing the interface asks the kernel to bind a driver to it again.
    drop(urbs);
    rebind(&info);
    report(a, &depth, &c, dec.stats(), &gro.stats, secs);
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

/// The link's one thread: it polls the TAP (for frames to send, while an
/// OUT URB is free) and the usbfs node (POLLOUT: URBs completed) together,
/// so a frame costs no wake-up of another thread, and its system calls
/// are a read() or write() on the TAP and a submit and a reap.
struct Link {
    urbs: Urbs,
    tap: File,
    /// OUT slots: 0..out_slots; IN slots after them.
    out_slots: usize,
    rx_size: usize,
    /// OUT slots not in flight.
    out_free: Vec<usize>,
    dec: Box<dyn xferlab_core::usb::net::Decode + Send>,
    /// Received TCP segments merged into super-frames for the TAP.
    gro: Merger,
    c: Counters,
    /// The device went away.
    gone: bool,
}

impl Link {
    /// Runs until `stop()` says so or the device goes; the TAP's frames
    /// go through `co` into OUT transfers, one per OUT slot in flight, and
    /// every IN slot stays queued, each completion decoded into frames for
    /// the TAP.
    fn run<F: Framing>(&mut self, mut co: Coalescer<F>, stop: impl Fn() -> bool) {
        // A packet from the TAP (virtio_net_hdr + up to 64 KB) and the
        // frame being cut from it.
        let mut pkt = vec![0u8; 65536 + 256];
        let mut pkt_len = 0;
        let mut seg = Segmenter::default();
        let mut frame = vec![0u8; 65536];
        for slot in self.out_slots..self.urbs.slots() {
            self.submit_in(slot);
        }
        // Whether the TAP may hold a frame (it was not read empty) and
        // whether URBs may have completed, from the last poll.
        let (mut tap_ready, mut usb_ready) = (true, true);
        while !self.gone && !stop() {
            if usb_ready {
                self.reap_all();
            }
            let mut now = clock::now();
            while !self.out_free.is_empty() {
                // The next frame of the packet at hand, or the next packet.
                let Some(n) = seg.next(&pkt[..pkt_len], &mut frame) else {
                    if !tap_ready {
                        break;
                    }
                    match self.tap.read(&mut pkt) {
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
                    Push::TooLarge => self.c.tx_too_large += 1,
                    Push::Full => {
                        // The closed transfer takes the free slot; the
                        // frame opens the next one (never Full again).
                        if let Some(t) = co.poll_transfer(now) {
                            self.send(t, &mut co);
                        }
                        co.push(now, &frame[..n]);
                    }
                }
                if self.out_free.is_empty() {
                    break;
                }
                if let Some(t) = co.poll_transfer(now) {
                    self.send(t, &mut co);
                }
            }
            if !self.out_free.is_empty() {
                if let Some(t) = co.poll_transfer(now) {
                    self.send(t, &mut co);
                }
            }
            if self.gone {
                break;
            }
            // Wait for a completion, or a frame while an OUT URB is free,
            // at most until the open transfer's deadline.
            let want_tap = !self.out_free.is_empty();
            if want_tap && tap_ready {
                // Stopped reading for want of a slot, and one came free.
                continue;
            }
            let ts = wait_until(co.poll_timeout().filter(|_| want_tap), now);
            let mut p = [
                libc::pollfd {
                    fd: self.urbs.raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.tap.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let nfds = if want_tap { 2 } else { 1 };
            // SAFETY: `nfds` pollfds and a timespec of ours.
            let r = unsafe { libc::ppoll(p.as_mut_ptr(), nfds, &ts, std::ptr::null()) };
            self.c.polls += 1;
            if r <= 0 {
                // Timeout (the coalescer's deadline) or a signal: look again.
                usb_ready = false;
                continue;
            }
            usb_ready = p[0].revents != 0;
            if want_tap {
                tap_ready = p[1].revents != 0;
            }
        }
        self.urbs.cancel_all(Duration::from_secs(1));
        self.c.tx_malformed = seg.malformed;
    }

    /// Reaps every completed URB: OUT slots come free, IN transfers are
    /// decoded to the TAP and resubmitted. What the merger still holds
    /// goes up at the end, before the thread may sleep.
    fn reap_all(&mut self) {
        self.reap_completed();
        let (tap, c) = (&self.tap, &mut self.c);
        self.gro.flush(&mut |h, f| {
            if write_vnet(tap, h, f).is_err() {
                c.tap_drops += 1;
            }
        });
    }

    fn reap_completed(&mut self) {
        loop {
            match self.urbs.reap() {
                Ok(Some(done)) if done.slot < self.out_slots => {
                    if done.errno != 0 {
                        self.c.tx_errors += 1;
                        self.gone |= is_gone(done.errno);
                    }
                    self.out_free.push(done.slot);
                }
                Ok(Some(done)) => self.received(done),
                Ok(None) => return,
                // ENODEV: the device is gone and everything is reaped.
                Err(_) => {
                    self.gone = true;
                    return;
                }
            }
        }
    }

    fn received(&mut self, done: Completion) {
        if done.errno == 0 {
            self.c.rx_transfers += 1;
            self.c.rx_bytes += done.len as u64;
            let (tap, c, gro) = (&self.tap, &mut self.c, &mut self.gro);
            self.dec
                .decode(self.urbs.data(done.slot, done.len), &mut |f| {
                    gro.push(f, &mut |h, f| {
                        if write_vnet(tap, h, f).is_err() {
                            c.tap_drops += 1;
                        }
                    })
                });
        } else {
            self.c.rx_errors += 1;
            self.gone |= is_gone(done.errno);
        }
        if !self.gone {
            self.submit_in(done.slot);
        }
    }

    fn submit_in(&mut self, slot: usize) {
        if let Err(e) = self.urbs.submit(slot, self.rx_size, false) {
            self.c.rx_errors += 1;
            self.gone |= e.raw_os_error().is_some_and(is_gone);
        }
    }

    /// Copies a closed transfer into a free OUT URB and submits it (ending
    /// it with a ZLP when its framing needs one); its buffer goes back to
    /// the coalescer.
    fn send<F: Framing>(&mut self, t: Transfer, co: &mut Coalescer<F>) {
        let Some(slot) = self.out_free.pop() else {
            unreachable!("a transfer is taken only while an OUT URB is free")
        };
        let n = t.buf.len();
        self.urbs.buf_mut(slot)[..n].copy_from_slice(&t.buf);
        match self.urbs.submit(slot, n, t.zlp) {
            Ok(()) => {
                self.c.tx_transfers += 1;
                self.c.tx_frames += t.frames as u64;
                self.c.tx_bytes += n as u64;
            }
            Err(e) => {
                self.c.tx_errors += 1;
                self.gone |= e.raw_os_error().is_some_and(is_gone);
                self.out_free.push(slot);
            }
        }
        co.recycle(t.buf);
    }
}

fn report(a: &NetArgs, depth: &Depth, c: &Counters, rx: &DecodeStats, gro: &GroStats, secs: f64) {
    let v = serde_json::json!({
        "schema": "xferlab.usb-net/1",
        "polls": c.polls,
        "encap": a.encap.label(),
        "frames_per_transfer_max": a.link.frames_per_transfer,
        "coalesce_us": a.link.coalesce_us,
        "depth": {
            "out": depth.out,
            "in": depth.inn,
            "from": if depth.from_flag { "flag" } else { "usbnet_queue_memory" },
        },
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
            "decode": rx,
            "gro": gro,
            "tap_drops": c.tap_drops,
        },
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!("{v}");
    }
    let _ = std::io::stdout().flush();
}
