//! `xferlab run`, `report` and `compare`: the experiment verbs' flags,
//! and the results database they share.

use std::path::PathBuf;

use clap::Args;

/// The file name used when no `--db` is given.
pub const DEFAULT_DB: &str = "xferlab.db";

/// The results database, for every experiment command.
#[derive(Debug, Args)]
pub struct DbPathArg {
    /// The results database (SQLite).
    #[arg(long, default_value = DEFAULT_DB, value_name = "PATH")]
    pub db: PathBuf,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The scenario (TOML; see scenarios/ and docs/experiments.md).
    pub scenario: PathBuf,
    /// The scenario's quick scale (its [quick] section): fewer points,
    /// repeats and seconds, as CI runs it.
    #[arg(long)]
    pub quick: bool,
    /// List the expanded points and their command lines; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Start a new experiment even if this scenario has stored runs.
    #[arg(long, conflicts_with = "resume_anyway")]
    pub fresh: bool,
    /// Resume the stored experiment even though the scenario file changed
    /// since (points are matched by their knob values).
    #[arg(long)]
    pub resume_anyway: bool,
    /// Where the report goes (default xferlab-reports/NAME-ID).
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,
    /// Skip the report at the end.
    #[arg(long)]
    pub no_report: bool,
    /// Run a lab run again, up to N more times, when it is invalid for
    /// timing alone (departures late, the rate off: what a busy or
    /// stealing host causes); each attempt is stored, the report reads
    /// the last.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub retry_invalid: u32,
    #[command(flatten)]
    pub db: DbPathArg,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Experiment id or scenario name (default: the newest experiment).
    pub experiment: Option<String>,
    /// Output directory (default xferlab-reports/NAME-ID).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Also draw every plot as plot-N.png (800x500, for slides), beside its SVG.
    #[arg(long)]
    pub png: bool,
    #[command(flatten)]
    pub db: DbPathArg,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// A run (`run:N`) or a point with all its repeats (`EXPERIMENT/POINT`,
    /// e.g. `udpmon/3` or `4/3`; POINT numbered as in --dry-run).
    pub a: String,
    /// The other run or point.
    pub b: String,
    /// Only these metrics (repeatable).
    #[arg(short = 'm', long = "metric", value_name = "NAME")]
    pub metrics: Vec<String>,
    /// JSON instead of a table.
    #[arg(short = 'J', long = "json")]
    pub json: bool,
    #[command(flatten)]
    pub db: DbPathArg,
}
