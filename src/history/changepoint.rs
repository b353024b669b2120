//! Change-point detection over a whole series of run medians.
//!
//! # Method
//!
//! Binary segmentation with permutation tests, extended with a "step and
//! step back" scan (circular binary segmentation, Olshen et al. 2004) for
//! the common regression-then-fix shape, which one split at a time cannot
//! see when it sits mid-series.
//!
//! 1. **Statistic.** The segment's values are winsorized at the median +- 5
//!    robust standard deviations (1.4826 x MAD), so that a few wild runs
//!    cannot dominate the means. For a split at `k` (at least
//!    [`MIN_SEGMENT`] points a side) the statistic is the standardized
//!    difference of means (CUSUM / two-sample t) `T = |mean(x[..k]) -
//!    mean(x[k..])| / sqrt(1/k + 1/(n-k))`; the candidate is the `k` with
//!    the largest `T`. Values rather than ranks: a rank statistic scores
//!    every split between two well separated levels alike (its estimate
//!    drifts to the middle) and cannot exceed a small bound for a short
//!    block, so it misses a step in the last three runs.
//! 2. **Significance.** The winsorized values are shuffled (seeded
//!    Fisher-Yates) `permutations` times and each shuffle's largest `T`
//!    computed the same way, which accounts for having searched all splits:
//!    `p = (1 + #{max T_perm >= max T_obs}) / (1 + permutations)`.
//!    Shuffling stops early once `p` cannot fall below the level.
//!    Winsorizing is monotone and uses the whole segment, so the test stays
//!    exact.
//! 3. **Step and back.** When no split is significant, the same test runs
//!    over every interior interval `[i, j)` against the rest of the segment
//!    (`T` with `m = j - i` values inside), which finds a step and a step
//!    back mid-series that no single split separates. Each of the two tests
//!    runs at `alpha / 2` and reports `min(1, 2p)` (Bonferroni), so a
//!    segment without change is flagged with probability at most `alpha`.
//!    Segments longer than [`CIRCULAR_MAX_LEN`] skip this quadratic scan.
//! 4. **Effect.** A boundary of a significant candidate is kept only if the
//!    medians on its two sides differ by more than `min_effect` (relative),
//!    so a statistically clear but tiny shift is not reported as a step,
//!    and still do when any one run is left out of either side, so a wild
//!    run in a 2-run segment at the end of a history is not a step either.
//! 5. **Recursion.** The segment is cut at the kept boundaries and each
//!    piece is tested again, until no piece has a significant candidate.
//! 6. **Final check.** Each change point is described by the medians of
//!    the final segments on either side; while any has a relative step of
//!    at most `min_effect`, the weakest is dropped and its neighbours merge.
//!
//! The permutation test is exact for independent, identically distributed
//! runs (the null hypothesis) whatever their distribution. Short series
//! have little power: a change needs roughly three runs on each side of it
//! (and about ten runs in all) before `p` can get below 0.01.

use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

/// Default significance level of the permutation test.
pub const DEFAULT_ALPHA: f64 = 0.01;
/// Default minimal relative step between segment medians (2%).
pub const DEFAULT_MIN_EFFECT: f64 = 0.02;
/// Default number of permutations, so the smallest possible `p` is 0.001.
pub const DEFAULT_PERMUTATIONS: usize = 999;
/// Default seed of the permutations ("tfbench" in ASCII).
pub const DEFAULT_SEED: u64 = 0x0074_6662_656e_6368;
/// Fewest points in any segment on either side of a change point.
pub const MIN_SEGMENT: usize = 2;
/// Robust standard deviations from the median at which values are clamped.
const WINSOR_SDS: f64 = 5.0;
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
    /// p-value of the permutation test that found the change, doubled
    /// (Bonferroni over its two tests, see the module doc): below `alpha`.
    pub p_value: f64,
}

/// Settings of [`detect_with`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DetectOptions {
    /// Significance level: a candidate is accepted when `p < alpha`.
    pub alpha: f64,
    /// Minimal relative step `|after / before - 1|` to report.
    pub min_effect: f64,
    /// Permutations per test. Each test runs at `alpha / 2` and its smallest
    /// possible `p` is `1 / (1 + permutations)`, so nothing can be detected
    /// with fewer than `2 / alpha` permutations.
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
        let Some(c) = best_candidate(x, opts, &mut rng) else { continue };
        let mut cuts = Vec::new();
        if c.i > 0 && exceeds(&x[..c.i], &x[c.i..c.j], opts.min_effect) {
            cuts.push(c.i);
        }
        if c.j < x.len() && exceeds(&x[c.i..c.j], &x[c.j..], opts.min_effect) {
            cuts.push(c.j);
        }
        if cuts.is_empty() {
            continue; // significant but too small a step: the segment stays whole
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

/// Relative step between the medians of two segments that holds whichever
/// single run is left out of either side: 0 when that can flip its sign, or
/// when it is `NaN`. Without this, a 2-run segment at an end whose median
/// is half one wild run would pass as a step.
fn effect(before: &[f64], after: &[f64]) -> f64 {
    let (b, a) = (leave_one_out_medians(before), leave_one_out_medians(after));
    let steps = [a[0] / b[0] - 1.0, a[0] / b[1] - 1.0, a[1] / b[0] - 1.0, a[1] / b[1] - 1.0];
    if steps.iter().all(|&d| d > 0.0) || steps.iter().all(|&d| d < 0.0) {
        steps.iter().map(|d| d.abs()).fold(f64::INFINITY, f64::min)
    } else {
        0.0 // mixed signs or NaN
    }
}

/// The smallest and largest median of `x` with one value left out: those of
/// `x` without its largest and without its smallest value.
fn leave_one_out_medians(x: &[f64]) -> [f64; 2] {
    let mut sorted = x.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.len() < 2 {
        let m = crate::stats::median(&sorted);
        return [m, m];
    }
    let m = sorted.len();
    [crate::stats::quantile_sorted(&sorted[..m - 1], 0.5), crate::stats::quantile_sorted(&sorted[1..], 0.5)]
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

/// A significant candidate of a segment: `[i, j)` against the rest
/// (`i = 0` for a single split at `j`), with its adjusted p-value.
struct Candidate {
    i: usize,
    j: usize,
    p: f64,
}

/// Which candidates a scan considers.
#[derive(Clone, Copy, PartialEq)]
enum Scan {
    /// Single splits: `[0, k)` against `[k, n)`.
    Splits,
    /// Interior intervals `[i, j)` with `0 < i < j < n` against the rest.
    Intervals,
}

/// A significant split of a segment, else a significant interior interval,
/// each family tested at `alpha / 2`; `None` when neither is.
fn best_candidate(x: &[f64], opts: &DetectOptions, rng: &mut impl rand::Rng) -> Option<Candidate> {
    let n = x.len();
    if n < 2 * MIN_SEGMENT {
        return None;
    }
    let mut y = winsorized(x);
    let mean = y.iter().sum::<f64>() / n as f64;
    y.iter_mut().for_each(|v| *v -= mean);
    if y.iter().all(|&v| v == 0.0) {
        return None; // a flat segment has nothing to split
    }
    let mut families = vec![Scan::Splits];
    if (3 * MIN_SEGMENT..=CIRCULAR_MAX_LEN).contains(&n) {
        families.push(Scan::Intervals);
    }
    let level = opts.alpha / 2.0;
    families.into_iter().find_map(|family| {
        let (observed, i, j) = scan(&y, family, shift_stat);
        let p = permutation_p(&y, family, observed, level, opts.permutations, rng)?;
        Some(Candidate { i, j, p: (2.0 * p).min(1.0) })
    })
}

/// `x` clamped to its median +- [`WINSOR_SDS`] robust standard deviations
/// (1.4826 x MAD); unchanged when the MAD is 0 (most values equal).
fn winsorized(x: &[f64]) -> Vec<f64> {
    let center = crate::stats::median(x);
    let spread = WINSOR_SDS * 1.4826 * crate::stats::mad(x);
    if spread.is_nan() || spread <= 0.0 {
        return x.to_vec();
    }
    x.iter().map(|&v| v.clamp(center - spread, center + spread)).collect()
}

/// Permutation p-value of the `observed` largest statistic of `y` over the
/// `family`, if below `level`.
fn permutation_p(
    y: &[f64],
    family: Scan,
    observed: f64,
    level: f64,
    permutations: usize,
    rng: &mut impl rand::Rng,
) -> Option<f64> {
    if observed.is_nan() || observed <= 0.0 {
        return None;
    }
    let total = (permutations + 1) as f64;
    let mut exceed = 0usize;
    let mut shuffled = y.to_vec();
    for _ in 0..permutations {
        shuffled.shuffle(rng);
        // Tolerance: an equally extreme arrangement must count despite rounding.
        if scan(&shuffled, family, shift_stat).0 >= observed * (1.0 - 1e-9) {
            exceed += 1;
            if (1 + exceed) as f64 / total >= level {
                return None; // p can only grow from here
            }
        }
    }
    let p = (1 + exceed) as f64 / total;
    (p < level).then_some(p)
}

/// Largest `stat(sum of v[i..j], j - i, n)` over the `family`, with its
/// interval `(i, j)`. Prefix sums make each candidate O(1): O(n) for
/// splits, O(n^2) for intervals.
fn scan(v: &[f64], family: Scan, stat: impl Fn(f64, usize, usize) -> f64) -> (f64, usize, usize) {
    let n = v.len();
    let mut prefix = Vec::with_capacity(n + 1);
    prefix.push(0.0);
    for x in v {
        prefix.push(prefix[prefix.len() - 1] + x);
    }
    let mut best = (0.0, 0, 0);
    let mut consider = |i: usize, j: usize| {
        let t = stat(prefix[j] - prefix[i], j - i, n);
        if t > best.0 {
            best = (t, i, j);
        }
    };
    match family {
        Scan::Splits => (MIN_SEGMENT..=n - MIN_SEGMENT).for_each(|k| consider(0, k)),
        Scan::Intervals => {
            for i in MIN_SEGMENT..=n - 2 * MIN_SEGMENT {
                (i + MIN_SEGMENT..=n - MIN_SEGMENT).for_each(|j| consider(i, j));
            }
        }
    }
    best
}

/// `|mean_in - mean_out| / sqrt(1/m + 1/(n-m))` for `m` of `n` centered
/// values summing to `sum_in`: since the total is 0, `mean_in - mean_out =
/// sum_in * n / (m (n - m))`. The segment's spread is left out because it is
/// the same for every candidate and every shuffle.
fn shift_stat(sum_in: f64, m: usize, n: usize) -> f64 {
    let (m, n) = (m as f64, n as f64);
    sum_in.abs() / (m * (n - m) / n).sqrt()
}

#[cfg(test)]
#[path = "changepoint_tests.rs"]
mod tests;
