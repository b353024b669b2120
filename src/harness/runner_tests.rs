//! The one preparation path: `run` (and so a bench target's `--bench`
//! mode) and `ab`'s workers make a case ready through [`prepare_case`],
//! which checks it before any test hook wraps it. Helpers here are shared
//! with the worker's own test (`app::ab::worker`).

use super::*;
use crate::bench::{Benches, Routine};
use crate::workload::Throughput;
use std::sync::{Arc, Mutex};

/// What a [`Recorder`] saw, in order.
pub(crate) type Log = Arc<Mutex<Vec<String>>>;

/// A workload that records the harness's calls on it: `set_time_limit`,
/// `verify`, every `run` with its iterations and its own time in ns, and
/// `measured` after a call whose time became a sample. It spins 50 us per
/// iteration.
struct Recorder {
    log: Log,
}

impl Recorder {
    fn note(&self, what: String) {
        self.log.lock().expect("log").push(what);
    }
}

impl Workload for Recorder {
    fn verify(&mut self) -> anyhow::Result<Verification> {
        self.note("verify".into());
        Ok(Verification::pass("the recorder"))
    }
    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::items(1.0)]
    }
    fn run(&mut self, iters: u64) -> anyhow::Result<()> {
        let t = std::time::Instant::now();
        for _ in 0..iters {
            let s = std::time::Instant::now();
            while s.elapsed().as_micros() < 50 {}
        }
        self.note(format!("run {iters} {}", t.elapsed().as_nanos()));
        Ok(())
    }
    fn after_sample(&mut self, measured: bool) -> anyhow::Result<()> {
        if measured {
            self.note("measured".into());
        }
        Ok(())
    }
    fn set_time_limit(&mut self, _limit: std::time::Duration) {
        self.note("set_time_limit".into());
    }
}

/// A bench target's registry with one case, `t/rec`, whose preparation
/// (`prepare`) and workload record into `log`.
pub(crate) fn recording_registry(log: &Log) -> Vec<&'static dyn suites::Suite> {
    let mut c = Benches::new("t");
    let log = log.clone();
    c.bench_function("rec", move |_| {
        log.lock().expect("log").push("prepare".into());
        Routine::from_workload(Recorder { log: log.clone() })
    });
    c.into_registry().expect("a valid registration")
}

/// The plan of `reg`: three samples, a time limit, one copy.
pub(crate) fn recording_plan(reg: &[&'static dyn suites::Suite]) -> Resolved {
    use clap::Parser;
    let argv =
        ["t-0123456789abcdef", "--quick", "--no-canary", "--bench", "--sample-size", "3", "--max-time", "60"];
    let args = crate::cli::BenchArgs::try_parse_from(argv).expect("arguments parse");
    crate::app::plan_in(reg, &args.run).expect("the plan resolves")
}

/// The calls before the first `run` (the preparation's steps), and each
/// measured call's iterations and own time, ns.
pub(crate) fn read_log(log: &Log) -> (Vec<String>, Vec<(u64, f64)>) {
    let log = log.lock().expect("log").clone();
    let first_run = log.iter().position(|l| l.starts_with("run ")).unwrap_or(log.len());
    let measured = log
        .windows(2)
        .filter(|w| w[1] == "measured")
        .filter_map(|w| {
            let mut parts = w[0].strip_prefix("run ")?.split(' ');
            Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
        })
        .collect();
    (log[..first_run].to_vec(), measured)
}

/// Calls of [`prepare_case`] on this thread so far.
pub(crate) fn prepared() -> usize {
    PREPARED.with(|c| c.get())
}

#[test]
fn run_prepares_through_prepare_case_and_checks_before_the_hook_wraps() {
    let log = Log::default();
    let reg = recording_registry(&log);
    let plan = recording_plan(&reg);
    let slow = crate::harness::inject::Injection::parse("^t/rec$=1.5").expect("a valid spec");
    let hooks = RunHooks { canaries: false, inject: Some(&slow), panics: None, ..Default::default() };
    let clock = super::super::timer::calibrate();
    let mut finish = |o: &CaseOutcome, s: &crate::config::Settings| crate::analysis::analyze(o, s, None);
    let before = prepared();
    let done = execute_with(&plan, &clock, &mut Silent, &hooks, &mut finish);
    assert_eq!(prepared() - before, plan.rounds as usize, "one prepare_case per case and round");
    let r = &done.cases[0];
    assert_eq!(r.status, crate::results::CaseStatus::Ok, "{:?}", r.status);
    assert!(r.verification.as_ref().is_some_and(|v| v.passed && v.reference == "the recorder"));
    assert!(r.notes.iter().any(|n| n.contains("INJECTED SLOWDOWN x1.5")), "{:?}", r.notes);
    // Prepared, limited, checked, and only then wrapped: the wrapper
    // refuses to verify, so a check through it would have failed the case.
    let (steps, measured) = read_log(&log);
    assert_eq!(steps, ["prepare", "set_time_limit", "verify"]);
    // Every sample is the slowed call: at least 1.5x the recorder's own
    // time for it (the wrapper spins until that share has passed).
    // On a loaded host the screening (`harness::screen`) may have measured
    // the case once more: the samples kept are the last calls.
    assert!(measured.len() >= r.samples.len(), "{} calls, {} samples", measured.len(), r.samples.len());
    let kept = &measured[measured.len() - r.samples.len()..];
    for (s, (iters, own)) in r.samples.iter().zip(kept) {
        assert_eq!(s.iterations, *iters);
        assert!(s.nanos >= 1.5 * own, "a sample of {} ns for {own} ns of the case's own time", s.nanos);
    }
}

#[test]
fn a_case_without_the_hook_is_not_wrapped_and_a_refusal_skips() {
    let log = Log::default();
    let reg = recording_registry(&log);
    let plan = recording_plan(&reg);
    let case = &plan.cases[0];
    let suite = plan.suite(&case.suite).expect("the plan's suite");
    let other = crate::harness::inject::Injection::parse("^other$=2").expect("a valid spec");
    let hooks = RunHooks { canaries: false, inject: Some(&other), panics: None, ..Default::default() };
    let settings = plan.settings.get(&case.suite).cloned().unwrap_or_default();
    let p = Preparation::of(case, &settings, &hooks);
    assert_eq!((p.slow, p.panic, p.verify, p.max_time), (None, false, true, Some(60.0)));
    let Ok(mut ready) = quiet_panics(|| prepare_case(suite, case, &p)) else { panic!("not ready") };
    // Not wrapped: the workload verifies again (the wrapper would refuse).
    assert!(ready.workload.verify().is_ok_and(|v| v.passed));
    assert!(ready.verification.is_some() && ready.verify_ns > 0.0 && ready.placements == 1);
    // A case for a device this machine lacks is refused before preparing.
    let mut elsewhere = case.clone();
    // (No machine has GPU number u32::MAX.)
    elsewhere.device = crate::backend::Device::Cuda(u32::MAX);
    if elsewhere.device.availability().is_err() {
        let before = log.lock().expect("log").len();
        assert!(matches!(prepare_case(suite, &elsewhere, &p), Err(NotReady::Skipped(_))));
        assert_eq!(log.lock().expect("log").len(), before, "nothing prepared");
    }
}
