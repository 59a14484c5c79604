//! Output formats behind one trait: the test drivers call a [`Reporter`]
//! and never know which format is on.

mod csv;
mod human;
mod json;

use std::io;

use xferlab_core::result::{FlowInterval, FlowRole, TestResult};
use xferlab_core::spec::{FlowDirection, TestSpec};
use xferlab_core::units::RateUnit;

pub use self::csv::CsvReporter;
pub use self::human::HumanReporter;
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

/// Receives a test's progress and result. Live calls may print as they
/// come; `finish` writes whatever the format keeps for the end.
pub trait Reporter {
    fn start(&mut self, info: &StartInfo<'_>) -> io::Result<()>;
    /// Called once per interval boundary with every local flow, in flow-id
    /// order (never from the data path).
    fn interval(&mut self, flows: &[LiveFlow]) -> io::Result<()>;
    /// The complete result, also when the test failed part way.
    fn finish(&mut self, result: &TestResult) -> io::Result<()>;
}

/// `--format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Live table, one line per interval, then a summary.
    Human,
    /// One JSON document (schema xferlab.result/1) at the end.
    Json,
    /// One JSON object per interval as it happens, then the result.
    Jsonl,
    /// One row per flow and interval, plus total rows.
    Csv,
}

/// Builds the reporter for a format, writing to `out`.
pub fn reporter(format: Format, unit: RateUnit, out: Box<dyn io::Write + Send>) -> Box<dyn Reporter + Send> {
    match format {
        Format::Human => Box::new(HumanReporter::new(out, unit)),
        Format::Json => Box::new(JsonReporter::new(out)),
        Format::Jsonl => Box::new(JsonLinesReporter::new(out)),
        Format::Csv => Box::new(CsvReporter::new(out)),
    }
}
