//! Kernel DCCP (`--dccp-stack kernel`): the host kernel's own SOCK_DCCP
//! sockets, where it has them (Linux before 6.16 with dccp_ipv4; the lab
//! VM's 6.1 guest). A session's server opens one DCCP listener with
//! xferlab's service code and offers its port for every flow; each flow
//! is one DCCP connection whose first message is the flow's attach
//! record, taken only from the control peer's address and only until the
//! setup deadline, as for UDP flows. The connected socket then runs as a
//! datagram flow: the receiver is the datagram path's (which also ends at
//! the peer's close, an empty read), the sender the datagram path's
//! pacing and batching with one difference (the kernel refuses a message
//! while its CCID's queue is full, see [`QUEUE_FULL_NAP`]). Every interval reads what the kernel exposes of
//! the sending CCID: CCID3's `tfrc_tx_info`; Linux 6.1's CCID2 exposes no
//! state per socket (no getsockopt, no `get_info`), so its section has the
//! CCID and the counters only.

use std::io::{self, Read};
use std::mem::{offset_of, size_of};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use xferlab_core::datagram::{write_header, Pacer, HEADER_LEN};
use xferlab_core::dccp::ccid::CcidState;
use xferlab_core::dccp::Stats;
use xferlab_core::interval::Reading;
use xferlab_core::proto::wire::{AttachReply, ATTACH_LEN, PREAMBLE_LEN};
use xferlab_core::result::{FlowEnd, FlowRole};
use xferlab_core::spec::{Knobs, TestSpec};
use xferlab_core::transport::dccp::{DccpCounters, DccpStack, SERVICE_CODE};
use xferlab_core::transport::TransportCounters;

use super::super::datagram::{
    self, describe, transient, DatagramWire, SendBatch, END_MARKER, END_MARKER_COPIES,
};
use super::super::flow::{FlowOutcome, FlowShared, SideFlags, POLL_FLAGS};
use super::super::{FlowJob, FlowSocket};
use super::DccpError;
use crate::control::Wake;
use crate::net::sockopt;
use crate::sys::clock;
use crate::transport::attach::AttachWait;
use xferlab_sys::sockopt::Get;

/// How long a sender waits when the kernel refuses a message because its
/// queue is full (the CCID sends slower than the application offers).
/// dccp_poll reports POLLOUT by socket memory, not by this queue, so
/// there is no event to wait for. 100 us is well under the time the
/// queue takes to drain at 1 Gbit/s (64 x 1400 B = 717 us), so it never
/// runs dry while the sender sleeps, and a CCID-limited sender does not
/// spin a core.
const QUEUE_FULL_NAP: Duration = Duration::from_micros(100);

/// How long closing a sender's socket may wait for the CCID to send what
/// it still holds (64 queued packets of 1400 B leave in well under 1 s
/// at any rate CCID3 allows after its slow start).
const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// A DCCP socket of `domain`, or the one line saying this kernel has none.
fn socket(domain: Domain) -> Result<Socket, DccpError> {
    Socket::new(domain, Type::DCCP, Some(Protocol::DCCP)).map_err(|err| DccpError::NoKernelDccp {
        release: rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned(),
        err,
    })
}

/// Whether this kernel can open a DCCP socket (checked before a test
/// starts, so a missing DCCP is one line, not a failed flow).
pub(super) fn check(knobs: &Knobs) -> Result<(), DccpError> {
    if wanted(knobs) {
        socket(Domain::IPV4).map(drop)?;
    }
    Ok(())
}

/// Whether a flow's socket is a kernel DCCP socket (the interval reader
/// has the socket, not the knobs).
pub(super) fn is_kernel(socket: &impl AsFd) -> bool {
    SockRef::from(socket)
        .protocol()
        .is_ok_and(|p| p == Some(Protocol::DCCP))
}

/// Whether `knobs` ask for kernel DCCP on the client.
pub(super) fn wanted(knobs: &Knobs) -> bool {
    knobs.own.dccp.is_some_and(|d| d.stack == DccpStack::Kernel)
}

/// Whether `knobs` ask for kernel DCCP on the server.
pub(super) fn serves(knobs: &Knobs) -> bool {
    knobs
        .own
        .dccp
        .is_some_and(|d| d.server() == DccpStack::Kernel)
}

/// The std wrapper a flow's DCCP socket travels in. std's UdpSocket is an
/// owned descriptor whose send/recv and timeouts are the plain socket
/// calls; a connected SOCK_DCCP socket takes them like a connected UDP
/// socket (one message per call), so the datagram attach and data paths
/// serve it unchanged.
fn as_datagram(s: Socket) -> UdpSocket {
    UdpSocket::from(OwnedFd::from(s))
}

/// A client flow's DCCP connection to the server's flow port `to`, with
/// the test's service code, CCID and socket options; the caller presents
/// the attach record on it.
pub(super) fn connect(
    spec: &TestSpec,
    to: SocketAddr,
    timeout: Duration,
) -> Result<UdpSocket, DccpError> {
    let k = spec.knobs.own.dccp.unwrap_or_default();
    let s = socket(Domain::for_address(to))?;
    // The kernel keeps the service code as the wire's big-endian field.
    s.set_dccp_service(k.service.to_be())
        .map_err(|err| DccpError::ServiceCode {
            service: k.service,
            err,
        })?;
    s.set_dccp_ccid(k.ccid)
        .map_err(|err| DccpError::CcidRefused { ccid: k.ccid, err })?;
    prepare(&s, &spec.knobs)?;
    s.connect_timeout(&to.into(), timeout)
        .map_err(|e| connect_error(to, &k, e))?;
    let mps = s.dccp_cur_mps().unwrap_or(u32::MAX);
    if spec.knobs.size > u64::from(mps) {
        return Err(DccpError::PacketTooLarge {
            size: spec.knobs.size,
            to,
            mps,
        });
    }
    Ok(as_datagram(s))
}

/// What a failed connect means, by the Reset code the kernel turned into
/// an errno (net/dccp/input.c, dccp_reset_code_convert).
fn connect_error(
    to: SocketAddr,
    k: &xferlab_core::transport::dccp::DccpKnobs,
    e: io::Error,
) -> DccpError {
    match e.raw_os_error() {
        Some(libc::EBADRQC) => DccpError::ServiceRefused {
            to,
            service: k.service,
            accepted: SERVICE_CODE,
        },
        Some(libc::EOPNOTSUPP) => DccpError::CcidUnsupported { to, ccid: k.ccid },
        Some(libc::ECONNREFUSED) => DccpError::PortClosed { to },
        _ => crate::net::NetError::connect(to, e).into(),
    }
}

/// The socket options every flow socket gets: the test's knobs, a
/// kernel queue as deep as the userspace stack's.
fn prepare(s: &Socket, knobs: &Knobs) -> Result<(), DccpError> {
    sockopt::apply(s, knobs, sockopt::SocketEnd::Accepted)?;
    // The kernel's queue ahead of the CCID (DCCP_SOCKOPT_QPOLICY_TXQLEN,
    // default 5) holds as many as the userspace stack's.
    s.set_dccp_qpolicy_txqlen(super::QUEUE_DATAGRAMS as u32)
        .ok();
    Ok(())
}

/// Opens the session's DCCP listener on `local` and serves its flows'
/// attach records on a thread of its own until every flow is here, the
/// setup deadline passes, or the session ends. Returns the port, once per
/// flow.
pub(super) fn listen(
    spec: &TestSpec,
    local: IpAddr,
    wait: AttachWait,
) -> Result<Vec<u16>, DccpError> {
    let flows = spec.flows().len();
    let s = socket(Domain::for_address(SocketAddr::new(local, 0)))?;
    s.set_dccp_service(SERVICE_CODE.to_be())
        .map_err(DccpError::ListenerService)?;
    prepare(&s, &spec.knobs)?;
    s.bind(&SocketAddr::new(local, 0).into())
        .map_err(|err| DccpError::ListenerBind { local, err })?;
    s.listen(flows.min(1024) as i32)
        .map_err(|err| DccpError::Listen { local, err })?;
    s.set_nonblocking(true).ok();
    let port = s
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map_or(0, |a| a.port());
    let knobs = spec.knobs.clone();
    std::thread::Builder::new()
        .name("xfer-dccp-listen".into())
        .spawn(move || serve(&s, &knobs, flows, &wait))
        .map_err(DccpError::Thread)?;
    Ok(vec![port; flows])
}

/// Connections accepted but not yet attached, at most this many beyond the
/// flows still missing: a peer that connects and stays silent holds one
/// place until newer connections push it out or the setup deadline
/// passes; it cannot keep the session's own flows from attaching (a
/// blocking read of its first message did, until the deadline).
const EXTRA_PENDING: usize = 4;

fn serve(listener: &Socket, knobs: &Knobs, flows: usize, wait: &AttachWait) {
    let mut attached = vec![false; flows];
    let mut pending: std::collections::VecDeque<Socket> = std::collections::VecDeque::new();
    let mut buf = [0u8; PREAMBLE_LEN + ATTACH_LEN + 1];
    // The answer: AttachReply::Ok, padded with zeros to the flow's
    // datagram size. Linux's CCID3 sender takes its packet size s from
    // the connection's first data packet (`tx_s = skb->len` in
    // ccid3_hc_tx_send_packet), and this answer is that packet: a 1-byte
    // answer started the server's CCID3 at X = 1 byte/s with an initial
    // window of 4 bytes per RTT, ~0.5 s to reach -b 20M under TCG
    // (docs/dccp.md). A client reads the first byte; DCCP is datagram
    // based, so a shorter read still takes the whole message.
    let mut answer = vec![0u8; (knobs.size as usize).max(1)];
    answer[0] = AttachReply::Ok as u8;
    while attached.iter().any(|a| !a) {
        let Some(left) = wait.left().and_then(|l| Timespec::try_from(l).ok()) else {
            return;
        };
        let mut fds: Vec<PollFd> = [listener.as_fd(), wait.end.as_fd()]
            .into_iter()
            .chain(pending.iter().map(|c| c.as_fd()))
            .map(|fd| PollFd::from_borrowed_fd(fd, PollFlags::IN))
            .collect();
        if !poll(&mut fds, Some(&left)).is_ok_and(|n| n > 0) {
            continue;
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        let listener_ready = !fds[0].revents().is_empty();
        let ready: Vec<bool> = fds[2..].iter().map(|f| !f.revents().is_empty()).collect();
        drop(fds);
        // The first message of each connection that has spoken: the
        // attach record (the client sends it right after the handshake),
        // or the connection is closed.
        let mut k = 0;
        for speaks in ready {
            if !speaks {
                k += 1;
                continue;
            }
            let conn = pending.remove(k).expect("one place per descriptor");
            let flow = match (&conn).read(&mut buf) {
                Ok(n) => wait.flow_of(&buf[..n]),
                Err(_) => None,
            };
            let Some(slot) = flow.and_then(|f| attached.get_mut(f as usize).filter(|a| !**a))
            else {
                continue;
            };
            conn.set_nonblocking(false).ok();
            // At most what the connection carries per packet (the client
            // refuses a larger -l at connect; a kernel client checks its
            // own path, not ours).
            let mps = conn.dccp_cur_mps().map_or(answer.len(), |m| m as usize);
            let reply = &answer[..answer.len().min(mps).max(1)];
            if prepare(&conn, knobs).is_err() || conn.send(reply).is_err() {
                continue;
            }
            *slot = true;
            let flow = flow.expect("a slot implies a flow");
            let sock = FlowSocket::Datagram(as_datagram(conn));
            if wait.tx.send(Wake::Attach(flow, sock)).is_err() {
                return;
            }
        }
        if !listener_ready {
            continue;
        }
        while let Ok((conn, from)) = listener.accept() {
            let from = from.as_socket().map(crate::net::canonical);
            if !from.is_some_and(|f| wait.any_peer || f.ip() == wait.peer.ip()) {
                tracing::debug!(?from, peer = %wait.peer, "DCCP connection from another address than the control connection's; closed");
                continue;
            }
            conn.set_nonblocking(true).ok();
            let missing = attached.iter().filter(|a| !**a).count();
            if pending.len() >= missing + EXTRA_PENDING {
                tracing::debug!(
                    "DCCP connection silent since it was accepted; closed for a newer one"
                );
                pending.pop_front();
            }
            pending.push_back(conn);
        }
    }
}

/// The data path of a kernel DCCP flow.
pub(super) fn run(job: FlowJob<'_>) -> FlowOutcome {
    let FlowSocket::Datagram(s) = job.socket else {
        return FlowOutcome {
            end: FlowEnd::Aborted("kernel DCCP flows run on DCCP sockets".into()),
            at: clock::now(),
            bytes: 0,
            note: None,
        };
    };
    match job.role {
        FlowRole::Sender => send(s, job.knobs, job.quota, job.shared, job.flags),
        FlowRole::Receiver => {
            // Kernel stamps on every flow: its rate in the lab VM is far
            // below where they cost (see datagram::stamp_arrivals).
            datagram::set_int_opt(s.as_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1);
            datagram::receive(s, job.knobs, job.shared, job.flags, DatagramWire::Xferlab)
        }
    }
}

/// Sends `-l`-byte messages at `-b` (or as fast as the CCID takes them)
/// until stopped or the quota is sent, then the datagram path's end
/// marker, then closes (the kernel sends its Close).
fn send(
    sock: &UdpSocket,
    k: &Knobs,
    quota: Option<u64>,
    shared: &FlowShared,
    flags: &SideFlags,
) -> FlowOutcome {
    crate::sys::affinity::tighten_timer_slack();
    sock.set_nonblocking(true).ok();
    let size = k.size as usize;
    let limit = quota.map(|q| q.div_ceil(size as u64));
    let mut out = SendBatch::new(
        sock.as_fd(),
        size,
        k.batch as usize,
        false,
        DatagramWire::Xferlab,
    );
    let start = clock::now();
    let mut pacer = Pacer::new(k.rate.unwrap_or(0), size, 1, start);
    let mut seq: u64 = 0;
    let end = loop {
        if flags.abort.load(Ordering::Relaxed) {
            break crate::transport::flow::aborted();
        }
        if flags.stop.load(Ordering::Relaxed) || limit.is_some_and(|l| seq >= l) {
            break FlowEnd::Completed;
        }
        let now = clock::now();
        let mut due = pacer.due(now);
        if due == 0 {
            if let Some(next) = pacer.next_due() {
                std::thread::sleep(next.duration_since(now).min(POLL_FLAGS));
            }
            continue;
        }
        if let Some(l) = limit {
            due = due.min((l - seq).min(u64::from(u32::MAX)) as u32);
        }
        let stamp = now.duration_since(start).as_nanos() as u64;
        match out.send(seq, stamp, due as usize) {
            Ok(n) => {
                pacer.sent(n as u32, now);
                seq += n as u64;
                shared.bytes.store(seq * size as u64, Ordering::Relaxed);
                shared.udp.packets.store(seq, Ordering::Relaxed);
            }
            Err(e) if transient(&e) => std::thread::sleep(QUEUE_FULL_NAP),
            Err(e) => break FlowEnd::Aborted(describe(&e, "sending on a kernel DCCP socket")),
        }
    };
    let at = clock::now();
    // Closing discards what the CCID still holds in the kernel's queue
    // (the last datagrams and the end marker) unless the socket lingers;
    // the receiver ends at the close either way (an empty read).
    SockRef::from(sock).set_linger(Some(CLOSE_LINGER)).ok();
    if end == FlowEnd::Completed {
        let mut marker = [0u8; HEADER_LEN];
        write_header(&mut marker, END_MARKER, seq);
        let mut copies = 0;
        let give_up = at + POLL_FLAGS;
        while copies < END_MARKER_COPIES && clock::now() < give_up {
            match sock.send(&marker) {
                Ok(_) => copies += 1,
                Err(_) => std::thread::sleep(QUEUE_FULL_NAP),
            }
        }
    }
    FlowOutcome {
        end,
        at,
        bytes: seq * size as u64,
        note: None,
    }
}

/// struct tfrc_tx_info (include/uapi/linux/tfrc.h): X and X_recv in
/// bytes/s scaled by 2^6, X_calc in bytes/s, RTT, RTO and t_ipi in us,
/// p scaled by 10^6.
#[repr(C)]
#[derive(Default)]
struct TfrcTxInfo {
    x: u64,
    x_recv: u64,
    x_calc: u32,
    rtt: u32,
    p: u32,
    rto: u32,
    ipi: u32,
}

/// The sending CCID's state as the kernel reports it, in the userspace
/// stack's shape; plus X_calc and the no-feedback timeout.
fn ccid_state(fd: BorrowedFd<'_>, ccid: u8) -> (Option<CcidState>, Option<f64>, Option<Duration>) {
    if ccid != 3 {
        return (None, None, None);
    }
    let mut raw = [0u8; size_of::<TfrcTxInfo>()];
    let got = xferlab_sys::sockopt::get_bytes(fd, Get::DccpCcidTxInfo, &mut raw);
    if got.ok() != Some(raw.len()) {
        return (None, None, None);
    }
    let (state, x_calc, t_rto) = TfrcTxInfo::decode(&raw).state();
    (Some(state), Some(x_calc), Some(t_rto))
}

impl TfrcTxInfo {
    /// The struct from the bytes the kernel wrote (native byte order, the
    /// C layout's offsets).
    fn decode(b: &[u8; size_of::<TfrcTxInfo>()]) -> TfrcTxInfo {
        let u64_at = |at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        TfrcTxInfo {
            x: u64_at(offset_of!(TfrcTxInfo, x)),
            x_recv: u64_at(offset_of!(TfrcTxInfo, x_recv)),
            x_calc: u32_at(offset_of!(TfrcTxInfo, x_calc)),
            rtt: u32_at(offset_of!(TfrcTxInfo, rtt)),
            p: u32_at(offset_of!(TfrcTxInfo, p)),
            rto: u32_at(offset_of!(TfrcTxInfo, rto)),
            ipi: u32_at(offset_of!(TfrcTxInfo, ipi)),
        }
    }

    /// In the userspace CCID3's units (bytes/s, a fraction, durations),
    /// with X_calc (bytes/s) and the no-feedback timeout.
    fn state(&self) -> (CcidState, f64, Duration) {
        let us = |v: u32| Duration::from_micros(u64::from(v));
        let state = CcidState::Ccid3 {
            x: self.x as f64 / 64.0,
            x_recv: self.x_recv as f64 / 64.0,
            p: f64::from(self.p) / 1e6,
            // 0 until the first RTT sample.
            rtt: (self.rtt > 0).then(|| us(self.rtt)),
            t_ipi: us(self.ipi),
        };
        (state, f64::from(self.x_calc), us(self.rto))
    }
}

/// A kernel DCCP flow's reading: the datagram counters, the CCID the
/// kernel sends with and (for senders) its state now.
pub(super) fn read(socket: &FlowSocket, role: FlowRole, shared: &FlowShared) -> Reading {
    let fd = socket.as_fd();
    let bytes = shared.bytes.load(Ordering::Relaxed);
    let udp = shared.udp.read();
    let ccid = SockRef::from(socket).dccp_tx_ccid().map_or(0, |c| c as u8);
    let sender = role == FlowRole::Sender;
    let (state, x_calc, t_rto) = if sender {
        ccid_state(fd, ccid)
    } else {
        (None, None, None)
    };
    let stats = if sender {
        Stats {
            data_sent: udp.packets,
            data_bytes_sent: bytes,
            ..Stats::default()
        }
    } else {
        Stats {
            data_received: udp.packets,
            data_bytes_received: bytes,
            ..Stats::default()
        }
    };
    Reading {
        bytes,
        udp: Some(udp),
        transport: Some(TransportCounters::Dccp(DccpCounters {
            stack: DccpStack::Kernel,
            ccid,
            state,
            x_calc,
            t_rto,
            stats,
            not_dccp: 0,
            // The kernel's CCIDs have no application-rate policy.
            app_rate: None,
        })),
        ..Reading::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `serve` over TCP on loopback (accept and a first message behave as
    /// DCCP's; this host has no DCCP): more silent connections than it
    /// keeps places for, then the flow's own, which must attach at once
    /// and get its answer padded to -l.
    #[test]
    fn silent_connections_do_not_keep_a_flow_from_attaching() {
        use std::io::Write;
        use std::net::TcpStream;
        use xferlab_core::proto::wire::{Attach, ConnKind, Preamble};
        let l = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        l.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        l.listen(64).unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap().as_socket().unwrap();
        let (_end, end) = crate::sys::end::session_end().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let token = [7u8; xferlab_core::proto::wire::TOKEN_LEN];
        let wait = AttachWait {
            token,
            peer: SocketAddr::from(([127, 0, 0, 1], 1)),
            any_peer: false,
            tx,
            end,
            deadline: clock::now() + Duration::from_secs(20),
        };
        let knobs = Knobs {
            size: 1400,
            ..Knobs::default()
        };
        std::thread::spawn(move || serve(&l, &knobs, 1, &wait));
        let silent: Vec<TcpStream> = (0..2 + EXTRA_PENDING)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        let mut wrong = TcpStream::connect(addr).unwrap();
        wrong.write_all(b"not an attach record").unwrap();
        let mut c = TcpStream::connect(addr).unwrap();
        let mut hello = Preamble::new(ConnKind::Data).encode().to_vec();
        hello.extend_from_slice(&Attach { token, flow: 0 }.encode());
        c.write_all(&hello).unwrap();
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Wake::Attach(0, _)) => {}
            Ok(_) => panic!("another wake than flow 0's attach"),
            Err(e) => panic!("flow 0 did not attach within 5 s beside silent connections: {e}"),
        }
        // The answer, padded to the flow's datagram size (-l 1400).
        let mut reply = [0xffu8; 1400];
        c.read_exact(&mut reply).unwrap();
        assert_eq!(reply[0], AttachReply::Ok as u8);
        assert!(reply[1..].iter().all(|&b| b == 0));
        drop(silent);
    }

    /// The layout the kernel copies out (include/uapi/linux/tfrc.h: two
    /// u64 then five u32, 36 bytes, padded to 40).
    #[test]
    fn tfrc_tx_info_has_the_kernels_layout_and_units() {
        assert_eq!(size_of::<TfrcTxInfo>(), 40);
        let info = TfrcTxInfo {
            x: 125_000 * 64,
            x_recv: 62_500 * 64,
            x_calc: 250_000,
            rtt: 94_000,
            p: 2_000,
            rto: 376_000,
            ipi: 11_200,
        };
        let (state, x_calc, t_rto) = info.state();
        assert_eq!(
            state,
            CcidState::Ccid3 {
                x: 125_000.0,
                x_recv: 62_500.0,
                p: 0.002,
                rtt: Some(Duration::from_millis(94)),
                t_ipi: Duration::from_micros(11_200),
            }
        );
        assert_eq!((x_calc, t_rto), (250_000.0, Duration::from_millis(376)));
        let fresh = TfrcTxInfo::default().state().0;
        assert!(matches!(fresh, CcidState::Ccid3 { rtt: None, .. }));
    }
}
