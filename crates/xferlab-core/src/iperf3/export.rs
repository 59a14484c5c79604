//! `iperf3 -J` (version 3.12) as a mapping of a [`TestResult`]: the
//! document xferlab writes for `--format iperf3-json`, so tools that
//! already read iperf3 results can read xferlab's. The mapping, and every
//! place where xferlab has no counterpart and iperf3's neutral value is
//! written instead, is documented in docs/result-schema.md ("iperf3-shaped
//! export"). Pure conversion: the binary's reporter serializes
//! [`document`] where it writes.
//!
//! The document is written from the client's point of view, as `iperf3 -c`
//! writes it: `start.connected` and `intervals` are the client's flows;
//! `end` combines both sides (sender figures from the sending side,
//! receiver figures from the receiving side). Like iperf3, times after a
//! warm-up (`-O`) count from the end of the warm-up.
//!
//! The iperf3 document is built from plain structs whose field order is
//! iperf3's key order, so the output reads like iperf3's too.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::UNIX_EPOCH;

use serde::Serialize;
use serde_json::Value;

use crate::result::{
    CpuUsage, DirectionSummary, FlowInterval, FlowReport, FlowRole, SideReport, TcpSample,
    TestResult, Throughput, UdpSample,
};
use crate::spec::{Direction, FlowDirection, Limit, Transport};

// ---------------------------------------------------------------------------
// The document, in iperf3 3.12's key order.

/// The whole `iperf3 -J` document of one test; serialize it.
#[derive(Serialize)]
pub struct Document {
    start: Start,
    intervals: Vec<Interval>,
    end: End,
    /// iperf3 `--extra-data`; here the test's title (`-T`).
    #[serde(skip_serializing_if = "Option::is_none")]
    extra_data: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct Start {
    connected: Vec<Connected>,
    version: String,
    system_info: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp: Option<Timestamp>,
    connecting_to: ConnectingTo,
    cookie: String,
    /// TCP with `-M`: the MSS asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    tcp_mss: Option<u32>,
    /// TCP without `-M`: the MSS the kernel chose.
    #[serde(skip_serializing_if = "Option::is_none")]
    tcp_mss_default: Option<u32>,
    target_bitrate: u64,
    sock_bufsize: u64,
    sndbuf_actual: u64,
    rcvbuf_actual: u64,
    test_start: TestStart,
}

#[derive(Serialize)]
struct Connected {
    socket: u32,
    local_host: String,
    local_port: u16,
    remote_host: String,
    remote_port: u16,
}

#[derive(Serialize)]
struct Timestamp {
    time: String,
    timesecs: u64,
}

#[derive(Serialize)]
struct ConnectingTo {
    host: String,
    port: u16,
}

#[derive(Serialize)]
struct TestStart {
    protocol: &'static str,
    num_streams: u32,
    blksize: u64,
    omit: Value,
    duration: Value,
    bytes: u64,
    blocks: u64,
    reverse: u8,
    tos: u8,
    target_bitrate: u64,
    // Not in 3.12's test_start; later iperf3 releases add them, and 3.12
    // consumers ignore keys they do not read.
    bidir: u8,
    fqrate: u64,
    interval: Value,
}

#[derive(Serialize)]
struct Interval {
    streams: Vec<IntervalStream>,
    sum: IntervalSum,
    #[serde(skip_serializing_if = "Option::is_none")]
    sum_bidir_reverse: Option<IntervalSum>,
}

#[derive(Serialize)]
struct IntervalStream {
    socket: u32,
    start: f64,
    end: f64,
    seconds: f64,
    bytes: u64,
    bits_per_second: f64,
    #[serde(flatten)]
    tcp: Option<TcpIntervalFields>,
    #[serde(flatten)]
    udp: Option<UdpIntervalFields>,
    omitted: bool,
    sender: bool,
}

/// A TCP sender's `TCP_INFO` in an interval. iperf3 3.12 on Linux also
/// writes `snd_wnd` and `pmtu`; xferlab samples neither, and a made-up 0
/// would read as a closed window, so they are left out. The whole-test
/// interval written for `-i 0` has only `retransmits`.
#[derive(Serialize)]
struct TcpIntervalFields {
    retransmits: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    snd_cwnd: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rtt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rttvar: Option<u32>,
}

/// A UDP sender writes `packets` only; a receiver all four.
#[derive(Serialize, Default)]
struct UdpIntervalFields {
    #[serde(skip_serializing_if = "Option::is_none")]
    jitter_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lost_packets: Option<u64>,
    packets: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    lost_percent: Option<f64>,
}

#[derive(Serialize)]
struct IntervalSum {
    start: f64,
    end: f64,
    seconds: f64,
    bytes: u64,
    bits_per_second: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    retransmits: Option<u64>,
    #[serde(flatten)]
    udp: Option<UdpIntervalFields>,
    omitted: bool,
    sender: bool,
}

#[derive(Serialize)]
struct End {
    streams: Vec<EndStream>,
    /// UDP only.
    #[serde(skip_serializing_if = "Option::is_none")]
    sum: Option<UdpSum>,
    sum_sent: EndSum,
    sum_received: EndSum,
    /// UDP `--bidir` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    sum_bidir_reverse: Option<UdpSum>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sum_sent_bidir_reverse: Option<EndSum>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sum_received_bidir_reverse: Option<EndSum>,
    cpu_utilization_percent: Cpu,
    #[serde(skip_serializing_if = "Option::is_none")]
    sender_tcp_congestion: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    receiver_tcp_congestion: Option<String>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum EndStream {
    Tcp {
        sender: TcpEndSender,
        receiver: TcpEndReceiver,
    },
    Udp {
        udp: UdpEndStream,
    },
}

#[derive(Serialize)]
struct TcpEndSender {
    socket: u32,
    start: f64,
    end: f64,
    seconds: f64,
    bytes: u64,
    bits_per_second: f64,
    retransmits: u64,
    max_snd_cwnd: u64,
    max_snd_wnd: u64,
    max_rtt: u32,
    min_rtt: u32,
    mean_rtt: u32,
    sender: bool,
}

#[derive(Serialize)]
struct TcpEndReceiver {
    socket: u32,
    start: f64,
    end: f64,
    seconds: f64,
    bytes: u64,
    bits_per_second: f64,
    sender: bool,
}

#[derive(Serialize)]
struct UdpEndStream {
    socket: u32,
    start: f64,
    end: f64,
    seconds: f64,
    bytes: u64,
    bits_per_second: f64,
    jitter_ms: f64,
    lost_packets: u64,
    packets: u64,
    lost_percent: f64,
    out_of_order: u64,
    sender: bool,
}

#[derive(Serialize)]
#[serde(untagged)]
enum EndSum {
    Tcp(TcpSum),
    Udp(UdpSum),
}

#[derive(Serialize)]
struct TcpSum {
    start: f64,
    end: f64,
    seconds: f64,
    bytes: u64,
    bits_per_second: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    retransmits: Option<u64>,
    sender: bool,
}

#[derive(Serialize)]
struct UdpSum {
    start: f64,
    end: f64,
    seconds: f64,
    bytes: u64,
    bits_per_second: f64,
    jitter_ms: f64,
    lost_packets: u64,
    packets: u64,
    lost_percent: f64,
    sender: bool,
}

#[derive(Serialize)]
struct Cpu {
    host_total: f64,
    host_user: f64,
    host_system: f64,
    remote_total: f64,
    remote_user: f64,
    remote_system: f64,
}

// ---------------------------------------------------------------------------
// Building it.

/// Synthetic socket id of a flow: iperf3's first data socket is fd 5.
fn socket_id(flow: u32) -> u32 {
    5 + flow
}

/// A finite number, else 0 (serde_json writes NaN as null).
fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

/// Whole seconds as an integer, as iperf3 writes `omit` and `duration`;
/// xferlab also takes fractions, which stay fractions.
fn seconds_value(x: f64) -> Value {
    if x.fract() == 0.0 && (0.0..9e15).contains(&x) {
        Value::from(x as u64)
    } else {
        Value::from(finite(x))
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole > 0 {
        100.0 * part as f64 / whole as f64
    } else {
        0.0
    }
}

/// `ip:port` / `[v6]:port` into iperf3's host and port (IPv4-mapped IPv6
/// shown as IPv4, as iperf3 does); names are kept as they are.
fn host_port(addr: &str) -> (String, u16) {
    if let Ok(sa) = addr.parse::<SocketAddr>() {
        return (sa.ip().to_canonical().to_string(), sa.port());
    }
    match addr.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() => (
            h.trim_start_matches('[').trim_end_matches(']').to_string(),
            p.parse().unwrap_or(0),
        ),
        _ => (addr.to_string(), 0),
    }
}

/// RFC 3339 `started_at` as iperf3's RFC 1123 `time` (an HTTP date) and
/// epoch `timesecs`.
fn timestamp(rfc3339: &str) -> Option<Timestamp> {
    let t = humantime::parse_rfc3339_weak(rfc3339).ok()?;
    Some(Timestamp {
        time: httpdate::fmt_http_date(t),
        timesecs: t.duration_since(UNIX_EPOCH).ok()?.as_secs(),
    })
}

/// `uname -a`-like: xferlab keeps `uname -sr` and the host name, so this
/// is `Linux <host> <release>` (no build string, no machine).
fn system_info(side: &SideReport) -> String {
    let h = &side.host;
    match h.kernel.split_once(' ') {
        Some((sys, release)) => format!("{sys} {} {release}", h.hostname),
        None if h.kernel.is_empty() => h.hostname.clone(),
        None => format!("{} {}", h.kernel, h.hostname),
    }
}

/// Whose report a direction's sender and receiver figures come from.
struct Ends<'a> {
    sender: Option<&'a SideReport>,
    receiver: Option<&'a SideReport>,
}

fn ends(r: &TestResult, dir: FlowDirection) -> Ends<'_> {
    match dir {
        FlowDirection::C2s => Ends {
            sender: Some(&r.client),
            receiver: r.server.as_ref(),
        },
        FlowDirection::S2c => Ends {
            sender: r.server.as_ref(),
            receiver: Some(&r.client),
        },
    }
}

fn find(side: Option<&SideReport>, id: u32, role: FlowRole) -> Option<&FlowReport> {
    side?.flows.iter().find(|f| f.id == id && f.role == role)
}

fn flows_of(
    side: Option<&SideReport>,
    dir: FlowDirection,
    role: FlowRole,
) -> impl Iterator<Item = &FlowReport> {
    side.into_iter()
        .flat_map(|s| s.flows.iter())
        .filter(move |f| f.direction == dir && f.role == role)
}

/// Does the client send in this direction (iperf3's `sender` flag)?
fn client_sends(dir: FlowDirection) -> bool {
    dir == FlowDirection::C2s
}

/// iperf3's `packets` as a UDP receiver counts them: the sequence numbers
/// it accounted for, received plus lost.
fn receiver_packets(u: &UdpSample) -> u64 {
    u.packets + u.lost
}

/// One interval's times as iperf3 writes them: after the warm-up they
/// count from its end (xferlab's `total.start_s`), inside it from the start.
fn interval_times(f: &FlowReport, iv: &FlowInterval) -> (f64, f64) {
    let origin = if iv.omitted { 0.0 } else { f.total.start_s };
    (
        finite((iv.start_s - origin).max(0.0)),
        finite((iv.end_s - origin).max(0.0)),
    )
}

/// One flow's piece of one interval row.
struct Piece<'a> {
    flow: &'a FlowReport,
    iv: Cow<'a, FlowInterval>,
    /// Built from the flow's total (`-i 0`): no gauges to show.
    whole: bool,
}

fn interval_stream(r: &TestResult, p: &Piece<'_>) -> IntervalStream {
    let (f, iv) = (p.flow, p.iv.as_ref());
    let (start, end) = interval_times(f, iv);
    let sender = f.role == FlowRole::Sender;
    let tcp = match (sender, iv.tcp) {
        (true, Some(t)) if r.spec.transport.model().tcp_info() => Some(TcpIntervalFields {
            retransmits: t.retransmits,
            snd_cwnd: (!p.whole).then_some(t.cwnd_bytes),
            rtt: (!p.whole).then_some(t.rtt_us),
            rttvar: (!p.whole).then_some(t.rttvar_us),
        }),
        _ => None,
    };
    let udp = (r.spec.transport == Transport::Udp).then(|| {
        let u = iv.udp.unwrap_or_default();
        udp_interval_fields(sender, [&u])
    });
    IntervalStream {
        socket: socket_id(f.id),
        start,
        end,
        seconds: end - start,
        bytes: iv.bytes,
        bits_per_second: finite(iv.bits_per_second),
        tcp,
        udp,
        omitted: iv.omitted,
        sender,
    }
}

/// UDP figures of one or more flows' intervals: a sender's packets, or a
/// receiver's packets, loss and mean jitter.
fn udp_interval_fields<'a>(
    sender: bool,
    samples: impl IntoIterator<Item = &'a UdpSample>,
) -> UdpIntervalFields {
    let samples: Vec<&UdpSample> = samples.into_iter().collect();
    if sender {
        return UdpIntervalFields {
            packets: samples.iter().map(|u| u.packets).sum(),
            ..UdpIntervalFields::default()
        };
    }
    let packets: u64 = samples.iter().map(|u| receiver_packets(u)).sum();
    let lost: u64 = samples.iter().map(|u| u.lost).sum();
    UdpIntervalFields {
        jitter_ms: Some(mean(samples.iter().map(|u| u.jitter_us / 1e3))),
        lost_packets: Some(lost),
        packets,
        lost_percent: Some(percent(lost, packets)),
    }
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = xs.fold((0.0, 0u32), |(s, n), x| (s + x, n + 1));
    if n > 0 {
        finite(sum / f64::from(n))
    } else {
        0.0
    }
}

/// The client's flows of one direction summed over one interval row, like
/// iperf3's `sum` / `sum_bidir_reverse`.
fn interval_sum(r: &TestResult, row: &[Piece<'_>], dir: FlowDirection) -> IntervalSum {
    let members: Vec<(&FlowReport, &FlowInterval)> = row
        .iter()
        .filter(|p| p.flow.direction == dir)
        .map(|p| (p.flow, p.iv.as_ref()))
        .collect();
    let sender = client_sends(dir);
    let (mut start, mut end) = (f64::INFINITY, 0f64);
    for (f, iv) in &members {
        let (s, e) = interval_times(f, iv);
        start = start.min(s);
        end = end.max(e);
    }
    if members.is_empty() {
        start = 0.0;
    }
    let bytes: u64 = members.iter().map(|(_, iv)| iv.bytes).sum();
    let seconds = (end - start).max(0.0);
    let retransmits = (r.spec.transport.model().tcp_info() && sender).then(|| {
        members
            .iter()
            .filter_map(|(_, iv)| iv.tcp)
            .map(|t| t.retransmits)
            .sum()
    });
    let udp = (r.spec.transport == Transport::Udp).then(|| {
        let samples: Vec<UdpSample> = members
            .iter()
            .map(|(_, iv)| iv.udp.unwrap_or_default())
            .collect();
        udp_interval_fields(sender, &samples)
    });
    IntervalSum {
        start,
        end,
        seconds,
        bytes,
        bits_per_second: finite(Throughput::new(bytes, seconds).bits_per_second),
        retransmits,
        udp,
        omitted: members.iter().any(|(_, iv)| iv.omitted),
        sender,
    }
}

/// The directions of the test as iperf3 orders them: the main one (the
/// one `-R` selects), then with `--bidir` the reverse one.
fn directions(r: &TestResult) -> (FlowDirection, Option<FlowDirection>) {
    match r.spec.direction {
        Direction::Forward => (FlowDirection::C2s, None),
        Direction::Reverse => (FlowDirection::S2c, None),
        Direction::Bidir => (FlowDirection::C2s, Some(FlowDirection::S2c)),
    }
}

fn intervals(r: &TestResult) -> Vec<Interval> {
    let mut flows: Vec<&FlowReport> = r.client.flows.iter().collect();
    flows.sort_by_key(|f| f.id);
    let (main, reverse) = directions(r);
    let n = flows.iter().map(|f| f.intervals.len()).max().unwrap_or(0);
    let rows: Vec<Vec<Piece<'_>>> = if n > 0 {
        (0..n)
            .map(|i| {
                flows
                    .iter()
                    .filter_map(|f| {
                        f.intervals.get(i).map(|iv| Piece {
                            flow: f,
                            iv: Cow::Borrowed(iv),
                            whole: false,
                        })
                    })
                    .collect()
            })
            .collect()
    } else if flows.is_empty() {
        Vec::new()
    } else {
        // `-i 0`: iperf3 still writes one interval over the whole test.
        vec![flows
            .iter()
            .map(|f| Piece {
                flow: f,
                iv: Cow::Owned(whole_interval(f)),
                whole: true,
            })
            .collect()]
    };
    rows.iter()
        .map(|row| Interval {
            streams: row.iter().map(|p| interval_stream(r, p)).collect(),
            sum: interval_sum(r, row, main),
            sum_bidir_reverse: reverse.map(|d| interval_sum(r, row, d)),
        })
        .collect()
}

/// A flow's measured window as one interval.
fn whole_interval(f: &FlowReport) -> FlowInterval {
    let t = &f.total;
    FlowInterval {
        start_s: t.start_s,
        end_s: t.end_s,
        omitted: false,
        bytes: t.bytes,
        bits_per_second: t.bits_per_second,
        tcp: t.tcp.map(|tcp| TcpSample {
            retransmits: tcp.retransmits,
            ..TcpSample::default()
        }),
        udp: t.udp.map(|u| u.window),
        transport: t.transport.clone(),
    }
}

/// A flow's measured window as iperf3's end times: from 0 to its length.
fn window(f: Option<&FlowReport>) -> (f64, u64, f64) {
    match f {
        Some(f) => (
            finite((f.total.end_s - f.total.start_s).max(0.0)),
            f.total.bytes,
            finite(f.total.bits_per_second),
        ),
        None => (0.0, 0, 0.0),
    }
}

fn tcp_end_stream(r: &TestResult, id: u32, dir: FlowDirection) -> EndStream {
    let e = ends(r, dir);
    let snd = find(e.sender, id, FlowRole::Sender);
    let rcv = find(e.receiver, id, FlowRole::Receiver);
    let sender = client_sends(dir);
    let (s_secs, s_bytes, s_bps) = window(snd);
    let (r_secs, r_bytes, r_bps) = window(rcv);
    let totals = snd.and_then(|f| f.total.tcp).unwrap_or_default();
    let max_snd_cwnd = snd
        .map(|f| {
            f.intervals
                .iter()
                .filter(|iv| !iv.omitted)
                .filter_map(|iv| iv.tcp)
                .map(|t| t.cwnd_bytes)
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    EndStream::Tcp {
        sender: TcpEndSender {
            socket: socket_id(id),
            start: 0.0,
            end: s_secs,
            seconds: s_secs,
            bytes: s_bytes,
            bits_per_second: s_bps,
            retransmits: totals.retransmits,
            max_snd_cwnd,
            max_snd_wnd: 0,
            max_rtt: totals.rtt_max_us,
            min_rtt: totals.rtt_min_us,
            mean_rtt: totals.rtt_mean_us,
            sender,
        },
        receiver: TcpEndReceiver {
            socket: socket_id(id),
            start: 0.0,
            end: r_secs,
            seconds: r_secs,
            bytes: r_bytes,
            bits_per_second: r_bps,
            sender,
        },
    }
}

/// A UDP flow's totals: iperf3 writes one object combining the sender's
/// bytes, rate and datagram count with the receiver's loss and jitter.
fn udp_end_stream(r: &TestResult, id: u32, dir: FlowDirection) -> EndStream {
    let e = ends(r, dir);
    let snd = find(e.sender, id, FlowRole::Sender);
    let rcv = find(e.receiver, id, FlowRole::Receiver);
    let rcv_udp = rcv.and_then(|f| f.total.udp).map(|u| u.window);
    // Without the sender's report, its figures are the receiver's.
    let (secs, bytes, bps) = window(snd.or(rcv));
    let packets = match (snd.and_then(|f| f.total.udp), rcv_udp) {
        (Some(s), _) => s.window.packets,
        (None, Some(u)) => receiver_packets(&u),
        (None, None) => 0,
    };
    let u = rcv_udp.unwrap_or_default();
    EndStream::Udp {
        udp: UdpEndStream {
            socket: socket_id(id),
            start: 0.0,
            end: secs,
            seconds: secs,
            bytes,
            bits_per_second: bps,
            jitter_ms: finite(u.jitter_us / 1e3),
            lost_packets: u.lost,
            packets,
            lost_percent: percent(u.lost, packets),
            out_of_order: u.out_of_order,
            sender: client_sends(dir),
        },
    }
}

/// One direction's totals, both ends: what `end.sum*` are made of.
struct DirTotals {
    sent: Throughput,
    received: Throughput,
    retransmits: Option<u64>,
    /// UDP: datagrams sent in the measured window.
    sent_packets: u64,
    /// UDP: the receivers' figures over the measured window.
    received_packets: u64,
    lost: u64,
    jitter_ms: f64,
}

fn dir_totals(r: &TestResult, dir: FlowDirection) -> DirTotals {
    let summary: Option<&DirectionSummary> =
        r.summary.directions.iter().find(|d| d.direction == dir);
    let e = ends(r, dir);
    let received: Vec<UdpSample> = flows_of(e.receiver, dir, FlowRole::Receiver)
        .filter_map(|f| f.total.udp)
        .map(|u| u.window)
        .collect();
    let mut sent_packets: u64 = flows_of(e.sender, dir, FlowRole::Sender)
        .filter_map(|f| f.total.udp)
        .map(|u| u.window.packets)
        .sum();
    let received_packets: u64 = received.iter().map(receiver_packets).sum();
    if e.sender.is_none() {
        sent_packets = received_packets;
    }
    DirTotals {
        sent: summary.map(|s| s.sender).unwrap_or_default(),
        received: summary.and_then(|s| s.receiver).unwrap_or_default(),
        retransmits: summary.and_then(|s| s.retransmits),
        sent_packets,
        received_packets,
        lost: received.iter().map(|u| u.lost).sum(),
        jitter_ms: mean(received.iter().map(|u| u.jitter_us / 1e3)),
    }
}

fn tcp_sum(t: &Throughput, retransmits: Option<u64>, sender: bool) -> EndSum {
    let seconds = finite(t.seconds);
    EndSum::Tcp(TcpSum {
        start: 0.0,
        end: seconds,
        seconds,
        bytes: t.bytes,
        bits_per_second: finite(t.bits_per_second),
        retransmits,
        sender,
    })
}

/// iperf3 3.12's UDP `sum`: the sender's bytes and rate over the
/// receiver's time span, with the receivers' loss and mean jitter.
fn udp_sum(t: &DirTotals, sender: bool) -> UdpSum {
    let seconds = finite(if t.received.seconds > 0.0 {
        t.received.seconds
    } else {
        t.sent.seconds
    });
    UdpSum {
        start: 0.0,
        end: seconds,
        seconds,
        bytes: t.sent.bytes,
        bits_per_second: finite(t.sent.bits_per_second),
        jitter_ms: t.jitter_ms,
        lost_packets: t.lost,
        packets: t.sent_packets,
        lost_percent: percent(t.lost, t.sent_packets),
        sender,
    }
}

/// The `sum_sent` / `sum_received` pair of one direction.
fn end_sums(r: &TestResult, t: &DirTotals, dir: FlowDirection) -> (EndSum, EndSum) {
    if r.spec.transport == Transport::Udp {
        // 3.12 marks these by what they are, whichever way the test ran.
        let sent = finite(t.sent.seconds);
        let received = finite(t.received.seconds);
        (
            EndSum::Udp(UdpSum {
                start: 0.0,
                end: sent,
                seconds: sent,
                bytes: t.sent.bytes,
                bits_per_second: finite(t.sent.bits_per_second),
                jitter_ms: 0.0,
                lost_packets: 0,
                packets: t.sent_packets,
                lost_percent: 0.0,
                sender: true,
            }),
            EndSum::Udp(UdpSum {
                start: 0.0,
                end: received,
                seconds: received,
                bytes: t.received.bytes,
                bits_per_second: finite(t.received.bits_per_second),
                jitter_ms: t.jitter_ms,
                lost_packets: t.lost,
                packets: t.received_packets,
                lost_percent: percent(t.lost, t.sent_packets),
                sender: false,
            }),
        )
    } else {
        // TCP: both carry the client's role in the direction.
        let sender = client_sends(dir);
        (
            tcp_sum(&t.sent, t.retransmits, sender),
            tcp_sum(&t.received, None, sender),
        )
    }
}

fn cpu(host: &CpuUsage, remote: Option<&CpuUsage>) -> Cpu {
    let split = |c: &CpuUsage| {
        let pct = |s: f64| {
            if c.wall_s > 0.0 {
                finite(100.0 * s / c.wall_s)
            } else {
                0.0
            }
        };
        (finite(c.percent), pct(c.user_s), pct(c.system_s))
    };
    let (host_total, host_user, host_system) = split(host);
    let (remote_total, remote_user, remote_system) = remote.map(split).unwrap_or_default();
    Cpu {
        host_total,
        host_user,
        host_system,
        remote_total,
        remote_user,
        remote_system,
    }
}

fn end(r: &TestResult) -> End {
    let udp = r.spec.transport == Transport::Udp;
    let (main, reverse) = directions(r);
    // Every flow either side reported, in id order.
    let mut ids: Vec<(u32, FlowDirection)> = r
        .client
        .flows
        .iter()
        .chain(r.server.iter().flat_map(|s| s.flows.iter()))
        .map(|f| (f.id, f.direction))
        .collect();
    ids.sort_by_key(|&(id, _)| id);
    ids.dedup_by_key(|&mut (id, _)| id);
    let streams = ids
        .iter()
        .map(|&(id, dir)| {
            if udp {
                udp_end_stream(r, id, dir)
            } else {
                tcp_end_stream(r, id, dir)
            }
        })
        .collect();

    let main_t = dir_totals(r, main);
    let (sum_sent, sum_received) = end_sums(r, &main_t, main);
    let rev_t = reverse.map(|d| (d, dir_totals(r, d)));
    let rev_sums = rev_t.as_ref().map(|(d, t)| end_sums(r, t, *d));
    let (sum_sent_bidir_reverse, sum_received_bidir_reverse) = match rev_sums {
        Some((s, rc)) => (Some(s), Some(rc)),
        None => (None, None),
    };

    // Congestion control of the main direction's sending and receiving
    // sockets, as each side read it back.
    let e = ends(r, main);
    let cc = |side, role| {
        flows_of(side, main, role)
            .find_map(|f| f.socket.congestion.clone())
            .filter(|_| !udp)
    };

    End {
        streams,
        sum: udp.then(|| udp_sum(&main_t, client_sends(main))),
        sum_sent,
        sum_received,
        sum_bidir_reverse: if udp {
            rev_t.as_ref().map(|(_, t)| udp_sum(t, false))
        } else {
            None
        },
        sum_sent_bidir_reverse,
        sum_received_bidir_reverse,
        cpu_utilization_percent: cpu(&r.client.cpu, r.server.as_ref().map(|s| &s.cpu)),
        sender_tcp_congestion: cc(e.sender, FlowRole::Sender),
        receiver_tcp_congestion: cc(e.receiver, FlowRole::Receiver),
    }
}

fn start(r: &TestResult) -> Start {
    let spec = &r.spec;
    let knobs = &spec.knobs;
    let tcp = spec.transport.model().tcp_info();
    let mut flows: Vec<&FlowReport> = r.client.flows.iter().collect();
    flows.sort_by_key(|f| f.id);
    let connected = flows
        .iter()
        .map(|f| {
            let (local_host, local_port) = host_port(&f.local);
            let (remote_host, remote_port) = host_port(&f.remote);
            Connected {
                socket: socket_id(f.id),
                local_host,
                local_port,
                remote_host,
                remote_port,
            }
        })
        .collect();
    let (host, port) = host_port(&r.server_address);
    // iperf3 3.12 repeats the buffer keys once per stream; a JSON parser
    // keeps the last, so this takes the client's last flow.
    let last = flows.last().map(|f| &f.socket);
    let target_bitrate = if tcp { 0 } else { knobs.rate.unwrap_or(0) };
    let (duration, bytes) = match spec.limit {
        Limit::Duration { seconds } => (seconds_value(seconds), 0),
        Limit::Bytes { bytes } => (Value::from(0), bytes),
        // iperf3 has no open tests; 0 s and 0 bytes is what it sends for
        // its own default, the nearest it can say.
        Limit::Open => (Value::from(0), 0),
    };
    Start {
        connected,
        version: format!("{} {} (iperf3-shaped)", r.software.name, r.software.version),
        system_info: system_info(&r.client),
        timestamp: timestamp(&r.started_at),
        connecting_to: ConnectingTo { host, port },
        cookie: r.id.clone(),
        tcp_mss: knobs.mss.filter(|_| tcp),
        tcp_mss_default: if tcp && knobs.mss.is_none() {
            flows.iter().find_map(|f| f.socket.mss)
        } else {
            None
        },
        target_bitrate,
        sock_bufsize: knobs.buffer.unwrap_or(0),
        sndbuf_actual: last.map(|s| s.sndbuf).unwrap_or(0),
        rcvbuf_actual: last.map(|s| s.rcvbuf).unwrap_or(0),
        test_start: TestStart {
            protocol: spec.transport.label(),
            num_streams: spec.parallel,
            blksize: knobs.size,
            omit: seconds_value(spec.omit_s),
            duration,
            bytes,
            blocks: 0,
            reverse: u8::from(spec.direction == Direction::Reverse),
            tos: knobs.tos.unwrap_or(0),
            target_bitrate,
            bidir: u8::from(spec.direction == Direction::Bidir),
            fqrate: knobs.max_pacing_rate.map(|b| b * 8).unwrap_or(0),
            interval: seconds_value(spec.interval_s),
        },
    }
}

/// `r` as `iperf3 -J` would have written it.
pub fn document(r: &TestResult) -> Document {
    Document {
        start: start(r),
        intervals: intervals(r),
        end: end(r),
        extra_data: r.spec.title.clone(),
        error: (!r.errors.is_empty()).then(|| r.errors.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::result::{Status, Summary};
    use crate::sample::{bidir_result, udp_result, DATAGRAM, TAIL_LOSS};

    fn doc(r: &TestResult) -> Value {
        serde_json::to_value(document(r)).expect("a JSON document")
    }

    fn f(v: &Value) -> f64 {
        v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
    }

    fn u(v: &Value) -> u64 {
        v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    fn keys(v: &Value) -> Vec<&str> {
        v.as_object()
            .unwrap_or_else(|| panic!("not an object: {v}"))
            .keys()
            .map(String::as_str)
            .collect()
    }

    fn has_keys(v: &Value, want: &[&str]) {
        for k in want {
            assert!(v.get(k).is_some(), "missing {k} in {v}");
        }
    }

    #[test]
    fn top_level_and_start_have_iperf3_keys() {
        let r = bidir_result();
        let d = doc(&r);
        let mut top = keys(&d);
        top.sort();
        assert_eq!(top, ["end", "extra_data", "intervals", "start"]);
        assert_eq!(d["extra_data"], "loopback bidir");
        let s = &d["start"];
        has_keys(
            s,
            &[
                "connected",
                "version",
                "system_info",
                "timestamp",
                "connecting_to",
                "cookie",
                "target_bitrate",
                "sock_bufsize",
                "sndbuf_actual",
                "rcvbuf_actual",
                "test_start",
            ],
        );
        assert_eq!(s["version"], "xferlab 0.1.0 (iperf3-shaped)");
        assert_eq!(s["system_info"], "Linux lab1 6.1.0-18-amd64");
        assert_eq!(
            s["timestamp"],
            json!({"time": "Wed, 01 May 2024 12:00:00 GMT", "timesecs": 1_714_564_800u64})
        );
        assert_eq!(
            s["connecting_to"],
            json!({"host": "127.0.0.1", "port": 5290})
        );
        assert_eq!(s["cookie"], r.id.as_str());
        assert!(s.get("tcp_mss_default").is_none(), "sample knows no MSS");
        assert_eq!(
            (&s["sndbuf_actual"], &s["rcvbuf_actual"], &s["sock_bufsize"]),
            (&json!(4_194_304), &json!(6_291_456), &json!(0))
        );
        let c = s["connected"].as_array().unwrap();
        assert_eq!(c.len(), 4);
        assert_eq!(
            c[3],
            json!({"socket": 8, "local_host": "127.0.0.1", "local_port": 41237,
                   "remote_host": "127.0.0.1", "remote_port": 5290})
        );
        assert_eq!(
            s["test_start"],
            json!({"protocol": "TCP", "num_streams": 2, "blksize": 128u64 << 10, "omit": 1,
                   "duration": 3, "bytes": 0, "blocks": 0, "reverse": 0, "tos": 0,
                   "target_bitrate": 0, "bidir": 1, "fqrate": 0, "interval": 1})
        );
    }

    #[test]
    fn tcp_bidir_intervals_come_from_the_client_with_a_reverse_sum() {
        let r = bidir_result();
        let d = doc(&r);
        let ivs = d["intervals"].as_array().unwrap();
        assert_eq!(ivs.len(), 4);
        // Warm-up: raw times, omitted.
        let w = &ivs[0];
        assert_eq!(w["sum"]["omitted"], true);
        assert_eq!((f(&w["sum"]["start"]), f(&w["sum"]["end"])), (0.0, 1.0));
        // After the warm-up, times count from its end, as in iperf3.
        let iv = &ivs[1];
        assert_eq!(iv["sum"]["omitted"], false);
        assert_eq!((f(&iv["sum"]["start"]), f(&iv["sum"]["end"])), (0.0, 1.0));
        let streams = iv["streams"].as_array().unwrap();
        assert_eq!(streams.len(), 4);
        let s0 = &streams[0];
        has_keys(
            s0,
            &[
                "socket",
                "start",
                "end",
                "seconds",
                "bytes",
                "bits_per_second",
                "retransmits",
                "snd_cwnd",
                "rtt",
                "rttvar",
                "omitted",
                "sender",
            ],
        );
        let flow0 = &r.client.flows[0];
        let t = flow0.intervals[1].tcp.unwrap();
        assert_eq!(u(&s0["bytes"]), flow0.intervals[1].bytes);
        assert_eq!(
            (u(&s0["retransmits"]), u(&s0["snd_cwnd"]), u(&s0["rtt"])),
            (t.retransmits, t.cwnd_bytes, u64::from(t.rtt_us))
        );
        assert_eq!(s0["sender"], true);
        // Receiving streams carry no TCP figures.
        assert_eq!(streams[2]["sender"], false);
        assert!(streams[2].get("rtt").is_none());
        assert!(streams[2].get("retransmits").is_none());

        // sum: the client's sending flows; sum_bidir_reverse: its receiving ones.
        let want: u64 = r.client.flows[..2]
            .iter()
            .map(|f| f.intervals[1].bytes)
            .sum();
        assert_eq!(u(&iv["sum"]["bytes"]), want);
        assert!(close(f(&iv["sum"]["bits_per_second"]), want as f64 * 8.0));
        assert_eq!(u(&iv["sum"]["retransmits"]), 2);
        assert_eq!(iv["sum"]["sender"], true);
        let rev = &iv["sum_bidir_reverse"];
        let want: u64 = r.client.flows[2..]
            .iter()
            .map(|f| f.intervals[1].bytes)
            .sum();
        assert_eq!(u(&rev["bytes"]), want);
        assert_eq!(rev["sender"], false);
        assert!(rev.get("retransmits").is_none());
        // The client's own sums agree.
        let client_sum = r
            .client
            .sums
            .iter()
            .filter(|s| s.direction == FlowDirection::C2s)
            .nth(1)
            .unwrap();
        assert_eq!(u(&iv["sum"]["bytes"]), client_sum.bytes);
        assert!(close(
            f(&iv["sum"]["bits_per_second"]),
            client_sum.bits_per_second
        ));
    }

    #[test]
    fn tcp_end_takes_sender_and_receiver_from_their_sides() {
        let r = bidir_result();
        let d = doc(&r);
        let e = &d["end"];
        let mut k = keys(e);
        k.sort();
        assert_eq!(
            k,
            [
                "cpu_utilization_percent",
                "receiver_tcp_congestion",
                "sender_tcp_congestion",
                "streams",
                "sum_received",
                "sum_received_bidir_reverse",
                "sum_sent",
                "sum_sent_bidir_reverse",
            ]
        );
        let server = r.server.as_ref().unwrap();
        let streams = e["streams"].as_array().unwrap();
        assert_eq!(streams.len(), 4);
        // Flow 0 (c2s): client sends, server receives.
        let s = &streams[0];
        let (snd, rcv) = (&r.client.flows[0], &server.flows[0]);
        assert_eq!(u(&s["sender"]["bytes"]), snd.total.bytes);
        assert_eq!(u(&s["receiver"]["bytes"]), rcv.total.bytes);
        assert_eq!(u(&s["sender"]["retransmits"]), 6);
        assert_eq!(
            (
                u(&s["sender"]["max_rtt"]),
                u(&s["sender"]["min_rtt"]),
                u(&s["sender"]["mean_rtt"])
            ),
            (55, 45, 50)
        );
        assert_eq!(u(&s["sender"]["max_snd_cwnd"]), 3_276_800);
        assert_eq!(u(&s["sender"]["max_snd_wnd"]), 0);
        assert_eq!(f(&s["sender"]["start"]), 0.0);
        assert_eq!(f(&s["sender"]["seconds"]), 3.0);
        assert!(close(
            f(&s["sender"]["bits_per_second"]),
            snd.total.bits_per_second
        ));
        // Both blocks carry the stream's flag (client sends), as in 3.12.
        assert_eq!(
            (&s["sender"]["sender"], &s["receiver"]["sender"]),
            (&json!(true), &json!(true))
        );
        // Flow 2 (s2c): the server sends, so its figures are the sender's.
        let s = &streams[2];
        let (snd, rcv) = (&server.flows[2], &r.client.flows[2]);
        assert_eq!(snd.role, FlowRole::Sender);
        assert_eq!(u(&s["sender"]["bytes"]), snd.total.bytes);
        assert_eq!(u(&s["receiver"]["bytes"]), rcv.total.bytes);
        assert_eq!(s["sender"]["sender"], false);
        assert_eq!(u(&s["sender"]["socket"]), 7);

        // Sums are the summary's, each from its side.
        let fwd = &r.summary.directions[0];
        assert_eq!(u(&e["sum_sent"]["bytes"]), fwd.sender.bytes);
        assert!(close(
            f(&e["sum_sent"]["bits_per_second"]),
            fwd.sender.bits_per_second
        ));
        assert_eq!(u(&e["sum_sent"]["retransmits"]), fwd.retransmits.unwrap());
        let recv = fwd.receiver.unwrap();
        assert_eq!(u(&e["sum_received"]["bytes"]), recv.bytes);
        assert!(close(
            f(&e["sum_received"]["bits_per_second"]),
            recv.bits_per_second
        ));
        assert_eq!(f(&e["sum_received"]["end"]), recv.seconds);
        assert!(e["sum_received"].get("retransmits").is_none());
        assert_eq!(e["sum_sent"]["sender"], true);
        let rev = &r.summary.directions[1];
        assert_eq!(u(&e["sum_sent_bidir_reverse"]["bytes"]), rev.sender.bytes);
        assert_eq!(
            u(&e["sum_received_bidir_reverse"]["bytes"]),
            rev.receiver.unwrap().bytes
        );
        assert_eq!(e["sum_sent_bidir_reverse"]["sender"], false);

        let cpu = &e["cpu_utilization_percent"];
        assert!(close(f(&cpu["host_total"]), r.client.cpu.percent));
        assert!(close(f(&cpu["host_system"]), 100.0 * 4.2 / 4.0));
        assert!(close(f(&cpu["remote_total"]), server.cpu.percent));
        assert!(close(f(&cpu["remote_user"]), 100.0 * 0.4 / 4.0));
        assert_eq!(e["sender_tcp_congestion"], "cubic");
        assert_eq!(e["receiver_tcp_congestion"], "cubic");
    }

    #[test]
    fn reverse_tcp_marks_the_client_as_receiver() {
        let mut r = bidir_result();
        r.spec.direction = Direction::Reverse;
        // Keep only the s2c flows on both sides.
        r.client.flows.retain(|f| f.direction == FlowDirection::S2c);
        let server = r.server.as_mut().unwrap();
        server.flows.retain(|f| f.direction == FlowDirection::S2c);
        r.summary = Summary::from_sides(&r.client, r.server.as_ref());
        let d = doc(&r);
        assert_eq!(d["start"]["test_start"]["reverse"], 1);
        assert_eq!(d["start"]["test_start"]["bidir"], 0);
        let iv = &d["intervals"][1];
        assert!(iv.get("sum_bidir_reverse").is_none());
        assert_eq!(iv["sum"]["sender"], false);
        assert!(iv["sum"].get("retransmits").is_none());
        let e = &d["end"];
        assert!(e.get("sum_sent_bidir_reverse").is_none());
        assert_eq!(e["sum_sent"]["sender"], false);
        assert_eq!(e["sum_received"]["sender"], false);
        assert_eq!(e["streams"].as_array().unwrap().len(), 2);
        // The server's sending figures, which iperf3 3.12 leaves at 0.
        assert_eq!(u(&e["streams"][0]["sender"]["max_rtt"]), 55);
        assert_eq!(u(&e["streams"][0]["sender"]["retransmits"]), 6);
        let s = &r.summary.directions[0];
        assert_eq!(u(&e["sum_sent"]["bytes"]), s.sender.bytes);
        assert_eq!(u(&e["sum_received"]["bytes"]), s.receiver.unwrap().bytes);
    }

    #[test]
    fn udp_end_has_sum_loss_and_jitter_like_3_12() {
        let r = udp_result();
        let d = doc(&r);
        let s = &d["start"];
        assert_eq!(s["test_start"]["protocol"], "UDP");
        assert_eq!(s["test_start"]["target_bitrate"], 100_000_000);
        assert_eq!(s["target_bitrate"], 100_000_000);
        assert_eq!(s["test_start"]["blksize"], DATAGRAM);
        assert!(s.get("tcp_mss_default").is_none());

        let e = &d["end"];
        let mut k = keys(e);
        k.sort();
        assert_eq!(
            k,
            [
                "cpu_utilization_percent",
                "streams",
                "sum",
                "sum_received",
                "sum_sent"
            ]
        );
        let server = r.server.as_ref().unwrap();
        let window = |f: &FlowReport| f.total.udp.unwrap().window;
        let lost: u64 = server.flows.iter().map(|f| window(f).lost).sum();
        let sent: u64 = r.client.flows.iter().map(|f| window(f).packets).sum();
        assert_eq!(lost, 15);
        let sum = &e["sum"];
        has_keys(
            sum,
            &[
                "start",
                "end",
                "seconds",
                "bytes",
                "bits_per_second",
                "jitter_ms",
                "lost_packets",
                "packets",
                "lost_percent",
                "sender",
            ],
        );
        assert_eq!(u(&sum["lost_packets"]), lost);
        assert_eq!(u(&sum["packets"]), sent);
        assert!(close(
            f(&sum["lost_percent"]),
            100.0 * lost as f64 / sent as f64
        ));
        // Gap-based like 3.12: the tail loss only the summary sees is not in it.
        let summary = r.summary.directions[0].udp.unwrap();
        assert_eq!(summary.lost, lost + TAIL_LOSS);
        // Mean of the receivers' final jitter, in ms (3.12 averages streams).
        let jitter =
            (window(&server.flows[0]).jitter_us + window(&server.flows[1]).jitter_us) / 2.0 / 1e3;
        assert!(close(f(&sum["jitter_ms"]), jitter));
        assert_eq!(sum["sender"], true);
        let fwd = &r.summary.directions[0];
        assert_eq!(u(&sum["bytes"]), fwd.sender.bytes);
        assert!(close(
            f(&sum["bits_per_second"]),
            fwd.sender.bits_per_second
        ));

        assert_eq!(u(&e["sum_sent"]["bytes"]), fwd.sender.bytes);
        assert_eq!(u(&e["sum_sent"]["packets"]), sent);
        assert_eq!(
            (&e["sum_sent"]["sender"], &e["sum_sent"]["jitter_ms"]),
            (&json!(true), &json!(0.0))
        );
        let rs = &e["sum_received"];
        assert_eq!(u(&rs["bytes"]), fwd.receiver.unwrap().bytes);
        assert_eq!(u(&rs["lost_packets"]), lost);
        assert_eq!(rs["sender"], false);
        let received: u64 = server
            .flows
            .iter()
            .map(|f| window(f).packets + window(f).lost)
            .sum();
        assert_eq!(u(&rs["packets"]), received);

        // Per stream: one `udp` object, sender's count, receiver's loss.
        let st = &e["streams"][1]["udp"];
        assert_eq!(keys(&e["streams"][1]), ["udp"]);
        assert_eq!(u(&st["packets"]), window(&r.client.flows[1]).packets);
        assert_eq!(u(&st["lost_packets"]), 15);
        assert_eq!(u(&st["out_of_order"]), 1);
        assert_eq!(u(&st["socket"]), 6);
        assert!(close(f(&st["jitter_ms"]), 0.011));
        assert!(e.get("sender_tcp_congestion").is_none());
    }

    #[test]
    fn udp_intervals_are_the_client_senders_packets() {
        let r = udp_result();
        let d = doc(&r);
        let iv = &d["intervals"][2];
        let sum = &iv["sum"];
        assert_eq!(u(&sum["packets"]), 2 * 8928);
        assert_eq!(u(&sum["bytes"]), 2 * 8928 * DATAGRAM);
        assert!(close(
            f(&sum["bits_per_second"]),
            (2 * 8928 * DATAGRAM * 8) as f64
        ));
        assert!(sum.get("lost_packets").is_none(), "sender side");
        assert!(sum.get("retransmits").is_none());
        assert_eq!(
            keys(&iv["streams"][0]),
            [
                "bits_per_second",
                "bytes",
                "end",
                "omitted",
                "packets",
                "seconds",
                "sender",
                "socket",
                "start"
            ]
        );
    }

    #[test]
    fn udp_receiver_intervals_carry_loss_like_iperf3() {
        // Reverse UDP: the client receives, so its intervals hold the loss.
        let mut r = udp_result();
        r.spec.direction = Direction::Reverse;
        let server = r.server.take().unwrap();
        let (mut c, mut s) = (r.client.clone(), server);
        std::mem::swap(&mut c.flows, &mut s.flows);
        for f in c.flows.iter_mut().chain(s.flows.iter_mut()) {
            f.direction = FlowDirection::S2c;
            std::mem::swap(&mut f.local, &mut f.remote);
        }
        c.endpoint = crate::result::Endpoint::Client;
        s.endpoint = crate::result::Endpoint::Server;
        c.sums = crate::result::sum_intervals(&c.flows);
        s.sums = crate::result::sum_intervals(&s.flows);
        r.summary = Summary::from_sides(&c, Some(&s));
        r.client = c;
        r.server = Some(s);
        let d = doc(&r);
        let sum = &d["intervals"][1]["sum"];
        // Flow 1 lost 12 in interval 1; packets counts received + lost.
        assert_eq!(u(&sum["lost_packets"]), 12);
        assert_eq!(u(&sum["packets"]), 2 * 8928);
        assert!(close(
            f(&sum["lost_percent"]),
            100.0 * 12.0 / (2.0 * 8928.0)
        ));
        assert!(close(f(&sum["jitter_ms"]), (2.0 + 21.0) / 2.0 / 1e3));
        assert_eq!(sum["sender"], false);
        let st = &d["intervals"][1]["streams"][1];
        assert_eq!(u(&st["lost_packets"]), 12);
        assert!(close(f(&st["jitter_ms"]), 0.021));
        let e = &d["end"];
        assert_eq!(e["sum"]["sender"], false);
        assert_eq!(e["sum_sent"]["sender"], true);
        assert_eq!(e["sum_received"]["sender"], false);
        assert_eq!(u(&e["sum"]["lost_packets"]), 15);
        assert_eq!(e["streams"][0]["udp"]["sender"], false);
    }

    #[test]
    fn missing_server_report_and_errors_give_neutral_values() {
        let mut r = udp_result();
        r.server = None;
        r.summary = Summary::from_sides(&r.client, None);
        r.status = Status::Partial;
        r.errors.push("server report missing".into());
        let d = doc(&r);
        assert_eq!(d["error"], "server report missing");
        let e = &d["end"];
        assert_eq!(u(&e["sum_received"]["bytes"]), 0);
        assert_eq!(u(&e["sum"]["lost_packets"]), 0);
        assert_eq!(f(&e["cpu_utilization_percent"]["remote_total"]), 0.0);
        assert!(u(&e["sum_sent"]["bytes"]) > 0);

        let mut r = bidir_result();
        r.server = None;
        r.summary = Summary::from_sides(&r.client, None);
        r.spec.limit = Limit::Bytes { bytes: 1 << 30 };
        r.spec.omit_s = 0.5;
        r.spec.knobs.mss = Some(1400);
        r.spec.knobs.buffer = Some(1 << 20);
        r.spec.knobs.tos = Some(0x10);
        r.spec.knobs.max_pacing_rate = Some(1_000_000);
        let d = doc(&r);
        let ts = &d["start"]["test_start"];
        assert_eq!(
            (&ts["duration"], &ts["bytes"], &ts["omit"], &ts["tos"]),
            (&json!(0), &json!(1u64 << 30), &json!(0.5), &json!(16))
        );
        assert_eq!(ts["fqrate"], 8_000_000);
        assert_eq!(d["start"]["tcp_mss"], 1400);
        assert_eq!(d["start"]["sock_bufsize"], 1 << 20);
        let e = &d["end"];
        // The reverse direction's sender (the server) is unknown.
        assert_eq!(u(&e["sum_sent_bidir_reverse"]["bytes"]), 0);
        assert_eq!(u(&e["streams"][2]["sender"]["bytes"]), 0);
        assert!(u(&e["streams"][2]["receiver"]["bytes"]) > 0);
        assert!(e.get("receiver_tcp_congestion").is_none());
        // No NaN written as null anywhere.
        assert!(!serde_json::to_string(&d).unwrap().contains("null"));
    }

    #[test]
    fn without_intervals_one_whole_test_interval_is_written() {
        // `-i 0`: like iperf3, one interval over the measured window.
        let mut r = bidir_result();
        r.spec.interval_s = 0.0;
        for side in std::iter::once(&mut r.client).chain(r.server.as_mut()) {
            for f in &mut side.flows {
                f.intervals.clear();
            }
            side.sums.clear();
        }
        let d = doc(&r);
        assert_eq!(d["start"]["test_start"]["interval"], 0);
        let ivs = d["intervals"].as_array().unwrap();
        assert_eq!(ivs.len(), 1);
        let sum = &ivs[0]["sum"];
        assert_eq!(u(&sum["bytes"]), u(&d["end"]["sum_sent"]["bytes"]));
        assert_eq!(u(&sum["retransmits"]), 12);
        assert_eq!((f(&sum["start"]), f(&sum["end"])), (0.0, 3.0));
        let s0 = &ivs[0]["streams"][0];
        assert_eq!(u(&s0["retransmits"]), 6);
        assert!(s0.get("rtt").is_none() && s0.get("snd_cwnd").is_none());
        assert_eq!(
            u(&ivs[0]["sum_bidir_reverse"]["bytes"]),
            u(&d["end"]["sum_received_bidir_reverse"]["bytes"])
        );

        let mut r = udp_result();
        for f in &mut r.client.flows {
            f.intervals.clear();
        }
        let d = doc(&r);
        assert_eq!(
            u(&d["intervals"][0]["sum"]["packets"]),
            u(&d["end"]["sum_sent"]["packets"])
        );
    }

    #[test]
    fn helpers() {
        let time = |rfc3339| timestamp(rfc3339).map(|t| (t.time, t.timesecs));
        assert_eq!(
            time("1970-01-01T00:00:00Z"),
            Some(("Thu, 01 Jan 1970 00:00:00 GMT".into(), 0))
        );
        assert_eq!(
            time("2026-11-22T04:07:49.250Z"),
            Some(("Sun, 22 Nov 2026 04:07:49 GMT".into(), 1_795_320_469))
        );
        assert_eq!(
            time("2000-02-29T00:00:00Z"),
            Some(("Tue, 29 Feb 2000 00:00:00 GMT".into(), 951_782_400))
        );
        assert!(time("yesterday").is_none());
        assert_eq!(host_port("[::1]:5290"), ("::1".into(), 5290));
        assert_eq!(host_port("[::ffff:10.0.0.1]:80"), ("10.0.0.1".into(), 80));
        assert_eq!(host_port("lab1:5290"), ("lab1".into(), 5290));
        assert_eq!(seconds_value(3.0), json!(3));
        assert_eq!(seconds_value(0.25), json!(0.25));
    }
}
