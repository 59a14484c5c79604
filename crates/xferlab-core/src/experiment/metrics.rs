//! The numbers an experiment keeps from each run: headline metrics read
//! out of one result document, per-interval series for "metric against
//! time" plots, the latency CDF of an rr test, and the human formatting of
//! a value by its unit.
//!
//! Documents are taken as `serde_json::Value`, not as the typed
//! `TestResult`, so that results written by older (or newer, same major
//! version) xferlab builds still yield whatever metrics they carry: a
//! field that is missing simply gives no metric. Three schemas are known:
//! `xferlab.result/2` (stream, rr, usb and lab runs, see
//! docs/result-schema.md; schema 1 results are upgraded first), `xferlab.cbr/1` (`cbr -J`) and
//! `xferlab.sweep/1` (`sweep -J`) and `xferlab.usb-model/1` (`model usb
//! -J`: the predicted `throughput_bps`, `c2s_bps` (OUT), `s2c_bps` (IN) and
//! `usb_*_transfers_per_second`); any other schema, or another major
//! version, yields no metrics ([`kind`] tells them apart).
//!
//! A lab run with several tests (`xferlab lab ... @bg stream ... @ref rr
//! ...`) writes `{"tests": {HOST: {"result": DOC, ...}}, "lab": {...}}`.
//! Each test's metrics and series are named `NAME@HOST` (`tps@ref`,
//! `throughput_bps@bg`), the lab's (`lab_*`) keep their names, and `ok` is
//! whether every test's result was `ok`.
//!
//! # Metrics
//!
//! Names are stable snake_case; a metric is present only when the document
//! measured it. Units: `bit/s`, `1/s`, `us` (microseconds), `fraction`
//! (0–1), `count`, `%` (of one CPU core), `bool` (1 or 0; its mean over
//! repeats is the share of runs where it held), `bytes`.
//!
//! | metric | unit | from |
//! |---|---|---|
//! | `ok` | bool | result: `status` is `ok`; cbr/sweep: no trial or point failed |
//! | `throughput_bps` | bit/s | sum over `summary.directions` of the receiver's `bits_per_second` (the sender's when `receiver` is null) |
//! | `c2s_bps` | bit/s | the c2s direction's receiver rate (sender's when null); USB: OUT |
//! | `s2c_bps` | bit/s | the s2c direction's receiver rate (sender's when null); USB: IN |
//! | `sender_bps` | bit/s | sum of the directions' sender `bits_per_second` |
//! | `retransmits` | count | sum of the directions' `retransmits` (TCP) |
//! | `rtt_mean_us` | us | mean over TCP sender flows (both sides) of `total.tcp.rtt_mean_us` |
//! | `rtt_max_us` | us | largest `total.tcp.rtt_max_us` of the TCP sender flows |
//! | `cpu_client_pct` | % | `client.cpu.percent` |
//! | `cpu_server_pct` | % | `server.cpu.percent` (absent when the server's report is) |
//! | `cpu_client_s_per_gb` | s/GB | `client.cpu` user + system seconds per 1e9 bytes delivered (Σ over `summary.directions` of the receiver's `bytes`, the sender's when null): what moving the data cost, comparable across rates and transports |
//! | `cpu_server_s_per_gb` | s/GB | `server.cpu`, the same way |
//! | `load_cpu_pct` | % | `--load`: mean over `load.workers` of `cpu_percent` (any schema) |
//! | `usb_in_bps` | bit/s | `--usbmon` (any schema): `usbmon.host_in.total.bytes` (USB payload, framing included) over the result's measured seconds (the longest direction's); usbmon's own window (`mbytes_per_second`, which brackets the test) for other documents |
//! | `usb_out_bps` | bit/s | `--usbmon`: `usbmon.host_out.total.bytes`, the same way |
//! | `usb_bus_pct` | % | `--usbmon`: `usb_in_bps` + `usb_out_bps` against `usbmon.capacity_bytes_per_second` (the high-speed bulk capacity) |
//! | `usb_in_frames_per_transfer` | count | `--usbmon` with a framing: `usbmon.host_in.total.frames_per_transfer` (decoded transfers) |
//! | `usb_out_frames_per_transfer` | count | `--usbmon` with a framing: `usbmon.host_out.total.frames_per_transfer` |
//! | `loss_fraction` | fraction | UDP: Σ `udp.lost` / Σ `udp.sent` over directions whose receiver reported (tail loss included) |
//! | `lost` | count | UDP: Σ `udp.lost`, same directions |
//! | `host_drops` | count | UDP: Σ `udp.host_drops`, same directions |
//! | `network_lost` | count | UDP: Σ `udp.network_lost`, same directions |
//! | `out_of_order` | count | UDP: Σ `udp.out_of_order`, same directions |
//! | `duplicates` | count | UDP: Σ `udp.duplicates`, same directions |
//! | `jitter_us` | us | UDP: largest `udp.jitter_us`, same directions |
//! | `late` | count | UDP: Σ `udp.late` (datagrams sent > 1 ms behind schedule) |
//! | `tps` | 1/s | rr: `summary.rr.per_second` |
//! | `transactions` | count | rr: `summary.rr.transactions` (measured window) |
//! | `timed_out` | count | rr: `summary.rr.timed_out` |
//! | `failed` | count | rr: `summary.rr.failed` |
//! | `rr_late` | count | rr: `summary.rr.late` (responses after their timeout) |
//! | `latency_min_us` | us | rr: `summary.rr.latency.min_us` (only when `count` > 0, as all latency metrics) |
//! | `latency_mean_us` | us | rr: `summary.rr.latency.mean_us` |
//! | `latency_stddev_us` | us | rr: `summary.rr.latency.stddev_us` |
//! | `latency_p50_us` | us | rr: `summary.rr.latency.p50_us` |
//! | `latency_p90_us` | us | rr: `summary.rr.latency.p90_us` |
//! | `latency_p99_us` | us | rr: `summary.rr.latency.p99_us` |
//! | `latency_p999_us` | us | rr: `summary.rr.latency.p999_us` |
//! | `latency_max_us` | us | rr: `summary.rr.latency.max_us` |
//! | `connect_mean_us` | us | tcp-crr: `summary.rr.connect.mean_us` |
//! | `connect_p50_us` | us | tcp-crr: `summary.rr.connect.p50_us` |
//! | `connect_p99_us` | us | tcp-crr: `summary.rr.connect.p99_us` |
//! | `connect_max_us` | us | tcp-crr: `summary.rr.connect.max_us` |
//! | `usb_in_transfers_per_second` | 1/s | USB: the IN pipe's `total.transfers_per_second` (`usb_out_*`: the OUT pipe, same fields) |
//! | `usb_periodic_bps` | bit/s | USB model: the periodic endpoint's `periodic.throughput_bps` (`model usb --periodic`) |
//! | `usb_in_transfers` | count | USB: `total.transfers` |
//! | `usb_in_short` | count | USB: `total.short_transfers` |
//! | `usb_in_errors` | count | USB: Σ `total.errors[].count` |
//! | `usb_in_stalls_cleared` | count | USB: `total.stalls_cleared` |
//! | `usb_in_pattern_errors` | count | USB: `total.pattern_errors` |
//! | `usb_in_latency_mean_us` | us | USB: `total.latency.mean_us` (only when `count` > 0, as all USB latencies) |
//! | `usb_in_latency_p50_us` | us | USB: `total.latency.p50_us` |
//! | `usb_in_latency_p99_us` | us | USB: `total.latency.p99_us` |
//! | `usb_in_latency_p999_us` | us | USB: `total.latency.p999_us` |
//! | `usb_in_latency_max_us` | us | USB: `total.latency.max_us` |
//! | `lab_valid` | bool | lab: `lab.accuracy.valid` |
//! | `lab_c2s_loss_drops` | count | lab: `accuracy.c2s.counters.dropped_loss_segments` (`lab_s2c_*`: the s2c direction) |
//! | `lab_c2s_queue_drops` | count | lab: `dropped_queue_segments` |
//! | `lab_c2s_red_drops` | count | lab: `dropped_red_segments` |
//! | `lab_c2s_ce_marks` | count | lab: `marked_segments` |
//! | `lab_c2s_unintended_drops` | count | lab: Σ of `accuracy.c2s.unintended_drops` |
//! | `lab_c2s_lateness_p99_us` | us | lab: `accuracy.c2s.lateness_p99_us` |
//! | `lab_rtt_probe_median_us` | us | lab: `accuracy.rtt_probe.median_us` (when a probe came back) |
//! | `lab_host_steal_pct` | % | lab: `accuracy.host_steal_percent`, the hypervisor's share of CPU time during the run |
//! | `sustained` | bool | cbr: every run sustained a rate (`summary.runs_without_a_sustained_rate` = 0); with one rate, that it was sustained |
//! | `best_bps_max` | bit/s | cbr: `summary.max`, highest sustained rate of any run |
//! | `best_bps_median` | bit/s | cbr: `summary.median` |
//! | `best_bps_min` | bit/s | cbr: `summary.min` |
//! | `cbr_runs` | count | cbr: `summary.runs` |
//! | `throughput_bps`, `loss_fraction` | bit/s, fraction | cbr: the deciding trial's `receiver_bps` and `loss_fraction` (the trial at the first run's `best_bps`, or its last when it sustained none) |
//! | `cbr_unsustained_runs` | count | cbr: `summary.runs_without_a_sustained_rate` |
//! | `cbr_trials` | count | cbr: trials over all runs |
//! | `steps` | count | sweep: points measured |
//! | `max_throughput_bps` | bit/s | sweep: largest `receiver_bps` of any point |
//! | `max_loss_fraction` | fraction | sweep: largest `loss_fraction` of any point |
//! | `step{i}.*` | | sweep: point *i* (0-based), see below |
//!
//! A transport adds metrics of its own, read from its own result sections
//! (and, in a cbr document, from its section of the deciding trial):
//! `TransportModel::metrics`, whose table is in the model's docs.
//!
//! Lab metrics come from the `lab` member, which `xferlab lab` adds to
//! result, cbr and sweep documents alike. Drops and marks count **wire
//! segments** (a GSO superpacket dropped whole counts each segment it
//! carried), which is what the transport lost. For USB the stream metrics
//! apply too: OUT is the c2s direction, IN the s2c one.
//!
//! A sweep is a series of tests inside one document; its per-point figures
//! are named `step{i}.NAME` with *i* the point's 0-based index (the runner's
//! own grid of knob values is the better way to vary one, so sweeps get no
//! more than this):
//!
//! | step metric | unit | from `points[i]` |
//! |---|---|---|
//! | `size` | bytes | `size` (datagram payload) |
//! | `offered_bps` | bit/s | `rate_bps` (absent when unlimited) |
//! | `spacing_us` | us | `spacing_us` (sweeps by spacing) |
//! | `throughput_bps` | bit/s | `receiver_bps` |
//! | `sender_bps` | bit/s | `sender_bps` |
//! | `loss_fraction` | fraction | `loss_fraction` |
//! | `lost` | count | `sent` − `received` |
//! | `host_drops` | count | `host_drops` |
//! | `network_lost` | count | `network_lost` |
//! | `late` | count | `late` |
//! | `jitter_us` | us | `jitter_us` |
//!
//! # Series
//!
//! [`series`] returns every reporting interval, warm-up (`omitted`)
//! intervals included, as (interval `end_s`, value): the plot shows the
//! warm-up and the measured window alike, and `spec.omit_s` says where the
//! window starts. Each side counts time from its own start, so series
//! combining the two sides (a bidirectional test's receivers sit on both)
//! are matched by interval index and take their times from the c2s side —
//! the two clocks' zeros differ by the connection setup, milliseconds. See
//! [`SERIES`] for the names.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

/// One figure of a document.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Metric {
    pub name: String,
    pub value: f64,
    pub unit: &'static str,
}

use crate::jsondoc::unit::*;
use crate::jsondoc::{arr, num, sender_flows, sides, MetricInfo};
use crate::transport::Transport;

/// Every whole-document metric: (name, unit, description). The module
/// docs hold the same list as a table (a test keeps them in step).
pub const METRICS: &[MetricInfo] = &[
    ("ok", BOOL, "the test ran and both sides reported"),
    ("throughput_bps", BPS, "receiver throughput, all directions"),
    ("c2s_bps", BPS, "receiver throughput client to server"),
    ("s2c_bps", BPS, "receiver throughput server to client"),
    ("sender_bps", BPS, "sender throughput, all directions"),
    ("retransmits", COUNT, "TCP segments retransmitted"),
    ("rtt_mean_us", US, "mean smoothed RTT of the TCP senders"),
    ("rtt_max_us", US, "largest smoothed RTT of the TCP senders"),
    ("cpu_client_pct", PERCENT, "client CPU, % of one core"),
    ("cpu_server_pct", PERCENT, "server CPU, % of one core"),
    (
        "cpu_client_s_per_gb",
        SECONDS_PER_GB,
        "client CPU seconds per GB delivered",
    ),
    (
        "cpu_server_s_per_gb",
        SECONDS_PER_GB,
        "server CPU seconds per GB delivered",
    ),
    (
        "load_cpu_pct",
        PERCENT,
        "background load, mean CPU per worker, % of one core",
    ),
    (
        "usb_in_bps",
        BPS,
        "USB payload device to host (usbmon, framing included)",
    ),
    (
        "usb_out_bps",
        BPS,
        "USB payload host to device (usbmon, framing included)",
    ),
    (
        "usb_bus_pct",
        PERCENT,
        "USB bus used, both directions, % of high-speed bulk capacity",
    ),
    (
        "usb_in_frames_per_transfer",
        COUNT,
        "Ethernet frames per USB transfer, device to host (mean)",
    ),
    (
        "usb_out_frames_per_transfer",
        COUNT,
        "Ethernet frames per USB transfer, host to device (mean)",
    ),
    ("loss_fraction", FRACTION, "UDP datagrams lost / sent"),
    ("lost", COUNT, "UDP datagrams lost"),
    (
        "host_drops",
        COUNT,
        "UDP datagrams dropped by the receiving socket",
    ),
    ("network_lost", COUNT, "UDP datagrams lost on the way"),
    ("out_of_order", COUNT, "UDP datagrams out of order"),
    ("duplicates", COUNT, "UDP datagrams received twice"),
    ("jitter_us", US, "UDP interarrival jitter (worst flow)"),
    ("late", COUNT, "UDP datagrams sent > 1 ms behind schedule"),
    ("tps", PER_SECOND, "rr transactions per second"),
    (
        "transactions",
        COUNT,
        "rr transactions in the measured window",
    ),
    ("timed_out", COUNT, "rr transactions timed out"),
    ("failed", COUNT, "rr transactions failed"),
    ("rr_late", COUNT, "rr responses after their timeout"),
    ("latency_min_us", US, "rr latency, minimum"),
    ("latency_mean_us", US, "rr latency, mean"),
    ("latency_stddev_us", US, "rr latency, standard deviation"),
    ("latency_p50_us", US, "rr latency, median"),
    ("latency_p90_us", US, "rr latency, 90th percentile"),
    ("latency_p99_us", US, "rr latency, 99th percentile"),
    ("latency_p999_us", US, "rr latency, 99.9th percentile"),
    ("latency_max_us", US, "rr latency, maximum"),
    ("connect_mean_us", US, "tcp-crr connect time, mean"),
    ("connect_p50_us", US, "tcp-crr connect time, median"),
    (
        "connect_p99_us",
        US,
        "tcp-crr connect time, 99th percentile",
    ),
    ("connect_max_us", US, "tcp-crr connect time, maximum"),
    (
        "usb_in_transfers_per_second",
        PER_SECOND,
        "USB IN transfers per second",
    ),
    ("usb_in_transfers", COUNT, "USB IN transfers completed"),
    ("usb_in_short", COUNT, "USB IN short transfers"),
    ("usb_in_errors", COUNT, "USB IN failed transfers"),
    ("usb_in_stalls_cleared", COUNT, "USB IN stalls cleared"),
    (
        "usb_in_pattern_errors",
        COUNT,
        "USB IN transfers breaking the pattern",
    ),
    (
        "usb_in_latency_mean_us",
        US,
        "USB IN completion latency, mean",
    ),
    (
        "usb_in_latency_p50_us",
        US,
        "USB IN completion latency, median",
    ),
    (
        "usb_in_latency_p99_us",
        US,
        "USB IN completion latency, p99",
    ),
    (
        "usb_in_latency_p999_us",
        US,
        "USB IN completion latency, p99.9",
    ),
    (
        "usb_in_latency_max_us",
        US,
        "USB IN completion latency, maximum",
    ),
    (
        "usb_out_transfers_per_second",
        PER_SECOND,
        "USB OUT transfers per second",
    ),
    ("usb_out_transfers", COUNT, "USB OUT transfers completed"),
    ("usb_out_short", COUNT, "USB OUT short transfers"),
    ("usb_out_errors", COUNT, "USB OUT failed transfers"),
    ("usb_out_stalls_cleared", COUNT, "USB OUT stalls cleared"),
    (
        "usb_out_pattern_errors",
        COUNT,
        "USB OUT transfers breaking the pattern",
    ),
    (
        "usb_out_latency_mean_us",
        US,
        "USB OUT completion latency, mean",
    ),
    (
        "usb_out_latency_p50_us",
        US,
        "USB OUT completion latency, median",
    ),
    (
        "usb_out_latency_p99_us",
        US,
        "USB OUT completion latency, p99",
    ),
    (
        "usb_out_latency_p999_us",
        US,
        "USB OUT completion latency, p99.9",
    ),
    (
        "usb_out_latency_max_us",
        US,
        "USB OUT completion latency, maximum",
    ),
    (
        "lab_valid",
        BOOL,
        "the lab emulator met its accuracy targets",
    ),
    (
        "lab_c2s_loss_drops",
        COUNT,
        "lab c2s segments dropped by the loss model",
    ),
    (
        "lab_c2s_queue_drops",
        COUNT,
        "lab c2s segments dropped by the full queue",
    ),
    (
        "lab_c2s_red_drops",
        COUNT,
        "lab c2s non-ECT segments dropped by RED",
    ),
    ("lab_c2s_ce_marks", COUNT, "lab c2s segments marked CE"),
    (
        "lab_c2s_unintended_drops",
        COUNT,
        "lab c2s drops nobody configured",
    ),
    (
        "lab_c2s_lateness_p99_us",
        US,
        "lab c2s departure lateness, p99",
    ),
    (
        "lab_s2c_loss_drops",
        COUNT,
        "lab s2c segments dropped by the loss model",
    ),
    (
        "lab_s2c_queue_drops",
        COUNT,
        "lab s2c segments dropped by the full queue",
    ),
    (
        "lab_s2c_red_drops",
        COUNT,
        "lab s2c non-ECT segments dropped by RED",
    ),
    ("lab_s2c_ce_marks", COUNT, "lab s2c segments marked CE"),
    (
        "lab_s2c_unintended_drops",
        COUNT,
        "lab s2c drops nobody configured",
    ),
    (
        "lab_s2c_lateness_p99_us",
        US,
        "lab s2c departure lateness, p99",
    ),
    ("lab_rtt_probe_median_us", US, "lab probe RTT, median"),
    (
        "lab_host_steal_pct",
        PERCENT,
        "lab: CPU time the hypervisor took (steal)",
    ),
    ("sustained", BOOL, "cbr: every run sustained a rate"),
    ("best_bps_max", BPS, "cbr: highest sustained rate, best run"),
    (
        "best_bps_median",
        BPS,
        "cbr: highest sustained rate, median run",
    ),
    (
        "best_bps_min",
        BPS,
        "cbr: highest sustained rate, worst run",
    ),
    ("cbr_runs", COUNT, "cbr: runs"),
    (
        "cbr_unsustained_runs",
        COUNT,
        "cbr: runs that sustained no rate",
    ),
    ("cbr_trials", COUNT, "cbr: trials over all runs"),
    ("steps", COUNT, "sweep: points measured"),
    (
        "max_throughput_bps",
        BPS,
        "sweep: highest receiver throughput of a point",
    ),
    (
        "max_loss_fraction",
        FRACTION,
        "sweep: highest loss fraction of a point",
    ),
];

/// The per-point metrics of a sweep, named `step{i}.NAME`.
pub const STEP_METRICS: &[MetricInfo] = &[
    ("size", BYTES, "datagram payload bytes"),
    ("offered_bps", BPS, "offered rate per flow"),
    ("spacing_us", US, "time between datagrams of a flow"),
    ("throughput_bps", BPS, "receiver throughput"),
    ("sender_bps", BPS, "sender throughput"),
    ("loss_fraction", FRACTION, "datagrams lost / sent"),
    ("lost", COUNT, "datagrams lost"),
    (
        "host_drops",
        COUNT,
        "datagrams dropped by the receiving socket",
    ),
    ("network_lost", COUNT, "datagrams lost on the way"),
    ("late", COUNT, "datagrams sent > 1 ms behind schedule"),
    ("jitter_us", US, "interarrival jitter"),
];

/// The series [`series`] knows: (name, unit, description).
pub const SERIES: &[MetricInfo] = &[
    (
        "throughput_bps",
        BPS,
        "receiver throughput per interval, all directions (sender's where no receiver reported)",
    ),
    (
        "c2s_bps",
        BPS,
        "receiver throughput client to server per interval",
    ),
    (
        "s2c_bps",
        BPS,
        "receiver throughput server to client per interval",
    ),
    (
        "retransmits",
        COUNT,
        "TCP retransmits per interval, all senders",
    ),
    (
        "rtt_us",
        US,
        "smoothed RTT at the interval's end, mean of the TCP senders",
    ),
    (
        "loss_fraction",
        FRACTION,
        "UDP: datagrams missing / expected per interval, receivers' gap count",
    ),
    (
        "jitter_us",
        US,
        "UDP: interarrival jitter at the interval's end, worst receiver",
    ),
    ("tps", PER_SECOND, "rr transactions per second per interval"),
    ("latency_mean_us", US, "rr mean latency per interval"),
];

/// The unit of a metric or series name (`step{i}.NAME` and `NAME@HOST`
/// included); `None` for names this module does not produce.
pub fn unit_of(name: &str) -> Option<&'static str> {
    let (name, _) = split_host(name);
    let lookup = |table: &[(&str, &'static str, &str)], n: &str| {
        table.iter().find(|(m, _, _)| *m == n).map(|&(_, u, _)| u)
    };
    if let Some(rest) = name.strip_prefix("step") {
        if let Some((index, step_name)) = rest.split_once('.') {
            if !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) {
                return lookup(STEP_METRICS, step_name);
            }
        }
    }
    lookup(METRICS, name)
        .or_else(|| {
            Transport::ALL
                .iter()
                .find_map(|t| lookup(t.model().metrics(), name))
        })
        .or_else(|| lookup(SERIES, name))
}

/// `NAME@HOST` as (NAME, Some(HOST)); any other name as (name, None).
pub fn split_host(name: &str) -> (&str, Option<&str>) {
    match name.rsplit_once('@') {
        Some((n, h)) if !n.is_empty() && !h.is_empty() => (n, Some(h)),
        _ => (name, None),
    }
}

/// The tests of a lab run with several tests, by host: each entry's
/// `result` is that test's own document. `None` for any other document.
pub fn tests_of(doc: &Value) -> Option<&serde_json::Map<String, Value>> {
    if doc.get("schema").is_some() {
        return None;
    }
    doc.get("tests")?.as_object()
}

/// The result document of host `host`'s test in a lab run with several
/// tests.
fn test_result<'a>(doc: &'a Value, host: &str) -> Option<&'a Value> {
    tests_of(doc)?.get(host)?.get("result")
}

/// Which known schema a document follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocKind {
    /// `xferlab.result/2` (and /1, read through [`crate::result::v1`]):
    /// stream, rr, usb and lab tests.
    Result,
    /// `xferlab.cbr/1`.
    Cbr,
    /// `xferlab.sweep/1`.
    Sweep,
    /// `xferlab.usb-model/1`: a prediction of the USB bus model.
    UsbModel,
}

/// The kind of a document by its `schema`; `None` for anything else
/// (another major version included: its fields may mean something else).
pub fn kind(doc: &Value) -> Option<DocKind> {
    match doc.get("schema")?.as_str()? {
        crate::result::SCHEMA | crate::result::v1::SCHEMA_V1 => Some(DocKind::Result),
        "xferlab.cbr/1" => Some(DocKind::Cbr),
        "xferlab.sweep/1" => Some(DocKind::Sweep),
        "xferlab.usb-model/1" => Some(DocKind::UsbModel),
        _ => None,
    }
}

/// `doc` in the current result schema: a schema 1 result is upgraded (a
/// copy; nothing here is per packet), anything else is left as it is.
fn current(doc: &Value) -> Cow<'_, Value> {
    if doc.get("schema").and_then(Value::as_str) == Some(crate::result::v1::SCHEMA_V1) {
        let mut doc = doc.clone();
        crate::result::v1::upgrade(&mut doc);
        Cow::Owned(doc)
    } else {
        Cow::Borrowed(doc)
    }
}

/// The `kind`-tagged section at `key` of `v` (`"pattern": {"kind": "rr"}`)
/// when it is of that kind.
fn section<'a>(v: &'a Value, key: &str, kind: &str) -> Option<&'a Value> {
    v.get(key)
        .filter(|s| s.get("kind").and_then(Value::as_str) == Some(kind))
}

fn b(x: bool) -> f64 {
    if x {
        1.0
    } else {
        0.0
    }
}

/// Collects metrics, taking each unit from the tables.
#[derive(Default)]
struct Out(Vec<Metric>);

impl Out {
    fn push(&mut self, name: &str, value: f64) {
        let unit = unit_of(name);
        debug_assert!(unit.is_some(), "metric {name} is in no table");
        self.0.push(Metric {
            name: name.to_string(),
            value,
            unit: unit.unwrap_or(""),
        });
    }

    fn push_opt(&mut self, name: &str, value: Option<f64>) {
        if let Some(v) = value {
            self.push(name, v);
        }
    }
}

/// The headline metrics of one document, by schema (see the module docs
/// for every name). Unknown schemas give none.
pub fn extract(doc: &Value) -> Vec<Metric> {
    if let Some(tests) = tests_of(doc) {
        return several_tests_metrics(doc, tests);
    }
    let doc = &*current(doc);
    let mut out = Out::default();
    match kind(doc) {
        Some(DocKind::Result) => result_metrics(doc, &mut out),
        Some(DocKind::Cbr) => cbr_metrics(doc, &mut out),
        Some(DocKind::Sweep) => sweep_metrics(doc, &mut out),
        Some(DocKind::UsbModel) => usb_model_metrics(doc, &mut out),
        None => return Vec::new(),
    }
    let load: Vec<f64> = arr(doc.get("load").unwrap_or(&Value::Null), "workers")
        .iter()
        .filter_map(|w| num(w, &["cpu_percent"]))
        .collect();
    if !load.is_empty() {
        out.push("load_cpu_pct", load.iter().sum::<f64>() / load.len() as f64);
    }
    if let Some(mon) = doc.get("usbmon") {
        // A result's own measured seconds: usbmon's window brackets the
        // test (setup and drain), so its rates read low.
        let window = arr(doc.get("summary").unwrap_or(&Value::Null), "directions")
            .iter()
            .filter_map(|d| num(d, &["receiver", "seconds"]).or(num(d, &["sender", "seconds"])))
            .fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.max(s))))
            .filter(|&s| s > 0.0);
        usbmon_metrics(mon, window, &mut out);
    }
    if let Some(lab) = doc.get("lab") {
        lab_metrics(lab, &mut out);
    }
    out.0
}

/// A lab run with several tests: each test's metrics as `NAME@HOST`, the
/// lab's, and `ok` when every test's result is.
fn several_tests_metrics(doc: &Value, tests: &serde_json::Map<String, Value>) -> Vec<Metric> {
    let mut out = Out::default();
    let mut all_ok = !tests.is_empty();
    for (host, t) in tests {
        let result = t.get("result").unwrap_or(&Value::Null);
        all_ok &= result.get("status").and_then(Value::as_str) == Some("ok");
        out.0.extend(extract(result).into_iter().map(|m| Metric {
            name: format!("{}@{host}", m.name),
            ..m
        }));
    }
    out.push("ok", b(all_ok));
    if let Some(lab) = doc.get("lab") {
        lab_metrics(lab, &mut out);
    }
    out.0
}

/// A direction's throughput as the receiver measured it, the sender's when
/// the receiver's report is missing (`receiver: null`).
fn direction_bps(d: &Value) -> Option<f64> {
    num(d, &["receiver", "bits_per_second"]).or_else(|| num(d, &["sender", "bits_per_second"]))
}

fn result_metrics(doc: &Value, out: &mut Out) {
    out.push(
        "ok",
        b(doc.get("status").and_then(Value::as_str) == Some("ok")),
    );
    let summary = doc.get("summary").unwrap_or(&Value::Null);
    let directions = arr(summary, "directions");
    if !directions.is_empty() {
        out.push(
            "throughput_bps",
            directions.iter().filter_map(direction_bps).sum(),
        );
        for d in directions {
            match d.get("direction").and_then(Value::as_str) {
                Some("c2s") => out.push_opt("c2s_bps", direction_bps(d)),
                Some("s2c") => out.push_opt("s2c_bps", direction_bps(d)),
                _ => {}
            }
        }
        out.push(
            "sender_bps",
            directions
                .iter()
                .filter_map(|d| num(d, &["sender", "bits_per_second"]))
                .sum(),
        );
        let retransmits: Vec<f64> = directions
            .iter()
            .filter_map(|d| num(d, &["retransmits"]))
            .collect();
        if !retransmits.is_empty() {
            out.push("retransmits", retransmits.iter().sum());
        }
        udp_metrics(directions, out);
    }
    tcp_rtt_metrics(doc, out);
    out.push_opt("cpu_client_pct", num(doc, &["client", "cpu", "percent"]));
    out.push_opt("cpu_server_pct", num(doc, &["server", "cpu", "percent"]));
    cpu_per_gb(doc, directions, out);
    if let Some(rr) = section(summary, "pattern", "rr") {
        rr_metrics(rr, out);
    }
    // Every model looks for its own sections, whatever the spec names.
    for t in Transport::ALL {
        t.model().measure(doc, &mut |name, v| out.push(name, v));
    }
    if let Some(usb) = doc
        .get("client")
        .and_then(|c| section(c, "transport", "usb_bulk"))
    {
        usb_metrics(usb, out);
    }
}

/// CPU seconds (user + system) per 1e9 bytes delivered, per side: none
/// when nothing was delivered (a CPU cost per nothing says nothing).
fn cpu_per_gb(doc: &Value, directions: &[Value], out: &mut Out) {
    let bytes: f64 = directions
        .iter()
        .filter_map(|d| num(d, &["receiver", "bytes"]).or_else(|| num(d, &["sender", "bytes"])))
        .sum();
    if bytes <= 0.0 {
        return;
    }
    for (side, name) in [
        ("client", "cpu_client_s_per_gb"),
        ("server", "cpu_server_s_per_gb"),
    ] {
        let cpu = doc.get(side).and_then(|s| s.get("cpu"));
        let (Some(user), Some(system)) = (
            cpu.and_then(|c| num(c, &["user_s"])),
            cpu.and_then(|c| num(c, &["system_s"])),
        ) else {
            continue;
        };
        out.push(name, (user + system) / (bytes / 1e9));
    }
}

/// UDP figures of `summary.directions[].udp`. Loss figures only from
/// directions whose receiver reported: without it `lost` equals `sent`,
/// which says nothing about the path.
fn udp_metrics(directions: &[Value], out: &mut Out) {
    let udp: Vec<(&Value, bool)> = directions
        .iter()
        .filter_map(|d| {
            let u = d.get("udp").filter(|u| u.is_object())?;
            Some((u, d.get("receiver").is_some_and(Value::is_object)))
        })
        .collect();
    if udp.is_empty() {
        return;
    }
    let received: Vec<&Value> = udp.iter().filter(|(_, r)| *r).map(|(u, _)| *u).collect();
    if !received.is_empty() {
        let sum = |k: &str| received.iter().filter_map(|u| num(u, &[k])).sum::<f64>();
        let (sent, lost) = (sum("sent"), sum("lost"));
        out.push("loss_fraction", if sent > 0.0 { lost / sent } else { 0.0 });
        out.push("lost", lost);
        for k in ["host_drops", "network_lost", "out_of_order", "duplicates"] {
            out.push(k, sum(k));
        }
        out.push(
            "jitter_us",
            received
                .iter()
                .filter_map(|u| num(u, &["jitter_us"]))
                .fold(0.0, f64::max),
        );
    }
    out.push(
        "late",
        udp.iter().filter_map(|(u, _)| num(u, &["late"])).sum(),
    );
}

fn tcp_rtt_metrics(doc: &Value, out: &mut Out) {
    let tcp: Vec<&Value> = sender_flows(doc)
        .filter_map(|f| f.get("total")?.get("tcp"))
        .collect();
    let means: Vec<f64> = tcp
        .iter()
        .filter_map(|t| num(t, &["rtt_mean_us"]))
        .collect();
    if !means.is_empty() {
        out.push(
            "rtt_mean_us",
            means.iter().sum::<f64>() / means.len() as f64,
        );
    }
    let max = tcp
        .iter()
        .filter_map(|t| num(t, &["rtt_max_us"]))
        .reduce(f64::max);
    out.push_opt("rtt_max_us", max);
}

fn rr_metrics(rr: &Value, out: &mut Out) {
    out.push_opt("tps", num(rr, &["per_second"]));
    out.push_opt("transactions", num(rr, &["transactions"]));
    out.push_opt("timed_out", num(rr, &["timed_out"]));
    out.push_opt("failed", num(rr, &["failed"]));
    out.push_opt("rr_late", num(rr, &["late"]));
    if let Some(l) = measured_latency(rr.get("latency")) {
        for (name, field) in [
            ("latency_min_us", "min_us"),
            ("latency_mean_us", "mean_us"),
            ("latency_stddev_us", "stddev_us"),
            ("latency_p50_us", "p50_us"),
            ("latency_p90_us", "p90_us"),
            ("latency_p99_us", "p99_us"),
            ("latency_p999_us", "p999_us"),
            ("latency_max_us", "max_us"),
        ] {
            out.push_opt(name, num(l, &[field]));
        }
    }
    if let Some(c) = measured_latency(rr.get("connect")) {
        for (name, field) in [
            ("connect_mean_us", "mean_us"),
            ("connect_p50_us", "p50_us"),
            ("connect_p99_us", "p99_us"),
            ("connect_max_us", "max_us"),
        ] {
            out.push_opt(name, num(c, &[field]));
        }
    }
}

/// A latency summary that summarizes something: with `count` 0 its
/// figures are zeros, not measurements.
fn measured_latency(l: Option<&Value>) -> Option<&Value> {
    l.filter(|l| num(l, &["count"]).is_some_and(|c| c > 0.0))
}

fn usb_metrics(usb: &Value, out: &mut Out) {
    for pipe in arr(usb, "pipes") {
        let Some(endpoint) = num(pipe, &["endpoint"]) else {
            continue;
        };
        let dir = if (endpoint as u64) & 0x80 != 0 {
            "in"
        } else {
            "out"
        };
        let total = pipe.get("total").unwrap_or(&Value::Null);
        let name = |m: &str| format!("usb_{dir}_{m}");
        out.push_opt(
            &name("transfers_per_second"),
            num(total, &["transfers_per_second"]),
        );
        out.push_opt(&name("transfers"), num(total, &["transfers"]));
        out.push_opt(&name("short"), num(total, &["short_transfers"]));
        out.push(
            &name("errors"),
            arr(total, "errors")
                .iter()
                .filter_map(|e| num(e, &["count"]))
                .sum(),
        );
        out.push_opt(&name("stalls_cleared"), num(total, &["stalls_cleared"]));
        out.push_opt(&name("pattern_errors"), num(total, &["pattern_errors"]));
        if let Some(l) = measured_latency(total.get("latency")) {
            for field in ["mean", "p50", "p99", "p999", "max"] {
                out.push_opt(
                    &name(&format!("latency_{field}_us")),
                    num(l, &[&format!("{field}_us")]),
                );
            }
        }
    }
}

fn usb_model_metrics(doc: &Value, out: &mut Out) {
    out.push("ok", 1.0);
    out.push_opt("throughput_bps", num(doc, &["throughput_bps"]));
    for pipe in arr(doc, "pipes") {
        let (side, dir) = match pipe.get("dir").and_then(Value::as_str) {
            Some("in") => ("s2c_bps", "in"),
            Some("out") => ("c2s_bps", "out"),
            _ => continue,
        };
        out.push_opt(side, num(pipe, &["throughput_bps"]));
        out.push_opt(
            &format!("usb_{dir}_transfers_per_second"),
            num(pipe, &["transfers_per_s"]),
        );
    }
    if let Some(per) = doc.get("periodic") {
        out.push_opt("usb_periodic_bps", num(per, &["throughput_bps"]));
    }
}

/// `--usbmon`'s bus figures beside any verb's result, over `window`
/// seconds when the document has them.
fn usbmon_metrics(mon: &Value, window: Option<f64>, out: &mut Out) {
    let total = |dir: &str| mon.get(dir).and_then(|d| d.get("total"));
    let (i, o) = (total("host_in"), total("host_out"));
    let bytes_per_s = |t: Option<&Value>| {
        let t = t?;
        match window {
            Some(w) => num(t, &["bytes"]).map(|b| b / w),
            None => num(t, &["mbytes_per_second"]).map(|m| m * 1e6),
        }
    };
    let rates: Vec<f64> = [("usb_in_bps", i), ("usb_out_bps", o)]
        .into_iter()
        .filter_map(|(name, t)| {
            let r = bytes_per_s(t)?;
            out.push(name, r * 8.0);
            Some(r)
        })
        .collect();
    if let (false, Some(cap)) = (
        rates.is_empty(),
        num(mon, &["capacity_bytes_per_second"]).filter(|&c| c > 0.0),
    ) {
        out.push("usb_bus_pct", rates.iter().sum::<f64>() / cap * 100.0);
    }
    if mon.get("encap").is_some_and(|e| !e.is_null()) {
        for (name, t) in [
            ("usb_in_frames_per_transfer", i),
            ("usb_out_frames_per_transfer", o),
        ] {
            if let Some(v) = t.and_then(|t| num(t, &["frames_per_transfer"])) {
                out.push(name, v);
            }
        }
    }
}

fn lab_metrics(lab: &Value, out: &mut Out) {
    let Some(acc) = lab.get("accuracy") else {
        return;
    };
    out.push_opt(
        "lab_valid",
        acc.get("valid").and_then(Value::as_bool).map(b),
    );
    for dir in ["c2s", "s2c"] {
        let Some(d) = acc.get(dir).filter(|d| d.is_object()) else {
            continue;
        };
        for (name, field) in [
            ("loss_drops", "dropped_loss_segments"),
            ("queue_drops", "dropped_queue_segments"),
            ("red_drops", "dropped_red_segments"),
            ("ce_marks", "marked_segments"),
        ] {
            out.push_opt(&format!("lab_{dir}_{name}"), num(d, &["counters", field]));
        }
        if let Some(u) = d.get("unintended_drops").and_then(Value::as_object) {
            out.push(
                &format!("lab_{dir}_unintended_drops"),
                u.values().filter_map(Value::as_f64).sum(),
            );
        }
        out.push_opt(
            &format!("lab_{dir}_lateness_p99_us"),
            num(d, &["lateness_p99_us"]),
        );
    }
    if let Some(probe) = acc.get("rtt_probe") {
        if num(probe, &["received"]).is_some_and(|r| r > 0.0) {
            out.push_opt("lab_rtt_probe_median_us", num(probe, &["median_us"]));
        }
    }
    out.push_opt("lab_host_steal_pct", num(acc, &["host_steal_percent"]));
}

fn failed_entry(v: &Value) -> bool {
    v.get("error").is_some_and(|e| !e.is_null())
}

fn cbr_metrics(doc: &Value, out: &mut Out) {
    let runs = arr(doc, "runs");
    let trials: Vec<&Value> = runs.iter().flat_map(|r| arr(r, "trials")).collect();
    out.push("ok", b(!trials.iter().any(|t| failed_entry(t))));
    let summary = doc.get("summary").unwrap_or(&Value::Null);
    let n_runs = num(summary, &["runs"]);
    let unsustained = num(summary, &["runs_without_a_sustained_rate"]);
    if let (Some(n), Some(u)) = (n_runs, unsustained) {
        out.push("sustained", b(n > 0.0 && u == 0.0));
    }
    out.push_opt("best_bps_max", num(summary, &["max"]));
    out.push_opt("best_bps_median", num(summary, &["median"]));
    out.push_opt("best_bps_min", num(summary, &["min"]));
    out.push_opt("cbr_runs", n_runs);
    out.push_opt("cbr_unsustained_runs", unsustained);
    out.push("cbr_trials", trials.len() as f64);
    // The flow itself, from the trial that decided the first run: the one
    // at its best rate, or its last when it sustained none.
    let Some(run) = runs.first() else { return };
    let ts = arr(run, "trials");
    let best = num(run, &["best_bps"]);
    let Some(t) = ts
        .iter()
        .rev()
        .find(|t| best.is_some() && num(t, &["rate_bps"]) == best)
        .or(ts.last())
    else {
        return;
    };
    out.push_opt("throughput_bps", num(t, &["receiver_bps"]));
    out.push_opt("loss_fraction", num(t, &["loss_fraction"]));
    for tr in Transport::ALL {
        tr.model()
            .measure_trial(t, &mut |name, v| out.push(name, v));
    }
}

fn sweep_metrics(doc: &Value, out: &mut Out) {
    let points = arr(doc, "points");
    out.push("ok", b(!points.iter().any(failed_entry)));
    out.push("steps", points.len() as f64);
    let max_of = |k: &str| points.iter().filter_map(|p| num(p, &[k])).reduce(f64::max);
    out.push_opt("max_throughput_bps", max_of("receiver_bps"));
    out.push_opt("max_loss_fraction", max_of("loss_fraction"));
    for (i, p) in points.iter().enumerate() {
        let name = |m: &str| format!("step{i}.{m}");
        for (m, field) in [
            ("size", "size"),
            ("offered_bps", "rate_bps"),
            ("spacing_us", "spacing_us"),
            ("throughput_bps", "receiver_bps"),
            ("sender_bps", "sender_bps"),
            ("loss_fraction", "loss_fraction"),
        ] {
            out.push_opt(&name(m), num(p, &[field]));
        }
        if let (Some(sent), Some(received)) = (num(p, &["sent"]), num(p, &["received"])) {
            out.push(&name("lost"), (sent - received).max(0.0));
        }
        for m in ["host_drops", "network_lost", "late", "jitter_us"] {
            out.push_opt(&name(m), num(p, &[m]));
        }
    }
}

/// (end_s, value) of one `sums[]` series.
type Points = Vec<(f64, f64)>;

/// The per-interval throughput of one direction: the receiving side's
/// `sums`, the sending side's when no receiver reported.
fn direction_series(doc: &Value, dir: &str) -> Option<Points> {
    let of_role = |role: &str| -> Points {
        sides(doc)
            .flat_map(|s| arr(s, "sums"))
            .filter(|s| {
                s.get("direction").and_then(Value::as_str) == Some(dir)
                    && s.get("role").and_then(Value::as_str) == Some(role)
            })
            .filter_map(|s| Some((num(s, &["end_s"])?, num(s, &["bits_per_second"])?)))
            .collect()
    };
    let receiver = of_role("receiver");
    let points = if receiver.is_empty() {
        of_role("sender")
    } else {
        receiver
    };
    (!points.is_empty()).then_some(points)
}

/// Combines series by interval index: `combine` gets the values present
/// at one index, the time is the first series' (c2s first, client first).
fn by_index(series: &[Points], combine: impl Fn(&[f64]) -> f64) -> Option<Points> {
    let len = series.iter().map(Vec::len).max().unwrap_or(0);
    let out: Points = (0..len)
        .map(|i| {
            let at: Vec<(f64, f64)> = series.iter().filter_map(|s| s.get(i).copied()).collect();
            let values: Vec<f64> = at.iter().map(|p| p.1).collect();
            (at[0].0, combine(&values))
        })
        .collect();
    (!out.is_empty()).then_some(out)
}

/// Per-interval values of the flows that match `role`, one series per flow.
fn flow_series(doc: &Value, role: &str, value: impl Fn(&Value) -> Option<f64>) -> Vec<Points> {
    sides(doc)
        .flat_map(|s| arr(s, "flows"))
        .filter(|f| f.get("role").and_then(Value::as_str) == Some(role))
        .map(|f| {
            arr(f, "intervals")
                .iter()
                .filter_map(|iv| Some((num(iv, &["end_s"])?, value(iv)?)))
                .collect::<Points>()
        })
        .filter(|s| !s.is_empty())
        .collect()
}

fn rr_sums_series(doc: &Value, field: &str) -> Option<Points> {
    let sums = arr(section(doc.get("client")?, "pattern", "rr")?, "sums");
    let out: Points = sums
        .iter()
        .filter_map(|s| Some((num(s, &["end_s"])?, num(s, &[field])?)))
        .collect();
    (!out.is_empty()).then_some(out)
}

/// One per-interval series of a result document (see [`SERIES`]):
/// (interval end in seconds since that side's start, value), every
/// interval including the warm-up's. `None` for an unknown name, a
/// document that is not a result, or a test without such intervals
/// (`-i 0`, a TCP series of a UDP test, …).
pub fn series(doc: &Value, name: &str) -> Option<Vec<(f64, f64)>> {
    if let (base, Some(host)) = split_host(name) {
        return series(test_result(doc, host)?, base);
    }
    if kind(doc) != Some(DocKind::Result) {
        return None;
    }
    let doc = &*current(doc);
    let sum = |v: &[f64]| v.iter().sum::<f64>();
    match name {
        "throughput_bps" => {
            let dirs: Vec<Points> = ["c2s", "s2c"]
                .into_iter()
                .filter_map(|d| direction_series(doc, d))
                .collect();
            by_index(&dirs, sum)
        }
        "c2s_bps" => direction_series(doc, "c2s"),
        "s2c_bps" => direction_series(doc, "s2c"),
        "retransmits" => {
            let per_dir: Vec<Points> = sides(doc)
                .map(|s| {
                    arr(s, "sums")
                        .iter()
                        .filter(|s| s.get("role").and_then(Value::as_str) == Some("sender"))
                        .filter_map(|s| Some((num(s, &["end_s"])?, num(s, &["retransmits"])?)))
                        .collect::<Points>()
                })
                .filter(|s| !s.is_empty())
                .collect();
            by_index(&per_dir, sum)
        }
        "rtt_us" => {
            let flows = flow_series(doc, "sender", |iv| num(iv, &["tcp", "rtt_us"]));
            by_index(&flows, |v| sum(v) / v.len() as f64)
        }
        "loss_fraction" => {
            // (lost, expected) per interval and flow, folded into one
            // value per series after summing over flows.
            let lost = flow_series(doc, "receiver", |iv| num(iv, &["udp", "lost"]));
            let expected = flow_series(doc, "receiver", |iv| {
                Some(num(iv, &["udp", "packets"])? + num(iv, &["udp", "lost"])?)
            });
            let lost = by_index(&lost, sum)?;
            let expected = by_index(&expected, sum)?;
            Some(
                lost.iter()
                    .zip(&expected)
                    .map(|(&(t, l), &(_, e))| (t, if e > 0.0 { l / e } else { 0.0 }))
                    .collect(),
            )
        }
        "jitter_us" => {
            let flows = flow_series(doc, "receiver", |iv| num(iv, &["udp", "jitter_us"]));
            by_index(&flows, |v| v.iter().copied().fold(0.0, f64::max))
        }
        "tps" => rr_sums_series(doc, "per_second"),
        "latency_mean_us" => rr_sums_series(doc, "mean_latency_us"),
        _ => None,
    }
}

/// The latency distribution of an rr result as a CDF: (latency in µs,
/// cumulative fraction 0–1) from `client.rr.percentiles`, in increasing
/// order. `None` when the document has no percentiles (not rr, or no
/// transaction completed). Of a lab run with several tests: the first
/// test's (by host name) that has them.
pub fn latency_cdf(doc: &Value) -> Option<Vec<(f64, f64)>> {
    if let Some(tests) = tests_of(doc) {
        return tests.values().find_map(|t| latency_cdf(t.get("result")?));
    }
    let doc = &*current(doc);
    let pct = arr(section(doc.get("client")?, "pattern", "rr")?, "percentiles");
    let mut points: Vec<(f64, f64)> = pct
        .iter()
        .filter_map(|p| Some((num(p, &["us"])?, num(p, &["percentile"])? / 100.0)))
        .collect();
    points.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.total_cmp(&b.0)));
    (!points.is_empty()).then_some(points)
}

/// `x` rounded to three significant digits.
fn round3(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let factor = 10f64.powi(2 - x.abs().log10().floor() as i32);
    (x * factor).round() / factor
}

/// `x` to three significant digits, without an exponent. The decimals are
/// counted after rounding, so a carry (0.99996 → 1.00) keeps three digits.
fn sig3(x: f64) -> String {
    let r = round3(x);
    if r == 0.0 {
        return "0".to_string();
    }
    let decimals = (2 - r.abs().log10().floor() as i32).max(0) as usize;
    format!("{r:.decimals$}")
}

/// Scales `x` by `step` while it reaches `step` or would show four digits,
/// naming the prefix (999.96 kbit/s shows as 1.00 Mbit/s, not 1000 kbit/s;
/// 1023 KiB as 0.999 MiB).
fn scaled(x: f64, step: f64, prefixes: &[&str], unit: &str) -> String {
    let mut v = x;
    let mut i = 0;
    while (v.abs() >= step || round3(v).abs() >= 1000.0) && i + 1 < prefixes.len() {
        v /= step;
        i += 1;
    }
    format!("{} {}{}", sig3(v), prefixes[i], unit)
}

/// A value for people: scaled by its unit and given to three significant
/// digits. bit/s become kbit/s, Mbit/s, Gbit/s, Tbit/s; µs become ms and
/// s; 1/s take k, M, G; fractions are shown in percent; bools as yes/no
/// (a mean of bools as the share that held); whole counts exactly; bytes
/// as B, KiB, MiB, GiB. `NaN` shows as `-`; unknown units are appended.
pub fn format_value(value: f64, unit: &str) -> String {
    if value.is_nan() {
        return "-".to_string();
    }
    if value.is_infinite() {
        return if value > 0.0 { "∞" } else { "-∞" }.to_string();
    }
    match unit {
        BPS => scaled(value, 1000.0, &["", "k", "M", "G", "T"], "bit/s"),
        PER_SECOND => scaled(value, 1000.0, &["", "k", "M", "G"], "/s"),
        US => {
            if round3(value).abs() < 1000.0 {
                format!("{} µs", sig3(value))
            } else {
                scaled(value / 1000.0, 1000.0, &["m", ""], "s")
            }
        }
        FRACTION => format!("{} %", sig3(value * 100.0)),
        PERCENT => format!("{} %", sig3(value)),
        BOOL => match value {
            1.0 => "yes".to_string(),
            0.0 => "no".to_string(),
            v => format!("{} % yes", sig3(v * 100.0)),
        },
        COUNT => {
            if value.fract() == 0.0 && value.abs() < 1e15 {
                format!("{value:.0}")
            } else {
                sig3(value)
            }
        }
        BYTES => {
            if value.fract() == 0.0 && value.abs() < 10_000.0 {
                format!("{value:.0} B")
            } else {
                scaled(value, 1024.0, &["", "Ki", "Mi", "Gi", "Ti"], "B")
            }
        }
        "" => sig3(value),
        other => {
            let mut s = sig3(value);
            let _ = write!(s, " {other}");
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Value {
        let text = match name {
            "stream_tcp_bidir" => include_str!("../../tests/fixtures/stream_tcp_bidir.json"),
            "stream_udp_loss" => include_str!("../../tests/fixtures/stream_udp_loss.json"),
            "rr_tcp" => include_str!("../../tests/fixtures/rr_tcp.json"),
            "rr_crr_background" => include_str!("../../tests/fixtures/rr_crr_background.json"),
            "cbr" => include_str!("../../tests/fixtures/cbr.json"),
            "sweep" => include_str!("../../tests/fixtures/sweep.json"),
            "lab_stream" => include_str!("../../tests/fixtures/lab_stream.json"),
            other => panic!("no fixture {other}"),
        };
        serde_json::from_str(text).unwrap()
    }

    fn get(metrics: &[Metric], name: &str) -> Option<f64> {
        let found: Vec<&Metric> = metrics.iter().filter(|m| m.name == name).collect();
        assert!(found.len() <= 1, "{name} appears {} times", found.len());
        found.first().map(|m| m.value)
    }

    /// The metric's value, to 1e-12 relative: serde_json's default float
    /// parser may be one ulp off the correctly rounded literal.
    #[test]
    fn several_tests_name_each_test_metric_by_its_host() {
        let (bg, rr, lab) = (
            fixture("stream_tcp_bidir"),
            fixture("rr_tcp"),
            fixture("lab_stream"),
        );
        let mut doc = serde_json::json!({
            "tests": {
                "bg": {"host": "bg", "command": "stream", "exit_code": 0, "result": bg},
                "ref": {"host": "ref", "command": "rr", "exit_code": 0, "result": rr},
            },
            "lab": lab["lab"],
        });
        let ms = extract(&doc);
        for (host, alone) in [("bg", &bg), ("ref", &rr)] {
            for m in extract(alone) {
                has(&ms, &format!("{}@{host}", m.name), m.value);
                assert_eq!(unit_of(&format!("{}@{host}", m.name)), Some(m.unit));
            }
        }
        assert!(get(&ms, "tps").is_none(), "an unnamed test metric");
        has(&ms, "ok", 1.0);
        assert_eq!(get(&ms, "lab_valid"), get(&extract(&lab), "lab_valid"));
        assert!(get(&ms, "lab_valid").is_some());
        assert_eq!(series(&doc, "tps@ref"), series(&rr, "tps"));
        assert!(series(&doc, "tps@ref").is_some());
        assert_eq!(series(&doc, "tps@nobody"), None);
        assert_eq!(series(&doc, "tps"), None);
        assert_eq!(latency_cdf(&doc), latency_cdf(&rr));
        assert!(latency_cdf(&doc).is_some());

        doc["tests"]["bg"]["result"]["status"] = "partial".into();
        has(&extract(&doc), "ok", 0.0);
        assert_eq!(split_host("tps@ref"), ("tps", Some("ref")));
        assert_eq!(split_host("tps"), ("tps", None));
        assert_eq!(split_host("@ref"), ("@ref", None));
    }

    #[track_caller]
    fn has(metrics: &[Metric], name: &str, want: f64) {
        let got = get(metrics, name).unwrap_or_else(|| panic!("{name} missing"));
        assert!(
            (got - want).abs() <= 1e-12 * want.abs(),
            "{name}: got {got}, want {want}"
        );
    }

    #[track_caller]
    fn near(got: (f64, f64), want: (f64, f64)) {
        assert!(
            (got.0 - want.0).abs() <= 1e-12 * want.0.abs()
                && (got.1 - want.1).abs() <= 1e-12 * want.1.abs(),
            "got {got:?}, want {want:?}"
        );
    }

    #[test]
    fn every_metric_has_its_table_unit_and_is_documented() {
        let source = include_str!("metrics.rs");
        let doc_rows: Vec<&str> = source
            .lines()
            .filter(|l| l.starts_with("//! | `"))
            .collect();
        for (name, unit, _) in METRICS {
            // usb_out_* and lab_s2c_* are documented through their
            // usb_in_* / lab_c2s_* rows.
            let documented = name
                .replace("usb_out_", "usb_in_")
                .replace("lab_s2c_", "lab_c2s_");
            assert!(
                doc_rows
                    .iter()
                    .any(|l| l.starts_with(&format!("//! | `{documented}` | {unit} |"))),
                "{name} ({unit}) has no row in the module docs"
            );
        }
        for (name, unit, _) in STEP_METRICS {
            assert!(
                doc_rows
                    .iter()
                    .any(|l| l.starts_with(&format!("//! | `{name}` | {unit} |"))),
                "step metric {name} ({unit}) has no row in the module docs"
            );
        }
        for (name, unit, _) in SERIES {
            assert_eq!(unit_of(name), Some(*unit), "series {name}");
        }
        for doc in [
            "stream_tcp_bidir",
            "stream_udp_loss",
            "rr_tcp",
            "rr_crr_background",
            "cbr",
            "sweep",
            "lab_stream",
        ] {
            for m in extract(&fixture(doc)) {
                assert_eq!(unit_of(&m.name), Some(m.unit), "{doc}: {}", m.name);
                assert!(!m.unit.is_empty(), "{doc}: {}", m.name);
            }
        }
    }

    #[test]
    fn unit_of_handles_step_names_and_unknowns() {
        assert_eq!(unit_of("throughput_bps"), Some("bit/s"));
        assert_eq!(unit_of("step12.loss_fraction"), Some("fraction"));
        assert_eq!(unit_of("step0.size"), Some("bytes"));
        assert_eq!(unit_of("rtt_us"), Some("us"));
        assert_eq!(unit_of("step.size"), None);
        assert_eq!(unit_of("stepx.size"), None);
        assert_eq!(unit_of("step1.nope"), None);
        assert_eq!(unit_of("bogus"), None);
    }

    #[test]
    fn tcp_bidir_stream() {
        let m = extract(&fixture("stream_tcp_bidir"));
        has(&m, "ok", 1.0);
        has(&m, "c2s_bps", 14013579081.441574);
        has(&m, "s2c_bps", 14861309317.283667);
        has(
            &m,
            "throughput_bps",
            14013579081.441574 + 14861309317.283667,
        );
        has(&m, "sender_bps", 13981765440.504522 + 14740051151.334892);
        has(&m, "retransmits", 6.0);
        // Four sender flows: client c2s 1391, 1475; server s2c 1401, 1303.
        has(&m, "rtt_mean_us", (1391.0 + 1475.0 + 1401.0 + 1303.0) / 4.0);
        has(&m, "rtt_max_us", 2076.0);
        assert!(get(&m, "cpu_client_pct").unwrap() > 0.0);
        assert!(get(&m, "cpu_server_pct").is_some());
        // CPU per GB: each side's user + system seconds over the bytes
        // both directions' receivers got.
        let doc = fixture("stream_tcp_bidir");
        let bytes: f64 = doc["summary"]["directions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["receiver"]["bytes"].as_f64().unwrap())
            .sum();
        for side in ["client", "server"] {
            let cpu = &doc[side]["cpu"];
            let secs = cpu["user_s"].as_f64().unwrap() + cpu["system_s"].as_f64().unwrap();
            assert!(secs > 0.0 && bytes > 1e9);
            has(&m, &format!("cpu_{side}_s_per_gb"), secs / (bytes / 1e9));
        }
        for absent in ["loss_fraction", "late", "tps", "lab_valid", "sustained"] {
            assert_eq!(get(&m, absent), None, "{absent}");
        }
    }

    #[test]
    fn udp_stream_with_host_drops() {
        let doc = fixture("stream_udp_loss");
        let m = extract(&doc);
        has(&m, "ok", 1.0);
        has(&m, "c2s_bps", 858775243.0666577);
        has(&m, "throughput_bps", 858775243.0666577);
        has(&m, "loss_fraction", 112423.0 / 189152.0);
        has(&m, "lost", 112423.0);
        has(&m, "host_drops", 112423.0);
        has(&m, "network_lost", 0.0);
        has(&m, "out_of_order", 0.0);
        has(&m, "duplicates", 0.0);
        has(&m, "jitter_us", 16.713061755016483);
        has(&m, "late", 0.0);
        assert_eq!(get(&m, "retransmits"), None);
        assert_eq!(get(&m, "rtt_mean_us"), None);
        assert_eq!(
            get(&m, "cpu_client_pct"),
            doc["client"]["cpu"]["percent"].as_f64()
        );
    }

    #[test]
    fn udp_loss_needs_the_receivers_report() {
        let mut doc = fixture("stream_udp_loss");
        doc["summary"]["directions"][0]["receiver"] = Value::Null;
        doc["server"] = Value::Null;
        doc["status"] = "partial".into();
        let m = extract(&doc);
        has(&m, "ok", 0.0);
        has(&m, "throughput_bps", 2118141972.725637);
        has(&m, "late", 0.0);
        assert_eq!(get(&m, "loss_fraction"), None);
        assert_eq!(get(&m, "cpu_server_pct"), None);
    }

    #[test]
    fn rr_tcp() {
        let m = extract(&fixture("rr_tcp"));
        has(&m, "ok", 1.0);
        has(&m, "tps", 33405.79750962214);
        has(&m, "transactions", 33413.0);
        has(&m, "timed_out", 0.0);
        has(&m, "failed", 0.0);
        has(&m, "rr_late", 0.0);
        has(&m, "latency_min_us", 18.494);
        has(&m, "latency_mean_us", 29.918277706281987);
        has(&m, "latency_stddev_us", 30.547660186825738);
        has(&m, "latency_p50_us", 29.151);
        has(&m, "latency_p90_us", 30.079);
        has(&m, "latency_p99_us", 40.735);
        has(&m, "latency_p999_us", 53.855);
        has(&m, "latency_max_us", 4991.55);
        // No background flows, no connect figures.
        for absent in ["throughput_bps", "connect_mean_us", "retransmits"] {
            assert_eq!(get(&m, absent), None, "{absent}");
        }
    }

    #[test]
    fn rr_crr_with_background_stream() {
        let m = extract(&fixture("rr_crr_background"));
        has(&m, "tps", 10382.234829293082);
        has(&m, "latency_p99_us", 181.119);
        has(&m, "connect_mean_us", 59.218463546181255);
        has(&m, "connect_p50_us", 66.175);
        has(&m, "connect_p99_us", 104.191);
        has(&m, "connect_max_us", 1369.669);
        has(&m, "throughput_bps", 17204648760.833206);
        has(&m, "c2s_bps", 17204648760.833206);
        has(&m, "retransmits", 0.0);
    }

    #[test]
    fn rr_without_completed_transactions_has_no_latency() {
        let mut doc = fixture("rr_tcp");
        doc["summary"]["rr"]["latency"]["count"] = 0.into();
        let m = extract(&doc);
        assert_eq!(get(&m, "latency_p50_us"), None);
        has(&m, "tps", 33405.79750962214);
    }

    #[test]
    fn lab_run() {
        let doc = fixture("lab_stream");
        let m = extract(&doc);
        has(&m, "ok", 1.0);
        has(&m, "lab_valid", 1.0);
        has(&m, "lab_c2s_loss_drops", 27.0);
        has(&m, "lab_s2c_loss_drops", 10.0);
        has(&m, "lab_c2s_queue_drops", 0.0);
        has(&m, "lab_c2s_red_drops", 0.0);
        has(&m, "lab_c2s_ce_marks", 0.0);
        has(&m, "lab_c2s_unintended_drops", 0.0);
        has(&m, "lab_c2s_lateness_p99_us", 21.0);
        has(&m, "lab_s2c_lateness_p99_us", 25.0);
        has(&m, "lab_rtt_probe_median_us", 2122.18);
        assert!(get(&m, "throughput_bps").unwrap() > 0.0);

        let mut broken = doc.clone();
        broken["lab"]["accuracy"]["valid"] = false.into();
        broken["lab"]["accuracy"]["s2c"]["unintended_drops"]["tun_rx_dropped"] = 3.into();
        broken["lab"]["accuracy"]["s2c"]["unintended_drops"]["write_errors"] = 2.into();
        let m = extract(&broken);
        has(&m, "lab_valid", 0.0);
        has(&m, "lab_s2c_unintended_drops", 5.0);
    }

    #[test]
    fn cbr_report() {
        let doc = fixture("cbr");
        let m = extract(&doc);
        has(&m, "ok", 1.0);
        has(&m, "sustained", 1.0);
        has(&m, "best_bps_max", 10_000_000.0);
        has(&m, "best_bps_median", 10_000_000.0);
        has(&m, "best_bps_min", 10_000_000.0);
        has(&m, "cbr_runs", 1.0);
        has(&m, "cbr_unsustained_runs", 0.0);
        has(&m, "cbr_trials", 1.0);
        has(
            &m,
            "throughput_bps",
            doc["runs"][0]["trials"][0]["receiver_bps"]
                .as_f64()
                .unwrap(),
        );
        assert_eq!(get(&m, "notice_s"), None, "not SafeUDP");

        // Over SafeUDP: the deciding trial's reaction (a ladder's trial at
        // the run's best rate, not its last, failed one).
        let mut su = doc.clone();
        let mut second = su["runs"][0]["trials"][0].clone();
        second["rate_bps"] = 20_000_000.into();
        second["receiver_bps"] = 11e6.into();
        second["loss_fraction"] = 0.4.into();
        second["safeudp"] =
            serde_json::json!({"notice_s": 0.5, "enforced_s": 1.0, "ccid_drops": 900});
        su["runs"][0]["trials"][0]["safeudp"] =
            serde_json::json!({"notice_s": 1.5, "app_lowered_s": 2.0, "ccid_drops": 0});
        su["runs"][0]["trials"].as_array_mut().unwrap().push(second);
        let m = extract(&su);
        has(&m, "notice_s", 1.5);
        has(&m, "app_lowered_s", 2.0);
        has(&m, "ccid_drops", 0.0);
        assert_eq!(get(&m, "enforced_s"), None);
        su["runs"][0]["best_bps"] = Value::Null;
        let m = extract(&su);
        has(&m, "enforced_s", 1.0);
        has(&m, "ccid_drops", 900.0);
        has(&m, "loss_fraction", 0.4);

        let mut failed = doc;
        failed["summary"]["max"] = Value::Null;
        failed["summary"]["median"] = Value::Null;
        failed["summary"]["min"] = Value::Null;
        failed["summary"]["runs_without_a_sustained_rate"] = 1.into();
        failed["runs"][0]["trials"][0]["error"] = "server refused".into();
        let m = extract(&failed);
        has(&m, "ok", 0.0);
        has(&m, "sustained", 0.0);
        assert_eq!(get(&m, "best_bps_max"), None);
    }

    #[test]
    fn sweep_report() {
        let m = extract(&fixture("sweep"));
        has(&m, "ok", 1.0);
        has(&m, "steps", 3.0);
        has(&m, "max_throughput_bps", 49973559.27163938);
        has(&m, "max_loss_fraction", 0.0);
        has(&m, "step0.size", 64.0);
        has(&m, "step1.size", 664.0);
        has(&m, "step2.size", 1264.0);
        has(&m, "step0.offered_bps", 50_000_000.0);
        has(&m, "step0.throughput_bps", 49964000.056078084);
        has(&m, "step0.sender_bps", 49985275.43499635);
        has(&m, "step0.lost", 0.0);
        has(&m, "step0.jitter_us", 5.556531796935184);
        assert_eq!(get(&m, "step0.spacing_us"), None);
        assert_eq!(get(&m, "step3.size"), None);
    }

    #[test]
    fn usbmon_beside_a_result_gives_the_bus_figures() {
        let doc = serde_json::json!({
            "schema": "xferlab.result/2",
            "status": "ok",
            "summary": {"directions": []},
            "usbmon": {
                "encap": "ncm",
                "capacity_bytes_per_second": 53_248_000.0,
                "host_in": {"total": {"bytes": 10_000_000, "mbytes_per_second": 2.5, "frames_per_transfer": 3.5}},
                "host_out": {"total": {"bytes": 2_000_000, "mbytes_per_second": 0.5, "frames_per_transfer": 1.0}}
            }
        });
        // No measured seconds in the result: usbmon's own window.
        let m = extract(&doc);
        has(&m, "usb_in_bps", 20e6);
        has(&m, "usb_out_bps", 4e6);
        has(&m, "usb_bus_pct", 3e6 / 53_248_000.0 * 100.0);
        has(&m, "usb_in_frames_per_transfer", 3.5);
        has(&m, "usb_out_frames_per_transfer", 1.0);
        // With them: the bytes over the test's own window (2 s, the
        // longer direction's), not usbmon's longer one.
        let mut timed = doc.clone();
        timed["summary"]["directions"] = serde_json::json!([
            {"receiver": {"seconds": 1.5}},
            {"receiver": null, "sender": {"seconds": 2.0}}
        ]);
        let m = extract(&timed);
        has(&m, "usb_in_bps", 40e6);
        has(&m, "usb_out_bps", 8e6);
        has(&m, "usb_bus_pct", 6e6 / 53_248_000.0 * 100.0);
        // Without a framing there are no frames to count.
        let mut bare = doc.clone();
        bare["usbmon"]["encap"] = Value::Null;
        assert!(!extract(&bare)
            .iter()
            .any(|x| x.name.ends_with("frames_per_transfer")));
    }

    #[test]
    fn usb_model_prediction_and_background_load() {
        let doc = serde_json::json!({
            "schema": "xferlab.usb-model/1",
            "throughput_bps": 3e8,
            "pipes": [
                {"dir": "in", "throughput_bps": 2e8, "transfers_per_s": 100.0},
                {"dir": "out", "throughput_bps": 1e8, "transfers_per_s": 50.0}
            ],
            "load": {"workers": [{"kind": "cpu", "cpu_percent": 90.0}, {"kind": "mem", "cpu_percent": 70.0}]}
        });
        let m = extract(&doc);
        has(&m, "throughput_bps", 3e8);
        has(&m, "s2c_bps", 2e8);
        has(&m, "c2s_bps", 1e8);
        has(&m, "usb_out_transfers_per_second", 50.0);
        has(&m, "load_cpu_pct", 80.0);
    }

    #[test]
    fn unknown_schema_gives_nothing() {
        let mut doc = fixture("rr_tcp");
        doc["schema"] = "xferlab.result/3".into();
        assert!(extract(&doc).is_empty());
        assert_eq!(kind(&doc), None);
        assert!(series(&doc, "tps").is_none());
        assert!(extract(&serde_json::json!({"hello": 1})).is_empty());
        assert_eq!(kind(&fixture("cbr")), Some(DocKind::Cbr));
    }

    #[test]
    fn usb_pipes() {
        use crate::latency::LatencySummary;
        use crate::usb::stats::{
            ErrorCount, ErrorKind, UsbDeviceInfo, UsbPipeReport, UsbReport, UsbTotals,
        };
        let pipe =
            |endpoint: u8, transfers: u64, errors: Vec<ErrorCount>, p99: f64| UsbPipeReport {
                flow_id: u32::from(endpoint & 0x80 != 0),
                endpoint,
                max_packet: 512,
                transfer_size: 16384,
                depth: 8,
                pattern: crate::usb::Pattern::None,
                intervals: Vec::new(),
                total: UsbTotals {
                    transfers,
                    transfers_per_second: transfers as f64 / 2.0,
                    short_transfers: 3,
                    errors,
                    stalls_cleared: 1,
                    pattern_errors: 0,
                    latency: LatencySummary {
                        count: transfers,
                        min_us: 100.0,
                        mean_us: 200.0,
                        stddev_us: 50.0,
                        p50_us: 190.0,
                        p90_us: 250.0,
                        p99_us: p99,
                        p999_us: 400.0,
                        max_us: 900.0,
                    },
                },
            };
        let usb = UsbReport {
            device: UsbDeviceInfo::default(),
            interface: 0,
            alt_setting: 0,
            pipes: vec![
                pipe(
                    0x81,
                    1000,
                    vec![
                        ErrorCount {
                            kind: ErrorKind::Stall,
                            count: 1,
                        },
                        ErrorCount {
                            kind: ErrorKind::Cancelled,
                            count: 2,
                        },
                    ],
                    310.0,
                ),
                pipe(0x01, 500, Vec::new(), 320.0),
            ],
        };
        let doc = serde_json::json!({
            "schema": "xferlab.result/1",
            "status": "ok",
            "client": {"flows": [], "sums": [], "usb": serde_json::to_value(&usb).unwrap()},
            "server": null,
            "summary": {"directions": [
                {"direction": "c2s", "flows": 1,
                 "sender": {"bytes": 1, "seconds": 2.0, "bits_per_second": 300e6},
                 "receiver": null},
                {"direction": "s2c", "flows": 1,
                 "sender": {"bytes": 0, "seconds": 0.0, "bits_per_second": 0.0},
                 "receiver": {"bytes": 1, "seconds": 2.0, "bits_per_second": 400e6}}
            ]}
        });
        let m = extract(&doc);
        has(&m, "c2s_bps", 300e6);
        has(&m, "s2c_bps", 400e6);
        has(&m, "throughput_bps", 700e6);
        has(&m, "usb_in_transfers", 1000.0);
        has(&m, "usb_in_transfers_per_second", 500.0);
        has(&m, "usb_in_errors", 3.0);
        has(&m, "usb_in_short", 3.0);
        has(&m, "usb_in_stalls_cleared", 1.0);
        has(&m, "usb_in_pattern_errors", 0.0);
        has(&m, "usb_in_latency_p99_us", 310.0);
        has(&m, "usb_in_latency_mean_us", 200.0);
        has(&m, "usb_out_transfers", 500.0);
        has(&m, "usb_out_errors", 0.0);
        has(&m, "usb_out_latency_p99_us", 320.0);
        has(&m, "usb_out_latency_max_us", 900.0);
    }

    #[test]
    fn throughput_series_of_a_bidir_test() {
        let doc = fixture("stream_tcp_bidir");
        let c2s = series(&doc, "c2s_bps").unwrap();
        // c2s receivers are on the server.
        assert_eq!(c2s.len(), 5);
        near(c2s[0], (0.500828199, 13756247059.882504));
        near(c2s[4], (2.510540265, 13420963833.887705));
        let s2c = series(&doc, "s2c_bps").unwrap();
        near(s2c[1], (1.000325924, 16431963905.265987));
        let total = series(&doc, "throughput_bps").unwrap();
        assert_eq!(total.len(), 5);
        // Time from the c2s series, values summed by index; warm-up included.
        near(
            total[0],
            (0.500828199, 13756247059.882504 + 15447503725.162605),
        );
        assert_eq!(total[2].0, 1.500198811);

        let retransmits = series(&doc, "retransmits").unwrap();
        let values: Vec<f64> = retransmits.iter().map(|p| p.1).collect();
        // Client c2s senders 0,0,0,1,3; server s2c senders 0,0,0,0,2.
        assert_eq!(values, vec![0.0, 0.0, 0.0, 1.0, 5.0]);

        let rtt = series(&doc, "rtt_us").unwrap();
        assert_eq!(rtt.len(), 5);
        let first: Vec<f64> = doc["client"]["flows"]
            .as_array()
            .unwrap()
            .iter()
            .chain(doc["server"]["flows"].as_array().unwrap())
            .filter(|f| f["role"] == "sender")
            .map(|f| f["intervals"][0]["tcp"]["rtt_us"].as_f64().unwrap())
            .collect();
        assert_eq!(first.len(), 4);
        assert_eq!(rtt[0].1, first.iter().sum::<f64>() / 4.0);

        assert!(series(&doc, "loss_fraction").is_none());
        assert!(series(&doc, "tps").is_none());
        assert!(series(&doc, "nonsense").is_none());
    }

    #[test]
    fn udp_series() {
        let doc = fixture("stream_udp_loss");
        let loss = series(&doc, "loss_fraction").unwrap();
        assert_eq!(
            loss,
            vec![
                (0.500072291, 53968.0 / (35989.0 + 53968.0)),
                (1.000686509, 58455.0 / (40740.0 + 58455.0)),
            ]
        );
        let jitter = series(&doc, "jitter_us").unwrap();
        near(jitter[1], (1.000686509, 16.713061755016483));
        assert!(series(&doc, "rtt_us").is_none());
        assert!(series(&doc, "retransmits").is_none());
    }

    #[test]
    fn rr_series_and_cdf() {
        let doc = fixture("rr_tcp");
        let tps = series(&doc, "tps").unwrap();
        assert_eq!(tps.len(), 1);
        near(tps[0], (1.000215606, 33405.79750962214));
        let latency = series(&doc, "latency_mean_us").unwrap();
        assert_eq!(latency.len(), 1);
        near(latency[0], (1.000215606, 29.918277706281987));
        let cdf = latency_cdf(&doc).unwrap();
        assert_eq!(cdf.len(), 9);
        near(cdf[0], (18.494, 0.0));
        near(cdf[1], (29.151, 0.5));
        near(cdf[8], (4991.55, 1.0));
        assert!(cdf.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1));
        assert!(latency_cdf(&fixture("stream_tcp_bidir")).is_none());
        assert!(series(&fixture("cbr"), "throughput_bps").is_none());
    }

    #[test]
    fn formatting_by_unit() {
        assert_eq!(format_value(24771297808.055607, "bit/s"), "24.8 Gbit/s");
        assert_eq!(format_value(9_993_128.8, "bit/s"), "9.99 Mbit/s");
        assert_eq!(format_value(999_960.0, "bit/s"), "1.00 Mbit/s");
        assert_eq!(format_value(512.0, "bit/s"), "512 bit/s");
        assert_eq!(format_value(-1.5e9, "bit/s"), "-1.50 Gbit/s");
        assert_eq!(format_value(29.918, "us"), "29.9 µs");
        assert_eq!(format_value(0.0569, "us"), "0.0569 µs");
        assert_eq!(format_value(4991.55, "us"), "4.99 ms");
        assert_eq!(format_value(2_500_000.0, "us"), "2.50 s");
        assert_eq!(format_value(33405.8, "1/s"), "33.4 k/s");
        assert_eq!(format_value(0.5943, "fraction"), "59.4 %");
        assert_eq!(format_value(0.0, "fraction"), "0 %");
        assert_eq!(format_value(83.2937, "%"), "83.3 %");
        assert_eq!(format_value(1.0, "bool"), "yes");
        assert_eq!(format_value(0.0, "bool"), "no");
        assert_eq!(format_value(0.6, "bool"), "60.0 % yes");
        assert_eq!(format_value(112423.0, "count"), "112423");
        assert_eq!(format_value(2.5, "count"), "2.50");
        assert_eq!(format_value(1400.0, "bytes"), "1400 B");
        assert_eq!(format_value(1048576.0, "bytes"), "1.00 MiB");
        assert_eq!(format_value(1023.0 * 1024.0, "bytes"), "0.999 MiB");
        assert_eq!(format_value(16384.0, "bytes"), "16.0 KiB");
        assert_eq!(format_value(999.7, "us"), "1.00 ms");
        assert_eq!(format_value(f64::NAN, "bit/s"), "-");
        assert_eq!(format_value(f64::NEG_INFINITY, "count"), "-∞");
        assert_eq!(format_value(1.234, "widgets"), "1.23 widgets");
        assert_eq!(format_value(0.001234, ""), "0.00123");
    }
}
