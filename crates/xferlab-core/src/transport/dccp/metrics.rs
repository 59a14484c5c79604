//! DCCP's headline metrics for experiments, read from its `dccp` sections
//! of a result document (and, for a cbr trial over SafeUDP, from the
//! trial's `safeudp` section, the same figures over that one test).
//!
//! | metric | unit | from |
//! |---|---|---|
//! | `ccid_drops` | count | DCCP: Σ over sender flows of `total.dccp.dropped_by_ccid` (SafeUDP enforcing) |
//! | `notice_s` | s | SafeUDP: `end_s` of the first sender interval whose `dccp.safeudp.events.persistent_network` > 0 |
//! | `app_lowered_s` | s | SafeUDP: `end_s` of the first sender interval whose `dccp.safeudp.app_rate_bps` is below `spec.knobs.rate` (the -b) |
//! | `enforced_s` | s | SafeUDP: `end_s` of the first sender interval whose `dccp.safeudp.events.enforcing` > 0 |
//!
//! A cbr document's metrics take the four from the deciding trial's
//! `safeudp` section ([`SafeUdpTrial`]).

use serde::Serialize;
use serde_json::Value;

use crate::dccp::ccid::safeudp;
use crate::jsondoc::unit::{COUNT, SECONDS};
use crate::jsondoc::{arr, num, sender_flows, MetricInfo};
use crate::knobs::Knobs;

/// DCCP's metrics, as `experiment::metrics::METRICS` lists the shared
/// ones; the module docs hold the same list as a table (a test keeps
/// them in step).
pub const METRICS: &[MetricInfo] = &[
    (
        "ccid_drops",
        COUNT,
        "DCCP datagrams the sending CCID dropped",
    ),
    (
        "notice_s",
        SECONDS,
        "SafeUDP: first persistent network congestion notice",
    ),
    (
        "app_lowered_s",
        SECONDS,
        "SafeUDP: the application first lowered its rate",
    ),
    (
        "enforced_s",
        SECONDS,
        "SafeUDP: the CCID first enforced its bound",
    ),
];

/// An interval's SafeUDP section.
fn safeudp(iv: &Value) -> Option<&Value> {
    iv.get("dccp")?.get("safeudp").filter(|v| v.is_object())
}

/// DCCP senders' CCID drops and, for SafeUDP, when it reacted: the end
/// of the first interval (of any sender flow) that shows each step.
pub(super) fn measure(doc: &Value, out: &mut dyn FnMut(&'static str, f64)) {
    let senders: Vec<&Value> = sender_flows(doc)
        .filter(|f| {
            f.get("total")
                .and_then(|t| t.get("dccp"))
                .is_some_and(Value::is_object)
        })
        .collect();
    if senders.is_empty() {
        return;
    }
    out(
        "ccid_drops",
        senders
            .iter()
            .filter_map(|f| num(f, &["total", "dccp", "dropped_by_ccid"]))
            .sum(),
    );
    let first_end = |pred: &dyn Fn(&Value) -> bool| {
        senders
            .iter()
            .filter_map(|f| {
                arr(f, "intervals")
                    .iter()
                    .find(|iv| safeudp(iv).is_some_and(pred))
                    .and_then(|iv| num(iv, &["end_s"]))
            })
            .reduce(f64::min)
    };
    let event =
        |k: &'static str| move |su: &Value| num(su, &["events", k]).is_some_and(|n| n > 0.0);
    let mut out_opt = |name: &'static str, v: Option<f64>| {
        if let Some(v) = v {
            out(name, v);
        }
    };
    out_opt("notice_s", first_end(&event("persistent_network")));
    // Lowered: below the -b it started from (the spec's rate).
    if let Some(offer) = num(doc, &["spec", "knobs", "rate"]) {
        out_opt(
            "app_lowered_s",
            first_end(&|su: &Value| num(su, &["app_rate_bps"]).is_some_and(|a| a < offer)),
        );
    }
    out_opt("enforced_s", first_end(&event("enforcing")));
}

/// The four figures of a cbr trial's `safeudp` section.
pub(super) fn measure_trial(trial: &Value, out: &mut dyn FnMut(&'static str, f64)) {
    for m in ["notice_s", "app_lowered_s", "enforced_s", "ccid_drops"] {
        if let Some(v) = num(trial, &["safeudp", m]) {
            out(m, v);
        }
    }
}

/// SafeUDP's reaction in one cbr trial (`--ccid safeudp --on-congestion
/// ...`), read from the test's result as an experiment reads a stream
/// run's (`TransportModel::measure`, the same names): seconds into the
/// test at the end of the first interval that showed each step; absent
/// where it never came.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SafeUdpTrial {
    /// The first persistent network congestion notice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice_s: Option<f64>,
    /// The application first offered less than the trial's rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_lowered_s: Option<f64>,
    /// The CCID first enforced its TCP-friendly bound by dropping.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforced_s: Option<f64>,
    /// Datagrams the CCID dropped (enforcing), all sender flows.
    pub ccid_drops: u64,
}

impl SafeUdpTrial {
    /// From a finished test's result document; None unless it ran
    /// SafeUDP.
    pub(super) fn of(knobs: &Knobs, doc: &Value) -> Option<SafeUdpTrial> {
        if knobs.own.dccp.is_none_or(|d| d.ccid != safeudp::CCID) {
            return None;
        }
        let mut ms: Vec<(&str, f64)> = Vec::new();
        measure(doc, &mut |n, v| ms.push((n, v)));
        let get = |n: &str| ms.iter().find(|m| m.0 == n).map(|m| m.1);
        Some(SafeUdpTrial {
            notice_s: get("notice_s"),
            app_lowered_s: get("app_lowered_s"),
            enforced_s: get("enforced_s"),
            ccid_drops: get("ccid_drops").unwrap_or(0.0) as u64,
        })
    }

    /// One line for people, under the trial's row.
    pub fn describe(&self) -> String {
        let at = |t: Option<f64>| t.map_or("never".to_string(), |t| format!("at {t:.1} s"));
        format!(
            "SafeUDP: congestion notice {}, application lowered its rate {}, CCID enforced {} ({} datagrams dropped)",
            at(self.notice_s),
            at(self.app_lowered_s),
            at(self.enforced_s),
            self.ccid_drops
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(doc: &Value) -> Vec<(&'static str, f64)> {
        let mut ms = Vec::new();
        measure(doc, &mut |n, v| ms.push((n, v)));
        ms
    }

    fn get(ms: &[(&str, f64)], name: &str) -> Option<f64> {
        let found: Vec<f64> = ms.iter().filter(|m| m.0 == name).map(|m| m.1).collect();
        assert!(found.len() <= 1, "{name} appears {} times", found.len());
        found.first().copied()
    }

    /// Every metric has a row in the module docs, with its unit.
    #[test]
    fn every_metric_is_documented_with_its_unit() {
        let source = include_str!("metrics.rs");
        for (name, unit, _) in METRICS {
            assert!(
                source
                    .lines()
                    .any(|l| l.starts_with(&format!("//! | `{name}` | {unit} |"))),
                "{name} ({unit}) has no row in the module docs"
            );
        }
    }

    /// SafeUDP's reaction times are the ends of the first intervals that
    /// show a persistent notice, a lowered application rate, enforcement.
    #[test]
    fn dccp_drops_and_safeudp_reaction_times() {
        let iv = |end: f64, persistent: u64, app: f64, enforcing: u64| {
            serde_json::json!({"end_s": end, "dccp": {"safeudp": {
                "app_rate_bps": app,
                "events": {"persistent_network": persistent, "enforcing": enforcing}}}})
        };
        let doc = serde_json::json!({
            "spec": {"knobs": {"rate": 16e6}},
            "client": {"flows": [{
                "role": "sender",
                "total": {"dccp": {"dropped_by_ccid": 300}},
                "intervals": [
                    iv(0.5, 0, 16e6, 0),
                    iv(1.0, 1, 16e6, 0),
                    iv(1.5, 0, 8e6, 0),
                    iv(2.0, 0, 8e6, 1),
                ],
            }]},
            "server": {"flows": [{"role": "receiver", "total": {"dccp": {}}}]},
        });
        let m = measured(&doc);
        assert_eq!(get(&m, "ccid_drops"), Some(300.0));
        assert_eq!(get(&m, "notice_s"), Some(1.0));
        assert_eq!(get(&m, "app_lowered_s"), Some(1.5));
        assert_eq!(get(&m, "enforced_s"), Some(2.0));
        // CCID 2 and 3: drops (0) but no SafeUDP times.
        let doc = serde_json::json!({"client": {"flows": [{
            "role": "sender", "total": {"dccp": {"dropped_by_ccid": 0}},
            "intervals": [{"end_s": 1.0, "dccp": {}}]}]}});
        let m = measured(&doc);
        assert_eq!(get(&m, "ccid_drops"), Some(0.0));
        assert_eq!(get(&m, "notice_s"), None);
    }

    /// A trial keeps the section only over SafeUDP, its times absent
    /// where they never came and its drops counted from zero; serialized
    /// in the order cbr documents have always had.
    #[test]
    fn a_trial_section_is_safeudps_alone() {
        let doc = serde_json::json!({"client": {"flows": [{
            "role": "sender", "total": {"dccp": {"dropped_by_ccid": 7}},
            "intervals": [{"end_s": 1.0, "dccp": {"safeudp": {
                "events": {"persistent_network": 1, "enforcing": 0}}}}]}]}});
        let mut knobs = Knobs::default();
        assert_eq!(SafeUdpTrial::of(&knobs, &doc), None, "no DCCP knobs");
        knobs.own.dccp = Some(super::super::DccpKnobs::default());
        assert_eq!(SafeUdpTrial::of(&knobs, &doc), None, "CCID 2");
        knobs.own.dccp = Some(super::super::DccpKnobs {
            ccid: safeudp::CCID,
            ..Default::default()
        });
        let t = SafeUdpTrial::of(&knobs, &doc).unwrap();
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#"{"notice_s":1.0,"ccid_drops":7}"#
        );
        assert_eq!(
            t.describe(),
            "SafeUDP: congestion notice at 1.0 s, application lowered its rate never, CCID enforced never (7 datagrams dropped)"
        );
        let mut from_trial = Vec::new();
        measure_trial(&serde_json::json!({"safeudp": t}), &mut |n, v| {
            from_trial.push((n, v))
        });
        assert_eq!(from_trial, vec![("notice_s", 1.0), ("ccid_drops", 7.0)]);
    }
}
