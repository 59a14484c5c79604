//! `xferlab lab`: namespaces joined by the userspace link emulator. These
//! tests need root (CI runs as root) and run one at a time: they measure
//! timing on a shared 2-core machine.

mod common;

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Runs `xferlab lab ARGS` (a -J test) and returns its validated result.
fn lab_json(args: &[&str], seconds: f64) -> (Value, Output) {
    let mut all = vec!["lab"];
    all.extend_from_slice(args);
    let out = run(&all, deadline_for(seconds + 5.0));
    assert!(!out.timed_out, "lab hung\n{}", out.describe());
    let v = parse_json(&out);
    validate_schema(&v);
    assert!(v.get("lab").is_some(), "no lab section\n{}", out.describe());
    assert_no_leftovers_of(out_pid(&v));
    (v, out)
}

/// The owner pid encoded in the result's namespace names.
fn out_pid(v: &Value) -> u32 {
    let ns = str_at(v, "/lab/topology/hosts/0/namespace");
    ns.strip_prefix("xferlab-")
        .and_then(|r| r.split('-').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("namespace name {ns} does not carry the owner pid"))
}

fn namespaces_of(pid: u32) -> Vec<String> {
    let prefix = format!("xferlab-{pid}-");
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// The network namespace inodes of the lab `pid` owns, read afresh: a
/// namespace's file exists a moment before the namespace is bind-mounted
/// on it, and read in that moment its inode is the empty file's (which
/// no process has; twice a full test run waited 30 s on it, "0 seen").
fn ns_inodes(pid: u32) -> HashSet<u64> {
    namespaces_of(pid)
        .iter()
        .filter_map(|n| std::fs::metadata(format!("/run/netns/{n}")).ok())
        .map(|m| m.ino())
        .collect()
}

/// Processes whose network namespace is one of `inodes`.
fn processes_in(inodes: &HashSet<u64>) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}/ns/net"))
                .map(|m| inodes.contains(&m.ino()))
                .unwrap_or(false)
        })
        .collect()
}

fn assert_no_leftovers_of(pid: u32) {
    let left = namespaces_of(pid);
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn counter(v: &Value, side: &str, key: &str) -> i64 {
    v[side]["counters"]["deltas"][key].as_i64().unwrap_or(0)
}

/// Two-sided 99 % binomial interval for n trials at p.
fn binomial99(n: f64, p: f64) -> (f64, f64) {
    let sd = (n * p * (1.0 - p)).sqrt();
    (n * p - 2.576 * sd - 0.5, n * p + 2.576 * sd + 0.5)
}

#[test]
fn hundred_megabit_twenty_ms_link_gives_ideal_goodput_and_rtt() {
    let _turn = one_at_a_time();
    let v = unless_the_host_took_the_time(|| {
        let (v, out) = lab_json(
            &[
                "--rate",
                "100M",
                "--delay",
                "10ms",
                "--allow-invalid",
                "stream",
                "-t",
                "3",
                "-O",
                "1",
                "-J",
            ],
            4.0,
        );
        assert_ok(&v);
        // IPv4 + TCP with timestamps: 1448 payload bytes per 1500-byte packet.
        let ideal = 100e6 * 1448.0 / 1500.0;
        let goodput = f64_at(&v, "/summary/directions/0/receiver/bits_per_second");
        let rtt = f64_at(&v, "/lab/accuracy/rtt_probe/median_us");
        // The shaper's own account: busy windows at the configured rate. A
        // bulk TCP flow that reaches the goodput above keeps the link busy
        // for whole seconds (2 or 3 windows in each of 5 runs), so there
        // are some. Departures held up by the hypervisor cost a window its
        // rate (the lab counts that as a timing miss too), so these are
        // retried like the goodput.
        let acc = &v["lab"]["accuracy"]["c2s"];
        let windows = u64_at(acc, "/rate_windows");
        // Null when no window was busy (checked first below).
        let (lo, hi) = (
            acc["rate_ratio_min"].as_f64().unwrap_or(f64::NAN),
            acc["rate_ratio_max"].as_f64().unwrap_or(f64::NAN),
        );
        let failed = if (goodput / ideal - 1.0).abs() > 0.05 {
            Some(format!(
                "goodput {:.2} Mbit/s, ideal {:.2} Mbit/s\n{}",
                goodput / 1e6,
                ideal / 1e6,
                out.describe()
            ))
        } else if (rtt - 20_000.0).abs() > 1000.0 {
            Some(format!("probe RTT {rtt} us, configured 20 ms"))
        } else if windows == 0 {
            Some(format!(
                "the shaper was never busy for 1 s of a 3 s bulk test: {acc}"
            ))
        } else if !(lo > 0.995 && hi < 1.005) {
            Some(format!("rate ratio {lo}..{hi}"))
        } else {
            None
        };
        (v, failed)
    });
    let acc = &v["lab"]["accuracy"]["c2s"];
    for dir in ["c2s", "s2c"] {
        let u = &v["lab"]["accuracy"][dir]["unintended_drops"];
        for k in [
            "tun_tx_dropped",
            "tun_rx_dropped",
            "buffer_exhausted",
            "write_errors",
        ] {
            assert_eq!(u[k], 0, "{dir} {k}\n{}", v["lab"]["accuracy"]);
        }
    }
    // The busy-wait was chosen from this machine's timer (--spin-us auto):
    // its p99 wake-up lateness, rounded up to 10 us, at most 200 us.
    let topo = &v["lab"]["topology"];
    let wake = &topo["timer_wakeup"];
    assert_eq!(topo["spin_auto"], true, "{topo}");
    assert_eq!(wake["samples"], 100, "{topo}");
    let p99 = f64_at(wake, "/p99_us");
    let spin = u64_at(topo, "/spin_us");
    assert!(
        spin.is_multiple_of(10) && spin <= 200 && (spin == 200 || spin as f64 >= p99),
        "spin {spin} us for a p99 wake-up of {p99} us"
    );
    let goodput = f64_at(&v, "/summary/directions/0/receiver/bits_per_second");
    let rtt = f64_at(&v, "/lab/accuracy/rtt_probe/median_us");
    eprintln!(
        "goodput {:.2} Mbit/s (ideal {:.2}), probe RTT {:.0} us, c2s lateness p50/p99 {}/{} us, \
         spin {spin} us (timer wake-ups p50 {} p99 {p99} us)",
        goodput / 1e6,
        100e6 * 1448.0 / 1500.0 / 1e6,
        rtt,
        acc["lateness_p50_us"],
        acc["lateness_p99_us"],
        wake["p50_us"]
    );
}

/// Study 3's setup in one command: background bulk flows and a reference
/// transaction flow across the emulated bottleneck. Every transaction
/// crosses the 20 ms round trip, so none may be shorter (this caught a
/// latency taken before a blocking read instead of after it).
#[test]
fn transactions_across_the_link_take_at_least_its_round_trip() {
    let _turn = one_at_a_time();
    let (v, out) = lab_json(
        &[
            "--rate",
            "50M",
            "--delay",
            "10ms",
            "--allow-invalid",
            "rr",
            "-t",
            "2",
            "--background",
            "2",
            "-J",
        ],
        3.0,
    );
    assert_ok(&v);
    let rr = &v["summary"]["pattern"];
    let lat = &rr["latency"];
    let min = f64_at(lat, "/min_us");
    let mean = f64_at(lat, "/mean_us");
    assert!(
        min >= 20_000.0,
        "a transaction took {min} us over a 20 ms RTT link
{rr}"
    );
    // Ping-pong: one transaction per mean latency, less the one still
    // under way when the test ended (uncounted; up to a mean latency of
    // the 2 s, which the bulk flows' queue makes ~100-250 ms).
    let per_second = f64_at(rr, "/per_second");
    let busy = per_second * mean / 1e6;
    let in_flight = mean / 1e6 / 2.0;
    assert!(
        busy < 1.1 && busy > 0.9 - in_flight,
        "{per_second} tx/s at a mean of {mean} us
{}",
        out.describe()
    );
    assert_eq!(rr["client_transactions_all"], rr["server_transactions_all"]);
    // The background group moved data through the same bottleneck.
    let bytes = u64_at(&v, "/summary/directions/0/receiver/bytes");
    assert!(bytes > 1_000_000, "background flows moved {bytes} bytes");
}

#[test]
fn bernoulli_loss_lands_in_the_binomial_interval() {
    let _turn = one_at_a_time();
    let (v, out) = lab_json(
        &[
            "--loss",
            "c2s:1%",
            "--seed",
            "7",
            "--allow-invalid",
            "stream",
            "-u",
            "-b",
            "40M",
            "-l",
            "1000",
            "-t",
            "2",
            "-J",
        ],
        2.0,
    );
    let udp = &v["summary"]["directions"][0]["udp"];
    let sent = udp["sent"].as_u64().unwrap() as f64;
    let lost = udp["network_lost"].as_u64().unwrap() as f64;
    assert!(sent > 5000.0, "too few datagrams: {sent}");
    let (lo, hi) = binomial99(sent, 0.01);
    assert!(
        lost >= lo && lost <= hi,
        "lost {lost} of {sent}, 99 % interval [{lo:.1}, {hi:.1}]\n{}",
        out.describe()
    );
    // The emulator's own count covers these datagrams plus control traffic.
    let k = &v["lab"]["accuracy"]["c2s"]["counters"];
    let dropped = k["dropped_loss_packets"].as_u64().unwrap() as f64;
    assert!(
        dropped >= lost,
        "emulator dropped {dropped}, receiver missed {lost}"
    );
    assert_eq!(k["dropped_queue_packets"], 0);
    assert_eq!(
        v["lab"]["accuracy"]["s2c"]["counters"]["dropped_loss_packets"],
        0
    );
    eprintln!("lost {lost} of {sent} datagrams (interval [{lo:.1}, {hi:.1}])");
}

/// QUIC across a lossy link: the sender's `quic` section counts the
/// packets the emulator dropped (no more than it dropped, and some), its
/// controller reacts, the RTT is the link's, every byte still arrives
/// (streams are reliable), and the sender's count follows the wire
/// (it ends with the test, not seconds of buffered bytes later).
#[test]
fn quic_counts_a_lossy_links_drops_and_delivers_every_byte() {
    let _turn = one_at_a_time();
    let (v, out) = lab_json(
        &[
            "--loss",
            "c2s:1%",
            "--seed",
            "7",
            "--rate",
            "100M",
            "--delay",
            "10ms",
            "--allow-invalid",
            "stream",
            "--quic",
            "-t",
            "2",
            "-J",
        ],
        2.0,
    );
    let flow = |side: &str| v[side]["flows"][0].clone();
    let (tx, rx) = (flow("client"), flow("server"));
    assert_eq!(tx["role"], "sender");
    let q = &tx["total"]["quic"];
    let lost = q["lost_packets"].as_u64().unwrap();
    let dropped = v["lab"]["accuracy"]["c2s"]["counters"]["dropped_loss_packets"]
        .as_u64()
        .unwrap();
    assert!(
        lost > 0 && lost <= dropped,
        "lost {lost}, emulator dropped {dropped}\n{q}"
    );
    assert!(q["congestion_events"].as_u64().unwrap() > 0, "{q}");
    // The link's 20 ms within the lab's own tolerance for it (its probe
    // marks a run invalid past +-1 ms): a CI run saw QUIC's minimum at
    // 19,743 us although the emulator departs nothing before it is due;
    // where the 257 us come from is not found yet (docs/quic.md).
    assert!(q["min_rtt_us"].as_f64().unwrap() >= 19_000.0, "{q}");
    assert_eq!(
        q["mtu"], 1472,
        "the link's MTU less IPv4 and UDP headers: {q}"
    );
    let sent = tx["total"]["bytes_all"].as_u64().unwrap();
    assert!(sent > 0);
    assert_eq!(
        rx["total"]["bytes_all"].as_u64().unwrap(),
        sent,
        "{}",
        out.describe()
    );
    let end = tx["total"]["end_s"].as_f64().unwrap();
    assert!(end < 3.0, "the sender ended {end} s into a 2 s test");
}

#[test]
fn ce_marks_one_in_twenty_reach_the_receiver_and_the_sender_reacts() {
    let _turn = one_at_a_time();
    let (v, out) = lab_json(
        &[
            "--rate",
            "50M",
            "--delay",
            "5ms",
            "--ecn",
            "on",
            "--mark",
            "c2s:1/20",
            "--allow-invalid",
            "stream",
            "-t",
            "2",
            "-J",
        ],
        2.0,
    );
    let acc = &v["lab"]["accuracy"]["c2s"];
    let marks = acc["counters"]["marked_packets"].as_u64().unwrap();
    let ect = acc["counters"]["arrived_ect_packets"].as_u64().unwrap() as f64;
    assert!(marks > 0, "no marks\n{}", out.describe());
    // Every mark the emulator applied was seen by the receiving host, and
    // xferlab's own server-side counter snapshot agrees.
    assert_eq!(acc["receiver_in_ce_pkts"].as_i64(), Some(marks as i64));
    // xferlab's own server-side snapshot brackets the test only (control
    // traffic before and after it can carry a mark or two).
    let server_seen = counter(&v, "server", "IpExt.InCEPkts");
    assert!(
        server_seen <= marks as i64 && server_seen >= marks as i64 - 3,
        "server snapshot saw {server_seen} CE packets, emulator marked {marks}"
    );
    let (lo, hi) = binomial99(ect, 0.05);
    assert!(
        (marks as f64) >= lo && (marks as f64) <= hi,
        "{marks} marks of {ect} ECT packets, interval [{lo:.1}, {hi:.1}]"
    );
    // The sender saw ECE: TCP_INFO's delivered_ce moved.
    let ce: u64 = flows(&v, "client")
        .iter()
        .filter(|f| f["role"] == "sender")
        .map(|f| f["total"]["tcp"]["delivered_ce"].as_u64().unwrap_or(0))
        .sum();
    assert!(ce > 0, "sender's delivered_ce did not move");
    let violations = v["lab"]["accuracy"]["violations"].to_string();
    assert!(!violations.contains("CE"), "{violations}");
    eprintln!(
        "{marks} CE marks of {ect} ECT packets; receiver InCEPkts {}; sender delivered_ce {ce}",
        acc["receiver_in_ce_pkts"]
    );
}

#[test]
fn ipv6_tests_cross_the_link_and_get_marked_too() {
    let _turn = one_at_a_time();
    let (v, out) = lab_json(
        &[
            "--rate",
            "50M",
            "--delay",
            "2ms",
            "--ecn",
            "on",
            "--mark",
            "c2s:1/20",
            "--no-probe",
            "--allow-invalid",
            "stream",
            "-6",
            "-t",
            "1",
            "-J",
        ],
        1.0,
    );
    assert_ok(&v);
    assert_eq!(str_at(&v, "/lab/topology/hosts/1/address6"), "fd77::2");
    assert!(
        str_at(&v, "/server_address").contains("fd77::2"),
        "{}",
        out.describe()
    );
    let marks = u64_at(&v, "/lab/accuracy/c2s/counters/marked_packets");
    assert!(marks > 0, "no marks on IPv6\n{}", out.describe());
    // Traffic-class CE marks reach the IPv6 stack as CE.
    assert_eq!(
        v["lab"]["accuracy"]["c2s"]["receiver_in_ce_pkts"].as_i64(),
        Some(marks as i64)
    );
    assert!(
        counter(&v, "server", "Ip6.InCEPkts") > 0,
        "{}",
        v["server"]["counters"]
    );
}

#[test]
fn a_router_namespace_forwards_between_the_link_and_the_server() {
    let _turn = one_at_a_time();
    for family in ["-4", "-6"] {
        let (v, out) = lab_json(
            &[
                "--router",
                "--rate",
                "50M",
                "--delay",
                "2ms",
                "--ecn",
                "on",
                "--mark",
                "c2s:1/20",
                "--allow-invalid",
                "stream",
                family,
                "-t",
                "1",
                "-J",
            ],
            1.0,
        );
        assert_ok(&v);
        let roles: Vec<&str> = (0..3)
            .map(|i| str_at(&v, &format!("/lab/topology/hosts/{i}/role")))
            .collect();
        assert_eq!(roles, ["client", "router", "server"]);
        let server = if family == "-4" {
            "10.77.1.2"
        } else {
            "fd77:0:0:1::2"
        };
        assert!(
            str_at(&v, "/server_address").contains(server),
            "{}",
            out.describe()
        );
        // Everything the link delivered to the router went on to the server
        // (give or take the router's own few IPv6 housekeeping packets).
        let link_out = u64_at(&v, "/lab/accuracy/c2s/counters/departed_packets");
        let hop_in = u64_at(&v, "/lab/accuracy/router_hop/c2s/counters/arrived_packets");
        assert!(
            hop_in > 1000 && hop_in.abs_diff(link_out) <= 20,
            "link {link_out}, router hop {hop_in}"
        );
        // Marks applied on the link arrive at the server behind the router.
        let marks = u64_at(&v, "/lab/accuracy/c2s/counters/marked_packets");
        assert!(marks > 0);
        assert_eq!(
            v["lab"]["accuracy"]["c2s"]["receiver_in_ce_pkts"].as_i64(),
            Some(marks as i64)
        );
        let violations = v["lab"]["accuracy"]["violations"].to_string();
        assert!(
            !violations.contains("unintended") && !violations.contains("CE"),
            "{violations}"
        );
    }
}

#[test]
fn tcp_sack_off_in_the_client_namespace_shows_in_its_recovery() {
    let _turn = one_at_a_time();
    let run_with = |sack: &str| {
        lab_json(
            &[
                "--rate",
                "50M",
                "--delay",
                "5ms",
                "--loss",
                "c2s:1%",
                "--no-probe",
                "--allow-invalid",
                "--client-sysctl",
                &format!("net.ipv4.tcp_sack={sack}"),
                "stream",
                "-t",
                "2",
                "-J",
            ],
            2.0,
        )
        .0
    };
    let off = run_with("0");
    assert_eq!(
        off["lab"]["topology"]["hosts"][0]["sysctls"]["net.ipv4.tcp_sack"],
        "0"
    );
    let on = run_with("1");
    let sack_recoveries = |v: &Value| counter(v, "client", "TcpExt.TCPSackRecovery");
    let reno_recoveries = |v: &Value| counter(v, "client", "TcpExt.TCPRenoRecovery");
    assert!(
        counter(&off, "client", "Tcp.RetransSegs") > 0,
        "no loss recovery at all"
    );
    assert_eq!(sack_recoveries(&off), 0, "SACK recovery with tcp_sack=0");
    assert_eq!(
        counter(&off, "server", "TcpExt.TCPSACKDiscard")
            + counter(&off, "client", "TcpExt.TCPSACKReorder"),
        0
    );
    assert!(
        reno_recoveries(&off) > 0,
        "no Reno recovery with tcp_sack=0: {}",
        off["client"]["counters"]
    );
    assert!(
        sack_recoveries(&on) > 0,
        "no SACK recovery with tcp_sack=1: {}",
        on["client"]["counters"]
    );
}

/// A lab's setup (namespaces, servers, then the tests' processes) takes
/// well under a second on a quiet machine; under a full build beside it
/// once took more than 10 s. The waits end as soon as the setup is done.
const SETUP_WAIT: Duration = Duration::from_secs(30);

#[test]
fn teardown_leaves_nothing_after_ctrl_c_or_sigkill_and_clean_spares_live_labs() {
    let _turn = one_at_a_time();
    // A lab interrupted with Ctrl-C cleans up after itself. It must still
    // run when `clean` comes, after B's and C's set-ups (up to SETUP_WAIT
    // each), so it is planned far longer than it runs.
    let mut a = Proc::spawn(&["lab", "--rate", "20M", "--no-probe", "stream", "-t", "120"]);
    wait_until("lab A's namespaces", SETUP_WAIT, || {
        namespaces_of(a.pid()).len() == 2
    });
    // A lab killed with SIGKILL leaves namespaces only; its processes die.
    let mut b = Proc::spawn(&["lab", "--rate", "20M", "--no-probe", "stream", "-t", "20"]);
    wait_until("lab B's namespaces", SETUP_WAIT, || {
        namespaces_of(b.pid()).len() == 2
    });
    let b_pid = b.pid();
    let mut inodes = HashSet::new();
    wait_until("lab B's server and client processes", SETUP_WAIT, || {
        inodes = ns_inodes(b_pid);
        processes_in(&inodes).len() >= 2
    });
    b.kill();
    wait_until("lab B's processes to die", Duration::from_secs(5), || {
        processes_in(&inodes).is_empty()
    });
    assert_eq!(
        namespaces_of(b_pid).len(),
        2,
        "SIGKILL leaves the namespace mounts for clean"
    );
    // A 3-host lab (two client hosts, two tests) killed the same way.
    let mut c = Proc::spawn(&[
        "lab",
        "--rate",
        "20M",
        "--no-probe",
        "--client",
        "a",
        "--client",
        "b",
        "@a",
        "stream",
        "-t",
        "20",
        "@b",
        "stream",
        "-t",
        "20",
    ]);
    wait_until("lab C's namespaces", SETUP_WAIT, || {
        namespaces_of(c.pid()).len() == 3
    });
    let c_pid = c.pid();
    let end = Instant::now() + SETUP_WAIT;
    let c_inodes = loop {
        let inodes = ns_inodes(c_pid);
        if processes_in(&inodes).len() >= 3 {
            break inodes;
        }
        assert!(
            Instant::now() < end,
            "timed out waiting for lab C's server and two client processes: {} seen\n{}",
            processes_in(&inodes).len(),
            c.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    c.kill();
    wait_until("lab C's processes to die", Duration::from_secs(5), || {
        processes_in(&c_inodes).is_empty()
    });
    assert_eq!(namespaces_of(c_pid).len(), 3);

    let out = run(&["lab", "clean"], Duration::from_secs(10));
    out.assert_success();
    assert!(
        namespaces_of(b_pid).is_empty(),
        "clean left {:?}\n{}",
        namespaces_of(b_pid),
        out.describe()
    );
    assert!(
        namespaces_of(c_pid).is_empty(),
        "clean left {:?}\n{}",
        namespaces_of(c_pid),
        out.describe()
    );
    assert_eq!(
        namespaces_of(a.pid()).len(),
        2,
        "clean removed a running lab's namespaces\n{}",
        out.describe()
    );

    let a_pid = a.pid();
    a.signal(libc::SIGINT);
    let out = a.finish(Duration::from_secs(15));
    assert!(!out.timed_out, "{}", out.describe());
    assert!(
        out.stdout.contains("Lab accuracy"),
        "interrupted lab still reports\n{}",
        out.describe()
    );
    assert_no_leftovers_of(a_pid);
}

#[test]
fn unintended_drops_make_the_run_invalid_loudly() {
    let _turn = one_at_a_time();
    // A one-packet TUN queue between the client's kernel and the emulator
    // overflows under a TCP burst: losses nobody configured.
    let out = run(
        &[
            "lab",
            "--offload",
            "off",
            "--txqueuelen",
            "1",
            "--no-probe",
            "stream",
            "-t",
            "1",
            "-J",
        ],
        deadline_for(6.0),
    );
    let v = parse_json(&out);
    validate_schema(&v);
    let acc = &v["lab"]["accuracy"];
    let tx_drops = u64_at(&v, "/lab/accuracy/c2s/unintended_drops/tun_tx_dropped");
    assert!(
        tx_drops > 0,
        "no TUN TX drops with txqueuelen 1\n{}",
        out.describe()
    );
    assert_eq!(acc["valid"], false);
    assert!(
        acc["violations"].to_string().contains("unintended"),
        "{}",
        acc["violations"]
    );
    assert_eq!(out.code, Some(1), "{}", out.describe());
    assert!(out.stderr.contains("LAB RUN INVALID"), "{}", out.describe());
    assert_no_leftovers_of(out_pid(&v));
}

#[test]
fn bad_input_and_missing_root_are_one_line_errors() {
    let out = run(
        &["lab", "--rate", "fast", "stream"],
        Duration::from_secs(10),
    );
    out.assert_one_line_failure(2, &["--rate", "rate"]);
    let out = run(&["lab", "stream", "10.0.0.1"], Duration::from_secs(10));
    out.assert_one_line_failure(2, &["HOST"]);
    let out = run(&["lab", "stream", "--bogus"], Duration::from_secs(10));
    out.assert_one_line_failure(2, &["--bogus"]);
    let out = run(&["lab"], Duration::from_secs(10));
    out.assert_one_line_failure(2, &["test to run"]);
    let out = run(&["lab", "--mark", "1/0", "stream"], Duration::from_secs(10));
    out.assert_one_line_failure(2, &["--mark", "probability"]);
    let out = run(&["lab", "server"], Duration::from_secs(10));
    out.assert_one_line_failure(2, &["verb"]);
    // As an unprivileged user: one line naming root, nothing created.
    let mut cmd = Command::new(BIN);
    cmd.args(["lab", "--rate", "10M", "stream", "-t", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
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
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("xferlab: ") && stderr.contains("root"),
        "{stderr}"
    );
}

#[test]
fn pcap_capture_holds_the_forwarded_packets() {
    let _turn = one_at_a_time();
    let dir = std::env::temp_dir().join(format!("xferlab-lab-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("cap");
    let (v, _) = lab_json(
        &[
            "--rate",
            "20M",
            "--no-probe",
            "--allow-invalid",
            "--pcap",
            prefix.to_str().unwrap(),
            "stream",
            "-u",
            "-b",
            "5M",
            "-t",
            "1",
            "-J",
        ],
        1.0,
    );
    for dir_name in ["c2s", "s2c"] {
        let bytes = std::fs::read(dir.join(format!("cap.{dir_name}.pcap"))).unwrap();
        assert_eq!(
            &bytes[..4],
            &0xa1b2_3c4du32.to_ne_bytes(),
            "pcap magic (ns)"
        );
        assert_eq!(
            u32::from_ne_bytes(bytes[20..24].try_into().unwrap()),
            101,
            "LINKTYPE_RAW"
        );
        // Walk the records: each starts an IPv4 packet.
        let (mut off, mut n) = (24usize, 0u64);
        while off + 16 <= bytes.len() {
            let caplen = u32::from_ne_bytes(bytes[off + 8..off + 12].try_into().unwrap()) as usize;
            assert!(
                matches!(bytes[off + 16] >> 4, 4 | 6),
                "record {n} is not an IP packet"
            );
            off += 16 + caplen;
            n += 1;
        }
        assert_eq!(off, bytes.len(), "truncated record");
        let departed = u64_at(
            &v,
            &format!("/lab/accuracy/{dir_name}/counters/departed_packets"),
        );
        assert_eq!(n, departed, "{dir_name}: every forwarded packet captured");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// DCCP with `--gso` over a 1 Gbit/s link: its trains cross the emulator
/// as UDP GSO superpackets (the TUN devices take UDP segmentation
/// offload), one read, departure and write for many datagrams, and the
/// receiver still gets every datagram, checked byte for byte.
#[test]
fn dccp_trains_cross_the_emulator_as_superpackets_and_arrive_checked() {
    let _turn = one_at_a_time();
    let (v, out) = lab_json(
        &[
            "--rate",
            "1G",
            "--offload",
            "on",
            "--no-probe",
            "--allow-invalid",
            "stream",
            "--dccp",
            "--gso",
            "-l",
            "1400",
            "-t",
            "2",
            "-J",
        ],
        2.0,
    );
    assert_eq!(v["status"], "ok", "{}", out.describe());
    assert_eq!(
        v["lab"]["topology"]["udp_offload"], true,
        "the result says UDP offload took"
    );
    let packets = u64_at(&v, "/lab/accuracy/c2s/counters/arrived_packets");
    let segments = u64_at(&v, "/lab/accuracy/c2s/counters/arrived_segments");
    assert!(
        segments >= 2 * packets,
        "{segments} datagrams in {packets} reads: no superpackets (a kernel before 6.2 has no UDP offload on TUN)"
    );
    let got = u64_at(&v, "/server/flows/0/total/dccp/data_received");
    assert!(got > 10_000, "{got} data packets received");
}

/// Bus time of one transfer the USB model predicts for a queued stream
/// (`xferlab model usb`), in microseconds.
fn usb_transfer_us(size: &str, dir: &str) -> f64 {
    let out = run(
        &[
            "model",
            "usb",
            "--profile",
            "study4",
            "-l",
            size,
            "-Q",
            "8",
            "--dir",
            dir,
            "-J",
            "-t",
            "0.1",
        ],
        Duration::from_secs(30),
    );
    let v = parse_json(&out);
    1e6 / f64_at(&v, "/transfers_per_s")
}

#[test]
fn usb_link_eem_packing_beats_one_frame_per_transfer_as_the_model_predicts() {
    let _turn = one_at_a_time();
    let goodput = |link: &str| {
        let (v, out) = lab_json(
            &["--usb-link", link, "stream", "-t", "4", "-O", "1", "-J"],
            5.0,
        );
        assert_ok(&v);
        // Every self-check but the timing ones (departure lateness, the
        // probe's RTT, and the host's share of the blame) must hold.
        // Timing is the host's timer: on a Firecracker guest (2026-11-27)
        // four runs back to back calibrated timer wake-ups at p99 89, 765,
        // 1315 and 2505 us and departed p99 0.26-5.2 ms late, while EEM x6
        // goodput stayed within 173.3-174.6 Mbit/s; the ratio below is the
        // claim.
        assert_eq!(
            v["lab"]["accuracy"]["timing_only"],
            true,
            "{}\n{}",
            v["lab"]["accuracy"]["violations"],
            out.describe()
        );
        assert!(str_at(&v, "/lab/c2s/usb/class").eq_ignore_ascii_case(&link[3..6]));
        let bps = f64_at(&v, "/summary/directions/0/receiver/bits_per_second");
        (bps, v)
    };
    // The model's account (profile study4, 1500-byte MTU, delayed ACKs):
    // ECM moves 2 segments per two 1514-byte OUT transfers and one ACK IN
    // transfer; EEM x6 moves 6 per one 9120-byte OUT transfer and (its ACKs
    // packed too) one IN transfer.
    let ecm_cycle = 2.0 * usb_transfer_us("1536", "out") + usb_transfer_us("512", "in");
    let eem_cycle = usb_transfer_us("9216", "out") + usb_transfer_us("512", "in");
    let predicted = (2.0 / ecm_cycle) / (6.0 / eem_cycle);
    unless_the_host_took_the_time(|| {
        let (ecm, a) = goodput("hs:ecm");
        let (eem6, b) = goodput("hs:eem:6");
        let measured = ecm / eem6;
        let failed = ((measured / predicted - 1.0).abs() >= 0.2).then(|| {
            format!(
                "ECM/EEMx6 measured {measured:.3} ({:.1} / {:.1} Mbit/s), model {predicted:.3}",
                ecm / 1e6,
                eem6 / 1e6
            )
        });
        // Either run's steal may be to blame: the retry goes by the larger.
        let steal = |v: &Value| v["lab"]["accuracy"]["host_steal_percent"].as_f64();
        (if steal(&a) > steal(&b) { a } else { b }, failed)
    });
}
