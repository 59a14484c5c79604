//! The blocking driver both ends of an order connection use for its
//! sans-IO machine (`xferlab_core::proto::order`): write what it has,
//! read until its next deadline, feed it, hand back its events.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use xferlab_core::outbox::Machine;

use crate::sys::clock;

/// Runs `m` over `stream` until it has an event (returned) or is closed
/// with none (None). Reads wait at most until the machine's deadline, so
/// a silent peer ends in the machine's timeout, never in a hang.
pub fn drive<M: Machine>(stream: &mut TcpStream, m: &mut M) -> Option<M::Event> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        while let Some(b) = m.poll_transmit() {
            if stream.write_all(&b).is_err() {
                m.handle_eof();
            }
        }
        if let Some(e) = m.poll_event() {
            return Some(e);
        }
        if m.is_closed() {
            return None;
        }
        let now = clock::now();
        let wait = m
            .poll_timeout()
            .map(|t| t.checked_duration_since(now).unwrap_or(Duration::ZERO));
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
