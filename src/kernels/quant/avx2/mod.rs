//! AVX2 + FMA (+ F16C) decode kernels: what a CPU without AVX-512 (Zen 1-3,
//! Haswell to Comet Lake, most hosted CI runners) and an AVX-512 one without
//! VNNI (Skylake-X) run for one to eight tokens.
//!
//! - [`act8`]: weights times int8 activations, llama.cpp's arithmetic
//!   (`ggml_vec_dot_*_q8_*` on AVX2): codes unpacked to bytes, multiplied by
//!   the activation bytes with `vpmaddubsw` (unsigned x signed, pairs summed
//!   in i16, which never saturates for these code ranges) and widened with
//!   `vpmaddwd`; for Q4_K and Q6_K the sub-block scales go in with the
//!   `vpmaddwd` too, so a super-block's sum is one exact i32 per lane and
//!   only the super-block scale is applied in f32.
//! - [`fdot`]: weights times f32 activations (the built-in models'
//!   weight-only int8 / Q4_0 / Q8_0 and the f16 / bf16 / f32 rows):
//!   codes widened to f32 in registers and multiply-added.
//! - [`halfs`]: f32 to and from f16 / bf16 (the f16 / bf16 weights'
//!   prefill tiles and conversions), bit for bit as the `half` crate.
//! - [`ternary_dot`]: BitNet bit planes against int16 activations,
//!   additions only.
//!
//! Every kernel is checked against the portable twin and an f64 (or exact
//! integer) reference in `tests`; the caller chooses them through
//! [`super::dispatch`], which is also what `tfbench sysinfo --kernels` prints.

pub mod act8;
pub mod fdot;
pub mod halfs;

use std::arch::x86_64::*;

/// The features the kernels here are compiled for.
pub const FEATURES: [crate::isa::Feature; 4] = super::AVX2;

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Sum of the 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01)))
}

/// `d[from..from + n]` (n <= 8) as f32, zero in the lanes past `n`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn halfs8(d: &[half::f16], from: usize, n: usize) -> __m256 {
    let mut t = [0u16; 8];
    if n == 8 {
        // SAFETY: the slice index checks that 8 values exist.
        return _mm256_cvtph_ps(unsafe { _mm_loadu_si128(d[from..from + 8].as_ptr().cast()) });
    }
    for (t, v) in t.iter_mut().zip(&d[from..from + n]) {
        *t = v.to_bits();
    }
    // SAFETY: t holds 8 values.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(t.as_ptr().cast()) })
}

/// `v[from..from + n]` (n <= 8), zero in the lanes past `n`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn f32s8(v: &[f32], from: usize, n: usize) -> __m256 {
    if n == 8 {
        // SAFETY: the slice index checks that 8 values exist.
        return unsafe { _mm256_loadu_ps(v[from..from + 8].as_ptr()) };
    }
    let mut t = [0.0f32; 8];
    t[..n].copy_from_slice(&v[from..from + n]);
    // SAFETY: t holds 8 values.
    unsafe { _mm256_loadu_ps(t.as_ptr()) }
}

/// `sum_k x[k] * code[k]` of one ternary row in bit planes (`plus`, `minus`:
/// one bit per value, 64 per word) against `x` (`64 * words` int16 values,
/// |x| <= 127): each 16-bit group of a plane is broadcast and compared
/// against the lane's bit, and the selected values added or subtracted in
/// i16 (256 words per pass stay below 2^15) before widening to i32.
///
/// # Panics
/// When `x` is not `64 * plus.len()` long or the planes differ in length.
#[target_feature(enable = "avx2")]
pub fn ternary_dot(plus: &[u64], minus: &[u64], x: &[i16]) -> i32 {
    assert!(
        x.len() == plus.len() * 64 && minus.len() == plus.len(),
        "ternary dot: x must be padded to whole words"
    );
    let bits =
        _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, i16::MIN);
    let ones = _mm256_set1_epi16(1);
    let mut total = _mm256_setzero_si256();
    for ((p, m), xs) in plus.chunks(256).zip(minus.chunks(256)).zip(x.chunks(256 * 64)) {
        let mut acc = [_mm256_setzero_si256(); 4];
        for ((&p, &m), xs) in p.iter().zip(m).zip(xs.chunks_exact(64)) {
            for (c, a) in acc.iter_mut().enumerate() {
                let pb = _mm256_set1_epi16((p >> (16 * c)) as u16 as i16);
                let mb = _mm256_set1_epi16((m >> (16 * c)) as u16 as i16);
                let pm = _mm256_cmpeq_epi16(_mm256_and_si256(pb, bits), bits);
                let mm = _mm256_cmpeq_epi16(_mm256_and_si256(mb, bits), bits);
                // SAFETY: xs holds 64 values, 16 per c.
                let xv = unsafe { _mm256_loadu_si256(xs.as_ptr().add(16 * c).cast()) };
                *a = _mm256_sub_epi16(
                    _mm256_add_epi16(*a, _mm256_and_si256(xv, pm)),
                    _mm256_and_si256(xv, mm),
                );
            }
        }
        for a in acc {
            total = _mm256_add_epi32(total, _mm256_madd_epi16(a, ones));
        }
    }
    hsum_i32(total)
}

#[cfg(test)]
mod tests;
