//! The data path of one bulk endpoint: keep `depth` transfers queued on
//! usbfs, resubmit each buffer as it completes, count, time and check.
//! Counters are atomics read by the driver loop at interval
//! boundaries; the latency histogram is this thread's own. Nothing on the
//! per-transfer path allocates, locks or formats.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xferlab_core::time::Time;

use crate::sys::clock;

use nusb::transfer::{Buffer, Bulk, EndpointDirection, TransferError};
use nusb::{Endpoint, MaybeFuture};
use xferlab_core::latency::LatencyRecorder;
use xferlab_core::usb::errors;
use xferlab_core::usb::pattern::Checker;
use xferlab_core::usb::stats::{ErrorKind, UsbCounters};
use xferlab_core::usb::{Pattern, TransferQueue};

/// Stalls in a row (without a good transfer between) before giving up.
const MAX_STALLS_IN_A_ROW: u64 = 50;

/// Counters one endpoint thread publishes.
#[derive(Debug, Default)]
pub struct LiveCounters {
    transfers: AtomicU64,
    bytes: AtomicU64,
    short: AtomicU64,
    errors: [AtomicU64; 6],
    stalls_cleared: AtomicU64,
    pattern_errors: AtomicU64,
}

impl LiveCounters {
    pub fn read(&self) -> UsbCounters {
        let mut c = UsbCounters {
            transfers: self.transfers.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            short: self.short.load(Relaxed),
            stalls_cleared: self.stalls_cleared.load(Relaxed),
            pattern_errors: self.pattern_errors.load(Relaxed),
            ..UsbCounters::default()
        };
        for (slot, live) in c.errors.iter_mut().zip(&self.errors) {
            *slot = live.load(Relaxed);
        }
        c
    }
    fn error(&self, k: ErrorKind) {
        let i = ErrorKind::ALL.iter().position(|x| *x == k).unwrap_or(5);
        self.errors[i].fetch_add(1, Relaxed);
    }
}

/// Shared by the endpoint threads and the driver loop.
#[derive(Debug, Default)]
pub struct RunControl {
    /// Time is up, Ctrl-C, or another endpoint ended the run.
    pub stop: AtomicBool,
    /// The device went away.
    pub disconnected: AtomicBool,
}

pub struct PipeSetup {
    pub address: u8,
    pub max_packet: usize,
    pub size: usize,
    pub depth: usize,
    pub quota: Option<u64>,
    pub pattern: Pattern,
    pub transfer_timeout: Duration,
    pub speed: &'static str,
    /// The device's sysfs directory: it disappears when the device does.
    pub sysfs: std::path::PathBuf,
}

/// A bus fault is often the first sign of a device going away (the host
/// controller fails the URBs in flight with EPROTO before the hub notices
/// the disconnect): wait up to a second for the device to vanish.
fn gone_within(sysfs: &std::path::Path, wait: Duration) -> bool {
    let t = Instant::now();
    loop {
        if !sysfs.exists() {
            return true;
        }
        if t.elapsed() >= wait {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How one endpoint's run ended.
pub struct PipeOutcome {
    pub latency: LatencyRecorder,
    /// Seconds since the run's start of the last completion.
    pub end_s: f64,
    /// Why it stopped early, if it did (one line, actionable).
    pub error: Option<String>,
    pub first_mismatch: Option<String>,
}

fn classify(e: TransferError) -> ErrorKind {
    match e {
        TransferError::Stall => ErrorKind::Stall,
        TransferError::Fault => ErrorKind::Fault,
        TransferError::Disconnected => ErrorKind::Disconnected,
        TransferError::Cancelled => ErrorKind::Cancelled,
        TransferError::InvalidArgument => ErrorKind::Invalid,
        _ => ErrorKind::Other,
    }
}

/// Runs one endpoint until its quota is done, `ctl.stop` is set, or an
/// error ends it. `is_in` selects the IN (read + check) or OUT (write) role.
pub fn run_pipe<Dir: EndpointDirection>(
    mut ep: Endpoint<Bulk, Dir>,
    is_in: bool,
    s: PipeSetup,
    start: Time,
    live: Arc<LiveCounters>,
    ctl: Arc<RunControl>,
) -> PipeOutcome {
    let granule = if is_in { s.max_packet } else { 1 };
    let mut q = TransferQueue::new(s.size, s.depth, granule, s.quota);
    let mut spare: Vec<Buffer> = (0..s.depth)
        .map(|_| {
            let mut b = ep.allocate(s.size);
            if !is_in {
                b.extend_fill(s.size, 0);
                s.pattern.fill(&mut b, s.max_packet);
            }
            b
        })
        .collect();
    let mut out = PipeOutcome {
        // 3 significant digits: ~230 KB, once per endpoint.
        latency: LatencyRecorder::new(3),
        end_s: 0.0,
        error: None,
        first_mismatch: None,
    };
    let mut stalls_in_a_row = 0u64;
    let checker = Checker::new(s.pattern, s.max_packet);
    let fail = |q: &mut TransferQueue,
                ep: &mut Endpoint<Bulk, Dir>,
                msg: String,
                out: &mut PipeOutcome| {
        if out.error.is_none() {
            out.error = Some(msg);
        }
        if !q.stopping() {
            q.stop();
            ep.cancel_all();
        }
        ctl.stop.store(true, Relaxed);
    };
    loop {
        while let Some(len) = q.next_submission() {
            let Some(mut b) = spare.pop() else { break };
            if is_in {
                b.set_requested_len(len);
            } else if b.len() != len {
                b.clear();
                b.extend_fill(len, 0);
                s.pattern.fill(&mut b, s.max_packet);
            }
            q.on_submit(clock::now(), len);
            ep.submit(b);
        }
        if q.is_done() {
            break;
        }
        if ctl.stop.load(Relaxed) && !q.stopping() {
            q.stop();
            ep.cancel_all();
        }
        let Some(c) = ep.wait_next_complete(Duration::from_millis(100)) else {
            let overdue = q
                .oldest_submit()
                .is_some_and(|t| clock::since(t) > s.transfer_timeout);
            if overdue {
                if q.stopping() {
                    // Cancelled transfers that never come back: give up on them.
                    break;
                }
                live.error(ErrorKind::Cancelled);
                let msg = format!(
                    "endpoint 0x{:02x}: no transfer completed for {:.1} s (--transfer-timeout); the device stopped {} data",
                    s.address,
                    s.transfer_timeout.as_secs_f64(),
                    if is_in { "sending" } else { "accepting" }
                );
                fail(&mut q, &mut ep, msg, &mut out);
            }
            continue;
        };
        let t = clock::now();
        let done = q.on_complete(t, c.actual_len);
        let actual = c.actual_len as u64;
        match c.status {
            Ok(()) => {
                stalls_in_a_row = 0;
                live.transfers.fetch_add(1, Relaxed);
                live.bytes.fetch_add(actual, Relaxed);
                out.end_s = t.secs_since(start);
                if let Some(d) = done {
                    if d.short {
                        live.short.fetch_add(1, Relaxed);
                    }
                    out.latency.record(d.latency_ns);
                }
                if is_in && s.pattern != Pattern::None {
                    if let Err(m) = checker.check(&c.buffer[..c.actual_len]) {
                        live.pattern_errors.fetch_add(1, Relaxed);
                        if out.first_mismatch.is_none() {
                            out.first_mismatch = Some(format!(
                                "endpoint 0x{:02x}, transfer {}: {m} (pattern {})",
                                s.address,
                                live.transfers.load(Relaxed),
                                s.pattern
                            ));
                        }
                    }
                }
            }
            Err(e) => {
                // Partial data of a failed or cancelled transfer still moved.
                live.bytes.fetch_add(actual, Relaxed);
                if actual > 0 {
                    out.end_s = t.secs_since(start);
                }
                let mut kind = classify(e);
                if matches!(kind, ErrorKind::Fault | ErrorKind::Other)
                    && !q.stopping()
                    && gone_within(&s.sysfs, Duration::from_secs(1))
                {
                    kind = ErrorKind::Disconnected;
                }
                if kind == ErrorKind::Cancelled && q.stopping() {
                    // Our own cancel at the end of the run: not an error.
                } else {
                    live.error(kind);
                    match kind {
                        ErrorKind::Stall => {
                            stalls_in_a_row += 1;
                            if ep.clear_halt().wait().is_ok() {
                                live.stalls_cleared.fetch_add(1, Relaxed);
                            }
                            if stalls_in_a_row >= MAX_STALLS_IN_A_ROW {
                                let msg = format!(
                                    "endpoint 0x{:02x} stalled {stalls_in_a_row} times in a row (cleared each time); \
                                     the device rejects the data: {}",
                                    s.address,
                                    if is_in { "check what it expects first" } else { "a SourceSink sink halts on data that breaks its --pattern" }
                                );
                                fail(&mut q, &mut ep, msg, &mut out);
                            }
                        }
                        ErrorKind::Cancelled => {} // a transfer cut short by a stall on the same endpoint
                        ErrorKind::Disconnected => {
                            ctl.disconnected.store(true, Relaxed);
                            let msg = format!(
                                "the device disconnected during the run (endpoint 0x{:02x}); the result is partial",
                                s.address
                            );
                            fail(&mut q, &mut ep, msg, &mut out);
                        }
                        ErrorKind::Fault => {
                            let msg = errors::fault(
                                s.address,
                                is_in,
                                done.map_or(s.size, |d| d.requested),
                                s.max_packet,
                            );
                            fail(&mut q, &mut ep, msg, &mut out);
                        }
                        ErrorKind::Invalid => {
                            let msg = if is_in && !s.size.is_multiple_of(s.max_packet) {
                                errors::in_size_not_whole_packets(
                                    s.size,
                                    s.address,
                                    s.max_packet,
                                    s.speed,
                                )
                            } else {
                                format!("endpoint 0x{:02x}: the kernel refused the transfer (EINVAL); try a smaller -l", s.address)
                            };
                            fail(&mut q, &mut ep, msg, &mut out);
                        }
                        ErrorKind::Other => {
                            let msg = format!("endpoint 0x{:02x}: transfer failed: {e}", s.address);
                            fail(&mut q, &mut ep, msg, &mut out);
                        }
                    }
                }
            }
        }
        spare.push(c.buffer);
    }
    out
}
