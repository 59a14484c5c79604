//! Interop with Debian's stock iperf3 (`apt-get install iperf3`; CI installs
//! it): a stock iperf3 client against `xferlab server`, and `xferlab stream
//! --iperf3` against a stock iperf3 server, over TCP and UDP, forward, -R,
//! --bidir, -P 2, a -n byte-limited run and a -b rate-limited run. Every run
//! must exit 0 on both ends, and the bytes each end reports for a direction
//! must agree with the other end's within what can be in flight.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const IPERF3: &str = "iperf3";

/// Fails (does not skip) without iperf3: the interop matrix is part of CI.
fn require_iperf3() {
    let ok = std::process::Command::new(IPERF3)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "iperf3 is not installed: `apt-get install iperf3` (the interop tests need the real peer)"
    );
}

fn run_iperf3(args: &[&str], timeout: Duration) -> Output {
    Proc::spawn_program(IPERF3, args).finish(timeout)
}

/// One direction's totals as both ends reported them.
#[derive(Debug)]
struct Totals {
    what: String,
    sent_bytes: u64,
    received_bytes: u64,
    /// UDP: datagrams the receiver counted as lost (real loss on a busy
    /// host is not a disagreement between the ends).
    lost_datagrams: u64,
    seconds: f64,
    udp: bool,
    len: u64,
    flows: u64,
}

fn assert_agree(t: &Totals) {
    assert!(t.sent_bytes > 0, "{}: nothing was sent", t.what);
    let accounted = t.received_bytes + t.lost_datagrams * t.len;
    let diff = t.sent_bytes.abs_diff(accounted);
    let bound = if t.udp {
        // A few datagrams may be cut at the end (the receiver stops on
        // TEST_END).
        64 * t.len * t.flows
    } else {
        in_flight_bound(t.len) * t.flows
    };
    assert!(
        diff <= bound,
        "{}: sender reported {} bytes, receiver {} and {} datagrams lost (difference {diff} > {bound})",
        t.what,
        t.sent_bytes,
        t.received_bytes,
        t.lost_datagrams
    );
}

fn assert_rate_capped(t: &Totals, bits_per_second: f64) {
    let rate = t.received_bytes as f64 * 8.0 / t.seconds;
    assert!(
        rate <= 1.25 * bits_per_second * t.flows as f64,
        "{}: {rate:.0} bit/s received, limit was {bits_per_second} per flow",
        t.what
    );
    assert!(
        rate > 0.3 * bits_per_second,
        "{}: only {rate:.0} bit/s",
        t.what
    );
}

fn arg_value<'a>(args: &[&'a str], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| *a == flag)
        .and_then(|i| args.get(i + 1).copied())
}

fn rate_arg(args: &[&str]) -> Option<f64> {
    arg_value(args, "-b").map(|b| {
        let (num, mult) = match b.strip_suffix('M') {
            Some(n) => (n, 1e6),
            None => (b, 1.0),
        };
        num.parse::<f64>().unwrap() * mult
    })
}

// ------------------------------------------ stock client -> xferlab server

/// Runs a stock iperf3 client against a fresh `xferlab server` and checks
/// both ends; the iperf3 client's JSON carries its own totals and the ones
/// the xferlab server sent back.
fn stock_client(args: &[&str]) {
    require_iperf3();
    let srv = Server::start();
    let port = srv.port.to_string();
    let mut cmd = vec!["-c", "127.0.0.1", "-p", &port, "-J"];
    if arg_value(args, "-n").is_none() {
        cmd.extend(["-t", "1"]);
    }
    cmd.extend_from_slice(args);
    let out = run_iperf3(&cmd, Duration::from_secs(30));
    let v: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("iperf3 -J output is not JSON ({e}):\n{}", out.describe()));
    assert_eq!(
        v.get("error"),
        None,
        "iperf3 reported an error:\n{}",
        out.describe()
    );
    assert_eq!(
        out.code,
        Some(0),
        "iperf3 client failed:\n{}",
        out.describe()
    );
    srv.wait_for_log("done:", 1, Duration::from_secs(5));
    let log = srv.log();
    assert!(!log.contains("ended:"), "server session failed:\n{log}");
    let udp = args.contains(&"-u");
    let len = v["start"]["test_start"]["blksize"].as_u64().unwrap();
    let flows = v["start"]["test_start"]["num_streams"].as_u64().unwrap();
    let end = &v["end"];
    let mut pairs = vec![("sum_sent", "sum_received")];
    if args.contains(&"--bidir") {
        pairs.push(("sum_sent_bidir_reverse", "sum_received_bidir_reverse"));
    }
    for (sent, received) in pairs {
        let t = Totals {
            what: format!("iperf3 {} ({sent})", args.join(" ")),
            sent_bytes: end[sent]["bytes"].as_u64().unwrap(),
            received_bytes: end[received]["bytes"].as_u64().unwrap(),
            lost_datagrams: end[received]["lost_packets"].as_u64().unwrap_or(0),
            seconds: end[received]["seconds"].as_f64().unwrap(),
            udp,
            len,
            flows,
        };
        assert_agree(&t);
        if let Some(limit) = rate_arg(args) {
            assert_rate_capped(&t, limit);
        }
        if let Some(n) = arg_value(args, "-n") {
            let want = if n.ends_with('M') {
                n.trim_end_matches('M').parse::<u64>().unwrap() << 20
            } else {
                n.parse().unwrap()
            };
            assert!(
                t.sent_bytes >= want,
                "{}: -n {n} but {} sent",
                t.what,
                t.sent_bytes
            );
        }
    }
}

// ------------------------------------------ xferlab client -> stock server

/// A one-off stock iperf3 server on a free port.
fn stock_server() -> (Proc, u16) {
    require_iperf3();
    one_off_iperf3_server(IPERF3)
}

fn xferlab_client(args: &[&str]) {
    let (server, port) = stock_server();
    let p = port.to_string();
    let mut cmd = vec![
        "stream",
        "--iperf3",
        "127.0.0.1",
        "-p",
        &p,
        "-J",
        "-i",
        "0.5",
    ];
    if arg_value(args, "-n").is_none() {
        cmd.extend(["-t", "1"]);
    }
    cmd.extend_from_slice(args);
    let out = run(&cmd, Duration::from_secs(30));
    out.assert_success();
    let v = parse_json(&out);
    validate_schema(&v);
    assert_ok(&v);
    let srv = server.finish(Duration::from_secs(10));
    assert_eq!(
        srv.code,
        Some(0),
        "stock iperf3 server failed:\n{}",
        srv.describe()
    );
    let stock: Value = serde_json::from_str(&srv.stdout).unwrap_or_else(|e| {
        panic!(
            "iperf3 server -J output is not JSON ({e}):\n{}",
            srv.describe()
        )
    });
    assert_eq!(stock.get("error"), None, "{}", srv.describe());
    let udp = args.contains(&"-u");
    let len = u64_at(&v, "/spec/knobs/size");
    let flows = u64_at(&v, "/spec/parallel");
    for d in v["summary"]["directions"].as_array().unwrap() {
        let dir = d["direction"].as_str().unwrap();
        let t = Totals {
            what: format!("xferlab --iperf3 {} ({dir})", args.join(" ")),
            sent_bytes: d["sender"]["bytes"].as_u64().unwrap(),
            received_bytes: d["receiver"]["bytes"].as_u64().unwrap(),
            lost_datagrams: d["udp"]["lost"].as_u64().unwrap_or(0),
            seconds: d["receiver"]["seconds"].as_f64().unwrap(),
            udp,
            len,
            flows,
        };
        assert_agree(&t);
        if let Some(limit) = rate_arg(args) {
            assert_rate_capped(&t, limit);
        }
    }
    // What the result says of the server is what the stock server said.
    if !udp && !args.contains(&"--bidir") {
        let key = if args.contains(&"-R") {
            "sum_sent"
        } else {
            "sum_received"
        };
        let server_bytes: u64 = flows_of(&v, "server")
            .iter()
            .map(|f| u64_at(f, "/total/bytes"))
            .sum();
        assert_eq!(
            Some(server_bytes),
            stock["end"][key]["bytes"].as_u64(),
            "server totals in the result differ from the stock server's own"
        );
    }
    // Intervals come from this side.
    assert!(
        flows_of(&v, "client")
            .iter()
            .all(|f| !f["intervals"].as_array().unwrap().is_empty()),
        "client flows have no intervals"
    );
}

fn flows_of<'a>(v: &'a Value, side: &str) -> &'a Vec<Value> {
    v[side]["flows"].as_array().unwrap()
}

/// The matrix: every case runs both ways, as `stock_client_CASE` (stock
/// iperf3 client -> xferlab server) and `xferlab_client_CASE` (xferlab
/// --iperf3 -> stock iperf3 server).
macro_rules! matrix {
    ($($case:ident: [$($arg:expr),*];)*) => {
        mod stock_client_to_xferlab_server {
            $(#[test] fn $case() { super::stock_client(&[$($arg),*]); })*
        }
        mod xferlab_client_to_stock_server {
            $(#[test] fn $case() { super::xferlab_client(&[$($arg),*]); })*
        }
    };
}

matrix! {
    tcp_forward: [];
    tcp_reverse: ["-R"];
    tcp_bidir: ["--bidir"];
    tcp_parallel: ["-P", "2"];
    tcp_bytes: ["-n", "64M"];
    tcp_rate: ["-b", "200M"];
    udp_forward: ["-u", "-b", "20M"];
    udp_reverse: ["-u", "-R", "-b", "20M"];
    udp_bidir: ["-u", "--bidir", "-b", "20M"];
    udp_parallel: ["-u", "-P", "2", "-b", "20M"];
    udp_bytes: ["-u", "-n", "2M", "-b", "20M"];
    udp_rate: ["-u", "-b", "100M", "-l", "1400"];
}

#[test]
fn server_output_and_omit_against_a_stock_server() {
    let (server, port) = stock_server();
    let p = port.to_string();
    let out = run(
        &[
            "stream",
            "--iperf3",
            "127.0.0.1",
            "-p",
            &p,
            "-t",
            "1",
            "-O",
            "1",
            "-J",
            "--get-server-output",
        ],
        Duration::from_secs(30),
    );
    out.assert_success();
    let v = parse_json(&out);
    validate_schema(&v);
    let text = v["server_output"].as_str().expect("server_output");
    assert!(
        text.contains("\"start\""),
        "iperf3 -J server output: {text}"
    );
    server.finish(Duration::from_secs(10));
    let omitted: Vec<bool> = flows_of(&v, "client")[0]["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["omitted"].as_bool().unwrap())
        .collect();
    assert_eq!(omitted.first(), Some(&true), "-O 1 intervals: {omitted:?}");
    assert_eq!(omitted.last(), Some(&false), "-O 1 intervals: {omitted:?}");
}

// ------------------------------------------ several clients, busy answer

#[test]
fn several_stock_clients_at_once() {
    require_iperf3();
    let srv = Server::start();
    let port = srv.port.to_string();
    // Two UDP tests among them: their streams' first datagrams carry no
    // cookie, so the server sets them up one after the other.
    let clients: Vec<Proc> = [
        &["-b", "50M"][..],
        &["-R", "-b", "50M"],
        &["-u", "-b", "10M", "-P", "2"],
        &["-u", "-R", "-b", "10M"],
    ]
    .iter()
    .map(|extra| {
        let mut args = vec!["-c", "127.0.0.1", "-p", &port, "-t", "2", "-J"];
        args.extend_from_slice(extra);
        Proc::spawn_program(IPERF3, &args)
    })
    .collect();
    for c in clients {
        let out = c.finish(Duration::from_secs(30));
        assert_eq!(out.code, Some(0), "{}", out.describe());
        // Every test really moved its data, UDP streams to the right
        // socket included.
        let v: Value = serde_json::from_str(&out.stdout).expect("iperf3 -J");
        let got = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
        assert!(got > 1_000_000, "{} received {got} bytes", out.label);
        if let Some(lost) = v["end"]["sum"]["lost_percent"].as_f64() {
            assert!(lost < 5.0, "{} lost {lost} %", out.label);
        }
    }
    srv.wait_for_log("done:", 4, Duration::from_secs(5));
}

#[test]
fn a_busy_server_answers_iperf3s_way() {
    require_iperf3();
    let srv = Server::start_with(&["--max-sessions", "1"]);
    let port = srv.port.to_string();
    let first = Proc::spawn_program(
        IPERF3,
        &["-c", "127.0.0.1", "-p", &port, "-t", "3", "-b", "10M"],
    );
    srv.wait_for_log("accepted", 1, Duration::from_secs(5));
    let second = run_iperf3(
        &["-c", "127.0.0.1", "-p", &port, "-t", "1"],
        Duration::from_secs(20),
    );
    assert_ne!(second.code, Some(0), "{}", second.describe());
    assert!(
        second.stderr.contains("busy") || second.stdout.contains("busy"),
        "iperf3 should report a busy server:\n{}",
        second.describe()
    );
    let out = first.finish(Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "{}", out.describe());
}

// ------------------------------------------ CPU affinity (-A n,m) both ways

/// The CPU of iperf3's process (it pins itself whole), once it is pinned.
fn process_cpus_once_pinned(pid: u32, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = format!("/proc/{pid}/status");
        let cpus = cpus_allowed(std::path::Path::new(&status)).unwrap_or_default();
        if cpus == want || Instant::now() >= deadline {
            return cpus;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn affinity_travels_as_iperf3s_server_affinity() {
    let cpus = two_usable_cpus();
    let (c, s) = (cpus[0].to_string(), cpus.last().unwrap().to_string());
    let pin = format!("{c},{s}");
    // xferlab client -> stock server: the server pins itself to s.
    let (server, port) = stock_server();
    let p = port.to_string();
    let client = Proc::spawn(&[
        "stream",
        "--iperf3",
        "127.0.0.1",
        "-p",
        &p,
        "-t",
        "2",
        "-i",
        "0",
        "-J",
        "-A",
        &pin,
    ]);
    assert_eq!(thread_cpus(client.pid(), "xfer-tx-0", &c), c);
    assert_eq!(process_cpus_once_pinned(server.pid(), &s), s);
    client.finish(deadline_for(2.0)).assert_success();
    server.finish(Duration::from_secs(10)).assert_success();
    // Stock client -> xferlab server: the server's flow thread runs on s.
    require_iperf3();
    let srv = Server::start();
    let p = srv.port.to_string();
    let client = Proc::spawn_program(
        IPERF3,
        &["-c", "127.0.0.1", "-p", &p, "-t", "2", "-A", &pin],
    );
    assert_eq!(thread_cpus(srv.pid(), "xfer-rx-0", &s), s);
    client.finish(deadline_for(2.0)).assert_success();
    // A CPU the server may not use: iperf3's own affinity error
    // (IEAFFINITY), which a stock client words itself.
    let bad = format!("{c},1023");
    let out = run_iperf3(
        &["-c", "127.0.0.1", "-p", &p, "-t", "1", "-A", &bad],
        Duration::from_secs(10),
    );
    assert!(out.code != Some(0), "{}", out.describe());
    assert!(
        out.stderr.contains("unable to set CPU affinity"),
        "{}",
        out.describe()
    );
}

// ------------------------------------------ xferlab <-> xferlab via iperf3

#[test]
fn xferlab_speaks_iperf3_to_itself() {
    let v = embedded_json(&["--iperf3", "-u", "-b", "20M", "--bidir", "-t", "1"], 1.0);
    validate_schema(&v);
    assert_ok(&v);
    for d in v["summary"]["directions"].as_array().unwrap() {
        // On loopback the only loss is a receive buffer overrun: nothing
        // may be cut off at the end of the test.
        let udp = &d["udp"];
        assert_eq!(
            u64_at(udp, "/sent"),
            u64_at(udp, "/received") + u64_at(udp, "/host_drops"),
            "{d}"
        );
    }
}

// ------------------------------------------ the front door under attack

/// A valid cookie (36 characters from the base32 alphabet and a NUL).
fn cookie(seed: u8) -> Vec<u8> {
    let chars = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut c: Vec<u8> = (0..36)
        .map(|i| chars[(usize::from(seed) * 7 + i * 13) % 32])
        .collect();
    c.push(0);
    c
}

/// Reads whatever the server answers until it closes; None on timeout.
fn answer_then_eof(s: &mut TcpStream, timeout: Duration) -> Option<Vec<u8>> {
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Some(got),
            Err(_) => return None,
        }
    }
}

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn stock_client_is_served(srv: &Server) {
    let port = srv.port.to_string();
    let out = run_iperf3(
        &["-c", "127.0.0.1", "-p", &port, "-t", "1", "-b", "10M"],
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(0), "{}", out.describe());
}

#[test]
fn the_iperf3_front_door_survives_malformed_clients() {
    require_iperf3();
    let mut srv = Server::start();
    let vm_before = proc_status_kb(srv.pid(), "VmHWM").expect("VmHWM of the server");
    let json_frame = |body: &[u8]| {
        let mut f = (body.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    };
    // (what we send after connecting, whether PARAM_EXCHANGE comes first,
    // what must come before the close)
    let mut cases: Vec<(&str, Vec<u8>, bool, Option<u8>)> = vec![
        (
            "cookie of the wrong shape",
            {
                let mut c = cookie(1);
                c[20] = b'!';
                c
            },
            false,
            None,
        ),
        (
            "cookie without its NUL",
            {
                let mut c = cookie(2);
                c[36] = b'a';
                c
            },
            false,
            None,
        ),
        ("truncated cookie", cookie(3)[..20].to_vec(), false, None),
        (
            "2 GB length prefix",
            {
                let mut c = cookie(4);
                c.extend_from_slice(&0x8000_0000u32.to_be_bytes());
                c
            },
            true,
            Some(0xfe),
        ),
        (
            "parameters over 8 KiB",
            {
                let mut c = cookie(5);
                let big = format!(
                    "{{\"tcp\":true,\"time\":1,\"title\":\"{}\"}}",
                    "x".repeat(9000)
                );
                c.extend_from_slice(&json_frame(big.as_bytes()));
                c
            },
            true,
            Some(0xfe),
        ),
        (
            "parameters that are not JSON",
            {
                let mut c = cookie(6);
                c.extend_from_slice(&json_frame(b"{\"tcp\":tru"));
                c
            },
            true,
            Some(0xfe),
        ),
        (
            "parameters of the wrong types",
            {
                let mut c = cookie(7);
                c.extend_from_slice(&json_frame(
                    b"{\"tcp\":true,\"time\":\"ten\",\"parallel\":[]}",
                ));
                c
            },
            true,
            Some(0xfe),
        ),
        (
            "parameters asking for 100000 streams",
            {
                let mut c = cookie(8);
                c.extend_from_slice(&json_frame(
                    b"{\"tcp\":true,\"time\":1,\"parallel\":100000}",
                ));
                c
            },
            true,
            Some(0xfe),
        ),
        (
            "truncated parameters, then close",
            {
                let mut c = cookie(9);
                c.extend_from_slice(&json_frame(b"{\"tcp\":true,\"time\":1}")[..10]);
                c
            },
            true,
            None,
        ),
    ];
    for seed in 0..12u64 {
        let mut c = cookie(10 + seed as u8);
        c.extend_from_slice(&noise(seed, 1 + (seed as usize * 97) % 700));
        cases.push(("random bytes after a cookie", c, true, None));
    }
    for (what, bytes, param_exchange, last) in cases {
        let mut s = raw_connect(srv.addr());
        send(&mut s, &bytes);
        // Then close our side, so a message still incomplete ends in EOF
        // rather than in the 10 s step timeout.
        s.shutdown(std::net::Shutdown::Write).ok();
        let got = answer_then_eof(&mut s, Duration::from_secs(12))
            .unwrap_or_else(|| panic!("{what}: the server did not close the connection"));
        if param_exchange {
            assert_eq!(
                got.first(),
                Some(&9),
                "{what}: expected PARAM_EXCHANGE, got {got:?}"
            );
        } else {
            assert!(
                got.is_empty(),
                "{what}: expected a silent close, got {got:?}"
            );
        }
        if let Some(b) = last {
            assert_eq!(
                got.get(1),
                Some(&b),
                "{what}: expected SERVER_ERROR, got {got:?}"
            );
        }
        srv.assert_alive();
    }
    // A client that sends its cookie and then nothing holds no one up.
    let mut silent = raw_connect(srv.addr());
    send(&mut silent, &cookie(99));
    stock_client_is_served(&srv);
    drop(silent);
    srv.assert_alive();
    let vm_after = proc_status_kb(srv.pid(), "VmHWM").expect("VmHWM of the server");
    assert!(
        vm_after < vm_before + 256 * 1024,
        "server memory grew from {vm_before} kB to {vm_after} kB"
    );
    assert!(!srv.log().contains("panicked"), "{}", srv.log());
}
