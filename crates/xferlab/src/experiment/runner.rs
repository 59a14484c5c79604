//! `xferlab run SCENARIO.toml`: expands a scenario into ordinary xferlab
//! invocations, runs those still missing, and commits each run to the
//! results store the moment it ends.
//!
//! Every point is a child process of this binary (`xferlab stream ...
//! -J -o FILE`), so a point runs exactly as the same command typed by
//! hand, and a point that crashes takes nothing else with it. Children
//! get SIGTERM if the runner dies (PR_SET_PDEATHSIG), which every verb
//! treats like Ctrl-C: a lab tears its namespaces down.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use xferlab_core::experiment::metrics;
use xferlab_core::experiment::plan::{self, RunSlot};
use xferlab_core::experiment::scenario::{Place, Point, Scale, Scenario};
use xferlab_core::experiment::stats;

use super::argv;
use super::hosts;
use super::store::{now_rfc3339, NewExperiment, NewPoint, NewRun, RunHosts, Store, StoreError};
use super::vm;

/// What `xferlab run` was asked to do.
pub struct RunOptions {
    pub scenario: PathBuf,
    pub scale: Scale,
    pub db: PathBuf,
    pub dry_run: bool,
    pub fresh: bool,
    pub resume_anyway: bool,
    pub report_dir: Option<PathBuf>,
    pub no_report: bool,
    /// More attempts for a lab run invalid for timing alone.
    pub retry_invalid: u32,
    /// The binary's command line, to check the points against.
    pub grammar: argv::Grammar,
}

fn fail(msg: &str, code: u8) -> ExitCode {
    eprintln!("xferlab: {msg}");
    ExitCode::from(code)
}

/// FNV-1a, 64 bits: detects a changed scenario file (not a security
/// hash; nobody gains from forging a collision here).
pub fn text_hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A run's outcome as the store keeps it.
struct Outcome {
    status: &'static str,
    exit_code: Option<i32>,
    error: Option<String>,
    json: Option<String>,
}

impl Outcome {
    /// An invalid lab run whose every miss was timing (what a busy or
    /// stealing host causes), which another attempt may not repeat; a
    /// fault of the emulation would.
    fn timing_miss(&self) -> bool {
        self.status == "invalid"
            && self
                .json
                .as_deref()
                .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok())
                .and_then(|d| d.pointer("/lab/accuracy/timing_only")?.as_bool())
                == Some(true)
    }
}

/// Reads what an invocation left behind: its exit status, its result
/// document (if any) and the last line it printed on stderr.
fn classify(exit_code: Option<i32>, json: Option<String>, stderr: &str) -> Outcome {
    let last_err = stderr
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.trim_start_matches("xferlab: ").to_string());
    let doc = json
        .as_deref()
        .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok());
    let Some(doc) = doc else {
        return Outcome {
            status: if exit_code == Some(130) {
                "interrupted"
            } else {
                "error"
            },
            exit_code,
            error: Some(last_err.unwrap_or_else(|| match exit_code {
                Some(c) => format!("exited with status {c} without a result"),
                None => "killed by a signal before writing a result".into(),
            })),
            json: None,
        };
    };
    let doc_status = doc_status(&doc);
    let schema = doc.get("schema").and_then(|s| s.as_str()).unwrap_or("");
    let status = match (exit_code, doc_status) {
        (Some(130), _) => "interrupted",
        (_, Some("failed")) => "failed",
        (_, Some("partial")) => "partial",
        (Some(0), _) => "ok",
        // cbr exits 1 when the rate was not sustained: a verdict, which
        // is a measurement, not a failure.
        (Some(1), _) if schema.starts_with("xferlab.cbr/") => "ok",
        // Several tests in one lab: each cbr's verdict is its own measurement.
        (Some(1), Some("ok")) if several_cbr_verdicts(&doc) => "ok",
        // A lab run whose emulation missed its accuracy targets.
        (Some(1), Some("ok")) if doc.get("lab").is_some() => "invalid",
        _ => "failed",
    };
    Outcome {
        status,
        exit_code,
        error: if status == "ok" {
            None
        } else {
            last_err.or_else(|| why_not_ok(&doc))
        },
        json,
    }
}

/// Why a document is not `ok`, from its own fields, for a child that said
/// nothing on stderr (a lab whose test ended `partial`, say): the first
/// error, a missing server report, or the first flow cut short (a flow
/// cut by the drain last: a timed test accepts those). With several tests,
/// the first such test's name comes first.
fn why_not_ok(doc: &serde_json::Value) -> Option<String> {
    match metrics::tests_of(doc) {
        None => why_test_not_ok(doc),
        Some(tests) => tests
            .iter()
            .find_map(|(name, t)| Some(format!("@{name}: {}", why_test_not_ok(t.get("result")?)?))),
    }
}

/// [`why_not_ok`] for one test's result document.
fn why_test_not_ok(r: &serde_json::Value) -> Option<String> {
    use serde::Deserialize;
    use serde_json::Value;
    use xferlab_core::result::FlowEnd;
    if r.get("status")
        .and_then(Value::as_str)
        .is_none_or(|s| s == "ok")
    {
        return None;
    }
    if let Some(e) = r.pointer("/errors/0").and_then(Value::as_str) {
        return Some(e.to_string());
    }
    if r.get("server").is_none_or(Value::is_null) {
        return Some("no report from the server".into());
    }
    let mut cut = None;
    for side in ["client", "server"] {
        for list in ["/flows", "/pattern/flows"] {
            let flows = r
                .get(side)
                .and_then(|s| s.pointer(list))
                .and_then(Value::as_array);
            for f in flows.into_iter().flatten() {
                let Ok(end) = FlowEnd::deserialize(&f["end"]) else {
                    continue;
                };
                let FlowEnd::Aborted(why) = &end else {
                    continue;
                };
                let line = format!("{side} flow {} aborted: {why}", f["id"]);
                if !crate::driver::cut_by_drain(&end) {
                    return Some(line);
                }
                cut.get_or_insert(line);
            }
        }
    }
    cut
}

/// A document's status; of a lab run with several tests, the worst of
/// theirs (`failed`, then `partial`, else `ok`).
fn doc_status(doc: &serde_json::Value) -> Option<&str> {
    let Some(tests) = metrics::tests_of(doc) else {
        return doc.get("status").and_then(|s| s.as_str());
    };
    let statuses: Vec<&str> = tests
        .values()
        .map(|t| match t.get("result") {
            // A document without a status (cbr, sweep) measured.
            Some(r) if r.get("schema").is_some() => {
                r.get("status").and_then(|s| s.as_str()).unwrap_or("ok")
            }
            // The test wrote no document.
            _ => "failed",
        })
        .collect();
    ["failed", "partial"]
        .into_iter()
        .find(|w| statuses.contains(w))
        .or(Some("ok"))
}

/// Several tests whose only non-zero exits are cbr verdicts (exit 1: the
/// rate was not sustained) on an accurate lab.
fn several_cbr_verdicts(doc: &serde_json::Value) -> bool {
    let Some(tests) = metrics::tests_of(doc) else {
        return false;
    };
    doc.pointer("/lab/accuracy/valid") == Some(&serde_json::Value::Bool(true))
        && tests.values().all(|t| {
            let cbr = || {
                t.pointer("/result/schema")
                    .and_then(|s| s.as_str())
                    .is_some_and(|s| s.starts_with("xferlab.cbr/"))
            };
            match t.get("exit_code").and_then(|c| c.as_i64()) {
                Some(0) => true,
                Some(1) => cbr(),
                _ => false,
            }
        })
}

/// Runs that count as done when resuming: they measured what was asked.
fn is_done(status: &str) -> bool {
    matches!(status, "ok" | "invalid")
}

/// The figure a progress line shows for a run (each test's, with several
/// tests in one lab).
fn headline(ms: &[metrics::Metric]) -> String {
    let mut shown: Vec<(Option<&str>, String)> = Vec::new();
    for name in ["tps", "throughput_bps", "best_bps_max", "sustained"] {
        for m in ms {
            let (base, host) = metrics::split_host(&m.name);
            if base == name && !shown.iter().any(|(h, _)| *h == host) {
                shown.push((
                    host,
                    format!("{} {}", m.name, metrics::format_value(m.value, m.unit)),
                ));
            }
        }
    }
    shown
        .into_iter()
        .map(|(_, s)| s)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Progress: a live bar on a terminal, plain lines otherwise.
struct Progress {
    bar: Option<ProgressBar>,
    total: usize,
    done: usize,
    points: usize,
    repeat: u32,
}

impl Progress {
    fn new(total: usize, points: usize, repeat: u32) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(total as u64);
            b.set_style(
                ProgressStyle::with_template(
                    "{bar:30} {pos}/{len} runs  {prefix}  elapsed {elapsed}  ETA {eta}  {msg}",
                )
                .expect("a valid template"),
            );
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        Progress {
            bar,
            total,
            done: 0,
            points,
            repeat,
        }
    }

    fn start(&self, slot: RunSlot, point: &Point) {
        let prefix = format!(
            "point {}/{} repeat {}/{}",
            slot.point + 1,
            self.points,
            slot.repeat,
            self.repeat
        );
        match &self.bar {
            Some(b) => b.set_prefix(prefix),
            None => eprintln!(
                "[{}/{}] {prefix}: {}",
                self.done + 1,
                self.total,
                point.label()
            ),
        }
    }

    fn finish(&mut self, status: &str, detail: &str, secs: f64) {
        self.done += 1;
        let line = format!("{status} {detail} ({secs:.2} s)");
        match &self.bar {
            Some(b) => {
                b.set_message(format!("last: {line}"));
                b.inc(1);
            }
            None => eprintln!("[{}/{}]   {line}", self.done, self.total),
        }
    }

    /// One more attempt of the run just finished: it was invalid for
    /// timing alone.
    fn retry(&mut self) {
        self.total += 1;
        let why = "invalid for timing alone (a busy or stealing host): running it again";
        match &self.bar {
            Some(b) => {
                b.inc_length(1);
                b.set_message(why);
            }
            None => eprintln!("[{}/{}]   {why}", self.done, self.total),
        }
    }

    fn clear(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// The runner's own cost, reported at the end: the gap between one run's
/// end and the next one's start, and the store's write time.
#[derive(Default)]
struct Overhead {
    gaps_ms: Vec<f64>,
    store_ms: Vec<f64>,
}

fn median(v: &[f64]) -> Option<f64> {
    stats::summarize(v).map(|s| s.median)
}

struct Ctx<'a> {
    store: &'a Store,
    experiment: i64,
    point_ids: Vec<i64>,
    points: &'a [Point],
    argv: &'a [Vec<String>],
    /// Several tests per run: the document comes on stdout.
    several: bool,
    /// Per point, across hosts: which host is its client and its server.
    remote: &'a [Option<argv::Remote>],
    /// The scenario's hosts (where = "hosts").
    agents: &'a [hosts::Agent],
    progress: Progress,
    overhead: Overhead,
    failed: usize,
    ok: usize,
    /// Stored and measured, but the lab missed its accuracy targets.
    invalid: usize,
    /// More attempts for a run invalid for timing alone.
    retry_invalid: u32,
}

impl Ctx<'_> {
    fn commit(
        &mut self,
        slot: RunSlot,
        started: SystemTime,
        secs: f64,
        out: Outcome,
    ) -> Result<(), StoreError> {
        let doc = out
            .json
            .as_deref()
            .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok());
        let ms = doc.as_ref().map(metrics::extract).unwrap_or_default();
        // The machine the client ran on (with several tests, the first's:
        // a lab's hosts are namespaces of one machine).
        let host = doc
            .as_ref()
            .and_then(|d| {
                d.pointer("/client/host").or_else(|| {
                    metrics::tests_of(d)?
                        .values()
                        .find_map(|t| t.pointer("/result/client/host"))
                })
            })
            .map(|h| h.to_string());
        let metric_rows: Vec<(String, f64, String)> = ms
            .iter()
            .map(|m| (m.name.clone(), m.value, m.unit.to_string()))
            .collect();
        let command = serde_json::to_string(&self.argv[slot.point]).unwrap_or_default();
        let started_at = humantime::format_rfc3339_micros(started).to_string();
        let ended_at = now_rfc3339();
        let agent_of = |name: &str| {
            self.agents
                .iter()
                .find(|a| a.name == name)
                .map_or("", |a| a.agent.as_str())
        };
        let hosts = self.remote[slot.point].as_ref().map(|r| RunHosts {
            client: &r.client,
            client_agent: agent_of(&r.client),
            server: &r.server,
            server_agent: agent_of(&r.server),
        });
        let t = Instant::now();
        self.store.insert_run(&NewRun {
            experiment_id: Some(self.experiment),
            point_id: Some(self.point_ids[slot.point]),
            repeat: Some(slot.repeat),
            status: out.status,
            exit_code: out.exit_code,
            error: out.error.as_deref(),
            started_at: &started_at,
            ended_at: &ended_at,
            duration_s: secs,
            command_json: &command,
            host_json: host.as_deref(),
            xferlab_version: env!("CARGO_PKG_VERSION"),
            result_json: out.json.as_deref(),
            metrics: &metric_rows,
            hosts,
        })?;
        self.overhead.store_ms.push(t.elapsed().as_secs_f64() * 1e3);
        if out.status == "invalid" {
            self.invalid += 1;
        } else if is_done(out.status) {
            self.ok += 1;
        } else {
            self.failed += 1;
        }
        let detail = match (&out.error, out.status) {
            (Some(e), s) if s != "ok" => e.clone(),
            _ => headline(&ms),
        };
        self.progress.finish(out.status, &detail, secs);
        Ok(())
    }
}

/// How often a running point checks for an interrupt to pass on.
const INTERRUPT_POLL: Duration = Duration::from_millis(20);

/// Runs one invocation as a child process and waits for it. Its document
/// goes to `out_file`: through `-o`, or with several tests in one lab
/// (whose argv asks each for `-J`), as its standard output. An interrupt
/// of the runner (Ctrl-C, SIGTERM, SIGHUP) is passed on to the child as
/// SIGINT, its Ctrl-C: it stops, keeps what it measured and cleans up. A
/// signal sent to the runner alone (`kill`, a service manager) once waited
/// for a 10-minute point to end.
fn run_child(
    argv: &[String],
    several: bool,
    out_file: &Path,
    interrupts: &AtomicU32,
) -> anyhow::Result<(Option<i32>, Option<String>, String)> {
    let exe = std::env::current_exe().context("cannot find my own binary")?;
    let _ = std::fs::remove_file(out_file);
    let mut cmd = Command::new(exe);
    cmd.args(argv);
    if several {
        let f = std::fs::File::create(out_file)
            .with_context(|| format!("cannot create {}", out_file.display()))?;
        cmd.stdout(f);
    } else {
        cmd.arg("-J").arg("-o").arg(out_file).stdout(Stdio::null());
    }
    cmd.stdin(Stdio::null()).stderr(Stdio::piped());
    // Its own process group: a terminal's Ctrl-C reaches the runner alone,
    // which passes it on once (below), not twice.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    crate::sys::process::die_with_parent(&mut cmd, crate::sys::process::Signal::TERM);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start xferlab {}", argv.join(" ")))?;
    let reader = child.stderr.take().map(|mut s| {
        std::thread::spawn(move || {
            let mut text = String::new();
            s.read_to_string(&mut text).ok();
            text
        })
    });
    let mut passed_on = 0;
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for a run")? {
            break status;
        }
        let seen = interrupts.load(Ordering::Relaxed);
        if seen > passed_on {
            crate::sys::process::signal_child(&child, crate::sys::process::Signal::INT).ok();
            passed_on = seen;
        }
        std::thread::sleep(INTERRUPT_POLL);
    };
    let stderr = reader.and_then(|r| r.join().ok()).unwrap_or_default();
    let json = std::fs::read_to_string(out_file)
        .ok()
        .filter(|s| !s.trim().is_empty());
    Ok((status.code(), json, stderr))
}

fn run_local(ctx: &mut Ctx, pending: &[RunSlot], interrupts: &AtomicU32) -> anyhow::Result<bool> {
    let dir = std::env::temp_dir().join(format!("xferlab-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let out_file = dir.join("result.json");
    let mut last_end: Option<Instant> = None;
    let mut interrupted = false;
    for slot in pending {
        if interrupts.load(Ordering::Relaxed) > 0 {
            interrupted = true;
            break;
        }
        let mut tries_left = ctx.retry_invalid;
        loop {
            ctx.progress.start(*slot, &ctx.points[slot.point]);
            let started = SystemTime::now();
            let t0 = Instant::now();
            if let Some(end) = last_end {
                ctx.overhead.gaps_ms.push((t0 - end).as_secs_f64() * 1e3);
            }
            let (code, json, stderr) =
                run_child(&ctx.argv[slot.point], ctx.several, &out_file, interrupts)?;
            // The point ends when its process has exited; what follows
            // (reading its result, the store's commit) is the runner's gap.
            let ended = Instant::now();
            let secs = (ended - t0).as_secs_f64();
            let outcome = classify(code, json, &stderr);
            let was_interrupted = outcome.status == "interrupted";
            let again =
                tries_left > 0 && outcome.timing_miss() && interrupts.load(Ordering::Relaxed) == 0;
            ctx.commit(*slot, started, secs, outcome)
                .map_err(super::line)?;
            last_end = Some(ended);
            if was_interrupted {
                interrupted = true;
                break;
            }
            if !again {
                break;
            }
            tries_left -= 1;
            ctx.progress.retry();
        }
        if interrupted {
            break;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(interrupted || interrupts.load(Ordering::Relaxed) > 0)
}

/// How long to wait before each new attempt of an order a busy agent
/// refused (about 10 s in all).
const BUSY_BACKOFF: [Duration; 8] = [
    Duration::from_millis(20),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(3),
    Duration::from_secs(5),
];

/// Orders one point from its client host's agent and reads what came
/// back as a run's outcome. An agent that cannot be reached, refuses the
/// order or drops it mid-run is this run's error, named with the host and
/// the reason; the runner goes on with the next point.
fn order(agent: &hosts::Agent, argv: &[String]) -> Outcome {
    use crate::agent::client::{self, AgentError};
    // The client's messages name the agent's address; the host's name
    // goes first, as the scenario calls it.
    let why = |e: &AgentError| format!("host {}: {e}", agent.name);
    // An agent at its order or session limits says it is busy and to try
    // again later: it may be serving a probe or another controller, or
    // still releasing the order it just answered. That is no failure of
    // the point, so it is tried again, a bounded number of times.
    let mut ordered = client::order(&agent.agent, &agent.key, argv, &mut |_| {});
    for backoff in BUSY_BACKOFF {
        match &ordered {
            Err(AgentError::Refused { code, reason, .. }) if code == "busy" => {
                tracing::debug!(host = %agent.name, ?backoff, %reason, "agent busy: asking again");
                std::thread::sleep(backoff);
                ordered = client::order(&agent.agent, &agent.key, argv, &mut |_| {});
            }
            _ => break,
        }
    }
    match ordered {
        Ok(o) => classify(Some(o.exit_code), Some(o.doc.to_string()), &o.stderr),
        // The test ran and did not exit 0: its document (a failed or
        // partial result, or cbr's verdict, which is a measurement) is
        // read as a local child's would be, with exit status 1.
        Err(e @ AgentError::Failed { .. }) => {
            let reason = why(&e);
            let AgentError::Failed { doc, .. } = e else {
                unreachable!("matched above")
            };
            classify(Some(1), doc.map(|d| d.to_string()), &reason)
        }
        Err(e) => Outcome {
            status: "error",
            exit_code: None,
            error: Some(why(&e)),
            json: None,
        },
    }
}

/// Runs the points across hosts, one order at a time. Each order runs on
/// a thread of its own so an interrupt is seen at once: the run is then
/// stored as interrupted and the runner exits, which closes the order's
/// connection, on which the agent stops its test.
fn run_hosts(ctx: &mut Ctx, pending: &[RunSlot], interrupts: &AtomicU32) -> anyhow::Result<bool> {
    let mut last_end: Option<Instant> = None;
    for slot in pending {
        if interrupts.load(Ordering::Relaxed) > 0 {
            return Ok(true);
        }
        let remote = ctx.remote[slot.point]
            .as_ref()
            .expect("every point across hosts names its hosts");
        let agent = ctx
            .agents
            .iter()
            .find(|a| a.name == remote.client)
            .expect("argv::build checks the client is a host")
            .clone();
        ctx.progress.start(*slot, &ctx.points[slot.point]);
        let started = SystemTime::now();
        let t0 = Instant::now();
        if let Some(end) = last_end {
            ctx.overhead.gaps_ms.push((t0 - end).as_secs_f64() * 1e3);
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let argv = ctx.argv[slot.point].clone();
        let who = agent.clone();
        std::thread::Builder::new()
            .name(format!("order-{}", agent.name))
            .spawn(move || {
                // The runner may have gone on after an interrupt.
                let _ = tx.send(order(&who, &argv));
            })
            .context("cannot start a thread for an order")?;
        let outcome = loop {
            match rx.recv_timeout(INTERRUPT_POLL) {
                Ok(o) => break o,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if interrupts.load(Ordering::Relaxed) > 0 {
                        break Outcome {
                            status: "interrupted",
                            exit_code: None,
                            error: Some(format!(
                                "interrupted while agent {} ({}) ran it; the agent stops its test when the runner exits",
                                agent.name, agent.agent
                            )),
                            json: None,
                        };
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    anyhow::bail!("the order to agent {} ended without an answer", agent.name)
                }
            }
        };
        let ended = Instant::now();
        let interrupted = outcome.status == "interrupted";
        ctx.commit(*slot, started, (ended - t0).as_secs_f64(), outcome)
            .map_err(super::line)?;
        last_end = Some(ended);
        if interrupted {
            return Ok(true);
        }
    }
    Ok(interrupts.load(Ordering::Relaxed) > 0)
}

fn run_vm(
    ctx: &mut Ctx,
    s: &Scenario,
    scenario_path: &Path,
    pending: &[RunSlot],
    interrupts: &AtomicU32,
) -> anyhow::Result<bool> {
    let scen_dir = scenario_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| cwd.clone());
    let runner = vm::find_vm_runner(&[&scen_dir, &cwd, &exe_dir]).context(
        "cannot find lab/vm/run (the lab VM); run from the xferlab source tree or set XFERLAB_LABVM_RUN",
    )?;
    // HOST paths of `add` are relative to the scenario file.
    let add =
        s.vm.add
            .iter()
            .map(|a| {
                let (host, guest) = match a.split_once(':') {
                    Some((h, g)) => (h, Some(g)),
                    None => (a.as_str(), None),
                };
                let hp = if Path::new(host).is_absolute() {
                    PathBuf::from(host)
                } else {
                    scen_dir.join(host)
                };
                match guest {
                    Some(g) => format!("{}:{g}", hp.display()),
                    None => hp.display().to_string(),
                }
            })
            .collect();
    let setup = vm::VmSetup {
        modules: s.vm.modules.clone(),
        extra_modules: s.vm.extra_modules.clone(),
        add,
        setup: s.vm.setup.clone(),
        timeout_s: s.vm.timeout.unwrap_or(1800),
        smp: s.vm.smp,
    };
    let jobs: Vec<vm::Job> = pending
        .iter()
        .enumerate()
        .map(|(i, slot)| vm::Job {
            id: i,
            args: ctx.argv[slot.point].clone(),
        })
        .collect();
    eprintln!("booting the lab VM once for {} runs ...", jobs.len());
    // Ctrl-C reaches the VM's QEMU too (same process group); the flag
    // makes run_in_vm stop reading and tear the guest down.
    let stop = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let stop_watch = std::thread::scope(|scope| -> anyhow::Result<()> {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                if interrupts.load(Ordering::Relaxed) > 0 {
                    stop.store(true, Ordering::Relaxed);
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let mut started: Option<(SystemTime, Instant)> = None;
        let mut commit_err = None;
        let mut last_end: Option<Instant> = None;
        let r = vm::run_in_vm(&runner, None, &setup, &jobs, &stop, &mut |ev| match ev {
            vm::JobEvent::Booted { boot_s } => {
                eprintln!("lab VM up after {boot_s:.1} s");
            }
            vm::JobEvent::Started { id } => {
                let slot = pending[id];
                ctx.progress.start(slot, &ctx.points[slot.point]);
                let now = Instant::now();
                if let Some(end) = last_end {
                    ctx.overhead.gaps_ms.push((now - end).as_secs_f64() * 1e3);
                }
                started = Some((SystemTime::now(), now));
            }
            vm::JobEvent::Finished {
                id,
                exit_code,
                json,
                stderr,
                elapsed_s,
            } => {
                let slot = pending[id];
                let (wall, _) = started
                    .take()
                    .unwrap_or((SystemTime::now(), Instant::now()));
                let outcome = classify(Some(exit_code), json, &stderr);
                if let Err(e) = ctx.commit(slot, wall, elapsed_s, outcome) {
                    commit_err.get_or_insert(e);
                }
                last_end = Some(Instant::now());
            }
        });
        done.store(true, Ordering::Relaxed);
        if let Some(e) = commit_err {
            return Err(super::line(e));
        }
        r.map_err(super::line)
    });
    match stop_watch {
        Ok(()) => Ok(interrupts.load(Ordering::Relaxed) > 0),
        Err(_) if interrupts.load(Ordering::Relaxed) > 0 => Ok(true),
        Err(e) => Err(e),
    }
}

/// `xferlab run`.
pub fn run(o: &RunOptions, interrupts: &AtomicU32) -> ExitCode {
    let file = o.scenario.display().to_string();
    let text = match std::fs::read_to_string(&o.scenario) {
        Ok(t) => t,
        Err(e) => return fail(&format!("cannot read scenario {file}: {e}"), 2),
    };
    let s = match Scenario::parse(&text, o.scale) {
        Ok(s) => s,
        Err(e) if e.line == 0 => return fail(&format!("{file}: {}", e.message), 2),
        Err(e) => return fail(&format!("{file}:{e}"), 2),
    };
    let points = s.points();
    let inv = match argv::build(&o.grammar, &s, &points) {
        Ok(i) => i,
        Err(e) => return fail(&format!("{file}:{e}"), 2),
    };
    // Across hosts: the keys are read before anything runs (a missing one
    // is a mistake in the scenario, even for --dry-run).
    let agents = match hosts::load(&s, &o.scenario) {
        Ok(a) => a,
        Err(e) => return fail(&format!("{file}:{e}"), 2),
    };
    let slots = plan::order(points.len(), s.repeat, s.order);
    if o.dry_run {
        outln!(
            "{}: {} points x {} repeats = {} runs ({:?} order, {} scale, {})",
            s.title,
            points.len(),
            s.repeat,
            slots.len(),
            s.order,
            o.scale.as_str(),
            match s.place {
                Place::Loopback => "on this host",
                Place::Lab => "in the network lab",
                Place::Vm if s.in_lab() => "in the network lab inside the lab VM, one boot",
                Place::Vm => "in the lab VM, one boot",
                Place::Hosts => "across hosts, each point ordered from its client's agent",
            }
        );
        for a in &agents {
            outln!(
                "host {}: agent {}, test server {}, key {}",
                a.name,
                a.agent,
                a.server,
                a.key_file.display()
            );
        }
        for (i, ((p, a), r)) in points.iter().zip(&inv.argv).zip(&inv.remote).enumerate() {
            match r {
                Some(r) => outln!(
                    "point {:>3}  {:<40}  to agent {} ({}): xferlab {}",
                    i + 1,
                    p.label(),
                    r.client,
                    agents
                        .iter()
                        .find(|x| x.name == r.client)
                        .map_or("", |x| x.agent.as_str()),
                    a.join(" ")
                ),
                None => outln!(
                    "point {:>3}  {:<40}  xferlab {}",
                    i + 1,
                    p.label(),
                    a.join(" ")
                ),
            }
        }
        return ExitCode::SUCCESS;
    }
    // SAFETY: geteuid has no preconditions.
    if s.place == Place::Lab && !crate::sys::process::is_root() {
        return fail(
            "this scenario runs in the network lab (where = \"lab\"), which needs root to create namespaces and TUN devices; run it with sudo",
            1,
        );
    }
    let store = match Store::open(&o.db) {
        Ok(s) => s,
        Err(e) => return fail(&e.to_string(), 1),
    };
    let name = o
        .scenario
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "scenario".into());
    let hash = text_hash(&text);
    let existing = match store.latest_experiment(&name, o.scale.as_str()) {
        Ok(e) => e,
        Err(e) => return fail(&e.to_string(), 1),
    };
    let experiment = match existing {
        Some(e) if !o.fresh && (e.scenario_hash == hash || o.resume_anyway) => {
            if e.scenario_hash != hash {
                if let Err(err) = store.update_scenario(e.id, &text, &hash) {
                    return fail(&err.to_string(), 1);
                }
            }
            eprintln!(
                "resuming experiment {} ({} of {} runs stored ok) in {}",
                e.id,
                e.ok_runs,
                slots.len(),
                o.db.display()
            );
            e.id
        }
        Some(e) if !o.fresh => {
            return fail(
                &format!(
                    "{file} changed since experiment {} ({}, {} runs stored) was run from it; pass --fresh to start a new experiment, or --resume-anyway to add the missing points to experiment {}",
                    e.id, e.created_at, e.runs, e.id
                ),
                2,
            )
        }
        _ => {
            let created = now_rfc3339();
            match store.create_experiment(&NewExperiment {
                name: &name,
                title: &s.title,
                scale: o.scale.as_str(),
                scenario_path: &file,
                scenario_text: &text,
                scenario_hash: &hash,
                created_at: &created,
                xferlab_version: env!("CARGO_PKG_VERSION"),
            }) {
                Ok(id) => id,
                Err(e) => return fail(&e.to_string(), 1),
            }
        }
    };
    let mut point_ids = Vec::with_capacity(points.len());
    for (i, (p, a)) in points.iter().zip(&inv.argv).enumerate() {
        let key = p.key();
        let knobs = p.to_json();
        let args = serde_json::to_string(a).unwrap_or_default();
        match store.ensure_point(
            experiment,
            &NewPoint {
                idx: i,
                key: &key,
                knobs_json: &knobs,
                args_json: &args,
            },
        ) {
            Ok(id) => point_ids.push(id),
            Err(e) => return fail(&e.to_string(), 1),
        }
    }
    let done: std::collections::HashSet<(i64, u32)> = match store.latest_runs(experiment) {
        Ok(runs) => runs
            .into_iter()
            // An invalid run is measured again: its numbers are never used.
            .filter(|r| r.status == "ok")
            .filter_map(|r| Some((r.point_id?, r.repeat?)))
            .collect(),
        Err(e) => return fail(&e.to_string(), 1),
    };
    let pending = plan::pending(&slots, |sl| {
        done.contains(&(point_ids[sl.point], sl.repeat))
    });
    let mut ctx = Ctx {
        store: &store,
        experiment,
        point_ids,
        points: &points,
        argv: &inv.argv,
        several: inv.several,
        remote: &inv.remote,
        agents: &agents,
        progress: Progress::new(pending.len(), points.len(), s.repeat),
        overhead: Overhead::default(),
        failed: 0,
        ok: 0,
        invalid: 0,
        retry_invalid: o.retry_invalid,
    };
    let mut interrupted = false;
    if pending.is_empty() {
        eprintln!(
            "all {} runs of experiment {experiment} are stored; --fresh runs it again",
            slots.len()
        );
    } else {
        let r = match s.place {
            Place::Vm => run_vm(&mut ctx, &s, &o.scenario, &pending, interrupts),
            Place::Loopback | Place::Lab => run_local(&mut ctx, &pending, interrupts),
            Place::Hosts => run_hosts(&mut ctx, &pending, interrupts),
        };
        ctx.progress.clear();
        match r {
            Ok(i) => interrupted = i,
            Err(e) => {
                return fail(
                    &format!(
                        "{e:#} ({} runs stored in {}; run the same command again to resume)",
                        ctx.ok + ctx.invalid + ctx.failed,
                        o.db.display()
                    ),
                    1,
                )
            }
        }
        let gap = median(&ctx.overhead.gaps_ms);
        let write = median(&ctx.overhead.store_ms);
        eprintln!(
            "experiment {experiment}: {} runs ok, {}{} failed{}, stored in {}; runner overhead: median gap between runs {}, median store write {}",
            ctx.ok,
            if ctx.invalid > 0 {
                format!("{} invalid (the lab missed its accuracy targets), ", ctx.invalid)
            } else {
                String::new()
            },
            ctx.failed,
            if interrupted { ", interrupted" } else { "" },
            o.db.display(),
            gap.map(|g| format!("{g:.2} ms")).unwrap_or_else(|| "-".into()),
            write.map(|g| format!("{g:.2} ms")).unwrap_or_else(|| "-".into()),
        );
    }
    if interrupted {
        eprintln!("interrupted: run the same command again to resume with the missing runs");
        return ExitCode::from(130);
    }
    let failed = ctx.failed;
    if !o.no_report {
        let dir = o
            .report_dir
            .clone()
            .unwrap_or_else(|| super::report::default_dir(&name, experiment));
        if let Err(e) =
            super::report::write(&store, experiment, &dir, false, &mut std::io::stdout())
        {
            return fail(&format!("cannot write the report: {e:#}"), 1);
        }
    }
    if failed > 0 {
        eprintln!("{failed} runs failed; `xferlab db show {experiment}` lists them, and running the scenario again retries them");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_from_exit_codes_and_documents() {
        let ok = r#"{"schema":"xferlab.result/2","status":"ok"}"#.to_string();
        assert_eq!(classify(Some(0), Some(ok.clone()), "").status, "ok");
        assert_eq!(
            classify(Some(130), Some(ok.clone()), "").status,
            "interrupted"
        );
        let partial = r#"{"schema":"xferlab.result/2","status":"partial"}"#.to_string();
        let o = classify(Some(1), Some(partial), "xferlab: the peer vanished\n");
        assert_eq!(o.status, "partial");
        assert_eq!(o.error.as_deref(), Some("the peer vanished"));
        let cbr = r#"{"schema":"xferlab.cbr/1"}"#.to_string();
        assert_eq!(classify(Some(1), Some(cbr), "").status, "ok");
        let lab = r#"{"schema":"xferlab.result/2","status":"ok","lab":{}}"#.to_string();
        assert_eq!(classify(Some(1), Some(lab), "").status, "invalid");
        let o = classify(Some(1), None, "xferlab: cannot connect\n");
        assert_eq!(o.status, "error");
        assert_eq!(o.error.as_deref(), Some("cannot connect"));
        assert_eq!(classify(None, Some("{not json".into()), "").status, "error");
    }

    #[test]
    fn several_tests_take_the_worst_status_and_keep_cbr_verdicts() {
        let doc = |bg: &str, bg_code: i32, valid: bool| {
            Some(format!(
                r#"{{"tests":{{"bg":{{"exit_code":{bg_code},"result":{bg}}},
                "ref":{{"exit_code":0,"result":{{"schema":"xferlab.result/2","status":"ok"}}}}}},
                "lab":{{"accuracy":{{"valid":{valid}}}}}}}"#
            ))
        };
        let ok = r#"{"schema":"xferlab.result/2","status":"ok"}"#;
        assert_eq!(classify(Some(0), doc(ok, 0, true), "").status, "ok");
        let partial = r#"{"schema":"xferlab.result/2","status":"partial"}"#;
        assert_eq!(
            classify(Some(1), doc(partial, 1, true), "").status,
            "partial"
        );
        // A test that wrote no document (its text is kept as a string).
        assert_eq!(
            classify(Some(2), doc(r#""usage""#, 2, true), "").status,
            "failed"
        );
        assert_eq!(classify(Some(1), doc(ok, 0, false), "").status, "invalid");
        let cbr = r#"{"schema":"xferlab.cbr/1"}"#;
        assert_eq!(classify(Some(1), doc(cbr, 1, true), "").status, "ok");
        assert_eq!(classify(Some(1), doc(cbr, 1, false), "").status, "invalid");
    }

    #[test]
    fn a_silent_partial_run_names_its_cause_from_the_document() {
        let cut = crate::driver::CUT_CLIENT;
        let doc = format!(
            r#"{{"tests":{{
            "bg":{{"exit_code":0,"result":{{"schema":"xferlab.result/2","status":"ok"}}}},
            "ref":{{"exit_code":1,"result":{{"schema":"xferlab.result/2","status":"partial",
              "client":{{"flows":[{{"id":3,"end":{{"kind":"aborted","reason":"{cut}"}}}}]}},
              "server":{{"pattern":{{"flows":[{{"id":0,"end":{{"kind":"completed"}}}},
                {{"id":1,"end":{{"kind":"aborted","reason":"read failed: reset"}}}}]}}}}}}}}}},
            "lab":{{"accuracy":{{"valid":true}}}}}}"#
        );
        let o = classify(Some(1), Some(doc), "");
        assert_eq!(o.status, "partial");
        assert_eq!(
            o.error.as_deref(),
            Some("@ref: server flow 1 aborted: read failed: reset")
        );
        let no_server = r#"{"schema":"xferlab.result/2","status":"partial","server":null,
            "errors":[]}"#;
        assert_eq!(
            classify(Some(1), Some(no_server.into()), "")
                .error
                .as_deref(),
            Some("no report from the server")
        );
        let errors = r#"{"schema":"xferlab.result/2","status":"failed","errors":["timed out"]}"#;
        assert_eq!(
            classify(Some(1), Some(errors.into()), "").error.as_deref(),
            Some("timed out")
        );
        // What the child said on stderr comes first.
        assert_eq!(
            classify(Some(1), Some(errors.into()), "xferlab: refused\n")
                .error
                .as_deref(),
            Some("refused")
        );
    }

    #[test]
    fn the_store_takes_every_status_a_run_can_have() {
        let docs = [
            (
                Some(0),
                Some(r#"{"schema":"xferlab.result/2","status":"ok"}"#),
            ),
            (
                Some(1),
                Some(r#"{"schema":"xferlab.result/2","status":"ok","lab":{}}"#),
            ),
            (
                Some(1),
                Some(r#"{"schema":"xferlab.result/2","status":"partial"}"#),
            ),
            (
                Some(1),
                Some(r#"{"schema":"xferlab.result/2","status":"failed"}"#),
            ),
            (Some(1), None),
            (Some(130), None),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (code, json) in docs {
            let st = classify(code, json.map(String::from), "").status;
            assert!(
                super::super::store::STATUSES.contains(&st),
                "{st} would be refused by the store"
            );
            seen.insert(st);
        }
        assert_eq!(seen.len(), super::super::store::STATUSES.len());
    }

    #[test]
    fn hash_changes_with_text() {
        assert_eq!(text_hash("a"), text_hash("a"));
        assert_ne!(text_hash("a"), text_hash("b"));
    }
}
