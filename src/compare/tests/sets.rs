//! Result sets of every shape: single rounds, too few samples, caps, vacuous
//! pairs, strict reading, outlier policies, several runs, learned spreads.

use super::*;

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
