//! `tfbench run`: plan, run, report, and optionally save, record and compare.

use super::{
    Outcome, baseline_dir, check_machine, check_writable, compare_options, gate_outcome, history_dir,
    load_run_set, print_stdout, resolve_in, stdout_color,
};
use crate::baseline::Store;
use crate::cli::RunArgs;
use crate::compare;
use crate::config::PartialSettings;
use crate::env::Environment;
use crate::harness::{runner, timer};
use crate::history::HistoryStore;
use crate::probe::{self, MachineLimits};
use crate::progress::{Progress, Verbosity};
use crate::report::{self, Format};
use crate::results::{HarnessInfo, RunReport, SCHEMA_VERSION};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::time::Instant;

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

/// Machine limits for this run: a fresh probe when `fresh`, else the cached
/// one, else a fresh one (unless `no_probe`). A fresh probe is taken again
/// while other work disturbs it (up to [`probe::MAX_TRIES`] tries) and
/// cached only when it was not disturbed; a cached probe that does not
/// record its load (an older tfbench's) is taken again once, and replaced
/// when the new one is clean. An error only for a bad test-hook value.
fn machine_limits(fresh: bool, no_probe: bool, threads: usize, quiet: bool) -> Result<Option<MachineLimits>> {
    let source = super::sysinfo::LoadSource::from_env()?;
    let save = |l: &MachineLimits| {
        if let Err(e) = probe::save(l) {
            eprintln!("warning: could not cache the probe: {e:#}");
        }
    };
    let cached = if fresh { None } else { probe::load_for_this_machine(threads) };
    if let Some(old) = cached {
        if no_probe || !probe::needs_reprobe(&old, source.readable()) {
            return Ok(Some(old));
        }
        if !quiet {
            eprintln!(
                "the cached probe ({}) does not record {} (cached by an older tfbench): probing again once ...",
                old.measured_at,
                if old.levels.is_empty() {
                    "the bandwidth of each cache level"
                } else {
                    "the load it ran under"
                }
            );
        }
        return Ok(Some(match super::sysinfo::take_probe(threads, 1, &source, quiet) {
            Ok(new) if new.limits.cacheable() => {
                save(&new.limits);
                new.limits
            }
            Ok(new) => {
                eprintln!(
                    "warning: the new probe was disturbed ({}); keeping the cached probe, whose load is unknown. \
                     Probe again on a quiet machine: tfbench sysinfo --probe",
                    new.limits.load_brief()
                );
                old
            }
            Err(e) => {
                eprintln!("warning: probing again failed, keeping the cached probe: {e:#}");
                old
            }
        }));
    }
    if no_probe && !fresh {
        return Ok(None);
    }
    if !quiet {
        eprintln!(
            "{}",
            if fresh {
                "measuring this machine's peak FLOP/s and bandwidth now (--probe) ..."
            } else {
                "measuring this machine's peak FLOP/s and bandwidth (once per machine; --no-probe skips) ..."
            }
        );
    }
    match super::sysinfo::take_probe(threads, probe::MAX_TRIES, &source, quiet) {
        Ok(settled) => {
            if settled.limits.cacheable() {
                save(&settled.limits);
            } else {
                eprintln!("{}", super::sysinfo::not_cached_warning(&settled));
            }
            if let Some(w) = probe::busy_warning(&settled.limits) {
                eprintln!("{w}");
            }
            Ok(Some(settled.limits))
        }
        Err(e) => {
            eprintln!("warning: probe failed, results will not show % of peak: {e:#}");
            Ok(None)
        }
    }
}

/// `tfbench run`, as a pipeline: check everything that can be checked
/// before measuring, measure, write what was measured, record it, compare.
pub fn run(args: &RunArgs) -> Result<Outcome> {
    run_in(crate::suites::registry(), args)
}

/// [`run`] over the suites of `registry` instead of tfbench's own: what
/// `cargo bench` runs for a user's bench target ([`crate::bench`]), with the
/// same options, outputs, baselines, history and gate.
pub fn run_in(registry: &[&'static dyn crate::suites::Suite], args: &RunArgs) -> Result<Outcome> {
    let started = Instant::now();
    let ctx = Checked::new(registry, args)?;
    let report = measure(args, &ctx, started)?;
    write_outputs(args, &ctx, &report)?;
    // Everything below only adds to what was already printed and written.
    record(args, &ctx, &report)?;
    let gate = compare_with_reference(args, &ctx, &report)?;
    Ok(if report.failed_count() > 0 { Outcome::CaseFailures } else { gate })
}

/// What a run needs, resolved and validated before anything is measured:
/// a typo in a baseline name or an unwritable path must fail in a second,
/// not after the whole run.
struct Checked {
    plan: crate::config::Resolved,
    loaded: Option<crate::config::LoadedConfig>,
    baselines: PathBuf,
    store: Store,
    history: Option<HistoryStore>,
    reference: Option<((String, Vec<RunReport>), crate::compare::CompareOptions)>,
    stdout_format: Format,
    file_output: Option<(PathBuf, Format)>,
    injection: Option<crate::harness::inject::Injection>,
    /// The instruction-burning test hook (counted runs only).
    instructions: Option<crate::harness::inject::Injection>,
    panics: Option<regex::Regex>,
    verbosity: Verbosity,
    live: Option<crate::live::push::Target>,
}

/// The harness flags of `args` as settings to layer over the config's.
fn harness_flags(args: &RunArgs) -> PartialSettings {
    PartialSettings {
        target_precision: args.target_precision,
        confidence_level: args.confidence_level,
        bootstrap_resamples: args.bootstrap_resamples,
        outliers: args.outliers,
        ..args.timing.settings()
    }
}

/// The plan `args` select from the suites of `registry`, without running
/// it (what `cargo bench -- --list` and the test mode of a bench target
/// walk through).
pub fn plan_in(
    registry: &[&'static dyn crate::suites::Suite],
    args: &RunArgs,
) -> Result<crate::config::Resolved> {
    Ok(super::resolve_in(registry, &args.selection, harness_flags(args), Some(args))?.0)
}

impl Checked {
    fn new(registry: &[&'static dyn crate::suites::Suite], args: &RunArgs) -> Result<Self> {
        let (plan, loaded) = resolve_in(registry, &args.selection, harness_flags(args), Some(args))?;
        if plan.cases.is_empty() {
            if !args.selection.devices.is_empty() {
                bail!(
                    "no case matches the selection on --device {}: no benchmark of the selected suites runs there yet; `tfbench list` shows the case ids",
                    args.selection.devices.join(",")
                );
            }
            bail!("no case matches the selection; `tfbench list` shows the case ids");
        }
        let baselines = baseline_dir(args.dir.baseline_dir.as_deref(), loaded.as_ref());
        let store = Store::new(&baselines);
        if let Some(name) = &args.save_baseline {
            crate::baseline::validate_name(name)?;
            if args.append {
                check_appendable(&store, name)?;
            }
        }
        let injection = crate::harness::inject::from_env()?;
        let instructions = crate::harness::inject::instructions_from_env()?;
        if args.inside.measure == crate::inside::Measure::Instructions {
            super::count::check(args, &plan)?;
        }
        if let Some(p) = &args.inside.profile {
            check_writable(p, "--profile")?;
        }
        let panics = crate::harness::inject::panic_from_env()?;
        let history = (args.history || loaded.as_ref().is_some_and(|c| c.config.run.history == Some(true)))
            .then(|| {
                HistoryStore::new(history_dir(args.history_dir.as_deref(), loaded.as_ref(), &baselines))
            });
        let first_settings = plan.settings.values().next().cloned().unwrap_or_default();
        let reference = match &args.baseline {
            Some(spec) => Some((
                load_run_set(&store, spec)?,
                compare_options(&args.gate, first_settings.confidence_level, first_settings.seed)?,
            )),
            None => None,
        };
        if let Some(((label, runs), _)) = &reference {
            let counted = args.inside.measure == crate::inside::Measure::Instructions;
            if compare::counts::is_counted(runs) != counted {
                bail!(
                    "cannot compare this run with {label}: {} was {}, this run {}; use the same --measure on both",
                    label,
                    if counted { "timed" } else { "counted (--measure instructions)" },
                    if counted { "counts instructions" } else { "is timed" }
                );
            }
            let here = Environment::gather().fingerprint();
            if let Some(old) = runs.last()
                && args.gate.strict_machine
                && old.environment.fingerprint() != here
            {
                bail!(
                    "refusing to compare with {label}: it was measured on another machine ({}, fingerprint {}) and --strict-machine is set",
                    old.environment.cpu_model,
                    old.environment.fingerprint()
                );
            }
        }
        if let Some(p) = &args.comparison_output {
            check_writable(p, "--comparison-output")?;
        }
        let (stdout_format, file_output) = match &args.output {
            Some(path) => {
                check_writable(path, "--output")?;
                let f = args.format.or_else(|| format_from_extension(path)).unwrap_or(Format::Json);
                (Format::Table, Some((path.clone(), f)))
            }
            None => (args.format.unwrap_or(Format::Table), None),
        };
        let live = crate::live::push::Target::choose(args.live.as_deref(), args.no_live)?;
        let verbosity = if args.quiet {
            Verbosity::Quiet
        } else if args.verbose {
            Verbosity::Verbose
        } else {
            Verbosity::Normal
        };
        Ok(Self {
            plan,
            loaded,
            baselines,
            store,
            history,
            reference,
            stdout_format,
            file_output,
            injection,
            instructions,
            panics,
            verbosity,
            live,
        })
    }

    fn quiet(&self) -> bool {
        self.verbosity == Verbosity::Quiet
    }
}

/// Sizes the worker pool, takes the machine's limits and the clock's
/// facts, runs every case (streaming JSON Lines when asked) and evaluates
/// the targets.
fn measure(args: &RunArgs, ctx: &Checked, started: Instant) -> Result<RunReport> {
    let plan = &ctx.plan;
    crate::backend::cpu::configure_run_pool(plan.threads).context("cannot build the worker thread pool")?;
    let mut environment = Environment::gather();
    environment.injected_slowdown = ctx.injection.as_ref().map(|i| i.spec.clone());
    // The devices this plan's cases run on, as their backends record them
    // (CUDA is not touched by a CPU-only plan).
    let devices: Vec<crate::backend::Device> = plan.cases.iter().map(|c| c.device).collect();
    environment.gpus = crate::backend::environment(&devices);
    let counted = args.inside.measure == crate::inside::Measure::Instructions;
    // Counts have no % of peak: a counted run needs no probe.
    let limits =
        if counted { None } else { machine_limits(args.probe, args.no_probe, plan.threads, ctx.quiet())? };
    if counted {
        environment.injected_slowdown = ctx
            .instructions
            .as_ref()
            .map(|i| format!("{}={}", crate::harness::inject::INSTRUCTIONS_VAR, i.spec));
    }
    inside_warnings(ctx, counted);
    let clock = timer::calibrate();
    let started_at = probe::now_rfc3339();
    if let Some(i) = &ctx.injection {
        eprintln!(
            "WARNING: {}={} is set: matching cases do x{} the work (a test hook for the regression detector); these results are NOT real measurements",
            crate::harness::inject::VAR,
            i.spec,
            i.factor
        );
    }
    let run_id = format!("{started_at}-{}-{:08x}", std::process::id(), rand::random::<u32>());
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
        run_id,
        canaries: Vec::new(),
        load: Vec::new(),
    };
    if ctx.verbosity == Verbosity::Verbose {
        eprintln!(
            "timer: resolution {:.0} ns, read {:.1} ns, empty loop {:.2} ns/iter; {} thread(s)",
            clock.resolution_ns, clock.overhead_ns, clock.empty_loop_ns_per_iter, plan.threads
        );
        for (suite, s) in &plan.settings {
            eprintln!("settings for {suite}: {}", serde_json::to_string(s).unwrap_or_default());
        }
    }
    let stream = ctx.stdout_format == Format::Jsonl;
    if stream {
        println!("{}", report::jsonl::run_line(&report)?);
    }
    let mut progress = Progress::new(ctx.verbosity, stream);
    let hooks = runner::RunHooks {
        canaries: !args.no_canary && !counted,
        inject: ctx.injection.as_ref(),
        panics: ctx.panics.as_ref(),
        profile: args.inside.profile.as_deref(),
        counters: true,
    };
    let mut analyse = |o: &runner::CaseOutcome, s: &crate::config::Settings| {
        crate::analysis::analyze(o, s, limits.as_ref())
    };
    let pusher = ctx.live.clone().map(|t| live_start(t, &report, plan, ctx.quiet()));
    let mut execute = |obs: &mut dyn runner::Observer| {
        if counted {
            let cases = super::count::execute(args, plan, obs, ctx.instructions.as_ref());
            runner::Executed { cases, canaries: Vec::new(), load: Vec::new() }
        } else {
            runner::execute_with(plan, &clock, obs, &hooks, &mut analyse)
        }
    };
    let executed = match &pusher {
        Some(p) => {
            let run_id = report.run_id.clone();
            let mut tee = crate::live::push::Streaming { inner: &mut progress, pusher: p, run_id };
            execute(&mut tee)
        }
        None => execute(&mut progress),
    };
    report.cases = executed.cases;
    crate::analysis::scaling::attach(&mut report.cases);
    report.canaries = executed.canaries;
    report.load = executed.load;
    progress.finish();
    let specs: Vec<_> = plan.suites.iter().flat_map(|s| s.targets()).collect();
    report.targets = crate::analysis::evaluate_targets(&specs, &report.cases, limits.as_ref());
    report.wall_time_secs = started.elapsed().as_secs_f64();
    if let Some(p) = pusher {
        p.send(crate::live::Event::RunFinished {
            run_id: report.run_id.clone(),
            wall_time_secs: report.wall_time_secs,
            targets: report.targets.clone(),
        });
        p.finish();
    }
    Ok(report)
}

/// The lines a run with a look inside its cases says once on stderr: the
/// test hooks that do not apply to this measure, and why hardware counters
/// are not read.
fn inside_warnings(ctx: &Checked, counted: bool) {
    use crate::harness::inject;
    if counted && let Some(i) = &ctx.injection {
        eprintln!(
            "warning: {}={} is ignored when counting instructions (use {})",
            inject::VAR,
            i.spec,
            inject::INSTRUCTIONS_VAR
        );
    }
    if !counted && let Some(i) = &ctx.instructions {
        eprintln!(
            "warning: {}={} applies to --measure instructions only; ignored",
            inject::INSTRUCTIONS_VAR,
            i.spec
        );
    }
    if counted && let Some(i) = &ctx.instructions {
        eprintln!(
            "WARNING: {}={} is set: matching cases execute x{} their instructions (a test hook); these counts are NOT real measurements",
            inject::INSTRUCTIONS_VAR,
            i.spec,
            i.factor
        );
    }
    if !counted
        && !ctx.quiet()
        && let Err(why) = crate::inside::counters::availability()
    {
        eprintln!("note: no hardware counters: {why}");
    }
}

/// Starts streaming to a dashboard: the run's skeleton and plan go first,
/// before any case is timed.
fn live_start(
    target: crate::live::push::Target,
    report: &RunReport,
    plan: &crate::config::Resolved,
    quiet: bool,
) -> crate::live::push::Pusher {
    let p = crate::live::push::Pusher::start(target, !quiet);
    p.send(crate::live::Event::RunStarted {
        report: Box::new(report.clone()),
        planned: plan.cases.iter().map(|c| c.id.clone()).collect(),
        rounds: plan.rounds,
    });
    p.drain(crate::live::push::DRAIN_WAIT);
    p
}

/// The results file, stdout in the chosen format, and the end-of-run lines.
fn write_outputs(args: &RunArgs, ctx: &Checked, report: &RunReport) -> Result<()> {
    if let Some((path, format)) = &ctx.file_output {
        let text = report::render(*format, report)?;
        crate::util::write_atomic(path, text.as_bytes())?;
    }
    let text = if ctx.stdout_format == Format::Jsonl {
        report::jsonl::summary_line(report)? + "\n"
    } else if ctx.stdout_format == Format::Table {
        report::table::render_with(report, &report::table::TableView::for_stdout(args.wide))
    } else {
        report::render(ctx.stdout_format, report)?
    };
    print_stdout(&text)?;
    if !ctx.quiet() {
        if report.machine_limits.is_none() {
            eprintln!(
                "note: no machine probe: % of peak, roofline and targets are not shown (tfbench sysinfo --probe)"
            );
        }
        let written = ctx.file_output.as_ref().map(|(p, _)| p.display().to_string());
        let table_on_terminal =
            ctx.stdout_format == Format::Table && std::io::IsTerminal::is_terminal(&std::io::stdout());
        eprint!(
            "{}",
            crate::progress::end_of_run(report, ctx.verbosity, table_on_terminal, written.as_deref())
        );
    }
    Ok(())
}

/// Saves the baseline (or adds the run to it) and appends the history.
fn record(args: &RunArgs, ctx: &Checked, report: &RunReport) -> Result<()> {
    if let Some(name) = &args.save_baseline {
        let path =
            if args.append { ctx.store.append(name, report)? } else { ctx.store.save(name, report)? };
        if !ctx.quiet() {
            let how = if args.append { "run added to baseline" } else { "baseline" };
            eprintln!("{how} `{name}` saved to {}", path.display());
        }
    }
    if let Some(h) = &ctx.history {
        let path = h.append(report)?;
        if !ctx.quiet() {
            eprintln!("run appended to history {}", path.display());
        }
    }
    Ok(())
}

/// Compares the run with `--baseline` (when given), shows and writes the
/// comparison, and returns the gate's outcome.
fn compare_with_reference(args: &RunArgs, ctx: &Checked, report: &RunReport) -> Result<Outcome> {
    let Some(((label, old), opts)) = &ctx.reference else { return Ok(Outcome::Success) };
    let hdir = history_dir(args.history_dir.as_deref(), ctx.loaded.as_ref(), &ctx.baselines);
    let spreads = super::spreads_for(&hdir, std::slice::from_ref(report));
    compare::counts::check(old, std::slice::from_ref(report)).map_err(anyhow::Error::msg)?;
    let c = compare::compare_sets(label, old, "this run", std::slice::from_ref(report), &spreads, opts);
    check_machine(&c, args.gate.strict_machine)?;
    if ctx.stdout_format == Format::Table {
        print_stdout(&format!("\n{}", compare::render_table(&c, stdout_color())))?;
    } else if !ctx.quiet() {
        eprintln!("{}", compare::render_table(&c, false));
    }
    if let Some(p) = &args.comparison_output {
        let text = if p.extension().is_some_and(|e| e == "json") {
            compare::render_json(&c)?
        } else {
            compare::render_markdown(&c)
        };
        crate::util::write_atomic(p, text.as_bytes())?;
    }
    Ok(gate_outcome(&c, &args.gate))
}

/// Before a run that will `--append` to baseline `name`: refuses when the
/// stored runs come from another build or machine, so nothing is run (or
/// written) in vain.
fn check_appendable(store: &Store, name: &str) -> Result<()> {
    let Ok(existing) = store.load(name) else { return Ok(()) };
    let here = Environment::gather();
    let r = &existing.report;
    let (build, this_build) = (
        format!("tfbench {} ({})", r.tfbench_version, r.environment.git_revision),
        format!("tfbench {} ({})", env!("CARGO_PKG_VERSION"), here.git_revision),
    );
    if build != this_build {
        bail!(
            "cannot --append to baseline `{name}`: it holds runs of {build}, this is {this_build}; save under another name or without --append"
        );
    }
    if existing.machine_fingerprint != here.fingerprint() {
        bail!(
            "cannot --append to baseline `{name}`: it was measured on another machine (fingerprint {}, this one {}); save under another name or without --append",
            existing.machine_fingerprint,
            here.fingerprint()
        );
    }
    Ok(())
}
