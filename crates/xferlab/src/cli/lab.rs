//! `xferlab lab` flags: the link (both directions, or one with a `c2s:` /
//! `s2c:` prefix on the value), the hosts, the emulator, and the test to
//! run (the rest of the command line: a verb and its flags, parsed here as
//! that verb's own Args).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, ValueEnum};
use xferlab_core::link::config::{
    parse_delay, parse_loss, parse_probability, parse_qdisc, parse_queue, parse_red, EcnMarking,
    Jitter, JitterDistribution, LinkConfig,
};
use xferlab_core::link::trace::Trace;
use xferlab_core::units::{parse_rate, parse_size};

use super::lab_topology::{
    parse_hop, parse_host, split_programs, ProgramWords, TopologyFile, HOP_KEYS, MAX_HOSTS_PER_SIDE,
};
use super::stream::StreamArgs;
use super::{Cli, Command};
use crate::lab::{self, HostSpec, HostTest, Plan, Program, Spin, Sysctls};
use crate::output::Format;

#[derive(Debug, Args)]
#[command(
    after_help = "Link flags apply to both directions; prefix a value with c2s: or s2c: \
    for one direction (e.g. --loss c2s:1%). Examples:\n  \
    xferlab lab --rate 100M --delay 10ms stream -t 5\n  \
    xferlab lab --rate 50M --delay 20ms --mark c2s:1/50 --ecn on stream -C cubic\n  \
    xferlab lab clean"
)]
pub struct LabArgs {
    /// Bottleneck rate, bit/s (100M, 1G); default: unshaped.
    #[arg(long, value_name = "[DIR:]RATE", help_heading = "Link")]
    pub rate: Vec<String>,
    /// Bytes added per wire segment for the rate (e.g. 38 for Ethernet framing).
    #[arg(long, value_name = "[DIR:]BYTES", help_heading = "Link")]
    pub overhead: Vec<String>,
    /// One-way delay (10ms, 250us).
    #[arg(long, value_name = "[DIR:]DELAY", help_heading = "Link")]
    pub delay: Vec<String>,
    /// Delay variation: half-width (uniform) or standard deviation (normal).
    #[arg(long, value_name = "[DIR:]DELAY", help_heading = "Link")]
    pub jitter: Vec<String>,
    #[arg(long, value_enum, default_value_t = Dist::Uniform, help_heading = "Link")]
    pub jitter_dist: Dist,
    /// Correlation of successive jitter draws (0-100 %).
    #[arg(long, value_name = "PROB", default_value = "0", help_heading = "Link")]
    pub jitter_corr: String,
    /// Random loss: 1% (Bernoulli) or ge:P,R[,LOSS_BAD[,LOSS_GOOD]] (Gilbert-Elliott).
    #[arg(long, value_name = "[DIR:]LOSS", help_heading = "Link")]
    pub loss: Vec<String>,
    /// Drop-tail queue limit: packets (1000p) or bytes (256K); default 1000p.
    #[arg(long, value_name = "[DIR:]LIMIT", help_heading = "Link")]
    pub queue: Vec<String>,
    /// Mark CE on ECT packets with a fixed probability (1/50, 2%);
    /// drop:PROB also drops Not-ECT packets with it (RED-style, as a
    /// router with ECN signals flows without ECN).
    #[arg(long, value_name = "[DIR:][drop:]PROB", help_heading = "Link")]
    pub mark: Vec<String>,
    /// RED marking from the average queue: min=30K,max=90K,p=10%[,w=0.002],
    /// or off (drop-tail, as without the flag).
    #[arg(long, value_name = "[DIR:]SPEC", help_heading = "Link")]
    pub red: Vec<String>,
    /// Delivery opportunities from a mahimahi trace file (one ms timestamp
    /// per line, 1500 bytes each, repeating) instead of --rate.
    #[arg(long, value_name = "[DIR:]FILE", help_heading = "Link")]
    pub trace: Vec<String>,
    /// Rates and outages over time, repeating, instead of --rate:
    /// RATE:DURATION,... with off for an outage (10M:5s,off:1s,2M:5s).
    #[arg(long, value_name = "[DIR:]STEPS", help_heading = "Link")]
    pub schedule: Vec<String>,
    /// Queue discipline at the bottleneck: droptail (default),
    /// codel[:target=5ms,interval=100ms] (RFC 8289) or
    /// fq_codel[:target=5ms,interval=100ms,quantum=1514,flows=1024]
    /// (RFC 8290); both need a shaped link.
    #[arg(long, value_name = "[DIR:]QDISC", help_heading = "Link")]
    pub qdisc: Vec<String>,
    /// Share of packets that skip the delay (arrive early, out of order).
    #[arg(long, value_name = "[DIR:]PROB", help_heading = "Link")]
    pub reorder: Vec<String>,
    /// Share of packets delivered twice.
    #[arg(long, value_name = "[DIR:]PROB", help_heading = "Link")]
    pub duplicate: Vec<String>,
    /// Seed of the random decisions (s2c uses SEED + 1).
    #[arg(long, default_value_t = 1, help_heading = "Link")]
    pub seed: u64,
    /// Time each frame as a USB 2.0 network link carries it instead of a
    /// --rate: hs:ecm (a frame per transfer), hs:eem:N, hs:ncm:N (up to N
    /// waiting frames per transfer), optionally :PROFILE of the USB bus
    /// model (default study4). The client is the USB host (c2s = bulk
    /// OUT); both directions share the bus.
    #[arg(long, value_name = "hs:CLASS[:N][:PROFILE]", help_heading = "Link")]
    pub usb_link: Option<String>,

    /// A router namespace between the emulated link and the server
    /// (client -- link -- router -- plain hop -- server).
    #[arg(long, help_heading = "Hosts")]
    pub router: bool,
    /// A client host (repeatable): NAME[:KEY=VALUE,...] with sack, ecn,
    /// cc, buffer-max, mtu or any net.* sysctl (bg:sack=off,ecn=off).
    /// Default: one host named client.
    #[arg(long, value_name = "NAME[:SETTINGS]", help_heading = "Hosts")]
    pub client: Vec<String>,
    /// A server host (repeatable), as --client. Default: one host named server.
    #[arg(long, value_name = "NAME[:SETTINGS]", help_heading = "Hosts")]
    pub server: Vec<String>,
    /// Hosts and hops from a TOML file ([[client]], [[server]], [[hop]];
    /// see docs/lab-topologies.md); flags add to it.
    #[arg(long, value_name = "FILE", help_heading = "Hosts")]
    pub topology: Option<PathBuf>,
    /// N emulated hops (routers) in series; the link flags set hop 1, the
    /// others are unshaped unless set with --hop.
    #[arg(long, value_name = "N", help_heading = "Link")]
    pub chain: Option<usize>,
    /// One hop's settings: K:KEY=VALUE,... with the link flags' names
    /// (--hop 1:mark=1/50 --hop 2:rate=100M,delay=5ms).
    #[arg(long, value_name = "K:SETTINGS", help_heading = "Link")]
    pub hop: Vec<String>,
    /// net.ipv4.tcp_sack on both hosts.
    #[arg(long, value_enum, help_heading = "Hosts")]
    pub sack: Option<OnOff>,
    /// net.ipv4.tcp_ecn on both hosts (on = request ECN, off = never).
    #[arg(long, value_enum, help_heading = "Hosts")]
    pub ecn: Option<OnOff>,
    /// MTU of both hosts' link interfaces.
    #[arg(long, default_value_t = 1500, help_heading = "Hosts")]
    pub mtu: u32,
    /// Largest TCP socket buffer (net.ipv4.tcp_rmem/tcp_wmem maximum) on both hosts.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help_heading = "Hosts")]
    pub buffer_max: Option<u64>,
    /// Any net.* sysctl in the client namespace (repeatable): KEY=VALUE.
    #[arg(long, value_name = "KEY=VALUE", help_heading = "Hosts")]
    pub client_sysctl: Vec<String>,
    /// Any net.* sysctl in the server namespace (repeatable): KEY=VALUE.
    #[arg(long, value_name = "KEY=VALUE", help_heading = "Hosts")]
    pub server_sysctl: Vec<String>,

    /// TSO, UDP segmentation (Linux 6.2 on) and checksum offload on the
    /// TUN devices. On: GSO superpackets (up to 64 KB: TCP, and datagram
    /// transports sent with --gso) cross the emulator whole (fast; rates still count per
    /// wire segment, but loss, marks and timing act per superpacket). Off:
    /// every packet is one wire segment (exact per-packet behaviour, ~5 us
    /// of CPU per packet). Auto: off when a direction is shaped at 500 Mbit/s
    /// or less or has loss, marking, reordering or duplication; else on.
    #[arg(long, value_enum, default_value_t = Offload::Auto, help_heading = "Emulator")]
    pub offload: Offload,
    /// Capture everything forwarded: PREFIX.c2s.pcap and PREFIX.s2c.pcap.
    #[arg(long, value_name = "PREFIX", help_heading = "Emulator")]
    pub pcap: Option<PathBuf>,
    /// Bytes kept per captured packet.
    #[arg(long, default_value_t = 65_535, help_heading = "Emulator")]
    pub pcap_snaplen: u32,
    /// Packet buffers per direction (queue + delay line); default: twice
    /// what the queue and the delay line can hold, at least 4096.
    #[arg(long, help_heading = "Emulator")]
    pub buffers: Option<usize>,
    /// Transmit queue of the TUN devices: the ring between a host's kernel
    /// and the emulator (overflows count as unintended drops).
    #[arg(
        long,
        value_name = "PACKETS",
        default_value_t = 10_000,
        help_heading = "Emulator"
    )]
    pub txqueuelen: u32,
    /// Do not ask for SCHED_FIFO on the forwarding threads.
    #[arg(long, help_heading = "Emulator")]
    pub no_realtime: bool,
    /// Busy-wait the last microseconds before a departure instead of
    /// sleeping: a number, 0 (never), or `auto`, the p99 lateness of this
    /// machine's timer wake-ups measured at start (~55 ms; 10-50 us on
    /// bare metal, 70-140 us seen on a nested VM), at most 200 us. Each
    /// forwarder spins at most a quarter of its time, so on a busy 2-core
    /// machine spinning cannot starve the hosts' own threads.
    #[arg(
        long,
        value_name = "US|auto",
        default_value = "auto",
        value_parser = parse_spin,
        help_heading = "Emulator"
    )]
    pub spin_us: Spin,
    /// Skip the RTT probe before the test.
    #[arg(long, help_heading = "Emulator")]
    pub no_probe: bool,
    /// Exit 0 even when the accuracy targets were missed (the result still
    /// says invalid).
    #[arg(long, help_heading = "Emulator")]
    pub allow_invalid: bool,

    /// The test: a verb and its flags (stream -t 5 -C cubic), or `clean`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "VERB ARGS"
    )]
    pub command: Vec<String>,
}

/// The test a lab runs: its words, as given after the lab flags (the
/// client inside the client namespace runs them), and the same words
/// parsed as `xferlab VERB ...` parses them.
#[derive(Debug)]
pub struct LabTest {
    /// The verb and its flags (`stream -t 5 -C cubic`).
    pub words: Vec<String>,
    /// A test verb over sockets: stream, cbr, sweep or rr.
    pub command: Command,
}

impl LabTest {
    /// The test's network flags (family, output).
    pub fn stream(&self) -> &StreamArgs {
        self.command
            .stream_args()
            .expect("LabArgs::test admits only verbs with stream flags")
    }
}

/// A lab command line that cannot run: the one line naming cause and fix,
/// or the test verb's `--help`, which `lab` prints instead of failing.
#[derive(Debug)]
pub struct LabArgsError {
    pub message: String,
    pub help: Option<clap::Error>,
}

impl From<String> for LabArgsError {
    fn from(message: String) -> Self {
        LabArgsError {
            message,
            help: None,
        }
    }
}

/// Most hops in series.
pub const MAX_HOPS: usize = 8;

/// Everything a lab command line says, checked: the hops, the hosts with
/// their sysctls and what runs where.
#[derive(Debug)]
pub struct CheckedLab {
    /// Hop 1 (the bottleneck) first: (c2s, s2c).
    pub hops: Vec<(LinkConfig, LinkConfig)>,
    pub clients: Vec<HostSpec>,
    pub servers: Vec<HostSpec>,
    pub programs: Vec<Program>,
    /// The tests' words as their verbs parse them, in program order.
    pub parsed: Vec<LabTest>,
    /// The test words were one plain test (no @HOST, no exec): the result
    /// is that test's own document with the lab section.
    pub single: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Offload {
    Auto,
    On,
    Off,
}

/// Largest shaped rate at which `--offload auto` still turns offload off.
const PER_PACKET_MAX_BPS: u64 = 500_000_000;

impl Offload {
    /// Whether the TUN devices get offloads for these link configurations.
    pub fn resolve(self, links: &[&LinkConfig]) -> bool {
        match self {
            Offload::On => true,
            Offload::Off => false,
            Offload::Auto => !links.iter().any(|c| {
                c.rate_bps.is_some_and(|r| r <= PER_PACKET_MAX_BPS)
                    || c.trace.is_some()
                    || c.usb.is_some()
                    || !matches!(c.loss, xferlab_core::link::config::LossModel::None)
                    || !matches!(c.ecn, EcnMarking::None)
                    || c.reorder > 0.0
                    || c.duplicate > 0.0
                    || c.qdisc != xferlab_core::link::config::Qdisc::DropTail
            }),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dist {
    Uniform,
    Normal,
}

/// Applies each `[c2s:|s2c:]VALUE` of one flag to the two configs.
fn apply<T, E: std::fmt::Display>(
    flag: &str,
    values: &[String],
    parse: impl Fn(&str) -> Result<T, E>,
    c2s: &mut LinkConfig,
    s2c: &mut LinkConfig,
    set: impl Fn(&mut LinkConfig, &T),
) -> Result<(), String> {
    for v in values {
        let (dirs, text) = if let Some(t) = v.strip_prefix("c2s:") {
            ((true, false), t)
        } else if let Some(t) = v.strip_prefix("s2c:") {
            ((false, true), t)
        } else {
            ((true, true), v.as_str())
        };
        let x = parse(text).map_err(|e| format!("{flag}: {e}"))?;
        if dirs.0 {
            set(c2s, &x);
        }
        if dirs.1 {
            set(s2c, &x);
        }
    }
    Ok(())
}

/// Applies one link setting (`rate`, `delay`, ... as the flags without
/// `--`; the value may carry a `c2s:`/`s2c:` prefix) to a hop's two
/// directions.
pub fn apply_link_setting(
    key: &str,
    value: &str,
    jitter: (JitterDistribution, f64),
    c2s: &mut LinkConfig,
    s2c: &mut LinkConfig,
) -> Result<(), String> {
    let v = std::slice::from_ref(&value.to_string()).to_vec();
    let flag = format!("--{key}");
    let (a, b) = (c2s, s2c);
    match key {
        "rate" => apply(&flag, &v, parse_rate, a, b, |c, &r| c.rate_bps = Some(r)),
        "overhead" => {
            let bytes = |s: &str| {
                s.parse::<u32>()
                    .map_err(|_| format!("'{s}' is not a number of bytes"))
            };
            apply(&flag, &v, bytes, a, b, |c, &o| c.overhead_bytes = o)
        }
        "delay" => apply(&flag, &v, parse_delay, a, b, |c, &d| c.delay_ns = d),
        "jitter" => {
            let (distribution, correlation) = jitter;
            apply(&flag, &v, parse_delay, a, b, |c, &j| {
                c.jitter = (j > 0).then_some(Jitter {
                    distribution,
                    amount_ns: j,
                    correlation,
                })
            })
        }
        "loss" => apply(&flag, &v, parse_loss, a, b, |c, l| c.loss = *l),
        "queue" => apply(&flag, &v, parse_queue, a, b, |c, q| c.queue = *q),
        "mark" => {
            // `drop:PROB`: Not-ECT packets are dropped where ECT ones are
            // marked (RED with ECN; a router's signal to a flow without ECN).
            let mark = |s: &str| {
                let (drop_not_ect, p) = match s.strip_prefix("drop:") {
                    Some(p) => (true, p),
                    None => (false, s),
                };
                parse_probability(p).map(|p| (p, drop_not_ect))
            };
            apply(&flag, &v, mark, a, b, |c, &(p, drop_not_ect)| {
                c.ecn = if p > 0.0 {
                    EcnMarking::Fixed { p, drop_not_ect }
                } else {
                    EcnMarking::None
                }
            })
        }
        "red" => apply(&flag, &v, parse_red, a, b, |c, r| c.ecn = *r),
        "reorder" => apply(&flag, &v, parse_probability, a, b, |c, &p| c.reorder = p),
        "duplicate" => apply(&flag, &v, parse_probability, a, b, |c, &p| c.duplicate = p),
        "qdisc" => apply(&flag, &v, parse_qdisc, a, b, |c, &q| c.qdisc = q),
        "trace" => {
            let load = |path: &str| {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read trace {path}: {e}"))?;
                Trace::mahimahi(path, &text).map_err(|e| e.to_string())
            };
            apply(&flag, &v, load, a, b, |c, t| c.trace = Some(t.clone()))
        }
        "schedule" => apply(&flag, &v, Trace::schedule, a, b, |c, t| {
            c.trace = Some(t.clone())
        }),
        _ => Err(format!(
            "'{key}' is not a link setting (use {})",
            HOP_KEYS.join(", ")
        )),
    }
}

impl LabArgs {
    fn jitter_model(&self) -> Result<(JitterDistribution, f64), String> {
        let corr =
            parse_probability(&self.jitter_corr).map_err(|e| format!("--jitter-corr: {e}"))?;
        let distribution = match self.jitter_dist {
            Dist::Uniform => JitterDistribution::Uniform,
            Dist::Normal => JitterDistribution::Normal,
        };
        Ok((distribution, corr))
    }

    /// The bottleneck's two directions (hop 1 from the lab's link flags).
    pub fn link_configs(&self) -> Result<(LinkConfig, LinkConfig), String> {
        let mut c2s = LinkConfig {
            seed: self.seed,
            ..LinkConfig::default()
        };
        let mut s2c = LinkConfig {
            seed: self.seed.wrapping_add(1),
            ..LinkConfig::default()
        };
        let jitter = self.jitter_model()?;
        for (key, values) in [
            ("rate", &self.rate),
            ("overhead", &self.overhead),
            ("delay", &self.delay),
            ("jitter", &self.jitter),
            ("loss", &self.loss),
            ("queue", &self.queue),
            ("mark", &self.mark),
            ("red", &self.red),
            ("reorder", &self.reorder),
            ("duplicate", &self.duplicate),
            ("qdisc", &self.qdisc),
            ("trace", &self.trace),
            ("schedule", &self.schedule),
        ] {
            for v in values {
                apply_link_setting(key, v, jitter, &mut c2s, &mut s2c)?;
            }
        }
        if let Some(spec) = &self.usb_link {
            let (out, inn) =
                xferlab_core::link::usb::parse_usb_link(spec).map_err(|e| e.to_string())?;
            c2s.usb = Some(out);
            s2c.usb = Some(inn);
        }
        c2s.validate().map_err(|e| e.to_string())?;
        s2c.validate().map_err(|e| e.to_string())?;
        if !self.mark.is_empty() && !self.red.is_empty() {
            return Err("--mark and --red both set the ECN marker; use one per direction".into());
        }
        if !(576..=65_535).contains(&self.mtu) {
            return Err(format!(
                "--mtu must be between 576 and 65535 (got {})",
                self.mtu
            ));
        }
        if self.txqueuelen == 0 {
            return Err("--txqueuelen must be at least 1".into());
        }
        if let Some(b) = self.buffers {
            if !(16..=1 << 20).contains(&b) {
                return Err(format!(
                    "--buffers must be between 16 and 1048576 (got {b})"
                ));
            }
        }
        Ok((c2s, s2c))
    }

    /// Every hop in series, from the bottleneck (hop 1: the link flags,
    /// then the topology file's first `[[hop]]`, then `--hop 1:...`) on;
    /// later hops start unshaped.
    pub fn hops(&self, file: &TopologyFile) -> Result<Vec<(LinkConfig, LinkConfig)>, String> {
        let first = self.link_configs()?;
        let mut settings = file.hop_settings()?;
        for h in &self.hop {
            let (k, kv) = parse_hop(h)?;
            settings.extend(kv.into_iter().map(|(key, v)| (k, key, v)));
        }
        let n = settings
            .iter()
            .map(|s| s.0)
            .chain([self.chain.unwrap_or(1), file.hop.len()])
            .max()
            .unwrap_or(1);
        if let Some(c) = self.chain {
            if c == 0 || n > c {
                return Err(format!(
                    "--chain {c}: {} (hops are numbered 1..{c})",
                    if c == 0 {
                        "needs at least one hop".to_string()
                    } else {
                        format!("a hop numbered {n} is configured")
                    }
                ));
            }
        }
        if n > MAX_HOPS {
            return Err(format!("at most {MAX_HOPS} hops in series (got {n})"));
        }
        let jitter = self.jitter_model()?;
        let mut hops = vec![first];
        for k in 1..n as u64 {
            let seed = self.seed.wrapping_add(2 * k);
            hops.push((
                LinkConfig {
                    seed,
                    ..LinkConfig::default()
                },
                LinkConfig {
                    seed: seed + 1,
                    ..LinkConfig::default()
                },
            ));
        }
        for (k, key, v) in settings {
            let (a, b) = &mut hops[k - 1];
            apply_link_setting(&key, &v, jitter, a, b).map_err(|e| format!("hop {k}: {e}"))?;
        }
        for (k, (a, b)) in hops.iter().enumerate() {
            for c in [a, b] {
                c.validate().map_err(|e| format!("hop {}: {e}", k + 1))?;
            }
        }
        Ok(hops)
    }

    /// Sysctls every host of a side starts with: (client, server),
    /// KEY -> VALUE (the lab-wide flags, then --client-sysctl or
    /// --server-sysctl).
    pub fn sysctls(&self) -> Result<(Sysctls, Sysctls), String> {
        let mut both = Vec::new();
        if let Some(s) = self.sack {
            both.push(("net.ipv4.tcp_sack".to_string(), on_off(s).to_string()));
        }
        if let Some(s) = self.ecn {
            both.push(("net.ipv4.tcp_ecn".to_string(), on_off(s).to_string()));
        }
        if let Some(max) = self.buffer_max {
            let v = format!("4096 131072 {max}");
            both.push(("net.ipv4.tcp_rmem".to_string(), v.clone()));
            both.push(("net.ipv4.tcp_wmem".to_string(), v));
        }
        let parse = |flag: &str, list: &[String]| -> Result<Vec<(String, String)>, String> {
            list.iter()
                .map(|kv| {
                    let (k, v) = kv.split_once('=').ok_or_else(|| {
                        format!("{flag} '{kv}': use KEY=VALUE (net.ipv4.tcp_sack=0)")
                    })?;
                    if !k.trim().starts_with("net.") {
                        return Err(format!(
                            "{flag} '{kv}': only net.* sysctls are per namespace"
                        ));
                    }
                    Ok((k.trim().to_string(), v.trim().to_string()))
                })
                .collect()
        };
        let mut client = both.clone();
        client.extend(parse("--client-sysctl", &self.client_sysctl)?);
        let mut server = both;
        server.extend(parse("--server-sysctl", &self.server_sysctl)?);
        Ok((client, server))
    }

    /// The hosts of both sides: the topology file's, then the flags'; one
    /// host named after the side when neither names any.
    fn hosts(&self, file: &TopologyFile) -> Result<(Vec<HostSpec>, Vec<HostSpec>), String> {
        let (cbase, sbase) = self.sysctls()?;
        let side = |name: &str, flags: &[String], base: &Sysctls| {
            let mut hosts = file.hosts(name, base)?;
            for f in flags {
                hosts.push(parse_host(&format!("--{name}"), f, base)?);
            }
            if hosts.is_empty() {
                hosts.push(HostSpec {
                    name: name.to_string(),
                    sysctls: base.clone(),
                    mtu: None,
                });
            }
            if hosts.len() > MAX_HOSTS_PER_SIDE {
                return Err(format!(
                    "at most {MAX_HOSTS_PER_SIDE} {name} hosts (got {})",
                    hosts.len()
                ));
            }
            Ok::<_, String>(hosts)
        };
        let clients = side("client", &self.client, &cbase)?;
        let servers = side("server", &self.server, &sbase)?;
        let mut seen = std::collections::HashSet::new();
        for h in clients.iter().chain(&servers) {
            if !seen.insert(h.name.as_str()) {
                return Err(format!(
                    "two lab hosts are named '{}'; host names must differ",
                    h.name
                ));
            }
        }
        Ok((clients, servers))
    }

    /// Checks a lab command line as `lab` does before it builds anything
    /// (the experiment runner checks every point this way before the first
    /// runs). A test's `--help` comes first, as `xferlab stream --help`
    /// would.
    pub fn check(&self) -> Result<CheckedLab, LabArgsError> {
        let words = split_programs(&self.command)?;
        // A test's --help first.
        let mut parsed = Vec::new();
        for w in &words {
            parsed.push(match w {
                ProgramWords::Test { words, .. } => Some(parse_test(words)),
                ProgramWords::Exec { .. } => None,
            });
        }
        for p in parsed.iter_mut() {
            if let Some(Err(LabArgsError { help: Some(_), .. })) = p {
                return Err(p.take().unwrap().unwrap_err());
            }
        }
        let file = match &self.topology {
            Some(path) => TopologyFile::load(path)?,
            None => TopologyFile::default(),
        };
        let hops = self.hops(&file)?;
        let (clients, servers) = self.hosts(&file)?;
        if self.router && hops.len() > 1 {
            return Err(
                "--router and --chain/--hop 2..: use one (--chain emulates every hop)"
                    .to_string()
                    .into(),
            );
        }
        if self.pcap_snaplen == 0 {
            return Err("--pcap-snaplen must be at least 1".to_string().into());
        }
        let is = |list: &[HostSpec], n: &str| list.iter().any(|h| h.name == n);
        let any_host = |n: &str| is(&clients, n) || is(&servers, n);
        let single = matches!(words.as_slice(), [ProgramWords::Test { client: None, .. }]);
        let mut programs = Vec::new();
        let mut parsed_tests = Vec::new();
        for (w, p) in words.into_iter().zip(parsed) {
            match w {
                ProgramWords::Exec { host, argv } => {
                    if !any_host(&host) {
                        return Err(format!(
                            "exec {host}: no lab host of that name (hosts: {})",
                            names(&clients, &servers)
                        )
                        .into());
                    }
                    programs.push(Program::Exec { host, argv });
                }
                ProgramWords::Test { client, server, .. } => {
                    let test = p.expect("parsed with its words")?;
                    let label = client.clone().unwrap_or_else(|| clients[0].name.clone());
                    let client = client.unwrap_or_else(|| clients[0].name.clone());
                    if !is(&clients, &client) {
                        return Err(format!(
                            "@{client}: no client host of that name (client hosts: {})",
                            clients
                                .iter()
                                .map(|h| h.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                        .into());
                    }
                    let server = server.unwrap_or_else(|| servers[0].name.clone());
                    if !is(&servers, &server) {
                        return Err(format!(
                            "@{client}:{server}: no server host of that name (server hosts: {})",
                            servers
                                .iter()
                                .map(|h| h.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                        .into());
                    }
                    let target = match test.stream().host.as_deref() {
                        None => None,
                        Some(h) => {
                            let name = bare_host(h);
                            if !any_host(name) {
                                return Err(format!(
                                    "lab runs the server itself, inside its server namespace: leave out HOST '{h}', or name a lab host ({})",
                                    names(&clients, &servers)
                                )
                                .into());
                            }
                            Some(name.to_string())
                        }
                    };
                    let stream = test.stream();
                    programs.push(Program::Test(HostTest {
                        client,
                        server,
                        target,
                        label,
                        host: stream.host.clone(),
                        family: stream.family(),
                        format: stream.format(),
                        output: stream.output.clone(),
                        words: test.words.clone(),
                    }));
                    parsed_tests.push(test);
                }
            }
        }
        if programs.is_empty() {
            return Err(
                "lab needs a test to run (e.g. `xferlab lab --rate 100M --delay 10ms stream -t 5`)"
                    .to_string()
                    .into(),
            );
        }
        let mut labels = std::collections::HashSet::new();
        for t in programs.iter().filter_map(|p| match p {
            Program::Test(t) => Some(t),
            _ => None,
        }) {
            if !labels.insert(t.label.clone()) {
                return Err(format!(
                    "two tests from host '{}': run one test per client host (add another --client)",
                    t.label
                )
                .into());
            }
        }
        Ok(CheckedLab {
            hops,
            clients,
            servers,
            programs,
            parsed: parsed_tests,
            single,
        })
    }

    /// The checked lab as plain values, for `crate::lab::run`.
    pub fn plan(&self) -> Result<Plan, LabArgsError> {
        let a = self;
        let CheckedLab {
            hops,
            clients,
            servers,
            programs,
            single,
            ..
        } = a.check()?;
        if a.router && servers.len() > 1 {
            return Err(
                "--router takes one server host; for hops in series use --chain"
                    .to_string()
                    .into(),
            );
        }
        let links: Vec<&LinkConfig> = hops.iter().flat_map(|(x, y)| [x, y]).collect();
        let offload = a.offload.resolve(&links);
        let buffers = a.buffers.unwrap_or_else(|| lab::default_buffers(&hops));
        let tests: Vec<&HostTest> = programs
            .iter()
            .filter_map(|p| match p {
                Program::Test(t) => Some(t),
                Program::Exec { .. } => None,
            })
            .collect();
        let (format, output) = match tests.as_slice() {
            [t] if single => (t.format, t.output.clone()),
            ts if !ts.is_empty() && ts.iter().all(|t| t.format == Format::Json) => {
                (Format::Json, None)
            }
            _ => (Format::Human, None),
        };
        Ok(Plan {
            hops,
            clients,
            servers,
            programs,
            single,
            mtu: a.mtu,
            offload,
            pcap: a.pcap.clone(),
            pcap_snaplen: a.pcap_snaplen,
            buffers,
            txqueuelen: a.txqueuelen,
            realtime: !a.no_realtime,
            spin: a.spin_us,
            probe: !a.no_probe,
            allow_invalid: a.allow_invalid,
            router: a.router,
            format,
            output,
        })
    }
}

/// `xferlab lab`: `clean`, or the checked lab run by [`crate::lab::run`];
/// a test's `--help` is printed instead of a failure.
pub fn run(a: &LabArgs) -> ExitCode {
    let fail = |msg: &str| {
        eprintln!("xferlab: {msg}");
        ExitCode::from(2)
    };
    if a.command.first().map(String::as_str) == Some("clean") {
        if a.command.len() > 1 {
            return fail("`xferlab lab clean` takes no arguments");
        }
        return lab::clean();
    }
    if a.command.is_empty() {
        return fail(
            "lab needs a test to run (e.g. `xferlab lab --rate 100M --delay 10ms stream -t 5`) or `clean`",
        );
    }
    match a.plan() {
        Ok(plan) => lab::run(&plan),
        // `xferlab lab stream --help`: the test's own help.
        Err(LabArgsError {
            help: Some(help), ..
        }) => {
            help.print().ok();
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e.message),
    }
}

/// `iperf3://NAME:5201` -> `NAME`.
fn bare_host(h: &str) -> &str {
    let h = h.strip_prefix("iperf3://").unwrap_or(h);
    match h.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.parse::<u16>().is_ok() => name,
        _ => h,
    }
}

fn names(clients: &[HostSpec], servers: &[HostSpec]) -> String {
    clients
        .iter()
        .chain(servers)
        .map(|h| h.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One test's words: the verb's own Args, or why the words are not a
/// test the lab can run.
fn parse_test(command: &[String]) -> Result<LabTest, LabArgsError> {
    {
        let Some(verb) = command.first() else {
            return Err(
                "lab needs a test to run (e.g. `xferlab lab --rate 100M --delay 10ms stream -t 5`)"
                    .to_string()
                    .into(),
            );
        };
        let argv = std::iter::once("xferlab").chain(command.iter().map(String::as_str));
        let cli = Cli::try_parse_from(argv).map_err(|e| {
            use clap::error::ErrorKind;
            let text = e.render().to_string();
            let first = text
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("bad usage")
                .trim_start_matches("error: ")
                .to_string();
            LabArgsError {
                message: format!("the test to run: {first} (see `xferlab {verb} --help`)"),
                help: matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
                    .then_some(e),
            }
        })?;
        let Some(stream) = cli.command.stream_args() else {
            return Err(
                format!("lab runs a test verb (stream, cbr, sweep, rr), not `{verb}`").into(),
            );
        };
        let _ = stream;
        Ok(LabTest {
            words: command.to_vec(),
            command: cli.command,
        })
    }
}

fn on_off(s: OnOff) -> &'static str {
    match s {
        OnOff::On => "1",
        OnOff::Off => "0",
    }
}

fn parse_spin(s: &str) -> Result<Spin, String> {
    if s == "auto" {
        return Ok(Spin::Auto);
    }
    s.parse()
        .map(Spin::Us)
        .map_err(|_| format!("'{s}' is neither a number of microseconds nor 'auto'"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use xferlab_core::link::config::{LossModel, QueueLimit};

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        lab: LabArgs,
    }

    fn parse(args: &[&str]) -> LabArgs {
        let mut v = vec!["lab"];
        v.extend_from_slice(args);
        Wrap::try_parse_from(v).unwrap().lab
    }

    #[test]
    fn spin_is_auto_unless_given() {
        assert_eq!(parse(&["stream"]).spin_us, Spin::Auto);
        assert_eq!(parse(&["--spin-us", "0", "stream"]).spin_us, Spin::Us(0));
        let Err(e) = Wrap::try_parse_from(["lab", "--spin-us", "soon", "stream"]) else {
            panic!("--spin-us soon was taken");
        };
        let e = e.to_string();
        assert!(
            e.contains("neither a number of microseconds nor 'auto'"),
            "{e}"
        );
    }

    #[test]
    fn mark_drop_prefix_drops_not_ect_in_its_direction() {
        let a = parse(&["--mark", "c2s:drop:1/5", "--mark", "s2c:1/50", "stream"]);
        let (c2s, s2c) = a.link_configs().unwrap();
        assert_eq!(
            c2s.ecn,
            EcnMarking::Fixed {
                p: 0.2,
                drop_not_ect: true
            }
        );
        assert_eq!(
            s2c.ecn,
            EcnMarking::Fixed {
                p: 0.02,
                drop_not_ect: false
            }
        );
        let e = parse(&["--mark", "drop:lots", "stream"])
            .link_configs()
            .unwrap_err();
        assert!(e.contains("--mark"), "{e}");
    }

    #[test]
    fn direction_prefixes_pick_one_side() {
        let a = parse(&[
            "--rate", "100M", "--rate", "s2c:10M", "--loss", "c2s:1%", "--delay", "5ms", "--queue",
            "s2c:64K", "--mark", "c2s:1/50", "stream", "-t", "3",
        ]);
        let (c2s, s2c) = a.link_configs().unwrap();
        assert_eq!(
            (c2s.rate_bps, s2c.rate_bps),
            (Some(100_000_000), Some(10_000_000))
        );
        assert_eq!(c2s.loss, LossModel::Bernoulli { p: 0.01 });
        assert_eq!(s2c.loss, LossModel::None);
        assert_eq!((c2s.delay_ns, s2c.delay_ns), (5_000_000, 5_000_000));
        assert_eq!(s2c.queue, QueueLimit::Bytes(65536));
        assert_eq!(
            c2s.ecn,
            EcnMarking::Fixed {
                p: 0.02,
                drop_not_ect: false
            }
        );
        assert_eq!(s2c.seed, c2s.seed + 1);
        assert_eq!(a.command, ["stream", "-t", "3"]);
        assert!(
            !a.offload.resolve(&[&c2s, &s2c]),
            "shaped at 100M: per packet"
        );
        let fast = LinkConfig {
            rate_bps: Some(5_000_000_000),
            ..LinkConfig::default()
        };
        assert!(Offload::Auto.resolve(&[&fast, &fast]));
    }

    #[test]
    fn host_settings_become_sysctls() {
        let a = parse(&[
            "--sack",
            "off",
            "--ecn",
            "on",
            "--client-sysctl",
            "net.ipv4.tcp_dsack=0",
            "stream",
        ]);
        let (client, server) = a.sysctls().unwrap();
        assert!(client.contains(&("net.ipv4.tcp_sack".into(), "0".into())));
        assert!(client.contains(&("net.ipv4.tcp_dsack".into(), "0".into())));
        assert!(server.contains(&("net.ipv4.tcp_ecn".into(), "1".into())));
        assert!(!server.iter().any(|(k, _)| k == "net.ipv4.tcp_dsack"));
        let bad = parse(&["--client-sysctl", "kernel.panic=1", "stream"]);
        assert!(bad.sysctls().unwrap_err().contains("net.*"));
        let bad = parse(&["--loss", "c2s:2", "stream"]);
        assert!(bad.link_configs().unwrap_err().starts_with("--loss"));
    }
}
