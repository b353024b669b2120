//! What a bench target does with its arguments: measure (`--bench`, as
//! `cargo bench` passes), run each case once as a test (`cargo test
//! --benches`), list the cases, or run them for a profiler.

use super::outcome_of;
use crate::app::{self, Outcome};
use crate::cli::{BenchArgs, RunArgs};
use crate::harness::runner::{NotReady, Preparation, guarded, prepare_case, quiet_panics};
use crate::plan::Case;
use crate::suites::Suite;
use crate::workload::Workload;
use anyhow::{Result, bail};
use std::time::Instant;

/// Runs the mode `cli` asks for over the suites of `registry`.
pub(super) fn dispatch(registry: &[&'static dyn Suite], mut cli: BenchArgs) -> Result<Outcome> {
    if let Some(f) = cli.output_format {
        cli.run.format = Some(f);
    }
    if cli.list {
        return list(registry, &cli.run);
    }
    if let Some(secs) = cli.profile_time {
        return profile(registry, &cli.run, secs);
    }
    if cli.test || !cli.bench {
        return test(registry, &cli.run);
    }
    // The first result comes first: a bench target uses the machine's cached
    // probe when there is one but measures none unless asked (--probe);
    // results then go without % of peak, and say so.
    if !cli.run.probe {
        cli.run.no_probe = true;
    }
    if nothing_selected(registry, &cli.run)? {
        return Ok(Outcome::Success);
    }
    app::run_in(registry, &cli.run)
}

/// Whether a FILTER leaves this target nothing to run: `cargo bench FILTER`
/// passes the filter to every bench target, and one without a match must
/// not fail the others (as libtest's and criterion's do not). Says so.
fn nothing_selected(registry: &[&'static dyn Suite], args: &RunArgs) -> Result<bool> {
    let plan = app::plan_in(registry, args)?;
    let empty = plan.cases.is_empty() && args.selection.filter.is_some();
    if empty {
        eprintln!(
            "no case of this bench target matches the filter; `cargo bench -- --list` shows the case ids"
        );
    }
    Ok(empty)
}

/// `--list`: one `ID: benchmark` line per selected case, as libtest lists.
fn list(registry: &[&'static dyn Suite], args: &RunArgs) -> Result<Outcome> {
    let plan = app::plan_in(registry, args)?;
    let text: String = plan.cases.iter().map(|c| format!("{}: benchmark\n", c.id)).collect();
    app::print_stdout(&text)?;
    Ok(Outcome::Success)
}

/// The suite of `case` in `registry`.
fn suite_of(registry: &[&'static dyn Suite], case: &Case) -> Result<&'static dyn Suite, String> {
    registry
        .iter()
        .copied()
        .find(|s| s.name() == case.suite)
        .ok_or_else(|| format!("unknown suite {}", case.suite))
}

/// Prepares and checks `case` as `run` does ([`prepare_case`]: one copy, no
/// time limit, no test hooks, since nothing is timed): the workload ready
/// to run, `Ok(Err(reason))` when refused (skipped), `Err` naming the phase
/// that failed.
fn checked(
    registry: &[&'static dyn Suite],
    case: &Case,
) -> Result<Result<Box<dyn Workload>, String>, String> {
    let suite = suite_of(registry, case)?;
    match prepare_case(suite, case, &Preparation::checked_only()) {
        Ok(ready) => Ok(Ok(ready.workload)),
        Err(NotReady::Skipped(why)) => Ok(Err(why)),
        Err(NotReady::Failed { phase, reason, .. }) => Err(format!("{phase}: {reason}")),
    }
}

/// Sizes the worker pool as a measuring run would (once per process).
fn threads(plan: &crate::config::Resolved) {
    // Already built (a second call in one process) is fine: same size.
    let _ = crate::backend::cpu::configure_run_pool(plan.threads);
}

/// Test mode: each selected case prepared, checked and run once; libtest's
/// lines on stdout; exit 3 when one failed, after all ran.
fn test(registry: &[&'static dyn Suite], args: &RunArgs) -> Result<Outcome> {
    let plan = app::plan_in(registry, args)?;
    threads(&plan);
    let n = plan.cases.len();
    app::print_stdout(&format!("\nrunning {n} benchmark{} once as tests\n", if n == 1 { "" } else { "s" }))?;
    let (mut passed, mut skipped, mut failed) = (0, 0, Vec::new());
    quiet_panics(|| -> Result<()> {
        for case in &plan.cases {
            let line = match once(registry, case) {
                Ok(None) => {
                    passed += 1;
                    "ok".to_string()
                }
                Ok(Some(why)) => {
                    skipped += 1;
                    format!("skipped ({why})")
                }
                Err(e) => {
                    failed.push(format!("{}: {e}", case.id));
                    "FAILED".to_string()
                }
            };
            app::print_stdout(&format!("test {} ... {line}\n", case.id))?;
        }
        Ok(())
    })?;
    let mut text = String::new();
    if !failed.is_empty() {
        text.push_str("\nfailures:\n");
        for f in &failed {
            text.push_str(&format!("    {f}\n"));
        }
    }
    let verdict = if failed.is_empty() { "ok" } else { "FAILED" };
    text.push_str(&format!(
        "\ntest result: {verdict}. {passed} passed; {} failed; {skipped} skipped\n\n",
        failed.len()
    ));
    app::print_stdout(&text)?;
    Ok(outcome_of(failed.len()))
}

/// One case as a test: `Ok(None)` passed, `Ok(Some(reason))` skipped,
/// `Err` failed (the phase and the message). Call inside [`quiet_panics`].
fn once(registry: &[&'static dyn Suite], case: &Case) -> Result<Option<String>, String> {
    match checked(registry, case)? {
        Ok(mut w) => guarded(|| {
            w.run(1)?;
            w.sync()
        })
        .map(|()| None)
        .map_err(|e| format!("run: {e}")),
        Err(why) => Ok(Some(why)),
    }
}

/// `--profile-time SECS`: each selected case, once checked, runs for about
/// SECS seconds in batches that grow as long as they fit; nothing is
/// analysed or written.
fn profile(registry: &[&'static dyn Suite], args: &RunArgs, secs: f64) -> Result<Outcome> {
    if !(secs.is_finite() && secs > 0.0) {
        bail!("--profile-time: must be a positive number of seconds, got {secs}");
    }
    let plan = app::plan_in(registry, args)?;
    threads(&plan);
    let mut failed = 0;
    quiet_panics(|| {
        for case in &plan.cases {
            let result = checked(registry, case).and_then(|w| match w {
                Ok(mut w) => guarded(|| spin(w.as_mut(), secs)).map(Ok).map_err(|e| format!("run: {e}")),
                Err(why) => Ok(Err(why)),
            });
            match result {
                Ok(Ok((iters, took))) => eprintln!("profiled {}: {iters} iterations in {took:.2} s", case.id),
                Ok(Err(why)) => eprintln!("skipped {}: {why}", case.id),
                Err(e) => {
                    failed += 1;
                    eprintln!("FAILED {}: {e}", case.id);
                }
            }
        }
    });
    Ok(outcome_of(failed))
}

/// Runs `w` for about `secs` seconds; returns the iterations and the time.
fn spin(w: &mut dyn Workload, secs: f64) -> Result<(u64, f64)> {
    let start = Instant::now();
    let (mut iters, mut batch) = (0u64, 1u64);
    loop {
        w.run(batch)?;
        w.sync()?;
        iters += batch;
        let took = start.elapsed().as_secs_f64();
        let left = secs - took;
        if left <= 0.0 {
            return Ok((iters, took));
        }
        // The next batch at most doubles, and fits in the time left.
        let per_iter = took / iters as f64;
        batch = ((left / per_iter) as u64).clamp(1, batch.saturating_mul(2));
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
