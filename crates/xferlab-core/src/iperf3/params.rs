//! The parameters JSON a client sends after PARAM_EXCHANGE.

use std::time::Duration;

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::json::{parse_object, Fields, JsonError};
use super::stream_id;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Tcp,
    Udp,
    /// `--sctp`: read so it can be refused (xferlab does not serve it).
    Sctp,
}

/// Which way a data stream's payload flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    ClientToServer,
    ServerToClient,
}

/// One data stream of a test, in creation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamInfo {
    /// 0-based creation (client) / acceptance (server) order.
    pub index: usize,
    /// The id both sides use for it in the results.
    pub id: u32,
    pub direction: Direction,
}

/// Test parameters, one field per key iperf3 knows (3.12 .. 3.21).
///
/// Reading is lenient: unknown keys are ignored, flags may be `true` or
/// numbers, integers printed as unsigned 64-bit come back negative, a
/// missing key takes iperf3's default. Writing is strict: boolean keys as
/// `true`, numeric keys as numbers (the flags iperf3 itself sends as `1`
/// stay numbers, since 3.18+ checks each key against the type its own
/// client writes), and nothing for unset options. `omit`, `time`, `num`,
/// `blockcount`, `parallel`, `pacing_timer` and `client_version` are always
/// written, like iperf3 does; key order follows iperf3's.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// `"tcp":true`, `"udp":true` or `"sctp":true`.
    pub protocol: Protocol,
    /// Seconds of warm-up not counted (`-O`).
    pub omit: i64,
    /// Test seconds; 0 when a byte or block limit ends the test.
    pub time: i64,
    /// Byte limit (`-n`), 0 for none.
    pub num: u64,
    /// Block limit (`-k`), 0 for none.
    pub blockcount: u64,
    /// Streams per direction (`-P`).
    pub parallel: i64,
    /// Block / datagram size (`-l`).
    pub len: Option<i64>,
    /// Bit/s per stream (`-b`); absent means unlimited (TCP) or 1 Mbit/s
    /// (UDP).
    pub bandwidth: Option<u64>,
    /// Pacing timer in microseconds.
    pub pacing_timer: i64,
    /// Ignored by iperf3; informative only.
    pub client_version: Option<String>,
    pub reverse: bool,
    pub bidirectional: bool,
    pub nodelay: bool,
    /// `MSS` on the wire.
    pub mss: Option<i64>,
    /// Socket buffer bytes.
    pub window: Option<i64>,
    /// fq socket pacing rate, bit/s.
    pub fqrate: Option<u64>,
    pub burst: Option<i64>,
    /// `TOS` on the wire.
    pub tos: Option<i64>,
    pub flowlabel: Option<i64>,
    pub title: Option<String>,
    pub extra_data: Option<String>,
    pub congestion: Option<String>,
    pub congestion_used: Option<String>,
    pub server_affinity: Option<i64>,
    /// Sent as the number `1` by iperf3.
    pub get_server_output: bool,
    /// Sent as the number `1` by iperf3.
    pub udp_counters_64bit: bool,
    /// Sent as the number `1` by iperf3.
    pub repeating_payload: bool,
    /// `-Z`: 0 off; iperf3 sends the mode as a number (1, or another
    /// value for a zero-copy variant) and its server keeps the value.
    pub zerocopy: i64,
    /// Sent as the number `1` by iperf3.
    pub dont_fragment: bool,
    /// 3.19+, `"mptcp":true`.
    pub mptcp: bool,
    /// 3.19+, sent as a number.
    pub skip_rx_copy: bool,
    /// 3.21 UDP: always sent (0 when off).
    pub gso: Option<i64>,
    pub gso_dg_size: Option<i64>,
    pub gso_bf_size: Option<i64>,
    pub gro: Option<i64>,
    pub gro_bf_size: Option<i64>,
    /// Base64 of an RSA-encrypted credential (`--username`).
    pub authtoken: Option<String>,
}

/// iperf3's default test length.
pub const DEFAULT_TIME: i64 = 10;
/// iperf3's default pacing timer, µs.
pub const DEFAULT_PACING_TIMER: i64 = 1000;

impl Default for Params {
    fn default() -> Self {
        Params {
            protocol: Protocol::Tcp,
            omit: 0,
            time: DEFAULT_TIME,
            num: 0,
            blockcount: 0,
            parallel: 1,
            len: None,
            bandwidth: None,
            pacing_timer: DEFAULT_PACING_TIMER,
            client_version: Some(concat!("xferlab ", env!("CARGO_PKG_VERSION")).to_string()),
            reverse: false,
            bidirectional: false,
            nodelay: false,
            mss: None,
            window: None,
            fqrate: None,
            burst: None,
            tos: None,
            flowlabel: None,
            title: None,
            extra_data: None,
            congestion: None,
            congestion_used: None,
            server_affinity: None,
            get_server_output: false,
            udp_counters_64bit: false,
            repeating_payload: false,
            zerocopy: 0,
            dont_fragment: false,
            mptcp: false,
            skip_rx_copy: false,
            gso: None,
            gso_dg_size: None,
            gso_bf_size: None,
            gro: None,
            gro_bf_size: None,
            authtoken: None,
        }
    }
}

impl Params {
    /// Parses a parameters message body (leniently, see the type's docs).
    pub fn from_json(body: &[u8]) -> Result<Params, JsonError> {
        Params::from_map(&parse_object(body)?)
    }

    pub fn from_map(map: &Map<String, Value>) -> Result<Params, JsonError> {
        let f = Fields {
            map,
            what: "parameters",
        };
        let d = Params::default();
        // iperf3 sets the protocol for each key present: "tcp", "udp",
        // then "sctp", so the last one present wins.
        let protocol = if f.flag("sctp")? {
            Protocol::Sctp
        } else if f.flag("udp")? {
            Protocol::Udp
        } else {
            Protocol::Tcp
        };
        f.flag("tcp")?;
        Ok(Params {
            protocol,
            omit: f.opt_i64("omit")?.unwrap_or(d.omit),
            time: f.opt_i64("time")?.unwrap_or(d.time),
            num: f.opt_u64("num")?.unwrap_or(0),
            blockcount: f.opt_u64("blockcount")?.unwrap_or(0),
            parallel: f.opt_i64("parallel")?.unwrap_or(d.parallel),
            len: f.opt_i64("len")?,
            bandwidth: f.opt_u64("bandwidth")?,
            pacing_timer: f.opt_i64("pacing_timer")?.unwrap_or(d.pacing_timer),
            client_version: f.opt_string("client_version")?,
            reverse: f.flag("reverse")?,
            bidirectional: f.flag("bidirectional")?,
            nodelay: f.flag("nodelay")?,
            mss: f.opt_i64("MSS")?,
            window: f.opt_i64("window")?,
            fqrate: f.opt_u64("fqrate")?,
            burst: f.opt_i64("burst")?,
            tos: f.opt_i64("TOS")?,
            flowlabel: f.opt_i64("flowlabel")?,
            title: f.opt_string("title")?,
            extra_data: f.opt_string("extra_data")?,
            congestion: f.opt_string("congestion")?,
            congestion_used: f.opt_string("congestion_used")?,
            server_affinity: f.opt_i64("server_affinity")?,
            get_server_output: f.flag("get_server_output")?,
            udp_counters_64bit: f.flag("udp_counters_64bit")?,
            repeating_payload: f.flag("repeating_payload")?,
            zerocopy: f.flag_value("zerocopy")?,
            dont_fragment: f.flag("dont_fragment")?,
            mptcp: f.flag("mptcp")?,
            skip_rx_copy: f.flag("skip_rx_copy")?,
            gso: f.opt_i64("gso")?,
            gso_dg_size: f.opt_i64("gso_dg_size")?,
            gso_bf_size: f.opt_i64("gso_bf_size")?,
            gro: f.opt_i64("gro")?,
            gro_bf_size: f.opt_i64("gro_bf_size")?,
            authtoken: f.opt_string("authtoken")?,
        })
    }

    /// The JSON text as sent (without the length prefix).
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("parameters always serialize")
    }

    /// Data connections the client opens: `parallel`, twice that for
    /// `--bidir`. Negative `parallel` counts as 0.
    pub fn stream_count(&self) -> usize {
        let n = usize::try_from(self.parallel).unwrap_or(0);
        if self.bidirectional {
            n.saturating_mul(2)
        } else {
            n
        }
    }

    /// Which way stream number `index` (creation order) carries payload.
    /// With `--bidir` the client opens its sending streams first.
    pub fn stream_direction(&self, index: usize) -> Direction {
        let first_half = usize::try_from(self.parallel).map_or(true, |n| index < n);
        if (self.bidirectional && first_half) || (!self.bidirectional && !self.reverse) {
            Direction::ClientToServer
        } else {
            Direction::ServerToClient
        }
    }

    /// Every stream of the test in creation order.
    pub fn streams(&self) -> Vec<StreamInfo> {
        (0..self.stream_count())
            .map(|index| self.stream_info(index))
            .collect()
    }

    pub fn stream_info(&self, index: usize) -> StreamInfo {
        StreamInfo {
            index,
            id: stream_id(index),
            direction: self.stream_direction(index),
        }
    }

    /// `omit + time` when the test is timed (`time > 0`).
    pub fn planned_duration(&self) -> Option<Duration> {
        (self.time > 0).then(|| secs(self.omit).saturating_add(secs(self.time)))
    }

    /// How long a server should let a running test go before giving up on
    /// the client: the planned duration plus `grace`, or `unbounded` for
    /// tests ended by a byte or block limit.
    pub fn watchdog(&self, grace: Duration, unbounded: Duration) -> Duration {
        self.planned_duration()
            .map_or(unbounded, |d| d.saturating_add(grace))
    }
}

fn secs(s: i64) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

impl Serialize for Params {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        match self.protocol {
            Protocol::Tcp => m.serialize_entry("tcp", &true)?,
            Protocol::Udp => m.serialize_entry("udp", &true)?,
            Protocol::Sctp => m.serialize_entry("sctp", &true)?,
        }
        m.serialize_entry("omit", &self.omit)?;
        if let Some(v) = self.server_affinity {
            m.serialize_entry("server_affinity", &v)?;
        }
        m.serialize_entry("time", &self.time)?;
        m.serialize_entry("num", &self.num)?;
        m.serialize_entry("blockcount", &self.blockcount)?;
        if let Some(v) = self.mss {
            m.serialize_entry("MSS", &v)?;
        }
        if self.nodelay {
            m.serialize_entry("nodelay", &true)?;
        }
        m.serialize_entry("parallel", &self.parallel)?;
        if self.reverse {
            m.serialize_entry("reverse", &true)?;
        }
        if self.bidirectional {
            m.serialize_entry("bidirectional", &true)?;
        }
        if let Some(v) = self.window {
            m.serialize_entry("window", &v)?;
        }
        if let Some(v) = self.len {
            m.serialize_entry("len", &v)?;
        }
        if let Some(v) = self.bandwidth {
            m.serialize_entry("bandwidth", &v)?;
        }
        if let Some(v) = self.fqrate {
            m.serialize_entry("fqrate", &v)?;
        }
        m.serialize_entry("pacing_timer", &self.pacing_timer)?;
        if let Some(v) = self.burst {
            m.serialize_entry("burst", &v)?;
        }
        if let Some(v) = self.tos {
            m.serialize_entry("TOS", &v)?;
        }
        if let Some(v) = self.flowlabel {
            m.serialize_entry("flowlabel", &v)?;
        }
        for (k, v) in [
            ("title", &self.title),
            ("extra_data", &self.extra_data),
            ("congestion", &self.congestion),
            ("congestion_used", &self.congestion_used),
        ] {
            if let Some(v) = v {
                m.serialize_entry(k, v)?;
            }
        }
        for (k, on) in [
            ("get_server_output", self.get_server_output),
            ("udp_counters_64bit", self.udp_counters_64bit),
            ("repeating_payload", self.repeating_payload),
        ] {
            if on {
                m.serialize_entry(k, &1)?;
            }
        }
        if self.zerocopy != 0 {
            m.serialize_entry("zerocopy", &self.zerocopy)?;
        }
        if self.dont_fragment {
            m.serialize_entry("dont_fragment", &1)?;
        }
        if self.mptcp {
            m.serialize_entry("mptcp", &true)?;
        }
        if self.skip_rx_copy {
            m.serialize_entry("skip_rx_copy", &1)?;
        }
        for (k, v) in [
            ("gso", self.gso),
            ("gso_dg_size", self.gso_dg_size),
            ("gso_bf_size", self.gso_bf_size),
            ("gro", self.gro),
            ("gro_bf_size", self.gro_bf_size),
        ] {
            if let Some(v) = v {
                m.serialize_entry(k, &v)?;
            }
        }
        if let Some(v) = &self.client_version {
            m.serialize_entry("client_version", v)?;
        }
        if let Some(v) = &self.authtoken {
            m.serialize_entry("authtoken", v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Params {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(d)?;
        Params::from_map(&map).map_err(serde::de::Error::custom)
    }
}
