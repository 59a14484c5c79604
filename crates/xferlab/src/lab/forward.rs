//! The thin driver around one direction of the link model: read packets
//! from the TUN devices of one side, pass them through the hops in series
//! (one [`Link`] each, a departure from one arriving at the next), and
//! write each to the other side's device its destination address names.
//! One thread per direction, preallocated buffers, no allocation, lock or
//! formatting per packet.

use std::fs::File;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xferlab_core::time::Time;

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

/// Each forwarder busy-waits at most 1/[`SPIN_SHARE_DIV`] of each window
/// of this length (counted from the first spin to the next sleep): with
/// no limit, at 100 Mbit/s (a departure every 120 us) a spin of ~100 us
/// never slept, and two spinning forwarders at SCHED_FIFO took both CPUs
/// of a 2-core machine from the hosts' threads (departure p99 ~100 us ->
/// several ms). A quarter each leaves them at least half the machine.
const SPIN_WINDOW_NS: u64 = 10_000_000;
const SPIN_SHARE_DIV: u64 = 4;

/// The busy-wait allowance: whether to spin now, and the time spun.
#[derive(Default)]
struct SpinBudget {
    window_start: u64,
    spun: u64,
    since: Option<u64>,
}

impl SpinBudget {
    /// Whether to spin at `now` (ns), counting a spin started earlier.
    fn spin(&mut self, now: u64) -> bool {
        if now >= self.window_start + SPIN_WINDOW_NS {
            self.window_start = now;
            self.spun = 0;
            if self.since.is_some() {
                self.since = Some(now);
            }
        }
        let ongoing = self.since.map_or(0, |s| now.saturating_sub(s));
        if self.spun + ongoing >= SPIN_WINDOW_NS / SPIN_SHARE_DIV {
            self.stop(now);
            return false;
        }
        self.since.get_or_insert(now);
        true
    }

    /// The thread goes to sleep at `now`.
    fn stop(&mut self, now: u64) {
        if let Some(s) = self.since.take() {
            self.spun += now.saturating_sub(s);
        }
    }
}

/// No output for this host id.
pub const NO_ROUTE: u8 = u8::MAX;

pub struct Forwarder {
    /// The sending side's TUN devices.
    pub inputs: Vec<File>,
    /// The receiving side's TUN devices.
    pub outputs: Vec<File>,
    /// Output index by the destination's host id (the last byte of its
    /// IPv4 or IPv6 address); used when there are several outputs.
    pub route: [u8; 256],
    /// The hops in series, the bottleneck first.
    pub hops: Vec<LinkConfig>,
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
    /// One per hop, in order.
    pub emulator: Vec<DirectionReport>,
    /// Packets for no host of the receiving side (e.g. IPv6 multicast
    /// housekeeping), not forwarded.
    pub unroutable: u64,
    pub buffer_exhausted: u64,
    pub write_errors: u64,
    pub realtime: bool,
    /// Packets still in flight when the flush limit ran out.
    pub abandoned: u64,
    pub pcap_error: Option<String>,
}

/// Now on the lab's clock: the core's time, its origin at the lab's
/// epoch (so a trace or schedule starts at its beginning).
fn lab_time(epoch: Instant) -> Time {
    Time::from_nanos(epoch.elapsed().as_nanos() as u64)
}

/// Timer slack 1 ns (default slack adds ~50 us to every wake-up) and,
/// when permitted, SCHED_FIFO. Returns whether SCHED_FIFO took.
pub(super) fn tune_thread(realtime: bool) -> bool {
    crate::sys::affinity::tighten_timer_slack();
    if realtime {
        return xferlab_sys::thread::set_fifo(10);
    }
    false
}

/// The destination's host id: the last byte of its address.
fn host_id(ip: &[u8]) -> Option<u8> {
    match ip.first()? >> 4 {
        4 => ip.get(19).copied(),
        6 => ip.get(39).copied(),
        _ => None,
    }
}

impl Forwarder {
    pub fn run(mut self) -> ForwardReport {
        let realtime = tune_thread(self.realtime);
        let mut hops: Vec<Link> = self.hops.iter().map(Link::new).collect();
        let last = hops.len() - 1;
        let slot_size = self.slot_size;
        let mut pool = vec![0u8; self.slots * slot_size];
        let mut lens = vec![0usize; self.slots];
        let mut infos = vec![packet::PacketInfo::default(); self.slots];
        // Copies of a buffer held across the hops (a duplicated packet is
        // one buffer in two places).
        let mut refs = vec![0u32; self.slots];
        let mut free: Vec<u32> = (0..self.slots as u32).rev().collect();
        let mut scratch = vec![0u8; slot_size];
        let (mut buffer_exhausted, mut write_errors, mut unroutable) = (0u64, 0u64, 0u64);
        // rustix's read/write/poll are the bare system calls (no libc
        // wrapper in between), so the per-packet path costs what it did.
        let inputs: Vec<_> = self.inputs.iter().map(|f| f.as_fd()).collect();
        let outputs: Vec<_> = self.outputs.iter().map(|f| f.as_fd()).collect();
        let mut poll_in: Vec<PollFd> = inputs
            .iter()
            .map(|&fd| PollFd::from_borrowed_fd(fd, PollFlags::IN))
            .collect();
        let mut poll_none: Vec<PollFd> = inputs
            .iter()
            .map(|&fd| PollFd::from_borrowed_fd(fd, PollFlags::empty()))
            .collect();
        let mut next_input = 0usize;
        let mut flush_deadline: Option<Time> = None;
        let next_due = |hops: &[Link]| hops.iter().filter_map(Link::next_due).min();
        let mut spin = SpinBudget::default();
        loop {
            // Departures hop by hop: one leaving hop k arrives at hop k+1
            // at the instant it was due to leave, not when this thread got
            // round to it (and may leave it at once when that hop is
            // unshaped). Arriving at "now" added each hop's wake-up
            // lateness to the next hop's schedule: over 3 hops the probe's
            // RTT on an idle path sat 1.1 ms above the configured 20 ms on
            // a machine whose timer wake-ups come ~30-120 us late. A
            // fresh clock per departure: the lateness recorded is that of
            // the write about to happen.
            for k in 0..=last {
                loop {
                    let now = lab_time(self.epoch);
                    let Some(d) = hops[k].pop_due(now) else {
                        break;
                    };
                    let t = d.token as usize;
                    if d.mark_ce && !d.dropped {
                        packet::mark_ce(&mut pool[t * slot_size..t * slot_size + lens[t]]);
                        infos[t].ecn = packet::ECN_CE;
                    }
                    if d.dropped {
                        // The queue discipline dropped it at dequeue.
                    } else if k < last {
                        let info = infos[t];
                        if let Arrival::Queued { mark_ce } =
                            hops[k + 1].arrive(d.due, &info, d.token)
                        {
                            refs[t] += 1;
                            if mark_ce {
                                packet::mark_ce(&mut pool[t * slot_size..t * slot_size + lens[t]]);
                                infos[t].ecn = packet::ECN_CE;
                            }
                        }
                    } else {
                        let buf = &pool[t * slot_size..t * slot_size + lens[t]];
                        let out = if outputs.len() == 1 {
                            0
                        } else {
                            host_id(&buf[VNET_HDR_LEN.min(buf.len())..])
                                .map_or(NO_ROUTE, |id| self.route[usize::from(id)])
                        };
                        match outputs.get(usize::from(out)) {
                            Some(&fd) => {
                                if rustix::io::write(fd, buf).is_err() {
                                    write_errors += 1;
                                }
                                if let Some(p) = self.pcap.as_mut() {
                                    p.write(
                                        self.epoch_unix_ns + lab_time(self.epoch).as_nanos(),
                                        &buf[VNET_HDR_LEN.min(buf.len())..],
                                    );
                                }
                            }
                            None => unroutable += 1,
                        }
                    }
                    if d.release {
                        refs[t] -= 1;
                        if refs[t] == 0 {
                            free.push(d.token);
                        }
                    }
                }
            }
            let now = lab_time(self.epoch);
            if flush_deadline.is_none() && self.stop.load(Ordering::Relaxed) {
                flush_deadline = Some(now + FLUSH_LIMIT);
            }
            if let Some(deadline) = flush_deadline {
                if next_due(&hops).is_none() || now >= deadline {
                    break;
                }
            }
            let mut read_all = false;
            if flush_deadline.is_none() {
                let mut idle = 0;
                let mut n_read = 0;
                while n_read < READ_BURST && idle < inputs.len() {
                    let input = inputs[next_input];
                    let Some(tok) = free.pop() else {
                        // Every buffer is in use: the packet is lost here.
                        if rustix::io::read(input, &mut scratch[..]).is_ok_and(|n| n > 0) {
                            buffer_exhausted += 1;
                            n_read += 1;
                            continue;
                        }
                        idle += 1;
                        next_input = (next_input + 1) % inputs.len();
                        continue;
                    };
                    let t = tok as usize;
                    let slot = &mut pool[t * slot_size..(t + 1) * slot_size];
                    let n = match rustix::io::read(input, &mut slot[..]) {
                        Ok(n) if n > 0 => n,
                        _ => {
                            free.push(tok);
                            idle += 1;
                            next_input = (next_input + 1) % inputs.len();
                            continue;
                        }
                    };
                    // Round robin: hosts' packets reach the shared queue in
                    // the order they were sent, not one host's ring first.
                    idle = 0;
                    n_read += 1;
                    next_input = (next_input + 1) % inputs.len();
                    lens[t] = n;
                    let info = packet::inspect(&slot[..n]);
                    let now = lab_time(self.epoch);
                    match hops[0].arrive(now, &info, tok) {
                        Arrival::Dropped(_) => free.push(tok),
                        Arrival::Queued { mark_ce } => {
                            refs[t] = 1;
                            infos[t] = info;
                            if mark_ce {
                                packet::mark_ce(&mut slot[..n]);
                                infos[t].ecn = packet::ECN_CE;
                            }
                        }
                    }
                    // A departure falls due: serve it before reading on.
                    if hops[0].next_due().is_some_and(|d| d <= now) {
                        break;
                    }
                }
                read_all = idle >= inputs.len();
            }
            if !read_all && flush_deadline.is_none() {
                continue; // more may be waiting: read again after departures
            }
            let now = lab_time(self.epoch);
            let wait = next_due(&hops)
                .map(|d| (d - now).as_nanos() as u64)
                .unwrap_or(50_000_000)
                .min(50_000_000);
            if wait == 0 {
                continue;
            }
            let wait = if wait <= self.spin_ns {
                // Close to a departure: a timer would wake us tens of
                // microseconds late; check the input and the clock instead,
                // while the budget lasts (then sleep, and be late).
                if spin.spin(now.as_nanos()) {
                    std::hint::spin_loop();
                    continue;
                }
                wait
            } else {
                wait - self.spin_ns
            };
            spin.stop(now.as_nanos());
            let ts = Timespec {
                tv_sec: (wait / 1_000_000_000) as _,
                tv_nsec: (wait % 1_000_000_000) as _,
            };
            let fds = if flush_deadline.is_none() {
                &mut poll_in
            } else {
                &mut poll_none
            };
            poll(fds, Some(&ts)).ok();
        }
        let mut abandoned = 0u64;
        for h in hops.iter_mut() {
            for d in h.drain() {
                if d.release {
                    let t = d.token as usize;
                    refs[t] -= 1;
                    abandoned += u64::from(refs[t] == 0);
                }
            }
        }
        let pcap_error = self.pcap.take().and_then(|p| {
            let errors = p.errors;
            match p.finish() {
                Err(e) => Some(format!("{e:#}")),
                Ok(()) if errors > 0 => Some(format!("{errors} packets could not be captured")),
                Ok(()) => None,
            }
        });
        ForwardReport {
            emulator: hops.iter().map(Link::report).collect(),
            unroutable,
            buffer_exhausted,
            write_errors,
            realtime,
            abandoned,
            pcap_error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spin_budget_is_a_quarter_of_each_window() {
        let mut b = SpinBudget::default();
        let q = SPIN_WINDOW_NS / SPIN_SHARE_DIV;
        // One long spin: allowed until a quarter of the window is used.
        assert!(b.spin(0));
        assert!(b.spin(q - 1));
        assert!(!b.spin(q), "the quarter is used");
        assert!(!b.spin(q + 1000));
        // The next window starts afresh.
        assert!(b.spin(SPIN_WINDOW_NS));
        b.stop(SPIN_WINDOW_NS + 1000);
        // Short spins add up; sleeping between them does not count.
        for k in 0..q / 1000 - 1 {
            let t = SPIN_WINDOW_NS + 10_000 + k * 2000;
            assert!(b.spin(t), "spin {k}");
            b.stop(t + 1000);
        }
        assert_eq!(b.spun, q);
        assert!(!b.spin(2 * SPIN_WINDOW_NS - 1), "{} ns spun", b.spun);
    }
}
