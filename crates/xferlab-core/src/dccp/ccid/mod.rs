//! The congestion-control face of DCCP: the [`CcidTx`] (sender half) and
//! [`CcidRx`] (receiver half) traits every CCID implements, the snapshot
//! they report, and the constructor by CCID number. A new congestion
//! control is one new file here plus one arm in [`new_tx`]/[`new_rx`].

pub mod ccid2;
pub mod ccid3;
pub mod safeudp;
pub mod tfrc;

use std::time::Duration;

use crate::time::Time;

use super::packet::PacketWriter;
use super::seq::Seq;
use super::DccpError;

pub use safeudp::{CongestionEvent, EpisodeState, EventCounts, SafeUdpConfig, Site};

/// An acknowledgement as the sender's CCID sees it: the packet's
/// acknowledgement number and its option area (Ack Vectors, CCID3
/// feedback options, Elapsed Time), walked without copying.
#[derive(Clone, Copy, Debug)]
pub struct Feedback<'a> {
    pub ack: Seq,
    pub options: &'a [u8],
    /// When the packet reached this host, as [`Arrival::arrived`].
    pub arrived: Time,
}

/// A packet as the receiver's CCID sees it.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    pub seq: Seq,
    pub data: bool,
    pub ccval: u8,
    /// Non-data packets the sender sent just before this one (NDP Count).
    pub ndp: u64,
    /// Bytes of the whole DCCP packet.
    pub bytes: usize,
    pub ecn_ce: bool,
    /// When the packet reached this host (the kernel's receive stamp, on
    /// the connection's clock), non-decreasing per connection. It may be
    /// later than the `now` it is handled at (a thread that read its clock
    /// and then lost the CPU handles what arrived meanwhile with that
    /// reading) or earlier (a queue in the socket): rates are measured on
    /// it, the feedback loop's timing on `now`.
    pub arrived: Time,
}

/// A CCID's state for one results interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CcidState {
    Ccid2 {
        /// Congestion window and packets in flight, in packets.
        cwnd: u64,
        pipe: u64,
        ssthresh: u64,
        rtt: Option<Duration>,
    },
    Ccid3 {
        /// Allowed sending rate and the receiver's reported rate, bytes/s.
        x: f64,
        x_recv: f64,
        /// Loss event rate.
        p: f64,
        rtt: Option<Duration>,
        /// Inter-packet interval s/X.
        t_ipi: Duration,
    },
    SafeUdp {
        /// The application's offered rate and the TFRC bound for the
        /// measured p and RTT (infinite before any network loss), bytes/s.
        offered: f64,
        bound: f64,
        /// Loss event rate of network losses and ECN marks.
        p: f64,
        rtt: Option<Duration>,
        /// Whether the CCID is limiting the rate (and dropping excess).
        enforcing: bool,
        /// Losses the receiver's socket explains, losses the network
        /// caused, ECN marks, datagrams the CCID dropped.
        host_losses: u64,
        network_losses: u64,
        ecn_marks: u64,
        dropped_by_ccid: u64,
        /// Where each site's congestion episode stands.
        network: EpisodeState,
        end_host: EpisodeState,
        /// The notifications raised so far.
        events: EventCounts,
    },
}

/// The sending half of a CCID.
pub trait CcidTx: Send {
    /// A packet left; `data` says whether it carried application data.
    fn on_packet_sent(&mut self, now: Time, seq: Seq, bytes: usize, data: bool);
    /// An acknowledgement (or CCID3 feedback) arrived.
    fn on_ack(&mut self, now: Time, fb: &Feedback<'_>);
    /// [`CcidTx::poll_timeout`] passed (RTO, no-feedback timer).
    fn on_timeout(&mut self, now: Time);
    fn poll_timeout(&self) -> Option<Time>;
    /// Whether a data packet may leave now.
    fn can_send(&self, now: Time) -> bool;
    /// When a data packet may leave without waiting for an ack (a pacing
    /// CCID); `None` for a window CCID that waits for acks.
    fn next_send_time(&self) -> Option<Time>;
    /// The CCVal header value for the next packet.
    fn ccval(&mut self, now: Time) -> u8;
    fn state(&self) -> CcidState;
    /// Whether the next application datagram of `bytes` may go at all;
    /// false drops it (counted by the connection as dropped by the CCID).
    /// Only a CCID that enforces a rate by dropping (SafeUDP) says no.
    fn admit(&mut self, _now: Time, _bytes: usize) -> bool {
        true
    }
    /// The next congestion notification for the application (SafeUDP's
    /// stand-in for new return codes); none from CCID2 and CCID3.
    fn poll_event(&mut self) -> Option<CongestionEvent> {
        None
    }
}

/// The receiving half of a CCID: decides when acknowledgements go and
/// what they carry.
pub trait CcidRx: Send {
    fn on_packet(&mut self, now: Time, a: &Arrival);
    /// The peer acknowledged our packet `ack` (lets Ack Vectors shrink).
    fn on_peer_ack(&mut self, ack: Seq);
    /// Whether an acknowledgement should go now.
    fn ack_due(&self, now: Time) -> bool;
    fn poll_timeout(&self) -> Option<Time>;
    /// Writes the acknowledgement's CCID options; `our_seq` is the
    /// sequence number of the packet carrying them, `ack` its ack number.
    fn write_feedback(
        &mut self,
        now: Time,
        our_seq: Seq,
        ack: Seq,
        w: &mut PacketWriter<'_>,
    ) -> Result<(), DccpError>;
    /// The receiving socket's cumulative drop count (SO_RXQ_OVFL), from
    /// the driver; a CCID that reports it (SafeUDP) sends it on.
    fn on_host_drops(&mut self, _total: u64) {}
}

/// Settings shared by the CCIDs.
#[derive(Clone, Copy, Debug)]
pub struct CcidConfig {
    /// The packet size the sender plans with (s, MSS), bytes.
    pub mss: usize,
    /// Ack Ratio (CCID2): data packets per acknowledgement.
    pub ack_ratio: u64,
    /// The RTT the handshake measured, if any.
    pub handshake_rtt: Option<Duration>,
    /// SafeUDP's windows and deadline.
    pub safeudp: SafeUdpConfig,
}

/// The CCIDs [`new_tx`] and [`new_rx`] build, in a server's default
/// order of preference.
pub const IMPLEMENTED: [u8; 3] = [2, 3, safeudp::CCID];

pub fn new_tx(ccid: u8, now: Time, cfg: &CcidConfig) -> Option<Box<dyn CcidTx>> {
    match ccid {
        2 => Some(Box::new(ccid2::Ccid2Tx::new(cfg))),
        3 => Some(Box::new(ccid3::Ccid3Tx::new(now, cfg))),
        safeudp::CCID => Some(Box::new(safeudp::SafeUdpTx::new(now, cfg))),
        _ => None,
    }
}

pub fn new_rx(ccid: u8, now: Time, cfg: &CcidConfig) -> Option<Box<dyn CcidRx>> {
    match ccid {
        2 => Some(Box::new(ccid2::Ccid2Rx::new(cfg))),
        3 => Some(Box::new(ccid3::Ccid3Rx::new(now, cfg))),
        safeudp::CCID => Some(Box::new(safeudp::SafeUdpRx::new(cfg))),
        _ => None,
    }
}
