//! One DCCP connection as a sans-IO machine (RFC 4340 sec. 8): the states
//! CLOSED..TIMEWAIT, the handshake with its retransmission timers, service
//! codes, Sync/SyncAck for out-of-window packets, close and reset, and the
//! data path between the application's queue and the CCIDs. The driver
//! feeds datagrams and time in and polls packets, deadlines and events.

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Time;

use super::ccid::{
    self, safeudp, Arrival, CcidConfig, CcidRx, CcidState, CcidTx, CongestionEvent, Feedback,
    SafeUdpConfig,
};
use super::checksum::Pseudo;
use super::feature::{Feature, Loc, Negotiator};
use super::options::{Elapsed, Opt, Options};
use super::packet::{self, Body, Header, PacketType, PacketWriter, ResetCode};
use super::queue::DatagramQueue;
use super::seq::Seq;
use super::window::SeqState;

/// The connection states of sec. 8 (CLOSED and LISTEN included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Closed,
    Listen,
    Request,
    Respond,
    PartOpen,
    Open,
    CloseReq,
    Closing,
    TimeWait,
}

/// Why a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// Close/Reset(Closed) exchange completed.
    Closed,
    /// A Reset arrived (from the peer) or was sent (by us) with this code.
    Reset { code: ResetCode, by_peer: bool },
    /// The handshake or close got no answer in time.
    TimedOut,
}

/// What the connection tells its driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The handshake completed; the negotiated CCIDs of each direction.
    Connected {
        tx_ccid: u8,
        rx_ccid: u8,
    },
    Closed(CloseReason),
}

/// Settings of one endpoint.
#[derive(Clone, Debug)]
pub struct Config {
    pub local_port: u16,
    /// The client's target port; a server learns it from the Request.
    pub remote_port: u16,
    /// Client: the service code it asks for. Server: ignored.
    pub service: u32,
    /// Server: the service codes it accepts.
    pub accept_services: Vec<u32>,
    /// Client: CCIDs wanted for (client->server, server->client); sent
    /// Mandatory so a server without them refuses instead of falling back.
    pub ccids: (u8, u8),
    /// CCIDs this endpoint implements, best first (a server's order wins).
    pub supported_ccids: Vec<u8>,
    /// Our Sequence Window (sec. 7.5.2); larger than ~5 windows of
    /// packets in flight, or a fast path looks out of window.
    pub seq_window: u64,
    pub ack_ratio: u64,
    /// Payload size the CCIDs plan with (s, MSS).
    pub mss: usize,
    /// Pseudo-header of packets we send (raw IP) or None (DCCP-UDP).
    pub pseudo: Pseudo,
    /// Initial sequence number (the driver draws it at random).
    pub iss: Seq,
    /// First retransmission of Request/Close (sec. 8.1.1: about 1 s).
    pub rto: Duration,
    /// PARTOPEN's Ack retransmission (sec. 8.1.5: 200 ms).
    pub partopen_rto: Duration,
    /// Give up a handshake or close after this long.
    pub give_up: Duration,
    /// Maximum segment lifetime; TIMEWAIT lasts 2 MSL (sec. 8.3).
    pub msl: Duration,
    /// Bytes of application datagrams queued before `send` refuses.
    pub queue_bytes: usize,
    /// SafeUDP's windows and deadline (when CCID 248 is chosen).
    pub safeudp: SafeUdpConfig,
}

impl Config {
    pub fn client(local_port: u16, remote_port: u16, service: u32, ccid: u8) -> Self {
        Config {
            local_port,
            remote_port,
            service,
            accept_services: Vec::new(),
            ccids: (ccid, ccid),
            supported_ccids: ccid::IMPLEMENTED.to_vec(),
            seq_window: 100,
            ack_ratio: 2,
            mss: 1400,
            pseudo: Pseudo::None,
            iss: Seq::new(1),
            rto: Duration::from_secs(1),
            partopen_rto: Duration::from_millis(200),
            give_up: Duration::from_secs(64),
            msl: Duration::from_secs(120),
            queue_bytes: 1 << 20,
            safeudp: SafeUdpConfig::default(),
        }
    }
    pub fn server(local_port: u16, accept_services: Vec<u32>) -> Self {
        Config {
            accept_services,
            ..Config::client(local_port, 0, 0, 2)
        }
    }
}

/// Counters of one connection, in the shape results report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub data_sent: u64,
    pub data_bytes_sent: u64,
    pub data_received: u64,
    pub data_bytes_received: u64,
    pub acks_sent: u64,
    pub syncs_sent: u64,
    pub dropped_checksum: u64,
    pub dropped_invalid: u64,
    pub queue_full: u64,
    pub ecn_ce_received: u64,
    /// Application datagrams the sending CCID dropped instead of sending
    /// (SafeUDP enforcing a rate).
    pub dropped_by_ccid: u64,
}

/// Control packets owed to the peer.
#[derive(Clone, Copy, Debug, Default)]
struct Owed {
    request: bool,
    response: bool,
    ack: bool,
    close: bool,
    closereq: bool,
    reset: Option<(ResetCode, Seq)>,
    sync: Option<Seq>,
    syncack: Option<Seq>,
}

/// Sync packets at most this often (sec. 7.5.4 asks for rate limiting;
/// 8 per second is Linux's default sysctl_dccp_sync_ratelimit).
const SYNC_INTERVAL: Duration = Duration::from_millis(125);

pub struct Connection {
    cfg: Config,
    state: State,
    is_server: bool,
    seqs: SeqState,
    neg: Negotiator,
    tx: Option<Box<dyn CcidTx>>,
    rx: Option<Box<dyn CcidRx>>,
    queue: DatagramQueue,
    events: VecDeque<Event>,
    owed: Owed,
    /// Retransmission of the current handshake/close step.
    retx_at: Option<Time>,
    backoff: Duration,
    give_up_at: Option<Time>,
    timewait_until: Option<Time>,
    /// Request or Response send time, cleared on retransmission (Karn).
    probe_sent: Option<Time>,
    handshake_rtt: Option<Duration>,
    /// The latest Timestamp option the peer sent and when it came, owed a
    /// Timestamp Echo on our next packet (sec. 13.3). Linux sends one on
    /// its Request and Response and takes its CCID3 sender's first RTT
    /// (dccps_syn_rtt) from the echo on the packet that completes the
    /// handshake; without it its sender starts at one packet per second
    /// with the 200 ms fallback RTT (see docs/dccp.md).
    ts_echo: Option<(u32, Time)>,
    last_sync: Option<Time>,
    /// Non-data packets sent since the last data packet (NDP Count).
    ndp: u64,
    close_wanted: bool,
    /// Server: the client may still be in PARTOPEN (it leaves on our
    /// first packet after OPEN); answer its packets until it acknowledges
    /// `first_open_seq` (sec. 8.1.5).
    peer_partopen: bool,
    first_open_seq: Option<Seq>,
    /// The newest arrival stamp handed to a CCID.
    last_arrived: Option<Time>,
    stats: Stats,
}

/// A receive stamp the CCID may trust: one more than 1 s after `now` or
/// 64 s before it is not an arrival but a step of the wall clock the
/// stamp was mapped through, and becomes `now`; and stamps never go back
/// (a stamp of an earlier buffer read later, or a clock step).
fn arrival_stamp(now: Time, arrived: Time, last: Option<Time>) -> Time {
    let sane = arrived <= now + Duration::from_secs(1)
        && now
            .checked_sub(Duration::from_secs(64))
            .is_none_or(|floor| arrived >= floor);
    let t = if sane { arrived } else { now };
    last.map_or(t, |l| t.max(l))
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("state", &self.state)
            .field("server", &self.is_server)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Connection {
    fn new(cfg: Config, is_server: bool) -> Self {
        let mut neg = Negotiator::new(is_server);
        for loc in [Loc::Local, Loc::Remote] {
            neg.set_prefs(Feature::Ccid, loc, &cfg.supported_ccids);
        }
        if cfg.seq_window != 100 {
            neg.change_nn(Feature::SequenceWindow, cfg.seq_window);
        }
        if cfg.ack_ratio != 2 {
            neg.change_nn(Feature::AckRatio, cfg.ack_ratio);
        }
        let mut seqs = SeqState::new(cfg.iss.sub(1));
        seqs.iss = cfg.iss;
        seqs.gar = cfg.iss;
        seqs.w_local = cfg.seq_window;
        Connection {
            queue: DatagramQueue::new(cfg.queue_bytes),
            cfg,
            state: State::Closed,
            is_server,
            seqs,
            neg,
            tx: None,
            rx: None,
            events: VecDeque::new(),
            owed: Owed::default(),
            retx_at: None,
            backoff: Duration::ZERO,
            give_up_at: None,
            timewait_until: None,
            probe_sent: None,
            handshake_rtt: None,
            ts_echo: None,
            last_sync: None,
            ndp: 0,
            close_wanted: false,
            peer_partopen: false,
            first_open_seq: None,
            last_arrived: None,
            stats: Stats::default(),
        }
    }

    /// A client that starts its handshake at `now`.
    pub fn connect(now: Time, cfg: Config) -> Self {
        let (up, down) = cfg.ccids;
        let mut c = Connection::new(cfg, false);
        c.neg.change_sp(Feature::Ccid, Loc::Local, &[up], true);
        c.neg.change_sp(Feature::Ccid, Loc::Remote, &[down], true);
        // CCID2 and SafeUDP need Ack Vectors from their receiver (RFC 4341
        // sec. 4); CCID3 wants NDP Counts from its sender (RFC 4342 sec.
        // 8.4).
        if up == 2 || up == safeudp::CCID {
            c.neg
                .change_sp(Feature::SendAckVector, Loc::Remote, &[1], false);
        }
        if down == 2 || down == safeudp::CCID {
            c.neg
                .change_sp(Feature::SendAckVector, Loc::Local, &[1], false);
        }
        if up == 3 {
            c.neg
                .change_sp(Feature::SendNdpCount, Loc::Local, &[1], false);
        }
        if down == 3 {
            c.neg
                .change_sp(Feature::SendNdpCount, Loc::Remote, &[1], false);
        }
        c.state = State::Request;
        c.owed.request = true;
        c.arm(now, c.cfg.rto);
        c
    }

    /// A server waiting for one Request.
    pub fn listen(cfg: Config) -> Self {
        let mut c = Connection::new(cfg, true);
        c.state = State::Listen;
        c
    }

    pub fn state(&self) -> State {
        self.state
    }
    pub fn stats(&self) -> Stats {
        self.stats
    }
    /// The sending CCID's state for a results interval.
    pub fn ccid_state(&self) -> Option<CcidState> {
        self.tx.as_ref().map(|t| t.state())
    }
    /// The ports the connection is on (local, remote).
    pub fn ports(&self) -> (u16, u16) {
        (self.cfg.local_port, self.cfg.remote_port)
    }
    /// Done for the application (TIMEWAIT or CLOSED).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed | State::TimeWait)
    }
    /// Nothing more to send or wait for: the driver may drop it.
    pub fn is_drained(&self) -> bool {
        self.state == State::Closed && self.owed.reset.is_none()
    }
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
    /// The sending CCID's next congestion notification (SafeUDP).
    pub fn poll_congestion(&mut self) -> Option<CongestionEvent> {
        self.tx.as_mut().and_then(|t| t.poll_event())
    }
    /// The receiving socket's drop count (SO_RXQ_OVFL) since the
    /// connection opened (the driver subtracts the count at open), for
    /// the receiving CCID to report (SafeUDP); the driver calls it when
    /// the count changes.
    pub fn set_host_drops(&mut self, total: u64) {
        if let Some(rx) = self.rx.as_mut() {
            rx.on_host_drops(total);
        }
    }
    /// Whether `send` would take another datagram of `len` bytes.
    pub fn can_queue(&self, len: usize) -> bool {
        self.queue.room() >= len
    }
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Queues one application datagram; false when the queue is full or
    /// the connection is closing (the datagram is dropped, as DCCP may).
    pub fn send(&mut self, data: &[u8]) -> bool {
        let open = matches!(
            self.state,
            State::Request | State::Respond | State::PartOpen | State::Open
        );
        if !open || self.close_wanted || !self.queue.push(data) {
            self.stats.queue_full += 1;
            return false;
        }
        true
    }

    /// Closes after the queued data left (sec. 8.3): a client sends
    /// Close, a server CloseReq so the client keeps TIMEWAIT.
    pub fn close(&mut self, now: Time) {
        match self.state {
            State::Open | State::PartOpen => {
                self.close_wanted = true;
                self.maybe_start_close(now);
            }
            State::Request | State::Respond => {
                self.reset(ResetCode::Aborted, self.seqs.gsr, false);
            }
            State::Listen => self.finish(CloseReason::Closed, State::Closed),
            _ => {}
        }
    }

    fn maybe_start_close(&mut self, now: Time) {
        if !self.close_wanted || !self.queue.is_empty() {
            return;
        }
        if !matches!(self.state, State::Open | State::PartOpen) {
            return;
        }
        if self.is_server {
            self.state = State::CloseReq;
            self.owed.closereq = true;
        } else {
            self.state = State::Closing;
            self.owed.close = true;
        }
        let rto = self.close_rto();
        self.arm(now, rto);
    }

    fn close_rto(&self) -> Duration {
        self.handshake_rtt.map_or(self.cfg.partopen_rto, |r| {
            (2 * r).max(self.cfg.partopen_rto)
        })
    }

    fn arm(&mut self, now: Time, first: Duration) {
        self.backoff = first;
        self.retx_at = Some(now + first);
        self.give_up_at = Some(now + self.cfg.give_up);
    }

    fn disarm(&mut self) {
        self.retx_at = None;
        self.give_up_at = None;
    }

    fn finish(&mut self, why: CloseReason, to: State) {
        if !self.is_closed() {
            self.events.push_back(Event::Closed(why));
        }
        self.state = to;
        self.disarm();
        self.queue = DatagramQueue::new(0);
    }

    /// Sends Reset `code` acknowledging `ack` and ends the connection.
    fn reset(&mut self, code: ResetCode, ack: Seq, by_peer: bool) {
        self.owed.reset = Some((code, ack));
        self.finish(CloseReason::Reset { code, by_peer }, State::Closed);
    }

    fn enter_timewait(&mut self, now: Time, why: CloseReason) {
        self.finish(why, State::TimeWait);
        self.timewait_until = Some(now + 2 * self.cfg.msl);
    }

    /// Whether the receiver's CCID wants to send feedback now.
    #[cfg(test)]
    pub(crate) fn feedback_due(&self, now: Time) -> bool {
        self.rx.as_ref().is_some_and(|r| r.ack_due(now))
    }

    /// When [`Connection::handle_timeout`] must run next.
    pub fn poll_timeout(&self) -> Option<Time> {
        let mut t = [self.retx_at, self.give_up_at, self.timewait_until]
            .into_iter()
            .flatten()
            .min();
        if matches!(
            self.state,
            State::Open | State::PartOpen | State::CloseReq | State::Closing
        ) {
            let more = [
                self.tx.as_ref().and_then(|c| c.poll_timeout()),
                self.rx.as_ref().and_then(|c| c.poll_timeout()),
                self.tx
                    .as_ref()
                    .filter(|_| !self.queue.is_empty())
                    .and_then(|c| c.next_send_time()),
            ];
            t = t.into_iter().chain(more.into_iter().flatten()).min();
        }
        t
    }

    pub fn handle_timeout(&mut self, now: Time) {
        if self.timewait_until.is_some_and(|t| now >= t) {
            self.timewait_until = None;
            self.state = State::Closed;
        }
        if self.give_up_at.is_some_and(|t| now >= t) {
            self.finish(CloseReason::TimedOut, State::Closed);
            return;
        }
        if self.retx_at.is_some_and(|t| now >= t) {
            self.probe_sent = None;
            match self.state {
                State::Request => self.owed.request = true,
                State::PartOpen => self.owed.ack = true,
                State::Closing => self.owed.close = true,
                State::CloseReq => self.owed.closereq = true,
                _ => {}
            }
            self.backoff = (self.backoff * 2).min(Duration::from_secs(64));
            self.retx_at = match self.state {
                State::Request | State::PartOpen | State::Closing | State::CloseReq => {
                    Some(now + self.backoff)
                }
                _ => None,
            };
        }
        if let Some(tx) = self.tx.as_mut() {
            if tx.poll_timeout().is_some_and(|t| now >= t) {
                tx.on_timeout(now);
            }
        }
    }

    /// Handles one received DCCP packet (the bytes after the IP or UDP
    /// header). Returns the payload of an accepted Data/DataAck packet,
    /// borrowed from `bytes`.
    pub fn handle_datagram<'a>(&mut self, now: Time, bytes: &'a [u8]) -> Option<&'a [u8]> {
        self.handle_datagram_ecn(now, bytes, false)
    }

    /// As [`Connection::handle_datagram`], with the IP header's ECN CE mark.
    pub fn handle_datagram_ecn<'a>(
        &mut self,
        now: Time,
        bytes: &'a [u8],
        ecn_ce: bool,
    ) -> Option<&'a [u8]> {
        self.handle_arrival(now, now, bytes, ecn_ce)
    }

    /// As [`Connection::handle_datagram_ecn`] for a datagram that reached
    /// this host at `arrived` (the kernel's receive stamp on this
    /// connection's clock), handled at `now`. The receiver's CCID measures
    /// rates on arrival times; everything else runs on `now`.
    pub fn handle_arrival<'a>(
        &mut self,
        now: Time,
        arrived: Time,
        bytes: &'a [u8],
        ecn_ce: bool,
    ) -> Option<&'a [u8]> {
        if packet::verify_checksum(bytes, &self.cfg.pseudo.reversed()).is_err() {
            self.stats.dropped_checksum += 1;
            return None;
        }
        let Ok(p) = packet::parse(bytes) else {
            self.stats.dropped_invalid += 1;
            return None;
        };
        let mut h = p.header;
        if h.dst_port != self.cfg.local_port
            || (self.state != State::Listen && h.src_port != self.cfg.remote_port)
        {
            self.stats.dropped_invalid += 1;
            return None;
        }
        if !h.long {
            h.seq = Seq::extend_short(self.seqs.gsr, h.seq.get() as u32);
            h.body = match h.body {
                Body::Ack { ack } => Body::Ack {
                    ack: Seq::extend_short(self.seqs.gss, ack.get() as u32),
                },
                Body::DataAck { ack } => Body::DataAck {
                    ack: Seq::extend_short(self.seqs.gss, ack.get() as u32),
                },
                b => b,
            };
        }
        let t = h.body.packet_type();
        let ack = h.body.ack();
        match self.state {
            State::Closed => {
                if t != PacketType::Reset {
                    // Sec. 8.3.1: no connection.
                    self.owed.reset = Some((ResetCode::NoConnection, h.seq));
                }
                return None;
            }
            State::TimeWait => return None,
            State::Listen => {
                self.on_listen(now, &h, p.options);
                return None;
            }
            State::Request => {
                self.on_request_state(now, &h, p.options);
                return None;
            }
            _ => {}
        }
        // Sec. 8.5 step 6: sequence and acknowledgement validity.
        if !self.seqs.valid(t, h.seq, ack) {
            self.stats.dropped_invalid += 1;
            // Step 6: answer with a Sync (rate-limited), acknowledging GSR
            // for a Reset and the packet otherwise; never answer a Sync.
            let sync_ack = match t {
                PacketType::Sync | PacketType::SyncAck => None,
                PacketType::Reset => Some(self.seqs.gsr),
                _ => Some(h.seq),
            };
            if let Some(a) = sync_ack {
                if self
                    .last_sync
                    .is_none_or(|l| now.duration_since(l) >= SYNC_INTERVAL)
                {
                    self.owed.sync = Some(a);
                    self.last_sync = Some(now);
                }
            }
            return None;
        }
        self.seqs.on_valid(h.seq, ack);
        if t == PacketType::Reset {
            if let Body::Reset { code, .. } = h.body {
                // While closing, any Reset ends the close (a lost
                // Reset(Closed) is answered by No Connection, sec. 8.3).
                let closing = matches!(self.state, State::Closing | State::CloseReq);
                let why = if code == ResetCode::Closed || closing {
                    CloseReason::Closed
                } else {
                    CloseReason::Reset {
                        code,
                        by_peer: true,
                    }
                };
                self.enter_timewait(now, why);
            }
            return None;
        }
        if let Err(code) = self.process_options(now, p.options) {
            self.reset(code, h.seq, false);
            return None;
        }
        match (self.state, t) {
            (State::Respond, PacketType::Request) => {
                self.owed.response = true;
                return None;
            }
            (State::Respond, PacketType::Ack | PacketType::DataAck) => {
                self.handshake_rtt = self.probe_sent.map(|s| now.duration_since(s));
                self.open(now);
                self.state = State::Open;
                self.give_up_at = None;
                self.peer_partopen = true;
                self.owed.ack = true;
            }
            (State::Open, _) if self.peer_partopen => {
                if ack.is_some_and(|a| self.first_open_seq.is_some_and(|f| !a.before(f))) {
                    self.peer_partopen = false;
                } else {
                    self.owed.ack = true;
                }
            }
            (State::PartOpen, PacketType::Response) => {
                // Our Ack was lost: acknowledge again.
                self.owed.ack = true;
                return None;
            }
            (State::PartOpen, PacketType::Sync | PacketType::SyncAck) => {}
            (State::PartOpen, _) => {
                self.state = State::Open;
                self.disarm();
                self.maybe_start_close(now);
            }
            _ => {}
        }
        match t {
            PacketType::Close => {
                self.reset(ResetCode::Closed, h.seq, true);
                // A Close answered is a clean end for us too.
                if let Some(Event::Closed(r)) = self.events.back_mut() {
                    *r = CloseReason::Closed;
                }
                return None;
            }
            PacketType::CloseReq if !self.is_server => {
                self.state = State::Closing;
                self.owed.close = true;
                let rto = self.close_rto();
                self.arm(now, rto);
                return None;
            }
            PacketType::Sync => self.owed.syncack = Some(h.seq),
            _ => {}
        }
        let arrived = arrival_stamp(now, arrived, self.last_arrived);
        self.last_arrived = Some(arrived);
        if let (Some(ack), Some(tx)) = (ack, self.tx.as_mut()) {
            tx.on_ack(
                now,
                &Feedback {
                    ack,
                    options: p.options,
                    arrived,
                },
            );
        }
        if let (Some(ack), Some(rx)) = (ack, self.rx.as_mut()) {
            rx.on_peer_ack(ack);
        }
        let data = t.has_data();
        if let Some(rx) = self.rx.as_mut() {
            let ndp = Options::new(p.options)
                .flatten()
                .find_map(|(o, _)| match o {
                    Opt::NdpCount(n) => Some(n),
                    _ => None,
                })
                .unwrap_or(0);
            rx.on_packet(
                now,
                &Arrival {
                    seq: h.seq,
                    data,
                    ccval: h.ccval,
                    ndp,
                    bytes: bytes.len(),
                    ecn_ce,
                    arrived,
                },
            );
        }
        if ecn_ce {
            self.stats.ecn_ce_received += 1;
        }
        if data
            && matches!(
                self.state,
                State::Open | State::PartOpen | State::CloseReq | State::Closing
            )
        {
            self.stats.data_received += 1;
            self.stats.data_bytes_received += p.payload.len() as u64;
            return Some(p.payload);
        }
        None
    }

    fn process_options(&mut self, now: Time, area: &[u8]) -> Result<(), ResetCode> {
        for o in Options::new(area) {
            match o {
                Ok((Opt::Timestamp(v), _)) => self.ts_echo = Some((v, now)),
                Ok((Opt::Feature { op, feature, value }, m)) => {
                    self.neg.handle(op, feature, value, m)?
                }
                // Mandatory before an option we do not understand (sec.
                // 5.8.2). CCID-specific options are the CCIDs' business.
                Ok((Opt::ReservedSingle(_), true)) => return Err(ResetCode::MandatoryError),
                Ok((Opt::Other { kind, .. }, true)) if kind < 128 => {
                    return Err(ResetCode::MandatoryError)
                }
                Ok((_, _)) => {}
                Err(super::DccpError::MandatoryError(_)) => return Err(ResetCode::MandatoryError),
                Err(_) => return Err(ResetCode::OptionError),
            }
        }
        Ok(())
    }

    fn on_listen(&mut self, now: Time, h: &Header, options: &[u8]) {
        let Body::Request { service } = h.body else {
            if h.body.packet_type() != PacketType::Reset {
                self.cfg.remote_port = h.src_port;
                self.owed.reset = Some((ResetCode::NoConnection, h.seq));
            }
            return;
        };
        self.cfg.remote_port = h.src_port;
        self.cfg.service = service;
        self.seqs.set_isr(h.seq);
        if !self.cfg.accept_services.contains(&service) {
            self.reset(ResetCode::BadServiceCode, h.seq, false);
            return;
        }
        if let Err(code) = self.process_options(now, options) {
            self.reset(code, h.seq, false);
            return;
        }
        self.state = State::Respond;
        self.owed.response = true;
        self.give_up_at = Some(now + self.cfg.give_up);
    }

    fn on_request_state(&mut self, now: Time, h: &Header, options: &[u8]) {
        // Sec. 8.5 step 5: only a Response or Reset acknowledging one of
        // our Requests counts.
        let ack_ok = h
            .body
            .ack()
            .is_some_and(|a| a.within(self.seqs.iss, self.seqs.gss));
        match h.body {
            Body::Reset { code, .. } if ack_ok => self.enter_timewait(
                now,
                CloseReason::Reset {
                    code,
                    by_peer: true,
                },
            ),
            Body::Response { service, .. } if ack_ok => {
                self.seqs.set_isr(h.seq);
                if service != self.cfg.service {
                    self.reset(ResetCode::BadServiceCode, h.seq, false);
                    return;
                }
                if let Err(code) = self.process_options(now, options) {
                    self.reset(code, h.seq, false);
                    return;
                }
                if self.neg.changing() {
                    // The server ignored a Change: treat as refused.
                    self.reset(ResetCode::MandatoryError, h.seq, false);
                    return;
                }
                self.handshake_rtt = self.probe_sent.map(|s| now.duration_since(s));
                self.state = State::PartOpen;
                self.open(now);
                self.owed.ack = true;
                self.arm(now, self.cfg.partopen_rto);
                self.give_up_at = Some(now + self.cfg.give_up);
            }
            Body::Reset { .. } | Body::Response { .. } => {}
            _ => {
                self.stats.dropped_invalid += 1;
            }
        }
    }

    /// Creates the CCIDs the negotiation chose and reports the connection.
    fn open(&mut self, now: Time) {
        let tx_ccid = self.neg.value(Feature::Ccid, Loc::Local) as u8;
        let rx_ccid = self.neg.value(Feature::Ccid, Loc::Remote) as u8;
        self.seqs.w_remote = self.neg.value(Feature::SequenceWindow, Loc::Remote);
        self.seqs.w_local = self.neg.value(Feature::SequenceWindow, Loc::Local);
        let cfg = CcidConfig {
            mss: self.cfg.mss,
            ack_ratio: self.neg.value(Feature::AckRatio, Loc::Remote),
            handshake_rtt: self.handshake_rtt,
            safeudp: self.cfg.safeudp,
        };
        self.tx = ccid::new_tx(tx_ccid, now, &cfg);
        self.rx = ccid::new_rx(rx_ccid, now, &cfg);
        self.events.push_back(Event::Connected { tx_ccid, rx_ccid });
    }

    /// Writes the next packet to send into `buf` and returns its length.
    pub fn poll_transmit(&mut self, now: Time, buf: &mut [u8]) -> Option<usize> {
        let gsr = self.seqs.gsr;
        if let Some((code, ack)) = self.owed.reset.take() {
            let seq = self.seqs.next_seq();
            return self.emit(
                now,
                buf,
                seq,
                Body::Reset {
                    ack,
                    code,
                    data: [0; 3],
                },
            );
        }
        if self.is_closed() {
            return None;
        }
        let body = if std::mem::take(&mut self.owed.request) {
            Body::Request {
                service: self.cfg.service,
            }
        } else if std::mem::take(&mut self.owed.response) {
            Body::Response {
                ack: gsr,
                service: self.cfg.service,
            }
        } else if let Some(a) = self.owed.syncack.take() {
            Body::SyncAck { ack: a }
        } else if let Some(a) = self.owed.sync.take() {
            self.stats.syncs_sent += 1;
            Body::Sync { ack: a }
        } else if std::mem::take(&mut self.owed.close) {
            Body::Close { ack: gsr }
        } else if std::mem::take(&mut self.owed.closereq) {
            Body::CloseReq { ack: gsr }
        } else if self.data_allowed(now) && self.admit_front(now) {
            let len = self.queue.front().map_or(0, <[u8]>::len);
            let seq = self.seqs.next_seq();
            let n = self.emit_data(now, buf, seq, gsr)?;
            self.queue.pop();
            self.stats.data_sent += 1;
            self.stats.data_bytes_sent += len as u64;
            self.maybe_start_close(now);
            return Some(n);
        } else if std::mem::take(&mut self.owed.ack)
            || self.rx.as_ref().is_some_and(|r| r.ack_due(now))
        {
            self.stats.acks_sent += 1;
            Body::Ack { ack: gsr }
        } else {
            return None;
        };
        if matches!(body, Body::Request { .. } | Body::Response { .. }) {
            // Karn: only an unretransmitted probe yields the handshake RTT.
            self.probe_sent = if self.probe_sent.is_none() && self.backoff <= self.cfg.rto {
                Some(now)
            } else {
                None
            };
        }
        let seq = self.seqs.next_seq();
        self.emit(now, buf, seq, body)
    }

    /// Drops queued datagrams the sending CCID refuses; true when the
    /// one now at the front may go.
    fn admit_front(&mut self, now: Time) -> bool {
        while let (Some(len), Some(tx)) = (self.queue.front().map(<[u8]>::len), self.tx.as_mut()) {
            if tx.admit(now, len) {
                return true;
            }
            self.queue.pop();
            self.stats.dropped_by_ccid += 1;
        }
        self.maybe_start_close(now);
        false
    }

    fn data_allowed(&self, now: Time) -> bool {
        matches!(self.state, State::Open | State::PartOpen)
            && !self.queue.is_empty()
            && self.tx.as_ref().is_some_and(|t| t.can_send(now))
    }

    fn emit_data(&mut self, now: Time, buf: &mut [u8], seq: Seq, gsr: Seq) -> Option<usize> {
        let ccval = self.tx.as_mut().map_or(0, |t| t.ccval(now));
        let h = Header {
            src_port: self.cfg.local_port,
            dst_port: self.cfg.remote_port,
            ccval,
            cscov: 0,
            long: true,
            seq,
            body: Body::DataAck { ack: gsr },
        };
        let mut w = PacketWriter::new(buf, &h).ok()?;
        self.common_options(now, &mut w, seq, gsr)?;
        if self.ndp > 0 && self.neg.value(Feature::SendNdpCount, Loc::Local) == 1 {
            w.option(&Opt::NdpCount(self.ndp)).ok()?;
        }
        let payload = self.queue.front().unwrap_or_default();
        let n = w.finish(payload, &self.cfg.pseudo).ok()?;
        self.ndp = 0;
        self.note_open_seq(seq);
        if let Some(tx) = self.tx.as_mut() {
            tx.on_packet_sent(now, seq, n, true);
        }
        Some(n)
    }

    fn note_open_seq(&mut self, seq: Seq) {
        if self.peer_partopen && self.first_open_seq.is_none() {
            self.first_open_seq = Some(seq);
        }
    }

    /// Feature options while negotiating, and the receiver's feedback
    /// when an acknowledgement is due.
    fn common_options(
        &mut self,
        now: Time,
        w: &mut PacketWriter<'_>,
        seq: Seq,
        ack: Seq,
    ) -> Option<()> {
        if matches!(
            self.state,
            State::Request | State::Respond | State::PartOpen
        ) {
            self.neg.write(w).ok()?;
        }
        if let Some((echo, at)) = self.ts_echo.take() {
            // Elapsed time since the Timestamp came, in 10 us units.
            let tens_of_us = now.duration_since(at).as_micros() / 10;
            let elapsed = Elapsed::of(tens_of_us.min(u128::from(u32::MAX)) as u32);
            w.option(&Opt::TimestampEcho { echo, elapsed }).ok()?;
        }
        if let Some(rx) = self.rx.as_mut() {
            if rx.ack_due(now) {
                rx.write_feedback(now, seq, ack, w).ok()?;
            }
        }
        Some(())
    }

    fn emit(&mut self, now: Time, buf: &mut [u8], seq: Seq, body: Body) -> Option<usize> {
        let h = Header {
            src_port: self.cfg.local_port,
            dst_port: self.cfg.remote_port,
            ccval: 0,
            cscov: 0,
            long: true,
            seq,
            body,
        };
        let mut w = PacketWriter::new(buf, &h).ok()?;
        if !matches!(body, Body::Reset { .. }) {
            let ack = body.ack().unwrap_or_default();
            self.common_options(now, &mut w, seq, ack)?;
        }
        let n = w.finish(&[], &self.cfg.pseudo).ok()?;
        self.ndp += 1;
        self.note_open_seq(seq);
        if let Some(tx) = self.tx.as_mut() {
            tx.on_packet_sent(now, seq, n, false);
        }
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dccp::sim::{Net, Path};

    const SVC: u32 = 42;

    #[test]
    fn arrival_stamps_are_monotone_and_bounded() {
        let s = Duration::from_secs(1);
        let now = Time::ZERO + 100 * s;
        let ms = Duration::from_millis(1);
        // A stamp from a stale turn (later than now) or a queue (earlier).
        assert_eq!(arrival_stamp(now, now + 30 * ms, None), now + 30 * ms);
        assert_eq!(arrival_stamp(now, now - 30 * ms, None), now - 30 * ms);
        // Never back, even when the stamp is honest but older.
        assert_eq!(arrival_stamp(now, now - 30 * ms, Some(now)), now);
        // A wall clock step either way is no arrival: now stands for it.
        assert_eq!(arrival_stamp(now, now + 2 * s, None), now);
        assert_eq!(arrival_stamp(now, now - 65 * s, None), now);
        assert_eq!(arrival_stamp(now, now - 65 * s, Some(now + ms)), now + ms);
        // Early in the clock's life the floor cannot underflow.
        assert_eq!(arrival_stamp(Time::ZERO + ms, Time::ZERO, None), Time::ZERO);
    }

    fn pair(ccid: u8, server_ccids: Vec<u8>, services: Vec<u32>) -> Net {
        let t0 = Time::ZERO;
        let mut sc = Config::server(5001, services);
        sc.supported_ccids = server_ccids;
        Net::new(
            t0,
            Connection::connect(t0, Config::client(40000, 5001, SVC, ccid)),
            Connection::listen(sc),
            Path::ideal(10),
            Path::ideal(10),
        )
    }

    fn run_until(net: &mut Net, secs: u64, mut until: impl FnMut(&Net) -> bool) {
        let limit = net.now + Duration::from_secs(secs);
        let mut sink = |_: bool, _: &[u8]| {};
        while !until(net) && net.step(limit, &mut sink) {}
    }

    #[test]
    fn handshake_negotiates_each_ccid_and_measures_the_rtt() {
        for ccid in [2, 3, safeudp::CCID] {
            let mut net = pair(ccid, ccid::IMPLEMENTED.to_vec(), vec![SVC]);
            assert_eq!(net.a.state(), State::Request);
            run_until(&mut net, 5, |n| {
                n.a.state() == State::Open && n.b.state() == State::Open
            });
            let want = Event::Connected {
                tx_ccid: ccid,
                rx_ccid: ccid,
            };
            assert_eq!(net.events_a, vec![want]);
            assert_eq!(net.events_b, vec![want]);
            assert_eq!(net.a.handshake_rtt, Some(Duration::from_millis(20)));
            assert_eq!(net.b.handshake_rtt, Some(Duration::from_millis(20)));
            let sav = net.b.neg.value(Feature::SendAckVector, Loc::Local);
            assert_eq!(
                sav,
                u64::from(ccid != 3),
                "CCID2 and SafeUDP receivers send Ack Vectors"
            );
        }
    }

    #[test]
    fn data_flows_both_ways() {
        let mut net = pair(2, vec![2, 3], vec![SVC]);
        run_until(&mut net, 5, |n| n.b.state() == State::Open);
        for i in 0..20u8 {
            assert!(net.a.send(&[i; 100]));
            assert!(net.b.send(&[i + 100; 50]));
        }
        let (mut to_b, mut to_a) = (Vec::new(), Vec::new());
        let limit = net.now + Duration::from_secs(5);
        while net.step(limit, &mut |dir, p| {
            if dir {
                to_b.push(p[0])
            } else {
                to_a.push(p[0])
            }
        }) {}
        assert_eq!(to_b, (0..20).collect::<Vec<u8>>());
        assert_eq!(to_a, (100..120).collect::<Vec<u8>>());
    }

    #[test]
    fn lost_request_and_lost_ack_are_retransmitted() {
        let mut net = pair(2, vec![2], vec![SVC]);
        net.drop_next = [1, 0]; // the first Request
        let start = net.now;
        run_until(&mut net, 10, |n| n.a.state() == State::PartOpen);
        // Retransmitted after the 1 s RTO, answered 20 ms later.
        assert_eq!(net.now.duration_since(start), Duration::from_millis(1020));
        assert_eq!(
            net.a.handshake_rtt, None,
            "Karn: no sample from a retransmission"
        );
        run_until(&mut net, 10, |n| n.a.state() == State::Open);
        assert!(net.b.state() == State::Open);

        // The client's PARTOPEN Ack is lost: resent after 200 ms.
        let mut net = pair(2, vec![2], vec![SVC]);
        net.flush();
        net.ab.loss_ppm = 1_000_000;
        run_until(&mut net, 10, |n| n.a.state() == State::PartOpen);
        net.ab.loss_ppm = 0;
        let t = net.now;
        run_until(&mut net, 10, |n| n.b.state() == State::Open);
        assert_eq!(net.now.duration_since(t), Duration::from_millis(210));
        // The server's answer takes the client out of PARTOPEN.
        run_until(&mut net, 10, |n| n.a.state() == State::Open);
        assert_eq!(net.now.duration_since(t), Duration::from_millis(220));
        assert!(net.a.send(b"hello"));
        let mut got = Vec::new();
        let limit = net.now + Duration::from_secs(1);
        while net.step(limit, &mut |_, p| got.push(p.to_vec())) {}
        assert_eq!(got, vec![b"hello".to_vec()]);
        assert_eq!(net.a.state(), State::Open, "no give-up once open");
    }

    #[test]
    fn an_unanswered_request_gives_up() {
        let mut net = pair(2, vec![2], vec![SVC]);
        net.ab.loss_ppm = 1_000_000;
        let start = net.now;
        run_until(&mut net, 100, |n| n.a.is_closed());
        assert_eq!(net.events_a, vec![Event::Closed(CloseReason::TimedOut)]);
        assert_eq!(net.now.duration_since(start), Duration::from_secs(64));
    }

    #[test]
    fn a_refused_service_code_resets_with_bad_service_code() {
        let mut net = pair(2, vec![2, 3], vec![7, 8]);
        run_until(&mut net, 5, |n| n.a.is_closed());
        let refused = CloseReason::Reset {
            code: ResetCode::BadServiceCode,
            by_peer: true,
        };
        assert_eq!(net.events_a, vec![Event::Closed(refused)]);
        assert_eq!(net.a.state(), State::TimeWait);
        assert_eq!(
            net.events_b,
            vec![Event::Closed(CloseReason::Reset {
                code: ResetCode::BadServiceCode,
                by_peer: false
            })]
        );
        assert!(net.b.is_drained());
        assert!(!net.a.send(b"x"), "nothing is sent on a refused connection");
    }

    #[test]
    fn a_mandatory_unknown_option_resets_the_request() {
        let t0 = Time::ZERO;
        let mut server = Connection::listen(Config::server(5001, vec![SVC]));
        let h = Header {
            src_port: 40000,
            dst_port: 5001,
            ccval: 0,
            cscov: 0,
            long: true,
            seq: Seq::new(9),
            body: Body::Request { service: SVC },
        };
        let mut buf = [0u8; 64];
        let mut w = PacketWriter::new(&mut buf, &h).unwrap();
        w.option(&Opt::Mandatory).unwrap();
        w.option(&Opt::Other {
            kind: 100,
            data: &[1],
        })
        .unwrap();
        let n = w.finish(&[], &Pseudo::None).unwrap();
        assert_eq!(server.handle_datagram(t0, &buf[..n]), None);
        let mut out = [0u8; 64];
        let m = server.poll_transmit(t0, &mut out).unwrap();
        let p = packet::parse(&out[..m]).unwrap();
        assert!(matches!(
            p.header.body,
            Body::Reset {
                code: ResetCode::MandatoryError,
                ack,
                ..
            } if ack == Seq::new(9)
        ));
        assert!(server.is_drained());
    }

    /// Linux's DCCP puts a Timestamp on its Response and takes its CCID3
    /// sender's first RTT from the echo on the client's next packet
    /// (dccps_syn_rtt). Without the echo the kernel's sender started at
    /// one packet per second with its 200 ms fallback RTT and sent our
    /// receiver 3 packets in 2 s at -b 20M (docs/dccp.md). The echo
    /// goes once, on the packet that completes the handshake, with the
    /// time it was held.
    #[test]
    fn a_timestamp_on_the_response_is_echoed_once_with_the_time_held() {
        let t0 = Time::ZERO;
        let ms = Duration::from_millis(1);
        let mut client = Connection::connect(t0, Config::client(40000, 5001, SVC, 3));
        let mut server = Connection::listen(Config::server(5001, vec![SVC]));
        let (mut a, mut b) = ([0u8; 512], [0u8; 512]);
        let n = client.poll_transmit(t0, &mut a).unwrap();
        assert_eq!(server.handle_datagram(t0 + 10 * ms, &a[..n]), None);
        let n = server.poll_transmit(t0 + 10 * ms, &mut b).unwrap();
        // The server's Response as Linux sends it: a Timestamp (10 us
        // units of its own clock) among its options.
        let stamp = 0x0005_6E9A;
        let p = packet::parse(&b[..n]).unwrap();
        assert!(matches!(p.header.body, Body::Response { .. }));
        let mut w = PacketWriter::new(&mut a, &p.header).unwrap();
        for (o, _) in Options::new(p.options).flatten() {
            w.option(&o).unwrap();
        }
        w.option(&Opt::Timestamp(stamp)).unwrap();
        let n = w.finish(p.payload, &Pseudo::None).unwrap();
        assert_eq!(client.handle_datagram(t0 + 20 * ms, &a[..n]), None);
        assert_eq!(client.state(), State::PartOpen);

        let echoes = |buf: &[u8]| {
            let p = packet::parse(buf).unwrap();
            Options::new(p.options)
                .flatten()
                .filter_map(|(o, _)| match o {
                    Opt::TimestampEcho { echo, elapsed } => Some((echo, elapsed)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        // 3 ms later the attach record goes (a DataAck): it carries the
        // echo with 300 x 10 us held.
        assert!(client.send(b"attach"));
        let now = t0 + 23 * ms;
        let n = client.poll_transmit(now, &mut b).unwrap();
        assert!(matches!(
            packet::parse(&b[..n]).unwrap().header.body,
            Body::DataAck { .. }
        ));
        assert_eq!(echoes(&b[..n]), vec![(stamp, Elapsed::Short(300))]);
        // Nothing echoed twice.
        while let Some(n) = client.poll_transmit(now, &mut b) {
            assert_eq!(echoes(&b[..n]), vec![]);
        }
    }

    #[test]
    fn a_refused_ccid_resets_with_mandatory_error() {
        // A peer without the CCID (a kernel offered SafeUDP, whose 248 it
        // does not know, refuses the same way).
        for (ours, theirs) in [(3, vec![2]), (safeudp::CCID, vec![2, 3])] {
            let mut net = pair(ours, theirs, vec![SVC]);
            run_until(&mut net, 5, |n| n.a.is_closed());
            assert_eq!(
                net.events_a,
                vec![Event::Closed(CloseReason::Reset {
                    code: ResetCode::MandatoryError,
                    by_peer: true
                })]
            );
        }
    }

    #[test]
    fn client_close_ends_both_cleanly_and_holds_timewait() {
        let mut net = pair(2, vec![2], vec![SVC]);
        run_until(&mut net, 5, |n| n.b.state() == State::Open);
        net.a.send(b"last words");
        net.a.close(net.now);
        assert!(!net.a.send(b"too late"));
        run_until(&mut net, 5, |n| n.a.is_closed() && n.b.is_closed());
        assert_eq!(net.a.state(), State::TimeWait);
        assert_eq!(net.b.state(), State::Closed);
        assert_eq!(net.b.stats().data_received, 1, "queued data leaves first");
        assert_eq!(
            net.events_a.last(),
            Some(&Event::Closed(CloseReason::Closed))
        );
        assert_eq!(
            net.events_b.last(),
            Some(&Event::Closed(CloseReason::Closed))
        );
        // TIMEWAIT is 2 MSL.
        let t = net.now;
        run_until(&mut net, 600, |n| n.a.state() == State::Closed);
        assert_eq!(net.now.duration_since(t), Duration::from_secs(240));
    }

    #[test]
    fn server_close_uses_closereq_so_the_client_keeps_timewait() {
        let mut net = pair(2, vec![2], vec![SVC]);
        run_until(&mut net, 5, |n| n.b.state() == State::Open);
        net.b.close(net.now);
        assert_eq!(net.b.state(), State::CloseReq);
        run_until(&mut net, 5, |n| n.a.is_closed() && n.b.is_closed());
        assert_eq!(net.a.state(), State::TimeWait);
        assert_eq!(net.b.state(), State::Closed);
    }

    #[test]
    fn a_lost_close_is_retransmitted() {
        let mut net = pair(2, vec![2], vec![SVC]);
        run_until(&mut net, 5, |n| n.b.state() == State::Open);
        net.drop_next = [1, 0];
        net.a.close(net.now);
        run_until(&mut net, 5, |n| n.a.is_closed() && n.b.is_closed());
        assert_eq!(
            net.events_a.last(),
            Some(&Event::Closed(CloseReason::Closed))
        );
    }

    #[test]
    fn out_of_window_packets_draw_a_sync_and_do_not_move_gsr() {
        let mut net = pair(2, vec![2], vec![SVC]);
        run_until(&mut net, 5, |n| {
            n.a.state() == State::Open && n.b.state() == State::Open
        });
        let gsr = net.b.seqs.gsr;
        // A Data packet far beyond the window, from the right ports.
        let h = Header {
            src_port: 40000,
            dst_port: 5001,
            ccval: 0,
            cscov: 0,
            long: true,
            seq: gsr.add(10_000),
            body: Body::Data,
        };
        let mut buf = [0u8; 64];
        let n = PacketWriter::new(&mut buf, &h)
            .unwrap()
            .finish(b"bogus", &Pseudo::None)
            .unwrap();
        assert_eq!(net.b.handle_datagram(net.now, &buf[..n]), None);
        assert_eq!(net.b.seqs.gsr, gsr);
        let mut out = [0u8; 256];
        let m = net.b.poll_transmit(net.now, &mut out).unwrap();
        let p = packet::parse(&out[..m]).unwrap();
        assert_eq!(
            p.header.body,
            Body::Sync {
                ack: gsr.add(10_000)
            }
        );
        // That Sync acknowledges a packet the client never sent, so the
        // client drops it (its ack is outside AWL..AWH) and stays open.
        assert_eq!(net.a.handle_datagram(net.now, &out[..m]), None);
        assert_eq!(net.a.poll_transmit(net.now, &mut out), None);
        assert_eq!(net.a.state(), State::Open);
        // A valid Sync from the client draws a SyncAck acknowledging it.
        let seq = net.a.seqs.next_seq();
        let sync = Header {
            src_port: 40000,
            dst_port: 5001,
            ccval: 0,
            cscov: 0,
            long: true,
            seq,
            body: Body::Sync {
                ack: net.a.seqs.gsr,
            },
        };
        let k = PacketWriter::new(&mut out, &sync)
            .unwrap()
            .finish(&[], &Pseudo::None)
            .unwrap();
        let sync_bytes = out[..k].to_vec();
        assert_eq!(net.b.handle_datagram(net.now, &sync_bytes), None);
        let m = net.b.poll_transmit(net.now, &mut out).unwrap();
        assert_eq!(
            packet::parse(&out[..m]).unwrap().header.body,
            Body::SyncAck { ack: seq }
        );
        assert_eq!(net.a.handle_datagram(net.now, &out[..m]), None);
        assert_eq!(net.a.seqs.gsr, net.b.seqs.gss, "SyncAck resynchronised GSR");
        // A corrupted packet is dropped by the checksum.
        buf[n - 1] ^= 1;
        assert_eq!(net.b.handle_datagram(net.now, &buf[..n]), None);
        assert_eq!(net.b.stats().dropped_checksum, 1);
    }
}
