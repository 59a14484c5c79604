//! The side section of `xferlab usb net` (`"transport": {"kind":
//! "usb_net", ...}`): how the link was set up and what each of its two
//! threads counted. Bytes per interval are in the side's two flows (tx =
//! c2s sender, rx = s2c receiver), as for every transport.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::gro::GroStats;
use super::{DecodeStats, Encap};
use crate::usb::stats::UsbDeviceInfo;

/// `client.transport` of a `usb net` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsbNetReport {
    pub device: UsbDeviceInfo,
    pub encap: Encap,
    /// Ethernet frames per OUT transfer, at most (`--frames-per-transfer`).
    pub frames_per_transfer_max: u64,
    /// How long the first frame of a transfer waited for more, µs.
    pub coalesce_us: u64,
    pub depth: NetDepth,
    /// Where the URBs' buffers are: `one_mapping`, `mapping_per_urb` or
    /// `heap` (heap costs usbfs a copy per transfer).
    pub buffers: String,
    /// ppoll() calls of both threads.
    pub polls: u64,
    pub threads: NetThreads,
    pub tx: NetTx,
    pub rx: NetRx,
}

/// Transfers in flight per direction, and where the figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NetDepth {
    pub out: u64,
    #[serde(rename = "in")]
    pub inn: u64,
    pub from: DepthFrom,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DepthFrom {
    /// `-Q`.
    Flag,
    /// Twice the kernel usbnet driver's queue memory at this speed, so
    /// the comparison with it is fair.
    TwiceUsbnetQueueMemory,
}

/// Per thread: what it cost.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct NetThreads {
    pub tx: ThreadUse,
    pub rx: ThreadUse,
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ThreadUse {
    /// CPU seconds of the thread (user + system).
    pub cpu_s: f64,
    /// ppoll() calls.
    pub polls: u64,
}

/// TAP -> bulk OUT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct NetTx {
    pub transfers: u64,
    pub frames: u64,
    pub bytes: u64,
    /// Transfers that failed.
    pub errors: u64,
    /// Frames larger than one transfer may carry: dropped.
    pub too_large: u64,
    /// Packets from the TAP the segmenter could not cut: dropped.
    pub malformed: u64,
}

/// Bulk IN -> TAP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct NetRx {
    pub transfers: u64,
    pub bytes: u64,
    pub errors: u64,
    pub decode: DecodeStats,
    pub gro: GroStats,
    /// Frames the TAP refused (its queue full).
    pub tap_drops: u64,
}
