//! `xferlab model ...`: the command line of the timing models.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use xferlab_core::units::{parse_seconds, parse_size};

use crate::model::UsbModelRequest;
use crate::usb::UsbDir;

#[derive(Debug, Args)]
pub struct ModelArgs {
    #[command(subcommand)]
    pub command: ModelCommand,
}

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Predict USB bulk throughput on real controllers (a bus timing model
    /// calibrated on analyzer captures) and where each microsecond goes:
    /// wire, device latency, host latency, idle.
    Usb(Box<UsbModelArgs>),
}

#[derive(Debug, Args)]
pub struct UsbModelArgs {
    /// Controller profile: a name (see --list) or HOST+DEVICE.
    #[arg(long, default_value = "study4")]
    pub profile: String,
    /// Bytes per transfer (and per device request).
    #[arg(short = 'l', long = "size", value_parser = parse_size, default_value = "16K")]
    pub size: u64,
    /// Host transfers in flight per endpoint: 1 = a synchronous loop.
    #[arg(short = 'Q', long, default_value_t = 8)]
    pub depth: u32,
    /// Direction.
    #[arg(long = "dir", value_enum, default_value = "in")]
    pub dir: UsbDir,
    /// A periodic endpoint beside the bulk transfers:
    /// iso|interrupt:in|out:SIZE[xMULT][/INTERVAL], e.g. iso:in:1024x3 (3
    /// x 1024 bytes every microframe, a high-bandwidth isochronous IN
    /// endpoint) or interrupt:in:64/8 (64 bytes every 8 (micro)frames).
    /// It is served first in each (micro)frame it is due in, and its
    /// device is always ready: what the schedule allows, and what it
    /// leaves to bulk.
    #[arg(long, value_name = "SPEC")]
    pub periodic: Option<String>,
    /// Only the periodic endpoint: no bulk transfers.
    #[arg(long, requires = "periodic")]
    pub no_bulk: bool,
    /// Device requests queued per endpoint (default: the profile's).
    #[arg(long, value_name = "N")]
    pub device_depth: Option<u32>,
    /// Seconds of bus time to simulate (after a 20 ms warm-up).
    #[arg(short = 't', long = "time", value_parser = parse_seconds, default_value = "1")]
    pub time: f64,
    /// List the profiles, hosts and devices with their numbers, and exit.
    #[arg(long)]
    pub list: bool,
    /// JSON output (schema xferlab.usb-model/1).
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Write the output to a file.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
}

impl UsbModelArgs {
    /// The flags as the model's request.
    pub fn request(&self) -> UsbModelRequest<'_> {
        UsbModelRequest {
            profile: &self.profile,
            size: self.size,
            depth: self.depth,
            bulk_in: !self.no_bulk && self.dir != UsbDir::Out,
            bulk_out: !self.no_bulk && self.dir != UsbDir::In,
            periodic: self.periodic.as_deref(),
            device_depth: self.device_depth,
            time_s: self.time,
            list: self.list,
            json: self.json,
            output: self.output.as_deref(),
        }
    }
}
