//! The dashboard's comparison, by `tfbench compare`'s rules: of the
//! finished live runs and the stored baselines, the newest (by the start
//! time its run recorded) is the candidate and the newest other one the
//! baseline; both are checked as `compare` checks them, judged with this
//! machine's learned noise bands, and a comparison with nothing to judge
//! (identical runs, no case in common) is refused with `compare`'s reason,
//! shown on the page instead of a comparison.
//!
//! A run streamed here and also saved as a baseline is one run under two
//! names: it is not taken as its own baseline (the next older run is).
//!
//! The comparison is remembered for as long as its two sides and the noise
//! bands stay the same, so reloading the page (every few seconds while a
//! run streams, without scripts) does not rerun the bootstrap on the
//! machine that is measuring.

use crate::compare::{self, CompareOptions, Comparison, Spreads};
use crate::results::RunReport;
use std::sync::Mutex;

/// One results file of the page that a comparison may take as a side.
pub(crate) struct Side<'a> {
    /// Its index among the page's results files.
    pub index: usize,
    /// Its label there.
    pub label: &'a str,
    /// The run shown (a baseline's newest).
    pub report: &'a RunReport,
    /// A baseline's earlier runs, oldest first (empty for a live run).
    pub earlier: &'a [RunReport],
}

impl Side<'_> {
    /// When its (newest) run started, RFC 3339 in UTC.
    fn started(&self) -> &str {
        &self.report.started_at
    }

    /// Whether it holds a run of `other` (by run id; ids are unique).
    fn shares_run(&self, other: &Side) -> bool {
        let ids = |s: &Side<'_>| -> Vec<String> {
            s.earlier.iter().chain([s.report]).map(|r| r.run_id.clone()).filter(|id| !id.is_empty()).collect()
        };
        let theirs = ids(other);
        ids(self).iter().any(|id| theirs.contains(id))
    }

    /// Every run, oldest first, checked as `compare` checks a side.
    fn runs(&self) -> anyhow::Result<Vec<RunReport>> {
        let runs: Vec<RunReport> = self.earlier.iter().chain([self.report]).cloned().collect();
        crate::baseline::check_same_build_and_machine(self.label, &runs)?;
        for r in &runs {
            compare::input::validate(self.label, r)?;
        }
        Ok(runs)
    }
}

/// What the page shows of a comparison.
pub(crate) enum Shown {
    /// Fewer than two runs to compare.
    Nothing,
    /// The comparison, with the page indices of its (baseline, candidate).
    Compared(Box<Comparison>, (usize, usize)),
    /// No comparison, and why (`compare`'s words).
    Refused(String),
}

/// The positions in `sides` of the (baseline, candidate) pair: the newest
/// side is the candidate (the earlier in `sides` on a tie), the newest of
/// the others that holds none of its runs the baseline.
pub(crate) fn pick(sides: &[Side]) -> Option<(usize, usize)> {
    let newest = |among: &mut dyn Iterator<Item = usize>| {
        among.fold(None, |best: Option<usize>, i| match best {
            Some(b) if sides[b].started() >= sides[i].started() => Some(b),
            _ => Some(i),
        })
    };
    let cand = newest(&mut (0..sides.len()))?;
    let base = newest(&mut (0..sides.len()).filter(|&i| i != cand && !sides[i].shares_run(&sides[cand])))?;
    Some((base, cand))
}

/// The last comparison made, with what it was made of.
static LAST: Mutex<Option<(String, Comparison)>> = Mutex::new(None);

/// The comparison the page shows of `sides` (see the module docs).
pub(crate) fn comparison(sides: &[Side], spreads: &Spreads) -> Shown {
    let Some((b, c)) = pick(sides) else { return Shown::Nothing };
    let (base, cand) = (&sides[b], &sides[c]);
    let key = format!("{}\n{}\n{}", identity(base), identity(cand), spreads_identity(spreads));
    let cached =
        LAST.lock().ok().and_then(|last| last.as_ref().filter(|(k, _)| *k == key).map(|(_, c)| c.clone()));
    let cmp = match cached {
        Some(cmp) => cmp,
        None => {
            let (old, new) = match (base.runs(), cand.runs()) {
                (Ok(o), Ok(n)) => (o, n),
                (Err(e), _) | (_, Err(e)) => return Shown::Refused(format!("{e:#}")),
            };
            let cmp = compare::compare_sets(
                base.label,
                &old,
                cand.label,
                &new,
                spreads,
                &CompareOptions::default(),
            );
            if let Ok(mut last) = LAST.lock() {
                *last = Some((key, cmp.clone()));
            }
            cmp
        }
    };
    match &cmp.vacuous {
        Some(why) => Shown::Refused(format!(
            "the comparison has nothing to judge: {why} (baseline {}, candidate {}: the newest run)",
            base.label, cand.label
        )),
        None => Shown::Compared(Box::new(cmp), (base.index, cand.index)),
    }
}

/// What identifies a side's data for the cache: its label and, per run,
/// the id, start time and the finished cases.
fn identity(s: &Side) -> String {
    let runs: Vec<String> = s
        .earlier
        .iter()
        .chain([s.report])
        .map(|r| format!("{} {} {}", r.run_id, r.started_at, r.cases.len()))
        .collect();
    format!("{}: {}", s.label, runs.join(", "))
}

/// What identifies the learned noise bands for the cache.
fn spreads_identity(spreads: &Spreads) -> String {
    let mut parts: Vec<String> = spreads.iter().map(|(id, s)| format!("{id} {} {}", s.run, s.runs)).collect();
    parts.sort();
    parts.join(";")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, started: &str) -> RunReport {
        let mut r = crate::report::fixture();
        r.run_id = id.into();
        r.started_at = started.into();
        r
    }

    fn side<'a>(index: usize, r: &'a RunReport, earlier: &'a [RunReport]) -> Side<'a> {
        Side { index, label: "x", report: r, earlier }
    }

    #[test]
    fn the_newest_is_the_candidate_and_never_its_own_baseline() {
        let (a, b, c) = (
            run("a", "2026-01-01T00:00:00Z"),
            run("b", "2026-01-03T00:00:00Z"),
            run("c", "2026-01-02T00:00:00Z"),
        );
        let sides = [side(0, &a, &[]), side(1, &b, &[]), side(2, &c, &[])];
        assert_eq!(pick(&sides), Some((2, 1)));
        // The newest run streamed live and saved as a baseline: one run.
        let saved = run("b", "2026-01-03T00:00:00Z");
        let sides = [side(0, &b, &[]), side(1, &saved, &[]), side(2, &a, &[])];
        assert_eq!(pick(&sides), Some((2, 0)));
        // A baseline whose earlier runs hold the candidate is the same data too.
        let appended = run("z", "2026-01-04T00:00:00Z");
        let earlier = [run("b", "2026-01-03T00:00:00Z")];
        let sides = [side(0, &b, &[]), side(1, &appended, &earlier)];
        assert_eq!(pick(&sides), None);
        assert_eq!(pick(&[side(0, &a, &[])]), None);
    }

    #[test]
    fn identical_runs_are_refused_with_compares_reason() {
        // Two saved copies of one run's samples under new ids (what a copied
        // results file is): `compare` calls that vacuous, and so does the page.
        let a = run("a", "2026-01-01T00:00:00Z");
        let b = run("b", "2026-01-02T00:00:00Z");
        let sides = [side(0, &a, &[]), side(1, &b, &[])];
        match comparison(&sides, &Spreads::new()) {
            Shown::Refused(why) => assert!(why.contains("compared with itself"), "{why}"),
            _ => panic!("identical runs must be refused"),
        }
    }
}
