//! Comparing instruction counts (`run --measure instructions`): the
//! second measure of issue 50.
//!
//! A count is deterministic (the same binary, inputs and ISA execute the
//! same instructions), so there is nothing to estimate: a case whose
//! instructions per iteration changed by more than the count band
//! ([`CompareOptions::count_band`], `--count-band`, 1% by default) changed,
//! and a regression beyond the band fails the gate. Its interval is the
//! point itself, its p and q are 0 beyond the band and 1 inside it (no
//! test is run), and every such [`CaseChange`] says `measure:
//! instructions`. Counts taken at different ISAs (Valgrind dispatches to
//! AVX2 on an AVX-512 machine, an AVX2-only machine may differ again) or
//! on different thread counts are not compared: [`check`] refuses them,
//! and [`compare`] leaves such a case out with a note if asked anyway.

use super::{CaseChange, CompareOptions, Comparison, Method, Verdict, matching, notes};
use crate::inside::Measure;
use crate::inside::callgrind::Counts;
use crate::results::{CaseResult, Estimate, RunReport};

/// Whether `runs` hold instruction counts (a counted run: some case has them).
pub fn is_counted(runs: &[RunReport]) -> bool {
    runs.iter().flat_map(|r| &r.cases).any(|c| counts_of(c).is_some())
}

fn counts_of(c: &CaseResult) -> Option<&Counts> {
    c.inside.as_ref()?.counts.as_ref()
}

/// The last counts of case `id` on a side.
fn last_counts<'a>(runs: &'a [RunReport], id: &str) -> Option<&'a Counts> {
    runs.iter().rev().flat_map(|r| &r.cases).filter(|c| c.id == id).find_map(counts_of)
}

/// Refuses sides that cannot be compared by counts: one counted and the
/// other timed, or a case counted at different ISAs or thread counts. The
/// error names the case and both ISAs.
pub fn check(old: &[RunReport], new: &[RunReport]) -> Result<(), String> {
    match (is_counted(old), is_counted(new)) {
        (false, false) => return Ok(()),
        (true, false) | (false, true) => {
            let (counted, timed) =
                if is_counted(old) { ("baseline", "candidate") } else { ("candidate", "baseline") };
            return Err(format!(
                "cannot compare instruction counts with timings: the {counted} was counted (--measure instructions), the {timed} was timed; measure both sides the same way"
            ));
        }
        (true, true) => {}
    }
    for c in new.iter().rev().flat_map(|r| &r.cases) {
        if let (Some(a), Some(b)) = (last_counts(old, &c.id), counts_of(c))
            && let Some(why) = a.incomparable(b)
        {
            return Err(format!(
                "refusing to compare {}: {why}; count both sides on machines that dispatch to the same instruction set (TFBENCH_MAX_ISA caps it)",
                c.id
            ));
        }
    }
    Ok(())
}

/// The verdict on a count ratio `r` with band `b`: no statistics.
pub fn verdict(r: f64, band: f64) -> Verdict {
    if !r.is_finite() {
        Verdict::Inconclusive
    } else if r > 1.0 + band {
        Verdict::Regressed
    } else if r < 1.0 - band {
        Verdict::Improved
    } else {
        Verdict::Unchanged
    }
}

/// One case's change by counts.
fn change(id: &str, old: &Counts, new: &Counts, opts: &CompareOptions) -> CaseChange {
    let r = new.instructions / old.instructions;
    let v = verdict(r, opts.count_band);
    let p = if matches!(v, Verdict::Regressed | Verdict::Improved) { 0.0 } else { 1.0 };
    CaseChange {
        id: id.to_string(),
        old_median_ns: old.instructions,
        new_median_ns: new.instructions,
        old_samples: old.iterations as usize,
        new_samples: new.iterations as usize,
        ratio: Estimate { point: r, lower: r, upper: r, level: 1.0 },
        p_value: p,
        q_value: p,
        band: opts.count_band,
        band_source: "count band".into(),
        verdict: v,
        beyond_limit: v == Verdict::Regressed,
        memory: None,
        disturbed: None,
        measure: Measure::Instructions,
    }
}

/// Compares two counted result sets (see the module docs); what only one
/// side has, skipped or failed cases are sorted as a timed comparison
/// sorts them.
pub fn compare(
    baseline_name: &str,
    old: &[RunReport],
    candidate_name: &str,
    new: &[RunReport],
    opts: &CompareOptions,
) -> Comparison {
    let ids = |runs: &[RunReport]| {
        let mut v: Vec<String> = Vec::new();
        for c in runs.iter().flat_map(|r| &r.cases) {
            if !v.contains(&c.id) {
                v.push(c.id.clone());
            }
        }
        v
    };
    let (old_ids, new_ids) = (ids(old), ids(new));
    let only_in_baseline: Vec<String> = old_ids.iter().filter(|i| !new_ids.contains(i)).cloned().collect();
    let only_in_candidate: Vec<String> = new_ids.iter().filter(|i| !old_ids.contains(i)).cloned().collect();
    let status = |runs: &[RunReport], id: &str| {
        runs.iter().rev().flat_map(|r| &r.cases).find(|c| c.id == id).map(|c| c.status.clone())
    };
    let (mut changes, mut failed, mut skipped, mut notes) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for id in new_ids.iter().filter(|i| old_ids.contains(i)) {
        if [status(old, id), status(new, id)].iter().flatten().any(|s| s.is_skipped()) {
            skipped.push(id.clone());
            continue;
        }
        match (last_counts(old, id), last_counts(new, id)) {
            (Some(a), Some(b)) => match a.incomparable(b) {
                Some(why) => {
                    notes.push(format!("{id} not compared: {why}"));
                    failed.push(id.clone());
                }
                None => changes.push(change(id, a, b, opts)),
            },
            _ => failed.push(id.clone()),
        }
    }
    changes.sort_by(|a, b| b.ratio.point.total_cmp(&a.ratio.point));
    notes.insert(
        0,
        format!(
            "judged on instructions per iteration counted under callgrind (deterministic): a change beyond ±{}% is a change, no statistics",
            opts.count_band * 100.0
        ),
    );
    if let Some(isa) = changes.first().and_then(|c| last_counts(new, &c.id)).map(|c| c.isa.clone()) {
        notes.push(format!("counts taken at ISA {isa} (what dispatch chose under Valgrind)"));
    }
    notes::side_notes(old, new, [false, false], &mut notes);
    // Two counted runs of one build hold the same (empty) samples and, by
    // design, the same counts: that is an A/A, not a run compared with
    // itself (the same run id on both sides still is).
    let vacuous = matching::vacuous_reason(old, new, &changes, &failed, &skipped)
        .filter(|why| !why.starts_with("both sides hold identical samples"));
    Comparison {
        baseline: baseline_name.to_string(),
        candidate: candidate_name.to_string(),
        method: Method::Stored,
        runs: (old.len(), new.len()),
        machine_mismatch: None,
        drift: None,
        changes,
        only_in_baseline,
        only_in_candidate,
        failed,
        failures: matching::failures_of(old, new),
        skipped,
        vacuous,
        notes,
        options: opts.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inside::callgrind::{Totals, parse};

    fn counts(ir: u64, isa: &str) -> Counts {
        let t: Totals = parse(&format!("events: Ir Dr Dw\ntotals: {ir} 10 10\n")).unwrap();
        Counts::from_totals(&t, 1, isa.into(), vec![isa.into()], 1)
    }

    fn run(cases: &[(&str, u64, &str)]) -> RunReport {
        let mut r = crate::report::fixture();
        r.cases = cases
            .iter()
            .map(|(id, ir, isa)| {
                let mut c = r.cases[0].clone();
                c.id = id.to_string();
                c.samples.clear();
                c.estimates = None;
                c.inside =
                    Some(crate::inside::Inside { counts: Some(counts(*ir, isa)), ..Default::default() });
                c
            })
            .collect();
        r.environment.injected_slowdown = None;
        r
    }

    #[test]
    fn the_verdict_is_the_band_and_nothing_else() {
        assert_eq!(verdict(1.0, 0.01), Verdict::Unchanged);
        assert_eq!(verdict(1.0099, 0.01), Verdict::Unchanged);
        assert_eq!(verdict(1.011, 0.01), Verdict::Regressed);
        assert_eq!(verdict(0.98, 0.01), Verdict::Improved);
        assert_eq!(verdict(f64::NAN, 0.01), Verdict::Inconclusive);
    }

    #[test]
    fn a_two_percent_count_change_is_caught_and_gates() {
        let old = run(&[("a", 100_000, "avx2"), ("b", 5_000, "avx2"), ("gone", 1, "avx2")]);
        let new = run(&[("a", 102_000, "avx2"), ("b", 5_000, "avx2"), ("new", 1, "avx2")]);
        let opts = CompareOptions::default();
        assert!(check(std::slice::from_ref(&old), std::slice::from_ref(&new)).is_ok());
        let c = compare("old", &[old], "new", &[new], &opts);
        assert_eq!(c.changes.len(), 2);
        let a = &c.changes[0];
        assert_eq!(
            (a.id.as_str(), a.verdict, a.beyond_limit, a.measure),
            ("a", Verdict::Regressed, true, Measure::Instructions)
        );
        assert!((a.ratio.point - 1.02).abs() < 1e-12 && a.ratio.lower == a.ratio.upper);
        assert_eq!(c.changes[1].verdict, Verdict::Unchanged);
        assert!(c.has_gating_failure());
        assert_eq!(
            (c.only_in_baseline.clone(), c.only_in_candidate.clone()),
            (vec!["gone".to_string()], vec!["new".to_string()])
        );
        assert!(c.notes[0].contains("instructions") && c.notes.iter().any(|n| n.contains("avx2")));
    }

    #[test]
    fn an_a_a_of_counts_flags_nothing() {
        let r = run(&[("a", 100_000, "avx2"), ("b", 5_000, "avx2")]);
        let c =
            compare("a", std::slice::from_ref(&r), "b", std::slice::from_ref(&r), &CompareOptions::default());
        assert!(c.changes.iter().all(|ch| ch.verdict == Verdict::Unchanged && !ch.beyond_limit));
        assert!(!c.has_gating_failure());
        // Another counted run of the same build: identical counts are no
        // reason to call the comparison vacuous; the same run twice is.
        let mut other = r.clone();
        other.run_id = "another run".into();
        let c = compare("a", std::slice::from_ref(&r), "b", &[other], &CompareOptions::default());
        assert_eq!(c.vacuous, None);
    }

    #[test]
    fn other_isas_and_mixed_measures_are_refused() {
        let a = run(&[("a", 100, "avx2")]);
        let b = run(&[("a", 100, "avx512")]);
        let e = check(std::slice::from_ref(&a), std::slice::from_ref(&b)).unwrap_err();
        assert!(e.contains("different ISAs") && e.contains("avx512"), "{e}");
        let c = compare("a", std::slice::from_ref(&a), "b", &[b], &CompareOptions::default());
        assert!(c.changes.is_empty() && c.failed == vec!["a".to_string()]);
        let timed = crate::report::fixture();
        let e = check(&[a], &[timed]).unwrap_err();
        assert!(e.contains("cannot compare instruction counts with timings"), "{e}");
    }
}
