//! `model`: quantize every projection matrix of a catalogue model, streaming
//! chunk by chunk so a 7B or 13B model never has to fit in memory.
//!
//! Source weights come from a seeded pool of at most 32M values (128 MiB),
//! read at a different offset for every chunk: generating billions of random
//! numbers per iteration would time the generator, and holding the model
//! would need tens of GB. Each chunk is encoded into a per-thread buffer that
//! is reused, as a converter writing its output file would (the file write
//! is not timed). Embeddings, norms and biases stay f32 and are only counted.

use super::choice;
use super::data::{self, Dist, accuracy};
use crate::backend::cpu::{Context, install};
use crate::kernels::quant::blocks::{BlockFormat, QK, dequantize_blocks, quantize_blocks};
use crate::kernels::quant::int8::{self, QParams};
use crate::kernels::quant::{clamp_to_i32, rne, ternary};
use crate::model::config::ModelConfig;
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload, skip};
use crate::workload::Metric;
use anyhow::{Result, bail};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

/// Valid `format` values.
pub(crate) const FORMATS: &[&str] = &["int8", "q8_0", "q4_0", "q4_1", "ternary", "f16", "bf16"];

/// Values per encoded chunk (whole rows): 1 MiB of f32.
const CHUNK: usize = 1 << 18;
/// Largest source pool.
const POOL: usize = 1 << 25;

/// One projection matrix and where its chunks read the pool.
struct Tensor {
    rows: usize,
    cols: usize,
    offset: usize,
}

struct ModelQuant {
    model: String,
    format: &'static str,
    tensors: Vec<Tensor>,
    pool_values: Vec<f32>,
    other_params: u64,
    expected_bytes: u64,
    written: u64,
    sample: Option<(f64, f64, Vec<Metric>)>,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
}

/// Bytes one chunk of `rows x cols` takes in `format`.
fn chunk_bytes(format: &str, rows: usize, cols: usize) -> u64 {
    let n = (rows * cols) as u64;
    match format {
        "int8" => n + 4 * rows as u64,
        "q8_0" => n / QK as u64 * BlockFormat::Q8_0.block_bytes() as u64,
        "q4_0" => n / QK as u64 * BlockFormat::Q4_0.block_bytes() as u64,
        "q4_1" => n / QK as u64 * BlockFormat::Q4_1.block_bytes() as u64,
        "ternary" => n.div_ceil(5),
        _ => 2 * n,
    }
}

/// Rows per chunk of a tensor with `cols` columns.
fn chunk_rows(rows: usize, cols: usize) -> usize {
    (CHUNK / cols.max(1)).clamp(1, rows.max(1))
}

fn block_format(format: &str) -> Option<BlockFormat> {
    match format {
        "q8_0" => Some(BlockFormat::Q8_0),
        "q4_0" => Some(BlockFormat::Q4_0),
        "q4_1" => Some(BlockFormat::Q4_1),
        _ => None,
    }
}

/// Encodes `x` (`rows x cols`) into `out`, returning the bytes written.
/// `gamma` is the tensor's ternary scale.
fn encode(format: &str, x: &[f32], rows: usize, cols: usize, gamma: f32, out: &mut Vec<u8>) -> u64 {
    let bytes = chunk_bytes(format, rows, cols) as usize;
    out.resize(bytes, 0);
    match format {
        "int8" => {
            let (codes, scales) = out.split_at_mut(rows * cols);
            for (r, (x, q)) in x.chunks(cols).zip(codes.chunks_mut(cols)).enumerate() {
                let (lo, hi) = int8::min_max_serial(x);
                let p = QParams::symmetric(lo.abs().max(hi));
                let q: &mut [i8] = bytemuck_i8(q);
                int8::quantize_with(x, p, -127, 127, q);
                scales[4 * r..4 * r + 4].copy_from_slice(&p.scale.to_le_bytes());
            }
        }
        "ternary" => {
            let mut codes = [0i8; 5];
            let inv = 1.0 / (gamma + ternary::EPS);
            for (o, x) in out.iter_mut().zip(x.chunks(5)) {
                for (c, &v) in codes.iter_mut().zip(x) {
                    *c = clamp_to_i32(rne(v * inv), -1.0, 1.0) as i8;
                }
                *o = codes[..x.len()].iter().rev().fold(0u8, |a, &t| a * 3 + (t + 1) as u8);
            }
        }
        "f16" | "bf16" => {
            let halves: &mut [u16] = u16s(out);
            if format == "f16" {
                let h: &mut [f16] = unsafe_cast_f16(halves);
                h.convert_from_f32_slice(x);
            } else {
                let h: &mut [bf16] = unsafe_cast_bf16(halves);
                h.convert_from_f32_slice(x);
            }
        }
        f => {
            let bf = block_format(f).expect("block format");
            let blocks = x.len() / QK;
            let meta = if bf == BlockFormat::Q4_1 { 2 * blocks } else { blocks };
            let (heads, qs) = out.split_at_mut(2 * meta);
            let heads: &mut [f16] = unsafe_cast_f16(u16s(heads));
            let (d, m) = heads.split_at_mut(blocks);
            quantize_blocks(bf, x, d, m, qs);
        }
    }
    bytes as u64
}

fn bytemuck_i8(b: &mut [u8]) -> &mut [i8] {
    // SAFETY: u8 and i8 have identical size, alignment and validity.
    unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr().cast(), b.len()) }
}

fn u16s(b: &mut [u8]) -> &mut [u16] {
    // A Vec<u8> only promises byte alignment; malloc always gives at least 8,
    // and the assert turns a surprise into a loud failure rather than data.
    // SAFETY: any bit pattern is a valid u16.
    let (pre, mid, post) = unsafe { b.align_to_mut::<u16>() };
    assert!(pre.is_empty() && post.is_empty(), "encode buffer is not 2-byte aligned");
    mid
}

fn unsafe_cast_f16(h: &mut [u16]) -> &mut [f16] {
    // SAFETY: f16 is repr(transparent) over u16.
    unsafe { std::slice::from_raw_parts_mut(h.as_mut_ptr().cast(), h.len()) }
}

fn unsafe_cast_bf16(h: &mut [u16]) -> &mut [bf16] {
    // SAFETY: bf16 is repr(transparent) over u16.
    unsafe { std::slice::from_raw_parts_mut(h.as_mut_ptr().cast(), h.len()) }
}

/// Decodes a chunk written by [`encode`] (for verification).
fn decode(format: &str, bytes: &mut [u8], rows: usize, cols: usize, gamma: f32) -> Vec<f32> {
    let n = rows * cols;
    let mut out = vec![0.0f32; n];
    match format {
        "int8" => {
            let (codes, scales) = bytes.split_at(n);
            for (r, (o, q)) in out.chunks_mut(cols).zip(codes.chunks(cols)).enumerate() {
                let s = f32::from_le_bytes([
                    scales[4 * r],
                    scales[4 * r + 1],
                    scales[4 * r + 2],
                    scales[4 * r + 3],
                ]);
                o.iter_mut().zip(q).for_each(|(o, &c)| *o = c as i8 as f32 * s);
            }
        }
        "ternary" => {
            let codes = ternary::unpack_base3(bytes, n);
            out.iter_mut().zip(codes).for_each(|(o, c)| *o = c as f32 * gamma);
        }
        "f16" => out.iter_mut().zip(unsafe_cast_f16(u16s(bytes)).iter()).for_each(|(o, h)| *o = h.to_f32()),
        "bf16" => out.iter_mut().zip(unsafe_cast_bf16(u16s(bytes)).iter()).for_each(|(o, h)| *o = h.to_f32()),
        f => {
            let bf = block_format(f).expect("block format");
            let blocks = n / QK;
            let meta = if bf == BlockFormat::Q4_1 { 2 * blocks } else { blocks };
            let (heads, qs) = bytes.split_at_mut(2 * meta);
            let heads: &[f16] = unsafe_cast_f16(u16s(heads));
            let (d, m) = heads.split_at(blocks);
            dequantize_blocks(bf, d, m, qs, &mut out);
        }
    }
    out
}

pub(crate) fn prepare(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    let format = choice(case, "format", FORMATS)?;
    let name = case.str("model")?;
    let config = ModelConfig::preset(&name).map_err(|e| anyhow::anyhow!("case {}: {e}", case.id))?;
    let mut tensors = Vec::new();
    let mut other_params = 0u64;
    let mut quantized = 0usize;
    for w in config.weights() {
        if !w.is_matrix() {
            other_params += w.numel() as u64;
            continue;
        }
        let (rows, cols) = (w.shape[0], w.shape[1]);
        if block_format(format).is_some() && !cols.is_multiple_of(QK) {
            bail!("case {}: {} has rows of {cols} values, not a multiple of {QK}", case.id, w.name);
        }
        tensors.push(Tensor { rows, cols, offset: 0 });
        quantized += rows * cols;
    }
    let pool_len = quantized.min(POOL);
    if let Some(avail) = crate::util::mem_available()
        && (pool_len as u64 * 4) > avail / 4
    {
        return Err(skip(format!(
            "the {} MiB source pool needs more than a quarter of available memory",
            pool_len >> 18
        )));
    }
    // Spread tensors over the pool so neighbouring tensors differ.
    for (i, t) in tensors.iter_mut().enumerate() {
        t.offset = (i * 7_919_993) % pool_len.max(1);
    }
    let expected_bytes = tensors
        .iter()
        .map(|t| {
            let r = chunk_rows(t.rows, t.cols);
            let full = (t.rows / r) as u64 * chunk_bytes(format, r, t.cols);
            let rest = if t.rows % r > 0 { chunk_bytes(format, t.rows % r, t.cols) } else { 0 };
            full + rest + if format == "ternary" { 4 } else { 0 }
        })
        .sum();
    let (pool, _) = (ctx.pool(), ctx.threads());
    let pool_values =
        install(pool.as_deref(), || data::draw(Dist::Heavy, pool_len, 1, 0.02, super::seed(case)));
    Ok(Box::new(ModelQuant {
        model: name,
        format,
        tensors,
        pool_values,
        other_params,
        expected_bytes,
        written: 0,
        sample: None,
        pool,
    }))
}

impl ModelQuant {
    /// The source values of chunk `c` of tensor `t` (`len` values).
    fn source(&self, t: &Tensor, c: usize, len: usize) -> &[f32] {
        let span = self.pool_values.len() - len + 1;
        let start = (t.offset + c * CHUNK) % span;
        &self.pool_values[start..start + len]
    }

    /// Quantizes the whole model once; returns the bytes written.
    fn once(&self) -> u64 {
        let mut total = 0u64;
        for t in &self.tensors {
            let r = chunk_rows(t.rows, t.cols);
            let chunks = t.rows.div_ceil(r);
            let len = |c: usize| (r.min(t.rows - c * r)) * t.cols;
            let gamma = if self.format == "ternary" {
                let s: f64 = (0..chunks)
                    .into_par_iter()
                    .map(|c| self.source(t, c, len(c)).iter().map(|v| v.abs() as f64).sum::<f64>())
                    .sum();
                total += 4;
                (s / (t.rows * t.cols) as f64) as f32
            } else {
                0.0
            };
            total += (0..chunks)
                .into_par_iter()
                .map_init(Vec::new, |buf, c| {
                    let n = len(c);
                    encode(self.format, self.source(t, c, n), n / t.cols, t.cols, gamma, buf)
                })
                .sum::<u64>();
        }
        total
    }
}

impl Workload for ModelQuant {
    fn verify(&mut self) -> Result<Verification> {
        let written = install(self.pool.as_deref(), || self.once());
        if written != self.expected_bytes {
            bail!(
                "{}: wrote {written} bytes, the format's size formula gives {}",
                self.model,
                self.expected_bytes
            );
        }
        // Round trip of the first chunk of the largest tensor.
        let t = self.tensors.iter().max_by_key(|t| t.rows * t.cols).expect("models have matrices");
        let r = chunk_rows(t.rows, t.cols);
        let x = self.source(t, 0, r * t.cols).to_vec();
        let gamma = ternary::absmean(&x);
        let mut buf = Vec::new();
        encode(self.format, &x, r, t.cols, gamma, &mut buf);
        let back = decode(self.format, &mut buf, r, t.cols, gamma);
        let mut worst = 0.0f64;
        for (i, (&a, &b)) in x.iter().zip(&back).enumerate() {
            let row = &x[i / t.cols * t.cols..(i / t.cols + 1) * t.cols];
            let block = &x[i / QK * QK..(i / QK + 1) * QK];
            let amax = |s: &[f32]| s.iter().fold(0.0f32, |m, v| m.max(v.abs())) as f64;
            let bound = match self.format {
                "int8" => amax(row) / 127.0 * 0.5 * (1.0 + 1e-5),
                "q8_0" => amax(block) / 127.0 * (0.5 + 127.0 / 2048.0) * (1.0 + 1e-5),
                "q4_0" => amax(block) / 8.0 * (1.0 + 8.0 / 2048.0) * (1.0 + 1e-5),
                "q4_1" => {
                    let (lo, hi) = block.iter().fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
                    (hi - lo) as f64 / 15.0 * (1.0 + 16.0 / 2048.0) + lo.abs() as f64 / 2048.0 + 1e-12
                }
                // Clipping at +-gamma dominates: anything beyond 1.5 gamma is clipped.
                "ternary" => {
                    let (g, e) = (gamma as f64, ternary::EPS as f64);
                    (a.abs() as f64 - g).max(0.5 * g + 2.0 * e) * (1.0 + 1e-5)
                }
                "f16" => a.abs() as f64 / 2048.0 + 6e-8,
                _ => a.abs() as f64 / 256.0 + 1e-38,
            };
            let err = (a as f64 - b as f64).abs();
            if err > bound {
                bail!(
                    "{}: round trip of value {i}: {a} -> {b}, error {err:e} > bound {bound:e}",
                    self.format
                );
            }
            worst = worst.max(err / bound.max(1e-300));
        }
        let acc = accuracy(&x, &back);
        let bits = self.expected_bytes as f64 * 8.0
            / self.tensors.iter().map(|t| (t.rows * t.cols) as f64).sum::<f64>();
        self.sample = Some((worst, bits, acc.metrics(bits)));
        self.written = written;
        Ok(Verification {
            passed: true,
            reference:
                "bytes written vs the size formula; round trip of one chunk within the format's error bound"
                    .into(),
            max_error: Some(worst),
            detail: format!("{} values of the largest tensor; max_error is the worst error / bound", x.len()),
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        let n: f64 = self.tensors.iter().map(|t| (t.rows * t.cols) as f64).sum();
        vec![Throughput::elements(n), Throughput::bytes(4.0 * n + self.expected_bytes as f64)]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.written = install(self.pool.as_deref(), || self.once());
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let quantized: u64 = self.tensors.iter().map(|t| (t.rows * t.cols) as u64).sum();
        let before = 4 * (quantized + self.other_params);
        let after = self.written + 4 * self.other_params;
        let mut m = vec![
            Metric::new("params", (quantized + self.other_params) as f64, ""),
            Metric::new("quantized_params", quantized as f64, ""),
            Metric::new("bytes_before", before as f64, "B"),
            Metric::new("bytes_after", after as f64, "B"),
            Metric::new("compression_ratio", before as f64 / after as f64, "ratio"),
        ];
        if let Some((_, _, sample)) = &self.sample {
            // Accuracy of one chunk (the largest tensor's first) and the
            // matrices' bits per weight.
            m.extend(sample.iter().cloned());
        }
        m
    }
}
