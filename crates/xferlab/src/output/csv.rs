//! One row per flow and interval, for spreadsheets and plotting scripts.
//!
//! Nothing is written live: the rows come from the final [`TestResult`],
//! so they carry both sides' figures. Columns, in order:
//!
//! | column | meaning |
//! |---|---|
//! | `session` | test id (`TestResult::id`) |
//! | `endpoint` | `client` or `server`: the side that measured the row |
//! | `flow` | 0-based flow id, same on both sides; empty on `sum` rows |
//! | `direction` | `c2s` or `s2c` |
//! | `role` | `sender` or `receiver` (of that endpoint in that flow) |
//! | `kind` | `interval` (one reporting interval of one flow), `total` (one flow over the measured window, warm-up excluded) or `sum` (one interval summed over the flows of a direction and role) |
//! | `start_s`, `end_s` | seconds since that side started the test |
//! | `omitted` | `true` for warm-up intervals (not in the totals) |
//! | `bytes` | bytes moved in the row's time span |
//! | `bits_per_second` | `bytes` × 8 / (`end_s` − `start_s`) |
//! | `retransmits` | segments retransmitted in the span (senders only) |
//! | `rtt_us` | smoothed RTT at the end of the interval; on `total` rows the mean of those samples |
//! | `rttvar_us` | RTT variance at the end of the interval (`interval` rows only) |
//! | `cwnd_bytes` | congestion window × MSS at the end of the interval (`interval` rows only) |
//! | `delivery_rate_bps` | kernel's delivery-rate estimate at the end of the interval, bit/s (`interval` rows only) |
//! | `packets` | UDP: datagrams sent (senders) or distinct datagrams received (receivers) |
//! | `lost` | UDP receivers: sequence numbers missing in the span (gap-based; loss after the last datagram received shows only in the JSON `summary`) |
//! | `out_of_order` | UDP receivers: datagrams that arrived after a higher sequence number |
//! | `duplicates` | UDP receivers: datagrams received twice |
//! | `host_drops` | UDP receivers: datagrams the receiving socket dropped for lack of buffer (its drop counter), part of `lost` |
//! | `jitter_us` | UDP receivers: RFC 3550 jitter at the end of the span, µs |
//! | `owd_var_mean_us`, `owd_var_max_us` | UDP receivers: one-way delay above its minimum so far (queueing), mean and max over the span, µs |
//! | `late` | UDP senders: datagrams sent more than 1 ms after their scheduled time |
//! | `max_lateness_us` | UDP senders: the latest of those, µs behind schedule |
//! | `transactions`, `transactions_per_second` | rr rows: transactions completed (client) or answered (server) in the span |
//! | `timed_out`, `failed` | rr rows: transactions timed out / failed in the span |
//! | `latency_mean_us` … `latency_max_us` | rr client rows: latency mean, p50, p90, p99, p99.9, max (`rr_total` rows; `rr_interval`/`rr_sum` rows have the mean only) |
//! | `connect_mean_us` | tcp-crr client `rr_total` rows: mean connection set-up time |
//! | then each transport's own | the cells of its section, named after it (`mptcp_subflows`, ...): each transport's cells type, listed in [`SectionCells`], says what they mean |
//!
//! rr tests add rows of kind `rr_interval`, `rr_total` (per rr flow) and
//! `rr_sum` (all rr flows per interval, plus one over the measured window
//! with the merged latency). Their `direction` is `c2s` (the requests) and
//! their `role` is `sender` on the client, `receiver` on the server.
//!
//! Cells without data are empty, not zero: TCP columns on UDP rows and on
//! TCP receivers (no TCP_INFO), UDP columns on TCP rows and on `sum` rows,
//! and each UDP figure on the role that does not measure it. Field
//! meanings in full: docs/result-schema.md.

use std::io::{self, Write};

use serde::Serialize;
use xferlab_core::result::{Endpoint, FlowRole, SideReport, TcpSample, TestResult, UdpSample};
use xferlab_core::spec::FlowDirection;
use xferlab_core::transport::{SectionCells, TransportSection, SECTION_COLUMNS};

use super::{LiveFlow, Reporter, StartInfo};

/// Writes the CSV table described in the module documentation.
pub struct CsvReporter {
    out: Box<dyn Write + Send>,
}

impl CsvReporter {
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        CsvReporter { out }
    }
}

/// The shared column names (the fields of [`Line`]'s parts before the
/// transports' own; a test checks).
const SHARED_COLUMNS: [&str; 37] = [
    "session",
    "endpoint",
    "flow",
    "direction",
    "role",
    "kind",
    "start_s",
    "end_s",
    "omitted",
    "bytes",
    "bits_per_second",
    "retransmits",
    "rtt_us",
    "rttvar_us",
    "cwnd_bytes",
    "delivery_rate_bps",
    "packets",
    "lost",
    "out_of_order",
    "duplicates",
    "host_drops",
    "jitter_us",
    "owd_var_mean_us",
    "owd_var_max_us",
    "late",
    "max_lateness_us",
    "transactions",
    "transactions_per_second",
    "timed_out",
    "failed",
    "latency_mean_us",
    "latency_p50_us",
    "latency_p90_us",
    "latency_p99_us",
    "latency_p999_us",
    "latency_max_us",
    "connect_mean_us",
];

/// Every column name, written even when there are no rows so a consumer
/// always finds the header: the shared ones, then each transport's own
/// ([`SECTION_COLUMNS`]).
fn header() -> Vec<&'static str> {
    SHARED_COLUMNS
        .iter()
        .chain(SECTION_COLUMNS.iter().flat_map(|c| c.iter()))
        .copied()
        .collect()
}

#[derive(Serialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Interval,
    Total,
    Sum,
    RrInterval,
    RrTotal,
    RrSum,
}

/// One CSV line: the cells every row has, then the TCP and the UDP cells,
/// the rr cells and a transport's own. The csv crate writes a tuple of
/// structs as their fields in order, which lets each transport's cells be
/// filled in one place.
type Line<'a> = (Row<'a>, TcpCells, UdpCells, RrCells, SectionCells);

/// Request/response figures (rr rows only).
#[derive(Serialize, Default)]
struct RrCells {
    transactions: Option<u64>,
    transactions_per_second: Option<f64>,
    timed_out: Option<u64>,
    failed: Option<u64>,
    latency_mean_us: Option<f64>,
    latency_p50_us: Option<f64>,
    latency_p90_us: Option<f64>,
    latency_p99_us: Option<f64>,
    latency_p999_us: Option<f64>,
    latency_max_us: Option<f64>,
    connect_mean_us: Option<f64>,
}

impl RrCells {
    fn interval(iv: &xferlab_core::rr::report::RrInterval) -> Self {
        RrCells {
            transactions: Some(iv.transactions),
            transactions_per_second: Some(iv.per_second),
            timed_out: Some(iv.timed_out),
            failed: Some(iv.failed),
            latency_mean_us: iv.mean_latency_us,
            ..RrCells::default()
        }
    }

    fn total(
        t: &xferlab_core::rr::report::RrTotal,
        lat: Option<&xferlab_core::latency::LatencySummary>,
        connect: Option<&xferlab_core::latency::LatencySummary>,
    ) -> Self {
        RrCells {
            transactions: Some(t.transactions),
            transactions_per_second: Some(t.per_second),
            timed_out: Some(t.timed_out),
            failed: Some(t.failed),
            latency_mean_us: lat.map(|l| l.mean_us),
            latency_p50_us: lat.map(|l| l.p50_us),
            latency_p90_us: lat.map(|l| l.p90_us),
            latency_p99_us: lat.map(|l| l.p99_us),
            latency_p999_us: lat.map(|l| l.p999_us),
            latency_max_us: lat.map(|l| l.max_us),
            connect_mean_us: connect.map(|l| l.mean_us),
        }
    }
}

/// The rr rows of one side: per flow its intervals then its total, then
/// the interval sums and one sum over the measured window.
fn rr_rows<'a>(session: &'a str, side: &'a SideReport) -> Vec<Line<'a>> {
    let Some(rr) = side.rr() else {
        return Vec::new();
    };
    let role = if side.endpoint == Endpoint::Client {
        FlowRole::Sender
    } else {
        FlowRole::Receiver
    };
    let row = |flow, kind, start_s, end_s, omitted| Row {
        session,
        endpoint: side.endpoint,
        flow,
        direction: FlowDirection::C2s,
        role,
        kind,
        start_s,
        end_s,
        omitted,
        bytes: 0,
        bits_per_second: 0.0,
    };
    let mut out = Vec::new();
    let mut push = |r, c| {
        out.push((
            r,
            TcpCells::default(),
            UdpCells::default(),
            c,
            SectionCells::default(),
        ))
    };
    for f in &rr.flows {
        for iv in &f.intervals {
            push(
                row(
                    Some(f.id),
                    Kind::RrInterval,
                    iv.start_s,
                    iv.end_s,
                    iv.omitted,
                ),
                RrCells::interval(iv),
            );
        }
        let t = &f.total;
        push(
            row(Some(f.id), Kind::RrTotal, t.start_s, t.end_s, false),
            RrCells::total(t, f.latency.as_ref(), f.connect.as_ref()),
        );
    }
    for iv in &rr.sums {
        push(
            row(None, Kind::RrSum, iv.start_s, iv.end_s, iv.omitted),
            RrCells::interval(iv),
        );
    }
    let t = &rr.total;
    push(
        row(None, Kind::RrSum, t.start_s, t.end_s, false),
        RrCells::total(t, rr.latency.as_ref(), rr.connect.as_ref()),
    );
    out
}

/// The cells every row has.
#[derive(Serialize)]
struct Row<'a> {
    session: &'a str,
    endpoint: Endpoint,
    flow: Option<u32>,
    direction: FlowDirection,
    role: FlowRole,
    kind: Kind,
    start_s: f64,
    end_s: f64,
    omitted: bool,
    bytes: u64,
    bits_per_second: f64,
}

/// TCP_INFO figures; `None` becomes an empty cell.
#[derive(Serialize, Default)]
struct TcpCells {
    retransmits: Option<u64>,
    rtt_us: Option<u32>,
    rttvar_us: Option<u32>,
    cwnd_bytes: Option<u64>,
    delivery_rate_bps: Option<f64>,
}

impl From<&TcpSample> for TcpCells {
    /// The sample of one interval: every gauge at its end.
    fn from(t: &TcpSample) -> Self {
        TcpCells {
            retransmits: Some(t.retransmits),
            rtt_us: Some(t.rtt_us),
            rttvar_us: Some(t.rttvar_us),
            cwnd_bytes: Some(t.cwnd_bytes),
            delivery_rate_bps: Some(t.delivery_rate_bps),
        }
    }
}

/// Datagram figures; `None` becomes an empty cell.
#[derive(Serialize, Default)]
struct UdpCells {
    packets: Option<u64>,
    lost: Option<u64>,
    out_of_order: Option<u64>,
    duplicates: Option<u64>,
    host_drops: Option<u64>,
    jitter_us: Option<f64>,
    owd_var_mean_us: Option<f64>,
    owd_var_max_us: Option<f64>,
    late: Option<u64>,
    max_lateness_us: Option<f64>,
}

impl UdpCells {
    /// The figures `role` measures, the others left empty: the sample has
    /// every field for both roles, but a sender's "0 lost" or a receiver's
    /// "0 late" would be a claim nobody measured.
    fn new(u: Option<&UdpSample>, role: FlowRole) -> Self {
        let Some(u) = u else {
            return UdpCells::default();
        };
        let rx = role == FlowRole::Receiver;
        let tx = !rx;
        UdpCells {
            packets: Some(u.packets),
            lost: rx.then_some(u.lost),
            out_of_order: rx.then_some(u.out_of_order),
            duplicates: rx.then_some(u.duplicates),
            host_drops: rx.then_some(u.host_drops),
            jitter_us: rx.then_some(u.jitter_us),
            owd_var_mean_us: rx.then_some(u.owd_var_mean_us),
            owd_var_max_us: rx.then_some(u.owd_var_max_us),
            late: tx.then_some(u.late),
            max_lateness_us: tx.then_some(u.max_lateness_us),
        }
    }
}

/// Every row of one side: per flow its intervals then its total, then the
/// side's per-direction sums.
fn side_rows<'a>(session: &'a str, side: &'a SideReport) -> impl Iterator<Item = Line<'a>> + 'a {
    let endpoint = side.endpoint;
    let flows = side.flows.iter().flat_map(move |f| {
        let intervals = f.intervals.iter().map(move |iv| {
            let row = Row {
                session,
                endpoint,
                flow: Some(f.id),
                direction: f.direction,
                role: f.role,
                kind: Kind::Interval,
                start_s: iv.start_s,
                end_s: iv.end_s,
                omitted: iv.omitted,
                bytes: iv.bytes,
                bits_per_second: iv.bits_per_second,
            };
            let tcp = iv.tcp.as_ref().map(TcpCells::from).unwrap_or_default();
            (
                row,
                tcp,
                UdpCells::new(iv.udp.as_ref(), f.role),
                RrCells::default(),
                TransportSection::cells(iv.transport.as_ref()),
            )
        });
        let t = &f.total;
        let row = Row {
            session,
            endpoint,
            flow: Some(f.id),
            direction: f.direction,
            role: f.role,
            kind: Kind::Total,
            start_s: t.start_s,
            end_s: t.end_s,
            omitted: false,
            bytes: t.bytes,
            bits_per_second: t.bits_per_second,
        };
        // Totals have no end-of-interval gauges; the RTT is the mean.
        let tcp = TcpCells {
            retransmits: t.tcp.map(|t| t.retransmits),
            rtt_us: t.tcp.map(|t| t.rtt_mean_us),
            ..TcpCells::default()
        };
        let udp = UdpCells::new(t.udp.as_ref().map(|u| &u.window), f.role);
        let transport = TransportSection::cells(t.transport.as_ref());
        intervals.chain(std::iter::once((
            row,
            tcp,
            udp,
            RrCells::default(),
            transport,
        )))
    });
    let sums = side.sums.iter().map(move |s| {
        let row = Row {
            session,
            endpoint,
            flow: None,
            direction: s.direction,
            role: s.role,
            kind: Kind::Sum,
            start_s: s.start_s,
            end_s: s.end_s,
            omitted: s.omitted,
            bytes: s.bytes,
            bits_per_second: s.bits_per_second,
        };
        let tcp = TcpCells {
            retransmits: s.retransmits,
            ..TcpCells::default()
        };
        (
            row,
            tcp,
            UdpCells::default(),
            RrCells::default(),
            SectionCells::default(),
        )
    });
    flows.chain(sums).chain(rr_rows(session, side))
}

impl Reporter for CsvReporter {
    fn start(&mut self, _info: &StartInfo<'_>) -> io::Result<()> {
        Ok(())
    }

    fn interval(&mut self, _flows: &[LiveFlow]) -> io::Result<()> {
        Ok(())
    }

    fn finish(&mut self, result: &TestResult) -> io::Result<()> {
        let mut w = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(&mut self.out);
        w.write_record(header())?;
        for side in std::iter::once(&result.client).chain(&result.server) {
            for line in side_rows(&result.id, side) {
                w.serialize(line)?;
            }
        }
        w.flush()?;
        drop(w);
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::super::sample::{bidir_result, udp_result, SharedBuf};
    use super::*;

    fn render(r: &TestResult) -> String {
        let buf = SharedBuf::default();
        CsvReporter::new(buf.writer()).finish(r).unwrap();
        buf.text()
    }

    /// The rows of `r`'s CSV, after checking the header.
    fn rows(r: &TestResult) -> Vec<csv::StringRecord> {
        let text = render(r);
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        assert_eq!(rd.headers().unwrap(), &csv::StringRecord::from(header()));
        rd.records().map(Result::unwrap).collect()
    }

    fn col(name: &str) -> usize {
        header().iter().position(|h| *h == name).unwrap()
    }

    /// The cells of `row` from column `from` on, `n` of them.
    fn cells<'a>(row: &'a csv::StringRecord, from: &str, n: usize) -> Vec<&'a str> {
        row.iter().skip(col(from)).take(n).collect()
    }

    /// The rows of `endpoint`, flow `flow`, of the given kind, in order.
    fn select<'a>(
        rows: &'a [csv::StringRecord],
        endpoint: &str,
        flow: &str,
        kind: &str,
    ) -> Vec<&'a csv::StringRecord> {
        rows.iter()
            .filter(|r| {
                &r[col("endpoint")] == endpoint
                    && &r[col("flow")] == flow
                    && &r[col("kind")] == kind
            })
            .collect()
    }

    /// A transport's own section has its own columns, on the rows of the
    /// flows that carry it, and nowhere else.
    #[test]
    fn mptcp_cells_come_from_the_flows_section() {
        use xferlab_core::transport::mptcp::{MptcpSample, SubflowSample};
        let mut r = bidir_result();
        let section = TransportSection::Mptcp(MptcpSample {
            retransmits: 3,
            bytes_retrans: 4344,
            subflows: vec![SubflowSample::default(); 2],
            ..MptcpSample::default()
        });
        let f = &mut r.client.flows[0];
        f.intervals[0].transport = Some(section.clone());
        f.total.transport = Some(section);
        let id = f.id.to_string();
        let rows = rows(&r);
        let cols = |row: &csv::StringRecord| cells(row, "mptcp_subflows", 4).join(",");
        let intervals = select(&rows, "client", &id, "interval");
        assert_eq!(cols(intervals[0]), "2,false,3,4344");
        assert_eq!(cols(intervals[1]), ",,,");
        assert_eq!(
            cols(select(&rows, "client", &id, "total")[0]),
            "2,false,3,4344"
        );
        assert!(select(&rows, "server", &id, "interval")
            .iter()
            .all(|row| cols(row) == ",,,"));
    }

    #[test]
    fn header_matches_the_row_fields() {
        let r = bidir_result();
        let row = side_rows(&r.id, &r.client).next().unwrap();
        let mut w = csv::Writer::from_writer(Vec::new());
        w.serialize(row).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        assert_eq!(text.lines().next(), Some(header().join(",").as_str()));
    }

    #[test]
    fn one_row_per_flow_interval_plus_totals_and_sums() {
        let rows = rows(&bidir_result());
        // Per side: 4 flows x (4 intervals + 1 total) + 2 directions x 4 sums.
        assert_eq!(rows.len(), 2 * (4 * (4 + 1) + 2 * 4));
        let count = |kind: &str| rows.iter().filter(|r| &r[col("kind")] == kind).count();
        assert_eq!(
            (count("interval"), count("total"), count("sum")),
            (32, 8, 16)
        );

        let first = &rows[0];
        assert_eq!(
            cells(first, "session", col("packets")),
            [
                "7f3a9c2e41d05b68",
                "client",
                "0",
                "c2s",
                "sender",
                "interval",
                "0.0",
                "1.0",
                "true",
                "1200000000",
                "9600000000.0",
                "0",
                "40",
                "10",
                "3276800",
                "9800000000.0"
            ]
        );
        // Receivers have no TCP_INFO figures: empty cells, not zeros.
        let receiver = rows
            .iter()
            .find(|r| &r[col("role")] == "receiver" && &r[col("kind")] == "interval")
            .unwrap();
        assert_eq!(cells(receiver, "retransmits", 5), [""; 5]);
        // No datagram figures on any TCP row.
        assert!(rows
            .iter()
            .all(|r| cells(r, "packets", 10).iter().all(|c| c.is_empty())));
        let sum = rows.iter().find(|r| &r[col("kind")] == "sum").unwrap();
        assert_eq!(&sum[col("flow")], "");
        assert!(rows.iter().any(|r| &r[col("endpoint")] == "server"));
    }

    #[test]
    fn udp_rows_have_each_role_s_datagram_figures_and_no_tcp_ones() {
        let rows = rows(&udp_result());
        // Per side: 2 flows x (4 intervals + 1 total) + 1 direction x 4 sums.
        assert_eq!(rows.len(), 2 * (2 * (4 + 1) + 4));
        assert!(rows
            .iter()
            .all(|r| cells(r, "retransmits", 5).iter().all(|c| c.is_empty())));

        // Flow 1's first measured interval at the receiver: 12 lost, 10 of
        // them dropped by the receiving socket. Senders' cells are empty.
        let received = select(&rows, "server", "1", "interval")[1];
        assert_eq!(&received[col("start_s")], "1.0");
        assert_eq!(
            cells(received, "packets", 10),
            ["8916", "12", "1", "0", "10", "21.0", "5.5", "610.0", "", ""]
        );
        let total = select(&rows, "server", "1", "total")[0];
        assert_eq!(cells(total, "packets", 3), ["26767", "15", "1"]);
        assert_eq!(&total[col("host_drops")], "10");

        let sent = select(&rows, "client", "1", "total")[0];
        assert_eq!(
            cells(sent, "packets", 10),
            ["26784", "", "", "", "", "", "", "", "4", "3750.0"]
        );
        let sum = rows.iter().find(|r| &r[col("kind")] == "sum").unwrap();
        assert!(cells(sum, "packets", 10).iter().all(|c| c.is_empty()));
    }

    #[test]
    fn header_is_written_without_rows() {
        let mut r = bidir_result();
        r.server = None;
        r.client.flows.clear();
        r.client.sums.clear();
        assert_eq!(render(&r), format!("{}\n", header().join(",")));
    }
}
