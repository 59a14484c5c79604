//! `xferlab server --metrics`: its counters move with what the server
//! does, its probes run real tests (as agent orders) and are bounded in
//! number and time, a bad module file stops it at start-up with the file
//! and line, and a real Prometheus server (Debian's `prometheus`, started
//! here with a generated configuration) scrapes both endpoints between
//! two network namespaces made by the test.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// One HTTP/1.0 GET (the connection closes after the answer): its status
/// and body.
fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp)
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("GET {path}: not an HTTP answer: {resp:?}"));
    let body = resp
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    (status, body)
}

/// The value of the sample whose line starts with `series` (name and
/// labels, exactly as written), if there is one.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Where the server says its metrics endpoint listens.
fn metrics_addr(server: &Server) -> SocketAddr {
    server.wait_for_log("metrics on http://", 1, Duration::from_secs(5));
    let log = server.log();
    let rest = log.split("metrics on http://").nth(1).unwrap();
    rest.split('/').next().unwrap().parse().unwrap()
}

/// Polls `/metrics` until `ok` holds for it (bounded); returns the text.
fn metrics_until(addr: SocketAddr, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, text) = get(addr, "/metrics", &[]);
        assert_eq!(status, 200, "{text}");
        if ok(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "/metrics never showed {what}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn modules_file(dir: &tempdir::Dir, text: &str) -> String {
    let path = dir.path().join("modules.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// A temporary directory removed when dropped.
mod tempdir {
    pub struct Dir(std::path::PathBuf);
    impl Dir {
        pub fn new(tag: &str) -> Dir {
            let p = std::env::temp_dir().join(format!(
                "xferlab-metrics-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        pub fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            std::fs::remove_dir_all(&self.0).ok();
        }
    }
}

/// The endpoint's threads of this server process.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "xfer-metrics")
        })
        .count()
}

/// Silent connections cannot make threads without bound nor hold the
/// endpoint: past the workers and as many waiting, a connection is
/// answered 503 at once; a connection that says nothing is closed after
/// the head timeout (5 s), and `/metrics` answers again.
#[test]
fn a_flood_of_silent_connections_is_bounded_and_outlived() {
    // --max-probes 1: 3 workers, 3 connections may wait.
    let server = Server::start_with(&["--metrics", "127.0.0.1:0", "--max-probes", "1"]);
    let m = metrics_addr(&server);
    assert_eq!(get(m, "/metrics", &[]).0, 200);
    let before = threads(server.pid());
    let t0 = Instant::now();
    let mut silent: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(m).expect("connect"))
        .collect();
    let (status, body) = get(m, "/metrics", &[]);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("busy"), "{body}");
    assert_eq!(
        threads(server.pid()),
        before,
        "threads grew with connections"
    );
    // The six held (three answered by workers, three waiting) are closed
    // by the head timeout, the others were answered 503 at once.
    let mut closed = 0;
    for s in &mut silent {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = Vec::new();
        if s.read_to_end(&mut buf).is_ok() {
            closed += 1;
        }
    }
    assert_eq!(closed, silent.len());
    assert!(t0.elapsed() < Duration::from_secs(19), "{:?}", t0.elapsed());
    let (status, text) = get(m, "/metrics", &[]);
    assert_eq!(status, 200, "{text}");
    // A request that is not HTTP is one line, 400.
    let mut s = TcpStream::connect(m).unwrap();
    s.write_all(b"\x16\x03\x01hello\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");
    assert!(resp.contains("not an HTTP request"), "{resp}");
}

/// A served test moves the served, bytes and active gauges; a test over
/// --max-flows moves the refused counter with its reason.
#[test]
fn metrics_count_served_and_refused_tests_and_what_is_running() {
    let server = Server::start_with(&[
        "--metrics",
        "127.0.0.1:0",
        "--max-flows",
        "2",
        "--max-duration",
        "3",
    ]);
    let m = metrics_addr(&server);
    let (status, text) = get(m, "/metrics", &[]);
    assert_eq!(status, 200);
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert_eq!(
        sample(&text, "xferlab_sessions_active"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "xferlab_sessions_served_total{protocol=\"xferlab\"}"),
        None
    );
    let port = server.port.to_string();
    let client = Proc::spawn(&server.client_args(&port, &["-t", "2", "-P", "2"]));
    metrics_until(m, "a running test with its 2 flows", |t| {
        sample(t, "xferlab_sessions_active") == Some(1.0)
            && sample(t, "xferlab_flows_active") == Some(2.0)
    });
    client.finish(deadline_for(2.0)).assert_success();
    let refused = server.client(&["-t", "1", "-P", "3"], deadline_for(1.0));
    assert_ne!(refused.code, Some(0), "{}", refused.describe());
    let refused = server.client(&["-t", "4"], deadline_for(1.0));
    assert_ne!(refused.code, Some(0), "{}", refused.describe());
    let text = metrics_until(m, "the refusal", |t| {
        sample(
            t,
            "xferlab_sessions_refused_total{protocol=\"xferlab\",reason=\"over_budget\"}",
        ) == Some(1.0)
    });
    assert_eq!(
        sample(&text, "xferlab_sessions_served_total{protocol=\"xferlab\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "xferlab_sessions_refused_total{protocol=\"xferlab\",reason=\"invalid\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "xferlab_sessions_active"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(sample(&text, "xferlab_flows_active"), Some(0.0), "{text}");
    let received = sample(
        &text,
        "xferlab_transferred_bytes_total{protocol=\"xferlab\",direction=\"received\"}",
    )
    .unwrap_or(0.0);
    assert!(received > 1e6, "{text}");
    let (status, body) = get(m, "/probe?module=tcp&target=127.0.0.1", &[]);
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("--probe-modules"), "{body}");
}

/// A wrong key counts as an authentication failure and a refusal for
/// `auth`; a stock iperf3 client's test is served as `iperf3`; an agent's
/// orders are counted served and refused with the refusal's reason.
#[test]
fn auth_failures_iperf3_tests_and_agent_orders_are_counted() {
    let dir = tempdir::Dir::new("auth");
    let keys = dir.path().join("keys");
    let wrong = dir.path().join("wrong");
    std::fs::write(&keys, "0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::write(&wrong, "fedcba9876543210fedcba9876543210\n").unwrap();
    let keys = keys.display().to_string();
    let wrong = wrong.display().to_string();
    let server = Server::start_with(&[
        "--metrics",
        "127.0.0.1:0",
        "--auth-key",
        &keys,
        "--agent",
        "--agent-targets",
        "127.0.0.1/32",
    ]);
    let m = metrics_addr(&server);
    let out = server.client(&["-t", "0.3", "--auth-key", &wrong], deadline_for(0.3));
    assert_ne!(out.code, Some(0), "{}", out.describe());
    let text = metrics_until(m, "the failed authentication", |t| {
        sample(t, "xferlab_auth_failures_total") == Some(1.0)
    });
    assert_eq!(
        sample(
            &text,
            "xferlab_sessions_refused_total{protocol=\"xferlab\",reason=\"auth\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "xferlab_sessions_served_total{protocol=\"xferlab\"}"),
        None,
        "{text}"
    );

    let open = Server::start_with(&["--metrics", "127.0.0.1:0"]);
    let agent = format!("127.0.0.1:{}", server.port);
    let target = format!("127.0.0.1:{}", open.port);
    for (host, code) in [(target.as_str(), 0), ("127.0.0.2", 2)] {
        let out = run(
            &[
                "order",
                "--agent",
                &agent,
                "--auth-key",
                &keys,
                "stream",
                host,
                "-t",
                "0.3",
            ],
            deadline_for(0.3),
        );
        assert_eq!(out.code, Some(code), "{}", out.describe());
    }
    let text = metrics_until(m, "the orders", |t| {
        sample(
            t,
            "xferlab_agent_orders_total{origin=\"controller\",result=\"refused\",reason=\"target\"}",
        ) == Some(1.0)
    });
    assert_eq!(
        sample(
            &text,
            "xferlab_agent_orders_total{origin=\"controller\",result=\"served\",reason=\"\"}"
        ),
        Some(1.0),
        "{text}"
    );

    let m = metrics_addr(&open);
    let port = open.port.to_string();
    let iperf3 = Proc::spawn_program("iperf3", &["-c", "127.0.0.1", "-p", &port, "-t", "1"]);
    let out = iperf3.finish(deadline_for(1.0));
    out.assert_success();
    let text = metrics_until(m, "the iperf3 test", |t| {
        sample(t, "xferlab_sessions_served_total{protocol=\"iperf3\"}") == Some(1.0)
    });
    let received = sample(
        &text,
        "xferlab_transferred_bytes_total{protocol=\"iperf3\",direction=\"received\"}",
    )
    .unwrap_or(0.0);
    assert!(received > 1e6, "{text}");
}

/// A module file that is not TOML, a module that names its server, a
/// module that is not a test: each stops the server at start-up with one
/// line naming the file and line, exit 2.
#[test]
fn a_bad_module_file_is_one_line_with_its_file_and_line() {
    let dir = tempdir::Dir::new("bad");
    for (text, line, needle) in [
        (
            "[modules.tcp]\ncommand = \"stream -t 1\"\n[modules.x\n",
            3,
            "",
        ),
        (
            "[modules.tcp]\ncommand = \"stream -t 1\"\n\n[modules.named]\ncommand = \"stream 10.0.0.1 -t 1\"\n",
            5,
            "names a server",
        ),
        (
            "[modules.odd]\ncommand = \"server -1\"\n",
            2,
            "server",
        ),
        (
            "[modules.tcp]\nargs = \"stream -t 1\"\n",
            2,
            "command",
        ),
    ] {
        let file = modules_file(&dir, text);
        let port = free_port().to_string();
        let out = run(
            &[
                "server",
                "-p",
                &port,
                "--iperf3-port",
                "off",
                "--metrics",
                "127.0.0.1:0",
                "--agent-targets",
                "127.0.0.1/32",
                "--probe-modules",
                &file,
            ],
            Duration::from_secs(10),
        );
        let at = format!("{file}:{line}:");
        let l = out.assert_one_line_failure(2, &[&at, needle]);
        assert!(!out.stdout.contains("listening"), "{l}");
    }
    let out = run(
        &["server", "--metrics", "127.0.0.1:0", "--max-probes", "0"],
        Duration::from_secs(10),
    );
    out.assert_one_line_failure(2, &["--max-probes must be 1 to 64"]);
    // A module this server's budgets always refuse.
    let file = modules_file(&dir, "[modules.long]\ncommand = \"stream -t 5\"\n");
    let port = free_port().to_string();
    let out = run(
        &[
            "server",
            "-p",
            &port,
            "--metrics",
            "127.0.0.1:0",
            "--max-duration",
            "2",
            "--probe-modules",
            &file,
        ],
        Duration::from_secs(10),
    );
    out.assert_one_line_failure(2, &[&format!("{file}:2:"), "--max-duration"]);
    // What the flags need is named.
    let out = run(
        &["server", "--probe-modules", "m.toml"],
        Duration::from_secs(10),
    );
    out.assert_one_line_failure(2, &["not provided: --metrics"]);
    // --metrics on a port in use: one line naming it, exit 1.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let port = free_port().to_string();
    let out = run(
        &[
            "server",
            "-p",
            &port,
            "--iperf3-port",
            "off",
            "--metrics",
            &addr,
        ],
        Duration::from_secs(10),
    );
    out.assert_one_line_failure(1, &[&format!("--metrics {addr}"), "already in use"]);
}

/// Probes: an unknown module and a target outside --agent-targets are
/// 400s with one line (and logged); a probe answers its test's figures; a
/// probe past the scrape timeout answers success 0 at once and its test is
/// killed; probes past --max-probes are 503s.
#[test]
fn probes_run_tests_and_are_bounded_in_number_and_time() {
    let target = Server::start();
    let dir = tempdir::Dir::new("probe");
    let file = modules_file(
        &dir,
        "[modules.tcp]\ncommand = \"stream -t 1\"\n\n[modules.long]\ncommand = \"stream -t 8\"\n",
    );
    let server = Server::start_with(&[
        "--metrics",
        "127.0.0.1:0",
        "--agent-targets",
        "127.0.0.1/32",
        "--probe-modules",
        &file,
        "--max-probes",
        "1",
    ]);
    let m = metrics_addr(&server);
    let t = format!("127.0.0.1:{}", target.port);

    let (status, body) = get(m, &format!("/probe?module=nope&target={t}"), &[]);
    assert_eq!(status, 400, "{body}");
    assert_eq!(body.lines().count(), 1, "{body}");
    assert!(
        body.contains("unknown module \"nope\"") && body.contains("long, tcp"),
        "{body}"
    );
    let (status, body) = get(
        m,
        &format!("/probe?module=tcp&target=127.0.0.2:{}", target.port),
        &[],
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("--agent-targets"), "{body}");
    server.wait_for_log("probe refused", 2, Duration::from_secs(5));
    let text = metrics_until(m, "the refused order", |t| {
        sample(
            t,
            "xferlab_agent_orders_total{origin=\"probe\",result=\"refused\",reason=\"target\"}",
        ) == Some(1.0)
    });
    assert_eq!(
        sample(
            &text,
            "xferlab_probes_total{module=\"tcp\",result=\"refused\"}"
        ),
        Some(1.0),
        "{text}"
    );

    let (status, body) = get(m, &format!("/probe?module=tcp&target={t}"), &[]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(sample(&body, "xferlab_probe_success"), Some(1.0), "{body}");
    let bps = sample(
        &body,
        "xferlab_probe_throughput_bits_per_second{direction=\"c2s\"}",
    )
    .unwrap_or(0.0);
    assert!(bps > 1e6, "{body}");
    assert!(
        sample(&body, "xferlab_probe_rtt_seconds{direction=\"c2s\"}").is_some(),
        "{body}"
    );

    // An 8 s test in a 2 s scrape: answered in time, success 0, and the
    // test is gone soon after (not 8 s later).
    let started = Instant::now();
    let (status, body) = get(
        m,
        &format!("/probe?module=long&target={t}"),
        &[("X-Prometheus-Scrape-Timeout-Seconds", "2")],
    );
    let took = started.elapsed();
    assert_eq!(status, 200, "{body}");
    assert_eq!(sample(&body, "xferlab_probe_success"), Some(0.0), "{body}");
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    assert!(!body.contains("throughput"), "{body}");
    let text = metrics_until(m, "the stopped probe's test gone", |t| {
        sample(t, "xferlab_probes_running") == Some(0.0)
    });
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the probe's test ran on after its timeout:\n{text}"
    );
    assert_eq!(
        sample(
            &text,
            "xferlab_probes_total{module=\"long\",result=\"timeout\"}"
        ),
        Some(1.0),
        "{text}"
    );

    // --max-probes 1: while one runs, the next is a 503.
    let runner = {
        let t = t.clone();
        std::thread::spawn(move || {
            get(
                m,
                &format!("/probe?module=long&target={t}"),
                &[("X-Prometheus-Scrape-Timeout-Seconds", "2.5")],
            )
        })
    };
    metrics_until(m, "a running probe", |t| {
        sample(t, "xferlab_probes_running") == Some(1.0)
    });
    let (status, body) = get(m, &format!("/probe?module=tcp&target={t}"), &[]);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("--max-probes"), "{body}");
    let (status, body) = runner.join().unwrap();
    assert_eq!(status, 200, "{body}");
}

// ------------------------------------------------ Prometheus, namespaces

/// Two namespace hosts (the prober and the target, joined by a veth
/// pair) and a veth pair from this namespace to the prober, for
/// Prometheus; all removed when dropped, however the test ends.
struct Hosts {
    prober: String,
    target: String,
    /// The root end of the link to the prober.
    root_link: String,
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in [&self.prober, &self.target] {
            Command::new("ip").args(["netns", "del", ns]).output().ok();
        }
        // Gone with the prober's namespace, normally: quietly.
        Command::new("ip")
            .args(["link", "del", &self.root_link])
            .output()
            .ok();
    }
}

/// Percent-encodes a query parameter.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Prometheus' configuration: the prober's own counters, and its probes
/// of the target as docs/fleet.md's mesh configuration writes them (a
/// `PROBER>TARGET` pair, split by relabelling: the target into `target=`,
/// the prober's exporter as the address); a 1 s test in a 2 s scrape (a
/// probe that misses it is tried again 2 s later).
const PROMETHEUS_YML: &str = r#"
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: xferlab
    static_configs:
      - targets: ['10.201.0.2:9290']
  - job_name: xferlab_probe
    metrics_path: /probe
    params:
      module: [tcp]
    scrape_interval: 2s
    scrape_timeout: 2s
    static_configs:
      - targets: ['10.201.0.2>10.201.1.2:5290']
    relabel_configs:
      - source_labels: [__address__]
        regex: '.*>(.*)'
        target_label: __param_target
      - source_labels: [__address__]
        regex: '(.*)>.*'
        target_label: prober
      - source_labels: [__param_target]
        target_label: target
      - source_labels: [prober]
        replacement: '${1}:9290'
        target_label: __address__
      - source_labels: [prober, target]
        separator: '>'
        target_label: instance
"#;

/// Waits for `xferlab server` in a namespace to say where it listens.
fn wait_listening(p: &Proc, what: &str) {
    p.wait_for_stdout(what, Duration::from_secs(10), |o| {
        o.contains("xferlab server listening on")
    });
}

/// A real Prometheus scrapes `/metrics` of an `xferlab server --metrics`
/// in one namespace host and `/probe` of it against a second namespace
/// host's server (relabelled as blackbox_exporter's), and the probe's
/// throughput comes back through Prometheus's query API.
#[test]
fn prometheus_scrapes_metrics_and_a_probe_between_namespaces() {
    assert!(
        is_root(),
        "this test makes network namespaces: run it as root (CI does)"
    );
    let prometheus = "/usr/bin/prometheus";
    assert!(
        std::path::Path::new(prometheus).exists(),
        "{prometheus} is missing: apt-get install prometheus (.ci/run does)"
    );
    let id = std::process::id() % 100_000;
    let hosts = Hosts {
        prober: format!("xfl-prA-{id}"),
        target: format!("xfl-prB-{id}"),
        root_link: format!("xpr{id}r"),
    };
    // 10.201.0.0/24 between this namespace and the prober, 10.201.1.0/24
    // between the prober and the target.
    ip(&["netns", "add", &hosts.prober]);
    ip(&["netns", "add", &hosts.target]);
    let (ra, ab, ba) = (&hosts.root_link, format!("xpr{id}a"), format!("xpr{id}b"));
    let pa = format!("xpr{id}p");
    ip(&["link", "add", ra, "type", "veth", "peer", "name", &pa]);
    ip(&["link", "set", &pa, "netns", &hosts.prober]);
    ip(&["link", "add", &ab, "type", "veth", "peer", "name", &ba]);
    ip(&["link", "set", &ab, "netns", &hosts.prober]);
    ip(&["link", "set", &ba, "netns", &hosts.target]);
    ip(&["addr", "add", "10.201.0.1/24", "dev", ra]);
    ip(&["link", "set", ra, "up"]);
    for (ns, dev, addr) in [
        (&hosts.prober, &pa, "10.201.0.2/24"),
        (&hosts.prober, &ab, "10.201.1.1/24"),
        (&hosts.target, &ba, "10.201.1.2/24"),
    ] {
        ip(&["-n", ns, "addr", "add", addr, "dev", dev]);
        ip(&["-n", ns, "link", "set", dev, "up"]);
        ip(&["-n", ns, "link", "set", "lo", "up"]);
    }
    let dir = tempdir::Dir::new("prom");
    let modules = modules_file(&dir, "[modules.tcp]\ncommand = \"stream -t 1\"\n");
    let target = Proc::spawn_program(
        "ip",
        &[
            "netns",
            "exec",
            &hosts.target,
            BIN,
            "server",
            "-B",
            "10.201.1.2",
            "-p",
            "5290",
            "--iperf3-port",
            "off",
        ],
    );
    let prober = Proc::spawn_program(
        "ip",
        &[
            "netns",
            "exec",
            &hosts.prober,
            BIN,
            "server",
            "-p",
            "5290",
            "--iperf3-port",
            "off",
            "--metrics",
            "10.201.0.2:9290",
            "--agent-targets",
            "10.201.1.0/24",
            "--probe-modules",
            &modules,
        ],
    );
    wait_listening(&target, "listen");
    wait_listening(&prober, "listen");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(&config, PROMETHEUS_YML).unwrap();
    let web = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let storage = dir.path().join("tsdb");
    let prom = Proc::spawn_program(
        prometheus,
        &[
            &format!("--config.file={}", config.display()),
            &format!("--storage.tsdb.path={}", storage.display()),
            &format!("--web.listen-address={web}"),
        ],
    );
    // Wait for events, not time: the query API answers the probe's
    // throughput once a probe scrape has landed (Prometheus applies its
    // scrape targets about 5 s after it starts: most of this test's 7 s).
    let deadline = Instant::now() + Duration::from_secs(30);
    let query = |q: &str| -> Option<f64> {
        let (status, body) = get(web, &format!("/api/v1/query?query={}", enc(q)), &[]);
        if status != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    };
    let (mut bps, mut served) = (None, None);
    while bps.is_none() || served.is_none() {
        assert!(
            Instant::now() < deadline,
            "Prometheus did not get the probe's throughput and the served count within 30 s\n\
             --- prometheus ---\n{}\n--- prober ---\n{}\n{}",
            prom.stderr(),
            prober.stdout(),
            prober.stderr()
        );
        std::thread::sleep(Duration::from_millis(250));
        if TcpStream::connect_timeout(&web, Duration::from_millis(200)).is_err() {
            continue;
        }
        bps = bps.or_else(|| {
            query("xferlab_probe_throughput_bits_per_second{job=\"xferlab_probe\",prober=\"10.201.0.2\",target=\"10.201.1.2:5290\",direction=\"c2s\"}")
        });
        served = served.or_else(|| {
            query("xferlab_probes_total{job=\"xferlab\",module=\"tcp\",result=\"success\"}")
                .filter(|n| *n >= 1.0)
        });
    }
    assert!(bps.unwrap() > 1e6, "{bps:?}");
    drop(prom);
    drop(prober);
    drop(target);
    drop(hosts);
}
