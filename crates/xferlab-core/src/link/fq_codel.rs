//! FQ-CoDel (RFC 8290): packets hashed by their 5-tuple into flow queues,
//! each with its own CoDel state; a deficit round robin serves new (sparse)
//! flows before old (backlogged) ones, so a flow that sends little is never
//! stuck behind a bulk flow's standing queue. When the whole queue is over
//! its limit, packets are dropped from the head of the fattest flow.
//!
//! Like [`super::codel`], it decides at dequeue and keeps the waiting
//! packets itself; the pipeline asks for the next packet when the
//! serializer is free. Buckets allocate their queue on first use and keep
//! it, so a steady state allocates nothing.

use std::collections::VecDeque;

use super::aqm::Waiting;
use super::codel::{Codel, Verdict};
use super::config::QueueLimit;

/// Which list a flow is on (RFC 8290 section 4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    None,
    New,
    Old,
}

#[derive(Debug, Clone)]
struct Flow {
    queue: VecDeque<Waiting>,
    bytes: u64,
    deficit: i64,
    codel: Codel,
    list: List,
}

/// At most this many packets per overflow drop, as Linux's
/// `fq_codel_drop` (it drops up to half the fattest flow's bytes, in one
/// batch, so a burst over the limit costs one scan of the buckets, not one
/// per packet).
const DROP_BATCH: usize = 64;

#[derive(Debug, Clone)]
pub struct FqCodel {
    flows: Vec<Flow>,
    new_flows: VecDeque<u32>,
    old_flows: VecDeque<u32>,
    quantum: i64,
    perturbation: u32,
    bytes: u64,
    segments: u64,
    packets: usize,
    /// Arrival of the first packet that found the queue empty: a packet
    /// cannot start before the queue's oldest arrival (the link was idle).
    idle_arrival: u64,
    /// Flows that ever held a packet.
    pub flows_seen: u64,
}

impl FqCodel {
    pub fn new(target_ns: u64, interval_ns: u64, quantum: u32, flows: u32, seed: u64) -> Self {
        let flow = Flow {
            queue: VecDeque::new(),
            bytes: 0,
            deficit: 0,
            codel: Codel::new(target_ns, interval_ns),
            list: List::None,
        };
        FqCodel {
            flows: vec![flow; flows.max(1) as usize],
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
            quantum: i64::from(quantum.max(1)),
            perturbation: (seed ^ (seed >> 32)) as u32,
            bytes: 0,
            segments: 0,
            packets: 0,
            idle_arrival: 0,
            flows_seen: 0,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    #[cfg(test)]
    fn segments(&self) -> u64 {
        self.segments
    }

    pub fn len(&self) -> usize {
        self.packets
    }

    pub fn is_empty(&self) -> bool {
        self.packets == 0
    }

    /// The earliest a packet of the queue can start serialization.
    pub fn earliest_arrival(&self) -> Option<u64> {
        (!self.is_empty()).then_some(self.idle_arrival)
    }

    fn bucket(&self, flow: u32) -> usize {
        // A multiplicative mix of key and perturbation, then the high bits
        // scaled to the bucket count (no modulo bias worth measuring).
        let h = (flow ^ self.perturbation).wrapping_mul(0x9e37_79b9);
        ((u64::from(h) * self.flows.len() as u64) >> 32) as usize
    }

    /// Queues `w` on its flow; packets dropped to keep the queue within
    /// `limit` (from the head of the fattest flow, possibly `w` itself) go
    /// to `dropped`.
    pub fn push(
        &mut self,
        w: Waiting,
        flow: u32,
        limit: QueueLimit,
        dropped: &mut VecDeque<Waiting>,
    ) {
        if self.is_empty() {
            self.idle_arrival = w.arrival;
        }
        let i = self.bucket(flow);
        let f = &mut self.flows[i];
        if f.queue.capacity() == 0 {
            self.flows_seen += 1;
        }
        f.queue.push_back(w);
        f.bytes += w.wire_bytes;
        self.bytes += w.wire_bytes;
        self.segments += u64::from(w.segments);
        self.packets += 1;
        if f.list == List::None {
            f.list = List::New;
            f.deficit = self.quantum;
            self.new_flows.push_back(i as u32);
        }
        let over = |q: &Self| match limit {
            QueueLimit::Packets(n) => q.segments > n,
            QueueLimit::Bytes(b) => q.bytes > b,
        };
        if over(self) {
            self.drop_from_fattest(dropped);
        }
    }

    /// RFC 8290 section 4.1.3 (as Linux does it): up to half the fattest
    /// flow's bytes, at most [`DROP_BATCH`] packets, from its head.
    fn drop_from_fattest(&mut self, dropped: &mut VecDeque<Waiting>) {
        let Some(i) = (0..self.flows.len()).max_by_key(|&i| self.flows[i].bytes) else {
            return;
        };
        let f = &mut self.flows[i];
        let goal = f.bytes / 2;
        let mut freed = 0;
        for _ in 0..DROP_BATCH {
            let Some(w) = f.queue.pop_front() else { break };
            f.bytes -= w.wire_bytes;
            self.bytes -= w.wire_bytes;
            self.segments -= u64::from(w.segments);
            self.packets -= 1;
            freed += w.wire_bytes;
            dropped.push_back(w);
            if freed >= goal {
                break;
            }
        }
    }

    /// The next packet by deficit round robin and its flow's CoDel
    /// verdict at `start` (when the serializer takes it). Only packets
    /// that leave (not CoDel drops) are charged to the flow's deficit,
    /// as in Linux.
    pub fn dequeue(&mut self, start: u64) -> Option<(Waiting, Verdict)> {
        if self.is_empty() {
            return None;
        }
        loop {
            let (i, from_new) = match (self.new_flows.front(), self.old_flows.front()) {
                (Some(&i), _) => (i as usize, true),
                (None, Some(&i)) => (i as usize, false),
                (None, None) => return None,
            };
            let list = if from_new {
                &mut self.new_flows
            } else {
                &mut self.old_flows
            };
            let f = &mut self.flows[i];
            if f.deficit <= 0 {
                f.deficit += self.quantum;
                list.pop_front();
                f.list = List::Old;
                self.old_flows.push_back(i as u32);
                continue;
            }
            let Some(w) = f.queue.pop_front() else {
                // Empty: a new flow goes to the old list once (so it
                // cannot come back as new at once and starve old flows),
                // an old flow leaves the lists.
                list.pop_front();
                if from_new && !self.old_flows.is_empty() {
                    f.list = List::Old;
                    self.old_flows.push_back(i as u32);
                } else {
                    f.list = List::None;
                }
                continue;
            };
            f.bytes -= w.wire_bytes;
            self.bytes -= w.wire_bytes;
            self.segments -= u64::from(w.segments);
            self.packets -= 1;
            let start = start.max(w.arrival);
            let verdict = f.codel.decide(start, start - w.arrival, self.bytes, w.ect);
            if verdict != Verdict::Drop {
                f.deficit -= w.wire_bytes as i64;
            }
            return Some((w, verdict));
        }
    }

    /// Every waiting packet, for freeing buffers at shutdown.
    pub fn drain(&mut self) -> impl Iterator<Item = Waiting> + '_ {
        self.bytes = 0;
        self.segments = 0;
        self.packets = 0;
        self.new_flows.clear();
        self.old_flows.clear();
        self.flows.iter_mut().flat_map(|f| {
            f.bytes = 0;
            f.list = List::None;
            f.queue.drain(..)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn pkt(token: u32, arrival: u64, bytes: u64) -> Waiting {
        Waiting {
            token,
            arrival,
            copies: 1,
            segments: 1,
            wire_bytes: bytes,
            ect: false,
        }
    }

    /// Two always-backlogged flows with different packet sizes get the
    /// same bytes: the deficit counts bytes, not packets.
    #[test]
    fn backlogged_flows_share_bytes_not_packets() {
        let mut q = FqCodel::new(5 * MS, 100 * MS, 1514, 1024, 7);
        let mut dropped = VecDeque::new();
        let lim = QueueLimit::Packets(100_000);
        for n in 0..3000 {
            q.push(pkt(1, 0, 1500), 1, lim, &mut dropped);
            if n % 3 == 0 {
                // The small flow: 500 B packets, as many bytes in total.
                for _ in 0..9 {
                    q.push(pkt(2, 0, 500), 2, lim, &mut dropped);
                }
            }
        }
        assert_ne!(q.bucket(1), q.bucket(2), "the test needs two buckets");
        let (mut big, mut small) = (0u64, 0u64);
        // Below target sojourn: CoDel never drops.
        while big + small < 3_000_000 {
            let (w, v) = q.dequeue(0).unwrap();
            assert_eq!(v, Verdict::Pass);
            if w.token == 1 {
                big += w.wire_bytes
            } else {
                small += w.wire_bytes
            }
        }
        let share = big as f64 / (big + small) as f64;
        assert!((share - 0.5).abs() < 0.01, "big flow's share {share}");
        assert!(dropped.is_empty());
    }

    /// A sparse flow's packet leaves before a backlogged flow's queue.
    #[test]
    fn a_new_flow_goes_first() {
        let mut q = FqCodel::new(5 * MS, 100 * MS, 1514, 1024, 7);
        let mut dropped = VecDeque::new();
        let lim = QueueLimit::Packets(1000);
        for _ in 0..100 {
            q.push(pkt(1, 0, 1500), 1, lim, &mut dropped);
        }
        // The bulk flow has been served for a while: it is an old flow.
        for _ in 0..3 {
            assert_eq!(q.dequeue(0).unwrap().0.token, 1);
        }
        q.push(pkt(2, 1, 100), 2, lim, &mut dropped);
        assert_eq!(q.dequeue(1).unwrap().0.token, 2, "sparse flow first");
        assert_eq!(q.dequeue(1).unwrap().0.token, 1);
        assert_eq!(q.len(), 96);
    }

    /// Over the limit, the fattest flow loses packets from its head, up
    /// to half its bytes; the thin flow loses nothing.
    #[test]
    fn overflow_drops_from_the_fattest_flow() {
        let mut q = FqCodel::new(5 * MS, 100 * MS, 1514, 1024, 7);
        let mut dropped = VecDeque::new();
        let lim = QueueLimit::Packets(100);
        for t in 0..5 {
            q.push(pkt(2, t, 1500), 2, lim, &mut dropped);
        }
        for t in 0..96 {
            q.push(pkt(1000 + t as u32, t, 1500), 1, lim, &mut dropped);
        }
        // 101 packets > 100: the fat flow (96 packets) loses 48 from its
        // head.
        assert_eq!(dropped.len(), 48);
        assert!(dropped.iter().all(|w| w.token >= 1000));
        assert_eq!(dropped.front().unwrap().token, 1000, "from the head");
        assert_eq!(q.len(), 53);
        assert_eq!(q.segments(), 53);
        assert_eq!(q.drain().count(), 53);
        assert!(q.is_empty());
    }

    /// Each flow has its own CoDel: a bulk flow's standing queue is
    /// controlled (drops), while a sparse flow's packets, which never
    /// wait, are never dropped.
    #[test]
    fn codel_state_is_per_flow() {
        let mut q = FqCodel::new(5 * MS, 100 * MS, 1514, 1024, 7);
        let mut dropped = VecDeque::new();
        let lim = QueueLimit::Packets(100_000);
        let (mut bulk_drops, mut sparse_drops, mut sparse_sent) = (0, 0, 0);
        // The bulk flow arrives at 2 packets per serialization slot of
        // 0.12 ms (1500 B at 100 Mbit/s); the sparse flow one packet per
        // 10 ms.
        let slot = 120_000;
        for i in 0..20_000u64 {
            let now = i * slot;
            q.push(pkt(1, now, 1500), 1, lim, &mut dropped);
            q.push(pkt(1, now, 1500), 1, lim, &mut dropped);
            if i % 83 == 0 {
                q.push(pkt(2, now, 100), 2, lim, &mut dropped);
            }
            // One packet leaves per slot (drops do not use the slot).
            while let Some((w, v)) = q.dequeue(now) {
                match (w.token, v) {
                    (1, Verdict::Drop) => bulk_drops += 1,
                    (2, Verdict::Drop) => sparse_drops += 1,
                    (2, _) => {
                        sparse_sent += 1;
                        break;
                    }
                    _ => break,
                }
            }
        }
        assert!(bulk_drops > 100, "bulk drops {bulk_drops}");
        assert_eq!(sparse_drops, 0);
        assert!(sparse_sent > 200, "{sparse_sent}");
    }
}
