//! `quantize` and `dequantize`: bulk conversion throughput per format, with
//! the round trip's accuracy in the same row.

use super::data::{self, Dist, accuracy};
use super::{choice, shape2};
use crate::backend::cpu::{Context, install};
use crate::kernels::quant::blocks::{BlockFormat, BlockTensor, QK};
use crate::kernels::quant::halfs;
use crate::kernels::quant::int8::{self, Granularity, Int8Tensor, QParams, Scheme};
use crate::kernels::quant::kquant::{self, Q4KTensor, QK_K};
use crate::kernels::quant::stream_fill;
use crate::kernels::quant::ternary::{self, TernaryMatrix};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::workload::Metric;
use anyhow::{Result, bail};
use half::{bf16, f16};
use rayon::prelude::*;

/// Valid `format` values of both benchmarks.
pub(crate) const FORMATS: &[&str] = &[
    "int8_sym_tensor",
    "int8_sym_channel",
    "int8_asym_tensor",
    "int8_asym_channel",
    "q8_0",
    "q4_0",
    "q4_1",
    "q4_k",
    "ternary",
    "f16",
    "bf16",
];

/// A tensor in one of the formats, able to quantize into itself and
/// dequantize out of itself without allocating.
enum Codec {
    Int8(Int8Tensor),
    Block(BlockTensor),
    Q4K(Q4KTensor),
    Ternary(TernaryMatrix),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
}

impl Codec {
    fn new(format: &str, rows: usize, cols: usize) -> Result<Self> {
        let int8 = |s, g| Self::Int8(Int8Tensor::zeros(rows, cols, s, g));
        Ok(match format {
            "int8_sym_tensor" => int8(Scheme::Symmetric, Granularity::PerTensor),
            "int8_sym_channel" => int8(Scheme::Symmetric, Granularity::PerChannel),
            "int8_asym_tensor" => int8(Scheme::Asymmetric, Granularity::PerTensor),
            "int8_asym_channel" => int8(Scheme::Asymmetric, Granularity::PerChannel),
            "q8_0" => Self::Block(BlockTensor::zeros(BlockFormat::Q8_0, rows, cols)?),
            "q4_0" => Self::Block(BlockTensor::zeros(BlockFormat::Q4_0, rows, cols)?),
            "q4_1" => Self::Block(BlockTensor::zeros(BlockFormat::Q4_1, rows, cols)?),
            "q4_k" => Self::Q4K(Q4KTensor::zeros(rows, cols)?),
            "ternary" => Self::Ternary(TernaryMatrix::from_codes(&vec![0; rows * cols], rows, cols, 0.0)),
            "f16" => Self::F16(vec![f16::ZERO; rows * cols]),
            "bf16" => Self::Bf16(vec![bf16::ZERO; rows * cols]),
            other => bail!("unknown format `{other}`; valid: {}", FORMATS.join(", ")),
        })
    }

    fn quantize(&mut self, x: &[f32]) {
        match self {
            Self::Int8(t) => int8::quantize_into(x, t),
            Self::Block(t) => t.quantize_from(x),
            Self::Q4K(t) => t.quantize_from(x),
            Self::Ternary(t) => t.quantize_into(x),
            Self::F16(h) => h
                .par_chunks_mut(1 << 16)
                .zip(x.par_chunks(1 << 16))
                .for_each(|(h, x)| halfs::f32_to_f16(x, h)),
            Self::Bf16(h) => h
                .par_chunks_mut(1 << 16)
                .zip(x.par_chunks(1 << 16))
                .for_each(|(h, x)| halfs::f32_to_bf16(x, h)),
        }
    }

    fn dequantize(&self, out: &mut [f32]) {
        match self {
            Self::Int8(t) => int8::dequantize_into(t, out),
            Self::Block(t) => t.dequantize_into(out),
            Self::Q4K(t) => t.dequantize_into(out),
            Self::Ternary(t) => t.dequantize_into(out),
            Self::F16(h) => stream_fill(out, 1 << 16, |off, o| halfs::f16_to_f32(&h[off..off + o.len()], o)),
            Self::Bf16(h) => {
                stream_fill(out, 1 << 16, |off, o| halfs::bf16_to_f32(&h[off..off + o.len()], o))
            }
        }
    }

    fn storage_bytes(&self) -> usize {
        match self {
            Self::Int8(t) => t.storage_bytes(),
            Self::Block(t) => t.storage_bytes(),
            Self::Q4K(t) => t.storage_bytes(),
            Self::Ternary(t) => t.storage_bytes(),
            Self::F16(h) => h.len() * 2,
            Self::Bf16(h) => h.len() * 2,
        }
    }

    /// Passes `quantize` makes over the f32 input: per-tensor int8 finds the
    /// range first, ternary its mean |W|; the rest read each value once.
    fn quantize_passes(&self) -> usize {
        match self {
            Self::Int8(t) if t.granularity == Granularity::PerTensor => 2,
            Self::Ternary(_) => 2,
            _ => 1,
        }
    }

    /// Element `i` decoded by naive indexing into the storage (the reference
    /// for `dequantize`, independent of its vector loops).
    fn decode(&self, i: usize) -> f32 {
        match self {
            Self::Int8(t) => {
                let p = t.row_params(i / t.cols);
                (t.data[i] as f32 - p.zero_point as f32) * p.scale
            }
            Self::Block(t) => {
                let (b, j) = (i / QK, i % QK);
                let d = t.scales[b].to_f32();
                match t.format {
                    BlockFormat::Q8_0 => t.qs[b * QK + j] as i8 as f32 * d,
                    BlockFormat::Q4_0 | BlockFormat::Q4_1 => {
                        let byte = t.qs[b * QK / 2 + j % (QK / 2)];
                        let c = if j < QK / 2 { byte & 15 } else { byte >> 4 } as f32;
                        if t.format == BlockFormat::Q4_0 { (c - 8.0) * d } else { c * d + t.mins[b].to_f32() }
                    }
                }
            }
            Self::Q4K(t) => {
                let (b, j) = (i / QK_K, i % QK_K);
                let (sub, l) = (j / 32, j % 32);
                let p = &t.scales[b * 12..b * 12 + 12];
                // ggml's get_scale_min_k4, longhand.
                let (sc, m) = if sub < 4 {
                    (p[sub] & 63, p[sub + 4] & 63)
                } else {
                    ((p[sub + 4] & 15) | ((p[sub - 4] >> 6) << 4), (p[sub + 4] >> 4) | ((p[sub] >> 6) << 4))
                };
                let byte = t.qs[b * 128 + (sub / 2) * 32 + l];
                let q = if sub % 2 == 0 { byte & 15 } else { byte >> 4 };
                (t.d[b].to_f32() * sc as f32) * q as f32 - t.dmin[b].to_f32() * m as f32
            }
            Self::Ternary(t) => {
                let (r, c) = (i / t.cols, i % t.cols);
                let w = r * t.words + c / 64;
                (((t.plus[w] >> (c % 64)) & 1) as f32 - ((t.minus[w] >> (c % 64)) & 1) as f32) * t.gamma
            }
            Self::F16(h) => f16::from_bits(h[i].to_bits()).to_f32(),
            Self::Bf16(h) => f32::from_bits((h[i].to_bits() as u32) << 16),
        }
    }

    /// Checks the stored codes of `x` against naive per-element references.
    /// Returns a failure description, if any.
    fn check_codes(&self, x: &[f32]) -> Option<String> {
        match self {
            Self::Int8(t) => check_int8(t, x),
            Self::Block(t) => check_block(t, x),
            Self::Q4K(t) => check_q4k(t, x),
            Self::Ternary(t) => check_ternary(t, x),
            Self::F16(h) => x
                .iter()
                .zip(h)
                .position(|(&v, &q)| f16::from_f32(v) != q)
                .map(|i| format!("value {i}: {} vs {}", h[i], f16::from_f32(x[i]))),
            Self::Bf16(h) => x
                .iter()
                .zip(h)
                .position(|(&v, &q)| bf16::from_f32(v) != q)
                .map(|i| format!("value {i}: {} vs {}", h[i], bf16::from_f32(x[i]))),
        }
    }
}

/// Near a rounding tie, x * (1/scale) and x / scale may round apart.
fn near_tie(v: f64) -> bool {
    (v - v.floor() - 0.5).abs() < 1e-4
}

/// Int8 codes against the range-derived scale and round-to-nearest-even codes.
fn check_int8(t: &Int8Tensor, x: &[f32]) -> Option<String> {
    let (lo, hi) = QParams::code_range(t.scheme);
    for r in 0..t.params.len() {
        let xs = match t.granularity {
            Granularity::PerTensor => x,
            Granularity::PerChannel => &x[r * t.cols..(r + 1) * t.cols],
        };
        let (mn, mx) = xs.iter().fold((0.0f64, 0.0f64), |(a, b), &v| (a.min(v as f64), b.max(v as f64)));
        let p = t.params[r];
        let want = match t.scheme {
            Scheme::Symmetric => mn.abs().max(mx) / 127.0,
            Scheme::Asymmetric => (mx - mn) / 255.0,
        };
        if want > 0.0 && ((p.scale as f64 - want) / want).abs() > 1e-6 {
            return Some(format!("group {r}: scale {} but the range gives {want}", p.scale));
        }
        let base = if t.granularity == Granularity::PerTensor { 0 } else { r * t.cols };
        for (i, &v) in xs.iter().enumerate() {
            let u = v as f64 / p.scale as f64;
            let q = (u.round_ties_even() + p.zero_point as f64).clamp(lo as f64, hi as f64);
            let got = t.data[base + i] as f64;
            if got != q && !(near_tie(u) && (got - q).abs() == 1.0) {
                return Some(format!("value {}: {v} -> code {got}, reference {q}", base + i));
            }
        }
    }
    None
}

/// Block codes against ggml's reference, block by block, written out longhand.
fn check_block(t: &BlockTensor, x: &[f32]) -> Option<String> {
    // ggml's reference, block by block, written out longhand.
    let cb = t.format.code_bytes();
    for (b, xs) in x.chunks(QK).enumerate() {
        let mut codes = [0u8; QK];
        let mut mn = f32::MAX;
        let d = match t.format {
            BlockFormat::Q8_0 => {
                let amax = xs.iter().map(|v| v.abs()).fold(0.0, f32::max);
                let d = amax / 127.0;
                for j in 0..QK {
                    codes[j] = (xs[j] * if d != 0.0 { 1.0 / d } else { 0.0 }).round() as i8 as u8;
                }
                d
            }
            BlockFormat::Q4_0 => {
                let m = xs.iter().copied().fold(0.0f32, |a, v| if v.abs() > a.abs() { v } else { a });
                let d = m / -8.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                for j in 0..QK {
                    codes[j] = ((xs[j] * id + 8.5) as i32).min(15) as u8;
                }
                d
            }
            BlockFormat::Q4_1 => {
                mn = xs.iter().copied().fold(f32::MAX, f32::min);
                let mx = xs.iter().copied().fold(-f32::MAX, f32::max);
                let d = (mx - mn) / 15.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                for j in 0..QK {
                    codes[j] = (((xs[j] - mn) * id + 0.5) as i32).min(15) as u8;
                }
                d
            }
        };
        if t.scales[b] != f16::from_f32(d) {
            return Some(format!("block {b}: scale {} but reference {d}", t.scales[b]));
        }
        if t.format == BlockFormat::Q4_1 && t.mins[b] != f16::from_f32(mn) {
            return Some(format!("block {b}: min {} but reference {mn}", t.mins[b]));
        }
        let stored = &t.qs[b * cb..(b + 1) * cb];
        let got: Vec<u8> = if t.format == BlockFormat::Q8_0 {
            stored.to_vec()
        } else {
            (0..QK).map(|j| if j < QK / 2 { stored[j] & 15 } else { stored[j - QK / 2] >> 4 }).collect()
        };
        if got[..] != codes[..] {
            return Some(format!("block {b}: codes {got:?}, reference {codes:?}"));
        }
    }
    None
}

/// Q4_K codes against the properties of the min/max quantizer.
fn check_q4k(t: &Q4KTensor, x: &[f32]) -> Option<String> {
    // Properties of the min/max quantizer, checked in f64: each
    // sub-block's grid covers its range [min(0, min x), max x], d
    // and dmin are the smallest f16s that allow it (within one f16
    // step), and every code is the nearest grid point.
    for (b, xs) in x.chunks(QK_K).enumerate() {
        let (sc, m) = kquant::unpack_scales(&t.scales[b * 12..b * 12 + 12]);
        let (d, dmin) = (t.d[b].to_f32() as f64, t.dmin[b].to_f32() as f64);
        let mut need_dmin = 0.0f64;
        let mut need_d = 0.0f64;
        for j in 0..8 {
            let s = &xs[32 * j..32 * j + 32];
            let lo = s.iter().fold(0.0f64, |a, &v| a.min(v as f64));
            let hi = s.iter().fold(f64::MIN, |a, &v| a.max(v as f64));
            need_dmin = need_dmin.max(-lo / 63.0);
            let (step, off) = (d * sc[j] as f64, dmin * m[j] as f64);
            need_d = need_d.max((hi + off) / 15.0 / 63.0);
            let tol = 1e-6 * (hi.abs() + off);
            if -off > lo + tol || step * 15.0 - off < hi - tol {
                return Some(format!("super-block {b} sub-block {j}: grid does not cover [{lo}, {hi}]"));
            }
            for (l, &v) in s.iter().enumerate() {
                let byte = t.qs[b * 128 + (j / 2) * 32 + l];
                let q = if j % 2 == 0 { byte & 15 } else { byte >> 4 } as f64;
                let err = (q * step - off - v as f64).abs();
                if err > step * 0.5 * (1.0 + 1e-5) + tol {
                    return Some(format!(
                        "super-block {b} value {}: {v} -> code {q}, error {err} > step/2",
                        32 * j + l
                    ));
                }
            }
        }
        let ulp = |v: f64| v * (1.0 / 1024.0) + 1e-30;
        if dmin > need_dmin + ulp(need_dmin) || d > need_d * (1.0 + 1e-5) + ulp(need_d) {
            return Some(format!(
                "super-block {b}: d {d} / dmin {dmin} larger than needed ({need_d} / {need_dmin})"
            ));
        }
    }
    None
}

/// Ternary codes against mean |W| and round-to-nearest-even in {-1, 0, 1}.
fn check_ternary(t: &TernaryMatrix, x: &[f32]) -> Option<String> {
    let mean = x.iter().map(|v| v.abs() as f64).sum::<f64>() / x.len().max(1) as f64;
    if ((t.gamma as f64 - mean) / mean.max(1e-30)).abs() > 1e-5 {
        return Some(format!("gamma {} but mean|W| = {mean}", t.gamma));
    }
    let codes = t.codes();
    for (i, (&v, &c)) in x.iter().zip(&codes).enumerate() {
        let u = v as f64 / (t.gamma as f64 + ternary::EPS as f64);
        let want = u.round_ties_even().clamp(-1.0, 1.0);
        if c as f64 != want && !near_tie(u) {
            return Some(format!("weight {i}: {v} -> {c}, reference {want}"));
        }
    }
    None
}

struct Convert {
    dequant: bool,
    format: &'static str,
    codec: Codec,
    x: Vec<f32>,
    back: Vec<f32>,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
}

pub(crate) fn prepare(case: &Case, ctx: &Context, dequant: bool) -> Result<Box<dyn Workload>> {
    let format = choice(case, "format", FORMATS)?;
    let dist = Dist::parse(&case.str("dist")?).map_err(|e| anyhow::anyhow!("case {}: {e}", case.id))?;
    let (rows, cols) = shape2(case)?;
    let (pool, _) = (ctx.pool(), ctx.threads());
    let x = data::draw(dist, rows, cols, 0.02, super::seed(case));
    let mut codec = Codec::new(format, rows, cols).map_err(|e| anyhow::anyhow!("case {}: {e}", case.id))?;
    if dequant {
        install(pool.as_deref(), || codec.quantize(&x));
    }
    let back = vec![f32::NAN; x.len()];
    Ok(Box::new(Convert { dequant, format, codec, x, back, pool }))
}

impl Workload for Convert {
    fn verify(&mut self) -> Result<Verification> {
        let Self { dequant, codec, x, back, pool, .. } = self;
        if *dequant {
            install(pool.as_deref(), || codec.dequantize(back));
            let bad =
                back.par_iter().enumerate().find_any(|(i, v)| codec.decode(*i).to_bits() != v.to_bits());
            if let Some((i, v)) = bad {
                bail!("dequantize: value {i} is {v}, naive decoding gives {}", codec.decode(i));
            }
            return Ok(Verification::pass(format!(
                "{}: every value bit-exact against naive per-element decoding",
                self.format
            )));
        }
        install(pool.as_deref(), || codec.quantize(x));
        if let Some(e) = codec.check_codes(x) {
            bail!("{} quantize: {e}", self.format);
        }
        codec.dequantize(back);
        Ok(Verification::pass(if self.format == "q4_k" {
            "q4_k: every sub-block's grid covers its range with the smallest f16 d / dmin, every code the nearest grid point (f64)".into()
        } else {
            format!(
                "{}: scales and every code against a naive reference quantizer (f64 rounding; ties may differ by one)",
                self.format
            )
        }))
    }

    fn throughput(&self) -> Vec<Throughput> {
        let n = self.x.len() as f64;
        // Bytes really moved: every pass over the f32 data, and the codes once.
        let passes = if self.dequant { 1 } else { self.codec.quantize_passes() };
        vec![
            Throughput::elements(n),
            Throughput::bytes(4.0 * n * passes as f64 + self.codec.storage_bytes() as f64),
        ]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        let Self { dequant, codec, x, back, pool, .. } = self;
        install(pool.as_deref(), || {
            for _ in 0..iters {
                if *dequant {
                    codec.dequantize(back);
                } else {
                    codec.quantize(x);
                }
                std::hint::black_box(&mut *back);
            }
        });
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        self.codec.dequantize(&mut self.back);
        let bits = self.codec.storage_bytes() as f64 * 8.0 / self.x.len() as f64;
        let mut m = accuracy(&self.x, &self.back).metrics(bits);
        m.push(Metric::new("storage_bytes", self.codec.storage_bytes() as f64, "B"));
        m.push(Metric::new("compression_ratio", 32.0 / bits, "ratio"));
        m
    }
}
