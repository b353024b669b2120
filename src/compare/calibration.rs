//! Calibration of the verdicts on simulated plans (issue 28): seeded, no
//! timing. Null rates, power against a lone large change in a large plan,
//! and the false-call rate under a shared per-run offset (machine drift)
//! with what the comparison measures about drift (canaries). If a later
//! change to the statistics loses one of these properties, this fails.

use super::*;
use crate::results::{CanaryKind, CanarySample, CaseStatus, Sample};
use rand_distr::{Distribution, LogNormal, Uniform};

/// A run of `m` cases with `n` single-round samples each: case `i` takes
/// `shift(i) * offset` times its base time, with lognormal noise `sigma`;
/// canaries carry the same `offset`.
fn run(m: usize, n: usize, sigma: f64, offset: f64, shift: &dyn Fn(usize) -> f64, seed: u64) -> RunReport {
    let mut rng = crate::util::rng(seed);
    let noise = LogNormal::new(0.0, sigma).expect("valid");
    let quiet = LogNormal::new(0.0, 0.01).expect("valid");
    let mut r = crate::report::fixture();
    r.run_id = format!("sim-{seed}");
    r.cases = (0..m)
        .map(|i| {
            let mut c = r_case(&r, i);
            let base = 1000.0 * (1.0 + i as f64);
            c.samples = (0..n)
                .map(|_| Sample {
                    iterations: 1,
                    nanos: base * shift(i) * offset * noise.sample(&mut rng),
                    round: 0,
                })
                .collect();
            c
        })
        .collect();
    r.canaries = (0..m.max(20) * 2)
        .map(|i| CanarySample {
            kind: if i % 2 == 0 { CanaryKind::Compute } else { CanaryKind::Memory },
            round: 0,
            nanos: 1e5 * offset * quiet.sample(&mut rng),
            case: None,
        })
        .collect();
    r
}

fn r_case(r: &RunReport, i: usize) -> crate::results::CaseResult {
    let mut c = r.cases[0].clone();
    c.id = format!("sim/case/i={i}");
    c.suite = "tensor".into();
    c.status = CaseStatus::Ok;
    c.alloc = None;
    c
}

fn fast() -> CompareOptions {
    CompareOptions { resamples: 400, ..Default::default() }
}

/// One simulated setting: `m` cases of `n` samples with noise `sigma`, a
/// shared per-run offset of 3-5% when `drift`, and the cases `shifted` made
/// `factor` times slower.
struct Sim<'a> {
    m: usize,
    n: usize,
    sigma: f64,
    drift: bool,
    shifted: &'a [usize],
    factor: f64,
}

/// Runs `plans` simulated comparisons; returns (flagged null cases, null
/// cases, plans where every shifted case was regressed and the gate failed).
fn simulate(sim: Sim<'_>, plans: u64, seed: u64) -> (usize, usize, usize) {
    let Sim { m, n, sigma, drift, shifted, factor } = sim;
    let (mut flagged, mut nulls, mut caught) = (0, 0, 0);
    let mut rng = crate::util::rng(seed);
    let offsets = Uniform::new(0.03, 0.05).expect("valid");
    for p in 0..plans {
        let offset = if drift {
            let o = offsets.sample(&mut rng);
            if p % 2 == 0 { 1.0 + o } else { 1.0 / (1.0 + o) }
        } else {
            1.0
        };
        let shift = |i: usize| if shifted.contains(&i) { factor } else { 1.0 };
        let old = run(m, n, sigma, 1.0, &|_| 1.0, seed * 1000 + 2 * p);
        let new = run(m, n, sigma, offset, &shift, seed * 1000 + 2 * p + 1);
        let c = compare("old", &old, "new", &new, &CompareOptions { seed: p, ..fast() });
        for ch in &c.changes {
            assert!(
                ch.verdict != Verdict::Unchanged
                    || (ch.ratio.lower >= 1.0 - ch.band && ch.ratio.upper <= 1.0 + ch.band),
                "unchanged with an interval outside the band: {ch:?}"
            );
            let i: usize = ch.id.rsplit('=').next().and_then(|s| s.parse().ok()).expect("id");
            if !shifted.contains(&i) {
                nulls += 1;
                flagged += usize::from(matches!(ch.verdict, Verdict::Regressed | Verdict::Improved));
            }
        }
        let all_caught = shifted.iter().all(|i| {
            c.changes.iter().any(|ch| ch.id == format!("sim/case/i={i}") && ch.verdict == Verdict::Regressed)
        });
        caught += usize::from(!shifted.is_empty() && all_caught && c.has_gating_failure());
    }
    (flagged, nulls, caught)
}

#[test]
fn null_cases_are_rarely_flagged_at_every_plan_size() {
    for (m, n, plans) in [(20, 10, 40), (100, 30, 8), (500, 10, 3), (50, 100, 6)] {
        let (flagged, nulls, _) =
            simulate(Sim { m, n, sigma: 0.05, drift: false, shifted: &[], factor: 1.0 }, plans, 1);
        let rate = flagged as f64 / nulls as f64;
        assert!(rate <= 0.01, "m={m} n={n}: {flagged} of {nulls} null cases flagged");
    }
}

#[test]
fn a_lone_2x_slowdown_among_500_cases_at_n10_fails_the_gate() {
    let (_, _, caught) =
        simulate(Sim { m: 500, n: 10, sigma: 0.05, drift: false, shifted: &[137], factor: 2.0 }, 20, 2);
    assert!(caught >= 20, "caught in {caught} of 20 plans (goal: 99%)");
}

#[test]
fn a_lone_10_percent_slowdown_among_50_cases_at_n30_is_caught() {
    let (_, _, caught) =
        simulate(Sim { m: 50, n: 30, sigma: 0.05, drift: false, shifted: &[7], factor: 1.10 }, 40, 3);
    assert!(caught >= 32, "caught in {caught} of 40 plans (goal: 80%)");
}

#[test]
fn five_shifted_cases_are_caught_by_size() {
    let (_, _, caught) = simulate(
        Sim { m: 100, n: 30, sigma: 0.05, drift: false, shifted: &[3, 17, 42, 61, 99], factor: 2.0 },
        10,
        4,
    );
    assert_eq!(caught, 10, "2x on five cases");
}

#[test]
fn a_shared_per_run_offset_is_measured_not_flagged() {
    for (m, n, plans) in [(20, 10, 30), (100, 30, 8), (50, 100, 6)] {
        let (flagged, nulls, _) =
            simulate(Sim { m, n, sigma: 0.05, drift: true, shifted: &[], factor: 1.0 }, plans, 5);
        let rate = flagged as f64 / nulls as f64;
        assert!(rate <= 0.01, "m={m} n={n} with drift: {flagged} of {nulls} null cases flagged");
    }
    // A real change on top of the machine's drift is still seen.
    let (_, _, caught) =
        simulate(Sim { m: 100, n: 30, sigma: 0.05, drift: true, shifted: &[5, 50], factor: 2.0 }, 10, 6);
    assert_eq!(caught, 10, "2x on two cases under drift");
}
