//! `rnn` with `pass=forward_backward`: one layer's forward pass keeping
//! what the backward needs, then backward through time for a seeded `dL/dh`
//! of every step's output ([`crate::kernels::nn::rnn_bwd`]), giving the
//! gradients of the input, both weight matrices, both biases and the
//! initial state. Checked against the f64 BPTT loop of
//! [`crate::kernels::nn::rnn_ref`].

use super::check;
use crate::kernels::nn::rnn::{Cell, RnnWeights, rnn_row_f64};
use crate::kernels::nn::rnn_bwd::{RnnGrads, RnnTrain, backward_flops};
use crate::kernels::nn::rnn_ref::{Weights64, bptt_f64};
use crate::suites::{Throughput, Verification, Workload};
use anyhow::Result;
use rayon::ThreadPool;
use std::sync::Arc;

/// Steps of the sampled rows that carry a gradient in the check (the f64
/// BPTT of a 1024-wide LSTM costs about 25 M multiply-adds a step and row).
const CHECK_STEPS: usize = 8;

pub(super) struct RnnBackward {
    cell: Cell,
    dims: (usize, usize, usize, usize),
    x: Vec<f32>,
    w: RnnWeights,
    /// The timed `dL/dh` of every step's output, `[T x B x H]`.
    dy: Vec<f32>,
    /// The zero initial state (as the forward cases and PyTorch's default).
    state0: Vec<f32>,
    tape: RnnTrain,
    grads: RnnGrads,
    threads: usize,
    pool: Option<Arc<ThreadPool>>,
}

/// Bytes a forward-backward call allocates, for the memory check.
pub(super) fn bytes(cell: Cell, (t, b, i, h): (usize, usize, usize, usize)) -> f64 {
    let (tf, bf, hf, gf, fi) = (t as f64, b as f64, h as f64, cell.gates() as f64, i as f64);
    let weights = gf * hf * (fi + hf);
    // x, dy, dx, hidden and cell states; gates and their transpose; weights,
    // their gradients and three packed copies.
    4.0 * (tf * bf * (2.0 * fi + 3.0 * hf + 2.0 * gf * hf) + 6.0 * weights)
}

/// Prepares a forward-backward case with `x` and weights drawn as the forward's.
pub(super) fn prepare(
    cell: Cell,
    dims: (usize, usize, usize, usize),
    x: Vec<f32>,
    w: RnnWeights,
    seed: u64,
    ctx: &crate::backend::cpu::Context,
) -> Box<dyn Workload> {
    Box::new(build(cell, dims, x, w, seed, ctx))
}

fn build(
    cell: Cell,
    dims: (usize, usize, usize, usize),
    x: Vec<f32>,
    w: RnnWeights,
    seed: u64,
    ctx: &crate::backend::cpu::Context,
) -> RnnBackward {
    let (t, b, _, h) = dims;
    let mut tape = RnnTrain::new(cell, dims);
    // Packed once, untimed, as the forward cases pack theirs.
    tape.pack(&w);
    RnnBackward {
        cell,
        dims,
        x,
        w,
        dy: crate::util::randn(t * b * h, seed ^ 0xd1),
        state0: vec![0.0; b * h],
        tape,
        grads: RnnGrads::new(cell, dims),
        threads: ctx.threads(),
        pool: ctx.pool(),
    }
}

impl RnnBackward {
    fn once(&mut self, dy: Option<&[f32]>) {
        let Self { x, w, dy: timed, state0, tape, grads, threads, pool, .. } = self;
        let dy = dy.unwrap_or(timed);
        crate::backend::cpu::install(pool.as_deref(), || {
            tape.forward(x, w, state0, state0, *threads);
            tape.backward(x, w, dy, grads, *threads);
        });
    }

    /// One call with `dL/dh` nonzero only on the first [`CHECK_STEPS`]
    /// steps of the first and last rows (every gradient set to NaN first);
    /// returns those rows and the step count.
    fn run_slice(&mut self) -> (Vec<usize>, usize) {
        let (t, b, _, h) = self.dims;
        let mut rows = vec![0, b - 1];
        rows.dedup();
        let steps = t.min(CHECK_STEPS);
        let mut dy = vec![0.0f32; t * b * h];
        for &r in &rows {
            for s in 0..steps {
                let at = (s * b + r) * h;
                dy[at..at + h].copy_from_slice(&self.dy[at..at + h]);
            }
        }
        let g = &mut self.grads;
        for v in [&mut g.dx, &mut g.dw_ih, &mut g.dw_hh, &mut g.db_ih, &mut g.db_hh, &mut g.dh0, &mut g.dc0] {
            v.fill(f32::NAN);
        }
        self.once(Some(&dy));
        (rows, steps)
    }

    /// The hidden states of the first 32 steps of `rows` against the f64
    /// recurrence (the forward cases' check).
    fn check_forward(&self, rows: &[usize]) -> Verification {
        let (t, b, i, h) = self.dims;
        let steps = t.min(32);
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for &r in rows {
            want.extend(rnn_row_f64(self.cell, (b, i, h), &self.x, &self.w, r, steps));
            for s in 0..steps {
                got.extend_from_slice(&self.tape.output()[(s * b + r) * h..][..h]);
            }
        }
        check(format!("f64 recurrence, {steps} steps"), &got, &want, None, 1e-4, 1e-4)
    }

    /// With `dL/dh` nonzero only on the first [`CHECK_STEPS`] steps of
    /// `rows`, every gradient against the f64 BPTT of those rows (weight
    /// and bias gradients summed over them), and everything the other rows
    /// and steps receive exactly zero.
    fn check_backward(&self, rows: &[usize], steps: usize) -> Verification {
        let (t, b, i, h) = self.dims;
        let w64 = Weights64::from(&self.w);
        let zero = vec![0.0f64; h];
        let g = &self.grads;
        let mut sums = [
            vec![0.0f64; g.dw_ih.len()],
            vec![0.0; g.dw_hh.len()],
            vec![0.0; g.db_ih.len()],
            vec![0.0; g.db_hh.len()],
        ];
        // Per-row tensors: dx of the sampled steps, dh0, dc0.
        let (mut got_rows, mut want_rows) = (Vec::new(), Vec::new());
        for &r in rows {
            let pick = |v: &[f32], k: usize| -> Vec<f64> {
                (0..steps).flat_map(|s| v[(s * b + r) * k..][..k].iter().map(|&a| a as f64)).collect()
            };
            let f = bptt_f64(self.cell, h, &w64, &pick(&self.x, i), (&zero, &zero), &pick(&self.dy, h));
            for (s, o) in [&f.dw_ih, &f.dw_hh, &f.db_ih, &f.db_hh].into_iter().zip(sums.iter_mut()) {
                o.iter_mut().zip(s).for_each(|(a, v)| *a += v);
            }
            for s in 0..steps {
                got_rows.extend_from_slice(&g.dx[(s * b + r) * i..][..i]);
            }
            want_rows.extend(&f.dx);
            got_rows.extend_from_slice(&g.dh0[r * h..][..h]);
            want_rows.extend(&f.dh0);
            if self.cell == Cell::Lstm {
                got_rows.extend_from_slice(&g.dc0[r * h..][..h]);
                want_rows.extend(&f.dc0);
            }
        }
        let tensors = [
            ("dx, dh0, dc0 of the sampled rows", &got_rows[..], want_rows),
            ("dW_ih", &g.dw_ih[..], std::mem::take(&mut sums[0])),
            ("dW_hh", &g.dw_hh[..], std::mem::take(&mut sums[1])),
            ("db_ih", &g.db_ih[..], std::mem::take(&mut sums[2])),
            ("db_hh", &g.db_hh[..], std::mem::take(&mut sums[3])),
        ];
        let mut worst = 0.0f64;
        for (name, got, want) in tensors {
            // f32 sums against f64 ones: within 1e-4 of the tensor's largest value.
            let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let v = check(name.to_string(), got, &want, None, 1e-4 * scale, 1e-4);
            if !v.passed {
                return v;
            }
            worst = worst.max(v.max_error.unwrap_or(0.0));
        }
        // The rest: other rows and later steps get no gradient at all.
        let off = (0..t * b).filter(|&tr| !(tr / b < steps && rows.contains(&(tr % b))));
        let stray = off
            .flat_map(|tr| g.dx[tr * i..][..i].iter())
            .chain((0..b).filter(|r| !rows.contains(r)).flat_map(|r| g.dh0[r * h..][..h].iter()))
            .find(|v| **v != 0.0);
        if let Some(v) = stray {
            return Verification::check(
                "f64 BPTT",
                false,
                format!("a row or step without dL/dh got gradient {v}"),
            );
        }
        Verification {
            passed: true,
            reference: format!("f64 BPTT of {} rows x {steps} steps", rows.len()),
            max_error: Some(worst),
            detail: "dx, dh0, dc0, dW_ih, dW_hh, db_ih, db_hh within 1e-4 x (largest + own) magnitude; other rows and steps exactly 0".into(),
        }
    }
}

impl Workload for RnnBackward {
    fn verify(&mut self) -> Result<Verification> {
        let (rows, steps) = self.run_slice();
        let fwd = self.check_forward(&rows);
        let bwd = self.check_backward(&rows, steps);
        // The timed dL/dh (every row and step): the same code, finite results.
        self.once(None);
        let g = &self.grads;
        let finite = [&g.dx, &g.dw_ih, &g.dw_hh, &g.db_ih, &g.db_hh, &g.dh0, &g.dc0]
            .iter()
            .all(|v| v.iter().all(|x| x.is_finite()));
        Ok(Verification {
            passed: fwd.passed && bwd.passed && finite,
            reference: format!("{} and {}; {:?}", fwd.reference, bwd.reference, self.cell),
            max_error: Some(bwd.max_error.unwrap_or(0.0).max(fwd.max_error.unwrap_or(0.0))),
            detail: format!(
                "forward: {}; backward: {}; timed dL/dh gives finite gradients: {finite}",
                fwd.detail, bwd.detail
            ),
        })
    }
    fn throughput(&self) -> Vec<Throughput> {
        let (t, b, i, h) = self.dims;
        let weights = (self.w.w_ih.len() + self.w.w_hh.len()) as f64;
        let gates = (t * b * self.cell.gates() * h) as f64;
        vec![
            Throughput::flops(self.cell.flops(t, b, i, h) + backward_flops(self.cell, t, b, i, h)),
            // Weights read once for each whole-sequence GEMM and once per
            // step each way, gradients written; x, dy, dx and the states;
            // the gates saved, reread and transposed.
            Throughput::bytes(
                4.0 * (weights * (2.0 + t as f64) + (t * b * (2 * i + 3 * h)) as f64 + 4.0 * gates),
            ),
            Throughput::tokens((t * b) as f64),
        ]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.once(None);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::{Context, Threads};
    use crate::kernels::nn::rnn::init_weights;

    /// The check passes the kernel's gradients and fails one weight
    /// gradient off by 1% of its tensor's largest, or a gradient where
    /// `dL/dh` was zero.
    #[test]
    fn the_backward_check_catches_a_wrong_or_a_stray_gradient() {
        let ctx = Context::new(Threads::Exactly(2)).expect("a pool");
        for cell in [Cell::Rnn, Cell::Lstm, Cell::Gru] {
            let dims = (12, 3, 10, 16);
            let w = init_weights(cell, 10, 16, 5);
            let mut wl = build(cell, dims, crate::util::randn(12 * 3 * 10, 6), w, 7, &ctx);
            let v = wl.verify().expect("verifies");
            assert!(v.passed, "{cell:?}: {} {}", v.reference, v.detail);
            let (rows, steps) = wl.run_slice();
            assert!(wl.check_backward(&rows, steps).passed);
            let big = wl.grads.dw_hh.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            wl.grads.dw_hh[5] += 0.01 * big;
            let v = wl.check_backward(&rows, steps);
            assert!(!v.passed && v.detail.contains("value 5"), "{cell:?}: {}", v.detail);
            wl.grads.dw_hh[5] -= 0.01 * big;
            // Row 1 of the last step had no dL/dh.
            let at = (11 * 3 + 1) * 10;
            wl.grads.dx[at] = 1e-3;
            let v = wl.check_backward(&rows, steps);
            assert!(!v.passed && v.detail.contains("without dL/dh"), "{cell:?}: {}", v.detail);
        }
    }
}
