//! The registry of live sessions: what every connection thread of one
//! server shares (its settings, the sessions by token and iperf3
//! sessions by cookie, the counts the accept loop keeps). The server
//! fills it; sessions of both protocols read it.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use xferlab_core::iperf3::Cookie;
use xferlab_core::proto::wire::TOKEN_LEN;

use crate::control::Wake;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to bind; None = every address, IPv6 and IPv4.
    pub bind: Option<IpAddr>,
    pub port: u16,
    /// A second port for iperf3 clients (both ports serve both
    /// protocols); None: xferlab's port only.
    pub iperf3_port: Option<u16>,
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
    /// The CPU data threads are pinned to unless the client names one
    /// (`-A`).
    pub affinity: Option<u32>,
}

/// Token -> the session's event channel.
pub type Registry = Mutex<HashMap<[u8; TOKEN_LEN], mpsc::Sender<Wake>>>;

/// What every connection thread of one server shares.
pub struct Shared {
    pub cfg: ServerConfig,
    pub registry: Registry,
    /// Cookie -> the iperf3 session's event channel.
    pub iperf3: CookieRegistry,
    /// Local addresses on which an iperf3 session is waiting for UDP
    /// streams (one at a time per address: the streams' first datagrams
    /// carry no cookie).
    pub udp_setup: Mutex<HashSet<SocketAddr>>,
    pub sessions: AtomicUsize,
    /// Connections still announcing themselves (the accept loop's).
    pub pending: AtomicUsize,
    /// The listener stops accepting.
    pub shutdown: AtomicBool,
    /// Sessions that have ended (for `--one-off`).
    pub finished: AtomicUsize,
}

impl Shared {
    pub fn new(cfg: ServerConfig) -> Self {
        Shared {
            cfg,
            registry: Mutex::new(HashMap::new()),
            iperf3: Mutex::new(HashMap::new()),
            udp_setup: Mutex::new(HashSet::new()),
            sessions: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            finished: AtomicUsize::new(0),
        }
    }

    /// Where this server runs a test's data threads: the CPU the client
    /// asked for (`-A n,m`), else the server's own `-A`; refused when
    /// this process may not use it.
    pub fn place(&self, spec: &mut xferlab_core::spec::TestSpec) -> Result<(), String> {
        spec.affinity.server = spec.affinity.server.or(self.cfg.affinity);
        match spec.affinity.server {
            Some(cpu) => crate::sys::affinity::check(cpu, "the server"),
            None => Ok(()),
        }
    }

    /// One line of the server's log (stdout, see [`crate::logging`]); an
    /// embedded server's lines are debug diagnostics (`-v`).
    pub fn log(&self, line: std::fmt::Arguments<'_>) {
        if self.cfg.log {
            tracing::info!(target: crate::logging::SERVER_LOG, "{line}");
        } else {
            tracing::debug!("{line}");
        }
    }
}

/// Cookie -> the event channel of the iperf3 session that owns it.
pub type CookieRegistry = Mutex<HashMap<Cookie, mpsc::Sender<Wake>>>;
