//! Output formats behind one trait: the test drivers call a [`Reporter`]
//! and never know which format is on.

mod csv;
mod human;
mod json;

use std::io;

use xferlab_core::result::{FlowInterval, FlowRole, TestResult};
use xferlab_core::spec::{FlowDirection, TestSpec};
use xferlab_core::units::RateUnit;

pub use self::csv::CsvReporter;
pub use self::human::HumanReporter;
pub use self::json::{JsonLinesReporter, JsonReporter};

/// One local flow as the test starts.
#[derive(Debug, Clone)]
pub struct FlowStart {
    pub id: u32,
    pub direction: FlowDirection,
    pub role: FlowRole,
    pub local: String,
    pub remote: String,
}

/// What is known when the flows are connected.
#[derive(Debug, Clone)]
pub struct StartInfo<'a> {
    pub spec: &'a TestSpec,
    /// Server as named (`127.0.0.1:5290`).
    pub server: &'a str,
    /// The server runs inside this process.
    pub embedded: bool,
    pub session: &'a str,
    pub flows: &'a [FlowStart],
}

/// One local flow's figures for the interval that just ended.
#[derive(Debug, Clone)]
pub struct LiveFlow {
    pub id: u32,
    pub direction: FlowDirection,
    pub role: FlowRole,
    pub interval: FlowInterval,
}

/// Receives a test's progress and result. Live calls may print as they
/// come; `finish` writes whatever the format keeps for the end.
pub trait Reporter {
    fn start(&mut self, info: &StartInfo<'_>) -> io::Result<()>;
    /// Called once per interval boundary with every local flow, in flow-id
    /// order (never from the data path).
    fn interval(&mut self, flows: &[LiveFlow]) -> io::Result<()>;
    /// The complete result, also when the test failed part way.
    fn finish(&mut self, result: &TestResult) -> io::Result<()>;
}

/// `--format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Live table, one line per interval, then a summary.
    Human,
    /// One JSON document (schema xferlab.result/1) at the end.
    Json,
    /// One JSON object per interval as it happens, then the result.
    Jsonl,
    /// One row per flow and interval, plus total rows.
    Csv,
}

/// Builds the reporter for a format, writing to `out`.
pub fn reporter(
    format: Format,
    unit: RateUnit,
    out: Box<dyn io::Write + Send>,
) -> Box<dyn Reporter + Send> {
    match format {
        Format::Human => Box::new(HumanReporter::new(out, unit)),
        Format::Json => Box::new(JsonReporter::new(out)),
        Format::Jsonl => Box::new(JsonLinesReporter::new(out)),
        Format::Csv => Box::new(CsvReporter::new(out)),
    }
}

/// One realistic result shared by the tests of every format, so they all
/// check the same document: a bidirectional test with two flows per
/// direction, a one-second warm-up, TCP samples on the senders and both
/// sides' reports.
#[cfg(test)]
pub(crate) mod sample {
    use std::collections::BTreeMap;
    use std::io::{self, Write};
    use std::sync::{Arc, Mutex};

    use xferlab_core::result::{
        sum_intervals, CpuUsage, Endpoint, FlowEnd, FlowInterval, FlowReport, FlowRole, FlowTotal,
        HostInfo, KernelCounters, SideReport, SocketSettings, Software, Status, Summary, TcpSample,
        TcpTotals, TestResult, Throughput, SCHEMA,
    };
    use xferlab_core::spec::{Direction, FlowDirection, Limit, RecvMode, TestSpec};

    use super::{FlowStart, LiveFlow};

    const CLIENT: &str = "127.0.0.1";
    const SERVER: &str = "127.0.0.1:5290";

    /// Client port of flow `id`.
    fn client_addr(id: u32) -> String {
        format!("{CLIENT}:{}", 41234 + id)
    }

    /// One flow with four one-second intervals, the first in the warm-up.
    /// Receivers see a little less in the first interval and the same
    /// amount more in the last (data in flight), so both ends agree on
    /// `bytes_all` as they do for a flow read to end of stream.
    fn flow(id: u32, direction: FlowDirection, role: FlowRole, at_client: bool) -> FlowReport {
        let base = 1_200_000_000 + u64::from(id) * 10_000_000;
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
            .map(|(i, &b)| {
                let (start_s, end_s) = (i as f64, i as f64 + 1.0);
                FlowInterval {
                    start_s,
                    end_s,
                    omitted: i == 0,
                    bytes: b,
                    bits_per_second: Throughput::new(b, end_s - start_s).bits_per_second,
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
                }
            })
            .collect();
        let measured: u64 = bytes[1..].iter().sum();
        let (local, remote) = if at_client {
            (client_addr(id), SERVER.to_string())
        } else {
            (SERVER.to_string(), client_addr(id))
        };
        FlowReport {
            id,
            direction,
            role,
            local,
            remote,
            socket: SocketSettings {
                sndbuf: 4_194_304,
                rcvbuf: 6_291_456,
                congestion: Some("cubic".into()),
                mss: None,
                nodelay: false,
                tos: None,
                max_pacing_rate: None,
                recv_mode: RecvMode::Discard,
            },
            total: FlowTotal {
                start_s: 1.0,
                end_s: 4.0,
                bytes: measured,
                bits_per_second: Throughput::new(measured, 3.0).bits_per_second,
                bytes_all: bytes.iter().sum(),
                tcp: sender.then_some(TcpTotals {
                    retransmits: 1 + 2 + 3,
                    rtt_min_us: 45,
                    rtt_mean_us: 50,
                    rtt_max_us: 55,
                    rwnd_limited_fraction: 0.02,
                    sndbuf_limited_fraction: 0.0,
                    delivered_ce: 0,
                }),
            },
            intervals,
            end: FlowEnd::Completed,
        }
    }

    fn side(endpoint: Endpoint) -> SideReport {
        let at_client = endpoint == Endpoint::Client;
        // Flows 0 and 1 go client -> server, 2 and 3 back (TestSpec::flows).
        let flows: Vec<FlowReport> = (0..4)
            .map(|id| {
                let direction = if id < 2 {
                    FlowDirection::C2s
                } else {
                    FlowDirection::S2c
                };
                let sends = (direction == FlowDirection::C2s) == at_client;
                let role = if sends {
                    FlowRole::Sender
                } else {
                    FlowRole::Receiver
                };
                flow(id, direction, role, at_client)
            })
            .collect();
        let deltas = BTreeMap::from([
            ("Tcp.OutSegs".to_string(), 310_442),
            ("Tcp.RetransSegs".to_string(), 12),
            ("TcpExt.TCPSackRecovery".to_string(), 2),
            ("TcpExt.TCPDSACKRecv".to_string(), 1),
            ("dev.rx_bytes".to_string(), 19_953_000_000),
        ]);
        SideReport {
            endpoint,
            host: HostInfo {
                hostname: "lab1".into(),
                kernel: "Linux 6.1.0-18-amd64".into(),
                cpus: 8,
            },
            embedded: false,
            duration_s: 4.0,
            sums: sum_intervals(&flows),
            flows,
            cpu: if at_client {
                CpuUsage::new(0.31, 4.2, 4.0)
            } else {
                CpuUsage::new(0.4, 5.1, 4.0)
            },
            counters: KernelCounters {
                interface: Some("lo".into()),
                deltas,
            },
            warnings: vec![],
        }
    }

    /// The complete result of `xferlab stream --bidir -P 2 -t 3 -O 1`.
    pub(crate) fn bidir_result() -> TestResult {
        let mut spec = TestSpec::default_stream();
        spec.direction = Direction::Bidir;
        spec.parallel = 2;
        spec.limit = Limit::Duration { seconds: 3.0 };
        spec.omit_s = 1.0;
        spec.knobs.congestion = Some("cubic".into());
        spec.knobs.recv_mode = RecvMode::Discard;
        spec.title = Some("loopback bidir".into());
        let client = side(Endpoint::Client);
        let server = side(Endpoint::Server);
        TestResult {
            schema: SCHEMA.to_string(),
            id: "7f3a9c2e41d05b68".into(),
            started_at: "2024-05-01T12:00:00Z".into(),
            software: Software {
                name: "xferlab".into(),
                version: "0.1.0".into(),
                protocol: 1,
            },
            spec,
            server_address: SERVER.into(),
            summary: Summary::from_sides(&client, Some(&server)),
            client,
            server: Some(server),
            status: Status::Ok,
            errors: vec![],
        }
    }

    /// The flows of one side as a driver announces them at start.
    pub(crate) fn flow_starts(side: &SideReport) -> Vec<FlowStart> {
        side.flows
            .iter()
            .map(|f| FlowStart {
                id: f.id,
                direction: f.direction,
                role: f.role,
                local: f.local.clone(),
                remote: f.remote.clone(),
            })
            .collect()
    }

    /// A writer the test keeps a handle to, to read what a reporter wrote
    /// through its `Box<dyn Write + Send>`.
    #[derive(Clone, Default)]
    pub(crate) struct SharedBuf(Arc<Mutex<Vec<u8>>>);

    impl SharedBuf {
        pub(crate) fn writer(&self) -> Box<dyn Write + Send> {
            Box::new(self.clone())
        }

        pub(crate) fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).expect("reporters write UTF-8")
        }
    }

    impl Write for SharedBuf {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Interval `i` of every flow of one side, as a driver passes it live.
    pub(crate) fn live_interval(side: &SideReport, i: usize) -> Vec<LiveFlow> {
        side.flows
            .iter()
            .map(|f| LiveFlow {
                id: f.id,
                direction: f.direction,
                role: f.role,
                interval: f.intervals[i].clone(),
            })
            .collect()
    }
}
