//! The first step of a stored comparison ([`super::compare_sets`]): the
//! sides' cases matched by id and sorted into those only one side has, those
//! skipped or failed on a side, and those ready for judging ([`Pending`]);
//! and what the sides say about themselves as a whole (their machines,
//! their failures, whether there is anything to judge).

use super::{CaseChange, disturbance, drift, gate, input, smoke};
use crate::results::{AllocStats, RunReport};
use crate::stats::Levels;
use std::collections::HashSet;

/// One case ready for judging.
pub(super) struct Pending {
    /// Case id.
    pub id: String,
    /// The baseline's per-iteration times, by run and round.
    pub old: Levels,
    /// The candidate's per-iteration times, by run and round.
    pub new: Levels,
    /// The baseline's allocation counts (its last run that has the case).
    pub old_alloc: Option<AllocStats>,
    /// The candidate's allocation counts (its last run that has the case).
    pub new_alloc: Option<AllocStats>,
    /// What disturbance took from each side (baseline, candidate).
    pub aside: [disturbance::SetAside; 2],
    /// Moves at least [`drift::LARGE_BYTES`] per iteration on either side.
    pub large: bool,
    /// Measured with a smoke profile on either side ([`smoke`]).
    pub smoke: bool,
    /// The most threads it ran on, on either side ([`threads_of`]).
    pub threads: usize,
}

/// The cases of two result sets, sorted by what the comparison can do with
/// each.
pub(super) struct Matched {
    /// Cases only the baseline has.
    pub only_in_baseline: Vec<String>,
    /// Cases only the candidate has.
    pub only_in_candidate: Vec<String>,
    /// Cases on both sides without usable samples on a side.
    pub failed: Vec<String>,
    /// Cases on both sides skipped on a side.
    pub skipped: Vec<String>,
    /// Cases on both sides ready for judging, in the candidate's order.
    pub pending: Vec<Pending>,
    /// Whether some run on each side removed outliers (baseline, candidate).
    pub removed: [bool; 2],
}

/// Matches the cases of `old` and `new` by id: a case both sides measured
/// becomes a [`Pending`] with its samples after each run's outlier policy
/// and with disturbed rounds set aside ([`input::levels_of`]).
pub(super) fn match_cases(old: &[RunReport], new: &[RunReport]) -> Matched {
    let (old_ids, new_ids) = (unique_ids(old), unique_ids(new));
    let old_set: HashSet<&str> = old_ids.iter().map(String::as_str).collect();
    let new_set: HashSet<&str> = new_ids.iter().map(String::as_str).collect();
    let only_in_baseline: Vec<String> =
        old_ids.iter().filter(|id| !new_set.contains(id.as_str())).cloned().collect();
    let only_in_candidate: Vec<String> =
        new_ids.iter().filter(|id| !old_set.contains(id.as_str())).cloned().collect();

    let (mut failed, mut skipped, mut pending) = (Vec::new(), Vec::new(), Vec::new());
    let (old_dist, new_dist): (Vec<_>, Vec<_>) =
        (old.iter().map(disturbance::disturbed).collect(), new.iter().map(disturbance::disturbed).collect());
    let mut removed = [false, false];
    for id in new_ids.iter().filter(|id| old_set.contains(id.as_str())) {
        if skipped_in(old, id) || skipped_in(new, id) {
            skipped.push(id.clone());
            continue;
        }
        match (input::levels_of(old, &old_dist, id), input::levels_of(new, &new_dist, id)) {
            (Some((o, po, ao)), Some((n, pn, an))) => {
                let remove = crate::config::OutlierPolicy::Remove;
                removed[0] |= po.contains(&remove);
                removed[1] |= pn.contains(&remove);
                pending.push(Pending {
                    id: id.clone(),
                    old: o,
                    new: n,
                    old_alloc: alloc_of(old, id),
                    new_alloc: alloc_of(new, id),
                    aside: [ao, an],
                    large: is_large(old, id) || is_large(new, id),
                    smoke: smoke::is_smoke(old, id) || smoke::is_smoke(new, id),
                    threads: threads_of(old, id).max(threads_of(new, id)),
                })
            }
            _ => failed.push(id.clone()),
        }
    }
    Matched { only_in_baseline, only_in_candidate, failed, skipped, pending, removed }
}

/// The case ids of `runs`, each once, in the order they first appear.
fn unique_ids(runs: &[RunReport]) -> Vec<String> {
    let mut seen = HashSet::new();
    runs.iter()
        .flat_map(|r| r.cases.iter())
        .map(|c| c.id.clone())
        .filter(|id| seen.insert(id.clone()))
        .collect()
}

/// Whether some run of `runs` skipped case `id`.
fn skipped_in(runs: &[RunReport], id: &str) -> bool {
    runs.iter().flat_map(|r| r.cases.iter()).any(|c| c.id == id && c.status.is_skipped())
}

/// Case `id`'s allocation counts in the last run of `runs` that has it.
fn alloc_of(runs: &[RunReport], id: &str) -> Option<AllocStats> {
    runs.iter().rev().flat_map(|r| r.cases.iter()).find(|c| c.id == id).and_then(|c| c.alloc.clone())
}

/// The most threads case `id` ran on in `runs`: its `threads` parameter,
/// or the run's pool (`threads = "all"`, or none given).
fn threads_of(runs: &[RunReport], id: &str) -> usize {
    use crate::plan::ParamValue;
    runs.iter()
        .flat_map(|r| r.cases.iter().filter(|c| c.id == id).map(move |c| (r, c)))
        .map(|(r, c)| match c.params.get("threads") {
            Some(ParamValue::Int(n)) => usize::try_from(*n).unwrap_or(1),
            _ => r.harness.threads,
        })
        .max()
        .unwrap_or(1)
        .max(1)
}

/// Whether case `id` moves at least [`drift::LARGE_BYTES`] per iteration
/// in any run of `runs` (its declared bytes throughput).
fn is_large(runs: &[RunReport], id: &str) -> bool {
    runs.iter().flat_map(|r| r.cases.iter()).filter(|c| c.id == id).any(|c| {
        c.throughput.iter().any(|t| {
            t.kind == crate::workload::ThroughputKind::Bytes && t.per_iteration >= drift::LARGE_BYTES
        })
    })
}

/// Every case that failed in some run of a side, with the side and the
/// candidate's reason (the baseline's when only it failed), in the order the
/// cases first appear.
pub(super) fn failures_of(old: &[RunReport], new: &[RunReport]) -> Vec<gate::FailedCase> {
    let reason_in = |runs: &[RunReport], id: &str| {
        runs.iter().rev().flat_map(|r| r.cases.iter()).find_map(|c| match &c.status {
            crate::results::CaseStatus::Failed { phase, reason } if c.id == id => {
                Some(format!("{phase}: {reason}"))
            }
            _ => None,
        })
    };
    let mut seen = HashSet::new();
    old.iter()
        .chain(new)
        .flat_map(|r| r.cases.iter())
        .filter(|c| c.status.is_failed() && seen.insert(c.id.clone()))
        .filter_map(|c| {
            let (o, n) = (reason_in(old, &c.id), reason_in(new, &c.id));
            let side = gate::FailedSide::from_flags(o.is_some(), n.is_some())?;
            Some(gate::FailedCase { id: c.id.clone(), side, reason: n.or(o).unwrap_or_default() })
        })
        .collect()
}

/// Why a comparison has nothing to judge, or `None`.
pub(super) fn vacuous_reason(
    old: &[RunReport],
    new: &[RunReport],
    changes: &[CaseChange],
    failed: &[String],
    skipped: &[String],
) -> Option<String> {
    if changes.is_empty() {
        return Some(if failed.is_empty() && skipped.is_empty() {
            "no case was measured in both result sets".into()
        } else {
            format!(
                "no case could be compared: {} failed and {} skipped on a side",
                failed.len(),
                skipped.len()
            )
        });
    }
    let ids = |runs: &[RunReport]| -> HashSet<String> {
        runs.iter().map(|r| r.run_id.clone()).filter(|id| !id.is_empty()).collect()
    };
    if let Some(shared) = ids(old).intersection(&ids(new)).next() {
        return Some(format!("the same run ({shared}) is on both sides: a run compared with itself"));
    }
    let same_samples = old.len() == new.len()
        && old.iter().zip(new).all(|(a, b)| {
            a.cases.len() == b.cases.len()
                && a.cases.iter().zip(&b.cases).all(|(x, y)| x.id == y.id && x.samples == y.samples)
        });
    same_samples.then(|| "both sides hold identical samples: a run compared with itself".into())
}

/// Describes the two machines when their fingerprints differ, or when
/// their GPU cases ran on different kinds of GPU (where both sides record
/// their GPUs: results from before that was recorded are not judged).
pub(super) fn machine_mismatch(old: &[RunReport], new: &[RunReport]) -> Option<String> {
    let (o, n) = (old.first()?, new.first()?);
    let mut why = Vec::new();
    let (a, b) = (o.environment.fingerprint(), n.environment.fingerprint());
    if a != b {
        why.push(format!(
            "baseline ran on `{}` (fingerprint {a}), candidate on `{}` (fingerprint {b})",
            o.environment.cpu_model, n.environment.cpu_model
        ));
    }
    let (ga, gb) = (o.environment.gpu_kinds(), n.environment.gpu_kinds());
    if !ga.is_empty() && !gb.is_empty() && ga != gb {
        why.push(format!(
            "GPU cases ran on {} in the baseline, on {} in the candidate",
            ga.join(", "),
            gb.join(", ")
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}
