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
    ];
    for (args, needles) in cases {
        run(args, T).assert_one_line_failure(2, needles);
    }
}
