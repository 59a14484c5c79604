//! Kernel USB network links in the lab VM (lab/vm/guest/usb-net-tests.sh):
//! a configfs ECM, EEM and NCM gadget on dummy_hcd, the host's class
//! driver (cdc_ether, cdc_eem, cdc_ncm), each end in its own network
//! namespace with link-local addresses, xferlab's TCP stream across (one
//! way, and both ways as in study 1), rr and cbr once, and `xferlab usb mon`
//! reading usbmon next to each stream. One boot for all three.
//! Checked: TCP crosses each link; usbmon's decoded frames and bytes agree
//! with the host interface's counters (the framing overhead is what the
//! USB bytes exceed the frame bytes by); ECM carries one frame per
//! transfer and NCM more than one under bulk TCP.

mod labvm_support;

use std::time::Duration;

use labvm_support::*;
use serde_json::Value;

const MODULES: &str =
    "dummy_hcd,libcomposite,usb_f_fs,usb_f_ecm,usb_f_eem,usb_f_ncm,cdc_ether,cdc_eem,cdc_ncm,usbmon,tun";

fn json_block(s: &str) -> Value {
    let mut out = Vec::new();
    for l in s.lines().skip_while(|l| *l != "{") {
        out.push(l);
        if l == "}" {
            break;
        }
    }
    serde_json::from_str(&out.join("\n")).unwrap_or_else(|e| panic!("no JSON ({e}) in: {s}"))
}

/// The client's flows' MB/s, summed; each flow must have moved data.
fn client_mbps(stream: &Value, name: &str) -> f64 {
    let mut mbps = 0.0;
    for f in stream["client"]["flows"].as_array().unwrap() {
        let t = &f["total"];
        let m = t["bytes"].as_f64().unwrap()
            / (t["end_s"].as_f64().unwrap() - t["start_s"].as_f64().unwrap())
            / 1e6;
        assert!(m > 0.0, "{name}: each flow moves data");
        mbps += m;
    }
    mbps
}

/// The guest measures a section once more when usbmon dropped events (a
/// loaded host took the reader's vCPU for longer than its ring holds); the
/// first try's drops are printed, and must come with the reader's lag of at
/// least a ring's worth: 1200 KiB hold over 20 ms of a high-speed bus.
fn first_try(mon: &str, name: &str) {
    let Some(t) = field(mon, "first_try_drops").filter(|t| !t.is_empty()) else {
        return;
    };
    let v: Vec<f64> = t
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    assert_eq!(v.len(), 2, "{name}: first_try_drops={t}");
    eprintln!(
        "{name}: first try: usbmon dropped {} events, reader up to {} ms behind; measured again",
        v[0], v[1]
    );
    assert!(
        v[0] > 0.0 && v[1] >= 10.0,
        "{name}: usbmon dropped {} events while its reader was only {} ms behind the bus",
        v[0],
        v[1]
    );
}

/// `rx_bytes rx_packets tx_bytes tx_packets`.
fn counters(s: &str, key: &str) -> [u64; 4] {
    let v: Vec<u64> = field(s, key)
        .unwrap_or_else(|| panic!("no {key} in {s}"))
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    [v[0], v[1], v[2], v[3]]
}

#[test]
#[cfg_attr(labvm_skip, ignore = "XFERLAB_LABVM=skip: boots the lab VM (QEMU)")]
fn tcp_over_the_kernel_ecm_eem_and_ncm_links_with_usbmon_accounting() {
    let _vm = vm_lock();
    let script =
        std::fs::read_to_string(repo_root().join("lab/vm/guest/usb-net-tests.sh")).unwrap();
    let g = repo_root().join("lab/vm/guest");
    let add1 = format!("{}:/work/usb.sh", g.join("usb.sh").display());
    let add2 = format!("{}:/work/usb-net.sh", g.join("usb-net.sh").display());
    let add3 = format!("{}:/work/raw_gadget.ko", lab_build("build-raw-gadget"));
    let r = run_vm(
        &[
            "--extra-modules",
            MODULES,
            "--add",
            &add1,
            "--add",
            &add2,
            "--add",
            &add3,
            "--timeout",
            "300",
            // usbmon's reader on a CPU of its own, as on a real host: on one
            // TCG CPU a saturated link in both directions overflows its ring.
            "--smp",
            "2",
        ],
        &script,
        Duration::from_secs(1200),
    );
    assert_eq!(r.code, 0, "guest script failed");
    let mut table = Vec::new();
    let mut kernel_ecm_fwd = 0.0;
    for (class, test) in ["ecm", "eem", "ncm"]
        .into_iter()
        .flat_map(|c| [(c, "fwd"), (c, "bidir")])
    {
        let s = section(&r.out, &format!("{class}-{test}"));
        assert_eq!(
            field(s, "rc"),
            Some("0"),
            "{class}: TCP across the link: {s}\nlink setup: {}",
            section(&r.out, &format!("{class}-start"))
        );
        let stream = json_block(s);
        assert_eq!(stream["status"], "ok", "{class}");
        let flows = stream["client"]["flows"].as_array().unwrap();
        assert_eq!(
            flows.len(),
            if test == "bidir" { 2 } else { 1 },
            "{class}-{test}"
        );
        let mut tcp_mbps = 0.0;
        let mut tcp_secs = 0.0f64;
        for f in flows {
            let tot = &f["total"];
            let secs = tot["end_s"].as_f64().unwrap() - tot["start_s"].as_f64().unwrap();
            let mbps = tot["bytes"].as_f64().unwrap() / secs / 1e6;
            assert!(mbps > 0.0, "{class}-{test}: each flow moves data");
            tcp_mbps += mbps;
            tcp_secs = tcp_secs.max(secs);
        }
        let before = counters(s, "host_before");
        let after = counters(s, "host_after");
        let (if_tx_bytes, if_tx_packets) = (after[2] - before[2], after[3] - before[3]);
        let (if_rx_bytes, if_rx_packets) = (after[0] - before[0], after[1] - before[1]);

        let m = section(&r.out, &format!("{class}-{test}-mon"));
        // Stopped by SIGINT: 130, as every verb (issue 33, D2); an open run
        // so stopped is still ok.
        assert_eq!(field(m, "rc"), Some("130"), "{class}: usb mon: {m}");
        first_try(m, &format!("{class}-{test}"));
        let mon = json_block(m);
        assert_eq!(mon["schema"], "xferlab.result/2", "{class}: {mon}");
        assert_eq!(mon["status"], "ok", "{class}: usb mon: {m}");
        assert_eq!(mon["spec"]["limit"], "open", "{class}");
        // The bus's two directions are the result's flows.
        assert_eq!(
            mon["client"]["flows"][0]["total"]["bytes_all"],
            mon["usbmon"]["host_out"]["total"]["bytes"],
            "{class}: host OUT flow = bus OUT bytes"
        );
        let u = &mon["usbmon"];
        assert_eq!(u["encap"], class);
        assert_eq!(u["speed"], "high");
        assert_eq!(u["capacity_bytes_per_second"], 53_248_000.0);
        assert_eq!(u["knobs"]["class"], class);
        assert!(
            u["knobs"]["mtu"].is_string() && u["knobs"]["qmult"].is_string(),
            "{u}"
        );
        if class == "ncm" {
            for k in ["tx_max", "rx_max", "tx_timer_usecs", "min_tx_pkt"] {
                assert!(u["knobs"][k].is_string(), "ncm knob {k}: {u}");
            }
        }
        let out = &u["host_out"]["total"];
        let inn = &u["host_in"]["total"];
        assert!(!u["host_out"]["intervals"].as_array().unwrap().is_empty());
        let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
        // usbmon's reader has a CPU of its own, but the host runs other
        // work too: a full ring is rare (1 event in ~60,000 seen under a
        // loaded host, 9 in 7,352 once with two compilers beside the TCG
        // guest, none in 12 sections with a busy loop beside it), counted,
        // and must stay rare in the try that counts: at most 1 in 200.
        let dropped = u["dropped_events"].as_u64().unwrap();
        assert_eq!(u["ring_bytes"], 1200 * 1024, "{u}");
        let lag = u["reader_lag_max_ms"].as_f64().unwrap();
        assert!(lag >= 0.0, "{u}");
        let events = 2 * (n(out, "transfers") + n(inn, "transfers"));
        assert!(
            dropped * 200 <= events,
            "{class}: usbmon dropped {dropped} of {events} events"
        );
        // Every transfer decodes (one whose submission event was dropped
        // has no data to decode).
        assert!(n(out, "undecoded") <= dropped, "{class}: OUT: {out}");
        assert!(n(inn, "undecoded") <= dropped, "{class}: IN: {inn}");
        // Frames: usbmon decoded what the host interface counted (the
        // counters bracket the usbmon window, so they may hold a few more:
        // IPv6 neighbour traffic; and a dropped event's transfer, up to 16
        // frames, is not decoded).
        for (what, usb, iface) in [
            ("OUT frames", n(out, "frames"), if_tx_packets),
            ("IN frames", n(inn, "frames"), if_rx_packets),
        ] {
            assert!(
                usb <= iface && iface - usb <= 10 + iface / 100 + 16 * dropped,
                "{class} {what}: usbmon {usb}, interface {iface}"
            );
        }
        // Bytes: frame bytes agree with the interface within Ethernet
        // header accounting; USB bytes exceed them by the framing only.
        let (usb_out, frames_out_bytes) = (n(out, "bytes"), n(out, "frame_bytes"));
        let (usb_in, frames_in_bytes) = (n(inn, "bytes"), n(inn, "frame_bytes"));
        // NCM senders pad large NTBs to the full NTB size: cdc_ncm those
        // above min_tx_pkt to tx_max, f_ncm those above 1536 B to 16 KiB.
        let knob = |k: &str| -> u64 {
            u["knobs"][k]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let pad_out = knob("tx_max").saturating_sub(knob("min_tx_pkt"));
        let pad_in = 16384 - 1536;
        let overhead = |usb: u64, fb: u64, frames: u64, transfers: u64, pad: u64| {
            assert!(usb >= fb);
            let (per_frame, per_transfer) = match class {
                "ecm" => (0, 0),
                "eem" => (6, 2),
                // An NDP entry and the divisor's padding; NTH, NDP, end entry, pad byte.
                _ => (4 + 3, 12 + 3 + 8 + 4 + 1 + pad),
            };
            assert!(
                usb - fb <= frames * per_frame + transfers * per_transfer,
                "{class}: USB bytes {usb} exceed frame bytes {fb} by more than the framing \
                 ({frames} frames, {transfers} transfers)"
            );
        };
        overhead(
            usb_out,
            frames_out_bytes,
            n(out, "frames"),
            n(out, "transfers"),
            pad_out,
        );
        overhead(
            usb_in,
            frames_in_bytes,
            n(inn, "frames"),
            n(inn, "transfers"),
            pad_in,
        );
        for (what, fb, iface, frames) in [
            ("OUT", frames_out_bytes, if_tx_bytes, n(out, "frames")),
            ("IN", frames_in_bytes, if_rx_bytes, n(inn, "frames")),
        ] {
            // usbnet counts a frame's bytes with or without its 14-byte
            // header (and cdc_eem's TX with its EEM framing): allow that much.
            // A transfer whose completion usbmon dropped (ring full) takes
            // up to an NTB's worth with it.
            let slack = frames * 20 + 2000 + iface / 100 + dropped * 32768;
            assert!(
                fb.abs_diff(iface) <= slack,
                "{class} {what}: usbmon frame bytes {fb}, interface bytes {iface}"
            );
        }
        let fpt = out["frames_per_transfer"].as_f64().unwrap();
        let fpt_in = inn["frames_per_transfer"].as_f64().unwrap();
        match class {
            "ecm" => {
                assert_eq!(fpt, 1.0, "ECM: one frame per transfer OUT");
                assert_eq!(fpt_in, 1.0, "ECM IN");
            }
            "ncm" if test == "fwd" => {
                assert!(fpt > 1.0, "NCM under bulk TCP packs frames: {fpt}")
            }
            _ => {}
        }
        // USB rates over the TCP test's span (usbmon's window is longer).
        let usb_rate = |bytes: u64| bytes as f64 / tcp_secs / 1e6;
        if (class, test) == ("ecm", "fwd") {
            kernel_ecm_fwd = tcp_mbps;
        }
        let line = format!(
            "{class} {test}: TCP {tcp_mbps:.2} MB/s; USB OUT {:.2} MB/s ({:.1}% of 53.248 MB/s), {fpt:.2} frames/transfer; \
             IN {:.2} MB/s ({:.1}%), {fpt_in:.2} frames/transfer; usbmon dropped {dropped} of {events} events, \
             reader up to {lag:.1} ms behind",
            usb_rate(usb_out),
            usb_rate(usb_out) / 53.248 * 100.0,
            usb_rate(usb_in),
            usb_rate(usb_in) / 53.248 * 100.0,
        );
        eprintln!("{line}");
        table.push(line);
    }
    std::fs::write(
        repo_root().join("target/usb-net-kernel.txt"),
        table.join("\n") + "\n",
    )
    .ok();
    // The other patterns across the NCM link: rr completes; cbr reports
    // (exit 1 is its verdict on loss or lateness under TCG, still a report).
    let s = section(&r.out, "ncm-rr");
    assert_eq!(field(s, "rc"), Some("0"), "ncm-rr: {s}");
    let rr = json_block(s);
    assert_eq!(rr["status"], "ok", "ncm-rr: {rr}");
    assert!(
        rr["summary"]["pattern"]["transactions"].as_u64() > Some(0),
        "ncm-rr: {rr}"
    );
    let s = section(&r.out, "ncm-cbr");
    assert!(matches!(field(s, "rc"), Some("0" | "1")), "ncm-cbr: {s}");
    assert_eq!(json_block(s)["schema"], "xferlab.cbr/1", "ncm-cbr: {s}");
    // `--usbmon` beside a stream: the bus figures inside its -o document.
    let s = section(&r.out, "ncm-usbmon");
    assert_eq!(field(s, "rc"), Some("0"), "ncm-usbmon: {s}");
    let doc = json_block(s);
    assert_eq!(doc["status"], "ok", "ncm-usbmon");
    let u = &doc["usbmon"];
    assert_eq!(u["encap"], "ncm", "{u}");
    let out = &u["host_out"]["total"];
    assert!(out["bytes"].as_u64().unwrap() > 100_000, "{out}");
    assert!(
        out["frames_per_transfer"].as_f64().unwrap() > 1.0,
        "NCM packs frames under bulk TCP: {out}"
    );
    assert!(!u["host_out"]["intervals"].as_array().unwrap().is_empty());
    // xferlab's own host side (usb net) against the kernel's gadgets:
    // verified data is TCP's own (a stream that completes moved every byte
    // in order); the frames-per-transfer limit shows in usbmon's histogram.
    let mut own = std::collections::HashMap::new();
    for (class, nf) in [("ecm", 1usize), ("eem", 1), ("eem", 6), ("ncm", 8)] {
        for test in ["fwd", "bidir"] {
            let name = format!("{class}-own-{nf}-{test}");
            let s = section(&r.out, &name);
            assert_eq!(
                field(s, "rc"),
                Some("0"),
                "{name}: TCP across xferlab's link: {s}\nlink setup: {}",
                section(&r.out, &format!("own-{class}-{nf}-start"))
            );
            let stream = json_block(s);
            assert_eq!(stream["status"], "ok", "{name}");
            let mbps = client_mbps(&stream, &name);
            let m = section(&r.out, &format!("{name}-mon"));
            first_try(m, &name);
            let mon = json_block(m);
            let out = &mon["usbmon"]["host_out"]["total"];
            assert_eq!(out["undecoded"], 0, "{name}: {out}");
            let hist = out["frames_per_transfer_hist"].as_array().unwrap();
            assert!(
                hist.len() <= nf + 1,
                "{name}: no OUT transfer holds more than {nf} frames: {hist:?}"
            );
            let fpt = out["frames_per_transfer"].as_f64().unwrap();
            if nf == 1 {
                // One frame per transfer; a frame whose length is a
                // multiple of 512 is ended by a zero-length packet, its
                // own transfer with no frame (1 in ~6,000 here).
                assert!((0.99..=1.0).contains(&fpt), "{name}: {fpt} {hist:?}");
            }
            let line = format!(
                "own {class} x{nf} {test}: TCP {mbps:.2} MB/s, OUT {fpt:.2} frames/transfer"
            );
            eprintln!("{line}");
            table.push(line);
            own.insert((class, nf, test), mbps);
        }
        let net = section(&r.out, &format!("own-{class}-{nf}-net"));
        // SIGINT ends the open run: 130, as every verb (issue 33, D2), and
        // the run is still ok.
        assert_eq!(
            field(net, "rc"),
            Some("130"),
            "usb net exits on SIGINT with 130: {net}"
        );
        let doc = json_block(net);
        assert_eq!(doc["status"], "ok", "{doc}");
        assert_eq!(doc["spec"]["limit"], "open", "{doc}");
        let v = &doc["client"]["transport"];
        assert_eq!(v["kind"], "usb_net", "{v}");
        // tx and rx are the result's flows, with the link's byte counts.
        assert_eq!(
            doc["client"]["flows"][0]["total"]["bytes_all"],
            v["tx"]["bytes"]
        );
        assert_eq!(
            doc["client"]["flows"][1]["total"]["bytes_all"],
            v["rx"]["bytes"]
        );
        // No -Q: as many transfers in flight as hold twice what usbnet
        // queues at high speed (60 x 1518 bytes per direction), by each
        // one's size.
        let (out_depth, in_depth) = match class {
            "ecm" => (120, 120),
            "eem" => (118, 120),
            _ => (11, 11),
        };
        assert_eq!(v["depth"]["from"], "twice_usbnet_queue_memory", "{v}");
        assert_eq!(v["depth"]["out"], out_depth, "{class}: {v}");
        assert_eq!(v["depth"]["in"], in_depth, "{class}: {v}");
        assert!(v["tx"]["frames"].as_u64().unwrap() > 0, "{v}");
        assert!(v["rx"]["decode"]["frames"].as_u64().unwrap() > 0, "{v}");
        assert_eq!(v["rx"]["decode"]["malformed"], 0, "{v}");
        assert_eq!(field(net, "taps"), Some("0"), "the TAP is gone: {net}");
        // cdc_ether and cdc_ncm hold two interfaces, cdc_eem one.
        let rebound: u32 = field(net, "rebound")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!(rebound >= 1, "the class driver is back: {net}");
    }
    let ratios = format!(
        "eem x6 / eem x1 (one stream): {:.2}; own ecm / kernel ecm (one stream): {:.2}",
        own[&("eem", 6, "fwd")] / own[&("eem", 1, "fwd")],
        own[&("ecm", 1, "fwd")] / kernel_ecm_fwd
    );
    eprintln!("{ratios}");
    table.push(ratios);
    // xferlab's gadget side: EEM against cdc_eem, NCM against xferlab's host.
    for (class, nf, host) in [("eem", 6usize, "kernel cdc_eem"), ("ncm", 8, "xferlab")] {
        for test in ["fwd", "bidir"] {
            let name = format!("{class}-gown-{nf}-{test}");
            let s = section(&r.out, &name);
            assert_eq!(field(s, "rc"), Some("0"), "{name}: TCP across: {s}");
            let stream = json_block(s);
            assert_eq!(stream["status"], "ok", "{name}");
            let mbps = client_mbps(&stream, &name);
            let m = section(&r.out, &format!("{name}-mon"));
            first_try(m, &name);
            let mon = json_block(m);
            // IN is what the gadget sent: the frames-per-transfer limit holds.
            let inn = &mon["usbmon"]["host_in"]["total"];
            assert_eq!(inn["undecoded"], 0, "{name}: {inn}");
            let hist = inn["frames_per_transfer_hist"].as_array().unwrap();
            assert!(
                hist.len() <= nf + 1,
                "{name}: no IN transfer holds more than {nf} frames: {hist:?}"
            );
            let fpt = inn["frames_per_transfer"].as_f64().unwrap();
            let line = format!(
                "gadget {class} x{nf} (host: {host}) {test}: TCP {mbps:.2} MB/s, IN {fpt:.2} frames/transfer"
            );
            eprintln!("{line}");
            table.push(line);
        }
    }
    let bad = section(&r.out, "gown-eem-6-bad");
    assert_eq!(
        field(bad, "rc"),
        Some("0"),
        "usb bulk wrote the bad stream: {bad}"
    );
    let g = section(&r.out, "gown-eem-6-gadget");
    // 130: ended by SIGINT, everything removed (a leftover would be 1).
    assert_eq!(
        field(g, "gadget_rc"),
        Some("130"),
        "the gadget exits cleanly on SIGINT: {g}"
    );
    assert_eq!(field(g, "taps"), Some("0"), "the TAP is gone: {g}");
    assert_eq!(field(g, "gadgets"), Some("0"), "the gadget is gone: {g}");
    let v = json_block(g);
    let net = &v["client"]["transport"]["net"];
    assert!(net["tx_frames"].as_u64().unwrap() > 0, "{v}");
    let dec = &net["rx_decode"];
    assert!(dec["frames"].as_u64().unwrap() > 0, "{v}");
    assert!(
        dec["malformed"].as_u64().unwrap() + dec["bad_crc"].as_u64().unwrap() > 0,
        "the malformed stream is counted: {dec}"
    );
    let k = section(&r.out, "gown-ncm-8-kill");
    assert_eq!(field(k, "gadget_rc"), Some("137"), "SIGKILL: {k}");
    assert_eq!(
        field(k, "taps"),
        Some("0"),
        "the TAP goes with the process: {k}"
    );
    assert_eq!(
        field(k, "gadgets_left"),
        Some("1"),
        "a killed gadget stays: {k}"
    );
    assert_eq!(field(k, "gadgets"), Some("0"), "--cleanup removes it: {k}");
    assert_eq!(
        field(k, "mounts"),
        Some("0"),
        "and its FunctionFS mount: {k}"
    );
    assert_eq!(
        field(k, "host_rc"),
        Some("0"),
        "usb net ends when the device goes: {k}"
    );
    // The same gadget side through raw-gadget, announcing real CDC
    // interfaces: the kernel's cdc_ncm, cdc_eem and cdc_ether hosts bind
    // it and TCP crosses both ways.
    assert!(
        !r.out.contains("== raw-missing =="),
        "the guest could not load raw_gadget.ko: {}",
        section(&r.out, "raw-missing")
    );
    for (class, nf, driver) in [
        ("ncm", 8usize, "cdc_ncm"),
        ("eem", 6, "cdc_eem"),
        ("ecm", 1, "cdc_ether"),
    ] {
        let start = section(&r.out, &format!("raw-{class}-{nf}-start"));
        assert_eq!(field(start, "hdrv"), Some(driver), "{class}: {start}");
        for test in ["fwd", "bidir"] {
            let name = format!("{class}-raw-{nf}-{test}");
            let s = section(&r.out, &name);
            assert_eq!(
                field(s, "rc"),
                Some("0"),
                "{name}: TCP across: {s}\nsetup: {start}"
            );
            let stream = json_block(s);
            assert_eq!(stream["status"], "ok", "{name}");
            let mbps = client_mbps(&stream, &name);
            let m = section(&r.out, &format!("{name}-mon"));
            first_try(m, &name);
            let mon = json_block(m);
            let inn = &mon["usbmon"]["host_in"]["total"];
            let out = &mon["usbmon"]["host_out"]["total"];
            assert_eq!(inn["undecoded"], 0, "{name}: {inn}");
            assert_eq!(out["undecoded"], 0, "{name}: {out}");
            let hist = inn["frames_per_transfer_hist"].as_array().unwrap();
            assert!(
                hist.len() <= nf + 1,
                "{name}: no IN transfer holds more than {nf} frames: {hist:?}"
            );
            let fpt = inn["frames_per_transfer"].as_f64().unwrap();
            let fpt_out = out["frames_per_transfer"].as_f64().unwrap();
            if class == "ecm" {
                assert!((0.99..=1.0).contains(&fpt), "{name}: {fpt} {hist:?}");
            } else if class == "ncm" && test == "bidir" {
                // Data one way and ACKs the other share NTBs both ways.
                assert!(
                    fpt > 1.0 && fpt_out > 1.0,
                    "{name}: IN {fpt}, OUT {fpt_out}"
                );
            }
            let line = format!(
                "raw-gadget {class} x{nf} (host: kernel {driver}) {test}: TCP {mbps:.2} MB/s, \
                 IN {fpt:.2} / OUT {fpt_out:.2} frames/transfer"
            );
            eprintln!("{line}");
            table.push(line);
        }
    }
    // EEM has no notification endpoint; its gadget still runs until SIGINT.
    let g = section(&r.out, "raw-eem-6-gadget");
    assert_eq!(field(g, "gadget_rc"), Some("130"), "SIGINT: {g}");
    assert_eq!(
        json_block(g)["client"]["transport"]["net"]["raw_gadget"]["notifications"],
        0,
        "{g}"
    );
    let g = section(&r.out, "raw-ncm-8-gadget");
    assert_eq!(field(g, "gadget_rc"), Some("130"), "SIGINT: {g}");
    let doc = json_block(g);
    let v = &doc["client"]["transport"];
    let rg = &v["net"]["raw_gadget"];
    assert_eq!(v["via"], "raw_gadget", "{v}");
    assert_eq!(
        rg["notifications"].as_u64().map(|n| n >= 2),
        Some(true),
        "{rg}"
    );
    assert_eq!(rg["control_errors"], 0, "{rg}");
    assert!(v["net"]["tx_frames"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["net"]["rx_decode"]["malformed"], 0, "{v}");
    let k = section(&r.out, "raw-ecm-1-kill");
    assert_eq!(field(k, "gadget_rc"), Some("137"), "SIGKILL: {k}");
    for (what, key) in [
        ("TAP", "taps"),
        ("configfs gadget", "gadgets_left"),
        ("host interface", "host_ifs"),
    ] {
        assert_eq!(
            field(k, key),
            Some("0"),
            "a killed raw-gadget device leaves no {what}: {k}"
        );
    }
    std::fs::write(
        repo_root().join("target/usb-net-kernel.txt"),
        table.join("\n") + "\n",
    )
    .ok();
    assert_eq!(field(section(&r.out, "leftover"), "gadgets"), Some("0"));
    assert_no_qemu_left();
}
