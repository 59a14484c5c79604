//! The fixed-rate device (`xferlab usb gadget --function cbr`): the ep0
//! side of its control requests (START, STOP, INFO from
//! xferlab_core::usb::cbr::wire) and one data thread per endpoint that
//! runs the core's [`RateBuffer`] against Linux AIO on the FunctionFS
//! endpoint: IN writes each request's worth of produced samples, OUT posts
//! reads only while the buffer has room. Completions are applied before
//! the clock advances, so this thread's own wake-up lateness is never
//! counted as the host's overrun. Per-request work neither allocates nor
//! locks; the locks here are taken once per trial.

use std::fs::File;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use xferlab_core::usb::cbr::rate::{RateBuffer, RateReport, Role};
use xferlab_core::usb::cbr::wire::{self, StartParams, Status};

use super::ffs_io::Shared;
use crate::sys::clock;
use xferlab_sys::aio::{Aio, Op};

/// Longest sleep of a data thread: how soon it sees START/STOP.
const TICK: Duration = Duration::from_millis(1);

/// What ep0 and the two data threads share about the current trial.
#[derive(Default)]
pub struct CbrControl {
    /// Bumped by every START and STOP; each data thread acts on a change.
    generation: AtomicU64,
    /// The trial's parameters and START time (ns, monotonic); None after STOP.
    trial: Mutex<Option<(StartParams, u64)>>,
    /// When STOP came (ns, monotonic).
    stop_ns: AtomicU64,
    /// The generation each data thread (0 IN, 1 OUT) has acted on.
    acked: [AtomicU64; 2],
    /// Each direction's report of the stream STOP ended.
    reports: Mutex<[Option<RateReport>; 2]>,
}

impl CbrControl {
    /// Handles a vendor request to the interface; false: not ours (stall it).
    pub fn setup(&self, ep0: &mut File, s: &Shared, request: u8, length: u16) -> bool {
        match request {
            wire::REQ_INFO => {
                let b = wire::info();
                let n = b.len().min(length as usize);
                ep0.write_all(&b[..n]).is_ok()
            }
            wire::REQ_START => {
                let mut b = [0u8; wire::START_LEN];
                if length as usize != wire::START_LEN || ep0.read_exact(&mut b).is_err() {
                    return false;
                }
                let Some(p) = StartParams::decode(&b).filter(valid) else {
                    return false;
                };
                *self.trial.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((p, clock::now().as_nanos()));
                self.generation.fetch_add(1, Release);
                true
            }
            wire::REQ_STOP => {
                let now = clock::now().as_nanos();
                let started = self
                    .trial
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                    .map(|(p, t)| (p, now.saturating_sub(t)));
                self.stop_ns.store(now, Relaxed);
                let g = self.generation.fetch_add(1, Release) + 1;
                // Both data threads publish their report and ack (each
                // wakes at least every TICK).
                let deadline = Instant::now() + Duration::from_secs(2);
                while self.acked.iter().any(|a| a.load(Acquire) != g)
                    && Instant::now() < deadline
                    && !s.stop.load(Relaxed)
                {
                    std::thread::sleep(Duration::from_micros(200));
                }
                let reports = *self.reports.lock().unwrap_or_else(|e| e.into_inner());
                let status = match started {
                    Some((p, elapsed_ns)) => Status {
                        elapsed_ns,
                        rx: reports[0].filter(|_| p.rx),
                        tx: reports[1].filter(|_| p.tx),
                    },
                    None => Status::default(),
                };
                let b = status.encode();
                let n = b.len().min(length as usize);
                ep0.write_all(&b[..n]).is_ok()
            }
            _ => false,
        }
    }
}

/// Parameters a stream can run with (the host checks them too; a device
/// refusing them stalls START).
fn valid(p: &StartParams) -> bool {
    let fits = |role| RateBuffer::new(role, p.rate, p.sample, p.buffer).is_ok();
    (p.rx || p.tx)
        && p.request > 0
        && p.request <= p.buffer
        && p.buffer <= wire::MAX_BUFFER
        && fits(Role::Source)
        && (!p.tx || fits(Role::Sink { prefill: p.prefill }))
}

/// One direction's stream: its buffer model, AIO context and requests.
struct Stream {
    model: RateBuffer,
    aio: Aio,
    /// Each slot's buffer while it is ours (None: in flight).
    bufs: Vec<Option<Vec<u8>>>,
    request: usize,
    errors: u64,
}

impl Stream {
    fn new(p: &StartParams, is_in: bool, start_ns: u64) -> Option<Stream> {
        let role = if is_in {
            Role::Source
        } else {
            Role::Sink { prefill: p.prefill }
        };
        let mut model = RateBuffer::new(role, p.rate, p.sample, p.buffer).ok()?;
        model.start(start_ns);
        let request = p.request as usize;
        let slots = (p.buffer / p.request).max(1) as usize;
        Some(Stream {
            model,
            aio: Aio::new(slots).ok()?,
            bufs: (0..slots).map(|_| Some(vec![0u8; request])).collect(),
            request,
            errors: 0,
        })
    }

    /// Requests in flight (a few dozen slots: counted when needed).
    fn in_flight(&self) -> usize {
        self.bufs.iter().filter(|b| b.is_none()).count()
    }

    /// One wake-up: completions, then the clock, then new requests; sleeps
    /// in io_getevents until the next request can go out (at most TICK).
    /// A START or STOP that came meanwhile (`generation` moved on from
    /// `seen`) ends the step before the clock moves: the stream's clock
    /// stops at STOP's time, not at this thread's wake-up.
    fn step(&mut self, f: &File, is_in: bool, ctl: &CbrControl, seen: u64) {
        let now = clock::now().as_nanos();
        let req = self.request as u64;
        // Bytes the requests in flight hold (IN) or have reserved (OUT).
        let committed = |in_flight: usize| in_flight as u64 * req;
        let in_flight = self.in_flight();
        let next = if is_in {
            self.model.time_of_fill(committed(in_flight) + req)
        } else {
            self.model.time_of_space(committed(in_flight) + req)
        };
        let can_submit = in_flight < self.bufs.len();
        let wait = match next {
            Some(t) if can_submit => Duration::from_nanos(t.saturating_sub(now)).min(TICK),
            _ => TICK,
        };
        let n = self.aio.wait(wait).unwrap_or(0);
        let mut now = clock::now().as_nanos();
        let stopping = ctl.generation.load(Acquire) != seen;
        if stopping {
            now = now.min(ctl.stop_ns.load(Relaxed));
        }
        for k in 0..n {
            let Some(c) = self.aio.completion(k) else {
                continue;
            };
            self.bufs[c.slot] = Some(c.buf);
            if c.res < 0 {
                self.errors += 1;
            } else if is_in {
                self.model.drained(c.res as u64);
            } else {
                self.model.filled(now, c.res as u64);
            }
        }
        if stopping {
            return;
        }
        self.model.advance(now);
        let op = if is_in { Op::Write } else { Op::Read };
        let mut in_flight = self.in_flight();
        while in_flight < self.bufs.len() {
            let ready = if is_in {
                self.model.fill() >= committed(in_flight) + req
            } else {
                self.model.space() >= committed(in_flight) + req
            };
            if !ready {
                break;
            }
            let Some(i) = self.bufs.iter().position(Option::is_some) else {
                break;
            };
            let b = self.bufs[i].take().expect("an idle slot holds its buffer");
            let len = b.len();
            if let Err((_, b)) = self.aio.submit(i, f, op, b, len) {
                self.bufs[i] = Some(b);
                // Not enabled (yet) or shut down: try again next wake-up.
                self.errors += 1;
                break;
            }
            in_flight += 1;
        }
    }
}

/// A data thread of the fixed-rate device: idle until START names its
/// direction, streams until STOP, reports, and waits for the next START.
pub fn cbr_loop(f: File, is_in: bool, s: &Shared, ctl: &CbrControl) {
    let dir = if is_in { 0 } else { 1 };
    let mut seen = 0;
    let mut stream: Option<Stream> = None;
    while !s.stop.load(Relaxed) {
        let g = ctl.generation.load(Acquire);
        if g != seen {
            if let Some(mut st) = stream.take() {
                // Only completions before STOP count; the clock stops there.
                st.model.advance(ctl.stop_ns.load(Relaxed));
                ctl.reports.lock().unwrap_or_else(|e| e.into_inner())[dir] =
                    Some(st.model.report());
                let c = if is_in { &s.input } else { &s.output };
                c.errors.fetch_add(st.errors, Relaxed);
                c.bytes.fetch_add(st.model.report().host_bytes, Relaxed);
                // Dropping the context cancels what is still queued.
            }
            let trial = *ctl.trial.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((p, t0)) = trial {
                if (is_in && p.rx) || (!is_in && p.tx) {
                    stream = Stream::new(&p, is_in, t0);
                }
            }
            seen = g;
            ctl.acked[dir].store(g, Release);
            continue;
        }
        match stream.as_mut() {
            Some(st) => st.step(&f, is_in, ctl, seen),
            None => std::thread::sleep(TICK),
        }
    }
}
