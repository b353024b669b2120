//! Change-point detection over a whole series of run medians.
//!
//! # Method
//!
//! Circular binary segmentation (Olshen et al., 2004) with a rank statistic
//! and a seeded permutation test:
//!
//! 1. **Statistic.** For a segment `x` of `n` values, every sub-interval
//!    `[i, j)` is compared with the rest of the segment by the Mann-Whitney
//!    U test (normal score with tie and continuity corrections, the same `z`
//!    as [`crate::stats::mann_whitney_u`]). The candidate is the interval
//!    with the largest `|z|`. An interval touching an end (`i = 0` or
//!    `j = n`) is a single step; an interior one is a step and a step back,
//!    the common "regression, then fix" shape that plain binary
//!    segmentation (one split at a time) tends to miss. Every piece must
//!    hold at least [`MIN_SEGMENT`] points. Series longer than
//!    [`CIRCULAR_MAX_LEN`] are scanned for single splits only, because the
//!    interval scan is quadratic per permutation.
//! 2. **Significance.** The ranks are shuffled (seeded Fisher-Yates)
//!    `permutations` times and the maximal `|z|` of each shuffle is
//!    computed the same way, so the test accounts for having searched over
//!    every candidate: `p = (1 + #{max |z|_perm >= max |z|_obs}) / (1 +
//!    permutations)`. Permutations stop early once `p` can no longer fall
//!    below `alpha` (only significant candidates need an exact `p`).
//! 3. **Effect.** A boundary of a significant candidate is kept only if the
//!    medians on its two sides differ by more than `min_effect` (relative),
//!    so a statistically clear but tiny shift is not reported as a step.
//! 4. **Recursion.** The segment is cut at the kept boundaries and each
//!    piece is tested again, until no piece has a significant candidate.
//! 5. **Final check.** Each change point is described by the medians of
//!    the final segments on either side; while any has a relative step of
//!    at most `min_effect`, the weakest is dropped and its neighbours merge.
//!
//! Ranks make the test insensitive to the occasional wild run and to the
//! scale of the values; the permutation test is exact for independent,
//! identically distributed runs (the null hypothesis). A series needs about
//! ten points before any change can reach `p < 0.01`.

use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

/// Default significance level of the permutation test.
pub const DEFAULT_ALPHA: f64 = 0.01;
/// Default minimal relative step between segment medians (2%).
pub const DEFAULT_MIN_EFFECT: f64 = 0.02;
/// Default number of permutations, so the smallest possible `p` is 0.001.
pub const DEFAULT_PERMUTATIONS: usize = 999;
/// Default seed of the permutations.
pub const DEFAULT_SEED: u64 = 0x7466_6265_6e63_68;
/// Fewest points in any segment on either side of a change point.
pub const MIN_SEGMENT: usize = 2;
/// Longest series scanned for intervals (step and step back); longer ones
/// are scanned for single splits only.
pub const CIRCULAR_MAX_LEN: usize = 256;

/// A detected change in level of a series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ChangePoint {
    /// Index of the first point after the change (0-based).
    pub index: usize,
    /// Median of the segment before the change (up to the previous change).
    pub before_median_ns: f64,
    /// Median of the segment after the change (up to the next change).
    pub after_median_ns: f64,
    /// `after_median_ns / before_median_ns`; above 1 means slower.
    pub ratio: f64,
    /// Permutation p-value of the test that found the change.
    pub p_value: f64,
}

/// Settings of [`detect_with`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DetectOptions {
    /// Significance level: a candidate is accepted when `p < alpha`.
    pub alpha: f64,
    /// Minimal relative step `|after / before - 1|` to report.
    pub min_effect: f64,
    /// Permutations per test; the smallest possible `p` is `1 / (1 + permutations)`.
    pub permutations: usize,
    /// Seed of the permutations: equal inputs and seeds give equal results.
    pub seed: u64,
}

impl Default for DetectOptions {
    fn default() -> Self {
        Self {
            alpha: DEFAULT_ALPHA,
            min_effect: DEFAULT_MIN_EFFECT,
            permutations: DEFAULT_PERMUTATIONS,
            seed: DEFAULT_SEED,
        }
    }
}

/// Change points of `series` (see the module doc), ordered by index, with
/// [`DEFAULT_PERMUTATIONS`] permutations per test.
pub fn detect(series: &[f64], alpha: f64, min_effect: f64, seed: u64) -> Vec<ChangePoint> {
    detect_with(series, &DetectOptions { alpha, min_effect, seed, permutations: DEFAULT_PERMUTATIONS })
}

/// Change points of `series` with explicit settings, ordered by index.
///
/// A series shorter than `2 * MIN_SEGMENT`, or holding a non-finite value,
/// has none.
pub fn detect_with(series: &[f64], opts: &DetectOptions) -> Vec<ChangePoint> {
    let n = series.len();
    if n < 2 * MIN_SEGMENT || series.iter().any(|v| !v.is_finite()) {
        return Vec::new();
    }
    let mut rng = crate::util::rng(opts.seed);
    // (absolute index, p-value) of every accepted boundary.
    let mut found: Vec<(usize, f64)> = Vec::new();
    let mut work = vec![(0, n)];
    while let Some((s, e)) = work.pop() {
        let x = &series[s..e];
        let Some(c) = best_interval(x, opts, &mut rng) else { continue };
        let mut cuts = Vec::new();
        if c.i > 0 && exceeds(&x[..c.i], &x[c.i..c.j], opts.min_effect) {
            cuts.push(c.i);
        }
        if c.j < x.len() && exceeds(&x[c.i..c.j], &x[c.j..], opts.min_effect) {
            cuts.push(c.j);
        }
        let mut start = 0;
        for &cut in cuts.iter().chain(std::iter::once(&x.len())) {
            if cut - start >= 2 * MIN_SEGMENT {
                work.push((s + start, s + cut));
            }
            start = cut;
        }
        found.extend(cuts.iter().map(|&cut| (s + cut, c.p)));
    }
    found.sort_by_key(|f| f.0);
    prune(series, &mut found, opts.min_effect);
    found
        .iter()
        .enumerate()
        .map(|(k, &(index, p_value))| {
            let (before, after) = neighbours(series, &found, k);
            let (b, a) = (crate::stats::median(before), crate::stats::median(after));
            ChangePoint { index, before_median_ns: b, after_median_ns: a, ratio: a / b, p_value }
        })
        .collect()
}

/// The segments before and after the `k`-th boundary in `found`.
fn neighbours<'a>(series: &'a [f64], found: &[(usize, f64)], k: usize) -> (&'a [f64], &'a [f64]) {
    let prev = if k == 0 { 0 } else { found[k - 1].0 };
    let next = found.get(k + 1).map_or(series.len(), |f| f.0);
    let at = found[k].0;
    (&series[prev..at], &series[at..next])
}

/// Relative step between the medians of two segments; `NaN` counts as none.
fn effect(before: &[f64], after: &[f64]) -> f64 {
    let step = (crate::stats::median(after) / crate::stats::median(before) - 1.0).abs();
    if step.is_nan() { 0.0 } else { step }
}

fn exceeds(before: &[f64], after: &[f64], min_effect: f64) -> bool {
    effect(before, after) > min_effect
}

/// Drops the weakest boundary while any is at most `min_effect` against its
/// final neighbours: recursion judged it against a wider segment.
fn prune(series: &[f64], found: &mut Vec<(usize, f64)>, min_effect: f64) {
    loop {
        let weakest = (0..found.len())
            .map(|k| {
                let (before, after) = neighbours(series, found, k);
                (k, effect(before, after))
            })
            .min_by(|a, b| a.1.total_cmp(&b.1));
        match weakest {
            Some((k, step)) if step <= min_effect => {
                found.remove(k);
            }
            _ => return,
        }
    }
}

/// The most significant interval of a segment: `[i, j)` against the rest.
struct Candidate {
    i: usize,
    j: usize,
    p: f64,
}

/// The interval with the largest `|z|`, if its permutation p-value is below
/// `alpha`.
fn best_interval(x: &[f64], opts: &DetectOptions, rng: &mut impl rand::Rng) -> Option<Candidate> {
    let n = x.len();
    if n < 2 * MIN_SEGMENT {
        return None;
    }
    let (mut ranks, tie_term) = midranks(x);
    let nf = n as f64;
    // The variance factor is the same for every interval and every shuffle.
    let var_factor = (nf + 1.0) - tie_term / (nf * (nf - 1.0));
    if var_factor <= 1e-12 * (nf + 1.0) {
        return None; // all values tied
    }
    let circular = n <= CIRCULAR_MAX_LEN;
    let (observed, i, j) = scan(&ranks, var_factor, circular);
    if observed <= 0.0 {
        return None;
    }
    let total = (opts.permutations + 1) as f64;
    let mut exceed = 0usize;
    for _ in 0..opts.permutations {
        ranks.shuffle(rng);
        // Tolerance: the same arrangement must count as "at least as extreme".
        if scan(&ranks, var_factor, circular).0 >= observed * (1.0 - 1e-12) {
            exceed += 1;
            if (1 + exceed) as f64 / total >= opts.alpha {
                return None;
            }
        }
    }
    let p = (1 + exceed) as f64 / total;
    (p < opts.alpha).then_some(Candidate { i, j, p })
}

/// Midranks (1-based, ties share their mean rank) and the tie term
/// `sum(t^3 - t)` over groups of `t` tied values.
fn midranks(x: &[f64]) -> (Vec<f64>, f64) {
    let n = x.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut ranks = vec![0.0; n];
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i + 1;
        while j < n && x[order[j]] == x[order[i]] {
            j += 1;
        }
        let midrank = (i + 1 + j) as f64 / 2.0;
        for &k in &order[i..j] {
            ranks[k] = midrank;
        }
        let t = (j - i) as f64;
        tie_term += t * t * t - t;
        i = j;
    }
    (ranks, tie_term)
}

/// Largest Mann-Whitney `|z|` of `[i, j)` against the rest, over every
/// allowed interval (only `i = 0` unless `circular`), with its bounds.
/// Rank sums come from prefix sums, so each interval costs O(1).
fn scan(ranks: &[f64], var_factor: f64, circular: bool) -> (f64, usize, usize) {
    let n = ranks.len();
    let mut prefix = Vec::with_capacity(n + 1);
    prefix.push(0.0);
    for r in ranks {
        prefix.push(prefix[prefix.len() - 1] + r);
    }
    let mut best = (0.0, 0, 0);
    let last_start = if circular { n - 2 * MIN_SEGMENT } else { 0 };
    for i in (0..=last_start).filter(|&i| i == 0 || i >= MIN_SEGMENT) {
        for j in (i + MIN_SEGMENT)..=n {
            let outside_ok = (j == n || n - j >= MIN_SEGMENT) && (i, j) != (0, n);
            if !outside_ok {
                continue;
            }
            let z = interval_z(prefix[j] - prefix[i], j - i, n, var_factor);
            if z > best.0 {
                best = (z, i, j);
            }
        }
    }
    best
}

/// `|z|` of the Mann-Whitney test of `m` values with rank sum `rank_sum`
/// against the other `n - m`, as in [`crate::stats::mann_whitney_u`].
fn interval_z(rank_sum: f64, m: usize, n: usize, var_factor: f64) -> f64 {
    let (m, rest) = (m as f64, (n - m) as f64);
    let u = rank_sum - m * (m + 1.0) / 2.0;
    let sigma = (m * rest / 12.0 * var_factor).sqrt();
    ((u - m * rest / 2.0).abs() - 0.5).max(0.0) / sigma
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noisy(levels: &[(usize, f64)], noise: f64, seed: u64) -> Vec<f64> {
        let z = crate::util::randn(levels.iter().map(|l| l.0).sum(), seed);
        let base = levels.iter().flat_map(|&(len, level)| std::iter::repeat_n(level, len));
        base.zip(z).map(|(level, z)| level * (1.0 + noise * f64::from(z))).collect()
    }

    fn opts(permutations: usize, seed: u64) -> DetectOptions {
        DetectOptions { permutations, seed, ..DetectOptions::default() }
    }

    #[test]
    fn interval_statistic_matches_mann_whitney() {
        let x = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0];
        let (ranks, tie) = midranks(&x);
        let n = x.len() as f64;
        let var_factor = (n + 1.0) - tie / (n * (n - 1.0));
        for (i, j) in [(0, 4), (0, 9), (2, 7), (5, 11), (3, 5)] {
            let inside = &x[i..j];
            let outside: Vec<f64> = x[..i].iter().chain(&x[j..]).copied().collect();
            let expected = crate::stats::mann_whitney_u(inside, &outside).z.abs();
            let got = interval_z(ranks[i..j].iter().sum(), j - i, x.len(), var_factor);
            assert!((got - expected).abs() < 1e-9, "[{i},{j}): {got} vs {expected}");
        }
    }

    #[test]
    fn short_and_constant_series_have_none() {
        assert!(detect(&[], 0.01, 0.02, 1).is_empty());
        assert!(detect(&[1.0, 2.0, 3.0], 0.01, 0.02, 1).is_empty());
        assert!(detect(&[1.0, 1.0, 5.0, 5.0], 0.01, 0.02, 1).is_empty());
        assert!(detect(&[7.0; 40], 0.01, 0.02, 1).is_empty());
        assert!(detect(&[1.0, f64::NAN, 1.0, 2.0, 2.0], 0.01, 0.02, 1).is_empty());
    }

    #[test]
    fn noise_alone_is_rarely_flagged() {
        let flagged = (0..100u64)
            .filter(|&t| !detect_with(&noisy(&[(30, 100.0)], 0.02, 1000 + t), &opts(199, t)).is_empty())
            .count();
        assert!(flagged <= 5, "{flagged} of 100 constant series flagged");
    }

    #[test]
    fn finds_a_single_step() {
        let x = noisy(&[(12, 100.0), (18, 115.0)], 0.02, 7);
        let found = detect(&x, DEFAULT_ALPHA, DEFAULT_MIN_EFFECT, 3);
        assert_eq!(found.len(), 1, "{found:?}");
        let cp = found[0];
        assert!(cp.index.abs_diff(12) <= 1, "{cp:?}");
        assert!((cp.ratio - 1.15).abs() < 0.03 && cp.p_value < DEFAULT_ALPHA, "{cp:?}");
        assert!(cp.p_value >= 1.0 / (DEFAULT_PERMUTATIONS + 1) as f64);
        assert_eq!(found, detect(&x, DEFAULT_ALPHA, DEFAULT_MIN_EFFECT, 3), "seeded");
    }

    #[test]
    fn finds_two_steps_up() {
        let x = noisy(&[(10, 100.0), (10, 115.0), (10, 132.0)], 0.02, 11);
        let found = detect(&x, DEFAULT_ALPHA, DEFAULT_MIN_EFFECT, 3);
        let at: Vec<usize> = found.iter().map(|c| c.index).collect();
        assert_eq!(at.len(), 2, "{found:?}");
        assert!(at[0].abs_diff(10) <= 1 && at[1].abs_diff(20) <= 1, "{found:?}");
        assert!(found.iter().all(|c| c.ratio > 1.1));
    }

    #[test]
    fn finds_a_regression_and_its_fix() {
        let x = noisy(&[(12, 100.0), (10, 115.0), (14, 100.0)], 0.02, 5);
        let found = detect(&x, DEFAULT_ALPHA, DEFAULT_MIN_EFFECT, 3);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].index.abs_diff(12) <= 1 && found[0].ratio > 1.1, "{found:?}");
        assert!(found[1].index.abs_diff(22) <= 1 && found[1].ratio < 0.9, "{found:?}");
    }

    #[test]
    fn tiny_steps_are_not_reported() {
        // Significant (no noise) but only 1%: below the minimal effect.
        let mut x = vec![100.0; 15];
        x.extend([101.0; 15]);
        assert!(detect(&x, DEFAULT_ALPHA, DEFAULT_MIN_EFFECT, 3).is_empty());
        assert_eq!(detect(&x, DEFAULT_ALPHA, 0.005, 3).len(), 1);
    }
}
