//! The `xferlab.cbr/1` document of `xferlab usb cbr`: the setup, every
//! trial of every run with what both ends measured, and the highest rate
//! sustained. Socket `xferlab cbr` writes the same schema without the USB
//! members; `transport: "usb"` tells them apart (the experiment metrics
//! read both).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rate::{Faults, RateReport};
use super::{CbrCriterion, CbrOutcome};
use crate::datagram::{repeat_summary, RepeatSummary, Verdict};
use crate::usb::stats::UsbDeviceInfo;

pub const SCHEMA: &str = "xferlab.cbr/1";

/// The whole document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsbCbrReport {
    /// [`SCHEMA`].
    pub schema: String,
    /// Always `usb`.
    pub transport: String,
    pub device: UsbDeviceInfo,
    pub usb: UsbCbrSetup,
    pub criterion: CbrCriterion,
    pub runs: Vec<CbrRun>,
    /// The best rate of each run, bit/s (as socket `cbr` counts).
    pub summary: RepeatSummary,
    /// The same in bytes/s (as the device counts).
    pub summary_bytes_per_s: BytesSummary,
    /// Ctrl-C ended the runs early.
    pub interrupted: bool,
}

impl UsbCbrReport {
    /// The document of `runs`, summarised.
    pub fn new(
        device: UsbDeviceInfo,
        usb: UsbCbrSetup,
        criterion: CbrCriterion,
        runs: Vec<CbrRun>,
        interrupted: bool,
    ) -> UsbCbrReport {
        let bests: Vec<Option<u64>> = runs.iter().map(|r| r.best_bps).collect();
        let summary = repeat_summary(&bests);
        UsbCbrReport {
            schema: SCHEMA.into(),
            transport: "usb".into(),
            device,
            usb,
            criterion,
            runs,
            summary,
            summary_bytes_per_s: BytesSummary {
                max: summary.max.map(|b| b / 8),
                median: summary.median.map(|b| b / 8),
                min: summary.min.map(|b| b / 8),
            },
            interrupted,
        }
    }

    /// Every run found a sustained rate and none was cut short.
    pub fn sustained(&self) -> bool {
        !self.interrupted && !self.runs.is_empty() && self.runs.iter().all(|r| r.best_bps.is_some())
    }
}

/// Which way the samples stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CbrDirection {
    /// Device to host (bulk IN).
    Rx,
    /// Host to device (bulk OUT).
    Tx,
    /// Both at once, each at the rate.
    Both,
}

/// What every trial was run with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsbCbrSetup {
    pub dir: CbrDirection,
    pub interface: u8,
    /// Bytes per host transfer.
    pub transfer_size: u64,
    /// Host transfers in flight per direction.
    pub depth: u64,
    /// Bytes per application read/write call.
    pub app_size: u64,
    pub device_buffer: u64,
    pub device_request: u64,
    pub sample_size: u64,
    pub prefill: u64,
    pub seconds_per_trial: f64,
    /// The test hook that stalls the host application.
    pub host_stall: Option<HostStall>,
    /// The rates asked for (one, or the ladder).
    pub rates_bytes_per_s: Vec<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostStall {
    pub every_s: f64,
    pub for_s: f64,
}

/// One run of the ladder (or of the one rate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CbrRun {
    pub trials: Vec<CbrTrial>,
    /// The highest rate sustained, bit/s; None if none was.
    pub best_bps: Option<u64>,
    pub best_bytes_per_s: Option<u64>,
}

impl CbrRun {
    pub fn new(trials: Vec<CbrTrial>, best_bytes_per_s: Option<u64>) -> CbrRun {
        CbrRun {
            trials,
            best_bps: best_bytes_per_s.map(|b| b * 8),
            best_bytes_per_s,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct BytesSummary {
    pub max: Option<u64>,
    pub median: Option<u64>,
    pub min: Option<u64>,
}

/// A direction's figure; None for a direction the trial did not stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PerDirection<T> {
    pub rx: Option<T>,
    pub tx: Option<T>,
}

/// One trial at one rate, as both ends saw it and as judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CbrTrial {
    pub rate_bps: u64,
    pub rate_bytes_per_s: u64,
    /// START to STOP, as the device timed the stream.
    pub seconds: f64,
    /// Host bytes summed over the directions, over `seconds`.
    pub host_bytes_per_s: f64,
    /// Overrun samples, both directions.
    pub overruns: u64,
    /// Underrun samples, both directions.
    pub underruns: u64,
    pub device: PerDirection<DeviceSide>,
    pub host: PerDirection<HostSide>,
    pub sustained: bool,
    /// Why the rate was not sustained.
    pub reason: Option<String>,
    /// The host stream's error.
    pub error: Option<String>,
}

impl CbrTrial {
    /// A trial at `rate` bytes/s that the device streamed for
    /// `elapsed_ns` and reported as `outcome`, with the host's sides.
    pub fn new(
        rate: u64,
        elapsed_ns: u64,
        outcome: &CbrOutcome,
        host: PerDirection<HostSide>,
        verdict: &Verdict,
    ) -> CbrTrial {
        let seconds = elapsed_ns as f64 / 1e9;
        let bytes: u64 = host.rx.iter().chain(host.tx.iter()).map(|h| h.bytes).sum();
        let (sustained, reason) = match verdict {
            Verdict::Sustained => (true, None),
            Verdict::Failed(why) => (false, Some(why.clone())),
        };
        CbrTrial {
            rate_bps: rate * 8,
            rate_bytes_per_s: rate,
            seconds,
            host_bytes_per_s: bytes as f64 / seconds.max(1e-9),
            overruns: outcome.overruns(),
            underruns: outcome.underruns(),
            device: PerDirection {
                rx: outcome.rx.as_ref().map(DeviceSide::from),
                tx: outcome.tx.as_ref().map(DeviceSide::from),
            },
            host,
            sustained,
            reason,
            error: outcome.host_error.clone(),
        }
    }
}

/// The device's rate buffer of one direction ([`RateReport`]), in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceSide {
    pub clock_start_s: Option<f64>,
    pub samples_due: u64,
    pub sample_bytes: u64,
    pub host_bytes: u64,
    pub fill: u64,
    pub max_fill: u64,
    pub min_fill: u64,
    pub overruns: FaultsReport,
    pub underruns: FaultsReport,
}

impl From<&RateReport> for DeviceSide {
    fn from(r: &RateReport) -> DeviceSide {
        DeviceSide {
            clock_start_s: r.clock_start_ns.map(|n| n as f64 / 1e9),
            samples_due: r.samples_due,
            sample_bytes: r.sample_bytes,
            host_bytes: r.host_bytes,
            fill: r.fill,
            max_fill: r.max_fill,
            min_fill: r.min_fill,
            overruns: FaultsReport::from(&r.overruns),
            underruns: FaultsReport::from(&r.underruns),
        }
    }
}

/// Overruns or underruns ([`Faults`]): the first episodes' start times
/// and lengths, as many as the device keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FaultsReport {
    pub samples: u64,
    pub episodes: u64,
    pub first_s: Vec<f64>,
    pub first_samples: Vec<u64>,
}

impl From<&Faults> for FaultsReport {
    fn from(f: &Faults) -> FaultsReport {
        FaultsReport {
            samples: f.samples,
            episodes: f.episodes,
            first_s: f.kept().iter().map(|e| e.start_ns as f64 / 1e9).collect(),
            first_samples: f.kept().iter().map(|e| e.samples).collect(),
        }
    }
}

/// What the host application of one direction did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostSide {
    pub bytes: u64,
    pub transfers: u64,
    pub app_calls: u64,
    pub stalls: u64,
    /// From the stream thread's start to its stop.
    pub seconds: f64,
    pub bytes_per_s: f64,
    /// The error that ended the stream early.
    pub error: Option<String>,
}

impl HostSide {
    pub fn new(
        bytes: u64,
        transfers: u64,
        app_calls: u64,
        stalls: u64,
        seconds: f64,
        error: Option<String>,
    ) -> HostSide {
        HostSide {
            bytes,
            transfers,
            app_calls,
            stalls,
            seconds,
            bytes_per_s: bytes as f64 / seconds.max(1e-9),
            error,
        }
    }
}
