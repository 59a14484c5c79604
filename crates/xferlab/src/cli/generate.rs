//! `xferlab generate`: man pages and shell completions, made from the same
//! clap definitions as `--help`, so what a package ships can never drift
//! from the binary it ships with (scripts/package runs the binary it packs).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, CommandFactory, Subcommand};
use clap_complete::Shell;
use clap_mangen::roff::{roman, Roff};

use super::Cli;

#[derive(Debug, Args)]
pub struct GenerateArgs {
    #[command(subcommand)]
    pub what: GenerateWhat,
}

#[derive(Debug, Subcommand)]
pub enum GenerateWhat {
    /// Man pages into DIR (created if missing): xferlab.1 and one page per
    /// verb and sub-verb (xferlab-stream.1, xferlab-usb-bulk.1, ...), each
    /// with the text of that verb's --help.
    Man {
        /// Directory to write the pages into (e.g. /usr/local/share/man/man1).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// A shell's completion script, on stdout: `xferlab generate
    /// completions bash > /etc/bash_completion.d/xferlab`.
    Completions {
        #[arg(value_name = "SHELL")]
        shell: Shell,
    },
}

/// Why generating failed: the file or directory and the system's reason.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("cannot create {}: {source}; name a directory you may write to", path.display())]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the completion script to stdout: {0}")]
    Stdout(std::io::Error),
}

/// `xferlab generate ...`.
pub fn run(a: &GenerateArgs) -> ExitCode {
    let done = match &a.what {
        GenerateWhat::Man { dir } => man_pages(dir).map(drop),
        GenerateWhat::Completions { shell } => completions(*shell, &mut std::io::stdout()),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xferlab: {e}");
            ExitCode::from(1)
        }
    }
}

/// Writes one page per visible command of the tree into `dir`; returns
/// the files written, the root's first.
pub fn man_pages(dir: &Path) -> Result<Vec<PathBuf>, GenerateError> {
    std::fs::create_dir_all(dir).map_err(|source| GenerateError::Dir {
        path: dir.to_path_buf(),
        source,
    })?;
    // `help` is a pseudo-verb with nothing to say in a page of its own;
    // building the tree gives every sub-verb its display name
    // (xferlab-usb-bulk), which names its page, and the global flags.
    let mut root = Cli::command().disable_help_subcommand(true);
    root.build();
    let mut written = Vec::new();
    page(&root, None, dir, &mut written)?;
    Ok(written)
}

fn page(
    cmd: &clap::Command,
    parent: Option<&str>,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> Result<(), GenerateError> {
    let man = clap_mangen::Man::new(cmd.clone())
        .source(format!("xferlab {}", env!("CARGO_PKG_VERSION")))
        .manual("xferlab manual");
    let path = dir.join(man.get_filename());
    let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_owned();
    let mut text = Vec::new();
    let rendered = man.render(&mut text).and_then(|()| {
        // SEE ALSO: the page one level up (the verbs one level down are
        // listed by clap's own section), so `man xferlab-usb-bulk` leads
        // back to `xferlab-usb`; the root names the docs.
        let refs = match parent {
            Some(p) => format!("{p}(1)"),
            None => "/usr/share/doc/xferlab/ (README.md, docs/)".to_owned(),
        };
        // to_roff: the page's preamble (its apostrophe handling) is
        // already written once, and these names have no apostrophes.
        let see_also = Roff::new()
            .control("SH", ["SEE ALSO"])
            .text([roman(refs)])
            .to_roff();
        text.write_all(see_also.as_bytes())
    });
    rendered
        .and_then(|()| std::fs::write(&path, &text))
        .map_err(|source| GenerateError::Write {
            path: path.clone(),
            source,
        })?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        page(sub, Some(&name), dir, written)?;
    }
    Ok(())
}

/// Writes `shell`'s completion script for the whole tree to `out`.
pub fn completions(shell: Shell, out: &mut dyn Write) -> Result<(), GenerateError> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "xferlab", &mut script);
    match out.write_all(&script).and_then(|()| out.flush()) {
        // A reader gone away (`| head`) wanted no more: not a failure.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(GenerateError::Stdout(e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every verb and sub-verb gets its page, named as `man` looks it up,
    /// and a page carries its verb's flags.
    #[test]
    fn a_page_per_visible_verb() {
        let tmp = tempfile::tempdir().unwrap();
        // A directory the verb makes itself.
        let dir = tmp.path().join("man1");
        let files = man_pages(&dir).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for want in [
            "xferlab.1",
            "xferlab-stream.1",
            "xferlab-usb-bulk.1",
            "xferlab-db-export.1",
        ] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing from {names:?}"
            );
        }
        assert!(!names.iter().any(|n| n.contains("help")), "{names:?}");
        let stream = std::fs::read_to_string(dir.join("xferlab-stream.1")).unwrap();
        assert!(stream.contains("parallel"), "no -P in xferlab-stream.1");
        assert!(
            stream.contains("SEE ALSO"),
            "no SEE ALSO in xferlab-stream.1"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
