//! Machine-readable output: the whole result as one JSON document
//! ([`JsonReporter`], schema in docs/result-schema.json), or a stream of
//! one-line JSON events for tools that follow a test live
//! ([`JsonLinesReporter`]).

use std::io::{self, Write};

use serde::Serialize;
use xferlab_core::result::{FlowInterval, FlowRole, TestResult};
use xferlab_core::spec::{FlowDirection, TestSpec};

use super::{FlowStart, LiveFlow, Reporter, StartInfo};

/// Writes the [`TestResult`] as one pretty-printed document at the end;
/// nothing live, so stdout stays a single valid JSON value.
pub struct JsonReporter {
    out: Box<dyn Write + Send>,
}

impl JsonReporter {
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        JsonReporter { out }
    }
}

impl Reporter for JsonReporter {
    fn start(&mut self, _info: &StartInfo<'_>) -> io::Result<()> {
        Ok(())
    }

    fn interval(&mut self, _flows: &[LiveFlow]) -> io::Result<()> {
        Ok(())
    }

    fn finish(&mut self, result: &TestResult) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut self.out, result)?;
        writeln!(self.out)?;
        self.out.flush()
    }
}

/// Writes one compact JSON object per line, flushed as it happens:
///
/// - `{"event":"start","session":…,"server":…,"embedded":…,"spec":{…},"flows":[{"id","direction","role","local","remote"}]}`
/// - `{"event":"interval","flows":[{"id","direction","role", …FlowInterval fields}]}`
/// - `{"event":"result","result":{…TestResult…}}`
///
/// The event objects are defined here rather than by deriving `Serialize`
/// on the reporter's input types, so the line format changes only when
/// this file does.
pub struct JsonLinesReporter {
    out: Box<dyn Write + Send>,
}

impl JsonLinesReporter {
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        JsonLinesReporter { out }
    }

    fn emit(&mut self, event: &Event<'_>) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, event)?;
        writeln!(self.out)?;
        self.out.flush()
    }
}

#[derive(Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Event<'a> {
    Start {
        session: &'a str,
        server: &'a str,
        embedded: bool,
        spec: &'a TestSpec,
        flows: Vec<StartFlow<'a>>,
    },
    Interval {
        flows: Vec<IntervalFlow<'a>>,
    },
    Result {
        result: &'a TestResult,
    },
}

#[derive(Serialize)]
struct StartFlow<'a> {
    id: u32,
    direction: FlowDirection,
    role: FlowRole,
    local: &'a str,
    remote: &'a str,
}

impl<'a> From<&'a FlowStart> for StartFlow<'a> {
    fn from(f: &'a FlowStart) -> Self {
        StartFlow {
            id: f.id,
            direction: f.direction,
            role: f.role,
            local: &f.local,
            remote: &f.remote,
        }
    }
}

#[derive(Serialize)]
struct IntervalFlow<'a> {
    id: u32,
    direction: FlowDirection,
    role: FlowRole,
    #[serde(flatten)]
    interval: &'a FlowInterval,
}

impl<'a> From<&'a LiveFlow> for IntervalFlow<'a> {
    fn from(f: &'a LiveFlow) -> Self {
        IntervalFlow {
            id: f.id,
            direction: f.direction,
            role: f.role,
            interval: &f.interval,
        }
    }
}

impl Reporter for JsonLinesReporter {
    fn start(&mut self, info: &StartInfo<'_>) -> io::Result<()> {
        self.emit(&Event::Start {
            session: info.session,
            server: info.server,
            embedded: info.embedded,
            spec: info.spec,
            flows: info.flows.iter().map(StartFlow::from).collect(),
        })
    }

    fn interval(&mut self, flows: &[LiveFlow]) -> io::Result<()> {
        self.emit(&Event::Interval {
            flows: flows.iter().map(IntervalFlow::from).collect(),
        })
    }

    fn finish(&mut self, result: &TestResult) -> io::Result<()> {
        self.emit(&Event::Result { result })
    }
}
