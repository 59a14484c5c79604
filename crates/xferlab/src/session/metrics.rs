//! The server's own counters and gauges, as `xferlab server --metrics`
//! exports them (the HTTP side is [`crate::metrics`]). They are counted
//! where the server already decides things: a test admitted or refused,
//! an authentication failure, a session's place taken and given back. A
//! test's bytes are added once, when its side report is in, so nothing
//! here is touched per packet; prometheus-client's counters and gauges are
//! atomics, and a labelled family's lookup (a read lock) happens once per
//! test.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use xferlab_core::result::{FlowRole, SideReport};
use xferlab_core::spec::TestSpec;

/// Which protocol a session spoke.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Protocol {
    Xferlab,
    Iperf3,
    /// The QUIC performance protocol on `--quic-perf`'s port: a session
    /// is one connection.
    #[cfg_attr(not(feature = "quic"), allow(dead_code))]
    QuicPerf,
}

/// Why a test was refused; each is a value of the `reason` label.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Reason {
    /// --max-sessions, --max-sessions-per-client, the handshake limits,
    /// or the server-wide rate held by other tests.
    Busy,
    /// --max-rate, --max-flows, --min-interval.
    OverBudget,
    /// A test this server cannot run (a CPU it may not use, an unknown
    /// congestion control, longer than --max-duration).
    Invalid,
    /// Authentication failed or is impossible (no key for this protocol).
    Auth,
    /// Too many failed authentication attempts from the address.
    LockedOut,
    /// The server could not set the test up (sockets, randomness).
    Internal,
}

/// Which way a test's bytes went, seen from this server.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Direction {
    Sent,
    Received,
}

/// Label values as the metrics name them (prometheus-client's derive
/// writes the Rust name, `OverBudget`; the convention is snake_case).
macro_rules! label_values {
    ($($t:ty { $($v:ident => $name:literal),* $(,)? })*) => {$(
        impl EncodeLabelValue for $t {
            fn encode(&self, e: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
                use std::fmt::Write;
                e.write_str(match self { $(<$t>::$v => $name),* })
            }
        }
    )*};
}

label_values! {
    Protocol { Xferlab => "xferlab", Iperf3 => "iperf3", QuicPerf => "quic_perf" }
    Reason {
        Busy => "busy",
        OverBudget => "over_budget",
        Invalid => "invalid",
        Auth => "auth",
        LockedOut => "locked_out",
        Internal => "internal",
    }
    Direction { Sent => "sent", Received => "received" }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProtocolLabels {
    pub protocol: Protocol,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    pub protocol: Protocol,
    pub reason: Reason,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BytesLabels {
    pub protocol: Protocol,
    pub direction: Direction,
}

/// The counters and gauges of one server (clones share their values).
#[derive(Debug, Default)]
pub struct ServerMetrics {
    served: Family<ProtocolLabels, Counter>,
    refused: Family<RefusedLabels, Counter>,
    bytes: Family<BytesLabels, Counter>,
    active_sessions: Gauge,
    active_flows: Gauge,
    auth_failures: Counter,
    orders: Family<OrderLabels, Counter>,
    quic_perf_retries: Counter,
}

/// An agent order's origin (`controller`, or `probe` for /probe), its
/// result and, when refused, the refusal's short code (the agent's
/// `Refusal::code`: target, budget, usage ...; empty otherwise).
type OrderLabels = Vec<(&'static str, &'static str)>;

/// A running test's flows in `xferlab_active_flows`, taken back when
/// dropped (with the session, however it ends).
#[derive(Debug)]
pub struct ActiveFlows {
    gauge: Gauge,
    n: i64,
}

impl Drop for ActiveFlows {
    fn drop(&mut self) {
        self.gauge.dec_by(self.n);
    }
}

impl ServerMetrics {
    /// Adds every metric to `reg` (names get the registry's prefix).
    pub fn register(&self, reg: &mut Registry) {
        reg.register(
            "sessions_served",
            "Tests admitted and run, by protocol",
            self.served.clone(),
        );
        reg.register(
            "sessions_refused",
            "Tests refused, by protocol and reason",
            self.refused.clone(),
        );
        reg.register_with_unit(
            "transferred",
            "Bytes the stream flows of tests moved on this server, by protocol and direction, added when each test ends",
            Unit::Bytes,
            self.bytes.clone(),
        );
        reg.register(
            "sessions_active",
            "Tests running now",
            self.active_sessions.clone(),
        );
        reg.register(
            "flows_active",
            "Flows of the tests running now (stream flows and rr flows)",
            self.active_flows.clone(),
        );
        reg.register(
            "auth_failures",
            "Failed authentication attempts (xferlab keys and iperf3 credentials)",
            self.auth_failures.clone(),
        );
        reg.register(
            "quic_perf_retries",
            "Retry packets the --quic-perf port sent to validate a new address (each instead of any connection state)",
            self.quic_perf_retries.clone(),
        );
        reg.register(
            "agent_orders",
            "Agent orders, by origin (controller, probe), result (served, refused, failed) and refusal reason",
            self.orders.clone(),
        );
    }

    /// An agent order from `origin` ran (`served`) or ended without a
    /// result (`failed`); `refused` with the refusal's code as `reason`.
    pub fn order(&self, origin: &'static str, result: &'static str, reason: &'static str) {
        let labels = vec![("origin", origin), ("result", result), ("reason", reason)];
        self.orders.get_or_create(&labels).inc();
    }

    /// A test was admitted: counts it, and holds its flows in the active
    /// gauge until the returned guard is dropped.
    pub fn served(&self, protocol: Protocol, spec: &TestSpec) -> ActiveFlows {
        let rr = spec.pattern.rr().map_or(0, |r| i64::from(r.flows));
        self.served_flows(protocol, spec.flows().len() as i64 + rr)
    }

    /// A session of `n` flows was admitted (a QUIC perf connection is
    /// one): counts it, and holds its flows in the active gauge until the
    /// returned guard is dropped.
    pub fn served_flows(&self, protocol: Protocol, n: i64) -> ActiveFlows {
        self.served
            .get_or_create(&ProtocolLabels { protocol })
            .inc();
        self.active_flows.inc_by(n);
        ActiveFlows {
            gauge: self.active_flows.clone(),
            n,
        }
    }

    pub fn refused(&self, protocol: Protocol, reason: Reason) {
        self.refused
            .get_or_create(&RefusedLabels { protocol, reason })
            .inc();
    }

    /// The QUIC perf port answered an unvalidated Initial with a Retry.
    #[cfg_attr(not(feature = "quic"), allow(dead_code))]
    pub fn quic_perf_retry(&self) {
        self.quic_perf_retries.inc();
    }

    pub fn auth_failed(&self) {
        self.auth_failures.inc();
    }

    /// A session took (`+1`) or gave back (`-1`) its place.
    pub(super) fn session(&self, delta: i64) {
        self.active_sessions.inc_by(delta);
    }

    /// What a finished test's stream flows moved on this side, every byte
    /// (warm-up included); an rr test's transactions are not counted here.
    pub fn report(&self, protocol: Protocol, r: &SideReport) {
        let (mut sent, mut received) = (0u64, 0u64);
        for f in &r.flows {
            match f.role {
                FlowRole::Sender => sent += f.total.bytes_all,
                FlowRole::Receiver => received += f.total.bytes_all,
            }
        }
        self.moved(protocol, sent, received);
    }

    /// Bytes a finished session moved on this side (stream payload).
    pub fn moved(&self, protocol: Protocol, sent: u64, received: u64) {
        for (direction, n) in [(Direction::Sent, sent), (Direction::Received, received)] {
            self.bytes
                .get_or_create(&BytesLabels {
                    protocol,
                    direction,
                })
                .inc_by(n);
        }
    }
}
