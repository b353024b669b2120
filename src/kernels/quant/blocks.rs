//! llama.cpp block formats: every 32 consecutive values of a row share a
//! scale stored as f16.
//!
//! - Q8_0: `d = max|x| / 127`, `q = round(x / d)` (half away from zero), 8.5 bits per weight.
//! - Q4_0: `d = x_absmax_signed / -8`, `q = min(15, trunc(x / d + 8.5))`,
//!   value `(q - 8) d`, 4.5 bits per weight.
//! - Q4_1: `d = (max - min) / 15`, `q = min(15, trunc((x - min) / d + 0.5))`,
//!   value `q d + min` with `min` as f16 too, 5 bits per weight.
//!
//! The arithmetic follows ggml's reference quantizers (`quantize_row_q*_ref`)
//! step by step, including the f32 reciprocal used while quantizing and the
//! f16-rounded scale used when dequantizing, so files would agree bit for bit.
//! 4-bit codes are packed as ggml does: byte `j` of a block holds value `j`
//! in its low nibble and value `j + 16` in its high nibble.
//!
//! Storage here is structure-of-arrays (scales, mins, codes in separate
//! vectors) so kernels load codes with aligned strides; the byte count is the
//! same as ggml's array of blocks.

use super::clamp_to_i32;
use crate::kernels::simd_dispatch;
use anyhow::{Result, bail};
use half::f16;
use rayon::prelude::*;

/// Values per block.
pub const QK: usize = 32;

/// Blocks per parallel task.
const TASK_BLOCKS: usize = 2048;

/// One of the block formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockFormat {
    /// 32 int8 + f16 scale.
    Q8_0,
    /// 32 4-bit codes (offset 8) + f16 scale.
    Q4_0,
    /// 32 4-bit codes + f16 scale + f16 minimum.
    Q4_1,
}

impl BlockFormat {
    /// Bytes of codes per block.
    pub fn code_bytes(self) -> usize {
        match self {
            Self::Q8_0 => QK,
            Self::Q4_0 | Self::Q4_1 => QK / 2,
        }
    }
    /// Bytes per block including scale (and minimum).
    pub fn block_bytes(self) -> usize {
        self.code_bytes() + if self == Self::Q4_1 { 4 } else { 2 }
    }
    /// Storage bits per weight (8.5, 4.5 or 5).
    pub fn bits_per_weight(self) -> f64 {
        self.block_bytes() as f64 * 8.0 / QK as f64
    }
}

/// A `[rows, cols]` tensor in a block format (`cols` a multiple of 32).
#[derive(Debug, Clone)]
pub struct BlockTensor {
    /// Format of every block.
    pub format: BlockFormat,
    /// Rows.
    pub rows: usize,
    /// Columns (a multiple of [`QK`]).
    pub cols: usize,
    /// One f16 scale per block, row-major.
    pub scales: Vec<f16>,
    /// One f16 minimum per block (Q4_1 only, else empty).
    pub mins: Vec<f16>,
    /// Codes: `code_bytes()` per block, row-major (Q8_0 bytes are `i8`).
    pub qs: Vec<u8>,
}

impl BlockTensor {
    /// A zeroed tensor; `cols` must be a multiple of 32.
    pub fn zeros(format: BlockFormat, rows: usize, cols: usize) -> Result<Self> {
        if !cols.is_multiple_of(QK) {
            bail!("{format:?} needs rows of a multiple of {QK} values, got {cols}");
        }
        let blocks = rows * cols / QK;
        Ok(Self {
            format,
            rows,
            cols,
            scales: vec![f16::ZERO; blocks],
            mins: if format == BlockFormat::Q4_1 { vec![f16::ZERO; blocks] } else { Vec::new() },
            qs: vec![0; blocks * format.code_bytes()],
        })
    }

    /// Total bytes (codes, scales, minimums).
    pub fn storage_bytes(&self) -> usize {
        self.qs.len() + 2 * (self.scales.len() + self.mins.len())
    }

    /// Quantizes `x` (`rows * cols` values) into this tensor, in parallel.
    ///
    /// # Panics
    /// When `x` has the wrong length.
    pub fn quantize_from(&mut self, x: &[f32]) {
        assert_eq!(x.len(), self.rows * self.cols, "BlockTensor::quantize_from: shape mismatch");
        let (f, cb) = (self.format, self.format.code_bytes());
        let tasks = self
            .scales
            .par_chunks_mut(TASK_BLOCKS)
            .zip(self.qs.par_chunks_mut(TASK_BLOCKS * cb))
            .zip(x.par_chunks(TASK_BLOCKS * QK));
        if f == BlockFormat::Q4_1 {
            tasks
                .zip(self.mins.par_chunks_mut(TASK_BLOCKS))
                .for_each(|(((d, q), x), m)| quantize_blocks(f, x, d, m, q));
        } else {
            tasks.for_each(|((d, q), x)| quantize_blocks(f, x, d, &mut [], q));
        }
    }

    /// Dequantizes into `out` (`rows * cols` values), in parallel.
    ///
    /// # Panics
    /// When `out` has the wrong length.
    pub fn dequantize_into(&self, out: &mut [f32]) {
        assert_eq!(out.len(), self.rows * self.cols, "BlockTensor::dequantize_into: shape mismatch");
        let (f, cb) = (self.format, self.format.code_bytes());
        super::stream_fill(out, TASK_BLOCKS * QK, |off, o| {
            let (b0, nb) = (off / QK, o.len() / QK);
            let mins = if f == BlockFormat::Q4_1 { &self.mins[b0..b0 + nb] } else { &[][..] };
            dequantize_blocks(f, &self.scales[b0..b0 + nb], mins, &self.qs[b0 * cb..(b0 + nb) * cb], o);
        });
    }
}

/// ggml's Q8_0 reference quantizer for one block.
#[inline(always)]
fn q8_0_block(x: &[f32], qs: &mut [u8]) -> f16 {
    let amax = x.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = clamp_to_i32((v * id).round(), -128.0, 127.0) as i8 as u8;
    }
    f16::from_f32(d)
}

/// ggml's Q4_0 reference quantizer for one block.
#[inline(always)]
fn q4_0_block(x: &[f32], qs: &mut [u8]) -> f16 {
    let (mut mx, mut mn) = (-f32::MAX, f32::MAX);
    for &v in x {
        mx = mx.max(v);
        mn = mn.min(v);
    }
    let d = q4_0_signed_max(x, mn, mx) / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for j in 0..QK / 2 {
        let lo = clamp_to_i32(x[j] * id + 8.5, 0.0, 15.0) as u8;
        let hi = clamp_to_i32(x[j + QK / 2] * id + 8.5, 0.0, 15.0) as u8;
        qs[j] = lo | (hi << 4);
    }
    f16::from_f32(d)
}

/// The value of largest magnitude of a Q4_0 block, sign included, from its
/// minimum `mn` and maximum `mx` (NaNs skipped): ggml keeps the first such
/// value, so only a tie between +a and -a needs the (rare) scalar search.
#[inline(always)]
pub(super) fn q4_0_signed_max(x: &[f32], mn: f32, mx: f32) -> f32 {
    // The sign of the largest value is random: a select, not a branch
    // mispredicted on every other block; only the rare tie branches.
    if mx != -mn {
        if -mn > mx { mn } else { mx }
    } else if mx == 0.0 {
        0.0
    } else {
        x.iter().copied().find(|v| v.abs() == mx).unwrap_or(mx)
    }
}

/// ggml's Q4_1 reference quantizer for one block: (scale, minimum).
#[inline(always)]
fn q4_1_block(x: &[f32], qs: &mut [u8]) -> (f16, f16) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        min = min.min(v);
        max = max.max(v);
    }
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for j in 0..QK / 2 {
        let lo = clamp_to_i32((x[j] - min) * id + 0.5, 0.0, 15.0) as u8;
        let hi = clamp_to_i32((x[j + QK / 2] - min) * id + 0.5, 0.0, 15.0) as u8;
        qs[j] = lo | (hi << 4);
    }
    (f16::from_f32(d), f16::from_f32(min))
}

/// Quantizes whole blocks of `x` (serial): one scale per block in `d`, one
/// minimum in `m` (Q4_1 only), codes in `q`. The AVX-512 kernel when the CPU
/// has it, else [`quantize_blocks_portable`]; both give the same bytes.
pub fn quantize_blocks(f: BlockFormat, x: &[f32], d: &mut [f16], m: &mut [f16], q: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: has_avx512() checked every feature the kernel is compiled for.
        return unsafe { super::avx512::quantize_blocks(f, x, d, m, q) };
    }
    quantize_blocks_portable(f, x, d, m, q)
}

/// Dequantizes whole blocks (serial) into `out`: the AVX-512 kernel when the
/// CPU has it, else [`dequantize_blocks_portable`]; both give the same values.
pub fn dequantize_blocks(f: BlockFormat, d: &[f16], m: &[f16], q: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: has_avx512() checked every feature the kernel is compiled for.
        return unsafe { super::avx512::dequantize_blocks(f, d, m, q, out) };
    }
    dequantize_blocks_portable(f, d, m, q, out)
}

simd_dispatch! {
    /// Quantizes whole blocks of `x` in portable code (serial): ggml's
    /// reference quantizers, block by block.
    pub fn quantize_blocks_portable(f: BlockFormat, x: &[f32], d: &mut [f16], m: &mut [f16], q: &mut [u8]) {
        let cb = f.code_bytes();
        for (b, (x, q)) in x.chunks_exact(QK).zip(q.chunks_exact_mut(cb)).enumerate() {
            match f {
                BlockFormat::Q8_0 => d[b] = q8_0_block(x, q),
                BlockFormat::Q4_0 => d[b] = q4_0_block(x, q),
                BlockFormat::Q4_1 => (d[b], m[b]) = q4_1_block(x, q),
            }
        }
    }
}

simd_dispatch! {
    /// Dequantizes whole blocks in portable code (serial) into `out`.
    pub fn dequantize_blocks_portable(f: BlockFormat, d: &[f16], m: &[f16], q: &[u8], out: &mut [f32]) {
        let cb = f.code_bytes();
        for (b, (o, q)) in out.chunks_exact_mut(QK).zip(q.chunks_exact(cb)).enumerate() {
            let s = d[b].to_f32();
            match f {
                BlockFormat::Q8_0 => {
                    for (o, &c) in o.iter_mut().zip(q) {
                        *o = (c as i8) as f32 * s;
                    }
                }
                BlockFormat::Q4_0 => {
                    let (lo, hi) = o.split_at_mut(QK / 2);
                    for j in 0..QK / 2 {
                        lo[j] = ((q[j] & 15) as i32 - 8) as f32 * s;
                        hi[j] = ((q[j] >> 4) as i32 - 8) as f32 * s;
                    }
                }
                BlockFormat::Q4_1 => {
                    let mn = m[b].to_f32();
                    let (lo, hi) = o.split_at_mut(QK / 2);
                    for j in 0..QK / 2 {
                        lo[j] = (q[j] & 15) as f32 * s + mn;
                        hi[j] = (q[j] >> 4) as f32 * s + mn;
                    }
                }
            }
        }
    }
}

/// Packs 4-bit codes (each < 16) in ggml's block layout: per 32 codes, byte
/// `j` = code `j` | code `j + 16` << 4. `codes.len()` must be a multiple of 32.
pub fn pack_nibbles(codes: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; codes.len() / 2];
    for (o, c) in out.chunks_exact_mut(QK / 2).zip(codes.chunks_exact(QK)) {
        for j in 0..QK / 2 {
            o[j] = (c[j] & 15) | (c[j + QK / 2] << 4);
        }
    }
    out
}

/// Inverse of [`pack_nibbles`].
pub fn unpack_nibbles(packed: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; packed.len() * 2];
    for (o, p) in out.chunks_exact_mut(QK).zip(packed.chunks_exact(QK / 2)) {
        for j in 0..QK / 2 {
            o[j] = p[j] & 15;
            o[j + QK / 2] = p[j] >> 4;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block() -> Vec<f32> {
        // Hand-picked: max |x| is the negative -3.2 at index 5.
        let mut x: Vec<f32> = (0..32).map(|i| (i as f32 - 12.0) * 0.1).collect();
        x[5] = -3.2;
        x
    }

    #[test]
    fn q8_0_matches_a_hand_computed_block() {
        let mut t = BlockTensor::zeros(BlockFormat::Q8_0, 1, 32).unwrap();
        t.quantize_from(&block());
        // d = 3.2 / 127; q = round(x * 127 / 3.2).
        assert_eq!(t.scales[0], f16::from_f32(3.2 / 127.0));
        let q: Vec<i8> = t.qs.iter().map(|&b| b as i8).collect();
        assert_eq!(q[5], -127);
        assert_eq!(q[0], -48); // -1.2 * 39.6875 = -47.625 -> -48
        assert_eq!(q[12], 0);
        assert_eq!(q[31], 75); // 1.9 * 39.6875 = 75.406
        assert_eq!(q[17], 20); // 0.5 * 39.6875 = 19.84
    }

    #[test]
    fn q4_0_and_q4_1_match_hand_computed_blocks() {
        let mut t = BlockTensor::zeros(BlockFormat::Q4_0, 1, 32).unwrap();
        t.quantize_from(&block());
        // d = -3.2 / -8 = 0.4; code = min(15, trunc(x / 0.4 + 8.5)).
        assert_eq!(t.scales[0], f16::from_f32(0.4));
        let codes = unpack_nibbles(&t.qs);
        assert_eq!(codes[5], 0); // -3.2 -> -8 + 8
        assert_eq!(codes[0], 5); // -1.2/0.4 = -3 (+8.5 = 5.5) -> 5
        assert_eq!(codes[31], 13); // 1.9/0.4 = 4.75 + 8.5 = 13.25 -> 13
        let mut t1 = BlockTensor::zeros(BlockFormat::Q4_1, 1, 32).unwrap();
        t1.quantize_from(&block());
        // min -3.2, max 1.9: d = 5.1 / 15 = 0.34.
        assert_eq!(t1.mins[0], f16::from_f32(-3.2));
        assert_eq!(t1.scales[0], f16::from_f32(5.1 / 15.0));
        let codes = unpack_nibbles(&t1.qs);
        assert_eq!(codes[5], 0);
        assert_eq!(codes[31], 15);
        assert_eq!(codes[0], 6); // (-1.2 + 3.2) / 0.34 = 5.88 + 0.5 -> 6
    }

    #[test]
    fn round_trip_errors_are_within_each_formats_bound() {
        let (rows, cols) = (9, 256);
        let x: Vec<f32> =
            (0..rows * cols).map(|i| ((i * 7919 % 1000) as f32 / 250.0 - 2.0).powi(3)).collect();
        for f in [BlockFormat::Q8_0, BlockFormat::Q4_0, BlockFormat::Q4_1] {
            let mut t = BlockTensor::zeros(f, rows, cols).unwrap();
            t.quantize_from(&x);
            let mut back = vec![0.0; x.len()];
            t.dequantize_into(&mut back);
            for (b, (xs, ys)) in x.chunks(QK).zip(back.chunks(QK)).enumerate() {
                let d = t.scales[b].to_f32().abs();
                // f16 rounding of the scale (and minimum) adds up to 2^-11
                // relative per term on top of half a step.
                let (bound, clip_bound) = match f {
                    BlockFormat::Q8_0 => (d * (0.5 + 127.0 / 2048.0), d),
                    BlockFormat::Q4_0 => (d * (0.5 + 8.0 / 2048.0), d * (1.0 + 8.0 / 2048.0)),
                    BlockFormat::Q4_1 => {
                        let m = t.mins[b].to_f32().abs();
                        (d * (0.5 + 16.0 / 2048.0) + m / 2048.0, d * (1.0 + 16.0 / 2048.0) + m / 2048.0)
                    }
                };
                let amax = xs.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
                for (&a, &y) in xs.iter().zip(ys) {
                    let err = (a - y).abs();
                    // Q4_0 clips the side opposite the signed maximum at +7 steps.
                    let clipped = f == BlockFormat::Q4_0 && (a / d).abs() > 7.5;
                    let tol = if clipped { clip_bound } else { bound } + 1e-6 * amax;
                    assert!(err <= tol, "{f:?} block {b}: {a} -> {y}, err {err} > {tol}");
                }
            }
        }
    }

    #[test]
    fn q4_0_keeps_the_first_value_of_largest_magnitude() {
        for (a, b) in [(0.5f32, -0.5f32), (-0.5, 0.5), (0.0, -0.0)] {
            let mut x = vec![0.1f32; 32];
            (x[3], x[9]) = (a, b);
            let mut t = BlockTensor::zeros(BlockFormat::Q4_0, 1, 32).unwrap();
            t.quantize_from(&x);
            let want = if a == 0.0 { 0.1 } else { a };
            assert_eq!(t.scales[0], f16::from_f32(want / -8.0), "{a} {b}");
        }
    }

    #[test]
    fn nibble_packing_is_lossless_for_every_code() {
        let codes: Vec<u8> = (0..64u32).map(|i| ((i * 7) % 16) as u8).collect();
        assert_eq!(unpack_nibbles(&pack_nibbles(&codes)), codes);
        assert_eq!(pack_nibbles(&codes).len(), 32);
    }

    #[test]
    fn bad_row_lengths_are_refused_and_bits_are_exact() {
        assert!(BlockTensor::zeros(BlockFormat::Q4_0, 2, 33).is_err());
        assert_eq!(BlockFormat::Q8_0.bits_per_weight(), 8.5);
        assert_eq!(BlockFormat::Q4_0.bits_per_weight(), 4.5);
        assert_eq!(BlockFormat::Q4_1.bits_per_weight(), 5.0);
        let t = BlockTensor::zeros(BlockFormat::Q4_1, 4, 64).unwrap();
        assert_eq!(t.storage_bytes() * 8, 4 * 64 * 5);
    }
}
