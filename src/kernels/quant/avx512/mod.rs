//! AVX-512 twins of the bulk quantizers (int8, Q8_0, Q4_0, Q4_1, Q4_K codes,
//! ternary bit planes) and of the block decoders.
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

use super::blocks::{self, BlockFormat, QK};
use super::kquant::{self, QK_K, QS_BYTES, SCALE_BYTES};
use half::f16;
use std::arch::x86_64::*;

/// Round to nearest, ties to even, without raising exceptions.
const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

/// Lanes `0..n` set (`n <= 16`): the ragged tail of a row.
fn tail_mask(n: usize) -> __mmask16 {
    ((1u32 << n.min(16)) - 1) as __mmask16
}

/// `v` rounded to f16 by `vcvtps2ph` (what `half` itself uses on F16C CPUs).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn scale_to_f16(v: f32) -> f16 {
    f16::from_bits(_mm_extract_epi16::<0>(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(v))) as u16)
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

/// `a` op `b` lane by lane, op min or max.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn op<const MIN: bool>(a: __m512, b: __m512) -> __m512 {
    if MIN { _mm512_min_ps(a, b) } else { _mm512_max_ps(a, b) }
}

/// Element `j` is the min (or max) of the 16 lanes of `v[j]`, for NaN-free
/// inputs: eight horizontal reductions sharing one shuffle tree (23
/// instructions instead of 8 x 8). Order does not matter without NaN; only
/// the sign of a zero result may depend on it.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn reduce8<const MIN: bool>(v: &[__m512; 8]) -> [f32; 8] {
    // Pairs (2k, 2k + 1) fold their quarters 0/2 and 1/3: p[k] holds 8
    // lanes of 2k in quarters 0-1 and 8 lanes of 2k + 1 in quarters 2-3.
    let p: [__m512; 4] = std::array::from_fn(|k| {
        let (x, y) = (v[2 * k], v[2 * k + 1]);
        op::<MIN>(_mm512_shuffle_f32x4::<0b01_00_01_00>(x, y), _mm512_shuffle_f32x4::<0b11_10_11_10>(x, y))
    });
    // Then quarter q of r[h] holds 4 lanes of vector 4h + q.
    let r: [__m512; 2] = std::array::from_fn(|h| {
        let (x, y) = (p[2 * h], p[2 * h + 1]);
        op::<MIN>(_mm512_shuffle_f32x4::<0b10_00_10_00>(x, y), _mm512_shuffle_f32x4::<0b11_01_11_01>(x, y))
    });
    // Within each quarter: lanes (0, 2) and (1, 3) of r[0] / r[1] interleaved,
    // then the two halves: lane 0 is vector q, lane 1 vector q + 4.
    let s = op::<MIN>(_mm512_unpacklo_ps(r[0], r[1]), _mm512_unpackhi_ps(r[0], r[1]));
    let t = op::<MIN>(s, _mm512_permute_ps::<0b01_00_11_10>(s));
    let mut lanes = [0.0f32; 16];
    // SAFETY: lanes holds 16 values.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), t) };
    std::array::from_fn(|j| lanes[4 * (j % 4) + j / 4])
}

/// The twin of `blocks::quantize_blocks_portable` (ggml's reference
/// quantizers, block by block), the ranges of 8 blocks reduced together.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub fn quantize_blocks(f: BlockFormat, x: &[f32], d: &mut [f16], m: &mut [f16], q: &mut [u8]) {
    let cb = f.code_bytes();
    let n = (x.len() / QK).min(q.len() / cb);
    let (bias4, half, zero) = (_mm512_set1_ps(8.5), _mm512_set1_ps(0.5), _mm512_setzero_ps());
    let mut b = 0;
    while b < n {
        let g = (n - b).min(8);
        // Per block, lane-wise ranges that skip NaN (the data goes first).
        let (mut lo, mut hi) = ([zero; 8], [zero; 8]);
        for k in 0..g {
            let (a, c) = load_block(&x[(b + k) * QK..]);
            if f == BlockFormat::Q8_0 {
                hi[k] = _mm512_max_ps(_mm512_abs_ps(c), _mm512_max_ps(_mm512_abs_ps(a), zero));
            } else {
                lo[k] = _mm512_min_ps(c, _mm512_min_ps(a, _mm512_set1_ps(f32::MAX)));
                hi[k] = _mm512_max_ps(c, _mm512_max_ps(a, _mm512_set1_ps(-f32::MAX)));
            }
        }
        let mx = reduce8::<false>(&hi);
        let mn = if f == BlockFormat::Q8_0 { [0.0; 8] } else { reduce8::<true>(&lo) };
        for k in 0..g {
            let i = b + k;
            let xs = &x[i * QK..(i + 1) * QK];
            let qs = &mut q[i * cb..(i + 1) * cb];
            let (a, c) = load_block(xs);
            match f {
                BlockFormat::Q8_0 => {
                    let s = mx[k] / 127.0;
                    let id = _mm512_set1_ps(if s != 0.0 { 1.0 / s } else { 0.0 });
                    // SAFETY: qs holds 32 bytes.
                    unsafe {
                        _mm_storeu_si128(qs.as_mut_ptr().cast(), q8_codes(a, id));
                        _mm_storeu_si128(qs.as_mut_ptr().add(16).cast(), q8_codes(c, id));
                    }
                    d[i] = scale_to_f16(s);
                }
                BlockFormat::Q4_0 => {
                    let s = blocks::q4_0_signed_max(xs, mn[k], mx[k]) / -8.0;
                    let id = _mm512_set1_ps(if s != 0.0 { 1.0 / s } else { 0.0 });
                    let l = nibbles(_mm512_add_ps(_mm512_mul_ps(a, id), bias4));
                    let h = nibbles(_mm512_add_ps(_mm512_mul_ps(c, id), bias4));
                    store_nibbles(l, h, qs);
                    d[i] = scale_to_f16(s);
                }
                BlockFormat::Q4_1 => {
                    let s = (mx[k] - mn[k]) / 15.0;
                    let id = _mm512_set1_ps(if s != 0.0 { 1.0 / s } else { 0.0 });
                    let mv = _mm512_set1_ps(mn[k]);
                    let l = nibbles(_mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(a, mv), id), half));
                    let h = nibbles(_mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(c, mv), id), half));
                    store_nibbles(l, h, qs);
                    (d[i], m[i]) = (scale_to_f16(s), scale_to_f16(mn[k]));
                }
            }
        }
        b += g;
    }
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

/// 16 Q4_K codes: `clamp(rne((v + off) * inv), 0, 15)`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn q4k_codes(v: __m512, off: __m512, inv: __m512) -> __m512i {
    let p = _mm512_mul_ps(_mm512_add_ps(v, off), inv);
    let p = _mm512_min_ps(_mm512_max_ps(p, _mm512_setzero_ps()), _mm512_set1_ps(15.0));
    _mm512_cvt_roundps_epi32::<RNE>(p)
}

/// Largest of the 8 lanes and 0; NaN lanes skipped, a zero result is +0.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn max0(v: __m256) -> f32 {
    // Against +0 first (the data first: NaN and -0 become +0), so no lane is
    // NaN or -0 and the order of the rest does not matter.
    let w = _mm256_max_ps(v, _mm256_setzero_ps());
    let w = _mm_max_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps::<1>(w));
    let w = _mm_max_ps(w, _mm_movehl_ps(w, w));
    _mm_cvtss_f32(_mm_max_ss(w, _mm_movehdup_ps(w)))
}

/// `clamp(ceil(q), 0, 63)` as integers, NaN to 0 (`clamp_to_i32` of `ceil`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn six_bits(q: __m256) -> __m256i {
    let c = _mm256_round_ps::<{ _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC }>(q);
    _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(c, _mm256_setzero_ps()), _mm256_set1_ps(63.0)))
}

/// The twin of [`kquant::super_params`] and `code_steps` with sub-block `j`
/// in lane `j` (the same operations lane by lane): the parameters, the
/// inverse steps and the offsets of the codes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn q4k_params(lo: &[f32; 8], hi: &[f32; 8]) -> (kquant::SuperParams, [f32; 8], [f32; 8]) {
    // SAFETY: lo and hi hold 8 values each.
    let (lo, hi) = unsafe { (_mm256_loadu_ps(lo.as_ptr()), _mm256_loadu_ps(hi.as_ptr())) };
    let neg_lo = _mm256_xor_ps(lo, _mm256_set1_ps(-0.0));
    let dmin = kquant::f16_up(max0(neg_lo) / 63.0);
    let dminf = dmin.to_f32();
    let m = if dminf > 0.0 {
        six_bits(_mm256_div_ps(neg_lo, _mm256_set1_ps(dminf)))
    } else {
        _mm256_setzero_si256()
    };
    let mf = _mm256_cvtepi32_ps(m);
    let off = _mm256_mul_ps(_mm256_set1_ps(dminf), mf);
    let step = _mm256_div_ps(_mm256_add_ps(hi, off), _mm256_set1_ps(15.0));
    let d = kquant::f16_up(max0(step) / 63.0);
    let df = d.to_f32();
    let sc =
        if df > 0.0 { six_bits(_mm256_div_ps(step, _mm256_set1_ps(df))) } else { _mm256_setzero_si256() };
    let e = _mm256_mul_ps(_mm256_set1_ps(df), _mm256_cvtepi32_ps(sc));
    let inv = _mm256_maskz_mov_ps(
        _mm256_cmp_ps_mask::<_CMP_GT_OQ>(e, _mm256_setzero_ps()),
        _mm256_div_ps(_mm256_set1_ps(1.0), e),
    );
    let bytes = |v: __m256i| (_mm_cvtsi128_si64(_mm256_cvtepi32_epi8(v)) as u64).to_le_bytes();
    let (mut inv_a, mut off_a) = ([0.0f32; 8], [0.0f32; 8]);
    // SAFETY: both arrays hold 8 values.
    unsafe {
        _mm256_storeu_ps(inv_a.as_mut_ptr(), inv);
        _mm256_storeu_ps(off_a.as_mut_ptr(), off);
    }
    (kquant::SuperParams { d, dmin, sc: bytes(sc), m: bytes(m) }, inv_a, off_a)
}

/// The twin of `kquant::quantize_blocks_portable`: sub-block ranges (one
/// shared reduction tree for the 8 sub-blocks) and codes in vectors, the
/// scale search shared ([`kquant::super_params`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub fn quantize_q4k(x: &[f32], d: &mut [f16], dmin: &mut [f16], scales: &mut [u8], qs: &mut [u8]) {
    let blocks =
        x.chunks_exact(QK_K).zip(scales.chunks_exact_mut(SCALE_BYTES)).zip(qs.chunks_exact_mut(QS_BYTES));
    for (((x, s), q), (d, dmin)) in blocks.zip(d.iter_mut().zip(dmin)) {
        let (mut lo, mut hi) = ([_mm512_setzero_ps(); 8], [_mm512_setzero_ps(); 8]);
        for j in 0..8 {
            let (a, b) = load_block(&x[32 * j..]);
            lo[j] = _mm512_min_ps(b, _mm512_min_ps(a, _mm512_set1_ps(f32::MAX)));
            hi[j] = _mm512_max_ps(b, _mm512_max_ps(a, _mm512_set1_ps(-f32::MAX)));
        }
        let (mn, mx) = (reduce8::<true>(&lo), reduce8::<false>(&hi));
        let (mut lo, mut hi) = ([0.0f32; 8], [0.0f32; 8]);
        for j in 0..8 {
            (lo[j], hi[j]) = kquant::sub_block_range(mn[j], mx[j]);
        }
        let (p, inv, off) = q4k_params(&lo, &hi);
        s.copy_from_slice(&kquant::pack_scales(&p.sc, &p.m));
        for c in 0..4 {
            let (a, b) = (2 * c, 2 * c + 1);
            let (ia, oa) = (_mm512_set1_ps(inv[a]), _mm512_set1_ps(off[a]));
            let (ib, ob) = (_mm512_set1_ps(inv[b]), _mm512_set1_ps(off[b]));
            let (xa, xb) = (load_block(&x[32 * a..]), load_block(&x[32 * b..]));
            store_nibbles(q4k_codes(xa.0, oa, ia), q4k_codes(xb.0, ob, ib), &mut q[32 * c..]);
            store_nibbles(q4k_codes(xa.1, oa, ia), q4k_codes(xb.1, ob, ib), &mut q[32 * c + 16..]);
        }
        (*d, *dmin) = (p.d, p.dmin);
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
    let mut i = 0;
    while i < out.len() {
        let (r, c) = ((off + i) / cols, (off + i) % cols);
        let n = (64 - c % 64).min(cols - c).min(out.len() - i);
        let w = r * words + c / 64;
        let (p, m) = (plus[w] >> (c % 64), minus[w] >> (c % 64));
        for (u, o) in out[i..i + n].chunks_mut(16).enumerate() {
            let (pk, mk) = ((p >> (16 * u)) as __mmask16, (m >> (16 * u)) as __mmask16);
            let v = _mm512_maskz_mov_ps(pk, one);
            let v = _mm512_mul_ps(_mm512_mask_sub_ps(v, mk, v, one), gv);
            // SAFETY: the mask covers only the o.len() values of o.
            unsafe { _mm512_mask_storeu_ps(o.as_mut_ptr(), tail_mask(o.len()), v) };
        }
        i += n;
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
