//! The metrics endpoint's HTTP server: one request per connection, read
//! with httparse, answered by a fixed pool of workers, with every cost an
//! unauthenticated peer can cause bounded (the endpoint may face more
//! than a Prometheus):
//! * connections waiting for a worker are at most as many as the workers;
//!   past that a new connection is answered 503 at once and closed a
//!   second later (at most 64 wait so), so a flood costs no thread and no
//!   memory that grows with it;
//! * a connection has [`HEAD_TIMEOUT`] in total to send its request head
//!   (a trickle of bytes does not extend it) and at most [`MAX_HEAD`]
//!   bytes for it;
//! * an answer that the peer does not read is given up after
//!   [`WRITE_TIMEOUT`].
//!
//! Every answer closes its connection (`Connection: close`): Prometheus
//! reconnects per scrape at no cost worth keeping connections for, and a
//! connection then never holds a worker between requests.
//!
//! Not tiny_http (the first version's): it starts a thread per open
//! connection with no limit, so a peer opening connections faster than
//! they time out made threads without bound.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};

/// Time to send a whole request head; Prometheus sends it at once.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest request head (a scrape's is about 300 bytes).
pub const MAX_HEAD: usize = 8 * 1024;
/// How long writing an answer may block on a peer that does not read.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the accept loop looks at its stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(200);
/// Most headers a request may have.
const MAX_HEADERS: usize = 32;

/// What a worker hands the endpoint: the parts of a request it answers by.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// What follows `?`, or "".
    pub query: String,
    /// Prometheus's `X-Prometheus-Scrape-Timeout-Seconds`, as sent.
    pub scrape_timeout: Option<String>,
    pub peer: SocketAddr,
}

/// An answer.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

/// Answers one request.
pub type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

/// The running server; dropping it stops accepting at once and lets each
/// worker finish the request it is answering.
pub struct Http {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Drop for Http {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The accept thread first: it holds the queue's sender, whose
        // drop ends the workers' waits.
        for t in self.threads.drain(..) {
            t.join().ok();
        }
    }
}

/// Serves `listener` with `workers` threads (and one accepting).
pub fn serve(listener: TcpListener, workers: usize, handler: Handler) -> io::Result<Http> {
    listener.set_nonblocking(true)?;
    let (tx, rx) = sync_channel::<(TcpStream, SocketAddr)>(workers);
    let rx = Arc::new(Mutex::new(rx));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::with_capacity(workers + 1);
    let accept_stop = stop.clone();
    threads.push(
        std::thread::Builder::new()
            .name("xfer-metrics".into())
            .spawn(move || {
                let mut lingering = Lingering::default();
                while !accept_stop.load(Ordering::Relaxed) {
                    lingering.close_due(Instant::now());
                    let Some((stream, peer)) = accept(&listener) else {
                        continue;
                    };
                    match tx.try_send((stream, peer)) {
                        Ok(()) => {}
                        Err(TrySendError::Full((stream, _))) => {
                            busy(&stream);
                            lingering.push(stream, Instant::now());
                        }
                        Err(TrySendError::Disconnected(_)) => break,
                    }
                }
            })?,
    );
    for _ in 0..workers {
        let (rx, handler) = (rx.clone(), handler.clone());
        let spawned = std::thread::Builder::new()
            .name("xfer-metrics".into())
            .spawn(move || work(&rx, &*handler));
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                // Stops the accept thread; the workers already started
                // end with it.
                drop(Http { stop, threads });
                return Err(e);
            }
        }
    }
    Ok(Http { stop, threads })
}

/// The next connection, or None after [`ACCEPT_POLL`] without one (or an
/// error: out of file descriptors, say, which the poll's wait paces).
fn accept(listener: &TcpListener) -> Option<(TcpStream, SocketAddr)> {
    let tick = Timespec::try_from(ACCEPT_POLL).expect("a short interval");
    let mut fds = [PollFd::new(listener, PollFlags::IN)];
    if poll(&mut fds, Some(&tick)).unwrap_or(0) == 0 {
        return None;
    }
    match listener.accept() {
        Ok((stream, peer)) => stream.set_nonblocking(false).ok().map(|()| (stream, peer)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
        Err(_) => {
            // EMFILE and the like leave the connection queued and the
            // listener readable: wait a tick rather than spin.
            std::thread::sleep(ACCEPT_POLL);
            None
        }
    }
}

/// Every worker is busy and as many connections wait: 503, without
/// waiting for the peer's request (or its reading), then our side's FIN.
fn busy(mut stream: &TcpStream) {
    const BODY: &str = "busy: every worker is answering, retry\n";
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    stream.set_nonblocking(true).ok();
    drain(stream);
    stream.write_all(head.as_bytes()).ok();
    stream.shutdown(std::net::Shutdown::Write).ok();
}

/// Reads and drops what the peer has sent so far, without waiting.
fn drain(mut stream: &TcpStream) {
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        match stream.read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => return,
        }
    }
}

/// Connections answered 503, closed [`LINGER`] later (Apache's
/// "lingering close"): closing a socket that holds unread bytes (the
/// request, arriving after the answer) sends a RST, and a RST makes the
/// peer's next read fail, often before it has read the answer. At most
/// [`MAX_LINGERING`]: past that the oldest is closed at once.
#[derive(Default)]
struct Lingering(VecDeque<(TcpStream, Instant)>);

const LINGER: Duration = Duration::from_secs(1);
const MAX_LINGERING: usize = 64;

impl Lingering {
    fn push(&mut self, stream: TcpStream, now: Instant) {
        if self.0.len() == MAX_LINGERING {
            self.close_one();
        }
        self.0.push_back((stream, now + LINGER));
    }

    fn close_due(&mut self, now: Instant) {
        while self.0.front().is_some_and(|(_, due)| now >= *due) {
            self.close_one();
        }
    }

    fn close_one(&mut self) {
        if let Some((stream, _)) = self.0.pop_front() {
            drain(&stream);
        }
    }
}

fn work(rx: &Mutex<Receiver<(TcpStream, SocketAddr)>>, handler: &dyn Fn(&Request) -> Response) {
    loop {
        let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
        let Ok((stream, peer)) = next else {
            return;
        };
        answer(stream, peer, handler);
    }
}

/// Reads one request head within [`HEAD_TIMEOUT`] and answers it.
fn answer(mut stream: TcpStream, peer: SocketAddr, handler: &dyn Fn(&Request) -> Response) {
    stream.set_write_timeout(Some(WRITE_TIMEOUT)).ok();
    let deadline = Instant::now() + HEAD_TIMEOUT;
    let mut buf = vec![0u8; MAX_HEAD];
    let mut len = 0;
    let request = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut buf[len..]) {
            Ok(0) | Err(_) => return,
            Ok(n) => len += n,
        }
        match parse(&buf[..len], peer) {
            Ok(Some(r)) => break r,
            Ok(None) if len < buf.len() => continue,
            Ok(None) => {
                let body = format!("the request head is over {MAX_HEAD} bytes\n");
                return respond(&mut stream, false, &plain(431, body));
            }
            Err(e) => return respond(&mut stream, false, &plain(400, format!("{e}\n"))),
        }
    };
    let resp = handler(&request);
    respond(&mut stream, request.method == "HEAD", &resp);
}

fn plain(status: u16, body: String) -> Response {
    Response {
        status,
        content_type: "text/plain; charset=utf-8",
        body,
    }
}

/// A complete request head, None when more bytes are needed.
fn parse(head: &[u8], peer: SocketAddr) -> Result<Option<Request>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Partial) => Ok(None),
        Ok(httparse::Status::Complete(_)) => {
            let target = req.path.unwrap_or("/");
            let (path, query) = target.split_once('?').unwrap_or((target, ""));
            let scrape_timeout = req
                .headers
                .iter()
                .find(|h| {
                    h.name
                        .eq_ignore_ascii_case("X-Prometheus-Scrape-Timeout-Seconds")
                })
                .and_then(|h| std::str::from_utf8(h.value).ok())
                .map(str::to_string);
            Ok(Some(Request {
                method: req.method.unwrap_or("").to_string(),
                path: path.to_string(),
                query: query.to_string(),
                scrape_timeout,
                peer,
            }))
        }
        Err(e) => Err(format!("not an HTTP request: {e}")),
    }
}

fn respond(stream: &mut TcpStream, head_only: bool, resp: &Response) {
    let reason = match resp.status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    };
    let mut out = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        resp.status,
        resp.content_type,
        resp.body.len()
    );
    if !head_only {
        out.push_str(&resp.body);
    }
    // The peer may have gone (a scrape that timed out): nothing to do.
    stream.write_all(out.as_bytes()).ok();
    stream.shutdown(std::net::Shutdown::Both).ok();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> SocketAddr {
        "127.0.0.1:1".parse().unwrap()
    }

    #[test]
    fn a_scrape_parses_with_its_query_and_timeout() {
        let r = parse(
            b"GET /probe?module=tcp&target=10.0.0.2 HTTP/1.1\r\nHost: x\r\n\
              x-prometheus-scrape-timeout-seconds: 9.5\r\n\r\n",
            peer(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/probe");
        assert_eq!(r.query, "module=tcp&target=10.0.0.2");
        assert_eq!(r.scrape_timeout.as_deref(), Some("9.5"));
    }

    #[test]
    fn a_partial_head_wants_more_and_garbage_is_refused() {
        assert!(parse(b"GET /metrics HTTP/1.1\r\nHost:", peer())
            .unwrap()
            .is_none());
        assert!(parse(b"\x16\x03\x01 not http\r\n\r\n", peer())
            .unwrap_err()
            .contains("not an HTTP request"));
    }
}
