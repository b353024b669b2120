//! Weights times int8 activations on AVX2 (no VNNI): the decode kernels of
//! Q4_0, Q4_1, Q4_K, Q6_K and Q8_0 for one to eight tokens ([`Q8Acts`] in
//! the order each format's kernel reads, as the VNNI kernels take them).
//!
//! `vpmaddubsw` multiplies unsigned by signed bytes and sums pairs into i16
//! with saturation; no sum here can reach it: 4-bit codes give at most
//! `2 * 15 * 127`, Q6_K's 6-bit codes `2 * 63 * 127` (its `- 32` offset
//! goes through a second `vpmaddubsw` against 32, subtracted in i16:
//! `2 * 32 * 127`), and Q8_0's magnitudes (`|w| <= 128`, signs moved onto
//! the activations, which never reach -128) `2 * 128 * 127 = 32512`. So
//! every integer sum is exact, as ggml's AVX2 dots.

use super::super::kquant::{QK_K, unpack_scales};
use super::super::q6k::{Q6KTensor, QH_BYTES, QL_BYTES, SCALES};
use super::super::w4a8::{Q4Row, Q8Acts};
use super::{f32s8, halfs8, hsum};
use half::f16;
use std::arch::x86_64::*;

/// Values per activation block.
const QB: usize = 32;

/// Lane -> block of a pair: lanes 0-3 hold block `2p`, 4-7 block `2p + 1`.
const PAIR: [[i32; 8]; 4] =
    [[0, 0, 0, 0, 1, 1, 1, 1], [2, 2, 2, 2, 3, 3, 3, 3], [4, 4, 4, 4, 5, 5, 5, 5], [6, 6, 6, 6, 7, 7, 7, 7]];

/// Q4_0 and Q4_1 rows ([`super::super::w4a8::ActLayout::Quad`] activations):
/// per group of 8 blocks the scales `d_w d_a` and offsets (`-8 d_w` or the
/// minimum, times the activations' block sum) are formed once per token;
/// per quad of 4 blocks (64 code bytes) two 32-byte loads give the low and
/// high nibbles of blocks `4q, 4q+1` and `4q+2, 4q+3`, whose `vpmaddwd`
/// sums leave block `2p` in lanes 0-3 and `2p + 1` in lanes 4-7. A last
/// group of fewer than 8 blocks reads its codes from a zeroed copy (zero
/// codes and scales add nothing; the activations are zero padded to whole
/// quads).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `row` must hold `a.k / 32` blocks
/// and `out` `M` values (`M == a.m`).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q4<const M: usize>(row: Q4Row, a: &Q8Acts, out: &mut [f32]) {
    let (d, mins, qs) = match row {
        Q4Row::Q4_0 { d, qs } => (d, None, qs),
        Q4Row::Q4_1 { d, m, qs } => (d, Some(m), qs),
        Q4Row::Q4K { .. } => unreachable!("q4_k has its own kernel"),
    };
    let nb = a.k / QB;
    assert!(
        d.len() >= nb
            && qs.len() >= 16 * nb
            && a.m == M
            && out.len() == M
            && a.stride >= nb.div_ceil(4) * 128
    );
    let nib = _mm256_set1_epi8(15);
    let ones = _mm256_set1_epi16(1);
    // SAFETY: PAIR rows hold 8 i32 each.
    let pair: [__m256i; 4] = std::array::from_fn(|p| unsafe { _mm256_loadu_si256(PAIR[p].as_ptr().cast()) });
    let mut acc = [_mm256_setzero_ps(); M];
    let mut corr = [_mm256_setzero_ps(); M];
    let mut tail = [0u8; 128];
    for g in 0..nb.div_ceil(8) {
        let r = (nb - 8 * g).min(8);
        let dw = halfs8(d, 8 * g, r);
        let off = match mins {
            Some(mn) => halfs8(mn, 8 * g, r),
            None => _mm256_mul_ps(dw, _mm256_set1_ps(-8.0)),
        };
        let mut sc = [_mm256_setzero_ps(); M];
        for (t, sc) in sc.iter_mut().enumerate() {
            let base = t * nb + 8 * g;
            *sc = _mm256_mul_ps(dw, f32s8(&a.d, base, r));
            corr[t] = _mm256_fmadd_ps(off, f32s8(&a.s, base, r), corr[t]);
        }
        let codes: *const u8 = if r == 8 {
            qs[128 * g..128 * g + 128].as_ptr()
        } else {
            tail[..16 * r].copy_from_slice(&qs[128 * g..128 * g + 16 * r]);
            tail[16 * r..].fill(0);
            tail.as_ptr()
        };
        for q in 0..r.div_ceil(4) {
            // SAFETY: codes holds 128 bytes (the row's group or the zeroed copy).
            let (c0, c1) = unsafe {
                (
                    _mm256_loadu_si256(codes.add(64 * q).cast()),
                    _mm256_loadu_si256(codes.add(64 * q + 32).cast()),
                )
            };
            let (lo0, hi0) = (_mm256_and_si256(c0, nib), _mm256_and_si256(_mm256_srli_epi16(c0, 4), nib));
            let (lo1, hi1) = (_mm256_and_si256(c1, nib), _mm256_and_si256(_mm256_srli_epi16(c1, 4), nib));
            for t in 0..M {
                // SAFETY: quad 2g + q < ceil(nb / 4): its 128 bytes lie in the token's stride.
                let (a0, a1, a2, a3) = unsafe {
                    let pa = a.qs.as_ptr().add(t * a.stride + (2 * g + q) * 128);
                    (
                        _mm256_loadu_si256(pa.cast()),
                        _mm256_loadu_si256(pa.add(32).cast()),
                        _mm256_loadu_si256(pa.add(64).cast()),
                        _mm256_loadu_si256(pa.add(96).cast()),
                    )
                };
                let p01 = _mm256_add_epi16(_mm256_maddubs_epi16(lo0, a0), _mm256_maddubs_epi16(hi0, a2));
                let p23 = _mm256_add_epi16(_mm256_maddubs_epi16(lo1, a1), _mm256_maddubs_epi16(hi1, a3));
                let d01 = _mm256_cvtepi32_ps(_mm256_madd_epi16(p01, ones));
                let d23 = _mm256_cvtepi32_ps(_mm256_madd_epi16(p23, ones));
                acc[t] = _mm256_fmadd_ps(d01, _mm256_permutevar8x32_ps(sc[t], pair[2 * q]), acc[t]);
                acc[t] = _mm256_fmadd_ps(d23, _mm256_permutevar8x32_ps(sc[t], pair[2 * q + 1]), acc[t]);
            }
        }
    }
    for (t, o) in out.iter_mut().enumerate() {
        *o = hsum(_mm256_add_ps(acc[t], corr[t]));
    }
}

/// Q4_K rows ([`super::super::w4a8::ActLayout::K`] activations): per
/// super-block, each 32 code bytes hold sub-block `2c` (low nibbles) and
/// `2c + 1` (high); the i16 pair sums are multiplied by the 6-bit
/// sub-block scale in `vpmaddwd`, so the super-block's integer sum
/// `sum_j sc_j dot_j` builds up exactly in i32 and is scaled once by
/// `d d_a`; the minimums' term `-dmin sum_j m_j s_j` is one vector
/// multiply-add of the 8 block sums.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `row` must hold `a.k / 256`
/// super-blocks and `out` `M` values (`M == a.m`).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q4k<const M: usize>(row: Q4Row, a: &Q8Acts, out: &mut [f32]) {
    let Q4Row::Q4K { d, dmin, scales, qs } = row else { unreachable!("q4_k kernel") };
    let (nb, nsb) = (a.k / QB, a.k / QK_K);
    assert!(d.len() >= nsb && qs.len() >= 128 * nsb && a.m == M && out.len() == M && a.stride >= a.k);
    let nib = _mm256_set1_epi8(15);
    let mut acc = [_mm256_setzero_ps(); M];
    let mut corr = [_mm256_setzero_ps(); M];
    for s in 0..nsb {
        let (sc, mm) = unpack_scales(&scales[12 * s..12 * s + 12]);
        let (df, mf) = (d[s].to_f32(), dmin[s].to_f32());
        let mut scv = [_mm256_setzero_si256(); 8];
        for (v, &c) in scv.iter_mut().zip(&sc) {
            *v = _mm256_set1_epi16(i16::from(c));
        }
        let mw: [f32; 8] = std::array::from_fn(|j| -(mf * f32::from(mm[j])));
        let mwv = f32s8(&mw, 0, 8);
        let mut sumi = [_mm256_setzero_si256(); M];
        for h in 0..2 {
            for c in 0..2 {
                // SAFETY: super-block s has 128 code bytes.
                let v = unsafe { _mm256_loadu_si256(qs[128 * s + 64 * h + 32 * c..].as_ptr().cast()) };
                let lo = _mm256_and_si256(v, nib);
                let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
                for (t, si) in sumi.iter_mut().enumerate() {
                    // SAFETY: the token's 256 bytes of super-block s lie in its stride;
                    // sub-blocks 4h, 4h+2, 4h+1, 4h+3 are 32 bytes each, in that order.
                    let (alo, ahi) = unsafe {
                        let pa = a.qs.as_ptr().add(t * a.stride + 256 * s + 128 * h);
                        (
                            _mm256_loadu_si256(pa.add(32 * c).cast()),
                            _mm256_loadu_si256(pa.add(64 + 32 * c).cast()),
                        )
                    };
                    let plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, alo), scv[4 * h + 2 * c]);
                    let phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, ahi), scv[4 * h + 2 * c + 1]);
                    *si = _mm256_add_epi32(*si, _mm256_add_epi32(plo, phi));
                }
            }
        }
        for t in 0..M {
            let base = t * nb + 8 * s;
            let scale = _mm256_set1_ps(df * a.d[base]);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]), scale, acc[t]);
            corr[t] = _mm256_fmadd_ps(mwv, f32s8(&a.s, base, 8), corr[t]);
        }
    }
    for (t, o) in out.iter_mut().enumerate() {
        *o = hsum(_mm256_add_ps(acc[t], corr[t]));
    }
}

/// Q6_K row `r` (natural-order activations): per half super-block the
/// 6-bit codes of 128 values are rebuilt from `ql` and `qh` in four 32-byte
/// vectors (values `32i..32i+32`, sub-blocks `2i` and `2i + 1`), dotted
/// minus 32 times the activations, multiplied by the signed sub-block
/// scales in `vpmaddwd` and summed exactly in i32; the super-block is
/// scaled once by `d d_a`.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; row `r` of `t` must hold `a.k /
/// 256` super-blocks and `out` `M` values (`M == a.m`).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q6k<const M: usize>(t: &Q6KTensor, r: usize, a: &Q8Acts, out: &mut [f32]) {
    let (nsb, nb) = (a.k / QK_K, a.k / QB);
    assert!(t.cols == a.k && r < t.rows && a.m == M && out.len() == M && a.stride >= a.k);
    let (m4, m3, c32) = (_mm256_set1_epi8(15), _mm256_set1_epi8(3), _mm256_set1_epi8(32));
    let mut acc = [_mm256_setzero_ps(); M];
    for s in 0..nsb {
        let b = r * nsb + s;
        let sc = &t.scales[b * SCALES..(b + 1) * SCALES];
        let (ql, qh) = (&t.ql[b * QL_BYTES..(b + 1) * QL_BYTES], &t.qh[b * QH_BYTES..(b + 1) * QH_BYTES]);
        let mut sumi = [_mm256_setzero_si256(); M];
        for h in 0..2 {
            // SAFETY: ql holds 128 bytes, qh 64.
            let (l0, l1, hb) = unsafe {
                (
                    _mm256_loadu_si256(ql[64 * h..].as_ptr().cast()),
                    _mm256_loadu_si256(ql[64 * h + 32..].as_ptr().cast()),
                    _mm256_loadu_si256(qh[32 * h..].as_ptr().cast()),
                )
            };
            let (h0, h1, h2, h3) = (
                _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4),
            );
            let q = [
                _mm256_or_si256(_mm256_and_si256(l0, m4), h0),
                _mm256_or_si256(_mm256_and_si256(l1, m4), h1),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), h2),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), h3),
            ];
            for (i, q) in q.into_iter().enumerate() {
                let j = 8 * h + 2 * i;
                let scv =
                    _mm256_set_m128i(_mm_set1_epi16(i16::from(sc[j + 1])), _mm_set1_epi16(i16::from(sc[j])));
                for (tok, si) in sumi.iter_mut().enumerate() {
                    // SAFETY: the token's 256 bytes of super-block s lie in its stride.
                    let av = unsafe {
                        _mm256_loadu_si256(
                            a.qs.as_ptr().add(tok * a.stride + 256 * s + 128 * h + 32 * i).cast(),
                        )
                    };
                    let p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, av), _mm256_maddubs_epi16(c32, av));
                    *si = _mm256_add_epi32(*si, _mm256_madd_epi16(p, scv));
                }
            }
        }
        let dw = t.d[b].to_f32();
        for tok in 0..M {
            let scale = _mm256_set1_ps(dw * a.d[tok * nb + 8 * s]);
            acc[tok] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[tok]), scale, acc[tok]);
        }
    }
    for (tok, o) in out.iter_mut().enumerate() {
        *o = hsum(acc[tok]);
    }
}

/// Q8_0 rows (natural-order activations): per block, `|w|` times the
/// activations with `w`'s signs (`vpsignb`, exact: activation codes never
/// reach -128, and `|-128|` is 128 unsigned), one i32 vector per block
/// scaled by `d_w d_a` (formed 8 blocks at a time).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; the row must hold `a.k / 32`
/// scales and `a.k` codes, `out` `M` values (`M == a.m`).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q8_0<const M: usize>(d: &[f16], qs: &[u8], a: &Q8Acts, out: &mut [f32]) {
    let nb = a.k / QB;
    assert!(d.len() >= nb && qs.len() >= a.k && a.m == M && out.len() == M && a.stride >= a.k);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); M];
    let mut scs = [[0.0f32; 8]; M];
    for g in 0..nb.div_ceil(8) {
        let r = (nb - 8 * g).min(8);
        let dw = halfs8(d, 8 * g, r);
        for (t, s) in scs.iter_mut().enumerate() {
            // SAFETY: s holds 8 values.
            unsafe { _mm256_storeu_ps(s.as_mut_ptr(), _mm256_mul_ps(dw, f32s8(&a.d, t * nb + 8 * g, r))) };
        }
        for (j, b) in (8 * g..8 * g + r).enumerate() {
            // SAFETY: block b has 32 codes.
            let w = unsafe { _mm256_loadu_si256(qs[32 * b..32 * b + 32].as_ptr().cast()) };
            let u = _mm256_sign_epi8(w, w);
            for t in 0..M {
                // SAFETY: the token's block b lies in its stride (>= k).
                let av = unsafe { _mm256_loadu_si256(a.qs.as_ptr().add(t * a.stride + 32 * b).cast()) };
                let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(av, w)), ones);
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(scs[t][j]), acc[t]);
            }
        }
    }
    for (t, o) in out.iter_mut().enumerate() {
        *o = hsum(acc[t]);
    }
}

/// Calls `$f::<M>($args..)` for the token count `$m` (1 to 8).
macro_rules! by_tokens {
    ($m:expr, $f:ident, $($arg:expr),*) => {
        match $m {
            1 => $f::<1>($($arg),*),
            2 => $f::<2>($($arg),*),
            3 => $f::<3>($($arg),*),
            4 => $f::<4>($($arg),*),
            5 => $f::<5>($($arg),*),
            6 => $f::<6>($($arg),*),
            7 => $f::<7>($($arg),*),
            8 => $f::<8>($($arg),*),
            m => panic!("the int8 decode kernels take 1 to 8 tokens, not {m}"),
        }
    };
}

/// `out[t] = row . x^_t` for a 4-bit row (Q4_0, Q4_1 or Q4_K) and every token of `a`.
///
/// # Safety
/// The CPU must have [`super::FEATURES`]; the row must match `a` (k / 32
/// blocks, k / 256 super-blocks for Q4_K, in the layout its format reads).
pub unsafe fn dot_q4_row(row: Q4Row, a: &Q8Acts, out: &mut [f32]) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match row {
            Q4Row::Q4K { .. } => by_tokens!(a.m, q4k, row, a, out),
            _ => by_tokens!(a.m, q4, row, a, out),
        }
    }
}

/// `out[t] = row r . x^_t` for a Q6_K row and every token of `a`.
///
/// # Safety
/// As [`dot_q4_row`].
pub unsafe fn dot_q6k_row(t: &Q6KTensor, r: usize, a: &Q8Acts, out: &mut [f32]) {
    // SAFETY: forwarded from the caller.
    unsafe { by_tokens!(a.m, q6k, t, r, a, out) }
}

/// `out[t] = row . x^_t` for a Q8_0 row and every token of `a`.
///
/// # Safety
/// As [`dot_q4_row`].
pub unsafe fn dot_q8_0_row(d: &[f16], qs: &[u8], a: &Q8Acts, out: &mut [f32]) {
    // SAFETY: forwarded from the caller.
    unsafe { by_tokens!(a.m, q8_0, d, qs, a, out) }
}
