//! The client's engine: a few threads, each with an epoll set and a share
//! of the flows. Per transaction a flow does one read and one write (TCP
//! RR), one recv and one send (UDP RR), or connect/write/read/close (CRR),
//! plus a handful of relaxed atomic stores; no allocation, locks or
//! formatting.

use crate::sys::clock;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use xferlab_core::time::Time;

use socket2::{Domain, Socket, Type};
use xferlab_core::latency::LatencyRecorder;
use xferlab_core::proto::wire::TOKEN_LEN;
use xferlab_core::result::FlowEnd;
use xferlab_core::rr::tracker::{Reply, Tracker};
use xferlab_core::rr::wire::{
    decode_udp_header, encode_tcp_hello, encode_udp_header, TCP_HELLO_LEN,
};
use xferlab_core::rr::{RrMode, RrSpec, RrWait};
use xferlab_core::spec::Knobs;

use super::counters::FlowCounters;
use super::poller::Poller;
use super::side::{flow_digits, EngineFlags, FlowResult, FLAG_POLL};
use crate::net::sockopt;

/// How long a stopped flow may wait for its outstanding responses before
/// it is cut (TCP RR; UDP and CRR transactions time out on their own).
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// After a failed transaction (refused, reset), wait this long before the
/// next one, so a dead server is not hammered in a tight loop.
const RETRY_AFTER: Duration = Duration::from_millis(10);
/// Largest single read or write.
const CHUNK: usize = 64 * 1024;
/// How long a busy-polling flow spins before it sleeps in read().
pub const SPIN_BUDGET: Duration = Duration::from_micros(50);
/// Largest request the one-flow fast path writes with a blocking write.
const FAST_PATH_MAX: usize = 4096;
/// Datagrams read per readiness report before looking at other flows.
const UDP_BURST: usize = 32;

/// What every client engine thread needs to know.
pub struct ClientPlan {
    pub rr: RrSpec,
    /// The server's rr socket.
    pub server: SocketAddr,
    pub token: [u8; TOKEN_LEN],
    pub knobs: Knobs,
    /// Latencies before this moment (the warm-up) stay out of the
    /// histograms.
    pub measure_from: Time,
    /// How this end's threads wait (`--wait`, `auto` decided).
    pub wait: RrWait,
}

/// A flow's socket as the driver connected it.
pub enum ClientConn {
    Tcp(TcpStream),
    Udp(UdpSocket),
    /// Connects anew per transaction.
    Crr,
}

enum Io {
    Tcp(TcpStream),
    Udp(UdpSocket),
    Crr(Crr),
}

enum Crr {
    Idle,
    Connecting(Socket),
    Open(TcpStream),
}

struct Flow {
    id: u32,
    io: Io,
    tracker: Tracker,
    latency: LatencyRecorder,
    connect: Option<LatencyRecorder>,
    latency_n: u64,
    latency_sum_ns: u64,
    /// Request bytes queued but not yet written.
    to_write: usize,
    /// CRR: bytes of hello + request written on the current connection.
    crr_written: usize,
    /// Bytes of the response being received.
    got: usize,
    want_write: bool,
    stopping: bool,
    shut: bool,
    retry_at: Option<Time>,
    end: Option<(FlowEnd, Time)>,
    local: String,
    remote: String,
    /// CRR: hello + the first part of the request, written at once.
    crr_first: Vec<u8>,
    /// CRR: when connect() was called for the current transaction.
    crr_started: Time,
    /// CRR: the current connection is in the epoll set.
    crr_registered: bool,
}

struct Engine<'a> {
    plan: &'a ClientPlan,
    poller: Poller,
    counters: &'a [FlowCounters],
    /// Pattern bytes requests are written from.
    wbuf: Vec<u8>,
    rbuf: Vec<u8>,
    /// The one-flow fast path: TCP reads block, so a response's time is
    /// taken after the read returns, not when the loop went to read.
    blocking_reads: bool,
}

/// Runs one engine thread over `flows` until they end; returns each
/// flow's latencies and how it ended.
pub fn run(
    plan: Arc<ClientPlan>,
    conns: Vec<(u32, ClientConn)>,
    counters: Arc<[FlowCounters]>,
    flags: Arc<EngineFlags>,
) -> Vec<FlowResult> {
    let rr = &plan.rr;
    let digits = flow_digits(rr.flows);
    let timeout = match rr.mode {
        RrMode::TcpRr => None,
        _ => Some(Duration::from_secs_f64(rr.timeout_s)),
    };
    let now0 = clock::now();
    let mut flows: Vec<Flow> = conns
        .into_iter()
        .map(|(id, c)| {
            let (io, local, remote) = match c {
                ClientConn::Tcp(s) => {
                    let (l, r) = (addr(s.local_addr()), addr(s.peer_addr()));
                    (Io::Tcp(s), l, r)
                }
                ClientConn::Udp(s) => {
                    let (l, r) = (addr(s.local_addr()), addr(s.peer_addr()));
                    (Io::Udp(s), l, r)
                }
                ClientConn::Crr => (Io::Crr(Crr::Idle), String::new(), plan.server.to_string()),
            };
            let mut crr_first = Vec::new();
            if rr.mode == RrMode::TcpCrr {
                crr_first.extend_from_slice(&encode_tcp_hello(&plan.token, id));
                crr_first.extend((0..rr.request_wire().min(CHUNK)).map(|i| (i % 251) as u8));
            }
            Flow {
                id,
                io,
                tracker: Tracker::new(rr.depth, timeout),
                latency: LatencyRecorder::new(digits),
                connect: (rr.mode == RrMode::TcpCrr).then(|| LatencyRecorder::new(digits)),
                latency_n: 0,
                latency_sum_ns: 0,
                to_write: 0,
                crr_written: 0,
                got: 0,
                want_write: false,
                stopping: false,
                shut: false,
                retry_at: None,
                end: None,
                local,
                remote,
                crr_first,
                crr_started: now0,
                crr_registered: false,
            }
        })
        .collect();
    let poller = match Poller::new(flows.len().clamp(16, 1024)) {
        Ok(p) => p,
        Err(e) => return failed_all(flows, &format!("cannot create an epoll set: {e}")),
    };
    let mut eng = Engine {
        plan: &plan,
        poller,
        counters: &counters,
        wbuf: (0..CHUNK.max(rr.request_wire()))
            .map(|i| (i % 251) as u8)
            .collect(),
        rbuf: vec![0u8; CHUNK.max(rr.response_wire())],
        blocking_reads: false,
    };
    let now = clock::now();
    for (i, f) in flows.iter_mut().enumerate() {
        let registered = match &f.io {
            Io::Tcp(s) => eng.poller.add(s, i as u64, true, false),
            Io::Udp(s) => eng.poller.add(s, i as u64, true, false),
            Io::Crr(_) => Ok(()),
        };
        if let Err(e) = registered {
            f.end = Some((
                FlowEnd::Aborted(format!("cannot watch the socket: {e}")),
                now,
            ));
            continue;
        }
        eng.fill(f, i, now);
    }
    // `--wait read|spin` and one ping-pong flow on this thread: wait in
    // read() itself (with a timeout, to look at the flags) rather than in
    // epoll_wait() and then read(). Depth 1 and a small request keep the
    // blocking write from ever waiting on the peer.
    let spin = plan.wait == RrWait::Spin;
    let fast = plan.wait != RrWait::Epoll
        && flows.len() == 1
        && rr.mode == RrMode::TcpRr
        && rr.depth == 1
        && rr.request_wire() <= FAST_PATH_MAX
        && flows[0].end.is_none();
    if fast {
        if let Io::Tcp(s) = &flows[0].io {
            eng.poller.delete(s);
            s.set_read_timeout(Some(FLAG_POLL)).ok();
            s.set_nonblocking(false).ok();
        }
        eng.blocking_reads = true;
    }
    let mut stopping = false;
    let mut drain_deadline: Option<Time> = None;
    let mut next_scan: Option<Time> = None;
    loop {
        let now = clock::now();
        if flags.abort.load(Ordering::Relaxed) {
            for f in flows.iter_mut().filter(|f| f.end.is_none()) {
                f.tracker.fail_all();
                f.end = Some((
                    FlowEnd::Aborted(crate::transport::flow::ABORTED.into()),
                    now,
                ));
            }
            break;
        }
        if !stopping && flags.stop.load(Ordering::Relaxed) {
            stopping = true;
            drain_deadline = Some(now + DRAIN_TIMEOUT.max(timeout.unwrap_or_default() * 2));
            for (i, f) in flows.iter_mut().enumerate() {
                f.stopping = true;
                eng.settle(f, i, now);
            }
        }
        if drain_deadline.is_some_and(|d| now >= d) {
            for f in flows.iter_mut().filter(|f| f.end.is_none()) {
                f.tracker.fail_all();
                f.end = Some((
                    FlowEnd::Aborted(
                        "responses still outstanding 5 s after the test stopped".into(),
                    ),
                    now,
                ));
            }
            break;
        }
        if next_scan.is_some_and(|t| now >= t) || (timeout.is_some() && next_scan.is_none()) {
            next_scan = None;
            for (i, f) in flows.iter_mut().enumerate() {
                if f.end.is_some() {
                    continue;
                }
                eng.on_timer(f, i, now);
                for t in [f.tracker.deadline(), f.retry_at].into_iter().flatten() {
                    next_scan = Some(next_scan.map_or(t, |n: Time| n.min(t)));
                }
            }
        }
        if flows.iter().all(|f| f.end.is_some()) {
            break;
        }
        if fast {
            if spin {
                if let Io::Tcp(s) = &flows[0].io {
                    super::poller::spin_readable(s, SPIN_BUDGET);
                }
            }
            eng.on_readable(&mut flows[0], 0, clock::now());
            continue;
        }
        let wait = if spin {
            None
        } else {
            let mut until = now + FLAG_POLL;
            if let Some(t) = next_scan {
                until = until.min(t);
            }
            if let Some(t) = drain_deadline {
                until = until.min(t);
            }
            Some(until.duration_since(now))
        };
        let n = match eng.poller.wait(wait) {
            Ok(n) => n,
            Err(e) => {
                for f in flows.iter_mut().filter(|f| f.end.is_none()) {
                    f.end = Some((FlowEnd::Aborted(format!("epoll_wait failed: {e}")), now));
                }
                break;
            }
        };
        let now = clock::now();
        for k in 0..n {
            let ev = eng.poller.get(k);
            let i = ev.token as usize;
            let Some(f) = flows.get_mut(i) else { continue };
            if f.end.is_some() {
                continue;
            }
            if ev.writable {
                eng.on_writable(f, i, now);
            }
            if ev.readable && f.end.is_none() {
                eng.on_readable(f, i, now);
            }
            if let Some(d) = f.tracker.deadline() {
                next_scan = Some(next_scan.map_or(d, |n| n.min(d)));
            }
            if let Some(d) = f.retry_at {
                next_scan = Some(next_scan.map_or(d, |n| n.min(d)));
            }
        }
    }
    let end = clock::now();
    flows
        .into_iter()
        .map(|f| {
            let c = f.tracker.counts();
            counters[f.id as usize].publish(&c, f.latency_n, f.latency_sum_ns);
            FlowResult {
                id: f.id,
                local: f.local,
                remote: f.remote,
                latency: Some(f.latency),
                connect: f.connect,
                end: f.end.as_ref().map_or(FlowEnd::Completed, |e| e.0.clone()),
                end_at: f.end.map_or(end, |e| e.1),
                transport: None,
            }
        })
        .collect()
}

fn failed_all(flows: Vec<Flow>, why: &str) -> Vec<FlowResult> {
    let now = clock::now();
    flows
        .into_iter()
        .map(|f| FlowResult {
            id: f.id,
            local: f.local,
            remote: f.remote,
            latency: None,
            connect: None,
            end: FlowEnd::Aborted(why.to_string()),
            end_at: now,
            transport: None,
        })
        .collect()
}

fn addr(a: io::Result<SocketAddr>) -> String {
    a.map(|a| crate::net::canonical(a).to_string())
        .unwrap_or_default()
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

impl Engine<'_> {
    fn publish(&self, f: &Flow) {
        self.counters[f.id as usize].publish(&f.tracker.counts(), f.latency_n, f.latency_sum_ns);
    }

    fn record(&self, f: &mut Flow, latency: Duration, now: Time) {
        let ns = latency.as_nanos().min(u128::from(u64::MAX)) as u64;
        f.latency_n += 1;
        f.latency_sum_ns += ns;
        if now >= self.plan.measure_from {
            f.latency.record(ns);
        }
    }

    /// Issues requests until `depth` are outstanding (unless stopping or
    /// backing off).
    fn fill(&mut self, f: &mut Flow, i: usize, now: Time) {
        if f.stopping || f.end.is_some() || f.retry_at.is_some_and(|t| now < t) {
            return;
        }
        f.retry_at = None;
        match &f.io {
            Io::Tcp(_) => {
                while f.tracker.can_send() {
                    f.tracker.on_send(now);
                    f.to_write += self.plan.rr.request_wire();
                }
                self.write_tcp(f, i);
            }
            Io::Udp(_) => {
                while f.tracker.can_send() {
                    let seq = f.tracker.on_send(now);
                    self.send_udp(f, seq);
                }
            }
            Io::Crr(Crr::Idle) => {
                if f.tracker.can_send() {
                    self.start_crr(f, i, now);
                }
            }
            Io::Crr(_) => {}
        }
        self.publish(f);
    }

    fn send_udp(&mut self, f: &mut Flow, seq: u64) {
        let Io::Udp(s) = &f.io else { return };
        let len = self.plan.rr.request_wire();
        encode_udp_header(&mut self.wbuf, seq, f.id);
        // A datagram the kernel refuses (buffer full, ICMP error pending)
        // is as good as lost: the transaction times out.
        s.send(&self.wbuf[..len]).ok();
    }

    fn write_tcp(&mut self, f: &mut Flow, i: usize) {
        let Io::Tcp(s) = &f.io else { return };
        let mut w: &TcpStream = s;
        while f.to_write > 0 {
            let n = f.to_write.min(self.wbuf.len());
            match w.write(&self.wbuf[..n]) {
                Ok(k) => f.to_write -= k,
                Err(e) if would_block(&e) => break,
                Err(e) => {
                    self.fail_tcp(f, &format!("write failed: {e}"));
                    return;
                }
            }
        }
        let want = f.to_write > 0;
        if want != f.want_write {
            f.want_write = want;
            self.poller.modify(s, i as u64, true, want).ok();
        }
    }

    fn fail_tcp(&self, f: &mut Flow, why: &str) {
        f.tracker.fail_all();
        f.end = Some((FlowEnd::Aborted(why.to_string()), clock::now()));
        if let Io::Tcp(s) = &f.io {
            self.poller.delete(s);
        }
        self.publish(f);
    }

    /// After stopping: a flow with nothing outstanding finishes (TCP:
    /// half-closes and waits for the server's end of stream).
    fn settle(&mut self, f: &mut Flow, _i: usize, now: Time) {
        if f.end.is_some() || f.tracker.outstanding() > 0 {
            return;
        }
        match &f.io {
            Io::Tcp(s) => {
                if !f.shut && f.to_write == 0 {
                    s.shutdown(Shutdown::Write).ok();
                    f.shut = true;
                }
            }
            Io::Udp(_) => f.end = Some((FlowEnd::Completed, now)),
            Io::Crr(Crr::Idle) => f.end = Some((FlowEnd::Completed, now)),
            Io::Crr(_) => {}
        }
    }

    fn on_timer(&mut self, f: &mut Flow, i: usize, now: Time) {
        let expired = f.tracker.expire(now);
        if expired > 0 {
            if let Io::Crr(c) = &mut f.io {
                // The connection of a timed-out transaction is abandoned.
                if let Crr::Connecting(s) = c {
                    self.poller.delete(s);
                }
                if let Crr::Open(s) = c {
                    self.poller.delete(s);
                }
                *c = Crr::Idle;
                f.got = 0;
            }
            self.publish(f);
        }
        self.fill(f, i, now);
        if f.stopping {
            self.settle(f, i, now);
        }
    }

    fn on_writable(&mut self, f: &mut Flow, i: usize, now: Time) {
        match &f.io {
            Io::Tcp(_) => self.write_tcp(f, i),
            Io::Crr(Crr::Connecting(_)) => self.crr_connected(f, i, now),
            Io::Crr(Crr::Open(_)) => self.crr_write(f, i),
            _ => {}
        }
    }

    fn on_readable(&mut self, f: &mut Flow, i: usize, now: Time) {
        match &f.io {
            Io::Tcp(_) => self.read_tcp(f, i, now),
            Io::Udp(_) => self.read_udp(f, i, now),
            Io::Crr(Crr::Open(_)) => self.crr_read(f, i, now),
            Io::Crr(Crr::Connecting(_)) => self.crr_connected(f, i, now),
            Io::Crr(Crr::Idle) => {}
        }
    }

    fn read_tcp(&mut self, f: &mut Flow, i: usize, now: Time) {
        let Io::Tcp(s) = &f.io else { return };
        let mut r: &TcpStream = s;
        let resp = self.plan.rr.response_wire();
        let read = r.read(&mut self.rbuf);
        let now = if self.blocking_reads {
            clock::now()
        } else {
            now
        };
        match read {
            Ok(0) => {
                if f.shut && f.tracker.outstanding() == 0 {
                    f.end = Some((FlowEnd::Completed, now));
                    self.poller.delete(s);
                } else {
                    self.fail_tcp(f, "the server closed the connection mid-test");
                }
            }
            Ok(n) => {
                f.got += n;
                let mut answered = false;
                while f.got >= resp {
                    f.got -= resp;
                    if let Reply::Completed(lat) = f.tracker.on_response_in_order(now) {
                        self.record(f, lat, now);
                    }
                    answered = true;
                }
                if answered {
                    if f.stopping {
                        self.settle(f, i, now);
                    } else {
                        self.fill(f, i, now);
                    }
                    self.publish(f);
                }
            }
            Err(e) if would_block(&e) => {}
            Err(e) => self.fail_tcp(f, &format!("read failed: {e}")),
        }
    }

    fn read_udp(&mut self, f: &mut Flow, i: usize, now: Time) {
        let Io::Udp(s) = &f.io else { return };
        let mut any = false;
        for _ in 0..UDP_BURST {
            match s.recv(&mut self.rbuf) {
                Ok(n) => {
                    let Some((seq, flow)) = decode_udp_header(&self.rbuf[..n]) else {
                        continue;
                    };
                    if flow != f.id {
                        continue;
                    }
                    if let Reply::Completed(lat) = f.tracker.on_response(seq, now) {
                        let ns = lat.as_nanos().min(u128::from(u64::MAX)) as u64;
                        f.latency_n += 1;
                        f.latency_sum_ns += ns;
                        if now >= self.plan.measure_from {
                            f.latency.record(ns);
                        }
                    }
                    any = true;
                }
                Err(e) if would_block(&e) => break,
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                    // ICMP port unreachable: the server's socket is gone.
                    f.tracker.fail_oldest();
                    f.retry_at = Some(now + RETRY_AFTER);
                    any = true;
                    break;
                }
                Err(_) => break,
            }
        }
        if any {
            if f.stopping {
                self.settle(f, i, now);
            } else {
                self.fill(f, i, now);
            }
            self.publish(f);
        }
    }

    fn start_crr(&mut self, f: &mut Flow, i: usize, now: Time) {
        let server = self.plan.server;
        f.tracker.on_send(now);
        f.got = 0;
        f.crr_written = 0;
        // Non-blocking from the start: no fcntl() calls per transaction.
        let sock = match Socket::new(
            Domain::for_address(server),
            Type::STREAM.nonblocking(),
            None,
        ) {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: a failed transaction, not a fatal one.
                let _ = e;
                self.crr_failed(f, now);
                return;
            }
        };
        sock.set_tcp_nodelay(true).ok();
        sockopt::apply(&sock, &self.plan.knobs, sockopt::SocketEnd::Connecting).ok();
        // Connect time runs from the connect() call; the transaction's
        // latency from the start above (socket set-up included).
        f.crr_started = clock::now();
        match sock.connect(&server.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) || would_block(&e) => {}
            Err(_) => {
                self.crr_failed(f, now);
                return;
            }
        }
        f.crr_registered = false;
        f.io = Io::Crr(Crr::Connecting(sock));
        // On a fast path (loopback) the handshake is often complete by the
        // time connect() returns: try the request at once instead of
        // waiting a round through epoll. A socket still connecting
        // refuses the write with EAGAIN and waits for EPOLLOUT as usual.
        self.crr_try_early_write(f, i);
    }

    fn crr_try_early_write(&mut self, f: &mut Flow, i: usize) {
        let Io::Crr(Crr::Connecting(s)) = &f.io else {
            return;
        };
        match s.send(&f.crr_first) {
            Ok(k) => {
                let now = clock::now();
                f.crr_written = k;
                self.crr_connected(f, i, now);
            }
            Err(e) if would_block(&e) || e.raw_os_error() == Some(libc::ENOTCONN) => {
                // Still connecting: wait for EPOLLOUT.
                if self.poller.add(s, i as u64, false, true).is_err() {
                    self.crr_failed(f, clock::now());
                    return;
                }
                f.crr_registered = true;
            }
            Err(_) => self.crr_failed(f, clock::now()),
        }
    }

    fn crr_failed(&mut self, f: &mut Flow, now: Time) {
        if let Io::Crr(c) = &mut f.io {
            match c {
                Crr::Connecting(s) => self.poller.delete(s),
                Crr::Open(s) => self.poller.delete(s),
                Crr::Idle => {}
            }
            *c = Crr::Idle;
        }
        f.tracker.fail_oldest();
        f.retry_at = Some(now + RETRY_AFTER);
        self.publish(f);
        if f.stopping {
            self.settle(f, 0, now);
        }
    }

    fn crr_connected(&mut self, f: &mut Flow, i: usize, now: Time) {
        let Io::Crr(c) = &mut f.io else { return };
        let Crr::Connecting(s) = c else { return };
        match s.take_error() {
            Ok(None) => {}
            _ => {
                self.crr_failed(f, now);
                return;
            }
        }
        // Connected once the kernel says writable without an error.
        let ns = now.duration_since(f.crr_started).as_nanos() as u64;
        if now >= self.plan.measure_from {
            if let Some(c) = f.connect.as_mut() {
                c.record(ns);
            }
        }
        let Crr::Connecting(s) = std::mem::replace(c, Crr::Idle) else {
            return;
        };
        let stream: TcpStream = s.into();
        if f.local.is_empty() {
            f.local = addr(stream.local_addr());
        }
        *c = Crr::Open(stream);
        self.crr_write(f, i);
    }

    fn crr_write(&mut self, f: &mut Flow, i: usize) {
        let Io::Crr(Crr::Open(s)) = &f.io else { return };
        let total = TCP_HELLO_LEN + self.plan.rr.request_wire();
        let mut w: &TcpStream = s;
        while f.crr_written < total {
            let buf = if f.crr_written < f.crr_first.len() {
                &f.crr_first[f.crr_written..]
            } else {
                let left = total - f.crr_written;
                &self.wbuf[..left.min(self.wbuf.len())]
            };
            match w.write(buf) {
                Ok(k) => f.crr_written += k,
                Err(e) if would_block(&e) => break,
                Err(_) => {
                    self.crr_failed(f, clock::now());
                    return;
                }
            }
        }
        let want = f.crr_written < total;
        // Registered only now when the early write went through: one
        // epoll_ctl per connection instead of two.
        if f.crr_registered {
            self.poller.modify(s, i as u64, true, want).ok();
        } else if self.poller.add(s, i as u64, true, want).is_ok() {
            f.crr_registered = true;
        } else {
            self.crr_failed(f, clock::now());
        }
    }

    fn crr_read(&mut self, f: &mut Flow, i: usize, now: Time) {
        let Io::Crr(Crr::Open(s)) = &f.io else { return };
        let mut r: &TcpStream = s;
        let resp = self.plan.rr.response_wire();
        match r.read(&mut self.rbuf) {
            Ok(0) => self.crr_failed(f, now),
            Ok(n) => {
                f.got += n;
                if f.got >= resp {
                    if let Reply::Completed(lat) = f.tracker.on_response_in_order(now) {
                        self.record(f, lat, now);
                    }
                    // Closing drops the socket (and its epoll entry).
                    f.io = Io::Crr(Crr::Idle);
                    f.got = 0;
                    self.publish(f);
                    if f.stopping {
                        self.settle(f, i, now);
                    } else {
                        self.fill(f, i, now);
                    }
                }
            }
            Err(e) if would_block(&e) => {}
            Err(_) => self.crr_failed(f, now),
        }
    }
}
