//! An agent's order, read with the command line's own definitions: the
//! verb, the server it names (and where in the argv), the test spec and
//! what the budgets need ([`crate::agent::order`] checks them), and the
//! flags an order may not use because they touch the agent's own files
//! and processes or its output format.

use std::path::PathBuf;
use std::sync::Arc;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches};

use super::{Cli, Command};
use crate::agent::order::{asked_rate, OrderPlan, PlanError, Planner, Verb};

/// `xferlab order`: one order to an agent, from the command line.
#[derive(Debug, Args)]
pub struct OrderArgs {
    /// The agent (`xferlab server --agent` there): HOST or HOST:PORT
    /// (default port 5290).
    #[arg(long, value_name = "HOST[:PORT]")]
    pub agent: String,
    /// A file holding a key of the agent's --auth-key (its first key is
    /// used).
    #[arg(long, value_name = "FILE")]
    pub auth_key: PathBuf,
    /// The test the agent runs as the client, as on a local command line:
    /// VERB SERVER [FLAGS] (stream, rr, cbr, sweep; SERVER inside the
    /// agent's --agent-targets). Its output comes back as JSON lines.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required = true,
        value_name = "VERB ARGS"
    )]
    pub argv: Vec<String>,
}

/// The planner main hands to the agent.
pub fn planner() -> Planner {
    Arc::new(|argv: &[String]| plan(argv))
}

/// Flags an order may not set (clap's argument id, the flag as printed,
/// why). The ids are those of the verb's flattened `StreamArgs` and the
/// global flags.
const FORBIDDEN: &[(&str, &str, &str)] = &[
    (
        "output",
        "-o/--output",
        "it writes a file on the agent; the result comes back to the controller",
    ),
    (
        "db",
        "--db",
        "it writes a database on the agent; store results on the controller",
    ),
    (
        "auth_key",
        "--auth-key",
        "it reads a file on the agent; the agent answers a server's challenge with its own key",
    ),
    (
        "format",
        "--format",
        "the agent chooses the output (JSON lines, then the result)",
    ),
    (
        "json",
        "-J/--json",
        "the agent chooses the output (JSON lines, then the result)",
    ),
    ("load", "--load", "it starts load workers on the agent"),
    ("usbmon", "--usbmon", "it reads the agent's USB bus"),
];

/// A name no host argument is: the server argument is found by putting it
/// in and parsing again (an index from clap counts `--flag=value` twice).
const MARKER: &str = "agent-order-host.invalid";

fn parse(argv: &[String]) -> Result<(ArgMatches, Cli), PlanError> {
    let full = std::iter::once("xferlab".to_string()).chain(argv.iter().cloned());
    let m = Cli::command()
        .try_get_matches_from(full)
        .map_err(|e| PlanError::Usage(super::one_line(&e)))?;
    let cli = Cli::from_arg_matches(&m).map_err(|e| PlanError::Usage(super::one_line(&e)))?;
    Ok((m, cli))
}

fn plan(argv: &[String]) -> Result<OrderPlan, PlanError> {
    // A verb that is not a test is refused as such before its flags are
    // read (`server -p 1` parses; `lab` may not).
    let tests = ["stream", "rr", "cbr", "sweep"];
    if let Some(first) = argv.first().filter(|a| !a.starts_with('-')) {
        let known = Cli::command()
            .get_subcommands()
            .any(|c| c.get_name() == first);
        if known && !tests.contains(&first.as_str()) {
            return Err(PlanError::NotATest(first.clone()));
        }
    }
    let (m, cli) = parse(argv)?;
    let verb = match &cli.command {
        Command::Stream(_) => Verb::Stream,
        Command::Rr(_) => Verb::Rr,
        Command::Cbr(_) => Verb::Cbr,
        Command::Sweep(_) => Verb::Sweep,
        other => {
            let name = m.subcommand_name().unwrap_or("?").to_string();
            let _ = other;
            return Err(PlanError::NotATest(name));
        }
    };
    let sub = m.subcommand().map(|(_, s)| s);
    for (id, flag, why) in FORBIDDEN {
        let given = |mm: &ArgMatches| {
            mm.try_get_raw(id).ok().flatten().is_some()
                && mm.value_source(id) == Some(ValueSource::CommandLine)
        };
        if given(&m) || sub.is_some_and(given) {
            return Err(PlanError::Forbidden { flag, why });
        }
    }
    cli.command
        .check_values()
        .map_err(|e| PlanError::Usage(e.to_string()))?;
    let s = cli
        .command
        .stream_args()
        .expect("a test verb has stream args");
    let host = s.host_name().map(str::to_string);
    let host_index = s.host.as_deref().and_then(|raw| host_index(argv, raw));
    let values = |e: String| PlanError::Usage(e);
    let (spec, tests, peak_rate) = match &cli.command {
        Command::Stream(a) => {
            let spec = a.spec().map_err(values)?;
            let r = asked_rate(&spec);
            (spec, 1, r)
        }
        Command::Rr(a) => {
            let spec = a.spec().map_err(values)?;
            let r = asked_rate(&spec);
            (spec, 1, r)
        }
        Command::Cbr(a) => {
            let spec = a.stream.spec_with(true, 5.0).map_err(values)?;
            let repeat = a.repeat.max(1);
            let (steps, peak) = match (&a.search, a.ladder.is_empty()) {
                (Some(s), _) => {
                    let (low, high, res) =
                        super::series::parse_search(s).map_err(|e| values(e.to_string()))?;
                    // The top, the bottom, then halvings down to the
                    // resolution (datagram::ladder's bisection).
                    let halvings = ((high - low) as f64 / res.max(1) as f64).log2().ceil();
                    (2 + halvings.max(0.0) as u32, Some(high))
                }
                (None, false) => (a.ladder.len() as u32, a.ladder.iter().copied().max()),
                (None, true) => (1, asked_rate(&spec)),
            };
            (spec, steps.saturating_mul(repeat), peak)
        }
        Command::Sweep(a) => {
            let spec = a.stream.spec_with(true, 1.0).map_err(values)?;
            let specs = a
                .axis()
                .and_then(|axis| crate::series::sweep_specs(&spec, &axis))
                .map_err(|e| values(format!("{e:#}")))?;
            // The fastest point decides; a back-to-back one is unpaced.
            let rates: Vec<Option<u64>> = specs.iter().map(|(s, _)| asked_rate(s)).collect();
            let peak = if rates.iter().any(Option::is_none) {
                None
            } else {
                rates.into_iter().flatten().max()
            };
            (spec, specs.len() as u32, peak)
        }
        _ => unreachable!("refused above"),
    };
    Ok(OrderPlan {
        verb,
        host,
        host_index,
        port: s.port(),
        family: s.family(),
        spec,
        tests,
        peak_rate,
    })
}

/// Where the server argument `raw` is in `argv`: the element that, put
/// in place of it, the command line reads as the server.
fn host_index(argv: &[String], raw: &str) -> Option<usize> {
    (0..argv.len()).filter(|&i| argv[i] == raw).find(|&i| {
        let mut probe = argv.to_vec();
        probe[i] = MARKER.to_string();
        parse(&probe).is_ok_and(|(_, cli)| {
            cli.command.stream_args().and_then(|s| s.host.as_deref()) == Some(MARKER)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn the_server_is_found_where_it_is() {
        let p = plan(&argv("stream -T 10.0.0.2 10.0.0.2 -t 3 -P 2")).unwrap();
        assert_eq!(p.verb, Verb::Stream);
        assert_eq!(p.host.as_deref(), Some("10.0.0.2"));
        assert_eq!(p.host_index, Some(3));
        assert_eq!((p.spec.parallel, p.tests), (2, 1));
        let p = plan(&argv("rr --mode udp-rr iperf3://h:9 -t 1")).unwrap();
        assert_eq!((p.host.as_deref(), p.host_index), (Some("h:9"), Some(3)));
        assert_eq!(plan(&argv("stream -t 1")).unwrap().host, None);
    }

    #[test]
    fn forbidden_flags_and_verbs_are_named() {
        for (args, flag) in [
            ("stream h -o /tmp/x", "-o/--output"),
            ("stream h --output=/tmp/x", "-o/--output"),
            ("stream h --db /tmp/x.db", "--db"),
            ("stream h --auth-key /etc/shadow", "--auth-key"),
            ("stream h --format human", "--format"),
            ("stream h -J", "-J/--json"),
            ("--load cpu=1 stream h", "--load"),
            ("rr h --load cpu=1", "--load"),
        ] {
            match plan(&argv(args)) {
                Err(PlanError::Forbidden { flag: f, .. }) => assert_eq!(f, flag, "{args}"),
                other => panic!("{args}: {other:?}"),
            }
        }
        for verb in ["server", "lab", "run x.toml", "usb list", "calibrate"] {
            assert!(
                matches!(plan(&argv(verb)), Err(PlanError::NotATest(_))),
                "{verb}"
            );
        }
        assert!(matches!(
            plan(&argv("stream h -t -1")),
            Err(PlanError::Usage(m)) if m.contains("-t/--time")
        ));
        assert!(matches!(
            plan(&argv("stream h --nonsense")),
            Err(PlanError::Usage(_))
        ));
    }

    #[test]
    fn series_count_their_tests_and_their_fastest_rate() {
        let p = plan(&argv("cbr h --ladder 10M,20M,30M --repeat 2 -t 1")).unwrap();
        assert_eq!((p.tests, p.peak_rate), (6, Some(30_000_000)));
        let p = plan(&argv("cbr h --search 10M:20M:5M -t 1")).unwrap();
        assert_eq!((p.tests, p.peak_rate), (3, Some(20_000_000)));
        let p = plan(&argv("sweep h --size 100:300:100 -b 5M -t 1")).unwrap();
        assert_eq!((p.tests, p.peak_rate), (3, Some(5_000_000)));
        let p = plan(&argv("stream h -u -b 7M -P 2")).unwrap();
        assert_eq!(p.peak_rate, Some(7_000_000));
        assert_eq!(plan(&argv("stream h")).unwrap().peak_rate, None);
        let p = plan(&argv("stream h --fq-rate 8M")).unwrap();
        assert_eq!(p.peak_rate, Some(8_000_000));
    }
}
