//! Metrics read from result documents: the numbers an experiment's store
//! keeps per run (so queries and reports need no JSON parsing), the
//! per-interval series behind "metric against time" plots, and rr's
//! latency CDF.
//!
//! Names are stable and documented here and in docs/store-schema.md:
//!
//! | name | unit | from |
//! |---|---|---|
//! | `ok` | bool | `status` is `ok` |
//! | `throughput_bps` | bit/s | stream: every direction's receiver rate, summed (the sender's when the receiver's report is missing); usb: every pipe's rate |
//! | `c2s_bps`, `s2c_bps` | bit/s | one direction's receiver rate |
//! | `sender_bps` | bit/s | every direction's sender rate, summed |
//! | `retransmits` | count | TCP retransmits, summed |
//! | `rtt_mean_us` | us | mean of the TCP senders' `total.tcp.rtt_mean_us` |
//! | `cpu_client_pct`, `cpu_server_pct` | % | each side's `cpu.percent` (one CPU = 100) |
//! | `loss_fraction`, `lost`, `host_drops`, `network_lost`, `jitter_us`, `late`, `out_of_order` | fraction, count, us | UDP: `summary.directions[].udp`, summed (jitter: the largest) |
//! | `tps` | 1/s | rr: completed transactions per second in the measured window |
//! | `transactions`, `timed_out`, `failed` | count | rr |
//! | `latency_mean_us`, `latency_p50_us`, `latency_p90_us`, `latency_p99_us`, `latency_p999_us`, `latency_max_us` | us | rr: merged latency; usb: the first pipe's transfer latency |
//! | `connect_mean_us` | us | rr tcp-crr: connect time |
//! | `transfers_per_s`, `short_transfers`, `usb_errors` | 1/s, count | usb bulk, summed over pipes |
//! | `lab_valid` | bool | `lab.accuracy.valid` |
//! | `lab_marked`, `lab_dropped_queue`, `lab_dropped_loss`, `lab_unintended_drops` | count | the emulator's counters, both directions summed |
//! | `sustained` | bool | cbr: a rate was sustained in every run |
//! | `best_bps_max`, `best_bps_median`, `best_bps_min` | bit/s | cbr: highest sustained rate over its runs |

use serde_json::Value;

/// One named figure of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub name: String,
    pub value: f64,
    pub unit: &'static str,
}

/// Per-interval series a result can give: name, unit, meaning.
pub const SERIES: &[(&str, &str, &str)] = &[
    ("throughput_bps", "bit/s", "every flow's receiver rate per interval, summed (sender's when no receiver report)"),
    ("c2s_bps", "bit/s", "client-to-server receiver rate per interval"),
    ("s2c_bps", "bit/s", "server-to-client receiver rate per interval"),
    ("tps", "1/s", "rr: completed transactions per second per interval"),
    ("latency_mean_us", "us", "rr: mean latency of the interval's transactions"),
];

const UNITS: &[(&str, &str)] = &[
    ("ok", "bool"),
    ("throughput_bps", "bit/s"),
    ("c2s_bps", "bit/s"),
    ("s2c_bps", "bit/s"),
    ("sender_bps", "bit/s"),
    ("retransmits", "count"),
    ("rtt_mean_us", "us"),
    ("cpu_client_pct", "%"),
    ("cpu_server_pct", "%"),
    ("loss_fraction", "fraction"),
    ("lost", "count"),
    ("host_drops", "count"),
    ("network_lost", "count"),
    ("jitter_us", "us"),
    ("late", "count"),
    ("out_of_order", "count"),
    ("tps", "1/s"),
    ("transactions", "count"),
    ("timed_out", "count"),
    ("failed", "count"),
    ("latency_mean_us", "us"),
    ("latency_p50_us", "us"),
    ("latency_p90_us", "us"),
    ("latency_p99_us", "us"),
    ("latency_p999_us", "us"),
    ("latency_max_us", "us"),
    ("connect_mean_us", "us"),
    ("transfers_per_s", "1/s"),
    ("short_transfers", "count"),
    ("usb_errors", "count"),
    ("lab_valid", "bool"),
    ("lab_marked", "count"),
    ("lab_dropped_queue", "count"),
    ("lab_dropped_loss", "count"),
    ("lab_unintended_drops", "count"),
    ("sustained", "bool"),
    ("best_bps_max", "bit/s"),
    ("best_bps_median", "bit/s"),
    ("best_bps_min", "bit/s"),
];

/// The unit of a metric or series name.
pub fn unit_of(name: &str) -> Option<&'static str> {
    UNITS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, u)| *u)
        .or_else(|| SERIES.iter().find(|(n, _, _)| *n == name).map(|(_, u, _)| *u))
}

struct Out(Vec<Metric>);

impl Out {
    fn put(&mut self, name: &str, value: f64) {
        if !value.is_finite() {
            return;
        }
        let unit = unit_of(name).unwrap_or("");
        self.0.push(Metric {
            name: name.to_string(),
            value,
            unit,
        });
    }
}

fn f(v: &Value, ptr: &str) -> Option<f64> {
    v.pointer(ptr).and_then(Value::as_f64)
}

fn b(x: bool) -> f64 {
    if x {
        1.0
    } else {
        0.0
    }
}

/// The headline metrics of one result document (`xferlab.result/1`,
/// `xferlab.cbr/1`); unknown documents give none.
pub fn extract(doc: &Value) -> Vec<Metric> {
    let mut o = Out(Vec::new());
    let schema = doc.get("schema").and_then(Value::as_str).unwrap_or("");
    if schema.starts_with("xferlab.cbr/") {
        cbr(doc, &mut o);
    } else if schema.starts_with("xferlab.result/") {
        result(doc, &mut o);
    }
    if let Some(acc) = doc.pointer("/lab/accuracy") {
        lab(acc, &mut o);
    }
    o.0
}

fn cbr(doc: &Value, o: &mut Out) {
    let runs = doc.pointer("/summary/runs").and_then(Value::as_f64).unwrap_or(0.0);
    let without = doc
        .pointer("/summary/runs_without_a_sustained_rate")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    o.put("sustained", b(runs > 0.0 && without == 0.0));
    for (k, name) in [("max", "best_bps_max"), ("median", "best_bps_median"), ("min", "best_bps_min")] {
        if let Some(v) = doc.pointer(&format!("/summary/{k}")).and_then(Value::as_f64) {
            o.put(name, v);
        }
    }
}

fn result(doc: &Value, o: &mut Out) {
    o.put("ok", b(doc.get("status").and_then(Value::as_str) == Some("ok")));
    let dirs = doc
        .pointer("/summary/directions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !dirs.is_empty() {
        let mut total = 0.0;
        let mut sender = 0.0;
        for d in &dirs {
            let s = f(d, "/sender/bits_per_second").unwrap_or(0.0);
            let r = f(d, "/receiver/bits_per_second").unwrap_or(s);
            total += r;
            sender += s;
            match d.get("direction").and_then(Value::as_str) {
                Some("c2s") => o.put("c2s_bps", r),
                Some("s2c") => o.put("s2c_bps", r),
                _ => {}
            }
        }
        o.put("throughput_bps", total);
        o.put("sender_bps", sender);
        if dirs.iter().any(|d| d.get("retransmits").is_some()) {
            o.put(
                "retransmits",
                dirs.iter().filter_map(|d| f(d, "/retransmits")).sum(),
            );
        }
        let udp: Vec<&Value> = dirs.iter().filter_map(|d| d.get("udp")).collect();
        if !udp.is_empty() {
            let sum = |k: &str| udp.iter().filter_map(|u| f(u, &format!("/{k}"))).sum::<f64>();
            let sent = sum("sent");
            let lost = sum("lost");
            o.put("loss_fraction", if sent > 0.0 { lost / sent } else { 0.0 });
            for k in ["lost", "host_drops", "network_lost", "late", "out_of_order"] {
                o.put(k, sum(k));
            }
            o.put(
                "jitter_us",
                udp.iter().filter_map(|u| f(u, "/jitter_us")).fold(0.0, f64::max),
            );
        }
        let rtts: Vec<f64> = doc
            .pointer("/client/flows")
            .and_then(Value::as_array)
            .into_iter()
            .chain(doc.pointer("/server/flows").and_then(Value::as_array))
            .flatten()
            .filter_map(|fl| f(fl, "/total/tcp/rtt_mean_us"))
            .collect();
        if !rtts.is_empty() {
            o.put("rtt_mean_us", rtts.iter().sum::<f64>() / rtts.len() as f64);
        }
    }
    if let Some(p) = f(doc, "/client/cpu/percent") {
        o.put("cpu_client_pct", p);
    }
    if let Some(p) = f(doc, "/server/cpu/percent") {
        o.put("cpu_server_pct", p);
    }
    if let Some(rr) = doc.pointer("/summary/rr") {
        o.put("tps", f(rr, "/per_second").unwrap_or(0.0));
        for k in ["transactions", "timed_out", "failed"] {
            o.put(k, f(rr, &format!("/{k}")).unwrap_or(0.0));
        }
        if let Some(l) = rr.get("latency") {
            latency(l, o);
        }
        if let Some(c) = f(rr, "/connect/mean_us") {
            o.put("connect_mean_us", c);
        }
    }
    if let Some(pipes) = doc.pointer("/client/usb/pipes").and_then(Value::as_array) {
        if dirs.is_empty() {
            let flows = doc.pointer("/client/flows").and_then(Value::as_array);
            let bps: f64 = flows
                .into_iter()
                .flatten()
                .filter_map(|fl| f(fl, "/total/bits_per_second"))
                .sum();
            o.put("throughput_bps", bps);
        }
        let sum = |p: &str| pipes.iter().filter_map(|x| f(x, p)).sum::<f64>();
        o.put("transfers_per_s", sum("/total/transfers_per_second"));
        o.put("short_transfers", sum("/total/short_transfers"));
        let errors: f64 = pipes
            .iter()
            .filter_map(|x| x.pointer("/total/errors").and_then(Value::as_array))
            .flatten()
            .filter_map(|e| f(e, "/count"))
            .sum();
        o.put("usb_errors", errors);
        if let Some(l) = pipes.first().and_then(|p| p.pointer("/total/latency")) {
            latency(l, o);
        }
    }
}

fn latency(l: &Value, o: &mut Out) {
    for (k, name) in [
        ("mean_us", "latency_mean_us"),
        ("p50_us", "latency_p50_us"),
        ("p90_us", "latency_p90_us"),
        ("p99_us", "latency_p99_us"),
        ("p999_us", "latency_p999_us"),
        ("max_us", "latency_max_us"),
    ] {
        if let Some(v) = f(l, &format!("/{k}")) {
            o.put(name, v);
        }
    }
}

fn lab(acc: &Value, o: &mut Out) {
    if let Some(v) = acc.get("valid").and_then(Value::as_bool) {
        o.put("lab_valid", b(v));
    }
    let dirs: Vec<&Value> = ["c2s", "s2c"].iter().filter_map(|d| acc.get(*d)).collect();
    let sum = |p: &str| dirs.iter().filter_map(|d| f(d, p)).sum::<f64>();
    o.put("lab_marked", sum("/counters/marked_packets"));
    o.put("lab_dropped_queue", sum("/counters/dropped_queue_packets"));
    o.put("lab_dropped_loss", sum("/counters/dropped_loss_packets"));
    let unintended: f64 = dirs
        .iter()
        .filter_map(|d| d.get("unintended_drops").and_then(Value::as_object))
        .flat_map(|m| m.values().filter_map(Value::as_f64))
        .sum();
    o.put("lab_unintended_drops", unintended);
}

/// A per-interval series of a result: (interval end, s; value), warm-up
/// intervals included (their times say where they are). Rates come from
/// the receiving side's sums, else the sender's.
pub fn series(doc: &Value, name: &str) -> Option<Vec<(f64, f64)>> {
    match name {
        "tps" | "latency_mean_us" => {
            let key = if name == "tps" { "per_second" } else { "mean_latency_us" };
            let sums = doc.pointer("/client/rr/sums").and_then(Value::as_array)?;
            Some(
                sums.iter()
                    .filter_map(|s| Some((f(s, "/end_s")?, f(s, &format!("/{key}"))?)))
                    .collect(),
            )
        }
        "throughput_bps" | "c2s_bps" | "s2c_bps" => {
            let want = match name {
                "c2s_bps" => Some("c2s"),
                "s2c_bps" => Some("s2c"),
                _ => None,
            };
            let mut by_end: Vec<(f64, f64)> = Vec::new();
            for dir in ["c2s", "s2c"] {
                if want.is_some_and(|w| w != dir) {
                    continue;
                }
                let pick = |role: &str| -> Vec<(f64, f64)> {
                    ["/client/sums", "/server/sums"]
                        .iter()
                        .filter_map(|p| doc.pointer(p).and_then(Value::as_array))
                        .flatten()
                        .filter(|s| {
                            s.get("direction").and_then(Value::as_str) == Some(dir)
                                && s.get("role").and_then(Value::as_str) == Some(role)
                        })
                        .filter_map(|s| Some((f(s, "/end_s")?, f(s, "/bits_per_second")?)))
                        .collect()
                };
                let mut pts = pick("receiver");
                if pts.is_empty() {
                    pts = pick("sender");
                }
                for (i, (t, v)) in pts.into_iter().enumerate() {
                    match by_end.get_mut(i) {
                        Some(slot) => slot.1 += v,
                        None => by_end.push((t, v)),
                    }
                }
            }
            (!by_end.is_empty()).then_some(by_end)
        }
        _ => None,
    }
}

/// rr latency CDF from the client's merged percentiles: (µs, fraction).
pub fn latency_cdf(doc: &Value) -> Option<Vec<(f64, f64)>> {
    let p = doc.pointer("/client/rr/percentiles").and_then(Value::as_array)?;
    let v: Vec<(f64, f64)> = p
        .iter()
        .filter_map(|x| Some((f(x, "/us")?, f(x, "/percentile")? / 100.0)))
        .collect();
    (!v.is_empty()).then_some(v)
}

/// A value with its unit, three significant digits (`12.3 Gbit/s`,
/// `18.8 µs`, `1.20 %`).
pub fn format_value(value: f64, unit: &str) -> String {
    let sig = |x: f64| {
        let a = x.abs();
        if a >= 100.0 {
            format!("{x:.0}")
        } else if a >= 10.0 {
            format!("{x:.1}")
        } else {
            format!("{x:.2}")
        }
    };
    let prefixed = |base: &str| {
        let a = value.abs();
        let (d, p) = if a >= 1e9 {
            (1e9, "G")
        } else if a >= 1e6 {
            (1e6, "M")
        } else if a >= 1e3 {
            (1e3, "k")
        } else {
            (1.0, "")
        };
        format!("{} {p}{base}", sig(value / d))
    };
    match unit {
        "bit/s" => prefixed("bit/s"),
        "1/s" => prefixed("/s"),
        "us" if value.abs() >= 1e4 => format!("{} ms", sig(value / 1e3)),
        "us" => format!("{} µs", sig(value)),
        "fraction" => format!("{} %", sig(value * 100.0)),
        "%" => format!("{} %", sig(value)),
        "bool" => (if value != 0.0 { "yes" } else { "no" }).to_string(),
        "count" => format!("{value:.0}"),
        _ => sig(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn get(ms: &[Metric], n: &str) -> f64 {
        ms.iter().find(|m| m.name == n).unwrap_or_else(|| panic!("no {n} in {ms:?}")).value
    }

    #[test]
    fn stream_udp_and_cpu() {
        let doc = json!({
            "schema": "xferlab.result/1", "status": "ok",
            "client": {"cpu": {"percent": 19.5}, "flows": [{"total": {"tcp": {"rtt_mean_us": 500}}}], "sums": [
                {"direction": "c2s", "role": "sender", "end_s": 0.25, "bits_per_second": 11.0},
                {"direction": "c2s", "role": "sender", "end_s": 0.5, "bits_per_second": 13.0}]},
            "server": {"cpu": {"percent": 30.0}, "flows": [], "sums": [
                {"direction": "c2s", "role": "receiver", "end_s": 0.25, "bits_per_second": 10.0},
                {"direction": "c2s", "role": "receiver", "end_s": 0.5, "bits_per_second": 12.0}]},
            "summary": {"directions": [
                {"direction": "c2s", "sender": {"bits_per_second": 12.3e9}, "receiver": {"bits_per_second": 12.2e9}, "retransmits": 2},
                {"direction": "s2c", "sender": {"bits_per_second": 1e9}, "receiver": null,
                 "udp": {"sent": 100, "lost": 4, "host_drops": 1, "network_lost": 3, "late": 0, "out_of_order": 2, "jitter_us": 7.5}}]}
        });
        let ms = extract(&doc);
        assert_eq!(get(&ms, "ok"), 1.0);
        assert_eq!(get(&ms, "throughput_bps"), 12.2e9 + 1e9);
        assert_eq!(get(&ms, "c2s_bps"), 12.2e9);
        assert_eq!(get(&ms, "s2c_bps"), 1e9);
        assert_eq!(get(&ms, "sender_bps"), 13.3e9);
        assert_eq!(get(&ms, "retransmits"), 2.0);
        assert_eq!(get(&ms, "loss_fraction"), 0.04);
        assert_eq!(get(&ms, "jitter_us"), 7.5);
        assert_eq!(get(&ms, "rtt_mean_us"), 500.0);
        assert_eq!(get(&ms, "cpu_server_pct"), 30.0);
        assert_eq!(series(&doc, "throughput_bps").unwrap(), vec![(0.25, 10.0), (0.5, 12.0)]);
        assert_eq!(series(&doc, "s2c_bps"), None);
    }

    #[test]
    fn rr_and_cdf() {
        let doc = json!({
            "schema": "xferlab.result/1", "status": "partial",
            "client": {"rr": {"sums": [{"end_s": 1.0, "per_second": 40.0, "mean_latency_us": 20.0}],
                              "percentiles": [{"percentile": 0.0, "us": 18.0}, {"percentile": 50.0, "us": 19.0}, {"percentile": 100.0, "us": 90.0}]}},
            "summary": {"directions": [], "rr": {"per_second": 43846.1, "transactions": 21936, "timed_out": 1, "failed": 0,
                        "latency": {"mean_us": 22.7, "p50_us": 18.7, "p99_us": 43.9}}}
        });
        let ms = extract(&doc);
        assert_eq!(get(&ms, "ok"), 0.0);
        assert_eq!(get(&ms, "tps"), 43846.1);
        assert_eq!(get(&ms, "timed_out"), 1.0);
        assert_eq!(get(&ms, "latency_p99_us"), 43.9);
        assert!(ms.iter().all(|m| m.name != "throughput_bps"));
        assert_eq!(series(&doc, "tps").unwrap(), vec![(1.0, 40.0)]);
        assert_eq!(latency_cdf(&doc).unwrap(), vec![(18.0, 0.0), (19.0, 0.5), (90.0, 1.0)]);
    }

    #[test]
    fn cbr_lab_and_formatting() {
        let doc = json!({"schema": "xferlab.cbr/1", "summary": {"max": 2e8, "median": 1.5e8, "min": 1e8, "runs": 3, "runs_without_a_sustained_rate": 0},
            "lab": {"accuracy": {"valid": false, "c2s": {"counters": {"marked_packets": 5, "dropped_queue_packets": 2, "dropped_loss_packets": 0}, "unintended_drops": {"tun_tx_dropped": 1, "buffer_exhausted": 0}},
                                  "s2c": {"counters": {"marked_packets": 1}}}}});
        let ms = extract(&doc);
        assert_eq!(get(&ms, "sustained"), 1.0);
        assert_eq!(get(&ms, "best_bps_median"), 1.5e8);
        assert_eq!(get(&ms, "lab_valid"), 0.0);
        assert_eq!(get(&ms, "lab_marked"), 6.0);
        assert_eq!(get(&ms, "lab_unintended_drops"), 1.0);
        assert_eq!(format_value(12.34e9, "bit/s"), "12.3 Gbit/s");
        assert_eq!(format_value(18.75, "us"), "18.8 µs");
        assert_eq!(format_value(0.012, "fraction"), "1.20 %");
        assert_eq!(format_value(43846.0, "1/s"), "43.8 k/s");
        assert_eq!(unit_of("tps"), Some("1/s"));
        assert!(extract(&json!({"schema": "other/1"})).is_empty());
    }
}
