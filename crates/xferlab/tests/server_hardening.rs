//! A public `xferlab server` against an adversarial client (issue 15):
//! sessions abandoned after a UDP welcome, connections that trickle or
//! idle, UDP attaches and iperf3 stream hellos from a third address, an
//! idle iperf3 UDP setup, oversized results, tests that would make the
//! server keep too many intervals, iperf3 `--sctp`; and the operator's
//! limits: handshake deadlines, the front door's flags, budgets (rr
//! tests included) enforced while tests run. Each test drives the real
//! server binary over loopback.

mod common;

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const IPERF3: &str = "iperf3";

/// A TCP connection to `to` from the loopback address `src`.
fn tcp_from(src: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::V4(SocketAddrV4::new(src, 0)).into())
        .unwrap_or_else(|e| panic!("bind {src}: {e}"));
    s.connect_timeout(&to.into(), Duration::from_secs(3))
        .unwrap_or_else(|e| panic!("connect {src} -> {to}: {e}"));
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// A UDP socket on the loopback address `src`.
fn udp_from(src: Ipv4Addr) -> UdpSocket {
    let s = UdpSocket::bind((src, 0)).unwrap_or_else(|e| panic!("bind {src}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s
}

/// The spec a real client sends for `args` (from its JSON result).
fn spec_of(srv: &Server, args: &[&str]) -> Value {
    let v = srv.json(args, 0.2);
    v["spec"].clone()
}

/// An xferlab control connection from `src` that has sent a hello for
/// `spec` and read the server's preamble; returns it and the welcome.
fn hello_from(src: Ipv4Addr, srv: &Server, spec: &Value) -> (TcpStream, Value) {
    let hello = json!({
        "type": "hello",
        "software": {"name": "xferlab", "version": "0.1.0", "protocol": PROTOCOL},
        "spec": spec,
    });
    let mut s = tcp_from(src, srv.addr());
    let mut msg = preamble(PROTOCOL, 1).to_vec();
    msg.extend(frame(hello.to_string().as_bytes()));
    send(&mut s, &msg);
    assert_eq!(read_n(&mut s, 8), preamble(PROTOCOL, 1));
    let welcome = read_json_frame(&mut s);
    assert_eq!(welcome["type"], "welcome", "{welcome}\n{}", srv.log());
    (s, welcome)
}

/// A UDP attach datagram for flow `flow` of the session in `welcome`.
fn attach_datagram(welcome: &Value, flow: u32) -> Vec<u8> {
    let hex = welcome["session"].as_str().unwrap();
    let mut out = preamble(PROTOCOL, 2).to_vec();
    out.extend((0..16).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()));
    out.extend(flow.to_be_bytes());
    out
}

/// Whether the server still holds this connection open (nothing to read,
/// no EOF).
fn still_open(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let r = (&*s).read(&mut [0u8; 1]);
    matches!(r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap_or_else(|e| panic!("process {pid} is gone: {e}"))
        .count()
}

fn threads_named(pid: u32, name: &str) -> usize {
    thread_names(pid).iter().filter(|n| *n == name).count()
}

/// Waits (bounded) until `done` holds, polling /proc-style state that
/// announces nothing.
fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    t0.elapsed()
}

/// Lifts this test process's open-file limit to at least `n`.
fn raise_nofile(n: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let rl = getrlimit(Resource::Nofile);
    let want = rl
        .maximum
        .map_or(n, |m| m.min(n.max(rl.current.unwrap_or(0))));
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(want),
            maximum: rl.maximum,
        },
    )
    .expect("raise RLIMIT_NOFILE");
    assert!(
        want >= n,
        "the open-file hard limit ({:?}) is below the {n} this test needs: raise it (ulimit -Hn)",
        rl.maximum
    );
}

// ------------------------------------------------------------- item 1

/// A client that says hello for `-u -P 128` and vanishes after the
/// welcome leaves no thread or socket behind once its session has ended
/// (it used to hold 128 threads and 128 sockets for 10 s, beyond
/// --max-sessions).
#[test]
fn an_abandoned_udp_session_holds_no_thread_or_socket() {
    let srv = Server::start_with(&["--max-sessions", "2"]);
    let mut spec = spec_of(&srv, &["-u", "-b", "10M", "-t", "0.2"]);
    spec["parallel"] = json!(128);
    let fds_before = open_fds(srv.pid());
    for round in 1..=3 {
        let (s, welcome) = hello_from(Ipv4Addr::LOCALHOST, &srv, &spec);
        assert_eq!(welcome["udp_ports"].as_array().unwrap().len(), 128);
        assert!(
            threads_named(srv.pid(), "xfer-udp-attach") <= 1,
            "one attach thread per session, not per flow: {:?}",
            thread_names(srv.pid())
        );
        drop(s);
        srv.wait_for_log(": ended:", round, Duration::from_secs(5));
        let took = wait_until(
            "the abandoned session's attach thread and sockets released",
            Duration::from_secs(2),
            || {
                threads_named(srv.pid(), "xfer-udp-attach") == 0
                    && open_fds(srv.pid()) <= fds_before + 2
            },
        );
        assert!(took < Duration::from_secs(2), "round {round}: {took:?}");
    }
}

// ------------------------------------------------------------- item 2

/// A connection trickling a byte now and then is closed when its
/// 5 s to say what it is are up, however it spaces its bytes.
#[test]
fn the_preamble_deadline_is_total_not_per_read() {
    let srv = Server::start();
    let mut s = raw_connect(srv.addr());
    s.set_read_timeout(Some(Duration::from_millis(1200)))
        .unwrap();
    // An iperf3 cookie's first bytes, one every 1.2 s (each read well
    // inside 5 s): the old per-read timeout never fired.
    let t0 = Instant::now();
    let mut sink = [0u8; 16];
    for b in b"abcdefghijklmnop".iter() {
        if std::io::Write::write_all(&mut s, &[*b]).is_err() {
            break;
        }
        match s.read(&mut sink) {
            Ok(0) => break,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Ok(n) => panic!("the server answered {n} bytes to half a cookie"),
            Err(_) => assert!(
                t0.elapsed() < Duration::from_secs(8),
                "a trickling connection still open after {:?}",
                t0.elapsed()
            ),
        }
    }
    let closed = t0.elapsed();
    assert!(
        (Duration::from_millis(4500)..Duration::from_secs(7)).contains(&closed),
        "closed after {closed:?}, not at its 5 s deadline"
    );
}

/// 1,000 connections that are idle or trickle bytes, from several
/// addresses, do not keep a real client waiting: it is welcomed within
/// 1 s and its test completes.
#[test]
fn a_client_is_served_within_a_second_next_to_1000_slow_connections() {
    raise_nofile(4096);
    let srv = Server::start();
    // What a 0.5 s test costs from start to end on this machine now (a
    // process start, the handshake, the results): the bound below is
    // that plus a second, not a figure that a slow host misses.
    let base = srv.client(&["-J", "-t", "0.5"], deadline_for(0.5));
    assert_eq!(base.code, Some(0), "{}", base.describe());
    let mut held = Vec::new();
    for i in 0..1000u32 {
        let src = Ipv4Addr::new(127, 0, 1, 1 + (i % 8) as u8);
        let mut s = tcp_from(src, srv.addr());
        if i % 2 == 1 {
            // Slow: the start of a preamble, the rest never comes.
            send(&mut s, b"XF");
        }
        held.push(s);
    }
    // The server has taken them all in (a control connection made after
    // them is answered, and its listener accepts in order).
    let spec = spec_of(&srv, &["-t", "0.2"]);
    let t0 = Instant::now();
    let (s, _welcome) = hello_from(Ipv4Addr::LOCALHOST, &srv, &spec);
    let welcomed = t0.elapsed();
    drop(s);
    assert!(
        welcomed < Duration::from_secs(1),
        "welcomed after {welcomed:?} next to 1000 slow connections\n{}",
        srv.log()
    );
    let out = srv.client(&["-J", "-t", "0.5"], deadline_for(0.5));
    assert!(
        out.code == Some(0) && out.elapsed < base.elapsed + Duration::from_secs(1),
        "{:?} without the slow connections\n{}\n--- server log ---\n{}",
        base.elapsed,
        out.describe(),
        srv.log()
    );
    // Every one of the 1000 is still open: nothing was shed for them.
    let open = held.iter().filter(|s| still_open(s)).count();
    assert_eq!(open, 1000, "the server closed some slow connections early");
}

/// More pending connections from one address than the per-address limit:
/// the oldest are closed to make room, the log says so (once, not per
/// connection), and a client from another address is not delayed.
#[test]
fn the_per_address_pending_limit_closes_the_oldest_and_logs_it() {
    raise_nofile(4096);
    let srv = Server::start();
    let src = Ipv4Addr::new(127, 0, 2, 1);
    let mut first = tcp_from(src, srv.addr());
    let rest: Vec<TcpStream> = (0..300).map(|_| tcp_from(src, srv.addr())).collect();
    // The oldest was closed for the newer ones.
    assert!(
        reads_to_eof(&mut first),
        "the oldest pending connection was kept"
    );
    srv.wait_for_log("the per-address limit", 1, Duration::from_secs(3));
    let log = srv.log();
    assert!(
        log.matches("the per-address limit").count() == 1,
        "one line per limit and period, not per connection:\n{log}"
    );
    assert!(log.contains("127.0.2.1"), "{log}");
    let t0 = Instant::now();
    let spec = spec_of(&srv, &["-t", "0.2"]);
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(spec["transport"], "tcp");
    // The newest 256 from that address are still waiting to speak.
    let open = rest
        .iter()
        .rev()
        .take(256)
        .filter(|s| still_open(s))
        .count();
    assert_eq!(open, 256);
}

/// The front door's limits are the operator's: --preamble-timeout,
/// --max-pending-per-client and --max-pending change when a silent
/// connection is closed and how many are held, and the log names the
/// flag that closed one.
#[test]
fn front_door_limits_are_flags() {
    let srv = Server::start_with(&[
        "--preamble-timeout",
        "1",
        "--max-pending-per-client",
        "4",
        "--max-pending",
        "6",
    ]);
    // Silent: closed after 1 s, not 5.
    let mut silent = raw_connect(srv.addr());
    silent
        .set_read_timeout(Some(Duration::from_secs(4)))
        .unwrap();
    let t0 = Instant::now();
    assert!(reads_to_eof(&mut silent), "a silent connection was kept");
    let closed = t0.elapsed();
    assert!(
        (Duration::from_millis(800)..Duration::from_millis(2500)).contains(&closed),
        "closed after {closed:?}, not at its 1 s --preamble-timeout"
    );
    // Per address: the 5th from one address closes the 1st.
    let a = Ipv4Addr::new(127, 0, 3, 1);
    let mut from_a: Vec<TcpStream> = (0..5).map(|_| tcp_from(a, srv.addr())).collect();
    assert!(reads_to_eof(&mut from_a[0]), "the oldest of 5 was kept");
    srv.wait_for_log("--max-pending-per-client", 1, Duration::from_secs(3));
    assert!(from_a[1..].iter().all(still_open));
    // In all: 4 from a, 3 from b is 7 > 6: the oldest (from a) goes.
    let b = Ipv4Addr::new(127, 0, 3, 2);
    let from_b: Vec<TcpStream> = (0..3).map(|_| tcp_from(b, srv.addr())).collect();
    srv.wait_for_log("--max-pending)", 1, Duration::from_secs(3));
    from_a[1].set_nonblocking(false).unwrap();
    assert!(reads_to_eof(&mut from_a[1]), "the oldest of 7 was kept");
    assert!(from_b.iter().all(still_open));
    // Talking promptly still works.
    srv.json(&["-t", "0.2"], 0.2);
}

/// Bad front-door limits are refused with one line naming the flag.
#[test]
fn bad_front_door_limits_are_refused_in_one_line() {
    for (args, needle) in [
        (
            &["--preamble-timeout", "0"][..],
            "--preamble-timeout must be above 0",
        ),
        (&["--preamble-timeout", "2h"][..], "at most 1h"),
        (
            &["--max-pending", "0"][..],
            "--max-pending must be at least 1",
        ),
        (
            &["--max-pending-per-client", "0"][..],
            "--max-pending-per-client must be at least 1",
        ),
        (
            &["--max-handshakes", "0"][..],
            "--max-handshakes must be at least 1",
        ),
        (
            &["--max-handshakes-per-client", "0"][..],
            "--max-handshakes-per-client must be at least 1",
        ),
        (
            &["--ipv6-prefix", "0"][..],
            "--ipv6-prefix must be 1 to 128",
        ),
        (
            &["--ipv6-prefix", "129"][..],
            "--ipv6-prefix must be 1 to 128",
        ),
    ] {
        let mut all = vec!["server", "-p", "0", "--iperf3-port", "off"];
        all.extend_from_slice(args);
        run(&all, Duration::from_secs(5)).assert_one_line_failure(2, &[needle]);
    }
}

/// Sends `opening` on a fresh connection, then trickles one byte of a
/// message that never ends every 1.5 s; returns how long after the
/// opening the server closed the connection.
fn trickle_after(srv: &Server, opening: &[u8]) -> Duration {
    let mut s = raw_connect(srv.addr());
    send(&mut s, opening);
    let t0 = Instant::now();
    let mut reader = s.try_clone().unwrap();
    reader
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let writer = std::thread::spawn(move || {
        // A length prefix of 1000 bytes, then the bytes one by one.
        let mut bytes = vec![0, 0, 3, 232];
        bytes.extend([b'{'; 1000]);
        for b in bytes {
            if std::io::Write::write_all(&mut s, &[b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(1500));
            if t0.elapsed() > Duration::from_secs(20) {
                return;
            }
        }
    });
    assert!(reads_to_eof(&mut reader), "still open after 20 s");
    let closed = t0.elapsed();
    drop(reader);
    writer.join().unwrap();
    closed
}

/// The handshake after the opening bytes has 10 s in total, however its
/// bytes are spaced: an xferlab hello and iperf3 parameters trickled a
/// byte every 1.5 s are cut at 10 s.
#[test]
fn handshake_deadlines_are_total_not_per_read() {
    let srv = Server::start();
    let xferlab = {
        let srv = &srv;
        move || trickle_after(srv, &preamble(PROTOCOL, 1))
    };
    let iperf3 = || trickle_after(&srv, b"hardeningtrickleaaaaaaaaaaaaaaaaaaaa\0");
    let (x, i) = std::thread::scope(|sc| {
        let x = sc.spawn(xferlab);
        let i = sc.spawn(iperf3);
        (x.join().unwrap(), i.join().unwrap())
    });
    for (who, closed) in [("xferlab hello", x), ("iperf3 parameters", i)] {
        assert!(
            (Duration::from_millis(9500)..Duration::from_millis(12500)).contains(&closed),
            "{who} trickled: closed after {closed:?}, not at the 10 s handshake deadline\n{}",
            srv.log()
        );
    }
}

/// --max-duration holds a running test, not only its request: a
/// byte-limited test (which says no duration) still running at
/// --max-duration is cut 25 s later (the client's 10 s attach wait, which
/// its last attach reply may need before it can start, and the 15 s
/// grace), and the client is told why.
#[test]
fn max_duration_cuts_a_byte_limited_test_while_it_runs() {
    // 100 GB do not fit in 1 s of loopback: the server's senders stop at
    // the cap (1 s) plus the grace (1 s), the client's flow ends with
    // them, and the result says why.
    let srv = Server::start_with(&["--max-duration", "1"]);
    let out = srv.client(&["-n", "100G", "-R"], Duration::from_secs(40));
    assert!(
        out.elapsed < Duration::from_secs(8),
        "{}\n{}",
        out.describe(),
        srv.log()
    );
    assert!(
        out.stdout
            .contains("the server's senders stopped 1 s after"),
        "{}",
        out.describe()
    );
    srv.wait_for_log("done: sent", 1, Duration::from_secs(5));
}

/// A client that asks for a short reverse test, attaches at once and
/// never says stop gets data for the planned length plus a second, not
/// for the session's watchdog (attach wait + length + 15 s): the server's
/// senders stop by themselves, and the session still ends on its own
/// deadline. Issue 34, item 3 (before: 80 s of data for a 5 s test).
#[test]
fn max_duration_bounds_what_the_server_sends_to_a_client_that_never_stops() {
    let srv = Server::start_with(&["--max-duration", "2"]);
    let spec = spec_of(&srv, &["-t", "2", "-R"]);
    let (mut ctl, welcome) = hello_from(Ipv4Addr::LOCALHOST, &srv, &spec);
    let mut data = raw_connect(srv.addr());
    let mut attach = preamble(PROTOCOL, 2).to_vec();
    attach.extend_from_slice(&attach_datagram(&welcome, 0)[8..]);
    send(&mut data, &attach);
    assert_eq!(read_n(&mut data, 1), [0], "attach accepted");
    assert_eq!(read_json_frame(&mut ctl)["type"], "start");
    let started = Instant::now();
    // Read until the data stops (no byte for 1.5 s) or the connection
    // ends. Unpaced: a paced sender's socket buffers (MBs) would drain
    // long after it stopped writing.
    data.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let (mut bytes, mut last) = (0u64, started);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match data.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                bytes += n as u64;
                last = Instant::now();
            }
            Err(_) => break,
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "data still flowing after 30 s ({bytes} bytes)\n{}",
            srv.log()
        );
    }
    let sent_for = last.duration_since(started);
    // 2 s planned + 1 s grace.
    assert!(
        (Duration::from_secs(2)..Duration::from_millis(3500)).contains(&sent_for),
        "the server sent {bytes} bytes for {sent_for:?}\n{}",
        srv.log()
    );
    // Its own report says why, once the client does stop.
    send(&mut ctl, &frame(br#"{"type":"stop"}"#));
    let results = read_json_frame(&mut ctl);
    assert_eq!(results["type"], "results", "{results}");
    let warnings = results["report"]["warnings"].to_string();
    assert!(warnings.contains("--max-duration"), "{warnings}");
}

// ---------------------------------------------------------- items 3, 4

/// A UDP attach datagram with a valid token from another address than
/// the control connection's gets nothing (the server would otherwise
/// send a reverse test's data there); from the control peer's address it
/// is accepted. `--udp-any-peer` lifts the check.
#[test]
fn udp_flows_attach_only_from_the_control_peers_address() {
    let srv = Server::start();
    let spec = spec_of(&srv, &["-u", "-b", "10M", "-t", "0.2", "-R"]);
    let (_ctl, welcome) = hello_from(Ipv4Addr::LOCALHOST, &srv, &spec);
    let port = welcome["udp_ports"][0].as_u64().unwrap() as u16;
    let to = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let dgram = attach_datagram(&welcome, 0);
    let stranger = udp_from(Ipv4Addr::new(127, 0, 0, 2));
    stranger.send_to(&dgram, to).unwrap();
    let client = udp_from(Ipv4Addr::LOCALHOST);
    client.send_to(&dgram, to).unwrap();
    let mut reply = [0u8; 8];
    let (n, from) = client
        .recv_from(&mut reply)
        .expect("the control peer's own attach is answered");
    assert_eq!((&reply[..n], from), (&[0u8][..], to));
    // The stranger's datagram came first on the same socket: had it been
    // taken, the client's would not have been.
    stranger.set_nonblocking(true).unwrap();
    assert!(
        stranger.recv_from(&mut reply).is_err(),
        "a stranger's attach was answered"
    );

    let open = Server::start_with(&["--udp-any-peer"]);
    let (_ctl, welcome) = hello_from(Ipv4Addr::LOCALHOST, &open, &spec);
    let port = welcome["udp_ports"][0].as_u64().unwrap() as u16;
    let stranger = udp_from(Ipv4Addr::new(127, 0, 0, 2));
    stranger
        .send_to(&attach_datagram(&welcome, 0), (Ipv4Addr::LOCALHOST, port))
        .unwrap();
    let (n, _) = stranger
        .recv_from(&mut reply)
        .expect("--udp-any-peer takes an attach from anywhere");
    assert_eq!(&reply[..n], [0]);
}

/// An iperf3 control connection from `src` that is waiting for its UDP
/// streams (`parallel` of them, reverse).
fn iperf3_udp_waiting(src: Ipv4Addr, srv: &Server, parallel: u32) -> TcpStream {
    let mut s = tcp_from(src, srv.addr());
    // 36 characters of a-z2-7 and a NUL, one cookie per address.
    let mut cookie = format!("{:a<36}", "hardeningudp").into_bytes();
    cookie[35] = b'a' + src.octets()[3] % 26;
    cookie.push(0);
    send(&mut s, &cookie);
    assert_eq!(read_n(&mut s, 1), [9], "PARAM_EXCHANGE");
    let params = json!({"udp": true, "omit": 0, "time": 1, "parallel": parallel,
                        "len": 1400, "bandwidth": 1_000_000, "reverse": true,
                        "client_version": "3.21"});
    send(&mut s, &frame(params.to_string().as_bytes()));
    assert_eq!(read_n(&mut s, 1), [10], "CREATE_STREAMS\n{}", srv.log());
    s
}

/// iperf3's UDP streams open with 4 bytes to the server's port; one from
/// a third address is not taken as the test's stream (and gets no
/// data), the client's own is.
#[test]
fn iperf3_udp_streams_open_only_from_the_control_peers_address() {
    let srv = Server::start();
    let _ctl = iperf3_udp_waiting(Ipv4Addr::LOCALHOST, &srv, 1);
    let stranger = udp_from(Ipv4Addr::new(127, 0, 0, 3));
    stranger
        .send_to(&[0x39, 0x38, 0x37, 0x36], srv.addr())
        .unwrap();
    let client = udp_from(Ipv4Addr::LOCALHOST);
    client
        .send_to(&[0x39, 0x38, 0x37, 0x36], srv.addr())
        .unwrap();
    let mut reply = [0u8; 2048];
    let (n, _) = client
        .recv_from(&mut reply)
        .expect("the client's own stream hello is answered");
    assert_eq!(&reply[..n], b"6789");
    stranger.set_nonblocking(true).unwrap();
    assert!(
        stranger.recv_from(&mut reply).is_err(),
        "a stranger's stream hello was answered"
    );
}

/// An idle iperf3 client waiting for 128 UDP streams does not hold back
/// another client's UDP test on the same address.
#[test]
fn an_idle_iperf3_udp_setup_does_not_block_other_clients() {
    let srv = Server::start();
    let _idle = iperf3_udp_waiting(Ipv4Addr::new(127, 0, 0, 4), &srv, 128);
    let port = srv.port.to_string();
    let t0 = Instant::now();
    let out = Proc::spawn_program(
        IPERF3,
        &["-c", "127.0.0.1", "-p", &port, "-u", "-b", "10M", "-t", "1"],
    )
    .finish(Duration::from_secs(15));
    assert!(
        out.code == Some(0) && t0.elapsed() < Duration::from_secs(4),
        "a 1 s iperf3 -u test next to an idle UDP setup: {:?}\n{}\n--- server log ---\n{}",
        t0.elapsed(),
        out.describe(),
        srv.log()
    );
}

// ------------------------------------------------------------- item 5

/// An iperf3 client's results may be no larger than its test's streams
/// need: a 1 MiB results message for a one-stream test is refused on its
/// length, before the server buffers (or parses) any of it.
#[test]
fn iperf3_results_larger_than_the_test_needs_are_refused_at_once() {
    let srv = Server::start();
    let mut s = raw_connect(srv.addr());
    let cookie = b"hardeningresultsaaaaaaaaaaaaaaaaaaaa\0";
    send(&mut s, cookie);
    assert_eq!(read_n(&mut s, 1), [9]);
    let params = json!({"tcp": true, "omit": 0, "time": 1, "parallel": 1, "len": 131072});
    send(&mut s, &frame(params.to_string().as_bytes()));
    assert_eq!(read_n(&mut s, 1), [10], "CREATE_STREAMS");
    let mut data = raw_connect(srv.addr());
    send(&mut data, cookie);
    assert_eq!(read_n(&mut s, 2), [1, 2], "TEST_START, TEST_RUNNING");
    send(&mut s, &[4]); // TEST_END
    assert_eq!(read_n(&mut s, 1), [13], "EXCHANGE_RESULTS");
    // Only the length prefix of a 1 MiB message.
    send(&mut s, &(1u32 << 20).to_be_bytes());
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let answer = read_n(&mut s, 9);
    assert_eq!(answer[0], 0xfe, "SERVER_ERROR (-2)");
    let code = i32::from_be_bytes(answer[1..5].try_into().unwrap());
    assert_eq!(code, 117, "IERECVRESULTS");
    srv.wait_for_log("exceeds the limit", 1, Duration::from_secs(3));
}

/// The same for xferlab's results frame: its limit follows the test's
/// flows and intervals, so a one-flow 0.3 s test's client cannot make
/// the server take an 8 MiB frame.
#[test]
fn xferlab_results_larger_than_the_test_needs_are_refused_at_once() {
    let srv = Server::start();
    let spec = spec_of(&srv, &["-t", "0.3"]);
    let (mut s, welcome) = hello_from(Ipv4Addr::LOCALHOST, &srv, &spec);
    let mut data = raw_connect(srv.addr());
    let mut attach = preamble(PROTOCOL, 2).to_vec();
    attach.extend_from_slice(&attach_datagram(&welcome, 0)[8..]);
    send(&mut data, &attach);
    assert_eq!(read_n(&mut data, 1), [0], "attach accepted");
    assert_eq!(read_json_frame(&mut s)["type"], "start");
    send(&mut s, &frame(br#"{"type":"stop"}"#));
    drop(data);
    let len = u32::from_be_bytes(read_n(&mut s, 4).try_into().unwrap()) as usize;
    let results: Value = serde_json::from_slice(&read_n(&mut s, len)).unwrap();
    assert_eq!(results["type"], "results");
    send(&mut s, &(8u32 << 20).to_be_bytes());
    let err = read_json_frame(&mut s);
    assert_eq!(err["code"], "bad_message", "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains(&(8u32 << 20).to_string()),
        "{err}"
    );
}

/// Reads a results frame (larger than the handshake's frames).
fn read_results_frame(s: &mut TcpStream) -> Value {
    let len = u32::from_be_bytes(read_n(s, 4).try_into().unwrap()) as usize;
    serde_json::from_slice(&read_n(s, len)).unwrap()
}

/// Peak resident memory of a process (VmHWM), bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// Issue 34, item 2: a hello that plans 8,192 rr flows and then does
/// nothing cannot make the server take a 64 MiB results frame (its limit
/// follows what the test did: about 8 MiB), and a frame within that limit
/// packed with empty strings is refused before it is parsed, so the
/// server's memory does not grow ten times the frame (before: 659 MB for
/// 64 MiB).
#[test]
fn results_frames_cost_what_the_test_did_not_what_it_planned() {
    let srv = Server::start();
    let mut spec = rr_json(&srv, &["--mode", "tcp-crr", "-F", "2"], 0.2)["spec"].clone();
    spec["pattern"]["flows"] = json!(8192);
    spec["limit"] = json!({"duration": {"seconds": 1.0}});
    let (mut s, _) = hello_from(Ipv4Addr::LOCALHOST, &srv, &spec);
    assert_eq!(read_json_frame(&mut s)["type"], "start");
    send(&mut s, &frame(br#"{"type":"stop"}"#));
    let results = read_results_frame(&mut s);
    assert_eq!(results["type"], "results", "{results}");
    let before = peak_rss(srv.pid());
    // 8 MiB of empty strings: within the limit, refused before parsing.
    let mut flood = br#"{"type":"results","report":{"warnings":["#.to_vec();
    while flood.len() < 8 << 20 {
        flood.extend_from_slice(br#""","#);
    }
    flood.extend_from_slice(br#""""]}}"#);
    send(&mut s, &frame(&flood));
    let err = read_json_frame(&mut s);
    assert!(
        err["message"]
            .as_str()
            .is_some_and(|m| m.contains("refused before parsing")),
        "{err}"
    );
    let grew = peak_rss(srv.pid()).saturating_sub(before);
    assert!(
        grew < 4 * flood.len() as u64,
        "the server's peak memory grew {grew} bytes for an {} byte frame",
        flood.len()
    );
    // And 64 MiB is refused on its length prefix.
    let (mut s, _) = hello_from(Ipv4Addr::LOCALHOST, &srv, &spec);
    assert_eq!(read_json_frame(&mut s)["type"], "start");
    send(&mut s, &frame(br#"{"type":"stop"}"#));
    assert_eq!(read_results_frame(&mut s)["type"], "results");
    send(&mut s, &(64u32 << 20).to_be_bytes());
    let err = read_json_frame(&mut s);
    assert_eq!(err["code"], "bad_message", "{err}");
}

/// A test whose flows x intervals would exceed the server's budget
/// (here: a byte-limited --bidir -P 4 -i 0.05 test, which may last the
/// server's hour) has the server keep its own intervals coarser; the
/// client keeps its own.
#[test]
fn the_server_keeps_its_intervals_within_a_budget() {
    let srv = Server::start();
    // Paced to about 1 s: 1 MB per flow at 8 Mbit/s.
    let v = srv.json(
        &[
            "-n",
            "4M",
            "--bidir",
            "-P",
            "4",
            "--fq-rate",
            "8M",
            "-i",
            "0.05",
        ],
        2.0,
    );
    // The longest-lived flow of each side (receivers end last: a paced
    // sender's bytes leave its socket buffer over the whole second).
    let most = |side: &str| -> usize {
        flows(&v, side)
            .iter()
            .map(|f| f["intervals"].as_array().unwrap().len())
            .max()
            .unwrap()
    };
    let (n_client, n_server) = (most("client"), most("server"));
    assert!(
        n_client >= 10 && n_server * 4 <= n_client,
        "server kept {n_server} intervals per flow, the client {n_client}"
    );
}

// ------------------------------------------------------------- item 6

/// `iperf3 --sctp` is refused as iperf3 refuses what it does not
/// implement, not run as TCP.
#[test]
fn iperf3_sctp_is_refused_as_not_implemented() {
    let srv = Server::start();
    let port = srv.port.to_string();
    let out = Proc::spawn_program(
        IPERF3,
        &["-c", "127.0.0.1", "-p", &port, "--sctp", "-t", "1"],
    )
    .finish(Duration::from_secs(10));
    assert_ne!(out.code, Some(0), "{}", out.describe());
    assert!(
        format!("{}{}", out.stdout, out.stderr).contains("not implemented"),
        "{}",
        out.describe()
    );
    srv.wait_for_log("SCTP (--sctp) is not served", 1, Duration::from_secs(3));
}

// ------------------------------------------------------------ budgets

/// Each budget refuses what exceeds it with one line that names the
/// limit, for xferlab and iperf3 clients alike.
#[test]
fn budgets_refuse_with_one_line_naming_the_limit() {
    let srv = Server::start_with(&[
        "--max-rate",
        "50M",
        "--max-flows",
        "4",
        "--min-interval",
        "0.5",
    ]);
    for (args, needle) in [
        (
            &["-u", "-b", "100M", "-t", "1"][..],
            "--max-rate of 50.0 Mbits/sec",
        ),
        (&["-P", "5", "-t", "1"][..], "--max-flows of 4"),
        (&["-i", "0.1", "-t", "1"][..], "--min-interval of 0.5 s"),
    ] {
        let out = srv.client(args, deadline_for(1.0));
        out.assert_one_line_failure(1, &[needle]);
    }
    let port = srv.port.to_string();
    let out = Proc::spawn_program(
        IPERF3,
        &[
            "-c",
            "127.0.0.1",
            "-p",
            &port,
            "-u",
            "-b",
            "100M",
            "-t",
            "1",
        ],
    )
    .finish(Duration::from_secs(10));
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr
            .contains("total required bandwidth is larger than server limit")
            || out
                .stdout
                .contains("total required bandwidth is larger than server limit"),
        "{}",
        out.describe()
    );
}

/// --max-rate is enforced while the test runs: what the server sends is
/// paced to it, however fast the client could receive.
#[test]
fn max_rate_paces_what_the_server_sends() {
    let srv = Server::start_with(&["--max-rate", "40M"]);
    let v = srv.json(&["-R", "-P", "2", "-t", "1"], 1.0);
    let got = summary_dir(&v, "s2c")["receiver"]["bits_per_second"]
        .as_f64()
        .unwrap();
    assert!(
        (10e6..48e6).contains(&got),
        "received {got:.0} bit/s from a server held to 40 Mbit/s"
    );
}

/// --max-total-rate is shared by the tests running at once and given
/// back when one ends; a test that does not fit is refused as busy.
#[test]
fn max_total_rate_is_shared_and_given_back() {
    let srv = Server::start_with(&["--max-rate", "50M", "--max-total-rate", "60M"]);
    let a = srv.spawn_client(&["-R", "-t", "1.5"]);
    srv.wait_for_log("accepted", 1, Duration::from_secs(5));
    let out = srv.client(&["-u", "-R", "-b", "20M", "-t", "0.3"], deadline_for(0.3));
    out.assert_one_line_failure(1, &["busy", "--max-total-rate"]);
    a.finish(deadline_for(1.5)).assert_success();
    srv.wait_for_log("done:", 1, Duration::from_secs(5));
    srv.json(&["-u", "-R", "-b", "20M", "-t", "0.3"], 0.3);
}

/// --max-sessions-per-client holds one address to its share of the
/// sessions; other addresses are still served.
#[test]
fn max_sessions_per_client_refuses_one_address_only() {
    let srv = Server::start_with(&["--max-sessions-per-client", "1"]);
    let spec = spec_of(&srv, &["-t", "0.2"]);
    let (_held, _) = hello_from(Ipv4Addr::LOCALHOST, &srv, &spec);
    let out = srv.client(&["-t", "0.3"], deadline_for(0.3));
    out.assert_one_line_failure(1, &["busy", "--max-sessions-per-client"]);
    let (_other, welcome) = hello_from(Ipv4Addr::new(127, 0, 0, 5), &srv, &spec);
    assert_eq!(welcome["type"], "welcome");
}

/// Issue 34, item 1: connections that have said what they are but never
/// ask for a test live under their own limits (--max-handshakes-per-client,
/// --max-handshakes) and never take a session's place. One address holding
/// 64 of them, xferlab preambles and iperf3 cookies on both ports, keeps
/// nobody else out: a client is served at once on each port. (Before, 16
/// such connections filled --max-sessions and every client was refused as
/// busy.)
#[test]
fn connections_that_never_ask_for_a_test_hold_no_session_place() {
    let iperf3_port = free_port();
    let iperf3_port_s = iperf3_port.to_string();
    let srv = Server::start_with(&["--iperf3-port", &iperf3_port_s]);
    let ports = [srv.port, iperf3_port];
    let attacker = Ipv4Addr::new(127, 0, 0, 2);
    let mut held = Vec::new();
    for i in 0..64u8 {
        let to = SocketAddr::from((Ipv4Addr::LOCALHOST, ports[usize::from(i % 2)]));
        let mut s = tcp_from(attacker, to);
        if i % 4 < 2 {
            send(&mut s, &preamble(PROTOCOL, 1));
        } else {
            // A distinct iperf3 cookie each (a repeated one would be
            // taken for a data stream of the first).
            let cookie = format!(
                "silent{}{}",
                (b'a' + i / 26) as char,
                (b'a' + i % 26) as char
            );
            send(&mut s, format!("{cookie:a<36}\0").as_bytes());
        }
        held.push(s);
    }
    // The server has seen them all: those past the per-address limit were
    // refused, naming it.
    srv.wait_for_log("--max-handshakes-per-client", 1, Duration::from_secs(5));
    for port in ports {
        let port = port.to_string();
        let started = Instant::now();
        let out = run(
            &["stream", "127.0.0.1", "-p", &port, "-t", "0.3"],
            deadline_for(0.3),
        );
        assert!(
            out.code == Some(0) && started.elapsed() < Duration::from_secs(3),
            "port {port}: {}\n{}",
            out.describe(),
            srv.log()
        );
    }
    drop(held);
}

/// With --auth-key, four addresses that each hold 16 hellos whose
/// challenge they never answer keep no client with the key out; and when
/// they give up, each unanswered challenge counts as a failed attempt, so
/// the addresses are locked out (issue 34, item 1).
#[test]
fn unanswered_challenges_hold_no_session_place_and_count_as_failures() {
    let spec = spec_of(&Server::start(), &["-t", "0.3"]);
    let keys = std::env::temp_dir().join(format!("xferlab-hardening-keys-{}", std::process::id()));
    std::fs::write(&keys, "a-key-both-ends-hold-0123456789\n").unwrap();
    let keys_s = keys.to_str().unwrap();
    let srv = Server::start_with(&["--auth-key", keys_s]);
    let hello = json!({
        "type": "hello",
        "software": {"name": "xferlab", "version": "0.1.0", "protocol": PROTOCOL},
        "spec": spec,
    });
    // A hello from 127.0.0.A; the server's first frame back.
    let say_hello = |a: u8| {
        let mut s = tcp_from(Ipv4Addr::new(127, 0, 0, a), srv.addr());
        let mut msg = preamble(PROTOCOL, 1).to_vec();
        msg.extend(frame(hello.to_string().as_bytes()));
        send(&mut s, &msg);
        assert_eq!(read_n(&mut s, 8), preamble(PROTOCOL, 1));
        let answer = read_json_frame(&mut s);
        (s, answer)
    };
    let mut held = Vec::new();
    for a in 2..6u8 {
        for _ in 0..16 {
            let (s, challenge) = say_hello(a);
            assert_eq!(challenge["type"], "challenge", "{challenge}");
            held.push(s);
        }
    }
    let started = Instant::now();
    let out = srv.client(&["-t", "0.3", "--auth-key", keys_s], deadline_for(0.3));
    assert!(
        out.code == Some(0) && started.elapsed() < Duration::from_secs(3),
        "{}\n{}",
        out.describe(),
        srv.log()
    );
    // Giving up counts: 16 failures an address, past the default 5.
    drop(held);
    srv.wait_for_log("authentication failed", 64, Duration::from_secs(5));
    let (_s, err) = say_hello(2);
    assert!(
        err["message"]
            .as_str()
            .is_some_and(|m| m.contains("too many failed authentication attempts")),
        "{err}"
    );
    std::fs::remove_file(&keys).ok();
}

/// Requests past --max-sessions are answered "busy" at the front door:
/// a burst of them costs the server no thread.
#[test]
fn requests_past_the_session_limit_are_answered_busy_without_a_thread() {
    let srv = Server::start_with(&["--max-sessions", "1"]);
    let spec = spec_of(&srv, &["-t", "0.2"]);
    let (_held, _) = hello_from(Ipv4Addr::LOCALHOST, &srv, &spec);
    let threads = srv.thread_count();
    let mut refused = Vec::new();
    for _ in 0..100 {
        let mut s = raw_connect(srv.addr());
        send(&mut s, &preamble(PROTOCOL, 1));
        assert_eq!(read_n(&mut s, 8), preamble(PROTOCOL, 1));
        let err = read_json_frame(&mut s);
        assert_eq!(err["code"], "busy", "{err}");
        refused.push(s);
    }
    assert!(
        srv.thread_count() <= threads + 2,
        "{} threads after 100 busy answers, {threads} before: {:?}",
        srv.thread_count(),
        thread_names(srv.pid())
    );
    let mut iperf3 = raw_connect(srv.addr());
    send(&mut iperf3, b"hardeningbusyaaaaaaaaaaaaaaaaaaaaaaa\0");
    assert_eq!(read_n(&mut iperf3, 1), [0xff], "ACCESS_DENIED");
    // The log says it once per cause and address per 5 s, not 101 times
    // (issue 34, item 4); another address gets its own first line.
    let mut other = tcp_from(Ipv4Addr::new(127, 0, 0, 7), srv.addr());
    send(&mut other, &preamble(PROTOCOL, 1));
    assert_eq!(read_n(&mut other, 8), preamble(PROTOCOL, 1));
    assert_eq!(read_json_frame(&mut other)["code"], "busy");
    srv.wait_for_log("127.0.0.7:", 1, Duration::from_secs(5));
    let log = srv.log();
    let refusals = |ip: &str| {
        log.lines()
            .filter(|l| l.contains(&format!(" {ip}:")) && l.contains("refused"))
            .count()
    };
    assert!(refusals("127.0.0.1") <= 2, "{log}");
    assert_eq!(refusals("127.0.0.7"), 1, "{log}");
}

// ------------------------------------------------------ rr and budgets

/// Runs `rr 127.0.0.1 -p PORT ARGS` against `srv`.
fn rr_client(srv: &Server, args: &[&str], seconds: f64) -> Output {
    let port = srv.port.to_string();
    let mut all = vec!["rr", "127.0.0.1", "-p", &port];
    all.extend_from_slice(args);
    run(&all, deadline_for(seconds))
}

/// `rr -J ARGS` against `srv`, which must succeed; its result.
fn rr_json(srv: &Server, args: &[&str], seconds: f64) -> Value {
    let mut all = vec!["-J"];
    all.extend_from_slice(args);
    let out = rr_client(srv, &all, seconds);
    assert!(
        out.code == Some(0) && !out.timed_out,
        "{}\n--- server log ---\n{}",
        out.describe(),
        srv.log()
    );
    parse_json(&out)
}

/// Bits per second of answers the client of an rr result received once
/// the test had settled (intervals from 1 s on: TCP pacing lets the
/// first answers of a connection go unpaced).
fn settled_answer_rate(v: &Value, response: f64) -> f64 {
    let (mut n, mut from, mut to) = (0.0, f64::MAX, 0.0f64);
    for flow in v["client"]["pattern"]["flows"].as_array().unwrap() {
        for iv in flow["intervals"].as_array().unwrap() {
            let (start, end) = (f64_at(iv, "/start_s"), f64_at(iv, "/end_s"));
            if start >= 1.0 {
                n += f64_at(iv, "/transactions");
                from = from.min(start);
                to = to.max(end);
            }
        }
    }
    n * response * 8.0 / (to - from)
}

/// A hostile udp-rr client that sends requests as fast as it can gets
/// answers at the server's --max-rate, not at the rate it asks for
/// (without the budget the server answered this flood at hundreds of
/// Mbit/s), and the log counts the answers held back.
#[test]
fn a_udp_rr_flood_is_answered_at_max_rate() {
    let srv = Server::start_with(&["--max-rate", "10M"]);
    let spec = rr_json(&srv, &["--mode", "udp-rr", "-s", "1400", "-t", "0.2"], 0.2)["spec"].clone();
    let mut spec = spec;
    spec["limit"] = json!({"duration": {"seconds": 5.0}});
    let (_ctl, welcome) = hello_from(Ipv4Addr::LOCALHOST, &srv, &spec);
    let to = SocketAddr::from((
        Ipv4Addr::LOCALHOST,
        welcome["rr_port"].as_u64().unwrap() as u16,
    ));
    let sock = udp_from(Ipv4Addr::LOCALHOST);
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let rx = sock.try_clone().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let counter = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let (mut bytes, mut first, mut last) = (0u64, None, Instant::now());
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok(n) = rx.recv(&mut buf) {
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                bytes += n as u64;
            }
        }
        (bytes, first.map(|f| last - f))
    });
    let mut req = [0u8; 16];
    let t0 = Instant::now();
    let mut seq = 0u64;
    while t0.elapsed() < Duration::from_millis(1500) {
        for _ in 0..64 {
            seq += 1;
            req[..8].copy_from_slice(&seq.to_be_bytes());
            sock.send_to(&req, to).ok();
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (bytes, span) = counter.join().unwrap();
    let span = span.expect("no answer at all").as_secs_f64();
    let rate = bytes as f64 * 8.0 / span;
    // The ceiling is the claim. The floor only says answers kept coming:
    // the budget refills on wake-ups, and a wake-up the hypervisor holds
    // up by more than the 2 ms burst loses its share (3e6, not 5e6).
    assert!(
        span > 1.0 && (3e6..12e6).contains(&rate),
        "{seq} requests in 1.5 s answered at {rate:.0} bit/s over {span:.2} s by a server held to 10 Mbit/s"
    );
    drop(_ctl);
    srv.wait_for_log("waited for their turn", 1, Duration::from_secs(10));
}

/// A real udp-rr and tcp-crr client asking for more than --max-rate get
/// answers at about that rate, and their results say so; a tcp-rr
/// client's answers are paced to it by the kernel.
#[test]
fn rr_answers_are_held_to_max_rate() {
    let srv = Server::start_with(&["--max-rate", "10M"]);
    for (mode, size, args) in [
        (
            "udp-rr",
            1400.0,
            &["-s", "1400", "-F", "8", "--depth", "16"][..],
        ),
        ("tcp-crr", 16384.0, &["-s", "16K", "-F", "4"][..]),
        (
            "tcp-rr",
            65536.0,
            &["-s", "64K", "-F", "2", "--depth", "4"][..],
        ),
    ] {
        let mut all = vec!["--mode", mode, "-t", "3", "-i", "0.5"];
        all.extend_from_slice(args);
        let v = rr_json(&srv, &all, 3.0);
        let rate = settled_answer_rate(&v, size);
        // The ceiling is the claim; the floor as in the flood test above.
        assert!(
            (3e6..11.5e6).contains(&rate),
            "{mode}: answers at {rate:.0} bit/s from a server held to 10 Mbit/s\n{}",
            srv.log()
        );
    }
    let log = srv.log();
    assert!(log.contains("answers held to 10.0 Mbits/sec"), "{log}");
    assert!(
        log.contains("answers paced to 5.00 Mbits/sec per flow"),
        "{log}"
    );
}

/// rr tests count in the budgets: their request/response flows in
/// --max-flows, their answers in --max-total-rate while they run.
#[test]
fn rr_tests_count_in_the_flow_and_rate_budgets() {
    let srv = Server::start_with(&[
        "--max-flows",
        "4",
        "--max-rate",
        "50M",
        "--max-total-rate",
        "60M",
    ]);
    rr_client(&srv, &["-F", "8", "-t", "1"], 1.0)
        .assert_one_line_failure(1, &["8 flows", "--max-flows of 4"]);
    let held = Proc::spawn(&[
        "rr",
        "127.0.0.1",
        "-p",
        &srv.port.to_string(),
        "--mode",
        "udp-rr",
        "-t",
        "1.5",
    ]);
    srv.wait_for_log("accepted", 1, Duration::from_secs(5));
    let out = srv.client(&["-u", "-R", "-b", "20M", "-t", "0.3"], deadline_for(0.3));
    out.assert_one_line_failure(1, &["busy", "--max-total-rate"]);
    held.finish(deadline_for(1.5)).assert_success();
    srv.wait_for_log("done:", 1, Duration::from_secs(5));
    srv.json(&["-u", "-R", "-b", "20M", "-t", "0.3"], 0.3);
}
