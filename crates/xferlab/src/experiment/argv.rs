//! From a scenario's points to ordinary xferlab command lines, checked
//! against the command line definition itself (clap), so a scenario can
//! use every flag the CLI has and nothing else.

use clap::CommandFactory;
use xferlab_core::experiment::scenario::{Knob, KnobAt, Place, Point, Scenario, Value};

use crate::cli::Cli;

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

/// A scenario's command lines, ready to run.
pub struct Invocations {
    /// Per point (same order as `Scenario::points`): the argv without the
    /// program name and without the output flags.
    pub argv: Vec<Vec<String>>,
}

struct Resolved {
    verb: Vec<String>,
    base: Vec<String>,
    flags: Vec<FlagInfo>,
}

fn resolve_verb(s: &Scenario) -> Result<Resolved, ArgvError> {
    let root = Cli::command();
    let verb = VERBS
        .iter()
        .find(|v| {
            s.command.len() >= v.len()
                && s.command[..v.len()] == v.iter().map(|x| x.to_string()).collect::<Vec<_>>()[..]
        })
        .ok_or_else(|| {
            err(
                s.command_line,
                format!(
                    "`command` must start with a test verb: {} (got `{}`)",
                    VERBS
                        .iter()
                        .map(|v| v.join(" "))
                        .collect::<Vec<_>>()
                        .join(", "),
                    s.command[0]
                ),
            )
        })?;
    let mut cmd = &root;
    for w in verb.iter() {
        cmd = cmd
            .find_subcommand(w)
            .expect("VERBS names existing subcommands");
    }
    if s.place == Place::Lab && verb[0] == "usb" {
        return Err(err(
            s.command_line,
            "`usb bulk` cannot run in the network lab; use where = \"vm\"",
        ));
    }
    Ok(Resolved {
        verb: verb.iter().map(|x| x.to_string()).collect(),
        base: s.command[verb.len()..].to_vec(),
        flags: flags_of(cmd),
    })
}

fn lab_flags() -> Vec<FlagInfo> {
    let root = Cli::command();
    flags_of(root.find_subcommand("lab").expect("lab exists"))
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
        (Value::Switch(_), true) => Err(err(
            line,
            format!("`{k}` takes a value (a string or number), not true/false"),
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

/// Builds and checks every point's command line: each knob is a flag of
/// the verb (or of `lab`), takes the kind of value given, and every
/// resulting command line parses, so nothing runs from a scenario that
/// would fail on its fifth point.
pub fn build(s: &Scenario, points: &[Point]) -> Result<Invocations, ArgvError> {
    let r = resolve_verb(s)?;
    let verb_name = r.verb.join(" ");
    let lab = lab_flags();
    for w in r.base.iter().chain(&s.lab) {
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
    let knobs = s.knobs();
    let mut infos = Vec::with_capacity(knobs.len());
    for k in &knobs {
        if k.knob.lab && s.place != Place::Lab {
            return Err(err(
                k.line,
                format!("`{}` is a lab flag; it needs where = \"lab\"", k.knob),
            ));
        }
        let info = if k.knob.lab {
            lookup(&lab, k, "lab")?
        } else {
            lookup(&r.flags, k, &verb_name)?
        };
        infos.push((k.clone(), info.clone()));
    }
    let mut argv = Vec::with_capacity(points.len());
    for p in points {
        let mut verb_words = r.base.clone();
        let mut lab_words = s.lab.clone();
        let mut verb_knobs = Vec::new();
        let mut lab_knobs = Vec::new();
        for (k, v) in &p.knobs {
            let (at, info) = infos
                .iter()
                .find(|(a, _)| &a.knob == k)
                .expect("every point knob is a scenario knob");
            let args = knob_args(k, v, info, at.line)?;
            if k.lab {
                remove_flag(&mut lab_words, info);
                lab_knobs.extend(args);
            } else {
                remove_flag(&mut verb_words, info);
                verb_knobs.extend(args);
            }
        }
        let mut a = Vec::new();
        if s.place == Place::Lab {
            a.push("lab".to_string());
            a.extend(lab_words);
            a.extend(lab_knobs);
        }
        a.extend(r.verb.iter().cloned());
        a.extend(verb_words);
        a.extend(verb_knobs);
        check_parses(s, p, &a, &infos)?;
        argv.push(a);
    }
    Ok(Invocations { argv })
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
    if s.place == Place::Lab && message.contains("lab") {
        s.lab_line
    } else {
        s.command_line
    }
}

fn check_parses(
    s: &Scenario,
    p: &Point,
    argv: &[String],
    infos: &[(KnobAt, FlagInfo)],
) -> Result<(), ArgvError> {
    let full = std::iter::once("xferlab".to_string()).chain(argv.iter().cloned());
    let parsed = Cli::try_parse_from_args(full).and_then(|cli| cli.command.check_values());
    parsed.map_err(|e| {
        let message = e.to_string();
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
        build(&s, &s.points()).map(|i| i.argv)
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
}
