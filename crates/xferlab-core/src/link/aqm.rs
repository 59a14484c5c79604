//! The queues that decide at dequeue: CoDel over one FIFO (RFC 8289) and
//! FQ-CoDel (RFC 8290). Packets wait here until the serializer is free;
//! the pipeline asks for the next one with the instant it starts, and
//! gets it with the queue discipline's verdict. Packets the queue drops
//! on its own (a full queue) are handed back through `overflow` so the
//! driver frees their buffers like any other departure.

use std::collections::VecDeque;

use super::codel::{Codel, Verdict};
use super::config::{Qdisc, QueueLimit};
use super::fq_codel::FqCodel;

/// A packet waiting for its dequeue. A duplicated packet waits once and
/// becomes its copies after the queue: its buffer is then held by one
/// entry only, so a drop here can free it (two queued copies could see
/// one dropped and freed while the other was still on the delay line).
#[derive(Debug, Clone, Copy)]
pub struct Waiting {
    pub token: u32,
    pub arrival: u64,
    /// Copies that leave if it passes (2: duplicated).
    pub copies: u8,
    pub segments: u32,
    pub wire_bytes: u64,
    pub ect: bool,
}

pub enum Aqm {
    Codel {
        codel: Codel,
        fifo: VecDeque<Waiting>,
        bytes: u64,
        segments: u64,
    },
    FqCodel(FqCodel),
}

impl Aqm {
    /// The dequeue-time discipline of `qdisc`, if it is one.
    pub fn new(qdisc: Qdisc, seed: u64) -> Option<Aqm> {
        match qdisc {
            Qdisc::DropTail => None,
            Qdisc::Codel {
                target_ns,
                interval_ns,
            } => Some(Aqm::Codel {
                codel: Codel::new(target_ns, interval_ns),
                fifo: VecDeque::new(),
                bytes: 0,
                segments: 0,
            }),
            Qdisc::FqCodel {
                target_ns,
                interval_ns,
                quantum,
                flows,
            } => Some(Aqm::FqCodel(FqCodel::new(
                target_ns,
                interval_ns,
                quantum,
                flows,
                seed,
            ))),
        }
    }

    pub fn bytes(&self) -> u64 {
        match self {
            Aqm::Codel { bytes, .. } => *bytes,
            Aqm::FqCodel(q) => q.bytes(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Aqm::Codel { fifo, .. } => fifo.len(),
            Aqm::FqCodel(q) => q.len(),
        }
    }

    /// Whether a packet of `wire_bytes` in `segments` is taken. CoDel's
    /// FIFO refuses it when full (a tail drop; an empty queue takes any
    /// packet, as a superpacket may be larger than a byte limit).
    /// FQ-CoDel takes every packet and makes room in `push`.
    pub fn accepts(&self, wire_bytes: u64, segments: u64, limit: QueueLimit) -> bool {
        match self {
            Aqm::Codel {
                fifo,
                bytes,
                segments: queued,
                ..
            } => {
                fifo.is_empty()
                    || match limit {
                        QueueLimit::Packets(n) => queued + segments <= n,
                        QueueLimit::Bytes(b) => bytes + wire_bytes <= b,
                    }
            }
            Aqm::FqCodel(_) => true,
        }
    }

    /// Queues `w` of flow `flow` (after [`Aqm::accepts`]). Over the limit,
    /// FQ-CoDel drops from its fattest flow into `overflow`.
    pub fn push(
        &mut self,
        w: Waiting,
        flow: u32,
        limit: QueueLimit,
        overflow: &mut VecDeque<Waiting>,
    ) {
        match self {
            Aqm::Codel {
                fifo,
                bytes,
                segments,
                ..
            } => {
                fifo.push_back(w);
                *bytes += w.wire_bytes;
                *segments += u64::from(w.segments);
            }
            Aqm::FqCodel(q) => q.push(w, flow, limit, overflow),
        }
    }

    /// The earliest instant the next packet can start: nothing before the
    /// link was idle and the first waiting packet arrived.
    pub fn earliest_arrival(&self) -> Option<u64> {
        match self {
            Aqm::Codel { fifo, .. } => fifo.front().map(|w| w.arrival),
            Aqm::FqCodel(q) => q.earliest_arrival(),
        }
    }

    /// The packet the serializer takes at `start`, with the verdict.
    pub fn dequeue(&mut self, start: u64) -> Option<(Waiting, Verdict)> {
        match self {
            Aqm::Codel {
                codel,
                fifo,
                bytes,
                segments,
            } => {
                let w = fifo.pop_front()?;
                *bytes -= w.wire_bytes;
                *segments -= u64::from(w.segments);
                let start = start.max(w.arrival);
                Some((w, codel.decide(start, start - w.arrival, *bytes, w.ect)))
            }
            Aqm::FqCodel(q) => q.dequeue(start),
        }
    }

    /// Flows that ever held a packet (FQ-CoDel), for the report.
    pub fn flows_seen(&self) -> Option<u64> {
        match self {
            Aqm::Codel { .. } => None,
            Aqm::FqCodel(q) => Some(q.flows_seen),
        }
    }

    /// Every waiting packet, for freeing buffers at shutdown.
    pub fn drain(&mut self) -> Vec<Waiting> {
        match self {
            Aqm::Codel {
                fifo,
                bytes,
                segments,
                ..
            } => {
                *bytes = 0;
                *segments = 0;
                fifo.drain(..).collect()
            }
            Aqm::FqCodel(q) => q.drain().collect(),
        }
    }
}
