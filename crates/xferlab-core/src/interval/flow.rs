//! The figures of one flow that an interval and a total hold: bytes and
//! rate, TCP_INFO and datagram counters, the transport's own section, and
//! how the flow ended. The bookkeeping above turns readings into these;
//! `result` gathers them into a side's report.

use serde::{Deserialize, Serialize};

use crate::transport::tcp::TcpSample;
use crate::transport::TransportSection;

/// Datagram figures of one flow: over one interval, or over the measured
/// window in a total. Counts are deltas; `jitter_us` is the RFC 3550
/// estimate at the end.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UdpSample {
    /// Sender: datagrams sent. Receiver: distinct datagrams received.
    pub packets: u64,
    /// Receiver: sequence numbers skipped (net of late arrivals).
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    /// Receiver: datagrams the receiving socket dropped for lack of
    /// buffer space (SO_RXQ_OVFL): loss at the receiving host, part of
    /// `lost` but not the network's doing.
    pub host_drops: u64,
    pub jitter_us: f64,
    /// Receiver: one-way delay above its minimum so far (no clock sync
    /// needed), mean and max.
    pub owd_var_mean_us: f64,
    pub owd_var_max_us: f64,
    /// Sender: datagrams sent later than the slack after their scheduled
    /// time (an underrun for a constant-rate stream), and the worst delay.
    pub late: u64,
    pub max_lateness_us: f64,
}

/// Cumulative datagram counters as a flow thread publishes them;
/// [`UdpCounters::sample`] turns two into a [`UdpSample`]. The `*_max_*`
/// fields are maxima since the previous reading (the reader resets them).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct UdpCounters {
    pub packets: u64,
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    pub host_drops: u64,
    pub jitter_ns: f64,
    pub owd_excess_sum_ns: u128,
    pub owd_excess_max_ns: u64,
    pub late: u64,
    pub lateness_max_ns: u64,
}

impl UdpCounters {
    pub fn sample(&self, prev: &UdpCounters) -> UdpSample {
        let packets = self.packets.saturating_sub(prev.packets);
        let excess = self
            .owd_excess_sum_ns
            .saturating_sub(prev.owd_excess_sum_ns);
        UdpSample {
            packets,
            lost: self.lost.saturating_sub(prev.lost),
            out_of_order: self.out_of_order.saturating_sub(prev.out_of_order),
            duplicates: self.duplicates.saturating_sub(prev.duplicates),
            host_drops: self.host_drops.saturating_sub(prev.host_drops),
            jitter_us: self.jitter_ns / 1e3,
            owd_var_mean_us: if packets > 0 {
                excess as f64 / packets as f64 / 1e3
            } else {
                0.0
            },
            owd_var_max_us: self.owd_excess_max_ns as f64 / 1e3,
            late: self.late.saturating_sub(prev.late),
            max_lateness_us: self.lateness_max_ns as f64 / 1e3,
        }
    }
}

/// A flow's datagram figures over the measured window, plus the whole-run
/// counts the loss summary compares across the two ends.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UdpTotal {
    #[serde(flatten)]
    pub window: UdpSample,
    /// Every datagram of the run, warm-up included.
    pub packets_all: u64,
    pub host_drops_all: u64,
}

/// One flow over one reporting interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FlowInterval {
    /// Seconds since this side started the test (warm-up included).
    pub start_s: f64,
    pub end_s: f64,
    /// Inside the warm-up (`-O`): shown, but not part of the totals.
    pub omitted: bool,
    pub bytes: u64,
    pub bits_per_second: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpSample>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpSample>,
    /// The transport's own section, under its name (`"mptcp": {...}`),
    /// for transports that read state of their own.
    #[serde(flatten)]
    pub transport: Option<TransportSection>,
}

/// TCP figures of one flow over the measured window.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TcpTotals {
    pub retransmits: u64,
    pub rtt_min_us: u32,
    pub rtt_mean_us: u32,
    pub rtt_max_us: u32,
    /// Share of the busy time limited by the receive window / send buffer.
    pub rwnd_limited_fraction: f64,
    pub sndbuf_limited_fraction: f64,
    pub delivered_ce: u64,
}

/// One flow over the measured window (after the warm-up).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FlowTotal {
    pub start_s: f64,
    pub end_s: f64,
    pub bytes: u64,
    pub bits_per_second: f64,
    /// Every byte this side moved, warm-up included: sender and receiver of
    /// a flow that ended normally agree on this number exactly.
    pub bytes_all: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpTotals>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpTotal>,
    /// The transport's own section over the measured window (as in
    /// [`FlowInterval::transport`]).
    #[serde(flatten)]
    pub transport: Option<TransportSection>,
}

/// How a flow ended on this side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind", content = "reason")]
pub enum FlowEnd {
    /// Sender: quota or time reached and the write side shut down.
    /// Receiver: end of stream read.
    Completed,
    /// Cut short (peer vanished, reset, drain timeout).
    Aborted(String),
}

/// Bytes and rate of one side of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Throughput {
    pub bytes: u64,
    pub seconds: f64,
    pub bits_per_second: f64,
}

impl Throughput {
    pub fn new(bytes: u64, seconds: f64) -> Self {
        let bits_per_second = if seconds > 0.0 {
            bytes as f64 * 8.0 / seconds
        } else {
            0.0
        };
        Throughput {
            bytes,
            seconds,
            bits_per_second,
        }
    }
}
