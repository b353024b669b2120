//! INT8 affine quantization: `q = clamp(round(x / scale) + zero_point)`,
//! `x ~ (q - zero_point) * scale`.
//!
//! Symmetric: `scale = max|x| / 127`, zero point 0, codes in [-127, 127]
//! (the -128 code is left unused so negation stays exact). Asymmetric: the
//! range `[min(x, 0), max(x, 0)]` mapped onto [-128, 127], so zero is exactly
//! representable (padding and ReLU zeros stay exact), as in PyTorch.
//! Per-channel means one scale per row of a `[rows, cols]` tensor (a linear
//! weight's output channel). Rounding is to nearest, ties to even.
//!
//! Large tensors are split over the current rayon pool.

use super::{bound, clamp_to_i32, rne};
use crate::kernels::simd_dispatch;
use rayon::prelude::*;

/// Elements per parallel task (256 KiB of f32): below this, fork/join costs
/// about as much as the work.
const CHUNK: usize = 1 << 16;

/// How the range is mapped onto the int8 codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `scale = max|x| / 127`, zero point 0.
    Symmetric,
    /// `scale = (max - min) / 255` over a range that includes 0, with a zero point.
    Asymmetric,
}

/// Which elements share one scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// One scale for the whole tensor.
    PerTensor,
    /// One scale per row (output channel of a `[out, in]` weight).
    PerChannel,
}

/// Scale and zero point of one quantization group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QParams {
    /// Step between adjacent codes.
    pub scale: f32,
    /// The code that represents 0.0.
    pub zero_point: i32,
}

impl QParams {
    /// Symmetric parameters for values within `[-absmax, absmax]`. An all-zero
    /// group gets scale 1 so the codes stay finite (they are all 0).
    pub fn symmetric(absmax: f32) -> Self {
        let scale = if absmax > 0.0 && absmax.is_finite() { absmax / 127.0 } else { 1.0 };
        Self { scale, zero_point: 0 }
    }

    /// Asymmetric parameters for values within `[min, max]` (widened to include 0).
    pub fn asymmetric(min: f32, max: f32) -> Self {
        let (lo, hi) = (min.min(0.0), max.max(0.0));
        let range = hi - lo;
        if !(range > 0.0 && range.is_finite()) {
            return Self { scale: 1.0, zero_point: 0 };
        }
        let scale = range / 255.0;
        let zero_point = (-128.0 - rne(lo / scale)).clamp(-128.0, 127.0) as i32;
        Self { scale, zero_point }
    }

    /// Parameters of `scheme` for data with this minimum and maximum.
    pub fn for_range(scheme: Scheme, min: f32, max: f32) -> Self {
        match scheme {
            Scheme::Symmetric => Self::symmetric(min.abs().max(max.abs())),
            Scheme::Asymmetric => Self::asymmetric(min, max),
        }
    }

    /// Smallest and largest code of `scheme`.
    pub fn code_range(scheme: Scheme) -> (i32, i32) {
        match scheme {
            Scheme::Symmetric => (-127, 127),
            Scheme::Asymmetric => (-128, 127),
        }
    }
}

/// An int8 tensor `[rows, cols]` with its quantization parameters (one, or
/// one per row).
#[derive(Debug, Clone)]
pub struct Int8Tensor {
    /// Rows (channels).
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Range mapping.
    pub scheme: Scheme,
    /// Scale sharing.
    pub granularity: Granularity,
    /// Codes, row-major.
    pub data: Vec<i8>,
    /// One entry per tensor or per row.
    pub params: Vec<QParams>,
}

impl Int8Tensor {
    /// An empty (zeroed) tensor to quantize into without allocating later.
    pub fn zeros(rows: usize, cols: usize, scheme: Scheme, granularity: Granularity) -> Self {
        let groups = if granularity == Granularity::PerChannel { rows } else { 1 };
        Self {
            rows,
            cols,
            scheme,
            granularity,
            data: vec![0; rows * cols],
            params: vec![QParams { scale: 1.0, zero_point: 0 }; groups],
        }
    }

    /// Parameters of row `r`.
    pub fn row_params(&self, r: usize) -> QParams {
        match self.granularity {
            Granularity::PerTensor => self.params[0],
            Granularity::PerChannel => self.params[r],
        }
    }

    /// Bytes of codes plus parameters (f32 scale, and an i32 zero point for
    /// the asymmetric scheme).
    pub fn storage_bytes(&self) -> usize {
        let per_group = if self.scheme == Scheme::Asymmetric { 8 } else { 4 };
        self.data.len() + self.params.len() * per_group
    }
}

/// Minimum and maximum of a slice (serial); NaNs are ignored. The AVX-512
/// kernel when the CPU has it, else [`min_max_portable`].
pub fn min_max_serial(x: &[f32]) -> (f32, f32) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: has_avx512() checked every feature the kernel is compiled for.
        return unsafe { super::avx512::min_max(x) };
    }
    min_max_portable(x)
}

simd_dispatch! {
    /// Minimum and maximum of a slice in portable code (serial); NaNs are ignored.
    pub fn min_max_portable(x: &[f32]) -> (f32, f32) {
        let mut lo = [f32::INFINITY; 16];
        let mut hi = [f32::NEG_INFINITY; 16];
        let mut chunks = x.chunks_exact(16);
        for c in &mut chunks {
            for i in 0..16 {
                lo[i] = lo[i].min(c[i]);
                hi[i] = hi[i].max(c[i]);
            }
        }
        for &v in chunks.remainder() {
            lo[0] = lo[0].min(v);
            hi[0] = hi[0].max(v);
        }
        (lo.iter().copied().fold(f32::INFINITY, f32::min), hi.iter().copied().fold(f32::NEG_INFINITY, f32::max))
    }
}

/// Minimum and maximum, in parallel for large slices.
pub fn min_max(x: &[f32]) -> (f32, f32) {
    if x.len() <= CHUNK {
        return min_max_serial(x);
    }
    x.par_chunks(CHUNK)
        .map(min_max_serial)
        .reduce(|| (f32::INFINITY, f32::NEG_INFINITY), |a, b| (a.0.min(b.0), a.1.max(b.1)))
}

/// `out = clamp(round(x / scale) + zero_point, lo, hi)` (serial): the
/// AVX-512 kernel when the CPU has it, else [`quantize_with_portable`]; both
/// give the same codes.
pub fn quantize_with(x: &[f32], p: QParams, lo: i32, hi: i32, out: &mut [i8]) {
    assert_eq!(x.len(), out.len(), "quantize_with: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: has_avx512() checked every feature the kernel is compiled for.
        return unsafe { super::avx512::quantize_int8(x, 1.0 / p.scale, p.zero_point, lo, hi, out) };
    }
    quantize_with_portable(x, p, lo, hi, out)
}

simd_dispatch! {
    /// `out = clamp(round(x / scale) + zero_point, lo, hi)` in portable code (serial).
    pub fn quantize_with_portable(x: &[f32], p: QParams, lo: i32, hi: i32, out: &mut [i8]) {
        assert_eq!(x.len(), out.len(), "quantize_with: length mismatch");
        let inv = 1.0 / p.scale;
        let (lo, hi, zp) = (lo as f32, hi as f32, p.zero_point as f32);
        for (o, &v) in out.iter_mut().zip(x) {
            // Bound before rounding: rne needs |x| < 2^22. A NaN input
            // becomes the lowest code, never garbage.
            let q = bound(v * inv, -1e6, 1e6);
            *o = clamp_to_i32(rne(q) + zp, lo, hi) as i8;
        }
    }
}

simd_dispatch! {
    /// `out = (q - zero_point) * scale` (serial).
    pub fn dequantize_with(q: &[i8], p: QParams, out: &mut [f32]) {
        assert_eq!(q.len(), out.len(), "dequantize_with: length mismatch");
        let zp = p.zero_point as f32;
        for (o, &c) in out.iter_mut().zip(q) {
            *o = (c as f32 - zp) * p.scale;
        }
    }
}

/// Quantizes `x` (`[rows, cols]`) into `out`, whose shape, scheme and
/// granularity say what to do. Parameters come from the data (min-max).
///
/// # Panics
/// When `x.len() != out.rows * out.cols`.
pub fn quantize_into(x: &[f32], out: &mut Int8Tensor) {
    assert_eq!(x.len(), out.rows * out.cols, "quantize_into: shape mismatch");
    let (lo, hi) = QParams::code_range(out.scheme);
    let scheme = out.scheme;
    match out.granularity {
        Granularity::PerTensor => {
            let (mn, mx) = min_max(x);
            let p = QParams::for_range(scheme, mn, mx);
            out.params[0] = p;
            out.data
                .par_chunks_mut(CHUNK)
                .zip(x.par_chunks(CHUNK))
                .for_each(|(o, x)| quantize_with(x, p, lo, hi, o));
        }
        Granularity::PerChannel => {
            let cols = out.cols.max(1);
            // Whole rows per task, so each row is read from memory once: its
            // min/max pass leaves it in cache for the quantize pass.
            let rows_per_task = (CHUNK / cols).max(1);
            out.data
                .par_chunks_mut(rows_per_task * cols)
                .zip(x.par_chunks(rows_per_task * cols))
                .zip(out.params.par_chunks_mut(rows_per_task))
                .for_each(|((o, x), ps)| {
                    for ((o, x), p) in o.chunks_mut(cols).zip(x.chunks(cols)).zip(ps) {
                        let (mn, mx) = min_max_serial(x);
                        *p = QParams::for_range(scheme, mn, mx);
                        quantize_with(x, *p, lo, hi, o);
                    }
                });
        }
    }
}

/// Quantizes `x` (`[rows, cols]`), allocating the result.
pub fn quantize(x: &[f32], rows: usize, cols: usize, scheme: Scheme, granularity: Granularity) -> Int8Tensor {
    let mut t = Int8Tensor::zeros(rows, cols, scheme, granularity);
    quantize_into(x, &mut t);
    t
}

/// Dequantizes `t` into `out` (`rows * cols` values).
///
/// # Panics
/// When `out` has the wrong length.
pub fn dequantize_into(t: &Int8Tensor, out: &mut [f32]) {
    assert_eq!(out.len(), t.data.len(), "dequantize_into: length mismatch");
    let cols = t.cols.max(1);
    super::stream_fill(out, CHUNK, |off, o| {
        // Row segments of this tile (a tile may span rows).
        let mut i = 0;
        while i < o.len() {
            let (r, c) = ((off + i) / cols, (off + i) % cols);
            let n = (cols - c).min(o.len() - i);
            dequantize_with(&t.data[off + i..off + i + n], t.row_params(r), &mut o[i..i + n]);
            i += n;
        }
    });
}

simd_dispatch! {
    /// Symmetric per-token quantization of activations `x` (`[m, k]`):
    /// `scales[i] = max|x_i| / 127`, codes in [-127, 127] (serial; an
    /// activation matrix is small next to the weights it multiplies).
    pub fn quantize_per_token(x: &[f32], k: usize, q: &mut [i8], scales: &mut [f32]) {
        assert_eq!(x.len(), q.len(), "quantize_per_token: length mismatch");
        assert_eq!(x.len(), k * scales.len(), "quantize_per_token: one scale per row of k values");
        for ((x, q), s) in x.chunks(k).zip(q.chunks_mut(k)).zip(scales.iter_mut()) {
            let absmax = x.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
            let p = QParams::symmetric(absmax);
            *s = p.scale;
            let inv = 1.0 / p.scale;
            for (o, &v) in q.iter_mut().zip(x) {
                *o = clamp_to_i32(rne(bound(v * inv, -127.0, 127.0)), -127.0, 127.0) as i8;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<f32> {
        // Heavy-ish tail and a negative bias, so asymmetric differs from symmetric.
        (0..n).map(|i| ((i as f32 * 0.7123).sin() * 3.0).powi(3) * 0.1 - 0.4).collect()
    }

    #[test]
    fn round_trip_error_is_within_half_a_step() {
        let (rows, cols) = (37, 301);
        let x = data(rows * cols);
        for scheme in [Scheme::Symmetric, Scheme::Asymmetric] {
            for g in [Granularity::PerTensor, Granularity::PerChannel] {
                let t = quantize(&x, rows, cols, scheme, g);
                let mut back = vec![0.0; x.len()];
                dequantize_into(&t, &mut back);
                let (lo, hi) = QParams::code_range(scheme);
                for (i, (&a, &b)) in x.iter().zip(&back).enumerate() {
                    let p = t.row_params(i / cols);
                    let q = t.data[i] as i32;
                    assert!((lo..=hi).contains(&q));
                    // Clipping only happens at the extreme codes (asymmetric
                    // zero-point rounding), and costs at most one more half step.
                    let bound = if q == lo || q == hi { p.scale } else { p.scale * 0.5 * (1.0 + 1e-5) };
                    assert!((a - b).abs() <= bound, "{scheme:?} {g:?} [{i}]: {a} vs {b}, scale {}", p.scale);
                }
            }
        }
    }

    #[test]
    fn symmetric_scale_is_absmax_over_127_and_zero_is_exact() {
        let x = [0.0, -2.54, 1.0, 0.5];
        let t = quantize(&x, 1, 4, Scheme::Symmetric, Granularity::PerTensor);
        assert_eq!(t.params[0].scale, 2.54 / 127.0);
        assert_eq!(t.data, vec![0, -127, 50, 25]);
        let a = quantize(&[0.0, 1.0, 3.0], 1, 3, Scheme::Asymmetric, Granularity::PerTensor);
        let mut back = [9.0; 3];
        dequantize_into(&a, &mut back);
        assert_eq!(back[0], 0.0, "zero must be exact in the asymmetric scheme");
        assert_eq!(a.data[0] as i32, a.params[0].zero_point);
    }

    #[test]
    fn all_zero_and_nan_inputs_stay_finite() {
        let t = quantize(&[0.0; 8], 2, 4, Scheme::Asymmetric, Granularity::PerChannel);
        assert!(t.data.iter().all(|&q| q as i32 == t.params[0].zero_point));
        let mut q = [0i8; 2];
        quantize_with(&[f32::NAN, 1e30], QParams::symmetric(1.0), -127, 127, &mut q);
        assert_eq!(q, [-127, 127]);
    }

    #[test]
    fn per_token_matches_per_channel_symmetric() {
        let x = data(5 * 64);
        let mut q = vec![0i8; x.len()];
        let mut s = vec![0.0; 5];
        quantize_per_token(&x, 64, &mut q, &mut s);
        let t = quantize(&x, 5, 64, Scheme::Symmetric, Granularity::PerChannel);
        assert_eq!(q, t.data);
        assert_eq!(s, t.params.iter().map(|p| p.scale).collect::<Vec<_>>());
    }
}
