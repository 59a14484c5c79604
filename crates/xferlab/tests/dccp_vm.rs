//! Kernel DCCP (`--dccp-stack kernel`) in the lab VM's 6.1 guest, the one
//! kernel here that still has DCCP: an xferlab client against a real
//! `xferlab server` over the guest's loopback with CCID2 and CCID3 (and
//! CCID3 reversed, and four flows at once both ways), the CCID state the
//! kernel reports in the `dccp` section, and a refused service code as one
//! clear line. One boot for all of it.

mod common;
mod labvm_support;

use std::time::Duration;

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

#[test]
#[cfg_attr(labvm_skip, ignore = "XFERLAB_LABVM=skip: boots the lab VM (QEMU)")]
fn kernel_dccp_ccid2_and_ccid3_and_a_refused_service_code() {
    let _vm = vm_lock();
    let r = run_vm(
        &["--extra-modules", "dccp_ipv4", "--timeout", "240"],
        SCRIPT,
        Duration::from_secs(1200),
    );
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
    assert_no_qemu_left();
}
