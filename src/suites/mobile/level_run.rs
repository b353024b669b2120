//! The optimisation levels on the model runtime ([`crate::model`]): what a
//! level stores and runs ([`Spec`]), its memory plan and the budget check
//! made from it before anything is allocated, the timed work (greedy
//! decoding after a KV cache of `depth` tokens, or an encoder forward), and
//! the checks (`level_check.rs`) and accuracy against O0 (`level_accuracy.rs`).

use crate::model::config::{Arch, ModelConfig};
use crate::model::generate::{self, PREFILL_CHUNK};
use crate::model::linear::DType;
use crate::model::lowbit;
use crate::model::steps::Steps;
use crate::model::transformer::{KvCache, Model, Workspace, WorkspaceSize};
use crate::model::weights::{self, MemoryPlan};
use crate::suites::{Metric, Throughput, Verification, skip};
use anyhow::{Result, bail};
use std::time::Instant;

/// What a level stores and runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spec {
    /// `O0`..`O3`.
    pub name: &'static str,
    /// Weight storage (and, for W8A8, the run-time activation quantization).
    pub dtype: DType,
    /// Keys and values stored as int8 with a scale per token and head.
    pub int8_kv: bool,
    /// One line for the verification and the docs.
    pub what: &'static str,
}

/// The level named `level`.
pub fn spec(level: &str) -> Result<Spec> {
    let (name, dtype, int8_kv, what) = match level {
        "O0" => (
            "O0",
            DType::F32,
            false,
            "O0: f32 weights and activations, f32 KV cache, one thread (the reference)",
        ),
        "O1" => ("O1", DType::F32, false, "O1: f32 weights and activations, f32 KV cache, the run's threads"),
        "O2" => (
            "O2",
            DType::W8A8,
            false,
            "O2: int8 dynamic quantization (int8 weights with per-row scales, activations quantized to int8 per row at run time, int8 GEMM), f32 KV cache",
        ),
        "O3" => (
            "O3",
            DType::Q4_0,
            true,
            "O3: 4-bit Q4_0 weights (f32 activations, the exact dequantized product), int8 KV cache (a scale per token and head)",
        ),
        other => bail!("unknown level `{other}`; valid: O0, O1, O2, O3"),
    };
    Ok(Spec { name, dtype, int8_kv, what })
}

/// The timed work: decoding or one encoder forward.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    /// `gen` greedy tokens after a cache of `depth` tokens.
    Decode { depth: usize, gen_tokens: usize },
    /// A forward of `seq` tokens per sequence.
    Encode { seq: usize },
}

/// A memory budget the plan must fit before anything is allocated.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    /// Bytes.
    pub bytes: f64,
    /// Whose (`rpi5's memory budget`, `this machine's available memory`).
    pub whose: String,
}

/// A level's case, resolved.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The level.
    pub spec: Spec,
    /// The model's shape.
    pub cfg: ModelConfig,
    /// Sequences per call.
    pub batch: usize,
    /// Decoding or encoding.
    pub shape: Shape,
    /// Seed of the random weights (the same at every level).
    pub seed: u64,
    /// Worker threads.
    pub threads: usize,
    /// The device profile's budget, if any (the host's is always checked).
    pub budget: Option<Budget>,
}

impl Setup {
    /// The workspace: a prefill chunk (or the encoder's sequence) and the cache.
    pub fn size(&self) -> WorkspaceSize {
        match self.shape {
            Shape::Decode { depth, gen_tokens } => WorkspaceSize {
                batch: self.batch,
                tokens: (depth + 1).clamp(1, PREFILL_CHUNK),
                keys: depth + gen_tokens,
                threads: self.threads,
            },
            Shape::Encode { seq } => {
                WorkspaceSize { batch: self.batch, tokens: seq, keys: seq, threads: self.threads }
            }
        }
    }

    /// KV positions per sequence (0 for an encoder).
    pub fn capacity(&self) -> usize {
        match self.shape {
            Shape::Decode { depth, gen_tokens } => depth + gen_tokens,
            Shape::Encode { .. } => 0,
        }
    }

    /// The memory plan from shapes alone: the runtime's, with the int8
    /// cache's bytes where the level has one.
    pub fn plan(&self) -> MemoryPlan {
        let mut p = weights::plan(&self.cfg, self.spec.dtype, self.size(), self.capacity());
        if self.spec.int8_kv && self.capacity() > 0 {
            p.kv_cache = lowbit::int8_kv_bytes(&self.cfg, self.batch, self.capacity()) as f64;
        }
        p
    }

    /// `O3 (q4_0, int8 KV) of tinyllama-1.1b`.
    pub fn label(&self) -> String {
        let kv = if self.spec.int8_kv { ", int8 KV" } else { "" };
        format!("{} ({}{kv}) of {}", self.spec.name, self.spec.dtype.name(), self.cfg.name)
    }
}

/// MiB, one decimal.
pub fn mib(b: f64) -> String {
    format!("{:.1} MiB", b / 1048576.0)
}

/// The plan's figures, for a refusal or the verification.
pub fn figures(p: &MemoryPlan) -> String {
    format!(
        "model {}, KV cache {}, activations {}, peak {} (with the build's transient f32 copy of one matrix, {})",
        mib(p.weights),
        mib(p.kv_cache),
        mib(p.activations),
        mib(p.total()),
        mib(p.transient)
    )
}

/// Refuses the plan over the profile's budget or the host's available
/// memory (a skip with the figures), else says what it fits.
pub fn check_budget(s: &Setup, p: &MemoryPlan) -> Result<String> {
    let host = crate::model::available_bytes().map(|a| Budget {
        bytes: a * weights::BUDGET_SHARE,
        whose: format!(
            "this machine's available memory ({:.0}% of MemAvailable)",
            weights::BUDGET_SHARE * 100.0
        ),
    });
    let mut fits = Vec::new();
    for b in s.budget.iter().chain(host.as_ref()) {
        if p.total() > b.bytes {
            return Err(skip(format!(
                "{} needs {} planned ({}) but {} is {}: refused before allocating",
                s.label(),
                mib(p.total()),
                figures(p),
                b.whose,
                mib(b.bytes)
            )));
        }
        fits.push(format!("{} ({})", b.whose, mib(b.bytes)));
    }
    Ok(format!("{} fits {}: {}", s.label(), fits.join(" and "), figures(p)))
}

/// The allocator's peak while `f` runs, and `f`'s result.
fn measure_peak<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, Option<usize>)> {
    use crate::alloc;
    let base = alloc::reset_peak();
    let out = f()?;
    Ok((out, alloc::is_installed().then(|| alloc::peak().saturating_sub(base))))
}

/// A cache of `capacity` positions of the level's kind.
pub fn new_cache(s: &Setup, batch: usize, capacity: usize) -> KvCache {
    if s.spec.int8_kv {
        KvCache::new_int8(&s.cfg, batch, capacity)
    } else {
        KvCache::new(&s.cfg, batch, capacity)
    }
}

/// A level, built and ready to time.
pub struct LevelRun {
    /// The case.
    pub s: Setup,
    /// The model at the level's storage.
    pub model: Model,
    /// Buffers.
    pub ws: Workspace,
    /// The KV cache (decoders; empty for encoders).
    pub cache: KvCache,
    /// `[batch x depth]` prompt, or `[batch x seq]` encoder input.
    pub prompt: Vec<u32>,
    /// Greedy token after the prompt, per sequence.
    pub first: Vec<u32>,
    cur: Vec<u32>,
    chunk: Vec<u32>,
    mask: Vec<u8>,
    /// Per-token (decode) or per-forward (encode) times.
    pub steps: Steps,
    /// Planned bytes.
    pub plan: MemoryPlan,
    /// The allocator's peak while building.
    pub peak: Option<usize>,
    /// What the plan fits (the verification names it).
    pub fits: String,
    /// Accuracy against O0, filled by the verification.
    pub accuracy: Vec<Metric>,
}

impl LevelRun {
    /// Checks the plan against the budgets, then builds the model and its
    /// buffers and (decoders) fills the cache with the prompt.
    pub fn build(s: Setup) -> Result<Self> {
        if let Shape::Decode { depth, gen_tokens } = s.shape {
            if s.cfg.arch == Arch::Bert {
                bail!("{} is an encoder: it runs with `encoder`, not depth/gen", s.cfg.name);
            }
            if depth + gen_tokens > s.cfg.max_positions || gen_tokens == 0 {
                bail!(
                    "{}: depth {depth} + gen {gen_tokens} must be 1..={} positions",
                    s.cfg.name,
                    s.cfg.max_positions
                );
            }
        } else if s.cfg.arch != Arch::Bert {
            bail!("{} is a decoder: it runs with `model`, depth and gen", s.cfg.name);
        }
        let plan = s.plan();
        let fits = check_budget(&s, &plan)?;
        let size = s.size();
        let ((model, ws, cache), peak) = measure_peak(|| {
            let model = weights::random_model(&s.cfg, s.spec.dtype, s.seed)?;
            let ws = Workspace::new(&model, size);
            let cache = new_cache(&s, s.batch, s.capacity());
            Ok((model, ws, cache))
        })?;
        let (n, vocab) = match s.shape {
            Shape::Decode { depth, .. } => (depth, s.cfg.vocab),
            Shape::Encode { seq } => (seq, s.cfg.vocab),
        };
        let prompt = crate::model::random_ids(s.batch * n, vocab, s.seed ^ 0x9e37);
        let mut r = Self {
            first: crate::model::random_ids(s.batch, vocab, 5),
            cur: vec![0; s.batch],
            chunk: Vec::with_capacity(s.batch * PREFILL_CHUNK),
            mask: vec![1; s.batch * n],
            s,
            model,
            ws,
            cache,
            prompt,
            steps: Steps::new(),
            plan,
            peak,
            fits,
            accuracy: Vec::new(),
        };
        if let Shape::Decode { depth, .. } = r.s.shape
            && depth > 0
        {
            r.fill(depth);
            let mut first = std::mem::take(&mut r.first);
            generate::greedy(&r.ws, vocab, &mut first);
            r.first = first;
        }
        Ok(r)
    }

    /// Empties the cache and feeds it the first `n` prompt tokens per sequence.
    pub fn fill(&mut self, n: usize) {
        let (b, d) = (self.s.batch, self.prompt.len() / self.s.batch.max(1));
        let ids: Vec<u32> = (0..b).flat_map(|i| self.prompt[i * d..i * d + n].to_vec()).collect();
        self.cache.len = 0;
        generate::feed(&self.model, &mut self.ws, &mut self.cache, &ids, b, n, &mut self.chunk);
    }

    /// One timed iteration: `gen` tokens from the prompt's cache, or one forward.
    pub fn once(&mut self) {
        match self.s.shape {
            Shape::Decode { depth, gen_tokens } => {
                self.cache.len = depth;
                self.cur.copy_from_slice(&self.first);
                for _ in 0..gen_tokens {
                    let t = Instant::now();
                    self.model.decode(&mut self.ws, &mut self.cache, &self.cur, 1, false);
                    generate::greedy(&self.ws, self.s.cfg.vocab, &mut self.cur);
                    self.steps.push(t.elapsed().as_nanos() as f64);
                }
                std::hint::black_box(&self.cur);
            }
            Shape::Encode { seq } => {
                let t = Instant::now();
                self.model.encode(&mut self.ws, &self.prompt, &self.mask, self.s.batch, seq);
                self.steps.push(t.elapsed().as_nanos() as f64);
                std::hint::black_box(&self.ws.pooled);
            }
        }
    }

    /// Tokens per iteration.
    pub fn throughput(&self) -> Vec<Throughput> {
        let n = match self.s.shape {
            Shape::Decode { gen_tokens, .. } => gen_tokens,
            Shape::Encode { seq } => seq,
        };
        vec![Throughput::tokens((self.s.batch * n) as f64)]
    }

    /// Latency percentiles, memory and accuracy.
    pub fn metrics(&self) -> Vec<Metric> {
        let p = &self.plan;
        let mut m = vec![
            Metric::new("params", self.model.stored_params() as f64, ""),
            Metric::new("model_bytes", self.model.weight_bytes(), "B"),
            Metric::new("kv_cache_bytes", self.cache.bytes() as f64, "B"),
            Metric::new("planned_kv_cache_bytes", p.kv_cache, "B"),
            Metric::new("activation_bytes", p.activations, "B"),
            Metric::new("planned_bytes", p.total(), "B"),
            Metric::new("level_threads", self.s.threads as f64, ""),
        ];
        if let Some(peak) = self.peak {
            m.push(Metric::new("alloc_peak_bytes", peak as f64, "B"));
        }
        if let Some(b) = &self.s.budget {
            m.push(Metric::new("budget_bytes", b.bytes, "B"));
        }
        let (prefix, per) = match self.s.shape {
            Shape::Decode { .. } => ("tpot", self.s.batch as f64),
            Shape::Encode { seq } => ("forward", (self.s.batch * seq) as f64),
        };
        let summary = self.steps.summary(prefix);
        if let Some(p50) = summary.first() {
            m.push(Metric::new("tokens_per_s_at_p50", per * 1e9 / p50.value, "tokens/s"));
        }
        m.extend(summary);
        m.extend(self.accuracy.iter().cloned());
        m
    }

    /// Every check (`level_check.rs`) and the accuracy against O0.
    pub fn verify(&mut self) -> Result<Verification> {
        let checks = super::level_check::run(self)?;
        let (acc, note) = super::level_accuracy::against_o0(self)?;
        self.accuracy = acc;
        let mut v = checks;
        v.reference = format!("{}; {}", self.s.spec.what, v.reference);
        v.detail = format!("{}; {}; {note}", v.detail, self.fits);
        if self.s.spec.int8_kv && matches!(self.s.shape, Shape::Encode { .. }) {
            v.detail.push_str("; an encoder has no KV cache: O3 is its 4-bit weights alone");
        }
        Ok(v)
    }
}
