//! What a `usb cbr` run asks for, checked: one-line errors that name the
//! flag (exit 2), and the host application, the device's START parameters
//! and the rates to try.

use std::time::Duration;

use xferlab_core::units::parse_seconds;
use xferlab_core::usb::cbr::wire::{self, StartParams};

use super::stream::App;
use super::{CbrDir, CbrRequest};
use crate::output::Format;
use crate::usb::bulk::plan;
use crate::usb::Fail;

/// The checked command line.
pub struct Setup {
    pub app: App,
    /// START's parameters, the rate set per trial.
    pub params: StartParams,
    pub rates: Vec<u64>,
}

pub fn check(a: &CbrRequest) -> Result<Setup, Fail> {
    let bad = |m: String| Err(Fail::usage(m));
    // The document is one JSON object or text lines; a CSV shared with
    // socket `cbr` can come later.
    let refused = match a.report.format {
        Format::Human | Format::Json => None,
        Format::Jsonl => Some("jsonl"),
        Format::Csv => Some("csv"),
        Format::Iperf3Json => Some("iperf3-json"),
    };
    if let Some(f) = refused {
        return bad(format!(
            "--format {f} has no shape for usb cbr's report; use human or json"
        ));
    }
    let depth = match a.host_buffer {
        None => a.depth,
        Some(b) if a.size > 0 && b % a.size == 0 && b / a.size <= u64::from(u32::MAX) => {
            (b / a.size) as u32
        }
        Some(b) => {
            return bad(format!(
            "--host-buffer ({b}) must be a whole number of -l/--size transfers ({}): it is -l x -Q",
            a.size
        ))
        }
    };
    plan::check_transfers(a.size, depth).map_err(Fail::usage)?;
    plan::check_usbfs_memory(a.size, depth, a.dir == CbrDir::Both).map_err(Fail::usage)?;
    let call = a.app_size.unwrap_or(a.size);
    if call == 0 || call > plan::MAX_SIZE {
        return bad(format!(
            "--app-size must be 1 byte up to 64M per call (got {call})"
        ));
    }
    if !(a.time > 0.0 && a.time.is_finite()) {
        return bad(format!(
            "-t/--time must be a positive duration (got {})",
            a.time
        ));
    }
    if a.repeat == 0 || a.repeat > 1000 {
        return bad(format!(
            "--repeat must be 1 to 1000 runs (got {})",
            a.repeat
        ));
    }
    if a.device_buffer == 0 || a.device_buffer > wire::MAX_BUFFER {
        return bad(format!(
            "--device-buffer must be 1 byte to 64M (got {})",
            a.device_buffer
        ));
    }
    if a.device_request == 0 || a.device_request > a.device_buffer {
        return bad(format!(
            "--device-request ({}) must be 1 byte up to --device-buffer ({}): the device hands its controller whole requests from its buffer",
            a.device_request, a.device_buffer
        ));
    }
    if a.sample_size == 0 || a.sample_size > a.device_buffer {
        return bad(format!(
            "--sample-size ({}) must be 1 byte up to --device-buffer ({})",
            a.sample_size, a.device_buffer
        ));
    }
    let prefill = a.prefill.unwrap_or((a.device_buffer / 2).max(1));
    if prefill == 0 || prefill > a.device_buffer {
        return bad(format!(
            "--prefill ({prefill}) must be 1 byte up to --device-buffer ({})",
            a.device_buffer
        ));
    }
    let stall = match &a.host_stall {
        None => None,
        Some(s) => Some(parse_stall(s).map_err(Fail::usage)?),
    };
    let rates = match a.rate {
        Some(r) => vec![r],
        None if a.ladder.is_empty() => {
            return bad("give a rate (-b/--rate BYTES/S) or a --ladder of rates".into())
        }
        None => a.ladder.clone(),
    };
    Ok(Setup {
        app: App {
            size: a.size as usize,
            depth: depth as usize,
            call: call as usize,
            stall,
        },
        params: StartParams {
            rx: a.dir != CbrDir::Tx,
            tx: a.dir != CbrDir::Rx,
            rate: 0,
            sample: a.sample_size,
            buffer: a.device_buffer,
            request: a.device_request,
            prefill,
        },
        rates,
    })
}

/// `EVERY:FOR`, FOR shorter than EVERY.
fn parse_stall(s: &str) -> Result<(Duration, Duration), String> {
    let help = || {
        format!("--host-stall takes EVERY:FOR durations with 0 < FOR < EVERY, e.g. 500ms:100ms (got '{s}')")
    };
    let (every, len) = s.split_once(':').ok_or_else(help)?;
    let every = parse_seconds(every).map_err(|_| help())?;
    let len = parse_seconds(len).map_err(|_| help())?;
    if !(len > 0.0 && every > len && every.is_finite()) {
        return Err(help());
    }
    Ok((Duration::from_secs_f64(every), Duration::from_secs_f64(len)))
}
