//! `xferlab server`'s front door: xferlab's port and iperf3's, listened
//! on by one thread that also reads every new connection's first bytes
//! and recognises who is talking: xferlab's 8-byte preamble, or the
//! 37-byte cookie that opens every iperf3 connection. Both protocols are
//! served on both ports (xferlab's `-p`, default 5290, and
//! `--iperf3-port`, default 5201), so a stock iperf3 client can use
//! either. A connection then becomes a test session (control connection,
//! on a thread of its own) or is handed to the session whose token or
//! cookie it presents (data connection). What sessions share lives in
//! [`crate::session::shared`].
//!
//! A connection that has not yet said what it is costs a file descriptor
//! and a few bytes here, no thread. It has `--preamble-timeout` (5 s) in
//! total to say it (not per read: trickling a byte at a time does not extend
//! it). Too many such connections from one address, or from everyone,
//! and the oldest of them is closed to make room (and the log says so),
//! so a flood of slow or idle connections delays nobody who talks
//! promptly.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use socket2::Domain;
use xferlab_core::iperf3::wire::access_denied;
use xferlab_core::iperf3::{is_cookie, may_be_cookie, Cookie, COOKIE_LEN};
use xferlab_core::proto::order::AgentMsg;
use xferlab_core::proto::wire::{
    encode_frame, Attach, AttachReply, ConnKind, Preamble, ATTACH_LEN, PREAMBLE_LEN, VERSION,
};
use xferlab_core::proto::{ErrorCode, ProtoError, ServerMsg};

use crate::agent::{self, session::Agent};
use crate::control::Wake;
use crate::net::FlowSocket;
use crate::session::metrics::{Protocol, Reason};
use crate::session::shared::lock;
use crate::session::{self, ServerConfig, Shared};

/// How often the front door looks at its shutdown flag.
const ACCEPT_POLL: Duration = Duration::from_millis(200);
/// At most one log line per limit this often (the log cannot be flooded
/// through it).
const LIMIT_LOG_EVERY: Duration = Duration::from_secs(5);

pub struct Server {
    /// xferlab's port first, then iperf3's if asked for.
    listeners: Vec<TcpListener>,
    shared: Arc<Shared>,
    stop: Arc<Stop>,
    /// `--agent`: orders are taken (else refused at the door).
    agent: Option<Arc<Agent>>,
}

/// When the front door stops.
#[derive(Default)]
struct Stop {
    shutdown: AtomicBool,
    /// Sessions that have ended (for `--one-off`).
    finished: AtomicUsize,
}

/// A server running on a background thread; dropping it stops the
/// listener (sessions in progress finish on their own threads).
pub struct ServerHandle {
    stop: Arc<Stop>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop.shutdown.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().ok();
        }
    }
}

/// Why the server cannot listen: one line naming the port or address and
/// the fix.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(
        "port {port} is already in use: stop the other server or pick another port with {flag}"
    )]
    InUse { port: u16, flag: &'static str },
    #[error("cannot bind {0}: no local interface has that address")]
    NoSuchAddress(String),
    #[error("cannot listen on port {port}: {err}")]
    Listen { port: u16, err: io::Error },
}

impl Server {
    pub fn bind(cfg: ServerConfig) -> Result<Server, BindError> {
        let bind_error = |port: u16, flag: &'static str, err: io::Error| match err.kind() {
            io::ErrorKind::AddrInUse => BindError::InUse { port, flag },
            io::ErrorKind::AddrNotAvailable => {
                BindError::NoSuchAddress(cfg.bind.map_or("?".into(), |a| a.to_string()))
            }
            _ => BindError::Listen { port, err },
        };
        let mut listeners =
            vec![listen(cfg.bind, cfg.port).map_err(|e| bind_error(cfg.port, "-p", e))?];
        if let Some(port) = cfg.iperf3_port {
            listeners.push(listen(cfg.bind, port).map_err(|e| {
                bind_error(
                    port,
                    "--iperf3-port (or turn it off with --iperf3-port off)",
                    e,
                )
            })?);
        }
        for l in &listeners {
            let port = l.local_addr().map_or(0, |a| a.port());
            l.set_nonblocking(true)
                .map_err(|err| BindError::Listen { port, err })?;
        }
        Ok(Server {
            listeners,
            shared: Arc::new(Shared::new(cfg)),
            stop: Arc::default(),
            agent: None,
        })
    }

    /// Takes orders (`--agent`) under `agent`'s policy.
    pub fn with_agent(mut self, agent: Agent) -> Self {
        self.agent = Some(Arc::new(agent));
        self
    }

    /// xferlab's listening address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listeners[0].local_addr()
    }

    /// What its sessions share (the metrics server reads its counters).
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// The iperf3 port's listening address, if there is one.
    pub fn iperf3_addr(&self) -> Option<SocketAddr> {
        self.listeners.get(1).and_then(|l| l.local_addr().ok())
    }

    /// Serves until `--one-off` is satisfied or the handle is dropped.
    pub fn run(self) {
        let mut door = FrontDoor {
            shared: self.shared.clone(),
            stop: self.stop.clone(),
            pending: VecDeque::new(),
            per_client: HashMap::new(),
            max_pending: max_pending(self.shared.cfg.door.max_pending),
            sessions: Vec::new(),
            limit_log: [None, None],
            agent: self.agent.clone(),
        };
        let cfg = &self.shared.cfg;
        while !self.stop.shutdown.load(Ordering::Relaxed) {
            if cfg.one_off && self.stop.finished.load(Ordering::Relaxed) > 0 {
                break;
            }
            let now = Instant::now();
            let wait = door
                .pending
                .iter()
                .map(|p| p.deadline.duration_since(now))
                .min()
                .map_or(ACCEPT_POLL, |d| d.min(ACCEPT_POLL));
            let tick = Timespec::try_from(wait).expect("a short interval");
            let mut pfds: Vec<PollFd<'_>> = self
                .listeners
                .iter()
                .map(|l| PollFd::new(l, PollFlags::IN))
                .chain(
                    door.pending
                        .iter()
                        .map(|p| PollFd::new(&p.stream, PollFlags::IN)),
                )
                .collect();
            let ready = poll(&mut pfds, Some(&tick)).unwrap_or(0);
            let ready: Vec<usize> = if ready == 0 {
                Vec::new()
            } else {
                (0..pfds.len())
                    .filter(|&i| !pfds[i].revents().is_empty())
                    .collect()
            };
            drop(pfds);
            let n = self.listeners.len();
            // Pending connections first (indices shift once new ones are
            // admitted or old ones leave), newest first.
            for &i in ready.iter().rev().filter(|&&i| i >= n) {
                door.progress(i - n);
            }
            for &i in ready.iter().filter(|&&i| i < n) {
                door.accept_all(&self.listeners[i]);
            }
            door.expire(Instant::now());
            door.sessions.retain(|t| !t.is_finished());
        }
        if cfg.one_off {
            for t in door.sessions {
                t.join().ok();
            }
        }
    }

    /// Runs the server on a background thread.
    pub fn spawn(self) -> io::Result<ServerHandle> {
        let stop = self.stop.clone();
        let thread = std::thread::Builder::new()
            .name("xfer-server".into())
            .spawn(move || self.run())?;
        Ok(ServerHandle {
            stop,
            thread: Some(thread),
        })
    }
}

/// The global pending limit for this process: `limit`, or a quarter of
/// the open-file limit if that is lower (the rest is for tests' flows).
fn max_pending(limit: usize) -> usize {
    let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    usize::try_from(nofile / 4)
        .unwrap_or(usize::MAX)
        .max(16)
        .min(limit)
}

/// A connection that has not yet said what it is.
struct Pending {
    stream: TcpStream,
    peer: SocketAddr,
    /// Its first bytes: a preamble (8), a data preamble and attach
    /// record (28) or an iperf3 cookie (37).
    buf: [u8; COOKIE_LEN],
    have: usize,
    need: usize,
    deadline: Instant,
}

/// Which limit a log line is about.
#[derive(Clone, Copy)]
enum Limit {
    PerClient = 0,
    Global = 1,
}

struct FrontDoor {
    shared: Arc<Shared>,
    stop: Arc<Stop>,
    /// Oldest first.
    pending: VecDeque<Pending>,
    per_client: HashMap<IpAddr, usize>,
    max_pending: usize,
    /// Session threads (joined on `--one-off`).
    sessions: Vec<JoinHandle<()>>,
    /// When each limit was last logged, and how often it was hit since.
    limit_log: [Option<(Instant, u64)>; 2],
    agent: Option<Arc<Agent>>,
}

/// What a connection turned out to be once its first bytes are in.
enum Said {
    /// Still talking.
    More,
    /// Nothing more to do with it (answered, or closed).
    Done,
    Control(u16),
    /// An order to an agent (`--agent`), with the peer's version.
    Order(u16),
    Data(Attach),
    Iperf3(Cookie),
}

impl FrontDoor {
    /// Accepts what the listener has queued.
    fn accept_all(&mut self, listener: &TcpListener) {
        loop {
            match listener.accept() {
                Ok((stream, peer)) => self.admit(stream, crate::net::canonical(peer)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // EMFILE and friends: make room, then wait for the
                    // next round instead of spinning.
                    self.shared.log(format_args!("accept failed: {e}"));
                    if let Some(p) = self.pending.front() {
                        let (peer, idx) = (p.peer, 0);
                        self.evict(idx, Limit::Global, peer);
                    }
                    return;
                }
            }
        }
    }

    fn admit(&mut self, stream: TcpStream, peer: SocketAddr) {
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        tracing::debug!(%peer, port = ?stream.local_addr().map(|a| a.port()).ok(), "accepted");
        let door = self.shared.cfg.door;
        let ip = door.client(peer.ip());
        if self.per_client.get(&ip).copied().unwrap_or(0) >= door.max_pending_per_client {
            let oldest = self
                .pending
                .iter()
                .position(|p| door.client(p.peer.ip()) == ip)
                .expect("counted");
            self.evict(oldest, Limit::PerClient, peer);
        }
        if self.pending.len() >= self.max_pending {
            let peer = self.pending[0].peer;
            self.evict(0, Limit::Global, peer);
        }
        *self.per_client.entry(ip).or_default() += 1;
        self.pending.push_back(Pending {
            stream,
            peer,
            buf: [0; COOKIE_LEN],
            have: 0,
            need: PREAMBLE_LEN,
            deadline: Instant::now() + door.preamble_timeout,
        });
        // It may have spoken already (a client writes its preamble
        // right after connecting).
        let i = self.pending.len() - 1;
        self.progress(i);
    }

    /// Closes pending connection `i` to make room under `limit`.
    fn evict(&mut self, i: usize, limit: Limit, newcomer: SocketAddr) {
        let Some(p) = self.remove(i) else { return };
        let door = self.shared.cfg.door;
        let why = match limit {
            Limit::PerClient => format!(
                "{}: {} connections from this address still announcing themselves (the per-address limit, --max-pending-per-client): closed the oldest, {:.1} s old",
                newcomer.ip(),
                door.max_pending_per_client,
                (door.preamble_timeout.saturating_sub(p.deadline.duration_since(Instant::now()))).as_secs_f64()
            ),
            Limit::Global => format!(
                "{} connections still announcing themselves (the server-wide limit, --max-pending): closed the oldest, from {}",
                self.max_pending, p.peer
            ),
        };
        self.log_limit(limit, &why);
    }

    /// Logs a limit being hit, at most once per [`LIMIT_LOG_EVERY`] per
    /// limit, with how often it was hit in between.
    fn log_limit(&mut self, limit: Limit, why: &str) {
        let now = Instant::now();
        let slot = &mut self.limit_log[limit as usize];
        match slot {
            Some((at, n)) if now.duration_since(*at) < LIMIT_LOG_EVERY => *n += 1,
            _ => {
                let more = slot.map_or(0, |(_, n)| n);
                *slot = Some((now, 0));
                if more > 0 {
                    self.shared.log(format_args!(
                        "{why} (and {more} more times since the last such line)"
                    ));
                } else {
                    self.shared.log(format_args!("{why}"));
                }
            }
        }
    }

    fn remove(&mut self, i: usize) -> Option<Pending> {
        let p = self.pending.remove(i)?;
        let ip = self.shared.cfg.door.client(p.peer.ip());
        if let Some(n) = self.per_client.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.per_client.remove(&ip);
            }
        }
        Some(p)
    }

    /// Closes connections whose time to speak is up.
    fn expire(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].deadline <= now {
                let p = self.remove(i).expect("in range");
                let within = self.shared.cfg.door.preamble_timeout.as_secs_f64();
                tracing::debug!(peer = %p.peer, got = p.have, "closed: did not say what it is within {within} s");
            } else {
                i += 1;
            }
        }
    }

    /// Reads what pending connection `i` sent and, once it has said what
    /// it is, hands it on.
    fn progress(&mut self, i: usize) {
        let said = {
            let p = &mut self.pending[i];
            loop {
                match p.stream.read(&mut p.buf[p.have..p.need]) {
                    Ok(0) => break Said::Done,
                    Ok(n) => {
                        p.have += n;
                        if p.have < p.need {
                            continue;
                        }
                        match recognise(p, &self.shared) {
                            Said::More => continue,
                            said => break said,
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Said::More,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break Said::Done,
                }
            }
        };
        if matches!(said, Said::More) {
            return;
        }
        let p = self.remove(i).expect("in range");
        let (stream, peer) = (p.stream, p.peer);
        if stream.set_nonblocking(false).is_err() {
            return;
        }
        match said {
            Said::More | Said::Done => {}
            Said::Data(a) => attach(stream, peer, a, &self.shared),
            Said::Control(version) => {
                tracing::debug!(%peer, version, "xferlab control connection");
                // Busy (sessions full) or past the handshake limits:
                // answered here, so a flood of requests costs no session
                // thread.
                let handshake = match self.shared.busy(peer.ip()) {
                    Some(busy) => Err(busy),
                    None => self.shared.begin_handshake(peer.ip()),
                };
                let handshake = match handshake {
                    Ok(h) => h,
                    Err(busy) => {
                        let mut answer = Preamble::new(ConnKind::Control).encode().to_vec();
                        answer.extend(encode_frame(&ServerMsg::Error {
                            code: ErrorCode::Busy,
                            message: busy.to_string(),
                        }));
                        refuse(stream, &answer);
                        self.shared.metrics.refused(Protocol::Xferlab, Reason::Busy);
                        self.shared.log_refused(
                            peer,
                            "busy",
                            format_args!("{peer}: refused: {busy}"),
                        );
                        return;
                    }
                };
                self.start_session(stream, peer, move |stream, shared| {
                    session::server::serve(
                        stream,
                        peer,
                        version,
                        shared,
                        handshake,
                        crate::patterns::session,
                    );
                });
            }
            Said::Order(version) => {
                tracing::debug!(%peer, version, "order connection");
                let refused = |why: &str, code: &str| {
                    let mut answer = Preamble::new(ConnKind::Order).encode().to_vec();
                    answer.extend(encode_frame(&AgentMsg::Refused {
                        code: code.into(),
                        reason: why.into(),
                        software: Some(crate::software()),
                    }));
                    answer
                };
                let Some(agent) = self.agent.clone() else {
                    let why = "this server takes no orders: start it with --agent (and --auth-key, --agent-targets) to make it an agent";
                    refuse(stream, &refused(why, "not_agent"));
                    self.shared.log_refused(
                        peer,
                        "not an agent",
                        format_args!("{peer}: order refused: {why}"),
                    );
                    return;
                };
                let handshake = match self.shared.busy(peer.ip()) {
                    Some(busy) => Err(busy),
                    None => self.shared.begin_handshake(peer.ip()),
                };
                let handshake = match handshake {
                    Ok(h) => h,
                    Err(busy) => {
                        refuse(stream, &refused(&busy.to_string(), "busy"));
                        self.shared.log_refused(
                            peer,
                            "busy",
                            format_args!("{peer}: order refused: {busy}"),
                        );
                        return;
                    }
                };
                self.start_session(stream, peer, move |stream, shared| {
                    agent::session::serve(stream, peer, version, shared, handshake, &agent);
                });
            }
            Said::Iperf3(cookie) => {
                let data = lock(&self.shared.iperf3).get(&cookie).cloned();
                match data {
                    // A data stream of a running iperf3 test. If the
                    // session has just ended, the connection is closed.
                    Some(tx) => {
                        tracing::debug!(%peer, "iperf3 data stream attached");
                        tx.send(Wake::Attach(0, FlowSocket::Stream(stream))).ok();
                    }
                    None => {
                        tracing::debug!(%peer, "iperf3 control connection");
                        // What a busy iperf3 server answers; every iperf3
                        // client reports it as "the server is busy
                        // running a test".
                        let handshake = match self.shared.busy(peer.ip()) {
                            Some(busy) => Err(busy),
                            None => self.shared.begin_handshake(peer.ip()),
                        };
                        let handshake = match handshake {
                            Ok(h) => h,
                            Err(busy) => {
                                refuse(stream, &access_denied());
                                let m = &self.shared.metrics;
                                m.refused(Protocol::Iperf3, Reason::Busy);
                                self.shared.log_refused(
                                    peer,
                                    "busy",
                                    format_args!("{peer}: iperf3 client refused: {busy}"),
                                );
                                return;
                            }
                        };
                        self.start_session(stream, peer, move |stream, shared| {
                            crate::iperf3::session::serve(stream, peer, cookie, shared, handshake);
                        });
                    }
                }
            }
        }
    }

    /// Runs a control connection's session on a thread of its own.
    fn start_session(
        &mut self,
        stream: TcpStream,
        peer: SocketAddr,
        serve: impl FnOnce(TcpStream, &Arc<Shared>) + Send + 'static,
    ) {
        let (shared, stop) = (self.shared.clone(), self.stop.clone());
        let spawned = std::thread::Builder::new()
            .name("xfer-conn".into())
            .spawn(move || {
                serve(stream, &shared);
                stop.finished.fetch_add(1, Ordering::Relaxed);
            });
        match spawned {
            Ok(t) => self.sessions.push(t),
            Err(e) => self.shared.log(format_args!(
                "{peer}: cannot start a session thread: {e}; closed"
            )),
        }
    }
}

/// Answers a connection that is refused at the door, and closes it.
fn refuse(mut stream: TcpStream, answer: &[u8]) {
    stream.set_write_timeout(Some(Duration::from_secs(1))).ok();
    stream.write_all(answer).ok();
    stream.shutdown(std::net::Shutdown::Write).ok();
}

/// Looks at a pending connection's first `need` bytes: asks for more,
/// or says what it is.
fn recognise(p: &mut Pending, shared: &Shared) -> Said {
    let peer = p.peer;
    if p.need == PREAMBLE_LEN {
        let mut pre = [0u8; PREAMBLE_LEN];
        pre.copy_from_slice(&p.buf[..PREAMBLE_LEN]);
        if may_be_cookie(&pre) {
            p.need = COOKIE_LEN;
            return Said::More;
        }
        return match Preamble::decode(&pre) {
            Ok(Preamble {
                kind: ConnKind::Control,
                version,
            }) => Said::Control(version),
            Ok(Preamble {
                kind: ConnKind::Order,
                version,
            }) => Said::Order(version),
            Ok(Preamble {
                kind: ConnKind::Data,
                version,
            }) if version != VERSION => {
                tracing::debug!(%peer, version, "data connection of another protocol version; refused");
                p.stream
                    .write_all(&[AttachReply::VersionMismatch as u8])
                    .ok();
                Said::Done
            }
            Ok(Preamble {
                kind: ConnKind::Data,
                ..
            }) => {
                p.need = PREAMBLE_LEN + ATTACH_LEN;
                Said::More
            }
            Err(ProtoError::NotXferlab) => {
                shared.log(format_args!(
                    "{peer}: neither an xferlab nor an iperf3 client (first bytes {:02x?}); closed",
                    &pre[..4]
                ));
                Said::Done
            }
            Err(e) => {
                shared.log(format_args!("{peer}: {e}; closed"));
                Said::Done
            }
        };
    }
    if p.need == COOKIE_LEN {
        let mut cookie: Cookie = [0; COOKIE_LEN];
        cookie.copy_from_slice(&p.buf);
        if !is_cookie(&cookie) {
            shared.log(format_args!("{peer}: malformed iperf3 cookie; closed"));
            return Said::Done;
        }
        return Said::Iperf3(cookie);
    }
    let mut raw = [0u8; ATTACH_LEN];
    raw.copy_from_slice(&p.buf[PREAMBLE_LEN..PREAMBLE_LEN + ATTACH_LEN]);
    Said::Data(Attach::decode(&raw))
}

fn listen(bind: Option<IpAddr>, port: u16) -> io::Result<TcpListener> {
    let make = |addr: SocketAddr, dual: bool| -> io::Result<TcpListener> {
        // The transports' listener: plain TCP's, or one that also accepts
        // the connections of another byte-stream transport.
        let s = crate::transport::listener(Domain::for_address(addr))?;
        s.set_reuse_address(true)?;
        if dual {
            s.set_only_v6(false)?;
        }
        s.bind(&addr.into())?;
        s.listen(1024)?;
        Ok(s.into())
    };
    match bind {
        Some(ip) => make(SocketAddr::new(ip, port), false),
        // One dual-stack socket serves IPv6 and IPv4; fall back to IPv4
        // only where IPv6 is disabled.
        None => make(
            SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
            true,
        )
        .or_else(|_| make(SocketAddr::new(IpAddr::from([0, 0, 0, 0]), port), false)),
    }
}

/// Passes a data connection to the session that owns its token; the
/// session answers it.
fn attach(mut stream: TcpStream, peer: SocketAddr, a: Attach, shared: &Shared) {
    let tx = lock(&shared.registry).get(&a.token).cloned();
    tracing::debug!(%peer, flow = a.flow, known = tx.is_some(), "data connection");
    match tx {
        Some(tx) => {
            let refused = tx.send(Wake::Attach(a.flow, FlowSocket::Stream(stream)));
            if let Err(mpsc::SendError(Wake::Attach(_, FlowSocket::Stream(mut s)))) = refused {
                s.write_all(&[AttachReply::UnknownSession as u8]).ok();
            }
        }
        None => {
            stream.write_all(&[AttachReply::UnknownSession as u8]).ok();
        }
    }
}
