//! The results store: one SQLite file (`./xferlab.db` by default) holding
//! experiments, their expanded points, every run attempt with its full
//! result document, and the run's metrics as plain rows so that queries need
//! no JSON parsing. docs/store-schema.md documents the tables for people who
//! query the file themselves.
//!
//! This module owns the schema and every SQL statement that touches it; the
//! runner, `xferlab db`, reports and `compare` go through [`Store`]. Choices:
//!
//! * **Bundled SQLite, one file, WAL.** No system dependency; readers (a
//!   report while a run is going) never block the runner's writes.
//! * **One transaction per run, committed before [`Store::insert_run`]
//!   returns.** A run row and its metrics appear together or not at all, and
//!   what is committed survives the runner being killed, so a resumed
//!   experiment only repeats what is missing or failed.
//! * **Attempts, not overwrites.** Re-running a failed (point, repeat) adds a
//!   row with the next attempt number; the latest attempt is the one that
//!   counts ([`Store::latest_runs`]), earlier ones stay for the record.
//! * **Versioned schema.** `meta.schema_version` says which layout the file
//!   has; a file written by a newer xferlab is refused with both versions
//!   named instead of being misread (see [`SCHEMA_VERSION`]).
//! * **The store computes nothing.** Metrics, hashes and timestamps of runs
//!   come from the caller; the store only keeps them consistent.

// Nothing in the CLI calls this module until `run`, `db`, `report` and
// `compare` are wired.

use std::collections::HashSet;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, Row};
use rusqlite::{Transaction, TransactionBehavior};

/// The schema version this xferlab writes and understands. Policy: any
/// change to tables or columns bumps it; [`Store::open`] migrates older
/// files forward in place (inside one transaction), and refuses files with a
/// newer version, which an older binary could only misread.
pub const SCHEMA_VERSION: i64 = 2;

/// Run statuses, in the order of the CHECK constraint. `error`: the
/// invocation failed before producing a result.
pub const STATUSES: [&str; 6] = ["ok", "invalid", "partial", "failed", "error", "interrupted"];

/// Experiment scales.
pub const SCALES: [&str; 2] = ["full", "quick"];

/// How long a statement waits for another process's lock (a report reading
/// while the runner writes, two runners sharing a file) before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Tables in dependency order (parents first): the order of creation and of
/// `export --format sql`.
const TABLES: [&str; 5] = ["meta", "experiments", "points", "runs", "metrics"];

/// Version 1 of the schema. Kept verbatim: it is what `sqlite_master`
/// holds and what the SQL dump replays.
const SCHEMA_V1: &str = r#"
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE experiments (
    id              INTEGER PRIMARY KEY,
    name            TEXT NOT NULL,
    title           TEXT NOT NULL,
    scale           TEXT NOT NULL,
    scenario_path   TEXT NOT NULL,
    scenario_text   TEXT NOT NULL,
    scenario_hash   TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    xferlab_version TEXT NOT NULL
);
CREATE INDEX experiments_by_name ON experiments (name, scale);
CREATE TABLE points (
    id            INTEGER PRIMARY KEY,
    experiment_id INTEGER NOT NULL REFERENCES experiments (id) ON DELETE CASCADE,
    idx           INTEGER NOT NULL CHECK (idx >= 0),
    key           TEXT NOT NULL,
    knobs_json    TEXT NOT NULL,
    args_json     TEXT NOT NULL,
    UNIQUE (experiment_id, key)
);
CREATE TABLE runs (
    id              INTEGER PRIMARY KEY,
    experiment_id   INTEGER REFERENCES experiments (id) ON DELETE CASCADE,
    point_id        INTEGER REFERENCES points (id) ON DELETE CASCADE,
    repeat          INTEGER CHECK (repeat >= 1),
    attempt         INTEGER NOT NULL CHECK (attempt >= 1),
    status          TEXT NOT NULL CHECK (status IN ('ok', 'invalid', 'partial', 'failed', 'error', 'interrupted')),
    exit_code       INTEGER,
    error           TEXT,
    started_at      TEXT NOT NULL,
    ended_at        TEXT NOT NULL,
    duration_s      REAL NOT NULL,
    command         TEXT NOT NULL,
    host_json       TEXT,
    xferlab_version TEXT NOT NULL,
    result_json     TEXT,
    UNIQUE (point_id, repeat, attempt)
);
CREATE INDEX runs_by_experiment ON runs (experiment_id);
CREATE TABLE metrics (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name   TEXT NOT NULL,
    value  REAL,
    unit   TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE INDEX metrics_by_name ON metrics (name);
"#;

/// Version 2: a run across hosts (`where = "hosts"`) records which host
/// ran the client and which the server, with their agents' addresses
/// (NULL for runs on this machine). One step from version 1; a new file
/// is made as version 1, then stepped forward, so every file has the same
/// layout whatever version created it.
const MIGRATE_V1_V2: &str = r#"
ALTER TABLE runs ADD COLUMN client_host TEXT;
ALTER TABLE runs ADD COLUMN client_agent TEXT;
ALTER TABLE runs ADD COLUMN server_host TEXT;
ALTER TABLE runs ADD COLUMN server_agent TEXT;
"#;

/// Everything that can go wrong with the store. Each message is one line:
/// what happened, then what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "no results database at {}; run `xferlab run SCENARIO` first or pass --db PATH",
        path.display()
    )]
    NoDatabase { path: PathBuf },
    #[error(
        "{} is not an xferlab results database ({reason}); pass --db with the path of one, \
         or move the file away so a new one can be created",
        path.display()
    )]
    NotADatabase { path: PathBuf, reason: String },
    #[error(
        "results database {} has schema version {found}, but this xferlab ({}) understands \
         versions up to {supported}; use a newer xferlab to read it, or pass --db with another file",
        path.display(), env!("CARGO_PKG_VERSION")
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    #[error("results database {}: {what}: {source}; {}", path.display(), hint(source))]
    Sqlite {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot store {what}: {reason}; this is a bug in the caller, please report it")]
    Invalid { what: &'static str, reason: String },
    #[error("no experiment with id {id} in {}; `xferlab db list` shows the stored ones", path.display())]
    NoSuchExperiment { path: PathBuf, id: i64 },
    #[error("cannot write the export: {source}; check the output path and free disk space")]
    Write {
        #[source]
        source: io::Error,
    },
}

/// The user-facing half of an SQLite error: what to try.
fn hint(e: &rusqlite::Error) -> &'static str {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            "another process holds the file locked; wait for it to finish or pass --db with another file"
        }
        Some(ErrorCode::DiskFull) => "free disk space, then run again (committed runs are kept)",
        Some(ErrorCode::ReadOnly | ErrorCode::PermissionDenied | ErrorCode::CannotOpen) => {
            "check that the file and its directory are writable, or pass --db with another path"
        }
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => {
            "the file is damaged; export what is readable with `xferlab db export --format sql` or start a new --db"
        }
        _ => "check the file with `sqlite3 FILE 'PRAGMA integrity_check'` or pass --db with another path",
    }
}

/// An experiment as listed: its identity plus run counts.
#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentRow {
    pub id: i64,
    pub name: String,
    pub title: String,
    pub scale: String,
    pub scenario_path: String,
    pub scenario_hash: String,
    pub created_at: String,
    /// (point, repeat) slots with at least one stored attempt, i.e. the
    /// number of latest attempts.
    pub runs: i64,
    /// How many of those latest attempts have status `ok`.
    pub ok_runs: i64,
    /// Every stored attempt, superseded ones included.
    pub attempts: i64,
}

/// A new experiment: one execution of a scenario file at one scale.
#[derive(Debug, Clone)]
pub struct NewExperiment<'a> {
    /// Scenario file stem.
    pub name: &'a str,
    pub title: &'a str,
    /// `full` or `quick`.
    pub scale: &'a str,
    pub scenario_path: &'a str,
    pub scenario_text: &'a str,
    pub scenario_hash: &'a str,
    /// RFC 3339; empty = now (UTC).
    pub created_at: &'a str,
    pub xferlab_version: &'a str,
}

/// One point of an experiment's expansion.
#[derive(Debug, Clone)]
pub struct NewPoint<'a> {
    /// 0-based position in the expansion.
    pub idx: usize,
    /// Canonical text of the knob values, unique per experiment.
    pub key: &'a str,
    /// JSON object knob -> value.
    pub knobs_json: &'a str,
    /// JSON array: the full argv of the invocation.
    pub args_json: &'a str,
}

/// One finished (or failed) invocation.
#[derive(Debug, Clone)]
pub struct NewRun<'a> {
    /// None for single runs (`xferlab stream ... --db`).
    pub experiment_id: Option<i64>,
    /// Must belong to `experiment_id` when given.
    pub point_id: Option<i64>,
    /// 1-based.
    pub repeat: Option<u32>,
    /// One of [`STATUSES`].
    pub status: &'a str,
    pub exit_code: Option<i32>,
    pub error: Option<&'a str>,
    /// RFC 3339.
    pub started_at: &'a str,
    /// RFC 3339.
    pub ended_at: &'a str,
    pub duration_s: f64,
    /// JSON array: the argv.
    pub command_json: &'a str,
    pub host_json: Option<&'a str>,
    pub xferlab_version: &'a str,
    /// The full result document.
    pub result_json: Option<&'a str>,
    /// (name, value, unit); names unique. NaN is stored as NULL.
    pub metrics: &'a [(String, f64, String)],
    /// A run across hosts: which ran the client and which the server.
    pub hosts: Option<RunHosts<'a>>,
}

/// The hosts of a run across hosts (`where = "hosts"`), as `[hosts.NAME]`
/// names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunHosts<'a> {
    /// The host whose agent ran the test as its client.
    pub client: &'a str,
    /// Its agent, `ADDR:PORT`.
    pub client_agent: &'a str,
    /// The host whose test server it ran against.
    pub server: &'a str,
    /// Its agent, `ADDR:PORT`.
    pub server_agent: &'a str,
}

/// A stored run attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub id: i64,
    pub point_id: Option<i64>,
    pub point_key: Option<String>,
    pub point_idx: Option<i64>,
    pub repeat: Option<u32>,
    pub attempt: u32,
    pub status: String,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub started_at: String,
    pub duration_s: f64,
    pub result_json: Option<String>,
    pub experiment_id: Option<i64>,
    pub ended_at: String,
    pub command_json: String,
    pub host_json: Option<String>,
    pub xferlab_version: String,
    /// A run across hosts: (client host, its agent, server host, its agent).
    pub hosts: Option<[String; 4]>,
}

/// A point as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct PointRow {
    pub id: i64,
    pub idx: usize,
    pub key: String,
    pub knobs_json: String,
    pub args_json: String,
}

/// Now as RFC 3339 UTC with microseconds, the format of every timestamp in the
/// store (`2025-01-31T12:00:00Z`).
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_micros(SystemTime::now()).to_string()
}

/// An open results database.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

/// The columns [`run_from_row`] reads, for `runs r LEFT JOIN points p`.
const RUN_COLUMNS: &str = "r.id, r.point_id, p.key, p.idx, r.repeat, r.attempt, r.status, \
     r.exit_code, r.error, r.started_at, r.duration_s, r.result_json, r.experiment_id, \
     r.ended_at, r.command, r.host_json, r.xferlab_version, \
     r.client_host, r.client_agent, r.server_host, r.server_agent";

fn run_from_row(row: &Row<'_>) -> rusqlite::Result<RunRow> {
    Ok(RunRow {
        id: row.get(0)?,
        point_id: row.get(1)?,
        point_key: row.get(2)?,
        point_idx: row.get(3)?,
        repeat: row.get(4)?,
        attempt: row.get(5)?,
        status: row.get(6)?,
        exit_code: row.get(7)?,
        error: row.get(8)?,
        started_at: row.get(9)?,
        duration_s: row.get(10)?,
        result_json: row.get(11)?,
        experiment_id: row.get(12)?,
        ended_at: row.get(13)?,
        command_json: row.get(14)?,
        host_json: row.get(15)?,
        xferlab_version: row.get(16)?,
        hosts: match (row.get(17)?, row.get(18)?, row.get(19)?, row.get(20)?) {
            (Some(c), Some(ca), Some(sv), Some(sa)) => Some([c, ca, sv, sa]),
            _ => None,
        },
    })
}

/// Experiments with their counts; callers append a WHERE/ORDER clause on
/// `e`. "Latest" = the highest attempt of each (point, repeat); runs of an
/// experiment without a point each count on their own.
const EXPERIMENT_SELECT: &str = "
WITH latest AS (
    SELECT experiment_id, status FROM (
        SELECT experiment_id, point_id, status,
               ROW_NUMBER() OVER (PARTITION BY point_id, repeat ORDER BY attempt DESC, id DESC) AS rn
        FROM runs WHERE experiment_id IS NOT NULL)
    WHERE rn = 1 OR point_id IS NULL),
counts AS (
    SELECT experiment_id, COUNT(*) AS n, SUM(status = 'ok') AS ok
    FROM latest GROUP BY experiment_id),
tries AS (
    SELECT experiment_id, COUNT(*) AS n FROM runs
    WHERE experiment_id IS NOT NULL GROUP BY experiment_id)
SELECT e.id, e.name, e.title, e.scale, e.scenario_path, e.scenario_hash, e.created_at,
       COALESCE(c.n, 0), COALESCE(c.ok, 0), COALESCE(t.n, 0)
FROM experiments e
LEFT JOIN counts c ON c.experiment_id = e.id
LEFT JOIN tries t ON t.experiment_id = e.id";

fn experiment_from_row(row: &Row<'_>) -> rusqlite::Result<ExperimentRow> {
    Ok(ExperimentRow {
        id: row.get(0)?,
        name: row.get(1)?,
        title: row.get(2)?,
        scale: row.get(3)?,
        scenario_path: row.get(4)?,
        scenario_hash: row.get(5)?,
        created_at: row.get(6)?,
        runs: row.get(7)?,
        ok_runs: row.get(8)?,
        attempts: row.get(9)?,
    })
}

impl Store {
    /// Opens the results database at `path`, creating the file and the
    /// schema if missing (and migrating an older schema forward).
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        Self::open_with(path, flags, true)
    }

    /// Opens an existing results database (for `db`, `report`,
    /// `compare`): a missing file, or one that holds no results yet, is an
    /// error naming the path and what to do.
    pub fn open_existing(path: &Path) -> Result<Store, StoreError> {
        if !path.is_file() {
            return Err(StoreError::NoDatabase { path: path.into() });
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        Self::open_with(path, flags, false)
    }

    fn open_with(path: &Path, flags: OpenFlags, create: bool) -> Result<Store, StoreError> {
        let err = |what| {
            let path = path.to_path_buf();
            move |source: rusqlite::Error| classify(&path, what, source)
        };
        let conn = Connection::open_with_flags(path, flags).map_err(err("opening the file"))?;
        let store = Store {
            conn,
            path: path.into(),
        };
        store
            .conn
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(err("setting the busy timeout"))?;
        // WAL: readers and the writer do not block each other, and a commit
        // is an append to the -wal file. synchronous=NORMAL in WAL mode
        // fsyncs only at checkpoints, not at every commit: a committed run
        // is in the OS page cache once COMMIT returns, so it survives
        // SIGKILL, Ctrl-C or a crash of xferlab (the case that matters for
        // resuming); only a power loss or kernel crash can lose the last
        // few commits, and even then the file stays consistent. FULL would
        // add an fsync (milliseconds to tens of ms on disks) to every run
        // for a failure mode a lab run does not need to survive.
        let mode: String = store
            .conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(err("switching to WAL mode"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::NotADatabase {
                path: path.into(),
                reason: format!("it cannot use write-ahead logging (journal mode stays {mode})"),
            });
        }
        store
            .conn
            .execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
            .map_err(err("setting pragmas"))?;
        store.prepare_schema(create)?;
        Ok(store)
    }

    /// Checks the version and creates or migrates the schema, under one
    /// IMMEDIATE transaction so two processes opening a new file at once
    /// do not both create it.
    fn prepare_schema(&self, create: bool) -> Result<(), StoreError> {
        let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .map_err(|e| self.sql("checking the schema", e))?;
        let tables: Vec<String> = {
            let mut st = tx
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
                .map_err(|e| self.sql("checking the schema", e))?;
            let names = st
                .query_map([], |r| r.get(0))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<String>>>())
                .map_err(|e| self.sql("checking the schema", e))?;
            names
        };
        let version = if tables.iter().any(|t| t == "meta") {
            let v: Option<String> = tx
                .query_row(
                    "SELECT value FROM meta WHERE key = 'schema_version'",
                    [],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| self.sql("reading the schema version", e))?;
            let v = v.ok_or_else(|| StoreError::NotADatabase {
                path: self.path.clone(),
                reason: "its meta table has no schema_version".into(),
            })?;
            v.trim()
                .parse::<i64>()
                .map_err(|_| StoreError::NotADatabase {
                    path: self.path.clone(),
                    reason: format!("its schema_version {v:?} is not a number"),
                })?
        } else if tables.is_empty() {
            0
        } else {
            return Err(StoreError::NotADatabase {
                path: self.path.clone(),
                reason: format!(
                    "it is an SQLite file with other tables ({}) and no xferlab meta table",
                    tables.join(", ")
                ),
            });
        };
        if version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: self.path.clone(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        if version == 0 && !create {
            return Err(StoreError::NoDatabase {
                path: self.path.clone(),
            });
        }
        if version == 0 {
            tx.execute_batch(SCHEMA_V1)
                .map_err(|e| self.sql("creating the schema", e))?;
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', '1'), ('created_by', ?1)",
                params![concat!("xferlab ", env!("CARGO_PKG_VERSION"))],
            )
            .map_err(|e| self.sql("creating the schema", e))?;
        }
        // Each step migrates one version forward, in this transaction: a
        // file is either migrated whole or left as it was.
        if version < 2 {
            tx.execute_batch(MIGRATE_V1_V2)
                .map_err(|e| self.sql("migrating the schema to version 2", e))?;
        }
        tx.execute(
            "UPDATE meta SET value = ?1 WHERE key = 'schema_version'",
            params![SCHEMA_VERSION.to_string()],
        )
        .map_err(|e| self.sql("migrating the schema", e))?;
        tx.commit().map_err(|e| self.sql("creating the schema", e))
    }

    fn sql(&self, what: &'static str, source: rusqlite::Error) -> StoreError {
        classify(&self.path, what, source)
    }

    /// The file this store reads and writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The latest experiment (highest id) of a scenario at a scale: the one
    /// a resumed `xferlab run` continues.
    pub fn latest_experiment(
        &self,
        name: &str,
        scale: &str,
    ) -> Result<Option<ExperimentRow>, StoreError> {
        let q = format!(
            "{EXPERIMENT_SELECT} WHERE e.name = ?1 AND e.scale = ?2 ORDER BY e.id DESC LIMIT 1"
        );
        self.conn
            .query_row(&q, params![name, scale], experiment_from_row)
            .optional()
            .map_err(|e| self.sql("reading experiments", e))
    }

    pub fn experiment(&self, id: i64) -> Result<Option<ExperimentRow>, StoreError> {
        let q = format!("{EXPERIMENT_SELECT} WHERE e.id = ?1");
        self.conn
            .query_row(&q, params![id], experiment_from_row)
            .optional()
            .map_err(|e| self.sql("reading experiments", e))
    }

    /// What a user types to name an experiment: its numeric id, a scenario
    /// name (latest experiment of that name, any scale), or the scenario
    /// file's path (`scenarios/udpmon.toml` -> `udpmon`).
    pub fn find_experiment(&self, name_or_id: &str) -> Result<Option<ExperimentRow>, StoreError> {
        if let Ok(id) = name_or_id.trim().parse::<i64>() {
            if let Some(e) = self.experiment(id)? {
                return Ok(Some(e));
            }
        }
        let q = format!("{EXPERIMENT_SELECT} WHERE e.name = ?1 ORDER BY e.id DESC LIMIT 1");
        let by_name = |name: &str| {
            self.conn
                .query_row(&q, params![name], experiment_from_row)
                .optional()
                .map_err(|e| self.sql("reading experiments", e))
        };
        if let Some(e) = by_name(name_or_id)? {
            return Ok(Some(e));
        }
        match Path::new(name_or_id).file_stem().and_then(|s| s.to_str()) {
            Some(stem) if stem != name_or_id => by_name(stem),
            _ => Ok(None),
        }
    }

    /// Every experiment, oldest first.
    pub fn experiments(&self) -> Result<Vec<ExperimentRow>, StoreError> {
        let q = format!("{EXPERIMENT_SELECT} ORDER BY e.id");
        self.collect(&q, [], experiment_from_row, "reading experiments")
    }

    /// Replaces an experiment's scenario (`run --resume-anyway` with an
    /// edited file: its points are matched by their knob values, and its
    /// report follows the file's `[report]` from then on).
    pub fn update_scenario(
        &self,
        experiment_id: i64,
        text: &str,
        hash: &str,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE experiments SET scenario_text = ?2, scenario_hash = ?3 WHERE id = ?1",
                params![experiment_id, text, hash],
            )
            .map(|_| ())
            .map_err(|e| self.sql("updating the scenario", e))
    }

    /// The scenario file as it was when the experiment was created, or as
    /// `run --resume-anyway` last updated it.
    pub fn scenario_text(&self, experiment_id: i64) -> Result<String, StoreError> {
        self.conn
            .query_row(
                "SELECT scenario_text FROM experiments WHERE id = ?1",
                params![experiment_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql("reading the scenario", e))?
            .ok_or_else(|| StoreError::NoSuchExperiment {
                path: self.path.clone(),
                id: experiment_id,
            })
    }

    pub fn create_experiment(&self, e: &NewExperiment) -> Result<i64, StoreError> {
        if !SCALES.contains(&e.scale) {
            return Err(StoreError::Invalid {
                what: "an experiment",
                reason: format!("scale {:?} is not one of {}", e.scale, SCALES.join(", ")),
            });
        }
        let now;
        let created_at = if e.created_at.is_empty() {
            now = now_rfc3339();
            now.as_str()
        } else {
            e.created_at
        };
        self.conn
            .execute(
                "INSERT INTO experiments (name, title, scale, scenario_path, scenario_text, \
                 scenario_hash, created_at, xferlab_version) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    e.name,
                    e.title,
                    e.scale,
                    e.scenario_path,
                    e.scenario_text,
                    e.scenario_hash,
                    created_at,
                    e.xferlab_version
                ],
            )
            .map_err(|err| self.sql("storing the experiment", err))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Inserts the point, or returns the id of the experiment's point with
    /// the same key (then `idx`, knobs and args are left as first stored).
    pub fn ensure_point(&self, experiment_id: i64, p: &NewPoint) -> Result<i64, StoreError> {
        let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .map_err(|e| self.sql("storing a point", e))?;
        let existing: Option<i64> = tx
            .query_row(
                "SELECT id FROM points WHERE experiment_id = ?1 AND key = ?2",
                params![experiment_id, p.key],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql("storing a point", e))?;
        let id = match existing {
            Some(id) => id,
            None => {
                tx.execute(
                    "INSERT INTO points (experiment_id, idx, key, knobs_json, args_json) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![
                        experiment_id,
                        p.idx as i64,
                        p.key,
                        p.knobs_json,
                        p.args_json
                    ],
                )
                .map_err(|e| match e.sqlite_error_code() {
                    Some(ErrorCode::ConstraintViolation) => StoreError::NoSuchExperiment {
                        path: self.path.clone(),
                        id: experiment_id,
                    },
                    _ => self.sql("storing a point", e),
                })?;
                tx.last_insert_rowid()
            }
        };
        tx.commit().map_err(|e| self.sql("storing a point", e))?;
        Ok(id)
    }

    /// An experiment's points by idx, with their argv.
    pub fn point_rows(&self, experiment_id: i64) -> Result<Vec<PointRow>, StoreError> {
        self.collect(
            "SELECT id, idx, key, knobs_json, args_json FROM points \
             WHERE experiment_id = ?1 ORDER BY idx, id",
            params![experiment_id],
            |r| {
                Ok(PointRow {
                    id: r.get(0)?,
                    idx: usize::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                    key: r.get(2)?,
                    knobs_json: r.get(3)?,
                    args_json: r.get(4)?,
                })
            },
            "reading points",
        )
    }

    /// Stores one run and its metrics in one transaction, committed before
    /// returning. The attempt number is 1 + the highest stored attempt of
    /// the same (point, repeat); runs without a point are attempt 1.
    pub fn insert_run(&self, r: &NewRun) -> Result<i64, StoreError> {
        let invalid = |reason: String| StoreError::Invalid {
            what: "a run",
            reason,
        };
        if !STATUSES.contains(&r.status) {
            return Err(invalid(format!(
                "status {:?} is not one of {}",
                r.status,
                STATUSES.join(", ")
            )));
        }
        if r.repeat == Some(0) {
            return Err(invalid("repeat numbers start at 1".into()));
        }
        let mut seen = HashSet::new();
        for (name, _, _) in r.metrics {
            if !seen.insert(name.as_str()) {
                return Err(invalid(format!("metric {name:?} is given twice")));
            }
        }
        let what = "storing a run";
        let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .map_err(|e| self.sql(what, e))?;
        if let Some(point_id) = r.point_id {
            let owner: Option<i64> = tx
                .query_row(
                    "SELECT experiment_id FROM points WHERE id = ?1",
                    params![point_id],
                    |row| row.get(0),
                )
                .optional()
                .map_err(|e| self.sql(what, e))?;
            match owner {
                None => return Err(invalid(format!("point {point_id} does not exist"))),
                Some(owner) if Some(owner) != r.experiment_id => {
                    return Err(invalid(format!(
                        "point {point_id} belongs to experiment {owner}, not {:?}",
                        r.experiment_id
                    )))
                }
                Some(_) => {}
            }
        } else if let Some(id) = r.experiment_id {
            let exists: Option<i64> = tx
                .query_row(
                    "SELECT id FROM experiments WHERE id = ?1",
                    params![id],
                    |row| row.get(0),
                )
                .optional()
                .map_err(|e| self.sql(what, e))?;
            if exists.is_none() {
                return Err(StoreError::NoSuchExperiment {
                    path: self.path.clone(),
                    id,
                });
            }
        }
        let attempt: i64 = match r.point_id {
            Some(point_id) => tx
                .query_row(
                    "SELECT COALESCE(MAX(attempt), 0) + 1 FROM runs \
                     WHERE point_id = ?1 AND repeat IS ?2",
                    params![point_id, r.repeat],
                    |row| row.get(0),
                )
                .map_err(|e| self.sql(what, e))?,
            None => 1,
        };
        tx.execute(
            "INSERT INTO runs (experiment_id, point_id, repeat, attempt, status, exit_code, error, \
             started_at, ended_at, duration_s, command, host_json, xferlab_version, result_json, \
             client_host, client_agent, server_host, server_agent) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
            params![
                r.experiment_id,
                r.point_id,
                r.repeat,
                attempt,
                r.status,
                r.exit_code,
                r.error,
                r.started_at,
                r.ended_at,
                r.duration_s,
                r.command_json,
                r.host_json,
                r.xferlab_version,
                r.result_json,
                r.hosts.as_ref().map(|h| h.client),
                r.hosts.as_ref().map(|h| h.client_agent),
                r.hosts.as_ref().map(|h| h.server),
                r.hosts.as_ref().map(|h| h.server_agent)
            ],
        )
        .map_err(|e| self.sql(what, e))?;
        let run_id = tx.last_insert_rowid();
        {
            let mut st = tx
                .prepare_cached(
                    "INSERT INTO metrics (run_id, name, value, unit) VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(|e| self.sql(what, e))?;
            for (name, value, unit) in r.metrics {
                // SQLite turns a bound NaN into NULL; make that explicit.
                let value = (!value.is_nan()).then_some(*value);
                st.execute(params![run_id, name, value, unit])
                    .map_err(|e| self.sql(what, e))?;
            }
        }
        tx.commit().map_err(|e| self.sql(what, e))?;
        Ok(run_id)
    }

    /// The latest attempt of every (point, repeat) of an experiment,
    /// ordered by point idx then repeat; runs of the experiment without a
    /// point come last, each on its own.
    pub fn latest_runs(&self, experiment_id: i64) -> Result<Vec<RunRow>, StoreError> {
        let q = format!(
            "SELECT {RUN_COLUMNS} FROM (
                 SELECT *, ROW_NUMBER() OVER (
                     PARTITION BY point_id, repeat ORDER BY attempt DESC, id DESC) AS rn
                 FROM runs WHERE experiment_id = ?1) r
             LEFT JOIN points p ON p.id = r.point_id
             WHERE r.rn = 1 OR r.point_id IS NULL
             ORDER BY p.idx IS NULL, p.idx, r.repeat, r.id"
        );
        self.collect(&q, params![experiment_id], run_from_row, "reading runs")
    }

    /// Every attempt of an experiment, superseded ones included, by point
    /// idx, repeat, attempt.
    pub fn all_runs(&self, experiment_id: i64) -> Result<Vec<RunRow>, StoreError> {
        let q = format!(
            "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN points p ON p.id = r.point_id \
             WHERE r.experiment_id = ?1 \
             ORDER BY p.idx IS NULL, p.idx, r.repeat, r.attempt, r.id"
        );
        self.collect(&q, params![experiment_id], run_from_row, "reading runs")
    }

    pub fn run(&self, run_id: i64) -> Result<Option<RunRow>, StoreError> {
        let q = format!(
            "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN points p ON p.id = r.point_id \
             WHERE r.id = ?1"
        );
        self.conn
            .query_row(&q, params![run_id], run_from_row)
            .optional()
            .map_err(|e| self.sql("reading runs", e))
    }

    /// (name, value, unit) in the order the caller stored them; NULL
    /// values read back as NaN.
    pub fn metrics_of_run(&self, run_id: i64) -> Result<Vec<(String, f64, String)>, StoreError> {
        self.collect(
            "SELECT name, value, unit FROM metrics WHERE run_id = ?1 ORDER BY rowid",
            params![run_id],
            |r| {
                let v: Option<f64> = r.get(1)?;
                Ok((r.get(0)?, v.unwrap_or(f64::NAN), r.get(2)?))
            },
            "reading metrics",
        )
    }

    /// Runs stored without an experiment, oldest first.
    pub fn single_runs(&self) -> Result<Vec<RunRow>, StoreError> {
        let q = format!(
            "SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN points p ON p.id = r.point_id \
             WHERE r.experiment_id IS NULL ORDER BY r.id"
        );
        self.collect(&q, [], run_from_row, "reading runs")
    }

    fn collect<T, P: rusqlite::Params>(
        &self,
        sql: &str,
        params: P,
        f: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
        what: &'static str,
    ) -> Result<Vec<T>, StoreError> {
        let mut st = self.conn.prepare(sql).map_err(|e| self.sql(what, e))?;
        let rows = st
            .query_map(params, f)
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<T>>>())
            .map_err(|e| self.sql(what, e));
        rows
    }

    /// Writes an SQL text dump that `sqlite3 NEW.db < dump.sql` loads:
    /// the schema, then INSERTs parents first, then the indexes. With an
    /// experiment id, only that experiment's rows (and `meta`).
    pub fn dump_sql(
        &self,
        experiment_id: Option<i64>,
        out: &mut dyn Write,
    ) -> Result<(), StoreError> {
        let what = "dumping the database";
        // One read transaction: a consistent snapshot even while a runner
        // appends.
        let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Deferred)
            .map_err(|e| self.sql(what, e))?;
        let w = |e| StoreError::Write { source: e };
        let scope = match experiment_id {
            Some(id) => format!("experiment {id}"),
            None => "all experiments and single runs".into(),
        };
        writeln!(
            out,
            "-- xferlab results, schema version {SCHEMA_VERSION}, written by xferlab {}: {scope}.\n\
             -- Load into a new file with: sqlite3 NEW.db < THIS.sql\n\
             PRAGMA foreign_keys = OFF;\nBEGIN TRANSACTION;",
            env!("CARGO_PKG_VERSION")
        )
        .map_err(w)?;
        let schema = |ty: &str| -> Result<Vec<(String, String)>, StoreError> {
            let mut st = tx
                .prepare(
                    "SELECT name, sql FROM sqlite_master \
                     WHERE type = ?1 AND sql IS NOT NULL AND name NOT LIKE 'sqlite_%' \
                     ORDER BY rowid",
                )
                .map_err(|e| self.sql(what, e))?;
            let rows = st
                .query_map([ty], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<(String, String)>>>())
                .map_err(|e| self.sql(what, e));
            rows
        };
        let tables = schema("table")?;
        for name in TABLES {
            let Some((_, create)) = tables.iter().find(|(n, _)| n == name) else {
                continue;
            };
            writeln!(out, "{create};").map_err(w)?;
            let filter = match (name, experiment_id) {
                (_, None) | ("meta", _) => "",
                ("experiments", _) => " WHERE id = ?1",
                ("points" | "runs", _) => " WHERE experiment_id = ?1",
                _ => " WHERE run_id IN (SELECT id FROM runs WHERE experiment_id = ?1)",
            };
            let mut st = tx
                .prepare(&format!("SELECT * FROM \"{name}\"{filter} ORDER BY rowid"))
                .map_err(|e| self.sql(what, e))?;
            let columns = st.column_count();
            let mut rows = match experiment_id {
                Some(id) if !filter.is_empty() => st.query(params![id]),
                _ => st.query([]),
            }
            .map_err(|e| self.sql(what, e))?;
            let mut line = String::new();
            while let Some(row) = rows.next().map_err(|e| self.sql(what, e))? {
                line.clear();
                line.push_str("INSERT INTO \"");
                line.push_str(name);
                line.push_str("\" VALUES(");
                for i in 0..columns {
                    if i > 0 {
                        line.push(',');
                    }
                    let v = row.get_ref(i).map_err(|e| self.sql(what, e))?;
                    push_sql_literal(&mut line, v);
                }
                line.push_str(");");
                writeln!(out, "{line}").map_err(w)?;
            }
        }
        for (_, create) in schema("index")? {
            writeln!(out, "{create};").map_err(w)?;
        }
        writeln!(out, "COMMIT;").map_err(w)?;
        tx.commit().map_err(|e| self.sql(what, e))
    }
}

/// Appends `v` as an SQL literal: NULL, integers, reals that read back
/// exactly (`{:?}` is Rust's shortest round-trip form and always has a `.`
/// or exponent, so a REAL stays REAL), text in single quotes with quotes
/// doubled, blobs as X'..'.
fn push_sql_literal(s: &mut String, v: ValueRef<'_>) {
    use std::fmt::Write as _;
    match v {
        ValueRef::Null => s.push_str("NULL"),
        ValueRef::Integer(i) => {
            let _ = write!(s, "{i}");
        }
        ValueRef::Real(f) if f.is_infinite() => {
            // What sqlite3's .dump writes; parses back as +-Inf.
            s.push_str(if f > 0.0 { "9.0e+999" } else { "-9.0e+999" });
        }
        ValueRef::Real(f) => {
            let _ = write!(s, "{f:?}");
        }
        ValueRef::Text(t) => {
            s.push('\'');
            s.push_str(&String::from_utf8_lossy(t).replace('\'', "''"));
            s.push('\'');
        }
        ValueRef::Blob(b) => {
            s.push_str("X'");
            for byte in b {
                let _ = write!(s, "{byte:02X}");
            }
            s.push('\'');
        }
    }
}

/// Turns an SQLite error into the store error a user can act on.
fn classify(path: &Path, what: &'static str, source: rusqlite::Error) -> StoreError {
    match source.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => StoreError::NotADatabase {
            path: path.into(),
            reason: "it is not an SQLite file".into(),
        },
        _ => StoreError::Sqlite {
            path: path.into(),
            what,
            source,
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Instant;

    /// A directory under the system temp dir, removed on drop.
    pub(crate) struct TempDir(pub PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> TempDir {
            static N: AtomicU32 = AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!(
                "xferlab-store-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
        pub(crate) fn db(&self) -> PathBuf {
            self.0.join("xferlab.db")
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub(crate) fn experiment(store: &Store, name: &str) -> i64 {
        store
            .create_experiment(&NewExperiment {
                name,
                title: "Throughput versus size",
                scale: "quick",
                scenario_path: "scenarios/udpmon.toml",
                scenario_text: "title = 'it''s a test'\n",
                scenario_hash: "ab12cd",
                created_at: "2025-01-31T12:00:00Z",
                xferlab_version: "0.1.0",
            })
            .unwrap()
    }

    pub(crate) fn run<'a>(
        experiment_id: Option<i64>,
        point_id: Option<i64>,
        repeat: Option<u32>,
        status: &'a str,
        metrics: &'a [(String, f64, String)],
    ) -> NewRun<'a> {
        NewRun {
            experiment_id,
            point_id,
            repeat,
            status,
            exit_code: Some(if status == "ok" { 0 } else { 1 }),
            error: (status != "ok").then_some("connection refused; is the server running?"),
            started_at: "2025-01-31T12:00:01Z",
            ended_at: "2025-01-31T12:00:11Z",
            duration_s: 10.25,
            command_json: r#"["xferlab","stream","-t","10"]"#,
            host_json: Some(r#"{"kernel":"6.8"}"#),
            xferlab_version: "0.1.0",
            result_json: Some(r#"{"end":{"bps":1e9}}"#),
            metrics,
            hosts: None,
        }
    }

    pub(crate) fn metrics(bps: f64) -> Vec<(String, f64, String)> {
        vec![
            ("throughput_bps".into(), bps, "bit/s".into()),
            ("retransmits".into(), 3.0, "".into()),
            ("loss_ratio".into(), f64::NAN, "1".into()),
        ]
    }

    #[test]
    fn insert_and_read_back() {
        let dir = TempDir::new("roundtrip");
        let store = Store::open(&dir.db()).unwrap();
        let e = experiment(&store, "udpmon");
        let p = store
            .ensure_point(
                e,
                &NewPoint {
                    idx: 0,
                    key: "-l=64K;--spacing=5",
                    knobs_json: r#"{"-l":"64K","--spacing":"5"}"#,
                    args_json: r#"["xferlab","sweep","-l","64K"]"#,
                },
            )
            .unwrap();
        let m = metrics(9.5e8);
        let id = store
            .insert_run(&run(Some(e), Some(p), Some(1), "ok", &m))
            .unwrap();
        let got = store.run(id).unwrap().unwrap();
        assert_eq!(got.point_key.as_deref(), Some("-l=64K;--spacing=5"));
        assert_eq!(got.point_idx, Some(0));
        assert_eq!(got.repeat, Some(1));
        assert_eq!(got.attempt, 1);
        assert_eq!(got.status, "ok");
        assert_eq!(got.exit_code, Some(0));
        assert_eq!(got.error, None);
        assert_eq!(got.duration_s, 10.25);
        assert_eq!(got.experiment_id, Some(e));
        assert_eq!(got.result_json.as_deref(), Some(r#"{"end":{"bps":1e9}}"#));
        assert_eq!(got.host_json.as_deref(), Some(r#"{"kernel":"6.8"}"#));
        let back = store.metrics_of_run(id).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[0], m[0], "insertion order and values kept");
        assert_eq!(back[1], m[1]);
        assert!(back[2].1.is_nan(), "NaN stored as NULL, read as NaN");
        assert_eq!(
            store
                .point_rows(e)
                .unwrap()
                .into_iter()
                .map(|p| (p.id, p.idx, p.key, p.knobs_json))
                .collect::<Vec<_>>(),
            vec![(
                p,
                0,
                "-l=64K;--spacing=5".to_string(),
                r#"{"-l":"64K","--spacing":"5"}"#.to_string()
            )]
        );
        // ensure_point is idempotent by key.
        let again = store
            .ensure_point(
                e,
                &NewPoint {
                    idx: 7,
                    key: "-l=64K;--spacing=5",
                    knobs_json: "{}",
                    args_json: "[]",
                },
            )
            .unwrap();
        assert_eq!(again, p);
        assert_eq!(store.point_rows(e).unwrap().len(), 1);
        assert_eq!(store.scenario_text(e).unwrap(), "title = 'it''s a test'\n");
        store
            .update_scenario(e, "title = 'edited'\n", "ef34")
            .unwrap();
        assert_eq!(store.scenario_text(e).unwrap(), "title = 'edited'\n");
        store
            .update_scenario(e, "title = 'it''s a test'\n", "ab12cd")
            .unwrap();
        let ex = store.experiment(e).unwrap().unwrap();
        assert_eq!((ex.runs, ex.ok_runs, ex.attempts), (1, 1, 1));
        assert_eq!(ex.name, "udpmon");
        assert_eq!(store.find_experiment("udpmon").unwrap().unwrap().id, e);
        assert_eq!(
            store.find_experiment(&e.to_string()).unwrap().unwrap().id,
            e
        );
        assert_eq!(
            store
                .find_experiment("scenarios/udpmon.toml")
                .unwrap()
                .unwrap()
                .id,
            e
        );
        assert!(store.find_experiment("nope").unwrap().is_none());
        assert_eq!(
            store
                .latest_experiment("udpmon", "quick")
                .unwrap()
                .unwrap()
                .id,
            e
        );
        assert!(store.latest_experiment("udpmon", "full").unwrap().is_none());

        // A single run: no experiment, no point.
        let s = store.insert_run(&run(None, None, None, "ok", &m)).unwrap();
        let singles = store.single_runs().unwrap();
        assert_eq!(singles.len(), 1);
        assert_eq!(singles[0].id, s);
        assert_eq!(singles[0].attempt, 1);
        assert_eq!(singles[0].point_key, None);
    }

    #[test]
    fn attempts_increment_and_latest_runs_pick_the_latest() {
        let dir = TempDir::new("attempts");
        let store = Store::open(&dir.db()).unwrap();
        let e = experiment(&store, "grid");
        let p0 = store
            .ensure_point(
                e,
                &NewPoint {
                    idx: 0,
                    key: "a=1",
                    knobs_json: r#"{"a":"1"}"#,
                    args_json: "[]",
                },
            )
            .unwrap();
        let p1 = store
            .ensure_point(
                e,
                &NewPoint {
                    idx: 1,
                    key: "a=2",
                    knobs_json: r#"{"a":"2"}"#,
                    args_json: "[]",
                },
            )
            .unwrap();
        let m = metrics(1.0);
        // Stored out of order on purpose: point 1 first, point 0 repeat 2
        // before repeat 1.
        store
            .insert_run(&run(Some(e), Some(p1), Some(1), "ok", &m))
            .unwrap();
        let first = store
            .insert_run(&run(Some(e), Some(p0), Some(2), "failed", &m))
            .unwrap();
        let second = store
            .insert_run(&run(Some(e), Some(p0), Some(2), "error", &m))
            .unwrap();
        let third = store
            .insert_run(&run(Some(e), Some(p0), Some(2), "ok", &m))
            .unwrap();
        store
            .insert_run(&run(Some(e), Some(p0), Some(1), "ok", &m))
            .unwrap();
        let attempts: Vec<u32> = [first, second, third]
            .iter()
            .map(|id| store.run(*id).unwrap().unwrap().attempt)
            .collect();
        assert_eq!(attempts, [1, 2, 3]);

        let latest = store.latest_runs(e).unwrap();
        let got: Vec<(Option<i64>, Option<u32>, u32, &str)> = latest
            .iter()
            .map(|r| (r.point_idx, r.repeat, r.attempt, r.status.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (Some(0), Some(1), 1, "ok"),
                (Some(0), Some(2), 3, "ok"),
                (Some(1), Some(1), 1, "ok"),
            ]
        );
        assert_eq!(store.all_runs(e).unwrap().len(), 5);
        let ex = store.experiment(e).unwrap().unwrap();
        assert_eq!((ex.runs, ex.ok_runs, ex.attempts), (3, 3, 5));

        // A failed latest attempt counts as a run but not as ok.
        store
            .insert_run(&run(Some(e), Some(p1), Some(1), "failed", &m))
            .unwrap();
        let ex = store.experiment(e).unwrap().unwrap();
        assert_eq!((ex.runs, ex.ok_runs, ex.attempts), (3, 2, 6));
        // Another experiment's points are separate attempt sequences.
        let e2 = experiment(&store, "grid");
        let q0 = store
            .ensure_point(
                e2,
                &NewPoint {
                    idx: 0,
                    key: "a=1",
                    knobs_json: "{}",
                    args_json: "[]",
                },
            )
            .unwrap();
        assert_ne!(q0, p0);
        let r = store
            .insert_run(&run(Some(e2), Some(q0), Some(2), "ok", &m))
            .unwrap();
        assert_eq!(store.run(r).unwrap().unwrap().attempt, 1);
        assert_eq!(
            store
                .latest_experiment("grid", "quick")
                .unwrap()
                .unwrap()
                .id,
            e2
        );
        assert_eq!(store.experiments().unwrap().len(), 2);
    }

    #[test]
    fn bad_runs_are_refused_and_leave_nothing_behind() {
        let dir = TempDir::new("invalid");
        let store = Store::open(&dir.db()).unwrap();
        let e = experiment(&store, "x");
        let other = experiment(&store, "y");
        let p = store
            .ensure_point(
                e,
                &NewPoint {
                    idx: 0,
                    key: "k",
                    knobs_json: "{}",
                    args_json: "[]",
                },
            )
            .unwrap();
        let m = metrics(1.0);
        let err = store
            .insert_run(&run(Some(e), Some(p), Some(1), "great", &m))
            .unwrap_err();
        assert!(err.to_string().contains("status \"great\""), "{err}");
        let err = store
            .insert_run(&run(Some(other), Some(p), Some(1), "ok", &m))
            .unwrap_err();
        assert!(err.to_string().contains("belongs to experiment"), "{err}");
        let dup = vec![
            ("a".to_string(), 1.0, "s".to_string()),
            ("a".to_string(), 2.0, "s".to_string()),
        ];
        let err = store
            .insert_run(&run(Some(e), Some(p), Some(1), "ok", &dup))
            .unwrap_err();
        assert!(err.to_string().contains("given twice"), "{err}");
        let err = store
            .insert_run(&run(Some(999), None, None, "ok", &m))
            .unwrap_err();
        assert!(
            matches!(err, StoreError::NoSuchExperiment { id: 999, .. }),
            "{err}"
        );
        assert!(store.all_runs(e).unwrap().is_empty());
        let n: i64 = store
            .conn
            .query_row("SELECT COUNT(*) FROM metrics", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0);
        let err = store
            .create_experiment(&NewExperiment {
                name: "z",
                title: "",
                scale: "huge",
                scenario_path: "",
                scenario_text: "",
                scenario_hash: "",
                created_at: "",
                xferlab_version: "",
            })
            .unwrap_err();
        assert!(err.to_string().contains("full, quick"), "{err}");
    }

    #[test]
    fn committed_run_survives_the_process_not_closing_the_store() {
        let dir = TempDir::new("durable");
        let m = metrics(2.0);
        let (e, id) = {
            let store = Store::open(&dir.db()).unwrap();
            let e = experiment(&store, "d");
            let p = store
                .ensure_point(
                    e,
                    &NewPoint {
                        idx: 0,
                        key: "k",
                        knobs_json: "{}",
                        args_json: "[]",
                    },
                )
                .unwrap();
            let id = store
                .insert_run(&run(Some(e), Some(p), Some(1), "ok", &m))
                .unwrap();
            // As after SIGKILL: the connection is never closed, the WAL
            // is never checkpointed into the main file.
            std::mem::forget(store);
            (e, id)
        };
        assert!(
            dir.0.join("xferlab.db-wal").exists(),
            "the run is in the WAL"
        );
        let store = Store::open_existing(&dir.db()).unwrap();
        let got = store.run(id).unwrap().expect("committed run is readable");
        assert_eq!(got.status, "ok");
        assert_eq!(store.metrics_of_run(id).unwrap().len(), 3);
        assert_eq!(store.latest_runs(e).unwrap().len(), 1);
        drop(store);
        // And after a normal drop too.
        let store = Store::open_existing(&dir.db()).unwrap();
        assert!(store.run(id).unwrap().is_some());
    }

    /// The child half of [`committed_runs_survive_sigkill`]: stores runs
    /// until killed, saying after each commit how many are stored.
    #[test]
    #[ignore = "helper process for committed_runs_survive_sigkill"]
    fn sigkill_child() {
        use std::io::Write as _;
        let Some(db) = std::env::var_os("XFERLAB_STORE_CHILD_DB") else {
            return;
        };
        let store = Store::open(Path::new(&db)).unwrap();
        let e = experiment(&store, "killed");
        let p = store
            .ensure_point(
                e,
                &NewPoint {
                    idx: 0,
                    key: "k",
                    knobs_json: "{}",
                    args_json: "[]",
                },
            )
            .unwrap();
        let m = metrics(1.0);
        let mut stdout = io::stdout();
        for repeat in 1..=100_000 {
            store
                .insert_run(&run(Some(e), Some(p), Some(repeat), "ok", &m))
                .unwrap();
            writeln!(stdout, "committed {repeat}").unwrap();
            stdout.flush().unwrap();
        }
    }

    #[test]
    fn committed_runs_survive_sigkill() {
        use std::io::{BufRead, BufReader};
        use std::process::{Command, Stdio};
        let dir = TempDir::new("sigkill");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "experiment::store::tests::sigkill_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("XFERLAB_STORE_CHILD_DB", dir.db())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut acknowledged = 0;
        while acknowledged < 20 {
            let line = lines.next().expect("child ended early").unwrap();
            if let Some(n) = line.strip_prefix("committed ") {
                acknowledged = n.parse().unwrap();
            }
        }
        child.kill().unwrap(); // SIGKILL, mid-way through later inserts
        child.wait().unwrap();
        let store = Store::open_existing(&dir.db()).unwrap();
        let e = store.latest_experiment("killed", "quick").unwrap().unwrap();
        let runs = store.latest_runs(e.id).unwrap();
        assert!(
            runs.len() >= acknowledged,
            "{} < {acknowledged}",
            runs.len()
        );
        let repeats: Vec<u32> = runs.iter().map(|r| r.repeat.unwrap()).collect();
        let want: Vec<u32> = (1..=runs.len() as u32).collect();
        assert_eq!(repeats, want, "no gaps, no duplicates");
        for r in &runs {
            assert_eq!(store.metrics_of_run(r.id).unwrap().len(), 3, "run {}", r.id);
        }
    }

    #[test]
    fn a_version_1_file_is_migrated_in_place_and_keeps_its_runs() {
        let dir = TempDir::new("migrate");
        {
            // A file as xferlab wrote it before runs across hosts.
            let conn = Connection::open(dir.db()).unwrap();
            conn.execute_batch(SCHEMA_V1).unwrap();
            conn.execute_batch(
                "INSERT INTO meta VALUES ('schema_version', '1'), ('created_by', 'xferlab 0.0.9');
                 INSERT INTO experiments VALUES (1, 'old', 'old', 'full', 'old.toml', '', 'h', '2025-01-01T00:00:00Z', '0.0.9');
                 INSERT INTO points VALUES (1, 1, 0, 'k', '{}', '[]');
                 INSERT INTO runs VALUES (1, 1, 1, 1, 1, 'ok', 0, NULL, '2025-01-01T00:00:00Z',
                     '2025-01-01T00:00:01Z', 1.0, '[]', NULL, '0.0.9', NULL);",
            )
            .unwrap();
        }
        let store = Store::open(&dir.db()).unwrap();
        let version: String = store
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(version, "2");
        let old = store.latest_runs(1).unwrap();
        assert_eq!(old.len(), 1);
        assert_eq!((old[0].status.as_str(), &old[0].hosts), ("ok", &None));
        let ms = metrics(1e9);
        let mut across = run(Some(1), Some(1), Some(1), "ok", &ms);
        across.hosts = Some(RunHosts {
            client: "a",
            client_agent: "10.9.0.1:5290",
            server: "b",
            server_agent: "10.9.0.2:5290",
        });
        let id = store.insert_run(&across).unwrap();
        let got = store.run(id).unwrap().unwrap();
        assert_eq!(
            got.hosts,
            Some(["a", "10.9.0.1:5290", "b", "10.9.0.2:5290"].map(String::from))
        );
        assert_eq!(got.attempt, 2);
        drop(store);
        // Opening again is no second migration.
        let again = Store::open(&dir.db()).unwrap();
        assert_eq!(again.all_runs(1).unwrap().len(), 2);
    }

    #[test]
    fn newer_schema_is_refused_naming_both_versions() {
        let dir = TempDir::new("newer");
        {
            let store = Store::open(&dir.db()).unwrap();
            store
                .conn
                .execute(
                    "UPDATE meta SET value = '7' WHERE key = 'schema_version'",
                    [],
                )
                .unwrap();
        }
        for err in [
            Store::open(&dir.db()).unwrap_err(),
            Store::open_existing(&dir.db()).unwrap_err(),
        ] {
            assert!(
                matches!(
                    err,
                    StoreError::NewerSchema {
                        found: 7,
                        supported: 2,
                        ..
                    }
                ),
                "{err}"
            );
            let msg = err.to_string();
            assert!(msg.contains("schema version 7"), "{msg}");
            assert!(msg.contains("up to 2"), "{msg}");
            assert!(msg.contains("newer xferlab"), "{msg}");
            assert!(!msg.contains('\n'));
        }
    }

    #[test]
    fn missing_and_foreign_files_get_clear_errors() {
        let dir = TempDir::new("missing");
        let err = Store::open_existing(&dir.db()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "no results database at {}; run `xferlab run SCENARIO` first or pass --db PATH",
                dir.db().display()
            )
        );
        assert!(!dir.db().exists(), "open_existing creates nothing");

        let text = dir.0.join("notes.txt");
        std::fs::write(
            &text,
            "this is not SQLite, just some text long enough.".repeat(40),
        )
        .unwrap();
        let err = Store::open(&text).unwrap_err();
        assert!(matches!(err, StoreError::NotADatabase { .. }), "{err}");

        let foreign = dir.0.join("other.db");
        Connection::open(&foreign)
            .unwrap()
            .execute_batch("CREATE TABLE t (x INTEGER)")
            .unwrap();
        let err = Store::open(&foreign).unwrap_err();
        assert!(err.to_string().contains("no xferlab meta table"), "{err}");
    }

    #[test]
    fn sql_literals_round_trip() {
        let conn = Connection::open_in_memory().unwrap();
        let mut s = String::from("SELECT ");
        let values = [
            ValueRef::Null,
            ValueRef::Integer(-42),
            ValueRef::Real(3.0),
            ValueRef::Real(0.1),
            ValueRef::Real(1e300),
            ValueRef::Real(f64::INFINITY),
            ValueRef::Text(b"it's\n'quoted'"),
            ValueRef::Blob(&[0, 0xff, 0x10]),
        ];
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            push_sql_literal(&mut s, *v);
        }
        conn.query_row(&s, [], |r| {
            assert_eq!(r.get_ref(0)?, ValueRef::Null);
            assert_eq!(r.get_ref(1)?, ValueRef::Integer(-42));
            assert_eq!(r.get_ref(2)?, ValueRef::Real(3.0), "REAL stays REAL");
            assert_eq!(r.get::<_, f64>(3)?, 0.1);
            assert_eq!(r.get::<_, f64>(4)?, 1e300);
            assert_eq!(r.get::<_, f64>(5)?, f64::INFINITY);
            assert_eq!(r.get::<_, String>(6)?, "it's\n'quoted'");
            assert_eq!(r.get::<_, Vec<u8>>(7)?, vec![0, 0xff, 0x10]);
            Ok(())
        })
        .unwrap();
    }

    /// The store's write time per run, for a realistic result (~50 KB of
    /// JSON, 30 metrics) in a file database. Prints the median; asserts
    /// only a generous bound (shared CI machines). Run with
    /// `--nocapture` to see the figure.
    #[test]
    fn insert_run_time() {
        let dir = TempDir::new("timing");
        let store = Store::open(&dir.db()).unwrap();
        let e = experiment(&store, "t");
        let p = store
            .ensure_point(
                e,
                &NewPoint {
                    idx: 0,
                    key: "k",
                    knobs_json: "{}",
                    args_json: "[]",
                },
            )
            .unwrap();
        let mut result = String::from(r#"{"intervals":["#);
        let mut i = 0;
        while result.len() < 50_000 {
            if i > 0 {
                result.push(',');
            }
            result.push_str(&format!(
                r#"{{"start":{i}.0,"end":{}.0,"bytes":{},"bits_per_second":{},"retransmits":{},"snd_cwnd":{},"rtt_us":{}}}"#,
                i + 1,
                117_964_800 + i * 13,
                943_718_400.5 + i as f64,
                i % 3,
                87_380 + i,
                41 + i % 7
            ));
            i += 1;
        }
        result.push_str("]}");
        let metrics: Vec<(String, f64, String)> = (0..30)
            .map(|k| {
                (
                    format!("metric_{k:02}"),
                    k as f64 * 1.5e6,
                    "bit/s".to_string(),
                )
            })
            .collect();
        let mut times = Vec::new();
        for repeat in 1..=41 {
            let mut r = run(Some(e), Some(p), Some(repeat), "ok", &metrics);
            r.result_json = Some(&result);
            let t = Instant::now();
            store.insert_run(&r).unwrap();
            times.push(t.elapsed());
        }
        times.sort();
        let median = times[times.len() / 2];
        outln!(
            "insert_run: {} B result, {} metrics: median {:.2} ms, min {:.2} ms, max {:.2} ms",
            result.len(),
            metrics.len(),
            median.as_secs_f64() * 1e3,
            times[0].as_secs_f64() * 1e3,
            times[times.len() - 1].as_secs_f64() * 1e3
        );
        assert!(median < Duration::from_millis(250), "median {median:?}");
    }
}
