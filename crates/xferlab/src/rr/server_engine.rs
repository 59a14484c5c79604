//! The server's engine: a few threads sharing the session's rr socket (a
//! TCP listener, or one UDP socket), each with its own epoll set. TCP RR
//! connections stay with the thread that accepted them; CRR connections
//! live for one transaction; UDP requests go to whichever thread reads
//! them. Counts go to per-flow atomics the session samples.

use crate::sys::clock;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use xferlab_core::time::Time;

use xferlab_core::proto::wire::TOKEN_LEN;
use xferlab_core::result::FlowEnd;
use xferlab_core::rr::budget::{SharedRate, Slot};
use xferlab_core::rr::wire::{decode_tcp_hello, decode_udp_header, TCP_HELLO_LEN, UDP_HEADER_LEN};
use xferlab_core::rr::{RrMode, RrSpec, RrWait};

use super::counters::FlowCounters;
use super::poller::Poller;
use super::side::{EngineFlags, FlowResult, FLAG_POLL};
use crate::net::canonical;

const LISTENER: u64 = u64::MAX;
const CHUNK: usize = 64 * 1024;
const UDP_BURST: usize = 64;
/// How long TCP RR connections may stay open after the client stopped.
const LINGER: Duration = Duration::from_secs(3);
/// How long a CRR connection may take to send its hello and request.
const CRR_IDLE: Duration = Duration::from_secs(10);

pub enum RrSocket {
    Tcp(TcpListener),
    Udp(UdpSocket),
}

/// What every server engine thread shares.
pub struct ServerPlan {
    pub rr: RrSpec,
    pub token: [u8; TOKEN_LEN],
    /// Requests are only answered for the client's address.
    pub peer_ip: IpAddr,
    pub socket: RrSocket,
    /// TCP RR: which flows have presented their connection, and how many.
    pub claimed: Vec<AtomicBool>,
    pub attached: AtomicU32,
    /// Wakes the session when a flow attaches.
    pub notify: Box<dyn Fn() + Send + Sync>,
    /// How the engine threads wait (`--wait`, `auto` decided).
    pub wait: RrWait,
    /// TCP RR: SO_MAX_PACING_RATE (bytes/s) of every flow's connection,
    /// its share of the server's `--max-rate`.
    pub pacing: Option<u64>,
    /// UDP RR and CRR: the rate every answer of the test shares (per
    /// connection pacing cannot hold CRR, whose connections each send
    /// one answer, and one UDP socket answers every flow).
    pub budget: Option<SharedRate>,
    /// quic-rr and quic-crr: the congestion controller (`-C`).
    #[cfg_attr(not(feature = "quic"), allow(dead_code))]
    pub congestion: Option<String>,
}

struct Conn {
    stream: TcpStream,
    flow: Option<u32>,
    hello: [u8; TCP_HELLO_LEN],
    hello_got: usize,
    req_got: usize,
    to_write: usize,
    want_write: bool,
    eof: bool,
    opened: Time,
    /// Requests answered on this connection.
    answered: u64,
}

pub fn run(
    plan: Arc<ServerPlan>,
    counters: Arc<[FlowCounters]>,
    flags: Arc<EngineFlags>,
) -> Vec<FlowResult> {
    let mut results = Vec::new();
    let mut poller = match Poller::new(256) {
        Ok(p) => p,
        Err(_) => return results,
    };
    let registered = match &plan.socket {
        RrSocket::Tcp(l) => poller.add_exclusive(l, LISTENER),
        RrSocket::Udp(s) => poller.add_exclusive(s, LISTENER),
    };
    if registered.is_err() {
        return results;
    }
    let rr = &plan.rr;
    let resp = rr.response_wire();
    let mut wbuf: Vec<u8> = (0..CHUNK.max(resp)).map(|i| (i % 251) as u8).collect();
    let mut rbuf = vec![0u8; CHUNK.max(rr.request_wire())];
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    // Slots filled by the last accept batch (kept to avoid allocating).
    let mut accepted: Vec<usize> = Vec::with_capacity(64);
    let mut stop_at: Option<Time> = None;
    let mut last_sweep = clock::now();
    // `--wait read|spin` and one ping-pong flow: once its connection is
    // here, wait in read() itself instead of epoll_wait() + read() (see
    // the client's fast path).
    let spin = plan.wait == RrWait::Spin;
    let fast = plan.wait != RrWait::Epoll
        && rr.mode == RrMode::TcpRr
        && rr.flows == 1
        && rr.depth == 1
        && rr.request_wire() <= 4096
        && rr.response_wire() <= 4096;
    let mut blocking = false;
    loop {
        let now = clock::now();
        if flags.abort.load(Relaxed) {
            for c in conns.iter().flatten() {
                if let (Some(id), RrMode::TcpRr) = (c.flow, rr.mode) {
                    results.push(result(
                        id,
                        c,
                        FlowEnd::Aborted(crate::transport::flow::ABORTED.into()),
                        now,
                    ));
                }
            }
            break;
        }
        if stop_at.is_none() && flags.stop.load(Relaxed) {
            stop_at = Some(now);
        }
        let open = conns.iter().flatten().count();
        if let Some(t) = stop_at {
            // UDP and CRR: the client drained before it stopped; one last
            // look at what is queued, then done. TCP RR: until every
            // connection has ended, or the linger time.
            if rr.mode != RrMode::TcpRr || open == 0 {
                if rr.mode == RrMode::UdpRr {
                    serve_udp(&plan, &counters, &flags, &mut rbuf, &mut wbuf);
                }
                break;
            }
            if now >= t + LINGER {
                for c in conns.iter().flatten() {
                    if let Some(id) = c.flow {
                        results.push(result(
                            id,
                            c,
                            FlowEnd::Aborted("connection still open after the test stopped".into()),
                            now,
                        ));
                    }
                }
                break;
            }
        }
        // CRR connections that never sent their request are dropped.
        if rr.mode == RrMode::TcpCrr && now >= last_sweep + Duration::from_secs(1) {
            last_sweep = now;
            for (i, slot) in conns.iter_mut().enumerate() {
                if slot.as_ref().is_some_and(|c| now >= c.opened + CRR_IDLE) {
                    *slot = None;
                    free.push(i);
                }
            }
        }
        if fast && conns.len() == 1 && conns[0].as_ref().is_some_and(|c| c.flow.is_some()) {
            let c = conns[0].as_mut().expect("checked");
            if !blocking {
                poller.delete(&c.stream);
                c.stream.set_read_timeout(Some(FLAG_POLL)).ok();
                c.stream.set_nonblocking(false).ok();
                blocking = true;
            }
            if spin {
                super::poller::spin_readable(&c.stream, super::client_flow::SPIN_BUDGET);
            }
            if let Some(end) = serve_tcp(
                &plan, &counters, &flags, c, 0, &poller, &mut rbuf, &wbuf, false,
            ) {
                let c = conns[0].take().expect("present");
                if let Some(id) = c.flow {
                    results.push(result(id, &c, end, clock::now()));
                }
                free.push(0);
            }
            continue;
        }
        let n = match poller.wait((!spin).then_some(FLAG_POLL)) {
            Ok(n) => n,
            Err(_) => break,
        };
        let now = clock::now();
        for k in 0..n {
            let ev = poller.get(k);
            if ev.token == LISTENER {
                match &plan.socket {
                    RrSocket::Udp(_) => serve_udp(&plan, &counters, &flags, &mut rbuf, &mut wbuf),
                    RrSocket::Tcp(l) => {
                        accepted.clear();
                        accept_all(&plan, l, &poller, &mut conns, &mut free, now, &mut accepted);
                        if rr.mode == RrMode::TcpCrr {
                            // A CRR client writes its request right behind the
                            // handshake: it is usually here already, and
                            // answering now saves a round through epoll.
                            for &i in &accepted {
                                let Some(c) = conns[i].as_mut() else { continue };
                                let done = serve_tcp(
                                    &plan, &counters, &flags, c, i, &poller, &mut rbuf, &wbuf,
                                    false,
                                )
                                .is_some();
                                if done
                                    || poller.add(&c.stream, i as u64, true, c.want_write).is_err()
                                {
                                    // Closing is all: it was never in the epoll set.
                                    conns[i] = None;
                                    free.push(i);
                                }
                            }
                        }
                    }
                }
                continue;
            }
            let i = ev.token as usize;
            let Some(c) = conns.get_mut(i).and_then(Option::as_mut) else {
                continue;
            };
            let outcome = serve_tcp(
                &plan,
                &counters,
                &flags,
                c,
                i,
                &poller,
                &mut rbuf,
                &wbuf,
                ev.writable,
            );
            if let Some(end) = outcome {
                let c = conns[i].take().expect("present");
                poller.delete(&c.stream);
                if let (Some(id), RrMode::TcpRr) = (c.flow, rr.mode) {
                    results.push(result(id, &c, end, now));
                }
                free.push(i);
            }
        }
    }
    results
}

fn result(id: u32, c: &Conn, end: FlowEnd, at: Time) -> FlowResult {
    let a = |r: io::Result<SocketAddr>| r.map(|a| canonical(a).to_string()).unwrap_or_default();
    FlowResult {
        id,
        local: a(c.stream.local_addr()),
        remote: a(c.stream.peer_addr()),
        latency: None,
        connect: None,
        end,
        end_at: at,
        transport: None,
    }
}

fn accept_all(
    plan: &ServerPlan,
    l: &TcpListener,
    poller: &Poller,
    conns: &mut Vec<Option<Conn>>,
    free: &mut Vec<usize>,
    now: Time,
    accepted: &mut Vec<usize>,
) {
    let nodelay = plan.rr.mode == RrMode::TcpRr;
    for _ in 0..64 {
        let stream = match l.accept() {
            Ok((s, _)) => s,
            Err(_) => return,
        };
        stream.set_nonblocking(true).ok();
        if let Some(rate) = plan.pacing {
            // Without it the flow would answer as fast as the client
            // asks, past the server's --max-rate: refuse the connection.
            if crate::net::sockopt::set_max_pacing_rate(&stream, rate).is_err() {
                continue;
            }
        }
        // A CRR connection writes one response: Nagle never holds it.
        if nodelay {
            stream.set_nodelay(true).ok();
        }
        let i = free.pop().unwrap_or_else(|| {
            conns.push(None);
            conns.len() - 1
        });
        // CRR connections are registered by the caller only if they are
        // not answered at once.
        if nodelay && poller.add(&stream, i as u64, true, false).is_err() {
            free.push(i);
            continue;
        }
        accepted.push(i);
        conns[i] = Some(Conn {
            stream,
            flow: None,
            hello: [0; TCP_HELLO_LEN],
            hello_got: 0,
            req_got: 0,
            to_write: 0,
            want_write: false,
            eof: false,
            opened: now,
            answered: 0,
        });
    }
}

/// Reads what a connection sent and answers every complete request.
/// Returns how the connection ended, once it has.
#[allow(clippy::too_many_arguments)]
fn serve_tcp(
    plan: &ServerPlan,
    counters: &[FlowCounters],
    flags: &EngineFlags,
    c: &mut Conn,
    i: usize,
    poller: &Poller,
    rbuf: &mut [u8],
    wbuf: &[u8],
    writable: bool,
) -> Option<FlowEnd> {
    let rr = &plan.rr;
    let (req, resp) = (rr.request_wire(), rr.response_wire());
    if !c.eof {
        let mut r: &TcpStream = &c.stream;
        match r.read(rbuf) {
            Ok(0) => c.eof = true,
            Ok(n) => {
                let mut data = &rbuf[..n];
                if c.flow.is_none() {
                    let k = (TCP_HELLO_LEN - c.hello_got).min(data.len());
                    c.hello[c.hello_got..c.hello_got + k].copy_from_slice(&data[..k]);
                    c.hello_got += k;
                    data = &data[k..];
                    if c.hello_got < TCP_HELLO_LEN {
                        return None;
                    }
                    let (token, flow) = decode_tcp_hello(&c.hello);
                    if token != plan.token || flow >= rr.flows {
                        return Some(FlowEnd::Aborted("bad hello".into()));
                    }
                    if rr.mode == RrMode::TcpRr {
                        if plan.claimed[flow as usize].swap(true, Relaxed) {
                            return Some(FlowEnd::Aborted("duplicate flow".into()));
                        }
                        plan.attached.fetch_add(1, Relaxed);
                        (plan.notify)();
                    }
                    c.flow = Some(flow);
                }
                let flow = c.flow.expect("set above") as usize;
                c.req_got += data.len();
                let answered = (c.req_got / req) as u64;
                c.req_got %= req;
                if let Some(b) = plan.budget.as_ref().filter(|_| answered > 0) {
                    if !wait_for_slot(b, answered * resp as u64, flags) {
                        counters[flow].dropped.fetch_add(answered, Relaxed);
                        return Some(FlowEnd::Aborted("over the server's rate budget".into()));
                    }
                }
                c.to_write += answered as usize * resp;
                c.answered += answered;
                if answered > 0 {
                    counters[flow].sent.fetch_add(answered, Relaxed);
                    counters[flow].completed.fetch_add(answered, Relaxed);
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Some(FlowEnd::Aborted(format!("read failed: {e}"))),
        }
    }
    if c.to_write > 0 || writable {
        let mut w: &TcpStream = &c.stream;
        while c.to_write > 0 {
            let n = c.to_write.min(wbuf.len());
            match w.write(&wbuf[..n]) {
                Ok(k) => c.to_write -= k,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) =>
                {
                    break
                }
                Err(e) => return Some(FlowEnd::Aborted(format!("write failed: {e}"))),
            }
        }
    }
    let crr_done = rr.mode == RrMode::TcpCrr && c.answered > 0 && c.to_write == 0;
    if (c.eof && c.to_write == 0) || crr_done {
        return Some(FlowEnd::Completed);
    }
    let want = c.to_write > 0;
    if want != c.want_write {
        c.want_write = want;
        poller.modify(&c.stream, i as u64, !c.eof, want).ok();
    }
    if c.eof && !want {
        return Some(FlowEnd::Completed);
    }
    None
}

fn serve_udp(
    plan: &ServerPlan,
    counters: &[FlowCounters],
    flags: &EngineFlags,
    rbuf: &mut [u8],
    wbuf: &mut [u8],
) {
    let RrSocket::Udp(s) = &plan.socket else {
        return;
    };
    let resp = plan.rr.response_wire();
    for _ in 0..UDP_BURST {
        let (n, from) = match s.recv_from(rbuf) {
            Ok(x) => x,
            Err(_) => return,
        };
        if canonical(from).ip() != plan.peer_ip {
            continue;
        }
        let Some((_, flow)) = decode_udp_header(&rbuf[..n]) else {
            continue;
        };
        let Some(c) = counters.get(flow as usize) else {
            continue;
        };
        let nth = c.sent.fetch_add(1, Relaxed) + 1;
        if plan.rr.drop_request == Some(nth) {
            c.dropped.fetch_add(1, Relaxed);
            continue;
        }
        if let Some(b) = &plan.budget {
            if !wait_for_slot(b, resp as u64, flags) {
                c.dropped.fetch_add(1, Relaxed);
                continue;
            }
        }
        wbuf[..UDP_HEADER_LEN].copy_from_slice(&rbuf[..UDP_HEADER_LEN]);
        if s.send_to(&wbuf[..resp], from).is_ok() {
            c.completed.fetch_add(1, Relaxed);
        }
    }
}

/// Waits for an answer's slot in the test's shared rate, meanwhile
/// leaving further requests in the socket's queue. False: drop the
/// answer (its slot comes after the client stops waiting, or the test is
/// aborted).
pub(super) fn wait_for_slot(budget: &SharedRate, bytes: u64, flags: &EngineFlags) -> bool {
    let at = match budget.reserve(bytes, clock::now()) {
        Slot::Now => return true,
        Slot::Drop => return false,
        Slot::At(at) => at,
    };
    loop {
        let now = clock::now();
        if now >= at {
            return true;
        }
        if flags.abort.load(Relaxed) {
            return false;
        }
        std::thread::sleep(at.duration_since(now).min(FLAG_POLL));
    }
}
