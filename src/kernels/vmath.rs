//! AVX2 + FMA twins of [`super::activation`]'s `exp`, `ln`, `tanh`,
//! sigmoid and tanh-GELU over slices, 8 lanes at a time.
//!
//! Why: the crate's plain loops over the scalar functions vectorise for
//! AVX2 (`simd_dispatch!`), but Rust never contracts `a * b + c` into an
//! FMA, so each polynomial step is two dependent instructions, and at 16M
//! elements these maps ran compute-bound at 2.5-5.5x the time of a
//! memory-bound `relu` at the AVX2 cap (the AVX-512 build halves the count
//! with its 16 lanes). Here every such step is one `vfmadd`, with the same
//! constants, range reductions and special cases as the scalar functions
//! (NaN, +-inf, overflow to inf, gradual underflow of `exp`, subnormal
//! inputs of `ln`); results differ from the scalar ones only by the FMAs'
//! rounding, and the tests hold both to the same f64 references.

use super::activation::{exp_f32, gelu_f32, ln_f32, sigmoid_f32, tanh_f32};

/// A function this module maps over a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VOp {
    /// [`exp_f32`].
    Exp,
    /// [`ln_f32`].
    Ln,
    /// [`tanh_f32`].
    Tanh,
    /// [`sigmoid_f32`].
    Sigmoid,
    /// [`gelu_f32`] (tanh form).
    Gelu,
}

impl VOp {
    /// Every op.
    pub const ALL: [VOp; 5] = [Self::Exp, Self::Ln, Self::Tanh, Self::Sigmoid, Self::Gelu];

    /// The scalar function (the tail of a slice, and the reference twin).
    pub fn scalar(self) -> fn(f32) -> f32 {
        match self {
            Self::Exp => exp_f32,
            Self::Ln => ln_f32,
            Self::Tanh => tanh_f32,
            Self::Sigmoid => sigmoid_f32,
            Self::Gelu => gelu_f32,
        }
    }
}

/// Whether [`map`] runs the AVX2 kernels now: AVX2, FMA and F16C under the
/// ISA cap, and no AVX-512 (whose 16-lane build of the plain loops is
/// faster than these 8-lane ones).
pub fn avx2_path() -> bool {
    crate::isa::has_all(&super::simd::V3) && !crate::isa::has_all(&super::simd::V4)
}

/// What a map over a slice runs now, for `sysinfo --kernels`: this
/// module's AVX2+FMA kernels where [`avx2_path`] holds, else the callers'
/// plain loop as `simd_dispatch!` compiled it for the widest level the CPU
/// (under the cap) allows: AVX-512, or the baseline x86-64 (SSE2) build.
pub fn path_name() -> &'static str {
    if avx2_path() {
        "vmath avx2+fma (8 lanes)"
    } else if crate::isa::has_all(&super::simd::V4) {
        "plain loop, avx512 build (16 lanes)"
    } else {
        "plain loop, baseline build (sse2)"
    }
}

/// `out[i] = op(x[i])` with the AVX2 kernels, 8 lanes at a time, the last
/// `len % 8` values through the scalar function. Returns false, writing
/// nothing, when the CPU (under the cap) lacks AVX2, FMA or F16C.
///
/// # Panics
/// When `x` is shorter than `out`.
pub fn map_avx2(op: VOp, out: &mut [f32], x: &[f32]) -> bool {
    let x = &x[..out.len()];
    #[cfg(target_arch = "x86_64")]
    if crate::isa::has_all(&super::simd::V3) {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        unsafe { x86::map(op, out, x) };
        return true;
    }
    false
}

/// [`map_avx2`] where [`avx2_path`] holds, else false (the caller runs its
/// own loop).
pub fn map(op: VOp, out: &mut [f32], x: &[f32]) -> bool {
    avx2_path() && map_avx2(op, out, x)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::VOp;
    use crate::kernels::activation::GELU_C;
    use std::arch::x86_64::*;

    #[inline(always)]
    fn splat(v: f32) -> __m256 {
        // SAFETY: the callers run with AVX enabled.
        unsafe { _mm256_set1_ps(v) }
    }

    /// `e^x` as `exp_f32`: clamp, round-to-nearest reduction, the degree-6
    /// polynomial, `2^n` as two exponent-field factors; NaN passes through.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn exp(x: __m256) -> __m256 {
        // max/min return their second operand for a NaN, so xc is never NaN.
        let xc = _mm256_min_ps(_mm256_max_ps(x, splat(-104.0)), splat(89.0));
        let v = _mm256_mul_ps(xc, splat(std::f32::consts::LOG2_E));
        let n = _mm256_sub_ps(_mm256_add_ps(v, splat(12_582_912.0)), splat(12_582_912.0));
        let r = _mm256_fnmadd_ps(n, splat(0.693_359_4), xc);
        let r = _mm256_fnmadd_ps(n, splat(-2.121_944_4e-4), r);
        let mut p = splat(1.987_569_1e-4);
        for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 5e-1] {
            p = _mm256_fmadd_ps(p, r, splat(c));
        }
        let y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, splat(1.0)));
        let ni = _mm256_cvttps_epi32(n);
        let h = _mm256_srai_epi32(ni, 1);
        let bias = _mm256_set1_epi32(127);
        let s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
        let s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), bias), 23));
        let e = _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
        _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q))
    }

    /// `e^x` as `exp_flush_f32`: one exponent-field scale, 0 below -87.34.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn exp_flush(x: __m256) -> __m256 {
        const LO: f32 = -87.336_55;
        const MAGIC: f32 = 12_582_912.0;
        let xc = _mm256_min_ps(_mm256_max_ps(x, splat(LO)), splat(88.376_26));
        let t = _mm256_add_ps(_mm256_mul_ps(xc, splat(std::f32::consts::LOG2_E)), splat(MAGIC));
        let n = _mm256_sub_ps(t, splat(MAGIC));
        let r = _mm256_fnmadd_ps(n, splat(0.693_359_4), xc);
        let r = _mm256_fnmadd_ps(n, splat(-2.121_944_4e-4), r);
        let mut p = splat(1.987_569_1e-4);
        for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5] {
            p = _mm256_fmadd_ps(p, r, splat(c));
        }
        let y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, splat(1.0)));
        let ni = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B40_0000));
        let scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23));
        let v = _mm256_mul_ps(y, scale);
        let v = _mm256_andnot_ps(_mm256_cmp_ps(x, splat(LO), _CMP_LT_OQ), v);
        _mm256_blendv_ps(v, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q))
    }

    /// `ln x` as `ln_f32`: subnormals rescaled by 2^23, mantissa in
    /// `[sqrt(1/2), sqrt(2))`, the degree-9 polynomial; 0 gives -inf, +inf
    /// itself, negatives and NaN NaN.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn ln(x: __m256) -> __m256 {
        let sub = _mm256_cmp_ps(x, splat(f32::MIN_POSITIVE), _CMP_LT_OQ);
        let xs = _mm256_blendv_ps(x, _mm256_mul_ps(x, splat(8_388_608.0)), sub);
        let bits = _mm256_castps_si256(xs);
        let ex = _mm256_and_si256(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(0xff));
        let sub_adj = _mm256_and_si256(_mm256_castps_si256(sub), _mm256_set1_epi32(23));
        let e = _mm256_sub_epi32(_mm256_sub_epi32(ex, _mm256_set1_epi32(126)), sub_adj);
        let m = _mm256_castsi256_ps(_mm256_or_si256(
            _mm256_and_si256(bits, _mm256_set1_epi32(0x007f_ffff)),
            _mm256_set1_epi32(0x3f00_0000),
        ));
        let small = _mm256_cmp_ps(m, splat(std::f32::consts::FRAC_1_SQRT_2), _CMP_LT_OQ);
        // small is all ones (-1 as i32) where true: adding it subtracts 1.
        let e = _mm256_add_epi32(e, _mm256_castps_si256(small));
        let m = _mm256_sub_ps(_mm256_blendv_ps(m, _mm256_add_ps(m, m), small), splat(1.0));
        let ef = _mm256_cvtepi32_ps(e);
        let z = _mm256_mul_ps(m, m);
        let mut p = splat(7.037_683_6e-2);
        for c in [
            -1.151_461e-1,
            1.167_699_9e-1,
            -1.242_014_1e-1,
            1.424_932_3e-1,
            -1.666_805_8e-1,
            2.000_071_4e-1,
            -2.499_999_4e-1,
            3.333_333e-1,
        ] {
            p = _mm256_fmadd_ps(p, m, splat(c));
        }
        let y = _mm256_mul_ps(_mm256_mul_ps(p, m), z);
        let y = _mm256_fmadd_ps(splat(-2.121_944_4e-4), ef, y);
        let y = _mm256_fmadd_ps(splat(-0.5), z, y);
        let r = _mm256_fmadd_ps(splat(0.693_359_4), ef, _mm256_add_ps(m, y));
        let pos = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ);
        let r = _mm256_blendv_ps(splat(f32::NAN), r, pos);
        let r =
            _mm256_blendv_ps(r, splat(f32::NEG_INFINITY), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ));
        _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, splat(f32::INFINITY), _CMP_EQ_OQ))
    }

    /// `tanh x` as `tanh_f32`: the odd polynomial below 0.625, else
    /// `1 - 2 / (e^{2|x|} + 1)` with `x`'s sign.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn tanh(x: __m256) -> __m256 {
        let sign = splat(-0.0);
        let a = _mm256_andnot_ps(sign, x);
        let z = _mm256_mul_ps(x, x);
        let mut q = splat(-5.704_988_7e-3);
        for c in [2.063_909e-2, -5.373_971_6e-2, 1.333_144_2e-1, -3.333_328e-1] {
            q = _mm256_fmadd_ps(q, z, splat(c));
        }
        let poly = _mm256_fmadd_ps(_mm256_mul_ps(q, z), x, x);
        let e = exp(_mm256_add_ps(a, a));
        let big = _mm256_sub_ps(splat(1.0), _mm256_div_ps(splat(2.0), _mm256_add_ps(e, splat(1.0))));
        let big = _mm256_or_ps(big, _mm256_and_ps(x, sign));
        _mm256_blendv_ps(big, poly, _mm256_cmp_ps(a, splat(0.625), _CMP_LT_OQ))
    }

    /// `1 / (1 + e^-x)`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn sigmoid(x: __m256) -> __m256 {
        let e = exp(_mm256_sub_ps(_mm256_setzero_ps(), x));
        _mm256_div_ps(splat(1.0), _mm256_add_ps(splat(1.0), e))
    }

    /// The tanh GELU as `gelu_f32`: `x / (1 + e^{-2u})`, -0 at -inf.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn gelu(x: __m256) -> __m256 {
        let x3 = _mm256_mul_ps(_mm256_mul_ps(splat(0.044_715), x), _mm256_mul_ps(x, x));
        let u = _mm256_mul_ps(splat(GELU_C), _mm256_add_ps(x, x3));
        let e = exp_flush(_mm256_mul_ps(splat(-2.0), u));
        let g = _mm256_div_ps(x, _mm256_add_ps(splat(1.0), e));
        _mm256_blendv_ps(g, splat(-0.0), _mm256_cmp_ps(x, splat(f32::NEG_INFINITY), _CMP_EQ_OQ))
    }

    /// Maps `op` over whole vectors of `x` into `out` (same length), the
    /// tail through the scalar function.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn map(op: VOp, out: &mut [f32], x: &[f32]) {
        // One loop per op, so each kernel inlines into its own loop.
        macro_rules! run {
            ($f:ident) => {
                for (o, v) in out.chunks_exact_mut(8).zip(x.chunks_exact(8)) {
                    // SAFETY: each chunk holds 8 values.
                    unsafe { _mm256_storeu_ps(o.as_mut_ptr(), $f(_mm256_loadu_ps(v.as_ptr()))) };
                }
            };
        }
        match op {
            VOp::Exp => run!(exp),
            VOp::Ln => run!(ln),
            VOp::Tanh => run!(tanh),
            VOp::Sigmoid => run!(sigmoid),
            VOp::Gelu => run!(gelu),
        }
        let main = out.len() - out.len() % 8;
        let s = op.scalar();
        out[main..].iter_mut().zip(&x[main..]).for_each(|(o, &v)| *o = s(v));
    }
}

#[cfg(test)]
mod tests;
