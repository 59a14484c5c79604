//! DCCP's model (RFC 4340: xferlab's own stack in [`crate::dccp`] carried
//! over UDP per RFC 6773, or the kernel's SOCK_DCCP sockets where it has
//! them): datagrams whose rate a CCID decides, the knobs that pick the
//! stack, CCID and service code, and the `dccp` section of a result: the
//! sending CCID's state at the end of each interval and the stack's own
//! counters over it, in one shape for both stacks.
//!
//! A flow's `udp` fields work as for UDP (the application's datagrams
//! carry xferlab's sequence number and send time inside DCCP's payload,
//! so the receiver counts loss, reordering and jitter as for UDP).

mod metrics;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Carrier, TransportModel, TrialSection};
use crate::dccp::ccid::{safeudp, CcidState, EpisodeState, EventCounts};
pub use crate::dccp::knobs::{
    DccpCarrier, DccpKnobs, DccpStack, KnobError, MAX_PAYLOAD, SERVICE_CODE,
};
use crate::dccp::Stats;
use crate::jsondoc::MetricInfo;
use crate::knobs::limits::{MAX_BATCH, MIN_DATAGRAM};
use crate::knobs::{self, Knobs, RecvMode, SendMode};
use crate::units::{format_bytes, Micros, RateUnit};
pub use metrics::SafeUdpTrial;

pub struct Dccp;

impl TransportModel for Dccp {
    fn label(&self) -> &'static str {
        "DCCP"
    }

    fn carrier(&self) -> Carrier {
        Carrier::Datagrams
    }

    fn check_knobs(&self, k: &Knobs) -> Result<(), knobs::KnobError> {
        if !(MIN_DATAGRAM..=MAX_PAYLOAD).contains(&k.size) {
            return Err(KnobError::Length {
                got: k.size,
                min: MIN_DATAGRAM,
            }
            .into());
        }
        if k.batch == 0 || k.batch > MAX_BATCH {
            return Err(knobs::KnobError::Batch(k.batch));
        }
        if let Some(d) = &k.own.dccp {
            d.check()?;
            if !matches!(d.ccid, 2 | 3 | safeudp::CCID) {
                return Err(KnobError::Ccid(d.ccid).into());
            }
            if d.on_congestion.is_some() {
                if d.ccid != safeudp::CCID {
                    return Err(KnobError::OnCongestionCcid(d.ccid).into());
                }
                if k.rate.is_none_or(|r| r == 0) {
                    return Err(KnobError::OnCongestionRate.into());
                }
            }
        }
        if k.gso {
            let d = k.own.dccp.unwrap_or_default();
            if d.stack != DccpStack::Xferlab
                || d.server() != DccpStack::Xferlab
                || d.carrier != DccpCarrier::Udp
            {
                return Err(KnobError::Gso.into());
            }
        }
        if k.congestion.is_some()
            || k.mss.is_some()
            || k.nodelay
            || k.max_pacing_rate.is_some()
            || k.send_mode != SendMode::Copy
            || k.recv_mode != RecvMode::Copy
            || k.read_size.is_some()
            || k.rcvlowat.is_some()
            || k.read_fill.is_some()
            || k.rx_stamps.is_some()
        {
            return Err(KnobError::OtherOptions.into());
        }
        Ok(())
    }

    fn congestion_controlled(&self) -> bool {
        true
    }

    fn metrics(&self) -> &'static [MetricInfo] {
        metrics::METRICS
    }

    fn measure(&self, doc: &serde_json::Value, out: &mut dyn FnMut(&'static str, f64)) {
        metrics::measure(doc, out);
    }

    fn measure_trial(&self, trial: &serde_json::Value, out: &mut dyn FnMut(&'static str, f64)) {
        metrics::measure_trial(trial, out);
    }

    fn trial_section(&self, knobs: &Knobs, doc: &serde_json::Value) -> Option<TrialSection> {
        SafeUdpTrial::of(knobs, doc).map(TrialSection::SafeUdp)
    }
}

/// What a DCCP flow publishes at a boundary: the sending CCID's state now
/// (None before the handshake) and the stack's cumulative counters.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DccpCounters {
    pub stack: DccpStack,
    /// The CCID this end sends with (0 before the handshake).
    pub ccid: u8,
    pub state: Option<CcidState>,
    /// What only the kernel's CCID3 reports (`tfrc_tx_info`): the
    /// throughput equation's rate X_calc (bytes/s) and the no-feedback
    /// timeout.
    pub x_calc: Option<f64>,
    pub t_rto: Option<Duration>,
    pub stats: Stats,
    /// Packets the driver took from the socket that were not DCCP for
    /// this connection (bad checksum, wrong ports, not DCCP at all).
    pub not_dccp: u64,
    /// SafeUDP's sending application: the rate it offers now, bytes/s
    /// (its policy lowers it from -b on congestion notices).
    pub app_rate: Option<f64>,
}

/// DCCP's section of an interval (or of a total's window): the CCID's
/// state at its end, counts as deltas.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DccpSample {
    /// The DCCP that ran the flow: `xferlab` (userspace) or `kernel`.
    #[serde(default)]
    pub stack: DccpStack,
    /// The CCID this end sends with (its half-connection's), 0 before the
    /// handshake.
    pub ccid: u8,
    /// CCID2: congestion window, packets in flight and slow-start
    /// threshold, in packets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwnd: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipe: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssthresh: Option<u64>,
    /// CCID3: allowed sending rate X and the receiver's reported rate
    /// X_recv, bit/s; loss event rate p; inter-packet interval s/X.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_bps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_recv_bps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_ipi_us: Option<f64>,
    /// Kernel CCID3 only: the throughput equation's rate X_calc, bit/s,
    /// and the no-feedback timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_calc_bps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_rto_us: Option<f64>,
    /// The CCID's RTT estimate, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_us: Option<f64>,
    /// SafeUDP (CCID 248): its state at the end of the interval and what
    /// it raised during it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub safeudp: Option<Box<SafeUdpSample>>,
    /// The stack's counters over the interval: data packets and their
    /// payload bytes each way, acknowledgements and Syncs sent, packets
    /// dropped for a bad checksum or as invalid (out of window, wrong
    /// ports), application datagrams refused by a full queue, and packets
    /// that arrived marked ECN CE.
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
    /// (SafeUDP enforcing its bound; 0 for CCID 2 and 3).
    #[serde(default)]
    pub dropped_by_ccid: u64,
    /// Datagrams on the flow's socket that were not DCCP at all.
    pub not_dccp: u64,
}

/// SafeUDP's part of a DCCP interval (docs/safeudp.md).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SafeUdpSample {
    /// The application's offered rate as the CCID measures it (over its
    /// 200 ms window), bit/s.
    pub offered_bps: f64,
    /// The rate the sending application's --on-congestion policy offers
    /// at the end of the interval, bit/s (its -b until told otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_rate_bps: Option<f64>,
    /// TFRC's rate for the measured p and RTT, bit/s; absent before any
    /// network loss (no bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_bps: Option<f64>,
    /// The rate the CCID enforces (the bound) while it drops the excess,
    /// bit/s; absent when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforced_bps: Option<f64>,
    /// Where the congestion episode at each site stands: `clear`,
    /// `transient` or `persistent`.
    pub network: EpisodeState,
    pub end_host: EpisodeState,
    /// Over the interval: losses the receiver's socket drops explain,
    /// losses the network caused, ECN marks.
    pub host_losses: u64,
    pub network_losses: u64,
    pub ecn_marks: u64,
    /// Notifications raised over the interval, by kind and site.
    pub events: SafeUdpEvents,
}

/// SafeUDP's notifications over an interval (`CongestionEvent`s): each
/// kind and site, and their sum.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct SafeUdpEvents {
    pub total: u64,
    #[serde(flatten)]
    pub counts: EventCounts,
}

impl From<EventCounts> for SafeUdpEvents {
    fn from(counts: EventCounts) -> Self {
        SafeUdpEvents {
            total: counts.total(),
            counts,
        }
    }
}

fn finite(bytes_per_s: f64) -> Option<f64> {
    bytes_per_s.is_finite().then_some(bytes_per_s * 8.0)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

impl DccpCounters {
    /// The interval from `prev` to `self`.
    pub fn sample(&self, prev: &DccpCounters) -> DccpSample {
        let (a, b) = (&self.stats, &prev.stats);
        let mut s = DccpSample {
            stack: self.stack,
            ccid: self.ccid,
            x_calc_bps: self.x_calc.map(|x| x * 8.0),
            t_rto_us: self.t_rto.map(us),
            data_sent: a.data_sent.saturating_sub(b.data_sent),
            data_bytes_sent: a.data_bytes_sent.saturating_sub(b.data_bytes_sent),
            data_received: a.data_received.saturating_sub(b.data_received),
            data_bytes_received: a.data_bytes_received.saturating_sub(b.data_bytes_received),
            acks_sent: a.acks_sent.saturating_sub(b.acks_sent),
            syncs_sent: a.syncs_sent.saturating_sub(b.syncs_sent),
            dropped_checksum: a.dropped_checksum.saturating_sub(b.dropped_checksum),
            dropped_invalid: a.dropped_invalid.saturating_sub(b.dropped_invalid),
            queue_full: a.queue_full.saturating_sub(b.queue_full),
            ecn_ce_received: a.ecn_ce_received.saturating_sub(b.ecn_ce_received),
            dropped_by_ccid: a.dropped_by_ccid.saturating_sub(b.dropped_by_ccid),
            not_dccp: self.not_dccp.saturating_sub(prev.not_dccp),
            ..DccpSample::default()
        };
        match self.state {
            Some(CcidState::Ccid2 {
                cwnd,
                pipe,
                ssthresh,
                rtt,
            }) => {
                s.cwnd = Some(cwnd);
                s.pipe = Some(pipe);
                s.ssthresh = Some(ssthresh);
                s.rtt_us = rtt.map(us);
            }
            Some(CcidState::Ccid3 {
                x,
                x_recv,
                p,
                rtt,
                t_ipi,
            }) => {
                s.x_bps = Some(x * 8.0);
                s.x_recv_bps = Some(x_recv * 8.0);
                s.p = Some(p);
                s.t_ipi_us = Some(us(t_ipi));
                s.rtt_us = rtt.map(us);
            }
            // SafeUDP shares the loss event rate and RTT fields.
            Some(CcidState::SafeUdp {
                offered,
                bound,
                p,
                rtt,
                enforcing,
                host_losses,
                network_losses,
                ecn_marks,
                network,
                end_host,
                events,
                ..
            }) => {
                s.p = Some(p);
                s.rtt_us = rtt.map(us);
                let before = match prev.state {
                    Some(CcidState::SafeUdp {
                        host_losses,
                        network_losses,
                        ecn_marks,
                        events,
                        ..
                    }) => (host_losses, network_losses, ecn_marks, events),
                    _ => (0, 0, 0, EventCounts::default()),
                };
                s.safeudp = Some(Box::new(SafeUdpSample {
                    offered_bps: offered * 8.0,
                    app_rate_bps: self.app_rate.map(|r| r * 8.0),
                    bound_bps: finite(bound),
                    enforced_bps: finite(bound).filter(|_| enforcing),
                    network,
                    end_host,
                    host_losses: host_losses.saturating_sub(before.0),
                    network_losses: network_losses.saturating_sub(before.1),
                    ecn_marks: ecn_marks.saturating_sub(before.2),
                    events: events.since(before.3).into(),
                }));
            }
            None => {}
        }
        s
    }
}

impl DccpSample {
    /// `DCCP CCID2: cwnd 40 pipe 38 ssthresh 64 rtt 61 us; 1000 data sent,
    /// 500 acks` or `DCCP CCID3: X 800 Mbit/s X_recv ... p 0.0012 ...`.
    pub fn describe(&self) -> String {
        let rtt = self
            .rtt_us
            .map_or_else(|| "-".to_string(), |r| Micros(r as u64).to_string());
        let mut out = match (self.cwnd, self.x_bps) {
            _ if self.safeudp.is_some() => self.describe_safeudp(&rtt),
            (Some(cwnd), _) => format!(
                "DCCP CCID2: cwnd {cwnd} pipe {} ssthresh {} rtt {rtt}",
                self.pipe.unwrap_or(0),
                self.ssthresh.unwrap_or(0)
            ),
            (None, Some(x)) => format!(
                "DCCP CCID3: X {}/s X_recv {}/s p {} rtt {rtt} t_ipi {:.1} us",
                format_bytes((x / 8.0) as u64),
                format_bytes((self.x_recv_bps.unwrap_or(0.0) / 8.0) as u64),
                Sci(self.p.unwrap_or(0.0)),
                self.t_ipi_us.unwrap_or(0.0)
            ),
            // A sender whose stack keeps its CCID's state to itself
            // (Linux's CCID2 has no getsockopt for it).
            (None, None) if self.data_sent > 0 && self.ccid != 0 => format!(
                "DCCP CCID{}: no CCID state ({} DCCP exposes none)",
                self.ccid,
                self.stack.label()
            ),
            (None, None) => "DCCP: receiving".to_string(),
        };
        out.push_str(&format!(
            "; data {} sent {} received, {} acks",
            self.data_sent, self.data_received, self.acks_sent
        ));
        let drops = self.dropped_checksum + self.dropped_invalid + self.not_dccp;
        if drops > 0 {
            out.push_str(&format!(", {drops} packets dropped"));
        }
        if self.ecn_ce_received > 0 {
            out.push_str(&format!(", {} ECN CE", self.ecn_ce_received));
        }
        if self.dropped_by_ccid > 0 {
            out.push_str(&format!(", {} dropped by the CCID", self.dropped_by_ccid));
        }
        if let Some(ev) = self.safeudp.as_ref().map(|s| s.events.counts.describe()) {
            if !ev.is_empty() {
                out.push_str(&format!("; events: {ev}"));
            }
        }
        out
    }

    /// `DCCP SafeUDP: offered 8.00 Mbits/sec (app 4.00 Mbits/sec)
    /// enforcing 2.00 Mbits/sec p 0.02000 rtt 40.0 ms, network
    /// persistent, end host clear`.
    fn describe_safeudp(&self, rtt: &str) -> String {
        let Some(su) = &self.safeudp else {
            return String::new();
        };
        // In bits, as -b gives the application's rate.
        let rate = |bps: f64| RateUnit::AutoBits.format_rate(bps);
        let mut out = format!("DCCP SafeUDP: offered {}", rate(su.offered_bps));
        if let Some(a) = su.app_rate_bps {
            out.push_str(&format!(" (app {})", rate(a)));
        }
        match (su.enforced_bps, su.bound_bps) {
            (Some(e), _) => out.push_str(&format!(" enforcing {}", rate(e))),
            (None, Some(b)) => out.push_str(&format!(" bound {}", rate(b))),
            (None, None) => out.push_str(" bound -"),
        }
        out.push_str(&format!(
            " p {:.5} rtt {rtt}, network {}, end host {}",
            self.p.unwrap_or(0.0),
            su.network.as_str(),
            su.end_host.as_str()
        ));
        out
    }
}

/// A loss event rate: `0`, `0.0125`, `2.33e-8` (scientific below 0.001,
/// where a long fat path's p lives).
struct Sci(f64);

impl std::fmt::Display for Sci {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0.0 => write!(f, "0"),
            v if v.abs() < 1e-3 => write!(f, "{v:.2e}"),
            v => {
                let s = format!("{v:.4}");
                write!(f, "{}", s.trim_end_matches('0').trim_end_matches('.'))
            }
        }
    }
}

/// DCCP's cells in `--format csv` (`output/csv.rs`), on the rows of the
/// flows that carry its section, SafeUDP's where its CCID runs; `None` is
/// an empty cell.
#[derive(Debug, Default, Serialize)]
pub struct DccpCells {
    /// The sending half-connection's CCID.
    dccp_ccid: Option<u8>,
    /// CCID2: congestion window, packets.
    dccp_cwnd: Option<u64>,
    /// CCID3 and SafeUDP: the allowed sending rate X, bit/s.
    dccp_x_bps: Option<f64>,
    /// CCID3 and SafeUDP: the loss event rate p.
    dccp_p: Option<f64>,
    /// The CCID's RTT estimate, us.
    dccp_rtt_us: Option<f64>,
    /// Application datagrams the CCID refused in the span.
    dccp_dropped_by_ccid: Option<u64>,
    /// SafeUDP: the application's offered rate as the CCID measures it,
    /// bit/s.
    safeudp_offered_bps: Option<f64>,
    /// SafeUDP: the rate the application's --on-congestion policy offers
    /// at the end of the interval, bit/s.
    safeudp_app_rate_bps: Option<f64>,
    /// SafeUDP: TFRC's rate for the measured p and RTT, bit/s.
    safeudp_bound_bps: Option<f64>,
    /// SafeUDP: the rate the CCID enforces while it drops the excess,
    /// bit/s.
    safeudp_enforced_bps: Option<f64>,
    /// SafeUDP: where the congestion episode at each site stands
    /// (`clear`, `transient`, `persistent`).
    safeudp_network: Option<EpisodeState>,
    safeudp_end_host: Option<EpisodeState>,
    /// SafeUDP: notifications raised over the span.
    safeudp_events: Option<u64>,
}

impl DccpCells {
    /// The column names, as the fields (a test in the registry checks).
    pub const COLUMNS: &'static [&'static str] = &[
        "dccp_ccid",
        "dccp_cwnd",
        "dccp_x_bps",
        "dccp_p",
        "dccp_rtt_us",
        "dccp_dropped_by_ccid",
        "safeudp_offered_bps",
        "safeudp_app_rate_bps",
        "safeudp_bound_bps",
        "safeudp_enforced_bps",
        "safeudp_network",
        "safeudp_end_host",
        "safeudp_events",
    ];

    pub fn of(d: &DccpSample) -> Self {
        let s = d.safeudp.as_deref();
        DccpCells {
            dccp_ccid: Some(d.ccid),
            dccp_cwnd: d.cwnd,
            dccp_x_bps: d.x_bps,
            dccp_p: d.p,
            dccp_rtt_us: d.rtt_us,
            dccp_dropped_by_ccid: Some(d.dropped_by_ccid),
            safeudp_offered_bps: s.map(|s| s.offered_bps),
            safeudp_app_rate_bps: s.and_then(|s| s.app_rate_bps),
            safeudp_bound_bps: s.and_then(|s| s.bound_bps),
            safeudp_enforced_bps: s.and_then(|s| s.enforced_bps),
            safeudp_network: s.map(|s| s.network),
            safeudp_end_host: s.map(|s| s.end_host),
            safeudp_events: s.map(|s| s.events.total),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dccp::react::OnCongestion;
    use crate::spec::TestSpec;
    use crate::transport::Transport;

    #[test]
    fn samples_are_deltas_with_the_ccid_state_at_the_end() {
        let before = DccpCounters {
            ccid: 2,
            state: None,
            stats: Stats {
                data_sent: 10,
                acks_sent: 1,
                ..Stats::default()
            },
            not_dccp: 1,
            ..DccpCounters::default()
        };
        let now = DccpCounters {
            ccid: 2,
            state: Some(CcidState::Ccid2 {
                cwnd: 40,
                pipe: 38,
                ssthresh: 64,
                rtt: Some(Duration::from_micros(61)),
            }),
            stats: Stats {
                data_sent: 110,
                acks_sent: 51,
                ..Stats::default()
            },
            not_dccp: 3,
            ..DccpCounters::default()
        };
        let s = now.sample(&before);
        assert_eq!(s.stack, DccpStack::Xferlab);
        assert_eq!((s.x_calc_bps, s.t_rto_us), (None, None));
        assert_eq!((s.data_sent, s.acks_sent, s.not_dccp), (100, 50, 2));
        assert_eq!((s.cwnd, s.pipe, s.ssthresh), (Some(40), Some(38), Some(64)));
        assert_eq!(s.rtt_us, Some(61.0));
        assert!(s.describe().starts_with("DCCP CCID2: cwnd 40 pipe 38"));
        let c3 = DccpCounters {
            ccid: 3,
            state: Some(CcidState::Ccid3 {
                x: 1e6,
                x_recv: 5e5,
                p: 0.01,
                rtt: None,
                t_ipi: Duration::from_micros(1400),
            }),
            ..now
        }
        .sample(&before);
        assert_eq!(
            (c3.x_bps, c3.x_recv_bps, c3.p),
            (Some(8e6), Some(4e6), Some(0.01))
        );
        assert_eq!(c3.t_ipi_us, Some(1400.0));
        let kernel = DccpCounters {
            stack: DccpStack::Kernel,
            x_calc: Some(2e6),
            t_rto: Some(Duration::from_millis(400)),
            ..now
        }
        .sample(&before);
        assert_eq!(
            (kernel.stack, kernel.x_calc_bps, kernel.t_rto_us),
            (DccpStack::Kernel, Some(16e6), Some(400_000.0))
        );
        assert!(serde_json::to_string(&kernel)
            .unwrap()
            .contains(r#""stack":"kernel""#));
        assert!(c3.describe().starts_with("DCCP CCID3: X "));
        assert!(c3.describe().contains(" p 0.01 "), "{}", c3.describe());
        // A kernel CCID2 sender has no state to show, and says so rather
        // than reading as a receiver.
        let k2 = DccpSample {
            stack: DccpStack::Kernel,
            ccid: 2,
            data_sent: 10,
            ..DccpSample::default()
        };
        assert!(
            k2.describe()
                .starts_with("DCCP CCID2: no CCID state (kernel DCCP exposes none); data 10 sent"),
            "{}",
            k2.describe()
        );
        let rx = DccpSample {
            data_received: 10,
            ..DccpSample::default()
        };
        assert!(
            rx.describe().starts_with("DCCP: receiving;"),
            "{}",
            rx.describe()
        );
        // A long fat path's p is not printed as zero.
        assert_eq!(Sci(2.329e-8).to_string(), "2.33e-8");
        assert_eq!(Sci(0.0).to_string(), "0");
        assert_eq!(Sci(1.0).to_string(), "1");
    }

    #[test]
    fn safeudp_samples_carry_its_state_and_the_interval_s_events() {
        let state = |events, network, enforcing, net_losses| CcidState::SafeUdp {
            offered: 1e6,
            bound: 2.5e5,
            p: 0.02,
            rtt: Some(Duration::from_millis(40)),
            enforcing,
            host_losses: 0,
            network_losses: net_losses,
            ecn_marks: 0,
            dropped_by_ccid: 0,
            network,
            end_host: EpisodeState::Clear,
            events,
        };
        let first = EventCounts {
            onset_network: 1,
            ..EventCounts::default()
        };
        let before = DccpCounters {
            ccid: safeudp::CCID,
            state: Some(state(first, EpisodeState::Transient, false, 4)),
            ..DccpCounters::default()
        };
        let now = DccpCounters {
            state: Some(state(
                EventCounts {
                    persistent_network: 1,
                    enforcing: 1,
                    ..first
                },
                EpisodeState::Persistent,
                true,
                10,
            )),
            stats: Stats {
                dropped_by_ccid: 300,
                ..Stats::default()
            },
            app_rate: Some(1e6),
            ..before
        };
        let s = now.sample(&before);
        assert_eq!(s.dropped_by_ccid, 300);
        let su = s.safeudp.clone().expect("a SafeUDP section");
        assert_eq!((su.bound_bps, su.enforced_bps), (Some(2e6), Some(2e6)));
        assert_eq!((su.offered_bps, su.app_rate_bps), (8e6, Some(8e6)));
        assert_eq!(su.network, EpisodeState::Persistent);
        assert_eq!(su.network_losses, 6);
        assert_eq!(
            (
                su.events.total,
                su.events.counts.onset_network,
                su.events.counts.enforcing
            ),
            (2, 0, 1)
        );
        let line = s.describe();
        assert!(
            line.starts_with("DCCP SafeUDP: offered 8.00 Mbits/sec (app 8.00 Mbits/sec) enforcing 2.00 Mbits/sec"),
            "{line}"
        );
        assert!(line.contains("network persistent"), "{line}");
        assert!(line.contains("300 dropped by the CCID"), "{line}");
        assert!(
            line.contains("events: persistent/network 1, enforcing 1"),
            "{line}"
        );
        // No network loss yet: no bound, nothing enforced.
        let mut free = state(first, EpisodeState::Clear, false, 0);
        if let CcidState::SafeUdp { bound, .. } = &mut free {
            *bound = f64::INFINITY;
        }
        let free = DccpCounters {
            state: Some(free),
            ..before
        }
        .sample(&DccpCounters::default());
        let su = free.safeudp.unwrap();
        assert_eq!(
            (su.bound_bps, su.enforced_bps, su.events.total),
            (None, None, 1)
        );
    }

    /// Which end presents the attach in band, and what does not combine.
    #[test]
    fn stacks_and_carriers_combine_only_where_they_meet() {
        use DccpStack::{Kernel, Xferlab};
        let k = |stack, server_stack, carrier| DccpKnobs {
            stack,
            server_stack,
            carrier,
            ..DccpKnobs::default()
        };
        let interop = k(Xferlab, Some(Kernel), DccpCarrier::Ip);
        assert_eq!(interop.check(), Ok(()));
        assert!(interop.attach_in_band());
        assert!(!interop.accept_in_band());
        let kernel_client = k(Kernel, Some(Xferlab), DccpCarrier::Ip);
        assert_eq!(kernel_client.check(), Ok(()));
        assert!(kernel_client.accept_in_band());
        assert!(!kernel_client.attach_in_band());
        for both in [
            k(Kernel, None, DccpCarrier::Udp),
            k(Kernel, Some(Kernel), DccpCarrier::Udp),
            k(Xferlab, None, DccpCarrier::Ip),
            k(Xferlab, None, DccpCarrier::Udp),
        ] {
            assert_eq!(both.check(), Ok(()), "{both:?}");
            assert!(!both.attach_in_band(), "{both:?}");
            assert!(!both.accept_in_band(), "{both:?}");
        }
        for bad in [
            k(Kernel, None, DccpCarrier::Ip),
            k(Kernel, Some(Kernel), DccpCarrier::Ip),
            k(Kernel, Some(Xferlab), DccpCarrier::Udp),
            k(Xferlab, Some(Kernel), DccpCarrier::Udp),
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_the_own_stack_over_udp_at_both_ends_batches_by_default() {
        let own = DccpKnobs::default();
        assert!(own.batches_by_default());
        let kernel_server = DccpKnobs {
            server_stack: Some(DccpStack::Kernel),
            carrier: DccpCarrier::Ip,
            ..own
        };
        assert!(!kernel_server.batches_by_default());
        let kernel = DccpKnobs {
            stack: DccpStack::Kernel,
            ..own
        };
        assert!(!kernel.batches_by_default());
        let raw_ip = DccpKnobs {
            carrier: DccpCarrier::Ip,
            ..own
        };
        assert!(!raw_ip.batches_by_default());
    }

    #[test]
    fn knobs_name_the_flag_that_is_wrong() {
        let mut spec = TestSpec {
            transport: Transport::Dccp,
            ..TestSpec::default_stream()
        };
        spec.knobs.size = 1400;
        spec.knobs.own.dccp = Some(DccpKnobs {
            ccid: 4,
            ..DccpKnobs::default()
        });
        let e = spec.validate().unwrap_err().to_string();
        assert!(e.contains("--ccid 4"), "{e}");
        spec.knobs.own.dccp = Some(DccpKnobs {
            on_congestion: Some(OnCongestion::StepDown),
            ..DccpKnobs::default()
        });
        let e = spec.validate().unwrap_err().to_string();
        assert!(e.contains("--ccid 248"), "{e}");
        spec.knobs.own.dccp = Some(DccpKnobs {
            ccid: safeudp::CCID,
            on_congestion: Some(OnCongestion::StepDown),
            ..DccpKnobs::default()
        });
        spec.knobs.rate = None;
        let e = spec.validate().unwrap_err().to_string();
        assert!(e.contains("-b RATE"), "{e}");
        spec.knobs.rate = Some(1_000_000);
        assert_eq!(spec.validate(), Ok(()));
        spec.knobs.own.dccp = None;
        assert_eq!(spec.validate(), Ok(()));
        // --gso: xferlab's own DCCP over UDP only.
        spec.knobs.gso = true;
        assert_eq!(spec.validate(), Ok(()));
        for (stack, server_stack, carrier) in [
            (DccpStack::Xferlab, None, DccpCarrier::Ip),
            (DccpStack::Xferlab, Some(DccpStack::Kernel), DccpCarrier::Ip),
            (DccpStack::Kernel, None, DccpCarrier::Udp),
        ] {
            spec.knobs.own.dccp = Some(DccpKnobs {
                stack,
                server_stack,
                carrier,
                ..DccpKnobs::default()
            });
            let e = spec.validate().unwrap_err().to_string();
            assert!(e.contains("leave out --gso"), "{e}");
        }
        spec.knobs.own.dccp = None;
        spec.knobs.gso = false;
        spec.knobs.size = 8;
        assert!(spec
            .validate()
            .unwrap_err()
            .to_string()
            .contains("-l/--length"));
    }
}
