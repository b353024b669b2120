//! Row normalisations: LayerNorm (the tensor suite's `reduction/op=layernorm`,
//! the BERT/GPT-2 models and the training model run this same code) and
//! RMSNorm (LLaMA).
//!
//! Row kernels take one row; callers choose how to spread rows over
//! threads. The statistics are two-pass (mean, then centred variance,
//! neither stored) with the lane sums of [`super::reduce`].

use super::reduce::row_sum_map;
use super::simd_dispatch;

/// `(mean, 1 / sqrt(var + eps))` of a row, two-pass.
#[inline(always)]
fn mean_rstd(x: &[f32], eps: f32) -> (f32, f32) {
    let n = x.len() as f32;
    let mean = row_sum_map(x, |v| v) / n;
    let var = row_sum_map(x, |v| (v - mean) * (v - mean)) / n;
    (mean, 1.0 / (var + eps).sqrt())
}

simd_dispatch! {
    /// LayerNorm of one row: `out = (x - mean) / sqrt(var + eps) * gamma + beta`.
    /// Returns `(mean, 1 / sqrt(var + eps))`, which a training backward needs.
    pub fn layer_norm_row(out: &mut [f32], x: &[f32], gamma: &[f32], beta: &[f32], eps: f32) -> (f32, f32) {
        let (mean, rstd) = mean_rstd(x, eps);
        let (out, gamma, beta) = (&mut out[..x.len()], &gamma[..x.len()], &beta[..x.len()]);
        out.iter_mut().zip(x).zip(gamma).zip(beta).for_each(|(((o, &v), &g), &b)| *o = (v - mean) * rstd * g + b);
        (mean, rstd)
    }
}

simd_dispatch! {
    /// [`layer_norm_row`] in place (a model's residual stream). Writes
    /// `min(len)` of the three slices, as the models always did.
    pub fn layer_norm_row_inplace(r: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
        let (mean, rstd) = mean_rstd(r, eps);
        r.iter_mut().zip(gamma).zip(beta).for_each(|((v, &g), &b)| *v = (*v - mean) * rstd * g + b);
    }
}

simd_dispatch! {
    /// RMSNorm of one row in place: `x / sqrt(mean(x^2) + eps) * w`.
    pub fn rms_norm_row_inplace(r: &mut [f32], w: &[f32], eps: f32) {
        let ms = row_sum_map(r, |v| v * v) / r.len() as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        r.iter_mut().zip(w).for_each(|(v, &g)| *v *= inv * g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::{randn, uniform};

    /// f64 LayerNorm and RMSNorm of one row.
    fn reference(x: &[f32], g: &[f32], b: &[f32], eps: f64) -> (Vec<f64>, Vec<f64>) {
        let n = x.len() as f64;
        let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        let ms = x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / n;
        let ln = (0..x.len()).map(|i| (x[i] as f64 - mean) / (var + eps).sqrt() * g[i] as f64 + b[i] as f64);
        let rms = (0..x.len()).map(|i| x[i] as f64 / (ms + eps).sqrt() * g[i] as f64);
        (ln.collect(), rms.collect())
    }

    fn close(got: &[f32], want: &[f64], atol: f64, rtol: f64) {
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!((g as f64 - w).abs() <= atol + rtol * w.abs(), "[{i}] {g} vs {w}");
        }
    }

    #[test]
    fn norms_match_f64_on_odd_widths_and_in_place_equals_out_of_place() {
        for n in [1, 37, 768, 4096 + 33] {
            let x: Vec<f32> = randn(n, n as u64).into_iter().map(|v| 3.0 * v + 1.0).collect();
            let g = uniform(n, 0.5, 1.5, 1);
            let b = randn(n, 2);
            let (ln, rms) = reference(&x, &g, &b, 1e-5);
            let mut out = vec![f32::NAN; n];
            let (mean, rstd) = layer_norm_row(&mut out, &x, &g, &b, 1e-5);
            close(&out, &ln, 2e-5, 1e-5);
            let m64 = x.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
            let v64 = x.iter().map(|&v| (v as f64 - m64).powi(2)).sum::<f64>() / n as f64;
            close(&[mean, rstd], &[m64, 1.0 / (v64 + 1e-5).sqrt()], 1e-6, 1e-5);
            let mut inplace = x.clone();
            layer_norm_row_inplace(&mut inplace, &g, &b, 1e-5);
            assert_eq!(out, inplace, "n={n}");
            let mut r = x.clone();
            rms_norm_row_inplace(&mut r, &g, 1e-5);
            close(&r, &rms, 1e-6, 1e-5);
        }
    }
}
