//! `xferlab db list|show|export`: its flags.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::experiment::DEFAULT_DB;
use crate::experiment::db::{DbRequest, ExportFormat};

/// `xferlab db`.
#[derive(Debug, Args)]
pub struct DbArgs {
    /// The results database.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_DB, global = true)]
    pub db: PathBuf,
    #[command(subcommand)]
    pub command: DbCommand,
}

#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Experiments (id, scenario, scale, when, runs ok/total) and the
    /// number of single runs.
    List,
    /// One experiment: its scenario, then a line per run (the latest
    /// attempt of each point and repeat), failures with their error.
    Show(ShowArgs),
    /// Write runs as CSV (one row per run, knobs and metrics as columns),
    /// JSON lines (one object per run, with its full result) or an SQL dump
    /// (`sqlite3 NEW.db < dump.sql`).
    Export(ExportArgs),
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Experiment id, or scenario name (its latest experiment).
    #[arg(value_name = "EXPERIMENT")]
    pub experiment: String,
    /// Every attempt, not only the latest of each point and repeat.
    #[arg(long)]
    pub all_attempts: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Experiment id or scenario name; without it, everything (all
    /// experiments and the single runs).
    #[arg(value_name = "EXPERIMENT")]
    pub experiment: Option<String>,
    #[arg(long, value_enum, default_value_t = ExportFormat::Csv)]
    pub format: ExportFormat,
    /// Write to FILE instead of standard output (written whole, then
    /// renamed into place).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Include superseded attempts (csv, jsonl); the SQL dump always has
    /// every row.
    #[arg(long)]
    pub all_attempts: bool,
}

impl DbArgs {
    /// The subcommand as the store's request.
    pub fn request(&self) -> DbRequest<'_> {
        match &self.command {
            DbCommand::List => DbRequest::List,
            DbCommand::Show(a) => DbRequest::Show {
                experiment: &a.experiment,
                all_attempts: a.all_attempts,
            },
            DbCommand::Export(a) => DbRequest::Export {
                experiment: a.experiment.as_deref(),
                format: a.format,
                all_attempts: a.all_attempts,
                output: a.output.as_deref(),
            },
        }
    }
}
