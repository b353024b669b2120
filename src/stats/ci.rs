//! Confidence intervals: order statistics for the median, seeded percentile
//! bootstrap for the mean and for a ratio of medians.

use super::summary::{median, median_in_place, quantile_sorted};
use rand::Rng;
use rand::distr::{Distribution, Uniform};
use statrs::distribution::{Binomial, DiscreteCDF};

/// Distribution-free confidence interval for the median from order
/// statistics; `sorted` must be ascending.
///
/// The number of values below the population median is Binomial(n, 1/2), so
/// the interval `[x(k), x(n+1-k)]` (1-based order statistics) covers the
/// median with probability `P(k <= B <= n-k) = 1 - 2 P(B <= k-1)`, exactly
/// and for any continuous distribution. This picks the largest `k` (the
/// narrowest symmetric pair) whose coverage is still `>= level`; for
/// `n = 100` at 0.95 that is ranks 40 and 61 (coverage 0.965).
///
/// When `n` is too small for any pair to reach `level` (e.g. `n <= 5` at
/// 0.95, where even `[min, max]` covers only `1 - 2^(1-n)`), the result is
/// `(min, max)`; likewise for `level >= 1` or `NaN`. Empty data gives
/// `(NaN, NaN)`.
pub fn median_ci(sorted: &[f64], level: f64) -> (f64, f64) {
    let n = sorted.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let k = median_ci_rank(n, level);
    (sorted[k - 1], sorted[n - k])
}

/// The 1-based lower rank `k` of [`median_ci`]: the largest
/// `k <= (n + 1) / 2` with `1 - 2 P(B <= k - 1) >= level`, else 1. `n >= 1`.
fn median_ci_rank(n: usize, level: f64) -> usize {
    let Ok(binom) = Binomial::new(0.5, n as u64) else {
        return 1;
    };
    let coverage = |k: usize| 1.0 - 2.0 * binom.cdf(k as u64 - 1);
    // Coverage falls as k grows; binary search the last k that reaches level.
    let (mut lo, mut hi) = (1usize, n.div_ceil(2));
    if coverage(lo) < level || level.is_nan() {
        return 1;
    }
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if coverage(mid) >= level {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// Percentile bounds `((1-level)/2, (1+level)/2)` of bootstrap replicates.
fn percentile_bounds(reps: &mut [f64], level: f64) -> (f64, f64) {
    reps.sort_unstable_by(f64::total_cmp);
    let alpha = 1.0 - level.clamp(0.0, 1.0);
    (quantile_sorted(reps, alpha / 2.0), quantile_sorted(reps, 1.0 - alpha / 2.0))
}

/// Seeded percentile-bootstrap confidence interval for the mean.
///
/// Draws `resamples` resamples of `x` with replacement, takes each one's
/// mean and returns the `(1-level)/2` and `(1+level)/2` quantiles of those
/// means. The same `seed` always gives the same interval. One allocation
/// (the replicate means); resamples are summed on the fly.
///
/// Empty `x` or `resamples == 0` gives `(NaN, NaN)`.
pub fn bootstrap_mean_ci(x: &[f64], level: f64, resamples: usize, seed: u64) -> (f64, f64) {
    let n = x.len();
    if n == 0 || resamples == 0 {
        return (f64::NAN, f64::NAN);
    }
    let Ok(index) = Uniform::new(0, n) else {
        return (f64::NAN, f64::NAN);
    };
    let mut rng = crate::util::rng(seed);
    let inv_n = 1.0 / n as f64;
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| {
            let mut sum = 0.0;
            for _ in 0..n {
                sum += x[index.sample(&mut rng)];
            }
            sum * inv_n
        })
        .collect();
    percentile_bounds(&mut means, level)
}

/// Fills `buf` with a resample of `x` and returns its median.
fn resampled_median<R: Rng>(x: &[f64], index: &Uniform<usize>, buf: &mut [f64], rng: &mut R) -> f64 {
    for slot in buf.iter_mut() {
        *slot = x[index.sample(rng)];
    }
    median_in_place(buf)
}

/// Seeded percentile-bootstrap interval for `median(new) / median(old)`.
///
/// Returns `(point, lower, upper)`: the point ratio from the full samples
/// and the percentile bounds of the ratio over `resamples` replicates, where
/// each replicate resamples `new` and `old` independently (they are
/// unpaired). Reproducible for equal `seed`; two scratch buffers are reused
/// across replicates.
///
/// A ratio below 1 means `new` is faster for timings. Empty inputs or
/// `resamples == 0` give `NaN` bounds (and a `NaN` point when empty); an
/// `old` median of 0 gives infinite or `NaN` ratios.
pub fn bootstrap_ratio_of_medians_ci(
    new: &[f64],
    old: &[f64],
    level: f64,
    resamples: usize,
    seed: u64,
) -> (f64, f64, f64) {
    let point = median(new) / median(old);
    let (Ok(idx_new), Ok(idx_old)) = (Uniform::new(0, new.len()), Uniform::new(0, old.len())) else {
        return (point, f64::NAN, f64::NAN);
    };
    if resamples == 0 {
        return (point, f64::NAN, f64::NAN);
    }
    let mut rng = crate::util::rng(seed);
    let (mut buf_new, mut buf_old) = (vec![0.0; new.len()], vec![0.0; old.len()]);
    let mut ratios: Vec<f64> = (0..resamples)
        .map(|_| {
            let m_new = resampled_median(new, &idx_new, &mut buf_new, &mut rng);
            let m_old = resampled_median(old, &idx_old, &mut buf_old, &mut rng);
            m_new / m_old
        })
        .collect();
    let (lower, upper) = percentile_bounds(&mut ratios, level);
    (point, lower, upper)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::mean;
    use rand_distr::{Exp, Normal};

    #[test]
    fn median_ci_textbook_ranks() {
        let x: Vec<f64> = (1..=100).map(f64::from).collect();
        // n = 100, 95%: ranks 40 and 61 (P(B <= 39) = 0.0176 -> 0.9648;
        // k = 41 would give 1 - 2 * 0.0284 = 0.943 < 0.95).
        assert_eq!(median_ci(&x, 0.95), (40.0, 61.0));
        // 99%: ranks 37 and 64 (1 - 2 P(B <= 36) = 0.9934; k = 38: 0.9880).
        assert_eq!(median_ci(&x, 0.99), (37.0, 64.0));
        // n = 10, 95%: 1 - 2 * 11/1024 = 0.9785 at k = 2, 0.8906 at k = 3.
        let y: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(median_ci(&y, 0.95), (2.0, 9.0));
        assert_eq!(median_ci(&y, 0.85), (3.0, 8.0));
        // Too small to reach the level: n = 5 covers at most 1 - 2/32.
        assert_eq!(median_ci(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.95), (1.0, 5.0));
        assert_eq!(median_ci(&[3.0], 0.95), (3.0, 3.0));
        assert_eq!(median_ci(&y, 1.0), (1.0, 10.0));
        // Level 0 collapses to the middle pair / the median.
        assert_eq!(median_ci(&y, 0.0), (5.0, 6.0));
        let (lo, hi) = median_ci(&[], 0.95);
        assert!(lo.is_nan() && hi.is_nan());
    }

    #[test]
    fn bootstrap_is_reproducible_and_seed_dependent() {
        let x: Vec<f64> = crate::util::randn(100, 11).iter().map(|&v| f64::from(v)).collect();
        let a = bootstrap_mean_ci(&x, 0.95, 2000, 42);
        assert_eq!(a, bootstrap_mean_ci(&x, 0.95, 2000, 42));
        assert_ne!(a, bootstrap_mean_ci(&x, 0.95, 2000, 43));
        let m = mean(&x);
        assert!(a.0 < m && m < a.1, "{a:?} around {m}");
        // Width close to the normal-theory 2 * 1.96 * s / sqrt(n).
        let width = 2.0 * 1.96 * crate::stats::std_dev(&x) / 10.0;
        assert!(((a.1 - a.0) / width - 1.0).abs() < 0.1, "{a:?} vs width {width}");

        let old: Vec<f64> = x.iter().map(|v| 10.0 + v).collect();
        let new: Vec<f64> = old.iter().map(|v| 0.8 * v).collect();
        let r = bootstrap_ratio_of_medians_ci(&new, &old, 0.95, 1000, 5);
        assert_eq!(r, bootstrap_ratio_of_medians_ci(&new, &old, 0.95, 1000, 5));
        assert_ne!(r, bootstrap_ratio_of_medians_ci(&new, &old, 0.95, 1000, 6));
        assert!((r.0 - 0.8).abs() < 1e-12, "{r:?}");
        assert!(r.1 < 0.8 && 0.8 < r.2 && r.2 - r.1 < 0.1, "{r:?}");
    }

    #[test]
    fn bootstrap_degenerate_inputs() {
        let (lo, hi) = bootstrap_mean_ci(&[], 0.95, 100, 1);
        assert!(lo.is_nan() && hi.is_nan());
        assert_eq!(bootstrap_mean_ci(&[2.5], 0.95, 100, 1), (2.5, 2.5));
        assert_eq!(bootstrap_mean_ci(&[1.0; 10], 0.95, 100, 1), (1.0, 1.0));
        assert!(bootstrap_mean_ci(&[1.0, 2.0], 0.95, 0, 1).0.is_nan());
        let r = bootstrap_ratio_of_medians_ci(&[2.0, 2.0], &[], 0.95, 100, 1);
        assert!(r.0.is_nan() && r.1.is_nan() && r.2.is_nan());
        assert_eq!(bootstrap_ratio_of_medians_ci(&[3.0; 4], &[2.0; 5], 0.9, 50, 1), (1.5, 1.5, 1.5));
    }

    #[test]
    fn coverage_of_intervals_on_known_distributions() {
        const TRIALS: usize = 400;
        const N: usize = 50;
        let mut rng = crate::util::rng(2024);
        let normal = Normal::new(10.0, 2.0).unwrap();
        let exp = Exp::new(1.0).unwrap(); // mean 1, median ln 2
        let (mut mean_hits, mut med90_hits, mut med95_hits, mut exp_med_hits) = (0, 0, 0, 0);
        let mut x = vec![0.0; N];
        for t in 0..TRIALS {
            x.iter_mut().for_each(|v| *v = normal.sample(&mut rng));
            let (lo, hi) = bootstrap_mean_ci(&x, 0.9, 1000, t as u64);
            mean_hits += usize::from(lo <= 10.0 && 10.0 <= hi);
            x.sort_unstable_by(f64::total_cmp);
            let (lo, hi) = median_ci(&x, 0.9);
            med90_hits += usize::from(lo <= 10.0 && 10.0 <= hi);
            let (lo, hi) = median_ci(&x, 0.95);
            med95_hits += usize::from(lo <= 10.0 && 10.0 <= hi);

            x.iter_mut().for_each(|v| *v = exp.sample(&mut rng));
            x.sort_unstable_by(f64::total_cmp);
            let (lo, hi) = median_ci(&x, 0.9);
            exp_med_hits += usize::from(lo <= 2f64.ln() && 2f64.ln() <= hi);
        }
        let rate = |hits: usize| hits as f64 / TRIALS as f64;
        let mean_rate = rate(mean_hits);
        assert!((0.84..=0.95).contains(&mean_rate), "bootstrap mean coverage {mean_rate}");
        assert!(rate(med90_hits) >= 0.85, "median 90% coverage {}", rate(med90_hits));
        assert!(rate(med95_hits) >= 0.90, "median 95% coverage {}", rate(med95_hits));
        assert!(rate(exp_med_hits) >= 0.85, "exp median 90% coverage {}", rate(exp_med_hits));
    }
}
