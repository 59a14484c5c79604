//! One DCCP flow's thread: a thin driver around the core's
//! [`Connection`] on one connected, non-blocking UDP socket, or with
//! `--dccp-carrier ip` on a raw IP socket for the same ports ([`raw`]:
//! DCCP's own checksum then covers the RFC 4340 pseudo-header). Each turn it
//! takes every queued datagram (recvmmsg, with the ECN bits), runs the
//! connection's timers, offers the application's datagrams at `-b` (or as
//! fast as the CCID drains them), and sends what the connection emits in
//! batches (sendmmsg); with nothing to do it sleeps in ppoll until a
//! datagram or the connection's next deadline. Buffers and message
//! headers are built once; the loop allocates and formats nothing.
//!
//! With SafeUDP (CCID 248) the sender takes the CCID's congestion
//! notifications each turn and, with `--on-congestion`, lets the core's
//! [`Reaction`] set the pacer's rate; the receiver reads its socket's
//! drop counter (SO_RXQ_OVFL, a control message on every datagram) and
//! hands it to the connection, which reports it in option 120.
//!
//! Against a kernel DCCP server (`--dccp-server-stack kernel`) the
//! client sets up each flow's connection before the test
//! ([`attach_in_band`]): it presents its attach record as the
//! connection's first message and waits for the server's answer (one
//! byte, padded to the flow's datagram size),
//! as a kernel DCCP client does, and hands the open connection to the
//! flow's thread. A kernel sender's end marker is taken as such. The
//! server, for a kernel DCCP client, does the other half: it accepts each
//! flow's connection and attach record in band before the test
//! ([`listen_in_band`]) and hands it over the same way.
//!
//! The sender's datagrams carry xferlab's datagram header (sequence
//! number, send time) and the pattern every sender writes; the receiver
//! counts loss, reordering and jitter from the header as for UDP, and
//! checks every payload byte.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::net::{RecvFlags, SendFlags};
use socket2::Socket;
use xferlab_core::datagram::{read_header, write_header, Pacer, RecvStats, HEADER_LEN};
use xferlab_core::dccp::react::Reaction;
use xferlab_core::dccp::{CloseReason, Config, Connection, Event, ResetCode, Seq};
use xferlab_core::proto::wire::{AttachReply, MAGIC};
use xferlab_core::result::{Endpoint, FlowEnd, FlowRole};
use xferlab_core::spec::{Knobs, TestSpec};
use xferlab_core::time::Time;
use xferlab_core::transport::dccp::DccpCarrier;
use xferlab_core::transport::dccp::{DccpKnobs, SERVICE_CODE};

use super::super::datagram::{
    describe, publish, realtime_ns, set_int_opt, transient, HostDrops, RecvBatch, END_MARKER,
};
use super::super::flow::{FlowOutcome, FlowShared, POLL_FLAGS};
use super::super::{FlowJob, FlowSocket, OwnShared};
use super::tx::TxBatch;
use super::{raw, DccpError};
use crate::control::Wake;
use crate::sys::clock;
use crate::transport::attach::AttachWait;

/// Room after the payload for DCCP's header and options: the longest
/// header (28 bytes) and the largest options area (1020); and for the IP
/// header (at most 60 bytes) a raw IPv4 read starts with.
const HEADROOM: usize = 28 + 1020 + 60;
/// Our Sequence Window (RFC 4340 sec. 7.5.2): it must exceed the packets
/// in flight several times over, or a fast, long path looks out of
/// window. 1 Gbit/s x 94 ms is ~8400 packets of 1400 B; 100000 covers
/// that at 10 Gbit/s.
const SEQ_WINDOW: u64 = 100_000;
/// A handshake unanswered this long means no DCCP peer: the client
/// resends its Request after 1, 2 and 4 s (sec. 8.1.1).
const HANDSHAKE_GIVE_UP: Duration = Duration::from_secs(8);
/// A sender whose Close gets no answer in this long ends anyway.
const CLOSE_GRACE: Duration = Duration::from_secs(3);
/// A stopped receiver whose peer went silent gives up after this long.
const QUIET_AFTER_STOP: Duration = Duration::from_secs(1);
/// How often the thread publishes its counters for the interval reader.
const PUBLISH_EVERY: Duration = Duration::from_millis(1);
/// Largest buffer one UDP_GRO receive fills.
const GRO_BUFFER: usize = 65_536;
/// GRO buffers per recvmmsg call: 8 x 64 KiB holds 360 datagrams of
/// 1400 B, more than a batch, in half a MiB per flow.
const GRO_MESSAGES: usize = 8;
/// Waits shorter than this are spun, not slept (ppoll's own cost).
const SPIN_BELOW: Duration = Duration::from_micros(5);
/// Send buffer of a DCCP flow unless `-w` says otherwise. With the
/// default 208 KiB, the lab's 1 Gbit/s x 94 ms link dropped CCID2's slow
/// start at a window of ~50 packets in the receiving socket (TUN packets
/// carry ~4 KiB of truesize each), and CCID2 then crawled at 10 Mbit/s;
/// DCCP does not retransmit, so a drop in the host reads as congestion.
const SEND_BUFFER: libc::c_int = 16 << 20;
/// Receive buffer of a DCCP flow unless `-w` says otherwise: what the
/// socket holds while the receiving thread is off the CPU. 16 MiB (32 MiB
/// of truesize, ~8,000 TUN datagrams, 95 ms at 964 Mbit/s) overflowed in a
/// valid 120 s CCID3 run on the lab's 1 Gbit/s x 94 ms link (2 vCPUs,
/// a4361a2): the receiver fell ~150 ms behind at 37.5 s and the socket
/// dropped 5,268 datagrams, which CCID3 cannot tell from congestion (p
/// doubled; X fell from 964 to 725 Mbit/s for the rest of the run). 64
/// MiB holds ~380 ms at that rate; it is a cap, not memory taken.
const RECEIVE_BUFFER: libc::c_int = 64 << 20;
/// ECT(0) (RFC 3168): DCCP is ECN-capable unless a peer says otherwise
/// (RFC 4340 sec. 12).
const ECT0: u8 = 0b10;
const CE: u8 = 0b11;

pub fn run(job: FlowJob<'_>) -> FlowOutcome {
    let FlowSocket::Datagram(sock) = job.socket else {
        return outcome(
            FlowEnd::Aborted("DCCP flows run over UDP sockets".into()),
            0,
            None,
        );
    };
    match Path::new(sock, &job) {
        Ok(p) => p.run(&job),
        Err(e) => outcome(FlowEnd::Aborted(e.to_string()), 0, None),
    }
}

fn outcome(end: FlowEnd, bytes: u64, note: Option<String>) -> FlowOutcome {
    FlowOutcome {
        end,
        at: clock::now(),
        bytes,
        note,
    }
}

struct Path<'a> {
    /// The flow's UDP socket: its ports are the connection's; with the
    /// UDP carrier it carries the packets too.
    sock: &'a UdpSocket,
    /// The raw IP carrier's socket (`--dccp-carrier ip`), and whether its
    /// reads start with an IPv4 header.
    raw: Option<Socket>,
    raw_v4: bool,
    conn: Connection,
    /// The CCID of a connection handed over open ([`attach_in_band`]).
    open: Option<u8>,
    knobs: DccpKnobs,
    size: usize,
    batch: usize,
    rx: RecvBatch,
    /// Whether the socket coalesces received datagrams (UDP_GRO).
    gro: bool,
    tx: TxBatch,
    /// What every application datagram holds after its header.
    pattern: Vec<u8>,
    peer: String,
    sender: bool,
}

/// What the receiving half took: the datagram counters, the payload
/// bytes, the packets whose payload differed from the pattern, and what
/// was not DCCP.
#[derive(Default)]
struct Taken {
    stats: RecvStats,
    received: u64,
    corrupt: u64,
    not_dccp: u64,
}

impl<'a> Path<'a> {
    fn new(sock: &'a UdpSocket, job: &FlowJob<'_>) -> Result<Self, DccpError> {
        sock.set_nonblocking(true).map_err(|err| DccpError::Flow {
            what: "make it non-blocking",
            err,
        })?;
        let (local, peer) = ends(sock)?;
        let knobs = job.knobs.own.dccp.unwrap_or_default();
        let size = job.knobs.size as usize;
        let (conn, raw, open) = match handed_over(local) {
            Some(h) => (h.conn, Some(h.raw), Some(h.ccid)),
            None => {
                let raw = match knobs.carrier {
                    DccpCarrier::Udp => None,
                    DccpCarrier::Ip => Some(raw::open(local, peer)?),
                };
                let cfg = config(&knobs, size, job.endpoint, local, peer, raw.is_some());
                let conn = match job.endpoint {
                    Endpoint::Client => Connection::connect(clock::now(), cfg),
                    Endpoint::Server => Connection::listen(cfg),
                };
                (conn, raw, None)
            }
        };
        let fd = data_fd(&raw, sock);
        // The UDP carrier's socket was prepared at set-up
        // (`Dccp::prepare_flow`); a raw socket is new here, and carries a
        // v4-mapped peer as IPv4 (raw::open).
        if raw.is_some() {
            prepare(fd, job.knobs, crate::net::canonical(peer));
        }
        let batch = job.knobs.batch as usize;
        // --gso: trains of equal packets out (UDP_SEGMENT), coalesced
        // datagrams in (UDP_GRO, split here by their segment size).
        let gso = raw.is_none() && job.knobs.gso;
        let gro = gso && set_int_opt(fd, libc::SOL_UDP, libc::UDP_GRO, 1);
        let rx = if gro {
            RecvBatch::new(GRO_BUFFER, batch.min(GRO_MESSAGES))
        } else {
            RecvBatch::new(size + HEADROOM, batch)
        };
        Ok(Path {
            sock,
            raw_v4: raw.is_some() && crate::net::canonical(peer).is_ipv4(),
            raw,
            conn,
            open,
            knobs,
            size,
            batch,
            rx,
            gro,
            tx: TxBatch::new(size + HEADROOM, batch, gso),
            pattern: (0..size).map(|i| (i % 251) as u8).collect(),
            peer: peer.to_string(),
            sender: job.role == FlowRole::Sender,
        })
    }

    fn run(mut self, job: &FlowJob<'_>) -> FlowOutcome {
        crate::sys::affinity::tighten_timer_slack();
        let (shared, flags) = (job.shared, job.flags);
        let sender = job.role == FlowRole::Sender;
        let start = clock::now();
        let limit = job.quota.map(|q| q.div_ceil(self.size as u64));
        // A batch per loop: with one datagram offered per loop a rate CCID
        // that has fallen behind its schedule (CCID3 after a late wakeup)
        // sends one packet per loop and never catches up; measured on the
        // lab's 1 Gbit/s, 94 ms path that held CCID3 to ~1 packet per 40 us
        // (316 Mbit/s) where CCID2, whose window refills the queue while it
        // waits for acks, made 890.
        let batch = self.batch as u32;
        let mut pacer = Pacer::new(job.knobs.rate.unwrap_or(0), self.size, batch, start);
        // A SafeUDP sender's policy: -b is its nominal rate (bytes/s).
        let mut reaction = match (self.knobs.on_congestion, job.knobs.rate) {
            (Some(policy), Some(bps)) if sender => Some(Reaction::new(policy, bps as f64 / 8.0)),
            _ => None,
        };
        let mut drops = HostDrops::default();
        let mut host_drops: u64 = 0;
        let mut offered: u64 = 0;
        let mut taken = Taken::default();
        let mut ccid = self.open.unwrap_or(0);
        let mut connected = self.open.is_some();
        let mut closing: Option<Time> = None;
        let mut closed: Option<CloseReason> = None;
        let mut last_heard = start;
        let mut published = start;
        let mut peer_gone = false;
        let mut failed: Option<String> = None;
        let end = loop {
            let now = clock::now();
            let mut busy = false;
            // Everything queued on the socket, a batch per call.
            loop {
                match self.rx.recv(data_fd(&self.raw, self.sock)) {
                    Ok(n) => {
                        busy = true;
                        last_heard = now;
                        let before = host_drops;
                        // Both clocks after the call, so every kernel
                        // stamp in it is at or before `real`.
                        let clocks = (clock::now(), realtime_ns());
                        self.take(now, clocks, n, &mut taken, &mut drops);
                        // A GRO buffer the socket dropped held several
                        // datagrams: the estimate never claims more than the
                        // loss the receiver saw.
                        host_drops = drops.datagrams_dropped(self.gro);
                        if self.gro && !sender {
                            host_drops = host_drops.min(taken.stats.counters().lost);
                        }
                        if host_drops != before {
                            self.conn.set_host_drops(host_drops);
                            shared.udp.host_drops.store(host_drops, Ordering::Relaxed);
                        }
                        if n < self.rx.capacity() {
                            break;
                        }
                    }
                    Err(e) if transient(&e) => break,
                    Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                        peer_gone = true;
                        break;
                    }
                    Err(e) => {
                        failed = Some(describe(&e, "receiving"));
                        break;
                    }
                }
            }
            if let Some(why) = failed.take() {
                break FlowEnd::Aborted(why);
            }
            if self.conn.poll_timeout().is_some_and(|t| now >= t) {
                self.conn.handle_timeout(now);
            }
            while let Some(ev) = self.conn.poll_event() {
                match ev {
                    Event::Connected { tx_ccid, .. } => {
                        ccid = tx_ccid;
                        connected = true;
                    }
                    Event::Closed(r) => closed = Some(r),
                }
            }
            // SafeUDP's notifications (none from CCID 2 and 3), drained
            // every turn; a policy turns them into the offered rate.
            let app_rate = reaction.map(|r| r.rate());
            while let Some(ev) = self.conn.poll_congestion() {
                if let Some(r) = reaction.as_mut() {
                    r.on_event(now, &ev);
                }
            }
            if let Some(r) = reaction.as_mut() {
                let rate = r.poll(now);
                if Some(rate) != app_rate {
                    // A new schedule from now: the pacer's is absolute.
                    let bps = ((rate * 8.0) as u64).max(1);
                    pacer = Pacer::new(bps, self.size, batch, now);
                }
            }
            if flags.abort.load(Ordering::Relaxed) {
                break crate::transport::flow::aborted();
            }
            // The application's offer.
            if sender && connected && closing.is_none() && closed.is_none() {
                let done = limit.is_some_and(|l| offered >= l);
                if done || flags.stop.load(Ordering::Relaxed) {
                    self.conn.close(now);
                    closing = Some(now);
                } else {
                    let mut due = pacer.due(now);
                    let stamp = now.duration_since(start).as_nanos() as u64;
                    let mut n = 0;
                    while due > 0
                        && self.conn.can_queue(self.size)
                        && limit.is_none_or(|l| offered < l)
                    {
                        write_header(&mut self.pattern, offered, stamp);
                        self.conn.send(&self.pattern);
                        offered += 1;
                        due -= 1;
                        n += 1;
                    }
                    if n > 0 {
                        pacer.sent(n, now);
                        busy = true;
                    }
                }
            }
            // What the connection has to send, a batch per call.
            if !self.tx.pending() {
                while let Some(buf) = self.tx.slot() {
                    match self.conn.poll_transmit(now, buf) {
                        Some(len) => self.tx.commit(len),
                        None => break,
                    }
                    if self.tx.slot().is_none() && !self.flush(&mut busy, &mut peer_gone) {
                        break;
                    }
                }
            }
            if self.tx.filled() > 0 {
                self.flush(&mut busy, &mut peer_gone);
            }
            if now.duration_since(published) >= PUBLISH_EVERY {
                let app_rate = reaction.map(|r| r.rate());
                self.publish(shared, ccid, &mut taken, app_rate);
                published = now;
            }
            // Ends.
            if let Some(r) = closed {
                if !self.tx.pending() {
                    break self.end_of(r, taken.not_dccp);
                }
            }
            if peer_gone {
                break if closing.is_some() || !sender && flags.stop.load(Ordering::Relaxed) {
                    FlowEnd::Completed
                } else if self.raw.is_some() {
                    FlowEnd::Aborted(format!(
                        "{} has no DCCP over IP (ICMP protocol unreachable): no xferlab or kernel DCCP there",
                        self.peer
                    ))
                } else {
                    FlowEnd::Aborted(format!(
                        "the DCCP peer's UDP socket at {} is gone (ICMP port unreachable)",
                        self.peer
                    ))
                };
            }
            if closing.is_some_and(|t| now.duration_since(t) >= CLOSE_GRACE) {
                break FlowEnd::Completed;
            }
            if !sender
                && (flags.cut.load(Ordering::Relaxed)
                    || (flags.stop.load(Ordering::Relaxed)
                        && now.duration_since(last_heard) >= QUIET_AFTER_STOP))
            {
                break FlowEnd::Completed;
            }
            if !busy {
                let offering = sender && connected && closing.is_none();
                let change = reaction.and_then(|r| r.next_change());
                self.wait(now, offering, &pacer, change);
            }
        };
        let app_rate = reaction.map(|r| r.rate());
        self.publish(shared, ccid, &mut taken, app_rate);
        let end = match end {
            FlowEnd::Completed if taken.corrupt > 0 => FlowEnd::Aborted(format!(
                "DCCP delivered {} datagrams whose payload differs from what was sent",
                taken.corrupt
            )),
            e => e,
        };
        let s = self.conn.stats();
        let bytes = if sender {
            s.data_bytes_sent
        } else {
            taken.received
        };
        outcome(end, bytes, None)
    }

    /// Takes the `n` messages the last receive call brought: each
    /// datagram (a GRO buffer holds several of one size, the last maybe
    /// shorter) through the connection, and a data packet's payload
    /// checked against the pattern. `clocks` (this connection's clock and
    /// CLOCK_REALTIME, read after the receive call) place the kernel's
    /// receive stamps on the connection's clock.
    fn take(
        &mut self,
        now: Time,
        clocks: (Time, u64),
        n: usize,
        t: &mut Taken,
        drops: &mut HostDrops,
    ) {
        for i in 0..n {
            let m = self.rx.message(i);
            let arrived = arrival_time(m.stamp_ns, clocks.0, clocks.1);
            let seg = m.segment.filter(|&s| s > 0).unwrap_or(m.data.len()).max(1);
            drops.count(m.drops);
            drops.buffer(m.data.len().div_ceil(seg));
            let ce = m.tos.is_some_and(|t| t & CE == CE);
            for dgram in m.data.chunks(seg) {
                let data = if self.raw.is_some() {
                    match raw::payload(self.raw_v4, dgram) {
                        Some(d) => d,
                        None => {
                            t.not_dccp += 1;
                            continue;
                        }
                    }
                } else if dgram.starts_with(&MAGIC) {
                    // A repeated attach whose ack was lost.
                    self.sock.send(&[AttachReply::Ok as u8]).ok();
                    t.not_dccp += 1;
                    continue;
                } else {
                    dgram
                };
                let Some(payload) = self.conn.handle_arrival(now, arrived, data, ce) else {
                    continue;
                };
                match read_header(payload) {
                    // A kernel DCCP sender's end marker.
                    Some((END_MARKER, _)) if payload.len() == HEADER_LEN => {}
                    Some((seq, send_ns)) if payload.len() == self.size => {
                        t.received += payload.len() as u64;
                        t.stats.on_datagram(seq, send_ns, now.as_nanos());
                        if payload[HEADER_LEN..] != self.pattern[HEADER_LEN..] {
                            t.corrupt += 1;
                        }
                    }
                    _ => {
                        t.received += payload.len() as u64;
                        t.corrupt += 1;
                    }
                }
            }
        }
    }

    /// Sends what the batch holds; false when the socket took only part
    /// of it (the rest waits for POLLOUT).
    fn flush(&mut self, busy: &mut bool, peer_gone: &mut bool) -> bool {
        match self.tx.flush(data_fd(&self.raw, self.sock)) {
            Ok(n) => {
                *busy |= n > 0;
                !self.tx.pending()
            }
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                *peer_gone = true;
                self.tx.clear();
                false
            }
            Err(e) => {
                // A send error other than a full buffer drops the batch,
                // as a network would; DCCP does not retransmit.
                tracing::debug!(error = %e, "DCCP send failed; batch dropped");
                self.tx.clear();
                false
            }
        }
    }

    fn publish(&self, shared: &FlowShared, ccid: u8, taken: &mut Taken, app_rate: Option<f64>) {
        let sender = self.sender;
        let s = self.conn.stats();
        // A receiver's own CCID only paces its acknowledgements: its state
        // would read as the flow's, so only senders report one.
        let state = self.conn.ccid_state().filter(|_| sender);
        if let OwnShared::Dccp(d) = &shared.own {
            d.publish(ccid, state, &s, taken.not_dccp, app_rate);
        }
        if sender {
            shared.bytes.store(s.data_bytes_sent, Ordering::Relaxed);
            shared.udp.packets.store(s.data_sent, Ordering::Relaxed);
        } else {
            publish(&mut taken.stats, taken.received, shared);
        }
    }

    /// Sleeps until a datagram comes, the socket takes the rest of a
    /// batch, or the connection's (or the application's pacing) next
    /// deadline; at most [`POLL_FLAGS`], so the flags are seen.
    fn wait(&self, now: Time, offering: bool, pacer: &Pacer, rate_change: Option<Time>) {
        let mut deadline = now + POLL_FLAGS;
        if let Some(t) = rate_change {
            deadline = deadline.min(t);
        }
        if let Some(t) = self.conn.poll_timeout() {
            deadline = deadline.min(t);
        }
        if offering && self.conn.can_queue(self.size) {
            if let Some(t) = pacer.next_due() {
                deadline = deadline.min(t);
            }
        }
        let left = deadline.duration_since(now);
        if left < SPIN_BELOW {
            return;
        }
        let mut events = PollFlags::IN;
        if self.tx.pending() {
            events |= PollFlags::OUT;
        }
        let Ok(ts) = Timespec::try_from(left) else {
            return;
        };
        let fd = data_fd(&self.raw, self.sock);
        let mut fds = [PollFd::new(&fd, events)];
        poll(&mut fds, Some(&ts)).ok();
    }

    /// How the connection's end reads for this flow.
    fn end_of(&self, r: CloseReason, not_dccp: u64) -> FlowEnd {
        let s = self.conn.stats();
        let junk = s.dropped_checksum + s.dropped_invalid + not_dccp;
        ended(r, &self.peer, &self.knobs, self.raw.is_some(), junk)
    }
}

/// What a connection's end means for its flow, as one line where it
/// failed (`junk`: packets that were not this connection's DCCP).
fn ended(r: CloseReason, peer: &str, knobs: &DccpKnobs, raw: bool, junk: u64) -> FlowEnd {
    match r {
        CloseReason::Closed => FlowEnd::Completed,
        CloseReason::Reset {
            code: ResetCode::BadServiceCode,
            by_peer: true,
        } => FlowEnd::Aborted(format!(
            "the DCCP server at {peer} refused service code {} (xferlab's servers accept {SERVICE_CODE}): leave out --dccp-service",
            knobs.service,
        )),
        CloseReason::Reset {
            code: ResetCode::MandatoryError,
            by_peer: true,
        } => FlowEnd::Aborted(format!(
            "the DCCP peer at {peer} refused CCID {}: try --ccid {}",
            knobs.ccid,
            if knobs.ccid == 2 { 3 } else { 2 }
        )),
        CloseReason::Reset { code, by_peer } => FlowEnd::Aborted(format!(
            "the DCCP connection with {peer} was reset by {} ({code:?})",
            if by_peer { "the peer" } else { "this end" }
        )),
        CloseReason::TimedOut => FlowEnd::Aborted(format!(
            "no DCCP answer from {peer} within {} s ({junk} packets that were not its DCCP): the peer does not speak DCCP over {} (--dccp-carrier {})",
            HANDSHAKE_GIVE_UP.as_secs(),
            if raw { "IP" } else { "UDP" },
            if raw { "ip" } else { "udp" },
        )),
    }
}

/// The server's answer to an attach record presented in band: its first
/// byte; the rest is padding (a kernel server pads it to the flow's
/// datagram size, `kernel::serve`, so its CCID3 takes that as its packet
/// size).
fn answer(payload: &[u8]) -> Result<(), DccpError> {
    match payload {
        [b, ..] if *b == AttachReply::Ok as u8 => Ok(()),
        [b, ..] => Err(DccpError::FlowRefused(
            AttachReply::from_byte(*b).map_or("an unknown answer", |r| r.describe()),
        )),
        [] => Err(DccpError::EmptyAnswer),
    }
}

/// A flow socket's local and peer addresses.
fn ends(sock: &UdpSocket) -> Result<(SocketAddr, SocketAddr), DccpError> {
    let err = |err| DccpError::Flow {
        what: "read its addresses",
        err,
    };
    Ok((
        sock.local_addr().map_err(err)?,
        sock.peer_addr().map_err(err)?,
    ))
}

/// Where a datagram's kernel receive stamp (CLOCK_REALTIME, ns) falls on
/// the connection's clock, given both clocks read after the receive call
/// that brought it: `mono - (real - stamp)`. No stamp, or one after that
/// reading (the wall clock stepped back), is the reading itself. A GRO
/// buffer's datagrams share its stamp.
fn arrival_time(stamp: Option<u64>, mono: Time, real: u64) -> Time {
    match stamp {
        Some(s) if s <= real => Time::from_nanos(mono.as_nanos().saturating_sub(real - s)),
        _ => mono,
    }
}

/// The socket the packets travel on: the raw IP carrier's, else the UDP
/// socket. A function of the two fields, so it borrows only them (the
/// batches beside them are borrowed mutably meanwhile).
fn data_fd<'s>(raw: &'s Option<Socket>, sock: &'s UdpSocket) -> BorrowedFd<'s> {
    match raw {
        Some(r) => r.as_fd(),
        None => sock.as_fd(),
    }
}

/// Prepares a flow's UDP socket, when it carries the packets, before the
/// side reads its settings back.
pub(super) fn prepare_udp(sock: &UdpSocket, knobs: &Knobs) {
    // Only the family matters here (IP_TOS or IPV6_TCLASS), and a socket
    // not yet connected has its own.
    match sock.peer_addr().or_else(|_| sock.local_addr()) {
        Ok(peer) => prepare(sock.as_fd(), knobs, peer),
        Err(e) => tracing::warn!("a DCCP flow's socket has no address, left unprepared: {e}"),
    }
}

/// The socket options of the socket a flow's packets travel on: buffers,
/// ECN marks in and out, the drop count, receive time stamps.
fn prepare(fd: BorrowedFd<'_>, knobs: &Knobs, peer: SocketAddr) {
    if knobs.buffer.is_none() {
        // SO_RCVBUFFORCE where we may (CAP_NET_ADMIN), else as much as
        // net.core.rmem_max allows.
        for (force, plain, size) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, RECEIVE_BUFFER),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, SEND_BUFFER),
        ] {
            if !set_int_opt(fd, libc::SOL_SOCKET, force, size) {
                set_int_opt(fd, libc::SOL_SOCKET, plain, size);
            }
        }
    }
    set_int_opt(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1);
    // The socket's drop count rides on every datagram: SafeUDP's
    // receiver reports it (end-host congestion), and the result's
    // `host_drops` shows it for any CCID.
    set_int_opt(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1);
    // CCID3's receiver measures X_recv on arrival times: the thread that
    // handles a batch may have read its clock tens of ms before (a host
    // with 2 CPUs and steal), and counting bytes over that clock made the
    // reports swing from 0 to 1.35 times the link rate. Without stamps
    // (refused), the receive call's clock stands in.
    set_int_opt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1);
    set_int_opt(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1);
    if knobs.tos.is_none() {
        if peer.is_ipv6() {
            set_int_opt(
                fd,
                libc::IPPROTO_IPV6,
                libc::IPV6_TCLASS,
                libc::c_int::from(ECT0),
            );
        } else {
            set_int_opt(fd, libc::IPPROTO_IP, libc::IP_TOS, libc::c_int::from(ECT0));
        }
    }
}

/// The connection's configuration for one end (`raw`: the raw IP
/// carrier, whose checksum covers the pseudo-header).
fn config(
    knobs: &DccpKnobs,
    size: usize,
    endpoint: Endpoint,
    local: SocketAddr,
    peer: SocketAddr,
    raw: bool,
) -> Config {
    let mut cfg = match endpoint {
        Endpoint::Client => Config::client(local.port(), peer.port(), knobs.service, knobs.ccid),
        Endpoint::Server => Config::server(local.port(), vec![SERVICE_CODE]),
    };
    cfg.mss = size;
    if raw {
        cfg.pseudo = raw::pseudo(local, peer);
    }
    cfg.seq_window = SEQ_WINDOW;
    cfg.queue_bytes = size * super::QUEUE_DATAGRAMS;
    cfg.give_up = HANDSHAKE_GIVE_UP;
    cfg.iss = random_iss();
    cfg
}

/// A connection [`attach_in_band`] opened, waiting for its flow's thread.
struct HandedOver {
    local: SocketAddr,
    conn: Connection,
    raw: Socket,
    ccid: u8,
}

/// Connections opened and attached before the test, by their flow
/// socket's local address (unique while the socket lives). The flow's
/// socket is all its thread gets, so the open connection waits here;
/// each is put and taken once, at setup.
static HANDED_OVER: Mutex<Vec<HandedOver>> = Mutex::new(Vec::new());

fn handed_over(local: SocketAddr) -> Option<HandedOver> {
    let mut all = HANDED_OVER.lock().unwrap_or_else(|e| e.into_inner());
    let i = all.iter().position(|h| h.local == local)?;
    Some(all.swap_remove(i))
}

/// Opens a client flow's connection over raw IP to a kernel DCCP server's
/// port (`sock`'s peer; `sock`'s port is the connection's), presents the
/// attach record `hello` as its first message and waits for the answer
/// ([`answer`]), within `timeout`; the open connection then waits for the
/// flow's thread.
pub(super) fn attach_in_band(
    spec: &TestSpec,
    sock: &UdpSocket,
    hello: &[u8],
    timeout: Duration,
) -> Result<(), DccpError> {
    let knobs = spec.knobs.own.dccp.unwrap_or_default();
    let size = spec.knobs.size as usize;
    let (local, peer) = ends(sock)?;
    let raw = raw::open(local, peer)?;
    prepare(raw.as_fd(), &spec.knobs, crate::net::canonical(peer));
    let v4 = crate::net::canonical(peer).is_ipv4();
    let start = clock::now();
    let give_up = start + timeout;
    let mut conn = Connection::connect(
        start,
        config(&knobs, size, Endpoint::Client, local, peer, true),
    );
    let mut buf = vec![0u8; size + HEADROOM];
    let mut ccid = None;
    let mut answered = false;
    loop {
        let now = clock::now();
        loop {
            let n = match rustix::net::recv(&raw, &mut buf[..], RecvFlags::empty()) {
                Ok((n, _)) => n,
                Err(e) => {
                    let e = io::Error::from(e);
                    if transient(&e) {
                        break;
                    }
                    return Err(DccpError::AttachEnded(describe(&e, "receiving")));
                }
            };
            let Some(data) = raw::payload(v4, &buf[..n]) else {
                continue;
            };
            if let Some(payload) = conn.handle_datagram_ecn(now, data, false) {
                answer(payload)?;
                answered = true;
            }
        }
        if conn.poll_timeout().is_some_and(|t| now >= t) {
            conn.handle_timeout(now);
        }
        while let Some(ev) = conn.poll_event() {
            match ev {
                Event::Connected { tx_ccid, .. } => {
                    ccid = Some(tx_ccid);
                    conn.send(hello);
                }
                Event::Closed(r) => {
                    let s = conn.stats();
                    let junk = s.dropped_checksum + s.dropped_invalid;
                    return match ended(r, &peer.to_string(), &knobs, true, junk) {
                        FlowEnd::Aborted(why) => Err(DccpError::AttachEnded(why)),
                        _ => Err(DccpError::ClosedBeforeAnswer(peer)),
                    };
                }
            }
        }
        let mut out = [0u8; 1 << 11];
        while let Some(len) = conn.poll_transmit(now, &mut out) {
            rustix::net::send(&raw, &out[..len], SendFlags::empty()).ok();
        }
        if let (true, Some(ccid)) = (answered, ccid) {
            let h = HandedOver {
                local,
                conn,
                raw,
                ccid,
            };
            HANDED_OVER
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(h);
            return Ok(());
        }
        if now >= give_up {
            return Err(DccpError::NoAnswer {
                peer,
                seconds: timeout.as_secs_f64(),
            });
        }
        let wait = conn
            .poll_timeout()
            .map_or(give_up, |t| t.min(give_up))
            .duration_since(now)
            .min(Duration::from_millis(10));
        if let Ok(ts) = Timespec::try_from(wait) {
            let mut fds = [PollFd::new(&raw, PollFlags::IN)];
            poll(&mut fds, Some(&ts)).ok();
        }
    }
}

/// One flow of [`listen_in_band`]: its UDP socket (the flow's port), its
/// raw socket, the connection being accepted, and the answer sent.
struct Accepting {
    flow: u32,
    udp: UdpSocket,
    local: SocketAddr,
    raw: Socket,
    conn: Connection,
    ccid: Option<u8>,
    answered: bool,
}

/// The server's side of a kernel DCCP client (`--dccp-stack kernel
/// --dccp-server-stack xferlab --dccp-carrier ip`): a kernel client opens
/// its connection to the flow's port over IP and sends the attach record
/// as its first message, so each flow's connection is accepted here, in
/// band, before the test. Per flow a UDP socket holds the port (and is
/// the flow's socket, connected to the client's DCCP port once known) and
/// a raw socket takes protocol 33 from the control peer's address to that
/// port; a thread runs the handshakes, takes each attach record (the
/// session's token, this flow's number), answers it padded to -l (a
/// kernel sender's CCID3 takes its packet size from it) and hands the
/// open connection to the flow's thread, until every flow is here, the
/// setup deadline passes, or the session ends. Returns the flows' ports.
pub(super) fn listen_in_band(
    spec: &TestSpec,
    local: std::net::IpAddr,
    wait: AttachWait,
) -> Result<Vec<u16>, DccpError> {
    let knobs = spec.knobs.own.dccp.unwrap_or_default();
    let size = spec.knobs.size as usize;
    let peer = crate::net::canonical(wait.peer);
    let mut flows = Vec::new();
    for plan in spec.flows() {
        let udp = UdpSocket::bind(SocketAddr::new(local, 0))
            .map_err(|err| DccpError::FlowPort { local, err })?;
        let at = udp
            .local_addr()
            .map_err(|err| DccpError::FlowPort { local, err })?;
        let raw = raw::listen(at, peer)?;
        prepare(raw.as_fd(), &spec.knobs, peer);
        let cfg = config(&knobs, size, Endpoint::Server, at, peer, true);
        flows.push(Accepting {
            flow: plan.id,
            udp,
            local: at,
            raw,
            conn: Connection::listen(cfg),
            ccid: None,
            answered: false,
        });
    }
    let ports = flows.iter().map(|f| f.local.port()).collect();
    let mut answer = vec![0u8; size.max(1)];
    answer[0] = AttachReply::Ok as u8;
    std::thread::Builder::new()
        .name("xfer-dccp-accept".into())
        .spawn(move || accept_in_band(flows, &answer, &knobs, size, peer, &wait))
        .map_err(DccpError::Thread)?;
    Ok(ports)
}

fn accept_in_band(
    mut flows: Vec<Accepting>,
    answer: &[u8],
    knobs: &DccpKnobs,
    size: usize,
    peer: SocketAddr,
    wait: &AttachWait,
) {
    let v4 = peer.is_ipv4();
    let mut buf = vec![0u8; size + HEADROOM];
    let mut out = vec![0u8; size + HEADROOM];
    while !flows.is_empty() {
        let Some(left) = wait.left() else {
            return;
        };
        let now = clock::now();
        let mut k = 0;
        while k < flows.len() {
            let f = &mut flows[k];
            while let Ok((n, _)) = rustix::net::recv(&f.raw, &mut buf[..], RecvFlags::empty()) {
                let Some(data) = raw::payload(v4, &buf[..n]) else {
                    continue;
                };
                // The first message is the attach record; one for another
                // session or flow gets no answer (the client gives up).
                if let Some(msg) = f.conn.handle_datagram_ecn(now, data, false) {
                    if !f.answered && wait.flow_of(msg) == Some(f.flow) {
                        f.conn.send(answer);
                        f.answered = true;
                    }
                }
            }
            if f.conn.poll_timeout().is_some_and(|t| now >= t) {
                f.conn.handle_timeout(now);
            }
            while let Some(ev) = f.conn.poll_event() {
                match ev {
                    Event::Connected { tx_ccid, .. } => f.ccid = Some(tx_ccid),
                    // A client that reset or left before its attach: wait
                    // for the next one on a fresh listener.
                    Event::Closed(_) => {
                        let cfg = config(knobs, size, Endpoint::Server, f.local, peer, true);
                        f.conn = Connection::listen(cfg);
                        (f.ccid, f.answered) = (None, false);
                    }
                }
            }
            while let Some(len) = f.conn.poll_transmit(now, &mut out) {
                rustix::net::send(&f.raw, &out[..len], SendFlags::empty()).ok();
            }
            let (true, Some(ccid)) = (f.answered, f.ccid) else {
                k += 1;
                continue;
            };
            let f = flows.swap_remove(k);
            // The flow's socket names the client's DCCP port as its peer
            // (the flow's thread reads it there; nothing goes out on it).
            let client = SocketAddr::new(peer.ip(), f.conn.ports().1);
            if f.udp.connect(client).is_err() {
                continue;
            }
            HANDED_OVER
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(HandedOver {
                    local: f.local,
                    conn: f.conn,
                    raw: f.raw,
                    ccid,
                });
            let sock = FlowSocket::Datagram(f.udp);
            if wait.tx.send(Wake::Attach(f.flow, sock)).is_err() {
                return;
            }
        }
        if flows.is_empty() {
            return;
        }
        let next = flows
            .iter()
            .filter_map(|f| f.conn.poll_timeout())
            .min()
            .map_or(left, |t| t.duration_since(clock::now()).min(left))
            .min(Duration::from_millis(10));
        let Ok(ts) = Timespec::try_from(next) else {
            continue;
        };
        let mut fds: Vec<PollFd> = flows
            .iter()
            .map(|f| PollFd::new(&f.raw, PollFlags::IN))
            .chain(std::iter::once(PollFd::new(&wait.end, PollFlags::IN)))
            .collect();
        poll(&mut fds, Some(&ts)).ok();
        if fds.last().is_some_and(|f| !f.revents().is_empty()) {
            return;
        }
    }
}

/// A random initial sequence number (RFC 4340 sec. 7.2 asks for one that
/// is hard to guess).
fn random_iss() -> Seq {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).ok();
    Seq::new(u64::from_ne_bytes(b) & ((1 << 48) - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrival_time_maps_the_kernel_stamp() {
        let mono = Time::from_nanos(5_000_000_000);
        let real = 1_800_000_000_000_000_000;
        // 30 ms before the call returned.
        assert_eq!(
            arrival_time(Some(real - 30_000_000), mono, real),
            Time::from_nanos(4_970_000_000)
        );
        // No stamp, or one after the reading (a clock step): the reading.
        assert_eq!(arrival_time(None, mono, real), mono);
        assert_eq!(arrival_time(Some(real + 1), mono, real), mono);
        // A stamp from before this clock's epoch does not wrap.
        assert_eq!(arrival_time(Some(0), mono, real), Time::ZERO);
    }

    /// A flow's socket gets the receive buffer that holds a receiver's
    /// stall at the link rate (the read-back is twice the request: the
    /// kernel counts truesize). Needs CAP_NET_ADMIN (SO_RCVBUFFORCE), as
    /// the lab does; without it the buffer is net.core.rmem_max.
    #[test]
    fn a_flow_socket_gets_the_large_receive_buffer() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let peer = sock.local_addr().unwrap();
        prepare(sock.as_fd(), &Knobs::default(), peer);
        let got = socket2::SockRef::from(&sock).recv_buffer_size().unwrap();
        assert_eq!(
            got,
            2 * RECEIVE_BUFFER as usize,
            "SO_RCVBUFFORCE refused: run the tests as root (CAP_NET_ADMIN)"
        );
        // -w wins: prepare leaves the buffers to it.
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let knobs = Knobs {
            buffer: Some(1 << 20),
            ..Knobs::default()
        };
        prepare(sock.as_fd(), &knobs, peer);
        let got = socket2::SockRef::from(&sock).recv_buffer_size().unwrap();
        assert!(got < 2 * RECEIVE_BUFFER as usize, "{got}");
    }

    /// A kernel server's answer is one byte padded to -l; an older one's
    /// is the byte alone. Both are taken; a refusal names its cause.
    #[test]
    fn an_attach_answer_is_its_first_byte_whatever_the_padding() {
        let mut padded = vec![0u8; 1400];
        padded[0] = AttachReply::Ok as u8;
        assert!(answer(&padded).is_ok());
        assert!(answer(&[AttachReply::Ok as u8]).is_ok());
        padded[0] = AttachReply::UnknownSession as u8;
        let refused = answer(&padded).unwrap_err().to_string();
        assert!(refused.contains("refused the flow"), "{refused}");
        assert!(matches!(answer(&[]), Err(DccpError::EmptyAnswer)));
    }
}
