//! Scenario files: what an experiment runs, parsed from TOML and expanded
//! into points (one knob assignment each).
//!
//! A scenario names a base command (any xferlab verb with its flags), where
//! it runs (loopback, the emulated lab, the lab VM), a `matrix` of knob
//! values (a cross product), `zip` groups (axes whose values advance
//! together), per-point `override`s, a repeat count, a run order and a
//! default report. A knob is always a real flag of the CLI, written as
//! the user would type it (`"-l"`, `"--spacing"`), or `"lab --mark"` for
//! a flag of `xferlab lab` itself. This module only checks the file's
//! shape; whether each flag exists and takes the values given is checked
//! by the binary against its own command line definition, which is why
//! every knob keeps the line it came from.
//!
//! ```toml
//! title = "TCP write size"
//! command = "stream -t 3"
//! repeat = 3
//! order = "interleaved"
//! [matrix]
//! "-l" = ["64K", "1M"]
//! "-P" = [1, 2]
//! [quick]
//! repeat = 1
//! set = { "-t" = "1" }
//! [[report.table]]
//! metric = "throughput_bps"
//! rows = "-l"
//! cols = "-P"
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use super::stats::Aggregate;

/// A scenario file that could not be used: the line it concerns and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{line}: {message}")]
pub struct ScenarioError {
    /// 1-based line in the scenario file (0 when the whole file is meant).
    pub line: usize,
    pub message: String,
}

/// Where the points of a scenario run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Place {
    /// Ordinary invocations on this host (an in-process server on
    /// loopback unless the command names a server).
    Loopback,
    /// Each point is `xferlab lab LABFLAGS VERB ...` (namespaces joined by
    /// the link emulator; root needed).
    Lab,
    /// Every point inside one boot of the lab VM (`lab/vm/run`).
    Vm,
    /// Each point `@CLIENT:SERVER VERB ...` is ordered from the agent of
    /// host CLIENT (`xferlab server --agent`), against host SERVER's test
    /// server; the hosts are the scenario's `[hosts.NAME]`.
    Hosts,
}

/// A host of a `where = "hosts"` scenario: `[hosts.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    /// `ADDR:PORT` of its agent (`xferlab server --agent`), as written.
    pub agent: String,
    /// Where its test server listens, as `ADDR` and port: `address` when
    /// given (`ADDR` or `ADDR:PORT`), else the agent's own (an agent is
    /// also a test server on its port).
    pub server_addr: String,
    pub server_port: u16,
    /// The key file (one key per line, as `--auth-key`), relative to the
    /// scenario file; the binary reads it.
    pub key: String,
    /// The line of `[hosts.NAME]`'s `agent`, for errors about the host.
    pub line: usize,
    /// The line of its `key`, for errors about the key file.
    pub key_line: usize,
}

impl Host {
    /// Its test server as `ADDR:PORT` (`[ADDR]:PORT` for IPv6), for people.
    pub fn server(&self) -> String {
        if self.server_addr.contains(':') {
            format!("[{}]:{}", self.server_addr, self.server_port)
        } else {
            format!("{}:{}", self.server_addr, self.server_port)
        }
    }
}

/// `ADDR:PORT`, `NAME:PORT` or `[V6]:PORT` into the address (brackets
/// off) and a port that is not 0; `None` for anything else.
pub fn split_host_port(s: &str) -> Option<(String, u16)> {
    let (addr, port) = s.rsplit_once(':')?;
    let addr = match addr.strip_prefix('[') {
        Some(inner) => inner.strip_suffix(']')?,
        None if addr.contains(':') => return None,
        None => addr,
    };
    let port: u16 = port.parse().ok().filter(|&p| p != 0)?;
    if addr.is_empty() || addr.contains(char::is_whitespace) {
        return None;
    }
    Some((addr.to_string(), port))
}

/// In which order the runs of a scenario are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Every repeat of a point, then the next point.
    Sequential,
    /// Round by round: every point once, then every point again, so slow
    /// drift of the machine spreads over all points (the benches' way).
    Interleaved,
    /// All runs in a random order drawn from the seed.
    Shuffled { seed: u64 },
}

/// Whose flag a knob is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// The command's: with several tests (`@HOST` segments), every test
    /// whose verb has the flag.
    Command,
    /// `xferlab lab`'s (`"lab --mark"`).
    Lab,
    /// The test started from lab host HOST (`"@ref -r"`).
    Host(String),
    /// Not a flag: which of the scenario's named commands a point runs
    /// (`command = { NAME = "...", ... }`), written `"command"`.
    Variant,
}

/// A knob: a flag, and whose it is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Knob {
    pub scope: Scope,
    pub flag: String,
}

impl Knob {
    fn parse(text: &str, line: usize) -> Result<Knob, ScenarioError> {
        let t = text.trim();
        let bad = |message: String| ScenarioError { line, message };
        if t == "command" {
            return Ok(Knob::variant());
        }
        let (scope, flag) = if let Some(rest) = t.strip_prefix("lab ") {
            (Scope::Lab, rest.trim())
        } else if let Some(rest) = t.strip_prefix('@') {
            let (host, flag) = rest.split_once(' ').unwrap_or((rest, ""));
            if host.is_empty()
                || !host
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err(bad(format!(
                    "knob `{text}`: `@` names a lab host (lowercase letters, digits, `_`), as in \"@ref -r\""
                )));
            }
            (Scope::Host(host.to_string()), flag.trim())
        } else {
            (Scope::Command, t)
        };
        if !flag.starts_with('-') || flag == "-" || flag == "--" || flag.contains(' ') {
            return Err(bad(format!(
                "knob `{text}` is not a flag; write it as on the command line (\"-l\", \"--spacing\"), \"lab --mark\" for a flag of `xferlab lab`, or \"@ref -r\" for the test from lab host ref"
            )));
        }
        Ok(Knob {
            scope,
            flag: flag.to_string(),
        })
    }

    /// The knob choosing among named commands (`"command"`).
    pub fn variant() -> Knob {
        Knob {
            scope: Scope::Variant,
            flag: "command".into(),
        }
    }

    /// A flag of `xferlab lab`.
    pub fn is_lab(&self) -> bool {
        self.scope == Scope::Lab
    }
}

impl fmt::Display for Knob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.scope {
            Scope::Command => f.write_str(&self.flag),
            Scope::Lab => write!(f, "lab {}", self.flag),
            Scope::Host(h) => write!(f, "@{h} {}", self.flag),
            Scope::Variant => f.write_str(&self.flag),
        }
    }
}

/// One knob's value: a flag argument, or for a flag without argument,
/// whether it is given.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    Arg(String),
    Switch(bool),
}

impl Value {
    fn from_toml(v: &toml::Value, line: usize, knob: &str) -> Result<Value, ScenarioError> {
        Ok(match v {
            toml::Value::String(s) => Value::Arg(s.clone()),
            toml::Value::Integer(i) => Value::Arg(i.to_string()),
            toml::Value::Float(x) => Value::Arg(x.to_string()),
            toml::Value::Boolean(b) => Value::Switch(*b),
            other => {
                return Err(ScenarioError {
                    line,
                    message: format!(
                        "`{knob}`: a value must be a string, number or boolean, not {}",
                        other.type_str()
                    ),
                })
            }
        })
    }

    /// The value as a report shows it (`on`/`off` for switches).
    pub fn label(&self) -> String {
        match self {
            Value::Arg(s) => s.clone(),
            Value::Switch(true) => "on".into(),
            Value::Switch(false) => "off".into(),
        }
    }

    /// The value as JSON (strings, and booleans for switches).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Arg(s) => serde_json::Value::String(s.clone()),
            Value::Switch(b) => serde_json::Value::Bool(*b),
        }
    }
}

/// A knob with the line it was written on.
#[derive(Debug, Clone, PartialEq)]
pub struct KnobAt {
    pub knob: Knob,
    pub line: usize,
}

/// One axis of the cross product: a single knob, or a zip group whose
/// knobs take their i-th values together.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub knobs: Vec<KnobAt>,
    /// `values[i][k]`: the i-th step's value of knob k.
    pub values: Vec<Vec<Value>>,
}

/// Per-point overrides: where every `when` knob has its value, `set`
/// applies.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    pub line: usize,
    pub when: Vec<(Knob, Value)>,
    pub set: Vec<(KnobAt, Value)>,
}

/// The lab VM's shape for `where = "vm"`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmSetup {
    /// Modules loaded at boot.
    #[serde(default)]
    pub modules: Vec<String>,
    /// Modules packed but loaded by the setup command.
    #[serde(default)]
    pub extra_modules: Vec<String>,
    /// Extra files, `HOST[:GUEST]`; HOST relative to the scenario file.
    #[serde(default)]
    pub add: Vec<String>,
    /// Guest shell command run once before the points.
    #[serde(default)]
    pub setup: Option<String>,
    /// Limit for the whole batch, seconds (default 1800).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// Guest CPUs (default 1): 2 gives a reader such as `--usbmon` a CPU
    /// of its own beside the link it watches.
    #[serde(default)]
    pub smp: Option<u32>,
}

/// One table of the default report.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSpec {
    pub metric: String,
    /// Knob whose values are the rows.
    pub rows: String,
    /// Knob whose values are the columns (none: one column).
    #[serde(default)]
    pub cols: Option<String>,
    #[serde(default)]
    pub aggregate: Option<Aggregate>,
    #[serde(default)]
    pub title: Option<String>,
}

/// What a plot shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlotKindSpec {
    /// The aggregate of a metric against a knob, one line per value of
    /// `series`, with error bars.
    Lines,
    /// The same as grouped bars.
    Bars,
    /// A per-interval series against time, every run overlaid, one colour
    /// per configuration.
    Time,
    /// Latency CDF of request/response runs, one curve per configuration.
    Cdf,
}

/// One plot of the default report.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlotSpec {
    pub kind: PlotKindSpec,
    /// Metric (lines, bars) or per-interval series name (time).
    #[serde(default)]
    pub metric: Option<String>,
    /// Knob on the x axis (lines, bars).
    #[serde(default)]
    pub x: Option<String>,
    /// Knob whose values make the series (one line/colour each).
    #[serde(default)]
    pub series: Option<String>,
    #[serde(default)]
    pub aggregate: Option<Aggregate>,
    #[serde(default)]
    pub log_x: bool,
    #[serde(default)]
    pub title: Option<String>,
    /// The x axis' label with its unit (default: the knob, which has
    /// none: `"datagram size (bytes)"` says what `-l` cannot).
    #[serde(default)]
    pub x_label: Option<String>,
    /// Only points whose knobs have these values (`{ "-l" = "64K" }`).
    #[serde(default)]
    pub filter: BTreeMap<String, toml::Value>,
}

/// The default report of a scenario.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportSpec {
    /// How repeats are combined unless a table or plot says otherwise
    /// (default median).
    #[serde(default)]
    pub aggregate: Option<Aggregate>,
    #[serde(default)]
    pub table: Vec<TableSpec>,
    #[serde(default)]
    pub plot: Vec<PlotSpec>,
    /// What a metric shows, for axes and table titles, without its unit
    /// (added from the data): `"tps@ref" = "Completed transactions of the
    /// reference flow"`.
    #[serde(default)]
    pub metrics: BTreeMap<String, String>,
    /// What a knob means, for row headers and axes: `"lab --mark" =
    /// "Mark probability at hop 1"`.
    #[serde(default)]
    pub knobs: BTreeMap<String, String>,
    /// A name for a value, or for a combination of values as reports
    /// write it (`"lab --ecn on, lab --sack on" = "ECN + SACK"`), used in
    /// legends, headers and table titles instead of the flags.
    #[serde(default)]
    pub names: BTreeMap<String, String>,
}

impl ReportSpec {
    /// A metric's label (its name when the scenario gives none).
    pub fn metric_label<'a>(&'a self, metric: &'a str) -> &'a str {
        self.metrics.get(metric).map_or(metric, String::as_str)
    }

    /// A knob's label (the knob when the scenario gives none).
    pub fn knob_label<'a>(&'a self, knob: &'a str) -> &'a str {
        self.knobs.get(knob).map_or(knob, String::as_str)
    }

    /// How a report writes one value of `knob` where the knob is named
    /// beside it (a row header, an axis category): the scenario's name
    /// for `knob value`, else the value.
    pub fn value_label(&self, knob: &str, value: &Value) -> String {
        self.names
            .get(&format!("{knob} {}", value.label()))
            .cloned()
            .unwrap_or_else(|| value.label())
    }

    /// How a report writes a combination of knob values: the scenario's
    /// name for the whole combination, else each value by its own name
    /// or as `knob value`, joined by ", ".
    pub fn combo_label(&self, combo: &[(String, Value)]) -> String {
        let plain = |k: &str, v: &Value| format!("{k} {}", v.label());
        let whole = combo
            .iter()
            .map(|(k, v)| plain(k, v))
            .collect::<Vec<_>>()
            .join(", ");
        if let Some(n) = self.names.get(&whole) {
            return n.clone();
        }
        combo
            .iter()
            .map(|(k, v)| {
                let one = plain(k, v);
                self.names.get(&one).cloned().unwrap_or(one)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A command the points run: the verb and its base flags, as words
/// (`["stream", "-t", "3"]`), and its name when the scenario names
/// several (`command = { measured = "usb bulk ...", model = "model usb" }`),
/// so one experiment holds, say, measured runs and a model's predictions
/// as two series of the same knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// Empty for a scenario's only, unnamed command.
    pub name: String,
    pub words: Vec<String>,
}

/// A parsed, checked scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub title: String,
    pub description: String,
    /// One unnamed command, or the named ones: then the first axis is the
    /// knob `command` (`Knob::variant`), whose values are their names.
    pub commands: Vec<Command>,
    pub command_line: usize,
    pub place: Place,
    /// Base flags of `xferlab lab` (place = lab, or vm with a lab inside
    /// the guest: [`Scenario::in_lab`]).
    pub lab: Vec<String>,
    pub lab_line: usize,
    /// `lab` was given in a vm scenario: each point runs `xferlab lab`
    /// inside the guest (for what only the guest's kernel has, such as
    /// DCCP).
    pub lab_in_vm: bool,
    pub vm: VmSetup,
    /// `[hosts.NAME]`, in file order (where = "hosts").
    pub hosts: Vec<Host>,
    pub axes: Vec<Axis>,
    pub overrides: Vec<Override>,
    /// Points left out of the cross product: every knob of one entry
    /// has its value (`[[exclude]]`, as a CI matrix's exclude).
    pub excludes: Vec<Vec<(Knob, Value)>>,
    pub repeat: u32,
    pub order: Order,
    pub report: ReportSpec,
    /// Whether the file has a `[quick]` section.
    pub has_quick: bool,
}

/// One point: the knob values it runs with, in axis order, then the
/// overridden ones.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Point {
    pub knobs: Vec<(Knob, Value)>,
}

impl Point {
    /// Canonical text naming the point (`-l=64K;lab --mark=c2s:1/50`):
    /// the same knob values give the same key, whatever the file order.
    pub fn key(&self) -> String {
        let mut parts: Vec<String> = self
            .knobs
            .iter()
            .map(|(k, v)| match v {
                Value::Arg(s) => format!("{k}={s}"),
                Value::Switch(b) => format!("{k}={b}"),
            })
            .collect();
        parts.sort();
        parts.join(";")
    }

    pub fn get(&self, knob: &str) -> Option<&Value> {
        self.knobs
            .iter()
            .find(|(k, _)| k.to_string() == knob)
            .map(|(_, v)| v)
    }

    /// Knob values as the text of a JSON object (knob -> value) in the
    /// point's own order, axes first (a `serde_json::Map` would sort the
    /// keys), so `db show` writes a point's knobs as `--dry-run` does.
    pub fn to_json(&self) -> String {
        let members: Vec<String> = self
            .knobs
            .iter()
            .map(|(k, v)| format!("{}:{}", serde_json::Value::from(k.to_string()), v.to_json()))
            .collect();
        format!("{{{}}}", members.join(","))
    }

    /// A short human label (`-l 64K, -P 2`), or "base" for a point
    /// without knobs.
    pub fn label(&self) -> String {
        if self.knobs.is_empty() {
            return "base".into();
        }
        self.knobs
            .iter()
            .map(|(k, v)| format!("{k} {}", v.label()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Whether the full or the quick scale of a scenario runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Full,
    Quick,
}

impl Scale {
    pub fn as_str(self) -> &'static str {
        match self {
            Scale::Full => "full",
            Scale::Quick => "quick",
        }
    }
}

// ------------------------------------------------------------ raw file --

/// A TOML table read in file order (toml's own map sorts its keys).
#[derive(Debug, Clone, PartialEq)]
struct Ordered<V>(Vec<(String, V)>);

impl<V> Default for Ordered<V> {
    fn default() -> Self {
        Ordered(Vec::new())
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Ordered<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V2<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for V2<V> {
            type Value = Ordered<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut v = Vec::new();
                while let Some((k, val)) = map.next_entry::<String, V>()? {
                    v.push((k, val));
                }
                Ok(Ordered(v))
            }
        }
        d.deserialize_map(V2(std::marker::PhantomData))
    }
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Words {
    Line(String),
    List(Vec<String>),
}

/// `command = "..."`, or named commands `command = { NAME = "...", ... }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawCommand {
    One(Words),
    Named(Ordered<Words>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOverride {
    when: Spanned<Ordered<Spanned<toml::Value>>>,
    set: Spanned<Ordered<Spanned<toml::Value>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuick {
    #[serde(default)]
    repeat: Option<Spanned<u32>>,
    #[serde(default)]
    set: Option<Ordered<Spanned<toml::Value>>>,
    #[serde(default)]
    matrix: Option<Ordered<Spanned<toml::Value>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    agent: Spanned<String>,
    #[serde(default)]
    address: Option<Spanned<String>>,
    key: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    title: String,
    #[serde(default)]
    description: String,
    command: Spanned<RawCommand>,
    #[serde(default, rename = "where")]
    place: Option<Place>,
    #[serde(default)]
    lab: Option<Spanned<Words>>,
    #[serde(default)]
    vm: Option<VmSetup>,
    #[serde(default)]
    hosts: Option<Ordered<Spanned<RawHost>>>,
    #[serde(default)]
    repeat: Option<Spanned<u32>>,
    #[serde(default)]
    order: Option<Spanned<String>>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    matrix: Ordered<Spanned<toml::Value>>,
    #[serde(default)]
    zip: Vec<Ordered<Spanned<toml::Value>>>,
    #[serde(default, rename = "override")]
    overrides: Vec<Spanned<RawOverride>>,
    #[serde(default)]
    exclude: Vec<Spanned<Ordered<Spanned<toml::Value>>>>,
    #[serde(default)]
    quick: Option<RawQuick>,
    #[serde(default)]
    report: ReportSpec,
}

/// Byte offset -> 1-based line.
struct Lines<'a>(&'a str);

impl Lines<'_> {
    fn of(&self, offset: usize) -> usize {
        let end = offset.min(self.0.len());
        self.0.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }
}

fn err(line: usize, message: impl Into<String>) -> ScenarioError {
    ScenarioError {
        line,
        message: message.into(),
    }
}

fn words(w: &Words, line: usize, what: &str) -> Result<Vec<String>, ScenarioError> {
    match w {
        Words::List(v) => Ok(v.clone()),
        Words::Line(s) => shlex_split(s)
            .ok_or_else(|| err(line, format!("`{what}`: unbalanced quotes in \"{s}\""))),
    }
}

/// POSIX-shell-like word splitting: whitespace separates words, single
/// and double quotes group, backslash escapes (outside single quotes).
fn shlex_split(s: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        x => cur.push(x),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => cur.push(chars.next()?),
                        x => cur.push(x),
                    }
                }
            }
            '\\' => {
                in_word = true;
                cur.push(chars.next()?);
            }
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    Some(out)
}

fn values_of(
    key: &str,
    v: &Spanned<toml::Value>,
    lines: &Lines,
) -> Result<(KnobAt, Vec<Value>), ScenarioError> {
    let line = lines.of(v.span().start);
    let knob = Knob::parse(key, line)?;
    let vals = match v.get_ref() {
        toml::Value::Array(a) => a
            .iter()
            .map(|x| Value::from_toml(x, line, key))
            .collect::<Result<Vec<_>, _>>()?,
        _ => {
            return Err(err(
                line,
                format!(
                    "`{key}`: matrix values must be an array, e.g. \"{key}\" = [\"64K\", \"1M\"]"
                ),
            ))
        }
    };
    if vals.is_empty() {
        return Err(err(line, format!("`{key}`: give at least one value")));
    }
    Ok((KnobAt { knob, line }, vals))
}

fn assignments(
    map: &Ordered<Spanned<toml::Value>>,
    lines: &Lines,
) -> Result<Vec<(KnobAt, Value)>, ScenarioError> {
    map.0
        .iter()
        .map(|(k, v)| {
            let line = lines.of(v.span().start);
            let knob = Knob::parse(k, line)?;
            let val = Value::from_toml(v.get_ref(), line, k)?;
            Ok((KnobAt { knob, line }, val))
        })
        .collect()
}

/// A command must name a test verb, not the runner's own or `lab`.
fn check_command(command: &[String], line: usize) -> Result<(), ScenarioError> {
    let Some(verb) = command.first() else {
        return Err(err(
            line,
            "`command` is empty; name a verb, e.g. \"stream -t 3\"",
        ));
    };
    if verb == "run" || verb == "report" || verb == "db" {
        return Err(err(
            line,
            format!("`command` cannot be `{verb}`; a scenario runs test verbs (stream, cbr, sweep, rr, usb bulk)"),
        ));
    }
    if verb == "lab" {
        return Err(err(
            line,
            "`command` names the verb only; put the lab's flags in `lab = \"...\"` and set `where = \"lab\"`",
        ));
    }
    Ok(())
}

/// The scenario's commands: one, or a table of named ones.
fn commands(raw: &RawCommand, command_line: usize) -> Result<Vec<Command>, ScenarioError> {
    let commands = match raw {
        RawCommand::One(w) => vec![Command {
            name: String::new(),
            words: words(w, command_line, "command")?,
        }],
        RawCommand::Named(named) => {
            if named.0.is_empty() {
                return Err(err(
                    command_line,
                    "`command = {}` names no command; give NAME = \"VERB FLAGS\" pairs",
                ));
            }
            named
                .0
                .iter()
                .map(|(name, w)| {
                    if name.trim().is_empty() {
                        return Err(err(command_line, "a named command needs a name"));
                    }
                    Ok(Command {
                        name: name.clone(),
                        words: words(w, command_line, &format!("command.{name}"))?,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?
        }
    };
    for c in &commands {
        check_command(&c.words, command_line)?;
    }
    Ok(commands)
}

/// The lab's own flags (`lab = "..."`) and their line.
fn lab_flags(
    raw: &RawScenario,
    place: Place,
    lines: &Lines,
) -> Result<(Vec<String>, usize), ScenarioError> {
    Ok(match &raw.lab {
        Some(l) => {
            let line = lines.of(l.span().start);
            if matches!(place, Place::Loopback | Place::Hosts) {
                return Err(err(
                    line,
                    "`lab` flags need `where = \"lab\"` (or \"vm\": the lab inside the lab VM)",
                ));
            }
            (words(l.get_ref(), line, "lab")?, line)
        }
        None => (Vec::new(), 0),
    })
}

/// The `[hosts.NAME]` of a `where = "hosts"` scenario: a name as lab
/// hosts have (it is written `@NAME`), an agent `ADDR:PORT`, a test
/// server address when not the agent's, a key file.
fn hosts(raw: &RawScenario, place: Place, lines: &Lines) -> Result<Vec<Host>, ScenarioError> {
    let Some(table) = &raw.hosts else {
        if place == Place::Hosts {
            return Err(err(
                0,
                "`where = \"hosts\"` needs its hosts: add [hosts.NAME] tables with agent = \"ADDR:PORT\" and key = \"FILE\"",
            ));
        }
        return Ok(Vec::new());
    };
    // The line of `[hosts...` (toml gives no span for a table of tables).
    let table_line = lines.0.find("[hosts").map_or(0, |at| lines.of(at));
    if place != Place::Hosts {
        return Err(err(
            table_line,
            "[hosts] names agents for `where = \"hosts\"`; set it, or remove [hosts]",
        ));
    }
    if table.0.is_empty() {
        return Err(err(
            table_line,
            "[hosts] names no host; add [hosts.NAME] tables with agent = \"ADDR:PORT\" and key = \"FILE\"",
        ));
    }
    table
        .0
        .iter()
        .map(|(name, h)| {
            let line = lines.of(h.get_ref().agent.span().start);
            let h = h.get_ref();
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err(err(
                    line,
                    format!("[hosts.{name}]: a host's name is lowercase letters, digits and `_` (it is written `@{name}:...` in commands)"),
                ));
            }
            let agent = h.agent.get_ref().trim().to_string();
            let (agent_addr, agent_port) = split_host_port(&agent).ok_or_else(|| {
                err(
                    line,
                    format!("[hosts.{name}] agent = \"{agent}\" is not ADDR:PORT; write where its `xferlab server --agent` listens, e.g. \"10.0.0.2:5290\" or \"[fd00::2]:5290\""),
                )
            })?;
            let (server_addr, server_port) = match &h.address {
                None => (agent_addr, agent_port),
                Some(a) => {
                    let text = a.get_ref().trim();
                    let line = lines.of(a.span().start);
                    match split_host_port(text) {
                        Some(hp) => hp,
                        None if !text.is_empty()
                            && !text.contains(char::is_whitespace)
                            && (!text.contains(':') || text.parse::<std::net::Ipv6Addr>().is_ok()) =>
                        {
                            (text.to_string(), agent_port)
                        }
                        None => {
                            return Err(err(
                                line,
                                format!("[hosts.{name}] address = \"{text}\" is not ADDR or ADDR:PORT; write where its test server listens (default: the agent's address)"),
                            ))
                        }
                    }
                }
            };
            let key = h.key.get_ref().trim().to_string();
            let key_line = lines.of(h.key.span().start);
            if key.is_empty() {
                return Err(err(
                    key_line,
                    format!("[hosts.{name}] key is empty; name the agent's --auth-key file (one key per line), relative to the scenario file"),
                ));
            }
            Ok(Host {
                name: name.clone(),
                agent,
                server_addr,
                server_port,
                key,
                line,
                key_line,
            })
        })
        .collect()
}

fn order(raw: &RawScenario, lines: &Lines) -> Result<Order, ScenarioError> {
    Ok(match &raw.order {
        None => Order::Sequential,
        Some(o) => match o.get_ref().as_str() {
            "sequential" => Order::Sequential,
            "interleaved" => Order::Interleaved,
            "shuffled" => Order::Shuffled {
                seed: raw.seed.unwrap_or(1),
            },
            other => {
                return Err(err(
                    lines.of(o.span().start),
                    format!(
                        "`order` must be sequential, interleaved or shuffled (got \"{other}\")"
                    ),
                ))
            }
        },
    })
}

/// The axes: the named commands first, then [matrix] knobs, then each
/// [[zip]] group; a value listed twice or a knob on two axes is refused.
fn axes(
    raw: &RawScenario,
    commands: &[Command],
    command_line: usize,
    lines: &Lines,
) -> Result<Vec<Axis>, ScenarioError> {
    let mut axes: Vec<Axis> = Vec::new();
    if let RawCommand::Named(_) = raw.command.get_ref() {
        // First, so each command's points come together.
        axes.push(Axis {
            knobs: vec![KnobAt {
                knob: Knob::variant(),
                line: command_line,
            }],
            values: commands
                .iter()
                .map(|c| vec![Value::Arg(c.name.clone())])
                .collect(),
        });
    }
    let not_an_axis = |k: &KnobAt| {
        if k.knob.scope == Scope::Variant {
            Err(err(
                k.line,
                "`command` is an axis when the command is a table of named commands (`command = { NAME = \"...\" }`), not a [matrix] entry",
            ))
        } else {
            Ok(())
        }
    };
    for (k, v) in &raw.matrix.0 {
        let (knob, vals) = values_of(k, v, lines)?;
        not_an_axis(&knob)?;
        axes.push(Axis {
            knobs: vec![knob],
            values: vals.into_iter().map(|v| vec![v]).collect(),
        });
    }
    for group in &raw.zip {
        let mut knobs = Vec::new();
        let mut cols: Vec<Vec<Value>> = Vec::new();
        for (k, v) in &group.0 {
            let (knob, vals) = values_of(k, v, lines)?;
            not_an_axis(&knob)?;
            if let Some(first) = cols.first() {
                if first.len() != vals.len() {
                    return Err(err(
                        knob.line,
                        format!(
                            "`{k}`: a zip group's arrays must have the same length ({} here, {} for `{}`)",
                            vals.len(),
                            first.len(),
                            knobs.first().map(|k: &KnobAt| k.knob.to_string()).unwrap_or_default()
                        ),
                    ));
                }
            }
            knobs.push(knob);
            cols.push(vals);
        }
        if knobs.is_empty() {
            return Err(err(0, "an empty [[zip]] group; give two or more knobs"));
        }
        let n = cols[0].len();
        let values = (0..n)
            .map(|i| cols.iter().map(|c| c[i].clone()).collect())
            .collect();
        axes.push(Axis { knobs, values });
    }
    // A step listed twice would make two points with one key.
    for a in &axes {
        let mut seen = a.values.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != a.values.len() {
            return Err(err(
                a.knobs[0].line,
                format!(
                    "`{}`: a value (or, in a zip group, a combination) is listed twice",
                    a.knobs[0].knob
                ),
            ));
        }
    }
    // Each knob on one axis only.
    let mut seen: Vec<&KnobAt> = Vec::new();
    for a in &axes {
        for k in &a.knobs {
            if let Some(prev) = seen.iter().find(|p| p.knob == k.knob) {
                return Err(err(
                    k.line,
                    format!("knob `{}` is already an axis (line {})", k.knob, prev.line),
                ));
            }
            seen.push(k);
        }
    }
    Ok(axes)
}

fn overrides(
    raw: &RawScenario,
    axes: &[Axis],
    lines: &Lines,
) -> Result<Vec<Override>, ScenarioError> {
    let mut overrides = Vec::new();
    for o in &raw.overrides {
        let line = lines.of(o.span().start);
        let when: Vec<(Knob, Value)> = assignments(o.get_ref().when.get_ref(), lines)?
            .into_iter()
            .map(|(k, v)| (k.knob, v))
            .collect();
        for (k, _) in &when {
            if !axes.iter().any(|a| a.knobs.iter().any(|x| &x.knob == k)) {
                return Err(err(
                    lines.of(o.get_ref().when.span().start),
                    format!("override: `when` names `{k}`, which is not an axis of the matrix"),
                ));
            }
        }
        let set = assignments(o.get_ref().set.get_ref(), lines)?;
        if let Some((k, _)) = set.iter().find(|(k, _)| k.knob.scope == Scope::Variant) {
            return Err(err(
                k.line,
                "an override cannot set `command`; leave points out with [[exclude]] instead",
            ));
        }
        if when.is_empty() || set.is_empty() {
            return Err(err(
                line,
                "an [[override]] needs `when` and `set`, each with one knob or more",
            ));
        }
        overrides.push(Override { line, when, set });
    }
    Ok(overrides)
}

fn excludes(
    raw: &RawScenario,
    axes: &[Axis],
    lines: &Lines,
) -> Result<Vec<Vec<(Knob, Value)>>, ScenarioError> {
    let mut excludes: Vec<Vec<(Knob, Value)>> = Vec::new();
    for x in &raw.exclude {
        let line = lines.of(x.span().start);
        let set = assignments(x.get_ref(), lines)?;
        if set.is_empty() {
            return Err(err(
                line,
                "an empty [[exclude]]; name the knob values to leave out",
            ));
        }
        for (k, _) in &set {
            if !axes
                .iter()
                .any(|a| a.knobs.iter().any(|x| x.knob == k.knob))
            {
                return Err(err(
                    k.line,
                    format!(
                        "[[exclude]] names `{}`, which is not an axis of the matrix",
                        k.knob
                    ),
                ));
            }
        }
        excludes.push(set.into_iter().map(|(k, v)| (k.knob, v)).collect());
    }
    Ok(excludes)
}

/// The quick scale: [quick] matrix shortens axes (a zip group keeps its
/// steps whole), [quick] set applies to every point before the file's own
/// overrides.
fn quick(
    q: &RawQuick,
    axes: &mut [Axis],
    overrides: &mut Vec<Override>,
    lines: &Lines,
) -> Result<(), ScenarioError> {
    if let Some(m) = &q.matrix {
        for (k, v) in &m.0 {
            let (knob, vals) = values_of(k, v, lines)?;
            let (axis, at) = axes
                .iter_mut()
                .find_map(|a| {
                    let at = a.knobs.iter().position(|x| x.knob == knob.knob)?;
                    Some((a, at))
                })
                .ok_or_else(|| {
                    err(
                        knob.line,
                        format!("[quick] matrix: `{k}` is not a knob of [matrix] or [[zip]]"),
                    )
                })?;
            if axis.knobs.len() == 1 {
                axis.values = vals.into_iter().map(|v| vec![v]).collect();
            } else {
                // A zip group keeps its steps whole: the quick scale
                // picks the steps whose value of this knob it names.
                if let Some(v) = vals
                    .iter()
                    .find(|v| !axis.values.iter().any(|s| s[at] == **v))
                {
                    return Err(err(
                        knob.line,
                        format!(
                            "[quick] matrix: `{k}` = {} is not one of its [[zip]] group's values; \
                                 a zip group's quick scale picks among its steps",
                            v.label()
                        ),
                    ));
                }
                axis.values.retain(|s| vals.contains(&s[at]));
            }
        }
    }
    if let Some(s) = &q.set {
        let set = assignments(s, lines)?;
        for (k, _) in &set {
            if axes
                .iter()
                .any(|a| a.knobs.iter().any(|x| x.knob == k.knob))
            {
                return Err(err(
                    k.line,
                    format!(
                        "[quick] set: `{}` is an axis; shorten it with [quick] matrix instead",
                        k.knob
                    ),
                ));
            }
        }
        // Applies to every point, before the file's own overrides
        // (which are more specific).
        overrides.insert(
            0,
            Override {
                line: set.first().map(|s| s.0.line).unwrap_or(0),
                when: Vec::new(),
                set,
            },
        );
    }
    Ok(())
}

/// A value of `command` anywhere (an axis, an override's `when`, an
/// exclusion) must name one of the commands.
fn check_command_values(
    raw: &RawScenario,
    commands: &[Command],
    axes: &[Axis],
    overrides: &[Override],
    excludes: &[Vec<(Knob, Value)>],
    lines: &Lines,
) -> Result<(), ScenarioError> {
    // A value of `command` anywhere must name one of the commands.
    let named = |v: &Value| commands.iter().any(|c| Value::Arg(c.name.clone()) == *v);
    let mut variant_values: Vec<(&Knob, &Value, usize)> = Vec::new();
    for a in axes {
        for (i, k) in a.knobs.iter().enumerate() {
            variant_values.extend(a.values.iter().map(|v| (&k.knob, &v[i], k.line)));
        }
    }
    for o in overrides {
        variant_values.extend(o.when.iter().map(|(k, v)| (k, v, o.line)));
    }
    for (x, set) in raw.exclude.iter().zip(excludes) {
        let line = lines.of(x.span().start);
        variant_values.extend(set.iter().map(|(k, v)| (k, v, line)));
    }
    for (k, v, line) in variant_values {
        if k.scope == Scope::Variant && !named(v) {
            return Err(err(
                line,
                format!(
                    "`command` = \"{}\" names no command; the commands: {}",
                    v.label(),
                    commands
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    }
    Ok(())
}

impl Scenario {
    /// Whether each point runs through `xferlab lab`: in the network lab
    /// on this host, or in the lab inside the lab VM's guest.
    pub fn in_lab(&self) -> bool {
        self.place == Place::Lab || self.lab_in_vm
    }

    /// Parses and checks a scenario at the given scale. Errors carry the
    /// line they concern. The phases: the commands and where they run,
    /// the axes ([matrix], [[zip]]), the overrides and exclusions, the
    /// quick scale, then the checks that need all of them.
    pub fn parse(text: &str, scale: Scale) -> Result<Scenario, ScenarioError> {
        let lines = Lines(text);
        let raw: RawScenario = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| lines.of(s.start)).unwrap_or(0);
            err(line, e.message().trim().to_string())
        })?;
        let command_line = lines.of(raw.command.span().start);
        let commands = commands(raw.command.get_ref(), command_line)?;
        let place = raw.place.unwrap_or(Place::Loopback);
        let (lab, lab_line) = lab_flags(&raw, place, &lines)?;
        if raw.vm.is_some() && place != Place::Vm {
            return Err(err(0, "a `[vm]` section needs `where = \"vm\"`"));
        }
        let hosts = hosts(&raw, place, &lines)?;
        let mut repeat = raw
            .repeat
            .as_ref()
            .map(|r| (*r.get_ref(), lines.of(r.span().start)));
        let order = order(&raw, &lines)?;
        let mut axes = axes(&raw, &commands, command_line, &lines)?;
        let mut overrides = overrides(&raw, &axes, &lines)?;
        let excludes = excludes(&raw, &axes, &lines)?;
        let has_quick = raw.quick.is_some();
        if scale == Scale::Quick {
            let q = raw.quick.as_ref().ok_or_else(|| {
                err(
                    0,
                    "this scenario has no [quick] section; run it without --quick",
                )
            })?;
            if let Some(r) = &q.repeat {
                repeat = Some((*r.get_ref(), lines.of(r.span().start)));
            }
            quick(q, &mut axes, &mut overrides, &lines)?;
        }
        let (repeat, repeat_line) = repeat.unwrap_or((1, 0));
        if repeat == 0 || repeat > 1000 {
            return Err(err(
                repeat_line,
                format!("`repeat` must be 1-1000 (got {repeat})"),
            ));
        }
        check_command_values(&raw, &commands, &axes, &overrides, &excludes, &lines)?;
        let scenario = Scenario {
            title: raw.title,
            description: raw.description,
            commands,
            command_line,
            place,
            lab_in_vm: place == Place::Vm && raw.lab.is_some(),
            lab,
            lab_line,
            vm: raw.vm.unwrap_or_default(),
            hosts,
            axes,
            overrides,
            excludes,
            repeat,
            order,
            report: raw.report,
            has_quick,
        };
        scenario.check_report(scale)?;
        let n = scenario.points().len();
        if n > 100_000 {
            return Err(err(
                0,
                format!("the matrix expands to {n} points; at most 100000"),
            ));
        }
        Ok(scenario)
    }

    /// Every knob the scenario sets, with the line it is set on (axes,
    /// then overrides), for checking against the CLI.
    pub fn knobs(&self) -> Vec<KnobAt> {
        let mut v: Vec<KnobAt> = self
            .axes
            .iter()
            .flat_map(|a| a.knobs.iter().cloned())
            .collect();
        for o in &self.overrides {
            for (k, _) in &o.set {
                if !v.iter().any(|x| x.knob == k.knob) {
                    v.push(k.clone());
                }
            }
        }
        v
    }

    /// The command point `p` runs: its named one, else the only one.
    pub fn command_of(&self, p: &Point) -> &Command {
        match p.get("command") {
            Some(Value::Arg(name)) => self
                .commands
                .iter()
                .find(|c| &c.name == name)
                .expect("a point's command is checked to be named"),
            _ => &self.commands[0],
        }
    }

    /// The `[hosts.NAME]` called `name`.
    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.name == name)
    }

    /// Whether `name` is a knob of this scenario.
    pub fn has_knob(&self, name: &str) -> bool {
        self.knobs().iter().any(|k| k.knob.to_string() == name)
    }

    fn check_report(&self, scale: Scale) -> Result<(), ScenarioError> {
        let axis_knob = |name: &str, what: &str| -> Result<(), ScenarioError> {
            if self
                .axes
                .iter()
                .any(|a| a.knobs.iter().any(|k| k.knob.to_string() == name))
            {
                Ok(())
            } else {
                Err(err(
                    0,
                    format!(
                        "[report] {what} = \"{name}\" is not an axis of the matrix (axes: {})",
                        self.axis_names().join(", ")
                    ),
                ))
            }
        };
        for k in self.report.knobs.keys() {
            axis_knob(k, "knobs")?;
        }
        if scale == Scale::Full {
            for key in self.report.names.keys() {
                self.check_name(key)?;
            }
        }
        for t in &self.report.table {
            axis_knob(&t.rows, "rows")?;
            if let Some(c) = &t.cols {
                axis_knob(c, "cols")?;
            }
        }
        for p in &self.report.plot {
            match p.kind {
                PlotKindSpec::Lines | PlotKindSpec::Bars => {
                    let x =
                        p.x.as_deref()
                            .ok_or_else(|| err(0, "[[report.plot]] lines/bars need `x`, a knob"))?;
                    axis_knob(x, "x")?;
                    if p.metric.is_none() {
                        return Err(err(0, "[[report.plot]] lines/bars need `metric`"));
                    }
                }
                PlotKindSpec::Time => {
                    if p.metric.is_none() {
                        return Err(err(0, "[[report.plot]] kind = \"time\" needs `metric`, a per-interval series (throughput_bps, tps ...)"));
                    }
                }
                PlotKindSpec::Cdf => {}
            }
            if let Some(s) = &p.series {
                axis_knob(s, "series")?;
            }
            for (k, v) in &p.filter {
                axis_knob(k, "filter")?;
                // A value the axis never takes draws an empty plot; at the
                // quick scale an axis may lack it by design.
                let want = Value::from_toml(v, 0, k)?;
                let have: Vec<&Value> = self
                    .axes
                    .iter()
                    .flat_map(|a| {
                        a.knobs
                            .iter()
                            .enumerate()
                            .filter(|(_, at)| at.knob.to_string() == *k)
                            .flat_map(move |(i, _)| a.values.iter().map(move |step| &step[i]))
                    })
                    .collect();
                if scale == Scale::Full && !have.contains(&&want) {
                    let shown = |x: &Value| match x {
                        Value::Arg(s) => format!("{s:?}"),
                        Value::Switch(b) => b.to_string(),
                    };
                    let values: Vec<String> = have.iter().map(|x| shown(x)).collect();
                    return Err(err(
                        0,
                        format!(
                            "[[report.plot]] filter \"{k}\" = {} is none of that axis's values ({}); \
                             a switch is written false or true, not in quotes",
                            shown(&want),
                            values.join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// A `[report.names]` key must be a combination a report writes:
    /// `knob value` pairs joined by ", ", each knob an axis and each value
    /// one of its values; a typo would otherwise leave the flags showing.
    fn check_name(&self, key: &str) -> Result<(), ScenarioError> {
        let bad = |why: String| {
            err(
                0,
                format!("[report.names] \"{key}\": {why}; write it as reports do, e.g. \"-l 64K, -P 2\""),
            )
        };
        // One value that holds ", " itself (a named command's
        // "model (EHCI, FFS AIO)") is a whole key, not a combination.
        if self.is_one_value(key) {
            return Ok(());
        }
        for pair in key.split(", ") {
            let mut found = false;
            for a in &self.axes {
                for (i, k) in a.knobs.iter().enumerate() {
                    let name = k.knob.to_string();
                    let Some(value) = pair
                        .strip_prefix(name.as_str())
                        .and_then(|r| r.strip_prefix(' '))
                    else {
                        continue;
                    };
                    let labels: Vec<String> = a.values.iter().map(|s| s[i].label()).collect();
                    if !labels.iter().any(|l| l == value) {
                        return Err(bad(format!(
                            "`{name}` never takes {value:?} (its values: {})",
                            labels.join(", ")
                        )));
                    }
                    found = true;
                }
            }
            if !found {
                return Err(bad(format!(
                    "`{pair}` starts with no axis knob (axes: {})",
                    self.axis_names().join(", ")
                )));
            }
        }
        Ok(())
    }

    /// Whether `pair` is `knob value` for one axis knob and one of its
    /// values, as a report writes it.
    fn is_one_value(&self, pair: &str) -> bool {
        self.axes.iter().any(|a| {
            a.knobs.iter().enumerate().any(|(i, k)| {
                pair.strip_prefix(k.knob.to_string().as_str())
                    .and_then(|r| r.strip_prefix(' '))
                    .is_some_and(|value| a.values.iter().any(|s| s[i].label() == value))
            })
        })
    }

    /// The names of the axes' knobs, in order.
    pub fn axis_names(&self) -> Vec<String> {
        self.axes
            .iter()
            .flat_map(|a| a.knobs.iter().map(|k| k.knob.to_string()))
            .collect()
    }

    /// The cross product of the axes (the last axis varies fastest), each
    /// point with its overrides applied.
    pub fn points(&self) -> Vec<Point> {
        let mut points = vec![Point { knobs: Vec::new() }];
        for axis in &self.axes {
            let mut next = Vec::with_capacity(points.len() * axis.values.len());
            for p in &points {
                for step in &axis.values {
                    let mut q = p.clone();
                    for (k, v) in axis.knobs.iter().zip(step) {
                        q.knobs.push((k.knob.clone(), v.clone()));
                    }
                    next.push(q);
                }
            }
            points = next;
        }
        points.retain(|p| {
            !self.excludes.iter().any(|x| {
                x.iter()
                    .all(|(k, v)| p.knobs.iter().any(|(pk, pv)| pk == k && pv == v))
            })
        });
        for p in &mut points {
            for o in &self.overrides {
                let applies = o
                    .when
                    .iter()
                    .all(|(k, v)| p.knobs.iter().any(|(pk, pv)| pk == k && pv == v));
                if !applies {
                    continue;
                }
                for (k, v) in &o.set {
                    match p.knobs.iter_mut().find(|(pk, _)| pk == &k.knob) {
                        Some(slot) => slot.1 = v.clone(),
                        None => p.knobs.push((k.knob.clone(), v.clone())),
                    }
                }
            }
        }
        points
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
title = "t"
command = "stream -t 3"
repeat = 3
order = "interleaved"

[matrix]
"-l" = ["64K", "1M"]
"-P" = [1, 2]

[[zip]]
"-w" = ["1M", "4M"]
"-C" = ["cubic", "bbr"]

[[override]]
when = { "-l" = "64K" }
set = { "-N" = true }

[quick]
repeat = 1
set = { "-t" = 1 }
matrix = { "-P" = [1] }

[[report.table]]
metric = "throughput_bps"
rows = "-l"
cols = "-P"
"#;

    #[test]
    fn host_knobs_name_a_lab_host_and_round_trip() {
        let k = Knob::parse("@ref  -r", 3).unwrap();
        assert_eq!(k.scope, Scope::Host("ref".into()));
        assert_eq!(k.flag, "-r");
        assert_eq!(k.to_string(), "@ref -r");
        assert_eq!(Knob::parse(&k.to_string(), 3).unwrap(), k);
        assert_eq!(Knob::parse("lab --mark", 1).unwrap().scope, Scope::Lab);
        assert_eq!(Knob::parse("-t", 1).unwrap().scope, Scope::Command);
        for bad in ["@Ref -r", "@ -r", "@ref", "@ref r", "@re-f -r"] {
            let e = Knob::parse(bad, 7).unwrap_err();
            assert_eq!(e.line, 7, "{bad}");
        }
    }

    #[test]
    fn reports_name_metrics_knobs_and_values_and_typos_are_refused() {
        let named = format!(
            "{BASE}[report.metrics]\nthroughput_bps = \"Throughput\"\n\
             [report.knobs]\n\"-l\" = \"Write size\"\n\
             [report.names]\n\"-w 1M, -C cubic\" = \"small buffer, CUBIC\"\n\"-l 64K\" = \"64 KB\"\n"
        );
        let s = Scenario::parse(&named, Scale::Full).unwrap();
        let r = &s.report;
        assert_eq!(r.metric_label("throughput_bps"), "Throughput");
        assert_eq!(r.metric_label("tps"), "tps");
        assert_eq!(r.knob_label("-l"), "Write size");
        assert_eq!(r.knob_label("-P"), "-P");
        let v = |k: &str, x: &str| (k.to_string(), Value::Arg(x.into()));
        assert_eq!(
            r.combo_label(&[v("-w", "1M"), v("-C", "cubic")]),
            "small buffer, CUBIC"
        );
        assert_eq!(
            r.combo_label(&[v("-w", "4M"), v("-C", "bbr")]),
            "-w 4M, -C bbr"
        );
        assert_eq!(
            r.combo_label(&[v("-l", "64K"), v("-P", "2")]),
            "64 KB, -P 2"
        );
        // A name for a value no axis takes, or for no axis, is a typo.
        for (bad, why) in [
            ("\"-l 65K\" = \"x\"", "`-l` never takes \"65K\""),
            ("\"-R on\" = \"x\"", "starts with no axis knob"),
        ] {
            let text = format!("{BASE}[report.names]\n{bad}\n");
            let e = Scenario::parse(&text, Scale::Full).unwrap_err();
            assert!(e.message.contains(why), "{}", e.message);
            // The quick scale lacks values by design: not checked there.
            assert!(Scenario::parse(&text, Scale::Quick).is_ok());
        }
        let e = error_of(&format!("{BASE}[report.knobs]\n\"-R\" = \"x\"\n"));
        assert!(
            e.message.contains("knobs = \"-R\" is not an axis"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_points_knobs_keep_their_order_in_json() {
        let s = Scenario::parse(BASE, Scale::Full).unwrap();
        let p = &s.points()[0];
        let text = p.to_json();
        assert!(text.starts_with("{\"-l\":\"64K\",\"-P\":\"1\""), "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v.as_object().unwrap().len(), p.knobs.len());
    }

    #[test]
    fn expands_cross_product_zip_and_overrides() {
        let s = Scenario::parse(BASE, Scale::Full).unwrap();
        assert_eq!(s.commands[0].words, ["stream", "-t", "3"]);
        assert_eq!(s.repeat, 3);
        assert_eq!(s.order, Order::Interleaved);
        let pts = s.points();
        assert_eq!(pts.len(), 2 * 2 * 2);
        // Last axis fastest: the zip group.
        assert_eq!(pts[0].label(), "-l 64K, -P 1, -w 1M, -C cubic, -N on");
        assert_eq!(pts[1].label(), "-l 64K, -P 1, -w 4M, -C bbr, -N on");
        assert_eq!(pts[4].label(), "-l 1M, -P 1, -w 1M, -C cubic");
        let keys: std::collections::HashSet<_> = pts.iter().map(|p| p.key()).collect();
        assert_eq!(keys.len(), 8);
        assert_eq!(pts[4].key(), "-C=cubic;-P=1;-l=1M;-w=1M");
    }

    #[test]
    fn quick_scale_shortens() {
        let s = Scenario::parse(BASE, Scale::Quick).unwrap();
        assert_eq!(s.repeat, 1);
        let pts = s.points();
        assert_eq!(pts.len(), 4, "2 sizes x 1 quick -P x 2 zip steps");
        assert_eq!(pts[0].get("-t"), Some(&Value::Arg("1".into())));
        assert_eq!(pts[0].get("-N"), Some(&Value::Switch(true)));
        assert_eq!(pts[2].get("-N"), None);
    }

    #[test]
    fn quick_scale_picks_steps_of_a_zip_group() {
        let text = BASE.replace(
            r#"matrix = { "-P" = [1] }"#,
            r#"matrix = { "-P" = [1], "-C" = ["bbr"] }"#,
        );
        let pts = Scenario::parse(&text, Scale::Quick).unwrap().points();
        assert_eq!(pts.len(), 2, "2 sizes x 1 quick -P x the one bbr step");
        assert!(pts
            .iter()
            .all(|p| p.get("-w") == Some(&Value::Arg("4M".into()))));
        // The full scale is untouched.
        assert_eq!(
            Scenario::parse(&text, Scale::Full).unwrap().points().len(),
            8
        );

        let bad = BASE.replace(
            r#"matrix = { "-P" = [1] }"#,
            r#"matrix = { "-C" = ["reno"] }"#,
        );
        let e = Scenario::parse(&bad, Scale::Quick).unwrap_err();
        assert!(
            e.message.contains("`-C` = reno is not one of its [[zip]]"),
            "{e}"
        );
        let bad = BASE.replace(r#"matrix = { "-P" = [1] }"#, r#"matrix = { "-Z" = [1] }"#);
        let e = Scenario::parse(&bad, Scale::Quick).unwrap_err();
        assert!(
            e.message.contains("not a knob of [matrix] or [[zip]]"),
            "{e}"
        );
    }

    fn error_of(text: &str) -> ScenarioError {
        Scenario::parse(text, Scale::Full).unwrap_err()
    }

    #[test]
    fn errors_name_the_line() {
        let e = error_of("title = \"t\"\ncommand = \"stream\"\nrepeats = 3\n");
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("repeats"), "{e}");

        let e = error_of("title = \"t\"\ncommand = \"stream\"\n[matrix]\n\"-l\" = \"64K\"\n");
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("must be an array"), "{e}");

        let e = error_of(
            "title = \"t\"\ncommand = \"stream\"\n[matrix]\n\"-l\" = [\"1\"]\nlength = [1]\n",
        );
        assert_eq!(e.line, 5, "{e}");
        assert!(e.message.contains("not a flag"), "{e}");

        let e = error_of("title = \"t\"\ncommand = \"stream\n");
        assert_eq!(e.line, 2, "{e}");

        let e = error_of("title = \"t\"\ncommand = \"stream\"\norder = \"random\"\n");
        assert_eq!(e.line, 3, "{e}");
        assert!(
            e.message.contains("sequential, interleaved or shuffled"),
            "{e}"
        );

        let e = error_of(
            "title = \"t\"\ncommand = \"stream\"\n[[zip]]\n\"-l\" = [\"1\", \"2\"]\n\"-w\" = [\"1\"]\n",
        );
        assert_eq!(e.line, 5, "{e}");

        let e = error_of("title = \"t\"\ncommand = \"stream\"\n[matrix]\n\"-l\" = [1]\n[[report.table]]\nmetric = \"x\"\nrows = \"-P\"\n");
        assert!(e.message.contains("not an axis"), "{e}");

        let e = error_of("title = \"t\"\ncommand = \"stream\"\nlab = \"--rate 1M\"\n");
        assert_eq!(e.line, 3, "{e}");

        // A filter value the axis never takes: a quoted switch.
        let bad_filter = "title = \"t\"\ncommand = \"stream\"\n[matrix]\n\"--bidir\" = [false, true]\n\
            [[report.plot]]\nkind = \"time\"\nmetric = \"throughput_bps\"\nfilter = { \"--bidir\" = \"false\" }\n";
        let e = error_of(bad_filter);
        assert!(
            e.message
                .contains("\"--bidir\" = \"false\" is none of that axis's values (false, true)"),
            "{e}"
        );
        assert!(
            Scenario::parse(&bad_filter.replace("\"false\" }", "false }"), Scale::Full).is_ok()
        );
    }

    #[test]
    fn excludes_leave_points_out() {
        let s = Scenario::parse(
            "title = \"t\"\ncommand = \"usb bulk\"\n[matrix]\n\"-l\" = [64, 512]\n\"--dir\" = [\"in\", \"out\"]\n[[exclude]]\n\"-l\" = 64\n\"--dir\" = \"in\"\n",
            Scale::Full,
        )
        .unwrap();
        let keys: Vec<String> = s.points().iter().map(Point::key).collect();
        assert_eq!(
            keys,
            ["--dir=out;-l=64", "--dir=in;-l=512", "--dir=out;-l=512"]
        );
        let e = Scenario::parse(
            "title = \"t\"\ncommand = \"stream\"\n[[exclude]]\n\"-l\" = 1\n",
            Scale::Full,
        )
        .unwrap_err();
        assert_eq!(e.line, 4, "{e}");
    }

    /// `lab` flags put each point through `xferlab lab`: on this host
    /// (where = "lab"), or inside the lab VM's guest (where = "vm"); a
    /// loopback scenario has no lab to put them in.
    #[test]
    fn lab_flags_run_in_the_lab_here_or_inside_the_vm() {
        let text = |place: &str| {
            format!("title = \"t\"\nwhere = \"{place}\"\nlab = \"--rate 20M\"\ncommand = \"stream --dccp\"\n")
        };
        let vm = Scenario::parse(&text("vm"), Scale::Full).unwrap();
        assert!(vm.in_lab() && vm.lab_in_vm);
        assert_eq!(vm.lab, ["--rate", "20M"]);
        let lab = Scenario::parse(&text("lab"), Scale::Full).unwrap();
        assert!(lab.in_lab() && !lab.lab_in_vm);
        let plain_vm = Scenario::parse(
            "title = \"t\"\nwhere = \"vm\"\ncommand = \"usb bulk\"\n",
            Scale::Full,
        )
        .unwrap();
        assert!(!plain_vm.in_lab());
        let e = error_of(&text("loopback"));
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("where = \"lab\""), "{e}");
    }

    #[test]
    fn hosts_name_agents_servers_and_keys() {
        let text = "title = \"t\"\nwhere = \"hosts\"\ncommand = \"@a:b stream -t 1\"\n\
            [hosts.a]\nagent = \"10.9.0.1:5290\"\nkey = \"k\"\n\
            [hosts.b]\nagent = \"[fd00::2]:6000\"\naddress = \"fd00::3\"\nkey = \"keys/b\"\n\
            [hosts.c_2]\nagent = \"c.example:7000\"\naddress = \"10.9.1.3:5201\"\nkey = \"k\"\n";
        let s = Scenario::parse(text, Scale::Full).unwrap();
        assert_eq!(s.place, Place::Hosts);
        let names: Vec<&str> = s.hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c_2"]);
        let a = s.host("a").unwrap();
        assert_eq!((a.server_addr.as_str(), a.server_port), ("10.9.0.1", 5290));
        assert_eq!((a.line, a.key_line), (5, 6));
        let b = s.host("b").unwrap();
        assert_eq!(b.server(), "[fd00::3]:6000");
        assert_eq!(b.key, "keys/b");
        assert_eq!(s.host("c_2").unwrap().server(), "10.9.1.3:5201");

        let bad = |from: &str, to: &str| error_of(&text.replace(from, to));
        let e = bad("\"10.9.0.1:5290\"", "\"10.9.0.1\"");
        assert_eq!(e.line, 5, "{e}");
        assert!(
            e.message
                .contains("[hosts.a] agent = \"10.9.0.1\" is not ADDR:PORT"),
            "{e}"
        );
        let e = bad("address = \"fd00::3\"", "address = \"fd00::3 x\"");
        assert!(e.message.contains("[hosts.b] address"), "{e}");
        let e = bad(
            "[hosts.a]\nagent = \"10.9.0.1:5290\"\nkey = \"k\"\n",
            "[hosts.a]\nagent = \"10.9.0.1:5290\"\n",
        );
        assert!(e.message.contains("key"), "{e}");
        let e = bad("[hosts.a]", "[hosts.A]");
        assert!(e.message.contains("[hosts.A]: a host's name"), "{e}");
        let e = bad("where = \"hosts\"\n", "");
        assert!(
            e.message
                .contains("[hosts] names agents for `where = \"hosts\"`"),
            "{e}"
        );
        let e = error_of("title = \"t\"\nwhere = \"hosts\"\ncommand = \"@a:b stream\"\n");
        assert!(e.message.contains("add [hosts.NAME]"), "{e}");
        let e = bad(
            "where = \"hosts\"\n",
            "where = \"hosts\"\nlab = \"--rate 1M\"\n",
        );
        assert!(e.message.contains("`lab` flags need"), "{e}");
    }

    #[test]
    fn host_ports_split() {
        assert_eq!(split_host_port("1.2.3.4:80"), Some(("1.2.3.4".into(), 80)));
        assert_eq!(split_host_port("[::1]:80"), Some(("::1".into(), 80)));
        assert_eq!(split_host_port("h:0"), None);
        assert_eq!(split_host_port("::1:80"), None);
        assert_eq!(split_host_port(":80"), None);
        assert_eq!(split_host_port("h"), None);
    }

    #[test]
    fn quick_without_section_is_refused() {
        let e = Scenario::parse("title = \"t\"\ncommand = \"stream\"\n", Scale::Quick).unwrap_err();
        assert!(e.message.contains("no [quick]"), "{e}");
    }

    #[test]
    fn lab_knobs_and_word_splitting() {
        let s = Scenario::parse(
            "title = \"t\"\nwhere = \"lab\"\nlab = \"--rate 50M --delay '10ms'\"\ncommand = [\"rr\", \"-r\", \"5K\"]\n[matrix]\n\"lab --mark\" = [\"c2s:1/50\"]\n",
            Scale::Full,
        )
        .unwrap();
        assert_eq!(s.lab, ["--rate", "50M", "--delay", "10ms"]);
        let p = &s.points()[0];
        assert!(p.knobs[0].0.is_lab());
        assert_eq!(p.key(), "lab --mark=c2s:1/50");
        assert_eq!(
            shlex_split("a \"b c\" d\\ e 'f\"g'"),
            Some(vec!["a".into(), "b c".into(), "d e".into(), "f\"g".into()])
        );
        assert_eq!(shlex_split("a 'b"), None);
    }

    const NAMED: &str = "title = \"t\"\nwhere = \"vm\"\n[command]\nmeasured = \"usb bulk -t 5 -i 1\"\n\"the model\" = [\"model\", \"usb\"]\n[matrix]\n\"-l\" = [512, \"64K\"]\n[[exclude]]\ncommand = \"the model\"\n\"-l\" = 512\n[quick]\nmatrix = { command = [\"the model\"] }\n[[report.plot]]\nkind = \"bars\"\nmetric = \"throughput_bps\"\nx = \"-l\"\nseries = \"command\"\n";

    #[test]
    fn named_commands_are_the_first_axis() {
        let s = Scenario::parse(NAMED, Scale::Full).unwrap();
        assert_eq!(s.commands.len(), 2);
        assert_eq!(s.commands[1].name, "the model");
        assert_eq!(s.commands[1].words, ["model", "usb"]);
        let keys: Vec<String> = s.points().iter().map(Point::key).collect();
        assert_eq!(
            keys,
            [
                "-l=512;command=measured",
                "-l=64K;command=measured",
                "-l=64K;command=the model"
            ]
        );
        let p = &s.points()[2];
        assert_eq!(s.command_of(p).words, ["model", "usb"]);
        assert_eq!(p.label(), "command the model, -l 64K");
        let q = Scenario::parse(NAMED, Scale::Quick).unwrap();
        assert_eq!(q.points().len(), 1);
        // One unnamed command: no axis, and every point runs it.
        let one = Scenario::parse(BASE, Scale::Full).unwrap();
        assert_eq!(one.commands[0].name, "");
        assert!(!one.has_knob("command"));
    }

    /// A command whose name holds ", " is named whole; a combination
    /// with it still parses pair by pair.
    #[test]
    fn a_value_with_a_comma_takes_a_name() {
        let text = NAMED.replace("the model", "model (EHCI, FFS AIO)")
            + "[report.names]\n\"command model (EHCI, FFS AIO)\" = \"model: EHCI\"\n";
        let s = Scenario::parse(&text, Scale::Full).unwrap();
        let v = Value::Arg("model (EHCI, FFS AIO)".into());
        assert_eq!(s.report.value_label("command", &v), "model: EHCI");
        let e = error_of(&(text.clone() + "\"command model (EHCI, FFS)\" = \"x\"\n"));
        assert!(e.message.contains("never takes \"model (EHCI\""), "{e}");
    }

    #[test]
    fn named_commands_refuse_what_names_none() {
        let e = error_of(&NAMED.replace("command = \"the model\"\n", "command = \"model\"\n"));
        assert!(e.message.contains("names no command"), "{e}");
        assert_eq!(e.line, 8, "the [[exclude]]: {e}");
        let e = error_of("title = \"t\"\ncommand = \"stream\"\n[matrix]\ncommand = [\"a\"]\n");
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("table of named commands"), "{e}");
        let e = error_of("title = \"t\"\n[command]\na = \"stream\"\nb = \"lab stream\"\n");
        assert!(e.message.contains("names the verb only"), "{e}");
        let e = error_of("title = \"t\"\ncommand = {}\n");
        assert!(e.message.contains("names no command"), "{e}");
        let e = error_of(&format!(
            "{NAMED}[[override]]\nwhen = {{ \"-l\" = 512 }}\nset = {{ command = \"measured\" }}\n"
        ));
        assert!(e.message.contains("cannot set `command`"), "{e}");
    }
}
