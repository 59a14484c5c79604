//! The byte-stream data path's choices, end to end: the write and read
//! sizes each end derives from its L2 cache (or takes from -l and
//! --read-size), the
//! copy-free send and receive modes, and how the result labels them. Real
//! binary, loopback, embedded server; never a speed.

mod common;

use common::*;
use serde_json::Value;

/// `xferlab stream -J ARGS` (embedded server) with `env`; the validated,
/// ok result.
fn embedded(args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut all = vec!["stream", "-J"];
    all.extend_from_slice(args);
    let out = Proc::spawn_env(&all, env).finish(deadline_for(2.0));
    out.assert_success();
    let v = parse_json(&out);
    validate_schema(&v);
    assert_ok(&v);
    v
}

/// The one receiving flow's socket settings, and its side.
fn receiver(v: &Value) -> (&'static str, &Value) {
    for side in ["client", "server"] {
        if let Some(f) = flows(v, side).iter().find(|f| f["role"] == "receiver") {
            return (side, &f["socket"]);
        }
    }
    panic!("no receiving flow in {v}");
}

fn sender_socket(v: &Value) -> &Value {
    ["client", "server"]
        .iter()
        .find_map(|side| flows(v, side).iter().find(|f| f["role"] == "sender"))
        .map(|f| &f["socket"])
        .expect("a sending flow")
}

/// The CPUs this test (and the binary it starts) may use.
fn usable_cpus() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

/// What a side running `flows` flows writes per call of an L2 of `l2`
/// bytes, and why: half of it with a core to itself, a quarter when its
/// flows are at least its CPUs.
fn expected_write(l2: u64, flows: u64) -> (u64, &'static str) {
    let clamp = |n: u64| (n & !4095).clamp(16 << 10, 16 << 20);
    if flows >= usable_cpus() {
        (clamp(l2 / 4), "l2_cache_shared")
    } else {
        (clamp(l2 / 2), "l2_cache")
    }
}

#[test]
fn senders_write_half_and_receivers_read_a_quarter_of_the_l2_they_are_told_of() {
    for (l2, read) in [("128K", 32 << 10), ("4M", 1 << 20)] {
        let v = embedded(&["-n", "8M"], &[("XFERLAB_L2_CACHE", l2)]);
        assert!(v["spec"]["knobs"].get("write_size").is_none(), "no -l");
        let w = sender_socket(&v);
        let (write, from) = expected_write(xferlab_core::units::parse_size(l2).unwrap(), 1);
        assert_eq!(u64_at(w, "/write_size"), write, "L2 {l2}");
        assert_eq!(w["write_size_from"], from, "L2 {l2}");
        let (side, s) = receiver(&v);
        assert_eq!(u64_at(s, "/read_size"), read, "L2 {l2}");
        assert_eq!(s["read_size_from"], "l2_cache", "L2 {l2}");
        assert_eq!(u64_at(s, "/rcvlowat"), 0, "no wake-up batching by default");
        // One flow: its reads fill a buffer of up to 128K while a CPU is
        // to spare; a larger one is read whole.
        assert_eq!(
            s["read_fill"],
            usable_cpus() > 1 && read <= 128 << 10,
            "{s}"
        );
        assert_eq!(v[side]["host"]["caches"]["l2_override"], true);
        assert_eq!(
            u64_at(&v[side]["host"]["caches"], "/l2"),
            xferlab_core::units::parse_size(l2).unwrap()
        );
        assert_eq!(u64_at(&v, "/summary/directions/0/receiver/bytes"), 8 << 20);
    }
}

/// As many flows as CPUs share the cores: each writes a quarter of L2,
/// and the result says why (`l2_cache_shared`); reads stay a quarter.
#[test]
fn a_flow_per_cpu_or_more_writes_a_quarter_of_l2() {
    let p = usable_cpus().to_string();
    let v = embedded(&["-n", "8M", "-P", &p], &[("XFERLAB_L2_CACHE", "1M")]);
    let mut senders = 0;
    for f in flows(&v, "client").iter().filter(|f| f["role"] == "sender") {
        assert_eq!(u64_at(&f["socket"], "/write_size"), 256 << 10, "{f}");
        assert_eq!(f["socket"]["write_size_from"], "l2_cache_shared", "{f}");
        senders += 1;
    }
    assert_eq!(senders, usable_cpus(), "one sender per flow");
    let (_, s) = receiver(&v);
    assert_eq!(u64_at(s, "/read_size"), 256 << 10);
    assert_eq!(
        s["read_fill"], false,
        "every read asks for the whole buffer"
    );
    assert_eq!(u64_at(&v, "/summary/directions/0/receiver/bytes"), 8 << 20);
}

#[test]
fn without_an_override_the_sysfs_l2_is_used_and_reported() {
    let v = embedded(&["-n", "4M", "-R"], &[]);
    let (side, s) = receiver(&v);
    assert_eq!(side, "client", "-R: the client receives");
    let caches = &v[side]["host"]["caches"];
    assert!(caches.get("l2_override").is_none(), "{caches}");
    let sysfs = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index2/size");
    match caches["l2"].as_u64() {
        Some(l2) => {
            assert_eq!(s["read_size_from"], "l2_cache");
            let want = ((l2 / 4) & !4095).clamp(16 << 10, 16 << 20);
            assert_eq!(u64_at(s, "/read_size"), want);
            let w = sender_socket(&v);
            let l2_server = u64_at(&v["server"]["host"]["caches"], "/l2");
            let (want, from) = expected_write(l2_server, 1);
            assert_eq!(w["write_size_from"], from);
            assert_eq!(u64_at(w, "/write_size"), want, "-R: the server sends");
            assert!(sysfs.is_ok(), "an L2 reported without sysfs saying so");
        }
        None => {
            assert_eq!(s["read_size_from"], "fallback");
            assert_eq!(u64_at(s, "/read_size"), 128 << 10);
        }
    }
    assert!(!v[side]["host"]["cpu_model"]
        .as_str()
        .unwrap_or("")
        .is_empty());
}

#[test]
fn length_read_size_rcvlowat_and_read_fill_options_win_and_are_recorded() {
    let v = embedded(
        &[
            "-n",
            "4M",
            "-l",
            "40K",
            "--read-size",
            "48K",
            "--rcvlowat",
            "1M",
            // One flow would fill its buffer on a machine of 2 CPUs or more.
            "--read-fill",
            "off",
        ],
        &[("XFERLAB_L2_CACHE", "4M")],
    );
    assert_eq!(u64_at(&v, "/spec/knobs/write_size"), 40 << 10);
    let w = sender_socket(&v);
    assert_eq!(u64_at(w, "/write_size"), 40 << 10);
    assert_eq!(w["write_size_from"], "option");
    assert_eq!(u64_at(&v, "/spec/knobs/read_size"), 48 << 10);
    let (_, s) = receiver(&v);
    assert_eq!(u64_at(s, "/read_size"), 48 << 10);
    assert_eq!(s["read_size_from"], "option");
    assert_eq!(u64_at(s, "/rcvlowat"), 48 << 10, "capped at one read");
    assert_eq!(s["read_fill"], false, "--read-fill off reaches the server");
    assert_eq!(v["spec"]["knobs"]["read_fill"], false);
}

#[test]
fn sendfile_and_msg_zerocopy_senders_deliver_every_byte_and_say_so() {
    for (flag, mode) in [
        (&["-Z"][..], "sendfile"),
        (&["--zerocopy", "sendfile"][..], "sendfile"),
        (&["--zerocopy", "msg"][..], "msg_zerocopy"),
    ] {
        let mut args = vec!["-n", "24M", "-l", "256K"];
        args.extend_from_slice(flag);
        let v = embedded(&args, &[]);
        assert_eq!(v["spec"]["knobs"]["send_mode"], mode, "{flag:?}");
        assert_eq!(sender_socket(&v)["send_mode"], mode, "{flag:?}");
        assert_eq!(
            u64_at(&v, "/summary/directions/0/receiver/bytes"),
            24 << 20,
            "{flag:?}"
        );
        assert_flows_agree(&v);
    }
    // The default is a plain write, labelled as such on the sender.
    let v = embedded(&["-n", "1M"], &[]);
    assert!(v["spec"]["knobs"].get("send_mode").is_none());
    assert_eq!(sender_socket(&v)["send_mode"], "copy");
}

#[test]
fn zerocopy_receive_delivers_every_byte_and_reports_the_share_mapped() {
    let v = embedded(&["-n", "24M", "--rx-zerocopy", "-R"], &[]);
    assert_eq!(v["spec"]["knobs"]["recv_mode"], "zerocopy");
    let (side, s) = receiver(&v);
    assert_eq!(s["recv_mode"], "zerocopy");
    assert_eq!(u64_at(&v, "/summary/directions/0/receiver/bytes"), 24 << 20);
    let warnings = v[side]["warnings"].to_string();
    assert!(
        warnings.contains("TCP_ZEROCOPY_RECEIVE mapped"),
        "{warnings}"
    );
}

#[test]
fn tcp_data_path_options_are_refused_for_udp_and_a_bad_l2_override_is_named() {
    for flag in [
        &["-Z"][..],
        &["--rx-zerocopy"][..],
        &["--read-size", "64K"][..],
        &["--rcvlowat", "64K"][..],
        &["--read-fill", "on"][..],
    ] {
        let mut args = vec!["stream", "-u", "-t", "0.2"];
        args.extend_from_slice(flag);
        run(&args, deadline_for(1.0)).assert_one_line_failure(2, &["tcp options"]);
    }
    run(
        &["stream", "--read-size", "0", "-t", "0.2"],
        deadline_for(1.0),
    )
    .assert_one_line_failure(2, &["--read-size"]);
    Proc::spawn_env(&["stream", "-t", "0.2"], &[("XFERLAB_L2_CACHE", "lots")])
        .finish(deadline_for(1.0))
        .assert_one_line_failure(2, &["XFERLAB_L2_CACHE", "cache size"]);
}

/// Each flow's CPU on each side, by flow id (None: not pinned).
fn flow_cpus(v: &Value, side: &str) -> Vec<(u64, Option<u64>)> {
    let mut out: Vec<_> = flows(v, side)
        .iter()
        .map(|f| (u64_at(f, "/id"), f["socket"]["cpu"].as_u64()))
        .collect();
    out.sort();
    out
}

/// `--pin-flows`: both ends pin flow i to the same CPU, the (i mod n)-th
/// of the n they may use, and say so in `socket.cpu`; -A wins for its
/// end; without either the scheduler places them, for datagram flows too.
#[test]
fn pinned_flows_share_a_cpu_at_both_ends() {
    let n = usable_cpus();
    let p = (2 * n).to_string();
    let v = embedded(&["-n", "8M", "-P", &p, "--pin-flows"], &[]);
    let (client, server) = (flow_cpus(&v, "client"), flow_cpus(&v, "server"));
    assert_eq!(client, server, "both ends of each flow on one CPU");
    assert_eq!(client.len() as u64, 2 * n);
    assert_eq!(v["spec"]["affinity"]["flows"], true);
    let cpus: Vec<u64> = client.iter().map(|(_, c)| c.expect("pinned")).collect();
    let first: std::collections::BTreeSet<_> = cpus[..n as usize].iter().collect();
    assert_eq!(first.len() as u64, n, "one CPU per flow: {cpus:?}");
    assert_eq!(
        cpus[..n as usize],
        cpus[n as usize..],
        "flow n wraps to flow 0's CPU"
    );

    let a = cpus[0].to_string();
    let v = embedded(&["-n", "8M", "-P", &p, "--pin-flows", "-A", &a], &[]);
    assert!(flow_cpus(&v, "client")
        .iter()
        .all(|(_, c)| *c == Some(cpus[0])));
    assert_eq!(
        flow_cpus(&v, "server")
            .iter()
            .map(|(_, c)| c.expect("pinned"))
            .collect::<Vec<_>>(),
        cpus,
        "the server still pins one CPU per flow"
    );

    let v = embedded(
        &["-u", "-b", "10M", "-t", "0.3", "-P", &p, "--pin-flows"],
        &[],
    );
    assert_eq!(flow_cpus(&v, "client"), flow_cpus(&v, "server"));
    assert!(flow_cpus(&v, "client").iter().all(|(_, c)| c.is_some()));
    for args in [
        &["-n", "8M", "-P", &p][..],
        &["-u", "-b", "10M", "-t", "0.3"][..],
    ] {
        let v = embedded(args, &[]);
        assert!(v["spec"].get("affinity").is_none(), "{args:?}");
        for side in ["client", "server"] {
            assert!(
                flow_cpus(&v, side).iter().all(|(_, c)| c.is_none()),
                "{args:?} {side}: {v}"
            );
        }
    }
}
