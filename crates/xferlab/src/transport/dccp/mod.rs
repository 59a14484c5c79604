//! DCCP's driver, picked with `--dccp`: xferlab's own DCCP (the core's
//! [`xferlab_core::dccp`]) over UDP encapsulation (RFC 6773) or raw IP
//! ([`raw`], `--dccp-carrier ip`), or with `--dccp-stack kernel` the
//! kernel's ([`kernel`]). A userspace flow is a
//! UDP socket attached to its test like any datagram flow's; its thread
//! then runs one DCCP connection over it ([`path`]): the test's client
//! end connects, the server's listens. Every interval it reads the
//! sending CCID's state and the stack's counters the thread published
//! ([`DccpShared`]).

/// Application datagrams that may wait for the CCID, in either stack.
/// Enough that a window opening by a batch finds a batch queued; more only
/// adds queueing delay (DCCP drops nothing the application queued, it
/// refuses the offer).
const QUEUE_DATAGRAMS: usize = 64;

pub mod args;
mod error;
mod kernel;
mod path;
mod raw;
mod tx;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use socket2::{Domain, Socket, Type};
use xferlab_core::dccp::ccid::{CcidState, EpisodeState, EventCounts};
use xferlab_core::dccp::Stats;
use xferlab_core::interval::Reading;
use xferlab_core::result::FlowRole;
use xferlab_core::spec::{Knobs, RxStamps, TestSpec};
use xferlab_core::transport::dccp::{DccpCarrier, DccpCounters};
use xferlab_core::transport::TransportCounters;

use super::flow::{FlowOutcome, FlowShared};
use super::{Flag, FlowJob, FlowSocket, OwnShared, SetupError, Transport, TransportIo};
use crate::transport::attach::AttachWait;
pub use error::DccpError;

pub struct Dccp;

impl TransportIo for Dccp {
    fn transport(&self) -> Transport {
        Transport::Dccp
    }

    fn flag(&self) -> Option<Flag> {
        Some(Flag {
            long: "dccp",
            short: None,
            help: "DCCP (RFC 4340) instead of TCP: xferlab's own stack over UDP (RFC 6773), or the kernel's (--dccp-stack kernel), CCID 2 or 3 (--ccid); -b is the application's offer, the CCID may send less. Every interval shows the CCID's state.",
        })
    }

    fn socket(&self, domain: Domain) -> Result<Socket, SetupError> {
        Socket::new(domain, Type::DGRAM, None).map_err(|err| SetupError::Socket {
            transport: "DCCP",
            err,
        })
    }

    fn check(&self, knobs: &Knobs) -> Result<(), SetupError> {
        kernel::check(knobs)?;
        // The raw IP carrier is the client's own only when its DCCP is
        // xferlab's (a kernel client's is the kernel's IP).
        if knobs.own.dccp.is_some_and(|d| {
            d.carrier == DccpCarrier::Ip
                && d.stack == xferlab_core::transport::dccp::DccpStack::Xferlab
        }) {
            raw::socket(Domain::IPV4).map(drop)?;
        }
        Ok(())
    }

    fn attach_in_band(
        &self,
        spec: &TestSpec,
        sock: &UdpSocket,
        hello: &[u8],
        timeout: Duration,
    ) -> Option<Result<(), SetupError>> {
        spec.knobs
            .own
            .dccp
            .is_some_and(|d| d.attach_in_band())
            .then(|| path::attach_in_band(spec, sock, hello, timeout).map_err(Into::into))
    }

    fn connect_datagram(
        &self,
        spec: &TestSpec,
        to: SocketAddr,
        timeout: Duration,
    ) -> Option<Result<UdpSocket, SetupError>> {
        kernel::wanted(&spec.knobs).then(|| kernel::connect(spec, to, timeout).map_err(Into::into))
    }

    fn listen_flows(
        &self,
        spec: &TestSpec,
        local: IpAddr,
        wait: &AttachWait,
    ) -> Option<Result<Vec<u16>, SetupError>> {
        if spec.knobs.own.dccp.is_some_and(|d| d.accept_in_band()) {
            return Some(path::listen_in_band(spec, local, wait.clone()).map_err(Into::into));
        }
        kernel::serves(&spec.knobs)
            .then(|| kernel::listen(spec, local, wait.clone()).map_err(Into::into))
    }

    /// xferlab's DCCP over UDP sizes the flow's socket for its path here,
    /// in either role (both ends send: data one way, acknowledgements the
    /// other), so the result records the buffers the path runs with. Over
    /// raw IP the path prepares its raw socket itself; kernel DCCP keeps
    /// the system's defaults (its queues are part of the protocol
    /// studied) and stamps arrivals itself.
    fn prepare_flow(&self, sock: &UdpSocket, _role: FlowRole, knobs: &Knobs) -> Option<RxStamps> {
        let over_udp = knobs.own.dccp.unwrap_or_default().carrier == DccpCarrier::Udp;
        if over_udp && !kernel::is_kernel(sock) {
            path::prepare_udp(sock, knobs);
        }
        None
    }

    fn own_shared(&self, _knobs: &Knobs) -> OwnShared {
        OwnShared::Dccp(DccpShared::default())
    }

    fn read(&self, socket: &FlowSocket, role: FlowRole, shared: &FlowShared) -> Reading {
        if kernel::is_kernel(socket) {
            return kernel::read(socket, role, shared);
        }
        Reading {
            bytes: shared.bytes.load(Ordering::Relaxed),
            udp: Some(shared.udp.read()),
            transport: match &shared.own {
                OwnShared::Dccp(d) => Some(TransportCounters::Dccp(d.read())),
                // Another transport's slot (never handed to a DCCP flow).
                _ => None,
            },
            ..Reading::default()
        }
    }

    fn run(&self, job: FlowJob<'_>) -> FlowOutcome {
        if kernel::is_kernel(job.socket) {
            return kernel::run(job);
        }
        path::run(job)
    }
}

/// What a DCCP flow thread publishes (relaxed stores, about once a
/// millisecond and at its end) for the interval reader. The CCID's fields
/// may come from two neighbouring publications; they are gauges.
#[derive(Debug, Default)]
pub struct DccpShared {
    ccid: AtomicU64,
    /// 0: no state yet; 2, 3 or 248: which fields below mean what.
    kind: AtomicU64,
    /// CCID2: cwnd, pipe, ssthresh. CCID3: X, X_recv, p as f64 bits.
    /// SafeUDP: offered, bound, p as f64 bits.
    a: AtomicU64,
    b: AtomicU64,
    c: AtomicU64,
    /// u64::MAX: no RTT estimate.
    rtt_ns: AtomicU64,
    t_ipi_ns: AtomicU64,
    stats: [AtomicU64; 11],
    not_dccp: AtomicU64,
    /// SafeUDP: host losses, network losses, ECN marks, the CCID's own
    /// drop count; the episode states and enforcement packed
    /// ([`pack_flags`]); the event counts; the application's rate (f64
    /// bits, u64::MAX for none).
    safeudp: [AtomicU64; 5],
    events: [AtomicU64; 8],
    app_rate: AtomicU64,
}

const NO_RATE: u64 = u64::MAX;

fn episode_bits(e: EpisodeState) -> u64 {
    match e {
        EpisodeState::Clear => 0,
        EpisodeState::Transient => 1,
        EpisodeState::Persistent => 2,
    }
}

fn episode_of(bits: u64) -> EpisodeState {
    match bits & 3 {
        1 => EpisodeState::Transient,
        2 => EpisodeState::Persistent,
        _ => EpisodeState::Clear,
    }
}

/// SafeUDP's two episode states and whether it enforces, in one word.
fn pack_flags(network: EpisodeState, end_host: EpisodeState, enforcing: bool) -> u64 {
    episode_bits(network) | episode_bits(end_host) << 2 | u64::from(enforcing) << 4
}

const NO_RTT: u64 = u64::MAX;

impl DccpShared {
    /// `app_rate`: the rate a SafeUDP sender's --on-congestion policy
    /// offers, bytes/s.
    pub(crate) fn publish(
        &self,
        ccid: u8,
        state: Option<CcidState>,
        s: &Stats,
        not_dccp: u64,
        app_rate: Option<f64>,
    ) {
        let r = Ordering::Relaxed;
        self.ccid.store(u64::from(ccid), r);
        self.app_rate
            .store(app_rate.map_or(NO_RATE, f64::to_bits), r);
        let rtt_ns = |rtt: Option<Duration>| rtt.map_or(NO_RTT, |d| d.as_nanos() as u64);
        match state {
            None => self.kind.store(0, r),
            Some(CcidState::SafeUdp {
                offered,
                bound,
                p,
                rtt,
                enforcing,
                host_losses,
                network_losses,
                ecn_marks,
                dropped_by_ccid,
                network,
                end_host,
                events,
            }) => {
                self.a.store(offered.to_bits(), r);
                self.b.store(bound.to_bits(), r);
                self.c.store(p.to_bits(), r);
                self.rtt_ns.store(rtt_ns(rtt), r);
                let words = [
                    host_losses,
                    network_losses,
                    ecn_marks,
                    dropped_by_ccid,
                    pack_flags(network, end_host, enforcing),
                ];
                for (slot, v) in self.safeudp.iter().zip(words) {
                    slot.store(v, r);
                }
                for (slot, v) in self.events.iter().zip(events.to_array()) {
                    slot.store(v, r);
                }
                self.kind
                    .store(u64::from(xferlab_core::dccp::ccid::safeudp::CCID), r);
            }
            Some(CcidState::Ccid2 {
                cwnd,
                pipe,
                ssthresh,
                rtt,
            }) => {
                self.a.store(cwnd, r);
                self.b.store(pipe, r);
                self.c.store(ssthresh, r);
                self.rtt_ns.store(rtt_ns(rtt), r);
                self.kind.store(2, r);
            }
            Some(CcidState::Ccid3 {
                x,
                x_recv,
                p,
                rtt,
                t_ipi,
            }) => {
                self.a.store(x.to_bits(), r);
                self.b.store(x_recv.to_bits(), r);
                self.c.store(p.to_bits(), r);
                self.rtt_ns.store(rtt_ns(rtt), r);
                self.t_ipi_ns.store(t_ipi.as_nanos() as u64, r);
                self.kind.store(3, r);
            }
        }
        let values = [
            s.data_sent,
            s.data_bytes_sent,
            s.data_received,
            s.data_bytes_received,
            s.acks_sent,
            s.syncs_sent,
            s.dropped_checksum,
            s.dropped_invalid,
            s.queue_full,
            s.ecn_ce_received,
            s.dropped_by_ccid,
        ];
        for (slot, v) in self.stats.iter().zip(values) {
            slot.store(v, r);
        }
        self.not_dccp.store(not_dccp, r);
    }

    fn read(&self) -> DccpCounters {
        let r = Ordering::Relaxed;
        let rtt = match self.rtt_ns.load(r) {
            NO_RTT => None,
            ns => Some(Duration::from_nanos(ns)),
        };
        let (a, b, c) = (self.a.load(r), self.b.load(r), self.c.load(r));
        let state = match self.kind.load(r) {
            2 => Some(CcidState::Ccid2 {
                cwnd: a,
                pipe: b,
                ssthresh: c,
                rtt,
            }),
            3 => Some(CcidState::Ccid3 {
                x: f64::from_bits(a),
                x_recv: f64::from_bits(b),
                p: f64::from_bits(c),
                rtt,
                t_ipi: Duration::from_nanos(self.t_ipi_ns.load(r)),
            }),
            k if k == u64::from(xferlab_core::dccp::ccid::safeudp::CCID) => {
                let w: [u64; 5] = std::array::from_fn(|i| self.safeudp[i].load(r));
                Some(CcidState::SafeUdp {
                    offered: f64::from_bits(a),
                    bound: f64::from_bits(b),
                    p: f64::from_bits(c),
                    rtt,
                    enforcing: w[4] >> 4 & 1 == 1,
                    host_losses: w[0],
                    network_losses: w[1],
                    ecn_marks: w[2],
                    dropped_by_ccid: w[3],
                    network: episode_of(w[4]),
                    end_host: episode_of(w[4] >> 2),
                    events: EventCounts::from_array(std::array::from_fn(|i| {
                        self.events[i].load(r)
                    })),
                })
            }
            _ => None,
        };
        let v: [u64; 11] = std::array::from_fn(|i| self.stats[i].load(r));
        DccpCounters {
            ccid: self.ccid.load(r) as u8,
            stack: xferlab_core::transport::dccp::DccpStack::Xferlab,
            x_calc: None,
            t_rto: None,
            state,
            stats: Stats {
                data_sent: v[0],
                data_bytes_sent: v[1],
                data_received: v[2],
                data_bytes_received: v[3],
                acks_sent: v[4],
                syncs_sent: v[5],
                dropped_checksum: v[6],
                dropped_invalid: v[7],
                queue_full: v[8],
                ecn_ce_received: v[9],
                dropped_by_ccid: v[10],
            },
            not_dccp: self.not_dccp.load(r),
            app_rate: match self.app_rate.load(r) {
                NO_RATE => None,
                bits => Some(f64::from_bits(bits)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_state_reads_back() {
        let sh = DccpShared::default();
        assert_eq!(sh.read().state, None);
        let st = CcidState::Ccid3 {
            x: 1.5e6,
            x_recv: 1e6,
            p: 0.002,
            rtt: Some(Duration::from_micros(94_000)),
            t_ipi: Duration::from_micros(933),
        };
        let stats = Stats {
            data_sent: 7,
            ecn_ce_received: 2,
            ..Stats::default()
        };
        sh.publish(3, Some(st), &stats, 4, None);
        let c = sh.read();
        assert_eq!(
            (c.ccid, c.state, c.stats, c.not_dccp, c.app_rate),
            (3, Some(st), stats, 4, None)
        );
        let su = CcidState::SafeUdp {
            offered: 1e6,
            bound: f64::INFINITY,
            p: 0.01,
            rtt: None,
            enforcing: true,
            host_losses: 3,
            network_losses: 5,
            ecn_marks: 1,
            dropped_by_ccid: 9,
            network: EpisodeState::Persistent,
            end_host: EpisodeState::Transient,
            events: EventCounts {
                onset_end_host: 2,
                released: 7,
                ..EventCounts::default()
            },
        };
        let stats = Stats {
            dropped_by_ccid: 9,
            ..stats
        };
        sh.publish(248, Some(su), &stats, 0, Some(5e5));
        let c = sh.read();
        assert_eq!(
            (c.ccid, c.state, c.stats, c.app_rate),
            (248, Some(su), stats, Some(5e5))
        );
    }
}
