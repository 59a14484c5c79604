//! The bus simulation: one host controller walking its bulk pipes
//! round-robin (as EHCI walks its asynchronous schedule), one transaction
//! at a time, between SOFs, against a device that NAKs while it has no
//! request ready. Deterministic and event-driven on integer ticks; every
//! tick of the measured window is charged to exactly one [`Cat`].

use std::collections::VecDeque;

use serde::Serialize;

use super::profile::Profile;
use super::wire::{Phy, Speed};

/// Where bus time goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cat {
    /// Payload bits of successful data transactions.
    WirePayload = 0,
    /// The rest of successful transactions (tokens, framing, CRCs,
    /// handshakes, inter-packet gaps, stuffing) and SOFs.
    WireOverhead,
    /// The device not ready: NAKed tokens, PING rounds, refused OUT data
    /// and the gaps after them.
    Device,
    /// The host controller between transactions of a transfer (and the
    /// split transactions of a hub's TT).
    HostGap,
    /// No transfer to work on: between transfers, waiting for the
    /// application to submit again.
    HostTurnaround,
    /// The end of a (micro)frame no transaction fits into.
    FrameEnd,
}

const CATS: usize = 6;

/// What the simulated application does on each pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    /// Bytes per transfer (the device's requests are the same size).
    pub size: u32,
    /// Host transfers in flight per pipe (1 = synchronous).
    pub depth: u32,
    /// Run the IN pipe.
    pub bulk_in: bool,
    /// Run the OUT pipe.
    pub bulk_out: bool,
    /// Device requests queued per pipe (None: the profile's).
    pub device_depth: Option<u32>,
    /// A periodic endpoint beside the bulk pipes, if any.
    pub periodic: Option<Periodic>,
}

/// Isochronous or interrupt: what the periodic endpoint is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PeriodicKind {
    /// No handshake, no retry (USB 2.0 section 5.6).
    Isochronous,
    /// Token, data and handshake, like bulk, but on a schedule (5.7).
    Interrupt,
}

/// A periodic endpoint: served at the start of each (micro)frame it is
/// due in, before the bulk pipes, as an EHCI controller walks its
/// periodic schedule after SOF and only then the asynchronous one
/// (EHCI 1.0 section 4.4). Its device always has data ready (or room for
/// it): the model predicts what the schedule allows, and what it leaves
/// to bulk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Periodic {
    pub kind: PeriodicKind,
    /// OUT (host to device); the prediction names the direction.
    #[serde(skip)]
    pub out: bool,
    /// Bytes per transaction (wMaxPacketSize's size field).
    pub size: u32,
    /// Transactions in each (micro)frame it is due in: 1, or at high
    /// speed up to 3 (a high-bandwidth endpoint).
    pub mult: u32,
    /// (Micro)frames from one service to the next.
    pub interval: u32,
}

/// Why a periodic endpoint cannot exist at a speed: each is a limit of
/// USB 2.0 that a host controller enforces when the device is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PeriodicError {
    #[error(
        "a {speed:?}-speed {kind} endpoint carries 1 to {max} bytes per transaction (got {size})"
    )]
    Size {
        speed: Speed,
        kind: PeriodicKind,
        max: u32,
        size: u32,
    },
    #[error(
        "a full-speed {kind} endpoint makes one transaction per frame (got x{mult}); drop the xN"
    )]
    FullSpeedMult { kind: PeriodicKind, mult: u32 },
    #[error("a high-speed {kind} endpoint makes 1 to 3 transactions per microframe (got x{mult})")]
    HighSpeedMult { kind: PeriodicKind, mult: u32 },
    #[error("{mult} transactions per microframe need {min}-1024 bytes each (USB 2.0 table 9-13; got {size}): use x1 with {size} bytes")]
    SizeForMult { mult: u32, min: u32, size: u32 },
    #[error("a full-speed interrupt endpoint is polled every 1 to 255 frames (got /{interval})")]
    FullSpeedInterruptInterval { interval: u32 },
    #[error("a {speed:?}-speed {kind} endpoint is served every 2^(bInterval-1) (micro)frames: 1, 2, 4 ... 32768 (got /{interval})")]
    Interval {
        speed: Speed,
        kind: PeriodicKind,
        interval: u32,
    },
}

impl std::fmt::Display for PeriodicKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PeriodicKind::Isochronous => "isochronous",
            PeriodicKind::Interrupt => "interrupt",
        })
    }
}

impl Periodic {
    /// Checks the endpoint against USB 2.0's limits for `speed`, which a
    /// host controller enforces when the device is configured (sections
    /// 5.6.3 and 5.7.3, table 9-13 for the high-bandwidth sizes, 9.6.6 for
    /// bInterval).
    pub fn check(&self, speed: Speed) -> Result<(), PeriodicError> {
        let kind = self.kind;
        let (max, mult_max) = match (speed, kind) {
            (Speed::High, _) => (1024, 3),
            (Speed::Full, PeriodicKind::Isochronous) => (1023, 1),
            (Speed::Full, PeriodicKind::Interrupt) => (64, 1),
        };
        if self.size == 0 || self.size > max {
            return Err(PeriodicError::Size {
                speed,
                kind,
                max,
                size: self.size,
            });
        }
        let mult = self.mult;
        if mult == 0 || mult > mult_max {
            return Err(if mult_max == 1 {
                PeriodicError::FullSpeedMult { kind, mult }
            } else {
                PeriodicError::HighSpeedMult { kind, mult }
            });
        }
        // Table 9-13: 2 per microframe need 513-1024 bytes, 3 need 683-1024.
        let min = match mult {
            2 => 513,
            3 => 683,
            _ => 1,
        };
        if self.size < min {
            return Err(PeriodicError::SizeForMult {
                mult,
                min,
                size: self.size,
            });
        }
        // bInterval: 2^(b-1) (micro)frames, b = 1..16, except full-speed
        // interrupt endpoints, which take 1..255 frames as they are.
        let interval = self.interval;
        if speed == Speed::Full && kind == PeriodicKind::Interrupt {
            if !(1..=255).contains(&interval) {
                return Err(PeriodicError::FullSpeedInterruptInterval { interval });
            }
        } else if !(interval.is_power_of_two() && interval <= 32_768) {
            return Err(PeriodicError::Interval {
                speed,
                kind,
                interval,
            });
        }
        Ok(())
    }

    /// One transaction on the wire: isochronous ones have no handshake
    /// (section 8.5.5).
    pub fn transaction(&self, phy: &Phy) -> u64 {
        match self.kind {
            PeriodicKind::Isochronous => phy.token() + phy.data(self.size),
            PeriodicKind::Interrupt => phy.transaction(self.size),
        }
    }
}

/// Simulated results of one pipe over the measured window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PipeTotals {
    pub bytes: u64,
    pub transfers: u64,
    /// Successful data transactions.
    pub transactions: u64,
    /// Refused transactions (NAK, refused OUT data, PING-NAK).
    pub naks: u64,
    /// Idle between consecutive data transactions of one transfer: sum
    /// and count.
    pub gap_in_transfer: (u64, u64),
    /// Last data transaction of a transfer to the first of the next.
    pub gap_between_transfers: (u64, u64),
    /// First refused transaction of a transfer to its first data.
    pub nak_span: (u64, u64),
    /// Last ACK of a transfer to the next token on that pipe.
    pub first_token_after_transfer: (u64, u64),
}

/// The simulation's totals over the measured window.
#[derive(Debug, Clone, PartialEq)]
pub struct Totals {
    /// Length of the window.
    pub window: u64,
    /// Ticks per category, indexed by `Cat as usize`; they sum to `window`.
    pub cats: [u64; CATS],
    pub bulk_in: Option<PipeTotals>,
    pub bulk_out: Option<PipeTotals>,
    /// The periodic endpoint's bytes and transactions.
    pub periodic: Option<PipeTotals>,
    /// (Micro)frames in the window.
    pub frames: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Data moved: n bytes.
    Data(u32),
    /// Device refused (NAK to IN or PING, or OUT data refused).
    Refused,
    /// PING answered ACK: the next OUT data will be taken.
    PingAck,
}

struct Pipe {
    out: bool,
    size: u32,
    /// Ready times of submitted transfers not yet started (monotonic).
    host_queue: VecDeque<u64>,
    host_left: Option<u32>,
    /// Earliest token of the next transfer (the controller retiring the
    /// last one).
    next_token: u64,
    dev_queue: VecDeque<u64>,
    dev_left: Option<u32>,
    dev_busy_until: u64,
    /// High-speed OUT: the device said NAK or NYET, so the host asks with
    /// PING before it sends data again.
    ping: bool,
    /// The current transfer has moved data.
    moved: bool,
    last_data_end: u64,
    /// End of the last transfer, while no token followed it yet / while
    /// its successor moved no data yet.
    after_transfer: Option<u64>,
    token_pending: bool,
    first_nak: Option<u64>,
    t: PipeTotals,
}

impl Pipe {
    fn new(out: bool, w: &Workload, device_depth: u32) -> Pipe {
        Pipe {
            out,
            size: w.size,
            host_queue: (0..w.depth.max(1)).map(|_| 0).collect(),
            host_left: None,
            next_token: 0,
            dev_queue: (0..device_depth.max(1)).map(|_| 0).collect(),
            dev_left: None,
            dev_busy_until: 0,
            ping: false,
            moved: false,
            last_data_end: 0,
            after_transfer: None,
            token_pending: false,
            first_nak: None,
            t: PipeTotals::default(),
        }
    }

    /// When the host has a transfer on this pipe to issue a token for.
    fn host_at(&self) -> u64 {
        if self.host_left.is_some() {
            0
        } else {
            let ready = self.host_queue.front().copied().unwrap_or(u64::MAX);
            ready.max(self.next_token)
        }
    }

    /// When the device can take or give the next packet.
    fn device_at(&self) -> u64 {
        let req = if self.dev_left.is_some() {
            0
        } else {
            self.dev_queue.front().copied().unwrap_or(u64::MAX)
        };
        req.max(self.dev_busy_until)
    }
}

/// One simulation run.
pub struct Sim<'a> {
    p: &'a Profile,
    now: u64,
    next_sof: u64,
    /// The controller's next token, after the gap of the last transaction.
    hc_free: u64,
    hc_cause: Cat,
    rr: usize,
    pipes: Vec<Pipe>,
    periodic: Option<(Periodic, PipeTotals)>,
    /// SOFs so far: the periodic endpoint is due when this is a multiple
    /// of its interval.
    sofs: u64,
    cats: [u64; CATS],
    frames: u64,
    w0: u64,
    w1: u64,
}

impl<'a> Sim<'a> {
    /// Runs `w` on `p` for `warmup + window` ticks and returns the totals
    /// of the last `window` ticks.
    pub fn run(p: &'a Profile, w: &Workload, warmup: u64, window: u64) -> Totals {
        let ddepth = w.device_depth.unwrap_or(p.device.depth);
        let mut pipes = Vec::new();
        if w.bulk_in {
            pipes.push(Pipe::new(false, w, ddepth));
        }
        if w.bulk_out {
            pipes.push(Pipe::new(true, w, ddepth));
        }
        let mut sim = Sim {
            p,
            now: 0,
            next_sof: 0,
            hc_free: 0,
            hc_cause: Cat::HostGap,
            rr: 0,
            pipes,
            periodic: w.periodic.map(|per| (per, PipeTotals::default())),
            sofs: 0,
            cats: [0; CATS],
            frames: 0,
            w0: warmup,
            w1: warmup + window,
        };
        if (w.size > 0 && !sim.pipes.is_empty()) || sim.periodic.is_some() {
            sim.go();
        } else {
            sim.cats[Cat::HostTurnaround as usize] = window;
        }
        let mut bulk_in = None;
        let mut bulk_out = None;
        for pipe in sim.pipes {
            if pipe.out {
                bulk_out = Some(pipe.t);
            } else {
                bulk_in = Some(pipe.t);
            }
        }
        Totals {
            window,
            cats: sim.cats,
            bulk_in,
            bulk_out,
            periodic: sim.periodic.map(|(_, t)| t),
            frames: sim.frames,
        }
    }

    fn in_window(&self, t: u64) -> bool {
        t > self.w0 && t <= self.w1
    }

    fn charge(&mut self, cat: Cat, a: u64, b: u64) {
        let lo = a.max(self.w0);
        let hi = b.min(self.w1);
        if hi > lo {
            self.cats[cat as usize] += hi - lo;
        }
    }

    fn go(&mut self) {
        let phy = self.p.phy;
        let sof = phy.sof();
        while self.now < self.w1 {
            if self.now >= self.next_sof {
                let start = self.next_sof;
                self.charge(Cat::WireOverhead, start, start + sof);
                if self.in_window(start + 1) {
                    self.frames += 1;
                }
                self.now = start + sof;
                self.next_sof = start + phy.frame;
                self.serve_periodic();
                self.sofs += 1;
                continue;
            }
            // The pipe the controller serves next: the earliest one able to
            // go, ties broken round-robin from the one after the last.
            let n = self.pipes.len();
            let mut best = (u64::MAX, 0, Cat::HostTurnaround);
            for k in 0..n {
                let i = (self.rr + k) % n;
                let host = self.pipes[i].host_at();
                let (t, cause) = if self.hc_free >= host {
                    (self.hc_free, self.hc_cause)
                } else {
                    (host, Cat::HostTurnaround)
                };
                if t < best.0 {
                    best = (t, i, cause);
                }
            }
            let (t, i, cause) = best;
            if t > self.now {
                let until = t.min(self.next_sof);
                self.charge(cause, self.now, until);
                self.now = until;
                continue;
            }
            let (dur, kind) = self.plan(i);
            if self.now + dur > self.next_sof {
                // USB 2.0 section 8.4.3.2: the host starts no transaction
                // that would not end before the next SOF.
                self.charge(Cat::FrameEnd, self.now, self.next_sof);
                self.now = self.next_sof;
                continue;
            }
            self.execute(i, dur, kind);
            self.rr = (i + 1) % n;
        }
    }

    /// Right after SOF: the periodic endpoint's transactions, if it is due
    /// in this (micro)frame, with the host's gap between them. Checked
    /// endpoints always fit: at most 3 x 1024 bytes take 54 us of a
    /// 125 us microframe, 1023 bytes 691 us of a 1 ms frame.
    fn serve_periodic(&mut self) {
        let Some((per, _)) = self.periodic else {
            return;
        };
        if !self.sofs.is_multiple_of(u64::from(per.interval.max(1))) {
            return;
        }
        let phy = self.p.phy;
        let dur = per.transaction(&phy);
        let payload = phy.payload(per.size);
        for k in 0..per.mult {
            if k > 0 {
                let gap = self.p.host.transaction_gap;
                self.charge(Cat::HostGap, self.now, self.now + gap);
                self.now += gap;
            }
            let start = self.now;
            let end = start + dur;
            self.charge(Cat::WirePayload, start, start + payload);
            self.charge(Cat::WireOverhead, start + payload, end);
            if self.in_window(end) {
                if let Some((_, t)) = &mut self.periodic {
                    t.bytes += u64::from(per.size);
                    t.transactions += 1;
                }
            }
            self.now = end;
        }
    }

    /// What the next transaction on pipe `i` at `now` is and how long it
    /// takes on the wire.
    fn plan(&self, i: usize) -> (u64, Kind) {
        let phy = &self.p.phy;
        let pipe = &self.pipes[i];
        let host_left = pipe.host_left.unwrap_or(pipe.size);
        let ready = pipe.device_at() <= self.now;
        let dev_left = pipe.dev_left.unwrap_or(pipe.size);
        let n = phy.max_packet.min(host_left).min(dev_left);
        if !pipe.out {
            if ready {
                (phy.transaction(n), Kind::Data(n))
            } else {
                (phy.poll(), Kind::Refused)
            }
        } else if pipe.ping {
            (
                phy.poll(),
                if ready { Kind::PingAck } else { Kind::Refused },
            )
        } else if ready {
            (phy.transaction(n), Kind::Data(n))
        } else {
            // OUT data sent and refused: the whole packet crossed the bus.
            (phy.transaction(n), Kind::Refused)
        }
    }

    fn execute(&mut self, i: usize, dur: u64, kind: Kind) {
        let (p, phy) = (self.p, self.p.phy);
        let start = self.now;
        let end = start + dur;
        let counted = self.in_window(end);
        let high_speed = phy.speed == Speed::High;
        let pipe = &mut self.pipes[i];
        if pipe.host_left.is_none() {
            pipe.host_queue.pop_front();
            pipe.host_left = Some(pipe.size);
            pipe.moved = false;
        }
        if pipe.token_pending {
            pipe.token_pending = false;
            if let (Some(done), true) = (pipe.after_transfer, counted) {
                pipe.t.first_token_after_transfer.0 += start - done;
                pipe.t.first_token_after_transfer.1 += 1;
            }
        }
        let (cat_gap, mut gap) = match kind {
            Kind::Data(n) => {
                if pipe.dev_left.is_none() {
                    pipe.dev_queue.pop_front();
                    pipe.dev_left = Some(pipe.size);
                }
                let host_left = pipe.host_left.unwrap_or(0) - n;
                let dev_left = pipe.dev_left.unwrap_or(0) - n;
                let short = n < phy.max_packet;
                if counted {
                    pipe.t.bytes += n as u64;
                    pipe.t.transactions += 1;
                    if pipe.moved {
                        pipe.t.gap_in_transfer.0 += start - pipe.last_data_end;
                        pipe.t.gap_in_transfer.1 += 1;
                    } else if let Some(done) = pipe.after_transfer {
                        pipe.t.gap_between_transfers.0 += start - done;
                        pipe.t.gap_between_transfers.1 += 1;
                    }
                    if let (Some(first), false) = (pipe.first_nak, pipe.moved) {
                        pipe.t.nak_span.0 += start - first;
                        pipe.t.nak_span.1 += 1;
                    }
                }
                pipe.first_nak = None;
                pipe.moved = true;
                pipe.last_data_end = end;
                if short || dev_left == 0 {
                    pipe.dev_left = None;
                    pipe.dev_queue
                        .push_back(end + p.device.latency + p.device.dma_per_transfer);
                } else {
                    pipe.dev_left = Some(dev_left);
                }
                if pipe.out {
                    if let Some(dma) = p.device.out_dma_per_packet {
                        pipe.dev_busy_until = end + dma;
                    }
                    // High speed: NYET instead of ACK when the device will
                    // not take the next packet at once (section 8.5.1).
                    pipe.ping = high_speed && pipe.device_at() > end;
                }
                let payload = phy.payload(n);
                self.charge(Cat::WirePayload, start, start + payload);
                self.charge(Cat::WireOverhead, start + payload, end);
                let pipe = &mut self.pipes[i];
                if short || host_left == 0 {
                    pipe.host_left = None;
                    if counted {
                        pipe.t.transfers += 1;
                    }
                    let irq = p.host.irq_interval;
                    let seen = if irq == 0 {
                        end
                    } else {
                        end.div_ceil(irq) * irq
                    };
                    pipe.host_queue.push_back(seen + p.host.resubmit);
                    pipe.next_token = end + p.host.queued_gap;
                    pipe.after_transfer = Some(end);
                    pipe.token_pending = true;
                    (Cat::HostTurnaround, p.host.queued_gap)
                } else {
                    pipe.host_left = Some(host_left);
                    (Cat::HostGap, p.host.transaction_gap)
                }
            }
            Kind::Refused => {
                if counted {
                    pipe.t.naks += 1;
                }
                if pipe.first_nak.is_none() && !pipe.moved {
                    pipe.first_nak = Some(start);
                }
                if pipe.out && high_speed {
                    pipe.ping = true;
                }
                self.charge(Cat::Device, start, end);
                (Cat::Device, p.host.nak_gap)
            }
            Kind::PingAck => {
                pipe.ping = false;
                self.charge(Cat::Device, start, end);
                (Cat::Device, p.host.transaction_gap)
            }
        };
        if let Some(tt) = p.tt {
            // Behind a hub: each full-speed transaction is a start-split and
            // a complete-split on the high-speed side, each a transaction of
            // the host's schedule with its gap. With two or more TT buffers
            // the full-speed segment works on the next transaction while the
            // host collects the last one.
            let n = match kind {
                Kind::Data(n) => n,
                _ => 0,
            };
            let split = 2 * tt.hs.token()
                + tt.hs.poll()
                + tt.hs.transaction(n)
                + 2 * p.host.transaction_gap;
            gap = if tt.buffers >= 2 {
                gap.max(split.saturating_sub(dur))
            } else {
                gap + split
            };
        }
        self.hc_free = end + gap;
        self.hc_cause = cat_gap;
        self.now = end;
    }
}
