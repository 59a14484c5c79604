//! Reading results of schema 1 (`xferlab.result/1`), which the results
//! store keeps next to schema 2 ones.
//!
//! Schema 2 changed only where a pattern's or a transport's own figures
//! sit; every other field kept its name and meaning. So a schema 1
//! document becomes a schema 2 one by moving those sections, done here on
//! the JSON tree before it is read as a [`TestResult`] or mined for
//! metrics:
//!
//! | schema 1 | schema 2 |
//! |---|---|
//! | `spec.pattern: "rr"`, `spec.rr: {..., background}` | `spec.pattern: {"kind": "rr", ...}` (`background` is `spec.parallel`) |
//! | `spec.pattern: "stream"` | `spec.pattern: {"kind": "stream"}` |
//! | `client.rr`, `server.rr` | `client.pattern: {"kind": "rr", ...}` |
//! | `client.usb` | `client.transport: {"kind": "usb_bulk", ...}` |
//! | `summary.rr` | `summary.pattern: {"kind": "rr", ...}` |

use serde_json::{Map, Value};

use super::{TestResult, SCHEMA};

/// The schema string of the previous layout.
pub const SCHEMA_V1: &str = "xferlab.result/1";

/// Why a document cannot be read as a result.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(
        "not an xferlab result: its schema is {0} (this build reads {SCHEMA_V1} and {SCHEMA})"
    )]
    Schema(String),
    #[error("not an xferlab result: {0}")]
    Json(#[from] serde_json::Error),
}

/// Reads a result of either schema.
pub fn read(text: &str) -> Result<TestResult, ReadError> {
    let mut doc: Value = serde_json::from_str(text)?;
    match doc.get("schema").and_then(Value::as_str) {
        Some(SCHEMA) => {}
        Some(SCHEMA_V1) => {
            upgrade(&mut doc);
        }
        other => return Err(ReadError::Schema(format!("{other:?}"))),
    }
    Ok(serde_json::from_value(doc)?)
}

/// Rewrites a schema 1 document in place into schema 2; leaves any other
/// document alone. Returns whether it changed anything.
pub fn upgrade(doc: &mut Value) -> bool {
    if doc.get("schema").and_then(Value::as_str) != Some(SCHEMA_V1) {
        return false;
    }
    let Some(obj) = doc.as_object_mut() else {
        return false;
    };
    obj.insert("schema".into(), SCHEMA.into());
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        let rr = spec.remove("rr").filter(Value::is_object);
        let name = spec
            .get("pattern")
            .and_then(Value::as_str)
            .unwrap_or("stream")
            .to_string();
        let pattern = match rr {
            Some(Value::Object(mut rr)) => {
                // `background` repeated `spec.parallel`.
                rr.remove("background");
                tagged("rr", rr)
            }
            _ => tagged(&name, Map::new()),
        };
        spec.insert("pattern".into(), pattern);
    }
    for side in ["client", "server"] {
        if let Some(s) = obj.get_mut(side).and_then(Value::as_object_mut) {
            let pattern = match s.remove("rr") {
                Some(Value::Object(rr)) => tagged("rr", rr),
                _ => tagged("stream", Map::new()),
            };
            s.insert("pattern".into(), pattern);
            if let Some(Value::Object(usb)) = s.remove("usb") {
                s.insert("transport".into(), tagged("usb_bulk", usb));
            }
        }
    }
    if let Some(summary) = obj.get_mut("summary").and_then(Value::as_object_mut) {
        let pattern = match summary.remove("rr") {
            Some(Value::Object(rr)) => tagged("rr", rr),
            _ => tagged("stream", Map::new()),
        };
        summary.insert("pattern".into(), pattern);
    }
    true
}

/// `{"kind": kind, ...fields}`: serde's internally tagged enum.
fn tagged(kind: &str, fields: Map<String, Value>) -> Value {
    let mut out = Map::with_capacity(fields.len() + 1);
    out.insert("kind".into(), kind.into());
    out.extend(fields);
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::metrics;

    /// Results written by schema 1 builds, as the results store holds them.
    const V1: [(&str, &str); 5] = [
        (
            "stream_tcp_bidir",
            include_str!("../../tests/fixtures/stream_tcp_bidir.json"),
        ),
        (
            "stream_udp_loss",
            include_str!("../../tests/fixtures/stream_udp_loss.json"),
        ),
        ("rr_tcp", include_str!("../../tests/fixtures/rr_tcp.json")),
        (
            "rr_crr_background",
            include_str!("../../tests/fixtures/rr_crr_background.json"),
        ),
        (
            "lab_stream",
            include_str!("../../tests/fixtures/lab_stream.json"),
        ),
    ];

    #[test]
    fn schema_1_results_read_as_schema_2_with_their_sections_moved() {
        for (name, text) in V1 {
            let old: Value = serde_json::from_str(text).unwrap();
            assert_eq!(old["schema"], SCHEMA_V1, "{name}");
            let r = read(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(r.schema, SCHEMA);
            assert_eq!(r.spec.pattern.name(), old["spec"]["pattern"], "{name}");
            let rr = old["spec"]["rr"].is_object();
            assert_eq!(r.spec.pattern.rr().is_some(), rr, "{name}");
            assert_eq!(r.client.rr().is_some(), rr, "{name}");
            assert_eq!(r.summary.rr().is_some(), rr, "{name}");
            if let Some(spec) = r.spec.pattern.rr() {
                assert_eq!(spec.flows, old["spec"]["rr"]["flows"], "{name}");
                assert_eq!(u64::from(r.spec.parallel), old["spec"]["rr"]["background"]);
                let tx = r.summary.rr().unwrap().transactions;
                assert_eq!(tx, old["summary"]["rr"]["transactions"], "{name}");
            }
            // Written again, it is a schema 2 document that reads back the same.
            let again = serde_json::to_string(&r).unwrap();
            assert_eq!(read(&again).unwrap(), r, "{name}");
        }
    }

    /// The store mines old and new documents alike: the same metrics come
    /// out of a schema 1 document and of its schema 2 rewrite.
    #[test]
    fn metrics_of_a_schema_1_document_and_of_its_upgrade_are_the_same() {
        for (name, text) in V1 {
            let old: Value = serde_json::from_str(text).unwrap();
            let new = serde_json::to_value(read(text).unwrap()).unwrap();
            assert_eq!(metrics::extract(&old), metrics::extract(&new), "{name}");
            assert!(!metrics::extract(&new).is_empty(), "{name}");
            for s in ["throughput_bps", "tps", "rtt_us"] {
                assert_eq!(
                    metrics::series(&old, s),
                    metrics::series(&new, s),
                    "{name} {s}"
                );
            }
            assert_eq!(
                metrics::latency_cdf(&old),
                metrics::latency_cdf(&new),
                "{name}"
            );
        }
        let rr: Value = serde_json::from_str(V1[2].1).unwrap();
        assert!(metrics::latency_cdf(&rr).is_some());
    }

    #[test]
    fn other_documents_are_refused_by_name() {
        let e = read(r#"{"schema":"xferlab.cbr/1"}"#).unwrap_err();
        assert!(e.to_string().contains("xferlab.cbr/1"), "{e}");
        assert!(read("{").is_err());
        let mut cbr = serde_json::json!({"schema": "xferlab.cbr/1"});
        assert!(!upgrade(&mut cbr));
    }
}
