//! The link's data path: two threads share the device's usbfs node
//! (URBs of our own, xferlab-sys/src/usbfs.rs), the TAP and an eventfd
//! ([`Shared`]). One sends: it reads the TAP, cuts and packs frames and
//! submits OUT URBs. One receives: it reaps every completed URB, hands OUT
//! slots back through [`FreeSlots`], decodes IN transfers to the TAP and
//! resubmits them. Each counts into atomics only it writes ([`TxCounters`],
//! [`RxCounters`]), which the driver loop reads at interval boundaries.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::anyhow;
use rustix::event::{poll, PollFd, PollFlags};
use xferlab_core::usb::net::gro::{GroStats, Merger};
use xferlab_core::usb::net::report::ThreadUse;
use xferlab_core::usb::net::{
    coalesce::Transfer, decoder, gso::Segmenter, Coalescer, DecodeStats, EcmFraming, EemFraming,
    Encap, Framing, Limits, NcmFraming, NtbParams, Push, MAX_DEPTH,
};

use crate::sys::clock;
use crate::usb::tap::{wait_until, write_vnet};
use crate::usb::usbfs::{Completion, Urbs};

/// Adds `n` to a counter only the calling thread writes: a load and a
/// store, no read-modify-write (a locked instruction per transfer), as
/// readers only need a recent value.
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed) + n, Relaxed);
}

/// What the sending thread counts; only it writes these. On cache lines
/// of their own (128 bytes: x86 fetches lines in pairs), away from the
/// receiving thread's counters and the slot set: both threads write per
/// transfer, and counters sharing a line would bounce it between them.
#[derive(Default)]
#[repr(align(128))]
pub struct TxCounters {
    pub frames: AtomicU64,
    pub transfers: AtomicU64,
    pub bytes: AtomicU64,
    /// Submissions that failed.
    pub errors: AtomicU64,
    pub too_large: AtomicU64,
    /// Packets from the TAP the segmenter could not cut (gso.rs); set at
    /// the end.
    pub malformed: AtomicU64,
}

/// What the receiving thread counts; only it writes these (on lines of
/// their own, as [`TxCounters`]).
#[derive(Default)]
#[repr(align(128))]
pub struct RxCounters {
    pub transfers: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: AtomicU64,
    /// OUT transfers that completed with an error (reaped here).
    pub out_errors: AtomicU64,
    /// Frames the TAP would not take (its queue was full).
    pub tap_drops: AtomicU64,
}

/// CPU seconds the calling thread has used.
fn thread_cpu_s() -> f64 {
    let (user, system) = crate::sys::cpu::thread_times();
    user + system
}

/// The device went away: URBs complete with these, and usbfs refuses new ones.
fn is_gone(errno: i32) -> bool {
    matches!(errno, libc::ENODEV | libc::ESHUTDOWN)
}

/// The link's two threads and what they share, owned (the threads are
/// the loop's workload, not scoped to a call). The sending thread reads
/// the TAP, cuts and packs frames and submits OUT URBs; the receiving
/// thread reaps every completed URB, hands OUT slots back through
/// [`FreeSlots`], decodes IN transfers to the TAP and resubmits them.
/// One thread doing both was CPU-bound in the lab VM (85-95 % of a CPU,
/// the kernel ECM link's sender and receiver run in their own contexts):
/// split, the reaping, decoding and the TCP work that writing to the TAP
/// runs (ACKs that release more data) no longer wait behind the cutting
/// and submitting. The threads meet only at the slot set and, when the
/// sender has no free slot, one eventfd wake-up per batch of completions.
pub struct Shared {
    pub urbs: Urbs,
    tap: File,
    /// OUT slots are 0..out_slots; IN slots follow.
    out_slots: usize,
    free: FreeSlots,
    /// The sending thread sleeps until a slot comes free.
    tx_waiting: AtomicBool,
    /// An eventfd: the receiving thread's wake-up of the sending one, and
    /// the loop's stop.
    wake: File,
    /// The link is stopping: asked to, or the device went.
    gone: AtomicBool,
    /// The device went away (a completion or a submission said so).
    lost: AtomicBool,
    pub tx: TxCounters,
    pub rx: RxCounters,
}

/// The receiving thread's own state.
struct Rx {
    dec: Box<dyn xferlab_core::usb::net::Decode + Send>,
    /// Received TCP segments merged into super-frames for the TAP.
    gro: Merger,
    rx_size: usize,
}

/// What the receiving thread ends with.
pub struct RxEnd {
    pub cpu: ThreadUse,
    pub decode: DecodeStats,
    pub gro: GroStats,
}

/// The link's settings the threads need.
#[derive(Debug, Clone, Copy)]
pub struct LinkSetup {
    pub encap: Encap,
    pub limits: Limits,
    pub max_packet: usize,
    pub crc: bool,
    pub rx_size: usize,
}

/// The two running threads.
pub struct Threads {
    pub tx: JoinHandle<ThreadUse>,
    pub rx: JoinHandle<RxEnd>,
}

impl Shared {
    /// The link over `urbs` (slots 0..out_slots OUT, the rest IN) and
    /// `tap`.
    pub fn new(urbs: Urbs, tap: File, out_slots: usize) -> anyhow::Result<Shared> {
        Ok(Shared {
            urbs,
            tap,
            out_slots,
            free: FreeSlots::all(out_slots),
            tx_waiting: AtomicBool::new(false),
            wake: eventfd()?,
            gone: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            tx: TxCounters::default(),
            rx: RxCounters::default(),
        })
    }

    /// Starts the sending and the receiving thread; each calls `done`
    /// when it ends.
    pub fn start(
        self: &Arc<Self>,
        l: LinkSetup,
        done: Arc<dyn Fn(u32) + Send + Sync>,
    ) -> anyhow::Result<Threads> {
        let sh = self.clone();
        let on_end = done.clone();
        let tx = std::thread::Builder::new()
            .name("xfer-usbnet-tx".into())
            .spawn(move || {
                let use_ = match l.encap {
                    Encap::Ecm => sh.tx(Coalescer::new(EcmFraming::new(l.max_packet), l.limits)),
                    Encap::Eem => sh.tx(Coalescer::new(
                        EemFraming::new(l.max_packet, l.crc),
                        l.limits,
                    )),
                    Encap::Ncm => sh.tx(Coalescer::new(
                        NcmFraming::new(NtbParams::LINUX_GADGET, l.max_packet),
                        l.limits,
                    )),
                };
                on_end(0);
                use_
            })
            .map_err(|e| anyhow!("cannot start the link's sending thread: {e}"))?;
        let sh = self.clone();
        let rx = std::thread::Builder::new()
            .name("xfer-usbnet-rx".into())
            .spawn(move || {
                let mut r = Rx {
                    dec: decoder(l.encap, 65535),
                    gro: Merger::default(),
                    rx_size: l.rx_size,
                };
                let cpu = sh.rx(&mut r);
                // The receiving side has stopped (asked to, or the device
                // went): the sending side stops too, even if it waits for
                // a slot.
                sh.stop();
                done(1);
                RxEnd {
                    cpu,
                    decode: *r.dec.stats(),
                    gro: r.gro.stats,
                }
            });
        match rx {
            Ok(rx) => Ok(Threads { tx, rx }),
            Err(e) => {
                self.stop();
                let _ = tx.join();
                Err(anyhow!("cannot start the link's receiving thread: {e}"))
            }
        }
    }

    /// Both threads end (each sees it within one bounded poll).
    pub fn stop(&self) {
        self.gone.store(true, SeqCst);
        self.wake();
    }

    /// Whether the device went away during the run.
    pub fn lost(&self) -> bool {
        self.lost.load(Relaxed)
    }

    /// The device said it is gone: the link ends.
    fn device_gone(&self) {
        self.lost.store(true, Relaxed);
        self.gone.store(true, SeqCst);
    }
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

impl Shared {
    /// Wakes the sending thread if it waits for a slot.
    fn wake(&self) {
        let _ = (&self.wake).write(&1u64.to_ne_bytes());
    }

    fn stopping(&self) -> bool {
        self.gone.load(Relaxed)
    }

    /// The sending thread: the TAP's frames go through `co` into OUT
    /// transfers, one per free OUT slot.
    fn tx<F: Framing>(&self, mut co: Coalescer<F>) -> ThreadUse {
        let c = &self.tx;
        let mut polls = 0u64;
        // A packet from the TAP (virtio_net_hdr + up to 64 KB) and the
        // frame being cut from it.
        let mut pkt = vec![0u8; 65536 + 256];
        let mut pkt_len = 0;
        let mut seg = Segmenter::default();
        let mut frame = vec![0u8; 65536];
        // Whether the TAP may hold a frame (it was not read empty).
        let mut tap_ready = true;
        let mut tap = &self.tap;
        while !self.stopping() {
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
                    Push::TooLarge => bump(&c.too_large, 1),
                    Push::Full => {
                        // The closed transfer takes the free slot; the
                        // frame opens the next one (never Full again).
                        if let Some(t) = co.poll_transfer(now) {
                            self.send(t, &mut co);
                        }
                        co.push(now, &frame[..n]);
                    }
                }
                if !self.free.any() {
                    break;
                }
                if let Some(t) = co.poll_transfer(now) {
                    self.send(t, &mut co);
                }
            }
            if self.free.any() {
                if let Some(t) = co.poll_transfer(now) {
                    self.send(t, &mut co);
                }
            }
            if !self.free.any() {
                // Every OUT URB is in flight: sleep until the receiving
                // thread returns one (it wakes us if we say we wait).
                self.tx_waiting.store(true, SeqCst);
                if !self.free.any() && !self.stopping() {
                    polls += 1;
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
            polls += 1;
            tap_ready = poll_in(&[tap.as_fd()], co.poll_timeout(), now);
        }
        c.malformed.store(seg.malformed, Relaxed);
        ThreadUse {
            cpu_s: thread_cpu_s(),
            polls,
        }
    }

    /// Copies a closed transfer into a free OUT URB and submits it (ending
    /// it with a ZLP when its framing needs one); its buffer goes back to
    /// the coalescer.
    fn send<F: Framing>(&self, t: Transfer, co: &mut Coalescer<F>) {
        let c = &self.tx;
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
                bump(&c.transfers, 1);
                bump(&c.frames, t.frames as u64);
                bump(&c.bytes, n as u64);
            }
            Err(e) => {
                bump(&c.errors, 1);
                if e.raw_os_error().is_some_and(is_gone) {
                    self.device_gone();
                }
                self.free.put(slot);
            }
        }
        co.recycle(t.buf);
    }

    /// The receiving thread: keeps every IN slot queued and reaps until
    /// the link stops or the device goes.
    fn rx(&self, r: &mut Rx) -> ThreadUse {
        let mut polls = 0u64;
        for slot in self.out_slots..self.urbs.slots() {
            self.submit_in(r, slot);
        }
        while !self.stopping() {
            self.reap_all(r);
            polls += 1;
            let fd = self.urbs.fd();
            let mut p = [PollFd::new(&fd, PollFlags::OUT)];
            let ts = wait_until(None, clock::now());
            poll(&mut p, Some(&ts)).ok();
        }
        ThreadUse {
            cpu_s: thread_cpu_s(),
            polls,
        }
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
                        bump(&self.rx.out_errors, 1);
                        if is_gone(done.errno) {
                            self.device_gone();
                        }
                    }
                    self.free.put(done.slot);
                    returned = true;
                }
                Ok(Some(done)) => self.received(r, done),
                Ok(None) => break,
                // ENODEV: the device is gone and everything is reaped.
                Err(_) => {
                    self.device_gone();
                    break;
                }
            }
        }
        if returned && self.tx_waiting.load(SeqCst) {
            self.wake();
        }
        let (tap, drops) = (&self.tap, &self.rx.tap_drops);
        r.gro.flush(&mut |h, f| {
            if write_vnet(tap, h, f).is_err() {
                bump(drops, 1);
            }
        });
    }

    fn received(&self, r: &mut Rx, done: Completion) {
        if done.errno == 0 {
            bump(&self.rx.transfers, 1);
            bump(&self.rx.bytes, done.len as u64);
            let (tap, drops, gro) = (&self.tap, &self.rx.tap_drops, &mut r.gro);
            // The slot was just reaped by this thread.
            let Some(held) = self.urbs.claim(done.slot) else {
                unreachable!("a reaped IN slot is idle")
            };
            r.dec.decode(held.data(done.len), &mut |f| {
                gro.push(f, &mut |h, f| {
                    if write_vnet(tap, h, f).is_err() {
                        bump(drops, 1);
                    }
                })
            });
        } else {
            bump(&self.rx.errors, 1);
            if is_gone(done.errno) {
                self.device_gone();
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
            bump(&self.rx.errors, 1);
            if e.raw_os_error().is_some_and(is_gone) {
                self.device_gone();
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
