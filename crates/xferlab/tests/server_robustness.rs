//! `xferlab server` under stress: concurrent clients, clients killed with
//! SIGKILL, silent and hostile connections speaking raw bytes at it. After
//! each, the server must still be up and serve a real client.

mod common;

use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// A real client still gets a complete, correct result.
fn assert_serves_a_real_client(srv: &mut Server) {
    srv.assert_alive();
    let v = srv.json(&["-t", "0.5"], 0.5);
    assert_flows_agree(&v);
    srv.assert_alive();
}

/// Waits until the server's thread count has not changed for 300 ms and
/// returns it. A quiet period, not an event: nothing announces that no
/// further thread will start (Server::start's own probe connection leaves
/// a connection thread behind for a moment), so this polls until the count
/// holds still.
fn settled_thread_count(srv: &Server) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = srv.thread_count();
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_millis(300) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
        let n = srv.thread_count();
        if n != last {
            last = n;
            since = Instant::now();
        }
    }
    last
}

#[test]
fn two_clients_at_once_both_get_complete_results() {
    let srv = Server::start();
    let a = srv.spawn_client(&["-J", "-t", "2"]);
    let b = srv.spawn_client(&["-J", "-t", "2", "-R"]);
    let (a, b) = (a.finish(deadline_for(2.0)), b.finish(deadline_for(2.0)));
    let mut ids = Vec::new();
    for out in [&a, &b] {
        assert!(
            !out.timed_out && out.code == Some(0),
            "{}\n--- server log ---\n{}",
            out.describe(),
            srv.log()
        );
        out.assert_success();
        let v = parse_json(out);
        validate_schema(&v);
        assert_ok(&v);
        assert_flows_agree(&v);
        ids.push(str_at(&v, "/id").to_string());
    }
    assert_ne!(ids[0], ids[1], "two tests share a session id");
    // They really overlapped: both were accepted before either finished.
    let log = srv.log();
    let accepted: Vec<usize> = log.match_indices("accepted").map(|(i, _)| i).collect();
    let first_done = log.find(": done:").expect("a done line in the server log");
    assert_eq!(accepted.len(), 2, "server log:\n{log}");
    assert!(
        accepted[1] < first_done,
        "the second test was only accepted after the first ended:\n{log}"
    );
    assert_eq!(log.matches(": done:").count(), 2, "server log:\n{log}");
}

#[test]
fn killed_client_does_not_block_the_next_client() {
    let mut srv = Server::start();
    // JSON lines, so the client says when data is flowing: it is killed
    // mid-transfer.
    let mut victim = srv.spawn_client(&["--format", "jsonl", "-i", "0.25", "-t", "10"]);
    victim.wait_for_data_interval();
    assert!(victim.is_running(), "the 10 s client ended early");
    victim.kill(); // SIGKILL
    let killed_at = Instant::now();

    let out = srv.client(&["-J", "-t", "1"], deadline_for(1.0));
    let took = killed_at.elapsed();
    assert!(
        out.code == Some(0) && !out.timed_out,
        "next client failed after a SIGKILLed one\n{}\n--- server log ---\n{}",
        out.describe(),
        srv.log()
    );
    let v = parse_json(&out);
    assert_ok(&v);
    assert_flows_agree(&v);
    // Served within a second: the 1 s test plus at most 1 s of setup and
    // teardown (plus a little for a loaded machine).
    let overhead = took.as_secs_f64() - f64_at(&v, "/client/duration_s");
    assert!(
        overhead < 1.5,
        "the next 1 s test took {:.2} s after the kill ({overhead:.2} s more than its measured time)",
        took.as_secs_f64()
    );
    // The killed session was noticed and ended.
    srv.wait_for_log(": ended:", 1, Duration::from_secs(3));
    srv.assert_alive();
}

#[test]
fn killed_client_session_threads_are_released() {
    let mut srv = Server::start();
    let baseline = settled_thread_count(&srv);
    for (round, args) in [
        &["-t", "10"][..],
        &["-t", "10", "-R"][..],
        &["-t", "10", "--bidir", "-P", "2"][..],
    ]
    .into_iter()
    .enumerate()
    {
        // JSON lines, so the client says when data is flowing.
        let mut all = vec!["--format", "jsonl", "-i", "0.25"];
        all.extend_from_slice(args);
        let mut victim = srv.spawn_client(&all);
        srv.wait_for_log("accepted", round + 1, Duration::from_secs(5));
        // The session has its threads (session, control reader, flows).
        let deadline = Instant::now() + Duration::from_secs(3);
        while srv.thread_count() < baseline + 3 {
            assert!(
                Instant::now() < deadline,
                "{args:?}: server never showed the session's threads: {:?}",
                thread_names(srv.pid())
            );
            thread::sleep(Duration::from_millis(20));
        }
        // Killed mid-transfer, not while its flows are being set up.
        victim.wait_for_data_interval();
        assert!(victim.is_running(), "{args:?}: client ended early");
        victim.kill();
        let killed = Instant::now();
        while srv.thread_count() > baseline {
            assert!(
                killed.elapsed() < Duration::from_millis(2500),
                "{args:?}: 2.5 s after the client was killed the server still has {} threads (idle: {baseline}): {:?}\n--- server log ---\n{}",
                srv.thread_count(),
                thread_names(srv.pid()),
                srv.log()
            );
            thread::sleep(Duration::from_millis(20));
        }
        srv.assert_alive();
    }
    assert_serves_a_real_client(&mut srv);
}

#[test]
fn busy_server_refuses_beyond_max_sessions_with_one_line() {
    let mut srv = Server::start_with(&["--max-sessions", "1"]);
    let first = srv.spawn_client(&["-J", "-t", "2"]);
    srv.wait_for_log("accepted", 1, Duration::from_secs(5));
    let refused = srv.client(&["-t", "1"], deadline_for(1.0));
    refused.assert_one_line_failure(1, &["busy"]);
    let first = first.finish(deadline_for(2.0));
    first.assert_success();
    assert_ok(&parse_json(&first));
    // The slot is free again.
    assert_serves_a_real_client(&mut srv);
}

#[test]
fn garbage_control_message_gets_an_error_frame_and_the_server_survives() {
    let mut srv = Server::start();
    let mut s = raw_connect(srv.addr());
    let mut msg = preamble(PROTOCOL, 1).to_vec();
    msg.extend(frame(b"this is { not json"));
    send(&mut s, &msg);
    assert_eq!(read_n(&mut s, 8), preamble(PROTOCOL, 1), "server preamble");
    let err = read_json_frame(&mut s);
    assert_eq!(err["type"], "error", "{err}");
    assert_eq!(err["code"], "bad_message", "{err}");
    assert!(reads_to_eof(&mut s), "server kept the connection open");
    assert_serves_a_real_client(&mut srv);
}

#[test]
fn well_formed_but_wrong_messages_are_refused() {
    let mut srv = Server::start();
    // A stop before any hello.
    let mut s = raw_connect(srv.addr());
    let mut msg = preamble(PROTOCOL, 1).to_vec();
    msg.extend(frame(br#"{"type":"stop"}"#));
    send(&mut s, &msg);
    assert_eq!(read_n(&mut s, 8), preamble(PROTOCOL, 1));
    let err = read_json_frame(&mut s);
    assert_eq!(
        (&err["type"], &err["code"]),
        (&json!("error"), &json!("bad_message")),
        "{err}"
    );
    assert!(reads_to_eof(&mut s));

    // A hello whose spec a client's own checks would have refused: the
    // server validates what strangers send.
    let hello = json!({
        "type": "hello",
        "software": {"name": "xferlab", "version": "0.1.0", "protocol": PROTOCOL},
        "spec": {
            "pattern": {"kind": "stream"}, "transport": "tcp", "direction": "forward",
            "parallel": 100000, "limit": {"duration": {"seconds": 1.0}},
            "omit_s": 0.0, "interval_s": 1.0,
            "knobs": {"size": 131072, "buffer": null, "congestion": null, "nodelay": false,
                      "mss": null, "tos": null, "max_pacing_rate": null, "recv_mode": "copy"}
        }
    });
    let mut s = raw_connect(srv.addr());
    let mut msg = preamble(PROTOCOL, 1).to_vec();
    msg.extend(frame(hello.to_string().as_bytes()));
    send(&mut s, &msg);
    assert_eq!(read_n(&mut s, 8), preamble(PROTOCOL, 1));
    let err = read_json_frame(&mut s);
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap_or("")
            .contains("-P/--parallel"),
        "{err}"
    );
    assert!(reads_to_eof(&mut s));
    assert_serves_a_real_client(&mut srv);
}

/// What only the server can check (its congestion controls, its CPUs) is
/// refused by the server itself, for stream and rr tests alike: a raw
/// hello skips the client's own checks.
#[test]
fn what_only_the_server_can_check_is_refused_for_both_patterns() {
    let mut srv = Server::start();
    let knobs = |cc: &str| {
        json!({"size": 131072, "buffer": null, "congestion": cc, "nodelay": false,
               "mss": null, "tos": null, "max_pacing_rate": null, "recv_mode": "copy"})
    };
    let stream = |cc: &str| {
        json!({"pattern": {"kind": "stream"}, "transport": "tcp", "direction": "forward",
               "parallel": 1, "limit": {"duration": {"seconds": 1.0}},
               "omit_s": 0.0, "interval_s": 1.0, "knobs": knobs(cc)})
    };
    let rr = |cc: &str| {
        let mut s = stream(cc);
        s["pattern"] = json!({"kind": "rr", "mode": "tcp_rr", "request_size": 1,
                              "response_size": 1, "depth": 1, "flows": 1, "timeout_s": 1.0});
        s["parallel"] = json!(0);
        s
    };
    let far_cpu = |mut s: Value| {
        s["knobs"]["congestion"] = json!(null);
        s["affinity"] = json!({"server": 1023});
        s
    };
    for (spec, needle) in [
        (stream("no_such_cc"), "on the server"),
        (rr("no_such_cc"), "on the server"),
        (far_cpu(stream("x")), "the server cannot run on CPU 1023"),
        (far_cpu(rr("x")), "the server cannot run on CPU 1023"),
    ] {
        let hello = json!({
            "type": "hello",
            "software": {"name": "xferlab", "version": "0.1.0", "protocol": PROTOCOL},
            "spec": spec,
        });
        let mut s = raw_connect(srv.addr());
        let mut msg = preamble(PROTOCOL, 1).to_vec();
        msg.extend(frame(hello.to_string().as_bytes()));
        send(&mut s, &msg);
        assert_eq!(read_n(&mut s, 8), preamble(PROTOCOL, 1));
        let err = read_json_frame(&mut s);
        assert_eq!(err["code"], "invalid_spec", "{err}");
        assert!(
            err["message"].as_str().unwrap_or("").contains(needle),
            "{err}"
        );
        assert!(reads_to_eof(&mut s));
    }
    assert_serves_a_real_client(&mut srv);
}

#[test]
fn client_of_another_protocol_version_is_told_so() {
    let mut srv = Server::start();
    let mut s = raw_connect(srv.addr());
    send(&mut s, &preamble(99, 1));
    // The preamble format is frozen across versions, so the server still
    // answers with its own version and a readable error.
    assert_eq!(read_n(&mut s, 8), preamble(PROTOCOL, 1));
    let err = read_json_frame(&mut s);
    assert_eq!(err["code"], "version_mismatch", "{err}");
    let m = err["message"].as_str().unwrap_or("");
    assert!(
        m.contains(&format!("v{PROTOCOL}")) && m.contains("v99"),
        "{err}"
    );
    assert!(reads_to_eof(&mut s));
    assert_serves_a_real_client(&mut srv);
}

#[test]
fn oversized_length_prefix_is_refused_without_allocating() {
    let mut srv = Server::start();
    // Let a normal session set the memory high-water marks first.
    assert_serves_a_real_client(&mut srv);
    let peak_before = proc_status_kb(srv.pid(), "VmPeak").expect("VmPeak");
    let hwm_before = proc_status_kb(srv.pid(), "VmHWM").expect("VmHWM");

    for len in [0x7fff_ffffu32, 0xffff_ffff, 64 * 1024 + 1] {
        let mut s = raw_connect(srv.addr());
        let mut msg = preamble(PROTOCOL, 1).to_vec();
        msg.extend_from_slice(&len.to_be_bytes());
        send(&mut s, &msg);
        assert_eq!(read_n(&mut s, 8), preamble(PROTOCOL, 1), "len {len:#x}");
        let err = read_json_frame(&mut s);
        assert_eq!(err["code"], "bad_message", "len {len:#x}: {err}");
        assert!(
            err["message"]
                .as_str()
                .unwrap_or("")
                .contains(&len.to_string()),
            "the error does not name the refused length {len}: {err}"
        );
        assert!(reads_to_eof(&mut s), "len {len:#x}: connection left open");
        srv.assert_alive();
    }
    let peak_after = proc_status_kb(srv.pid(), "VmPeak").expect("VmPeak");
    let hwm_after = proc_status_kb(srv.pid(), "VmHWM").expect("VmHWM");
    assert!(
        peak_after.saturating_sub(peak_before) < 512 * 1024,
        "virtual memory peak grew from {peak_before} kB to {peak_after} kB"
    );
    assert!(
        hwm_after.saturating_sub(hwm_before) < 64 * 1024,
        "resident peak grew from {hwm_before} kB to {hwm_after} kB"
    );
    assert_serves_a_real_client(&mut srv);
}

#[test]
fn silent_connections_do_not_block_other_clients() {
    let mut srv = Server::start();
    // Connections that say nothing, half a preamble, or a control preamble
    // and then nothing (a session waiting for its hello).
    let mut idle: Vec<TcpStream> = (0..3).map(|_| raw_connect(srv.addr())).collect();
    let mut half = raw_connect(srv.addr());
    send(&mut half, b"XFR");
    idle.push(half);
    let mut mute = raw_connect(srv.addr());
    send(&mut mute, &preamble(PROTOCOL, 1));
    // The server answers a control preamble at once: once it has, it holds
    // a session waiting for the hello, and has accepted the connections
    // made before it (its listener accepts in order).
    assert_eq!(
        read_n(&mut mute, 8),
        preamble(PROTOCOL, 1),
        "server preamble"
    );
    idle.push(mute);

    let out = srv.client(&["-J", "-t", "1"], deadline_for(1.0));
    assert!(
        out.code == Some(0) && !out.timed_out,
        "{}\n--- server log ---\n{}",
        out.describe(),
        srv.log()
    );
    // Well below the server's 5 s preamble and 10 s hello deadlines: the
    // client did not wait for the silent ones.
    assert!(
        out.elapsed < Duration::from_secs(4),
        "a 1 s test took {:.2} s next to silent connections",
        out.elapsed.as_secs_f64()
    );
    let v = parse_json(&out);
    assert_ok(&v);
    assert_flows_agree(&v);
    drop(idle);
    srv.assert_alive();
}

#[test]
fn stray_connections_are_closed_and_answered() {
    let mut srv = Server::start();
    // Not xferlab at all: closed without an answer.
    let mut http = raw_connect(srv.addr());
    send(&mut http, b"GET / HTTP/1.0\r\n\r\n");
    assert!(reads_to_eof(&mut http), "HTTP connection left open");
    srv.wait_for_log(
        "neither an xferlab nor an iperf3 client",
        1,
        Duration::from_secs(3),
    );

    // A data connection with a token no session owns: "unknown session".
    let mut data = raw_connect(srv.addr());
    let mut msg = preamble(PROTOCOL, 2).to_vec();
    msg.extend_from_slice(&[0x5a; 16]);
    msg.extend_from_slice(&0u32.to_be_bytes());
    send(&mut data, &msg);
    assert_eq!(
        read_n(&mut data, 1),
        [1],
        "attach reply for an unknown token"
    );

    // A data connection of another protocol version: "version mismatch".
    let mut data = raw_connect(srv.addr());
    send(&mut data, &preamble(99, 2));
    assert_eq!(read_n(&mut data, 1), [3], "attach reply for version 99");

    assert_serves_a_real_client(&mut srv);
}

/// A result from a server where everything above already happened is still
/// complete (the registry and counters were not corrupted).
#[test]
fn hostile_traffic_between_real_tests_leaves_results_intact() {
    let mut srv = Server::start();
    let before: Value = srv.json(&["-t", "0.5", "-P", "2"], 0.5);
    for payload in [&b"\0\0\0\x05hello"[..], b"\0\0\0\0", b"\0\0\0\x02{}"] {
        let mut s = raw_connect(srv.addr());
        let mut msg = preamble(PROTOCOL, 1).to_vec();
        msg.extend_from_slice(payload);
        send(&mut s, &msg);
        assert_eq!(read_n(&mut s, 8), preamble(PROTOCOL, 1));
        let err = read_json_frame(&mut s);
        assert_eq!(err["type"], "error", "payload {payload:?}: {err}");
    }
    let after: Value = srv.json(&["-t", "0.5", "-P", "2"], 0.5);
    for v in [&before, &after] {
        assert_flows_agree(v);
        assert_eq!(flows(v, "client").len(), 2);
    }
    srv.assert_alive();
}
