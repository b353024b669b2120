//! Decoder generation, llama-bench style: `prefill` (prompt processing into
//! an empty KV cache, time to first token) and `decode` (greedy token
//! generation after the cache already holds `depth` tokens, time per output
//! token recorded step by step).

use crate::model::config::Arch;
use crate::model::generate::{self, PREFILL_CHUNK};
use crate::model::linear::DType;
use crate::model::steps::Steps;
use crate::model::transformer::{KvCache, Model, Workspace, WorkspaceSize};
use crate::model::{reference, weights};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::workload::Metric;
use anyhow::{Result, bail};
use std::time::Instant;

/// What both generation workloads share.
struct Gen {
    model: Model,
    ws: Workspace,
    cache: KvCache,
    batch: usize,
    /// `[batch x prompt]` seeded random prompt.
    prompt: Vec<u32>,
    plan: weights::MemoryPlan,
    peak: Option<usize>,
    full_layers: usize,
    /// Reused buffer for one prefill chunk's ids.
    chunk: Vec<u32>,
    seed: u64,
    /// Reduced precision: errors against the f32 model (case metrics).
    accuracy: Vec<Metric>,
}

fn build(case: &Case, ctx: &crate::backend::cpu::Context, prompt_len: usize, extra: usize) -> Result<Gen> {
    let cfg = super::model_config(case)?;
    if cfg.arch == Arch::Bert {
        bail!("case {}: generation needs a decoder (gpt2*, llama*); `{}` is an encoder", case.id, cfg.name);
    }
    let dtype = super::dtype(case)?;
    let batch = super::positive(case, "batch")?;
    let capacity = prompt_len + extra;
    if capacity > cfg.max_positions {
        bail!("case {}: {capacity} positions exceed the {} of {}", case.id, cfg.max_positions, cfg.name);
    }
    let threads = ctx.threads();
    // Decode verification recomputes prompt + 1 tokens through prefill.
    let tokens = (prompt_len + extra.min(1)).clamp(1, PREFILL_CHUNK);
    let size = WorkspaceSize { batch, tokens, keys: capacity.max(1), threads };
    let plan = crate::model::weights::check_fits(&cfg, dtype, size, capacity)?;
    let full_layers =
        crate::model::config::ModelConfig::preset(&case.str("model")?).map_or(cfg.layers, |c| c.layers);
    let seed = super::seed(case);
    let ((model, ws, cache), peak) = super::measure_peak(|| {
        let model = weights::random_model(&cfg, dtype, seed)?;
        let ws = Workspace::new(&model, size);
        let cache = KvCache::new(&cfg, batch, capacity);
        Ok((model, ws, cache))
    })?;
    let prompt = crate::model::random_ids(batch * prompt_len, cfg.vocab, seed ^ 0x9e37);
    let chunk = Vec::with_capacity(batch * PREFILL_CHUNK);
    Ok(Gen { model, ws, cache, batch, prompt, plan, peak, full_layers, chunk, seed, accuracy: Vec::new() })
}

impl Gen {
    /// Runs `tokens` (`[batch x n]`) through the model in chunks of at most
    /// [`PREFILL_CHUNK`] positions, appending to the cache.
    fn feed(&mut self, tokens: &[u32], n: usize) {
        generate::feed(&self.model, &mut self.ws, &mut self.cache, tokens, self.batch, n, &mut self.chunk);
    }

    /// Greedy next token of every sequence from the last logits.
    fn next_tokens(&self, out: &mut [u32]) {
        generate::greedy(&self.ws, self.model.cfg.vocab, out);
    }

    /// Fast path vs the f64 reference on short sequences: a 3-token prefill
    /// (logits at every position) and one cached decode step.
    fn check_reference(&self) -> Result<Verification> {
        let cfg = &self.model.cfg;
        let (b, p) = (self.batch.min(2), 3);
        let ids = crate::model::random_ids(b * (p + 1), cfg.vocab, 77);
        let prompt: Vec<u32> = (0..b).flat_map(|i| ids[i * (p + 1)..i * (p + 1) + p].to_vec()).collect();
        let step: Vec<u32> = (0..b).map(|i| ids[i * (p + 1) + p]).collect();
        let mut ws =
            Workspace::new(&self.model, WorkspaceSize { batch: b, tokens: p, keys: p + 1, threads: 2 });
        let mut cache = KvCache::new(cfg, b, p + 1);
        let all = self.model.decode(&mut ws, &mut cache, &prompt, p, true).unwrap_or_default();
        self.model.decode(&mut ws, &mut cache, &step, 1, false);
        let v = cfg.vocab;
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for i in 0..b {
            let r = reference::forward(&self.model, &ids[i * (p + 1)..(i + 1) * (p + 1)], None);
            got.extend_from_slice(&all[i * p * v..(i + 1) * p * v]);
            got.extend_from_slice(&ws.logits[i * v..(i + 1) * v]);
            want.extend(r.iter().map(|&x| x as f32));
        }
        let tol = if self.model.dtype == DType::F32 { 1e-3 } else { 2e-3 };
        Ok(Verification::compare(
            format!(
                "f64 token-by-token reference (full recompute, no cache), {b} x ({p} prompt + 1 cached step)"
            ),
            &got,
            &want,
            tol,
            tol,
        ))
    }

    fn check_finite(&self, what: &str) -> Result<()> {
        let n = self.batch * self.model.cfg.vocab;
        if let Some(i) = self.ws.logits[..n].iter().position(|x| !x.is_finite()) {
            bail!("{what}: logit {i} is not finite");
        }
        Ok(())
    }

    fn notes(&mut self) -> Result<Vec<String>> {
        let mut n = vec![super::check_plan(&self.plan, self.peak)?];
        if self.model.cfg.layers != self.full_layers {
            n.push(format!("layers reduced to {} of {}", self.model.cfg.layers, self.full_layers));
        }
        let (m, note) = super::accuracy_vs_f32(&self.model, self.seed, &self.plan)?;
        self.accuracy = m;
        n.extend(note);
        Ok(n)
    }
}

struct Prefill {
    g: Gen,
    n: usize,
    first: Vec<u32>,
    ttft: Steps,
}

/// Builds a `prefill` case: `prompt` tokens into an empty cache.
pub fn prepare_prefill(case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
    let n = super::positive(case, "prompt")?;
    let g = build(case, ctx, n, 0)?;
    let first = vec![0; g.batch];
    Ok(Box::new(Prefill { g, n, first, ttft: Steps::new() }))
}

impl Workload for Prefill {
    fn verify(&mut self) -> Result<Verification> {
        let mut v = self.g.check_reference()?.into_result()?;
        self.g.cache.len = 0;
        let prompt = std::mem::take(&mut self.g.prompt);
        self.g.feed(&prompt, self.n);
        self.g.prompt = prompt;
        self.g.check_finite("prefill")?;
        let mut notes = self.g.notes()?;
        notes.insert(0, format!("{} x {} prompt: logits finite", self.g.batch, self.n));
        v.detail = format!("{}; {}", v.detail, notes.join("; "));
        Ok(v)
    }

    fn throughput(&self) -> Vec<Throughput> {
        let (b, n, cfg) = (self.g.batch, self.n, &self.g.model.cfg);
        let attn = 2.0 * (b * n * n * cfg.hidden * cfg.layers) as f64;
        let head = 2.0 * (b * cfg.vocab * cfg.hidden) as f64;
        vec![
            Throughput::tokens((b * n) as f64),
            Throughput::flops(self.g.model.matrix_flops(b * n) + attn + head),
        ]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            let t = Instant::now();
            self.g.cache.len = 0;
            let prompt = std::mem::take(&mut self.g.prompt);
            self.g.feed(&prompt, self.n);
            self.g.prompt = prompt;
            let mut first = std::mem::take(&mut self.first);
            self.g.next_tokens(&mut first);
            self.first = first;
            self.ttft.push(t.elapsed().as_nanos() as f64);
        }
        std::hint::black_box(&self.first);
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let mut m = super::memory_metrics(&self.g.model, &self.g.plan, self.g.peak, self.g.full_layers);
        m.extend(self.ttft.summary("ttft"));
        m.extend(self.g.accuracy.iter().cloned());
        m
    }
}

struct Decode {
    g: Gen,
    depth: usize,
    new_tokens: usize,
    /// Greedy first token after the prompt (or a seeded token at depth 0).
    first: Vec<u32>,
    cur: Vec<u32>,
    steps: Steps,
    /// Largest logit difference of one cached step vs a full recompute.
    recompute_error: f64,
}

/// Builds a `decode` case: the cache is filled with a `depth`-token prompt
/// here (untimed); each iteration generates `gen` tokens from that depth.
pub fn prepare_decode(case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
    let depth = case.usize("depth")?;
    let new_tokens = super::positive(case, "gen")?;
    let mut g = build(case, ctx, depth, new_tokens)?;
    let mut first = crate::model::random_ids(g.batch, g.model.cfg.vocab, 5);
    if depth > 0 {
        let prompt = std::mem::take(&mut g.prompt);
        g.feed(&prompt, depth);
        g.prompt = prompt;
        g.next_tokens(&mut first);
    }
    let cur = first.clone();
    Ok(Box::new(Decode { g, depth, new_tokens, first, cur, steps: Steps::new(), recompute_error: f64::NAN }))
}

impl Workload for Decode {
    fn verify(&mut self) -> Result<Verification> {
        let mut v = self.g.check_reference()?.into_result()?;
        // One cached step at the case's depth against recomputing the whole
        // sequence (prompt + that token) from an empty cache.
        let (b, vocab, d) = (self.g.batch, self.g.model.cfg.vocab, self.depth);
        self.g.cache.len = d;
        self.g.model.decode(&mut self.g.ws, &mut self.g.cache, &self.first, 1, false);
        self.g.check_finite("decode step")?;
        let cached = self.g.ws.logits[..b * vocab].to_vec();
        let mut seq = Vec::with_capacity(b * (d + 1));
        for i in 0..b {
            seq.extend_from_slice(&self.g.prompt[i * d..(i + 1) * d]);
            seq.push(self.first[i]);
        }
        self.g.cache.len = 0;
        // The recompute goes through prefill chunks, so allow that shape.
        self.g.feed(&seq, d + 1);
        let full = &self.g.ws.logits[..b * vocab];
        let check = Verification::compare("full recompute", &cached, full, 1e-3, 1e-3);
        self.recompute_error = check.max_error.unwrap_or(f64::NAN);
        if !check.passed {
            bail!("a cached decode step at depth {d} differs from a full recompute: {}", check.detail);
        }
        let mut notes = self.g.notes()?;
        notes.insert(
            0,
            format!(
                "cached step at depth {d} vs full recompute of {} tokens: max logit error {:.2e} (tol 1e-3)",
                d + 1,
                self.recompute_error
            ),
        );
        v.detail = format!("{}; {}", v.detail, notes.join("; "));
        Ok(v)
    }

    fn throughput(&self) -> Vec<Throughput> {
        let (b, cfg) = (self.g.batch, &self.g.model.cfg);
        let steps = self.new_tokens as f64;
        // Weights stream once per step whatever the batch; each sequence also
        // reads its K/V cache (average depth over the steps).
        let kv_per_step = cfg.kv_cache_bytes(b, self.depth, 4) as f64
            + cfg.kv_cache_bytes(b, self.new_tokens, 4) as f64 / 2.0;
        let bytes = steps * (self.g.model.decode_weight_bytes() + kv_per_step);
        let avg_keys = self.depth as f64 + self.new_tokens as f64 / 2.0;
        let attn = 4.0 * b as f64 * avg_keys * (cfg.hidden * cfg.layers) as f64;
        let head = 2.0 * (b * cfg.vocab * cfg.hidden) as f64;
        vec![
            Throughput::tokens((b * self.new_tokens) as f64),
            Throughput::bytes(bytes),
            Throughput::flops(steps * (self.g.model.matrix_flops(b) + attn + head)),
        ]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.g.cache.len = self.depth;
            self.cur.copy_from_slice(&self.first);
            for _ in 0..self.new_tokens {
                let t = Instant::now();
                self.g.model.decode(&mut self.g.ws, &mut self.g.cache, &self.cur, 1, false);
                let mut cur = std::mem::take(&mut self.cur);
                self.g.next_tokens(&mut cur);
                self.cur = cur;
                self.steps.push(t.elapsed().as_nanos() as f64);
            }
        }
        std::hint::black_box(&self.cur);
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let mut m = super::memory_metrics(&self.g.model, &self.g.plan, self.g.peak, self.g.full_layers);
        let summary = self.steps.summary("tpot");
        if let Some(p50) = summary.first() {
            m.push(Metric::new("tokens_per_s_at_p50", self.g.batch as f64 * 1e9 / p50.value, "tokens/s"));
        }
        m.extend(summary);
        m.push(Metric::new("decode_vs_recompute_max_error", self.recompute_error, ""));
        m.extend(self.g.accuracy.iter().cloned());
        m
    }
}
