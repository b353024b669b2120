//! 4-bit weights times int8 activations (W4A8), llama.cpp's way of running
//! Q4_0 / Q4_1 / Q4_K matrix-vector products: each call first quantizes
//! every activation row by the weight format's llama.cpp rule
//! ([`ActQuant`]: Q8_0 for Q4_0, Q8_1 for Q4_1, Q8_K for Q4_K; see
//! [`super::actq`]), then per weight block the nibbles are unpacked (AND
//! 0x0F / shift) and dotted with the int8 activations by `vpdpbusd`
//! (AVX-512 VNNI: unsigned 4-bit codes times signed bytes, exact in i32),
//! scaled by `d_w * d_a` in f32. The code offset (-8 for Q4_0) and the
//! minimums (Q4_1, Q4_K) are applied once per block through the block sum of
//! the quantized activations `s_a` (`d_a * sum(q_a)`, or Q8_1's f16 `s`).
//!
//! The result is exactly `sum_j w^_j x^_j` with `w^` the dequantized weight
//! and `x^ = d_a q_a` the dequantized activation, up to f32 rounding of the
//! scale products, and for Q4_1 up to the f16 rounding of `s` that llama.cpp
//! makes too; [`Q8Acts::dequantized`] gives `x^` to references.
//!
//! The activations are stored in the order the kernels consume them
//! ([`ActLayout`]), so one 64-byte load lines up with the unpacked nibbles
//! of 64 code bytes.

use super::DotIsa;
pub use super::actq::ActQuant;
use half::f16;

/// Values per activation block.
const QB: usize = 32;

/// Order of the int8 activation codes, matching a weight format's nibbles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActLayout {
    /// Q4_0 / Q4_1: per group of 4 blocks, the first 16 values of each block
    /// (the low nibbles of its 16 code bytes), then the last 16 (high nibbles).
    Quad,
    /// Q4_K: per 4 sub-blocks (128 values), sub-blocks 0, 2, 1, 3 (64 code
    /// bytes hold 0 and 2 in the low nibbles, 1 and 3 in the high ones).
    K,
    /// Q6_K: values in order (its kernel unpacks codes in value order).
    Natural,
}

impl ActLayout {
    /// Position of value `j` of block `b` in a token's code array.
    #[inline(always)]
    pub fn pos(self, b: usize, j: usize) -> usize {
        match self {
            Self::Quad => (b / 4) * 128 + (j / 16) * 64 + (b % 4) * 16 + j % 16,
            Self::K => (b / 4) * 128 + [0, 2, 1, 3][b % 4] * 32 + j,
            Self::Natural => b * 32 + j,
        }
    }
}

/// `m` activation rows quantized to int8 by one of llama.cpp's rules, with
/// a scale per block of 32 (a Q8_K scale repeated over its 8 blocks).
#[derive(Debug, Clone)]
pub struct Q8Acts {
    /// Tokens.
    pub m: usize,
    /// Values per token (a multiple of 32; of 256 for Q8_K).
    pub k: usize,
    /// Code order.
    pub layout: ActLayout,
    /// The rule the codes and scales follow.
    pub quant: ActQuant,
    /// Codes, `stride` per token (padded to whole groups of 4 blocks).
    pub qs: Vec<i8>,
    /// Bytes per token in `qs`.
    pub stride: usize,
    /// `d_a` per block, `k / 32` per token.
    pub d: Vec<f32>,
    /// The block sum the offset terms multiply: `d_a * sum(q_a)`, or for
    /// Q8_1 ggml's `f16(d_a' * sum(q_a))` (`d_a'` before its f16 rounding).
    pub s: Vec<f32>,
}

impl Q8Acts {
    /// Quantizes `x` (`m` rows of `k`, `k` whole blocks of `quant`) by `quant`.
    ///
    /// # Panics
    /// When `k` is not whole blocks or `x` is not `m * k` long.
    pub fn new(x: &[f32], m: usize, k: usize, layout: ActLayout, quant: ActQuant) -> Self {
        let bs = quant.block();
        assert!(
            k.is_multiple_of(bs) && x.len() == m * k,
            "Q8Acts: x is not {m}x{k} with k a multiple of {bs} ({})",
            quant.name()
        );
        let nb = k / QB;
        let stride = nb.div_ceil(4) * 128;
        let mut a = Self {
            m,
            k,
            layout,
            quant,
            qs: vec![0; m * stride],
            stride,
            d: vec![0.0; m * nb],
            s: vec![0.0; m * nb],
        };
        let mut q = vec![0i8; k];
        for t in 0..m {
            let (d, s) = (&mut a.d[t * nb..(t + 1) * nb], &mut a.s[t * nb..(t + 1) * nb]);
            super::actq::quantize_row(quant, &x[t * k..(t + 1) * k], &mut q, d, s);
            for b in 0..nb {
                for (j, &c) in q[b * QB..(b + 1) * QB].iter().enumerate() {
                    a.qs[t * stride + layout.pos(b, j)] = c;
                }
            }
        }
        a
    }

    /// Token `t`'s activations as the kernels see them: `d_a * q_a`, in natural order.
    pub fn dequantized(&self, t: usize) -> Vec<f32> {
        let nb = self.k / QB;
        (0..self.k)
            .map(|i| {
                let (b, j) = (i / QB, i % QB);
                self.d[t * nb + b] * self.qs[t * self.stride + self.layout.pos(b, j)] as f32
            })
            .collect()
    }
}

/// Which 4-bit format a row is in.
#[derive(Clone, Copy)]
pub enum Q4Row<'a> {
    /// Q4_0: per block an f16 scale; value `(q - 8) d`.
    Q4_0 {
        /// Scales.
        d: &'a [f16],
        /// 16 code bytes per block.
        qs: &'a [u8],
    },
    /// Q4_1: value `q d + min`.
    Q4_1 {
        /// Scales.
        d: &'a [f16],
        /// Minimums.
        m: &'a [f16],
        /// 16 code bytes per block.
        qs: &'a [u8],
    },
    /// Q4_K: per super-block of 256, `d`, `dmin`, 12 scale bytes, 128 code bytes.
    Q4K {
        /// Super-block scales.
        d: &'a [f16],
        /// Super-block minimum scales.
        dmin: &'a [f16],
        /// Packed 6-bit scales and minimums.
        scales: &'a [u8],
        /// Codes.
        qs: &'a [u8],
    },
}

/// `out[t] = row . x^_t` for every token of `a` (at most 8) with the
/// kernels of `isa` ([`DotIsa::Avx512Vnni`]; [`DotIsa::Avx2`], which
/// AVX-512 without VNNI runs too; else the portable integer loop). The
/// caller checked that `isa` can run here ([`DotIsa::available`]).
///
/// # Panics
/// When `a` has more than 8 tokens or `out` is not one value per token.
pub fn dot_row(row: Q4Row, a: &Q8Acts, isa: DotIsa, out: &mut [f32]) {
    assert!(a.m <= 8 && out.len() == a.m, "dot_row: at most 8 tokens, one output each");
    #[cfg(target_arch = "x86_64")]
    if isa == DotIsa::Avx512Vnni {
        macro_rules! go {
            ($f:ident) => {
                // SAFETY: the caller checked AVX-512 F/BW/VL/VNNI, F16C and FMA;
                // the row's slices hold k / 32 blocks (k / 256 super-blocks) like `a`.
                unsafe {
                    match a.m {
                        1 => vnni512::$f::<1>(row, a, out),
                        2 => vnni512::$f::<2>(row, a, out),
                        3 => vnni512::$f::<3>(row, a, out),
                        4 => vnni512::$f::<4>(row, a, out),
                        5 => vnni512::$f::<5>(row, a, out),
                        6 => vnni512::$f::<6>(row, a, out),
                        7 => vnni512::$f::<7>(row, a, out),
                        8 => vnni512::$f::<8>(row, a, out),
                        _ => {}
                    }
                }
            };
        }
        match row {
            Q4Row::Q4K { .. } => go!(dot_q4k),
            _ => go!(dot_q4),
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa >= DotIsa::Avx2 {
        // SAFETY: the caller checked AVX2, FMA and F16C; the row matches `a`.
        return unsafe { super::avx2::act8::dot_q4_row(row, a, out) };
    }
    out.fill(0.0);
    portable(row, a, 0, out);
}

/// Scale of the integer dot, offset factor of the block sum, and the 32
/// unsigned codes of block `b` (a sub-block for Q4_K).
#[inline]
fn block_params(row: Q4Row, b: usize) -> (f32, f32, [u8; QB]) {
    let nibbles = |qs: &[u8]| -> [u8; QB] {
        std::array::from_fn(|j| if j < 16 { qs[b * 16 + j] & 15 } else { qs[b * 16 + j - 16] >> 4 })
    };
    match row {
        Q4Row::Q4_0 { d, qs } => (d[b].to_f32(), -8.0 * d[b].to_f32(), nibbles(qs)),
        Q4Row::Q4_1 { d, m, qs } => (d[b].to_f32(), m[b].to_f32(), nibbles(qs)),
        Q4Row::Q4K { d, dmin, scales, qs } => {
            let (s, j8) = (b / 8, b % 8);
            let (sc, mm) = super::kquant::unpack_scales(&scales[s * 12..s * 12 + 12]);
            let bytes = &qs[s * 128 + (j8 / 2) * 32..s * 128 + (j8 / 2) * 32 + 32];
            let codes = std::array::from_fn(|j| if j8 % 2 == 0 { bytes[j] & 15 } else { bytes[j] >> 4 });
            (d[s].to_f32() * sc[j8] as f32, -(dmin[s].to_f32() * mm[j8] as f32), codes)
        }
    }
}

/// Portable W4A8 over blocks `b0..`, added to `out` (the VNNI Q4_0 / Q4_1
/// kernel finishes its last `nb % 16` blocks here).
fn portable(row: Q4Row, a: &Q8Acts, b0: usize, out: &mut [f32]) {
    let nb = a.k / QB;
    for b in b0..nb {
        let (scale, off, codes) = block_params(row, b);
        for (t, o) in out.iter_mut().enumerate() {
            let qa = &a.qs[t * a.stride..(t + 1) * a.stride];
            let dot: i32 =
                codes.iter().enumerate().map(|(j, &c)| c as i32 * qa[a.layout.pos(b, j)] as i32).sum();
            *o += dot as f32 * (scale * a.d[t * nb + b]) + off * a.s[t * nb + b];
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni512 {
    use super::{Q4Row, Q8Acts, QB};
    use std::arch::x86_64::*;

    /// Lane -> block index vectors: lanes `4i..4i+4` of quad `q` belong to block `4q + i`.
    const QUAD_IDX: [[i32; 16]; 4] = {
        let mut t = [[0i32; 16]; 4];
        let mut q = 0;
        while q < 4 {
            let mut l = 0;
            while l < 16 {
                t[q][l] = (4 * q + l / 4) as i32;
                l += 1;
            }
            q += 1;
        }
        t
    };

    /// Q4_0 and Q4_1: 16 blocks (256 code bytes) per step, nibbles unpacked
    /// once and dotted with every token. The last step of a row whose block
    /// count is not a multiple of 16 (576 values = 18 blocks, SmolLM2's
    /// hidden size) runs the same code with masked loads: zeroed codes,
    /// scales and minimums contribute nothing, and only quads holding a
    /// valid block are visited, so every load stays inside the row and the
    /// activations' quad-padded stride. (A scalar tail here cost a third of
    /// the decode time at 576.)
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
    pub unsafe fn dot_q4<const M: usize>(row: Q4Row, a: &Q8Acts, out: &mut [f32]) {
        let (d, mins, qs) = match row {
            Q4Row::Q4_0 { d, qs } => (d, None, qs),
            Q4Row::Q4_1 { d, m, qs } => (d, Some(m), qs),
            Q4Row::Q4K { .. } => unreachable!("q4_k has its own kernel"),
        };
        let nb = a.k / QB;
        let nib = _mm512_set1_epi8(15);
        // SAFETY (all loads below): group g covers blocks 16g..16g+r with
        // r = min(16, nb - 16g); lanes past r are masked off in the scale,
        // minimum, d and s loads (16 lanes, one per block), code bytes past
        // 16r are masked off, and quad q is visited only when 4q < r, so its
        // 128 activation bytes at (4g + q) * 128 lie inside the stride
        // (padded to whole quads).
        let idx: [__m512i; 4] =
            std::array::from_fn(|q| unsafe { _mm512_loadu_si512(QUAD_IDX[q].as_ptr().cast()) });
        let mut acc = [_mm512_setzero_ps(); M];
        let mut corr = [_mm512_setzero_ps(); M];
        for g in 0..nb.div_ceil(16) {
            let r = (nb - 16 * g).min(16);
            let lanes: __mmask16 = if r == 16 { !0 } else { (1u16 << r) - 1 };
            let dw =
                _mm512_cvtph_ps(unsafe { _mm256_maskz_loadu_epi16(lanes, d.as_ptr().add(16 * g).cast()) });
            let off = match mins {
                Some(mn) => _mm512_cvtph_ps(unsafe {
                    _mm256_maskz_loadu_epi16(lanes, mn.as_ptr().add(16 * g).cast())
                }),
                None => _mm512_mul_ps(dw, _mm512_set1_ps(-8.0)),
            };
            let mut sc = [_mm512_setzero_ps(); M];
            for t in 0..M {
                let base = t * nb + 16 * g;
                unsafe {
                    sc[t] = _mm512_mul_ps(dw, _mm512_maskz_loadu_ps(lanes, a.d.as_ptr().add(base)));
                    corr[t] =
                        _mm512_fmadd_ps(off, _mm512_maskz_loadu_ps(lanes, a.s.as_ptr().add(base)), corr[t]);
                }
            }
            for (q, idx) in idx.iter().enumerate().take(r.div_ceil(4)) {
                let valid = (16 * r).saturating_sub(64 * q).min(64);
                let bytes: __mmask64 = if valid == 64 { !0 } else { (1u64 << valid) - 1 };
                let v = unsafe { _mm512_maskz_loadu_epi8(bytes, qs.as_ptr().add(256 * g + 64 * q).cast()) };
                let lo = _mm512_and_si512(v, nib);
                let hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                for t in 0..M {
                    let pa = unsafe { a.qs.as_ptr().add(t * a.stride + (4 * g + q) * 128) };
                    let (alo, ahi) =
                        unsafe { (_mm512_loadu_si512(pa.cast()), _mm512_loadu_si512(pa.add(64).cast())) };
                    let dot =
                        _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, alo), hi, ahi);
                    acc[t] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(*idx, sc[t]), acc[t]);
                }
            }
        }
        for (t, o) in out.iter_mut().enumerate() {
            *o = _mm512_reduce_add_ps(_mm512_add_ps(acc[t], corr[t]));
        }
    }

    /// Lane -> sub-block index for the low / high nibbles of code bytes
    /// `64h..64h+64` of a super-block: lanes 0-7 and 8-15 hold sub-blocks
    /// (4h, 4h+2) in the low nibbles and (4h+1, 4h+3) in the high ones.
    const K_IDX: [[i32; 16]; 4] = {
        let mut t = [[0i32; 16]; 4];
        let mut h = 0;
        while h < 2 {
            let mut l = 0;
            while l < 16 {
                let top = (l / 8) as i32 * 2;
                t[2 * h][l] = 4 * h as i32 + top;
                t[2 * h + 1][l] = 4 * h as i32 + top + 1;
                l += 1;
            }
            h += 1;
        }
        t
    };

    /// Q4_K: one super-block (256 values, 128 code bytes) per step.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
    pub unsafe fn dot_q4k<const M: usize>(row: Q4Row, a: &Q8Acts, out: &mut [f32]) {
        let Q4Row::Q4K { d, dmin, scales, qs } = row else { unreachable!("q4_k kernel") };
        let nb = a.k / QB;
        let nsb = a.k / 256;
        let nib = _mm512_set1_epi8(15);
        // SAFETY (all loads below): super-block s covers blocks 8s..8s+8 < nb,
        // code bytes 128s..128s+128 and activation bytes 256s..256s+256.
        let idx: [__m512i; 4] =
            std::array::from_fn(|i| unsafe { _mm512_loadu_si512(K_IDX[i].as_ptr().cast()) });
        let mut acc = [_mm512_setzero_ps(); M];
        let mut corr = [_mm256_setzero_ps(); M];
        for s in 0..nsb {
            let (sc, mm) = super::super::kquant::unpack_scales(&scales[12 * s..12 * s + 12]);
            let (df, mf) = (d[s].to_f32(), dmin[s].to_f32());
            let sw: [f32; 8] = std::array::from_fn(|j| df * sc[j] as f32);
            let mw: [f32; 8] = std::array::from_fn(|j| -(mf * mm[j] as f32));
            let (swv, mwv) = unsafe { (_mm256_loadu_ps(sw.as_ptr()), _mm256_loadu_ps(mw.as_ptr())) };
            let mut scv = [_mm512_setzero_ps(); M];
            for t in 0..M {
                let base = t * nb + 8 * s;
                unsafe {
                    let s8 = _mm256_mul_ps(swv, _mm256_loadu_ps(a.d.as_ptr().add(base)));
                    scv[t] = _mm512_castps256_ps512(s8);
                    corr[t] = _mm256_fmadd_ps(mwv, _mm256_loadu_ps(a.s.as_ptr().add(base)), corr[t]);
                }
            }
            for h in 0..2 {
                let v = unsafe { _mm512_loadu_si512(qs.as_ptr().add(128 * s + 64 * h).cast()) };
                let lo = _mm512_and_si512(v, nib);
                let hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                for t in 0..M {
                    let pa = unsafe { a.qs.as_ptr().add(t * a.stride + 256 * s + 128 * h) };
                    let (alo, ahi) =
                        unsafe { (_mm512_loadu_si512(pa.cast()), _mm512_loadu_si512(pa.add(64).cast())) };
                    let dlo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, alo);
                    let dhi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, ahi);
                    let slo = _mm512_permutexvar_ps(idx[2 * h], scv[t]);
                    let shi = _mm512_permutexvar_ps(idx[2 * h + 1], scv[t]);
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dlo), slo, acc[t]);
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dhi), shi, acc[t]);
                }
            }
        }
        for (t, o) in out.iter_mut().enumerate() {
            let c = corr[t];
            let c4 = _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
            let mut cs = [0.0f32; 4];
            unsafe { _mm_storeu_ps(cs.as_mut_ptr(), c4) };
            *o = _mm512_reduce_add_ps(acc[t]) + cs.iter().sum::<f32>();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::quant::blocks::{BlockFormat, BlockTensor};
    use crate::kernels::quant::kquant::Q4KTensor;

    fn data(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.0 - 1.0).powi(3)).collect()
    }

    #[test]
    fn layouts_are_permutations_and_round_trip_within_half_a_step() {
        for layout in [ActLayout::Quad, ActLayout::K] {
            let k = 512;
            let mut seen = vec![false; k];
            for b in 0..k / QB {
                for j in 0..QB {
                    let p = layout.pos(b, j);
                    assert!(!seen[p], "{layout:?} {b} {j}");
                    seen[p] = true;
                }
            }
            // The codes land where the layout says: the round trip is the
            // rule's own `d * q` in value order (the rule's accuracy is
            // tested in `actq`).
            let quant = if layout == ActLayout::K { ActQuant::Q8K } else { ActQuant::Q8_0 };
            let x = data(2 * k, 3);
            let a = Q8Acts::new(&x, 2, k, layout, quant);
            for t in 0..2 {
                let (mut q, mut d, mut s) = (vec![0i8; k], vec![0.0; k / QB], vec![0.0; k / QB]);
                super::super::actq::quantize_row(quant, &x[t * k..(t + 1) * k], &mut q, &mut d, &mut s);
                let want: Vec<f32> = q.iter().enumerate().map(|(i, &c)| d[i / QB] * f32::from(c)).collect();
                assert_eq!(a.dequantized(t), want, "{layout:?} token {t}");
            }
        }
    }

    /// Every path this CPU can run (portable, AVX2, VNNI) against f64 dot
    /// products of x^ with the dequantized rows.
    #[test]
    fn every_available_path_equals_the_dequantized_product() {
        let isas = DotIsa::available_all();
        // Block counts 1, 2, 17, 18 (SmolLM2's 576), 24 and 31: the Q4_0 /
        // Q4_1 VNNI kernel's masked last group with 1 to 15 blocks, alone
        // and after whole groups; Q4_K where k is whole super-blocks.
        for (k, m) in [(32, 1), (64, 3), (544, 2), (576, 1), (576, 8), (768, 1), (768, 3), (768, 8), (992, 5)]
        {
            check_dot_rows(k, m, &isas);
        }
    }

    fn check_dot_rows(k: usize, m: usize, isas: &[DotIsa]) {
        let n = 3;
        let w = data(n * k, 1);
        {
            let x = data(m * k, 2 + m);
            for which in 0..3 {
                if which == 2 && !k.is_multiple_of(256) {
                    continue;
                }
                let mut deq = vec![0.0f32; n * k];
                let (bt, kt);
                let layout = if which == 2 { ActLayout::K } else { ActLayout::Quad };
                match which {
                    0 | 1 => {
                        let f = if which == 0 { BlockFormat::Q4_0 } else { BlockFormat::Q4_1 };
                        let mut t = BlockTensor::zeros(f, n, k).unwrap();
                        t.quantize_from(&w);
                        t.dequantize_into(&mut deq);
                        bt = Some(t);
                        kt = None;
                    }
                    _ => {
                        let mut t = Q4KTensor::zeros(n, k).unwrap();
                        t.quantize_from(&w);
                        t.dequantize_into(&mut deq);
                        bt = None;
                        kt = Some(t);
                    }
                }
                let quant = [ActQuant::Q8_0, ActQuant::Q8_1, ActQuant::Q8K][which];
                let a = Q8Acts::new(&x, m, k, layout, quant);
                for r in 0..n {
                    let row = match (&bt, &kt) {
                        (Some(t), _) => {
                            let (b0, b1) = (r * k / 32, (r + 1) * k / 32);
                            let qs = &t.qs[b0 * 16..b1 * 16];
                            if t.format == BlockFormat::Q4_0 {
                                Q4Row::Q4_0 { d: &t.scales[b0..b1], qs }
                            } else {
                                Q4Row::Q4_1 { d: &t.scales[b0..b1], m: &t.mins[b0..b1], qs }
                            }
                        }
                        (_, Some(t)) => {
                            let (s0, s1) = (r * k / 256, (r + 1) * k / 256);
                            Q4Row::Q4K {
                                d: &t.d[s0..s1],
                                dmin: &t.dmin[s0..s1],
                                scales: &t.scales[s0 * 12..s1 * 12],
                                qs: &t.qs[s0 * 128..s1 * 128],
                            }
                        }
                        _ => unreachable!(),
                    };
                    for &isa in isas {
                        let mut out = vec![0.0f32; m];
                        dot_row(row, &a, isa, &mut out);
                        for (t, &got) in out.iter().enumerate() {
                            let xh = a.dequantized(t);
                            let (mut s, mut abs) = (0.0f64, 0.0f64);
                            for (&xv, &wv) in xh.iter().zip(&deq[r * k..(r + 1) * k]) {
                                s += xv as f64 * wv as f64;
                                abs += (xv as f64 * wv as f64).abs();
                            }
                            // Q4_1's minimum term multiplies Q8_1's f16 `s`,
                            // not the sum of the dequantized activations.
                            if let Q4Row::Q4_1 { m: mins, .. } = row {
                                for (b, mn) in mins.iter().enumerate() {
                                    let i = t * (k / QB) + b;
                                    let sum: f64 =
                                        xh[b * QB..(b + 1) * QB].iter().map(|&v| f64::from(v)).sum();
                                    let c = f64::from(mn.to_f32()) * (f64::from(a.s[i]) - sum);
                                    s += c;
                                    abs += c.abs();
                                }
                            }
                            let err = (got as f64 - s).abs();
                            assert!(
                                err <= 1e-5 * abs,
                                "format {which} k={k} m={m} row {r} tok {t} {isa:?}: {got} vs {s}"
                            );
                        }
                    }
                }
            }
        }
    }
}
