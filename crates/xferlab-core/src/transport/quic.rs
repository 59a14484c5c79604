//! QUIC's model (RFC 9000, with unreliable DATAGRAM frames, RFC 9221):
//! the binary runs one QUIC connection per flow over the flow's UDP
//! socket (quinn-proto, driven by xferlab's own loop). Without `-b` a
//! flow moves bytes on `--streams N` concurrent unidirectional streams
//! (a byte stream, as TCP: `stream --quic`); with `-b` it sends DATAGRAM
//! frames at that rate, each carrying xferlab's datagram header, and the
//! receiver counts loss, reordering and jitter as for UDP (`cbr --quic`).
//!
//! The `quic` section of each interval is what TCP_INFO gives for TCP,
//! from the connection's own state at the end of the interval (RTT,
//! congestion window, pacing rate) and its counters over it (packets
//! sent and lost, congestion events, UDP datagrams each way).
//!
//! Its headline metrics for experiments, from the sender flows' `quic`
//! totals:
//!
//! | metric | unit | from |
//! |---|---|---|
//! | `quic_lost_packets` | count | Σ over sender flows of `total.quic.lost_packets` |
//! | `quic_congestion_events` | count | Σ over sender flows of `total.quic.congestion_events` |
//! | `quic_rtt_us` | us | mean over sender flows of `total.quic.rtt_us` (the smoothed RTT at the end) |
//! | `quic_min_rtt_us` | us | least over sender flows of `total.quic.min_rtt_us` |
//! | `quic_datagrams_refused` | count | Σ over sender flows of `total.quic.datagrams_blocked` + `datagrams_too_large` |

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Carrier, TransportModel};
use crate::jsondoc::unit::{COUNT, US};
use crate::jsondoc::{num, sender_flows, MetricInfo};
use crate::knobs::limits::MIN_DATAGRAM;
use crate::knobs::{self, Knobs, RecvMode, SendMode};
pub use crate::knobs::{QuicKnobError as KnobError, QuicKnobs, CONGESTION_CONTROLLERS};
use crate::units::{format_bytes, Micros, RateUnit};

/// Largest DATAGRAM payload a flow may ask for (`-l` with `-b`): what a
/// QUIC packet carries on a 1500-byte-MTU path (1452 bytes of UDP
/// payload, quinn-proto's discovery bound, less a short header with an
/// 8-byte connection ID, the AEAD tag and the frame's type and length:
/// 1,420), rounded down to UDP's default datagram size, so `cbr --quic`
/// runs with cbr's defaults. A connection starts at 1200 bytes (RFC 9000
/// sec. 14) and raises it by path MTU discovery within its first RTTs;
/// datagrams offered before that are refused as too large and counted
/// (`datagrams_too_large`).
pub const MAX_DATAGRAM_PAYLOAD: u64 = 1400;

pub struct Quic;

/// QUIC's metrics (the module docs hold the same list as a table; a test
/// keeps them in step).
pub const METRICS: &[MetricInfo] = &[
    (
        "quic_lost_packets",
        COUNT,
        "QUIC packets the senders declared lost",
    ),
    (
        "quic_congestion_events",
        COUNT,
        "QUIC congestion events (window reductions) of the senders",
    ),
    (
        "quic_rtt_us",
        US,
        "QUIC smoothed RTT at the end, mean over sender flows",
    ),
    (
        "quic_min_rtt_us",
        US,
        "QUIC minimum RTT, least over sender flows",
    ),
    (
        "quic_datagrams_refused",
        COUNT,
        "DATAGRAM frames the senders' connections refused",
    ),
];

/// Reads [`METRICS`] from a result document's sender flows.
fn measure(doc: &serde_json::Value, out: &mut dyn FnMut(&'static str, f64)) {
    let totals: Vec<&serde_json::Value> = sender_flows(doc)
        .filter_map(|f| f.get("total").and_then(|t| t.get("quic")))
        .filter(|q| q.is_object())
        .collect();
    if totals.is_empty() {
        return;
    }
    let sum = |k: &str| totals.iter().filter_map(|q| num(q, &[k])).sum::<f64>();
    out("quic_lost_packets", sum("lost_packets"));
    out("quic_congestion_events", sum("congestion_events"));
    out("quic_rtt_us", sum("rtt_us") / totals.len() as f64);
    if let Some(m) = totals
        .iter()
        .filter_map(|q| num(q, &["min_rtt_us"]))
        .reduce(f64::min)
    {
        out("quic_min_rtt_us", m);
    }
    out(
        "quic_datagrams_refused",
        sum("datagrams_blocked") + sum("datagrams_too_large"),
    );
}

impl TransportModel for Quic {
    fn label(&self) -> &'static str {
        "QUIC"
    }

    fn carrier(&self) -> Carrier {
        Carrier::Datagrams
    }

    fn check_knobs(&self, k: &Knobs) -> Result<(), knobs::KnobError> {
        if let Some(cc) = &k.congestion {
            if !CONGESTION_CONTROLLERS.contains(&cc.as_str()) {
                return Err(KnobError::Congestion(cc.clone()).into());
            }
        }
        if let Some(q) = &k.own.quic {
            q.check()?;
        }
        // -b makes a datagram flow: its datagrams must fit one QUIC
        // packet.
        if k.rate.is_some() && !(MIN_DATAGRAM..=MAX_DATAGRAM_PAYLOAD).contains(&k.size) {
            return Err(KnobError::DatagramLength {
                got: k.size,
                min: MIN_DATAGRAM,
                max: MAX_DATAGRAM_PAYLOAD,
            }
            .into());
        }
        // --fq-rate caps a stream sender (the server's budgets set it
        // too); a datagram sender's rate is -b.
        if k.max_pacing_rate.is_some() && k.rate.is_some() {
            return Err(KnobError::PacingDatagrams.into());
        }
        if k.mss.is_some()
            || k.nodelay
            || k.send_mode != SendMode::Copy
            || k.recv_mode != RecvMode::Copy
            || k.read_size.is_some()
            || k.rcvlowat.is_some()
            || k.read_fill.is_some()
            || k.rx_stamps.is_some()
            || k.gso
            || k.dont_fragment
        {
            return Err(KnobError::OtherOptions.into());
        }
        Ok(())
    }

    fn congestion_controlled(&self) -> bool {
        true
    }

    fn own_congestion(&self) -> bool {
        true
    }

    fn metrics(&self) -> &'static [MetricInfo] {
        METRICS
    }

    fn measure(&self, doc: &serde_json::Value, out: &mut dyn FnMut(&'static str, f64)) {
        measure(doc, out);
    }

    fn counts_datagrams(&self, knobs: &Knobs) -> bool {
        knobs.rate.is_some_and(|r| r > 0)
    }

    fn describe_data(&self, k: &Knobs) -> Option<String> {
        let cc = k.congestion.as_deref().unwrap_or("cubic");
        Some(match k.rate.filter(|&r| r > 0) {
            Some(r) => format!(
                "{}-byte DATAGRAM frames at {} per flow, congestion control {cc}",
                k.size,
                RateUnit::AutoBits.format_rate(r as f64)
            ),
            None => {
                let n = k.own.quic.unwrap_or_default().streams;
                let streams = if n == 1 {
                    "1 stream".into()
                } else {
                    format!("{n} streams")
                };
                format!("one connection per flow, {streams} on each, congestion control {cc}")
            }
        })
    }
}

/// What a QUIC flow publishes at a boundary: the connection's state now
/// and its cumulative counters (quinn-proto's `ConnectionStats`, read by
/// the flow's thread).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QuicCounters {
    /// The congestion controller (`cubic`, `newreno`, `bbr`).
    pub cc: &'static str,
    /// Whether the connection is established (its handshake done).
    pub established: bool,
    /// Smoothed and minimum RTT (quinn-proto's estimator).
    pub rtt: Duration,
    pub min_rtt: Duration,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// The controller's own pacing rate (BBR's), bytes/s; None where it
    /// has none (then the sample derives quinn's pacer rate).
    pub pacing_rate: Option<u64>,
    /// The path's current MTU (UDP payload), bytes.
    pub mtu: u16,
    pub sent_packets: u64,
    pub lost_packets: u64,
    pub lost_bytes: u64,
    pub congestion_events: u64,
    /// UDP datagrams and bytes each way (a GSO train counts each
    /// datagram).
    pub udp_tx_datagrams: u64,
    pub udp_tx_bytes: u64,
    pub udp_rx_datagrams: u64,
    pub udp_rx_bytes: u64,
    /// STREAM and DATAGRAM frames sent and received.
    pub stream_frames_tx: u64,
    pub stream_frames_rx: u64,
    pub datagram_frames_tx: u64,
    pub datagram_frames_rx: u64,
    /// Application datagrams the connection refused: its send buffer full
    /// (the congestion controller behind: `Blocked`) or larger than the
    /// path carries (`TooLarge`).
    pub datagrams_blocked: u64,
    pub datagrams_too_large: u64,
    /// Receive windows this end advertises: per stream and for the
    /// connection, bytes (the sizes the flow chose).
    pub stream_window: u64,
    pub conn_window: u64,
    /// Streams that carried data so far: a sender's written to, a
    /// receiver's read from.
    pub streams: u64,
}

/// QUIC's section of an interval (or of a total's window): the
/// connection's state at its end, counts as deltas over it.
///
/// Two figures TCP_INFO has are not here: bytes in flight (quinn-proto
/// keeps them private; only its qlog output shows them) and
/// retransmitted packets (QUIC never resends a packet: the frames of a
/// lost one go out again in new packets, so `lost_packets` is the
/// figure to read beside TCP's retransmits).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QuicSample {
    /// The congestion controller (`cubic`, `newreno`, `bbr`).
    pub cc: String,
    /// Whether the handshake had completed by the interval's end.
    pub established: bool,
    /// Smoothed RTT and the minimum RTT seen, us.
    pub rtt_us: f64,
    pub min_rtt_us: f64,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Pacing rate, bit/s: the controller's own (BBR), else derived as
    /// quinn-proto's pacer does, 1.25 x cwnd per smoothed RTT.
    pub pacing_bps: f64,
    /// Whether `pacing_bps` is derived (true) or the controller's own.
    pub pacing_derived: bool,
    /// The path MTU (UDP payload bytes) at the interval's end.
    pub mtu: u16,
    /// QUIC packets sent and declared lost, the bytes lost, and the
    /// congestion events (window reductions) over the interval.
    pub sent_packets: u64,
    pub lost_packets: u64,
    pub lost_bytes: u64,
    pub congestion_events: u64,
    /// UDP datagrams and bytes sent and received over the interval.
    pub udp_tx_datagrams: u64,
    pub udp_tx_bytes: u64,
    pub udp_rx_datagrams: u64,
    pub udp_rx_bytes: u64,
    /// STREAM and DATAGRAM frames each way over the interval.
    pub stream_frames_tx: u64,
    pub stream_frames_rx: u64,
    pub datagram_frames_tx: u64,
    pub datagram_frames_rx: u64,
    /// Application datagrams the connection refused over the interval:
    /// its send buffer full behind the congestion controller, or too
    /// large for the path.
    pub datagrams_blocked: u64,
    pub datagrams_too_large: u64,
    /// The receive windows this end advertises, per stream and for the
    /// whole connection, bytes.
    pub stream_window: u64,
    pub conn_window: u64,
    /// Streams that had carried data by the interval's end (a sender's
    /// written to, a receiver's read from).
    pub streams: u64,
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

impl QuicCounters {
    /// The interval from `prev` to `self`.
    pub fn sample(&self, prev: &QuicCounters) -> QuicSample {
        let d = |now: u64, before: u64| now.saturating_sub(before);
        let (pacing_bps, pacing_derived) = match self.pacing_rate {
            Some(r) => (r as f64 * 8.0, false),
            None if self.rtt > Duration::ZERO => {
                (self.cwnd as f64 * 1.25 * 8.0 / self.rtt.as_secs_f64(), true)
            }
            None => (0.0, true),
        };
        QuicSample {
            cc: self.cc.to_string(),
            established: self.established,
            rtt_us: us(self.rtt),
            min_rtt_us: us(self.min_rtt),
            cwnd: self.cwnd,
            pacing_bps,
            pacing_derived,
            mtu: self.mtu,
            sent_packets: d(self.sent_packets, prev.sent_packets),
            lost_packets: d(self.lost_packets, prev.lost_packets),
            lost_bytes: d(self.lost_bytes, prev.lost_bytes),
            congestion_events: d(self.congestion_events, prev.congestion_events),
            udp_tx_datagrams: d(self.udp_tx_datagrams, prev.udp_tx_datagrams),
            udp_tx_bytes: d(self.udp_tx_bytes, prev.udp_tx_bytes),
            udp_rx_datagrams: d(self.udp_rx_datagrams, prev.udp_rx_datagrams),
            udp_rx_bytes: d(self.udp_rx_bytes, prev.udp_rx_bytes),
            stream_frames_tx: d(self.stream_frames_tx, prev.stream_frames_tx),
            stream_frames_rx: d(self.stream_frames_rx, prev.stream_frames_rx),
            datagram_frames_tx: d(self.datagram_frames_tx, prev.datagram_frames_tx),
            datagram_frames_rx: d(self.datagram_frames_rx, prev.datagram_frames_rx),
            datagrams_blocked: d(self.datagrams_blocked, prev.datagrams_blocked),
            datagrams_too_large: d(self.datagrams_too_large, prev.datagrams_too_large),
            stream_window: self.stream_window,
            conn_window: self.conn_window,
            streams: self.streams,
        }
    }
}

impl QuicSample {
    /// `QUIC cubic: rtt 61 us (min 20 us) cwnd 1.20 MiB pacing 19.7
    /// Gbits/sec (derived); 12000 packets sent, 3 lost (4.2 KiB), 1
    /// congestion event; UDP 12000 out 6000 in`.
    pub fn describe(&self) -> String {
        if !self.established {
            return format!("QUIC {}: handshaking", self.cc);
        }
        let mut out = format!(
            "QUIC {}: rtt {} (min {}) cwnd {} pacing {}{}; {} packets sent, {} lost ({}), {} congestion events; UDP {} out {} in",
            self.cc,
            Micros(self.rtt_us as u64),
            Micros(self.min_rtt_us as u64),
            format_bytes(self.cwnd),
            RateUnit::AutoBits.format_rate(self.pacing_bps),
            if self.pacing_derived { " (derived)" } else { "" },
            self.sent_packets,
            self.lost_packets,
            format_bytes(self.lost_bytes),
            self.congestion_events,
            self.udp_tx_datagrams,
            self.udp_rx_datagrams,
        );
        if self.datagram_frames_tx + self.datagram_frames_rx > 0 {
            out.push_str(&format!(
                "; DATAGRAM frames {} out {} in",
                self.datagram_frames_tx, self.datagram_frames_rx
            ));
        }
        let refused = self.datagrams_blocked + self.datagrams_too_large;
        if refused > 0 {
            out.push_str(&format!(
                ", {refused} refused ({} blocked by congestion control, {} too large)",
                self.datagrams_blocked, self.datagrams_too_large
            ));
        }
        out
    }
}

/// QUIC's cells in `--format csv` (`output/csv.rs`), on the rows of the
/// flows that carry its section; `None` is an empty cell.
#[derive(Debug, Default, Serialize)]
pub struct QuicCells {
    quic_rtt_us: Option<f64>,
    quic_min_rtt_us: Option<f64>,
    quic_cwnd: Option<u64>,
    quic_pacing_bps: Option<f64>,
    quic_lost_packets: Option<u64>,
    quic_congestion_events: Option<u64>,
    quic_datagrams_refused: Option<u64>,
}

impl QuicCells {
    /// The column names, as the fields (a test in the registry checks).
    pub const COLUMNS: &'static [&'static str] = &[
        "quic_rtt_us",
        "quic_min_rtt_us",
        "quic_cwnd",
        "quic_pacing_bps",
        "quic_lost_packets",
        "quic_congestion_events",
        "quic_datagrams_refused",
    ];

    pub fn of(s: &QuicSample) -> Self {
        QuicCells {
            quic_rtt_us: Some(s.rtt_us),
            quic_min_rtt_us: Some(s.min_rtt_us),
            quic_cwnd: Some(s.cwnd),
            quic_pacing_bps: Some(s.pacing_bps),
            quic_lost_packets: Some(s.lost_packets),
            quic_congestion_events: Some(s.congestion_events),
            quic_datagrams_refused: Some(s.datagrams_blocked + s.datagrams_too_large),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters() -> QuicCounters {
        QuicCounters {
            cc: "cubic",
            established: true,
            rtt: Duration::from_millis(40),
            min_rtt: Duration::from_millis(38),
            cwnd: 500_000,
            pacing_rate: None,
            mtu: 1452,
            sent_packets: 1000,
            lost_packets: 10,
            lost_bytes: 14_000,
            congestion_events: 2,
            udp_tx_datagrams: 1000,
            udp_tx_bytes: 1_400_000,
            udp_rx_datagrams: 300,
            udp_rx_bytes: 20_000,
            datagrams_blocked: 5,
            stream_window: 1 << 20,
            conn_window: 4 << 20,
            ..QuicCounters::default()
        }
    }

    #[test]
    fn a_sample_is_the_counters_delta_and_the_state_at_the_end() {
        let before = counters();
        let now = QuicCounters {
            rtt: Duration::from_millis(50),
            cwnd: 250_000,
            sent_packets: 3000,
            lost_packets: 25,
            lost_bytes: 35_000,
            congestion_events: 3,
            udp_tx_datagrams: 2900,
            datagrams_blocked: 9,
            ..before
        };
        let s = now.sample(&before);
        assert_eq!(
            (
                s.sent_packets,
                s.lost_packets,
                s.lost_bytes,
                s.congestion_events,
                s.udp_tx_datagrams,
                s.udp_rx_datagrams,
                s.datagrams_blocked
            ),
            (2000, 15, 21_000, 1, 1900, 0, 4)
        );
        assert_eq!(
            (s.cwnd, s.rtt_us, s.min_rtt_us),
            (250_000, 50_000.0, 38_000.0)
        );
        // quinn's pacer: 1.25 cwnd per RTT, here in bits.
        assert!(s.pacing_derived);
        assert!((s.pacing_bps - 250_000.0 * 1.25 * 8.0 / 0.05).abs() < 1.0);
        let own = QuicCounters {
            pacing_rate: Some(1_000_000),
            ..now
        };
        let s = own.sample(&before);
        assert_eq!((s.pacing_bps, s.pacing_derived), (8e6, false));
        let d = s.describe();
        assert!(d.starts_with("QUIC cubic: rtt 50.0 ms"), "{d}");
        assert!(d.contains("15 lost") && d.contains("4 refused"), "{d}");
    }

    #[test]
    fn a_counter_that_went_back_gives_zero_not_a_wrap() {
        let before = counters();
        let now = QuicCounters {
            sent_packets: 10,
            ..before
        };
        assert_eq!(now.sample(&before).sent_packets, 0);
        let fresh = QuicCounters {
            established: false,
            ..QuicCounters::default()
        };
        let s = fresh.sample(&QuicCounters::default());
        assert_eq!((s.pacing_bps, s.established), (0.0, false));
        assert!(s.describe().contains("handshaking"));
    }

    #[test]
    fn metrics_come_from_the_senders_totals_and_have_their_rows() {
        let doc = serde_json::json!({
            "client": {"flows": [
                {"role": "sender", "total": {"quic": {"lost_packets": 3, "congestion_events": 2,
                    "rtt_us": 1000.0, "min_rtt_us": 40.0, "datagrams_blocked": 5, "datagrams_too_large": 1}}},
                {"role": "receiver", "total": {"quic": {"lost_packets": 100}}}
            ]},
            "server": {"flows": [
                {"role": "sender", "total": {"quic": {"lost_packets": 4, "congestion_events": 1,
                    "rtt_us": 3000.0, "min_rtt_us": 30.0, "datagrams_blocked": 0, "datagrams_too_large": 0}}}
            ]}
        });
        let mut got = std::collections::BTreeMap::new();
        Quic.measure(&doc, &mut |k, v| {
            got.insert(k, v);
        });
        assert_eq!(got["quic_lost_packets"], 7.0);
        assert_eq!(got["quic_congestion_events"], 3.0);
        assert_eq!(got["quic_rtt_us"], 2000.0);
        assert_eq!(got["quic_min_rtt_us"], 30.0);
        assert_eq!(got["quic_datagrams_refused"], 6.0);
        assert_eq!(got.len(), METRICS.len());
        // A document without QUIC gives nothing.
        let mut none = 0;
        Quic.measure(
            &serde_json::json!({"client": {"flows": []}}),
            &mut |_, _| none += 1,
        );
        assert_eq!(none, 0);
        let source = include_str!("quic.rs");
        for (name, unit, _) in METRICS {
            assert!(
                source
                    .lines()
                    .any(|l| l.starts_with(&format!("//! | `{name}` | {unit} |"))),
                "{name} ({unit}) has no row in the module docs"
            );
        }
    }

    #[test]
    fn congestion_controllers_outside_the_three_are_refused_with_their_names() {
        let k = |cc: Option<&str>| Knobs {
            congestion: cc.map(str::to_string),
            ..Knobs::default()
        };
        for ok in CONGESTION_CONTROLLERS {
            assert_eq!(Quic.check_knobs(&k(Some(ok))), Ok(()));
        }
        let e = Quic.check_knobs(&k(Some("vegas"))).unwrap_err().to_string();
        assert!(
            e.contains("cubic, newreno or bbr") && e.contains("vegas"),
            "{e}"
        );
        let tcp_only = Knobs {
            nodelay: true,
            ..Knobs::default()
        };
        assert!(Quic.check_knobs(&tcp_only).is_err());
    }
}
