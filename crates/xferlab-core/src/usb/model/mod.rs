//! The USB bus timing model: predicts bulk throughput for a controller
//! profile, transfer size, depth and direction, and where each microsecond
//! of bus time goes (wire, device latency, host latency, idle). Sans-IO
//! and deterministic: a simulation on integer ticks ([`bus`]) over the
//! wire timing of USB 2.0 ([`wire`]) and controller profiles that are data
//! ([`profile`], `profiles.toml`).

pub mod bus;
pub mod profile;
pub mod wire;

use serde::Serialize;

pub use bus::{Cat, Periodic, PeriodicError, PeriodicKind, Workload};
pub use profile::{Profile, ProfileError, Profiles};
pub use wire::{Phy, Speed, TICKS_PER_US};

use wire::us;

/// How long the model runs: a warm-up it does not count (the queues fill),
/// then the measured window. One second of bus time is 8000 microframes,
/// thousands of transfers even at 64 KiB, and takes milliseconds to run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub warmup_us: f64,
    pub window_us: f64,
}

impl Default for Window {
    fn default() -> Self {
        Window {
            warmup_us: 20_000.0,
            window_us: 1_000_000.0,
        }
    }
}

/// Where the bus time of the window went, in microseconds per transfer
/// (all pipes' transfers together) and as a share of the window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Share {
    pub us_per_transfer: f64,
    pub percent: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Breakdown {
    /// Payload bits on the wire.
    pub wire_payload: Share,
    /// Tokens, framing, CRCs, handshakes, inter-packet gaps, stuffing, SOFs.
    pub wire_overhead: Share,
    /// The device not ready: NAKs, PING rounds, refused OUT data.
    pub device_latency: Share,
    /// The host controller between the transactions of a transfer.
    pub host_gap: Share,
    /// No transfer submitted: the host between transfers.
    pub host_turnaround: Share,
    /// Ends of (micro)frames no transaction fits into.
    pub idle: Share,
}

/// One pipe's prediction.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PipePrediction {
    pub dir: &'static str,
    pub throughput_bps: f64,
    pub transfers_per_s: f64,
    pub transactions_per_s: f64,
    pub naks_per_transfer: f64,
    /// Mean idle between consecutive data transactions of one transfer.
    pub gap_in_transfer_us: Option<f64>,
    /// Mean time from a transfer's last data to the next one's first data.
    pub gap_between_transfers_us: Option<f64>,
    /// Mean time from a transfer's last ACK to the next token on the pipe.
    pub first_token_after_transfer_us: Option<f64>,
    /// Mean time the device NAKed before a transfer's first data (over
    /// the transfers that were NAKed).
    pub nak_span_us: Option<f64>,
}

/// The periodic endpoint's prediction.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PeriodicPrediction {
    #[serde(flatten)]
    pub endpoint: Periodic,
    pub dir: &'static str,
    pub throughput_bps: f64,
    pub transactions_per_s: f64,
    /// The share of each (micro)frame it is due in that its transactions
    /// (and the host's gaps between them) take.
    pub frame_percent: f64,
}

/// What the model predicts for one workload on one profile.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Prediction {
    pub profile: String,
    pub host: String,
    pub device: String,
    pub speed: Speed,
    pub hub_tt: bool,
    pub size: u32,
    pub depth: u32,
    pub device_depth: u32,
    pub max_packet: u32,
    pub window_us: f64,
    /// Payload bits per second, all pipes, the periodic one included.
    pub throughput_bps: f64,
    pub transfers_per_s: f64,
    /// Data transactions per (micro)frame, all pipes, the periodic one
    /// included.
    pub transactions_per_frame: f64,
    /// The bulk pipes.
    pub pipes: Vec<PipePrediction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub periodic: Option<PeriodicPrediction>,
    pub breakdown: Breakdown,
}

fn mean((sum, n): (u64, u64)) -> Option<f64> {
    (n > 0).then(|| us(sum) / n as f64)
}

/// Runs the model.
pub fn predict(p: &Profile, w: &Workload, win: Window) -> Prediction {
    let t = bus::Sim::run(p, w, wire::ticks(win.warmup_us), wire::ticks(win.window_us));
    let secs = us(t.window) / 1e6;
    let pipes: Vec<PipePrediction> = [("in", &t.bulk_in), ("out", &t.bulk_out)]
        .into_iter()
        .filter_map(|(dir, pt)| pt.as_ref().map(|pt| (dir, pt)))
        .map(|(dir, pt)| PipePrediction {
            dir,
            throughput_bps: pt.bytes as f64 * 8.0 / secs,
            transfers_per_s: pt.transfers as f64 / secs,
            transactions_per_s: pt.transactions as f64 / secs,
            naks_per_transfer: if pt.transfers > 0 {
                pt.naks as f64 / pt.transfers as f64
            } else {
                0.0
            },
            gap_in_transfer_us: mean(pt.gap_in_transfer),
            gap_between_transfers_us: mean(pt.gap_between_transfers),
            first_token_after_transfer_us: mean(pt.first_token_after_transfer),
            nak_span_us: mean(pt.nak_span),
        })
        .collect();
    let periodic = w.periodic.zip(t.periodic.as_ref()).map(|(per, pt)| {
        let phy = p.phy;
        let busy = u64::from(per.mult) * per.transaction(&phy)
            + u64::from(per.mult.saturating_sub(1)) * p.host.transaction_gap;
        PeriodicPrediction {
            endpoint: per,
            dir: if per.out { "out" } else { "in" },
            throughput_bps: pt.bytes as f64 * 8.0 / secs,
            transactions_per_s: pt.transactions as f64 / secs,
            frame_percent: 100.0 * busy as f64 / phy.frame as f64,
        }
    });
    let transfers: u64 = [&t.bulk_in, &t.bulk_out]
        .into_iter()
        .flatten()
        .map(|pt| pt.transfers)
        .sum();
    let transactions: u64 = [&t.bulk_in, &t.bulk_out, &t.periodic]
        .into_iter()
        .flatten()
        .map(|pt| pt.transactions)
        .sum();
    let share = |c: Cat| {
        let ticks = t.cats[c as usize];
        Share {
            us_per_transfer: if transfers > 0 {
                us(ticks) / transfers as f64
            } else {
                0.0
            },
            percent: 100.0 * ticks as f64 / t.window as f64,
        }
    };
    Prediction {
        profile: p.name.clone(),
        host: p.host_spec.description.clone(),
        device: p.device_spec.description.clone(),
        speed: p.phy.speed,
        hub_tt: p.tt.is_some(),
        size: w.size,
        depth: w.depth,
        device_depth: w.device_depth.unwrap_or(p.device.depth),
        max_packet: p.phy.max_packet,
        window_us: us(t.window),
        throughput_bps: pipes.iter().map(|x| x.throughput_bps).sum::<f64>()
            + periodic.as_ref().map_or(0.0, |x| x.throughput_bps),
        transfers_per_s: transfers as f64 / secs,
        transactions_per_frame: if t.frames > 0 {
            transactions as f64 / t.frames as f64
        } else {
            0.0
        },
        pipes,
        periodic,
        breakdown: Breakdown {
            wire_payload: share(Cat::WirePayload),
            wire_overhead: share(Cat::WireOverhead),
            device_latency: share(Cat::Device),
            host_gap: share(Cat::HostGap),
            host_turnaround: share(Cat::HostTurnaround),
            idle: share(Cat::FrameEnd),
        },
    }
}

#[cfg(test)]
mod tests;
