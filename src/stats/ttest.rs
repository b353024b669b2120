//! The one-sample Student t test and interval for a mean.
//!
//! `ab` uses it on per-round estimates: each round runs with a fresh pair of
//! worker processes, so the spread of the round estimates holds everything
//! that differs between processes (memory layout, the core a process landed
//! on), which the pairs inside one round cannot show. With a handful of
//! rounds the t distribution, not a bootstrap, gives an honest width.

use statrs::distribution::{ContinuousCDF, StudentsT};

/// A one-sample t test of "the mean is 0" with the interval for the mean.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OneSampleT {
    /// Sample mean.
    pub mean: f64,
    /// Lower end of the interval for the mean.
    pub lower: f64,
    /// Upper end of the interval for the mean.
    pub upper: f64,
    /// Two-sided p-value of "the mean is 0".
    pub p_value: f64,
    /// Degrees of freedom (`n - 1`).
    pub df: usize,
}

/// The t test and `level` interval of the mean of `x`; `None` below 2 values.
///
/// Values that are all equal give a zero-width interval and a p-value of 0
/// (when the mean is not 0) or 1.
pub fn one_sample_t(x: &[f64], level: f64) -> Option<OneSampleT> {
    let n = x.len();
    if n < 2 {
        return None;
    }
    let se = super::std_dev(x) / (n as f64).sqrt();
    t_of(super::mean(x), se, n - 1, level)
}

/// The t test of "the mean is 0" and the `level` interval, from a mean, its
/// standard error and degrees of freedom. A zero standard error gives a
/// zero-width interval and a p-value of 0 (mean not 0) or 1.
fn t_of(mean: f64, se: f64, df: usize, level: f64) -> Option<OneSampleT> {
    let dist = StudentsT::new(0.0, 1.0, df as f64).ok()?;
    let q = dist.inverse_cdf(0.5 + level / 2.0);
    let p_value = if se > 0.0 {
        (2.0 * (1.0 - dist.cdf((mean / se).abs()))).clamp(0.0, 1.0)
    } else if mean == 0.0 {
        1.0
    } else {
        0.0
    };
    Some(OneSampleT { mean, lower: mean - q * se, upper: mean + q * se, p_value, df })
}

/// The t test and `level` interval of a mean measured in two balanced
/// orders: `a` and `b` are the values taken in each order. The mean is that
/// of the two orders' means, so an effect of the order cancels in it, and
/// the spread is pooled within the orders, so that effect does not widen
/// the interval (a one-way layout with the order as a block, `df = n - 2`).
/// `None` when an order has fewer than 2 values.
///
/// `ab` alternates which build's process starts and prepares first from
/// round to round; on large memory-bound cases that order moved a paired
/// ratio by 5-10% in the same direction every time, and a plain t test over
/// the rounds counted that as noise.
pub fn blocked_t(a: &[f64], b: &[f64], level: f64) -> Option<OneSampleT> {
    let (na, nb) = (a.len(), b.len());
    if na < 2 || nb < 2 {
        return None;
    }
    let (ma, mb) = (super::mean(a), super::mean(b));
    let mean = (ma + mb) / 2.0;
    let ss: f64 =
        a.iter().map(|v| (v - ma).powi(2)).sum::<f64>() + b.iter().map(|v| (v - mb).powi(2)).sum::<f64>();
    let df = na + nb - 2;
    let var = ss / df as f64;
    let se = (var / 4.0 * (1.0 / na as f64 + 1.0 / nb as f64)).sqrt();
    t_of(mean, se, df, level)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_t_removes_an_order_effect() {
        // Orders offset by +-0.1 around 0.05, tiny noise: a plain t test sees
        // the offset as spread, the blocked one does not.
        let a = [0.151, 0.149, 0.150, 0.152, 0.148, 0.150];
        let b = [-0.049, -0.051, -0.050, -0.048, -0.052, -0.050];
        let all: Vec<f64> = a.iter().chain(&b).copied().collect();
        let plain = one_sample_t(&all, 0.95).unwrap();
        let blocked = blocked_t(&a, &b, 0.95).unwrap();
        assert!((blocked.mean - 0.05).abs() < 1e-12 && blocked.df == 10);
        assert!(plain.p_value > 0.05 && blocked.p_value < 1e-9, "{plain:?} {blocked:?}");
        assert!(blocked.upper - blocked.lower < 0.01);
        // Without an order effect it matches the plain test closely. With
        // a = [1, 3], b = [2, 4]: mean 2.5, pooled var (2 + 2) / 2 = 2,
        // se = sqrt(2 / 4 * (1/2 + 1/2)) = sqrt(0.5), t = 2.5 / sqrt(0.5) on
        // 2 df: p = 2 (1 - F(3.5355)) = 0.0715 (F for df 2: 1/2 + t / (2 sqrt(2 + t^2))).
        let r = blocked_t(&[1.0, 3.0], &[2.0, 4.0], 0.95).unwrap();
        let t: f64 = 2.5 / 0.5f64.sqrt();
        let want = 2.0 * (0.5 - t / (2.0 * (2.0 + t * t).sqrt()));
        assert!((r.p_value - want).abs() < 1e-9, "{} vs {want}", r.p_value);
        assert!(blocked_t(&[1.0], &[2.0, 3.0], 0.95).is_none());
    }

    #[test]
    fn agrees_with_the_closed_form_for_four_degrees_of_freedom() {
        // For df = 4, F(t) = 1/2 + 3/8 u (1 - v/12) with u = t/sqrt(1+t^2/4),
        // v = t^2/(1+t^2/4): t = 4.2426 gives p = 0.013235599563682587.
        let r = one_sample_t(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.95).unwrap();
        assert_eq!(r.df, 4);
        assert!((r.mean - 3.0).abs() < 1e-15);
        assert!((r.p_value - 0.013235599563682587).abs() < 1e-9, "{}", r.p_value);
        // t(0.975, 4) = 2.7764451051977987; se = sqrt(2.5/5).
        let half = 2.7764451051977987 * (0.5f64).sqrt();
        assert!((r.lower - (3.0 - half)).abs() < 1e-9 && (r.upper - (3.0 + half)).abs() < 1e-9);
    }

    #[test]
    fn two_values_use_the_wide_quantile() {
        // t(0.975, 1) = 12.706204736174698; mean 1, sd = sqrt(1/2), se = 0.5.
        let r = one_sample_t(&[0.5, 1.5], 0.95).unwrap();
        assert!((r.upper - 1.0 - 12.706204736174698 * 0.5).abs() < 1e-8, "{r:?}");
    }

    #[test]
    fn degenerate_inputs() {
        assert!(one_sample_t(&[1.0], 0.95).is_none());
        assert!(one_sample_t(&[], 0.95).is_none());
        let same = one_sample_t(&[0.5, 0.5, 0.5], 0.95).unwrap();
        assert_eq!((same.p_value, same.lower, same.upper), (0.0, 0.5, 0.5));
        assert_eq!(one_sample_t(&[0.0, 0.0], 0.95).unwrap().p_value, 1.0);
    }
}
