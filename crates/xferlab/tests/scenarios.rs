//! The committed scenarios (scenarios/*.toml), each run at its quick scale
//! exactly as a user would: `xferlab run scenarios/NAME.toml --quick`.
//! Every run must be stored: ok, or invalid when a lab emulator's timing
//! fell behind its accuracy target (a loaded machine; any other miss of
//! the lab's self-check fails). Such a run is tried again up to twice
//! (`--retry-invalid 2`), and at least half of the runs must end valid:
//! a study whose every run is invalid measured nothing, and fails here.
//! The report must hold
//! at least a table per `[[report.table]]` and a rendered picture per
//! `[[report.plot]]`.
//! The lab scenario needs root (CI runs as root); the USB scenario boots
//! the lab VM once (built with `XFERLAB_LABVM=skip` it is listed as ignored).

mod common;
mod labvm_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::run;
use rusqlite::Connection;

fn scenario(name: &str) -> PathBuf {
    labvm_support::repo_root()
        .join("scenarios")
        .join(format!("{name}.toml"))
}

/// Runs a scenario's quick scale into a fresh directory and checks the
/// store and the report; returns the report's Markdown.
fn run_quick(name: &str, timeout: Duration) -> String {
    run_quick_drawing(name, timeout, None)
}

/// [`run_quick`] for a scenario whose quick scale draws only its first
/// `plots` plots (the others filter on points the quick scale leaves out).
fn run_quick_drawing(name: &str, timeout: Duration, plots: Option<usize>) -> String {
    let dir = std::env::temp_dir().join(format!("xferlab-scen-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("x.db");
    let rep = dir.join("report");
    let path = scenario(name);
    let p = path.to_str().unwrap();
    let dry = run(&["run", p, "--quick", "--dry-run"], Duration::from_secs(10));
    assert_eq!(dry.code, Some(0), "{}", dry.describe());
    let planned: usize = dry
        .stdout
        .split(" runs (")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no run count in the dry run: {}", dry.stdout));
    let out = run(
        &[
            "run",
            p,
            "--quick",
            "--db",
            db.to_str().unwrap(),
            "--report-dir",
            rep.to_str().unwrap(),
            "--retry-invalid",
            "2",
        ],
        timeout,
    );
    assert_eq!(out.code, Some(0), "{}", out.describe());
    let c = Connection::open(&db).unwrap();
    // A lab run whose emulator fell behind its accuracy target (a loaded
    // machine) is stored as `invalid` and tried again: that is the runner
    // doing its job. Failed, errored or missing runs are failures, and so
    // is a study with fewer valid runs than half its plan. Each slot's
    // last attempt counts, as in the report.
    let (n, ok, invalid): (i64, i64, i64) = c
        .query_row(
            "SELECT COUNT(*), SUM(status = 'ok'), SUM(status = 'invalid') FROM runs r \
             WHERE attempt = (SELECT MAX(attempt) FROM runs q \
                              WHERE q.point_id = r.point_id AND q.repeat = r.repeat)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (n as usize, (ok + invalid) as usize),
        (planned, planned),
        "every planned run stored, ok or invalid\n{}",
        out.describe()
    );
    assert!(
        2 * ok as usize >= planned,
        "{name}: only {ok} of {planned} runs valid after retries: the study measured too little\n{}",
        out.describe()
    );
    // An invalid run must be invalid for timing alone (`timing_only`):
    // the emulator's departures late or the probe's RTT off, which a
    // loaded machine causes, and the line blaming the host's steal time
    // for it. Any other miss (unintended drops, CE marks, losses outside
    // their interval) is a fault of the tool and fails the test.
    let mut stmt = c
        .prepare("SELECT result_json FROM runs WHERE status = 'invalid'")
        .unwrap();
    let docs: Vec<Option<String>> = stmt
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for doc in &docs {
        let v: serde_json::Value = serde_json::from_str(doc.as_deref().unwrap_or("null")).unwrap();
        let acc = &v["lab"]["accuracy"];
        assert!(
            acc["violations"].is_array(),
            "an invalid run without the lab's violations: {v}"
        );
        assert_eq!(
            acc["timing_only"],
            true,
            "an invalid run for another reason than timing: {}\n{}",
            acc["violations"],
            out.describe()
        );
    }
    if invalid > 0 {
        eprintln!(
            "{name}: {invalid} of {planned} runs invalid (emulator timing on a loaded machine)"
        );
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let tables = text.matches("[[report.table]]").count();
    let plots = plots.unwrap_or_else(|| text.matches("[[report.plot]]").count());
    let md = std::fs::read_to_string(rep.join("report.md")).unwrap();
    // A table whose scenario varies more knobs than its rows and columns
    // is split into one table per value of the rest, so at least one each.
    let drawn = md.matches("|---|").count();
    assert!(
        drawn >= tables && drawn > 0,
        "{drawn} tables for {tables} [[report.table]]\n{md}"
    );
    for i in 1..=plots {
        let svg = std::fs::read_to_string(rep.join(format!("plot-{i}.svg")))
            .unwrap_or_else(|e| panic!("plot {i} of {name} missing ({e})\n{md}"));
        assert_not_blank(&svg, &rep.join(format!("plot-{i}.svg")));
    }
    let html = std::fs::read_to_string(rep.join("report.html")).unwrap();
    assert_eq!(
        html.matches("<svg").count(),
        plots,
        "the page embeds every plot"
    );
    let _ = std::fs::remove_dir_all(&dir);
    md
}

/// Renders an SVG to pixels and checks that data were drawn: a colour
/// besides the background, the axes and the grid (all grey) inside the
/// chart. Only pixels left of x = 490 count: the legend, whose swatches
/// are coloured whether or not any data were drawn, is a panel at most
/// 300 px wide on the right of the 800 px picture (plot.rs, LEGEND_MAX_PX
/// and a 5 px margin). Every plot kind draws there: time, line and CDF
/// plots start near the left axis, bars at the first category, and a CDF
/// of one value is centred. One colour is enough: a quick run in which
/// one configuration alone completed a transaction draws its CDF as one
/// line (CI saw exactly that, and the picture is right).
fn assert_not_blank(svg: &str, path: &Path) {
    let opt = resvg::usvg::Options::default();
    let tree = resvg::usvg::Tree::from_str(svg, &opt)
        .unwrap_or_else(|e| panic!("{} is not a valid SVG: {e}", path.display()));
    let size = tree.size().to_int_size();
    let mut pix = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pix.as_mut(),
    );
    let width = pix.width() as usize;
    let coloured = pix
        .pixels()
        .iter()
        .enumerate()
        .filter(|(i, p)| i % width < 490 && p.alpha() == 255)
        .filter(|(_, p)| !(p.red() == p.green() && p.green() == p.blue()))
        .count();
    assert!(
        coloured > 0,
        "{} draws no coloured data in its chart",
        path.display()
    );
}

/// The check above tells a chart with data from one whose only colour is
/// the legend's swatch.
#[test]
fn a_legend_swatch_alone_is_a_blank_chart() {
    let svg = |data: &str| {
        format!(
            r##"<svg width="800" height="500" xmlns="http://www.w3.org/2000/svg">
<rect x="0" y="0" width="800" height="500" fill="#FFFFFF"/>
<polyline fill="none" stroke="#000000" points="76,40 76,442 569,442"/>
<rect x="620" y="20" width="12" height="12" fill="#1F77B4"/>{data}</svg>"##
        )
    };
    let path = Path::new("plot.svg");
    let line =
        r##"<polyline fill="none" stroke="#1F77B4" stroke-width="2" points="320,442 320,60"/>"##;
    assert_not_blank(&svg(line), path);
    let blank = std::panic::catch_unwind(|| assert_not_blank(&svg(""), path));
    assert!(blank.is_err(), "a legend alone passed as data");
}

/// Every committed scenario, also those too long or too big for CI, is
/// checked as `xferlab run` checks it before anything runs (every point's
/// command line parsed, every knob found), at full and quick scale.
#[test]
fn every_committed_scenario_plans_at_both_scales() {
    let dir = labvm_support::repo_root().join("scenarios");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    names.sort();
    assert!(names.len() >= 8, "{names:?}");
    for path in &names {
        let p = path.to_str().unwrap();
        for quick in [false, true] {
            let mut args = vec!["run", p, "--dry-run"];
            if quick {
                args.push("--quick");
            }
            let out = run(&args, Duration::from_secs(20));
            assert_eq!(out.code, Some(0), "{}", out.describe());
            assert!(out.stdout.contains(" runs ("), "{}", out.describe());
        }
    }
}

/// A reader that goes away (`xferlab run ... --dry-run | head -1`) ends
/// the output, not the program with a panic.
#[test]
fn a_closed_stdout_is_no_panic() {
    use std::process::{Command, Stdio};
    let path = scenario("usb-net-kernel");
    let mut child = Command::new(common::BIN)
        .args(["run", path.to_str().unwrap(), "--dry-run"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the read end before the plan is written.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}

#[test]
fn udpmon_quick() {
    let _g = common::one_at_a_time();
    let md = run_quick("udpmon", Duration::from_secs(120));
    assert!(md.contains("| -l | --gap 0 | --gap 10 |"), "{md}");
}

#[test]
fn ecn_sack_transactions_quick_in_the_lab() {
    assert!(
        common::is_root(),
        "the lab scenario needs root (CI runs as root)"
    );
    let _g = common::one_at_a_time();
    // The first three plots: the others are of the sizes the quick scale
    // leaves out.
    let md = run_quick_drawing("ecn-sack-transactions", Duration::from_secs(600), Some(3));
    assert!(md.contains("Completed transactions per second"), "{md}");
    // Two tests per run, each stored under its host.
    assert!(md.contains("Background throughput"), "{md}");
    assert!(md.contains("@bg stream -P 20"), "{md}");
}

#[test]
fn safeudp_fairness_quick_in_the_lab() {
    assert!(
        common::is_root(),
        "the lab scenario needs root (CI runs as root)"
    );
    let _g = common::one_at_a_time();
    // Three of its four plots: the RED one filters on a value the quick
    // scale leaves out.
    let md = run_quick_drawing("safeudp-fairness", Duration::from_secs(300), Some(3));
    // Two tests per run, each stored under its host: the CBR flow runs as
    // `cbr` (its verdict and SafeUDP's reaction per trial), the TCP flows
    // as a stream; the drop-tail plots of both have their series (RED is
    // not in the quick scale).
    assert!(md.contains("@cbr cbr -b 80M"), "{md}");
    assert!(md.contains("![CBR flow delivered, drop-tail]"), "{md}");
    // SafeUDP's time to react is a stored metric of the cbr trial:
    // against 4 flows its notice comes within the 6 s.
    let notice = md
        .split("**First persistent congestion notice")
        .nth(1)
        .unwrap_or_else(|| panic!("no notice table: {md}"));
    let ignore_row = notice
        .lines()
        .find(|l| l.starts_with("| SafeUDP, notices ignored |"))
        .unwrap_or_else(|| panic!("no row for the ignoring application: {notice}"));
    assert!(!ignore_row.contains('–'), "{ignore_row}");
    assert!(
        md.contains("![TCP throughput over time beside the CBR flow (4 flows, drop-tail)]"),
        "{md}"
    );
}

#[test]
#[cfg_attr(labvm_skip, ignore = "XFERLAB_LABVM=skip: boots the lab VM (QEMU)")]
fn usb_bulk_levers_quick_in_the_lab_vm() {
    // Not beside the lab tests: a TCG guest busy on one of two CPUs made
    // every ecn-sack run invalid (emulator lateness p99 258-312 us
    // against 250) when the two overlapped.
    let _g = common::one_at_a_time();
    let _vm = labvm_support::vm_lock();
    let md = run_quick("usb-bulk-levers", Duration::from_secs(1200));
    assert!(md.contains("Bulk throughput"), "{md}");
    // The model's predictions are the second series of every plot, under
    // the scenario's name for them (a command name that holds ", ").
    assert!(
        md.contains("| model: EHCI host, FunctionFS AIO gadget |"),
        "{md}"
    );
    labvm_support::assert_no_qemu_left();
}

/// Study 2 on the guest kernel's DCCP, through the lab inside the lab VM
/// (where = "vm" with `lab` flags): each point is `xferlab lab ...` in one
/// guest boot, kernel CCID2 and CCID3 back to back at 20 Mbit/s. The
/// quick scale draws the back-to-back plot only.
#[test]
#[cfg_attr(labvm_skip, ignore = "XFERLAB_LABVM=skip: boots the lab VM (QEMU)")]
fn dccp_kernel_vm_quick_in_the_lab_inside_the_vm() {
    let _g = common::one_at_a_time();
    let _vm = labvm_support::vm_lock();
    let md = run_quick_drawing("dccp-kernel-vm", Duration::from_secs(1200), Some(1));
    // Both CCIDs carried data through the guest's emulated link.
    for ccid in ["| 2 |", "| 3 |"] {
        assert!(md.contains(ccid), "{md}");
    }
    labvm_support::assert_no_qemu_left();
}
