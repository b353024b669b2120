//! Naive reference implementations (mostly in f64) and comparison helpers.
//!
//! Nothing here is timed, and nothing here shares code with the kernels it
//! checks: plain loops, f64 arithmetic and `std` math functions.

use crate::suites::Verification;

/// Entry `(i, j)` of `a[m x k] * b[k x n]` in f64, with `sum_p |a_ip * b_pj|`.
pub(crate) fn dot_entry(a: &[f32], b: &[f32], k: usize, n: usize, i: usize, j: usize) -> (f64, f64) {
    let (mut s, mut abs) = (0.0f64, 0.0f64);
    for p in 0..k {
        let t = a[i * k + p] as f64 * b[p * n + j] as f64;
        s += t;
        abs += t.abs();
    }
    (s, abs)
}

/// Row `i` of `a[m x k] * b[k x n]` in f64, with `sum_p |a_ip * b_pj|` per
/// entry: for every `j` the same sums, in the same order, as [`dot_entry`],
/// but reading B row by row instead of a column at a time (checking a
/// 1x4096x4096 product entry by entry took a quarter of a second on cache
/// misses).
pub(crate) fn dot_row(a: &[f32], b: &[f32], k: usize, n: usize, i: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut s, mut abs) = (vec![0.0f64; n], vec![0.0f64; n]);
    for p in 0..k {
        let x = a[i * k + p] as f64;
        for ((s, abs), &y) in s.iter_mut().zip(abs.iter_mut()).zip(&b[p * n..(p + 1) * n]) {
            let t = x * y as f64;
            *s += t;
            *abs += t.abs();
        }
    }
    (s, abs)
}

/// Forward-error bound for an f32 dot product of length `k` whose terms have
/// absolute sum `abs_sum`. The worst case is `k * eps * abs_sum`; blocked,
/// FMA-based kernels see errors growing like `sqrt(k)`, and we allow eight
/// times that, plus a floor for tiny results.
pub(crate) fn dot_tolerance(k: usize, abs_sum: f64) -> f64 {
    8.0 * (k as f64).sqrt().max(1.0) * f32::EPSILON as f64 * abs_sum + 1e-30
}

/// Compares `got` against f64 `want` with a per-value tolerance `tol`.
/// `labels[i]` names value `i` in the failure message (e.g. `C[3,7]`).
pub(crate) fn compare_bounded(
    reference: impl Into<String>,
    got: &[f32],
    want: &[f64],
    tol: &[f64],
    label: impl Fn(usize) -> String,
) -> Verification {
    let reference = reference.into();
    assert_eq!(got.len(), want.len());
    assert_eq!(got.len(), tol.len());
    let mut worst = 0.0f64;
    let mut worst_ratio = 0.0f64;
    let mut first_bad = None;
    for i in 0..got.len() {
        let err = (got[i] as f64 - want[i]).abs();
        if err.is_nan() || err > tol[i] {
            first_bad.get_or_insert(i);
        }
        if err > worst || err.is_nan() {
            worst = err;
        }
        if err / tol[i] > worst_ratio || err.is_nan() {
            worst_ratio = err / tol[i];
        }
    }
    match first_bad {
        None => Verification {
            passed: true,
            reference,
            max_error: Some(worst),
            detail: format!(
                "{} values within tolerance (worst error {:.3} of its bound)",
                got.len(),
                worst_ratio
            ),
        },
        Some(i) => Verification {
            passed: false,
            reference,
            max_error: Some(worst),
            detail: format!("{}: got {}, reference {}, tolerance {:e}", label(i), got[i], want[i], tol[i]),
        },
    }
}

/// Sum of `x` in f64 and sum of `|x|`.
pub(crate) fn sum_f64(x: &[f32]) -> (f64, f64) {
    x.iter().fold((0.0, 0.0), |(s, a), &v| (s + v as f64, a + (v as f64).abs()))
}

/// Index and value of the first maximum (NaN-free input), by a plain loop.
pub(crate) fn argmax_naive(x: &[f32]) -> (usize, f32) {
    let mut best = (0, x[0]);
    for (i, &v) in x.iter().enumerate() {
        if v > best.1 {
            best = (i, v);
        }
    }
    best
}

/// Softmax of one row in f64.
pub(crate) fn softmax_row_f64(row: &[f32]) -> Vec<f64> {
    let m = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    let e: Vec<f64> = row.iter().map(|&v| (v as f64 - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

/// Layer norm of one row in f64: `(x - mean) / sqrt(var + eps) * gamma + beta`.
pub(crate) fn layernorm_row_f64(row: &[f32], gamma: &[f32], beta: &[f32], eps: f64) -> Vec<f64> {
    let n = row.len() as f64;
    let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
    let rstd = 1.0 / (var + eps).sqrt();
    row.iter()
        .zip(gamma)
        .zip(beta)
        .map(|((&x, &g), &b)| (x as f64 - mean) * rstd * g as f64 + b as f64)
        .collect()
}

/// `a[rows x cols]` transposed into a new `cols x rows` buffer, element by element.
pub(crate) fn transpose_naive(a: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0f32; a.len()];
    for i in 0..rows {
        for j in 0..cols {
            t[j * rows + i] = a[i * cols + j];
        }
    }
    t
}

/// Statistical check that `x` looks like independent standard-normal samples:
/// mean, variance, the fractions inside one and two standard deviations, and
/// the lag-`lag` autocorrelation, each within six standard errors.
pub(crate) fn check_standard_normal(x: &[f32], lag: usize) -> Verification {
    let n = x.len() as f64;
    let reference = format!("N(0,1) moments and coverage over {} samples (6-sigma bounds)", x.len());
    let fail = |detail: String| Verification {
        passed: false,
        reference: reference.clone(),
        max_error: None,
        detail,
    };
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return fail(format!("value {i} is {}", x[i]));
    }
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
    let within = |s: f64| x.iter().filter(|v| (v.abs() as f64) < s).count() as f64 / n;
    let mut checks = vec![
        ("mean", mean, 0.0, 1.0 / n.sqrt()),
        ("variance", var, 1.0, (2.0 / n).sqrt()),
        ("P(|x|<1)", within(1.0), 0.682_689_492, (0.682_689_492f64 * 0.317_310_508 / n).sqrt()),
        ("P(|x|<2)", within(2.0), 0.954_499_736, (0.954_499_736f64 * 0.045_500_264 / n).sqrt()),
    ];
    if lag > 0 && x.len() > lag + 1000 {
        let m = (x.len() - lag) as f64;
        let r = x.iter().zip(&x[lag..]).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>() / m;
        checks.push(("lag autocorrelation", r, 0.0, 1.0 / m.sqrt()));
    }
    let mut worst = 0.0f64;
    for (name, got, want, se) in checks {
        let z = (got - want).abs() / se;
        worst = worst.max(z);
        if z > 6.0 {
            return fail(format!("{name} = {got:.6}, expected {want} (z = {z:.1})"));
        }
    }
    Verification {
        passed: true,
        reference,
        max_error: Some(worst),
        detail: format!("largest deviation {worst:.2} standard errors (bound 6)"),
    }
}
