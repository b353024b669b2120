//! The regression gate: what a comparison fails a CI job on, in one place,
//! so `run --baseline`, `compare` and `ab` end alike.
//!
//! In order of precedence (the exit status names the first that applies;
//! stderr names every one):
//!
//! 1. **failed cases** (exit 3): a case that failed on the candidate's side
//!    (any phase; a wrong result above all) never passes, whatever the
//!    baseline did. A case that failed on the baseline only is listed and
//!    does not gate: the candidate fixed it.
//! 2. **regressions** (exit 1): time beyond `--max-regression`, or memory
//!    beyond `--max-memory-regression`.
//! 3. **nothing to judge** (exit 1): the comparison is vacuous.
//! 4. **could not judge** (exit 4): more than `--max-unjudged` of the
//!    compared cases (a quarter by default), or any case `--require` names,
//!    ended inconclusive, with too few samples or set aside as disturbed.
//!    "Could not judge" is never a pass: on a busy shared runner a stored
//!    comparison may judge nothing, and a gate that then passed would wave
//!    any change through. `--allow-inconclusive` passes it knowingly.

use super::{CaseChange, Comparison, Verdict};
use regex::Regex;
use serde::{Deserialize, Serialize};

/// Which side a case failed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailedSide {
    /// The baseline (or `ab`'s base build) only.
    Baseline,
    /// The candidate (or `ab`'s head build) only.
    Candidate,
    /// Both sides.
    Both,
}

impl FailedSide {
    /// From whether each side failed; `None` when neither did.
    pub fn from_flags(baseline: bool, candidate: bool) -> Option<Self> {
        match (baseline, candidate) {
            (true, true) => Some(Self::Both),
            (true, false) => Some(Self::Baseline),
            (false, true) => Some(Self::Candidate),
            (false, false) => None,
        }
    }

    /// Words for a report line.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Baseline => "failed on the baseline side only",
            Self::Candidate => "failed on the candidate side",
            Self::Both => "failed on both sides",
        }
    }
}

/// A case that failed on a side, with the phase and reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedCase {
    /// Case id.
    pub id: String,
    /// Where it failed.
    pub side: FailedSide,
    /// The phase and reason of the (candidate's, when it failed) failure.
    pub reason: String,
}

impl FailedCase {
    /// Whether it fails the gate: it failed on the candidate's side.
    pub fn gates(&self) -> bool {
        self.side != FailedSide::Baseline
    }
}

/// Default largest share of compared cases that may go unjudged.
pub const DEFAULT_MAX_UNJUDGED: f64 = 0.25;

/// What the user asked the gate to tolerate.
#[derive(Debug, Clone)]
pub struct GatePolicy {
    /// Largest share of compared cases that may go unjudged, in [0, 1].
    pub max_unjudged: f64,
    /// Cases that must be judged (and present, and not failed).
    pub required: Option<Regex>,
    /// Pass a gate that could not judge enough cases.
    pub allow_inconclusive: bool,
    /// Pass a gate with nothing to judge.
    pub allow_vacuous: bool,
}

impl Default for GatePolicy {
    fn default() -> Self {
        Self {
            max_unjudged: DEFAULT_MAX_UNJUDGED,
            required: None,
            allow_inconclusive: false,
            allow_vacuous: false,
        }
    }
}

/// Why the gate failed, the first reason deciding the exit status.
#[derive(Debug, Clone, PartialEq)]
pub enum GateFailure {
    /// Cases failed on the candidate's side.
    Failed(Vec<String>),
    /// Cases regressed beyond the limits.
    Regressed(Vec<String>),
    /// Nothing to judge.
    Vacuous(String),
    /// Too many (or required) cases could not be judged.
    Unjudged(String),
}

/// A compared case whose verdict is no judgement, with why.
pub fn unjudged(c: &Comparison) -> Vec<(&CaseChange, String)> {
    c.changes.iter().filter_map(|ch| unjudged_reason(ch).map(|why| (ch, why))).collect()
}

/// Why `ch` was not judged, or `None` when it was (regressed, improved or
/// unchanged).
pub fn unjudged_reason(ch: &CaseChange) -> Option<String> {
    let interval = format!(
        "{:+.1}% [{:+.1}%, {:+.1}%], band ±{:.1}%",
        (ch.ratio.point - 1.0) * 100.0,
        (ch.ratio.lower - 1.0) * 100.0,
        (ch.ratio.upper - 1.0) * 100.0,
        ch.band * 100.0
    );
    match ch.verdict {
        Verdict::Regressed | Verdict::Improved | Verdict::Unchanged => None,
        Verdict::TooFewSamples => {
            Some(format!("too few samples ({} baseline, {} candidate)", ch.old_samples, ch.new_samples))
        }
        Verdict::Inconclusive => Some(match &ch.disturbed {
            Some(d) => format!("{interval}; {d}"),
            None => format!("{interval}: neither inside the band nor significantly beyond it"),
        }),
    }
}

/// Judges the gate: every reason it fails, the deciding one first (see the
/// module docs). Empty means the gate passes.
pub fn judge(c: &Comparison, policy: &GatePolicy) -> Vec<GateFailure> {
    let mut out = Vec::new();
    let failed: Vec<String> = c
        .failures
        .iter()
        .filter(|f| f.gates())
        .map(|f| format!("{}: {}: {}", f.id, f.side.describe(), f.reason))
        .collect();
    if !failed.is_empty() {
        out.push(GateFailure::Failed(failed));
    }
    let mut regressed: Vec<String> = c
        .regressions()
        .iter()
        .map(|ch| {
            format!(
                "{}: {:+.1}% [{:+.1}%, {:+.1}%]",
                ch.id,
                (ch.ratio.point - 1.0) * 100.0,
                (ch.ratio.lower - 1.0) * 100.0,
                (ch.ratio.upper - 1.0) * 100.0
            )
        })
        .collect();
    regressed.extend(c.memory_regressions().iter().map(|ch| format!("{}: memory over the limit", ch.id)));
    if !regressed.is_empty() {
        out.push(GateFailure::Regressed(regressed));
    }
    if let Some(why) = c.vacuous.as_ref().filter(|_| !policy.allow_vacuous) {
        out.push(GateFailure::Vacuous(why.clone()));
    } else if c.vacuous.is_none()
        && !policy.allow_inconclusive
        && let Some(why) = could_not_judge(c, policy)
    {
        out.push(GateFailure::Unjudged(why));
    }
    out
}

/// "could not judge N of M cases" when more than the tolerated share, or a
/// required case, went unjudged; the reasons follow, one case a line.
fn could_not_judge(c: &Comparison, policy: &GatePolicy) -> Option<String> {
    let unjudged = unjudged(c);
    let total = c.changes.len();
    let required = |id: &str| policy.required.as_ref().is_some_and(|r| r.is_match(id));
    let mut missing_required: Vec<String> = Vec::new();
    if let Some(r) = &policy.required {
        let compared = |id: &str| c.changes.iter().any(|ch| ch.id == id);
        let known = all_ids(c);
        missing_required = known
            .iter()
            .filter(|id| r.is_match(id) && !compared(id))
            .map(|id| format!("{id}: required, not compared"))
            .collect();
        if !known.iter().any(|id| r.is_match(id)) {
            missing_required.push(format!("no case matches --require {:?}", r.as_str()));
        }
    }
    let required_unjudged = unjudged.iter().any(|(ch, _)| required(&ch.id));
    let share = if total == 0 { 0.0 } else { unjudged.len() as f64 / total as f64 };
    if share <= policy.max_unjudged && !required_unjudged && missing_required.is_empty() {
        return None;
    }
    let mut lines = vec![format!(
        "could not judge {} of {total} cases (more than {:.0}% tolerated{})",
        unjudged.len(),
        policy.max_unjudged * 100.0,
        if required_unjudged || !missing_required.is_empty() { ", or a required case" } else { "" }
    )];
    lines.extend(
        unjudged.iter().map(|(ch, why)| {
            format!("{}{}: {why}", ch.id, if required(&ch.id) { " (required)" } else { "" })
        }),
    );
    lines.extend(missing_required);
    Some(lines.join("\n  "))
}

/// Every case id the comparison names, compared or not, once each.
fn all_ids(c: &Comparison) -> Vec<&str> {
    let mut ids: Vec<&str> = c
        .changes
        .iter()
        .map(|ch| ch.id.as_str())
        .chain(c.failed.iter().map(String::as_str))
        .chain(c.skipped.iter().map(String::as_str))
        .chain(c.only_in_baseline.iter().map(String::as_str))
        .chain(c.only_in_candidate.iter().map(String::as_str))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::{CompareOptions, Method};
    use crate::results::Estimate;

    fn change(id: &str, verdict: Verdict, ratio: f64) -> CaseChange {
        CaseChange {
            id: id.into(),
            old_median_ns: 100.0,
            new_median_ns: 100.0 * ratio,
            old_samples: 30,
            new_samples: 30,
            ratio: Estimate { point: ratio, lower: ratio * 0.95, upper: ratio * 1.05, level: 0.95 },
            p_value: 0.5,
            q_value: 0.5,
            band: 0.02,
            band_source: "default".into(),
            verdict,
            beyond_limit: verdict == Verdict::Regressed && ratio > 1.05,
            memory: None,
            disturbed: None,
            measure: Default::default(),
        }
    }

    fn comparison(changes: Vec<CaseChange>, failures: Vec<FailedCase>) -> Comparison {
        Comparison {
            baseline: "a".into(),
            candidate: "b".into(),
            method: Method::Stored,
            runs: (1, 1),
            machine_mismatch: None,
            drift: None,
            changes,
            only_in_baseline: vec![],
            only_in_candidate: vec![],
            failed: failures.iter().map(|f| f.id.clone()).collect(),
            failures,
            skipped: vec![],
            vacuous: None,
            notes: vec![],
            options: CompareOptions::default(),
        }
    }

    fn failure(id: &str, side: FailedSide) -> FailedCase {
        FailedCase { id: id.into(), side, reason: "verify: wrong result".into() }
    }

    #[test]
    fn a_candidate_failure_gates_first_and_a_baseline_only_failure_does_not() {
        let ok = vec![change("x", Verdict::Unchanged, 1.0), change("y", Verdict::Unchanged, 1.0)];
        let p = GatePolicy::default();
        assert!(judge(&comparison(ok.clone(), vec![failure("z", FailedSide::Baseline)]), &p).is_empty());
        for side in [FailedSide::Candidate, FailedSide::Both] {
            let mut changes = ok.clone();
            changes.push(change("r", Verdict::Regressed, 1.3));
            let g = judge(&comparison(changes, vec![failure("z", side)]), &p);
            let GateFailure::Failed(lines) = &g[0] else { panic!("{g:?}") };
            assert!(lines[0].starts_with("z: ") && lines[0].contains("wrong result"), "{lines:?}");
            assert!(matches!(g[1], GateFailure::Regressed(_)), "{g:?}");
        }
    }

    #[test]
    fn more_than_a_quarter_unjudged_fails_unless_allowed() {
        let mut changes: Vec<CaseChange> =
            (0..3).map(|i| change(&format!("u{i}"), Verdict::Unchanged, 1.0)).collect();
        changes.push(change("i0", Verdict::Inconclusive, 1.25));
        let p = GatePolicy::default();
        assert!(judge(&comparison(changes.clone(), vec![]), &p).is_empty(), "1 of 4 is a quarter: tolerated");
        changes.push(change("i1", Verdict::TooFewSamples, 1.0));
        let g = judge(&comparison(changes.clone(), vec![]), &p);
        let [GateFailure::Unjudged(why)] = g.as_slice() else { panic!("{g:?}") };
        assert!(why.starts_with("could not judge 2 of 5 cases"), "{why}");
        assert!(why.contains("i0: +25.0%") && why.contains("i1: too few samples"), "{why}");
        let allowed = GatePolicy { allow_inconclusive: true, ..GatePolicy::default() };
        assert!(judge(&comparison(changes, vec![]), &allowed).is_empty());
    }

    #[test]
    fn a_required_case_must_be_judged_and_present() {
        let changes = vec![
            change("a", Verdict::Unchanged, 1.0),
            change("b", Verdict::Unchanged, 1.0),
            change("c", Verdict::Unchanged, 1.0),
            change("d", Verdict::Inconclusive, 1.0),
        ];
        let req = |r: &str| GatePolicy { required: Some(Regex::new(r).unwrap()), ..GatePolicy::default() };
        assert!(judge(&comparison(changes.clone(), vec![]), &req("^a$")).is_empty());
        let g = judge(&comparison(changes.clone(), vec![]), &req("^d$"));
        assert!(matches!(&g[..], [GateFailure::Unjudged(w)] if w.contains("d (required)")), "{g:?}");
        let g = judge(&comparison(changes, vec![]), &req("^nope$"));
        assert!(matches!(&g[..], [GateFailure::Unjudged(w)] if w.contains("no case matches")), "{g:?}");
    }

    #[test]
    fn a_vacuous_comparison_fails_as_such_not_as_unjudged() {
        let mut c = comparison(vec![], vec![]);
        c.vacuous = Some("a run compared with itself".into());
        assert_eq!(
            judge(&c, &GatePolicy::default()),
            vec![GateFailure::Vacuous("a run compared with itself".into())]
        );
        assert!(judge(&c, &GatePolicy { allow_vacuous: true, ..GatePolicy::default() }).is_empty());
    }
}
