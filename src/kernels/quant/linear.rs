//! Quantized linear layers: `y[m x n] = x[m x k] W^T` with `W` an `[n, k]`
//! (`[out, in]`) weight in a [`WeightFormat`].
//!
//! Strategy, by the number of tokens `m`:
//! - `m <= 8` (decode): memory bound, so each weight row is read once and
//!   dequantized in registers while it is dotted with every token (fused
//!   kernels per format, AVX-512 with a portable twin). Rows are split over
//!   the current rayon pool.
//! - `m > 8` (prefill): compute bound, so blocks of weight rows are
//!   dequantized into an f32 scratch tile once and multiplied by the shared
//!   f32 GEMM, amortising the dequantization over all tokens.
//!
//! The 4-bit formats (Q4_0, Q4_1, Q4_K), Q6_K and Q8_0 decode as llama.cpp
//! does: the activations are quantized per call by llama.cpp's rule for the
//! format ([`ActQuant`](super::actq::ActQuant): Q8_0, Q8_1 or Q8_K) and the
//! codes dotted with them by VNNI ([`w4a8`](super::w4a8), [`q6k`](super::q6k),
//! [`w8a8`](super::w8a8)); opt out with
//! [`QMatrix::with_f32_activations`] for the exact weight-only product.
//!
//! Ternary weights always take the integer path (int8 activations, additions
//! only); [`DynamicLinear`] is the W8A8 layer with per-call activation
//! quantization on the int8 GEMM.
//!
//! This file is the dispatcher ([`QMatrix`]: storage, quantization and the
//! choice of path); the activation rule per format and the references'
//! view of it live in `linear/act.rs`, the per-format row dot products in `linear/dot.rs`,
//! the format names in `linear/format.rs`, the W8A8 layer in
//! `linear/dynamic.rs`.

use super::DotIsa;
use super::blocks::{BlockFormat, BlockTensor, QK};
use super::igemm::{I8Weights, Int8Path, gemm_i8};
use super::int8::{self, Granularity, Scheme};
use super::kquant::{Q4KTensor, QK_K};
use super::lanes::{self, LaneCodes};
use super::q6k::Q6KTensor;
use super::ternary::{self, TernaryMatrix};
use super::w4a8::{self, ActLayout, ActQuant, Q4Row, Q8Acts};
use crate::kernels::{Layout, SendPtr, matmul};
use anyhow::{Result, bail};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

mod act;
mod decode;
mod dot;
mod dynamic;
mod format;
mod ggml;

#[cfg(target_arch = "x86_64")]
use dot::avx512;
use dot::portable;
pub use dynamic::DynamicLinear;
pub use format::WeightFormat;
pub use ggml::ggml_row_bytes;

/// Largest token count served by the fused decode kernels.
pub const DECODE_MAX_M: usize = 8;

#[derive(Debug, Clone)]
enum Store {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    Int8 { q: Vec<i8>, scales: Vec<f32> },
    Block(BlockTensor),
    Ternary(TernaryMatrix),
    Q4K(Q4KTensor),
    Q6K(Q6KTensor),
}

/// The formats whose decode quantizes activations to int8 by default.
pub(super) fn act8_format(f: WeightFormat) -> bool {
    matches!(
        f,
        WeightFormat::Q8_0 | WeightFormat::Q4_0 | WeightFormat::Q4_1 | WeightFormat::Q4K | WeightFormat::Q6K
    )
}

/// A quantized `[rows, cols]` (`[out, in]`) weight matrix.
#[derive(Debug, Clone)]
pub struct QMatrix {
    /// Output channels (n).
    pub rows: usize,
    /// Input channels (k).
    pub cols: usize,
    format: WeightFormat,
    store: Store,
    /// Whether decode quantizes activations to int8 (W4A8, W6A8, W8A8).
    act8: bool,
    /// The decode-layout copy of a Q8_0 / Q4_0 / Q4_1 matrix's codes
    /// ([`lanes`](super::lanes)), made on the first one-token call on a CPU
    /// with VNNI, so prefill-only use and other CPUs never hold it.
    lanes: std::sync::OnceLock<LaneCodes>,
}

impl QMatrix {
    /// Quantizes `w` (`rows * cols`, row-major `[out, in]`). Block formats
    /// need `cols` to be a multiple of 32.
    pub fn quantize(format: WeightFormat, w: &[f32], rows: usize, cols: usize) -> Result<Self> {
        if w.len() != rows * cols {
            bail!("weight has {} values, not {rows}x{cols}", w.len());
        }
        let store = match format {
            WeightFormat::F32 => Store::F32(w.to_vec()),
            WeightFormat::F16 => {
                let mut h = vec![f16::ZERO; w.len()];
                h.par_chunks_mut(1 << 16)
                    .zip(w.par_chunks(1 << 16))
                    .for_each(|(h, w)| h.convert_from_f32_slice(w));
                Store::F16(h)
            }
            WeightFormat::Bf16 => {
                let mut h = vec![bf16::ZERO; w.len()];
                h.par_chunks_mut(1 << 16)
                    .zip(w.par_chunks(1 << 16))
                    .for_each(|(h, w)| h.convert_from_f32_slice(w));
                Store::Bf16(h)
            }
            WeightFormat::Int8 => {
                let t = int8::quantize(w, rows, cols, Scheme::Symmetric, Granularity::PerChannel);
                Store::Int8 { q: t.data, scales: t.params.iter().map(|p| p.scale).collect() }
            }
            WeightFormat::Q8_0 | WeightFormat::Q4_0 | WeightFormat::Q4_1 => {
                let mut t = BlockTensor::zeros(format.block().expect("block format"), rows, cols)?;
                t.quantize_from(w);
                Store::Block(t)
            }
            WeightFormat::Ternary => Store::Ternary(TernaryMatrix::quantize(w, rows, cols)),
            WeightFormat::Q4K => {
                let mut t = Q4KTensor::zeros(rows, cols)?;
                t.quantize_from(w);
                Store::Q4K(t)
            }
            WeightFormat::Q6K => {
                let mut t = Q6KTensor::zeros(rows, cols)?;
                t.quantize_from(w);
                Store::Q6K(t)
            }
        };
        let act8 = act8_format(format);
        Ok(Self { rows, cols, format, store, act8, lanes: Default::default() })
    }

    /// The same matrix with block-format decode on f32 activations: exactly the
    /// dequantize-then-matmul product, slower than the default W4A8 kernels.
    pub fn with_f32_activations(mut self) -> Self {
        self.act8 = false;
        self
    }

    /// Switches block-format decode between int8 activations (`true`, the
    /// default of Q8_0, Q4_0, Q4_1, Q4_K and Q6_K: llama.cpp's arithmetic)
    /// and exact f32 ones;
    /// other formats always take f32 activations.
    pub fn set_int8_activations(&mut self, on: bool) {
        self.act8 = on && act8_format(self.format);
    }

    /// Whether a call with `m` tokens quantizes the activations to int8 by
    /// llama.cpp's rule ([`act_quant`](Self::act_quant); the int8-decode
    /// formats at decode sizes, unless opted out).
    pub fn quantizes_activations(&self, m: usize) -> bool {
        self.act8 && m <= DECODE_MAX_M
    }

    /// Name of the decode kernel family for `m` tokens on this CPU and cap
    /// ([`decode_isa`](Self::decode_isa)): `avx512_vnni`, `avx512`, `avx2`
    /// or `portable`.
    pub fn decode_path(&self, m: usize) -> &'static str {
        match self.decode_isa(m) {
            DotIsa::Avx512Vnni => "avx512_vnni",
            DotIsa::Avx512 => "avx512",
            DotIsa::Avx2 => "avx2",
            DotIsa::Portable => "portable",
        }
    }

    /// The decode kernel family a call with `m` tokens runs now: the
    /// dispatch table's choice ([`dispatch::gemv`](super::dispatch::gemv))
    /// for this format and its activations.
    pub fn decode_isa(&self, m: usize) -> DotIsa {
        super::dispatch::gemv(self.format, self.quantizes_activations(m), DotIsa::current())
    }

    /// The storage format.
    pub fn format(&self) -> WeightFormat {
        self.format
    }

    /// Bytes of codes, scales and minimums.
    pub fn storage_bytes(&self) -> usize {
        match &self.store {
            Store::F32(v) => v.len() * 4,
            Store::F16(v) => v.len() * 2,
            Store::Bf16(v) => v.len() * 2,
            Store::Int8 { q, scales } => q.len() + scales.len() * 4,
            Store::Block(t) => t.storage_bytes(),
            Store::Ternary(t) => t.storage_bytes(),
            Store::Q4K(t) => t.storage_bytes(),
            Store::Q6K(t) => t.storage_bytes(),
        }
    }

    /// Storage bits per weight.
    pub fn bits_per_weight(&self) -> f64 {
        self.storage_bytes() as f64 * 8.0 / (self.rows * self.cols).max(1) as f64
    }

    /// Rows `r0..r1` of the weight as the kernels see it, into `out`
    /// (`(r1 - r0) * cols` values). Ternary rows are `code * gamma`.
    pub fn dequantize_rows(&self, r0: usize, r1: usize, out: &mut [f32]) {
        let k = self.cols;
        assert_eq!(out.len(), (r1 - r0) * k, "dequantize_rows: length mismatch");
        match &self.store {
            Store::F32(v) => out.copy_from_slice(&v[r0 * k..r1 * k]),
            Store::F16(v) => super::halfs::f16_to_f32(&v[r0 * k..r1 * k], out),
            Store::Bf16(v) => super::halfs::bf16_to_f32(&v[r0 * k..r1 * k], out),
            Store::Int8 { q, scales } => {
                for (r, o) in (r0..r1).zip(out.chunks_mut(k)) {
                    let p = int8::QParams { scale: scales[r], zero_point: 0 };
                    int8::dequantize_with(&q[r * k..(r + 1) * k], p, o);
                }
            }
            Store::Block(t) => {
                let (b0, b1, cb) = (r0 * k / QK, r1 * k / QK, t.format.code_bytes());
                let mins = if t.format == BlockFormat::Q4_1 { &t.mins[b0..b1] } else { &[][..] };
                super::blocks::dequantize_blocks(
                    t.format,
                    &t.scales[b0..b1],
                    mins,
                    &t.qs[b0 * cb..b1 * cb],
                    out,
                );
            }
            Store::Q4K(t) => t.dequantize_range(r0 * k / QK_K, r1 * k / QK_K, out),
            Store::Q6K(t) => t.dequantize_range(r0 * k / QK_K, r1 * k / QK_K, out),
            Store::Ternary(t) => {
                for (r, o) in (r0..r1).zip(out.chunks_mut(k)) {
                    for (i, o) in o.iter_mut().enumerate() {
                        let (p, m) = (t.plus[r * t.words + i / 64], t.minus[r * t.words + i / 64]);
                        let c = ((p >> (i % 64)) & 1) as f32 - ((m >> (i % 64)) & 1) as f32;
                        *o = c * t.gamma;
                    }
                }
            }
        }
    }

    /// The whole weight as the kernels see it.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.rows * self.cols];
        out.par_chunks_mut(self.cols.max(1) * 64)
            .enumerate()
            .for_each(|(b, o)| self.dequantize_rows(b * 64, b * 64 + o.len() / self.cols.max(1), o));
        out
    }

    /// The f32 weights, when the format is f32 (the baseline GEMM reads them).
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.store {
            Store::F32(w) => Some(w),
            _ => None,
        }
    }

    /// The ternary matrix, when the format is ternary (its activations are
    /// quantized per token, so callers checking results need its codes).
    pub fn ternary(&self) -> Option<&TernaryMatrix> {
        match &self.store {
            Store::Ternary(t) => Some(t),
            _ => None,
        }
    }

    /// `y[m x rows] = x[m x cols] W^T` on the current rayon pool, with the
    /// fastest kernels this CPU has.
    pub fn matmul(&self, x: &[f32], m: usize, y: &mut [f32]) {
        self.matmul_with(x, m, y, true);
    }

    /// As [`matmul`](Self::matmul); `simd = false` forces the portable decode
    /// kernels (tests compare the two).
    pub fn matmul_with(&self, x: &[f32], m: usize, y: &mut [f32], simd: bool) {
        let (k, n) = (self.cols, self.rows);
        assert_eq!(x.len(), m * k, "QMatrix::matmul: x is not {m}x{k}");
        assert_eq!(y.len(), m * n, "QMatrix::matmul: y is not {m}x{n}");
        if m == 0 || n == 0 {
            return;
        }
        if let Store::Ternary(t) = &self.store {
            return self.ternary_matmul(t, x, m, y, simd);
        }
        if m > DECODE_MAX_M {
            if let Store::F32(w) = &self.store {
                return matmul(crate::backend::cpu::current_threads(), (m, k, n), x, w, Layout::NxK, y);
            }
            return self.tiled_matmul(x, m, y);
        }
        if self.act8 {
            return self.w4a8_matmul(x, m, y, simd);
        }
        // Per-token block sums of x for the 4-bit formats' offset terms.
        let xsums: Vec<f32> = if matches!(self.format, WeightFormat::Q4_0 | WeightFormat::Q4_1) {
            x.chunks(QK).map(|c| c.iter().sum()).collect()
        } else {
            Vec::new()
        };
        let isa = if simd {
            super::dispatch::gemv(self.format, false, DotIsa::current())
        } else {
            DotIsa::Portable
        };
        let out = SendPtr(y.as_mut_ptr());
        const ROWS: usize = 16;
        (0..n.div_ceil(ROWS)).into_par_iter().for_each(|b| {
            for r in b * ROWS..((b + 1) * ROWS).min(n) {
                for t in 0..m {
                    let xs = &x[t * k..(t + 1) * k];
                    let sums = if xsums.is_empty() { &[][..] } else { &xsums[t * k / QK..(t + 1) * k / QK] };
                    let v = self.dot_row(r, xs, sums, isa);
                    // SAFETY: (t, r) is inside y and row r belongs to this task.
                    unsafe { *out.get().add(t * n + r) = v };
                }
            }
        });
    }

    /// `y_i = x W_i^T` for matrices sharing one input `x` of `m` tokens (a
    /// layer's query, key and value projections): one token of Q8_0 / Q4_0 /
    /// Q4_1 on VNNI quantizes `x` once and runs every matrix's rows in one
    /// parallel loop; anything else is one [`matmul`](Self::matmul) each.
    pub fn matmul_many(parts: &mut [(&QMatrix, &mut [f32])], x: &[f32], m: usize) {
        let lanes_ok = m == 1
            && DotIsa::current() == DotIsa::Avx512Vnni
            && parts.iter().all(|(q, y)| {
                q.act8
                    && q.rows >= lanes::ROWS
                    && x.len() == q.cols
                    && y.len() == q.rows
                    && matches!(q.store, Store::Block(_))
            });
        if !lanes_ok {
            if Self::act8_many(parts, x, m) {
                return;
            }
            for (q, y) in parts.iter_mut() {
                q.matmul(x, m, y);
            }
            return;
        }
        let mut lp: Vec<lanes::Part> = parts
            .iter_mut()
            .filter_map(|(q, y)| match &q.store {
                Store::Block(t) => Some((q.lane_codes(t), t, &mut **y)),
                _ => None,
            })
            .collect();
        lanes::matvec_many(&mut lp, x);
    }

    /// The decode copy of block tensor `t` (this matrix's store), made once.
    fn lane_codes(&self, t: &BlockTensor) -> &LaneCodes {
        self.lanes.get_or_init(|| LaneCodes::pack(t))
    }

    /// Row `r` of a 4-bit matrix as the W4A8 kernels take it.
    fn q4_row(&self, r: usize) -> Q4Row<'_> {
        let k = self.cols;
        match &self.store {
            Store::Block(t) => {
                let (b0, b1) = (r * k / QK, (r + 1) * k / QK);
                let (d, qs) = (&t.scales[b0..b1], &t.qs[b0 * QK / 2..b1 * QK / 2]);
                match t.format {
                    BlockFormat::Q4_1 => Q4Row::Q4_1 { d, m: &t.mins[b0..b1], qs },
                    _ => Q4Row::Q4_0 { d, qs },
                }
            }
            Store::Q4K(t) => {
                let (s0, s1) = (r * k / QK_K, (r + 1) * k / QK_K);
                Q4Row::Q4K {
                    d: &t.d[s0..s1],
                    dmin: &t.dmin[s0..s1],
                    scales: &t.scales[s0 * 12..s1 * 12],
                    qs: &t.qs[s0 * 128..s1 * 128],
                }
            }
            _ => unreachable!("only 4-bit formats quantize activations"),
        }
    }

    /// Prefill path: dequantize blocks of rows, multiply with the f32 GEMM.
    fn tiled_matmul(&self, x: &[f32], m: usize, y: &mut [f32]) {
        let (k, n) = (self.cols, self.rows);
        // 256 KiB of dequantized weights per task: stays in L2 while every
        // token row streams past it.
        let nb = ((1 << 16) / k.max(1)).clamp(8, 256);
        let out = SendPtr(y.as_mut_ptr());
        (0..n.div_ceil(nb)).into_par_iter().for_each_init(
            || (vec![0.0f32; nb * k], vec![0.0f32; m * nb]),
            |(wt, yt), b| {
                let (r0, r1) = (b * nb, ((b + 1) * nb).min(n));
                let rows = r1 - r0;
                self.dequantize_rows(r0, r1, &mut wt[..rows * k]);
                matmul(1, (m, k, rows), x, &wt[..rows * k], Layout::NxK, &mut yt[..m * rows]);
                for t in 0..m {
                    for (j, &v) in yt[t * rows..(t + 1) * rows].iter().enumerate() {
                        // SAFETY: columns r0..r1 belong to this task alone.
                        unsafe { *out.get().add(t * n + r0 + j) = v };
                    }
                }
            },
        );
    }

    fn ternary_matmul(&self, t: &TernaryMatrix, x: &[f32], m: usize, y: &mut [f32], simd: bool) {
        let (k, n) = (self.cols, self.rows);
        let mut xq = vec![0i16; m * t.words * 64];
        let mut sx = vec![0.0f32; m];
        ternary::quantize_activations(x, k, t.words, &mut xq, &mut sx);
        let isa = if simd {
            super::dispatch::gemv(self.format, false, DotIsa::current())
        } else {
            DotIsa::Portable
        };
        let out = SendPtr(y.as_mut_ptr());
        const ROWS: usize = 16;
        (0..n.div_ceil(ROWS)).into_par_iter().for_each(|b| {
            for r in b * ROWS..((b + 1) * ROWS).min(n) {
                for tok in 0..m {
                    let acc = t.dot_row_isa(r, &xq[tok * t.words * 64..(tok + 1) * t.words * 64], isa);
                    // SAFETY: (tok, r) is inside y and row r belongs to this task.
                    unsafe { *out.get().add(tok * n + r) = acc as f32 * (t.gamma * sx[tok]) };
                }
            }
        });
    }

    /// Dot product of weight row `r` with one token `x`, with the kernels of
    /// `isa` (AVX-512, AVX2 or portable; the caller's dispatch-table choice).
    fn dot_row(&self, r: usize, x: &[f32], xsums: &[f32], isa: DotIsa) -> f32 {
        let k = self.cols;
        #[cfg(target_arch = "x86_64")]
        if isa >= DotIsa::Avx512 {
            // SAFETY: the CPU has AVX-512 F/BW/VL, F16C and FMA; every slice
            // below holds exactly one row (k values, k/32 blocks).
            unsafe {
                return match &self.store {
                    Store::F32(w) => avx512::dot_f32(&w[r * k..(r + 1) * k], x),
                    Store::F16(w) => avx512::dot_f16(&w[r * k..(r + 1) * k], x),
                    Store::Bf16(w) => avx512::dot_bf16(&w[r * k..(r + 1) * k], x),
                    Store::Int8 { q, scales } => avx512::dot_i8(&q[r * k..(r + 1) * k], x) * scales[r],
                    Store::Block(t) => {
                        let (b0, b1, cb) = (r * k / QK, (r + 1) * k / QK, t.format.code_bytes());
                        let (d, qs) = (&t.scales[b0..b1], &t.qs[b0 * cb..b1 * cb]);
                        match t.format {
                            BlockFormat::Q8_0 => avx512::dot_q8_0(d, qs, x),
                            BlockFormat::Q4_0 => avx512::dot_q4(d, None, qs, x, xsums),
                            BlockFormat::Q4_1 => avx512::dot_q4(d, Some(&t.mins[b0..b1]), qs, x, xsums),
                        }
                    }
                    // The portable loops, compiled for AVX-512 (`simd_dispatch!`).
                    Store::Q4K(t) => portable::dot_q4k(t, r, x),
                    Store::Q6K(t) => portable::dot_q6k(t, r, x),
                    Store::Ternary(_) => unreachable!("ternary rows take the integer path"),
                };
            }
        }
        #[cfg(target_arch = "x86_64")]
        if isa == DotIsa::Avx2 {
            use super::avx2::fdot;
            // SAFETY: the CPU has AVX2, FMA and F16C; the slices hold one row.
            unsafe {
                return match &self.store {
                    Store::F32(w) => fdot::dot_f32(&w[r * k..(r + 1) * k], x),
                    Store::F16(w) => fdot::dot_f16(&w[r * k..(r + 1) * k], x),
                    Store::Bf16(w) => fdot::dot_bf16(&w[r * k..(r + 1) * k], x),
                    Store::Int8 { q, scales } => fdot::dot_i8(&q[r * k..(r + 1) * k], x) * scales[r],
                    Store::Block(t) => {
                        let (b0, b1, cb) = (r * k / QK, (r + 1) * k / QK, t.format.code_bytes());
                        let (d, qs) = (&t.scales[b0..b1], &t.qs[b0 * cb..b1 * cb]);
                        match t.format {
                            BlockFormat::Q8_0 => fdot::dot_q8_0(d, qs, x),
                            BlockFormat::Q4_0 => fdot::dot_q4(d, None, qs, x, xsums),
                            BlockFormat::Q4_1 => fdot::dot_q4(d, Some(&t.mins[b0..b1]), qs, x, xsums),
                        }
                    }
                    // The portable loops, compiled for AVX2 (`simd_dispatch!`).
                    Store::Q4K(t) => portable::dot_q4k(t, r, x),
                    Store::Q6K(t) => portable::dot_q6k(t, r, x),
                    Store::Ternary(_) => unreachable!("ternary rows take the integer path"),
                };
            }
        }
        match &self.store {
            Store::F32(w) => portable::dot_f32(&w[r * k..(r + 1) * k], x),
            Store::F16(w) => portable::dot_half(&w[r * k..(r + 1) * k], x),
            Store::Bf16(w) => portable::dot_half(&w[r * k..(r + 1) * k], x),
            Store::Int8 { q, scales } => portable::dot_i8(&q[r * k..(r + 1) * k], x) * scales[r],
            Store::Block(t) => {
                let (b0, b1, cb) = (r * k / QK, (r + 1) * k / QK, t.format.code_bytes());
                let mins = if t.format == BlockFormat::Q4_1 { &t.mins[b0..b1] } else { &[][..] };
                portable::dot_blocks(t.format, &t.scales[b0..b1], mins, &t.qs[b0 * cb..b1 * cb], x, xsums)
            }
            Store::Q4K(t) => portable::dot_q4k(t, r, x),
            Store::Q6K(t) => portable::dot_q6k(t, r, x),
            Store::Ternary(_) => unreachable!("ternary rows take the integer path"),
        }
    }
}

#[cfg(test)]
mod tests;
