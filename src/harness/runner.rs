//! Runs a resolved plan: for each round and case, prepare, verify, measure.
//! A failure or panic in one case is recorded and the run goes on.
//!
//! `prepare_case` is the one way a case is made ready to measure, for
//! `run`, `ab`'s workers and a bench target's modes alike: available on
//! this machine -> prepared (or refused: skipped) -> spread over copies ->
//! time limit -> verified -> wrapped by the test hooks. The hooks wrap the
//! checked workload, so the self-check never runs through an injected
//! slowdown.

use super::sampler::{self, Measurement};
use super::timer::TimerInfo;
use crate::backend::cpu::Context;
use crate::config::Resolved;
use crate::plan::Case;
use crate::results::CaseResult;
use crate::suites;
use crate::workload::Throughput;
use crate::workload::{Verification, Workload};
use rand::seq::SliceRandom;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

/// Everything the runner gathered for one case over all rounds.
#[derive(Debug, Clone)]
pub struct CaseOutcome {
    /// The case.
    pub case: Case,
    /// The phase and reason of a failure, if any.
    pub failure: Option<(String, String)>,
    /// The self-check's result, if it ran.
    pub verification: Option<Verification>,
    /// Work per iteration as declared by the workload.
    pub throughput: Vec<Throughput>,
    /// One measurement per round that got that far.
    pub measurements: Vec<Measurement>,
    /// Why the case was refused (see [`crate::suites::SkipCase`]), if it was.
    pub skipped: Option<String>,
    /// Figures the workload reported after its last measured round.
    pub metrics: Vec<crate::results::Metric>,
    /// The limits of the device the case ran on, when not the CPU's
    /// ([`crate::workload::Workload::roof`]).
    pub roof: Option<crate::workload::Roof>,
}

/// Hooks for progress display; every method has an empty default.
pub trait Observer {
    /// The run is about to start `cases` cases for `rounds` rounds.
    fn run_started(&mut self, _cases: usize, _rounds: u32) {}
    /// Case `id` starts (`done` cases-rounds finished of `total`).
    fn case_started(&mut self, _id: &str, _round: u32, _done: usize, _total: usize) {}
    /// A case passed its self-check.
    fn case_verified(&mut self, _id: &str, _v: &Verification) {}
    /// A case's final result (after its last round, or when it failed).
    fn case_finished(&mut self, _result: &CaseResult) {}
}

/// An observer that shows nothing.
pub struct Silent;
impl Observer for Silent {}

static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// The message of a caught panic's payload (`panic!` gives a `&str` or a
/// `String`), for the error that reports it.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}

/// Runs `f`, turning a panic into an error that carries the panic message and
/// location (captured by a quiet hook, so nothing is printed twice).
pub(crate) fn guarded<T>(f: impl FnOnce() -> anyhow::Result<T>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(payload) => {
            let hooked = LAST_PANIC.lock().ok().and_then(|mut g| g.take());
            Err(format!("panicked: {}", hooked.unwrap_or_else(|| panic_message(payload.as_ref()))))
        }
    }
}

/// What a run produced: the cases in plan order and the canary timings
/// taken before each case.
pub struct Executed {
    /// One result per case, in plan order.
    pub cases: Vec<CaseResult>,
    /// Canary timings (see [`super::canary`]); empty when disabled.
    pub canaries: Vec<crate::results::CanarySample>,
    /// Other work's CPU use during each case-round (with the canaries).
    pub load: Vec<crate::results::LoadSample>,
}

/// Options of a run beyond the plan.
#[derive(Default)]
pub struct RunHooks<'a> {
    /// Time the canaries before each case (and round).
    pub canaries: bool,
    /// The slowdown-injection test hook, when set.
    pub inject: Option<&'a super::inject::Injection>,
    /// The panic-injection test hook's pattern, when set.
    pub panics: Option<&'a regex::Regex>,
    /// `--profile FILE`: sample each case while it is measured (first
    /// round) and write its flamegraph there ([`crate::inside::profile`]).
    pub profile: Option<&'a std::path::Path>,
    /// Read the hardware counters in an untimed call after the samples,
    /// where the machine has them ([`crate::inside::counters`]).
    pub counters: bool,
}

/// Turns a case's raw outcome into its result once the case is done (the
/// app passes the analysis here: the runner times, it does not analyse).
pub type Finish<'a> = dyn FnMut(&CaseOutcome, &crate::config::Settings) -> CaseResult + 'a;

/// Runs every case of `plan` and returns results in plan order; each case
/// is turned into its result by `finish` as soon as its last round is done
/// (so progress can show it).
pub fn execute(
    plan: &Resolved,
    timer: &TimerInfo,
    obs: &mut dyn Observer,
    finish: &mut Finish<'_>,
) -> Vec<CaseResult> {
    execute_with(plan, timer, obs, &RunHooks::default(), finish).cases
}

/// [`execute`] with canaries and the injection hooks.
pub fn execute_with(
    plan: &Resolved,
    timer: &TimerInfo,
    obs: &mut dyn Observer,
    hooks: &RunHooks<'_>,
    finish: &mut Finish<'_>,
) -> Executed {
    quiet_panics(|| execute_quietly(plan, timer, obs, hooks, finish))
}

fn execute_quietly(
    plan: &Resolved,
    timer: &TimerInfo,
    obs: &mut dyn Observer,
    hooks: &RunHooks<'_>,
    finish: &mut Finish<'_>,
) -> Executed {
    let mut canaries = Vec::new();
    let mut load = Vec::new();
    let n = plan.cases.len();
    let mut outcomes: Vec<CaseOutcome> = plan
        .cases
        .iter()
        .map(|c| CaseOutcome {
            case: c.clone(),
            failure: None,
            verification: None,
            throughput: Vec::new(),
            measurements: Vec::new(),
            skipped: None,
            metrics: Vec::new(),
            roof: None,
        })
        .collect();
    let mut results: Vec<Option<CaseResult>> = vec![None; n];
    obs.run_started(n, plan.rounds);
    let total = n * plan.rounds as usize;
    let mut done = 0;
    for round in 0..plan.rounds {
        let mut order: Vec<usize> = (0..n).collect();
        if plan.shuffle {
            let seed = plan.settings.values().next().map_or(0, |s| s.seed);
            order.shuffle(&mut crate::util::rng(seed.wrapping_add(round as u64)));
        }
        for i in order {
            let profile =
                hooks.profile.filter(|_| round == 0).map(|f| crate::inside::profile::paths_for(f, i, n));
            let last_round = round + 1 == plan.rounds;
            let o = &mut outcomes[i];
            if o.failure.is_some() || o.skipped.is_some() {
                done += 1;
                continue;
            }
            obs.case_started(&o.case.id, round, done, total);
            let before = if hooks.canaries { super::load::snapshot() } else { None };
            if hooks.canaries {
                canaries.extend(super::canary::sample(round, &o.case.id));
            }
            let settings = plan.settings.get(&o.case.suite).cloned().unwrap_or_default();
            let prep = Preparation::of(&o.case, &settings, hooks);
            let slow = prep.slow;
            // The plan's own suites, not the global registry: a `cargo bench`
            // target runs suites tfbench does not know.
            let ran = match plan.suite(&o.case.suite) {
                Some(suite) => {
                    let inside = InsideHooks { profile: profile.as_ref(), counters: hooks.counters };
                    run_one(suite, o, &settings, timer, round, obs, &prep, &inside)
                }
                None => Err(("prepare", format!("unknown suite {}", o.case.suite))),
            };
            if let (Some(a), Some(b)) = (&before, before.as_ref().and_then(|_| super::load::snapshot())) {
                load.push(super::load::between(a, &b, &o.case.id, round, crate::backend::cpu::run_threads()));
            }
            if let Err((phase, reason)) = ran {
                o.failure = Some((phase.to_string(), reason));
            }
            done += 1;
            if last_round || o.failure.is_some() || o.skipped.is_some() {
                let mut r = finish(o, &settings);
                if let Some(f) = slow {
                    r.notes.insert(
                        0,
                        format!(
                            "INJECTED SLOWDOWN x{f} ({} test hook): not a real measurement",
                            super::inject::VAR
                        ),
                    );
                }
                obs.case_finished(&r);
                results[i] = Some(r);
                // Samples live on in the result; the outcome's copy is not needed.
                o.measurements.clear();
            }
        }
    }
    Executed { cases: results.into_iter().flatten().collect(), canaries, load }
}

/// Prepares `case` on `suite`, a panic caught: `Ok(Ok(w))` ready to verify,
/// `Ok(Err(reason))` refused (skipped: a device this build or machine lacks,
/// or a [`suites::SkipCase`]), `Err(reason)` failed: the first step of
/// [`prepare_case`], the only caller.
/// The case's execution context ([`Context`], from
/// [`suites::Suite::threads`]) is built here and returned with it.
fn prepare(suite: &dyn suites::Suite, case: &Case) -> Result<Result<Prepared, String>, String> {
    if let Err(why) = case.device.availability() {
        return Ok(Err(why));
    }
    let ctx = suite.threads(case).and_then(Context::new).map_err(|e| format!("{e:#}"))?;
    let prepared = catch_unwind(AssertUnwindSafe(|| suite.prepare(case, &ctx)));
    match prepared {
        Ok(Err(e)) if e.downcast_ref::<suites::SkipCase>().is_some() => Ok(Err(format!("{e:#}"))),
        other => guarded(|| other.unwrap_or_else(|p| std::panic::resume_unwind(p))).map(|w| Ok((w, ctx))),
    }
}

/// Runs `f` with a panic hook that records a panic's message for
/// [`guarded`] instead of printing it (a failing case is reported once, in
/// its result), then puts the previous hook back.
pub(crate) fn quiet_panics<T>(f: impl FnOnce() -> T) -> T {
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        if let Ok(mut g) = LAST_PANIC.lock() {
            *g = Some(info.to_string());
        }
    }));
    let out = f();
    std::panic::set_hook(previous_hook);
    out
}

/// A prepared workload and the execution context it was prepared with.
type Prepared = (Box<dyn Workload>, Context);

/// How one case is made ready by [`prepare_case`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Preparation {
    /// Copies to spread the samples over ([`super::placement`]); 1: none.
    pub placements: usize,
    /// The case's hard time budget, seconds, given to the workload before
    /// its check.
    pub max_time: Option<f64>,
    /// Run the self-check. Only `ab`'s later rounds skip it: the same
    /// binaries checked the same seeded inputs in its first round.
    pub verify: bool,
    /// The slowdown-injection hook's factor, when it applies to the case.
    pub slow: Option<f64>,
    /// The panic-injection hook applies to the case.
    pub panic: bool,
}

impl Preparation {
    /// A case checked and measured under `s`, with the test `hooks` that
    /// match its id.
    pub fn of(case: &Case, s: &crate::config::Settings, hooks: &RunHooks<'_>) -> Self {
        Self {
            placements: s.placements,
            max_time: s.max_time,
            verify: true,
            slow: hooks.inject.filter(|i| i.applies_to(&case.id)).map(|i| i.factor),
            panic: hooks.panics.is_some_and(|p| p.is_match(&case.id)),
        }
    }

    /// One copy, checked, no time limit, no hooks: a bench target's test
    /// and profile modes, which run a case without timing it.
    pub fn checked_only() -> Self {
        Self { placements: 1, max_time: None, verify: true, slow: None, panic: false }
    }
}

/// A case ready to measure.
pub(crate) struct Ready {
    /// The workload, wrapped by the test hooks that apply.
    pub workload: Box<dyn Workload>,
    /// Copies its samples rotate over.
    pub placements: usize,
    /// Preparing it (copies included), ns.
    pub prepare_ns: f64,
    /// Checking it, ns (0 when not checked).
    pub verify_ns: f64,
    /// The self-check's result, when it ran.
    pub verification: Option<Verification>,
    /// The width of the case's dedicated pool ([`Context::dedicated_width`]),
    /// `None` on the run's pool: the harness samples it from inside a pool
    /// as wide ([`crate::backend::cpu::on_pool_of`]).
    pub pool_width: Option<usize>,
}

/// Why a case is not ready.
pub(crate) enum NotReady {
    /// Refused on this machine (see [`prepare`]).
    Skipped(String),
    /// Failed in `phase` (`prepare` or `verify`); a wrong result keeps its
    /// verification, for the case's result.
    Failed { phase: &'static str, reason: String, verification: Option<Verification> },
}

#[cfg(test)]
thread_local! {
    /// Calls of [`prepare_case`] on this thread, so tests can check that
    /// each path prepares its cases through it.
    pub(crate) static PREPARED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Makes `case` of `suite` ready to measure as `p` says: available ->
/// prepared (a refusal skips it) -> spread over copies -> time limit ->
/// verified -> wrapped by the test hooks, in that order and only here. The
/// hooks go on last, so the check runs on the case itself and never through
/// an injected slowdown ([`super::inject::Slowed`] refuses to verify). A
/// panic is caught as a failure; call inside [`quiet_panics`] to have its
/// message captured rather than printed.
pub(crate) fn prepare_case(
    suite: &dyn suites::Suite,
    case: &Case,
    p: &Preparation,
) -> Result<Ready, NotReady> {
    #[cfg(test)]
    PREPARED.with(|c| c.set(c.get() + 1));
    let failed = |phase, reason| NotReady::Failed { phase, reason, verification: None };
    let t0 = std::time::Instant::now();
    let (first, ctx) = match prepare(suite, case) {
        Ok(Ok(ready)) => ready,
        Ok(Err(why)) => return Err(NotReady::Skipped(why)),
        Err(e) => return Err(failed("prepare", e)),
    };
    let (mut w, placements) = super::placement::spread(first, p.placements, t0.elapsed(), suite, case, &ctx)
        .map_err(|e| failed("prepare", format!("{e:#}")))?;
    let prepare_ns = t0.elapsed().as_nanos() as f64;
    if let Some(limit) = p.max_time {
        w.set_time_limit(std::time::Duration::from_secs_f64(limit));
    }
    let t1 = std::time::Instant::now();
    let verification = if p.verify {
        // A case with a dedicated pool is checked from inside a pool as wide,
        // as it is sampled (issue 45: no hand-off to a sleeping worker).
        let width = ctx.dedicated_width();
        let v = guarded(|| crate::backend::cpu::on_pool_of(width, || w.verify()))
            .map_err(|e| failed("verify", e))?;
        if !v.passed {
            let reason = format!("wrong result against {}: {}", v.reference, v.detail);
            return Err(NotReady::Failed { phase: "verify", reason, verification: Some(v) });
        }
        Some(v)
    } else {
        None
    };
    let verify_ns = if p.verify { t1.elapsed().as_nanos() as f64 } else { 0.0 };
    if let Some(f) = p.slow {
        w = Box::new(super::inject::Slowed::new(w, f));
    }
    if p.panic {
        w = Box::new(super::inject::Panicking(w));
    }
    Ok(Ready {
        workload: w,
        placements,
        prepare_ns,
        verify_ns,
        verification,
        pool_width: ctx.dedicated_width(),
    })
}

/// What [`run_one`] looks inside a case with: the profile's paths (SVG,
/// folded stacks) when it is profiled, and whether to read the counters.
struct InsideHooks<'a> {
    profile: Option<&'a (std::path::PathBuf, std::path::PathBuf)>,
    counters: bool,
}

#[allow(clippy::too_many_arguments)]
fn run_one(
    suite: &dyn suites::Suite,
    o: &mut CaseOutcome,
    s: &crate::config::Settings,
    timer: &TimerInfo,
    round: u32,
    obs: &mut dyn Observer,
    prep: &Preparation,
    inside: &InsideHooks<'_>,
) -> Result<(), (&'static str, String)> {
    let ready = match prepare_case(suite, &o.case, prep) {
        Ok(r) => r,
        Err(NotReady::Skipped(why)) => {
            o.skipped = Some(why);
            return Ok(());
        }
        Err(NotReady::Failed { phase, reason, verification }) => {
            o.verification = verification;
            return Err((phase, reason));
        }
    };
    let Ready { workload: mut w, placements, prepare_ns, verify_ns, verification, pool_width: width } = ready;
    if let Some(v) = &verification {
        obs.case_verified(&o.case.id, v);
    }
    o.verification = verification;
    o.throughput = w.throughput();
    o.roof = w.roof();
    // A case with a dedicated pool runs from inside a pool as wide, so that
    // no iteration waits for that pool's worker to wake (issue 45).
    let sampler = match inside.profile {
        Some(_) => Some(crate::inside::profile::Sampler::start().map_err(|e| ("profile", e))?),
        None => None,
    };
    let measured =
        guarded(|| crate::backend::cpu::on_pool_of(width, || sampler::measure(w.as_mut(), s, timer, round)));
    let profiled = sampler.map(|p| p.finish());
    let mut m: Measurement = measured.map_err(|e| ("measure", e))?;
    if let (Some(stacks), Some((svg, folded))) = (profiled, inside.profile) {
        let title = format!("tfbench: {}", o.case.id);
        let files = stacks.and_then(|f| crate::inside::profile::write(&f, &title, svg, folded));
        m.inside.profile = Some(files.map_err(|e| ("profile", e))?);
    }
    if inside.counters && crate::inside::counters::availability().is_ok() {
        let iters = m.iterations_per_sample;
        m.inside.counters =
            guarded(|| crate::backend::cpu::on_pool_of(width, || counted_pass(w.as_mut(), iters)))
                .map_err(|e| ("counters", e))?;
    }
    m.prepare_ns = prepare_ns;
    m.verify_ns = verify_ns;
    m.placements = placements;
    o.measurements.push(m);
    o.metrics = guarded(|| Ok(w.metrics())).map_err(|e| ("metrics", e))?;
    Ok(())
}

/// Hardware counters of one untimed call of a sample's iterations (the
/// case's fixed count when it has one), `None` when they cannot be read.
fn counted_pass(
    w: &mut dyn Workload,
    iters: u64,
) -> anyhow::Result<Option<crate::inside::counters::HwCounters>> {
    let n = w.fixed_iterations().map_or(iters.max(1), |f| f.max(1));
    w.before_sample()?;
    let counted = crate::inside::counters::count(|| w.run(n).and_then(|()| w.sync()));
    w.after_sample(false)?;
    match counted {
        Ok((ran, totals)) => {
            ran?;
            Ok(Some(crate::inside::counters::HwCounters::from_totals(&totals, n)))
        }
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
#[path = "runner_tests.rs"]
pub(crate) mod tests;
