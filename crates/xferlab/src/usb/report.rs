//! Human output of a USB bulk run and the figures derived for the result
//! (latency percentiles). JSON, JSON lines and CSV go through the shared
//! reporters in crate::output.

use std::io::{self, Write};

use hdrhistogram::Histogram;
use xferlab_core::result::{FlowRole, Status, TestResult};
use xferlab_core::units::{format_bytes, RateUnit};
use xferlab_core::usb::descriptor::EndpointDesc;
use xferlab_core::usb::stats::{LatencySummary, UsbSample};

pub const TABLE_HEADER: &str =
    "[ ID] Interval           Transfer     Bitrate           MB/s      Xfers/s   Short  Errors";

pub fn latency_summary(h: &Histogram<u64>) -> LatencySummary {
    if h.is_empty() {
        return LatencySummary::default();
    }
    let us = |ns: u64| ns as f64 / 1e3;
    LatencySummary {
        count: h.len(),
        min_us: us(h.min()),
        mean_us: h.mean() / 1e3,
        p50_us: us(h.value_at_quantile(0.5)),
        p90_us: us(h.value_at_quantile(0.9)),
        p99_us: us(h.value_at_quantile(0.99)),
        p999_us: us(h.value_at_quantile(0.999)),
        max_us: us(h.max()),
    }
}

pub fn ep_label(ep: &EndpointDesc) -> String {
    format!(
        "{} 0x{:02x}",
        if ep.is_in() { "IN " } else { "OUT" },
        ep.address
    )
}

pub fn human_row(id: u32, start: f64, end: f64, bytes: u64, s: &UsbSample) -> String {
    let secs = (end - start).max(1e-9);
    let bps = bytes as f64 * 8.0 / secs;
    format!(
        "[{id:>3}] {start:>6.2}-{end:<6.2} sec  {:>11}  {:>16}  {:>8.2}  {:>9.0}  {:>6}  {:>6}",
        format_bytes(bytes),
        RateUnit::AutoBits.format_rate(bps),
        bytes as f64 / secs / 1e6,
        s.transfers_per_second,
        s.short_transfers,
        s.errors
    )
}

pub fn print_summary(h: &mut dyn Write, r: &TestResult) -> io::Result<()> {
    writeln!(h, "- - - - - - - - - - - - - - - - - - - - - - - - -")?;
    let Some(usb) = &r.client.usb else {
        return Ok(());
    };
    for (f, p) in r.client.flows.iter().zip(&usb.pipes) {
        let secs = f.total.end_s - f.total.start_s;
        let t = &p.total;
        writeln!(
            h,
            "[{:>3}] {:>6.2}-{:<6.2} sec  {:>11}  {:>16}  {:>8.2} MB/s  {} transfers ({:.0}/s), short {}, {}",
            f.id + 1,
            f.total.start_s,
            f.total.end_s,
            format_bytes(f.total.bytes),
            RateUnit::AutoBits.format_rate(f.total.bits_per_second),
            if secs > 0.0 { f.total.bytes as f64 / secs / 1e6 } else { 0.0 },
            t.transfers,
            t.transfers_per_second,
            t.short_transfers,
            if f.role == FlowRole::Receiver { "IN" } else { "OUT" }
        )?;
        let l = &t.latency;
        writeln!(
            h,
            "      completion latency us: min {:.0} p50 {:.0} p90 {:.0} p99 {:.0} max {:.0} (mean {:.0}, {} transfers in flight)",
            l.min_us, l.p50_us, l.p90_us, l.p99_us, l.max_us, l.mean_us, p.depth
        )?;
        let errs: Vec<String> = t
            .errors
            .iter()
            .map(|e| format!("{} {}", e.kind.label(), e.count))
            .collect();
        writeln!(
            h,
            "      errors: {}; stalls cleared {}; pattern {} ({} bad transfers)",
            if errs.is_empty() {
                "none".into()
            } else {
                errs.join(", ")
            },
            t.stalls_cleared,
            p.pattern,
            t.pattern_errors
        )?;
    }
    let c = &r.client.cpu;
    writeln!(
        h,
        "CPU host {:.1}% (user {:.2} s, sys {:.2} s)",
        c.percent, c.user_s, c.system_s
    )?;
    writeln!(
        h,
        "Status: {}",
        match r.status {
            Status::Ok => "ok",
            Status::Partial => "partial",
            Status::Failed => "failed",
        }
    )?;
    h.flush()
}
