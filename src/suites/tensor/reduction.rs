//! Reductions: full sum, mean, max and argmax, and row-wise softmax and
//! layer norm. The row kernels are the models' own, from
//! [`crate::kernels::softmax`] and [`crate::kernels::norm`]; this file
//! spreads rows over threads, verifies and times them.

use super::{CHUNK, PAR_MIN, choice, on_values, reference, shape2};
use crate::backend::ops::{Inputs, Output, ReduceOp as Op, TensorOp, TensorWork};
use crate::kernels::norm::layer_norm_row;
use crate::kernels::reduce::{BLOCK, LANES, lanes_max, lanes_sum_simd};
use crate::kernels::simd_dispatch;
use crate::kernels::softmax::softmax_row;
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::util;
use anyhow::Result;
use rayon::prelude::*;

pub(super) const OPS: &[&str] = &["sum", "mean", "max", "argmax", "softmax", "layernorm"];

/// Layer-norm epsilon (PyTorch's default).
pub(crate) const LN_EPS: f32 = 1e-5;

/// Sum of at most [`BLOCK`] values with [`LANES`] independent accumulators,
/// combined by a pairwise tree (in vector registers where the CPU has them).
fn sum_block(x: &[f32]) -> f32 {
    lanes_sum_simd(x)
}

/// Pairwise sum: blocks of [`BLOCK`] summed lane-wise, then halves combined recursively.
pub(crate) fn sum_pairwise(x: &[f32]) -> f32 {
    if x.len() <= BLOCK {
        sum_block(x)
    } else {
        let mid = (x.len() / 2).div_ceil(BLOCK) * BLOCK;
        sum_pairwise(&x[..mid]) + sum_pairwise(&x[mid..])
    }
}

/// Sum of `x` in f32: parallel over `CHUNK`s when large, partial sums combined pairwise.
pub(crate) fn sum(x: &[f32]) -> f32 {
    if x.len() < PAR_MIN {
        sum_pairwise(x)
    } else {
        let partials: Vec<f32> = x.par_chunks(CHUNK).map(sum_pairwise).collect();
        sum_pairwise(&partials)
    }
}

/// Bound on the error of [`sum`] for `n` values with absolute sum `abs_sum`:
/// each lane adds at most `BLOCK / LANES + 1` terms, then at most
/// `log2(LANES) + ceil(log2 n) + 1` pairwise levels follow; each addition
/// costs at most one unit roundoff (`eps / 2`) relative to `abs_sum`.
pub(crate) fn sum_error_bound(n: usize, abs_sum: f64) -> f64 {
    let levels = (BLOCK / LANES + 1) as f64 + LANES.ilog2() as f64 + (n.max(2) as f64).log2().ceil() + 1.0;
    levels * (f32::EPSILON as f64 / 2.0) * abs_sum
}

simd_dispatch! {
    /// Largest value (NaN-free input), lane-wise.
    fn max_serial(x: &[f32]) -> f32 {
        lanes_max(x)
    }
}

/// Largest value of `x` (NaN-free, non-empty), parallel over chunks when large.
pub(crate) fn max(x: &[f32]) -> f32 {
    if x.len() < PAR_MIN {
        max_serial(x)
    } else {
        x.par_chunks(CHUNK).map(max_serial).reduce(|| f32::NEG_INFINITY, f32::max)
    }
}

simd_dispatch! {
    /// `(max, index of its first occurrence)` of a non-empty NaN-free slice of
    /// at most `u32::MAX` values: each lane keeps its best value and index
    /// (strictly greater replaces, so the earliest wins), lanes are combined
    /// preferring the smaller index on ties.
    fn argmax_serial(x: &[f32]) -> (f32, usize) {
        let mut best = [f32::NEG_INFINITY; LANES];
        let mut idx = [0u32; LANES];
        let mut chunks = x.chunks_exact(LANES);
        let mut base = 0u32;
        for c in &mut chunks {
            for i in 0..LANES {
                let better = c[i] > best[i];
                best[i] = if better { c[i] } else { best[i] };
                idx[i] = if better { base + i as u32 } else { idx[i] };
            }
            base += LANES as u32;
        }
        let mut m = (f32::NEG_INFINITY, 0usize);
        for i in 0..LANES {
            if best[i] > m.0 || (best[i] == m.0 && (idx[i] as usize) < m.1) {
                m = (best[i], idx[i] as usize);
            }
        }
        // The remainder comes after every lane index: strictly greater only.
        for (k, &v) in chunks.remainder().iter().enumerate() {
            if v > m.0 {
                m = (v, base as usize + k);
            }
        }
        m
    }
}

/// Index of the first maximum of `x` (NaN-free, non-empty): per `CHUNK`, a
/// vectorised value-and-index scan; chunks combined keeping the earliest
/// index on ties.
pub(crate) fn argmax(x: &[f32]) -> usize {
    let chunk_best = |(ci, c): (usize, &[f32])| {
        let (m, i) = argmax_serial(c);
        (m, ci * CHUNK + i)
    };
    let better =
        |a: (f32, usize), b: (f32, usize)| if b.0 > a.0 || (b.0 == a.0 && b.1 < a.1) { b } else { a };
    let best = if x.len() < PAR_MIN {
        x.chunks(CHUNK).enumerate().map(chunk_best).fold((f32::NEG_INFINITY, usize::MAX), better)
    } else {
        x.par_chunks(CHUNK).enumerate().map(chunk_best).reduce(|| (f32::NEG_INFINITY, usize::MAX), better)
    };
    best.1
}

/// Applies `f(out_row, in_row)` to every row, parallel over rows when large.
fn rows_apply(out: &mut [f32], x: &[f32], cols: usize, f: impl Fn(&mut [f32], &[f32]) + Sync) {
    if out.len() < PAR_MIN {
        out.chunks_exact_mut(cols).zip(x.chunks_exact(cols)).for_each(|(o, x)| f(o, x));
    } else {
        out.par_chunks_exact_mut(cols).zip(x.par_chunks_exact(cols)).for_each(|(o, x)| f(o, x));
    }
}

/// Row-wise softmax of `x[rows x cols]` into `out`.
pub(crate) fn softmax(out: &mut [f32], x: &[f32], cols: usize) {
    rows_apply(out, x, cols, softmax_row);
}

/// Row-wise layer norm of `x[rows x cols]` into `out`.
pub(crate) fn layernorm(out: &mut [f32], x: &[f32], gamma: &[f32], beta: &[f32], cols: usize) {
    rows_apply(out, x, cols, |o, x| {
        layer_norm_row(o, x, gamma, beta, LN_EPS);
    });
}

#[derive(Clone)]
struct Reduction {
    op: Op,
    rows: usize,
    cols: usize,
    x: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    out: Vec<f32>,
    scalar: f32,
    index: usize,
    seed: u64,
}

/// The case's reduction (its `op` parameter).
pub(crate) fn op_of(case: &Case) -> Result<Op> {
    Ok(match choice(case, "op", OPS)? {
        "sum" => Op::Sum,
        "mean" => Op::Mean,
        "max" => Op::Max,
        "argmax" => Op::Argmax,
        "softmax" => Op::Softmax,
        _ => Op::LayerNorm,
    })
}

/// The case's data, written once so the CPU and GPU cases reduce the same
/// values: `x` (`rows * cols`), and LayerNorm's `gamma` and `beta` (`cols`
/// each; empty for the other ops). Sums use data with a non-zero mean so
/// the rigorous error bound is tight relative to the result; the rest use
/// normal data (scaled up for softmax so rows are far from uniform).
pub(crate) fn inputs(op: Op, rows: usize, cols: usize, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let n = rows * cols;
    let x = match op {
        Op::Sum | Op::Mean => util::uniform(n, -0.5, 1.5, seed),
        Op::Softmax => util::randn(n, seed).into_iter().map(|v| 3.0 * v).collect(),
        _ => util::randn(n, seed),
    };
    let (gamma, beta) = if op == Op::LayerNorm {
        (util::uniform(cols, 0.5, 1.5, seed ^ 1), util::randn(cols, seed ^ 2))
    } else {
        (Vec::new(), Vec::new())
    };
    (x, gamma, beta)
}

/// Work one iteration of `op` does on `rows x cols` values.
fn throughput(op: Op, rows: usize, cols: usize) -> Vec<Throughput> {
    let n = (rows * cols) as f64;
    let mut t = vec![Throughput::elements(n)];
    match op {
        Op::Sum | Op::Mean => t.extend([Throughput::flops(n), Throughput::bytes(4.0 * n)]),
        Op::Max | Op::Argmax => t.push(Throughput::bytes(4.0 * n)),
        Op::Softmax => t.push(Throughput::bytes(8.0 * n)),
        Op::LayerNorm => t.push(Throughput::bytes(8.0 * n + 8.0 * cols as f64)),
    }
    t
}

/// The case as tensor work for a device backend (`crate::backend::ops`):
/// the CPU case's data and work counts, checked by [`check_device`].
pub(crate) fn describe(case: &Case) -> Result<TensorWork> {
    let op = op_of(case)?;
    let (rows, cols) = shape2(case)?;
    let seed = super::seed(case);
    let (x, gamma, beta) = inputs(op, rows, cols, seed);
    Ok(TensorWork {
        id: case.id.clone(),
        op: TensorOp::Reduce { op, rows, cols, eps: LN_EPS },
        inputs: Inputs { values: vec![x, gamma, beta], bytes: Vec::new() },
        throughput: throughput(op, rows, cols),
        check: Box::new(move |inp: &Inputs, out: Output<'_>| check_device(op, (rows, cols), seed, inp, out)),
    })
}

/// A device's result of `op` on `inputs` (x, gamma, beta): a sum within
/// the bound of the device's own addition tree (its `levels`), the first
/// maximum exactly, softmax and layernorm rows against f64 with the CPU
/// case's tolerances (every row up to 1M values, else 64 sampled rows;
/// softmax rows must also sum to 1).
fn check_device(
    op: Op,
    (rows, c): (usize, usize),
    seed: u64,
    inputs: &Inputs,
    out: Output<'_>,
) -> Verification {
    let [x, gamma, beta] = &inputs.values[..] else {
        return Verification::check("x, gamma and beta", false, "the inputs are not x, gamma and beta");
    };
    match (op, out) {
        (Op::Sum | Op::Mean, Output::Sum { value: got, levels }) => {
            let (s, abs) = reference::sum_f64(x);
            let n = x.len() as f64;
            let mut tol = levels * (f32::EPSILON as f64 / 2.0) * abs;
            let want = if op == Op::Mean { s / n } else { s };
            if op == Op::Mean {
                tol /= n;
            }
            // Rounding of the result (and of 1/n for the mean).
            tol += 2.0 * f32::EPSILON as f64 * want.abs();
            let err = (got - want).abs();
            Verification {
                passed: err <= tol,
                reference: format!("naive f64 sum of {} values", x.len()),
                max_error: Some(err),
                detail: format!("got {got}, reference {want}, bound {tol:e} ({levels} addition levels)"),
            }
        }
        (Op::Max | Op::Argmax, Output::Max { value: v, index }) => {
            let (i, m) = reference::argmax_naive(x);
            let (ok, got) = match (op, index) {
                (Op::Max, _) => (v == m, format!("{v}")),
                (_, Some(gi)) => (gi == i as u64, format!("index {gi} (value {v})")),
                (_, None) => (false, format!("no index (value {v})")),
            };
            Verification::check(
                "naive first-maximum loop",
                ok,
                format!("got {got}, reference {m} at index {i}"),
            )
        }
        (Op::Softmax | Op::LayerNorm, out) => on_values(out, |out| {
            let all_rows = rows * c <= 1 << 20;
            let checked: Vec<usize> =
                if all_rows { (0..rows).collect() } else { crate::util::sample_indices(rows, 64, seed) };
            if op == Op::Softmax
                && let Some(r) = out.chunks_exact(c).position(|row| {
                    (row.iter().map(|&v| v as f64).sum::<f64>() - 1.0).abs()
                        > 1e-5 * (1.0 + (c as f64).log2())
                })
            {
                return Verification::check("row sums", false, format!("row {r} does not sum to 1"));
            }
            let (mut got, mut want) = (Vec::new(), Vec::new());
            for &r in &checked {
                let row = &x[r * c..(r + 1) * c];
                got.extend_from_slice(&out[r * c..(r + 1) * c]);
                let w = match op {
                    Op::Softmax => reference::softmax_row_f64(row),
                    _ => reference::layernorm_row_f64(row, gamma, beta, LN_EPS as f64),
                };
                want.extend(w.into_iter().map(|v| v as f32));
            }
            let (what, atol, rtol) = match op {
                Op::Softmax => ("f64 softmax (and every row sums to 1)", 1e-9, 1e-5),
                _ => ("f64 two-pass layer norm", 2e-5, 1e-5),
            };
            Verification::compare(
                format!("{what} on {} of {} rows", checked.len(), rows),
                &got,
                &want,
                atol,
                rtol,
            )
        }),
        (_, out) => {
            Verification::check(format!("{op:?}"), false, format!("the device returned {}", out.kind()))
        }
    }
}

pub(crate) fn prepare(case: &Case) -> Result<Box<dyn Workload>> {
    let op = op_of(case)?;
    let (rows, cols) = shape2(case)?;
    let n = rows * cols;
    let seed = super::seed(case);
    let (x, gamma, beta) = inputs(op, rows, cols, seed);
    let out = if matches!(op, Op::LayerNorm | Op::Softmax) { vec![f32::NAN; n] } else { Vec::new() };
    Ok(Box::new(Reduction { op, rows, cols, x, gamma, beta, out, scalar: f32::NAN, index: usize::MAX, seed }))
}

impl Reduction {
    fn once(&mut self) {
        match self.op {
            Op::Sum => self.scalar = sum(&self.x),
            Op::Mean => self.scalar = sum(&self.x) / self.x.len() as f32,
            Op::Max => self.scalar = max(&self.x),
            Op::Argmax => self.index = argmax(&self.x),
            Op::Softmax => softmax(&mut self.out, &self.x, self.cols),
            Op::LayerNorm => layernorm(&mut self.out, &self.x, &self.gamma, &self.beta, self.cols),
        }
    }

    /// Rows to compare against the f64 reference: all of them up to 1M
    /// elements, else 64 sampled rows (always the first and last).
    fn checked_rows(&self) -> Vec<usize> {
        if self.rows * self.cols <= 1 << 20 {
            (0..self.rows).collect()
        } else {
            crate::util::sample_indices(self.rows, 64, self.seed)
        }
    }

    fn compare_rows(
        &self,
        what: &str,
        atol: f64,
        rtol: f64,
        want_row: impl Fn(&[f32]) -> Vec<f64>,
    ) -> Verification {
        let rows = self.checked_rows();
        let c = self.cols;
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for &r in &rows {
            got.extend_from_slice(&self.out[r * c..(r + 1) * c]);
            want.extend(want_row(&self.x[r * c..(r + 1) * c]).into_iter().map(|v| v as f32));
        }
        Verification::compare(
            format!("{what} on {} of {} rows", rows.len(), self.rows),
            &got,
            &want,
            atol,
            rtol,
        )
    }
}

/// Checks a computed sum against the f64 sum under [`sum_error_bound`].
pub(crate) fn check_sum(got: f64, x: &[f32], divide: bool) -> Verification {
    let (s, abs) = reference::sum_f64(x);
    let n = x.len() as f64;
    let (want, mut tol) =
        if divide { (s / n, sum_error_bound(x.len(), abs) / n) } else { (s, sum_error_bound(x.len(), abs)) };
    // Rounding of the final f32 result (and of the division for mean).
    tol += 2.0 * f32::EPSILON as f64 * want.abs();
    let err = (got - want).abs();
    Verification {
        passed: err <= tol,
        reference: format!("naive f64 sum of {} values", x.len()),
        max_error: Some(err),
        detail: format!("got {got}, reference {want}, bound {tol:e} (blocked-pairwise error bound)"),
    }
}

impl Workload for Reduction {
    /// Its buffers copied: the same inputs in memory of their own, without
    /// drawing them again (see `harness::placement`).
    fn replicate(&self) -> Option<Box<dyn Workload>> {
        Some(Box::new(self.clone()))
    }

    fn verify(&mut self) -> Result<Verification> {
        self.out.fill(f32::NAN);
        self.once();
        Ok(match self.op {
            Op::Sum => check_sum(self.scalar as f64, &self.x, false),
            Op::Mean => check_sum(self.scalar as f64, &self.x, true),
            Op::Max | Op::Argmax => {
                let (i, m) = reference::argmax_naive(&self.x);
                let (ok, got) = if self.op == Op::Max {
                    (self.scalar == m, format!("{}", self.scalar))
                } else {
                    (self.index == i, format!("index {}", self.index))
                };
                Verification {
                    passed: ok,
                    reference: "naive first-maximum loop".into(),
                    max_error: None,
                    detail: format!("got {got}, reference {m} at index {i}"),
                }
            }
            Op::Softmax => {
                let c = self.cols;
                if let Some(r) = self.out.chunks_exact(c).position(|row| {
                    (row.iter().map(|&v| v as f64).sum::<f64>() - 1.0).abs()
                        > 1e-5 * (1.0 + (c as f64).log2())
                }) {
                    return Ok(Verification {
                        passed: false,
                        reference: "row sums".into(),
                        max_error: None,
                        detail: format!("row {r} does not sum to 1"),
                    });
                }
                self.compare_rows(
                    "f64 softmax (and every row sums to 1)",
                    1e-9,
                    1e-5,
                    reference::softmax_row_f64,
                )
            }
            Op::LayerNorm => self.compare_rows("f64 two-pass layer norm", 2e-5, 1e-5, |row| {
                reference::layernorm_row_f64(row, &self.gamma, &self.beta, LN_EPS as f64)
            }),
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        throughput(self.op, self.rows, self.cols)
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.once();
            std::hint::black_box((&mut self.out, &mut self.scalar, &mut self.index));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_are_within_bound_on_odd_and_large_sizes() {
        for n in [1, 31, 33, 37 * 53, BLOCK + 1, PAR_MIN + 4097] {
            let x = util::uniform(n, -0.5, 1.5, n as u64);
            let v = check_sum(sum(&x) as f64, &x, false);
            assert!(v.passed, "n={n}: {}", v.detail);
            let v = check_sum((sum(&x) / n as f32) as f64, &x, true);
            assert!(v.passed, "mean n={n}: {}", v.detail);
        }
    }

    #[test]
    fn sum_beats_naive_accumulation_on_ill_conditioned_data() {
        // 2^24 + many small values: a naive f32 running sum stalls at 2^24.
        let mut x = vec![1.0f32; PAR_MIN * 2];
        x[0] = 16_777_216.0;
        let exact = 16_777_216.0 + (x.len() - 1) as f64;
        let err = (sum(&x) as f64 - exact).abs();
        // Only the ones sharing a lane with 2^24 in its block are lost.
        assert!(err <= (BLOCK / LANES) as f64 + 2.0, "error {err}");
        assert!(check_sum(sum(&x) as f64, &x, false).passed);
    }

    #[test]
    fn a_wrong_sum_fails_verification() {
        let x = util::uniform(37 * 53, -0.5, 1.5, 3);
        let s = sum(&x) as f64;
        assert!(check_sum(s, &x, false).passed);
        assert!(!check_sum(s - x[7] as f64, &x, false).passed, "dropping one element must be caught");
    }

    #[test]
    fn max_and_argmax_match_naive_including_ties_and_edges() {
        for n in [1, 37 * 53, PAR_MIN + 333] {
            let mut x = util::randn(n, 4);
            let (i, m) = reference::argmax_naive(&x);
            assert_eq!(max(&x), m);
            assert_eq!(argmax(&x), i);
            // Ties: the first occurrence wins, across chunk boundaries too.
            x[n - 1] = 100.0;
            assert_eq!(argmax(&x), n - 1);
            x[n / 2] = 100.0;
            assert_eq!(argmax(&x), n / 2);
            x[0] = 100.0;
            assert_eq!(argmax(&x), 0);
        }
        // Ties inside one lane block and in the remainder; all equal values.
        let mut x = vec![0.0f32; 3 * LANES + 5];
        x[LANES + 3] = 1.0;
        x[2 * LANES + 3] = 1.0;
        x[3 * LANES + 1] = 1.0;
        assert_eq!(argmax(&x), LANES + 3);
        assert_eq!(argmax(&[f32::NEG_INFINITY; 77]), 0);
        assert_eq!(argmax(&[2.0; 100]), 0);
    }

    #[test]
    fn softmax_and_layernorm_match_f64_on_odd_shapes() {
        for (r, c) in [(37, 53), (3, 1), (PAR_MIN / 500 + 1, 501)] {
            let x: Vec<f32> = util::randn(r * c, 5).into_iter().map(|v| 3.0 * v).collect();
            let mut out = vec![f32::NAN; r * c];
            softmax(&mut out, &x, c);
            let want: Vec<f32> = x.chunks(c).flat_map(reference::softmax_row_f64).map(|v| v as f32).collect();
            let v = Verification::compare("softmax", &out, &want, 1e-9, 1e-5);
            assert!(v.passed, "{r}x{c}: {}", v.detail);
            let g = util::uniform(c, 0.5, 1.5, 6);
            let b = util::randn(c, 7);
            layernorm(&mut out, &x, &g, &b, c);
            let want: Vec<f32> = x
                .chunks(c)
                .flat_map(|row| reference::layernorm_row_f64(row, &g, &b, LN_EPS as f64))
                .map(|v| v as f32)
                .collect();
            let v = Verification::compare("layernorm", &out, &want, 2e-5, 1e-5);
            assert!(v.passed, "{r}x{c}: {}", v.detail);
        }
    }

    #[test]
    fn softmax_is_stable_for_large_inputs() {
        let x = [1000.0f32, 1001.0, 999.0, -1e30];
        let mut out = [0.0f32; 4];
        softmax(&mut out, &x, 4);
        let want: Vec<f32> = reference::softmax_row_f64(&x).into_iter().map(|v| v as f32).collect();
        assert!(Verification::compare("softmax", &out, &want, 1e-9, 1e-5).passed, "{out:?}");
    }
}
