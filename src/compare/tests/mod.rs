//! The stored comparison's unit tests: the fixtures and the verdict rule
//! here, the rendering ([`render`]), the shapes of result sets ([`sets`]) and
//! what the machine does to the cases ([`drift`]) in modules of their own.

use super::*;
use crate::analysis::{CaseOutcome, analyze};
use crate::config::Settings;
use crate::harness::sampler::Measurement;
use crate::plan::Case;
use crate::results::{AllocStats, CaseResult, Sample, StopReason};
use crate::workload::Verification;
use rand_distr::{Distribution, LogNormal};
use std::collections::HashMap;
use std::sync::OnceLock;

/// Fewer resamples than the default keep the module's tests fast.
fn opts() -> CompareOptions {
    CompareOptions { resamples: 2000, ..Default::default() }
}

fn outcome(name: &str, measurements: Vec<Measurement>, failure: Option<(String, String)>) -> CaseOutcome {
    CaseOutcome {
        case: Case::new("synthetic", name, Default::default()),
        failure,
        verification: Some(Verification::pass("synthetic")),
        throughput: vec![],
        measurements,
        skipped: None,
        metrics: Vec::new(),
        roof: None,
    }
}

/// 50 samples of 100 iterations; per-iteration times lognormal around
/// `scale` ms with a 2% spread, analysed like a real run.
fn timed_with_alloc(name: &str, scale: f64, seed: u64, alloc: Option<AllocStats>) -> CaseResult {
    let mut rng = crate::util::rng(seed);
    let spread = LogNormal::new(0.0, 0.02).expect("valid lognormal");
    // Four rounds of 25: the rounds replicate the run's state, so the
    // comparison needs no assumed run-to-run spread (see `single_group_...`).
    let samples = (0..100)
        .map(|i| Sample {
            iterations: 100,
            nanos: 1e6 * scale * spread.sample(&mut rng) * 100.0,
            round: i / 25,
        })
        .collect();
    let m = Measurement {
        samples,
        warm_up_ns: 1e9,
        iterations_per_sample: 100,
        requested: 100,
        stopped_by: StopReason::SampleSize,
        alloc,
        prepare_ns: 0.0,
        verify_ns: 0.0,
        placements: 1,
        screen: Default::default(),
        inside: Default::default(),
    };
    let settings = Settings { bootstrap_resamples: 100, ..Default::default() };
    analyze(&outcome(name, vec![m], None), &settings, None)
}

fn timed(name: &str, scale: f64, seed: u64) -> CaseResult {
    timed_with_alloc(name, scale, seed, None)
}

fn failed(name: &str) -> CaseResult {
    let why = Some(("verify".to_string(), "wrong answer".to_string()));
    analyze(&outcome(name, vec![], why), &Settings::default(), None)
}

fn report(cases: Vec<CaseResult>) -> RunReport {
    static TEMPLATE: OnceLock<RunReport> = OnceLock::new();
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut r = TEMPLATE.get_or_init(crate::report::fixture).clone();
    r.cases = cases;
    // The synthetic cases ran on one thread: a peak that grows with the same
    // allocations is a regression (on more threads it may be the same
    // buffers overlapping; `MemoryChange::with_threads`).
    r.harness.threads = 1;
    r.run_id = format!("run-{}", RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    r
}

fn compare_one(old: CaseResult, new: CaseResult, o: &CompareOptions) -> Comparison {
    compare("base", &report(vec![old]), "cand", &report(vec![new]), o)
}

fn alloc(peak_bytes: u64, allocs_per_iter: f64) -> AllocStats {
    AllocStats { allocs_per_iter, bytes_per_iter: 0.0, peak_bytes }
}

/// One regressed, one improved, one unchanged case, one per side only and
/// one failed.
fn mixed() -> Comparison {
    let old = vec![
        timed_with_alloc("slower", 1.0, 1, Some(alloc(1 << 20, 2.0))),
        timed("faster", 1.0, 2),
        timed("same", 1.0, 3),
        timed("gone", 1.0, 4),
        failed("broken"),
    ];
    let new = vec![
        timed_with_alloc("slower", 1.2, 5, Some(alloc(2 << 20, 2.0))),
        timed("faster", 0.8, 6),
        timed("same", 1.0, 7),
        timed("added", 1.0, 8),
        timed("broken", 1.0, 9),
    ];
    compare("main", &report(old), "feature|x", &report(new), &opts())
}

#[test]
fn verdict_rule() {
    let o = CompareOptions::default();
    let est = |point, lower, upper| Estimate { point, lower, upper, level: 0.95 };
    let cases = [
        (0.001, est(1.10, 1.05, 1.15), Verdict::Regressed),
        (0.001, est(0.90, 0.85, 0.95), Verdict::Improved),
        // Significant but straddling the band edge.
        (0.001, est(1.03, 1.01, 1.05), Verdict::Inconclusive),
        // Significant but inside the band: real, too small to matter.
        (0.001, est(1.005, 1.001, 1.009), Verdict::Unchanged),
        (0.5, est(1.0, 0.99, 1.01), Verdict::Unchanged),
        // Not significant, point inside the band, but the interval leaves
        // it: no evidence of "unchanged" (issue 28; was "unchanged").
        (0.5, est(1.0, 0.97, 1.03), Verdict::Inconclusive),
        // Not significant and the point outside the band.
        (0.5, est(1.05, 0.9, 1.2), Verdict::Inconclusive),
        // Whole interval beyond the band but not significant after BH.
        (0.02, est(1.10, 1.05, 1.15), Verdict::Inconclusive),
        (0.001, est(f64::NAN, f64::NAN, f64::NAN), Verdict::Inconclusive),
    ];
    for (q, ratio, want) in cases {
        assert_eq!(Verdict::decide(q, &ratio, &o), want, "q {q}, {ratio:?}");
    }
}

#[test]
fn ten_percent_slowdown_regresses_beyond_the_limit() {
    let c = compare_one(timed("op", 1.0, 1), timed("op", 1.1, 2), &opts());
    let ch = &c.changes[0];
    assert_eq!(ch.id, "synthetic/op");
    assert_eq!(ch.verdict, Verdict::Regressed);
    assert!(ch.beyond_limit && c.has_gating_failure());
    assert_eq!(c.regressions().len(), 1);
    assert!((ch.ratio.point - 1.1).abs() < 0.02, "{:?}", ch.ratio);
    assert!(ch.ratio.lower < ch.ratio.point && ch.ratio.point < ch.ratio.upper);
    assert!((ch.new_median_ns / ch.old_median_ns - ch.ratio.point).abs() < 1e-12);
    assert!(ch.p_value < 1e-10 && ch.q_value == ch.p_value, "{ch:?}");
    assert!(ch.memory.is_none());
    // Same data under a 15% limit: still regressed, no longer gating.
    let lenient = CompareOptions { max_regression: 0.15, ..opts() };
    let c = compare_one(timed("op", 1.0, 1), timed("op", 1.1, 2), &lenient);
    assert_eq!(c.changes[0].verdict, Verdict::Regressed);
    assert!(!c.changes[0].beyond_limit && !c.has_gating_failure());
}

#[test]
fn ten_percent_speedup_improves() {
    let c = compare_one(timed("op", 1.0, 3), timed("op", 0.9, 4), &opts());
    assert_eq!(c.changes[0].verdict, Verdict::Improved);
    assert!(!c.changes[0].beyond_limit && !c.has_gating_failure());
}

#[test]
fn same_distribution_is_unchanged_in_at_least_95_percent_of_trials() {
    let o = opts();
    let mut tally: HashMap<Verdict, usize> = HashMap::new();
    for trial in 0..200u64 {
        let c = compare_one(timed("op", 1.0, 1000 + 2 * trial), timed("op", 1.0, 1001 + 2 * trial), &o);
        *tally.entry(c.changes[0].verdict).or_default() += 1;
    }
    let unchanged = tally.get(&Verdict::Unchanged).copied().unwrap_or(0);
    assert!(unchanged >= 190, "{tally:?}");
    assert_eq!(tally.get(&Verdict::Regressed), None, "{tally:?}");
}

#[test]
fn one_percent_shift_is_never_regressed() {
    for seed in 0..20u64 {
        let c = compare_one(timed("op", 1.0, 500 + 2 * seed), timed("op", 1.01, 501 + 2 * seed), &opts());
        assert_ne!(c.changes[0].verdict, Verdict::Regressed, "seed {seed}: {:?}", c.changes[0]);
        assert!(!c.has_gating_failure());
    }
}

#[test]
fn benjamini_hochberg_keeps_the_real_regression_among_null_cases() {
    let names: Vec<String> = (0..20).map(|i| format!("null{i:02}")).collect();
    let mut old: Vec<CaseResult> = names.iter().zip(0..).map(|(n, i)| timed(n, 1.0, 100 + i)).collect();
    let mut new: Vec<CaseResult> = names.iter().zip(0..).map(|(n, i)| timed(n, 1.0, 200 + i)).collect();
    old.push(timed("slow", 2.0, 7));
    new.push(timed("slow", 2.2, 8));
    let c = compare("base", &report(old), "cand", &report(new), &opts());
    assert_eq!(c.changes.len(), 21);
    assert_eq!(c.changes[0].id, "synthetic/slow", "worst regression first");
    assert!(c.changes.windows(2).all(|w| w[0].ratio.point >= w[1].ratio.point));
    assert_eq!(c.count(Verdict::Regressed), 1);
    assert!(c.changes.iter().all(|ch| ch.q_value >= ch.p_value));
}

#[test]
fn missing_and_failed_cases_are_listed_not_compared() {
    let old = report(vec![timed("a", 1.0, 1), timed("b", 1.0, 2), failed("x"), timed("y", 1.0, 3)]);
    let new = report(vec![timed("b", 1.0, 4), timed("d", 1.0, 5), timed("x", 1.0, 6), failed("y")]);
    let c = compare("base", &old, "cand", &new, &opts());
    assert_eq!(c.only_in_baseline, ["synthetic/a"]);
    assert_eq!(c.only_in_candidate, ["synthetic/d"]);
    assert_eq!(c.failed, ["synthetic/x", "synthetic/y"]);
    let ids: Vec<&str> = c.changes.iter().map(|ch| ch.id.as_str()).collect();
    assert_eq!(ids, ["synthetic/b"]);
    // x failed on the baseline only (the candidate fixed it): listed, not
    // gating; y failed on the candidate: it gates, with its reason.
    use crate::compare::gate::FailedSide;
    let sides: Vec<(&str, FailedSide)> = c.failures.iter().map(|f| (f.id.as_str(), f.side)).collect();
    assert_eq!(sides, [("synthetic/x", FailedSide::Baseline), ("synthetic/y", FailedSide::Candidate)]);
    assert!(c.failures[1].reason.contains(": "), "{:?}", c.failures[1]);
    assert!(c.has_gating_failure(), "a candidate case failed");
    let fixed = report(vec![timed("b", 1.0, 4), timed("x", 1.0, 6), timed("y", 1.0, 7)]);
    assert!(!compare("base", &old, "cand", &fixed, &opts()).has_gating_failure(), "baseline-only failures");
}

#[test]
fn memory_growth_rules() {
    let limit = 0.20;
    let regressed = |o: AllocStats, n: AllocStats| MemoryChange::new(&o, &n, limit).regressed;
    let mib = 1 << 20;
    assert!(regressed(alloc(mib, 2.0), alloc(mib * 3 / 2, 2.0)), "peak +50%");
    assert!(!regressed(alloc(mib, 2.0), alloc(mib * 11 / 10, 2.0)), "peak +10%");
    assert!(regressed(alloc(mib, 2.0), alloc(mib, 3.0)), "allocs +50%");
    assert!(!regressed(alloc(0, 0.0), alloc(8, 0.0)), "0 -> 8 B is noise");
    assert!(regressed(alloc(0, 0.0), alloc(64 << 10, 0.0)), "0 -> 64 KiB");
    assert!(regressed(alloc(0, 0.0), alloc(0, 1.0)), "0 -> 1 alloc/iter");
    assert!(!regressed(alloc(0, 0.0), alloc(0, 0.01)), "0 -> 0.01 alloc/iter");
    assert!(!regressed(alloc(100, 0.0), alloc(1000, 0.0)), "under the peak floor");
    let m = MemoryChange::new(&alloc(0, 0.0), &alloc(64 << 10, 0.0), limit);
    assert_eq!((m.peak_ratio, m.allocs_ratio), (f64::INFINITY, 1.0));

    // Through compare: time unchanged, memory +50% gates, +10% does not.
    let old = report(vec![
        timed_with_alloc("grow", 1.0, 1, Some(alloc(mib, 2.0))),
        timed_with_alloc("drift", 1.0, 2, Some(alloc(mib, 2.0))),
    ]);
    let new = report(vec![
        timed_with_alloc("grow", 1.0, 3, Some(alloc(mib * 3 / 2, 2.0))),
        timed_with_alloc("drift", 1.0, 4, Some(alloc(mib * 11 / 10, 2.0))),
    ]);
    let c = compare("base", &old, "cand", &new, &opts());
    let flagged: Vec<&str> = c.memory_regressions().iter().map(|ch| ch.id.as_str()).collect();
    assert_eq!(flagged, ["synthetic/grow"]);
    assert!(c.regressions().is_empty() && c.has_gating_failure());
    let grow = c.changes.iter().find(|ch| ch.id == "synthetic/grow").expect("compared");
    assert_eq!(grow.memory.as_ref().map(|m| m.peak_ratio), Some(1.5));
}

#[test]
fn machine_mismatch_is_reported() {
    let old = report(vec![timed("op", 1.0, 1)]);
    let mut new = report(vec![timed("op", 1.0, 2)]);
    assert_eq!(compare("base", &old, "cand", &new, &opts()).machine_mismatch, None);
    new.environment.cpu_model = "Other CPU 9000".into();
    let c = compare("base", &old, "cand", &new, &opts());
    let m = c.machine_mismatch.as_deref().expect("mismatch");
    assert!(m.contains("AMD EPYC 7763") && m.contains("Other CPU 9000"), "{m}");
    assert!(m.contains(&old.environment.fingerprint()) && m.contains(&new.environment.fingerprint()));
    assert!(render_table(&c, false).starts_with("WARNING: machine mismatch"));
    assert!(render_markdown(&c).contains("WARNING: machine mismatch"));
}

#[test]
fn gpu_cases_on_another_kind_of_gpu_are_a_machine_mismatch() {
    let gpu = |name: &str, uuid: &str| crate::env::GpuEnvironment {
        device: "cuda:0".into(),
        name: name.into(),
        uuid: uuid.into(),
        compute_capability: "9.0".into(),
        memory_bytes: 80 << 30,
        driver_cuda_version: Some("13.0".into()),
        ..Default::default()
    };
    let mut old = report(vec![timed("op", 1.0, 1)]);
    let mut new = report(vec![timed("op", 1.0, 2)]);
    // Another card of the same kind is the same machine, as another CPU of
    // the same model is; a side that records no GPU is not judged.
    old.environment.gpus = vec![gpu("NVIDIA H100 80GB HBM3", "aa")];
    assert_eq!(compare("base", &old, "cand", &new, &opts()).machine_mismatch, None);
    new.environment.gpus = vec![gpu("NVIDIA H100 80GB HBM3", "bb")];
    assert_eq!(compare("base", &old, "cand", &new, &opts()).machine_mismatch, None);
    new.environment.gpus = vec![gpu("NVIDIA A100-SXM4-80GB", "cc")];
    let m = compare("base", &old, "cand", &new, &opts()).machine_mismatch.expect("mismatch");
    assert!(
        m.contains("GPU cases ran on cuda:0: NVIDIA H100") && m.contains("on cuda:0: NVIDIA A100"),
        "{m}"
    );
}

#[test]
fn comparisons_are_reproducible_and_seeded() {
    let (old, new) = (report(vec![timed("op", 1.0, 1)]), report(vec![timed("op", 1.05, 2)]));
    let a = compare("base", &old, "cand", &new, &opts());
    assert_eq!(a, compare("base", &old, "cand", &new, &opts()));
    let b = compare("base", &old, "cand", &new, &CompareOptions { seed: 99, ..opts() });
    assert_eq!(a.changes[0].ratio.point, b.changes[0].ratio.point);
    assert_ne!(a.changes[0].ratio.lower, b.changes[0].ratio.lower);
}

mod drift;
mod render;
mod sets;
