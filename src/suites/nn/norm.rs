//! `norm`: batch norm (inference and training forms), group norm (32
//! groups) and instance norm over NCHW activations, checked against the f64
//! statistics and normalisation of [`crate::kernels::nn::chnorm`].

use super::{check, choice, ensure_memory, sample, seed};
use crate::kernels::nn::chnorm::{
    batch_norm_infer, batch_norm_train, group_norm, normalise_plane_f64, stats_f64,
};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use anyhow::{Result, bail};
use rayon::ThreadPool;
use std::sync::Arc;

/// The normalisations.
pub(super) const KINDS: &[&str] = &["batch_infer", "batch_train", "group", "instance"];
/// Groups of `kind = group` (the group-norm paper's default).
const GROUPS: usize = 32;
const EPS: f32 = 1e-5;

struct Norm {
    kind: &'static str,
    dims: (usize, usize, usize),
    x: Vec<f32>,
    out: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    mean: Vec<f32>,
    var: Vec<f32>,
    pool: Option<Arc<ThreadPool>>,
    seed: u64,
}

/// Prepares a `norm` case.
pub(super) fn prepare(case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
    let kind = choice(case, "kind", KINDS)?;
    let &[n, c, h, w] = case.shape("shape")?.as_slice() else {
        bail!("case {}: `shape` must be NxCxHxW", case.id);
    };
    if kind == "group" && !c.is_multiple_of(GROUPS) {
        bail!("case {}: group norm uses {GROUPS} groups, which must divide the {c} channels", case.id);
    }
    ensure_memory("this normalisation", 8.0 * n as f64 * c as f64 * h as f64 * w as f64)?;
    let len = n * c * h * w;
    let seed = seed(case);
    // Activations with a channel-dependent offset and scale, as after a conv.
    let offs = crate::util::randn(c, seed ^ 4);
    let x = crate::util::randn(len, seed)
        .iter()
        .enumerate()
        .map(|(i, v)| v * 1.5 + offs[i / (h * w) % c])
        .collect();
    Ok(Box::new(Norm {
        kind,
        dims: (n, c, h * w),
        x,
        out: vec![f32::NAN; len],
        gamma: crate::util::uniform(c, 0.5, 1.5, seed ^ 1),
        beta: crate::util::randn(c, seed ^ 2),
        mean: crate::util::randn(c, seed ^ 5),
        var: crate::util::uniform(c, 0.5, 2.0, seed ^ 6),
        pool: ctx.pool(),
        seed,
    }))
}

impl Norm {
    fn once(&mut self) {
        let Self { kind, dims: (n, c, sp), x, out, gamma, beta, mean, var, pool, .. } = self;
        let (n, c, sp) = (*n, *c, *sp);
        crate::backend::cpu::install(pool.as_deref(), || match *kind {
            "batch_infer" => batch_norm_infer(out, x, (c, sp), mean, var, gamma, beta, EPS),
            "batch_train" => batch_norm_train(out, x, (n, c, sp), mean, var, gamma, beta, EPS),
            "group" => group_norm(out, x, (c, sp), GROUPS, gamma, beta, EPS),
            _ => group_norm(out, x, (c, sp), c, gamma, beta, EPS),
        });
    }
}

impl Workload for Norm {
    fn verify(&mut self) -> Result<Verification> {
        let (n, c, sp) = self.dims;
        let (rm, rv) = (self.mean.clone(), self.var.clone());
        self.out.fill(f32::NAN);
        self.once();
        let plane = |i: usize, ch: usize| &self.x[(i * c + ch) * sp..][..sp];
        let (mut got, mut want) = (Vec::new(), Vec::new());
        let planes = sample(n * c, 16, self.seed ^ 9);
        for &p in &planes {
            let (i, ch) = (p / c, p % c);
            let (m, v) = match self.kind {
                "batch_infer" => (rm[ch] as f64, rv[ch] as f64),
                "batch_train" => stats_f64((0..n).map(|k| plane(k, ch))),
                _ => {
                    let cg = if self.kind == "group" { c / GROUPS } else { 1 };
                    let g0 = ch / cg * cg;
                    stats_f64((g0..g0 + cg).map(|k| plane(i, k)))
                }
            };
            got.extend_from_slice(&self.out[p * sp..(p + 1) * sp]);
            want.extend(normalise_plane_f64(plane(i, ch), m, v, self.gamma[ch], self.beta[ch], EPS));
        }
        let mut v = check(
            format!("f64 statistics and normalisation on {} planes", planes.len()),
            &got,
            &want,
            None,
            2e-5,
            2e-5,
        );
        if v.passed && self.kind == "batch_train" {
            // The running statistics moved 10% of the way to the batch's.
            let ch = planes[0] % c;
            let (m, var) = stats_f64((0..n).map(|k| plane(k, ch)));
            let count = (n * sp) as f64;
            let unbiased = if count > 1.0 { var * count / (count - 1.0) } else { var };
            let want_m = 0.9 * rm[ch] as f64 + 0.1 * m;
            let want_v = 0.9 * rv[ch] as f64 + 0.1 * unbiased;
            let ok = (self.mean[ch] as f64 - want_m).abs() < 1e-5 * (1.0 + want_m.abs())
                && (self.var[ch] as f64 - want_v).abs() < 1e-5 * (1.0 + want_v);
            v = Verification::check(v.reference + " and running-statistics update", ok, v.detail);
        }
        Ok(v)
    }
    fn throughput(&self) -> Vec<Throughput> {
        let len = self.x.len() as f64;
        // Two-pass statistics read x twice more for every form but inference.
        let reads = if self.kind == "batch_infer" { 1.0 } else { 3.0 };
        vec![Throughput::bytes(4.0 * len * (reads + 1.0)), Throughput::elements(len)]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.once();
        }
        Ok(())
    }
}
