//! Linear layers (`y = x W^T + b`, `W` stored `[out, in]`) over several weight
//! storages with f32 activations and f32 accumulation.
//!
//! [`Weights`] is the one place a storage format plugs in. The int8 and
//! 4-bit (Q4_0) weight-only formats are the shared kernels of
//! `src/kernels/quant/` ([`QMatrix`]: fused dequantize-and-dot for decode,
//! dequantized tiles through the f32 GEMM for prefill), not copies of them.

use crate::kernels::quant::{DynamicLinear, Int8Path, QMatrix, WeightFormat, halfs};
use crate::kernels::sgemm::PackedB;
use crate::kernels::{Layout, matmul};
use anyhow::Result;
use half::{bf16, f16};
use rayon::prelude::*;

/// Storage precision of the weight matrices (activations stay f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    /// 4-byte IEEE single.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16 (f32's exponent, 8-bit mantissa).
    BF16,
    /// int8 weight-only, symmetric, one f32 scale per output row.
    Int8,
    /// llama.cpp Q4_0 weight-only: blocks of 32 4-bit codes with an f16 scale.
    Q4_0,
    /// W8A8 (the mobile suite's O2): int8 weights with one f32 scale per
    /// output row, and activations quantized to int8 per row on every call
    /// ([`DynamicLinear`]: the int8 GEMM, one f32 rescale per output).
    W8A8,
}

/// Names accepted by the `dtype` parameter (not `w8a8`: the mobile suite's
/// O2 runs it, with checks that allow for its activation rounding).
pub const DTYPES: &[&str] = &["f32", "f16", "bf16", "int8", "q4_0"];

impl DType {
    /// Parses a `dtype` parameter value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "f32" => Some(Self::F32),
            "f16" => Some(Self::F16),
            "bf16" => Some(Self::BF16),
            "int8" => Some(Self::Int8),
            "q4_0" => Some(Self::Q4_0),
            "w8a8" => Some(Self::W8A8),
            _ => None,
        }
    }
    /// Bytes per stored weight (Q4_0: 18 bytes per block of 32; int8's
    /// per-row scales are left out, under 1% for any width above 400).
    pub fn bytes(self) -> f64 {
        match self {
            Self::F32 => 4.0,
            Self::F16 | Self::BF16 => 2.0,
            Self::Int8 | Self::W8A8 => 1.0,
            Self::Q4_0 => 18.0 / 32.0,
        }
    }
    /// The quantization kernels' format for the weight-only dtypes.
    pub fn quant_format(self) -> Option<WeightFormat> {
        match self {
            Self::Int8 | Self::W8A8 => Some(WeightFormat::Int8),
            Self::Q4_0 => Some(WeightFormat::Q4_0),
            _ => None,
        }
    }
    /// Whether projections widen weights into a [`LinearScratch`] (the half
    /// formats; f32 goes straight to the GEMM, quantized formats to [`QMatrix`]).
    pub fn needs_scratch(self) -> bool {
        matches!(self, Self::F16 | Self::BF16)
    }
    /// The parameter spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::BF16 => "bf16",
            Self::Int8 => "int8",
            Self::Q4_0 => "q4_0",
            Self::W8A8 => "w8a8",
        }
    }
}

/// A weight matrix in one storage format.
pub enum Weights {
    /// Plain f32: projections go straight to the shared GEMM (CPUs without
    /// AVX-512).
    F32(Vec<f32>),
    /// f32 packed once into tfbench's GEMM panel format, so no product
    /// repacks the weights (the f32 storage wherever AVX-512 runs).
    Packed(PackedB),
    /// IEEE half, widened to f32 block by block.
    F16(Vec<f16>),
    /// bfloat16, widened to f32 block by block.
    BF16(Vec<bf16>),
    /// int8 or Q4_0 through the shared quantization kernels.
    Quant(QMatrix),
    /// W8A8: int8 weights, activations quantized per row on every call.
    Dynamic(DynamicLinear),
}

impl Weights {
    /// Stores `values`, a `[rows, cols]` matrix, in `dtype` (Q4_0 needs
    /// `cols` to be a multiple of 32).
    pub fn from_f32(values: Vec<f32>, rows: usize, cols: usize, dtype: DType) -> Result<Self> {
        Ok(match dtype {
            DType::F32 => match PackedB::from_nxk(&values, rows, cols) {
                Some(p) => Self::Packed(p),
                None => Self::F32(values),
            },
            DType::F16 => Self::F16(values.iter().map(|&v| f16::from_f32(v)).collect()),
            DType::BF16 => Self::BF16(values.iter().map(|&v| bf16::from_f32(v)).collect()),
            DType::W8A8 => Self::Dynamic(DynamicLinear::new(&values, rows, cols, Int8Path::detect())),
            DType::Int8 | DType::Q4_0 => {
                let format = dtype.quant_format().expect("quantized dtypes have a format");
                // Weight-only: f32 activations, so the model is exactly its
                // dequantized weights and is verified against them. The W4A8
                // decode kernels (int8 activations too) are the quant suite's.
                Self::Quant(QMatrix::quantize(format, &values, rows, cols)?.with_f32_activations())
            }
        })
    }

    /// Bytes per stored parameter (fractional for future block formats).
    pub fn bytes_per_param(&self) -> f64 {
        match self {
            Self::F32(_) | Self::Packed(_) => 4.0,
            Self::F16(_) | Self::BF16(_) => 2.0,
            Self::Quant(q) => q.storage_bytes() as f64 / (q.rows * q.cols).max(1) as f64,
            Self::Dynamic(d) => d.storage_bytes() as f64 / d.weights.data.len().max(1) as f64,
        }
    }

    /// Number of stored parameters.
    pub fn len(&self) -> usize {
        match self {
            Self::F32(w) => w.len(),
            Self::Packed(p) => p.k() * p.n(),
            Self::F16(w) => w.len(),
            Self::BF16(w) => w.len(),
            Self::Quant(q) => q.rows * q.cols,
            Self::Dynamic(d) => d.weights.data.len(),
        }
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Widens elements `start..start + out.len()` into `out` (whole rows for
    /// the quantized formats, which store rows as blocks).
    pub fn row_into(&self, start: usize, out: &mut [f32]) {
        let n = out.len();
        match self {
            Self::F32(w) => out.copy_from_slice(&w[start..start + n]),
            Self::Packed(p) => {
                let k = p.k().max(1);
                assert!(
                    start.is_multiple_of(k) && n.is_multiple_of(k),
                    "row_into: packed weights are read by whole rows"
                );
                out.chunks_mut(k).enumerate().for_each(|(r, row)| p.row_into(start / k + r, row));
            }
            // The shared slice conversions (AVX-512 where present, else
            // `half`'s F16C / portable ones); per-element `to_f32` is ~20x slower.
            Self::F16(w) => halfs::f16_to_f32(&w[start..start + n], out),
            Self::BF16(w) => halfs::bf16_to_f32(&w[start..start + n], out),
            Self::Quant(q) => {
                let k = q.cols.max(1);
                assert!(
                    start.is_multiple_of(k) && n.is_multiple_of(k),
                    "row_into: quantized weights are read by whole rows"
                );
                q.dequantize_rows(start / k, (start + n) / k, out);
            }
            Self::Dynamic(d) => {
                let k = d.weights.cols.max(1);
                for (i, o) in out.iter_mut().enumerate() {
                    *o = d.weights.data[start + i] as f32 * d.scales[(start + i) / k];
                }
            }
        }
    }

    /// Every value as f32 (for references and tests): for the quantized
    /// formats, the dequantized model every check compares against.
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            Self::Quant(q) => return q.dequantize(),
            Self::Packed(p) => return p.to_nxk(),
            _ => {}
        }
        let mut out = vec![0.0; self.len()];
        self.row_into(0, &mut out);
        out
    }
}

/// Output rows of a half-precision weight widened per task: 16 rows of a
/// 4096-wide matrix are 256 KiB of f32, which stays in L2 while the GEMM
/// reads it back.
pub const BLOCK_ROWS: usize = 16;

/// Per-thread scratch for half-precision projections, sized once.
pub struct LinearScratch {
    slots: Vec<Vec<f32>>,
    blocks: Vec<f32>,
}

impl LinearScratch {
    /// Scratch for `threads` workers, inputs up to `max_in` wide, outputs up
    /// to `max_out` wide, `max_rows` activation rows. Empty when every
    /// weight is f32 (the GEMM needs none).
    pub fn new(threads: usize, max_rows: usize, max_in: usize, max_out: usize, half: bool) -> Self {
        if !half {
            return Self { slots: Vec::new(), blocks: Vec::new() };
        }
        let slot = BLOCK_ROWS * max_in + max_rows * BLOCK_ROWS;
        Self {
            slots: (0..threads.max(1)).map(|_| vec![0.0; slot]).collect(),
            blocks: vec![0.0; max_rows * max_out.next_multiple_of(BLOCK_ROWS)],
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        (self.slots.iter().map(Vec::len).sum::<usize>() + self.blocks.len()) * 4
    }

    /// f32 values [`LinearScratch::new`] allocates for these sizes.
    pub fn bytes_for(threads: usize, max_rows: usize, max_in: usize, max_out: usize, half: bool) -> usize {
        if !half {
            return 0;
        }
        (threads.max(1) * (BLOCK_ROWS * max_in + max_rows * BLOCK_ROWS)
            + max_rows * max_out.next_multiple_of(BLOCK_ROWS))
            * 4
    }
}

/// A linear layer `y = x W^T + b` with `W` `[out, in]`.
pub struct Linear {
    /// Output features.
    pub out: usize,
    /// Input features.
    pub inp: usize,
    /// `[out, in]` weights.
    pub w: Weights,
    /// Optional bias of `out`.
    pub bias: Option<Vec<f32>>,
}

impl Linear {
    /// `y[m x out] = x[m x in] W^T (+ b)`. f32 weights use the shared GEMM on
    /// `threads` threads; half weights are widened [`BLOCK_ROWS`] output rows
    /// at a time, each block a single-threaded GEMM, blocks in parallel (so
    /// there is never a threaded GEMM inside a parallel loop).
    pub fn forward(&self, threads: usize, x: &[f32], m: usize, y: &mut [f32], scratch: &mut LinearScratch) {
        let (k, n) = (self.inp, self.out);
        match &self.w {
            Weights::F32(w) => matmul(threads, (m, k, n), x, w, Layout::NxK, y),
            // The bias goes in with the kernel's store: a separate pass over
            // y ran on one thread while the others waited.
            Weights::Packed(p) => return p.matmul_bias_into(threads, m, x, self.bias.as_deref(), y, false),
            Weights::F16(_) | Weights::BF16(_) => self.forward_blocked(x, m, y, scratch),
            // The shared kernels pick the fused decode dot (m <= 8) or
            // dequantized tiles through the GEMM, on the current pool.
            Weights::Quant(q) => q.matmul(x, m, y),
            Weights::Dynamic(d) => d.forward(x, m, y),
        }
        if let Some(b) = &self.bias {
            for row in y.chunks_mut(n) {
                row.iter_mut().zip(b).for_each(|(v, &bb)| *v += bb);
            }
        }
    }

    /// [`forward`](Self::forward) for layers sharing one input `x` (a
    /// block's query, key and value projections; gate and up): quantized
    /// layers go through [`QMatrix::matmul_many`], which runs one token's
    /// products in a single parallel loop on one quantization of `x`.
    pub fn forward_many(
        threads: usize,
        x: &[f32],
        m: usize,
        outs: &mut [(&Linear, &mut [f32])],
        scratch: &mut LinearScratch,
    ) {
        if !outs.iter().all(|(l, _)| matches!(l.w, Weights::Quant(_))) {
            for (l, y) in outs.iter_mut() {
                l.forward(threads, x, m, y, scratch);
            }
            return;
        }
        let mut parts: Vec<(&QMatrix, &mut [f32])> = outs
            .iter_mut()
            .filter_map(|(l, y)| match &l.w {
                Weights::Quant(q) => Some((q, &mut **y)),
                _ => None,
            })
            .collect();
        QMatrix::matmul_many(&mut parts, x, m);
        for (l, y) in outs.iter_mut() {
            if let Some(b) = &l.bias {
                for row in y.chunks_mut(l.out) {
                    row.iter_mut().zip(b).for_each(|(v, &bb)| *v += bb);
                }
            }
        }
    }

    /// `y[m x out] += x[m x in] W^T (+ b)`: a residual connection. Packed
    /// weights add straight into `y` from the kernel's store; other kinds go
    /// through `tmp` (`m x out`) and one more pass.
    pub fn forward_add(
        &self,
        threads: usize,
        x: &[f32],
        m: usize,
        y: &mut [f32],
        tmp: &mut [f32],
        scratch: &mut LinearScratch,
    ) {
        if let Weights::Packed(p) = &self.w {
            return p.matmul_bias_into(threads, m, x, self.bias.as_deref(), y, true);
        }
        self.forward(threads, x, m, tmp, scratch);
        super::ops::add_into(y, tmp);
    }

    fn forward_blocked(&self, x: &[f32], m: usize, y: &mut [f32], scratch: &mut LinearScratch) {
        let (k, n) = (self.inp, self.out);
        assert_eq!(x.len(), m * k, "linear: x is not {m}x{k}");
        assert_eq!(y.len(), m * n, "linear: y is not {m}x{n}");
        let nblocks = n.div_ceil(BLOCK_ROWS);
        let need_slot = BLOCK_ROWS * k + m * BLOCK_ROWS;
        if scratch.slots.is_empty()
            || scratch.slots[0].len() < need_slot
            || scratch.blocks.len() < nblocks * m * BLOCK_ROWS
        {
            // Only when a caller outgrows its sizing; correct, just allocating.
            let threads = scratch.slots.len().max(crate::backend::cpu::current_threads());
            *scratch = LinearScratch::new(threads, m, k, n, true);
        }
        let workers = scratch.slots.len().min(nblocks).max(1);
        let per = nblocks.div_ceil(workers);
        let blocks = &mut scratch.blocks[..nblocks * m * BLOCK_ROWS];
        // Block b's result lands in blocks[b*m*BLOCK_ROWS..]: disjoint chunks per worker.
        blocks
            .par_chunks_mut(per * m * BLOCK_ROWS)
            .zip(scratch.slots[..workers].par_iter_mut())
            .enumerate()
            .for_each(|(wi, (dst, slot))| {
                let (wbuf, cbuf) = slot.split_at_mut(BLOCK_ROWS * k);
                for (bi, out) in dst.chunks_mut(m * BLOCK_ROWS).enumerate() {
                    let b = wi * per + bi;
                    let r0 = b * BLOCK_ROWS;
                    let rows = BLOCK_ROWS.min(n - r0);
                    self.w.row_into(r0 * k, &mut wbuf[..rows * k]);
                    let c = &mut cbuf[..m * rows];
                    matmul(1, (m, k, rows), x, &wbuf[..rows * k], Layout::NxK, c);
                    out[..m * rows].copy_from_slice(c);
                }
            });
        for b in 0..nblocks {
            let r0 = b * BLOCK_ROWS;
            let rows = BLOCK_ROWS.min(n - r0);
            let src = &blocks[b * m * BLOCK_ROWS..];
            for i in 0..m {
                y[i * n + r0..i * n + r0 + rows].copy_from_slice(&src[i * rows..(i + 1) * rows]);
            }
        }
    }

    /// Bytes of weights and bias.
    pub fn bytes(&self) -> f64 {
        self.w.len() as f64 * self.w.bytes_per_param()
            + self.bias.as_ref().map_or(0.0, |b| 4.0 * b.len() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::randn;

    #[test]
    fn every_dtype_matches_the_naive_product_of_its_stored_weights() {
        every_dtype_matches();
    }

    /// The same under every lower ISA cap: without tfbench's AVX-512 GEMM the
    /// weights stay unpacked and the `gemm` crate runs; the quantized
    /// weights take their portable kernels.
    #[test]
    fn every_dtype_matches_under_every_isa_cap() {
        for level in [crate::isa::IsaLevel::Scalar, crate::isa::IsaLevel::Avx2, crate::isa::IsaLevel::Avx512]
        {
            crate::isa::with_cap(level, every_dtype_matches);
        }
    }

    fn every_dtype_matches() {
        for &(m, k, n) in &[(1, 33, 50), (5, 64, 17), (9, 40, 16), (1, 96, 70), (12, 64, 33)] {
            let x = randn(m * k, 1);
            let w = randn(n * k, 2);
            let b = randn(n, 3);
            for dtype in [DType::F32, DType::F16, DType::BF16, DType::Int8, DType::Q4_0] {
                if dtype == DType::Q4_0 && !k.is_multiple_of(32) {
                    assert!(Weights::from_f32(w.clone(), n, k, dtype).is_err(), "Q4_0 needs k % 32 == 0");
                    continue;
                }
                let lin = Linear {
                    out: n,
                    inp: k,
                    w: Weights::from_f32(w.clone(), n, k, dtype).unwrap(),
                    bias: Some(b.clone()),
                };
                let stored = lin.w.to_f32();
                let mut want = crate::kernels::naive_matmul((m, k, n), &x, &stored, Layout::NxK);
                for r in want.chunks_mut(n) {
                    r.iter_mut().zip(&b).for_each(|(v, &bb)| *v += bb);
                }
                for threads in [1, 2, 3] {
                    let mut scratch = LinearScratch::new(threads, m, k, n, dtype.needs_scratch());
                    let mut y = vec![f32::NAN; m * n];
                    lin.forward(threads, &x, m, &mut y, &mut scratch);
                    for (i, (g, w)) in y.iter().zip(&want).enumerate() {
                        assert!(
                            (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                            "{dtype:?} {m}x{k}x{n} t{threads} [{i}]: {g} vs {w}"
                        );
                    }
                    // The residual form adds the same product to what y held.
                    let y0 = randn(m * n, 4);
                    let (mut acc, mut tmp) = (y0.clone(), vec![f32::NAN; m * n]);
                    lin.forward_add(threads, &x, m, &mut acc, &mut tmp, &mut scratch);
                    for (i, ((g, w), z)) in acc.iter().zip(&want).zip(&y0).enumerate() {
                        assert!(
                            (g - (w + z)).abs() <= 1e-4 * (1.0 + w.abs() + z.abs()),
                            "{dtype:?} {m}x{k}x{n} t{threads} forward_add [{i}]: {g} vs {}",
                            w + z
                        );
                    }
                }
                // Rounding to the storage format is bounded by its epsilon.
                let eps = match dtype {
                    DType::F32 => 0.0,
                    DType::F16 => 1.0 / 2048.0,
                    DType::BF16 => 1.0 / 256.0,
                    // Absolute: half a step of a scale of absmax/127 or /8.
                    DType::Int8 | DType::Q4_0 | DType::W8A8 => 0.0,
                };
                let absmax = w.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
                let abs = match dtype {
                    DType::Int8 => absmax / 127.0 * 0.51,
                    DType::Q4_0 => absmax / 8.0 * 1.01,
                    _ => 1e-7,
                };
                assert!(
                    w.iter().zip(&stored).all(|(a, b)| (a - b).abs() <= eps * a.abs() + abs),
                    "{dtype:?}"
                );
            }
        }
    }
}
