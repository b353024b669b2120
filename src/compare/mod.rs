//! Statistical comparison of a candidate run against a baseline run.
//!
//! Cases are matched by id. A case measured in both runs is compared on the
//! per-iteration times of its raw samples (`nanos / iterations`):
//!
//! - **ratio**: `median(new) / median(old)` with a seeded percentile-bootstrap
//!   interval at [`CompareOptions::confidence_level`] (each case seeded with
//!   `seed ^ hash(id)`, so a comparison is reproducible and one case's
//!   interval does not depend on which other cases are present);
//! - **p**: two-sided Mann-Whitney U test of the two sets of times;
//! - **q**: Benjamini-Hochberg adjustment of the p-values over every case
//!   compared in this run, so comparing many cases does not manufacture
//!   regressions out of noise.
//!
//! # Verdict rule
//!
//! With the noise band `[1 - noise_threshold, 1 + noise_threshold]`:
//!
//! 1. **regressed** when `q < alpha` and the whole ratio interval lies above
//!    `1 + noise_threshold`;
//! 2. **improved** when `q < alpha` and the whole interval lies below
//!    `1 - noise_threshold`;
//! 3. **unchanged** when the whole interval lies inside the band, or when the
//!    test is not significant (`q >= alpha`) and the point ratio is inside it;
//! 4. **inconclusive** otherwise: the interval straddles an edge of the band,
//!    or a change outside the band is not significant. Non-finite statistics
//!    also end here.
//!
//! A significant change smaller than the noise band is therefore
//! "unchanged": it is real, but too small to act on.
//!
//! # Gating
//!
//! A regressed case is **beyond the limit** when its point change exceeds
//! [`CompareOptions::max_regression`]. Memory (peak live bytes, allocations
//! per iteration) regresses when either grows by more than
//! [`CompareOptions::max_memory_regression`] and the new value is at least
//! [`PEAK_FLOOR_BYTES`] / [`ALLOCS_FLOOR`], so a few stray bytes (0 -> 8 B)
//! are not flagged. [`Comparison::has_gating_failure`] is true when either
//! kind of regression is present. Cases missing on one side or failed on
//! either side are listed but never compared, and do not gate.

mod memory;
mod render;
#[cfg(test)]
mod tests;

pub use memory::{ALLOCS_FLOOR, MemoryChange, PEAK_FLOOR_BYTES};
pub use render::{COMPARISON_SCHEMA_VERSION, render_json, render_markdown, render_table};

use crate::results::{CaseResult, Estimate, RunReport};
use crate::stats;
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

/// Thresholds and statistics settings of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareOptions {
    /// Significance level for the Benjamini-Hochberg q-value.
    pub alpha: f64,
    /// Half-width of the noise band around a ratio of 1, as a fraction.
    pub noise_threshold: f64,
    /// A regression whose point change exceeds this fraction gates.
    pub max_regression: f64,
    /// Memory growth beyond this fraction gates.
    pub max_memory_regression: f64,
    /// Confidence level of the ratio interval.
    pub confidence_level: f64,
    /// Bootstrap resamples for the ratio interval.
    pub resamples: usize,
    /// Base seed of the bootstrap (mixed with each case id).
    pub seed: u64,
}

impl Default for CompareOptions {
    fn default() -> Self {
        Self {
            alpha: 0.01,
            noise_threshold: 0.02,
            max_regression: 0.05,
            max_memory_regression: 0.20,
            confidence_level: 0.95,
            resamples: 10_000,
            seed: crate::config::Settings::default().seed,
        }
    }
}

impl CompareOptions {
    /// Checks every value is in range; the error names the option.
    pub fn validate(&self) -> Result<()> {
        let fraction = |x: f64| x.is_finite() && x >= 0.0;
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            bail!("alpha must be in (0, 1), e.g. 0.01, got {}", self.alpha);
        }
        if !fraction(self.noise_threshold) || self.noise_threshold >= 1.0 {
            bail!("noise threshold must be a fraction in [0, 1), e.g. 0.02, got {}", self.noise_threshold);
        }
        if !fraction(self.max_regression) {
            bail!("max regression must be a fraction >= 0, e.g. 0.05, got {}", self.max_regression);
        }
        if !fraction(self.max_memory_regression) {
            bail!(
                "max memory regression must be a fraction >= 0, e.g. 0.2, got {}",
                self.max_memory_regression
            );
        }
        if !(self.confidence_level > 0.0 && self.confidence_level < 1.0) {
            bail!("confidence level must be in (0, 1), e.g. 0.95, got {}", self.confidence_level);
        }
        if self.resamples == 0 {
            bail!("bootstrap resamples must be at least 1");
        }
        Ok(())
    }
}

/// Outcome of comparing one case (see the module docs for the rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Significantly faster, beyond the noise band.
    Improved,
    /// Significantly slower, beyond the noise band.
    Regressed,
    /// Within the noise band.
    Unchanged,
    /// The data cannot tell.
    Inconclusive,
}

impl Verdict {
    /// The lowercase word: `improved`, `regressed`, `unchanged`, `inconclusive`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Improved => "improved",
            Self::Regressed => "regressed",
            Self::Unchanged => "unchanged",
            Self::Inconclusive => "inconclusive",
        }
    }

    /// Applies the verdict rule of the module docs to a q-value and a ratio
    /// estimate.
    pub fn decide(q: f64, ratio: &Estimate, opts: &CompareOptions) -> Verdict {
        let (low, high) = (1.0 - opts.noise_threshold, 1.0 + opts.noise_threshold);
        let significant = q < opts.alpha;
        if significant && ratio.lower > high {
            Verdict::Regressed
        } else if significant && ratio.upper < low {
            Verdict::Improved
        } else if (ratio.lower >= low && ratio.upper <= high)
            || (!significant && (low..=high).contains(&ratio.point))
        {
            Verdict::Unchanged
        } else {
            Verdict::Inconclusive
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The comparison of one case present and measured in both runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseChange {
    /// Case id.
    pub id: String,
    /// Median per-iteration time of the baseline's raw samples, ns.
    pub old_median_ns: f64,
    /// Median per-iteration time of the candidate's raw samples, ns.
    pub new_median_ns: f64,
    /// `new / old` median time with its bootstrap interval; above 1 is slower.
    pub ratio: Estimate,
    /// Two-sided Mann-Whitney U p-value.
    pub p_value: f64,
    /// Benjamini-Hochberg q-value over all compared cases.
    pub q_value: f64,
    /// The verdict (see the module docs).
    pub verdict: Verdict,
    /// Regressed, and the point change exceeds the regression limit.
    pub beyond_limit: bool,
    /// Memory figures, when both runs counted allocations.
    pub memory: Option<MemoryChange>,
}

/// A candidate run compared with a baseline run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Name of the baseline (a baseline name or a file).
    pub baseline: String,
    /// Name of the candidate.
    pub candidate: String,
    /// Set when the runs come from different machines: describes both
    /// fingerprints and CPU models.
    pub machine_mismatch: Option<String>,
    /// Compared cases, worst regression (largest ratio) first.
    pub changes: Vec<CaseChange>,
    /// Cases only the baseline has.
    pub only_in_baseline: Vec<String>,
    /// Cases only the candidate has.
    pub only_in_candidate: Vec<String>,
    /// Cases in both runs that failed (or have no usable samples) on either
    /// side, hence not compared.
    pub failed: Vec<String>,
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

    /// True when a time regression beyond the limit or a memory regression
    /// is present: what `compare` fails a CI job on.
    pub fn has_gating_failure(&self) -> bool {
        self.changes.iter().any(|c| c.beyond_limit || c.memory.as_ref().is_some_and(|m| m.regressed))
    }

    /// Number of compared cases with verdict `v`.
    pub fn count(&self, v: Verdict) -> usize {
        self.changes.iter().filter(|c| c.verdict == v).count()
    }
}

/// Compares `new` (the candidate) with `old` (the baseline); see the module
/// docs for the statistics and the verdict rule.
pub fn compare(
    baseline_name: &str,
    old: &RunReport,
    candidate_name: &str,
    new: &RunReport,
    opts: &CompareOptions,
) -> Comparison {
    // First occurrence wins should a report ever repeat an id.
    let mut old_by_id: HashMap<&str, &CaseResult> = HashMap::new();
    for case in &old.cases {
        old_by_id.entry(case.id.as_str()).or_insert(case);
    }
    let new_ids: HashSet<&str> = new.cases.iter().map(|c| c.id.as_str()).collect();
    let mut seen = HashSet::new();
    let only_in_baseline = unique_ids(&old.cases, |id| !new_ids.contains(id));
    let only_in_candidate = unique_ids(&new.cases, |id| !old_by_id.contains_key(id));

    let mut failed = Vec::new();
    let mut pending = Vec::new();
    for new_case in &new.cases {
        let Some(old_case) = old_by_id.get(new_case.id.as_str()) else { continue };
        if !seen.insert(new_case.id.as_str()) {
            continue;
        }
        let (old_times, new_times) = (per_iter_times(old_case), per_iter_times(new_case));
        if old_case.status.is_failed()
            || new_case.status.is_failed()
            || old_times.is_empty()
            || new_times.is_empty()
        {
            failed.push(new_case.id.clone());
            continue;
        }
        pending.push((
            new_case.id.clone(),
            old_times,
            new_times,
            old_case.alloc.clone(),
            new_case.alloc.clone(),
        ));
    }

    let p_values: Vec<f64> =
        pending.iter().map(|(_, old_t, new_t, ..)| stats::mann_whitney_u(new_t, old_t).p_value).collect();
    let q_values = stats::benjamini_hochberg(&p_values);
    let mut changes: Vec<CaseChange> = pending
        .into_iter()
        .zip(p_values.into_iter().zip(q_values))
        .map(|((id, old_t, new_t, old_alloc, new_alloc), (p_value, q_value))| {
            let seed = opts.seed ^ fnv1a_64(id.as_bytes());
            let (point, lower, upper) = stats::bootstrap_ratio_of_medians_ci(
                &new_t,
                &old_t,
                opts.confidence_level,
                opts.resamples,
                seed,
            );
            let ratio = Estimate { point, lower, upper, level: opts.confidence_level };
            let verdict = Verdict::decide(q_value, &ratio, opts);
            CaseChange {
                old_median_ns: stats::median(&old_t),
                new_median_ns: stats::median(&new_t),
                ratio,
                p_value,
                q_value,
                verdict,
                beyond_limit: verdict == Verdict::Regressed && point - 1.0 > opts.max_regression,
                memory: match (old_alloc, new_alloc) {
                    (Some(o), Some(n)) => Some(MemoryChange::new(&o, &n, opts.max_memory_regression)),
                    _ => None,
                },
                id,
            }
        })
        .collect();
    changes.sort_by(|a, b| b.ratio.point.total_cmp(&a.ratio.point).then_with(|| a.id.cmp(&b.id)));

    Comparison {
        baseline: baseline_name.to_string(),
        candidate: candidate_name.to_string(),
        machine_mismatch: machine_mismatch(old, new),
        changes,
        only_in_baseline,
        only_in_candidate,
        failed,
        options: opts.clone(),
    }
}

/// Ids of `cases` passing `keep`, in order, without repeats.
fn unique_ids(cases: &[CaseResult], keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut seen = HashSet::new();
    cases.iter().map(|c| c.id.as_str()).filter(|id| keep(id) && seen.insert(*id)).map(String::from).collect()
}

/// Per-iteration times of the raw samples; samples that cannot give one
/// (zero iterations, non-finite time) are skipped.
fn per_iter_times(case: &CaseResult) -> Vec<f64> {
    case.samples.iter().filter(|s| s.iterations > 0).map(|s| s.per_iter()).filter(|t| t.is_finite()).collect()
}

/// Describes the two machines when their fingerprints differ.
fn machine_mismatch(old: &RunReport, new: &RunReport) -> Option<String> {
    let (a, b) = (old.environment.fingerprint(), new.environment.fingerprint());
    (a != b).then(|| {
        format!(
            "baseline ran on `{}` (fingerprint {a}), candidate on `{}` (fingerprint {b})",
            old.environment.cpu_model, new.environment.cpu_model
        )
    })
}

/// FNV-1a, 64-bit: a stable hash of case ids for per-case seeds (std's
/// hasher is randomly keyed per process, which would break reproducibility).
fn fnv1a_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}
