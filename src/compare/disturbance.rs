//! Case-rounds measured while the machine was disturbed, set aside.
//!
//! On a shared 2-core host another process sometimes holds one core for
//! seconds. A case on two threads then waits for its slower half: in the
//! A/A experiment of docs/verdicts.md, one run of ten had `add 500x500`
//! 2-3.6x slower and `log 1M` 1.1-1.65x slower in both of its rounds, and
//! that one run failed six of the nine gates it took part in. The
//! one-thread canaries stayed flat: they ran on the free core. The run's
//! [`CanaryKind::Parallel`] canary (the compute chain on every pool thread
//! at once, timed to the slowest) sees it.
//!
//! Rule: a case's round is *disturbed* when the parallel canary timed just
//! before it, or the next one (timed just after it), took more than
//! [`DISTURBED_FACTOR`] times the median of the run's parallel canaries.
//! A comparison sets a disturbed round aside when the same side has an
//! undisturbed round of that case to judge on; when it has none, the case
//! is still compared, but it cannot be called regressed or improved (it is
//! inconclusive, with the reason). Results recorded before canaries named
//! their case, or with one worker thread, have no parallel canary: nothing
//! is set aside for them.

use crate::results::{CanaryKind, RunReport};
use std::collections::HashMap;

/// How far above its run's median the parallel canary must be to call the
/// case-rounds beside it disturbed. A core held by another process makes
/// it several times slower (the chain waits for a whole time slice); the
/// quiet host's canaries stay within a few per cent of their median.
pub const DISTURBED_FACTOR: f64 = 1.5;

/// Fewest parallel canaries a run needs for its median to be a reference.
pub const MIN_CANARIES: usize = 8;

/// The disturbed rounds of one run: `(case id, round)` to the worse of the
/// two canaries beside it, as a multiple of the run's median.
pub type Disturbed = HashMap<(String, u32), f64>;

/// The disturbed case-rounds of `run` (see the module docs).
pub fn disturbed(run: &RunReport) -> Disturbed {
    let parallel: Vec<_> = run
        .canaries
        .iter()
        .filter(|c| c.kind == CanaryKind::Parallel && c.nanos.is_finite() && c.nanos > 0.0)
        .collect();
    let mut out = Disturbed::new();
    if parallel.len() < MIN_CANARIES {
        return out;
    }
    let median = crate::stats::median(&parallel.iter().map(|c| c.nanos).collect::<Vec<_>>());
    for (i, c) in parallel.iter().enumerate() {
        let Some(case) = &c.case else { continue };
        let after = parallel.get(i + 1).map_or(0.0, |n| n.nanos);
        let worst = c.nanos.max(after) / median;
        if worst > DISTURBED_FACTOR {
            out.insert((case.clone(), c.round), worst);
        }
    }
    out
}

/// What one side of one case lost to disturbance.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SetAside {
    /// Rounds set aside (an undisturbed round of the case remained).
    pub rounds: usize,
    /// Every round of the case was disturbed in some run: they were kept,
    /// and the case cannot be called changed.
    pub all_disturbed: bool,
    /// The worst canary ratio beside a disturbed round (0 when none).
    pub worst: f64,
}

/// Keeps the undisturbed rounds of one run's case (`rounds[r]` are round
/// `r`'s per-iteration times), or all of them when every non-empty round
/// was disturbed; `aside` records what happened.
pub fn filter_rounds(
    rounds: Vec<Vec<f64>>,
    id: &str,
    disturbed: &Disturbed,
    aside: &mut SetAside,
) -> Vec<Vec<f64>> {
    let flagged: Vec<Option<f64>> =
        (0..rounds.len()).map(|r| disturbed.get(&(id.to_string(), r as u32)).copied()).collect();
    for f in flagged.iter().flatten() {
        aside.worst = aside.worst.max(*f);
    }
    let clean = rounds.iter().zip(&flagged).any(|(s, f)| !s.is_empty() && f.is_none());
    if !clean {
        aside.all_disturbed |= rounds.iter().zip(&flagged).any(|(s, f)| !s.is_empty() && f.is_some());
        return rounds;
    }
    rounds
        .into_iter()
        .zip(flagged)
        .map(|(s, f)| {
            if f.is_some() && !s.is_empty() {
                aside.rounds += 1;
                Vec::new()
            } else {
                s
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::CanarySample;

    fn run_with(parallel: &[(f64, &str, u32)]) -> RunReport {
        let mut r = crate::report::fixture();
        r.canaries = parallel
            .iter()
            .map(|&(nanos, case, round)| CanarySample {
                kind: CanaryKind::Parallel,
                round,
                nanos,
                case: Some(case.to_string()),
            })
            .collect();
        r
    }

    #[test]
    fn a_slow_canary_flags_the_case_before_and_after_it() {
        // Ten cases in one round; the canary before `c5` is 3x the median:
        // `c4` (measured just before it) and `c5` (just after) are flagged.
        let names: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
        let mut spec: Vec<(f64, &str, u32)> = names.iter().map(|n| (100.0, n.as_str(), 0)).collect();
        spec[5].0 = 300.0;
        let d = disturbed(&run_with(&spec));
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d[&("c4".to_string(), 0)], 3.0);
        assert_eq!(d[&("c5".to_string(), 0)], 3.0);
        // Within the factor: nothing.
        spec[5].0 = 140.0;
        assert!(disturbed(&run_with(&spec)).is_empty());
        // Too few canaries for a median: nothing, whatever the values.
        assert!(disturbed(&run_with(&[(100.0, "a", 0), (900.0, "b", 0)])).is_empty());
    }

    #[test]
    fn disturbed_rounds_go_only_while_a_clean_one_remains() {
        let mut d = Disturbed::new();
        d.insert(("x".into(), 1), 2.5);
        let mut aside = SetAside::default();
        let kept = filter_rounds(vec![vec![1.0, 1.1], vec![3.0, 3.1]], "x", &d, &mut aside);
        assert_eq!(kept, vec![vec![1.0, 1.1], vec![]]);
        assert_eq!(aside, SetAside { rounds: 1, all_disturbed: false, worst: 2.5 });

        // The only round is disturbed: kept, and the case marked.
        let mut aside = SetAside::default();
        let kept = filter_rounds(vec![vec![], vec![3.0]], "x", &d, &mut aside);
        assert_eq!(kept, vec![vec![], vec![3.0]]);
        assert!(aside.all_disturbed && aside.rounds == 0);

        // Another case's flags do not touch this one.
        let mut aside = SetAside::default();
        assert_eq!(filter_rounds(vec![vec![1.0], vec![2.0]], "y", &d, &mut aside).len(), 2);
        assert_eq!(aside, SetAside::default());
    }
}
