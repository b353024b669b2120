//! Weight rows times f32 activations on AVX2 + FMA: the weight-only decode
//! of [`super::super::QMatrix`] (`with_f32_activations`, what the built-in
//! models run), each weight widened to f32 in registers and multiply-added
//! into four (or, per block, two) independent accumulators. The AVX-512
//! twins are `linear/dot.rs`'s `avx512` module; the results differ from
//! them and from the portable loops only in the order of f32 additions.

use super::{f32s8, halfs8, hsum};
use half::{bf16, f16};
use std::arch::x86_64::*;

/// Values per block.
const QB: usize = 32;

/// `sum w[i] x[i]` over a row, 32 values per step with the widening `load`.
macro_rules! dot32 {
    ($w:ident, $x:ident, $tail:expr, |$p:ident, $i:ident| $load:expr) => {{
        let k = $w.len().min($x.len());
        let main = k - k % 32;
        let mut acc = [_mm256_setzero_ps(); 4];
        let ($p, px) = ($w.as_ptr(), $x.as_ptr());
        let mut i = 0;
        while i < main {
            for (u, a) in acc.iter_mut().enumerate() {
                let $i = i + 8 * u;
                // SAFETY: $i + 8 <= main <= k, the length of both slices.
                *a = unsafe { _mm256_fmadd_ps($load, _mm256_loadu_ps(px.add($i)), *a) };
            }
            i += 32;
        }
        let tail: f32 = $w[main..k].iter().zip(&$x[main..k]).map($tail).sum();
        hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))) + tail
    }};
}

/// f32 row.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_f32(w: &[f32], x: &[f32]) -> f32 {
    dot32!(w, x, |(a, b)| a * b, |p, i| _mm256_loadu_ps(p.add(i)))
}

/// f16 row (`vcvtph2ps`).
#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_f16(w: &[f16], x: &[f32]) -> f32 {
    dot32!(w, x, |(a, b)| a.to_f32() * b, |p, i| _mm256_cvtph_ps(_mm_loadu_si128(p.add(i).cast())))
}

/// bf16 row (the high half of an f32: widened and shifted).
#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_bf16(w: &[bf16], x: &[f32]) -> f32 {
    dot32!(w, x, |(a, b)| a.to_f32() * b, |p, i| _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(p.add(i).cast())),
        16
    )))
}

/// int8 row (codes only; the caller applies the row's scale).
#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_i8(w: &[i8], x: &[f32]) -> f32 {
    dot32!(w, x, |(&a, b)| f32::from(a) * b, |p, i| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
        _mm_loadl_epi64(p.add(i).cast())
    )))
}

/// A Q8_0 row (`d`: k / 32 scales, `qs`: k codes as bytes): per block the
/// 32 codes times x in one vector, scaled by the block's `d`.
///
/// # Panics
/// When the row and `x` are not k = 32 * d.len() values.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_q8_0(d: &[f16], qs: &[u8], x: &[f32]) -> f32 {
    let nb = d.len();
    assert!(qs.len() == nb * QB && x.len() == nb * QB, "dot_q8_0: the row is not {} values", nb * QB);
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut ds = [0.0f32; 8];
    for g in 0..nb.div_ceil(8) {
        let r = (nb - 8 * g).min(8);
        // SAFETY: ds holds 8 values.
        unsafe { _mm256_storeu_ps(ds.as_mut_ptr(), halfs8(d, 8 * g, r)) };
        for (j, &s) in ds.iter().enumerate().take(r) {
            let b = 8 * g + j;
            let mut dot = _mm256_setzero_ps();
            for u in 0..4 {
                // SAFETY: block b holds 32 codes and 32 values of x.
                unsafe {
                    let w = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                        qs.as_ptr().add(QB * b + 8 * u).cast(),
                    )));
                    dot = _mm256_fmadd_ps(w, _mm256_loadu_ps(x.as_ptr().add(QB * b + 8 * u)), dot);
                }
            }
            acc[j & 1] = _mm256_fmadd_ps(dot, _mm256_set1_ps(s), acc[j & 1]);
        }
    }
    hsum(_mm256_add_ps(acc[0], acc[1]))
}

/// Q4_0 (`mins = None`) and Q4_1 rows: the unsigned codes dotted with x per
/// block and scaled by `d`, then the offset term (`-8 d` or the minimum)
/// times each block's sum of x (`xsums`, k / 32 values), 8 blocks a step.
///
/// # Panics
/// When the row, `x` and `xsums` do not hold the same number of blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_q4(d: &[f16], mins: Option<&[f16]>, qs: &[u8], x: &[f32], xsums: &[f32]) -> f32 {
    let nb = d.len();
    assert!(
        qs.len() == nb * QB / 2
            && x.len() == nb * QB
            && xsums.len() == nb
            && mins.is_none_or(|m| m.len() == nb),
        "dot_q4: the row is not {} values",
        nb * QB
    );
    let nib = _mm_set1_epi8(15);
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut corr = _mm256_setzero_ps();
    let mut ds = [0.0f32; 8];
    for g in 0..nb.div_ceil(8) {
        let r = (nb - 8 * g).min(8);
        let dw = halfs8(d, 8 * g, r);
        let off = match mins {
            Some(m) => halfs8(m, 8 * g, r),
            None => _mm256_mul_ps(dw, _mm256_set1_ps(-8.0)),
        };
        corr = _mm256_fmadd_ps(off, f32s8(xsums, 8 * g, r), corr);
        // SAFETY: ds holds 8 values.
        unsafe { _mm256_storeu_ps(ds.as_mut_ptr(), dw) };
        for (j, &s) in ds.iter().enumerate().take(r) {
            let b = 8 * g + j;
            // SAFETY: block b holds 16 code bytes and 32 values of x.
            unsafe {
                let v = _mm_loadu_si128(qs.as_ptr().add(16 * b).cast());
                let lo = _mm_and_si128(v, nib);
                let hi = _mm_and_si128(_mm_srli_epi16(v, 4), nib);
                let xp = x.as_ptr().add(QB * b);
                let w0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
                let w1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
                let w2 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
                let w3 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
                let d01 =
                    _mm256_fmadd_ps(w1, _mm256_loadu_ps(xp.add(8)), _mm256_mul_ps(w0, _mm256_loadu_ps(xp)));
                let d23 = _mm256_fmadd_ps(
                    w3,
                    _mm256_loadu_ps(xp.add(24)),
                    _mm256_mul_ps(w2, _mm256_loadu_ps(xp.add(16))),
                );
                acc[j & 1] = _mm256_fmadd_ps(_mm256_add_ps(d01, d23), _mm256_set1_ps(s), acc[j & 1]);
            }
        }
    }
    hsum(_mm256_add_ps(acc[0], acc[1])) + hsum(corr)
}
