//! The data path of xferlab's FunctionFS function: ep0 events, and the IN
//! (write the pattern) and OUT (read and check it) endpoints, synchronous or
//! with Linux AIO keeping a queue of requests in flight.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use xferlab_core::usb::ffs::{self, Event};
use xferlab_core::usb::pattern::Checker;
use xferlab_core::usb::Pattern;

use super::cbr_io::CbrControl;
use xferlab_sys::aio::{Aio, Op};

/// Max packet size for the speed the UDC reports now.
fn max_packet_for(udc: &str) -> usize {
    let speed =
        fs::read_to_string(format!("/sys/class/udc/{udc}/current_speed")).unwrap_or_default();
    match speed.trim() {
        "super-speed" | "super-speed-plus" => 1024,
        "full-speed" | "low-speed" => 64,
        _ => 512,
    }
}

#[derive(Default)]
pub struct DirCounters {
    pub transfers: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: AtomicU64,
    pub pattern_errors: AtomicU64,
}

#[derive(Default)]
pub struct Shared {
    pub stop: AtomicBool,
    /// Max packet size while the function is enabled; 0 while it is not.
    pub max_packet: AtomicUsize,
    pub enables: AtomicU64,
    pub input: DirCounters,
    pub output: DirCounters,
}

/// ep0: follows ENABLE/DISABLE (the data threads wait for ENABLE and learn
/// the packet size from it), answers the fixed-rate device's vendor
/// requests when `cbr` is given, and stalls every other class/vendor request.
pub fn ep0_loop(mut ep0: File, s: &Shared, udc: &str, cbr: Option<&CbrControl>) {
    let mut buf = [0u8; ffs::EVENT_SIZE * 4];
    while !s.stop.load(Relaxed) {
        let tick = Timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        if !poll(&mut [PollFd::new(&ep0, PollFlags::IN)], Some(&tick)).is_ok_and(|n| n > 0) {
            continue;
        }
        let n = match ep0.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        for ev in ffs::parse_events(&buf[..n]) {
            match ev {
                Event::Enable => {
                    s.max_packet.store(max_packet_for(udc), Relaxed);
                    s.enables.fetch_add(1, Relaxed);
                }
                Event::Disable | Event::Unbind | Event::Suspend => s.max_packet.store(0, Relaxed),
                Event::Resume => s.max_packet.store(max_packet_for(udc), Relaxed),
                Event::Setup {
                    request_type,
                    request,
                    length,
                    ..
                } => {
                    // Vendor request to the interface (FunctionFS passes on
                    // only those addressed to this function).
                    let vendor_to_interface = request_type & 0x7f == 0x41;
                    if let Some(c) = cbr.filter(|_| vendor_to_interface) {
                        if c.setup(&mut ep0, s, request, length) {
                            continue;
                        }
                    }
                    // Stall: an I/O in the direction opposite to the request's.
                    let mut none = [0u8; 0];
                    if request_type & 0x80 != 0 {
                        let _ = ep0.read(&mut none);
                    } else {
                        let _ = ep0.write(&none);
                    }
                }
                _ => {}
            }
        }
    }
}

fn counters(s: &Shared, is_in: bool) -> &DirCounters {
    if is_in {
        &s.input
    } else {
        &s.output
    }
}

/// Waits until the host has enabled the function; the packet size, or None at stop.
pub fn wait_enabled(s: &Shared) -> Option<usize> {
    loop {
        if s.stop.load(Relaxed) {
            return None;
        }
        let mp = s.max_packet.load(Relaxed);
        if mp > 0 {
            return Some(mp);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn completed(s: &Shared, is_in: bool, checker: &Checker, data: &[u8]) {
    let c = counters(s, is_in);
    c.transfers.fetch_add(1, Relaxed);
    c.bytes.fetch_add(data.len() as u64, Relaxed);
    if !is_in && checker.check(data).is_err() {
        c.pattern_errors.fetch_add(1, Relaxed);
    }
}

/// Synchronous mode: one blocking write() (IN) or read() (OUT) at a time.
pub fn sync_loop(mut f: File, is_in: bool, size: usize, pattern: Pattern, s: &Shared) {
    let mut buf = vec![0u8; size];
    let mut filled_for = 0;
    let mut checker = Checker::new(pattern, 512);
    while let Some(mp) = wait_enabled(s) {
        if filled_for != mp {
            if is_in {
                pattern.fill(&mut buf, mp);
            }
            checker = Checker::new(pattern, mp);
            filled_for = mp;
        }
        let r = if is_in {
            f.write(&buf)
        } else {
            f.read(&mut buf)
        };
        match r {
            Ok(n) => completed(s, is_in, &checker, &buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                // ESHUTDOWN & co: the host went away or reset; wait for the next ENABLE.
                if !s.stop.load(Relaxed) {
                    counters(s, is_in).errors.fetch_add(1, Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}

/// AIO mode: `queue` requests in flight, each resubmitted as it completes.
pub fn aio_loop(f: File, is_in: bool, size: usize, queue: usize, pattern: Pattern, s: &Shared) {
    let Ok(mut aio) = Aio::new(queue) else {
        counters(s, is_in).errors.fetch_add(1, Relaxed);
        return;
    };
    // Each slot's buffer while it is ours (None: in flight, the kernel's),
    // and the max packet size its pattern was filled for.
    let mut bufs: Vec<Option<Vec<u8>>> = (0..queue).map(|_| Some(vec![0u8; size])).collect();
    let mut filled = vec![0; queue];
    let op = if is_in { Op::Write } else { Op::Read };
    let mut mp = 0;
    let mut checker = Checker::new(pattern, 512);
    'outer: while !s.stop.load(Relaxed) {
        let Some(now_mp) = wait_enabled(s) else { break };
        if now_mp != mp {
            checker = Checker::new(pattern, now_mp);
        }
        mp = now_mp;
        for i in 0..queue {
            let Some(mut b) = bufs[i].take() else {
                continue;
            };
            // A buffer gets the pattern for this max packet size before it
            // is sent (one in flight when the size changed, once it is back).
            if is_in && filled[i] != mp {
                pattern.fill(&mut b, mp);
                filled[i] = mp;
            }
            if let Err((_, b)) = aio.submit(i, &f, op, b, size) {
                bufs[i] = Some(b);
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
            let Some(c) = aio.completion(k) else {
                continue;
            };
            if c.res >= 0 {
                let len = (c.res as usize).min(size);
                completed(s, is_in, &checker, &c.buf[..len]);
            } else if !s.stop.load(Relaxed) {
                counters(s, is_in).errors.fetch_add(1, Relaxed);
            }
            bufs[c.slot] = Some(c.buf);
        }
    }
    // Dropping the context cancels and waits for whatever is still in
    // flight (the UDC is unbound by now, so that is quick); only then may
    // the buffers go (the context holds those in flight).
    drop(aio);
}
