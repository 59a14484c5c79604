//! `/probe?module=NAME&target=HOST[:PORT]`: blackbox_exporter's pattern
//! for xferlab. A module (from `--probe-modules FILE`) is an xferlab
//! command line without its server; a probe appends the target and runs
//! it as an agent order ([`crate::agent::order`]: the same
//! `--agent-targets`, budgets and `--max-duration`, a child process of
//! this binary), then answers the result's figures as gauges
//! ([`super::gauges`]). Probes at once are bounded (`--max-probes`); one
//! that does not end within the scrape's timeout is stopped (its child
//! killed) and answered `success 0`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::agent::order::{self, Policy, Refusal};
use crate::session::metrics::ServerMetrics;
use ipnet::{Ipv4Net, Ipv6Net};

/// Probes running at once unless `--max-probes` says otherwise: each is a
/// test moving traffic from this host, and tests at once share its links
/// and CPUs (their figures then measure each other).
pub const MAX_PROBES: usize = 4;
/// The most `--max-probes` may be: past it, probes would measure each
/// other more than their paths (and each holds a thread).
pub const MAX_MAX_PROBES: usize = 64;
/// What a probe may take when the request does not say
/// (`X-Prometheus-Scrape-Timeout-Seconds`): Prometheus' default scrape
/// timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Taken off the scrape's timeout so the answer reaches Prometheus before
/// it gives up (blackbox_exporter's default offset).
const TIMEOUT_OFFSET: Duration = Duration::from_millis(500);

/// The `origin` of a probe's order in `xferlab_agent_orders_total`.
const ORIGIN: &str = "probe";

/// One module: a command line without its server.
#[derive(Debug, Clone)]
pub struct Module {
    pub argv: Vec<String>,
}

/// The modules of `--probe-modules FILE`.
#[derive(Debug, Clone)]
pub struct Modules {
    pub file: String,
    pub modules: BTreeMap<String, Module>,
}

/// A bad module file: one line naming the file, the line and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ModulesError {
    #[error("cannot read --probe-modules {file}: {err}")]
    Read { file: String, err: std::io::Error },
    #[error("{file}:{line}: {why}")]
    At {
        file: String,
        line: usize,
        why: String,
    },
}

/// The file's shape: `[modules.NAME]` tables with a `command`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    modules: BTreeMap<String, toml::Spanned<Entry>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    command: toml::Spanned<String>,
}

/// 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

impl Modules {
    /// Reads and checks `path`: every module parses as an order with
    /// `plan` (main's clap definitions) and names no server.
    pub fn load(path: &Path, policy: &Policy) -> Result<Modules, ModulesError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|err| ModulesError::Read {
            file: file.clone(),
            err,
        })?;
        let at = |line: usize, why: String| ModulesError::At {
            file: file.clone(),
            line,
            why,
        };
        let parsed: File = toml::from_str(&text).map_err(|e| {
            let line = e.span().map_or(1, |s| line_of(&text, s.start));
            at(
                line,
                format!(
                    "{}; a module is `[modules.NAME]` with `command = \"stream -t 5\"` (see contrib/probe-modules.toml)",
                    // toml's message may run over lines: one line here.
                    e.message().trim().replace('\n', ", ")
                ),
            )
        })?;
        if parsed.modules.is_empty() {
            return Err(at(
                1,
                "no modules: add `[modules.NAME]` with `command = \"stream -t 5\"`".into(),
            ));
        }
        let mut modules = BTreeMap::new();
        // In the file's order, so the first bad module is the one named.
        let mut entries: Vec<_> = parsed.modules.into_iter().collect();
        entries.sort_by_key(|(_, e)| e.span().start);
        for (name, entry) in entries {
            let entry_line = line_of(&text, entry.span().start);
            let cmd = entry.into_inner().command;
            let line = line_of(&text, cmd.span().start).max(entry_line);
            let argv = shlex::split(cmd.get_ref()).ok_or_else(|| {
                at(
                    line,
                    format!("module {name}: unbalanced quotes in its command; close them"),
                )
            })?;
            let argv: Vec<String> = match argv.first().map(String::as_str) {
                Some("xferlab") => argv[1..].to_vec(),
                _ => argv,
            };
            if argv.is_empty() {
                return Err(at(
                    line,
                    format!("module {name}: an empty command; write a test such as `stream -t 5`"),
                ));
            }
            let plan = (policy.plan)(&argv).map_err(|e| at(line, format!("module {name}: {e}")))?;
            if let Some(host) = plan.host {
                return Err(at(
                    line,
                    format!(
                        "module {name} names a server ({host}); leave it out: each probe's target= is the server"
                    ),
                ));
            }
            // One this server's budgets always refuse (longer than
            // --max-duration, over --max-rate or --max-flows) is as bad:
            // checked as a probe of any address would be.
            let mut any = policy.clone();
            any.targets = vec![
                order::Cidr::from(Ipv4Net::default()),
                Ipv6Net::default().into(),
            ];
            let mut probe = argv.clone();
            probe.push("127.0.0.1".into());
            if let Err(r @ (Refusal::Duration { .. } | Refusal::Budget(_))) =
                order::check(&probe, &any)
            {
                return Err(at(line, format!("module {name}: {r}")));
            }
            modules.insert(name, Module { argv });
        }
        Ok(Modules {
            file: file.clone(),
            modules,
        })
    }
}

/// Why a probe request is answered with an error status and no gauges.
#[derive(Debug, thiserror::Error)]
pub enum ProbeRefusal {
    #[error("a probe needs ?module=NAME&target=HOST[:PORT] (modules: {0})")]
    Usage(String),
    #[error("unknown module {name:?}: {file} has {known}")]
    UnknownModule {
        name: String,
        file: String,
        known: String,
    },
    #[error("module {module}, target {target}: {why}")]
    Refused {
        module: String,
        target: String,
        why: Refusal,
    },
    #[error("{0} probes are running, the most at once (--max-probes); try again later")]
    Full(usize),
}

impl ProbeRefusal {
    /// The HTTP status: 400 for a request that can never succeed, 503
    /// for one that may later.
    pub fn status(&self) -> u16 {
        match self {
            ProbeRefusal::Full(_) => 503,
            _ => 400,
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProbeLabels {
    module: String,
    result: String,
}

/// Runs probes; its counters go into `/metrics`.
pub struct Prober {
    modules: Modules,
    policy: Policy,
    max: usize,
    running: Arc<AtomicUsize>,
    probes: Family<ProbeLabels, Counter>,
    running_gauge: Gauge,
}

/// A probe's place among [`Prober::max`], given back when its test has
/// ended (its child reaped), not when its answer went out.
struct Slot {
    running: Arc<AtomicUsize>,
    gauge: Gauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.running.fetch_sub(1, Ordering::AcqRel);
        self.gauge.dec();
    }
}

impl Prober {
    pub fn new(modules: Modules, policy: Policy, max: usize) -> Self {
        Prober {
            modules,
            policy,
            max,
            running: Arc::default(),
            probes: Family::default(),
            running_gauge: Gauge::default(),
        }
    }

    /// Probes at once (`--max-probes`).
    pub fn max(&self) -> usize {
        self.max
    }

    pub fn register(&self, reg: &mut Registry) {
        reg.register(
            "probes",
            "Probes answered, by module and result (success, failed, timeout, refused)",
            self.probes.clone(),
        );
        reg.register(
            "probes_running",
            "Probes whose test is running now",
            self.running_gauge.clone(),
        );
    }

    fn count(&self, module: &str, result: &str) {
        self.probes
            .get_or_create(&ProbeLabels {
                module: module.to_string(),
                result: result.to_string(),
            })
            .inc();
    }

    fn take_slot(&self) -> Option<Slot> {
        let mut n = self.running.load(Ordering::Acquire);
        loop {
            if n >= self.max {
                return None;
            }
            match self
                .running
                .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => n = now,
            }
        }
        self.running_gauge.inc();
        Some(Slot {
            running: self.running.clone(),
            gauge: self.running_gauge.clone(),
        })
    }

    /// Answers one probe: the gauges' text, or why it was refused. The
    /// probe takes at most `timeout` less a margin.
    pub fn probe(
        &self,
        query: &str,
        timeout: Duration,
        orders: &ServerMetrics,
    ) -> Result<String, ProbeRefusal> {
        let (mut module, mut target) = (None, None);
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            match &*k {
                "module" => module = Some(v.into_owned()),
                "target" => target = Some(v.into_owned()),
                _ => {}
            }
        }
        let known = || {
            self.modules
                .modules
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (Some(name), Some(target)) = (module, target) else {
            return Err(ProbeRefusal::Usage(known()));
        };
        let Some(m) = self.modules.modules.get(&name) else {
            return Err(ProbeRefusal::UnknownModule {
                name,
                file: self.modules.file.clone(),
                known: known(),
            });
        };
        let mut argv = m.argv.clone();
        argv.push(target.clone());
        let checked = match order::check(&argv, &self.policy) {
            Ok(c) => c,
            Err(why) => {
                self.count(&name, "refused");
                orders.order(ORIGIN, "refused", why.code());
                return Err(ProbeRefusal::Refused {
                    module: name,
                    target,
                    why,
                });
            }
        };
        let Some(slot) = self.take_slot() else {
            self.count(&name, "refused");
            return Err(ProbeRefusal::Full(self.max));
        };
        tracing::debug!(
            module = name,
            verb = checked.plan.verb.name(),
            target = %checked.target,
            "probe started"
        );
        let started = Instant::now();
        let budget = timeout.saturating_sub(TIMEOUT_OFFSET).max(TIMEOUT_OFFSET);
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let thread_stop = stop.clone();
        // The test runs on a thread of its own so that this request is
        // answered at its deadline whatever the test does; the slot goes
        // with the thread, so a stopped probe still counts until its
        // child is reaped.
        let spawned = std::thread::Builder::new()
            .name("xfer-probe".into())
            .spawn(move || {
                let _slot = slot;
                let outcome = order::run(&checked, &thread_stop, &mut |_| {});
                tx.send(outcome).ok();
            });
        let outcome = match spawned {
            Ok(_) => rx.recv_timeout(budget).ok(),
            Err(e) => {
                tracing::warn!("cannot start a probe thread: {e}");
                None
            }
        };
        let took = started.elapsed().as_secs_f64();
        let (doc, success, result) = match &outcome {
            None => {
                // The scrape's time is up: stop the test (its thread
                // kills and reaps the child) and say so.
                stop.store(true, Ordering::Relaxed);
                tracing::info!(
                    target: crate::logging::SERVER_LOG,
                    "probe {name} {target}: stopped after {took:.1} s, the scrape's timeout; success 0"
                );
                (None, false, "timeout")
            }
            Some(Ok(o)) => {
                // cbr's exit status is its verdict (1: rate not
                // sustained); its probe succeeded when it has a trial.
                let ran = o.exit_code == 0
                    || (o.doc["schema"]
                        .as_str()
                        .is_some_and(|s| s.starts_with("xferlab.cbr/"))
                        && o.doc["runs"][0]["trials"][0].is_object());
                if !ran {
                    tracing::info!(
                        target: crate::logging::SERVER_LOG,
                        "probe {name} {target}: failed (exit {}): {}",
                        o.exit_code,
                        o.stderr.lines().last().unwrap_or("")
                    );
                }
                let result = if ran { "success" } else { "failed" };
                (Some(&o.doc), ran, result)
            }
            Some(Err(e)) => {
                tracing::info!(target: crate::logging::SERVER_LOG, "probe {name} {target}: {e}");
                (None, false, "failed")
            }
        };
        // As an agent order: it ran, whatever its verdict, or it did not.
        let ran = outcome.as_ref().is_some_and(|o| o.is_ok());
        orders.order(ORIGIN, if ran { "served" } else { "failed" }, "");
        self.count(&name, result);
        Ok(super::gauges::answer(doc, success, took))
    }
}

/// The time a probe may take: the scrape's timeout header, else
/// [`DEFAULT_TIMEOUT`].
pub fn timeout(header: Option<&str>) -> Duration {
    header
        .and_then(|h| h.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .unwrap_or(DEFAULT_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scrape_timeout_header_is_read_and_a_bad_one_ignored() {
        assert_eq!(timeout(Some("2.5")), Duration::from_millis(2500));
        assert_eq!(timeout(Some("nan")), DEFAULT_TIMEOUT);
        assert_eq!(timeout(Some("-1")), DEFAULT_TIMEOUT);
        assert_eq!(timeout(None), DEFAULT_TIMEOUT);
    }

    #[test]
    fn line_of_counts_from_one() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
        assert_eq!(line_of("a\nb\nc", 4), 3);
    }
}
