//! `xferlab lab` flags: the link (both directions, or one with a `c2s:` /
//! `s2c:` prefix on the value), the hosts, the emulator, and the test to
//! run (the rest of the command line: a verb and its flags, parsed here as
//! that verb's own Args).

use std::path::PathBuf;

use clap::{Args, Parser, ValueEnum};
use xferlab_core::link::config::{
    parse_delay, parse_loss, parse_probability, parse_queue, parse_red, EcnMarking, Jitter,
    JitterDistribution, LinkConfig,
};
use xferlab_core::units::{parse_rate, parse_size};

use super::stream::StreamArgs;
use super::{Cli, Command};

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
    /// Mark CE on ECT packets with a fixed probability (1/50, 2%).
    #[arg(long, value_name = "[DIR:]PROB", help_heading = "Link")]
    pub mark: Vec<String>,
    /// RED marking from the average queue: min=30K,max=90K,p=10%[,w=0.002].
    #[arg(long, value_name = "[DIR:]SPEC", help_heading = "Link")]
    pub red: Vec<String>,
    /// Share of packets that skip the delay (arrive early, out of order).
    #[arg(long, value_name = "[DIR:]PROB", help_heading = "Link")]
    pub reorder: Vec<String>,
    /// Share of packets delivered twice.
    #[arg(long, value_name = "[DIR:]PROB", help_heading = "Link")]
    pub duplicate: Vec<String>,
    /// Seed of the random decisions (s2c uses SEED + 1).
    #[arg(long, default_value_t = 1, help_heading = "Link")]
    pub seed: u64,

    /// A router namespace between the emulated link and the server
    /// (client -- link -- router -- plain hop -- server).
    #[arg(long, help_heading = "Hosts")]
    pub router: bool,
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

    /// TSO/checksum offload on the TUN devices. On: GSO superpackets (up
    /// to 64 KB) cross the emulator whole (fast; rates still count per
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
    /// sleeping (timer wake-ups come ~20-80 us late). On a busy 2-core
    /// machine this trades the median for the tail (measured at 100M:
    /// p50 24 -> 1 us, p99 ~100 us -> several ms), so the default is 0.
    #[arg(
        long,
        value_name = "US",
        default_value_t = 0,
        help_heading = "Emulator"
    )]
    pub spin_us: u64,
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

/// KEY -> VALUE pairs for one namespace, in the order given.
pub type Sysctls = Vec<(String, String)>;

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
    pub fn verb(&self) -> &str {
        &self.words[0]
    }

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

/// Everything a lab command line says, checked: the two directions' links,
/// each host's sysctls and the test.
#[derive(Debug)]
pub struct CheckedLab {
    pub c2s: LinkConfig,
    pub s2c: LinkConfig,
    pub client_sysctls: Sysctls,
    pub server_sysctls: Sysctls,
    pub test: LabTest,
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
    pub fn resolve(self, links: [&LinkConfig; 2]) -> bool {
        match self {
            Offload::On => true,
            Offload::Off => false,
            Offload::Auto => !links.iter().any(|c| {
                c.rate_bps.is_some_and(|r| r <= PER_PACKET_MAX_BPS)
                    || !matches!(c.loss, xferlab_core::link::config::LossModel::None)
                    || !matches!(c.ecn, EcnMarking::None)
                    || c.reorder > 0.0
                    || c.duplicate > 0.0
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

impl LabArgs {
    /// The two directions' configurations.
    pub fn link_configs(&self) -> Result<(LinkConfig, LinkConfig), String> {
        let mut c2s = LinkConfig {
            seed: self.seed,
            ..LinkConfig::default()
        };
        let mut s2c = LinkConfig {
            seed: self.seed.wrapping_add(1),
            ..LinkConfig::default()
        };
        let (a, b) = (&mut c2s, &mut s2c);
        apply("--rate", &self.rate, parse_rate, a, b, |c, &r| {
            c.rate_bps = Some(r)
        })?;
        let bytes = |s: &str| {
            s.parse::<u32>()
                .map_err(|_| format!("'{s}' is not a number of bytes"))
        };
        apply("--overhead", &self.overhead, bytes, a, b, |c, &o| {
            c.overhead_bytes = o
        })?;
        apply("--delay", &self.delay, parse_delay, a, b, |c, &d| {
            c.delay_ns = d
        })?;
        let corr =
            parse_probability(&self.jitter_corr).map_err(|e| format!("--jitter-corr: {e}"))?;
        let distribution = match self.jitter_dist {
            Dist::Uniform => JitterDistribution::Uniform,
            Dist::Normal => JitterDistribution::Normal,
        };
        apply("--jitter", &self.jitter, parse_delay, a, b, |c, &j| {
            c.jitter = (j > 0).then_some(Jitter {
                distribution,
                amount_ns: j,
                correlation: corr,
            })
        })?;
        apply("--loss", &self.loss, parse_loss, a, b, |c, l| c.loss = *l)?;
        apply("--queue", &self.queue, parse_queue, a, b, |c, q| {
            c.queue = *q
        })?;
        apply("--mark", &self.mark, parse_probability, a, b, |c, &p| {
            c.ecn = if p > 0.0 {
                EcnMarking::Fixed { p }
            } else {
                EcnMarking::None
            }
        })?;
        apply("--red", &self.red, parse_red, a, b, |c, r| c.ecn = *r)?;
        apply(
            "--reorder",
            &self.reorder,
            parse_probability,
            a,
            b,
            |c, &p| c.reorder = p,
        )?;
        apply(
            "--duplicate",
            &self.duplicate,
            parse_probability,
            a,
            b,
            |c, &p| c.duplicate = p,
        )?;
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

    /// Sysctls per host: (client, server), KEY -> VALUE.
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

    /// Checks a lab command line as `lab` does before it builds anything
    /// (the experiment runner checks every point this way before the first
    /// runs). The test's `--help` comes first, as `xferlab stream --help`
    /// would.
    pub fn check(&self) -> Result<CheckedLab, LabArgsError> {
        let test = self.test();
        if let Err(e @ LabArgsError { help: Some(_), .. }) = test {
            return Err(e);
        }
        let (c2s, s2c) = self.link_configs()?;
        let (client_sysctls, server_sysctls) = self.sysctls()?;
        let test = test?;
        if self.pcap_snaplen == 0 {
            return Err("--pcap-snaplen must be at least 1".to_string().into());
        }
        Ok(CheckedLab {
            c2s,
            s2c,
            client_sysctls,
            server_sysctls,
            test,
        })
    }

    /// The test to run: the verb's own Args, or why the words are not a
    /// test the lab can run.
    fn test(&self) -> Result<LabTest, LabArgsError> {
        let Some(verb) = self.command.first() else {
            return Err(
                "lab needs a test to run (e.g. `xferlab lab --rate 100M --delay 10ms stream -t 5`)"
                    .to_string()
                    .into(),
            );
        };
        let argv = std::iter::once("xferlab").chain(self.command.iter().map(String::as_str));
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
        if stream.host.is_some() {
            return Err(
                "lab runs the server itself, inside its server namespace: leave out HOST"
                    .to_string()
                    .into(),
            );
        }
        Ok(LabTest {
            words: self.command.clone(),
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
        assert_eq!(c2s.ecn, EcnMarking::Fixed { p: 0.02 });
        assert_eq!(s2c.seed, c2s.seed + 1);
        assert_eq!(a.command, ["stream", "-t", "3"]);
        assert!(
            !a.offload.resolve([&c2s, &s2c]),
            "shaped at 100M: per packet"
        );
        let fast = LinkConfig {
            rate_bps: Some(5_000_000_000),
            ..LinkConfig::default()
        };
        assert!(Offload::Auto.resolve([&fast, &fast]));
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
