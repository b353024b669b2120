//! Unary elementwise workloads over the shared activation math of
//! [`crate::kernels::activation`] (the same `exp`, `tanh` and GELU the
//! models run).
//!
//! Their accuracy against f64 `std` is checked by the tests below and by every
//! `verify` (relative 1e-5 or better, see [`tolerance`]).

use super::{CHUNK, PAR_MIN, choice, elements, on_values};
use crate::backend::ops::{Inputs, Output, TensorOp, TensorWork, UnOp};
use crate::kernels::activation::{exp_f32, gelu_f32, ln_f32, sigmoid_f32, tanh_f32};
use crate::kernels::simd_dispatch;
use crate::kernels::vmath::{self, VOp};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::util;
use anyhow::Result;
use rayon::prelude::*;

pub(super) const OPS: &[&str] = &["relu", "sigmoid", "tanh", "exp", "log", "sqrt", "gelu"];

/// `out[i] = op(x[i])` over equal-length slices (serial): the
/// transcendental ops through the AVX2+FMA kernels of
/// [`crate::kernels::vmath`] on a CPU (under the cap) with AVX2 and no
/// AVX-512, else the plain loop compiled per ISA level.
pub(crate) fn unary_serial(op: UnOp, out: &mut [f32], x: &[f32]) {
    let v = match op {
        UnOp::Sigmoid => Some(VOp::Sigmoid),
        UnOp::Tanh => Some(VOp::Tanh),
        UnOp::Exp => Some(VOp::Exp),
        UnOp::Log => Some(VOp::Ln),
        UnOp::Gelu => Some(VOp::Gelu),
        UnOp::Relu | UnOp::Sqrt => None,
    };
    if v.is_some_and(|v| vmath::map(v, out, x)) {
        return;
    }
    unary_loop(op, out, x);
}

simd_dispatch! {
    /// `out[i] = op(x[i])` over equal-length slices with the scalar
    /// functions, vectorised by the compiler for each ISA level.
    fn unary_loop(op: UnOp, out: &mut [f32], x: &[f32]) {
        let x = &x[..out.len()];
        let it = out.iter_mut().zip(x);
        match op {
            UnOp::Relu => it.for_each(|(o, &v)| *o = if v > 0.0 { v } else { 0.0 }),
            UnOp::Sigmoid => it.for_each(|(o, &v)| *o = sigmoid_f32(v)),
            UnOp::Tanh => it.for_each(|(o, &v)| *o = tanh_f32(v)),
            UnOp::Exp => it.for_each(|(o, &v)| *o = exp_f32(v)),
            UnOp::Log => it.for_each(|(o, &v)| *o = ln_f32(v)),
            UnOp::Sqrt => it.for_each(|(o, &v)| *o = v.sqrt()),
            UnOp::Gelu => it.for_each(|(o, &v)| *o = gelu_f32(v)),
        }
    }
}

/// `out = op(x)`, split into `CHUNK`-element rayon tasks when large.
pub(crate) fn unary(op: UnOp, out: &mut [f32], x: &[f32]) {
    assert_eq!(out.len(), x.len(), "unary: length mismatch");
    if out.len() < PAR_MIN {
        unary_serial(op, out, x);
    } else {
        out.par_chunks_mut(CHUNK).zip(x.par_chunks(CHUNK)).for_each(|(o, x)| unary_serial(op, o, x));
    }
}

/// The f64 reference for `op`, from `std` (GELU in its tanh form).
pub(crate) fn reference_f64(op: UnOp, x: f64) -> f64 {
    match op {
        UnOp::Relu => x.max(0.0),
        UnOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnOp::Tanh => x.tanh(),
        UnOp::Exp => x.exp(),
        UnOp::Log => x.ln(),
        UnOp::Sqrt => x.sqrt(),
        UnOp::Gelu => {
            0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
        }
    }
}

/// `(atol, rtol)` against the f64 reference rounded to f32. relu and sqrt are
/// exact (sqrt is correctly rounded in IEEE arithmetic); the approximations
/// stay within relative 1e-5 plus an absolute floor near zero or in the
/// subnormal range.
pub(crate) fn tolerance(op: UnOp) -> (f64, f64) {
    match op {
        UnOp::Relu | UnOp::Sqrt => (0.0, 0.0),
        UnOp::Exp => (1e-44, 1e-5),
        UnOp::Log | UnOp::Tanh | UnOp::Sigmoid => (1e-7, 1e-5),
        UnOp::Gelu => (1e-6, 1e-5),
    }
}

/// Benchmark inputs for `op`: normal for relu, uniform on [-10, 10] for the
/// saturating functions, positive for log and sqrt.
pub(crate) fn inputs(op: UnOp, n: usize, seed: u64) -> Vec<f32> {
    match op {
        UnOp::Relu => util::randn(n, seed),
        UnOp::Log | UnOp::Sqrt => util::uniform(n, 1e-3, 100.0, seed),
        _ => util::uniform(n, -10.0, 10.0, seed),
    }
}

#[derive(Clone)]
struct Unary {
    op: UnOp,
    x: Vec<f32>,
    out: Vec<f32>,
}

/// The case's op (its `op` parameter).
fn op_of(case: &Case) -> Result<UnOp> {
    let name = choice(case, "op", OPS)?;
    Ok(UnOp::ALL[OPS.iter().position(|o| *o == name).unwrap_or(0)])
}

/// Work one iteration does on `n` values: one read and one write each.
fn throughput(n: usize) -> Vec<Throughput> {
    let n = n as f64;
    vec![Throughput::elements(n), Throughput::bytes(8.0 * n)]
}

pub(crate) fn prepare(case: &Case) -> Result<Box<dyn Workload>> {
    let op = op_of(case)?;
    let n = elements(case)?;
    Ok(Box::new(Unary { op, x: inputs(op, n, super::seed(case)), out: vec![f32::NAN; n] }))
}

/// The case as tensor work for a device backend (`crate::backend::ops`):
/// the CPU case's inputs and work counts, checked against the f64
/// reference within the CPU's tolerance.
pub(crate) fn describe(case: &Case) -> Result<TensorWork> {
    let op = op_of(case)?;
    let n = elements(case)?;
    Ok(TensorWork {
        id: case.id.clone(),
        op: TensorOp::Unary(op),
        inputs: Inputs { values: vec![inputs(op, n, super::seed(case))], bytes: Vec::new() },
        throughput: throughput(n),
        check: Box::new(move |inp: &Inputs, out: Output<'_>| {
            on_values(out, |got| {
                let want: Vec<f32> =
                    inp.values[0].iter().map(|&v| reference_f64(op, v as f64) as f32).collect();
                let (atol, rtol) = tolerance(op);
                Verification::compare(
                    format!("f64 std {op:?} over all inputs (CPU tolerance)"),
                    got,
                    &want,
                    atol,
                    rtol,
                )
            })
        }),
    })
}

/// Checks `out == op(x)` against the f64 reference within [`tolerance`].
fn check(op: UnOp, x: &[f32], out: &[f32]) -> Verification {
    use rayon::prelude::*;
    let want: Vec<f32> = x.par_iter().map(|&v| reference_f64(op, v as f64) as f32).collect();
    let (atol, rtol) = tolerance(op);
    Verification::compare(format!("f64 std {op:?} over all inputs"), out, &want, atol, rtol)
}

impl Workload for Unary {
    /// Its buffers copied: the same inputs in memory of their own, without
    /// drawing them again (see `harness::placement`).
    fn replicate(&self) -> Option<Box<dyn Workload>> {
        Some(Box::new(self.clone()))
    }

    fn verify(&mut self) -> Result<Verification> {
        self.out.fill(f32::NAN);
        unary(self.op, &mut self.out, &self.x);
        Ok(check(self.op, &self.x, &self.out))
    }

    fn throughput(&self) -> Vec<Throughput> {
        throughput(self.x.len())
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            unary(self.op, &mut self.out, &self.x);
            std::hint::black_box(&mut self.out);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dense sweep over the interesting range plus special values.
    fn sweep(lo: f32, hi: f32, n: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..n).map(|i| lo + (hi - lo) * i as f32 / (n - 1) as f32).collect();
        v.extend([0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 0.624, 0.626, -0.625, 1.0, -1.0]);
        v
    }

    #[test]
    fn approximations_match_f64_std_over_wide_sweeps() {
        sweeps_match();
    }

    /// The same at every ISA cap: the AVX2 cap runs `vmath`'s AVX2+FMA
    /// kernels (on a CPU with AVX2), the scalar cap the baseline loop.
    #[test]
    fn approximations_match_f64_std_under_every_isa_cap() {
        for level in [crate::isa::IsaLevel::Scalar, crate::isa::IsaLevel::Avx2] {
            crate::isa::with_cap(level, sweeps_match);
        }
    }

    fn sweeps_match() {
        for op in UnOp::ALL {
            let x = match op {
                UnOp::Log | UnOp::Sqrt => {
                    let mut v: Vec<f32> =
                        (0..200_001).map(|i| 10f32.powf(-37.0 + 75.0 * i as f32 / 2e5)).collect();
                    v.extend([1.0, 0.999_999_9, 1.000_000_1, 1e-40, 3e-45, f32::MAX, f32::MIN_POSITIVE]);
                    v
                }
                UnOp::Exp => sweep(-110.0, 89.0, 400_001),
                _ => sweep(-60.0, 60.0, 400_001),
            };
            let mut out = vec![f32::NAN; x.len()];
            unary(op, &mut out, &x);
            let v = check(op, &x, &out);
            assert!(v.passed, "{op:?}: {} (max error {:?})", v.detail, v.max_error);
        }
    }

    #[test]
    fn parallel_path_agrees_with_serial_on_odd_length() {
        let n = PAR_MIN + 12_345;
        let x = util::uniform(n, -10.0, 10.0, 5);
        for op in UnOp::ALL {
            let mut par = vec![f32::NAN; n];
            unary(op, &mut par, &x);
            let mut ser = vec![f32::NAN; n];
            unary_serial(op, &mut ser, &x);
            assert_eq!(
                par.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                ser.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn a_perturbed_result_fails_verification() {
        let x = util::uniform(37 * 53, -10.0, 10.0, 6);
        let mut out = vec![0.0; x.len()];
        unary(UnOp::Exp, &mut out, &x);
        assert!(check(UnOp::Exp, &x, &out).passed);
        out[1000] *= 1.0 + 1e-4;
        assert!(!check(UnOp::Exp, &x, &out).passed);
    }
}
