//! One order: an xferlab command line (without the program name) that a
//! controller asks this host to run as the client. [`check`] decides
//! whether it may run here: a test verb with an explicit server, no flag
//! that touches this host's files or processes, every address the server
//! resolves to inside `--agent-targets`, and the test within the server's
//! budgets, so that an agent cannot be turned into a traffic cannon.
//! [`run`] runs a checked order as a child process of this very binary
//! (the same verbs, flags and result schema as a local run), streams its
//! JSON lines and returns the result document; the child is killed and
//! reaped when the order is stopped, overruns its deadline or anything
//! fails, and dies with the agent (PR_SET_PDEATHSIG).

use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use xferlab_core::spec::{Limit, TestSpec};
use xferlab_core::transport::Carrier;
use xferlab_core::units::RateUnit;

use crate::net::{self, Family};
use crate::session::budget::Budgets;
use crate::sys::process::{die_with_parent, signal_child, Signal};

/// A network an order's server may be in (`--agent-targets`).
pub type Cidr = ipnet::IpNet;

/// Parses an order's command line with the binary's own clap definitions
/// (those live in `cli`, which only `main` may use, so main hands this in).
pub type Planner = Arc<dyn Fn(&[String]) -> Result<OrderPlan, PlanError> + Send + Sync>;

/// What an agent allows, built by main from the server's flags.
#[derive(Clone)]
pub struct Policy {
    /// `--agent-targets`: the networks an order's server may be in; empty
    /// allows none.
    pub targets: Vec<Cidr>,
    /// The server's budgets (`--max-rate`, `--max-flows`,
    /// `--min-interval`), applied to the traffic an order makes.
    pub budgets: Budgets,
    /// `--max-duration`: the longest an order may run, warm-up and every
    /// test of a series included.
    pub max_duration: Duration,
    /// The server's `--auth-key` file, passed to the child as its
    /// `--auth-key` (a client answers a challenge with its first key, and
    /// ignores it for a server without one).
    pub key_file: Option<PathBuf>,
    /// Parses an order's argv.
    pub plan: Planner,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("targets", &self.targets)
            .field("budgets", &self.budgets)
            .field("max_duration", &self.max_duration)
            .field("key_file", &self.key_file)
            .finish_non_exhaustive()
    }
}

/// The verbs an order may use: the client tests over sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Stream,
    Rr,
    Cbr,
    Sweep,
}

impl Verb {
    pub fn name(self) -> &'static str {
        match self {
            Verb::Stream => "stream",
            Verb::Rr => "rr",
            Verb::Cbr => "cbr",
            Verb::Sweep => "sweep",
        }
    }

    /// The output format the child is run with: JSON lines (a line per
    /// interval, then the result) where the verb has it; cbr and sweep
    /// write one JSON report at the end.
    fn format(self) -> &'static str {
        match self {
            Verb::Stream | Verb::Rr => "jsonl",
            Verb::Cbr | Verb::Sweep => "json",
        }
    }
}

/// What [`Planner`] reads from an order's argv.
#[derive(Debug, Clone)]
pub struct OrderPlan {
    pub verb: Verb,
    /// The server as named (without `iperf3://`); None: no server named.
    pub host: Option<String>,
    /// Where in the argv the server argument is (it is replaced by the
    /// checked address, so the child cannot resolve the name to another).
    pub host_index: Option<usize>,
    /// The port when HOST names none.
    pub port: u16,
    pub family: Family,
    /// The test (a series' first).
    pub spec: TestSpec,
    /// Tests the order runs (a cbr ladder's steps x --repeat, a sweep's
    /// points); 1 for stream and rr.
    pub tests: u32,
    /// The highest rate per flow any of its tests asks for (bit/s); None:
    /// unpaced. [`asked_rate`] for a single spec.
    pub peak_rate: Option<u64>,
}

/// The rate per flow a spec asks for (bit/s): a datagram test's `-b`, a
/// TCP test's pacing cap (`--fq-rate`); None when unpaced.
pub fn asked_rate(spec: &TestSpec) -> Option<u64> {
    if spec.transport.carrier() == Carrier::Datagrams && spec.pattern.rr().is_none() {
        spec.knobs.rate
    } else {
        spec.knobs.max_pacing_rate.map(|b| b.saturating_mul(8))
    }
}

/// Why the planner refused an argv.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("`{0}` is not a test an agent runs: orders are stream, rr, cbr or sweep")]
    NotATest(String),
    #[error("{flag} is not allowed in an order: {why}")]
    Forbidden {
        flag: &'static str,
        why: &'static str,
    },
    /// The argv does not parse, or its values are refused (the line the
    /// local binary would print).
    #[error("{0}")]
    Usage(String),
}

/// Why an order is refused: one line, sent to the controller and logged.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error("an empty order: send a command line such as `stream HOST -t 5`")]
    Empty,
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(
        "an order must name its server (HOST): an agent does not test against an in-process server"
    )]
    NoTarget,
    #[error("{0}")]
    Resolve(String),
    #[error("{addr}{} is outside this agent's --agent-targets ({allowed}); add its network there to allow it", named(host, addr))]
    Target {
        host: String,
        addr: IpAddr,
        allowed: String,
    },
    #[error("the order runs {seconds} s (warm-up included), more than this agent's --max-duration of {max} s")]
    Duration { seconds: f64, max: f64 },
    /// Flows, interval or rate over the server's budgets.
    #[error("{0}")]
    Budget(String),
}

/// " (NAME)" when the server was named by a name, not its address.
fn named(host: &str, addr: &IpAddr) -> String {
    let bare = host
        .trim_start_matches('[')
        .split(']')
        .next()
        .unwrap_or(host);
    let bare = bare
        .rsplit_once(':')
        .filter(|_| addr.is_ipv4())
        .map_or(bare, |(h, _)| h);
    if bare.parse::<IpAddr>().is_ok_and(|ip| ip == *addr) {
        String::new()
    } else {
        format!(" ({host})")
    }
}

impl Refusal {
    /// A short stable name for the wire and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Empty | Refusal::NoTarget => "usage",
            Refusal::Plan(PlanError::Usage(_)) => "usage",
            Refusal::Plan(PlanError::NotATest(_)) => "verb",
            Refusal::Plan(PlanError::Forbidden { .. }) => "flag",
            Refusal::Resolve(_) => "resolve",
            Refusal::Target { .. } => "target",
            Refusal::Duration { .. } | Refusal::Budget(_) => "budget",
        }
    }
}

/// An order that may run: what the child runs and when it must be done.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The child's argv: the order's, its server replaced by the checked
    /// address, with the output format added (the key is added by [`run`]).
    pub argv: Vec<String>,
    pub plan: OrderPlan,
    /// The address the child tests against.
    pub target: SocketAddr,
    /// How long the child may run before it is killed.
    pub deadline: Duration,
    key_file: Option<PathBuf>,
}

/// Time a test takes beyond its measured seconds (connect, handshake,
/// result exchange), per test; and once per order (start-up).
const GRACE_PER_TEST: Duration = Duration::from_secs(5);
const GRACE: Duration = Duration::from_secs(10);

fn rate(bits: u64) -> String {
    RateUnit::AutoBits.format_rate(bits as f64)
}

/// Checks `argv` against `policy`.
pub fn check(argv: &[String], policy: &Policy) -> Result<Checked, Refusal> {
    if argv.is_empty() {
        return Err(Refusal::Empty);
    }
    let plan = (policy.plan)(argv)?;
    let (Some(host), Some(index)) = (plan.host.clone(), plan.host_index) else {
        return Err(Refusal::NoTarget);
    };
    let addrs =
        net::resolve(&host, plan.port, plan.family).map_err(|e| Refusal::Resolve(e.to_string()))?;
    // Every address the name has: the child gets the first, but a name
    // that also points outside the targets is not one to trust.
    for a in &addrs {
        let ip = net::canonical(*a).ip();
        if !policy.targets.iter().any(|c| c.contains(&ip)) {
            return Err(Refusal::Target {
                host: host.clone(),
                addr: ip,
                allowed: if policy.targets.is_empty() {
                    "none".into()
                } else {
                    policy
                        .targets
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                },
            });
        }
    }
    let target = net::canonical(addrs[0]);
    let spec = &plan.spec;
    let max = policy.max_duration.as_secs_f64();
    let seconds = match spec.limit {
        Limit::Duration { seconds } => Some((seconds + spec.omit_s) * f64::from(plan.tests)),
        // Bytes take as long as they take: the child is held to
        // --max-duration instead.
        Limit::Bytes { .. } | Limit::Open => None,
    };
    if let Some(s) = seconds.filter(|s| *s > max) {
        return Err(Refusal::Duration { seconds: s, max });
    }
    check_budgets(&plan, &policy.budgets)?;
    let deadline = Duration::from_secs_f64(seconds.unwrap_or(max).min(max))
        + GRACE
        + GRACE_PER_TEST.saturating_mul(plan.tests);
    let mut child_argv = argv.to_vec();
    let scheme = if argv[index].starts_with("iperf3://") {
        "iperf3://"
    } else {
        ""
    };
    child_argv[index] = format!("{scheme}{target}");
    child_argv.extend(["--format".to_string(), plan.verb.format().to_string()]);
    Ok(Checked {
        argv: child_argv,
        plan,
        target,
        deadline,
        key_file: policy.key_file.clone(),
    })
}

/// Flows, interval and rate, worded as the server words them for its
/// own clients. Every flow of an order moves traffic this agent causes,
/// whichever way it goes, so all of them count against `--max-rate`.
fn check_budgets(plan: &OrderPlan, b: &Budgets) -> Result<(), Refusal> {
    let spec = &plan.spec;
    let flows = spec.flows().len() as u64 + spec.pattern.rr().map_or(0, |r| r.flows as u64);
    if let Some(max) = b.max_flows {
        if flows > max as u64 {
            return Err(Refusal::Budget(format!(
                "{flows} flows is more than this agent's --max-flows of {max}"
            )));
        }
    }
    if let Some(min) = b.min_interval {
        if spec.interval_s > 0.0 && spec.interval_s < min {
            return Err(Refusal::Budget(format!(
                "-i {} s is finer than this agent's --min-interval of {min} s",
                spec.interval_s
            )));
        }
    }
    if let Some(max) = b.max_rate {
        let Some(per_flow) = plan.peak_rate else {
            return Err(Refusal::Budget(format!(
                "unpaced: this agent runs orders of at most {} in total (--max-rate); pace them with -b (UDP) or --fq-rate (TCP, rr)",
                rate(max)
            )));
        };
        let total = per_flow.saturating_mul(flows);
        if total > max {
            return Err(Refusal::Budget(format!(
                "{} in total ({} x {flows} flows) is more than this agent's --max-rate of {}",
                rate(total),
                rate(per_flow),
                rate(max)
            )));
        }
    }
    Ok(())
}

/// What a finished order produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The result document (`xferlab.result/2`; cbr and sweep: their
    /// JSON report).
    pub doc: serde_json::Value,
    /// The child's exit status (0 ok, 1 test failed, 128+N killed by
    /// signal N), as the local binary's.
    pub exit_code: i32,
    /// The end of the child's stderr (its one-line reason on failure).
    pub stderr: String,
}

/// Why an order that was accepted did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    #[error("cannot start the test ({exe}): {err}")]
    Spawn { exe: String, err: std::io::Error },
    #[error("stopped: the controller went away")]
    Stopped,
    #[error("killed after {seconds:.0} s: the test did not end in time")]
    Deadline { seconds: f64 },
    /// The child ended without a result: its reason (stderr's last line).
    #[error("the test ended without a result (exit {exit_code}): {reason}")]
    NoResult { exit_code: i32, reason: String },
}

/// How much of the child's stderr is kept.
const STDERR_TAIL: usize = 4096;
/// How often the stop flag and the deadline are looked at while the
/// child is silent between its interval lines (the flag is set by the
/// thread that watches the controller's connection).
const TICK: Duration = Duration::from_millis(50);

/// The child, killed and reaped on drop unless it was waited for: no
/// error path leaves it running or a zombie.
struct Reaped(Option<Child>);

impl Reaped {
    fn wait(&mut self) -> i32 {
        let Some(mut c) = self.0.take() else {
            return -1;
        };
        exit_code(c.wait().ok())
    }
    fn kill(&mut self) -> i32 {
        if let Some(c) = &self.0 {
            signal_child(c, Signal::KILL).ok();
        }
        self.wait()
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        self.kill();
    }
}

fn exit_code(s: Option<std::process::ExitStatus>) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match s {
        Some(s) => s.code().or(s.signal().map(|n| 128 + n)).unwrap_or(-1),
        None => -1,
    }
}

/// Runs a checked order: each line the child writes on stdout goes to
/// `on_line` as it comes; the result document is the `result` event's
/// (JSON lines) or the whole output (cbr, sweep).
pub fn run(
    checked: &Checked,
    stop: &AtomicBool,
    on_line: &mut dyn FnMut(&str),
) -> Result<Outcome, OrderError> {
    let exe = std::env::current_exe().map_err(|err| OrderError::Spawn {
        exe: "xferlab".into(),
        err,
    })?;
    let mut cmd = Command::new(&exe);
    cmd.args(&checked.argv);
    if let Some(k) = &checked.key_file {
        cmd.arg("--auth-key").arg(k);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Its own process group: a terminal's Ctrl-C to the agent is not the
    // test's. It dies with the agent's thread that runs it.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    die_with_parent(&mut cmd, Signal::KILL);
    let mut child = cmd.spawn().map_err(|err| OrderError::Spawn {
        exe: exe.display().to_string(),
        err,
    })?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let mut child = Reaped(Some(child));
    let err_reader = stderr.map(|mut s| {
        std::thread::spawn(move || {
            // Keeps the tail only: a chatty child (-vv) costs no memory.
            let mut tail = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 2 * STDERR_TAIL {
                    tail.drain(..tail.len() - STDERR_TAIL);
                }
            }
            let start = tail.len().saturating_sub(STDERR_TAIL);
            String::from_utf8_lossy(&tail[start..]).into_owned()
        })
    });
    let (tx, rx) = mpsc::channel::<String>();
    let out_reader = stdout.map(|s| {
        std::thread::spawn(move || {
            for line in BufReader::new(s).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        })
    });
    let started = Instant::now();
    let jsonl = checked.plan.verb.format() == "jsonl";
    let mut doc = None;
    let mut text = String::new();
    let mut ended = None;
    loop {
        if stop.load(Ordering::Relaxed) {
            ended = Some(OrderError::Stopped);
            break;
        }
        if started.elapsed() > checked.deadline {
            ended = Some(OrderError::Deadline {
                seconds: started.elapsed().as_secs_f64(),
            });
            break;
        }
        match rx.recv_timeout(TICK) {
            Ok(line) => {
                if jsonl {
                    if let Ok(mut v) = serde_json::from_str::<serde_json::Value>(&line) {
                        if v.get("event").and_then(|e| e.as_str()) == Some("result") {
                            doc = v.get_mut("result").map(serde_json::Value::take);
                        }
                    }
                } else {
                    text.push_str(&line);
                    text.push('\n');
                }
                on_line(&line);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let exit_code = if ended.is_some() {
        child.kill()
    } else {
        child.wait()
    };
    // The pipes close with the child (it starts none of its own).
    if let Some(r) = out_reader {
        r.join().ok();
    }
    let stderr = err_reader.and_then(|r| r.join().ok()).unwrap_or_default();
    if let Some(e) = ended {
        return Err(e);
    }
    if !jsonl {
        doc = serde_json::from_str(&text).ok();
    }
    match doc {
        Some(doc) => Ok(Outcome {
            doc,
            exit_code,
            stderr,
        }),
        None => Err(OrderError::NoResult {
            exit_code,
            reason: last_line(&stderr),
        }),
    }
}

/// The child's one-line reason: its last non-empty stderr line, without
/// the `xferlab: ` every error line starts with.
pub fn last_line(stderr: &str) -> String {
    stderr
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.strip_prefix("xferlab: ").unwrap_or(l).to_string())
        .unwrap_or_else(|| "no output".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(targets: &str) -> Policy {
        Policy {
            targets: targets
                .split(',')
                .filter(|t| !t.is_empty())
                .map(|t| t.parse().unwrap())
                .collect(),
            budgets: Budgets::default(),
            max_duration: Duration::from_secs(60),
            key_file: None,
            plan: crate::cli::order::planner(),
        }
    }

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_test_inside_the_targets_runs_against_the_checked_address() {
        let p = policy("127.0.0.0/8,10.1.0.0/16");
        let c = check(&argv("stream -T x 127.0.0.7 -p 6000 -t 2 -P 2"), &p).unwrap();
        assert_eq!(c.target, "127.0.0.7:6000".parse().unwrap());
        assert_eq!(
            c.argv,
            argv("stream -T x 127.0.0.7:6000 -p 6000 -t 2 -P 2 --format jsonl")
        );
        // 2 s, plus the start-up and one test's grace.
        assert_eq!(c.deadline, Duration::from_secs(2) + GRACE + GRACE_PER_TEST);
        let c = check(&argv("cbr 10.1.2.3 --ladder 1M,2M -t 1"), &p).unwrap();
        assert_eq!(c.argv.last().map(String::as_str), Some("json"));
        assert_eq!(c.argv[1], "10.1.2.3:5290");
        // A name is pinned to the address it resolved to.
        let c = check(&argv("rr localhost -4 -t 1"), &p).unwrap();
        assert_eq!(c.argv[1], "127.0.0.1:5290");
    }

    #[test]
    fn targets_outside_the_networks_are_refused() {
        let e = check(&argv("stream 127.0.0.1 -t 1"), &policy("")).unwrap_err();
        assert!(
            matches!(e, Refusal::Target { ref allowed, .. } if allowed == "none"),
            "{e:?}"
        );
        let e = check(&argv("stream 10.2.0.1 -t 1"), &policy("10.1.0.0/16")).unwrap_err();
        assert_eq!(e.code(), "target");
        assert!(e.to_string().contains("10.2.0.1"), "{e}");
        assert!(
            e.to_string().contains("--agent-targets (10.1.0.0/16)"),
            "{e}"
        );
        let e = check(&argv("stream [::1]:5290 -t 1"), &policy("127.0.0.0/8")).unwrap_err();
        assert_eq!(e.code(), "target");
        assert!(check(&argv("stream [::1]:5290 -t 1"), &policy("::1/128")).is_ok());
        assert_eq!(
            check(&argv("stream -t 1"), &policy("0.0.0.0/0")).unwrap_err(),
            Refusal::NoTarget
        );
        assert_eq!(
            check(&[], &policy("0.0.0.0/0")).unwrap_err(),
            Refusal::Empty
        );
    }

    #[test]
    fn orders_over_the_budgets_are_refused_with_the_limit() {
        let mut p = policy("127.0.0.0/8");
        let e = check(&argv("stream 127.0.0.1 -t 50 -O 20"), &p).unwrap_err();
        assert!(
            e.to_string().contains("runs 70 s") && e.to_string().contains("--max-duration of 60"),
            "{e}"
        );
        // A series counts every test.
        let e = check(&argv("cbr 127.0.0.1 --ladder 1M,2M,3M -t 30"), &p).unwrap_err();
        assert!(matches!(e, Refusal::Duration { seconds, .. } if seconds == 90.0));
        p.budgets = Budgets {
            max_flows: Some(4),
            max_rate: Some(10_000_000),
            min_interval: Some(0.5),
            ..Budgets::default()
        };
        let e = check(&argv("stream 127.0.0.1 -u -b 1M -P 3 --bidir -t 1"), &p).unwrap_err();
        assert!(
            e.to_string()
                .contains("6 flows is more than this agent's --max-flows of 4"),
            "{e}"
        );
        let e = check(&argv("stream 127.0.0.1 -u -b 4M -P 3 -t 1"), &p).unwrap_err();
        assert!(e.to_string().contains("--max-rate of 10"), "{e}");
        let e = check(&argv("stream 127.0.0.1 -P 2 -t 1"), &p).unwrap_err();
        assert!(e.to_string().starts_with("unpaced"), "{e}");
        assert!(check(&argv("stream 127.0.0.1 --fq-rate 5M -P 2 -t 1"), &p).is_ok());
        let e = check(&argv("stream 127.0.0.1 -u -b 1M -i 0.1 -t 1"), &p).unwrap_err();
        assert!(e.to_string().contains("--min-interval of 0.5"), "{e}");
        assert!(check(&argv("stream 127.0.0.1 -u -b 1M -i 0 -t 1"), &p).is_ok());
        let e = check(&argv("cbr 127.0.0.1 --ladder 1M,20M -t 1"), &p).unwrap_err();
        assert_eq!(e.code(), "budget");
    }

    #[test]
    fn refusals_from_the_planner_keep_their_line() {
        let p = policy("0.0.0.0/0");
        let e = check(&argv("stream 127.0.0.1 -o /tmp/x"), &p).unwrap_err();
        assert_eq!(e.code(), "flag");
        assert!(
            e.to_string()
                .starts_with("-o/--output is not allowed in an order"),
            "{e}"
        );
        let e = check(&argv("server -p 1"), &p).unwrap_err();
        assert_eq!(e.code(), "verb");
        assert!(e.to_string().contains("`server` is not a test"), "{e}");
    }

    #[test]
    fn the_stderr_reason_is_its_last_line() {
        assert_eq!(
            last_line("warn: x\nxferlab: cannot connect to 1.2.3.4\n\n"),
            "cannot connect to 1.2.3.4"
        );
        assert_eq!(last_line(""), "no output");
    }
}
