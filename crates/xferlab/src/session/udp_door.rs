//! Ports where datagram streams open with a hello: iperf3's UDP streams
//! each send a few bytes to the server's own port, and nothing in them
//! says which test they belong to. One socket per local address (a door)
//! takes every hello there for every session waiting for streams; each
//! hello goes to the oldest waiting session whose control connection
//! comes from the hello's address, on a socket of its own connected to
//! the sender. So setup state is per session: an idle session holds back
//! no other client's streams, and a hello from an address that runs no
//! test gets nothing (the server cannot be made to send a stream's data
//! to a third party). Two sessions from one address cannot be told apart
//! by their hellos, so they take turns: a session waits for its turn
//! (before it tells its client to open streams) while another from the
//! same address is waiting at the same door.
//!
//! The door's thread lives while some session waits; each waiting
//! session is dropped from it the moment that session ends.

use crate::sys::clock;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;
use xferlab_core::time::Time;

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use super::shared::lock;
use crate::control::Wake;
use crate::net::FlowSocket;
use crate::sys::end::EndWatch;
use crate::transport::SetupError;

/// How often a door looks for waiting sessions that ended or gave up
/// (their end is noticed within this; nothing else waits on it).
const PRUNE_EVERY: Duration = Duration::from_millis(100);

/// Binds a stream's own socket to the door's address (with the test's
/// socket options); the door connects it to the stream's sender.
pub type OpenStream = Box<dyn Fn() -> Result<UdpSocket, SetupError> + Send>;

/// Why a door could not take a session, or give a stream its socket.
#[derive(Debug, thiserror::Error)]
pub enum DoorError {
    #[error("another iperf3 UDP test from {peer} kept {local} busy")]
    Busy { peer: IpAddr, local: SocketAddr },
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error("cannot {what} {at}: {err}")]
    Io {
        what: &'static str,
        at: SocketAddr,
        err: io::Error,
    },
    #[error("cannot start a thread: {0}")]
    Thread(io::Error),
}

/// One session waiting for its streams at a door.
pub struct Waiter {
    /// The session's control peer: hellos from its address are its.
    pub peer: SocketAddr,
    /// Take hellos from any address (`--udp-any-peer`).
    pub any_peer: bool,
    /// Streams still to come.
    pub remaining: usize,
    pub tx: mpsc::Sender<Wake>,
    pub end: EndWatch,
    /// The session's own setup deadline.
    pub deadline: Time,
    pub open: OpenStream,
    /// The exact hello (iperf3: any 4 bytes) and the answer to it.
    pub hello_len: usize,
    pub reply: &'static [u8],
    next: u32,
}

impl Waiter {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        peer: SocketAddr,
        any_peer: bool,
        streams: usize,
        tx: mpsc::Sender<Wake>,
        end: EndWatch,
        deadline: Time,
        open: OpenStream,
        hello_len: usize,
        reply: &'static [u8],
    ) -> Self {
        Waiter {
            peer,
            any_peer,
            remaining: streams,
            tx,
            end,
            deadline,
            open,
            hello_len,
            reply,
            next: 0,
        }
    }

    fn gone(&self, now: Time) -> bool {
        self.remaining == 0 || now >= self.deadline || self.end.ended()
    }

    fn takes(&self, from: SocketAddr, len: usize) -> bool {
        len == self.hello_len
            && (self.any_peer || crate::net::canonical(from).ip() == self.peer.ip())
    }

    /// Whether this session's hellos could be mistaken for `other`'s.
    fn overlaps(&self, other: &Waiter) -> bool {
        self.any_peer || other.any_peer || self.peer.ip() == other.peer.ip()
    }
}

type Waiting = Arc<(Mutex<HashMap<SocketAddr, Vec<Waiter>>>, Condvar)>;

/// Every door of one server, by local address.
#[derive(Default)]
pub struct Doors {
    /// The waiting sessions per door, and the signal that one has left.
    waiting: Waiting,
}

impl Doors {
    /// Queues `w` at the door of `local`, opening the door (a socket
    /// bound by `bind` and its thread) if nobody waits there yet.
    pub fn wait(
        &self,
        local: SocketAddr,
        w: Waiter,
        bind: impl FnOnce() -> Result<UdpSocket, SetupError>,
    ) -> Result<(), DoorError> {
        let (map, left) = &*self.waiting;
        let mut waiting = lock(map);
        // Our turn: no other session from this address waits here.
        loop {
            let now = clock::now();
            let busy = waiting
                .get(&local)
                .is_some_and(|q| q.iter().any(|o| !o.gone(now) && o.overlaps(&w)));
            if !busy {
                break;
            }
            let Some(left_s) = w.deadline.checked_duration_since(now) else {
                return Err(DoorError::Busy {
                    peer: w.peer.ip(),
                    local,
                });
            };
            waiting = left
                .wait_timeout(waiting, left_s.min(PRUNE_EVERY))
                .map_or_else(|p| p.into_inner().0, |(g, _)| g);
        }
        if let Some(q) = waiting.get_mut(&local) {
            q.push(w);
            return Ok(());
        }
        let sock = bind()?;
        sock.set_nonblocking(true).map_err(|err| DoorError::Io {
            what: "set up",
            at: local,
            err,
        })?;
        let all = self.waiting.clone();
        std::thread::Builder::new()
            .name("xfer-udp-door".into())
            .spawn(move || serve_door(&sock, local, &all))
            .map_err(DoorError::Thread)?;
        waiting.insert(local, vec![w]);
        Ok(())
    }
}

fn serve_door(sock: &UdpSocket, local: SocketAddr, all: &Waiting) {
    let (map, left) = &**all;
    let mut buf = [0u8; 64];
    loop {
        let wait = {
            let mut waiting = lock(map);
            let now = clock::now();
            let Some(q) = waiting.get_mut(&local) else {
                return;
            };
            let before = q.len();
            q.retain(|w| !w.gone(now));
            if q.len() != before {
                left.notify_all();
            }
            if q.is_empty() {
                waiting.remove(&local);
                return;
            }
            q.iter()
                .map(|w| w.deadline.duration_since(now))
                .min()
                .unwrap_or(PRUNE_EVERY)
                .min(PRUNE_EVERY)
        };
        let mut fds = [PollFd::new(sock, PollFlags::IN)];
        let t = Timespec::try_from(wait).unwrap_or(Timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        });
        if !poll(&mut fds, Some(&t)).is_ok_and(|n| n > 0) {
            continue;
        }
        loop {
            let (n, from) = match sock.recv_from(&mut buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => break,
            };
            let mut waiting = lock(map);
            let Some(q) = waiting.get_mut(&local) else {
                return;
            };
            let now = clock::now();
            let Some(w) = q.iter_mut().find(|w| !w.gone(now) && w.takes(from, n)) else {
                tracing::debug!(%from, %local, len = n, "datagram at a stream door: no test waits for it; dropped");
                continue;
            };
            match open_stream(w, from) {
                Ok(s) => {
                    let flow = w.next;
                    w.next += 1;
                    w.remaining -= 1;
                    w.tx.send(Wake::Attach(flow, FlowSocket::Datagram(s))).ok();
                }
                Err(e) => {
                    tracing::debug!(%from, %local, "stream socket: {e}");
                    w.remaining = 0;
                }
            }
            if w.remaining == 0 {
                // Its last stream: the next session from its address may
                // go.
                q.retain(|w| !w.gone(now));
                left.notify_all();
            }
        }
    }
}

/// The stream's own socket, connected to its sender, with whatever the
/// door's port received in the moment it was unconnected thrown away,
/// then the answer to the hello.
fn open_stream(w: &Waiter, from: SocketAddr) -> Result<UdpSocket, DoorError> {
    let io = |what| {
        move |err| DoorError::Io {
            what,
            at: from,
            err,
        }
    };
    let s = (w.open)()?;
    s.connect(from).map_err(io("connect to"))?;
    s.set_nonblocking(true).ok();
    let mut junk = [0u8; 64];
    while s.recv(&mut junk).is_ok() {}
    s.set_nonblocking(false).ok();
    s.send(w.reply).map_err(io("answer"))?;
    Ok(s)
}
