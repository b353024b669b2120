//! What the machine does to the cases: canary drift, a peer program,
//! disturbed rounds, large and smaller cases moving together, smoke profiles.

use super::*;

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
