//! `mixed`: f16 / bf16 storage with f32 arithmetic, in an elementwise op
//! (fma), a reduction (sum) and a linear layer (matmul), each with its error against f32
//! storage in the same row.

use super::choice;
use super::data::{self, Dist, accuracy};
use crate::backend::cpu::{Context, install};
use crate::kernels::quant::{QMatrix, WeightFormat};
use crate::kernels::{Layout, matmul};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::workload::Metric;
use anyhow::{Result, bail};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

/// Valid `op` values.
// `linear`, not `matmul`: a `matmul` filter selects the tensor suite's GEMMs.
pub(crate) const OPS: &[&str] = &["fma", "sum", "linear"];
/// Valid `dtype` values.
pub(crate) const DTYPES: &[&str] = &["f16", "bf16"];

/// Values per parallel task.
const CHUNK: usize = 1 << 16;
/// Values widened to f32 at a time (stack buffers).
const STEP: usize = 512;

/// f16 and bf16 behind one interface.
trait Half: Copy + Send + Sync + 'static {
    fn from_f32(v: f32) -> Self;
    fn to_f32(self) -> f32;
    fn widen(s: &[Self], out: &mut [f32]);
    fn narrow(s: &[f32], out: &mut [Self]);
}

macro_rules! half_impl {
    ($t:ty) => {
        impl Half for $t {
            fn from_f32(v: f32) -> Self {
                <$t>::from_f32(v)
            }
            fn to_f32(self) -> f32 {
                <$t>::to_f32(self)
            }
            fn widen(s: &[Self], out: &mut [f32]) {
                s.convert_to_f32_slice(out)
            }
            fn narrow(s: &[f32], out: &mut [Self]) {
                out.convert_from_f32_slice(s)
            }
        }
    };
}
half_impl!(f16);
half_impl!(bf16);

/// `out = a * b + c` widened to f32 (multiply and add rounded separately),
/// rounded once back to the half type.
fn fma<T: Half>(a: &[T], b: &[T], c: &[T], out: &mut [T]) {
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(k, o)| {
        let (mut fa, mut fb, mut fc) = ([0.0f32; STEP], [0.0f32; STEP], [0.0f32; STEP]);
        for (s, o) in o.chunks_mut(STEP).enumerate() {
            let i = k * CHUNK + s * STEP;
            let n = o.len();
            T::widen(&a[i..i + n], &mut fa[..n]);
            T::widen(&b[i..i + n], &mut fb[..n]);
            T::widen(&c[i..i + n], &mut fc[..n]);
            for j in 0..n {
                fa[j] = fa[j] * fb[j] + fc[j];
            }
            T::narrow(&fa[..n], o);
        }
    });
}

/// Sum of half values with f32 accumulators (16 lanes per task, tasks
/// combined in f64).
fn sum<T: Half>(x: &[T]) -> f64 {
    x.par_chunks(CHUNK)
        .map(|c| {
            let mut buf = [0.0f32; STEP];
            let mut acc = [0.0f32; 16];
            for s in c.chunks(STEP) {
                T::widen(s, &mut buf[..s.len()]);
                for (i, v) in buf[..s.len()].iter().enumerate() {
                    acc[i % 16] += v;
                }
            }
            acc.iter().map(|&v| v as f64).sum::<f64>()
        })
        .sum()
}

enum Op<T> {
    Fma { a: Vec<T>, b: Vec<T>, c: Vec<T>, out: Vec<T>, want32: Vec<f32> },
    Sum { x: Vec<T>, got: f64 },
    Matmul { w: QMatrix, x: Vec<f32>, y: Vec<f32>, y32: Vec<f32>, dims: (usize, usize, usize) },
}

struct Mixed<T> {
    op: Op<T>,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
}

pub(crate) fn prepare(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    let op = choice(case, "op", OPS)?;
    match choice(case, "dtype", DTYPES)? {
        "f16" => build::<f16>(case, ctx, op, WeightFormat::F16),
        _ => build::<bf16>(case, ctx, op, WeightFormat::Bf16),
    }
}

fn halves<T: Half>(x: &[f32]) -> Vec<T> {
    let mut h = vec![T::from_f32(0.0); x.len()];
    h.par_chunks_mut(CHUNK).zip(x.par_chunks(CHUNK)).for_each(|(h, x)| T::narrow(x, h));
    h
}

fn build<T: Half>(case: &Case, ctx: &Context, op: &str, format: WeightFormat) -> Result<Box<dyn Workload>> {
    let (pool, threads) = (ctx.pool(), ctx.threads());
    let seed = super::seed(case);
    let op = install(pool.as_deref(), || -> Result<Op<T>> {
        Ok(match op {
            "linear" => {
                let dims @ (m, k, n) = match case.shape("shape")?.as_slice() {
                    &[m, k, n] => (m, k, n),
                    _ => bail!("case {}: mixed matmul `shape` must be MxKxN", case.id),
                };
                let w32 = data::draw(Dist::Heavy, n, k, 0.02, seed);
                let x = data::draw(Dist::Outlier, m, k, 1.0, seed ^ 1);
                let mut y32 = vec![0.0; m * n];
                matmul(threads, dims, &x, &w32, Layout::NxK, &mut y32);
                let w = QMatrix::quantize(format, &w32, n, k)?;
                Op::Matmul { w, x, y: vec![f32::NAN; m * n], y32, dims }
            }
            _ => {
                let n = case.usize("elements")?;
                if n == 0 {
                    bail!("case {}: `elements` must be positive", case.id);
                }
                let a32 = data::draw(Dist::Normal, n, 1, 1.0, seed);
                if op == "sum" {
                    // A positive mean, so the sum is large next to each term.
                    let x: Vec<f32> = a32.iter().map(|v| v + 1.0).collect();
                    Op::Sum { x: halves(&x), got: f64::NAN }
                } else {
                    let b32 = data::draw(Dist::Heavy, n, 1, 1.0, seed ^ 1);
                    let c32 = data::draw(Dist::Normal, n, 1, 0.5, seed ^ 2);
                    let want32 = a32.iter().zip(&b32).zip(&c32).map(|((a, b), c)| a * b + c).collect();
                    let out = vec![T::from_f32(0.0); n];
                    Op::Fma { a: halves(&a32), b: halves(&b32), c: halves(&c32), out, want32 }
                }
            }
        })
    })?;
    Ok(Box::new(Mixed { op, pool }))
}

impl<T: Half> Mixed<T> {
    fn once(&mut self) {
        let Self { op, pool } = self;
        install(pool.as_deref(), || match op {
            Op::Fma { a, b, c, out, .. } => fma(a, b, c, out),
            Op::Sum { x, got } => *got = sum(x),
            Op::Matmul { w, x, y, dims, .. } => w.matmul(x, dims.0, y),
        });
    }
}

impl<T: Half> Workload for Mixed<T> {
    fn verify(&mut self) -> Result<Verification> {
        self.once();
        match &self.op {
            Op::Fma { a, b, c, out, .. } => {
                let bad = (0..out.len()).into_par_iter().find_any(|&i| {
                    let want = T::from_f32(a[i].to_f32() * b[i].to_f32() + c[i].to_f32());
                    want.to_f32().to_bits() != out[i].to_f32().to_bits()
                });
                if let Some(i) = bad {
                    bail!("fma: value {i} is {}, scalar reference differs", out[i].to_f32());
                }
                Ok(Verification::pass("bit-exact against per-element scalar widen, a*b+c in f32, round once"))
            }
            Op::Sum { x, got } => {
                let (exact, abs) = x
                    .iter()
                    .fold((0.0f64, 0.0f64), |(s, a), v| (s + v.to_f32() as f64, a + v.to_f32().abs() as f64));
                // Each lane adds CHUNK/16 terms in f32: Higham's bound for recursive summation.
                let bound = (CHUNK / 16 + 16) as f64 * f32::EPSILON as f64 * abs;
                let err = (got - exact).abs();
                if err.is_nan() || err > bound {
                    bail!("sum: {got}, exact f64 sum {exact}, error {err:e} > bound {bound:e}");
                }
                Ok(Verification {
                    passed: true,
                    reference: "f64 sum of the same half values".into(),
                    max_error: Some(err),
                    detail: format!("within the recursive-summation bound {bound:e}"),
                })
            }
            Op::Matmul { w, x, y, dims: (m, k, n), .. } => {
                let mut row = vec![0.0f32; *k];
                for j in (0..*n).step_by((*n / 32).max(1)) {
                    w.dequantize_rows(j, j + 1, &mut row);
                    for t in 0..*m {
                        let xs = &x[t * k..(t + 1) * k];
                        let want: f64 = xs.iter().zip(&row).map(|(&a, &b)| a as f64 * b as f64).sum();
                        let abs: f64 = xs.iter().zip(&row).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                        let tol = 8.0 * (*k as f64).sqrt() * f32::EPSILON as f64 * abs + 1e-30;
                        let got = y[t * n + j] as f64;
                        if (got - want).is_nan() || (got - want).abs() > tol {
                            bail!("matmul: y[{t}, {j}] = {got}, f64 reference {want} (tolerance {tol:e})");
                        }
                    }
                }
                Ok(Verification::pass(
                    "f64 dot products with the half weights widened exactly (32 sampled columns)",
                ))
            }
        }
    }

    fn throughput(&self) -> Vec<Throughput> {
        match &self.op {
            Op::Fma { out, .. } => {
                let n = out.len() as f64;
                vec![Throughput::flops(2.0 * n), Throughput::elements(n), Throughput::bytes(8.0 * n)]
            }
            Op::Sum { x, .. } => {
                let n = x.len() as f64;
                vec![Throughput::flops(n), Throughput::elements(n), Throughput::bytes(2.0 * n)]
            }
            Op::Matmul { w, dims: (m, k, n), .. } => vec![
                Throughput::flops(2.0 * (m * k * n) as f64),
                Throughput::bytes((w.storage_bytes() + 4 * m * (k + n)) as f64),
            ],
        }
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.once();
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        match &self.op {
            Op::Fma { out, want32, .. } => {
                let got: Vec<f32> = out.iter().map(|v| v.to_f32()).collect();
                accuracy(want32, &got).metrics(16.0)
            }
            Op::Sum { x, got } => {
                let exact: f64 = x.iter().map(|v| v.to_f32() as f64).sum();
                // What the same data gives when the accumulator is a half too.
                let naive = x.iter().fold(T::from_f32(0.0), |s, v| T::from_f32(s.to_f32() + v.to_f32()));
                vec![
                    Metric::new("rel_error_f32_accumulate", ((got - exact) / exact).abs(), "ratio"),
                    Metric::new(
                        "rel_error_half_accumulate",
                        ((naive.to_f32() as f64 - exact) / exact).abs(),
                        "ratio",
                    ),
                ]
            }
            Op::Matmul { w, y, y32, .. } => accuracy(y32, y).metrics(w.bits_per_weight()),
        }
    }
}
