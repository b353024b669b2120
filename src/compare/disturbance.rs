//! Case-rounds measured while the machine was disturbed, set aside.
//!
//! On a shared 2-core host another process sometimes holds one core for
//! seconds. A case on two threads then waits for its slower half: in the
//! A/A experiment of docs/verdicts.md, one run of ten had `add 500x500`
//! 2-3.6x slower and `log 1M` 1.1-1.65x slower in both of its rounds, and
//! that one run failed six of the nine gates it took part in, while the
//! one-thread canaries stayed flat (they ran on the free core). `run`
//! records, for every case-round, how much CPU other work took meanwhile
//! (`harness::load`, from the kernel's counters).
//!
//! Rule: other work *took* the CPU time the hypervisor stole plus what
//! other processes used beyond the CPUs this run left free (`cpus -
//! threads`). A case-round is *disturbed* when that exceeds
//! [`DISTURBED_SHARE`] of one core over its wall time (and
//! [`MIN_TAKEN_NS`], the counters' resolution). A comparison sets a
//! disturbed round aside when the same side has an undisturbed round of
//! that case to judge on; when it has none, the case is still compared but
//! cannot be called regressed or improved (inconclusive, with the reason)
//! unless the change is larger than the disturbance could explain
//! ([`explainable_factor`]).
//! Results without load figures (older ones, other platforms) set nothing
//! aside.

use crate::results::{LoadSample, RunReport};
use std::collections::HashMap;

/// The share of one core other work may take during a case-round before the
/// round counts as disturbed. A quiet host's kernel threads and daemons
/// take well under 1%; a compiler or another benchmark on the other core
/// takes most of one.
pub const DISTURBED_SHARE: f64 = 0.10;

/// How much slower (or faster) other work taking `worst` of a core can make
/// a case: `1 + 3 * worst`. A two-thread case waits for its slower half, and
/// the A/A runs of docs/verdicts.md saw up to 3.6x with about one core
/// taken; a change whose whole interval lies beyond this factor is not the
/// disturbance's doing, and is still called (a 10x slowdown measured while
/// a compiler ran is still a 10x slowdown).
pub fn explainable_factor(worst: f64) -> f64 {
    1.0 + 3.0 * worst.max(0.0)
}

/// Below this much taken time nothing is called disturbed: the kernel
/// counts in 10 ms ticks, so a reading is good to about two of them.
pub const MIN_TAKEN_NS: f64 = 3e7;

/// The disturbed rounds of one run: `(case id, round)` to the share of a
/// core other work took during it.
pub type Disturbed = HashMap<(String, u32), f64>;

/// The disturbed case-rounds of `run` (see the module docs).
pub fn disturbed(run: &RunReport) -> Disturbed {
    run.load.iter().filter_map(|l| taken_share(l).map(|share| ((l.case.clone(), l.round), share))).collect()
}

/// The share of a core other work took from the measurement in `l`, when
/// that makes it disturbed (see the module docs); `None` when it ran clean
/// or its figures are unusable. `run` and `ab` use the same rule.
pub fn taken_share(l: &LoadSample) -> Option<f64> {
    if !(l.wall_ns.is_finite() && l.wall_ns > 0.0) {
        return None;
    }
    let spare = (l.cpus as f64 - l.threads as f64).max(0.0);
    let taken = l.steal_ns.max(0.0) + (l.others_ns - spare * l.wall_ns).max(0.0);
    (taken > MIN_TAKEN_NS && taken > DISTURBED_SHARE * l.wall_ns).then(|| taken / l.wall_ns)
}

/// What one side of one case lost to disturbance.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SetAside {
    /// Rounds set aside (an undisturbed round of the case remained).
    pub rounds: usize,
    /// Every round of the case was disturbed in some run: they were kept,
    /// and the case cannot be called changed.
    pub all_disturbed: bool,
    /// The largest share of a core other work took in a disturbed round
    /// (0 when none).
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

    fn load(case: &str, round: u32, wall_ms: f64, others_ms: f64, steal_ms: f64) -> LoadSample {
        LoadSample {
            case: case.into(),
            round,
            wall_ns: wall_ms * 1e6,
            others_ns: others_ms * 1e6,
            steal_ns: steal_ms * 1e6,
            cpus: 2,
            threads: 2,
        }
    }

    #[test]
    fn other_work_beyond_the_spare_cpus_disturbs_a_round() {
        let mut r = crate::report::fixture();
        r.load = vec![
            load("quiet", 0, 1000.0, 10.0, 0.0),   // 1% of a core: background
            load("busy", 0, 1000.0, 600.0, 0.0),   // a compiler on one core
            load("stolen", 1, 1000.0, 0.0, 200.0), // the hypervisor's
            load("short", 0, 100.0, 20.0, 0.0),    // 20% but below resolution
        ];
        let d = disturbed(&r);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!((d[&("busy".to_string(), 0)] - 0.6).abs() < 1e-9);
        assert!((d[&("stolen".to_string(), 1)] - 0.2).abs() < 1e-9);
        // With a spare CPU (one thread on two), other work up to one core
        // takes nothing from the run.
        r.load = vec![LoadSample { threads: 1, ..load("busy", 0, 1000.0, 600.0, 0.0) }];
        assert!(disturbed(&r).is_empty());
        r.load = vec![LoadSample { threads: 1, ..load("busy", 0, 1000.0, 1300.0, 0.0) }];
        assert_eq!(disturbed(&r).len(), 1, "1.3 cores of other work on 2 CPUs, 1 left spare");
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
