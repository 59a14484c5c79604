//! The host application of a fixed-rate trial, one thread per endpoint:
//! `depth` transfers of `size` bytes kept queued on usbfs; each completed
//! IN transfer is read out in calls of the application's size before its
//! buffer goes back, each OUT transfer is written in such calls before it
//! is submitted. The stall hook (`--host-stall EVERY:FOR`) makes the
//! application stop for FOR every EVERY, as a busy host would. Nothing on
//! the per-transfer path allocates.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use nusb::transfer::{Bulk, EndpointDirection, TransferError};
use nusb::Endpoint;

/// What the application does besides moving data.
#[derive(Debug, Clone, Copy)]
pub struct App {
    /// Bytes per transfer.
    pub size: usize,
    pub depth: usize,
    /// Bytes per application read/write call.
    pub call: usize,
    /// (every, for): the application stalls for `for` every `every`.
    pub stall: Option<(Duration, Duration)>,
}

/// What one endpoint's application did in a trial.
#[derive(Debug, Clone, Default)]
pub struct HostCounts {
    pub bytes: u64,
    pub transfers: u64,
    pub app_calls: u64,
    pub stalls: u64,
    /// Seconds from the thread's start to its stop.
    pub seconds: f64,
    /// The error that ended the stream early, if one did.
    pub error: Option<String>,
}

/// The application's side: its own buffer, its calls, its stalls.
struct AppSide {
    buf: Vec<u8>,
    next_stall: Option<Instant>,
    app: App,
}

impl AppSide {
    fn new(app: App, t0: Instant) -> AppSide {
        AppSide {
            buf: vec![0u8; app.call],
            next_stall: app.stall.map(|(every, _)| t0 + every),
            app,
        }
    }

    /// One call moved `n` bytes; the application may stall after it.
    fn after_call(&mut self, c: &mut HostCounts) {
        c.app_calls += 1;
        if let (Some(at), Some((every, len))) = (self.next_stall, self.app.stall) {
            let now = Instant::now();
            if now >= at {
                std::thread::sleep(len);
                c.stalls += 1;
                self.next_stall = Some((at + every).max(now + len));
            }
        }
    }

    /// RX: the application reads `data` in calls of its size.
    fn read(&mut self, data: &[u8], c: &mut HostCounts) {
        for chunk in data.chunks(self.app.call) {
            self.buf[..chunk.len()].copy_from_slice(chunk);
            self.after_call(c);
        }
    }

    /// TX: the application writes `data` in calls of its size.
    fn write(&mut self, data: &mut [u8], c: &mut HostCounts) {
        for chunk in data.chunks_mut(self.app.call) {
            chunk.copy_from_slice(&self.buf[..chunk.len()]);
            self.after_call(c);
        }
    }
}

fn describe(addr: u8, e: TransferError) -> String {
    match e {
        TransferError::Disconnected => {
            format!("the device disconnected during the trial (endpoint 0x{addr:02x})")
        }
        TransferError::Stall => {
            format!("endpoint 0x{addr:02x} stalled: the device refused the stream")
        }
        e => format!("endpoint 0x{addr:02x}: transfer failed: {e}"),
    }
}

/// Runs one endpoint's application until `stop`; `is_in` reads, else writes.
/// The endpoint serves every trial of a run: what a trial leaves pending
/// (its drain ran out of time) is a host error, and the next trial drains
/// it before it starts, so no transfer is counted twice.
pub fn run<Dir: EndpointDirection>(
    ep: &mut Endpoint<Bulk, Dir>,
    is_in: bool,
    app: App,
    stop: &AtomicBool,
) -> HostCounts {
    let mut c = HostCounts::default();
    if !drain(ep) {
        c.error = Some(format!(
            "endpoint 0x{:02x}: the last trial's transfers are still pending",
            ep.endpoint_address()
        ));
        return c;
    }
    let t0 = Instant::now();
    let addr = ep.endpoint_address();
    let mut side = AppSide::new(app, t0);
    for _ in 0..app.depth {
        let mut b = ep.allocate(app.size);
        if is_in {
            b.set_requested_len(app.size);
        } else {
            b.extend_fill(app.size, 0);
            side.write(&mut b, &mut c);
        }
        ep.submit(b);
    }
    while !stop.load(Relaxed) {
        let Some(done) = ep.wait_next_complete(Duration::from_millis(20)) else {
            continue;
        };
        let mut b = done.buffer;
        match done.status {
            Ok(()) => {
                c.transfers += 1;
                c.bytes += done.actual_len as u64;
                if is_in {
                    side.read(&b[..done.actual_len], &mut c);
                    b.set_requested_len(app.size);
                } else {
                    side.write(&mut b, &mut c);
                }
            }
            Err(e) => {
                c.bytes += done.actual_len as u64;
                c.error = Some(describe(addr, e));
                break;
            }
        }
        if stop.load(Relaxed) {
            break;
        }
        ep.submit(b);
    }
    c.seconds = t0.elapsed().as_secs_f64();
    if !drain(ep) && c.error.is_none() {
        c.error = Some(format!(
            "endpoint 0x{addr:02x}: transfers still pending 2 s after the stop"
        ));
    }
    c
}

/// Cancels what is in flight and waits up to 2 s for it: whether nothing
/// is pending any more.
fn drain<Dir: EndpointDirection>(ep: &mut Endpoint<Bulk, Dir>) -> bool {
    ep.cancel_all();
    let deadline = Instant::now() + Duration::from_secs(2);
    while ep.pending() > 0 && Instant::now() < deadline {
        ep.wait_next_complete(Duration::from_millis(100));
    }
    ep.pending() == 0
}
