//! The measuring side of `tfbench ab`: one build, serving the driver's
//! requests over stdin/stdout until it says quit.

use super::protocol::{Hello, PROTOCOL, Reply, Request, resolve_plan};
use crate::app::Outcome;
use crate::cli::AbWorkerArgs;
use crate::config::Resolved;
use crate::harness::sampler::on_pool_of;
use crate::suites;
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
    rayon::ThreadPoolBuilder::new()
        .num_threads(plan.threads)
        .build_global()
        .context("cannot build the worker thread pool")?;
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
    };
    let mut out = std::io::stdout().lock();
    let mut send = |v: &dyn erased::Json| -> Result<()> {
        writeln!(out, "{}", v.json()?)?;
        out.flush().context("driver went away")
    };
    send(&hello)?;
    let mut workload: Option<Box<dyn Workload>> = None;
    // The width of the prepared case's dedicated pool: its warm-up and
    // samples run from inside a pool as wide (see `sampler::on_pool_of`).
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
pub(super) fn guarded<T>(phase: &str, f: impl FnOnce() -> Result<T>) -> Result<T, Reply> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Reply::Failed { phase: phase.into(), reason: format!("{e:#}") }),
        Err(p) => Err(Reply::Failed {
            phase: phase.into(),
            reason: format!("panicked: {}", crate::harness::runner::panic_message(p.as_ref())),
        }),
    }
}

/// Prepares case `id` of `plan` and, with `verify`, verifies it (wrapped by
/// the injection hook when it applies); with the width of its dedicated
/// pool ([`suites::Suite::pool_threads`]).
fn prepare(
    plan: &Resolved,
    id: &str,
    inject: Option<&crate::harness::inject::Injection>,
    panics: Option<&regex::Regex>,
    verify: bool,
) -> Result<(Box<dyn Workload>, Option<usize>), Reply> {
    let fail = |phase: &str, reason: String| Reply::Failed { phase: phase.into(), reason };
    let case =
        plan.cases.iter().find(|c| c.id == id).ok_or_else(|| fail("prepare", format!("no case {id}")))?;
    case.device.availability().map_err(Reply::Skipped)?;
    let suite = plan.suite(&case.suite).ok_or_else(|| fail("prepare", format!("no suite {}", case.suite)))?;
    let t0 = Instant::now();
    let first = match catch_unwind(AssertUnwindSafe(|| suite.prepare(case))) {
        Ok(Ok(w)) => w,
        Ok(Err(e)) if e.downcast_ref::<suites::SkipCase>().is_some() => {
            return Err(Reply::Skipped(format!("{e:#}")));
        }
        Ok(Err(e)) => return Err(fail("prepare", format!("{e:#}"))),
        Err(_) => return Err(fail("prepare", "panicked".into())),
    };
    // Each build's copies of a small case, sampled in turn (see
    // `harness::placement`): both sides of a pair average over placements.
    let placements = plan.settings.get(&case.suite).map_or(1, |s| s.placements);
    let (mut w, _) = crate::harness::placement::spread(first, placements, t0.elapsed(), suite, case)
        .map_err(|e| fail("prepare", format!("{e:#}")))?;
    if let Some(limit) = plan.settings.get(&case.suite).and_then(|s| s.max_time) {
        w.set_time_limit(Duration::from_secs_f64(limit));
    }
    if verify {
        let v = guarded("verify", || on_pool_of(suite.pool_threads(case), || w.verify()))?;
        if !v.passed {
            return Err(fail("verify", format!("wrong result against {}: {}", v.reference, v.detail)));
        }
    }
    if let Some(i) = inject.filter(|i| i.applies_to(id)) {
        w = Box::new(crate::harness::inject::Slowed::new(w, i.factor));
    }
    if panics.is_some_and(|p| p.is_match(id)) {
        w = Box::new(crate::harness::inject::Panicking(w));
    }
    Ok((w, suite.pool_threads(case)))
}

/// Times `iters` iterations of `w` and returns the nanoseconds. A workload
/// that fixes its iterations per call (an external process) gets calls of
/// that many, each bracketed by its untimed hooks, and only the calls are
/// timed; the time is scaled to `iters` when they do not divide it.
fn sample(w: &mut dyn Workload, iters: u64) -> Result<f64> {
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
