//! `cbr` and `sweep`: series of UDP tests with the real binary over
//! loopback (an in-process server kept up for the whole series).

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

/// A criterion that tolerates the scheduling hiccups of a shared 2-vCPU
/// machine, for rates far below what loopback carries.
const LENIENT: [&str; 6] = [
    "--max-loss",
    "1",
    "--max-late",
    "10",
    "--max-host-drops",
    "1000",
];

/// `cbr` with `args` and the lenient criterion.
fn cbr(args: &[&str], timeout: Duration) -> Output {
    let mut all = vec!["cbr"];
    all.extend_from_slice(args);
    all.extend_from_slice(&LENIENT);
    run(&all, timeout)
}

fn json_of(out: &Output) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e})\n{}", out.describe()))
}

/// Every repeat of a ladder far below loopback's capacity must find the
/// same highest rung: max == median == min. A rung is 0.4 s, so a host
/// that holds the sender or receiver for a few milliseconds makes more
/// than ten datagrams late: such a miss is retried when the host stole
/// CPU time during it (CI failed once with one repeat stopping at 5M).
#[test]
fn the_rate_ladder_gives_a_stable_answer_across_repeats() {
    let _turn = one_at_a_time();
    unless_the_host_stole(|| {
        let out = cbr(
            &[
                "--ladder",
                "5M, 10M, 20M",
                "--repeat",
                "3",
                "-t",
                "0.4",
                "-J",
            ],
            Duration::from_secs(60),
        );
        let v = json_of(&out);
        assert_eq!(v["schema"], "xferlab.cbr/1");
        let s = &v["summary"];
        assert_eq!(s["runs"], 3, "{s}");
        let runs = v["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 3);
        for r in runs {
            for t in r["trials"].as_array().unwrap() {
                assert!(
                    t["sent"].as_u64().unwrap() > 0 && t["received"].as_u64().unwrap() > 0,
                    "{t}"
                );
            }
        }
        let misses = not_sustained(&v);
        if !misses.is_empty() {
            return Some(format!("rungs not sustained: {misses}; summary {s}"));
        }
        out.assert_success();
        assert_eq!(s["runs_without_a_sustained_rate"], 0, "{s}");
        assert_eq!(s["max"], 20_000_000, "{s}");
        assert_eq!(s["min"], s["max"], "spread across repeats: {s}");
        assert_eq!(s["median"], s["max"], "{s}");
        for r in runs {
            assert_eq!(
                r["trials"].as_array().unwrap().len(),
                3,
                "every rung tried: {r}"
            );
        }
        None
    });
}

/// The trials of a cbr report that missed the criterion, with their
/// reasons, or an empty string.
fn not_sustained(v: &Value) -> String {
    let mut misses = Vec::new();
    for r in v["runs"].as_array().into_iter().flatten() {
        for t in r["trials"].as_array().into_iter().flatten() {
            if t["sustained"] != true {
                misses.push(format!("{} bit/s: {}", t["rate_bps"], t["reason"]));
            }
        }
    }
    misses.join("; ")
}

#[test]
fn a_single_rate_verdict_sets_the_exit_status() {
    let _turn = one_at_a_time();
    unless_the_host_stole(|| {
        let out = cbr(&["-b", "5M", "-t", "0.4"], Duration::from_secs(30));
        if out.code == Some(1) && out.stdout.contains("NOT sustained") {
            return Some(format!("5M not sustained:\n{}", out.describe()));
        }
        out.assert_success();
        assert!(
            out.stdout.contains("constant rate sustained"),
            "{}",
            out.describe()
        );
        None
    });

    // 40 Gbit/s of 1400-byte datagrams cannot be sustained on loopback
    // with a 4 KiB receive buffer: the verdict names what broke.
    let out = run(
        &["cbr", "-b", "40G", "-w", "4K", "-t", "0.4"],
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(1), "{}", out.describe());
    assert!(out.stdout.contains("NOT sustained"), "{}", out.describe());
    assert!(
        out.stdout.contains("FAILED: loss"),
        "the failing threshold is named\n{}",
        out.describe()
    );
}

#[test]
fn a_bisection_search_stays_inside_its_bounds() {
    let _turn = one_at_a_time();
    unless_the_host_stole(|| {
        let out = cbr(
            &["--search", "2M:8M:2M", "-t", "0.3", "-J"],
            Duration::from_secs(60),
        );
        let v = json_of(&out);
        let trials = v["runs"][0]["trials"].as_array().unwrap();
        assert!(!trials.is_empty());
        for t in trials {
            let r = t["rate_bps"].as_u64().unwrap();
            assert!(
                (2_000_000..=8_000_000).contains(&r),
                "rate {r} outside the bounds"
            );
        }
        // The high bound is tried first and, this far below capacity,
        // holds unless the host held the sender up.
        let misses = not_sustained(&v);
        if !misses.is_empty() {
            return Some(format!("rates not sustained: {misses}"));
        }
        out.assert_success();
        assert_eq!(v["summary"]["max"], 8_000_000, "{}", v["summary"]);
        None
    });
}

/// Takes the turn too: five starts of the debug binary beside a timed
/// rung competed for the 2 vCPUs, a likely cause of the ladder test's one
/// miss with no steal (a 10 Mbit/s rung 11 % late).
#[test]
fn cbr_usage_errors_are_one_line() {
    let _turn = one_at_a_time();
    for (args, needle) in [
        (vec!["cbr", "--search", "5M:1M"], "--search"),
        (vec!["cbr", "--ladder", "1M,2X"], "not a rate"),
        (vec!["cbr", "--max-loss", "150"], "--max-loss"),
        (vec!["cbr", "--repeat", "0"], "--repeat"),
        (vec!["cbr", "-b", "1M", "--format", "csv"], "--format"),
    ] {
        let out = run(&args, Duration::from_secs(10));
        out.assert_one_line_failure(2, &[needle]);
    }
}

#[test]
fn a_size_sweep_reports_every_point() {
    let _turn = one_at_a_time();
    let out = run(
        &[
            "sweep",
            "--size",
            "64:1464:700",
            "-b",
            "20M",
            "-t",
            "0.3",
            "-J",
        ],
        Duration::from_secs(60),
    );
    out.assert_success();
    let v = json_of(&out);
    assert_eq!(v["schema"], "xferlab.sweep/1");
    let points = v["points"].as_array().unwrap();
    let sizes: Vec<u64> = points.iter().map(|p| p["size"].as_u64().unwrap()).collect();
    assert_eq!(sizes, vec![64, 764, 1464]);
    for p in points {
        assert!(p["sent"].as_u64().unwrap() > 0, "{p}");
        assert!(p.get("error").is_none(), "{p}");
        assert!(
            p["received"].as_u64().unwrap() <= p["sent"].as_u64().unwrap(),
            "{p}"
        );
    }
}

#[test]
fn a_spacing_sweep_turns_gaps_into_rates() {
    let _turn = one_at_a_time();
    let out = run(
        &[
            "sweep",
            "--spacing",
            "0:200:100",
            "-l",
            "1000",
            "-t",
            "0.3",
            "-J",
        ],
        Duration::from_secs(60),
    );
    out.assert_success();
    let v = json_of(&out);
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 3);
    assert!(
        points[0]["rate_bps"].is_null(),
        "0 us = back to back: {}",
        points[0]
    );
    // 1000 B every 100 us = 80 Mbit/s; every 200 us = 40 Mbit/s.
    assert_eq!(points[1]["rate_bps"], 80_000_000);
    assert_eq!(points[2]["rate_bps"], 40_000_000);
    let sweep_err = run(&["sweep", "--size", "10:20:5"], Duration::from_secs(10));
    sweep_err.assert_one_line_failure(2, &["-l/--length"]);
}
