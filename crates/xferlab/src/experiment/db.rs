//! `xferlab db list|show|export`: what is in the results store, and a way
//! to take it elsewhere (CSV for spreadsheets, JSON lines for scripts, an
//! SQL dump for another SQLite file). The store itself is
//! [`super::store`]; this module only reads it and formats.
//!
//! Exports cover the latest attempt of every (point, repeat), the runs a
//! report aggregates, unless `--all-attempts` asks for superseded ones too;
//! the SQL dump always holds every row.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::de::{Deserializer as _, MapAccess, Visitor};
use serde_json::{json, Map, Value};

use super::store::{ExperimentRow, RunRow, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no experiment {name:?} in {}; `xferlab db list --db {}` shows the stored ones", db.display(), db.display())]
    NoSuchExperiment { name: String, db: PathBuf },
    #[error("cannot write {}: {source}; check the path and free disk space", path.display())]
    Output {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write the output: {0}")]
    Write(#[from] io::Error),
}

impl From<csv::Error> for DbError {
    fn from(e: csv::Error) -> Self {
        match e.into_kind() {
            csv::ErrorKind::Io(io) => DbError::Write(io),
            other => DbError::Write(io::Error::other(format!("{other:?}"))),
        }
    }
}

/// What `db export` writes (the command line offers these values as they
/// are: their docs are `--format`'s help).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// One row per run; point knobs and metrics (`name [unit]`) as columns.
    Csv,
    /// One JSON object per run: experiment, point, knobs, repeat, attempt,
    /// status, metrics, result.
    Jsonl,
    /// Schema and INSERT statements for `sqlite3 NEW.db < FILE`.
    Sql,
}

/// What `xferlab db` is asked (the command line makes it: `cli::db`).
#[derive(Debug, Clone, PartialEq)]
pub enum DbRequest<'a> {
    List,
    /// One experiment (id or scenario name); every attempt, or the latest
    /// of each point and repeat.
    Show {
        experiment: &'a str,
        all_attempts: bool,
    },
    /// Everything, or one experiment, to `output` or standard output.
    Export {
        experiment: Option<&'a str>,
        format: ExportFormat,
        all_attempts: bool,
        output: Option<&'a Path>,
    },
}

/// Runs `xferlab db ...` on the store at `db`; output goes to `stdout`
/// unless an export names a file.
pub fn run(db: &Path, req: &DbRequest<'_>, stdout: &mut dyn Write) -> Result<(), DbError> {
    let store = Store::open_existing(db)?;
    match *req {
        DbRequest::List => list(&store, stdout),
        DbRequest::Show {
            experiment,
            all_attempts,
        } => show(&store, experiment, all_attempts, stdout),
        DbRequest::Export {
            experiment,
            format,
            all_attempts,
            output,
        } => {
            let go = |out: &mut dyn Write| export(&store, experiment, format, all_attempts, out);
            match output {
                None => go(stdout),
                Some(path) => write_file_atomically(path, go),
            }
        }
    }
}

/// Writes to `PATH.tmp`, then renames, so a failed export never leaves a
/// truncated file under the name the user asked for.
fn write_file_atomically(
    path: &Path,
    f: impl FnOnce(&mut dyn Write) -> Result<(), DbError>,
) -> Result<(), DbError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let out_err = |source| DbError::Output {
        path: path.into(),
        source,
    };
    let file = fs::File::create(&tmp).map_err(out_err)?;
    let mut w = io::BufWriter::new(file);
    let result = f(&mut w).and_then(|()| {
        w.flush().map_err(out_err)?;
        w.get_ref().sync_all().map_err(out_err)?;
        Ok(())
    });
    drop(w);
    match result {
        Ok(()) => fs::rename(&tmp, path).map_err(out_err),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(match e {
                DbError::Write(source) => out_err(source),
                e => e,
            })
        }
    }
}

fn find(store: &Store, name: &str) -> Result<ExperimentRow, DbError> {
    store
        .find_experiment(name)?
        .ok_or_else(|| DbError::NoSuchExperiment {
            name: name.into(),
            db: store.path().into(),
        })
}

/// `db list`: an aligned table of experiments, then the single runs count.
pub fn list(store: &Store, out: &mut dyn Write) -> Result<(), DbError> {
    let experiments = store.experiments()?;
    let singles = store.single_runs()?.len();
    if experiments.is_empty() {
        writeln!(out, "no experiments in {}", store.path().display())?;
    } else {
        let rows: Vec<Vec<String>> = experiments
            .iter()
            .map(|e| {
                let mut runs = format!("{}/{}", e.ok_runs, e.runs);
                if e.attempts > e.runs {
                    runs.push_str(&format!(" ({} attempts)", e.attempts));
                }
                vec![
                    e.id.to_string(),
                    e.name.clone(),
                    e.scale.clone(),
                    e.created_at.clone(),
                    runs,
                    one_line(&e.title),
                ]
            })
            .collect();
        write_table(
            out,
            &["id", "name", "scale", "created", "ok/runs", "title"],
            &rows,
        )?;
    }
    writeln!(out, "single runs (no experiment): {singles}")?;
    Ok(())
}

/// `db show EXPERIMENT`.
pub fn show(
    store: &Store,
    experiment: &str,
    all_attempts: bool,
    out: &mut dyn Write,
) -> Result<(), DbError> {
    let e = find(store, experiment)?;
    writeln!(out, "experiment {}: {} ({})", e.id, e.name, e.scale)?;
    writeln!(out, "title:    {}", one_line(&e.title))?;
    writeln!(
        out,
        "scenario: {} (hash {})",
        e.scenario_path, e.scenario_hash
    )?;
    writeln!(out, "created:  {}", e.created_at)?;
    write!(out, "runs:     {} ok of {}", e.ok_runs, e.runs)?;
    if e.attempts > e.runs {
        write!(out, " ({} attempts in all)", e.attempts)?;
    }
    writeln!(out)?;
    let points = store.point_rows(e.id)?;
    let knobs: HashMap<i64, String> = points
        .iter()
        .map(|p| {
            let text = match ordered_object(&p.knobs_json) {
                // As `--dry-run`, reports and progress lines write a point.
                Ok(kv) => kv
                    .iter()
                    .map(|(k, v)| format!("{k} {}", knob_text(v)))
                    .collect::<Vec<_>>()
                    .join(", "),
                Err(_) => p.key.clone(),
            };
            (p.id, text)
        })
        .collect();
    let runs = if all_attempts {
        store.all_runs(e.id)?
    } else {
        store.latest_runs(e.id)?
    };
    let without_runs = points
        .iter()
        .filter(|p| !runs.iter().any(|r| r.point_id == Some(p.id)))
        .count();
    writeln!(out)?;
    if runs.is_empty() {
        writeln!(out, "no runs stored yet")?;
    } else {
        // Across hosts: which host ran the client and which the server.
        let across = runs.iter().any(|r| r.hosts.is_some());
        let rows: Vec<Vec<String>> = runs
            .iter()
            .map(|r| {
                let mut row = vec![
                    // Points count from 1, as everywhere a person reads them
                    // (`--dry-run`, reports, `compare EXPERIMENT/POINT`).
                    opt(r.point_idx.map(|i| i + 1)),
                    r.point_id
                        .and_then(|id| knobs.get(&id).cloned())
                        .unwrap_or_default(),
                    opt(r.repeat),
                    r.attempt.to_string(),
                    r.status.clone(),
                    format!("{:.1} s", r.duration_s),
                    r.error.as_deref().map(one_line).unwrap_or_default(),
                ];
                if across {
                    let hosts = r
                        .hosts
                        .as_ref()
                        .map(|[c, _, s, _]| format!("{c} -> {s}"))
                        .unwrap_or_default();
                    row.insert(2, hosts);
                }
                row
            })
            .collect();
        let mut header = vec![
            "point", "knobs", "repeat", "attempt", "status", "duration", "error",
        ];
        if across {
            header.insert(2, "hosts");
        }
        write_table(out, &header, &rows)?;
    }
    if without_runs > 0 {
        writeln!(
            out,
            "points without runs: {without_runs} of {}",
            points.len()
        )?;
    }
    Ok(())
}

/// `db export`: everything, or one experiment, in `format`.
pub fn export(
    store: &Store,
    experiment: Option<&str>,
    format: ExportFormat,
    all_attempts: bool,
    out: &mut dyn Write,
) -> Result<(), DbError> {
    let experiments = match experiment {
        Some(name) => vec![find(store, name)?],
        None => store.experiments()?,
    };
    if format == ExportFormat::Sql {
        store.dump_sql(experiment.map(|_| experiments[0].id), out)?;
        return Ok(());
    }
    let mut runs = Vec::new();
    for e in &experiments {
        let points: HashMap<i64, Vec<(String, Value)>> = store
            .point_rows(e.id)?
            .into_iter()
            .map(|p| {
                // A point's knobs are written by xferlab itself; unreadable
                // ones are shown as none rather than failing the export.
                (p.id, ordered_object(&p.knobs_json).unwrap_or_default())
            })
            .collect();
        let rows = if all_attempts {
            store.all_runs(e.id)?
        } else {
            store.latest_runs(e.id)?
        };
        for r in rows {
            let knobs = r
                .point_id
                .and_then(|id| points.get(&id).cloned())
                .unwrap_or_default();
            let metrics = store.metrics_of_run(r.id)?;
            runs.push(Exported {
                experiment: Some(e),
                knobs,
                run: r,
                metrics,
            });
        }
    }
    if experiment.is_none() {
        for r in store.single_runs()? {
            let metrics = store.metrics_of_run(r.id)?;
            runs.push(Exported {
                experiment: None,
                knobs: Vec::new(),
                run: r,
                metrics,
            });
        }
    }
    match format {
        ExportFormat::Csv => write_csv(&runs, out),
        ExportFormat::Jsonl => write_jsonl(&runs, out),
        ExportFormat::Sql => unreachable!("handled above"),
    }
}

/// One run with what the text exports need around it.
struct Exported<'a> {
    experiment: Option<&'a ExperimentRow>,
    knobs: Vec<(String, Value)>,
    run: RunRow,
    metrics: Vec<(String, f64, String)>,
}

const CSV_FIXED: [&str; 14] = [
    "experiment_id",
    "experiment",
    "scale",
    "run_id",
    "point_idx",
    "point_key",
    "repeat",
    "attempt",
    "status",
    "exit_code",
    "error",
    "started_at",
    "ended_at",
    "duration_s",
];

/// The columns of a run across hosts, as the store names them.
const HOST_COLUMNS: [&str; 4] = ["client_host", "client_agent", "server_host", "server_agent"];

/// Knob columns follow `point_key` (in the order the scenario gives them,
/// first seen first), metric columns follow the fixed ones, one per
/// (name, unit) in first-seen order, headed `name [unit]`. Cells of knobs
/// or metrics a run does not have are empty.
fn write_csv(runs: &[Exported], out: &mut dyn Write) -> Result<(), DbError> {
    let mut knob_cols: Vec<&str> = Vec::new();
    let mut metric_cols: Vec<(&str, &str)> = Vec::new();
    for r in runs {
        for (k, _) in &r.knobs {
            if !knob_cols.contains(&k.as_str()) {
                knob_cols.push(k);
            }
        }
        for (name, _, unit) in &r.metrics {
            if !metric_cols.contains(&(name.as_str(), unit.as_str())) {
                metric_cols.push((name, unit));
            }
        }
    }
    let mut w = csv::Writer::from_writer(out);
    let mut header: Vec<String> = CSV_FIXED[..6].iter().map(|s| s.to_string()).collect();
    header.extend(knob_cols.iter().map(|k| k.to_string()));
    header.extend(CSV_FIXED[6..].iter().map(|s| s.to_string()));
    // Runs across hosts: the client and server hosts and their agents.
    let across = runs.iter().any(|x| x.run.hosts.is_some());
    if across {
        header.extend(HOST_COLUMNS.iter().map(|s| s.to_string()));
    }
    header.extend(metric_cols.iter().map(|(name, unit)| {
        if unit.is_empty() {
            name.to_string()
        } else {
            format!("{name} [{unit}]")
        }
    }));
    w.write_record(&header)?;
    for x in runs {
        let r = &x.run;
        let mut rec: Vec<String> = Vec::with_capacity(header.len());
        match x.experiment {
            Some(e) => rec.extend([e.id.to_string(), e.name.clone(), e.scale.clone()]),
            None => rec.extend([String::new(), String::new(), String::new()]),
        }
        rec.push(r.id.to_string());
        rec.push(opt(r.point_idx));
        rec.push(r.point_key.clone().unwrap_or_default());
        for k in &knob_cols {
            rec.push(
                x.knobs
                    .iter()
                    .find(|(name, _)| name == k)
                    .map(|(_, v)| value_text(v))
                    .unwrap_or_default(),
            );
        }
        rec.extend([
            opt(r.repeat),
            r.attempt.to_string(),
            r.status.clone(),
            opt(r.exit_code),
            r.error.clone().unwrap_or_default(),
            r.started_at.clone(),
            r.ended_at.clone(),
            r.duration_s.to_string(),
        ]);
        if across {
            match &r.hosts {
                Some(h) => rec.extend(h.iter().cloned()),
                None => rec.extend(HOST_COLUMNS.map(|_| String::new())),
            }
        }
        for (name, unit) in &metric_cols {
            rec.push(
                x.metrics
                    .iter()
                    .find(|(n, _, u)| n == name && u == unit)
                    .filter(|(_, v, _)| !v.is_nan())
                    .map(|(_, v, _)| v.to_string())
                    .unwrap_or_default(),
            );
        }
        w.write_record(&rec)?;
    }
    w.flush()?;
    Ok(())
}

/// One object per line. `metrics` maps name to value (null for NaN),
/// `units` name to unit; `command`, `host` and `result` are the stored
/// JSON documents, embedded (as a string if the stored text is not JSON).
fn write_jsonl(runs: &[Exported], out: &mut dyn Write) -> Result<(), DbError> {
    for x in runs {
        let r = &x.run;
        // Documents that do not parse (a truncated result of a crashed
        // run) are kept as JSON strings rather than failing the export.
        let parse = |text: Option<&str>| -> Value {
            text.map_or(Value::Null, |t| {
                serde_json::from_str(t).unwrap_or_else(|_| Value::String(t.into()))
            })
        };
        let mut metrics = Map::new();
        let mut units = Map::new();
        for (name, value, unit) in &x.metrics {
            metrics.insert(name.clone(), json!(value));
            units.insert(name.clone(), json!(unit));
        }
        let knobs: Map<String, Value> = x.knobs.iter().cloned().collect();
        let doc = json!({
            "experiment": x.experiment.map(|e| json!({
                "id": e.id, "name": e.name, "title": e.title, "scale": e.scale,
                "scenario_hash": e.scenario_hash,
            })),
            "point": r.point_id.map(|id| json!({
                "id": id, "idx": r.point_idx, "key": r.point_key,
            })),
            "knobs": knobs,
            "run_id": r.id,
            "repeat": r.repeat,
            "attempt": r.attempt,
            "status": r.status,
            "exit_code": r.exit_code,
            "error": r.error,
            "started_at": r.started_at,
            "ended_at": r.ended_at,
            "duration_s": r.duration_s,
            "xferlab_version": r.xferlab_version,
            "command": parse(Some(&r.command_json)),
            "host": parse(r.host_json.as_deref()),
            "hosts": r.hosts.as_ref().map(|[c, ca, sv, sa]| json!({
                "client": c, "client_agent": ca, "server": sv, "server_agent": sa,
            })),
            "metrics": metrics,
            "units": units,
            "result": parse(r.result_json.as_deref()),
        });
        serde_json::to_writer(&mut *out, &doc).map_err(io::Error::from)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// A JSON object's members in document order (serde_json's `Map` sorts
/// them, and knob order is the scenario's order of axes).
pub fn ordered_object(text: &str) -> Result<Vec<(String, Value)>, serde_json::Error> {
    struct Ordered;
    impl<'de> Visitor<'de> for Ordered {
        type Value = Vec<(String, Value)>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut v = Vec::new();
            while let Some((k, val)) = map.next_entry::<String, Value>()? {
                v.push((k, val));
            }
            Ok(v)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let v = (&mut de).deserialize_map(Ordered)?;
    de.end()?;
    Ok(v)
}

/// A knob value as a user writes it: strings bare, anything else as JSON.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A knob's value as a scenario's `Value::label` writes it: switches
/// `on`/`off`.
fn knob_text(v: &Value) -> String {
    match v {
        Value::Bool(true) => "on".into(),
        Value::Bool(false) => "off".into(),
        other => value_text(other),
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// Multi-line text (errors, titles) folded onto one table line.
fn one_line(s: &str) -> String {
    s.split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" / ")
}

/// Left-aligned columns two spaces apart; no trailing blanks.
fn write_table(out: &mut dyn Write, header: &[&str], rows: &[Vec<String>]) -> io::Result<()> {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: &mut dyn Iterator<Item = &str>| -> io::Result<()> {
        let mut s = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            s.push_str(cell);
            let pad = width[i].saturating_sub(cell.chars().count());
            s.extend(std::iter::repeat_n(' ', pad));
        }
        writeln!(out, "{}", s.trim_end())
    };
    line(&mut header.iter().copied())?;
    for row in rows {
        line(&mut row.iter().map(String::as_str))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::store::tests::{experiment, metrics, run, TempDir};
    use super::super::store::NewPoint;
    use super::*;
    use rusqlite::Connection;

    /// Two experiments, 2 points x 2 repeats, a failed attempt, a single
    /// run, and a metric only some runs have.
    fn fixture(store: &Store) -> (i64, i64) {
        let e = experiment(store, "udpmon");
        let mut ps = Vec::new();
        for (idx, (l, sp)) in [("64K", "5"), ("1K", "10")].iter().enumerate() {
            let key = format!("-l={l};--spacing={sp}");
            let knobs = format!(r#"{{"-l":"{l}","--spacing":"{sp}"}}"#);
            ps.push(
                store
                    .ensure_point(
                        e,
                        &NewPoint {
                            idx,
                            key: &key,
                            knobs_json: &knobs,
                            args_json: r#"["xferlab","sweep"]"#,
                        },
                    )
                    .unwrap(),
            );
        }
        for (i, p) in ps.iter().enumerate() {
            for repeat in 1..=2 {
                let m = metrics(1e9 + (i * 10 + repeat as usize) as f64);
                if i == 1 && repeat == 2 {
                    store
                        .insert_run(&run(Some(e), Some(*p), Some(repeat), "failed", &[]))
                        .unwrap();
                }
                store
                    .insert_run(&run(Some(e), Some(*p), Some(repeat), "ok", &m))
                    .unwrap();
            }
        }
        let e2 = experiment(store, "rr");
        let p = store
            .ensure_point(
                e2,
                &NewPoint {
                    idx: 0,
                    key: "--depth=1",
                    knobs_json: r#"{"--depth":1}"#,
                    args_json: "[]",
                },
            )
            .unwrap();
        let m = vec![("tps".to_string(), 12345.5, "1/s".to_string())];
        store
            .insert_run(&run(Some(e2), Some(p), Some(1), "ok", &m))
            .unwrap();
        let single = vec![("throughput_bps".to_string(), 5e8, "bit/s".to_string())];
        store
            .insert_run(&run(None, None, None, "ok", &single))
            .unwrap();
        (e, e2)
    }

    fn text(f: impl FnOnce(&mut dyn Write) -> Result<(), DbError>) -> String {
        let mut buf = Vec::new();
        f(&mut buf).unwrap();
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn csv_has_knob_and_metric_columns() {
        let dir = TempDir::new("csv");
        let store = Store::open(&dir.db()).unwrap();
        let (e, _) = fixture(&store);
        let out = text(|w| export(&store, Some("udpmon"), ExportFormat::Csv, false, w));
        let mut r = csv::Reader::from_reader(out.as_bytes());
        let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
        let col = |name: &str| {
            header
                .iter()
                .position(|h| h == name)
                .unwrap_or_else(|| panic!("no column {name:?} in {header:?}"))
        };
        let (l, sp, bps, retr, loss) = (
            col("-l"),
            col("--spacing"),
            col("throughput_bps [bit/s]"),
            col("retransmits"),
            col("loss_ratio [1]"),
        );
        assert!(l < sp, "knobs in scenario order, not sorted: {header:?}");
        assert!(col("point_key") < l && sp < col("repeat"));
        let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 4, "latest attempts only");
        assert_eq!(&rows[0][l], "64K");
        assert_eq!(&rows[0][sp], "5");
        assert_eq!(&rows[0][col("experiment_id")], e.to_string());
        assert_eq!(&rows[0][bps], "1000000001");
        assert_eq!(&rows[0][retr], "3");
        assert_eq!(&rows[0][loss], "", "NaN exports as an empty cell");
        assert_eq!(&rows[3][l], "1K");
        assert_eq!(&rows[3][col("repeat")], "2");
        assert_eq!(&rows[3][col("attempt")], "2");
        assert_eq!(&rows[3][bps], "1000000012");
        assert!(rows.iter().all(|r| &r[col("status")] == "ok"));

        let all = text(|w| export(&store, Some("udpmon"), ExportFormat::Csv, true, w));
        assert_eq!(all.lines().count(), 1 + 5, "with the failed attempt");
        // Everything: both experiments' knob and metric columns, plus the
        // single run with empty experiment cells.
        let every = text(|w| export(&store, None, ExportFormat::Csv, false, w));
        let mut r = csv::Reader::from_reader(every.as_bytes());
        let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
        assert!(header.contains(&"--depth".to_string()));
        assert!(header.contains(&"tps [1/s]".to_string()));
        let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 6);
        assert_eq!(&rows[5][0], "", "single run has no experiment");
        let d = header.iter().position(|h| h == "--depth").unwrap();
        assert_eq!(&rows[4][d], "1");
        assert_eq!(&rows[0][d], "");
    }

    #[test]
    fn jsonl_has_one_object_per_run() {
        let dir = TempDir::new("jsonl");
        let store = Store::open(&dir.db()).unwrap();
        fixture(&store);
        let out = text(|w| export(&store, Some("udpmon"), ExportFormat::Jsonl, false, w));
        let docs: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(docs.len(), 4);
        let d = &docs[0];
        assert_eq!(d["experiment"]["name"], "udpmon");
        assert_eq!(d["point"]["idx"], 0);
        assert_eq!(d["knobs"]["-l"], "64K");
        assert_eq!(d["repeat"], 1);
        assert_eq!(d["attempt"], 1);
        assert_eq!(d["status"], "ok");
        assert_eq!(d["metrics"]["throughput_bps"], 1000000001.0);
        assert_eq!(d["metrics"]["loss_ratio"], Value::Null);
        assert_eq!(d["units"]["throughput_bps"], "bit/s");
        assert_eq!(d["result"]["end"]["bps"], 1e9);
        assert_eq!(d["command"][1], "stream");
        let every = text(|w| export(&store, None, ExportFormat::Jsonl, false, w));
        let last: Value = serde_json::from_str(every.lines().last().unwrap()).unwrap();
        assert_eq!(last["experiment"], Value::Null);
        assert_eq!(last["point"], Value::Null);

        // A truncated result is exported as text, not dropped.
        let mut r = run(None, None, None, "partial", &[]);
        r.result_json = Some(r#"{"intervals":[{"start":0"#);
        r.host_json = None;
        store.insert_run(&r).unwrap();
        let every = text(|w| export(&store, None, ExportFormat::Jsonl, false, w));
        let last: Value = serde_json::from_str(every.lines().last().unwrap()).unwrap();
        assert_eq!(last["status"], "partial");
        assert_eq!(last["result"], r#"{"intervals":[{"start":0"#);
        assert_eq!(last["host"], Value::Null);
    }

    fn counts(conn: &Connection) -> Vec<i64> {
        ["meta", "experiments", "points", "runs", "metrics"]
            .iter()
            .map(|t| {
                conn.query_row(&format!("SELECT COUNT(*) FROM {t}"), [], |r| r.get(0))
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn sql_dump_loads_into_a_fresh_database() {
        let dir = TempDir::new("sql");
        let store = Store::open(&dir.db()).unwrap();
        let (e, _) = fixture(&store);
        let dump = text(|w| export(&store, None, ExportFormat::Sql, false, w));
        let src = Connection::open(dir.db()).unwrap();
        let want = counts(&src);
        assert_eq!(want, [2, 2, 3, 7, 14]);
        let fresh = Connection::open_in_memory().unwrap();
        fresh.execute_batch(&dump).unwrap();
        assert_eq!(counts(&fresh), want);
        // Text with quotes and newlines, and reals, survive exactly.
        let q = "SELECT scenario_text FROM experiments ORDER BY id LIMIT 1";
        let a: String = src.query_row(q, [], |r| r.get(0)).unwrap();
        let b: String = fresh.query_row(q, [], |r| r.get(0)).unwrap();
        assert_eq!(a, b);
        let q = "SELECT SUM(value), COUNT(value) FROM metrics";
        let a: (f64, i64) = src
            .query_row(q, [], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap();
        let b: (f64, i64) = fresh
            .query_row(q, [], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap();
        assert_eq!(a, b);
        let q = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index'";
        let a: i64 = src.query_row(q, [], |r| r.get(0)).unwrap();
        let b: i64 = fresh.query_row(q, [], |r| r.get(0)).unwrap();
        assert_eq!(a, b, "indexes recreated");

        // One experiment: only its rows; and the file opens as a store.
        let one = text(|w| export(&store, Some(&e.to_string()), ExportFormat::Sql, false, w));
        let path = dir.0.join("one.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch(&one)
            .unwrap();
        let loaded = Store::open_existing(&path).unwrap();
        assert_eq!(loaded.experiments().unwrap().len(), 1);
        assert_eq!(loaded.latest_runs(e).unwrap().len(), 4);
        assert_eq!(loaded.all_runs(e).unwrap().len(), 5);
        assert!(loaded.single_runs().unwrap().is_empty());
        let c = Connection::open(&path).unwrap();
        assert_eq!(counts(&c), [2, 1, 2, 5, 12]);
    }

    #[test]
    fn list_and_show() {
        let dir = TempDir::new("show");
        let store = Store::open(&dir.db()).unwrap();
        let (e, _) = fixture(&store);
        let out = text(|w| list(&store, w));
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("id  name"), "{out}");
        assert!(
            lines[1].contains("udpmon") && lines[1].contains("4/4 (5 attempts)"),
            "{out}"
        );
        assert!(lines[2].contains("rr") && lines[2].contains("1/1"), "{out}");
        assert_eq!(lines[3], "single runs (no experiment): 1");
        // Columns line up.
        let at = lines[0].find("scale").unwrap();
        assert_eq!(&lines[1][at..at + 5], "quick");

        let out = text(|w| show(&store, "udpmon", false, w));
        assert!(
            out.starts_with(&format!("experiment {e}: udpmon (quick)")),
            "{out}"
        );
        assert!(
            out.contains("runs:     4 ok of 4 (5 attempts in all)"),
            "{out}"
        );
        let run_lines: Vec<&str> = out
            .lines()
            .skip_while(|l| !l.starts_with("point"))
            .skip(1)
            .collect();
        assert_eq!(run_lines.len(), 4, "{out}");
        assert!(
            run_lines[0].starts_with("1      -l 64K, --spacing 5  1       1"),
            "{out}"
        );
        let out = text(|w| show(&store, "udpmon", true, w));
        assert!(
            out.contains("failed") && out.contains("connection refused"),
            "{out}"
        );

        let err = show(&store, "nope", false, &mut Vec::new()).unwrap_err();
        assert!(
            err.to_string().starts_with("no experiment \"nope\""),
            "{err}"
        );
    }

    #[test]
    fn export_to_file_and_missing_database() {
        let dir = TempDir::new("file");
        {
            let store = Store::open(&dir.db()).unwrap();
            fixture(&store);
        }
        let target = dir.0.join("runs.csv");
        let export = DbRequest::Export {
            experiment: None,
            format: ExportFormat::Csv,
            output: Some(&target),
            all_attempts: false,
        };
        let mut stdout = Vec::new();
        super::run(&dir.db(), &export, &mut stdout).unwrap();
        assert!(stdout.is_empty());
        assert_eq!(fs::read_to_string(&target).unwrap().lines().count(), 7);
        assert!(!dir.0.join("runs.csv.tmp").exists());

        let err = super::run(&dir.0.join("absent.db"), &DbRequest::List, &mut stdout).unwrap_err();
        assert!(
            err.to_string().starts_with("no results database at"),
            "{err}"
        );
    }

    #[test]
    fn ordered_object_keeps_document_order() {
        let kv = ordered_object(r#"{"z":"1","a":2,"m":[true]}"#).unwrap();
        let keys: Vec<&str> = kv.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["z", "a", "m"]);
        assert_eq!(value_text(&kv[1].1), "2");
        assert!(ordered_object("[1]").is_err());
        assert!(ordered_object(r#"{"a":1} x"#).is_err());
    }
}
