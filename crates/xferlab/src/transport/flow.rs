//! The data path: one thread per flow moving bytes as fast as the socket
//! takes them. Per call it does one syscall, one relaxed atomic store and
//! one relaxed atomic load — no allocation, locking or formatting; a
//! receiver batching its wake-ups (`--rcvlowat`) also reads the clock once
//! every [`RETUNE_EVERY`] calls. Per-call sizes come from [`StreamSizes`].
//! Sampling (TCP_INFO, intervals) happens on the side's control thread,
//! which reads the shared counter.

use crate::sys::clock;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use xferlab_core::time::Time;

use xferlab_core::result::FlowEnd;
use xferlab_core::spec::{RecvMode, SendMode};

use super::sizing::StreamSizes;
use super::zerocopy::{self, MsgZerocopy, SendfileSource};
use xferlab_sys::discard::Discard;
use xferlab_sys::sockopt;

/// How often a blocked send/recv comes back to look at the stop and abort
/// flags. Only matters when the peer stalls; a busy flow never waits.
pub const POLL_FLAGS: Duration = Duration::from_millis(100);

/// Bytes asked of the kernel per discard-mode recv: nothing is copied, so
/// a large request just means fewer syscalls.
const DISCARD_CHUNK: usize = 4 << 20;
/// With `--rcvlowat`, receivers ask the kernel (SO_RCVLOWAT) to wake them
/// only once about this much time's worth of data at the flow's current
/// rate is queued (at most the `--rcvlowat` cap, itself at most one read).
const WAKE_AFTER: Duration = Duration::from_millis(1);
/// Reads between re-estimates of the flow's rate.
const RETUNE_EVERY: u32 = 32;

/// What the data thread and the sampler share. The byte counter has its
/// own cache line so sampling does not slow the writer.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct FlowShared {
    pub bytes: AtomicU64,
    /// Datagram counters (every datagram transport's flows).
    pub udp: UdpShared,
    /// What the flow's transport publishes of its own
    /// ([`TransportIo::own_shared`](super::TransportIo::own_shared)).
    pub own: super::OwnShared,
}

impl FlowShared {
    /// The slots of a flow over `io`'s transport, for a test with `knobs`.
    pub fn of(io: &dyn super::TransportIo, knobs: &xferlab_core::spec::Knobs) -> Self {
        FlowShared {
            own: io.own_shared(knobs),
            ..FlowShared::default()
        }
    }
}

/// What a datagram flow thread publishes after each call. The `*_max_*`
/// fields are maxima since the sampler last read them (it resets them).
#[derive(Debug, Default)]
pub struct UdpShared {
    pub packets: AtomicU64,
    pub lost: AtomicU64,
    pub out_of_order: AtomicU64,
    pub duplicates: AtomicU64,
    pub host_drops: AtomicU64,
    /// f64 bits.
    pub jitter_ns: AtomicU64,
    pub owd_excess_sum_ns: AtomicU64,
    pub owd_excess_max_ns: AtomicU64,
    pub late: AtomicU64,
    pub lateness_max_ns: AtomicU64,
}

impl UdpShared {
    /// The counters now; resets the windowed maxima.
    pub fn read(&self) -> xferlab_core::result::UdpCounters {
        xferlab_core::result::UdpCounters {
            packets: self.packets.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            out_of_order: self.out_of_order.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            host_drops: self.host_drops.load(Ordering::Relaxed),
            jitter_ns: f64::from_bits(self.jitter_ns.load(Ordering::Relaxed)),
            owd_excess_sum_ns: u128::from(self.owd_excess_sum_ns.load(Ordering::Relaxed)),
            owd_excess_max_ns: self.owd_excess_max_ns.swap(0, Ordering::Relaxed),
            late: self.late.load(Ordering::Relaxed),
            lateness_max_ns: self.lateness_max_ns.swap(0, Ordering::Relaxed),
        }
    }
}

/// Flags for all flows of one side.
#[derive(Debug, Default)]
pub struct SideFlags {
    /// Senders finish their current write, shut down and end.
    pub stop: AtomicBool,
    /// Everyone leaves at once (peer gone, drain timeout).
    pub abort: AtomicBool,
    /// Receivers stop now and keep what they counted, as a stock iperf3
    /// server does on TEST_END (its peer never closes the data
    /// connections first).
    pub cut: AtomicBool,
}

/// How a flow thread ended.
#[derive(Debug)]
pub struct FlowOutcome {
    pub end: FlowEnd,
    pub at: Time,
    pub bytes: u64,
    /// What the result should say about how the bytes moved (a copy-free
    /// path that copied after all).
    pub note: Option<String>,
}

/// Where the sender's and receiver's buffers start: on a page. malloc
/// gives a 128K or 256K buffer only 16-byte alignment (an mmap'd chunk's
/// header, or wherever the heap has room once glibc raises its mmap
/// threshold), so the alignment the kernel's copies saw changed from run
/// to run. Measured (loopback, AMD EPYC, `stream -t 3`, interleaved runs,
/// receiver Gbit/s): with `-l 128K`, malloc's 21.5-26.2 against 30.0-34.1
/// page-aligned, iperf3 3.21 (whose buffers are mmap'd, page-aligned)
/// 27.5-33.8; with the default sizes 18.8-21.6 against 34.9-42.5. perf
/// before the change: the receiver's `_copy_to_iter` cost 1.7x iperf3's
/// per byte.
const PAGE: usize = 4096;

/// `len` bytes that start on a page, inside a vector a page longer.
struct PageAligned {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl PageAligned {
    /// Byte `i` of the whole vector is `fill(i)`.
    fn new(len: usize, fill: impl Fn(usize) -> u8) -> Self {
        let raw: Vec<u8> = (0..len + PAGE).map(fill).collect();
        let off = raw.as_ptr().align_offset(PAGE);
        PageAligned { raw, off, len }
    }

    fn bytes(&self) -> &[u8] {
        &self.raw[self.off..self.off + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.off..self.off + self.len]
    }
}

/// Sends until stopped or `quota` bytes are written, then shuts down the
/// write side so the receiver sees end of stream after the last byte.
pub fn send(
    mut sock: &TcpStream,
    write_size: usize,
    mode: SendMode,
    quota: Option<u64>,
    shared: &FlowShared,
    flags: &SideFlags,
) -> FlowOutcome {
    sock.set_write_timeout(Some(POLL_FLAGS)).ok();
    // A repeating pattern rather than zeros, so compressing links or
    // zero-page tricks do not flatter the result.
    let source_buf = PageAligned::new(write_size, |i| (i % 251) as u8);
    let buf = source_buf.bytes();
    let mut source = match mode {
        SendMode::Copy => Source::Copy,
        SendMode::Sendfile => match SendfileSource::new(buf) {
            Ok(f) => Source::File(f),
            Err(e) => return failed(format!("cannot set up sendfile (-Z): {e}")),
        },
        SendMode::MsgZerocopy => match zerocopy::enable_msg_zerocopy(sock) {
            Ok(z) => Source::Zerocopy(z),
            Err(e) => return failed(e.to_string()),
        },
    };
    let mut sent: u64 = 0;
    let end = loop {
        if flags.stop.load(Ordering::Relaxed) || flags.abort.load(Ordering::Relaxed) {
            break if flags.abort.load(Ordering::Relaxed) {
                aborted()
            } else {
                FlowEnd::Completed
            };
        }
        let want = match quota {
            Some(q) if q - sent < write_size as u64 => (q - sent) as usize,
            _ => write_size,
        };
        if want == 0 {
            break FlowEnd::Completed;
        }
        let r = match &mut source {
            Source::Copy => sock.write(&buf[..want]),
            Source::File(f) => f.send(sock, want),
            Source::Zerocopy(z) => z.send(&buf[..want]),
        };
        match r {
            Ok(0) => break FlowEnd::Aborted("the connection accepted no more data".into()),
            Ok(n) => {
                sent += n as u64;
                shared.bytes.store(sent, Ordering::Relaxed);
            }
            Err(e) if retry(&e) => continue,
            Err(e) => break io_failed(&e, "sending", flags),
        }
    };
    let at = clock::now();
    if end == FlowEnd::Completed {
        sock.shutdown(Shutdown::Write).ok();
    }
    FlowOutcome {
        end,
        at,
        bytes: sent,
        note: match &source {
            Source::Zerocopy(z) => zerocopy::msg_zerocopy_note(z),
            _ => None,
        },
    }
}

/// Where a sender's bytes come from.
enum Source<'a> {
    Copy,
    File(SendfileSource),
    Zerocopy(MsgZerocopy<'a>),
}

fn failed(why: String) -> FlowOutcome {
    FlowOutcome {
        end: FlowEnd::Aborted(why),
        at: clock::now(),
        bytes: 0,
        note: None,
    }
}

/// Receives until end of stream. `Copy` reads up to `sizes.read_size`
/// bytes per call into a user buffer as an application would (the rest of
/// the buffer, filled to its end, with `sizes.read_fill`); `Discard` uses
/// recv(MSG_TRUNC), which for TCP drops the data in the kernel without
/// copying it out; `Zerocopy` has the kernel map whole pages instead and
/// reads (copies) only what it cannot map.
pub fn receive(
    mut sock: &TcpStream,
    sizes: StreamSizes,
    mode: RecvMode,
    shared: &FlowShared,
    flags: &SideFlags,
) -> FlowOutcome {
    sock.set_read_timeout(Some(POLL_FLAGS)).ok();
    let want_len = if mode == RecvMode::Discard {
        1
    } else {
        sizes.read_size
    };
    let mut read_buf = PageAligned::new(want_len, |_| 0);
    let buf = read_buf.bytes_mut();
    let mut window = match mode {
        RecvMode::Zerocopy => match zerocopy::zerocopy_window(sock, sizes.read_size) {
            Ok(w) => Some(w),
            Err(e) => return failed(e.to_string()),
        },
        _ => None,
    };
    let mut wake = WakeThreshold::new(sock, sizes.rcvlowat);
    let mut discard = (mode == RecvMode::Discard).then(|| Discard::new(sock, DISCARD_CHUNK));
    let mut got: u64 = 0;
    let mut mapped: u64 = 0;
    // Where the next copying read starts when reads fill the buffer.
    let mut at = 0;
    let end = loop {
        let r = match (mode, window.as_mut()) {
            // With MSG_TRUNC the kernel writes nothing to a buffer for TCP.
            (RecvMode::Discard, _) => discard
                .as_mut()
                .expect("a discarding receiver has its Discard")
                .recv(),
            (RecvMode::Zerocopy, Some(w)) => match w.receive() {
                Ok(zc) if zc.mapped > 0 => {
                    mapped += zc.mapped as u64;
                    Ok(zc.mapped)
                }
                // Unmappable bytes come next (or nothing is queued yet: a
                // blocking read waits for data, or reads end of stream).
                Ok(zc) => {
                    let want = if zc.skip > 0 {
                        zc.skip.min(buf.len())
                    } else {
                        buf.len()
                    };
                    sock.read(&mut buf[..want])
                }
                // The kernel refuses to map once the peer has closed
                // (EIO): a plain read gives end of stream or the socket's
                // real error.
                Err(_) => sock.read(buf),
            },
            _ if sizes.read_fill => {
                let r = sock.read(&mut buf[at..]);
                if let Ok(n) = r {
                    at += n;
                    if at == buf.len() {
                        at = 0;
                    }
                }
                r
            }
            _ => sock.read(buf),
        };
        match r {
            Ok(0) => break FlowEnd::Completed,
            Ok(n) => {
                got += n as u64;
                shared.bytes.store(got, Ordering::Relaxed);
                wake.after_read(n, got);
                if flags.cut.load(Ordering::Relaxed) {
                    break FlowEnd::Completed;
                }
            }
            Err(e) if retry(&e) => {
                wake.reset(got);
                if flags.abort.load(Ordering::Relaxed) {
                    break aborted();
                }
                if flags.cut.load(Ordering::Relaxed) {
                    break FlowEnd::Completed;
                }
            }
            Err(e) => break io_failed(&e, "receiving", flags),
        }
    };
    FlowOutcome {
        end,
        at: clock::now(),
        bytes: got,
        note: window.and_then(|_| zerocopy::receive_note(mapped, got)),
    }
}

/// Keeps a receiving socket's SO_RCVLOWAT at about [`WAKE_AFTER`] worth of
/// data. A read shorter than the threshold means the kernel woke us for
/// another reason (timeout, end of stream, memory pressure): the rate has
/// fallen, so the threshold drops to 1 at once and is learnt again. A
/// slowing flow is therefore never seen late by more than one poll.
struct WakeThreshold<'a> {
    fd: BorrowedFd<'a>,
    lowat: usize,
    /// The `--rcvlowat` cap (0: never set), and at most a quarter of the
    /// receive buffer, so a small `-w` can never hold back a wake-up the
    /// window cannot fill.
    cap: usize,
    reads: u32,
    mark: (Time, u64),
}

fn retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// How a flow ends when its side aborted the test; the side's report
/// replaces it with the reason (see `stream::side`).
pub const ABORTED: &str = "the test was aborted";

pub(crate) fn aborted() -> FlowEnd {
    FlowEnd::Aborted(ABORTED.into())
}

/// How a flow ends on an I/O error. After this side aborted, the error is
/// the abort's own doing: [`FlowSocket::interrupt`] shut the socket down,
/// and the peer's next data segment then draws a reset (RFC 1122
/// 4.2.2.13; Linux counts TCPAbortOnData), so a read fails with
/// "connection reset" and a write with "broken pipe". CI saw exactly that
/// on a lossy lab path, where a server's drain cut one of 20 flows while
/// its retransmissions were still arriving: the flow is cut, not reset by
/// the peer, and its side's report gives the abort's reason.
///
/// [`FlowSocket::interrupt`]: super::FlowSocket::interrupt
fn io_failed(e: &io::Error, what: &str, flags: &SideFlags) -> FlowEnd {
    if flags.abort.load(Ordering::Relaxed) {
        aborted()
    } else {
        FlowEnd::Aborted(describe(e, what))
    }
}

fn describe(e: &io::Error, what: &str) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionReset => format!("connection reset by the peer while {what}"),
        io::ErrorKind::BrokenPipe => format!("the peer closed the connection while {what}"),
        _ => format!("error while {what}: {e}"),
    }
}

/// Starts a flow thread with a small stack (flows keep their buffer on
/// the heap), so many flows cost little memory.
pub fn spawn(
    name: String,
    body: impl FnOnce() + Send + 'static,
) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name)
        .stack_size(256 * 1024)
        .spawn(body)
}

impl<'a> WakeThreshold<'a> {
    fn new(sock: &'a TcpStream, max: usize) -> Self {
        let rcvbuf = socket2::SockRef::from(sock).recv_buffer_size().unwrap_or(0);
        WakeThreshold {
            fd: sock.as_fd(),
            lowat: 1,
            cap: (rcvbuf / 4).min(max),
            reads: 0,
            mark: (clock::now(), 0),
        }
    }

    fn after_read(&mut self, n: usize, total: u64) {
        if self.cap <= 1 {
            return;
        }
        if n < self.lowat {
            self.reset(total);
            return;
        }
        self.reads += 1;
        if !self.reads.is_multiple_of(RETUNE_EVERY) {
            return;
        }
        let now = clock::now();
        let dt = now.duration_since(self.mark.0);
        if dt < 10 * WAKE_AFTER {
            return;
        }
        let per_wake = (total - self.mark.1) as f64 * WAKE_AFTER.as_secs_f64() / dt.as_secs_f64();
        self.mark = (now, total);
        // Rounded down to a power of two, so small rate changes cost no
        // syscall.
        let want = (per_wake as usize).clamp(1, self.cap);
        self.set(1 << want.ilog2());
    }

    /// Back to waking on every byte (a timeout or a short read).
    fn reset(&mut self, total: u64) {
        if self.cap <= 1 {
            return;
        }
        self.reads = 0;
        self.mark = (clock::now(), total);
        self.set(1);
    }

    fn set(&mut self, lowat: usize) {
        if lowat == self.lowat {
            return;
        }
        let v = libc::c_int::try_from(lowat).unwrap_or(libc::c_int::MAX);
        let set = sockopt::set_int(self.fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, v);
        if set.is_ok() {
            self.lowat = lowat;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use xferlab_core::result::SizeSource;

    /// A connected pair whose receiving end was shut down (what
    /// [`super::super::FlowSocket::interrupt`] does) and whose sender then
    /// wrote: the receiver drew a reset. Waits for the reset to land (the
    /// sender's socket reports POLLHUP only once it has).
    fn reset_after_our_shutdown() -> TcpStream {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (rx, _) = l.accept().unwrap();
        rx.shutdown(Shutdown::Both).unwrap();
        tx.write_all(&[7u8; 1000]).unwrap();
        let mut p = [rustix::event::PollFd::new(
            &tx,
            rustix::event::PollFlags::empty(),
        )];
        let five = rustix::event::Timespec {
            tv_sec: 5,
            tv_nsec: 0,
        };
        let n = rustix::event::poll(&mut p, Some(&five)).unwrap();
        assert_eq!(n, 1, "no reset within 5 s");
        let revents = p[0].revents();
        assert!(
            revents.contains(rustix::event::PollFlags::HUP),
            "revents {revents:?}"
        );
        rx
    }

    fn receive_from(rx: &TcpStream, flags: &SideFlags) -> FlowEnd {
        let sizes = StreamSizes {
            write_size: 1000,
            write_size_from: SizeSource::Option,
            read_size: 64 * 1024,
            read_size_from: SizeSource::Option,
            rcvlowat: 0,
            read_fill: false,
        };
        receive(rx, sizes, RecvMode::Copy, &FlowShared::default(), flags).end
    }

    #[test]
    fn a_reset_drawn_by_our_own_abort_ends_the_flow_as_aborted() {
        // The setup does draw a reset: without an abort it is the peer's.
        let rx = reset_after_our_shutdown();
        assert_eq!(
            receive_from(&rx, &SideFlags::default()),
            FlowEnd::Aborted("connection reset by the peer while receiving".into())
        );
        let flags = SideFlags::default();
        flags.abort.store(true, Ordering::Relaxed);
        let rx = reset_after_our_shutdown();
        assert_eq!(receive_from(&rx, &flags), aborted());
    }
}
