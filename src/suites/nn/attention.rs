//! `attention`: scaled dot-product attention over `heads` heads of width
//! 64, the scores materialised or tiled with the online softmax, checked
//! against the definition in f64 on sampled query rows. Each call allocates
//! its own scratch, so the allocation pass's peak shows O(n^2) against O(n);
//! the metric `scratch_bytes` gives the figure the algorithm must hold.

use super::{check, choice, ensure_memory, positive, sample, seed};
use crate::kernels::nn::attention::{
    FLASH_SCRATCH, attention_flash, attention_flops, attention_materialised, attention_row_f64,
};
use crate::plan::Case;
use crate::suites::{Metric, Throughput, Verification, Workload};
use anyhow::Result;
use rayon::ThreadPool;
use std::sync::Arc;

/// The algorithms.
pub(super) const ALGOS: &[&str] = &["materialised", "flash"];
/// The masks.
pub(super) const MASKS: &[&str] = &["none", "causal"];
/// Head width (GPT-2's, Llama's 128 halved; what `scaled_dot_product_attention` benchmarks use).
const D: usize = 64;

struct Attention {
    flash: bool,
    causal: bool,
    dims: (usize, usize, usize),
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    out: Vec<f32>,
    threads: usize,
    pool: Option<Arc<ThreadPool>>,
    seed: u64,
}

/// Prepares an `attention` case.
pub(super) fn prepare(case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
    let flash = choice(case, "algo", ALGOS)? == "flash";
    let causal = choice(case, "mask", MASKS)? == "causal";
    let (heads, n) = (positive(case, "heads")?, positive(case, "seq")?);
    let io = 4.0 * 4.0 * heads as f64 * n as f64 * D as f64;
    ensure_memory("this attention", io + scratch_bytes(flash, heads, n, ctx.threads()))?;
    let seed = seed(case);
    let len = heads * n * D;
    Ok(Box::new(Attention {
        flash,
        causal,
        dims: (heads, n, D),
        q: crate::util::randn(len, seed),
        k: crate::util::randn(len, seed ^ 1),
        v: crate::util::randn(len, seed ^ 2),
        out: vec![f32::NAN; len],
        threads: ctx.threads(),
        pool: ctx.pool(),
        seed,
    }))
}

/// Bytes of scratch one call allocates: every head's scores, or one score
/// block and row statistics per thread (flash accumulates in the output).
fn scratch_bytes(flash: bool, heads: usize, n: usize, threads: usize) -> f64 {
    if flash { 4.0 * threads as f64 * FLASH_SCRATCH as f64 } else { 4.0 * heads as f64 * n as f64 * n as f64 }
}

impl Attention {
    fn once(&mut self) {
        let Self { flash, causal, dims, q, k, v, out, threads, pool, .. } = self;
        crate::backend::cpu::install(pool.as_deref(), || {
            if *flash {
                attention_flash(*dims, q, k, v, *causal, out);
            } else {
                attention_materialised(*dims, q, k, v, *causal, out, *threads);
            }
        });
    }
}

impl Workload for Attention {
    fn verify(&mut self) -> Result<Verification> {
        self.out.fill(f32::NAN);
        self.once();
        let (heads, n, d) = self.dims;
        let rows = sample(heads * n, 48, self.seed ^ 5);
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for &r in &rows {
            got.extend_from_slice(&self.out[r * d..(r + 1) * d]);
            want.extend(attention_row_f64((n, d), &self.q, &self.k, &self.v, self.causal, r / n, r % n));
        }
        Ok(check(
            format!("f64 softmax(QK^T/sqrt(d))V on {} of {} query rows", rows.len(), heads * n),
            &got,
            &want,
            None,
            2e-5,
            1e-4,
        ))
    }
    fn throughput(&self) -> Vec<Throughput> {
        let (heads, n, d) = self.dims;
        vec![
            Throughput::flops(attention_flops(heads, n, d, self.causal)),
            Throughput::tokens((heads * n) as f64),
        ]
    }
    fn metrics(&mut self) -> Vec<Metric> {
        let (heads, n, _) = self.dims;
        vec![Metric::new("scratch_bytes", scratch_bytes(self.flash, heads, n, self.threads), "B")]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.once();
        }
        Ok(())
    }
}
