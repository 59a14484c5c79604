//! `xferlab server`: one listening port, many tests at once.
//!
//! Every accepted connection gets a short-lived thread that reads its
//! 8-byte preamble (with a deadline, so a silent connection cannot pin
//! anything) and then either becomes a test session (control connection)
//! or is handed to the session whose token it presents (data connection).
//! Sessions share nothing but the token registry, so one client vanishing
//! cannot leave another — or the server — "busy".

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Socket, Type};
use xferlab_core::proto::wire::{
    Attach, AttachReply, ConnKind, Preamble, ATTACH_LEN, PREAMBLE_LEN, TOKEN_LEN, VERSION,
};
use xferlab_core::proto::ProtoError;

use crate::control::Wake;
use crate::stream::{session, FlowSocket};

/// How long a new connection may take to say what it is.
const PREAMBLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections still announcing themselves; beyond this, new ones are
/// closed at once (a flood cannot exhaust threads).
const MAX_PENDING: usize = 256;
/// How often the accept loop looks at its shutdown flag.
const ACCEPT_POLL_MS: i32 = 200;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to bind; None = every address, IPv6 and IPv4.
    pub bind: Option<IpAddr>,
    pub port: u16,
    /// Longest test accepted, warm-up included.
    pub max_duration: Duration,
    /// Tests running at once; more are refused with a "busy" error.
    pub max_sessions: usize,
    /// Exit after the first test.
    pub one_off: bool,
    /// Runs inside a client process (recorded in its reports).
    pub embedded: bool,
    /// Print a line per session start and end.
    pub log: bool,
}

/// Token -> the session's event channel.
pub type Registry = Mutex<HashMap<[u8; TOKEN_LEN], mpsc::Sender<Wake>>>;

/// What every connection thread of one server shares.
pub struct Shared {
    pub cfg: ServerConfig,
    pub registry: Registry,
    pub sessions: AtomicUsize,
    pending: AtomicUsize,
    shutdown: AtomicBool,
    /// Sessions that have ended (for `--one-off`).
    finished: AtomicUsize,
}

impl Shared {
    pub fn log(&self, line: std::fmt::Arguments<'_>) {
        if self.cfg.log {
            let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
            let mut out = io::stdout().lock();
            writeln!(out, "{now} {line}").ok();
            out.flush().ok();
        }
    }
}

pub struct Server {
    listener: TcpListener,
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
        let listener = listen(cfg.bind, cfg.port).map_err(|e| match e.kind() {
            io::ErrorKind::AddrInUse => format!(
                "port {} is already in use: stop the other server or pick another port with -p",
                cfg.port
            ),
            io::ErrorKind::AddrNotAvailable => {
                format!(
                    "cannot bind {}: no local interface has that address",
                    cfg.bind.map_or("?".into(), |a| a.to_string())
                )
            }
            _ => format!("cannot listen on port {}: {e}", cfg.port),
        })?;
        let shared = Arc::new(Shared {
            cfg,
            registry: Mutex::new(HashMap::new()),
            sessions: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            finished: AtomicUsize::new(0),
        });
        Ok(Server { listener, shared })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `--one-off` is satisfied or the handle is dropped.
    pub fn run(self) {
        let fd = self.listener.as_raw_fd();
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut conn_threads: Vec<JoinHandle<()>> = Vec::new();
        while !self.shared.shutdown.load(Ordering::Relaxed) {
            if self.shared.cfg.one_off && self.shared.finished.load(Ordering::Relaxed) > 0 {
                break;
            }
            // SAFETY: one valid pollfd, bounded timeout.
            let ready = unsafe { libc::poll(&mut pfd, 1, ACCEPT_POLL_MS) };
            if ready <= 0 {
                continue;
            }
            let (stream, peer) = match self.listener.accept() {
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
                continue;
            }
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
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
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

/// Reads the preamble and hands the connection to where it belongs.
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
    match Preamble::decode(&pre) {
        Ok(Preamble {
            kind: ConnKind::Control,
            version,
        }) => {
            drop(pending);
            session::serve(stream, peer, version, shared);
            shared.finished.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Preamble {
            kind: ConnKind::Data,
            version,
        }) => attach(stream, version, shared),
        Err(ProtoError::NotXferlab) => {
            shared.log(format_args!(
                "{peer}: not an xferlab client (first bytes {:02x?}); closed",
                &pre[..4]
            ));
        }
        Err(e) => shared.log(format_args!("{peer}: {e}; closed")),
    }
}

/// Passes a data connection to the session that owns its token; the
/// session answers it.
fn attach(mut stream: TcpStream, version: u16, shared: &Shared) {
    if version != VERSION {
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
    match tx {
        Some(tx) => {
            let refused = tx.send(Wake::Attach(a.flow, FlowSocket::Tcp(stream)));
            if let Err(mpsc::SendError(Wake::Attach(_, FlowSocket::Tcp(mut s)))) = refused {
                s.write_all(&[AttachReply::UnknownSession as u8]).ok();
            }
        }
        None => {
            stream.write_all(&[AttachReply::UnknownSession as u8]).ok();
        }
    }
}
