//! `xferlab server`: xferlab's port and iperf3's, many tests at once.
//!
//! Every accepted connection gets a short-lived thread that reads its
//! first bytes (with a deadline, so a silent connection cannot pin
//! anything) and recognises who is talking: xferlab's 8-byte preamble, or
//! the 37-byte cookie that opens every iperf3 connection. Both protocols
//! are served on both ports (xferlab's `-p`, default 5290, and
//! `--iperf3-port`, default 5201), so a stock iperf3 client can use
//! either. A connection then becomes a test session (control connection)
//! or is handed to the session whose token or cookie it presents (data
//! connection). Sessions share nothing but those registries, so one
//! client vanishing cannot leave another — or the server — "busy".

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use socket2::Domain;
use xferlab_core::iperf3::{is_cookie, may_be_cookie, Cookie, COOKIE_LEN};
use xferlab_core::proto::wire::{
    Attach, AttachReply, ConnKind, Preamble, ATTACH_LEN, PREAMBLE_LEN, VERSION,
};
use xferlab_core::proto::ProtoError;

use crate::control::Wake;
use crate::session;
use crate::session::registry::{ServerConfig, Shared};
use crate::transport::FlowSocket;

/// How long a new connection may take to say what it is.
const PREAMBLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections still announcing themselves; beyond this, new ones are
/// closed at once (a flood cannot exhaust threads).
const MAX_PENDING: usize = 256;
/// How often the accept loop looks at its shutdown flag.
const ACCEPT_POLL: Duration = Duration::from_millis(200);

pub struct Server {
    /// xferlab's port first, then iperf3's if asked for.
    listeners: Vec<TcpListener>,
    shared: Arc<Shared>,
}

/// A server running on a background thread; dropping it stops the
/// listener (sessions in progress finish on their own threads).
pub struct ServerHandle {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().ok();
        }
    }
}

impl Server {
    pub fn bind(cfg: ServerConfig) -> Result<Server, String> {
        let bind_error = |port: u16, flag: &str, e: io::Error| {
            match e.kind() {
            io::ErrorKind::AddrInUse => format!(
                "port {port} is already in use: stop the other server or pick another port with {flag}"
            ),
            io::ErrorKind::AddrNotAvailable => {
                format!(
                    "cannot bind {}: no local interface has that address",
                    cfg.bind.map_or("?".into(), |a| a.to_string())
                )
            }
            _ => format!("cannot listen on port {port}: {e}"),
        }
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
        let shared = Arc::new(Shared::new(cfg));
        Ok(Server { listeners, shared })
    }

    /// xferlab's listening address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listeners[0].local_addr()
    }

    /// The iperf3 port's listening address, if there is one.
    pub fn iperf3_addr(&self) -> Option<SocketAddr> {
        self.listeners.get(1).and_then(|l| l.local_addr().ok())
    }

    /// Serves until `--one-off` is satisfied or the handle is dropped.
    pub fn run(self) {
        let mut pfds: Vec<PollFd<'_>> = self
            .listeners
            .iter()
            .map(|l| PollFd::new(l, PollFlags::IN))
            .collect();
        let tick = Timespec::try_from(ACCEPT_POLL).expect("a short interval");
        let mut conn_threads: Vec<JoinHandle<()>> = Vec::new();
        while !self.shared.shutdown.load(Ordering::Relaxed) {
            if self.shared.cfg.one_off && self.shared.finished.load(Ordering::Relaxed) > 0 {
                break;
            }
            if !poll(&mut pfds, Some(&tick)).is_ok_and(|n| n > 0) {
                continue;
            }
            let Some(i) = pfds.iter().position(|p| !p.revents().is_empty()) else {
                continue;
            };
            let (stream, peer) = match self.listeners[i].accept() {
                Ok((s, peer)) => (s, crate::net::canonical(peer)),
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    self.shared.log(format_args!("accept failed: {e}"));
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            if self.shared.pending.fetch_add(1, Ordering::Relaxed) >= MAX_PENDING {
                self.shared.pending.fetch_sub(1, Ordering::Relaxed);
                tracing::debug!(%peer, "closed: {MAX_PENDING} connections still announcing themselves");
                continue;
            }
            tracing::debug!(%peer, port = ?stream.local_addr().map(|a| a.port()).ok(), "accepted");
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new()
                .name("xfer-conn".into())
                .spawn(move || {
                    let counted = PendingGuard(&shared);
                    classify(stream, peer, &shared, counted);
                });
            match spawned {
                Ok(t) => conn_threads.push(t),
                Err(e) => self
                    .shared
                    .log(format_args!("cannot start a connection thread: {e}")),
            }
            conn_threads.retain(|t| !t.is_finished());
        }
        if self.shared.cfg.one_off {
            for t in conn_threads {
                t.join().ok();
            }
        }
    }

    /// Runs the server on a background thread.
    pub fn spawn(self) -> io::Result<ServerHandle> {
        let shared = self.shared.clone();
        let thread = std::thread::Builder::new()
            .name("xfer-server".into())
            .spawn(move || self.run())?;
        Ok(ServerHandle {
            shared,
            thread: Some(thread),
        })
    }
}

/// Decrements the pending count once the connection has said what it is.
struct PendingGuard<'a>(&'a Shared);

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::Relaxed);
    }
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

/// Reads the first bytes and hands the connection to where it belongs.
fn classify(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    pending: PendingGuard<'_>,
) {
    stream.set_read_timeout(Some(PREAMBLE_TIMEOUT)).ok();
    let mut pre = [0u8; PREAMBLE_LEN];
    if stream.read_exact(&mut pre).is_err() {
        return;
    }
    if may_be_cookie(&pre) {
        let mut cookie: Cookie = [0; COOKIE_LEN];
        cookie[..PREAMBLE_LEN].copy_from_slice(&pre);
        if stream.read_exact(&mut cookie[PREAMBLE_LEN..]).is_err() || !is_cookie(&cookie) {
            shared.log(format_args!("{peer}: malformed iperf3 cookie; closed"));
            return;
        }
        let session = shared
            .iperf3
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&cookie)
            .cloned();
        stream.set_read_timeout(None).ok();
        match session {
            // A data stream of a running iperf3 test. If the session has
            // just ended, the connection is dropped (closed).
            Some(tx) => {
                tracing::debug!(%peer, "iperf3 data stream attached");
                tx.send(Wake::Attach(0, FlowSocket::Stream(stream))).ok();
            }
            None => {
                tracing::debug!(%peer, "iperf3 control connection");
                drop(pending);
                crate::iperf3::session::serve(stream, peer, cookie, shared);
                shared.finished.fetch_add(1, Ordering::Relaxed);
            }
        }
        return;
    }
    match Preamble::decode(&pre) {
        Ok(Preamble {
            kind: ConnKind::Control,
            version,
        }) => {
            tracing::debug!(%peer, version, "xferlab control connection");
            drop(pending);
            session::server::serve(stream, peer, version, shared, crate::patterns::session);
            shared.finished.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Preamble {
            kind: ConnKind::Data,
            version,
        }) => attach(stream, peer, version, shared),
        Err(ProtoError::NotXferlab) => {
            shared.log(format_args!(
                "{peer}: neither an xferlab nor an iperf3 client (first bytes {:02x?}); closed",
                &pre[..4]
            ));
        }
        Err(e) => shared.log(format_args!("{peer}: {e}; closed")),
    }
}

/// Passes a data connection to the session that owns its token; the
/// session answers it.
fn attach(mut stream: TcpStream, peer: SocketAddr, version: u16, shared: &Shared) {
    if version != VERSION {
        tracing::debug!(%peer, version, "data connection of another protocol version; refused");
        stream.write_all(&[AttachReply::VersionMismatch as u8]).ok();
        return;
    }
    let mut raw = [0u8; ATTACH_LEN];
    if stream.read_exact(&mut raw).is_err() {
        return;
    }
    let a = Attach::decode(&raw);
    let tx = shared
        .registry
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&a.token)
        .cloned();
    stream.set_read_timeout(None).ok();
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
