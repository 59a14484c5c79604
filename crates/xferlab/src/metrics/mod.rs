//! `xferlab server --metrics ADDR`: an HTTP endpoint for Prometheus.
//! `/metrics` answers the server's own counters and gauges
//! ([`crate::session::metrics`], and the probes' counters) in the
//! OpenMetrics text format; `/probe` runs a probe ([`probe`]) when
//! `--probe-modules` is given. docs/fleet.md has the scrape
//! configuration and what each metric means.
//!
//! HTTP is tiny_http's: it reads requests (one thread per open
//! connection) and queues them; a fixed pool of workers answers them,
//! `--max-probes` + 2 threads, so that `/metrics` is answered while every
//! probe slot is busy and a probe past the limit gets its 503 at once.
//! tiny_http has no limit of its own on connections, so every connection
//! gets [`IDLE`] to send a request (the listener's SO_RCVTIMEO, which
//! Linux copies to each accepted socket): one that says nothing costs a
//! thread for that long, then is closed. The endpoint belongs on a
//! management address all the same (docs/fleet.md).

pub mod gauges;
pub mod probe;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Socket, Type};

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use tiny_http::{Header, Method, Request, Response};

use crate::session::Shared;
use probe::Prober;

/// What `--metrics` serves.
pub struct MetricsConfig {
    pub addr: SocketAddr,
    /// `--probe-modules` and `--max-probes`, with the agent's policy;
    /// None: `/probe` answers 404.
    pub prober: Option<Prober>,
}

/// Why the metrics endpoint cannot listen: one line, with the fix.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error(
        "--metrics {addr}: the port is already in use; stop the other program or pick another port"
    )]
    InUse { addr: SocketAddr },
    #[error("--metrics {addr}: no local interface has that address; use one of this host's addresses (or 0.0.0.0)")]
    NoSuchAddress { addr: SocketAddr },
    #[error("--metrics {addr}: cannot listen: {err}")]
    Listen { addr: SocketAddr, err: String },
}

/// The endpoint's state, shared by its workers.
struct Endpoint {
    registry: Registry,
    prober: Option<Prober>,
    shared: Arc<Shared>,
}

/// The running endpoint; dropping it stops its workers (used by tests;
/// `xferlab server` keeps it for its whole life).
pub struct MetricsServer {
    http: Arc<tiny_http::Server>,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
}

impl MetricsServer {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Each unblock() wakes one worker blocked in recv().
        for _ in &self.workers {
            self.http.unblock();
        }
        for w in self.workers.drain(..) {
            w.join().ok();
        }
    }
}

/// How long a connection may stay silent (between requests too; a
/// scraper reconnects). Longer than a probe's usual scrape interval
/// would only keep idle threads.
pub const IDLE: Duration = Duration::from_secs(30);
/// How long writing an answer may block on a peer that does not read.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds `addr` with [`IDLE`] and [`WRITE_TIMEOUT`] on the listener,
/// which accepted sockets inherit.
fn listen(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.set_read_timeout(Some(IDLE))?;
    s.set_write_timeout(Some(WRITE_TIMEOUT))?;
    s.bind(&addr.into())?;
    s.listen(128)?;
    Ok(s.into())
}

/// The content type of the OpenMetrics text format.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds `cfg.addr` and starts the workers.
pub fn start(cfg: MetricsConfig, shared: Arc<Shared>) -> Result<MetricsServer, MetricsError> {
    let addr = cfg.addr;
    let listener = listen(addr).map_err(|err| match err.kind() {
        io::ErrorKind::AddrInUse => MetricsError::InUse { addr },
        io::ErrorKind::AddrNotAvailable => MetricsError::NoSuchAddress { addr },
        _ => MetricsError::Listen {
            addr,
            err: err.to_string(),
        },
    })?;
    let local = listener.local_addr().unwrap_or(addr);
    let http =
        tiny_http::Server::from_listener(listener, None).map_err(|err| MetricsError::Listen {
            addr,
            err: err.to_string(),
        })?;
    let http = Arc::new(http);
    let mut registry = Registry::with_prefix("xferlab");
    shared.metrics.register(&mut registry);
    let workers_n = cfg.prober.as_ref().map_or(0, Prober::max) + 2;
    if let Some(p) = &cfg.prober {
        p.register(&mut registry);
    }
    let endpoint = Arc::new(Endpoint {
        registry,
        prober: cfg.prober,
        shared,
    });
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::with_capacity(workers_n);
    for _ in 0..workers_n {
        let (http, endpoint, stop) = (http.clone(), endpoint.clone(), stop.clone());
        let w = std::thread::Builder::new()
            .name("xfer-metrics".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match http.recv() {
                        Ok(req) => endpoint.answer(req),
                        Err(_) => break,
                    }
                }
            })
            .map_err(|err| MetricsError::Listen {
                addr,
                err: format!("cannot start its threads: {err}"),
            })?;
        workers.push(w);
    }
    Ok(MetricsServer {
        http,
        addr: local,
        stop,
        workers,
    })
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a valid header")
}

fn text(status: u16, body: String, content_type: &str) -> Response<io::Cursor<Vec<u8>>> {
    Response::from_string(body)
        .with_status_code(status)
        .with_header(header("Content-Type", content_type))
}

impl Endpoint {
    fn answer(&self, req: Request) {
        let url = req.url().to_string();
        let (path, query) = url.split_once('?').unwrap_or((&url, ""));
        let peer = req.remote_addr().copied();
        let plain = "text/plain; charset=utf-8";
        let resp = match (req.method(), path) {
            (Method::Get | Method::Head, "/metrics") => {
                let mut out = String::new();
                // Writing into a String cannot fail.
                encode(&mut out, &self.registry).ok();
                text(200, out, OPENMETRICS)
            }
            (Method::Get, "/probe") => match &self.prober {
                None => text(
                    404,
                    "this server has no probes: start it with --probe-modules FILE\n".into(),
                    plain,
                ),
                Some(p) => {
                    let timeout = req
                        .headers()
                        .iter()
                        .find(|h| h.field.equiv("X-Prometheus-Scrape-Timeout-Seconds"))
                        .map(|h| h.value.as_str());
                    match p.probe(query, probe::timeout(timeout), &self.shared.metrics) {
                        Ok(body) => text(200, body, OPENMETRICS),
                        Err(why) => {
                            let who = peer.map_or_else(|| "?".into(), |p| p.to_string());
                            self.shared
                                .log(format_args!("{who}: probe refused: {why}"));
                            text(why.status(), format!("{why}\n"), plain)
                        }
                    }
                }
            },
            (Method::Get, "/") => text(
                200,
                "xferlab server: /metrics (this server's counters), /probe?module=NAME&target=HOST (docs/fleet.md)\n".into(),
                plain,
            ),
            _ => text(404, format!("no such page: {path}; see /\n"), plain),
        };
        // The scraper may have gone (timed out): nothing to do.
        req.respond(resp).ok();
    }
}
