//! Command-line arguments (clap derive). Parsing only: no I/O here.

use crate::config::OutlierPolicy;
use crate::report::Format;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Benchmark runner for the work of a transformer stack.
#[derive(Debug, Parser)]
#[command(name = "tfbench", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List suites and the benchmark cases a run would expand them to.
    List(ListArgs),
    /// Run the selected cases and report the results.
    Run(Box<RunArgs>),
    /// Describe this machine; with --probe, measure its peak FLOP/s and bandwidth.
    Sysinfo(SysinfoArgs),
}

/// Which cases: suites, filter regex, exact match, skip regex, config file.
#[derive(Debug, Args, Clone)]
pub struct Selection {
    /// Suite(s) to use (repeatable); default: the config's list, else all.
    #[arg(long = "suite", short = 's', value_name = "SUITE")]
    pub suites: Vec<String>,
    /// Regex over case ids (`suite/benchmark/param=value,...`).
    #[arg(value_name = "FILTER")]
    pub filter: Option<String>,
    /// Match FILTER against whole ids literally instead of as a regex.
    #[arg(long)]
    pub exact: bool,
    /// Exclude case ids matching this regex.
    #[arg(long, value_name = "REGEX")]
    pub skip: Option<String>,
    /// Config file (TOML or YAML, by extension).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Apply the quick profile (configs/quick.toml): seconds for a suite.
    #[arg(long)]
    pub quick: bool,
}

/// Output format of `list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ListFormat {
    /// Human-readable tables.
    Table,
    /// JSON.
    Json,
}

/// `tfbench list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Case selection.
    #[command(flatten)]
    pub selection: Selection,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

/// `tfbench run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Case selection.
    #[command(flatten)]
    pub selection: Selection,
    /// Samples per case [default: 100].
    #[arg(long, value_name = "N")]
    pub sample_size: Option<usize>,
    /// Warm-up time per case in seconds [default: 1].
    #[arg(long, value_name = "SECS")]
    pub warm_up_time: Option<f64>,
    /// Measurement budget per case in seconds [default: 3].
    #[arg(long, value_name = "SECS")]
    pub measurement_time: Option<f64>,
    /// Hard time budget per case in seconds; wins over the sample count.
    #[arg(long, value_name = "SECS")]
    pub max_time: Option<f64>,
    /// Stop sampling a case once its median CI half-width is below PCT percent.
    #[arg(long, value_name = "PCT")]
    pub target_precision: Option<f64>,
    /// Confidence level of every interval [default: 0.95].
    #[arg(long, value_name = "LEVEL")]
    pub confidence_level: Option<f64>,
    /// Bootstrap resamples for the mean's interval [default: 10000].
    #[arg(long, value_name = "N")]
    pub bootstrap_resamples: Option<usize>,
    /// Keep outliers (report them) or remove them before the analysis [default: keep].
    #[arg(long, value_enum, value_name = "POLICY")]
    pub outliers: Option<OutlierPolicy>,
    /// Worker threads [default: every logical CPU].
    #[arg(long, short = 'j', value_name = "N")]
    pub threads: Option<usize>,
    /// Seed for input data, bootstrap and shuffling.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Repeat the whole plan N times (samples are pooled per case).
    #[arg(long, value_name = "N")]
    pub rounds: Option<u32>,
    /// Run cases in a seeded random order in each round.
    #[arg(long)]
    pub shuffle: bool,
    /// Output format on stdout (or in --output).
    #[arg(long, short = 'f', value_enum)]
    pub format: Option<Format>,
    /// Also write results to FILE (format from --format, else the extension,
    /// else JSON); stdout then shows the table.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Do not measure machine limits when no probe is cached.
    #[arg(long)]
    pub no_probe: bool,
    /// No progress output on stderr.
    #[arg(long, short = 'q', conflicts_with = "verbose")]
    pub quiet: bool,
    /// More detail on stderr (settings, verification of each case).
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

/// `tfbench sysinfo`.
#[derive(Debug, Args)]
pub struct SysinfoArgs {
    /// Measure peak FLOP/s and memory bandwidth now and cache them.
    #[arg(long)]
    pub probe: bool,
    /// Worker threads for the all-core figures [default: every logical CPU].
    #[arg(long, short = 'j', value_name = "N")]
    pub threads: Option<usize>,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}
