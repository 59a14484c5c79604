//! DCCP's fuzz driver, for the `dccp` target in `fuzz/` and the stable
//! test of `crate::fuzz`, which runs every target over its corpus: the
//! protocol's own, here with it; the table of targets names it.

use std::time::Duration;

use super::checksum::{self, Pseudo};
use super::options::{Opt, Options};
use super::{ackvec, packet, Config, Connection, Stats};
use crate::time::Time;

/// DCCP's service code and ports in the `dccp` target (and its corpus).
const DCCP_SERVICE: u32 = 0x584C_4642;
const DCCP_SERVER_PORT: u16 = 5001;
const DCCP_CLIENT_PORT: u16 = 40000;

fn dccp_endpoint(client: bool) -> Connection {
    if client {
        Connection::connect(
            Time::ZERO,
            Config::client(DCCP_CLIENT_PORT, DCCP_SERVER_PORT, DCCP_SERVICE, 2),
        )
    } else {
        Connection::listen(Config::server(DCCP_SERVER_PORT, vec![DCCP_SERVICE]))
    }
}

/// DCCP (UDP-encapsulated, no pseudo-header): the first byte's low bit
/// picks a client or a listening server; the rest is datagrams, each
/// after a one-byte length. Each datagram is parsed on its own (packet,
/// options, Ack Vector runs), then its checksum is set right, so
/// mutations get past the checksum into the connection machine, and it
/// is handed to the endpoint, whose replies and events are drained.
pub fn dccp(data: &[u8]) {
    dccp_run(data);
}

/// [`dccp`], returning the endpoint's counters after the input.
fn dccp_run(data: &[u8]) -> Option<Stats> {
    let (&mode, mut rest) = data.split_first()?;
    let mut conn = dccp_endpoint(mode & 1 == 1);
    let mut out = [0u8; 2048];
    let mut fixed = [0u8; 256];
    let mut now = Time::ZERO;
    let drain = |c: &mut Connection, now: Time, out: &mut [u8]| {
        while c.poll_event().is_some() {}
        while c.poll_congestion().is_some() {}
        while c.poll_transmit(now, out).is_some() {}
    };
    drain(&mut conn, now, &mut out);
    while let Some((&len, tail)) = rest.split_first() {
        let n = usize::from(len).min(tail.len());
        let (dgram, next) = tail.split_at(n);
        rest = next;
        now += Duration::from_millis(1 + u64::from(len % 7));
        if let Ok(p) = packet::parse(dgram) {
            for o in Options::new(p.options) {
                if let Ok((Opt::AckVector { cells, .. }, _)) = o {
                    let _ = ackvec::Runs::new(p.header.seq, cells).count();
                }
            }
        }
        let f = &mut fixed[..n];
        f.copy_from_slice(dgram);
        if n >= 12 {
            let offset = usize::from(f[4]) * 4;
            if let Some(covered) = checksum::covered_len(f[5] & 0x0F, offset, n) {
                let c = checksum::compute(&Pseudo::None, f, covered);
                f[6..8].copy_from_slice(&c.to_be_bytes());
            }
        }
        conn.handle_datagram_ecn(now, f, len & 0x80 != 0);
        drain(&mut conn, now, &mut out);
        if conn.is_closed() {
            break;
        }
    }
    for _ in 0..4 {
        match conn.poll_timeout() {
            Some(t) => {
                now = t.max(now);
                conn.handle_timeout(now);
                drain(&mut conn, now, &mut out);
            }
            None => break,
        }
    }
    Some(conn.stats())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// One real exchange (handshake, data from one side, a close by
    /// that side): what the client sent and what the server sent, each
    /// as the other side's input in the `dccp` target's format.
    fn dccp_exchange(client_sends: bool) -> (Vec<u8>, Vec<u8>) {
        let mut client = dccp_endpoint(true);
        let mut server = dccp_endpoint(false);
        let (mut to_server, mut to_client) = (vec![0u8], vec![1u8]);
        let mut buf = [0u8; 2048];
        let mut now = Time::ZERO;
        for step in 0..40u64 {
            now += Duration::from_millis(5);
            let sender = if client_sends {
                &mut client
            } else {
                &mut server
            };
            if step == 10 {
                sender.send(&[7u8; 100]);
            }
            if step == 30 {
                sender.close(now);
            }
            while let Some(n) = client.poll_transmit(now, &mut buf) {
                to_server.push(n as u8);
                to_server.extend_from_slice(&buf[..n]);
                server.handle_datagram(now, &buf[..n]);
            }
            while let Some(n) = server.poll_transmit(now, &mut buf) {
                to_client.push(n as u8);
                to_client.extend_from_slice(&buf[..n]);
                client.handle_datagram(now, &buf[..n]);
            }
            while client.poll_event().is_some() || server.poll_event().is_some() {}
        }
        (to_server, to_client)
    }

    /// Writes fuzz/corpus/dccp: the client's packets of an exchange in
    /// which it sends (the server's input), and the server's of one in
    /// which the server sends (the client's input). `cargo test -p
    /// xferlab-core --lib write_dccp_corpus -- --ignored` after a change
    /// of the wire format.
    #[test]
    #[ignore = "writes the corpus"]
    fn write_dccp_corpus() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/dccp");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("server-side"), dccp_exchange(true).0).unwrap();
        std::fs::write(dir.join("client-side"), dccp_exchange(false).1).unwrap();
    }

    /// The corpus is worth mutating: replayed, each side's seed gets the
    /// other through the handshake to data.
    #[test]
    fn the_dccp_corpus_reaches_data_transfer() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/dccp");
        for (file, bytes) in [("server-side", 100), ("client-side", 100)] {
            let seed = std::fs::read(dir.join(file)).unwrap();
            let stats = dccp_run(&seed).unwrap();
            assert_eq!(stats.data_bytes_received, bytes, "{file}: {stats:?}");
        }
    }
}
