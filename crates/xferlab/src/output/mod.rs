//! Output formats behind one trait: the test drivers call a [`Reporter`]
//! and never know which format is on.

mod csv;
mod human;
mod human_usb;
mod iperf3_json;
mod json;
mod rr;

use std::io;

use xferlab_core::result::{FlowInterval, FlowRole, TestResult};
use xferlab_core::spec::{FlowDirection, TestSpec};
use xferlab_core::units::RateUnit;
use xferlab_core::usb::stats::{UsbReport, UsbSample};

pub use self::csv::CsvReporter;
pub use self::human::HumanReporter;
pub use self::iperf3_json::Iperf3JsonReporter;
pub use self::json::{JsonLinesReporter, JsonReporter};

/// One local flow as the test starts.
#[derive(Debug, Clone)]
pub struct FlowStart {
    pub id: u32,
    pub direction: FlowDirection,
    pub role: FlowRole,
    pub local: String,
    pub remote: String,
}

/// What is known when the flows are connected.
#[derive(Debug, Clone)]
pub struct StartInfo<'a> {
    pub spec: &'a TestSpec,
    /// Server as named (`127.0.0.1:5290`).
    pub server: &'a str,
    /// The server runs inside this process.
    pub embedded: bool,
    pub session: &'a str,
    pub flows: &'a [FlowStart],
}

/// One local flow's figures for the interval that just ended.
#[derive(Debug, Clone)]
pub struct LiveFlow {
    pub id: u32,
    pub direction: FlowDirection,
    pub role: FlowRole,
    pub interval: FlowInterval,
}

/// What `usb gadget` set up, for its start line: the section as the
/// result will have it, and what the section does not keep.
#[derive(Debug, Clone)]
pub struct GadgetStart<'a> {
    pub gadget: &'a xferlab_core::usb::gadget::UsbGadgetReport,
    /// `--function net`: frames per IN transfer and its bytes, at most.
    pub max_frames: Option<u64>,
    pub max_transfer: Option<u64>,
    /// raw-gadget: the bulk IN and OUT endpoint addresses it took.
    pub raw_endpoints: Option<(u8, u8)>,
}

/// Receives a test's progress and result. Live calls may print as they
/// come; `finish` writes whatever the format keeps for the end.
pub trait Reporter {
    fn start(&mut self, info: &StartInfo<'_>) -> io::Result<()>;
    /// Called once per interval boundary with every local flow, in flow-id
    /// order (never from the data path).
    fn interval(&mut self, flows: &[LiveFlow]) -> io::Result<()>;
    /// The complete result, also when the test failed part way.
    fn finish(&mut self, result: &TestResult) -> io::Result<()>;
    /// rr tests: every request/response flow summed over the interval
    /// that just ended.
    fn rr_interval(&mut self, _sum: &xferlab_core::rr::report::RrInterval) -> io::Result<()> {
        Ok(())
    }
    /// USB bulk runs, instead of [`Reporter::start`]: the device and its
    /// endpoints (`usb` as the result will have it, before any transfer).
    /// Formats without a USB view report the start as any other.
    fn usb_start(&mut self, info: &StartInfo<'_>, _usb: &UsbReport) -> io::Result<()> {
        self.start(info)
    }
    /// `usb gadget`, instead of [`Reporter::start`]: the device it made.
    /// Formats without a USB view report the start as any other.
    fn usb_gadget_start(&mut self, info: &StartInfo<'_>, _g: &GadgetStart<'_>) -> io::Result<()> {
        self.start(info)
    }
    /// USB verbs that watch or carry traffic rather than move their own
    /// (`usb net`, `usb mon`), instead of [`Reporter::start`]: `what` runs, in one
    /// line that only the human table shows.
    fn usb_link_start(&mut self, info: &StartInfo<'_>, _what: &str) -> io::Result<()> {
        self.start(info)
    }
    /// USB bulk runs, instead of [`Reporter::interval`]: `usb[i]` holds
    /// the transfer counts of the endpoint that moved `flows[i]`'s bytes.
    fn usb_interval(&mut self, flows: &[LiveFlow], _usb: &[UsbSample]) -> io::Result<()> {
        self.interval(flows)
    }
}

/// A reporter that shows nothing: a series' trials (socket and USB cbr)
/// print their own lines, and the per-interval table of each trial would
/// drown them.
pub struct Quiet;

impl Reporter for Quiet {
    fn start(&mut self, _: &StartInfo<'_>) -> io::Result<()> {
        Ok(())
    }
    fn interval(&mut self, _: &[LiveFlow]) -> io::Result<()> {
        Ok(())
    }
    fn finish(&mut self, _: &TestResult) -> io::Result<()> {
        Ok(())
    }
}

/// `--format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Live table, one line per interval, then a summary.
    Human,
    /// One JSON document (schema xferlab.result/2) at the end.
    Json,
    /// One JSON object per interval as it happens, then the result.
    Jsonl,
    /// One row per flow and interval, plus total rows.
    Csv,
    /// One JSON document at the end, shaped like `iperf3 -J` (3.12) output.
    Iperf3Json,
}

/// An output file that cannot be created.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {err}", .path.display())]
pub struct OpenError {
    path: std::path::PathBuf,
    err: io::Error,
}

/// Where a run's output goes: the file of `-o` (created, buffered), or
/// standard output.
pub fn open(path: Option<&std::path::Path>) -> Result<Box<dyn io::Write + Send>, OpenError> {
    match path {
        Some(path) => std::fs::File::create(path)
            .map(|f| Box::new(io::BufWriter::new(f)) as Box<dyn io::Write + Send>)
            .map_err(|err| OpenError {
                path: path.to_path_buf(),
                err,
            }),
        None => Ok(Box::new(io::stdout())),
    }
}

/// Adds `"key": value` as the last member of a JSON object document,
/// keeping the document's own member order; None when `doc` is not a
/// JSON object.
pub fn inject_member(doc: &str, key: &str, value: &impl serde::Serialize) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(doc).ok()?;
    if !v.is_object() {
        return None;
    }
    let body = doc.trim_end().strip_suffix('}')?.trim_end();
    let value = serde_json::to_string_pretty(value)
        .ok()?
        .replace('\n', "\n  ");
    let sep = if body.ends_with('{') { "" } else { "," };
    Some(format!("{body}{sep}\n  \"{key}\": {value}\n}}\n"))
}

/// Builds the reporter for a format, writing to `out`.
pub fn reporter(
    format: Format,
    unit: RateUnit,
    out: Box<dyn io::Write + Send>,
) -> Box<dyn Reporter + Send> {
    match format {
        Format::Human => Box::new(HumanReporter::new(out, unit)),
        Format::Json => Box::new(JsonReporter::new(out)),
        Format::Jsonl => Box::new(JsonLinesReporter::new(out)),
        Format::Csv => Box::new(CsvReporter::new(out)),
        Format::Iperf3Json => Box::new(Iperf3JsonReporter::new(out)),
    }
}

/// Shared by the tests of every format: the results of
/// [`xferlab_core::sample`] and what a driver passes live.
#[cfg(test)]
pub(crate) mod sample {
    use std::io::{self, Write};
    use std::sync::{Arc, Mutex};

    use xferlab_core::result::SideReport;
    pub(crate) use xferlab_core::sample::{bidir_result, udp_result, usb_result};

    use super::{FlowStart, LiveFlow};

    /// The flows of one side as a driver announces them at start.
    pub(crate) fn flow_starts(side: &SideReport) -> Vec<FlowStart> {
        side.flows
            .iter()
            .map(|f| FlowStart {
                id: f.id,
                direction: f.direction,
                role: f.role,
                local: f.local.clone(),
                remote: f.remote.clone(),
            })
            .collect()
    }

    /// A writer the test keeps a handle to, to read what a reporter wrote
    /// through its `Box<dyn Write + Send>`.
    #[derive(Clone, Default)]
    pub(crate) struct SharedBuf(Arc<Mutex<Vec<u8>>>);

    impl SharedBuf {
        pub(crate) fn writer(&self) -> Box<dyn Write + Send> {
            Box::new(self.clone())
        }

        pub(crate) fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).expect("reporters write UTF-8")
        }
    }

    impl Write for SharedBuf {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Interval `i` of every flow of one side, as a driver passes it live.
    pub(crate) fn live_interval(side: &SideReport, i: usize) -> Vec<LiveFlow> {
        side.flows
            .iter()
            .map(|f| LiveFlow {
                id: f.id,
                direction: f.direction,
                role: f.role,
                interval: f.intervals[i].clone(),
            })
            .collect()
    }
}
