//! `fft` and `fft_plan`: complex and real forward FFTs of 1-3 dimensions
//! through rustfft/realfft ([`crate::kernels::fft`]), and the making of
//! their plans. Checked against the f64 DFT in full on small sizes; on
//! large ones by Parseval's identity, spot bins computed as plain f64 sums,
//! and (complex) the inverse transform giving the input back.

use super::{choice, ensure_memory, seed};
use crate::kernels::fft::{C32, FftPlan, bench_fft_flops, dft_bin_f64, dft_f64};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use anyhow::{Result, bail};
use rayon::ThreadPool;
use rustfft::FftDirection;
use std::sync::Arc;

/// Transform kinds.
pub(super) const KINDS: &[&str] = &["c2c", "r2c"];
/// Algorithms a case may pin (without `algo`, [`FftPlan::new`] chooses):
/// one rustfft plan, or the four-step form over rustfft sub-plans (1-D
/// complex only), so both can be timed side by side.
pub(super) const ALGOS: &[&str] = &["rustfft", "four_step"];
/// Largest transform accepted (elements): 2^28, 2 GiB of complex f32.
const MAX_LEN: usize = 1 << 28;
/// Sizes up to this are checked against the full f64 DFT.
const FULL_DFT: usize = 4096;

/// The case's `shape`: 1 to 3 extents, not too large.
pub(super) fn shape_of(case: &Case, key: &str) -> Result<Vec<usize>> {
    let shape = case.shape(key)?;
    let n = shape.iter().try_fold(1usize, |a, &b| a.checked_mul(b)).unwrap_or(usize::MAX);
    if shape.is_empty() || shape.len() > 3 || n > MAX_LEN {
        bail!("case {}: `{key}` must be 1 to 3 extents of at most {MAX_LEN} elements in all", case.id);
    }
    Ok(shape)
}

/// A transform's input and output, and whether it is real.
struct Fft {
    plan: FftPlan,
    input_c: Vec<C32>,
    input_r: Vec<f32>,
    scratch_r: Vec<f32>,
    out: Vec<C32>,
    pool: Option<Arc<ThreadPool>>,
    seed: u64,
}

/// Prepares an `fft` case.
pub(super) fn prepare(case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
    let real = choice(case, "kind", KINDS)? == "r2c";
    // `size`: a 1-D length (the grid that pins `algo` uses it, so the quick
    // profile's `shape` list does not give it 2-D shapes).
    let shape = shape_of(case, if case.params.contains_key("size") { "size" } else { "shape" })?;
    let algo = if case.params.contains_key("algo") { Some(choice(case, "algo", ALGOS)?) } else { None };
    if algo == Some("four_step") && (real || shape.len() != 1) {
        bail!("case {}: algo=four_step is for 1-D complex (kind=c2c) transforms", case.id);
    }
    let n: usize = shape.iter().product();
    ensure_memory("this transform", if real { 8.0 * n as f64 + 8.0 * n as f64 } else { 24.0 * n as f64 })?;
    let seed = seed(case);
    let plan = ctx.install(|| match algo {
        None => FftPlan::new(&shape, real, FftDirection::Forward),
        Some(a) => FftPlan::with_four_step(&shape, real, FftDirection::Forward, a == "four_step"),
    });
    let out = vec![C32::default(); plan.output_len()];
    let (input_c, input_r) = if real {
        (Vec::new(), crate::util::randn(n, seed))
    } else {
        let v = crate::util::randn(2 * n, seed);
        (v.chunks(2).map(|p| C32::new(p[0], p[1])).collect(), Vec::new())
    };
    let scratch_r = input_r.clone();
    Ok(Box::new(Fft { plan, input_c, input_r, scratch_r, out, pool: ctx.pool(), seed }))
}

impl Fft {
    fn once(&mut self) {
        let Self { plan, input_c, input_r, scratch_r, out, pool, .. } = self;
        crate::backend::cpu::install(pool.as_deref(), || {
            if plan.real {
                scratch_r.copy_from_slice(input_r);
                plan.run_r2c(scratch_r, out);
            } else {
                out.copy_from_slice(input_c);
                plan.run_c2c(out);
            }
        });
    }
}

/// The input as f64 complex values.
fn as_f64(real: bool, c: &[C32], r: &[f32]) -> Vec<(f64, f64)> {
    if real {
        r.iter().map(|&v| (v as f64, 0.0)).collect()
    } else {
        c.iter().map(|v| (v.re as f64, v.im as f64)).collect()
    }
}

/// Checks `out`, the forward transform of `x` over `shape` (the half
/// spectrum along the last axis when `real`).
pub(super) fn check_transform(
    shape: &[usize],
    real: bool,
    x: &[(f64, f64)],
    out: &[C32],
    seed: u64,
) -> Verification {
    let n: usize = shape.iter().product();
    let last = shape[shape.len() - 1];
    let width = if real { last / 2 + 1 } else { last };
    let energy_in: f64 = x.iter().map(|&(a, b)| a * a + b * b).sum();
    // Rounding grows like log2 n relative to the signal's size sqrt(energy).
    let scale = (energy_in / n as f64).sqrt() * (n as f64).sqrt();
    let tol = 2e-6 * scale * (2.0 + (n as f64).log2());
    let at = |flat: usize| {
        let (row, col) = (flat / last, flat % last);
        (col < width).then(|| out[row * width + col])
    };
    if n <= FULL_DFT {
        let want = dft_f64(shape, x);
        for (i, w) in want.iter().enumerate() {
            if let Some(g) = at(i) {
                let err = (g.re as f64 - w.0).abs().max((g.im as f64 - w.1).abs());
                if err.is_nan() || err > tol {
                    return Verification::check(
                        "full f64 DFT",
                        false,
                        format!("bin {i}: got {g}, reference {w:?}, tol {tol:e}"),
                    );
                }
            }
        }
        return Verification::check("full f64 DFT", true, format!("{n} bins within {tol:e}"));
    }
    // Parseval: sum |X|^2 = n sum |x|^2 (half spectrum: inner bins twice).
    let energy_out: f64 = out
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let col = i % width;
            let twice = real && col != 0 && !(last.is_multiple_of(2) && col == last / 2);
            (if twice { 2.0 } else { 1.0 }) * (v.re as f64 * v.re as f64 + v.im as f64 * v.im as f64)
        })
        .sum();
    let rel = (energy_out / (n as f64 * energy_in) - 1.0).abs();
    if rel.is_nan() || rel > 1e-4 {
        return Verification::check("Parseval", false, format!("energy ratio off by {rel:e}"));
    }
    // Spot bins: a few flat indices inside the stored part.
    let mut rng_state = seed;
    let bins: Vec<Vec<usize>> = (0..4)
        .map(|b| {
            rng_state = rng_state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shape
                .iter()
                .enumerate()
                .map(|(ax, &len)| {
                    let lim = if ax + 1 == shape.len() { width.min(len) } else { len };
                    if b == 0 { 0 } else { (rng_state >> (16 + 8 * ax)) as usize % lim }
                })
                .collect()
        })
        .collect();
    for k in &bins {
        let w = dft_bin_f64(shape, x, k);
        let flat = k.iter().zip(shape).fold(0, |a, (&k, &l)| a * l + k);
        let g = at(flat).unwrap_or_default();
        let err = (g.re as f64 - w.0).abs().max((g.im as f64 - w.1).abs());
        if err.is_nan() || err > tol {
            return Verification::check(
                "f64 DFT bins",
                false,
                format!("bin {k:?}: got {g}, reference {w:?}, tol {tol:e}"),
            );
        }
    }
    Verification::check(
        "Parseval and 4 f64 DFT bins",
        true,
        format!("energy within {rel:.1e}; bins {bins:?} within {tol:e}"),
    )
}

impl Workload for Fft {
    fn verify(&mut self) -> Result<Verification> {
        self.out.fill(C32::new(f32::NAN, f32::NAN));
        self.once();
        let x = as_f64(self.plan.real, &self.input_c, &self.input_r);
        let v = check_transform(&self.plan.shape, self.plan.real, &x, &self.out, self.seed);
        if !v.passed || self.plan.real || x.len() <= FULL_DFT {
            return Ok(v);
        }
        // Complex: the inverse transform, divided by n, gives the input back.
        let inverse = FftPlan::new(&self.plan.shape, false, FftDirection::Inverse);
        let mut back = self.out.clone();
        crate::backend::cpu::install(self.pool.as_deref(), || inverse.run_c2c(&mut back));
        let n = x.len() as f32;
        let got: Vec<f32> = back.iter().flat_map(|c| [c.re / n, c.im / n]).collect();
        let want: Vec<f32> = self.input_c.iter().flat_map(|c| [c.re, c.im]).collect();
        let rt = Verification::compare("inverse FFT round trip", &got, &want, 1e-4, 1e-4);
        Ok(Verification::check(
            format!("{} and the round trip", v.reference),
            rt.passed,
            format!("{}; {}", v.detail, rt.detail),
        ))
    }
    fn throughput(&self) -> Vec<Throughput> {
        let n: usize = self.plan.shape.iter().product();
        let bytes =
            if self.plan.real { 4.0 * n as f64 + 8.0 * self.out.len() as f64 } else { 16.0 * n as f64 };
        vec![
            Throughput::flops(bench_fft_flops(&self.plan.shape, self.plan.real)),
            Throughput::bytes(bytes),
            Throughput::elements(n as f64),
        ]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.once();
        }
        Ok(())
    }
}

/// Making a 1-D plan (fresh planners each time, so nothing is cached).
struct Plan {
    len: usize,
    real: bool,
    last: Option<FftPlan>,
    seed: u64,
}

/// Prepares an `fft_plan` case.
pub(super) fn prepare_plan(case: &Case) -> Result<Box<dyn Workload>> {
    let real = choice(case, "kind", KINDS)? == "r2c";
    let shape = shape_of(case, "size")?;
    if shape.len() != 1 {
        bail!("case {}: `size` is one transform length", case.id);
    }
    Ok(Box::new(Plan { len: shape[0], real, last: None, seed: seed(case) }))
}

impl Workload for Plan {
    fn verify(&mut self) -> Result<Verification> {
        // The plan made the timed way transforms correctly.
        self.run(1)?;
        let plan = self.last.take().expect("planned");
        let x = crate::util::randn(self.len, self.seed);
        let (mut input_r, xs) = (x.clone(), x.iter().map(|&v| (v as f64, 0.0)).collect::<Vec<_>>());
        let mut out = vec![C32::default(); plan.output_len()];
        if self.real {
            plan.run_r2c(&mut input_r, &mut out);
        } else {
            out.iter_mut().zip(&x).for_each(|(o, &v)| *o = C32::new(v, 0.0));
            plan.run_c2c(&mut out);
        }
        Ok(check_transform(&[self.len], self.real, &xs, &out, self.seed))
    }
    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::items(1.0)]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.last = Some(FftPlan::new(&[self.len], self.real, FftDirection::Forward));
        }
        Ok(())
    }
}
