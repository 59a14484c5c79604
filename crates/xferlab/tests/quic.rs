//! `xferlab stream --quic` and `cbr --quic` end to end: the real binary
//! against a real `xferlab server` (or the in-process one) over loopback,
//! one QUIC connection per flow on quinn-proto. What is checked is what
//! the result documents for QUIC (`QuicSample` in
//! crates/xferlab-core/src/transport/quic.rs), that the bytes arrive on
//! every stream of every connection, and the one-line errors of bad
//! input and of a certificate that does not verify.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

fn quic_json(srv: &Server, args: &[&str], seconds: f64) -> Value {
    let mut all = vec!["--quic"];
    all.extend_from_slice(args);
    let v = srv.json(&all, seconds);
    assert_eq!(v["spec"]["transport"], "quic", "not a QUIC result");
    v
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A sender and its receiver: both completed, the receiver got every
/// byte the sender wrote (streams are reliable), each on `streams`
/// streams, and every interval of the sender carries a plausible `quic`
/// section: an established connection with an RTT and a window.
fn check_pair(tx: &Value, rx: &Value, streams: u64) {
    assert_eq!(tx["end"]["kind"], "completed", "{}", tx["end"]);
    assert_eq!(rx["end"]["kind"], "completed", "{}", rx["end"]);
    let sent = u(&tx["total"]["bytes_all"]);
    let got = u(&rx["total"]["bytes_all"]);
    assert!(sent > 0, "nothing sent: {}", tx["total"]);
    assert_eq!(got, sent, "the receiver's bytes are not the sender's");
    assert_eq!(
        u(&tx["total"]["quic"]["streams"]),
        streams,
        "{}",
        tx["total"]
    );
    assert_eq!(
        u(&rx["total"]["quic"]["streams"]),
        streams,
        "{}",
        rx["total"]
    );
    let intervals = tx["intervals"].as_array().unwrap();
    assert!(!intervals.is_empty());
    for i in intervals {
        let q = &i["quic"];
        assert_eq!(q["established"], true, "{q}");
        assert!(f(&q["rtt_us"]) > 0.0 && f(&q["min_rtt_us"]) > 0.0, "{q}");
        assert!(f(&q["min_rtt_us"]) <= f(&q["rtt_us"]) * 1.01 + 1.0, "{q}");
        assert!(u(&q["cwnd"]) > 0 && f(&q["pacing_bps"]) > 0.0, "{q}");
        assert!(u(&q["mtu"]) >= 1200, "{q}");
        assert!(u(&q["stream_window"]) > 0 && u(&q["conn_window"]) >= u(&q["stream_window"]));
    }
    // The data went out as QUIC packets in UDP datagrams, and came back
    // acknowledged.
    let t = &tx["total"]["quic"];
    assert!(
        u(&t["sent_packets"]) > 0 && u(&t["udp_tx_datagrams"]) > 0,
        "{t}"
    );
    assert!(u(&t["udp_tx_bytes"]) >= sent, "{t}");
    assert!(
        u(&t["udp_rx_datagrams"]) > 0 && u(&t["stream_frames_tx"]) > 0,
        "{t}"
    );
    assert!(
        tx["total"]["udp"].is_null(),
        "a stream flow has no datagram counters"
    );
}

#[test]
fn forward_stream_moves_every_byte_and_reports_rtt_cwnd_pacing() {
    let srv = Server::start();
    let v = quic_json(&srv, &["-t", "1.5"], 1.5);
    let tx = flows_in_role(&v, "client", "sender");
    let rx = flows_in_role(&v, "server", "receiver");
    assert_eq!((tx.len(), rx.len()), (1, 1));
    check_pair(tx[0], rx[0], 1);
    assert_eq!(tx[0]["intervals"][0]["quic"]["cc"], "cubic");
    // The human output prints the section under each interval's row.
    let out = srv.client(&["--quic", "-t", "1"], deadline_for(1.0));
    out.assert_success();
    assert!(
        out.stdout.contains("QUIC cubic: rtt ") && out.stdout.contains(" packets sent"),
        "{}",
        out.stdout
    );
}

#[test]
fn reverse_parallel_connections_each_carry_every_stream() {
    let srv = Server::start();
    let v = quic_json(&srv, &["-R", "-P", "2", "--streams", "4", "-t", "1.5"], 1.5);
    let tx = flows_in_role(&v, "server", "sender");
    let rx = flows_in_role(&v, "client", "receiver");
    assert_eq!((tx.len(), rx.len()), (2, 2));
    for t in &tx {
        let r = rx.iter().find(|r| r["id"] == t["id"]).unwrap();
        check_pair(t, r, 4);
    }
}

#[test]
fn bidir_moves_bytes_both_ways_on_their_own_connections() {
    let srv = Server::start();
    let v = quic_json(&srv, &["--bidir", "-t", "1.5"], 1.5);
    let c2s = (
        flows_in_role(&v, "client", "sender"),
        flows_in_role(&v, "server", "receiver"),
    );
    let s2c = (
        flows_in_role(&v, "server", "sender"),
        flows_in_role(&v, "client", "receiver"),
    );
    check_pair(c2s.0[0], c2s.1[0], 1);
    check_pair(s2c.0[0], s2c.1[0], 1);
}

#[test]
fn a_byte_count_arrives_exactly_with_each_congestion_controller() {
    let srv = Server::start();
    for cc in ["cubic", "newreno", "bbr"] {
        let v = quic_json(&srv, &["-n", "3M", "--streams", "3", "-C", cc], 3.0);
        let tx = flows_in_role(&v, "client", "sender");
        let rx = flows_in_role(&v, "server", "receiver");
        check_pair(tx[0], rx[0], 3);
        assert_eq!(u(&rx[0]["total"]["bytes_all"]), 3 << 20, "{cc}");
        let q = &tx[0]["total"]["quic"];
        assert_eq!(q["cc"], cc, "{q}");
        // BBR paces at a rate of its own; Cubic and NewReno have none,
        // and the section derives quinn's pacer rate.
        assert_eq!(q["pacing_derived"], cc != "bbr", "{q}");
    }
}

#[test]
fn cbr_sends_datagram_frames_at_the_rate_and_the_receiver_counts_them() {
    let srv = Server::start();
    // 1100-byte datagrams fit the 1200-byte packets a connection starts
    // with, so none is refused while the MTU discovery runs.
    let v = quic_json(&srv, &["-b", "20M", "-l", "1100", "-t", "1.5"], 1.5);
    let tx = flows_in_role(&v, "client", "sender");
    let rx = flows_in_role(&v, "server", "receiver");
    let (t, r) = (&tx[0]["total"], &rx[0]["total"]);
    assert_eq!(tx[0]["end"]["kind"], "completed");
    assert_eq!(rx[0]["end"]["kind"], "completed");
    let sent = u(&t["udp"]["packets"]);
    // 20 Mbit/s of 1100-byte datagrams for 1.5 s: 3409.
    assert!((3000..=3500).contains(&sent), "{sent} datagrams sent: {t}");
    let got = u(&r["udp"]["packets"]);
    let lost = u(&r["udp"]["lost"]);
    // Loopback loses nothing; whatever did not arrive is counted lost.
    assert_eq!(got + lost, sent, "{r}");
    assert!(lost * 100 <= sent, "{lost} of {sent} lost on loopback: {r}");
    assert!(f(&r["udp"]["jitter_us"]) >= 0.0);
    let q = &t["quic"];
    assert!(u(&q["datagram_frames_tx"]) >= sent, "{q}");
    assert_eq!(u(&r["quic"]["datagram_frames_rx"]), got, "{}", r["quic"]);
    assert_eq!(u(&q["stream_frames_tx"]), 0, "{q}");
    // And `cbr` itself runs over it, with its verdict.
    let port = srv.port.to_string();
    let out = run(
        &[
            "cbr",
            "127.0.0.1",
            "-p",
            &port,
            "--quic",
            "-b",
            "10M",
            "-l",
            "1100",
            "-t",
            "1",
            "--max-loss",
            "5",
        ],
        deadline_for(1.0),
    );
    assert!(out.stdout.contains("received"), "{}", out.describe());
}

#[test]
fn datagrams_the_connection_cannot_carry_are_counted_as_refused() {
    let srv = Server::start();
    // Far more than loopback QUIC carries from a debug build: the
    // congestion controller holds the queue full and refuses the rest.
    let v = quic_json(&srv, &["-b", "20G", "-l", "1100", "-t", "1"], 1.0);
    let t = &flows_in_role(&v, "client", "sender")[0]["total"];
    let q = &t["quic"];
    assert!(u(&q["datagrams_blocked"]) > 0, "nothing refused: {q}");
    let r = &flows_in_role(&v, "server", "receiver")[0]["total"];
    // Refused datagrams take no sequence number: what the receiver
    // counts (got, lost, dropped in its own buffer) is only what was
    // sent.
    let (sent, got, lost) = (
        u(&t["udp"]["packets"]),
        u(&r["udp"]["packets"]),
        u(&r["udp"]["lost"]),
    );
    assert!(got > 0 && got + lost <= sent, "{sent} sent: {r}");
    let arrived = u(&r["quic"]["datagram_frames_rx"]);
    assert!(arrived <= sent, "{sent} sent: {r}");
    assert_eq!(arrived, got + u(&r["udp"]["host_drops"]), "{r}");
}

/// The server's --max-rate holds the QUIC streams it sends (-R) as it
/// holds TCP's: its budget caps each sending flow (`--fq-rate` is the
/// client's own way to the same cap).
#[test]
fn a_servers_rate_budget_caps_the_quic_streams_it_sends() {
    let srv = Server::start_with(&["--max-rate", "40M"]);
    let v = quic_json(&srv, &["-R", "-t", "2"], 2.0);
    let rx = flows_in_role(&v, "client", "receiver");
    let tx = flows_in_role(&v, "server", "sender");
    check_pair(tx[0], rx[0], 1);
    let bps = f(&rx[0]["total"]["bits_per_second"]);
    // One write's burst above the rate at most (128 KiB in 2 s, or a
    // calibrated write size).
    assert!(
        bps > 20e6 && bps < 46e6,
        "{bps} bit/s under a 40 Mbit/s budget"
    );
}

// ------------------------------------------------------------ TLS

/// A CA and a server certificate it signed for 127.0.0.1, made with
/// openssl in `dir`: (ca, cert, key).
fn make_certs(dir: &Path, ca_name: &str) -> Option<(String, String, String)> {
    let p = |n: &str| dir.join(n).to_string_lossy().into_owned();
    let ok = |args: &[&str]| {
        Command::new("openssl")
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let ext = p("ext.cnf");
    std::fs::write(&ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let subj = format!("/CN={ca_name}");
    let mut ca = vec!["req", "-x509"];
    ca.extend_from_slice(&ec);
    let (ca_key, ca_pem) = (p("ca.key"), p("ca.pem"));
    ca.extend_from_slice(&[
        "-keyout", &ca_key, "-out", &ca_pem, "-days", "2", "-subj", &subj,
    ]);
    let mut csr = vec!["req"];
    csr.extend_from_slice(&ec);
    let (key, req, cert) = (p("srv.key"), p("srv.csr"), p("srv.pem"));
    csr.extend_from_slice(&["-keyout", &key, "-out", &req, "-subj", "/CN=xferlab-test"]);
    let sign = [
        "x509",
        "-req",
        "-in",
        &req,
        "-CA",
        &ca_pem,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-out",
        &cert,
        "-days",
        "2",
        "-extfile",
        &ext,
    ];
    (ok(&ca) && ok(&csr) && ok(&sign)).then(|| (ca_pem.clone(), cert.clone(), key.clone()))
}

#[test]
fn a_given_certificate_verifies_against_its_ca_and_not_against_another() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let (Some((ca, cert, key)), Some((other_ca, ..))) =
        (make_certs(&a, "ca-a"), make_certs(&b, "ca-b"))
    else {
        eprintln!("SKIP: openssl could not make test certificates (is it installed?)");
        return;
    };
    // The in-process server presents the given certificate; the client
    // verifies it against the CA that signed it.
    let v = embedded_json(
        &[
            "--quic",
            "-n",
            "1M",
            "--quic-cert",
            &cert,
            "--quic-key",
            &key,
            "--quic-ca",
            &ca,
        ],
        1.0,
    );
    assert_eq!(v["status"], "ok");
    // ... and by a name the certificate carries.
    let v = embedded_json(
        &[
            "--quic",
            "-n",
            "1M",
            "--quic-cert",
            &cert,
            "--quic-key",
            &key,
            "--quic-ca",
            &ca,
            "--quic-server-name",
            "localhost",
        ],
        1.0,
    );
    assert_eq!(v["status"], "ok");
    // Another CA: one line naming the cause and the fix.
    let out = run(
        &[
            "stream",
            "--quic",
            "-n",
            "1M",
            "--quic-cert",
            &cert,
            "--quic-key",
            &key,
            "--quic-ca",
            &other_ca,
        ],
        deadline_for(1.0),
    );
    let line = out.assert_one_line(&["certificate not trusted", "no CA in --quic-ca signed"]);
    assert_ne!(out.code, Some(0), "{line}");
    // A name the certificate does not carry.
    let out = run(
        &[
            "stream",
            "--quic",
            "-n",
            "1M",
            "--quic-cert",
            &cert,
            "--quic-key",
            &key,
            "--quic-ca",
            &ca,
            "--quic-server-name",
            "elsewhere.example",
        ],
        deadline_for(1.0),
    );
    out.assert_one_line(&[
        "certificate not trusted",
        "does not carry the server's name",
    ]);
    assert_ne!(out.code, Some(0));
    // A separate `xferlab server` presents the certificate it was given.
    let srv = Server::start_with(&["--quic-cert", &cert, "--quic-key", &key]);
    let v = quic_json(&srv, &["-n", "1M", "--quic-ca", &ca], 1.0);
    assert_eq!(v["status"], "ok");
    let out = srv.client(
        &["--quic", "-n", "1M", "--quic-ca", &other_ca],
        deadline_for(1.0),
    );
    out.assert_one_line(&["certificate not trusted", "127.0.0.1"]);
    // Without --quic-ca the client does not verify: a self-signed or any
    // other certificate is taken.
    let v = embedded_json(
        &[
            "--quic",
            "-n",
            "1M",
            "--quic-cert",
            &cert,
            "--quic-key",
            &key,
        ],
        1.0,
    );
    assert_eq!(v["status"], "ok");
}

// ------------------------------------------------------------ bad input

#[test]
fn tcp_only_flags_and_unknown_controllers_are_one_line_each() {
    for (args, needles) in [
        (&["-N"][..], &["do not apply to QUIC"][..]),
        (&["-M", "1000"][..], &["do not apply to QUIC"][..]),
        (&["-Z", "sendfile"][..], &["do not apply to QUIC"][..]),
        (
            &["-C", "vegas"][..],
            &["cubic, newreno or bbr", "vegas"][..],
        ),
        (&["--streams", "0"][..], &["--streams", "1"][..]),
        (&["-b", "1M", "-l", "1401"][..], &["-l", "1400"][..]),
        (
            &["-b", "1M", "--fq-rate", "1M"][..],
            &["--fq-rate", "-b"][..],
        ),
    ] {
        let mut all = vec!["stream", "--quic", "-t", "1"];
        all.extend_from_slice(args);
        let out = run(&all, deadline_for(1.0));
        out.assert_one_line_failure(2, needles);
    }
    // QUIC's own flags without --quic.
    let out = run(&["stream", "--streams", "2", "-t", "1"], deadline_for(1.0));
    out.assert_one_line_failure(2, &["--streams is for QUIC", "--quic"]);
    // A certificate file that is not there.
    let out = run(
        &[
            "stream",
            "--quic",
            "-t",
            "1",
            "--quic-cert",
            "/nonexistent.pem",
            "--quic-key",
            "/nonexistent.key",
        ],
        deadline_for(1.0),
    );
    out.assert_one_line(&["/nonexistent.pem", "PEM"]);
    assert_ne!(out.code, Some(0));
}

// ------------------------------------------------------------ rr --quic

/// `rr -J ARGS` against `srv`, which must succeed: its result.
fn rr_quic_json(srv: &Server, args: &[&str], seconds: f64) -> Value {
    let port = srv.port.to_string();
    let mut all = vec!["rr", "127.0.0.1", "-p", &port, "-J"];
    all.extend_from_slice(args);
    let out = run(&all, deadline_for(seconds));
    out.assert_success();
    let v = parse_json(&out);
    validate_schema(&v);
    assert_ok(&v);
    assert_eq!(v["spec"]["transport"], "quic", "not over QUIC");
    v
}

/// Every transaction completed on both ends, none failed (a request or
/// response of any other size than -r/-s is refused and counted as
/// failed by the client and dropped by the server: both exact here),
/// client and server agree per flow.
fn check_rr(v: &Value, mode: &str, flows: usize) -> u64 {
    let c = &v["client"]["pattern"];
    let s = &v["server"]["pattern"];
    assert_eq!(c["mode"], mode);
    let done = u(&c["total"]["transactions_all"]);
    assert!(done > 20, "only {done} transactions: {}", c["total"]);
    for k in ["failed", "timed_out", "late"] {
        assert_eq!(u(&c["total"][k]), 0, "{k}: {}", c["total"]);
    }
    assert_eq!(u(&s["total"]["dropped"]), 0, "{}", s["total"]);
    assert_eq!(u(&s["total"]["transactions_all"]), done);
    let (cf, sf) = (
        c["flows"].as_array().unwrap(),
        s["flows"].as_array().unwrap(),
    );
    assert_eq!((cf.len(), sf.len()), (flows, flows));
    for (a, b) in cf.iter().zip(sf) {
        assert_eq!(a["end"]["kind"], "completed", "{}", a["end"]);
        let n = u(&a["total"]["transactions_all"]);
        assert!(n > 0, "flow {} idle", a["id"]);
        assert_eq!(n, u(&b["total"]["transactions_all"]), "flow {}", a["id"]);
        // The flow's `quic` section: a stream per transaction, over
        // established connections with an RTT.
        let q = &a["quic"];
        assert_eq!(q["established"], true, "{q}");
        assert_eq!(u(&q["streams"]), u(&a["total"]["requests"]), "{q}");
        assert!(
            f(&q["rtt_us"]) > 0.0 && u(&q["stream_frames_rx"]) >= n,
            "{q}"
        );
        // Every interval carries the connection's state, as a stream
        // flow's does; the packets sent over the intervals add up to
        // at most the flow's.
        let ivs = a["intervals"].as_array().unwrap();
        assert!(!ivs.is_empty());
        let mut sent = 0;
        for iv in ivs {
            let q = &iv["quic"];
            assert!(q.is_object(), "an interval without its quic section: {iv}");
            sent += u(&q["sent_packets"]);
        }
        assert!(
            sent > 0 && sent <= u(&a["quic"]["sent_packets"]),
            "{sent} {}",
            a["quic"]
        );
    }
    done
}

/// Both QUIC modes against a real server process, pipelined and
/// multi-flow with multi-packet requests and responses; quic-crr records
/// a handshake (connect time) for every transaction, and its transactions
/// take longer than quic-rr's streams on one connection.
#[test]
fn rr_over_quic_streams_and_connections_answer_every_transaction_exactly() {
    let srv = Server::start_with(&["--max-flows", "4"]);
    let v = rr_quic_json(
        &srv,
        &[
            "--quic", "-F", "3", "--depth", "4", "-r", "3000", "-s", "5000", "-t", "1",
        ],
        1.0,
    );
    check_rr(&v, "quic_rr", 3);
    assert!(v["client"]["pattern"]["connect"].is_null());
    let rr = rr_quic_json(&srv, &["--quic", "-t", "1"], 1.0);
    let rr_done = check_rr(&rr, "quic_rr", 1);
    let crr = rr_quic_json(
        &srv,
        &["--mode", "quic-crr", "-r", "100", "-s", "2000", "-t", "1"],
        1.0,
    );
    let crr_done = check_rr(&crr, "quic_crr", 1);
    let c = &crr["client"]["pattern"];
    // A handshake per transaction: one connect time each (the one under
    // way at the stop may have been recorded too).
    let connects = u(&c["connect"]["count"]);
    assert!(
        (crr_done..=crr_done + 1).contains(&connects),
        "{connects} handshakes for {crr_done} transactions"
    );
    let p50 = |v: &Value| f(&v["client"]["pattern"]["latency"]["p50_us"]);
    assert!(
        p50(&crr) > p50(&rr) && crr_done < rr_done,
        "quic-crr p50 {} us ({crr_done} tx) vs quic-rr p50 {} us ({rr_done} tx)",
        p50(&crr),
        p50(&rr)
    );
    // The server's flow budget counts rr's QUIC flows as it counts TCP's.
    let port = srv.port.to_string();
    let out = run(
        &[
            "rr",
            "127.0.0.1",
            "-p",
            &port,
            "--quic",
            "-F",
            "8",
            "-t",
            "1",
        ],
        deadline_for(1.0),
    );
    out.assert_one_line_failure(1, &["8 flows", "--max-flows of 4"]);
}

/// Over the lab's 10 ms RTT link: a quic-rr transaction takes one round
/// trip; a quic-crr one its handshake's round trip more (no 0-RTT, no
/// resumption).
#[test]
fn quic_crr_pays_a_round_trip_more_than_quic_rr_for_its_handshake() {
    let _turn = one_at_a_time();
    assert!(
        is_root(),
        "this test runs `xferlab lab` (network namespaces): run it as root (CI does)"
    );
    let lab = |mode: &str| {
        let out = run(
            &[
                "lab",
                "--delay",
                "5ms",
                "--allow-invalid",
                "rr",
                "--mode",
                mode,
                "-t",
                "1",
                "-J",
            ],
            deadline_for(6.0),
        );
        // A busy host may make the lab's timing miss its targets (one
        // line on stderr, --allow-invalid): a fraction of a millisecond
        // against the 10 ms round trip this test reads.
        assert!(out.code == Some(0) && !out.timed_out, "{}", out.describe());
        let v = parse_json(&out);
        validate_schema(&v);
        assert_ok(&v);
        v
    };
    let rr = lab("quic-rr");
    let crr = lab("quic-crr");
    let at = |v: &Value, k: &str| f(&v["summary"]["pattern"]["latency"][k]) / 1e3;
    let rtt = 10.0;
    assert!(
        at(&rr, "min_us") >= rtt,
        "quic-rr under one RTT: {}",
        rr["summary"]
    );
    assert!(
        at(&rr, "p50_us") < 1.5 * rtt,
        "quic-rr p50 over 1.5 RTT: {}",
        rr["summary"]
    );
    assert!(
        at(&crr, "p50_us") >= at(&rr, "p50_us") + rtt,
        "quic-crr p50 {} ms, quic-rr p50 {} ms: no handshake round trip",
        at(&crr, "p50_us"),
        at(&rr, "p50_us")
    );
    let connect = f(&crr["summary"]["pattern"]["connect"]["p50_us"]) / 1e3;
    assert!(connect >= rtt, "a handshake under one RTT: {connect} ms");
}

#[test]
fn rr_mode_and_flag_combinations_quic_does_not_take_are_one_line_each() {
    for (args, needles) in [
        (
            &["--quic", "--mode", "udp-rr"][..],
            &["udp-rr", "quic-rr", "quic-crr"][..],
        ),
        (
            &["--mode", "quic-crr", "--depth", "2"][..],
            &["--depth", "quic-crr"][..],
        ),
        (
            &["--quic", "--background", "1"][..],
            &["--background", "stream --quic"][..],
        ),
        (&["--quic", "-M", "1000"][..], &["do not apply to QUIC"][..]),
        (
            &["--quic", "-C", "vegas"][..],
            &["cubic, newreno or bbr"][..],
        ),
    ] {
        let mut all = vec!["rr", "-t", "1"];
        all.extend_from_slice(args);
        run(&all, deadline_for(1.0)).assert_one_line_failure(2, needles);
    }
    // A server certificate that does not verify: one line, in words.
    let dir = tempfile::tempdir().unwrap();
    let Some((ca, ..)) = make_certs(dir.path(), "ca-rr") else {
        eprintln!(
            "SKIP (certificate part): openssl could not make test certificates (is it installed?)"
        );
        return;
    };
    for mode in ["quic-rr", "quic-crr"] {
        run(
            &["rr", "--mode", mode, "-t", "1", "--quic-ca", &ca],
            deadline_for(1.0),
        )
        .assert_one_line_failure(1, &["certificate not trusted", "--quic-ca signed"]);
    }
}
