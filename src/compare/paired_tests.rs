//! Tests of [`super`]: the paired rule on seeded synthetic rounds.

use super::*;
use rand_distr::{Distribution, Normal};

/// Paired samples with a drifting machine: each pair shares a level that
/// wanders by +-20%, the head is `shift` slower, and the pairs fall in
/// `rounds` rounds whose head process is off by its own luck, drawn
/// from N(0, `luck`).
fn drifting(id: &str, n: usize, shift: f64, rounds: usize, luck: f64, seed: u64) -> PairedCase {
    let mut rng = crate::util::rng(seed);
    let noise = Normal::new(0.0, 0.01).unwrap();
    let offsets: Vec<f64> =
        (0..rounds).map(|_| 1.0 + luck * Normal::new(0.0, 1.0).unwrap().sample(&mut rng)).collect();
    let (mut base, mut head, mut round) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let r = i * rounds / n;
        let level = 100.0 * (1.0 + 0.2 * (i as f64 / 7.0).sin());
        base.push(level * (1.0 + noise.sample(&mut rng)));
        head.push(level * shift * offsets[r] * (1.0 + noise.sample(&mut rng)));
        round.push(r as u32);
    }
    PairedCase { id: id.into(), base, head, round, load: Vec::new(), suspect: Vec::new(), looks: 1 }
}

#[test]
fn drift_cancels_in_the_pairs() {
    let o = CompareOptions { resamples: 100, ..Default::default() };
    let cases = [
        drifting("same", 120, 1.0, 6, 0.002, 1),
        drifting("slow", 120, 1.10, 6, 0.002, 2),
        drifting("fast", 120, 0.95, 6, 0.002, 3),
    ];
    let c = compare_paired("base", "head", &cases, vec![], vec!["x".into()], &o);
    let get = |id: &str| c.changes.iter().find(|ch| ch.id == id).unwrap();
    assert_eq!(get("same").verdict, Verdict::Unchanged, "{:?}", get("same"));
    assert_eq!(get("slow").verdict, Verdict::Regressed);
    assert!(get("slow").beyond_limit && c.has_gating_failure());
    assert!((get("slow").ratio.point - 1.10).abs() < 0.01);
    assert_eq!(get("fast").verdict, Verdict::Improved);
    assert_eq!(c.method, Method::Paired);
    assert_eq!(c.skipped, ["x"]);
    assert!(c.vacuous.is_none());
    assert_eq!(c.notes.len(), 1, "every case had rounds to judge on: {:?}", c.notes);
}

#[test]
fn a_process_s_luck_is_not_a_change() {
    // One pair of processes whose head is 6% off by luck: judged on its
    // pairs alone, that reads as a regression past the limit...
    let o = CompareOptions::default();
    let lucky = PairedCase { round: vec![0; 100], ..drifting("lucky", 100, 1.06, 1, 0.0, 4) };
    let c = compare_paired("a", "b", std::slice::from_ref(&lucky), vec![], vec![], &o);
    assert_eq!(c.changes[0].verdict, Verdict::Regressed);
    assert!(c.notes.iter().any(|n| n.contains("fewer than 3 rounds")), "{:?}", c.notes);
    // ...while over rounds with fresh processes, each off by 6% (SD) of
    // luck and no real change, no plan of 20 null cases gates.
    for seed in 0..20 {
        let cases: Vec<PairedCase> =
            (0..20).map(|k| drifting(&format!("c{k}"), 60, 1.0, 6, 0.06, 100 * seed + k)).collect();
        let c = compare_paired("a", "b", &cases, vec![], vec![], &o);
        assert!(
            !c.has_gating_failure(),
            "seed {seed}: {:?}",
            c.changes.iter().map(|x| x.verdict).collect::<Vec<_>>()
        );
    }
    // A real 15% slowdown still stands out over that luck.
    let slow = drifting("slow", 60, 1.15, 6, 0.01, 7);
    let c = compare_paired("a", "b", &[slow], vec![], vec![], &o);
    assert_eq!(c.changes[0].verdict, Verdict::Regressed, "{:?}", c.changes[0]);
}

#[test]
fn an_order_effect_between_rounds_is_not_noise() {
    // Each round's pairs share the order effect of its parity (+-6%) and
    // a little luck; the head is 5% slower. Judged as one spread, the
    // alternation hides the change; blocked by order, it stands out.
    let o = CompareOptions::default();
    let mut rng = crate::util::rng(11);
    let luck = Normal::new(0.0, 0.005).unwrap();
    let (mut base, mut head, mut round) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..12u32 {
        let order = if r % 2 == 0 { 1.06 } else { 1.0 / 1.06 };
        let l = 1.0 + luck.sample(&mut rng);
        for _ in 0..9 {
            base.push(100.0);
            head.push(100.0 * 1.05 * order * l);
            round.push(r);
        }
    }
    let case = PairedCase {
        id: "ordered".into(),
        base,
        head,
        round,
        load: Vec::new(),
        suspect: Vec::new(),
        looks: 1,
    };
    let c = compare_paired("a", "b", std::slice::from_ref(&case), vec![], vec![], &o);
    let ch = &c.changes[0];
    assert_eq!(ch.verdict, Verdict::Regressed, "{ch:?}");
    assert!((ch.ratio.point - 1.05).abs() < 0.01 && ch.ratio.upper - ch.ratio.lower < 0.02, "{ch:?}");
    // The same with no change: unchanged, not a false call either way.
    let same = PairedCase { head: case.head.iter().map(|h| h / 1.05).collect(), ..case };
    let c = compare_paired("a", "b", &[same], vec![], vec![], &o);
    assert_eq!(c.changes[0].verdict, Verdict::Unchanged, "{:?}", c.changes[0]);
}

/// What other work took in `round` of a one-thread run on 2 CPUs: `taken`
/// cores beyond the spare one, over 1 s.
fn load(case: &str, round: u32, taken: f64) -> crate::results::LoadSample {
    crate::results::LoadSample {
        case: case.into(),
        round,
        wall_ns: 1e9,
        others_ns: (1.0 + taken) * 1e9,
        steal_ns: 0.0,
        cpus: 2,
        threads: 1,
    }
}

#[test]
fn a_disturbed_round_is_set_aside_while_enough_clean_ones_remain() {
    let o = CompareOptions::default();
    // Twelve rounds, no change; in round 3 the head's samples ran 30%
    // slow while another process held a core.
    let mut case = drifting("x", 108, 1.0, 12, 0.004, 21);
    for (h, r) in case.head.iter_mut().zip(&case.round) {
        if *r == 3 {
            *h *= 1.3;
        }
    }
    let loud = compare_paired("a", "b", std::slice::from_ref(&case), vec![], vec![], &o);
    assert_ne!(loud.changes[0].verdict, Verdict::Unchanged, "{:?}", loud.changes[0]);
    assert!(loud.changes[0].disturbed.is_none());
    // With the kernel's figures for every round (round 3 disturbed,
    // another round with background noise only), round 3 goes.
    case.load = (0..12).map(|r| load("x", r, if r == 3 { 0.8 } else { 0.01 })).collect();
    let c = compare_paired("a", "b", std::slice::from_ref(&case), vec![], vec![], &o);
    let ch = &c.changes[0];
    assert_eq!(ch.verdict, Verdict::Unchanged, "{ch:?}");
    assert_eq!(ch.disturbed.as_deref(), Some("1 round(s) set aside, up to 0.80 of a core taken"));
    assert!(c.notes.iter().any(|n| n.contains("1 were judged on their clean rounds")), "{:?}", c.notes);
    // Too few clean rounds left: every round is kept, and the case says so.
    let short = drifting("y", 27, 1.0, 3, 0.004, 22);
    let short = PairedCase { load: vec![load("y", 1, 0.5)], ..short };
    let c = compare_paired("a", "b", &[short], vec![], vec![], &o);
    let line = c.changes[0].disturbed.as_deref().unwrap_or_default();
    assert!(line.starts_with("1 of 3 rounds ran disturbed") && line.contains("kept"), "{line}");
    assert!(c.notes.iter().any(|n| n.contains("1 kept them")), "{:?}", c.notes);
}

#[test]
fn a_round_that_timed_the_tick_is_set_aside_or_leaves_the_case_unjudged() {
    let o = CompareOptions::default();
    // Twelve rounds, no change; in round 5 the head's samples timed
    // the scheduler's tick (4 ms each) and the screen said so twice.
    let mut case = drifting("x", 108, 1.0, 12, 0.004, 23);
    for (h, r) in case.head.iter_mut().zip(&case.round) {
        if *r == 5 {
            *h *= 40.0;
        }
    }
    let why = "measured twice: head build: 9 of 9 samples last a whole number of scheduler ticks";
    case.suspect = vec![(5, why.into())];
    let c = compare_paired("a", "b", std::slice::from_ref(&case), vec![], vec![], &o);
    let ch = &c.changes[0];
    assert_eq!(ch.verdict, Verdict::Unchanged, "{ch:?}");
    let line = ch.disturbed.as_deref().unwrap_or_default();
    assert!(line.starts_with("1 round(s) set aside: the samples of 1 timed something else"), "{line}");
    // The disturbance note counts only rounds the kernel's counters flagged.
    assert!(!c.notes.iter().any(|n| n.contains("judged on their clean rounds")), "{:?}", c.notes);
    // Three rounds, one suspect: nothing to set it aside for, so the
    // case is not judged, whatever its ratio, and a note names it.
    let mut short = drifting("y", 27, 1.0, 3, 0.004, 24);
    for (h, r) in short.head.iter_mut().zip(&short.round) {
        if *r == 1 {
            *h *= 40.0;
        }
    }
    short.suspect = vec![(1, why.into())];
    let c = compare_paired("a", "b", &[short], vec![], vec![], &o);
    assert_eq!(c.changes[0].verdict, Verdict::Inconclusive, "{:?}", c.changes[0]);
    assert!(
        c.notes
            .iter()
            .any(|n| n.starts_with("1 case(s) not judged: the harness's screen") && n.contains("y (")),
        "{:?}",
        c.notes
    );
}

/// `ab`'s options as its command line gives them by default.
fn ab_defaults() -> CompareOptions {
    use clap::Parser;
    let cli = crate::cli::Cli::try_parse_from(["tfbench", "ab", "--base", "a", "--head", "b"]).unwrap();
    let crate::cli::Command::Ab(args) = cli.command else { panic!("not ab") };
    let g = &args.gate;
    CompareOptions {
        alpha: g.alpha,
        case_alpha: g.case_alpha,
        noise_threshold: g.noise_threshold / 100.0,
        max_regression: g.max_regression / 100.0,
        ..Default::default()
    }
}

#[test]
fn ab_s_alpha_defaults_to_the_paired_level_and_compare_s_does_not() {
    use clap::Parser;
    assert_eq!(ab_defaults().alpha, DEFAULT_ALPHA);
    let cli = crate::cli::Cli::try_parse_from(["tfbench", "compare", "--baseline", "a"]).unwrap();
    let crate::cli::Command::Compare(args) = cli.command else { panic!("not compare") };
    assert_eq!(args.gate.alpha, CompareOptions::default().alpha);
    let cli =
        crate::cli::Cli::try_parse_from(["tfbench", "ab", "--base", "a", "--head", "b", "--alpha", "0.01"]);
    let crate::cli::Command::Ab(args) = cli.unwrap().command else { panic!("not ab") };
    assert_eq!(args.gate.alpha, 0.01, "--alpha still sets it");
}

#[test]
fn the_issue_s_case_is_regressed_on_ab_s_defaults() {
    // Issue 45: +6.4% [+2.5%, +10.5%], p 0.004, q 0.016 over 12 rounds:
    // inconclusive at alpha 0.01, regressed (and gating) at ab's.
    let ratio = Estimate { point: 1.064, lower: 1.025, upper: 1.105, level: 0.95 };
    let j = Judgement { p: 0.004, q: 0.016, ratio, band: 0.02, envelope: (1.0, 1.0) };
    let old = CompareOptions::default();
    assert_eq!(Verdict::judge(&j, &old), Verdict::Inconclusive);
    let o = ab_defaults();
    assert_eq!(Verdict::judge(&j, &o), Verdict::Regressed);
    assert!(ratio.point - 1.0 > o.max_regression);
    // Not significant at all (p 0.2): still inconclusive, interval or not.
    assert_eq!(Verdict::judge(&Judgement { p: 0.2, q: 0.2, ..j }, &o), Verdict::Inconclusive);
}

/// One simulated `ab` of `m` cases over 12 rounds of 9 pairs: each
/// round's head process off by its own luck (`luck`, SD of the round's
/// ratio), the first case `shift` slower.
fn simulated_ab(m: usize, shift: f64, luck: f64, seed: u64) -> Comparison {
    let cases: Vec<PairedCase> = (0..m)
        .map(|k| {
            drifting(
                &format!("c{k}"),
                108,
                if k == 0 { shift } else { 1.0 },
                12,
                luck,
                seed * 1000 + k as u64,
            )
        })
        .collect();
    compare_paired("a", "b", &cases, vec![], vec![], &ab_defaults())
}

#[test]
fn ab_s_defaults_catch_a_lone_10pct_slowdown_and_pass_a_a() {
    // The spread of the issue's run: its interval over 12 rounds was
    // +-3.8% (log), a round's ratio off by 5.8% SD. Goals (issue 45): a
    // lone 10% slowdown caught in >= 9 of 10 runs, A/A failing in <= 1
    // of 10. Seeded, so each count is a fixed fact of this rule.
    let runs = 40;
    let caught = (0..runs)
        .filter(|&s| {
            let c = simulated_ab(4, 1.10, 0.058, s);
            let slow = c.changes.iter().find(|x| x.id == "c0").unwrap();
            slow.verdict == Verdict::Regressed && slow.beyond_limit
        })
        .count();
    eprintln!("a lone +10% among 4 cases gated in {caught} of {runs} runs");
    assert!(caught >= 36, "a lone +10% gated in {caught} of {runs} runs");
    for (m, luck) in [(4, 0.058), (46, 0.058), (46, 0.10)] {
        let failed = (0..runs).filter(|&s| simulated_ab(m, 1.0, luck, 500 + s).has_gating_failure()).count();
        eprintln!("A/A of {m} cases at {luck} luck failed the gate in {failed} of {runs} runs");
        assert!(failed <= 4, "A/A of {m} cases at {luck} luck failed the gate in {failed} of {runs} runs");
    }
}

#[test]
fn few_pairs_and_nothing_to_compare() {
    let o = CompareOptions::default();
    let c = compare_paired("a", "b", &[drifting("short", 3, 2.0, 3, 0.0, 1)], vec![], vec![], &o);
    assert_eq!(c.changes[0].verdict, Verdict::TooFewSamples);
    let f = crate::compare::gate::FailedCase {
        id: "f".into(),
        side: crate::compare::gate::FailedSide::Candidate,
        reason: "verify: wrong".into(),
    };
    let c = compare_paired("a", "b", &[], vec![f], vec![], &o);
    assert!(c.vacuous.as_deref().is_some_and(|v| v.contains("1 failed")), "{:?}", c.vacuous);
    assert_eq!(c.failed, ["f"]);
    assert!(c.has_gating_failure(), "a case the head build failed gates");
}
