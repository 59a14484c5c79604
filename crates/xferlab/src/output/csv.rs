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
//!
//! Cells without data (receivers have no TCP_INFO figures) are empty.

use std::io::{self, Write};

use serde::Serialize;
use xferlab_core::result::{Endpoint, FlowRole, SideReport, TestResult};
use xferlab_core::spec::FlowDirection;

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

/// The column names, written even when there are no rows so a consumer
/// always finds the header. Must match [`Row`]'s fields (a test checks).
const HEADER: [&str; 16] = [
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
];

#[derive(Serialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Interval,
    Total,
    Sum,
}

/// One CSV line; `None` becomes an empty cell.
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
    retransmits: Option<u64>,
    rtt_us: Option<u32>,
    rttvar_us: Option<u32>,
    cwnd_bytes: Option<u64>,
    delivery_rate_bps: Option<f64>,
}

/// Every row of one side: per flow its intervals then its total, then the
/// side's per-direction sums.
fn side_rows<'a>(session: &'a str, side: &'a SideReport) -> impl Iterator<Item = Row<'a>> + 'a {
    let endpoint = side.endpoint;
    let flows = side.flows.iter().flat_map(move |f| {
        let intervals = f.intervals.iter().map(move |iv| Row {
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
            retransmits: iv.tcp.map(|t| t.retransmits),
            rtt_us: iv.tcp.map(|t| t.rtt_us),
            rttvar_us: iv.tcp.map(|t| t.rttvar_us),
            cwnd_bytes: iv.tcp.map(|t| t.cwnd_bytes),
            delivery_rate_bps: iv.tcp.map(|t| t.delivery_rate_bps),
        });
        let t = &f.total;
        let total = Row {
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
            retransmits: t.tcp.map(|t| t.retransmits),
            rtt_us: t.tcp.map(|t| t.rtt_mean_us),
            rttvar_us: None,
            cwnd_bytes: None,
            delivery_rate_bps: None,
        };
        intervals.chain(std::iter::once(total))
    });
    let sums = side.sums.iter().map(move |s| Row {
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
        retransmits: s.retransmits,
        rtt_us: None,
        rttvar_us: None,
        cwnd_bytes: None,
        delivery_rate_bps: None,
    });
    flows.chain(sums)
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
        w.write_record(HEADER)?;
        for side in std::iter::once(&result.client).chain(&result.server) {
            for row in side_rows(&result.id, side) {
                w.serialize(row)?;
            }
        }
        w.flush()?;
        drop(w);
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::super::sample::{bidir_result, SharedBuf};
    use super::*;

    fn render(r: &TestResult) -> String {
        let buf = SharedBuf::default();
        CsvReporter::new(buf.writer()).finish(r).unwrap();
        buf.text()
    }

    #[test]
    fn header_matches_the_row_fields() {
        let r = bidir_result();
        let row = side_rows(&r.id, &r.client).next().unwrap();
        let mut w = csv::Writer::from_writer(Vec::new());
        w.serialize(row).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        assert_eq!(text.lines().next(), Some(HEADER.join(",").as_str()));
    }

    #[test]
    fn one_row_per_flow_interval_plus_totals_and_sums() {
        let r = bidir_result();
        let text = render(&r);
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        assert_eq!(
            rd.headers().unwrap(),
            &csv::StringRecord::from(HEADER.to_vec())
        );
        let rows: Vec<csv::StringRecord> = rd.records().map(Result::unwrap).collect();
        // Per side: 4 flows x (4 intervals + 1 total) + 2 directions x 4 sums.
        assert_eq!(rows.len(), 2 * (4 * (4 + 1) + 2 * 4));
        let col = |name: &str| HEADER.iter().position(|h| *h == name).unwrap();
        let count = |kind: &str| rows.iter().filter(|r| &r[col("kind")] == kind).count();
        assert_eq!(
            (count("interval"), count("total"), count("sum")),
            (32, 8, 16)
        );

        let first = &rows[0];
        assert_eq!(
            first.iter().collect::<Vec<_>>(),
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
        assert_eq!(
            receiver.iter().skip(col("retransmits")).collect::<Vec<_>>(),
            ["", "", "", "", ""]
        );
        let sum = rows.iter().find(|r| &r[col("kind")] == "sum").unwrap();
        assert_eq!(&sum[col("flow")], "");
        assert!(rows.iter().any(|r| &r[col("endpoint")] == "server"));
    }

    #[test]
    fn header_is_written_without_rows() {
        let mut r = bidir_result();
        r.server = None;
        r.client.flows.clear();
        r.client.sums.clear();
        assert_eq!(render(&r), format!("{}\n", HEADER.join(",")));
    }
}
