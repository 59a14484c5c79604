//! Experiments across hosts with the real components: three network
//! namespaces joined by a bridge, each running a real `xferlab server
//! --agent`, and `xferlab run` on a fourth (the controller, on the bridge)
//! ordering a scenario's points `@a:b`, `@b:c`, `@c:a` from their client's
//! agent. The results land in the controller's store with their hosts; a
//! SIGKILL of one agent mid-run fails only the points it takes part in,
//! and running again after restarting it retries only those.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{ip, is_root, run, Proc, BIN};
use rusqlite::Connection;
use serde_json::Value;

/// The test's namespaces and files, removed when it ends, however it ends
/// (the agents, `Proc`s, are killed by their own drops first: they are
/// declared after it).
struct Lab {
    tag: String,
    dir: PathBuf,
}

impl Lab {
    fn ns(&self, host: &str) -> String {
        format!("{}-{host}", self.tag)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for h in ["a", "b", "c", "ctl"] {
            Command::new("ip")
                .args(["netns", "del", &self.ns(h)])
                .status()
                .ok();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const HOSTS: [(&str, &str); 3] = [("a", "10.88.0.1"), ("b", "10.88.0.2"), ("c", "10.88.0.3")];
const AGENT_PORT: &str = "5290";

/// Namespaces a, b, c and the controller's, ctl, which holds the bridge
/// all three hang on (10.88.0.0/24; ctl is .254).
fn lab() -> Lab {
    let tag = format!("xfl-h{}", std::process::id());
    let dir = std::env::temp_dir().join(&tag);
    std::fs::create_dir_all(&dir).unwrap();
    let lab = Lab { tag, dir };
    let ctl = lab.ns("ctl");
    ip(&["netns", "add", &ctl]);
    ip(&["-n", &ctl, "link", "set", "lo", "up"]);
    ip(&["-n", &ctl, "link", "add", "br0", "type", "bridge"]);
    ip(&["-n", &ctl, "addr", "add", "10.88.0.254/24", "dev", "br0"]);
    ip(&["-n", &ctl, "link", "set", "br0", "up"]);
    for (h, addr) in HOSTS {
        let ns = lab.ns(h);
        ip(&["netns", "add", &ns]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        let port = format!("p{h}");
        ip(&[
            "-n", &ctl, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns,
        ]);
        ip(&["-n", &ctl, "link", "set", &port, "master", "br0", "up"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
    }
    lab
}

/// `xferlab server --agent` in host `h`'s namespace, waited for until it
/// says it listens.
fn agent(lab: &Lab, h: &str, key: &Path) -> Proc {
    let ns = lab.ns(h);
    let args = [
        "netns",
        "exec",
        &ns,
        BIN,
        "server",
        "-p",
        AGENT_PORT,
        "--iperf3-port",
        "off",
        "--auth-key",
        key.to_str().unwrap(),
        "--agent",
        "--agent-targets",
        "10.88.0.0/24",
    ];
    let p = Proc::spawn_program("ip", &args);
    p.wait_for_stdout("the agent's listening line", Duration::from_secs(10), |o| {
        o.contains("xferlab server listening on")
    });
    p
}

const SCENARIO: &str = r#"
title = "three hosts"
where = "hosts"

[command]
"a to b" = "@a:b stream -t 1 -i 0.5"
"b to c" = "@b:c stream -t 1 -i 0.5"
"c to a" = "@c:a stream -t 1 -i 0.5"

[hosts.a]
agent = "10.88.0.1:5290"
key = "lab.key"
[hosts.b]
agent = "10.88.0.2:5290"
key = "lab.key"
[hosts.c]
agent = "10.88.0.3:5290"
key = "lab.key"
"#;

/// One stored run: (point idx, attempt, status, error, hosts, result).
type Stored = (
    i64,
    i64,
    String,
    Option<String>,
    [Option<String>; 4],
    Option<String>,
);

fn stored(db: &Path) -> Vec<Stored> {
    let conn = Connection::open(db).unwrap();
    let mut st = conn
        .prepare(
            "SELECT p.idx, r.attempt, r.status, r.error, r.client_host, r.client_agent, \
             r.server_host, r.server_agent, r.result_json \
             FROM runs r JOIN points p ON p.id = r.point_id ORDER BY r.id",
        )
        .unwrap();
    let rows = st
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                [r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?],
                r.get(8)?,
            ))
        })
        .unwrap()
        .collect::<Result<Vec<Stored>, _>>()
        .unwrap();
    rows
}

/// `xferlab run` in the controller's namespace.
fn controller(lab: &Lab, scenario: &Path, db: &Path) -> Proc {
    let ctl = lab.ns("ctl");
    Proc::spawn_program(
        "ip",
        &[
            "netns",
            "exec",
            &ctl,
            BIN,
            "run",
            scenario.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
            "--no-report",
        ],
    )
}

/// A run whose points are ordered from three agents lands in the store
/// with the hosts that ran it and real figures; a SIGKILLed agent fails
/// only its points, with the reason, and the next run retries only those.
#[test]
fn points_across_three_agents_are_stored_with_their_hosts_and_survive_a_dead_agent() {
    assert!(
        is_root(),
        "this test makes network namespaces: run it as root (CI does)"
    );
    let t0 = Instant::now();
    let lab = lab();
    let key = lab.dir.join("lab.key");
    std::fs::write(&key, "a-key-the-three-agents-share\n").unwrap();
    let scenario = lab.dir.join("three.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let db = lab.dir.join("x.db");
    let _a = agent(&lab, "a", &key);
    let _b = agent(&lab, "b", &key);
    let mut c = agent(&lab, "c", &key);

    // Kill c while b's test against c's server runs: b -> c fails
    // mid-test, c -> a finds no agent, a -> b (before) is unaffected.
    let first = controller(&lab, &scenario, &db);
    c.wait_for_stdout("b's test reaching c", Duration::from_secs(30), |o| {
        o.contains("accepted TCP stream")
    });
    c.kill();
    let out = first.finish(Duration::from_secs(60));
    assert_eq!(
        out.code,
        Some(1),
        "failed points: exit 1\n{}",
        out.describe()
    );
    assert!(
        out.stderr.contains("1 runs ok") && out.stderr.contains("2 failed"),
        "{}",
        out.stderr
    );
    let runs = stored(&db);
    assert_eq!(runs.len(), 3, "{runs:?}");
    let by_point = |i: i64| runs.iter().find(|r| r.0 == i).unwrap();
    assert_eq!(
        by_point(0).2,
        "ok",
        "a -> b before the kill: {:?}",
        by_point(0)
    );
    for i in [1, 2] {
        let r = by_point(i);
        assert_ne!(r.2, "ok", "{r:?}");
        assert!(
            r.3.as_deref().is_some_and(|e| !e.is_empty()),
            "a failed run keeps its reason: {r:?}"
        );
    }
    for i in [1, 2] {
        eprintln!(
            "after the kill, point {i}: {:?} {:?}",
            by_point(i).2,
            by_point(i).3
        );
    }
    let why = by_point(2).3.clone().unwrap();
    assert!(
        why.starts_with("host c: ") && why.contains("10.88.0.3:5290"),
        "the reason names the host and its agent: {why}"
    );

    // Restart c; the same command again retries the two failed points only.
    let _c = agent(&lab, "c", &key);
    let second = controller(&lab, &scenario, &db).finish(Duration::from_secs(60));
    assert_eq!(second.code, Some(0), "{}", second.describe());
    assert!(
        second.stderr.contains("2 runs ok, 0 failed"),
        "{}",
        second.stderr
    );
    let runs = stored(&db);
    assert_eq!(runs.len(), 5, "a -> b is not run again: {runs:?}");
    let latest: Vec<&Stored> = (0..3)
        .map(|i| {
            runs.iter()
                .filter(|r| r.0 == i)
                .max_by_key(|r| r.1)
                .unwrap()
        })
        .collect();
    assert_eq!(latest[0].1, 1);
    let want = [("a", "b"), ("b", "c"), ("c", "a")];
    for (r, (client, server)) in latest.iter().zip(want) {
        assert_eq!(r.2, "ok", "{r:?}");
        let agent_of = |h: &str| {
            let addr = HOSTS.iter().find(|(n, _)| *n == h).unwrap().1;
            Some(format!("{addr}:{AGENT_PORT}"))
        };
        assert_eq!(
            r.4,
            [
                Some(client.to_string()),
                agent_of(client),
                Some(server.to_string()),
                agent_of(server)
            ],
            "hosts of {r:?}"
        );
        // Real figures from the agent's test: the client's flow went to
        // the server host's address, and bytes arrived there.
        let doc: Value = serde_json::from_str(r.5.as_deref().unwrap()).unwrap();
        let server_addr = HOSTS.iter().find(|(n, _)| *n == server).unwrap().1;
        let remote = doc
            .pointer("/client/flows/0/remote")
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(
            remote.starts_with(&format!("{server_addr}:")),
            "the test of {client} -> {server} went to {remote}"
        );
        let received = doc
            .pointer("/server/flows/0/total/bytes")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        assert!(
            received > 0,
            "{client} -> {server}: no bytes received: {doc}"
        );
    }
    // `db show` names the hosts of each run.
    let show = run(
        &["db", "show", "three", "--db", db.to_str().unwrap()],
        Duration::from_secs(10),
    );
    show.assert_success();
    for pair in ["a -> b", "b -> c", "c -> a"] {
        assert!(show.stdout.contains(pair), "{}", show.stdout);
    }
    eprintln!("wall time {:.1} s", t0.elapsed().as_secs_f64());
}

/// Bad scenario input across hosts: one line naming the file, the line
/// and the fix, exit 2, no store created.
#[test]
fn bad_host_scenarios_name_file_line_and_fix() {
    let dir = std::env::temp_dir().join(format!("xfl-hbad{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("lab.key"), "a-key-the-three-agents-share\n").unwrap();
    let cases = [
        (
            "lab.key\"",
            "nokey\"",
            "[hosts.a] key = \"nokey\": cannot read",
        ),
        (
            "@c:a",
            "@c:d",
            "no host `d` (the server); declare [hosts.d]",
        ),
        ("\"@b:c stream", "\"stream", "starts with `@CLIENT:SERVER`"),
        (
            "10.88.0.2:5290",
            "10.88.0.2",
            "[hosts.b] agent = \"10.88.0.2\" is not ADDR:PORT",
        ),
    ];
    for (from, to, needle) in cases {
        let path = dir.join("bad.toml");
        std::fs::write(&path, SCENARIO.replacen(from, to, 1)).unwrap();
        let db = dir.join("x.db");
        let out = run(
            &[
                "run",
                path.to_str().unwrap(),
                "--db",
                db.to_str().unwrap(),
                "--dry-run",
            ],
            Duration::from_secs(10),
        );
        let line = out.assert_one_line_failure(2, &[needle]);
        assert!(line.contains(&format!("{}:", path.display())), "{line}");
        assert!(!db.exists());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An agent busy with another controller's order (at its
/// `--agent-max-orders`) says so; the runner asks again until it is free
/// instead of failing the point. On loopback, no namespaces needed.
#[test]
fn a_busy_agent_is_asked_again_not_failed() {
    let dir = std::env::temp_dir().join(format!("xfl-hbusy{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("lab.key");
    std::fs::write(&key, "a-key-the-three-agents-share\n").unwrap();
    let key_s = key.to_str().unwrap();
    let agent = common::Server::start_with(&[
        "--auth-key",
        key_s,
        "--agent",
        "--agent-targets",
        "127.0.0.0/8",
        "--agent-max-orders",
        "1",
    ]);
    let at = format!("127.0.0.1:{}", agent.port);
    let port = agent.port.to_string();
    // Another controller's order holds the agent's only place for 1.5 s.
    let other = Proc::spawn(&[
        "order",
        "--agent",
        &at,
        "--auth-key",
        key_s,
        "stream",
        "127.0.0.1",
        "-p",
        &port,
        "-t",
        "1.5",
    ]);
    agent.wait_for_log("accepted: stream", 1, Duration::from_secs(10));
    let scenario = dir.join("busy.toml");
    std::fs::write(
        &scenario,
        format!(
            "title = \"busy\"\nwhere = \"hosts\"\ncommand = \"@a:a stream -t 0.2\"\n\
             [hosts.a]\nagent = \"{at}\"\nkey = \"lab.key\"\n"
        ),
    )
    .unwrap();
    let db = dir.join("x.db");
    let out = run(
        &[
            "run",
            scenario.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
            "--no-report",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(
        out.code,
        Some(0),
        "{}\n--- agent ---\n{}",
        out.describe(),
        agent.log()
    );
    assert!(
        agent.log().contains("refused: agent busy"),
        "the point came while the agent was busy: {}",
        agent.log()
    );
    let other = other.finish(Duration::from_secs(15));
    assert_eq!(other.code, Some(0), "{}", other.describe());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ctrl-C of the runner while an agent runs a point: the point is stored
/// as interrupted (exit 130), the agent stops its test when the runner's
/// connection closes, and the same command again runs what is missing.
#[test]
fn an_interrupted_run_across_hosts_resumes() {
    let dir = std::env::temp_dir().join(format!("xfl-hint{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("lab.key");
    std::fs::write(&key, "a-key-the-three-agents-share\n").unwrap();
    let agent = common::Server::start_with(&[
        "--auth-key",
        key.to_str().unwrap(),
        "--agent",
        "--agent-targets",
        "127.0.0.0/8",
    ]);
    let scenario = dir.join("int.toml");
    std::fs::write(
        &scenario,
        format!(
            "title = \"int\"\nwhere = \"hosts\"\ncommand = \"@a:a stream -i 0\"\n\
             [matrix]\n\"-t\" = [1, 0.3]\n\
             [hosts.a]\nagent = \"127.0.0.1:{}\"\nkey = \"lab.key\"\n",
            agent.port
        ),
    )
    .unwrap();
    let db = dir.join("x.db");
    let args = [
        "run",
        scenario.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
        "--no-report",
    ];
    let mut first = Proc::spawn(&args);
    agent.wait_for_log("accepted TCP stream", 1, Duration::from_secs(10));
    first.signal(libc::SIGINT);
    let out = first.finish(Duration::from_secs(10));
    assert_eq!(out.code, Some(130), "{}", out.describe());
    // The agent stops the 1 s test, before its end, once the runner's connection is gone.
    agent.wait_for_log("the controller went away", 1, Duration::from_secs(5));
    let runs = stored(&db);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].2, "interrupted", "{runs:?}");
    // Resumed: the interrupted point again and the one never started.
    let second = run(&args, Duration::from_secs(30));
    assert_eq!(second.code, Some(0), "{}", second.describe());
    let runs = stored(&db);
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert!(runs[1..].iter().all(|r| r.2 == "ok"), "{runs:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
