//! `encoder` on the GPU: the BERT forward of `batch x seq` seeded random
//! tokens (the CPU case's ids), verified against the f64 reference on two
//! short sequences (one padded, through the key mask) and against the CPU
//! model's output for the first sequence of the full shape.

use super::net::{Capacity, Net};
use super::{CaseParams, Comparison, Tolerance};
use crate::backend::cuda::Gpu;
use crate::backend::cuda::probe::Limit;
use crate::backend::cuda::workload::GpuOp;
use crate::model::transformer::{Model, Workspace, WorkspaceSize};
use crate::model::{reference, weights};
use crate::workload::{Metric, Throughput, ThroughputKind, Verification};
use anyhow::{Result, bail};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Encoder {
    net: Net,
    /// The CPU model, kept until verification is done.
    model: Option<Model>,
    ids: Vec<i32>,
    batch: usize,
    seq: usize,
    flops: f64,
    plan: super::DevicePlan,
    checks: Vec<(String, Comparison)>,
}

/// Builds an `encoder` case on `gpu`: (op, setup time, device bytes).
pub(super) fn prepare(case: &dyn CaseParams, gpu: &Arc<Gpu>) -> Result<(Box<dyn GpuOp>, Duration, u64)> {
    let cfg = case.config()?;
    case.encoder_only(&cfg)?;
    let dtype = case.dtype()?;
    let dt = super::gemm_dtype(dtype).map_err(crate::workload::skip)?;
    let batch = case.positive("batch")?;
    let seq = case.positive("seq")?;
    if seq > cfg.max_positions {
        bail!("case {}: seq {seq} exceeds the {} positions of {}", case.id(), cfg.max_positions, cfg.name);
    }
    // The check's two sequences of up to 6 tokens must fit too.
    let check_len = 6.min(cfg.max_positions);
    let cap = Capacity {
        rows: (batch * seq).max(2 * check_len),
        batch: batch.max(2),
        cache: 0,
        keys: seq.max(check_len),
    };
    let plan = super::device_plan(&cfg, dt.bytes(), cap.rows, cap.batch, 0);
    let (free, total) = gpu.memory()?;
    if let Some(why) = super::device_refusal(&plan, &format!("cuda:{}", gpu.ordinal), free, total) {
        return Err(crate::workload::skip(format!("{}: {why}", case.id())));
    }
    // The host holds the CPU model too (the weights' source and reference).
    let threads = crate::backend::cpu::run_threads();
    let host = WorkspaceSize { batch: 2, tokens: seq.max(check_len), keys: seq.max(check_len), threads };
    crate::model::weights::check_fits(&cfg, dtype, host, 0)?;
    let seed = case.seed();
    let model = weights::random_model(&cfg, dtype, seed)?;
    let ids: Vec<i32> =
        crate::model::random_ids(batch * seq, cfg.vocab, seed ^ 0x1d5).iter().map(|&x| x as i32).collect();
    let t = Instant::now();
    let (net, _compile) = Net::new(gpu.clone(), &model, dt, cap)?;
    net.put_ints(net.ids, &ids)?;
    // One forward in setup: cuBLAS chooses its kernels on first use.
    net.encode(batch, seq, false)?;
    gpu.sync()?;
    let setup = t.elapsed();
    let tokens = batch * seq;
    let attn = 4.0 * (batch * seq * seq * cfg.hidden * cfg.layers) as f64;
    let flops = model.matrix_flops(tokens) + attn;
    let bytes = net.arena.bytes;
    let op = Encoder { net, model: Some(model), ids, batch, seq, flops, plan, checks: Vec::new() };
    Ok((Box::new(op), setup, bytes))
}

impl Encoder {
    /// Two sequences of up to 6 tokens, the second with its last two keys
    /// masked, against the f64 token-by-token reference.
    fn check_reference(&mut self, model: &Model, tol: Tolerance) -> Result<Comparison> {
        let cfg = &model.cfg;
        let (b, s, h) = (2, 6.min(cfg.max_positions), cfg.hidden);
        let ids = crate::model::random_ids(b * s, cfg.vocab, 99);
        let mut mask = vec![1u8; b * s];
        mask[2 * s - 2..].fill(0);
        self.net.put_ints(self.net.ids, &ids.iter().map(|&x| x as i32).collect::<Vec<_>>())?;
        self.net.put_ints(self.net.mask, &mask.iter().map(|&x| x as i32).collect::<Vec<_>>())?;
        self.net.encode(b, s, true)?;
        let got = self.net.hidden(b * s)?;
        let mut want = Vec::with_capacity(b * s * h);
        for i in 0..b {
            let r = reference::forward(model, &ids[i * s..(i + 1) * s], Some(&mask[i * s..(i + 1) * s]));
            want.extend(r.iter().map(|&v| v as f32));
        }
        tol.check("hidden states of 2 sequences (one padded) vs the f64 reference", &got, &want)
    }

    /// The case's own shape: every output finite, the first sequence's
    /// hidden states and pooled output against the CPU model's.
    fn check_full(&mut self, model: &Model, tol: Tolerance) -> Result<Comparison> {
        let (h, seq) = (model.cfg.hidden, self.seq);
        self.net.put_ints(self.net.ids, &self.ids)?;
        self.net.encode(self.batch, seq, false)?;
        let all = self.net.hidden(self.batch * seq)?;
        let pooled = self.net.pooled(self.batch)?;
        if let Some(i) = all.iter().chain(&pooled).position(|x| !x.is_finite()) {
            bail!("output value {i} of the {}x{seq} forward is not finite", self.batch);
        }
        let threads = crate::backend::cpu::current_threads();
        let mut ws = Workspace::new(model, WorkspaceSize { batch: 1, tokens: seq, keys: seq, threads });
        let ids: Vec<u32> = self.ids[..seq].iter().map(|&x| x as u32).collect();
        model.encode(&mut ws, &ids, &vec![1; seq], 1, seq);
        let mut want = ws.hidden(seq, h).to_vec();
        want.extend_from_slice(&ws.pooled[..h]);
        let mut got = all[..seq * h].to_vec();
        got.extend_from_slice(&pooled[..h]);
        tol.check("first sequence's hidden states and pooled output vs the CPU model", &got, &want)
    }
}

impl GpuOp for Encoder {
    /// A forward pass is GEMMs: measured against the dtype's probed GEMM
    /// peak (its roofline class says whether it gets near it).
    fn limit(&self) -> Option<(Limit, ThroughputKind)> {
        Some((Limit::Gemm(self.net.dt), ThroughputKind::Flops))
    }

    fn launch(&mut self, _gpu: &Gpu) -> Result<()> {
        self.net.encode(self.batch, self.seq, false)
    }

    fn verify(&mut self, _gpu: &Gpu) -> Result<Verification> {
        let model = self.model.take().ok_or_else(|| anyhow::anyhow!("encoder verified twice"))?;
        let tol = Tolerance::of(self.net.dt);
        let r = self.check_reference(&model, tol)?;
        let f = self.check_full(&model, tol)?;
        let detail = format!(
            "{}; {}; tolerance {} of max |ref|, cosine >= {}",
            r.describe("f64 reference, 2 x 6 tokens"),
            f.describe(&format!("CPU model, sequence 0 of {}x{}", self.batch, self.seq)),
            tol.rel_to_max,
            tol.min_cosine
        );
        self.checks = vec![("reference".into(), r), ("cpu_model".into(), f)];
        Ok(Verification {
            passed: true,
            reference: format!(
                "f64 token-by-token reference (2 sequences, one padded) and the CPU model on the same seeded {:?} weights",
                self.net.dt
            ),
            max_error: Some(r.max_error.max(f.max_error)),
            detail,
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        vec![
            Throughput::items(self.batch as f64),
            Throughput::tokens((self.batch * self.seq) as f64),
            Throughput::flops(self.flops),
        ]
    }

    fn metrics(&self) -> Vec<Metric> {
        let mut m = plan_metrics(&self.plan);
        for (name, c) in &self.checks {
            m.push(Metric::new(format!("verify_{name}_max_error"), c.max_error, ""));
            m.push(Metric::new(format!("verify_{name}_cosine"), c.cosine, "ratio"));
        }
        m
    }
}

/// The device plan as metrics.
pub(super) fn plan_metrics(p: &super::DevicePlan) -> Vec<Metric> {
    vec![
        Metric::new("weight_bytes", p.weights, "B"),
        Metric::new("kv_cache_bytes", p.kv_cache, "B"),
        Metric::new("activation_bytes", p.activations, "B"),
        Metric::new("planned_device_bytes", p.total(), "B"),
    ]
}
