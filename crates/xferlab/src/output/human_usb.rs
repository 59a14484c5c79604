//! The human table of a USB bulk run (`xferlab usb bulk`): the device and
//! its endpoints at start, one row per endpoint per interval with the
//! transfer counts next to the bytes, then per endpoint its totals,
//! completion latency and errors. [`super::HumanReporter`] calls these
//! for runs that report through [`super::Reporter::usb_start`].

use std::io::{self, Write};

use xferlab_core::result::{FlowReport, FlowRole, TestResult};
use xferlab_core::spec::{Direction, Limit, TestSpec};
use xferlab_core::units::{format_bytes, RateUnit};
use xferlab_core::usb::gadget::UsbGadgetReport;
use xferlab_core::usb::stats::{UsbPipeReport, UsbReport, UsbSample};

use super::{GadgetStart, LiveFlow, StartInfo};

pub(super) const HEADER: &str =
    "[ ID] Interval           Transfer     Bitrate           MB/s      Xfers/s   Short  Errors";

/// What runs (`what`: the device, the link and its settings), its
/// length, and its flows: the start of `usb net` and `usb mon`.
pub(super) fn write_link_start(
    out: &mut dyn Write,
    info: &StartInfo<'_>,
    what: &str,
) -> io::Result<()> {
    writeln!(out, "{what}")?;
    if let Some(title) = &info.spec.title {
        writeln!(out, "Title: {title}")?;
    }
    let limit = match info.spec.limit {
        Limit::Duration { seconds } => format!("{seconds} s"),
        Limit::Bytes { bytes } => format_bytes(bytes),
        Limit::Open => "until Ctrl-C".into(),
    };
    writeln!(out, "Run: {limit}")?;
    for f in info.flows {
        writeln!(
            out,
            "[{:>3}] {} {:<8}  {} -> {}",
            f.id + 1,
            f.direction.label(),
            match f.role {
                FlowRole::Sender => "sender",
                FlowRole::Receiver => "receiver",
            },
            f.local,
            f.remote
        )?;
    }
    Ok(())
}

/// What is tested: the device, the run's shape and its endpoints.
pub(super) fn write_start(
    out: &mut dyn Write,
    info: &StartInfo<'_>,
    usb: &UsbReport,
) -> io::Result<()> {
    let d = &usb.device;
    let product = d
        .product
        .as_deref()
        .map(|p| format!(" \"{p}\""))
        .unwrap_or_default();
    let alt = if usb.alt_setting != 0 {
        format!(" alt {}", usb.alt_setting)
    } else {
        String::new()
    };
    writeln!(
        out,
        "Device {}.{} {:04x}:{:04x}{product} at {} speed, interface {}{alt}",
        d.bus,
        d.address,
        d.vendor_id,
        d.product_id,
        d.speed.as_deref().unwrap_or("unknown"),
        usb.interface
    )?;
    if let Some(title) = &info.spec.title {
        writeln!(out, "Title: {title}")?;
    }
    writeln!(out, "Test: {}", describe(info.spec, usb))?;
    for p in &usb.pipes {
        writeln!(
            out,
            "[{:>3}] {}  max packet {}",
            p.flow_id + 1,
            endpoint_label(p.endpoint),
            p.max_packet
        )?;
    }
    Ok(())
}

/// `USB bulk IN, 16.0 KBytes per transfer, 8 in flight, 10 s, pattern mod63`.
fn describe(spec: &TestSpec, usb: &UsbReport) -> String {
    let dir = match spec.direction {
        Direction::Reverse => "IN",
        Direction::Forward => "OUT",
        Direction::Bidir => "IN+OUT",
    };
    let limit = match spec.limit {
        Limit::Bytes { bytes } => format!("{} per direction", format_bytes(bytes)),
        Limit::Duration { seconds } => format!("{seconds} s"),
        Limit::Open => "until Ctrl-C".into(),
    };
    let (depth, pattern) = usb
        .pipes
        .first()
        .map_or((0, String::new()), |p| (p.depth, p.pattern.to_string()));
    let sync = if depth == 1 { " (synchronous)" } else { "" };
    format!(
        "USB bulk {dir}, {} per transfer, {depth} in flight{sync}, {limit}, pattern {pattern}",
        format_bytes(spec.knobs.size)
    )
}

/// `IN  0x81` / `OUT 0x01`.
fn endpoint_label(address: u8) -> String {
    let dir = if address & 0x80 != 0 { "IN " } else { "OUT" };
    format!("{dir} 0x{address:02x}")
}

/// One endpoint's row for one interval.
fn row(unit: RateUnit, id: u32, start: f64, end: f64, bytes: u64, s: &UsbSample) -> String {
    let secs = (end - start).max(1e-9);
    let bps = bytes as f64 * 8.0 / secs;
    format!(
        "[{:>3}] {start:>6.2}-{end:<6.2} sec  {:>11}  {:>16}  {:>8.2}  {:>9.0}  {:>6}  {:>6}",
        id + 1,
        format_bytes(bytes),
        unit.format_rate(bps),
        bytes as f64 / secs / 1e6,
        s.transfers_per_second,
        s.short_transfers,
        s.errors
    )
}

/// The rows of one interval, `usb[i]` belonging to `flows[i]`.
pub(super) fn write_interval(
    out: &mut dyn Write,
    unit: RateUnit,
    flows: &[LiveFlow],
    usb: &[UsbSample],
) -> io::Result<()> {
    for (f, s) in flows.iter().zip(usb) {
        let iv = &f.interval;
        writeln!(
            out,
            "{}",
            row(unit, f.id, iv.start_s, iv.end_s, iv.bytes, s)
        )?;
    }
    Ok(())
}

/// The end of the table: the rows of the intervals not shown live (the
/// tail after the last boundary), the separator, each endpoint's totals,
/// CPU, warnings and errors. `shown` intervals were printed
/// live, under the header when there were any.
pub(super) fn write_finish(
    out: &mut dyn Write,
    unit: RateUnit,
    r: &TestResult,
    usb: &UsbReport,
    shown: usize,
) -> io::Result<()> {
    let pipes: Vec<(&FlowReport, &UsbPipeReport)> = usb
        .pipes
        .iter()
        .filter_map(|p| {
            let flow = r.client.flows.iter().find(|f| f.id == p.flow_id)?;
            Some((flow, p))
        })
        .collect();
    // Grouped by interval as the live rows are.
    let intervals = pipes.iter().map(|(f, _)| f.intervals.len()).max();
    for i in shown..intervals.unwrap_or(0) {
        if i == 0 {
            writeln!(out, "{HEADER}")?;
        } else if pipes.len() > 1 {
            writeln!(out, "{}", super::human::SEPARATOR)?;
        }
        for (f, p) in &pipes {
            if let (Some(iv), Some(s)) = (f.intervals.get(i), p.intervals.get(i)) {
                writeln!(
                    out,
                    "{}",
                    row(unit, f.id, iv.start_s, iv.end_s, iv.bytes, s)
                )?;
            }
        }
    }
    writeln!(out, "{}", super::human::SEPARATOR)?;
    for (f, p) in pipes {
        write_pipe_total(out, unit, f, p)?;
    }
    let c = &r.client.cpu;
    writeln!(
        out,
        "CPU host {:.1}% (user {:.2} s, sys {:.2} s)",
        c.percent, c.user_s, c.system_s
    )?;
    for w in &r.client.warnings {
        writeln!(out, "Warning: {w}")?;
    }
    for e in &r.errors {
        writeln!(out, "Error: {e}")?;
    }
    Ok(())
}

/// One endpoint's totals: bytes and rates, transfers, completion latency,
/// errors and the data check.
fn write_pipe_total(
    out: &mut dyn Write,
    unit: RateUnit,
    f: &FlowReport,
    p: &UsbPipeReport,
) -> io::Result<()> {
    let total = &f.total;
    let secs = total.end_s - total.start_s;
    let t = &p.total;
    writeln!(
        out,
        "[{:>3}] {:>6.2}-{:<6.2} sec  {:>11}  {:>16}  {:>8.2} MB/s  {} transfers ({:.0}/s), short {}, {}",
        f.id + 1,
        total.start_s,
        total.end_s,
        format_bytes(total.bytes),
        unit.format_rate(total.bits_per_second),
        if secs > 0.0 { total.bytes as f64 / secs / 1e6 } else { 0.0 },
        t.transfers,
        t.transfers_per_second,
        t.short_transfers,
        if f.role == FlowRole::Receiver { "IN" } else { "OUT" }
    )?;
    let l = &t.latency;
    writeln!(
        out,
        "      completion latency us: min {:.0} p50 {:.0} p90 {:.0} p99 {:.0} p99.9 {:.0} max {:.0} \
         (mean {:.0}, stddev {:.0}, {} transfers in flight)",
        l.min_us, l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us, l.mean_us, l.stddev_us, p.depth
    )?;
    let errors: Vec<String> = t
        .errors
        .iter()
        .map(|e| format!("{} {}", e.kind.label(), e.count))
        .collect();
    writeln!(
        out,
        "      errors: {}; stalls cleared {}; pattern {} ({} bad transfers)",
        if errors.is_empty() {
            "none".into()
        } else {
            errors.join(", ")
        },
        t.stalls_cleared,
        p.pattern,
        t.pattern_errors
    )
}

/// `usb gadget`'s start line: the device it made, how it serves, for how long.
pub(super) fn gadget_start_line(spec: &TestSpec, s: &GadgetStart<'_>) -> String {
    let g = s.gadget;
    let until = match spec.limit {
        Limit::Duration { seconds } => format!(", for {seconds} s"),
        Limit::Bytes { .. } | Limit::Open => ", until Ctrl-C".into(),
    };
    let frames = s.max_frames.unwrap_or(0);
    let transfer = s.max_transfer.unwrap_or(0);
    if let (Some(net), Some((bulk_in, bulk_out))) = (&g.net, s.raw_endpoints) {
        return format!(
            "raw-gadget device {} on UDC {}: CDC-{} link, TAP {} <-> bulk IN 0x{bulk_in:02x}/OUT 0x{bulk_out:02x}, \
             x{frames} frames per IN transfer (at most {transfer} B), {} us coalescing, {} B OUT reads, one transfer \
             in flight per direction{until}",
            g.id,
            g.udc,
            net.encap.label().to_uppercase(),
            net.tap,
            net.coalesce_us,
            g.size,
        );
    }
    let what = match (g.function.as_str(), &g.net) {
        ("ffs", _) => "FunctionFS source/sink".to_string(),
        ("cbr", _) => {
            "FunctionFS fixed-rate device (rate and buffer set by `xferlab usb cbr`)".to_string()
        }
        ("sourcesink", _) => "kernel SourceSink".to_string(),
        ("net", Some(net)) => format!(
            "FunctionFS network link, TAP {} <-> bulk IN/OUT, {} x{frames} frames per IN transfer \
             (at most {transfer} B), {} us coalescing,",
            net.tap,
            net.encap.label(),
            net.coalesce_us
        ),
        (kind, _) => format!(
            "kernel {} network function, interface {}",
            kind.to_uppercase(),
            g.ifname.as_deref().unwrap_or("?")
        ),
    };
    let io = match (g.function.as_str(), g.io.as_str()) {
        ("ffs", "sync") => "sync I/O",
        ("ffs" | "cbr" | "net", _) => "AIO",
        _ => "(in kernel)",
    };
    let requests = match g.function.as_str() {
        "cbr" => String::new(),
        "net" => format!(", {} B OUT requests, queue {}", g.size, g.queue),
        _ => format!(
            ", {} B requests, queue {}, pattern {}",
            g.size, g.queue, g.pattern
        ),
    };
    format!(
        "gadget `{}` {} on UDC {}: {what} {io}{requests}{until}",
        g.name, g.id, g.udc
    )
}

/// `usb gadget`'s totals: each direction its threads moved, the CPU, and
/// that the device is gone.
pub(super) fn write_gadget_finish(
    out: &mut dyn Write,
    r: &TestResult,
    g: &UsbGadgetReport,
) -> io::Result<()> {
    let secs = r.client.duration_s;
    if !r.client.flows.is_empty() {
        for (label, c) in [("IN  (to host)", &g.input), ("OUT (from host)", &g.output)] {
            writeln!(
                out,
                "{label}: {} transfers, {} bytes ({:.2} MB/s over {secs:.1} s), errors {}, pattern errors {}",
                c.transfers,
                c.bytes,
                c.bytes as f64 / secs.max(1e-9) / 1e6,
                c.errors,
                c.pattern_errors
            )?;
        }
    }
    let cpu = &r.client.cpu;
    writeln!(
        out,
        "CPU gadget {:.1}% (user {:.2} s, sys {:.2} s)",
        cpu.percent, cpu.user_s, cpu.system_s
    )?;
    for w in &r.client.warnings {
        writeln!(out, "Warning: {w}")?;
    }
    // A leftover is in errors, with the command that removes it.
    if r.errors.is_empty() {
        match g.net.as_ref().and_then(|n| n.raw_gadget.as_ref()) {
            Some(raw) => writeln!(out, "raw-gadget device on UDC {} released", raw.udc)?,
            None => writeln!(out, "gadget `{}` removed", g.name)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use xferlab_core::result::TestResult;

    use super::super::sample::{flow_starts, live_interval, usb_result, SharedBuf};
    use super::super::{HumanReporter, Reporter};
    use super::*;

    /// A run through the reporter as `usb bulk` drives it, with the first
    /// `live` intervals reported as they happen.
    fn render(r: &TestResult, live: usize) -> String {
        let buf = SharedBuf::default();
        let mut rep = HumanReporter::new(buf.writer(), RateUnit::AutoBits);
        let flows = flow_starts(&r.client);
        let info = StartInfo {
            spec: &r.spec,
            server: &r.server_address,
            embedded: false,
            session: &r.id,
            flows: &flows,
        };
        let mut usb = r.client.usb().cloned().unwrap();
        let samples: Vec<Vec<UsbSample>> = usb
            .pipes
            .iter_mut()
            .map(|p| std::mem::take(&mut p.intervals))
            .collect();
        rep.usb_start(&info, &usb).unwrap();
        for i in 0..live {
            let now: Vec<UsbSample> = samples.iter().map(|s| s[i]).collect();
            rep.usb_interval(&live_interval(&r.client, i), &now)
                .unwrap();
        }
        rep.finish(r).unwrap();
        buf.text()
    }

    fn lines_with<'a>(text: &'a str, needle: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.contains(needle)).collect()
    }

    #[test]
    fn start_names_the_device_the_test_and_the_endpoints() {
        let text = render(&usb_result(), 2);
        let head: Vec<&str> = text.lines().take(5).collect();
        assert_eq!(
            head,
            [
                "Device 1.2 0525:a4a0 \"Gadget Zero (SourceSink)\" at high speed, interface 0",
                "Title: gadget zero",
                "Test: USB bulk IN+OUT, 16.0 KBytes per transfer, 8 in flight, 2 s, pattern mod63",
                "[  1] OUT 0x02  max packet 512",
                "[  2] IN  0x81  max packet 512",
            ]
        );
    }

    #[test]
    fn live_rows_then_the_tail_then_totals_latency_errors_and_status() {
        let text = render(&usb_result(), 2);
        assert_eq!(lines_with(&text, "[ ID] Interval").len(), 1, "{text}");
        // Two live intervals and the tail per endpoint, then its total.
        let out_rows = lines_with(&text, "[  1] ");
        assert_eq!(out_rows.len(), 1 + 3 + 1, "{text}");
        assert!(out_rows[1].starts_with("[  1]   0.00-1.00   sec  23.4 MBytes"));
        assert!(
            out_rows[2].ends_with("     3"),
            "the stalls: {}",
            out_rows[2]
        );
        assert!(
            out_rows[3].contains("2.00-2.25"),
            "the tail: {}",
            out_rows[3]
        );
        assert!(out_rows[4].contains("3350 transfers (1489/s), short 0, OUT"));
        // Both endpoints' tails, as a group of their own, before the totals.
        let tail = text.find("- - -\n[  1]   2.00-2.25").expect(&text);
        assert!(text[tail..].contains("\n[  2]   2.00-2.25"), "{text}");
        assert!(
            tail < text.find("- - -\n[  1]   0.00-2.25").unwrap(),
            "{text}"
        );
        assert_eq!(
            lines_with(&text, "completion latency us: min 410 p50 3275 p90 6914 p99 13607 p99.9 40100 max 83493 (mean 3870, stddev 2100, 8 transfers in flight)").len(),
            2,
            "{text}"
        );
        assert!(text.contains(
            "      errors: stall 3; stalls cleared 3; pattern mod63 (0 bad transfers)\n"
        ));
        assert!(text
            .contains("      errors: none; stalls cleared 0; pattern mod63 (0 bad transfers)\n"));
        assert!(
            text.contains("\nCPU host 86.2% (user 0.42 s, sys 1.52 s)\n"),
            "{text}"
        );
        assert!(text.contains("\nError: endpoint 0x02 stalled 3 times"));
        assert!(text.ends_with("Status: partial\n"), "{text}");
    }

    #[test]
    fn without_live_intervals_the_finish_prints_the_header_and_every_row() {
        let text = render(&usb_result(), 0);
        assert_eq!(lines_with(&text, "[ ID] Interval").len(), 1, "{text}");
        assert_eq!(lines_with(&text, "[  2] ").len(), 1 + 3 + 1, "{text}");
    }

    fn gadget(
        function: &str,
        net: Option<xferlab_core::usb::gadget::GadgetNet>,
    ) -> UsbGadgetReport {
        UsbGadgetReport {
            function: function.into(),
            io: "aio".into(),
            via: "functionfs".into(),
            queue: 8,
            qmult: None,
            ifname: None,
            size: 16384,
            pattern: xferlab_core::usb::Pattern::Mod63,
            name: "xferlab".into(),
            udc: "dummy_udc.0".into(),
            id: "1d6b:0104".into(),
            enabled_times: 0,
            input: Default::default(),
            output: Default::default(),
            net,
        }
    }

    /// The start lines read as before the gadget ran on the driver loop
    /// (the VM scripts' logs and users' notes quote them).
    #[test]
    fn gadget_start_lines_keep_their_wording() {
        let mut spec = TestSpec::default_stream();
        spec.limit = Limit::Open;
        let g = gadget("ffs", None);
        let s = GadgetStart {
            gadget: &g,
            max_frames: None,
            max_transfer: None,
            raw_endpoints: None,
        };
        assert_eq!(
            gadget_start_line(&spec, &s),
            "gadget `xferlab` 1d6b:0104 on UDC dummy_udc.0: FunctionFS source/sink AIO, 16384 B requests, \
             queue 8, pattern mod63, until Ctrl-C"
        );
        spec.limit = Limit::Duration { seconds: 8.0 };
        let mut g = gadget("sourcesink", None);
        g.io = "sync".into();
        let s = GadgetStart { gadget: &g, ..s };
        assert_eq!(
            gadget_start_line(&spec, &s),
            "gadget `xferlab` 1d6b:0104 on UDC dummy_udc.0: kernel SourceSink (in kernel), 16384 B requests, \
             queue 8, pattern mod63, for 8 s"
        );
        let net = xferlab_core::usb::gadget::GadgetNet {
            encap: xferlab_core::usb::net::Encap::Ncm,
            tap: "xg0".into(),
            frames_per_transfer_max: 8,
            coalesce_us: 200,
            tx_frames: 0,
            tx_too_large: 0,
            rx_decode: Default::default(),
            tap_drops: 0,
            raw_gadget: None,
        };
        let mut g = gadget("net", Some(net));
        g.queue = 1;
        let s = GadgetStart {
            gadget: &g,
            max_frames: Some(8),
            max_transfer: Some(16384),
            raw_endpoints: Some((0x81, 0x02)),
        };
        assert_eq!(
            gadget_start_line(&spec, &s),
            "raw-gadget device 1d6b:0104 on UDC dummy_udc.0: CDC-NCM link, TAP xg0 <-> bulk IN 0x81/OUT 0x02, \
             x8 frames per IN transfer (at most 16384 B), 200 us coalescing, 16384 B OUT reads, one transfer \
             in flight per direction, for 8 s"
        );
    }
}
