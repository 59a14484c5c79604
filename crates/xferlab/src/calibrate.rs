//! `xferlab calibrate`: measures candidate write and read sizes over
//! loopback TCP on this machine and keeps the winner when it beats
//! iperf3's 128 KiB.
//!
//! Each candidate is an ordinary `xferlab stream` with an embedded server
//! (this binary, as a child, with the calibration off), a few hundred ms
//! long; a round runs every candidate once, in an order that rotates from
//! round to round so that the host's drift hits all alike, and a
//! candidate's score is the median of its rounds' receiver throughput.
//! Two stages per case: the write size (reads at the default), then the
//! read size (and whether reads fill the buffer) with the winning write,
//! the default beside them again. A choice replaces the default only when
//! its median is [`MIN_GAIN`] above the default's in those same rounds and
//! it beat the default in most of them: run-to-run noise on a shared host
//! (0.1-0.3 between benches here) must not pick a size.

use std::io::{IsTerminal, Read};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use xferlab_core::result::{SizeCalibration, SizeChoice};
use xferlab_core::units::{format_bytes, RateUnit};

use crate::sys::calibration::{forget, path, read, store, MachineKey, FILE_VAR};
use crate::transport::sizing::DEFAULT_SIZE;

/// How much a choice must beat the default by (median over median).
const MIN_GAIN: f64 = 1.03;
/// Candidate write sizes: iperf3's block up to 2 MiB, the largest the old
/// cache formula ever chose and beyond which no CPU met so far gained.
const WRITES: [u64; 5] = [128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20];
/// Candidate read sizes, read whole; 128K is also tried filling.
const READS: [u64; 4] = [128 << 10, 256 << 10, 512 << 10, 1 << 20];

/// What `xferlab calibrate` was asked.
#[derive(Debug, Clone)]
pub struct CalibrateRequest {
    /// Seconds per candidate run.
    pub time: f64,
    pub rounds: u32,
    /// Print this machine's calibration and exit.
    pub show: bool,
    /// Remove this machine's calibration and exit.
    pub forget: bool,
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
struct Candidate {
    write_size: u64,
    read_size: u64,
    read_fill: bool,
}

impl Candidate {
    fn label(&self) -> String {
        format!(
            "write {:>5}, read {:>5} {}",
            short(self.write_size),
            short(self.read_size),
            if self.read_fill { "filling" } else { "whole" }
        )
    }
}

/// One candidate's runs, receiver bits/s per round.
#[derive(Debug, Serialize)]
struct Scored {
    #[serde(flatten)]
    candidate: Candidate,
    bps: Vec<f64>,
    median_bps: f64,
}

/// One case (one flow, or a flow per CPU): its stages and the choice.
#[derive(Debug, Serialize)]
struct Case {
    parallel: u32,
    stages: Vec<Vec<Scored>>,
    choice: SizeChoice,
    /// Why the choice is what it is.
    reason: String,
}

/// Runs the verb; exit 0, 1 when a measurement failed, 2 on bad input.
pub fn run(r: &CalibrateRequest) -> ExitCode {
    match calibrate(r) {
        Ok(()) => ExitCode::SUCCESS,
        Err((e, code)) => {
            eprintln!("xferlab: {e:#}");
            ExitCode::from(code)
        }
    }
}

fn calibrate(r: &CalibrateRequest) -> Result<(), (anyhow::Error, u8)> {
    if !(r.time.is_finite() && (0.1..=60.0).contains(&r.time)) {
        return Err((
            anyhow!("--time {} is out of range: give 0.1 to 60 seconds", r.time),
            2,
        ));
    }
    if !(1..=50).contains(&r.rounds) {
        return Err((
            anyhow!("--rounds {} is out of range: give 1 to 50", r.rounds),
            2,
        ));
    }
    let key = MachineKey::here();
    let file = path();
    if r.show || r.forget {
        return show_or_forget(r, &key, file.as_deref());
    }
    let file = file.ok_or_else(|| {
        (
            anyhow!("no calibration file: {FILE_VAR} is off, or neither HOME nor XDG_CACHE_HOME is set; set {FILE_VAR}=PATH"),
            2,
        )
    })?;
    let exe = std::env::current_exe()
        .map_err(|e| (anyhow!("cannot find this program's path: {e}"), 1))?;
    let mut cases_p = vec![1];
    if key.cpus > 1 {
        cases_p.push(key.cpus);
    }
    // The first stages' runs; each second stage adds its own when known.
    let bar = progress((WRITES.len() * cases_p.len()) as u64 * u64::from(r.rounds));
    let mut cases = Vec::new();
    for &p in &cases_p {
        let case = measure_case(&exe, r, p, p >= key.cpus, &bar).map_err(|e| (e, 1))?;
        cases.push(case);
    }
    bar.finish_and_clear();
    let entry = SizeCalibration {
        measured_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        cpu_model: key.cpu_model.clone(),
        kernel: key.kernel.clone(),
        l2: key.l2,
        cpus: key.cpus,
        alone: cases[0].choice,
        crowded: cases.get(1).map(|c| c.choice),
    };
    store(&file, entry.clone()).map_err(|e| (e.into(), 1))?;
    if r.json {
        let doc = serde_json::json!({
            "schema": "xferlab.calibrate/1",
            "file": file,
            "calibration": entry,
            "cases": cases,
        });
        println!("{doc:#}");
    } else {
        print_human(&key, r, &cases, &file);
    }
    Ok(())
}

fn show_or_forget(
    r: &CalibrateRequest,
    key: &MachineKey,
    file: Option<&std::path::Path>,
) -> Result<(), (anyhow::Error, u8)> {
    let Some(file) = file else {
        if r.json {
            println!(
                "{:#}",
                serde_json::json!({ "schema": "xferlab.calibrate/1", "file": null, "calibration": null })
            );
        } else {
            println!("{FILE_VAR}=off: flows use iperf3's 128 KiB writes and reads");
        }
        return Ok(());
    };
    if r.forget {
        let gone = forget(file, key).map_err(|e| (e.into(), 1))?;
        println!(
            "{} {}",
            if gone {
                "removed this machine's calibration from"
            } else {
                "this machine had no calibration in"
            },
            file.display()
        );
        return Ok(());
    }
    let entry = read(file)
        .map_err(|e| (e.into(), 1))?
        .machines
        .into_iter()
        .find(|c| key.matches(c));
    if r.json {
        println!(
            "{:#}",
            serde_json::json!({ "schema": "xferlab.calibrate/1", "file": file, "calibration": entry })
        );
        return Ok(());
    }
    match entry {
        Some(c) => {
            println!("{} (this machine: {})", file.display(), describe_key(key));
            println!("  one flow:          {}", describe_choice(&c.alone));
            if let Some(shared) = &c.crowded {
                println!("  a flow per CPU:    {}", describe_choice(shared));
            }
        }
        None => println!(
            "not calibrated ({}; {}): flows use iperf3's 128 KiB writes and reads; `xferlab calibrate` measures",
            describe_key(key),
            file.display()
        ),
    }
    Ok(())
}

/// Measures one case: `parallel` flows; `crowded` as the flows will see it.
fn measure_case(
    exe: &std::path::Path,
    r: &CalibrateRequest,
    parallel: u32,
    crowded: bool,
    bar: &ProgressBar,
) -> anyhow::Result<Case> {
    let default = Candidate {
        write_size: DEFAULT_SIZE as u64,
        read_size: DEFAULT_SIZE as u64,
        read_fill: !crowded,
    };
    bar.set_prefix(format!("P={parallel}: write sizes"));
    let writes: Vec<Candidate> = WRITES
        .iter()
        .map(|&w| Candidate {
            write_size: w,
            ..default
        })
        .collect();
    let first = measure_set(exe, r, parallel, &writes, bar)?;
    let write = best(&first).candidate.write_size;
    bar.set_prefix(format!("P={parallel}: read sizes"));
    let mut reads: Vec<Candidate> = READS
        .iter()
        .map(|&n| Candidate {
            write_size: write,
            read_size: n,
            read_fill: false,
        })
        .collect();
    if !crowded {
        reads.push(Candidate {
            write_size: write,
            read_size: DEFAULT_SIZE as u64,
            read_fill: true,
        });
    }
    if !reads.contains(&default) {
        reads.push(default);
    }
    bar.inc_length(reads.len() as u64 * u64::from(r.rounds));
    let second = measure_set(exe, r, parallel, &reads, bar)?;
    let base = second
        .iter()
        .find(|s| s.candidate == default)
        .expect("the default is measured in the second stage");
    let top = best(&second);
    let gain = top.median_bps / base.median_bps.max(1.0);
    let wins = top.bps.iter().zip(&base.bps).filter(|(t, b)| t > b).count();
    let keep = top.candidate != default && gain >= MIN_GAIN && 2 * wins > top.bps.len();
    let (chosen, reason) = if keep {
        (
            top,
            format!(
                "{:.2}x the default's median, ahead in {wins} of {} rounds",
                gain,
                top.bps.len()
            ),
        )
    } else if top.candidate == default {
        (base, "the default moved the most".to_string())
    } else {
        (
            base,
            format!(
                "the best candidate ({}) was {:.2}x the default, ahead in {wins} of {} rounds: not clearly better (needs {MIN_GAIN}x and most rounds)",
                top.candidate.label().trim(),
                gain,
                top.bps.len()
            ),
        )
    };
    let choice = SizeChoice {
        write_size: chosen.candidate.write_size,
        read_size: chosen.candidate.read_size,
        read_fill: chosen.candidate.read_fill,
        bps: chosen.median_bps,
        default_bps: base.median_bps,
    };
    Ok(Case {
        parallel,
        stages: vec![first, second],
        choice,
        reason,
    })
}

fn best(set: &[Scored]) -> &Scored {
    set.iter()
        .max_by(|a, b| a.median_bps.total_cmp(&b.median_bps))
        .expect("a stage has candidates")
}

/// Every candidate once per round, the order rotated each round.
fn measure_set(
    exe: &std::path::Path,
    r: &CalibrateRequest,
    parallel: u32,
    candidates: &[Candidate],
    bar: &ProgressBar,
) -> anyhow::Result<Vec<Scored>> {
    let mut bps = vec![Vec::new(); candidates.len()];
    for round in 0..r.rounds as usize {
        for k in 0..candidates.len() {
            let i = (k + round) % candidates.len();
            bar.set_message(candidates[i].label());
            bps[i].push(one_run(exe, r.time, parallel, &candidates[i])?);
            bar.inc(1);
        }
    }
    Ok(candidates
        .iter()
        .zip(bps)
        .map(|(c, b)| Scored {
            candidate: *c,
            median_bps: median(&b),
            bps: b,
        })
        .collect())
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// One `xferlab stream` over loopback with an embedded server; the
/// receiver's bits/s.
fn one_run(exe: &std::path::Path, time: f64, parallel: u32, c: &Candidate) -> anyhow::Result<f64> {
    let args = [
        "stream".to_string(),
        "-J".into(),
        "-t".into(),
        format!("{time}"),
        "-P".into(),
        parallel.to_string(),
        "-l".into(),
        c.write_size.to_string(),
        "--read-size".into(),
        c.read_size.to_string(),
        "--read-fill".into(),
        if c.read_fill { "on" } else { "off" }.into(),
    ];
    let what = || format!("`xferlab {}`", args.join(" "));
    let mut cmd = Command::new(exe);
    cmd.args(&args)
        .env(FILE_VAR, "off")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // No child outlives a killed `calibrate`.
    crate::sys::process::die_with_parent(&mut cmd, rustix::process::Signal::KILL);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", what()))?;
    // The pipes are drained while the child runs: a long run's result
    // document is larger than a pipe holds, and a child blocked writing
    // it would never end.
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    // The child ends on its own after `time` and its drain; a hung one is
    // killed, never waited for.
    let deadline = Instant::now() + Duration::from_secs_f64(time + 20.0);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{} did not end within {:.0} s", what(), time + 20.0);
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => bail!("waiting for {}: {e}", what()),
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if !status.success() {
        let last = err.lines().last().unwrap_or("no message");
        bail!("{} failed ({status}): {last}", what());
    }
    let v: serde_json::Value = serde_json::from_str(&out)
        .with_context(|| format!("{} printed no result document", what()))?;
    v.pointer("/summary/directions/0/receiver/bits_per_second")
        .and_then(serde_json::Value::as_f64)
        .filter(|b| *b > 0.0)
        .ok_or_else(|| anyhow!("{} reported no receiver throughput", what()))
}

/// Reads `pipe` to its end on a thread of its own.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_string(&mut text);
        }
        text
    })
}

fn progress(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(total);
    b.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} runs  {prefix}  ETA {eta}  {msg}")
            .expect("a valid template"),
    );
    b
}

fn print_human(key: &MachineKey, r: &CalibrateRequest, cases: &[Case], file: &std::path::Path) {
    let gbit = |b: f64| RateUnit::default().format_rate(b);
    println!("xferlab calibrate: {}", describe_key(key));
    println!(
        "loopback TCP, {} rounds of {} s per candidate, receiver throughput (median of the rounds)",
        r.rounds, r.time
    );
    for case in cases {
        println!();
        println!(
            "{}:",
            if case.parallel == 1 {
                "one flow (-P 1)".to_string()
            } else {
                format!("a flow per CPU (-P {})", case.parallel)
            }
        );
        for (n, stage) in case.stages.iter().enumerate() {
            println!("  {}", ["write sizes", "read sizes"][n.min(1)]);
            for s in stage {
                println!("    {}  {:>14}", s.candidate.label(), gbit(s.median_bps));
            }
        }
        println!(
            "  chosen: {}: {}",
            describe_sizes(&case.choice),
            case.reason
        );
    }
    println!();
    println!("written to {}", file.display());
}

fn describe_key(key: &MachineKey) -> String {
    format!(
        "{}, {}, L2 {}, {} usable CPU{}",
        if key.cpu_model.is_empty() {
            "unknown CPU"
        } else {
            &key.cpu_model
        },
        key.kernel,
        key.l2.map_or("unknown".to_string(), short),
        key.cpus,
        if key.cpus == 1 { "" } else { "s" }
    )
}

fn describe_sizes(c: &SizeChoice) -> String {
    format!(
        "write {}, read {} {}",
        short(c.write_size),
        short(c.read_size),
        if c.read_fill { "filling" } else { "whole" },
    )
}

fn describe_choice(c: &SizeChoice) -> String {
    format!(
        "{} ({:.2}x iperf3's 128K sizes)",
        describe_sizes(c),
        c.bps / c.default_bps.max(1.0)
    )
}

/// 131072 -> "128K", 1048576 -> "1M".
fn short(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}M", n >> 20)
    } else if n.is_multiple_of(1024) {
        format!("{}K", n >> 10)
    } else {
        format_bytes(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_short_and_medians_are_medians() {
        assert_eq!(short(128 << 10), "128K");
        assert_eq!(short(2 << 20), "2M");
        assert_eq!(short(1536 << 10), "1536K");
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
