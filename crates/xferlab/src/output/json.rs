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

    fn rr_interval(&mut self, sum: &xferlab_core::rr::report::RrInterval) -> io::Result<()> {
        serde_json::to_writer(
            &mut self.out,
            &serde_json::json!({"event": "rr_interval", "sum": sum}),
        )?;
        writeln!(self.out)?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};
    use xferlab_core::result::{FlowEnd, Status, Summary};

    use super::super::sample::{
        bidir_result, flow_starts, live_interval, udp_result, usb_result, SharedBuf,
    };
    use super::*;

    const SCHEMA_TEXT: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/result-schema.json"
    ));

    fn validator() -> jsonschema::Validator {
        let schema: Value = serde_json::from_str(SCHEMA_TEXT).expect("schema file is JSON");
        jsonschema::validator_for(&schema).expect("schema compiles")
    }

    /// Panics with every validation error, so a failing test says what drifted.
    fn assert_valid(v: &jsonschema::Validator, doc: &Value) {
        let errors: Vec<String> = v
            .iter_errors(doc)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "result does not match docs/result-schema.json:\n{}",
            errors.join("\n")
        );
    }

    fn result_json(r: &TestResult) -> Value {
        let buf = SharedBuf::default();
        JsonReporter::new(buf.writer()).finish(r).unwrap();
        let text = buf.text();
        assert!(text.ends_with("}\n"));
        serde_json::from_str(&text).expect("one JSON document")
    }

    #[test]
    fn schema_is_a_valid_draft_2020_12_schema() {
        let schema: Value = serde_json::from_str(SCHEMA_TEXT).unwrap();
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        assert!(jsonschema::meta::is_valid(&schema));
        assert_eq!(
            schema["properties"]["schema"]["const"],
            xferlab_core::result::SCHEMA
        );
    }

    /// `good` with one change applied, for the cases that must not validate.
    fn broken(good: &Value, f: impl Fn(&mut Value)) -> Value {
        let mut doc = good.clone();
        f(&mut doc);
        doc
    }

    #[test]
    fn json_result_validates_and_round_trips() {
        let v = validator();
        for r in [bidir_result(), udp_result()] {
            let doc = result_json(&r);
            assert_valid(&v, &doc);
            let back: TestResult = serde_json::from_value(doc).unwrap();
            assert_eq!(back, r);
        }
    }

    /// USB completion latency is the latency summary rr uses, `stddev_us`
    /// included; a USB file written before it had `stddev_us` still
    /// validates and reads.
    #[test]
    fn usb_result_validates_and_older_usb_latency_still_reads() {
        let v = validator();
        let r = usb_result();
        let doc = result_json(&r);
        assert_valid(&v, &doc);
        let latency = |d: &Value| d["client"]["transport"]["pipes"][0]["total"]["latency"].clone();
        assert_eq!(latency(&doc)["stddev_us"], json!(2100.0));
        let back: TestResult = serde_json::from_value(doc.clone()).unwrap();
        assert_eq!(back, r);
        let old = broken(&doc, |d| {
            d["client"]["transport"]["pipes"][0]["total"]["latency"]
                .as_object_mut()
                .unwrap()
                .remove("stddev_us");
        });
        assert!(latency(&old).get("stddev_us").is_none());
        assert_valid(&v, &old);
        let back: TestResult = serde_json::from_value(old).unwrap();
        let usb = back.client.usb().unwrap();
        assert_eq!(usb.pipes[0].total.latency.stddev_us, 0.0);
        assert_eq!(usb.pipes[0].total.latency.p99_us, 13_607.0);
    }

    /// The UDP figures sit where docs/result-schema.md says, `UdpTotal`'s
    /// sample flattened next to its whole-run counts.
    #[test]
    fn udp_figures_are_where_the_schema_says() {
        let doc = result_json(&udp_result());
        assert_eq!(doc["spec"]["transport"], "udp");
        let knobs = &doc["spec"]["knobs"];
        assert_eq!(
            (
                &knobs["rate"],
                &knobs["batch"],
                &knobs["gso"],
                &knobs["dont_fragment"]
            ),
            (
                &json!(100_000_000),
                &json!(32),
                &json!(false),
                &json!(false)
            )
        );
        let receiver = &doc["server"]["flows"][1];
        assert_eq!(receiver["role"], "receiver");
        assert_eq!(receiver["intervals"][1]["udp"]["host_drops"], 10);
        let total = &receiver["total"]["udp"];
        assert_eq!(
            (&total["lost"], &total["host_drops_all"]),
            (&json!(15), &json!(10))
        );
        assert!(total.get("window").is_none(), "flattened");
        assert_eq!(
            doc["summary"]["directions"][0]["udp"]["network_lost"],
            json!(7),
            "17 lost, tail included, 10 of them at the receiving host"
        );
        assert!(doc["client"]["flows"][0].get("tcp").is_none());
        let tcp = result_json(&bidir_result());
        assert!(
            tcp["spec"]["knobs"].get("rate").is_none(),
            "None is left out"
        );
        assert!(tcp["summary"]["directions"][0].get("udp").is_none());
    }

    #[test]
    fn every_optional_and_nullable_branch_validates() {
        let mut r = bidir_result();
        r.server = None;
        r.summary = Summary::from_sides(&r.client, None);
        r.status = Status::Partial;
        r.errors.push("server report missing".into());
        r.client
            .warnings
            .push("rcvbuf capped by net.core.rmem_max".into());
        r.client.flows[0].end = FlowEnd::Aborted("connection reset by peer".into());
        r.client.counters.interface = None;
        r.spec.title = None;
        r.spec.limit = xferlab_core::spec::Limit::Bytes { bytes: 1 << 30 };
        r.spec.knobs.buffer = Some(4 << 20);
        r.spec.knobs.tos = Some(0x10);
        let doc = result_json(&r);
        assert_eq!(doc["server"], Value::Null);
        assert_eq!(
            doc["client"]["flows"][0]["end"],
            json!({"kind": "aborted", "reason": "connection reset by peer"})
        );
        assert_eq!(
            doc["client"]["flows"][1]["end"],
            json!({"kind": "completed"})
        );
        assert_eq!(
            doc["spec"]["limit"],
            json!({"bytes": {"bytes": 1u64 << 30}})
        );
        assert_valid(&validator(), &doc);

        // UDP without a rate (`-b 0`), with GSO and don't-fragment, and
        // without the receiving side's report.
        let mut r = udp_result();
        r.spec.knobs.rate = None;
        r.spec.knobs.gso = true;
        r.spec.knobs.dont_fragment = true;
        r.server = None;
        r.summary = Summary::from_sides(&r.client, None);
        r.status = Status::Partial;
        let doc = result_json(&r);
        assert!(doc["spec"]["knobs"].get("rate").is_none());
        assert_valid(&validator(), &doc);
    }

    #[test]
    fn broken_documents_do_not_validate() {
        let v = validator();
        let good = result_json(&bidir_result());
        let broken = |f: &dyn Fn(&mut Value)| broken(&good, f);
        let cases = [
            (
                "missing summary",
                broken(&|d| drop(d.as_object_mut().unwrap().remove("summary"))),
            ),
            (
                "negative bytes",
                broken(&|d| d["client"]["flows"][0]["intervals"][1]["bytes"] = json!(-1)),
            ),
            (
                "fractional bytes",
                broken(&|d| d["client"]["flows"][0]["total"]["bytes"] = json!(1.5)),
            ),
            (
                "NaN rate (serde writes null)",
                broken(&|d| {
                    d["summary"]["directions"][0]["sender"]["bits_per_second"] = Value::Null
                }),
            ),
            (
                "unknown field",
                broken(&|d| d["client"]["cpu"]["steal_s"] = json!(0.0)),
            ),
            (
                "other schema version",
                broken(&|d| d["schema"] = json!("xferlab.result/3")),
            ),
            (
                "unknown enum value",
                broken(&|d| d["client"]["flows"][0]["direction"] = json!("sideways")),
            ),
            (
                "completed with a reason",
                broken(&|d| d["client"]["flows"][0]["end"]["reason"] = json!("x")),
            ),
            (
                "counter that is not an integer",
                broken(&|d| d["server"]["counters"]["deltas"]["Tcp.RetransSegs"] = json!("12")),
            ),
        ];
        for (what, doc) in cases {
            assert!(!v.is_valid(&doc), "{what}: should not validate");
        }
    }

    #[test]
    fn broken_udp_documents_do_not_validate() {
        let v = validator();
        let good = result_json(&udp_result());
        assert_valid(&v, &good);
        let broken = |f: &dyn Fn(&mut Value)| broken(&good, f);
        fn interval(d: &mut Value) -> &mut Value {
            &mut d["server"]["flows"][1]["intervals"][1]["udp"]
        }
        fn total(d: &mut Value) -> &mut Value {
            &mut d["server"]["flows"][1]["total"]["udp"]
        }
        fn summary(d: &mut Value) -> &mut Value {
            &mut d["summary"]["directions"][0]["udp"]
        }
        let cases = [
            (
                "negative lost",
                broken(&|d| interval(d)["lost"] = json!(-1)),
            ),
            (
                "unknown field in an interval's udp",
                broken(&|d| interval(d)["reordered"] = json!(0)),
            ),
            (
                "whole-run count in an interval (only totals have it)",
                broken(&|d| interval(d)["packets_all"] = json!(1)),
            ),
            (
                "unknown field in a total's udp",
                broken(&|d| total(d)["bogus"] = json!(0)),
            ),
            (
                "total without its whole-run count",
                broken(&|d| drop(total(d).as_object_mut().unwrap().remove("packets_all"))),
            ),
            (
                "total without a flattened sample field",
                broken(&|d| drop(total(d).as_object_mut().unwrap().remove("jitter_us"))),
            ),
            (
                "sample nested instead of flattened",
                broken(&|d| {
                    let t = total(d);
                    *t = json!({"window": t.clone(), "packets_all": 1, "host_drops_all": 0})
                }),
            ),
            (
                "unknown field in the summary's udp",
                broken(&|d| summary(d)["reordering"] = json!(0)),
            ),
            (
                "loss fraction above 1",
                broken(&|d| summary(d)["loss_fraction"] = json!(1.5)),
            ),
            (
                "negative jitter",
                broken(&|d| summary(d)["jitter_us"] = json!(-0.5)),
            ),
            (
                "zero rate (absent means unlimited)",
                broken(&|d| d["spec"]["knobs"]["rate"] = json!(0)),
            ),
            (
                "zero batch",
                broken(&|d| d["spec"]["knobs"]["batch"] = json!(0)),
            ),
            (
                "unknown transport",
                broken(&|d| d["spec"]["transport"] = json!("sctp")),
            ),
        ];
        for (what, doc) in cases {
            assert!(!v.is_valid(&doc), "{what}: should not validate");
        }
    }

    #[test]
    fn jsonl_writes_one_object_per_event_line() {
        let r = bidir_result();
        let buf = SharedBuf::default();
        let mut rep = JsonLinesReporter::new(buf.writer());
        let flows = flow_starts(&r.client);
        let info = StartInfo {
            spec: &r.spec,
            server: &r.server_address,
            embedded: false,
            session: &r.id,
            flows: &flows,
        };
        rep.start(&info).unwrap();
        for i in 0..4 {
            rep.interval(&live_interval(&r.client, i)).unwrap();
        }
        rep.finish(&r).unwrap();

        let text = buf.text();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        let events: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
        assert_eq!(
            events,
            ["start", "interval", "interval", "interval", "interval", "result"]
        );

        let start = &lines[0];
        assert_eq!(start["session"], r.id.as_str());
        assert_eq!(start["server"], "127.0.0.1:5290");
        assert_eq!(start["spec"]["direction"], "bidir");
        assert_eq!(
            start["flows"][3],
            json!({"id": 3, "direction": "s2c", "role": "receiver", "local": "127.0.0.1:41237", "remote": "127.0.0.1:5290"})
        );

        let first = &lines[1]["flows"];
        assert_eq!(first.as_array().unwrap().len(), 4);
        assert_eq!(
            (first[0]["id"].as_u64(), first[0]["role"].as_str()),
            (Some(0), Some("sender"))
        );
        assert_eq!(first[0]["omitted"], true);
        assert_eq!(first[0]["bytes"], 1_200_000_000u64);
        assert!(first[0]["tcp"]["rtt_us"].is_u64());
        assert!(
            first[2].get("tcp").is_none(),
            "receivers carry no TCP sample"
        );

        assert_valid(&validator(), &lines[5]["result"]);
    }

    #[test]
    fn jsonl_intervals_carry_the_udp_sample() {
        let r = udp_result();
        let buf = SharedBuf::default();
        let mut rep = JsonLinesReporter::new(buf.writer());
        let server = r.server.as_ref().unwrap();
        rep.interval(&live_interval(server, 1)).unwrap();
        let line: Value = serde_json::from_str(buf.text().trim_end()).unwrap();
        let flow = &line["flows"][1];
        assert_eq!(
            (flow["id"].as_u64(), flow["role"].as_str()),
            (Some(1), Some("receiver"))
        );
        assert_eq!(flow["udp"]["lost"], 12);
        assert_eq!(flow["udp"]["host_drops"], 10);
    }
}
