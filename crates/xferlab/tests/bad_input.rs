//! Bad input to the client: every case ends with exactly one line on stderr
//! that names the cause and a non-zero exit code (2 bad usage, 1 runtime
//! failure, as `xferlab --help` documents), and never harms a server.

mod common;

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener};
use std::thread;
use std::time::Duration;

use common::*;

/// Usage errors are reported before anything touches the network.
const QUICK: Duration = Duration::from_secs(5);

/// Runs `stream 127.0.0.1 -p <closed port> ARGS` and checks the usage-error
/// contract. With nothing listening, a client that got as far as connecting
/// would fail with "connection refused" instead, so this also shows the
/// input is refused first.
fn usage_error(args: &[&str], needles: &[&str]) {
    let port = free_port().to_string();
    let mut all = vec!["stream", "127.0.0.1", "-p", &port];
    all.extend_from_slice(args);
    let out = run(&all, QUICK);
    out.assert_one_line_failure(2, needles);
    assert!(
        out.stdout.is_empty(),
        "stdout on a usage error\n{}",
        out.describe()
    );
}

#[test]
fn unknown_flag_is_a_usage_error() {
    usage_error(&["--no-such-flag", "-t", "1"], &["--no-such-flag"]);
}

#[test]
fn negative_time_is_a_usage_error() {
    usage_error(&["-t", "-1"], &["-t/--time", "-1"]);
}

#[test]
fn zero_length_is_a_usage_error() {
    usage_error(&["-l", "0"], &["-l/--length"]);
}

#[test]
fn huge_parallel_is_a_usage_error() {
    usage_error(&["-P", "100000"], &["-P/--parallel", "100000"]);
}

#[test]
fn other_nonsense_values_are_usage_errors() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["-P", "0"], &["-P/--parallel"]),
        (&["-P", "-3"], &["-P/--parallel"]),
        (&["-O", "-2"], &["-O/--omit"]),
        (&["-i", "0.001"], &["-i/--interval"]),
        (&["-w", "0"], &["-w/--window"]),
        (&["-M", "10"], &["-M/--set-mss"]),
        (&["-t", "abc"], &["abc"]),
        (&["-t", "1", "-n", "1M"], &["--bytes"]),
        (&["-R", "--bidir"], &["--bidir"]),
        (&["--format", "xml"], &["xml"]),
        (&["--dscp", "AF51"], &["AF51"]),
        (&["-C", "cubic; rm -rf /"], &["-C/--congestion"]),
    ];
    for (args, needles) in cases {
        usage_error(args, needles);
    }
}

#[test]
fn usage_errors_never_reach_a_running_server() {
    let mut srv = Server::start();
    let port = srv.port.to_string();
    for args in [
        &["--no-such-flag"][..],
        &["-t", "-1"],
        &["-l", "0"],
        &["-P", "100000"],
    ] {
        let mut all = vec!["stream", "127.0.0.1", "-p", &port];
        all.extend_from_slice(args);
        run(&all, QUICK).assert_one_line_failure(2, &[]);
        srv.assert_alive();
    }
    // Only the start line: no session was even attempted.
    assert_eq!(srv.log().lines().count(), 1, "server log:\n{}", srv.log());
    let v = srv.json(&["-t", "0.5"], 0.5);
    assert_flows_agree(&v);
}

#[test]
fn unreachable_server_is_a_runtime_error() {
    let port = free_port();
    let p = port.to_string();
    let out = run(&["stream", "127.0.0.1", "-p", &p, "-t", "1"], QUICK);
    out.assert_one_line_failure(1, &["connection refused", &format!("127.0.0.1:{port}")]);
    assert!(out.stdout.is_empty(), "{}", out.describe());
}

#[test]
fn server_of_another_protocol_version_is_named() {
    // A fake server: accept one connection, read the client's preamble,
    // answer with a version-99 preamble and close.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let fake = thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = [0u8; 8];
        s.read_exact(&mut got).expect("client preamble");
        std::io::Write::write_all(&mut s, &preamble(99, 1)).unwrap();
        got
    });
    let p = port.to_string();
    let out = run(&["stream", "127.0.0.1", "-p", &p, "-t", "1"], QUICK);
    let client_preamble = fake.join().expect("fake server");
    assert_eq!(
        client_preamble,
        preamble(PROTOCOL, 1),
        "the client's preamble"
    );
    let ours = format!("v{PROTOCOL}");
    out.assert_one_line_failure(1, &["version", "v99", &ours]);
}

#[test]
fn unknown_congestion_control_names_the_available_ones() {
    let mut srv = Server::start();
    let port = srv.port.to_string();
    let out = run(
        &[
            "stream",
            "127.0.0.1",
            "-p",
            &port,
            "-C",
            "nosuchcc",
            "-t",
            "1",
        ],
        QUICK,
    );
    // A runtime failure (1), not bad usage: what a kernel offers is only
    // known at run time, and a server lacking it refuses the same way.
    assert!(out.code == Some(1), "exit code\n{}", out.describe());
    let line = out.assert_one_line(&["nosuchcc"]);
    let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .expect("tcp_available_congestion_control");
    for cc in available.split_whitespace() {
        assert!(
            line.contains(cc),
            "available algorithm {cc} not named: {line}"
        );
    }
    srv.assert_alive();
    let v = srv.json(&["-t", "0.5"], 0.5);
    assert_flows_agree(&v);
}

#[test]
fn test_longer_than_the_server_allows_is_refused() {
    let mut srv = Server::start_with(&["--max-duration", "1"]);
    let out = srv.client(&["-t", "2"], QUICK);
    out.assert_one_line_failure(1, &["at most", "--max-duration"]);
    srv.assert_alive();
    let v = srv.json(&["-t", "0.5"], 0.5);
    assert_flows_agree(&v);
}

#[test]
fn ipv6_only_with_an_ipv4_address_is_refused() {
    let p = free_port().to_string();
    let out = run(&["stream", "127.0.0.1", "-6", "-p", &p, "-t", "1"], QUICK);
    out.assert_one_line_failure(1, &["127.0.0.1", "IPv6"]);
}

#[test]
fn unwritable_output_file_is_a_usage_error() {
    let out = run(
        &[
            "stream",
            "-t",
            "1",
            "-o",
            "/nonexistent-dir/xferlab/result.json",
        ],
        QUICK,
    );
    out.assert_one_line_failure(2, &["cannot write", "/nonexistent-dir/xferlab/result.json"]);
}

#[test]
fn server_usage_errors() {
    run(&["server", "--no-such-flag"], QUICK).assert_one_line_failure(2, &["--no-such-flag"]);
    run(&["server", "-p", "0", "--max-sessions", "0"], QUICK)
        .assert_one_line_failure(2, &["--max-sessions"]);
    run(&["server", "-p", "0", "--max-duration", "0"], QUICK)
        .assert_one_line_failure(2, &["--max-duration"]);
    // A port that is taken.
    let srv = Server::start();
    let p = srv.port.to_string();
    run(&["server", "-p", &p], QUICK).assert_one_line_failure(1, &["already in use", &p]);
}

/// README: exit 1 when "the test failed or is incomplete; whatever was
/// measured is still written, marked partial".
#[test]
fn server_killed_mid_test_gives_one_line_and_a_partial_result() {
    let mut srv = Server::start();
    // JSON lines, so the client says when data is flowing: the server dies
    // mid-transfer, once the test is under way.
    let client = srv.spawn_client(&["--format", "jsonl", "-i", "0.25", "-t", "10"]);
    client.wait_for_data_interval();
    srv.proc.kill();
    let killed_at = std::time::Instant::now();
    let out = client.finish(Duration::from_secs(15));
    assert!(
        killed_at.elapsed() < Duration::from_secs(3),
        "the client took {:.2} s to notice the server was gone",
        killed_at.elapsed().as_secs_f64()
    );
    out.assert_one_line_failure(1, &["closed the control connection"]);
    let v = jsonl_result(&out);
    validate_schema(&v);
    assert_eq!(v["status"], "partial");
    assert!(v["server"].is_null(), "a server report from a dead server");
    assert!(!v["errors"].as_array().unwrap().is_empty());
    let f = &flows(&v, "client")[0];
    assert!(
        u64_at(f, "/total/bytes_all") > 0,
        "what was measured is kept"
    );
    assert_eq!(f["end"]["kind"], "aborted");
}
