//! The measuring side of `tfbench ab`: one build, serving the driver's
//! requests over stdin/stdout until it says quit.

use super::protocol::{Hello, PROTOCOL, Reply, Request, resolve_plan};
use crate::app::Outcome;
use crate::backend::cpu::on_pool_of;
use crate::cli::AbWorkerArgs;
use crate::config::Resolved;
use crate::workload::Workload;
use anyhow::{Context, Result};
use std::io::{BufRead, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

/// `tfbench ab-worker`: serves the driver until it says quit or closes stdin.
pub fn ab_worker(args: &AbWorkerArgs) -> Result<Outcome> {
    let plan = resolve_plan(&args.plan)?;
    let injection = crate::harness::inject::from_env()?;
    let panics = crate::harness::inject::panic_from_env()?;
    crate::backend::cpu::configure_run_pool(plan.threads).context("cannot build the worker thread pool")?;
    let env = crate::env::Environment::gather();
    let hello = Hello {
        protocol: PROTOCOL,
        schema_version: crate::results::SCHEMA_VERSION,
        build: format!("tfbench {} ({})", env!("CARGO_PKG_VERSION"), env.git_revision),
        cases: plan.cases.iter().map(|c| (c.id.clone(), c.suite.clone())).collect(),
        settings: plan.settings.clone(),
        rounds: plan.rounds,
        injected: injection.as_ref().map(|i| i.spec.clone()),
        verify_once: true,
        cpu_time: true,
    };
    let mut out = std::io::stdout().lock();
    let mut send = |v: &dyn erased::Json| -> Result<()> {
        writeln!(out, "{}", v.json()?)?;
        out.flush().context("driver went away")
    };
    send(&hello)?;
    let mut workload: Option<Box<dyn Workload>> = None;
    // The width of the prepared case's dedicated pool: its warm-up and
    // samples run from inside a pool as wide (see `backend::cpu::on_pool_of`).
    let mut width: Option<usize> = None;
    for line in std::io::stdin().lock().lines() {
        let line = line.context("reading the driver's request")?;
        let req: Request = serde_json::from_str(&line).with_context(|| format!("bad request {line:?}"))?;
        let reply = match req {
            Request::Quit => break,
            Request::Finish => {
                workload = None;
                Reply::Ok
            }
            Request::Prepare(id) => match prepare(&plan, &id, injection.as_ref(), panics.as_ref(), true) {
                Ok((w, threads)) => {
                    (workload, width) = (Some(w), threads);
                    Reply::Ok
                }
                Err(r) => r,
            },
            Request::PrepareVerified(id) => {
                match prepare(&plan, &id, injection.as_ref(), panics.as_ref(), false) {
                    Ok((w, threads)) => {
                        (workload, width) = (Some(w), threads);
                        Reply::Ok
                    }
                    Err(r) => r,
                }
            }
            Request::WarmUp(secs) => match workload.as_mut() {
                Some(w) => guarded("warm_up", || on_pool_of(width, || warm_up(w.as_mut(), secs)))
                    .map_or_else(|r| r, Reply::PerIter),
                None => Reply::Failed { phase: "warm_up".into(), reason: "no case prepared".into() },
            },
            Request::Sample(iters) => match workload.as_mut() {
                Some(w) => guarded("measure", || on_pool_of(width, || sample(w.as_mut(), iters)))
                    .map_or_else(|r| r, Reply::Nanos),
                None => Reply::Failed { phase: "measure".into(), reason: "no case prepared".into() },
            },
            Request::SampleTimed(iters) => match workload.as_mut() {
                Some(w) => guarded("measure", || on_pool_of(width, || sample_timed(w.as_mut(), iters)))
                    .map_or_else(|r| r, |(nanos, cpu_ns)| Reply::Timed { nanos, cpu_ns }),
                None => Reply::Failed { phase: "measure".into(), reason: "no case prepared".into() },
            },
        };
        send(&reply)?;
    }
    Ok(Outcome::Success)
}

/// Tiny object-safe JSON line helper so `send` takes both message types.
mod erased {
    pub trait Json {
        fn json(&self) -> anyhow::Result<String>;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> anyhow::Result<String> {
            Ok(serde_json::to_string(self)?)
        }
    }
}

/// Runs `f`, turning an error or a panic into a [`Reply::Failed`] of `phase`.
pub(crate) fn guarded<T>(phase: &str, f: impl FnOnce() -> Result<T>) -> Result<T, Reply> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Reply::Failed { phase: phase.into(), reason: format!("{e:#}") }),
        Err(p) => Err(Reply::Failed {
            phase: phase.into(),
            reason: format!("panicked: {}", crate::harness::runner::panic_message(p.as_ref())),
        }),
    }
}

/// Prepares case `id` of `plan` and, with `verify`, verifies it, then wraps
/// it with the test hooks that apply: the steps and order of `run`
/// ([`crate::harness::runner::prepare_case`]). Also returns the width of the
/// case's dedicated pool ([`crate::backend::cpu::Context::dedicated_width`]), to sample
/// it from inside a pool as wide.
pub(crate) fn prepare(
    plan: &Resolved,
    id: &str,
    inject: Option<&crate::harness::inject::Injection>,
    panics: Option<&regex::Regex>,
    verify: bool,
) -> Result<(Box<dyn Workload>, Option<usize>), Reply> {
    use crate::harness::runner::{NotReady, Preparation, RunHooks, prepare_case};
    let fail = |phase: &str, reason: String| Reply::Failed { phase: phase.into(), reason };
    let case =
        plan.cases.iter().find(|c| c.id == id).ok_or_else(|| fail("prepare", format!("no case {id}")))?;
    let suite = plan.suite(&case.suite).ok_or_else(|| fail("prepare", format!("no suite {}", case.suite)))?;
    let settings = plan.settings.get(&case.suite).cloned().unwrap_or_default();
    let hooks = RunHooks { canaries: false, inject, panics, ..Default::default() };
    // Each build's copies of a case, sampled in turn (see
    // `harness::placement`): both sides of a pair average over placements.
    let p = Preparation { verify, ..Preparation::of(case, &settings, &hooks) };
    match prepare_case(suite, case, &p) {
        Ok(ready) => Ok((ready.workload, ready.pool_width)),
        Err(NotReady::Skipped(why)) => Err(Reply::Skipped(why)),
        Err(NotReady::Failed { phase, reason, .. }) => Err(fail(phase, reason)),
    }
}

/// Times `iters` iterations of `w` and returns the nanoseconds. A workload
/// that fixes its iterations per call (an external process) gets calls of
/// that many, each bracketed by its untimed hooks, and only the calls are
/// timed; the time is scaled to `iters` when they do not divide it.
pub(super) fn sample(w: &mut dyn Workload, iters: u64) -> Result<f64> {
    let per_call = w.fixed_iterations().map_or(iters, |f| f.max(1));
    let calls = (iters / per_call).max(1);
    let mut nanos = 0.0;
    for _ in 0..calls {
        w.before_sample()?;
        let t = Instant::now();
        w.run(per_call)?;
        w.sync()?;
        nanos += t.elapsed().as_nanos() as f64;
        w.after_sample(true)?;
    }
    Ok(nanos * iters as f64 / (calls * per_call) as f64)
}

/// [`sample`], with the CPU time the timing thread ran meanwhile (read
/// outside the timed region; `None` where the platform does not say).
fn sample_timed(w: &mut dyn Workload, iters: u64) -> Result<(f64, Option<f64>)> {
    let cpu0 = crate::harness::screen::thread_cpu_ns();
    let nanos = sample(w, iters)?;
    let cpu = cpu0.zip(crate::harness::screen::thread_cpu_ns()).map(|(a, b)| b - a);
    Ok((nanos, cpu))
}

/// Warms `w` up for `secs` with doubling batches (or the workload's fixed
/// iterations); returns the last batch's time per iteration.
fn warm_up(w: &mut dyn Workload, secs: f64) -> Result<f64> {
    let start = Instant::now();
    let budget = Duration::from_secs_f64(secs.max(0.0));
    let mut batch = w.fixed_iterations().map_or(1, |f| f.max(1));
    loop {
        w.before_sample()?;
        let t = Instant::now();
        w.run(batch)?;
        let per_iter = (t.elapsed().as_nanos() as f64 / batch as f64).max(0.1);
        w.after_sample(false)?;
        if start.elapsed() >= budget {
            return Ok(per_iter);
        }
        let remaining = budget.saturating_sub(start.elapsed()).as_nanos() as f64;
        batch = w.fixed_iterations().map_or_else(
            || batch.saturating_mul(2).min((remaining / per_iter).max(1.0) as u64).max(1),
            |f| f.max(1),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::runner::tests::{Log, prepared, read_log, recording_plan, recording_registry};

    #[test]
    fn a_worker_prepares_through_prepare_case_as_run_does() {
        let log = Log::default();
        let reg = recording_registry(&log);
        let plan = recording_plan(&reg);
        let slow = crate::harness::inject::Injection::parse("^t/rec$=1.5").expect("a valid spec");
        let before = prepared();
        let ready = prepare(&plan, "t/rec", Some(&slow), None, true);
        assert_eq!(prepared() - before, 1, "the worker prepares through prepare_case");
        let Ok((mut w, _width)) = ready else { panic!("not ready: {:?}", ready.err()) };
        // The steps of `run`'s test, in the same order: checked, then wrapped
        // (the wrapper refuses to verify, so the check ran on the case).
        let (steps, _) = read_log(&log);
        assert_eq!(steps, ["prepare", "set_time_limit", "verify"]);
        let nanos = sample(w.as_mut(), 3).expect("a sample");
        let (_, measured) = read_log(&log);
        let &(iters, own) = measured.last().expect("a measured call");
        assert!(
            iters == 3 && nanos >= 1.5 * own,
            "a sample of {nanos} ns for {own} ns of the case's own time"
        );
        // A later round's worker: the same steps without the check.
        log.lock().expect("log").clear();
        assert!(prepare(&plan, "t/rec", Some(&slow), None, false).is_ok());
        assert_eq!(read_log(&log).0, ["prepare", "set_time_limit"]);
        match prepare(&plan, "t/none", None, None, true) {
            Err(Reply::Failed { phase, reason }) => assert!(phase == "prepare" && reason.contains("no case")),
            other => panic!("{:?}", other.err()),
        }
    }
}
