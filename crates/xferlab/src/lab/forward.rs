//! The thin driver around one direction of the link model: read packets
//! from one TUN device, hand them to [`Link`], write them to the other
//! device when due. One thread per direction, preallocated buffers, no
//! allocation, lock or formatting per packet.

use std::fs::File;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use xferlab_core::link::packet::{self, VNET_HDR_LEN};
use xferlab_core::link::stats::DirectionReport;
use xferlab_core::link::{Arrival, Link, LinkConfig};

use super::pcap::PcapWriter;

/// Room for the largest GSO superpacket plus the virtio-net header.
pub const SUPERPACKET_SLOT: usize = 65_536 + 64;
/// Packets read per wake-up before departures get another look.
const READ_BURST: usize = 64;
/// How long a stopping forwarder keeps delivering what is in flight.
const FLUSH_LIMIT: Duration = Duration::from_secs(5);

pub struct Forwarder {
    pub input: File,
    pub output: File,
    pub config: LinkConfig,
    /// Buffers: packets held at once (queued + in the delay line).
    pub slots: usize,
    /// Bytes per buffer: the MTU plus the vnet header without offloads,
    /// [`SUPERPACKET_SLOT`] with them.
    pub slot_size: usize,
    pub pcap: Option<PcapWriter>,
    pub realtime: bool,
    /// Busy-wait this long before a departure instead of sleeping.
    pub spin_ns: u64,
    pub epoch: Instant,
    /// Wall-clock nanoseconds at `epoch`, for capture timestamps.
    pub epoch_unix_ns: u64,
    pub stop: Arc<AtomicBool>,
}

pub struct ForwardReport {
    pub emulator: DirectionReport,
    pub buffer_exhausted: u64,
    pub write_errors: u64,
    pub realtime: bool,
    /// Packets still in flight when the flush limit ran out.
    pub abandoned: u64,
    pub pcap_error: Option<String>,
}

fn now_ns(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

/// Timer slack 1 ns (default slack adds ~50 us to every wake-up) and,
/// when permitted, SCHED_FIFO. Returns whether SCHED_FIFO took.
fn tune_thread(realtime: bool) -> bool {
    crate::sys::affinity::tighten_timer_slack();
    if realtime {
        let p = libc::sched_param { sched_priority: 10 };
        // Plain libc: neither rustix nor nix wraps sched_setscheduler.
        // SAFETY: a valid sched_param for the calling thread (pid 0).
        return unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } == 0;
    }
    false
}

impl Forwarder {
    pub fn run(mut self) -> ForwardReport {
        let realtime = tune_thread(self.realtime);
        let mut link = Link::new(&self.config);
        let slot_size = self.slot_size;
        let mut pool = vec![0u8; self.slots * slot_size];
        let mut lens = vec![0usize; self.slots];
        let mut free: Vec<u32> = (0..self.slots as u32).rev().collect();
        let mut scratch = vec![0u8; slot_size];
        let (mut buffer_exhausted, mut write_errors) = (0u64, 0u64);
        // rustix's read/write/poll are the bare system calls (no libc
        // wrapper in between), so the per-packet path costs what it did.
        let input = self.input.as_fd();
        let output = self.output.as_fd();
        let mut flush_deadline: Option<u64> = None;
        loop {
            // A fresh clock per departure: the lateness recorded is that of
            // the write about to happen, including the writes before it.
            while let Some(d) = link.pop_due(now_ns(self.epoch)) {
                let t = d.token as usize;
                let buf = &pool[t * slot_size..t * slot_size + lens[t]];
                if rustix::io::write(output, buf).is_err() {
                    write_errors += 1;
                }
                if let Some(p) = self.pcap.as_mut() {
                    p.write(
                        self.epoch_unix_ns + now_ns(self.epoch),
                        &buf[VNET_HDR_LEN.min(buf.len())..],
                    );
                }
                if d.release {
                    free.push(d.token);
                }
            }
            let now = now_ns(self.epoch);
            if flush_deadline.is_none() && self.stop.load(Ordering::Relaxed) {
                flush_deadline = Some(now + FLUSH_LIMIT.as_nanos() as u64);
            }
            if let Some(deadline) = flush_deadline {
                if link.next_due().is_none() || now >= deadline {
                    break;
                }
            }
            let mut read_all = false;
            if flush_deadline.is_none() {
                for _ in 0..READ_BURST {
                    let Some(tok) = free.pop() else {
                        // Every buffer is in use: the packet is lost here.
                        if rustix::io::read(input, &mut scratch[..]).is_ok_and(|n| n > 0) {
                            buffer_exhausted += 1;
                            continue;
                        }
                        read_all = true;
                        break;
                    };
                    let t = tok as usize;
                    let slot = &mut pool[t * slot_size..(t + 1) * slot_size];
                    let n = match rustix::io::read(input, &mut slot[..]) {
                        Ok(n) if n > 0 => n,
                        _ => {
                            free.push(tok);
                            read_all = true;
                            break;
                        }
                    };
                    lens[t] = n;
                    let info = packet::inspect(&slot[..n]);
                    let now = now_ns(self.epoch);
                    match link.arrive(now, &info, tok) {
                        Arrival::Dropped(_) => free.push(tok),
                        Arrival::Queued { mark_ce } => {
                            if mark_ce {
                                packet::mark_ce(&mut slot[..n]);
                            }
                        }
                    }
                    // A departure falls due: serve it before reading on.
                    if link.next_due().is_some_and(|d| d <= now) {
                        break;
                    }
                }
            }
            if !read_all && flush_deadline.is_none() {
                continue; // more may be waiting: read again after departures
            }
            let now = now_ns(self.epoch);
            let wait = link
                .next_due()
                .map(|d| d.saturating_sub(now))
                .unwrap_or(50_000_000)
                .min(50_000_000);
            if wait == 0 {
                continue;
            }
            if wait <= self.spin_ns {
                // Close to a departure: a timer would wake us tens of
                // microseconds late; check the input and the clock instead.
                std::hint::spin_loop();
                continue;
            }
            let wait = wait - self.spin_ns;
            let events = if flush_deadline.is_none() {
                PollFlags::IN
            } else {
                PollFlags::empty()
            };
            let ts = Timespec {
                tv_sec: (wait / 1_000_000_000) as _,
                tv_nsec: (wait % 1_000_000_000) as _,
            };
            poll(&mut [PollFd::from_borrowed_fd(input, events)], Some(&ts)).ok();
        }
        let abandoned = link.drain().filter(|d| d.release).count() as u64;
        let pcap_error = self.pcap.take().and_then(|p| {
            let errors = p.errors;
            match p.finish() {
                Err(e) => Some(format!("{e:#}")),
                Ok(()) if errors > 0 => Some(format!("{errors} packets could not be captured")),
                Ok(()) => None,
            }
        });
        ForwardReport {
            emulator: link.report(),
            buffer_exhausted,
            write_errors,
            realtime,
            abandoned,
            pcap_error,
        }
    }
}
