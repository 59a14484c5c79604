//! The lab section of a run: assembled from the forwarders' reports and
//! the namespaces' counters, judged against the accuracy targets, and
//! written next to the test's own output.

use anyhow::Context;
use std::io::Write;

use xferlab_core::counters::CounterSnapshot;
use xferlab_core::link::config::{EcnMarking, LossModel, Qdisc, QueueLimit};
use xferlab_core::link::report::{
    judge_direction, Accuracy, DirectionAccuracy, HopAccuracy, HopLink, LabHost, LabReport, Misses,
    RttProbe, Targets, TimerWakeup, Topology, UnintendedDrops,
};
use xferlab_core::link::stats::DirectionReport;
use xferlab_core::link::LinkConfig;

use super::forward::ForwardReport;
use super::HostTest;
use super::{Plan, Wiring};
use crate::output::Format;

/// The forwarders' busy-wait and the timer measurement behind it.
pub(super) struct SpinChoice {
    pub us: u64,
    pub auto: bool,
    pub timer: TimerWakeup,
}

/// What the lab learnt while setting up, beside the plan.
pub(super) struct Setup {
    pub spin: SpinChoice,
    /// Every TUN device took UDP segmentation offload (USO).
    pub udp_offload: bool,
    /// The hypervisor's share of CPU time while the forwarders ran.
    pub host_steal_percent: Option<f64>,
}

/// How far the probe's median RTT may sit from the configured one.
const RTT_TOLERANCE_US: f64 = 1000.0;

fn delta(before: &CounterSnapshot, after: &CounterSnapshot, key: &str) -> i64 {
    let a = after.values.get(key).copied().unwrap_or(0);
    let b = before.values.get(key).copied().unwrap_or(0);
    a.wrapping_sub(b)
}

pub(super) fn assemble(
    plan: &Plan,
    hosts: Vec<LabHost>,
    fwd: &[ForwardReport],
    w: &Wiring,
    (before, after): (&Vec<CounterSnapshot>, &Vec<CounterSnapshot>),
    rtt_probe: Option<RttProbe>,
    setup: Setup,
) -> LabReport {
    let spin = setup.spin;
    // Snapshots are per port (TUN device): counters of its namespace and
    // its device.
    let d = |ports: &[usize], key: &str| -> i64 {
        ports
            .iter()
            .map(|&p| delta(&before[p], &after[p], key))
            .sum()
    };
    let chained = plan.hops.len() > 1;
    let direction = |e: &DirectionReport,
                     f: &ForwardReport,
                     senders: &[usize],
                     receivers: &[usize],
                     ce_at: Option<&[usize]>| DirectionAccuracy {
        emulator: e.clone(),
        unintended_drops: UnintendedDrops {
            tun_tx_dropped: d(senders, "dev.tx_drop").max(0) as u64,
            tun_rx_dropped: d(receivers, "dev.rx_drop").max(0) as u64,
            buffer_exhausted: f.buffer_exhausted,
            write_errors: f.write_errors,
        },
        // IPv4 and IPv6 count CE arrivals separately.
        receiver_in_ce_pkts: ce_at.map(|p| d(p, "IpExt.InCEPkts") + d(p, "Ip6.InCEPkts")),
        unroutable_packets: if ce_at.is_some() { f.unroutable } else { 0 },
        lateness_target_us: None,
    };
    let mut c2s = direction(
        &fwd[0].emulator[0],
        &fwd[0],
        &w.clients,
        &w.far,
        Some(&w.servers),
    );
    let mut s2c = direction(
        &fwd[1].emulator[0],
        &fwd[1],
        &w.far,
        &w.clients,
        Some(&w.clients),
    );
    let mut later: Vec<HopAccuracy> = (1..plan.hops.len())
        .map(|k| HopAccuracy {
            c2s: direction(&fwd[0].emulator[k], &fwd[0], &[], &[], None),
            s2c: direction(&fwd[1].emulator[k], &fwd[1], &[], &[], None),
        })
        .collect();
    let router_hop = w.router_hop.map(|(a, b)| HopAccuracy {
        c2s: direction(&fwd[2].emulator[0], &fwd[2], &[a], &[b], None),
        s2c: direction(&fwd[3].emulator[0], &fwd[3], &[b], &[a], None),
    });
    // The lateness budget fits the path: one budget per direction, for
    // every hop of it (a late departure at any hop delays the same packet).
    let mtu = hosts.iter().map(|h| h.mtu).max().unwrap_or(plan.mtu);
    let path: Vec<&LinkConfig> = plan.hops.iter().flat_map(|(c, s)| [c, s]).collect();
    let direction_targets = |k: usize| {
        let hops: Vec<&LinkConfig> = plan
            .hops
            .iter()
            .map(|(c, s)| if k == 0 { c } else { s })
            .collect();
        Targets::for_path(&hops, &path, mtu)
    };
    let targets = [direction_targets(0), direction_targets(1)];
    let budget = |k: usize| Some(targets[k].lateness_p99_us);
    c2s.lateness_target_us = budget(0);
    s2c.lateness_target_us = budget(1);
    for hop in &mut later {
        hop.c2s.lateness_target_us = budget(0);
        hop.s2c.lateness_target_us = budget(1);
    }
    let mut misses = Misses::default();
    for (name, cfg, acc, k) in [("c2s", plan.c2s(), &c2s, 0), ("s2c", plan.s2c(), &s2c, 1)] {
        let targets = &targets[k];
        if !chained {
            judge_direction(name, cfg, acc, targets, &mut misses);
            continue;
        }
        // In a chain every hop may mark: the receiver's count is checked
        // against all of them together.
        let mut own = acc.clone();
        own.receiver_in_ce_pkts = None;
        judge_direction(&format!("hop 1 {name}"), cfg, &own, targets, &mut misses);
        let marks: u64 = fwd[k]
            .emulator
            .iter()
            .map(|e| e.counters.marked_packets)
            .sum();
        let marking = plan.hops.iter().any(|h| {
            let c = if k == 0 { &h.0 } else { &h.1 };
            !matches!(c.ecn, EcnMarking::None)
        });
        if let (true, Some(seen)) = (marking, acc.receiver_in_ce_pkts) {
            if seen != marks as i64 {
                misses.fault(format!(
                    "{name}: {marks} CE marks applied over the hops but the receiver counted {seen} (IpExtInCEPkts + Ip6InCEPkts)"
                ));
            }
        }
    }
    for (i, hop) in later.iter().enumerate() {
        let (c, s) = &plan.hops[i + 1];
        // The hops share the devices: their drops are judged once, above.
        judge_direction(
            &format!("hop {} c2s", i + 2),
            c,
            &hop.c2s,
            &targets[0],
            &mut misses,
        );
        judge_direction(
            &format!("hop {} s2c", i + 2),
            s,
            &hop.s2c,
            &targets[1],
            &mut misses,
        );
    }
    if let Some(hop) = &router_hop {
        // The plain hop is not shaped: only losses nobody asked for count.
        let lenient = Targets {
            rate_error: f64::INFINITY,
            lateness_p99_us: f64::INFINITY,
            ..Targets::default()
        };
        let plain = LinkConfig::default();
        judge_direction("router->server", &plain, &hop.c2s, &lenient, &mut misses);
        judge_direction("server->router", &plain, &hop.s2c, &lenient, &mut misses);
    }
    if let Some(p) = &rtt_probe {
        let jitter = plan
            .hops
            .iter()
            .any(|(a, b)| a.jitter.is_some() || b.jitter.is_some());
        if p.received == 0 {
            misses.fault(format!("rtt probe: none of {} probes came back", p.sent));
        } else if !jitter && (p.median_us - p.expected_us).abs() > RTT_TOLERANCE_US {
            misses.timing(format!(
                "rtt probe: median {:.0} us, configured {:.0} us (tolerance {RTT_TOLERANCE_US:.0} us)",
                p.median_us, p.expected_us
            ));
        }
    }
    for f in fwd {
        if f.abandoned > 0 {
            misses.fault(format!(
                "{} packets were still in the emulator when it had to stop",
                f.abandoned
            ));
        }
        if let Some(e) = &f.pcap_error {
            misses.fault(format!("capture incomplete: {e}"));
        }
    }
    let (valid, timing_only, violations) = misses.verdict(setup.host_steal_percent);
    LabReport {
        topology: Topology {
            hosts,
            offload: plan.offload,
            udp_offload: plan.offload && setup.udp_offload,
            realtime: fwd.iter().all(|f| f.realtime),
            spin_us: spin.us,
            spin_auto: spin.auto,
            timer_wakeup: Some(spin.timer),
            buffers: plan.buffers as u64,
            pcap: plan.pcap.as_ref().map(|p| p.display().to_string()),
        },
        c2s: plan.c2s().clone(),
        s2c: plan.s2c().clone(),
        hops: plan.hops[1..]
            .iter()
            .map(|(c, s)| HopLink {
                c2s: c.clone(),
                s2c: s.clone(),
            })
            .collect(),
        accuracy: Accuracy {
            c2s,
            s2c,
            router_hop,
            hops: later,
            rtt_probe,
            host_steal_percent: setup.host_steal_percent,
            valid,
            timing_only,
            violations,
        },
    }
}

/// Adds `"lab": {...}` as the last member of a JSON object document.
fn inject(doc: &str, lab: &impl serde::Serialize) -> Option<String> {
    crate::output::inject_member(doc, "lab", lab)
}

pub(super) fn emit(plan: &Plan, lab: &LabReport, captured: &str) -> anyhow::Result<()> {
    match (plan.format, &plan.output) {
        (Format::Json, None) => {
            let text = inject(captured, lab).unwrap_or_else(|| {
                eprintln!("{}", serde_json::to_string(lab).unwrap_or_default());
                captured.to_string()
            });
            let mut out = std::io::stdout();
            out.write_all(text.as_bytes())
                .and_then(|_| out.flush())
                .context("cannot write the result")
        }
        (Format::Json, Some(path)) => {
            let doc = std::fs::read_to_string(path).unwrap_or_default();
            match inject(&doc, lab) {
                Some(text) => std::fs::write(path, text)
                    .with_context(|| format!("cannot write {}", path.display())),
                None => {
                    eprintln!("{}", serde_json::to_string(lab).unwrap_or_default());
                    Ok(())
                }
            }
        }
        (Format::Human, out) => {
            let text = human(lab);
            match out {
                Some(path) => std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(path)
                    .and_then(|mut f| f.write_all(text.as_bytes()))
                    .with_context(|| format!("cannot write {}", path.display())),
                None => {
                    // A reader gone away (`| head`) is not the lab's failure.
                    let _ = std::io::stdout().write_all(text.as_bytes());
                    Ok(())
                }
            }
        }
        _ => {
            eprintln!("{}", serde_json::to_string(lab).unwrap_or_default());
            Ok(())
        }
    }
}

/// Several tests in one run: one document with a section per client
/// host (its test's own result) and the lab's report, or each test's
/// text under a heading followed by the lab's.
pub(super) fn emit_many(
    plan: &Plan,
    lab: &LabReport,
    tests: &[&HostTest],
    texts: &[String],
    statuses: &[Option<i32>],
) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    if plan.format == Format::Json {
        let mut sections = serde_json::Map::new();
        for ((t, text), status) in tests.iter().zip(texts).zip(statuses) {
            let result = serde_json::from_str::<serde_json::Value>(text)
                .unwrap_or_else(|_| serde_json::Value::String(text.clone()));
            sections.insert(
                t.label.clone(),
                serde_json::json!({
                    "host": t.client,
                    "server": t.server,
                    "command": t.words.join(" "),
                    "exit_code": status,
                    "result": result,
                }),
            );
        }
        let doc = serde_json::json!({ "tests": sections, "lab": lab });
        let text = serde_json::to_string_pretty(&doc).context("cannot format the result")?;
        return writeln!(out, "{text}")
            .and_then(|_| out.flush())
            .context("cannot write the result");
    }
    let mut s = String::new();
    for ((t, text), status) in tests.iter().zip(texts).zip(statuses) {
        s += &format!(
            "\n== {} -> {}: {} (exit {}) ==\n{text}",
            t.client,
            t.server,
            t.words.join(" "),
            status.map_or("signal".into(), |c| c.to_string())
        );
    }
    s += &human(lab);
    out.write_all(s.as_bytes())
        .and_then(|_| out.flush())
        .context("cannot write the result")
}

fn describe(c: &LinkConfig) -> String {
    let mut parts = Vec::new();
    match (c.rate_bps, &c.trace) {
        (Some(r), _) => parts.push(format!("rate {} Mbit/s", r as f64 / 1e6)),
        (None, Some(t)) => parts.push(format!(
            "{} ({} opportunities per {} ms, mean {:.3} Mbit/s)",
            t.source,
            t.opportunities,
            t.period_ns as f64 / 1e6,
            t.opportunities as f64 * 12_000.0 / (t.period_ns as f64 / 1e9) / 1e6
        )),
        (None, None) => match &c.usb {
            Some(u) => parts.push(format!(
                "USB 2.0 high-speed {:?} link, up to {} frame(s) per transfer, bulk {}, bus model profile {}",
                u.class,
                u.batch,
                if u.bulk_in { "IN" } else { "OUT" },
                u.profile
            )),
            None => parts.push("unshaped".into()),
        },
    }
    if c.overhead_bytes > 0 {
        parts.push(format!("+{} B/segment", c.overhead_bytes));
    }
    parts.push(format!("delay {} ms", c.delay_ns as f64 / 1e6));
    if let Some(j) = c.jitter {
        parts.push(
            format!(
                "jitter {} ms {:?}",
                j.amount_ns as f64 / 1e6,
                j.distribution
            )
            .to_lowercase(),
        );
    }
    match c.loss {
        LossModel::None => {}
        LossModel::Bernoulli { p } => parts.push(format!("loss {} %", p * 100.0)),
        LossModel::GilbertElliott { p, r, .. } => parts.push(format!(
            "loss GE p={p} r={r} (mean {:.3} %)",
            c.loss.mean_loss() * 100.0
        )),
    }
    match c.queue {
        QueueLimit::Packets(n) => parts.push(format!("queue {n} packets")),
        QueueLimit::Bytes(b) => parts.push(format!("queue {b} bytes")),
    }
    match c.ecn {
        EcnMarking::None => {}
        EcnMarking::Fixed { p, drop_not_ect } => parts.push(format!(
            "CE mark {} %{}",
            p * 100.0,
            if drop_not_ect {
                " (Not-ECT dropped)"
            } else {
                ""
            }
        )),
        EcnMarking::Red {
            min_bytes,
            max_bytes,
            max_p,
            ..
        } => parts.push(format!("RED {min_bytes}..{max_bytes} B p={max_p}")),
    }
    match c.qdisc {
        Qdisc::DropTail => {}
        Qdisc::Codel {
            target_ns,
            interval_ns,
        } => parts.push(format!(
            "CoDel target {} ms interval {} ms",
            target_ns as f64 / 1e6,
            interval_ns as f64 / 1e6
        )),
        Qdisc::FqCodel {
            target_ns,
            interval_ns,
            quantum,
            flows,
        } => parts.push(format!(
            "FQ-CoDel target {} ms interval {} ms quantum {quantum} B {flows} flows",
            target_ns as f64 / 1e6,
            interval_ns as f64 / 1e6
        )),
    }
    if c.reorder > 0.0 {
        parts.push(format!("reorder {} %", c.reorder * 100.0));
    }
    if c.duplicate > 0.0 {
        parts.push(format!("duplicate {} %", c.duplicate * 100.0));
    }
    parts.join(", ")
}

fn on(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

fn us(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{x:.0} us"))
}

fn human(lab: &LabReport) -> String {
    let mut s = String::from("\nLab:");
    for h in &lab.topology.hosts {
        if h.name == h.role {
            s += &format!(" {} {} (netns {})", h.role, h.address, h.namespace);
        } else {
            s += &format!(
                " {} {} {} (netns {})",
                h.role, h.name, h.address, h.namespace
            );
        }
        if !h.sysctls.is_empty() {
            let kv: Vec<String> = h.sysctls.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s += &format!(" [{}]", kv.join(" "));
        }
        s += ";";
    }
    s.pop();
    s += &format!(
        "\nEmulator: offload {}, SCHED_FIFO {}, spin {} us{}, {} buffers per direction{}\n",
        match (lab.topology.offload, lab.topology.udp_offload) {
            (true, true) => "on (TCP and UDP)",
            (true, false) => "on (TCP; this kernel has no UDP offload on TUN)",
            (false, _) => "off",
        },
        on(lab.topology.realtime),
        lab.topology.spin_us,
        match (&lab.topology.timer_wakeup, lab.topology.spin_auto) {
            (Some(w), auto) => format!(
                " ({}timer wake-ups p50 {:.0} us p99 {:.0} us late)",
                if auto { "auto: " } else { "" },
                w.p50_us,
                w.p99_us
            ),
            (None, _) => String::new(),
        },
        lab.topology.buffers,
        match lab.accuracy.host_steal_percent {
            Some(p) => format!(", host steal {p:.1} % of CPU time"),
            None => String::new(),
        }
    );
    for (name, cfg, a) in [
        ("c2s", &lab.c2s, &lab.accuracy.c2s),
        ("s2c", &lab.s2c, &lab.accuracy.s2c),
    ] {
        let k = &a.emulator.counters;
        let u = &a.unintended_drops;
        s += &format!("Link {name}: {}\n", describe(cfg));
        s += &format!(
            "  {} packets ({} segments) in; dropped by loss model {} (in {} bursts), by queue {}, by RED {}, by CoDel {}, unintended {} (TUN TX {}, TUN RX {}, buffers {}, write errors {})\n",
            k.arrived_packets, k.arrived_segments, k.dropped_loss_packets, k.loss_bursts, k.dropped_queue_packets,
            k.dropped_red_packets, k.dropped_qdisc_packets, u.total(), u.tun_tx_dropped, u.tun_rx_dropped, u.buffer_exhausted, u.write_errors
        );
        if !matches!(cfg.ecn, EcnMarking::None) || k.marked_segments > 0 {
            s += &format!(
                "  CE marks applied {} segments ({} packets), receiver InCEPkts (IPv4 + IPv6) {}\n",
                k.marked_segments,
                k.marked_packets,
                a.receiver_in_ce_pkts.map_or("-".into(), |v| v.to_string())
            );
        }
        let e = &a.emulator;
        if e.sojourn_samples > 0 {
            s += &format!(
                "  queueing delay after 2 s: mean {} p99 {}\n",
                us(e.sojourn_mean_us),
                us(e.sojourn_p99_us)
            );
        }
        s += &format!(
            "  departure lateness p50 {} p99 {} p99.9 {} max {}",
            us(e.lateness_p50_us),
            us(e.lateness_p99_us),
            us(e.lateness_p999_us),
            us(e.lateness_max_us)
        );
        match (e.rate_ratio_min, e.rate_ratio_max) {
            (Some(lo), Some(hi)) => {
                s += &format!(
                    "; achieved/configured rate {lo:.4}..{hi:.4} over {} busy 1 s windows\n",
                    e.rate_windows
                )
            }
            _ => s += "\n",
        }
    }
    for (i, (cfg, acc)) in lab.hops.iter().zip(&lab.accuracy.hops).enumerate() {
        for (name, c, a) in [("c2s", &cfg.c2s, &acc.c2s), ("s2c", &cfg.s2c, &acc.s2c)] {
            let k = &a.emulator.counters;
            s += &format!(
                "Hop {} {name}: {}\n  {} packets in; dropped by loss model {}, by queue {}, by RED {}; CE marks {}; lateness p99 {}\n",
                i + 2,
                describe(c),
                k.arrived_packets,
                k.dropped_loss_packets,
                k.dropped_queue_packets,
                k.dropped_red_packets,
                k.marked_packets,
                us(a.emulator.lateness_p99_us)
            );
        }
    }
    if let Some(h) = &lab.accuracy.router_hop {
        s += &format!(
            "Router hop (unshaped): {} packets to the server, {} back; unintended drops {} / {}\n",
            h.c2s.emulator.counters.departed_packets,
            h.s2c.emulator.counters.departed_packets,
            h.c2s.unintended_drops.total(),
            h.s2c.unintended_drops.total()
        );
    }
    if let Some(p) = &lab.accuracy.rtt_probe {
        s += &format!(
            "RTT probe: min/median/max {:.2}/{:.2}/{:.2} ms over {}/{} probes, configured {:.2} ms\n",
            p.min_us / 1e3,
            p.median_us / 1e3,
            p.max_us / 1e3,
            p.received,
            p.sent,
            p.expected_us / 1e3
        );
    }
    if lab.accuracy.valid {
        s += "Lab accuracy: valid\n";
    } else {
        s += &format!(
            "Lab accuracy: INVALID: {}\n",
            lab.accuracy.violations.join("; ")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::inject;
    use serde_json::{json, Value};

    #[test]
    fn inject_appends_lab_and_keeps_the_document_order() {
        let doc = "{\n  \"schema\": \"x\",\n  \"b\": [\n    1\n  ]\n}\n";
        let out = inject(doc, &json!({"valid": true})).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["lab"]["valid"], true);
        assert_eq!(v["b"][0], 1);
        assert!(out.find("schema").unwrap() < out.find("\"lab\"").unwrap());
        assert_eq!(
            inject("{}", &json!(1)).as_deref(),
            Some("{\n  \"lab\": 1\n}\n")
        );
        assert!(inject("[1]", &json!(1)).is_none());
        assert!(inject("not json", &json!(1)).is_none());
    }
}
