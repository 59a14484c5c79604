//! The byte-stream data path's choices, end to end: the write and read
//! sizes each end takes from this machine's calibration, iperf3's 128 KiB
//! without one, or -l and --read-size; `xferlab calibrate`; the
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

/// A file of its own for one test, removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str) -> TempFile {
        TempFile(std::env::temp_dir().join(format!(
            "xferlab-data-path-{name}-{}.json",
            std::process::id()
        )))
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temp path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn without_a_calibration_flows_write_and_read_iperf3_s_128k() {
    let v = embedded(&["-n", "8M", "-R"], &[]);
    assert!(v["spec"]["knobs"].get("write_size").is_none(), "no -l");
    let w = sender_socket(&v);
    assert_eq!(u64_at(w, "/write_size"), 128 << 10);
    assert_eq!(w["write_size_from"], "default");
    let (side, s) = receiver(&v);
    assert_eq!(side, "client", "-R: the client receives");
    assert_eq!(u64_at(s, "/read_size"), 128 << 10);
    assert_eq!(s["read_size_from"], "default");
    assert_eq!(u64_at(s, "/rcvlowat"), 0, "no wake-up batching by default");
    // One flow fills its 128K buffer while a CPU is to spare.
    assert_eq!(s["read_fill"], usable_cpus() > 1, "{s}");
    for side in ["client", "server"] {
        assert!(v[side]["host"].get("size_calibration").is_none());
    }
    assert!(!v["client"]["host"]["cpu_model"]
        .as_str()
        .unwrap_or("")
        .is_empty());
    assert_eq!(u64_at(&v, "/summary/directions/0/receiver/bytes"), 8 << 20);
}

/// A calibration for this machine (keyed as the binary keys it, from an
/// uncalibrated run's host section) sets both ends' sizes, alone and
/// crowded, and the result says so; one for another kernel is ignored.
#[test]
fn a_calibration_of_this_machine_sets_the_sizes_and_is_reported() {
    let host = embedded(&["-n", "1M"], &[])["client"]["host"].clone();
    let entry = |kernel: &Value| {
        serde_json::json!({
            "measured_unix_s": 1_800_000_000u64,
            "cpu_model": host["cpu_model"].as_str().unwrap_or(""),
            "kernel": kernel,
            "l2": host["caches"]["l2"],
            "cpus": usable_cpus(),
            "alone": {"write_size": 384 << 10, "read_size": 192 << 10, "read_fill": false,
                      "bps": 3e10, "default_bps": 2e10},
            "crowded": {"write_size": 96 << 10, "read_size": 64 << 10, "read_fill": true,
                        "bps": 3e10, "default_bps": 2e10},
        })
    };
    let file = TempFile::new("calibrated");
    let write = |machines: Vec<Value>| {
        let doc = serde_json::json!({"schema": "xferlab.calibration/1", "machines": machines});
        std::fs::write(&file.0, doc.to_string()).unwrap();
    };
    write(vec![
        entry(&serde_json::json!("Linux 0.01")),
        entry(&host["kernel"]),
    ]);
    let env = [("XFERLAB_CALIBRATION", file.path())];
    let v = embedded(&["-n", "8M"], &env);
    let w = sender_socket(&v);
    let (_, s) = receiver(&v);
    let alone = if usable_cpus() > 1 {
        (384 << 10, 192 << 10, false)
    } else {
        // One CPU: one flow is crowded already.
        (96 << 10, 64 << 10, true)
    };
    assert_eq!(
        (
            u64_at(w, "/write_size"),
            u64_at(s, "/read_size"),
            s["read_fill"].as_bool().unwrap()
        ),
        alone
    );
    assert_eq!(w["write_size_from"], "calibrated");
    assert_eq!(s["read_size_from"], "calibrated");
    assert_eq!(
        v["client"]["host"]["size_calibration"]["kernel"], host["kernel"],
        "the result carries the entry it used"
    );
    let p = usable_cpus().to_string();
    let v = embedded(&["-n", "8M", "-P", &p, "-l", "40K"], &env);
    for f in flows(&v, "client").iter().filter(|f| f["role"] == "sender") {
        assert_eq!(u64_at(&f["socket"], "/write_size"), 40 << 10, "-l wins");
        assert_eq!(f["socket"]["write_size_from"], "option");
    }
    let (_, s) = receiver(&v);
    assert_eq!(u64_at(s, "/read_size"), 64 << 10, "crowded: its own choice");
    assert_eq!(s["read_fill"], true);
    // Datagram flows take no byte-stream sizes: no calibration to report.
    let v = embedded(&["-u", "-t", "0.3"], &env);
    for side in ["client", "server"] {
        assert!(v[side]["host"].get("size_calibration").is_none(), "{side}");
    }
    // Another kernel's entry alone: not this machine's.
    write(vec![entry(&serde_json::json!("Linux 0.01"))]);
    let v = embedded(&["-n", "1M"], &env);
    assert_eq!(sender_socket(&v)["write_size_from"], "default");
    assert!(v["client"]["host"].get("size_calibration").is_none());
}

/// `xferlab calibrate` measures, writes this machine's entry, shows and
/// forgets it; a damaged file stops every verb with one line.
#[test]
fn calibrate_measures_stores_shows_and_forgets_and_a_bad_file_is_named() {
    let file = TempFile::new("calibrate");
    let env = [("XFERLAB_CALIBRATION", file.path())];
    let out = Proc::spawn_env(&["calibrate", "-J", "-t", "0.1", "--rounds", "1"], &env)
        .finish(deadline_for(60.0));
    out.assert_success();
    let v = parse_json(&out);
    assert_eq!(v["schema"], "xferlab.calibrate/1");
    let cases = v["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), if usable_cpus() > 1 { 2 } else { 1 });
    for case in cases {
        let stages = case["stages"].as_array().unwrap();
        assert_eq!(stages[0].as_array().unwrap().len(), 5, "five write sizes");
        for c in stages.iter().flat_map(|s| s.as_array().unwrap()) {
            assert!(c["median_bps"].as_f64().unwrap() > 0.0, "{c}");
        }
        assert!(!case["reason"].as_str().unwrap().is_empty());
    }
    let stored: Value = serde_json::from_str(&std::fs::read_to_string(&file.0).unwrap()).unwrap();
    assert_eq!(stored["machines"][0], v["calibration"]);
    // Whatever it chose, the next test here uses it (one flow: `alone`,
    // or on one CPU the only case measured).
    let t = embedded(&["-n", "1M"], &env);
    assert_eq!(
        u64_at(sender_socket(&t), "/write_size"),
        u64_at(&v["calibration"], "/alone/write_size")
    );
    let off = Proc::spawn_env(&["calibrate", "--show", "-J"], &[]).finish(deadline_for(2.0));
    off.assert_success();
    assert!(
        parse_json(&off)["calibration"].is_null(),
        "calibration off: none"
    );
    let shown = Proc::spawn_env(&["calibrate", "--show"], &env).finish(deadline_for(2.0));
    shown.assert_success();
    assert!(shown.stdout.contains("one flow"), "{}", shown.describe());
    let gone = Proc::spawn_env(&["calibrate", "--forget"], &env).finish(deadline_for(2.0));
    gone.assert_success();
    assert!(gone.stdout.contains("removed"), "{}", gone.describe());
    let t = embedded(&["-n", "1M"], &env);
    assert_eq!(sender_socket(&t)["write_size_from"], "default");
    std::fs::write(&file.0, "{\"schema\": 3").unwrap();
    Proc::spawn_env(&["stream", "-t", "0.2"], &env)
        .finish(deadline_for(1.0))
        .assert_one_line_failure(2, &["size calibration", "xferlab calibrate"]);
    // ... and `xferlab calibrate`, as that line says, replaces it.
    Proc::spawn_env(&["calibrate", "-t", "0.1", "--rounds", "1"], &env)
        .finish(deadline_for(60.0))
        .assert_success();
    let repaired: Value = serde_json::from_str(&std::fs::read_to_string(&file.0).unwrap()).unwrap();
    assert_eq!(repaired["schema"], "xferlab.calibration/1");
    assert_eq!(repaired["machines"].as_array().map(Vec::len), Some(1));
    embedded(&["-n", "1M"], &env);
    run(&["calibrate", "--rounds", "0"], deadline_for(1.0))
        .assert_one_line_failure(2, &["--rounds"]);
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
        &[],
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
fn tcp_data_path_options_are_refused_for_udp() {
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

/// A calibration file this user may not read (root's, seen by a program
/// run as another user with the same HOME) is not this user's: the test
/// runs with the default sizes, it does not stop.
#[test]
fn another_user_s_calibration_file_is_ignored() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let file = TempFile::new("root-only");
    std::fs::write(&file.0, "{}").unwrap();
    std::fs::set_permissions(&file.0, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_xferlab"));
    cmd.args(["stream", "-J", "-n", "1M"])
        .env("XFERLAB_CALIBRATION", file.path())
        .stdin(std::process::Stdio::null());
    // SAFETY: setuid/setgid in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = cmd.output().expect("run as nobody (the tests run as root)");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let v: Value = serde_json::from_slice(&o.stdout).expect("a JSON result");
    assert_eq!(sender_socket(&v)["write_size_from"], "default");
}
