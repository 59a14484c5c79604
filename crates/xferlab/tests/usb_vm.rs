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

const USB_MODULES: &str = "dummy_hcd,libcomposite,usb_f_ss_lb,usb_f_fs,usbtest";

struct Cell {
    rc: i32,
    stderr: String,
    json: Option<Value>,
}

fn cell(out: &str, name: &str) -> Cell {
    let s = section(out, name);
    let rc = field(s, "rc").and_then(|v| v.parse().ok()).unwrap_or(-1);
    let stderr = field(s, "stderr").unwrap_or("").to_string();
    let json = serde_json::from_str(&json_block(s)).ok();
    Cell { rc, stderr, json }
}

/// The pretty-printed JSON document in a section: from a line `{` to the line `}`.
fn json_block(s: &str) -> String {
    let mut out = Vec::new();
    for l in s.lines().skip_while(|l| *l != "{") {
        out.push(l);
        if l == "}" {
            break;
        }
    }
    out.join("\n")
}

fn mbps(v: &Value, flow: usize) -> f64 {
    let t = &v["client"]["flows"][flow]["total"];
    let secs = t["end_s"].as_f64().unwrap() - t["start_s"].as_f64().unwrap();
    t["bytes"].as_f64().unwrap() / secs / 1e6
}

#[test]
#[cfg_attr(labvm_skip, ignore = "XFERLAB_LABVM=skip: boots the lab VM (QEMU)")]
fn host_side_against_the_kernel_sourcesink_gadget() {
    let _vm = vm_lock();
    let script =
        std::fs::read_to_string(repo_root().join("lab/vm/guest/usb-host-tests.sh")).unwrap();
    let usb_sh = repo_root().join("lab/vm/guest/usb.sh");
    let add = format!("{}:/work/usb.sh", usb_sh.display());
    let testusb = lab_build("build-testusb");
    let add_testusb = format!("{testusb}:/work/testusb");
    let r = run_vm(
        &[
            "--extra-modules",
            USB_MODULES,
            "--add",
            &add,
            "--add",
            &add_testusb,
            "--timeout",
            "400",
        ],
        &script,
        Duration::from_secs(1200),
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
                let pipe = &v["client"]["transport"]["pipes"][0];
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
    let tot = &v["client"]["transport"]["pipes"][0]["total"];
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

    let by_addr = cell(&r.out, "select-busaddr");
    assert_eq!(by_addr.rc, 0, "{}", by_addr.stderr);
    let want = field(section(&r.out, "select-busaddr"), "busaddr")
        .unwrap()
        .to_string();
    let dev = &by_addr.json.unwrap()["client"]["transport"]["device"];
    assert_eq!(format!("{}.{}", dev["bus"], dev["address"]), want);
    let auto = cell(&r.out, "select-auto");
    assert_eq!(auto.rc, 0, "{}", auto.stderr);
    assert_eq!(
        auto.json.unwrap()["client"]["transport"]["device"]["product_id"],
        0xa4a0
    );
    let wrong = cell(&r.out, "select-wrong-serial");
    assert_eq!(wrong.rc, 1);
    assert!(
        wrong
            .stderr
            .contains("no USB device 0525:a4a0 and serial nope"),
        "{}",
        wrong.stderr
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

    // A kernel driver (usbtest) holds the interface: the error names it; --detach-kernel-driver works and gives it back.
    let busy = cell(&r.out, "busy");
    assert_eq!(busy.rc, 1, "{}", busy.stderr);
    for needle in [
        "held by the kernel driver `usbtest`",
        "--detach-kernel-driver",
        "/sys/bus/usb/drivers/usbtest/unbind",
    ] {
        assert!(
            busy.stderr.contains(needle),
            "missing `{needle}`: {}",
            busy.stderr
        );
    }
    let det = cell(&r.out, "detach");
    assert_eq!(det.rc, 0, "{}", det.stderr);
    assert_eq!(det.json.unwrap()["status"], "ok");
    assert_eq!(
        section(&r.out, "after-detach").trim(),
        "1",
        "usbtest is bound again after the run"
    );

    // testusb (usbtest tests 27/28) vs xferlab, same gadget, same bytes: a ratio, no threshold.
    let mut ratios = Vec::new();
    for (t, dir) in [(27, "out"), (28, "in")] {
        let text = section(&r.out, &format!("testusb-{t}"));
        assert_eq!(field(text, "rc"), Some("0"), "testusb -t {t}: {text}");
        assert!(!text.contains("-->"), "testusb -t {t} failed: {text}");
        let secs: f64 = text
            .split(&format!("test {t},"))
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no time in testusb output: {text}"));
        let bytes = 32.0 * 32.0 * 65536.0;
        let reference = bytes / secs / 1e6;
        let c = cell(&r.out, &format!("cmp-xferlab-{dir}"));
        assert_eq!(c.rc, 0, "{}", c.stderr);
        let v = c.json.unwrap();
        assert_eq!(
            v["client"]["flows"][0]["total"]["bytes"].as_f64().unwrap(),
            bytes
        );
        let ours = mbps(&v, 0);
        let line = format!(
            "64 KiB x32 queued {}: xferlab {ours:.1} MB/s, testusb -t {t} {reference:.1} MB/s, ratio {:.2}",
            dir.to_uppercase(),
            ours / reference
        );
        eprintln!("{line}");
        ratios.push(line);
    }
    std::fs::write(
        repo_root().join("target/usb-vs-testusb.txt"),
        ratios.join("\n") + "\n",
    )
    .ok();

    // xferlab's own FunctionFS gadget, AIO and sync, against the host side.
    for io in ["aio", "sync"] {
        for dir in ["in", "out", "both"] {
            let name = format!("ffs-{io}-{dir}");
            let c = cell(&r.out, &name);
            assert_eq!(c.rc, 0, "{name}: {}", c.stderr);
            let v = c.json.unwrap();
            common::validate_schema(&v);
            assert_eq!(v["status"], "ok", "{name}");
            assert_eq!(v["client"]["transport"]["device"]["vendor_id"], 0x1d6b);
            for (i, p) in v["client"]["transport"]["pipes"]
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
            {
                assert_eq!(
                    p["total"]["pattern_errors"], 0,
                    "{name}: the gadget's IN data follows the pattern"
                );
                assert!(mbps(&v, i) > 0.0, "{name}");
            }
        }
        let g = section(&r.out, &format!("ffs-{io}-gadget"));
        assert_eq!(field(g, "rc"), Some("130"), "Ctrl-C ends the gadget: {g}");
        assert_eq!(field(g, "leftover_configfs"), Some("0"), "{g}");
        assert_eq!(field(g, "leftover_mounts"), Some("0"), "{g}");
        if io == "sync" {
            // Device-loaded: the gadget's --load workers ran with it and
            // report what they achieved (the VM's one CPU is shared).
            let err = field(g, "stderr").unwrap_or_default();
            assert!(
                err.contains("load over") && err.contains("1 cpu") && err.contains("1 mem"),
                "the gadget's load report: {err}"
            );
            eprintln!("device-loaded gadget: {err}");
        }
        let doc: Value = serde_json::from_str(&json_block(g))
            .unwrap_or_else(|e| panic!("gadget JSON: {e}: {g}"));
        // A result as every verb's: the device end in `client`, an open
        // run (no -t) stopped by Ctrl-C still whole.
        common::validate_schema(&doc);
        assert_eq!(doc["status"], "ok", "{doc}");
        assert_eq!(doc["spec"]["limit"], "open", "{doc}");
        assert_eq!(doc["client"]["endpoint"], "server", "{doc}");
        let gv = &doc["client"]["transport"];
        assert_eq!(gv["kind"], "usb_gadget", "{doc}");
        assert_eq!(gv["io"], io);
        assert!(gv["in"]["bytes"].as_u64().unwrap() > 0, "{gv}");
        assert!(gv["out"]["bytes"].as_u64().unwrap() > 0, "{gv}");
        assert_eq!(
            gv["out"]["pattern_errors"], 0,
            "the host's OUT data follows the pattern: {gv}"
        );
        // IN (s2c) and OUT (c2s) as flows, from the same counters.
        let flows = doc["client"]["flows"].as_array().unwrap();
        assert_eq!(flows.len(), 2, "{doc}");
        assert_eq!(flows[0]["total"]["bytes"], gv["in"]["bytes"], "{doc}");
        assert_eq!(flows[1]["total"]["bytes"], gv["out"]["bytes"], "{doc}");
    }
    // The kernel SourceSink set up by `xferlab usb gadget --function sourcesink -t 8`.
    let ssg = cell(&r.out, "ss-gadget-both");
    assert_eq!(ssg.rc, 0, "{}", ssg.stderr);
    let v = ssg.json.unwrap();
    assert_eq!(
        v["client"]["transport"]["device"]["product"],
        "xferlab Gadget Zero (SourceSink)"
    );
    assert_eq!(v["client"]["flows"].as_array().unwrap().len(), 2);
    let exit = section(&r.out, "ss-gadget-exit");
    assert_eq!(
        field(exit, "rc"),
        Some("0"),
        "-t ends the gadget cleanly: {exit}"
    );
    assert_eq!(field(exit, "leftover_configfs"), Some("0"), "{exit}");

    let left = section(&r.out, "gadget-leftover");
    assert_eq!(field(left, "rc"), Some("1"), "{left}");
    assert!(
        field(left, "stderr").unwrap().contains("--cleanup"),
        "{left}"
    );
    assert_eq!(field(left, "cleanup_rc"), Some("0"), "{left}");
    assert_eq!(field(left, "leftover_configfs"), Some("0"), "{left}");
    assert_eq!(field(left, "leftover_mounts"), Some("0"), "{left}");

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
        ok.json.unwrap()["client"]["transport"]["pipes"][0]["max_packet"],
        1024
    );
    assert_no_qemu_left();
}

fn faults<'a>(v: &'a Value, trial: usize, dir: &str, kind: &str) -> &'a Value {
    &v["runs"][0]["trials"][trial]["device"][dir][kind]
}

/// `xferlab usb cbr` against xferlab's fixed-rate FunctionFS device, one
/// boot (lab/vm/guest/usb-cbr-tests.sh): a slow rate passes with no
/// overrun or underrun in RX, TX and both; a stalling host application
/// makes overruns (RX) and underruns (TX) at the stalls' times; the
/// study's ladder finds a highest rate in each of 5 runs.
#[test]
#[cfg_attr(labvm_skip, ignore = "XFERLAB_LABVM=skip: boots the lab VM (QEMU)")]
fn fixed_rate_streaming_against_the_fixed_rate_gadget() {
    let _vm = vm_lock();
    let script =
        std::fs::read_to_string(repo_root().join("lab/vm/guest/usb-cbr-tests.sh")).unwrap();
    let usb_sh = repo_root().join("lab/vm/guest/usb.sh");
    let add = format!("{}:/work/usb.sh", usb_sh.display());
    // The ladder's claim (every run sustains at least its lowest rung)
    // depends on the guest keeping time: under TCG a hypervisor burst
    // stalls the guest's reader for hundreds of ms (seen in a full-suite
    // run, 2026-11-29: one run overran at 4 MB/s, its 1 MiB buffer full at
    // 0.26 s). Such a run is retried only when the host's own steal
    // counter says the hypervisor took the time.
    let last = std::cell::RefCell::new(None);
    common::unless_the_host_stole(|| {
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
        let missed = (r.code == 0)
            .then(|| cell(&r.out, "ladder"))
            .filter(|c| c.rc != 0)
            .map(|c| {
                format!(
                    "ladder: a run sustained no rate (rc {}): {}",
                    c.rc, c.stderr
                )
            });
        *last.borrow_mut() = Some(r);
        missed
    });
    let r = last.into_inner().expect("an attempt ran");
    assert_eq!(r.code, 0, "guest script failed");

    for (name, dirs) in [
        ("rx-slow", &["rx"][..]),
        ("tx-slow", &["tx"][..]),
        ("both-slow", &["rx", "tx"][..]),
    ] {
        let c = cell(&r.out, name);
        assert_eq!(c.rc, 0, "{name}: {}", c.stderr);
        let v = c.json.unwrap_or_else(|| panic!("{name}: no JSON"));
        assert_eq!(v["schema"], "xferlab.cbr/1");
        assert_eq!(v["transport"], "usb");
        let t = &v["runs"][0]["trials"][0];
        assert_eq!(t["sustained"], true, "{name}: {t}");
        assert_eq!(
            (t["overruns"].as_u64(), t["underruns"].as_u64()),
            (Some(0), Some(0))
        );
        assert_eq!(t["rate_bytes_per_s"], 2_000_000);
        for d in dirs {
            let dev = &t["device"][*d];
            // 2 MB/s in 4-byte samples for about the trial's seconds. The
            // device's clock runs until the host's stop reaches it, a
            // little after the host's own count ends: 23 ms (1.1 % of a
            // 2 s trial) in a full-suite run on a Firecracker host whose
            // hypervisor was taking 3-33 % of busy CPU time that hour
            // (2026-11-28). A clock running fast (a rate bug) would still
            // overshoot the 5 % allowed here.
            let due = dev["samples_due"].as_f64().unwrap();
            let secs = t["seconds"].as_f64().unwrap();
            assert!(
                due > 0.8 * 500_000.0 * secs && due <= 1.05 * 500_000.0 * secs,
                "{name} {d}: {dev}"
            );
            let host = t["host"][*d]["bytes"].as_f64().unwrap();
            assert!(
                host > 0.8 * 2e6 * secs,
                "{name} {d}: host moved {host} B in {secs} s"
            );
        }
        let sum = t["host_bytes_per_s"].as_f64().unwrap();
        assert!(
            sum > 0.8 * 2e6 * dirs.len() as f64,
            "{name}: both directions are summed: {sum}"
        );
        assert_eq!(v["summary"]["max"], 16_000_000, "bit/s, as cbr -J");
    }

    for (name, dir, kind) in [
        ("rx-stall", "rx", "overruns"),
        ("tx-stall", "tx", "underruns"),
    ] {
        let c = cell(&r.out, name);
        assert_eq!(c.rc, 1, "{name}: not sustained: {}", c.stderr);
        let v = c.json.unwrap_or_else(|| panic!("{name}: no JSON"));
        let t = &v["runs"][0]["trials"][0];
        assert_eq!(t["sustained"], false, "{name}");
        assert!(
            t["reason"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{kind} ")),
            "{name}: {t}"
        );
        let f = faults(&v, 0, dir, kind);
        assert!(f["samples"].as_u64().unwrap() > 10_000, "{name}: {f}");
        // Stalls of 300 ms from 1 s and 2 s after the host started; the
        // buffers (device 64K, host 4 x 16K) last 32 ms at 4 MB/s.
        let first: Vec<f64> = f["first_s"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        eprintln!(
            "{name}: {kind} {} in {} episodes at {first:?} s",
            f["samples"], f["episodes"]
        );
        // Each stall shows as an episode starting with it. A loaded host
        // (TCG beside other work) may add short episodes of its own
        // before the first stall (seen: TX underruns at 0.12-0.54 s with
        // builds running), so the stalls are looked for, not counted.
        assert!(
            first.iter().any(|&s| (0.9..1.4).contains(&s)),
            "{name}: the first stall shows: {first:?}"
        );
        assert!(
            first.iter().any(|&s| (1.9..2.4).contains(&s)),
            "{name}: the second stall shows too: {first:?}"
        );
        assert!(
            t["host"][dir]["stalls"].as_u64().unwrap() >= 2,
            "{name}: {t}"
        );
    }

    let c = cell(&r.out, "ladder");
    let v = c
        .json
        .unwrap_or_else(|| panic!("ladder: no JSON: {}", c.stderr));
    let bests: Vec<Option<u64>> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["best_bytes_per_s"].as_u64())
        .collect();
    eprintln!(
        "ladder, highest sustained rate per run (bytes/s): {bests:?}; summary {}",
        v["summary_bytes_per_s"]
    );
    assert_eq!(bests.len(), 5);
    assert_eq!(v["usb"]["depth"], 16, "--host-buffer 1M of -l 64K");
    assert_eq!(c.rc, 0, "every run sustains a rate: {bests:?} {}", c.stderr);
    assert!(bests.iter().all(|b| b.is_some_and(|b| b >= 4_000_000)));
    let s = &v["summary_bytes_per_s"];
    assert_eq!(s["max"].as_u64(), bests.iter().flatten().max().copied());
    assert_eq!(v["summary"]["runs"], 5);
    let mode = bests
        .iter()
        .map(|b| bests.iter().filter(|c| *c == b).count())
        .max()
        .unwrap();
    std::fs::write(
        repo_root().join("target/usb-cbr-ladder.txt"),
        format!("{bests:?}: the same highest rate in {mode} of 5 runs\n"),
    )
    .ok();
    eprintln!("ladder: the same highest rate in {mode} of 5 runs");

    let human = section(&r.out, "human");
    assert_eq!(field(human, "rc"), Some("0"), "{human}");
    for needle in [
        "RX+TX",
        "-> sustained",
        "constant rate sustained",
        "1.00 MB/s",
    ] {
        assert!(human.contains(needle), "missing `{needle}`: {human}");
    }
    let g = section(&r.out, "gadget");
    assert_eq!(field(g, "rc"), Some("130"), "{g}");
    assert_eq!(field(g, "leftover_configfs"), Some("0"), "{g}");

    let n = section(&r.out, "not-cbr");
    assert_eq!(field(n, "rc"), Some("1"), "{n}");
    let err = field(n, "stderr").unwrap();
    assert!(
        err.contains("fixed-rate") && err.contains("xferlab usb gadget --function cbr"),
        "{err}"
    );
    assert_no_qemu_left();
}
