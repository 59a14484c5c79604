//! `xferlab stream --dccp` end to end: the real binary against a real
//! `xferlab server` over loopback, xferlab's own DCCP over UDP on both
//! ends. What is checked is what the result documents for DCCP
//! (`DccpSample` in crates/xferlab-core/src/transport/dccp.rs, the `udp`
//! counters of its datagrams) and the one-line errors of bad input.
//!
//! Every receiver checks every payload byte against the pattern and the
//! header's sequence number; a flow that got a wrong byte ends aborted,
//! so `status: ok` means the data arrived as sent.

mod common;

use common::*;
use serde_json::Value;

/// Runs `stream --dccp -J ARGS` against `srv` and returns its `status:
/// ok` result, checked against docs/result-schema.json.
fn dccp_json(srv: &Server, args: &[&str], seconds: f64) -> Value {
    let mut all = vec!["--dccp"];
    all.extend_from_slice(args);
    let v = srv.json(&all, seconds);
    assert_eq!(v["spec"]["transport"], "dccp", "not a DCCP result");
    v
}

/// A sender's and its receiver's totals agree on what DCCP carried: every
/// data packet the receiving stack took is one the sender sent, and the
/// datagram counters say the same.
fn check_flow_pair(tx: &Value, rx: &Value) {
    let (t, r) = (&tx["total"], &rx["total"]);
    assert!(u(&t["bytes_all"]) > 0, "nothing sent: {t}");
    let sent = u(&t["dccp"]["data_sent"]);
    let got = u(&r["dccp"]["data_received"]);
    assert!(got > 0 && got <= sent, "sent {sent}, received {got}");
    assert_eq!(u(&r["udp"]["packets"]), got, "{r}");
    assert_eq!(u(&r["udp"]["duplicates"]), 0, "{r}");
    assert_eq!(
        u(&r["dccp"]["dropped_checksum"]) + u(&r["dccp"]["not_dccp"]),
        0,
        "{r}"
    );
    assert_eq!(rx["end"]["kind"], "completed", "{}", rx["end"]);
    assert_eq!(tx["end"]["kind"], "completed", "{}", tx["end"]);
}

#[test]
fn ccid2_stream_moves_checked_data_and_reports_cwnd_pipe_ssthresh_rtt() {
    let srv = Server::start();
    let v = dccp_json(&srv, &["--ccid", "2", "-t", "2", "-l", "1400"], 2.0);
    let tx = flows_in_role(&v, "client", "sender");
    let rx = flows_in_role(&v, "server", "receiver");
    assert_eq!((tx.len(), rx.len()), (1, 1));
    check_flow_pair(tx[0], rx[0]);
    let last = tx[0]["intervals"].as_array().unwrap().last().unwrap();
    let d = &last["dccp"];
    assert_eq!(d["ccid"], 2, "{d}");
    assert!(
        u(&d["cwnd"]) >= 1 && d["ssthresh"].is_u64() && d["pipe"].is_u64(),
        "{d}"
    );
    assert!(d["rtt_us"].as_f64().unwrap() > 0.0, "{d}");
    assert!(d["x_bps"].is_null(), "CCID2 has no X: {d}");
    // Acknowledgements flow back: one per Ack Ratio (2) data packets or
    // per delayed-ack timeout; fewer when a receiver takes a batch at
    // once, as one Ack Vector then covers the whole batch. Never one
    // without new data (plus the handshake's and the close's).
    let acks = u(&rx[0]["total"]["dccp"]["acks_sent"]);
    let data = u(&rx[0]["total"]["dccp"]["data_received"]);
    assert!(
        acks > 0 && acks <= data + 4,
        "{acks} acks for {data} data packets"
    );
}

#[test]
fn ccid3_reverse_reports_x_p_and_the_inter_packet_interval() {
    let srv = Server::start();
    let v = dccp_json(&srv, &["--ccid", "3", "-R", "-t", "2"], 2.0);
    let tx = flows_in_role(&v, "server", "sender");
    let rx = flows_in_role(&v, "client", "receiver");
    assert_eq!((tx.len(), rx.len()), (1, 1));
    check_flow_pair(tx[0], rx[0]);
    let last = tx[0]["intervals"].as_array().unwrap().last().unwrap();
    let d = &last["dccp"];
    assert_eq!(d["ccid"], 3, "{d}");
    let x = d["x_bps"].as_f64().unwrap();
    let t_ipi = d["t_ipi_us"].as_f64().unwrap();
    assert!(
        x > 0.0 && d["x_recv_bps"].is_f64() && d["p"].is_f64(),
        "{d}"
    );
    // t_ipi = s / X (RFC 5348 sec. 4.6), s the 1400-byte default.
    let want = 1400.0 * 8.0 / x * 1e6;
    assert!(
        (t_ipi - want).abs() <= want * 0.2 + 1.0,
        "t_ipi {t_ipi} us, s/X {want} us"
    );
    // A receiver reports no CCID state of its own (it only paces acks).
    let rd = &rx[0]["intervals"][0]["dccp"];
    assert!(rd["cwnd"].is_null() && rd["x_bps"].is_null(), "{rd}");
}

/// With -R the sender is the server: its CCID state reaches the client in
/// the server's result, and the human summary shows it for the direction,
/// as the TCP line shows the sending side's retransmits and RTT.
#[test]
fn reverse_human_summary_shows_the_servers_sending_ccid() {
    let srv = Server::start();
    let out = srv.client(
        &["--dccp", "--ccid", "3", "-R", "-t", "1"],
        deadline_for(1.0),
    );
    out.assert_success();
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("s2c sender DCCP CCID3: X "))
        .unwrap_or_else(|| panic!("no sender CCID line: {}", out.stdout));
    assert!(line.contains(" t_ipi ") && line.contains(" p "), "{line}");
}

#[test]
fn a_byte_count_is_sent_exactly_and_bidir_parallel_flows_each_connect() {
    let srv = Server::start();
    let v = dccp_json(&srv, &["-n", "2M", "-l", "1000"], 10.0);
    let tx = flows_in_role(&v, "client", "sender");
    // Whole datagrams, as for UDP: 2 MiB rounded up to 1000-byte ones.
    let datagrams = (2u64 << 20).div_ceil(1000);
    assert_eq!(u(&tx[0]["total"]["bytes_all"]), datagrams * 1000);
    assert_eq!(u(&tx[0]["total"]["dccp"]["data_sent"]), datagrams);

    let v = dccp_json(&srv, &["--bidir", "-P", "2", "-t", "1", "-b", "20M"], 1.0);
    for (tx_side, rx_side) in [("client", "server"), ("server", "client")] {
        let tx = flows_in_role(&v, tx_side, "sender");
        let rx = flows_in_role(&v, rx_side, "receiver");
        assert_eq!((tx.len(), rx.len()), (2, 2));
        for t in &tx {
            let r = rx
                .iter()
                .find(|r| r["id"] == t["id"])
                .expect("its receiver");
            check_flow_pair(t, r);
            // -b is the application's offer: 20 Mbit/s for 1 s at most.
            let bits = u(&t["total"]["bytes_all"]) * 8;
            assert!(bits <= 24_000_000, "{bits} bits offered at 20M");
        }
    }
}

/// Trains (`--gso`, the default of xferlab's DCCP over UDP): equal
/// packets leave in one UDP_SEGMENT send and arrive, on loopback, as one
/// UDP_GRO buffer that the receiver splits. Both ways at once, so data and
/// acknowledgements take that path; every payload byte is checked, and the
/// datagram counters agree with DCCP's. `--no-gso` goes packet by packet.
#[test]
fn gso_trains_and_gro_buffers_carry_checked_data_both_ways() {
    let srv = Server::start();
    let v = dccp_json(&srv, &["--bidir", "-t", "2", "-l", "1400"], 2.0);
    assert_eq!(v["spec"]["knobs"]["gso"], true, "{}", v["spec"]);
    let plain = dccp_json(&srv, &["--no-gso", "-t", "0.5", "-l", "1400"], 0.5);
    assert_eq!(plain["spec"]["knobs"]["gso"], false, "{}", plain["spec"]);
    for (tx_side, rx_side) in [("client", "server"), ("server", "client")] {
        let tx = flows_in_role(&v, tx_side, "sender");
        let rx = flows_in_role(&v, rx_side, "receiver");
        assert_eq!((tx.len(), rx.len()), (1, 1));
        check_flow_pair(tx[0], rx[0]);
        // More than a window's worth: the trains were cut and reassembled
        // in the right places for a whole slow start and beyond.
        assert!(
            u(&rx[0]["total"]["dccp"]["data_received"]) > 10_000,
            "{}",
            rx[0]["total"]
        );
    }
}

/// The result records the buffers a DCCP flow runs with: its path's 64
/// MiB receive and 16 MiB send buffers (the kernel reports them doubled),
/// read back after they were set, with trains (`--gso`, whose UDP
/// receivers get 4 MiB) and without. Needs CAP_NET_ADMIN (SO_RCVBUFFORCE),
/// as the lab has; elsewhere net.core.rmem_max caps them.
#[test]
fn the_result_records_the_buffers_the_flows_run_with() {
    if !is_root() {
        eprintln!("skipped: SO_RCVBUFFORCE needs root");
        return;
    }
    let srv = Server::start();
    for extra in [&[][..], &["--no-gso"][..]] {
        let mut args = vec!["-t", "0.5", "-l", "1400"];
        args.extend_from_slice(extra);
        let v = dccp_json(&srv, &args, 0.5);
        for (side, role) in [("client", "sender"), ("server", "receiver")] {
            let s = &flows_in_role(&v, side, role)[0]["socket"];
            assert_eq!(u(&s["rcvbuf"]), 128 << 20, "{role} {extra:?}: {s}");
            assert_eq!(u(&s["sndbuf"]), 32 << 20, "{role} {extra:?}: {s}");
        }
    }
}

/// SafeUDP's part of a flow's `dccp` section.
fn safeudp(v: &Value) -> &Value {
    let su = &v["dccp"]["safeudp"];
    assert!(su.is_object(), "no safeudp section: {v}");
    su
}

#[test]
fn safeudp_by_name_sends_at_the_offer_and_reports_a_clear_path() {
    let srv = Server::start();
    let v = dccp_json(
        &srv,
        &[
            "--ccid",
            "safeudp",
            "--on-congestion",
            "step-down",
            "-b",
            "20M",
            "-t",
            "2",
            "-l",
            "1200",
        ],
        2.0,
    );
    let tx = flows_in_role(&v, "client", "sender");
    let rx = flows_in_role(&v, "server", "receiver");
    check_flow_pair(tx[0], rx[0]);
    assert_eq!(v["spec"]["knobs"]["dccp"]["ccid"], 248, "{}", v["spec"]);
    assert_eq!(v["spec"]["knobs"]["dccp"]["on_congestion"], "step-down");
    let total = &tx[0]["total"];
    assert_eq!(total["dccp"]["ccid"], 248, "{total}");
    let su = safeudp(total);
    // Nothing congests an idle loopback: no notice, no enforcement, the
    // application keeps its -b rate.
    assert_eq!(u(&total["dccp"]["dropped_by_ccid"]), 0, "{total}");
    assert_eq!(su["network"], "clear", "{su}");
    assert!(su["enforced_bps"].is_null(), "{su}");
    assert_eq!(u(&su["events"]["persistent_network"]), 0, "{su}");
    for iv in tx[0]["intervals"].as_array().unwrap() {
        let su = safeudp(iv);
        assert_eq!(su["app_rate_bps"].as_f64(), Some(20e6), "{su}");
    }
    let last = tx[0]["intervals"].as_array().unwrap().last().unwrap();
    let offered = safeudp(last)["offered_bps"].as_f64().unwrap();
    assert!((offered - 20e6).abs() < 2e6, "offered {offered} for -b 20M");
}

/// A receive buffer of a few datagrams on a 300 Mbit/s offer: the
/// receiving socket drops, its SO_RXQ_OVFL count rides in option 120, and
/// the sender files the losses under the end host, not the network.
#[test]
fn a_tiny_receive_buffer_is_end_host_congestion() {
    let srv = Server::start();
    let v = dccp_json(
        &srv,
        &[
            "--ccid", "248", "-b", "300M", "-w", "4K", "-t", "2", "-l", "1200",
        ],
        2.0,
    );
    let tx = flows_in_role(&v, "client", "sender");
    let rx = flows_in_role(&v, "server", "receiver");
    let host_drops = u(&rx[0]["total"]["udp"]["host_drops"]);
    assert!(host_drops > 100, "the receiver dropped only {host_drops}");
    let su = safeudp(&tx[0]["total"]);
    let (host, network) = (u(&su["host_losses"]), u(&su["network_losses"]));
    assert!(
        host > 10 * network && host * 2 > host_drops,
        "{host} end-host and {network} network losses for {host_drops} socket drops: {su}"
    );
    assert!(u(&su["events"]["onset_end_host"]) >= 1, "{su}");
    // End-host congestion is the receiver's to fix: no enforcement.
    assert_eq!(u(&su["events"]["enforcing"]), 0, "{su}");
    assert_eq!(u(&tx[0]["total"]["dccp"]["dropped_by_ccid"]), 0);
}

#[test]
fn a_refused_service_code_is_one_line_and_exit_1() {
    let srv = Server::start();
    let out = srv.client(
        &["--dccp", "--dccp-service", "7", "-t", "1"],
        deadline_for(1.0),
    );
    out.assert_one_line(&["refused service code 7", "--dccp-service"]);
    assert_eq!(out.code, Some(1), "{}", out.describe());
}

#[test]
fn bad_dccp_flags_are_one_line_and_exit_2() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["--dccp", "--ccid", "4"], &["--ccid 4", "--ccid 2"]),
        (&["-u", "--ccid", "3"], &["--ccid", "--dccp"]),
        (&["--dccp", "-l", "8"], &["-l/--length", "DCCP"]),
        (&["--dccp", "-Z"], &["do not apply to DCCP"]),
        (
            &["--dccp", "--gso", "--dccp-carrier", "ip"],
            &["--gso", "leave out --gso"],
        ),
        (&["-u", "--no-gso"], &["--no-gso is for DCCP"]),
        (&["--dccp", "--gso", "--no-gso"], &["--no-gso", "--gso"]),
        (
            &["--dccp", "--ccid", "tcp"],
            &["'tcp' is not a CCID", "248"],
        ),
        (
            &["--dccp", "--on-congestion", "ignore", "-b", "1M"],
            &["--on-congestion", "--ccid 248"],
        ),
        (
            &["--dccp", "--ccid", "safeudp", "--on-congestion", "tfrc"],
            &["--on-congestion", "-b RATE"],
        ),
        (
            &["-u", "--on-congestion", "tfrc", "-b", "1M"],
            &["--on-congestion", "--dccp"],
        ),
        (
            &[
                "--dccp",
                "--ccid",
                "248",
                "--on-congestion",
                "halve",
                "-b",
                "1M",
            ],
            &["halve", "step-down"],
        ),
        (
            &["--dccp", "--dccp-server-stack", "kernel"],
            &["no UDP encapsulation", "--dccp-carrier ip"],
        ),
        (
            &["--dccp", "--dccp-stack", "kernel", "--dccp-carrier", "ip"],
            &["leave out --dccp-carrier"],
        ),
        (
            &["--dccp", "--dccp-carrier", "tcp"],
            &["'tcp'", "--dccp-carrier"],
        ),
    ];
    for (args, needles) in cases {
        let mut all = vec!["stream"];
        all.extend_from_slice(args);
        let out = run(&all, deadline_for(1.0));
        out.assert_one_line_failure(2, needles);
    }
    // A peer that is not DCCP: a stock iperf3 server has none.
    let out = run(
        &["stream", "--dccp", "iperf3://127.0.0.1:1"],
        deadline_for(1.0),
    );
    out.assert_one_line_failure(1, &["no DCCP"]);
}

/// `--dccp-stack kernel` where the kernel has no DCCP (Linux 6.16 and
/// later, like this project's hosts) is one line naming the cause and
/// both ways out; where it has DCCP, the kernel's stack runs the test.
/// The lab VM runs kernel DCCP itself (tests/dccp_vm.rs).
#[test]
fn kernel_stack_without_kernel_dccp_is_one_line_naming_the_fix() {
    let srv = Server::start();
    let args = ["--dccp", "--dccp-stack", "kernel", "-t", "1"];
    // SAFETY: a plain socket call; the descriptor is closed at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DCCP, libc::IPPROTO_DCCP) };
    if fd >= 0 {
        // SAFETY: fd is the socket just opened, closed once.
        unsafe { libc::close(fd) };
        let v = dccp_json(&srv, &args[1..], 1.0);
        assert_eq!(v["spec"]["knobs"]["dccp"]["stack"], "kernel");
        return;
    }
    let out = srv.client(&args, deadline_for(1.0));
    out.assert_one_line(&["has no DCCP sockets", "--dccp-stack xferlab", "lab VM"]);
    assert_eq!(out.code, Some(1), "{}", out.describe());
}

/// Every IPv4 protocol-33 packet on loopback while `f` runs, checked on
/// its own: the DCCP checksum over the RFC 4340 sec. 9.1 pseudo-header
/// (addresses, protocol 33, DCCP length) and the part of the packet its
/// CsCov names. Returns (packets with a good checksum, bad ones, packet
/// types seen as a bit set).
fn capture_dccp_over_ip(f: impl FnOnce()) -> (u64, u64, u32) {
    capture_dccp_over(false, f)
}

/// As [`capture_dccp_over_ip`], over IPv6 (loopback: both addresses ::1;
/// a raw IPv6 socket delivers the DCCP header without the IP header).
fn capture_dccp_over_ipv6(f: impl FnOnce()) -> (u64, u64, u32) {
    capture_dccp_over(true, f)
}

fn capture_dccp_over(v6: bool, f: impl FnOnce()) -> (u64, u64, u32) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: plain socket calls on a descriptor this function owns.
    let fd = unsafe { libc::socket(family, libc::SOCK_RAW, libc::IPPROTO_DCCP) };
    assert!(
        fd >= 0,
        "a raw socket for IP protocol 33 needs root (CAP_NET_RAW): {}",
        std::io::Error::last_os_error()
    );
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 100_000,
    };
    // SAFETY: tv outlives the call, and the length is its size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    let stop = AtomicBool::new(false);
    let (good, bad, types) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let (mut good, mut bad, mut types) = (0u64, 0u64, 0u32);
            let mut buf = vec![0u8; 70_000];
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: buf is writable for buf.len() bytes.
                let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
                if n <= 0 {
                    continue;
                }
                let ip = &buf[..n as usize];
                // IPv4: the header is there, its addresses at 12..20. IPv6:
                // no header; source and destination are ::1 (loopback).
                let loopback6 = std::net::Ipv6Addr::LOCALHOST.octets();
                let (addrs, d): (Vec<u8>, &[u8]) = if v6 {
                    ([loopback6, loopback6].concat(), ip)
                } else {
                    let ihl = usize::from(ip[0] & 0xf) * 4;
                    (ip[12..20].to_vec(), &ip[ihl..])
                };
                if d.len() < 12 {
                    bad += 1;
                    continue;
                }
                let offset = usize::from(d[4]) * 4;
                let cscov = usize::from(d[5] & 0xf);
                let covered = if cscov == 0 {
                    d.len()
                } else {
                    (offset + (cscov - 1) * 4).min(d.len())
                };
                // The pseudo-header's protocol and length (RFC 4340 9.1:
                // IPv6's length is 32 bits, summed as two 16-bit words).
                let mut acc: u64 = 33 + (d.len() as u64 >> 16) + (d.len() as u64 & 0xffff);
                for w in addrs.chunks(2).chain(d[..covered].chunks(2)) {
                    acc += u64::from(w[0]) << 8 | u64::from(*w.get(1).unwrap_or(&0));
                }
                while acc > 0xffff {
                    acc = (acc & 0xffff) + (acc >> 16);
                }
                if acc == 0xffff {
                    good += 1;
                } else {
                    bad += 1;
                }
                types |= 1 << ((d[8] >> 1) & 0xf);
            }
            (good, bad, types)
        });
        // Stops the reader also when `f` panics (the scope would wait for
        // it forever).
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let stop_on_exit = Stop(&stop);
        f();
        drop(stop_on_exit);
        reader.join().unwrap()
    });
    // SAFETY: the reader thread has ended; fd is closed once.
    unsafe { libc::close(fd) };
    (good, bad, types)
}

/// `--dccp-carrier ip`: xferlab's DCCP directly in IP protocol 33 on raw
/// sockets, both ends on this host (no kernel DCCP here to answer them),
/// CCID2 forward with two flows (each raw socket sees every protocol-33
/// packet on loopback and must keep only its own connection's) and CCID3
/// reversed. An independent capture checks that the packets are on the
/// wire as protocol 33 with RFC 4340's pseudo-header checksum, the
/// handshake included.
#[test]
fn ip_carrier_runs_ccid2_and_ccid3_as_ip_protocol_33() {
    let srv = Server::start();
    let mut results = Vec::new();
    let (good, bad, types) = capture_dccp_over_ip(|| {
        for args in [
            &["--ccid", "2", "-P", "2", "-t", "2", "-l", "1400"][..],
            &["--ccid", "3", "-R", "-t", "2", "-l", "1400"][..],
        ] {
            let mut all = vec!["--dccp-carrier", "ip"];
            all.extend_from_slice(args);
            results.push(dccp_json(&srv, &all, 2.0));
        }
    });
    for (v, ccid, tx_side, rx_side) in [
        (&results[0], 2, "client", "server"),
        (&results[1], 3, "server", "client"),
    ] {
        assert_eq!(v["spec"]["knobs"]["dccp"]["carrier"], "ip", "{}", v["spec"]);
        let tx = flows_in_role(v, tx_side, "sender");
        let rx = flows_in_role(v, rx_side, "receiver");
        assert_eq!(tx.len(), rx.len());
        for t in &tx {
            let r = rx.iter().find(|r| r["id"] == t["id"]).unwrap();
            check_flow_pair(t, r);
            assert_eq!(t["total"]["dccp"]["ccid"], ccid, "{}", t["total"]);
        }
    }
    let last = flows_in_role(&results[1], "server", "sender")[0]["intervals"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["dccp"]
        .clone();
    assert!(last["x_bps"].as_f64().unwrap() > 0.0, "{last}");
    // Request (0), Response (1), Data (2), Ack (3), DataAck (4), Close (6)
    // or CloseReq (5), Reset (7).
    assert!(
        good > 1000,
        "{good} protocol-33 packets with a good checksum"
    );
    assert_eq!(bad, 0, "{bad} packets with a bad checksum ({good} good)");
    for t in [0, 1, 3, 4] {
        assert!(types & 1 << t != 0, "no packet of type {t}: {types:#b}");
    }
}

/// The raw carrier over IPv6 (::1): the flow runs to its end and every
/// packet on the wire carries RFC 4340's checksum over the IPv6
/// pseudo-header.
#[test]
fn ip_carrier_runs_over_ipv6() {
    let srv = Server::start();
    let port = srv.port.to_string();
    let mut out = None;
    let (good, bad, types) = capture_dccp_over_ipv6(|| {
        out = Some(run(
            &[
                "stream",
                "::1",
                "-p",
                &port,
                "-J",
                "--dccp",
                "--dccp-carrier",
                "ip",
                "--ccid",
                "2",
                "-t",
                "2",
                "-l",
                "1400",
            ],
            deadline_for(2.0),
        ));
    });
    let out = out.unwrap();
    out.assert_success();
    let v = parse_json(&out);
    assert_ok(&v);
    assert_eq!(v["spec"]["knobs"]["dccp"]["carrier"], "ip");
    let tx = flows_in_role(&v, "client", "sender");
    let rx = flows_in_role(&v, "server", "receiver");
    assert_eq!((tx.len(), rx.len()), (1, 1));
    check_flow_pair(tx[0], rx[0]);
    assert!(
        good > 500,
        "{good} protocol-33 packets over IPv6 with a good checksum"
    );
    assert_eq!(bad, 0, "{bad} packets with a bad checksum ({good} good)");
    for t in [0, 1, 3, 4] {
        assert!(types & 1 << t != 0, "no packet of type {t}: {types:#b}");
    }
}
