//! Tests of the change-point detector (kept apart so the method stays short).

use super::*;

fn noisy(levels: &[(usize, f64)], noise: f64, seed: u64) -> Vec<f64> {
    let z = crate::util::randn(levels.iter().map(|l| l.0).sum(), seed);
    let base = levels.iter().flat_map(|&(len, level)| std::iter::repeat_n(level, len));
    base.zip(z).map(|(level, z)| level * (1.0 + noise * f64::from(z))).collect()
}

#[test]
fn statistic_is_the_standardized_difference_of_means() {
    let x = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0];
    let mean = x.iter().sum::<f64>() / x.len() as f64;
    let centered: Vec<f64> = x.iter().map(|v| v - mean).collect();
    for (i, j) in [(0, 4), (0, 9), (2, 7), (5, 11), (3, 5)] {
        let inside = &x[i..j];
        let outside: Vec<f64> = x[..i].iter().chain(&x[j..]).copied().collect();
        let (m, r) = (inside.len() as f64, outside.len() as f64);
        let diff = crate::stats::mean(inside) - crate::stats::mean(&outside);
        let expected = diff.abs() / (1.0 / m + 1.0 / r).sqrt();
        let got = shift_stat(centered[i..j].iter().sum(), j - i, x.len());
        assert!((got - expected).abs() < 1e-9, "[{i},{j}): {got} vs {expected}");
    }
    assert_eq!(scan(&centered, Scan::Splits, shift_stat).1, 0);
    let (_, i, j) = scan(&centered, Scan::Intervals, shift_stat);
    assert!(i >= MIN_SEGMENT && j - i >= MIN_SEGMENT && x.len() - j >= MIN_SEGMENT);
}

#[test]
fn winsorizing_tames_a_wild_run() {
    let mut x = vec![100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 100.0];
    x.push(1000.0);
    let w = winsorized(&x);
    assert!(w[7] < 110.0 && w[..7] == x[..7], "{w:?}");
    assert_eq!(winsorized(&[5.0, 5.0, 5.0, 9.0]), [5.0, 5.0, 5.0, 9.0]);
}

#[test]
fn effect_survives_leaving_one_run_out() {
    assert!((effect(&[100.0, 100.0, 100.0], &[115.0, 116.0, 114.0]) - 0.145).abs() < 1e-9);
    assert!(effect(&[100.0, 101.0, 99.0], &[400.0, 101.0]) < 0.01);
    assert!((effect(&[100.0, 100.0], &[90.0, 80.0]) - 0.1).abs() < 1e-9);
    assert_eq!(effect(&[0.0, 0.0], &[0.0, 0.0]), 0.0);
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
    // Default permutations: with 199, p could never get below alpha / 2
    // and the test would pass vacuously. Early stopping keeps it fast.
    let flagged = (0..100u64)
        .filter(|&t| {
            !detect(&noisy(&[(30, 100.0)], 0.02, 1000 + t), DEFAULT_ALPHA, DEFAULT_MIN_EFFECT, t).is_empty()
        })
        .count();
    assert!(flagged <= 5, "{flagged} of 100 constant series flagged");
}

#[test]
fn one_wild_run_is_rarely_a_step() {
    // The false-alarm bound is alpha whatever the distribution; a 4x run
    // next to an end with a high neighbour can still, rarely, make one.
    let flagged = (0..100u64)
        .filter(|&t| {
            let mut x = noisy(&[(30, 100.0)], 0.02, 500 + t);
            x[(t as usize * 7) % 30] = 400.0;
            !detect(&x, DEFAULT_ALPHA, DEFAULT_MIN_EFFECT, t).is_empty()
        })
        .count();
    assert!(flagged <= 3, "{flagged} of 100 series with one wild run flagged");
}

#[test]
fn finds_a_recent_regression() {
    let x = noisy(&[(26, 100.0), (4, 115.0)], 0.02, 21);
    let found = detect(&x, DEFAULT_ALPHA, DEFAULT_MIN_EFFECT, 3);
    assert_eq!(found.iter().map(|c| c.index).collect::<Vec<_>>(), [26], "{found:?}");
    assert!(found[0].ratio > 1.1);
}

#[test]
fn finds_a_single_step() {
    let x = noisy(&[(12, 100.0), (18, 115.0)], 0.02, 7);
    let found = detect(&x, DEFAULT_ALPHA, DEFAULT_MIN_EFFECT, 3);
    assert_eq!(found.len(), 1, "{found:?}");
    let cp = found[0];
    assert!(cp.index.abs_diff(12) <= 1, "{cp:?}");
    assert!((cp.ratio - 1.15).abs() < 0.03 && cp.p_value < DEFAULT_ALPHA, "{cp:?}");
    // Bonferroni-adjusted: twice the smallest permutation p-value at least.
    assert!(cp.p_value >= 2.0 / (DEFAULT_PERMUTATIONS + 1) as f64);
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
