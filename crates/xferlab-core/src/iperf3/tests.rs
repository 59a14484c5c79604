//! Replays of real iperf3 control exchanges (3.12 and 3.21, decoded from
//! packet captures in `captures/`) against both state machines, plus
//! malformed-input, deadline and fuzz tests.

use std::time::Duration;

use crate::time::Time;

use serde_json::Value;

use super::wire::{
    encode_json_frame, server_error, MAX_PARAMS_JSON, MAX_RESULTS_JSON, UDP_CONNECT_MSG,
    UDP_CONNECT_REPLY,
};
use super::*;
use crate::outbox::Machine;

// ---------------------------------------------------------------------------
// Capture fixtures
// ---------------------------------------------------------------------------

/// (name, decoded capture, data streams the test opened)
const CAPTURES: [(&str, &str, usize); 12] = [
    ("tcp", include_str!("captures/decoded_tcp.txt"), 1),
    ("rev", include_str!("captures/decoded_rev.txt"), 1),
    ("bidir", include_str!("captures/decoded_bidir.txt"), 2),
    ("p2", include_str!("captures/decoded_p2.txt"), 2),
    ("udp", include_str!("captures/decoded_udp.txt"), 1),
    ("udprev", include_str!("captures/decoded_udprev.txt"), 1),
    ("udp64", include_str!("captures/decoded_udp64.txt"), 2),
    ("udpbidir", include_str!("captures/decoded_udpbidir.txt"), 2),
    ("m2o_tcp", include_str!("captures/decoded_m2o_tcp.txt"), 2),
    ("m2o_udp", include_str!("captures/decoded_m2o_udp.txt"), 1),
    ("o2m_tcp", include_str!("captures/decoded_o2m_tcp.txt"), 2),
    ("o2m_udp", include_str!("captures/decoded_o2m_udp.txt"), 1),
];

struct Capture {
    /// Client -> server bytes of the control connection, in order.
    c2s: Vec<u8>,
    /// Server -> client bytes.
    s2c: Vec<u8>,
    /// (C->S bytes, S->C bytes) of each TCP data connection, SYN order.
    data_conns: Vec<(u64, u64)>,
}

/// Reads the "CONTROL CONNECTION" segments (hex or a Python bytes literal)
/// and checks that their offsets leave no gaps.
fn parse_capture(text: &str) -> Capture {
    let mut c2s = Vec::new();
    let mut s2c = Vec::new();
    let mut data_conns = Vec::new();
    let mut in_control = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("CONTROL CONNECTION") {
            in_control = true;
            continue;
        }
        if t.starts_with("DECODED") || t.starts_with("UDP datagrams") {
            in_control = false;
            continue;
        }
        if t.starts_with('#') && !t.starts_with("#0 ") {
            // "#1 a -> b  bytes C->S=5111845 S->C=0"
            let num = |key: &str| -> u64 {
                let i = t.find(key).unwrap() + key.len();
                t[i..].split_whitespace().next().unwrap().parse().unwrap()
            };
            data_conns.push((num("C->S="), num("S->C=")));
            continue;
        }
        if !in_control || t.is_empty() {
            continue;
        }
        let mut words = t.split_whitespace();
        let _time = words.next().unwrap();
        let dir = words.next().unwrap();
        let off: usize = words.next().unwrap()["off=".len()..].parse().unwrap();
        let len: usize = words.next().unwrap()["len=".len()..].parse().unwrap();
        let after_len = &t[t.find("len=").unwrap()..];
        let payload = after_len[after_len.find(' ').unwrap()..].trim();
        let bytes = if payload.starts_with("b'") || payload.starts_with("b\"") {
            py_bytes(payload)
        } else {
            hex(payload)
        };
        assert_eq!(bytes.len(), len, "{t}");
        let stream = if dir == "C->S" { &mut c2s } else { &mut s2c };
        assert_eq!(stream.len(), off, "gap before {t}");
        stream.extend_from_slice(&bytes);
    }
    Capture {
        c2s,
        s2c,
        data_conns,
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A Python `bytes` repr: `b'...'` with \\ \' \" \n \r \t \xHH escapes.
fn py_bytes(s: &str) -> Vec<u8> {
    let quote = s.as_bytes()[1];
    let body = &s.as_bytes()[2..s.len() - 1];
    assert_eq!(s.as_bytes()[s.len() - 1], quote);
    let mut out = Vec::new();
    let mut i = 0;
    while i < body.len() {
        if body[i] != b'\\' {
            out.push(body[i]);
            i += 1;
            continue;
        }
        let e = body[i + 1];
        i += 2;
        out.push(match e {
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'x' => {
                i += 2;
                u8::from_str_radix(std::str::from_utf8(&body[i - 2..i]).unwrap(), 16).unwrap()
            }
            other => other,
        });
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Cookie(Vec<u8>),
    State(u8),
    Json(Vec<u8>),
}

/// Splits a control stream into messages. Every JSON message in the
/// captures is shorter than 16 MiB, so its first byte is 0, which no state
/// is.
fn tokens(mut b: &[u8], cookie_first: bool) -> Vec<Tok> {
    let mut out = Vec::new();
    if cookie_first {
        out.push(Tok::Cookie(b[..COOKIE_LEN].to_vec()));
        b = &b[COOKIE_LEN..];
    }
    while let Some(&first) = b.first() {
        if first == 0 {
            let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
            out.push(Tok::Json(b[4..4 + len].to_vec()));
            b = &b[4 + len..];
        } else {
            out.push(Tok::State(first));
            b = &b[1..];
        }
    }
    out
}

fn frame(json: &[u8]) -> Vec<u8> {
    let mut f = (json.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(json);
    f
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn seed(name: &str) -> Rng {
    Rng(name.bytes().fold(0x9E37_79B9_7F4A_7C15u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
    }) | 1)
}

/// Feeds `data` in random chunks of 1..=9 bytes (TCP may split anywhere).
fn feed(m: &mut impl Machine, now: Time, data: &[u8], rng: &mut Rng) {
    let mut rest = data;
    while !rest.is_empty() {
        let n = (1 + rng.below(9)).min(rest.len());
        m.handle_input(now, &rest[..n]);
        rest = &rest[n..];
    }
}

/// Our JSON must be strict: no integer above `i64::MAX` (3.12's unsigned
/// printing of negatives), no null.
fn assert_strict(v: &Value, path: &str) {
    match v {
        Value::Number(n) => assert!(
            n.as_i64().is_some() || n.as_u64().is_none(),
            "{path}: {n} printed as unsigned"
        ),
        Value::Null => panic!("{path}: null"),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, x)| assert_strict(x, &format!("{path}[{i}]"))),
        Value::Object(m) => m
            .iter()
            .for_each(|(k, x)| assert_strict(x, &format!("{path}.{k}"))),
        _ => {}
    }
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

/// Results equal up to float formatting.
fn assert_results_match(ours: &Results, theirs: &Results, what: &str) {
    let fl = |x: &Results| {
        [x.cpu_util_total, x.cpu_util_user, x.cpu_util_system]
            .into_iter()
            .chain(
                x.streams
                    .iter()
                    .flat_map(|s| [s.jitter, s.start_time, s.end_time]),
            )
            .collect::<Vec<_>>()
    };
    for (a, b) in fl(ours).into_iter().zip(fl(theirs)) {
        assert!(close(a, b), "{what}: {a} != {b}");
    }
    let strip = |x: &Results| {
        let mut x = x.clone();
        x.cpu_util_total = 0.0;
        x.cpu_util_user = 0.0;
        x.cpu_util_system = 0.0;
        for s in &mut x.streams {
            s.jitter = 0.0;
            s.start_time = 0.0;
            s.end_time = 0.0;
        }
        x
    };
    assert_eq!(strip(ours), strip(theirs), "{what}");
}

/// The JSON keys and their values' kinds must match iperf3's (semantic
/// comparison; float digits and -1 vs 18446744073709551615 may differ).
fn assert_same_keys(ours: &[u8], theirs: &[u8], what: &str) {
    let keys = |b: &[u8]| -> Vec<String> {
        let v: Value = serde_json::from_slice(b).unwrap();
        let mut out = Vec::new();
        fn walk(v: &Value, p: String, out: &mut Vec<String>) {
            match v {
                Value::Object(m) => m.iter().for_each(|(k, x)| walk(x, format!("{p}.{k}"), out)),
                Value::Array(a) => a
                    .iter()
                    .enumerate()
                    .for_each(|(i, x)| walk(x, format!("{p}[{i}]"), out)),
                _ => out.push(p),
            }
        }
        walk(&v, String::new(), &mut out);
        out.sort();
        out
    };
    assert_eq!(keys(ours), keys(theirs), "{what}");
}

fn server_events(s: &mut Iperf3Server) -> Vec<ServerEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn client_events(c: &mut Iperf3Client) -> Vec<ClientEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

struct Exchange {
    cookie: Vec<u8>,
    params: Vec<u8>,
    client_results: Vec<u8>,
    server_results: Vec<u8>,
    s2c: Vec<Tok>,
}

fn exchange(cap: &Capture) -> Exchange {
    let c2s = tokens(&cap.c2s, true);
    let s2c = tokens(&cap.s2c, false);
    let [Tok::Cookie(cookie), Tok::Json(params), Tok::State(4), Tok::Json(client_results), Tok::State(16)] =
        &c2s[..]
    else {
        panic!("unexpected C->S shape: {c2s:?}")
    };
    let [Tok::State(9), Tok::State(10), Tok::State(1), Tok::State(2), Tok::State(13), Tok::Json(server_results), Tok::State(14)] =
        &s2c[..]
    else {
        panic!("unexpected S->C shape: {s2c:?}")
    };
    Exchange {
        cookie: cookie.clone(),
        params: params.clone(),
        client_results: client_results.clone(),
        server_results: server_results.clone(),
        s2c,
    }
}

/// The capture's client bytes into our server: it must answer with the
/// same bytes the real server sent (results JSON compared semantically).
fn replay_server(name: &str, text: &str, streams: usize) {
    let cap = parse_capture(text);
    let x = exchange(&cap);
    let mut rng = seed(name);
    let t0 = Time::ZERO;
    let mut out = Vec::new();

    let mut s = Iperf3Server::new(t0, &x.cookie);
    assert_eq!(s.cookie()[..], x.cookie[..]);
    out.extend(s.poll_transmit().unwrap());
    feed(&mut s, t0, &frame(&x.params), &mut rng);
    let ev = server_events(&mut s);
    let [ServerEvent::ParamsReceived(p)] = &ev[..] else {
        panic!("{name}: {ev:?}")
    };
    assert_eq!(p.stream_count(), streams, "{name}");
    // Written back strictly, 3.12's and 3.21's parameters come out byte
    // for byte as those clients wrote them.
    assert_eq!(
        String::from_utf8(p.to_json()).unwrap(),
        String::from_utf8(x.params.clone()).unwrap(),
        "{name}"
    );
    let watchdog = p.watchdog(WATCHDOG_GRACE, Duration::from_secs(3600));
    assert_eq!(watchdog, Duration::from_secs(2 + 40), "{name}");
    // The TCP data connections in the capture ran the directions the
    // parameters imply, in that order.
    if p.protocol == Protocol::Tcp {
        assert_eq!(cap.data_conns.len(), streams, "{name}");
        for (i, (up, down)) in cap.data_conns.iter().enumerate() {
            let want = if up > down {
                Direction::ClientToServer
            } else {
                Direction::ServerToClient
            };
            assert_eq!(p.stream_direction(i), want, "{name} stream {i}");
        }
    }
    let p = (**p).clone();

    let t1 = t0 + Duration::from_millis(1);
    s.accept(t1, watchdog);
    out.extend(s.poll_transmit().unwrap());
    assert_eq!(s.poll_timeout(), Some(t1 + SETUP_TIMEOUT));
    for i in 0..streams {
        assert!(!s.is_running());
        let info = s.stream_attached(t1).unwrap();
        assert_eq!(info, p.stream_info(i));
        assert_eq!(info.id, stream_id(i));
    }
    assert!(s.stream_attached(t1).is_none(), "{name}: extra stream");
    assert!(s.is_running());
    assert_eq!(server_events(&mut s), [ServerEvent::Running]);
    assert_eq!(s.poll_timeout(), Some(t1 + watchdog));
    out.extend(s.poll_transmit().unwrap());

    let t2 = t1 + Duration::from_secs(2);
    s.handle_input(t2, &[4]);
    assert_eq!(server_events(&mut s), [ServerEvent::Stop]);
    out.extend(s.poll_transmit().unwrap());
    assert!(s.poll_transmit().is_none());
    feed(&mut s, t2, &frame(&x.client_results), &mut rng);
    let ev = server_events(&mut s);
    let [ServerEvent::PeerResults(r)] = &ev[..] else {
        panic!("{name}: {ev:?}")
    };
    assert_eq!(**r, Results::from_json(&x.client_results).unwrap());
    assert!(
        s.poll_transmit().is_none(),
        "{name}: sent before our results"
    );
    let theirs = Results::from_json(&x.server_results).unwrap();
    s.send_results(t2, &theirs);
    out.extend(s.poll_transmit().unwrap());
    s.handle_input(t2, &[16]);
    assert_eq!(server_events(&mut s), [ServerEvent::Done]);
    assert!(s.is_closed() && s.is_done());
    assert!(s.poll_transmit().is_none());

    // Our S->C bytes against the real server's.
    let ours = tokens(&out, false);
    assert_eq!(ours.len(), x.s2c.len(), "{name}");
    for (a, b) in ours.iter().zip(&x.s2c) {
        match (a, b) {
            (Tok::Json(a), Tok::Json(b)) => {
                let va: Value = serde_json::from_slice(a).unwrap();
                assert_strict(&va, name);
                assert_same_keys(a, b, name);
                assert_results_match(
                    &Results::from_json(a).unwrap(),
                    &Results::from_json(b).unwrap(),
                    name,
                );
            }
            _ => assert_eq!(a, b, "{name}"),
        }
    }
}

/// The capture's server bytes into our client: it must send the same bytes
/// the real client sent.
fn replay_client(name: &str, text: &str, streams: usize) {
    let cap = parse_capture(text);
    let x = exchange(&cap);
    let mut rng = seed(name);
    let t0 = Time::ZERO;
    let mut out = Vec::new();

    let params = Params::from_json(&x.params).unwrap();
    let mut cookie = [0u8; COOKIE_LEN];
    cookie.copy_from_slice(&x.cookie);
    let mut c = Iperf3Client::new(t0, cookie, params.clone());
    assert_eq!(c.poll_timeout(), Some(t0 + SETUP_TIMEOUT));
    out.extend(c.poll_transmit().unwrap());

    c.handle_input(t0, &[9]);
    out.extend(c.poll_transmit().unwrap());
    c.handle_input(t0, &[10]);
    assert_eq!(
        client_events(&mut c),
        [ClientEvent::OpenStreams { count: streams }]
    );
    assert_eq!(c.poll_timeout(), None);
    c.streams_open(t0);
    c.handle_input(t0, &[1]);
    assert_eq!(client_events(&mut c), [ClientEvent::Started]);
    c.handle_input(t0, &[2]);
    assert_eq!(client_events(&mut c), [ClientEvent::Running]);
    assert!(c.is_running());
    assert!(c.poll_transmit().is_none());

    let t1 = t0 + Duration::from_secs(2);
    c.end_test(t1);
    out.extend(c.poll_transmit().unwrap());
    assert_eq!(c.poll_timeout(), Some(t1 + RESULTS_TIMEOUT));
    c.handle_input(t1, &[13]);
    assert_eq!(client_events(&mut c), [ClientEvent::ResultsRequested]);
    let mine = Results::from_json(&x.client_results).unwrap();
    c.send_results(t1, &mine);
    out.extend(c.poll_transmit().unwrap());
    feed(&mut c, t1, &frame(&x.server_results), &mut rng);
    let ev = client_events(&mut c);
    let [ClientEvent::PeerResults(r)] = &ev[..] else {
        panic!("{name}: {ev:?}")
    };
    assert_eq!(**r, Results::from_json(&x.server_results).unwrap());
    c.handle_input(t1, &[14]);
    assert_eq!(client_events(&mut c), [ClientEvent::Done]);
    out.extend(c.poll_transmit().unwrap());
    assert!(c.is_closed() && c.is_done());

    // Cookie and parameters byte for byte; results semantically.
    let ours = tokens(&out, true);
    let theirs = tokens(&cap.c2s, true);
    assert_eq!(ours.len(), theirs.len(), "{name}");
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        match (a, b) {
            (Tok::Json(a), Tok::Json(b)) if i > 1 => {
                assert_strict(&serde_json::from_slice(a).unwrap(), name);
                assert_same_keys(a, b, name);
                assert_results_match(
                    &Results::from_json(a).unwrap(),
                    &Results::from_json(b).unwrap(),
                    name,
                );
            }
            _ => assert_eq!(a, b, "{name}"),
        }
    }
}

#[test]
fn captures_replayed_into_the_server() {
    for (name, text, streams) in CAPTURES {
        replay_server(name, text, streams);
    }
}

#[test]
fn captures_replayed_into_the_client() {
    for (name, text, streams) in CAPTURES {
        replay_client(name, text, streams);
    }
}

#[test]
fn captured_quirks_parse_as_intended() {
    // 3.12 prints -1 as 2^64-1; 3.21 prints -1. Both read as -1.
    let x = exchange(&parse_capture(CAPTURES[0].1));
    let server = Results::from_json(&x.server_results).unwrap();
    assert_eq!(server.sender_has_retransmits, -1);
    assert_eq!(server.streams[0].retransmits, -1);
    assert_eq!(server.congestion_used.as_deref(), Some("bbr"));
    let x = exchange(&parse_capture(CAPTURES[8].1)); // m2o_tcp
    let client = Results::from_json(&x.client_results).unwrap();
    assert_eq!(client.streams[1].retransmits, -1);
    assert_eq!(
        client.streams[0].omitted,
        Some(Omitted {
            errors: 0,
            packets: 0
        })
    );
    // 64-bit counters are a number flag; 3.21 UDP sends the GSO/GRO block.
    let x = exchange(&parse_capture(CAPTURES[6].1)); // udp64
    let p = Params::from_json(&x.params).unwrap();
    assert!(p.udp_counters_64bit && p.protocol == Protocol::Udp);
    assert_eq!(p.parallel, 2);
    let x = exchange(&parse_capture(CAPTURES[9].1)); // m2o_udp
    let p = Params::from_json(&x.params).unwrap();
    assert_eq!(
        (p.gso, p.gso_dg_size, p.gso_bf_size, p.gro, p.gro_bf_size),
        (Some(0), Some(0), Some(65507), Some(0), Some(65507))
    );
    assert!(p.reverse);
    assert_eq!(p.stream_direction(0), Direction::ServerToClient);
}

// ---------------------------------------------------------------------------
// Wire pieces
// ---------------------------------------------------------------------------

#[test]
fn cookies() {
    let mut random = [0u8; 36];
    for (i, r) in random.iter_mut().enumerate() {
        *r = (i * 37 + 11) as u8;
    }
    let c = make_cookie(&random);
    assert!(is_cookie(&c));
    assert_eq!(c[36], 0);
    assert!(may_be_cookie(&c[..10]));
    assert!(is_cookie(b"dcgcywadnly5nxhtx5zlf3wz2zfreyzmqwxw\0"));
    // Upper case, digits outside 2-7, wrong length, no NUL, NUL too early.
    assert!(!is_cookie(b"Dcgcywadnly5nxhtx5zlf3wz2zfreyzmqwxw\0"));
    assert!(!is_cookie(b"dcgcywadnly5nxhtx5zlf3wz2zfreyzmqwx1\0"));
    assert!(!is_cookie(b"dcgcywadnly5nxhtx5zlf3wz2zfreyzmqwx8\0"));
    assert!(!is_cookie(b"dcgcywadnly5nxhtx5zlf3wz2zfreyzmqwx\0"));
    assert!(!is_cookie(b"dcgcywadnly5nxhtx5zlf3wz2zfreyzmqwxwa\0"));
    assert!(!is_cookie(b"dcgcywadnly5nxhtx5zlf3wz2zfreyzmqwxwa"));
    assert!(!is_cookie(b"dcgcywadnly5nxhtx5zlf3wz2zfreyzmqwx\0\0"));
    assert!(!is_cookie(b""));
    assert!(!may_be_cookie(b"XFRL"));
    assert!(!may_be_cookie(b"GET / HTTP/1.1"));

    // A server handed a bad cookie fails without a byte.
    let t0 = Time::ZERO;
    for bad in [
        &b"DCGCYWADNLY5NXHTX5ZLF3WZ2ZFREYZMQWXW\0"[..],
        &b"dcgcywadnly5nxhtx5zlf3wz2zfreyzmqwx\0"[..],
        &b"dcgcywadnly5nxhtx5zlf3wz2zfreyzmqwxwa"[..],
    ] {
        let mut s = Iperf3Server::new(t0, bad);
        assert_eq!(
            server_events(&mut s),
            [ServerEvent::Failed(Iperf3Error::BadCookie)]
        );
        assert!(s.is_closed() && s.poll_transmit().is_none());
    }
    let mut bad = *b"dcgcywadnly5nxhtx5zlf3wz2zfreyzmqwxw\0";
    bad[36] = b'a';
    let mut c = Iperf3Client::new(t0, bad, Params::default());
    assert_eq!(
        client_events(&mut c),
        [ClientEvent::Failed(Iperf3Error::BadCookie)]
    );
    assert!(c.poll_transmit().is_none());
}

#[test]
fn state_codes() {
    let codes: Vec<i8> = State::ALL.iter().map(|s| s.code()).collect();
    assert_eq!(codes, [1, 2, 4, 9, 10, 11, 12, 13, 14, 16, -1, -2]);
    for s in State::ALL {
        assert_eq!(State::from_byte(s.byte()), Some(s));
    }
    assert_eq!(State::from_byte(0xff), Some(State::AccessDenied));
    assert_eq!(State::from_byte(0xfe), Some(State::ServerError));
    assert_eq!(State::from_byte(3), None);
    assert_eq!(State::from_byte(0), None);
    assert_eq!(
        server_error(i_errno::IEACCESSDENIED, 2),
        [0xfe, 0, 0, 0, 121, 0, 0, 0, 2]
    );
    assert_eq!(wire::access_denied(), [0xff]);
}

#[test]
fn json_frames() {
    let f = encode_json_frame(&serde_json::json!({"a": 1}));
    assert_eq!(&f[..4], &[0, 0, 0, 7]);
    assert_eq!(
        wire::decode_json_frame(&f, 7),
        Ok(Some((11, &b"{\"a\":1}"[..])))
    );
    assert_eq!(wire::decode_json_frame(&f[..10], 7), Ok(None));
    assert_eq!(wire::decode_json_frame(&f[..3], 7), Ok(None));
    assert_eq!(
        wire::decode_json_frame(&f, 6),
        Err(Iperf3Error::TooLarge { len: 7, max: 6 })
    );
    // A 2 GB prefix is refused on its 4 bytes alone.
    assert_eq!(
        wire::decode_json_frame(&0x8000_0000u32.to_be_bytes(), MAX_RESULTS_JSON),
        Err(Iperf3Error::TooLarge {
            len: 0x8000_0000,
            max: MAX_RESULTS_JSON
        })
    );
}

#[test]
fn udp_handshake_bytes() {
    assert_eq!(UDP_CONNECT_MSG, [0x39, 0x38, 0x37, 0x36]);
    assert_eq!(UDP_CONNECT_REPLY, [0x36, 0x37, 0x38, 0x39]);
    assert!(wire::is_udp_connect_reply(&[0x36, 0x37, 0x38, 0x39]));
    assert!(wire::is_udp_connect_reply(&987_654_321u32.to_le_bytes()));
    assert!(wire::is_udp_connect_reply(&987_654_321u32.to_be_bytes()));
    assert!(!wire::is_udp_connect_reply(&UDP_CONNECT_MSG));
    // A reverse-mode data datagram that overtook the reply.
    let mut data = vec![0u8; 1000];
    data[..4].copy_from_slice(&UDP_CONNECT_REPLY);
    assert!(!wire::is_udp_connect_reply(&data));
    assert!(wire::is_udp_connect_msg(&[0x39, 0x38, 0x37, 0x36]));
    assert!(wire::is_udp_connect_msg(&123_456_789u32.to_le_bytes()));
    assert!(!wire::is_udp_connect_msg(&UDP_CONNECT_REPLY));
}

#[test]
fn stream_ids_skip_two() {
    let ids: Vec<u32> = (0..5).map(stream_id).collect();
    assert_eq!(ids, [1, 3, 4, 5, 6]);
    for i in 0..1000 {
        assert_eq!(stream_index(stream_id(i)), Some(i));
    }
    assert_eq!(stream_index(0), None);
    assert_eq!(stream_index(2), None);
    let p = Params {
        parallel: 2,
        bidirectional: true,
        ..Params::default()
    };
    let dirs: Vec<(u32, Direction)> = p.streams().iter().map(|s| (s.id, s.direction)).collect();
    use Direction::*;
    assert_eq!(
        dirs,
        [
            (1, ClientToServer),
            (3, ClientToServer),
            (4, ServerToClient),
            (5, ServerToClient)
        ]
    );
}

// ---------------------------------------------------------------------------
// Parameters and results JSON
// ---------------------------------------------------------------------------

#[test]
fn negative_numbers_printed_unsigned_read_back_negative() {
    assert_eq!(
        json::lenient_i64(&serde_json::json!(18446744073709551615u64)),
        Some(-1)
    );
    assert_eq!(
        json::lenient_i64(&serde_json::json!(18446744073709551614u64)),
        Some(-2)
    );
    assert_eq!(json::lenient_i64(&serde_json::json!(-1)), Some(-1));
    assert_eq!(json::lenient_i64(&serde_json::json!(7.9)), Some(7));
    assert_eq!(json::lenient_i64(&serde_json::json!("7")), None);
    assert_eq!(json::reinterpret_u64(u64::MAX), -1);
    let r = Results::from_json(
        br#"{"cpu_util_total":1,"cpu_util_user":0.5,"cpu_util_system":0.5,
            "sender_has_retransmits":18446744073709551615,
            "streams":[{"id":1,"bytes":10,"retransmits":18446744073709551615,
            "jitter":0,"errors":18446744073709551615,"packets":0}]}"#,
    )
    .unwrap();
    assert_eq!(r.sender_has_retransmits, -1);
    assert_eq!(r.streams[0].retransmits, -1);
    assert_eq!(r.streams[0].errors, -1);
    // Missing start/end times are 0, as iperf3 reads them.
    assert_eq!((r.streams[0].start_time, r.streams[0].end_time), (0.0, 0.0));
    let out = String::from_utf8(r.to_json()).unwrap();
    assert!(out.contains(r#""sender_has_retransmits":-1"#), "{out}");
    assert!(out.contains(r#""retransmits":-1"#), "{out}");
    assert!(!out.contains("18446744073709551615"), "{out}");
    let p = Params::from_json(br#"{"tcp":true,"omit":18446744073709551615}"#).unwrap();
    assert_eq!(p.omit, -1);
}

#[test]
fn flags_as_numbers_or_true_and_strict_output() {
    let numbers = Params::from_json(
        br#"{"udp":1,"reverse":1,"nodelay":1,"get_server_output":1,
            "udp_counters_64bit":1,"repeating_payload":1,"zerocopy":1,
            "dont_fragment":1,"mptcp":1,"skip_rx_copy":1,"time":5}"#,
    )
    .unwrap();
    let trues = Params::from_json(
        br#"{"udp":true,"reverse":true,"nodelay":true,"get_server_output":true,
            "udp_counters_64bit":true,"repeating_payload":true,"zerocopy":true,
            "dont_fragment":true,"mptcp":true,"skip_rx_copy":true,"time":5}"#,
    )
    .unwrap();
    assert_eq!(numbers, trues);
    assert_eq!(numbers.zerocopy, 1);
    let z = Params::from_json(br#"{"tcp":true,"zerocopy":2}"#).unwrap();
    assert_eq!(z.zerocopy, 2);
    assert!(String::from_utf8(z.to_json())
        .unwrap()
        .contains(r#""zerocopy":2"#));
    assert!(numbers.reverse && numbers.udp_counters_64bit && numbers.mptcp);
    assert_eq!(numbers.protocol, Protocol::Udp);
    let off =
        Params::from_json(br#"{"tcp":true,"reverse":0,"bidirectional":false,"nodelay":null}"#)
            .unwrap();
    assert!(!off.reverse && !off.bidirectional && !off.nodelay);
    assert!(Params::from_json(br#"{"tcp":true,"reverse":"yes"}"#)
        .unwrap_err()
        .to_string()
        .contains("\"reverse\""));
    assert!(Params::from_json(br#"{"tcp":true,"time":"10"}"#)
        .unwrap_err()
        .to_string()
        .contains("\"time\""));
    assert!(Params::from_json(br#"{"tcp":true,"title":5}"#).is_err());
    assert!(Params::from_json(br#"[1,2]"#).is_err());
    assert!(Params::from_json(br#"{"tcp":true,"num":-5}"#).is_err());

    // Written strictly: booleans as true, iperf3's numeric flags as 1,
    // numbers as numbers, unset options absent (never false or 0).
    let out: Value = serde_json::from_slice(&numbers.to_json()).unwrap();
    let o = out.as_object().unwrap();
    for k in ["udp", "reverse", "nodelay", "mptcp"] {
        assert_eq!(o[k], Value::Bool(true), "{k}");
    }
    for k in [
        "get_server_output",
        "udp_counters_64bit",
        "repeating_payload",
        "zerocopy",
        "dont_fragment",
        "skip_rx_copy",
    ] {
        assert_eq!(o[k], serde_json::json!(1), "{k}");
    }
    let plain: Value = serde_json::from_slice(&Params::default().to_json()).unwrap();
    let keys: Vec<&str> = plain
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    let mut want = [
        "tcp",
        "omit",
        "time",
        "num",
        "blockcount",
        "parallel",
        "pacing_timer",
        "client_version",
    ];
    want.sort();
    assert_eq!(keys, want);
    assert!(!String::from_utf8(off.to_json()).unwrap().contains("false"));
}

#[test]
fn unknown_keys_are_ignored() {
    let p = Params::from_json(
        br#"{"tcp":true,"omit":1,"time":3,"parallel":4,"len":1000,
            "some_future_option":{"nested":[1,2,{"x":null}]},"frobnicate":true,
            "client_version":"9.99"}"#,
    )
    .unwrap();
    assert_eq!((p.omit, p.time, p.parallel, p.len), (1, 3, 4, Some(1000)));
    assert_eq!(p.planned_duration(), Some(Duration::from_secs(4)));
    let r = Results::from_json(
        br#"{"cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":0,
            "sender_has_retransmits":0,"new_top_level":[],"streams":[{"id":3,
            "bytes":1,"retransmits":-1,"jitter":0,"errors":0,"packets":1,
            "start_time":0,"end_time":1,"new_per_stream":"x"}]}"#,
    )
    .unwrap();
    assert_eq!(r.streams[0].id, 3);
    // Trailing NULs (a C peer counting the terminator) are tolerated.
    assert!(Params::from_json(b"{\"tcp\":true}\0").is_ok());
}

#[test]
fn results_need_iperf3s_required_keys() {
    let base = serde_json::json!({"cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":0,
        "sender_has_retransmits":0,"streams":[{"id":1,"bytes":1,"retransmits":-1,
        "jitter":0,"errors":0,"packets":1}]});
    assert!(Results::from_json(base.to_string().as_bytes()).is_ok());
    for key in ["cpu_util_total", "sender_has_retransmits", "streams"] {
        let mut v = base.clone();
        v.as_object_mut().unwrap().remove(key);
        let e = Results::from_json(v.to_string().as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{e}");
    }
    for key in ["id", "bytes", "retransmits", "jitter", "errors", "packets"] {
        let mut v = base.clone();
        v["streams"][0].as_object_mut().unwrap().remove(key);
        let e = Results::from_json(v.to_string().as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{e}");
    }
    let mut v = base.clone();
    v["streams"][0]["id"] = serde_json::json!(0);
    assert!(Results::from_json(v.to_string().as_bytes()).is_err());
}

#[test]
fn omitted_counts_go_together_or_not_at_all() {
    let mut r = Results {
        cpu_util_total: f64::NAN,
        cpu_util_user: 0.0,
        cpu_util_system: 0.0,
        sender_has_retransmits: -1,
        congestion_used: None,
        streams: vec![StreamResult {
            id: 1,
            bytes: 1,
            retransmits: -1,
            jitter: 0.0,
            errors: 2,
            packets: 3,
            omitted: Some(Omitted {
                errors: 4,
                packets: 5,
            }),
            start_time: 0.0,
            end_time: 1.0,
        }],
        server_output_text: None,
        server_output_json: None,
    };
    let both = String::from_utf8(r.to_json()).unwrap();
    assert!(
        both.contains(r#""errors":2,"omitted_errors":4,"packets":3,"omitted_packets":5"#),
        "{both}"
    );
    // NaN is not JSON: written as 0, never null.
    assert!(both.starts_with(r#"{"cpu_util_total":0.0,"#), "{both}");
    r.streams[0].omitted = None;
    let none = String::from_utf8(r.to_json()).unwrap();
    assert!(!none.contains("omitted"), "{none}");
    // Half a pair from a peer reads as neither.
    let half = none.replace(r#""packets":3"#, r#""packets":3,"omitted_packets":1"#);
    assert_eq!(
        Results::from_json(half.as_bytes()).unwrap().streams[0].omitted,
        None
    );
}

// ---------------------------------------------------------------------------
// State machines: limits, malformed input, signals, deadlines
// ---------------------------------------------------------------------------

const COOKIE: &[u8; 37] = b"dcgcywadnly5nxhtx5zlf3wz2zfreyzmqwxw\0";

fn server(t0: Time) -> Iperf3Server {
    let mut s = Iperf3Server::new(t0, COOKIE);
    assert_eq!(s.poll_transmit().unwrap(), [9]);
    s
}

fn client(t0: Time, params: Params) -> Iperf3Client {
    let mut c = Iperf3Client::new(t0, *COOKIE, params);
    assert_eq!(c.poll_transmit().unwrap(), COOKIE);
    c
}

fn tcp_params(parallel: i64) -> Params {
    Params {
        parallel,
        time: 2,
        len: Some(131072),
        ..Params::default()
    }
}

/// A server that has accepted and runs a test with `n` streams.
fn running_server(t0: Time, n: i64) -> Iperf3Server {
    let mut s = server(t0);
    s.handle_input(t0, &encode_json_frame(&tcp_params(n)));
    server_events(&mut s);
    s.accept(t0, Duration::from_secs(42));
    for _ in 0..n {
        s.stream_attached(t0).unwrap();
    }
    assert!(s.is_running());
    assert_eq!(s.poll_transmit().unwrap(), [10, 1, 2]);
    server_events(&mut s);
    s
}

fn running_client(t0: Time) -> Iperf3Client {
    let mut c = client(t0, tcp_params(1));
    c.handle_input(t0, &[9, 10]);
    c.streams_open(t0);
    c.handle_input(t0, &[1, 2]);
    assert!(c.is_running());
    client_events(&mut c);
    c.poll_transmit();
    c
}

fn last_server_error(out: &[u8]) -> Option<i32> {
    (out.len() >= 9 && out[out.len() - 9] == 0xfe)
        .then(|| i32::from_be_bytes(out[out.len() - 8..out.len() - 4].try_into().unwrap()))
}

#[test]
fn a_2gb_length_prefix_is_refused_before_buffering() {
    let t0 = Time::ZERO;
    let mut s = server(t0);
    s.handle_input(t0, &[0x80, 0, 0]);
    assert!(server_events(&mut s).is_empty());
    s.handle_input(t0, &[0]);
    assert_eq!(
        server_events(&mut s),
        [ServerEvent::Failed(Iperf3Error::TooLarge {
            len: 0x8000_0000,
            max: MAX_PARAMS_JSON
        })]
    );
    assert_eq!(
        last_server_error(&s.poll_transmit().unwrap()),
        Some(i_errno::IERECVPARAMS)
    );

    let mut c = running_client(t0);
    c.end_test(t0);
    c.handle_input(t0, &[13]);
    c.send_results(t0, &Results::from_json(&sample_results()).unwrap());
    c.poll_transmit();
    client_events(&mut c);
    c.handle_input(t0, &0x7fff_ffffu32.to_be_bytes());
    assert_eq!(
        client_events(&mut c),
        [ClientEvent::Failed(Iperf3Error::TooLarge {
            len: 0x7fff_ffff,
            max: MAX_RESULTS_JSON
        })]
    );
    // The client tells the server it gave up.
    assert_eq!(c.poll_transmit().unwrap(), [12]);
}

fn params_of_len(len: usize) -> Vec<u8> {
    let head = br#"{"tcp":true,"time":1,"title":""#;
    let tail = br#""}"#;
    let mut j = head.to_vec();
    j.resize(len - tail.len(), b'x');
    j.extend_from_slice(tail);
    assert_eq!(j.len(), len);
    j
}

#[test]
fn params_over_8_kib_are_refused() {
    let t0 = Time::ZERO;
    let mut s = server(t0);
    s.handle_input(t0, &frame(&params_of_len(8192)));
    let ev = server_events(&mut s);
    assert!(matches!(&ev[..], [ServerEvent::ParamsReceived(p)] if p.time == 1));

    let mut s = server(t0);
    // Refused on the prefix: the body is never buffered.
    s.handle_input(t0, &8193u32.to_be_bytes());
    assert_eq!(
        server_events(&mut s),
        [ServerEvent::Failed(Iperf3Error::TooLarge {
            len: 8193,
            max: 8192
        })]
    );

    // Our client will not send what a 3.18+ server refuses.
    let p = Params {
        title: Some("x".repeat(9000)),
        ..Params::default()
    };
    let mut c = Iperf3Client::new(t0, *COOKIE, p);
    assert!(matches!(
        &client_events(&mut c)[..],
        [ClientEvent::Failed(Iperf3Error::ParamsTooLarge {
            max: 8192,
            ..
        })]
    ));
    assert!(c.poll_transmit().is_none());
}

#[test]
fn malformed_params_get_a_server_error() {
    let t0 = Time::ZERO;
    for body in [
        &b"{not json"[..],
        b"[]",
        b"\"x\"",
        br#"{"tcp":true,"parallel":"2"}"#,
        b"",
    ] {
        let mut s = server(t0);
        s.handle_input(t0, &frame(body));
        let ev = server_events(&mut s);
        assert!(
            matches!(&ev[..], [ServerEvent::Failed(Iperf3Error::Malformed(_))]),
            "{ev:?}"
        );
        assert_eq!(
            last_server_error(&s.poll_transmit().unwrap()),
            Some(i_errno::IERECVPARAMS)
        );
    }
}

fn sample_results() -> Vec<u8> {
    exchange(&parse_capture(CAPTURES[0].1)).client_results
}

#[test]
fn out_of_order_bytes_fail_clearly() {
    let t0 = Time::ZERO;
    // TEST_END where the parameters are due.
    let mut s = server(t0);
    s.handle_input(t0, &[4, 0, 0, 0]);
    let ev = server_events(&mut s);
    let [ServerEvent::Failed(e)] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(
        *e,
        Iperf3Error::Unexpected {
            got: 4,
            during: "where a JSON message was due"
        }
    );
    assert!(e.to_string().contains("TEST_END"), "{e}");

    // TEST_END before the streams are attached.
    let mut s = server(t0);
    s.handle_input(t0, &encode_json_frame(&tcp_params(1)));
    s.accept(t0, Duration::from_secs(10));
    s.handle_input(t0, &[4]);
    let ev = server_events(&mut s);
    assert!(
        matches!(
            &ev[..],
            [
                ServerEvent::ParamsReceived(_),
                ServerEvent::Failed(Iperf3Error::Unexpected { got: 4, .. })
            ]
        ),
        "{ev:?}"
    );
    assert_eq!(
        last_server_error(&s.poll_transmit().unwrap()),
        Some(i_errno::IESTREAMACCEPT)
    );

    // An unknown byte while running.
    let mut s = running_server(t0, 1);
    s.handle_input(t0, &[0x42]);
    let ev = server_events(&mut s);
    let [ServerEvent::Failed(e)] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert!(e.to_string().contains("0x42"), "{e}");

    // The client: TEST_START before CREATE_STREAMS; EXCHANGE_RESULTS
    // before it ended the test.
    let mut c = client(t0, tcp_params(1));
    c.handle_input(t0, &[9, 1]);
    let ev = client_events(&mut c);
    assert!(
        matches!(
            &ev[..],
            [ClientEvent::Failed(Iperf3Error::Unexpected { got: 1, .. })]
        ),
        "{ev:?}"
    );
    let mut c = running_client(t0);
    c.handle_input(t0, &[13]);
    let ev = client_events(&mut c);
    assert!(
        matches!(
            &ev[..],
            [ClientEvent::Failed(Iperf3Error::Unexpected { got: 13, .. })]
        ),
        "{ev:?}"
    );
    assert_eq!(c.poll_transmit().unwrap(), [12]);
    // A repeated TEST_RUNNING is harmless.
    let mut c = running_client(t0);
    c.handle_input(t0, &[2, 2]);
    assert!(c.is_running() && client_events(&mut c).is_empty());
}

#[test]
fn server_error_whole_and_cut_short() {
    let t0 = Time::ZERO;
    let mut c = client(t0, tcp_params(1));
    c.handle_input(t0, &server_error(i_errno::IERECVPARAMS, 22)[..5]);
    assert!(client_events(&mut c).is_empty());
    c.handle_input(t0, &server_error(i_errno::IERECVPARAMS, 22)[5..]);
    assert_eq!(
        client_events(&mut c),
        [ClientEvent::ServerError {
            i_errno: 114,
            errno: Some(22)
        }]
    );
    assert!(c.is_closed() && c.poll_transmit().is_none());

    // 3.12's authentication failure: the first int32, then EOF.
    let mut c = client(t0, tcp_params(1));
    c.handle_input(t0, &server_error(i_errno::IEAUTHTEST, 0)[..5]);
    c.handle_eof();
    assert_eq!(
        client_events(&mut c),
        [ClientEvent::ServerError {
            i_errno: 142,
            errno: None
        }]
    );
    // Less than the first int32: a failure.
    let mut c = client(t0, tcp_params(1));
    c.handle_input(t0, &[0xfe, 0, 0]);
    c.handle_eof();
    assert!(matches!(
        &client_events(&mut c)[..],
        [ClientEvent::Failed(Iperf3Error::Closed(_))]
    ));
    // Half an errno and a silent server: the deadline reports what came.
    let mut c = client(t0, tcp_params(1));
    c.handle_input(t0, &server_error(7, 0)[..7]);
    c.handle_timeout(c.poll_timeout().unwrap());
    assert_eq!(
        client_events(&mut c),
        [ClientEvent::ServerError {
            i_errno: 7,
            errno: None
        }]
    );

    // While the driver opens the data streams (the client reads nothing
    // else then) a SERVER_ERROR still gets through at once.
    let mut c = client(t0, tcp_params(1));
    c.handle_input(t0, &[9, 10]);
    client_events(&mut c);
    c.handle_input(t0, &server_error(i_errno::IESTREAMACCEPT, 0));
    assert_eq!(
        client_events(&mut c),
        [ClientEvent::ServerError {
            i_errno: 204,
            errno: Some(0)
        }]
    );
}

#[test]
fn busy_and_terminate_signals() {
    let t0 = Time::ZERO;
    let mut c = client(t0, tcp_params(1));
    c.handle_input(t0, &[0xff]);
    assert_eq!(client_events(&mut c), [ClientEvent::ServerBusy]);
    assert!(c.is_closed());

    // SERVER_TERMINATE where the server's results JSON is due.
    let mut c = running_client(t0);
    c.end_test(t0);
    c.send_results(t0, &Results::from_json(&sample_results()).unwrap());
    c.handle_input(t0, &[13]);
    assert!(client_events(&mut c).is_empty(), "results were ready");
    c.handle_input(t0, &[11]);
    assert_eq!(client_events(&mut c), [ClientEvent::ServerTerminated]);

    // CLIENT_TERMINATE while running, while deciding, and where the
    // client's results are due.
    let mut s = running_server(t0, 2);
    s.handle_input(t0, &[12]);
    assert_eq!(server_events(&mut s), [ServerEvent::Aborted]);
    assert!(s.is_closed() && s.poll_transmit().is_none());
    let mut s = server(t0);
    s.handle_input(t0, &encode_json_frame(&tcp_params(1)));
    s.handle_input(t0, &[12]);
    let ev = server_events(&mut s);
    assert!(matches!(
        &ev[..],
        [ServerEvent::ParamsReceived(_), ServerEvent::Aborted]
    ));
    let mut s = running_server(t0, 1);
    s.handle_input(t0, &[4, 12]);
    assert_eq!(
        server_events(&mut s),
        [ServerEvent::Stop, ServerEvent::Aborted]
    );

    // Driver-initiated ends.
    let mut s = running_server(t0, 1);
    s.terminate();
    assert_eq!(s.poll_transmit().unwrap(), [11]);
    let mut s = server(t0);
    s.handle_input(t0, &encode_json_frame(&tcp_params(1)));
    s.refuse(i_errno::IEDURATION);
    assert_eq!(s.poll_transmit().unwrap(), server_error(5, 0));
    assert!(s.is_closed());
    let mut c = running_client(t0);
    c.abort();
    assert_eq!(c.poll_transmit().unwrap(), [12]);
    // Ending before the test runs aborts.
    let mut c = client(t0, tcp_params(1));
    c.end_test(t0);
    assert_eq!(c.poll_transmit().unwrap(), [12]);
    assert!(c.is_closed());
}

#[test]
fn eof_mid_test_fails_and_after_display_results_completes() {
    let t0 = Time::ZERO;
    let mut s = running_server(t0, 1);
    s.handle_eof();
    assert_eq!(
        server_events(&mut s),
        [ServerEvent::Failed(Iperf3Error::Closed(
            "in the middle of the test"
        ))]
    );
    assert!(s.poll_transmit().is_none());

    let mut c = running_client(t0);
    c.handle_eof();
    assert_eq!(
        client_events(&mut c),
        [ClientEvent::Failed(Iperf3Error::Closed(
            "in the middle of the test"
        ))]
    );

    // After DISPLAY_RESULTS both sides have the results: EOF instead of
    // IPERF_DONE still completes.
    let mut s = running_server(t0, 1);
    s.send_results(t0, &Results::from_json(&sample_results()).unwrap());
    s.handle_input(t0, &[4]);
    s.handle_input(t0, &frame(&sample_results()));
    let out = s.poll_transmit().unwrap();
    assert_eq!(out[0], 13);
    assert_eq!(*out.last().unwrap(), 14);
    s.handle_eof();
    let ev = server_events(&mut s);
    assert!(matches!(
        &ev[..],
        [
            ServerEvent::Stop,
            ServerEvent::PeerResults(_),
            ServerEvent::Done
        ]
    ));
}

#[test]
fn every_wait_has_a_deadline() {
    let t0 = Time::ZERO;
    // Silent client after the cookie.
    let mut s = server(t0);
    let at = s.poll_timeout().unwrap();
    assert_eq!(at, t0 + SETUP_TIMEOUT);
    s.handle_timeout(at - Duration::from_millis(1));
    assert!(!s.is_closed());
    s.handle_timeout(at);
    assert!(matches!(
        &server_events(&mut s)[..],
        [ServerEvent::Failed(Iperf3Error::Timeout(_))]
    ));
    assert_eq!(
        last_server_error(&s.poll_transmit().unwrap()),
        Some(i_errno::IERECVPARAMS)
    );

    // Half a parameters message, then silence.
    let mut s = server(t0);
    s.handle_input(t0, &frame(b"{\"tcp\":true}")[..7]);
    s.handle_timeout(t0 + SETUP_TIMEOUT);
    assert!(s.is_closed());

    // Deciding has no deadline (the driver's turn); the data streams do,
    // one for all of them: a stream arriving does not extend it.
    let mut s = server(t0);
    s.handle_input(t0, &encode_json_frame(&tcp_params(2)));
    assert_eq!(s.poll_timeout(), None);
    let t1 = t0 + Duration::from_secs(5);
    s.accept(t1, Duration::from_secs(42));
    assert_eq!(s.poll_timeout(), Some(t1 + SETUP_TIMEOUT));
    let t2 = t1 + Duration::from_secs(9);
    s.stream_attached(t2);
    assert_eq!(s.poll_timeout(), Some(t1 + SETUP_TIMEOUT));
    s.handle_timeout(t1 + SETUP_TIMEOUT);
    assert_eq!(
        last_server_error(&s.poll_transmit().unwrap()),
        Some(i_errno::IESTREAMACCEPT)
    );

    // The watchdog of a running test, given by the driver.
    let p = tcp_params(1);
    let wd = p.watchdog(WATCHDOG_GRACE, Duration::from_secs(600));
    assert_eq!(wd, Duration::from_secs(42));
    let mut s = running_server(t0, 1);
    assert_eq!(s.poll_timeout(), Some(t0 + wd));
    s.handle_timeout(t0 + wd);
    let ev = server_events(&mut s);
    assert!(matches!(
        &ev[..],
        [ServerEvent::Failed(Iperf3Error::Timeout(
            "waiting for the client to end the test"
        ))]
    ));
    // A watchdog beyond what Time holds means none, not a panic.
    let mut s = server(t0);
    s.handle_input(t0, &encode_json_frame(&tcp_params(1)));
    s.accept(t0, Duration::MAX);
    s.stream_attached(t0);
    assert!(s.is_running() && s.poll_timeout().is_none());

    // Client: each step.
    let mut c = client(t0, tcp_params(1));
    c.handle_timeout(t0 + SETUP_TIMEOUT);
    assert!(matches!(
        &client_events(&mut c)[..],
        [ClientEvent::Failed(Iperf3Error::Timeout(_))]
    ));
    assert_eq!(c.poll_transmit().unwrap(), [12]);
    let mut c = running_client(t0);
    assert_eq!(c.poll_timeout(), None);
    c.end_test(t0);
    assert_eq!(c.poll_timeout(), Some(t0 + RESULTS_TIMEOUT));
    c.handle_timeout(t0 + RESULTS_TIMEOUT);
    assert!(c.is_closed());
}

#[test]
fn results_given_early_are_held_until_their_turn() {
    let t0 = Time::ZERO;
    let r = Results::from_json(&sample_results()).unwrap();
    // Server: ours wait for the client's.
    let mut s = running_server(t0, 1);
    s.send_results(t0, &r);
    assert!(s.poll_transmit().is_none());
    s.handle_input(t0, &[4]);
    assert_eq!(s.poll_transmit().unwrap(), [13]);
    s.handle_input(t0, &frame(&sample_results())[..50]);
    assert!(s.poll_transmit().is_none());
    s.handle_input(t0, &frame(&sample_results())[50..]);
    let out = s.poll_transmit().unwrap();
    assert_eq!(out[..4], (out.len() as u32 - 5).to_be_bytes());
    s.handle_input(t0, &[16]);
    assert!(s.is_done());

    // Everything the server sends at once reaches a client in one read.
    let mut c = running_client(t0);
    c.send_results(t0, &r);
    c.end_test(t0);
    let mut all = vec![13];
    all.extend(frame(&sample_results()));
    all.push(14);
    c.handle_input(t0, &all);
    let ev = client_events(&mut c);
    assert!(
        matches!(&ev[..], [ClientEvent::PeerResults(_), ClientEvent::Done]),
        "{ev:?}"
    );
    let out = c.poll_transmit().unwrap();
    assert_eq!(out[0], 4);
    assert_eq!(*out.last().unwrap(), 16);
}

#[test]
fn a_peer_flooding_a_paused_machine_fails() {
    let t0 = Time::ZERO;
    let mut s = server(t0);
    s.handle_input(t0, &encode_json_frame(&tcp_params(1)));
    server_events(&mut s);
    s.handle_input(t0, &vec![0u8; PAUSED_INPUT_LIMIT + 1]);
    assert!(matches!(
        &server_events(&mut s)[..],
        [ServerEvent::Failed(Iperf3Error::Flooded { .. })]
    ));
}

// ---------------------------------------------------------------------------
// Fuzz
// ---------------------------------------------------------------------------

/// Drives a server the way a driver would, on whatever it emits.
/// `may_refuse`: turn down one request in eight.
fn drive_server(
    s: &mut Iperf3Server,
    now: Time,
    rng: &mut Rng,
    results: &Results,
    may_refuse: bool,
) {
    while let Some(ev) = s.poll_event() {
        match ev {
            ServerEvent::ParamsReceived(p) => {
                if may_refuse && rng.below(8) == 0 {
                    s.refuse(i_errno::IEUNIMP);
                } else {
                    s.accept(now, p.watchdog(WATCHDOG_GRACE, Duration::from_secs(60)));
                    for _ in 0..p.stream_count().min(300) {
                        s.stream_attached(now);
                    }
                }
            }
            ServerEvent::Stop => s.send_results(now, results),
            _ => {}
        }
    }
    s.poll_transmit();
}

fn drive_client(c: &mut Iperf3Client, now: Time, results: &Results) {
    while let Some(ev) = c.poll_event() {
        match ev {
            ClientEvent::OpenStreams { .. } => c.streams_open(now),
            ClientEvent::Running => c.end_test(now),
            ClientEvent::ResultsRequested => c.send_results(now, results),
            _ => {}
        }
    }
    c.poll_transmit();
}

fn random_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next() as u8).collect()
}

/// Where each message of a control stream ends.
fn message_ends(toks: &[Tok]) -> Vec<usize> {
    let mut end = 0;
    toks.iter()
        .map(|t| {
            end += match t {
                Tok::Cookie(c) => c.len(),
                Tok::State(_) => 1,
                Tok::Json(j) => 4 + j.len(),
            };
            end
        })
        .collect()
}

/// One random change: a byte flipped, a byte turned into a state code, or
/// the stream cut short.
fn mutate(buf: &mut Vec<u8>, rng: &mut Rng) {
    const CODES: [u8; 12] = [1, 2, 4, 9, 10, 11, 12, 13, 14, 16, 0xff, 0xfe];
    if buf.is_empty() {
        return;
    }
    let i = rng.below(buf.len());
    match rng.below(3) {
        0 => buf[i] ^= 1 << rng.below(8),
        1 => buf[i] = CODES[rng.below(CODES.len())],
        _ => buf.truncate(i),
    }
}

/// Feeds `data` in random pieces that never span two messages (real peers
/// wait for their turn, so a driver acts between messages).
fn feed_aligned(
    data: &[u8],
    ends: &[usize],
    rng: &mut Rng,
    mut input: impl FnMut(&[u8], &mut Rng),
) {
    let mut pos = 0;
    for &end in ends.iter().chain(std::iter::once(&data.len())) {
        let end = end.min(data.len());
        while pos < end {
            let n = (1 + rng.below(40)).min(end - pos);
            input(&data[pos..pos + n], rng);
            pos += n;
        }
    }
}

/// Client -> server bytes (after the cookie) and where their messages end,
/// then the same for server -> client.
type Transcript = (Vec<u8>, Vec<usize>, Vec<u8>, Vec<usize>);

#[test]
fn random_and_mutated_input_never_panics() {
    let t0 = Time::ZERO;
    let results = Results::from_json(&sample_results()).unwrap();
    let transcripts: Vec<Transcript> = CAPTURES
        .iter()
        .map(|(_, text, _)| {
            let cap = parse_capture(text);
            let c2s = &cap.c2s[COOKIE_LEN..];
            (
                c2s.to_vec(),
                message_ends(&tokens(c2s, false)),
                cap.s2c.clone(),
                message_ends(&tokens(&cap.s2c, false)),
            )
        })
        .collect();
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut completed = 0;
    for round in 0..2000 {
        // Even rounds: random bytes. Odd rounds: a real transcript with one
        // side changed once (or neither: then both must complete).
        let random = round % 2 == 0;
        let (mut to_server, mut server_ends, mut to_client, mut client_ends) = if random {
            let n = rng.below(300);
            (
                random_bytes(&mut rng, n),
                vec![],
                random_bytes(&mut rng, n),
                vec![],
            )
        } else {
            transcripts[rng.below(transcripts.len())].clone()
        };
        // 0: the server's input changed, 1: the client's, else neither.
        let changed = if random { 0 } else { rng.below(3) };
        match changed {
            0 if !random => mutate(&mut to_server, &mut rng),
            1 => mutate(&mut to_client, &mut rng),
            _ => {}
        }
        if random && round % 4 == 0 {
            // A plausible prefix, then garbage.
            let mut framed = (to_server.len() as u32).to_be_bytes().to_vec();
            framed.append(&mut to_server);
            to_server = framed;
            to_client.insert(0, 9);
            server_ends.clear();
            client_ends = vec![1];
        }

        let mut s = Iperf3Server::new(t0, COOKIE);
        let now = t0;
        feed_aligned(&to_server, &server_ends, &mut rng, |d, rng| {
            s.handle_input(now, d);
            drive_server(&mut s, now, rng, &results, changed == 0);
        });
        let mut c = Iperf3Client::new(t0, *COOKIE, tcp_params(1));
        feed_aligned(&to_client, &client_ends, &mut rng, |d, _| {
            c.handle_input(now, d);
            drive_client(&mut c, now, &results);
        });
        if random {
            assert!(
                !s.is_done() && !c.is_done(),
                "random bytes completed a test"
            );
        } else {
            if changed != 0 {
                assert!(
                    s.is_done(),
                    "round {round}: intact transcript did not complete"
                );
            }
            if changed != 1 {
                assert!(
                    c.is_done(),
                    "round {round}: intact transcript did not complete"
                );
            }
            completed += usize::from(s.is_done()) + usize::from(c.is_done());
        }

        if rng.below(2) == 0 {
            s.handle_eof();
        } else if let Some(at) = s.poll_timeout() {
            s.handle_timeout(at);
        }
        drive_server(&mut s, now, &mut rng, &results, true);
        assert!(s.is_closed() || s.poll_timeout().is_none());
        c.handle_eof();
        drive_client(&mut c, now, &results);
        assert!(c.is_closed());
    }
    assert!(completed > 1000, "{completed}");
}

/// iperf3's `-m` (3.19+) is MPTCP: a server runs it as an MPTCP test, a
/// client asks for it with `"mptcp":true` next to `"tcp":true`. Only UDP
/// with `-m` names no transport (refused with IEUNIMP, in convert.rs).
#[test]
fn mptcp_is_iperf3s_m_both_ways() {
    use crate::spec::{TestSpec, Transport};
    let p = Params::from_json(br#"{"tcp":true,"mptcp":true,"time":3,"parallel":2}"#).unwrap();
    let spec = convert::spec_from_params(&p).unwrap();
    assert_eq!((spec.transport, spec.parallel), (Transport::Mptcp, 2));
    let mut ours = TestSpec::default_stream();
    ours.transport = Transport::Mptcp;
    let params = convert::params_from_spec(&ours, false).unwrap();
    assert!(params.mptcp && params.protocol == Protocol::Tcp);
    let json: Value = serde_json::from_slice(&params.to_json()).unwrap();
    assert_eq!(
        (&json["tcp"], &json["mptcp"]),
        (&Value::Bool(true), &Value::Bool(true))
    );
    let back = convert::spec_from_params(&Params::from_json(&params.to_json()).unwrap()).unwrap();
    assert_eq!(back.transport, Transport::Mptcp);
}

#[test]
fn a_clients_results_may_be_no_larger_than_its_tests_streams_need() {
    use super::wire::max_client_results_json;
    let t0 = Time::ZERO;
    for n in [1i64, 4, 128] {
        let max = max_client_results_json(n as usize);
        // Plenty for real results: 128 streams of iperf3 3.21's totals.
        assert!(max as usize > 8 * 1024 + n as usize * 300, "{n}: {max}");
        let mut s = running_server(t0, n);
        s.handle_input(t0, &[4]);
        assert_eq!(server_events(&mut s), [ServerEvent::Stop]);
        s.poll_transmit();
        // One byte over: refused on its length prefix, before buffering.
        s.handle_input(t0, &(max + 1).to_be_bytes());
        assert_eq!(
            server_events(&mut s),
            [ServerEvent::Failed(Iperf3Error::TooLarge {
                len: max + 1,
                max
            })],
            "{n} streams"
        );
        assert_eq!(
            last_server_error(&s.poll_transmit().unwrap()),
            Some(i_errno::IERECVRESULTS)
        );
    }
}

#[test]
fn sctp_is_read_as_sctp_and_refused_as_not_implemented() {
    let p = Params::from_json(br#"{"tcp":true,"sctp":true,"time":1,"parallel":1}"#).unwrap();
    assert_eq!(p.protocol, Protocol::Sctp);
    let r = convert::spec_from_params(&p).unwrap_err();
    assert_eq!(r.i_errno, i_errno::IEUNIMP, "{}", r.reason);
    assert!(r.reason.contains("SCTP"), "{}", r.reason);
    // And written back as iperf3 writes it.
    let j: Value = serde_json::from_slice(&serde_json::to_vec(&p).unwrap()).unwrap();
    assert_eq!(j["sctp"], true);
    assert!(j.get("tcp").is_none());
}
