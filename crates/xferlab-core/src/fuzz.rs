//! Every wire parser driven by arbitrary bytes, for the `cargo fuzz`
//! targets in `fuzz/` and for the stable test below, which runs the same
//! drivers over the checked-in corpus and mutations of it in the normal
//! test suite. Each input must end in a value, an error or a wait: never
//! a panic, and never a buffer beyond the limit of the state it is in.
//!
//! The first byte of an input picks how the rest is cut into reads, so
//! the fuzzer also explores frames split across reads.

use std::time::Duration;

use crate::time::Time;

use crate::iperf3::{
    ClientEvent as Iperf3ClientEvent, Iperf3Client, Iperf3Server, Params, Results,
    ServerEvent as Iperf3ServerEvent, UdpHeader,
};
use crate::outbox::Machine;
use crate::proto::auth::{ServerAuth, NONCE_LEN};
use crate::proto::fixtures::{self, report};
use crate::proto::wire::{Attach, Preamble, ATTACH_LEN, PREAMBLE_LEN, VERSION};
use crate::proto::{ClientControl, ClientEvent, ServerControl, ServerEvent, ServerPolicy, Welcome};
use crate::result::{Endpoint, Software};
use crate::spec::TestSpec;

/// Feeds `data` (after its first byte) to `m` in reads of a size the
/// first byte picks, acting on each event as a driver would (`act`) and
/// draining what the machine sends, then ends the input both ways
/// (timeout, end of stream).
fn feed<M: Machine>(m: &mut M, data: &[u8], mut act: impl FnMut(&mut M, Time, M::Event)) {
    let t0 = origin();
    let (chunk, rest) = match data.split_first() {
        Some((c, rest)) => (usize::from(*c).max(1), rest),
        None => (1, data),
    };
    let drain = |m: &mut M, now: Time, act: &mut dyn FnMut(&mut M, Time, M::Event)| {
        while let Some(ev) = m.poll_event() {
            act(m, now, ev);
        }
        while m.poll_transmit().is_some() {}
    };
    drain(m, t0, &mut act);
    for (i, part) in rest.chunks(chunk).enumerate() {
        let now = t0 + Duration::from_millis(i as u64);
        m.handle_input(now, part);
        drain(m, now, &mut act);
        if m.is_closed() {
            break;
        }
    }
    let end = t0 + Duration::from_secs(86_400 * 2);
    m.handle_timeout(end);
    m.handle_eof();
    drain(m, end, &mut act);
}

/// Tests the fuzzed machines may run.
const MAX_DURATION: Duration = Duration::from_secs(3600);

fn welcome() -> Welcome {
    fixtures::welcome(software(), MAX_DURATION)
}

fn software() -> Software {
    fixtures::software("fuzz")
}

/// A server's driver: accepts what is asked, starts, reports.
fn xferlab_server_act(s: &mut ServerControl, now: Time, ev: ServerEvent) {
    match ev {
        ServerEvent::TestRequested(_) => {
            s.accept(now, welcome());
            s.flows_attached(now, Some(Duration::from_secs(1)));
        }
        ServerEvent::StopRequested => s.send_results(now, &report(Endpoint::Server)),
        ServerEvent::PeerResults(_) | ServerEvent::Failed(_) => {}
    }
}

/// A client's driver: stops once started, reports once the server did.
fn xferlab_client_act(c: &mut ClientControl, now: Time, ev: ClientEvent) {
    match ev {
        ClientEvent::Started => c.stop(now),
        ClientEvent::PeerResults(_) => c.send_results(&report(Endpoint::Client)),
        _ => {}
    }
}

/// Where virtual time starts (the machines take time, never read it).
fn origin() -> Time {
    Time::ZERO
}

fn policy() -> ServerPolicy {
    fixtures::policy(MAX_DURATION)
}

/// xferlab's control protocol, server side (with and without
/// authentication), and the preamble and attach records.
pub fn xferlab_server(data: &[u8]) {
    let t0 = origin();
    feed(
        &mut ServerControl::new(t0, VERSION, policy()),
        data,
        xferlab_server_act,
    );
    let mut s = ServerControl::new(t0, VERSION, policy());
    s.require_auth(ServerAuth {
        keys: std::sync::Arc::new(vec![b"a key of sixteen bytes".to_vec()]),
        nonce: [1; NONCE_LEN],
    });
    feed(&mut s, data, xferlab_server_act);
    if let Some(p) = data.get(..PREAMBLE_LEN) {
        let _ = Preamble::decode(p.try_into().expect("8 bytes"));
    }
    if let Some(a) = data.get(..ATTACH_LEN) {
        let _ = Attach::decode(a.try_into().expect("20 bytes"));
    }
}

/// xferlab's control protocol, client side (a hostile server).
pub fn xferlab_client(data: &[u8]) {
    let mut c = ClientControl::new(origin(), software(), TestSpec::default_stream(), None)
        .with_auth_key(Some(b"a key of sixteen bytes".to_vec()));
    c.poll_transmit();
    feed(&mut c, data, xferlab_client_act);
}

/// iperf3's control protocol, server side (after the cookie).
pub fn iperf3_server(data: &[u8]) {
    let cookie = *b"fuzzfuzzfuzzfuzzfuzzfuzzfuzzfuzzfuzz\0";
    let mut s = Iperf3Server::new(origin(), &cookie);
    feed(&mut s, data, |s, now, ev| match ev {
        Iperf3ServerEvent::ParamsReceived(p) => {
            let n = p.stream_count();
            s.accept(now, Duration::from_secs(60));
            for _ in 0..n.min(256) {
                s.stream_attached(now);
            }
        }
        Iperf3ServerEvent::Stop => s.send_results(now, &iperf3_results()),
        _ => {}
    });
}

/// iperf3's control protocol, client side (a hostile server).
pub fn iperf3_client(data: &[u8]) {
    let cookie = *b"fuzzfuzzfuzzfuzzfuzzfuzzfuzzfuzzfuzz\0";
    let p = Params {
        parallel: 2,
        time: 1,
        ..Params::default()
    };
    feed(
        &mut Iperf3Client::new(origin(), cookie, p),
        data,
        |c, now, ev| match ev {
            Iperf3ClientEvent::OpenStreams { .. } => c.streams_open(now),
            Iperf3ClientEvent::Running => c.end_test(now),
            Iperf3ClientEvent::ResultsRequested => c.send_results(now, &iperf3_results()),
            _ => {}
        },
    );
}

fn iperf3_results() -> Results {
    crate::iperf3::convert::results_from_side(
        &report(Endpoint::Server),
        crate::spec::Transport::Tcp,
    )
}

/// iperf3's parameters and results JSON, parsed directly.
pub fn iperf3_json(data: &[u8]) {
    if let Ok(p) = Params::from_json(data) {
        let _ = crate::iperf3::convert::spec_from_params(&p);
        let _ = serde_json::to_vec(&p);
    }
    if let Ok(r) = Results::from_json(data) {
        let _ = r.to_json();
    }
}

/// The headers at the front of test datagrams: xferlab's and iperf3's
/// (32- and 64-bit counters).
pub fn udp_headers(data: &[u8]) {
    let _ = crate::datagram::read_header(data);
    for counters_64bit in [false, true] {
        let _ = UdpHeader { counters_64bit }.read(data);
    }
}

/// A driver: arbitrary bytes in, nothing out (a panic is the finding).
pub type Driver = fn(&[u8]);

/// The drivers by name, as the fuzz targets and the corpus use them.
pub const TARGETS: [(&str, Driver); 7] = [
    ("xferlab_server", xferlab_server),
    ("xferlab_client", xferlab_client),
    ("iperf3_server", iperf3_server),
    ("iperf3_client", iperf3_client),
    ("iperf3_json", iperf3_json),
    ("udp_headers", udp_headers),
    ("dccp", crate::dccp::fuzz::dccp),
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A tiny deterministic generator (xorshift64*), so a failure
    /// reproduces.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    /// Flips, inserts, deletes and duplicates bytes, as a fuzzer's
    /// simplest mutations do.
    fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
        let mut v = seed.to_vec();
        for _ in 0..1 + rng.below(8) {
            let at = rng.below(v.len() + 1);
            match rng.below(5) {
                0 if !v.is_empty() => {
                    let i = at.min(v.len() - 1);
                    v[i] ^= 1 << rng.below(8);
                }
                1 => v.insert(at, rng.next() as u8),
                2 if at < v.len() => {
                    v.remove(at);
                }
                3 if !v.is_empty() => {
                    let i = at.min(v.len() - 1);
                    v[i] = [0, 0xff, b'"', b'{', b'[', b'-', b'9'][rng.below(7)];
                }
                _ => {
                    let end = (at + rng.below(16)).min(v.len());
                    let dup = v[at.min(end)..end].to_vec();
                    v.splice(at..at, dup);
                }
            }
        }
        v
    }

    /// Every corpus file, and 300 mutations of each, through its target.
    #[test]
    fn every_parser_survives_its_corpus_and_mutations_of_it() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for (name, run) in TARGETS {
            let dir = root.join(name);
            let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .map(|e| std::fs::read(e.unwrap().path()).unwrap())
                .collect();
            assert!(!seeds.is_empty(), "{name}: empty corpus");
            seeds.sort();
            for seed in &seeds {
                run(seed);
                for _ in 0..300 {
                    run(&mutate(&mut rng, seed));
                }
            }
        }
    }
}
