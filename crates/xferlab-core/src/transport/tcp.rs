//! TCP's model: a byte stream whose senders read TCP_INFO every interval,
//! and that reading's types (MPTCP's subflows read the same).

use serde::{Deserialize, Serialize};

use super::{check_stream_knobs, Carrier, Iperf3Name, TransportModel};
use crate::knobs::{KnobError, Knobs};

pub struct Tcp;

impl TransportModel for Tcp {
    fn label(&self) -> &'static str {
        "TCP"
    }

    fn carrier(&self) -> Carrier {
        Carrier::Bytes
    }

    fn tcp_info(&self) -> bool {
        true
    }

    fn check_knobs(&self, knobs: &Knobs) -> Result<(), KnobError> {
        check_stream_knobs(knobs)
    }

    fn iperf3(&self) -> Option<Iperf3Name> {
        Some(Iperf3Name::default())
    }
}

/// TCP_INFO of one socket over one interval.
///
/// Gauges (rtt, cwnd, rates) are the value at the end of the interval;
/// fields named as counts or times are deltas over the interval.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TcpSample {
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub min_rtt_us: u32,
    /// snd_cwnd x snd_mss.
    pub cwnd_bytes: u64,
    pub snd_mss: u32,
    /// Segments retransmitted during the interval.
    pub retransmits: u64,
    /// Kernel's delivery-rate estimate, bit/s.
    pub delivery_rate_bps: f64,
    /// Kernel's pacing rate, bit/s.
    pub pacing_rate_bps: f64,
    /// Microseconds in the interval the socket had data in flight, and of
    /// those, limited by the receiver's window or by the send buffer: the
    /// first answer to "why is it slow".
    pub busy_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    /// Segments marked CE delivered to this sender's peer (ECN), delta.
    pub delivered_ce: u64,
}

/// Cumulative TCP_INFO fields as read from the kernel; [`TcpCounters::sample`]
/// turns two of them into a [`TcpSample`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TcpCounters {
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub min_rtt_us: u32,
    pub snd_cwnd: u32,
    pub snd_mss: u32,
    pub total_retrans: u32,
    /// bytes/s as the kernel reports them.
    pub delivery_rate: u64,
    pub pacing_rate: u64,
    pub busy_time_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    pub delivered_ce: u32,
}

impl TcpCounters {
    /// The interval from `prev` to `self`.
    pub fn sample(&self, prev: &TcpCounters) -> TcpSample {
        TcpSample {
            rtt_us: self.rtt_us,
            rttvar_us: self.rttvar_us,
            min_rtt_us: self.min_rtt_us,
            cwnd_bytes: u64::from(self.snd_cwnd) * u64::from(self.snd_mss),
            snd_mss: self.snd_mss,
            retransmits: u64::from(self.total_retrans.wrapping_sub(prev.total_retrans)),
            delivery_rate_bps: self.delivery_rate as f64 * 8.0,
            pacing_rate_bps: if self.pacing_rate == u64::MAX {
                0.0
            } else {
                self.pacing_rate as f64 * 8.0
            },
            busy_us: self.busy_time_us.saturating_sub(prev.busy_time_us),
            rwnd_limited_us: self.rwnd_limited_us.saturating_sub(prev.rwnd_limited_us),
            sndbuf_limited_us: self
                .sndbuf_limited_us
                .saturating_sub(prev.sndbuf_limited_us),
            delivered_ce: u64::from(self.delivered_ce.wrapping_sub(prev.delivered_ce)),
        }
    }
}
