//! `rnn`: one RNN, LSTM or GRU layer over a sequence (input width = hidden
//! width, zero initial state), forward, checked against the f64 recurrence
//! of [`crate::kernels::nn::rnn`] on the first and last batch rows; with
//! `pass=forward_backward`, forward and backward through time
//! ([`super::rnn_train`]).

use super::{check, choice, ensure_memory, positive, seed};
use crate::kernels::nn::rnn::{Cell, RnnScratch, RnnWeights, init_weights, rnn_forward, rnn_row_f64};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use anyhow::Result;
use rayon::ThreadPool;
use std::sync::Arc;

/// The cells.
pub(super) const CELLS: &[&str] = &["rnn", "lstm", "gru"];
/// The passes: a case without `pass` is `forward` (the ids of the forward
/// cases predate the parameter and stay as they were).
pub(super) const PASSES: &[&str] = &["forward", "forward_backward"];

struct Rnn {
    cell: Cell,
    dims: (usize, usize, usize, usize),
    x: Vec<f32>,
    w: RnnWeights,
    y: Vec<f32>,
    scratch: RnnScratch,
    threads: usize,
    pool: Option<Arc<ThreadPool>>,
}

/// Prepares an `rnn` case.
pub(super) fn prepare(case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
    let cell = match choice(case, "cell", CELLS)? {
        "rnn" => Cell::Rnn,
        "lstm" => Cell::Lstm,
        _ => Cell::Gru,
    };
    let (h, b, t) = (positive(case, "hidden")?, positive(case, "batch")?, positive(case, "seq")?);
    let backward = case.params.contains_key("pass") && choice(case, "pass", PASSES)? == "forward_backward";
    // In f64: absurd sizes must reach the memory check, not wrap around.
    let (tf, bf, hf, gf) = (t as f64, b as f64, h as f64, cell.gates() as f64);
    let floats = tf * bf * hf * 2.0 + gf * hf * 2.0 * hf + tf * bf * gf * hf;
    let bytes = if backward { super::rnn_train::bytes(cell, (t, b, h, h)) } else { 4.0 * floats };
    ensure_memory("this recurrent layer", bytes)?;
    let seed = seed(case);
    let w = init_weights(cell, h, h, seed ^ 1);
    if backward {
        let x = crate::util::randn(t * b * h, seed);
        return Ok(super::rnn_train::prepare(cell, (t, b, h, h), x, w, seed, ctx));
    }
    // The weights packed once for the GEMM, untimed, as a model loads them.
    let mut scratch = RnnScratch::new(cell, t, b, h);
    scratch.pack(&w, h, h);
    Ok(Box::new(Rnn {
        cell,
        dims: (t, b, h, h),
        x: crate::util::randn(t * b * h, seed),
        w,
        y: vec![f32::NAN; t * b * h],
        scratch,
        threads: ctx.threads(),
        pool: ctx.pool(),
    }))
}

impl Rnn {
    fn once(&mut self) {
        let Self { cell, dims, x, w, y, scratch, threads, pool } = self;
        crate::backend::cpu::install(pool.as_deref(), || {
            rnn_forward(*cell, *dims, x, w, y, scratch, *threads)
        });
    }
}

impl Workload for Rnn {
    fn verify(&mut self) -> Result<Verification> {
        self.y.fill(f32::NAN);
        self.once();
        let (t, b, i, h) = self.dims;
        // The first steps of the first and last rows: each step's state
        // depends on every earlier one, so a prefix checks the recurrence.
        let steps = t.min(32);
        let (mut got, mut want) = (Vec::new(), Vec::new());
        let mut rows = vec![0, b - 1];
        rows.dedup();
        for &r in &rows {
            want.extend(rnn_row_f64(self.cell, (b, i, h), &self.x, &self.w, r, steps));
            for s in 0..steps {
                got.extend_from_slice(&self.y[(s * b + r) * h..][..h]);
            }
        }
        let what =
            format!("f64 {:?} recurrence, {steps} of {t} steps of {} of {b} rows", self.cell, rows.len());
        Ok(check(what, &got, &want, None, 1e-4, 1e-4))
    }
    fn throughput(&self) -> Vec<Throughput> {
        let (t, b, i, h) = self.dims;
        let weights = (self.w.w_ih.len() + self.w.w_hh.len()) as f64;
        vec![
            Throughput::flops(self.cell.flops(t, b, i, h)),
            // Weights read once for the input GEMM and once per step.
            Throughput::bytes(4.0 * (weights / 2.0 * (1.0 + t as f64) + (t * b * (i + h)) as f64)),
            Throughput::tokens((t * b) as f64),
        ]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.once();
        }
        Ok(())
    }
}
