//! `xferlab usb net`: the host side of xferlab's own USB network link. A
//! TAP device (Ethernet frames) is bridged to a device's bulk pipes: frames
//! read from the TAP are packed by the core's [`Coalescer`] (ECM, EEM or
//! NCM framing, up to N frames a transfer, a coalescing timeout) and sent
//! with `-Q` OUT transfers in flight; `-Q` IN transfers stay queued, and
//! each completed one is split by the core's decoder into frames written to
//! the TAP. Malformed transfers are counted and dropped. The TAP is not
//! persistent: the kernel removes it when the process ends, SIGKILL too.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use nusb::transfer::{Buffer, Bulk, In, Out};
use nusb::Endpoint;
use xferlab_core::usb::descriptor::PipeRequest;
use xferlab_core::usb::net::{
    coalesce::Transfer, decoder, Coalescer, DecodeStats, EcmFraming, EemFraming, Encap, Framing,
    Limits, NcmFraming, NtbParams, Push,
};

use super::device;
use super::tap::{open_tap, FRAME_MAX};
use crate::cli::usb::NetArgs;
use crate::sys::clock;

#[derive(Default)]
struct Counters {
    tx_frames: AtomicU64,
    tx_transfers: AtomicU64,
    tx_bytes: AtomicU64,
    tx_errors: AtomicU64,
    tx_too_large: AtomicU64,
    rx_transfers: AtomicU64,
    rx_bytes: AtomicU64,
    rx_errors: AtomicU64,
    /// Frames the TAP would not take (its queue was full).
    tap_drops: AtomicU64,
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
    if a.depth == 0 || a.depth > 256 {
        bail!("-Q must be 1 to 256 transfers in flight (got {})", a.depth);
    }
    let sel = device::parse_selector(Some(&a.device))?;
    let info = device::select(&sel, None)?;
    let (dev, _cfg, pipes) = device::open(&info, PipeRequest::default())?;
    let (Some(ep_in), Some(ep_out)) = (pipes.bulk_in, pipes.bulk_out) else {
        bail!(
            "{} has no interface with a bulk IN and a bulk OUT endpoint",
            device::describe(&info)
        );
    };
    // The class driver (cdc_ether, cdc_eem, cdc_ncm) holds the interface:
    // usbfs detaches it for the run and rebinds it when we release it.
    let intf = device::claim(&info, &dev, &pipes, true)?;
    let max_packet = usize::from(ep_out.max_packet.max(1));
    let tap = open_tap(&a.link.tap)?;
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let out = intf
        .endpoint::<Bulk, Out>(ep_out.address)
        .with_context(|| format!("cannot open endpoint 0x{:02x}", ep_out.address))?;
    let inp = intf
        .endpoint::<Bulk, In>(ep_in.address)
        .with_context(|| format!("cannot open endpoint 0x{:02x}", ep_in.address))?;
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
    let tap_rx = tap
        .try_clone()
        .context("cannot duplicate the TAP descriptor")?;
    let (c1, s1, c2, s2) = (
        counters.clone(),
        stop.clone(),
        counters.clone(),
        stop.clone(),
    );
    let (encap, depth, crc) = (a.encap, a.depth, a.link.crc);
    let tx = std::thread::Builder::new()
        .name("usbnet-tx".into())
        .spawn(move || match encap {
            Encap::Ecm => tx_loop(
                out,
                tap,
                EcmFraming::new(max_packet),
                limits,
                depth,
                &c1,
                &s1,
            ),
            Encap::Eem => tx_loop(
                out,
                tap,
                EemFraming::new(max_packet, crc),
                limits,
                depth,
                &c1,
                &s1,
            ),
            Encap::Ncm => tx_loop(
                out,
                tap,
                NcmFraming::new(NtbParams::LINUX_GADGET, max_packet),
                limits,
                depth,
                &c1,
                &s1,
            ),
        })?;
    let rx = std::thread::Builder::new()
        .name("usbnet-rx".into())
        .spawn(move || rx_loop(inp, tap_rx, encap, rx_size, depth, &c2, &s2))?;
    let say = |m: String| {
        if a.json {
            eprintln!("{m}")
        } else {
            println!("{m}")
        }
    };
    say(format!(
        "{} {}: TAP {} <-> bulk 0x{:02x}/0x{:02x}, {} x{} frames per transfer, {} us coalescing, {} in flight",
        device::describe(&info),
        device::speed_label(info.speed()).unwrap_or("?"),
        a.link.tap,
        ep_out.address,
        ep_in.address,
        a.encap.label(),
        limits.max_frames,
        a.link.coalesce_us,
        a.depth
    ));
    let t0 = Instant::now();
    let end = a.time.map(|t| t0 + Duration::from_secs_f64(t));
    while interrupts.load(Relaxed) == 0
        && !stop.load(Relaxed)
        && end.is_none_or(|e| Instant::now() < e)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Relaxed);
    let _ = tx.join();
    let stats = rx.join().unwrap_or_default();
    let secs = t0.elapsed().as_secs_f64();
    drop(intf);
    rebind(&info);
    report(a, &counters, &stats, secs);
    Ok(())
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

/// TAP -> coalescer -> OUT transfers, `depth` in flight.
fn tx_loop<F: Framing>(
    mut ep: Endpoint<Bulk, Out>,
    mut tap: File,
    framing: F,
    limits: Limits,
    depth: usize,
    c: &Counters,
    stop: &AtomicBool,
) {
    let mut co = Coalescer::new(framing, limits);
    let mut spare: Vec<Buffer> = (0..depth + 1)
        .map(|_| ep.allocate(limits.max_transfer))
        .collect();
    let mut in_flight = 0usize;
    let mut frame = vec![0u8; 65536];
    let fd = tap.as_raw_fd();
    let now = clock::now;
    while !stop.load(Relaxed) {
        // Reclaim what completed: without waiting, unless all are in flight.
        while in_flight > 0 {
            let wait = if in_flight >= depth {
                Duration::from_millis(50)
            } else {
                Duration::ZERO
            };
            let Some(done) = ep.wait_next_complete(wait) else {
                break;
            };
            in_flight -= 1;
            if done.status.is_err() {
                c.tx_errors.fetch_add(1, Relaxed);
            }
            spare.push(done.buffer);
        }
        if in_flight >= depth {
            continue;
        }
        // Wait for a frame, at most until the open transfer's deadline.
        crate::usb::tap::wait_frame(fd, co.poll_timeout());
        // Read what is there; each read() is one frame.
        while in_flight < depth {
            let n = match tap.read(&mut frame) {
                Ok(n) => n,
                Err(_) => break,
            };
            let t = now();
            match co.push(t, &frame[..n]) {
                Push::Added => {}
                Push::TooLarge => {
                    c.tx_too_large.fetch_add(1, Relaxed);
                }
                Push::Full => {
                    if let Some(tr) = co.poll_transfer(t) {
                        let b = submit(&mut ep, &mut spare, &mut in_flight, tr, c, limits);
                        co.recycle(b);
                    }
                    co.push(t, &frame[..n]);
                }
            }
            if let Some(tr) = co.poll_transfer(t) {
                let b = submit(&mut ep, &mut spare, &mut in_flight, tr, c, limits);
                co.recycle(b);
            }
        }
        if let Some(tr) = co.poll_transfer(now()) {
            let b = submit(&mut ep, &mut spare, &mut in_flight, tr, c, limits);
            co.recycle(b);
        }
    }
    ep.cancel_all();
    while in_flight > 0 && ep.wait_next_complete(Duration::from_secs(1)).is_some() {
        in_flight -= 1;
    }
}

/// Copies a closed transfer into a usbfs buffer and submits it (with a ZLP
/// after it when its framing needs one); returns its bytes for reuse.
fn submit(
    ep: &mut Endpoint<Bulk, Out>,
    spare: &mut Vec<Buffer>,
    in_flight: &mut usize,
    t: Transfer,
    c: &Counters,
    limits: Limits,
) -> Vec<u8> {
    let mut b = spare
        .pop()
        .unwrap_or_else(|| ep.allocate(limits.max_transfer));
    b.clear();
    b.extend_from_slice(&t.buf);
    ep.submit(b);
    *in_flight += 1;
    if t.zlp {
        // A zero-length OUT transfer is the ZLP that ends an ECM frame
        // filling its last packet.
        let mut z = spare.pop().unwrap_or_else(|| ep.allocate(0));
        z.clear();
        ep.submit(z);
        *in_flight += 1;
    }
    c.tx_transfers.fetch_add(1, Relaxed);
    c.tx_frames.fetch_add(t.frames as u64, Relaxed);
    c.tx_bytes.fetch_add(t.buf.len() as u64, Relaxed);
    t.buf
}

/// IN transfers -> decoder -> TAP, `depth` queued.
fn rx_loop(
    mut ep: Endpoint<Bulk, In>,
    mut tap: File,
    encap: Encap,
    size: usize,
    depth: usize,
    c: &Counters,
    stop: &AtomicBool,
) -> DecodeStats {
    let mut dec = decoder(encap, 65535);
    for _ in 0..depth {
        let mut b = ep.allocate(size);
        b.set_requested_len(size);
        ep.submit(b);
    }
    let mut pending = depth;
    while !stop.load(Relaxed) {
        let Some(done) = ep.wait_next_complete(Duration::from_millis(50)) else {
            continue;
        };
        pending -= 1;
        match done.status {
            Ok(()) => {
                c.rx_transfers.fetch_add(1, Relaxed);
                c.rx_bytes.fetch_add(done.actual_len as u64, Relaxed);
                dec.decode(&done.buffer[..done.actual_len], &mut |f| {
                    if tap.write(f).is_err() {
                        c.tap_drops.fetch_add(1, Relaxed);
                    }
                });
            }
            Err(nusb::transfer::TransferError::Disconnected) => {
                c.rx_errors.fetch_add(1, Relaxed);
                stop.store(true, Relaxed);
                break;
            }
            Err(_) => {
                c.rx_errors.fetch_add(1, Relaxed);
            }
        }
        let mut b = done.buffer;
        b.set_requested_len(size);
        ep.submit(b);
        pending += 1;
    }
    ep.cancel_all();
    while pending > 0 && ep.wait_next_complete(Duration::from_secs(1)).is_some() {
        pending -= 1;
    }
    *dec.stats()
}

fn report(a: &NetArgs, c: &Counters, rx: &DecodeStats, secs: f64) {
    let v = serde_json::json!({
        "schema": "xferlab.usb-net/1",
        "encap": a.encap.label(),
        "frames_per_transfer_max": a.link.frames_per_transfer,
        "coalesce_us": a.link.coalesce_us,
        "depth": a.depth,
        "seconds": secs,
        "tx": {
            "transfers": c.tx_transfers.load(Relaxed),
            "frames": c.tx_frames.load(Relaxed),
            "bytes": c.tx_bytes.load(Relaxed),
            "errors": c.tx_errors.load(Relaxed),
            "too_large": c.tx_too_large.load(Relaxed),
        },
        "rx": {
            "transfers": c.rx_transfers.load(Relaxed),
            "bytes": c.rx_bytes.load(Relaxed),
            "errors": c.rx_errors.load(Relaxed),
            "decode": rx,
            "tap_drops": c.tap_drops.load(Relaxed),
        },
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!("{v}");
    }
    let _ = std::io::stdout().flush();
}
