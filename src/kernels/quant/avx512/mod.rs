//! AVX-512 twins of the bulk quantizers (int8, Q8_0, Q4_0, Q4_1, Q4_K codes
//! in `blockq`, ternary bit planes) and of the block decoders.
//!
//! Each gives exactly what its portable twin gives, so the choice between them
//! never shows in the codes:
//! - the same f32 operations in the same order (Rust never fuses a multiply
//!   and an add, so neither do these);
//! - the data is the first operand of `vmaxps`/`vminps`, which return their
//!   second operand when either is NaN: a NaN is skipped by a running
//!   min/max and bounded to the lowest code, as `f32::max`/`min` do;
//! - values are clamped before they are rounded: the bounds are integers, so
//!   this gives the same code, and the conversion instruction (ties to even,
//!   or truncation) then replaces the portable float tricks.
//!
//! Callers check [`super::has_avx512`] first (the features enabled here are
//! the ones it tests). The tests at the bottom compare every kernel with its
//! twin on random data with ties, zeros, extremes and ragged tails.

use super::blocks::{BlockFormat, QK};
use half::f16;
use std::arch::x86_64::*;

mod blockq;
pub use blockq::{quantize_blocks, quantize_q4k};

/// Round to nearest, ties to even, without raising exceptions.
const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

/// Lanes `0..n` set (`n <= 16`): the ragged tail of a row.
fn tail_mask(n: usize) -> __mmask16 {
    ((1u32 << n.min(16)) - 1) as __mmask16
}

/// The two halves of a 32-value block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn load_block(x: &[f32]) -> (__m512, __m512) {
    assert!(x.len() >= QK);
    // SAFETY: x holds at least 32 values.
    unsafe { (_mm512_loadu_ps(x.as_ptr()), _mm512_loadu_ps(x.as_ptr().add(16))) }
}

/// Minimum and maximum of `x`, NaNs skipped; `(inf, -inf)` when empty.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub fn min_max(x: &[f32]) -> (f32, f32) {
    let mut lo = [_mm512_set1_ps(f32::INFINITY); 4];
    let mut hi = [_mm512_set1_ps(f32::NEG_INFINITY); 4];
    let mut chunks = x.chunks_exact(64);
    for c in &mut chunks {
        for u in 0..4 {
            // SAFETY: c holds 64 values.
            let v = unsafe { _mm512_loadu_ps(c.as_ptr().add(16 * u)) };
            lo[u] = _mm512_min_ps(v, lo[u]);
            hi[u] = _mm512_max_ps(v, hi[u]);
        }
    }
    for c in chunks.remainder().chunks(16) {
        let k = tail_mask(c.len());
        // SAFETY: the mask covers only the c.len() values of c.
        let v = unsafe { _mm512_maskz_loadu_ps(k, c.as_ptr()) };
        lo[0] = _mm512_mask_min_ps(lo[0], k, v, lo[0]);
        hi[0] = _mm512_mask_max_ps(hi[0], k, v, hi[0]);
    }
    let lo = _mm512_min_ps(_mm512_min_ps(lo[0], lo[1]), _mm512_min_ps(lo[2], lo[3]));
    let hi = _mm512_max_ps(_mm512_max_ps(hi[0], hi[1]), _mm512_max_ps(hi[2], hi[3]));
    (_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi))
}

/// 16 int8 codes: `clamp(rne(bound(v * inv, -1e6, 1e6)) + zp, lo, hi)`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn int8_codes(v: __m512, inv: __m512, zp: __m512i, lo: __m512i, hi: __m512i) -> __m128i {
    let q = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, inv), _mm512_set1_ps(-1e6)), _mm512_set1_ps(1e6));
    let i = _mm512_add_epi32(_mm512_cvt_roundps_epi32::<RNE>(q), zp);
    _mm512_cvtepi32_epi8(_mm512_min_epi32(_mm512_max_epi32(i, lo), hi))
}

/// The twin of `int8::quantize_with_portable`, with `inv = 1 / scale`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub fn quantize_int8(x: &[f32], inv: f32, zp: i32, lo: i32, hi: i32, out: &mut [i8]) {
    assert_eq!(x.len(), out.len(), "quantize_int8: length mismatch");
    let inv = _mm512_set1_ps(inv);
    let (zp, lo, hi) = (_mm512_set1_epi32(zp), _mm512_set1_epi32(lo), _mm512_set1_epi32(hi));
    let mut chunks = x.chunks_exact(16);
    let mut outs = out.chunks_exact_mut(16);
    for (c, o) in (&mut chunks).zip(&mut outs) {
        // SAFETY: c holds 16 values and o 16 bytes.
        unsafe {
            let q = int8_codes(_mm512_loadu_ps(c.as_ptr()), inv, zp, lo, hi);
            _mm_storeu_si128(o.as_mut_ptr().cast(), q);
        }
    }
    let (c, o) = (chunks.remainder(), outs.into_remainder());
    if !c.is_empty() {
        let k = tail_mask(c.len());
        // SAFETY: the mask covers only the c.len() values of c and of o.
        unsafe {
            let q = int8_codes(_mm512_maskz_loadu_ps(k, c.as_ptr()), inv, zp, lo, hi);
            _mm_mask_storeu_epi8(o.as_mut_ptr(), k, q);
        }
    }
}

/// 16 Q8_0 codes: `clamp(round(v * id), -128, 127)`, rounding half away from
/// zero as `f32::round` does: truncate after adding 0.5's predecessor with
/// the value's sign (LLVM's own expansion of `round`, exact for every f32).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn q8_codes(v: __m512, id: __m512) -> __m128i {
    let p = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, id), _mm512_set1_ps(-128.0)), _mm512_set1_ps(127.0));
    let sign = _mm512_and_si512(_mm512_castps_si512(p), _mm512_set1_epi32(i32::MIN));
    let half = _mm512_castsi512_ps(_mm512_or_si512(sign, _mm512_set1_epi32(0x3EFF_FFFF)));
    _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(_mm512_add_ps(p, half)))
}

/// 16 4-bit codes: `clamp(trunc(v), 0, 15)`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn nibbles(v: __m512) -> __m512i {
    _mm512_cvttps_epi32(_mm512_min_ps(_mm512_max_ps(v, _mm512_setzero_ps()), _mm512_set1_ps(15.0)))
}

/// Stores 16 bytes `lo | hi << 4` from two vectors of codes below 16.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn store_nibbles(lo: __m512i, hi: __m512i, q: &mut [u8]) {
    assert!(q.len() >= 16);
    let b = _mm512_cvtepi32_epi8(_mm512_or_si512(lo, _mm512_slli_epi32::<4>(hi)));
    // SAFETY: q holds at least 16 bytes.
    unsafe { _mm_storeu_si128(q.as_mut_ptr().cast(), b) };
}

/// The twin of `blocks::dequantize_blocks_portable`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub fn dequantize_blocks(f: BlockFormat, d: &[f16], m: &[f16], q: &[u8], out: &mut [f32]) {
    let cb = f.code_bytes();
    for (b, (o, q)) in out.chunks_exact_mut(QK).zip(q.chunks_exact(cb)).enumerate() {
        let s = _mm512_set1_ps(d[b].to_f32());
        // SAFETY: o holds 32 values and q `cb` >= 16 bytes.
        unsafe {
            let bytes = _mm_loadu_si128(q.as_ptr().cast());
            let (lo, hi) = match f {
                BlockFormat::Q8_0 => {
                    let rest = _mm_loadu_si128(q.as_ptr().add(16).cast());
                    let lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)), s);
                    (lo, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(rest)), s))
                }
                BlockFormat::Q4_0 | BlockFormat::Q4_1 => {
                    let w = _mm512_cvtepu8_epi32(bytes);
                    let (mut l, mut h) =
                        (_mm512_and_si512(w, _mm512_set1_epi32(15)), _mm512_srli_epi32::<4>(w));
                    if f == BlockFormat::Q4_0 {
                        (l, h) = (
                            _mm512_sub_epi32(l, _mm512_set1_epi32(8)),
                            _mm512_sub_epi32(h, _mm512_set1_epi32(8)),
                        );
                    }
                    let (l, h) =
                        (_mm512_mul_ps(_mm512_cvtepi32_ps(l), s), _mm512_mul_ps(_mm512_cvtepi32_ps(h), s));
                    if f == BlockFormat::Q4_1 {
                        let mn = _mm512_set1_ps(m[b].to_f32());
                        (_mm512_add_ps(l, mn), _mm512_add_ps(h, mn))
                    } else {
                        (l, h)
                    }
                }
            };
            _mm512_storeu_ps(o.as_mut_ptr(), lo);
            _mm512_storeu_ps(o.as_mut_ptr().add(16), hi);
        }
    }
}

/// The twin of the portable bit-plane writer in `ternary`: bit `i` of
/// `plus`/`minus` word `w` is set when `rne(bound(x * inv, -1, 1))` of value
/// `64 w + i` is 1 / -1, that is when `x * inv > 0.5` / when it is not
/// `>= -0.5` (which includes NaN, bounded to -1 by the portable code).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub fn ternary_planes(row: &[f32], inv: f32, plus: &mut [u64], minus: &mut [u64]) {
    let (inv, half, neg_half) = (_mm512_set1_ps(inv), _mm512_set1_ps(0.5), _mm512_set1_ps(-0.5));
    for ((p, m), chunk) in plus.iter_mut().zip(minus.iter_mut()).zip(row.chunks(64)) {
        let (mut pb, mut mb) = (0u64, 0u64);
        for (u, c) in chunk.chunks(16).enumerate() {
            let k = tail_mask(c.len());
            // SAFETY: the mask covers only the c.len() values of c.
            let v = _mm512_mul_ps(unsafe { _mm512_maskz_loadu_ps(k, c.as_ptr()) }, inv);
            pb |= (_mm512_mask_cmp_ps_mask::<_CMP_GT_OQ>(k, v, half) as u64) << (16 * u);
            mb |= (_mm512_mask_cmp_ps_mask::<_CMP_NGE_UQ>(k, v, neg_half) as u64) << (16 * u);
        }
        (*p, *m) = (pb, mb);
    }
}

/// Values `off..off + out.len()` of ternary bit planes times `g`, the twin of
/// `ternary::decode_range_portable`: `(plus bit - minus bit) * g` per value,
/// the bits of 16 values at a time taken as a lane mask.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub fn ternary_decode(
    plus: &[u64],
    minus: &[u64],
    words: usize,
    cols: usize,
    g: f32,
    off: usize,
    out: &mut [f32],
) {
    let (one, gv) = (_mm512_set1_ps(1.0), _mm512_set1_ps(g));
    for (i, n, w, shift) in super::ternary::plane_runs(words, cols, off, out.len()) {
        let (p, m) = (plus[w] >> shift, minus[w] >> shift);
        for (u, o) in out[i..i + n].chunks_mut(16).enumerate() {
            let (pk, mk) = ((p >> (16 * u)) as __mmask16, (m >> (16 * u)) as __mmask16);
            let v = _mm512_maskz_mov_ps(pk, one);
            let v = _mm512_mul_ps(_mm512_mask_sub_ps(v, mk, v, one), gv);
            // SAFETY: the mask covers only the o.len() values of o.
            unsafe { _mm512_mask_storeu_ps(o.as_mut_ptr(), tail_mask(o.len()), v) };
        }
    }
}

/// f32 to f16, rounding to nearest even by `vcvtps2ph`: the instruction
/// `half` itself uses on F16C CPUs, 16 values at a time instead of 8.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub fn to_f16(x: &[f32], out: &mut [f16]) {
    assert_eq!(x.len(), out.len(), "to_f16: length mismatch");
    for (c, o) in x.chunks(16).zip(out.chunks_mut(16)) {
        let k = tail_mask(c.len());
        // SAFETY: the mask covers only the c.len() values of c and o.
        unsafe {
            let h = _mm512_cvtps_ph::<RNE>(_mm512_maskz_loadu_ps(k, c.as_ptr()));
            _mm256_mask_storeu_epi16(o.as_mut_ptr().cast(), k, h);
        }
    }
}

/// f16 to f32 (exact), 16 values at a time.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub fn from_f16(h: &[f16], out: &mut [f32]) {
    assert_eq!(h.len(), out.len(), "from_f16: length mismatch");
    for (c, o) in h.chunks(16).zip(out.chunks_mut(16)) {
        let k = tail_mask(c.len());
        // SAFETY: the mask covers only the c.len() values of c and o.
        unsafe {
            let v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, c.as_ptr().cast()));
            _mm512_mask_storeu_ps(o.as_mut_ptr(), k, v);
        }
    }
}

/// f32 to bf16 with `half`'s arithmetic on the bits: round to nearest even
/// (add one to the top half when the dropped half is above 0x8000, or equal
/// to it and the kept half is odd), a NaN kept quiet with its sign and top
/// payload bits. Not `vcvtneps2bf16`, which flushes subnormals to zero.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub fn to_bf16(x: &[f32], out: &mut [half::bf16]) {
    assert_eq!(x.len(), out.len(), "to_bf16: length mismatch");
    let set = _mm512_set1_epi32;
    for (c, o) in x.chunks(16).zip(out.chunks_mut(16)) {
        let k = tail_mask(c.len());
        // SAFETY: the mask covers only the c.len() values of c and o.
        unsafe {
            let b = _mm512_maskz_loadu_epi32(k, c.as_ptr().cast());
            let top = _mm512_srli_epi32::<16>(b);
            let round = _mm512_test_epi32_mask(b, set(0x8000)) & _mm512_test_epi32_mask(b, set(0x1_7FFF));
            let nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(b, set(0x7FFF_FFFF)), set(0x7F80_0000));
            let v = _mm512_mask_add_epi32(top, round, top, set(1));
            let v = _mm512_mask_or_epi32(v, nan, top, set(0x40));
            _mm256_mask_storeu_epi16(o.as_mut_ptr().cast(), k, _mm512_cvtepi32_epi16(v));
        }
    }
}

/// bf16 to f32 (exact: the bits moved to the top half), 16 values at a time.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub fn from_bf16(h: &[half::bf16], out: &mut [f32]) {
    assert_eq!(h.len(), out.len(), "from_bf16: length mismatch");
    for (c, o) in h.chunks(16).zip(out.chunks_mut(16)) {
        let k = tail_mask(c.len());
        // SAFETY: the mask covers only the c.len() values of c and o.
        unsafe {
            let w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, c.as_ptr().cast()));
            _mm512_mask_storeu_ps(o.as_mut_ptr(), k, _mm512_castsi512_ps(_mm512_slli_epi32::<16>(w)));
        }
    }
}

#[cfg(test)]
mod tests;
