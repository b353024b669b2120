//! Q8_0 weights times int8 activations (W8A8), llama.cpp's way of running a
//! Q8_0 matrix-vector product (`ggml_vec_dot_q8_0_q8_0`): the activations
//! are quantized once per call to llama.cpp's Q8_0 blocks of 32
//! ([`Q8Acts`], natural order), each block pair's 32 products are summed
//! exactly in i32, and the sum is scaled by `d_w * d_a` in f32.
//!
//! VNNI multiplies unsigned by signed bytes, so the signed weights go in as
//! `|w|` and their signs move onto the activations (`a` negated where `w <
//! 0`). That is exact for every code a file can hold: `|-128|` is 128 as an
//! unsigned byte, and activation codes never reach -128 (they are clamped
//! to +-127), so negating them cannot overflow.

use super::DotIsa;
use super::w4a8::{ActLayout, Q8Acts};
use half::f16;

/// Values per block.
const QB: usize = 32;

/// `out[t] = row . x^_t` for every token of `a` (at most 8; natural layout)
/// with one Q8_0 row (`d`: its `k / 32` scales, `qs`: its `k` codes, bytes
/// read as `i8`), with the kernels of `isa` (VNNI; AVX2, which AVX-512
/// without VNNI runs too; else the portable integer loop; the caller
/// checked `isa` can run here). All sum the same integers; only the f32
/// accumulation order differs.
///
/// # Panics
/// When `a` has more than 8 tokens or another layout, `out` is not one value
/// per token, or the row is not `k` values long.
pub fn dot_row(d: &[f16], qs: &[u8], a: &Q8Acts, isa: DotIsa, out: &mut [f32]) {
    assert!(a.m <= 8 && out.len() == a.m, "w8a8::dot_row: at most 8 tokens, one output each");
    assert_eq!(a.layout, ActLayout::Natural, "w8a8::dot_row: natural activation order");
    assert!(d.len() * QB == a.k && qs.len() == a.k, "w8a8::dot_row: the row is not k = {} values", a.k);
    #[cfg(target_arch = "x86_64")]
    if isa == DotIsa::Avx512Vnni {
        // SAFETY: the caller checked the features; the row holds k / 32
        // scales and k codes, as `a` holds k values per token.
        unsafe {
            match a.m {
                1 => vnni512::dot::<1>(d, qs, a, out),
                2 => vnni512::dot::<2>(d, qs, a, out),
                3 => vnni512::dot::<3>(d, qs, a, out),
                4 => vnni512::dot::<4>(d, qs, a, out),
                5 => vnni512::dot::<5>(d, qs, a, out),
                6 => vnni512::dot::<6>(d, qs, a, out),
                7 => vnni512::dot::<7>(d, qs, a, out),
                8 => vnni512::dot::<8>(d, qs, a, out),
                _ => {}
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa >= DotIsa::Avx2 {
        // SAFETY: the caller checked AVX2, FMA and F16C; the row matches `a`.
        return unsafe { super::avx2::act8::dot_q8_0_row(d, qs, a, out) };
    }
    let nb = a.k / QB;
    for (t, o) in out.iter_mut().enumerate() {
        let qa = &a.qs[t * a.stride..t * a.stride + a.k];
        *o = (0..nb)
            .map(|b| {
                let dot: i32 = (0..QB).map(|j| qs[b * QB + j] as i8 as i32 * qa[b * QB + j] as i32).sum();
                dot as f32 * (d[b].to_f32() * a.d[t * nb + b])
            })
            .sum();
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni512 {
    use super::{Q8Acts, QB};
    use half::f16;
    use std::arch::x86_64::*;

    /// Lane -> block index for the 64 code bytes of block pair `p` of a
    /// group of 16: lanes 0-7 hold block `2p`, lanes 8-15 block `2p + 1`.
    const PAIR_IDX: [[i32; 16]; 8] = {
        let mut t = [[0i32; 16]; 8];
        let mut p = 0;
        while p < 8 {
            let mut l = 0;
            while l < 16 {
                t[p][l] = (2 * p + l / 8) as i32;
                l += 1;
            }
            p += 1;
        }
        t
    };

    /// 16 blocks (512 code bytes) per step; the last step of a row whose
    /// block count is not a multiple of 16 masks its loads (zeroed codes and
    /// scales add nothing) and visits only pairs holding a valid block.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
    pub unsafe fn dot<const M: usize>(d: &[f16], qs: &[u8], a: &Q8Acts, out: &mut [f32]) {
        let nb = a.k / QB;
        let zero = _mm512_setzero_si512();
        // SAFETY (all loads below): group g covers blocks 16g..16g+r with
        // r = min(16, nb - 16g); scale lanes past r and code bytes past 32r
        // are masked off, and pair p is visited only when 2p < r, so its 64
        // activation bytes at 512g + 64p end by 32 * (nb rounded up to even)
        // <= the stride (whole groups of 4 blocks, zero padded).
        let idx: [__m512i; 8] =
            std::array::from_fn(|p| unsafe { _mm512_loadu_si512(PAIR_IDX[p].as_ptr().cast()) });
        let mut acc = [_mm512_setzero_ps(); M];
        for g in 0..nb.div_ceil(16) {
            let r = (nb - 16 * g).min(16);
            let lanes: __mmask16 = if r == 16 { !0 } else { (1u16 << r) - 1 };
            let dw =
                _mm512_cvtph_ps(unsafe { _mm256_maskz_loadu_epi16(lanes, d.as_ptr().add(16 * g).cast()) });
            let mut sc = [_mm512_setzero_ps(); M];
            for (t, sc) in sc.iter_mut().enumerate() {
                *sc = _mm512_mul_ps(dw, unsafe {
                    _mm512_maskz_loadu_ps(lanes, a.d.as_ptr().add(t * nb + 16 * g))
                });
            }
            for (p, idx) in idx.iter().enumerate().take(r.div_ceil(2)) {
                let valid = (32 * r).saturating_sub(64 * p).min(64);
                let bytes: __mmask64 = if valid == 64 { !0 } else { (1u64 << valid) - 1 };
                let w = unsafe { _mm512_maskz_loadu_epi8(bytes, qs.as_ptr().add(512 * g + 64 * p).cast()) };
                let neg = _mm512_movepi8_mask(w);
                let u = _mm512_abs_epi8(w);
                for t in 0..M {
                    let pa = unsafe { a.qs.as_ptr().add(t * a.stride + 512 * g + 64 * p) };
                    let av = unsafe { _mm512_loadu_si512(pa.cast()) };
                    let signed = _mm512_mask_sub_epi8(av, neg, zero, av);
                    let dot = _mm512_dpbusd_epi32(zero, u, signed);
                    acc[t] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(*idx, sc[t]), acc[t]);
                }
            }
        }
        for (t, o) in out.iter_mut().enumerate() {
            *o = _mm512_reduce_add_ps(acc[t]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    /// Every path this CPU can run against an f64 sum of dequantized weights times
    /// dequantized activations, over block counts with every tail length
    /// class (1, 2, 17, 18 = SmolLM2's 576, 31, 48), including codes of -128.
    #[test]
    fn every_available_path_equals_the_dequantized_product() {
        let isas = DotIsa::available_all();
        for (k, m) in [(32, 1), (64, 2), (544, 3), (576, 1), (576, 8), (992, 5), (1536, 4)] {
            let nb = k / QB;
            let rows = 3;
            let w = data(rows * k, 7 + k as u64);
            let mut qs = vec![0u8; rows * k];
            let mut d = vec![f16::ZERO; rows * nb];
            for b in 0..rows * nb {
                let blk = &w[b * QB..(b + 1) * QB];
                let amax = blk.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
                d[b] = f16::from_f32(amax / 127.0);
                let id = if amax > 0.0 { 127.0 / amax } else { 0.0 };
                for (j, &v) in blk.iter().enumerate() {
                    qs[b * QB + j] = ((v * id).round().clamp(-127.0, 127.0) as i8) as u8;
                }
            }
            // A code of -128 (legal in a file, never written by ggml).
            qs[5] = (-128i8) as u8;
            let x = data(m * k, 99 + m as u64);
            let a = Q8Acts::new(&x, m, k, ActLayout::Natural, super::super::w4a8::ActQuant::Q8_0);
            for r in 0..rows {
                let (dr, qr) = (&d[r * nb..(r + 1) * nb], &qs[r * k..(r + 1) * k]);
                for &isa in &isas {
                    let mut out = vec![f32::NAN; m];
                    dot_row(dr, qr, &a, isa, &mut out);
                    for (t, &got) in out.iter().enumerate() {
                        let xh = a.dequantized(t);
                        let (mut s, mut abs) = (0.0f64, 0.0f64);
                        for (i, &xv) in xh.iter().enumerate() {
                            let wv = dr[i / QB].to_f32() as f64 * qr[i] as i8 as f64;
                            s += xv as f64 * wv;
                            abs += (xv as f64 * wv).abs();
                        }
                        assert!(
                            (got as f64 - s).abs() <= 1e-5 * abs.max(1e-30),
                            "k={k} m={m} row {r} tok {t} {isa:?}: {got} vs {s}"
                        );
                    }
                }
            }
        }
    }
}
