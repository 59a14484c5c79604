//! The datagram data path: one thread per UDP flow.
//!
//! Senders follow the sans-IO [`Pacer`]'s absolute schedule and hand the
//! kernel up to `--batch` datagrams per call (sendmmsg, or one UDP_SEGMENT
//! buffer with `--gso`). Receivers take up to `--batch` per call (recvmmsg,
//! or UDP_GRO buffers split here), stamp each datagram with the kernel's
//! receive time from the control messages (paced flows; unpaced ones with
//! the call's clock, see [`stamp_arrivals`]), read the socket's drop
//! counter when they see new loss ([`socket_drops`]), and feed the
//! sans-IO [`RecvStats`]. Buffers and
//! message headers are built once per flow; the loop allocates nothing and
//! publishes its counters with relaxed atomic stores once per call.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::sys::clock;
use xferlab_core::time::Time;

use xferlab_core::datagram::{read_header, write_header, Pacer, RecvStats, HEADER_LEN};
use xferlab_core::iperf3::UdpHeader;
use xferlab_core::proto::wire::{AttachReply, MAGIC};
use xferlab_core::result::FlowEnd;
use xferlab_core::spec::{
    limits::{MAX_GSO_SEGMENTS, OLD_GSO_SEGMENTS},
    Knobs, RxStamps,
};
use xferlab_sys::mmsg;
pub(super) use xferlab_sys::mmsg::RecvBatch;
use xferlab_sys::sockopt;

use super::flow::{FlowOutcome, FlowShared, SideFlags, POLL_FLAGS};

/// Sequence number of the end-of-flow marker; its time field carries the
/// number of datagrams sent.
pub(super) const END_MARKER: u64 = u64::MAX;
/// Copies of the end marker (it may meet a full receive buffer).
pub(super) const END_MARKER_COPIES: u32 = 3;
/// A stopped receiver that saw no end marker gives up after this much
/// silence.
const QUIET_AFTER_STOP: Duration = Duration::from_millis(250);
/// A paced sender sleeps until about this much sending is due, then
/// sends it as one burst (at most `--batch` datagrams). 50 us bursts cost
/// a core in wake-ups at 650 Mbit/s and starved the receiver on 2 vCPUs;
/// 200 us is still five times finer than iperf3's 1 ms pacing timer.
const BURST: Duration = Duration::from_micros(200);
/// Waits shorter than this are spun rather than slept.
const SPIN_BELOW: Duration = Duration::from_micros(10);
/// Largest buffer the kernel fills with one GRO receive.
const GRO_BUFFER: usize = 65_536;
/// GRO buffers taken per recvmmsg call: one. A GRO buffer already holds
/// up to 64 KiB (46 datagrams of 1400 B), so more per call saves few
/// system calls but spreads the copy over more memory than the caches
/// hold. Measured (loopback, `stream -u -b 0 -l 1400 --gso -t 2`, AMD
/// EPYC, L1d 32K, L2 512K), received Gbit/s in two runs each: 1 buffer
/// 38.8 / 36.8, 2 buffers 31.2 / 27.8, 32 buffers (the old `--batch`
/// default, 2 MiB) 32.1 / 20.7. A call then cannot say whether it
/// emptied the queue, so the receiver looks again without waiting and
/// naps when that finds nothing ([`GRO_NAP_BUFFERS`]). On an Intel Xeon
/// (2 MiB L2; `bench/udp-constants --gro`, unlimited at 1400 B, medians
/// of 5 interleaved 2 s rounds, 2026-11-29) 1, 2 and 4 buffers per call
/// received 63.9, 67.7 and 66.4 Gbit/s, inside the rounds' spread (57-72
/// for one variant): one buffer wins on Zen 3 and costs nothing clear
/// here.
const GRO_MESSAGES: u32 = 1;

/// GRO buffers a receiver that found its queue empty naps for (see
/// [`Nap`]), at the measured arrival rate. Without naps it blocks at once
/// and the sender pays for every wake-up: perf of a `--gso` sender at
/// 1400 B showed 13.8 % in the wake-up (`sock_def_readable`), where
/// iperf3 3.21 `--gsro`, whose receiver spins, showed none. Received
/// Gbit/s (loopback, `stream -u -b 0 --gso -t 2`, three interleaved
/// runs, the runs with sender and receiver on different CPUs): at 1400 B
/// no nap 53.9, 1 buffer 56.1 / 58.3, 4 buffers 62.6 / 63.4, 8 buffers
/// 60.3 / 61.3; at 64 B no nap 14.9-15.4, 4 buffers 16.7-16.8, 8
/// buffers 16.6-16.7. Loss stayed below 0.6 % in every run. Four
/// buffers hold at most 256 KiB, well inside the receive buffer a GRO
/// receiver gets ([`size_receive_buffer`]). On an Intel Xeon (same bench
/// and rounds as [`GRO_MESSAGES`]) naps of 1, 2, 4, 8 and 16 buffers gave
/// 64.9, 67.3, 62.5, 63.3 and 63.2 Gbit/s, all inside the rounds' spread,
/// loss 0.7-2.6 %: no size wins there, so Zen 3's stays.
const GRO_NAP_BUFFERS: usize = 4;

/// Environment variables that replace [`GRO_MESSAGES`] and
/// [`GRO_NAP_BUFFERS`] (1-64; anything else is ignored): how
/// `bench/udp-constants` measures them on another CPU without a build of
/// its own. Not a user's knob: the result does not record them.
const GRO_MESSAGES_VAR: &str = "XFERLAB_GRO_MESSAGES";
const GRO_NAP_BUFFERS_VAR: &str = "XFERLAB_GRO_NAP_BUFFERS";

/// `var`'s value when it is a whole number from 1 to 64, else `default`;
/// read once per receiving flow.
fn tuned(var: &str, default: usize) -> usize {
    tuned_value(std::env::var(var).ok().as_deref(), default)
}

fn tuned_value(value: Option<&str>, default: usize) -> usize {
    value
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1..=64).contains(n))
        .unwrap_or(default)
}

/// Which header the datagrams carry: xferlab's own (sequence from 0, send
/// time in ns, an end marker), or a stock iperf3 peer's (sequence from 1,
/// seconds + microseconds, no end marker: the control connection ends
/// the test).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DatagramWire {
    #[default]
    Xferlab,
    Iperf3(UdpHeader),
}

impl DatagramWire {
    fn header_len(self) -> usize {
        match self {
            DatagramWire::Xferlab => HEADER_LEN,
            DatagramWire::Iperf3(h) => h.size(),
        }
    }

    /// Writes the header of 0-based datagram `seq`.
    fn write(self, buf: &mut [u8], seq: u64, send_ns: u64) {
        match self {
            DatagramWire::Xferlab => write_header(buf, seq, send_ns),
            DatagramWire::Iperf3(h) => h.write(buf, seq + 1, send_ns),
        }
    }

    /// `(0-based seq, send_ns)`; None for datagrams too short to count.
    fn read(self, buf: &[u8]) -> Option<(u64, u64)> {
        match self {
            DatagramWire::Xferlab => read_header(buf),
            DatagramWire::Iperf3(h) => h.read(buf).map(|(seq, ns)| (seq.saturating_sub(1), ns)),
        }
    }
}

/// Sends `size`-byte datagrams at `knobs.rate` (or unpaced) until stopped
/// or `quota` bytes (rounded up to whole datagrams) are sent, then sends
/// the end marker.
pub fn send(
    sock: &UdpSocket,
    knobs: &Knobs,
    quota: Option<u64>,
    shared: &FlowShared,
    flags: &SideFlags,
    wire: DatagramWire,
) -> FlowOutcome {
    sock.set_write_timeout(Some(POLL_FLAGS)).ok();
    crate::sys::affinity::tighten_timer_slack();
    let size = knobs.size as usize;
    let limit = quota.map(|q| q.div_ceil(size as u64));
    let per_call = if knobs.gso {
        knobs
            .batch
            .min(MAX_GSO_SEGMENTS)
            .min((65_507 / size) as u32)
            .max(1)
    } else {
        knobs.batch
    };
    let mut out = SendBatch::new(sock.as_fd(), size, per_call as usize, knobs.gso, wire);
    let start = clock::now();
    let rate = knobs.rate.unwrap_or(0);
    let mut pacer = Pacer::new(rate, size, per_call, start);
    let burst = burst_len(rate, size, per_call);
    let mut seq: u64 = 0;
    let end = loop {
        if flags.abort.load(Ordering::Relaxed) {
            break super::flow::aborted();
        }
        if flags.stop.load(Ordering::Relaxed) || limit.is_some_and(|l| seq >= l) {
            break FlowEnd::Completed;
        }
        let now = clock::now();
        let mut due = pacer.due(now);
        if due < burst && rate > 0 {
            // Gather a burst: sleep until `burst` datagrams are due (the
            // oldest unsent one is due at `next`), then look again, so the
            // whole burst goes out in one call.
            if let Some(next) = pacer.next_due() {
                let wake =
                    next + Duration::from_nanos(interval_ns(rate, size) * u64::from(burst - 1));
                if wake > now {
                    pause(wake);
                    continue;
                }
            }
        }
        if due == 0 {
            continue;
        }
        if let Some(l) = limit {
            due = due.min((l - seq).min(u64::from(u32::MAX)) as u32);
        }
        // The header carries the send time as ns since the flow started.
        let stamp = (now - start).as_nanos() as u64;
        match out.send(seq, stamp, due as usize) {
            Ok(n) => {
                pacer.sent(n as u32, now);
                seq += n as u64;
                shared.bytes.store(seq * size as u64, Ordering::Relaxed);
                shared.udp.packets.store(seq, Ordering::Relaxed);
                shared.udp.late.store(pacer.late_count(), Ordering::Relaxed);
                shared
                    .udp
                    .lateness_max_ns
                    .fetch_max(pacer.take_max_lateness(), Ordering::Relaxed);
            }
            Err(e) if transient(&e) => std::thread::yield_now(),
            Err(e) => break FlowEnd::Aborted(describe(&e, "sending")),
        }
    };
    let at = clock::now();
    if end == FlowEnd::Completed && wire == DatagramWire::Xferlab {
        for _ in 0..END_MARKER_COPIES {
            let mut marker = [0u8; HEADER_LEN];
            write_header(&mut marker, END_MARKER, seq);
            sock.send(&marker).ok();
        }
    }
    FlowOutcome {
        end,
        at,
        bytes: seq * size as u64,
        note: None,
    }
}

/// The receive buffer of a UDP receiver given no `-w`: 4 MiB (the kernel doubles it), SO_RCVBUFFORCE where we
/// may, else as much as net.core.rmem_max allows. The default 208 KiB
/// holds about three 64 KiB GRO buffers, or 69 datagrams of 1400 B (1.1
/// ms at 700 Mbit/s), so a receiver woken a little late drops whole
/// bursts: what the run then measures is the host's scheduling, not the
/// path. Measured (loopback, `stream -u -l 1400 --gso -t 2`, two runs
/// each, loss %): paced at 20 Gbit/s 0.33 / 0.29 with the default, 0.77
/// / 0.13 with `-w 1M`, 0.09 / 0.01 with 2M, 0.00 / 0.00 with 4M;
/// unlimited 1.44 / 1.01 with the default, 0.65 / 0.54 with 4M. Without
/// GSO, on a Firecracker guest whose host took 4-33 % of the CPU time in
/// bursts of milliseconds (2026-11-27; `stream -u -b 700M -l 1400 -t 2`,
/// five interleaved pairs): 1.5-27 % lost with the default, 0.000 % in
/// every run with 4M. On an Intel Xeon (2 MiB L2; `bench/udp-constants`,
/// unlimited `--gso` at 1400 B, medians of 5 interleaved 2 s rounds,
/// 2026-11-29; `-w` sets the send buffer too) loss was 9.9 % with 212K,
/// 2.8 % with 1M, 2.4 % with 4M, 1.7 % with 8M (maxima 16.6, 3.7, 3.8,
/// 3.1 %): the plateau starts near 1M on both CPUs, and 4M stays inside
/// it. The read-back value is the result's `socket.rcvbuf`.
pub(super) fn size_receive_buffer(sock: &UdpSocket, knobs: &Knobs) {
    if knobs.buffer.is_some() {
        return;
    }
    let fd = sock.as_fd();
    if !set_int_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RCVBUF) {
        set_int_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, RCVBUF);
    }
}

const RCVBUF: libc::c_int = 4 << 20;

/// Asks the kernel to stamp the arrival of every datagram on a UDP
/// receiver's socket where [`xferlab_core::transport::udp::rx_stamps`]
/// says so (a paced flow, or `--rx-stamps kernel`); returns where
/// [`receive`] will take arrival times from (a kernel that refused the
/// stamp leaves the call's clock).
pub(super) fn stamp_arrivals(sock: &UdpSocket, knobs: &Knobs) -> RxStamps {
    match xferlab_core::transport::udp::rx_stamps(knobs) {
        RxStamps::Kernel
            if set_int_opt(sock.as_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1) =>
        {
            RxStamps::Kernel
        }
        RxStamps::Kernel => {
            tracing::warn!("SO_TIMESTAMPNS refused: arrival times are the receive call's clock");
            RxStamps::Read
        }
        RxStamps::Read => RxStamps::Read,
    }
}

/// Receives until the end marker, silence after the test stopped, or the
/// side cuts its receivers (iperf3 peers send no end marker).
pub fn receive(
    sock: &UdpSocket,
    knobs: &Knobs,
    shared: &FlowShared,
    flags: &SideFlags,
    wire: DatagramWire,
) -> FlowOutcome {
    sock.set_read_timeout(Some(POLL_FLAGS)).ok();
    let fd = sock.as_fd();
    let gro = knobs.gso && set_int_opt(fd, libc::SOL_UDP, libc::UDP_GRO, 1);
    let buf_len = if gro {
        GRO_BUFFER
    } else {
        (knobs.size as usize).max(wire.header_len())
    };
    let per_call = if gro {
        tuned(GRO_MESSAGES_VAR, GRO_MESSAGES as usize)
    } else {
        knobs.batch as usize
    };
    let mut batch = RecvBatch::new(buf_len, per_call);
    // On a connection-oriented datagram socket (a kernel's connected
    // datagram protocol) an empty read is the peer's close: the end, even
    // if its end marker was lost.
    // A UDP socket's empty datagram stays a datagram.
    let empty_ends = socket2::SockRef::from(sock)
        .r#type()
        .is_ok_and(|t| t != socket2::Type::DGRAM);
    let rcvbuf = socket2::SockRef::from(sock).recv_buffer_size().unwrap_or(0);
    let nap_after = if gro {
        tuned(GRO_NAP_BUFFERS_VAR, GRO_NAP_BUFFERS)
    } else {
        per_call
    };
    let mut nap = Nap::new(nap_after, rcvbuf / truesize(buf_len));
    // A GRO receiver takes one buffer per call, so a short call cannot
    // tell it the queue is empty: after each buffer it looks again
    // without waiting, and naps when that finds nothing.
    let mut probing = false;
    crate::sys::affinity::tighten_timer_slack();
    let mut messages: u64 = 0;
    let mut stats = RecvStats::new();
    let mut bytes: u64 = 0;
    let mut drops = HostDrops::default();
    let mut lost_at_count = 0;
    let mut last_heard = clock::now();
    let end = loop {
        let got = if probing {
            batch.recv_queued(fd)
        } else {
            batch.recv(fd)
        };
        match got {
            Ok(n) => {
                last_heard = clock::now();
                // One clock read per call, for datagrams without a kernel
                // time stamp (the socket was not asked for one: see
                // stamp_arrivals).
                let fallback_ns = realtime_ns();
                let mut ended = false;
                for i in 0..n {
                    let m = batch.message(i);
                    if empty_ends && m.data.is_empty() {
                        ended = true;
                        break;
                    }
                    let recv_ns = m.stamp_ns.unwrap_or(fallback_ns);
                    let seg = m.segment.filter(|&s| s > 0).unwrap_or(m.data.len()).max(1);
                    drops.buffer(m.data.len().div_ceil(seg));
                    for d in m.data.chunks(seg) {
                        if wire == DatagramWire::Xferlab && d.starts_with(&MAGIC) {
                            // A repeated attach whose ack was lost: ack again.
                            sock.send(&[AttachReply::Ok as u8]).ok();
                            continue;
                        }
                        match wire.read(d) {
                            Some((END_MARKER, _)) if wire == DatagramWire::Xferlab => ended = true,
                            Some((seq, send_ns)) => {
                                bytes += d.len() as u64;
                                stats.on_datagram(seq, send_ns, recv_ns);
                            }
                            None => {}
                        }
                    }
                }
                publish(&mut stats, bytes, shared);
                // A host drop leaves a gap, so the socket's counter is
                // read only when the loss grew.
                let lost = stats.counters().lost;
                if lost > lost_at_count {
                    lost_at_count = lost;
                    drops.count(socket_drops(fd));
                    publish_drops(&drops, gro, lost, shared);
                }
                if ended || flags.cut.load(Ordering::Relaxed) {
                    break FlowEnd::Completed;
                }
                messages += n as u64;
                nap.observe(last_heard, messages);
                if gro {
                    probing = true;
                } else if n < per_call {
                    nap.take();
                }
            }
            Err(e) if probing && e.kind() == io::ErrorKind::WouldBlock => {
                probing = false;
                nap.take();
            }
            Err(e) if transient(&e) => {
                if flags.abort.load(Ordering::Relaxed) {
                    break super::flow::aborted();
                }
                if flags.cut.load(Ordering::Relaxed)
                    || (flags.stop.load(Ordering::Relaxed)
                        && clock::since(last_heard) >= QUIET_AFTER_STOP)
                {
                    break FlowEnd::Completed;
                }
            }
            Err(e) => break FlowEnd::Aborted(describe(&e, "receiving")),
        }
    };
    publish(&mut stats, bytes, shared);
    // Drops after the last gap seen: the summary counts those datagrams
    // lost (sent - received), so they are the host's too.
    drops.count(socket_drops(fd));
    publish_drops(&drops, gro, stats.counters().lost, shared);
    FlowOutcome {
        end,
        at: last_heard,
        bytes,
        note: None,
    }
}

/// Wake-up batching for a datagram receiver, what SO_RCVLOWAT does for
/// TCP (UDP sockets ignore it). A receiver that blocks again as soon as
/// its queue is empty is woken by every datagram that finds it asleep:
/// at 64 B unpaced, perf showed 32 % of the receiver in
/// finish_task_switch and 12 % in the return to user space, recvmmsg
/// returning a handful of datagrams per call, and the sender spending 10 %
/// of its time waking it. So after a call that emptied the queue (fewer
/// than a batch, or with GRO a look that found nothing) the receiver
/// sleeps for about the time a batch takes to arrive at the measured
/// rate, and the sender wakes no one: no waiter. The sleep never
/// exceeds [`NAP_MAX`] nor the time it takes to fill a quarter of the
/// receive buffer less the worst recent oversleep, so a nap cannot cause
/// a drop even where timer wake-ups come late. That last term is
/// measured, not assumed: on a Firecracker guest (2026-11-27) 500 us
/// sleeps overshot by p50 58-126 us and p99 115-1600 us, and 1400-byte
/// datagrams paced at 740 Mbit/s (a quarter of the default buffer fills
/// in 260 us there) lost 1.5 % where iperf3, which blocks, lost 0.08 %.
/// Learning the oversleep took the median loss at 700 Mbit/s with the
/// default buffer from 1.9 % to 0.9 % (five interleaved pairs; iperf3
/// 0.6 %); the 4 MiB default buffer ([`size_receive_buffer`]) took it
/// to 0.
struct Nap {
    /// Messages to let arrive before the next call.
    batch: usize,
    /// Messages the receive buffer holds (estimated from truesize).
    capacity: usize,
    mark: Option<(Time, u64)>,
    /// Messages per second, measured over the last [`RATE_WINDOW`].
    rate: f64,
    /// The worst recent oversleep of a nap, forgotten by 1/64 per
    /// [`RATE_WINDOW`] (halved in about 90 ms), so one stall does not
    /// end napping for the rest of the flow.
    late: Duration,
}

/// Longest nap: far below the 100 ms flag poll, and short enough that a
/// flow ending is seen at once.
const NAP_MAX: Duration = Duration::from_millis(1);
/// Shorter naps are not worth a timer.
const NAP_MIN: Duration = Duration::from_micros(5);
/// How often the arrival rate is re-measured.
const RATE_WINDOW: Duration = Duration::from_millis(2);

impl Nap {
    fn new(batch: usize, capacity: usize) -> Self {
        Nap {
            batch,
            capacity,
            mark: None,
            rate: 0.0,
            late: Duration::ZERO,
        }
    }

    /// Counts a call that brought the total to `total` messages at `now`.
    fn observe(&mut self, now: Time, total: u64) {
        match self.mark {
            None => self.mark = Some((now, total)),
            Some((t, count)) => {
                let dt = now.duration_since(t);
                if dt >= RATE_WINDOW {
                    self.rate = (total - count) as f64 / dt.as_secs_f64();
                    self.mark = Some((now, total));
                    self.late -= self.late / 64;
                }
            }
        }
    }

    /// A nap of `asked` that lasted `took`.
    fn woke(&mut self, asked: Duration, took: Duration) {
        self.late = self.late.max(took.saturating_sub(asked));
    }

    /// How long to sleep once the queue was found empty, if at all.
    fn length(&self) -> Option<Duration> {
        if self.batch <= 1 || self.rate <= 0.0 {
            return None;
        }
        let batch = self.batch as f64 / self.rate;
        let room = (self.capacity / 4) as f64 / self.rate - self.late.as_secs_f64();
        let nap = Duration::from_secs_f64(batch.min(room).max(0.0)).min(NAP_MAX);
        (nap >= NAP_MIN).then_some(nap)
    }

    /// Sleeps for [`Nap::length`], if any, and learns how late it woke.
    fn take(&mut self) {
        if let Some(d) = self.length() {
            let t0 = clock::now();
            std::thread::sleep(d);
            self.woke(d, clock::now().duration_since(t0));
        }
    }
}

/// What one received datagram of `len` bytes costs the receive buffer
/// (skb truesize): its data rounded up to the allocation bucket, plus the
/// sk_buff and skb_shared_info (about 576 B on x86-64), rounded up.
fn truesize(len: usize) -> usize {
    len.next_power_of_two().max(64) + 1024
}

/// The receiving socket's drop counter, read with SO_MEMINFO: what
/// SO_RXQ_OVFL would attach to every datagram, for one system call per
/// receive call that saw new loss. SO_RXQ_OVFL is not free: the kernel
/// then reads the counter for every datagram it queues (on loopback, on
/// the sender's CPU) and the receiver copies it out with each one.
/// Measured (Intel Xeon, 2 vCPUs, Linux 6.18, 2026-11-28, 64-byte
/// datagrams, five interleaved runs of `examples/udp_floor.rs 64 1.5`
/// against `64 1.5 rxq-ovfl`): 1.15-1.26M datagrams/s without it,
/// 1.09-1.16M with it. In xferlab (a build with it against one without,
/// `stream -u -b 0 -l 64 -t 2 -A 0,1`, six pairs) it was 1.11-1.17M
/// against 1.23-1.26M. None if the kernel refuses (before Linux 4.6).
fn socket_drops(fd: BorrowedFd<'_>) -> Option<u32> {
    sockopt::meminfo_drops(fd)
}

/// Publishes the host drops counted so far; with GRO the estimate never
/// claims more than the loss actually seen (`lost`).
fn publish_drops(drops: &HostDrops, gro: bool, lost: u64, shared: &FlowShared) {
    let dropped = drops.datagrams_dropped(gro);
    let dropped = if gro { dropped.min(lost) } else { dropped };
    shared.udp.host_drops.store(dropped, Ordering::Relaxed);
}

/// The receiving socket's drop counter counts socket buffers, not
/// datagrams: with UDP_GRO one dropped buffer held several datagrams
/// (measured here: 17730 drops, exactly 32 x that many datagrams lost
/// with --batch 32). With GRO the count is scaled by the largest number
/// of datagrams seen in one buffer: the buffers that overflow a socket
/// are the big catch-up bursts, so the mean undercounts. The caller caps
/// the estimate at the loss actually seen. Exact without GRO.
#[derive(Default)]
pub(super) struct HostDrops {
    kernel_count: u32,
    max_per_buffer: u64,
}

impl HostDrops {
    /// Takes the socket's drop count, when the kernel gave one.
    pub(super) fn count(&mut self, count: Option<u32>) {
        if let Some(c) = count {
            self.kernel_count = c;
        }
    }

    /// Takes how many datagrams one received buffer held.
    pub(super) fn buffer(&mut self, datagrams: usize) {
        self.max_per_buffer = self.max_per_buffer.max(datagrams as u64);
    }

    pub(super) fn datagrams_dropped(&self, gro: bool) -> u64 {
        let dropped = u64::from(self.kernel_count);
        if gro {
            dropped * self.max_per_buffer.max(1)
        } else {
            dropped
        }
    }
}

/// A receiver's datagram counters, for the interval meters (every
/// datagram transport's receivers).
pub(crate) fn publish(stats: &mut RecvStats, bytes: u64, shared: &FlowShared) {
    let c = stats.counters();
    let u = &shared.udp;
    shared.bytes.store(bytes, Ordering::Relaxed);
    u.packets.store(c.received, Ordering::Relaxed);
    u.lost.store(c.lost, Ordering::Relaxed);
    u.out_of_order.store(c.out_of_order, Ordering::Relaxed);
    u.duplicates.store(c.duplicates, Ordering::Relaxed);
    u.jitter_ns.store(c.jitter_ns.to_bits(), Ordering::Relaxed);
    u.owd_excess_sum_ns.store(
        c.owd_excess_sum_ns.min(u128::from(u64::MAX)) as u64,
        Ordering::Relaxed,
    );
    u.owd_excess_max_ns
        .fetch_max(stats.take_owd_max(), Ordering::Relaxed);
}

fn interval_ns(rate: u64, size: usize) -> u64 {
    if rate == 0 {
        0
    } else {
        (size as u128 * 8 * 1_000_000_000 / u128::from(rate)) as u64
    }
}

/// Datagrams to gather before waking for a paced send: about [`BURST`]
/// worth, at least 1, at most one call's worth.
fn burst_len(rate: u64, size: usize, per_call: u32) -> u32 {
    let iv = interval_ns(rate, size);
    if iv == 0 {
        return per_call;
    }
    ((BURST.as_nanos() as u64 / iv) as u32).clamp(1, per_call)
}

/// Sleeps (or spins, for very short waits) until `target`.
fn pause(target: Time) {
    let now = clock::now();
    if target <= now {
        return;
    }
    let wait = (target - now).min(POLL_FLAGS);
    if wait < SPIN_BELOW {
        while clock::now() < target {
            std::hint::spin_loop();
        }
    } else {
        std::thread::sleep(wait);
    }
}

pub(super) fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

pub(super) fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    ) || e.raw_os_error() == Some(libc::ENOBUFS)
}

pub(super) fn describe(e: &io::Error, what: &str) -> String {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => {
            format!("the peer's socket is gone (ICMP port unreachable) while {what}")
        }
        Some(libc::EMSGSIZE) => format!(
            "datagram too large for the path while {what}: lower -l or drop --dont-fragment"
        ),
        _ => format!("error while {what}: {e}"),
    }
}

/// Sets an int socket option; false when the kernel refuses it. Through
/// xferlab-sys: neither socket2 nor rustix names the options it sets
/// (SO_RXQ_OVFL, SO_TIMESTAMPNS, UDP_GRO, UDP_SEGMENT).
pub fn set_int_opt(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    opt: libc::c_int,
    value: libc::c_int,
) -> bool {
    sockopt::set_int(fd, level, opt, value).is_ok()
}

/// Datagram buffers and message headers for one sending flow, built once
/// ([`xferlab_sys::mmsg`]: one system call per batch, no allocation).
pub(super) struct SendBatch<'a> {
    fd: BorrowedFd<'a>,
    size: usize,
    gso: bool,
    wire: DatagramWire,
    batch: mmsg::SendBatch,
}

impl<'a> SendBatch<'a> {
    pub(super) fn new(
        fd: BorrowedFd<'a>,
        size: usize,
        per_call: usize,
        gso: bool,
        wire: DatagramWire,
    ) -> Self {
        if gso {
            set_int_opt(fd, libc::SOL_UDP, libc::UDP_SEGMENT, size as libc::c_int);
        }
        // A repeating pattern rather than zeros (see the TCP sender).
        let batch = mmsg::SendBatch::new(size, per_call, |i| (i % 251) as u8);
        SendBatch {
            fd,
            size,
            gso,
            wire,
            batch,
        }
    }

    /// Writes headers for datagrams `seq..seq+n` and sends them; returns how
    /// many went out.
    pub(super) fn send(&mut self, seq: u64, now_ns: u64, n: usize) -> io::Result<usize> {
        let n = n.min(self.batch.capacity());
        for i in 0..n {
            self.wire
                .write(self.batch.from_datagram(i), seq + i as u64, now_ns);
        }
        if self.gso {
            // One buffer; the kernel cuts it into `size`-byte datagrams.
            return match self.batch.send_segmented(self.fd, n) {
                Err(e)
                    if e.raw_os_error() == Some(libc::EINVAL) && n > OLD_GSO_SEGMENTS as usize =>
                {
                    // A kernel from before UDP_MAX_SEGMENTS rose to 128:
                    // from now on at most 64 per send (the caller sends
                    // the rest, as after any partial send).
                    tracing::debug!(n, "UDP_SEGMENT send refused; 64 segments per send");
                    self.batch.truncate(OLD_GSO_SEGMENTS as usize);
                    self.send(seq, now_ns, n)
                }
                Err(e) => Err(e),
                Ok(r) => Ok(r / self.size),
            };
        }
        self.batch.send(self.fd, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bench_override_is_a_whole_number_from_1_to_64_or_ignored() {
        assert_eq!(tuned_value(None, 4), 4);
        assert_eq!(tuned_value(Some(" 8 "), 4), 8);
        assert_eq!(tuned_value(Some("64"), 4), 64);
        for bad in ["0", "65", "-1", "two", ""] {
            assert_eq!(tuned_value(Some(bad), 4), 4, "{bad}");
        }
    }

    /// A nap lasts as long as the batch takes to arrive at the measured
    /// rate, but never past a quarter of the receive buffer nor NAP_MAX,
    /// and there is none before a rate is known or for one-message
    /// batches.
    #[test]
    fn a_nap_waits_for_a_batch_within_the_buffer() {
        let t0 = Time::ZERO;
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let mut nap = Nap::new(4, 1000);
        assert_eq!(nap.length(), None, "no rate yet");
        nap.observe(t0, 0);
        nap.observe(ms(2), 200); // 100 000 messages/s
        assert_eq!(nap.length(), Some(Duration::from_micros(40)));
        // A small buffer: a quarter of 8 messages is 2, 20 us.
        let mut small = Nap::new(4, 8);
        small.observe(t0, 0);
        small.observe(ms(2), 200);
        assert_eq!(small.length(), Some(Duration::from_micros(20)));
        // A slow flow: capped at NAP_MAX.
        let mut slow = Nap::new(32, 1000);
        slow.observe(t0, 0);
        slow.observe(ms(2), 2);
        assert_eq!(slow.length(), Some(NAP_MAX));
        // A buffer that holds under four messages: no nap at all.
        let mut tiny = Nap::new(4, 3);
        tiny.observe(t0, 0);
        tiny.observe(ms(2), 200);
        assert_eq!(tiny.length(), None);
        let mut one = Nap::new(1, 1000);
        one.observe(t0, 0);
        one.observe(ms(2), 200);
        assert_eq!(one.length(), None);
    }

    /// A nap that overslept shortens the next ones by as much, so the
    /// buffer still holds what arrives while the timer is late; with
    /// wake-ups later than the buffer's slack there is no nap until the
    /// oversleep is forgotten.
    #[test]
    fn late_wake_ups_shorten_the_naps() {
        let t0 = Time::ZERO;
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let us = Duration::from_micros;
        // 100 000 messages/s, 32 a batch (320 us), a quarter of the
        // buffer 25 messages (250 us).
        let mut nap = Nap::new(32, 100);
        nap.observe(t0, 0);
        nap.observe(ms(2), 200);
        assert_eq!(nap.length(), Some(us(250)));
        nap.woke(us(250), us(350));
        assert_eq!(nap.length(), Some(us(150)), "100 us late: 100 us shorter");
        nap.woke(us(150), us(1150));
        assert_eq!(nap.length(), None, "1 ms late: the buffer cannot cover it");
        // Forgotten window by window (1/64 per 2 ms): napping comes back.
        let mut t = 2;
        while nap.length().is_none() {
            t += 2;
            nap.observe(ms(t), 100 * t);
            assert!(t < 1000, "the oversleep was never forgotten");
        }
        assert!((100..300).contains(&t), "napping again after {t} ms");
    }

    /// One GSO send of the default most segments (128 × 64 B) reaches a
    /// plain receiver as 128 datagrams in sequence; on a kernel that
    /// takes only 64 per send, the batch falls back and says so by
    /// sending 64.
    #[test]
    fn a_full_gso_send_arrives_as_its_datagrams_in_order() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket2::SockRef::from(&rx)
            .set_recv_buffer_size(4 << 20)
            .unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let n = MAX_GSO_SEGMENTS as usize;
        let mut batch = SendBatch::new(tx.as_fd(), 64, n, true, DatagramWire::Xferlab);
        let sent = batch.send(1000, 7, n).unwrap();
        assert!(
            sent == n || sent == OLD_GSO_SEGMENTS as usize,
            "sent {sent}"
        );
        let mut buf = [0u8; 128];
        for i in 0..sent {
            let len = rx.recv(&mut buf).unwrap();
            assert_eq!(len, 64);
            assert_eq!(read_header(&buf), Some((1000 + i as u64, 7)));
        }
    }
}
