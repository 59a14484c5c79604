//! The device side of xferlab's own USB network link (`xferlab usb gadget
//! --function net`): a TAP device bridged to the FunctionFS bulk pair with
//! Linux AIO, the host side's mirror image. Frames read from the TAP are
//! packed by the core's [`Coalescer`] (ECM, EEM or NCM framing, up to N
//! frames a transfer, a coalescing timeout) and written to ep1 (IN) with
//! `--queue` transfers in flight, each transfer's own buffer handed to the
//! kernel and recycled when it completes; `--queue` reads of `-l` bytes
//! stay posted on ep2 (OUT), and each completed one is split by the core's
//! decoder into frames written to the TAP. Malformed transfers are counted
//! and dropped. Per transfer nothing is allocated or locked.
//!
//! EEM is announced as a CDC-EEM interface, so the host's cdc_eem binds
//! it; ECM and NCM as vendor-specific interfaces for `xferlab usb net`
//! (FunctionFS cannot carry the CDC functional descriptors cdc_ether and
//! cdc_ncm need: see xferlab_core::usb::ffs).

use std::fs::File;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use xferlab_core::usb::ffs::{InterfaceClass, CDC_EEM, VENDOR_SPECIFIC};
use xferlab_core::usb::net::{
    coalesce::Transfer, decoder, Coalescer, DecodeStats, EcmFraming, EemFraming, Encap, Framing,
    Limits, NcmFraming, NtbParams, Push,
};

use super::ffs_io::{wait_enabled, Shared};
use crate::sys::clock;
use crate::usb::tap::FRAME_MAX;
use crate::usb::LinkRequest;
use xferlab_core::time::Time;
use xferlab_sys::aio::{Aio, Op};

/// cdc_eem's receive URB: usbnet's hard_mtu, MTU 1500 + Ethernet header
/// (14) + EEM header (2) + CRC (4) + VLAN tag (4). A longer IN transfer
/// overflows it and the host drops the lot, so EEM packs ACKs and small
/// frames by default, not several full ones.
const CDC_EEM_RX_URB: usize = 1524;

/// The interface class the link announces.
pub fn interface_class(encap: Encap) -> InterfaceClass {
    match encap {
        Encap::Eem => CDC_EEM,
        Encap::Ecm | Encap::Ncm => VENDOR_SPECIFIC,
    }
}

/// The IN direction's limits: what the host's receive buffers hold.
pub fn limits(encap: Encap, o: &LinkRequest) -> Limits {
    Limits {
        max_frames: if encap == Encap::Ecm {
            1
        } else {
            o.frames_per_transfer
        },
        max_transfer: match (encap, o.max_transfer) {
            (Encap::Ecm, _) => FRAME_MAX,
            (_, Some(m)) => m as usize,
            (Encap::Eem, None) => CDC_EEM_RX_URB,
            // `xferlab usb net` posts 16 KiB IN transfers for NCM.
            (Encap::Ncm, None) => NtbParams::LINUX_GADGET.max_size,
        },
        timeout: Duration::from_micros(o.coalesce_us),
    }
}

/// One link's settings, as the command line gave them.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    pub encap: Encap,
    /// The IN direction's limits ([`limits`]).
    pub limits: Limits,
    /// EEM: a real CRC-32 instead of the sentinel.
    pub crc: bool,
    /// Transfers in flight per direction.
    pub depth: usize,
    /// Bytes per OUT read.
    pub rx_size: usize,
}

/// The link's own counters (the transfer and byte counts are the
/// gadget's `in`/`out` ones).
#[derive(Default)]
pub struct NetCounters {
    pub tx_frames: AtomicU64,
    pub tx_too_large: AtomicU64,
    /// Frames the TAP would not take.
    pub tap_drops: AtomicU64,
    /// The OUT decoder's counts, published when its thread ends.
    pub decode: Mutex<DecodeStats>,
}

/// The IN direction's AIO requests ([`Aio`]: a slot's buffer is the
/// kernel's while it is in flight), and which of them are zero-length
/// writes.
struct Slots {
    aio: Aio,
    zlp: Vec<bool>,
}

impl Slots {
    fn new(n: usize) -> std::io::Result<Slots> {
        Ok(Slots {
            aio: Aio::new(n)?,
            zlp: vec![false; n],
        })
    }

    /// Submits a write of `buf` in a free slot (holding it until it
    /// completes); gives `buf` back if there is no slot or the kernel
    /// refuses it.
    fn submit(&mut self, ep: &File, buf: Vec<u8>, zlp: bool) -> Result<(), Vec<u8>> {
        let Some(i) = (0..self.aio.slots()).find(|&i| !self.aio.in_flight(i)) else {
            return Err(buf);
        };
        let len = buf.len();
        self.aio
            .submit(i, ep, Op::Write, buf, len)
            .map_err(|(_, b)| b)?;
        self.zlp[i] = zlp;
        Ok(())
    }
}

/// TAP -> coalescer -> IN transfers (ep1), `depth` in flight.
pub fn tx_loop(ep: File, tap: File, l: Link, s: &Shared, c: &NetCounters) {
    let Some(mp) = wait_enabled(s) else { return };
    let Link {
        encap,
        limits,
        crc,
        depth,
        ..
    } = l;
    match encap {
        Encap::Ecm => tx_with(EcmFraming::new(mp), ep, tap, limits, depth, s, c),
        Encap::Eem => tx_with(EemFraming::new(mp, crc), ep, tap, limits, depth, s, c),
        Encap::Ncm => tx_with(
            NcmFraming::new(NtbParams::LINUX_GADGET, mp),
            ep,
            tap,
            limits,
            depth,
            s,
            c,
        ),
    }
}

fn tx_with<F: Framing>(
    framing: F,
    ep: File,
    mut tap: File,
    limits: Limits,
    depth: usize,
    s: &Shared,
    c: &NetCounters,
) {
    let mut co = Coalescer::new(framing, limits);
    // A transfer and the zero-length write that may follow it.
    let Ok(mut slots) = Slots::new(2 * depth) else {
        s.input.errors.fetch_add(1, Relaxed);
        return;
    };
    let mut in_flight = 0usize;
    let mut frame = vec![0u8; 65536];
    while !s.stop.load(Relaxed) {
        if s.max_packet.load(Relaxed) == 0 {
            // Not enabled (host reset or gone): the TAP queues, then drops.
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        // Reclaim what completed: without waiting, unless all are in flight.
        let wait = if in_flight >= depth {
            Duration::from_millis(50)
        } else {
            Duration::ZERO
        };
        if in_flight > 0 {
            let n = slots.aio.wait(wait).unwrap_or(0);
            for k in 0..n {
                let Some(c) = slots.aio.completion(k) else {
                    continue;
                };
                if c.res < 0 && !s.stop.load(Relaxed) {
                    s.input.errors.fetch_add(1, Relaxed);
                }
                // A ZLP's slot holds no buffer and does not count.
                if !slots.zlp[c.slot] {
                    in_flight -= 1;
                    co.recycle(c.buf);
                }
            }
        }
        if in_flight >= depth {
            continue;
        }
        // Wait for a frame, at most until the open transfer's deadline.
        crate::usb::tap::wait_frame(&tap, co.poll_timeout());
        // Read what is there; each read() is one frame.
        while in_flight < depth {
            let Ok(n) = tap.read(&mut frame) else { break };
            push_frame(&mut co, clock::now(), &frame[..n], c, &mut |co, tr| {
                submit(&mut slots, &ep, co, &mut in_flight, tr, s, c)
            });
        }
        if in_flight < depth {
            if let Some(tr) = co.poll_transfer(clock::now()) {
                submit(&mut slots, &ep, &mut co, &mut in_flight, tr, s, c);
            }
        }
    }
    // Dropping the context cancels and waits for what is in flight (the
    // UDC is unbound by now); only then may the buffers go (the context
    // holds those in flight).
    drop(slots);
}

/// Hands a closed transfer's own buffer to the kernel (and a zero-length
/// write after it when its framing needs a ZLP).
fn submit<F: Framing>(
    slots: &mut Slots,
    ep: &File,
    co: &mut Coalescer<F>,
    in_flight: &mut usize,
    t: Transfer,
    s: &Shared,
    c: &NetCounters,
) {
    let (len, frames, zlp) = (t.buf.len(), t.frames, t.zlp);
    if let Err(b) = slots.submit(ep, t.buf, false) {
        // Not enabled (any more): the frames are lost, as on a wire.
        co.recycle(b);
        s.input.errors.fetch_add(1, Relaxed);
        return;
    }
    *in_flight += 1;
    if zlp && slots.submit(ep, Vec::new(), true).is_err() {
        s.input.errors.fetch_add(1, Relaxed);
    }
    count_sent(s, c, len, frames);
}

/// Packs one frame read from the TAP, handing each transfer it closes to
/// `send` (a full transfer first, then the one the frame closes at once).
pub fn push_frame<F: Framing>(
    co: &mut Coalescer<F>,
    t: Time,
    frame: &[u8],
    c: &NetCounters,
    send: &mut impl FnMut(&mut Coalescer<F>, Transfer),
) {
    let mut pushed = co.push(t, frame);
    if pushed == Push::Full {
        if let Some(tr) = co.poll_transfer(t) {
            send(co, tr);
        }
        pushed = co.push(t, frame);
    }
    if pushed == Push::TooLarge {
        c.tx_too_large.fetch_add(1, Relaxed);
    }
    if let Some(tr) = co.poll_transfer(t) {
        send(co, tr);
    }
}

/// Counts an IN transfer handed to the device controller.
pub fn count_sent(s: &Shared, c: &NetCounters, len: usize, frames: usize) {
    s.input.transfers.fetch_add(1, Relaxed);
    s.input.bytes.fetch_add(len as u64, Relaxed);
    c.tx_frames.fetch_add(frames as u64, Relaxed);
}

/// OUT transfers (ep2) -> decoder -> TAP, `depth` reads of `size` posted.
pub fn rx_loop(ep: File, mut tap: File, l: Link, s: &Shared, c: &NetCounters) {
    let (encap, size, depth) = (l.encap, l.rx_size, l.depth);
    let mut dec = decoder(encap, 65535);
    let Ok(mut aio) = Aio::new(depth) else {
        s.output.errors.fetch_add(1, Relaxed);
        return;
    };
    // Each slot's buffer while it is ours (None: posted, the kernel's).
    let mut bufs: Vec<Option<Vec<u8>>> = (0..depth).map(|_| Some(vec![0u8; size])).collect();
    'outer: while !s.stop.load(Relaxed) {
        if wait_enabled(s).is_none() {
            break;
        }
        for (i, slot) in bufs.iter_mut().enumerate() {
            let Some(b) = slot.take() else {
                continue;
            };
            if let Err((_, b)) = aio.submit(i, &ep, Op::Read, b, size) {
                *slot = Some(b);
                // EAGAIN (not enabled yet) or ESHUTDOWN: back to waiting.
                std::thread::sleep(Duration::from_millis(10));
                continue 'outer;
            }
        }
        let n = match aio.wait(Duration::from_millis(100)) {
            Ok(n) => n,
            Err(_) => break,
        };
        for k in 0..n {
            let Some(done) = aio.completion(k) else {
                continue;
            };
            let buf = bufs[done.slot].insert(done.buf);
            if done.res < 0 {
                if !s.stop.load(Relaxed) {
                    s.output.errors.fetch_add(1, Relaxed);
                }
                continue;
            }
            let len = (done.res as usize).min(size);
            s.output.transfers.fetch_add(1, Relaxed);
            s.output.bytes.fetch_add(len as u64, Relaxed);
            dec.decode(&buf[..len], &mut |f| {
                if tap.write(f).is_err() {
                    c.tap_drops.fetch_add(1, Relaxed);
                }
            });
        }
    }
    drop(aio);
    drop(bufs);
    *c.decode.lock().unwrap_or_else(|e| e.into_inner()) = *dec.stats();
}
