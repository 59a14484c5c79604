//! The bottleneck: a FIFO serializer at a fixed bit rate or along a
//! trace's delivery opportunities, counting bytes per wire segment plus a
//! per-segment overhead, and the drop-tail queue in front of it
//! (everything admitted but not yet fully serialized).

use std::collections::VecDeque;

use super::config::QueueLimit;
use super::trace::{Trace, OPPORTUNITY_BYTES};
use super::usb::UsbSerializer;

#[derive(Debug, Clone)]
pub struct Shaper {
    rate_bps: Option<u64>,
    trace: Option<Trace>,
    /// With a trace: the opportunity in use and the bytes left in it.
    opportunity: Option<(u64, u64)>,
    overhead_bytes: u32,
    limit: QueueLimit,
    /// When the last admitted packet finishes serialization.
    free_at: u64,
    /// Fractional nanoseconds carried between packets (numerator over the
    /// rate), so rounding never accumulates into a rate error.
    carry: u128,
    /// Packets in the queue or in serialization: (finish, bytes, segments).
    backlog: VecDeque<(u64, u64, u64)>,
    backlog_bytes: u64,
    backlog_segments: u64,
    /// Busy period the last admitted packet belongs to.
    busy_period: u64,
    /// Frames timed as a USB network link carries them, instead of a rate.
    usb: Option<UsbSerializer>,
}

/// Where an admitted packet sits on the link's time line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// When serialization starts (the packet's queueing ends).
    pub start: u64,
    pub finish: u64,
    /// Increments whenever the link went idle before this packet; packets
    /// of one busy period leave back to back at the link rate.
    pub busy_period: u64,
}

impl Shaper {
    #[cfg(test)]
    pub fn new(rate_bps: Option<u64>, overhead_bytes: u32, limit: QueueLimit) -> Self {
        Self::with_trace(rate_bps, None, overhead_bytes, limit)
    }

    pub fn with_trace(
        rate_bps: Option<u64>,
        trace: Option<Trace>,
        overhead_bytes: u32,
        limit: QueueLimit,
    ) -> Self {
        let cap = match limit {
            QueueLimit::Packets(n) => (n as usize).clamp(16, 1 << 16),
            QueueLimit::Bytes(b) => ((b / 1000) as usize).clamp(16, 1 << 16),
        };
        Shaper {
            rate_bps,
            trace,
            opportunity: None,
            overhead_bytes,
            limit,
            free_at: 0,
            carry: 0,
            backlog: VecDeque::with_capacity(cap),
            backlog_bytes: 0,
            backlog_segments: 0,
            busy_period: 0,
            usb: None,
        }
    }

    /// Times frames as this USB link carries them instead of at a rate.
    pub fn set_usb(&mut self, usb: UsbSerializer) {
        self.usb = Some(usb);
    }

    /// Bus nanoseconds a packet of `wire_bytes` in `segments` frames
    /// costs on the USB link (None without one).
    pub fn usb_bus_ns(&self, wire_bytes: u64, segments: u64) -> Option<u64> {
        let usb = self.usb.as_ref()?;
        let segs = segments.max(1);
        Some(usb.bus_ns(wire_bytes / segs) * segs)
    }

    /// Bytes queued or in serialization at `now`.
    pub fn queue_bytes(&mut self, now: u64) -> u64 {
        self.expire(now);
        self.backlog_bytes
    }

    fn expire(&mut self, now: u64) {
        while let Some(&(finish, bytes, segs)) = self.backlog.front() {
            if finish > now {
                break;
            }
            self.backlog.pop_front();
            self.backlog_bytes -= bytes;
            self.backlog_segments -= segs;
        }
    }

    /// When the serializer is free for the next packet.
    pub fn free_at(&self) -> u64 {
        self.free_at
    }

    /// Would a packet of `wire_bytes` in `segments` fit the queue at `now`?
    pub fn fits(&mut self, now: u64, wire_bytes: u64, segments: u64) -> bool {
        self.expire(now);
        if self.rate_bps.is_none() && self.trace.is_none() && self.usb.is_none() {
            return true;
        }
        match self.limit {
            // An empty queue always takes one packet, even a superpacket
            // larger than the byte limit (else it could never pass).
            _ if self.backlog.is_empty() => true,
            QueueLimit::Packets(n) => self.backlog_segments + segments <= n,
            QueueLimit::Bytes(b) => self.backlog_bytes + wire_bytes <= b,
        }
    }

    /// Admits a packet arriving at `now`; returns when it is fully on the
    /// wire.
    pub fn admit(&mut self, now: u64, wire_bytes: u64, segments: u64) -> Slot {
        if self.trace.is_some() {
            return self.admit_trace(now, wire_bytes, segments);
        }
        if self.usb.is_some() {
            return self.admit_usb(now, wire_bytes, segments);
        }
        let Some(rate) = self.rate_bps else {
            return Slot {
                start: now,
                finish: now,
                busy_period: 0,
            };
        };
        let start = if self.free_at >= now {
            self.free_at
        } else {
            self.busy_period += 1;
            self.carry = 0;
            now
        };
        let bits = (wire_bytes + segments * u64::from(self.overhead_bytes)) * 8;
        let num = u128::from(bits) * 1_000_000_000 + self.carry;
        let ns = (num / u128::from(rate)) as u64;
        self.carry = num % u128::from(rate);
        self.free_at = start + ns;
        self.backlog.push_back((self.free_at, wire_bytes, segments));
        self.backlog_bytes += wire_bytes;
        self.backlog_segments += segments;
        Slot {
            start,
            finish: self.free_at,
            busy_period: self.busy_period,
        }
    }
}

impl Shaper {
    /// On a USB link: each segment is one Ethernet frame; the packet
    /// leaves when its last frame is carried.
    fn admit_usb(&mut self, now: u64, wire_bytes: u64, segments: u64) -> Slot {
        let usb = self.usb.as_mut().expect("a USB link");
        let segs = segments.max(1);
        let per = wire_bytes / segs;
        let mut slot = Slot {
            start: u64::MAX,
            finish: now,
            busy_period: 0,
        };
        for i in 0..segs {
            let bytes = if i + 1 == segs {
                wire_bytes - per * (segs - 1)
            } else {
                per
            };
            let (start, finish, period) = usb.frame(now, bytes);
            slot.start = slot.start.min(start);
            slot.finish = finish;
            slot.busy_period = period;
        }
        self.free_at = usb.free_at();
        self.busy_period = slot.busy_period;
        self.backlog.push_back((slot.finish, wire_bytes, segments));
        self.backlog_bytes += wire_bytes;
        self.backlog_segments += segments;
        slot
    }

    /// Along the trace, as mahimahi delivers: each opportunity carries up
    /// to 1500 bytes of the queue (a packet may span opportunities); one
    /// nobody uses is lost. The packet leaves at the opportunity that
    /// carries its last byte.
    fn admit_trace(&mut self, now: u64, wire_bytes: u64, segments: u64) -> Slot {
        let trace = self.trace.as_ref().expect("a trace");
        let (mut k, mut rem) = match self.opportunity {
            // Queued behind earlier packets: go on where they end.
            Some((k, rem)) if self.free_at >= now && rem > 0 => (k, rem),
            Some((k, _)) if self.free_at >= now => (k + 1, OPPORTUNITY_BYTES),
            // Idle: the first opportunity from now on.
            _ => {
                self.busy_period += 1;
                (trace.first_at_or_after(now), OPPORTUNITY_BYTES)
            }
        };
        let start = trace.time(k).max(now);
        let mut bytes = wire_bytes + segments * u64::from(self.overhead_bytes);
        while bytes > rem {
            bytes -= rem;
            k += 1;
            rem = OPPORTUNITY_BYTES;
        }
        rem -= bytes;
        self.opportunity = Some((k, rem));
        self.free_at = trace.time(k);
        self.backlog.push_back((self.free_at, wire_bytes, segments));
        self.backlog_bytes += wire_bytes;
        self.backlog_segments += segments;
        Slot {
            start,
            finish: self.free_at,
            busy_period: self.busy_period,
        }
    }

    /// Bits the trace could carry in (a, b]; None without a trace.
    pub fn trace_capacity_bits(&self, a: u64, b: u64) -> Option<f64> {
        let t = self.trace.as_ref()?;
        Some((t.count_between(a, b) * OPPORTUNITY_BYTES * 8) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_at_the_rate_with_overhead_and_no_drift() {
        let mut s = Shaper::new(Some(100_000_000), 38, QueueLimit::Packets(100_000));
        let mut last = 0;
        for _ in 0..10_000 {
            last = s.admit(0, 1500, 1).finish;
        }
        // 10 000 x 1538 bytes at 100 Mbit/s = 1.2304 s exactly.
        assert_eq!(last, 1_230_400_000);
        // An odd rate: the carried remainder keeps the total exact to 1 ns.
        let mut s = Shaper::new(Some(77_777_777), 0, QueueLimit::Packets(100_000));
        for _ in 0..10_000 {
            last = s.admit(0, 1500, 1).finish;
        }
        let exact = 10_000.0 * 1500.0 * 8.0 / 77_777_777.0 * 1e9;
        assert!((last as f64 - exact).abs() <= 1.0, "{last} vs {exact}");
    }

    #[test]
    fn superpacket_costs_its_segments() {
        let mut s = Shaper::new(Some(1_000_000_000), 10, QueueLimit::Packets(1000));
        // 44 segments, 66 000 wire bytes: (66 000 + 440) x 8 ns.
        assert_eq!(s.admit(0, 66_000, 44).finish, 531_520);
    }

    #[test]
    fn queue_limits_in_packets_and_bytes() {
        let mut s = Shaper::new(Some(8_000_000), 0, QueueLimit::Packets(3));
        // 1000 bytes at 8 Mbit/s = 1 ms each.
        for _ in 0..3 {
            assert!(s.fits(0, 1000, 1));
            s.admit(0, 1000, 1);
        }
        assert!(!s.fits(0, 1000, 1));
        assert!(s.fits(1_000_000, 1000, 1), "one left after 1 ms");
        let mut s = Shaper::new(Some(8_000_000), 0, QueueLimit::Bytes(2500));
        assert!(s.fits(0, 1000, 1));
        s.admit(0, 1000, 1);
        assert!(s.fits(0, 1000, 1));
        s.admit(0, 1000, 1);
        assert!(!s.fits(0, 1000, 1));
        assert!(s.fits(0, 500, 1));
        assert_eq!(s.queue_bytes(0), 2000);
        assert_eq!(s.queue_bytes(2_000_000), 0);
        // An empty queue takes a superpacket bigger than the limit.
        assert!(s.fits(2_000_000, 60_000, 40));
    }

    #[test]
    fn a_trace_delivers_1500_bytes_per_opportunity_and_wastes_idle_ones() {
        let t = Trace::mahimahi("t", "1\n2\n2\n4\n").unwrap();
        let mut s = Shaper::with_trace(None, Some(t), 0, QueueLimit::Packets(100));
        let ms = 1_000_000;
        // Back to back at 0: 1 ms, 2 ms, 2 ms, 4 ms, then 5 ms (next period).
        let f: Vec<u64> = (0..5).map(|_| s.admit(0, 1500, 1).finish).collect();
        assert_eq!(f, [ms, 2 * ms, 2 * ms, 4 * ms, 5 * ms]);
        // Two 750-byte packets share one opportunity; a 2000-byte one
        // spans two.
        let t = Trace::mahimahi("t", "1\n2\n3\n4\n").unwrap();
        let mut s = Shaper::with_trace(None, Some(t), 0, QueueLimit::Packets(100));
        assert_eq!(s.admit(0, 750, 1).finish, ms);
        assert_eq!(s.admit(0, 750, 1).finish, ms);
        assert_eq!(s.admit(0, 2000, 1).finish, 3 * ms);
        // Idle until 10.5 ms: the opportunities in between are lost.
        assert_eq!(s.admit(10 * ms + ms / 2, 100, 1).finish, 11 * ms);
        assert_eq!(s.trace_capacity_bits(0, 4 * ms), Some(4.0 * 12_000.0));
    }

    #[test]
    fn busy_periods_split_at_idle() {
        let mut s = Shaper::new(Some(8_000_000), 0, QueueLimit::Packets(10));
        let a = s.admit(0, 1000, 1);
        let b = s.admit(500_000, 1000, 1);
        let c = s.admit(5_000_000, 1000, 1);
        assert_eq!(a.busy_period, b.busy_period);
        assert_eq!(b.finish, 2_000_000);
        assert_ne!(b.busy_period, c.busy_period);
    }
}
