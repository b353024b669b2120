//! `tfbench run`: plan, run, report, and optionally save, record and compare.

use super::{
    Outcome, baseline_dir, check_machine, check_writable, compare_options, gate_outcome, history_dir,
    load_run_set, print_stdout, resolve, stdout_color,
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
/// one, else a fresh one (unless `no_probe`); fresh probes are saved for
/// later runs.
fn machine_limits(fresh: bool, no_probe: bool, threads: usize, quiet: bool) -> Option<MachineLimits> {
    if !fresh {
        if let Some(l) = probe::load_for_this_machine() {
            return Some(l);
        }
        if no_probe {
            return None;
        }
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
    match probe::measure(threads) {
        Ok(l) => {
            if let Err(e) = probe::save(&l) {
                eprintln!("warning: could not cache the probe: {e:#}");
            }
            if let Some(w) = probe::busy_warning(&l) {
                eprintln!("{w}");
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
    let (plan, loaded) = resolve(&args.selection, harness, Some(args))?;
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
    let panics = crate::harness::inject::panic_from_env()?;
    let history = (args.history || loaded.as_ref().is_some_and(|c| c.config.run.history == Some(true)))
        .then(|| HistoryStore::new(history_dir(args.history_dir.as_deref(), loaded.as_ref(), &baselines)));
    // The reference and the thresholds are checked before running: a typo in
    // a baseline name must not cost a whole run.
    let first_settings = plan.settings.values().next().cloned().unwrap_or_default();
    let reference = match &args.baseline {
        Some(spec) => Some((
            load_run_set(&store, spec)?,
            compare_options(&args.gate, first_settings.confidence_level, first_settings.seed)?,
        )),
        None => None,
    };
    if let Some(((label, runs), _)) = &reference {
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
    // Decide every output before running, so a bad path fails in a second,
    // not after the whole run.
    let (stdout_format, file_output): (Format, Option<(PathBuf, Format)>) = match &args.output {
        Some(path) => {
            check_writable(path, "--output")?;
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
    let mut environment = Environment::gather();
    environment.injected_slowdown = injection.as_ref().map(|i| i.spec.clone());
    let limits = machine_limits(args.probe, args.no_probe, plan.threads, quiet);
    let clock = timer::calibrate();
    let started_at = probe::now_rfc3339();
    if let Some(i) = &injection {
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
    let hooks =
        runner::RunHooks { canaries: !args.no_canary, inject: injection.as_ref(), panics: panics.as_ref() };
    let mut analyse = |o: &runner::CaseOutcome, s: &crate::config::Settings| {
        crate::analysis::analyze(o, s, limits.as_ref())
    };
    let executed = runner::execute_with(&plan, &clock, &mut progress, &hooks, &mut analyse);
    report.cases = executed.cases;
    report.canaries = executed.canaries;
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
    } else if stdout_format == Format::Table {
        report::table::render_with(&report, &report::table::TableView::for_stdout(args.wide))
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
        let written = file_output.as_ref().map(|(p, _)| p.display().to_string());
        let table_on_terminal =
            stdout_format == Format::Table && std::io::IsTerminal::is_terminal(&std::io::stdout());
        eprint!("{}", crate::progress::end_of_run(&report, verbosity, table_on_terminal, written.as_deref()));
    }
    // Everything below only adds to what was already printed and written.
    if let Some(name) = &args.save_baseline {
        let path = if args.append { store.append(name, &report)? } else { store.save(name, &report)? };
        if !quiet {
            let how = if args.append { "run added to baseline" } else { "baseline" };
            eprintln!("{how} `{name}` saved to {}", path.display());
        }
    }
    if let Some(h) = &history {
        let path = h.append(&report)?;
        if !quiet {
            eprintln!("run appended to history {}", path.display());
        }
    }
    let mut gate = Outcome::Success;
    if let Some(((label, old), opts)) = &reference {
        let hdir = history_dir(args.history_dir.as_deref(), loaded.as_ref(), &baselines);
        let spreads = super::spreads_for(&hdir, std::slice::from_ref(&report));
        let c = compare::compare_sets(label, old, "this run", std::slice::from_ref(&report), &spreads, opts);
        check_machine(&c, args.gate.strict_machine)?;
        if stdout_format == Format::Table {
            print_stdout(&format!("\n{}", compare::render_table(&c, stdout_color())))?;
        } else if !quiet {
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
        gate = gate_outcome(&c, &args.gate);
    }
    Ok(if report.failed_count() > 0 { Outcome::CaseFailures } else { gate })
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
