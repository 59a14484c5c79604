//! What every session of one `xferlab server` shares: its configuration
//! (limits and budgets), the registries of live sessions (token or cookie
//! -> the session's event channel), the session counts per server and per
//! client address, and the server's log.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use xferlab_core::iperf3::Cookie;
use xferlab_core::proto::wire::TOKEN_LEN;

use super::auth::{Failures, Iperf3Users};
use super::budget::{Budgets, OverBudget, RateBook, RateGrant};
use super::metrics::ServerMetrics;
use super::udp_door::Doors;
use super::Busy;
use crate::control::Wake;
use crate::sys::affinity::AffinityError;

/// The front door's limits on connections that have not yet said what
/// they are (see [`crate::server`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DoorLimits {
    /// How long a new connection may take, in total, to say what it is
    /// (its preamble, and a data connection's attach record or an iperf3
    /// cookie); `--preamble-timeout`.
    pub preamble_timeout: Duration,
    /// Such connections from one address; `--max-pending-per-client`.
    pub max_pending_per_client: usize,
    /// Such connections from everyone; `--max-pending` (and at most a
    /// quarter of the open-file limit).
    pub max_pending: usize,
    /// Control connections from one address in their handshake (the
    /// preamble or cookie read, the hello or iperf3 parameters not yet,
    /// or a challenge not yet answered); `--max-handshakes-per-client`.
    pub max_handshakes_per_client: usize,
    /// Such connections from everyone; `--max-handshakes`.
    pub max_handshakes: usize,
    /// The IPv6 prefix length one client's addresses share for every
    /// per-address limit (`--ipv6-prefix`): a host commonly holds a whole
    /// /64, so per-address limits counted per IPv6 address would give it
    /// an unbounded supply.
    pub ipv6_prefix: u8,
}

impl DoorLimits {
    /// 5 s: a client on another continent says what it is within one
    /// round trip of connecting; 5 s is 20 of them at 250 ms.
    pub const PREAMBLE_TIMEOUT: Duration = Duration::from_secs(5);
    /// A client's flows connect one after another (xferlab) or all at
    /// once (iperf3 `-P 128`, 129 connections with its control one): 256
    /// leaves room for the largest test, and for two at once.
    pub const MAX_PENDING_PER_CLIENT: usize = 256;
    /// A flood of idle connections then costs at most 8192 file
    /// descriptors and a few bytes each; at 256 per address it takes 32
    /// addresses to reach it.
    pub const MAX_PENDING: usize = 8192;
    /// A handshake takes a round trip or two (milliseconds), so a client
    /// has few at once; 16, the default --max-sessions, lets one address
    /// start as many tests at once as the server runs.
    pub const MAX_HANDSHAKES_PER_CLIENT: usize = 16;
    /// Each one has a session thread, blocked on its connection for at
    /// most the handshake deadline (10 s); 256 idle threads cost little
    /// memory, and take 16 addresses at the per-client limit to fill.
    pub const MAX_HANDSHAKES: usize = 256;
    /// A /64: what one subscriber, one host or one LAN is given.
    pub const IPV6_PREFIX: u8 = 64;

    /// The address `ip`'s per-address limits count under: an IPv4
    /// address itself (an IPv4-mapped IPv6 one as IPv4), an IPv6 address
    /// cut to its first [`DoorLimits::ipv6_prefix`] bits.
    pub fn client(&self, ip: IpAddr) -> IpAddr {
        match ip.to_canonical() {
            IpAddr::V6(v6) => {
                let bits = u32::from(self.ipv6_prefix.min(128));
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                IpAddr::V6((u128::from(v6) & mask).into())
            }
            v4 => v4,
        }
    }
}

impl Default for DoorLimits {
    fn default() -> Self {
        DoorLimits {
            preamble_timeout: Self::PREAMBLE_TIMEOUT,
            max_pending_per_client: Self::MAX_PENDING_PER_CLIENT,
            max_pending: Self::MAX_PENDING,
            max_handshakes_per_client: Self::MAX_HANDSHAKES_PER_CLIENT,
            max_handshakes: Self::MAX_HANDSHAKES,
            ipv6_prefix: Self::IPV6_PREFIX,
        }
    }
}

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
    /// Tests running at once from one client address.
    pub max_sessions_per_client: usize,
    /// Exit after the first test.
    pub one_off: bool,
    /// Runs inside a client process (recorded in its reports).
    pub embedded: bool,
    /// Print a line per session start and end.
    pub log: bool,
    /// The CPU data threads are pinned to unless the client names one
    /// (`-A`).
    pub affinity: Option<u32>,
    /// Accept UDP flows (attach datagrams, iperf3 stream hellos) from
    /// any address, not only from the control connection's peer.
    pub udp_any_peer: bool,
    /// Rates, flows and intervals a test may use.
    pub budgets: Budgets,
    /// Connections still saying what they are.
    pub door: DoorLimits,
    /// Failed authentication attempts one address may make per
    /// `auth_window` (`--auth-max-failures`, `--auth-window`).
    pub auth_max_failures: u32,
    pub auth_window: Duration,
    /// Keys xferlab clients must prove they hold (`--auth-key`); None:
    /// authentication off.
    pub auth_keys: Option<Arc<Vec<Vec<u8>>>>,
    /// iperf3 clients' credentials (`--rsa-private-key-path`,
    /// `--authorized-users-path`); None: iperf3 authentication off.
    pub iperf3_users: Option<Arc<Iperf3Users>>,
}

impl ServerConfig {
    /// Whether clients must authenticate (each protocol with its own
    /// scheme; a protocol without credentials configured is refused).
    pub fn auth_on(&self) -> bool {
        self.auth_keys.is_some() || self.iperf3_users.is_some()
    }
}

impl ServerConfig {
    /// A server for one process's own use (the in-process server of a
    /// client without a host): loopback only, no budgets.
    pub fn embedded(bind: IpAddr, one_off: bool) -> Self {
        ServerConfig {
            bind: Some(bind),
            port: 0,
            iperf3_port: None,
            max_duration: Duration::from_secs(86_400),
            max_sessions: 1,
            max_sessions_per_client: 1,
            one_off,
            embedded: true,
            log: false,
            affinity: None,
            udp_any_peer: false,
            budgets: Budgets::default(),
            door: DoorLimits::default(),
            auth_max_failures: super::auth::MAX_FAILURES,
            auth_window: super::auth::WINDOW,
            auth_keys: None,
            iperf3_users: None,
        }
    }
}

/// Token -> the session's event channel.
pub type Registry = Mutex<HashMap<[u8; TOKEN_LEN], mpsc::Sender<Wake>>>;
/// iperf3 cookie -> the session's event channel.
pub type CookieRegistry = Mutex<HashMap<Cookie, mpsc::Sender<Wake>>>;

/// What every connection thread of one server shares.
pub struct Shared {
    pub cfg: ServerConfig,
    pub registry: Registry,
    pub iperf3: CookieRegistry,
    /// Ports where datagram streams open with a hello (iperf3's UDP).
    pub udp_doors: Doors,
    sessions: AtomicUsize,
    per_client: Mutex<HashMap<IpAddr, usize>>,
    /// Control connections in their handshake, in all and per address:
    /// they never hold a session's place (see [`HandshakeSlot`]).
    handshakes: Mutex<Counts>,
    /// Refusals logged lately, per cause and address (see
    /// [`Shared::log_refused`]).
    refusals: Mutex<HashMap<(&'static str, IpAddr), Refusals>>,
    rates: RateBook,
    /// Failed authentication attempts per client address (keyed by
    /// [`DoorLimits::client`]: use [`Shared::auth_client`]).
    pub auth_failures: Failures,
    /// What `--metrics` exports (see [`super::metrics`]).
    pub metrics: ServerMetrics,
}

/// Locks a registry; a panicked holder leaves it usable (its entries are
/// plain values).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How often one cause's refusals of one address reach the log: the
/// first in full, then one line per window with how many were left out.
/// A client refused in a loop (busy, locked out) wrote 1,300 to 2,700
/// lines a second before (issue 34).
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(5);
/// Past this many (cause, address) entries, the ones whose window is
/// over are forgotten, and while it stays full new addresses share one
/// entry: bounds the table under a flood from many addresses.
const REFUSAL_ENTRIES: usize = 4096;

/// One cause's refusals of one address: when its last line was written,
/// and how many were left out since.
#[derive(Debug, Clone, Copy)]
struct Refusals {
    logged_at: Instant,
    left_out: u64,
}

/// Connections per client address, and in all.
#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_client: HashMap<IpAddr, usize>,
}

/// A control connection's place among those in their handshake, given
/// back when dropped: when its session takes a [`SessionSlot`] (its hello
/// is in and, with --auth-key, authenticated), or when it ends. A client
/// that says nothing more after its preamble holds one of these, never a
/// session's place.
pub struct HandshakeSlot {
    shared: Arc<Shared>,
    client: IpAddr,
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let mut c = lock(&self.shared.handshakes);
        c.total -= 1;
        if let Some(n) = c.per_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                c.per_client.remove(&self.client);
            }
        }
    }
}

/// A running session's place in the counts, given back when dropped.
pub struct SessionSlot<'a> {
    shared: &'a Shared,
    client: IpAddr,
}

impl Drop for SessionSlot<'_> {
    fn drop(&mut self) {
        let mut per = lock(&self.shared.per_client);
        if let Some(n) = per.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                per.remove(&self.client);
            }
        }
        self.shared.sessions.fetch_sub(1, Ordering::Relaxed);
        self.shared.metrics.session(-1);
    }
}

impl Shared {
    pub fn new(cfg: ServerConfig) -> Self {
        let auth_failures = Failures::new(cfg.auth_max_failures, cfg.auth_window);
        Shared {
            cfg,
            registry: Mutex::new(HashMap::new()),
            iperf3: Mutex::new(HashMap::new()),
            udp_doors: Doors::default(),
            sessions: AtomicUsize::new(0),
            per_client: Mutex::new(HashMap::new()),
            handshakes: Mutex::new(Counts::default()),
            refusals: Mutex::new(HashMap::new()),
            rates: RateBook::default(),
            auth_failures,
            metrics: ServerMetrics::default(),
        }
    }

    /// Checks a test against the operator's budgets and paces what this
    /// server sends for it (see [`super::budget`]); the grant holds the
    /// test's share of the server-wide rate until dropped.
    pub fn budget(
        &self,
        spec: &mut xferlab_core::spec::TestSpec,
    ) -> Result<Option<RateGrant<'_>>, OverBudget> {
        self.cfg.budgets.admit(&self.rates, spec)
    }

    /// The key a peer's failed authentication attempts count under.
    pub fn auth_client(&self, ip: IpAddr) -> IpAddr {
        self.cfg.door.client(ip)
    }

    /// Tests running now.
    pub fn sessions(&self) -> usize {
        self.sessions.load(Ordering::Relaxed)
    }

    /// Why a test from `client` would be refused as busy now
    /// (`--max-sessions`, `--max-sessions-per-client`), if it would.
    pub fn busy(&self, ip: IpAddr) -> Option<Busy> {
        self.busy_with(&lock(&self.per_client), self.cfg.door.client(ip))
    }

    fn busy_with(&self, per: &HashMap<IpAddr, usize>, client: IpAddr) -> Option<Busy> {
        let running = self.sessions();
        if running >= self.cfg.max_sessions {
            return Some(Busy::Sessions { running });
        }
        let mine = per.get(&client).copied().unwrap_or(0);
        (mine >= self.cfg.max_sessions_per_client).then_some(Busy::ClientSessions { mine, client })
    }

    /// Takes a handshake place for a control connection from `client`,
    /// or says which limit is full.
    pub fn begin_handshake(self: &Arc<Self>, ip: IpAddr) -> Result<HandshakeSlot, Busy> {
        let door = &self.cfg.door;
        let client = door.client(ip);
        let mut c = lock(&self.handshakes);
        let mine = c.per_client.get(&client).copied().unwrap_or(0);
        if mine >= door.max_handshakes_per_client {
            return Err(Busy::ClientHandshakes { mine, client });
        }
        if c.total >= door.max_handshakes {
            return Err(Busy::Handshakes { total: c.total });
        }
        c.total += 1;
        *c.per_client.entry(client).or_default() += 1;
        Ok(HandshakeSlot {
            shared: self.clone(),
            client,
        })
    }

    /// Takes a session slot for a test from `client`, or says why the
    /// server is busy.
    pub fn enter(&self, ip: IpAddr) -> Result<SessionSlot<'_>, Busy> {
        let client = self.cfg.door.client(ip);
        let mut per = lock(&self.per_client);
        if let Some(busy) = self.busy_with(&per, client) {
            return Err(busy);
        }
        *per.entry(client).or_default() += 1;
        self.sessions.fetch_add(1, Ordering::Relaxed);
        self.metrics.session(1);
        Ok(SessionSlot {
            shared: self,
            client,
        })
    }

    /// Where this server runs a test's data threads: the CPU the client
    /// asked for (`-A n,m`), else the server's own `-A`; refused when
    /// this process may not use it.
    pub fn place(&self, spec: &mut xferlab_core::spec::TestSpec) -> Result<(), AffinityError> {
        spec.affinity.server = spec.affinity.server.or(self.cfg.affinity);
        match spec.affinity.server {
            Some(cpu) => crate::sys::affinity::check(cpu, "the server"),
            None => Ok(()),
        }
    }

    /// Coarsens this server's own intervals of a test whose flows x
    /// intervals would exceed its budget
    /// ([`xferlab_core::proto::interval_budget`]): one long test with many
    /// flows and fine intervals cannot make the server's memory grow
    /// without bound. The client's own intervals are untouched, and an
    /// in-process server (the user's own memory) keeps them as asked.
    pub fn budget_intervals(&self, spec: &mut xferlab_core::spec::TestSpec) {
        if self.cfg.embedded {
            return;
        }
        let i = xferlab_core::proto::interval_budget(spec, self.cfg.max_duration);
        if i != spec.interval_s {
            tracing::debug!(
                asked = spec.interval_s,
                kept = i,
                "server-side intervals coarsened to stay within the interval budget"
            );
            spec.interval_s = i;
        }
    }

    /// Logs that `peer` was refused for `cause` (a short key: "busy",
    /// "locked out") as `line`: the first in full, then at most one line
    /// per [`REFUSAL_LOG_EVERY`] for the same cause and address, saying
    /// how many were left out. So a client refused in a loop cannot flood
    /// the log.
    pub fn log_refused(
        &self,
        peer: SocketAddr,
        cause: &'static str,
        line: std::fmt::Arguments<'_>,
    ) {
        let now = Instant::now();
        let (client, left_out) = {
            let mut seen = lock(&self.refusals);
            let mut client = self.cfg.door.client(peer.ip());
            if seen.len() >= REFUSAL_ENTRIES && !seen.contains_key(&(cause, client)) {
                seen.retain(|_, r| now.duration_since(r.logged_at) < REFUSAL_LOG_EVERY);
                if seen.len() >= REFUSAL_ENTRIES {
                    // Still full: a flood from many addresses. The others
                    // share one entry (the unspecified address), so the
                    // table and the log stay bounded.
                    client = IpAddr::from([0u8, 0, 0, 0]);
                }
            }
            match seen.get_mut(&(cause, client)) {
                Some(r) if now.duration_since(r.logged_at) < REFUSAL_LOG_EVERY => {
                    r.left_out += 1;
                    return;
                }
                Some(r) => {
                    let n = r.left_out;
                    *r = Refusals {
                        logged_at: now,
                        left_out: 0,
                    };
                    (client, n)
                }
                None => {
                    seen.insert(
                        (cause, client),
                        Refusals {
                            logged_at: now,
                            left_out: 0,
                        },
                    );
                    (client, 0)
                }
            }
        };
        if left_out > 0 {
            let whom = match client {
                c if c.is_unspecified() => "other addresses".to_string(),
                IpAddr::V6(c) => format!("{c}/{}", self.cfg.door.ipv6_prefix),
                c => c.to_string(),
            };
            self.log(format_args!(
                "{line} (and {left_out} more refusals of {whom} as {cause} since the last such line)"
            ));
        } else {
            self.log(line);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A flood of refusals from more addresses than the table holds
    /// keeps it bounded: the newcomers share one entry.
    #[test]
    fn the_refusal_table_stays_bounded_under_a_flood_of_addresses() {
        let shared = Shared::new(ServerConfig::embedded(IpAddr::from([127, 0, 0, 1]), false));
        for i in 0..(REFUSAL_ENTRIES as u32 + 1000) {
            let peer = SocketAddr::from((std::net::Ipv4Addr::from(0x0a00_0000 + i), 1));
            shared.log_refused(peer, "busy", format_args!("{peer}: refused"));
            shared.log_refused(peer, "busy", format_args!("{peer}: refused"));
        }
        let seen = lock(&shared.refusals);
        assert!(seen.len() <= REFUSAL_ENTRIES + 1, "{}", seen.len());
        // The second refusal of each address was left out, not logged.
        let first = seen[&("busy", IpAddr::from([10, 0, 0, 0]))];
        assert_eq!(first.left_out, 1);
    }

    #[test]
    fn an_ipv6_client_counts_by_its_prefix_an_ipv4_one_by_its_address() {
        let door = DoorLimits::default();
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::7".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(door.client(a), door.client(b));
        assert_eq!(door.client(a), "2001:db8:1:2::".parse::<IpAddr>().unwrap());
        assert_ne!(door.client(a), door.client(other));
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(door.client(v4), v4);
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(door.client(mapped), v4);
        let per_address = DoorLimits {
            ipv6_prefix: 128,
            ..door
        };
        assert_ne!(per_address.client(a), per_address.client(b));
        assert_eq!(per_address.client(a), a);
    }
}
