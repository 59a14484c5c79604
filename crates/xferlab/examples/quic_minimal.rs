//! quinn-proto driven by the minimal loop: one process, a server thread
//! and a client thread on loopback, each a blocking `UdpSocket`, one
//! `send_to` per packet (no GSO), one `recv_from` per packet (no GRO),
//! the read timeout set to the connection's next timer. The client writes
//! one unidirectional stream for `-t` seconds; the server reads it. It
//! prints one JSON line: bytes the server read and the seconds between
//! its first and last byte.
//!
//! The connection runs with what xferlab's flow chooses for the same path
//! (bench/quic-stream passes them from xferlab's own result): the largest
//! UDP payload (`--payload`), the stream and connection receive windows
//! (`--window`) and the send window (twice the cwnd at most; here the
//! window), the sockets' buffers (`--buffer`), CUBIC. So the difference
//! to xferlab is its loop: batched receives and GSO trains, its pacing of
//! writes, its bookkeeping.
//!
//! `cargo run --release --example quic_minimal -- [-t SECS] [--payload BYTES] [--window BYTES] [--buffer BYTES]`

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::congestion::CubicConfig;
use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig,
    Event, MtuDiscoveryConfig, ServerConfig, StreamEvent, TransportConfig, VarInt,
};
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};

const ALPN: &[u8] = b"minimal";
const CHUNK: usize = 1 << 20;

struct Args {
    secs: f64,
    payload: u16,
    window: u64,
    buffer: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        secs: 5.0,
        payload: 1452,
        window: 1_250_000,
        buffer: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {v}: {e}");
        match flag.as_str() {
            "-t" => a.secs = v.parse().map_err(|e| bad(&e))?,
            "--payload" => a.payload = v.parse().map_err(|e| bad(&e))?,
            "--window" => a.window = v.parse().map_err(|e| bad(&e))?,
            "--buffer" => a.buffer = v.parse().map_err(|e| bad(&e))?,
            _ => {
                return Err(format!(
                    "unknown flag {flag} (-t, --payload, --window, --buffer)"
                ))
            }
        }
    }
    Ok(a)
}

fn transport(a: &Args) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    let mut mtud = MtuDiscoveryConfig::default();
    mtud.upper_bound(a.payload);
    t.mtu_discovery_config(Some(mtud));
    let w = VarInt::from_u64(a.window).unwrap_or(VarInt::MAX);
    t.stream_receive_window(w)
        .receive_window(w)
        .send_window(a.window)
        .congestion_controller_factory(Arc::new(CubicConfig::default()));
    Arc::new(t)
}

/// One end: its socket, endpoint and (once there) its connection.
struct End {
    sock: UdpSocket,
    endpoint: Endpoint,
    conn: Option<(ConnectionHandle, Connection)>,
    tx: Vec<u8>,
    rx: Vec<u8>,
}

impl End {
    fn new(server: Option<Arc<ServerConfig>>, payload: u16, buffer: usize) -> End {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("a loopback UDP socket");
        if buffer > 0 {
            // As xferlab sizes a flow's socket (SO_*BUF; the kernel caps
            // them at net.core.*mem_max).
            let s = socket2::SockRef::from(&sock);
            s.set_recv_buffer_size(buffer).ok();
            s.set_send_buffer_size(buffer).ok();
        }
        let mut ep = EndpointConfig::default();
        ep.max_udp_payload_size(payload)
            .expect("a payload size of 1200..65527");
        End {
            sock,
            endpoint: Endpoint::new(Arc::new(ep), server, true, None),
            conn: None,
            tx: Vec::with_capacity(usize::from(payload)),
            rx: vec![0; 65_536],
        }
    }

    /// Sends what the connection has to send, a packet a call; the
    /// endpoint hears of the connection's events first.
    fn flush(&mut self) {
        let Some((h, c)) = self.conn.as_mut() else {
            return;
        };
        let now = Instant::now();
        while let Some(ev) = c.poll_endpoint_events() {
            if let Some(back) = self.endpoint.handle_event(*h, ev) {
                c.handle_event(back);
            }
        }
        loop {
            self.tx.clear();
            let Some(t) = c.poll_transmit(now, 1, &mut self.tx) else {
                break;
            };
            let _ = self.sock.send_to(&self.tx[..t.size], t.destination);
        }
    }

    /// Waits for one datagram until the connection's next timer (at most
    /// `cap`) and hands it to the endpoint, or runs the expired timer.
    fn turn(&mut self, server: Option<&Arc<ServerConfig>>, cap: Duration) {
        let now = Instant::now();
        let wait = self
            .conn
            .as_mut()
            .and_then(|(_, c)| c.poll_timeout())
            .map_or(cap, |t| t.saturating_duration_since(now).min(cap))
            .max(Duration::from_micros(1));
        self.sock.set_read_timeout(Some(wait)).ok();
        match self.sock.recv_from(&mut self.rx) {
            Ok((n, from)) => {
                let now = Instant::now();
                let data = BytesMut::from(&self.rx[..n]);
                let mut resp = Vec::new();
                match self.endpoint.handle(now, from, None, None, data, &mut resp) {
                    Some(DatagramEvent::ConnectionEvent(_, ev)) => {
                        if let Some((_, c)) = self.conn.as_mut() {
                            c.handle_event(ev);
                        }
                    }
                    Some(DatagramEvent::NewConnection(inc)) if self.conn.is_none() => {
                        let cfg = server.cloned();
                        if let Ok(hc) = self.endpoint.accept(inc, now, &mut resp, cfg) {
                            self.conn = Some(hc);
                        }
                    }
                    Some(DatagramEvent::NewConnection(inc)) => {
                        self.endpoint.ignore(inc);
                    }
                    Some(DatagramEvent::Response(t)) => {
                        let _ = self.sock.send_to(&resp[..t.size], t.destination);
                    }
                    None => {}
                }
            }
            Err(_) => {
                if let Some((_, c)) = self.conn.as_mut() {
                    c.handle_timeout(Instant::now());
                }
            }
        }
    }
}

fn server(mut end: End, cfg: Arc<ServerConfig>) -> (u64, f64) {
    let (mut bytes, mut first, mut last) = (0u64, None, Instant::now());
    let mut stream = None;
    loop {
        end.turn(Some(&cfg), Duration::from_secs(5));
        let Some((_, c)) = end.conn.as_mut() else {
            continue;
        };
        while let Some(ev) = c.poll() {
            match ev {
                Event::ConnectionLost { .. } => {
                    let secs = first.map_or(0.0, |f: Instant| (last - f).as_secs_f64());
                    return (bytes, secs);
                }
                Event::Stream(StreamEvent::Opened { dir: Dir::Uni }) => {
                    stream = c.streams().accept(Dir::Uni);
                }
                _ => {}
            }
        }
        if let Some(id) = stream {
            let mut rs = c.recv_stream(id);
            if let Ok(mut chunks) = rs.read(true) {
                while let Ok(Some(ch)) = chunks.next(usize::MAX) {
                    let now = Instant::now();
                    first.get_or_insert(now);
                    last = now;
                    bytes += ch.bytes.len() as u64;
                }
                let _ = chunks.finalize();
            };
        }
        end.flush();
    }
}

fn client(mut end: End, cfg: ClientConfig, to: SocketAddr, secs: f64) {
    let h = end
        .endpoint
        .connect(Instant::now(), cfg, to, "localhost")
        .expect("a connection");
    end.conn = Some(h);
    let data = vec![0x5au8; CHUNK];
    let mut stream = None;
    let mut until = None;
    let mut finished_at = None;
    loop {
        let (_, c) = end.conn.as_mut().expect("the client's connection");
        let now = Instant::now();
        while let Some(ev) = c.poll() {
            match ev {
                Event::Connected => {
                    stream = c.streams().open(Dir::Uni);
                    until = Some(now + Duration::from_secs_f64(secs));
                }
                // Every byte of the finished stream acknowledged.
                Event::Stream(StreamEvent::Finished { .. }) => {
                    c.close(now, VarInt::from_u32(0), bytes::Bytes::new());
                    end.flush();
                    return;
                }
                Event::ConnectionLost { .. } => return,
                _ => {}
            }
        }
        match (stream, until) {
            (Some(id), Some(t)) if now < t => {
                let mut ss = c.send_stream(id);
                while let Ok(n) = ss.write(&data) {
                    if n < data.len() {
                        break;
                    }
                }
            }
            (Some(id), Some(_)) if finished_at.is_none() => {
                let _ = c.send_stream(id).finish();
                finished_at = Some(now);
            }
            _ => {}
        }
        if finished_at.is_some_and(|at| now - at > Duration::from_secs(5)) {
            c.close(now, VarInt::from_u32(1), bytes::Bytes::new());
            end.flush();
            return;
        }
        end.flush();
        end.turn(None, Duration::from_millis(100));
    }
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("quic_minimal: {e}");
            std::process::exit(2);
        }
    };
    let key = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("a certificate");
    let cert = CertificateDer::from(key.cert.der().to_vec());
    let pkey = PrivatePkcs8KeyDer::from(key.signing_key.serialize_der());
    let provider = Arc::new(rustls::crypto::ring::default_provider());

    let mut tls = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], pkey.into())
        .expect("the server's TLS");
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let mut scfg = ServerConfig::with_crypto(Arc::new(QuicServerConfig::try_from(tls).unwrap()));
    scfg.transport_config(transport(&a));
    let scfg = Arc::new(scfg);

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(cert)
        .expect("the self-signed certificate as a root");
    let mut ctls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    ctls.alpn_protocols = vec![ALPN.to_vec()];
    let mut ccfg = ClientConfig::new(Arc::new(QuicClientConfig::try_from(ctls).unwrap()));
    ccfg.transport_config(transport(&a));

    let s_end = End::new(Some(scfg.clone()), a.payload, a.buffer);
    let to = s_end.sock.local_addr().unwrap();
    let c_end = End::new(None, a.payload, a.buffer);
    let srv = std::thread::spawn(move || server(s_end, scfg));
    let secs = a.secs;
    let cli = std::thread::spawn(move || client(c_end, ccfg, to, secs));
    cli.join().expect("the client thread");
    let (bytes, secs) = srv.join().expect("the server thread");
    println!("{{\"bytes\": {bytes}, \"secs\": {secs:.6}}}");
}
