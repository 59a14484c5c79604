//! A thin I/O loop around quinn-proto (sans-IO QUIC) on one
//! `std::net::UdpSocket`: one [`Endpoint`] and the [`Connection`]s it
//! made or accepted. It serves one client connection (a QUIC flow's
//! client end) as well as many connections on one socket (a server
//! port), and leaves every decision to its caller: which incoming
//! connection to accept, refuse or send a Retry to, what to write and
//! read on which stream, when to close.
//!
//! # The loop
//!
//! A caller's turn is:
//!
//! 1. [`Driver::recv`]: every datagram queued on the socket (recvmmsg,
//!    UDP_GRO trains split by their segment size) through the endpoint
//!    into its connection; new connections wait in
//!    [`Driver::next_incoming`] for [`Driver::accept`],
//!    [`Driver::refuse`], [`Driver::retry`] or [`Driver::ignore`];
//! 2. the caller takes the connections' events
//!    ([`Driver::poll_event`]) and works on them through
//!    [`Driver::connection`] (quinn-proto's own API: streams,
//!    datagrams, close);
//! 3. [`Driver::transmit`]: runs the connections' expired timers, hands
//!    their endpoint events to the endpoint, and sends what they have
//!    to send, each `poll_transmit` one GSO train (UDP_SEGMENT) where
//!    the kernel takes it;
//! 4. with nothing done, [`Driver::wait`] sleeps in poll until a
//!    datagram, room in the socket, the connections' next timer or the
//!    caller's own deadline.
//!
//! Time is `Instant`, quinn-proto's clock: CLOCK_MONOTONIC, the same
//! vDSO read as `crate::sys::clock::now`.
//!
//! # Costs per packet
//!
//! The transmit buffer and the poll set are built once. quinn-proto takes
//! each datagram as an owned `BytesMut` (it decrypts in place and keeps
//! stream data as slices of it): the kernel writes each datagram (or GRO
//! train) straight into the free end of one arena, from which it is
//! split off, so an allocation happens only when the arena is used up
//! while earlier packets are still held, not per packet. No locks, no
//! formatting.

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::{
    AcceptError, ClientConfig, ConnectError, Connection, ConnectionHandle, DatagramEvent, Endpoint,
    EndpointConfig, Event, Incoming, RetryError, ServerConfig, Transmit,
};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use xferlab_sys::mmsg::RecvInto;

use crate::transport::datagram::set_int_opt;

/// Largest buffer one UDP_GRO receive fills (and the largest datagram a
/// receive without GRO takes whole).
const RECV_BUFFER: usize = 65_536;
/// Receive calls per turn at most: 8 GRO trains of up to 64 KiB (~360
/// packets of 1452 bytes, or 8 of loopback's 64 KiB); fewer where half
/// the L2 cache holds less ([`recv_calls`]).
const RECV_MESSAGES: usize = 8;
/// Bytes one UDP_SEGMENT send may carry: a UDP payload's limit over IPv4
/// (65,535 less the IP and UDP headers).
const MAX_TRAIN_BYTES: usize = 65_507;
/// Receive calls per turn on a CPU with `l2` bytes of L2 cache: as many
/// 64 KiB trains as half of it holds, so that a turn's datagrams are
/// still in the cache when quinn-proto decrypts them (8 on a 2 MiB L2,
/// 4 on a 512 KiB one), at most [`RECV_MESSAGES`]; that many where sysfs
/// does not say.
fn recv_calls(l2: Option<u64>) -> usize {
    l2.map_or(RECV_MESSAGES, |l2| {
        (usize::try_from(l2 / 2).unwrap_or(usize::MAX) / RECV_BUFFER).clamp(1, RECV_MESSAGES)
    })
}
/// The receive arena's size: several turns' worth of receive calls
/// before it must find room again (see the module's comment).
const ARENA: usize = 4 * RECV_BUFFER * RECV_MESSAGES;
/// Longest sleep in [`Driver::wait`], so a caller looks at its stop and
/// abort flags this often even with no timer armed.
pub const MAX_WAIT: Duration = Duration::from_millis(100);

/// What a turn's receive and send found beyond the connections' own
/// events.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Traffic {
    /// Datagrams taken from the socket and UDP sends made.
    pub received: u64,
    pub sends: u64,
    /// Datagrams the foreign filter took ([`Driver::set_foreign`]).
    pub foreign: u64,
    /// The socket said the peer's port is closed (ICMP port unreachable
    /// on a connected socket).
    pub refused: bool,
}

/// A connection's slot: quinn-proto's handle indexes the endpoint's
/// slab, which reuses freed indices, so a vector indexed by it stays as
/// long as the most connections open at once.
type Slots = Vec<Option<Connection>>;

/// A filter for datagrams on the socket that are not QUIC (a flow
/// socket's repeated attach record): true when it took the datagram.
pub type Foreign<'a> = Box<dyn FnMut(&UdpSocket, &[u8]) -> bool + Send + 'a>;

pub struct Driver<'a> {
    sock: &'a UdpSocket,
    endpoint: Endpoint,
    conns: Slots,
    incoming: VecDeque<Incoming>,
    /// Where [`Driver::poll_event`] resumes its round over connections.
    next: usize,
    rx: RecvInto,
    /// Receive calls per turn ([`recv_calls`] of this CPU).
    recv_calls: usize,
    /// The socket's peer when it is connected (every datagram is from
    /// it), read once.
    connected: Option<SocketAddr>,
    arena: BytesMut,
    /// `poll_transmit`'s buffer, and how much of it waits for room in the
    /// socket (its destination and segment size).
    tx: Vec<u8>,
    pending: Option<(SocketAddr, usize, Option<usize>)>,
    /// The endpoint's answers (stateless resets, version negotiation,
    /// refusals, retries).
    response: Vec<u8>,
    /// Datagrams one `poll_transmit` may return as a GSO train; 1 where
    /// the kernel refuses UDP_SEGMENT.
    train: usize,
    /// The socket's UDP_SEGMENT now (0: off).
    segment: usize,
    foreign: Option<Foreign<'a>>,
    pub traffic: Traffic,
}

impl<'a> Driver<'a> {
    /// A driver on `sock` (made non-blocking here), serving incoming
    /// connections with `server` where given; `max_udp_payload` is the
    /// largest datagram its connections send (the MTU discovery's upper
    /// bound), which sizes the GSO trains.
    pub fn new(
        sock: &'a UdpSocket,
        config: Arc<EndpointConfig>,
        server: Option<Arc<ServerConfig>>,
        max_udp_payload: u16,
    ) -> io::Result<Self> {
        sock.set_nonblocking(true)?;
        let fd = sock.as_fd();
        let gro = set_int_opt(fd, libc::SOL_UDP, libc::UDP_GRO, 1);
        // UDP_SEGMENT is set per train (its size); asking for it once
        // here tells whether the kernel has it.
        let gso = set_int_opt(fd, libc::SOL_UDP, libc::UDP_SEGMENT, 0);
        let train = if gso {
            (MAX_TRAIN_BYTES / usize::from(max_udp_payload.max(1200))).max(1)
        } else {
            1
        };
        tracing::debug!(gro, gso, train, "QUIC driver");
        Ok(Driver {
            sock,
            endpoint: Endpoint::new(config, server, true, None),
            conns: Vec::new(),
            incoming: VecDeque::new(),
            next: 0,
            rx: RecvInto::default(),
            recv_calls: recv_calls(crate::sys::cache::caches(None).l2),
            connected: sock.peer_addr().ok(),
            arena: BytesMut::with_capacity(ARENA),
            tx: Vec::with_capacity(MAX_TRAIN_BYTES),
            pending: None,
            response: Vec::new(),
            train,
            segment: 0,
            foreign: None,
            traffic: Traffic::default(),
        })
    }

    /// Datagrams on the socket that are not QUIC go to `f` first (it
    /// returns true for those it took); the rest go to the endpoint.
    pub fn set_foreign(&mut self, f: Foreign<'a>) {
        self.foreign = Some(f);
    }

    /// Opens a client connection to `remote`.
    pub fn connect(
        &mut self,
        now: Instant,
        config: ClientConfig,
        remote: SocketAddr,
        server_name: &str,
    ) -> Result<ConnectionHandle, ConnectError> {
        let (h, conn) = self.endpoint.connect(now, config, remote, server_name)?;
        self.insert(h, conn);
        Ok(h)
    }

    /// The next connection attempt that arrived, to accept, refuse,
    /// retry or ignore (each must be given back to one of them).
    pub fn next_incoming(&mut self) -> Option<Incoming> {
        self.incoming.pop_front()
    }

    /// Accepts `incoming` (with `server` instead of the endpoint's
    /// configuration where given).
    pub fn accept(
        &mut self,
        now: Instant,
        incoming: Incoming,
        server: Option<Arc<ServerConfig>>,
    ) -> Result<ConnectionHandle, Box<AcceptError>> {
        self.response.clear();
        match self
            .endpoint
            .accept(incoming, now, &mut self.response, server)
        {
            Ok((h, conn)) => {
                self.insert(h, conn);
                Ok(h)
            }
            Err(e) => {
                if let Some(t) = e.response.as_ref() {
                    let t = clone_transmit(t);
                    self.send_response(&t);
                }
                Err(Box::new(e))
            }
        }
    }

    /// Refuses `incoming` with CONNECTION_REFUSED.
    pub fn refuse(&mut self, incoming: Incoming) {
        self.response.clear();
        let t = self.endpoint.refuse(incoming, &mut self.response);
        self.send_response(&t);
    }

    /// Answers `incoming` with a Retry (address validation before any
    /// state is kept: no amplification); the client comes back with a
    /// token, as a new incoming whose `remote_address_validated()` holds.
    pub fn retry(&mut self, incoming: Incoming) -> Result<(), Box<RetryError>> {
        self.response.clear();
        let t = self.endpoint.retry(incoming, &mut self.response)?;
        self.send_response(&t);
        Ok(())
    }

    /// Drops `incoming` without an answer.
    pub fn ignore(&mut self, incoming: Incoming) {
        self.endpoint.ignore(incoming);
    }

    /// The connection behind `h`, while it lives (until it drained).
    pub fn connection(&mut self, h: ConnectionHandle) -> Option<&mut Connection> {
        self.conns.get_mut(h.0).and_then(Option::as_mut)
    }

    /// Handles of the connections alive now.
    #[cfg(test)]
    pub fn handles(&self) -> impl Iterator<Item = ConnectionHandle> + '_ {
        self.conns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.is_some())
            .map(|(i, _)| ConnectionHandle(i))
    }

    /// How many connections are alive.
    pub fn live(&self) -> usize {
        self.conns.iter().filter(|c| c.is_some()).count()
    }

    /// The next application event of any connection, round-robin over
    /// them.
    pub fn poll_event(&mut self) -> Option<(ConnectionHandle, Event)> {
        let n = self.conns.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            if let Some(ev) = self.conns[i].as_mut().and_then(Connection::poll) {
                self.next = i;
                return Some((ConnectionHandle(i), ev));
            }
        }
        None
    }

    fn insert(&mut self, h: ConnectionHandle, conn: Connection) {
        if self.conns.len() <= h.0 {
            self.conns.resize_with(h.0 + 1, || None);
        }
        self.conns[h.0] = Some(conn);
    }

    /// Takes the datagrams queued on the socket, [`recv_calls`] receive
    /// calls' worth at most. Ok(false) when there was none. A
    /// bounded batch per turn, not all that is queued: the turn's
    /// transmit then sends the acknowledgements and window updates for
    /// what came, so a receiver behind a fast sender does not hold them
    /// back while it drains its socket (measured, loopback, debug build:
    /// draining everything first held the receiver to 142 acknowledging
    /// datagrams a second and the sender's RTT estimate at 12 ms).
    pub fn recv(&mut self, now: Instant) -> io::Result<bool> {
        let mut any = false;
        let connected = self.connected;
        let mut calls = 0;
        while calls < self.recv_calls {
            let t = match self.rx.recv(self.sock, &mut self.arena, RECV_BUFFER) {
                Ok(t) => t,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                    self.traffic.refused = true;
                    break;
                }
                Err(e) => return Err(e),
            };
            calls += 1;
            any = true;
            // The arena held nothing before the call: all of it is this
            // message. Reserving room for the next keeps its storage when
            // every packet split off it earlier is gone.
            let data = self.arena.split();
            if self.arena.capacity() < RECV_BUFFER {
                self.arena.reserve(ARENA);
            }
            if let Some(remote) = connected.or(t.source) {
                self.take(now, data, t.segment, remote);
            }
        }
        Ok(any)
    }

    /// One message's datagrams (a GRO train holds several of `segment`
    /// bytes, the last maybe shorter) to the endpoint, from `remote`.
    fn take(
        &mut self,
        now: Instant,
        mut data: BytesMut,
        segment: Option<usize>,
        remote: SocketAddr,
    ) {
        let seg = segment.unwrap_or(data.len()).max(1);
        while !data.is_empty() {
            let dgram = data.split_to(seg.min(data.len()));
            self.traffic.received += 1;
            if let Some(f) = self.foreign.as_mut() {
                if f(self.sock, &dgram) {
                    self.traffic.foreign += 1;
                    continue;
                }
            }
            self.response.clear();
            match self
                .endpoint
                .handle(now, remote, None, None, dgram, &mut self.response)
            {
                Some(DatagramEvent::ConnectionEvent(h, ev)) => {
                    if let Some(c) = self.conns.get_mut(h.0).and_then(Option::as_mut) {
                        c.handle_event(ev);
                    }
                }
                Some(DatagramEvent::NewConnection(inc)) => self.incoming.push_back(inc),
                Some(DatagramEvent::Response(t)) => self.send_response(&t),
                None => {}
            }
        }
    }

    /// Runs the connections' timers and endpoint events and sends what
    /// they have, until they have nothing or the socket is full. Ok(true)
    /// when it sent anything.
    pub fn transmit(&mut self, now: Instant) -> io::Result<bool> {
        let mut sent = false;
        if self.pending.is_some() {
            if !self.flush()? {
                return Ok(false);
            }
            sent = true;
        }
        for i in 0..self.conns.len() {
            let Some(conn) = self.conns[i].as_mut() else {
                continue;
            };
            if conn.poll_timeout().is_some_and(|t| t <= now) {
                conn.handle_timeout(now);
            }
            let h = ConnectionHandle(i);
            let mut drained = false;
            while let Some(ev) = conn.poll_endpoint_events() {
                drained |= ev.is_drained();
                if let Some(back) = self.endpoint.handle_event(h, ev) {
                    conn.handle_event(back);
                }
            }
            loop {
                self.tx.clear();
                let Some(t) = conn.poll_transmit(now, self.train, &mut self.tx) else {
                    break;
                };
                self.pending = Some((t.destination, t.size, t.segment_size));
                if !flush_pending(
                    self.sock,
                    &self.tx,
                    &mut self.pending,
                    &mut self.segment,
                    &mut self.train,
                    &mut self.traffic,
                )? {
                    return Ok(sent);
                }
                sent = true;
            }
            if drained {
                self.conns[i] = None;
            }
        }
        Ok(sent)
    }

    /// Sends the transmit waiting for room; Ok(false) if still no room.
    fn flush(&mut self) -> io::Result<bool> {
        flush_pending(
            self.sock,
            &self.tx,
            &mut self.pending,
            &mut self.segment,
            &mut self.train,
            &mut self.traffic,
        )
    }

    /// An answer of the endpoint itself, sent once; a full socket drops
    /// it (the peer repeats its packet).
    fn send_response(&mut self, t: &Transmit) {
        let mut pending = Some((t.destination, t.size, t.segment_size));
        let _ = flush_pending(
            self.sock,
            &self.response,
            &mut pending,
            &mut self.segment,
            &mut self.train,
            &mut self.traffic,
        );
    }

    /// The earliest timer of any connection.
    pub fn next_timer(&mut self) -> Option<Instant> {
        self.conns
            .iter_mut()
            .filter_map(|c| c.as_mut().and_then(Connection::poll_timeout))
            .min()
    }

    /// Sleeps until a datagram arrives, the socket has room for a
    /// transmit that waits, a connection's timer or `until`, at most
    /// [`MAX_WAIT`].
    pub fn wait(&mut self, now: Instant, until: Option<Instant>) {
        let mut deadline = now + MAX_WAIT;
        if let Some(t) = until {
            deadline = deadline.min(t);
        }
        if let Some(t) = self.next_timer() {
            deadline = deadline.min(t);
        }
        let left = deadline.saturating_duration_since(now);
        if left.is_zero() {
            return;
        }
        let mut events = PollFlags::IN;
        if self.pending.is_some() {
            events |= PollFlags::OUT;
        }
        let Ok(ts) = Timespec::try_from(left) else {
            return;
        };
        let fd = self.sock.as_fd();
        let mut fds = [PollFd::new(&fd, events)];
        poll(&mut fds, Some(&ts)).ok();
    }
}

/// Sends `buf`'s pending transmit: a train as one UDP_SEGMENT send (the
/// socket's segment size set to the train's when it differs: a
/// connection's trains keep one size until its MTU changes). Ok(false)
/// when the socket is full (it stays pending); a send the kernel refuses
/// otherwise is dropped, as a network would (QUIC recovers it), and a
/// GSO failure turns trains off.
fn flush_pending(
    sock: &UdpSocket,
    buf: &[u8],
    pending: &mut Option<(SocketAddr, usize, Option<usize>)>,
    segment: &mut usize,
    train: &mut usize,
    traffic: &mut Traffic,
) -> io::Result<bool> {
    let Some((to, size, seg)) = *pending else {
        return Ok(true);
    };
    let fd = sock.as_fd();
    match seg.filter(|&s| s < size) {
        Some(s)
            if *segment != s
                && set_int_opt(fd, libc::SOL_UDP, libc::UDP_SEGMENT, s as libc::c_int) =>
        {
            *segment = s;
        }
        // One datagram larger than the socket's segment size (an MTU
        // probe) would be cut: segmentation off for it.
        None if *segment != 0 && size > *segment => {
            set_int_opt(fd, libc::SOL_UDP, libc::UDP_SEGMENT, 0);
            *segment = 0;
        }
        _ => {}
    }
    match sock.send_to(&buf[..size], to) {
        Ok(_) => {
            traffic.sends += 1;
            *pending = None;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
            traffic.refused = true;
            *pending = None;
            Ok(true)
        }
        Err(e) => {
            if e.raw_os_error() == Some(libc::EIO) && *segment != 0 {
                // The device cannot segment (no checksum offload).
                tracing::debug!("UDP_SEGMENT failed (EIO): QUIC sends packet by packet");
                set_int_opt(fd, libc::SOL_UDP, libc::UDP_SEGMENT, 0);
                *segment = 0;
                *train = 1;
            } else {
                tracing::debug!(error = %e, "QUIC send dropped");
            }
            *pending = None;
            Ok(true)
        }
    }
}

fn clone_transmit(t: &Transmit) -> Transmit {
    Transmit {
        destination: t.destination,
        ecn: t.ecn,
        size: t.size,
        segment_size: t.segment_size,
        src_ip: t.src_ip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_receives_what_half_the_l2_holds() {
        assert_eq!(recv_calls(Some(2 << 20)), 8);
        assert_eq!(recv_calls(Some(32 << 20)), 8);
        assert_eq!(recv_calls(Some(512 << 10)), 4);
        assert_eq!(recv_calls(Some(64 << 10)), 1);
        assert_eq!(recv_calls(None), 8);
    }
    use crate::transport::quic::tls::{self, TlsFiles};
    use quinn_proto::{Dir, StreamEvent};

    /// One server driver on an unconnected socket serves two clients at
    /// once (each datagram's sender from the receive call), refusing a
    /// third; every client's stream arrives whole on its own connection.
    #[test]
    fn one_server_socket_serves_several_connections_and_refuses_by_choice() {
        let files = TlsFiles::default();
        let server_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = server_sock.local_addr().unwrap();
        let server_cfg = Arc::new(ServerConfig::with_crypto(tls::server(&files).unwrap()));
        let ep = Arc::new(EndpointConfig::default());
        let mut server = Driver::new(&server_sock, ep.clone(), Some(server_cfg), 1452).unwrap();
        let socks: Vec<UdpSocket> = (0..3)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let mut clients: Vec<(Driver<'_>, ConnectionHandle)> = socks
            .iter()
            .map(|s| {
                let mut d = Driver::new(s, ep.clone(), None, 1452).unwrap();
                let c = ClientConfig::new(tls::client(&files).unwrap());
                let h = d.connect(Instant::now(), c, addr, "127.0.0.1").unwrap();
                (d, h)
            })
            .collect();
        let refused_port = socks[2].local_addr().unwrap().port();
        let payload = vec![5u8; 200_000];
        let mut sent = [false; 3];
        let mut got: std::collections::HashMap<ConnectionHandle, usize> = Default::default();
        let mut finished = 0;
        let mut client_lost = [false; 3];
        let deadline = Instant::now() + Duration::from_secs(10);
        while (finished < 2 || !client_lost[2]) && Instant::now() < deadline {
            let now = Instant::now();
            server.recv(now).unwrap();
            while let Some(inc) = server.next_incoming() {
                if inc.remote_address().port() == refused_port {
                    server.refuse(inc);
                } else {
                    server.accept(now, inc, None).unwrap();
                }
            }
            while let Some((h, ev)) = server.poll_event() {
                if let Event::Stream(StreamEvent::Opened { .. } | StreamEvent::Readable { .. }) = ev
                {
                    let conn = server.connection(h).unwrap();
                    while let Some(id) = conn.streams().accept(Dir::Uni) {
                        let _ = id;
                    }
                }
            }
            for h in server.handles().collect::<Vec<_>>() {
                let conn = server.connection(h).unwrap();
                for i in 0..4u64 {
                    let id = quinn_proto::StreamId::new(quinn_proto::Side::Client, Dir::Uni, i);
                    let mut rs = conn.recv_stream(id);
                    let read = rs.read(true);
                    if let Ok(mut chunks) = read {
                        loop {
                            match chunks.next(usize::MAX) {
                                Ok(Some(c)) => *got.entry(h).or_default() += c.bytes.len(),
                                Ok(None) => {
                                    finished += 1;
                                    break;
                                }
                                Err(_) => break,
                            }
                        }
                        let _ = chunks.finalize();
                    }
                }
            }
            server.transmit(now).unwrap();
            for (i, (d, h)) in clients.iter_mut().enumerate() {
                d.recv(now).unwrap();
                while let Some((_, ev)) = d.poll_event() {
                    match ev {
                        Event::Connected if !sent[i] => {
                            let conn = d.connection(*h).unwrap();
                            let id = conn.streams().open(Dir::Uni).unwrap();
                            let mut s = conn.send_stream(id);
                            assert_eq!(s.write(&payload).unwrap(), payload.len());
                            s.finish().unwrap();
                            sent[i] = true;
                        }
                        Event::ConnectionLost { .. } => client_lost[i] = true,
                        _ => {}
                    }
                }
                d.transmit(now).unwrap();
            }
            server.wait(
                Instant::now(),
                Some(Instant::now() + Duration::from_millis(1)),
            );
        }
        assert_eq!(finished, 2, "streams finished");
        let mut sizes: Vec<usize> = got.values().copied().collect();
        sizes.sort_unstable();
        assert_eq!(
            sizes,
            [payload.len(), payload.len()],
            "bytes per connection"
        );
        assert_eq!(server.live(), 2, "two accepted, one refused");
        assert!(
            client_lost[2] && !sent[2],
            "the third was refused before it could send"
        );
    }
}
