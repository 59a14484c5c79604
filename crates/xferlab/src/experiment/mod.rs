//! Experiments: `xferlab run` (a scenario's grid of ordinary invocations,
//! run by run into an embedded SQLite store), `xferlab report` (tables and
//! plots), `xferlab compare` (did this change help?) and `xferlab db`
//! (take the data elsewhere). Scenario parsing, expansion, ordering,
//! metrics and statistics are sans-IO in `xferlab_core::experiment`.

pub mod argv;
pub mod compare;
pub mod db;
pub mod hosts;
pub mod html;
pub mod plot;
pub mod report;
pub mod runner;
pub mod store;
pub mod vm;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use xferlab_core::experiment::metrics;

use store::Store;

/// One of this crate's typed errors (a [`store::StoreError`], a
/// [`vm::VmError`]) as an anyhow error, by its line: that line already
/// names its cause, which `{:#}` would print twice as a source.
fn line(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

fn fail(msg: &str, code: u8) -> ExitCode {
    eprintln!("xferlab: {msg}");
    ExitCode::from(code)
}

fn open_existing(db: &Path) -> Result<Store, ExitCode> {
    Store::open_existing(db).map_err(|e| fail(&e.to_string(), 1))
}

/// `xferlab report [EXPERIMENT]`.
pub fn report_cmd(db: &Path, experiment: Option<&str>, dir: Option<&Path>, png: bool) -> ExitCode {
    let store = match open_existing(db) {
        Ok(s) => s,
        Err(c) => return c,
    };
    let e = match experiment {
        Some(x) => store.find_experiment(x),
        None => store
            .experiments()
            .map(|v| v.into_iter().max_by_key(|e| e.id)),
    };
    let e = match e {
        Ok(Some(e)) => e,
        Ok(None) => {
            return fail(
                &format!(
                    "no experiment {} in {}; `xferlab db list` shows what is there",
                    experiment.unwrap_or("at all"),
                    db.display()
                ),
                2,
            )
        }
        Err(err) => return fail(&err.to_string(), 1),
    };
    let dir = dir
        .map(Path::to_path_buf)
        .unwrap_or_else(|| report::default_dir(&e.name, e.id));
    match report::write(&store, e.id, &dir, png, &mut std::io::stdout()) {
        Ok(_) => ExitCode::SUCCESS,
        Err(err) => fail(&format!("{err:#}"), 1),
    }
}

/// Why one side of a comparison names nothing to compare: the one line printed.
#[derive(Debug, thiserror::Error)]
enum SideError {
    #[error("`{0}` names neither a run (run:N) nor a point (EXPERIMENT/POINT, e.g. udpmon/3 or 4/3); `xferlab db show EXPERIMENT` lists both")]
    BadName(String),
    #[error("no run {0} in the database")]
    NoRun(i64),
    #[error("no experiment `{0}` in the database; `xferlab db list` shows them")]
    NoExperiment(String),
    #[error("experiment {experiment} has no valid run of point {point}{}; `xferlab db show {experiment}` lists its runs", invalid_note(*.invalid))]
    NoMeasuredRun {
        experiment: i64,
        point: i64,
        invalid: usize,
    },
    #[error(transparent)]
    Store(#[from] store::StoreError),
}

fn invalid_note(n: usize) -> String {
    match n {
        0 => String::new(),
        n => format!(" ({n} invalid left out)"),
    }
}

/// Metric values of one side of a comparison: a run (`run:N`) or every
/// repeat of a point (`EXPERIMENT/POINT`, POINT 1-based as `--dry-run`
/// and reports number them).
fn side(store: &Store, what: &str) -> Result<BTreeMap<String, (Vec<f64>, String)>, SideError> {
    let mut out: BTreeMap<String, (Vec<f64>, String)> = BTreeMap::new();
    let mut add = |ms: Vec<(String, f64, String)>| {
        for (n, v, u) in ms {
            out.entry(n).or_insert_with(|| (Vec::new(), u)).0.push(v);
        }
    };
    let bad = || SideError::BadName(what.to_string());
    if let Some(id) = what.strip_prefix("run:") {
        let id: i64 = id.parse().map_err(|_| bad())?;
        let run = store.run(id)?.ok_or(SideError::NoRun(id))?;
        add(store.metrics_of_run(run.id)?);
        return Ok(out);
    }
    let (exp, point) = what.rsplit_once('/').ok_or_else(bad)?;
    let idx: i64 = point.parse().map_err(|_| bad())?;
    let e = store
        .find_experiment(exp)?
        .ok_or_else(|| SideError::NoExperiment(exp.to_string()))?;
    // Only valid runs count, as in reports: a run the lab marked invalid
    // is never averaged in.
    let (runs, invalid): (Vec<_>, Vec<_>) = store
        .latest_runs(e.id)?
        .into_iter()
        .filter(|r| r.point_idx == Some(idx - 1) && matches!(r.status.as_str(), "ok" | "invalid"))
        .partition(|r| r.status == "ok");
    if runs.is_empty() {
        return Err(SideError::NoMeasuredRun {
            experiment: e.id,
            point: idx,
            invalid: invalid.len(),
        });
    }
    if !invalid.is_empty() {
        eprintln!(
            "note: {what}: {} invalid run(s) left out, {} valid compared",
            invalid.len(),
            runs.len()
        );
    }
    for r in runs {
        add(store.metrics_of_run(r.id)?);
    }
    Ok(out)
}

/// `xferlab compare A B`.
pub fn compare_cmd(db: &Path, a: &str, b: &str, only: &[String], json: bool) -> ExitCode {
    let store = match open_existing(db) {
        Ok(s) => s,
        Err(c) => return c,
    };
    let (mut sa, mut sb) = match (side(&store, a), side(&store, b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => return fail(&e.to_string(), 2),
    };
    if !only.is_empty() {
        for m in only {
            if !sa.contains_key(m) && !sb.contains_key(m) {
                let known: Vec<&String> = sa.keys().collect();
                return fail(
                    &format!(
                        "no metric `{m}` in {a} or {b}; known: {}",
                        known
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    2,
                );
            }
        }
        sa.retain(|k, _| only.contains(k));
        sb.retain(|k, _| only.contains(k));
    }
    let rows = compare::compare(&sa, &sb);
    let (only_a, only_b) = compare::unmatched(&sa, &sb);
    let only = (only_a.as_slice(), only_b.as_slice());
    let mut stdout = std::io::stdout();
    let r = if json {
        serde_json::to_writer_pretty(&mut stdout, &compare::render_json(a, b, &rows, only))
            .map_err(std::io::Error::other)
            .and_then(|_| std::io::Write::write_all(&mut stdout, b"\n"))
    } else {
        compare::render_text(a, b, &rows, only, &mut stdout)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&format!("cannot write: {e}"), 1),
    }
}

/// Stores a single run (`xferlab stream ... --db PATH`) with its metrics.
pub fn store_single(
    db: &Path,
    argv: &[String],
    exit_code: i32,
    doc: &serde_json::Value,
) -> Result<i64, store::StoreError> {
    let store = Store::open(db)?;
    let ms: Vec<(String, f64, String)> = metrics::extract(doc)
        .into_iter()
        .map(|m| (m.name, m.value, m.unit.to_string()))
        .collect();
    let status = doc.get("status").and_then(|s| s.as_str()).unwrap_or("ok");
    let started = doc
        .get("started_at")
        .and_then(|s| s.as_str())
        .map(String::from)
        .unwrap_or_else(store::now_rfc3339);
    let ended = store::now_rfc3339();
    let duration = doc
        .pointer("/client/duration_s")
        .and_then(|d| d.as_f64())
        .unwrap_or(0.0);
    let json = doc.to_string();
    let host = doc.pointer("/client/host").map(|h| h.to_string());
    let command = serde_json::to_string(argv).unwrap_or_default();
    store.insert_run(&store::NewRun {
        experiment_id: None,
        point_id: None,
        repeat: None,
        status,
        exit_code: Some(exit_code),
        error: None,
        started_at: &started,
        ended_at: &ended,
        duration_s: duration,
        command_json: &command,
        host_json: host.as_deref(),
        xferlab_version: env!("CARGO_PKG_VERSION"),
        result_json: Some(&json),
        metrics: &ms,
        hosts: None,
    })
}
