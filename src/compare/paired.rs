//! Judging two builds measured alternately on one machine (`tfbench ab`).
//!
//! Each case yields pairs of samples taken back to back, one per build, in
//! the order A B B A A B ... (so neither build always goes first). Whatever
//! the machine does over seconds or minutes (a neighbour, a frequency
//! change) hits both samples of a pair alike and cancels in their ratio.
//! The case is judged on the log-ratios `ln(head_i / base_i)`:
//!
//! - **ratio**: `exp(median of the log-ratios)` with the distribution-free
//!   order-statistic interval of that median ([`crate::stats::median_ci`]);
//! - **p**: the Wilcoxon signed-rank test of the log-ratios (exact up to
//!   [`crate::stats::EXACT_MAX_N`] pairs);
//! - **q** and the verdict: as for stored comparisons (see the parent
//!   module), with the plain noise band and no drift envelope, since drift
//!   cancels within the pairs.

use super::{CaseChange, CompareOptions, Comparison, Judgement, Method, Verdict};
use crate::results::Estimate;
use crate::stats;

/// One case's paired per-iteration times (`base[i]` and `head[i]` were
/// taken back to back).
#[derive(Debug, Clone, PartialEq)]
pub struct PairedCase {
    /// Case id.
    pub id: String,
    /// The base build's per-iteration times, ns.
    pub base: Vec<f64>,
    /// The head build's per-iteration times, ns, paired with `base`.
    pub head: Vec<f64>,
}

/// Builds the comparison of a paired run. `failed` and `skipped` are the
/// cases that could not be judged (with either build).
pub fn compare_paired(
    base_label: &str,
    head_label: &str,
    cases: &[PairedCase],
    failed: Vec<String>,
    skipped: Vec<String>,
    opts: &CompareOptions,
) -> Comparison {
    let logs: Vec<Vec<f64>> = cases
        .iter()
        .map(|c| {
            c.base
                .iter()
                .zip(&c.head)
                .filter(|(b, h)| **b > 0.0 && **h > 0.0)
                .map(|(b, h)| (h / b).ln())
                .filter(|d| d.is_finite())
                .collect()
        })
        .collect();
    let p_values: Vec<f64> = logs.iter().map(|d| stats::wilcoxon_signed_rank(d).p_value).collect();
    let q_values = stats::benjamini_hochberg(&p_values);
    let mut changes: Vec<CaseChange> = cases
        .iter()
        .zip(&logs)
        .zip(p_values.into_iter().zip(q_values))
        .map(|((c, d), (p_value, q_value))| {
            let mut sorted = d.clone();
            sorted.sort_unstable_by(f64::total_cmp);
            let (lo, hi) = stats::median_ci(&sorted, opts.confidence_level);
            let point = stats::quantile_sorted(&sorted, 0.5).exp();
            let ratio = Estimate { point, lower: lo.exp(), upper: hi.exp(), level: opts.confidence_level };
            let band = opts.noise_threshold;
            let verdict = if d.len() < opts.min_samples {
                Verdict::TooFewSamples
            } else {
                Verdict::judge(&Judgement { p: p_value, q: q_value, ratio, band, envelope: (1.0, 1.0) }, opts)
            };
            CaseChange {
                id: c.id.clone(),
                old_median_ns: stats::median(&c.base),
                new_median_ns: stats::median(&c.head),
                old_samples: c.base.len(),
                new_samples: c.head.len(),
                ratio,
                p_value,
                q_value,
                band,
                band_source: "default".into(),
                verdict,
                beyond_limit: verdict == Verdict::Regressed && point - 1.0 > opts.max_regression,
                memory: None,
            }
        })
        .collect();
    changes.sort_by(|a, b| b.ratio.point.total_cmp(&a.ratio.point).then_with(|| a.id.cmp(&b.id)));
    let vacuous = changes.is_empty().then(|| {
        if failed.is_empty() && skipped.is_empty() {
            "no case was run by both builds".to_string()
        } else {
            format!("no case could be compared: {} failed and {} skipped", failed.len(), skipped.len())
        }
    });
    Comparison {
        baseline: base_label.to_string(),
        candidate: head_label.to_string(),
        method: Method::Paired,
        runs: (1, 1),
        machine_mismatch: None,
        drift: None,
        changes,
        only_in_baseline: Vec::new(),
        only_in_candidate: Vec::new(),
        failed,
        skipped,
        vacuous,
        notes: vec![
            "paired A/B: both builds ran each case alternately (A B B A ...) on this machine in this job; verdicts rest on the paired ratios, so the machine's drift cancels".into(),
        ],
        options: opts.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_distr::{Distribution, Normal};

    /// Paired samples with a drifting machine: each pair shares a level that
    /// wanders by +-20%, and the head is `shift` slower.
    fn drifting(id: &str, n: usize, shift: f64, seed: u64) -> PairedCase {
        let mut rng = crate::util::rng(seed);
        let noise = Normal::new(0.0, 0.01).unwrap();
        let (mut base, mut head) = (Vec::new(), Vec::new());
        for i in 0..n {
            let level = 100.0 * (1.0 + 0.2 * (i as f64 / 7.0).sin());
            base.push(level * (1.0 + noise.sample(&mut rng)));
            head.push(level * shift * (1.0 + noise.sample(&mut rng)));
        }
        PairedCase { id: id.into(), base, head }
    }

    #[test]
    fn drift_cancels_in_the_pairs() {
        let o = CompareOptions { resamples: 100, ..Default::default() };
        let cases =
            [drifting("same", 100, 1.0, 1), drifting("slow", 100, 1.10, 2), drifting("fast", 100, 0.95, 3)];
        let c = compare_paired("base", "head", &cases, vec![], vec!["x".into()], &o);
        let get = |id: &str| c.changes.iter().find(|ch| ch.id == id).unwrap();
        assert_eq!(get("same").verdict, Verdict::Unchanged, "{:?}", get("same"));
        assert_eq!(get("slow").verdict, Verdict::Regressed);
        assert!(get("slow").beyond_limit && c.has_gating_failure());
        assert!((get("slow").ratio.point - 1.10).abs() < 0.01);
        assert_eq!(get("fast").verdict, Verdict::Improved);
        assert_eq!(c.method, Method::Paired);
        assert_eq!(c.skipped, ["x"]);
        assert!(c.vacuous.is_none());
    }

    #[test]
    fn few_pairs_and_nothing_to_compare() {
        let o = CompareOptions::default();
        let c = compare_paired("a", "b", &[drifting("short", 3, 2.0, 1)], vec![], vec![], &o);
        assert_eq!(c.changes[0].verdict, Verdict::TooFewSamples);
        let c = compare_paired("a", "b", &[], vec!["f".into()], vec![], &o);
        assert!(c.vacuous.as_deref().is_some_and(|v| v.contains("1 failed")), "{:?}", c.vacuous);
    }
}
