//! `prefill`, `decode` and `decode_graph` on the GPU.
//!
//! - `prefill`: the `batch x prompt` prompt (the CPU case's ids) in one pass
//!   into an empty KV cache, then the LM head on the last position and the
//!   greedy first token; `ttft_*` percentiles from CUDA events.
//! - `decode`: the cache is filled with the `depth`-token prompt in setup;
//!   each iteration resets the position to `depth` and generates `gen`
//!   tokens greedily, entirely on the device (`argmax` feeds the next step
//!   and advances the position), each step launched kernel by kernel.
//! - `decode_graph`: the same, each step one replay of a CUDA Graph
//!   captured in setup (launch overhead is what dominates small-batch
//!   decode: a GPT-2 step is ~150 small kernels).
//!
//! `tpot_*` percentiles are the device time of each step between CUDA
//! events (`timer.rs`). Verification, before timing: a 3-token prompt's
//! last logits at every length and one cached step against the f64
//! reference, the case's own shape against the CPU model (prefill: the
//! prompt's last logits; decode: the first timed step at `depth`, through
//! the very path that is timed, graph or not), the argmax kernel against
//! the host's argmax of the same logits, and the position it advanced.

use super::encoder::plan_metrics;
use super::net::{Capacity, Net};
use super::timer::StepTimer;
use super::{CaseParams, Comparison, Tolerance};
use crate::backend::cuda::Gpu;
use crate::backend::cuda::probe::Limit;
use crate::backend::cuda::workload::GpuOp;
use crate::model::config::Arch;
use crate::model::transformer::{KvCache, Model, Workspace, WorkspaceSize};
use crate::model::{reference, weights};
use crate::workload::{Metric, Throughput, ThroughputKind, Verification};
use anyhow::{Result, bail};
use cudarc::driver::{CudaGraph, sys};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Positions per prefill call when the CPU fills a deep cache (as the CPU
/// suite does), and per GPU call when the setup fills the decode cache.
const CHUNK: usize = 128;

/// What prefill and decode share.
struct Gen {
    net: Net,
    model: Option<Model>,
    batch: usize,
    /// `[batch x prompt]` seeded random prompt (the CPU case's).
    prompt: Vec<u32>,
    plan: super::DevicePlan,
    checks: Vec<(String, Comparison)>,
    /// Weights streamed per decode step, FLOPs of one token's projections,
    /// vocab x hidden (for the throughput counts).
    decode_weight_bytes: f64,
    matrix_flops_per_token: f64,
}

fn build(
    case: &dyn CaseParams,
    gpu: &Arc<Gpu>,
    prompt_len: usize,
    extra: usize,
    rows: usize,
) -> Result<(Gen, Duration)> {
    let cfg = case.config()?;
    if cfg.arch == Arch::Bert {
        bail!("case {}: generation needs a decoder (gpt2*, llama*); `{}` is an encoder", case.id(), cfg.name);
    }
    let dtype = case.dtype()?;
    let dt = super::gemm_dtype(dtype).map_err(crate::workload::skip)?;
    let batch = case.positive("batch")?;
    let capacity = prompt_len + extra;
    if capacity > cfg.max_positions {
        bail!("case {}: {capacity} positions exceed the {} of {}", case.id(), cfg.max_positions, cfg.name);
    }
    // The reference check runs 2 sequences of up to 3 + 1 tokens.
    let cache = capacity.max(4);
    let cap = Capacity { rows: rows.max(batch).max(6), batch: batch.max(2), cache, keys: cache };
    let plan = super::device_plan(&cfg, dt.bytes(), cap.rows, cap.batch, cap.cache);
    let (free, total) = gpu.memory()?;
    if let Some(why) = super::device_refusal(&plan, &format!("cuda:{}", gpu.ordinal), free, total) {
        return Err(crate::workload::skip(format!("{}: {why}", case.id())));
    }
    let threads = crate::backend::cpu::run_threads();
    let host = WorkspaceSize { batch, tokens: (capacity + 1).clamp(1, CHUNK), keys: capacity + 1, threads };
    crate::model::weights::check_fits(&cfg, dtype, host, capacity + 1)?;
    let seed = case.seed();
    let model = weights::random_model(&cfg, dtype, seed)?;
    let prompt = crate::model::random_ids(batch * prompt_len, cfg.vocab, seed ^ 0x9e37);
    let t = Instant::now();
    let (net, _compile) = Net::new(gpu.clone(), &model, dt, cap)?;
    let g = Gen {
        net,
        batch,
        prompt,
        plan,
        checks: Vec::new(),
        decode_weight_bytes: model.decode_weight_bytes(),
        matrix_flops_per_token: model.matrix_flops(1),
        model: Some(model),
    };
    Ok((g, t.elapsed()))
}

fn ints(v: &[u32]) -> Vec<i32> {
    v.iter().map(|&x| x as i32).collect()
}

/// The CPU model's last-position logits after `tokens` (`[batch x n]`) from
/// an empty cache, fed in chunks as the CPU suite feeds a prompt.
fn cpu_last_logits(model: &Model, tokens: &[u32], batch: usize, n: usize) -> Vec<f32> {
    let threads = crate::backend::cpu::current_threads();
    let size = WorkspaceSize { batch, tokens: n.clamp(1, CHUNK), keys: n, threads };
    let mut ws = Workspace::new(model, size);
    let mut cache = KvCache::new(&model.cfg, batch, n);
    let mut start = 0;
    while start < n {
        let len = CHUNK.min(n - start);
        let chunk: Vec<u32> =
            (0..batch).flat_map(|b| tokens[b * n + start..b * n + start + len].to_vec()).collect();
        model.decode(&mut ws, &mut cache, &chunk, len, false);
        start += len;
    }
    ws.logits[..batch * model.cfg.vocab].to_vec()
}

impl Gen {
    /// Runs `tokens` (`[batch x n]`) on the GPU from an empty cache, in
    /// chunks of [`CHUNK`] positions (each a forward with its argmax; the
    /// position advances by itself).
    fn fill(&self, tokens: &[u32], batch: usize, n: usize) -> Result<()> {
        self.net.set_position(0)?;
        let mut start = 0;
        while start < n {
            let len = CHUNK.min(n - start).min(self.net.cap.rows / batch);
            let chunk: Vec<i32> =
                (0..batch).flat_map(|b| ints(&tokens[b * n + start..b * n + start + len])).collect();
            self.net.put_ints(self.net.ids, &chunk)?;
            self.net.decode(self.net.ids, batch, len)?;
            start += len;
        }
        self.net.gpu().sync()
    }

    /// Logits after a 3-token prompt, at lengths 1, 2 and 3, and after one
    /// cached step, of up to 2 sequences, against the f64 reference.
    fn check_reference(&mut self, model: &Model, tol: Tolerance) -> Result<Comparison> {
        let (b, p, v) = (self.batch.min(2), 3, model.cfg.vocab);
        let ids = crate::model::random_ids(b * (p + 1), v, 77);
        let (mut got, mut want) = (Vec::new(), Vec::new());
        let refs: Vec<Vec<f64>> =
            (0..b).map(|i| reference::forward(model, &ids[i * (p + 1)..(i + 1) * (p + 1)], None)).collect();
        for len in 1..=p {
            let prompt: Vec<u32> =
                (0..b).flat_map(|i| ids[i * (p + 1)..i * (p + 1) + len].to_vec()).collect();
            self.fill(&prompt, b, len)?;
            got.push(self.net.logits(b)?);
        }
        let step: Vec<i32> = (0..b).map(|i| ids[i * (p + 1) + p] as i32).collect();
        self.net.put_ints(self.net.ids, &step)?;
        self.net.decode(self.net.ids, b, 1)?;
        got.push(self.net.logits(b)?);
        // got[k] holds position k of each sequence; order both as (k, seq).
        let mut g = Vec::new();
        for (k, lg) in got.iter().enumerate() {
            for i in 0..b {
                g.extend_from_slice(&lg[i * v..(i + 1) * v]);
                want.extend(refs[i][k * v..(k + 1) * v].iter().map(|&x| x as f32));
            }
        }
        tol.check(
            &format!(
                "logits of {b} sequences at prompt lengths 1-3 and one cached step vs the f64 reference"
            ),
            &g,
            &want,
        )
    }

    /// The argmax kernel's tokens against the host's argmax of the same
    /// logits (first index on ties, as both do).
    fn check_argmax(&self, logits: &[f32]) -> Result<()> {
        let v = self.net.cfg.vocab;
        let gpu = self.net.next_tokens(self.batch)?;
        for (b, &t) in gpu.iter().enumerate() {
            let host = crate::model::argmax(&logits[b * v..(b + 1) * v]);
            if t as usize != host {
                bail!(
                    "argmax kernel chose token {t} for sequence {b}, the host's argmax of the same logits {host}"
                );
            }
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<Metric> {
        let mut m = plan_metrics(&self.plan);
        for (name, c) in &self.checks {
            m.push(Metric::new(format!("verify_{name}_max_error"), c.max_error, ""));
            m.push(Metric::new(format!("verify_{name}_cosine"), c.cosine, "ratio"));
        }
        m
    }

    fn verification(&self, what: String, tol: Tolerance) -> Verification {
        let detail = self.checks.iter().map(|(n, c)| c.describe(n)).collect::<Vec<_>>().join("; ");
        Verification {
            passed: true,
            reference: what,
            max_error: self.checks.iter().map(|(_, c)| c.max_error).reduce(f64::max),
            detail: format!(
                "{detail}; tolerance {} of max |ref|, cosine >= {}",
                tol.rel_to_max, tol.min_cosine
            ),
        }
    }
}

struct Prefill {
    g: Gen,
    n: usize,
    prompt_buf: u64,
    timer: RefCell<StepTimer>,
}

/// Builds a `prefill` case: (op, setup time, device bytes).
pub(super) fn prepare_prefill(
    case: &dyn CaseParams,
    gpu: &Arc<Gpu>,
) -> Result<(Box<dyn GpuOp>, Duration, u64)> {
    let n = case.positive("prompt")?;
    let batch = case.positive("batch")?;
    let (mut g, setup) = build(case, gpu, n, 0, batch * n)?;
    let t = Instant::now();
    let prompt_buf = g.net.ints(&ints(&g.prompt))?;
    let timer = RefCell::new(StepTimer::new(gpu, 1)?);
    let mut p = Prefill { g, n, prompt_buf, timer };
    // One pass in setup: cuBLAS chooses its kernels on first use.
    p.pass()?;
    gpu.sync()?;
    let bytes = p.g.net.arena.bytes;
    Ok((Box::new(p), setup + t.elapsed(), bytes))
}

impl Prefill {
    fn pass(&mut self) -> Result<()> {
        self.g.net.reset(self.prompt_buf, 0, 0)?;
        self.g.net.decode(self.prompt_buf, self.g.batch, self.n)
    }
}

impl GpuOp for Prefill {
    /// A prompt's pass is GEMMs over its tokens: the dtype's GEMM peak.
    fn limit(&self) -> Option<(Limit, ThroughputKind)> {
        Some((Limit::Gemm(self.g.net.dt), ThroughputKind::Flops))
    }

    fn launch(&mut self, gpu: &Gpu) -> Result<()> {
        self.g.net.reset(self.prompt_buf, 0, 0)?;
        let mut timer = self.timer.borrow_mut();
        timer.begin(gpu)?;
        self.g.net.decode(self.prompt_buf, self.g.batch, self.n)?;
        timer.mark(gpu)?;
        timer.end();
        Ok(())
    }

    fn verify(&mut self, _gpu: &Gpu) -> Result<Verification> {
        let model = self.g.model.take().ok_or_else(|| anyhow::anyhow!("prefill verified twice"))?;
        let tol = Tolerance::of(self.g.net.dt);
        let r = self.g.check_reference(&model, tol)?;
        self.pass()?;
        let got = self.g.net.logits(self.g.batch)?;
        self.g.check_argmax(&got)?;
        let want = cpu_last_logits(&model, &self.g.prompt, self.g.batch, self.n);
        let f = tol.check(
            &format!("last-position logits of the {} x {} prompt vs the CPU model", self.g.batch, self.n),
            &got,
            &want,
        )?;
        self.g.checks = vec![("reference".into(), r), (format!("cpu_model_{}x{}", self.g.batch, self.n), f)];
        Ok(self.g.verification(
            format!("f64 full-recompute reference (2 x (3 prompt + 1 cached step)) and the CPU model on the same seeded {:?} weights", self.g.net.dt),
            tol,
        ))
    }

    fn throughput(&self) -> Vec<Throughput> {
        let (b, n, cfg) = (self.g.batch, self.n, &self.g.net.cfg);
        let attn = 2.0 * (b * n * n * cfg.hidden * cfg.layers) as f64;
        let head = 2.0 * (b * cfg.vocab * cfg.hidden) as f64;
        vec![
            Throughput::tokens((b * n) as f64),
            Throughput::flops(self.g.matrix_flops_per_token * (b * n) as f64 + attn + head),
        ]
    }

    fn metrics(&self) -> Vec<Metric> {
        let mut m = self.g.metrics();
        let mut timer = self.timer.borrow_mut();
        if timer.finish(self.g.net.gpu()).is_ok() {
            m.extend(timer.steps.summary("ttft"));
        }
        m
    }
}

/// A captured decode step. cudarc's `CudaGraph` is not `Send` (a graph must
/// not be used from two threads at once); a case is prepared, verified and
/// timed by one thread at a time, and the graph never leaves its case.
struct Graph(CudaGraph);

// SAFETY: see `Graph`: the graph is only touched through `&mut Decode` or
// `&Decode` by the single thread that owns the case at that moment.
unsafe impl Send for Graph {}

struct Decode {
    g: Gen,
    depth: usize,
    new_tokens: usize,
    /// The first token of each sequence (device copy in `first_buf`).
    first: Vec<u32>,
    first_buf: u64,
    graph: Option<Graph>,
    timer: RefCell<StepTimer>,
}

/// Builds a `decode` case (`graph`: `decode_graph`, steps replayed from a
/// CUDA Graph): (op, setup time, device bytes).
pub(super) fn prepare_decode(
    case: &dyn CaseParams,
    gpu: &Arc<Gpu>,
    graph: bool,
) -> Result<(Box<dyn GpuOp>, Duration, u64)> {
    let depth = case.count("depth")?;
    let new_tokens = case.positive("gen")?;
    let batch = case.positive("batch")?;
    let (mut g, setup) = build(case, gpu, depth, new_tokens, batch * depth.clamp(3, CHUNK))?;
    let t = Instant::now();
    let mut first = crate::model::random_ids(batch, g.net.cfg.vocab, 5);
    if depth > 0 {
        let prompt = std::mem::take(&mut g.prompt);
        g.fill(&prompt, batch, depth)?;
        g.prompt = prompt;
        first = g.net.next_tokens(batch)?.iter().map(|&x| x as u32).collect();
    }
    let first_buf = g.net.ints(&ints(&first))?;
    let timer = RefCell::new(StepTimer::new(gpu, new_tokens)?);
    let mut d = Decode { g, depth, new_tokens, first, first_buf, graph: None, timer };
    // One eager step in setup (cuBLAS chooses its kernels), then the capture.
    d.g.net.reset(d.first_buf, batch, depth)?;
    d.g.net.decode(d.g.net.next, batch, 1)?;
    gpu.sync()?;
    if graph {
        let s = &gpu.stream;
        s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| gpu.err("begin capture", e))?;
        let captured = d.g.net.decode(d.g.net.next, batch, 1);
        let end = s.end_capture(sys::CUgraphInstantiate_flags(0)).map_err(|e| gpu.err("end capture", e));
        captured?;
        let graph =
            end?.ok_or_else(|| anyhow::anyhow!("stream capture of a decode step recorded nothing"))?;
        graph.upload().map_err(|e| gpu.err("graph upload", e))?;
        d.graph = Some(Graph(graph));
        gpu.sync()?;
    }
    let bytes = d.g.net.arena.bytes;
    Ok((Box::new(d), setup + t.elapsed(), bytes))
}

impl Decode {
    /// One step: a graph replay, or the step's launches.
    fn step(&self) -> Result<()> {
        match &self.graph {
            Some(g) => g.0.launch().map_err(|e| self.g.net.gpu().err("graph launch", e)),
            None => self.g.net.decode(self.g.net.next, self.g.batch, 1),
        }
    }
}

impl GpuOp for Decode {
    /// A token step streams the weights and the cache: the copy bandwidth.
    fn limit(&self) -> Option<(Limit, ThroughputKind)> {
        Some((Limit::DeviceCopy, ThroughputKind::Bytes))
    }

    fn launch(&mut self, gpu: &Gpu) -> Result<()> {
        self.g.net.reset(self.first_buf, self.g.batch, self.depth)?;
        let mut timer = self.timer.borrow_mut();
        timer.begin(gpu)?;
        for _ in 0..self.new_tokens {
            self.step()?;
            timer.mark(gpu)?;
        }
        timer.end();
        Ok(())
    }

    fn verify(&mut self, _gpu: &Gpu) -> Result<Verification> {
        let model = self.g.model.take().ok_or_else(|| anyhow::anyhow!("decode verified twice"))?;
        let tol = Tolerance::of(self.g.net.dt);
        let r = self.g.check_reference(&model, tol)?;
        // The check overwrote the first cache positions: refill them.
        let (b, d) = (self.g.batch, self.depth);
        if d > 0 {
            self.g.fill(&self.g.prompt, b, d)?;
        }
        self.g.net.reset(self.first_buf, b, d)?;
        self.step()?;
        let got = self.g.net.logits(b)?;
        self.g.check_argmax(&got)?;
        let pos = self.g.net.position()?;
        if pos != (d + 1) as i32 {
            bail!("after one step from depth {d} the device position is {pos}, not {}", d + 1);
        }
        let mut seq = Vec::with_capacity(b * (d + 1));
        for i in 0..b {
            seq.extend_from_slice(&self.g.prompt[i * d..(i + 1) * d]);
            seq.push(self.first[i]);
        }
        let want = cpu_last_logits(&model, &seq, b, d + 1);
        let how = if self.graph.is_some() { "graph replay" } else { "kernel launches" };
        let f = tol.check(&format!("one cached step at depth {d} ({how}) vs the CPU model"), &got, &want)?;
        self.g.checks = vec![("reference".into(), r), (format!("cpu_model_step_at_depth_{d}"), f)];
        Ok(self.g.verification(
            format!(
                "f64 full-recompute reference (2 x (3 prompt + 1 cached step)) and the CPU model's step at depth {d} on the same seeded {:?} weights",
                self.g.net.dt
            ),
            tol,
        ))
    }

    fn throughput(&self) -> Vec<Throughput> {
        let (b, cfg) = (self.g.batch, &self.g.net.cfg);
        let el = self.g.net.dt.bytes();
        let steps = self.new_tokens as f64;
        let kv_per_step = cfg.kv_cache_bytes(b, self.depth, el) as f64
            + cfg.kv_cache_bytes(b, self.new_tokens, el) as f64 / 2.0;
        let avg_keys = self.depth as f64 + self.new_tokens as f64 / 2.0;
        let attn = 4.0 * b as f64 * avg_keys * (cfg.hidden * cfg.layers) as f64;
        let head = 2.0 * (b * cfg.vocab * cfg.hidden) as f64;
        vec![
            Throughput::tokens((b * self.new_tokens) as f64),
            Throughput::bytes(steps * (self.g.decode_weight_bytes + kv_per_step)),
            Throughput::flops(steps * (self.g.matrix_flops_per_token * b as f64 + attn + head)),
        ]
    }

    fn metrics(&self) -> Vec<Metric> {
        let mut m = self.g.metrics();
        m.push(Metric::new("cuda_graph", f64::from(self.graph.is_some() as u8), ""));
        let mut timer = self.timer.borrow_mut();
        if timer.finish(self.g.net.gpu()).is_ok() {
            let summary = timer.steps.summary("tpot");
            if let Some(p50) = summary.first() {
                m.push(Metric::new("tokens_per_s_at_p50", self.g.batch as f64 * 1e9 / p50.value, "tokens/s"));
            }
            m.extend(summary);
        }
        m
    }
}
