//! Exact (permutation) p-values for the rank tests, and the Wilcoxon
//! signed-rank test for paired data.
//!
//! Why exact: the normal approximation of the Mann-Whitney U test has a floor
//! at small samples. With 10 samples a side and complete separation it gives
//! `p = 1.8e-4`, where the permutation distribution gives `2 / C(20, 10) =
//! 1.08e-5`. A plan of hundreds of cases then cannot show one case's 2x
//! slowdown, because no p-value is small enough to survive the plan's
//! multiplicity treatment. Below [`EXACT_MAX_N`] pooled values the tests
//! here enumerate the permutation distribution instead (ties included, by
//! doubling midranks to integers), which is what `scipy.stats` calls
//! `method='exact'` (and a permutation test where there are ties).

use statrs::distribution::{ContinuousCDF, Normal};

/// Largest pooled sample size (Mann-Whitney: `n_a + n_b`; Wilcoxon: number
/// of non-zero differences) for which p-values are exact. The enumeration
/// costs `O(N * n_a * N^2)`: about a million steps at 40, instant per case
/// even for plans of hundreds of cases; above it the normal approximation
/// is accurate to far below any threshold in use.
pub const EXACT_MAX_N: usize = 40;

/// Doubled midranks (integers) of `values`, in input order: the smallest
/// value gets 2, ties share the mean of their ranks, times two.
pub(crate) fn doubled_midranks(values: &[f64]) -> Vec<u64> {
    let n = values.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by(|&i, &j| values[i].total_cmp(&values[j]));
    let mut ranks = vec![0u64; n];
    let mut i = 0;
    while i < n {
        let mut j = i + 1;
        while j < n && values[order[j]] == values[order[i]] {
            j += 1;
        }
        // 1-based ranks i+1 ..= j share (i + 1 + j) / 2; doubled: i + 1 + j.
        for &k in &order[i..j] {
            ranks[k] = (i + 1 + j) as u64;
        }
        i = j;
    }
    ranks
}

/// Two-sided permutation p-value of "the first `n_a` of `pooled` have the
/// rank sum they have", exact: the fraction of all `C(N, n_a)` ways to
/// choose `n_a` of the pooled values whose doubled rank sum lies at least as
/// far from its mean as the observed one. `None` when `N` exceeds
/// [`EXACT_MAX_N`] or a side is empty.
pub fn mann_whitney_exact_p(a: &[f64], b: &[f64]) -> Option<f64> {
    let (na, n) = (a.len(), a.len() + b.len());
    if na == 0 || b.is_empty() || n > EXACT_MAX_N {
        return None;
    }
    let pooled: Vec<f64> = a.iter().chain(b).copied().collect();
    let ranks = doubled_midranks(&pooled);
    let observed: u64 = ranks[..na].iter().sum();
    let total: u64 = ranks.iter().sum();
    let max_sum = total as usize;
    // counts[k][s]: ways to choose k of the values seen so far with doubled
    // rank sum s. Only additions of non-negative counts: no cancellation.
    let mut counts = vec![vec![0f64; max_sum + 1]; na + 1];
    counts[0][0] = 1.0;
    for &r in &ranks {
        let r = r as usize;
        for k in (1..=na).rev() {
            let (lower, upper) = counts.split_at_mut(k);
            let (from, to) = (&lower[k - 1], &mut upper[0]);
            for s in (r..=max_sum).rev() {
                to[s] += from[s - r];
            }
        }
    }
    // E[sum] = n_a * total / N; compare |s - mean| in units of N to stay
    // in integers.
    let dev = |s: u64| (s as i128 * n as i128 - na as i128 * total as i128).abs();
    let threshold = dev(observed);
    let row = &counts[na];
    let all: f64 = row.iter().sum();
    let extreme: f64 =
        row.iter().enumerate().filter(|(s, _)| dev(*s as u64) >= threshold).map(|(_, c)| c).sum();
    Some((extreme / all).min(1.0))
}

/// Result of a Wilcoxon signed-rank test (see [`wilcoxon_signed_rank`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SignedRank {
    /// Sum of the ranks of the positive differences (midranks for ties).
    pub w_plus: f64,
    /// Non-zero differences used.
    pub n: usize,
    /// Two-sided p-value: exact below [`EXACT_MAX_N`], else normal with tie
    /// and continuity corrections.
    pub p_value: f64,
}

/// Two-sided Wilcoxon signed-rank test that the differences `d` are
/// centred on zero. Zeros are dropped (Wilcoxon's convention, scipy's
/// `zero_method='wilcox'`); ties among `|d|` share midranks. Fewer than one
/// non-zero difference gives `p = 1`.
pub fn wilcoxon_signed_rank(d: &[f64]) -> SignedRank {
    let nonzero: Vec<f64> = d.iter().copied().filter(|v| *v != 0.0 && v.is_finite()).collect();
    let n = nonzero.len();
    if n == 0 {
        return SignedRank { w_plus: 0.0, n: 0, p_value: 1.0 };
    }
    let abs: Vec<f64> = nonzero.iter().map(|v| v.abs()).collect();
    let ranks = doubled_midranks(&abs);
    let w_plus2: u64 = ranks.iter().zip(&nonzero).filter(|(_, v)| **v > 0.0).map(|(r, _)| *r).sum();
    let w_plus = w_plus2 as f64 / 2.0;
    let p_value = if n <= EXACT_MAX_N {
        signed_rank_exact_p(&ranks, w_plus2)
    } else {
        let nf = n as f64;
        let mean = nf * (nf + 1.0) / 4.0;
        // Tie correction: sum over groups of equal |d| of (t^3 - t) / 48.
        let mut sorted = ranks.clone();
        sorted.sort_unstable();
        let mut tie = 0.0;
        let mut i = 0;
        while i < n {
            let j = i + sorted[i..].iter().take_while(|r| **r == sorted[i]).count();
            let t = (j - i) as f64;
            tie += t * t * t - t;
            i = j;
        }
        let var = nf * (nf + 1.0) * (2.0 * nf + 1.0) / 24.0 - tie / 48.0;
        if var <= 0.0 {
            1.0
        } else {
            let diff = w_plus - mean;
            let z = (diff.abs() - 0.5).max(0.0) / var.sqrt();
            (2.0 * Normal::standard().sf(z)).min(1.0)
        }
    };
    SignedRank { w_plus, n, p_value }
}

/// Exact two-sided p of the signed-rank sum: under the null each doubled
/// rank is added with probability 1/2, independently.
fn signed_rank_exact_p(ranks: &[u64], observed: u64) -> f64 {
    let total: u64 = ranks.iter().sum();
    let mut counts = vec![0f64; total as usize + 1];
    counts[0] = 1.0;
    let mut reach = 0usize;
    for &r in ranks {
        let r = r as usize;
        reach += r;
        for s in (r..=reach).rev() {
            counts[s] += counts[s - r];
        }
    }
    // Mean of the doubled sum is total / 2; compare 2 * |s - mean|.
    let dev = |s: u64| (2 * s as i128 - total as i128).abs();
    let threshold = dev(observed);
    let all: f64 = counts.iter().sum();
    let extreme: f64 =
        counts.iter().enumerate().filter(|(s, _)| dev(*s as u64) >= threshold).map(|(_, c)| c).sum();
    (extreme / all).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    #[test]
    fn complete_separation_is_two_over_binomial() {
        let a: Vec<f64> = (0..10).map(f64::from).collect();
        let b: Vec<f64> = (10..20).map(f64::from).collect();
        // scipy.stats.mannwhitneyu(a, b, method='exact').pvalue = 1.0825088224469994e-05
        let p = mann_whitney_exact_p(&a, &b).unwrap();
        assert!(close(p, 2.0 / 184_756.0, 1e-12), "{p}");
        assert!(close(p, 1.082_508_822_446_999_4e-5, 1e-12), "{p}");
        assert_eq!(mann_whitney_exact_p(&b, &a), Some(p));
    }

    #[test]
    fn exact_matches_scipy_without_ties() {
        // scipy docs example (males, females): method='exact' -> 0.11111111111111112
        let p = mann_whitney_exact_p(&[19.0, 22.0, 16.0, 29.0, 24.0], &[20.0, 11.0, 17.0, 12.0]).unwrap();
        assert!(close(p, 0.111_111_111_111_111_12, 1e-12), "{p}");
        // Interleaved samples: every permutation at least as extreme -> p = 1.
        let p = mann_whitney_exact_p(&[1.0, 4.0], &[2.0, 3.0]).unwrap();
        assert!(close(p, 1.0, 1e-15), "{p}");
    }

    #[test]
    fn exact_with_ties_counts_by_hand() {
        // a = [1, 2], b = [2, 3]: doubled midranks 2, 5, 5, 8; observed sum
        // 7 (mean 10). The six 2-subsets sum to 7, 7, 10, 10, 13, 13: four
        // are as far from the mean as 7 is -> p = 4 / 6.
        let p = mann_whitney_exact_p(&[1.0, 2.0], &[2.0, 3.0]).unwrap();
        assert!(close(p, 4.0 / 6.0, 1e-15), "{p}");
        // All tied: nothing can be more extreme than nothing -> p = 1.
        assert_eq!(mann_whitney_exact_p(&[3.0; 4], &[3.0; 5]), Some(1.0));
        assert_eq!(mann_whitney_exact_p(&[], &[1.0]), None);
        assert_eq!(mann_whitney_exact_p(&[0.0; 21], &[1.0; 20]), None);
    }

    #[test]
    fn signed_rank_exact_and_asymptotic() {
        // scipy.stats.wilcoxon(d) for d = 1..10 all positive: exact p = 2 / 1024.
        let d: Vec<f64> = (1..=10).map(f64::from).collect();
        let r = wilcoxon_signed_rank(&d);
        assert_eq!((r.w_plus, r.n), (55.0, 10));
        assert!(close(r.p_value, 2.0 / 1024.0, 1e-12), "{r:?}");
        // Symmetric differences: p = 1; zeros are dropped.
        let r = wilcoxon_signed_rank(&[1.0, -1.0, 2.0, -2.0, 0.0]);
        assert_eq!(r.n, 4);
        assert!(close(r.p_value, 1.0, 1e-12), "{r:?}");
        // scipy.stats.wilcoxon([1,2,3,-4,5,6,7,8,9,10]) exact: W- = 4; the
        // subsets of 1..10 summing to at most 4 are {}, 1, 2, 3, 4, 12, 13:
        // p = 2 * 7 / 1024 = 0.013671875.
        let r = wilcoxon_signed_rank(&[1.0, 2.0, 3.0, -4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]);
        assert!(close(r.p_value, 0.013_671_875, 1e-12), "{r:?}");
        // Large n uses the normal approximation: 50 positive differences
        // give W+ = 1275, mean 637.5, var 50*51*101/24 = 10731.25:
        // z = (637.5 - 0.5) / 103.592 = 6.149 -> p ~ 7.8e-10.
        let d: Vec<f64> = (1..=50).map(f64::from).collect();
        let r = wilcoxon_signed_rank(&d);
        let z = 637.0 / 10_731.25f64.sqrt();
        assert!(close(r.p_value, 2.0 * Normal::standard().sf(z), 1e-12), "{r:?}");
        assert_eq!(wilcoxon_signed_rank(&[]).p_value, 1.0);
    }
}
