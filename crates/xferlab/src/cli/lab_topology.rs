//! The lab's shape: named hosts on each side of the bottleneck with their
//! own stacks, the emulated hops in series, and what runs where (`@HOST
//! VERB ...` tests, `exec HOST -- CMD`), from the compact flags or a
//! topology TOML file.

use std::collections::BTreeMap;

use serde::Deserialize;
use xferlab_core::units::parse_size;

use crate::lab::{HostSpec, Sysctls};

/// Most hosts a side may have: host ids are odd (clients) or even
/// (servers) below 254 (the lab's routers use .254).
pub const MAX_HOSTS_PER_SIDE: usize = 126;

/// Names the lab uses itself.
const RESERVED: &[&str] = &["router", "clean", "exec"];

fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 12
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !ok {
        return Err(format!(
            "host name '{name}': use 1-12 lowercase letters, digits or _, starting with a letter (e.g. bg, ref1)"
        ));
    }
    if RESERVED.contains(&name) {
        return Err(format!(
            "host name '{name}' is reserved by the lab; pick another"
        ));
    }
    Ok(())
}

fn on_off(key: &str, v: &str) -> Result<&'static str, String> {
    match v.trim() {
        "on" | "1" | "true" | "yes" => Ok("1"),
        "off" | "0" | "false" | "no" => Ok("0"),
        _ => Err(format!("host setting {key}={v}: use on or off")),
    }
}

/// Adds one `KEY=VALUE` host setting: a shorthand (sack, ecn, cc,
/// buffer-max, mtu) or any net.* sysctl.
fn add_setting(h: &mut HostSpec, key: &str, value: &str) -> Result<(), String> {
    let key = key.trim();
    let value = value.trim();
    let mut set = |k: &str, v: String| h.sysctls.push((k.to_string(), v));
    match key {
        "sack" => set("net.ipv4.tcp_sack", on_off(key, value)?.into()),
        "ecn" => set("net.ipv4.tcp_ecn", on_off(key, value)?.into()),
        "cc" => set("net.ipv4.tcp_congestion_control", value.into()),
        "buffer-max" | "buffer_max" => {
            let max = parse_size(value)
                .map_err(|_| format!("host setting {key}={value}: not a size (e.g. 4M)"))?;
            let v = format!("4096 131072 {max}");
            set("net.ipv4.tcp_rmem", v.clone());
            set("net.ipv4.tcp_wmem", v);
        }
        "mtu" => {
            let mtu = value
                .parse::<u32>()
                .ok()
                .filter(|m| (576..=65_535).contains(m))
                .ok_or_else(|| {
                    format!("host setting mtu={value}: use a number between 576 and 65535")
                })?;
            h.mtu = Some(mtu);
        }
        k if k.starts_with("net.") && !k.contains("..") && !k.contains('/') => {
            set(k, value.into())
        }
        _ => {
            return Err(format!(
                "host setting '{key}': use sack, ecn, cc, buffer-max, mtu or a net.* sysctl (e.g. bg:sack=off,cc=reno)"
            ))
        }
    }
    Ok(())
}

/// `NAME[:KEY=VALUE,...]` (`bg:sack=off,ecn=off,cc=reno`).
pub fn parse_host(flag: &str, s: &str, base: &Sysctls) -> Result<HostSpec, String> {
    let (name, rest) = s.split_once(':').unwrap_or((s, ""));
    check_name(name.trim()).map_err(|e| format!("{flag}: {e}"))?;
    let mut h = HostSpec {
        name: name.trim().to_string(),
        sysctls: base.clone(),
        mtu: None,
    };
    for kv in rest.split(',').filter(|p| !p.trim().is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("{flag} '{s}': settings are KEY=VALUE (bg:sack=off)"))?;
        add_setting(&mut h, k, v).map_err(|e| format!("{flag}: {e}"))?;
    }
    Ok(h)
}

/// Link flags a hop takes (the lab's link flags without `--`).
pub const HOP_KEYS: &[&str] = &[
    "rate",
    "overhead",
    "delay",
    "jitter",
    "loss",
    "queue",
    "mark",
    "red",
    "reorder",
    "duplicate",
    "qdisc",
    "trace",
    "schedule",
];

/// `K:KEY=VALUE,...` (`2:rate=100M,delay=5ms,mark=c2s:1/50`): hop K's
/// link settings. A comma piece that does not start with a hop key
/// continues the previous value (`red=min=30K,max=90K,p=10%`).
pub fn parse_hop(s: &str) -> Result<(usize, Vec<(String, String)>), String> {
    let help = || format!("--hop '{s}': use K:KEY=VALUE,... (e.g. --hop 2:rate=100M,delay=5ms)");
    let (k, rest) = s.split_once(':').ok_or_else(help)?;
    let k: usize = k.trim().parse().map_err(|_| help())?;
    if k == 0 {
        return Err(format!("--hop '{s}': hops count from 1 (the bottleneck)"));
    }
    let mut out: Vec<(String, String)> = Vec::new();
    for piece in rest.split(',') {
        match piece.split_once('=') {
            Some((key, v)) if HOP_KEYS.contains(&key.trim()) => {
                out.push((key.trim().to_string(), v.to_string()))
            }
            _ => match out.last_mut() {
                Some((_, v)) => {
                    v.push(',');
                    v.push_str(piece);
                }
                None => return Err(help()),
            },
        }
    }
    Ok((k, out))
}

/// A topology file: `[[client]]` and `[[server]]` hosts (name plus the
/// compact settings, and a `[client.sysctl]` table), `[[hop]]` link
/// settings in order (the first is the bottleneck).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyFile {
    #[serde(default)]
    pub client: Vec<BTreeMap<String, toml::Value>>,
    #[serde(default)]
    pub server: Vec<BTreeMap<String, toml::Value>>,
    #[serde(default)]
    pub hop: Vec<BTreeMap<String, toml::Value>>,
}

fn scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(if *b { "on" } else { "off" }.to_string()),
        _ => None,
    }
}

impl TopologyFile {
    pub fn load(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--topology {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| {
            let msg = e.to_string();
            let first = msg.lines().last().unwrap_or("not TOML").trim();
            format!(
                "--topology {}: {first} (see docs/lab-topologies.md)",
                path.display()
            )
        })
    }

    /// The file's hosts of one side.
    pub fn hosts(&self, side: &str, base: &Sysctls) -> Result<Vec<HostSpec>, String> {
        let tables = if side == "client" {
            &self.client
        } else {
            &self.server
        };
        tables
            .iter()
            .map(|t| {
                let where_ = format!("topology [[{side}]]");
                let name = t
                    .get("name")
                    .and_then(scalar)
                    .ok_or_else(|| format!("{where_}: every host needs a name (name = \"bg\")"))?;
                check_name(&name).map_err(|e| format!("{where_}: {e}"))?;
                let mut h = HostSpec {
                    name,
                    sysctls: base.clone(),
                    mtu: None,
                };
                for (k, v) in t {
                    match (k.as_str(), v) {
                        ("name", _) => {}
                        ("sysctl", toml::Value::Table(kv)) => {
                            for (sk, sv) in kv {
                                let sv = scalar(sv).ok_or_else(|| {
                                    format!("{where_} {}: sysctl {sk} needs a value", h.name)
                                })?;
                                let sv = match sv.as_str() {
                                    "on" => "1".to_string(),
                                    "off" => "0".to_string(),
                                    _ => sv,
                                };
                                add_setting(&mut h, sk, &sv)
                                    .map_err(|e| format!("{where_} {}: {e}", h.name))?;
                            }
                        }
                        (k, v) => {
                            let v = scalar(v).ok_or_else(|| {
                                format!("{where_} {}: {k} needs a single value", h.name)
                            })?;
                            add_setting(&mut h, k, &v)
                                .map_err(|e| format!("{where_} {}: {e}", h.name))?;
                        }
                    }
                }
                Ok(h)
            })
            .collect()
    }

    /// The file's hops as (hop number from 1, KEY, VALUE) settings.
    pub fn hop_settings(&self) -> Result<Vec<(usize, String, String)>, String> {
        let mut out = Vec::new();
        for (i, t) in self.hop.iter().enumerate() {
            for (k, v) in t {
                if !HOP_KEYS.contains(&k.as_str()) {
                    return Err(format!(
                        "topology [[hop]] {}: unknown setting '{k}' (use {})",
                        i + 1,
                        HOP_KEYS.join(", ")
                    ));
                }
                let values = match v {
                    toml::Value::Array(a) => a.iter().map(scalar).collect::<Option<Vec<_>>>(),
                    v => scalar(v).map(|s| vec![s]),
                }
                .ok_or_else(|| {
                    format!("topology [[hop]] {}: {k} needs a string or a list", i + 1)
                })?;
                for value in values {
                    out.push((i + 1, k.clone(), value));
                }
            }
        }
        Ok(out)
    }
}

/// What a lab runs, from the words after its flags.
#[derive(Debug, Clone, PartialEq)]
pub enum ProgramWords {
    /// `[@CLIENT[:SERVER]] VERB ARGS`: an xferlab test from CLIENT (default
    /// the first client host) against SERVER (default the first server
    /// host).
    Test {
        client: Option<String>,
        server: Option<String>,
        words: Vec<String>,
    },
    /// `exec HOST [--] CMD ARGS`: any program inside HOST.
    Exec { host: String, argv: Vec<String> },
}

/// Splits the command words into programs: a word `@NAME` or `exec`
/// starts the next one.
pub fn split_programs(words: &[String]) -> Result<Vec<ProgramWords>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    let starts = |w: &str| w.starts_with('@') || w == "exec";
    while i < words.len() {
        let end = (i + 1..words.len())
            .find(|&j| starts(&words[j]))
            .unwrap_or(words.len());
        let seg = &words[i..end];
        if seg[0] == "exec" {
            let Some(host) = seg.get(1) else {
                return Err("exec needs a host and a command: exec HOST -- CMD ARGS".into());
            };
            let mut argv: Vec<String> = seg[2..].to_vec();
            if argv.first().map(String::as_str) == Some("--") {
                argv.remove(0);
            }
            if argv.is_empty() {
                return Err(format!(
                    "exec {host}: no command to run (exec {host} -- CMD ARGS)"
                ));
            }
            out.push(ProgramWords::Exec {
                host: host.clone(),
                argv,
            });
        } else if let Some(spec) = seg[0].strip_prefix('@') {
            let (client, server) = match spec.split_once(':') {
                Some((c, s)) => (c.to_string(), Some(s.to_string())),
                None => (spec.to_string(), None),
            };
            if seg.len() < 2 {
                return Err(format!(
                    "@{spec}: no test after it (e.g. @{client} stream -t 5)"
                ));
            }
            out.push(ProgramWords::Test {
                client: Some(client),
                server,
                words: seg[1..].to_vec(),
            });
        } else {
            out.push(ProgramWords::Test {
                client: None,
                server: None,
                words: seg.to_vec(),
            });
        }
        i = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn compact_hosts_become_sysctls_and_mtu() {
        let base = vec![("net.ipv4.tcp_ecn".to_string(), "1".to_string())];
        let h = parse_host("--client", "bg:sack=off,ecn=off,cc=reno,mtu=1400", &base).unwrap();
        assert_eq!(h.name, "bg");
        assert_eq!(h.mtu, Some(1400));
        // Host settings come after the lab-wide ones: they win.
        assert_eq!(
            h.sysctls,
            [
                ("net.ipv4.tcp_ecn", "1"),
                ("net.ipv4.tcp_sack", "0"),
                ("net.ipv4.tcp_ecn", "0"),
                ("net.ipv4.tcp_congestion_control", "reno")
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        assert!(parse_host("--client", "Bad", &base).is_err());
        assert!(parse_host("--client", "router", &base)
            .unwrap_err()
            .contains("reserved"));
        assert!(parse_host("--client", "a:kernel.x=1", &base)
            .unwrap_err()
            .contains("net.*"));
        assert!(parse_host("--client", "a:sack=maybe", &base).is_err());
    }

    #[test]
    fn hop_settings_keep_commas_inside_values() {
        let (k, s) = parse_hop("2:rate=100M,red=min=30K,max=90K,p=10%,loss=ge:1%,30%").unwrap();
        assert_eq!(k, 2);
        assert_eq!(
            s,
            [
                ("rate", "100M"),
                ("red", "min=30K,max=90K,p=10%"),
                ("loss", "ge:1%,30%")
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        assert!(parse_hop("0:rate=1M").is_err());
        assert!(parse_hop("x").is_err());
    }

    #[test]
    fn programs_split_at_hosts_and_exec() {
        let p = split_programs(&w(
            "exec server -- iperf3 -s @bg stream -P 20 @ref:srv2 rr -r 100",
        ))
        .unwrap();
        assert_eq!(
            p,
            [
                ProgramWords::Exec {
                    host: "server".into(),
                    argv: w("iperf3 -s")
                },
                ProgramWords::Test {
                    client: Some("bg".into()),
                    server: None,
                    words: w("stream -P 20")
                },
                ProgramWords::Test {
                    client: Some("ref".into()),
                    server: Some("srv2".into()),
                    words: w("rr -r 100")
                },
            ]
        );
        assert_eq!(
            split_programs(&w("stream -t 3")).unwrap(),
            [ProgramWords::Test {
                client: None,
                server: None,
                words: w("stream -t 3")
            }]
        );
        assert!(split_programs(&w("exec client")).is_err());
        assert!(split_programs(&w("@bg")).is_err());
    }

    #[test]
    fn topology_file_hosts_and_hops() {
        let f: TopologyFile = toml::from_str(
            "[[client]]\nname = \"bg\"\nsack = false\n[client.sysctl]\n\"net.ipv4.tcp_dsack\" = 0\n\
             [[server]]\nname = \"srv\"\nmtu = 9000\n\
             [[hop]]\nrate = \"20M\"\nmark = [\"c2s:1/50\"]\n[[hop]]\ndelay = \"5ms\"\n",
        )
        .unwrap();
        let c = f.hosts("client", &Vec::new()).unwrap();
        assert_eq!(c[0].name, "bg");
        assert!(c[0]
            .sysctls
            .contains(&("net.ipv4.tcp_sack".into(), "0".into())));
        assert!(c[0]
            .sysctls
            .contains(&("net.ipv4.tcp_dsack".into(), "0".into())));
        assert_eq!(f.hosts("server", &Vec::new()).unwrap()[0].mtu, Some(9000));
        let hops = f.hop_settings().unwrap();
        assert!(hops.contains(&(1, "mark".into(), "c2s:1/50".into())));
        assert!(hops.contains(&(2, "delay".into(), "5ms".into())));
        let bad: TopologyFile = toml::from_str("[[hop]]\nspeed = \"1M\"\n").unwrap();
        assert!(bad.hop_settings().unwrap_err().contains("speed"));
    }
}
