//! One QUIC flow's thread: a [`Driver`] on the flow's connected UDP
//! socket running one connection, the test's client end connecting and
//! its server end accepting (only from the flow's own peer: the socket
//! is connected to it).
//!
//! * **Streams** (no `-b`): the sender opens `--streams` unidirectional
//!   streams and writes to each from one buffer filled once, as much as
//!   the connection takes, until its quota or the stop; then finishes
//!   them, waits until the peer has every byte and closes. The receiver
//!   reads every stream as its data comes and counts the bytes.
//! * **Datagrams** (`-b`): the sender offers DATAGRAM frames at the rate,
//!   each xferlab's datagram header (sequence number, send time) and the
//!   pattern; those the connection refuses (its buffer full behind the
//!   congestion controller, or too large for the path) are counted and
//!   not sent, and take no sequence number, so the receiver's loss is the
//!   network's. The receiver counts loss, reordering and jitter as UDP's.
//!
//! Every millisecond the thread publishes the connection's state for the
//! interval reader ([`super::QuicShared`]).

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use quinn_proto::congestion::{BbrConfig, ControllerFactory, CubicConfig, NewRenoConfig};
use quinn_proto::{
    ClientConfig, ConnectionError, ConnectionHandle, Dir, EndpointConfig, Event, IdleTimeout,
    MtuDiscoveryConfig, ReadError, SendDatagramError, ServerConfig, StreamEvent, StreamId,
    TransportConfig, VarInt, WriteError,
};
use xferlab_core::datagram::{read_header, write_header, Pacer, RecvStats, HEADER_LEN};
use xferlab_core::proto::wire::{AttachReply, MAGIC};
use xferlab_core::result::{Endpoint, FlowEnd, FlowRole};
use xferlab_core::transport::quic::QuicCounters;

use super::driver::Driver;
use super::perf::PerfClient;
use super::tls;
use super::QuicShared;
use crate::sys::clock;
use crate::transport::datagram::publish;
use crate::transport::flow::{FlowOutcome, SideFlags};
use crate::transport::sizing::DEFAULT_SIZE;
use crate::transport::{FlowJob, FlowSocket, OwnShared};

/// Socket buffers of a QUIC flow unless `-w` says otherwise: UDP's
/// receivers' 4 MiB (`datagram::size_receive_buffer` has why), and the
/// same for sending.
pub(super) const SOCKET_BUFFER: libc::c_int = 4 << 20;
/// The least stream receive window, whatever the socket was granted:
/// quinn-proto's own default (1.25 MB: 100 Mbit/s x 100 ms).
const MIN_STREAM_WINDOW: u64 = 1_250_000;
/// A handshake unanswered this long means no QUIC peer (quinn-proto
/// resends its Initial with backoff in the meantime; its first resend
/// is after 3 x the initial RTT of 333 ms, so 5 s holds three of them).
#[cfg(not(test))]
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// The unit tests wait for it.
#[cfg(test)]
const HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(600);
/// A connection silent this long once established is dead (every QUIC
/// connection xferlab makes or serves: flows, rr, the perf port).
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// A sender that stopped waits this long for the peer to take its last
/// bytes (and its queued datagrams to leave) before it closes anyway.
const CLOSE_GRACE: Duration = Duration::from_secs(3);
/// A stopped receiver whose peer went silent gives up after this long.
const QUIET_AFTER_STOP: Duration = Duration::from_secs(1);
/// How often the thread publishes its counters for the interval reader.
const PUBLISH_EVERY: Duration = Duration::from_millis(1);
/// Application datagrams a sender may have waiting inside the
/// connection: enough for a window's refill at 10 Gbit/s x 1 ms; more
/// only adds queueing delay (the rest is refused and counted).
const DATAGRAM_QUEUE: usize = 1 << 20;
/// The largest UDP payload the path MTU discovery may try where the
/// kernel does not say the path's MTU (quinn-proto's default bound: a
/// 1500-byte Ethernet MTU less IPv6 and UDP headers).
pub(crate) const DEFAULT_UDP_PAYLOAD: u16 = 1452;

/// The largest UDP payload the connection's MTU discovery may try: the
/// route's MTU as the kernel has it for the connected socket (IP_MTU)
/// less the IP and UDP headers, as TCP's MSS follows it (65,483 bytes on
/// loopback, 1,472 on Ethernet); quinn-proto's default where the kernel
/// does not say. Measured on loopback (2 shared vCPUs, debug build,
/// `stream --quic -t 3`): 0.35-0.39 Gbit/s with quinn-proto's 1472-byte
/// packets, 5.5-8.5 Gbit/s with the route's 65,507: the cost is per
/// packet, as TCP's is per segment.
fn max_udp_payload(sock: &UdpSocket, peer: SocketAddr) -> u16 {
    use xferlab_sys::sockopt::{get_bytes, Get};
    let v6 = sock.local_addr().is_ok_and(|a| a.is_ipv6());
    let mut buf = [0u8; 4];
    let opt = if v6 { Get::Ipv6Mtu } else { Get::IpMtu };
    let Ok(4) = get_bytes(sock, opt, &mut buf) else {
        return DEFAULT_UDP_PAYLOAD;
    };
    let mtu = i32::from_ne_bytes(buf);
    let headers = if crate::net::canonical(peer).is_ipv4() {
        20 + 8
    } else {
        40 + 8
    };
    u16::try_from((mtu - headers).clamp(1200, 65_527)).unwrap_or(DEFAULT_UDP_PAYLOAD)
}
/// The smallest write a stream sender makes (unless its quota ends it):
/// a few packets' worth, so a small window does not mean tiny writes.
const MIN_WRITE: u64 = 16 << 10;
/// The application error code of a clean close.
const DONE: u32 = 0;

pub fn run(job: FlowJob<'_>) -> FlowOutcome {
    // A paced sender's schedule starts with the thread, before the
    // connection's setup, as every datagram sender's does: the time the
    // handshake takes is caught up after it.
    let start_t = clock::now();
    let FlowSocket::Datagram(sock) = job.socket else {
        return outcome(
            FlowEnd::Aborted("QUIC flows run over UDP sockets".into()),
            0,
        );
    };
    let OwnShared::Quic(shared) = &job.shared.own else {
        return outcome(
            FlowEnd::Aborted("a QUIC flow without its counters".into()),
            0,
        );
    };
    match Flow::new(sock, &job, shared) {
        Ok(f) => f.run(&job, start_t),
        Err(why) => outcome(FlowEnd::Aborted(why), 0),
    }
}

fn outcome(end: FlowEnd, bytes: u64) -> FlowOutcome {
    FlowOutcome {
        end,
        at: clock::now(),
        bytes,
        note: None,
    }
}

/// The windows a flow's connection runs with.
#[derive(Clone, Copy)]
struct Windows {
    stream: u64,
    conn: u64,
}

/// The windows from the socket: the receive buffer the kernel granted
/// (half of what it reports, the rest being its bookkeeping) is what the
/// receiver holds while its thread is off the CPU, so a stream may have
/// that much unread; the connection that times the streams.
fn windows(sock: &UdpSocket, streams: u32) -> Windows {
    let granted = socket2::SockRef::from(sock)
        .recv_buffer_size()
        .map_or(0, |b| b as u64 / 2);
    let stream = granted.max(MIN_STREAM_WINDOW);
    Windows {
        stream,
        conn: stream.saturating_mul(u64::from(streams)),
    }
}

fn transport_config(cc: &str, streams: u32, w: Windows, max_payload: u16) -> TransportConfig {
    let mut t = TransportConfig::default();
    let mut mtud = MtuDiscoveryConfig::default();
    mtud.upper_bound(max_payload);
    t.mtu_discovery_config(Some(mtud));
    let var = |v: u64| VarInt::from_u64(v).unwrap_or(VarInt::MAX);
    t.max_concurrent_uni_streams(streams.into())
        .max_concurrent_bidi_streams(0u32.into())
        .stream_receive_window(var(w.stream))
        .receive_window(var(w.conn))
        .send_window(w.conn)
        .max_idle_timeout(IdleTimeout::try_from(IDLE_TIMEOUT).ok())
        .datagram_receive_buffer_size(Some(DATAGRAM_QUEUE))
        .datagram_send_buffer_size(DATAGRAM_QUEUE);
    t.congestion_controller_factory(controller(cc));
    t
}

/// quinn-proto's congestion controller for `-C NAME`: newreno, bbr, else
/// cubic (the knobs' check has refused other names).
pub(crate) fn controller(name: &str) -> Arc<dyn ControllerFactory + Send + Sync> {
    match name {
        "newreno" => Arc::new(NewRenoConfig::default()),
        "bbr" => Arc::new(BbrConfig::default()),
        _ => Arc::new(CubicConfig::default()),
    }
}

struct Flow<'a> {
    driver: Driver<'a>,
    conn: Option<ConnectionHandle>,
    peer: SocketAddr,
    endpoint: Endpoint,
    server: Option<Arc<ServerConfig>>,
    sender: bool,
    /// -b: DATAGRAM frames at this rate (bit/s) rather than streams.
    rate: Option<u64>,
    streams: u32,
    /// The flow speaks the QUIC performance protocol to a foreign server
    /// (`stream --quic-perf`: [`super::perf`]).
    perf: bool,
    cc: &'static str,
    windows: Windows,
    shared: &'a QuicShared,
    blocked: u64,
    too_large: u64,
}

impl<'a> Flow<'a> {
    fn new(sock: &'a UdpSocket, job: &FlowJob<'_>, shared: &'a QuicShared) -> Result<Self, String> {
        let peer = sock
            .peer_addr()
            .map_err(|e| format!("a QUIC flow's socket has no peer: {e}"))?;
        let k = job.knobs;
        let streams = k.own.quic.unwrap_or_default().streams;
        let perf = k.own.quic.is_some_and(|q| q.perf);
        let cc = xferlab_core::knobs::CONGESTION_CONTROLLERS
            .iter()
            .copied()
            .find(|c| Some(*c) == k.congestion.as_deref())
            .unwrap_or("cubic");
        let windows = windows(sock, streams);
        let max_payload = max_udp_payload(sock, peer);
        let transport = Arc::new(transport_config(cc, streams, windows, max_payload));
        let files = tls::files();
        let server = match job.endpoint {
            Endpoint::Server => {
                let crypto = tls::server(&files).map_err(|e| e.to_string())?;
                let mut s = ServerConfig::with_crypto(crypto);
                s.transport_config(transport.clone());
                // The flow's socket is connected to its client: the
                // address was validated by the attach exchange.
                s.migration(false);
                Some(Arc::new(s))
            }
            Endpoint::Client => None,
        };
        // What this end takes from its peer: as large as its route
        // carries (quinn-proto's default, 1472, would cap a loopback or
        // jumbo-frame path at Ethernet's packets).
        let mut endpoint = EndpointConfig::default();
        endpoint.max_udp_payload_size(max_payload).ok();
        let mut driver = Driver::new(sock, Arc::new(endpoint), server.clone(), max_payload)
            .map_err(|e| format!("a QUIC flow's socket: {e}"))?;
        // A repeated attach record (its answer was lost): answered again
        // as the attach handshake does, never given to QUIC.
        driver.set_foreign(Box::new(|s: &UdpSocket, d: &[u8]| {
            if d.starts_with(&MAGIC) {
                s.send(&[AttachReply::Ok as u8]).ok();
                true
            } else {
                false
            }
        }));
        let mut f = Flow {
            driver,
            conn: None,
            peer,
            endpoint: job.endpoint,
            server,
            sender: job.role == FlowRole::Sender,
            rate: k.rate.filter(|&r| r > 0),
            streams,
            perf,
            cc,
            windows,
            shared,
            blocked: 0,
            too_large: 0,
        };
        if job.endpoint == Endpoint::Client {
            let crypto = if perf {
                tls::client_for(&files, xferlab_core::transport::quic::perf::ALPN)
            } else {
                tls::client(&files)
            }
            .map_err(|e| e.to_string())?;
            let mut c = ClientConfig::new(crypto);
            c.transport_config(transport);
            let name = tls::server_name(&files, peer.ip());
            let h = f
                .driver
                .connect(Instant::now(), c, peer, &name)
                .map_err(|e| format!("cannot start a QUIC connection to {peer}: {e}"))?;
            f.conn = Some(h);
        }
        Ok(f)
    }

    fn run(mut self, job: &FlowJob<'_>, start_t: xferlab_core::time::Time) -> FlowOutcome {
        crate::sys::affinity::tighten_timer_slack();
        let flags = job.flags;
        let start = Instant::now();
        let mut published = start;
        let mut app = match self.rate {
            _ if self.perf => App::Perf(PerfClient::new(job, self.sender, self.streams)),
            None if self.sender => {
                App::StreamTx(StreamTx::new(job, self.streams, self.windows.conn))
            }
            None => App::StreamRx(StreamRx::default()),
            Some(rate) if self.sender => App::DgramTx(DgramTx::new(rate, job, start_t)),
            Some(_) => App::DgramRx(DgramRx::default()),
        };
        let mut established = false;
        let mut closing: Option<Instant> = None;
        let mut last_heard = start;
        let mut lost: Option<ConnectionError> = None;
        let end = loop {
            let now = Instant::now();
            let mut busy = match self.driver.recv(now) {
                Ok(b) => b,
                Err(e) => break FlowEnd::Aborted(format!("QUIC flow socket: {e}")),
            };
            if busy {
                last_heard = now;
            }
            while let Some(inc) = self.driver.next_incoming() {
                // One connection per flow socket, from its own peer.
                if self.conn.is_none() && inc.remote_address() == self.peer {
                    match self.driver.accept(now, inc, self.server.clone()) {
                        Ok(h) => self.conn = Some(h),
                        Err(e) => tracing::debug!(error = %e.cause, "QUIC accept failed"),
                    }
                } else {
                    self.driver.refuse(inc);
                }
            }
            while let Some((_, ev)) = self.driver.poll_event() {
                busy = true;
                match ev {
                    Event::Connected => established = true,
                    Event::ConnectionLost { reason } => lost = Some(reason),
                    Event::Stream(s) => app.on_stream(s),
                    Event::DatagramReceived => app.on_datagram(),
                    Event::DatagramsUnblocked | Event::HandshakeDataReady => {}
                }
            }
            if flags.abort.load(Ordering::Relaxed) {
                break crate::transport::flow::aborted();
            }
            if let (Some(h), true) = (self.conn, established) {
                if let Some(conn) = self.driver.connection(h) {
                    let stopping = flags.stop.load(Ordering::Relaxed);
                    let clock_now = clock::now();
                    let s = app.work(conn, now, clock_now, start_t, stopping, closing.is_some());
                    busy |= s.busy;
                    self.blocked += s.blocked;
                    self.too_large += s.too_large;
                    if let Some(why) = s.failed {
                        break FlowEnd::Aborted(why);
                    }
                    if s.close && closing.is_none() {
                        conn.close(now, DONE.into(), Bytes::new());
                        closing = Some(now);
                    }
                }
            }
            // After the application took what arrived with the end.
            if let Some(reason) = lost.take() {
                break self.lost(reason, established, closing.is_some(), flags);
            }
            if let Err(e) = self.driver.transmit(now) {
                break FlowEnd::Aborted(format!("QUIC flow socket: {e}"));
            }
            if self.driver.traffic.refused {
                break if closing.is_some() || (!self.sender && flags.stop.load(Ordering::Relaxed)) {
                    FlowEnd::Completed
                } else {
                    FlowEnd::Aborted(format!(
                        "the QUIC peer's UDP socket at {} is gone (ICMP port unreachable)",
                        self.peer
                    ))
                };
            }
            if now.duration_since(published) >= PUBLISH_EVERY {
                self.publish(&mut app, job, established);
                published = now;
            }
            // Ends.
            if let Some(t) = closing {
                // A close was sent; linger no longer than the grace.
                if self.driver.live() == 0 || now.duration_since(t) >= CLOSE_GRACE {
                    break FlowEnd::Completed;
                }
                if self
                    .conn
                    .and_then(|h| self.driver.connection(h))
                    .is_some_and(|c| c.is_closed())
                {
                    break FlowEnd::Completed;
                }
            }
            if !established && now.duration_since(start) >= HANDSHAKE_TIMEOUT {
                break FlowEnd::Aborted(self.handshake_timeout());
            }
            if !self.sender
                && (flags.cut.load(Ordering::Relaxed)
                    || (flags.stop.load(Ordering::Relaxed)
                        && now.duration_since(last_heard) >= QUIET_AFTER_STOP))
            {
                break FlowEnd::Completed;
            }
            if !busy {
                let until = app.next_due(clock::now(), now).map(|d| now + d);
                self.driver.wait(now, until);
            }
        };
        // A receiver that ends first says so; a sender's close went out.
        if let Some(conn) = self.conn.and_then(|h| self.driver.connection(h)) {
            if !conn.is_closed() {
                conn.close(Instant::now(), DONE.into(), Bytes::new());
                let _ = self.driver.transmit(Instant::now());
            }
        }
        self.publish(&mut app, job, established);
        outcome(end, app.bytes())
    }

    fn handshake_timeout(&self) -> String {
        match self.endpoint {
            Endpoint::Client if self.perf => format!(
                "QUIC handshake with {} timed out after {} s: no QUIC perf server answered there (check the host, the port and the firewall)",
                self.peer,
                HANDSHAKE_TIMEOUT.as_secs()
            ),
            Endpoint::Client => format!(
                "QUIC handshake with {} timed out after {} s: no QUIC server answered on that flow port",
                self.peer,
                HANDSHAKE_TIMEOUT.as_secs_f64()
            ),
            Endpoint::Server => format!(
                "no QUIC handshake from the client at {} within {} s",
                self.peer,
                HANDSHAKE_TIMEOUT.as_secs_f64()
            ),
        }
    }

    /// What the connection's loss means for the flow: the peer's clean
    /// close (or any end after the stop) completes it; the rest is one
    /// line.
    fn lost(
        &self,
        reason: ConnectionError,
        established: bool,
        closing: bool,
        flags: &SideFlags,
    ) -> FlowEnd {
        match &reason {
            ConnectionError::ApplicationClosed(c) if c.error_code == DONE.into() => {
                return FlowEnd::Completed
            }
            ConnectionError::LocallyClosed => return FlowEnd::Completed,
            _ if closing || flags.stop.load(Ordering::Relaxed) => return FlowEnd::Completed,
            _ => {}
        }
        if !established {
            if let ConnectionError::TransportError(e) = &reason {
                let text = e.to_string();
                if text.contains("certificate") || text.contains("Certificate") {
                    return FlowEnd::Aborted(format!(
                        "certificate not trusted: the QUIC server at {} presented one {} (pass the CA that signed it with --quic-ca, or leave --quic-ca out to not verify)",
                        self.peer,
                        why_untrusted(&e.reason)
                    ));
                }
            }
            if matches!(reason, ConnectionError::TimedOut) {
                return FlowEnd::Aborted(self.handshake_timeout());
            }
        }
        FlowEnd::Aborted(format!(
            "the QUIC connection with {} ended: {reason}",
            self.peer
        ))
    }

    fn publish(&mut self, app: &mut App, job: &FlowJob<'_>, established: bool) {
        app.publish(job);
        let Some(conn) = self.conn.and_then(|h| self.driver.connection(h)) else {
            return;
        };
        let s = conn.stats();
        let m = conn.congestion_state().metrics();
        if let App::DgramRx(rx) = app {
            // DATAGRAM frames that arrived but were never read: the
            // connection's receive buffer overflowed and dropped the
            // oldest, a loss at the receiving host.
            let dropped = s.frame_rx.datagram.saturating_sub(rx.read);
            job.shared.udp.host_drops.store(dropped, Ordering::Relaxed);
        }
        self.shared.publish(&QuicCounters {
            cc: self.cc,
            established,
            rtt: s.path.rtt,
            min_rtt: conn.min_rtt(),
            cwnd: s.path.cwnd,
            // quinn-proto gives it in bits/s.
            pacing_rate: m.pacing_rate.map(|bits| bits / 8),
            mtu: s.path.current_mtu,
            sent_packets: s.path.sent_packets,
            lost_packets: s.path.lost_packets,
            lost_bytes: s.path.lost_bytes,
            congestion_events: s.path.congestion_events,
            udp_tx_datagrams: s.udp_tx.datagrams,
            udp_tx_bytes: s.udp_tx.bytes,
            udp_rx_datagrams: s.udp_rx.datagrams,
            udp_rx_bytes: s.udp_rx.bytes,
            stream_frames_tx: s.frame_tx.stream,
            stream_frames_rx: s.frame_rx.stream,
            datagram_frames_tx: s.frame_tx.datagram,
            datagram_frames_rx: s.frame_rx.datagram,
            datagrams_blocked: self.blocked,
            datagrams_too_large: self.too_large,
            stream_window: self.windows.stream,
            conn_window: self.windows.conn,
            streams: app.streams(),
        });
    }
}

/// rustls' reason for refusing a certificate, in words
/// ("invalid peer certificate: UnknownIssuer").
pub(crate) fn why_untrusted(reason: &str) -> String {
    let r = reason.trim_start_matches("invalid peer certificate: ");
    if r.contains("UnknownIssuer") {
        "that no CA in --quic-ca signed".into()
    } else if r.contains("NotValidForName") || r.contains("not valid for name") {
        format!("that does not carry the server's name (--quic-server-name, else its address): {r}")
    } else if r.contains("Expired") {
        "that has expired".into()
    } else if r.contains("NotValidYet") {
        "that is not valid yet".into()
    } else {
        format!("that does not verify ({r})")
    }
}

/// What one turn of the application's work did.
#[derive(Default)]
struct Step {
    busy: bool,
    /// Time to close the connection (all sent and taken).
    close: bool,
    blocked: u64,
    too_large: u64,
    failed: Option<String>,
}

enum App {
    /// `stream --quic-perf`'s client end (either direction).
    Perf(PerfClient),
    StreamTx(StreamTx),
    StreamRx(StreamRx),
    DgramTx(DgramTx),
    DgramRx(DgramRx),
}

impl App {
    fn on_stream(&mut self, ev: StreamEvent) {
        match (self, ev) {
            (App::Perf(p), ev) => p.on_stream(ev),
            (App::StreamTx(tx), StreamEvent::Writable { id }) => tx.unblock(id),
            (App::StreamTx(tx), StreamEvent::Finished { .. }) => tx.acked += 1,
            (App::StreamTx(tx), StreamEvent::Stopped { id, error_code }) => {
                tx.failed = Some(format!(
                    "the peer stopped QUIC stream {id} (code {error_code})"
                ))
            }
            (App::StreamRx(rx), StreamEvent::Opened { .. } | StreamEvent::Readable { .. }) => {
                rx.ready = true
            }
            _ => {}
        }
    }

    fn on_datagram(&mut self) {
        if let App::DgramRx(rx) = self {
            rx.ready = true;
        }
    }

    fn work(
        &mut self,
        conn: &mut quinn_proto::Connection,
        now: Instant,
        clock_now: xferlab_core::time::Time,
        start: xferlab_core::time::Time,
        stopping: bool,
        closing: bool,
    ) -> Step {
        match self {
            App::Perf(p) if closing => {
                let _ = p;
                Step::default()
            }
            App::Perf(p) => {
                let s = p.work(conn, stopping);
                Step {
                    busy: s.busy,
                    close: s.close,
                    failed: s.failed,
                    ..Step::default()
                }
            }
            App::StreamTx(tx) => tx.work(conn, stopping, closing, now),
            App::StreamRx(rx) => rx.work(conn),
            App::DgramTx(tx) => tx.work(conn, clock_now, start, stopping, closing, now),
            App::DgramRx(rx) => rx.work(conn, clock_now),
        }
    }

    /// When a paced sender's next datagram (or a capped stream sender's
    /// next chunk) is due, from `now`.
    fn next_due(&self, now: xferlab_core::time::Time, instant: Instant) -> Option<Duration> {
        match self {
            App::StreamTx(tx) => tx.next_due(instant),
            App::DgramTx(tx) if !tx.done => tx
                .pacer
                .next_due()
                .map(|t| t.checked_duration_since(now).unwrap_or_default()),
            _ => None,
        }
    }

    fn publish(&mut self, job: &FlowJob<'_>) {
        let sh = job.shared;
        match self {
            App::Perf(p) => sh.bytes.store(p.bytes(), Ordering::Relaxed),
            App::StreamTx(tx) => sh.bytes.store(tx.written, Ordering::Relaxed),
            App::StreamRx(rx) => sh.bytes.store(rx.bytes, Ordering::Relaxed),
            App::DgramTx(tx) => {
                sh.bytes
                    .store(tx.seq * tx.pattern.len() as u64, Ordering::Relaxed);
                sh.udp.packets.store(tx.seq, Ordering::Relaxed);
                sh.udp.late.store(tx.pacer.late_count(), Ordering::Relaxed);
                sh.udp
                    .lateness_max_ns
                    .fetch_max(tx.pacer.take_max_lateness(), Ordering::Relaxed);
            }
            App::DgramRx(rx) => publish(&mut rx.stats, rx.bytes, sh),
        }
    }

    /// Streams that carried data so far.
    fn streams(&self) -> u64 {
        match self {
            App::StreamTx(tx) => tx.used,
            App::StreamRx(rx) => rx.used,
            _ => 0,
        }
    }

    fn bytes(&self) -> u64 {
        match self {
            App::Perf(p) => p.bytes(),
            App::StreamTx(tx) => tx.written,
            App::StreamRx(rx) => rx.bytes,
            App::DgramTx(tx) => tx.seq * tx.pattern.len() as u64,
            App::DgramRx(rx) => rx.bytes,
        }
    }
}

/// A stream sender: one buffer, written to every stream in turn.
struct StreamTx {
    chunk: Vec<u8>,
    quota: Option<u64>,
    /// `--fq-rate` (or the server's budget): bytes/s the sender writes at
    /// most, from its first write (the handshake done).
    cap: Option<(u64, Option<Instant>)>,
    want: u32,
    /// Each stream, whether it is blocked, and whether nothing was
    /// written to it yet.
    streams: Vec<(StreamId, bool, bool)>,
    written: u64,
    finished: bool,
    acked: u32,
    failed: Option<String>,
    /// Streams written to.
    used: u64,
    /// The connection's receive window, the most its send window grows to.
    max_window: u64,
    /// Bytes per write now (at most the chunk; see `work`).
    piece: usize,
}

impl StreamTx {
    fn new(job: &FlowJob<'_>, streams: u32, max_window: u64) -> Self {
        // The bytes per write: a byte stream's write size (the
        // calibrated one, or iperf3's 128 KiB).
        let len = if job.sizes.write_size > 0 {
            job.sizes.write_size
        } else {
            DEFAULT_SIZE
        };
        StreamTx {
            chunk: (0..len).map(|i| (i % 251) as u8).collect(),
            quota: job.quota,
            cap: job.knobs.max_pacing_rate.map(|r| (r.max(1), None)),
            want: streams,
            streams: Vec::with_capacity(streams as usize),
            written: 0,
            finished: false,
            acked: 0,
            failed: None,
            used: 0,
            max_window,
            piece: len,
        }
    }

    /// Bytes the cap lets the sender have written by `now` (one chunk of
    /// burst); no cap: no bound.
    fn allowed(&self, now: Instant) -> u64 {
        match self.cap {
            None => u64::MAX,
            Some((rate, since)) => {
                let since = since.unwrap_or(now);
                let t = now.saturating_duration_since(since).as_secs_f64();
                (rate as f64 * t) as u64 + self.chunk.len() as u64
            }
        }
    }

    /// How long until the cap lets the next chunk out.
    fn next_due(&self, now: Instant) -> Option<Duration> {
        let (rate, since) = self.cap?;
        let since = since?;
        if self.finished {
            return None;
        }
        let at = (self.written + self.chunk.len() as u64) as f64 / rate as f64;
        let due = since + Duration::from_secs_f64(at);
        Some(due.saturating_duration_since(now))
    }

    fn unblock(&mut self, id: StreamId) {
        if let Some(s) = self.streams.iter_mut().find(|(s, ..)| *s == id) {
            s.1 = false;
        }
    }

    fn work(
        &mut self,
        conn: &mut quinn_proto::Connection,
        stopping: bool,
        closing: bool,
        now: Instant,
    ) -> Step {
        let mut step = Step {
            failed: self.failed.take(),
            ..Step::default()
        };
        if closing {
            return step;
        }
        // What the sender may have buffered unacknowledged: twice the
        // congestion window, as Linux sizes a TCP socket's send buffer,
        // at most the receiver's window; and each write at most half the
        // window, so two fit. A fixed window of the receiver's size (and
        // the calibrated 1 MiB writes) held 8 MB on a 100 Mbit/s, 40 ms
        // path with 1 % loss where Cubic moved ~8 Mbit/s: the sender's
        // byte count ran seconds ahead of the wire and its last bytes
        // left seconds after the stop.
        let cwnd = conn.congestion_state().window();
        self.piece = (cwnd / 2).clamp(MIN_WRITE, self.chunk.len() as u64) as usize;
        let floor = 2 * self.piece as u64;
        conn.set_send_window(
            cwnd.saturating_mul(2)
                .clamp(floor, self.max_window.max(floor)),
        );
        while self.streams.len() < self.want as usize {
            match conn.streams().open(Dir::Uni) {
                Some(id) => self.streams.push((id, false, true)),
                None => break,
            }
        }
        let done = |w: u64| self.quota.is_some_and(|q| w >= q);
        if !self.finished && !stopping && !done(self.written) {
            // A chunk per stream per round, so the streams share the
            // connection (and a quota) evenly; rounds until every stream
            // is blocked, which the connection's send window bounds.
            let mut progress = true;
            while progress {
                progress = false;
                if let Some((_, since @ None)) = &mut self.cap {
                    *since = Some(now);
                }
                let allowed = self.allowed(now);
                for (id, blocked, fresh) in self.streams.iter_mut() {
                    let left = self
                        .quota
                        .map_or(u64::MAX, |q| q - self.written)
                        .min(allowed.saturating_sub(self.written));
                    if *blocked || left == 0 {
                        continue;
                    }
                    let n = (self.piece as u64).min(left) as usize;
                    match conn.send_stream(*id).write(&self.chunk[..n]) {
                        Ok(w) => {
                            if *fresh {
                                *fresh = false;
                                self.used += 1;
                            }
                            self.written += w as u64;
                            step.busy = true;
                            progress = true;
                        }
                        Err(WriteError::Blocked) => *blocked = true,
                        Err(e) => {
                            step.failed = Some(format!("QUIC stream {id}: {e}"));
                            return step;
                        }
                    }
                }
            }
        }
        if !self.finished
            && (stopping || done(self.written))
            && self.streams.len() == self.want as usize
        {
            for (id, ..) in &self.streams {
                conn.send_stream(*id).finish().ok();
            }
            self.finished = true;
            step.busy = true;
        }
        // Every stream's bytes taken by the peer: close.
        if self.finished && self.acked >= self.want {
            step.close = true;
        }
        step
    }
}

/// A stream receiver: reads every stream that has data, counting bytes.
#[derive(Default)]
struct StreamRx {
    ready: bool,
    /// Open streams, and whether each has delivered data yet.
    ids: Vec<(StreamId, bool)>,
    bytes: u64,
    /// Streams that delivered data.
    used: u64,
}

impl StreamRx {
    fn work(&mut self, conn: &mut quinn_proto::Connection) -> Step {
        let mut step = Step::default();
        if !self.ready {
            return step;
        }
        self.ready = false;
        while let Some(id) = conn.streams().accept(Dir::Uni) {
            self.ids.push((id, false));
        }
        let mut i = 0;
        while i < self.ids.len() {
            let (id, mut had_data) = self.ids[i];
            let mut finished = false;
            let mut rs = conn.recv_stream(id);
            match rs.read(true) {
                Ok(mut chunks) => {
                    loop {
                        match chunks.next(usize::MAX) {
                            Ok(Some(c)) => {
                                if !had_data && !c.bytes.is_empty() {
                                    had_data = true;
                                    self.ids[i].1 = true;
                                    self.used += 1;
                                }
                                self.bytes += c.bytes.len() as u64;
                                step.busy = true;
                            }
                            Ok(None) => {
                                finished = true;
                                break;
                            }
                            Err(ReadError::Blocked) => break,
                            Err(e) => {
                                step.failed = Some(format!("QUIC stream {id}: {e}"));
                                break;
                            }
                        }
                    }
                    // Tells the connection to open the window again.
                    let _ = chunks.finalize();
                }
                Err(_) => finished = true,
            }
            if finished {
                self.ids.swap_remove(i);
            } else {
                i += 1;
            }
            if step.failed.is_some() {
                break;
            }
        }
        step
    }
}

/// A DATAGRAM sender at a rate.
struct DgramTx {
    pacer: Pacer,
    pattern: Vec<u8>,
    arena: BytesMut,
    limit: Option<u64>,
    seq: u64,
    done: bool,
    since_done: Option<Instant>,
    /// The connection's datagram buffer space with nothing queued (the
    /// buffer's size less quinn-proto's own overhead), taken before the
    /// first offer.
    empty_space: Option<usize>,
}

/// Bytes of the sender's datagram arena (see the driver's module
/// comment: one allocation for many datagrams).
const DGRAM_ARENA: usize = 1 << 20;

impl DgramTx {
    fn new(rate: u64, job: &FlowJob<'_>, start: xferlab_core::time::Time) -> Self {
        let size = job.knobs.size as usize;
        DgramTx {
            pacer: Pacer::new(rate, size, job.knobs.batch.max(1), start),
            pattern: (0..size).map(|i| (i % 251) as u8).collect(),
            arena: BytesMut::with_capacity(DGRAM_ARENA),
            limit: job.quota.map(|q| q.div_ceil(size as u64)),
            seq: 0,
            done: false,
            since_done: None,
            empty_space: None,
        }
    }

    fn work(
        &mut self,
        conn: &mut quinn_proto::Connection,
        now: xferlab_core::time::Time,
        start: xferlab_core::time::Time,
        stopping: bool,
        closing: bool,
        instant: Instant,
    ) -> Step {
        let mut step = Step::default();
        if closing {
            return step;
        }
        if self.empty_space.is_none() {
            self.empty_space = Some(conn.datagrams().send_buffer_space());
        }
        if !self.done && (stopping || self.limit.is_some_and(|l| self.seq >= l)) {
            self.done = true;
            self.since_done = Some(instant);
        }
        if self.done {
            // Close once the queued datagrams left (or after the grace).
            let drained = self
                .empty_space
                .is_none_or(|e| conn.datagrams().send_buffer_space() >= e);
            if drained
                || self
                    .since_done
                    .is_some_and(|t| instant.duration_since(t) >= CLOSE_GRACE)
            {
                step.close = true;
            }
            return step;
        }
        match conn.datagrams().max_size() {
            None => {
                step.failed = Some("the QUIC peer does not take DATAGRAM frames (RFC 9221)".into());
                return step;
            }
            Some(max) if max < self.pattern.len() => {
                // Too large for the path as it stands: every offer is
                // refused until the MTU discovery raises the limit.
                let due = self.pacer.due(now);
                if due > 0 {
                    step.too_large += u64::from(due);
                    self.pacer.sent(due, now);
                }
                return step;
            }
            Some(_) => {}
        }
        let stamp = now.duration_since(start).as_nanos() as u64;
        let len = self.pattern.len();
        // Everything due now, a pacer batch at a time (a sender behind
        // its schedule catches up in one turn: the offers are the
        // application's, whatever the connection makes of them).
        loop {
            let due = self.pacer.due(now);
            if due == 0 {
                break;
            }
            step.busy = true;
            for _ in 0..due {
                if self.limit.is_some_and(|l| self.seq >= l) {
                    break;
                }
                // A full queue refuses without the datagram being made.
                if conn.datagrams().send_buffer_space() < len {
                    step.blocked += 1;
                    continue;
                }
                if self.arena.capacity() < len {
                    self.arena.reserve(DGRAM_ARENA);
                }
                self.arena.extend_from_slice(&self.pattern);
                write_header(&mut self.arena[..HEADER_LEN], self.seq, stamp);
                let d = self.arena.split().freeze();
                match conn.datagrams().send(d, false) {
                    Ok(()) => self.seq += 1,
                    Err(SendDatagramError::Blocked(_)) => step.blocked += 1,
                    Err(SendDatagramError::TooLarge) => step.too_large += 1,
                    Err(e) => {
                        step.failed = Some(format!("QUIC DATAGRAM: {e}"));
                        return step;
                    }
                }
            }
            self.pacer.sent(due, now);
            if self.limit.is_some_and(|l| self.seq >= l) {
                break;
            }
        }
        step
    }
}

/// A DATAGRAM receiver: each datagram's header into the UDP counters.
#[derive(Default)]
struct DgramRx {
    ready: bool,
    stats: RecvStats,
    bytes: u64,
    /// Datagrams taken from the connection.
    read: u64,
}

impl DgramRx {
    fn work(&mut self, conn: &mut quinn_proto::Connection, now: xferlab_core::time::Time) -> Step {
        let mut step = Step::default();
        if !self.ready {
            return step;
        }
        self.ready = false;
        while let Some(d) = conn.datagrams().recv() {
            step.busy = true;
            self.read += 1;
            self.bytes += d.len() as u64;
            if let Some((seq, send_ns)) = read_header(&d) {
                self.stats.on_datagram(seq, send_ns, now.as_nanos());
            }
        }
        step
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::flow::FlowShared;
    use crate::transport::sizing::StreamSizes;
    use xferlab_core::spec::Knobs;

    /// A client flow whose peer's port is bound but speaks no QUIC (a
    /// silent socket) ends after the handshake timeout with one line
    /// naming the address and the timeout.
    #[test]
    fn an_unanswered_handshake_ends_the_flow_with_one_line() {
        let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.connect(silent.local_addr().unwrap()).unwrap();
        let socket = FlowSocket::Datagram(sock);
        let knobs = Knobs::default();
        let io: &dyn crate::transport::TransportIo = &super::super::Quic;
        let shared = FlowShared::of(io, &knobs);
        let flags = SideFlags::default();
        let started = Instant::now();
        let out = run(FlowJob {
            socket: &socket,
            endpoint: Endpoint::Client,
            role: FlowRole::Sender,
            knobs: &knobs,
            quota: None,
            shared: &shared,
            flags: &flags,
            wire: Default::default(),
            sizes: StreamSizes::for_flow(&knobs, None, false),
        });
        let FlowEnd::Aborted(why) = out.end else {
            panic!("{:?}", out.end)
        };
        let peer = silent.local_addr().unwrap().to_string();
        assert!(
            why.contains("QUIC handshake")
                && why.contains(&peer)
                && why.contains("timed out after 0.6 s"),
            "{why}"
        );
        assert!(!why.contains('\n'), "{why}");
        assert!(started.elapsed() >= HANDSHAKE_TIMEOUT, "ended early: {why}");
        // The client tried: the silent socket got its Initial packets.
        silent.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 2048];
        let n = silent.recv(&mut buf).expect("no Initial arrived");
        assert!(n >= 1200, "an Initial is padded to 1200 bytes, got {n}");
    }
}
