//! What `usb cbr` shows: a line per trial and a closing line in text (the
//! JSON document is the core's [`UsbCbrReport`], serialized as is).

use xferlab_core::usb::cbr::report::{CbrTrial, FaultsReport, HostSide, UsbCbrReport};

use super::plan::Setup;
use super::stream::HostCounts;
use super::{CbrDir, CbrRequest};
use crate::usb::bulk::claim::Claimed;

/// One direction of the host application, for the document.
pub fn host_side(c: &HostCounts) -> HostSide {
    HostSide::new(
        c.bytes,
        c.transfers,
        c.app_calls,
        c.stalls,
        c.seconds,
        c.error.clone(),
    )
}

/// The text's first line: the device.
pub fn device_line(dev: &Claimed) -> String {
    format!(
        "Device {} at {} speed \"{}\", interface {}",
        dev.name,
        dev.speed,
        dev.info.product_string().unwrap_or(""),
        dev.pipes.interface
    )
}

/// The text's second line: what every trial runs with.
pub fn test_line(a: &CbrRequest, s: &Setup) -> String {
    format!(
        "Test: USB fixed-rate {}, {} B per transfer, {} in flight, application calls of {} B, device buffer {} B in {} B requests, {}-byte samples, {} s per trial{}",
        dir_label(a.dir),
        a.size,
        s.app.depth,
        s.app.call,
        a.device_buffer,
        a.device_request,
        a.sample_size,
        a.time,
        s.app
            .stall
            .map(|(e, l)| format!(
                ", host stalls {:.3} s every {:.3} s",
                l.as_secs_f64(),
                e.as_secs_f64()
            ))
            .unwrap_or_default()
    )
}

fn dir_label(d: CbrDir) -> &'static str {
    match d {
        CbrDir::Rx => "RX (device to host)",
        CbrDir::Tx => "TX (host to device)",
        CbrDir::Both => "RX+TX (both at once)",
    }
}

fn mbytes(bytes_per_s: u64) -> String {
    format!("{:.2} MB/s", bytes_per_s as f64 / 1e6)
}

/// ` at 0.250, 1.500 s`: the first episodes' start times, at most four.
fn times(f: Option<&FaultsReport>) -> String {
    let Some(f) = f else {
        return String::new();
    };
    let shown: Vec<String> = f
        .first_s
        .iter()
        .take(4)
        .map(|s| format!("{s:.3}"))
        .collect();
    if shown.is_empty() {
        String::new()
    } else {
        format!(
            " at {} s{}",
            shown.join(", "),
            if f.episodes > 4 { ", ..." } else { "" }
        )
    }
}

/// A trial of run `run` in one line: rates, the device's faults (RX
/// overruns, TX underruns) and the verdict.
pub fn trial_line(run: u32, t: &CbrTrial) -> String {
    let over = t.device.rx.as_ref().map(|r| &r.overruns);
    let under = t.device.tx.as_ref().map(|r| &r.underruns);
    let shown = match (&t.sustained, &t.reason) {
        (true, _) => "sustained".to_string(),
        (false, why) => format!("FAILED: {}", why.as_deref().unwrap_or("")),
    };
    format!(
        "run {run}  {:>12}  host {:>12}  overruns {:>8} ({} ep{})  underruns {:>8} ({} ep{})  -> {shown}",
        mbytes(t.rate_bytes_per_s),
        format!("{:.2} MB/s", t.host_bytes_per_s / 1e6),
        t.overruns,
        over.map_or(0, |f| f.episodes),
        times(over),
        t.underruns,
        under.map_or(0, |f| f.episodes),
        times(under),
    )
}

/// The closing line: whether the one rate held (`one_rate`), else the
/// highest rate sustained over the runs.
pub fn summary_line(doc: &UsbCbrReport, one_rate: bool) -> String {
    if one_rate {
        return if doc.sustained() {
            "constant rate sustained".into()
        } else {
            "constant rate NOT sustained".into()
        };
    }
    doc.summary.line(|r| mbytes(r / 8))
}

#[cfg(test)]
mod tests {
    //! Golden: `testdata/golden-doc.json` and `golden-lines.txt` are what
    //! the untyped `json!` report and the text lines gave for these trials
    //! before the document was typed; the typed one must equal them.

    use super::*;
    use std::time::Duration;
    use xferlab_core::datagram::Verdict;
    use xferlab_core::usb::cbr::rate::{Episode, Faults, RateReport};
    use xferlab_core::usb::cbr::report::{
        CbrDirection, CbrRun, HostStall, PerDirection, UsbCbrSetup,
    };
    use xferlab_core::usb::cbr::{CbrCriterion, CbrOutcome};
    use xferlab_core::usb::stats::UsbDeviceInfo;

    fn faults(samples: u64, eps: &[(u64, u64)]) -> Faults {
        let mut f = Faults {
            samples,
            episodes: eps.len() as u64,
            ..Faults::default()
        };
        for (i, &(start_ns, samples)) in eps.iter().enumerate() {
            f.first[i] = Episode { start_ns, samples };
        }
        f
    }

    fn trials() -> Vec<CbrTrial> {
        let rx = RateReport {
            clock_start_ns: Some(0),
            samples_due: 8_000_000,
            sample_bytes: 32_000_000,
            host_bytes: 31_990_000,
            fill: 1024,
            max_fill: 65536,
            min_fill: 0,
            overruns: faults(40, &[(250_000_000, 30), (1_500_000_000, 10)]),
            underruns: Faults::default(),
        };
        let tx = RateReport {
            clock_start_ns: None,
            samples_due: 3,
            sample_bytes: 12,
            host_bytes: 0,
            fill: 0,
            max_fill: 12,
            min_fill: 4,
            overruns: Faults::default(),
            underruns: faults(7, &[(125_000, 7)]),
        };
        let host = |bytes, error: Option<&str>| {
            Some(host_side(&HostCounts {
                bytes,
                transfers: bytes / 16384,
                app_calls: bytes / 4096,
                stalls: 2,
                seconds: 2.003,
                error: error.map(str::to_string),
            }))
        };
        vec![
            CbrTrial::new(
                16_000_000,
                2_000_000_000,
                &CbrOutcome {
                    rx: Some(rx),
                    tx: None,
                    host_error: None,
                },
                PerDirection {
                    rx: host(31_990_000, None),
                    tx: None,
                },
                &Verdict::Failed("40 overrun samples (max 0), first at 0.250 s".into()),
            ),
            CbrTrial::new(
                18_300_000,
                1_999_999_123,
                &CbrOutcome {
                    rx: Some(rx),
                    tx: Some(tx),
                    host_error: Some("the device went away".into()),
                },
                PerDirection {
                    rx: host(1_000, None),
                    tx: host(0, Some("the device went away")),
                },
                &Verdict::Sustained,
            ),
            CbrTrial::new(
                1,
                0,
                &CbrOutcome::default(),
                PerDirection { rx: None, tx: None },
                &Verdict::Sustained,
            ),
        ]
    }

    #[test]
    fn the_typed_document_equals_the_untyped_one_it_replaced() {
        let stall = (Duration::from_millis(500), Duration::from_millis(100));
        let doc = UsbCbrReport::new(
            UsbDeviceInfo::default(),
            UsbCbrSetup {
                dir: CbrDirection::Both,
                interface: 2,
                transfer_size: 16384,
                depth: 8,
                app_size: 4096,
                device_buffer: 65536,
                device_request: 16384,
                sample_size: 4,
                prefill: 32768,
                seconds_per_trial: 2.0,
                host_stall: Some(HostStall {
                    every_s: stall.0.as_secs_f64(),
                    for_s: stall.1.as_secs_f64(),
                }),
                rates_bytes_per_s: vec![16_000_000, 18_300_000],
            },
            CbrCriterion {
                max_overruns: 3,
                max_underruns: 0,
            },
            vec![
                CbrRun::new(trials(), Some(16_000_000)),
                CbrRun::new(Vec::new(), None),
            ],
            true,
        );
        let golden: serde_json::Value =
            serde_json::from_str(include_str!("testdata/golden-doc.json")).unwrap();
        assert_eq!(serde_json::to_value(&doc).unwrap(), golden);
    }

    #[test]
    fn the_trial_lines_are_unchanged() {
        let lines: Vec<String> = trials().iter().map(|t| trial_line(1, t)).collect();
        let golden: Vec<&str> = include_str!("testdata/golden-lines.txt").lines().collect();
        assert_eq!(lines, golden);
    }
}
