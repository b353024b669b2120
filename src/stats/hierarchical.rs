//! Hierarchical (multi-level) bootstrap for a ratio of medians.
//!
//! A benchmark's samples are not independent replicates: samples of one
//! round share that round's machine state, rounds of one run share the
//! process, its memory layout and its minute on a shared host. Treating every
//! sample as a replicate gives an interval that covers within-round noise
//! only, and run-to-run variation (larger, and shared by all cases) then
//! shows up as "significant" changes. Following Kalibera and Jones,
//! "Rigorous Benchmarking in Reasonable Time" (ISMM 2013), each bootstrap
//! replicate resamples the levels top-down: runs with replacement, then
//! rounds within each drawn run, then samples within each drawn round; the
//! replicate's statistic is the median of what was drawn. A level with a
//! single member contributes no variation: it was not replicated, and the
//! caller says so (see [`Levels::replicated`]).

use super::summary::median_in_place;
use rand::distr::{Distribution, Uniform};
use rand::{Rng, RngExt};
use rand_distr::Normal;

/// One side's samples as runs -> rounds -> per-iteration times. Empty rounds
/// and runs are dropped by [`Levels::new`].
#[derive(Debug, Clone, PartialEq)]
pub struct Levels {
    runs: Vec<Vec<Vec<f64>>>,
}

impl Levels {
    /// Builds the levels, dropping empty rounds and then empty runs.
    pub fn new(runs: Vec<Vec<Vec<f64>>>) -> Self {
        let runs = runs
            .into_iter()
            .map(|rounds| rounds.into_iter().filter(|r| !r.is_empty()).collect::<Vec<_>>())
            .filter(|rounds| !rounds.is_empty())
            .collect();
        Self { runs }
    }

    /// Number of runs with samples.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Number of (run, round) groups with samples.
    pub fn groups(&self) -> usize {
        self.runs.iter().map(Vec::len).sum()
    }

    /// Every sample, pooled.
    pub fn pooled(&self) -> Vec<f64> {
        self.runs.iter().flatten().flatten().copied().collect()
    }

    /// Total number of samples.
    pub fn len(&self) -> usize {
        self.runs.iter().flatten().map(Vec::len).sum()
    }

    /// True when there is no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Which levels above the samples were replicated: (several runs,
    /// several rounds in some run).
    pub fn replicated(&self) -> (bool, bool) {
        (self.runs.len() > 1, self.runs.iter().any(|r| r.len() > 1))
    }

    /// The spread between rounds of the same run: the sum of squared
    /// deviations of each round's log median from its run's mean log median,
    /// and its degrees of freedom (rounds minus runs, over runs with two or
    /// more rounds). Pool two sides by adding both parts; `None`-like when
    /// the degrees of freedom are 0.
    pub fn round_log_spread_parts(&self) -> (f64, usize) {
        self.runs
            .iter()
            .map(|run| {
                super::summary::log_ss(
                    &run.iter().map(|r| median_in_place(&mut r.clone())).collect::<Vec<_>>(),
                )
            })
            .fold((0.0, 0), |(ss, df), (s, d)| (ss + s, df + d))
    }

    /// Median of one hierarchical resample, using `buf` as scratch.
    fn resample_median<R: Rng>(&self, rng: &mut R, buf: &mut Vec<f64>) -> f64 {
        buf.clear();
        let pick = |n: usize, rng: &mut R| if n == 1 { 0 } else { rng.random_range(0..n) };
        for _ in 0..self.runs.len() {
            let run = &self.runs[pick(self.runs.len(), rng)];
            for _ in 0..run.len() {
                let round = &run[pick(run.len(), rng)];
                let Ok(index) = Uniform::new(0, round.len()) else { continue };
                buf.extend((0..round.len()).map(|_| round[index.sample(rng)]));
            }
        }
        median_in_place(buf)
    }
}

/// Seeded hierarchical percentile-bootstrap interval for
/// `median(new) / median(old)` (pooled medians).
///
/// Returns `(point, lower, upper)`. Each replicate resamples both sides
/// independently through their levels (see the module docs) and, when
/// `extra_log_sd > 0`, multiplies the replicate ratio by `exp(N(0,
/// extra_log_sd^2))`: the variation of a level that exists but was not
/// replicated in the data (one run per side: its run-to-run spread), taken
/// from elsewhere (history) or assumed, and said so by the caller. Empty
/// sides give `NaN` everywhere.
pub fn hierarchical_ratio_ci(
    new: &Levels,
    old: &Levels,
    level: f64,
    resamples: usize,
    seed: u64,
    extra_log_sd: f64,
) -> (f64, f64, f64) {
    if new.is_empty() || old.is_empty() || resamples == 0 {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let point = median_in_place(&mut new.pooled()) / median_in_place(&mut old.pooled());
    let mut rng = crate::util::rng(seed);
    let noise = (extra_log_sd > 0.0).then(|| Normal::new(0.0, extra_log_sd).ok()).flatten();
    let (mut buf_new, mut buf_old) = (Vec::with_capacity(new.len()), Vec::with_capacity(old.len()));
    let mut ratios: Vec<f64> = (0..resamples)
        .map(|_| {
            let r = new.resample_median(&mut rng, &mut buf_new) / old.resample_median(&mut rng, &mut buf_old);
            match &noise {
                Some(n) => r * n.sample(&mut rng).exp(),
                None => r,
            }
        })
        .collect();
    ratios.sort_unstable_by(f64::total_cmp);
    let alpha = 1.0 - level.clamp(0.0, 1.0);
    let lower = super::quantile_sorted(&ratios, alpha / 2.0);
    let upper = super::quantile_sorted(&ratios, 1.0 - alpha / 2.0);
    (point, lower, upper)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_spread_is_measured_within_runs_only() {
        // Run 1: rounds at 100 and 110; run 2: one round (no df); run 3:
        // rounds at 50, 50 and 50 (a different level, no spread within).
        let l = Levels::new(vec![
            vec![vec![100.0, 100.0, 100.0], vec![110.0]],
            vec![vec![7.0]],
            vec![vec![50.0], vec![50.0], vec![50.0]],
        ]);
        let (ss, df) = l.round_log_spread_parts();
        assert_eq!(df, 3);
        let d = (110f64.ln() - 100f64.ln()) / 2.0;
        assert!((ss - 2.0 * d * d).abs() < 1e-12, "{ss}");
        assert_eq!(Levels::new(vec![vec![vec![1.0, 2.0]]]).round_log_spread_parts(), (0.0, 0));
    }

    fn noisy(n: usize, centre: f64, seed: u64) -> Vec<f64> {
        let mut rng = crate::util::rng(seed);
        let d = Normal::new(centre, centre * 0.01).unwrap();
        (0..n).map(|_| d.sample(&mut rng)).collect()
    }

    #[test]
    fn one_group_per_side_is_the_plain_bootstrap_width() {
        let old = Levels::new(vec![vec![noisy(100, 100.0, 1)]]);
        let new = Levels::new(vec![vec![noisy(100, 110.0, 2)]]);
        let (p, lo, hi) = hierarchical_ratio_ci(&new, &old, 0.95, 2000, 7, 0.0);
        assert!((p - 1.1).abs() < 0.005, "{p}");
        // Median SE ~ 1.25 * 1% / 10 per side: the interval is about +-0.4%.
        assert!(lo < p && p < hi && hi - lo < 0.012, "{lo} {hi}");
        assert_eq!(old.replicated(), (false, false));
        // Reproducible.
        assert_eq!((p, lo, hi), hierarchical_ratio_ci(&new, &old, 0.95, 2000, 7, 0.0));
    }

    #[test]
    fn between_round_variation_widens_the_interval() {
        // Rounds whose levels differ by +-5% (a shared host's minutes): the
        // sample-level bootstrap would give +-0.4%; the hierarchical one must
        // cover the spread of the round levels.
        let rounds = |base: f64, seed: u64| -> Vec<Vec<f64>> {
            [0.95, 1.05, 0.97, 1.03]
                .iter()
                .enumerate()
                .map(|(i, f)| noisy(50, base * f, seed + i as u64))
                .collect()
        };
        let old = Levels::new(vec![rounds(100.0, 10)]);
        let new = Levels::new(vec![rounds(100.0, 20)]);
        assert_eq!(old.replicated(), (false, true));
        let (_, lo, hi) = hierarchical_ratio_ci(&new, &old, 0.95, 2000, 3, 0.0);
        assert!(lo < 0.97 && hi > 1.03, "[{lo}, {hi}] must cover the round-level spread");
        // An unreplicated level's assumed spread widens it further.
        let (_, lo2, hi2) = hierarchical_ratio_ci(&new, &old, 0.95, 2000, 3, 0.05);
        assert!(hi2 - lo2 > hi - lo, "{lo2} {hi2}");
    }

    #[test]
    fn levels_drop_empty_groups_and_degenerate_input_is_nan() {
        let l = Levels::new(vec![vec![vec![], vec![1.0, 2.0]], vec![vec![]]]);
        assert_eq!((l.runs(), l.groups(), l.len()), (1, 1, 2));
        let empty = Levels::new(vec![]);
        let r = hierarchical_ratio_ci(&l, &empty, 0.95, 10, 1, 0.0);
        assert!(r.0.is_nan() && r.1.is_nan() && r.2.is_nan());
    }
}
