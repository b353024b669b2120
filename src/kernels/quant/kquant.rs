//! llama.cpp's Q4_K ("K-quant", 4.5 bits per weight): super-blocks of 256
//! values made of 8 sub-blocks of 32. Each super-block stores an f16 scale
//! `d`, an f16 `dmin`, 12 bytes of packed 6-bit sub-block scales `sc[j]` and
//! minimums `m[j]`, and 128 bytes of 4-bit codes; a value decodes as
//! `d * sc[j] * q - dmin * m[j]` (ggml's `dequantize_row_q4_K`).
//!
//! Layout as in ggml's `block_q4_K`: the codes of sub-blocks `2c` and
//! `2c + 1` share the 32 bytes `32c..32c + 32`, `2c` in the low nibbles and
//! `2c + 1` in the high ones; the 12 scale bytes hold `sc[0..4]` and
//! `m[0..4]` in the low 6 bits of bytes 0..8 and `sc[4..8]`, `m[4..8]` split
//! into a low nibble in bytes 8..12 and two high bits on top of bytes 0..8
//! ([`pack_scales`], the inverse of ggml's `get_scale_min_k4`).
//!
//! The quantizer is **per sub-block min/max**, not ggml's weighted scale
//! search (`make_qkx2_quants`): the minimum is `min(0, min x)`, the scale
//! `(max x - min) / 15`; the 6-bit indices are rounded *up* (after rounding
//! `d` and `dmin` up to the next f16), so every sub-block's grid covers its
//! whole range and nothing clips: `|x - deq(q(x))| <= d * sc[j] / 2` (plus
//! f32 rounding). It is one pass and cheap; ggml's search buys a lower RMSE
//! at roughly 20 passes per sub-block.

use super::{clamp_to_i32, rne};
use crate::kernels::simd_dispatch;
use anyhow::{Result, bail};
use half::f16;
use rayon::prelude::*;

/// Values per super-block.
pub const QK_K: usize = 256;
/// Bytes of codes per super-block.
pub const QS_BYTES: usize = QK_K / 2;
/// Bytes of packed scales and minimums per super-block.
pub const SCALE_BYTES: usize = 12;
/// Bytes per super-block (`d`, `dmin`, scales, codes): 144, 4.5 bits per weight.
pub const BLOCK_BYTES: usize = 4 + SCALE_BYTES + QS_BYTES;

/// Super-blocks per parallel task (4 MiB of f32).
const TASK_BLOCKS: usize = 4096;

/// Packs 8 six-bit scales and 8 six-bit minimums (each < 64) as ggml does.
pub fn pack_scales(sc: &[u8; 8], m: &[u8; 8]) -> [u8; SCALE_BYTES] {
    let mut p = [0u8; SCALE_BYTES];
    for j in 0..4 {
        p[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        p[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
        p[j + 8] = (sc[j + 4] & 15) | ((m[j + 4] & 15) << 4);
    }
    p
}

/// ggml's `get_scale_min_k4` for all 8 sub-blocks: (scales, minimums).
#[inline(always)]
pub fn unpack_scales(p: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut m) = ([0u8; 8], [0u8; 8]);
    for j in 0..4 {
        sc[j] = p[j] & 63;
        m[j] = p[j + 4] & 63;
        sc[j + 4] = (p[j + 8] & 15) | ((p[j] >> 6) << 4);
        m[j + 4] = (p[j + 8] >> 4) | ((p[j + 4] >> 6) << 4);
    }
    (sc, m)
}

/// A `[rows, cols]` tensor in Q4_K (`cols` a multiple of 256), stored
/// structure-of-arrays; the byte count equals ggml's array of blocks.
#[derive(Debug, Clone)]
pub struct Q4KTensor {
    /// Rows.
    pub rows: usize,
    /// Columns (a multiple of [`QK_K`]).
    pub cols: usize,
    /// Super-block scales, row-major.
    pub d: Vec<f16>,
    /// Super-block minimum scales.
    pub dmin: Vec<f16>,
    /// [`SCALE_BYTES`] packed 6-bit scales and minimums per super-block.
    pub scales: Vec<u8>,
    /// [`QS_BYTES`] of 4-bit codes per super-block.
    pub qs: Vec<u8>,
}

impl Q4KTensor {
    /// A zeroed tensor; `cols` must be a multiple of 256.
    pub fn zeros(rows: usize, cols: usize) -> Result<Self> {
        if !cols.is_multiple_of(QK_K) {
            bail!("q4_k needs rows of a multiple of {QK_K} values, got {cols}");
        }
        let n = rows * cols / QK_K;
        Ok(Self {
            rows,
            cols,
            d: vec![f16::ZERO; n],
            dmin: vec![f16::ZERO; n],
            scales: vec![0; n * SCALE_BYTES],
            qs: vec![0; n * QS_BYTES],
        })
    }

    /// Total bytes (144 per super-block).
    pub fn storage_bytes(&self) -> usize {
        self.d.len() * BLOCK_BYTES
    }

    /// Quantizes `x` (`rows * cols` values) into this tensor, in parallel.
    ///
    /// # Panics
    /// When `x` has the wrong length.
    pub fn quantize_from(&mut self, x: &[f32]) {
        assert_eq!(x.len(), self.rows * self.cols, "Q4KTensor::quantize_from: shape mismatch");
        self.d
            .par_chunks_mut(TASK_BLOCKS)
            .zip(self.dmin.par_chunks_mut(TASK_BLOCKS))
            .zip(self.scales.par_chunks_mut(TASK_BLOCKS * SCALE_BYTES))
            .zip(self.qs.par_chunks_mut(TASK_BLOCKS * QS_BYTES))
            .zip(x.par_chunks(TASK_BLOCKS * QK_K))
            .for_each(|((((d, dm), s), q), x)| quantize_blocks(x, d, dm, s, q));
    }

    /// Dequantizes into `out` (`rows * cols` values), in parallel.
    ///
    /// # Panics
    /// When `out` has the wrong length.
    pub fn dequantize_into(&self, out: &mut [f32]) {
        assert_eq!(out.len(), self.rows * self.cols, "Q4KTensor::dequantize_into: shape mismatch");
        super::stream_fill(out, TASK_BLOCKS * QK_K, |off, o| {
            self.dequantize_range(off / QK_K, (off + o.len()) / QK_K, o)
        });
    }

    /// Super-blocks `b0..b1` (row-major over the whole tensor) into `out`, serially.
    pub fn dequantize_range(&self, b0: usize, b1: usize, out: &mut [f32]) {
        dequantize_blocks(
            &self.d[b0..b1],
            &self.dmin[b0..b1],
            &self.scales[b0 * SCALE_BYTES..b1 * SCALE_BYTES],
            &self.qs[b0 * QS_BYTES..b1 * QS_BYTES],
            out,
        );
    }
}

/// `v` rounded to f16, upwards when round-to-nearest went below (`v >= 0`).
#[inline(always)]
pub(super) fn f16_up(v: f32) -> f16 {
    let h = f16::from_f32(v);
    if h.to_f32() < v { f16::from_bits(h.to_bits() + 1) } else { h }
}

/// The range a sub-block's grid must cover, from its minimum and maximum:
/// ggml pins the minimum at or below 0 (`m` is stored unsigned). A zero
/// minimum is always +0, so the sign of a zero never depends on which
/// kernel found it.
#[inline(always)]
pub(super) fn sub_block_range(mn: f32, mx: f32) -> (f32, f32) {
    (if mn < 0.0 { mn } else { 0.0 }, mx)
}

/// A super-block's f16 `d` and `dmin` and its 6-bit sub-block scales and
/// minimums.
pub(super) struct SuperParams {
    pub(super) d: f16,
    pub(super) dmin: f16,
    pub(super) sc: [u8; 8],
    pub(super) m: [u8; 8],
}

/// Largest of `v` and 0; a NaN is skipped and a zero result is +0.
#[inline(always)]
fn max0(v: impl Iterator<Item = f32>) -> f32 {
    v.fold(0.0f32, |a, v| if v > a { v } else { a })
}

/// The scales of a super-block whose sub-block `j` covers `[lo[j], hi[j]]`.
#[inline(always)]
pub(super) fn super_params(lo: &[f32; 8], hi: &[f32; 8]) -> SuperParams {
    let dmin = f16_up(max0(lo.iter().map(|&v| -v)) / 63.0);
    let dminf = dmin.to_f32();
    let (mut m, mut sc) = ([0u8; 8], [0u8; 8]);
    let mut step = [0.0f32; 8];
    for j in 0..8 {
        // Rounding the minimum index up keeps -dmin * m <= the true minimum.
        m[j] = if dminf > 0.0 { clamp_to_i32((-lo[j] / dminf).ceil(), 0.0, 63.0) as u8 } else { 0 };
        step[j] = (hi[j] + dminf * m[j] as f32) / 15.0;
    }
    let d = f16_up(max0(step.iter().copied()) / 63.0);
    let df = d.to_f32();
    for j in 0..8 {
        sc[j] = if df > 0.0 { clamp_to_i32((step[j] / df).ceil(), 0.0, 63.0) as u8 } else { 0 };
    }
    SuperParams { d, dmin, sc, m }
}

impl SuperParams {
    /// Per sub-block, the inverse step and the offset of `q = rne((x + off) * inv)`.
    #[inline(always)]
    pub(super) fn code_steps(&self) -> ([f32; 8], [f32; 8]) {
        let (df, dminf) = (self.d.to_f32(), self.dmin.to_f32());
        let (mut inv, mut off) = ([0.0f32; 8], [0.0f32; 8]);
        for j in 0..8 {
            let e = df * self.sc[j] as f32;
            inv[j] = if e > 0.0 { 1.0 / e } else { 0.0 };
            off[j] = dminf * self.m[j] as f32;
        }
        (inv, off)
    }
}

/// Quantizes one super-block; returns (d, dmin).
#[inline(always)]
fn quantize_block(x: &[f32], scales: &mut [u8], qs: &mut [u8]) -> (f16, f16) {
    let (mut lo, mut hi) = ([0.0f32; 8], [0.0f32; 8]);
    for (j, xs) in x.chunks_exact(32).enumerate() {
        let (mut mn, mut mx) = (f32::MAX, -f32::MAX);
        for &v in xs {
            mn = mn.min(v);
            mx = mx.max(v);
        }
        (lo[j], hi[j]) = sub_block_range(mn, mx);
    }
    let p = super_params(&lo, &hi);
    scales.copy_from_slice(&pack_scales(&p.sc, &p.m));
    let (inv, off) = p.code_steps();
    for c in 0..4 {
        let (a, b) = (2 * c, 2 * c + 1);
        let (xa, xb) = (&x[32 * a..32 * a + 32], &x[32 * b..32 * b + 32]);
        for l in 0..32 {
            let qa = clamp_to_i32(rne((xa[l] + off[a]) * inv[a]), 0.0, 15.0) as u8;
            let qb = clamp_to_i32(rne((xb[l] + off[b]) * inv[b]), 0.0, 15.0) as u8;
            qs[32 * c + l] = qa | (qb << 4);
        }
    }
    (p.d, p.dmin)
}

/// Quantizes whole super-blocks of `x` serially: the AVX-512 kernel when the
/// CPU has it, else [`quantize_blocks_portable`]; both give the same bytes.
pub fn quantize_blocks(x: &[f32], d: &mut [f16], dmin: &mut [f16], scales: &mut [u8], qs: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: has_avx512() checked every feature the kernel is compiled for.
        return unsafe { super::avx512::quantize_q4k(x, d, dmin, scales, qs) };
    }
    quantize_blocks_portable(x, d, dmin, scales, qs)
}

simd_dispatch! {
    /// Quantizes whole super-blocks of `x` serially, in portable code.
    pub fn quantize_blocks_portable(x: &[f32], d: &mut [f16], dmin: &mut [f16], scales: &mut [u8], qs: &mut [u8]) {
        for (b, ((x, s), q)) in x
            .chunks_exact(QK_K)
            .zip(scales.chunks_exact_mut(SCALE_BYTES))
            .zip(qs.chunks_exact_mut(QS_BYTES))
            .enumerate()
        {
            (d[b], dmin[b]) = quantize_block(x, s, q);
        }
    }
}

simd_dispatch! {
    /// Dequantizes whole super-blocks serially (ggml's arithmetic:
    /// `(d * sc) * q - (dmin * m)` in f32).
    pub fn dequantize_blocks(d: &[f16], dmin: &[f16], scales: &[u8], qs: &[u8], out: &mut [f32]) {
        for (b, (o, q)) in out.chunks_exact_mut(QK_K).zip(qs.chunks_exact(QS_BYTES)).enumerate() {
            let (sc, m) = unpack_scales(&scales[b * SCALE_BYTES..(b + 1) * SCALE_BYTES]);
            let (df, mf) = (d[b].to_f32(), dmin[b].to_f32());
            for c in 0..4 {
                let (d1, m1) = (df * sc[2 * c] as f32, mf * m[2 * c] as f32);
                let (d2, m2) = (df * sc[2 * c + 1] as f32, mf * m[2 * c + 1] as f32);
                let q = &q[32 * c..32 * c + 32];
                let (oa, ob) = o[64 * c..64 * c + 64].split_at_mut(32);
                for l in 0..32 {
                    oa[l] = d1 * (q[l] & 15) as f32 - m1;
                    ob[l] = d2 * (q[l] >> 4) as f32 - m2;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sub-block j: minimum -0.125 (63 - 8j), step 0.0625 (63 - 5j), codes (7i + j) mod 16.
    fn hand_block() -> (Vec<f32>, [u8; 8], [u8; 8]) {
        let mut sc = [0u8; 8];
        let mut m = [0u8; 8];
        let mut x = vec![0.0f32; QK_K];
        for j in 0..8 {
            sc[j] = 63 - 5 * j as u8;
            m[j] = 63 - 8 * j as u8;
            for i in 0..32 {
                let code = ((7 * i + j) % 16) as f32;
                x[32 * j + i] = -0.125 * m[j] as f32 + code * 0.0625 * sc[j] as f32;
            }
        }
        (x, sc, m)
    }

    #[test]
    fn a_hand_computed_super_block_quantizes_exactly() {
        let (x, sc, m) = hand_block();
        let mut t = Q4KTensor::zeros(1, QK_K).unwrap();
        t.quantize_from(&x);
        // max step 63 * 0.0625 / 63 and max minimum 7.875 / 63 are exact f16s.
        assert_eq!(t.d[0], f16::from_f32(0.0625));
        assert_eq!(t.dmin[0], f16::from_f32(0.125));
        // Bytes worked out by hand from ggml's packing rules.
        assert_eq!(t.scales, [191, 186, 181, 112, 127, 119, 47, 39, 251, 118, 241, 124]);
        assert_eq!(unpack_scales(&t.scales), (sc, m));
        for j in 0..8 {
            for i in 0..32 {
                let byte = t.qs[32 * (j / 2) + i];
                let code = if j % 2 == 0 { byte & 15 } else { byte >> 4 };
                assert_eq!(code as usize, (7 * i + j) % 16, "sub-block {j} value {i}");
            }
        }
        let mut back = vec![0.0; QK_K];
        t.dequantize_into(&mut back);
        assert_eq!(back, x, "every value is on the grid, so the round trip is exact");
    }

    #[test]
    fn six_bit_scale_packing_is_lossless() {
        for s in 0..64u32 {
            let sc: [u8; 8] = std::array::from_fn(|j| ((s + 9 * j as u32) % 64) as u8);
            let m: [u8; 8] = std::array::from_fn(|j| ((s * 5 + 17 * j as u32 + 3) % 64) as u8);
            assert_eq!(unpack_scales(&pack_scales(&sc, &m)), (sc, m));
        }
        assert_eq!(unpack_scales(&pack_scales(&[63; 8], &[63; 8])), ([63; 8], [63; 8]));
    }

    #[test]
    fn round_trip_error_is_within_half_a_sub_block_step() {
        let (rows, cols) = (5, 512);
        let x: Vec<f32> = (0..rows * cols)
            .map(|i| {
                let v = ((i * 7919 % 1000) as f32 / 250.0 - 2.0).powi(3);
                // Some all-positive sub-blocks (minimum pinned at 0) and a constant one.
                if (i / 32) % 7 == 3 {
                    v.abs() + 1.0
                } else if (i / 32) % 11 == 5 {
                    0.5
                } else {
                    v
                }
            })
            .collect();
        let mut t = Q4KTensor::zeros(rows, cols).unwrap();
        t.quantize_from(&x);
        let mut back = vec![0.0; x.len()];
        t.dequantize_into(&mut back);
        for (b, (xs, ys)) in x.chunks(QK_K).zip(back.chunks(QK_K)).enumerate() {
            let (sc, m) = unpack_scales(&t.scales[b * SCALE_BYTES..(b + 1) * SCALE_BYTES]);
            let (df, mf) = (t.d[b].to_f32(), t.dmin[b].to_f32());
            for j in 0..8 {
                let step = df * sc[j] as f32;
                for i in 32 * j..32 * j + 32 {
                    let tol = step / 2.0 + 1e-6 * (xs[i].abs() + mf * m[j] as f32);
                    let err = (xs[i] - ys[i]).abs();
                    assert!(err <= tol, "block {b} sub {j} [{i}]: {} -> {}, err {err} > {tol}", xs[i], ys[i]);
                }
            }
        }
        assert_eq!(t.storage_bytes() * 8, rows * cols * 9 / 2, "4.5 bits per weight");
    }

    #[test]
    fn zeros_and_bad_lengths() {
        assert!(Q4KTensor::zeros(2, 288).is_err());
        let mut t = Q4KTensor::zeros(1, 256).unwrap();
        t.quantize_from(&[0.0; 256]);
        let mut back = [1.0f32; 256];
        t.dequantize_into(&mut back);
        assert!(back.iter().all(|&v| v == 0.0));
    }
}
