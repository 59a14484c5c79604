//! Realistic results for tests, shared by the core's exporters and the
//! binary's output formats so they all check the same documents: a
//! bidirectional TCP test ([`bidir_result`]) and a forward UDP test with
//! loss ([`udp_result`]), each with two flows per direction, a one-second
//! warm-up and both sides' reports. Built only for tests (`cfg(test)`, or
//! the `sample` feature the binary's tests turn on).

use std::collections::BTreeMap;

use crate::result::{
    sum_intervals, CpuUsage, Endpoint, FlowEnd, FlowInterval, FlowReport, FlowRole, FlowTotal,
    HostInfo, KernelCounters, SideReport, SocketSettings, Software, Status, Summary, TcpSample,
    TcpTotals, TestResult, Throughput, UdpSample, UdpTotal, SCHEMA,
};
use crate::spec::{Direction, FlowDirection, FlowPlan, Limit, RecvMode, TestSpec, Transport};

const CLIENT: &str = "127.0.0.1";
const SERVER: &str = "127.0.0.1:5290";
/// One-second intervals per flow; the first is the warm-up (`-O 1`).
const INTERVALS: usize = 4;

/// Client port of flow `id`.
fn client_addr(id: u32) -> String {
    format!("{CLIENT}:{}", 41234 + id)
}

/// Interval `i` of a flow: one second, omitted when it is the first.
fn interval(i: usize, bytes: u64) -> FlowInterval {
    let (start_s, end_s) = (i as f64, i as f64 + 1.0);
    FlowInterval {
        start_s,
        end_s,
        omitted: i == 0,
        bytes,
        bits_per_second: Throughput::new(bytes, end_s - start_s).bits_per_second,
        tcp: None,
        udp: None,
        transport: None,
    }
}

/// A flow's total over the measured window (every interval but the
/// warm-up), without transport figures.
fn total(intervals: &[FlowInterval]) -> FlowTotal {
    let measured: u64 = intervals[1..].iter().map(|iv| iv.bytes).sum();
    FlowTotal {
        start_s: 1.0,
        end_s: INTERVALS as f64,
        bytes: measured,
        bits_per_second: Throughput::new(measured, INTERVALS as f64 - 1.0).bits_per_second,
        bytes_all: intervals.iter().map(|iv| iv.bytes).sum(),
        tcp: None,
        udp: None,
        transport: None,
    }
}

/// The parts of a flow report that do not depend on the transport:
/// addresses as the reporting side sees them, a completed end.
fn report(
    plan: &FlowPlan,
    role: FlowRole,
    at_client: bool,
    socket: SocketSettings,
    intervals: Vec<FlowInterval>,
    total: FlowTotal,
) -> FlowReport {
    let (local, remote) = if at_client {
        (client_addr(plan.id), SERVER.to_string())
    } else {
        (SERVER.to_string(), client_addr(plan.id))
    };
    FlowReport {
        id: plan.id,
        direction: plan.direction,
        role,
        local,
        remote,
        socket,
        intervals,
        total,
        end: FlowEnd::Completed,
    }
}

/// A TCP flow near 10 Gbit/s. Receivers see a little less in the first
/// interval and the same amount more in the last (data in flight), so
/// both ends agree on `bytes_all` as they do for a flow read to end of
/// stream. Senders carry TCP samples, receivers none.
fn tcp_flow(plan: &FlowPlan, role: FlowRole, at_client: bool) -> FlowReport {
    let base = 1_200_000_000 + u64::from(plan.id) * 10_000_000;
    let in_flight = 3_000_000;
    let mut bytes = [
        base,
        base + 50_000_000,
        base + 50_000_000,
        base + 50_000_000,
    ];
    if role == FlowRole::Receiver {
        bytes[0] -= in_flight;
        bytes[3] += in_flight;
    }
    let sender = role == FlowRole::Sender;
    let intervals: Vec<FlowInterval> = bytes
        .iter()
        .enumerate()
        .map(|(i, &b)| FlowInterval {
            tcp: sender.then(|| TcpSample {
                rtt_us: 40 + 5 * i as u32,
                rttvar_us: 10,
                min_rtt_us: 20,
                cwnd_bytes: 3_276_800,
                snd_mss: 65_483,
                retransmits: i as u64,
                delivery_rate_bps: 9.8e9,
                pacing_rate_bps: 0.0,
                busy_us: 1_000_000,
                rwnd_limited_us: 20_000,
                sndbuf_limited_us: 0,
                delivered_ce: 0,
            }),
            ..interval(i, b)
        })
        .collect();
    let total = FlowTotal {
        tcp: sender.then_some(TcpTotals {
            retransmits: 1 + 2 + 3,
            rtt_min_us: 45,
            rtt_mean_us: 50,
            rtt_max_us: 55,
            rwnd_limited_fraction: 0.02,
            sndbuf_limited_fraction: 0.0,
            delivered_ce: 0,
        }),
        ..total(&intervals)
    };
    let socket = SocketSettings {
        sndbuf: 4_194_304,
        rcvbuf: 6_291_456,
        congestion: Some("cubic".into()),
        mss: None,
        nodelay: false,
        tos: None,
        max_pacing_rate: None,
        recv_mode: RecvMode::Discard,
        ..SocketSettings::default()
    };
    report(plan, role, at_client, socket, intervals, total)
}

/// Bytes per datagram in [`udp_result`].
pub const DATAGRAM: u64 = 1400;
/// Datagrams a sender sends per one-second interval at 100 Mbit/s.
const PER_INTERVAL: u64 = 8928;
/// Datagrams flow 1 loses after the last one its receiver sees: only
/// the sender's count reveals them, so they are in the summary's loss
/// but in no interval's.
pub const TAIL_LOSS: u64 = 2;

/// A UDP flow at 100 Mbit/s. Flow 0 is clean; flow 1 loses datagrams
/// in the second interval (most of them dropped by the receiving
/// socket's full buffer, one arriving out of order), some in the last,
/// and [`TAIL_LOSS`] at the very end. Senders are late a few times.
fn udp_flow(plan: &FlowPlan, role: FlowRole, at_client: bool) -> FlowReport {
    let lossy = plan.id == 1;
    // Per interval: (lost, host drops, out of order, jitter us, late).
    let figures: [(u64, u64, u64, f64, u64); INTERVALS] = if lossy {
        [
            (0, 0, 0, 9.0, 1),
            (12, 10, 1, 21.0, 3),
            (0, 0, 0, 12.0, 0),
            (3, 0, 0, 11.0, 1),
        ]
    } else {
        [
            (0, 0, 0, 3.0, 0),
            (0, 0, 0, 2.0, 2),
            (0, 0, 0, 4.0, 0),
            (0, 0, 0, 3.0, 0),
        ]
    };
    let samples: Vec<UdpSample> = figures
        .iter()
        .enumerate()
        .map(|(i, &(lost, host_drops, out_of_order, jitter_us, late))| {
            if role == FlowRole::Sender {
                UdpSample {
                    packets: PER_INTERVAL,
                    late,
                    max_lateness_us: if late > 0 { 1_250.0 * late as f64 } else { 0.0 },
                    ..UdpSample::default()
                }
            } else {
                let tail = if lossy && i == INTERVALS - 1 {
                    TAIL_LOSS
                } else {
                    0
                };
                UdpSample {
                    packets: PER_INTERVAL - lost - tail,
                    lost,
                    out_of_order,
                    duplicates: 0,
                    host_drops,
                    jitter_us,
                    owd_var_mean_us: 4.5 + i as f64,
                    owd_var_max_us: 600.0 + 10.0 * i as f64,
                    ..UdpSample::default()
                }
            }
        })
        .collect();
    let intervals: Vec<FlowInterval> = samples
        .iter()
        .enumerate()
        .map(|(i, u)| FlowInterval {
            udp: Some(*u),
            ..interval(i, u.packets * DATAGRAM)
        })
        .collect();
    let window = &samples[1..];
    let sum = |f: fn(&UdpSample) -> u64| window.iter().map(f).sum::<u64>();
    let max = |f: fn(&UdpSample) -> f64| window.iter().map(f).fold(0.0, f64::max);
    let packets = sum(|u| u.packets);
    let udp = UdpTotal {
        window: UdpSample {
            packets,
            lost: sum(|u| u.lost),
            out_of_order: sum(|u| u.out_of_order),
            duplicates: sum(|u| u.duplicates),
            host_drops: sum(|u| u.host_drops),
            jitter_us: samples[INTERVALS - 1].jitter_us,
            owd_var_mean_us: if role == FlowRole::Receiver {
                window
                    .iter()
                    .map(|u| u.owd_var_mean_us * u.packets as f64)
                    .sum::<f64>()
                    / packets as f64
            } else {
                0.0
            },
            owd_var_max_us: max(|u| u.owd_var_max_us),
            late: sum(|u| u.late),
            max_lateness_us: max(|u| u.max_lateness_us),
        },
        packets_all: samples.iter().map(|u| u.packets).sum(),
        host_drops_all: samples.iter().map(|u| u.host_drops).sum(),
    };
    let total = FlowTotal {
        udp: Some(udp),
        ..total(&intervals)
    };
    let socket = SocketSettings {
        sndbuf: 212_992,
        rcvbuf: 212_992,
        ..SocketSettings::default()
    };
    report(plan, role, at_client, socket, intervals, total)
}

/// One side's report of `spec`: every flow of the test in the role this
/// side plays in it.
fn side(
    endpoint: Endpoint,
    spec: &TestSpec,
    deltas: &BTreeMap<String, i64>,
    flow: fn(&FlowPlan, FlowRole, bool) -> FlowReport,
) -> SideReport {
    let at_client = endpoint == Endpoint::Client;
    let flows: Vec<FlowReport> = spec
        .flows()
        .iter()
        .map(|plan| {
            let sends = (plan.direction == FlowDirection::C2s) == at_client;
            let role = if sends {
                FlowRole::Sender
            } else {
                FlowRole::Receiver
            };
            flow(plan, role, at_client)
        })
        .collect();
    SideReport {
        endpoint,
        host: HostInfo {
            hostname: "lab1".into(),
            kernel: "Linux 6.1.0-18-amd64".into(),
            cpus: 8,
            ..HostInfo::default()
        },
        embedded: false,
        duration_s: INTERVALS as f64,
        sums: sum_intervals(&flows),
        flows,
        cpu: if at_client {
            CpuUsage::new(0.31, 4.2, 4.0)
        } else {
            CpuUsage::new(0.4, 5.1, 4.0)
        },
        counters: KernelCounters {
            interface: Some("lo".into()),
            deltas: deltas.clone(),
        },
        warnings: vec![],
        pattern: crate::result::PatternReport::Stream,
        transport: None,
    }
}

fn software() -> Software {
    Software {
        name: "xferlab".into(),
        version: "0.1.0".into(),
        protocol: 1,
    }
}

/// The complete result of `spec`, both sides reporting.
fn result(
    spec: TestSpec,
    deltas: &[(&str, i64)],
    flow: fn(&FlowPlan, FlowRole, bool) -> FlowReport,
) -> TestResult {
    let deltas: BTreeMap<String, i64> = deltas.iter().map(|&(k, v)| (k.to_string(), v)).collect();
    let client = side(Endpoint::Client, &spec, &deltas, flow);
    let server = side(Endpoint::Server, &spec, &deltas, flow);
    TestResult {
        schema: SCHEMA.to_string(),
        id: "7f3a9c2e41d05b68".into(),
        started_at: "2024-05-01T12:00:00Z".into(),
        software: software(),
        spec,
        server_address: SERVER.into(),
        summary: Summary::from_sides(&client, Some(&server)),
        client,
        server: Some(server),
        status: Status::Ok,
        errors: vec![],
        server_output: None,
        lab: None,
        usbmon: None,
    }
}

/// The complete result of `xferlab stream --bidir -P 2 -t 3 -O 1`.
pub fn bidir_result() -> TestResult {
    let mut spec = TestSpec::default_stream();
    spec.direction = Direction::Bidir;
    spec.parallel = 2;
    spec.limit = Limit::Duration { seconds: 3.0 };
    spec.omit_s = 1.0;
    spec.knobs.congestion = Some("cubic".into());
    spec.knobs.recv_mode = RecvMode::Discard;
    spec.title = Some("loopback bidir".into());
    let deltas = [
        ("Tcp.OutSegs", 310_442),
        ("Tcp.RetransSegs", 12),
        ("TcpExt.TCPSackRecovery", 2),
        ("TcpExt.TCPDSACKRecv", 1),
        ("dev.rx_bytes", 19_953_000_000),
    ];
    result(spec, &deltas, tcp_flow)
}

/// The complete result of `xferlab stream -u -b 100M -l 1400 --batch 32
/// -P 2 -t 3 -O 1`: forward, flow 1 with loss (see [`udp_flow`]).
pub fn udp_result() -> TestResult {
    let mut spec = TestSpec::default_stream();
    spec.transport = Transport::Udp;
    spec.parallel = 2;
    spec.limit = Limit::Duration { seconds: 3.0 };
    spec.omit_s = 1.0;
    spec.knobs.size = DATAGRAM;
    spec.knobs.rate = Some(100_000_000);
    spec.knobs.batch = 32;
    spec.validate().expect("a valid UDP spec");
    let deltas = [
        ("Udp.InDatagrams", 71_407),
        ("Udp.OutDatagrams", 71_424),
        ("Udp.InErrors", 10),
        ("Udp.RcvbufErrors", 10),
        ("dev.rx_bytes", 102_000_000),
    ];
    result(spec, &deltas, udp_flow)
}

/// The result of `xferlab usb bulk --dir both -l 16K -Q 8 -t 2 -i 1
/// --pattern 1` against a high-speed SourceSink gadget: flow 0 the OUT
/// endpoint 0x02 (it stalled 3 times, each cleared), flow 1 the IN
/// endpoint 0x81. Two one-second intervals and a short tail each.
pub fn usb_result() -> TestResult {
    use crate::latency::LatencySummary;
    use crate::usb::stats::{
        ErrorCount, ErrorKind, UsbDeviceInfo, UsbPipeReport, UsbReport, UsbSample, UsbTotals,
    };
    use crate::usb::Pattern;

    const SIZE: u64 = 16384;
    let ends = [(0.0, 1.0), (1.0, 2.0), (2.0, 2.25)];
    let pipe = |id: u32, endpoint: u8, per_second: [u64; 3], stalls: u64| {
        let samples: Vec<UsbSample> = ends
            .iter()
            .zip(per_second)
            .enumerate()
            .map(|(i, (&(start_s, end_s), transfers))| UsbSample {
                start_s,
                end_s,
                transfers,
                transfers_per_second: transfers as f64 / (end_s - start_s),
                short_transfers: 0,
                errors: if i == 1 { stalls } else { 0 },
            })
            .collect();
        let intervals: Vec<FlowInterval> = samples
            .iter()
            .map(|s| {
                let bytes = s.transfers * SIZE;
                FlowInterval {
                    start_s: s.start_s,
                    end_s: s.end_s,
                    omitted: false,
                    bytes,
                    bits_per_second: Throughput::new(bytes, s.end_s - s.start_s).bits_per_second,
                    tcp: None,
                    udp: None,
                    transport: None,
                }
            })
            .collect();
        let transfers: u64 = per_second.iter().sum();
        let bytes = transfers * SIZE;
        let is_in = endpoint & 0x80 != 0;
        let flow = FlowReport {
            id,
            direction: if is_in {
                FlowDirection::S2c
            } else {
                FlowDirection::C2s
            },
            role: if is_in {
                FlowRole::Receiver
            } else {
                FlowRole::Sender
            },
            local: format!("usb 1.2 ep 0x{endpoint:02x}"),
            remote: "0525:a4a0 (Gadget Zero (SourceSink))".into(),
            socket: SocketSettings::default(),
            intervals,
            total: FlowTotal {
                start_s: 0.0,
                end_s: 2.25,
                bytes,
                bits_per_second: Throughput::new(bytes, 2.25).bits_per_second,
                bytes_all: bytes,
                tcp: None,
                udp: None,
                transport: None,
            },
            end: FlowEnd::Completed,
        };
        let report = UsbPipeReport {
            flow_id: id,
            endpoint,
            max_packet: 512,
            transfer_size: SIZE,
            depth: 8,
            pattern: Pattern::Mod63,
            intervals: samples,
            total: UsbTotals {
                transfers,
                transfers_per_second: transfers as f64 / 2.25,
                short_transfers: 0,
                errors: (stalls > 0)
                    .then_some(ErrorCount {
                        kind: ErrorKind::Stall,
                        count: stalls,
                    })
                    .into_iter()
                    .collect(),
                stalls_cleared: stalls,
                pattern_errors: 0,
                latency: LatencySummary {
                    count: transfers,
                    min_us: 410.0,
                    mean_us: 3_870.0,
                    stddev_us: 2_100.0,
                    p50_us: 3_275.0,
                    p90_us: 6_914.0,
                    p99_us: 13_607.0,
                    p999_us: 40_100.0,
                    max_us: 83_493.0,
                },
            },
        };
        (flow, report)
    };
    let (out_flow, out_pipe) = pipe(0, 0x02, [1500, 1480, 370], 3);
    let (in_flow, in_pipe) = pipe(1, 0x81, [1900, 1920, 480], 0);
    let flows = vec![out_flow, in_flow];
    let client = SideReport {
        endpoint: Endpoint::Client,
        host: HostInfo {
            hostname: "lab1".into(),
            kernel: "Linux 6.1.0-18-amd64".into(),
            cpus: 1,
            ..HostInfo::default()
        },
        embedded: false,
        duration_s: 2.25,
        sums: sum_intervals(&flows),
        flows,
        cpu: CpuUsage::new(0.42, 1.52, 2.25),
        counters: KernelCounters::default(),
        warnings: vec![],
        pattern: crate::result::PatternReport::Stream,
        transport: Some(crate::result::SideTransportReport::UsbBulk(UsbReport {
            device: UsbDeviceInfo {
                bus: 1,
                address: 2,
                vendor_id: 0x0525,
                product_id: 0xa4a0,
                speed: Some("high".into()),
                manufacturer: Some("Linux".into()),
                product: Some("Gadget Zero (SourceSink)".into()),
                serial: Some("xferlab-lab".into()),
            },
            interface: 0,
            alt_setting: 0,
            pipes: vec![out_pipe, in_pipe],
        })),
    };
    let mut spec = TestSpec::default_stream();
    spec.transport = Transport::UsbBulk;
    spec.direction = Direction::Bidir;
    spec.limit = Limit::Duration { seconds: 2.0 };
    spec.knobs.size = SIZE;
    spec.title = Some("gadget zero".into());
    TestResult {
        schema: SCHEMA.to_string(),
        id: "0c1d2e3f40516273".into(),
        started_at: "2024-05-01T12:00:00Z".into(),
        software: software(),
        spec,
        server_address: "usb 1.2 0525:a4a0".into(),
        summary: Summary::from_sides(&client, None),
        client,
        server: None,
        status: Status::Partial,
        errors: vec![
            "endpoint 0x02 stalled 3 times (each cleared and the run went on): the device \
             halted it, e.g. a SourceSink sink rejecting data that breaks its pattern (--pattern)"
                .into(),
        ],
        server_output: None,
        lab: None,
        usbmon: None,
    }
}
