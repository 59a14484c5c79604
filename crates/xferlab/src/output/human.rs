//! The live table a person watches, in the spirit of iperf3's.
//!
//! Layout: what is being tested and the flows at start; one line per flow
//! per interval (plus `[SUM]` lines when a direction has several flows);
//! then the totals, sender line from the sending side's report and
//! receiver line from the receiving side's, and a short block with the
//! figures that explain a number (RTT, retransmits, limits, datagram loss
//! and where it happened, CPU, kernel counters), warnings, errors and the
//! status.
//!
//! The columns after the bitrate depend on the transport: TCP rows show
//! the sender's retransmits, congestion window and RTT; UDP rows show what
//! each role can see of the datagrams ([`udp_cells`]), the receiver's
//! jitter and loss, the sender's count and its late sends.
//!
//! Flow ids are printed 1-based (`[  1]`, as iperf3 users expect); ids in
//! JSON and CSV stay 0-based. [`Label`] is the one place that converts.
//!
//! USB bulk runs have their own columns and summary: [`super::human_usb`].

use std::fmt;
use std::io::{self, Write};

use xferlab_core::result::{
    CpuUsage, DirectionSummary, Endpoint, FlowEnd, FlowReport, FlowRole, KernelCounters,
    SideReport, SideTransportReport, Status, SumInterval, TcpSample, TestResult, Throughput,
    UdpSample, UdpSummary,
};
use xferlab_core::spec::{
    Affinity, Direction, FlowDirection, Knobs, Limit, Pattern, RecvMode, SendMode, TestSpec,
    Transport,
};
use xferlab_core::transport::Carrier;
use xferlab_core::units::{format_bytes, Micros, RateUnit};
use xferlab_core::usb::stats::{UsbReport, UsbSample};

use super::{human_usb, GadgetStart, LiveFlow, Reporter, StartInfo};

pub(super) const SEPARATOR: &str = "- - - - - - - - - - - - - - - - - - - - - - - - -";

/// Writes the human-readable table; see the module documentation.
pub struct HumanReporter {
    out: Box<dyn Write + Send>,
    unit: RateUnit,
    /// From the spec at start: picks the live table's columns.
    transport: Transport,
    /// Whether its flows count datagrams (the jitter and loss columns).
    datagrams: bool,
    /// Interval reports printed so far: the column header goes before the
    /// first, separators between later ones.
    intervals_shown: u64,
}

impl HumanReporter {
    pub fn new(out: Box<dyn Write + Send>, unit: RateUnit) -> Self {
        HumanReporter {
            out,
            unit,
            transport: Transport::Tcp,
            datagrams: false,
            intervals_shown: 0,
        }
    }

    /// Per flow, the sender line and then the receiver line, each from the
    /// side that played that role; then `[SUM]` lines when a direction has
    /// several flows.
    fn write_totals(&mut self, r: &TestResult, table: &Table) -> io::Result<()> {
        writeln!(
            self.out,
            "{}",
            table.header(&titles(
                r.spec.transport,
                r.spec.transport.model().counts_datagrams(&r.spec.knobs),
                false,
            ))
        )?;
        for dir in directions(r) {
            let sending = sending_side(r, dir);
            let receiving = receiving_side(r, dir);
            let mut ids: Vec<u32> = [sending, receiving]
                .into_iter()
                .flatten()
                .flat_map(|s| s.flows.iter().filter(|f| f.direction == dir).map(|f| f.id))
                .collect();
            ids.sort_unstable();
            ids.dedup();
            for &id in &ids {
                for (side, role) in [(sending, FlowRole::Sender), (receiving, FlowRole::Receiver)] {
                    if let Some(f) =
                        side.and_then(|s| s.flows.iter().find(|f| f.id == id && f.role == role))
                    {
                        writeln!(self.out, "{}", table.total_row(f))?;
                    }
                }
            }
            if ids.len() > 1 {
                let summary = r.summary.directions.iter().find(|d| d.direction == dir);
                let sent = summary.map(|d| (d.sender, d.retransmits));
                let received = summary.and_then(|d| d.receiver).map(|tp| (tp, None));
                for (side, role, figures) in [
                    (sending, FlowRole::Sender, sent),
                    (receiving, FlowRole::Receiver, received),
                ] {
                    let Some(side) = side else { continue };
                    if let (Some(span), Some((tp, retr))) = (span(side, dir, role), figures) {
                        let udp = udp_sum(
                            flows_of(side, dir, role).filter_map(|f| f.total.udp.map(|u| u.window)),
                        );
                        let cells = udp.map_or_else(|| retr_cell(retr), |u| udp_cells(&u, role));
                        writeln!(
                            self.out,
                            "{}",
                            table.sum_total_row(dir, role, span, &tp, &cells)
                        )?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Per direction: both ends' rates, then what the senders' TCP saw or
    /// what became of the datagrams.
    fn write_directions(&mut self, r: &TestResult) -> io::Result<()> {
        let rate = |tp: &Throughput| self.unit.format_rate(tp.bits_per_second);
        for d in &r.summary.directions {
            let dir = d.direction.label();
            let sender = match sending_side(r, d.direction) {
                Some(_) => rate(&d.sender),
                None => "n/a".into(),
            };
            let receiver = d.receiver.as_ref().map_or_else(|| "n/a".into(), rate);
            let flows = plural(d.flows, "flow");
            writeln!(
                self.out,
                "{dir}: sender {sender}, receiver {receiver} ({flows})"
            )?;
            if let Some(tcp) =
                sending_side(r, d.direction).and_then(|s| TcpSummary::of(s, d.direction))
            {
                writeln!(self.out, "{dir} TCP: {tcp}")?;
            }
            if let Some(udp) = UdpLine::of(d) {
                writeln!(self.out, "{dir} UDP: {udp}")?;
            }
            // A sender's own state (a CCID's) lives with the sender: the
            // server's side with -R, which reaches the client only in the
            // result.
            for s in sending_side(r, d.direction).into_iter().flat_map(|s| {
                flows_of(s, d.direction, FlowRole::Sender)
                    .filter_map(|f| f.total.transport.as_ref())
            }) {
                if s.in_summary() {
                    writeln!(self.out, "{dir} sender {}", s.describe())?;
                }
            }
        }
        Ok(())
    }

    fn write_cpu(&mut self, r: &TestResult) -> io::Result<()> {
        let server = r
            .server
            .as_ref()
            .map_or_else(|| "n/a".into(), |s| cpu(&s.cpu));
        writeln!(
            self.out,
            "CPU client {}  server {server}",
            cpu(&r.client.cpu)
        )
    }

    /// One line of [`notable_counters`] for `side`, labelled `who`.
    fn write_counters(&mut self, side: &SideReport, who: &str) -> io::Result<()> {
        let shown: Vec<String> = notable_counters(&side.counters)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        if shown.is_empty() {
            return Ok(());
        }
        let iface = side
            .counters
            .interface
            .as_deref()
            .map(|i| format!(" ({i})"))
            .unwrap_or_default();
        writeln!(self.out, "Counters {who}{iface}: {}", shown.join(", "))
    }
}

impl Reporter for HumanReporter {
    fn start(&mut self, info: &StartInfo<'_>) -> io::Result<()> {
        self.transport = info.spec.transport;
        self.datagrams = info
            .spec
            .transport
            .model()
            .counts_datagrams(&info.spec.knobs);
        let embedded = if info.embedded {
            " (in-process server on loopback)"
        } else {
            ""
        };
        writeln!(
            self.out,
            "Server {}{embedded}, session {}",
            info.server, info.session
        )?;
        if let Some(title) = &info.spec.title {
            writeln!(self.out, "Title: {title}")?;
        }
        writeln!(self.out, "Test: {}", describe_test(info.spec))?;
        if let Some(sockets) = describe_socket_knobs(&info.spec.knobs, self.unit) {
            writeln!(self.out, "Sockets: {sockets}")?;
        }
        for f in info.flows {
            writeln!(
                self.out,
                "{} {} {:<8}  local {} -> remote {}",
                Label::Flow(f.id),
                f.direction.label(),
                role_name(f.role),
                f.local,
                f.remote
            )?;
        }
        self.out.flush()
    }

    fn interval(&mut self, flows: &[LiveFlow]) -> io::Result<()> {
        if flows.is_empty() {
            return Ok(());
        }
        let table = Table::new(self.unit, flows.iter().map(|f| f.direction));
        if self.intervals_shown == 0 {
            writeln!(
                self.out,
                "{}",
                table.header(&titles(self.transport, self.datagrams, true))
            )?;
        } else if flows.len() > 1 {
            writeln!(self.out, "{SEPARATOR}")?;
        }
        for f in flows {
            let iv = &f.interval;
            let lead = table.lead(
                Label::Flow(f.id),
                f.direction,
                iv.start_s,
                iv.end_s,
                iv.bytes,
                iv.bits_per_second,
            );
            let cells = match (iv.tcp, iv.udp) {
                (Some(t), _) => tcp_cells(&t),
                (None, Some(u)) => udp_cells(&u, f.role),
                (None, None) => String::new(),
            };
            writeln!(self.out, "{lead}{cells}{}", omitted(iv.omitted))?;
            if let Some(section) = &iv.transport {
                writeln!(self.out, "{:6}{}", "", section.describe())?;
            }
        }
        for (s, udp) in live_sums(flows) {
            let lead = table.lead(
                Label::Sum,
                s.direction,
                s.start_s,
                s.end_s,
                s.bytes,
                s.bits_per_second,
            );
            // TCP sums show only the senders' retransmits (receivers have
            // no TCP figures); UDP sums the same columns as their flows.
            let cells = match (udp, s.retransmits) {
                (Some(u), _) => udp_cells(&u, s.role),
                (None, Some(r)) => retr_cell(Some(r)),
                (None, None) => String::new(),
            };
            writeln!(self.out, "{lead}{cells}{}", omitted(s.omitted))?;
        }
        self.intervals_shown += 1;
        self.out.flush()
    }

    fn rr_interval(&mut self, sum: &xferlab_core::rr::report::RrInterval) -> io::Result<()> {
        writeln!(self.out, "{}", super::rr::interval_line(sum))?;
        self.out.flush()
    }

    fn usb_link_start(&mut self, info: &StartInfo<'_>, what: &str) -> io::Result<()> {
        self.transport = info.spec.transport;
        human_usb::write_link_start(&mut self.out, info, what)?;
        self.out.flush()
    }

    fn usb_start(&mut self, info: &StartInfo<'_>, usb: &UsbReport) -> io::Result<()> {
        self.transport = info.spec.transport;
        human_usb::write_start(&mut self.out, info, usb)?;
        self.out.flush()
    }

    fn usb_gadget_start(&mut self, info: &StartInfo<'_>, g: &GadgetStart<'_>) -> io::Result<()> {
        self.transport = info.spec.transport;
        writeln!(self.out, "{}", human_usb::gadget_start_line(info.spec, g))?;
        if let Some(title) = &info.spec.title {
            writeln!(self.out, "Title: {title}")?;
        }
        self.out.flush()
    }

    fn usb_interval(&mut self, flows: &[LiveFlow], usb: &[UsbSample]) -> io::Result<()> {
        if flows.is_empty() {
            return Ok(());
        }
        if self.intervals_shown == 0 {
            writeln!(self.out, "{}", human_usb::HEADER)?;
        } else if flows.len() > 1 {
            writeln!(self.out, "{SEPARATOR}")?;
        }
        human_usb::write_interval(&mut self.out, self.unit, flows, usb)?;
        self.intervals_shown += 1;
        self.out.flush()
    }

    fn finish(&mut self, r: &TestResult) -> io::Result<()> {
        if let Some(SideTransportReport::UsbGadget(g)) = &r.client.transport {
            human_usb::write_gadget_finish(&mut self.out, r, g)?;
            writeln!(self.out, "Status: {}", status_name(r.status))?;
            return self.out.flush();
        }
        if let Some(usb) = r.client.usb() {
            let shown = usize::try_from(self.intervals_shown).unwrap_or(usize::MAX);
            human_usb::write_finish(&mut self.out, self.unit, r, usb, shown)?;
            writeln!(self.out, "Status: {}", status_name(r.status))?;
            return self.out.flush();
        }
        writeln!(self.out, "{SEPARATOR}")?;
        // A USB run (`usb net`, `usb mon`) has one side: nothing is missing.
        if r.server.is_none() && r.spec.transport.carrier() != Carrier::UsbBulk {
            writeln!(self.out, "The server's report is missing: its figures (c2s receiver, s2c sender) are not shown.")?;
        }
        let all_flows = r
            .client
            .flows
            .iter()
            .chain(r.server.iter().flat_map(|s| &s.flows));
        let table = Table::new(self.unit, all_flows.map(|f| f.direction));
        // An rr test without background flows has no stream table.
        if !(r.client.flows.is_empty() && r.client.rr().is_some()) {
            self.write_totals(r, &table)?;
            writeln!(self.out)?;
        }
        self.write_directions(r)?;
        write!(self.out, "{}", super::rr::summary(r))?;
        self.write_cpu(r)?;
        // An in-process server reads the same host counters as the client:
        // show them once.
        let shared = r.client.embedded && r.server.is_some();
        self.write_counters(&r.client, if shared { "client+server" } else { "client" })?;
        if let Some(server) = r.server.as_ref().filter(|_| !shared) {
            self.write_counters(server, "server")?;
        }
        for side in std::iter::once(&r.client).chain(&r.server) {
            for w in &side.warnings {
                writeln!(self.out, "Warning ({}): {w}", endpoint_name(side.endpoint))?;
            }
        }
        for e in &r.errors {
            writeln!(self.out, "Error: {e}")?;
        }
        if let Some(text) = &r.server_output {
            writeln!(self.out, "\nServer output:\n{}", text.trim_end())?;
        }
        writeln!(self.out, "Status: {}", status_name(r.status))?;
        self.out.flush()
    }
}

// Column widths, shared by headers and rows so they line up. Titles are
// left-aligned at the column start, numbers right-aligned, as in iperf3.
const INTERVAL_W: usize = 17; // "  0.00-1.00   sec"
const TRANSFER_W: usize = 11; // "2.31 GBytes"
const RATE_W: usize = 15; // "5.50 MBytes/sec"
const RETR_W: usize = 4;
const CWND_W: usize = 11;
const RTT_W: usize = 8; // "123.4 ms"
const JITTER_W: usize = 9; // "12.345 ms"

/// Row label: a flow (printed 1-based) or the sum of a direction's flows.
#[derive(Clone, Copy)]
enum Label {
    Flow(u32),
    Sum,
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Label::Flow(id) => write!(f, "[{:>3}]", u64::from(*id) + 1),
            Label::Sum => f.write_str("[SUM]"),
        }
    }
}

/// The common columns of interval and total rows: label, (direction),
/// interval, transfer, bitrate. The direction column appears only when
/// the rows cover both directions, so one-way tests look like iperf3.
struct Table {
    unit: RateUnit,
    with_direction: bool,
}

impl Table {
    fn new(unit: RateUnit, mut directions: impl Iterator<Item = FlowDirection>) -> Self {
        let first = directions.next();
        let with_direction = directions.any(|d| Some(d) != first);
        Table {
            unit,
            with_direction,
        }
    }

    fn header(&self, tail: &str) -> String {
        let dir = if self.with_direction { " Dir" } else { "" };
        format!(
            "[ ID]{dir} {:<INTERVAL_W$}  {:<TRANSFER_W$}  {:<RATE_W$}  {tail}",
            "Interval", "Transfer", "Bitrate"
        )
    }

    fn lead(
        &self,
        label: Label,
        dir: FlowDirection,
        start_s: f64,
        end_s: f64,
        bytes: u64,
        bps: f64,
    ) -> String {
        let dir = if self.with_direction {
            format!(" {}", dir.label())
        } else {
            String::new()
        };
        format!(
            "{label}{dir} {:<INTERVAL_W$}  {:>TRANSFER_W$}  {:>RATE_W$}",
            format!("{start_s:6.2}-{end_s:<6.2} sec"),
            format_bytes(bytes),
            self.unit.format_rate(bps)
        )
    }

    /// One flow's total as seen by the side that reported it.
    fn total_row(&self, f: &FlowReport) -> String {
        let t = &f.total;
        let lead = self.lead(
            Label::Flow(f.id),
            f.direction,
            t.start_s,
            t.end_s,
            t.bytes,
            t.bits_per_second,
        );
        let cells = match t.udp {
            Some(u) => udp_cells(&u.window, f.role),
            None => retr_cell(t.tcp.map(|tcp| tcp.retransmits)),
        };
        let end = match &f.end {
            FlowEnd::Completed => String::new(),
            FlowEnd::Aborted(reason) => format!("  aborted: {reason}"),
        };
        format!("{lead}{cells}  {}{end}", role_name(f.role))
    }

    /// A direction's sum as the summary has it, over the span of its flows,
    /// with the transport's `cells` as [`retr_cell`] or [`udp_cells`] make
    /// them.
    fn sum_total_row(
        &self,
        dir: FlowDirection,
        role: FlowRole,
        (start, end): (f64, f64),
        tp: &Throughput,
        cells: &str,
    ) -> String {
        let lead = self.lead(Label::Sum, dir, start, end, tp.bytes, tp.bits_per_second);
        format!("{lead}{cells}  {}", role_name(role))
    }
}

/// TCP columns of a live row: retransmits, congestion window, RTT.
fn tcp_cells(t: &TcpSample) -> String {
    format!(
        "  {:>RETR_W$}  {:>CWND_W$}  {:>RTT_W$}",
        t.retransmits,
        format_bytes(t.cwnd_bytes),
        Micros(u64::from(t.rtt_us)).to_string()
    )
}

/// The retransmits column of TCP total and sum rows; blank for receivers,
/// which have no TCP_INFO figures.
fn retr_cell(retransmits: Option<u64>) -> String {
    let retr = retransmits.map(|r| r.to_string()).unwrap_or_default();
    format!("  {retr:>RETR_W$}")
}

/// Titles of the columns after the bitrate: TCP's live rows show the
/// gauges of [`tcp_cells`], its totals only [`retr_cell`]; UDP rows show
/// [`udp_cells`] everywhere.
fn titles(transport: Transport, datagrams: bool, live: bool) -> String {
    let model = transport.model();
    match (model.tcp_info(), datagrams, live) {
        (true, _, true) => format!("{:<RETR_W$}  {:<CWND_W$}  RTT", "Retr", "Cwnd"),
        (true, _, false) => "Retr".into(),
        (false, true, _) => {
            format!("{:<JITTER_W$}  Lost/Total Datagrams", "Jitter")
        }
        (false, _, _) => String::new(),
    }
}

/// The UDP columns of any row (flow or sum, interval or total), showing
/// what `role` can see: a receiver its jitter and `lost/expected (pct)`
/// as iperf3 writes it, then host drops, reordering and duplicates when
/// there were any; a sender (no jitter) its datagram count and, when
/// there were any, late sends with the worst delay, which say the stream
/// was not the constant rate asked for. The counts column has no fixed
/// width: it is the last one.
fn udp_cells(u: &UdpSample, role: FlowRole) -> String {
    let (jitter, count, notes): (String, String, Vec<String>) = match role {
        FlowRole::Receiver => {
            let expected = u.packets + u.lost;
            let count = format!("{}/{expected} ({})", u.lost, percent(u.lost, expected));
            let notes = [
                ("host drops", u.host_drops),
                ("out of order", u.out_of_order),
                ("duplicates", u.duplicates),
            ]
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .map(|(what, n)| format!("{what} {n}"))
            .collect();
            (millis(u.jitter_us), count, notes)
        }
        FlowRole::Sender => {
            let notes = (u.late > 0)
                .then(|| format!("late {} (max {})", u.late, micros(u.max_lateness_us)))
                .into_iter()
                .collect();
            (String::new(), format!("{} sent", u.packets), notes)
        }
    };
    let notes = if notes.is_empty() {
        String::new()
    } else {
        format!("  {}", notes.join(", "))
    };
    format!("  {jitter:>JITTER_W$}  {count}{notes}")
}

/// The datagram figures of several flows as one: counts add up, jitter and
/// the maxima take the worst flow, the delay mean weighs flows by their
/// datagrams. None when no flow has datagram figures (TCP).
fn udp_sum(samples: impl IntoIterator<Item = UdpSample>) -> Option<UdpSample> {
    samples.into_iter().reduce(|a, b| {
        let packets = a.packets + b.packets;
        UdpSample {
            packets,
            lost: a.lost + b.lost,
            out_of_order: a.out_of_order + b.out_of_order,
            duplicates: a.duplicates + b.duplicates,
            host_drops: a.host_drops + b.host_drops,
            jitter_us: a.jitter_us.max(b.jitter_us),
            owd_var_mean_us: if packets > 0 {
                (a.owd_var_mean_us * a.packets as f64 + b.owd_var_mean_us * b.packets as f64)
                    / packets as f64
            } else {
                0.0
            },
            owd_var_max_us: a.owd_var_max_us.max(b.owd_var_max_us),
            late: a.late + b.late,
            max_lateness_us: a.max_lateness_us.max(b.max_lateness_us),
        }
    })
}

/// Sums the flows of each (direction, role) that has more than one flow,
/// in order of first appearance, with their datagram figures summed by
/// [`udp_sum`] (`SumInterval` has no place for them).
fn live_sums(flows: &[LiveFlow]) -> Vec<(SumInterval, Option<UdpSample>)> {
    let mut sums: Vec<(usize, SumInterval)> = Vec::new();
    for f in flows {
        let iv = &f.interval;
        let i = match sums
            .iter()
            .position(|(_, s)| s.direction == f.direction && s.role == f.role)
        {
            Some(i) => i,
            None => {
                sums.push((
                    0,
                    SumInterval {
                        direction: f.direction,
                        role: f.role,
                        start_s: iv.start_s,
                        end_s: iv.end_s,
                        omitted: false,
                        bytes: 0,
                        bits_per_second: 0.0,
                        retransmits: None,
                    },
                ));
                sums.len() - 1
            }
        };
        let (n, s) = &mut sums[i];
        *n += 1;
        s.start_s = s.start_s.min(iv.start_s);
        s.end_s = s.end_s.max(iv.end_s);
        s.omitted |= iv.omitted;
        s.bytes += iv.bytes;
        if let Some(t) = iv.tcp {
            *s.retransmits.get_or_insert(0) += t.retransmits;
        }
    }
    sums.into_iter()
        .filter(|(n, _)| *n > 1)
        .map(|(_, mut s)| {
            s.bits_per_second = Throughput::new(s.bytes, s.end_s - s.start_s).bits_per_second;
            let udp = udp_sum(
                flows
                    .iter()
                    .filter(|f| f.direction == s.direction && f.role == s.role)
                    .filter_map(|f| f.interval.udp),
            );
            (s, udp)
        })
        .collect()
}

/// The senders' TCP figures of one direction, combined over its flows.
///
/// Flows of one side sample at the same boundaries, so the mean of the
/// per-flow RTT means is the mean over all samples, and the mean of the
/// per-flow limited fractions weighs flows equally (their busy times are
/// close, since all of them ran for the whole test).
struct TcpSummary {
    rtt_min_us: u32,
    rtt_mean_us: u64,
    rtt_max_us: u32,
    retransmits: u64,
    rwnd_limited: f64,
    sndbuf_limited: f64,
    delivered_ce: u64,
}

impl TcpSummary {
    fn of(side: &SideReport, dir: FlowDirection) -> Option<TcpSummary> {
        let totals: Vec<_> = flows_of(side, dir, FlowRole::Sender)
            .filter_map(|f| f.total.tcp)
            .collect();
        let n = totals.len();
        if n == 0 {
            return None;
        }
        Some(TcpSummary {
            rtt_min_us: totals.iter().map(|t| t.rtt_min_us).min().unwrap_or(0),
            rtt_mean_us: totals.iter().map(|t| u64::from(t.rtt_mean_us)).sum::<u64>() / n as u64,
            rtt_max_us: totals.iter().map(|t| t.rtt_max_us).max().unwrap_or(0),
            retransmits: totals.iter().map(|t| t.retransmits).sum(),
            rwnd_limited: totals.iter().map(|t| t.rwnd_limited_fraction).sum::<f64>() / n as f64,
            sndbuf_limited: totals
                .iter()
                .map(|t| t.sndbuf_limited_fraction)
                .sum::<f64>()
                / n as f64,
            delivered_ce: totals.iter().map(|t| t.delivered_ce).sum(),
        })
    }
}

impl fmt::Display for TcpSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A max of 0 means no RTT was sampled (a stock iperf3 peer's
        // totals carry only retransmits).
        if self.rtt_max_us > 0 {
            write!(
                f,
                "rtt min/mean/max {} / {} / {}, ",
                Micros(u64::from(self.rtt_min_us)),
                Micros(self.rtt_mean_us),
                Micros(u64::from(self.rtt_max_us)),
            )?;
        }
        write!(f, "retransmits {}", self.retransmits)?;
        if self.rwnd_limited > 0.0 {
            write!(
                f,
                ", receive-window limited {:.1}% of busy time",
                100.0 * self.rwnd_limited
            )?;
        }
        if self.sndbuf_limited > 0.0 {
            write!(
                f,
                ", send-buffer limited {:.1}% of busy time",
                100.0 * self.sndbuf_limited
            )?;
        }
        if self.delivered_ce > 0 {
            write!(f, ", CE-marked segments {}", self.delivered_ce)?;
        }
        Ok(())
    }
}

/// One direction's datagram fate over the whole run, from
/// `summary.directions[].udp`: the sender's count against the receiver's,
/// so datagrams lost after the last one received count too, and the loss
/// split into the network's and the receiving host's (its socket buffer
/// overflowing), which call for different fixes.
struct UdpLine<'a> {
    udp: &'a UdpSummary,
    /// The receiving side reported; without it there is nothing to compare
    /// the sender's count with.
    received: bool,
}

impl<'a> UdpLine<'a> {
    fn of(d: &'a DirectionSummary) -> Option<Self> {
        d.udp.as_ref().map(|udp| UdpLine {
            udp,
            received: d.receiver.is_some(),
        })
    }
}

impl fmt::Display for UdpLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let u = self.udp;
        write!(f, "sent {}, ", u.sent)?;
        if self.received {
            write!(
                f,
                "received {}, lost {} ({}): network {}, receiving host {}; out of order {}, duplicates {}; jitter {}; ",
                u.received,
                u.lost,
                percent(u.lost, u.sent),
                u.network_lost,
                u.host_drops,
                u.out_of_order,
                u.duplicates,
                millis(u.jitter_us)
            )?;
        } else {
            write!(f, "received n/a; ")?;
        }
        write!(f, "late sends {}", u.late)
    }
}

/// The kernel counters worth a look after a stream test: retransmissions,
/// SACK/DSACK activity (loss and reordering), ECN marks, UDP errors (a
/// full receive buffer shows as `Udp.RcvbufErrors`) and interface drops.
/// The full list is in the JSON result.
fn notable_counters(c: &KernelCounters) -> impl Iterator<Item = (&str, i64)> {
    c.deltas
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .filter(|(k, _)| {
            *k == "Tcp.RetransSegs"
                || k.strip_prefix("TcpExt.")
                    .is_some_and(|n| n.contains("ECN") || n.contains("SACK") || n.contains("Sack"))
                || k.ends_with(".InCEPkts")
                || k.starts_with("Udp") && k.ends_with("Errors")
                || *k == "dev.rx_drop"
                || *k == "dev.tx_drop"
        })
}

/// The test in one line: what, which way, how many flows, how long, how
/// big the writes are and how receivers consume data.
fn describe_test(spec: &TestSpec) -> String {
    let text = match spec.pattern {
        Pattern::Stream => describe_stream(spec),
        Pattern::Rr(_) => super::rr::describe(spec),
    };
    format!("{text}{}", describe_affinity(&spec.affinity))
}

/// "; data threads on CPU 0 (client), CPU 1 (server)" with `-A`.
fn describe_affinity(a: &Affinity) -> String {
    let mut ends: Vec<String> = [(a.client, "client"), (a.server, "server")]
        .into_iter()
        .filter_map(|(cpu, end)| cpu.map(|c| format!("CPU {c} ({end})")))
        .collect();
    if a.flows && ends.len() < 2 {
        ends.push("one CPU per flow, the same at both ends".into());
    }
    if ends.is_empty() {
        return String::new();
    }
    format!("; data threads on {}", ends.join(", "))
}

fn describe_stream(spec: &TestSpec) -> String {
    let pattern = "stream";
    let transport = spec.transport.label();
    let direction = match spec.direction {
        Direction::Forward => "forward (client sends)",
        Direction::Reverse => "reverse (server sends)",
        Direction::Bidir => "bidir (both send at once)",
    };
    let flows = plural(spec.parallel, "flow");
    let limit = match spec.limit {
        Limit::Duration { seconds } => format!("{seconds} s"),
        Limit::Bytes { bytes } => format!("{} per direction", format_bytes(bytes)),
        Limit::Open => "until Ctrl-C".into(),
    };
    let omit = if spec.omit_s > 0.0 {
        format!(" after a {} s warm-up (omitted)", spec.omit_s)
    } else {
        String::new()
    };
    if let Some(data) = spec.transport.model().describe_data(&spec.knobs) {
        return format!(
            "{pattern} over {transport}, {direction}, {flows} per direction, {limit}{omit}, {data}"
        );
    }
    if spec.transport.carrier() == Carrier::Datagrams {
        let k = &spec.knobs;
        let rate = k.rate.map_or("as fast as possible".to_string(), |r| {
            format!("at {} per flow", RateUnit::AutoBits.format_rate(r as f64))
        });
        let calls = if k.gso {
            format!("GSO/GRO, up to {} per buffer", k.batch)
        } else {
            format!("{} per sendmmsg/recvmmsg call", k.batch)
        };
        return format!(
            "{pattern} over {transport}, {direction}, {flows} per direction, {limit}{omit}, {}-byte datagrams {rate}, {calls}",
            k.size
        );
    }
    let receive = match spec.knobs.recv_mode {
        RecvMode::Copy => "read() into user space",
        RecvMode::Discard => "kernel discard (MSG_TRUNC), no copy to user space",
        RecvMode::Zerocopy => "TCP_ZEROCOPY_RECEIVE (pages mapped, the rest copied)",
    };
    let send = match spec.knobs.send_mode {
        SendMode::Copy => "write",
        SendMode::Sendfile => "sendfile",
        SendMode::MsgZerocopy => "MSG_ZEROCOPY send",
    };
    let writes = match spec.knobs.write_size {
        Some(w) => format!("{} per {send}", format_bytes(w)),
        None => format!("{send} of the default or calibrated size"),
    };
    format!(
        "{pattern} over {transport}, {direction}, {flows} per direction, {limit}{omit}, {writes}, receive: {receive}"
    )
}

/// The socket options the test asked for, or None when it left all of them
/// at the kernel's defaults.
fn describe_socket_knobs(k: &Knobs, unit: RateUnit) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(b) = k.buffer {
        parts.push(format!("buffer {}", format_bytes(b)));
    }
    if let Some(cc) = &k.congestion {
        parts.push(format!("congestion {cc}"));
    }
    if k.nodelay {
        parts.push("nodelay".into());
    }
    if let Some(mss) = k.mss {
        parts.push(format!("MSS {mss}"));
    }
    if let Some(tos) = k.tos {
        parts.push(format!("TOS 0x{tos:02x}"));
    }
    if k.dont_fragment {
        parts.push("don't fragment".into());
    }
    if let Some(rate) = k.max_pacing_rate {
        parts.push(format!(
            "pacing limit {}",
            unit.format_rate(rate as f64 * 8.0)
        ));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// Directions that have flows on either side, c2s first.
fn directions(r: &TestResult) -> Vec<FlowDirection> {
    [FlowDirection::C2s, FlowDirection::S2c]
        .into_iter()
        .filter(|&d| {
            std::iter::once(&r.client)
                .chain(&r.server)
                .any(|s| s.flows.iter().any(|f| f.direction == d))
        })
        .collect()
}

fn sending_side(r: &TestResult, dir: FlowDirection) -> Option<&SideReport> {
    match dir {
        FlowDirection::C2s => Some(&r.client),
        FlowDirection::S2c => r.server.as_ref(),
    }
}

fn receiving_side(r: &TestResult, dir: FlowDirection) -> Option<&SideReport> {
    match dir {
        FlowDirection::C2s => r.server.as_ref(),
        FlowDirection::S2c => Some(&r.client),
    }
}

/// Earliest start and latest end of the measured windows of one side's
/// flows of a direction and role; None when the side has no such flow.
fn span(side: &SideReport, dir: FlowDirection, role: FlowRole) -> Option<(f64, f64)> {
    flows_of(side, dir, role)
        .map(|f| (f.total.start_s, f.total.end_s))
        .reduce(|(s, e), (fs, fe)| (s.min(fs), e.max(fe)))
}

/// One side's flows of a direction and role.
fn flows_of(
    side: &SideReport,
    dir: FlowDirection,
    role: FlowRole,
) -> impl Iterator<Item = &FlowReport> {
    side.flows
        .iter()
        .filter(move |f| f.direction == dir && f.role == role)
}

fn cpu(c: &CpuUsage) -> String {
    format!(
        "{:.1}% (user {:.2} s, sys {:.2} s)",
        c.percent, c.user_s, c.system_s
    )
}

/// `part` of `whole` in percent, to three significant digits so that
/// small losses stay visible (`0.0238%`, never rounded to zero), `0%`
/// only for none at all.
fn percent(part: u64, whole: u64) -> String {
    if part == 0 || whole == 0 {
        return "0%".into();
    }
    let p = 100.0 * part as f64 / whole as f64;
    let decimals = (2 - p.log10().floor() as i32).max(0) as usize;
    format!("{p:.decimals$}%")
}

/// Jitter in milliseconds with microsecond resolution, as iperf3 shows it.
fn millis(us: f64) -> String {
    format!("{:.3} ms", us / 1000.0)
}

/// Fractional microseconds as [`Micros`] writes whole ones.
fn micros(us: f64) -> String {
    Micros(us.round() as u64).to_string()
}

fn omitted(yes: bool) -> &'static str {
    if yes {
        "  (omitted)"
    } else {
        ""
    }
}

fn plural(n: u32, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn role_name(r: FlowRole) -> &'static str {
    match r {
        FlowRole::Sender => "sender",
        FlowRole::Receiver => "receiver",
    }
}

fn endpoint_name(e: Endpoint) -> &'static str {
    match e {
        Endpoint::Client => "client",
        Endpoint::Server => "server",
    }
}

fn status_name(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::Partial => "partial",
        Status::Failed => "failed",
    }
}

#[cfg(test)]
mod tests {
    use xferlab_core::result::Summary;

    use super::super::sample::{bidir_result, flow_starts, live_interval, udp_result, SharedBuf};
    use super::super::{Reporter, StartInfo};
    use super::*;

    /// Runs a whole test through the reporter as the client's driver would.
    fn render(r: &TestResult, embedded: bool) -> String {
        render_live(r, embedded, &r.client)
    }

    /// [`render`] with `live`'s flows in the live table: the server's, to
    /// see the other role's rows.
    fn render_live(r: &TestResult, embedded: bool, live: &SideReport) -> String {
        let buf = SharedBuf::default();
        let mut rep = HumanReporter::new(buf.writer(), RateUnit::AutoBits);
        let flows = flow_starts(live);
        let info = StartInfo {
            spec: &r.spec,
            server: &r.server_address,
            embedded,
            session: &r.id,
            flows: &flows,
        };
        rep.start(&info).unwrap();
        for i in 0..live.flows[0].intervals.len() {
            rep.interval(&live_interval(live, i)).unwrap();
        }
        rep.finish(r).unwrap();
        buf.text()
    }

    fn lines_with<'a>(text: &'a str, needle: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.contains(needle)).collect()
    }

    #[test]
    fn the_test_line_names_pinned_cpus() {
        let mut spec = TestSpec::default_stream();
        assert!(!describe_test(&spec).contains("CPU"));
        spec.affinity.server = Some(3);
        assert!(describe_test(&spec).ends_with("; data threads on CPU 3 (server)"));
        spec.affinity.flows = true;
        assert!(describe_test(&spec).ends_with(
            "; data threads on CPU 3 (server), one CPU per flow, the same at both ends"
        ));
        spec.affinity.client = Some(0);
        assert!(describe_test(&spec).ends_with("; data threads on CPU 0 (client), CPU 3 (server)"));
    }

    #[test]
    fn bidir_table_has_flows_sums_omitted_and_totals() {
        let text = render(&bidir_result(), true);
        assert!(text.starts_with(
            "Server 127.0.0.1:5290 (in-process server on loopback), session 7f3a9c2e41d05b68\n"
        ));
        assert!(text.contains("kernel discard (MSG_TRUNC), no copy to user space"));
        assert!(
            text.contains("[  1] c2s sender    local 127.0.0.1:41234 -> remote 127.0.0.1:5290\n")
        );
        assert!(
            text.contains("[  4] s2c receiver  local 127.0.0.1:41237 -> remote 127.0.0.1:5290\n")
        );
        // Ids are 1-based everywhere in human output.
        assert!(!text.contains("[  0]"));

        assert_eq!(
            lines_with(&text, "[ ID]").len(),
            2,
            "one live header, one totals header"
        );
        assert!(text.contains("[ ID] Dir Interval"));
        assert!(text.contains(
            "[  1] c2s   0.00-1.00   sec  1.12 GBytes   9.60 Gbits/sec     0  3.12 MBytes     40 us  (omitted)\n"
        ));
        assert!(
            text.contains("[  3] s2c   1.00-2.00   sec  1.18 GBytes   10.2 Gbits/sec\n"),
            "receivers have no TCP columns"
        );
        // Four flows and two sums in the warm-up interval, nowhere else.
        let omitted: Vec<_> = lines_with(&text, "(omitted)")
            .into_iter()
            .filter(|l| l.starts_with('['))
            .collect();
        assert_eq!(omitted.len(), 6);
        assert!(omitted.iter().all(|l| l.contains("  0.00-1.00 ")));
        // Live: a sum per direction per interval; totals: sender and receiver.
        assert_eq!(lines_with(&text, "[SUM] c2s").len(), 4 + 2);
        assert_eq!(lines_with(&text, "[SUM] s2c").len(), 4 + 2);
        assert!(text.contains("[SUM] c2s   1.00-2.00   sec  2.34 GBytes   20.1 Gbits/sec     2\n"));
        assert!(text.contains("[SUM] s2c   1.00-2.00   sec  2.37 GBytes   20.4 Gbits/sec\n"));

        // Totals: sender line from the sender's side, receiver line from the receiver's.
        assert!(text
            .contains("[  1] c2s   1.00-4.00   sec  3.49 GBytes   10.0 Gbits/sec     6  sender\n"));
        assert!(text.contains(
            "[  1] c2s   1.00-4.00   sec  3.50 GBytes   10.0 Gbits/sec        receiver\n"
        ));
        assert!(text
            .contains("[SUM] c2s   1.00-4.00   sec  7.01 GBytes   20.1 Gbits/sec    12  sender\n"));
        assert!(text.contains(
            "[SUM] s2c   1.00-4.00   sec  7.13 GBytes   20.4 Gbits/sec        receiver\n"
        ));

        assert!(text.contains("c2s TCP: rtt min/mean/max 45 us / 50 us / 55 us, retransmits 12, receive-window limited 2.0% of busy time\n"));
        assert!(
            !text.contains("send-buffer limited"),
            "zero shares are left out"
        );
        assert!(text.contains("CPU client 112.8% (user 0.31 s, sys 4.20 s)  server 137.5% (user 0.40 s, sys 5.10 s)\n"));
        let counters = lines_with(&text, "Counters client (lo): ");
        assert_eq!(counters, vec!["Counters client (lo): Tcp.RetransSegs 12, TcpExt.TCPDSACKRecv 1, TcpExt.TCPSackRecovery 2"]);
        assert_eq!(lines_with(&text, "Counters server (lo): ").len(), 1);
        assert!(text.ends_with("Status: ok\n"));

        let mut embedded = bidir_result();
        embedded.client.embedded = true;
        let text = render(&embedded, true);
        assert_eq!(
            lines_with(&text, "Counters ").len(),
            1,
            "same host counters shown once"
        );
        assert!(text.contains("Counters client+server (lo): Tcp.RetransSegs 12,"));
    }

    #[test]
    fn missing_server_report_is_said_and_its_figures_left_out() {
        let mut r = bidir_result();
        r.server = None;
        r.summary = Summary::from_sides(&r.client, None);
        r.status = Status::Partial;
        r.errors
            .push("server report did not arrive within 5 s".into());
        r.client.warnings.push("flow 2 ended early".into());
        let text = render(&r, false);
        assert!(text.starts_with("Server 127.0.0.1:5290, session"));
        assert!(text.contains("The server's report is missing"));
        assert!(text.contains("server n/a"));
        assert!(text.contains("c2s: sender 20.1 Gbits/sec, receiver n/a (2 flows)\n"));
        assert!(text.contains("s2c: sender n/a, receiver 20.4 Gbits/sec (2 flows)\n"));
        assert!(
            !text.contains("s2c TCP"),
            "the s2c senders' TCP figures were in the server's report"
        );
        let s2c_rows = lines_with(&text, "] s2c   1.00-4.00");
        assert!(
            s2c_rows.len() == 3 && s2c_rows.iter().all(|l| l.ends_with("receiver")),
            "{s2c_rows:?}"
        );
        assert!(text.contains("Warning (client): flow 2 ended early\n"));
        assert!(text.contains("Error: server report did not arrive within 5 s\n"));
        assert!(text.ends_with("Status: partial\n"));
    }

    #[test]
    fn one_flow_one_way_reads_like_iperf3() {
        let mut r = bidir_result();
        for side in std::iter::once(&mut r.client).chain(r.server.as_mut()) {
            side.flows.retain(|f| f.id == 0);
            side.flows[0].end = FlowEnd::Aborted("connection reset by peer".into());
            side.sums = xferlab_core::result::sum_intervals(&side.flows);
        }
        r.summary = Summary::from_sides(&r.client, r.server.as_ref());
        let text = render(&r, false);
        assert!(
            text.contains("\n[ ID] Interval           "),
            "no direction column for one-way tests"
        );
        assert!(!text.contains("[SUM]"));
        assert_eq!(
            lines_with(&text, SEPARATOR).len(),
            1,
            "only before the totals when there is one flow"
        );
        assert!(text.contains("[  1]   1.00-4.00   sec  3.49 GBytes   10.0 Gbits/sec     6  sender  aborted: connection reset by peer\n"));
    }

    #[test]
    fn udp_rows_show_what_each_role_sees_and_the_loss_summary() {
        let r = udp_result();
        let text = render(&r, false);
        assert!(text.contains(
            ", 1400-byte datagrams at 100 Mbits/sec per flow, 32 per sendmmsg/recvmmsg call\n"
        ));
        assert_eq!(
            lines_with(&text, "[ ID] Interval           Transfer     Bitrate          Jitter     Lost/Total Datagrams").len(),
            2,
            "UDP titles on the live table and the totals"
        );
        assert!(!text.contains("Retr"), "no TCP columns");
        // Live rows of the client, a sender: its count and late sends.
        assert!(text.contains(
            "[  2]   1.00-2.00   sec  11.9 MBytes    100 Mbits/sec             8928 sent  late 3 (max 3750 us)\n"
        ));
        assert!(
            text.contains(
                "[  1]   2.00-3.00   sec  11.9 MBytes    100 Mbits/sec             8928 sent\n"
            ),
            "no late note when none were late"
        );
        assert!(text.contains("[SUM]   1.00-2.00   sec  23.8 MBytes    200 Mbits/sec             17856 sent  late 5 (max 3750 us)\n"));

        // Totals: the sender's line from the client, the receiver's from
        // the server, with the loss over the measured window.
        assert!(text.contains("[  2]   1.00-4.00   sec  35.8 MBytes    100 Mbits/sec             26784 sent  late 4 (max 3750 us)  sender\n"));
        assert!(text.contains("[  2]   1.00-4.00   sec  35.7 MBytes   99.9 Mbits/sec   0.011 ms  15/26782 (0.0560%)  host drops 10, out of order 1  receiver\n"));
        assert!(text.contains("[  1]   1.00-4.00   sec  35.8 MBytes    100 Mbits/sec   0.003 ms  0/26784 (0%)  receiver\n"));
        assert!(text.contains("[SUM]   1.00-4.00   sec  71.5 MBytes    200 Mbits/sec   0.011 ms  15/53566 (0.0280%)  host drops 10, out of order 1  receiver\n"));

        // The whole run: 2 more lost at the tail than the receiver's gaps
        // show, 10 of the 17 at the receiving host.
        assert!(text.contains("c2s UDP: sent 71424, received 71407, lost 17 (0.0238%): network 7, receiving host 10; out of order 1, duplicates 0; jitter 0.011 ms; late sends 6\n"));
        assert!(!text.contains("c2s TCP"));
        assert!(text.contains("Counters client (lo): Udp.InErrors 10, Udp.RcvbufErrors 10\n"));

        // Live rows of the server, a receiver: jitter, loss, host drops.
        let text = render_live(&r, false, r.server.as_ref().unwrap());
        assert!(text.contains("[  2]   1.00-2.00   sec  11.9 MBytes   99.9 Mbits/sec   0.021 ms  12/8928 (0.134%)  host drops 10, out of order 1\n"));
        assert!(text.contains("[  1]   0.00-1.00   sec  11.9 MBytes    100 Mbits/sec   0.003 ms  0/8928 (0%)  (omitted)\n"));
        assert!(text.contains(
            "[SUM]   3.00-4.00   sec  23.8 MBytes    200 Mbits/sec   0.011 ms  3/17854 (0.0168%)\n"
        ));
    }

    #[test]
    fn udp_loss_is_not_claimed_without_the_receiver_s_report() {
        let mut r = udp_result();
        r.server = None;
        r.summary = Summary::from_sides(&r.client, None);
        r.spec.knobs.rate = None;
        let text = render(&r, false);
        assert!(text.contains(", 1400-byte datagrams as fast as possible, "));
        // Nothing is known about loss without the receiver: no UDP loss
        // line at all, rather than 100 % loss.
        assert!(!text.contains("c2s UDP:"));
        assert!(!text.contains("100%"));
        assert!(!text.contains("receiver\n"));
    }

    #[test]
    fn percentages_keep_three_significant_digits() {
        assert_eq!(percent(0, 100), "0%");
        assert_eq!(percent(5, 0), "0%");
        assert_eq!(percent(100, 100), "100%");
        assert_eq!(percent(2206, 10_000), "22.1%");
        assert_eq!(percent(17, 71_424), "0.0238%");
        assert_eq!(
            percent(1, 1_000_000_000),
            "0.000000100%",
            "never rounded to zero"
        );
    }
}
