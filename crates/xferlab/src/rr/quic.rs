//! rr over QUIC (`--quic`, modes quic-rr and quic-crr) on the QUIC
//! transport's driver ([`crate::transport::quic::driver`]), quinn-proto
//! sans-IO in this loop.
//!
//! * **quic-rr**: one long-lived connection per flow; every transaction
//!   opens a bidirectional stream, writes the request and FIN, and reads
//!   the response to its FIN (up to `--depth` streams at once).
//! * **quic-crr**: a new connection per transaction (a full handshake:
//!   the server sends no session tickets and takes no 0-RTT, so nothing
//!   is resumed), one stream as above, then the client closes it. The
//!   time from the connect to the handshake's end is the `connect`
//!   latency, as tcp-crr's connect().
//!
//! A connection's first stream opens with the flow's hello (session
//! token and flow id, as a TCP rr connection's first bytes), so the
//! server knows whose it is before it answers; the request's `-r` bytes
//! follow it. Each client engine thread runs one endpoint on one UDP
//! socket for all its flows' connections; the server runs one endpoint
//! on the session's rr port (a QUIC connection's state cannot be shared
//! between threads, and one loop answers thousands of streams). Data
//! paths allocate nothing per packet: requests and responses are written
//! from one pattern buffer, and reads only count bytes.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quinn_proto::{
    ClientConfig, ConnectionError, ConnectionHandle, Dir, EndpointConfig, Event, IdleTimeout,
    ReadError, ServerConfig, StreamEvent, StreamId, TransportConfig, VarInt, WriteError,
};
use xferlab_core::latency::LatencyRecorder;
use xferlab_core::result::FlowEnd;
use xferlab_core::rr::tracker::{Reply, Tracker};
use xferlab_core::rr::wire::{decode_tcp_hello, encode_tcp_hello, TCP_HELLO_LEN};
use xferlab_core::rr::RrMode;
use xferlab_core::spec::{Knobs, Transport};
use xferlab_core::time::Time;
use xferlab_core::transport::quic::{QuicCounters, CONGESTION_CONTROLLERS};
use xferlab_core::transport::{TransportCounters, TransportSection};

use super::client_flow::{ClientPlan, DRAIN_TIMEOUT};
use super::counters::FlowCounters;
use super::server_engine::{wait_for_slot, RrSocket, ServerPlan};
use super::side::{flow_digits, EngineFlags, FlowResult, FLAG_POLL};
use crate::net::canonical;
use crate::sys::clock;
use crate::transport::quic;
use crate::transport::quic::driver::Driver;
use crate::transport::quic::tls;

/// Bidirectional streams a connection may have open beyond `--depth`:
/// a stream's credit comes back only once the peer saw both its ends
/// close, so a ping-pong flow with credit for exactly one stream would
/// wait a round trip for MAX_STREAMS before each transaction.
const STREAM_CREDIT: u32 = 100;
/// quic-rr: a flow's handshake unanswered this long means no QUIC server
/// on the rr port (quinn-proto resends its Initial meanwhile).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// After a failed transaction, wait this long before the next one.
const RETRY_AFTER: Duration = Duration::from_millis(10);
/// Pattern bytes written per call.
const CHUNK: usize = 64 * 1024;
/// Connections the server's rr endpoint holds at once (those closing
/// included, which linger three probe timeouts): beyond it, refused.
const MAX_CONNECTIONS: usize = 16 * 1024;
/// How long the server serves after the client's stop while
/// connections are still open.
const LINGER: Duration = Duration::from_secs(3);
/// How often a client thread publishes its flows' connection counters
/// for the interval reader.
const PUBLISH_EVERY: Duration = Duration::from_millis(10);
/// Application error codes.
const DONE: u32 = 0;
const BAD_HELLO: u32 = 1;
const BAD_REQUEST: u32 = 2;

/// A stream's receive window (quinn-proto's default: 100 Mbit/s x 100
/// ms); the connection's is that for every stream it may have open.
const STREAM_WINDOW: u64 = 1_250_000;

/// The transport parameters of both ends: `-C` picks the controller.
fn transport_config(congestion: Option<&str>, depth: u32) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    t.max_concurrent_bidi_streams(depth.saturating_add(STREAM_CREDIT).into())
        .max_concurrent_uni_streams(0u32.into())
        .stream_receive_window(STREAM_WINDOW.try_into().unwrap_or(VarInt::MAX))
        .receive_window(conn_window(depth).try_into().unwrap_or(VarInt::MAX))
        .max_idle_timeout(IdleTimeout::try_from(quic::IDLE_TIMEOUT).ok())
        .datagram_receive_buffer_size(None);
    t.congestion_controller_factory(quic::controller(congestion.unwrap_or("cubic")));
    Arc::new(t)
}

fn conn_window(depth: u32) -> u64 {
    STREAM_WINDOW.saturating_mul(u64::from(depth.saturating_add(STREAM_CREDIT)))
}

/// The name of `-C`'s controller as the `quic` section shows it.
fn cc_name(congestion: Option<&str>) -> &'static str {
    CONGESTION_CONTROLLERS
        .iter()
        .copied()
        .find(|c| Some(*c) == congestion)
        .unwrap_or("cubic")
}

/// Adds a connection's counters (read as the stream flows' are, from
/// quinn-proto's statistics) to a flow's: counts summed over its
/// connections, the state (RTT, window, MTU) the latest one's.
fn add_counters(acc: &mut QuicCounters, conn: &quinn_proto::Connection, depth: u32, streams: u64) {
    let s = conn.stats();
    let m = conn.congestion_state().metrics();
    acc.established |= !conn.is_handshaking();
    acc.rtt = s.path.rtt;
    acc.min_rtt = conn.min_rtt();
    acc.cwnd = s.path.cwnd;
    acc.pacing_rate = m.pacing_rate;
    acc.mtu = s.path.current_mtu;
    acc.sent_packets += s.path.sent_packets;
    acc.lost_packets += s.path.lost_packets;
    acc.lost_bytes += s.path.lost_bytes;
    acc.congestion_events += s.path.congestion_events;
    acc.udp_tx_datagrams += s.udp_tx.datagrams;
    acc.udp_tx_bytes += s.udp_tx.bytes;
    acc.udp_rx_datagrams += s.udp_rx.datagrams;
    acc.udp_rx_bytes += s.udp_rx.bytes;
    acc.stream_frames_tx += s.frame_tx.stream;
    acc.stream_frames_rx += s.frame_rx.stream;
    acc.stream_window = STREAM_WINDOW;
    acc.conn_window = conn_window(depth);
    acc.streams += streams;
}

/// A flow's `quic` section over the test, none before any handshake.
fn section(acc: &QuicCounters) -> Option<TransportSection> {
    if !acc.established {
        return None;
    }
    let zero = QuicCounters {
        cc: acc.cc,
        ..QuicCounters::default()
    };
    TransportCounters::Quic(*acc).sample(&TransportCounters::Quic(zero))
}

fn lost_line(server: SocketAddr, reason: &ConnectionError) -> String {
    if let ConnectionError::TransportError(e) = reason {
        if e.reason.contains("certificate") {
            return format!(
                "certificate not trusted: the QUIC rr server at {server} presented one {} (pass the CA that signed it with --quic-ca, or leave --quic-ca out to not verify)",
                quic::why_untrusted(&e.reason)
            );
        }
    }
    format!("the QUIC connection with the rr server at {server} ended: {reason}")
}

// ---------------------------------------------------------------- client

/// One transaction's stream.
struct Tx {
    stream: StreamId,
    /// Hello bytes still to write (the connection's first stream only).
    head: usize,
    /// Request bytes still to write.
    body: usize,
    /// Response bytes received.
    got: usize,
}

struct Flow {
    id: u32,
    hello: [u8; TCP_HELLO_LEN],
    tracker: Tracker,
    latency: LatencyRecorder,
    connect: Option<LatencyRecorder>,
    latency_n: u64,
    latency_sum_ns: u64,
    conn: Option<ConnectionHandle>,
    established: bool,
    /// Streams opened on the current connection (the first carries the
    /// hello).
    opened: u64,
    connecting_since: (Time, Instant),
    txs: Vec<Tx>,
    /// Counters of the flow's connections closed so far (and, at the
    /// end, of its last).
    quic: QuicCounters,
    stopping: bool,
    retry_at: Option<Time>,
    end: Option<(FlowEnd, Time)>,
    local: String,
}

struct Client<'a> {
    plan: &'a ClientPlan,
    driver: Driver<'a>,
    config: ClientConfig,
    name: String,
    crr: bool,
    counters: &'a [FlowCounters],
    wbuf: Vec<u8>,
    /// Connection handle -> index of its flow.
    owner: Vec<Option<usize>>,
    local: String,
}

/// Runs one client engine thread's share of the flows (`ids`) over one
/// UDP socket until they end.
pub fn run_client(
    plan: Arc<ClientPlan>,
    ids: Vec<u32>,
    counters: Arc<[FlowCounters]>,
    flags: Arc<EngineFlags>,
) -> Vec<FlowResult> {
    let fail = |why: String| -> Vec<FlowResult> {
        let now = clock::now();
        ids.iter()
            .map(|&id| FlowResult {
                id,
                local: String::new(),
                remote: plan.server.to_string(),
                latency: None,
                connect: None,
                end: FlowEnd::Aborted(why.clone()),
                end_at: now,
                transport: None,
            })
            .collect()
    };
    let knobs = Knobs {
        buffer: plan.knobs.buffer,
        tos: plan.knobs.tos,
        ..Knobs::default()
    };
    let sock: UdpSocket = match crate::transport::bind(
        Transport::Udp,
        crate::net::any_port(plan.server),
        &knobs,
        false,
    ) {
        Ok(s) => s,
        Err(e) => return fail(format!("cannot open the rr flows' UDP socket: {e}")),
    };
    let files = tls::files();
    let crypto = match tls::client(&files) {
        Ok(c) => c,
        Err(e) => return fail(e.to_string()),
    };
    let mut config = ClientConfig::new(crypto);
    config.transport_config(transport_config(
        plan.knobs.congestion.as_deref(),
        plan.rr.depth,
    ));
    let driver = match Driver::new(
        &sock,
        Arc::new(EndpointConfig::default()),
        None,
        quic::DEFAULT_UDP_PAYLOAD,
    ) {
        Ok(d) => d,
        Err(e) => return fail(format!("the rr flows' QUIC endpoint: {e}")),
    };
    let rr = &plan.rr;
    let crr = rr.mode == RrMode::QuicCrr;
    let timeout = rr
        .mode
        .times_out()
        .then(|| Duration::from_secs_f64(rr.timeout_s));
    let digits = flow_digits(rr.flows);
    let now0 = (clock::now(), Instant::now());
    let local = sock
        .local_addr()
        .map(|a| canonical(a).to_string())
        .unwrap_or_default();
    let mut flows: Vec<Flow> = ids
        .iter()
        .map(|&id| Flow {
            id,
            hello: encode_tcp_hello(&plan.token, id),
            tracker: Tracker::new(rr.depth, timeout),
            latency: LatencyRecorder::new(digits),
            connect: crr.then(|| LatencyRecorder::new(digits)),
            latency_n: 0,
            latency_sum_ns: 0,
            conn: None,
            established: false,
            opened: 0,
            connecting_since: now0,
            txs: Vec::with_capacity(rr.depth as usize),
            quic: QuicCounters {
                cc: cc_name(plan.knobs.congestion.as_deref()),
                ..QuicCounters::default()
            },
            stopping: false,
            retry_at: None,
            end: None,
            local: String::new(),
        })
        .collect();
    let mut c = Client {
        plan: &plan,
        driver,
        config,
        name: tls::server_name(&files, plan.server.ip()),
        crr,
        counters: &counters,
        wbuf: (0..CHUNK).map(|i| (i % 251) as u8).collect(),
        owner: Vec::new(),
        local,
    };
    crate::sys::affinity::tighten_timer_slack();
    // quic-rr: every flow's connection now; its first request goes out
    // once the handshake is done, so no transaction's latency holds it.
    // quic-crr: the first transaction's connection.
    let now = clock::now();
    for i in 0..flows.len() {
        c.fill(&mut flows, i, now);
    }
    let mut drain_deadline: Option<Time> = None;
    let mut next_scan: Option<Time> = None;
    let mut next_publish = Instant::now();
    loop {
        let now_i = Instant::now();
        if now_i >= next_publish {
            next_publish = now_i + PUBLISH_EVERY;
            for f in &flows {
                c.publish_quic(f);
            }
        }
        if let Err(e) = c.driver.recv(now_i) {
            c.end_all(&mut flows, &format!("rr flows' UDP socket: {e}"));
            break;
        }
        let now = clock::now();
        if flags.abort.load(Relaxed) {
            c.end_all(&mut flows, crate::transport::flow::ABORTED);
            break;
        }
        if drain_deadline.is_none() && flags.stop.load(Relaxed) {
            drain_deadline = Some(now + DRAIN_TIMEOUT.max(timeout.unwrap_or_default() * 2));
            for i in 0..flows.len() {
                flows[i].stopping = true;
                c.settle(&mut flows, i, now);
            }
        }
        if drain_deadline.is_some_and(|d| now >= d) {
            c.end_all(
                &mut flows,
                "responses still outstanding 5 s after the test stopped",
            );
            break;
        }
        while let Some((h, ev)) = c.driver.poll_event() {
            let Some(i) = c.owner.get(h.0).copied().flatten() else {
                continue;
            };
            if flows[i].conn != Some(h) || flows[i].end.is_some() {
                continue;
            }
            c.on_event(&mut flows, i, ev, now, now_i);
        }
        if next_scan.is_none_or(|t| now >= t) {
            next_scan = Some(now + FLAG_POLL);
            for i in 0..flows.len() {
                c.on_timer(&mut flows, i, now, now_i);
                let f = &flows[i];
                for t in [f.tracker.deadline(), f.retry_at].into_iter().flatten() {
                    next_scan = next_scan.map(|n| n.min(t));
                }
            }
        }
        if let Err(e) = c.driver.transmit(now_i) {
            c.end_all(&mut flows, &format!("rr flows' UDP socket: {e}"));
            break;
        }
        if c.driver.traffic.refused && drain_deadline.is_none() {
            let why = format!(
                "the rr server's UDP port {} is gone (ICMP port unreachable)",
                plan.server
            );
            c.end_all(&mut flows, &why);
            break;
        }
        if flows.iter().all(|f| f.end.is_some()) {
            break;
        }
        let until = next_scan.map(|t| now_i + t.duration_since(clock::now()));
        c.driver.wait(now_i, until);
    }
    // The closes go out before the thread ends.
    let now_i = Instant::now();
    for f in &mut flows {
        if let Some(conn) = f.conn.and_then(|h| c.driver.connection(h)) {
            add_counters(&mut f.quic, conn, rr.depth, f.opened);
            conn.close(now_i, DONE.into(), Bytes::new());
        }
    }
    c.driver.transmit(now_i).ok();
    for f in &flows {
        c.publish_quic(f);
    }
    let end = clock::now();
    let remote = plan.server.to_string();
    flows
        .into_iter()
        .map(|f| {
            counters[f.id as usize].publish(&f.tracker.counts(), f.latency_n, f.latency_sum_ns);
            FlowResult {
                id: f.id,
                local: if f.local.is_empty() {
                    c.local.clone()
                } else {
                    f.local
                },
                remote: remote.clone(),
                latency: Some(f.latency),
                connect: f.connect,
                end: f.end.as_ref().map_or(FlowEnd::Completed, |e| e.0.clone()),
                end_at: f.end.map_or(end, |e| e.1),
                transport: section(&f.quic),
            }
        })
        .collect()
}

impl Client<'_> {
    fn publish(&self, f: &Flow) {
        self.counters[f.id as usize].publish(&f.tracker.counts(), f.latency_n, f.latency_sum_ns);
    }

    /// Publishes flow `f`'s counters (its closed connections' and its
    /// current one's) for the interval reader.
    fn publish_quic(&mut self, f: &Flow) {
        let Some(q) = self.counters[f.id as usize].quic.as_ref() else {
            return;
        };
        let mut now = f.quic;
        if let Some(conn) = f.conn.and_then(|h| self.driver.connection(h)) {
            add_counters(&mut now, conn, self.plan.rr.depth, f.opened);
        }
        q.publish(&now);
    }

    fn end_all(&mut self, flows: &mut [Flow], why: &str) {
        let now = clock::now();
        for f in flows.iter_mut().filter(|f| f.end.is_none()) {
            f.tracker.fail_all();
            f.end = Some((FlowEnd::Aborted(why.to_string()), now));
        }
    }

    fn set_owner(&mut self, h: ConnectionHandle, i: Option<usize>) {
        if self.owner.len() <= h.0 {
            self.owner.resize(h.0 + 1, None);
        }
        self.owner[h.0] = i;
    }

    /// Closes flow `i`'s connection (a clean close, code 0).
    fn close(&mut self, f: &mut Flow, now: Instant) {
        if let Some(h) = f.conn.take() {
            if let Some(conn) = self.driver.connection(h) {
                add_counters(&mut f.quic, conn, self.plan.rr.depth, f.opened);
                conn.close(now, DONE.into(), Bytes::new());
            }
            self.set_owner(h, None);
        }
        f.established = false;
        f.opened = 0;
        f.txs.clear();
    }

    fn connect(&mut self, flows: &mut [Flow], i: usize, now: Time) -> bool {
        let now_i = Instant::now();
        match self
            .driver
            .connect(now_i, self.config.clone(), self.plan.server, &self.name)
        {
            Ok(h) => {
                self.set_owner(h, Some(i));
                let f = &mut flows[i];
                f.conn = Some(h);
                f.established = false;
                f.opened = 0;
                f.connecting_since = (now, now_i);
                true
            }
            Err(e) => {
                let f = &mut flows[i];
                f.tracker.fail_all();
                f.end = Some((
                    FlowEnd::Aborted(format!(
                        "cannot start a QUIC connection to {}: {e}",
                        self.plan.server
                    )),
                    now,
                ));
                false
            }
        }
    }

    /// Issues transactions until `depth` are outstanding (unless stopping
    /// or backing off).
    fn fill(&mut self, flows: &mut [Flow], i: usize, now: Time) {
        let f = &flows[i];
        if f.end.is_some() {
            return;
        }
        // New transactions stop with the test, or wait out a back-off;
        // a quic-crr transaction already counted still gets its stream.
        let new_ok = !f.stopping && f.retry_at.is_none_or(|t| now >= t);
        if !new_ok && (f.conn.is_none() || !self.crr) {
            return;
        }
        flows[i].retry_at = None;
        if flows[i].conn.is_none() {
            // quic-crr: the transaction starts with its connection.
            if self.crr && flows[i].tracker.can_send() {
                flows[i].tracker.on_send(now);
            }
            self.connect(flows, i, now);
            self.publish(&flows[i]);
            return;
        }
        if !flows[i].established {
            return;
        }
        let req = self.plan.rr.request_wire();
        let f = &mut flows[i];
        let Some(conn) = f.conn.and_then(|h| self.driver.connection(h)) else {
            return;
        };
        loop {
            // quic-crr's one transaction was counted at its connect.
            let open_more = if self.crr {
                f.opened == 0 && f.tracker.outstanding() == 1
            } else {
                f.tracker.can_send()
            };
            if !open_more {
                break;
            }
            let Some(stream) = conn.streams().open(Dir::Bi) else {
                // No stream credit: StreamEvent::Available calls again.
                break;
            };
            if !self.crr {
                f.tracker.on_send(now);
            }
            let head = if f.opened == 0 { TCP_HELLO_LEN } else { 0 };
            f.opened += 1;
            f.txs.push(Tx {
                stream,
                head,
                body: req,
                got: 0,
            });
            let k = f.txs.len() - 1;
            if let Err(why) = write_tx(conn, &mut f.txs[k], &f.hello, &self.wbuf) {
                tracing::debug!(flow = f.id, why, "QUIC rr request not written");
            }
        }
        self.publish(f);
    }

    fn on_event(&mut self, flows: &mut [Flow], i: usize, ev: Event, now: Time, now_i: Instant) {
        match ev {
            Event::Connected => {
                let f = &mut flows[i];
                f.established = true;
                if f.local.is_empty() {
                    f.local = self.local.clone();
                }
                if let Some(c) = f.connect.as_mut() {
                    if now >= self.plan.measure_from {
                        let ns = now_i.duration_since(f.connecting_since.1).as_nanos();
                        c.record(ns.min(u128::from(u64::MAX)) as u64);
                    }
                }
                self.fill(flows, i, now);
            }
            Event::ConnectionLost { reason } => self.on_lost(flows, i, &reason, now),
            Event::Stream(StreamEvent::Available { .. }) => self.fill(flows, i, now),
            Event::Stream(StreamEvent::Writable { id }) => {
                let f = &mut flows[i];
                let Some(conn) = f.conn.and_then(|h| self.driver.connection(h)) else {
                    return;
                };
                if let Some(tx) = f.txs.iter_mut().find(|t| t.stream == id) {
                    write_tx(conn, tx, &f.hello, &self.wbuf).ok();
                }
            }
            Event::Stream(StreamEvent::Readable { id }) => self.on_readable(flows, i, id, now),
            Event::Stream(StreamEvent::Stopped { id, .. }) => {
                // The server refused the request (a bad one).
                self.fail_tx(flows, i, id, now, now_i);
            }
            Event::Stream(StreamEvent::Opened { .. } | StreamEvent::Finished { .. })
            | Event::HandshakeDataReady
            | Event::DatagramReceived
            | Event::DatagramsUnblocked => {}
        }
    }

    fn on_lost(&mut self, flows: &mut [Flow], i: usize, reason: &ConnectionError, now: Time) {
        let server = self.plan.server;
        let f = &mut flows[i];
        if let Some(h) = f.conn.take() {
            if let Some(conn) = self.driver.connection(h) {
                add_counters(&mut f.quic, conn, self.plan.rr.depth, f.opened);
            }
            self.set_owner(h, None);
        }
        let established = std::mem::replace(&mut f.established, false);
        f.txs.clear();
        f.opened = 0;
        if self.crr {
            // One failed transaction; the next one connects anew.
            f.tracker.fail_all();
            f.retry_at = Some(now + RETRY_AFTER);
            self.publish(f);
            if f.stopping {
                f.end = Some((FlowEnd::Completed, now));
            } else if !established && !matches!(reason, ConnectionError::TimedOut) {
                // A handshake refused outright (a certificate, no
                // server) will be refused again: the flow ends with why.
                f.end = Some((FlowEnd::Aborted(lost_line(server, reason)), now));
            }
            return;
        }
        f.tracker.fail_all();
        let clean =
            matches!(reason, ConnectionError::ApplicationClosed(c) if c.error_code == DONE.into());
        f.end = Some((
            if f.stopping && clean {
                FlowEnd::Completed
            } else {
                FlowEnd::Aborted(lost_line(server, reason))
            },
            now,
        ));
        self.publish(f);
    }

    fn fail_tx(&mut self, flows: &mut [Flow], i: usize, id: StreamId, now: Time, now_i: Instant) {
        let f = &mut flows[i];
        let Some(k) = f.txs.iter().position(|t| t.stream == id) else {
            return;
        };
        f.txs.swap_remove(k);
        // An ordered stream of transactions: the oldest one failed.
        f.tracker.fail_oldest();
        if self.crr {
            self.close(f, now_i);
            f.retry_at = Some(now + RETRY_AFTER);
        }
        self.publish(&flows[i]);
        self.after_answer(flows, i, now);
    }

    fn on_readable(&mut self, flows: &mut [Flow], i: usize, id: StreamId, now: Time) {
        let resp = self.plan.rr.response_wire();
        let f = &mut flows[i];
        let Some(conn) = f.conn.and_then(|h| self.driver.connection(h)) else {
            return;
        };
        let Some(k) = f.txs.iter().position(|t| t.stream == id) else {
            return;
        };
        let mut fin = false;
        let mut reset = false;
        if let Ok(mut chunks) = conn.recv_stream(id).read(true) {
            loop {
                match chunks.next(usize::MAX) {
                    Ok(Some(c)) => f.txs[k].got += c.bytes.len(),
                    Ok(None) => {
                        fin = true;
                        break;
                    }
                    Err(ReadError::Blocked) => break,
                    Err(ReadError::Reset(_)) => {
                        reset = true;
                        break;
                    }
                }
            }
            let _ = chunks.finalize();
        }
        if !fin && !reset {
            return;
        }
        let got = f.txs[k].got;
        f.txs.swap_remove(k);
        if reset || got != resp {
            f.tracker.fail_oldest();
            tracing::debug!(flow = f.id, got, resp, "QUIC rr response cut short");
        } else if let Reply::Completed(lat) = f.tracker.on_response_in_order(now) {
            let ns = lat.as_nanos().min(u128::from(u64::MAX)) as u64;
            f.latency_n += 1;
            f.latency_sum_ns += ns;
            if now >= self.plan.measure_from {
                f.latency.record(ns);
            }
        }
        if self.crr {
            self.close(f, Instant::now());
            if reset || got != resp {
                f.retry_at = Some(now + RETRY_AFTER);
            }
        }
        self.publish(&flows[i]);
        self.after_answer(flows, i, now);
    }

    fn after_answer(&mut self, flows: &mut [Flow], i: usize, now: Time) {
        if flows[i].stopping {
            self.settle(flows, i, now);
        } else {
            self.fill(flows, i, now);
        }
    }

    /// After the stop: a flow with nothing outstanding closes its
    /// connection and is done.
    fn settle(&mut self, flows: &mut [Flow], i: usize, now: Time) {
        let f = &mut flows[i];
        if f.end.is_some() {
            return;
        }
        if f.tracker.outstanding() > 0 {
            return;
        }
        self.close(f, Instant::now());
        f.end = Some((FlowEnd::Completed, now));
    }

    fn on_timer(&mut self, flows: &mut [Flow], i: usize, now: Time, now_i: Instant) {
        let f = &mut flows[i];
        if f.end.is_some() {
            return;
        }
        if !self.crr
            && !f.established
            && f.conn.is_some()
            && now_i.duration_since(f.connecting_since.1) >= HANDSHAKE_TIMEOUT
        {
            f.end = Some((
                FlowEnd::Aborted(format!(
                    "QUIC handshake with the rr server at {} timed out after {} s: no QUIC server answered on the rr port",
                    self.plan.server,
                    HANDSHAKE_TIMEOUT.as_secs()
                )),
                now,
            ));
            return;
        }
        if f.tracker.expire(now) > 0 {
            // quic-crr: the timed-out transaction's connection is
            // abandoned; the next one connects anew.
            self.close(f, now_i);
            self.publish(f);
        }
        if f.stopping {
            self.settle(flows, i, now);
        } else {
            self.fill(flows, i, now);
        }
    }
}

/// Writes what is left of a transaction's hello and request, then its
/// FIN. Err: the stream is gone (its connection failing says why).
fn write_tx(
    conn: &mut quinn_proto::Connection,
    tx: &mut Tx,
    hello: &[u8; TCP_HELLO_LEN],
    wbuf: &[u8],
) -> Result<(), &'static str> {
    let mut s = conn.send_stream(tx.stream);
    while tx.head > 0 || tx.body > 0 {
        let buf = if tx.head > 0 {
            &hello[TCP_HELLO_LEN - tx.head..]
        } else {
            &wbuf[..tx.body.min(wbuf.len())]
        };
        match s.write(buf) {
            Ok(n) => {
                let h = n.min(tx.head);
                tx.head -= h;
                tx.body -= n - h;
            }
            Err(WriteError::Blocked) => return Ok(()),
            Err(_) => return Err("stream closed"),
        }
    }
    s.finish().map_err(|_| "stream closed")
}

// ---------------------------------------------------------------- server

struct ServerStream {
    id: StreamId,
    /// Request bytes received (the hello not counted).
    got: usize,
    fin: bool,
    answered: bool,
    /// Response bytes still to write.
    to_write: usize,
}

struct ServerConn {
    flow: Option<u32>,
    hello: [u8; TCP_HELLO_LEN],
    hello_got: usize,
    streams: Vec<ServerStream>,
}

/// The server's rr endpoint: one thread on the session's rr port
/// answering every flow's connections until the client stopped and they
/// closed (or [`LINGER`]).
pub fn run_server(
    plan: Arc<ServerPlan>,
    counters: Arc<[FlowCounters]>,
    flags: Arc<EngineFlags>,
) -> Vec<FlowResult> {
    let RrSocket::Udp(sock) = &plan.socket else {
        return Vec::new();
    };
    let server = match tls::server(&tls::files()) {
        Ok(crypto) => {
            let mut s = ServerConfig::with_crypto(crypto);
            s.transport_config(transport_config(plan.congestion.as_deref(), plan.rr.depth));
            s.migration(false);
            Arc::new(s)
        }
        Err(e) => {
            tracing::warn!(error = %e, "rr over QUIC: no server configuration");
            return Vec::new();
        }
    };
    let mut driver = match Driver::new(
        sock,
        Arc::new(EndpointConfig::default()),
        Some(server),
        quic::DEFAULT_UDP_PAYLOAD,
    ) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "rr over QUIC: the rr port's endpoint");
            return Vec::new();
        }
    };
    crate::sys::affinity::tighten_timer_slack();
    let wbuf: Vec<u8> = (0..CHUNK).map(|i| (i % 251) as u8).collect();
    let mut conns: Vec<Option<ServerConn>> = Vec::new();
    let mut stop_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if driver.recv(now).is_err() || flags.abort.load(Relaxed) {
            break;
        }
        if stop_at.is_none() && flags.stop.load(Relaxed) {
            stop_at = Some(now);
        }
        while let Some(inc) = driver.next_incoming() {
            // Only the session's client, and a bounded number of
            // connections (quic-crr's closing ones included).
            if canonical(inc.remote_address()).ip() != plan.peer_ip
                || driver.live() >= MAX_CONNECTIONS
                || stop_at.is_some()
            {
                driver.refuse(inc);
                continue;
            }
            match driver.accept(now, inc, None) {
                Ok(h) => {
                    if conns.len() <= h.0 {
                        conns.resize_with(h.0 + 1, || None);
                    }
                    conns[h.0] = Some(ServerConn {
                        flow: None,
                        hello: [0; TCP_HELLO_LEN],
                        hello_got: 0,
                        streams: Vec::new(),
                    });
                }
                Err(e) => tracing::debug!(error = %e.cause, "rr over QUIC: accept failed"),
            }
        }
        while let Some((h, ev)) = driver.poll_event() {
            let Some(Some(sc)) = conns.get_mut(h.0) else {
                continue;
            };
            let Some(conn) = driver.connection(h) else {
                continue;
            };
            let verdict = match ev {
                Event::ConnectionLost { .. } => Err(None),
                Event::Stream(StreamEvent::Opened { .. }) => {
                    let mut v = Ok(());
                    while let Some(id) = conn.streams().accept(Dir::Bi) {
                        sc.streams.push(ServerStream {
                            id,
                            got: 0,
                            fin: false,
                            answered: false,
                            to_write: 0,
                        });
                        v = v.and(serve_read(&plan, sc, conn, id));
                    }
                    v
                }
                Event::Stream(StreamEvent::Readable { id }) => serve_read(&plan, sc, conn, id),
                _ => Ok(()),
            };
            let verdict = verdict.and_then(|()| answer(&plan, &counters, &flags, sc, conn, &wbuf));
            if let Err(code) = verdict {
                if let Some(code) = code {
                    conn.close(now, code.into(), Bytes::new());
                }
                conns[h.0] = None;
            }
        }
        if driver.transmit(now).is_err() {
            break;
        }
        if let Some(t) = stop_at {
            if driver.live() == 0 || now.duration_since(t) >= LINGER {
                break;
            }
        }
        driver.wait(now, Some(now + FLAG_POLL));
    }
    Vec::new()
}

/// Reads what stream `id` brought: the connection's hello on its first
/// stream, then request bytes, then the FIN. Err(code): close the
/// connection with it.
fn serve_read(
    plan: &ServerPlan,
    sc: &mut ServerConn,
    conn: &mut quinn_proto::Connection,
    id: StreamId,
) -> Result<(), Option<u32>> {
    let Some(st) = sc.streams.iter_mut().find(|s| s.id == id) else {
        return Ok(());
    };
    let first = id.index() == 0;
    let mut rs = conn.recv_stream(id);
    let Ok(mut chunks) = rs.read(true) else {
        return Ok(());
    };
    loop {
        match chunks.next(usize::MAX) {
            Ok(Some(c)) => {
                let mut data = &c.bytes[..];
                if first && sc.hello_got < TCP_HELLO_LEN {
                    let k = (TCP_HELLO_LEN - sc.hello_got).min(data.len());
                    sc.hello[sc.hello_got..sc.hello_got + k].copy_from_slice(&data[..k]);
                    sc.hello_got += k;
                    data = &data[k..];
                }
                st.got += data.len();
            }
            Ok(None) => {
                st.fin = true;
                break;
            }
            Err(ReadError::Blocked) => break,
            Err(ReadError::Reset(_)) => {
                // The client gave the transaction up.
                st.answered = true;
                st.fin = true;
                st.to_write = 0;
                break;
            }
        }
    }
    let _ = chunks.finalize();
    if sc.flow.is_none() && sc.hello_got == TCP_HELLO_LEN {
        let (token, flow) = decode_tcp_hello(&sc.hello);
        if token != plan.token || flow >= plan.rr.flows {
            return Err(Some(BAD_HELLO));
        }
        if plan.rr.mode == RrMode::QuicRr {
            if plan.claimed[flow as usize].swap(true, Relaxed) {
                return Err(Some(BAD_HELLO));
            }
            plan.attached.fetch_add(1, Relaxed);
            (plan.notify)();
        }
        sc.flow = Some(flow);
    }
    Ok(())
}

/// Answers every complete request of a connection whose flow is known,
/// and writes what is left of earlier answers.
fn answer(
    plan: &ServerPlan,
    counters: &[FlowCounters],
    flags: &EngineFlags,
    sc: &mut ServerConn,
    conn: &mut quinn_proto::Connection,
    wbuf: &[u8],
) -> Result<(), Option<u32>> {
    let Some(flow) = sc.flow else {
        return Ok(());
    };
    let (req, resp) = (plan.rr.request_wire(), plan.rr.response_wire());
    let c = &counters[flow as usize];
    let mut k = 0;
    while k < sc.streams.len() {
        let st = &mut sc.streams[k];
        if st.fin && !st.answered {
            st.answered = true;
            c.sent.fetch_add(1, Relaxed);
            if st.got != req {
                // Not the request size: refused, the client counts it
                // failed.
                conn.send_stream(st.id).reset(BAD_REQUEST.into()).ok();
                c.dropped.fetch_add(1, Relaxed);
                sc.streams.swap_remove(k);
                continue;
            }
            if let Some(b) = &plan.budget {
                if !wait_for_slot(b, resp as u64, flags) {
                    conn.send_stream(st.id).reset(BAD_REQUEST.into()).ok();
                    c.dropped.fetch_add(1, Relaxed);
                    sc.streams.swap_remove(k);
                    continue;
                }
            }
            st.to_write = resp;
            c.completed.fetch_add(1, Relaxed);
        }
        if st.answered && st.to_write > 0 {
            let mut s = conn.send_stream(st.id);
            while st.to_write > 0 {
                match s.write(&wbuf[..st.to_write.min(wbuf.len())]) {
                    Ok(n) => st.to_write -= n,
                    Err(WriteError::Blocked) => break,
                    Err(_) => {
                        st.to_write = 0;
                        break;
                    }
                }
            }
            if st.to_write == 0 {
                s.finish().ok();
                sc.streams.swap_remove(k);
                continue;
            }
        } else if st.answered && st.fin {
            // Reset by the client and never answered.
            sc.streams.swap_remove(k);
            continue;
        }
        k += 1;
    }
    Ok(())
}
