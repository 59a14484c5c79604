//! Between iperf3's messages and xferlab's own model: a client's
//! [`Params`] become a [`TestSpec`] (server side) and back (client side);
//! a [`SideReport`] becomes the totals iperf3 exchanges ([`Results`]), and
//! a stock peer's [`Results`] become a totals-only [`SideReport`], so the
//! result of an interop test is an ordinary [`crate::result::TestResult`]
//! that every exporter prints.

use crate::result::{
    sum_intervals, CpuUsage, Endpoint, FlowEnd, FlowReport, FlowRole, FlowTotal, HostInfo,
    PatternReport, SideReport, SocketSettings, TcpTotals, UdpSample, UdpTotal,
};
use crate::spec::{
    limits, Affinity, Direction, FlowDirection, FlowPlan, Knobs, Limit, RecvMode, SendMode,
    TestSpec, Transport,
};
use crate::transport::{Carrier, Iperf3Name};

use super::params::{self, Params, Protocol, StreamInfo};
use super::results::{Omitted, Results, StreamResult};
use super::{i_errno, stream_id, stream_index};

/// iperf3's default block size for TCP (`-l`).
pub const DEFAULT_TCP_LEN: u64 = 128 * 1024;
/// What an iperf3 client sends for UDP without `-l` off loopback.
pub const DEFAULT_UDP_LEN: u64 = 1460;
/// Datagrams per system call when xferlab serves an iperf3 UDP test.
pub const SERVER_UDP_BATCH: u32 = 32;

/// Why a server refuses an iperf3 client's parameters: the code the
/// client prints, and our wording for the server's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub i_errno: i32,
    pub reason: String,
}

fn refuse(i_errno: i32, reason: impl Into<String>) -> Refusal {
    Refusal {
        i_errno,
        reason: reason.into(),
    }
}

/// The test an iperf3 client asks for, as xferlab runs it, or why not.
/// Only the client ends an iperf3 test, so `Limit::Duration` is what the
/// client announced; the server uses it for its watchdog and intervals.
pub fn spec_from_params(p: &Params) -> Result<TestSpec, Refusal> {
    if p.protocol == Protocol::Sctp {
        return Err(refuse(i_errno::IEUNIMP, "SCTP (--sctp) is not served"));
    }
    let name = Iperf3Name {
        udp: p.protocol == Protocol::Udp,
        mptcp: p.mptcp,
    };
    let transport = Transport::for_iperf3(name).ok_or_else(|| {
        refuse(
            i_errno::IEUNIMP,
            format!(
                "{}{} is not served",
                if name.udp { "UDP" } else { "TCP" },
                if name.mptcp { " with MPTCP (-m)" } else { "" }
            ),
        )
    })?;
    let udp = transport.carrier() == Carrier::Datagrams;
    let direction = match (p.reverse, p.bidirectional) {
        (true, true) => {
            return Err(refuse(
                i_errno::IEREVERSEBIDIR,
                "both reverse and bidirectional",
            ))
        }
        (true, false) => Direction::Reverse,
        (false, true) => Direction::Bidir,
        (false, false) => Direction::Forward,
    };
    let parallel = u32::try_from(p.parallel)
        .ok()
        .filter(|n| (1..=limits::MAX_PARALLEL).contains(n))
        .ok_or_else(|| {
            refuse(
                i_errno::IENUMSTREAMS,
                format!(
                    "{} parallel streams (1..={})",
                    p.parallel,
                    limits::MAX_PARALLEL
                ),
            )
        })?;
    let default_len = if udp {
        DEFAULT_UDP_LEN
    } else {
        DEFAULT_TCP_LEN
    };
    let size = match p.len {
        None => default_len,
        Some(l) => {
            let (min, max, code) = if udp {
                (
                    limits::MIN_DATAGRAM,
                    limits::MAX_DATAGRAM,
                    i_errno::IEUDPBLOCKSIZE,
                )
            } else {
                (1, limits::MAX_WRITE_SIZE, i_errno::IEBLOCKSIZE)
            };
            u64::try_from(l)
                .ok()
                .filter(|l| (min..=max).contains(l))
                .ok_or_else(|| refuse(code, format!("block size {l} ({min}..={max})")))?
        }
    };
    let limit = if p.num > 0 {
        Limit::Bytes { bytes: p.num }
    } else if p.blockcount > 0 {
        Limit::Bytes {
            bytes: p.blockcount.saturating_mul(size),
        }
    } else if p.time > 0 && (p.time as f64) <= limits::MAX_DURATION_S {
        Limit::Duration {
            seconds: p.time as f64,
        }
    } else {
        return Err(refuse(
            i_errno::IEDURATION,
            format!(
                "test time {} s: give -t between 1 and {} s, -n or -k",
                p.time,
                limits::MAX_DURATION_S
            ),
        ));
    };
    let omit = u32::try_from(p.omit)
        .ok()
        .map(f64::from)
        .filter(|o| *o <= limits::MAX_OMIT_S)
        .ok_or_else(|| refuse(i_errno::IEOMIT, format!("omit {} s", p.omit)))?;
    let buffer = match p.window {
        None | Some(0) => None,
        Some(w) => Some(
            u64::try_from(w)
                .ok()
                .filter(|w| *w <= limits::MAX_SOCKET_BUFFER)
                .ok_or_else(|| refuse(i_errno::IEBUFSIZE, format!("socket buffer {w}")))?,
        ),
    };
    let mss = match p.mss {
        None | Some(0) => None,
        Some(m) => Some(
            u32::try_from(m)
                .ok()
                .filter(|m| (88..=65_495).contains(m))
                .ok_or_else(|| refuse(i_errno::IEMSS, format!("MSS {m}")))?,
        ),
    };
    let tos = match p.tos {
        None => None,
        Some(t) => Some(
            u8::try_from(t)
                .map_err(|_| refuse(i_errno::IEINITTEST, format!("TOS {t} is not a byte")))?,
        ),
    };
    // iperf3 paces UDP (and, at application level, TCP) to `bandwidth`
    // per stream; for TCP the kernel's pacing cap does the same job, and
    // `fqrate` asks for exactly that cap.
    let (rate, max_pacing_rate) = if udp {
        (p.bandwidth.filter(|b| *b > 0), None)
    } else {
        let bits = p
            .fqrate
            .filter(|r| *r > 0)
            .or(p.bandwidth.filter(|b| *b > 0));
        (None, bits.map(|b| (b / 8).max(1)))
    };
    let spec = TestSpec {
        transport,
        direction,
        parallel,
        limit,
        omit_s: omit,
        interval_s: 1.0,
        knobs: Knobs {
            size,
            buffer,
            congestion: p.congestion.clone().filter(|c| !c.is_empty()),
            nodelay: p.nodelay && !udp,
            mss: mss.filter(|_| !udp),
            tos,
            max_pacing_rate,
            recv_mode: if p.skip_rx_copy {
                RecvMode::Discard
            } else {
                RecvMode::Copy
            },
            // iperf3's -Z is sendfile (TCP only).
            send_mode: if p.zerocopy != 0 && !udp {
                SendMode::Sendfile
            } else {
                SendMode::Copy
            },
            read_size: None,
            // An iperf3 client always sends its block length: a sender
            // here writes what the stock server would.
            write_size: (!udp).then_some(size),
            rcvlowat: None,
            read_fill: None,
            rx_stamps: None,
            rate,
            batch: if udp { SERVER_UDP_BATCH } else { 1 },
            gso: false,
            dont_fragment: p.dont_fragment,
            own: Default::default(),
        },
        title: p.title.clone().filter(|t| t.len() <= limits::MAX_TITLE),
        // `-A n,m`: the client asks for the server's CPU (negative: unset).
        affinity: Affinity {
            client: None,
            server: p.server_affinity.and_then(|c| u32::try_from(c).ok()),
            ..Affinity::default()
        },
        ..TestSpec::default_stream()
    };
    spec.validate()
        .map_err(|e| refuse(i_errno::IEINITTEST, e.to_string()))?;
    Ok(spec)
}

/// A test that an iperf3 server cannot be asked for.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Inexpressible {
    #[error("{flag} must be whole seconds for an iperf3 server (got {got})")]
    FractionalSeconds { flag: &'static str, got: f64 },
    #[error("iperf3 servers have no {0} tests; they speak TCP and UDP")]
    Transport(&'static str),
    #[error("an iperf3 test needs -t/--time or -n/--bytes")]
    Open,
}

/// The parameters that ask an iperf3 server for `spec`. Fails for what
/// iperf3 cannot express (fractions of a second, a byte limit per
/// direction that iperf3 would count differently is fine).
pub fn params_from_spec(spec: &TestSpec, get_server_output: bool) -> Result<Params, Inexpressible> {
    let whole = |got: f64, flag: &'static str| {
        if got.fract() != 0.0 {
            Err(Inexpressible::FractionalSeconds { flag, got })
        } else {
            Ok(got as i64)
        }
    };
    let (time, num) = match spec.limit {
        Limit::Duration { seconds } => (whole(seconds, "-t/--time")?, 0),
        Limit::Bytes { bytes } => (0, bytes),
        Limit::Open => return Err(Inexpressible::Open),
    };
    let k = &spec.knobs;
    let name = spec
        .transport
        .model()
        .iperf3()
        .ok_or(Inexpressible::Transport(spec.transport.label()))?;
    let udp = name.udp;
    Ok(Params {
        protocol: if udp { Protocol::Udp } else { Protocol::Tcp },
        mptcp: name.mptcp,
        omit: whole(spec.omit_s, "-O/--omit")?,
        time,
        num,
        blockcount: 0,
        parallel: i64::from(spec.parallel),
        len: Some(k.size as i64),
        bandwidth: if udp { k.rate } else { None },
        reverse: spec.direction == Direction::Reverse,
        bidirectional: spec.direction == Direction::Bidir,
        nodelay: k.nodelay,
        mss: k.mss.map(i64::from),
        window: k.buffer.map(|b| b as i64),
        fqrate: k.max_pacing_rate.map(|r| r.saturating_mul(8)),
        tos: k.tos.map(i64::from),
        title: spec.title.clone(),
        congestion: k.congestion.clone(),
        get_server_output,
        // 64-bit sequence numbers: no wrap on long fast tests; every
        // iperf3 since 3.1 honours it.
        udp_counters_64bit: udp,
        dont_fragment: k.dont_fragment,
        skip_rx_copy: k.recv_mode == RecvMode::Discard,
        zerocopy: i64::from(k.send_mode == SendMode::Sendfile),
        server_affinity: spec.affinity.server.map(i64::from),
        ..Params::default()
    })
}

/// The plan for the stream the server just attached, from `plans` =
/// [`TestSpec::flows`] (`None`: the stream does not fit, e.g. a direction
/// mismatch). iperf3 creates streams in that order (with `--bidir` the
/// client's sending streams first): flow id N is the stream iperf3 calls
/// [`stream_id`]`(N)` (1, 3, 4, ...).
pub fn plan_for_stream(plans: &[FlowPlan], s: &StreamInfo) -> Option<FlowPlan> {
    let plan = *plans.get(s.index)?;
    let dir = match s.direction {
        params::Direction::ClientToServer => FlowDirection::C2s,
        params::Direction::ServerToClient => FlowDirection::S2c,
    };
    (plan.direction == dir && plan.id as usize == s.index).then_some(plan)
}

/// The totals this side tells its iperf3 peer.
pub fn results_from_side(side: &SideReport, transport: Transport) -> Results {
    let wall = side.cpu.wall_s;
    let pct = |s: f64| if wall > 0.0 { 100.0 * s / wall } else { 0.0 };
    let sends = side.flows.iter().any(|f| f.role == FlowRole::Sender);
    let tcp = transport.model().tcp_info();
    let congestion_used = side
        .flows
        .iter()
        .find_map(|f| f.socket.congestion.clone())
        .filter(|_| tcp);
    let streams = side
        .flows
        .iter()
        .map(|f| stream_result(f, transport))
        .collect();
    Results {
        cpu_util_total: pct(side.cpu.total_s()),
        cpu_util_user: pct(side.cpu.user_s),
        cpu_util_system: pct(side.cpu.system_s),
        sender_has_retransmits: match (sends, tcp) {
            (false, _) => -1,
            (true, true) => 1,
            (true, false) => 0,
        },
        congestion_used,
        streams,
        server_output_text: None,
        server_output_json: None,
    }
}

fn stream_result(f: &FlowReport, transport: Transport) -> StreamResult {
    let t = &f.total;
    let sender = f.role == FlowRole::Sender;
    let retransmits = match (transport.model().tcp_info(), sender) {
        (true, true) => t.tcp.map_or(0, |c| c.retransmits as i64),
        _ => -1,
    };
    let (jitter, errors, packets, omitted) = match t.udp {
        Some(u) if sender => (
            0.0,
            0,
            u.window.packets as i64,
            Omitted {
                errors: 0,
                packets: u.packets_all.saturating_sub(u.window.packets) as i64,
            },
        ),
        Some(u) => (
            u.window.jitter_us / 1e6,
            u.window.lost as i64,
            // iperf3's receiver reports the highest sequence number seen:
            // what arrived plus what is missing.
            (u.window.packets + u.window.lost) as i64,
            Omitted {
                errors: 0,
                packets: u.packets_all.saturating_sub(u.window.packets) as i64,
            },
        ),
        None => (0.0, 0, 0, Omitted::default()),
    };
    StreamResult {
        id: stream_id(f.id as usize),
        bytes: t.bytes,
        retransmits,
        jitter,
        errors,
        packets,
        omitted: Some(omitted),
        start_time: 0.0,
        end_time: (t.end_s - t.start_s).max(0.0),
    }
}

/// A stock iperf3 peer's totals as the other [`SideReport`] of the test:
/// one flow per stream (matched to `ours` by id, the opposite role),
/// totals only — iperf3 exchanges no intervals. `peer` names it (address
/// and, when known, its version).
pub fn side_from_results(r: &Results, ours: &SideReport, peer: &str) -> SideReport {
    let endpoint = match ours.endpoint {
        Endpoint::Client => Endpoint::Server,
        Endpoint::Server => Endpoint::Client,
    };
    let mut warnings = Vec::new();
    let mut flows = Vec::with_capacity(r.streams.len());
    for s in &r.streams {
        let index = stream_index(s.id);
        let Some(mine) = ours.flows.iter().find(|f| Some(f.id as usize) == index) else {
            warnings.push(format!(
                "the iperf3 peer reported stream {} that this side does not have",
                s.id
            ));
            continue;
        };
        let role = match mine.role {
            FlowRole::Sender => FlowRole::Receiver,
            FlowRole::Receiver => FlowRole::Sender,
        };
        let seconds = if s.end_time > s.start_time {
            s.end_time - s.start_time
        } else {
            mine.total.end_s - mine.total.start_s
        };
        let tcp = (s.retransmits >= 0).then(|| TcpTotals {
            retransmits: s.retransmits as u64,
            ..TcpTotals::default()
        });
        let udp = mine.total.udp.map(|_| {
            let omitted = s.omitted.unwrap_or_default();
            let (packets, lost) = match role {
                FlowRole::Sender => (s.packets.max(0) as u64, 0),
                // iperf3's receiver counts the highest sequence seen;
                // what arrived is that minus what is missing.
                FlowRole::Receiver => {
                    ((s.packets - s.errors).max(0) as u64, s.errors.max(0) as u64)
                }
            };
            UdpTotal {
                window: UdpSample {
                    packets,
                    lost,
                    jitter_us: s.jitter * 1e6,
                    ..UdpSample::default()
                },
                packets_all: packets + omitted.packets.max(0) as u64,
                host_drops_all: 0,
            }
        });
        flows.push(FlowReport {
            id: mine.id,
            direction: mine.direction,
            role,
            local: String::new(),
            remote: String::new(),
            socket: SocketSettings {
                congestion: r.congestion_used.clone(),
                ..SocketSettings::default()
            },
            intervals: Vec::new(),
            total: FlowTotal {
                start_s: mine.total.start_s,
                end_s: mine.total.start_s + seconds,
                bytes: s.bytes,
                bits_per_second: if seconds > 0.0 {
                    s.bytes as f64 * 8.0 / seconds
                } else {
                    0.0
                },
                bytes_all: s.bytes,
                tcp,
                udp,
                transport: None,
            },
            end: FlowEnd::Completed,
        });
    }
    let wall = flows
        .iter()
        .map(|f| f.total.end_s - f.total.start_s)
        .fold(0.0, f64::max);
    let cpu_s = |pct: f64| pct.max(0.0) / 100.0 * wall;
    warnings.push(format!(
        "{peer} speaks iperf3's protocol, which reports totals only (no intervals, TCP_INFO or kernel counters)"
    ));
    SideReport {
        endpoint,
        host: HostInfo {
            hostname: peer.to_string(),
            kernel: String::new(),
            cpus: 0,
            ..HostInfo::default()
        },
        embedded: false,
        duration_s: wall,
        sums: sum_intervals(&flows),
        flows,
        cpu: CpuUsage::new(cpu_s(r.cpu_util_user), cpu_s(r.cpu_util_system), wall),
        counters: Default::default(),
        warnings,
        pattern: PatternReport::Stream,
        transport: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::UdpSample;

    fn params(json: &str) -> Params {
        Params::from_json(json.as_bytes()).unwrap()
    }

    #[test]
    fn a_312_client_request_becomes_a_spec() {
        let p = params(
            r#"{"tcp":true,"omit":1,"time":2,"num":0,"blockcount":0,"parallel":2,"len":131072,"bandwidth":20000000,"pacing_timer":1000,"client_version":"3.12","reverse":true,"window":262144,"congestion":"reno","nodelay":true}"#,
        );
        let s = spec_from_params(&p).unwrap();
        assert_eq!(s.transport, Transport::Tcp);
        assert_eq!(s.direction, Direction::Reverse);
        assert_eq!(s.parallel, 2);
        assert_eq!(s.limit, Limit::Duration { seconds: 2.0 });
        assert_eq!(s.omit_s, 1.0);
        assert_eq!(s.knobs.size, 131072);
        assert_eq!(s.knobs.buffer, Some(262144));
        assert_eq!(s.knobs.congestion.as_deref(), Some("reno"));
        assert!(s.knobs.nodelay);
        // TCP -b becomes the kernel pacing cap, in bytes/s.
        assert_eq!(s.knobs.max_pacing_rate, Some(2_500_000));
        assert_eq!(s.knobs.rate, None);
    }

    #[test]
    fn udp_byte_and_block_limits() {
        let p = params(
            r#"{"udp":true,"time":0,"num":1000000,"len":1400,"bandwidth":1048576,"parallel":1}"#,
        );
        let s = spec_from_params(&p).unwrap();
        assert_eq!(s.limit, Limit::Bytes { bytes: 1_000_000 });
        assert_eq!(s.knobs.rate, Some(1_048_576));
        let p = params(r#"{"udp":true,"time":0,"blockcount":10,"len":1000,"parallel":1}"#);
        assert_eq!(
            spec_from_params(&p).unwrap().limit,
            Limit::Bytes { bytes: 10_000 }
        );
    }

    #[test]
    fn refusals_carry_iperf3_codes() {
        let code = |j: &str| spec_from_params(&params(j)).unwrap_err().i_errno;
        assert_eq!(code(r#"{"tcp":true,"parallel":0}"#), i_errno::IENUMSTREAMS);
        assert_eq!(
            code(r#"{"tcp":true,"parallel":100000}"#),
            i_errno::IENUMSTREAMS
        );
        assert_eq!(code(r#"{"tcp":true,"time":0}"#), i_errno::IEDURATION);
        assert_eq!(code(r#"{"tcp":true,"time":-5}"#), i_errno::IEDURATION);
        assert_eq!(code(r#"{"udp":true,"len":8}"#), i_errno::IEUDPBLOCKSIZE);
        assert_eq!(code(r#"{"udp":true,"len":70000}"#), i_errno::IEUDPBLOCKSIZE);
        assert_eq!(code(r#"{"tcp":true,"len":-1}"#), i_errno::IEBLOCKSIZE);
        assert_eq!(code(r#"{"tcp":true,"window":-2}"#), i_errno::IEBUFSIZE);
        assert_eq!(code(r#"{"tcp":true,"MSS":20}"#), i_errno::IEMSS);
        assert_eq!(code(r#"{"tcp":true,"omit":-1}"#), i_errno::IEOMIT);
        assert_eq!(
            code(r#"{"tcp":true,"reverse":true,"bidirectional":true}"#),
            i_errno::IEREVERSEBIDIR
        );
        assert_eq!(code(r#"{"udp":true,"mptcp":true}"#), i_errno::IEUNIMP);
        assert_eq!(
            code(r#"{"tcp":true,"congestion":"x; rm"}"#),
            i_errno::IEINITTEST
        );
    }

    #[test]
    fn spec_round_trips_through_params() {
        let mut s = TestSpec::default_stream();
        s.transport = Transport::Udp;
        s.direction = Direction::Bidir;
        s.parallel = 3;
        s.omit_s = 2.0;
        s.knobs.size = 1400;
        s.knobs.rate = Some(5_000_000);
        s.affinity = Affinity {
            client: Some(0),
            server: Some(3),
            ..Affinity::default()
        };
        let p = params_from_spec(&s, true).unwrap();
        assert!(p.udp_counters_64bit && p.get_server_output && p.bidirectional);
        assert_eq!(p.server_affinity, Some(3));
        let back = spec_from_params(&Params::from_json(&p.to_json()).unwrap()).unwrap();
        assert_eq!(back.transport, s.transport);
        assert_eq!(back.direction, s.direction);
        assert_eq!(back.parallel, 3);
        assert_eq!(back.limit, s.limit);
        assert_eq!(back.omit_s, 2.0);
        assert_eq!(back.knobs.size, 1400);
        assert_eq!(back.knobs.rate, Some(5_000_000));
        // Only the server's CPU travels: the client pins itself.
        assert_eq!(
            back.affinity,
            Affinity {
                client: None,
                server: Some(3),
                ..Affinity::default()
            }
        );
        let far = params(r#"{"tcp":true,"time":1,"parallel":1,"len":1000,"server_affinity":5000}"#);
        assert_eq!(
            spec_from_params(&far).unwrap_err().i_errno,
            i_errno::IEINITTEST
        );
        s.limit = Limit::Duration { seconds: 1.5 };
        assert!(params_from_spec(&s, false)
            .unwrap_err()
            .to_string()
            .contains("-t"));
    }

    #[test]
    fn plans_use_iperf3_ids_and_order() {
        let mut s = TestSpec::default_stream();
        s.direction = Direction::Bidir;
        s.parallel = 2;
        let plans = s.flows();
        assert_eq!(
            plans
                .iter()
                .map(|p| (p.id, p.direction))
                .collect::<Vec<_>>(),
            vec![
                (0, FlowDirection::C2s),
                (1, FlowDirection::C2s),
                (2, FlowDirection::S2c),
                (3, FlowDirection::S2c)
            ]
        );
        let p = params_from_spec(&s, false).unwrap();
        for info in p.streams() {
            assert!(plan_for_stream(&plans, &info).is_some(), "{info:?}");
        }
        let wrong = StreamInfo {
            index: 0,
            id: stream_id(0),
            direction: params::Direction::ServerToClient,
        };
        assert_eq!(plan_for_stream(&plans, &wrong), None);
    }

    fn flow(id: u32, role: FlowRole, udp: Option<UdpTotal>) -> FlowReport {
        FlowReport {
            id,
            direction: FlowDirection::C2s,
            role,
            local: String::new(),
            remote: String::new(),
            socket: SocketSettings::default(),
            intervals: Vec::new(),
            total: FlowTotal {
                start_s: 0.0,
                end_s: 2.0,
                bytes: 1000,
                bits_per_second: 4000.0,
                bytes_all: 1200,
                tcp: None,
                udp,
                transport: None,
            },
            end: FlowEnd::Completed,
        }
    }

    fn side(endpoint: Endpoint, flows: Vec<FlowReport>) -> SideReport {
        SideReport {
            endpoint,
            host: HostInfo::default(),
            embedded: false,
            duration_s: 2.0,
            sums: Vec::new(),
            flows,
            cpu: CpuUsage::new(0.5, 0.5, 2.0),
            counters: Default::default(),
            warnings: Vec::new(),
            pattern: PatternReport::Stream,
            transport: None,
        }
    }

    #[test]
    fn udp_totals_cross_over_in_iperf3_terms() {
        let rx = UdpTotal {
            window: UdpSample {
                packets: 90,
                lost: 10,
                jitter_us: 250.0,
                ..UdpSample::default()
            },
            packets_all: 95,
            host_drops_all: 0,
        };
        let server = side(
            Endpoint::Server,
            vec![flow(0, FlowRole::Receiver, Some(rx))],
        );
        let r = results_from_side(&server, Transport::Udp);
        assert_eq!(r.sender_has_retransmits, -1);
        assert_eq!(r.cpu_util_total, 50.0);
        let s = &r.streams[0];
        assert_eq!(s.id, 1, "flow 0 is iperf3's stream 1");
        assert_eq!((s.packets, s.errors, s.retransmits), (100, 10, -1));
        assert!((s.jitter - 250e-6).abs() < 1e-12);
        // And back, as the client would see the server.
        let tx = UdpTotal {
            window: UdpSample {
                packets: 100,
                ..UdpSample::default()
            },
            packets_all: 100,
            host_drops_all: 0,
        };
        let client = side(Endpoint::Client, vec![flow(0, FlowRole::Sender, Some(tx))]);
        let peer = side_from_results(&Results::from_json(&r.to_json()).unwrap(), &client, "x");
        assert_eq!(peer.endpoint, Endpoint::Server);
        let f = &peer.flows[0];
        assert_eq!(f.role, FlowRole::Receiver);
        let u = f.total.udp.unwrap();
        assert_eq!((u.window.packets, u.window.lost), (90, 10));
        assert_eq!(u.packets_all, 95);
        assert_eq!(f.total.bytes, 1000);
        let summary = crate::result::Summary::from_sides(&client, Some(&peer));
        assert_eq!(summary.directions[0].udp.unwrap().lost, 5);
    }

    #[test]
    fn unknown_peer_streams_are_warned_about_not_invented() {
        let client = side(Endpoint::Client, vec![flow(0, FlowRole::Sender, None)]);
        let mut r = results_from_side(&client, Transport::Tcp);
        assert_eq!(r.sender_has_retransmits, 1);
        r.streams[0].id = 7;
        let peer = side_from_results(&r, &client, "x");
        assert!(peer.flows.is_empty());
        assert!(peer.warnings.iter().any(|w| w.contains("stream 7")));
    }
}
