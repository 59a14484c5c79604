//! From a scenario's points to ordinary xferlab command lines, checked
//! against the command line definition itself (clap), so a scenario can
//! use every flag the CLI has and nothing else.

use xferlab_core::experiment::scenario::{Knob, KnobAt, Place, Point, Scenario, Scope, Value};

/// A scenario that does not fit the command line: `file:line: message`
/// is printed by the caller.
#[derive(Debug, thiserror::Error)]
#[error("{line}: {message}")]
pub struct ArgvError {
    pub line: usize,
    pub message: String,
}

fn err(line: usize, message: impl Into<String>) -> ArgvError {
    ArgvError {
        line,
        message: message.into(),
    }
}

/// The verbs a scenario may run.
const VERBS: &[&[&str]] = &[
    &["stream"],
    &["cbr"],
    &["sweep"],
    &["rr"],
    &["usb", "bulk"],
    &["usb", "cbr"],
    &["model", "usb"],
];

/// A flag as clap knows it.
#[derive(Debug, Clone)]
struct FlagInfo {
    short: Option<char>,
    longs: Vec<String>,
    takes_value: bool,
}

impl FlagInfo {
    fn matches(&self, flag: &str) -> bool {
        if let Some(l) = flag.strip_prefix("--") {
            self.longs.iter().any(|x| x == l)
        } else if let Some(s) = flag.strip_prefix('-') {
            let mut c = s.chars();
            matches!((c.next(), c.next()), (Some(ch), None) if Some(ch) == self.short)
        } else {
            false
        }
    }

    fn display(&self) -> String {
        match (self.short, self.longs.first()) {
            (Some(s), Some(l)) => format!("-{s}/--{l}"),
            (Some(s), None) => format!("-{s}"),
            (None, Some(l)) => format!("--{l}"),
            (None, None) => String::new(),
        }
    }
}

fn flags_of(cmd: &clap::Command) -> Vec<FlagInfo> {
    cmd.get_arguments()
        .filter(|a| !a.is_positional())
        .filter(|a| a.get_id() != "help" && a.get_id() != "version")
        .map(|a| {
            let mut longs: Vec<String> = a.get_long().into_iter().map(String::from).collect();
            longs.extend(
                a.get_all_aliases()
                    .unwrap_or_default()
                    .into_iter()
                    .map(String::from),
            );
            FlagInfo {
                short: a.get_short(),
                longs,
                takes_value: a.get_action().takes_values(),
            }
        })
        .collect()
}

/// Flags the runner sets itself on every point.
const RUNNER_FLAGS: &[&str] = &["-J", "--json", "-o", "--output", "--format", "--db"];

/// Flags the runner sets from `[hosts]` on every point of a `where =
/// "hosts"` scenario: the server and its port, and the key, which each
/// agent has of its own.
const HOSTS_FLAGS: &[&str] = &["-p", "--port", "--auth-key"];

/// Flags an agent refuses in an order, since they touch the agent's host
/// (its CPUs, its USB bus): refused here, before anything runs.
const AGENT_REFUSES: &[&str] = &["--load", "--usbmon"];

/// The verbs an agent runs (a client against another host's server).
const AGENT_VERBS: &[&str] = &["stream", "cbr", "sweep", "rr"];

/// Which hosts a point of a `where = "hosts"` scenario runs between.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// The host whose agent runs the test as its client.
    pub client: String,
    /// The host whose test server it runs against.
    pub server: String,
}

/// A scenario's command lines, ready to run.
pub struct Invocations {
    /// Per point (same order as `Scenario::points`): the argv without the
    /// program name and without the output flags.
    pub argv: Vec<Vec<String>>,
    /// The command runs several tests in one lab (`@HOST` segments): each
    /// already asks for JSON (`-J`), and the one document they make
    /// together comes on standard output, not through `-o`.
    pub several: bool,
    /// Per point, for `where = "hosts"`: the hosts it runs between; its
    /// argv is then the order for the client's agent (the server's
    /// address first, as the verb's HOST).
    pub remote: Vec<Option<Remote>>,
}

/// One test of the command: the plain command's only test, or the test an
/// `@HOST[:SERVER]` segment starts from lab host HOST.
struct Segment {
    /// The `@HOST[:SERVER]` word and the host it names.
    at: Option<(String, String)>,
    /// `where = "hosts"`: the server host of `@CLIENT:SERVER`.
    server: Option<String>,
    verb: Vec<String>,
    base: Vec<String>,
    flags: Vec<FlagInfo>,
}

/// A piece of a lab command: a test, or an `exec HOST -- CMD` program,
/// passed on as written.
enum Part {
    Test(Segment),
    Exec(Vec<String>),
}

/// The binary's command line, as points are checked against it. The
/// binary's `cli` makes it (`cli::grammar`), a floor above this one: so
/// the runner reads flags and parses command lines without importing the
/// clap definitions.
pub struct Grammar {
    /// The whole command line, built (its global flags, `--load` and
    /// `-v`, propagated to every verb, as clap does when it parses).
    pub root: clap::Command,
    /// Parses one command line (`xferlab` first) and runs the verb's own
    /// checks of its values, as the binary would: the one line it would
    /// print when it refuses.
    pub check: fn(Vec<String>) -> Result<(), String>,
}

fn resolve_verb(
    g: &Grammar,
    words: &[String],
    in_lab: bool,
    line: usize,
) -> Result<Segment, ArgvError> {
    let root = &g.root;
    let verb = VERBS
        .iter()
        .find(|v| {
            words.len() >= v.len()
                && words[..v.len()] == v.iter().map(|x| x.to_string()).collect::<Vec<_>>()[..]
        })
        .ok_or_else(|| {
            err(
                line,
                format!(
                    "`command` must start with a test verb: {} (got `{}`)",
                    VERBS
                        .iter()
                        .map(|v| v.join(" "))
                        .collect::<Vec<_>>()
                        .join(", "),
                    words.first().map_or("", String::as_str)
                ),
            )
        })?;
    let mut cmd = root;
    for w in verb.iter() {
        cmd = cmd
            .find_subcommand(w)
            .expect("VERBS names existing subcommands");
    }
    if in_lab && verb[0] == "usb" {
        return Err(err(
            line,
            "`usb bulk` cannot run in the network lab; use where = \"vm\"",
        ));
    }
    Ok(Segment {
        at: None,
        server: None,
        verb: verb.iter().map(|x| x.to_string()).collect(),
        base: words[verb.len()..].to_vec(),
        flags: flags_of(cmd),
    })
}

/// Where a program of a lab command starts (as `xferlab lab` splits them).
fn starts_program(w: &str) -> bool {
    w.starts_with('@') || w == "exec"
}

/// The command's tests (and exec'd programs): one test, or in the lab the
/// `@HOST ...` and `exec ...` programs it is made of.
fn parts_of(g: &Grammar, s: &Scenario, command: &[String]) -> Result<Vec<Part>, ArgvError> {
    let line = s.command_line;
    if s.place == Place::Hosts {
        return Ok(vec![Part::Test(host_segment(g, s, command)?)]);
    }
    let several = command.iter().any(|w| starts_program(w));
    if !several {
        return Ok(vec![Part::Test(resolve_verb(
            g,
            command,
            s.in_lab(),
            line,
        )?)]);
    }
    if !s.in_lab() {
        return Err(err(
            line,
            "`@HOST` tests and `exec` programs run in the lab; set where = \"lab\"",
        ));
    }
    if !starts_program(&command[0]) {
        return Err(err(
            line,
            format!(
                "`command` runs several programs, so each starts with `@HOST` or `exec` (got `{}` first)",
                command[0]
            ),
        ));
    }
    let mut parts = Vec::new();
    let mut i = 0;
    while i < command.len() {
        let end = (i + 1..command.len())
            .find(|&j| starts_program(&command[j]))
            .unwrap_or(command.len());
        let words = &command[i..end];
        if words[0] == "exec" {
            parts.push(Part::Exec(words.to_vec()));
        } else {
            let host = words[0][1..].split(':').next().unwrap_or("").to_string();
            if host.is_empty() {
                return Err(err(line, "`@` must name a lab host: `@bg stream ...`"));
            }
            if parts.iter().any(
                |p| matches!(p, Part::Test(t) if t.at.as_ref().is_some_and(|(_, h)| *h == host)),
            ) {
                return Err(err(
                    line,
                    format!("two tests start from lab host `{host}`; give each test its own host (`--client NAME` in `lab`)"),
                ));
            }
            let mut seg = resolve_verb(g, &words[1..], s.in_lab(), line)?;
            seg.at = Some((words[0].clone(), host));
            parts.push(Part::Test(seg));
        }
        i = end;
    }
    if !parts.iter().any(|p| matches!(p, Part::Test(_))) {
        return Err(err(
            line,
            "`command` runs no test; add one from a lab host (`@client stream -t 10`)",
        ));
    }
    Ok(parts)
}

/// The one test of a `where = "hosts"` command, `@CLIENT:SERVER VERB
/// FLAGS`: both hosts declared, a verb an agent runs.
fn host_segment(g: &Grammar, s: &Scenario, command: &[String]) -> Result<Segment, ArgvError> {
    let line = s.command_line;
    let names = s
        .hosts
        .iter()
        .map(|h| h.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let first = command.first().map_or("", String::as_str);
    let pair = first
        .strip_prefix('@')
        .and_then(|p| p.split_once(':'))
        .filter(|(c, v)| !c.is_empty() && !v.is_empty());
    let Some((client, server)) = pair else {
        return Err(err(
            line,
            format!(
                "`command`: each command of a where = \"hosts\" scenario starts with `@CLIENT:SERVER`, the hosts it runs from and against (hosts: {names}), e.g. \"@{0}:{0} stream -t 10\" (got `{first}`)",
                s.hosts.first().map_or("a", |h| h.name.as_str())
            ),
        ));
    };
    for (role, h) in [("client", client), ("server", server)] {
        if s.host(h).is_none() {
            return Err(err(
                line,
                format!("`command` `{first}`: no host `{h}` (the {role}); declare [hosts.{h}] with its agent = \"ADDR:PORT\" and key, or use one of: {names}"),
            ));
        }
    }
    if let Some(w) = command[1..].iter().find(|w| starts_program(w)) {
        return Err(err(
            line,
            format!("`command` `{w}`: a point across hosts runs one test; give each pair its own named command (command = {{ \"a to b\" = \"@a:b stream\", ... }})"),
        ));
    }
    let mut seg = resolve_verb(g, &command[1..], false, line)?;
    if !AGENT_VERBS.contains(&seg.verb[0].as_str()) {
        return Err(err(
            line,
            format!(
                "`command` `{}`: an agent runs {} only",
                seg.verb.join(" "),
                AGENT_VERBS.join(", ")
            ),
        ));
    }
    seg.at = Some((first.to_string(), client.to_string()));
    seg.server = Some(server.to_string());
    Ok(seg)
}

fn lab_flags(g: &Grammar) -> Vec<FlagInfo> {
    flags_of(g.root.find_subcommand("lab").expect("lab exists"))
}

/// Removes every occurrence of `f` (and its value) from `words`.
fn remove_flag(words: &mut Vec<String>, f: &FlagInfo) {
    let mut out = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        let (name, attached) = match w.split_once('=') {
            Some((n, _)) if n.starts_with("--") => (n.to_string(), true),
            _ => (w.clone(), false),
        };
        let short_attached = !w.starts_with("--")
            && w.starts_with('-')
            && w.len() > 2
            && f.takes_value
            && f.short.is_some_and(|s| w[1..].starts_with(s));
        if f.matches(&name) {
            i += if f.takes_value && !attached { 2 } else { 1 };
            continue;
        }
        if short_attached {
            i += 1;
            continue;
        }
        out.push(w.clone());
        i += 1;
    }
    *words = out;
}

fn knob_args(k: &Knob, v: &Value, info: &FlagInfo, line: usize) -> Result<Vec<String>, ArgvError> {
    match (v, info.takes_value) {
        (Value::Arg(s), true) => {
            // `--flag=value` keeps values that start with '-' (negative
            // numbers) from being read as flags.
            if s.starts_with('-') {
                match info.longs.first() {
                    Some(l) => Ok(vec![format!("--{l}={s}")]),
                    None => Ok(vec![k.flag.clone(), s.clone()]),
                }
            } else {
                Ok(vec![k.flag.clone(), s.clone()])
            }
        }
        (Value::Switch(b), false) => Ok(if *b { vec![k.flag.clone()] } else { vec![] }),
        // false: the flag is not given (a base command's is removed), as
        // the idle point beside `"--load" = [false, "cpu=1,mem=1"]`.
        (Value::Switch(false), true) => Ok(vec![]),
        (Value::Switch(true), true) => Err(err(
            line,
            format!("`{k}` takes a value (a string or number), not true; false leaves it out"),
        )),
        (Value::Arg(s), false) => Err(err(
            line,
            format!("`{k}` is a switch without a value; write true or false, not \"{s}\""),
        )),
    }
}

fn lookup<'a>(flags: &'a [FlagInfo], k: &KnobAt, verb: &str) -> Result<&'a FlagInfo, ArgvError> {
    if RUNNER_FLAGS.contains(&k.knob.flag.as_str()) {
        return Err(err(
            k.line,
            format!(
                "`{}` is set by the runner itself (results go to the database); remove it",
                k.knob
            ),
        ));
    }
    flags
        .iter()
        .find(|f| f.matches(&k.knob.flag))
        .ok_or_else(|| {
            let mut valid: Vec<String> = flags
                .iter()
                .map(FlagInfo::display)
                .filter(|d| !RUNNER_FLAGS.iter().any(|r| d.split('/').any(|x| x == *r)))
                .collect();
            valid.sort();
            err(
                k.line,
                format!(
                    "unknown flag `{}` for `{verb}`; valid: {}",
                    k.knob.flag,
                    valid.join(", ")
                ),
            )
        })
}

/// Where a knob's flag goes: the index of each test it sets (None: the
/// lab's flags), with the flag as that verb defines it.
type Targets = Vec<(Option<usize>, FlagInfo)>;

/// One command's programs, and where each knob's flag goes in them.
struct Shape {
    parts: Vec<Part>,
    /// Several tests in one lab (`@HOST` segments).
    several: bool,
    infos: Vec<(KnobAt, Targets)>,
}

/// The tests among a command's programs.
fn tests_of(parts: &[Part]) -> impl Iterator<Item = &Segment> {
    parts.iter().filter_map(|p| match p {
        Part::Test(t) => Some(t),
        Part::Exec(_) => None,
    })
}

/// Where the scenario's knobs go in one of its commands. A plain knob
/// sets every test whose verb has the flag (none may: `build` checks that
/// some command has it).
fn shape(
    g: &Grammar,
    s: &Scenario,
    command: &[String],
    lab: &[FlagInfo],
) -> Result<Shape, ArgvError> {
    let parts = parts_of(g, s, command)?;
    let tests: Vec<&Segment> = tests_of(&parts).collect();
    // Across hosts, `@CLIENT:SERVER` picks the agent: one test per point.
    let several = s.place != Place::Hosts && tests.iter().any(|t| t.at.is_some());
    for w in tests.iter().flat_map(|t| &t.base).chain(&s.lab) {
        if RUNNER_FLAGS.contains(&w.as_str())
            || w.starts_with("--format=")
            || w.starts_with("--output=")
        {
            return Err(err(
                if s.lab.contains(w) {
                    s.lab_line
                } else {
                    s.command_line
                },
                format!(
                    "`{w}` is set by the runner itself (results go to the database); remove it"
                ),
            ));
        }
    }
    let hosts_flag = |w: &str| {
        s.place == Place::Hosts
            && HOSTS_FLAGS
                .iter()
                .chain(AGENT_REFUSES)
                .any(|f| w == *f || w.starts_with(&format!("{f}=")))
    };
    let hosts_refusal = |w: &str| {
        if AGENT_REFUSES
            .iter()
            .any(|f| w == *f || w.starts_with(&format!("{f}=")))
        {
            format!("`{w}` is refused by agents (it would act on the agent's host, not on the test); remove it")
        } else {
            format!("`{w}` is set by the runner from [hosts] (the server's address and port, each agent's own key); remove it")
        }
    };
    if let Some(w) = tests.iter().flat_map(|t| &t.base).find(|w| {
        hosts_flag(w)
            || (s.place == Place::Hosts
                && w.starts_with("-p")
                && w.len() > 2
                && !w.starts_with("--"))
    }) {
        return Err(err(s.command_line, hosts_refusal(w)));
    }
    // Each knob's flag, in each test it applies to (None: the lab's).
    let mut infos: Vec<(KnobAt, Targets)> = Vec::new();
    for k in s.knobs() {
        if k.knob.scope == Scope::Variant {
            continue;
        }
        if hosts_flag(&k.knob.flag) {
            return Err(err(k.line, hosts_refusal(&k.knob.flag)));
        }
        if s.place == Place::Hosts && k.knob.scope != Scope::Command {
            return Err(err(
                k.line,
                format!("`{}`: across hosts a knob is a plain flag, which sets every command; write flags for one pair of hosts in its named command", k.knob),
            ));
        }
        if k.knob.scope != Scope::Command && !s.in_lab() {
            return Err(err(
                k.line,
                format!("`{}` is a lab knob; it needs where = \"lab\"", k.knob),
            ));
        }
        let targets = match &k.knob.scope {
            Scope::Variant => unreachable!("skipped above"),
            Scope::Lab => vec![(None, lookup(lab, &k, "lab")?.clone())],
            Scope::Host(h) => {
                let Some(i) = tests
                    .iter()
                    .position(|t| t.at.as_ref().is_some_and(|(_, host)| host == h))
                else {
                    let named: Vec<String> = tests
                        .iter()
                        .filter_map(|t| t.at.as_ref().map(|(w, _)| w.clone()))
                        .collect();
                    return Err(err(
                        k.line,
                        format!(
                            "`{}`: no test runs from lab host `{h}`; the command's tests: {}",
                            k.knob,
                            if named.is_empty() {
                                "one, without `@HOST` (write the knob without `@`)".to_string()
                            } else {
                                named.join(", ")
                            }
                        ),
                    ));
                };
                let t = tests[i];
                vec![(Some(i), lookup(&t.flags, &k, &t.verb.join(" "))?.clone())]
            }
            // Every test whose verb has the flag (`-t` sets them all).
            Scope::Command => tests
                .iter()
                .enumerate()
                .filter_map(|(i, t)| lookup(&t.flags, &k, "").ok().map(|f| (Some(i), f.clone())))
                .collect(),
        };
        infos.push((k, targets));
    }
    Ok(Shape {
        parts,
        several,
        infos,
    })
}

/// Builds and checks every point's command line: each knob is a flag of
/// the verb (or of `lab`, or of one host's test; with named commands, of
/// at least one of them, and it sets those that have it), takes the kind
/// of value given, and every resulting command line parses, so nothing
/// runs from a scenario that would fail on its fifth point.
pub fn build(g: &Grammar, s: &Scenario, points: &[Point]) -> Result<Invocations, ArgvError> {
    let lab = lab_flags(g);
    let shapes: Vec<Shape> = s
        .commands
        .iter()
        .map(|c| shape(g, s, &c.words, &lab))
        .collect::<Result<_, _>>()?;
    let several = shapes[0].several;
    if shapes.iter().any(|sh| sh.several != several) {
        return Err(err(
            s.command_line,
            "named commands must all run one test, or all several (`@HOST` tests)",
        ));
    }
    // A plain knob no test of any command has: the first test's error
    // names the valid flags.
    for (i, (k, _)) in shapes[0].infos.iter().enumerate() {
        if shapes.iter().all(|sh| sh.infos[i].1.is_empty()) {
            let t = tests_of(&shapes[0].parts)
                .next()
                .expect("parts_of finds a test");
            lookup(&t.flags, k, &t.verb.join(" "))?;
        }
    }
    let mut argv = Vec::with_capacity(points.len());
    let mut remote = Vec::with_capacity(points.len());
    for p in points {
        let which = s
            .commands
            .iter()
            .position(|c| std::ptr::eq(c, s.command_of(p)))
            .expect("command_of returns one of the commands");
        let Shape { parts, infos, .. } = &shapes[which];
        let tests: Vec<&Segment> = tests_of(parts).collect();
        let mut lab_words = s.lab.clone();
        let mut lab_knobs = Vec::new();
        let mut words: Vec<Vec<String>> = tests.iter().map(|t| t.base.clone()).collect();
        let mut knobs: Vec<Vec<String>> = vec![Vec::new(); tests.len()];
        for (k, v) in &p.knobs {
            if k.scope == Scope::Variant {
                continue;
            }
            let (at, targets) = infos
                .iter()
                .find(|(a, _)| &a.knob == k)
                .expect("every point knob is a scenario knob");
            for (target, info) in targets {
                let args = knob_args(k, v, info, at.line)?;
                match *target {
                    None => {
                        remove_flag(&mut lab_words, info);
                        lab_knobs.extend(args);
                    }
                    Some(i) => {
                        remove_flag(&mut words[i], info);
                        knobs[i].extend(args);
                    }
                }
            }
        }
        let mut a = Vec::new();
        if s.in_lab() {
            a.push("lab".to_string());
            a.extend(lab_words);
            a.extend(lab_knobs);
        }
        let mut i = 0;
        let mut between = None;
        for part in parts {
            match part {
                Part::Exec(w) => a.extend(w.iter().cloned()),
                Part::Test(t) => {
                    if let (Some((_, client)), Some(server)) = (&t.at, &t.server) {
                        // An order for the client's agent: the verb, then
                        // the server host's test server as its HOST.
                        let h = s.host(server).expect("host_segment checks the server");
                        a.extend(t.verb.iter().cloned());
                        a.push(h.server_addr.clone());
                        a.push("-p".into());
                        a.push(h.server_port.to_string());
                        between = Some(Remote {
                            client: client.clone(),
                            server: server.clone(),
                        });
                    } else {
                        a.extend(t.at.iter().map(|(w, _)| w.clone()));
                        a.extend(t.verb.iter().cloned());
                    }
                    a.extend(std::mem::take(&mut words[i]));
                    a.extend(std::mem::take(&mut knobs[i]));
                    if several {
                        a.push("-J".to_string());
                    }
                    i += 1;
                }
            }
        }
        let flat: Vec<(KnobAt, FlagInfo)> = infos
            .iter()
            .flat_map(|(k, ts)| ts.iter().map(move |(_, f)| (k.clone(), f.clone())))
            .collect();
        check_parses(g, s, p, &a, &flat)?;
        argv.push(a);
        remote.push(between);
    }
    Ok(Invocations {
        argv,
        several,
        remote,
    })
}

/// The knob (and its line) an error message is about, else the command.
fn blame(s: &Scenario, p: &Point, infos: &[(KnobAt, FlagInfo)], message: &str) -> usize {
    for (at, info) in infos {
        if !p.knobs.iter().any(|(k, _)| k == &at.knob) {
            continue;
        }
        let mentioned = info
            .longs
            .iter()
            .any(|l| message.contains(&format!("--{l}")))
            || info.short.is_some_and(|c| {
                let s = format!("-{c}");
                message.match_indices(&s).any(|(i, _)| {
                    !message[i + s.len()..].starts_with(|ch: char| ch.is_alphanumeric())
                })
            });
        if mentioned {
            return at.line;
        }
    }
    if s.in_lab() && message.contains("lab") {
        s.lab_line
    } else {
        s.command_line
    }
}

fn check_parses(
    g: &Grammar,
    s: &Scenario,
    p: &Point,
    argv: &[String],
    infos: &[(KnobAt, FlagInfo)],
) -> Result<(), ArgvError> {
    let full = std::iter::once("xferlab".to_string())
        .chain(argv.iter().cloned())
        .collect();
    (g.check)(full).map_err(|message| {
        let line = blame(s, p, infos, &message);
        err(
            line,
            format!(
                "point `{}`: {message} (command: xferlab {})",
                p.label(),
                argv.join(" ")
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use xferlab_core::experiment::scenario::Scale;

    fn build_text(text: &str) -> Result<Vec<Vec<String>>, ArgvError> {
        let s = Scenario::parse(text, Scale::Full).unwrap();
        build(&crate::cli::grammar(), &s, &s.points()).map(|i| i.argv)
    }

    #[test]
    fn knobs_replace_base_flags() {
        let argv = build_text(
            "title = \"t\"\ncommand = \"stream -t 3 --length=1M -N\"\n[matrix]\n\"-l\" = [\"64K\"]\n\"--time\" = [1]\n\"-N\" = [false]\n",
        )
        .unwrap();
        assert_eq!(argv[0], ["stream", "-l", "64K", "--time", "1"]);
    }

    #[test]
    fn lab_points_put_lab_flags_first() {
        let argv = build_text(
            "title = \"t\"\nwhere = \"lab\"\nlab = \"--rate 50M --mark c2s:1/20\"\ncommand = \"rr -t 2\"\n[matrix]\n\"lab --mark\" = [\"c2s:1/50\"]\n\"-r\" = [\"5K\"]\n",
        )
        .unwrap();
        assert_eq!(
            argv[0],
            ["lab", "--rate", "50M", "--mark", "c2s:1/50", "rr", "-t", "2", "-r", "5K"]
        );
    }

    const TWO_HOSTS: &str = "title = \"t\"\nwhere = \"lab\"\nlab = \"--rate 20M --client bg:sack=off --client ref\"\ncommand = \"@bg stream -P 4 -t 9 @ref rr --mode tcp-crr -r 5K -t 9\"\n";

    #[test]
    fn several_tests_take_host_knobs_and_shared_flags() {
        let text = format!(
            "{TWO_HOSTS}[matrix]\n\"@ref -r\" = [\"10K\"]\n\"-t\" = [3]\n\"lab --sack\" = [\"off\"]\n"
        );
        let s = Scenario::parse(&text, Scale::Full).unwrap();
        let inv = build(&crate::cli::grammar(), &s, &s.points()).unwrap();
        assert!(inv.several);
        assert_eq!(
            inv.argv[0].join(" "),
            "lab --rate 20M --client bg:sack=off --client ref --sack off \
             @bg stream -P 4 -t 3 -J @ref rr --mode tcp-crr -r 10K -t 3 -J"
        );
        // A plain command stays as it was.
        let one = build_text("title = \"t\"\ncommand = \"stream -t 3\"\n").unwrap();
        assert_eq!(one[0], ["stream", "-t", "3"]);
    }

    #[test]
    fn several_tests_refuse_what_cannot_run() {
        let e =
            build_text(&format!("{TWO_HOSTS}[matrix]\n\"@nobody -r\" = [\"1K\"]\n")).unwrap_err();
        assert_eq!(e.line, 6, "{e}");
        assert!(
            e.message.contains("no test runs from lab host `nobody`"),
            "{e}"
        );
        assert!(e.message.contains("@bg, @ref"), "{e}");
        // A host's knob is looked up in that host's verb.
        let e = build_text(&format!(
            "{TWO_HOSTS}[matrix]\n\"@ref --lenght\" = [\"1M\"]\n"
        ))
        .unwrap_err();
        assert!(
            e.message.contains("unknown flag `--lenght` for `rr`"),
            "{e}"
        );
        // A flag no test has.
        let e = build_text(&format!("{TWO_HOSTS}[matrix]\n\"--bogus\" = [2]\n")).unwrap_err();
        assert!(e.message.contains("unknown flag `--bogus`"), "{e}");
        let e = build_text("title = \"t\"\ncommand = \"@bg stream\"\n").unwrap_err();
        assert!(e.message.contains("where = \"lab\""), "{e}");
        let e =
            build_text("title = \"t\"\nwhere = \"lab\"\ncommand = \"stream -t 1 @bg stream\"\n")
                .unwrap_err();
        assert!(e.message.contains("each starts with `@HOST`"), "{e}");
        let e = build_text(
            "title = \"t\"\nwhere = \"lab\"\nlab = \"--client bg\"\ncommand = \"@bg stream @bg rr\"\n",
        )
        .unwrap_err();
        assert!(
            e.message.contains("two tests start from lab host `bg`"),
            "{e}"
        );
        // A host the lab does not have: the lab's own check, at build time.
        let e = build_text("title = \"t\"\nwhere = \"lab\"\ncommand = \"@bg stream -t 1\"\n")
            .unwrap_err();
        assert!(e.message.contains("bg"), "{e}");
        let e = build_text("title = \"t\"\ncommand = \"stream\"\n[matrix]\n\"@bg -t\" = [1]\n")
            .unwrap_err();
        assert!(e.message.contains("needs where = \"lab\""), "{e}");
    }

    #[test]
    fn unknown_flags_and_bad_values_name_the_line() {
        let e = build_text("title = \"t\"\ncommand = \"stream\"\n[matrix]\n\"--lenght\" = [1]\n")
            .unwrap_err();
        assert_eq!(e.line, 4);
        assert!(e.message.contains("unknown flag `--lenght`"), "{e}");
        assert!(e.message.contains("-l/--length"), "{e}");

        let e = build_text("title = \"t\"\ncommand = \"stream\"\n[matrix]\n\"-P\" = [1]\n\"-l\" = [\"64K\", \"lots\"]\n")
            .unwrap_err();
        assert_eq!(e.line, 5, "{e}");
        assert!(e.message.contains("lots"), "{e}");

        let e = build_text("title = \"t\"\ncommand = \"stream\"\n[matrix]\n\"-N\" = [\"yes\"]\n")
            .unwrap_err();
        assert!(e.message.contains("switch"), "{e}");

        let e = build_text("title = \"t\"\ncommand = \"stream\"\n[matrix]\n\"-o\" = [\"x\"]\n")
            .unwrap_err();
        assert!(e.message.contains("set by the runner"), "{e}");

        let e = build_text("title = \"t\"\ncommand = \"server\"\n").unwrap_err();
        assert_eq!(e.line, 3 - 1);

        // A value clap accepts but the verb's own checks refuse.
        let e = build_text("title = \"t\"\ncommand = \"stream\"\n[matrix]\n\"-P\" = [1, 100000]\n")
            .unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("parallel"), "{e}");
    }

    #[test]
    fn named_commands_take_the_knobs_their_verbs_have() {
        let a = build_text(
            "title = \"t\"\nwhere = \"vm\"\n[command]\nm = \"usb bulk -t 5 -i 1\"\nmodel = \"model usb --profile musb\"\n[matrix]\n\"-l\" = [512]\n\"-i\" = [2]\n",
        )
        .unwrap();
        assert_eq!(
            a,
            [
                vec!["usb", "bulk", "-t", "5", "-l", "512", "-i", "2"],
                vec!["model", "usb", "--profile", "musb", "-l", "512"],
            ]
        );
        // A flag none of the commands has is named with the valid ones.
        let e = build_text(
            "title = \"t\"\nwhere = \"vm\"\n[command]\nm = \"usb bulk\"\nmodel = \"model usb\"\n[matrix]\n\"--rate\" = [1]\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 7, "{e}");
        assert!(
            e.message.contains("unknown flag `--rate` for `usb bulk`"),
            "{e}"
        );
    }

    #[test]
    fn global_flags_are_knobs_and_false_leaves_a_flag_out() {
        let a = build_text(
            "title = \"t\"\ncommand = \"stream -t 1 --load cpu=2\"\n[matrix]\n\"--load\" = [false, \"cpu=1,mem=1\"]\n",
        )
        .unwrap();
        assert_eq!(
            a,
            [
                vec!["stream", "-t", "1"],
                vec!["stream", "-t", "1", "--load", "cpu=1,mem=1"],
            ]
        );
        let e = build_text("title = \"t\"\ncommand = \"stream\"\n[matrix]\n\"-l\" = [true]\n")
            .unwrap_err();
        assert!(e.message.contains("false leaves it out"), "{e}");
    }
}

#[cfg(test)]
mod hosts_tests {
    use super::*;
    use xferlab_core::experiment::scenario::Scale;

    const HOSTS: &str = "[hosts.a]\nagent = \"10.9.0.1:5290\"\nkey = \"k\"\n\
        [hosts.b]\nagent = \"10.9.0.2:6000\"\naddress = \"10.9.1.2\"\nkey = \"k\"\n";

    fn build_hosts(head: &str) -> Result<Invocations, ArgvError> {
        let text = format!("title = \"t\"\nwhere = \"hosts\"\n{head}\n{HOSTS}");
        let s = Scenario::parse(&text, Scale::Full).unwrap();
        build(&crate::cli::grammar(), &s, &s.points())
    }

    #[test]
    fn each_point_is_an_order_for_its_clients_agent() {
        let inv = build_hosts(
            "[command]\n\"a to b\" = \"@a:b stream -t 1\"\n\"b to a\" = \"@b:a stream -R -t 1\"\n[matrix]\n\"-P\" = [1, 2]\n",
        )
        .unwrap();
        assert!(!inv.several);
        assert_eq!(
            inv.argv[0],
            ["stream", "10.9.1.2", "-p", "6000", "-t", "1", "-P", "1"]
        );
        assert_eq!(
            inv.remote[0],
            Some(Remote {
                client: "a".into(),
                server: "b".into()
            })
        );
        assert_eq!(
            inv.argv[3],
            ["stream", "10.9.0.1", "-p", "5290", "-R", "-t", "1", "-P", "2"]
        );
        assert_eq!(inv.remote[3].as_ref().unwrap().client, "b");
    }

    #[test]
    fn bad_host_commands_name_the_fix() {
        let msg = |head: &str| build_hosts(head).err().expect("refused").to_string();
        let m = msg("command = \"stream -t 1\"");
        assert!(
            m.starts_with("3: `command`")
                && m.contains("starts with `@CLIENT:SERVER`")
                && m.contains("hosts: a, b"),
            "{m}"
        );
        let m = msg("command = \"@a:c stream\"");
        assert!(
            m.contains("no host `c` (the server); declare [hosts.c]"),
            "{m}"
        );
        let m = msg("command = \"@a:b usb bulk\"");
        assert!(
            m.contains("an agent runs stream, cbr, sweep, rr only"),
            "{m}"
        );
        let m = msg("command = \"@a:b stream -p 7\"");
        assert!(m.contains("`-p` is set by the runner from [hosts]"), "{m}");
        let m = msg("command = \"@a:b stream\"\n[matrix]\n\"--auth-key\" = [\"x\"]");
        assert!(
            m.starts_with("5: ") && m.contains("`--auth-key` is set by the runner"),
            "{m}"
        );
        let m = msg("command = \"@a:b stream\"\n[matrix]\n\"--load\" = [false, \"cpu=1\"]");
        assert!(m.contains("`--load` is refused by agents"), "{m}");
        let m = msg("command = \"@a:b stream\"\n[matrix]\n\"@a -P\" = [1]");
        assert!(m.contains("across hosts a knob is a plain flag"), "{m}");
        let m = msg("command = \"@a:b stream @b:a stream\"");
        assert!(m.contains("runs one test"), "{m}");
    }
}
