//! The commands behind the CLI: `list`, `run`, `sysinfo`. Each returns what to
//! print and how to exit; `main` only maps errors to exit codes.

use crate::cli::{ListArgs, ListFormat, RunArgs, Selection, SysinfoArgs};
use crate::config::{self, CliOverrides, PartialSettings, Resolved};
use crate::env::Environment;
use crate::harness::{runner, timer};
use crate::plan::{self, Filter};
use crate::probe::{self, MachineLimits};
use crate::progress::{Progress, Verbosity};
use crate::report::{self, Format};
use crate::results::{HarnessInfo, RunReport, SCHEMA_VERSION};
use anyhow::{Context, Result, bail};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Exit status of a command that ran to the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything worked (exit 0).
    Success,
    /// One or more cases failed; results were still written (exit 3).
    CaseFailures,
}

impl Outcome {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::CaseFailures => 3,
        }
    }
}

/// Exit code for usage, config and input errors.
pub const EXIT_USAGE: u8 = 2;

fn resolve(sel: &Selection, harness: PartialSettings, run: Option<&RunArgs>) -> Result<Resolved> {
    let loaded = sel.config.as_deref().map(config::load).transpose()?;
    let cli = CliOverrides {
        suites: sel.suites.clone(),
        filter: Filter { pattern: sel.filter.clone(), exact: sel.exact, skip: sel.skip.clone() },
        harness,
        quick: sel.quick,
        threads: run.and_then(|r| r.threads),
        rounds: run.and_then(|r| r.rounds),
        shuffle: run.is_some_and(|r| r.shuffle),
        shard: None,
    };
    config::resolve(loaded.as_ref(), &cli)
}

#[derive(Serialize)]
struct ListedCase {
    id: String,
    params: std::collections::BTreeMap<String, plan::ParamValue>,
}

#[derive(Serialize)]
struct ListedBenchmark {
    name: String,
    description: String,
    cases: Vec<ListedCase>,
}

#[derive(Serialize)]
struct ListedSuite {
    name: String,
    description: String,
    benchmarks: Vec<ListedBenchmark>,
}

/// `tfbench list`: suites, benchmarks and the cases a run would expand to.
pub fn list(args: &ListArgs) -> Result<String> {
    let plan = resolve(&args.selection, PartialSettings::default(), None)?;
    let mut suites = Vec::new();
    for s in &plan.suites {
        let spec = &plan.specs[s.name()];
        let benchmarks = spec
            .benchmarks
            .iter()
            .map(|b| ListedBenchmark {
                name: b.name.clone(),
                description: b.description.clone(),
                cases: plan
                    .cases
                    .iter()
                    .filter(|c| c.suite == s.name() && c.benchmark == b.name)
                    .map(|c| ListedCase { id: c.id.clone(), params: c.params.clone() })
                    .collect(),
            })
            .filter(|b| !b.cases.is_empty())
            .collect();
        suites.push(ListedSuite { name: s.name().into(), description: s.describe().into(), benchmarks });
    }
    match args.format {
        ListFormat::Json => Ok(serde_json::to_string_pretty(
            &serde_json::json!({ "suites": suites, "cases": plan.cases.len() }),
        )? + "\n"),
        ListFormat::Table => {
            // Plain indented text: descriptions are prose and wrap; ids stay
            // one per line so `tfbench list | grep` works.
            let mut out = String::new();
            for s in &suites {
                let n: usize = s.benchmarks.iter().map(|b| b.cases.len()).sum();
                out.push_str(&format!(
                    "{} ({n} cases): {}
",
                    s.name, s.description
                ));
                for b in &s.benchmarks {
                    out.push_str(&format!("\n  {} ({} cases)\n", b.name, b.cases.len()));
                    for line in wrap(&b.description, 92) {
                        out.push_str(&format!("      {line}\n"));
                    }
                    for c in &b.cases {
                        out.push_str(&format!("    {}\n", c.id));
                    }
                }
                out.push('\n');
            }
            out.push_str(&format!("{} case(s) in {} suite(s)\n", plan.cases.len(), suites.len()));
            Ok(out)
        }
    }
}

/// Greedy word wrap at `width` columns.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn format_from_extension(path: &Path) -> Option<Format> {
    match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
        "json" => Some(Format::Json),
        "jsonl" | "ndjson" => Some(Format::Jsonl),
        "csv" => Some(Format::Csv),
        "md" | "markdown" => Some(Format::Markdown),
        "txt" | "bench" => Some(Format::Bencher),
        _ => None,
    }
}

/// Machine limits for this run: the cached probe, else a fresh one (unless
/// disabled), saved for later runs.
fn machine_limits(no_probe: bool, threads: usize, quiet: bool) -> Option<MachineLimits> {
    if let Some(l) = probe::load_for_this_machine() {
        return Some(l);
    }
    if no_probe {
        return None;
    }
    if !quiet {
        eprintln!(
            "measuring this machine's peak FLOP/s and bandwidth (once per machine; --no-probe skips) ..."
        );
    }
    match probe::measure(threads) {
        Ok(l) => {
            if let Err(e) = probe::save(&l) {
                eprintln!("warning: could not cache the probe: {e:#}");
            }
            Some(l)
        }
        Err(e) => {
            eprintln!("warning: probe failed, results will not show % of peak: {e:#}");
            None
        }
    }
}

/// `tfbench run`: runs the plan and prints/writes the report.
pub fn run(args: &RunArgs) -> Result<Outcome> {
    let started = Instant::now();
    let harness = PartialSettings {
        sample_size: args.sample_size,
        warm_up_time: args.warm_up_time,
        measurement_time: args.measurement_time,
        max_time: args.max_time,
        target_precision: args.target_precision,
        confidence_level: args.confidence_level,
        bootstrap_resamples: args.bootstrap_resamples,
        seed: args.seed,
        outliers: args.outliers,
    };
    let plan = resolve(&args.selection, harness, Some(args))?;
    if plan.cases.is_empty() {
        bail!("no case matches the selection; `tfbench list` shows the case ids");
    }
    // Decide every output before running, so a bad path fails in a second,
    // not after the whole run.
    let (stdout_format, file_output): (Format, Option<(PathBuf, Format)>) = match &args.output {
        Some(path) => {
            check_writable(path)?;
            let f = args.format.or_else(|| format_from_extension(path)).unwrap_or(Format::Json);
            (Format::Table, Some((path.clone(), f)))
        }
        None => (args.format.unwrap_or(Format::Table), None),
    };
    rayon::ThreadPoolBuilder::new()
        .num_threads(plan.threads)
        .build_global()
        .context("cannot build the worker thread pool")?;

    let verbosity = if args.quiet {
        Verbosity::Quiet
    } else if args.verbose {
        Verbosity::Verbose
    } else {
        Verbosity::Normal
    };
    let quiet = verbosity == Verbosity::Quiet;
    let environment = Environment::gather();
    let limits = machine_limits(args.no_probe, plan.threads, quiet);
    let clock = timer::calibrate();
    let started_at = probe::now_rfc3339();
    let mut report = RunReport {
        schema_version: SCHEMA_VERSION,
        tfbench_version: env!("CARGO_PKG_VERSION").to_string(),
        started_at,
        wall_time_secs: 0.0,
        environment,
        harness: HarnessInfo {
            timer_resolution_ns: clock.resolution_ns,
            timer_overhead_ns: clock.overhead_ns,
            empty_loop_ns_per_iter: clock.empty_loop_ns_per_iter,
            min_sample_ns: clock.min_sample_ns(),
            threads: plan.threads,
            settings: plan.settings.clone(),
        },
        machine_limits: limits.clone(),
        cases: Vec::new(),
        targets: Vec::new(),
    };
    if verbosity == Verbosity::Verbose {
        eprintln!(
            "timer: resolution {:.0} ns, read {:.1} ns, empty loop {:.2} ns/iter; {} thread(s)",
            clock.resolution_ns, clock.overhead_ns, clock.empty_loop_ns_per_iter, plan.threads
        );
        for (suite, s) in &plan.settings {
            eprintln!("settings for {suite}: {}", serde_json::to_string(s).unwrap_or_default());
        }
    }
    let stream = stdout_format == Format::Jsonl;
    if stream {
        println!("{}", report::jsonl::run_line(&report)?);
    }
    let mut progress = Progress::new(verbosity, stream);
    report.cases = runner::execute(&plan, &clock, limits.as_ref(), &mut progress);
    progress.finish();
    let specs: Vec<_> = plan.suites.iter().flat_map(|s| s.targets()).collect();
    report.targets = crate::analysis::evaluate_targets(&specs, &report.cases, limits.as_ref());
    report.wall_time_secs = started.elapsed().as_secs_f64();

    if let Some((path, format)) = &file_output {
        let text = report::render(*format, &report)?;
        crate::util::write_atomic(path, text.as_bytes())?;
    }
    let text = if stream {
        report::jsonl::summary_line(&report)? + "\n"
    } else {
        report::render(stdout_format, &report)?
    };
    print_stdout(&text)?;
    if !quiet {
        if limits.is_none() {
            eprintln!(
                "note: no machine probe: % of peak, roofline and targets are not shown (tfbench sysinfo --probe)"
            );
        }
        eprintln!(
            "{} case(s), {} failed, wall time {:.1} s{}",
            report.cases.len(),
            report.failed_count(),
            report.wall_time_secs,
            file_output
                .as_ref()
                .map(|(p, _)| format!("; results written to {}", p.display()))
                .unwrap_or_default()
        );
    }
    Ok(if report.failed_count() > 0 { Outcome::CaseFailures } else { Outcome::Success })
}

fn check_writable(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        bail!("cannot write --output {}: folder {} does not exist", path.display(), dir.display());
    }
    if path.is_dir() {
        bail!("cannot write --output {}: it is a folder", path.display());
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

/// `tfbench sysinfo`: the machine, and with `--probe` its measured limits.
pub fn sysinfo(args: &SysinfoArgs) -> Result<String> {
    let env = Environment::gather();
    let limits = if args.probe {
        let threads = args.threads.unwrap_or_else(config::default_threads);
        if threads == 0 {
            bail!("--threads must be at least 1");
        }
        eprintln!("probing peak FMA throughput and memory bandwidth on {threads} thread(s) ...");
        let l = probe::measure(threads)?;
        let path = probe::save(&l)?;
        eprintln!("cached in {}", path.display());
        Some(l)
    } else {
        probe::load(&env.fingerprint())?
    };
    match args.format {
        ListFormat::Json => Ok(serde_json::to_string_pretty(&serde_json::json!({
            "environment": env,
            "fingerprint": env.fingerprint(),
            "machine_limits": limits,
        }))? + "\n"),
        ListFormat::Table => Ok(crate::env::render_table(&env, limits.as_ref()) + "\n"),
    }
}
