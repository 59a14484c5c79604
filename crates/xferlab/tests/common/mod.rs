//! Shared helpers for the integration tests: they run the real `xferlab`
//! binary as separate processes over loopback.
//!
//! * [`Proc`] owns a child process and kills + reaps it on drop, so no test
//!   leaves a process behind, even when it panics.
//! * [`Server`] starts `xferlab server -p PORT` on a free port and waits until
//!   it accepts connections.
//! * [`run`] runs a command with a deadline and kills it when it overruns.
//! * JSON helpers parse `-J` output and check the invariants every result
//!   must satisfy (schema, sender/receiver agreement).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_xferlab");

/// Slack on top of a test's planned duration before a client is declared
/// hung and killed. Generous for a noisy 2-core VM, yet well under the
/// protocol's 30 s timeouts so a hang is reported as a hang.
pub const SLACK: Duration = Duration::from_secs(10);

/// Deadline for a client given its planned seconds.
pub fn deadline_for(seconds: f64) -> Duration {
    Duration::from_secs_f64(seconds) + SLACK
}

// ---------------------------------------------------------------- ports

/// A TCP port nothing listens on right now (bind port 0 on the dual-stack
/// any-address, read it back, release it). Callers that bind it retry on
/// the rare race with another process.
pub fn free_port() -> u16 {
    let l = TcpListener::bind((Ipv6Addr::UNSPECIFIED, 0))
        .or_else(|_| TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)))
        .expect("bind an ephemeral port");
    l.local_addr().expect("local_addr").port()
}

/// Fails (does not skip) a test that needs ::1 on a host without a usable
/// IPv6 loopback: what such a test checks would otherwise go unchecked.
pub fn require_ipv6_loopback() {
    if let Err(e) = TcpListener::bind((Ipv6Addr::LOCALHOST, 0)) {
        panic!(
            "this test needs an IPv6 loopback, and [::1] cannot be bound here ({e}): \
             enable IPv6 on lo (sysctl net.ipv6.conf.lo.disable_ipv6=0)"
        );
    }
}

// ---------------------------------------------------------------- processes

/// What a pipe has delivered so far, and whether it has reached end of
/// file; the reader thread signals `more` after every chunk, so waiting
/// for output is waiting for the output itself, not polling on a timer.
#[derive(Default)]
struct Piped {
    bytes: Vec<u8>,
    eof: bool,
}

/// Collects everything a pipe delivers, on a thread, so a chatty child can
/// never block on a full pipe.
struct Capture {
    shared: Arc<(Mutex<Piped>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Capture {
    fn new(mut r: impl Read + Send + 'static) -> Capture {
        let shared = Arc::new((Mutex::new(Piped::default()), Condvar::new()));
        let s = shared.clone();
        let thread = std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                let n = r.read(&mut chunk).unwrap_or(0);
                let mut p = s.0.lock().unwrap();
                if n == 0 {
                    p.eof = true;
                    s.1.notify_all();
                    return;
                }
                p.bytes.extend_from_slice(&chunk[..n]);
                s.1.notify_all();
            }
        });
        Capture {
            shared,
            thread: Some(thread),
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.shared.0.lock().unwrap().bytes).into_owned()
    }

    /// Blocks until `done` holds for the text so far (true), or the pipe
    /// reached end of file or `timeout` passed without it (false). `done`
    /// is asked again after every chunk the child writes.
    fn wait_for(&self, timeout: Duration, mut done: impl FnMut(&str) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let (lock, more) = &*self.shared;
        let mut p = lock.lock().unwrap();
        loop {
            if done(&String::from_utf8_lossy(&p.bytes)) {
                return true;
            }
            let now = Instant::now();
            if p.eof || now >= deadline {
                return false;
            }
            p = more.wait_timeout(p, deadline - now).unwrap().0;
        }
    }

    /// Waits for end of file (the child exited and closed the pipe).
    fn join(&mut self) {
        if let Some(t) = self.thread.take() {
            t.join().ok();
        }
    }
}

/// A child process that is killed and reaped when dropped.
pub struct Proc {
    pub label: String,
    child: Child,
    stdout: Capture,
    stderr: Capture,
    started: Instant,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Starts `xferlab ARGS` with stdout and stderr captured.
    pub fn spawn(args: &[&str]) -> Proc {
        let mut p = Proc::spawn_program(BIN, args);
        p.label = format!("xferlab {}", args.join(" "));
        p
    }

    /// Starts `xferlab ARGS` with extra environment variables.
    pub fn spawn_env(args: &[&str], env: &[(&str, &str)]) -> Proc {
        let mut p = Proc::spawn_program_env(BIN, args, env);
        p.label = format!("xferlab {}", args.join(" "));
        p
    }

    /// Starts another program (a peer tool such as iperf3), captured the
    /// same way.
    pub fn spawn_program(program: &str, args: &[&str]) -> Proc {
        Proc::spawn_program_env(program, args, &[])
    }

    pub fn spawn_program_env(program: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
        let mut command = Command::new(program);
        // Tests see the sizes of an uncalibrated machine unless they give
        // a calibration file: a developer's `xferlab calibrate` must not
        // change what they check.
        if program == BIN && !env.iter().any(|(k, _)| *k == "XFERLAB_CALIBRATION") {
            command.env("XFERLAB_CALIBRATION", "off");
        }
        let mut child = command
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        let stdout = Capture::new(child.stdout.take().expect("piped stdout"));
        let stderr = Capture::new(child.stderr.take().expect("piped stderr"));
        Proc {
            label: format!("{program} {}", args.join(" ")),
            child,
            stdout,
            stderr,
            started: Instant::now(),
            status: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stdout(&self) -> String {
        self.stdout.text()
    }

    pub fn stderr(&self) -> String {
        self.stderr.text()
    }

    /// Blocks until the child's stdout satisfies `done` (asked again after
    /// every chunk the child writes); panics, saying it did not `what`, if
    /// the child closes its stdout or `timeout` passes first.
    pub fn wait_for_stdout(&self, what: &str, timeout: Duration, done: impl FnMut(&str) -> bool) {
        if !self.stdout.wait_for(timeout, done) {
            panic!(
                "`{}` did not {what} within {timeout:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                self.label,
                self.stdout(),
                self.stderr()
            );
        }
    }

    /// Waits for the first `--format jsonl` line whose `event` is `event`
    /// and which `accept` takes, and returns it.
    pub fn wait_for_jsonl_event(
        &self,
        event: &str,
        timeout: Duration,
        accept: impl Fn(&Value) -> bool,
    ) -> Value {
        let mut found = None;
        self.wait_for_stdout(&format!("write a {event} line"), timeout, |text| {
            // Only whole lines: the last one may still be half written.
            let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
            found = whole
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|v| v["event"] == event && accept(v));
            found.is_some()
        });
        found.expect("wait_for_stdout returned, so a line was found")
    }

    /// For a client run with `--format jsonl`: waits until it reports an
    /// interval in which one of its flows moved data, the event that shows
    /// a test is under way (sent or received bytes, whichever its flows
    /// do). Returns that interval line.
    pub fn wait_for_data_interval(&self) -> Value {
        self.wait_for_jsonl_event("interval", SLACK, |ev| {
            ev["flows"].as_array().is_some_and(|fs| {
                fs.iter()
                    .any(|f| f["bytes"].as_u64().is_some_and(|b| b > 0))
            })
        })
    }

    /// The exit status, if the process has ended (reaps it).
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    pub fn is_running(&mut self) -> bool {
        self.try_status().is_none()
    }

    /// Sends a signal (e.g. `libc::SIGINT`) without waiting.
    pub fn signal(&mut self, sig: libc::c_int) {
        if self.try_status().is_none() {
            // SAFETY: plain kill(2) on our own child's pid.
            let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
            assert_eq!(rc, 0, "kill({}, {sig})", self.child.id());
        }
    }

    /// SIGKILL (std's `Child::kill` on Unix) and reap.
    pub fn kill(&mut self) {
        if self.try_status().is_none() {
            self.child.kill().ok();
            self.status = self.child.wait().ok();
        }
    }

    /// Waits until the process exits or `timeout` passes; on timeout the
    /// process is killed and `timed_out` is set.
    pub fn finish(mut self, timeout: Duration) -> Output {
        let deadline = self.started + timeout;
        let mut timed_out = false;
        loop {
            if self.try_status().is_some() {
                break;
            }
            if Instant::now() >= deadline {
                timed_out = true;
                self.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let elapsed = self.started.elapsed();
        self.stdout.join();
        self.stderr.join();
        let status = self.status.expect("reaped above");
        Output {
            label: self.label.clone(),
            code: status.code(),
            stdout: self.stdout.text(),
            stderr: self.stderr.text(),
            elapsed,
            timed_out,
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a finished command left behind.
#[derive(Debug, Clone)]
pub struct Output {
    pub label: String,
    /// None when killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    pub timed_out: bool,
}

impl Output {
    /// A multi-line description for assertion messages.
    pub fn describe(&self) -> String {
        let tail = |s: &str| {
            let start = s.len().saturating_sub(3000);
            let start = (start..s.len())
                .find(|&i| s.is_char_boundary(i))
                .unwrap_or(s.len());
            s[start..].to_string()
        };
        format!(
            "`{}`: exit {:?}{} after {:.2} s\n--- stderr ---\n{}\n--- stdout (tail) ---\n{}",
            self.label,
            self.code,
            if self.timed_out {
                " (KILLED: timed out)"
            } else {
                ""
            },
            self.elapsed.as_secs_f64(),
            self.stderr,
            tail(&self.stdout)
        )
    }

    /// Asserts exit 0 and an empty stderr.
    pub fn assert_success(&self) {
        assert!(
            !self.timed_out && self.code == Some(0),
            "expected success\n{}",
            self.describe()
        );
        assert!(
            self.stderr.is_empty(),
            "a successful run wrote to stderr\n{}",
            self.describe()
        );
    }

    /// Asserts the failure contract: exit `code`, nothing on stdout and
    /// exactly one line on stderr, `xferlab: ...`, containing every needle
    /// (case-insensitive). Returns that line.
    pub fn assert_one_line_failure(&self, code: i32, needles: &[&str]) -> String {
        assert!(!self.timed_out, "command hung\n{}", self.describe());
        assert_eq!(
            self.code,
            Some(code),
            "wrong exit code\n{}",
            self.describe()
        );
        self.assert_one_line(needles)
    }

    /// The one-line-on-stderr part of the failure contract.
    pub fn assert_one_line(&self, needles: &[&str]) -> String {
        let body = self.stderr.strip_suffix('\n').unwrap_or(&self.stderr);
        assert!(
            !body.is_empty() && !body.contains('\n'),
            "expected exactly one line on stderr, got {} lines\n{}",
            self.stderr.lines().count(),
            self.describe()
        );
        assert!(
            body.starts_with("xferlab: "),
            "stderr line does not start with `xferlab: `\n{}",
            self.describe()
        );
        let lower = body.to_lowercase();
        for n in needles {
            assert!(
                lower.contains(&n.to_lowercase()),
                "stderr line does not name the cause ({n:?} missing)\n{}",
                self.describe()
            );
        }
        body.to_string()
    }
}

/// The result document of a `--format jsonl` run: every stdout line is one
/// JSON object and the last is `{"event":"result","result":{...}}`.
pub fn jsonl_result(out: &Output) -> Value {
    let mut events: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| {
                panic!("stdout line is not JSON ({e}): {l}\n{}", out.describe())
            })
        })
        .collect();
    let last = events
        .pop()
        .unwrap_or_else(|| panic!("no JSON lines on stdout\n{}", out.describe()));
    assert_eq!(
        last["event"],
        "result",
        "the last JSON line is not the result\n{}",
        out.describe()
    );
    last["result"].clone()
}

/// Runs `xferlab ARGS`, killing it after `timeout`.
pub fn run(args: &[&str], timeout: Duration) -> Output {
    Proc::spawn(args).finish(timeout)
}

/// Runs an embedded test (`xferlab stream ARGS`, no host) and returns its
/// validated JSON result; `seconds` is the planned duration.
pub fn embedded_json(args: &[&str], seconds: f64) -> Value {
    let mut all = vec!["stream", "-J"];
    all.extend_from_slice(args);
    let out = run(&all, deadline_for(seconds));
    out.assert_success();
    let v = parse_json(&out);
    validate_schema(&v);
    v
}

// ---------------------------------------------------------------- server

/// `xferlab server` on a free port, killed when dropped.
pub struct Server {
    pub port: u16,
    pub proc: Proc,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts `xferlab server -p PORT --iperf3-port off EXTRA...` and waits (bounded) until
    /// the server says it listens. Retries with another port if the chosen
    /// one was taken in the meantime. Not a connect probe: while this server
    /// is still starting, another test's server may hold the same port (both
    /// were free when asked), the probe would reach that one, and the test
    /// would talk to a server that then goes away (CI saw exactly this as a
    /// refused connection).
    pub fn start_with(extra: &[&str]) -> Server {
        for _attempt in 0..5 {
            let port = free_port();
            let port_s = port.to_string();
            let mut args = vec!["server", "-p", port_s.as_str()];
            // Tests run side by side: none may take iperf3's fixed port
            // 5201 (iperf3 clients reach the server on -p as well).
            if !extra.contains(&"--iperf3-port") {
                args.extend_from_slice(&["--iperf3-port", "off"]);
            }
            args.extend_from_slice(extra);
            let mut proc = Proc::spawn(&args);
            let deadline = Instant::now() + Duration::from_secs(10);
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            loop {
                if let Some(st) = proc.try_status() {
                    let err = proc.stderr();
                    if err.contains("already in use") {
                        break; // lost a race for the port: try another
                    }
                    panic!("server exited during start-up ({st}): {err}");
                }
                if proc.stdout().contains("xferlab server listening on") {
                    return Server { port, proc };
                }
                assert!(
                    Instant::now() < deadline,
                    "server did not listen on {addr} within 10 s; stdout: {}; stderr: {}",
                    proc.stdout(),
                    proc.stderr()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("could not start a server on a free port in 5 attempts");
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The server's stdout: its start line and one line per session event.
    pub fn log(&self) -> String {
        self.proc.stdout()
    }

    /// Panics with the server's output if it is no longer running.
    pub fn assert_alive(&mut self) {
        if let Some(st) = self.proc.try_status() {
            panic!(
                "the server died ({st})\n--- server stdout ---\n{}\n--- server stderr ---\n{}",
                self.log(),
                self.proc.stderr()
            );
        }
    }

    /// Threads of the server process right now.
    pub fn thread_count(&self) -> usize {
        thread_count(self.pid())
    }

    /// Argument vector for `stream 127.0.0.1 -p PORT ARGS`.
    pub fn client_args<'a>(&self, port: &'a str, args: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec!["stream", "127.0.0.1", "-p", port];
        all.extend_from_slice(args);
        all
    }

    /// Runs a client against this server (host 127.0.0.1).
    pub fn client(&self, args: &[&str], timeout: Duration) -> Output {
        let port = self.port.to_string();
        run(&self.client_args(&port, args), timeout)
    }

    /// Starts a client against this server without waiting for it.
    pub fn spawn_client(&self, args: &[&str]) -> Proc {
        let port = self.port.to_string();
        Proc::spawn(&self.client_args(&port, args))
    }

    /// Runs `stream 127.0.0.1 -p PORT -J ARGS`, asserts success and a valid
    /// `status: ok` result, and returns it. `seconds` is the planned
    /// duration, for the deadline.
    pub fn json(&self, args: &[&str], seconds: f64) -> Value {
        let mut all = vec!["-J"];
        all.extend_from_slice(args);
        let out = self.client(&all, deadline_for(seconds));
        if out.code != Some(0) || out.timed_out {
            panic!(
                "client failed\n{}\n--- server log ---\n{}",
                out.describe(),
                self.log()
            );
        }
        out.assert_success();
        let v = parse_json(&out);
        validate_schema(&v);
        assert_ok(&v);
        v
    }

    /// Waits (bounded) until the server log contains `needle` at least `n`
    /// times.
    pub fn wait_for_log(&self, needle: &str, n: usize, timeout: Duration) {
        self.proc
            .wait_for_stdout(&format!("log {needle:?} x{n}"), timeout, |log| {
                log.matches(needle).count() >= n
            });
    }
}

/// Threads of a process (entries of /proc/PID/task); panics when the
/// process is gone, so a dead process never passes for one with few threads.
pub fn thread_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap_or_else(|e| panic!("process {pid} is gone (/proc/{pid}/task: {e})"))
        .count()
}

/// Names of a process's threads (for assertion messages).
pub fn thread_names(pid: u32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return vec![];
    };
    dir.filter_map(|e| e.ok())
        .map(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .unwrap_or_default()
                .trim()
                .to_string()
        })
        .collect()
}

/// CPUs this test process may use (its affinity mask), ascending.
pub fn usable_cpus() -> Vec<u32> {
    let list = cpus_allowed(std::path::Path::new("/proc/self/status"))
        .expect("Cpus_allowed_list in /proc/self/status");
    let mut cpus = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

/// [`usable_cpus`] for a test that pins the two ends to different CPUs;
/// fails (does not skip) with one CPU, where a pinned thread's mask is the
/// process's own and pinning could not be told from no pinning.
pub fn two_usable_cpus() -> Vec<u32> {
    let cpus = usable_cpus();
    assert!(
        cpus.len() >= 2,
        "this test needs two usable CPUs to tell the ends' pinning apart; it may use only {cpus:?}"
    );
    cpus
}

/// The Cpus_allowed_list ("0", "0-1" ...) of a /proc status file
/// (/proc/PID/status for a process, /proc/PID/task/TID/status for a
/// thread).
pub fn cpus_allowed(status_path: &std::path::Path) -> Option<String> {
    let status = std::fs::read_to_string(status_path).ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    Some(list.trim().to_string())
}

/// Waits (up to 10 s) for a thread of `pid` named `name` whose
/// Cpus_allowed_list is `want`, and returns the list it has by then.
pub fn thread_cpus(pid: u32, name: &str, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = None;
    loop {
        if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for e in dir.filter_map(|e| e.ok()) {
                let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
                if comm.trim() != name {
                    continue;
                }
                // A thread is named before its first instruction pins it:
                // wait for the pin, not just for the name.
                if let Some(cpus) = cpus_allowed(&e.path().join("status")) {
                    if cpus == want {
                        return cpus;
                    }
                    last = Some(cpus);
                }
            }
        }
        if Instant::now() >= deadline {
            return last.unwrap_or_else(|| {
                panic!(
                    "no thread {name} in process {pid} within 10 s (threads: {:?})",
                    thread_names(pid)
                )
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A field of /proc/PID/status in kB (VmRSS, VmHWM ...).
pub fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(&format!("{field}:")))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

// ---------------------------------------------------------------- wire

/// The control-protocol version this build speaks (docs/protocol.md).
pub const PROTOCOL: u16 = 2;

/// The 8-byte preamble: `XFRL`, u16 BE version, kind (1 control, 2 data), 0.
pub fn preamble(version: u16, kind: u8) -> [u8; 8] {
    let v = version.to_be_bytes();
    [b'X', b'F', b'R', b'L', v[0], v[1], kind, 0]
}

/// A frame: u32 BE length, then the payload.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

/// Connects a raw TCP socket to `addr` with a read timeout.
pub fn raw_connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(3)).expect("raw connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// Reads exactly `n` bytes (panics on timeout or early EOF).
pub fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf)
        .unwrap_or_else(|e| panic!("reading {n} bytes from the server: {e}"));
    buf
}

/// Reads one length-prefixed JSON frame.
pub fn read_json_frame(s: &mut TcpStream) -> Value {
    let len = u32::from_be_bytes(read_n(s, 4).try_into().unwrap()) as usize;
    assert!(len <= 64 * 1024, "server sent a frame of {len} bytes");
    let payload = read_n(s, len);
    serde_json::from_slice(&payload).unwrap_or_else(|e| {
        panic!(
            "server frame is not JSON ({e}): {}",
            String::from_utf8_lossy(&payload)
        )
    })
}

/// Reads until EOF; true if the peer closed within the socket's timeout.
pub fn reads_to_eof(s: &mut TcpStream) -> bool {
    let mut sink = [0u8; 4096];
    loop {
        match s.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// Writes all of `bytes`.
pub fn send(s: &mut TcpStream, bytes: &[u8]) {
    s.write_all(bytes).expect("write to the server");
}

// ---------------------------------------------------------------- JSON

pub fn parse_json(out: &Output) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document: {e}\n{}", out.describe()))
}

/// The compiled docs/result-schema.json.
pub fn schema() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/result-schema.json");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let schema: Value = serde_json::from_str(&text).expect("schema is JSON");
        jsonschema::options()
            .should_validate_formats(true)
            .build(&schema)
            .expect("docs/result-schema.json compiles")
    })
}

/// Schema violations of `v` (empty when valid).
pub fn schema_errors(v: &Value) -> Vec<String> {
    schema()
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

pub fn validate_schema(v: &Value) {
    let errors = schema_errors(v);
    assert!(
        errors.is_empty(),
        "result does not match docs/result-schema.json:\n{}",
        errors.join("\n")
    );
}

pub fn assert_ok(v: &Value) {
    assert_eq!(
        v["status"], "ok",
        "status is not ok; errors: {}",
        v["errors"]
    );
    assert!(
        v["errors"].as_array().into_iter().all(|e| e.is_empty()),
        "errors on an ok result: {}",
        v["errors"]
    );
}

/// `v[side]["flows"]` ("client" or "server").
pub fn flows<'a>(v: &'a Value, side: &str) -> &'a Vec<Value> {
    v[side]["flows"]
        .as_array()
        .unwrap_or_else(|| panic!("{side}.flows missing"))
}

pub fn u64_at(v: &Value, ptr: &str) -> u64 {
    v.pointer(ptr)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{ptr} is not an unsigned integer in {v}"))
}

pub fn f64_at(v: &Value, ptr: &str) -> f64 {
    v.pointer(ptr)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{ptr} is not a number in {v}"))
}

pub fn str_at<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{ptr} is not a string in {v}"))
}

/// The flow with this id on one side.
pub fn flow_by_id<'a>(v: &'a Value, side: &str, id: u64) -> &'a Value {
    flows(v, side)
        .iter()
        .find(|f| f["id"].as_u64() == Some(id))
        .unwrap_or_else(|| panic!("{side} has no flow {id}"))
}

/// Each flow's (id, sender report, receiver report), after checking that
/// every flow appears on both sides with the same id and direction and
/// opposite roles.
pub fn flow_pairs(v: &Value) -> Vec<(u64, &Value, &Value)> {
    let c = flows(v, "client");
    assert_eq!(
        c.len(),
        flows(v, "server").len(),
        "client and server report different flow counts"
    );
    c.iter()
        .map(|cf| {
            let id = cf["id"].as_u64().expect("flow id");
            let sf = flow_by_id(v, "server", id);
            assert_eq!(cf["direction"], sf["direction"], "flow {id} direction");
            assert_ne!(cf["role"], sf["role"], "flow {id}: both ends have one role");
            if cf["role"] == "sender" {
                (id, cf, sf)
            } else {
                (id, sf, cf)
            }
        })
        .collect()
}

/// Every flow appears on both sides with the same id and direction and
/// opposite roles; both ends completed, and the sender's `bytes_all` equals
/// the receiver's exactly (the receiver drains to end of stream). Also
/// checks each side's intervals add up to its `bytes_all`.
pub fn assert_flows_agree(v: &Value) {
    for (id, snd, rcv) in flow_pairs(v) {
        assert_eq!(
            snd["end"]["kind"], "completed",
            "flow {id} sender end: {}",
            snd["end"]
        );
        assert_eq!(
            rcv["end"]["kind"], "completed",
            "flow {id} receiver end: {}",
            rcv["end"]
        );
        let sent = u64_at(snd, "/total/bytes_all");
        let got = u64_at(rcv, "/total/bytes_all");
        assert_eq!(
            sent, got,
            "flow {id}: sender bytes_all {sent} != receiver bytes_all {got}"
        );
        assert!(sent > 0, "flow {id} moved nothing");
        for f in [snd, rcv] {
            let sum: u64 = f["intervals"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["bytes"].as_u64().unwrap())
                .sum();
            if !f["intervals"].as_array().unwrap().is_empty() {
                assert_eq!(
                    sum,
                    u64_at(f, "/total/bytes_all"),
                    "flow {id} ({}): intervals do not add up to bytes_all",
                    f["role"]
                );
            }
        }
    }
}

/// Summary of one direction (`"c2s"` / `"s2c"`).
pub fn summary_dir<'a>(v: &'a Value, dir: &str) -> &'a Value {
    v["summary"]["directions"]
        .as_array()
        .expect("summary.directions")
        .iter()
        .find(|d| d["direction"] == dir)
        .unwrap_or_else(|| panic!("summary has no {dir} direction: {}", v["summary"]))
}

/// Sum of `total.<field>` over one side's flows of one direction and role.
pub fn side_total(v: &Value, side: &str, dir: &str, role: &str, field: &str) -> u64 {
    flows(v, side)
        .iter()
        .filter(|f| f["direction"] == dir && f["role"] == role)
        .map(|f| f["total"][field].as_u64().unwrap())
        .sum()
}

/// Whether the tests run as root (buffer requests are then forced past
/// net.core.[rw]mem_max and the kernel's read-back is exactly twice them).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Upper bound of the data one flow can have in flight between the two
/// ends' byte counters: the largest send buffer plus the largest receive
/// buffer autotuning may grow to, plus one write.
pub fn in_flight_bound(write_size: u64) -> u64 {
    let max_of = |path: &str| -> u64 {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.split_whitespace().last().and_then(|x| x.parse().ok()))
            .unwrap_or(64 << 20)
    };
    max_of("/proc/sys/net/ipv4/tcp_wmem") + max_of("/proc/sys/net/ipv4/tcp_rmem") + write_size
}

/// Tests whose figures depend on timing (pacing, late sends, loss) take
/// turns: on two cores, parallel UDP tests would measure each other.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A one-off stock iperf3 server (`program -s -1 -J`) on a free port, once
/// it listens. Not probed by connecting: a one-off server counts any
/// connection as its one test, so the port is looked up in /proc/net/tcp*.
pub fn one_off_iperf3_server(program: &str) -> (Proc, u16) {
    for _ in 0..5 {
        let port = free_port();
        let p = port.to_string();
        let mut proc = Proc::spawn_program(program, &["-s", "-1", "-J", "-p", &p]);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && proc.is_running() {
            if is_listening(port) {
                return (proc, port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("could not start {program} -s");
}

/// Whether some socket listens on TCP `port` (from /proc/net/tcp*).
pub fn is_listening(port: u16) -> bool {
    let needle = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|path| {
        std::fs::read_to_string(path).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && f[1].ends_with(&needle) && f[3] == "0A"
            })
        })
    })
}

/// iperf3 3.21's binary (/opt/iperf3-321, or `XFERLAB_IPERF3_321=PATH`)
/// for `purpose`, checked to have `flag`; None when
/// `XFERLAB_IPERF3_321=skip` (said on stderr). Fails, naming the fix, when
/// it is missing or lacks `flag`.
pub fn iperf3_321(flag: &str, purpose: &str) -> Option<std::path::PathBuf> {
    let named = std::env::var("XFERLAB_IPERF3_321").ok();
    if named.as_deref() == Some("skip") {
        eprintln!("XFERLAB_IPERF3_321=skip: SKIPPED {purpose} against iperf3 3.21");
        return None;
    }
    let path = std::path::PathBuf::from(named.as_deref().unwrap_or("/opt/iperf3-321/bin/iperf3"));
    let help = Command::new(&path)
        .arg("--help")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    assert!(
        help.contains(flag),
        "iperf3 3.21 with {flag} (for {purpose}) is not at {}: build it as .ci/run does (tar -xzf third_party/iperf-3.21+.tar.gz; ./configure --prefix=/opt/iperf3-321 with libssl-dev installed; make install, on a Linux with <linux/mptcp.h>), or set XFERLAB_IPERF3_321=/path/to/iperf3, or XFERLAB_IPERF3_321=skip to skip these tests",
        path.display()
    );
    Some(path)
}

/// Runs a lab check whose figures depend on the emulator keeping time,
/// up to five times. `attempt` runs the lab and returns its result and
/// the first claim that failed, if any. A failed attempt is forgiven only
/// when the run itself blamed the host (the hypervisor took at least
/// `xferlab_core::steal::NOTABLE_STEAL_PERCENT` of the CPU time while
/// the forwarders ran, `lab.accuracy.host_steal_percent`); any other
/// failure, or five blamed ones, fails the test with every attempt's
/// reason. Why: on CI's Firecracker guests (2026-11-27) the host took
/// 4-33 % of the CPU time in bursts of milliseconds, and one run in a
/// few missed its goodput or probe figure for it. Returns the passing
/// attempt's result.
pub fn unless_the_host_took_the_time(attempt: impl Fn() -> (Value, Option<String>)) -> Value {
    retry_while_the_host_steals(|| {
        let (v, failed) = attempt();
        let steal = v["lab"]["accuracy"]["host_steal_percent"].as_f64();
        (v, failed, steal)
    })
}

/// [`unless_the_host_took_the_time`] for a check without a lab (a sender
/// on loopback keeping its rate): the steal is read from /proc/stat
/// around each attempt. `attempt` returns the first claim that failed.
pub fn unless_the_host_stole(attempt: impl Fn() -> Option<String>) {
    let ticks = || {
        std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|t| xferlab_core::steal::parse_proc_stat(&t))
    };
    retry_while_the_host_steals(|| {
        let before = ticks();
        let failed = attempt();
        let steal = before
            .zip(ticks())
            .and_then(|(b, a)| xferlab_core::steal::steal_percent(b, a));
        ((), failed, steal)
    });
}

/// Up to five attempts; one that failed is forgiven only when the host
/// stole notable CPU time during it.
fn retry_while_the_host_steals<T>(attempt: impl Fn() -> (T, Option<String>, Option<f64>)) -> T {
    let mut reasons = Vec::new();
    for n in 1..=5 {
        let (v, failed, steal) = attempt();
        let Some(why) = failed else {
            if !reasons.is_empty() {
                eprintln!("passed at attempt {n}; earlier: {}", reasons.join(" | "));
            }
            return v;
        };
        match xferlab_core::steal::notable(steal) {
            Some(p) => reasons.push(format!("attempt {n}, host steal {p:.1} %: {why}")),
            None => panic!("{why}\n(host steal {steal:?} %: not the host's doing)"),
        }
    }
    panic!(
        "every attempt missed while the hypervisor took CPU time; this host cannot keep the test's timing:\n{}",
        reasons.join("\n")
    );
}

/// Runs `ip ARGS` (iproute2) for a test's namespaces and links; panics
/// with its stderr if it fails.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `ip` (iproute2): {e}"));
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The flows of `side` (`client`/`server`) in `role`.
pub fn flows_in_role<'a>(v: &'a Value, side: &str, role: &str) -> Vec<&'a Value> {
    flows(v, side)
        .iter()
        .filter(|f| f["role"] == role)
        .collect()
}

/// A count in a JSON result.
pub fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}
