//! `linear` (weight-only quantized layers and their f32 baselines),
//! `dynamic` (W8A8 with per-call activation quantization) and `int8_gemm`
//! (the integer kernel alone, per instruction path).

use super::choice;
use super::data::{self, Dist, accuracy};
use crate::backend::cpu::{Context, install};
use crate::kernels::quant::igemm::dot_scalar;
use crate::kernels::quant::{DynamicLinear, I8Weights, Int8Path, QMatrix, WeightFormat, gemm_i8, int8};
use crate::kernels::{Layout, matmul};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload, skip};
use crate::workload::Metric;
use anyhow::{Result, bail};
use std::time::Instant;

/// Valid `format` values of `linear`: every weight format, plus `f32_gemv`
/// (the plain f32 dot-product kernel the quantized decode kernels are built
/// like; `f32` is the shared gemm-crate GEMM).
pub(crate) const FORMATS: &[&str] =
    &["f32", "f32_gemv", "f16", "bf16", "int8", "q8_0", "q4_0", "q4_1", "q4_k", "q6_k", "ternary"];

/// `MxKxN` from the `shape` parameter.
fn dims(case: &Case) -> Result<(usize, usize, usize)> {
    match case.shape("shape")?.as_slice() {
        &[m, k, n] => Ok((m, k, n)),
        other => bail!(
            "case {}: `shape` must be MxKxN (tokens x in x out), got {} dimensions",
            case.id,
            other.len()
        ),
    }
}

/// Seeded layer inputs: heavy-tailed weights `[n, k]`, activations with
/// outlier channels `[m, k]`.
fn inputs(case: &Case, (m, k, n): (usize, usize, usize)) -> (Vec<f32>, Vec<f32>) {
    let seed = super::seed(case);
    (data::draw(Dist::Heavy, n, k, 0.02, seed), data::draw(Dist::Outlier, m, k, 1.0, seed ^ 0x5eed))
}

enum Kernel {
    /// gemm-crate GEMM on the f32 weights (the `f32` baseline).
    Gemm,
    /// A quantized (or f32 GEMV) matrix.
    Q(QMatrix),
    /// W8A8 with per-token activation quantization.
    Dynamic(DynamicLinear),
}

struct Linear {
    label: String,
    kernel: Kernel,
    /// The f32 weights (also the `f32_gemv` baseline's matrix).
    w32: QMatrix,
    x: Vec<f32>,
    y: Vec<f32>,
    /// f32 output of the unquantized layer (gemm crate), for accuracy.
    y32: Vec<f32>,
    dims: (usize, usize, usize),
    threads: usize,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
}

/// Refuses shapes whose f32 weights would not fit comfortably in memory.
fn check_memory(case: &Case, (m, k, n): (usize, usize, usize)) -> Result<()> {
    let need = (3 * n * k + 4 * m * (k + n)) as u64 * 4;
    if let Some(avail) = super::mem_available()
        && need > avail / 2
    {
        return Err(skip(format!(
            "case {} needs about {} MiB, more than half of the {} MiB available",
            case.id,
            need >> 20,
            avail >> 20
        )));
    }
    Ok(())
}

fn build(
    case: &Case,
    ctx: &Context,
    label: String,
    make: impl FnOnce(&[f32], (usize, usize, usize)) -> Result<Kernel> + Send,
) -> Result<Box<dyn Workload>> {
    let dims @ (m, k, n) = dims(case)?;
    check_memory(case, dims)?;
    let (pool, threads) = (ctx.pool(), ctx.threads());
    let (w, x) = inputs(case, dims);
    let kernel = install(pool.as_deref(), || make(&w, dims))?;
    let w32 = QMatrix::quantize(WeightFormat::F32, &w, n, k)?;
    drop(w);
    let mut y32 = vec![0.0; m * n];
    install(pool.as_deref(), || matmul(threads, dims, &x, w32.as_f32().expect("f32"), Layout::NxK, &mut y32));
    Ok(Box::new(Linear { label, kernel, w32, x, y: vec![f32::NAN; m * n], y32, dims, threads, pool }))
}

pub(crate) fn prepare_linear(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    let format = choice(case, "format", FORMATS)?;
    let (_, k, _) = dims(case)?;
    if matches!(format, "q8_0" | "q4_0" | "q4_1") && !k.is_multiple_of(32) {
        bail!("case {}: {format} needs K to be a multiple of 32, got {k}", case.id);
    }
    if matches!(format, "q4_k" | "q6_k") && !k.is_multiple_of(256) {
        bail!("case {}: {format} needs K to be a multiple of 256, got {k}", case.id);
    }
    build(case, ctx, format.to_string(), |w, (_, k, n)| {
        Ok(match format {
            "f32" => Kernel::Gemm,
            "f32_gemv" => Kernel::Q(QMatrix::quantize(WeightFormat::F32, w, n, k)?),
            f => Kernel::Q(QMatrix::quantize(WeightFormat::parse(f)?, w, n, k)?),
        })
    })
}

/// Valid `path` values: `auto`, then every instruction path.
pub(crate) fn path_names() -> Vec<&'static str> {
    std::iter::once("auto").chain(Int8Path::ALL.iter().map(|p| p.name())).collect()
}

/// The `path` parameter: `auto` (fastest available) or a named path, which
/// must be available here (else the case is skipped).
fn int8_path(case: &Case) -> Result<Int8Path> {
    let name = choice(case, "path", &path_names())?;
    if name == "auto" {
        return Ok(Int8Path::detect());
    }
    let path = Int8Path::parse(name)?;
    // The CPU may lack the path, or TFBENCH_MAX_ISA may cap it away; the
    // reason says which.
    if let Some(why) = path.unavailable() {
        return Err(skip(format!("path={name}: {why}")));
    }
    Ok(path)
}

pub(crate) fn prepare_dynamic(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    let path = int8_path(case)?;
    build(case, ctx, format!("dynamic int8 ({})", path.name()), |w, (_, k, n)| {
        Ok(Kernel::Dynamic(DynamicLinear::new(w, n, k, path)))
    })
}

impl Linear {
    fn once(&mut self) {
        let Self { kernel, w32, x, y, dims, threads, pool, .. } = self;
        let (m, _, _) = *dims;
        install(pool.as_deref(), || match kernel {
            Kernel::Gemm => matmul(*threads, *dims, x, w32.as_f32().expect("f32"), Layout::NxK, y),
            Kernel::Q(q) => q.matmul(x, m, y),
            Kernel::Dynamic(d) => d.forward(x, m, y),
        });
    }

    /// Best of `reps` interleaved timings of this kernel and of both f32
    /// baselines (gemm, and the plain GEMV when it applies), in seconds.
    fn interleaved(&mut self, reps: usize) -> (f64, f64) {
        let (m, _, n) = self.dims;
        let mut y = vec![0.0; m * n];
        let (mut own, mut base) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..reps {
            let t = Instant::now();
            self.once();
            own = own.min(t.elapsed().as_secs_f64());
            let Self { w32, x, dims, threads, pool, .. } = self;
            let t = Instant::now();
            install(pool.as_deref(), || {
                matmul(*threads, *dims, x, w32.as_f32().expect("f32"), Layout::NxK, &mut y)
            });
            base = base.min(t.elapsed().as_secs_f64());
            if m <= crate::kernels::quant::linear::DECODE_MAX_M {
                let t = Instant::now();
                install(pool.as_deref(), || w32.matmul(x, m, &mut y));
                base = base.min(t.elapsed().as_secs_f64());
            }
            std::hint::black_box(&mut y);
        }
        (own, base)
    }
}

impl Workload for Linear {
    fn verify(&mut self) -> Result<Verification> {
        self.once();
        let (m, k, n) = self.dims;
        let cols: Vec<usize> = (0..48).map(|i| i * (n - 1) / 47).collect();
        let mut worst = 0.0f64;
        let mut row = vec![0.0f32; k];
        let mut xq = vec![0i8; m * k];
        let mut sx = vec![0.0f32; m];
        // The W4A8 kernels multiply Q8 round-tripped activations: the reference does too.
        let w4a8 = matches!(&self.kernel, Kernel::Q(q) if q.quantizes_activations(m));
        let (xk, corr) = match &self.kernel {
            Kernel::Q(q) if w4a8 => (q.kernel_activations(&self.x, m), q.kernel_correction(&self.x, m)),
            _ => (Vec::new(), Vec::new()),
        };
        // Both integer paths quantize activations per token the same way.
        let ternary = match &self.kernel {
            Kernel::Q(q) => q.ternary().map(|t| (t.codes(), t.gamma)),
            _ => None,
        };
        if ternary.is_some() || matches!(self.kernel, Kernel::Dynamic(_)) {
            int8::quantize_per_token(&self.x, k, &mut xq, &mut sx);
        }
        for &j in &cols {
            match &self.kernel {
                Kernel::Gemm => self.w32.dequantize_rows(j, j + 1, &mut row),
                Kernel::Q(q) => q.dequantize_rows(j, j + 1, &mut row),
                Kernel::Dynamic(_) => {}
            }
            for t in 0..m {
                let got = self.y[t * n + j] as f64;
                let xs = if w4a8 { &xk[t * k..(t + 1) * k] } else { &self.x[t * k..(t + 1) * k] };
                let (want, tol) = match &self.kernel {
                    Kernel::Dynamic(d) => {
                        let acc = dot_scalar(&xq[t * k..(t + 1) * k], &d.weights.data[j * k..(j + 1) * k]);
                        let want = acc as f64 * sx[t] as f64 * d.scales[j] as f64;
                        (want, 1e-6 * want.abs() + 1e-30)
                    }
                    Kernel::Q(_) if ternary.is_some() => {
                        let (codes, gamma) = ternary.as_ref().expect("ternary");
                        let codes = &codes[j * k..(j + 1) * k];
                        let xq = &xq[t * k..(t + 1) * k];
                        let acc: i64 = xq.iter().zip(codes).map(|(&a, &c)| a as i64 * c as i64).sum();
                        let want = acc as f64 * *gamma as f64 * sx[t] as f64;
                        (want, 1e-6 * want.abs() + 1e-30)
                    }
                    _ => {
                        // Q4_1's minimum term takes Q8_1's f16 block sums.
                        let c = if w4a8 { corr[t * n + j] } else { 0.0 };
                        let (mut s, mut a) = (c, c.abs());
                        for (&xv, &wv) in xs.iter().zip(&row) {
                            s += xv as f64 * wv as f64;
                            a += (xv as f64 * wv as f64).abs();
                        }
                        (s, 8.0 * (k as f64).sqrt() * f32::EPSILON as f64 * a + 1e-30)
                    }
                };
                let err = (got - want).abs();
                if err.is_nan() || err > tol {
                    bail!("{}: y[{t}, {j}] = {got}, reference {want} (tolerance {tol:e})", self.label);
                }
                worst = worst.max(err / tol);
            }
        }
        let reference = match &self.kernel {
            Kernel::Dynamic(d) => format!(
                "{} int8 kernel vs i32 naive dot of the per-token int8 activations, rescaled in f64",
                d.path.name()
            ),
            Kernel::Q(q) if q.ternary().is_some() => {
                "exact integer sum of ternary codes x int8 activations".into()
            }
            Kernel::Q(q) if w4a8 => format!(
                "W4A8 ({}): f64 dot products of the Q8_0-quantized activations with the dequantized weight rows",
                q.decode_path(m)
            ),
            _ => "f64 dot products of x with the dequantized weight rows (dequantize-then-matmul)".into(),
        };
        Ok(Verification {
            passed: true,
            reference,
            max_error: Some(worst),
            detail: format!(
                "{} entries ({} columns x {m} tokens); max_error is the worst error / tolerance",
                cols.len() * m,
                cols.len()
            ),
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        let (m, k, n) = self.dims;
        let wbytes = match &self.kernel {
            Kernel::Gemm => 4 * n * k,
            Kernel::Q(q) => q.storage_bytes(),
            Kernel::Dynamic(d) => d.storage_bytes(),
        };
        vec![
            Throughput::flops(2.0 * (m * k * n) as f64),
            Throughput::bytes((wbytes + 4 * m * (k + n)) as f64),
            Throughput::tokens(m as f64),
        ]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.once();
            std::hint::black_box(&mut self.y);
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let (m, k, n) = self.dims;
        self.once();
        let bits = match &self.kernel {
            Kernel::Gemm => 32.0,
            Kernel::Q(q) => q.bits_per_weight(),
            Kernel::Dynamic(d) => d.storage_bytes() as f64 * 8.0 / (n * k) as f64,
        };
        let mut out = accuracy(&self.y32, &self.y).metrics(bits);
        if let Kernel::Dynamic(d) = &self.kernel {
            out.push(Metric::new(format!("int8_path_{}", d.path.name()), 1.0, ""));
        }
        if let Kernel::Q(q) = &self.kernel
            && m <= crate::kernels::quant::linear::DECODE_MAX_M
        {
            out.push(Metric::new(format!("decode_path_{}", q.decode_path(m)), 1.0, ""));
        }
        // Enough repetitions for a stable minimum, within a fraction of a second.
        let per = 2.0 * (m * k * n) as f64 / 100e9 + 4.0 * (n * k) as f64 / 20e9;
        let reps = ((0.1 / per) as usize).clamp(2, 10);
        let (own, base) = self.interleaved(reps);
        out.push(Metric::new("f32_baseline_ns", base * 1e9, "ns"));
        out.push(Metric::new("speedup_vs_f32", base / own, "ratio"));
        out
    }
}

struct Gemm8 {
    path: Int8Path,
    m: usize,
    a: Vec<i8>,
    b: I8Weights,
    c: Vec<i32>,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
}

/// Full-range int8 codes (including -128) from a seed.
fn codes(n: usize, seed: u64) -> Vec<i8> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 56) as u8 as i8
        })
        .collect()
}

pub(crate) fn prepare_int8_gemm(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    let path = int8_path(case)?;
    let (m, k, n) = dims(case)?;
    let (pool, _) = (ctx.pool(), ctx.threads());
    let seed = super::seed(case);
    let b = I8Weights::new(codes(n * k, seed), n, k);
    Ok(Box::new(Gemm8 { path, m, a: codes(m * k, seed ^ 1), b, c: vec![0; m * n], pool }))
}

impl Workload for Gemm8 {
    fn verify(&mut self) -> Result<Verification> {
        self.run(1)?;
        let (m, k, n) = (self.m, self.b.cols, self.b.rows);
        let cols: Vec<usize> =
            if m * n * k <= 1 << 24 { (0..n).collect() } else { (0..64).map(|i| i * (n - 1) / 63).collect() };
        for &j in &cols {
            for i in 0..m {
                let mut want = 0i64;
                for p in 0..k {
                    want += self.a[i * k + p] as i64 * self.b.data[j * k + p] as i64;
                }
                let got = self.c[i * n + j] as i64;
                if got != want {
                    bail!("{}: C[{i}, {j}] = {got}, naive i64 sum {want}", self.path.name());
                }
            }
        }
        Ok(Verification {
            passed: true,
            reference: format!("{} kernel vs naive i64 dot products", self.path.name()),
            max_error: Some(0.0),
            detail: format!("{} entries equal exactly", cols.len() * m),
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        let (m, k, n) = (self.m, self.b.cols, self.b.rows);
        vec![
            Throughput::flops(2.0 * (m * k * n) as f64),
            Throughput::bytes((m * k + n * k + 4 * m * n) as f64),
        ]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        let Self { path, m, a, b, c, pool } = self;
        install(pool.as_deref(), || {
            for _ in 0..iters {
                gemm_i8(*path, *m, a, b, c);
                std::hint::black_box(&mut *c);
            }
        });
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        vec![Metric::new(format!("int8_path_{}", self.path.name()), 1.0, "")]
    }
}
