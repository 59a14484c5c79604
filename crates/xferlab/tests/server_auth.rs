//! Authentication on `xferlab server` (off by default): xferlab clients
//! answer an HMAC-SHA256 challenge with a pre-shared key (`--auth-key`),
//! stock iperf3 clients use iperf3's own RSA username/password scheme;
//! wrong credentials are refused with one line and failed attempts are
//! rate-limited per address. The RSA key pair in tests/data/iperf3-auth
//! is a throwaway made for these tests only.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

const IPERF3: &str = "iperf3";

fn data(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/iperf3-auth")
        .join(name)
        .display()
        .to_string()
}

/// A file with `text` that lives as long as the returned guard.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let p = std::env::temp_dir().join(format!("xferlab-auth-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        TempFile(p)
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

/// `user,sha256("{user}password")`, as iperf3's server reads it.
fn users_file(tag: &str) -> TempFile {
    use sha2::Digest;
    let hash: String = sha2::Sha256::digest(b"{mario}rossi")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    TempFile::new(tag, &format!("# iperf3 users\nmario,{hash}\n"))
}

fn iperf3_client(program: &str, srv: &Server, password: &str, creds: bool) -> Output {
    let port = srv.port.to_string();
    let key = data("public.pem");
    let mut args = vec!["-c", "127.0.0.1", "-p", &port, "-t", "1"];
    if creds {
        args.extend(["--username", "mario", "--rsa-public-key-path", &key]);
    }
    let mut cmd = std::process::Command::new(program);
    cmd.args(&args).env("IPERF3_PASSWORD", password);
    let t0 = std::time::Instant::now();
    let out = cmd.output().expect("run iperf3");
    Output {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
        elapsed: t0.elapsed(),
        timed_out: false,
        label: format!("IPERF3_PASSWORD={password} {program} {}", args.join(" ")),
    }
}

#[test]
fn xferlab_clients_prove_they_hold_a_key() {
    let keys = TempFile::new(
        "keys",
        "# server keys\nan-old-key-still-accepted-0\nthe-current-key-0123456789\n",
    );
    let mine = TempFile::new("mine", "the-current-key-0123456789\n");
    let wrong = TempFile::new("wrong", "a-key-the-server-does-not-have\n");
    let srv = Server::start_with(&["--auth-key", keys.path()]);

    let v = srv.json(&["-t", "0.3", "--auth-key", mine.path()], 0.3);
    assert_flows_agree(&v);

    let out = srv.client(
        &["-t", "0.3", "--auth-key", wrong.path()],
        deadline_for(0.3),
    );
    out.assert_one_line_failure(1, &["authentication failed", "does not match"]);
    let out = srv.client(&["-t", "0.3"], deadline_for(0.3));
    out.assert_one_line_failure(1, &["requires authentication", "--auth-key"]);
    srv.wait_for_log("authentication failed", 2, Duration::from_secs(3));

    // A short key is refused before anything is sent.
    let short = TempFile::new("short", "tooshort\n");
    let out = srv.client(
        &["-t", "0.3", "--auth-key", short.path()],
        deadline_for(0.3),
    );
    out.assert_one_line_failure(2, &["--auth-key", "at least 16"]);
}

#[test]
fn failed_attempts_are_rate_limited_per_address() {
    let keys = TempFile::new("rl-keys", "the-current-key-0123456789\n");
    let wrong = TempFile::new("rl-wrong", "a-key-the-server-does-not-have\n");
    let srv = Server::start_with(&["--auth-key", keys.path()]);
    for _ in 0..5 {
        let out = srv.client(
            &["-t", "0.3", "--auth-key", wrong.path()],
            deadline_for(0.3),
        );
        out.assert_one_line_failure(1, &["authentication failed"]);
    }
    // Now even the right key is refused from this address, for a while.
    let out = srv.client(&["-t", "0.3", "--auth-key", keys.path()], deadline_for(0.3));
    out.assert_one_line_failure(
        1,
        &["too many failed authentication attempts", "try again in"],
    );
    srv.wait_for_log("5 of 5 allowed per 60 s", 1, Duration::from_secs(3));
    srv.wait_for_log(
        "too many failed authentication attempts from 127.0.0.1",
        1,
        Duration::from_secs(3),
    );
}

/// The operator sets how many failures an address may make
/// (--auth-max-failures) and for how long they count (--auth-window):
/// after 2 an address is locked out, and let in again once the 2 s
/// window is over.
#[test]
fn the_failure_limit_and_window_are_flags() {
    let keys = TempFile::new("rlf-keys", "the-current-key-0123456789\n");
    let wrong = TempFile::new("rlf-wrong", "a-key-the-server-does-not-have\n");
    let srv = Server::start_with(&[
        "--auth-key",
        keys.path(),
        "--auth-max-failures",
        "2",
        "--auth-window",
        "2",
    ]);
    for _ in 0..2 {
        srv.client(
            &["-t", "0.3", "--auth-key", wrong.path()],
            deadline_for(0.3),
        )
        .assert_one_line_failure(1, &["authentication failed"]);
    }
    // Both failures happened before this instant, however long the
    // clients took to start: 2 s after it, their window is over.
    let t0 = std::time::Instant::now();
    srv.wait_for_log("2 of 2 allowed per 2 s", 1, Duration::from_secs(3));
    let out = srv.client(&["-t", "0.3", "--auth-key", keys.path()], deadline_for(0.3));
    out.assert_one_line_failure(1, &["too many failed authentication attempts"]);
    let wait = Duration::from_millis(2100).saturating_sub(t0.elapsed());
    std::thread::sleep(wait); // the window is a span of time: wait it out
    srv.json(&["-t", "0.3", "--auth-key", keys.path()], 0.3);
    for (args, needle) in [
        (
            &["--auth-max-failures", "0"][..],
            "--auth-max-failures must be at least 1",
        ),
        (&["--auth-window", "0"][..], "--auth-window must be above 0"),
    ] {
        let mut all = vec!["server", "-p", "0", "--iperf3-port", "off"];
        all.extend_from_slice(args);
        run(&all, Duration::from_secs(5)).assert_one_line_failure(2, &[needle]);
    }
}

#[test]
fn iperf3_clients_authenticate_with_iperf3s_rsa_scheme() {
    let users = users_file("users");
    let srv = Server::start_with(&[
        "--rsa-private-key-path",
        &data("private.pem"),
        "--authorized-users-path",
        users.path(),
    ]);
    let ok = iperf3_client(IPERF3, &srv, "rossi", true);
    assert_eq!(ok.code, Some(0), "{}\n{}", ok.describe(), srv.log());
    let bad = iperf3_client(IPERF3, &srv, "not-rossi", true);
    assert_ne!(bad.code, Some(0));
    assert!(
        format!("{}{}", bad.stdout, bad.stderr).contains("test authorization failed"),
        "{}",
        bad.describe()
    );
    let none = iperf3_client(IPERF3, &srv, "", false);
    assert!(
        format!("{}{}", none.stdout, none.stderr).contains("test authorization failed"),
        "{}",
        none.describe()
    );
    srv.wait_for_log("unknown user or wrong password", 1, Duration::from_secs(3));
    srv.wait_for_log("no credentials", 1, Duration::from_secs(3));
    // xferlab clients have no key on a server with iperf3 credentials
    // only: refused, not let through.
    let out = srv.client(&["-t", "0.3"], deadline_for(0.3));
    out.assert_one_line_failure(1, &["authenticates iperf3 clients only"]);
}

/// The same against iperf3 3.21, which pads with OAEP (3.12 uses
/// PKCS#1 v1.5), built with OpenSSL as .ci/run builds it.
#[test]
fn iperf3_321_clients_authenticate_with_oaep() {
    let Some(program) = iperf3_321("--rsa-public-key-path", "the RSA authentication test") else {
        return;
    };
    let program = program.to_string_lossy().into_owned();
    let users = users_file("users321");
    let srv = Server::start_with(&[
        "--rsa-private-key-path",
        &data("private.pem"),
        "--authorized-users-path",
        users.path(),
    ]);
    let ok = iperf3_client(&program, &srv, "rossi", true);
    assert_eq!(ok.code, Some(0), "{}\n{}", ok.describe(), srv.log());
    assert!(srv.log().contains("iperf3 3.21"), "{}", srv.log());
    let bad = iperf3_client(&program, &srv, "not-rossi", true);
    assert!(
        format!("{}{}", bad.stdout, bad.stderr).contains("test authorization failed"),
        "{}",
        bad.describe()
    );
}
