//! Descriptive statistics: quantiles, location and spread.

/// The `p` quantile of already sorted (ascending) data by linear
/// interpolation between order statistics: R's type 7, numpy's default.
///
/// With `h = (n - 1) * p`, the result is `x[floor(h)] + (h - floor(h)) *
/// (x[floor(h) + 1] - x[floor(h)])` (0-based). `p` is clamped to `[0, 1]`.
/// Returns `NaN` for empty data or a `NaN` `p`; never panics.
pub fn quantile_sorted(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    if n == 0 || p.is_nan() {
        return f64::NAN;
    }
    let h = (n - 1) as f64 * p.clamp(0.0, 1.0);
    let lo = (h.floor() as usize).min(n - 1);
    let hi = (lo + 1).min(n - 1);
    let frac = h - lo as f64;
    if frac == 0.0 || lo == hi { sorted[lo] } else { sorted[lo] + frac * (sorted[hi] - sorted[lo]) }
}

/// Arithmetic mean; `NaN` for empty data.
pub fn mean(x: &[f64]) -> f64 {
    if x.is_empty() {
        return f64::NAN;
    }
    x.iter().sum::<f64>() / x.len() as f64
}

/// Sample standard deviation (divisor `n - 1`, two-pass); `0` when there
/// are fewer than two values.
pub fn std_dev(x: &[f64]) -> f64 {
    if x.len() < 2 {
        return 0.0;
    }
    let m = mean(x);
    let ss: f64 = x.iter().map(|v| (v - m) * (v - m)).sum();
    (ss / (x.len() - 1) as f64).sqrt()
}

/// Median of unsorted data (mean of the two middle values for even `n`);
/// `NaN` for empty data.
pub fn median(x: &[f64]) -> f64 {
    let mut buf = x.to_vec();
    median_in_place(&mut buf)
}

/// The sum of squared deviations of `ln(x)` from its mean, and its degrees
/// of freedom (`n - 1`), over the finite positive values of `x`; `(0, 0)`
/// below two of them. Pool groups by adding both parts (a pooled SD on the
/// log scale: how far rounds of one run disagree).
pub fn log_ss(x: &[f64]) -> (f64, usize) {
    let logs: Vec<f64> = x.iter().filter(|v| v.is_finite() && **v > 0.0).map(|v| v.ln()).collect();
    if logs.len() < 2 {
        return (0.0, 0);
    }
    let mean = logs.iter().sum::<f64>() / logs.len() as f64;
    (logs.iter().map(|l| (l - mean).powi(2)).sum(), logs.len() - 1)
}

/// Median absolute deviation from the median, unscaled (no 1.4826 factor);
/// `NaN` for empty data.
pub fn mad(x: &[f64]) -> f64 {
    let m = median(x);
    let mut dev: Vec<f64> = x.iter().map(|v| (v - m).abs()).collect();
    median_in_place(&mut dev)
}

/// Median by selection, reordering `buf`; `NaN` when empty. O(n).
pub(crate) fn median_in_place(buf: &mut [f64]) -> f64 {
    let n = buf.len();
    if n == 0 {
        return f64::NAN;
    }
    let mid = n / 2;
    let (left, upper, _) = buf.select_nth_unstable_by(mid, f64::total_cmp);
    let upper = *upper;
    if n % 2 == 1 {
        upper
    } else {
        // The lower middle value is the largest of the left partition.
        let lower = left.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        lower + 0.5 * (upper - lower)
    }
}

/// A sorted copy of `x` (ascending by [`f64::total_cmp`]).
pub(crate) fn sorted_copy(x: &[f64]) -> Vec<f64> {
    let mut v = x.to_vec();
    v.sort_unstable_by(f64::total_cmp);
    v
}

/// Descriptive statistics of one sample. Quantiles use [`quantile_sorted`].
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (`n - 1`), 0 for a single value.
    pub std_dev: f64,
    /// Median (the 0.5 quantile).
    pub median: f64,
    /// Median absolute deviation from the median, unscaled.
    pub mad: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// First quartile (0.25 quantile).
    pub q1: f64,
    /// Third quartile (0.75 quantile).
    pub q3: f64,
    /// 0.90 quantile.
    pub p90: f64,
    /// 0.99 quantile.
    pub p99: f64,
}

impl Summary {
    /// Summarise `x` (any order); `None` when `x` is empty.
    pub fn new(x: &[f64]) -> Option<Summary> {
        if x.is_empty() {
            return None;
        }
        let sorted = sorted_copy(x);
        let median = quantile_sorted(&sorted, 0.5);
        let mut dev: Vec<f64> = sorted.iter().map(|v| (v - median).abs()).collect();
        Some(Summary {
            n: x.len(),
            mean: mean(x),
            std_dev: std_dev(x),
            median,
            mad: median_in_place(&mut dev),
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            q1: quantile_sorted(&sorted, 0.25),
            q3: quantile_sorted(&sorted, 0.75),
            p90: quantile_sorted(&sorted, 0.90),
            p99: quantile_sorted(&sorted, 0.99),
        })
    }

    /// Interquartile range, `q3 - q1`.
    pub fn iqr(&self) -> f64 {
        self.q3 - self.q1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ss_pools_groups_on_the_log_scale() {
        let d = (2f64.ln()) / 2.0;
        let (ss, df) = log_ss(&[1.0, 2.0]);
        assert!((ss - 2.0 * d * d).abs() < 1e-15 && df == 1, "{ss} {df}");
        assert_eq!(log_ss(&[5.0, f64::NAN, 0.0]), (0.0, 0), "one usable value: nothing to pool");
        assert_eq!(log_ss(&[3.0, 3.0, 3.0]), (0.0, 2));
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn quantiles_match_numpy_linear() {
        let x = [1.0, 2.0, 3.0, 4.0];
        // np.quantile([1,2,3,4], [0, .25, .5, .75, .9, 1])
        //   -> [1.0, 1.75, 2.5, 3.25, 3.7, 4.0]
        assert_eq!(quantile_sorted(&x, 0.0), 1.0);
        assert!(close(quantile_sorted(&x, 0.25), 1.75, 1e-12));
        assert!(close(quantile_sorted(&x, 0.5), 2.5, 1e-12));
        assert!(close(quantile_sorted(&x, 0.75), 3.25, 1e-12));
        assert!(close(quantile_sorted(&x, 0.9), 3.7, 1e-12));
        assert_eq!(quantile_sorted(&x, 1.0), 4.0);
        // np.quantile(np.arange(1, 11), .99) -> 9.91 (h = 8.91)
        let y: Vec<f64> = (1..=10).map(f64::from).collect();
        assert!(close(quantile_sorted(&y, 0.99), 9.91, 1e-12));
        // Out-of-range p clamps; degenerate inputs.
        assert_eq!(quantile_sorted(&x, -1.0), 1.0);
        assert_eq!(quantile_sorted(&x, 2.0), 4.0);
        assert_eq!(quantile_sorted(&[7.5], 0.3), 7.5);
        assert!(quantile_sorted(&[], 0.5).is_nan());
        assert!(quantile_sorted(&x, f64::NAN).is_nan());
    }

    #[test]
    fn location_and_spread_by_hand() {
        // mean 5, squared deviations 9+1+1+1+0+0+4+16 = 32, var = 32/7.
        let x = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert_eq!(mean(&x), 5.0);
        assert!(close(std_dev(&x), (32.0f64 / 7.0).sqrt(), 1e-12));
        assert!(close(std_dev(&x), 2.138_089_935_299_395, 1e-12));
        assert_eq!(median(&x), 4.5);
        // |x - 4.5| = 2.5,.5,.5,.5,.5,.5,2.5,4.5 -> median 0.5
        assert_eq!(mad(&x), 0.5);
        // median 2; |x - 2| = 1,1,0,0,2,4,7 -> sorted 0,0,1,1,2,4,7 -> 1
        let y = [9.0, 1.0, 2.0, 6.0, 1.0, 4.0, 2.0];
        assert_eq!(median(&y), 2.0);
        assert_eq!(mad(&y), 1.0);
        assert_eq!(std_dev(&[3.0]), 0.0);
        assert_eq!(std_dev(&[]), 0.0);
        assert!(mean(&[]).is_nan() && median(&[]).is_nan() && mad(&[]).is_nan());
    }

    #[test]
    fn summary_of_one_to_hundred() {
        let mut x: Vec<f64> = (1..=100).map(f64::from).collect();
        x.reverse(); // order must not matter
        let s = Summary::new(&x).unwrap();
        assert_eq!(s.n, 100);
        assert_eq!(s.mean, 50.5);
        // Sample variance of 1..=n is n(n+1)/12.
        assert!(close(s.std_dev, (100.0f64 * 101.0 / 12.0).sqrt(), 1e-9));
        assert_eq!(s.median, 50.5);
        // |x - 50.5| = 0.5, 0.5, 1.5, 1.5, ...: 50th/51st values 24.5, 25.5.
        assert_eq!(s.mad, 25.0);
        assert_eq!((s.min, s.max), (1.0, 100.0));
        // h = 99p: q1 = 25.75, q3 = 75.25, p90 = 90.1, p99 = 99.01
        assert!(close(s.q1, 25.75, 1e-12) && close(s.q3, 75.25, 1e-12));
        assert!(close(s.p90, 90.1, 1e-9) && close(s.p99, 99.01, 1e-9));
        assert!(close(s.iqr(), 49.5, 1e-12));
        assert_eq!(Summary::new(&[]), None);
        let one = Summary::new(&[4.0]).unwrap();
        assert_eq!((one.std_dev, one.mad, one.p99), (0.0, 0.0, 4.0));
    }
}
