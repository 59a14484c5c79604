//! `xferlab server --metrics ADDR`: an HTTP endpoint for Prometheus.
//! `/metrics` answers the server's own counters and gauges
//! ([`crate::session::metrics`], and the probes' counters) in the
//! OpenMetrics text format; `/probe` runs a probe ([`probe`]) when
//! `--probe-modules` is given. docs/fleet.md has the scrape
//! configuration and what each metric means.
//!
//! HTTP is [`http`]'s, bounded: a fixed pool of workers,
//! `--max-probes` + 2 threads, so that `/metrics` is answered while every
//! probe slot is busy and a probe past the limit gets its 503 at once;
//! connections past the workers and their queue are answered 503 at
//! once. The endpoint belongs on a management address all the same
//! (docs/fleet.md).

pub mod gauges;
pub mod http;
pub mod probe;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use socket2::{Domain, Socket, Type};

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

use crate::session::Shared;
use http::{Request, Response};
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
    addr: SocketAddr,
    _http: http::Http,
}

impl MetricsServer {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

fn listen(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
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
    let mut registry = Registry::with_prefix("xferlab");
    shared.metrics.register(&mut registry);
    let workers = cfg.prober.as_ref().map_or(0, Prober::max) + 2;
    if let Some(p) = &cfg.prober {
        p.register(&mut registry);
    }
    let endpoint = Arc::new(Endpoint {
        registry,
        prober: cfg.prober,
        shared,
    });
    let http =
        http::serve(listener, workers, Arc::new(move |r| endpoint.answer(r))).map_err(|err| {
            MetricsError::Listen {
                addr,
                err: format!("cannot start its threads: {err}"),
            }
        })?;
    Ok(MetricsServer {
        addr: local,
        _http: http,
    })
}

fn text(status: u16, body: String, content_type: &'static str) -> Response {
    Response {
        status,
        content_type,
        body,
    }
}

impl Endpoint {
    fn answer(&self, req: &Request) -> Response {
        let plain = "text/plain; charset=utf-8";
        match (req.method.as_str(), req.path.as_str()) {
            ("GET" | "HEAD", "/metrics") => {
                let mut out = String::new();
                // Writing into a String cannot fail.
                encode(&mut out, &self.registry).ok();
                text(200, out, OPENMETRICS)
            }
            ("GET", "/probe") => match &self.prober {
                None => text(
                    404,
                    "this server has no probes: start it with --probe-modules FILE\n".into(),
                    plain,
                ),
                Some(p) => {
                    let timeout = probe::timeout(req.scrape_timeout.as_deref());
                    match p.probe(&req.query, timeout, &self.shared.metrics) {
                        Ok(body) => text(200, body, OPENMETRICS),
                        Err(why) => {
                            self.shared
                                .log(format_args!("{}: probe refused: {why}", req.peer));
                            text(why.status(), format!("{why}\n"), plain)
                        }
                    }
                }
            },
            ("GET", "/") => text(
                200,
                "xferlab server: /metrics (this server's counters), /probe?module=NAME&target=HOST (docs/fleet.md)\n".into(),
                plain,
            ),
            ("GET" | "HEAD", path) => text(404, format!("no such page: {path}; see /\n"), plain),
            (method, _) => text(405, format!("{method} is not served: use GET\n"), plain),
        }
    }
}
