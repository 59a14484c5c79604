//! USB in the lab VM (a real kernel USB stack: dummy_hcd + configfs
//! gadgets, see lab/vm/run): xferlab's host side against the kernel's
//! SourceSink gadget. One boot runs every cell (lab/vm/guest/usb-host-tests.sh):
//! IN and OUT x 512 B / 16 KiB / 64 KiB x depth 1 / 32 with pattern
//! verification, both directions at once, a byte quota, a stalling sink, a
//! disconnect mid-test, and at super speed the EOVERFLOW error.
//! TCG is slow and noisy: behaviour is checked, and speed only as ratios.

mod common;
mod labvm_support;

use std::time::Duration;

use labvm_support::*;
use serde_json::Value;

const USB_MODULES: &str = "dummy_hcd,libcomposite,usb_f_ss_lb";

struct Cell {
    rc: i32,
    stderr: String,
    json: Option<Value>,
}

fn cell(out: &str, name: &str) -> Cell {
    let s = section(out, name);
    let rc = field(s, "rc").and_then(|v| v.parse().ok()).unwrap_or(-1);
    let stderr = field(s, "stderr").unwrap_or("").to_string();
    let json_text: String = s
        .lines()
        .skip_while(|l| !l.starts_with('{'))
        .collect::<Vec<_>>()
        .join("\n");
    let json = serde_json::from_str(&json_text).ok();
    Cell { rc, stderr, json }
}

fn mbps(v: &Value, flow: usize) -> f64 {
    let t = &v["client"]["flows"][flow]["total"];
    let secs = t["end_s"].as_f64().unwrap() - t["start_s"].as_f64().unwrap();
    t["bytes"].as_f64().unwrap() / secs / 1e6
}

#[test]
fn host_side_against_the_kernel_sourcesink_gadget() {
    if skip() {
        return;
    }
    let _vm = vm_lock();
    let script =
        std::fs::read_to_string(repo_root().join("lab/vm/guest/usb-host-tests.sh")).unwrap();
    let usb_sh = repo_root().join("lab/vm/guest/usb.sh");
    let add = format!("{}:/work/usb.sh", usb_sh.display());
    let r = run_vm(
        &[
            "--extra-modules",
            USB_MODULES,
            "--add",
            &add,
            "--timeout",
            "400",
        ],
        &script,
        Duration::from_secs(900),
    );
    assert_eq!(r.code, 0, "guest script failed");
    assert!(
        section(&r.out, "setup-high").contains("0525:a4a0  high"),
        "{}",
        r.out
    );

    let mut rates = std::collections::HashMap::new();
    for dir in ["in", "out"] {
        for size in ["512", "16K", "64K"] {
            for depth in ["1", "32"] {
                let name = format!("{dir}-{size}-{depth}");
                let c = cell(&r.out, &name);
                assert_eq!(c.rc, 0, "{name}: {}", c.stderr);
                let v = c.json.unwrap_or_else(|| panic!("{name}: no JSON"));
                common::validate_schema(&v);
                assert_eq!(v["status"], "ok", "{name}");
                assert_eq!(v["spec"]["transport"], "usb_bulk");
                let pipe = &v["client"]["usb"]["pipes"][0];
                assert_eq!(pipe["depth"], depth.parse::<u64>().unwrap());
                assert_eq!(pipe["max_packet"], 512, "{name}: high speed");
                assert_eq!(pipe["pattern"], "mod63");
                let tot = &pipe["total"];
                assert_eq!(tot["pattern_errors"], 0, "{name}");
                assert_eq!(tot["errors"].as_array().unwrap().len(), 0, "{name}: {tot}");
                assert!(tot["transfers"].as_u64().unwrap() > 0, "{name}");
                assert!(tot["latency"]["count"].as_u64().unwrap() > 0, "{name}");
                assert!(!pipe["intervals"].as_array().unwrap().is_empty(), "{name}");
                let flow = &v["client"]["flows"][0];
                assert_eq!(
                    flow["role"],
                    if dir == "in" { "receiver" } else { "sender" }
                );
                assert!(flow["total"]["bytes"].as_u64().unwrap() > 0);
                rates.insert(name, mbps(&v, 0));
            }
        }
    }
    for dir in ["in", "out"] {
        let slow = rates[&format!("{dir}-512-1")];
        let fast = rates[&format!("{dir}-64K-32")];
        eprintln!(
            "{dir}: 512 B x1 {slow:.2} MB/s, 64 KiB x32 {fast:.2} MB/s, ratio {:.0}",
            fast / slow
        );
        assert!(fast > 5.0 * slow, "{dir}: depth 32 @ 64 KiB ({fast:.2} MB/s) must beat depth 1 @ 512 B ({slow:.2} MB/s) widely");
    }

    let both = cell(&r.out, "both-16K-8");
    assert_eq!(both.rc, 0, "{}", both.stderr);
    let v = both.json.unwrap();
    assert_eq!(v["client"]["flows"].as_array().unwrap().len(), 2);
    assert!(mbps(&v, 0) > 0.0 && mbps(&v, 1) > 0.0);
    assert_eq!(v["summary"]["directions"].as_array().unwrap().len(), 2);

    let stall = cell(&r.out, "out-wrong-pattern");
    assert_eq!(stall.rc, 1, "a sink rejecting the data is a failed run");
    let v = stall.json.unwrap();
    let tot = &v["client"]["usb"]["pipes"][0]["total"];
    let stalls = tot["errors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "stall");
    assert!(
        stalls.is_some_and(|e| e["count"].as_u64().unwrap() >= 1),
        "{tot}"
    );
    assert!(tot["stalls_cleared"].as_u64().unwrap() >= 1, "{tot}");
    assert!(
        stall.stderr.contains("stalled") && stall.stderr.contains("pattern"),
        "{}",
        stall.stderr
    );

    let quota = cell(&r.out, "bytes-limit");
    assert_eq!(quota.rc, 0, "{}", quota.stderr);
    assert_eq!(
        quota.json.unwrap()["client"]["flows"][0]["total"]["bytes"],
        1 << 20
    );

    let d = cell(&r.out, "disconnect");
    assert_eq!(d.rc, 1, "disconnect: partial result, exit 1: {}", d.stderr);
    let v = d.json.expect("a partial result is still written");
    common::validate_schema(&v);
    assert_eq!(v["status"], "partial");
    assert!(v["client"]["flows"][0]["total"]["bytes"].as_u64().unwrap() > 0);
    assert!(d.stderr.contains("disconnected"), "{}", d.stderr);
    let after: u64 = field(section(&r.out, "disconnect"), "exit_after_unbind_s")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        after <= 10,
        "xferlab took {after} s to exit after the unbind"
    );

    let sup = cell(&r.out, "super-in-512");
    assert_eq!(sup.rc, 2, "{}", sup.stderr);
    assert!(sup.stderr.starts_with("xferlab: ") && sup.stderr.trim_end().lines().count() == 1);
    for needle in ["EOVERFLOW", "1024", "super speed", "-l 1024"] {
        assert!(
            sup.stderr.contains(needle),
            "missing `{needle}`: {}",
            sup.stderr
        );
    }
    let ok = cell(&r.out, "super-in-64K");
    assert_eq!(ok.rc, 0, "{}", ok.stderr);
    assert_eq!(
        ok.json.unwrap()["client"]["usb"]["pipes"][0]["max_packet"],
        1024
    );
    assert!(section(&r.out, "done").is_empty() || true);
    assert_no_qemu_left();
}
