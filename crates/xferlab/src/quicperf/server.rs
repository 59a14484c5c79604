//! `xferlab server --quic-perf PORT`: the QUIC performance protocol
//! (see [`xferlab_core::transport::quic::perf`]) on a UDP port of its own,
//! one quinn-proto endpoint on one socket through the QUIC transport's
//! driver ([`crate::transport::quic::driver`]), on one thread.
//!
//! # What holds it together (docs/security.md, "The QUIC perf port")
//!
//! * **Address validation before any state.** An Initial from an address
//!   that has not proved it receives our packets gets a Retry and nothing
//!   else: no connection, no handshake, no TLS (quinn-proto keeps nothing
//!   for it once the Retry is written). So a spoofed source costs one
//!   Retry (smaller than the 1200-byte Initial that asked for it) and
//!   cannot make the server send more than it received, nor hold a place.
//! * **The session limits of the TCP ports.** A validated connection
//!   takes a handshake place (`--max-handshakes`,
//!   `--max-handshakes-per-client`) until its handshake completes, and a
//!   session's place (`--max-sessions`, `--max-sessions-per-client`) for
//!   its life; a full limit is answered with CONNECTION_REFUSED (not
//!   silence: the client learns at once). A handshake not complete within
//!   `--preamble-timeout` is closed; an idle connection ends at QUIC's
//!   idle timeout ([`IDLE_TIMEOUT`]).
//! * **The budgets.** A connection is one flow the server sends on:
//!   `--max-rate` and `--max-total-rate` grant it a rate as they grant a
//!   reverse TCP test one ([`crate::session::budget`]), and its responses
//!   are paced to that rate by a token bucket; `--max-duration` cuts it
//!   (CONNECTION_CLOSE with the reason) however much it asked for. So a
//!   response larger than rate x duration is **cut**, not refused: a
//!   timed client asks for 2^64-1 bytes and stops reading at its
//!   deadline (quinn's perf client, secnetperf), so a refusal by size
//!   would refuse every timed test, while the cut bounds what any
//!   request gets to what the budgets allow.
//! * **Bounded per connection.** At most [`MAX_STREAMS`] request streams
//!   of each direction at once (QUIC's stream limits, announced to the
//!   client), receive windows sized from the port's socket buffer as a
//!   QUIC flow's are, and [`CONN_WINDOW_STREAMS`] streams' worth per
//!   connection; uploads are counted and dropped as they arrive,
//!   responses are written from one static buffer.
//!
//! Every session ends with one line in the log (who, what, the outcome)
//! and its bytes in the metrics under `protocol="quic_perf"`.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quinn_proto::{
    ConnectionHandle, Dir, EndpointConfig, Event, Incoming, ReadError, ServerConfig, StreamEvent,
    StreamId, TransportConfig, VarInt, WriteError,
};
use socket2::{Domain, Protocol as SockProtocol, Socket, Type};
use xferlab_core::spec::{Direction, TestSpec};
use xferlab_core::time::Time;
use xferlab_core::transport::quic::perf::{
    code, Pacer, RequestReader, Response, ServerLimits, ALPN,
};
use xferlab_core::units::{format_bytes, RateUnit};

use crate::session::budget::RateGrant;
use crate::session::metrics::{ActiveFlows, Protocol, Reason};
use crate::session::shared::{HandshakeSlot, SessionSlot};
use crate::session::Shared;
use crate::transport::quic::driver::Driver;
use crate::transport::quic::tls;

use super::QuicPerfError;

/// Request streams of each direction one connection may have open at
/// once (QUIC's MAX_STREAMS, announced to the client): as many as an
/// xferlab test has flows per direction.
pub const MAX_STREAMS: u32 = 128;
/// The least receive window per request stream, whatever the socket
/// was granted: quinn-proto's own default (1.25 MB: 100 Mbit/s x 100 ms),
/// as the QUIC flows' (`transport::quic`).
const MIN_STREAM_WINDOW: u64 = 1_250_000;
/// A connection's receive window, in streams' windows: what one
/// connection can make the server buffer (uploads are read and dropped
/// as they arrive, so this bounds a burst, not a steady state).
const CONN_WINDOW_STREAMS: u64 = 8;
/// A connection with nothing moving for this long ends (QUIC's idle
/// timeout, the smaller of both ends'): the one every xferlab QUIC
/// connection has.
use crate::transport::quic::IDLE_TIMEOUT;
/// The pacer's burst: what a connection may send at once after a pause,
/// as a time at its rate (at least one packet train).
const PACER_BURST: Duration = Duration::from_millis(5);
const MIN_BURST: u64 = 64 * 1024;
/// Response bytes come from this buffer, shared by every stream (a
/// static `Bytes` costs no copy and no allocation per write).
static ZEROS: [u8; 1 << 20] = [0; 1 << 20];

/// The perf port, bound (so a port in use is said before the server
/// says it listens) and not yet serving.
pub struct PerfPort {
    sock: UdpSocket,
    server: Arc<ServerConfig>,
}

impl PerfPort {
    /// Binds `port` (every IPv6 and IPv4 address, or `bind` only) and
    /// makes the endpoint's configuration: TLS with the certificate of
    /// `files` (`--quic-cert`/`--quic-key`, else the process's
    /// self-signed one) and ALPN perf, the limits above.
    pub fn bind(
        bind: Option<IpAddr>,
        port: u16,
        files: &tls::TlsFiles,
    ) -> Result<PerfPort, QuicPerfError> {
        // The certificate first: a bad file is said before the port is
        // taken.
        let crypto = tls::server_for(files, ALPN).map_err(|e| QuicPerfError::Tls(e.to_string()))?;
        let sock = bind_udp(bind, port).map_err(|err| match err.kind() {
            io::ErrorKind::AddrInUse => QuicPerfError::PortInUse { port },
            _ => QuicPerfError::Bind { port, err },
        })?;
        // The socket buffers of a QUIC flow's (4 MiB each way: the
        // receive side's measurement is `transport::datagram`'s): one
        // port carries every connection, and a burst of Initials must
        // reach the loop to be answered.
        crate::transport::io(xferlab_core::spec::Transport::Quic)?.prepare_flow(
            &sock,
            xferlab_core::result::FlowRole::Receiver,
            &TestSpec::default_stream().knobs,
        );
        // A stream's window as a QUIC flow sizes it: the receive buffer
        // the kernel granted (half of what it reports, the rest its
        // bookkeeping) is what the loop holds while it is off the CPU.
        let granted = socket2::SockRef::from(&sock)
            .recv_buffer_size()
            .map_or(0, |b| b as u64 / 2);
        let stream_window = granted.max(MIN_STREAM_WINDOW);
        let var = |v: u64| VarInt::from_u64(v).unwrap_or(VarInt::MAX);
        let mut server = ServerConfig::with_crypto(crypto);
        let mut transport = TransportConfig::default();
        transport
            .max_concurrent_bidi_streams(VarInt::from_u32(MAX_STREAMS))
            .max_concurrent_uni_streams(VarInt::from_u32(MAX_STREAMS))
            .stream_receive_window(var(stream_window))
            .receive_window(var(stream_window.saturating_mul(CONN_WINDOW_STREAMS)))
            .max_idle_timeout(IDLE_TIMEOUT.try_into().ok())
            // No DATAGRAM frames: the protocol has none.
            .datagram_receive_buffer_size(None);
        server.transport_config(Arc::new(transport));
        // Every new address is validated by this loop (a Retry), never
        // by quinn-proto's own choice; connections waiting for our
        // decision are few (one turn's worth).
        server.max_incoming(1024);
        Ok(PerfPort {
            sock,
            server: Arc::new(server),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Serves on a thread of its own until `stop` is set.
    pub fn spawn(self, shared: Arc<Shared>, stop: Arc<AtomicBool>) -> io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("quic-perf".into())
            .spawn(move || {
                if let Err(e) = serve(&self.sock, self.server, &shared, &stop) {
                    shared.log(format_args!("quic-perf: the port stopped serving: {e}"));
                }
            })
    }
}

fn bind_udp(bind: Option<IpAddr>, port: u16) -> io::Result<UdpSocket> {
    let make = |addr: SocketAddr, dual: bool| -> io::Result<UdpSocket> {
        let s = Socket::new(
            Domain::for_address(addr),
            Type::DGRAM,
            Some(SockProtocol::UDP),
        )?;
        if dual {
            s.set_only_v6(false)?;
        }
        s.bind(&addr.into())?;
        Ok(s.into())
    };
    match bind {
        Some(ip) => make(SocketAddr::new(ip, port), false),
        // As the TCP ports: one dual-stack socket, or IPv4 alone where
        // IPv6 is off.
        None => make(
            SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
            true,
        )
        .or_else(|_| make(SocketAddr::new(IpAddr::from([0, 0, 0, 0]), port), false)),
    }
}

/// One request stream of a connection.
struct PerfStream {
    reader: RequestReader,
    /// The request's direction: a bidirectional stream is answered on
    /// itself, a unidirectional one on a stream the server opens.
    bidi: bool,
    response: Option<Response>,
    /// Where the response goes, once known (bidi: the stream itself).
    out: Option<StreamId>,
    fin_sent: bool,
    read_done: bool,
}

/// Why a session ended, for its log line.
#[derive(Debug, Clone)]
enum End {
    /// The client closed it without an error.
    Closed,
    /// It was lost: closed with an error, reset, timed out.
    Lost(String),
    /// The server cut it: its budget, or a handshake that took too long.
    Cut(String),
}

/// How a lost connection ended, from the client's side.
fn lost(reason: &quinn_proto::ConnectionError) -> End {
    use quinn_proto::ConnectionError as E;
    match reason {
        E::ApplicationClosed(a) if a.error_code.into_inner() == u64::from(code::DONE) => {
            End::Closed
        }
        E::ConnectionClosed(c) if c.error_code == quinn_proto::TransportErrorCode::NO_ERROR => {
            End::Closed
        }
        E::TimedOut => End::Lost(format!(
            "nothing from the client for {} s (idle timeout)",
            IDLE_TIMEOUT.as_secs()
        )),
        other => End::Lost(other.to_string()),
    }
}

/// What a live connection holds of the server: given back when it ends
/// (closed by either end), not when its draining is over.
struct Held<'a> {
    _session: SessionSlot<'a>,
    _grant: Option<RateGrant<'a>>,
    _flows: ActiveFlows,
}

/// One connection and what it holds of the server.
struct Conn<'a> {
    peer: SocketAddr,
    accepted: Instant,
    established: Option<Instant>,
    /// Its place among the handshakes, until the handshake completes.
    handshake: Option<HandshakeSlot>,
    held: Option<Held<'a>>,
    /// Its line is in the log (it ended).
    logged: bool,
    pacer: Option<Pacer>,
    streams: HashMap<StreamId, PerfStream>,
    /// Unidirectional requests waiting for a stream of ours to answer on.
    waiting_uni: Vec<StreamId>,
    uploaded: u64,
    sent: u64,
    requests: u64,
    malformed: u64,
    end: Option<End>,
}

/// The budgets' deadline of a connection: `--max-duration` after its
/// accept.
fn cut_at(c: &Conn<'_>, shared: &Shared) -> Instant {
    c.accepted + shared.cfg.max_duration
}

fn serve(
    sock: &UdpSocket,
    server: Arc<ServerConfig>,
    shared: &Arc<Shared>,
    stop: &AtomicBool,
) -> io::Result<()> {
    let mut driver = Driver::new(
        sock,
        Arc::new(EndpointConfig::default()),
        Some(server),
        // One port for every client, unconnected: no route's MTU to
        // read (a flow's socket has one); quinn-proto's MTU discovery
        // works up from 1200 bytes to this bound per connection.
        crate::transport::quic::DEFAULT_UDP_PAYLOAD,
    )?;
    let mut conns: HashMap<ConnectionHandle, Conn<'_>> = HashMap::new();
    let epoch = Instant::now();
    let time = |i: Instant| Time::from_nanos(i.duration_since(epoch).as_nanos() as u64);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let got = driver.recv(now)?;
        while let Some(inc) = driver.next_incoming() {
            admit(&mut driver, inc, shared, &mut conns, now, time(now));
        }
        while let Some((h, ev)) = driver.poll_event() {
            let Some(c) = conns.get_mut(&h) else {
                continue;
            };
            on_event(shared, &mut driver, h, c, ev, now);
        }
        let mut wake: Option<Instant> = None;
        for (&h, c) in &mut conns {
            let Some(conn) = driver.connection(h) else {
                continue;
            };
            if c.end.is_some() {
                continue;
            }
            if c.established.is_none() && now >= c.accepted + shared.cfg.door.preamble_timeout {
                let why = format!(
                    "handshake not complete within {} s (--preamble-timeout)",
                    shared.cfg.door.preamble_timeout.as_secs_f64()
                );
                conn.close(
                    now,
                    VarInt::from_u32(code::HANDSHAKE_TIMEOUT),
                    why.clone().into(),
                );
                c.end = Some(End::Cut(why));
                continue;
            }
            let cut = cut_at(c, shared);
            if now >= cut {
                let why = format!(
                    "cut at this server's --max-duration of {} s",
                    shared.cfg.max_duration.as_secs_f64()
                );
                let reason = format!("xferlab server: {why}");
                conn.close(now, VarInt::from_u32(code::BUDGET), reason.into());
                c.end = Some(End::Cut(why));
                continue;
            }
            let ready = pump(conn, c, time(now));
            let next = ready
                .map(|t| epoch + Duration::from_nanos(t.as_nanos()))
                .into_iter()
                .chain([cut])
                .chain(
                    c.established
                        .is_none()
                        .then(|| c.accepted + shared.cfg.door.preamble_timeout),
                )
                .min();
            wake = [wake, next].into_iter().flatten().min();
        }
        // Sessions that ended (either end closed, or the connection was
        // lost): logged, their places given back at once.
        for c in conns.values_mut().filter(|c| c.end.is_some() && !c.logged) {
            finish(shared, c, now);
        }
        let sent = driver.transmit(now)?;
        // Connections gone from the driver (drained): forgotten before a
        // new connection can take their handle.
        conns.retain(|&h, c| {
            if driver.connection(h).is_some() {
                return true;
            }
            if !c.logged {
                finish(shared, c, now);
            }
            false
        });
        if !got && !sent {
            driver.wait(Instant::now(), wake);
        }
    }
    Ok(())
}

/// An incoming connection: a Retry for an address not yet validated, a
/// refusal when a limit is full, else accepted with its places held.
fn admit<'a>(
    driver: &mut Driver<'_>,
    inc: Incoming,
    shared: &'a Arc<Shared>,
    conns: &mut HashMap<ConnectionHandle, Conn<'a>>,
    now: Instant,
    t: Time,
) {
    let peer = inc.remote_address();
    if !inc.remote_address_validated() {
        if inc.may_retry() {
            if driver.retry(inc).is_ok() {
                shared.metrics.quic_perf_retry();
            }
        } else {
            // A Retry's token that did not validate: a forged or stale
            // one. Nothing is said to it.
            driver.ignore(inc);
        }
        return;
    }
    let refuse = |driver: &mut Driver<'_>, inc: Incoming, reason: Reason, why: &str| {
        driver.refuse(inc);
        shared.metrics.refused(Protocol::QuicPerf, reason);
        shared.log_refused(
            peer,
            "quic-perf busy",
            format_args!("quic-perf {peer}: refused: {why}"),
        );
    };
    let handshake = match shared.begin_handshake(peer.ip()) {
        Ok(h) => h,
        Err(busy) => return refuse(driver, inc, Reason::Busy, &busy.to_string()),
    };
    let session = match shared.enter(peer.ip()) {
        Ok(s) => s,
        Err(busy) => return refuse(driver, inc, Reason::Busy, &busy.to_string()),
    };
    // A connection is one flow the server sends on, as a reverse TCP
    // test of one flow: it gets that test's share of the rate budgets.
    let mut spec = TestSpec::default_stream();
    spec.direction = Direction::Reverse;
    spec.parallel = 1;
    spec.interval_s = 0.0;
    let grant = match shared.budget(&mut spec) {
        Ok(g) => g,
        Err(over) => {
            let reason = match over {
                crate::session::budget::OverBudget::Busy(_) => Reason::Busy,
                _ => Reason::OverBudget,
            };
            return refuse(driver, inc, reason, over.message());
        }
    };
    let h = match driver.accept(now, inc, None) {
        Ok(h) => h,
        Err(e) => {
            tracing::debug!(%peer, error = %e.cause, "quic-perf: accept failed");
            return;
        }
    };
    let pacer = spec.knobs.max_pacing_rate.map(|rate| {
        let burst = (rate as f64 * PACER_BURST.as_secs_f64()) as u64;
        Pacer::new(rate, burst.max(MIN_BURST), t)
    });
    let flows = shared.metrics.served_flows(Protocol::QuicPerf, 1);
    conns.insert(
        h,
        Conn {
            peer,
            accepted: now,
            established: None,
            handshake: Some(handshake),
            held: Some(Held {
                _session: session,
                _grant: grant,
                _flows: flows,
            }),
            logged: false,
            pacer,
            streams: HashMap::new(),
            waiting_uni: Vec::new(),
            uploaded: 0,
            sent: 0,
            requests: 0,
            malformed: 0,
            end: None,
        },
    );
}

fn on_event(
    shared: &Shared,
    driver: &mut Driver<'_>,
    h: ConnectionHandle,
    c: &mut Conn<'_>,
    ev: Event,
    now: Instant,
) {
    let Some(conn) = driver.connection(h) else {
        return;
    };
    match ev {
        Event::Connected => {
            c.established = Some(now);
            c.handshake = None;
            let rate = c.pacer.map_or(String::new(), |p| {
                format!(
                    ", paced to {}",
                    RateUnit::AutoBits.format_rate(p.rate() as f64 * 8.0)
                )
            });
            shared.log(format_args!(
                "quic-perf {}: accepted (handshake {:.1} ms{rate})",
                c.peer,
                now.duration_since(c.accepted).as_secs_f64() * 1e3
            ));
        }
        Event::ConnectionLost { reason } => {
            c.handshake = None;
            c.end.get_or_insert_with(|| lost(&reason));
        }
        Event::Stream(StreamEvent::Opened { dir }) => {
            while let Some(id) = conn.streams().accept(dir) {
                c.streams.insert(
                    id,
                    PerfStream {
                        reader: RequestReader::new(),
                        bidi: dir == Dir::Bi,
                        response: None,
                        out: None,
                        fin_sent: false,
                        read_done: false,
                    },
                );
                read(conn, c, id);
            }
        }
        Event::Stream(StreamEvent::Readable { id }) => read(conn, c, id),
        Event::Stream(StreamEvent::Available { dir: Dir::Uni }) => open_uni(conn, c),
        Event::Stream(StreamEvent::Stopped { id, .. }) => {
            // The client stopped reading (a timed download at its
            // deadline): the response ends here.
            let _ = conn.send_stream(id).reset(VarInt::from_u32(code::DONE));
            let done = c
                .streams
                .iter()
                .find(|(_, s)| s.out == Some(id))
                .map(|(&k, _)| k);
            if let Some(k) = done {
                c.streams.remove(&k);
            }
        }
        // Writable: the pump writes every turn; Finished: a response was
        // acknowledged; datagrams are not part of the protocol.
        _ => {}
    }
}

/// Reads what stream `id` has: the header, then the upload, counted and
/// dropped; at its FIN the response is due.
fn read(conn: &mut quinn_proto::Connection, c: &mut Conn<'_>, id: StreamId) {
    let Some(s) = c.streams.get_mut(&id) else {
        return;
    };
    if s.read_done {
        return;
    }
    let mut recv = conn.recv_stream(id);
    let Ok(mut chunks) = recv.read(true) else {
        return;
    };
    let mut failed = false;
    let mut fin = false;
    loop {
        match chunks.next(usize::MAX) {
            Ok(Some(chunk)) => {
                let before = s.reader.uploaded();
                if s.reader.feed(&chunk.bytes).is_err() {
                    failed = true;
                    break;
                }
                c.uploaded += s.reader.uploaded() - before;
            }
            Ok(None) => {
                fin = true;
                break;
            }
            Err(ReadError::Blocked) => break,
            Err(ReadError::Reset(_)) => {
                failed = true;
                break;
            }
        }
    }
    let _ = chunks.finalize();
    if failed {
        c.streams.remove(&id);
        return;
    }
    if !fin {
        return;
    }
    s.read_done = true;
    match s.reader.finish() {
        Ok(req) => {
            c.requests += 1;
            s.response = Some(Response::new(req, &ServerLimits { max_response: None }));
            if s.bidi {
                s.out = Some(id);
            } else {
                c.waiting_uni.push(id);
                open_uni(conn, c);
            }
        }
        Err(e) => {
            tracing::debug!(peer = %c.peer, error = %e, "quic-perf: malformed request");
            c.malformed += 1;
            if s.bidi {
                let _ = conn
                    .send_stream(id)
                    .reset(VarInt::from_u32(code::MALFORMED));
            }
            c.streams.remove(&id);
        }
    }
}

/// Opens response streams for unidirectional requests while QUIC's
/// stream limit allows (the rest wait for `Available`).
fn open_uni(conn: &mut quinn_proto::Connection, c: &mut Conn<'_>) {
    while let Some(&req) = c.waiting_uni.first() {
        let Some(out) = conn.streams().open(Dir::Uni) else {
            return;
        };
        c.waiting_uni.remove(0);
        if let Some(s) = c.streams.get_mut(&req) {
            s.out = Some(out);
        }
    }
}

/// Writes what the responses owe, within the pacer's allowance; returns
/// when the pacer allows the next write (None: not paced, or nothing
/// waits for it).
fn pump(conn: &mut quinn_proto::Connection, c: &mut Conn<'_>, t: Time) -> Option<Time> {
    let mut allowance = c.pacer.as_mut().map_or(u64::MAX, |p| p.allowance(t));
    let mut blocked_by_pacer = false;
    let mut done = Vec::new();
    for (&id, s) in &mut c.streams {
        let (Some(resp), Some(out)) = (s.response.as_mut(), s.out) else {
            continue;
        };
        if s.fin_sent {
            continue;
        }
        let mut send = conn.send_stream(out);
        loop {
            let room = usize::try_from(allowance)
                .unwrap_or(usize::MAX)
                .min(ZEROS.len());
            let n = resp.next_chunk(room);
            if n == 0 {
                if resp.complete() {
                    let _ = send.finish();
                    s.fin_sent = true;
                    done.push(id);
                } else {
                    blocked_by_pacer = true;
                }
                break;
            }
            let mut chunk = [Bytes::from_static(&ZEROS[..n])];
            match send.write_chunks(&mut chunk) {
                Ok(w) => {
                    resp.sent(w.bytes);
                    c.sent += w.bytes as u64;
                    allowance = allowance.saturating_sub(w.bytes as u64);
                    if let Some(p) = c.pacer.as_mut() {
                        p.spend(w.bytes as u64);
                    }
                    if w.bytes < n {
                        break;
                    }
                }
                Err(WriteError::Blocked) => break,
                Err(WriteError::Stopped(_) | WriteError::ClosedStream) => {
                    done.push(id);
                    break;
                }
            }
        }
    }
    for id in done {
        c.streams.remove(&id);
    }
    match (blocked_by_pacer, c.pacer.as_mut()) {
        (true, Some(p)) => Some(p.ready_at(t, MIN_BURST)),
        _ => None,
    }
}

/// A session's end: its line in the log, its bytes in the metrics, its
/// places given back.
fn finish(shared: &Shared, c: &mut Conn<'_>, now: Instant) {
    c.logged = true;
    c.handshake = None;
    c.held = None;
    shared.metrics.moved(Protocol::QuicPerf, c.sent, c.uploaded);
    let secs = now.duration_since(c.accepted).as_secs_f64();
    let outcome = match &c.end {
        None | Some(End::Closed) => "ok".to_string(),
        Some(End::Lost(why)) if c.established.is_none() => format!("handshake failed: {why}"),
        Some(End::Lost(why)) => format!("lost: {why}"),
        Some(End::Cut(why)) => why.clone(),
    };
    let malformed = if c.malformed > 0 {
        format!(", {} malformed", c.malformed)
    } else {
        String::new()
    };
    // Exact counts first (what a test or an operator compares), then
    // readable ones.
    shared.log(format_args!(
        "quic-perf {}: done: {} requests{malformed}, received {} bytes ({}), sent {} bytes ({}) in {secs:.2} s; {outcome}",
        c.peer,
        c.requests,
        c.uploaded,
        format_bytes(c.uploaded),
        c.sent,
        format_bytes(c.sent),
    ));
}
