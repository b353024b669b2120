//! Numerically stable softmax of one row (the tensor suite's
//! `reduction/op=softmax`, the inference models' attention and the
//! training model's attention run this same code), and its masked form.
//! Exponentials use [`exp_flush_f32`]: a probability below 1.2e-38 is 0
//! here, where a subnormal would slow the `P V` product that follows.

use super::activation::exp_flush_f32;
use super::reduce::{lanes_max, row_sum_map};
use super::simd_dispatch;

/// `row = exp(row - max) / sum`, in place. A row whose maximum is not
/// finite (all `-inf`: every key masked) subtracts 0 instead, and a zero
/// sum scales by 0, so a fully masked row becomes zeros rather than NaN.
#[inline(always)]
fn softmax_in_place(row: &mut [f32]) {
    let m = lanes_max(row);
    let m = if m.is_finite() { m } else { 0.0 };
    row.iter_mut().for_each(|v| *v = exp_flush_f32(*v - m));
    scale_to_one(row);
}

/// Divides by the row's sum (by nothing when the sum is 0).
#[inline(always)]
fn scale_to_one(row: &mut [f32]) {
    let s = row_sum_map(row, |v| v);
    let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
    row.iter_mut().for_each(|v| *v *= inv);
}

simd_dispatch! {
    /// `out = softmax(x)` for one row (see [`softmax_row_inplace`]).
    pub fn softmax_row(out: &mut [f32], x: &[f32]) {
        let m = lanes_max(x);
        let m = if m.is_finite() { m } else { 0.0 };
        let out = &mut out[..x.len()];
        out.iter_mut().zip(x).for_each(|(o, &v)| *o = exp_flush_f32(v - m));
        scale_to_one(out);
    }
}

simd_dispatch! {
    /// Softmax of one row in place; a row of only `-inf` becomes zeros.
    pub fn softmax_row_inplace(row: &mut [f32]) {
        softmax_in_place(row);
    }
}

simd_dispatch! {
    /// One attention row in place: keys `visible..` and keys whose `mask`
    /// byte is 0 (when `mask` is not empty) are masked, then softmax. The
    /// `1/sqrt(d)` scale is already folded into Q. A fully masked row (a
    /// padding query) becomes zeros rather than NaN.
    pub fn masked_softmax_row(row: &mut [f32], mask: &[u8], visible: usize) {
        row[visible..].fill(f32::NEG_INFINITY);
        if !mask.is_empty() {
            for (x, &keep) in row.iter_mut().zip(mask) {
                *x = if keep == 0 { f32::NEG_INFINITY } else { *x };
            }
        }
        softmax_in_place(row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::randn;

    fn reference(x: &[f32]) -> Vec<f64> {
        let m = x.iter().map(|&v| v as f64).fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = x.iter().map(|&v| (v as f64 - m).exp()).collect();
        let z: f64 = e.iter().sum();
        e.iter().map(|v| v / z).collect()
    }

    #[test]
    fn softmax_matches_f64_and_in_place_equals_out_of_place() {
        for n in [1, 4, 37, 1000, 4096 + 5] {
            let x: Vec<f32> = randn(n, n as u64).into_iter().map(|v| 3.0 * v).collect();
            let mut out = vec![f32::NAN; n];
            softmax_row(&mut out, &x);
            for (i, (&g, w)) in out.iter().zip(reference(&x)).enumerate() {
                assert!((g as f64 - w).abs() <= 1e-9 + 1e-5 * w, "n={n} [{i}] {g} vs {w}");
            }
            let mut inplace = x.clone();
            softmax_row_inplace(&mut inplace);
            assert_eq!(out, inplace);
        }
        // Stable for large inputs.
        let x = [1000.0f32, 1001.0, 999.0, -1e30];
        let mut out = [0.0f32; 4];
        softmax_row(&mut out, &x);
        for (&g, w) in out.iter().zip(reference(&x)) {
            assert!((g as f64 - w).abs() <= 1e-9 + 1e-5 * w, "{out:?}");
        }
    }

    /// Moved from the inference suite's ops tests.
    #[test]
    fn masked_softmax_row_matches_f64_and_zeroes_a_fully_masked_row() {
        let x = randn(37, 13);
        let mask: Vec<u8> = (0..37).map(|i| u8::from(i % 5 != 0)).collect();
        let mut row = x.clone();
        masked_softmax_row(&mut row, &mask, 30);
        let keep = |i: usize| i < 30 && mask[i] == 1;
        let m = (0..37).filter(|&i| keep(i)).map(|i| x[i] as f64).fold(f64::MIN, f64::max);
        let z: f64 = (0..37).filter(|&i| keep(i)).map(|i| (x[i] as f64 - m).exp()).sum();
        for i in 0..37 {
            let want = if keep(i) { (x[i] as f64 - m).exp() / z } else { 0.0 };
            assert!((row[i] as f64 - want).abs() < 1e-6, "[{i}] {} vs {want}", row[i]);
        }
        let mut all = x.clone();
        masked_softmax_row(&mut all, &[0; 37], 37);
        assert!(all.iter().all(|&v| v == 0.0));
    }
}
