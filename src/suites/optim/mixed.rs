//! Mixed-precision AdamW: bf16/f16 model weights and (loss-scaled)
//! gradients, f32 master weights and moments, dynamic loss scaling.
//!
//! Like PyTorch AMP's `GradScaler` + `optimizer.step`: a scan for non-finite
//! gradients first (an overflow skips the step and halves the scale), then
//! one fused pass that unscales the gradient, updates the f32 master weight
//! and moments, and rounds the weight back to the half type. The pass works
//! in 1024-element blocks converted through L1-resident f32 scratch (the
//! `half` crate's slice conversions, F16C when the CPU has it), so memory
//! sees each array once.

use super::install;
use super::optimizers::{AdamConst, CHUNK, Kind, Reference, adam_chunk};
use crate::backend::cpu::Context;
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::workload::Metric;
use anyhow::{Result, bail};
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use half::{bf16, f16};
use rayon::prelude::*;

/// The half type of weights and gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Half {
    Bf16,
    F16,
}

impl Half {
    /// Exponent bits: all ones means infinity or NaN.
    fn exp_mask(self) -> u16 {
        match self {
            Half::Bf16 => 0x7F80,
            Half::F16 => 0x7C00,
        }
    }
    fn to_f32(self, src: &[u16], dst: &mut [f32]) {
        match self {
            Half::Bf16 => src.reinterpret_cast::<bf16>().convert_to_f32_slice(dst),
            Half::F16 => src.reinterpret_cast::<f16>().convert_to_f32_slice(dst),
        }
    }
    fn store_f32(self, src: &[f32], dst: &mut [u16]) {
        match self {
            Half::Bf16 => dst.reinterpret_cast_mut::<bf16>().convert_from_f32_slice(src),
            Half::F16 => dst.reinterpret_cast_mut::<f16>().convert_from_f32_slice(src),
        }
    }
    fn bits(self, x: f32) -> u16 {
        match self {
            Half::Bf16 => bf16::from_f32(x).to_bits(),
            Half::F16 => f16::from_f32(x).to_bits(),
        }
    }
    fn value(self, b: u16) -> f64 {
        match self {
            Half::Bf16 => bf16::from_bits(b).to_f64(),
            Half::F16 => f16::from_bits(b).to_f64(),
        }
    }
}

/// PyTorch `GradScaler` defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Scaler {
    scale: f32,
    good_steps: u32,
}

const GROWTH_INTERVAL: u32 = 2000;
const BLOCK: usize = 1024;

struct MixedWorkload {
    half: Half,
    weights: Vec<u16>,
    grads: Vec<u16>,
    master: Vec<f32>,
    m: Vec<f32>,
    v: Vec<f32>,
    step: u64,
    scaler: Scaler,
    skipped: u64,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
    held_bytes: Option<usize>,
}

/// Prepares a `mixed_precision` case (`dtype`, `params`, `threads`).
/// Valid `dtype` values of `mixed_precision`.
pub(super) const DTYPES: &[&str] = &["bf16", "f16"];

pub(crate) fn prepare(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    let half = match super::choice(case, "dtype", DTYPES)? {
        "bf16" => Half::Bf16,
        _ => Half::F16,
    };
    let n = super::positive(case, "params")?;
    let (pool, _) = (ctx.pool(), ctx.threads());
    super::ensure_memory(16.0 * n as f64 * 1.5)?;
    let seed = super::seed(case);
    let scaler = Scaler { scale: 65536.0, good_steps: 0 };
    let init = crate::util::randn(n, seed);
    let raw = crate::util::randn(n, seed ^ 1);
    let (w, held) = super::live_delta(|| {
        let master = init.clone();
        let mut weights = vec![0u16; n];
        half.store_f32(&master, &mut weights);
        // The backward pass's output: gradients ~N(0, 1e-4) times the loss scale.
        let scaled: Vec<f32> = raw.iter().map(|x| x * 1e-2 * scaler.scale).collect();
        let mut grads = vec![0u16; n];
        half.store_f32(&scaled, &mut grads);
        drop(scaled);
        MixedWorkload {
            half,
            weights,
            grads,
            master,
            m: vec![0.0; n],
            v: vec![0.0; n],
            step: 0,
            scaler,
            skipped: 0,
            pool: None,
            held_bytes: None,
        }
    });
    Ok(Box::new(MixedWorkload { pool, held_bytes: held, ..w }))
}

impl MixedWorkload {
    /// One AMP step; returns whether it was applied (false: overflow, skipped).
    fn amp_step(&mut self) -> bool {
        let Self { half, weights, grads, master, m, v, step, scaler, pool, .. } = self;
        let (half, mask) = (*half, half.exp_mask());
        let finite = install(pool.as_deref(), || {
            grads.par_chunks(CHUNK).all(|c| c.iter().fold(true, |ok, &b| ok & (b & mask != mask)))
        });
        if !finite {
            scaler.scale *= 0.5;
            scaler.good_steps = 0;
            self.skipped += 1;
            return false;
        }
        *step += 1;
        let c =
            AdamConst::new(Kind::AdamW, Kind::AdamW.default_hyper(), Kind::AdamW.default_hyper().lr, *step);
        let inv = 1.0 / scaler.scale;
        install(pool.as_deref(), || {
            weights
                .par_chunks_mut(CHUNK)
                .zip(grads.par_chunks(CHUNK))
                .zip(master.par_chunks_mut(CHUNK))
                .zip(m.par_chunks_mut(CHUNK))
                .zip(v.par_chunks_mut(CHUNK))
                .for_each(|((((w, g), p), m), v)| {
                    let mut gf = [0.0f32; BLOCK];
                    for ((((w, g), p), m), v) in w
                        .chunks_mut(BLOCK)
                        .zip(g.chunks(BLOCK))
                        .zip(p.chunks_mut(BLOCK))
                        .zip(m.chunks_mut(BLOCK))
                        .zip(v.chunks_mut(BLOCK))
                    {
                        let gf = &mut gf[..g.len()];
                        half.to_f32(g, gf);
                        gf.iter_mut().for_each(|x| *x *= inv);
                        adam_chunk(p, gf, m, v, c);
                        half.store_f32(p, w);
                    }
                })
        });
        scaler.good_steps += 1;
        if scaler.good_steps == GROWTH_INTERVAL {
            scaler.scale *= 2.0;
            scaler.good_steps = 0;
        }
        true
    }
}

impl Workload for MixedWorkload {
    fn verify(&mut self) -> Result<Verification> {
        let n = self.master.len();
        // An overflow must skip the step untouched and halve the scale.
        let before = (self.weights.clone(), self.master.clone(), self.scaler);
        let k = n / 2;
        let saved = self.grads[k];
        self.grads[k] = self.half.exp_mask() | 0x8000;
        let applied = self.amp_step();
        self.grads[k] = saved;
        if applied
            || self.weights != before.0
            || self.master != before.1
            || self.scaler.scale != before.2.scale * 0.5
        {
            bail!("an infinite gradient did not skip the step and halve the loss scale");
        }
        self.scaler = before.2;
        self.skipped = 0;
        drop(before);
        // Three steps against the f64 rule on sampled values.
        let idx: Vec<usize> = (0..4096.min(n)).map(|i| i * (n / 4096.min(n))).collect();
        let h = Kind::AdamW.default_hyper();
        let mut reference = Reference::new(Kind::AdamW, h, idx.len());
        let mut p: Vec<f64> = idx.iter().map(|&i| self.master[i] as f64).collect();
        let g: Vec<f64> =
            idx.iter().map(|&i| self.half.value(self.grads[i]) / self.scaler.scale as f64).collect();
        for _ in 0..3 {
            if !self.amp_step() {
                bail!("a finite gradient was reported as overflow");
            }
            reference.step(&mut p, &g, h.lr as f64);
        }
        let got: Vec<f32> = idx.iter().map(|&i| self.master[i]).collect();
        let want: Vec<f32> = p.iter().map(|&x| x as f32).collect();
        let mut v = Verification::compare(
            "f64 AdamW on the unscaled half gradient (4096 sampled master weights, 3 steps)",
            &got,
            &want,
            1e-6,
            1e-5,
        );
        if let Some(i) = idx.iter().find(|&&i| self.weights[i] != self.half.bits(self.master[i])) {
            bail!("weight {i} is not its master weight rounded to {:?}", self.half);
        }
        v.detail = format!(
            "{}; overflow skipped the step and halved the scale; weights = rounded masters",
            v.detail
        );
        Ok(v)
    }

    fn throughput(&self) -> Vec<Throughput> {
        let n = self.master.len() as f64;
        // Scan of the half gradient, then: gradient read, weight written,
        // master/m/v read and written.
        vec![Throughput::elements(n), Throughput::bytes(n * (2.0 + 2.0 + 2.0 + 24.0))]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.amp_step();
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let n = self.master.len() as f64;
        let mut m = vec![
            Metric::new("loss_scale", self.scaler.scale as f64, ""),
            Metric::new("skipped_steps_timed", self.skipped as f64, ""),
        ];
        if let Some(b) = self.held_bytes {
            // Half weight + half gradient + f32 master, m, v = 16 B.
            m.push(Metric::new("bytes_per_param", b as f64 / n, "B"));
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ParamValue;

    #[test]
    fn both_half_types_verify_skip_overflow_and_grow_the_scale() {
        for dtype in ["bf16", "f16"] {
            let params = [
                ("dtype".to_string(), ParamValue::Str(dtype.into())),
                ("params".to_string(), ParamValue::Int(70_001)),
                ("threads".to_string(), ParamValue::Int(2)),
            ];
            let mut w = {
                let c = Case::new("optim", "mixed_precision", params.into_iter().collect());
                prepare(&c, &crate::suites::test_context(&c))
            }
            .unwrap();
            let v = w.verify().unwrap();
            assert!(v.passed, "{dtype}: {}", v.detail);
            w.run(GROWTH_INTERVAL as u64).unwrap();
            let scale = w.metrics().iter().find(|m| m.name == "loss_scale").unwrap().value;
            assert_eq!(scale, 131072.0, "{dtype}: the scale doubles after {GROWTH_INTERVAL} clean steps");
        }
    }
}
