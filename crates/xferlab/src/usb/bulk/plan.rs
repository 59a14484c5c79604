//! What a bulk run asks for: the request checked (one-line errors that
//! name the flag) and turned into the [`TestSpec`] the result records.

use xferlab_core::spec::{Direction, Knobs, Limit, Pattern, TestSpec, Transport};
use xferlab_core::units::format_bytes;

use super::BulkRequest;
use crate::output::Format;
use crate::usb::UsbDir;

/// usbfs caps the memory of all URBs in flight (usbcore.usbfs_memory_mb, 16 MiB by default).
const USBFS_DEFAULT_MB: u64 = 16;

/// Largest transfer, -l (what usbfs takes in one URB is bounded by
/// usbfs_memory_mb anyway; this keeps a typo from asking for gigabytes).
pub const MAX_SIZE: u64 = 64 << 20;

/// Most transfers in flight per endpoint, -Q.
pub const MAX_DEPTH: u32 = 4096;

/// Seconds a run lasts without -t or -n.
const DEFAULT_SECONDS: f64 = 10.0;

/// Arguments no device could run with: the one line printed.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("-l/--size must be 1 byte to 64M per transfer (got {0})")]
    Size(u64),
    #[error("-Q/--depth must be 1 to 4096 transfers in flight (got {0})")]
    Depth(u32),
    #[error("-t/--time must be a positive duration (got {0})")]
    Time(f64),
    #[error("-n/--bytes must be at least 1")]
    NoBytes,
    #[error("--transfer-timeout must be positive")]
    TransferTimeout,
    #[error("--format iperf3-json has no shape for USB results; use json, jsonl or csv")]
    Iperf3Json,
    #[error(
        "-l {size} x -Q {depth} {both}= {need} in flight, more than usbfs allows ({limit_mb} MiB, \
         /sys/module/usbcore/parameters/usbfs_memory_mb); lower -l or -Q, or raise that limit as root"
    )]
    UsbfsMemory {
        size: u64,
        depth: u32,
        /// "x 2 directions " for --dir both, else empty.
        both: &'static str,
        need: String,
        limit_mb: u64,
    },
}

/// Rejects arguments no device could run with.
pub fn validate(a: &BulkRequest) -> Result<(), PlanError> {
    check_transfers(a.size, a.depth)?;
    if let Some(t) = a.time {
        if !(t > 0.0 && t.is_finite()) {
            return Err(PlanError::Time(t));
        }
    }
    if a.bytes == Some(0) {
        return Err(PlanError::NoBytes);
    }
    if a.transfer_timeout.is_nan() || a.transfer_timeout <= 0.0 {
        return Err(PlanError::TransferTimeout);
    }
    if a.report.format == Format::Iperf3Json {
        return Err(PlanError::Iperf3Json);
    }
    check_usbfs_memory(a.size, a.depth, a.dir == UsbDir::Both)
}

/// -l and -Q as every host-side USB verb takes them.
pub fn check_transfers(size: u64, depth: u32) -> Result<(), PlanError> {
    if size == 0 || size > MAX_SIZE {
        return Err(PlanError::Size(size));
    }
    if depth == 0 || depth > MAX_DEPTH {
        return Err(PlanError::Depth(depth));
    }
    Ok(())
}

/// The transfers in flight (`size` x `depth`, per direction) must fit in
/// what usbfs lets a process pin.
pub fn check_usbfs_memory(size: u64, depth: u32, both: bool) -> Result<(), PlanError> {
    let dirs = if both { 2 } else { 1 };
    let need = size * u64::from(depth) * dirs;
    let limit_mb = std::fs::read_to_string("/sys/module/usbcore/parameters/usbfs_memory_mb")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(USBFS_DEFAULT_MB);
    if limit_mb > 0 && need > limit_mb << 20 {
        return Err(PlanError::UsbfsMemory {
            size,
            depth,
            both: if dirs == 2 { "x 2 directions " } else { "" },
            need: format_bytes(need),
            limit_mb,
        });
    }
    Ok(())
}

/// When the run ends: a byte quota per direction, else a time.
pub fn limit(a: &BulkRequest) -> Limit {
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
pub fn spec(a: &BulkRequest) -> TestSpec {
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
        title: a.report.title.clone(),
        affinity: Default::default(),
    }
}
