//! Agents (`xferlab server --agent`) over loopback, with real processes:
//! a controller (`xferlab order`) orders an agent to run a test against
//! a second real server and gets the result back; an agent refuses what
//! its key, --agent-targets and budgets do not allow, one line each and
//! logged; and an order's test never outlives its controller or its
//! agent.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;

/// A key file that lives as long as the guard.
struct Key(PathBuf);

impl Key {
    fn new(tag: &str, key: &str) -> Key {
        let p = std::env::temp_dir().join(format!("xferlab-agent-{}-{tag}", std::process::id()));
        std::fs::write(&p, format!("{key}\n")).unwrap();
        Key(p)
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

const KEY: &str = "the-agent-key-0123456789abcdef";

fn agent(key: &Key, extra: &[&str]) -> Server {
    let mut args = vec!["--agent", "--auth-key", key.path()];
    args.extend_from_slice(extra);
    Server::start_with(&args)
}

/// `xferlab order --agent 127.0.0.1:PORT --auth-key KEY ARGV...`.
fn order_args<'a>(agent: &'a str, key: &'a Key, argv: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["order", "--agent", agent, "--auth-key", key.path()];
    a.extend_from_slice(argv);
    a
}

/// The pids of `pid`'s children (every thread's).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Whether process `pid` still exists (a zombie counts: it was not reaped).
fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn wait_gone(pid: u32, what: &str) {
    let t = Instant::now();
    while exists(pid) {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{what} (pid {pid}) is still there after 5 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_order_runs_a_real_test_against_another_server_and_brings_its_result_back() {
    let key = Key::new("ok", KEY);
    let target = Server::start();
    let ag = agent(&key, &["--agent-targets", "127.0.0.0/8"]);
    assert!(
        ag.log().contains("agent: orders to 127.0.0.0/8"),
        "{}",
        ag.log()
    );
    let a = ag.addr().to_string();
    let port = target.port.to_string();
    let argv = ["stream", "127.0.0.1", "-p", &port, "-t", "1", "-P", "2"];
    let out = run(&order_args(&a, &key, &argv), deadline_for(1.0));
    out.assert_success();
    let r = jsonl_result(&out);
    validate_schema(&r);
    assert_eq!(r["status"], "ok", "{r}");
    // The test ran against the server named, as a client of it.
    assert_eq!(r["server_address"], format!("127.0.0.1:{port}"), "{r}");
    let flows = r["client"]["flows"].as_array().expect("client flows");
    assert_eq!(flows.len(), 2, "{r}");
    for f in flows {
        assert!(
            f["total"]["bytes"].as_u64().unwrap_or(0) > 0,
            "a flow moved nothing: {f}"
        );
    }
    // The order's lines came as they happened: intervals before the result.
    assert!(
        out.stdout
            .lines()
            .any(|l| l.contains("\"event\":\"interval\"")),
        "{}",
        out.describe()
    );
    // The target served a test; the agent logged who asked for what.
    target.wait_for_log("done:", 1, SLACK);
    let log = ag.log();
    assert!(
        log.contains("127.0.0.1:")
            && log.contains(&format!("order [stream 127.0.0.1 -p {port} -t 1 -P 2]")),
        "{log}"
    );
    ag.wait_for_log("done: exit 0", 1, SLACK);
    // rr too, with its own section of the result.
    let out = run(
        &order_args(&a, &key, &["rr", "127.0.0.1", "-p", &port, "-t", "0.5"]),
        deadline_for(0.5),
    );
    out.assert_success();
    let r = jsonl_result(&out);
    validate_schema(&r);
    assert!(
        r["client"]["pattern"]["flows"][0]["total"]["transactions"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{}",
        r["client"]["pattern"]
    );
    // A series verb comes back as its one JSON report.
    let out = run(
        &order_args(
            &a,
            &key,
            &[
                "cbr",
                "127.0.0.1",
                "-p",
                &port,
                "-b",
                "1M",
                "-t",
                "0.5",
                // Judged loosely: what is checked is that the report
                // comes back, not this host's verdict.
                "--max-loss",
                "100",
                "--max-late",
                "100",
                "--max-host-drops",
                "1000000",
            ],
        ),
        deadline_for(0.5),
    );
    out.assert_success();
    let report: serde_json::Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", out.describe()));
    assert!(report.is_object(), "{report}");
}

#[test]
fn an_agent_refuses_orders_it_may_not_run_with_one_line_each_and_logs_them() {
    let key = Key::new("refusals", KEY);
    let wrong = Key::new("wrong", "not-the-agent-key-0123456789");
    let ag = agent(
        &key,
        &[
            "--agent-targets",
            "127.0.0.0/8",
            "--max-duration",
            "10",
            "--max-flows",
            "4",
            "--max-rate",
            "50M",
        ],
    );
    let a = ag.addr().to_string();
    let cases: &[(&Key, &[&str], &[&str], &str)] = &[
        (
            &wrong,
            &["stream", "127.0.0.1", "-t", "1"],
            &["refused", "authentication failed"],
            "authentication failed",
        ),
        (
            &key,
            &["stream", "10.255.0.1", "-t", "1"],
            &[
                "10.255.0.1",
                "outside this agent's --agent-targets (127.0.0.0/8)",
            ],
            "refused (target)",
        ),
        (
            &key,
            &["stream", "127.0.0.1", "-u", "-b", "1M", "-t", "20"],
            &["runs 20 s", "--max-duration of 10"],
            "--max-duration of 10",
        ),
        (
            &key,
            &[
                "stream",
                "127.0.0.1",
                "-u",
                "-b",
                "1M",
                "-P",
                "5",
                "-t",
                "1",
            ],
            &["5 flows", "--max-flows of 4"],
            "--max-flows of 4",
        ),
        (
            &key,
            &[
                "stream",
                "127.0.0.1",
                "-u",
                "-b",
                "20M",
                "-P",
                "3",
                "-t",
                "1",
            ],
            &["60.0 Mbits/sec in total", "--max-rate of 50"],
            "--max-rate of 50",
        ),
        (
            &key,
            &["stream", "127.0.0.1", "-t", "1"],
            &["unpaced", "--max-rate"],
            "unpaced",
        ),
        (
            &key,
            &["stream", "127.0.0.1", "-o", "/tmp/x.json", "-t", "1"],
            &["-o/--output is not allowed"],
            "-o/--output is not allowed",
        ),
        (
            &key,
            &["server", "-p", "1"],
            &["`server` is not a test"],
            "`server` is not a test",
        ),
        (
            &key,
            &["lab", "stream"],
            &["`lab` is not a test"],
            "`lab` is not a test",
        ),
    ];
    for (k, argv, needles, logged) in cases {
        let out = run(&order_args(&a, k, argv), SLACK);
        let line = out.assert_one_line_failure(2, needles);
        assert!(out.stdout.is_empty(), "{}", out.describe());
        ag.wait_for_log(logged, 1, SLACK);
        // Refused before anything ran: the agent started no test.
        assert!(
            children(ag.pid()).is_empty(),
            "{line}: the agent has a child"
        );
    }
    // A server that is not an agent says so.
    let plain = Server::start();
    let out = run(
        &order_args(
            &plain.addr().to_string(),
            &key,
            &["stream", "127.0.0.1", "-t", "1"],
        ),
        SLACK,
    );
    out.assert_one_line_failure(2, &["takes no orders", "--agent"]);
}

#[test]
fn an_agent_without_a_key_or_with_a_bad_network_does_not_start() {
    let port = free_port().to_string();
    let out = run(&["server", "--agent", "-p", &port], SLACK);
    out.assert_one_line_failure(2, &["--agent needs --auth-key"]);
    let key = Key::new("start", KEY);
    let out = run(
        &[
            "server",
            "--agent",
            "--auth-key",
            key.path(),
            "--agent-targets",
            "10.0.0.0/33",
            "-p",
            &port,
        ],
        SLACK,
    );
    out.assert_one_line_failure(2, &["10.0.0.0/33", "not a network"]);
    // Nobody there: unreachable, at once.
    let nobody = format!("127.0.0.1:{}", free_port());
    let out = run(
        &order_args(&nobody, &key, &["stream", "127.0.0.1", "-t", "1"]),
        SLACK,
    );
    out.assert_one_line_failure(1, &["cannot reach agent", "refused"]);
}

#[test]
fn a_controller_that_goes_away_takes_its_test_with_it() {
    let key = Key::new("gone", KEY);
    let target = Server::start();
    let ag = agent(&key, &["--agent-targets", "127.0.0.1"]);
    let a = ag.addr().to_string();
    let port = target.port.to_string();
    let mut ctl = Proc::spawn(&order_args(
        &a,
        &key,
        &["stream", "127.0.0.1", "-p", &port, "-t", "30", "-i", "0.2"],
    ));
    ctl.wait_for_data_interval();
    let kids = children(ag.pid());
    assert_eq!(kids.len(), 1, "the agent runs one test: {kids:?}");
    // One order at a time (--agent-max-orders 1): a second is refused.
    let out = run(
        &order_args(&a, &key, &["stream", "127.0.0.1", "-p", &port, "-t", "1"]),
        SLACK,
    );
    out.assert_one_line_failure(2, &["agent busy", "--agent-max-orders"]);
    ctl.kill();
    wait_gone(kids[0], "the order's test after its controller died");
    ag.wait_for_log("failed: stopped: the controller went away", 1, SLACK);
    target.wait_for_log("ended:", 1, SLACK);
}

#[test]
fn a_killed_agent_is_lost_promptly_and_its_test_dies_with_it() {
    let key = Key::new("killed", KEY);
    let target = Server::start();
    let mut ag = agent(&key, &["--agent-targets", "127.0.0.1"]);
    let a = ag.addr().to_string();
    let port = target.port.to_string();
    let ctl = Proc::spawn(&order_args(
        &a,
        &key,
        &["stream", "127.0.0.1", "-p", &port, "-t", "30", "-i", "0.2"],
    ));
    ctl.wait_for_data_interval();
    let kids = children(ag.pid());
    assert_eq!(kids.len(), 1, "the agent runs one test: {kids:?}");
    ag.proc.kill();
    let out = ctl.finish(SLACK);
    let line = out.assert_one_line(&["lost agent", "lines of output"]);
    assert_eq!(out.code, Some(1), "{line}");
    assert!(
        out.elapsed < Duration::from_secs(10),
        "lost only after {:?}",
        out.elapsed
    );
    wait_gone(kids[0], "the order's test after its agent died");
}

#[test]
fn ctrl_c_at_the_controller_stops_the_order_on_the_agent() {
    let key = Key::new("ctrlc", KEY);
    let target = Server::start();
    let ag = agent(&key, &["--agent-targets", "127.0.0.1"]);
    let a = ag.addr().to_string();
    let port = target.port.to_string();
    let mut ctl = Proc::spawn(&order_args(
        &a,
        &key,
        &["stream", "127.0.0.1", "-p", &port, "-t", "30", "-i", "0.2"],
    ));
    ctl.wait_for_data_interval();
    let kids = children(ag.pid());
    assert_eq!(kids.len(), 1, "the agent runs one test: {kids:?}");
    ctl.signal(libc::SIGINT);
    let out = ctl.finish(SLACK);
    let line = out.assert_one_line(&["stopped here"]);
    assert_eq!(out.code, Some(130), "{line}");
    wait_gone(kids[0], "the order's test after Ctrl-C at its controller");
    ag.wait_for_log("failed: stopped: the controller went away", 1, SLACK);
}
