//! Hypothesis tests: Mann-Whitney U and Benjamini-Hochberg adjustment.

use statrs::distribution::{ContinuousCDF, Normal};

/// Result of a two-sided Mann-Whitney U test (see [`mann_whitney_u`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MannWhitney {
    /// U statistic of the first sample: the number of pairs `(a_i, b_j)`
    /// with `a_i > b_j`, ties counting 1/2. Ranges over `0..=n_a * n_b`.
    pub u: f64,
    /// Continuity-corrected normal score of `u`, tie-corrected; positive
    /// when `a` tends to be larger than `b`, 0 when the test is degenerate.
    pub z: f64,
    /// Two-sided p-value from the normal approximation, in `[0, 1]`.
    pub p_value: f64,
}

/// Two-sided Mann-Whitney U (Wilcoxon rank-sum) test of `a` against `b`.
///
/// Ranks the pooled data (midranks for ties) and uses the normal
/// approximation with tie and continuity corrections (`n = n_a + n_b`, `t`
/// the size of each group of tied values):
///
/// ```text
/// U     = R_a - n_a (n_a + 1) / 2          (R_a: rank sum of a)
/// mu    = n_a n_b / 2
/// sigma = sqrt(n_a n_b / 12 * ((n + 1) - sum(t^3 - t) / (n (n - 1))))
/// z     = sign(U - mu) * max(|U - mu| - 1/2, 0) / sigma
/// p     = min(1, 2 * (1 - Phi(|z|)))
/// ```
///
/// This matches `scipy.stats.mannwhitneyu(a, b, alternative='two-sided',
/// use_continuity=True, method='asymptotic')` (scipy reports the same `U`
/// and `p`).
///
/// Degenerate cases (an empty sample, or all values tied so the variance is
/// zero) give `z = 0` and `p_value = 1`.
pub fn mann_whitney_u(a: &[f64], b: &[f64]) -> MannWhitney {
    let (n1, n2) = (a.len(), b.len());
    let n = n1 + n2;
    // Pool as (value, from_a), sort, and walk runs of ties.
    let mut pooled: Vec<(f64, bool)> =
        a.iter().map(|&v| (v, true)).chain(b.iter().map(|&v| (v, false))).collect();
    pooled.sort_unstable_by(|x, y| x.0.total_cmp(&y.0));
    let (mut rank_sum_a, mut tie_term) = (0.0f64, 0.0f64);
    let mut i = 0;
    while i < n {
        let mut j = i + 1;
        while j < n && pooled[j].0 == pooled[i].0 {
            j += 1;
        }
        // Positions i..j (0-based) share the midrank (i + 1 + j) / 2.
        let midrank = (i + 1 + j) as f64 / 2.0;
        let in_a = pooled[i..j].iter().filter(|e| e.1).count();
        rank_sum_a += midrank * in_a as f64;
        let t = (j - i) as f64;
        tie_term += t * t * t - t;
        i = j;
    }
    let (n1f, n2f, nf) = (n1 as f64, n2 as f64, n as f64);
    let u = rank_sum_a - n1f * (n1f + 1.0) / 2.0;
    let degenerate = MannWhitney { u, z: 0.0, p_value: 1.0 };
    if n1 == 0 || n2 == 0 {
        return degenerate;
    }
    let var = n1f * n2f / 12.0 * ((nf + 1.0) - tie_term / (nf * (nf - 1.0)));
    // All-tied data gives var = 0 up to rounding.
    if var.is_nan() || var <= 1e-12 * n1f * n2f {
        return degenerate;
    }
    let diff = u - n1f * n2f / 2.0;
    let z = diff.signum() * (diff.abs() - 0.5).max(0.0) / var.sqrt();
    let p_value = (2.0 * Normal::standard().sf(z.abs())).min(1.0);
    MannWhitney { u, z, p_value }
}

/// Benjamini-Hochberg adjusted p-values (q-values), in input order.
///
/// With `m` p-values sorted ascending, `q_(i) = min_{j >= i} p_(j) m / j`,
/// capped at 1: monotone in `p`, and rejecting `q <= alpha` controls the
/// false discovery rate at `alpha` (for independent or positively dependent
/// tests). Empty input gives an empty vector; `NaN` inputs stay `NaN`.
pub fn benjamini_hochberg(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_unstable_by(|&i, &j| p[i].total_cmp(&p[j]));
    let mut q = vec![0.0; m];
    let mut running = 1.0f64;
    for (rank0, &idx) in order.iter().enumerate().rev() {
        let adjusted = p[idx] * m as f64 / (rank0 + 1) as f64;
        if p[idx].is_nan() {
            q[idx] = f64::NAN;
            continue;
        }
        running = running.min(adjusted);
        q[idx] = running;
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn mann_whitney_scipy_docs_example() {
        // scipy.stats.mannwhitneyu docs: males vs females,
        // method="asymptotic" -> statistic=17.0, pvalue=0.11134688653314041.
        let r = mann_whitney_u(&[19.0, 22.0, 16.0, 29.0, 24.0], &[20.0, 11.0, 17.0, 12.0]);
        assert_eq!(r.u, 17.0);
        // statrs's erfc agrees with scipy's to ~1e-11 here.
        assert!(close(r.p_value, 0.111_346_886_533_140_41, 1e-10), "{r:?}");
        // z = (17 - 10 - 0.5) / sqrt(20 * 10 / 12) = 6.5 / 4.0825 = 1.59217.
        assert!(close(r.z, 6.5 / (200.0f64 / 12.0).sqrt(), 1e-12));
    }

    #[test]
    fn mann_whitney_separated_samples() {
        // Complete separation, n1 = n2 = 5: U = 0, mu = 12.5,
        // sigma = sqrt(25 / 12 * 11) = 4.787136, z = -(12.5 - 0.5) / sigma =
        // -2.506718, p = 2 * Phi(-2.506718) = 0.0121858 (scipy asymptotic).
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        let b = [6.0, 7.0, 8.0, 9.0, 10.0];
        let r = mann_whitney_u(&a, &b);
        assert_eq!(r.u, 0.0);
        assert!(close(r.z, -2.506_718_245_762_049, 1e-9), "{r:?}");
        assert!(close(r.p_value, 0.012_185_780_355_344_818, 1e-10), "{r:?}");
        // Swapping the samples mirrors U and z and keeps p.
        let s = mann_whitney_u(&b, &a);
        assert_eq!(s.u, 25.0);
        assert!(close(s.z, -r.z, 1e-12) && close(s.p_value, r.p_value, 1e-15));
    }

    #[test]
    fn mann_whitney_with_ties() {
        // Pooled sorted: 1a 2a 2a 2b 3a 3b 4b 4b 5a 6b 7a 8b 9b. Midranks:
        // 1 -> 1, 2 -> 3, 3 -> 5.5, 4 -> 7.5, then 9..13. R_a = 1 + 3 + 3 +
        // 5.5 + 9 + 11 = 32.5, U = 32.5 - 21 = 11.5. Ties 3, 2, 2: sum(t^3 - t)
        // = 24 + 6 + 6 = 36. var = 42 / 12 * (14 - 36 / 156) = 48.192308,
        // sigma = 6.942068; z = -(21 - 11.5 - 0.5) / sigma = -1.296444;
        // p = 2 * Phi(-1.296444) = 0.1948227 (same formula as scipy).
        let r = mann_whitney_u(&[1.0, 2.0, 2.0, 3.0, 5.0, 7.0], &[2.0, 3.0, 4.0, 4.0, 6.0, 8.0, 9.0]);
        assert_eq!(r.u, 11.5);
        assert!(close(r.z, -1.296_443_659_097_104_2, 1e-9), "{r:?}");
        assert!(close(r.p_value, 0.194_822_678_819_957_35, 1e-9), "{r:?}");
    }

    #[test]
    fn mann_whitney_degenerate() {
        let r = mann_whitney_u(&[3.0; 4], &[3.0; 6]);
        assert_eq!(r, MannWhitney { u: 12.0, z: 0.0, p_value: 1.0 });
        assert_eq!(mann_whitney_u(&[], &[1.0, 2.0]).p_value, 1.0);
        // |U - mu| = 0.5 is swallowed by the continuity correction: p = 1.
        let r = mann_whitney_u(&[1.0, 4.0], &[2.0, 3.0]);
        assert_eq!((r.u, r.z, r.p_value), (2.0, 0.0, 1.0));
    }

    #[test]
    fn benjamini_hochberg_by_hand() {
        // m = 5, sorted p: .005 .01 .03 .04 .5 -> p*m/rank:
        // .025 .025 .05 .05 .5; running minimum from the top changes nothing.
        let q = benjamini_hochberg(&[0.01, 0.04, 0.03, 0.005, 0.5]);
        let want = [0.025, 0.05, 0.05, 0.025, 0.5];
        assert!(q.iter().zip(want).all(|(a, b)| close(*a, b, 1e-15)), "{q:?}");
        // Monotonicity step: .02 * 2 / 1 = .04 > .03 * 2 / 2 = .03 -> both .03.
        let q = benjamini_hochberg(&[0.03, 0.02]);
        assert!(close(q[0], 0.03, 1e-15) && close(q[1], 0.03, 1e-15), "{q:?}");
        // p = [.6, .9, .01]: .01*3/1 = .03, .6*3/2 = .9, .9*3/3 = .9.
        let q = benjamini_hochberg(&[0.6, 0.9, 0.01]);
        assert!(close(q[0], 0.9, 1e-15) && close(q[1], 0.9, 1e-15) && close(q[2], 0.03, 1e-15));
        // Capped at 1 even for out-of-range input; ties keep equal q.
        assert_eq!(benjamini_hochberg(&[1.5]), vec![1.0]);
        assert_eq!(benjamini_hochberg(&[0.2, 0.2]), vec![0.2, 0.2]);
        assert!(benjamini_hochberg(&[]).is_empty());
    }
}
