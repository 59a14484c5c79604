//! `xferlab model usb`: the bus timing model from the command line, its
//! JSON document and its one-line errors.

mod common;

use std::time::Duration;

use common::run;

const T: Duration = Duration::from_secs(30);

#[test]
fn model_usb_predicts_the_study_4_levers_as_json() {
    let bps = |args: &[&str]| -> f64 {
        let mut all = vec!["model", "usb", "-J", "-t", "0.2"];
        all.extend_from_slice(args);
        let out = run(&all, T);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(doc["schema"], "xferlab.usb-model/1");
        let b = &doc["breakdown"];
        let sum: f64 = [
            "wire_payload",
            "wire_overhead",
            "device_latency",
            "host_gap",
            "host_turnaround",
            "idle",
        ]
        .iter()
        .map(|k| b[k]["percent"].as_f64().unwrap())
        .sum();
        assert!((sum - 100.0).abs() < 1e-6, "{sum}");
        doc["throughput_bps"].as_f64().unwrap()
    };
    // A synchronous loop of 64-byte transfers: one per microframe.
    let small_sync = bps(&["-l", "64", "-Q", "1", "--dir", "out"]);
    assert_eq!(small_sync, 64.0 * 8.0 * 8000.0);
    // Large queued transfers: hundreds of Mbit/s, under the wire's 426.
    let large_async = bps(&["-l", "64K", "-Q", "32", "--profile", "study4-aio"]);
    assert!((200e6..426e6).contains(&large_async), "{large_async}");
    // Both directions share the bus.
    let both = bps(&[
        "-l",
        "64K",
        "-Q",
        "32",
        "--profile",
        "study4-aio",
        "--dir",
        "both",
    ]);
    assert!(both < 1.05 * large_async, "{both} {large_async}");
}

#[test]
fn model_usb_human_output_says_where_the_time_goes() {
    let out = run(
        &[
            "model",
            "usb",
            "-t",
            "0.1",
            "--profile",
            "musb",
            "--dir",
            "out",
        ],
        T,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for needle in [
        "predicted:",
        "device latency",
        "host: between transactions",
        "idle",
    ] {
        assert!(out.stdout.contains(needle), "{needle}: {}", out.stdout);
    }
    let list = run(&["model", "usb", "--list"], T);
    assert!(list.stdout.contains("study4") && list.stdout.contains("profiles.toml"));
}

/// A periodic endpoint alone, and beside bulk: its figures in the JSON
/// document and the human line, and what it leaves to bulk.
#[test]
fn model_usb_with_a_periodic_endpoint() {
    let doc = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["model", "usb", "-J", "-t", "0.2", "--profile", "wire"];
        all.extend_from_slice(args);
        let out = run(&all, T);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        serde_json::from_str(&out.stdout).unwrap()
    };
    let alone = doc(&["--periodic", "iso:in:1024x3", "--no-bulk"]);
    let per = &alone["periodic"];
    assert_eq!(per["kind"], "isochronous");
    assert_eq!(
        (per["dir"].as_str(), per["mult"].as_u64()),
        (Some("in"), Some(3))
    );
    let near = |v: &serde_json::Value, want: f64| {
        let got = v.as_f64().unwrap();
        assert!((got - want).abs() < 1.0, "{got} against {want}");
    };
    near(&per["throughput_bps"], 196_608_000.0);
    assert_eq!(alone["pipes"].as_array().map(Vec::len), Some(0));
    let beside = doc(&["--periodic", "iso:in:1024x3", "-l", "64K", "-Q", "2"]);
    near(&beside["pipes"][0]["throughput_bps"], 229_376_000.0);
    let bulk_only = doc(&["-l", "64K", "-Q", "2"]);
    assert!(bulk_only.get("periodic").is_none(), "{bulk_only}");
    let human = run(
        &[
            "model",
            "usb",
            "-t",
            "0.1",
            "--periodic",
            "interrupt:out:64/8",
            "--no-bulk",
        ],
        T,
    );
    assert_eq!(human.code, Some(0), "{}", human.stderr);
    for needle in [
        "interrupt OUT 64 B x1 every 8 microframes",
        "no bulk transfers",
    ] {
        assert!(human.stdout.contains(needle), "{needle}: {}", human.stdout);
    }
}

#[test]
fn bad_model_flags_are_one_line_usage_errors() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["model", "usb", "--profile", "xhci"],
            &["unknown USB model profile `xhci`", "study4", "HOST+DEVICE"],
        ),
        (&["model", "usb", "-l", "0"], &["-l", "got 0"]),
        (&["model", "usb", "-Q", "0"], &["-Q"]),
        (&["model", "usb", "-t", "0"], &["-t"]),
        (
            &["model", "usb", "--periodic", "bulk:in:512"],
            &["unknown transfer type 'bulk'", "iso|interrupt"],
        ),
        (
            &["model", "usb", "--periodic", "iso:in:512x2"],
            &["513-1024 bytes", "table 9-13"],
        ),
        (
            &["model", "usb", "--periodic", "iso:in:1024/3"],
            &["2^(bInterval-1)"],
        ),
        (
            &["model", "usb", "--periodic", "iso:up:1024"],
            &["direction 'up'"],
        ),
        (
            &["model", "usb", "--periodic", "iso"],
            &["iso|interrupt:in|out"],
        ),
        (
            &[
                "model",
                "usb",
                "--profile",
                "mcu-fs",
                "--periodic",
                "interrupt:in:128",
            ],
            &["1 to 64 bytes"],
        ),
        (
            &[
                "model",
                "usb",
                "--profile",
                "mcu-fs-hub",
                "--periodic",
                "interrupt:in:64",
            ],
            &["transaction translator", "not modelled"],
        ),
    ];
    for (args, needles) in cases {
        run(args, T).assert_one_line_failure(2, needles);
    }
}
