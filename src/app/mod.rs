//! The commands behind the CLI, one file each. Every command returns what to
//! print and how to exit; `main` only maps errors to exit codes.

use crate::cli::{RunArgs, Selection};
use crate::config::{self, CliOverrides, PartialSettings, Resolved};
use crate::plan::Filter;
use anyhow::{Context, Result, bail};
use std::io::Write;
use std::path::Path;

mod ab;
mod baseline;
pub mod bench_target;
mod compare;
mod completions;
mod count;
mod history;
mod list;
mod load;
mod merge;
mod report;
mod run;
mod serve;
pub mod suggest;
mod sysinfo;
mod sysinfo_table;

pub use ab::{ab, ab_worker};
pub use baseline::baseline;
pub use compare::compare;
pub use completions::{completions, man};
pub use count::count_worker;
pub use history::history;
pub use list::list;
pub use load::load;
pub use merge::merge;
pub use report::report;
pub use run::{plan_in, run, run_in};
pub use serve::serve;
pub use sysinfo::sysinfo;

/// Exit status of a command that ran to the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything worked (exit 0).
    Success,
    /// A comparison found a regression beyond the limits with
    /// `--fail-on-regression` (exit 1).
    Regression,
    /// One or more cases failed; results were still written (exit 3).
    CaseFailures,
    /// `--fail-on-regression` on a comparison with nothing to judge (exit 1).
    VacuousGate,
    /// `--fail-on-regression` on a comparison that could not judge enough
    /// of its cases, or a required one (exit 4).
    Unjudged,
}

impl Outcome {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Regression | Self::VacuousGate => 1,
            Self::CaseFailures => 3,
            Self::Unjudged => 4,
        }
    }
}

/// Exit code for usage, config and input errors.
pub const EXIT_USAGE: u8 = 2;

/// What every command checks before it runs, so nothing runs on a mistake:
/// `TFBENCH_ALLOCATOR` names an allocator, `TFBENCH_MAX_ISA` a cap (a
/// mistyped cap must not silently run, and record, kernels the user meant
/// to exclude), and `--data-dir`, when given, exists (it is then used).
pub fn check_process(data_dir: Option<&Path>) -> Result<()> {
    if let Some(bad) = crate::alloc::unknown_backend_request() {
        bail!(
            "TFBENCH_ALLOCATOR={bad:?} names no allocator; valid choices: {}",
            crate::alloc::Backend::NAMES.join(", ")
        );
    }
    crate::isa::env_cap().map_err(anyhow::Error::msg)?;
    if let Some(dir) = data_dir {
        crate::data::set_flag_dir(dir).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// Loads the config file (if any) and layers it with the command line.
fn resolve(
    sel: &Selection,
    harness: PartialSettings,
    run: Option<&RunArgs>,
) -> Result<(Resolved, Option<config::LoadedConfig>)> {
    resolve_in(crate::suites::registry(), sel, harness, run)
}

/// [`resolve`] over the suites of `registry` (a `cargo bench` target's).
fn resolve_in(
    registry: &[&'static dyn crate::suites::Suite],
    sel: &Selection,
    harness: PartialSettings,
    run: Option<&RunArgs>,
) -> Result<(Resolved, Option<config::LoadedConfig>)> {
    let loaded = sel.config.as_deref().map(config::load).transpose()?;
    // The model file is checked here, before anything runs or is written:
    // a bad file is a usage error (exit 2) naming the cause.
    let model = run.and_then(|r| r.model.as_deref());
    let mut model_name = None;
    if let Some(p) = model {
        model_name = Some(model_name_of(p)?);
    }
    let tests = run.map(|r| &r.model_tests);
    let mut harness = harness;
    // llama-bench's -r: the model's repetitions are the harness's samples.
    harness.sample_size = harness.sample_size.or(tests.and_then(|t| t.repetitions).map(|r| r as usize));
    let cli = CliOverrides {
        model: model.map(|p| p.to_string_lossy().into_owned()),
        model_name,

        suites: sel.suites.clone(),
        filter: Filter { pattern: sel.filter.clone(), exact: sel.exact, skip: sel.skip.clone() },
        harness,
        quick: sel.quick,
        threads: run.and_then(|r| r.timing.threads.as_ref()).map(crate::plan::ThreadCounts::max),
        thread_sweep: run
            .and_then(|r| r.timing.threads.as_ref())
            .map(crate::plan::ThreadCounts::sweep)
            .unwrap_or_default(),
        rounds: run.and_then(|r| r.timing.rounds),
        shuffle: run.is_some_and(|r| r.shuffle),
        shard: run.and_then(|r| r.shard),
        devices: crate::backend::parse_list(&sel.devices)?,
    };
    let model_tests = config::ModelFileTests {
        tests: tests.map(|t| t.test_list()).unwrap_or_default(),
        depths: tests.map(|t| t.n_depth.clone()).unwrap_or_default(),
        flag: tests.and_then(|t| t.first_flag()),
    };
    let resolved = config::resolve_model(registry, loaded.as_ref(), &cli, &model_tests)?;
    Ok((resolved, loaded))
}

/// The name of the model in file `p` (`--model`), opened and checked here.
#[cfg(feature = "models")]
fn model_name_of(p: &Path) -> Result<String> {
    let (_, info) = crate::model::open(p).map_err(|e| anyhow::anyhow!("--model: {e:#}"))?;
    Ok(info.cfg.name)
}

/// Without the model runtime in the build, `--model` is a usage error.
#[cfg(not(feature = "models"))]
fn model_name_of(p: &Path) -> Result<String> {
    bail!("--model {}: this tfbench was built without the `models` feature (the model runtime)", p.display())
}

/// Fails early when `path`, given with the command-line flag `flag` (e.g.
/// `--html`), cannot be written (missing folder, a folder); the message
/// names the flag the user typed.
fn check_writable(path: &Path, flag: &str) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        bail!("cannot write {flag} {}: folder {} does not exist", path.display(), dir.display());
    }
    if path.is_dir() {
        bail!("cannot write {flag} {}: it is a folder", path.display());
    }
    Ok(())
}

/// Prints to stdout; a closed pipe (`tfbench ... | head`) is not an error.
pub fn print_stdout(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout"),
    }
}

/// Whether stdout should get colours: a terminal, and `NO_COLOR` unset.
fn stdout_color() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The baseline store folder: `--baseline-dir`, else the config's
/// `baseline_dir`, else `./baselines`.
fn baseline_dir(cli: Option<&Path>, config: Option<&config::LoadedConfig>) -> std::path::PathBuf {
    cli.map(Path::to_path_buf)
        .or_else(|| config.and_then(|c| c.config.run.baseline_dir.clone()).map(Into::into))
        .unwrap_or_else(|| "baselines".into())
}

/// The history folder: `--history-dir`, else the config's, else
/// `<baseline dir>/history`.
fn history_dir(
    cli: Option<&Path>,
    config: Option<&config::LoadedConfig>,
    baselines: &Path,
) -> std::path::PathBuf {
    cli.map(Path::to_path_buf)
        .or_else(|| config.and_then(|c| c.config.run.history_dir.clone()).map(Into::into))
        .unwrap_or_else(|| baselines.join("history"))
}

/// Comparison options from the gate flags (percentages become fractions).
fn compare_options(
    g: &crate::cli::GateArgs,
    confidence_level: f64,
    seed: u64,
) -> Result<crate::compare::CompareOptions> {
    let opts = crate::compare::CompareOptions {
        alpha: g.alpha,
        case_alpha: g.case_alpha,
        noise_k: g.noise_k,
        normalize: g.normalize,
        noise_threshold: g.noise_threshold / 100.0,
        max_regression: g.max_regression / 100.0,
        max_memory_regression: g.max_memory_regression / 100.0,
        count_band: g.count_band / 100.0,
        confidence_level,
        seed,
        ..Default::default()
    };
    opts.validate()?;
    Ok(opts)
}

/// A stored result set named on the command line: an existing file (results
/// or baseline JSON), else a baseline name in `store`. Returns a label too.
fn load_result_set(
    store: &crate::baseline::Store,
    spec: &str,
) -> Result<(String, crate::results::RunReport)> {
    let path = Path::new(spec);
    if path.is_file() {
        return Ok((spec.to_string(), crate::baseline::load_results(path)?));
    }
    if spec.ends_with(".json") || spec.contains(std::path::MAIN_SEPARATOR) {
        bail!("results file {spec} does not exist");
    }
    Ok((spec.to_string(), store.load(spec)?.report))
}

/// Every run of a stored result set named on the command line (a baseline
/// may hold several), each checked strictly (see
/// [`crate::compare::input::validate`]) and checked to be one build on one
/// machine. Returns a label too.
fn load_run_set(
    store: &crate::baseline::Store,
    spec: &str,
) -> Result<(String, Vec<crate::results::RunReport>)> {
    let path = Path::new(spec);
    let runs = if path.is_file() {
        crate::baseline::load_runs(path)?
    } else if spec.ends_with(".json") || spec.contains(std::path::MAIN_SEPARATOR) {
        bail!("results file {spec} does not exist");
    } else {
        let runs = store.load(spec)?.runs();
        crate::baseline::check_same_build_and_machine(&format!("baseline `{spec}`"), &runs)?;
        runs
    };
    for (i, r) in runs.iter().enumerate() {
        let source = if runs.len() > 1 { format!("{spec} (run {})", i + 1) } else { spec.to_string() };
        crate::compare::input::validate(&source, r)?;
    }
    Ok((spec.to_string(), runs))
}

/// Learned run-to-run spreads of the machine that ran `runs`, from the
/// history in `dir` (empty when there is none).
fn spreads_for(dir: &Path, runs: &[crate::results::RunReport]) -> crate::compare::Spreads {
    let Some(r) = runs.last() else { return Default::default() };
    match crate::history::HistoryStore::new(dir).load(&r.environment.fingerprint()) {
        Ok(h) => crate::history::learned_spreads(&h.entries),
        Err(e) => {
            eprintln!("warning: history in {} not used for noise bands: {e:#}", dir.display());
            Default::default()
        }
    }
}

/// Prints a comparison in `format`, also writes it to `output` (Markdown for
/// `.md`, JSON for `.json`, else the same format without colours), and
/// returns the gate's outcome: what `compare` and `ab` end with.
fn emit_comparison(
    c: &crate::compare::Comparison,
    format: crate::cli::CompareFormat,
    output: Option<&Path>,
    gate: &crate::cli::GateArgs,
) -> Result<Outcome> {
    use crate::cli::CompareFormat;
    use crate::compare::{render_json, render_markdown, render_table};
    let text = match format {
        CompareFormat::Table => render_table(c, stdout_color()),
        CompareFormat::Markdown => render_markdown(c),
        CompareFormat::Json => render_json(c)?,
    };
    if let Some(p) = output {
        let file_text = match p.extension().and_then(|e| e.to_str()) {
            Some("md") => render_markdown(c),
            Some("json") => render_json(c)?,
            _ if format == CompareFormat::Table => render_table(c, false),
            _ => text.clone(),
        };
        crate::util::write_atomic(p, file_text.as_bytes())?;
    }
    print_stdout(&text)?;
    Ok(gate_outcome(c, gate))
}

/// The gate's policy from the command line (see [`crate::compare::gate`]).
pub(crate) fn gate_policy(g: &crate::cli::GateArgs) -> crate::compare::gate::GatePolicy {
    crate::compare::gate::GatePolicy {
        max_unjudged: g.max_unjudged / 100.0,
        required: g.require.clone(),
        allow_inconclusive: g.allow_inconclusive,
        allow_vacuous: g.allow_vacuous,
    }
}

/// The exit status of a comparison's gate ([`crate::compare::gate::judge`]):
/// every reason it fails goes to stderr, a line each, the first deciding
/// the status.
fn gate_outcome(c: &crate::compare::Comparison, g: &crate::cli::GateArgs) -> Outcome {
    use crate::compare::gate::{GateFailure, judge};
    if !g.fail_on_regression {
        return Outcome::Success;
    }
    let failures = judge(c, &gate_policy(g));
    for f in &failures {
        match f {
            GateFailure::Failed(lines) => {
                eprintln!(
                    "error: the regression gate failed: {} case(s) failed on the candidate's side:",
                    lines.len()
                );
                lines.iter().for_each(|l| eprintln!("  {l}"));
            }
            GateFailure::Regressed(lines) => {
                eprintln!(
                    "error: the regression gate failed: {} case(s) regressed beyond the limits:",
                    lines.len()
                );
                lines.iter().for_each(|l| eprintln!("  {l}"));
            }
            GateFailure::Vacuous(why) => {
                eprintln!(
                    "error: the regression gate has nothing to judge: {why} (--allow-vacuous passes it)"
                )
            }
            GateFailure::Unjudged(why) => eprintln!(
                "error: the regression gate {why}\n  (--allow-inconclusive passes it; `tfbench ab` judges two builds on one busy machine where stored results cannot)"
            ),
        }
    }
    match failures.first() {
        None => Outcome::Success,
        Some(GateFailure::Failed(_)) => Outcome::CaseFailures,
        Some(GateFailure::Regressed(_)) => Outcome::Regression,
        Some(GateFailure::Vacuous(_)) => Outcome::VacuousGate,
        Some(GateFailure::Unjudged(_)) => Outcome::Unjudged,
    }
}

/// Refuses (`strict`) or warns loudly about results from another machine.
fn check_machine(c: &crate::compare::Comparison, strict: bool) -> Result<()> {
    if let Some(m) = &c.machine_mismatch {
        if strict {
            bail!("refusing to compare results from different machines (--strict-machine): {m}");
        }
        eprintln!("WARNING: comparing results from different machines: {m}");
    }
    Ok(())
}
