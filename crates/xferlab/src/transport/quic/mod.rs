//! QUIC's driver, picked with `--quic`: each flow is a UDP socket
//! attached to its test like every datagram flow's (so the session's
//! authentication, budgets and limits apply unchanged, and the server's
//! flow socket is connected to its client); the flow's thread then runs
//! one QUIC connection over it ([`flow`]) on quinn-proto, sans-IO, in
//! xferlab's own loop ([`driver`]): the test's client end connects, the
//! server end accepts. Without `-b` the connection moves bytes on
//! `--streams` unidirectional streams; with `-b` it sends DATAGRAM frames
//! (RFC 9221) at that rate carrying xferlab's datagram header. Every
//! interval reads the connection's state the thread published
//! ([`QuicShared`]).

pub mod args;
pub mod driver;
mod error;
mod flow;
pub mod perf;
pub mod tls;

/// rr's QUIC flows word a refused certificate as the stream flows do.
pub(crate) use flow::why_untrusted;

pub use error::QuicError;

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use socket2::{Domain, Socket, Type};
use xferlab_core::interval::Reading;
use xferlab_core::knobs::CONGESTION_CONTROLLERS;
use xferlab_core::result::FlowRole;
use xferlab_core::spec::{Knobs, RxStamps};
use xferlab_core::transport::quic::QuicCounters;
use xferlab_core::transport::TransportCounters;

use super::datagram::{set_int_opt, size_receive_buffer};
use super::flow::{FlowOutcome, FlowShared};
use super::{Flag, FlowJob, FlowSocket, OwnShared, SetupError, Transport, TransportIo};
pub(crate) use flow::{controller, DEFAULT_UDP_PAYLOAD, IDLE_TIMEOUT};

pub struct Quic;

impl TransportIo for Quic {
    fn transport(&self) -> Transport {
        Transport::Quic
    }

    fn flag(&self) -> Option<Flag> {
        Some(Flag {
            long: "quic",
            short: None,
            help: "QUIC (RFC 9000, quinn-proto) instead of TCP: one connection per flow (-P), --streams N streams on each, -C cubic|newreno|bbr; with -b, unreliable DATAGRAM frames (RFC 9221) at that rate instead of streams. TLS 1.3 with a self-signed certificate unless --quic-cert/--quic-key; the client verifies only with --quic-ca. Every interval shows the connection's RTT, cwnd, losses and pacing.",
        })
    }

    fn socket(&self, domain: Domain) -> Result<Socket, SetupError> {
        Socket::new(domain, Type::DGRAM, None).map_err(|err| SetupError::Socket {
            transport: "QUIC",
            err,
        })
    }

    /// The certificate files are read before the test, so a bad one is
    /// one line up front rather than a failed handshake.
    fn check(&self, _knobs: &Knobs) -> Result<(), SetupError> {
        let files = tls::files();
        if files.cert.is_some() || files.key.is_some() {
            tls::server(&files)?;
        }
        tls::client(&files)?;
        Ok(())
    }

    /// Both ends send (data one way, acknowledgements the other): the
    /// socket's receive buffer as UDP's receivers size it (4 MiB unless
    /// -w, `datagram::size_receive_buffer` has the measurement), its send
    /// buffer the same, so a GSO train of the connection's window finds
    /// room. The connection's receive windows are then sized from what
    /// the kernel granted ([`flow`]).
    fn prepare_flow(
        &self,
        sock: &std::net::UdpSocket,
        _role: FlowRole,
        knobs: &Knobs,
    ) -> Option<RxStamps> {
        size_receive_buffer(sock, knobs);
        if knobs.buffer.is_none() {
            let fd = sock.as_fd();
            let size = flow::SOCKET_BUFFER;
            if !set_int_opt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, size) {
                set_int_opt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, size);
            }
        }
        None
    }

    /// A flow with -b sends DATAGRAM frames: its `udp` counters are read
    /// from the first interval on, so its totals carry them.
    fn own_shared(&self, knobs: &Knobs) -> OwnShared {
        let q = QuicShared::default();
        q.set_datagrams(knobs.rate.is_some_and(|r| r > 0));
        OwnShared::Quic(q)
    }

    fn read(&self, _socket: &FlowSocket, _role: FlowRole, shared: &FlowShared) -> Reading {
        let (udp, transport) = match &shared.own {
            OwnShared::Quic(q) => (
                q.datagrams
                    .load(Ordering::Relaxed)
                    .then(|| shared.udp.read()),
                Some(TransportCounters::Quic(q.read())),
            ),
            _ => (None, None),
        };
        Reading {
            bytes: shared.bytes.load(Ordering::Relaxed),
            udp,
            transport,
            ..Reading::default()
        }
    }

    fn run(&self, job: FlowJob<'_>) -> FlowOutcome {
        flow::run(job)
    }
}

/// What a QUIC flow thread publishes (relaxed stores, about once a
/// millisecond and at its end) for the interval reader; the gauges may
/// come from two neighbouring publications.
#[derive(Debug, Default)]
pub struct QuicShared {
    /// Whether the flow sends DATAGRAM frames (its `udp` counters mean
    /// something) rather than streams.
    datagrams: AtomicBool,
    established: AtomicBool,
    /// Index into [`CONGESTION_CONTROLLERS`].
    cc: AtomicU64,
    rtt_ns: AtomicU64,
    min_rtt_ns: AtomicU64,
    cwnd: AtomicU64,
    /// u64::MAX: the controller has no pacing rate of its own.
    pacing: AtomicU64,
    mtu: AtomicU64,
    counts: [AtomicU64; COUNTS],
}

const COUNTS: usize = 17;
const NO_PACING: u64 = u64::MAX;

impl QuicShared {
    pub(crate) fn set_datagrams(&self, on: bool) {
        self.datagrams.store(on, Ordering::Relaxed);
    }

    pub(crate) fn publish(&self, c: &QuicCounters) {
        let r = Ordering::Relaxed;
        self.established.store(c.established, r);
        let cc = CONGESTION_CONTROLLERS
            .iter()
            .position(|n| *n == c.cc)
            .unwrap_or(0);
        self.cc.store(cc as u64, r);
        self.rtt_ns.store(c.rtt.as_nanos() as u64, r);
        self.min_rtt_ns.store(c.min_rtt.as_nanos() as u64, r);
        self.cwnd.store(c.cwnd, r);
        self.pacing.store(c.pacing_rate.unwrap_or(NO_PACING), r);
        self.mtu.store(u64::from(c.mtu), r);
        let v: [u64; COUNTS] = [
            c.sent_packets,
            c.lost_packets,
            c.lost_bytes,
            c.congestion_events,
            c.udp_tx_datagrams,
            c.udp_tx_bytes,
            c.udp_rx_datagrams,
            c.udp_rx_bytes,
            c.stream_frames_tx,
            c.stream_frames_rx,
            c.datagram_frames_tx,
            c.datagram_frames_rx,
            c.datagrams_blocked,
            c.datagrams_too_large,
            c.stream_window,
            c.conn_window,
            c.streams,
        ];
        for (slot, v) in self.counts.iter().zip(v) {
            slot.store(v, r);
        }
    }

    pub(crate) fn read(&self) -> QuicCounters {
        let r = Ordering::Relaxed;
        let v: [u64; COUNTS] = std::array::from_fn(|i| self.counts[i].load(r));
        QuicCounters {
            cc: CONGESTION_CONTROLLERS
                [(self.cc.load(r) as usize).min(CONGESTION_CONTROLLERS.len() - 1)],
            established: self.established.load(r),
            rtt: Duration::from_nanos(self.rtt_ns.load(r)),
            min_rtt: Duration::from_nanos(self.min_rtt_ns.load(r)),
            cwnd: self.cwnd.load(r),
            pacing_rate: match self.pacing.load(r) {
                NO_PACING => None,
                p => Some(p),
            },
            mtu: self.mtu.load(r) as u16,
            sent_packets: v[0],
            lost_packets: v[1],
            lost_bytes: v[2],
            congestion_events: v[3],
            udp_tx_datagrams: v[4],
            udp_tx_bytes: v[5],
            udp_rx_datagrams: v[6],
            udp_rx_bytes: v[7],
            stream_frames_tx: v[8],
            stream_frames_rx: v[9],
            datagram_frames_tx: v[10],
            datagram_frames_rx: v[11],
            datagrams_blocked: v[12],
            datagrams_too_large: v[13],
            stream_window: v[14],
            conn_window: v[15],
            streams: v[16],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_counters_read_back() {
        let sh = QuicShared::default();
        let c = QuicCounters {
            cc: "bbr",
            established: true,
            rtt: Duration::from_micros(70),
            min_rtt: Duration::from_micros(20),
            cwnd: 123_456,
            pacing_rate: Some(9_000_000),
            mtu: 1452,
            sent_packets: 1,
            lost_packets: 2,
            lost_bytes: 3,
            congestion_events: 4,
            udp_tx_datagrams: 5,
            udp_tx_bytes: 6,
            udp_rx_datagrams: 7,
            udp_rx_bytes: 8,
            stream_frames_tx: 9,
            stream_frames_rx: 10,
            datagram_frames_tx: 11,
            datagram_frames_rx: 12,
            datagrams_blocked: 13,
            datagrams_too_large: 14,
            stream_window: 15,
            conn_window: 16,
            streams: 17,
        };
        sh.publish(&c);
        assert_eq!(sh.read(), c);
        sh.publish(&QuicCounters {
            cc: "cubic",
            pacing_rate: None,
            ..c
        });
        assert_eq!((sh.read().cc, sh.read().pacing_rate), ("cubic", None));
    }
}
