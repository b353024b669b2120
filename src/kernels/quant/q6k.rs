//! llama.cpp's Q6_K (6.5625 bits per weight), the other half of the common
//! Q4_K_M mix: super-blocks of 256 values in 16 sub-blocks of 16, each
//! super-block an f16 scale `d` and 16 signed 8-bit sub-block scales
//! `sc[j]`; a value decodes as `d * sc[j] * (q - 32)` with `q` a 6-bit code
//! (ggml's `dequantize_row_q6_K`, in that order of f32 operations).
//!
//! Layout as ggml's `block_q6_K` (210 bytes): `ql[128]` (low 4 bits),
//! `qh[64]` (high 2 bits), `scales[16]`, then `d`. Per half (128 values) `h`,
//! byte `l < 64` of `ql[64h..]` holds value `128h + l` in its low nibble and
//! `128h + 64 + l` in its high one; byte `l < 32` of `qh[32h..]` holds the
//! high bits of values `128h + l + 32i` in bits `2i..2i+2`.
//!
//! Decode ([`dot_row`]) follows llama.cpp's Q6_K x Q8_K dot: the activations
//! quantized by llama.cpp's Q8_K rule ([`Q8Acts`] in natural order), the 6-bit
//! codes unpacked to bytes and dotted by `vpdpbusd` (AVX-512 VNNI), the
//! `- 32` offset through a second `vpdpbusd` against a constant 32, each
//! group of 16 scaled by `d * sc[j] * d_a` in f32.
//!
//! The quantizer is ggml's rule without its scale search: per sub-block,
//! the value of largest magnitude maps to code -32; the super-block scale
//! maps the largest sub-block scale to -128; sub-block scales are rounded
//! away from zero, so nothing clamps by more than a step.

use super::kquant::QK_K;
use super::w4a8::Q8Acts;
use super::{clamp_to_i32, rne};
use anyhow::{Result, bail};
use half::f16;
use rayon::prelude::*;

/// Bytes of low code bits per super-block.
pub const QL_BYTES: usize = QK_K / 2;
/// Bytes of high code bits per super-block.
pub const QH_BYTES: usize = QK_K / 4;
/// Sub-block scales per super-block.
pub const SCALES: usize = QK_K / 16;
/// Bytes per super-block in ggml's layout: 210.
pub const BLOCK_BYTES: usize = QL_BYTES + QH_BYTES + SCALES + 2;

/// A `[rows, cols]` tensor in Q6_K (`cols` a multiple of 256), stored
/// structure-of-arrays; the byte count equals ggml's array of blocks.
#[derive(Debug, Clone)]
pub struct Q6KTensor {
    /// Rows.
    pub rows: usize,
    /// Columns (a multiple of [`QK_K`]).
    pub cols: usize,
    /// Super-block scales, row-major.
    pub d: Vec<f16>,
    /// [`SCALES`] signed sub-block scales per super-block.
    pub scales: Vec<i8>,
    /// [`QL_BYTES`] per super-block.
    pub ql: Vec<u8>,
    /// [`QH_BYTES`] per super-block.
    pub qh: Vec<u8>,
}

/// The 256 codes (0..64) of super-block `ql`/`qh`, in value order.
#[inline(always)]
pub fn unpack_codes(ql: &[u8], qh: &[u8]) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for h in 0..2 {
        let (l, hb) = (&ql[64 * h..64 * h + 64], &qh[32 * h..32 * h + 32]);
        for i in 0..64 {
            let high = |v: usize| (hb[v % 32] >> (2 * (v / 32))) & 3;
            q[128 * h + i] = (l[i] & 15) | (high(i) << 4);
            q[128 * h + 64 + i] = (l[i] >> 4) | (high(64 + i) << 4);
        }
    }
    q
}

/// Packs 256 codes (each < 64) into `ql` and `qh`, the inverse of [`unpack_codes`].
pub fn pack_codes(q: &[u8], ql: &mut [u8], qh: &mut [u8]) {
    for h in 0..2 {
        let q = &q[128 * h..128 * h + 128];
        for i in 0..64 {
            ql[64 * h + i] = (q[i] & 15) | ((q[64 + i] & 15) << 4);
        }
        for l in 0..32 {
            qh[32 * h + l] =
                (q[l] >> 4) | ((q[32 + l] >> 4) << 2) | ((q[64 + l] >> 4) << 4) | ((q[96 + l] >> 4) << 6);
        }
    }
}

impl Q6KTensor {
    /// A zeroed tensor; `cols` must be a multiple of 256.
    pub fn zeros(rows: usize, cols: usize) -> Result<Self> {
        if !cols.is_multiple_of(QK_K) {
            bail!("q6_k needs rows of a multiple of {QK_K} values, got {cols}");
        }
        let n = rows * cols / QK_K;
        Ok(Self {
            rows,
            cols,
            d: vec![f16::ZERO; n],
            scales: vec![0; n * SCALES],
            ql: vec![0; n * QL_BYTES],
            qh: vec![0; n * QH_BYTES],
        })
    }

    /// Total bytes (210 per super-block).
    pub fn storage_bytes(&self) -> usize {
        self.d.len() * BLOCK_BYTES
    }

    /// Quantizes `x` (`rows * cols` values) into this tensor, in parallel.
    ///
    /// # Panics
    /// When `x` has the wrong length.
    pub fn quantize_from(&mut self, x: &[f32]) {
        assert_eq!(x.len(), self.rows * self.cols, "Q6KTensor::quantize_from: shape mismatch");
        const TASK: usize = 1024;
        self.d
            .par_chunks_mut(TASK)
            .zip(self.scales.par_chunks_mut(TASK * SCALES))
            .zip(self.ql.par_chunks_mut(TASK * QL_BYTES))
            .zip(self.qh.par_chunks_mut(TASK * QH_BYTES))
            .zip(x.par_chunks(TASK * QK_K))
            .for_each(|((((d, s), ql), qh), x)| {
                for (b, x) in x.chunks_exact(QK_K).enumerate() {
                    d[b] = quantize_block(
                        x,
                        &mut s[b * SCALES..(b + 1) * SCALES],
                        &mut ql[b * QL_BYTES..(b + 1) * QL_BYTES],
                        &mut qh[b * QH_BYTES..(b + 1) * QH_BYTES],
                    );
                }
            });
    }

    /// Super-blocks `b0..b1` (row-major over the whole tensor) into `out`:
    /// `(d * sc) * (q - 32)` in f32, as ggml.
    pub fn dequantize_range(&self, b0: usize, b1: usize, out: &mut [f32]) {
        dequantize_blocks(
            &self.d[b0..b1],
            &self.scales[b0 * SCALES..b1 * SCALES],
            &self.ql[b0 * QL_BYTES..b1 * QL_BYTES],
            &self.qh[b0 * QH_BYTES..b1 * QH_BYTES],
            out,
        );
    }
}

crate::kernels::simd_dispatch! {
    /// Super-blocks (`d`, their scales and codes) into `out`, compiled per
    /// ISA level so the prefill tiles are vector code on AVX2 as well.
    fn dequantize_blocks(d: &[f16], scales: &[i8], ql: &[u8], qh: &[u8], out: &mut [f32]) {
        for (b, o) in out.chunks_exact_mut(QK_K).enumerate().take(d.len()) {
            let q = unpack_codes(&ql[b * QL_BYTES..], &qh[b * QH_BYTES..]);
            let d = d[b].to_f32();
            for (j, o) in o.chunks_exact_mut(16).enumerate() {
                let s = d * scales[b * SCALES + j] as f32;
                for (o, &q) in o.iter_mut().zip(&q[16 * j..16 * j + 16]) {
                    *o = s * (q as i32 - 32) as f32;
                }
            }
        }
    }
}

/// Quantizes one super-block; returns `d`.
fn quantize_block(x: &[f32], sc: &mut [i8], ql: &mut [u8], qh: &mut [u8]) -> f16 {
    let mut scale = [0.0f32; SCALES];
    for (j, xs) in x.chunks_exact(16).enumerate() {
        // The value of largest magnitude (NaN skipped) maps to code -32.
        let mx = xs.iter().fold(0.0f32, |a, &v| if v.abs() > a.abs() { v } else { a });
        scale[j] = -mx / 32.0;
    }
    let ms = scale.iter().fold(0.0f32, |a, &v| if v.abs() > a.abs() { v } else { a });
    let mut q = [32u8; QK_K];
    if ms == 0.0 {
        sc.fill(0);
        pack_codes(&q, ql, qh);
        return f16::ZERO;
    }
    let iscale = -128.0 / ms;
    let d = f16::from_f32(1.0 / iscale);
    for j in 0..SCALES {
        // Rounded away from zero, so the sub-block's grid is never narrower
        // than its values (nearest rounding, as ggml's, can clamp a value of
        // a small sub-block by several steps).
        let s = iscale * scale[j];
        sc[j] = clamp_to_i32(s.signum() * (s.abs() - 1e-4).ceil(), -128.0, 127.0) as i8;
        let e = d.to_f32() * sc[j] as f32;
        let inv = if e != 0.0 { 1.0 / e } else { 0.0 };
        for i in 16 * j..16 * j + 16 {
            q[i] = (clamp_to_i32(rne(x[i] * inv), -32.0, 31.0) + 32) as u8;
        }
    }
    pack_codes(&q, ql, qh);
    d
}

/// `out[t] = row r . x^_t` for every token of `a` (at most 8; natural
/// layout), with the kernels of `isa` (VNNI; AVX2, which AVX-512 without
/// VNNI runs too; else the portable integer loop; the caller checked `isa`
/// can run here).
///
/// # Panics
/// When `a` has more than 8 tokens, another layout, or `out` is not one value per token.
pub fn dot_row(t: &Q6KTensor, r: usize, a: &Q8Acts, isa: super::DotIsa, out: &mut [f32]) {
    use super::DotIsa;
    assert!(a.m <= 8 && out.len() == a.m, "q6k::dot_row: at most 8 tokens, one output each");
    assert_eq!(a.layout, super::w4a8::ActLayout::Natural, "q6k::dot_row: natural activation order");
    #[cfg(target_arch = "x86_64")]
    if isa == DotIsa::Avx512Vnni {
        // SAFETY: the caller checked the features; row r holds k / 256
        // super-blocks, as `a` holds k values per token.
        unsafe {
            match a.m {
                1 => vnni512::dot::<1>(t, r, a, out),
                2 => vnni512::dot::<2>(t, r, a, out),
                3 => vnni512::dot::<3>(t, r, a, out),
                4 => vnni512::dot::<4>(t, r, a, out),
                5 => vnni512::dot::<5>(t, r, a, out),
                6 => vnni512::dot::<6>(t, r, a, out),
                7 => vnni512::dot::<7>(t, r, a, out),
                8 => vnni512::dot::<8>(t, r, a, out),
                _ => {}
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa >= DotIsa::Avx2 {
        // SAFETY: the caller checked AVX2, FMA and F16C; row r matches `a`.
        return unsafe { super::avx2::act8::dot_q6k_row(t, r, a, out) };
    }
    let (nsb, nb) = (a.k / QK_K, a.k / 32);
    out.fill(0.0);
    for s in 0..nsb {
        let b = r * nsb + s;
        let q = unpack_codes(&t.ql[b * QL_BYTES..], &t.qh[b * QH_BYTES..]);
        let d = t.d[b].to_f32();
        for j in 0..SCALES {
            let sw = d * t.scales[b * SCALES + j] as f32;
            for (tok, o) in out.iter_mut().enumerate() {
                let qa = &a.qs[tok * a.stride + 256 * s + 16 * j..];
                let dot: i32 = (0..16).map(|i| (q[16 * j + i] as i32 - 32) * qa[i] as i32).sum();
                *o += dot as f32 * (sw * a.d[tok * nb + 8 * s + j / 2]);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni512 {
    use super::{Q6KTensor, Q8Acts, QH_BYTES, QK_K, QL_BYTES, SCALES};
    use std::arch::x86_64::*;

    /// Lane `i` of the dot of 64 values from `64k` belongs to sub-block `4k + i / 4`.
    const LANE: [[i32; 16]; 4] = {
        let mut t = [[0i32; 16]; 4];
        let mut k = 0;
        while k < 4 {
            let mut i = 0;
            while i < 16 {
                t[k][i] = (4 * k + i / 4) as i32;
                i += 1;
            }
            k += 1;
        }
        t
    };
    /// Sub-block `j` of 16 lies in activation block `j / 2`.
    const HALF: [i32; 16] = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7];

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
    pub unsafe fn dot<const M: usize>(t: &Q6KTensor, r: usize, a: &Q8Acts, out: &mut [f32]) {
        let (nsb, nb) = (a.k / QK_K, a.k / 32);
        let (m4, m3, c32) = (_mm512_set1_epi8(15), _mm512_set1_epi8(3), _mm512_set1_epi8(32));
        // Per 16-bit lane shift counts: bytes 0..32 by the first, 32..64 by the second.
        let sh02 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
        let sh46 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
        // SAFETY (all loads below): super-block b = r * nsb + s is inside the
        // tensor (ql 128, qh 64, scales 16 bytes from b's start); each token's
        // activations hold 256 bytes from 256s and 8 scales from 8s.
        let lane: [__m512i; 4] =
            std::array::from_fn(|k| unsafe { _mm512_loadu_si512(LANE[k].as_ptr().cast()) });
        let half = unsafe { _mm512_loadu_si512(HALF.as_ptr().cast()) };
        let mut acc = [_mm512_setzero_ps(); M];
        for s in 0..nsb {
            let b = r * nsb + s;
            let sc8 = unsafe { _mm_loadu_si128(t.scales.as_ptr().add(b * SCALES).cast()) };
            let scw =
                _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)), _mm512_set1_ps(t.d[b].to_f32()));
            let mut sct = [_mm512_setzero_ps(); M];
            for (tok, v) in sct.iter_mut().enumerate() {
                let da = unsafe { _mm256_loadu_ps(a.d.as_ptr().add(tok * nb + 8 * s)) };
                *v = _mm512_mul_ps(scw, _mm512_permutexvar_ps(half, _mm512_castps256_ps512(da)));
            }
            for c in 0..2 {
                let qlv = unsafe { _mm512_loadu_si512(t.ql.as_ptr().add(b * QL_BYTES + 64 * c).cast()) };
                let qhv = unsafe { _mm256_loadu_si256(t.qh.as_ptr().add(b * QH_BYTES + 32 * c).cast()) };
                let qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qhv), qhv, 1);
                let h01 = _mm512_and_si512(_mm512_srlv_epi16(qh2, sh02), m3);
                let h23 = _mm512_and_si512(_mm512_srlv_epi16(qh2, sh46), m3);
                let qa = _mm512_or_si512(_mm512_and_si512(qlv, m4), _mm512_slli_epi16(h01, 4));
                let qb = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16(qlv, 4), m4),
                    _mm512_slli_epi16(h23, 4),
                );
                for (h, q) in [qa, qb].into_iter().enumerate() {
                    let k = 2 * c + h;
                    for tok in 0..M {
                        let pa = unsafe { a.qs.as_ptr().add(tok * a.stride + 256 * s + 64 * k) };
                        let av = unsafe { _mm512_loadu_si512(pa.cast()) };
                        let z = _mm512_setzero_si512();
                        let dot =
                            _mm512_sub_epi32(_mm512_dpbusd_epi32(z, q, av), _mm512_dpbusd_epi32(z, c32, av));
                        let sl = _mm512_permutexvar_ps(lane[k], sct[tok]);
                        acc[tok] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sl, acc[tok]);
                    }
                }
            }
        }
        for (tok, o) in out.iter_mut().enumerate() {
            *o = _mm512_reduce_add_ps(acc[tok]);
        }
    }
}

#[cfg(test)]
mod tests;
