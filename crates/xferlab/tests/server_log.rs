//! The server's log: text a client controls (an iperf3 client's version
//! string, a congestion-control name in a hello) reaches it escaped, so a
//! hostile client can neither forge log lines nor drive the operator's
//! terminal; and `-v` adds diagnostics on stderr without touching stdout.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

/// What a hostile client puts in its strings: clear the screen, then a
/// new line that looks like a log line of its own.
const HOSTILE: &str = "\u{1b}[2J\n2000-01-01T00:00:00Z 0.0.0.0:1: forged";
/// The same, as the log must show it.
const ESCAPED: &str = "\\u{1b}[2J\\n2000-01-01T00:00:00Z 0.0.0.0:1: forged";

fn assert_nothing_raw(log: &str) {
    assert!(!log.contains('\u{1b}'), "a raw ESC in the log:\n{log}");
    assert!(
        !log.lines().any(|l| l.starts_with("2000-01-01")),
        "a forged line in the log:\n{log}"
    );
}

#[test]
fn an_iperf3_clients_version_string_is_logged_escaped() {
    let srv = Server::start();
    let mut s = raw_connect(srv.addr());
    let mut cookie = format!("{:a<36}", "xferlablogtest").into_bytes();
    cookie.push(0);
    send(&mut s, &cookie);
    // PARAM_EXCHANGE, then the parameters as a length-prefixed JSON.
    assert_eq!(read_n(&mut s, 1), [9]);
    let params = json!({"tcp": true, "omit": 0, "time": 1, "parallel": 1, "len": 131072,
                        "client_version": format!("3.21{HOSTILE}")});
    send(&mut s, &frame(params.to_string().as_bytes()));
    srv.wait_for_log(
        &format!("iperf3 3.21{ESCAPED} client: accepted"),
        1,
        Duration::from_secs(5),
    );
    drop(s);
    srv.wait_for_log(": ended:", 1, Duration::from_secs(5));
    assert_nothing_raw(&srv.log());
}

#[test]
fn a_congestion_name_in_a_hello_is_logged_escaped() {
    let srv = Server::start();
    let hello = json!({
        "type": "hello",
        "software": {"name": "xferlab", "version": "0.1.0", "protocol": PROTOCOL},
        "spec": {
            "pattern": {"kind": "stream"}, "transport": "tcp", "direction": "forward",
            "parallel": 1, "limit": {"duration": {"seconds": 1.0}},
            "omit_s": 0.0, "interval_s": 1.0,
            "knobs": {"size": 131072, "buffer": null, "congestion": format!("cc{HOSTILE}"),
                      "nodelay": false, "mss": null, "tos": null, "max_pacing_rate": null,
                      "recv_mode": "copy"}
        }
    });
    let mut s = raw_connect(srv.addr());
    let mut msg = preamble(PROTOCOL, 1).to_vec();
    msg.extend(frame(hello.to_string().as_bytes()));
    send(&mut s, &msg);
    assert_eq!(read_n(&mut s, 8), preamble(PROTOCOL, 1));
    let err = read_json_frame(&mut s);
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert!(reads_to_eof(&mut s));
    srv.wait_for_log(
        &format!("'cc{ESCAPED}' is not a congestion-control name"),
        1,
        Duration::from_secs(5),
    );
    assert_nothing_raw(&srv.log());
}

#[test]
fn verbose_adds_connection_diagnostics_on_stderr_only() {
    let srv = Server::start_with(&["-vv"]);
    srv.json(&["-t", "0.3"], 0.3);
    srv.wait_for_log(": done:", 1, Duration::from_secs(5));
    let stderr = srv.proc.stderr();
    for needle in [
        " DEBUG xferlab::server: accepted peer=",
        " DEBUG xferlab::server: xferlab control connection peer=",
        " DEBUG xferlab::server: data connection peer=",
    ] {
        assert!(
            stderr.contains(needle),
            "{needle:?} not in stderr:\n{stderr}"
        );
    }
    // stdout keeps the plain log: the start line, then TIME MESSAGE lines.
    let log = srv.log();
    assert!(!log.contains("DEBUG"), "{log}");
    assert!(
        log.lines()
            .any(|l| l.ends_with(" accepted TCP stream forward x1 0.3 s")),
        "{log}"
    );
}
