//! `--format iperf3-json`: writes the result as one document shaped like
//! the output of `iperf3 -J` (version 3.12); the mapping itself is the
//! core's [`xferlab_core::iperf3::export`].

use std::io::{self, Write};

use serde::Serialize;
use xferlab_core::iperf3::export::document;
use xferlab_core::result::TestResult;

use super::{LiveFlow, Reporter, StartInfo};

/// Writes the iperf3-shaped document at the end; nothing live, so the
/// output is a single JSON value, as with `iperf3 -J`.
pub struct Iperf3JsonReporter {
    out: Box<dyn Write + Send>,
}

impl Iperf3JsonReporter {
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        Iperf3JsonReporter { out }
    }
}

impl Reporter for Iperf3JsonReporter {
    fn start(&mut self, _info: &StartInfo<'_>) -> io::Result<()> {
        Ok(())
    }

    fn interval(&mut self, _flows: &[LiveFlow]) -> io::Result<()> {
        Ok(())
    }

    fn finish(&mut self, result: &TestResult) -> io::Result<()> {
        // Tab-indented like iperf3's cJSON output.
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b"\t");
        let mut ser = serde_json::Serializer::with_formatter(&mut self.out, fmt);
        document(result).serialize(&mut ser)?;
        writeln!(self.out)?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::super::sample::{bidir_result, SharedBuf};
    use super::*;

    #[test]
    fn one_tab_indented_document_and_a_newline() {
        let r = bidir_result();
        let buf = SharedBuf::default();
        Iperf3JsonReporter::new(buf.writer()).finish(&r).unwrap();
        let text = buf.text();
        assert!(text.starts_with("{\n\t\"start\": {"), "{text}");
        assert!(text.ends_with("}\n"));
        let v: serde_json::Value = serde_json::from_str(&text).expect("one JSON document");
        assert_eq!(v["start"]["cookie"], r.id.as_str());
    }
}
