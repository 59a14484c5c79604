//! What a USB bulk run counts, per endpoint, and the `usb` section of the
//! result (schema xferlab.result/1, optional): transfers, transfers/s,
//! short transfers, errors by kind, stalls cleared, pattern errors and the
//! completion-latency percentiles, per interval and in total. Bytes and
//! rates go through the flow's ordinary intervals like every transport.

use serde::{Deserialize, Serialize};

use crate::latency::LatencySummary;

/// Why a transfer failed, as the host sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// EPIPE: the endpoint is halted (cleared and counted, the run goes on).
    Stall,
    /// EOVERFLOW/EPROTO/EILSEQ/ETIME: the device sent more than asked for
    /// (babble) or the bus garbled the packet.
    Fault,
    /// ENODEV/ESHUTDOWN: the device went away; the run ends, partial.
    Disconnected,
    /// The transfer was cancelled (at the end of a run, or timed out).
    Cancelled,
    /// The kernel refused the request (EINVAL).
    Invalid,
    Other,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 6] = [
        ErrorKind::Stall,
        ErrorKind::Fault,
        ErrorKind::Disconnected,
        ErrorKind::Cancelled,
        ErrorKind::Invalid,
        ErrorKind::Other,
    ];
    fn index(self) -> usize {
        self as usize
    }
    pub fn label(self) -> &'static str {
        match self {
            ErrorKind::Stall => "stall",
            ErrorKind::Fault => "fault",
            ErrorKind::Disconnected => "disconnected",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Other => "other",
        }
    }
}

/// Cumulative counters of one endpoint (read at interval boundaries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UsbCounters {
    pub transfers: u64,
    pub bytes: u64,
    pub short: u64,
    pub errors: [u64; 6],
    pub stalls_cleared: u64,
    pub pattern_errors: u64,
}

impl UsbCounters {
    pub fn count_error(&mut self, kind: ErrorKind) {
        self.errors[kind.index()] += 1;
    }
    pub fn errors_total(&self) -> u64 {
        self.errors.iter().sum()
    }
    pub fn error(&self, kind: ErrorKind) -> u64 {
        self.errors[kind.index()]
    }

    /// The interval from `prev` to `self`, `seconds` long.
    pub fn sample(&self, prev: &UsbCounters, start_s: f64, end_s: f64) -> UsbSample {
        let transfers = self.transfers.saturating_sub(prev.transfers);
        UsbSample {
            start_s,
            end_s,
            transfers,
            transfers_per_second: per_second(transfers, end_s - start_s),
            short_transfers: self.short.saturating_sub(prev.short),
            errors: self.errors_total().saturating_sub(prev.errors_total()),
        }
    }

    /// The whole run's figures: `seconds` is the flow's measured window,
    /// `latency` the endpoint's completion latencies.
    pub fn totals(&self, seconds: f64, latency: LatencySummary) -> UsbTotals {
        UsbTotals {
            transfers: self.transfers,
            transfers_per_second: per_second(self.transfers, seconds),
            short_transfers: self.short,
            errors: self.errors_by_kind(),
            stalls_cleared: self.stalls_cleared,
            pattern_errors: self.pattern_errors,
            latency,
        }
    }

    pub fn errors_by_kind(&self) -> Vec<ErrorCount> {
        ErrorKind::ALL
            .iter()
            .filter(|k| self.error(**k) > 0)
            .map(|&kind| ErrorCount {
                kind,
                count: self.error(kind),
            })
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsbSample {
    pub start_s: f64,
    pub end_s: f64,
    pub transfers: u64,
    pub transfers_per_second: f64,
    pub short_transfers: u64,
    pub errors: u64,
}

impl UsbSample {
    /// Takes in `tail`, the counts after the last interval boundary, when
    /// the flow's meter folded that short tail into its last interval:
    /// this sample then ends where the flow does, at `end_s`.
    pub fn absorb(&mut self, tail: &UsbSample, end_s: f64) {
        self.end_s = end_s;
        self.transfers += tail.transfers;
        self.short_transfers += tail.short_transfers;
        self.errors += tail.errors;
        self.transfers_per_second = per_second(self.transfers, self.end_s - self.start_s);
    }
}

/// `count / seconds`, 0 for an empty span.
fn per_second(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ErrorCount {
    pub kind: ErrorKind,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsbTotals {
    pub transfers: u64,
    pub transfers_per_second: f64,
    pub short_transfers: u64,
    pub errors: Vec<ErrorCount>,
    pub stalls_cleared: u64,
    /// Transfers whose data broke the pattern (host-side check of IN data).
    pub pattern_errors: u64,
    /// Completion latency: submit to completion, queueing included.
    pub latency: LatencySummary,
}

/// One endpoint's part of a run; `flow_id` links it to the FlowReport that
/// carries its bytes and rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsbPipeReport {
    pub flow_id: u32,
    pub endpoint: u8,
    pub max_packet: u16,
    pub transfer_size: u64,
    pub depth: u32,
    pub pattern: crate::usb::Pattern,
    pub intervals: Vec<UsbSample>,
    pub total: UsbTotals,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsbDeviceInfo {
    pub bus: u8,
    pub address: u8,
    pub vendor_id: u16,
    pub product_id: u16,
    /// "low", "full", "high", "super", "super_plus" (None if unknown).
    pub speed: Option<String>,
    pub manufacturer: Option<String>,
    pub product: Option<String>,
    pub serial: Option<String>,
}

/// The `usb` section of a side's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsbReport {
    pub device: UsbDeviceInfo,
    pub interface: u8,
    pub alt_setting: u8,
    pub pipes: Vec<UsbPipeReport>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_deltas_and_rates() {
        let mut a = UsbCounters::default();
        let mut b = a;
        b.transfers = 300;
        b.short = 2;
        b.count_error(ErrorKind::Stall);
        b.count_error(ErrorKind::Fault);
        a.transfers = 100;
        let s = b.sample(&a, 1.0, 3.0);
        assert_eq!((s.transfers, s.short_transfers, s.errors), (200, 2, 2));
        assert!((s.transfers_per_second - 100.0).abs() < 1e-9);
        let kinds: Vec<_> = b.errors_by_kind().iter().map(|e| e.kind).collect();
        assert_eq!(kinds, vec![ErrorKind::Stall, ErrorKind::Fault]);
    }

    #[test]
    fn a_folded_tail_extends_the_last_sample() {
        let mut prev = UsbCounters::default();
        let mut now = prev;
        now.transfers = 100;
        let mut last = now.sample(&prev, 1.0, 2.0);
        prev = now;
        now.transfers = 110;
        now.short = 1;
        now.count_error(ErrorKind::Stall);
        last.absorb(&now.sample(&prev, 2.0, 2.25), 2.25);
        assert_eq!(last.end_s, 2.25);
        assert_eq!(
            (last.transfers, last.short_transfers, last.errors),
            (110, 1, 1)
        );
        assert!((last.transfers_per_second - 88.0).abs() < 1e-9);
    }

    #[test]
    fn totals_rate_is_over_the_window_and_zero_for_an_empty_one() {
        let mut c = UsbCounters {
            transfers: 500,
            ..UsbCounters::default()
        };
        c.count_error(ErrorKind::Fault);
        let t = c.totals(2.0, LatencySummary::default());
        assert_eq!(t.transfers_per_second, 250.0);
        assert_eq!(t.errors.len(), 1);
        assert_eq!(
            c.totals(0.0, LatencySummary::default())
                .transfers_per_second,
            0.0
        );
    }
}
