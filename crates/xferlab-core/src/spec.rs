//! What a test asks for: pattern x transport x knobs (docs/design.md).
//!
//! A [`TestSpec`] is built by the client from its command line, sent to the
//! server in the control protocol's `Hello`, validated by both sides with
//! [`TestSpec::validate`], and copied verbatim into the result so a result
//! file says exactly what was measured.

use serde::{Deserialize, Serialize};

pub mod rr;

/// Upper bounds that keep a test (and a server serving strangers) sane.
pub mod limits {
    pub use crate::knobs::limits::*;

    /// Parallel flows per direction (`-P`).
    pub const MAX_PARALLEL: u32 = 128;
    /// Highest CPU number `-A` takes (glibc's cpu_set_t holds 1024).
    pub const MAX_CPU: u32 = 1023;
    /// Test duration a client may ask for (`-t`); servers may lower it.
    pub const MAX_DURATION_S: f64 = 86_400.0;
    /// Warm-up (`-O`).
    pub const MAX_OMIT_S: f64 = 600.0;
    /// Reporting interval (`-i`), when not 0 (= no intervals).
    pub const MIN_INTERVAL_S: f64 = 0.05;
    pub const MAX_INTERVAL_S: f64 = 3600.0;
    pub const MAX_TITLE: usize = 256;
}

/// What the application does, with the settings only that pattern has
/// (`"pattern": {"kind": "rr", ...}` in a result).
///
/// Add a variant for a new pattern, with its own settings type, and its
/// entry in the binary's pattern registry (`xferlab::patterns`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Pattern {
    /// Move as much as possible, one way, reverse or both ways.
    Stream,
    /// Request/response transactions; `parallel` counts the optional
    /// background stream flows (0 = none), as it counts a stream test's.
    Rr(rr::RrSpec),
}

impl Pattern {
    /// The name results and the command line use: `stream`, `rr`.
    pub fn name(&self) -> &'static str {
        match self {
            Pattern::Stream => "stream",
            Pattern::Rr(_) => "rr",
        }
    }

    /// The request/response settings of an rr test.
    pub fn rr(&self) -> Option<&rr::RrSpec> {
        match self {
            Pattern::Rr(rr) => Some(rr),
            Pattern::Stream => None,
        }
    }
}

pub use crate::knobs::{KnobError, Knobs, OwnKnobs, RecvMode, RxStamps, SendMode};
pub use crate::transport::Transport;

/// Which way data flows, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Client sends, server receives (the default).
    Forward,
    /// Server sends, client receives (`-R`).
    Reverse,
    /// Both at once, `parallel` flows each way (`--bidir`).
    Bidir,
}

/// Direction of one flow.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FlowDirection {
    /// client -> server
    C2s,
    /// server -> client
    S2c,
}

impl FlowDirection {
    pub fn label(self) -> &'static str {
        match self {
            FlowDirection::C2s => "c2s",
            FlowDirection::S2c => "s2c",
        }
    }
}

/// When a test ends.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// Measured seconds, after the warm-up (`-t`).
    Duration { seconds: f64 },
    /// Bytes per direction, split evenly over the parallel flows (`-n`).
    Bytes { bytes: u64 },
    /// Until Ctrl-C: the USB verbs that watch or serve without `-t`
    /// (`usb mon`, `usb net`, `usb gadget`). Socket tests are refused it
    /// ([`SpecError::Open`]), so the control protocol never carries it.
    Open,
}

/// A complete test request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TestSpec {
    pub pattern: Pattern,
    pub transport: Transport,
    pub direction: Direction,
    /// Stream flows per direction (an rr test's background flows).
    pub parallel: u32,
    pub limit: Limit,
    /// Warm-up seconds excluded from totals.
    pub omit_s: f64,
    /// Reporting interval in seconds; 0 = no interval reports.
    pub interval_s: f64,
    pub knobs: Knobs,
    /// Free text carried into the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// CPUs the data threads run on (`-A`).
    #[serde(default, skip_serializing_if = "Affinity::is_unset")]
    pub affinity: Affinity,
}

/// The CPU each end's data threads (flow and rr engine threads) are
/// pinned to, as iperf3's `-A n[,m]`; None leaves placement to the
/// scheduler. Placement is part of what is measured: a ping-pong whose
/// two ends share a CPU never pays a cross-CPU wake-up.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Affinity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = limits::MAX_CPU))]
    pub client: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = limits::MAX_CPU))]
    pub server: Option<u32>,
    /// Each end pins flow i's data thread to the (i mod n)-th of the n
    /// CPUs it may use (`--pin-flows`); an end with its own CPU above
    /// keeps that one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flows: bool,
}

impl Affinity {
    pub fn is_unset(&self) -> bool {
        self.client.is_none() && self.server.is_none() && !self.flows
    }
}

/// One flow of a test, as both sides number it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowPlan {
    /// 0-based flow id, stable across both sides.
    pub id: u32,
    pub direction: FlowDirection,
    /// Byte quota for `Limit::Bytes`; None for duration tests.
    pub quota: Option<u64>,
}

/// Why a [`TestSpec`] cannot run. The message names the flag and the
/// accepted range, so both the CLI and a server answering a remote client
/// can pass it on as is.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error(transparent)]
    Rr(#[from] rr::RrSpecError),
    #[error("-P/--parallel must be between 1 and {max} (got {0})", max = limits::MAX_PARALLEL)]
    Parallel(u32),
    #[error("-A/--affinity takes CPU numbers from 0 to {max} (got {0})", max = limits::MAX_CPU)]
    Cpu(u32),
    #[error("-t/--time must be a positive number of seconds up to {max} (got {0})", max = limits::MAX_DURATION_S)]
    Time(f64),
    #[error("-n/--bytes must be greater than 0")]
    NoBytes,
    #[error("-t/--time or -n/--bytes: a {0} test must end on its own (runs until Ctrl-C are for USB verbs)")]
    Open(&'static str),
    #[error("-O/--omit must be between 0 and {max} seconds (got {0})", max = limits::MAX_OMIT_S)]
    Omit(f64),
    #[error("-i/--interval must be 0 (off) or between {min} and {max} seconds (got {0})", min = limits::MIN_INTERVAL_S, max = limits::MAX_INTERVAL_S)]
    Interval(f64),
    #[error("-l/--length must be between 1 byte and {max} MiB (got {0})", max = limits::MAX_WRITE_SIZE >> 20)]
    Length(u64),
    #[error("-w/--window must be between 1 byte and {max} MiB (got {0})", max = limits::MAX_SOCKET_BUFFER >> 20)]
    Window(u64),
    #[error("-C/--congestion: '{0}' is not a congestion-control name (letters, digits, '_' or '-', at most {max})", max = limits::MAX_CC_NAME)]
    Congestion(String),
    #[error("-M/--set-mss must be between 88 and 65495 bytes (got {0})")]
    Mss(u32),
    #[error("-b, --gso, --batch, --dont-fragment and --rx-stamps are stream options; rr sends one request per transaction")]
    StreamOptionsInRr,
    #[error("--read-size must be between 1 and 64M bytes (got {0})")]
    ReadSize(u64),
    #[error("--rcvlowat must be between 0 (off) and 64M bytes (got {0})")]
    Rcvlowat(u64),
    #[error("--fq-rate must be greater than 0")]
    NoFqRate,
    #[error("-T/--title is limited to {max} bytes", max = limits::MAX_TITLE)]
    TitleTooLong,
    /// Knobs refused by the test's transport's model.
    #[error(transparent)]
    Knob(#[from] KnobError),
}

impl TestSpec {
    /// The defaults: TCP stream, forward, 1 flow, 10 s, 1 s intervals,
    /// 128 KiB blocks (iperf3's); each end sizes its writes and reads from
    /// its own L2 cache (`-l` and `--read-size` set them instead).
    pub fn default_stream() -> Self {
        TestSpec {
            pattern: Pattern::Stream,
            transport: Transport::Tcp,
            direction: Direction::Forward,
            parallel: 1,
            limit: Limit::Duration { seconds: 10.0 },
            omit_s: 0.0,
            interval_s: 1.0,
            knobs: Knobs::default(),
            title: None,
            affinity: Affinity::default(),
        }
    }

    /// Checks every field against [`limits`]. The message names the flag and
    /// the accepted range, so both the CLI and a server answering a remote
    /// client can pass it on as is.
    pub fn validate(&self) -> Result<(), SpecError> {
        use limits::*;
        match &self.pattern {
            Pattern::Rr(rr) => rr.validate(self)?,
            Pattern::Stream => {
                if self.parallel == 0 || self.parallel > MAX_PARALLEL {
                    return Err(SpecError::Parallel(self.parallel));
                }
            }
        }
        for cpu in [self.affinity.client, self.affinity.server]
            .into_iter()
            .flatten()
        {
            if cpu > MAX_CPU {
                return Err(SpecError::Cpu(cpu));
            }
        }
        match self.limit {
            Limit::Duration { seconds } => {
                if !(seconds.is_finite() && seconds > 0.0 && seconds <= MAX_DURATION_S) {
                    return Err(SpecError::Time(seconds));
                }
            }
            Limit::Bytes { bytes } => {
                if bytes == 0 {
                    return Err(SpecError::NoBytes);
                }
            }
            // A socket test's server must know when it ends; only the
            // USB verbs, which have no peer, run until Ctrl-C.
            Limit::Open => {
                if self.transport.carrier() != crate::transport::Carrier::UsbBulk {
                    return Err(SpecError::Open(self.transport.label()));
                }
            }
        }
        if !(self.omit_s.is_finite() && self.omit_s >= 0.0 && self.omit_s <= MAX_OMIT_S) {
            return Err(SpecError::Omit(self.omit_s));
        }
        if !(self.interval_s == 0.0
            || (self.interval_s.is_finite()
                && (MIN_INTERVAL_S..=MAX_INTERVAL_S).contains(&self.interval_s)))
        {
            return Err(SpecError::Interval(self.interval_s));
        }
        let k = &self.knobs;
        if k.size == 0 || k.size > MAX_WRITE_SIZE {
            return Err(SpecError::Length(k.size));
        }
        if let Some(r) = k.read_size {
            if r == 0 || r > MAX_READ_SIZE {
                return Err(SpecError::ReadSize(r));
            }
        }
        if let Some(w) = k.write_size {
            if w == 0 || w > MAX_WRITE_SIZE {
                return Err(SpecError::Length(w));
            }
        }
        if k.rcvlowat.is_some_and(|l| l > MAX_READ_SIZE) {
            return Err(SpecError::Rcvlowat(k.rcvlowat.unwrap_or(0)));
        }
        if let Some(b) = k.buffer {
            if b == 0 || b > MAX_SOCKET_BUFFER {
                return Err(SpecError::Window(b));
            }
        }
        if let Some(cc) = &k.congestion {
            let ok = !cc.is_empty()
                && cc.len() <= MAX_CC_NAME
                && cc
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !ok {
                return Err(SpecError::Congestion(cc.clone()));
            }
        }
        if let Some(mss) = k.mss {
            if !(88..=65_495).contains(&mss) {
                return Err(SpecError::Mss(mss));
            }
        }
        if let Pattern::Rr(_) = self.pattern {
            // Background flows are TCP streams; the UDP knobs of the stream
            // pattern do not apply to transactions.
            if k.rate.is_some() || k.gso || k.batch != 1 || k.dont_fragment || k.rx_stamps.is_some()
            {
                return Err(SpecError::StreamOptionsInRr);
            }
        } else {
            self.transport.model().check_knobs(k)?;
        }
        crate::transport::check_owner(&k.own, self.transport)?;
        if k.max_pacing_rate == Some(0) {
            return Err(SpecError::NoFqRate);
        }
        if let Some(t) = &self.title {
            if t.len() > MAX_TITLE {
                return Err(SpecError::TitleTooLong);
            }
        }
        Ok(())
    }

    /// The flows of this test, numbered the same way on both sides:
    /// forward flows first, then reverse flows.
    pub fn flows(&self) -> Vec<FlowPlan> {
        let dirs: &[FlowDirection] = match self.direction {
            Direction::Forward => &[FlowDirection::C2s],
            Direction::Reverse => &[FlowDirection::S2c],
            Direction::Bidir => &[FlowDirection::C2s, FlowDirection::S2c],
        };
        let p = self.parallel as u64;
        let mut out = Vec::new();
        for &direction in dirs {
            for i in 0..p {
                let quota = match self.limit {
                    // Split evenly; the first flows take the remainder.
                    Limit::Bytes { bytes } => Some(bytes / p + u64::from(i < bytes % p)),
                    Limit::Duration { .. } | Limit::Open => None,
                };
                out.push(FlowPlan {
                    id: out.len() as u32,
                    direction,
                    quota,
                });
            }
        }
        out
    }

    /// Seconds from start to the planned end of a duration test, warm-up
    /// included; None for byte-limited and open tests.
    pub fn planned_seconds(&self) -> Option<f64> {
        match self.limit {
            Limit::Duration { seconds } => Some(self.omit_s + seconds),
            Limit::Bytes { .. } | Limit::Open => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        TestSpec::default_stream().validate().unwrap();
    }

    #[test]
    fn byte_quota_is_split_exactly() {
        let mut s = TestSpec::default_stream();
        s.parallel = 3;
        s.direction = Direction::Bidir;
        s.limit = Limit::Bytes { bytes: 10 };
        let flows = s.flows();
        assert_eq!(flows.len(), 6);
        let c2s: u64 = flows
            .iter()
            .filter(|f| f.direction == FlowDirection::C2s)
            .map(|f| f.quota.unwrap())
            .sum();
        let s2c: u64 = flows
            .iter()
            .filter(|f| f.direction == FlowDirection::S2c)
            .map(|f| f.quota.unwrap())
            .sum();
        assert_eq!((c2s, s2c), (10, 10));
        assert_eq!(
            flows.iter().map(|f| f.id).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4, 5]
        );
        assert_eq!(flows[0].quota, Some(4));
    }

    #[test]
    fn affinity_takes_cpus_up_to_the_cpu_set_size_and_is_left_out_when_unset() {
        let mut s = TestSpec::default_stream();
        assert!(!serde_json::to_string(&s).unwrap().contains("affinity"));
        s.affinity.server = Some(limits::MAX_CPU);
        s.validate().unwrap();
        s.affinity.client = Some(limits::MAX_CPU + 1);
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .contains("-A/--affinity"));
    }

    #[test]
    fn rejects_nonsense_with_the_flag_name() {
        let mut s = TestSpec::default_stream();
        s.parallel = 100_000;
        assert!(s.validate().unwrap_err().to_string().contains("-P"));
        let mut s = TestSpec::default_stream();
        s.limit = Limit::Duration { seconds: -1.0 };
        assert!(s.validate().unwrap_err().to_string().contains("-t"));
        let mut s = TestSpec::default_stream();
        s.knobs.size = 0;
        assert!(s.validate().unwrap_err().to_string().contains("-l"));
        let mut s = TestSpec::default_stream();
        s.knobs.congestion = Some("cubic; rm -rf".into());
        assert!(s.validate().unwrap_err().to_string().contains("-C"));
        let mut s = TestSpec::default_stream();
        s.interval_s = f64::NAN;
        assert!(s.validate().unwrap_err().to_string().contains("-i"));
    }

    /// D1 (issue 33): an open limit is for the USB verbs only; every
    /// socket transport refuses it, so no server is ever asked for one.
    #[test]
    fn open_limit_is_refused_for_socket_tests_and_kept_for_usb() {
        let mut s = TestSpec::default_stream();
        s.limit = Limit::Open;
        assert_eq!(serde_json::to_value(s.limit).unwrap(), "open");
        assert_eq!(s.planned_seconds(), None);
        assert!(s.flows().iter().all(|f| f.quota.is_none()));
        for &t in Transport::ALL {
            s.transport = t;
            let got = s.validate();
            if t.carrier() == crate::transport::Carrier::UsbBulk {
                assert_eq!(got, Ok(()), "{t:?}");
            } else {
                assert!(matches!(got, Err(SpecError::Open(_))), "{t:?}: {got:?}");
            }
        }
        let back: Limit = serde_json::from_str("\"open\"").unwrap();
        assert_eq!(back, Limit::Open);
    }

    /// The CLI, the server's reply and tests show these texts; the typed
    /// errors keep them word for word, limits included.
    #[test]
    fn error_texts_name_the_flag_and_the_range() {
        let mut s = TestSpec::default_stream();
        s.parallel = 0;
        assert_eq!(
            s.validate().unwrap_err().to_string(),
            "-P/--parallel must be between 1 and 128 (got 0)"
        );
        let mut s = TestSpec::default_stream();
        s.limit = Limit::Duration { seconds: 1e6 };
        assert_eq!(
            s.validate().unwrap_err().to_string(),
            "-t/--time must be a positive number of seconds up to 86400 (got 1000000)"
        );
        let mut s = TestSpec::default_stream();
        s.knobs.size = 1 << 30;
        assert_eq!(
            s.validate().unwrap_err().to_string(),
            "-l/--length must be between 1 byte and 64 MiB (got 1073741824)"
        );
        let mut s = TestSpec::default_rr(crate::rr::RrMode::UdpRr);
        if let Pattern::Rr(rr) = &mut s.pattern {
            rr.timeout_s = 0.0;
        }
        assert_eq!(
            s.validate().unwrap_err().to_string(),
            "--timeout must be between 1 ms and 60 s (got 0 s)"
        );
    }
}
