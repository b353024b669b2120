//! The activations of [`QMatrix`]'s int8 decode: which of llama.cpp's rules
//! each format quantizes them by ([`ActQuant`], the format's `vec_dot_type`
//! in ggml), the order the kernels read the codes in ([`ActLayout`]), and
//! what references need to recompute the kernels' product in f64.

use super::*;

impl QMatrix {
    /// The rule this format's int8 decode quantizes activations by:
    /// llama.cpp's `vec_dot_type` (Q8_K for Q4_K and Q6_K, Q8_1 for Q4_1,
    /// Q8_0 for Q4_0 and Q8_0).
    pub fn act_quant(&self) -> ActQuant {
        match self.format {
            WeightFormat::Q4K | WeightFormat::Q6K => ActQuant::Q8K,
            WeightFormat::Q4_1 => ActQuant::Q8_1,
            _ => ActQuant::Q8_0,
        }
    }

    /// The code order the format's decode kernel reads.
    pub(super) fn act_layout(&self) -> ActLayout {
        match self.format {
            WeightFormat::Q4K => ActLayout::K,
            WeightFormat::Q6K | WeightFormat::Q8_0 => ActLayout::Natural,
            _ => ActLayout::Quad,
        }
    }

    /// The activations a call with `m` tokens multiplies: `x` itself, or its
    /// round trip `x^ = d q` through [`act_quant`](Self::act_quant) when
    /// [`quantizes_activations`](Self::quantizes_activations). References
    /// compare against `x^ W^T` plus [`kernel_correction`](Self::kernel_correction).
    pub fn kernel_activations(&self, x: &[f32], m: usize) -> Vec<f32> {
        if !self.quantizes_activations(m) || m == 0 {
            return x.to_vec();
        }
        let a = Q8Acts::new(x, m, self.cols, self.act_layout(), self.act_quant());
        (0..m).flat_map(|t| a.dequantized(t)).collect()
    }

    /// What a call with `m` tokens adds to `x^ W^T` by design, per token and
    /// row (`m * rows` values): Q4_1's minimum term multiplies Q8_1's f16
    /// block sum `s` (as llama.cpp's does), where `x^` sums to `d sum(q)`, so
    /// the kernels add `sum_b min_b (s_b - d_b sum(q_b))`. Zeros for every
    /// other format, and when the call does not quantize.
    pub fn kernel_correction(&self, x: &[f32], m: usize) -> Vec<f64> {
        let mut out = vec![0.0; m * self.rows];
        let Store::Block(t) = &self.store else { return out };
        if t.format != BlockFormat::Q4_1 || !self.quantizes_activations(m) || m == 0 {
            return out;
        }
        let (k, nb) = (self.cols, self.cols / QK);
        let a = Q8Acts::new(x, m, k, ActLayout::Natural, ActQuant::Q8_1);
        for tok in 0..m {
            let excess: Vec<f64> = (0..nb)
                .map(|b| {
                    let codes = &a.qs[tok * a.stride + b * QK..tok * a.stride + (b + 1) * QK];
                    let sum: i32 = codes.iter().map(|&c| i32::from(c)).sum();
                    f64::from(a.s[tok * nb + b]) - f64::from(a.d[tok * nb + b]) * f64::from(sum)
                })
                .collect();
            for (r, o) in out[tok * self.rows..(tok + 1) * self.rows].iter_mut().enumerate() {
                *o = excess
                    .iter()
                    .zip(&t.mins[r * nb..(r + 1) * nb])
                    .map(|(e, mn)| e * f64::from(mn.to_f32()))
                    .sum();
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::{IsaLevel, with_cap};

    /// The int8 decode of every format that has one, under every ISA cap
    /// (scalar, AVX2, AVX-512 without VNNI, native), so each kernel path the
    /// CPU has (portable, the one-token lane layout, VNNI) is checked
    /// against two f64 references on seeded data:
    ///
    /// 1. the product the kernel computes, `x^ . w^` plus
    ///    [`QMatrix::kernel_correction`], within the f32 rounding of its
    ///    sums: each block term rounds at most 3 times (scale products, the
    ///    multiply-add) and passes through at most `2 nb` additions and a
    ///    16-lane reduction (4), so `(2 nb + 8) u B` with `u = 2^-24` and
    ///    `B` the sum of the magnitudes the kernel adds (the activation times
    ///    the weight's code part and its offset part separately);
    /// 2. the exact activations `x . w^`, within what quantizing them can
    ///    move it: per value half a quantization step (`amax / 254` of its
    ///    block), plus the stored scale's rounding times the largest code
    ///    (127 x its distance from `amax / 127`: f16 for Q8_0 / Q8_1), plus
    ///    the f32 rounding of `x * 127 / amax`, each times `|w^|`; and Q4_1's
    ///    correction, itself within two f16 roundings (`s` and `d`, 2^-11
    ///    relative each) of the block sum `d sum(q)`.
    #[test]
    fn int8_decode_matches_f64_references_under_every_isa_cap() {
        for level in IsaLevel::ALL {
            with_cap(level, check_every_format);
        }
    }

    fn check_every_format() {
        let cases = [
            (WeightFormat::Q8_0, 576),
            (WeightFormat::Q4_0, 576),
            (WeightFormat::Q4_1, 576),
            (WeightFormat::Q4_1, 768),
            (WeightFormat::Q4K, 768),
            (WeightFormat::Q6K, 768),
        ];
        let u = f64::from(f32::EPSILON) / 2.0;
        for (f, k) in cases {
            let n = 20;
            let q = QMatrix::quantize(f, &crate::util::randn(n * k, 7), n, k).unwrap();
            let (wd, off) = (q.dequantize(), offsets(&q));
            let nb = k / QK;
            for m in [1, 3, 8] {
                let x = crate::util::randn(m * k, 100 + m as u64);
                let mut y = vec![f32::NAN; m * n];
                q.matmul(&x, m, &mut y);
                let xh = q.kernel_activations(&x, m);
                let corr = q.kernel_correction(&x, m);
                let slack = step_slack(&q, &x, m);
                let min_bound = q4_1_correction_bound(&q, &x, m);
                for t in 0..m {
                    for j in 0..n {
                        let (xs, xhs, w) =
                            (&x[t * k..(t + 1) * k], &xh[t * k..(t + 1) * k], &wd[j * k..(j + 1) * k]);
                        let c = corr[t * n + j];
                        let (mut r, mut b, mut exact, mut moved) = (c, c.abs(), 0.0f64, 0.0f64);
                        for p in 0..k {
                            let (xv, xq, wv) = (f64::from(xs[p]), f64::from(xhs[p]), f64::from(w[p]));
                            r += xq * wv;
                            b += xq.abs() * (wv.abs() + 2.0 * f64::from(off[j * k + p]));
                            exact += xv * wv;
                            moved += wv.abs() * slack[t * k + p];
                        }
                        let got = f64::from(y[t * n + j]);
                        let tol = (2 * nb + 8) as f64 * u * b;
                        let what =
                            format!("{} k={k} m={m} token {t} row {j} cap {:?}", f.name(), crate::isa::cap());
                        assert!((got - r).abs() <= tol, "{what}: {got} vs kernel product {r} (tol {tol:e})");
                        assert!(
                            c.abs() <= min_bound[t * n + j],
                            "{what}: correction {c} > {}",
                            min_bound[t * n + j]
                        );
                        let tol2 = moved + c.abs() + tol;
                        assert!((got - exact).abs() <= tol2, "{what}: {got} vs exact {exact} (tol {tol2:e})");
                    }
                }
            }
        }
    }

    /// Per weight, the magnitude of the code-independent part the kernels
    /// add separately from the integer dot: Q4_0's `8 d`, Q4_1's minimum,
    /// Q4_K's `dmin m_j`; zero where the offset is integer (Q8_0, Q6_K).
    fn offsets(q: &QMatrix) -> Vec<f32> {
        let (n, k) = (q.rows, q.cols);
        let mut off = vec![0.0f32; n * k];
        match &q.store {
            Store::Block(t) if t.format != BlockFormat::Q8_0 => {
                for (i, o) in off.iter_mut().enumerate() {
                    let b = i / QK;
                    *o = match t.format {
                        BlockFormat::Q4_1 => t.mins[b].to_f32().abs(),
                        _ => 8.0 * t.scales[b].to_f32().abs(),
                    };
                }
            }
            Store::Q4K(t) => {
                for (i, o) in off.iter_mut().enumerate() {
                    let s = i / QK_K;
                    let (_, mins) =
                        crate::kernels::quant::kquant::unpack_scales(&t.scales[12 * s..12 * s + 12]);
                    *o = t.dmin[s].to_f32() * f32::from(mins[(i % QK_K) / QK]);
                }
            }
            _ => {}
        }
        off
    }

    /// Per activation value, the most quantizing it moves it (item 2 of the
    /// test's doc), from the block's `amax` and the stored scale.
    fn step_slack(q: &QMatrix, x: &[f32], m: usize) -> Vec<f64> {
        let (k, bs) = (q.cols, q.act_quant().block());
        let a = Q8Acts::new(x, m, k, ActLayout::Natural, q.act_quant());
        let mut out = vec![0.0; m * k];
        for (blk, (xs, o)) in x.chunks(bs).zip(out.chunks_mut(bs)).enumerate() {
            let amax = xs.iter().fold(0.0f64, |v, &e| v.max(f64::from(e).abs()));
            let step = amax / 127.0;
            let d = f64::from(a.d[blk * bs / QK]).abs();
            o.fill(step / 2.0 + 127.0 * (d - step).abs() + 127.0 * step * f64::from(f32::EPSILON));
        }
        out
    }

    /// Q4_1's correction bound (item 2): per row, `sum_b |min_b| (2^-10
    /// (1 + 2^-10) |d_b sum(q_b)| + 2^-25)`: the f16 rounding of `s` and of
    /// `d` (half an ulp, 2^-11 relative, each; 2^-25 absolute below f16's
    /// normal range), the f32 product before it, and `d` against `d'`.
    fn q4_1_correction_bound(q: &QMatrix, x: &[f32], m: usize) -> Vec<f64> {
        let (k, n, nb) = (q.cols, q.rows, q.cols / QK);
        let mut out = vec![0.0; m * n];
        let Store::Block(t) = &q.store else { return out };
        if t.format != BlockFormat::Q4_1 {
            return out;
        }
        let a = Q8Acts::new(x, m, k, ActLayout::Natural, ActQuant::Q8_1);
        for tok in 0..m {
            for j in 0..n {
                out[tok * n + j] = (0..nb)
                    .map(|b| {
                        let codes = &a.qs[tok * a.stride + b * QK..tok * a.stride + (b + 1) * QK];
                        let sum: i32 = codes.iter().map(|&c| i32::from(c)).sum();
                        let bs = (f64::from(a.d[tok * nb + b]) * f64::from(sum)).abs();
                        f64::from(t.mins[j * nb + b].to_f32()).abs()
                            * (bs * 2f64.powi(-10) * (1.0 + 2f64.powi(-10)) + 2f64.powi(-25))
                    })
                    .sum();
            }
        }
        out
    }
}
