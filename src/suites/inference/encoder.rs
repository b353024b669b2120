//! Encoder forward (`encoder`: seeded random BERT weights; `embed`: real
//! MiniLM-L6 weights from a safetensors file, checked against sentence
//! embeddings computed independently with numpy).

use crate::model::linear::DType;
use crate::model::transformer::{Model, Workspace, WorkspaceSize};
use crate::model::{reference, weights};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::workload::Metric;
use anyhow::{Context, Result, bail};

/// The committed reference embeddings (see `scripts/minilm_reference.py`).
const FIXTURE: &str = include_str!("../../../tests/fixtures/minilm_embeddings.json");

struct Encoder {
    model: Model,
    ws: Workspace,
    ids: Vec<u32>,
    mask: Vec<u8>,
    batch: usize,
    seq: usize,
    plan: weights::MemoryPlan,
    peak: Option<usize>,
    full_layers: usize,
    real: bool,
    fixture_error: Option<(f64, f64)>,
    seed: u64,
    /// Reduced precision: errors against the f32 model (case metrics).
    accuracy: Vec<Metric>,
}

/// Builds an `encoder` (random weights) or `embed` (weights from a file) case.
pub fn prepare(case: &Case, ctx: &crate::backend::cpu::Context, real: bool) -> Result<Box<dyn Workload>> {
    let dtype = super::dtype(case)?;
    let batch = super::positive(case, "batch")?;
    let seq = super::positive(case, "seq")?;
    let (cfg, file) = if real {
        let param = case.str("weights")?;
        let file = weights::weights_path(&param)
            .map_err(|why| crate::suites::skip(format!("weights = \"{param}\": {why}")))?;
        let mut cfg = weights::bert_config(&file)?;
        super::apply_layers(&mut cfg, case)?;
        (cfg, Some(file))
    } else {
        (super::model_config(case)?, None)
    };
    super::bert_only(case, &cfg)?;
    if seq > cfg.max_positions {
        bail!("case {}: seq {seq} exceeds the {} positions of {}", case.id, cfg.max_positions, cfg.name);
    }
    let full_layers = match (&file, case.str("model")) {
        (Some(f), _) => weights::bert_config(f)?.layers,
        (None, Ok(m)) => crate::model::config::ModelConfig::preset(&m).map_or(cfg.layers, |c| c.layers),
        _ => cfg.layers,
    };
    let threads = ctx.threads();
    let size = WorkspaceSize { batch, tokens: seq, keys: seq, threads };
    let plan = crate::model::weights::check_fits(&cfg, dtype, size, 0)?;
    let seed = super::seed(case);
    let ((model, ws), peak) = super::measure_peak(|| {
        let model = match &file {
            Some(f) => weights::load_bert(f, dtype)?,
            None => weights::random_model(&cfg, dtype, seed)?,
        };
        let ws = Workspace::new(&model, size);
        Ok((model, ws))
    })?;
    // A file is read whole before its tensors are copied out: the plan
    // covers what stays, so the peak check applies to random weights only.
    let peak = if real { None } else { peak };
    let ids = crate::model::random_ids(batch * seq, cfg.vocab, seed ^ 0x1d5);
    Ok(Box::new(Encoder {
        model,
        ws,
        ids,
        mask: vec![1; batch * seq],
        batch,
        seq,
        plan,
        peak,
        full_layers,
        real,
        fixture_error: None,
        seed,
        accuracy: Vec::new(),
    }))
}

impl Encoder {
    /// Fast path vs the f64 reference on two short sequences, the second
    /// padded (so the padding mask is exercised).
    fn check_reference(&self) -> Result<Verification> {
        let cfg = &self.model.cfg;
        let (b, s, h) = (2, 6.min(cfg.max_positions), cfg.hidden);
        let ids = crate::model::random_ids(b * s, cfg.vocab, 99);
        let mut mask = vec![1u8; b * s];
        mask[2 * s - 2..].fill(0);
        let mut ws = Workspace::new(&self.model, WorkspaceSize { batch: b, tokens: s, keys: s, threads: 2 });
        self.model.encode(&mut ws, &ids, &mask, b, s);
        let got = ws.hidden(b * s, h).to_vec();
        let mut want = Vec::with_capacity(b * s * h);
        for i in 0..b {
            let r =
                reference::forward(&self.model, &ids[i * s..(i + 1) * s], Some(&mask[i * s..(i + 1) * s]));
            want.extend(r.iter().map(|&v| v as f32));
        }
        let tol = if self.model.dtype == DType::F32 { 1e-3 } else { 2e-3 };
        Ok(Verification::compare(
            format!("f64 token-by-token reference, 2 sequences of {s} (one padded), {} layers", cfg.layers),
            &got,
            &want,
            tol,
            tol,
        ))
    }

    /// Real weights: mean-pooled embeddings of the fixture's sentences
    /// against the numpy reference. Returns (max abs error, min cosine).
    fn check_fixture(&self) -> Result<(f64, f64)> {
        let v: serde_json::Value = serde_json::from_str(FIXTURE).context("fixture is not JSON")?;
        let rows = |k: &str| -> Result<Vec<Vec<f64>>> {
            v[k].as_array()
                .with_context(|| format!("fixture lacks `{k}`"))?
                .iter()
                .map(|r| {
                    r.as_array().map(|r| r.iter().filter_map(|x| x.as_f64()).collect()).context("bad row")
                })
                .collect()
        };
        let (ids, mask, pooled) = (rows("ids")?, rows("attention_mask")?, rows("mean_pooled")?);
        let (b, s, h) = (ids.len(), ids[0].len(), self.model.cfg.hidden);
        if pooled[0].len() != h {
            bail!("fixture embeddings have {} dims, the model {h}", pooled[0].len());
        }
        let flat_ids: Vec<u32> = ids.iter().flatten().map(|&x| x as u32).collect();
        let flat_mask: Vec<u8> = mask.iter().flatten().map(|&x| x as u8).collect();
        let mut ws = Workspace::new(&self.model, WorkspaceSize { batch: b, tokens: s, keys: s, threads: 2 });
        self.model.encode(&mut ws, &flat_ids, &flat_mask, b, s);
        let hidden = ws.hidden(b * s, h);
        let (mut max_err, mut min_cos) = (0.0f64, 1.0f64);
        for i in 0..b {
            let n: f64 = mask[i].iter().sum();
            let mean: Vec<f64> = (0..h)
                .map(|d| (0..s).map(|t| hidden[(i * s + t) * h + d] as f64 * mask[i][t]).sum::<f64>() / n)
                .collect();
            let dot: f64 = mean.iter().zip(&pooled[i]).map(|(a, b)| a * b).sum();
            let na = mean.iter().map(|a| a * a).sum::<f64>().sqrt();
            let nb = pooled[i].iter().map(|a| a * a).sum::<f64>().sqrt();
            min_cos = min_cos.min(dot / (na * nb));
            for (a, b) in mean.iter().zip(&pooled[i]) {
                max_err = max_err.max((a - b).abs());
            }
        }
        Ok((max_err, min_cos))
    }
}

impl Workload for Encoder {
    fn verify(&mut self) -> Result<Verification> {
        let mut v = self.check_reference()?.into_result()?;
        let (rows, h) = (self.batch * self.seq, self.model.cfg.hidden);
        self.model.encode(&mut self.ws, &self.ids, &self.mask, self.batch, self.seq);
        let out = self.ws.hidden(rows, h);
        if let Some(i) = out.iter().chain(&self.ws.pooled).position(|x| !x.is_finite()) {
            bail!("output value {i} of the {}x{} forward is not finite", self.batch, self.seq);
        }
        let mut notes =
            vec![format!("{} rows x {h} finite", rows), super::check_plan(&self.plan, self.peak)?];
        if self.real {
            let (err, cos) = self.check_fixture()?;
            // f32 kernels against a float64 numpy forward: 1e-4 absolute on
            // values of order 0.1 (bf16/f16 storage loosens it).
            let tol = if self.model.dtype == DType::F32 { 1e-4 } else { 2e-2 };
            if err > tol || cos < 0.999 {
                bail!(
                    "MiniLM embeddings differ from the numpy reference: max abs error {err:.2e} (tolerance {tol:.0e}), min cosine {cos:.6}"
                );
            }
            self.fixture_error = Some((err, cos));
            v.reference.push_str("; MiniLM-L6 sentence embeddings vs numpy float64 fixture (tests/fixtures/minilm_embeddings.json)");
            notes.push(format!("fixture max abs error {err:.2e}, min cosine {cos:.7}"));
        }
        if self.model.cfg.layers != self.full_layers {
            notes.push(format!("layers reduced to {} of {}", self.model.cfg.layers, self.full_layers));
        }
        if !self.real {
            let (m, note) = super::accuracy_vs_f32(&self.model, self.seed, &self.plan)?;
            self.accuracy = m;
            notes.extend(note);
        }
        v.detail = format!("{}; {}", v.detail, notes.join("; "));
        Ok(v)
    }

    fn throughput(&self) -> Vec<Throughput> {
        let cfg = &self.model.cfg;
        let tokens = self.batch * self.seq;
        // QK^T and PV: 2 GEMMs of seq x seq x hidden per sequence and layer.
        let attn = 4.0 * (self.batch * self.seq * self.seq * cfg.hidden * cfg.layers) as f64;
        vec![
            Throughput::items(self.batch as f64),
            Throughput::tokens(tokens as f64),
            Throughput::flops(self.model.matrix_flops(tokens) + attn),
        ]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.model.encode(&mut self.ws, &self.ids, &self.mask, self.batch, self.seq);
            std::hint::black_box(&self.ws.pooled);
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let mut m = super::memory_metrics(&self.model, &self.plan, self.peak, self.full_layers);
        if let Some((err, cos)) = self.fixture_error {
            m.push(Metric::new("fixture_max_abs_error", err, ""));
            m.push(Metric::new("fixture_min_cosine", cos, "ratio"));
        }
        m.extend(self.accuracy.iter().cloned());
        m
    }
}
