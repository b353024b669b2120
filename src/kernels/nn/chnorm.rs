//! Normalisations over channels of an NCHW tensor (`n x c x spatial`):
//! batch norm in its inference form (running statistics folded into one
//! per-channel scale and shift) and its training form (batch statistics over
//! N and the spatial extent, then the running statistics updated as PyTorch
//! does: momentum 0.1, unbiased variance), and group norm (statistics over
//! each image's group of `c/groups` channels; instance norm is group norm
//! with one channel per group), each with a per-channel affine. Statistics
//! are two-pass (mean, then squared deviations) in f64 accumulators per
//! plane, so large planes lose no precision.

use crate::kernels::SendPtr;
use rayon::prelude::*;

/// `(sum, sum of squared deviations from mean)` of `x` in f64.
fn sums(x: &[f32]) -> (f64, f64) {
    let s: f64 = x.iter().map(|&v| v as f64).sum();
    let m = s / x.len() as f64;
    (s, x.iter().map(|&v| (v as f64 - m) * (v as f64 - m)).sum())
}

/// `out[i] = x[i] * scale + shift` over one plane.
fn affine(out: &mut [f32], x: &[f32], scale: f32, shift: f32) {
    out.iter_mut().zip(x).for_each(|(o, &v)| *o = v.mul_add(scale, shift));
}

/// Applies per-(image, channel) `scale`/`shift` (`c` of each, indexed by
/// channel) to every plane, parallel over planes.
fn apply(out: &mut [f32], x: &[f32], c: usize, sp: usize, ss: impl Fn(usize, usize) -> (f32, f32) + Sync) {
    out.par_chunks_mut(sp).zip(x.par_chunks(sp)).enumerate().for_each(|(p, (o, x))| {
        let (scale, shift) = ss(p / c, p % c);
        affine(o, x, scale, shift);
    });
}

/// Batch norm, inference form: `(x - mean) / sqrt(var + eps) * gamma + beta`
/// with the running `mean` and `var`.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_infer(
    out: &mut [f32],
    x: &[f32],
    (c, sp): (usize, usize),
    mean: &[f32],
    var: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) {
    let scale: Vec<f32> = (0..c).map(|i| gamma[i] / (var[i] + eps).sqrt()).collect();
    let shift: Vec<f32> = (0..c).map(|i| beta[i] - mean[i] * scale[i]).collect();
    apply(out, x, c, sp, |_, ch| (scale[ch], shift[ch]));
}

/// Batch norm, training form: normalises with the batch's per-channel mean
/// and biased variance and updates `running_mean`/`running_var` (momentum
/// 0.1, unbiased variance), as `torch.nn.BatchNorm2d` in training mode.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_train(
    out: &mut [f32],
    x: &[f32],
    (n, c, sp): (usize, usize, usize),
    running_mean: &mut [f32],
    running_var: &mut [f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) {
    // Per channel: mean over its n planes, then squared deviations.
    let stats: Vec<(f64, f64)> = (0..c)
        .into_par_iter()
        .map(|ch| {
            let planes = (0..n).map(|i| &x[(i * c + ch) * sp..][..sp]);
            let count = (n * sp) as f64;
            let mean = planes.clone().map(|p| p.iter().map(|&v| v as f64).sum::<f64>()).sum::<f64>() / count;
            let ss: f64 = planes.map(|p| p.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>()).sum();
            (mean, ss / count)
        })
        .collect();
    let count = (n * sp) as f64;
    for (ch, &(m, v)) in stats.iter().enumerate() {
        running_mean[ch] = (0.9 * running_mean[ch] as f64 + 0.1 * m) as f32;
        let unbiased = if count > 1.0 { v * count / (count - 1.0) } else { v };
        running_var[ch] = (0.9 * running_var[ch] as f64 + 0.1 * unbiased) as f32;
    }
    let ss: Vec<(f32, f32)> = stats
        .iter()
        .enumerate()
        .map(|(ch, &(m, v))| {
            let inv = 1.0 / (v + eps as f64).sqrt();
            let scale = gamma[ch] as f64 * inv;
            (scale as f32, (beta[ch] as f64 - m * scale) as f32)
        })
        .collect();
    apply(out, x, c, sp, |_, ch| ss[ch]);
}

/// Group norm: per image, statistics over each group of `c / groups`
/// consecutive channels, then the per-channel affine. `groups == c` is
/// instance norm.
#[allow(clippy::too_many_arguments)]
pub fn group_norm(
    out: &mut [f32],
    x: &[f32],
    (c, sp): (usize, usize),
    groups: usize,
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) {
    let len = c / groups * sp;
    let dst = SendPtr(out.as_mut_ptr());
    (0..x.len() / len).into_par_iter().for_each(|blk| {
        let xs = &x[blk * len..][..len];
        // SAFETY: each task writes only its group's `len` floats of `out`,
        // disjoint from every other task's; `out` outlives the loop.
        let o = unsafe { std::slice::from_raw_parts_mut(dst.get().add(blk * len), len) };
        let (s, ss) = sums(xs);
        let mean = s / len as f64;
        let inv = 1.0 / (ss / len as f64 + eps as f64).sqrt();
        let ch0 = blk % groups * (c / groups);
        for (j, (o, xs)) in o.chunks_mut(sp).zip(xs.chunks(sp)).enumerate() {
            let scale = gamma[ch0 + j] as f64 * inv;
            affine(o, xs, scale as f32, (beta[ch0 + j] as f64 - mean * scale) as f32);
        }
    });
}

/// The normalised value of every element of `(image, channel)` plane `p` in
/// f64, given the mean and variance its statistics come from.
pub fn normalise_plane_f64(x: &[f32], mean: f64, var: f64, gamma: f32, beta: f32, eps: f32) -> Vec<f64> {
    x.iter().map(|&v| (v as f64 - mean) / (var + eps as f64).sqrt() * gamma as f64 + beta as f64).collect()
}

/// Mean and biased variance of the values in `planes` in f64 (plain sums).
pub fn stats_f64<'a>(planes: impl Iterator<Item = &'a [f32]> + Clone) -> (f64, f64) {
    let count: usize = planes.clone().map(|p| p.len()).sum();
    let mean = planes.clone().flatten().map(|&v| v as f64).sum::<f64>() / count as f64;
    (mean, planes.flatten().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / count as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: &[f32], want: &[f64]) {
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!((g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()), "[{i}] {g} vs {w}");
        }
    }

    #[test]
    fn batch_norm_both_forms_and_group_norm_match_f64() {
        let (n, c, sp) = (3, 4, 10);
        let x: Vec<f32> = crate::util::randn(n * c * sp, 5).iter().map(|v| v * 2.0 + 0.5).collect();
        let gamma = crate::util::uniform(c, 0.5, 1.5, 6);
        let beta = crate::util::randn(c, 7);
        let plane = |i: usize, ch: usize| &x[(i * c + ch) * sp..][..sp];
        // Training form: batch statistics, running statistics updated.
        let (mut rm, mut rv) = (vec![0.0f32; c], vec![1.0f32; c]);
        let mut out = vec![f32::NAN; x.len()];
        batch_norm_train(&mut out, &x, (n, c, sp), &mut rm, &mut rv, &gamma, &beta, 1e-5);
        for ch in 0..c {
            let (m, v) = stats_f64((0..n).map(|i| plane(i, ch)));
            assert!((rm[ch] as f64 - 0.1 * m).abs() < 1e-6);
            let unbiased = v * (n * sp) as f64 / (n * sp - 1) as f64;
            assert!((rv[ch] as f64 - (0.9 + 0.1 * unbiased)).abs() < 1e-5);
            for i in 0..n {
                close(
                    &out[(i * c + ch) * sp..][..sp],
                    &normalise_plane_f64(plane(i, ch), m, v, gamma[ch], beta[ch], 1e-5),
                );
            }
        }
        // Inference form with those running statistics.
        batch_norm_infer(&mut out, &x, (c, sp), &rm, &rv, &gamma, &beta, 1e-5);
        for ch in 0..c {
            let want =
                normalise_plane_f64(plane(1, ch), rm[ch] as f64, rv[ch] as f64, gamma[ch], beta[ch], 1e-5);
            close(&out[(c + ch) * sp..][..sp], &want);
        }
        // Group norm (2 groups) and instance norm (c groups).
        for groups in [2, c] {
            group_norm(&mut out, &x, (c, sp), groups, &gamma, &beta, 1e-5);
            let cg = c / groups;
            for i in 0..n {
                for ch in 0..c {
                    let g0 = ch / cg * cg;
                    let (m, v) = stats_f64((g0..g0 + cg).map(|k| plane(i, k)));
                    let want = normalise_plane_f64(plane(i, ch), m, v, gamma[ch], beta[ch], 1e-5);
                    close(&out[(i * c + ch) * sp..][..sp], &want);
                }
            }
        }
    }
}
