//! `xferlab model usb`: runs the core's USB bus timing model and prints
//! its prediction (human table or JSON, schema `xferlab.usb-model/1`).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;
use xferlab_core::units::RateUnit;
use xferlab_core::usb::model::profile::{DeviceSpec, HostSpec};
use xferlab_core::usb::model::{
    self, Periodic, PeriodicKind, Prediction, Profile, Profiles, Share, Window, Workload,
};

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

/// What `model usb` is asked, as plain values (the command line makes it
/// from its flags: `cli::model`).
pub struct UsbModelRequest<'a> {
    /// A profile name, or HOST+DEVICE.
    pub profile: &'a str,
    /// Bytes per transfer.
    pub size: u64,
    /// Host transfers in flight per endpoint.
    pub depth: u32,
    pub bulk_in: bool,
    pub bulk_out: bool,
    /// `iso|interrupt:in|out:SIZE[xMULT][/INTERVAL]`, unparsed.
    pub periodic: Option<&'a str>,
    pub device_depth: Option<u32>,
    /// Seconds of bus time to simulate.
    pub time_s: f64,
    /// List the profiles instead.
    pub list: bool,
    pub json: bool,
    pub output: Option<&'a Path>,
}

pub fn run(r: &UsbModelRequest) -> ExitCode {
    match usb(r) {
        Ok(()) => ExitCode::SUCCESS,
        Err((e, code)) => {
            eprintln!("xferlab: {e:#}");
            ExitCode::from(code)
        }
    }
}

/// The form `--periodic` takes, for its refusals.
const PERIODIC_FORM: &str = "--periodic takes iso|interrupt:in|out:SIZE[xMULT][/INTERVAL], e.g. iso:in:1024x3 or interrupt:in:64/8";

/// Why the model's flags describe no workload.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("{PERIODIC_FORM}")]
    PeriodicForm,
    #[error("{why} in --periodic '{spec}'; {PERIODIC_FORM}")]
    Periodic { spec: String, why: String },
    #[error("{err} in --periodic '{spec}'")]
    PeriodicLimit {
        spec: String,
        err: model::PeriodicError,
    },
    #[error("--periodic '{spec}': periodic transfers behind a hub's transaction translator (profile {profile}) are not modelled; use a profile without a hub")]
    BehindHub { spec: String, profile: String },
    #[error("-l must be 1 byte to 4 GiB per transfer (got {0})")]
    Size(u64),
    #[error("-Q and --device-depth must be at least 1")]
    Depth,
    #[error("-t must be above 0 and at most 60 seconds of bus time (got {0})")]
    Time(f64),
}

/// `iso|interrupt:in|out:SIZE[xMULT][/INTERVAL]`, checked against the
/// limits of the profile's bus speed.
fn periodic(spec: &str, speed: model::Speed) -> Result<Periodic, WorkloadError> {
    let bad = |why: String| WorkloadError::Periodic {
        spec: spec.to_string(),
        why,
    };
    let mut parts = spec.splitn(3, ':');
    let (Some(kind), Some(dir), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(WorkloadError::PeriodicForm);
    };
    let kind = match kind {
        "iso" | "isochronous" => PeriodicKind::Isochronous,
        "interrupt" | "int" => PeriodicKind::Interrupt,
        k => return Err(bad(format!("unknown transfer type '{k}'"))),
    };
    let out = match dir {
        "in" => false,
        "out" => true,
        d => return Err(bad(format!("unknown direction '{d}'"))),
    };
    let (rest, interval) = match rest.split_once('/') {
        Some((r, i)) => (
            r,
            i.parse::<u32>()
                .map_err(|_| bad(format!("'{i}' is not a number of (micro)frames")))?,
        ),
        None => (rest, 1),
    };
    let (size, mult) = match rest.split_once('x') {
        Some((s, m)) => (
            s,
            m.parse::<u32>()
                .map_err(|_| bad(format!("'{m}' is not a number of transactions")))?,
        ),
        None => (rest, 1),
    };
    let size = xferlab_core::units::parse_size(size)
        .ok()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| bad(format!("'{size}' is not a size in bytes")))?;
    let per = Periodic {
        kind,
        out,
        size,
        mult,
        interval,
    };
    per.check(speed)
        .map_err(|err| WorkloadError::PeriodicLimit {
            spec: spec.to_string(),
            err,
        })?;
    Ok(per)
}

/// The workload of the flags, checked.
pub fn workload(a: &UsbModelRequest, p: &Profile) -> Result<Workload, WorkloadError> {
    if a.size == 0 || a.size > u32::MAX as u64 {
        return Err(WorkloadError::Size(a.size));
    }
    if a.depth == 0 || a.device_depth == Some(0) {
        return Err(WorkloadError::Depth);
    }
    if !(a.time_s > 0.0 && a.time_s <= 60.0) {
        return Err(WorkloadError::Time(a.time_s));
    }
    let periodic = match a.periodic {
        Some(spec) if p.tt.is_some() => {
            return Err(WorkloadError::BehindHub {
                spec: spec.to_string(),
                profile: p.name.to_string(),
            })
        }
        Some(spec) => Some(periodic(spec, p.phy.speed)?),
        None => None,
    };
    Ok(Workload {
        size: a.size as u32,
        depth: a.depth,
        bulk_in: a.bulk_in,
        bulk_out: a.bulk_out,
        device_depth: a.device_depth,
        periodic,
    })
}

fn usb(a: &UsbModelRequest) -> Result<(), (anyhow::Error, u8)> {
    let profiles = Profiles::builtin();
    let mut out = crate::output::open(a.output).map_err(|e| (e.into(), 1))?;
    let io = |e: std::io::Error| (anyhow::anyhow!("cannot write the output: {e}"), 1);
    if a.list {
        return list(&profiles, &mut out).map_err(io);
    }
    let p = profiles.resolve(a.profile).map_err(|e| (e.into(), 2))?;
    let w = workload(a, &p).map_err(|e| (e.into(), 2))?;
    let window = Window {
        window_us: a.time_s * 1e6,
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
    let bulk = if p.pipes.is_empty() {
        "no bulk transfers".to_string()
    } else {
        format!(
            "bulk transfers of {} B, {} in flight (device: {} queued)",
            p.size, p.depth, p.device_depth
        )
    };
    writeln!(
        out,
        "  {:?} speed{}, max packet {} B; {bulk}",
        p.speed,
        if p.hub_tt {
            ", behind a hub's transaction translator"
        } else {
            ""
        },
        p.max_packet,
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "predicted: {}, {:.0} transfers/s, {:.2} data transactions per {frame}",
        rate(p.throughput_bps),
        p.transfers_per_s,
        p.transactions_per_frame
    )?;
    if let Some(per) = &p.periodic {
        let e = &per.endpoint;
        writeln!(
            out,
            "  {} {} {} B x{} every {} {frame}{}: {}, {:.0} transactions/s, {:.1} % of each {frame} it is due in",
            match e.kind {
                PeriodicKind::Isochronous => "isochronous",
                PeriodicKind::Interrupt => "interrupt",
            },
            per.dir.to_uppercase(),
            e.size,
            e.mult,
            e.interval,
            if e.interval == 1 { "" } else { "s" },
            rate(per.throughput_bps),
            per.transactions_per_s,
            per.frame_percent
        )?;
    }
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
