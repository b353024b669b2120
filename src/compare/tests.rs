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
fn markdown_has_summary_rows_and_lists() {
    let md = render_markdown(&mixed());
    assert!(md.contains("1 regressed, 1 improved, 1 unchanged, 0 inconclusive"), "{md}");
    assert!(md.contains("1 over the 5% regression limit, 1 memory regression"), "{md}");
    assert_eq!(md.lines().filter(|l| l.starts_with("| `synthetic/")).count(), 3, "{md}");
    assert!(md.contains("`feature\\|x`"), "pipes escaped:\n{md}");
    assert!(
        md.contains("**regressed (over limit)**")
            && md.contains("peak 2.00 MiB (+100.0%), 2 allocs/iter (=), over limit"),
        "{md}"
    );
    assert!(md.contains("only in baseline, not compared (1): `synthetic/gone`"), "{md}");
    assert!(md.contains("only in candidate, not compared (1): `synthetic/added`"), "{md}");
    assert!(md.contains("failed in either run, not compared (1): `synthetic/broken`"), "{md}");
    assert!(
        md.contains("- FAILED `synthetic/broken`: failed on the baseline side only: verify: wrong answer"),
        "{md}"
    );
    assert!(!md.contains("WARNING"));
}

#[test]
fn table_colours_only_on_request() {
    let c = mixed();
    let plain = render_table(&c, false);
    assert!(!plain.contains('\x1b'), "{plain}");
    assert!(plain.starts_with("`feature|x` vs baseline `main`: 1 regressed, 1 improved"), "{plain}");
    for needle in ["case", "old median", "change [95% CI]", "verdict", "synthetic/slower", "<0.001"] {
        assert!(plain.contains(needle), "{needle}:\n{plain}");
    }
    assert!(plain.contains("only in candidate, not compared (1): synthetic/added"));
    assert!(plain.ends_with('\n'));
    let coloured = render_table(&c, true);
    assert!(coloured.contains('\x1b'), "{coloured}");
    let empty = compare("a", &report(vec![]), "b", &report(vec![]), &opts());
    assert!(render_table(&empty, false).contains("no case measured in both runs"));
}

#[test]
fn json_parses_back() {
    let c = mixed();
    let text = render_json(&c).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["schema_version"], COMPARISON_SCHEMA_VERSION);
    assert_eq!(value["summary"]["regressed"], 1);
    assert_eq!(value["summary"]["gating_failure"], true);
    assert_eq!(value["changes"][0]["verdict"], "regressed");
    let back: Comparison = serde_json::from_value(value).unwrap();
    assert_eq!(back, c);
    // Growth from zero is written as null and read back as infinite.
    let mut c = c;
    c.changes[0].memory = Some(MemoryChange::new(&alloc(0, 0.0), &alloc(1 << 20, 0.0), 0.2));
    let back: Comparison = serde_json::from_str(&render_json(&c).unwrap()).unwrap();
    assert_eq!(back.changes[0].memory.as_ref().map(|m| m.peak_ratio), Some(f64::INFINITY));
}

#[test]
fn options_are_validated() {
    CompareOptions::default().validate().unwrap();
    let bad = [
        CompareOptions { alpha: 0.0, ..Default::default() },
        CompareOptions { noise_threshold: -0.1, ..Default::default() },
        CompareOptions { max_regression: f64::NAN, ..Default::default() },
        CompareOptions { max_memory_regression: -1.0, ..Default::default() },
        CompareOptions { confidence_level: 1.0, ..Default::default() },
        CompareOptions { resamples: 0, ..Default::default() },
    ];
    for o in bad {
        assert!(o.validate().is_err(), "{o:?}");
    }
}

/// `n` single-round samples around `scale` ms with a 2% spread.
fn one_round(name: &str, scale: f64, n: usize, seed: u64) -> CaseResult {
    let mut c = timed(name, scale, seed);
    c.samples.truncate(n);
    c.samples.iter_mut().for_each(|s| s.round = 0);
    c
}

#[test]
fn single_group_sides_get_an_assumed_run_spread_and_say_so() {
    let (old, new) = (one_round("op", 1.0, 50, 1), one_round("op", 1.0, 50, 2));
    let plain = CompareOptions { assumed_run_spread: 0.0, ..opts() };
    let narrow = compare_one(old.clone(), new.clone(), &plain);
    let honest = compare_one(old, new, &opts());
    let width = |c: &Comparison| c.changes[0].ratio.upper - c.changes[0].ratio.lower;
    // Two unreplicated sides add sqrt(2) x 1%: about +-2.8% at 95%.
    assert!(width(&honest) > width(&narrow) + 0.03, "{} vs {}", width(&honest), width(&narrow));
    assert_eq!(honest.changes[0].verdict, Verdict::Inconclusive, "an interval wider than the band");
    assert!(
        honest.notes.iter().any(|n| n.contains("assumed run-to-run spread of 1.0%")),
        "{:?}",
        honest.notes
    );
    assert!(narrow.notes.iter().all(|n| !n.contains("assumed")));
}

#[test]
fn too_few_samples_and_unchanged_only_with_evidence() {
    let c = compare_one(one_round("op", 1.0, 4, 1), one_round("op", 1.0, 50, 2), &opts());
    assert_eq!(c.changes[0].verdict, Verdict::TooFewSamples);
    assert!(render_table(&c, false).contains("too few samples"));
    // One sample a side used to give a zero-width interval and "unchanged".
    let c = compare_one(one_round("op", 1.0, 1, 1), one_round("op", 1.01, 1, 2), &opts());
    assert_eq!(c.changes[0].verdict, Verdict::TooFewSamples);
    // Every "unchanged" lies inside its band.
    let c = mixed();
    for ch in c.changes.iter().filter(|ch| ch.verdict == Verdict::Unchanged) {
        assert!(ch.ratio.lower >= 1.0 - ch.band && ch.ratio.upper <= 1.0 + ch.band, "{ch:?}");
    }
    let md = render_markdown(&c);
    assert!(
        md.contains("no change shown in 1 (interval inside the band); no evidence either way in 0"),
        "{md}"
    );
}

#[test]
fn different_isa_caps_are_named() {
    let mut old = report(vec![timed("op", 1.0, 1)]);
    let mut new = report(vec![timed("op", 1.0, 2)]);
    old.environment.max_isa = "native".into();
    new.environment.max_isa = "native".into();
    assert!(compare("a", &old, "b", &new, &opts()).notes.iter().all(|n| !n.contains("instruction-set caps")));
    new.environment.max_isa = "avx2".into();
    let c = compare("a", &old, "b", &new, &opts());
    assert!(
        c.notes.iter().any(|n| n.contains("different instruction-set caps") && n.contains("avx2")),
        "{:?}",
        c.notes
    );
}

#[test]
fn vacuous_comparisons_are_named() {
    let r = report(vec![timed("op", 1.0, 1)]);
    let c = compare("a", &r, "b", &r, &opts());
    assert!(c.vacuous.as_deref().is_some_and(|v| v.contains("compared with itself")), "{:?}", c.vacuous);
    // The same samples under another run id (a copied file) too.
    let mut copy = r.clone();
    copy.run_id = "other".into();
    let c = compare("a", &r, "b", &copy, &opts());
    assert!(c.vacuous.as_deref().is_some_and(|v| v.contains("identical samples")), "{:?}", c.vacuous);
    let c = compare("a", &report(vec![timed("x", 1.0, 1)]), "b", &report(vec![timed("y", 1.0, 2)]), &opts());
    assert_eq!(c.vacuous.as_deref(), Some("no case was measured in both result sets"));
    let c = compare("a", &report(vec![failed("x")]), "b", &report(vec![timed("x", 1.0, 2)]), &opts());
    assert!(c.vacuous.as_deref().is_some_and(|v| v.contains("1 failed")), "{:?}", c.vacuous);
    assert!(render_table(&c, false).contains("WARNING: nothing to judge"));
    // A real comparison is not vacuous.
    assert_eq!(mixed().vacuous, None);
}

#[test]
fn strict_reading_names_source_case_and_field() {
    let good = report(vec![timed("op", 1.0, 1)]);
    input::validate("f.json", &good).unwrap();
    let mut neg = good.clone();
    neg.cases[0].samples[3].nanos = -5.0;
    let e = input::validate("f.json", &neg).unwrap_err().to_string();
    assert!(e.contains("f.json") && e.contains("synthetic/op") && e.contains("samples[3].nanos"), "{e}");
    let mut zero = good.clone();
    zero.cases[0].samples[0].iterations = 0;
    let e = input::validate("f.json", &zero).unwrap_err().to_string();
    assert!(e.contains("samples[0].iterations is 0"), "{e}");
    let mut inf = good.clone();
    inf.cases[0].samples[1].nanos = f64::INFINITY;
    assert!(input::validate("f.json", &inf).is_err());
    let dup = report(vec![timed("op", 1.0, 1), timed("op", 1.0, 2)]);
    let e = input::validate("f.json", &dup).unwrap_err().to_string();
    assert!(e.contains("appears twice"), "{e}");
    let mut empty = good.clone();
    empty.cases[0].samples.clear();
    let e = input::validate("f.json", &empty).unwrap_err().to_string();
    assert!(e.contains("status ok but no `samples`"), "{e}");
    // A statistic written as null (could not be computed) still loads.
    let mut v = serde_json::to_value(&good).unwrap();
    v["cases"][0]["estimates"]["median"]["lower"] = serde_json::Value::Null;
    v["cases"][0]["estimates"]["std_dev"] = serde_json::Value::Null;
    let back: RunReport = serde_json::from_value(v).unwrap();
    assert!(back.cases[0].estimates.as_ref().unwrap().median.lower.is_nan());
}

#[test]
fn outlier_policy_of_the_runs_is_applied() {
    let mut old = timed("op", 1.0, 1);
    let mut new = timed("op", 1.0, 2);
    // Five wild samples in the candidate; removal drops them as `run` does.
    for s in new.samples.iter_mut().take(5) {
        s.nanos *= 10.0;
    }
    old.suite = "tensor".into();
    new.suite = "tensor".into();
    let (o, mut n) = (report(vec![old]), report(vec![new]));
    let keep = compare("a", &o, "b", &n, &opts());
    n.harness.settings.get_mut("tensor").unwrap().outliers = crate::config::OutlierPolicy::Remove;
    let removed = compare("a", &o, "b", &n, &opts());
    assert!(removed.notes.iter().any(|x| x.contains("outliers removed on the candidate side")));
    assert!(keep.notes.iter().all(|x| !x.contains("outliers removed")));
    let rounds = input::rounds_of(&n.cases[0], crate::config::OutlierPolicy::Remove);
    assert_eq!(rounds.iter().map(Vec::len).sum::<usize>(), 95, "the five outliers are dropped");
    assert!(removed.changes[0].ratio.upper <= keep.changes[0].ratio.upper);
}

#[test]
fn several_runs_per_side_are_levels_of_their_own() {
    let old: Vec<RunReport> =
        (0..3).map(|i| report(vec![timed("op", 1.0 + 0.02 * i as f64, 10 + i)])).collect();
    let new = vec![report(vec![timed("op", 1.0, 20)])];
    let c = compare_sets("a", &old, "b", &new, &Spreads::new(), &opts());
    assert_eq!(c.runs, (3, 1));
    // The baseline's runs differ by 2% steps: that spread reaches the interval.
    let ch = &c.changes[0];
    assert!(ch.ratio.upper - ch.ratio.lower > 0.02, "{:?}", ch.ratio);
    assert!(ch.old_samples == 300 && ch.new_samples == 100);
}

#[test]
fn learned_spread_sets_the_band() {
    let (old, new) = (report(vec![timed("op", 1.0, 1)]), report(vec![timed("op", 1.04, 2)]));
    let plain = compare_sets(
        "a",
        std::slice::from_ref(&old),
        "b",
        std::slice::from_ref(&new),
        &Spreads::new(),
        &opts(),
    );
    assert_eq!(plain.changes[0].verdict, Verdict::Regressed);
    let mut spreads = Spreads::new();
    spreads.insert("synthetic/op".into(), crate::history::Spread { run: 0.02, runs: 9, round: None });
    let wide = compare_sets("a", &[old], "b", &[new], &spreads, &opts());
    let ch = &wide.changes[0];
    assert!((ch.band - 0.06).abs() < 1e-12 && ch.band_source == "history (9 runs)", "{ch:?}");
    assert_eq!(ch.verdict, Verdict::Unchanged, "+4% [..] lies inside a 6% band learned from history");
    assert!(render_table(&wide, false).contains("±6.0% (history)"));
}

/// Two rounds of both canaries (20 each) at `scale` x 0.1 ms, 1% noise.
fn canaries(scale: f64, seed: u64) -> Vec<crate::results::CanarySample> {
    use crate::results::{CanaryKind, CanarySample};
    let mut rng = crate::util::rng(seed);
    let d = LogNormal::new(0.0, 0.01).unwrap();
    (0..40)
        .map(|i| CanarySample {
            kind: if i % 2 == 0 { CanaryKind::Compute } else { CanaryKind::Memory },
            round: i / 20,
            nanos: 1e5 * scale * d.sample(&mut rng),
            case: None,
        })
        .collect()
}

#[test]
fn machine_drift_from_canaries_is_measured_and_not_called_a_regression() {
    let names: Vec<String> = (0..12).map(|i| format!("c{i:02}")).collect();
    let mut old = report(names.iter().zip(0..).map(|(n, i)| timed(n, 1.0, 300 + i)).collect());
    // The whole machine 8% slower in the candidate; one case 30% on top.
    let mut new = report(
        names
            .iter()
            .zip(0..)
            .map(|(n, i)| timed(n, if i == 0 { 1.08 * 1.3 } else { 1.08 }, 400 + i))
            .collect(),
    );
    old.canaries = canaries(1.0, 1);
    new.canaries = canaries(1.08, 2);
    let c = compare("a", &old, "b", &new, &opts());
    let d = c.drift.as_ref().unwrap();
    assert!(d.beyond_band && d.judged_by == "canaries", "{d:?}");
    assert!(d.estimates.iter().any(|e| e.source == "compute canary" && (e.ratio.point - 1.08).abs() < 0.01));
    assert_eq!(c.count(Verdict::Regressed), 1, "only the case that moved beyond the machine");
    assert_eq!(c.changes[0].id, "synthetic/c00");
    assert!(c.notes.iter().any(|n| n.contains("the machine itself ran slower")), "{:?}", c.notes);
    // --normalize divides by the drift and says so.
    let n = compare("a", &old, "b", &new, &CompareOptions { normalize: true, ..opts() });
    assert!(n.notes.iter().any(|x| x.contains("normalised by the machine's drift")));
    let null = n.changes.iter().find(|ch| ch.id == "synthetic/c05").unwrap();
    assert!((null.ratio.point - 1.0).abs() < 0.01, "{:?}", null.ratio);
}

#[test]
fn a_peer_programs_figures_are_not_taken_for_machine_drift() {
    // tfbench's run against a peer (PyTorch's twins) that is 30% slower in
    // every case: without the mark that shift looks like the machine.
    let names: Vec<String> = (0..12).map(|i| format!("c{i:02}")).collect();
    let ours = report(names.iter().zip(0..).map(|(n, i)| timed(n, 1.0, 700 + i)).collect());
    let mut theirs = report(names.iter().zip(0..).map(|(n, i)| timed(n, 1.3, 800 + i)).collect());
    let c = compare("torch", &theirs, "ours", &ours, &opts());
    assert!(c.drift.as_ref().unwrap().beyond_band);
    assert_eq!(c.count(Verdict::Improved), 0, "every case moved with the 'machine'");
    theirs.environment.peer = Some("PyTorch 2.11.0".into());
    for o in [opts(), CompareOptions { normalize: true, ..opts() }] {
        let c = compare("torch", &theirs, "ours", &ours, &o);
        assert!(!c.drift.as_ref().unwrap().beyond_band);
        assert_eq!(c.count(Verdict::Improved), 12, "{:?}", c.notes);
        assert!(
            c.notes.iter().any(|n| n.contains("another program's figures (PyTorch 2.11.0)")),
            "{:?}",
            c.notes
        );
        assert!(!c.notes.iter().any(|n| n.contains("normalised")), "{:?}", c.notes);
    }
}

#[test]
fn rounds_run_while_another_process_held_a_core_are_set_aside() {
    use crate::results::LoadSample;
    let names: Vec<String> = (0..10).map(|i| format!("c{i:02}")).collect();
    let old = report(names.iter().zip(0..).map(|(n, i)| timed(n, 1.0, 500 + i)).collect());
    let mut new = report(names.iter().zip(0..).map(|(n, i)| timed(n, 1.0, 600 + i)).collect());
    // c03: rounds 2 and 3 three times slower, with other work holding most
    // of a core meanwhile. c07: every round 3x slower and every round
    // disturbed. c05: 30% slower and nothing disturbed (a real change).
    let slow = |case: &mut CaseResult, rounds: &[u32], f: f64| {
        for s in case.samples.iter_mut().filter(|s| rounds.contains(&s.round)) {
            s.nanos *= f;
        }
    };
    slow(&mut new.cases[3], &[2, 3], 3.0);
    slow(&mut new.cases[7], &[0, 1, 2, 3], 3.0);
    slow(&mut new.cases[5], &[0, 1, 2, 3], 1.3);
    slow(&mut new.cases[9], &[0, 1, 2, 3], 10.0); // c09: 10x, all disturbed: beyond what 0.7 core explains
    let disturbed = |i: usize, r: u32| (i == 3 && r >= 2) || i == 7 || i == 9;
    new.load = (0..4u32)
        .flat_map(|r| (0..names.len()).map(move |i| (r, i)))
        .map(|(r, i)| LoadSample {
            case: new.cases[i].id.clone(),
            round: r,
            wall_ns: 1e9,
            others_ns: if disturbed(i, r) { 7e8 } else { 5e6 },
            steal_ns: 0.0,
            cpus: 2,
            threads: 2,
        })
        .collect();
    let mut quiet = new.clone();
    quiet.load.clear();
    let undisturbed = compare("a", &old, "b", &quiet, &opts());
    let called = |c: &Comparison, id: &str| c.changes.iter().find(|ch| ch.id == id).unwrap().clone();
    assert_eq!(
        called(&undisturbed, "synthetic/c07").verdict,
        Verdict::Regressed,
        "without load figures: called"
    );

    let c = compare("a", &old, "b", &new, &opts());
    let c03 = called(&c, "synthetic/c03");
    assert!(!matches!(c03.verdict, Verdict::Regressed), "{c03:?}");
    assert!((c03.ratio.point - 1.0).abs() < 0.02, "judged on its clean rounds: {:?}", c03.ratio);
    assert!(
        c03.disturbed.as_deref().is_some_and(|d| d.contains("2 candidate round(s) set aside")),
        "{c03:?}"
    );
    let c07 = called(&c, "synthetic/c07");
    assert_eq!(c07.verdict, Verdict::Inconclusive, "no clean round: not called changed");
    assert!(
        !c07.beyond_limit && c07.disturbed.as_deref().is_some_and(|d| d.contains("every candidate round"))
    );
    assert_eq!(called(&c, "synthetic/c09").verdict, Verdict::Regressed, "x10 > 1 + 3 x 0.7: still called");
    let c05 = called(&c, "synthetic/c05");
    assert_eq!(c05.verdict, Verdict::Regressed, "a real change on a quiet machine is still caught");
    assert!(c05.disturbed.is_none());
    assert!(c.notes.iter().any(|n| n.contains("measured while the machine was disturbed")), "{:?}", c.notes);
    assert!(render_table(&c, false).contains("every candidate round ran disturbed"));
}

/// A case whose rounds (25 samples each, 1% noise) centre on `scales` ms.
fn rounds_at(name: &str, scales: &[f64], seed: u64) -> CaseResult {
    let mut c = timed(name, 1.0, seed);
    let mut rng = crate::util::rng(seed ^ 0x5eed);
    let noise = LogNormal::new(0.0, 0.01).expect("valid lognormal");
    c.samples = scales
        .iter()
        .enumerate()
        .flat_map(|(r, &s)| (0..25).map(move |_| (r as u32, s)))
        .map(|(round, s)| Sample { iterations: 100, nanos: 1e6 * s * noise.sample(&mut rng) * 100.0, round })
        .collect();
    c
}

/// `c` declared as moving 64 MiB per iteration: a large case.
fn large(mut c: CaseResult) -> CaseResult {
    c.throughput = vec![crate::results::ThroughputEstimate {
        kind: crate::workload::ThroughputKind::Bytes,
        per_iteration: 64.0 * 1024.0 * 1024.0,
        rate: Estimate { point: 1.0, lower: 1.0, upper: 1.0, level: 0.95 },
        pct_of_peak: None,
    }];
    c
}

#[test]
fn large_cases_that_move_together_are_judged_relative_to_each_other() {
    // Twelve large cases; in the candidate half of them moved +8% together
    // (the host's shared cache and memory), one moved +30% (a real change),
    // the rest held. Their median moved, but not clearly beyond the band, so
    // no machine drift is declared. Ten small cases held, one regressed +15%.
    let mut old = Vec::new();
    let mut new = Vec::new();
    for i in 0..12u64 {
        let name = format!("big{i:02}");
        let f = match i {
            0 => 1.30,
            1..=6 => 1.08,
            _ => 1.0,
        };
        old.push(large(rounds_at(&name, &[1.0, 1.0, 1.0, 1.0], 100 + i)));
        new.push(large(rounds_at(&name, &[f, f, f, f], 200 + i)));
    }
    for i in 0..10u64 {
        let name = format!("small{i:02}");
        let f = if i == 0 { 1.15 } else { 1.0 };
        old.push(rounds_at(&name, &[1.0, 1.0, 1.0, 1.0], 300 + i));
        new.push(rounds_at(&name, &[f, f, f, f], 400 + i));
    }
    let c = compare("a", &report(old), "b", &report(new), &opts());
    let verdict = |id: &str| c.changes.iter().find(|ch| ch.id == format!("synthetic/{id}")).unwrap().verdict;
    let g = c.drift.as_ref().and_then(|d| d.large().copied()).expect("a large-case estimate");
    assert!(g.point > 1.0 && g.lower < 1.02, "moved, not clearly beyond the 2% band: {g:?}");
    assert_eq!(verdict("big00"), Verdict::Regressed, "+30% is beyond the large cases' +{:.1}%", g.point);
    for i in 1..=6 {
        assert_eq!(verdict(&format!("big{i:02}")), Verdict::Inconclusive, "big{i:02} moved with the others");
    }
    assert_eq!(verdict("small00"), Verdict::Regressed, "small cases are not judged against the large ones");
    assert_eq!(c.count(Verdict::Regressed), 2);
    assert!(
        c.notes.iter().any(|n| n.contains("6 large case(s) moved with the large cases")),
        "{:?}",
        c.notes
    );
}

#[test]
fn a_side_left_with_one_round_carries_the_spread_between_rounds() {
    // The baseline's rounds of this case disagree by +-8%; the candidate has
    // one round, 12% slower than the baseline's middle: one round's luck.
    let old = rounds_at("op", &[0.92, 1.08, 0.92, 1.08], 1);
    let new = rounds_at("op", &[1.12], 2);
    let c = compare_one(old, new.clone(), &opts());
    let ch = &c.changes[0];
    assert_eq!(ch.verdict, Verdict::Inconclusive, "{ch:?}");
    assert!(ch.ratio.lower < 1.02, "the interval holds a round's luck: {:?}", ch.ratio);

    // Steady baseline rounds: the same candidate round is a regression...
    let steady = rounds_at("op", &[1.0, 1.0, 1.0, 1.0], 3);
    let c = compare_one(steady.clone(), new.clone(), &opts());
    assert_eq!(c.changes[0].verdict, Verdict::Regressed, "{:?}", c.changes[0]);
    // ...unless history says this case's rounds disagree that much.
    let mut spreads = Spreads::new();
    spreads.insert("synthetic/op".into(), crate::history::Spread { run: 0.01, runs: 10, round: Some(0.08) });
    let c = compare_sets("a", &[report(vec![steady])], "b", &[report(vec![new])], &spreads, &opts());
    assert_eq!(c.changes[0].verdict, Verdict::Inconclusive, "{:?}", c.changes[0]);
}

#[test]
fn smaller_cases_that_moved_together_are_judged_relative_to_their_median() {
    // Flat canaries: the machine, as far as they see, did not move.
    let names: Vec<String> = (0..24).map(|i| format!("c{i:02}")).collect();
    let side = |shift: f64, c05: f64, seed: u64| {
        let mut r = report(
            names
                .iter()
                .zip(0..)
                .map(|(n, i)| timed(n, if i == 5 { shift * c05 } else { shift }, seed + i))
                .collect(),
        );
        r.canaries = canaries(1.0, seed);
        r
    };
    let old = side(1.0, 1.0, 700);
    // A few minutes of the host slowed every case by 4.5% (the canaries saw
    // nothing); c05 is 30% slower on top of that: only it is called.
    let moved = compare("a", &old, "b", &side(1.045, 1.3, 800), &opts());
    let regressed: Vec<&str> =
        moved.changes.iter().filter(|c| c.verdict == Verdict::Regressed).map(|c| c.id.as_str()).collect();
    assert_eq!(regressed, ["synthetic/c05"], "{:?}", moved.notes);
    let small = moved.drift.as_ref().and_then(|d| d.small().copied()).expect("the smaller cases' median");
    assert!(small.lower > 1.02 && (small.point - 1.045).abs() < 0.01, "{small:?}");
    assert!(
        moved.notes.iter().any(|n| n.contains("moved with the other smaller cases")),
        "{:?}",
        moved.notes
    );
    // The gate speaks for c05 alone.
    assert!(moved.changes.iter().filter(|c| c.beyond_limit).all(|c| c.id.ends_with("c05")));
    // The same change on a host that held still: c05 alone, judged on its
    // own, and no case said to have moved with the others.
    let still = compare("a", &old, "b", &side(1.0, 1.3, 900), &opts());
    let regressed: Vec<&str> =
        still.changes.iter().filter(|c| c.verdict == Verdict::Regressed).map(|c| c.id.as_str()).collect();
    assert_eq!(regressed, ["synthetic/c05"]);
    assert!(
        !still.notes.iter().any(|n| n.contains("moved with the other smaller cases")),
        "{:?}",
        still.notes
    );
}

#[test]
fn smoke_profile_sides_are_judged_with_a_wide_band_and_say_so() {
    // The runs' settings say how they were measured: a --quick budget of
    // 0.08 s of samples per case on the baseline side.
    let smoke = |mut r: RunReport| {
        let quick = Settings { measurement_time: 0.08, ..Default::default() };
        r.harness.settings.insert("synthetic".into(), quick);
        r
    };
    let old = smoke(report(vec![timed("a", 1.0, 1), timed("b", 1.0, 2), timed("c", 1.0, 3)]));
    let new = report(vec![timed("a", 1.3, 4), timed("b", 3.0, 5), timed("c", 1.0, 6)]);
    let c = compare("base", &old, "cand", &new, &opts());
    let verdict = |id: &str| c.changes.iter().find(|ch| ch.id == format!("synthetic/{id}")).unwrap();
    // +30% is quick-profile noise (an A/A pair of quick runs differs by that
    // much); 3x is breakage and still gates.
    assert_eq!(verdict("a").verdict, Verdict::Unchanged, "{:?}", verdict("a"));
    assert_eq!(verdict("a").band_source, "smoke profile");
    assert_eq!(verdict("b").verdict, Verdict::Regressed);
    assert!(c.has_gating_failure());
    assert!(c.notes.iter().any(|n| n.contains("smoke profile") && n.contains("±60%")), "{:?}", c.notes);
    // Full-profile sides keep the default band: +30% is a regression.
    let full = compare(
        "base",
        &report(vec![timed("a", 1.0, 1)]),
        "cand",
        &report(vec![timed("a", 1.3, 4)]),
        &opts(),
    );
    assert_eq!(full.changes[0].verdict, Verdict::Regressed);
}
