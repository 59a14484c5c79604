//! CCID2, TCP-like congestion control (RFC 4341): a packet-counting
//! congestion window with slow start and halving, losses and ECN marks
//! read from Ack Vectors, an RTO, and the receiver that acknowledges every
//! Ack Ratio data packets with an Ack Vector.

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Time;

use super::{Arrival, CcidConfig, CcidRx, CcidState, CcidTx, Feedback};
use crate::dccp::ackvec::{RecvHistory, Runs, State};
use crate::dccp::options::{Opt, Options};
use crate::dccp::packet::PacketWriter;
use crate::dccp::seq::Seq;
use crate::dccp::DccpError;

/// Packets acknowledged after a hole that declare it lost (RFC 4341 sec.
/// 5, TCP's three duplicate acks).
const NUMDUPACK: usize = 3;
/// RTO floor. RFC 2988 says 1 s; 200 ms is what Linux's CCID2 and TCP
/// use, and a 1 s floor would idle a 94 ms path for ten RTTs after a
/// tail loss.
const MIN_RTO: Duration = Duration::from_millis(200);
const MAX_RTO: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
struct Sent {
    seq: Seq,
    at: Time,
    acked: bool,
}

/// The CCID2 sender.
#[derive(Debug)]
pub struct Ccid2Tx {
    cwnd: u64,
    ssthresh: u64,
    /// Data packets in flight, oldest first; acked ones stay until the
    /// front moves past them so later holes keep their NUMDUPACK count.
    flight: VecDeque<Sent>,
    pipe: u64,
    /// The most packets in flight so far: the window the sender has used.
    used: u64,
    acked_in_flight: usize,
    /// Packets acked in congestion avoidance towards the next +1.
    ca_acked: u64,
    /// No new halving for losses of packets sent before this one (one
    /// reduction per window of data, RFC 4341 sec. 5).
    recovery_until: Option<Seq>,
    last_sent: Option<Seq>,
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    rto_at: Option<Time>,
    /// Counts for tests and results.
    pub losses: u64,
    pub ecn_marks: u64,
}

impl Ccid2Tx {
    pub fn new(cfg: &CcidConfig) -> Self {
        // Initial window per RFC 3390: min(4 MSS, max(2 MSS, 4380 B)).
        let mss = cfg.mss.max(1) as u64;
        let iw = (4 * mss).min((2 * mss).max(4380)) / mss;
        Ccid2Tx {
            cwnd: iw.max(1),
            ssthresh: u64::MAX,
            flight: VecDeque::new(),
            pipe: 0,
            used: 0,
            acked_in_flight: 0,
            ca_acked: 0,
            recovery_until: None,
            last_sent: None,
            srtt: None,
            rttvar: Duration::ZERO,
            rto: Duration::from_secs(1),
            rto_at: None,
            losses: 0,
            ecn_marks: 0,
        }
    }

    pub fn cwnd(&self) -> u64 {
        self.cwnd
    }

    fn index_of(&self, s: Seq) -> Option<usize> {
        let front = self.flight.front()?.seq;
        let d = s.dist(front);
        if d < 0 {
            return None;
        }
        // Data packets are in seq order with gaps for non-data ones:
        // binary search.
        self.flight
            .binary_search_by(|e| e.seq.dist(front).cmp(&d))
            .ok()
    }

    fn rtt_sample(&mut self, r: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let diff = s.abs_diff(r);
                self.rttvar = self.rttvar * 3 / 4 + diff / 4;
                self.srtt = Some(s * 7 / 8 + r / 8);
            }
        }
        let s = self.srtt.unwrap_or(r);
        self.rto = (s + 4 * self.rttvar).clamp(MIN_RTO, MAX_RTO);
    }

    fn congestion_event(&mut self, seq: Seq) {
        if self.recovery_until.is_some_and(|r| !seq.after(r)) {
            return;
        }
        self.ssthresh = (self.cwnd / 2).max(2);
        self.cwnd = self.ssthresh;
        self.ca_acked = 0;
        self.recovery_until = self.last_sent;
    }

    fn on_acked(&mut self) {
        // Grow only a window in use (RFC 7661's cwnd validation, as Linux's
        // CCID2): a CPU-limited sender that never filled its window let
        // slow start run to 137000 packets, 15x the lab's 1 Gbit/s x 94 ms
        // path, and the loss that followed halved a window it had never
        // filled, several times over (330 Mbit/s after).
        let limited = self.used * 2 <= self.cwnd;
        self.pipe = self.pipe.saturating_sub(1);
        if limited {
            return;
        }
        if self.cwnd < self.ssthresh {
            self.cwnd += 1;
        } else {
            self.ca_acked += 1;
            if self.ca_acked >= self.cwnd {
                self.ca_acked = 0;
                self.cwnd += 1;
            }
        }
    }
}

impl CcidTx for Ccid2Tx {
    fn on_packet_sent(&mut self, now: Time, seq: Seq, _bytes: usize, data: bool) {
        if !data {
            return;
        }
        self.flight.push_back(Sent {
            seq,
            at: now,
            acked: false,
        });
        self.pipe += 1;
        self.used = self.used.max(self.pipe);
        self.last_sent = Some(seq);
        if self.rto_at.is_none() {
            self.rto_at = Some(now + self.rto);
        }
    }

    fn on_ack(&mut self, now: Time, fb: &Feedback<'_>) {
        let mut progress = false;
        for o in Options::new(fb.options).flatten() {
            let (Opt::AckVector { cells, .. }, _) = o else {
                continue;
            };
            let Some(front) = self.flight.front().map(|e| e.seq) else {
                break;
            };
            for run in Runs::new(fb.ack, cells) {
                if run.last.before(front) {
                    break;
                }
                if run.state == State::NotReceived {
                    continue;
                }
                // Walk the in-flight packets inside this run.
                let lo = if run.first().before(front) {
                    front
                } else {
                    run.first()
                };
                let start = match self.index_of(lo) {
                    Some(i) => i,
                    None => self
                        .flight
                        .partition_point(|e| e.seq.dist(front) < lo.dist(front)),
                };
                for i in start..self.flight.len() {
                    let e = self.flight[i];
                    if !run.contains(e.seq) {
                        break;
                    }
                    if e.acked {
                        continue;
                    }
                    self.flight[i].acked = true;
                    self.acked_in_flight += 1;
                    progress = true;
                    if e.seq == fb.ack {
                        self.rtt_sample(now.duration_since(e.at));
                    }
                    if run.state == State::ReceivedEcnMarked {
                        self.ecn_marks += 1;
                        self.pipe = self.pipe.saturating_sub(1);
                        self.congestion_event(e.seq);
                    } else {
                        self.on_acked();
                    }
                }
            }
        }
        // Pop acknowledged packets; a hole with NUMDUPACK acked packets
        // behind it is a loss.
        while let Some(&e) = self.flight.front() {
            if e.acked {
                self.flight.pop_front();
                self.acked_in_flight -= 1;
            } else if self.acked_in_flight >= NUMDUPACK {
                self.flight.pop_front();
                self.pipe = self.pipe.saturating_sub(1);
                self.losses += 1;
                self.congestion_event(e.seq);
            } else {
                break;
            }
        }
        if progress {
            self.rto_at = (self.pipe > 0).then(|| now + self.rto);
        }
    }

    fn on_timeout(&mut self, now: Time) {
        if self.rto_at.is_none_or(|t| now < t) {
            return;
        }
        if self.pipe == 0 {
            self.rto_at = None;
            return;
        }
        // RTO: everything in flight is lost; restart from one packet.
        self.ssthresh = (self.cwnd / 2).max(2);
        self.cwnd = 1;
        self.ca_acked = 0;
        self.losses += self.pipe;
        self.pipe = 0;
        self.flight.clear();
        self.acked_in_flight = 0;
        self.recovery_until = self.last_sent;
        self.rto = (self.rto * 2).min(MAX_RTO);
        self.rto_at = None;
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.rto_at
    }

    fn can_send(&self, _now: Time) -> bool {
        self.pipe < self.cwnd
    }

    fn next_send_time(&self) -> Option<Time> {
        None
    }

    fn ccval(&mut self, _now: Time) -> u8 {
        0
    }

    fn state(&self) -> CcidState {
        CcidState::Ccid2 {
            cwnd: self.cwnd,
            pipe: self.pipe,
            ssthresh: self.ssthresh,
            rtt: self.srtt,
        }
    }
}

/// Most Ack Vector cells per acknowledgement (one option holds 253).
const MAX_CELLS: usize = 253;
/// Longest a received data packet waits for its acknowledgement when
/// fewer than Ack Ratio packets arrive (TCP's delayed-ack bound is 40 ms;
/// shorter keeps a small window from stalling on short paths).
const ACK_DELAY: Duration = Duration::from_millis(10);

/// The CCID2 receiver: an Ack Vector history, and an acknowledgement per
/// Ack Ratio data packets.
#[derive(Debug)]
pub struct Ccid2Rx {
    history: RecvHistory,
    ack_ratio: u64,
    unacked: u64,
    first_unacked_at: Option<Time>,
    /// (our ack packet, the newest packet its Ack Vector described).
    sent_acks: VecDeque<(Seq, Seq)>,
}

impl Ccid2Rx {
    pub fn new(cfg: &CcidConfig) -> Self {
        Ccid2Rx {
            // 64 cells per run and 253 cells: the longest loss-free
            // history one option can describe.
            history: RecvHistory::new(MAX_CELLS * 64),
            ack_ratio: cfg.ack_ratio.max(1),
            unacked: 0,
            first_unacked_at: None,
            sent_acks: VecDeque::new(),
        }
    }
}

impl CcidRx for Ccid2Rx {
    fn on_packet(&mut self, now: Time, a: &Arrival) {
        self.history.record(a.seq, a.ecn_ce);
        if a.data {
            self.unacked += 1;
            self.first_unacked_at.get_or_insert(now);
        }
    }

    fn on_peer_ack(&mut self, ack: Seq) {
        // Once the peer has our ack packet, the history it described is
        // known to the peer (sec. 11.4.2).
        let mut upto = None;
        while let Some(&(ours, head)) = self.sent_acks.front() {
            if ours.after(ack) {
                break;
            }
            upto = Some(head);
            self.sent_acks.pop_front();
        }
        if let Some(h) = upto {
            // Keep a little overlap so a late ack loss does not blind the
            // sender to the newest packets.
            self.history.forget_through(h.sub(self.ack_ratio * 4));
        }
    }

    fn ack_due(&self, now: Time) -> bool {
        self.unacked >= self.ack_ratio
            || self
                .first_unacked_at
                .is_some_and(|t| now.duration_since(t) >= ACK_DELAY)
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.first_unacked_at.map(|t| t + ACK_DELAY)
    }

    fn write_feedback(
        &mut self,
        _now: Time,
        our_seq: Seq,
        ack: Seq,
        w: &mut PacketWriter<'_>,
    ) -> Result<(), DccpError> {
        self.unacked = 0;
        self.first_unacked_at = None;
        if self.history.head() != Some(ack) {
            return Ok(());
        }
        let mut cells = [0u8; MAX_CELLS];
        let room = w.room().saturating_sub(2).min(MAX_CELLS);
        let n = self.history.encode(&mut cells[..room]);
        w.option(&Opt::AckVector {
            nonce: false,
            cells: &cells[..n],
        })?;
        self.sent_acks.push_back((our_seq, ack));
        if self.sent_acks.len() > 1024 {
            self.sent_acks.pop_front();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dccp::checksum::Pseudo;
    use crate::dccp::packet::{parse, Body, Header};

    fn cfg() -> CcidConfig {
        CcidConfig {
            mss: 1400,
            ack_ratio: 1,
            handshake_rtt: None,
            safeudp: Default::default(),
        }
    }

    /// The receiver's real acknowledgement for what it has seen, as bytes.
    fn ack_bytes(rx: &mut Ccid2Rx, now: Time, ack: Seq, buf: &mut [u8]) -> usize {
        let h = Header {
            src_port: 2,
            dst_port: 1,
            ccval: 0,
            cscov: 0,
            long: true,
            seq: Seq::new(9),
            body: Body::Ack { ack },
        };
        let mut w = PacketWriter::new(buf, &h).unwrap();
        rx.write_feedback(now, Seq::new(9), ack, &mut w).unwrap();
        w.finish(&[], &Pseudo::None).unwrap()
    }

    /// Sends whatever the window allows each round trip, drops the packets
    /// the pattern names, acks the rest through a real Ccid2Rx and Ack
    /// Vectors; returns cwnd after each round.
    fn sawtooth(rounds: usize, drop: impl Fn(u64) -> bool) -> (Vec<u64>, Ccid2Tx) {
        let t0 = Time::ZERO;
        let rtt = Duration::from_millis(50);
        let mut tx = Ccid2Tx::new(&cfg());
        let mut rx = Ccid2Rx::new(&cfg());
        let mut next = 1u64;
        let mut out = Vec::new();
        let mut buf = [0u8; 1500];
        for r in 0..rounds {
            let now = t0 + rtt * r as u32;
            let mut sent = Vec::new();
            while tx.can_send(now) {
                tx.on_packet_sent(now, Seq::new(next), 1400, true);
                sent.push(next);
                next += 1;
            }
            let back = now + rtt;
            for s in sent {
                if drop(s) {
                    continue;
                }
                rx.on_packet(
                    back,
                    &Arrival {
                        seq: Seq::new(s),
                        data: true,
                        ccval: 0,
                        ndp: 0,
                        bytes: 1400,
                        ecn_ce: false,
                        arrived: back,
                    },
                );
                let n = ack_bytes(&mut rx, back, Seq::new(s), &mut buf);
                let p = parse(&buf[..n]).unwrap();
                tx.on_ack(
                    back,
                    &Feedback {
                        ack: Seq::new(s),
                        options: p.options,
                        arrived: back,
                    },
                );
            }
            out.push(tx.cwnd());
        }
        (out, tx)
    }

    #[test]
    fn slow_start_doubles_then_halves_on_each_given_loss() {
        let (w, tx) = sawtooth(8, |_| false);
        assert_eq!(w, vec![6, 12, 24, 48, 96, 192, 384, 768]);
        assert_eq!(tx.losses, 0);
        // One loss at packet 100 (round 5, cwnd 96 sending 94..189).
        let (w, tx) = sawtooth(8, |s| s == 100);
        assert_eq!(tx.losses, 1);
        assert_eq!(&w[..5], &[6, 12, 24, 48, 96]);
        // Detected at the third ack after the hole, when cwnd had grown to
        // 96 + 6 + 3 = 105: halved once to 52, then one more per window.
        let CcidState::Ccid2 { ssthresh, .. } = tx.state() else {
            panic!()
        };
        assert_eq!(ssthresh, 52);
        assert_eq!(w[5], 53, "{w:?}");
        assert!(w[6] <= w[5] + 1 && w[7] <= w[6] + 1, "{w:?}");
    }

    #[test]
    fn the_sawtooth_follows_the_loss_pattern() {
        // A loss every 20 packets: each loss in a new window halves cwnd;
        // between losses it grows by one per window.
        let (w, tx) = sawtooth(40, |s: u64| s.is_multiple_of(20));
        assert!(tx.losses >= 10, "{}", tx.losses);
        let mut halvings = 0;
        for pair in w.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b < a {
                // Halved from what cwnd was at detection (>= a), plus at
                // most one window's growth: never deeper than half.
                assert!(b >= (a / 2).max(2) && b <= a / 2 + 2, "{a} -> {b} in {w:?}");
                halvings += 1;
            }
        }
        assert!(halvings >= 5, "{w:?}");
        // Loss every 20 packets keeps the window in the low tens.
        assert!(*w.iter().skip(10).max().unwrap() <= 40, "{w:?}");
        // No losses, no halving: strictly non-decreasing.
        let (w, _) = sawtooth(10, |s| s > 10_000);
        assert!(w.windows(2).all(|p| p[1] >= p[0]));
    }

    #[test]
    fn a_window_the_sender_does_not_fill_does_not_grow() {
        // Four packets in flight at most, acked one by one for a while:
        // slow start would reach hundreds; validation stops at 2 x 4.
        let t0 = Time::ZERO;
        let mut tx = Ccid2Tx::new(&cfg());
        let mut rx = Ccid2Rx::new(&cfg());
        let mut buf = [0u8; 1500];
        for s in 1..=400u64 {
            tx.on_packet_sent(t0, Seq::new(s), 1400, true);
            if s < 4 {
                continue;
            }
            let a = s - 3;
            rx.on_packet(
                t0,
                &Arrival {
                    seq: Seq::new(a),
                    data: true,
                    ccval: 0,
                    ndp: 0,
                    bytes: 1400,
                    ecn_ce: false,
                    arrived: t0,
                },
            );
            let n = ack_bytes(&mut rx, t0, Seq::new(a), &mut buf);
            let p = parse(&buf[..n]).unwrap();
            tx.on_ack(
                t0,
                &Feedback {
                    ack: Seq::new(a),
                    options: p.options,
                    arrived: t0,
                },
            );
        }
        assert_eq!(tx.cwnd(), 8);
    }

    #[test]
    fn one_halving_per_window_of_losses() {
        // Three losses in one window halve cwnd once.
        let (w, tx) = sawtooth(6, |s| (100..103).contains(&s));
        assert_eq!(tx.losses, 3);
        let CcidState::Ccid2 { ssthresh, cwnd, .. } = tx.state() else {
            panic!()
        };
        assert_eq!(ssthresh, 52, "105 halved once: {w:?}");
        assert!((52..=54).contains(&cwnd), "{cwnd}");
    }

    #[test]
    fn rto_collapses_the_window() {
        let t0 = Time::ZERO;
        let mut tx = Ccid2Tx::new(&cfg());
        for s in 1..=3 {
            tx.on_packet_sent(t0, Seq::new(s), 1400, true);
        }
        assert!(!tx.can_send(t0));
        let at = tx.poll_timeout().unwrap();
        assert_eq!(at, t0 + Duration::from_secs(1));
        tx.on_timeout(at);
        let CcidState::Ccid2 {
            cwnd,
            pipe,
            ssthresh,
            ..
        } = tx.state()
        else {
            panic!()
        };
        assert_eq!((cwnd, pipe, ssthresh), (1, 0, 2));
        assert!(tx.can_send(at));
    }
}
