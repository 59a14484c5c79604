//! How the rr group reads in human output (the machine formats carry the
//! result types as they are).

use std::fmt::Write as _;

use xferlab_core::latency::LatencySummary;
use xferlab_core::result::TestResult;
use xferlab_core::rr::report::{RrInterval, RrSideReport};
use xferlab_core::rr::RrWait;
use xferlab_core::spec::{Limit, TestSpec};

/// Per-flow lines are printed for at most this many flows.
const MAX_FLOW_LINES: usize = 16;

/// The test in one line.
pub fn describe(spec: &TestSpec) -> String {
    let Some(rr) = spec.pattern.rr() else {
        return "rr".into();
    };
    let limit = match spec.limit {
        Limit::Duration { seconds } => format!("{seconds} s"),
        Limit::Bytes { bytes } => format!("{bytes} bytes"),
        Limit::Open => "until Ctrl-C".into(),
    };
    let omit = if spec.omit_s > 0.0 {
        format!(" after a {} s warm-up (omitted)", spec.omit_s)
    } else {
        String::new()
    };
    let mut s = format!(
        "rr {}, {} flow{}, {}-byte requests, {}-byte responses",
        rr.mode.label(),
        rr.flows,
        if rr.flows == 1 { "" } else { "s" },
        rr.request_wire(),
        rr.response_wire(),
    );
    if !rr.mode.per_connection() {
        write!(s, ", depth {}", rr.depth).ok();
    }
    if rr.mode.times_out() {
        write!(s, ", timeout {} ms", rr.timeout_s * 1e3).ok();
    }
    write!(s, ", {limit}{omit}").ok();
    if spec.parallel > 0 {
        let who = match spec.direction {
            xferlab_core::spec::Direction::Forward => "client sends",
            xferlab_core::spec::Direction::Reverse => "server sends",
            xferlab_core::spec::Direction::Bidir => "each way",
        };
        write!(
            s,
            "; background: {} TCP stream flow{} ({who})",
            spec.parallel,
            if spec.parallel == 1 { "" } else { "s" }
        )
        .ok();
    }
    if let Some(n) = rr.drop_request {
        write!(
            s,
            "; diagnostic: the server drops request #{n} of every flow"
        )
        .ok();
    }
    s
}

/// One live line: every rr flow summed over the interval just ended.
pub fn interval_line(iv: &RrInterval) -> String {
    let mut s = format!(
        "[ RR] {:>6.2}-{:<6.2} sec {:>10} tx {:>12.1} tx/sec",
        iv.start_s, iv.end_s, iv.transactions, iv.per_second
    );
    if let Some(m) = iv.mean_latency_us {
        write!(s, "  mean {}", us(m)).ok();
    }
    if iv.timed_out > 0 || iv.failed > 0 {
        write!(s, "  timed out {} failed {}", iv.timed_out, iv.failed).ok();
    }
    if iv.omitted {
        s.push_str("  (omitted)");
    }
    s
}

fn us(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.2} ms", v / 1e3)
    } else {
        format!("{v:.1} us")
    }
}

fn latency_line(l: &LatencySummary) -> String {
    format!(
        "min {} mean {} stddev {} p50 {} p90 {} p99 {} p99.9 {} max {}",
        us(l.min_us),
        us(l.mean_us),
        us(l.stddev_us),
        us(l.p50_us),
        us(l.p90_us),
        us(l.p99_us),
        us(l.p999_us),
        us(l.max_us)
    )
}

/// The rr part of the final summary.
pub fn summary(r: &TestResult) -> String {
    let mut s = String::new();
    let Some(c) = r.client.rr() else {
        return s;
    };
    flow_lines(&mut s, c);
    let t = &c.total;
    writeln!(
        s,
        "[ RR] {:>6.2}-{:<6.2} sec {:>10} tx {:>12.1} tx/sec  client ({} flows)",
        t.start_s,
        t.end_s,
        t.transactions,
        t.per_second,
        c.flows.len()
    )
    .ok();
    if let Some(sum) = r.summary.rr() {
        let server = sum
            .server_transactions_all
            .map_or("server report missing".to_string(), |n| {
                format!("server answered {n}")
            });
        writeln!(
            s,
            "Transactions: client completed {} ({server}), timed out {}, failed {}, late replies {}",
            sum.client_transactions_all, sum.timed_out, sum.failed, sum.late
        )
        .ok();
    }
    if let Some(l) = &c.latency {
        writeln!(s, "Latency: {}", latency_line(l)).ok();
    }
    if let Some(l) = &c.connect {
        writeln!(s, "Connect: {}", latency_line(l)).ok();
    }
    let server_wait = r.server.as_ref().and_then(|s| s.rr()).and_then(|s| s.wait);
    if let (Some(cw), Some(sw)) = (c.wait, server_wait) {
        writeln!(
            s,
            "Waiting: client {}, server {}",
            wait_label(cw),
            wait_label(sw)
        )
        .ok();
    }
    if let Some(dropped) = r
        .server
        .as_ref()
        .and_then(|s| s.rr())
        .map(|s| s.total.dropped)
    {
        if dropped > 0 {
            writeln!(
                s,
                "Server dropped {dropped} requests on purpose (--drop-request)"
            )
            .ok();
        }
    }
    s
}

fn wait_label(w: RrWait) -> &'static str {
    match w {
        RrWait::Auto => "auto",
        RrWait::Epoll => "sleeps in epoll_wait()",
        RrWait::Read => "sleeps in read()",
        RrWait::Spin => "spins",
    }
}

fn flow_lines(s: &mut String, c: &RrSideReport) {
    if c.flows.len() > MAX_FLOW_LINES {
        return;
    }
    for f in &c.flows {
        let lat = f.latency.as_ref().map_or(String::new(), |l| {
            format!("  mean {} p99 {}", us(l.mean_us), us(l.p99_us))
        });
        writeln!(
            s,
            "[{:>3}] {:>6.2}-{:<6.2} sec {:>10} tx {:>12.1} tx/sec{lat}",
            f.id + 1,
            f.total.start_s,
            f.total.end_s,
            f.total.transactions,
            f.total.per_second
        )
        .ok();
    }
}
