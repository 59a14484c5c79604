//! This machine's byte-stream size calibration: the file `xferlab
//! calibrate` writes and every flow without -l/--read-size reads (see
//! `transport::sizing` for why sizes above iperf3's are measured, not
//! derived).
//!
//! The file is JSON (`xferlab.calibration/1`): one entry per machine kind,
//! keyed by CPU model, kernel, L2 size and usable CPUs, so a home directory
//! shared by several machines, a kernel upgrade or a container with fewer
//! CPUs never takes another machine's sizes. Where it lives:
//! `$XFERLAB_CALIBRATION` (a path; `off`: none is read or written), else
//! `$XDG_CACHE_HOME/xferlab/calibration.json`, else
//! `~/.cache/xferlab/calibration.json`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use xferlab_core::result::SizeCalibration;

/// Environment variable naming the calibration file, or `off`.
pub const FILE_VAR: &str = "XFERLAB_CALIBRATION";
const SCHEMA: &str = "xferlab.calibration/1";
/// A calibration file is a few hundred bytes per machine; anything larger
/// is not one of ours.
const MAX_FILE: u64 = 1 << 20;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct File {
    schema: String,
    pub machines: Vec<SizeCalibration>,
}

/// What identifies a machine kind for the calibration.
#[derive(Debug, Clone, PartialEq)]
pub struct MachineKey {
    pub cpu_model: String,
    pub kernel: String,
    pub l2: Option<u64>,
    pub cpus: u32,
}

impl MachineKey {
    /// This process's machine: CPU model and kernel as the result's host
    /// section names them, the L2 of the first usable CPU, the usable
    /// CPUs.
    pub fn here() -> MachineKey {
        let host = super::host::host_info();
        let cpus = super::affinity::usable_cpus().map_or(1, |c| c.len().max(1));
        MachineKey {
            cpu_model: host.cpu_model.unwrap_or_default(),
            kernel: host.kernel,
            l2: host.caches.and_then(|c| c.l2),
            cpus: u32::try_from(cpus).unwrap_or(u32::MAX),
        }
    }

    pub fn matches(&self, c: &SizeCalibration) -> bool {
        c.cpu_model == self.cpu_model
            && c.kernel == self.kernel
            && c.l2 == self.l2
            && c.cpus == self.cpus
    }
}

/// The calibration file's path; None when `XFERLAB_CALIBRATION=off` or no
/// home directory is known.
pub fn path() -> Option<PathBuf> {
    match std::env::var_os(FILE_VAR) {
        Some(v) if v == "off" => None,
        Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
        _ => std::env::var_os("XDG_CACHE_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|d| !d.is_empty())
                    .map(|h| PathBuf::from(h).join(".cache"))
            })
            .map(|d| d.join("xferlab").join("calibration.json")),
    }
}

/// The entry for this machine, read once per process; Err names the file
/// and the fix when it is not a calibration file.
pub fn current() -> Result<Option<&'static SizeCalibration>, &'static CalibrationError> {
    static CURRENT: OnceLock<Result<Option<SizeCalibration>, CalibrationError>> = OnceLock::new();
    CURRENT
        .get_or_init(|| match path() {
            Some(p) => Ok(find(&read(&p)?, &MachineKey::here()).cloned()),
            None => Ok(None),
        })
        .as_ref()
        .map(Option::as_ref)
}

pub fn find<'a>(file: &'a File, key: &MachineKey) -> Option<&'a SizeCalibration> {
    file.machines.iter().find(|c| key.matches(c))
}

/// Why the calibration file cannot be used or written.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error("the size calibration {} {why}: run `xferlab calibrate` again, or remove the file (or set {FILE_VAR}=off)", .path.display())]
    Bad { path: PathBuf, why: String },
    #[error("cannot {what} {}: {err}", .path.display())]
    Write {
        what: &'static str,
        path: PathBuf,
        err: std::io::Error,
    },
}

/// The file at `path`; an absent file is an empty one.
pub fn read(path: &Path) -> Result<File, CalibrationError> {
    let bad = |why: String| CalibrationError::Bad {
        path: path.to_path_buf(),
        why,
    };
    // Another user's file (root's, seen by a program that dropped its
    // privileges with HOME unchanged) is not this user's calibration: the
    // flows use the default, and the result says `default`.
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(File::default()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            tracing::debug!("ignoring the size calibration {}: {e}", path.display());
            return Ok(File::default());
        }
        Err(e) => return Err(bad(format!("cannot be read ({e})"))),
    };
    let len = f.metadata().map_or(0, |m| m.len());
    if len > MAX_FILE {
        return Err(bad(format!("is {len} bytes, not a calibration file")));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut f, &mut text)
        .map_err(|e| bad(format!("cannot be read ({e})")))?;
    let file: File = serde_json::from_str(&text).map_err(|e| bad(format!("is not valid ({e})")))?;
    if file.schema != SCHEMA {
        return Err(bad(format!(
            "has schema '{}', not {SCHEMA}",
            file.schema.escape_debug()
        )));
    }
    Ok(file)
}

/// Writes `entry` into the file at `path`, replacing the same machine's
/// earlier entry and keeping the others (written to a temporary file and
/// renamed, so a reader never sees half a file).
pub fn store(path: &Path, entry: SizeCalibration) -> Result<(), CalibrationError> {
    let mut file = read(path).unwrap_or_default();
    let key = MachineKey {
        cpu_model: entry.cpu_model.clone(),
        kernel: entry.kernel.clone(),
        l2: entry.l2,
        cpus: entry.cpus,
    };
    file.machines.retain(|c| !key.matches(c));
    file.machines.push(entry);
    file.schema = SCHEMA.into();
    let text = serde_json::to_string_pretty(&file).expect("a calibration serializes");
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(write_error("create", dir))?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text + "\n")
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(write_error("write", path))
}

fn write_error(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CalibrationError {
    let path = path.to_path_buf();
    move |err| CalibrationError::Write { what, path, err }
}

/// Removes this machine's entry from the file at `path`; whether there was
/// one.
pub fn forget(path: &Path, key: &MachineKey) -> Result<bool, CalibrationError> {
    let mut file = read(path)?;
    let before = file.machines.len();
    file.machines.retain(|c| !key.matches(c));
    if file.machines.len() == before {
        return Ok(false);
    }
    let text = serde_json::to_string_pretty(&file).expect("a calibration serializes");
    std::fs::write(path, text + "\n")
        .map(|()| true)
        .map_err(write_error("write", path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use xferlab_core::result::SizeChoice;

    fn entry(model: &str, write: u64) -> SizeCalibration {
        SizeCalibration {
            measured_unix_s: 7,
            cpu_model: model.into(),
            kernel: "Linux 6.18.4".into(),
            l2: Some(1 << 20),
            cpus: 2,
            alone: SizeChoice {
                write_size: write,
                read_size: 256 << 10,
                read_fill: false,
                bps: 3e10,
                default_bps: 2e10,
            },
            crowded: None,
        }
    }

    /// A directory of its own for one test, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let d = std::env::temp_dir()
                .join(format!("xferlab-calibration-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            TempDir(d)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn key(model: &str) -> MachineKey {
        MachineKey {
            cpu_model: model.into(),
            kernel: "Linux 6.18.4".into(),
            l2: Some(1 << 20),
            cpus: 2,
        }
    }

    #[test]
    fn entries_are_kept_per_machine_and_replaced_on_recalibration() {
        let dir = TempDir::new("kept");
        let p = dir.0.join("sub").join("calibration.json");
        assert!(read(&p).unwrap().machines.is_empty(), "absent: empty");
        store(&p, entry("A", 512 << 10)).unwrap();
        store(&p, entry("B", 256 << 10)).unwrap();
        store(&p, entry("A", 1 << 20)).unwrap();
        let f = read(&p).unwrap();
        assert_eq!(f.machines.len(), 2);
        assert_eq!(find(&f, &key("A")).unwrap().alone.write_size, 1 << 20);
        assert_eq!(find(&f, &key("B")).unwrap().alone.write_size, 256 << 10);
        let other_kernel = MachineKey {
            kernel: "Linux 6.1.0".into(),
            ..key("A")
        };
        assert!(find(&f, &other_kernel).is_none(), "another kernel");
        let fewer_cpus = MachineKey {
            cpus: 1,
            ..key("A")
        };
        assert!(find(&f, &fewer_cpus).is_none(), "fewer usable CPUs");
        assert!(forget(&p, &key("A")).unwrap());
        assert!(!forget(&p, &key("A")).unwrap());
        assert!(find(&read(&p).unwrap(), &key("B")).is_some());
    }

    #[test]
    fn a_file_that_is_not_a_calibration_is_named_with_the_fix() {
        let dir = TempDir::new("bad");
        let p = dir.0.join("c.json");
        for text in ["{", "[1,2]", r#"{"schema":"other/1","machines":[]}"#] {
            std::fs::write(&p, text).unwrap();
            let e = read(&p).unwrap_err().to_string();
            assert!(
                e.contains("c.json") && e.contains("xferlab calibrate") && !e.contains('\n'),
                "{e}"
            );
        }
        std::fs::write(&p, vec![b' '; (MAX_FILE + 1) as usize]).unwrap();
        assert!(read(&p)
            .unwrap_err()
            .to_string()
            .contains("not a calibration file"));
        // Unreadable for this user (not root: root reads any file).
        std::fs::write(&p, "{}").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
        if std::fs::File::open(&p).is_err() {
            assert!(read(&p).unwrap().machines.is_empty(), "another user's file");
        }
    }
}
