//! How much the machine itself moved between the two sides of a comparison.
//!
//! On a shared host the run-to-run variation is larger than the within-run
//! noise, and it shifts every case together. Two measurements of it:
//!
//! - **canaries**: fixed workloads (a compute loop and a memory sweep) that
//!   `run` times between the cases; their ratio is the machine's drift,
//!   independent of the code under test;
//! - **the cases themselves**: the median of every compared case's ratio,
//!   which is the shared offset when most cases did not change (a plan where
//!   every case really changed by the same amount looks the same: no method
//!   can tell those apart, which the comparison says).
//!
//! When the drift lies beyond the noise band, cases that moved with the
//! machine are not called regressed: their band is widened to the drift's
//! interval (or, with `--normalize`, their ratios are divided by it).

use crate::results::{CanaryKind, Estimate, RunReport};
use crate::stats::{Levels, hierarchical_ratio_ci, median_ci};
use serde::{Deserialize, Serialize};

/// Fewest compared cases for the cross-case drift estimate.
pub const MIN_CASES_FOR_DRIFT: usize = 8;

/// Bytes per iteration from which a case counts as *large*: its data lives
/// beyond the cores' private caches, in the last-level cache and memory the
/// host's other tenants share. Large cases move together between runs (in
/// the quiet-host A/A runs of docs/verdicts.md, one run had every 16M-element
/// and 4096x4096 case 10-17% slower while the small ones and both canaries
/// held), so they get a drift estimate of their own.
pub const LARGE_BYTES: f64 = 32.0 * 1024.0 * 1024.0;

/// How the large cases' drift estimate's `source` ends ([`MachineDrift::large`]; it starts "median of N").
pub const LARGE_SOURCE: &str = "large cases (32 MiB or more per iteration)";

/// How the smaller cases' drift estimate's `source` ends
/// ([`MachineDrift::small`]).
pub const SMALL_SOURCE: &str = "smaller cases (under 32 MiB per iteration)";

/// One estimate of the machine's drift (`new / old` time of the same work).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriftEstimate {
    /// Where it comes from: `compute canary`, `memory canary`, `median of N cases`.
    pub source: String,
    /// The ratio with its interval.
    pub ratio: Estimate,
}

/// The machine's drift between the two sides, as far as it was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineDrift {
    /// Every estimate available (canaries when both sides have them, and
    /// the cross-case median when enough cases were compared).
    pub estimates: Vec<DriftEstimate>,
    /// Some estimate's whole interval lies outside the noise band: the
    /// machine itself ran faster or slower.
    pub beyond_band: bool,
    /// The interval cases are allowed to move within before they are called
    /// changed, `[min(1, lowest bound), max(1, highest bound)]` over the
    /// estimates that judge (canaries when present, else the cross-case one).
    pub envelope: (f64, f64),
    /// Set with `--normalize`: every ratio was divided by this factor.
    pub normalized_by: Option<f64>,
    /// Which estimate judges the cases (`canaries` or `cases`).
    pub judged_by: String,
    /// Set when the large cases (at least [`LARGE_BYTES`] per iteration)
    /// moved together beyond the band: their median's interval, widened to
    /// include 1 (reported; every large case is judged relative to that
    /// median whether or not it is set, see [`MachineDrift::large`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub large_envelope: Option<(f64, f64)>,
}

fn canary_levels(runs: &[RunReport], kind: CanaryKind) -> Levels {
    Levels::new(
        runs.iter()
            .map(|r| {
                let rounds = r.canaries.iter().map(|c| c.round).max().map_or(0, |m| m as usize + 1);
                let mut by_round = vec![Vec::new(); rounds];
                for c in r.canaries.iter().filter(|c| c.kind == kind && c.nanos.is_finite() && c.nanos > 0.0)
                {
                    by_round[c.round as usize].push(c.nanos);
                }
                by_round
            })
            .collect(),
    )
}

/// The median of `ratios` with its interval, labelled `source`, when there
/// are enough of them.
fn median_estimate(ratios: impl Iterator<Item = f64>, source: &str, level: f64) -> Option<DriftEstimate> {
    let mut sorted: Vec<f64> = ratios.filter(|r| r.is_finite() && *r > 0.0).collect();
    if sorted.len() < MIN_CASES_FOR_DRIFT {
        return None;
    }
    sorted.sort_unstable_by(f64::total_cmp);
    let point = crate::stats::quantile_sorted(&sorted, 0.5);
    let (lower, upper) = median_ci(&sorted, level);
    Some(DriftEstimate {
        source: format!("median of {} {source}", sorted.len()),
        ratio: Estimate { point, lower, upper, level },
    })
}

/// Measures the drift from the canaries of both sides and from the case
/// ratios (each with whether the case is large, see [`LARGE_BYTES`]);
/// `band` is the noise threshold (a fraction).
pub fn measure(
    old: &[RunReport],
    new: &[RunReport],
    case_ratios: &[(f64, bool)],
    band: f64,
    level: f64,
    seed: u64,
) -> MachineDrift {
    let mut canaries = Vec::new();
    for (kind, name) in [(CanaryKind::Compute, "compute canary"), (CanaryKind::Memory, "memory canary")] {
        let (o, n) = (canary_levels(old, kind), canary_levels(new, kind));
        if o.len() >= 3 && n.len() >= 3 {
            let (point, lower, upper) = hierarchical_ratio_ci(&n, &o, level, 2000, seed ^ kind as u64, 0.0);
            canaries
                .push(DriftEstimate { source: name.into(), ratio: Estimate { point, lower, upper, level } });
        }
    }
    let cases: Vec<DriftEstimate> =
        median_estimate(case_ratios.iter().map(|r| r.0), "cases", level).into_iter().collect();
    let large = median_estimate(case_ratios.iter().filter(|r| r.1).map(|r| r.0), LARGE_SOURCE, level);
    let small = median_estimate(case_ratios.iter().filter(|r| !r.1).map(|r| r.0), SMALL_SOURCE, level);
    let (judging, judged_by) = if canaries.is_empty() { (&cases, "cases") } else { (&canaries, "canaries") };
    let outside = |e: &DriftEstimate| e.ratio.lower > 1.0 + band || e.ratio.upper < 1.0 - band;
    let beyond_band = judging.iter().any(outside);
    let envelope = if beyond_band {
        judging.iter().fold((1.0f64, 1.0f64), |(lo, hi), e| (lo.min(e.ratio.lower), hi.max(e.ratio.upper)))
    } else {
        (1.0, 1.0)
    };
    let judged_by = judged_by.to_string();
    let large_envelope =
        large.as_ref().filter(|e| outside(e)).map(|e| (e.ratio.lower.min(1.0), e.ratio.upper.max(1.0)));
    let mut estimates = canaries;
    estimates.extend(cases);
    estimates.extend(large);
    estimates.extend(small);
    MachineDrift { estimates, beyond_band, envelope, normalized_by: None, judged_by, large_envelope }
}

impl MachineDrift {
    /// The factor `--normalize` divides by: the geometric mean of the
    /// judging estimates' points, or `None` when nothing was measured.
    pub fn factor(&self) -> Option<f64> {
        let judging: Vec<&DriftEstimate> = self
            .estimates
            .iter()
            .filter(|e| !e.source.ends_with(LARGE_SOURCE) && !e.source.ends_with(SMALL_SOURCE))
            .filter(|e| (self.judged_by == "canaries") == e.source.contains("canary"))
            .collect();
        if judging.is_empty() {
            return None;
        }
        let mean_log = judging.iter().map(|e| e.ratio.point.ln()).sum::<f64>() / judging.len() as f64;
        mean_log.is_finite().then(|| mean_log.exp())
    }

    /// The large cases' own drift (the median of their ratios), when enough
    /// large cases were compared: every large case is judged relative to it
    /// as well as on its own (see the `compare` module docs).
    pub fn large(&self) -> Option<&Estimate> {
        self.estimates.iter().find(|e| e.source.ends_with(LARGE_SOURCE)).map(|e| &e.ratio)
    }

    /// The smaller cases' own drift (the median of their ratios), when
    /// enough were compared: each smaller case is judged relative to it as
    /// well as on its own, as the large ones are relative to theirs. In the
    /// stored A/A runs of docs/verdicts.md (2026-11-27 15:24) every gate
    /// failure was a few minutes of the host that slowed the small cases
    /// together by 3-5% (their median +4.6% [+4.0%, +6.0%]) while the
    /// canaries' intervals still reached inside the band, so no drift was
    /// declared and the cases that moved most with it were called
    /// regressed.
    pub fn small(&self) -> Option<&Estimate> {
        self.estimates.iter().find(|e| e.source.ends_with(SMALL_SOURCE)).map(|e| &e.ratio)
    }

    /// One line for people: `machine drift: compute canary +3.1% [...]`.
    pub fn describe(&self) -> String {
        let pct = |r: f64| format!("{:+.1}%", (r - 1.0) * 100.0);
        let parts: Vec<String> = self
            .estimates
            .iter()
            .map(|e| {
                format!(
                    "{} {} [{}, {}]",
                    e.source,
                    pct(e.ratio.point),
                    pct(e.ratio.lower),
                    pct(e.ratio.upper)
                )
            })
            .collect();
        if parts.is_empty() {
            return "machine drift: not measured (no canaries in the results, too few cases)".into();
        }
        format!("machine drift: {}", parts.join("; "))
    }
}
