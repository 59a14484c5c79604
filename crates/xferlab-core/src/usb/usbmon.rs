//! Bus accounting without an analyzer, sans-IO: the events of usbmon's
//! binary interface (`/dev/usbmonN`, struct mon_bin_hdr, 64 bytes) parsed,
//! and a [`BusMeter`] that turns the bulk transfers of one device into per
//! direction counters: USB payload bytes, transfers, Ethernet frames per
//! transfer (decoded from the link's CDC framing, see [`crate::usb::net`])
//! and the bus share they used. Samples are deltas of the cumulative
//! counters between interval boundaries the driver picks.
//!
//! Capacity: a high-speed bulk endpoint moves at most 13 packets of 512
//! bytes per 125 µs microframe (USB 2.0 spec, table 5-10: 13 max-size bulk
//! transactions fit a microframe), 6656 B / 125 µs = 53.248 MB/s. Bus
//! shares are payload MB/s against that figure.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::usb::net::{count_frames, Encap};

/// Length of `struct mon_bin_hdr` as MON_IOCX_GETX returns it (Linux ≥ 2.6.31).
pub const MON_BIN_HDR_LEN: usize = 64;
/// High-speed bulk capacity, bytes per second (see the module docs).
pub const HS_BULK_CAPACITY_BPS: f64 = 13.0 * 512.0 * 8000.0;
/// Histogram buckets of frames per transfer: 0..=31 and "32 or more".
pub const FRAMES_BUCKETS: usize = 33;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Submit,
    Complete,
    Error,
}

/// One usbmon event (the header; its data follows separately).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonEvent {
    /// The URB's kernel address: pairs a submission with its completion.
    pub id: u64,
    pub kind: EventType,
    /// 0 iso, 1 interrupt, 2 control, 3 bulk.
    pub xfer_type: u8,
    /// Endpoint address, 0x80 set for IN.
    pub epnum: u8,
    pub devnum: u8,
    pub busnum: u16,
    /// 0 when data was captured.
    pub flag_data: u8,
    pub status: i32,
    /// Submitted length ('S') or actual length ('C').
    pub len_urb: u32,
    /// Bytes of data captured with the event.
    pub len_cap: u32,
    /// When usbmon saw it: wall clock (CLOCK_REALTIME), microseconds.
    pub ts_us: i64,
}

pub const XFER_BULK: u8 = 3;

impl MonEvent {
    pub fn parse(h: &[u8]) -> Option<MonEvent> {
        let h: &[u8; MON_BIN_HDR_LEN] = h.get(..MON_BIN_HDR_LEN)?.try_into().ok()?;
        let u32_at = |i: usize| u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        Some(MonEvent {
            id: u64::from_ne_bytes(h[0..8].try_into().ok()?),
            kind: match h[8] {
                b'S' => EventType::Submit,
                b'C' => EventType::Complete,
                b'E' => EventType::Error,
                _ => return None,
            },
            xfer_type: h[9],
            epnum: h[10],
            devnum: h[11],
            busnum: u16::from_ne_bytes([h[12], h[13]]),
            flag_data: h[15],
            status: u32_at(28) as i32,
            len_urb: u32_at(32),
            len_cap: u32_at(36),
            ts_us: i64::from_ne_bytes(h[16..24].try_into().ok()?) * 1_000_000
                + i64::from(u32_at(24) as i32),
        })
    }

    pub fn is_in(&self) -> bool {
        self.epnum & 0x80 != 0
    }
}

/// Cumulative counters of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirCounters {
    pub transfers: u64,
    pub bytes: u64,
    pub frames: u64,
    /// Bytes of those frames, framing excluded.
    pub frame_bytes: u64,
    /// Transfers whose captured data did not decode (or was not captured).
    pub undecoded: u64,
    pub errors: u64,
    pub frames_hist: [u64; FRAMES_BUCKETS],
}

impl Default for DirCounters {
    fn default() -> Self {
        DirCounters {
            transfers: 0,
            bytes: 0,
            frames: 0,
            frame_bytes: 0,
            undecoded: 0,
            errors: 0,
            frames_hist: [0; FRAMES_BUCKETS],
        }
    }
}

impl DirCounters {
    fn count(&mut self, bytes: u32, frames: Option<(u32, u64)>) {
        self.transfers += 1;
        self.bytes += u64::from(bytes);
        match frames {
            Some((n, fb)) => {
                self.frames += u64::from(n);
                self.frame_bytes += fb;
                self.frames_hist[(n as usize).min(FRAMES_BUCKETS - 1)] += 1;
            }
            None => self.undecoded += 1,
        }
    }

    /// The span from `prev` to `self`, `start_s..end_s`.
    pub fn sample(&self, prev: &DirCounters, start_s: f64, end_s: f64) -> BusSample {
        let secs = end_s - start_s;
        let bytes = self.bytes - prev.bytes;
        let transfers = self.transfers - prev.transfers;
        let frames = self.frames - prev.frames;
        let decoded = transfers - (self.undecoded - prev.undecoded);
        let rate = |v: f64| if secs > 0.0 { v / secs } else { 0.0 };
        let mut hist: Vec<u64> = (0..FRAMES_BUCKETS)
            .map(|i| self.frames_hist[i] - prev.frames_hist[i])
            .collect();
        while hist.last() == Some(&0) {
            hist.pop();
        }
        BusSample {
            start_s,
            end_s,
            bytes,
            frame_bytes: self.frame_bytes - prev.frame_bytes,
            transfers,
            transfers_per_second: rate(transfers as f64),
            frames,
            frames_per_transfer: if decoded > 0 {
                frames as f64 / decoded as f64
            } else {
                0.0
            },
            frames_per_transfer_hist: hist,
            undecoded: self.undecoded - prev.undecoded,
            errors: self.errors - prev.errors,
            mbytes_per_second: rate(bytes as f64) / 1e6,
            bus_percent: rate(bytes as f64) / HS_BULK_CAPACITY_BPS * 100.0,
        }
    }
}

/// One direction over one span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BusSample {
    pub start_s: f64,
    pub end_s: f64,
    /// USB payload bytes (framing included, packet overhead not).
    pub bytes: u64,
    /// Bytes of the Ethernet frames inside (framing excluded; decoded
    /// transfers only): `bytes - frame_bytes` is the encapsulation's cost.
    pub frame_bytes: u64,
    pub transfers: u64,
    pub transfers_per_second: f64,
    /// Ethernet frames decoded from the transfers.
    pub frames: u64,
    /// Mean over the decoded transfers.
    pub frames_per_transfer: f64,
    /// `[i]` = transfers holding i frames (the last bucket: 32 or more);
    /// trailing zeros cut.
    pub frames_per_transfer_hist: Vec<u64>,
    pub undecoded: u64,
    pub errors: u64,
    pub mbytes_per_second: f64,
    /// Of the high-speed bulk capacity, 53.248 MB/s.
    pub bus_percent: f64,
}

/// Counts the bulk transfers of one device (or every device on the bus).
#[derive(Debug, Clone)]
pub struct BusMeter {
    encap: Option<Encap>,
    devnum: Option<u8>,
    pub host_in: DirCounters,
    pub host_out: DirCounters,
    /// OUT submissions in flight: (URB id, frames decoded at submission).
    out_pending: VecDeque<(u64, Option<(u32, u64)>)>,
}

/// OUT URBs remembered between submission and completion; usbnet queues
/// at most a few dozen per endpoint, so older ones are stale (lost events).
const OUT_PENDING_MAX: usize = 256;

impl BusMeter {
    /// `encap`: how to count frames (None: bytes and transfers only);
    /// `devnum`: only this device address.
    pub fn new(encap: Option<Encap>, devnum: Option<u8>) -> Self {
        BusMeter {
            encap,
            devnum,
            host_in: DirCounters::default(),
            host_out: DirCounters::default(),
            out_pending: VecDeque::with_capacity(OUT_PENDING_MAX),
        }
    }

    fn frames(&self, ev: &MonEvent, data: &[u8]) -> Option<(u32, u64)> {
        let encap = self.encap?;
        if ev.flag_data != 0 || (ev.len_cap as usize) < (ev.len_urb as usize) {
            return None;
        }
        count_frames(encap, data.get(..ev.len_cap as usize)?)
    }

    /// One event with its captured data.
    pub fn record(&mut self, ev: &MonEvent, data: &[u8]) {
        if ev.xfer_type != XFER_BULK || self.devnum.is_some_and(|d| d != ev.devnum) {
            return;
        }
        match (ev.kind, ev.is_in()) {
            (EventType::Submit, false) => {
                if self.out_pending.len() == OUT_PENDING_MAX {
                    self.out_pending.pop_front();
                }
                let frames = self.frames(ev, data);
                self.out_pending.push_back((ev.id, frames));
            }
            (EventType::Complete, false) => {
                let frames = self
                    .out_pending
                    .iter()
                    .position(|(id, _)| *id == ev.id)
                    .and_then(|i| self.out_pending.remove(i))
                    .and_then(|(_, f)| f);
                if ev.status != 0 {
                    self.host_out.errors += 1;
                } else {
                    self.host_out.count(ev.len_urb, frames);
                }
            }
            (EventType::Complete, true) => {
                if ev.status != 0 {
                    // Unlinked receive URBs at shutdown are no bus traffic.
                    self.host_in.errors += u64::from(ev.len_urb > 0);
                } else {
                    let frames = self.frames(ev, data);
                    self.host_in.count(ev.len_urb, frames);
                }
            }
            (EventType::Submit, true) | (EventType::Error, _) => {}
        }
    }
}

/// The usbmon part of a result: the link's bulk traffic per direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BusReport {
    pub bus: u16,
    pub devnum: Option<u8>,
    /// The device's speed ("high", ...); the capacity below is high speed's.
    pub speed: Option<String>,
    pub encap: Option<Encap>,
    /// The link's knobs as the user recorded them (MTU, qmult, tx_max, ...).
    pub knobs: std::collections::BTreeMap<String, String>,
    /// Events usbmon dropped because its ring was full (then the counts
    /// are low by what those events carried).
    pub dropped_events: u64,
    /// The ring's size, bytes: it holds the events the reader has not
    /// fetched yet.
    #[serde(default)]
    pub ring_bytes: u64,
    /// How far the reader fell behind the bus at worst, ms: the age of the
    /// oldest event of a fetch. Events are dropped once that age reaches
    /// what the ring holds at the link's rate (~40 ms of an ECM link at
    /// 30 MB/s); a reader whose CPU was taken away lags by that long.
    #[serde(default)]
    pub reader_lag_max_ms: f64,
    /// The capacity the percentages refer to, bytes/s.
    pub capacity_bytes_per_second: f64,
    /// Device to host.
    pub host_in: BusDirection,
    /// Host to device.
    pub host_out: BusDirection,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BusDirection {
    pub intervals: Vec<BusSample>,
    pub total: BusSample,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::time::Time;
    use crate::usb::net::{Coalescer, EcmFraming, EemFraming, Limits};

    fn header(id: u64, kind: u8, ep: u8, len_urb: u32, len_cap: u32, status: i32) -> [u8; 64] {
        let mut h = [0u8; 64];
        h[0..8].copy_from_slice(&id.to_ne_bytes());
        h[8] = kind;
        h[9] = XFER_BULK;
        h[10] = ep;
        h[11] = 2;
        h[12..14].copy_from_slice(&1u16.to_ne_bytes());
        h[15] = if len_cap > 0 { 0 } else { b'<' };
        h[16..24].copy_from_slice(&1_700_000_000i64.to_ne_bytes());
        h[24..28].copy_from_slice(&250_000i32.to_ne_bytes());
        h[28..32].copy_from_slice(&status.to_ne_bytes());
        h[32..36].copy_from_slice(&len_urb.to_ne_bytes());
        h[36..40].copy_from_slice(&len_cap.to_ne_bytes());
        h
    }

    #[test]
    fn header_layout() {
        let h = header(0xdead, b'C', 0x81, 1514, 1514, -2);
        let e = MonEvent::parse(&h).unwrap();
        assert_eq!(
            (e.id, e.kind, e.epnum, e.devnum, e.busnum, e.status, e.len_urb),
            (0xdead, EventType::Complete, 0x81, 2, 1, -2, 1514)
        );
        assert_eq!(e.ts_us, 1_700_000_000_250_000);
        assert!(e.is_in());
        assert!(MonEvent::parse(&h[..63]).is_none());
        let mut bad = h;
        bad[8] = b'X';
        assert!(MonEvent::parse(&bad).is_none());
    }

    #[test]
    fn frames_per_transfer_and_bus_share() {
        let mut m = BusMeter::new(Some(Encap::Eem), Some(2));
        let mut eem = Coalescer::new(
            EemFraming::new(512, false),
            Limits {
                max_frames: 4,
                max_transfer: 16384,
                timeout: Duration::ZERO,
            },
        );
        for _ in 0..4 {
            eem.push(Time::ZERO, &[0u8; 1000]);
        }
        let t = eem.poll_transfer(Time::ZERO).unwrap().buf;
        let n = t.len() as u32;
        // IN: data comes with the completion.
        for id in 0..10 {
            let h = header(id, b'C', 0x81, n, n, 0);
            m.record(&MonEvent::parse(&h).unwrap(), &t);
        }
        // OUT: data with the submission, length with the completion.
        let mut ecm = Coalescer::new(
            EcmFraming::new(512),
            Limits {
                max_frames: 1,
                max_transfer: 1514,
                timeout: Duration::ZERO,
            },
        );
        ecm.push(Time::ZERO, &[1u8; 1514]);
        let one = ecm.poll_transfer(Time::ZERO).unwrap().buf;
        let mut m2 = BusMeter::new(Some(Encap::Ecm), None);
        for id in 100..105 {
            m2.record(
                &MonEvent::parse(&header(id, b'S', 0x02, 1514, 1514, 0)).unwrap(),
                &one,
            );
        }
        for id in 100..105 {
            m2.record(
                &MonEvent::parse(&header(id, b'C', 0x02, 1514, 0, 0)).unwrap(),
                &[],
            );
        }
        // Another device's and non-bulk traffic are not counted.
        let mut other = header(7, b'C', 0x81, n, n, 0);
        other[11] = 3;
        m.record(&MonEvent::parse(&other).unwrap(), &t);
        let s = m.host_in.sample(&DirCounters::default(), 0.0, 0.5);
        assert_eq!((s.transfers, s.frames, s.bytes), (10, 40, 10 * n as u64));
        assert_eq!(s.frames_per_transfer, 4.0);
        assert_eq!(s.frames_per_transfer_hist, vec![0, 0, 0, 0, 10]);
        assert!((s.mbytes_per_second - 20.0 * n as f64 / 1e6).abs() < 1e-9);
        assert!((s.bus_percent - s.mbytes_per_second * 1e6 / 53.248e6 * 100.0).abs() < 1e-9);
        let o = m2.host_out.sample(&DirCounters::default(), 0.0, 1.0);
        assert_eq!(
            (o.transfers, o.frames, o.bytes, o.undecoded),
            (5, 5, 5 * 1514, 0)
        );
        assert_eq!(o.frames_per_transfer_hist, vec![0, 5]);
        // Truncated captures count as undecoded, not as zero frames.
        let h = header(200, b'C', 0x81, n, 64, 0);
        m.record(&MonEvent::parse(&h).unwrap(), &t[..64]);
        assert_eq!(m.host_in.undecoded, 1);
        assert_eq!(HS_BULK_CAPACITY_BPS, 53_248_000.0);
    }
}
