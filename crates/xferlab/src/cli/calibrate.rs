//! `xferlab calibrate`: the command line of the size calibration.

use clap::Args;
use xferlab_core::units::parse_seconds;

use crate::calibrate::CalibrateRequest;

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Seconds per candidate run (each an embedded loopback stream).
    #[arg(short = 't', long, value_parser = parse_seconds, default_value = "0.4")]
    pub time: f64,
    /// Rounds: every candidate runs once per round, in an order that
    /// rotates; a candidate's score is the median of its rounds.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Print this machine's calibration (or that there is none) and exit.
    #[arg(long, conflicts_with = "forget")]
    pub show: bool,
    /// Remove this machine's calibration: flows go back to 128 KiB.
    #[arg(long)]
    pub forget: bool,
    /// JSON output (schema xferlab.calibrate/1).
    #[arg(short = 'J', long)]
    pub json: bool,
}

impl CalibrateArgs {
    pub fn request(&self) -> CalibrateRequest {
        CalibrateRequest {
            time: self.time,
            rounds: self.rounds,
            show: self.show,
            forget: self.forget,
            json: self.json,
        }
    }
}
