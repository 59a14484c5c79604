//! `xferlab model usb`: runs the core's USB bus timing model and prints
//! its prediction (human table or JSON, schema `xferlab.usb-model/1`).

use std::io::Write;
use std::process::ExitCode;

use serde::Serialize;
use xferlab_core::units::RateUnit;
use xferlab_core::usb::model::profile::{DeviceSpec, HostSpec};
use xferlab_core::usb::model::{self, Prediction, Profiles, Share, Window, Workload};

use crate::cli::model::{ModelArgs, ModelCommand, UsbModelArgs};
use crate::cli::usb::UsbDir;

/// Schema of `model usb -J`.
pub const SCHEMA: &str = "xferlab.usb-model/1";

#[derive(Serialize)]
struct Doc<'a> {
    schema: &'static str,
    #[serde(flatten)]
    prediction: &'a Prediction,
    /// The numbers the prediction rests on (profiles.toml).
    host_profile: &'a HostSpec,
    device_profile: &'a DeviceSpec,
}

pub fn run(a: &ModelArgs) -> ExitCode {
    match &a.command {
        ModelCommand::Usb(u) => match usb(u) {
            Ok(()) => ExitCode::SUCCESS,
            Err((msg, code)) => {
                eprintln!("xferlab: {msg}");
                ExitCode::from(code)
            }
        },
    }
}

/// The workload of the flags, checked.
pub fn workload(a: &UsbModelArgs) -> Result<Workload, String> {
    if a.size == 0 || a.size > u32::MAX as u64 {
        return Err(format!(
            "-l must be 1 byte to 4 GiB per transfer (got {})",
            a.size
        ));
    }
    if a.depth == 0 || a.device_depth == Some(0) {
        return Err("-Q and --device-depth must be at least 1".into());
    }
    if !(a.time > 0.0 && a.time <= 60.0) {
        return Err(format!(
            "-t must be above 0 and at most 60 seconds of bus time (got {})",
            a.time
        ));
    }
    Ok(Workload {
        size: a.size as u32,
        depth: a.depth,
        bulk_in: a.dir != UsbDir::Out,
        bulk_out: a.dir != UsbDir::In,
        device_depth: a.device_depth,
    })
}

fn usb(a: &UsbModelArgs) -> Result<(), (String, u8)> {
    let profiles = Profiles::builtin();
    let mut out = crate::output::open(a.output.as_deref()).map_err(|e| (e, 1))?;
    let io = |e: std::io::Error| (format!("cannot write the output: {e}"), 1);
    if a.list {
        return list(&profiles, &mut out).map_err(io);
    }
    let w = workload(a).map_err(|e| (e, 2))?;
    let p = profiles
        .resolve(&a.profile)
        .map_err(|e| (e.to_string(), 2))?;
    let window = Window {
        window_us: a.time * 1e6,
        ..Window::default()
    };
    let pred = model::predict(&p, &w, window);
    if a.json {
        let doc = Doc {
            schema: SCHEMA,
            prediction: &pred,
            host_profile: &p.host_spec,
            device_profile: &p.device_spec,
        };
        serde_json::to_writer_pretty(&mut out, &doc).map_err(|e| io(e.into()))?;
        writeln!(out).map_err(io)?;
    } else {
        human(&pred, &mut out).map_err(io)?;
    }
    out.flush().map_err(io)
}

fn human(p: &Prediction, out: &mut dyn Write) -> std::io::Result<()> {
    let rate = |bps: f64| {
        format!(
            "{} ({})",
            RateUnit::AutoBits.format_rate(bps),
            RateUnit::AutoBytes.format_rate(bps)
        )
    };
    let frame = match p.speed {
        model::Speed::High => "microframe",
        model::Speed::Full => "frame",
    };
    writeln!(out, "USB bus model, profile {}", p.profile)?;
    writeln!(out, "  host:   {}", p.host)?;
    writeln!(out, "  device: {}", p.device)?;
    writeln!(
        out,
        "  {:?} speed{}, max packet {} B; transfers of {} B, {} in flight (device: {} queued)",
        p.speed,
        if p.hub_tt {
            ", behind a hub's transaction translator"
        } else {
            ""
        },
        p.max_packet,
        p.size,
        p.depth,
        p.device_depth
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "predicted: {}, {:.0} transfers/s, {:.2} data transactions per {frame}",
        rate(p.throughput_bps),
        p.transfers_per_s,
        p.transactions_per_frame
    )?;
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} us"));
    for pipe in &p.pipes {
        writeln!(
            out,
            "  {:<3} {}, {:.1} NAKs/transfer, between transactions {}, between transfers {}",
            pipe.dir.to_uppercase(),
            rate(pipe.throughput_bps),
            pipe.naks_per_transfer,
            opt(pipe.gap_in_transfer_us),
            opt(pipe.gap_between_transfers_us),
        )?;
    }
    writeln!(out)?;
    writeln!(out, "where the bus time goes          us/transfer    share")?;
    let b = &p.breakdown;
    let rows: [(&str, &Share); 6] = [
        ("wire: payload", &b.wire_payload),
        ("wire: protocol overhead, SOF", &b.wire_overhead),
        ("device latency (NAK, PING)", &b.device_latency),
        ("host: between transactions", &b.host_gap),
        ("host: between transfers", &b.host_turnaround),
        ("idle: frame ends", &b.idle),
    ];
    for (name, s) in rows {
        writeln!(
            out,
            "  {name:<30} {:>10.2} {:>7.1} %",
            s.us_per_transfer, s.percent
        )?;
    }
    Ok(())
}

fn list(p: &Profiles, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "profiles (--profile NAME, or --profile HOST+DEVICE):")?;
    for (name, s) in &p.profile {
        writeln!(
            out,
            "  {name:<12} {}+{}: {}",
            s.host, s.device, s.description
        )?;
    }
    writeln!(out, "hosts (gaps in us):")?;
    for (name, h) in &p.host {
        writeln!(
            out,
            "  {name:<12} {:?} speed; transaction {}, after NAK {}, queued transfer {}, interrupt every {}, resubmit {}: {}",
            h.speed, h.transaction_gap_us, h.nak_gap_us, h.queued_gap_us, h.irq_interval_us, h.resubmit_us, h.description
        )?;
    }
    writeln!(out, "devices:")?;
    for (name, d) in &p.device {
        writeln!(
            out,
            "  {name:<12} {:?} speed; {} queued, latency {} us, OUT DMA per {:?} ({} us): {}",
            d.speed, d.depth, d.latency_us, d.out_dma, d.dma_us, d.description
        )?;
    }
    writeln!(
        out,
        "(the source of every number: crates/xferlab-core/src/usb/model/profiles.toml)"
    )
}
