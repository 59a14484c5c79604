//! Background load (`--load cpu=N,mem=M`, as `stress -c N -m M`): the
//! parsed request and the report of what the workers achieved. The
//! workers themselves are threads of the binary (`sys::load`).

use serde::{Deserialize, Serialize};

use crate::units::parse_size;

/// Bytes a memory worker touches per round unless `vm-bytes=` says
/// otherwise: stress's own default for `--vm-bytes`.
pub const DEFAULT_VM_BYTES: u64 = 256 << 20;

/// What `--load` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadSpec {
    /// CPU spinners (stress -c).
    pub cpu: u32,
    /// Memory workers (stress -m): allocate, touch every page, free, again.
    pub mem: u32,
    /// Bytes each memory worker touches per round (stress --vm-bytes).
    pub vm_bytes: u64,
}

/// Why a `--load` value is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--load {value}: {why} (write cpu=N,mem=M[,vm-bytes=SIZE], e.g. cpu=4,mem=4)")]
pub struct LoadError {
    value: String,
    why: String,
}

impl std::str::FromStr for LoadSpec {
    type Err = LoadError;

    fn from_str(s: &str) -> Result<Self, LoadError> {
        let err = |why: String| LoadError {
            value: s.to_string(),
            why,
        };
        let mut spec = LoadSpec {
            cpu: 0,
            mem: 0,
            vm_bytes: DEFAULT_VM_BYTES,
        };
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| err(format!("`{part}` is not KEY=VALUE")))?;
            let count = || {
                v.parse::<u32>()
                    .ok()
                    .filter(|n| *n <= 1024)
                    .ok_or_else(|| err(format!("{k}={v} is not a worker count from 0 to 1024")))
            };
            match k {
                "cpu" => spec.cpu = count()?,
                "mem" => spec.mem = count()?,
                "vm-bytes" => {
                    spec.vm_bytes = parse_size(v)
                        .ok()
                        .filter(|b| *b >= 4096)
                        .ok_or_else(|| err(format!("vm-bytes={v} is not a size of 4K or more")))?
                }
                _ => return Err(err(format!("unknown key `{k}`"))),
            }
        }
        if spec.cpu == 0 && spec.mem == 0 {
            return Err(err("no workers asked for".into()));
        }
        Ok(spec)
    }
}

/// One worker's achieved load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerLoad {
    /// "cpu" or "mem".
    pub kind: String,
    /// The worker's own CPU time (user + system, per-thread rusage) over
    /// its wall time, in % of one core.
    pub cpu_percent: f64,
    /// Rounds of allocate-touch-free (memory workers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u64>,
}

/// What the load achieved, recorded in the result as `load`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    pub requested: LoadSpec,
    /// Seconds from the workers' start to their stop.
    pub duration_s: f64,
    pub workers: Vec<WorkerLoad>,
}

impl LoadReport {
    /// One line for people: `load: 2 cpu 97.0 % 96.5 %, 1 mem 88.1 %`.
    pub fn line(&self) -> String {
        let mut parts = Vec::new();
        for kind in ["cpu", "mem"] {
            let pct: Vec<String> = self
                .workers
                .iter()
                .filter(|w| w.kind == kind)
                .map(|w| format!("{:.1} %", w.cpu_percent))
                .collect();
            if !pct.is_empty() {
                parts.push(format!("{} {kind} {}", pct.len(), pct.join(" ")));
            }
        }
        format!(
            "load over {:.1} s (CPU of each worker, % of a core): {}",
            self.duration_s,
            parts.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stress_like_specs() {
        let s: LoadSpec = "cpu=4,mem=4".parse().unwrap();
        assert_eq!((s.cpu, s.mem, s.vm_bytes), (4, 4, DEFAULT_VM_BYTES));
        let s: LoadSpec = "mem=1,vm-bytes=64M".parse().unwrap();
        assert_eq!((s.cpu, s.mem, s.vm_bytes), (0, 1, 64 << 20));
    }

    #[test]
    fn refuses_what_it_cannot_run_with_one_line() {
        for (bad, needle) in [
            ("cpu", "not KEY=VALUE"),
            ("cpu=x", "worker count"),
            ("gpu=1", "unknown key `gpu`"),
            ("cpu=0", "no workers"),
            ("mem=1,vm-bytes=1", "4K or more"),
        ] {
            let e = bad.parse::<LoadSpec>().unwrap_err().to_string();
            assert!(
                e.contains(needle) && e.contains("cpu=N,mem=M"),
                "{bad}: {e}"
            );
        }
    }
}
