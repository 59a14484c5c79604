//! The one result type every pattern and transport reports through.
//!
//! Layout (documented in docs/result-schema.md, checked by
//! docs/result-schema.json): a [`TestResult`] holds the [`TestSpec`], one
//! [`SideReport`] per endpoint (each side measures only what it can see
//! itself: its flows, its CPU, its kernel counters) and a [`Summary`] derived
//! from both. What only one pattern or transport measures sits in a
//! section of its own, an enum with a variant per pattern
//! ([`PatternReport`], [`PatternSummary`]) or transport
//! ([`SideTransportReport`]), never in optional fields of another's. The
//! `schema` string changes its major number only when a field changes
//! meaning or goes away; [`v1`] reads the previous one.

pub mod schema;
pub mod v1;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::spec::{FlowDirection, RecvMode, SendMode, TestSpec};

// The flow figures live below the result, in the modules that make them;
// the result document gathers them.
pub use crate::interval::{
    FlowEnd, FlowInterval, FlowTotal, TcpTotals, Throughput, UdpCounters, UdpSample, UdpTotal,
};
pub use crate::transport::tcp::{TcpCounters, TcpSample};

/// Identifies the JSON layout; bump the number on incompatible changes.
pub const SCHEMA: &str = "xferlab.result/2";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    Client,
    Server,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FlowRole {
    Sender,
    Receiver,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Everything ran and both sides reported.
    Ok,
    /// The test was cut short or one side's report is missing; what was
    /// measured is still here.
    Partial,
    /// Nothing useful was measured.
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Software {
    pub name: String,
    pub version: String,
    /// Control-protocol version spoken.
    pub protocol: u16,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostInfo {
    pub hostname: String,
    /// `uname -sr`.
    pub kernel: String,
    pub cpus: u32,
    /// The CPU's model name (/proc/cpuinfo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
    /// The CPU's cache sizes (boxed: most HostInfo values, e.g. in the
    /// control protocol's Welcome, carry none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caches: Option<Box<CacheSizes>>,
    /// The byte-stream sizes `xferlab calibrate` measured on this machine
    /// (same CPU model, kernel, L2 and usable CPUs), which flows without
    /// -l/--read-size use; absent: not calibrated, flows use iperf3's
    /// 128 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_calibration: Option<Box<SizeCalibration>>,
}

/// What `xferlab calibrate` measured on one machine: the write and read
/// sizes that moved the most over loopback TCP, for a side with a CPU to
/// spare (one flow) and for a crowded one (a flow per usable CPU).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SizeCalibration {
    /// When it was measured (Unix seconds).
    pub measured_unix_s: u64,
    /// The machine it holds for: a calibration of another CPU, kernel,
    /// L2 or number of usable CPUs is not used.
    pub cpu_model: String,
    pub kernel: String,
    pub l2: Option<u64>,
    pub cpus: u32,
    /// One flow per side.
    pub alone: SizeChoice,
    /// As many flows as usable CPUs (absent on one CPU, where one flow
    /// is already crowded and `alone` is measured that way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crowded: Option<SizeChoice>,
}

/// One calibrated choice and what it gained over iperf3's sizes in the
/// same rounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SizeChoice {
    pub write_size: u64,
    pub read_size: u64,
    /// Copying reads fill the buffer to its end (see
    /// `SocketSettings::read_fill`).
    pub read_fill: bool,
    /// Receiver throughput of the choice, bits/s (median of the rounds).
    pub bps: f64,
    /// The same for 128 KiB writes and reads (iperf3's block), filling
    /// when not crowded: the default the choice had to beat.
    pub default_bps: f64,
}

/// Cache sizes of the CPU the data threads start on, in bytes (sysfs);
/// None where the kernel does not say.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct CacheSizes {
    pub l1d: Option<u64>,
    pub l2: Option<u64>,
    pub l3: Option<u64>,
    /// Results before 2026-11-29 only: `l2` came from the XFERLAB_L2_CACHE
    /// override (sizes were then derived from L2).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub l2_override: bool,
}

/// CPU time used by one side of one test, from getrusage.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CpuUsage {
    pub user_s: f64,
    pub system_s: f64,
    /// Wall-clock seconds the usage was measured over.
    pub wall_s: f64,
    /// (user + system) / wall, in percent of one core (200 = two cores busy).
    pub percent: f64,
}

impl CpuUsage {
    pub fn new(user_s: f64, system_s: f64, wall_s: f64) -> Self {
        let percent = if wall_s > 0.0 {
            100.0 * (user_s + system_s) / wall_s
        } else {
            0.0
        };
        CpuUsage {
            user_s,
            system_s,
            wall_s,
            percent,
        }
    }
    pub fn total_s(&self) -> f64 {
        self.user_s + self.system_s
    }
}

/// Kernel counters of one host: after minus before the test.
///
/// Keys are `Group.Name` as in /proc/net/snmp and /proc/net/netstat
/// (`Tcp.RetransSegs`, `TcpExt.TCPSACKRecovery`, `IpExt.InCEPkts`) and
/// `dev.<field>` for the interface's /proc/net/dev line (`dev.rx_bytes`).
/// Only counters that changed are listed. They are host- (namespace-) wide:
/// other traffic during the test shows up too.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KernelCounters {
    /// The interface the test's traffic used (`lo` on loopback).
    pub interface: Option<String>,
    pub deltas: BTreeMap<String, i64>,
}

/// Socket settings as read back from the kernel after they were applied.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SocketSettings {
    pub sndbuf: u64,
    pub rcvbuf: u64,
    pub congestion: Option<String>,
    pub mss: Option<u32>,
    pub nodelay: bool,
    pub tos: Option<u8>,
    pub max_pacing_rate: Option<u64>,
    pub recv_mode: RecvMode,
    /// Senders of a byte stream: how data reaches the kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_mode: Option<SendMode>,
    /// Byte-stream senders: bytes handed to the kernel per write() call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_size: Option<u64>,
    /// Where `write_size` came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_size_from: Option<SizeSource>,
    /// Byte-stream receivers: bytes asked for per read() call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_size: Option<u64>,
    /// Where `read_size` came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_size_from: Option<SizeSource>,
    /// Byte-stream receivers: the largest SO_RCVLOWAT the receiver sets
    /// to batch its wake-ups; 0 = it never sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcvlowat: Option<u64>,
    /// Byte-stream receivers that copy: true when each read() asks for the
    /// rest of the buffer and the buffer fills to its end before it starts
    /// over (as iperf3 reads a block; chosen while the side runs fewer
    /// flows than it may use CPUs and the buffer is at most 128 KiB),
    /// false when every read asks for the whole buffer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_fill: Option<bool>,
    /// UDP receivers: where each datagram's arrival time came from, for
    /// the jitter and delay figures: `kernel` (the kernel's receive
    /// stamp; by default on paced flows) or `read` (the clock when the
    /// receive call returned; by default on unpaced ones, where the
    /// kernel's stamp would slow the path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_stamps: Option<crate::spec::RxStamps>,
    /// The CPU the flow's data thread was pinned to (`-A`, or one CPU per
    /// flow by `--pin-flows`); absent: the scheduler placed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
}

/// Where a data-path size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SizeSource {
    /// iperf3's block, 128 KiB: this machine has no calibration.
    Default,
    /// Measured on this machine by `xferlab calibrate` (the host section's
    /// `size_calibration` has the figures).
    Calibrated,
    /// Results before 2026-11-29: derived from the L2 cache size.
    L2Cache,
    /// Results before 2026-11-29: derived from the L2 cache size, shared
    /// by as many flows as CPUs.
    L2CacheShared,
    /// Results before 2026-11-29: the fallback for an unknown L2.
    Fallback,
    /// Given on the command line.
    Option,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FlowReport {
    pub id: u32,
    pub direction: FlowDirection,
    pub role: FlowRole,
    pub local: String,
    pub remote: String,
    pub socket: SocketSettings,
    pub intervals: Vec<FlowInterval>,
    pub total: FlowTotal,
    pub end: FlowEnd,
}

/// The flows of one direction summed, per interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SumInterval {
    pub direction: FlowDirection,
    pub role: FlowRole,
    pub start_s: f64,
    pub end_s: f64,
    pub omitted: bool,
    pub bytes: u64,
    pub bits_per_second: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
}

/// Everything one endpoint measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SideReport {
    pub endpoint: Endpoint,
    pub host: HostInfo,
    /// The server ran inside the client's process (no server named).
    #[serde(default)]
    pub embedded: bool,
    /// Wall-clock seconds from this side's start to its last flow ending.
    pub duration_s: f64,
    pub flows: Vec<FlowReport>,
    pub sums: Vec<SumInterval>,
    /// CPU of the threads serving this test on this side (per-thread
    /// rusage, so concurrent tests on one server do not mix).
    pub cpu: CpuUsage,
    pub counters: KernelCounters,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// What only this test's pattern measures (an rr test's transactions;
    /// `flows` then holds its background stream flows).
    pub pattern: PatternReport,
    /// What only this test's transport measures for the side as a whole
    /// (per-flow transport state is in each flow's intervals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<SideTransportReport>,
}

impl SideReport {
    /// The request/response group of an rr test.
    pub fn rr(&self) -> Option<&crate::rr::report::RrSideReport> {
        match &self.pattern {
            PatternReport::Rr(rr) => Some(rr),
            PatternReport::Stream => None,
        }
    }

    /// The endpoints of a USB bulk test.
    pub fn usb(&self) -> Option<&crate::usb::stats::UsbReport> {
        match &self.transport {
            Some(SideTransportReport::UsbBulk(usb)) => Some(usb),
            Some(SideTransportReport::UsbNet(_) | SideTransportReport::UsbGadget(_)) | None => None,
        }
    }
}

/// One side's figures that belong to the test's pattern
/// (`"pattern": {"kind": "rr", ...}`); a variant per [`crate::spec::Pattern`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
// One per side report, never in a collection or on a hot path: boxing the
// large variant would only add an indirection.
#[allow(clippy::large_enum_variant)]
pub enum PatternReport {
    /// A stream test's figures are its flows, common to every pattern.
    Stream,
    Rr(crate::rr::report::RrSideReport),
}

/// One side's figures that belong to the test's transport as a whole
/// (`"transport": {"kind": "usb_bulk", ...}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
// One per side report, never in a collection or on a hot path (as
// PatternReport).
#[allow(clippy::large_enum_variant)]
pub enum SideTransportReport {
    /// Per-endpoint transfer counts, latency and errors.
    UsbBulk(crate::usb::stats::UsbReport),
    /// `xferlab usb net`: the link's setup and its threads' counts.
    UsbNet(crate::usb::net::report::UsbNetReport),
    /// `xferlab usb gadget`: the device end (its side is `client` with
    /// `endpoint: "server"`).
    UsbGadget(crate::usb::gadget::UsbGadgetReport),
}

/// Datagram loss of one direction over the whole run: the sender's count
/// against the receiver's, so datagrams lost after the last one received
/// count too.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UdpSummary {
    pub sent: u64,
    pub received: u64,
    /// sent - received (never negative).
    pub lost: u64,
    pub loss_fraction: f64,
    /// Dropped by the receiving host's socket buffer (SO_RXQ_OVFL).
    pub host_drops: u64,
    /// lost - host_drops: what the path lost.
    pub network_lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    /// Largest RFC 3550 jitter of the receiving flows at the end.
    pub jitter_us: f64,
    /// Sender datagrams later than the slack (underruns).
    pub late: u64,
}

/// One direction of the test, both ends' view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DirectionSummary {
    pub direction: FlowDirection,
    pub flows: u32,
    pub sender: Throughput,
    /// None when the receiving side's report is missing.
    pub receiver: Option<Throughput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Summary {
    pub directions: Vec<DirectionSummary>,
    /// Both sides' figures of the test's pattern combined.
    pub pattern: PatternSummary,
}

impl Summary {
    /// The request/response group of an rr test.
    pub fn rr(&self) -> Option<&crate::rr::report::RrSummary> {
        match &self.pattern {
            PatternSummary::Rr(rr) => Some(rr),
            PatternSummary::Stream => None,
        }
    }
}

/// Both sides' pattern figures combined (`"pattern": {"kind": "rr", ...}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)] // one per result, as PatternReport
pub enum PatternSummary {
    Stream,
    Rr(crate::rr::report::RrSummary),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TestResult {
    pub schema: String,
    /// Session id shared by both sides' logs.
    pub id: String,
    /// RFC 3339 UTC time the test started.
    pub started_at: String,
    pub software: Software,
    pub spec: TestSpec,
    /// The server as the client named it (`127.0.0.1:5290`).
    pub server_address: String,
    pub client: SideReport,
    /// Missing when the server's report never arrived.
    pub server: Option<SideReport>,
    pub summary: Summary,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// What a stock iperf3 server printed for this test, when the client
    /// asked for it (`--get-server-output`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output: Option<String>,
    /// Runs inside `xferlab lab`: topology, link configuration and the
    /// emulator's accuracy self-report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lab: Option<crate::link::LabReport>,
    /// The device's bus as usbmon saw it: `xferlab usb mon`'s own report,
    /// or the global `--usbmon`'s over another verb.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usbmon: Option<crate::usb::usbmon::BusReport>,
}

impl SideReport {
    fn flows_of(
        &self,
        direction: FlowDirection,
        role: FlowRole,
    ) -> impl Iterator<Item = &FlowReport> {
        self.flows
            .iter()
            .filter(move |f| f.direction == direction && f.role == role)
    }
}

/// Sums the flows of one direction and role over the measured window.
fn side_throughput<'a>(
    flows: impl Iterator<Item = &'a FlowReport>,
) -> (Throughput, Option<u64>, u32) {
    let (mut bytes, mut start, mut end, mut n) = (0u64, f64::INFINITY, 0f64, 0u32);
    let mut retrans: Option<u64> = None;
    for f in flows {
        n += 1;
        bytes += f.total.bytes;
        start = start.min(f.total.start_s);
        end = end.max(f.total.end_s);
        if let Some(t) = f.total.tcp {
            *retrans.get_or_insert(0) += t.retransmits;
        }
    }
    let seconds = if n > 0 { (end - start).max(0.0) } else { 0.0 };
    (Throughput::new(bytes, seconds), retrans, n)
}

/// Whole-run datagram loss of one direction; None for stream transports
/// or when either side's report is missing.
fn udp_summary<'a>(
    senders: Option<impl Iterator<Item = &'a FlowReport>>,
    receivers: Option<impl Iterator<Item = &'a FlowReport>>,
) -> Option<UdpSummary> {
    let mut out = UdpSummary::default();
    let mut any = false;
    for t in senders?.filter_map(|f| f.total.udp) {
        any = true;
        out.sent += t.packets_all;
        out.late += t.window.late;
    }
    if !any {
        return None;
    }
    // Without the receiving side's report nothing is known about loss.
    let receivers: Vec<UdpTotal> = receivers?.filter_map(|f| f.total.udp).collect();
    if receivers.is_empty() {
        return None;
    }
    for t in receivers {
        out.received += t.packets_all;
        out.host_drops += t.host_drops_all;
        out.out_of_order += t.window.out_of_order;
        out.duplicates += t.window.duplicates;
        out.jitter_us = out.jitter_us.max(t.window.jitter_us);
    }
    out.lost = out.sent.saturating_sub(out.received);
    out.loss_fraction = if out.sent > 0 {
        out.lost as f64 / out.sent as f64
    } else {
        0.0
    };
    // The socket's drop counter (SO_RXQ_OVFL) also counts the end-of-flow
    // markers the sender adds after its last datagram, which are not in
    // `sent`: a dropped marker must not make the host drop more than was
    // lost (seen as 2766 host drops for 2765 lost under load).
    out.host_drops = out.host_drops.min(out.lost);
    out.network_lost = out.lost - out.host_drops;
    Some(out)
}

impl Summary {
    /// Combines what each side saw: sender figures from the sending side,
    /// receiver figures from the receiving side.
    pub fn from_sides(client: &SideReport, server: Option<&SideReport>) -> Summary {
        let mut directions = Vec::new();
        for dir in [FlowDirection::C2s, FlowDirection::S2c] {
            let (sender_side, receiver_side) = match dir {
                FlowDirection::C2s => (Some(client), server),
                FlowDirection::S2c => (server, Some(client)),
            };
            let sent = sender_side.map(|s| side_throughput(s.flows_of(dir, FlowRole::Sender)));
            let recv = receiver_side.map(|s| side_throughput(s.flows_of(dir, FlowRole::Receiver)));
            let flows = sent.map(|s| s.2).max(recv.map(|r| r.2)).unwrap_or(0);
            if flows == 0 {
                continue;
            }
            directions.push(DirectionSummary {
                direction: dir,
                flows,
                sender: sent.map(|s| s.0).unwrap_or_default(),
                receiver: recv.filter(|r| r.2 > 0).map(|r| r.0),
                retransmits: sent.and_then(|s| s.1),
                udp: udp_summary(
                    sender_side.map(|s| s.flows_of(dir, FlowRole::Sender)),
                    receiver_side.map(|s| s.flows_of(dir, FlowRole::Receiver)),
                ),
            });
        }
        let pattern = match client.rr() {
            Some(c) => PatternSummary::Rr(crate::rr::report::RrSummary::from_sides(
                c,
                server.and_then(SideReport::rr),
            )),
            None => PatternSummary::Stream,
        };
        Summary {
            directions,
            pattern,
        }
    }
}

/// Sums per-flow intervals into one series per (direction, role). Flows of
/// one side share interval boundaries, so intervals are matched by index.
pub fn sum_intervals(flows: &[FlowReport]) -> Vec<SumInterval> {
    let mut groups: BTreeMap<(FlowDirection, u8), Vec<&FlowReport>> = BTreeMap::new();
    for f in flows {
        groups
            .entry((f.direction, f.role as u8))
            .or_default()
            .push(f);
    }
    let mut out = Vec::new();
    for ((direction, _), members) in groups {
        let role = members[0].role;
        let n = members.iter().map(|f| f.intervals.len()).max().unwrap_or(0);
        for i in 0..n {
            let mut sum: Option<SumInterval> = None;
            for f in &members {
                let Some(iv) = f.intervals.get(i) else {
                    continue;
                };
                let s = sum.get_or_insert(SumInterval {
                    direction,
                    role,
                    start_s: iv.start_s,
                    end_s: iv.end_s,
                    omitted: iv.omitted,
                    bytes: 0,
                    bits_per_second: 0.0,
                    retransmits: None,
                });
                s.end_s = s.end_s.max(iv.end_s);
                s.bytes += iv.bytes;
                if let Some(t) = iv.tcp {
                    if role == FlowRole::Sender {
                        *s.retransmits.get_or_insert(0) += t.retransmits;
                    }
                }
            }
            if let Some(mut s) = sum {
                s.bits_per_second = Throughput::new(s.bytes, s.end_s - s.start_s).bits_per_second;
                out.push(s);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(id: u32, direction: FlowDirection, role: FlowRole, bytes: &[u64]) -> FlowReport {
        let intervals: Vec<FlowInterval> = bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| FlowInterval {
                start_s: i as f64,
                end_s: i as f64 + 1.0,
                omitted: false,
                bytes: b,
                bits_per_second: b as f64 * 8.0,
                tcp: None,
                udp: None,
                transport: None,
            })
            .collect();
        let total: u64 = bytes.iter().sum();
        FlowReport {
            id,
            direction,
            role,
            local: String::new(),
            remote: String::new(),
            socket: SocketSettings::default(),
            total: FlowTotal {
                start_s: 0.0,
                end_s: bytes.len() as f64,
                bytes: total,
                bits_per_second: total as f64 * 8.0 / bytes.len() as f64,
                bytes_all: total,
                tcp: None,
                udp: None,
                transport: None,
            },
            intervals,
            end: FlowEnd::Completed,
        }
    }

    fn side(endpoint: Endpoint, flows: Vec<FlowReport>) -> SideReport {
        SideReport {
            endpoint,
            host: HostInfo::default(),
            embedded: false,
            duration_s: 2.0,
            sums: sum_intervals(&flows),
            flows,
            cpu: CpuUsage::default(),
            counters: KernelCounters::default(),
            warnings: vec![],
            pattern: PatternReport::Stream,
            transport: None,
        }
    }

    #[test]
    fn sums_match_flows_and_summary_takes_each_role_from_its_side() {
        let c = side(
            Endpoint::Client,
            vec![
                flow(0, FlowDirection::C2s, FlowRole::Sender, &[10, 20]),
                flow(1, FlowDirection::C2s, FlowRole::Sender, &[1, 2]),
            ],
        );
        assert_eq!(
            c.sums.iter().map(|s| s.bytes).collect::<Vec<_>>(),
            vec![11, 22]
        );
        let s = side(
            Endpoint::Server,
            vec![
                flow(0, FlowDirection::C2s, FlowRole::Receiver, &[10, 19]),
                flow(1, FlowDirection::C2s, FlowRole::Receiver, &[1, 2]),
            ],
        );
        let sum = Summary::from_sides(&c, Some(&s));
        assert_eq!(sum.directions.len(), 1);
        assert_eq!(sum.directions[0].flows, 2);
        assert_eq!(sum.directions[0].sender.bytes, 33);
        assert_eq!(sum.directions[0].receiver.unwrap().bytes, 32);
        let partial = Summary::from_sides(&c, None);
        assert_eq!(partial.directions[0].receiver, None);
    }

    #[test]
    fn tcp_sample_takes_deltas_of_counters_and_ends_of_gauges() {
        let a = TcpCounters {
            total_retrans: 5,
            busy_time_us: 100,
            snd_cwnd: 10,
            snd_mss: 1000,
            ..Default::default()
        };
        let b = TcpCounters {
            total_retrans: 7,
            busy_time_us: 350,
            snd_cwnd: 20,
            snd_mss: 1000,
            rtt_us: 42,
            ..Default::default()
        };
        let s = b.sample(&a);
        assert_eq!(
            (s.retransmits, s.busy_us, s.cwnd_bytes, s.rtt_us),
            (2, 250, 20_000, 42)
        );
    }
}
