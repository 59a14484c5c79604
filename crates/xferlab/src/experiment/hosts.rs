//! Experiments across hosts (`where = "hosts"`): each point runs
//! `@CLIENT:SERVER VERB ...` as an order for host CLIENT's agent (`xferlab
//! server --agent`), against host SERVER's test server; the result
//! document comes back over the order's connection and is stored here,
//! on the controller, as a local run's is. The scenario's `[hosts.NAME]`
//! say where each agent listens and which key it takes: this module reads
//! the key files (relative to the scenario file) before anything runs, so
//! a missing one is a line about the scenario, not a failed run.

use std::path::{Path, PathBuf};

use xferlab_core::experiment::scenario::{Host, Scenario};
use xferlab_core::proto::auth::parse_keys;

/// A host's `[hosts.NAME]` that cannot be used: `file:line: message` is
/// printed by the caller.
#[derive(Debug, thiserror::Error)]
#[error("{line}: {message}")]
pub struct HostsError {
    pub line: usize,
    pub message: String,
}

/// A host as the runner talks to it.
#[derive(Debug, Clone)]
pub struct Agent {
    pub name: String,
    /// Its agent, `ADDR:PORT`.
    pub agent: String,
    /// Its test server, `ADDR:PORT`.
    pub server: String,
    /// The key file, resolved against the scenario's directory.
    pub key_file: PathBuf,
    /// The first key of the file: what a client answers with.
    pub key: Vec<u8>,
}

/// The scenario's hosts with their keys read, in file order.
pub fn load(s: &Scenario, scenario_path: &Path) -> Result<Vec<Agent>, HostsError> {
    let dir = scenario_path.parent().unwrap_or(Path::new("."));
    s.hosts.iter().map(|h| agent(h, dir)).collect()
}

fn agent(h: &Host, dir: &Path) -> Result<Agent, HostsError> {
    let key_file = dir.join(&h.key);
    let bad = |why: String| {
        HostsError {
        line: h.key_line,
        message: format!(
            "[hosts.{}] key = \"{}\": {why}; write the path of the agent's --auth-key file (one key per line), relative to the scenario file",
            h.name, h.key
        ),
    }
    };
    let text = std::fs::read_to_string(&key_file)
        .map_err(|e| bad(format!("cannot read {}: {e}", key_file.display())))?;
    let keys = parse_keys(&text).map_err(|why| bad(format!("{} {why}", key_file.display())))?;
    Ok(Agent {
        name: h.name.clone(),
        agent: h.agent.clone(),
        server: h.server(),
        key_file,
        key: keys.into_iter().next().expect("parse_keys finds a key"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use xferlab_core::experiment::scenario::Scale;

    #[test]
    fn keys_are_read_relative_to_the_scenario_and_missing_ones_named() {
        let dir = std::env::temp_dir().join(format!("xferlab-hosts-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("keys")).unwrap();
        std::fs::write(
            dir.join("keys/a"),
            "# the lab's key\nsixteen-bytes-key-1\nother-key-of-16-bytes\n",
        )
        .unwrap();
        std::fs::write(dir.join("short"), "tiny\n").unwrap();
        let text = |key: &str| {
            format!("title = \"t\"\nwhere = \"hosts\"\ncommand = \"@a:a stream\"\n[hosts.a]\nagent = \"10.9.0.1:5290\"\nkey = \"{key}\"\n")
        };
        let path = dir.join("s.toml");
        let load_with = |key: &str| load(&Scenario::parse(&text(key), Scale::Full).unwrap(), &path);
        let a = &load_with("keys/a").unwrap()[0];
        assert_eq!(a.key, b"sixteen-bytes-key-1");
        assert_eq!(
            (a.agent.as_str(), a.server.as_str()),
            ("10.9.0.1:5290", "10.9.0.1:5290")
        );
        let e = load_with("keys/none").unwrap_err();
        assert_eq!(e.line, 6);
        assert!(
            e.message
                .starts_with("[hosts.a] key = \"keys/none\": cannot read "),
            "{e}"
        );
        assert!(e.message.contains("relative to the scenario file"), "{e}");
        let e = load_with("short").unwrap_err();
        assert!(e.message.contains("at least"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
