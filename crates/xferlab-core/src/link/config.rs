//! What one direction of an emulated link does, as a user configured it,
//! and the parsers for the command-line spelling of each part. The same
//! types go into the result file so it says exactly what was emulated.

use serde::{Deserialize, Serialize};

use super::trace::Trace;
use crate::units;

/// One direction of the link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LinkConfig {
    /// Bottleneck rate in bit/s; None = no shaping (as fast as the
    /// forwarder goes).
    pub rate_bps: Option<u64>,
    /// Bytes added to every wire segment for the rate (framing, e.g. 38 for
    /// Ethernet preamble + header + FCS + gap). The TUN devices carry IP
    /// packets, so 0 counts IP bytes only.
    pub overhead_bytes: u32,
    /// One-way propagation delay, nanoseconds.
    pub delay_ns: u64,
    pub jitter: Option<Jitter>,
    pub loss: LossModel,
    pub queue: QueueLimit,
    pub ecn: EcnMarking,
    /// Probability that a packet skips the delay line (netem's reorder):
    /// it leaves as soon as it is serialized, ahead of earlier packets.
    pub reorder: f64,
    /// Probability that a packet is delivered twice.
    pub duplicate: f64,
    /// Seed of this direction's random decisions.
    pub seed: u64,
    /// How the bottleneck queue decides what leaves: drop-tail (at
    /// arrival), CoDel or FQ-CoDel (at dequeue).
    #[serde(default)]
    pub qdisc: Qdisc,
    /// Delivery opportunities instead of a fixed rate (a mahimahi trace
    /// or a schedule of rates and outages); `rate_bps` is None then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<Trace>,
    /// Frames timed as a USB network link carries them (`--usb-link`)
    /// instead of a rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usb: Option<super::usb::UsbLinkConfig>,
}

/// The bottleneck's queue discipline.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Qdisc {
    /// Drop at arrival when the queue limit is reached.
    #[default]
    DropTail,
    /// CoDel (RFC 8289): drop (or CE-mark ECT packets) at dequeue when
    /// the sojourn time stayed above `target_ns` for `interval_ns`.
    Codel { target_ns: u64, interval_ns: u64 },
    /// FQ-CoDel (RFC 8290): `flows` hashed flow queues, each with its own
    /// CoDel (`target_ns`, `interval_ns`), served by deficit round robin
    /// with `quantum` bytes; a full queue drops from its fattest flow.
    FqCodel {
        target_ns: u64,
        interval_ns: u64,
        quantum: u32,
        flows: u32,
    },
}

impl Qdisc {
    /// CoDel's target and interval, for the disciplines that have them.
    pub fn codel_params(&self) -> Option<(u64, u64)> {
        match *self {
            Qdisc::DropTail => None,
            Qdisc::Codel {
                target_ns,
                interval_ns,
            }
            | Qdisc::FqCodel {
                target_ns,
                interval_ns,
                ..
            } => Some((target_ns, interval_ns)),
        }
    }
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            rate_bps: None,
            overhead_bytes: 0,
            delay_ns: 0,
            jitter: None,
            loss: LossModel::None,
            queue: QueueLimit::Packets(1000),
            ecn: EcnMarking::None,
            reorder: 0.0,
            duplicate: 0.0,
            seed: 1,
            qdisc: Qdisc::DropTail,
            trace: None,
            usb: None,
        }
    }
}

impl LinkConfig {
    /// A bottleneck at all: a fixed rate or a trace.
    pub fn shaped(&self) -> bool {
        self.rate_bps.is_some() || self.trace.is_some() || self.usb.is_some()
    }

    pub fn validate(&self) -> Result<(), LinkError> {
        if self.rate_bps.is_some() && self.trace.is_some() {
            return Err(LinkError::TraceWithRate);
        }
        if self.usb.is_some() && (self.rate_bps.is_some() || self.trace.is_some()) {
            return Err(LinkError::UsbWithRate);
        }
        for (flag, got) in [("--reorder", self.reorder), ("--duplicate", self.duplicate)] {
            if !(0.0..=1.0).contains(&got) {
                return Err(LinkError::ProbabilityRange { flag, got });
            }
        }
        if self.rate_bps == Some(0) {
            return Err(LinkError::ZeroRate);
        }
        if self.reorder > 0.0 && self.delay_ns == 0 {
            return Err(LinkError::ReorderWithoutDelay);
        }
        match self.queue {
            QueueLimit::Packets(0) | QueueLimit::Bytes(0) => return Err(LinkError::EmptyQueue),
            _ => {}
        }
        if let Some((target_ns, interval_ns)) = self.qdisc.codel_params() {
            if !self.shaped() {
                return Err(LinkError::QdiscWithoutRate);
            }
            if matches!(self.ecn, EcnMarking::Red { .. }) {
                return Err(LinkError::QdiscWithRed);
            }
            if target_ns == 0 || interval_ns <= target_ns {
                return Err(LinkError::NotQdisc(format!(
                    "codel:target={target_ns}ns,interval={interval_ns}ns"
                )));
            }
        }
        if let EcnMarking::Red {
            min_bytes,
            max_bytes,
            max_p,
            weight,
        } = self.ecn
        {
            if !(min_bytes < max_bytes
                && (0.0..=1.0).contains(&max_p)
                && weight > 0.0
                && weight <= 1.0)
            {
                return Err(LinkError::RedRange);
            }
        }
        Ok(())
    }
}

/// A link setting that does not parse or does not make sense; the message
/// names the flag or quotes the value and shows what is accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LinkError {
    #[error("{flag} must be a probability between 0 and 100 % (got {got})")]
    ProbabilityRange { flag: &'static str, got: f64 },
    #[error("--rate must be above 0 (leave it out for no shaping)")]
    ZeroRate,
    #[error("--reorder needs --delay: a reordered packet skips the delay")]
    ReorderWithoutDelay,
    #[error("--queue must be at least one packet or byte")]
    EmptyQueue,
    #[error("--red needs min < max, p between 0 and 100 % and 0 < w <= 1 (e.g. --red min=30K,max=90K,p=10%)")]
    RedRange,
    #[error("'{0}' is not a probability: use a percentage (1%), a fraction (0.01) or 1/N")]
    NotProbability(String),
    #[error("'{0}' is not a probability between 0 and 100 %")]
    ProbabilityOutOfRange(String),
    #[error("'{0}' is not a delay: use e.g. 10ms, 250us or 0.5s")]
    NotDelay(String),
    #[error("'{0}': Gilbert-Elliott loss is ge:P,R[,LOSS_BAD[,LOSS_GOOD]] (e.g. ge:1%,30%)")]
    GilbertElliott(String),
    #[error("'{0}' is not a queue limit: use packets (1000p) or bytes (256K)")]
    NotQueue(String),
    #[error("--rate and --trace/--schedule both set the rate of one direction; use one")]
    TraceWithRate,
    #[error("trace {0} (mahimahi format: one millisecond timestamp per line, non-decreasing)")]
    NotTrace(String),
    #[error("'{0}' is not a schedule: use RATE:DURATION steps with off for an outage (e.g. 10M:5s,off:1s,2M:5s)")]
    NotSchedule(String),
    #[error("schedule '{0}' expands to too many delivery opportunities; use fewer or slower steps, or a trace file")]
    ScheduleTooDense(String),
    #[error("--qdisc codel/fq_codel needs --rate: a queue forms only at a shaped bottleneck")]
    QdiscWithoutRate,
    #[error("--qdisc codel/fq_codel and --red both manage the queue; use one")]
    QdiscWithRed,
    #[error("'{0}' is not a queue discipline: use droptail, codel[:target=5ms,interval=100ms] or fq_codel[:target=5ms,interval=100ms,quantum=1514,flows=1024] (target > 0, interval > target, quantum >= 64, 1 <= flows <= 65536)")]
    NotQdisc(String),
    #[error("--usb-link {0} (e.g. hs:ecm, hs:eem:6, hs:ncm:16, optionally :PROFILE of `xferlab model usb --list`)")]
    NotUsbLink(String),
    #[error(
        "--usb-link times frames as the USB bus carries them; leave out --rate/--trace/--schedule"
    )]
    UsbWithRate,
    #[error("'{0}' is not a RED setting: use min=BYTES,max=BYTES,p=PROB[,w=WEIGHT] (e.g. min=30K,max=90K,p=10%), or off")]
    NotRed(String),
}

/// Random variation added to the delay of each packet.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Jitter {
    pub distribution: JitterDistribution,
    /// Uniform: half-width of the range (delay +- amount); normal: the
    /// standard deviation. Nanoseconds.
    pub amount_ns: u64,
    /// 0..1: weight of the previous packet's jitter in this one's (netem's
    /// correlation).
    pub correlation: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JitterDistribution {
    Uniform,
    Normal,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "model", rename_all = "snake_case")]
pub enum LossModel {
    None,
    /// Each packet is lost independently with probability `p`.
    Bernoulli {
        p: f64,
    },
    /// Two states: good -> bad with probability `p`, bad -> good with
    /// `r` (per packet); loss probability `loss_bad` in the bad state and
    /// `loss_good` in the good one.
    GilbertElliott {
        p: f64,
        r: f64,
        loss_bad: f64,
        loss_good: f64,
    },
}

impl LossModel {
    /// The long-run loss fraction.
    pub fn mean_loss(&self) -> f64 {
        match *self {
            LossModel::None => 0.0,
            LossModel::Bernoulli { p } => p,
            LossModel::GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
            } => {
                if p + r == 0.0 {
                    loss_good
                } else {
                    (p * loss_bad + r * loss_good) / (p + r)
                }
            }
        }
    }
}

/// Drop-tail limit of the bottleneck queue (packets waiting for or in
/// serialization). Packets count per wire segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum QueueLimit {
    Packets(u64),
    Bytes(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum EcnMarking {
    None,
    /// Mark CE on an ECT packet with fixed probability `p` ("1 in 50").
    /// With `drop_not_ect`, a Not-ECT packet is dropped with the same
    /// probability, as RED with ECN treats a flow without ECN; without it
    /// Not-ECT packets pass untouched.
    Fixed {
        p: f64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        drop_not_ect: bool,
    },
    /// RED on the average queue (bytes): no marks below `min_bytes`, a
    /// probability rising to `max_p` at `max_bytes`, every packet above.
    /// ECT packets are marked; others that would be marked are dropped.
    Red {
        min_bytes: u64,
        max_bytes: u64,
        max_p: f64,
        weight: f64,
    },
}

/// `1%`, `0.01`, `1/50`: a probability.
pub fn parse_probability(s: &str) -> Result<f64, LinkError> {
    let t = s.trim();
    let help = || LinkError::NotProbability(s.to_owned());
    let p = if let Some(pct) = t.strip_suffix('%') {
        pct.trim().parse::<f64>().map_err(|_| help())? / 100.0
    } else if let Some((a, b)) = t.split_once('/') {
        let a: f64 = a.trim().parse().map_err(|_| help())?;
        let b: f64 = b.trim().parse().map_err(|_| help())?;
        if b <= 0.0 {
            return Err(help());
        }
        a / b
    } else {
        t.parse::<f64>().map_err(|_| help())?
    };
    if !(0.0..=1.0).contains(&p) {
        return Err(LinkError::ProbabilityOutOfRange(s.to_owned()));
    }
    Ok(p)
}

/// `10ms`, `250us`, `0.5s`, `2` (seconds): nanoseconds.
pub fn parse_delay(s: &str) -> Result<u64, LinkError> {
    let t = s.trim();
    let v: Option<f64> = if let Some(n) = t.strip_suffix("us") {
        n.trim().parse::<f64>().ok().map(|v| v * 1e3)
    } else if let Some(n) = t.strip_suffix("ns") {
        n.trim().parse::<f64>().ok()
    } else {
        units::parse_seconds(t).ok().map(|v| v * 1e9)
    };
    match v {
        Some(ns) if (0.0..3.6e12).contains(&ns) => Ok(ns.round() as u64),
        _ => Err(LinkError::NotDelay(s.to_owned())),
    }
}

/// `1%` (Bernoulli) or `ge:P,R[,LOSS_BAD[,LOSS_GOOD]]` (Gilbert-Elliott).
pub fn parse_loss(s: &str) -> Result<LossModel, LinkError> {
    if let Some(rest) = s.strip_prefix("ge:") {
        let parts: Vec<&str> = rest.split(',').collect();
        if !(2..=4).contains(&parts.len()) {
            return Err(LinkError::GilbertElliott(s.to_owned()));
        }
        let p = parse_probability(parts[0])?;
        let r = parse_probability(parts[1])?;
        let loss_bad = parts
            .get(2)
            .map(|v| parse_probability(v))
            .transpose()?
            .unwrap_or(1.0);
        let loss_good = parts
            .get(3)
            .map(|v| parse_probability(v))
            .transpose()?
            .unwrap_or(0.0);
        return Ok(LossModel::GilbertElliott {
            p,
            r,
            loss_bad,
            loss_good,
        });
    }
    let p = parse_probability(s)?;
    Ok(if p == 0.0 {
        LossModel::None
    } else {
        LossModel::Bernoulli { p }
    })
}

/// `1000p` / `1000` (packets) or `256K`, `1M`, `64KB` (bytes).
pub fn parse_queue(s: &str) -> Result<QueueLimit, LinkError> {
    let t = s.trim();
    let help = || LinkError::NotQueue(s.to_owned());
    if let Some(n) = t.strip_suffix('p') {
        return n
            .parse::<u64>()
            .map(QueueLimit::Packets)
            .map_err(|_| help());
    }
    if let Ok(n) = t.parse::<u64>() {
        return Ok(QueueLimit::Packets(n));
    }
    units::parse_size(t)
        .map(QueueLimit::Bytes)
        .map_err(|_| help())
}

/// `droptail`, `codel[:target=5ms,interval=100ms]` (RFC 8289's
/// defaults) or `fq_codel[:target=5ms,interval=100ms,quantum=1514,flows=1024]`
/// (RFC 8290's and Linux's defaults).
pub fn parse_qdisc(s: &str) -> Result<Qdisc, LinkError> {
    let help = || LinkError::NotQdisc(s.to_owned());
    let t = s.trim();
    if t == "droptail" || t == "fifo" {
        return Ok(Qdisc::DropTail);
    }
    let (name, rest) = match t.split_once(':') {
        Some((n, r)) => (n, r),
        None => (t, ""),
    };
    let fq = match name.replace('-', "_").as_str() {
        "codel" => false,
        "fq_codel" => true,
        _ => return Err(help()),
    };
    let (mut target_ns, mut interval_ns) = (5_000_000, 100_000_000);
    let (mut quantum, mut flows) = (1514u32, 1024u32);
    for kv in rest.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = kv.split_once('=').ok_or_else(help)?;
        match (k.trim(), fq) {
            ("target", _) => target_ns = parse_delay(v).map_err(|_| help())?,
            ("interval", _) => interval_ns = parse_delay(v).map_err(|_| help())?,
            ("quantum", true) => {
                quantum = units::parse_size(v)
                    .ok()
                    .and_then(|q| u32::try_from(q).ok())
                    .filter(|&q| q >= 64)
                    .ok_or_else(help)?
            }
            ("flows", true) => {
                flows = v
                    .trim()
                    .parse()
                    .ok()
                    .filter(|f| (1..=65_536).contains(f))
                    .ok_or_else(help)?
            }
            _ => return Err(help()),
        }
    }
    if target_ns == 0 || interval_ns <= target_ns {
        return Err(help());
    }
    Ok(if fq {
        Qdisc::FqCodel {
            target_ns,
            interval_ns,
            quantum,
            flows,
        }
    } else {
        Qdisc::Codel {
            target_ns,
            interval_ns,
        }
    })
}

/// `min=30K,max=90K,p=10%[,w=0.002]`.
pub fn parse_red(s: &str) -> Result<EcnMarking, LinkError> {
    let help = || LinkError::NotRed(s.to_owned());
    // `off`: no marker, so a scenario can put drop-tail and RED on one axis.
    if s.trim() == "off" {
        return Ok(EcnMarking::None);
    }
    let (mut min, mut max, mut p, mut w) = (None, None, None, 0.002);
    for kv in s.split(',') {
        let (k, v) = kv.split_once('=').ok_or_else(help)?;
        match k.trim() {
            "min" => min = Some(units::parse_size(v).map_err(|_| help())?),
            "max" => max = Some(units::parse_size(v).map_err(|_| help())?),
            "p" => p = Some(parse_probability(v)?),
            "w" => w = v.trim().parse::<f64>().map_err(|_| help())?,
            _ => return Err(help()),
        }
    }
    match (min, max, p) {
        (Some(min_bytes), Some(max_bytes), Some(max_p)) => Ok(EcnMarking::Red {
            min_bytes,
            max_bytes,
            max_p,
            weight: w,
        }),
        _ => Err(help()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn red_off_is_no_marker() {
        assert_eq!(parse_red("off").unwrap(), EcnMarking::None);
        assert!(matches!(
            parse_red("min=60K,max=180K,p=10%").unwrap(),
            EcnMarking::Red {
                min_bytes: 61_440,
                ..
            }
        ));
        assert!(parse_red("of").is_err());
    }

    #[test]
    fn parses_the_spellings() {
        assert_eq!(parse_probability("1%").unwrap(), 0.01);
        assert_eq!(parse_probability("1/50").unwrap(), 0.02);
        assert_eq!(parse_probability("0.25").unwrap(), 0.25);
        assert!(parse_probability("150%").is_err());
        assert_eq!(parse_delay("10ms").unwrap(), 10_000_000);
        assert_eq!(parse_delay("250us").unwrap(), 250_000);
        assert!(parse_delay("-1ms").is_err());
        assert_eq!(parse_loss("1%").unwrap(), LossModel::Bernoulli { p: 0.01 });
        assert_eq!(
            parse_loss("ge:1%,25%").unwrap(),
            LossModel::GilbertElliott {
                p: 0.01,
                r: 0.25,
                loss_bad: 1.0,
                loss_good: 0.0
            }
        );
        assert_eq!(parse_queue("100p").unwrap(), QueueLimit::Packets(100));
        assert_eq!(parse_queue("64K").unwrap(), QueueLimit::Bytes(65536));
        assert!(matches!(
            parse_red("min=30K,max=90K,p=10%").unwrap(),
            EcnMarking::Red {
                min_bytes: 30720,
                ..
            }
        ));
        assert!(parse_red("min=30K").is_err());
        assert_eq!(
            parse_qdisc("codel").unwrap(),
            Qdisc::Codel {
                target_ns: 5_000_000,
                interval_ns: 100_000_000
            }
        );
        assert_eq!(
            parse_qdisc("codel:target=2ms,interval=40ms").unwrap(),
            Qdisc::Codel {
                target_ns: 2_000_000,
                interval_ns: 40_000_000
            }
        );
        assert_eq!(parse_qdisc("droptail").unwrap(), Qdisc::DropTail);
        assert_eq!(
            parse_qdisc("fq_codel").unwrap(),
            Qdisc::FqCodel {
                target_ns: 5_000_000,
                interval_ns: 100_000_000,
                quantum: 1514,
                flows: 1024
            }
        );
        assert_eq!(
            parse_qdisc("fq-codel:quantum=300,flows=16,target=1ms").unwrap(),
            Qdisc::FqCodel {
                target_ns: 1_000_000,
                interval_ns: 100_000_000,
                quantum: 300,
                flows: 16
            }
        );
        assert!(parse_qdisc("fq_codel:flows=0").is_err());
        assert!(
            parse_qdisc("codel:flows=16").is_err(),
            "a codel has no flows"
        );
        assert!(parse_qdisc("fq_codel:quantum=10").is_err());
        assert!(parse_qdisc("codel:target=0ms").is_err());
        assert!(parse_qdisc("fq").is_err());
    }

    #[test]
    fn ge_mean_loss() {
        let m = LossModel::GilbertElliott {
            p: 0.01,
            r: 0.24,
            loss_bad: 1.0,
            loss_good: 0.0,
        };
        assert!((m.mean_loss() - 0.04).abs() < 1e-12);
    }
}
