//! SafeUDP (DCCP CCID 248) through `xferlab lab`'s bottleneck: a constant
//! rate above the link's, with the application ignoring the CCID's
//! notices (the CCID enforces TFRC's rate and drops the excess) or
//! stepping its rate down (never enforced). These tests need root (CI
//! runs as root) and run one at a time: they measure timing on a shared
//! 2-core machine.

mod common;

use common::*;
use serde_json::Value;

/// `verb` (stream or cbr) with a 16 Mbit/s SafeUDP flow into a 10 Mbit/s,
/// 40 ms RTT link with a 50-packet drop-tail queue (the simulator's path
/// in docs/safeudp.md), the application answering with `policy`.
fn overload_run(verb: &str, policy: &str) -> Output {
    let args = [
        "lab",
        "--rate",
        "10M",
        "--delay",
        "20ms",
        "--queue",
        "50p",
        "--no-probe",
        // The emulator's timing on a loaded 2-core machine is not what
        // is measured here; the CCID's reaction is.
        "--allow-invalid",
        verb,
        "--dccp",
        "--ccid",
        "248",
        "--on-congestion",
        policy,
        "-b",
        "16M",
        "-l",
        "1200",
        "-t",
        "6",
        "-J",
    ];
    let out = run(&args, deadline_for(11.0));
    assert!(!out.timed_out, "lab hung\n{}", out.describe());
    out
}

/// The stream run of [`overload_run`]; returns the sender flow.
fn overload(policy: &str) -> Value {
    let _turn = one_at_a_time();
    let out = overload_run("stream", policy);
    assert_eq!(out.code, Some(0), "{}", out.describe());
    let v = parse_json(&out);
    validate_schema(&v);
    assert_ok(&v);
    v["client"]["flows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["role"] == "sender")
        .unwrap_or_else(|| panic!("no sender flow\n{}", out.describe()))
        .clone()
}

fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The application's rate in each interval, bit/s.
fn app_rates(tx: &Value) -> Vec<f64> {
    tx["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|iv| iv["dccp"]["safeudp"]["app_rate_bps"].as_f64().unwrap())
        .collect()
}

#[test]
fn an_ignoring_cbr_sender_above_the_bottleneck_is_enforced() {
    let tx = overload("ignore");
    let total = &tx["total"]["dccp"];
    let ev = &total["safeudp"]["events"];
    assert!(count(&ev["persistent_network"]) >= 1, "{total}");
    assert!(count(&ev["enforcing"]) >= 1, "{total}");
    assert!(count(&total["dropped_by_ccid"]) > 1000, "{total}");
    // The application never lowered its rate; the CCID did.
    assert!(app_rates(&tx).iter().all(|&r| r == 16e6), "{tx}");
    let enforced: Vec<f64> = tx["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|iv| iv["dccp"]["safeudp"]["enforced_bps"].as_f64())
        .collect();
    assert!(
        !enforced.is_empty() && enforced.iter().all(|&r| r < 12e6),
        "enforced rates {enforced:?} for a 10 Mbit/s link"
    );
}

#[test]
fn a_stepping_down_cbr_sender_lowers_its_rate_and_is_not_enforced() {
    let tx = overload("step-down");
    let total = &tx["total"]["dccp"];
    let ev = &total["safeudp"]["events"];
    assert!(count(&ev["persistent_network"]) >= 1, "{total}");
    assert_eq!(count(&ev["enforcing"]), 0, "{total}");
    assert_eq!(count(&total["dropped_by_ccid"]), 0, "{total}");
    let rates = app_rates(&tx);
    assert!(
        rates.iter().any(|&r| r <= 8e6),
        "never stepped down to half: {rates:?}"
    );
}

/// `cbr` over SafeUDP: the same overload, judged as a constant rate, with
/// the CCID's reaction in each trial (`safeudp`) and in the metrics an
/// experiment stores: the ignoring application is enforced (the CCID
/// drops), the stepping-down one lowers its rate and never is.
#[test]
fn cbr_over_safeudp_reports_the_reaction_in_each_trial() {
    let _turn = one_at_a_time();
    let trial = |policy: &str| -> Value {
        let out = overload_run("cbr", policy);
        // 16 Mbit/s into a 10 Mbit/s link is not sustained: exit 1.
        assert_eq!(out.code, Some(1), "{}", out.describe());
        let v = parse_json(&out);
        assert_eq!(v["schema"], "xferlab.cbr/1", "{v}");
        let t = v["runs"][0]["trials"][0].clone();
        assert_eq!(t["sustained"], false, "{t}");
        t
    };
    let ignore = trial("ignore");
    let su = &ignore["safeudp"];
    assert!(
        su["notice_s"].as_f64().is_some_and(|s| s <= 6.0),
        "{ignore}"
    );
    assert!(su["enforced_s"].is_number(), "{ignore}");
    assert!(count(&su["ccid_drops"]) > 1000, "{ignore}");
    assert!(su.get("app_lowered_s").is_none(), "{ignore}");
    let step = trial("step-down");
    // The constant rate was not delivered: the application stepped down
    // from its 16 Mbit/s offer to half or less, into a 10 Mbit/s link. The
    // verdict judges the datagrams offered (before, only the network's few
    // drops of those sent counted).
    let (offered, received) = (count(&step["offered"]), count(&step["received"]));
    assert!(
        received * 10 < offered * 7,
        "{received} of {offered} offered: {step}"
    );
    let why = step["reason"].as_str().unwrap_or_default();
    assert!(why.contains(&format!("of {offered} datagrams")), "{step}");
    let su = &step["safeudp"];
    assert!(
        su["notice_s"].is_number() && su["app_lowered_s"].is_number(),
        "{step}"
    );
    assert!(su.get("enforced_s").is_none(), "{step}");
    assert_eq!(count(&su["ccid_drops"]), 0, "{step}");
}
