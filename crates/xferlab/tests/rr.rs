//! `xferlab rr` end to end: the real binary over loopback, against the
//! in-process server or a real `xferlab server`. Rates are never asserted
//! as absolute numbers; what is checked are relations that hold on any
//! machine (counts agree, percentiles ordered, Little's law at depth d).

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

/// Runs `xferlab rr ARGS -J` (embedded server unless ARGS name a host),
/// asserts success and a schema-valid ok result.
fn rr_json(args: &[&str], seconds: f64) -> Value {
    let mut all = vec!["rr", "-J"];
    all.extend_from_slice(args);
    let out = run(&all, deadline_for(seconds));
    out.assert_success();
    let v = parse_json(&out);
    validate_schema(&v);
    assert_ok(&v);
    v
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// min <= p50 <= p90 <= p99 <= p99.9 <= max, and the mean inside.
fn assert_monotone(l: &Value) {
    let keys = ["min_us", "p50_us", "p90_us", "p99_us", "p999_us", "max_us"];
    let vals: Vec<f64> = keys.iter().map(|k| f(&l[k])).collect();
    assert!(
        vals.windows(2).all(|w| w[0] <= w[1]),
        "percentiles out of order: {l}"
    );
    let mean = f(&l["mean_us"]);
    assert!(
        vals[0] <= mean && mean <= vals[5],
        "mean outside min..max: {l}"
    );
    assert!(u(&l["count"]) > 0);
}

/// Client completed == server answered, per flow and in total.
fn assert_counts_agree(v: &Value) {
    let c = &v["client"]["pattern"];
    let s = &v["server"]["pattern"];
    assert_eq!(
        u(&c["total"]["transactions_all"]),
        u(&s["total"]["transactions_all"]),
        "client and server disagree on the total"
    );
    let cf = c["flows"].as_array().unwrap();
    let sf = s["flows"].as_array().unwrap();
    assert_eq!(cf.len(), sf.len());
    for (a, b) in cf.iter().zip(sf) {
        assert_eq!(a["id"], b["id"]);
        assert_eq!(
            u(&a["total"]["transactions_all"]),
            u(&b["total"]["transactions_all"]),
            "flow {} disagrees",
            a["id"]
        );
    }
    assert_eq!(
        v["summary"]["pattern"]["server_transactions_all"],
        v["summary"]["pattern"]["client_transactions_all"]
    );
}

/// For an rr client run with `--format jsonl`: waits for its first
/// interval in which transactions completed (the test is under way).
fn wait_for_transactions(client: &Proc) {
    client.wait_for_jsonl_event("rr_interval", SLACK, |ev| {
        ev["sum"]["transactions"].as_u64().is_some_and(|n| n > 0)
    });
}

/// Little's law for one flow: transactions/s x mean latency = the mean
/// number outstanding, which is the depth when the client refills at once.
fn outstanding(v: &Value) -> f64 {
    let c = &v["client"]["pattern"];
    f(&c["total"]["per_second"]) * f(&c["latency"]["mean_us"]) / 1e6
}

#[test]
fn tcp_rr_counts_agree_percentiles_are_ordered_and_mean_latency_matches_the_rate() {
    let _turn = one_at_a_time();
    let v = rr_json(&["-t", "2", "-i", "0.5"], 2.0);
    assert_eq!(v["spec"]["pattern"]["kind"], "rr");
    assert_counts_agree(&v);
    let c = &v["client"]["pattern"];
    assert_monotone(&c["latency"]);
    let flow = &c["flows"][0];
    assert_monotone(&flow["latency"]);
    // At depth 1, transactions run back to back: rate x mean latency is
    // close to 1 (the rest is the client's own turn-around time).
    let busy = outstanding(&v);
    assert!((0.5..=1.05).contains(&busy), "rate x mean latency = {busy}");
    // The time series adds up to the total.
    let ivs = flow["intervals"].as_array().unwrap();
    assert!(ivs.len() >= 3, "{} intervals", ivs.len());
    let sum: u64 = ivs.iter().map(|iv| u(&iv["transactions"])).sum();
    assert_eq!(sum, u(&flow["total"]["transactions_all"]));
    assert!(ivs.iter().all(|iv| u(&iv["transactions"]) > 0));
    let p = c["percentiles"].as_array().unwrap();
    assert!(p.windows(2).all(|w| f(&w[0]["us"]) <= f(&w[1]["us"])));
    // CPU of both sides is measured.
    assert!(f(&v["client"]["cpu"]["percent"]) > 0.0);
    assert!(f(&v["server"]["cpu"]["percent"]) > 0.0);
}

#[test]
fn pipelining_keeps_depth_transactions_outstanding() {
    let _turn = one_at_a_time();
    let v = rr_json(&["-t", "2", "--depth", "8", "-r", "100", "-s", "1000"], 2.0);
    assert_counts_agree(&v);
    assert_monotone(&v["client"]["pattern"]["latency"]);
    let n = outstanding(&v);
    assert!(
        (4.0..=8.4).contains(&n),
        "rate x mean latency = {n}, expected about 8 outstanding"
    );
}

#[test]
fn udp_rr_with_a_dropped_request_times_out_and_goes_on() {
    let _turn = one_at_a_time();
    let v = rr_json(
        &[
            "--mode",
            "udp-rr",
            "-F",
            "2",
            "--drop-request",
            "50",
            "--timeout",
            "100ms",
            "-t",
            "2",
            "-i",
            "0.5",
        ],
        2.0,
    );
    let c = &v["client"]["pattern"];
    let s = &v["server"]["pattern"];
    assert_eq!(u(&s["total"]["dropped"]), 2, "one drop per flow");
    assert_eq!(u(&c["total"]["timed_out"]), 2, "each drop timed out once");
    for flow in c["flows"].as_array().unwrap() {
        // The flow went on well past its 50th request.
        assert!(
            u(&flow["total"]["transactions_all"]) > 500,
            "flow stalled: {}",
            flow["total"]
        );
        assert_eq!(flow["end"]["kind"], "completed");
    }
    // The server answered every request it did not drop, and the client
    // got every answer.
    assert_counts_agree(&v);
    assert_eq!(
        u(&s["total"]["requests"]),
        u(&c["total"]["requests"]),
        "requests sent and received"
    );
    assert_monotone(&c["latency"]);
    // Without the knob nothing times out.
    let clean = rr_json(&["--mode", "udp-rr", "-t", "1"], 1.0);
    assert_eq!(u(&clean["client"]["pattern"]["total"]["timed_out"]), 0);
}

#[test]
fn tcp_crr_measures_connect_time_and_counts_agree() {
    let _turn = one_at_a_time();
    let v = rr_json(&["--mode", "tcp-crr", "-F", "2", "-t", "2"], 2.0);
    assert_counts_agree(&v);
    let c = &v["client"]["pattern"];
    assert_monotone(&c["latency"]);
    assert_monotone(&c["connect"]);
    // A transaction includes its connection set-up.
    assert!(f(&c["connect"]["mean_us"]) <= f(&c["latency"]["mean_us"]));
    assert_eq!(u(&c["total"]["failed"]), 0);
}

#[test]
fn crr_against_a_server_killed_mid_run_reports_failures_and_exits() {
    let _turn = one_at_a_time();
    let mut server = Server::start();
    let port = server.port.to_string();
    let client = Proc::spawn(&[
        "rr",
        "127.0.0.1",
        "-p",
        &port,
        "--mode",
        "tcp-crr",
        "-F",
        "4",
        "-t",
        "20",
        "--format",
        "jsonl",
        "-i",
        "0.25",
    ]);
    // The server dies once transactions are completing, as the client's
    // first interval with any shows.
    wait_for_transactions(&client);
    server.proc.kill();
    let out = client.finish(Duration::from_secs(15));
    assert!(!out.timed_out, "client hung\n{}", out.describe());
    assert_eq!(out.code, Some(1), "{}", out.describe());
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.describe());
    assert!(
        out.elapsed < Duration::from_secs(10),
        "took {:?}",
        out.elapsed
    );
    let v = jsonl_result(&out);
    validate_schema(&v);
    assert_eq!(v["status"], "partial");
    let t = &v["client"]["pattern"]["total"];
    assert!(u(&t["transactions_all"]) > 0, "{t}");
    assert!(u(&t["failed"]) > 0, "no failures counted: {t}");
}

#[test]
fn a_thousand_flows_complete_with_per_flow_results() {
    let _turn = one_at_a_time();
    let server = Server::start();
    let port = server.port.to_string();
    let client = Proc::spawn(&[
        "rr",
        "127.0.0.1",
        "-p",
        &port,
        "-F",
        "1000",
        "-t",
        "2",
        "-i",
        "1",
        "--format",
        "jsonl",
    ]);
    // A few threads, not one per flow: counted while the 1000 flows are
    // exchanging transactions (once the test has ended, any design would
    // pass).
    wait_for_transactions(&client);
    let threads = server.thread_count();
    assert!(
        threads < 64,
        "{threads} server threads while 1000 flows run: {:?}",
        thread_names(server.pid())
    );
    let out = client.finish(deadline_for(2.0) + Duration::from_secs(20));
    out.assert_success();
    let v = jsonl_result(&out);
    validate_schema(&v);
    assert_ok(&v);
    assert_counts_agree(&v);
    let flows = v["client"]["pattern"]["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 1000);
    let ids: std::collections::BTreeSet<u64> = flows.iter().map(|f| u(&f["id"])).collect();
    assert_eq!(ids.len(), 1000);
    for fl in flows {
        assert!(
            u(&fl["total"]["transactions_all"]) > 0,
            "idle flow {}",
            fl["id"]
        );
        assert_eq!(fl["end"]["kind"], "completed");
        assert!(fl["latency"].is_object());
    }
}

#[test]
fn background_streams_and_a_transaction_flow_are_reported_as_two_groups() {
    let _turn = one_at_a_time();
    let v = rr_json(&["--background", "20", "-l", "128K", "-t", "2"], 2.0);
    let bg = v["client"]["flows"].as_array().unwrap();
    assert_eq!(bg.len(), 20);
    assert!(bg.iter().all(|f| u(&f["total"]["bytes_all"]) > 0));
    assert_eq!(v["summary"]["directions"][0]["flows"], 20);
    assert_eq!(
        v["summary"]["directions"][0]["sender"]["bytes"],
        v["summary"]["directions"][0]["receiver"]["bytes"]
    );
    let rr = &v["client"]["pattern"];
    assert_eq!(rr["flows"].as_array().unwrap().len(), 1);
    assert!(u(&rr["total"]["transactions"]) > 0);
    assert_counts_agree(&v);
    // Kernel counters cover the test.
    assert!(v["client"]["counters"]["deltas"].is_object());
    // -R: the background group flows from the server.
    let v = rr_json(&["--background", "2", "-R", "-l", "128K", "-t", "1"], 1.0);
    assert_eq!(v["summary"]["directions"][0]["direction"], "s2c");
    assert_eq!(v["summary"]["directions"].as_array().unwrap().len(), 1);
    assert_counts_agree(&v);
}

#[test]
fn every_format_carries_the_rr_group() {
    let _turn = one_at_a_time();
    let out = run(
        &["rr", "-t", "1", "-i", "0.5", "--format", "jsonl"],
        deadline_for(1.0),
    );
    out.assert_success();
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert!(lines.iter().filter(|l| l["event"] == "rr_interval").count() >= 2);
    assert!(lines.last().unwrap()["result"]["client"]["pattern"].is_object());
    let out = run(&["rr", "-t", "1", "--format", "csv"], deadline_for(1.0));
    out.assert_success();
    assert!(
        out.stdout.lines().any(|l| l.contains(",rr_total,")),
        "{}",
        out.stdout
    );
    let out = run(&["rr", "-t", "1"], deadline_for(1.0));
    out.assert_success();
    assert!(out.stdout.contains("Latency: min"), "{}", out.stdout);
    assert!(out.stdout.contains("tx/sec"), "{}", out.stdout);
}

#[test]
fn every_wait_mode_keeps_client_and_server_counts_equal() {
    let _turn = one_at_a_time();
    for args in [
        &["--wait", "read"][..],
        &["--wait", "spin"],
        &["--wait", "read", "-F", "2"],
        &["--wait", "spin", "-F", "2", "--depth", "3"],
    ] {
        let mut all = vec!["-t", "1", "-i", "0"];
        all.extend_from_slice(args);
        let v = rr_json(&all, 1.0);
        assert_eq!(v["spec"]["pattern"]["wait"], args[1], "{args:?}");
        assert_eq!(v["client"]["pattern"]["wait"], args[1], "{args:?}");
        assert_eq!(v["server"]["pattern"]["wait"], args[1], "{args:?}");
        assert_counts_agree(&v);
        assert_monotone(&v["client"]["pattern"]["latency"]);
        assert!(
            u(&v["summary"]["pattern"]["client_transactions_all"]) > 100,
            "{args:?}"
        );
    }
    // The default (auto) is left out of the spec; each end reports what
    // it decided: read() when both ends share a CPU on loopback, epoll
    // otherwise.
    let v = rr_json(&["-t", "0.5", "-i", "0"], 0.5);
    assert!(v["spec"]["pattern"].get("wait").is_none(), "{}", v["spec"]);
    assert_eq!(v["client"]["pattern"]["wait"], "epoll");
    assert_eq!(v["server"]["pattern"]["wait"], "epoll");
    let cpu = usable_cpus()[0];
    let v = rr_json(
        &["-t", "0.5", "-i", "0", "-A", &format!("{cpu},{cpu}")],
        0.5,
    );
    assert_eq!(v["client"]["pattern"]["wait"], "read");
    assert_eq!(v["server"]["pattern"]["wait"], "read");
    assert_counts_agree(&v);
}

/// `-A n,m` pins the client's engine thread to n and the server's to m
/// (checked in /proc while the test runs); `xferlab server -A m` is the
/// server's own choice when the client names none.
#[test]
fn affinity_pins_the_data_threads_of_both_ends() {
    let _turn = one_at_a_time();
    let cpus = two_usable_cpus();
    let (c, s) = (cpus[0], *cpus.last().unwrap());
    let (cs, ss) = (c.to_string(), s.to_string());
    let srv = Server::start();
    let port = srv.port.to_string();
    let pin = format!("{c},{s}");
    let client = Proc::spawn(&[
        "rr",
        "127.0.0.1",
        "-p",
        &port,
        "-t",
        "2",
        "-i",
        "0",
        "-J",
        "-A",
        &pin,
    ]);
    assert_eq!(thread_cpus(client.pid(), "xfer-rr-0", &cs), cs);
    assert_eq!(thread_cpus(srv.pid(), "xfer-rr-srv-0", &ss), ss);
    let out = client.finish(deadline_for(2.0));
    out.assert_success();
    let v = parse_json(&out);
    validate_schema(&v);
    assert_eq!(v["spec"]["affinity"]["client"], c);
    assert_eq!(v["spec"]["affinity"]["server"], s);
    assert_counts_agree(&v);

    // The stream pattern's flow threads too, and the server's own -A.
    let srv = Server::start_with(&["-A", &cs]);
    let client = srv.spawn_client(&["-t", "2", "-i", "0", "-J", "-A", &ss]);
    assert_eq!(thread_cpus(client.pid(), "xfer-tx-0", &ss), ss);
    assert_eq!(thread_cpus(srv.pid(), "xfer-rx-0", &cs), cs);
    client.finish(deadline_for(2.0)).assert_success();

    // A CPU the server may not use is refused by the server, in one line.
    let port = srv.port.to_string();
    let out = run(
        &["rr", "127.0.0.1", "-p", &port, "-t", "1", "-A", ",1023"],
        Duration::from_secs(10),
    );
    out.assert_one_line_failure(1, &["server cannot run on CPU 1023", "may use CPUs"]);
}

/// `rr 127.0.0.1 -p <closed port> ARGS`: a one-line usage error, exit 2,
/// before anything touches the network.
fn rr_usage_error(args: &[&str], needles: &[&str]) {
    let port = free_port().to_string();
    let mut all = vec!["rr", "127.0.0.1", "-p", &port];
    all.extend_from_slice(args);
    let out = run(&all, Duration::from_secs(5));
    out.assert_one_line_failure(2, needles);
    assert!(out.stdout.is_empty(), "{}", out.describe());
}

#[test]
fn bad_rr_input_is_one_line_naming_the_flag() {
    rr_usage_error(&["-F", "0"], &["-F/--flows"]);
    rr_usage_error(&["-F", "100000"], &["-F/--flows"]);
    rr_usage_error(&["--depth", "0"], &["--depth"]);
    rr_usage_error(&["--depth", "-3"], &["--depth"]);
    rr_usage_error(
        &["--mode", "tcp-crr", "--depth", "4"],
        &["--depth", "tcp-crr"],
    );
    rr_usage_error(&["-r", "0"], &["-r/--request-size"]);
    rr_usage_error(
        &["--mode", "udp-rr", "-s", "70000"],
        &["-s/--response-size"],
    );
    rr_usage_error(&["--timeout", "0"], &["--timeout"]);
    rr_usage_error(&["--drop-request", "3"], &["--drop-request", "udp-rr"]);
    rr_usage_error(
        &["--mode", "udp-rr", "--drop-request", "0"],
        &["--drop-request"],
    );
    rr_usage_error(&["--background", "500"], &["--background"]);
    rr_usage_error(&["-P", "4"], &["-P/--parallel", "-F/--flows"]);
    rr_usage_error(&["-u"], &["-u/--udp", "udp-rr"]);
    rr_usage_error(&["-R"], &["-R/--bidir", "--background"]);
    rr_usage_error(&["-n", "1M"], &["-n/--bytes"]);
    rr_usage_error(&["--mode", "sctp"], &["sctp"]);
    rr_usage_error(&["--format", "iperf3-json"], &["iperf3-json"]);
    rr_usage_error(&["--wait", "sleep"], &["sleep", "--wait"]);
    rr_usage_error(&["-A", "x"], &["'x'", "N,M"]);
    rr_usage_error(&["-A", "0,"], &["'0,'", "N,M"]);
    rr_usage_error(&["-A", "5000"], &["-A/--affinity", "1023"]);
    rr_usage_error(&["-A", "1023"], &["cannot run on CPU 1023", "may use CPUs"]);
}

#[test]
fn rr_against_nothing_is_a_one_line_runtime_error() {
    let port = free_port().to_string();
    let out = run(
        &["rr", "127.0.0.1", "-p", &port, "-t", "1"],
        Duration::from_secs(10),
    );
    out.assert_one_line_failure(1, &["connect"]);
}
