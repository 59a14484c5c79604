//! The two state machines talking to each other in memory, on virtual time.

use std::time::Duration;

use crate::time::Time;

use super::fixtures::{self, report};
use super::wire::{encode_frame, ConnKind, Preamble, PREAMBLE_LEN, VERSION};
use super::*;
use crate::outbox::Machine;
use crate::result::{Endpoint, Software};
use crate::spec::TestSpec;

/// Tests here may last at most this long.
const MAX_DURATION: Duration = Duration::from_secs(60);

fn software() -> Software {
    fixtures::software("test")
}

fn policy() -> ServerPolicy {
    fixtures::policy(MAX_DURATION)
}

fn welcome() -> Welcome {
    fixtures::welcome(software(), MAX_DURATION)
}

/// A server that has read the client's preamble, as the dispatcher does.
fn server_for(client: &mut ClientControl, t0: Time) -> ServerControl {
    let bytes = client.poll_transmit().unwrap();
    let mut pre = [0u8; PREAMBLE_LEN];
    pre.copy_from_slice(&bytes[..PREAMBLE_LEN]);
    let p = Preamble::decode(&pre).unwrap();
    assert_eq!(p.kind, ConnKind::Control);
    let mut server = ServerControl::new(t0, p.version, policy());
    server.handle_input(t0, &bytes[PREAMBLE_LEN..]);
    server
}

/// A client asking for `attach_wait` and a server that has read its
/// hello and welcomed the test.
fn welcomed(t0: Time, attach_wait: Option<Duration>) -> (ClientControl, ServerControl) {
    let mut c = ClientControl::new(t0, software(), TestSpec::default_stream(), attach_wait);
    let mut s = server_for(&mut c, t0);
    s.poll_event();
    s.accept(t0, welcome());
    (c, s)
}

fn pump(client: &mut ClientControl, server: &mut ServerControl, now: Time) {
    for _ in 0..4 {
        if let Some(b) = client.poll_transmit() {
            server.handle_input(now, &b);
        }
        if let Some(b) = server.poll_transmit() {
            client.handle_input(now, &b);
        }
    }
}

#[test]
fn a_whole_test_exchanges_results_both_ways() {
    let t0 = Time::ZERO;
    let mut c = ClientControl::new(t0, software(), TestSpec::default_stream(), None);
    let mut s = server_for(&mut c, t0);
    let Some(ServerEvent::TestRequested(spec)) = s.poll_event() else {
        panic!("no request")
    };
    assert_eq!(*spec, TestSpec::default_stream());
    s.accept(t0, welcome());
    pump(&mut c, &mut s, t0);
    assert!(matches!(c.poll_event(), Some(ClientEvent::Welcome(_))));
    s.flows_attached(t0, Some(Duration::from_secs(10)));
    pump(&mut c, &mut s, t0);
    assert!(matches!(c.poll_event(), Some(ClientEvent::Started)));
    assert!(s.is_running());
    let t1 = t0 + Duration::from_secs(10);
    c.stop(t1);
    pump(&mut c, &mut s, t1);
    assert!(matches!(s.poll_event(), Some(ServerEvent::StopRequested)));
    s.send_results(t1, &report(Endpoint::Server));
    pump(&mut c, &mut s, t1);
    let Some(ClientEvent::PeerResults(r)) = c.poll_event() else {
        panic!("no server results")
    };
    assert_eq!(r.endpoint, Endpoint::Server);
    c.send_results(&report(Endpoint::Client));
    pump(&mut c, &mut s, t1);
    let Some(ServerEvent::PeerResults(r)) = s.poll_event() else {
        panic!("no client results")
    };
    assert_eq!(r.endpoint, Endpoint::Client);
    assert!(c.is_closed() && s.is_closed());
    assert!(c.poll_event().is_none() && s.poll_event().is_none());
}

#[test]
fn version_mismatch_is_reported_on_both_sides() {
    let t0 = Time::ZERO;
    let mut s = ServerControl::new(t0, VERSION + 1, policy());
    assert!(matches!(
        s.poll_event(),
        Some(ServerEvent::Failed(ProtoError::VersionMismatch { theirs, .. })) if theirs == VERSION + 1
    ));
    // A client meeting a newer server.
    let mut c = ClientControl::new(t0, software(), TestSpec::default_stream(), None);
    let mut newer = Preamble::new(ConnKind::Control);
    newer.version = VERSION + 1;
    c.handle_input(t0, &newer.encode());
    let Some(ClientEvent::Failed(e)) = c.poll_event() else {
        panic!()
    };
    assert!(e.to_string().contains("same xferlab release"), "{e}");
}

#[test]
fn the_server_answers_garbage_with_an_error_and_closes() {
    let t0 = Time::ZERO;
    let mut s = ServerControl::new(t0, VERSION, policy());
    let mut junk = 7u32.to_be_bytes().to_vec();
    junk.extend_from_slice(b"{not js");
    s.handle_input(t0, &junk);
    assert!(matches!(
        s.poll_event(),
        Some(ServerEvent::Failed(ProtoError::Malformed(_)))
    ));
    assert!(s.is_closed());
    let out = s.poll_transmit().unwrap();
    // preamble, then an error frame the client can print
    let mut c = ClientControl::new(t0, software(), TestSpec::default_stream(), None);
    c.handle_input(t0, &out);
    let Some(ClientEvent::Failed(ProtoError::Peer { code, .. })) = c.poll_event() else {
        panic!()
    };
    assert_eq!(code, ErrorCode::BadMessage);
}

#[test]
fn oversized_and_out_of_order_messages_are_refused() {
    let t0 = Time::ZERO;
    let mut s = ServerControl::new(t0, VERSION, policy());
    s.handle_input(t0, &(2u32 << 30).to_be_bytes());
    assert!(matches!(
        s.poll_event(),
        Some(ServerEvent::Failed(ProtoError::TooLarge { .. }))
    ));

    let mut s = ServerControl::new(t0, VERSION, policy());
    s.handle_input(t0, &encode_frame(&ClientMsg::Stop));
    let Some(ServerEvent::Failed(ProtoError::Malformed(m))) = s.poll_event() else {
        panic!()
    };
    assert!(m.contains("unexpected stop"), "{m}");
}

#[test]
fn a_request_over_the_servers_limits_is_rejected_with_the_reason() {
    let t0 = Time::ZERO;
    let mut spec = TestSpec::default_stream();
    spec.limit = crate::spec::Limit::Duration { seconds: 120.0 };
    let mut c = ClientControl::new(t0, software(), spec, None);
    let mut s = server_for(&mut c, t0);
    assert!(matches!(s.poll_event(), Some(ServerEvent::Failed(_))));
    pump(&mut c, &mut s, t0);
    let Some(ClientEvent::Failed(e)) = c.poll_event() else {
        panic!()
    };
    assert!(e.to_string().contains("--max-duration"), "{e}");
}

#[test]
fn every_wait_has_a_deadline() {
    let t0 = Time::ZERO;
    // Silent client after connecting.
    let mut s = ServerControl::new(t0, VERSION, policy());
    let at = s.poll_timeout().unwrap();
    s.handle_timeout(at - Duration::from_millis(1));
    assert!(!s.is_closed());
    s.handle_timeout(at);
    assert!(matches!(
        s.poll_event(),
        Some(ServerEvent::Failed(ProtoError::Timeout(_)))
    ));

    // A client that never stops a 10 s test: the watchdog fires after
    // the attach wait the client asked for (its last attach reply may
    // take that long to reach it, and it starts only then), the planned
    // time and the grace.
    for (asked, attach) in [
        (None, HANDSHAKE_TIMEOUT),
        (Some(Duration::from_secs(60)), Duration::from_secs(60)),
        (Some(Duration::from_secs(100_000)), MAX_ATTACH_WAIT),
    ] {
        let (_, mut s) = welcomed(t0, asked);
        s.flows_attached(t0, Some(Duration::from_secs(10)));
        let deadline = t0 + attach + Duration::from_secs(10) + RUNNING_GRACE;
        assert_eq!(s.poll_timeout(), Some(deadline), "{asked:?}");
        s.handle_timeout(deadline - Duration::from_millis(1));
        assert!(s.poll_event().is_none(), "{asked:?}");
        s.handle_timeout(deadline);
        assert!(
            matches!(
                s.poll_event(),
                Some(ServerEvent::Failed(ProtoError::Timeout(_)))
            ),
            "{asked:?}"
        );
    }

    // A server that never answers.
    let mut c = ClientControl::new(t0, software(), TestSpec::default_stream(), None);
    c.handle_timeout(t0 + HANDSHAKE_TIMEOUT);
    assert!(matches!(
        c.poll_event(),
        Some(ClientEvent::Failed(ProtoError::Timeout(_)))
    ));
}

#[test]
fn both_ends_wait_for_the_flows_as_long_as_the_client_asked_within_limits() {
    let t0 = Time::ZERO;
    for (asked, waits) in [
        (None, HANDSHAKE_TIMEOUT),
        (Some(Duration::from_secs(2)), HANDSHAKE_TIMEOUT),
        (Some(Duration::from_secs(40)), Duration::from_secs(40)),
        (Some(Duration::from_secs(100_000)), MAX_ATTACH_WAIT),
    ] {
        let (mut c, mut s) = welcomed(t0, asked);
        assert_eq!(s.poll_timeout(), Some(t0 + waits), "{asked:?}");
        pump(&mut c, &mut s, t0);
        assert!(matches!(c.poll_event(), Some(ClientEvent::Welcome(_))));
        assert_eq!(c.poll_timeout(), Some(t0 + waits), "{asked:?}");
        // Still waiting just before; given up at the deadline.
        s.handle_timeout(t0 + waits - Duration::from_millis(1));
        assert!(s.poll_event().is_none());
        s.handle_timeout(t0 + waits);
        assert!(matches!(
            s.poll_event(),
            Some(ServerEvent::Failed(ProtoError::Timeout(_)))
        ));
    }
}

#[test]
fn a_vanished_client_fails_the_session_at_once() {
    let t0 = Time::ZERO;
    let (_, mut s) = welcomed(t0, None);
    s.flows_attached(t0, None);
    s.handle_eof();
    let Some(ServerEvent::Failed(ProtoError::Closed(when))) = s.poll_event() else {
        panic!()
    };
    assert_eq!(when, "in the middle of the test");
}

#[test]
fn random_bytes_never_panic_the_server() {
    // A small deterministic xorshift fuzz: arbitrary input must end in a
    // closed session or a pending state, never a panic.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let t0 = Time::ZERO;
    for round in 0..2000 {
        let mut s = ServerControl::new(t0, VERSION, policy());
        let len = (round % 64) + 1;
        let mut buf = Vec::with_capacity(len);
        for _ in 0..len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf.push(x as u8);
        }
        if round % 3 == 0 {
            // plausible length prefix, random body
            let body = buf.len() as u32;
            let mut framed = body.to_be_bytes().to_vec();
            framed.extend_from_slice(&buf);
            buf = framed;
        }
        s.handle_input(t0, &buf);
        while s.poll_event().is_some() {}
        s.handle_eof();
        assert!(s.is_closed());
    }
}

#[test]
fn an_oversized_report_keeps_its_totals_and_says_what_was_left_out() {
    use crate::result::{FlowEnd, FlowInterval, FlowReport, FlowRole, FlowTotal, SocketSettings};
    use crate::spec::FlowDirection;
    let iv = FlowInterval {
        start_s: 0.0,
        end_s: 1.0,
        omitted: false,
        bytes: 1,
        bits_per_second: 8.0,
        tcp: None,
        udp: None,
        transport: None,
    };
    let mut r = report(Endpoint::Server);
    r.flows.push(FlowReport {
        id: 0,
        direction: FlowDirection::C2s,
        role: FlowRole::Receiver,
        local: String::new(),
        remote: String::new(),
        socket: SocketSettings::default(),
        intervals: vec![iv; 1000],
        total: FlowTotal {
            start_s: 0.0,
            end_s: 1000.0,
            bytes: 1000,
            bits_per_second: 8.0,
            bytes_all: 1000,
            tcp: None,
            udp: None,
            transport: None,
        },
        end: FlowEnd::Completed,
    });
    let whole = fit_report(&r, 1 << 20);
    assert_eq!(*whole, r);
    let small = fit_report(&r, 10_000);
    assert!(small.flows[0].intervals.is_empty());
    assert_eq!(small.flows[0].total, r.flows[0].total);
    assert!(
        small.warnings[0].contains("per-flow intervals left out"),
        "{:?}",
        small.warnings
    );
    assert!(serde_json::to_vec(&*small).unwrap().len() < 10_000);
}

/// A server with authentication on, having read the client's preamble.
fn auth_server_for(client: &mut ClientControl, t0: Time, key: &[u8]) -> ServerControl {
    let bytes = client.poll_transmit().unwrap();
    let mut server = ServerControl::new(t0, VERSION, policy());
    server.require_auth(auth::ServerAuth {
        keys: std::sync::Arc::new(vec![b"some other key of the server".to_vec(), key.to_vec()]),
        nonce: [0x5a; auth::NONCE_LEN],
    });
    server.handle_input(t0, &bytes[PREAMBLE_LEN..]);
    server
}

#[test]
fn with_auth_on_the_hello_counts_only_once_the_challenge_is_answered() {
    let t0 = Time::ZERO;
    let key = b"a key both ends hold".to_vec();
    let mut c = ClientControl::new(t0, software(), TestSpec::default_stream(), None)
        .with_auth_key(Some(key.clone()));
    let mut s = auth_server_for(&mut c, t0, &key);
    assert!(
        s.poll_event().is_none(),
        "the hello counted before the answer"
    );
    pump(&mut c, &mut s, t0);
    let Some(ServerEvent::TestRequested(spec)) = s.poll_event() else {
        panic!("no request after a right answer")
    };
    assert_eq!(*spec, TestSpec::default_stream());
    s.accept(t0, welcome());
    pump(&mut c, &mut s, t0);
    assert!(matches!(c.poll_event(), Some(ClientEvent::Welcome(_))));
}

#[test]
fn a_challenge_left_unanswered_is_what_the_server_counts_as_a_failed_attempt() {
    let t0 = Time::ZERO;
    let key = b"a key both ends hold".to_vec();
    // The hello goes out, the challenge comes back, no answer follows.
    let mut c = ClientControl::new(t0, software(), TestSpec::default_stream(), None)
        .with_auth_key(Some(key.clone()));
    let mut s = auth_server_for(&mut c, t0, &key);
    assert!(s.poll_transmit().is_some(), "no challenge sent");
    assert!(!s.challenge_unanswered(), "still waiting");
    s.handle_timeout(t0 + HANDSHAKE_TIMEOUT);
    assert!(matches!(
        s.poll_event(),
        Some(ServerEvent::Failed(ProtoError::Timeout(_)))
    ));
    assert!(s.challenge_unanswered());
    // Closed instead: the same.
    let mut c = ClientControl::new(t0, software(), TestSpec::default_stream(), None)
        .with_auth_key(Some(key.clone()));
    let mut s = auth_server_for(&mut c, t0, &key);
    s.handle_eof();
    assert!(s.challenge_unanswered());
    // Answered: not counted (a wrong answer fails as AuthFailed instead).
    let mut c = ClientControl::new(t0, software(), TestSpec::default_stream(), None)
        .with_auth_key(Some(key.clone()));
    let mut s = auth_server_for(&mut c, t0, &key);
    pump(&mut c, &mut s, t0);
    s.handle_eof();
    assert!(!s.challenge_unanswered());
    // Authentication off, a client that says nothing: no challenge.
    let mut c = ClientControl::new(t0, software(), TestSpec::default_stream(), None);
    let bytes = c.poll_transmit().unwrap();
    let mut s = ServerControl::new(t0, VERSION, policy());
    s.handle_input(t0, &bytes[..PREAMBLE_LEN]);
    s.handle_eof();
    assert!(!s.challenge_unanswered());
}

#[test]
fn a_wrong_or_missing_key_fails_both_sides_with_auth_failed() {
    let t0 = Time::ZERO;
    let mut c = ClientControl::new(t0, software(), TestSpec::default_stream(), None)
        .with_auth_key(Some(b"the wrong key, 20 bytes".to_vec()));
    let mut s = auth_server_for(&mut c, t0, b"the right key, 20 bytes");
    pump(&mut c, &mut s, t0);
    assert!(matches!(
        s.poll_event(),
        Some(ServerEvent::Failed(ProtoError::AuthFailed))
    ));
    assert!(matches!(
        c.poll_event(),
        Some(ClientEvent::Failed(ProtoError::Peer {
            code: ErrorCode::AuthFailed,
            ..
        }))
    ));

    let mut c = ClientControl::new(t0, software(), TestSpec::default_stream(), None);
    let mut s = auth_server_for(&mut c, t0, b"the right key, 20 bytes");
    pump(&mut c, &mut s, t0);
    assert!(matches!(
        c.poll_event(),
        Some(ClientEvent::Failed(ProtoError::AuthRequired))
    ));
    assert!(matches!(
        s.poll_event(),
        Some(ServerEvent::Failed(ProtoError::Peer {
            code: ErrorCode::AuthFailed,
            ..
        }))
    ));

    // An answer to a challenge never sent (auth off) is out of place.
    let mut c = ClientControl::new(t0, software(), TestSpec::default_stream(), None);
    let mut s = server_for(&mut c, t0);
    s.poll_event();
    s.handle_input(t0, &encode_frame(&ClientMsg::Auth { mac: "00".into() }));
    assert!(matches!(
        s.poll_event(),
        Some(ServerEvent::Failed(ProtoError::Malformed(_)))
    ));
}

/// Once the test is over, the client's results may be as large as what
/// the test did: a hello that planned 8,192 rr flows and attached none
/// leaves room for about 8 MiB, not the 64 MiB cap (issue 34); a test
/// whose flows all ran keeps its planned room.
#[test]
fn the_clients_results_limit_follows_what_the_test_did() {
    let hour = Duration::from_secs(3600);
    let mut rr = TestSpec::default_rr(crate::rr::RrMode::TcpCrr);
    if let crate::spec::Pattern::Rr(r) = &mut rr.pattern {
        r.flows = 8192;
    }
    let planned = results_frame_limit(&rr, hour);
    assert_eq!(planned, MAX_RESULTS_FRAME);
    let mut idle = report(Endpoint::Server);
    idle.flows.clear();
    idle.duration_s = 0.1;
    let done = results_frame_limit_done(&rr, &idle, planned);
    assert!(done < 9 << 20, "{done}");

    // A 10 s stream whose flows ran: what was planned.
    let stream = TestSpec::default_stream();
    let planned = results_frame_limit(&stream, hour);
    let mut ran = crate::sample::bidir_result().server.unwrap();
    ran.duration_s = 10.0;
    assert!(!ran.flows.is_empty());
    assert_eq!(results_frame_limit_done(&stream, &ran, planned), planned);
}

#[test]
fn the_results_limit_follows_the_tests_flows_and_intervals() {
    let hour = Duration::from_secs(3600);
    let small = TestSpec::default_stream();
    let limit = results_frame_limit(&small, hour);
    assert!(limit < 1 << 20, "a 10 s one-flow test: {limit}");
    let mut big = TestSpec::default_stream();
    big.parallel = 128;
    big.direction = crate::spec::Direction::Bidir;
    big.interval_s = 0.05;
    big.limit = crate::spec::Limit::Duration { seconds: 3600.0 };
    assert_eq!(results_frame_limit(&big, hour), MAX_RESULTS_FRAME);
    // A byte-limited test may last the server's --max-duration.
    let mut bytes = TestSpec::default_stream();
    bytes.limit = crate::spec::Limit::Bytes { bytes: 1 << 30 };
    assert!(
        results_frame_limit(&bytes, Duration::from_secs(10)) < results_frame_limit(&bytes, hour)
    );
    // An rr test's request/response flows count as flows.
    let mut rr = TestSpec::default_rr(crate::rr::RrMode::TcpRr);
    if let crate::spec::Pattern::Rr(r) = &mut rr.pattern {
        r.flows = 1000;
    }
    assert!(results_frame_limit(&rr, hour) > 1000 * 16 * 1024);
    // And the server's own intervals stay within the budget.
    assert_eq!(interval_budget(&small, hour), small.interval_s);
    let i = interval_budget(&big, hour);
    assert!(256.0 * 3600.0 / i <= INTERVAL_BUDGET as f64, "{i}");
    assert_eq!((i / 0.05).round() * 0.05, i, "a multiple of -i");
}

#[test]
fn a_results_frame_over_the_tests_limit_is_refused_on_its_prefix() {
    let t0 = Time::ZERO;
    let (_, mut s) = welcomed(t0, None);
    s.flows_attached(t0, Some(Duration::from_secs(10)));
    s.handle_input(t0, &encode_frame(&ClientMsg::Stop));
    assert!(matches!(s.poll_event(), Some(ServerEvent::StopRequested)));
    let own = crate::sample::bidir_result().server.unwrap();
    s.send_results(t0, &own);
    // What the test did, here all it planned (its flow ran).
    let planned = results_frame_limit(&TestSpec::default_stream(), policy().max_duration);
    let limit = results_frame_limit_done(&TestSpec::default_stream(), &own, planned);
    assert_eq!(limit, planned);
    s.handle_input(t0, &(limit + 1).to_be_bytes());
    assert!(matches!(
        s.poll_event(),
        Some(ServerEvent::Failed(ProtoError::TooLarge { len, max })) if len == limit + 1 && max == limit
    ));
}
