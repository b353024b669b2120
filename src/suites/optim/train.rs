//! `train_step`, `grad_accum` and `checkpointing`: full training steps
//! (forward, hand-written backward, fused AdamW) of the models in
//! `model.rs`, one batch at once or in micro-batches, storing activations
//! or recomputing them.

use super::model::{Arch, Model};
use super::optimizers::{Kind, Optimizer};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::workload::Metric;
use anyhow::{Result, bail};

struct TrainWorkload {
    model: Model,
    opt: Optimizer,
    x: Vec<f32>,
    target: Vec<f32>,
    rows: usize,
    micro: usize,
    recompute: bool,
    peak: Option<usize>,
    last_loss: f64,
}

/// Prepares a `train_step`, `grad_accum` or `checkpointing` case.
/// Valid `model` values of the training benchmarks.
pub(super) const MODELS: &[&str] = &["mlp", "block"];
/// Valid `mode` values of `checkpointing`.
pub(super) const MODES: &[&str] = &["store", "recompute"];

pub(crate) fn prepare(case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
    let arch = match super::choice(case, "model", MODELS)? {
        "mlp" => Arch::Mlp { dims: vec![256, 1024, 1024, 1024, 256] },
        _ => Arch::Block { d: 256, heads: 4, ffn: 1024, seq: 64, layers: 2 },
    };
    let batch = super::positive(case, "batch")?;
    let micro = if case.benchmark == "grad_accum" { super::positive(case, "micro")? } else { 1 };
    if batch % micro != 0 {
        bail!("case {}: `micro` = {micro} must divide `batch` = {batch}", case.id);
    }
    let recompute = case.benchmark == "checkpointing" && super::choice(case, "mode", MODES)? == "recompute";
    let seed = super::seed(case);
    let model = Model::new(arch, seed, ctx.threads());
    let rows = model.rows(batch);
    let (din, dout) = model.width();
    let x = crate::util::randn(rows * din, seed ^ 1);
    let target = crate::util::randn(rows * dout, seed ^ 2);
    let opt = Optimizer::new(Kind::AdamW, Kind::AdamW.default_hyper(), model.params.len());
    Ok(Box::new(TrainWorkload {
        model,
        opt,
        x,
        target,
        rows,
        micro,
        recompute,
        peak: None,
        last_loss: f64::NAN,
    }))
}

impl TrainWorkload {
    fn grads(&mut self, micro: usize, recompute: bool) -> f64 {
        self.model.accumulate(&self.x, &self.target, self.rows, micro, recompute)
    }

    fn step(&mut self) -> f64 {
        let loss = self.grads(self.micro, self.recompute);
        self.opt.step_fused(&mut self.model.params, &self.model.grads);
        loss
    }

    fn norm(&self) -> f64 {
        (self.rows * self.model.width().1) as f64
    }

    /// Central difference of the loss along `dir` against `grads . dir`.
    fn directional_check(&mut self) -> (f64, f64) {
        let g = &self.model.grads;
        let r = crate::util::uniform(g.len(), -0.5, 0.5, 77);
        let dir: Vec<f32> = g.iter().zip(&r).map(|(&g, &r)| g * (1.0 + r)).collect();
        let max = dir.iter().fold(0.0f32, |m, &d| m.max(d.abs())).max(f32::MIN_POSITIVE);
        // Small enough that third-order terms vanish: at 1e-3 the largest
        // weight moves 1e-3 and the difference was off by a few percent.
        let h = 1e-4 / max;
        let analytic: f64 = g.iter().zip(&dir).map(|(&g, &d)| g as f64 * d as f64).sum();
        let base = self.model.params.clone();
        let norm = self.norm();
        let mut at = |sign: f32| {
            self.model.params.iter_mut().zip(&dir).for_each(|(p, &d)| *p += sign * h * d);
            let l = self.model.loss(&self.x, &self.target, self.rows, norm);
            self.model.params.copy_from_slice(&base);
            l
        };
        let numeric = (at(1.0) - at(-1.0)) / (2.0 * h as f64);
        (analytic, numeric)
    }
}

impl Workload for TrainWorkload {
    fn verify(&mut self) -> Result<Verification> {
        // Reference gradients: one batch, activations stored.
        let loss0 = self.grads(1, false);
        let (analytic, numeric) = self.directional_check();
        let fd_err = (analytic - numeric).abs() / analytic.abs().max(numeric.abs()).max(1e-30);
        if fd_err > 1e-2 {
            return Ok(Verification {
                passed: false,
                reference: "central finite difference of the f64 loss along a gradient-like direction".into(),
                max_error: Some(fd_err),
                detail: format!(
                    "directional derivative: backward {analytic:e}, finite difference {numeric:e}"
                ),
            });
        }
        let one_batch = self.model.grads.clone();
        let mut notes = vec![format!("finite difference within {fd_err:.1e} relative")];
        if self.micro > 1 || self.recompute {
            self.grads(self.micro, self.recompute);
            if self.recompute && self.micro == 1 {
                if one_batch.iter().zip(&self.model.grads).any(|(a, b)| a.to_bits() != b.to_bits()) {
                    bail!("recomputed activations gave different gradients from stored ones");
                }
                notes.push("recomputed gradients bit-identical to stored".into());
            } else {
                let scale = one_batch.iter().fold(0.0f32, |m, &g| m.max(g.abs()));
                let v = Verification::compare(
                    "one-batch gradients",
                    &self.model.grads,
                    &one_batch,
                    1e-4 * scale as f64,
                    1e-3,
                );
                if !v.passed {
                    return Ok(v);
                }
                notes.push(format!(
                    "{} micro-batches match one batch within {:.1e}",
                    self.micro,
                    v.max_error.unwrap_or(0.0)
                ));
            }
        }
        drop(one_batch);
        // Peak activation memory of one forward + backward (after a warm one).
        let (_, peak) = super::peak_during(|| self.grads(self.micro, self.recompute));
        if let Some(peak) = peak {
            let want = self.model.activation_bytes(self.rows / self.micro, self.recompute);
            if peak < want || peak > 2 * want + (2 << 20) {
                bail!(
                    "peak {peak} B during a step; the activations it must hold take {want} B (allowed up to 2x + 2 MiB)"
                );
            }
            self.peak = Some(peak);
            notes.push(format!("peak {peak} B for {want} B of activations"));
        }
        let mut loss = loss0;
        for _ in 0..3 {
            loss = self.step();
        }
        let after = self.grads(self.micro, self.recompute);
        if after >= loss0 || after > loss {
            bail!("loss did not decrease over 4 AdamW steps: {loss0} -> {after}");
        }
        self.last_loss = after;
        Ok(Verification {
            passed: true,
            reference: "finite differences, one-batch gradients, decreasing loss".into(),
            max_error: Some(fd_err),
            detail: notes.join("; "),
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        let flops = 3.0 * self.model.forward_flops(self.rows);
        let items = match self.model.arch {
            Arch::Mlp { .. } => Throughput::items(self.rows as f64),
            Arch::Block { .. } => Throughput::tokens(self.rows as f64),
        };
        vec![Throughput::flops(flops), items]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.last_loss = self.step();
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let mut m = vec![
            Metric::new("params", self.model.params.len() as f64, ""),
            Metric::new("loss", self.last_loss, ""),
            Metric::new(
                "activation_bytes_expected",
                self.model.activation_bytes(self.rows / self.micro, self.recompute) as f64,
                "B",
            ),
        ];
        if let Some(p) = self.peak {
            m.push(Metric::new("peak_bytes", p as f64, "B"));
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ParamValue;

    #[test]
    fn small_cases_of_each_benchmark_verify() {
        let cases: Vec<(&str, Vec<(&str, ParamValue)>)> = vec![
            ("train_step", vec![("model", ParamValue::Str("mlp".into())), ("batch", ParamValue::Int(8))]),
            ("train_step", vec![("model", ParamValue::Str("block".into())), ("batch", ParamValue::Int(1))]),
            (
                "grad_accum",
                vec![
                    ("model", ParamValue::Str("mlp".into())),
                    ("batch", ParamValue::Int(8)),
                    ("micro", ParamValue::Int(4)),
                ],
            ),
            (
                "checkpointing",
                vec![
                    ("model", ParamValue::Str("block".into())),
                    ("batch", ParamValue::Int(1)),
                    ("mode", ParamValue::Str("recompute".into())),
                ],
            ),
        ];
        for (bench, kv) in cases {
            let c = Case::new("optim", bench, kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
            let mut w = prepare(&c, &crate::suites::test_context(&c)).unwrap();
            let v = w.verify().unwrap();
            assert!(v.passed, "{}: {}", c.id, v.detail);
            w.run(1).unwrap();
        }
        let bad = Case::new(
            "optim",
            "grad_accum",
            [("model", "mlp"), ("batch", "6"), ("micro", "4")]
                .into_iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        v.parse::<i64>().map(ParamValue::Int).unwrap_or(ParamValue::Str(v.into())),
                    )
                })
                .collect(),
        );
        assert!(
            prepare(&bad, &crate::suites::test_context(&bad))
                .err()
                .unwrap()
                .to_string()
                .contains("must divide")
        );
    }
}
