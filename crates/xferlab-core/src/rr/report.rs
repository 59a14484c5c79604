//! What an rr test reports, per flow and per side (docs/result-schema.md,
//! `rr` objects). These hang off [`crate::result::SideReport::rr`] and
//! [`crate::result::Summary::rr`], next to the background stream flows.

use serde::{Deserialize, Serialize};

use super::RrMode;
use crate::interval::FlowEnd;
use crate::latency::{LatencySummary, Percentile};

/// Transactions of one flow (or all flows) over one interval.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RrInterval {
    pub start_s: f64,
    pub end_s: f64,
    pub omitted: bool,
    /// Client: responses received in time. Server: requests answered.
    pub transactions: u64,
    pub per_second: f64,
    pub timed_out: u64,
    pub failed: u64,
    /// Client: mean latency of the interval's transactions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_latency_us: Option<f64>,
    /// A flow's interval, rr over QUIC (client): the transport's own
    /// section under its name (`"quic": {...}`), as a stream flow's
    /// interval has it.
    #[serde(flatten)]
    pub transport: Option<crate::transport::TransportSection>,
}

/// Transactions of one flow (or all flows) over the whole test.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RrTotal {
    /// The measured window (after the warm-up).
    pub start_s: f64,
    pub end_s: f64,
    pub transactions: u64,
    pub per_second: f64,
    /// Every transaction of the run, warm-up included: client and server
    /// agree on this number when nothing was lost.
    pub transactions_all: u64,
    /// Client: requests issued. Server: requests received.
    pub requests: u64,
    pub timed_out: u64,
    pub failed: u64,
    /// Client: responses that came after their request had timed out.
    pub late: u64,
    /// Server: requests deliberately left unanswered (--drop-request).
    #[serde(default)]
    pub dropped: u64,
}

/// One request/response flow as one side saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RrFlowReport {
    pub id: u32,
    pub local: String,
    pub remote: String,
    pub intervals: Vec<RrInterval>,
    pub total: RrTotal,
    /// Client: request-to-response latency of the measured window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencySummary>,
    /// Client, tcp-crr: connect() to connection established.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect: Option<LatencySummary>,
    pub end: FlowEnd,
    /// Client, quic-rr and quic-crr: the transport's own section over
    /// the whole test, under its name (`"quic": {...}`): the flow's
    /// connection, or quic-crr's connections (their counts summed, the
    /// state the last one's).
    #[serde(flatten)]
    pub transport: Option<crate::transport::TransportSection>,
}

/// The request/response group of one side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RrSideReport {
    pub mode: RrMode,
    /// How this end's threads waited for messages (`--wait`, `auto`
    /// decided); absent in documents from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<super::RrWait>,
    pub flows: Vec<RrFlowReport>,
    /// Every flow summed per interval: transactions over time.
    pub sums: Vec<RrInterval>,
    pub total: RrTotal,
    /// Every flow's latencies merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencySummary>,
    /// The merged latency distribution at fixed percentiles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub percentiles: Vec<Percentile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect: Option<LatencySummary>,
}

/// The request/response group of a test, both ends' view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RrSummary {
    pub mode: RrMode,
    pub flows: u32,
    /// Client's completed transactions in the measured window, per second.
    pub transactions: u64,
    pub per_second: f64,
    /// Whole-run counts: client completed, server answered (None when the
    /// server's report is missing).
    pub client_transactions_all: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_transactions_all: Option<u64>,
    pub timed_out: u64,
    pub failed: u64,
    pub late: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencySummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect: Option<LatencySummary>,
}

impl RrSummary {
    pub fn from_sides(client: &RrSideReport, server: Option<&RrSideReport>) -> RrSummary {
        let t = &client.total;
        RrSummary {
            mode: client.mode,
            flows: client.flows.len() as u32,
            transactions: t.transactions,
            per_second: t.per_second,
            client_transactions_all: t.transactions_all,
            server_transactions_all: server.map(|s| s.total.transactions_all),
            timed_out: t.timed_out,
            failed: t.failed,
            late: t.late,
            latency: client.latency,
            connect: client.connect,
        }
    }
}

/// Adds flow totals (the window is the widest of them).
pub fn sum_totals<'a>(totals: impl IntoIterator<Item = &'a RrTotal>) -> RrTotal {
    let mut out: Option<RrTotal> = None;
    for t in totals {
        let o = out.get_or_insert(RrTotal {
            start_s: t.start_s,
            end_s: t.end_s,
            ..RrTotal::default()
        });
        o.start_s = o.start_s.min(t.start_s);
        o.end_s = o.end_s.max(t.end_s);
        o.transactions += t.transactions;
        o.transactions_all += t.transactions_all;
        o.requests += t.requests;
        o.timed_out += t.timed_out;
        o.failed += t.failed;
        o.late += t.late;
        o.dropped += t.dropped;
    }
    let mut o = out.unwrap_or_default();
    o.per_second = rate(o.transactions, o.end_s - o.start_s);
    o
}

/// Sums per-flow intervals by index (flows of one side share boundaries).
pub fn sum_intervals<'a>(flows: impl IntoIterator<Item = &'a [RrInterval]>) -> Vec<RrInterval> {
    let mut out: Vec<RrInterval> = Vec::new();
    let mut lat: Vec<(f64, u64)> = Vec::new();
    for ivs in flows {
        for (i, iv) in ivs.iter().enumerate() {
            if out.len() <= i {
                out.push(RrInterval {
                    start_s: iv.start_s,
                    end_s: iv.end_s,
                    omitted: iv.omitted,
                    ..RrInterval::default()
                });
                lat.push((0.0, 0));
            }
            let o = &mut out[i];
            o.end_s = o.end_s.max(iv.end_s);
            o.transactions += iv.transactions;
            o.timed_out += iv.timed_out;
            o.failed += iv.failed;
            if let Some(m) = iv.mean_latency_us {
                lat[i].0 += m * iv.transactions as f64;
                lat[i].1 += iv.transactions;
            }
        }
    }
    for (o, (sum, n)) in out.iter_mut().zip(lat) {
        o.per_second = rate(o.transactions, o.end_s - o.start_s);
        o.mean_latency_us = (n > 0).then(|| sum / n as f64);
    }
    out
}

pub fn rate(n: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        n as f64 / seconds
    } else {
        0.0
    }
}
