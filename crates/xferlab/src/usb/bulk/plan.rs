//! What a bulk run asks for: the command line checked (one-line errors that
//! name the flag) and turned into the [`TestSpec`] the result records.

use xferlab_core::spec::{Direction, Knobs, Limit, Pattern, TestSpec, Transport};
use xferlab_core::units::format_bytes;

use crate::cli::usb::{BulkArgs, UsbDir};
use crate::output::Format;

/// usbfs caps the memory of all URBs in flight (usbcore.usbfs_memory_mb, 16 MiB by default).
const USBFS_DEFAULT_MB: u64 = 16;

/// Seconds a run lasts without -t or -n.
const DEFAULT_SECONDS: f64 = 10.0;

/// Rejects arguments no device could run with.
pub fn validate(a: &BulkArgs) -> Result<(), String> {
    if a.size == 0 || a.size > 64 << 20 {
        return Err(format!(
            "-l/--size must be 1 byte to 64M per transfer (got {})",
            a.size
        ));
    }
    if a.depth == 0 || a.depth > 4096 {
        return Err(format!(
            "-Q/--depth must be 1 to 4096 transfers in flight (got {})",
            a.depth
        ));
    }
    if let Some(t) = a.time {
        if !(t > 0.0 && t.is_finite()) {
            return Err(format!("-t/--time must be a positive duration (got {t})"));
        }
    }
    if a.bytes == Some(0) {
        return Err("-n/--bytes must be at least 1".into());
    }
    if a.transfer_timeout.is_nan() || a.transfer_timeout <= 0.0 {
        return Err("--transfer-timeout must be positive".into());
    }
    if a.format == Format::Iperf3Json {
        return Err(
            "--format iperf3-json has no shape for USB results; use json, jsonl or csv".into(),
        );
    }
    check_usbfs_memory(a)
}

/// The transfers in flight must fit in what usbfs lets a process pin.
fn check_usbfs_memory(a: &BulkArgs) -> Result<(), String> {
    let dirs = if a.dir == UsbDir::Both { 2 } else { 1 };
    let need = a.size * u64::from(a.depth) * dirs;
    let limit_mb = std::fs::read_to_string("/sys/module/usbcore/parameters/usbfs_memory_mb")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(USBFS_DEFAULT_MB);
    if limit_mb > 0 && need > limit_mb << 20 {
        return Err(format!(
            "-l {} x -Q {} {}= {} in flight, more than usbfs allows ({limit_mb} MiB, \
             /sys/module/usbcore/parameters/usbfs_memory_mb); lower -l or -Q, or raise that limit as root",
            a.size,
            a.depth,
            if dirs == 2 { "x 2 directions " } else { "" },
            format_bytes(need)
        ));
    }
    Ok(())
}

/// When the run ends: a byte quota per direction, else a time.
pub fn limit(a: &BulkArgs) -> Limit {
    match (a.time, a.bytes) {
        (_, Some(bytes)) => Limit::Bytes { bytes },
        (Some(seconds), None) => Limit::Duration { seconds },
        (None, None) => Limit::Duration {
            seconds: DEFAULT_SECONDS,
        },
    }
}

/// The run as a stream test over the `usb_bulk` transport: the host is
/// the client, so IN is the reverse direction and OUT the forward one.
pub fn spec(a: &BulkArgs) -> TestSpec {
    TestSpec {
        pattern: Pattern::Stream,
        transport: Transport::UsbBulk,
        direction: match a.dir {
            UsbDir::In => Direction::Reverse,
            UsbDir::Out => Direction::Forward,
            UsbDir::Both => Direction::Bidir,
        },
        parallel: 1,
        limit: limit(a),
        omit_s: 0.0,
        interval_s: a.interval,
        knobs: Knobs {
            size: a.size,
            ..Knobs::default()
        },
        title: a.title.clone(),
        affinity: Default::default(),
    }
}
