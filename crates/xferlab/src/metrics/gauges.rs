//! A probe's answer: the figures of its result document as OpenMetrics
//! gauges (docs/fleet.md, "Probe metrics", lists them). Which figures
//! exist depends on the verb: a TCP stream has throughput, retransmits and
//! the senders' RTT from TCP_INFO; a UDP stream and cbr have loss and
//! jitter; rr has transactions per second and latency percentiles. A
//! figure the document does not have is left out, not written as 0, so a
//! graph shows a gap rather than a false value.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use serde_json::Value;
use std::sync::atomic::AtomicU64;

type F64 = Gauge<f64, AtomicU64>;
type Labels = Vec<(&'static str, String)>;

/// The gauges of one probe, written once into its answer.
struct Answer {
    reg: Registry,
}

impl Answer {
    fn new() -> Self {
        Answer {
            reg: Registry::with_prefix("xferlab_probe"),
        }
    }

    fn one(&mut self, name: &str, help: &str, unit: Option<Unit>, v: f64) {
        let g = F64::default();
        g.set(v);
        match unit {
            Some(u) => self.reg.register_with_unit(name, help, u, g),
            None => self.reg.register(name, help, g),
        }
    }

    /// A family by one label; nothing is registered when `values` is
    /// empty.
    fn family(&mut self, name: &str, help: &str, unit: Option<Unit>, values: Vec<(Labels, f64)>) {
        if values.is_empty() {
            return;
        }
        let fam = Family::<Labels, F64>::default();
        for (l, v) in values {
            fam.get_or_create(&l).set(v);
        }
        match unit {
            Some(u) => self.reg.register_with_unit(name, help, u, fam),
            None => self.reg.register(name, help, fam),
        }
    }

    fn text(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        encode(&mut out, &self.reg).ok();
        out
    }
}

fn f(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn dir(d: &Value) -> Labels {
    vec![(
        "direction",
        d["direction"].as_str().unwrap_or("c2s").to_string(),
    )]
}

/// The answer to a probe that ran for `duration_s`: `success`, the
/// duration, and what `doc` (an `xferlab.result/2` or `xferlab.cbr/1`
/// document, or none) measured.
pub fn answer(doc: Option<&Value>, success: bool, duration_s: f64) -> String {
    let mut a = Answer::new();
    a.one(
        "success",
        "1 when the probe's test ran to its end, else 0",
        None,
        if success { 1.0 } else { 0.0 },
    );
    a.one(
        "duration",
        "How long the probe took, test set-up and result included",
        Some(Unit::Seconds),
        duration_s,
    );
    match doc.and_then(|d| d["schema"].as_str()) {
        Some(s) if s.starts_with("xferlab.result/") => result(&mut a, doc.expect("matched")),
        Some(s) if s.starts_with("xferlab.cbr/") => cbr(&mut a, doc.expect("matched")),
        _ => {}
    }
    a.text()
}

/// A stream or rr test's figures, from its summary and its senders' TCP
/// totals.
fn result(a: &mut Answer, doc: &Value) {
    let empty = Vec::new();
    let dirs = doc["summary"]["directions"].as_array().unwrap_or(&empty);
    let pick = |get: &dyn Fn(&Value) -> Option<f64>| -> Vec<(Labels, f64)> {
        dirs.iter()
            .filter_map(|d| get(d).map(|v| (dir(d), v)))
            .collect()
    };
    a.family(
        "throughput_bits_per_second",
        "Received throughput per direction (the sender's where the receiver has none), bit/s",
        None,
        pick(&|d| f(&d["receiver"]["bits_per_second"]).or(f(&d["sender"]["bits_per_second"]))),
    );
    a.family(
        "retransmits",
        "TCP segments retransmitted per direction (TCP_INFO)",
        None,
        pick(&|d| f(&d["retransmits"])),
    );
    a.family(
        "loss_ratio",
        "Datagrams lost per direction, a fraction of those sent",
        None,
        pick(&|d| f(&d["udp"]["loss_fraction"])),
    );
    a.family(
        "jitter",
        "RFC 3550 jitter per direction",
        Some(Unit::Seconds),
        pick(&|d| f(&d["udp"]["jitter_us"]).map(|us| us / 1e6)),
    );
    // RTT: TCP_INFO of the sending flows (the side whose role is
    // "sender": the client for c2s, the server for s2c).
    let mut rtt: Vec<(Labels, f64)> = Vec::new();
    let mut rtt_min: Vec<(Labels, f64)> = Vec::new();
    let mut rtt_max: Vec<(Labels, f64)> = Vec::new();
    for d in dirs {
        let name = d["direction"].as_str().unwrap_or("c2s");
        let tcp: Vec<&Value> = ["client", "server"]
            .iter()
            .filter_map(|side| doc[*side]["flows"].as_array())
            .flatten()
            .filter(|fl| fl["direction"] == name && fl["role"] == "sender")
            .map(|fl| &fl["total"]["tcp"])
            .filter(|t| t.is_object())
            .collect();
        if tcp.is_empty() {
            continue;
        }
        let us = |k: &str| tcp.iter().filter_map(|t| f(&t[k])).collect::<Vec<f64>>();
        let mean = us("rtt_mean_us");
        if !mean.is_empty() {
            rtt.push((dir(d), mean.iter().sum::<f64>() / mean.len() as f64 / 1e6));
        }
        if let Some(m) = us("rtt_min_us").into_iter().reduce(f64::min) {
            rtt_min.push((dir(d), m / 1e6));
        }
        if let Some(m) = us("rtt_max_us").into_iter().reduce(f64::max) {
            rtt_max.push((dir(d), m / 1e6));
        }
    }
    a.family(
        "rtt",
        "Mean smoothed RTT of the sending flows per direction (TCP_INFO)",
        Some(Unit::Seconds),
        rtt,
    );
    a.family(
        "rtt_min",
        "Lowest RTT of the sending flows per direction (TCP_INFO)",
        Some(Unit::Seconds),
        rtt_min,
    );
    a.family(
        "rtt_max",
        "Highest smoothed RTT of the sending flows per direction (TCP_INFO)",
        Some(Unit::Seconds),
        rtt_max,
    );
    let rr = &doc["summary"]["pattern"];
    if rr["kind"] == "rr" {
        if let Some(v) = f(&rr["per_second"]) {
            a.one(
                "transactions_per_second",
                "Request/response transactions completed per second",
                None,
                v,
            );
        }
        let lat = &rr["latency"];
        let q: Vec<(Labels, f64)> = [
            ("0.5", "p50_us"),
            ("0.9", "p90_us"),
            ("0.99", "p99_us"),
            ("0.999", "p999_us"),
        ]
        .iter()
        .filter_map(|(q, k)| f(&lat[*k]).map(|us| (vec![("quantile", q.to_string())], us / 1e6)))
        .collect();
        a.family(
            "latency",
            "Transaction latency at a quantile",
            Some(Unit::Seconds),
            q,
        );
        if let Some(us) = f(&lat["mean_us"]) {
            a.one(
                "latency_mean",
                "Mean transaction latency",
                Some(Unit::Seconds),
                us / 1e6,
            );
        }
    }
}

/// A cbr probe's figures: its last trial (one per run at a fixed -b).
fn cbr(a: &mut Answer, doc: &Value) {
    let Some(t) = doc["runs"]
        .as_array()
        .and_then(|r| r.last())
        .and_then(|r| r["trials"].as_array())
        .and_then(|t| t.last())
    else {
        return;
    };
    let c2s = || vec![("direction", "c2s".to_string())];
    let one = |v: Option<f64>| v.map(|v| vec![(c2s(), v)]).unwrap_or_default();
    a.family(
        "throughput_bits_per_second",
        "Received throughput per direction (the sender's where the receiver has none), bit/s",
        None,
        one(f(&t["receiver_bps"]).or(f(&t["sender_bps"]))),
    );
    a.family(
        "loss_ratio",
        "Datagrams lost per direction, a fraction of those sent",
        None,
        one(f(&t["loss_fraction"])),
    );
    a.family(
        "jitter",
        "RFC 3550 jitter per direction",
        Some(Unit::Seconds),
        one(f(&t["jitter_us"]).map(|us| us / 1e6)),
    );
    if let Some(s) = t["sustained"].as_bool() {
        a.one(
            "cbr_sustained",
            "1 when cbr's verdict is that the rate was sustained, else 0",
            None,
            if s { 1.0 } else { 0.0 },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn value(text: &str, line_start: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn a_tcp_stream_answers_throughput_retransmits_and_the_senders_rtt() {
        let doc = json!({
            "schema": "xferlab.result/2",
            "summary": {"directions": [{"direction": "c2s", "flows": 1,
                "sender": {"bits_per_second": 2e9}, "receiver": {"bits_per_second": 1.5e9},
                "retransmits": 7}], "pattern": {"kind": "stream"}},
            "client": {"flows": [{"direction": "c2s", "role": "sender",
                "total": {"tcp": {"rtt_min_us": 50, "rtt_mean_us": 100, "rtt_max_us": 300}}}]},
            "server": {"flows": [{"direction": "c2s", "role": "receiver",
                "total": {"tcp": {"rtt_min_us": 1, "rtt_mean_us": 1, "rtt_max_us": 1}}}]},
        });
        let t = answer(Some(&doc), true, 1.25);
        assert_eq!(value(&t, "xferlab_probe_success "), Some(1.0), "{t}");
        assert_eq!(value(&t, "xferlab_probe_duration_seconds "), Some(1.25));
        assert_eq!(
            value(
                &t,
                "xferlab_probe_throughput_bits_per_second{direction=\"c2s\"}"
            ),
            Some(1.5e9)
        );
        assert_eq!(
            value(&t, "xferlab_probe_retransmits{direction=\"c2s\"}"),
            Some(7.0)
        );
        assert_eq!(
            value(&t, "xferlab_probe_rtt_seconds{direction=\"c2s\"}"),
            Some(100e-6)
        );
        assert_eq!(
            value(&t, "xferlab_probe_rtt_max_seconds{direction=\"c2s\"}"),
            Some(300e-6)
        );
        assert!(!t.contains("loss_ratio") && !t.contains("latency"), "{t}");
        assert!(t.ends_with("# EOF\n"));
    }

    #[test]
    fn udp_answers_loss_and_jitter_rr_latency_cbr_its_trial() {
        let udp = json!({"schema": "xferlab.result/2", "summary": {"directions": [
            {"direction": "s2c", "receiver": {"bits_per_second": 1e7},
             "udp": {"loss_fraction": 0.25, "jitter_us": 40.0}}], "pattern": {"kind": "stream"}}});
        let t = answer(Some(&udp), true, 1.0);
        assert_eq!(
            value(&t, "xferlab_probe_loss_ratio{direction=\"s2c\"}"),
            Some(0.25)
        );
        assert_eq!(
            value(&t, "xferlab_probe_jitter_seconds{direction=\"s2c\"}"),
            Some(40e-6)
        );
        assert!(!t.contains("rtt"), "{t}");
        let rr = json!({"schema": "xferlab.result/2", "summary": {"directions": [],
            "pattern": {"kind": "rr", "per_second": 5000.0,
                "latency": {"mean_us": 20.0, "p50_us": 10.0, "p99_us": 90.0}}}});
        let t = answer(Some(&rr), true, 1.0);
        assert_eq!(
            value(&t, "xferlab_probe_transactions_per_second "),
            Some(5000.0)
        );
        assert_eq!(
            value(&t, "xferlab_probe_latency_seconds{quantile=\"0.99\"}"),
            Some(90e-6)
        );
        assert!(!t.contains("quantile=\"0.9\""), "{t}");
        let cbr = json!({"schema": "xferlab.cbr/1", "runs": [{"trials": [
            {"receiver_bps": 9.9e6, "loss_fraction": 0.0, "jitter_us": 2.0, "sustained": false}]}]});
        let t = answer(Some(&cbr), true, 1.0);
        assert_eq!(
            value(
                &t,
                "xferlab_probe_throughput_bits_per_second{direction=\"c2s\"}"
            ),
            Some(9.9e6)
        );
        assert_eq!(value(&t, "xferlab_probe_cbr_sustained "), Some(0.0));
    }

    #[test]
    fn a_failed_probe_answers_success_0_and_no_figures() {
        let t = answer(None, false, 3.0);
        assert_eq!(value(&t, "xferlab_probe_success "), Some(0.0));
        assert!(!t.contains("throughput"), "{t}");
    }
}
