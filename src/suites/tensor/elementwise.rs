//! Binary elementwise kernels: `out = a op b` into a preallocated buffer, and a
//! row-vector broadcast add.

use super::{CHUNK, PAR_MIN, choice, on_values, shape2};
use crate::backend::ops::{BinOp, Check, Inputs, Output, TensorOp, TensorWork};
use crate::kernels::simd_dispatch;
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::util;
use anyhow::Result;
use rayon::prelude::*;

pub(super) const OPS: &[&str] = &["add", "sub", "mul", "div", "broadcast_add"];

simd_dispatch! {
    /// `out[i] = a[i] op b[i]` over equal-length slices (serial).
    pub(crate) fn binary_serial(op: BinOp, out: &mut [f32], a: &[f32], b: &[f32]) {
        let n = out.len();
        let (a, b) = (&a[..n], &b[..n]);
        match op {
            BinOp::Add => out.iter_mut().zip(a).zip(b).for_each(|((o, &x), &y)| *o = x + y),
            BinOp::Sub => out.iter_mut().zip(a).zip(b).for_each(|((o, &x), &y)| *o = x - y),
            BinOp::Mul => out.iter_mut().zip(a).zip(b).for_each(|((o, &x), &y)| *o = x * y),
            BinOp::Div => out.iter_mut().zip(a).zip(b).for_each(|((o, &x), &y)| *o = x / y),
        }
    }
}

simd_dispatch! {
    /// `out[r][c] = a[r][c] + row[c]` for every row of `a` (serial).
    pub(crate) fn broadcast_add_serial(out: &mut [f32], a: &[f32], row: &[f32]) {
        let cols = row.len();
        for (o, x) in out.chunks_exact_mut(cols).zip(a.chunks_exact(cols)) {
            o.iter_mut().zip(x).zip(row).for_each(|((o, &x), &y)| *o = x + y);
        }
    }
}

/// `out = a op b`, split into `CHUNK`-element rayon tasks when large.
pub(crate) fn binary(op: BinOp, out: &mut [f32], a: &[f32], b: &[f32]) {
    assert!(a.len() == out.len() && b.len() == out.len(), "binary: length mismatch");
    if out.len() < PAR_MIN {
        binary_serial(op, out, a, b);
    } else {
        out.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK))
            .zip(b.par_chunks(CHUNK))
            .for_each(|((o, a), b)| binary_serial(op, o, a, b));
    }
}

/// `out = a + row` broadcast over the rows of `a` (`row.len()` columns),
/// parallel over blocks of whole rows when large.
pub(crate) fn broadcast_add(out: &mut [f32], a: &[f32], row: &[f32]) {
    let cols = row.len();
    assert!(a.len() == out.len() && out.len().is_multiple_of(cols), "broadcast_add: shape mismatch");
    if out.len() < PAR_MIN {
        broadcast_add_serial(out, a, row);
    } else {
        let block = CHUNK.div_ceil(cols) * cols;
        out.par_chunks_mut(block).zip(a.par_chunks(block)).for_each(|(o, a)| broadcast_add_serial(o, a, row));
    }
}

#[derive(Clone)]
struct Binary {
    op: Option<BinOp>,
    rows: usize,
    cols: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    out: Vec<f32>,
}

/// The case's binary op (`None`: `broadcast_add`, a row vector added to
/// every row).
pub(crate) fn op_of(case: &Case) -> Result<Option<BinOp>> {
    Ok(match choice(case, "op", OPS)? {
        "add" => Some(BinOp::Add),
        "sub" => Some(BinOp::Sub),
        "mul" => Some(BinOp::Mul),
        "div" => Some(BinOp::Div),
        _ => None,
    })
}

/// The case's operands, written once so the CPU and GPU cases compute on
/// the same values: `a` (`rows * cols`) and `b` (the same size, or `cols`
/// for the broadcast). Divisors lie in [0.5, 2): well away from zero.
pub(crate) fn inputs(op: Option<BinOp>, rows: usize, cols: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let n = rows * cols;
    let a = util::randn(n, seed);
    let b = match op {
        Some(BinOp::Div) => util::uniform(n, 0.5, 2.0, seed ^ 1),
        Some(_) => util::randn(n, seed ^ 1),
        None => util::randn(cols, seed ^ 1),
    };
    (a, b)
}

pub(crate) fn prepare(case: &Case) -> Result<Box<dyn Workload>> {
    let op = op_of(case)?;
    let (rows, cols) = shape2(case)?;
    let n = rows * cols;
    let (a, b) = inputs(op, rows, cols, super::seed(case));
    Ok(Box::new(Binary { op, rows, cols, a, b, out: vec![f32::NAN; n] }))
}

/// Work one iteration does: the reads of a and b (b is one row when
/// broadcast) plus the write of out.
fn throughput(op: Option<BinOp>, rows: usize, cols: usize) -> Vec<Throughput> {
    let n = (rows * cols) as f64;
    let bytes = match op {
        Some(_) => 12.0 * n,
        None => 8.0 * n + 4.0 * cols as f64,
    };
    vec![Throughput::flops(n), Throughput::bytes(bytes), Throughput::elements(n)]
}

/// The case as tensor work for a device backend (`crate::backend::ops`):
/// the CPU case's operands and work counts, checked exactly against f64.
pub(crate) fn describe(case: &Case) -> Result<TensorWork> {
    let op = op_of(case)?;
    let (rows, cols) = shape2(case)?;
    let (a, b) = inputs(op, rows, cols, super::seed(case));
    let (device_op, check): (TensorOp, Check) = match op {
        Some(op) => (
            TensorOp::Binary(op),
            Box::new(move |inp: &Inputs, out: Output<'_>| {
                let h = &inp.values;
                on_values(out, |got| {
                    let want: Vec<f32> =
                        h[0].iter().zip(&h[1]).map(|(&x, &y)| op.f64(x as f64, y as f64) as f32).collect();
                    Verification::compare(
                        "f64 arithmetic rounded to f32, exact (IEEE + - * / on the GPU)",
                        got,
                        &want,
                        0.0,
                        0.0,
                    )
                })
            }),
        ),
        None => (
            TensorOp::BroadcastAdd { cols },
            Box::new(move |inp: &Inputs, out: Output<'_>| {
                let h = &inp.values;
                on_values(out, |got| {
                    let want: Vec<f32> = h[0]
                        .iter()
                        .enumerate()
                        .map(|(i, &x)| (x as f64 + h[1][i % cols] as f64) as f32)
                        .collect();
                    Verification::compare("f64 arithmetic rounded to f32, exact", got, &want, 0.0, 0.0)
                })
            }),
        ),
    };
    Ok(TensorWork {
        id: case.id.clone(),
        op: device_op,
        inputs: Inputs { values: vec![a, b], bytes: Vec::new() },
        throughput: throughput(op, rows, cols),
        check,
    })
}

impl Binary {
    fn once(&mut self) {
        match self.op {
            Some(op) => binary(op, &mut self.out, &self.a, &self.b),
            None => broadcast_add(&mut self.out, &self.a, &self.b),
        }
    }
}

impl Workload for Binary {
    /// Its buffers copied: the same inputs in memory of their own, without
    /// drawing them again (see `harness::placement`).
    fn replicate(&self) -> Option<Box<dyn Workload>> {
        Some(Box::new(self.clone()))
    }

    fn verify(&mut self) -> Result<Verification> {
        self.out.fill(f32::NAN);
        self.once();
        let cols = self.cols;
        let want: Vec<f32> = match self.op {
            Some(op) => {
                self.a.iter().zip(&self.b).map(|(&x, &y)| op.f64(x as f64, y as f64) as f32).collect()
            }
            None => {
                self.a.iter().enumerate().map(|(i, &x)| (x as f64 + self.b[i % cols] as f64) as f32).collect()
            }
        };
        Ok(Verification::compare(
            "f64 arithmetic rounded to f32, exact (double rounding is innocuous for + - * /)",
            &self.out,
            &want,
            0.0,
            0.0,
        ))
    }

    fn throughput(&self) -> Vec<Throughput> {
        throughput(self.op, self.rows, self.cols)
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.once();
            std::hint::black_box(&mut self.out);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_match_f64_on_odd_sizes_serial_and_parallel() {
        for n in [1, 37 * 53, PAR_MIN + 4099] {
            let a = util::randn(n, 1);
            let b = util::uniform(n, 0.5, 2.0, 2);
            for op in [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div] {
                let mut out = vec![f32::NAN; n];
                binary(op, &mut out, &a, &b);
                for i in 0..n {
                    assert_eq!(out[i], op.f64(a[i] as f64, b[i] as f64) as f32, "{op:?} n={n} i={i}");
                }
            }
        }
    }

    #[test]
    fn broadcast_add_matches_naive_on_odd_shapes() {
        for (r, c) in [(37, 53), (1, 7), (PAR_MIN / 1000 + 3, 1001)] {
            let a = util::randn(r * c, 3);
            let row = util::randn(c, 4);
            let mut out = vec![f32::NAN; r * c];
            broadcast_add(&mut out, &a, &row);
            for i in 0..r {
                for j in 0..c {
                    assert_eq!(out[i * c + j], a[i * c + j] + row[j], "{r}x{c} at {i},{j}");
                }
            }
        }
    }

    #[test]
    fn a_wrong_result_fails_verification() {
        // A kernel computing a - b, checked as if it were add, must fail.
        let (a, b) = (util::randn(37 * 53, 9), util::randn(37 * 53, 10));
        let mut w = Binary { op: Some(BinOp::Sub), rows: 37, cols: 53, a, b, out: vec![f32::NAN; 37 * 53] };
        w.once();
        let want: Vec<f32> = w.a.iter().zip(&w.b).map(|(x, y)| x + y).collect();
        assert!(!Verification::compare("add", &w.out, &want, 0.0, 0.0).passed);
        // One ulp off in one value is caught too.
        w.op = Some(BinOp::Add);
        assert!(w.verify().unwrap().passed);
        let mut out = want.clone();
        out[100] = f32::from_bits(out[100].to_bits() + 1);
        assert!(!Verification::compare("add", &out, &want, 0.0, 0.0).passed);
    }
}
