//! Command-line arguments (clap derive). Parsing only: no I/O here.

use crate::config::OutlierPolicy;
use crate::report::Format;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

mod compare;
pub mod load;
pub mod model;

pub use compare::{
    AbArgs, AbWorkerArgs, BaselineAction, BaselineArgs, BaselineDir, CompareArgs, CompareFormat, GateArgs,
    Timing, WorkerPlan,
};

/// Benchmark runner for the work of a transformer stack.
#[derive(Debug, Parser)]
#[command(name = "tfbench", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Folder of the real input files (MiniLM weights, vocabularies, the corpus, OpenBLAS)
    /// [default: TFBENCH_DATA_DIR, else data/ beside the executable, the XDG data directory, .data/].
    #[arg(long, value_name = "DIR", global = true)]
    pub data_dir: Option<PathBuf>,
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
    /// Compare two stored result sets (baselines or results files) without running.
    Compare(CompareArgs),
    /// List, show or delete saved baselines.
    Baseline(BaselineArgs),
    /// Show each case's trend over the recorded runs of this machine.
    History(HistoryArgs),
    /// Write a self-contained HTML report of results files or baselines.
    Report(ReportArgs),
    /// Join the results of shards (`run --shard I/N`) into one results file.
    Merge(MergeArgs),
    /// Serve a live dashboard: the report of the stored baselines and history, updated as runs
    /// stream their progress to it.
    Serve(ServeArgs),
    /// Paired A/B run: two tfbench builds run the same plan alternately on this machine, judged on
    /// the paired ratios (drift cancels).
    Ab(Box<AbArgs>),
    /// The measuring side of `tfbench ab` (driven over stdin/stdout; not for people).
    #[command(hide = true)]
    AbWorker(Box<AbWorkerArgs>),
    /// Serving under load: LoadGen's scenarios (single-stream, multi-stream, server with a peak-QPS
    /// search, offline) against tfbench's continuous-batching engine or an OpenAI-compatible server.
    Load(Box<load::LoadArgs>),
    /// The counted side of `run --measure instructions`: one case under callgrind (not for people).
    #[command(hide = true)]
    CountWorker(Box<CountWorkerArgs>),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish).
    Completions(CompletionsArgs),
    /// Print the man page (roff), or write one page per subcommand with --dir.
    Man(ManArgs),
}

/// `tfbench count-worker`: what `run --measure instructions` runs under
/// Valgrind for one case.
#[derive(Debug, Args)]
pub struct CountWorkerArgs {
    /// The plan, as `run` passes it on.
    #[command(flatten)]
    pub plan: WorkerPlan,
    /// The case to count.
    #[arg(long, value_name = "ID")]
    pub case: String,
    /// Iterations counted.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub iterations: u64,
    /// Steps of the instruction-burning test hook per iteration (0: none).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub burn_steps: u64,
    /// Where to write what the worker found (JSON).
    #[arg(long, value_name = "FILE")]
    pub report: PathBuf,
}

/// `tfbench completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// `tfbench man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write tfbench.1 and a tfbench-SUBCOMMAND.1 page per subcommand into DIR instead of printing
    /// tfbench.1 to stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `tfbench history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Regex over case ids.
    #[arg(value_name = "FILTER")]
    pub filter: Option<String>,
    /// History store [default: <baseline dir>/history].
    #[arg(long, value_name = "DIR")]
    pub history_dir: Option<PathBuf>,
    /// Machine fingerprint whose history to show [default: this machine].
    #[arg(long, value_name = "FINGERPRINT")]
    pub machine: Option<String>,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

/// `tfbench report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Results JSON files (from `run --output`) or saved baseline names.
    #[arg(value_name = "RESULTS", required = true)]
    pub results: Vec<String>,
    /// Write the HTML report to FILE.
    #[arg(long, value_name = "FILE", required_unless_present = "markdown")]
    pub html: Option<PathBuf>,
    /// Write a Markdown report to FILE: the machines compared when the results come from several
    /// machines or carry prices, else the cases table.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// A machine's price per hour with its currency, LABEL=PRICE (LABEL: a RESULTS argument or its
    /// file name; 0.42USD), repeated per machine; a results file may also carry `"price_per_hour"`.
    #[arg(long, value_name = "LABEL=PRICE")]
    pub price_per_hour: Vec<String>,
    /// Also compare against this baseline (name or file), by `compare`'s rules: the candidate is
    /// the newest of the RESULTS (by recorded start) other than the baseline itself.
    #[arg(long, short = 'b', value_name = "NAME|FILE")]
    pub baseline: Option<String>,
    /// Baseline store.
    #[command(flatten)]
    pub dir: BaselineDir,
    /// History store for trend charts [default: <baseline dir>/history].
    #[arg(long, value_name = "DIR")]
    pub history_dir: Option<PathBuf>,
    /// Page title.
    #[arg(long, default_value = "tfbench report")]
    pub title: String,
}

/// `tfbench serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TCP port (0: any free port; the address is printed).
    #[arg(long, value_name = "PORT", default_value_t = crate::live::DEFAULT_PORT)]
    pub port: u16,
    /// Address to listen on; anything but loopback exposes the dashboard to
    /// the network (a warning says so).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub bind: String,
    /// Baseline store.
    #[command(flatten)]
    pub dir: BaselineDir,
    /// History store [default: <baseline dir>/history].
    #[arg(long, value_name = "DIR")]
    pub history_dir: Option<PathBuf>,
    /// Page title.
    #[arg(long, default_value = "tfbench dashboard")]
    pub title: String,
}

/// `tfbench merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Results JSON files of the shards.
    #[arg(value_name = "RESULTS", required = true, num_args = 1..)]
    pub inputs: Vec<PathBuf>,
    /// Where to write the merged results (JSON, atomically).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
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
    /// Device(s) to run on: cpu, cuda, cuda:N, wasm (= wasm:wasmi),
    /// wasm:wasmi, wasm:node, wasm:wasmtime, webgpu (= webgpu:0), webgpu:N
    /// (repeatable or comma-separated)
    /// [default: cpu]. Benchmarks that do not run on a
    /// chosen device are left out; a device this build or machine lacks is
    /// listed and its cases skipped with the reason.
    #[arg(long = "device", value_name = "DEVICE")]
    pub devices: Vec<String>,
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
    /// Sampling, threads, seed and rounds.
    #[command(flatten)]
    pub timing: Timing,
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
    /// Run cases in a seeded random order in each round.
    #[arg(long)]
    pub shuffle: bool,
    /// A GGUF file or Hugging Face directory for the inference suite: only
    /// its `gguf` benchmark runs, on this model (checked before anything runs).
    #[arg(long, value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// The model's tests, depths and repetitions (llama-bench's flags).
    #[command(flatten)]
    pub model_tests: model::LlamaBenchFlags,
    /// Output format on stdout (or in --output).
    #[arg(long, short = 'f', value_enum)]
    pub format: Option<Format>,
    /// Also write results to FILE (format from --format, else the extension,
    /// else JSON); stdout then shows the table.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Run only the I-th of N deterministic slices of the plan (e.g. 2/4).
    #[arg(long, value_name = "I/N")]
    pub shard: Option<crate::config::Shard>,
    /// Save this run's full results as baseline NAME.
    #[arg(long, value_name = "NAME")]
    pub save_baseline: Option<String>,
    /// With --save-baseline: add this run to the baseline's runs instead of
    /// replacing them (same build and machine), so comparisons measure the
    /// baseline's run-to-run noise.
    #[arg(long, requires = "save_baseline")]
    pub append: bool,
    /// Do not time the machine canaries between cases (they let a comparison
    /// measure how much the machine itself drifted).
    #[arg(long)]
    pub no_canary: bool,
    /// Compare this run with saved baseline NAME (or a results/baseline JSON file).
    #[arg(long, short = 'b', value_name = "NAME|FILE")]
    pub baseline: Option<String>,
    /// Baseline store.
    #[command(flatten)]
    pub dir: BaselineDir,
    /// Thresholds of the comparison with --baseline.
    #[command(flatten)]
    pub gate: GateArgs,
    /// Write the comparison with --baseline to FILE (.json JSON, else Markdown).
    #[arg(long, value_name = "FILE", requires = "baseline")]
    pub comparison_output: Option<PathBuf>,
    /// Append this run to the machine's history (on in configs/ci.toml).
    #[arg(long)]
    pub history: bool,
    /// History store [default: <baseline dir>/history].
    #[arg(long, value_name = "DIR")]
    pub history_dir: Option<PathBuf>,
    /// Do not measure machine limits when no probe is cached.
    #[arg(long)]
    pub no_probe: bool,
    /// Measure the machine's limits now (and cache them) instead of using the
    /// cached probe, so % of peak and targets compare with this moment's
    /// machine (a shared host's figures drift).
    #[arg(long, conflicts_with = "no_probe")]
    pub probe: bool,
    /// No progress output on stderr.
    #[arg(long, short = 'q', conflicts_with = "verbose")]
    pub quiet: bool,
    /// More detail on stderr (settings, verification of each case, whole
    /// skip reasons and notes).
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Stream progress and each finished case to a dashboard (`tfbench
    /// serve`) at URL [default URL: http://127.0.0.1:8080]. Without it, a
    /// run streams to a dashboard of this user listening on port 8080.
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "http://127.0.0.1:8080",
          value_parser = parse_live_url, conflicts_with = "no_live")]
    pub live: Option<String>,
    /// Do not stream to a dashboard, even one listening on port 8080.
    #[arg(long)]
    pub no_live: bool,
    /// The full results table: every reason and note whole in its cell, as wide as its content
    /// (default: fit the terminal or COLUMNS, long reasons and notes shortened, whole in footnotes).
    #[arg(long)]
    pub wide: bool,
    /// What to measure: wall time, or instructions per iteration counted under Valgrind's
    /// callgrind (deterministic; needs `valgrind` on PATH; CPU cases only; 1 thread unless -j).
    #[command(flatten)]
    pub inside: InsideArgs,
}

/// `run`'s look inside the cases (issue 50): instruction counts, profiles.
#[derive(Debug, Args, Clone, Default)]
pub struct InsideArgs {
    /// What each case is measured by: `time` (sampled wall time) or
    /// `instructions` (counted under callgrind; see docs/inside.md).
    #[arg(long, value_enum, value_name = "MEASURE", default_value_t = crate::inside::Measure::Time)]
    pub measure: crate::inside::Measure,
    /// With --measure instructions: iterations of each case counted (after one uncounted
    /// warm-up call) [default: 1, or the case's fixed count].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub count_iterations: Option<u64>,
    /// Sample the process while each case is measured and write a flamegraph SVG to FILE and
    /// its folded stacks beside it (FILE.folded; several cases: FILE's stem numbered).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
}

/// `--live URL`: checked as an address, so a FILTER written right after a
/// bare `--live` is not taken for one silently.
fn parse_live_url(text: &str) -> Result<String, String> {
    crate::live::Endpoint::parse(text).map(|_| text.to_string()).map_err(|e| {
        format!(
            "{e}; `--live` takes an optional dashboard address, so put a FILTER before it or write --live=URL"
        )
    })
}

/// `tfbench sysinfo`.
#[derive(Debug, Args)]
pub struct SysinfoArgs {
    /// Measure peak FLOP/s and memory bandwidth now and cache them (and
    /// each CUDA GPU's GEMM peak per dtype, copy bandwidths and launch latency).
    #[arg(long)]
    pub probe: bool,
    /// Worker threads for the all-core figures [default: every logical CPU].
    #[arg(long, short = 'j', value_name = "N")]
    pub threads: Option<usize>,
    /// Print only the quantized kernels' dispatch table: per format and
    /// operation (gemv = decode, gemm = prefill), which implementation runs
    /// at the ISA cap in force (TFBENCH_MAX_ISA) and at each lower level.
    #[arg(long)]
    pub kernels: bool,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

/// The arguments of a `cargo bench` target built on [`crate::bench`]
/// (`cargo bench -- [OPTIONS] [FILTER]`): every option of `tfbench run`,
/// criterion's spellings, and the flags cargo and libtest pass.
#[derive(Debug, Parser)]
#[command(
    name = "cargo bench --",
    about = "A benchmark target on the tfbench harness: every `tfbench run` option applies.",
    long_about = None,
    disable_version_flag = true
)]
pub struct BenchArgs {
    /// The options of `tfbench run`.
    #[command(flatten)]
    pub run: RunArgs,
    /// Measure: `cargo bench` passes it. Without it (`cargo test --benches`,
    /// or the binary run by hand), each benchmark runs once as a test.
    #[arg(long)]
    pub bench: bool,
    /// Run each benchmark once as a test (prepare, verify, one iteration),
    /// even under `cargo bench`.
    #[arg(long)]
    pub test: bool,
    /// List the selected cases (`ID: benchmark`, as libtest lists) and exit.
    #[arg(long, conflicts_with_all = ["test", "profile_time"])]
    pub list: bool,
    /// Run each selected case for about SECS seconds after its check, with no analysis and
    /// nothing written (criterion's option, for a profiler).
    #[arg(long, value_name = "SECS", conflicts_with = "test")]
    pub profile_time: Option<f64>,
    /// criterion's spelling of --format: `criterion` is the table, and
    /// `bencher` and every other --format value are accepted.
    #[arg(long, value_name = "FORMAT", value_parser = parse_output_format, conflicts_with = "format")]
    pub output_format: Option<Format>,
    /// Folder of the real input files, as for `tfbench`.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

/// `--output-format`: criterion's names, then tfbench's formats.
fn parse_output_format(s: &str) -> Result<Format, String> {
    if s.eq_ignore_ascii_case("criterion") {
        return Ok(Format::Table);
    }
    Format::from_str(s, true).map_err(|_| {
        let mut valid = vec!["criterion".to_string()];
        valid.extend(
            Format::value_variants()
                .iter()
                .filter_map(|f| f.to_possible_value())
                .map(|v| v.get_name().to_string()),
        );
        format!("`{s}` is not an output format; valid: {}", valid.join(", "))
    })
}
