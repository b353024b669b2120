//! AVX-512 block quantizers (Q8_0, Q4_0, Q4_1, Q4_K) with their per-block
//! parameters computed 16 lanes at a time.
//!
//! A block's scale is a short chain of dependent scalar steps (a horizontal
//! min/max, a division, an f16 rounding); done block by block, that chain
//! and its stores dominated the time and kept the loads of the next blocks
//! waiting. Here the ranges of 16 blocks (or the 16 sub-blocks of two Q4_K
//! super-blocks) are reduced into one vector, lane `j` for block `j`, and
//! every parameter is then one vector operation for all 16: the same f32
//! operations as the portable twins, lane by lane, so the bytes agree.

use super::super::blocks::{self, BlockFormat, QK};
use super::super::kquant::{QK_K, QS_BYTES, SCALE_BYTES};
use super::{RNE, load_block, nibbles, q8_codes, store_nibbles, tail_mask};
use half::f16;
use std::arch::x86_64::*;

/// `a` op `b` lane by lane, op min or max.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn op<const MIN: bool>(a: __m512, b: __m512) -> __m512 {
    if MIN { _mm512_min_ps(a, b) } else { _mm512_max_ps(a, b) }
}

/// The first fold of two vectors `x`, `y` (of lanes to be reduced): 8 lanes
/// of `x` in quarters 0-1 and 8 lanes of `y` in quarters 2-3. Done as the
/// blocks are loaded, so only 8 vectors per reduction stay live (16 would
/// spill registers).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub(super) fn fold_pair<const MIN: bool>(x: __m512, y: __m512) -> __m512 {
    op::<MIN>(_mm512_shuffle_f32x4::<0b01_00_01_00>(x, y), _mm512_shuffle_f32x4::<0b11_10_11_10>(x, y))
}

/// Lane `j` is the min (or max) of the 16 lanes of vector `j`, given the
/// pairs `p[k] = fold_pair(v[2k], v[2k + 1])`, for NaN-free inputs: sixteen
/// horizontal reductions sharing one shuffle tree (46 instructions instead
/// of 16 x 8). Order does not matter without NaN; only the sign of a zero
/// result may depend on it.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub(super) fn reduce16<const MIN: bool>(p: &[__m512; 8]) -> __m512 {
    // Quarter q of r[h] holds 4 lanes of vector 4h + q.
    let r: [__m512; 4] = std::array::from_fn(|h| {
        let (x, y) = (p[2 * h], p[2 * h + 1]);
        op::<MIN>(_mm512_shuffle_f32x4::<0b10_00_10_00>(x, y), _mm512_shuffle_f32x4::<0b11_01_11_01>(x, y))
    });
    // A 4x4 transpose-and-fold inside each quarter: lane i of quarter q
    // ends up with vector 4i + q.
    let s0 = op::<MIN>(_mm512_unpacklo_ps(r[0], r[1]), _mm512_unpackhi_ps(r[0], r[1]));
    let s1 = op::<MIN>(_mm512_unpacklo_ps(r[2], r[3]), _mm512_unpackhi_ps(r[2], r[3]));
    let t = op::<MIN>(_mm512_shuffle_ps::<0b01_00_01_00>(s0, s1), _mm512_shuffle_ps::<0b11_10_11_10>(s0, s1));
    let idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_permutexvar_ps(idx, t)
}

/// Per-lane minimum and maximum of the 32 values at `x` (NaN skipped: the
/// data goes first), for blocks `k < g`; zeros past the end.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn block_range(x: &[f32], k: usize, g: usize) -> (__m512, __m512) {
    if k >= g {
        return (_mm512_setzero_ps(), _mm512_setzero_ps());
    }
    prefetch(x, k * QK + AHEAD);
    let (a, c) = load_block(&x[k * QK..]);
    (
        _mm512_min_ps(c, _mm512_min_ps(a, _mm512_set1_ps(f32::MAX))),
        _mm512_max_ps(c, _mm512_max_ps(a, _mm512_set1_ps(-f32::MAX))),
    )
}

/// Per-lane maximum of `|v|` over the 32 values at `x` and +0 (NaN skipped),
/// for blocks `k < g`; zeros past the end.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn block_absmax(x: &[f32], k: usize, g: usize) -> __m512 {
    if k >= g {
        return _mm512_setzero_ps();
    }
    prefetch(x, k * QK + AHEAD);
    let (a, c) = load_block(&x[k * QK..]);
    _mm512_max_ps(_mm512_abs_ps(c), _mm512_max_ps(_mm512_abs_ps(a), _mm512_setzero_ps()))
}

/// Lane `k` is the minimum and the maximum of the 32 values of block `k`
/// of `x`, for `k < g`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn ranges16(x: &[f32], g: usize) -> (__m512, __m512) {
    let zero = _mm512_setzero_ps();
    let (mut lo, mut hi) = ([zero; 8], [zero; 8]);
    for k in 0..8 {
        let (l0, h0) = block_range(x, 2 * k, g);
        let (l1, h1) = block_range(x, 2 * k + 1, g);
        (lo[k], hi[k]) = (fold_pair::<true>(l0, l1), fold_pair::<false>(h0, h1));
    }
    (reduce16::<true>(&lo), reduce16::<false>(&hi))
}

/// `-v` lane by lane (the sign bit flipped; `vxorps` on 512 bits needs DQ).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn neg(v: __m512) -> __m512 {
    _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(i32::MIN)))
}

/// Values read ahead of the block being quantized: the hardware prefetcher
/// alone leaves one core waiting on memory between groups.
const AHEAD: usize = 1024;

/// Brings the two cache lines of the block at `x[i..]` towards L1, if inside `x`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn prefetch(x: &[f32], i: usize) {
    if i + QK <= x.len() {
        // SAFETY: prefetches do not fault; the address is inside x anyway.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(x.as_ptr().add(i).cast());
            _mm_prefetch::<_MM_HINT_T0>(x.as_ptr().add(i + 16).cast());
        }
    }
}

/// `if d != 0 { 1 / d } else { 0 }` lane by lane (a NaN `d` gives NaN, as
/// the scalar `!=` does).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn inverse(d: __m512) -> __m512 {
    let nz = _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(d, _mm512_setzero_ps());
    _mm512_maskz_div_ps(nz, _mm512_set1_ps(1.0), d)
}

/// Stores the f16 of lanes `0..n` of `v` (rounded to nearest even, as
/// `half` does with F16C) to `out[..n]`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn store_f16(v: __m512, out: &mut [f16], n: usize) {
    assert!(out.len() >= n && n <= 16);
    // SAFETY: the mask covers only the first n <= out.len() values.
    unsafe { _mm256_mask_storeu_epi16(out.as_mut_ptr().cast(), tail_mask(n), _mm512_cvtps_ph::<RNE>(v)) };
}

/// The vector in an array, for per-block broadcasts from memory.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn to_array(v: __m512) -> [f32; 16] {
    let mut a = [0.0f32; 16];
    // SAFETY: a holds 16 values.
    unsafe { _mm512_storeu_ps(a.as_mut_ptr(), v) };
    a
}

/// The twin of `blocks::quantize_blocks_portable` (ggml's reference
/// quantizers, block by block): the ranges and scales of 16 blocks at a
/// time, then each block's codes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub fn quantize_blocks(f: BlockFormat, x: &[f32], d: &mut [f16], m: &mut [f16], q: &mut [u8]) {
    let cb = f.code_bytes();
    let n = (x.len() / QK).min(q.len() / cb);
    let (bias4, half, zero) = (_mm512_set1_ps(8.5), _mm512_set1_ps(0.5), _mm512_setzero_ps());
    let mut b = 0;
    while b < n {
        let g = (n - b).min(16);
        let xg = &x[b * QK..];
        let (mn, mx) = if f == BlockFormat::Q8_0 {
            let mut hi = [zero; 8];
            for (k, h) in hi.iter_mut().enumerate() {
                *h = fold_pair::<false>(block_absmax(xg, 2 * k, g), block_absmax(xg, 2 * k + 1, g));
            }
            (zero, reduce16::<false>(&hi))
        } else {
            ranges16(xg, g)
        };
        let s = match f {
            BlockFormat::Q8_0 => _mm512_div_ps(mx, _mm512_set1_ps(127.0)),
            BlockFormat::Q4_0 => _mm512_div_ps(signed_max(x, b, g, mn, mx), _mm512_set1_ps(-8.0)),
            BlockFormat::Q4_1 => _mm512_div_ps(_mm512_sub_ps(mx, mn), _mm512_set1_ps(15.0)),
        };
        store_f16(s, &mut d[b..], g);
        if f == BlockFormat::Q4_1 {
            store_f16(mn, &mut m[b..], g);
        }
        let (ids, mins) = (to_array(inverse(s)), to_array(mn));
        for k in 0..g {
            let i = b + k;
            let qs = &mut q[i * cb..(i + 1) * cb];
            let (a, c) = load_block(&x[i * QK..]);
            let id = _mm512_set1_ps(ids[k]);
            match f {
                BlockFormat::Q8_0 => {
                    // SAFETY: qs holds 32 bytes.
                    unsafe {
                        _mm_storeu_si128(qs.as_mut_ptr().cast(), q8_codes(a, id));
                        _mm_storeu_si128(qs.as_mut_ptr().add(16).cast(), q8_codes(c, id));
                    }
                }
                BlockFormat::Q4_0 => {
                    let l = nibbles(_mm512_add_ps(_mm512_mul_ps(a, id), bias4));
                    let h = nibbles(_mm512_add_ps(_mm512_mul_ps(c, id), bias4));
                    store_nibbles(l, h, qs);
                }
                BlockFormat::Q4_1 => {
                    let mv = _mm512_set1_ps(mins[k]);
                    let l = nibbles(_mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(a, mv), id), half));
                    let h = nibbles(_mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(c, mv), id), half));
                    store_nibbles(l, h, qs);
                }
            }
        }
        b += g;
    }
}

/// `blocks::q4_0_signed_max` of blocks `b..b + g` of `x`, lane `k` for block
/// `b + k`: the extreme of larger magnitude by a select; the rare ties of
/// `+a` and `-a` (a != 0) go to the scalar search for the first one, a tie
/// at zero gives +0 as the scalar code does.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn signed_max(x: &[f32], b: usize, g: usize, mn: __m512, mx: __m512) -> __m512 {
    let neg_mn = neg(mn);
    let tie = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(mx, neg_mn) & tail_mask(g);
    let pick_mn = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(neg_mn, mx);
    let v = _mm512_maskz_mov_ps(!tie, _mm512_mask_blend_ps(pick_mn, mx, mn));
    let ties = tie & _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(mx, _mm512_setzero_ps());
    if ties == 0 {
        return v;
    }
    let (mut out, mns, mxs) = (to_array(v), to_array(mn), to_array(mx));
    for k in (0..g).filter(|k| ties >> k & 1 == 1) {
        out[k] = blocks::q4_0_signed_max(&x[(b + k) * QK..(b + k + 1) * QK], mns[k], mxs[k]);
    }
    // SAFETY: out holds 16 values.
    unsafe { _mm512_loadu_ps(out.as_ptr()) }
}

/// Each lane becomes the largest of its 8-lane half (two Q4_K super-blocks)
/// and 0; NaN lanes skipped, a zero result is +0.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn half_max0(v: __m512) -> __m512 {
    // Against +0 first (the data first: NaN and -0 become +0), so no lane is
    // NaN or -0 and the order of the rest does not matter.
    let w = _mm512_max_ps(v, _mm512_setzero_ps());
    let w = _mm512_max_ps(w, _mm512_shuffle_f32x4::<0b10_11_00_01>(w, w));
    let w = _mm512_max_ps(w, _mm512_permute_ps::<0b01_00_11_10>(w));
    _mm512_max_ps(w, _mm512_permute_ps::<0b10_11_00_01>(w))
}

/// `kquant::f16_up` lane by lane: the f16 bits of `v` (>= 0) rounded to
/// nearest, plus one when that went below `v`; and their value as f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn f16_up(v: __m512) -> (__m256i, __m512) {
    let h = _mm512_cvtps_ph::<RNE>(v);
    let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(_mm512_cvtph_ps(h), v);
    let h = _mm256_mask_add_epi16(h, below, h, _mm256_set1_epi16(1));
    (h, _mm512_cvtph_ps(h))
}

/// `clamp(ceil(q), 0, 63)` as integers in the lanes of `keep`, 0 elsewhere;
/// NaN to 0 (`clamp_to_i32` of `ceil`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn six_bits(keep: __mmask16, q: __m512) -> __m512i {
    let c = _mm512_roundscale_ps::<{ _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC }>(q);
    let c = _mm512_min_ps(_mm512_max_ps(c, _mm512_setzero_ps()), _mm512_set1_ps(63.0));
    _mm512_maskz_cvttps_epi32(keep, c)
}

/// The twin of `kquant::super_params`, `code_steps` and `pack_scales` for two
/// super-blocks, sub-block `j` of super-block `h` in lane `8h + j` (the same
/// operations lane by lane): the f16 bits of `d` and `dmin` (lanes 0 and 8),
/// the 12 packed scale bytes of each super-block, and per lane the inverse
/// step and the offset of the codes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn q4k_params(lo: __m512, hi: __m512) -> ([__m256i; 2], [__m128i; 2], __m512, __m512) {
    let zero = _mm512_setzero_ps();
    let neg_lo = neg(lo);
    let (dmin, dminf) = f16_up(_mm512_div_ps(half_max0(neg_lo), _mm512_set1_ps(63.0)));
    let m = six_bits(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(dminf, zero), _mm512_div_ps(neg_lo, dminf));
    let off = _mm512_mul_ps(dminf, _mm512_cvtepi32_ps(m));
    let step = _mm512_div_ps(_mm512_add_ps(hi, off), _mm512_set1_ps(15.0));
    let (d, df) = f16_up(_mm512_div_ps(half_max0(step), _mm512_set1_ps(63.0)));
    let sc = six_bits(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(df, zero), _mm512_div_ps(step, df));
    let e = _mm512_mul_ps(df, _mm512_cvtepi32_ps(sc));
    let inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(e, zero), _mm512_set1_ps(1.0), e);
    // ggml's packing, per half: x = sc[0..4] ++ m[0..4], y = sc[4..8] ++ m[4..8];
    // bytes 0..8 = x | (y >> 4) << 6, bytes 8..12 = (sc[4..8] & 15) | (m[4..8] & 15) << 4.
    let ix = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
    let iy = _mm512_add_epi32(ix, _mm512_set1_epi32(4));
    let (x, y) = (_mm512_permutex2var_epi32(sc, ix, m), _mm512_permutex2var_epi32(sc, iy, m));
    let head = _mm512_cvtepi32_epi8(_mm512_or_si512(x, _mm512_slli_epi32::<6>(_mm512_srli_epi32::<4>(y))));
    let low = _mm512_and_si512(y, _mm512_set1_epi32(15));
    let tail = _mm512_or_si512(low, _mm512_slli_epi32::<4>(_mm512_shuffle_i32x4::<0b10_11_00_01>(low, low)));
    let tail = _mm512_cvtepi32_epi8(tail);
    let packed = [_mm_unpacklo_epi64(head, tail), _mm_unpackhi_epi64(head, tail)];
    ([d, dmin], packed, inv, off)
}

/// The twin of `kquant::quantize_blocks_portable`: the ranges and scales of
/// two super-blocks at a time in one vector, then the codes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub fn quantize_q4k(x: &[f32], d: &mut [f16], dmin: &mut [f16], scales: &mut [u8], qs: &mut [u8]) {
    let n = (x.len() / QK_K).min(d.len()).min(dmin.len()).min(scales.len() / SCALE_BYTES);
    let n = n.min(qs.len() / QS_BYTES);
    let zero = _mm512_setzero_ps();
    let mut b = 0;
    while b < n {
        let g = (n - b).min(2);
        let (mn, mx) = ranges16(&x[b * QK_K..], 8 * g);
        // kquant::sub_block_range: the minimum pinned at or below +0.
        let lo = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(mn, zero), mn);
        let ([dh, mh], packed, inv, off) = q4k_params(lo, mx);
        let (inv, off) = (to_array(inv), to_array(off));
        for (h, packed) in packed.iter().enumerate().take(g) {
            let i = b + h;
            (d[i], dmin[i]) = if h == 0 {
                (
                    f16::from_bits(_mm256_extract_epi16::<0>(dh) as u16),
                    f16::from_bits(_mm256_extract_epi16::<0>(mh) as u16),
                )
            } else {
                (
                    f16::from_bits(_mm256_extract_epi16::<8>(dh) as u16),
                    f16::from_bits(_mm256_extract_epi16::<8>(mh) as u16),
                )
            };
            let s = &mut scales[i * SCALE_BYTES..(i + 1) * SCALE_BYTES];
            // SAFETY: s holds the 12 bytes the mask covers.
            unsafe { _mm_mask_storeu_epi8(s.as_mut_ptr().cast(), 0x0FFF, *packed) };
            let (x, q) = (&x[i * QK_K..], &mut qs[i * QS_BYTES..(i + 1) * QS_BYTES]);
            for c in 0..4 {
                let (ja, jb) = (8 * h + 2 * c, 8 * h + 2 * c + 1);
                let (ia, oa) = (_mm512_set1_ps(inv[ja]), _mm512_set1_ps(off[ja]));
                let (ib, ob) = (_mm512_set1_ps(inv[jb]), _mm512_set1_ps(off[jb]));
                let (xa, xb) = (load_block(&x[64 * c..]), load_block(&x[64 * c + 32..]));
                store_nibbles(q4k_codes(xa.0, oa, ia), q4k_codes(xb.0, ob, ib), &mut q[32 * c..]);
                store_nibbles(q4k_codes(xa.1, oa, ia), q4k_codes(xb.1, ob, ib), &mut q[32 * c + 16..]);
            }
        }
        b += g;
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
