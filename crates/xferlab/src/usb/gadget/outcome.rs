//! What `usb gadget` says: the start line once the device is up, and the
//! report after teardown (`xferlab.usb-gadget/1` with -J, else text).

use std::sync::atomic::Ordering::Relaxed;

use xferlab_core::usb::net::Encap;

use super::ffs_io::{DirCounters, Shared};
use super::net_io::{self, NetCounters};
use super::plan::Plan;
use super::raw;
use super::{GadgetFunction, GadgetIo, GadgetRequest, GadgetVia};

/// The start line of a configfs gadget on `udc`.
pub fn start_line(a: &GadgetRequest, plan: &Plan, udc: &str, ifname: Option<&str>) -> String {
    let (vid, pid) = plan.id;
    format!(
        "gadget `{}` {vid:04x}:{pid:04x} on UDC {udc}: {} {}{}{}",
        a.name,
        match a.function {
            GadgetFunction::Ffs => "FunctionFS source/sink".to_string(),
            GadgetFunction::Cbr =>
                "FunctionFS fixed-rate device (rate and buffer set by `xferlab usb cbr`)"
                    .to_string(),
            GadgetFunction::Sourcesink => "kernel SourceSink".to_string(),
            GadgetFunction::Ecm | GadgetFunction::Eem | GadgetFunction::Ncm => format!(
                "kernel {} network function, interface {}",
                a.function.net_kind().unwrap_or_default().0.to_uppercase(),
                ifname.unwrap_or("?")
            ),
            GadgetFunction::Net => {
                let encap = a.encap.unwrap_or(Encap::Eem);
                let l = net_io::limits(encap, &a.link);
                format!(
                    "FunctionFS network link, TAP {} <-> bulk IN/OUT, {} x{} frames per IN transfer \
                     (at most {} B), {} us coalescing,",
                    a.link.tap,
                    encap.label(),
                    l.max_frames,
                    l.max_transfer,
                    a.link.coalesce_us
                )
            }
        },
        match (a.function, a.io) {
            (GadgetFunction::Sourcesink, _) => "(in kernel)",
            (GadgetFunction::Ecm | GadgetFunction::Eem | GadgetFunction::Ncm, _) => "(in kernel)",
            (GadgetFunction::Cbr | GadgetFunction::Net, _) => "AIO",
            (_, GadgetIo::Sync) => "sync I/O",
            (_, GadgetIo::Aio) => "AIO",
        },
        if a.function == GadgetFunction::Cbr {
            String::new()
        } else if a.function == GadgetFunction::Net {
            format!(", {} B OUT requests, queue {}", a.size, a.queue)
        } else {
            format!(
                ", {} B requests, queue {}, pattern {}",
                a.size, a.queue, a.pattern
            )
        },
        until(a)
    )
}

/// The start line of a raw-gadget device.
pub fn raw_start_line(a: &GadgetRequest, plan: &Plan, r: &raw::RawReport) -> String {
    let encap = a.encap.unwrap_or(Encap::Eem);
    let l = net_io::limits(encap, &a.link);
    format!(
        "raw-gadget device {:04x}:{:04x} on UDC {}: CDC-{} link, TAP {} <-> bulk IN 0x{:02x}/OUT 0x{:02x}, \
         x{} frames per IN transfer (at most {} B), {} us coalescing, {} B OUT reads, one transfer in flight \
         per direction{}",
        plan.id.0,
        plan.id.1,
        r.udc,
        encap.label().to_uppercase(),
        a.link.tap,
        r.endpoints.0 | 0x80,
        r.endpoints.1,
        l.max_frames,
        l.max_transfer,
        a.link.coalesce_us,
        a.size,
        until(a)
    )
}

fn until(a: &GadgetRequest) -> String {
    a.time
        .map(|t| format!(", for {t} s"))
        .unwrap_or_else(|| ", until Ctrl-C".into())
}

pub fn report(
    a: &GadgetRequest,
    s: &Shared,
    net: &NetCounters,
    secs: f64,
    cpu: (f64, f64),
    ifname: Option<&str>,
    raw: Option<&raw::RawReport>,
) {
    let cpu_percent = 100.0 * (cpu.0 + cpu.1) / secs.max(1e-9);
    let dir = |c: &DirCounters| {
        serde_json::json!({
            "transfers": c.transfers.load(Relaxed),
            "bytes": c.bytes.load(Relaxed),
            "errors": c.errors.load(Relaxed),
            "pattern_errors": c.pattern_errors.load(Relaxed),
            "mbytes_per_second": c.bytes.load(Relaxed) as f64 / secs.max(1e-9) / 1e6,
        })
    };
    if a.report.json() {
        let v = serde_json::json!({
            "schema": "xferlab.usb-gadget/1",
            "function": format!("{:?}", a.function).to_lowercase(),
            // raw-gadget's calls block: one transfer at a time.
            "io": match a.via {
                GadgetVia::Functionfs => format!("{:?}", a.io).to_lowercase(),
                GadgetVia::RawGadget => "sync".into(),
            },
            "queue": if raw.is_some() { 1 } else { a.queue },
            "qmult": a.qmult,
            "ifname": ifname,
            "size": a.size,
            "pattern": a.pattern,
            "seconds": secs,
            "enabled_times": s.enables.load(Relaxed),
            "cpu": { "user_s": cpu.0, "system_s": cpu.1, "percent": cpu_percent },
            "in": dir(&s.input),
            "out": dir(&s.output),
            "net": (a.function == GadgetFunction::Net).then(|| serde_json::json!({
                "encap": a.encap.map(|e| e.label()),
                "tap": a.link.tap,
                "frames_per_transfer_max": a.link.frames_per_transfer,
                "coalesce_us": a.link.coalesce_us,
                "tx_frames": net.tx_frames.load(Relaxed),
                "tx_too_large": net.tx_too_large.load(Relaxed),
                "rx_decode": *net.decode.lock().unwrap_or_else(|e| e.into_inner()),
                "tap_drops": net.tap_drops.load(Relaxed),
                "via": match a.via {
                    GadgetVia::Functionfs => "functionfs",
                    GadgetVia::RawGadget => "raw_gadget",
                },
                // The device raw-gadget made: what the host asked of it.
                "raw_gadget": raw.map(|r| serde_json::json!({
                    "udc": r.udc,
                    "endpoints": {
                        "bulk_in": format!("0x{:02x}", r.endpoints.0 | 0x80),
                        "bulk_out": format!("0x{:02x}", r.endpoints.1),
                        "notify": format!("0x{:02x}", r.endpoints.2 | 0x80),
                    },
                    "host_mac": r.host_mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":"),
                    "control_requests": r.control_requests,
                    "stalled": r.stalled,
                    "control_errors": r.control_errors,
                    "notifications": r.notifications,
                    "packet_filter": r.packet_filter,
                    "ntb_in_max": r.ntb_in_max,
                })),
            })),
        });
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else if matches!(
        a.function,
        GadgetFunction::Ffs | GadgetFunction::Cbr | GadgetFunction::Net
    ) {
        for (label, c) in [("IN  (to host)", &s.input), ("OUT (from host)", &s.output)] {
            outln!(
                "{label}: {} transfers, {} bytes ({:.2} MB/s over {secs:.1} s), errors {}, pattern errors {}",
                c.transfers.load(Relaxed),
                c.bytes.load(Relaxed),
                c.bytes.load(Relaxed) as f64 / secs.max(1e-9) / 1e6,
                c.errors.load(Relaxed),
                c.pattern_errors.load(Relaxed)
            );
        }
    }
    if !a.report.json() {
        outln!(
            "CPU gadget {cpu_percent:.1}% (user {:.2} s, sys {:.2} s)",
            cpu.0,
            cpu.1
        );
    }
    let gone = match raw {
        Some(r) => format!("raw-gadget device on UDC {} released", r.udc),
        None => format!("gadget `{}` removed", a.name),
    };
    if a.report.json() {
        eprintln!("{gone}");
    } else {
        outln!("{gone}");
    }
}
