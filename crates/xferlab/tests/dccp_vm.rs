//! Kernel DCCP (`--dccp-stack kernel`) in the lab VM's 6.1 guest, the one
//! kernel here that still has DCCP: an xferlab client against a real
//! `xferlab server` over the guest's loopback with CCID2 and CCID3 (and
//! CCID3 reversed, and four flows at once both ways), the CCID state the
//! kernel reports in the `dccp` section, and a refused service code as one
//! clear line. Then interop: the host (no kernel DCCP, so nothing here
//! resets its packets) runs xferlab's own DCCP over raw IP through a TAP
//! link against the guest's kernel DCCP server, CCID2 and CCID3 each way
//! of the data, and CCID 248 (SafeUDP), which the kernel refuses in
//! feature negotiation; and the other role, the guest kernel's DCCP
//! client against the host's `xferlab server` (xferlab's DCCP over raw
//! IP). One boot for all of it.

mod common;
mod labvm_support;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{run, Output, Server};
use labvm_support::*;
use serde_json::Value;

/// The guest's part: load DCCP, start a server, run the client cases.
/// Each case prints `rc=N`, then its JSON and its stderr as sections.
const SCRIPT: &str = r#"
echo '== modprobe =='
modprobe dccp_ipv4; echo rc=$?
ip link set lo up
xferlab server >/tmp/server.log 2>&1 &
# Wait for the control port (5290 = 0x14AA) to listen.
i=0
while ! grep -q ':14AA 0000.*:0000 0A' /proc/net/tcp /proc/net/tcp6 && [ $i -lt 200 ]; do
  sleep 0.05; i=$((i+1))
done
run() {
  name=$1; shift
  echo "== $name =="
  xferlab stream 127.0.0.1 --dccp --dccp-stack kernel -t 3 -l 1400 -b 20M -J "$@" >/tmp/out.json 2>/tmp/err.txt
  echo rc=$?
  echo "== $name-json =="; cat /tmp/out.json
  echo "== $name-err =="; cat /tmp/err.txt
}
run ccid2 --ccid 2
run ccid3 --ccid 3
run ccid3-reverse --ccid 3 -R
run bidir-p2 --ccid 2 --bidir -P 2
echo '== service =='
xferlab stream 127.0.0.1 --dccp --dccp-stack kernel --dccp-service 7 -t 1 >/dev/null 2>/tmp/err.txt
echo rc=$?
cat /tmp/err.txt
echo '== tap =='
ip link set eth0 up && ip addr add 10.250.33.2/24 dev eth0; echo rc=$?
# The host's turn: its clients run against this server now; it releases
# the guest by connecting to port 5299.
timeout 150 nc -l -p 5299 </dev/null >/dev/null
echo released=$?
# The other role: this kernel's DCCP client against the host's
# `xferlab server`, whose DCCP is xferlab's own over raw IP.
echo '== kernel-client =='
xferlab stream 10.250.33.1 -p HOST_PORT --dccp --dccp-stack kernel --dccp-server-stack xferlab --dccp-carrier ip --ccid 3 -t 2 -l 1400 -b 20M -J >/tmp/out.json 2>/tmp/err.txt
echo rc=$?
echo '== kernel-client-json =='; cat /tmp/out.json
echo '== kernel-client-err =='; cat /tmp/err.txt
echo '== server =='
cat /tmp/server.log
"#;

fn json(out: &str, name: &str) -> Value {
    let text = section(out, &format!("{name}-json"));
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| {
        panic!(
            "{name}: no JSON ({e}); stderr: {}",
            section(out, &format!("{name}-err"))
        )
    });
    common::validate_schema(&v);
    v
}

/// The `dccp` sections of every interval of `side`'s sending flow.
fn sender_intervals<'a>(v: &'a Value, side: &str) -> Vec<&'a Value> {
    let flow = &v[side]["flows"][0];
    assert_eq!(flow["role"], "sender", "{side}");
    flow["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["dccp"])
        .collect()
}

/// The highest X the kernel's CCID3 sender reported in any interval. Not
/// the last one: read after the sender stopped, X has been halved by the
/// no-feedback timer every RTO (~2 ms here) since (the kernel client's
/// last reading once: 18 kbit/s, after 44 Mbit/s the interval before).
/// The least top X, bit/s, that a kernel CCID3 sender with a working
/// feedback loop shows in 2 s under TCG, even on a loaded CI runner; the
/// broken loop (no Timestamp Echo) held it at 7.2 kbit/s. Not a speed
/// target: see where it is used.
const X_FLOOR: f64 = 1e6;

fn top_x(intervals: &[&Value]) -> f64 {
    intervals
        .iter()
        .filter_map(|d| d["x_bps"].as_f64())
        .fold(0.0, f64::max)
}

/// The host end of the TAP link (lab/vm/run --tap) and the guest's.
const HOST_CIDR: &str = "10.250.33.1/24";
const GUEST: &str = "10.250.33.2";

/// The host's interop cases against the guest's kernel DCCP server: each
/// `(name, extra args)`, run as `xferlab stream GUEST --dccp
/// --dccp-carrier ip --dccp-server-stack kernel -t 2 -l 1400 -b 20M -J`.
const INTEROP: &[(&str, &[&str])] = &[
    ("ccid2", &["--ccid", "2"]),
    ("ccid3", &["--ccid", "3"]),
    ("ccid2-reverse", &["--ccid", "2", "-R"]),
    ("ccid3-reverse", &["--ccid", "3", "-R"]),
    ("safeudp", &["--ccid", "248"]),
];

/// Waits until the guest's server answers on the TAP link (its address
/// comes up once the loopback cases are done), runs [`INTEROP`], then
/// releases the guest. None when the guest never came up (the VM's own
/// result says why).
fn host_turn(vm_done: impl Fn() -> bool) -> Option<Vec<Output>> {
    let control: SocketAddr = format!("{GUEST}:5290").parse().unwrap();
    let give_up = Instant::now() + Duration::from_secs(600);
    loop {
        if vm_done() || Instant::now() > give_up {
            return None;
        }
        // Only through the TAP device: before lab/vm/run makes it, the
        // address is routed to the default gateway, which may answer.
        let route = std::process::Command::new("ip")
            .args(["-o", "route", "get", GUEST])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        if route.contains("dev xlvm")
            && TcpStream::connect_timeout(&control, Duration::from_millis(300)).is_ok()
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let outs = INTEROP
        .iter()
        .map(|(_, extra)| {
            let mut args = vec![
                "stream",
                GUEST,
                "--dccp",
                "--dccp-carrier",
                "ip",
                "--dccp-server-stack",
                "kernel",
                "-t",
                "2",
                "-l",
                "1400",
                "-b",
                "20M",
                "-J",
            ];
            args.extend_from_slice(extra);
            run(&args, Duration::from_secs(60))
        })
        .collect();
    let release: SocketAddr = format!("{GUEST}:5299").parse().unwrap();
    for _ in 0..20 {
        if TcpStream::connect_timeout(&release, Duration::from_millis(500)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Some(outs)
}

#[test]
#[cfg_attr(labvm_skip, ignore = "XFERLAB_LABVM=skip: boots the lab VM (QEMU)")]
fn kernel_dccp_ccid2_and_ccid3_and_a_refused_service_code() {
    let _vm = vm_lock();
    assert!(
        common::is_root(),
        "needs root: the TAP link (lab/vm/run --tap) and raw IP sockets"
    );
    // The host's server for the guest's kernel client (its DCCP is
    // xferlab's, over raw IP: the host has no kernel DCCP).
    let server = Server::start();
    let script = SCRIPT.replace("HOST_PORT", &server.port.to_string());
    let (r, host) = std::thread::scope(|s| {
        let vm = s.spawn(|| {
            run_vm(
                &[
                    "--extra-modules",
                    "dccp_ipv4",
                    "--tap",
                    HOST_CIDR,
                    "--timeout",
                    "240",
                ],
                &script,
                Duration::from_secs(1200),
            )
        });
        let host = host_turn(|| vm.is_finished());
        (vm.join().unwrap(), host)
    });
    assert_eq!(r.code, 0, "guest script failed");
    assert_eq!(field(section(&r.out, "modprobe"), "rc"), Some("0"));

    for (name, ccid, sender, receiver) in [
        ("ccid2", 2u64, "client", "server"),
        ("ccid3", 3, "client", "server"),
        ("ccid3-reverse", 3, "server", "client"),
    ] {
        let rc = field(section(&r.out, name), "rc");
        assert_eq!(
            rc,
            Some("0"),
            "{name}: {}",
            section(&r.out, &format!("{name}-err"))
        );
        let v = json(&r.out, name);
        assert_eq!(v["status"], "ok", "{name}");
        assert_eq!(v["spec"]["knobs"]["dccp"]["stack"], "kernel");
        assert_eq!(v["spec"]["knobs"]["dccp"]["ccid"], ccid);
        let sent = &v["client"]["flows"][0]["total"];
        assert!(
            sent["bits_per_second"].as_f64().unwrap() > 0.0,
            "{name}: {sent}"
        );
        let rx = &v[receiver]["flows"][0]["total"];
        assert!(rx["udp"]["packets"].as_u64().unwrap() > 0, "{name}: {rx}");
        assert_eq!(rx["dccp"]["stack"], "kernel", "{name}: {rx}");
        let intervals = sender_intervals(&v, sender);
        assert!(!intervals.is_empty());
        for d in &intervals {
            assert_eq!(d["stack"], "kernel", "{name}: {d}");
            assert_eq!(d["ccid"], ccid, "{name}: the kernel's TX CCID: {d}");
        }
        let last = intervals.last().unwrap();
        if ccid == 3 {
            // tfrc_tx_info, read from the kernel every interval.
            for key in [
                "x_bps",
                "x_recv_bps",
                "x_calc_bps",
                "p",
                "rtt_us",
                "t_rto_us",
                "t_ipi_us",
            ] {
                assert!(last[key].is_number(), "{name}: no {key} in {last}");
            }
            assert!(last["x_bps"].as_f64().unwrap() > 0.0, "{last}");
            assert!(last["rtt_us"].as_f64().unwrap() > 0.0, "{last}");
        } else {
            // Linux 6.1's CCID2 exposes no state per socket.
            assert!(last.get("cwnd").is_none(), "{last}");
            assert!(last["data_sent"].as_u64().unwrap() > 0, "{last}");
        }
    }

    // Four connections through one session's listener, both directions.
    let v = json(&r.out, "bidir-p2");
    assert_eq!(v["status"], "ok");
    for side in ["client", "server"] {
        let flows = v[side]["flows"].as_array().unwrap();
        assert_eq!(flows.len(), 4, "{side}");
        for f in flows {
            assert!(f["total"]["bytes"].as_u64().unwrap() > 0, "{side}: {f}");
            assert_eq!(f["total"]["dccp"]["stack"], "kernel");
        }
    }

    let service = section(&r.out, "service");
    assert_ne!(field(service, "rc"), Some("0"), "{service}");
    let lines: Vec<&str> = service
        .lines()
        .filter(|l| l.contains("refused service code 7"))
        .collect();
    assert_eq!(lines.len(), 1, "one line names the refused code: {service}");
    assert!(lines[0].contains("leave out --dccp-service"), "{service}");

    // Interop: the host's userspace DCCP over raw IP, the guest's kernel.
    assert_eq!(field(section(&r.out, "tap"), "rc"), Some("0"));
    let host = host.expect("the guest's server never answered on the TAP link");
    for ((name, _), out) in INTEROP.iter().zip(&host) {
        if *name == "safeudp" {
            // Linux knows no CCID 248: its feature negotiation resets the
            // handshake (Mandatory Error), and we say so in one line.
            out.assert_one_line_failure(1, &["refused CCID 248", "--ccid 2"]);
            continue;
        }
        assert_eq!(out.code, Some(0), "{name}: {}", out.describe());
        let v = common::parse_json(out);
        common::validate_schema(&v);
        assert_eq!(v["status"], "ok", "{name}");
        let (sender, receiver) = if name.ends_with("reverse") {
            ("server", "client")
        } else {
            ("client", "server")
        };
        let tx = &v[sender]["flows"][0]["total"];
        let rx = &v[receiver]["flows"][0]["total"];
        assert_eq!(v["client"]["flows"][0]["total"]["dccp"]["stack"], "xferlab");
        assert_eq!(v["server"]["flows"][0]["total"]["dccp"]["stack"], "kernel");
        // Every datagram was checked byte for byte by its receiver
        // (status ok), and at least 90 % of what was sent arrived: at -b
        // 20M about 3570 in 2 s, at least 1000 (5.6 Mbit/s). The kernel's
        // CCID3 sender (-R) too, and its X at its top at least 1 Mbit/s:
        // with the attach answer padded to -l it delivered 3567-3575 in
        // five runs of 2 s (19.9-20.0 Mbit/s, X at the end 28-54 Mbit/s,
        // host load 3.2 on 2 cores); with the 1-byte answer 1354-3573
        // (7.6-20.0 Mbit/s), and before the Timestamp Echo 3 datagrams
        // with X at 7.2 kbit/s (docs/dccp.md). The X floor is what tells
        // the feedback loop from that failure (140 times its X), not a
        // speed: a CI runner under load saw the kernel's X top out at
        // 3.6 Mbit/s, since TCG slows the kernel's timer-paced sending
        // most, so 5 Mbit/s failed a working link.
        let sent = tx["udp"]["packets"].as_u64().unwrap();
        let got = rx["udp"]["packets"].as_u64().unwrap();
        assert!(
            got >= 1000 && got <= sent && got * 10 >= sent * 9,
            "{name}: sent {sent}, received {got}"
        );
        if *name == "ccid3-reverse" {
            let x = top_x(&sender_intervals(&v, sender));
            assert!(
                x >= X_FLOOR,
                "{name}: the kernel's X reached only {x} bit/s"
            );
        }
        let ccid = if name.starts_with("ccid2") { 2 } else { 3 };
        assert_eq!(tx["dccp"]["ccid"], ccid, "{name}: {tx}");
    }
    assert_eq!(field(section(&r.out, "tap"), "released"), Some("0"));

    // The guest kernel's DCCP client against xferlab's server stack on
    // the host: the attach in band, accepted by the host (`path::
    // listen_in_band`), and the kernel's CCID3 sending to xferlab's
    // CCID3 receiver, every datagram checked byte for byte.
    let name = "kernel-client";
    assert_eq!(
        field(section(&r.out, name), "rc"),
        Some("0"),
        "{name}: {}; host server: {}",
        section(&r.out, &format!("{name}-err")),
        server.log()
    );
    let v = json(&r.out, name);
    assert_eq!(v["status"], "ok", "{name}");
    let tx = &v["client"]["flows"][0]["total"];
    let rx = &v["server"]["flows"][0]["total"];
    assert_eq!(tx["dccp"]["stack"], "kernel", "{name}: {tx}");
    assert_eq!(rx["dccp"]["stack"], "xferlab", "{name}: {rx}");
    assert_eq!(tx["dccp"]["ccid"], 3, "{name}: {tx}");
    let sent = tx["udp"]["packets"].as_u64().unwrap();
    let got = rx["udp"]["packets"].as_u64().unwrap();
    // 200 datagrams: 60 times what the broken feedback loop delivered,
    // and within what a loaded runner's X (above) can send in 2 s.
    assert!(
        got >= 200 && got <= sent && got * 10 >= sent * 9,
        "{name}: sent {sent}, received {got}"
    );
    let x = top_x(&sender_intervals(&v, "client"));
    assert!(
        x >= X_FLOOR,
        "{name}: the kernel's X reached only {x} bit/s"
    );
    drop(server);
    assert_no_qemu_left();
}
