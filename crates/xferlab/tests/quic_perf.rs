//! The QUIC performance protocol (draft-banks-quic-performance-00, ALPN
//! perf) against an independent QUIC stack: a perf peer on Python's
//! aioquic (tests/peers/quic_perf.py), client and server, both ways, with
//! exact byte counts; and the hardening of `xferlab server --quic-perf`:
//! a flood of Initials gets Retries only (never more bytes out than in),
//! the per-address limit refuses (CONNECTION_REFUSED, at once), the
//! budgets cut a response, and bad input is one line each. All on
//! loopback.
//!
//! aioquic 1.7.2 comes from PyPI (`.ci/run` installs it in a venv at
//! /opt/aioquic: `python3 -m venv /opt/aioquic && /opt/aioquic/bin/pip
//! install aioquic==1.7.2`). Without it these tests fail, saying so;
//! `XFERLAB_AIOQUIC=skip` skips the ones that need it, saying so, and
//! `XFERLAB_AIOQUIC=/path/to/python3` names another interpreter that has
//! it.

mod common;

use std::net::{Ipv4Addr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/quic_perf.py");
const AIOQUIC: &str = "1.7.2";

/// The Python that has aioquic 1.7.2, or None when the tests that need
/// it are to be skipped (`XFERLAB_AIOQUIC=skip`, said on stderr).
fn python(purpose: &str) -> Option<&'static str> {
    static FOUND: OnceLock<Result<String, String>> = OnceLock::new();
    let named = std::env::var("XFERLAB_AIOQUIC").ok();
    if named.as_deref() == Some("skip") {
        eprintln!("XFERLAB_AIOQUIC=skip: SKIPPED {purpose} (needs aioquic {AIOQUIC}: python3 -m venv /opt/aioquic && /opt/aioquic/bin/pip install aioquic=={AIOQUIC})");
        return None;
    }
    let found = FOUND.get_or_init(|| {
        let candidates: Vec<String> = match named {
            Some(p) => vec![p],
            None => vec!["/opt/aioquic/bin/python3".into(), "python3".into()],
        };
        for py in &candidates {
            let ok = std::process::Command::new(py)
                .args(["-c", &format!("import aioquic, sys; sys.exit(aioquic.__version__ != '{AIOQUIC}')")])
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                return Ok(py.clone());
            }
        }
        Err(format!(
            "aioquic {AIOQUIC} is not installed for {} (the QUIC interop tests need the independent peer): \
             python3 -m venv /opt/aioquic && /opt/aioquic/bin/pip install aioquic=={AIOQUIC} (as .ci/run does), \
             or set XFERLAB_AIOQUIC=/path/to/python3, or XFERLAB_AIOQUIC=skip to skip these tests",
            candidates.join(" or ")
        ))
    });
    match found {
        Ok(p) => Some(p.as_str()),
        Err(e) => panic!("{e}"),
    }
}

/// A UDP port nothing is bound to right now.
fn free_udp_port() -> u16 {
    UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|s| s.local_addr())
        .expect("bind an ephemeral UDP port")
        .port()
}

/// `xferlab server --quic-perf PORT EXTRA...`, waited for (bounded) until
/// both its lines say it listens; retried on a lost race for a port.
struct PerfServer {
    proc: Proc,
    port: u16,
}

impl PerfServer {
    fn start(extra: &[&str]) -> PerfServer {
        for _ in 0..5 {
            let (tcp, udp) = (free_port().to_string(), free_udp_port());
            let udp_s = udp.to_string();
            let mut args = vec![
                "server",
                "-p",
                &tcp,
                "--iperf3-port",
                "off",
                "-B",
                "127.0.0.1",
                "--quic-perf",
                &udp_s,
            ];
            args.extend_from_slice(extra);
            let mut proc = Proc::spawn(&args);
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(st) = proc.try_status() {
                    if proc.stderr().contains("already in use") {
                        break;
                    }
                    panic!("server exited during start-up ({st}): {}", proc.stderr());
                }
                let out = proc.stdout();
                if out.contains("quic-perf listening on")
                    && out.contains("xferlab server listening on")
                {
                    return PerfServer { proc, port: udp };
                }
                assert!(
                    Instant::now() < deadline,
                    "server did not start: {out} {}",
                    proc.stderr()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("could not start a server on free ports in 5 attempts");
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        self.proc.stdout()
    }

    /// Waits (bounded) for `n` log lines containing `needle`.
    fn wait_for_log(&self, needle: &str, n: usize) {
        self.proc.wait_for_stdout(
            &format!("{needle:?} x{n}"),
            Duration::from_secs(10),
            |log| log.matches(needle).count() >= n,
        );
    }
}

/// The server's Prometheus text (`--metrics`), by a plain HTTP GET.
fn metrics(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).expect("connect to --metrics");
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(c, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    text
}

/// A series' value in Prometheus text.
fn series(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
}

/// The aioquic peer, as a client: its one JSON line.
fn peer_client(py: &str, addr: &str, upload: u64, download: u64, streams: u32) -> (Value, Output) {
    peer_client_with(py, addr, upload, download, streams, &[])
}

/// As [`peer_client`], with more of the peer's flags (`--uni`).
fn peer_client_with(
    py: &str,
    addr: &str,
    upload: u64,
    download: u64,
    streams: u32,
    extra: &[&str],
) -> (Value, Output) {
    let (up, down, st) = (
        upload.to_string(),
        download.to_string(),
        streams.to_string(),
    );
    let mut args = vec![
        PEER,
        "--connect",
        addr,
        "--upload",
        &up,
        "--download",
        &down,
        "--streams",
        &st,
        "--timeout",
        "20",
    ];
    args.extend_from_slice(extra);
    let out = Proc::spawn_program(py, &args).finish(Duration::from_secs(40));
    let line = out.stdout.lines().last().unwrap_or_default().to_string();
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
        panic!(
            "the aioquic client printed no JSON ({e})\n{}",
            out.describe()
        )
    });
    (v, out)
}

/// A self-signed certificate for the aioquic server, made with openssl
/// in a temporary directory.
fn cert(dir: &Path) -> (PathBuf, PathBuf) {
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    let ok = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-keyout",
        ])
        .arg(&k)
        .arg("-out")
        .arg(&c)
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "openssl could not make a test certificate (apt-get install openssl)"
    );
    (c, k)
}

/// The aioquic peer as a server, until dropped; its address.
struct PeerServer {
    proc: Proc,
    addr: String,
    _dir: tempfile::TempDir,
}

impl PeerServer {
    fn start(py: &str) -> PeerServer {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = cert(dir.path());
        let proc = Proc::spawn_program(
            py,
            &[
                PEER,
                "--listen",
                "127.0.0.1:0",
                "--cert",
                c.to_str().unwrap(),
                "--key",
                k.to_str().unwrap(),
            ],
        );
        proc.wait_for_stdout("listening", Duration::from_secs(10), |o| {
            o.contains("listening")
        });
        let first: Value = serde_json::from_str(proc.stdout().lines().next().unwrap()).unwrap();
        PeerServer {
            addr: first["listening"].as_str().unwrap().to_string(),
            proc,
            _dir: dir,
        }
    }

    /// Waits for `n` finished request streams; their (uploaded, sent).
    fn streams(&self, n: usize) -> Vec<(u64, u64)> {
        self.proc
            .wait_for_stdout("request streams", Duration::from_secs(15), |o| {
                o.lines().filter(|l| l.contains("\"stream\"")).count() >= n
            });
        self.proc
            .stdout()
            .lines()
            .filter(|l| l.contains("\"stream\""))
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (v["uploaded"].as_u64().unwrap(), v["sent"].as_u64().unwrap())
            })
            .collect()
    }
}

/// A `stream --quic --quic-perf` run's JSON result (exit 0 asserted).
fn perf_stream(addr: &str, args: &[&str], seconds: f64) -> Value {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let mut all = vec!["stream", "--quic", "--quic-perf", host, "-p", port, "-J"];
    all.extend_from_slice(args);
    let out = run(&all, deadline_for(seconds));
    assert!(
        !out.timed_out && out.code == Some(0),
        "the perf client failed\n{}",
        out.describe()
    );
    let v = parse_json(&out);
    validate_schema(&v);
    v
}

/// Bytes of the client side's flows in `role` (sender/receiver).
fn client_bytes(v: &Value, role: &str) -> u64 {
    v["client"]["flows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["role"] == role)
        .map(|f| f["total"]["bytes_all"].as_u64().unwrap())
        .sum()
}

#[test]
fn aioquic_client_against_xferlab_server_both_ways_exact() {
    let Some(py) = python("aioquic client -> xferlab server --quic-perf") else {
        return;
    };
    let m = format!("127.0.0.1:{}", free_port());
    let s = PerfServer::start(&["--metrics", &m]);
    let t = Instant::now();
    // Upload: 2 streams of 3 MB each, nothing back.
    let (v, out) = peer_client(py, &s.addr(), 3_000_000, 0, 2);
    assert!(
        v.get("error").is_none(),
        "upload failed: {v}\n{}",
        out.describe()
    );
    assert_eq!(v["uploaded"], 6_000_000, "{v}");
    let up_s = v["seconds"].as_f64().unwrap();
    s.wait_for_log("quic-perf 127.0.0.1:", 2);
    s.wait_for_log(": done: 2 requests, received 6000000 bytes", 1);
    // Download: 2 streams asking for 4 MB each; the peer checks each
    // stream ends with exactly what it asked for.
    let (v, out) = peer_client(py, &s.addr(), 0, 4_000_000, 2);
    assert!(
        v.get("error").is_none(),
        "download failed: {v}\n{}",
        out.describe()
    );
    assert_eq!(v["downloaded"], 8_000_000, "{v}");
    let down_s = v["seconds"].as_f64().unwrap();
    s.wait_for_log("sent 8000000 bytes", 1);
    // The unidirectional variant: requests on client streams, answers on
    // streams the server opens.
    let (v, out) = peer_client_with(py, &s.addr(), 1_000_000, 2_000_000, 2, &["--uni"]);
    assert!(
        v.get("error").is_none(),
        "uni failed: {v}\n{}",
        out.describe()
    );
    assert_eq!(
        (v["uploaded"].as_u64(), v["downloaded"].as_u64()),
        (Some(2_000_000), Some(4_000_000)),
        "{v}"
    );
    s.wait_for_log(
        "received 2000000 bytes (1.91 MBytes), sent 4000000 bytes",
        1,
    );
    let log = s.log();
    assert!(log.contains("; ok"), "{log}");
    // Counted as the server's other sessions are, under their protocol.
    let text = metrics(&m);
    let got = |name: &str| series(&text, name).unwrap_or_else(|| panic!("no {name} in\n{text}"));
    assert_eq!(
        got("xferlab_sessions_served_total{protocol=\"quic_perf\"}"),
        3.0
    );
    assert_eq!(
        got("xferlab_transferred_bytes_total{protocol=\"quic_perf\",direction=\"received\"}"),
        8e6
    );
    assert_eq!(
        got("xferlab_transferred_bytes_total{protocol=\"quic_perf\",direction=\"sent\"}"),
        12e6
    );
    assert_eq!(
        got("xferlab_quic_perf_retries_total"),
        3.0,
        "one Retry per new connection"
    );
    eprintln!(
        "aioquic -> xferlab: upload {:.1} Mbit/s, download {:.1} Mbit/s (wall {:.1} s)",
        6e6 * 8.0 / up_s / 1e6,
        8e6 * 8.0 / down_s / 1e6,
        t.elapsed().as_secs_f64()
    );
}

#[test]
fn xferlab_client_against_aioquic_server_both_ways_exact() {
    let Some(py) = python("xferlab stream --quic-perf -> aioquic server") else {
        return;
    };
    let srv = PeerServer::start(py);
    // Upload, -n split over 2 streams: the server read every byte.
    let v = perf_stream(&srv.addr, &["-n", "4000000", "--streams", "2"], 10.0);
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(client_bytes(&v, "sender"), 4_000_000);
    let warnings = v["client"]["warnings"].to_string();
    assert!(warnings.contains("not reported"), "{warnings}");
    let up = v["summary"].to_string();
    let done = srv.streams(2);
    assert_eq!(done.iter().map(|d| d.0).sum::<u64>(), 4_000_000, "{done:?}");
    assert_eq!(done.iter().map(|d| d.1).sum::<u64>(), 0, "{done:?}");
    // Download (-R), two connections: every byte asked for, no more.
    let v = perf_stream(&srv.addr, &["-R", "-n", "6000000", "-P", "2"], 10.0);
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(client_bytes(&v, "receiver"), 6_000_000);
    let done = srv.streams(4);
    assert_eq!(
        done[2..].iter().map(|d| d.1).sum::<u64>(),
        6_000_000,
        "{done:?}"
    );
    // Every interval carries the QUIC section.
    let iv = &v["client"]["flows"][0]["intervals"][0];
    assert!(iv.get("quic").is_some(), "no quic section in {iv}");
    eprintln!(
        "xferlab -> aioquic: upload summary {up}; download {}",
        v["summary"]
    );
}

#[test]
fn a_timed_download_stops_the_server_at_the_deadline() {
    let Some(py) = python("stream --quic-perf -R -t against aioquic") else {
        return;
    };
    let srv = PeerServer::start(py);
    let t = Instant::now();
    let v = perf_stream(&srv.addr, &["-R", "-t", "1"], 1.0);
    assert_eq!(v["status"], "ok", "{v}");
    assert!(client_bytes(&v, "receiver") > 0, "{v}");
    // Ends at its deadline (plus the handshake and close), not after
    // 2^64-1 bytes.
    assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
}

#[test]
fn an_initial_flood_gets_retries_only_and_no_state() {
    let Some(py) = python("Initial flood against --quic-perf") else {
        return;
    };
    let m = format!("127.0.0.1:{}", free_port());
    let s = PerfServer::start(&["--max-sessions", "2", "--metrics", &m]);
    let out = Proc::spawn_program(py, &[PEER, "--flood", &s.addr(), "--count", "300"])
        .finish(Duration::from_secs(30));
    let v: Value = serde_json::from_str(out.stdout.lines().last().unwrap_or("{}"))
        .unwrap_or_else(|e| panic!("flood printed no JSON ({e})\n{}", out.describe()));
    let (sent, got) = (
        v["sent_bytes"].as_u64().unwrap(),
        v["recv_bytes"].as_u64().unwrap(),
    );
    assert_eq!(
        v["other_packets"], 0,
        "the server answered an unvalidated address with more than a Retry: {v}"
    );
    // Every Initial answered (the port's 4 MiB buffer holds the burst),
    // each by a Retry alone.
    assert!(v["retry_packets"].as_u64().unwrap() >= 270, "{v}");
    assert!(
        got <= sent,
        "amplification: {got} bytes out for {sent} in: {v}"
    );
    // No session was made for any of them: a real client still gets one
    // of the two places.
    let (c, out) = peer_client(py, &s.addr(), 0, 100_000, 1);
    assert!(c.get("error").is_none(), "{c}\n{}", out.describe());
    assert_eq!(s.log().matches("accepted").count(), 1, "{}", s.log());
    let retries = series(&metrics(&m), "xferlab_quic_perf_retries_total").unwrap();
    assert!(retries >= 271.0, "{retries} Retries counted");
}

#[test]
fn the_per_address_limit_refuses_the_next_connection_at_once() {
    let Some(py) = python("--max-sessions-per-client on --quic-perf") else {
        return;
    };
    // One per address; the first holds its place with a slow download.
    let s = PerfServer::start(&["--max-sessions-per-client", "1", "--max-rate", "2M"]);
    let (up, down) = ("0".to_string(), "100000000".to_string());
    let addr = s.addr();
    let _first = Proc::spawn_program(
        py,
        &[
            PEER,
            "--connect",
            &addr,
            "--upload",
            &up,
            "--download",
            &down,
        ],
    );
    s.wait_for_log(": accepted", 1);
    let t = Instant::now();
    let (v, out) = peer_client(py, &s.addr(), 0, 1000, 1);
    let err = v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("the second connection was served: {v}\n{}", out.describe()));
    // Refused, not left to time out.
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "{err} after {:?}",
        t.elapsed()
    );
    s.wait_for_log("refused: server busy", 1);
    assert!(s.log().contains("--max-sessions-per-client"), "{}", s.log());
}

#[test]
fn a_response_over_the_budget_is_cut_at_max_duration() {
    let Some(py) = python("--max-duration and --max-rate on --quic-perf") else {
        return;
    };
    // 8 Mbit/s for 1 s: at most 1 MB (and a burst) for any request.
    let s = PerfServer::start(&["--max-duration", "1", "--max-rate", "8M"]);
    let (v, out) = peer_client(py, &s.addr(), 0, 50_000_000, 1);
    let err = v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("not cut: {v}\n{}", out.describe()));
    let got = v["downloaded"].as_u64().unwrap();
    assert!(got > 0 && got <= 1_300_000, "{got} bytes for a 1 MB budget");
    s.wait_for_log("cut at this server's --max-duration of 1 s", 1);
    // The close carries the reason. It is one packet, and a lost one
    // leaves the client to its idle timeout (RFC 9000, 10.2): then the
    // server's log is what says the cut happened.
    if !err.contains("--max-duration") {
        assert!(err.contains("Idle timeout"), "{err}");
        eprintln!("the CONNECTION_CLOSE was lost on the way: {err}");
    }
}

#[test]
fn bad_input_is_one_line_each() {
    // The UDP port taken: before the server says it listens.
    let taken = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
    let p = taken.local_addr().unwrap().port().to_string();
    let tcp = free_port().to_string();
    let out = run(
        &[
            "server",
            "-p",
            &tcp,
            "--iperf3-port",
            "off",
            "--quic-perf",
            &p,
        ],
        Duration::from_secs(10),
    );
    out.assert_one_line_failure(1, &["UDP port", &p, "already in use", "--quic-perf"]);
    // Beside --auth-key without saying so.
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "0123456789abcdef0123456789abcdef\n").unwrap();
    let out = run(
        &[
            "server",
            "-p",
            &tcp,
            "--iperf3-port",
            "off",
            "--quic-perf",
            "0",
            "--auth-key",
            key.to_str().unwrap(),
        ],
        Duration::from_secs(10),
    );
    out.assert_one_line_failure(
        2,
        &["--quic-perf", "--auth-key", "--quic-perf-unauthenticated"],
    );
    // The client without --quic.
    let out = run(
        &["stream", "--quic-perf", "127.0.0.1"],
        Duration::from_secs(10),
    );
    out.assert_one_line_failure(2, &["--quic-perf", "add --quic"]);
    // Datagrams: the protocol has none.
    let out = run(
        &["stream", "--quic", "--quic-perf", "127.0.0.1", "-b", "10M"],
        Duration::from_secs(10),
    );
    out.assert_one_line_failure(2, &["--quic-perf", "no datagrams", "-b"]);
    // Nobody answering on the port (a silent socket, as a firewall that
    // drops): the handshake times out, one line naming the address.
    let silent = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = silent.local_addr().unwrap().port().to_string();
    let out = run(
        &[
            "stream",
            "--quic",
            "--quic-perf",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "1",
        ],
        Duration::from_secs(20),
    );
    out.assert_one_line_failure(1, &["handshake", &format!("127.0.0.1:{port}"), "timed out"]);
}

#[test]
fn xferlab_client_and_server_agree_to_the_byte() {
    // Needs no aioquic: both ends are xferlab's, so this runs where the
    // interop tests are skipped. A timed upload over 2 connections x 2
    // streams: what each connection's flow says it wrote is what the
    // server says it read (the server reads every upload to its FIN
    // before it answers, and the flow ends on that answer).
    let s = PerfServer::start(&[]);
    let v = perf_stream(&s.addr(), &["-t", "1", "-P", "2", "--streams", "2"], 1.0);
    assert_eq!(v["status"], "ok", "{v}");
    s.wait_for_log(": done: 2 requests", 2);
    let log = s.log();
    let mut server: Vec<u64> = log
        .lines()
        .filter_map(|l| l.split(", received ").nth(1))
        .filter_map(|r| r.split(' ').next()?.parse().ok())
        .collect();
    let mut client: Vec<u64> = v["client"]["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["total"]["bytes_all"].as_u64().unwrap())
        .collect();
    server.sort_unstable();
    client.sort_unstable();
    assert!(client.iter().all(|&b| b > 0), "{client:?}");
    assert_eq!(client, server, "{log}");
}

/// A CA and a certificate it signed for 127.0.0.1 (openssl, in `dir`):
/// (ca, cert, key).
fn ca_and_cert(dir: &Path, ca_name: &str) -> (String, String, String) {
    let p = |n: &str| dir.join(n).to_string_lossy().into_owned();
    let run = |args: &[&str]| {
        let ok = std::process::Command::new("openssl")
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(ok, "openssl {args:?} failed (apt-get install openssl)");
    };
    let ext = p("ext.cnf");
    std::fs::write(&ext, "subjectAltName=IP:127.0.0.1\n").unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let (ca_key, ca, key, csr, cert) =
        (p("ca.key"), p("ca.pem"), p("k.pem"), p("r.csr"), p("c.pem"));
    let subj = format!("/CN={ca_name}");
    let mut a = vec!["req", "-x509"];
    a.extend_from_slice(&ec);
    a.extend_from_slice(&[
        "-keyout", &ca_key, "-out", &ca, "-days", "2", "-subj", &subj,
    ]);
    run(&a);
    let mut r = vec!["req"];
    r.extend_from_slice(&ec);
    r.extend_from_slice(&["-keyout", &key, "-out", &csr, "-subj", "/CN=perf"]);
    run(&r);
    run(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-out",
        &cert,
        "-days",
        "2",
        "-extfile",
        &ext,
    ]);
    (ca, cert, key)
}

#[test]
fn the_perf_port_presents_the_given_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let (ca, cert, key) = ca_and_cert(&a, "ca-a");
    let (other_ca, ..) = ca_and_cert(&b, "ca-b");
    let s = PerfServer::start(&["--quic-cert", &cert, "--quic-key", &key]);
    let v = perf_stream(&s.addr(), &["-n", "1M", "--quic-ca", &ca], 1.0);
    assert_eq!(v["status"], "ok", "{v}");
    let port = s.port.to_string();
    let out = run(
        &[
            "stream",
            "--quic",
            "--quic-perf",
            "127.0.0.1",
            "-p",
            &port,
            "-n",
            "1M",
            "--quic-ca",
            &other_ca,
        ],
        Duration::from_secs(20),
    );
    out.assert_one_line_failure(1, &["certificate not trusted", "127.0.0.1", "--quic-ca"]);
}

#[test]
fn handshakes_are_bounded_and_a_stalled_one_is_closed() {
    let Some(py) = python("--max-handshakes and --preamble-timeout on --quic-perf") else {
        return;
    };
    // Two handshakes at once, 1 s each at most. Three clients answer the
    // Retry and fall silent mid-handshake: two are accepted and closed
    // when their second runs out, the third is refused at once.
    let s = PerfServer::start(&["--max-handshakes", "2", "--preamble-timeout", "1"]);
    let out = Proc::spawn_program(
        py,
        &[PEER, "--stall", &s.addr(), "--count", "3", "--quiet", "2.5"],
    )
    .finish(Duration::from_secs(30));
    let v: Value = serde_json::from_str(out.stdout.lines().last().unwrap_or("{}"))
        .unwrap_or_else(|e| panic!("stall printed no JSON ({e})\n{}", out.describe()));
    let codes: Vec<u64> = v["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c["code"]
                .as_u64()
                .unwrap_or_else(|| panic!("a stalled handshake was left open: {v}"))
        })
        .collect();
    // CONNECTION_REFUSED (0x2) for one; the others closed by the server
    // (an application close during the handshake reaches the client as
    // APPLICATION_ERROR, 0xc, RFC 9000 10.2.3).
    assert_eq!(codes.iter().filter(|&&c| c == 0x2).count(), 1, "{v}");
    assert_eq!(codes.iter().filter(|&&c| c == 0xc).count(), 2, "{v}");
    s.wait_for_log("handshake not complete within 1 s (--preamble-timeout)", 2);
    s.wait_for_log("refused: server busy", 1);
    assert!(s.log().contains("--max-handshakes limit"), "{}", s.log());
    // Their places are given back: a real client is served.
    let (c, out) = peer_client(py, &s.addr(), 0, 1000, 1);
    assert!(c.get("error").is_none(), "{c}\n{}", out.describe());
}
