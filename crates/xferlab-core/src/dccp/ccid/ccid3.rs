//! CCID3, TFRC congestion control (RFC 4342 with RFC 5348): the sender's
//! allowed rate X from the throughput equation, slow start, the
//! no-feedback timer and pacing at t_ipi = s/X, the CCVal window counter;
//! and the receiver's loss history, loss intervals, X_recv and feedback
//! with Loss Event Rate and Receive Rate options.

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Time;

use super::tfrc::{p_for_rate, x_calc, ArrivalRate, LossIntervals};
use super::{Arrival, CcidConfig, CcidRx, CcidState, CcidTx, Feedback};
use crate::dccp::options::{Elapsed, Opt, Options};
use crate::dccp::packet::PacketWriter;
use crate::dccp::seq::Seq;
use crate::dccp::DccpError;

/// t_mbi: the longest back-off interval (RFC 5348 sec. 4.3).
const T_MBI: f64 = 64.0;
/// Initial no-feedback timeout before any RTT is known (sec. 4.2).
const INITIAL_NOFEEDBACK: Duration = Duration::from_secs(2);
/// RTT smoothing q (sec. 4.3).
const Q: f64 = 0.9;
/// t_gran, the scheduling granularity the sender plans with (RFC 5348
/// sec. 4.6 and 8.3): a driver that wakes up late may send what the
/// intervening t_nom slots allowed, up to this much sending time at once
/// (a burst of at most t_gran * X bytes), and a packet may go up to
/// min(t_ipi, t_gran) / 2 early. Without this credit the sender sends at
/// most one packet per wakeup: the lab's driver wakes about every 50 us,
/// which capped CCID3 at 1400 B / 50 us = 28 MB/s (224 Mbit/s) whatever
/// X allowed, and as X may not exceed 2 X_recv, X stuck at twice that.
/// 1 ms is a jiffy at HZ=1000 (the kernel's CCID3 t_gran) and twenty of
/// the lab driver's wakeups; at 1 Gbit/s it is a burst of 89 packets of
/// 1400 B, 1 % of the 94 ms path's BDP.
const T_GRAN: Duration = Duration::from_millis(1);

/// The CCID3 sender.
#[derive(Debug)]
pub struct Ccid3Tx {
    s: f64,
    x: f64,
    /// X_recv_set (sec. 4.3): the receive rates reported over the last two
    /// RTTs, with their arrival times. The limit 2 max(X_recv_set), not
    /// twice the latest report, keeps one short report (the sender was
    /// descheduled for part of an RTT) from halving X: with only the
    /// latest, the lab's CCID3 sat at X = 2 X_recv after such dips.
    x_recv_set: VecDeque<(Time, f64)>,
    p: f64,
    rtt: Option<Duration>,
    /// When X last doubled in slow start (tld).
    tld: Option<Time>,
    nofeedback_at: Time,
    /// Nominal send time of the next packet.
    t_nom: Time,
    /// Data packets' send times, for RTT samples from feedback.
    sent: VecDeque<(Seq, Time)>,
    feedback_seen: bool,
    /// CCVal window counter and when it last moved (RFC 4342 sec. 8.1).
    wc: u8,
    wc_at: Time,
}

impl Ccid3Tx {
    pub fn new(now: Time, cfg: &CcidConfig) -> Self {
        let s = cfg.mss.max(1) as f64;
        let mut tx = Ccid3Tx {
            s,
            // One packet per second until an RTT is known (sec. 4.2).
            x: s,
            x_recv_set: VecDeque::with_capacity(4),
            p: 0.0,
            rtt: None,
            tld: None,
            nofeedback_at: now + INITIAL_NOFEEDBACK,
            t_nom: now,
            sent: VecDeque::new(),
            feedback_seen: false,
            wc: 0,
            wc_at: now,
        };
        if let Some(r) = cfg.handshake_rtt {
            // RFC 4342 sec. 5: the handshake's RTT sets the initial rate
            // X = W_init / R (RFC 5348 sec. 4.2).
            tx.rtt = Some(r);
            tx.x = tx.initial_rate(r);
            tx.tld = Some(now);
        }
        tx
    }

    fn initial_rate(&self, r: Duration) -> f64 {
        let w_init = (4.0 * self.s).min((2.0 * self.s).max(4380.0));
        w_init / r.as_secs_f64().max(1e-6)
    }

    fn t_ipi(&self) -> Duration {
        Duration::from_secs_f64((self.s / self.x).min(T_MBI))
    }

    /// How early a packet may go: t_delta = min(t_ipi, t_gran) / 2
    /// (sec. 8.3).
    fn t_delta(&self) -> Duration {
        self.t_ipi().min(T_GRAN) / 2
    }

    fn rto(&self) -> Duration {
        let r = self.rtt.unwrap_or(INITIAL_NOFEEDBACK / 4);
        (4 * r).max(Duration::from_secs_f64(2.0 * self.s / self.x))
    }

    fn max_x_recv(&self) -> f64 {
        self.x_recv_set.iter().map(|e| e.1).fold(0.0, f64::max)
    }

    /// Update_X_recv_set (sec. 4.3): adds a report, forgets those older
    /// than two RTTs.
    fn note_x_recv(&mut self, now: Time, rate: f64) {
        let keep = 2 * self.rtt.unwrap_or(INITIAL_NOFEEDBACK);
        while self
            .x_recv_set
            .front()
            .is_some_and(|&(t, _)| now.duration_since(t) >= keep)
        {
            self.x_recv_set.pop_front();
        }
        if self.x_recv_set.len() == self.x_recv_set.capacity() {
            self.x_recv_set.pop_front();
        }
        self.x_recv_set.push_back((now, rate));
    }

    /// Sec. 4.3 step 4 (and 4.4's use of it): the new X from X_recv and p.
    fn update_x(&mut self, now: Time) {
        let recv_limit = 2.0 * self.max_x_recv();
        let floor = self.s / T_MBI;
        let r = self.rtt.unwrap_or(Duration::from_secs(1));
        if self.p > 0.0 {
            self.x = x_calc(self.s, r, self.p).min(recv_limit).max(floor);
        } else if self.tld.is_none_or(|t| now.duration_since(t) >= r) {
            // Slow start: double once per RTT, capped by twice what the
            // receiver saw, never below the initial rate.
            self.x = (2.0 * self.x).min(recv_limit).max(self.initial_rate(r));
            self.tld = Some(now);
        }
    }
}

impl CcidTx for Ccid3Tx {
    fn on_packet_sent(&mut self, now: Time, seq: Seq, _bytes: usize, data: bool) {
        if !data {
            return;
        }
        // Slots missed while the driver slept stay usable, for at most
        // t_gran; after idle no more credit than that is banked (sec. 4.6).
        if let Some(oldest) = now.checked_sub(T_GRAN) {
            self.t_nom = self.t_nom.max(oldest);
        }
        self.t_nom += self.t_ipi();
        self.sent.push_back((seq, now));
        if self.sent.len() > 1 << 16 {
            self.sent.pop_front();
        }
    }

    fn on_ack(&mut self, now: Time, fb: &Feedback<'_>) {
        let (mut rate, mut ler, mut elapsed) = (None, None, Duration::ZERO);
        for o in Options::new(fb.options).flatten() {
            match o.0 {
                Opt::ReceiveRate(r) => rate = Some(r),
                Opt::LossEventRate(l) => ler = Some(l),
                Opt::ElapsedTime(e) => {
                    elapsed = Duration::from_micros(u64::from(e.value().unwrap_or(0)) * 10)
                }
                _ => {}
            }
        }
        // Only packets with CCID3 feedback count (sec. 6 of RFC 4342).
        let (Some(rate), Some(ler)) = (rate, ler) else {
            return;
        };
        // RTT sample from the acknowledged data packet.
        let front = self.sent.front().map(|e| e.0);
        if let Some(front) = front {
            let d = fb.ack.dist(front);
            if d >= 0 {
                if let Ok(i) = self.sent.binary_search_by(|e| e.0.dist(front).cmp(&d)) {
                    // From the ack's arrival, not from `now`: a thread
                    // that read its clock and then lost the CPU handles
                    // the acks that came meanwhile at that older time,
                    // and such samples ran up to a third under the path's
                    // 94 ms in the lab (61 ms), which raised X_calc into
                    // overshoots and loss events.
                    let t = self.sent[i].1;
                    let sample = fb.arrived.duration_since(t).saturating_sub(elapsed);
                    let sample = sample.max(Duration::from_micros(10));
                    self.rtt = Some(match self.rtt.filter(|_| self.feedback_seen) {
                        None => sample,
                        Some(r) => r.mul_f64(Q) + sample.mul_f64(1.0 - Q),
                    });
                    self.sent.drain(..i);
                }
            }
        }
        self.feedback_seen = true;
        self.note_x_recv(now, f64::from(rate));
        self.p = if ler == u32::MAX || ler == 0 {
            0.0
        } else {
            1.0 / f64::from(ler)
        };
        self.update_x(now);
        self.nofeedback_at = now + self.rto();
    }

    fn on_timeout(&mut self, now: Time) {
        if now < self.nofeedback_at {
            return;
        }
        // The no-feedback timer (sec. 4.4): halve the allowed rate.
        let floor = self.s / T_MBI;
        if !self.feedback_seen {
            self.x = (self.x / 2.0).max(floor);
        } else {
            let r = self.rtt.unwrap_or(Duration::from_secs(1));
            let x_calc = if self.p > 0.0 {
                x_calc(self.s, r, self.p)
            } else {
                f64::INFINITY
            };
            let x_recv = self.max_x_recv();
            let x_recv = if self.p == 0.0 || x_calc > 2.0 * x_recv {
                (x_recv / 2.0).max(self.s / (2.0 * T_MBI))
            } else {
                x_calc / 4.0
            };
            // Update_Limits: X_recv_set becomes the one halved value.
            self.x_recv_set.clear();
            self.note_x_recv(now, x_recv);
            if self.p > 0.0 {
                self.x = x_calc.min(2.0 * x_recv).max(floor);
            } else {
                self.x = (self.x / 2.0).max(floor);
            }
        }
        self.nofeedback_at = now + self.rto();
    }

    fn poll_timeout(&self) -> Option<Time> {
        Some(self.nofeedback_at)
    }

    fn can_send(&self, now: Time) -> bool {
        now + self.t_delta() >= self.t_nom
    }

    fn next_send_time(&self) -> Option<Time> {
        Some(self.t_nom.checked_sub(self.t_delta()).unwrap_or(self.t_nom))
    }

    fn ccval(&mut self, now: Time) -> u8 {
        if let Some(r) = self.rtt {
            let quarter = (r / 4).max(Duration::from_micros(1));
            let q = (now.duration_since(self.wc_at).as_nanos() / quarter.as_nanos()) as u64;
            if q > 0 {
                self.wc = ((u64::from(self.wc) + q.min(5)) % 16) as u8;
                self.wc_at = now;
            }
        }
        self.wc
    }

    fn state(&self) -> CcidState {
        CcidState::Ccid3 {
            x: self.x,
            // The receive rate the latest feedback reported.
            x_recv: self.x_recv_set.back().map_or(0.0, |e| e.1),
            p: self.p,
            rtt: self.rtt,
            t_ipi: self.t_ipi(),
        }
    }
}

/// The CCID3 receiver.
#[derive(Debug)]
pub struct Ccid3Rx {
    s: f64,
    intervals: LossIntervals,
    /// Highest data sequence number seen.
    last_data: Option<Seq>,
    /// Start of the current loss event: its CCVal and arrival time.
    event: Option<(u8, Time)>,
    /// Arrival of the first packet with each window counter value, for
    /// the receiver's RTT estimate (RFC 4342 sec. 8.1). Arrival times, not
    /// handling times: the estimate measures the sender's spacing, which
    /// a receiving thread's stalls would otherwise distort.
    wc_seen: [Option<Time>; 16],
    last_wc: Option<u8>,
    rtt: Duration,
    /// Data bytes handled since the last report.
    bytes_since: u64,
    /// When the last report was written (handling time: feedback goes out
    /// once per R of the receiver's own schedule).
    last_feedback: Option<Time>,
    /// When the last data packet was handled (the turn's clock), and
    /// since when this end holds it (not before it arrived): Elapsed Time
    /// counts from the latter.
    last_handled: Option<Time>,
    held_since: Option<Time>,
    /// The newest data packet's arrival, and its value when the last
    /// report was written: a report's X_recv is the bytes that arrived
    /// between the two, over that span. Counting over the handling clock
    /// instead made X_recv swing from 0 to 1.35 times the link rate on
    /// the lab's 1 Gbit/s path whenever the receiving thread lost the CPU
    /// for tens of ms after reading its clock (docs/dccp.md).
    newest_arrival: Option<Time>,
    fed_up_to: Option<Time>,
    /// The arrival rate over the last round trips, for short report spans
    /// and the first loss interval.
    arrivals: ArrivalRate,
    /// X_recv over the previous feedback interval, for the first loss.
    x_recv: f64,
    loss_pending: bool,
    data_since: bool,
}

impl Ccid3Rx {
    pub fn new(_now: Time, cfg: &CcidConfig) -> Self {
        Ccid3Rx {
            s: cfg.mss.max(1) as f64,
            intervals: LossIntervals::default(),
            last_data: None,
            event: None,
            wc_seen: [None; 16],
            last_wc: None,
            rtt: cfg.handshake_rtt.unwrap_or(Duration::from_millis(100)),
            bytes_since: 0,
            last_feedback: None,
            last_handled: None,
            held_since: None,
            newest_arrival: None,
            fed_up_to: None,
            arrivals: ArrivalRate::default(),
            x_recv: 0.0,
            loss_pending: false,
            data_since: false,
        }
    }

    /// The loss event rate the receiver currently reports.
    pub fn p(&self) -> f64 {
        self.intervals.p()
    }

    /// The rate the first loss interval stands for (RFC 5348 sec. 6.3.1):
    /// the rate received before the loss, the largest of three honest
    /// measures on arrival times: the last report's X_recv, what arrived
    /// since it (over at least R/4, or a few packets of one GRO buffer
    /// would stand for it), and the last round trip's arrivals. In slow
    /// start the last report saw half the rate or less, and p goes with
    /// 1/X^2: on the lab's 94 ms path that report alone once gave p =
    /// 2.85e-7 and held CCID3 at 294 Mbit/s (other runs: ~2e-8).
    fn x_target(&self) -> f64 {
        let mut x = self.x_recv;
        if let (Some(new), Some(from)) = (self.newest_arrival, self.fed_up_to) {
            let span = new.duration_since(from);
            if span >= self.rtt / 4 && !span.is_zero() {
                x = x.max(self.bytes_since as f64 / span.as_secs_f64());
            }
        }
        if let Some(new) = self.newest_arrival {
            if let Some(r) = self.arrivals.rate_over(new, self.rtt) {
                x = x.max(r);
            }
        }
        x
    }

    fn track_rtt(&mut self, now: Time, wc: u8) {
        match self.last_wc {
            Some(prev) if prev == wc => return,
            Some(prev) => {
                let steps = (wc.wrapping_sub(prev) & 15) as usize;
                for k in 1..steps {
                    self.wc_seen[(usize::from(prev) + k) & 15] = None;
                }
            }
            None => {}
        }
        self.wc_seen[usize::from(wc)] = Some(now);
        self.last_wc = Some(wc);
        if let Some(t) = self.wc_seen[usize::from(wc.wrapping_sub(4) & 15)] {
            let r = now.duration_since(t);
            if !r.is_zero() {
                self.rtt = r;
            }
        }
    }
}

impl CcidRx for Ccid3Rx {
    fn on_packet(&mut self, now: Time, a: &Arrival) {
        if !a.data {
            return;
        }
        // Arrival stamps are non-decreasing per connection (the
        // connection makes them so).
        let at = a.arrived;
        self.track_rtt(at, a.ccval);
        self.bytes_since += a.bytes as u64;
        self.arrivals.push(at, a.bytes as u64, self.rtt);
        self.newest_arrival = Some(at);
        self.last_handled = Some(now);
        // Held since no earlier than it arrived: a turn whose clock was
        // read before a stall handles with that older reading, and Elapsed
        // Time counted from it claimed the stall as the receiver's own
        // hold, which took the sender's RTT samples below the path's
        // (76-83 ms on the lab's 94 ms path) and X_calc into overshoots.
        self.held_since = Some(now.max(at));
        self.data_since = true;
        let Some(last) = self.last_data else {
            self.last_data = Some(a.seq);
            // Feedback on the first data packet (RFC 5348 sec. 6.3).
            self.loss_pending = true;
            return;
        };
        let d = a.seq.dist(last);
        if d <= 0 {
            return; // reordered or duplicate; counted as received
        }
        self.last_data = Some(a.seq);
        let lost = (d as u64 - 1).saturating_sub(a.ndp);
        // A packet marked CE counts as lost for the loss event rate
        // (RFC 5348 sec. 5, RFC 4342 sec. 9.2): without this a CCID3 flow
        // through a marking AQM never slowed (16 Mbit/s kept against 4 TCP
        // flows under CoDel in the SafeUDP lab runs).
        if lost > 0 || a.ecn_ce {
            let new_event = match self.event {
                None => true,
                Some((wc, began)) => {
                    (a.ccval.wrapping_sub(wc) & 15) > 4 || at.duration_since(began) >= self.rtt * 4
                }
            };
            if new_event {
                let first = self
                    .intervals
                    .is_empty()
                    .then(|| (1.0 / p_for_rate(self.s, self.rtt, self.x_target())).round() as u64);
                self.intervals.new_event(first);
                self.event = Some((a.ccval, at));
                self.loss_pending = true;
                self.intervals.count(1);
                return;
            }
        }
        self.intervals.count(d as u64 - lost);
    }

    fn on_peer_ack(&mut self, _ack: Seq) {}

    fn ack_due(&self, now: Time) -> bool {
        self.loss_pending
            || (self.data_since
                && self
                    .last_feedback
                    .is_none_or(|t| now.duration_since(t) >= self.rtt))
    }

    fn poll_timeout(&self) -> Option<Time> {
        if !self.data_since && !self.loss_pending {
            return None;
        }
        match self.last_feedback {
            Some(t) if !self.loss_pending => Some(t + self.rtt),
            _ => self.last_handled,
        }
    }

    fn write_feedback(
        &mut self,
        now: Time,
        _our_seq: Seq,
        _ack: Seq,
        w: &mut PacketWriter<'_>,
    ) -> Result<(), DccpError> {
        // The bytes that arrived since the last report, over the span
        // between the newest arrivals each report saw (R for the first).
        // A span under R/2 is a loss report right after a periodic one,
        // and may be one GRO buffer's single stamp: the last R's arrival
        // rate stands for it (a 100 us floor turned 30 packets into 3.5
        // Gbit/s).
        let span = match (self.newest_arrival, self.fed_up_to) {
            (Some(new), Some(from)) => new.duration_since(from),
            _ => self.rtt,
        };
        let x_recv = if self.bytes_since == 0 {
            0.0
        } else if span >= self.rtt / 2 && !span.is_zero() {
            self.bytes_since as f64 / span.as_secs_f64()
        } else {
            self.newest_arrival
                .and_then(|new| self.arrivals.rate_over(new, self.rtt))
                .unwrap_or(self.bytes_since as f64 / self.rtt.as_secs_f64().max(1e-4))
        };
        self.x_recv = x_recv;
        let p = self.intervals.p();
        let ler = if p == 0.0 {
            u32::MAX
        } else {
            (1.0 / p).ceil().min(f64::from(u32::MAX - 1)) as u32
        };
        // Elapsed Time (RFC 4340 sec. 13.2) from handling, not arrival:
        // the socket queue in front of this connection delays every
        // report, so it belongs in the loop delay the sender's R holds
        // (but never from before the arrival: `held_since`).
        let elapsed = self
            .held_since
            .map_or(0, |t| now.duration_since(t).as_micros() / 10);
        w.option(&Opt::ElapsedTime(Elapsed::of(
            elapsed.min(u128::from(u32::MAX)) as u32,
        )))?;
        w.option(&Opt::LossEventRate(ler))?;
        w.option(&Opt::ReceiveRate(x_recv.min(f64::from(u32::MAX)) as u32))?;
        self.bytes_since = 0;
        self.fed_up_to = self.newest_arrival;
        self.last_feedback = Some(now);
        self.loss_pending = false;
        self.data_since = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dccp::checksum::Pseudo;
    use crate::dccp::packet::{parse, Body, Header};

    const MS: Duration = Duration::from_millis(1);

    fn cfg(rtt: Option<Duration>) -> CcidConfig {
        CcidConfig {
            mss: 1400,
            ack_ratio: 2,
            handshake_rtt: rtt,
            safeudp: Default::default(),
        }
    }

    /// A real feedback packet: the options a receiver writes.
    fn feedback(tx: &mut Ccid3Tx, now: Time, ack: u64, ler: u32, rate: u32) {
        feedback_arrived(tx, now, now, ack, ler, rate);
    }

    /// As [`feedback`], for an ack that reached the host at `arrived`.
    fn feedback_arrived(tx: &mut Ccid3Tx, now: Time, arrived: Time, ack: u64, ler: u32, rate: u32) {
        let h = Header {
            src_port: 2,
            dst_port: 1,
            ccval: 0,
            cscov: 0,
            long: true,
            seq: Seq::new(77),
            body: Body::Ack { ack: Seq::new(ack) },
        };
        let mut buf = [0u8; 128];
        let mut w = PacketWriter::new(&mut buf, &h).unwrap();
        w.option(&Opt::ElapsedTime(Elapsed::Short(0))).unwrap();
        w.option(&Opt::LossEventRate(ler)).unwrap();
        w.option(&Opt::ReceiveRate(rate)).unwrap();
        let n = w.finish(&[], &Pseudo::None).unwrap();
        let p = parse(&buf[..n]).unwrap();
        tx.on_ack(
            now,
            &Feedback {
                ack: Seq::new(ack),
                options: p.options,
                arrived,
            },
        );
    }

    fn x_of(tx: &Ccid3Tx) -> (f64, f64, Duration) {
        let CcidState::Ccid3 { x, p, rtt, .. } = tx.state() else {
            panic!()
        };
        (x, p, rtt.unwrap())
    }

    #[test]
    fn the_rate_is_rfc_5348s_equation_for_p_and_rtt() {
        for (p_inv, rtt_ms) in [(100u32, 100u64), (1000, 94), (20, 10)] {
            let t0 = Time::ZERO;
            let mut tx = Ccid3Tx::new(t0, &cfg(None));
            tx.on_packet_sent(t0, Seq::new(1), 1400, true);
            let now = t0 + MS * rtt_ms as u32;
            feedback(&mut tx, now, 1, p_inv, u32::MAX);
            let (x, p, rtt) = x_of(&tx);
            assert_eq!(rtt, MS * rtt_ms as u32);
            assert!((p - 1.0 / f64::from(p_inv)).abs() < 1e-12);
            let want = x_calc(1400.0, rtt, p);
            assert!((x - want).abs() / want < 1e-9, "{x} vs {want}");
            let CcidState::Ccid3 { t_ipi, .. } = tx.state() else {
                panic!()
            };
            assert!((t_ipi.as_secs_f64() - 1400.0 / want).abs() < 1e-6);
        }
        // The receiver's rate caps it: X <= 2 X_recv.
        let t0 = Time::ZERO;
        let mut tx = Ccid3Tx::new(t0, &cfg(None));
        tx.on_packet_sent(t0, Seq::new(1), 1400, true);
        feedback(&mut tx, t0 + 100 * MS, 1, 100, 10_000);
        assert_eq!(x_of(&tx).0, 20_000.0);
    }

    /// The sender's RTT sample runs from the data packet's send time to
    /// its ack's arrival: an ack that arrived 94 ms after the send but was
    /// handled by a turn whose clock read 60 ms (the thread lost the CPU
    /// after reading it) gives 94 ms, not 60.
    #[test]
    fn rtt_samples_count_from_the_acks_arrival() {
        let t0 = Time::ZERO;
        let mut tx = Ccid3Tx::new(t0, &cfg(None));
        tx.on_packet_sent(t0, Seq::new(1), 1400, true);
        feedback_arrived(&mut tx, t0 + 60 * MS, t0 + 94 * MS, 1, u32::MAX, u32::MAX);
        assert_eq!(x_of(&tx).2, 94 * MS);
    }

    #[test]
    fn slow_start_doubles_once_per_rtt() {
        let t0 = Time::ZERO;
        let rtt = 50 * MS;
        let mut tx = Ccid3Tx::new(t0, &cfg(Some(rtt)));
        // W_init / R = min(4*1400, max(2800, 4380)) / 50 ms = 87 600 B/s.
        let x0 = x_of(&tx).0;
        assert!((x0 - 87_600.0).abs() < 1e-6, "{x0}");
        let mut xs = vec![x0];
        for k in 1..=6u32 {
            let sent_at = t0 + rtt * (k - 1);
            tx.on_packet_sent(sent_at, Seq::new(u64::from(k)), 1400, true);
            // Half-RTT feedback does not double again.
            feedback(&mut tx, sent_at + rtt, u64::from(k), u32::MAX, u32::MAX);
            xs.push(x_of(&tx).0);
        }
        for w in xs.windows(2) {
            assert!((w[1] / w[0] - 2.0).abs() < 1e-9, "{xs:?}");
        }
        let before = x_of(&tx).0;
        tx.on_packet_sent(t0 + rtt * 6, Seq::new(7), 1400, true);
        feedback(&mut tx, t0 + rtt * 6 + rtt / 2, 7, u32::MAX, u32::MAX);
        assert_eq!(x_of(&tx).0, before, "not twice in one RTT");
    }

    #[test]
    fn the_no_feedback_timer_halves_the_rate() {
        let t0 = Time::ZERO;
        let mut tx = Ccid3Tx::new(t0, &cfg(None));
        // Before any feedback: the 2 s timer halves the 1 packet/s start.
        assert_eq!(tx.poll_timeout(), Some(t0 + Duration::from_secs(2)));
        tx.on_timeout(t0 + Duration::from_secs(2));
        assert_eq!(x_of_any(&tx), 700.0);
        // With feedback and no loss: X halves at the timer, which is then
        // max(4R, 2s/X) away.
        tx.on_packet_sent(t0, Seq::new(1), 1400, true);
        let now = t0 + Duration::from_secs(3);
        feedback(&mut tx, now, 1, u32::MAX, 1_000_000);
        let x = x_of(&tx).0;
        let at = tx.poll_timeout().unwrap();
        let rto = (4 * x_of(&tx).2).max(Duration::from_secs_f64(2.0 * 1400.0 / x));
        assert_eq!(at, now + rto);
        tx.on_timeout(at - MS);
        assert_eq!(x_of(&tx).0, x, "not before its time");
        tx.on_timeout(at);
        assert!((x_of(&tx).0 - x / 2.0).abs() < 1e-9);
        tx.on_timeout(tx.poll_timeout().unwrap());
        assert!((x_of(&tx).0 - x / 4.0).abs() < 1e-9);
        // With loss: X follows the equation with X_recv halved.
        let mut tx = Ccid3Tx::new(t0, &cfg(None));
        tx.on_packet_sent(t0, Seq::new(1), 1400, true);
        feedback(&mut tx, t0 + 100 * MS, 1, 100, 50_000);
        let x = x_of(&tx).0;
        tx.on_timeout(tx.poll_timeout().unwrap());
        assert!(x_of(&tx).0 < x);
    }

    fn x_of_any(tx: &Ccid3Tx) -> f64 {
        let CcidState::Ccid3 { x, .. } = tx.state() else {
            panic!()
        };
        x
    }

    #[test]
    fn pacing_spaces_packets_by_t_ipi() {
        let t0 = Time::ZERO;
        let mut tx = Ccid3Tx::new(t0, &cfg(Some(10 * MS)));
        let ipi = Duration::from_secs_f64(1400.0 / x_of_any(&tx));
        // t_ipi is 3.2 ms, longer than t_gran: up to t_gran / 2 early.
        assert!(ipi > T_GRAN);
        assert!(tx.can_send(t0));
        tx.on_packet_sent(t0, Seq::new(1), 1400, true);
        assert!(!tx.can_send(t0));
        assert!(!tx.can_send(t0 + ipi - T_GRAN / 2 - Duration::from_nanos(1)));
        assert!(tx.can_send(t0 + ipi - T_GRAN / 2));
        assert_eq!(tx.next_send_time(), Some(t0 + ipi - T_GRAN / 2));
    }

    /// A driver that wakes late sends the slots it missed at once, but
    /// never more than t_gran's worth; after idle no credit is banked.
    #[test]
    fn a_late_sender_catches_up_by_at_most_t_gran() {
        let t0 = Time::ZERO + Duration::from_secs(1);
        let mut tx = Ccid3Tx::new(t0, &cfg(Some(10 * MS)));
        tx.x = 125e6; // 1 Gbit/s: t_ipi 11.2 us
        let ipi = tx.t_ipi();
        let burst = |tx: &mut Ccid3Tx, now: Time| {
            let mut n = 0;
            while tx.can_send(now) {
                tx.on_packet_sent(now, Seq::new(n), 1400, true);
                n += 1;
            }
            n
        };
        burst(&mut tx, t0);
        // 50 us late: the four or five slots missed go now.
        let n = burst(&mut tx, t0 + 50 * Duration::from_micros(1));
        assert!((4..=6).contains(&n), "{n}");
        // Asleep for a second: t_gran / t_ipi slots, not a second's worth.
        let n = burst(&mut tx, t0 + Duration::from_secs(1));
        let most = (T_GRAN.as_secs_f64() / ipi.as_secs_f64()).ceil() as u64 + 1;
        assert!((most - 2..=most).contains(&n), "{n} of at most {most}");
        // Then back to one slot per t_ipi.
        let n = burst(&mut tx, t0 + Duration::from_secs(1) + ipi);
        assert_eq!(n, 1);
    }

    /// recv_limit is twice the largest X_recv of the last two RTTs (RFC
    /// 5348 sec. 4.3's X_recv_set), not twice the latest: one short
    /// report does not halve X; two RTTs of them do.
    #[test]
    fn one_low_receive_rate_does_not_cap_x_for_two_rtts() {
        let t0 = Time::ZERO;
        let rtt = 100 * MS;
        let mut tx = Ccid3Tx::new(t0, &cfg(Some(rtt)));
        let eq = x_calc(1400.0, rtt, 1e-6);
        let report = |tx: &mut Ccid3Tx, i: u64, rate: u32| {
            tx.on_packet_sent(t0 + rtt * (i as u32 - 1), Seq::new(i), 1400, true);
            feedback(tx, t0 + rtt * i as u32, i, 1_000_000, rate);
            x_of(tx).0
        };
        // The equation (17 MB/s at p = 1e-6) is below 2 X_recv.
        let x = report(&mut tx, 1, 10_000_000);
        assert!((x / eq - 1.0).abs() < 0.01, "{x} {eq}");
        // A short report: X stays where the equation puts it.
        let x = report(&mut tx, 2, 2_000_000);
        assert!((x / eq - 1.0).abs() < 0.01, "{x} {eq}");
        // Two RTTs of short reports: now 2 X_recv limits.
        let x = report(&mut tx, 3, 2_000_000);
        assert_eq!(x, 4_000_000.0);
    }

    /// CE marks open loss events as losses do: a flow that is marked
    /// one packet in 100 (none lost) sees p near 1/100.
    #[test]
    fn ce_marks_are_loss_events() {
        let mut rx = Ccid3Rx::new(Time::ZERO, &cfg(Some(100 * MS)));
        let mut now = Time::ZERO;
        for i in 0..1000u64 {
            now += MS;
            rx.on_packet(
                now,
                &Arrival {
                    seq: Seq::new(i + 1),
                    data: true,
                    ccval: ((i / 20) % 16) as u8,
                    ndp: 0,
                    bytes: 1400,
                    ecn_ce: i % 100 == 50,
                    arrived: now,
                },
            );
        }
        assert!((rx.p() - 0.01).abs() < 0.001, "{}", rx.p());
    }

    /// The first loss interval (RFC 5348 sec. 6.3.1) comes from the rate
    /// the receiver sees when the loss comes, not from a report of slow
    /// start's earlier, lower rate.
    #[test]
    fn first_loss_interval_follows_the_rate_since_the_last_report() {
        let rtt = 20 * MS;
        let mut rx = Ccid3Rx::new(Time::ZERO, &cfg(Some(rtt)));
        let (mut seq, mut now) = (0u64, Time::ZERO);
        let arrive = |rx: &mut Ccid3Rx, seq: u64, now: Time| rx.on_packet(now, &data(seq, 0, now));
        // One RTT at 1 packet per ms (1.4 MB/s), reported.
        for _ in 0..20 {
            seq += 1;
            now += MS;
            arrive(&mut rx, seq, now);
        }
        written(&mut rx, now);
        // Then ten times that (slow start caught up), and a loss.
        for _ in 0..150 {
            seq += 1;
            now += MS / 10;
            arrive(&mut rx, seq, now);
        }
        seq += 2;
        now += MS / 10;
        arrive(&mut rx, seq, now);
        let fast = p_for_rate(1400.0, rtt, 14e6);
        let slow = p_for_rate(1400.0, rtt, 1.4e6);
        let p = rx.p();
        assert!(
            (p / fast - 1.0).abs() < 0.05,
            "p {p}: the rate since the report gives {fast}, the report's {slow}"
        );
    }

    /// Writes b's feedback at `now`: (Elapsed Time in 10 us units, X_recv).
    fn written(rx: &mut Ccid3Rx, now: Time) -> (u32, u32) {
        let h = Header {
            src_port: 2,
            dst_port: 1,
            ccval: 0,
            cscov: 0,
            long: true,
            seq: Seq::new(1),
            body: Body::Ack { ack: Seq::new(1) },
        };
        let mut buf = [0u8; 256];
        let mut w = PacketWriter::new(&mut buf, &h).unwrap();
        rx.write_feedback(now, Seq::new(1), Seq::new(1), &mut w)
            .unwrap();
        let n = w.finish(&[], &Pseudo::None).unwrap();
        let (mut elapsed, mut rate) = (None, None);
        for (o, _) in Options::new(parse(&buf[..n]).unwrap().options).flatten() {
            match o {
                Opt::ElapsedTime(e) => elapsed = e.value(),
                Opt::ReceiveRate(r) => rate = Some(r),
                _ => {}
            }
        }
        (elapsed.unwrap(), rate.unwrap())
    }

    fn data(seq: u64, ccval: u8, arrived: Time) -> Arrival {
        Arrival {
            seq: Seq::new(seq),
            data: true,
            ccval,
            ndp: 0,
            bytes: 1400,
            ecn_ce: false,
            arrived,
        }
    }

    /// 14 MB/s arrive (a packet every 100 us) while the receiving thread
    /// handles them in bursts after 60 ms stalls, with a clock read
    /// before the stall (stamps later than `now`) or after it (stamps
    /// earlier): every report after the first says 14 MB/s within 2 %.
    /// Counted over handling time, the first kind gave 1.6 and 0.4 times
    /// the rate around each stall.
    #[test]
    fn x_recv_follows_arrivals_not_the_threads_stalls() {
        for stale in [true, false] {
            let mut rx = Ccid3Rx::new(Time::ZERO, &cfg(Some(100 * MS)));
            let (mut seq, mut arrived) = (0u64, Time::ZERO);
            let mut reports = Vec::new();
            let mut clock = Time::ZERO;
            for turn in 0..30u32 {
                // What arrived since the last turn: 40 ms of packets, or
                // 100 ms (a stall) every third turn.
                let span = if turn % 3 == 2 { 100 } else { 40 };
                let until = arrived + MS * span;
                // The turn's clock: read before the stall (stale) or after.
                let now = if stale { clock } else { until };
                while arrived < until {
                    arrived += MS / 10;
                    seq += 1;
                    rx.on_packet(now, &data(seq, 0, arrived));
                }
                if rx.ack_due(now) {
                    reports.push(written(&mut rx, now).1);
                }
                clock = until;
            }
            assert!(reports.len() > 5, "{reports:?}");
            for &r in &reports[1..] {
                let x = f64::from(r);
                assert!((x / 14e6 - 1.0).abs() < 0.02, "stale {stale}: {reports:?}");
            }
        }
    }

    /// A loss report right after a periodic one, its packets sharing one
    /// stamp (a GRO buffer): X_recv is the last R's arrival rate, not a
    /// few packets over the 100 us floor.
    #[test]
    fn a_short_report_span_reports_the_last_rtt() {
        let rtt = 20 * MS;
        let mut rx = Ccid3Rx::new(Time::ZERO, &cfg(Some(rtt)));
        let mut t = Time::ZERO;
        let mut seq = 0;
        // 40 ms at 14 MB/s, a periodic report.
        for _ in 0..400 {
            t += MS / 10;
            seq += 1;
            rx.on_packet(t, &data(seq, 0, t));
        }
        written(&mut rx, t);
        // 30 packets with one stamp, the last after a gap: a loss report.
        let stamp = t + MS / 10;
        for k in 0..30 {
            seq += if k == 29 { 2 } else { 1 };
            rx.on_packet(stamp, &data(seq, 0, stamp));
        }
        assert!(rx.ack_due(stamp), "a loss is reported at once");
        let x = f64::from(written(&mut rx, stamp).1);
        // The last R: 200 packets in 20 ms, plus the 30 of the buffer.
        assert!((x / 15.5e6 - 1.0).abs() < 0.1, "{x}");
    }

    /// Elapsed Time counts from when the packet was handled, not from its
    /// arrival stamp: arrived at t, handled at t + 30 ms, written at t +
    /// 31 ms: 1 ms (100 units), not 31 ms.
    #[test]
    fn elapsed_time_counts_from_handling() {
        let mut rx = Ccid3Rx::new(Time::ZERO, &cfg(Some(100 * MS)));
        let t = Time::ZERO + 500 * MS;
        rx.on_packet(t + 30 * MS, &data(1, 0, t));
        assert_eq!(written(&mut rx, t + 31 * MS).0, 100);
        // A stale handling clock: arrived at t + 30 ms, handled by a turn
        // whose clock read t, the report written by a fresh turn at t + 31
        // ms. The packet was not handled before it arrived: 1 ms, not 31.
        let mut rx = Ccid3Rx::new(Time::ZERO, &cfg(Some(100 * MS)));
        rx.on_packet(t, &data(1, 0, t + 30 * MS));
        assert_eq!(written(&mut rx, t + 31 * MS).0, 100);
    }

    /// The receiver's RTT estimate (RFC 4342 sec. 8.1) reads the sender's
    /// spacing off arrival stamps: window counters a quarter of 100 ms
    /// apart, handled in 40 ms bursts, still give 100 ms.
    #[test]
    fn a_stall_does_not_move_the_receivers_rtt() {
        let mut rx = Ccid3Rx::new(Time::ZERO, &cfg(Some(300 * MS)));
        let mut seq = 0;
        for q in 0..12u32 {
            let arrived = Time::ZERO + 25 * MS * q;
            // Handled in bursts: at the next multiple of 40 ms.
            let handled = Time::from_nanos(arrived.as_nanos().div_ceil(40_000_000) * 40_000_000);
            seq += 1;
            rx.on_packet(handled, &data(seq, (q % 16) as u8, arrived));
        }
        assert_eq!(rx.rtt, 100 * MS);
    }

    /// Shifting every arrival stamp by +-50 ms leaves when feedback is due
    /// unchanged: the feedback loop runs on handling time.
    #[test]
    fn feedback_timing_ignores_arrival_stamps() {
        let timeline = |shift: i64| {
            let mut rx = Ccid3Rx::new(Time::ZERO, &cfg(Some(20 * MS)));
            let mut out = Vec::new();
            let base = Time::ZERO + 1000 * MS;
            for i in 1..=400u64 {
                let now = base + MS / 2 * i as u32;
                let arrived = Time::from_nanos((now.as_nanos() as i64 + shift * 1_000_000) as u64);
                rx.on_packet(now, &data(i, 0, arrived));
                out.push((rx.ack_due(now), rx.poll_timeout()));
                if rx.ack_due(now) {
                    written(&mut rx, now);
                }
            }
            out
        };
        assert_eq!(timeline(50), timeline(0));
        assert_eq!(timeline(-50), timeline(0));
    }

    /// The first loss interval from arrival stamps when the receiving
    /// thread handled the last RTT in one burst with a stale clock: one
    /// R at 1.4 MB/s handled promptly and reported, then 20 ms of
    /// arrivals at 14 MB/s handled at once at the report's time + 1 ms,
    /// the last revealing a loss. p is the equation's for 14 MB/s; over
    /// the handling clock the rate since the report was 280 KB in 1 ms,
    /// 20 times too high, and p 400 times too low.
    #[test]
    fn first_loss_interval_is_the_arrival_rate_over_the_last_rtt() {
        let rtt = 20 * MS;
        let mut rx = Ccid3Rx::new(Time::ZERO, &cfg(Some(rtt)));
        let (mut seq, mut t) = (0u64, Time::ZERO);
        for _ in 0..20 {
            seq += 1;
            t += MS;
            rx.on_packet(t, &data(seq, 0, t));
        }
        written(&mut rx, t);
        let handled = t + MS;
        let mut arrived = t;
        for k in 0..200 {
            seq += if k == 199 { 2 } else { 1 };
            arrived += MS / 10;
            rx.on_packet(handled, &data(seq, 0, arrived));
        }
        let want = p_for_rate(1400.0, rtt, 14e6);
        let p = rx.p();
        assert!((p / want - 1.0).abs() < 0.05, "p {p}, want {want}");
    }

    /// The receiver counts loss events and reports 1/p.
    #[test]
    fn receiver_loss_intervals_and_feedback() {
        let t0 = Time::ZERO;
        let mut rx = Ccid3Rx::new(t0, &cfg(Some(100 * MS)));
        let mut seq = 0u64;
        let mut now = t0;
        let mut buf = [0u8; 256];
        let mut reported = Vec::new();
        // 1000 packets, one lost every 100, CCVal advancing a quarter RTT
        // per 20 packets: losses are five quarters apart, each its own
        // loss event.
        for i in 0..1000u64 {
            seq += 1;
            now += MS;
            if i % 100 == 50 {
                continue;
            }
            rx.on_packet(
                now,
                &Arrival {
                    seq: Seq::new(seq),
                    data: true,
                    ccval: ((i / 20) % 16) as u8,
                    ndp: 0,
                    bytes: 1400,
                    ecn_ce: false,
                    arrived: now,
                },
            );
            if rx.ack_due(now) {
                let h = Header {
                    src_port: 2,
                    dst_port: 1,
                    ccval: 0,
                    cscov: 0,
                    long: true,
                    seq: Seq::new(i),
                    body: Body::Ack { ack: Seq::new(seq) },
                };
                let mut w = PacketWriter::new(&mut buf, &h).unwrap();
                rx.write_feedback(now, Seq::new(i), Seq::new(seq), &mut w)
                    .unwrap();
                let n = w.finish(&[], &Pseudo::None).unwrap();
                for o in Options::new(parse(&buf[..n]).unwrap().options).flatten() {
                    if let Opt::LossEventRate(l) = o.0 {
                        reported.push(l);
                    }
                }
            }
        }
        assert_eq!(reported[0], u32::MAX, "no loss at first");
        let last = *reported.last().unwrap();
        // Intervals of 100 packets: 1/p near 100.
        assert!((90..=110).contains(&last), "{reported:?}");
        assert!((rx.p() - 0.01).abs() < 0.001, "{}", rx.p());
    }
}
