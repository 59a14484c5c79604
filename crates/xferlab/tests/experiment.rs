//! `xferlab run`, `report`, `compare` and `db` with the real binary: a
//! scenario's points run as real stream tests over loopback, land in the
//! SQLite store, survive a SIGKILL of the runner, and come back out as
//! tables whose numbers the test recomputes from the stored results.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{run, Proc};
use rusqlite::Connection;
use serde_json::Value;

/// A directory of its own under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(
            format!(
                "xferlab-exp-{tag}-{}-{:?}",
                std::process::id(),
                Instant::now()
            )
            .replace([' ', '.'], "_"),
        );
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// 2 x 2 points x 3 repeats of a short TCP stream: 12 runs.
const GRID: &str = r#"
title = "grid"
command = "stream -t 0.3 -i 0"
repeat = 3
order = "interleaved"

[matrix]
"-l" = ["64K", "256K"]
"-P" = [1, 2]

[[report.table]]
metric = "throughput_bps"
rows = "-l"
cols = "-P"
aggregate = "median"

[[report.plot]]
kind = "lines"
metric = "throughput_bps"
x = "-l"
series = "-P"

[report.metrics]
throughput_bps = "Receive throughput"

[report.knobs]
"-l" = "Write size"

[report.names]
"-P 1" = "one flow"
"-P 2" = "two flows"
"#;

/// The text of every `<text>` element of an SVG (plotters writes the
/// text on the line after the element's start).
fn svg_texts(svg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = svg.lines();
    while let Some(l) = lines.next() {
        if l.trim_start().starts_with("<text ") {
            out.push(lines.next().unwrap_or("").trim().to_string());
        }
    }
    out
}

fn write(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let p = dir.path(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// (point key, repeat, status, result) of every stored run.
fn stored_runs(db: &Path) -> Vec<(String, u32, String, Option<String>)> {
    let c = Connection::open(db).unwrap();
    // The runner may still be creating the schema when a test polls.
    let Ok(mut st) = c.prepare(
        "SELECT p.key, r.repeat, r.status, r.result_json FROM runs r JOIN points p ON p.id = r.point_id ORDER BY r.id",
    ) else {
        return Vec::new();
    };
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn receiver_bps(doc: &Value) -> f64 {
    doc["summary"]["directions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["receiver"]["bits_per_second"].as_f64().unwrap())
        .sum()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A table whose rows are one knob of a zip group has a row per step of
/// the group, named as the group's combination, not one row per value of
/// that knob (two steps share `-P 1` here, as two ECN/SACK stacks share
/// `--ecn off` in the ECN study).
#[test]
fn a_table_by_a_knob_of_a_zip_group_has_a_row_per_step() {
    let dir = TempDir::new("zip-rows");
    let scen = write(
        &dir,
        "zip.toml",
        r#"
title = "zip rows"
command = "stream -t 0.2 -i 0"
repeat = 1

[[zip]]
"-P" = [1, 1, 2]
"-l" = ["64K", "128K", "64K"]

[[report.table]]
metric = "throughput_bps"
rows = "-P"

[report.names]
"-P 1, -l 64K" = "one small"
"-P 1, -l 128K" = "one large"
"-P 2, -l 64K" = "two small"
"#,
    );
    let db = dir.path("x.db");
    let rep = dir.path("report");
    let out = run(
        &["run", s(&scen), "--db", s(&db), "--report-dir", s(&rep)],
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(0), "{}", out.describe());
    let md = std::fs::read_to_string(rep.join("report.md")).unwrap();
    let rows: Vec<&str> = md
        .lines()
        .filter(|l| l.starts_with("| one ") || l.starts_with("| two "))
        .collect();
    assert_eq!(rows.len(), 3, "{md}");
    assert!(rows[0].starts_with("| one small |"), "{md}");
    assert!(rows[1].starts_with("| one large |"), "{md}");
    assert!(rows[2].starts_with("| two small |"), "{md}");
}

#[test]
fn a_grid_runs_stores_every_run_and_reports_what_was_stored() {
    let dir = TempDir::new("grid");
    let scen = write(&dir, "grid.toml", GRID);
    let db = dir.path("x.db");
    let rep = dir.path("report");

    let dry = run(
        &["run", s(&scen), "--dry-run", "--db", s(&db)],
        Duration::from_secs(10),
    );
    dry.assert_success();
    assert_eq!(
        dry.stdout.matches("xferlab stream").count(),
        4,
        "{}",
        dry.describe()
    );
    assert!(!db.exists(), "--dry-run must not create the database");

    let out = run(
        &["run", s(&scen), "--db", s(&db), "--report-dir", s(&rep)],
        Duration::from_secs(120),
    );
    assert_eq!(out.code, Some(0), "{}", out.describe());
    let runs = stored_runs(&db);
    assert_eq!(runs.len(), 12, "{runs:?}");
    let slots: HashSet<(String, u32)> = runs.iter().map(|r| (r.0.clone(), r.1)).collect();
    assert_eq!(slots.len(), 12, "a (point, repeat) stored twice");
    assert!(runs.iter().all(|r| r.2 == "ok"), "{runs:?}");

    // The report's aggregates are the medians of what was stored.
    let mut by_point: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (key, _, _, json) in &runs {
        let doc: Value = serde_json::from_str(json.as_deref().unwrap()).unwrap();
        by_point
            .entry(key.clone())
            .or_default()
            .push(receiver_bps(&doc));
    }
    let csv = std::fs::read_to_string(rep.join("table-1.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let mut cells = 0;
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        let key = format!("-P={};-l={}", f[col("-P")], f[col("-l")]);
        let expect = median(by_point[&key].clone());
        let got: f64 = f[col("value")].parse().unwrap();
        assert!(
            (got - expect).abs() <= 1e-6 * expect,
            "{key}: report {got}, stored results give {expect}"
        );
        assert_eq!(f[col("n")], "3");
        cells += 1;
    }
    assert_eq!(cells, 4, "{csv}");
    // The table is printed with the scenario's names, the HTML page
    // holds the plot.
    assert!(
        out.stdout.contains("| Write size | one flow | two flows |"),
        "{}",
        out.describe()
    );
    assert!(out.stdout.contains("report.html"), "{}", out.describe());
    let html = std::fs::read_to_string(rep.join("report.html")).unwrap();
    assert!(html.contains("<svg"), "the page embeds its plots");
    // The plot, read back: its axes say what the scenario names them,
    // one legend entry per value of the series knob, one marker per
    // point of the data (2 sizes x 2 flow counts).
    let svg = std::fs::read_to_string(rep.join("plot-1.svg")).unwrap();
    let texts = svg_texts(&svg);
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("Receive throughput (") && t.ends_with("bit/s)")),
        "{texts:?}"
    );
    assert!(texts.contains(&"Write size".to_string()), "{texts:?}");
    for name in ["one flow", "two flows"] {
        assert_eq!(
            texts.iter().filter(|t| *t == name).count(),
            1,
            "{name}: {texts:?}"
        );
    }
    assert!(
        !texts
            .iter()
            .any(|t| t.contains("throughput_bps") || t.contains("-P ")),
        "{texts:?}"
    );
    let markers = svg
        .lines()
        .filter(|l| l.trim_start().starts_with("<circle "))
        .count();
    assert_eq!(markers, 4, "one marker per point");
    // `report --png`: the same plot in pixels, not blank.
    let rep2 = dir.path("report-png");
    let png = run(
        &["report", "grid", "--db", s(&db), "-o", s(&rep2), "--png"],
        Duration::from_secs(30),
    );
    assert_eq!(png.code, Some(0), "{}", png.describe());
    let pix = resvg::tiny_skia::Pixmap::load_png(rep2.join("plot-1.png")).unwrap();
    assert_eq!((pix.width(), pix.height()), (800, 500));
    let inked = pix
        .pixels()
        .iter()
        .filter(|p| p.red() < 128 || p.green() < 128 || p.blue() < 128)
        .count();
    assert!(
        inked > 2_000,
        "plot-1.png is nearly blank ({inked} dark pixels)"
    );

    // Running it again finds everything stored and runs nothing.
    let again = run(
        &["run", s(&scen), "--db", s(&db), "--no-report"],
        Duration::from_secs(30),
    );
    assert_eq!(again.code, Some(0), "{}", again.describe());
    assert!(again.stderr.contains("all 12 runs"), "{}", again.describe());
    assert_eq!(stored_runs(&db).len(), 12);

    // compare: two points with 3 repeats each; JSON names the metric.
    let cmp = run(
        &[
            "compare",
            "grid/1",
            "grid/4",
            "--db",
            s(&db),
            "-J",
            "-m",
            "throughput_bps",
        ],
        Duration::from_secs(10),
    );
    assert_eq!(cmp.code, Some(0), "{}", cmp.describe());
    let v: Value = serde_json::from_str(&cmp.stdout).unwrap();
    assert!(v.to_string().contains("throughput_bps"), "{v}");

    // db list / show / export.
    let list = run(&["db", "list", "--db", s(&db)], Duration::from_secs(10));
    assert_eq!(list.code, Some(0), "{}", list.describe());
    assert!(list.stdout.contains("grid"), "{}", list.describe());
    // `db show` numbers points as --dry-run and compare do: the first is
    // 1, written with its knobs as --dry-run writes them.
    let show = run(
        &["db", "show", "grid", "--db", s(&db)],
        Duration::from_secs(10),
    );
    assert_eq!(show.code, Some(0), "{}", show.describe());
    let first = show
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("point"))
        .nth(1)
        .unwrap_or_default();
    assert!(
        first.starts_with("1 ") && first.contains("-l 64K, -P 1"),
        "{}",
        show.stdout
    );
    assert!(
        dry.stdout
            .lines()
            .any(|l| l.starts_with("point   1  -l 64K, -P 1")),
        "{}",
        dry.stdout
    );
    let csv = run(
        &["db", "export", "grid", "--format", "csv", "--db", s(&db)],
        Duration::from_secs(10),
    );
    assert_eq!(csv.code, Some(0), "{}", csv.describe());
    assert_eq!(csv.stdout.lines().count(), 13, "{}", csv.describe());
}

#[test]
fn sigkill_then_resume_completes_with_no_duplicates_and_nothing_lost() {
    let dir = TempDir::new("kill");
    let scen = write(&dir, "grid.toml", GRID);
    let db = dir.path("x.db");
    let mut p = Proc::spawn(&["run", s(&scen), "--db", s(&db), "--no-report"]);
    // Wait for the event: four runs committed.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if db.exists() && stored_runs(&db).len() >= 4 {
            break;
        }
        assert!(p.is_running(), "the runner ended early: {}", p.stderr());
        assert!(
            Instant::now() < deadline,
            "no 4 runs stored within 60 s: {}",
            p.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = p.pid();
    p.kill();
    // Its running point dies with it (PR_SET_PDEATHSIG): no xferlab child
    // of the dead runner stays behind.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let orphans = children_of_dead(pid);
        if orphans.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "points outlived the runner: {orphans:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = stored_runs(&db).len();
    assert!((4..12).contains(&before), "{before}");
    let out = run(
        &["run", s(&scen), "--db", s(&db), "--no-report"],
        Duration::from_secs(120),
    );
    assert_eq!(out.code, Some(0), "{}", out.describe());
    assert!(
        out.stderr.contains("resuming experiment"),
        "{}",
        out.describe()
    );
    let runs = stored_runs(&db);
    assert_eq!(runs.len(), 12, "{runs:?}");
    let slots: HashSet<(String, u32)> = runs.iter().map(|r| (r.0.clone(), r.1)).collect();
    assert_eq!(slots.len(), 12, "duplicates after resuming");
    assert!(runs.iter().all(|r| r.2 == "ok"));

    // A changed file is named, and nothing runs until the user chooses.
    write(&dir, "grid.toml", &GRID.replace("repeat = 3", "repeat = 4"));
    let out = run(
        &["run", s(&scen), "--db", s(&db), "--no-report"],
        Duration::from_secs(10),
    );
    out.assert_one_line_failure(
        2,
        &["changed since experiment", "--fresh", "--resume-anyway"],
    );
    let out = run(
        &[
            "run",
            s(&scen),
            "--db",
            s(&db),
            "--no-report",
            "--resume-anyway",
        ],
        Duration::from_secs(120),
    );
    assert_eq!(out.code, Some(0), "{}", out.describe());
    assert_eq!(
        stored_runs(&db).len(),
        16,
        "the fourth repeat of each point was added"
    );
}

/// Whether process `pid` catches SIGINT (bit 2 of SigCgt in its status):
/// its Ctrl-C handler is installed.
fn catches_sigint(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|st| {
            st.lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
}

/// A signal sent to the runner alone (a service manager's SIGTERM, not a
/// terminal's Ctrl-C to the whole group) reaches the running point as its
/// Ctrl-C: the point stops with what it measured, which is stored as
/// interrupted, and the runner exits at once, not when the point would
/// have ended.
#[test]
fn a_signal_to_the_runner_stops_its_running_point() {
    let dir = TempDir::new("term");
    let scen = write(
        &dir,
        "long.toml",
        "title = \"long\"\ncommand = \"stream -t 60 -i 0\"\n",
    );
    let db = dir.path("x.db");
    let mut p = Proc::spawn(&["run", s(&scen), "--db", s(&db), "--no-report"]);
    let runner = p.pid();
    // Wait for the event: the point runs and handles Ctrl-C.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if children_of_dead(runner).into_iter().any(catches_sigint) {
            break;
        }
        assert!(p.is_running(), "the runner ended early: {}", p.stderr());
        assert!(
            Instant::now() < deadline,
            "no point started: {}",
            p.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = Instant::now();
    p.signal(libc::SIGTERM);
    let out = p.finish(Duration::from_secs(30));
    assert!(
        sent.elapsed() < Duration::from_secs(15),
        "the runner waited for its 60 s point: {}",
        out.describe()
    );
    assert_ne!(out.code, Some(0), "{}", out.describe());
    assert!(
        out.stderr.contains("run the same command again"),
        "{}",
        out.describe()
    );
    let runs = stored_runs(&db);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].2, "interrupted", "{runs:?}");
    assert!(runs[0].3.is_some(), "the point's partial result is kept");
    assert!(
        children_of_dead(runner).is_empty(),
        "a point outlived the runner"
    );
}

/// xferlab processes whose parent was `pid` (now reparented) and that
/// still run the runner's points.
fn children_of_dead(pid: u32) -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{p}/cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        // The runner's points carry its temp dir in their -o path.
        if cmd.contains(&format!("xferlab-run-{pid}/")) {
            v.push(p);
        }
    }
    v
}

#[test]
fn bad_scenarios_name_file_line_and_key_and_run_nothing() {
    let dir = TempDir::new("bad");
    let db = dir.path("x.db");
    let cases: &[(&str, &str, &[&str])] = &[
        ("syntax", "title = \"t\"\ncommand = \"stream\n", &["syntax.toml:2"]),
        (
            "unknown-key",
            "title = \"t\"\ncommand = \"stream\"\nrepeats = 2\n",
            &["unknown-key.toml:3", "repeats"],
        ),
        (
            "unknown-flag",
            "title = \"t\"\ncommand = \"stream\"\n[matrix]\n\"--lenght\" = [1]\n",
            &["unknown-flag.toml:4", "--lenght", "valid:", "-l/--length"],
        ),
        (
            "bad-value",
            "title = \"t\"\ncommand = \"stream -t 0.2\"\n[matrix]\n\"-P\" = [1]\n\"-l\" = [\"64K\", \"lots\"]\n",
            &["bad-value.toml:5", "lots"],
        ),
        (
            "bad-range",
            "title = \"t\"\ncommand = \"stream -t 0.2\"\n[matrix]\n\"-P\" = [1, 100000]\n",
            &["bad-range.toml:4", "parallel"],
        ),
    ];
    for (name, text, needles) in cases {
        let scen = write(&dir, &format!("{name}.toml"), text);
        let out = run(&["run", s(&scen), "--db", s(&db)], Duration::from_secs(10));
        out.assert_one_line_failure(2, needles);
    }
    assert!(!db.exists(), "a bad scenario must not run anything");
    let out = run(
        &["run", s(&dir.path("missing.toml")), "--db", s(&db)],
        Duration::from_secs(10),
    );
    out.assert_one_line_failure(2, &["cannot read scenario", "missing.toml"]);
}

#[test]
fn a_failing_point_is_stored_with_its_error_and_retried_on_resume() {
    let dir = TempDir::new("fail");
    // Port 1 on loopback: nothing listens, every run fails to connect.
    let scen = write(
        &dir,
        "fails.toml",
        "title = \"t\"\ncommand = \"stream 127.0.0.1 -p 1 -t 0.2 --connect-timeout 1\"\n[matrix]\n\"-l\" = [\"64K\"]\n",
    );
    let db = dir.path("x.db");
    let out = run(
        &[
            "run",
            s(&scen),
            "--db",
            s(&db),
            "--report-dir",
            s(&dir.path("r")),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(1), "{}", out.describe());
    let runs = stored_runs(&db);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].2, "error");
    let c = Connection::open(&db).unwrap();
    let err: String = c
        .query_row("SELECT error FROM runs", [], |r| r.get(0))
        .unwrap();
    assert!(err.contains("connect"), "{err}");
    let md = std::fs::read_to_string(dir.path("r").join("report.md")).unwrap();
    assert!(md.contains("Failed runs") && md.contains("connect"), "{md}");
    // Again: the failed run is retried, a second attempt stored.
    let out = run(
        &["run", s(&scen), "--db", s(&db), "--no-report"],
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(1), "{}", out.describe());
    let attempts: i64 = c
        .query_row("SELECT MAX(attempt) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(attempts, 2);
}

#[test]
fn a_single_run_is_stored_with_db() {
    let dir = TempDir::new("single");
    let db = dir.path("x.db");
    let out = run(
        &["stream", "-t", "0.3", "-i", "0", "--db", s(&db)],
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(0), "{}", out.describe());
    assert!(out.stderr.contains("stored as run 1"), "{}", out.describe());
    let c = Connection::open(&db).unwrap();
    let (n, exp): (i64, Option<i64>) = c
        .query_row("SELECT COUNT(*), MAX(experiment_id) FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((n, exp), (1, None));
    let bps: f64 = c
        .query_row(
            "SELECT value FROM metrics WHERE name = 'throughput_bps'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(bps > 0.0);
}
