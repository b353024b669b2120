//! The in-process server under test: a decoder of the model runtime behind a
//! continuous-batching engine. Requests wait in a queue; between decode
//! steps the engine admits the oldest while a batch slot is free and the
//! KV-cache budget holds its whole cache (prompt + output, reserved at
//! admission, so a request admitted never fails for memory: one that does
//! not fit waits instead), prefills it alone (its first token), and then it
//! decodes with the running batch, one token per step
//! ([`Model::decode_ragged`]), until its output length. Greedy sampling,
//! end-of-sequence ignored (every request costs its length).
//!
//! The engine runs in a thread of its own, inside a pool of the threads it
//! was given; [`self_check`] holds its tokens to the model runtime's
//! one-request greedy generation.

use super::{Event, Request, Target};
use crate::model::generate::{self, PREFILL_CHUNK};
use crate::model::transformer::{KvCache, KvStorage, Model, Workspace, WorkspaceSize};
use anyhow::Result;
use serde_json::json;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::Instant;

/// How the engine is sized.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Sequences decoded together at most (batch slots).
    pub max_batch: usize,
    /// Bytes of KV cache the running requests may hold in all.
    pub kv_budget: u64,
    /// Worker threads of the model's products.
    pub threads: usize,
    /// Positions (prompt + output) the workspaces (and a file model's
    /// rotary tables) are sized for: a request needing more is refused.
    pub max_positions: usize,
    /// How each request's KV cache stores keys and values (f32, or int8
    /// with one scale per token and head: `--kv-cache`); the budget counts
    /// what that storage allocates.
    pub kv: KvStorage,
}

/// Trace entries kept per run at most.
const MAX_TRACE: usize = 1 << 20;

enum Msg {
    Job(Request, Sender<Event>),
    EndRun(Sender<serde_json::Value>, Instant),
}

/// A handle on the engine's thread; dropping it stops the engine.
pub struct Engine {
    tx: Option<Sender<Msg>>,
    handle: Option<JoinHandle<()>>,
}

impl Engine {
    /// Starts the engine on `model`.
    pub fn start(model: Arc<Model>, cfg: EngineConfig) -> Result<Self> {
        let ctx = crate::backend::cpu::Context::new(crate::backend::cpu::Threads::Exactly(cfg.threads))?;
        let (tx, rx) = channel();
        let handle = std::thread::Builder::new()
            .name("tfbench-engine".into())
            .spawn(move || ctx.install(|| State::new(&model, cfg).serve(&model, rx)))?;
        Ok(Self { tx: Some(tx), handle: Some(handle) })
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Target for Engine {
    fn submit(&mut self, req: Request, events: &Sender<Event>) {
        let Some(tx) = &self.tx else { return };
        if let Err(e) = tx.send(Msg::Job(req, events.clone()))
            && let Msg::Job(req, events) = e.0
        {
            let reason = "engine stopped".to_string();
            let _ = events.send(Event::Failed { id: req.id, at: Instant::now(), reason });
        }
    }

    fn end_run(&mut self, t0: Instant) -> serde_json::Value {
        let (reply, answer) = channel();
        match &self.tx {
            Some(tx) if tx.send(Msg::EndRun(reply, t0)).is_ok() => {
                answer.recv().unwrap_or(serde_json::Value::Null)
            }
            _ => serde_json::Value::Null,
        }
    }
}

/// One running request.
struct Seq {
    req: Request,
    events: Sender<Event>,
    cache: KvCache,
    kv: u64,
    last: u32,
    produced: usize,
}

/// What a run's engine did (reset at every run's end).
struct RunStats {
    /// `(time, KV bytes reserved, running, waiting)` at every change.
    trace: Vec<(Instant, u64, usize, usize)>,
    steps: u64,
    batch_sum: u64,
    prefills: u64,
    waited_for_memory: u64,
    refused: u64,
    peak: u64,
    prefill_s: f64,
    decode_s: f64,
}

impl RunStats {
    fn new() -> Self {
        Self {
            trace: Vec::new(),
            steps: 0,
            batch_sum: 0,
            prefills: 0,
            waited_for_memory: 0,
            refused: 0,
            peak: 0,
            prefill_s: 0.0,
            decode_s: 0.0,
        }
    }
}

struct State {
    cfg: EngineConfig,
    pre_ws: Workspace,
    dec_ws: Workspace,
    chunk: Vec<u32>,
    waiting: VecDeque<(Request, Sender<Event>, bool)>,
    active: Vec<Seq>,
    kv_used: u64,
    stats: RunStats,
}

fn fail(req: &Request, events: &Sender<Event>, reason: String) {
    let _ = events.send(Event::Failed { id: req.id, at: Instant::now(), reason });
}

impl State {
    fn new(model: &Model, cfg: EngineConfig) -> Self {
        let threads = crate::backend::cpu::current_threads();
        let keys = cfg.max_positions.max(2);
        let pre = WorkspaceSize { batch: 1, tokens: PREFILL_CHUNK.min(keys), keys, threads };
        let dec = WorkspaceSize { batch: cfg.max_batch.max(1), tokens: 1, keys, threads };
        Self {
            pre_ws: Workspace::new(model, pre),
            dec_ws: Workspace::new(model, dec),
            chunk: Vec::with_capacity(PREFILL_CHUNK),
            waiting: VecDeque::new(),
            active: Vec::new(),
            kv_used: 0,
            stats: RunStats::new(),
            cfg,
        }
    }

    fn serve(mut self, model: &Model, rx: Receiver<Msg>) {
        loop {
            if self.waiting.is_empty() && self.active.is_empty() {
                match rx.recv() {
                    Ok(m) => self.handle(model, m),
                    Err(_) => return,
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(m) => self.handle(model, m),
                    Err(std::sync::mpsc::TryRecvError::Empty) => break,
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
                }
            }
            self.admit(model);
            if !self.active.is_empty() {
                self.step(model);
            }
        }
    }

    fn kv_bytes(kv: KvStorage, model: &Model, positions: usize) -> u64 {
        kv.bytes(&model.cfg, 1, positions)
    }

    fn handle(&mut self, model: &Model, m: Msg) {
        match m {
            Msg::Job(req, events) => {
                let need = req.ids.len() + req.max_tokens;
                let bytes = Self::kv_bytes(self.cfg.kv, model, need);
                if req.ids.is_empty() || req.max_tokens == 0 {
                    fail(&req, &events, "refused: empty prompt or no output asked".into());
                } else if need > self.cfg.max_positions.min(model.cfg.max_positions) {
                    let max = self.cfg.max_positions.min(model.cfg.max_positions);
                    fail(&req, &events, format!("refused: needs {need} positions, the model holds {max}"));
                } else if bytes > self.cfg.kv_budget {
                    self.stats.refused += 1;
                    let budget = self.cfg.kv_budget;
                    fail(
                        &req,
                        &events,
                        format!("refused: its KV cache of {bytes} B exceeds the budget of {budget} B"),
                    );
                } else {
                    self.waiting.push_back((req, events, false));
                    self.trace();
                }
            }
            Msg::EndRun(reply, t0) => {
                for (req, events, _) in self.waiting.drain(..) {
                    fail(&req, &events, "cancelled: the run ended".into());
                }
                for s in self.active.drain(..) {
                    fail(&s.req, &s.events, "cancelled: the run ended".into());
                }
                self.kv_used = 0;
                let _ = reply.send(self.report(t0));
                self.stats = RunStats::new();
            }
        }
    }

    fn trace(&mut self) {
        let e = (Instant::now(), self.kv_used, self.active.len(), self.waiting.len());
        self.stats.peak = self.stats.peak.max(self.kv_used);
        // A served engine (`--serve`) never ends a run: its trace is bounded.
        if self.stats.trace.len() < MAX_TRACE {
            self.stats.trace.push(e);
        }
    }

    fn report(&self, t0: Instant) -> serde_json::Value {
        let s = &self.stats;
        let secs = |t: Instant| t.saturating_duration_since(t0).as_secs_f64();
        json!({
            "kind": "tfbench continuous-batching engine",
            "max_batch": self.cfg.max_batch,
            "threads": self.cfg.threads,
            "kv_budget_bytes": self.cfg.kv_budget,
            "kv_cache": self.cfg.kv.name(),
            "kv_peak_bytes": s.peak,
            "decode_steps": s.steps,
            "mean_batch": if s.steps > 0 { s.batch_sum as f64 / s.steps as f64 } else { 0.0 },
            "prefills": s.prefills,
            "waited_for_memory": s.waited_for_memory,
            "refused_for_memory": s.refused,
            "prefill_s": s.prefill_s,
            "decode_s": s.decode_s,
            "kv_trace_columns": ["t_s", "kv_bytes", "running", "waiting"],
            "kv_trace": s.trace.iter().map(|&(t, b, r, w)| json!([secs(t), b, r, w])).collect::<Vec<_>>(),
        })
    }

    /// Admits waiting requests, oldest first, while a slot and the budget allow.
    fn admit(&mut self, model: &Model) {
        while self.active.len() < self.cfg.max_batch.max(1) {
            let Some((req, _, counted)) = self.waiting.front_mut() else { return };
            let bytes = Self::kv_bytes(self.cfg.kv, model, req.ids.len() + req.max_tokens);
            if self.kv_used + bytes > self.cfg.kv_budget {
                if !*counted {
                    *counted = true;
                    self.stats.waited_for_memory += 1;
                }
                return;
            }
            let Some((req, events, _)) = self.waiting.pop_front() else { return };
            self.prefill(model, req, events, bytes);
        }
    }

    fn prefill(&mut self, model: &Model, req: Request, events: Sender<Event>, bytes: u64) {
        let t = Instant::now();
        let n = req.ids.len();
        let mut cache = KvCache::with_storage(&model.cfg, 1, n + req.max_tokens, self.cfg.kv);
        generate::feed(model, &mut self.pre_ws, &mut cache, &req.ids, 1, n, &mut self.chunk);
        let mut tok = [0u32];
        generate::greedy(&self.pre_ws, model.cfg.vocab, &mut tok);
        let at = Instant::now();
        self.stats.prefill_s += (at - t).as_secs_f64();
        self.stats.prefills += 1;
        let _ = events.send(Event::Tokens { id: req.id, at, n: 1, ids: vec![tok[0]] });
        if req.max_tokens == 1 {
            let _ = events.send(Event::Done {
                id: req.id,
                at,
                prompt_tokens: None,
                output_tokens: None,
                by_server: false,
            });
            return;
        }
        self.kv_used += bytes;
        self.active.push(Seq { req, events, cache, kv: bytes, last: tok[0], produced: 1 });
        self.trace();
    }

    /// One decode step of every running request.
    fn step(&mut self, model: &Model) {
        let t = Instant::now();
        let ids: Vec<u32> = self.active.iter().map(|s| s.last).collect();
        let mut caches: Vec<&mut KvCache> = self.active.iter_mut().map(|s| &mut s.cache).collect();
        model.decode_ragged(&mut self.dec_ws, &mut caches, &ids);
        let mut next = vec![0u32; ids.len()];
        generate::greedy(&self.dec_ws, model.cfg.vocab, &mut next);
        let at = Instant::now();
        self.stats.decode_s += (at - t).as_secs_f64();
        self.stats.steps += 1;
        self.stats.batch_sum += ids.len() as u64;
        let mut finished = false;
        for (s, &tok) in self.active.iter_mut().zip(&next) {
            s.last = tok;
            s.produced += 1;
            let _ = s.events.send(Event::Tokens { id: s.req.id, at, n: 1, ids: vec![tok] });
            if s.produced >= s.req.max_tokens {
                let _ = s.events.send(Event::Done {
                    id: s.req.id,
                    at,
                    prompt_tokens: None,
                    output_tokens: None,
                    by_server: false,
                });
                finished = true;
            }
        }
        if finished {
            let before = self.kv_used;
            let freed: u64 =
                self.active.iter().filter(|s| s.produced >= s.req.max_tokens).map(|s| s.kv).sum();
            self.active.retain(|s| s.produced < s.req.max_tokens);
            self.kv_used = before - freed;
            self.trace();
        }
    }
}

/// Replays `reqs` through a fresh engine on `model` (arriving 10 ms
/// apart, so later ones join a batch already decoding) and returns each
/// one's tokens; any failure is an error.
pub fn replay(model: Arc<Model>, cfg: EngineConfig, reqs: &[Request], timeout: f64) -> Result<Vec<Vec<u32>>> {
    let mut engine = Engine::start(model, cfg)?;
    let times: Vec<f64> = (0..reqs.len()).map(|i| 0.01 * i as f64).collect();
    let mut make = |i: usize| Request { id: i, ..reqs[i].clone() };
    let log = super::driver::run(&mut engine, &super::driver::Mode::Open(times), &mut make, timeout);
    drop(engine);
    log.queries
        .into_iter()
        .map(|q| match q.error {
            Some(e) => Err(anyhow::anyhow!("self-check replay, request {}: {e}", q.id)),
            None => Ok(q.token_ids),
        })
        .collect()
}

/// How the engine's tokens compare with one-request greedy generation.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SelfCheck {
    /// Requests checked.
    pub requests: usize,
    /// Tokens compared (up to each one's first difference).
    pub tokens: usize,
    /// Requests whose every token matched.
    pub identical: usize,
    /// Requests that parted at a near-tie of the reference's logits (the
    /// two tokens' logits within 1e-4 of the largest logit's magnitude:
    /// the batched products' rounding may pick either).
    pub near_ties: usize,
    /// The KV-cache storage both sides decoded on (`f32`, `int8`).
    pub kv_cache: &'static str,
}

/// The model runtime's own greedy generation of `n` tokens after `prompt`
/// (one request, [`Model::decode`], on a cache of `kv`), compared token by
/// token with `got`; returns whether they matched, parted at a near-tie, or
/// an error naming the first real difference.
fn check_one(model: &Model, kv: KvStorage, prompt: &[u32], got: &[u32]) -> Result<(usize, bool)> {
    let (p, n, v) = (prompt.len(), got.len(), model.cfg.vocab);
    let threads = crate::backend::cpu::current_threads();
    let size = WorkspaceSize { batch: 1, tokens: p.clamp(1, PREFILL_CHUNK), keys: p + n, threads };
    let mut ws = Workspace::new(model, size);
    let mut cache = KvCache::with_storage(&model.cfg, 1, p + n, kv);
    let mut chunk = Vec::with_capacity(PREFILL_CHUNK);
    generate::feed(model, &mut ws, &mut cache, prompt, 1, p, &mut chunk);
    for (i, &g) in got.iter().enumerate() {
        let logits = &ws.logits[..v];
        let want = crate::model::argmax(logits) as u32;
        if want != g {
            let scale = logits.iter().fold(0.0f32, |a, &x| a.max(x.abs()));
            let gap = logits[want as usize] - logits.get(g as usize).copied().unwrap_or(f32::NEG_INFINITY);
            if gap <= 1e-4 * scale {
                return Ok((i, true));
            }
            anyhow::bail!(
                "token {i}: the engine gave {g}, one-request greedy generation {want} (logit gap {gap:.3e} of {scale:.3e})"
            );
        }
        if i + 1 < n {
            model.decode(&mut ws, &mut cache, &[want], 1, false);
        }
    }
    Ok((n, false))
}

/// Checks each `(prompt, engine tokens)` pair against the model runtime's
/// one-request greedy generation on a KV cache of `kv`, the engine's (the
/// workload's self-check).
pub fn self_check(model: &Model, kv: KvStorage, pairs: &[(&[u32], &[u32])]) -> Result<SelfCheck> {
    let mut c = SelfCheck { requests: 0, tokens: 0, identical: 0, near_ties: 0, kv_cache: kv.name() };
    for (i, (prompt, got)) in pairs.iter().enumerate() {
        let (n, tie) =
            check_one(model, kv, prompt, got).map_err(|e| anyhow::anyhow!("self-check, request {i}: {e}"))?;
        c.requests += 1;
        c.tokens += n;
        if tie {
            c.near_ties += 1;
        } else {
            c.identical += 1;
        }
    }
    Ok(c)
}

/// How a server's streamed tokens compare with the model runtime's
/// one-request greedy generation: a report, not a verdict (a server may
/// round differently, as int8 activations do).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TokenCheck {
    /// Requests compared.
    pub requests: usize,
    /// Tokens compared (up to each request's first difference).
    pub tokens: usize,
    /// Requests whose every token matched.
    pub identical: usize,
    /// Requests that parted at a near-tie of the reference's logits.
    pub near_ties: usize,
    /// Requests that parted elsewhere.
    pub differing: usize,
    /// The first of those differences.
    pub first_difference: Option<String>,
}

/// [`self_check`] that counts differences instead of stopping at the first.
pub fn compare_tokens(model: &Model, kv: KvStorage, pairs: &[(&[u32], &[u32])]) -> TokenCheck {
    let mut c = TokenCheck::default();
    for (i, (prompt, got)) in pairs.iter().enumerate() {
        c.requests += 1;
        match check_one(model, kv, prompt, got) {
            Ok((n, tie)) => {
                c.tokens += n;
                if tie {
                    c.near_ties += 1;
                } else {
                    c.identical += 1;
                }
            }
            Err(e) => {
                c.differing += 1;
                c.first_difference.get_or_insert_with(|| format!("request {i}: {e}"));
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::driver::{Mode, run};
    use crate::load::summary::Summary;
    use crate::load::workload::Workload;
    use crate::model::config::ModelConfig;
    use crate::model::linear::DType;

    fn engine(model: &Arc<Model>, max_batch: usize, kv_budget: u64, kv: KvStorage) -> Engine {
        let cfg = EngineConfig { max_batch, kv_budget, threads: 2, max_positions: 64, kv };
        Engine::start(model.clone(), cfg).unwrap()
    }

    /// Requests arriving together share decode steps (mean batch above 1),
    /// and every request's tokens are the model's one-request greedy ones,
    /// on f32 and on int8 caches (each against one-request decoding on its own storage).
    #[test]
    fn batched_tokens_equal_one_request_greedy_generation() {
        let all = ["gpt2-tiny", "llama-tiny"].map(|n| [KvStorage::F32, KvStorage::Int8].map(|s| (n, s)));
        for (name, kv) in all.into_iter().flatten() {
            let cfg = ModelConfig::preset(name).unwrap();
            let model = Arc::new(crate::model::weights::random_model(&cfg, DType::F32, 11).unwrap());
            let mut e = engine(&model, 4, u64::MAX, kv);
            let w = Workload { input_len: 12, output_len: 10, spread: 0.5, seed: 4 };
            let mut make = |i| w.request(i, None, cfg.vocab).unwrap();
            let log = run(&mut e, &Mode::Open(vec![0.0; 8]), &mut make, 60.0);
            let s = Summary::of(&log, None);
            assert_eq!(s.completed, 8, "{:?}", s.failure_examples);
            let reqs: Vec<_> = (0..8).map(|i| w.request(i, None, cfg.vocab).unwrap()).collect();
            let pairs: Vec<(&[u32], &[u32])> =
                log.queries.iter().zip(&reqs).map(|(q, r)| (&r.ids[..], &q.token_ids[..])).collect();
            for (q, r) in log.queries.iter().zip(&reqs) {
                assert_eq!(q.token_ids.len(), r.max_tokens);
            }
            let c = self_check(&model, kv, &pairs).unwrap();
            assert_eq!(c.requests, 8);
            assert!(c.identical >= 6, "{name} {kv:?}: {c:?}");
            assert!(log.target["mean_batch"].as_f64().unwrap() > 1.0, "{}", log.target);
            assert_eq!(log.target["kv_cache"], kv.name());
            // A wrong token is caught.
            let mut bad = log.queries[0].token_ids.clone();
            bad[3] = (bad[3] + 1) % cfg.vocab as u32;
            assert!(self_check(&model, kv, &[(&reqs[0].ids, &bad)]).is_err());
        }
    }

    /// A budget for two requests' caches: the rest wait (never fail), the
    /// KV bytes in use never pass the budget, and all finish.
    #[test]
    fn the_kv_budget_queues_requests_instead_of_failing_them() {
        let cfg = ModelConfig::preset("llama-tiny").unwrap();
        let model = Arc::new(crate::model::weights::random_model(&cfg, DType::F32, 1).unwrap());
        let w = Workload { input_len: 8, output_len: 8, spread: 0.0, seed: 1 };
        let budget = cfg.kv_cache_bytes(1, 16, 4) * 2;
        let mut e = engine(&model, 8, budget, KvStorage::F32);
        let mut make = |i| w.request(i, None, cfg.vocab).unwrap();
        let log = run(&mut e, &Mode::Open(vec![0.0; 6]), &mut make, 60.0);
        assert!(log.queries.iter().all(|q| q.ok()), "{:?}", log.queries);
        let t = &log.target;
        assert!(t["kv_peak_bytes"].as_u64().unwrap() <= budget);
        assert_eq!(t["kv_peak_bytes"].as_u64().unwrap(), budget);
        // Six requests, room for two: the queue's head waited for memory at
        // least twice (after the first two, after the next two).
        assert!(t["waited_for_memory"].as_u64().unwrap() >= 2, "{t}");
        let trace = t["kv_trace"].as_array().unwrap();
        assert!(trace.iter().all(|e| e[1].as_u64().unwrap() <= budget));
        // One too big for the whole budget is refused with the reason.
        let big = Workload { input_len: 40, ..w };
        let mut make = |i| big.request(i, None, cfg.vocab).unwrap();
        let log = run(&mut e, &Mode::Open(vec![0.0]), &mut make, 60.0);
        assert!(log.queries[0].error.as_deref().is_some_and(|r| r.contains("exceeds the budget")));
    }

    /// An int8 engine's budget counts an int8 cache's bytes: a budget of
    /// three int8 caches, too small for three f32 ones, runs three requests
    /// at once, and never more.
    #[test]
    fn the_budget_counts_the_int8_caches_bytes() {
        let cfg = ModelConfig::preset("llama-tiny").unwrap();
        let model = Arc::new(crate::model::weights::random_model(&cfg, DType::F32, 1).unwrap());
        let w = Workload { input_len: 8, output_len: 8, spread: 0.0, seed: 1 };
        let one = KvStorage::Int8.bytes(&cfg, 1, 16);
        let budget = 3 * one;
        assert!(budget < 3 * KvStorage::F32.bytes(&cfg, 1, 16), "an int8 cache of {one} B");
        let mut e = engine(&model, 8, budget, KvStorage::Int8);
        let mut make = |i| w.request(i, None, cfg.vocab).unwrap();
        let log = run(&mut e, &Mode::Open(vec![0.0; 8]), &mut make, 60.0);
        assert!(log.queries.iter().all(|q| q.ok()), "{:?}", log.queries);
        let t = &log.target;
        assert_eq!(t["kv_peak_bytes"].as_u64().unwrap(), budget, "{t}");
        assert_eq!(t["kv_cache"], "int8");
    }
}
