//! The blocking driver both ends of an order connection use for its
//! sans-IO machine (`xferlab_core::proto::order`): write what it has,
//! read until its next deadline, feed it, hand back its events.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use xferlab_core::outbox::Machine;

use crate::sys::clock;

/// How often a driver with a stop counter looks at it while the peer is
/// silent (it is counted up by another thread, e.g. on Ctrl-C).
const STOP_POLL: Duration = Duration::from_millis(100);

/// What [`drive`] ended with.
pub enum Driven<E> {
    Event(E),
    /// The machine closed with nothing more to say.
    Closed,
    /// `stop` went above 0.
    Stopped,
}

/// Runs `m` over `stream` until it has an event, is closed, or `stop`
/// (a count of interrupts) is above 0. Reads wait at most until the machine's deadline, so a silent peer
/// ends in the machine's timeout, never in a hang.
pub fn drive<M: Machine>(
    stream: &mut TcpStream,
    m: &mut M,
    stop: Option<&AtomicU32>,
) -> Driven<M::Event> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if stop.is_some_and(|s| s.load(Ordering::Relaxed) > 0) {
            return Driven::Stopped;
        }
        while let Some(b) = m.poll_transmit() {
            if stream.write_all(&b).is_err() {
                m.handle_eof();
            }
        }
        if let Some(e) = m.poll_event() {
            return Driven::Event(e);
        }
        if m.is_closed() {
            return Driven::Closed;
        }
        let now = clock::now();
        let mut wait = m
            .poll_timeout()
            .map(|t| t.checked_duration_since(now).unwrap_or(Duration::ZERO));
        if stop.is_some() {
            wait = Some(wait.map_or(STOP_POLL, |w| w.min(STOP_POLL)));
        }
        if wait == Some(Duration::ZERO) {
            m.handle_timeout(now);
            continue;
        }
        // A zero read timeout is "none" to the socket: at least 1 ms.
        stream
            .set_read_timeout(wait.map(|w| w.max(Duration::from_millis(1))))
            .ok();
        match stream.read(&mut buf) {
            Ok(0) => m.handle_eof(),
            Ok(n) => m.handle_input(clock::now(), &buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                m.handle_timeout(clock::now())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => m.handle_eof(),
        }
    }
}

/// An argv as a shell would read it back, for log lines.
pub fn shown(argv: &[String]) -> String {
    shlex::try_join(argv.iter().map(String::as_str)).unwrap_or_else(|_| argv.join(" "))
}
