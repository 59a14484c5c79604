//! A batch of xferlab invocations inside the lab VM, with one boot.
//!
//! Owns: the guest script that runs a scenario's `setup` and then every job
//! in order, the marker protocol that script prints, the parser that turns
//! `lab/vm/run`'s streamed stdout back into [`JobEvent`]s, and the life of
//! the `lab/vm/run` child (and so of its QEMU).
//!
//! Why this shape:
//! * A TCG boot costs seconds and a static xferlab build minutes, so a
//!   scenario boots once and runs all its points in that guest; the caller
//!   stores each result as its [`JobEvent::Finished`] arrives, so killing the
//!   host process loses at most the job in progress.
//! * `lab/vm/run` copies the guest command's stdout line by line (flushed),
//!   so the guest script prints markers around each job and the host times
//!   a job between its start and end markers (both pass the same serial
//!   console and pipe, so the latency cancels out).
//! * Every marker carries a per-batch random tag: a job's JSON or stderr
//!   (which may echo user text such as a title) cannot fake one.
//! * The job's JSON goes to a file (`-o`) and is printed between markers
//!   afterwards, so neither xferlab's stderr nor anything else the guest
//!   prints can interleave with it. Pretty-printed JSON is fine: JSON has no
//!   raw newlines inside strings, and lines are joined back with `\n`.
//! * Job arguments are single-quoted for the guest's busybox `sh`, which
//!   passes any byte but NUL through unchanged (quotes, `$`, `;`, newlines).
//! * The setup runs in the script's own shell (a `{ ...; }` group, not a
//!   subshell) so what it starts in the background, e.g. a gadget, keeps
//!   running for the jobs; its output goes to a file that is printed between
//!   markers, and an EXIT trap still reports it when the setup calls `exit`.

// Until `xferlab run` calls it.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How the guest is built and prepared for a batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmSetup {
    /// Kernel modules loaded at boot (with dependencies): `--modules`.
    pub modules: Vec<String>,
    /// Modules packed but left for the setup to `modprobe` (with
    /// parameters): `--extra-modules`.
    pub extra_modules: Vec<String>,
    /// Extra files or directories, `HOST[:GUEST]` as `lab/vm/run --add`.
    pub add: Vec<String>,
    /// Guest shell run once before the jobs (e.g. start a gadget); a
    /// non-zero status aborts the batch with its output.
    pub setup: Option<String>,
    /// Limit for the whole guest command (setup and all jobs), seconds.
    pub timeout_s: u64,
    /// Guest CPUs: `--smp` (lab/vm/run's default, 1, when None).
    pub smp: Option<u32>,
}

/// One xferlab invocation in the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The caller's id, echoed in the events.
    pub id: usize,
    /// xferlab's argv without the program name and without output flags:
    /// `-J -o FILE` are appended.
    pub args: Vec<String>,
}

/// What happened in the guest, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum JobEvent {
    /// The guest kernel is up (the lab's own boot time, excluding the
    /// kernel download and the static build).
    Booted { boot_s: f64 },
    /// A job started.
    Started { id: usize },
    /// A job ended.
    Finished {
        id: usize,
        /// xferlab's exit status (0 ok, 1 failed or partial, 2 bad usage).
        exit_code: i32,
        /// The `-o` file's content, if the job wrote one.
        json: Option<String>,
        /// The last ~2 KB of its stderr.
        stderr: String,
        /// Seconds between the job's start and end markers, host clock.
        elapsed_s: f64,
    },
}

/// Why a batch did not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error(
        "{what} is not installed; apt-get install qemu-system-x86 busybox-static kmod python3"
    )]
    Missing { what: &'static str },
    #[error("cannot start {}: {source}; it is a python3 script (apt-get install python3) and must be executable", runner.display())]
    Spawn {
        runner: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write the guest script {}: {source}; check that $TMPDIR is writable", path.display())]
    Script {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("job {id}: argument {arg:?} contains a NUL byte, which no command line can carry; remove it")]
    NulInArgument { id: usize, arg: String },
    /// `lab/vm/run` exited 125: no kernel, no QEMU, a failed build or boot.
    #[error("the lab VM failed: {reason} (`lab/vm/run` exit 125; run it by hand with -v to see the console)")]
    Lab {
        reason: String,
        /// The last lines of the lab's log (stderr).
        log: Vec<String>,
    },
    #[error("the VM batch hit its {timeout_s} s limit{}; raise the scenario's VM timeout or shorten its runs", job.map(|j| format!(" during job {j}")).unwrap_or_default())]
    Timeout { timeout_s: u64, job: Option<usize> },
    #[error(
        "the VM setup failed (exit {rc}){}; fix the scenario's setup commands",
        last_line(output)
    )]
    Setup {
        rc: i32,
        /// Everything the setup printed (stdout and stderr).
        output: Vec<String>,
    },
    #[error("the guest stopped after {finished} of {total} jobs (exit {code}){}; rerun with lab/vm/run -v to see the console", last_line(output))]
    Incomplete {
        code: i32,
        finished: usize,
        total: usize,
        /// Unexpected guest output and the lab log's last lines.
        output: Vec<String>,
    },
    #[error("interrupted: the VM was stopped")]
    Interrupted,
}

fn last_line(lines: &[String]) -> String {
    lines
        .iter()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| format!(": {}", l.trim()))
        .unwrap_or_default()
}

/// Finds `lab/vm/run`: `$XFERLAB_LABVM_RUN` when set, else the first
/// `lab/vm/run` in `starts` or one of their parents.
pub fn find_vm_runner(starts: &[&Path]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("XFERLAB_LABVM_RUN").filter(|p| !p.is_empty()) {
        // Named explicitly: a wrong path should fail loudly at spawn, not fall back.
        return Some(PathBuf::from(p));
    }
    starts.iter().find_map(|start| {
        start
            .ancestors()
            .map(|d| d.join("lab/vm/run"))
            .find(|p| p.is_file())
    })
}

/// Bytes of a job's stderr kept (`tail -c` in the guest).
const STDERR_TAIL_BYTES: usize = 2048;
/// Lines of the lab's log kept for error messages.
const LAB_LOG_LINES: usize = 40;
/// Lines of unexpected guest output kept for error messages.
const STRAY_LINES: usize = 40;
/// The guest's scratch directory (tmpfs).
const GUEST_DIR: &str = "/tmp/xferlab-batch";
/// How long `lab/vm/run` gets to stop its QEMU after SIGTERM.
const TERM_GRACE: Duration = Duration::from_secs(10);

/// Runs all `jobs` in one guest, in order, calling `on_event` as their
/// markers arrive. Returns when the guest has finished (or at once with
/// [`VmError::Interrupted`] when `stop` is set: the VM is killed first).
///
/// `xferlab_static`: the guest's `/bin/xferlab`; `None` lets `lab/vm/run`
/// build a static one from its own checkout (cached in its target dir).
pub fn run_in_vm(
    runner: &Path,
    xferlab_static: Option<&Path>,
    setup: &VmSetup,
    jobs: &[Job],
    stop: &AtomicBool,
    on_event: &mut dyn FnMut(JobEvent),
) -> Result<(), VmError> {
    // Checked here because the lab checks them only after a static build
    // that may take minutes.
    for (what, bin) in [
        ("qemu-system-x86_64", "qemu-system-x86_64"),
        ("python3", "python3"),
    ] {
        if !on_path(bin) {
            return Err(VmError::Missing { what });
        }
    }
    if !on_path("busybox") && !Path::new("/bin/busybox").exists() {
        return Err(VmError::Missing { what: "busybox" });
    }
    let nonce = nonce();
    let script = guest_script(setup.setup.as_deref(), jobs, &nonce, GUEST_DIR)?;
    let script_file = TempFile(
        std::env::temp_dir().join(format!("xferlab-vm-{}-{nonce}.sh", std::process::id())),
    );
    std::fs::write(&script_file.0, script).map_err(|source| VmError::Script {
        path: script_file.0.clone(),
        source,
    })?;

    let mut cmd = Command::new(runner);
    cmd.args(lab_args(setup, xferlab_static))
        .arg("--script")
        .arg(&script_file.0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SIGTERM, not SIGKILL: lab/vm/run then kills its QEMU itself (QEMU
    // also dies with it through its own PDEATHSIG).
    crate::sys::process::die_with_parent(&mut cmd, crate::sys::process::Signal::TERM);
    let t0 = Instant::now();
    let mut child = cmd.spawn().map_err(|source| VmError::Spawn {
        runner: runner.to_path_buf(),
        source,
    })?;
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let tx2 = tx.clone();
    std::thread::spawn(move || read_lines(stdout, Stream::Out, tx));
    std::thread::spawn(move || read_lines(stderr, Stream::Err, tx2));

    let mut parser = Parser::new(&nonce);
    let mut lab_log: VecDeque<String> = VecDeque::new();
    let mut booted = false;
    let mut open = 2;
    while open > 0 {
        if stop.load(Ordering::Relaxed) {
            kill(&mut child);
            return Err(VmError::Interrupted);
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Msg::Line(Stream::Out, line, at)) => {
                let now_s = at.duration_since(t0).as_secs_f64();
                let event = parser.feed(&line, now_s);
                if parser.began && !booted {
                    // The lab's "guest booted" log line normally came first;
                    // this is the fallback (it includes any build time).
                    booted = true;
                    on_event(JobEvent::Booted { boot_s: now_s });
                }
                if let Some(e) = event {
                    on_event(e);
                }
            }
            Ok(Msg::Line(Stream::Err, line, _)) => {
                if let Some(boot_s) = parse_boot_line(&line) {
                    if !booted {
                        booted = true;
                        on_event(JobEvent::Booted { boot_s });
                    }
                }
                push_bounded(&mut lab_log, line, LAB_LOG_LINES);
            }
            Ok(Msg::Closed) => open -= 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = wait_or_stop(&mut child, stop)?;
    drop(script_file);
    outcome(status, &parser, jobs, setup.timeout_s, lab_log)
}

/// `lab/vm/run`'s options for this setup (everything before `--script`).
fn lab_args(setup: &VmSetup, xferlab_static: Option<&Path>) -> Vec<String> {
    let mut args = Vec::new();
    if !setup.modules.is_empty() {
        args.push("--modules".into());
        args.push(setup.modules.join(","));
    }
    if !setup.extra_modules.is_empty() {
        args.push("--extra-modules".into());
        args.push(setup.extra_modules.join(","));
    }
    for a in &setup.add {
        args.push("--add".into());
        args.push(a.clone());
    }
    if let Some(x) = xferlab_static {
        args.push("--xferlab".into());
        args.push(x.display().to_string());
    }
    if let Some(n) = setup.smp {
        args.push("--smp".into());
        args.push(n.to_string());
    }
    args.push("--timeout".into());
    args.push(setup.timeout_s.max(1).to_string());
    args
}

/// The batch's result once `lab/vm/run` has exited.
fn outcome(
    status: ExitStatus,
    parser: &Parser,
    jobs: &[Job],
    timeout_s: u64,
    lab_log: VecDeque<String>,
) -> Result<(), VmError> {
    use std::os::unix::process::ExitStatusExt;
    let lab_log: Vec<String> = lab_log.into();
    let Some(code) = status.code() else {
        let sig = status.signal().unwrap_or(0);
        if matches!(sig, libc::SIGINT | libc::SIGTERM | libc::SIGHUP) {
            return Err(VmError::Interrupted);
        }
        return Err(VmError::Lab {
            reason: format!("lab/vm/run was killed by signal {sig}"),
            log: lab_log,
        });
    };
    // lab/vm/run exits 128+N after killing its QEMU on SIGINT/SIGTERM/SIGHUP
    // (Ctrl-C reaches it through our process group).
    if matches!(code, 129 | 130 | 143)
        && lab_log.iter().any(|l| l.contains("interrupted by signal"))
    {
        return Err(VmError::Interrupted);
    }
    match code {
        125 => {
            let reason = lab_log
                .iter()
                .rev()
                .find_map(|l| l.split_once("labvm: error: ").map(|(_, r)| r.to_string()))
                .or_else(|| lab_log.iter().rev().find(|l| !l.trim().is_empty()).cloned())
                .unwrap_or_else(|| "no log".into());
            return Err(VmError::Lab {
                reason,
                log: lab_log,
            });
        }
        124 => {
            return Err(VmError::Timeout {
                timeout_s,
                job: parser.current_job(),
            })
        }
        _ => {}
    }
    if let Some((rc, output)) = &parser.setup {
        if *rc != 0 {
            return Err(VmError::Setup {
                rc: *rc,
                output: output.clone(),
            });
        }
    } else if parser.began {
        // The setup died without even its EXIT trap (e.g. a syntax error).
        return Err(VmError::Setup {
            rc: code,
            output: parser.stray.iter().cloned().collect(),
        });
    }
    let finished = jobs
        .iter()
        .filter(|j| parser.finished.contains(&j.id))
        .count();
    if code == 0 && parser.ended && finished == jobs.len() {
        return Ok(());
    }
    let mut output: Vec<String> = parser.stray.iter().cloned().collect();
    output.extend(lab_log);
    Err(VmError::Incomplete {
        code,
        finished,
        total: jobs.len(),
        output,
    })
}

/// Waits for `lab/vm/run` to exit after its output closed, still honouring `stop`.
fn wait_or_stop(child: &mut Child, stop: &AtomicBool) -> Result<ExitStatus, VmError> {
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Ok(status);
        }
        if stop.load(Ordering::Relaxed) {
            kill(child);
            return Err(VmError::Interrupted);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGTERM (lab/vm/run kills its QEMU group and exits), then SIGKILL after
/// [`TERM_GRACE`] (QEMU then dies through its PDEATHSIG).
fn kill(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    crate::sys::process::signal_child(child, crate::sys::process::Signal::TERM).ok();
    let t = Instant::now();
    while t.elapsed() < TERM_GRACE {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn on_path(bin: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            std::fs::metadata(d.join(bin))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// 16 hex digits, fresh per batch.
fn nonce() -> String {
    let v = getrandom::u64().unwrap_or_else(|_| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        t ^ (u64::from(std::process::id()) << 32)
    });
    format!("{v:016x}")
}

/// Removes the guest script file when the batch ends, however it ends.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[derive(Debug, Clone, Copy)]
enum Stream {
    Out,
    Err,
}

enum Msg {
    Line(Stream, String, Instant),
    Closed,
}

/// Sends each line (timestamped when read) until EOF; bytes that are not
/// UTF-8 are replaced rather than ending the stream.
fn read_lines(r: impl Read, which: Stream, tx: mpsc::Sender<Msg>) {
    let mut r = BufReader::new(r);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match r.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buf);
                let line = line.trim_end_matches(['\n', '\r']).to_string();
                if tx.send(Msg::Line(which, line, Instant::now())).is_err() {
                    return;
                }
            }
        }
    }
    let _ = tx.send(Msg::Closed);
}

fn push_bounded(q: &mut VecDeque<String>, line: String, max: usize) {
    if q.len() == max {
        q.pop_front();
    }
    q.push_back(line);
}

/// `labvm: guest booted in 3.2 s` -> 3.2.
fn parse_boot_line(line: &str) -> Option<f64> {
    line.split_once("guest booted in ")?
        .1
        .strip_suffix(" s")?
        .trim()
        .parse()
        .ok()
}

/// `s` as one word for `sh`: single quotes, each `'` as `'\''`.
fn sh_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

fn marker(nonce: &str, body: &str) -> String {
    format!("@@XFERLAB:{nonce} {body}@@")
}

/// The guest script: markers, the setup, then each job. `dir` is the
/// guest's scratch directory (a parameter so tests can run the script on
/// the host).
fn guest_script(
    setup: Option<&str>,
    jobs: &[Job],
    nonce: &str,
    dir: &str,
) -> Result<String, VmError> {
    use std::fmt::Write;
    let m = |body: &str| marker(nonce, body);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# xferlab: a batch of {} job(s), generated by `xferlab run`.",
        jobs.len()
    );
    let _ = writeln!(s, "D={}", sh_quote(dir));
    s.push_str("rm -rf \"$D\"; mkdir -p \"$D\" || exit 1\n");
    // Fd 3 keeps the console: the EXIT trap may run while the setup's
    // redirection to its log file is still in place.
    s.push_str("exec 3>&1\n");
    let _ = writeln!(s, "echo '{}'", m("BEGIN"));
    let _ = writeln!(
        s,
        "_xl_setup_done() {{\n  {{ echo; echo \"{}\"; cat \"$D/setup.out\" 2>/dev/null; echo; echo '{}'; }} >&3\n}}",
        m("SETUP-END rc=$1"),
        m("SETUP-OUT-END")
    );
    s.push_str("trap '_xl_setup_done $?' EXIT\n");
    s.push_str("{\n:\n");
    if let Some(text) = setup {
        s.push_str(text);
        s.push('\n');
    }
    s.push_str("} < /dev/null > \"$D/setup.out\" 2>&1\n");
    s.push_str("_xl_rc=$?\ntrap - EXIT\n_xl_setup_done $_xl_rc\n");
    s.push_str("[ $_xl_rc -eq 0 ] || exit $_xl_rc\n");
    for job in jobs {
        let mut argv = String::new();
        for a in &job.args {
            if a.contains('\0') {
                return Err(VmError::NulInArgument {
                    id: job.id,
                    arg: a.replace('\0', "\\0"),
                });
            }
            argv.push(' ');
            argv.push_str(&sh_quote(a));
        }
        let id = job.id;
        let _ = writeln!(s, "echo '{}'", m(&format!("JOB-START {id}")));
        let _ = writeln!(
            s,
            "xferlab{argv} -J -o \"$D/job.json\" < /dev/null > /dev/null 2> \"$D/job.err\""
        );
        let _ = writeln!(s, "_xl_rc=$?");
        let _ = writeln!(s, "echo \"{}\"", m(&format!("JOB-END {id} rc=$_xl_rc")));
        s.push_str("cat \"$D/job.json\" 2>/dev/null; echo\n");
        let _ = writeln!(s, "echo '{}'", m(&format!("JSON-END {id}")));
        let _ = writeln!(
            s,
            "tail -c {STDERR_TAIL_BYTES} \"$D/job.err\" 2>/dev/null; echo"
        );
        let _ = writeln!(s, "echo '{}'", m(&format!("JOB-DONE {id}")));
        s.push_str("rm -f \"$D/job.json\" \"$D/job.err\"\n");
    }
    let _ = writeln!(s, "echo '{}'", m("END"));
    s.push_str("exit 0\n");
    Ok(s)
}

/// Where the parser is in the marker protocol.
#[derive(Debug)]
enum State {
    /// Between blocks.
    Outside,
    /// Collecting the setup's output.
    SetupOut { rc: i32, lines: Vec<String> },
    /// A job is running.
    Running { id: usize, start_s: f64 },
    /// A job ended; collecting its JSON.
    Json { job: Ended },
    /// Collecting its stderr tail.
    Stderr { job: Ended, json: String },
}

#[derive(Debug)]
struct Ended {
    id: usize,
    rc: i32,
    elapsed_s: f64,
    lines: Vec<String>,
}

/// Turns the guest's stdout, line by line, into events.
#[derive(Debug)]
struct Parser {
    tag: String,
    state: State,
    /// The batch's first marker was seen (the guest is up).
    began: bool,
    /// The setup's status and output, once reported.
    setup: Option<(i32, Vec<String>)>,
    /// Ids of the jobs finished so far.
    finished: Vec<usize>,
    /// The batch's last marker was seen.
    ended: bool,
    /// Lines outside any block (kernel messages, shell errors).
    stray: VecDeque<String>,
}

impl Parser {
    fn new(nonce: &str) -> Parser {
        Parser {
            tag: format!("@@XFERLAB:{nonce} "),
            state: State::Outside,
            began: false,
            setup: None,
            finished: Vec::new(),
            ended: false,
            stray: VecDeque::new(),
        }
    }

    /// The job running or reporting now, if any.
    fn current_job(&self) -> Option<usize> {
        match &self.state {
            State::Running { id, .. } => Some(*id),
            State::Json { job } | State::Stderr { job, .. } => Some(job.id),
            _ => None,
        }
    }

    /// `KIND ARGS...` of a marker line (found anywhere in the line, in case
    /// console noise precedes it).
    fn marker<'a>(&self, line: &'a str) -> Option<(&'a str, Vec<&'a str>)> {
        let rest = &line[line.find(&self.tag)? + self.tag.len()..];
        let body = &rest[..rest.find("@@")?];
        let mut words = body.split_whitespace();
        Some((words.next()?, words.collect()))
    }

    /// Feeds one line read at `now_s` (host clock, any origin).
    fn feed(&mut self, line: &str, now_s: f64) -> Option<JobEvent> {
        let Some((kind, args)) = self.marker(line) else {
            match &mut self.state {
                State::SetupOut { lines, .. } => lines.push(line.to_string()),
                State::Json { job } | State::Stderr { job, .. } => job.lines.push(line.to_string()),
                // Blank lines here are the script's own `echo`s.
                State::Outside | State::Running { .. } if line.trim().is_empty() => {}
                State::Outside | State::Running { .. } => {
                    push_bounded(&mut self.stray, line.to_string(), STRAY_LINES)
                }
            }
            return None;
        };
        let id = args.first().and_then(|a| a.parse::<usize>().ok());
        let rc = args
            .iter()
            .find_map(|a| a.strip_prefix("rc="))
            .and_then(|v| v.parse::<i32>().ok());
        let state = std::mem::replace(&mut self.state, State::Outside);
        match (kind, state) {
            ("BEGIN", _) => self.began = true,
            ("SETUP-END", _) => {
                self.state = State::SetupOut {
                    rc: rc.unwrap_or(-1),
                    lines: Vec::new(),
                }
            }
            ("SETUP-OUT-END", State::SetupOut { rc, mut lines }) => {
                trim_blank_ends(&mut lines);
                self.setup = Some((rc, lines));
            }
            ("JOB-START", _) => {
                if let Some(id) = id {
                    self.state = State::Running { id, start_s: now_s };
                    return Some(JobEvent::Started { id });
                }
            }
            ("JOB-END", State::Running { id: open, start_s }) if id == Some(open) => {
                self.state = State::Json {
                    job: Ended {
                        id: open,
                        rc: rc.unwrap_or(-1),
                        elapsed_s: (now_s - start_s).max(0.0),
                        lines: Vec::new(),
                    },
                }
            }
            ("JSON-END", State::Json { mut job }) if id == Some(job.id) => {
                trim_blank_ends(&mut job.lines);
                let json = job.lines.join("\n");
                job.lines.clear();
                self.state = State::Stderr { job, json };
            }
            ("JOB-DONE", State::Stderr { mut job, json }) if id == Some(job.id) => {
                trim_blank_ends(&mut job.lines);
                self.finished.push(job.id);
                return Some(JobEvent::Finished {
                    id: job.id,
                    exit_code: job.rc,
                    json: (!json.trim().is_empty()).then_some(json),
                    stderr: job.lines.join("\n"),
                    elapsed_s: job.elapsed_s,
                });
            }
            ("END", _) => self.ended = true,
            // A marker out of order (lost output): keep it for the error
            // message; the job it belonged to is reported as missing.
            (_, state) => {
                self.state = state;
                push_bounded(&mut self.stray, line.to_string(), STRAY_LINES);
            }
        }
        None
    }
}

/// Drops the blank lines the script's `echo`s add around blocks.
fn trim_blank_ends(lines: &mut Vec<String>) {
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    let lead = lines.iter().take_while(|l| l.trim().is_empty()).count();
    lines.drain(..lead);
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: &str = "00c0ffee00c0ffee";

    fn job(id: usize, args: &[&str]) -> Job {
        Job {
            id,
            args: args.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn feed_all(text: &str) -> (Parser, Vec<JobEvent>) {
        let mut p = Parser::new(N);
        let mut events = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if let Some(e) = p.feed(line, i as f64) {
                events.push(e);
            }
        }
        (p, events)
    }

    fn m(body: &str) -> String {
        marker(N, body)
    }

    #[test]
    fn quoting_survives_hostile_text() {
        assert_eq!(sh_quote("plain"), "'plain'");
        assert_eq!(sh_quote(""), "''");
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
        assert_eq!(sh_quote("a\nb"), "'a\nb'");
    }

    /// Runs a generated script with the host's `sh` (dash here; the guest's
    /// busybox ash too when installed), with `xferlab` replaced by a shell
    /// function that echoes its argv to stderr, and parses the output.
    fn run_script_on_host(shell: &str, setup: &str, jobs: &[Job]) -> (i32, Parser, Vec<JobEvent>) {
        let dir = std::env::temp_dir().join(format!(
            "xferlab-vm-test-{}-{}",
            std::process::id(),
            nonce()
        ));
        let script = guest_script(Some(setup), jobs, N, dir.to_str().unwrap()).unwrap();
        let out = Command::new(shell.split(' ').next().unwrap())
            .args(shell.split(' ').skip(1))
            .arg("-c")
            .arg(&script)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (p, events) = feed_all(&text);
        (out.status.code().unwrap_or(-1), p, events)
    }

    /// `xferlab` as a shell function: argv to stderr as <a><b>..., a JSON
    /// document to the `-o` file (the last argument), exit status from $XL_RC.
    const FAKE_XFERLAB: &str = r#"xferlab() {
  for a in "$@"; do printf '<%s>' "$a" >&2; done
  eval "last=\${$#}"
  printf '{\n  "argc": %d,\n  "title": "q\\"x"\n}\n' "$#" > "$last"
  return ${XL_RC:-0}
}
echo setup says hi
echo setup warns >&2"#;

    fn shells() -> Vec<&'static str> {
        let mut v = vec!["sh"];
        if on_path("busybox") {
            v.push("busybox sh");
        }
        v
    }

    #[test]
    fn hostile_arguments_reach_the_program_unchanged() {
        let hostile = [
            "it's",
            "$HOME `id` $(id)",
            "a; rm -rf /tmp/nope; echo",
            "line1\nline2",
            "\"double\" \\back\\",
            "",
            "*",
            "@@XFERLAB:0000000000000000 JOB-DONE 0@@",
        ];
        for shell in shells() {
            let jobs = [job(0, &hostile), job(7, &["XL_RC=ignored", "-t", "1"])];
            let (code, p, events) = run_script_on_host(shell, FAKE_XFERLAB, &jobs);
            assert_eq!(code, 0, "{shell}");
            assert!(p.began && p.ended, "{shell}");
            assert_eq!(
                p.setup,
                Some((
                    0,
                    vec!["setup says hi".to_string(), "setup warns".to_string()]
                )),
                "{shell}"
            );
            assert_eq!(events.len(), 4, "{shell}: {events:?}");
            assert_eq!(events[0], JobEvent::Started { id: 0 });
            let JobEvent::Finished {
                id,
                exit_code,
                json,
                stderr,
                ..
            } = &events[1]
            else {
                panic!("{shell}: {events:?}")
            };
            assert_eq!((*id, *exit_code), (0, 0));
            let mut want: String = hostile.iter().map(|a| format!("<{a}>")).collect();
            want.push_str("<-J><-o>");
            // The stderr holds the marker-looking argument too: it is data,
            // the job still ended at its real DONE marker.
            assert!(stderr.starts_with(&want), "{shell}: {stderr:?}");
            assert!(stderr.ends_with("/job.json>"), "{shell}: {stderr:?}");
            let v: serde_json::Value = serde_json::from_str(json.as_deref().unwrap()).unwrap();
            assert_eq!(v["argc"], hostile.len() + 3);
            assert_eq!(v["title"], "q\"x");
            assert_eq!(events[2], JobEvent::Started { id: 7 });
            assert!(matches!(
                &events[3],
                JobEvent::Finished {
                    id: 7,
                    exit_code: 0,
                    ..
                }
            ));
        }
    }

    #[test]
    fn exit_codes_and_missing_json_are_reported() {
        // The fake writes no JSON when told to, and returns $XL_RC.
        let setup = r#"xferlab() { echo "bad flag $1" >&2; return 2; }"#;
        for shell in shells() {
            let (code, p, events) = run_script_on_host(shell, setup, &[job(3, &["--nope"])]);
            assert_eq!(code, 0);
            assert!(p.ended);
            assert!(
                matches!(
                    &events[1],
                    JobEvent::Finished { id: 3, exit_code: 2, json: None, stderr, .. }
                        if stderr == "bad flag --nope"
                ),
                "{shell}: {events:?}"
            );
        }
    }

    #[test]
    fn a_failing_setup_stops_the_batch_with_its_output() {
        for shell in shells() {
            // Plain failure: the last status is the setup's.
            let (code, p, events) =
                run_script_on_host(shell, "echo trying\nfalse", &[job(0, &["x"])]);
            assert_eq!(code, 1, "{shell}");
            assert_eq!(p.setup, Some((1, vec!["trying".to_string()])), "{shell}");
            assert!(events.is_empty() && !p.ended);
            // `exit` inside the setup: the EXIT trap still reports it.
            let (code, p, _) =
                run_script_on_host(shell, "echo no udc >&2\nexit 3", &[job(0, &["x"])]);
            assert_eq!(code, 3, "{shell}");
            assert_eq!(p.setup, Some((3, vec!["no udc".to_string()])), "{shell}");
        }
    }

    #[test]
    fn background_processes_of_the_setup_outlive_it() {
        let setup = "sleep 5 & echo $! > \"$D/bg.pid\"";
        let check = r#"xferlab() { kill -0 $(cat "$D/bg.pid") && echo alive >&2; kill $(cat "$D/bg.pid"); }"#;
        let (code, _, events) =
            run_script_on_host("sh", &format!("{setup}\n{check}"), &[job(0, &[])]);
        assert_eq!(code, 0);
        assert!(
            matches!(&events[1], JobEvent::Finished { stderr, .. } if stderr == "alive"),
            "{events:?}"
        );
    }

    #[test]
    fn nul_bytes_are_refused() {
        let e = guest_script(None, &[job(4, &["a\0b"])], N, "/tmp/x").unwrap_err();
        assert!(matches!(e, VmError::NulInArgument { id: 4, .. }));
        assert!(e.to_string().contains("NUL"));
    }

    #[test]
    fn parser_turns_markers_into_events() {
        let text = [
            "noise before".to_string(),
            m("BEGIN"),
            String::new(),
            m("SETUP-END rc=0"),
            "gadget up".into(),
            String::new(),
            m("SETUP-OUT-END"),
            m("JOB-START 5"),
            "[   12.3] kernel says something".into(),
            m("JOB-END 5 rc=1"),
            "{".into(),
            "  \"status\": \"partial\"".into(),
            "}".into(),
            String::new(),
            m("JSON-END 5"),
            "xferlab: the device went away".into(),
            String::new(),
            m("JOB-DONE 5"),
            m("END"),
        ]
        .join("\n");
        let (p, events) = feed_all(&text);
        assert!(p.began && p.ended);
        assert_eq!(p.setup, Some((0, vec!["gadget up".into()])));
        assert_eq!(
            events,
            vec![
                JobEvent::Started { id: 5 },
                JobEvent::Finished {
                    id: 5,
                    exit_code: 1,
                    json: Some("{\n  \"status\": \"partial\"\n}".into()),
                    stderr: "xferlab: the device went away".into(),
                    // Lines 7 (start) and 9 (end) at one second per line.
                    elapsed_s: 2.0,
                }
            ]
        );
        assert_eq!(p.finished, vec![5]);
        assert_eq!(
            p.stray.iter().collect::<Vec<_>>(),
            ["noise before", "[   12.3] kernel says something"]
        );
    }

    #[test]
    fn markers_of_another_batch_and_out_of_order_markers_are_ignored() {
        let other = marker("ffffffffffffffff", "JOB-START 1");
        let text = [
            m("BEGIN"),
            other.clone(),
            m("JOB-END 1 rc=0"), // no start: out of order
            m("JOB-START 1"),
            format!("garbage{}", m("JOB-END 1 rc=0")), // noise before a marker
            m("JSON-END 2"),                           // wrong id: kept as JSON text
            m("JSON-END 1"),
        ]
        .join("\n");
        let (p, events) = feed_all(&text);
        assert_eq!(events, vec![JobEvent::Started { id: 1 }]);
        assert_eq!(p.current_job(), Some(1));
        assert!(p.stray.contains(&other));
        // The job never reported DONE: not finished.
        assert!(p.finished.is_empty());
    }

    #[test]
    fn outcome_maps_exit_codes_to_errors() {
        use std::os::unix::process::ExitStatusExt;
        let st = |code: i32| ExitStatus::from_raw(code << 8);
        let jobs = [job(0, &[]), job(1, &[])];
        let full = [
            m("BEGIN"),
            m("SETUP-END rc=0"),
            m("SETUP-OUT-END"),
            m("JOB-START 0"),
            m("JOB-END 0 rc=0"),
            m("JSON-END 0"),
            m("JOB-DONE 0"),
            m("JOB-START 1"),
        ];
        let (p, _) = feed_all(&full.join("\n"));
        let log = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<VecDeque<_>>();

        let e = outcome(st(124), &p, &jobs, 60, log(&[])).unwrap_err();
        assert!(
            matches!(
                e,
                VmError::Timeout {
                    timeout_s: 60,
                    job: Some(1)
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("during job 1"));

        let e = outcome(
            st(125),
            &p,
            &jobs,
            60,
            log(&[
                "labvm: kernel 6.1.0",
                "labvm: error: qemu-system-x86_64 not found; apt-get install qemu-system-x86",
                "trailing",
            ]),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the lab VM failed: qemu-system-x86_64 not found; apt-get install qemu-system-x86 ("),
            "{e}"
        );

        let e = outcome(st(0), &p, &jobs, 60, log(&["labvm: console tail"])).unwrap_err();
        assert!(
            matches!(
                &e,
                VmError::Incomplete {
                    code: 0,
                    finished: 1,
                    total: 2,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("1 of 2 jobs"), "{e}");

        let e = outcome(
            st(130),
            &p,
            &jobs,
            60,
            log(&["labvm: interrupted by signal 2"]),
        )
        .unwrap_err();
        assert!(matches!(e, VmError::Interrupted));
        let e = outcome(ExitStatus::from_raw(libc::SIGTERM), &p, &jobs, 60, log(&[])).unwrap_err();
        assert!(matches!(e, VmError::Interrupted));

        // A setup that died without reporting (e.g. a syntax error).
        let (p2, _) =
            feed_all(&[m("BEGIN"), "sh: syntax error: unexpected \"}\"".into()].join("\n"));
        let e = outcome(st(2), &p2, &jobs, 60, log(&[])).unwrap_err();
        assert!(
            e.to_string()
                .contains("setup failed (exit 2): sh: syntax error"),
            "{e}"
        );

        let mut done = full.to_vec();
        done.extend([
            m("JOB-END 1 rc=2"),
            m("JSON-END 1"),
            m("JOB-DONE 1"),
            m("END"),
        ]);
        let (p3, _) = feed_all(&done.join("\n"));
        outcome(st(0), &p3, &jobs, 60, log(&[])).unwrap();
    }

    #[test]
    fn lab_arguments_follow_the_setup() {
        let setup = VmSetup {
            modules: vec!["sctp".into()],
            extra_modules: vec!["dummy_hcd".into(), "libcomposite".into()],
            add: vec!["a.sh:/work/a.sh".into()],
            setup: None,
            timeout_s: 90,
            smp: None,
        };
        assert_eq!(
            lab_args(&setup, Some(Path::new("/x/xferlab"))),
            [
                "--modules",
                "sctp",
                "--extra-modules",
                "dummy_hcd,libcomposite",
                "--add",
                "a.sh:/work/a.sh",
                "--xferlab",
                "/x/xferlab",
                "--timeout",
                "90"
            ]
        );
        assert_eq!(lab_args(&VmSetup::default(), None), ["--timeout", "1"]);
    }

    #[test]
    fn boot_time_comes_from_the_lab_log() {
        assert_eq!(parse_boot_line("labvm: guest booted in 3.4 s"), Some(3.4));
        assert_eq!(parse_boot_line("labvm: qemu pid 12"), None);
    }

    #[test]
    fn the_runner_is_found_above_a_start_directory() {
        let root = std::env::temp_dir().join(format!("xferlab-vm-find-{}", nonce()));
        std::fs::create_dir_all(root.join("lab/vm")).unwrap();
        std::fs::create_dir_all(root.join("a/b/c")).unwrap();
        std::fs::write(root.join("lab/vm/run"), "#!/bin/sh\n").unwrap();
        let deep = root.join("a/b/c");
        if std::env::var_os("XFERLAB_LABVM_RUN").is_none() {
            assert_eq!(
                find_vm_runner(&[Path::new("/nonexistent/x"), &deep]),
                Some(root.join("lab/vm/run"))
            );
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    // ------------------------------------------------ real VM boots ----

    fn repo_runner() -> PathBuf {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        find_vm_runner(&[here]).expect("lab/vm/run above the crate")
    }

    fn run_logged(setup: &VmSetup, jobs: &[Job]) -> (Vec<JobEvent>, f64) {
        let stop = AtomicBool::new(false);
        let t0 = Instant::now();
        let mut events = Vec::new();
        let r = run_in_vm(&repo_runner(), None, setup, jobs, &stop, &mut |e| {
            let shown = match &e {
                JobEvent::Finished {
                    id,
                    exit_code,
                    json,
                    stderr,
                    elapsed_s,
                } => format!(
                    "Finished {id}: exit {exit_code}, {} B of JSON, {elapsed_s:.2} s, stderr {stderr:?}",
                    json.as_ref().map_or(0, |j| j.len())
                ),
                e => format!("{e:?}"),
            };
            eprintln!("[{:7.1} s] {shown}", t0.elapsed().as_secs_f64());
            events.push(e);
        });
        let wall = t0.elapsed().as_secs_f64();
        if let Err(e) = &r {
            panic!("run_in_vm: {e}\n{e:?}");
        }
        eprintln!("batch wall time {wall:.1} s");
        (events, wall)
    }

    fn finished(events: &[JobEvent], want: usize) -> (i32, Option<serde_json::Value>, String, f64) {
        events
            .iter()
            .find_map(|e| match e {
                JobEvent::Finished {
                    id,
                    exit_code,
                    json,
                    stderr,
                    elapsed_s,
                } if *id == want => Some((
                    *exit_code,
                    json.as_deref()
                        .map(|j| serde_json::from_str(j).expect("valid JSON")),
                    stderr.clone(),
                    *elapsed_s,
                )),
                _ => None,
            })
            .unwrap_or_else(|| panic!("job {want} did not finish: {events:?}"))
    }

    #[test]
    #[ignore = "boots the lab VM (~2 min); run with --ignored"]
    fn three_jobs_in_one_boot() {
        let setup = VmSetup {
            timeout_s: 240,
            smp: None,
            ..VmSetup::default()
        };
        let jobs = [
            job(10, &["stream", "-t", "1"]),
            job(11, &["stream", "-t", "1", "-T", "it's a \"title\"; $HOME"]),
            job(12, &["stream", "--no-such-flag"]),
        ];
        let (events, _) = run_logged(&setup, &jobs);
        assert!(
            matches!(events[0], JobEvent::Booted { boot_s } if boot_s > 0.0),
            "{events:?}"
        );
        let order: Vec<String> = events
            .iter()
            .skip(1)
            .map(|e| match e {
                JobEvent::Started { id } => format!("S{id}"),
                JobEvent::Finished { id, .. } => format!("F{id}"),
                JobEvent::Booted { .. } => "B".into(),
            })
            .collect();
        assert_eq!(order, ["S10", "F10", "S11", "F11", "S12", "F12"]);
        for id in [10, 11] {
            let (rc, json, stderr, elapsed) = finished(&events, id);
            assert_eq!(rc, 0, "{stderr}");
            let v = json.expect("JSON");
            assert_eq!(v["schema"], "xferlab.result/2");
            assert_eq!(v["status"], "ok");
            assert!(elapsed >= 1.0, "{elapsed}");
        }
        let (_, json, _, _) = finished(&events, 11);
        assert_eq!(json.unwrap()["spec"]["title"], "it's a \"title\"; $HOME");
        let (rc, json, stderr, _) = finished(&events, 12);
        assert_eq!(rc, 2);
        assert!(json.is_none());
        assert!(stderr.contains("--no-such-flag"), "{stderr}");
    }

    #[test]
    #[ignore = "boots the lab VM (~2 min); run with --ignored"]
    fn usb_bulk_jobs_against_the_sourcesink_gadget() {
        let guest_dir = repo_runner().parent().unwrap().join("guest");
        let setup = VmSetup {
            modules: Vec::new(),
            extra_modules: ["dummy_hcd", "libcomposite", "usb_f_ss_lb"]
                .map(String::from)
                .to_vec(),
            add: vec![format!("{}:/work/guest", guest_dir.display())],
            setup: Some("sh /work/guest/usb-gadget-setup.sh".into()),
            timeout_s: 300,
            smp: None,
        };
        let bulk = |dir: &str, size: &str, depth: &str, t: &str| -> Vec<String> {
            [
                "usb",
                "bulk",
                "-d",
                "0525:a4a0",
                "--dir",
                dir,
                "-l",
                size,
                "-Q",
                depth,
                "-t",
                t,
            ]
            .map(String::from)
            .to_vec()
        };
        let jobs = [
            // 64 B IN is refused at high speed (512-byte packets): exit 2.
            Job {
                id: 0,
                args: bulk("in", "64", "1", "1"),
            },
            Job {
                id: 1,
                args: bulk("in", "512", "1", "1"),
            },
            Job {
                id: 2,
                args: bulk("out", "64", "1", "1"),
            },
            Job {
                id: 3,
                args: bulk("in", "64K", "32", "2"),
            },
            Job {
                id: 4,
                args: bulk("out", "64K", "32", "2"),
            },
        ];
        let (events, _) = run_logged(&setup, &jobs);
        let (rc, json, stderr, _) = finished(&events, 0);
        assert_eq!(rc, 2, "{stderr}");
        assert!(json.is_none());
        assert!(stderr.contains("-l 512"), "{stderr}");
        for (id, depth) in [(1, 1), (2, 1), (3, 32), (4, 32)] {
            let (rc, json, stderr, elapsed) = finished(&events, id);
            assert_eq!(rc, 0, "job {id}: {stderr}");
            let v = json.expect("JSON");
            assert_eq!(v["status"], "ok", "job {id}");
            let pipe = &v["client"]["transport"]["pipes"][0];
            assert_eq!(pipe["depth"], depth);
            assert_eq!(pipe["max_packet"], 512, "high speed");
            let t = &v["client"]["flows"][0]["total"];
            let secs = t["end_s"].as_f64().unwrap() - t["start_s"].as_f64().unwrap();
            eprintln!(
                "job {id}: {} B in {secs:.2} s = {:.2} MB/s, {} transfers; job took {elapsed:.1} s",
                t["bytes"],
                t["bytes"].as_f64().unwrap() / secs / 1e6,
                pipe["total"]["transfers"]
            );
        }
    }

    /// Live qemu processes started under this test process's environment mark.
    fn marked_qemus(mark: &str) -> Vec<String> {
        let needle = format!("XFERLAB_VM_TEST_MARK={mark}");
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            if !stat.contains("(qemu-system-x86") || stat.contains(") Z ") {
                continue;
            }
            let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
            if String::from_utf8_lossy(&env).contains(&needle) {
                found.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        found
    }

    #[test]
    #[ignore = "boots the lab VM (~1 min); run with --ignored"]
    fn stop_kills_the_vm_mid_job() {
        let mark = nonce();
        // Inherited by lab/vm/run and its QEMU: how this test finds them.
        std::env::set_var("XFERLAB_VM_TEST_MARK", &mark);
        let stop = AtomicBool::new(false);
        let setup = VmSetup {
            timeout_s: 120,
            smp: None,
            ..VmSetup::default()
        };
        let mut seen_qemu = false;
        let mut started_at = None;
        let t0 = Instant::now();
        let r = run_in_vm(
            &repo_runner(),
            None,
            &setup,
            &[job(0, &["stream", "-t", "60"])],
            &stop,
            &mut |e| {
                if let JobEvent::Started { .. } = e {
                    seen_qemu = !marked_qemus(&mark).is_empty();
                    started_at = Some(t0.elapsed());
                    stop.store(true, Ordering::Relaxed);
                }
            },
        );
        let took = t0.elapsed() - started_at.expect("the job started");
        assert!(matches!(r, Err(VmError::Interrupted)), "{r:?}");
        assert!(seen_qemu, "the test's QEMU was not found while it ran");
        assert!(took < Duration::from_secs(15), "stopping took {took:?}");
        assert_eq!(
            marked_qemus(&mark),
            Vec::<String>::new(),
            "QEMU left running"
        );
    }
}
