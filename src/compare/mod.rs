//! Statistical comparison of a candidate with a baseline: stored result
//! sets (each side one or several runs of the same build), or a paired A/B
//! run of two builds ([`paired`]).
//!
//! Cases are matched by id. A case measured on both sides is compared on the
//! per-iteration times of its raw samples (`nanos / iterations`), after the
//! outlier policy each run itself applied (`--outliers remove` removes the
//! same samples here as in the run's own estimates):
//!
//! - **ratio**: `median(new) / median(old)` with a seeded *hierarchical*
//!   bootstrap interval ([`crate::stats::hierarchical_ratio_ci`]): runs,
//!   then rounds within a run, then samples within a round are resampled,
//!   so the interval covers run-to-run and round-to-round variation, not only
//!   the noise inside one round. A side with a single run of a single round
//!   replicates nothing above the samples; its interval then adds an assumed
//!   run-to-run spread ([`CompareOptions::assumed_run_spread`], or the case's
//!   spread learned from history) and the comparison says so.
//! - **p**: two-sided Mann-Whitney U test, exact (permutation) up to
//!   [`crate::stats::EXACT_MAX_N`] pooled samples, normal beyond.
//! - **q**: Benjamini-Hochberg adjustment over every compared case.
//! - **band**: the case's noise band, `max(noise_threshold, noise_k x the
//!   case's run-to-run spread learned from history)`.
//! - **machine drift** ([`drift`]): canaries and the cross-case median.
//! - **disturbed rounds** ([`disturbance`]): a case's round during which
//!   other work took a core from the run (the kernel's counters, recorded
//!   by `run`) is set aside when the side has a clean round of the case;
//!   with none, the case cannot be called changed.
//!
//! # Verdict rule
//!
//! A case is *significant* when `q < alpha` (false-discovery control over
//! the plan) **or** `p < case_alpha` (a per-case bar, as asv's `p < 0.002`,
//! so that a lone large change is never hidden by the size of the plan: a
//! 2x slowdown among 500 cases at 10 samples has exact `p = 1.1e-5` but
//! `q ~ 0.005`). With the case's band `b` and the machine's drift envelope
//! `[d_lo, d_hi]` (`[1, 1]` unless the drift is beyond the band):
//!
//! 1. **too few samples** when either side has fewer than
//!    [`CompareOptions::min_samples`];
//! 2. **regressed** when significant and the whole interval lies above
//!    `d_hi (1 + b)`; **improved** when significant and it lies below
//!    `d_lo (1 - b)`;
//! 3. **unchanged** only when the whole interval lies inside `[1 - b, 1 + b]`:
//!    evidence of no change, not absence of evidence;
//! 4. **inconclusive** otherwise (the interval is wider than the band, or
//!    the case moved with the machine): no evidence either way.
//!
//! Every case is also judged relative to the median ratio of the cases of
//! its size, the intervals combined on the log scale (`relative_ratio`):
//! regressed or improved only when it is so both ways, else inconclusive.
//! A *large* case (at least [`drift::LARGE_BYTES`] per iteration) moves
//! with the memory system the host shares, which the canaries cannot see;
//! the smaller ones move together over a few minutes of the host by less
//! than the canaries resolve.
//!
//! # Gating
//!
//! A regressed case is **beyond the limit** when its point change (relative
//! to the machine's drift, when that is beyond the band) exceeds
//! [`CompareOptions::max_regression`]. Memory (peak live bytes, allocations
//! per iteration) regresses when either grows by more than
//! [`CompareOptions::max_memory_regression`] and the new value is at least
//! [`PEAK_FLOOR_BYTES`] / [`ALLOCS_FLOOR`]. A comparison with nothing to
//! judge (no case in common, every case failed, a run compared with itself)
//! is [`Comparison::vacuous`]: the app fails the gate on it unless allowed.

#[cfg(test)]
mod calibration;
pub mod counts;
pub mod disturbance;
pub mod drift;
mod frame;
pub mod gate;
pub mod input;
mod matching;
mod memory;
mod notes;
mod options;
mod render;
mod smoke;
#[cfg(test)]
mod tests;
mod verdict;

pub use memory::{ALLOCS_FLOOR, MemoryChange, PEAK_FLOOR_BYTES};
pub use render::{COMPARISON_SCHEMA_VERSION, render_json, render_markdown, render_table};

pub mod paired;

use crate::results::{Estimate, RunReport};
pub use drift::MachineDrift;
use serde::{Deserialize, Serialize};

pub use options::{CompareOptions, Judgement, Method, Verdict};

/// The comparison of one case present and measured in both runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseChange {
    /// Case id.
    pub id: String,
    /// Median per-iteration time of the baseline's samples, ns.
    pub old_median_ns: f64,
    /// Median per-iteration time of the candidate's samples, ns.
    pub new_median_ns: f64,
    /// Samples on the baseline's side.
    #[serde(default)]
    pub old_samples: usize,
    /// Samples on the candidate's side.
    #[serde(default)]
    pub new_samples: usize,
    /// `new / old` time with its interval; above 1 is slower (normalised by
    /// the machine's drift with `--normalize`).
    pub ratio: Estimate,
    /// Two-sided p-value (Mann-Whitney; Wilcoxon signed-rank when paired).
    pub p_value: f64,
    /// Benjamini-Hochberg q-value over all compared cases.
    pub q_value: f64,
    /// The case's noise band half-width used (fraction).
    #[serde(default)]
    pub band: f64,
    /// Where the band comes from: `default` or `history (N runs)`.
    #[serde(default)]
    pub band_source: String,
    /// The verdict (see the module docs).
    pub verdict: Verdict,
    /// Regressed, and the point change exceeds the regression limit.
    pub beyond_limit: bool,
    /// Memory figures, when both runs counted allocations.
    pub memory: Option<MemoryChange>,
    /// Set when rounds of this case ran while the machine was disturbed:
    /// how many were set aside, or why the case could not be judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disturbed: Option<String>,
    /// What the verdict was decided on: `time` (the medians above are ns)
    /// or `instructions` (they are instructions per iteration, judged
    /// against the count band; see [`counts`]). Absent in older files: time.
    #[serde(default)]
    pub measure: crate::inside::Measure,
}

/// A candidate compared with a baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Name of the baseline (a baseline name or a file).
    pub baseline: String,
    /// Name of the candidate.
    pub candidate: String,
    /// How the sides were measured.
    #[serde(default)]
    pub method: Method,
    /// Runs on each side (baseline, candidate).
    #[serde(default)]
    pub runs: (usize, usize),
    /// Set when the runs come from different machines: describes both
    /// fingerprints and CPU models.
    pub machine_mismatch: Option<String>,
    /// The machine's drift between the sides (stored comparisons).
    #[serde(default)]
    pub drift: Option<MachineDrift>,
    /// Compared cases, worst regression (largest ratio) first.
    pub changes: Vec<CaseChange>,
    /// Cases only the baseline has.
    pub only_in_baseline: Vec<String>,
    /// Cases only the candidate has.
    pub only_in_candidate: Vec<String>,
    /// Cases in both runs that failed (or have no usable samples) on either
    /// side, hence not compared.
    pub failed: Vec<String>,
    /// Every case that failed on a side (also those only one side has), with
    /// the side and the reason: a failure on the candidate's side fails the
    /// gate ([`gate`]). Absent in comparisons written before it existed.
    #[serde(default)]
    pub failures: Vec<gate::FailedCase>,
    /// Cases skipped on either side (not run on that machine).
    #[serde(default)]
    pub skipped: Vec<String>,
    /// Why the comparison has nothing to judge, when it has not.
    #[serde(default)]
    pub vacuous: Option<String>,
    /// Things a reader must know to trust the verdicts (drift, assumed
    /// spreads, outlier policies, injected slowdowns), one line each.
    #[serde(default)]
    pub notes: Vec<String>,
    /// The options used.
    pub options: CompareOptions,
}

impl Comparison {
    /// Time regressions beyond [`CompareOptions::max_regression`].
    pub fn regressions(&self) -> Vec<&CaseChange> {
        self.changes.iter().filter(|c| c.beyond_limit).collect()
    }

    /// Cases whose memory regressed.
    pub fn memory_regressions(&self) -> Vec<&CaseChange> {
        self.changes.iter().filter(|c| c.memory.as_ref().is_some_and(|m| m.regressed)).collect()
    }

    /// True when a time regression beyond the limit, a memory regression or
    /// a case that failed on the candidate's side is present (the gate's
    /// first two reasons; [`gate::judge`] has them all).
    pub fn has_gating_failure(&self) -> bool {
        self.changes.iter().any(|c| c.beyond_limit || c.memory.as_ref().is_some_and(|m| m.regressed))
            || self.failures.iter().any(gate::FailedCase::gates)
    }

    /// Number of compared cases with verdict `v`.
    pub fn count(&self, v: Verdict) -> usize {
        self.changes.iter().filter(|c| c.verdict == v).count()
    }
}

/// Run-to-run spreads learned from history ([`crate::history::learned_spreads`]).
pub use crate::history::Spreads;

/// Compares one candidate run with one baseline run (see
/// [`compare_sets`]), without history.
pub fn compare(
    baseline_name: &str,
    old: &RunReport,
    candidate_name: &str,
    new: &RunReport,
    opts: &CompareOptions,
) -> Comparison {
    compare_sets(
        baseline_name,
        std::slice::from_ref(old),
        candidate_name,
        std::slice::from_ref(new),
        &Spreads::new(),
        opts,
    )
}

/// Compares the candidate's runs `new` with the baseline's runs `old`
/// (each side one or several runs of one build); `spreads` are the cases'
/// learned run-to-run spreads (empty without history). See the module docs.
///
/// The steps, each in a module of its own: match the cases (`matching`),
/// decide what each is judged relative to (`frame`), judge each
/// (`verdict`), then write the notes (`notes`).
pub fn compare_sets(
    baseline_name: &str,
    old: &[RunReport],
    candidate_name: &str,
    new: &[RunReport],
    spreads: &Spreads,
    opts: &CompareOptions,
) -> Comparison {
    if counts::is_counted(old) && counts::is_counted(new) {
        return counts::compare(baseline_name, old, candidate_name, new, opts);
    }
    let matching::Matched { only_in_baseline, only_in_candidate, failed, skipped, pending, removed } =
        matching::match_cases(old, new);
    let mut notes = Vec::new();
    let frame = frame::frame(old, new, &pending, opts, &mut notes);
    let (changes, tally) = verdict::judge_all(pending, spreads, &frame, (old, new), opts);
    notes::judging_notes(&changes, &tally, &frame, opts, &mut notes);
    notes::side_notes(old, new, removed, &mut notes);
    let vacuous = matching::vacuous_reason(old, new, &changes, &failed, &skipped);
    Comparison {
        baseline: baseline_name.to_string(),
        candidate: candidate_name.to_string(),
        method: Method::Stored,
        runs: (old.len(), new.len()),
        machine_mismatch: matching::machine_mismatch(old, new),
        drift: Some(frame.drift),
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

/// FNV-1a, 64-bit: a stable hash of case ids for per-case seeds (std's
/// hasher is randomly keyed per process, which would break reproducibility).
pub(crate) fn fnv1a_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}
