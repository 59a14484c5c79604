//! The side section of `xferlab usb gadget` (`"transport": {"kind":
//! "usb_gadget", ...}`). The gadget's process is the device end: its side
//! goes in `client` (a result always has one) with `endpoint: "server"`.
//! Bytes per interval are in the side's flows (IN = s2c sender, OUT = c2s
//! receiver); the kernel's own functions (sourcesink, ecm, eem, ncm) have
//! no threads here and no flows.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::net::{DecodeStats, Encap};
use super::Pattern;

/// `client.transport` of a `usb gadget` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsbGadgetReport {
    /// `--function`: `ffs`, `cbr`, `net`, `sourcesink`, `ecm`, `eem`, `ncm`.
    pub function: String,
    /// `aio` or `sync` (raw-gadget's calls block: always `sync`).
    pub io: String,
    /// `functionfs` or `raw_gadget`.
    pub via: String,
    /// Requests in flight per endpoint (1 with raw-gadget).
    pub queue: u32,
    /// `--qmult` of the kernel's network functions, when given.
    pub qmult: Option<u32>,
    /// The network interface of a kernel network function.
    pub ifname: Option<String>,
    /// Bytes per request.
    pub size: u64,
    pub pattern: Pattern,
    /// The configfs gadget's name (`--name`).
    pub name: String,
    /// The UDC it was bound to.
    pub udc: String,
    /// `vid:pid` in hex, as `lsusb` shows it.
    pub id: String,
    /// How often the host enabled the function (FunctionFS ENABLE events).
    pub enabled_times: u64,
    /// To the host.
    #[serde(rename = "in")]
    pub input: GadgetDir,
    /// From the host.
    #[serde(rename = "out")]
    pub output: GadgetDir,
    /// `--function net`: the link to the TAP.
    pub net: Option<GadgetNet>,
}

/// One direction's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct GadgetDir {
    pub transfers: u64,
    pub bytes: u64,
    pub errors: u64,
    /// OUT requests whose data broke `--pattern`.
    pub pattern_errors: u64,
}

/// `--function net`'s link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GadgetNet {
    pub encap: Encap,
    /// The TAP device.
    pub tap: String,
    pub frames_per_transfer_max: u64,
    pub coalesce_us: u64,
    /// Frames sent to the host.
    pub tx_frames: u64,
    /// Frames too large for one transfer: dropped.
    pub tx_too_large: u64,
    pub rx_decode: DecodeStats,
    /// Frames the TAP refused (its queue full).
    pub tap_drops: u64,
    /// `--via raw-gadget`: the device raw-gadget made and what the host
    /// asked of it.
    pub raw_gadget: Option<RawGadgetReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RawGadgetReport {
    pub udc: String,
    pub endpoints: RawEndpoints,
    /// The host's MAC address, `aa:bb:cc:dd:ee:ff`.
    pub host_mac: String,
    pub control_requests: u64,
    /// Control requests answered with a stall (not supported).
    pub stalled: u64,
    pub control_errors: u64,
    /// Interrupt notifications sent (NETWORK_CONNECTION, SPEED_CHANGE).
    pub notifications: u64,
    /// The host's last SET_ETHERNET_PACKET_FILTER.
    pub packet_filter: u16,
    /// NCM: the host's NTB IN size (SET_NTB_INPUT_SIZE), bytes.
    pub ntb_in_max: u64,
}

/// bEndpointAddress of each endpoint, `0x81`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RawEndpoints {
    pub bulk_in: String,
    pub bulk_out: String,
    pub notify: String,
}
