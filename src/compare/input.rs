//! What a comparison reads from result sets: strict checks of the files,
//! and each case's samples as runs -> rounds -> per-iteration times after
//! the outlier policy the runs themselves used.

use super::disturbance::{Disturbed, SetAside, filter_rounds};
use crate::config::OutlierPolicy;
use crate::results::{CaseResult, RunReport, per_iter_by_round};
use crate::stats::{Levels, OutlierClass, tukey};
use anyhow::{Result, bail};
use std::collections::HashSet;

/// Refuses results that cannot be compared honestly: negative or non-finite
/// times, zero iterations, duplicate case ids, a case marked ok without
/// samples. The error names `source` (a file or baseline), the case id and
/// the field. Stored statistics (estimates, throughput) are not read.
pub fn validate(source: &str, report: &RunReport) -> Result<()> {
    let mut seen = HashSet::new();
    for case in &report.cases {
        if !seen.insert(case.id.as_str()) {
            bail!("{source}: case `{}` appears twice (duplicate id in `cases`)", case.id);
        }
        let counts = case.inside.as_ref().and_then(|i| i.counts.as_ref());
        if matches!(case.status, crate::results::CaseStatus::Ok)
            && case.samples.is_empty()
            && counts.is_none()
        {
            bail!("{source}: case `{}` has status ok but no `samples` (nor instruction counts)", case.id);
        }
        // A counted case (--measure instructions) is judged on its counts.
        if let Some(c) = counts
            && !(c.instructions.is_finite() && c.instructions > 0.0 && c.iterations > 0)
        {
            bail!(
                "{source}: case `{}`: inside.counts has {} instructions over {} iterations (must be > 0)",
                case.id,
                c.instructions,
                c.iterations
            );
        }
        for (i, s) in case.samples.iter().enumerate() {
            if s.iterations == 0 {
                bail!("{source}: case `{}`: samples[{i}].iterations is 0", case.id);
            }
            if !s.nanos.is_finite() || s.nanos < 0.0 {
                bail!(
                    "{source}: case `{}`: samples[{i}].nanos is {} (must be a finite time >= 0)",
                    case.id,
                    s.nanos
                );
            }
        }
    }
    Ok(())
}

/// The outlier policy the run applied to `case` (its suite's settings).
pub fn policy_of(report: &RunReport, case: &CaseResult) -> OutlierPolicy {
    report.harness.settings.get(&case.suite).map(|s| s.outliers).unwrap_or_default()
}

/// Per-iteration times of one run's case split by round, with the run's
/// outlier policy applied the way `analysis` applies it (Tukey fences over
/// all of the case's samples; removal only when some but not all are
/// outliers), so the comparison sees the same samples the run's own
/// estimates did.
pub fn rounds_of(case: &CaseResult, policy: OutlierPolicy) -> Vec<Vec<f64>> {
    let keep: Vec<bool> = if policy == OutlierPolicy::Remove {
        let values: Vec<f64> = case.samples.iter().map(|s| s.per_iter()).collect();
        let (_, classes) = tukey(&values);
        let outliers = classes.iter().filter(|c| **c != OutlierClass::Normal).count();
        if outliers > 0 && outliers < values.len() {
            classes.iter().map(|c| *c == OutlierClass::Normal).collect()
        } else {
            vec![true; values.len()]
        }
    } else {
        vec![true; case.samples.len()]
    };
    per_iter_by_round(&case.samples, |i| keep[i])
}

/// A case's samples across every run of a side that has it measured, with
/// the rounds measured while the machine was disturbed set aside
/// (`disturbed[i]` belongs to `runs[i]`; see [`super::disturbance`]).
/// Returns `None` when the case failed in any run (or has no samples in
/// any), so it is listed as failed, not compared.
pub fn levels_of(
    runs: &[RunReport],
    disturbed: &[Disturbed],
    id: &str,
) -> Option<(Levels, Vec<OutlierPolicy>, SetAside)> {
    let mut all = Vec::new();
    let mut policies = Vec::new();
    let mut aside = SetAside::default();
    for (i, run) in runs.iter().enumerate() {
        let Some(case) = run.cases.iter().find(|c| c.id == id) else { continue };
        if case.status.is_failed() || case.samples.is_empty() {
            return None;
        }
        let policy = policy_of(run, case);
        policies.push(policy);
        let rounds = rounds_of(case, policy);
        all.push(match disturbed.get(i) {
            Some(d) => filter_rounds(rounds, id, d, &mut aside),
            None => rounds,
        });
    }
    let levels = Levels::new(all);
    (!levels.is_empty()).then_some((levels, policies, aside))
}

/// Why the runs of a side marked `id`'s timing as not to be taken as it is
/// (`sampling.timing_suspect`, see `harness::screen`), the first run's
/// reason when several did; `None` when none did.
pub fn timing_suspect(runs: &[RunReport], id: &str) -> Option<String> {
    runs.iter()
        .flat_map(|r| r.cases.iter())
        .filter(|c| c.id == id)
        .find_map(|c| c.sampling.as_ref()?.timing_suspect.clone())
}

#[cfg(test)]
mod tests {
    use super::super::{CompareOptions, Spreads, Verdict, compare_sets};

    #[test]
    fn a_case_a_run_marked_suspect_is_not_judged_and_the_notes_say_why() {
        let old = crate::report::fixture();
        let mut new = old.clone();
        let id = new.cases[0].id.clone();
        new.cases[0].samples.iter_mut().for_each(|s| s.nanos *= 2.0);
        new.run_id = "twice as slow".into();
        let opts = CompareOptions::default();
        // Without the mark: a 2x slowdown, regressed beyond the limit.
        let unmarked = compare_sets(
            "a",
            std::slice::from_ref(&old),
            "b",
            std::slice::from_ref(&new),
            &Spreads::new(),
            &opts,
        );
        let ch = unmarked.changes.iter().find(|ch| ch.id == id).unwrap();
        assert_eq!(ch.verdict, Verdict::Regressed);
        assert!(ch.beyond_limit);
        // Marked on either side: could not judge, with the side and reason.
        for side in [0, 1] {
            let mut runs = [old.clone(), new.clone()];
            let sampling = runs[side].cases[0].sampling.as_mut().unwrap();
            sampling.timing_suspect = Some("measured twice: 10 of 10 samples on the tick".into());
            let [o, n] = runs;
            let c = compare_sets("a", &[o], "b", &[n], &Spreads::new(), &opts);
            let ch = c.changes.iter().find(|ch| ch.id == id).unwrap();
            assert_eq!(ch.verdict, Verdict::Inconclusive);
            // (The fixture's failed case fails the gate on its own: no
            // regression may join it.)
            assert!(!ch.beyond_limit && c.regressions().is_empty());
            let who = ["baseline", "candidate"][side];
            let note = c.notes.iter().find(|n| n.contains("not judged")).expect("a note");
            assert!(
                note.starts_with("1 case(s)") && note.contains(&format!("{id} ({who}: measured twice")),
                "{note}"
            );
            // The other cases are judged as before.
            for (a, b) in c.changes.iter().zip(&unmarked.changes).filter(|(a, _)| a.id != id) {
                assert_eq!((&a.id, a.verdict), (&b.id, b.verdict));
            }
        }
    }
}
