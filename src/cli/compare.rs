//! The arguments of the commands that compare: `compare`, `ab` (and its
//! worker), `baseline`, and the gate's thresholds they share.

use super::*;

/// Where baselines live.
#[derive(Debug, Args, Clone)]
pub struct BaselineDir {
    /// Baseline store [default: the config's `baseline_dir`, else ./baselines].
    #[arg(long, value_name = "DIR", global = true)]
    pub baseline_dir: Option<PathBuf>,
}

/// Thresholds of a comparison and its gate.
#[derive(Debug, Args, Clone)]
pub struct GateArgs {
    /// Significance level, Benjamini-Hochberg corrected across the cases.
    #[arg(long, value_name = "ALPHA", default_value_t = 0.01)]
    pub alpha: f64,
    /// Changes within +-PCT percent count as noise.
    #[arg(long, value_name = "PCT", default_value_t = 2.0)]
    pub noise_threshold: f64,
    /// Exit 1 when a case regressed beyond --max-regression (or memory beyond
    /// --max-memory-regression).
    #[arg(long)]
    pub fail_on_regression: bool,
    /// Largest tolerated slowdown of a regressed case, percent.
    #[arg(long, value_name = "PCT", default_value_t = 5.0)]
    pub max_regression: f64,
    /// Largest tolerated growth of peak memory or allocations per iteration, percent.
    #[arg(long, value_name = "PCT", default_value_t = 20.0)]
    pub max_memory_regression: f64,
    /// Instruction counts (--measure instructions) that change by more than +-PCT percent
    /// changed: counts are deterministic, so the band is small and no statistics are needed.
    #[arg(long, value_name = "PCT", default_value_t = 1.0)]
    pub count_band: f64,
    /// Refuse to compare results from different machine fingerprints.
    #[arg(long)]
    pub strict_machine: bool,
    /// Per-case significance level on the raw p-value, beside the Benjamini-Hochberg q: a lone
    /// large change is never hidden by a large plan (0 turns it off).
    #[arg(long, value_name = "ALPHA", default_value_t = 0.001)]
    pub case_alpha: f64,
    /// A case's noise band is at least K times its run-to-run spread learned
    /// from history.
    #[arg(long, value_name = "K", default_value_t = 3.0)]
    pub noise_k: f64,
    /// Divide every ratio by the machine's measured drift (canaries, else the
    /// median case), labelled as such.
    #[arg(long)]
    pub normalize: bool,
    /// With --fail-on-regression, pass a comparison that has nothing to judge
    /// (no case in common, every case failed, a run compared with itself).
    #[arg(long)]
    pub allow_vacuous: bool,
    /// With --fail-on-regression, pass a comparison that could not judge
    /// more than --max-unjudged of its cases (or a --require'd case); without
    /// it such a gate exits 4, since "could not judge" is never a pass.
    #[arg(long)]
    pub allow_inconclusive: bool,
    /// Largest share of the compared cases, percent, that may end
    /// inconclusive, with too few samples or set aside as disturbed before
    /// the gate says "could not judge" (exit 4).
    #[arg(long, value_name = "PCT", default_value_t = 25.0, value_parser = parse_percent)]
    pub max_unjudged: f64,
    /// Cases (a regex over case ids) the gate must judge: one that is
    /// missing, failed or not judged fails it (exit 4, or 3 when it failed).
    #[arg(long, value_name = "REGEX", value_parser = parse_regex)]
    pub require: Option<regex::Regex>,
}

/// A percentage in [0, 100].
fn parse_percent(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!("expected a percentage in [0, 100], e.g. 25, got {text:?}")),
    }
}

/// A regular expression over case ids.
fn parse_regex(text: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(text).map_err(|e| format!("bad regex: {e}"))
}

/// `tfbench compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The reference: a saved baseline name or a results/baseline JSON file.
    #[arg(long, short = 'b', value_name = "NAME|FILE")]
    pub baseline: String,
    /// The candidate: a baseline name or a results JSON file (from `run
    /// --output`) [default: the newest other saved baseline].
    #[arg(long, short = 'a', value_name = "NAME|FILE")]
    pub against: Option<String>,
    /// Baseline store.
    #[command(flatten)]
    pub dir: BaselineDir,
    /// Thresholds.
    #[command(flatten)]
    pub gate: GateArgs,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = CompareFormat::Table)]
    pub format: CompareFormat,
    /// Also write the comparison to FILE (.md markdown, .json JSON, else the --format).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// History store whose runs give each case's learned noise band
    /// [default: <baseline dir>/history].
    #[arg(long, value_name = "DIR")]
    pub history_dir: Option<PathBuf>,
}

/// `tfbench ab`.
#[derive(Debug, Args)]
// ab's p values come from a calibrated t test over fresh-process rounds, so
// its --alpha defaults to the usual 0.05 (compare::paired::DEFAULT_ALPHA,
// kept in step by a test there); stored comparisons keep 0.01.
#[command(mut_arg("alpha", |a| a.default_value("0.05").help(
    "Significance level, Benjamini-Hochberg corrected across the cases (ab: 0.05, its paired p values being calibrated; compare: 0.01)"
)))]
pub struct AbArgs {
    /// The base (old) tfbench executable.
    #[arg(long, value_name = "PATH")]
    pub base: PathBuf,
    /// The head (new) tfbench executable.
    #[arg(long, value_name = "PATH")]
    pub head: PathBuf,
    /// KEY=VALUE set in the base build's environment only (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    pub base_env: Vec<String>,
    /// KEY=VALUE set in the head build's environment only (repeatable), e.g.
    /// the TFBENCH_INJECT_SLOWDOWN test hook.
    #[arg(long, value_name = "KEY=VALUE")]
    pub head_env: Vec<String>,
    /// What both builds run, and how long.
    #[command(flatten)]
    pub plan: WorkerPlan,
    /// Thresholds.
    #[command(flatten)]
    pub gate: GateArgs,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = CompareFormat::Table)]
    pub format: CompareFormat,
    /// Also write the comparison to FILE (.md markdown, .json JSON, else the --format).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write every case's raw paired samples (ns per iteration, with
    /// the round of each pair) to FILE as JSON, for analysis elsewhere.
    #[arg(long, value_name = "FILE")]
    pub pairs_output: Option<PathBuf>,
    /// Cases the rounds leave undecided (inconclusive, too few samples) run
    /// more rounds, alone, until decided or N rounds in all; each later look
    /// is judged at a stricter level (1 - (1 - level) / looks). N = the
    /// rounds switches it off [default: twice the rounds].
    #[arg(long, value_name = "N")]
    pub max_rounds: Option<u32>,
    /// No progress output on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// What to judge the builds by: paired wall time, or instructions per iteration (each build
    /// counts every case once under callgrind, `run --measure instructions`; judged against
    /// --count-band, no rounds or statistics).
    #[arg(long, value_enum, value_name = "MEASURE", default_value_t = crate::inside::Measure::Time)]
    pub measure: crate::inside::Measure,
}

/// The plan and timing both sides of `ab` use.
#[derive(Debug, Args, Clone)]
pub struct WorkerPlan {
    /// Case selection.
    #[command(flatten)]
    pub selection: Selection,
    /// Sampling, threads, seed and rounds, per case, round and build.
    #[command(flatten)]
    pub timing: Timing,
}

/// Sampling, threads, seed and rounds: the flags `run` and `ab` share.
#[derive(Debug, Args, Clone, Default)]
pub struct Timing {
    /// Samples per case (`ab`: sample pairs per case and round) [default: 100].
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
    /// Worker threads [default: every logical CPU]; a list such as 1,2,4,8
    /// sweeps them: every CPU case runs once per count (its `threads`
    /// parameter), with speed-up, parallel efficiency and a scalability fit.
    #[arg(long, short = 'j', value_name = "N[,N...]")]
    pub threads: Option<crate::plan::ThreadCounts>,
    /// Seed for input data, bootstrap and shuffling.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Repeat the whole plan N times, samples pooled per case (`ab`: each
    /// round a fresh pair of worker processes; at least 12 by default,
    /// sharing the profile's rounds' time).
    #[arg(long, value_name = "N")]
    pub rounds: Option<u32>,
    /// Hold N copies of each CPU case in memory of their own and take its
    /// samples from the copies in turn, so the median averages over where
    /// its buffers land in memory (a case that copies its buffers: up to
    /// 256 MiB per iteration, the copies within a quarter of free memory;
    /// another is prepared again: up to 32 MiB, prepared in 50 ms)
    /// [default: 1; configs/ci.toml: 4].
    #[arg(long, value_name = "N")]
    pub placements: Option<usize>,
}

impl Timing {
    /// The sampling flags as settings to layer over a config's (the other
    /// harness settings stay unset).
    pub fn settings(&self) -> crate::config::PartialSettings {
        crate::config::PartialSettings {
            sample_size: self.sample_size,
            warm_up_time: self.warm_up_time,
            measurement_time: self.measurement_time,
            max_time: self.max_time,
            seed: self.seed,
            placements: self.placements,
            ..Default::default()
        }
    }

    /// The command-line words that give another process the same timing
    /// (what `ab` passes its workers).
    pub fn to_args(&self) -> Vec<String> {
        let flags: [(&str, Option<String>); 8] = [
            ("--sample-size", self.sample_size.map(|v| v.to_string())),
            ("--warm-up-time", self.warm_up_time.map(|v| v.to_string())),
            ("--measurement-time", self.measurement_time.map(|v| v.to_string())),
            ("--max-time", self.max_time.map(|v| v.to_string())),
            ("--rounds", self.rounds.map(|v| v.to_string())),
            ("--threads", self.threads.as_ref().map(|v| v.to_string())),
            ("--seed", self.seed.map(|v| v.to_string())),
            ("--placements", self.placements.map(|v| v.to_string())),
        ];
        flags.into_iter().filter_map(|(f, v)| v.map(|v| [f.to_string(), v])).flatten().collect()
    }
}

/// `tfbench ab-worker`.
#[derive(Debug, Args)]
pub struct AbWorkerArgs {
    /// The plan, as `ab` passes it on.
    #[command(flatten)]
    pub plan: WorkerPlan,
}

/// Output format of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompareFormat {
    /// Table sorted by change (colours on a terminal unless NO_COLOR).
    Table,
    /// Markdown for a pull request.
    Markdown,
    /// JSON.
    Json,
}

/// `tfbench baseline`.
#[derive(Debug, Args)]
pub struct BaselineArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: BaselineAction,
    /// Baseline store.
    #[command(flatten)]
    pub dir: BaselineDir,
}

/// `tfbench baseline` actions.
#[derive(Debug, Subcommand)]
pub enum BaselineAction {
    /// Name, date, machine and case count of every saved baseline.
    List,
    /// A baseline's provenance and its results table.
    Show {
        /// Baseline name.
        name: String,
    },
    /// Remove a saved baseline.
    Delete {
        /// Baseline name.
        name: String,
    },
}
