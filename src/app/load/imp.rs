//! The work of `tfbench load`: check the flags, build the target (engine
//! or HTTP client), run the scenario (or the peak search), meter it,
//! self-check the engine's tokens, report.

use super::Outcome;
use crate::cli::load::{ApiKind, KvCacheKind, LoadArgs, Scenario};
use crate::load::driver::{self, Mode, RunLog};
use crate::load::engine::{Engine, EngineConfig, SelfCheck};
use crate::load::http::{Api, Endpoint, HttpTarget};
use crate::load::summary::{Bounds, Slo, Summary};
use crate::load::usage::{Meter, Price, Usage};
use crate::load::workload::{Tokenize, Workload};
use crate::load::{Request, Target, schedule, search};
use crate::model::config::{Arch, ModelConfig};
use crate::model::tokenizer::FileTokenizer;
use crate::model::transformer::{KvStorage, Model};
use anyhow::{Context, Result, bail};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Suites with a request model: what `--suite` may name.
const REQUEST_MODELS: &[&str] = &["serving"];

/// The flags, resolved.
pub(super) struct Settings {
    pub duration: f64,
    pub queries: usize,
    pub tolerance: f64,
    pub steps: usize,
    pub bounds: Bounds,
    pub slo: Option<Slo>,
    pub workload: Workload,
    pub price: Option<Price>,
}

/// The checks that need more than one flag, before anything is loaded.
pub(super) fn settings(a: &LoadArgs) -> Result<Settings> {
    if !REQUEST_MODELS.contains(&a.suite.as_str()) {
        let known = crate::suites::registry().iter().any(|s| s.name() == a.suite);
        let what = if known { "has no request model" } else { "is not a suite" };
        bail!("--suite {}: the suite {what}; load scenarios run on: {}", a.suite, REQUEST_MODELS.join(", "));
    }
    let bounds =
        Bounds { latency_ms: a.latency_bound_ms, ttft_ms: a.ttft_bound_ms, tpot_ms: a.tpot_bound_ms };
    if a.find_peak && a.scenario != Scenario::Server {
        bail!("--find-peak: the peak-QPS search is a search of the server scenario (--scenario server)");
    }
    if a.find_peak && !bounds.any() {
        bail!(
            "--find-peak needs a bound to judge runs by: --latency-bound-ms, --ttft-bound-ms or --tpot-bound-ms"
        );
    }
    if a.endpoint.is_none() && a.model.is_none() {
        ModelConfig::preset(&a.preset).map_err(|e| anyhow::anyhow!("--preset: {e}"))?;
    }
    let price = a.price_per_hour.as_deref().map(Price::parse).transpose().context("--price-per-hour")?;
    if let Some(o) = &a.output {
        crate::app::check_writable(o, "--output")?;
    }
    if let Some(o) = &a.html {
        crate::app::check_writable(o, "--html")?;
    }
    if let Some(addr) = &a.serve {
        super::serve::address(addr)?;
    }
    if a.memory_pressure.is_some() && a.find_peak {
        bail!("--memory-pressure: runs one scenario twice (unpressured, pressured); not with --find-peak");
    }
    let mut slo = Slo::default();
    for (k, ms) in &a.goodput {
        match k.as_str() {
            "ttft" => slo.ttft_ms = Some(*ms),
            "tpot" => slo.tpot_ms = Some(*ms),
            _ => slo.e2e_ms = Some(*ms),
        }
    }
    let workload = Workload {
        input_len: a.input_len as usize,
        output_len: a.output_len as usize,
        spread: a.len_spread,
        seed: a.seed,
    };
    workload.check()?;
    Ok(Settings {
        duration: a.duration.unwrap_or(if a.quick { 5.0 } else { 10.0 }),
        queries: a.queries.unwrap_or(if a.scenario == Scenario::Server { 8 } else { 16 }) as usize,
        tolerance: a.search_tolerance / 100.0,
        steps: if a.quick { a.search_steps.min(8) } else { a.search_steps } as usize,
        bounds,
        slo: (!a.goodput.is_empty()).then_some(slo),
        workload,
        price,
    })
}

/// What is under test.
pub(super) struct Setup {
    pub target: Box<dyn Target>,
    /// The engine's model (for the self-check).
    pub model: Option<Arc<Model>>,
    pub tokenizer: Option<Arc<FileTokenizer>>,
    pub vocab: usize,
    /// One line saying what runs.
    pub label: String,
    /// The engine's sizes (for the self-check's replay).
    pub engine: Option<EngineConfig>,
}

fn tokenizer_of(src: &crate::model::source::Source) -> Option<FileTokenizer> {
    match src {
        crate::model::source::Source::Gguf(f) => crate::model::tokenizer::from_header(&f.header).ok(),
        crate::model::source::Source::Hf(d) => d.tokenizer().ok().map(FileTokenizer::from_tokenizers),
    }
}

pub(super) fn build(a: &LoadArgs, s: &Settings) -> Result<Setup> {
    let positions = s.workload.max_positions();
    let threads = a.threads.map_or_else(crate::backend::cpu::run_threads, |t| t as usize);
    let (model, tokenizer, name) = if let Some(p) = &a.model {
        let (src, info) = crate::model::open(p).map_err(|e| anyhow::anyhow!("--model: {e:#}"))?;
        if info.cfg.arch == Arch::Bert {
            bail!("--model {}: {} is an encoder; serving needs a decoder", p.display(), info.name);
        }
        if positions > info.cfg.max_positions {
            bail!(
                "--input-len/--output-len: up to {positions} positions, over {}'s context of {}",
                info.name,
                info.cfg.max_positions
            );
        }
        let tok = tokenizer_of(&src);
        let model = match a.endpoint {
            None => Some(src.load(&info, positions).with_context(|| format!("--model {}", p.display()))?),
            Some(_) => None,
        };
        (model, tok, format!("{} ({})", info.name, info.ty))
    } else if a.endpoint.is_some() {
        (None, None, "no --model: prompts are word lists, tokens counted by usage or chunks".into())
    } else {
        let cfg = ModelConfig::preset(&a.preset)?;
        if cfg.arch == Arch::Bert {
            bail!("--preset {}: an encoder; serving needs a decoder", a.preset);
        }
        if positions > cfg.max_positions {
            bail!(
                "--input-len/--output-len: up to {positions} positions, over {}'s {}",
                a.preset,
                cfg.max_positions
            );
        }
        let dtype = crate::model::linear::DType::parse(&a.dtype)
            .ok_or_else(|| anyhow::anyhow!("--dtype {}: unknown", a.dtype))?;
        let size = crate::model::transformer::WorkspaceSize {
            batch: a.max_batch as usize,
            tokens: 1,
            keys: positions,
            threads,
        };
        crate::model::weights::check_fits(&cfg, dtype, size, positions * a.max_batch as usize)?;
        let m = crate::model::weights::random_model(&cfg, dtype, a.seed)?;
        (Some(m), None, format!("{} ({}, seeded weights)", a.preset, dtype.name()))
    };
    let tokenizer = tokenizer.map(Arc::new);
    // With no model here, a --preset's vocabulary (its prompt ids go to a
    // `load --serve --preset` server with --prompt-ids).
    let preset_vocab = ModelConfig::preset(&a.preset).map_or(32000, |c| c.vocab);
    let vocab = model.as_ref().map_or(preset_vocab, |m| m.cfg.vocab);
    if let Some(url) = &a.endpoint {
        let api = if a.api == ApiKind::Chat { Api::Chat } else { Api::Completions };
        let ep = Endpoint::parse(url, api)?;
        let tok = tokenizer.clone().map(|t| t as Arc<dyn Tokenize + Send + Sync>);
        let label = format!("http://{}{} ({name})", ep.authority, ep.path);
        let target = HttpTarget::new(ep, a.served_model.clone(), tok, Duration::from_secs_f64(a.timeout))
            .with_prompt_ids(a.prompt_ids);
        return Ok(Setup { target: Box::new(target), model: None, tokenizer, vocab, label, engine: None });
    }
    let model = Arc::new(model.context("no model to serve")?);
    let kv_budget = (a.kv_budget_mib * 1048576.0) as u64;
    let kv = kv_storage(a);
    let cfg =
        EngineConfig { max_batch: a.max_batch as usize, kv_budget, threads, max_positions: positions, kv };
    let label = format!(
        "tfbench engine: {name}, {threads} threads, batch up to {}, KV budget {} MiB ({} cache)",
        a.max_batch,
        a.kv_budget_mib,
        kv.name()
    );
    let engine = Engine::start(model.clone(), cfg.clone())?;
    Ok(Setup { target: Box::new(engine), model: Some(model), tokenizer, vocab, label, engine: Some(cfg) })
}

/// The model runtime's storage for `--kv-cache`.
pub(super) fn kv_storage(a: &LoadArgs) -> KvStorage {
    match a.kv_cache {
        KvCacheKind::F32 => KvStorage::F32,
        KvCacheKind::Int8 => KvStorage::Int8,
    }
}

/// One run of the scenario.
#[derive(Serialize)]
pub(super) struct Run {
    pub qps: Option<f64>,
    /// The share of RAM taken while it ran (`--memory-pressure`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_pressure: Option<f64>,
    pub valid: Option<bool>,
    pub why: Vec<String>,
    pub summary: Summary,
    pub log: RunLog,
}

fn mode(a: &LoadArgs, s: &Settings, qps: f64) -> Result<Mode> {
    Ok(match a.scenario {
        Scenario::Server => {
            let n = ((qps * s.duration).ceil() as usize).max(s.queries);
            Mode::Open(schedule::arrivals(n, qps, a.burstiness, a.seed)?)
        }
        Scenario::Offline => Mode::Open(vec![0.0; s.queries]),
        Scenario::SingleStream | Scenario::MultiStream => Mode::Closed {
            group: if a.scenario == Scenario::SingleStream { 1 } else { a.streams as usize },
            min_queries: s.queries,
            min_duration: s.duration,
            max_queries: 1_000_000,
        },
    })
}

pub(super) fn run_once(a: &LoadArgs, s: &Settings, setup: &mut Setup, qps: f64) -> Result<Run> {
    let m = mode(a, s, qps)?;
    let tok = setup.tokenizer.clone();
    let make_one = |i: usize| s.workload.request(i, tok.as_deref().map(|t| t as &dyn Tokenize), setup.vocab);
    // Open loops get every request built before the clock starts.
    let built: Vec<Request> = match &m {
        Mode::Open(times) => (0..times.len()).map(&make_one).collect::<Result<_>>()?,
        Mode::Closed { .. } => Vec::new(),
    };
    let mut err = None;
    let mut make = |i: usize| match built.get(i).cloned().map_or_else(|| make_one(i), Ok) {
        Ok(r) => r,
        Err(e) => {
            err.get_or_insert(e);
            Request { id: i, text: None, ids: Vec::new(), max_tokens: 1 }
        }
    };
    // A search step stops once its p99 is sure to miss a bound.
    let abandon = (a.find_peak && s.bounds.any()).then(|| driver::Abandon {
        ttft_ms: s.bounds.ttft_ms,
        tpot_ms: s.bounds.tpot_ms,
        e2e_ms: s.bounds.latency_ms,
        allowed: match &m {
            Mode::Open(t) => driver::Abandon::p99_allowance(t.len()),
            Mode::Closed { .. } => usize::MAX,
        },
    });
    let log = driver::run_with(setup.target.as_mut(), &m, &mut make, a.timeout, abandon.as_ref());
    if let Some(e) = err {
        return Err(e.context("building a request"));
    }
    let summary = Summary::of(&log, s.slo.as_ref());
    let server = a.scenario == Scenario::Server;
    let why = if server && s.bounds.any() { s.bounds.violations(&summary) } else { Vec::new() };
    let valid = (server && s.bounds.any()).then_some(why.is_empty());
    Ok(Run { qps: server.then_some(qps), memory_pressure: None, valid, why, summary, log })
}

/// Everything the command found.
#[derive(Serialize)]
pub(super) struct Results {
    pub tool: String,
    pub date_utc: String,
    pub scenario: String,
    pub target: String,
    pub cpu: String,
    pub logical_cpus: usize,
    pub loadavg_before: Option<String>,
    pub loadavg_after: Option<String>,
    pub settings: serde_json::Value,
    pub runs: Vec<Run>,
    pub peak: Option<search::Peak>,
    pub wall_s: f64,
    pub usage: Usage,
    pub cost: Option<serde_json::Value>,
    pub self_check: Option<SelfCheck>,
    /// A server's streamed token ids against one-request greedy generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_tokens: Option<crate::load::engine::TokenCheck>,
    /// The pressured run against the unpressured one (`--memory-pressure`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_pressure: Option<serde_json::Value>,
}

fn loadavg() -> Option<String> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

/// Runs `tfbench load`.
pub fn load(a: &LoadArgs) -> Result<Outcome> {
    let s = settings(a)?;
    if let Some(addr) = &a.serve {
        return super::serve::serve(a, &s, addr);
    }
    if a.find_peak && s.bounds.ttft_ms.is_none() && s.bounds.latency_ms.is_none() {
        eprintln!(
            "note: a TPOT bound alone does not bound queueing (a batch cap keeps TPOT flat while requests wait); \
             add --ttft-bound-ms (MLPerf's llama2 server scenario: TTFT 2 s, TPOT 200 ms)"
        );
    }
    let mut setup = build(a, &s)?;
    let env = crate::env::Environment::gather();
    let started = crate::probe::now_rfc3339();
    let before = loadavg();
    let meter = Meter::start(a.server_pid);
    let t0 = Instant::now();
    let mut runs = Vec::new();
    let peak = if a.find_peak {
        let p = search::find_peak(a.qps, s.tolerance, s.steps, |q| {
            let r = run_once(a, &s, &mut setup, q)?;
            eprintln!("  qps {q:>8.3}: {}", super::text::verdict(&r));
            let why = r.why.clone();
            runs.push(r);
            Ok(why)
        })?;
        Some(p)
    } else {
        runs.push(run_once(a, &s, &mut setup, a.qps)?);
        None
    };
    let memory_pressure = match a.memory_pressure {
        Some(share) => Some(super::pressure::pressured_run(a, &s, &mut setup, share, &mut runs)?),
        None => None,
    };
    let wall_s = t0.elapsed().as_secs_f64();
    let usage = meter.read();
    let after = loadavg();
    let label = setup.label.clone();
    let server_tokens = match runs.last() {
        Some(last) if a.endpoint.is_some() => super::serve::server_tokens(a, &s, &setup, last)?,
        _ => None,
    };
    let check = match runs.last() {
        Some(last) => check_tokens(a, &s, setup, last),
        None => None,
    };
    let self_check = check.as_ref().and_then(|c| c.as_ref().ok().cloned());
    let cost = s.price.as_ref().map(|p| super::text::cost(p, wall_s, &runs));
    let settings = serde_json::json!({
        "qps": a.qps, "find_peak": a.find_peak, "duration_s": s.duration, "queries": s.queries,
        "burstiness": a.burstiness, "streams": a.streams, "bounds": s.bounds, "goodput": s.slo,
        "input_len": a.input_len, "output_len": a.output_len, "len_spread": a.len_spread,
        "max_batch": a.max_batch, "kv_budget_mib": a.kv_budget_mib, "kv_cache": kv_storage(a).name(),
        "threads": a.threads,
        "timeout_s": a.timeout, "seed": a.seed, "search_tolerance_pct": a.search_tolerance,
        "search_steps": s.steps, "quick": a.quick, "memory_pressure": a.memory_pressure,
        "prompt_ids": a.prompt_ids,
    });
    let res = Results {
        tool: format!("tfbench {}", env!("CARGO_PKG_VERSION")),
        date_utc: started,
        scenario: format!("{:?}", a.scenario),
        target: label,
        cpu: env.cpu_model.clone(),
        logical_cpus: env.logical_threads,
        loadavg_before: before,
        loadavg_after: after,
        settings,
        runs,
        peak,
        wall_s,
        usage,
        cost,
        self_check,
        server_tokens,
        memory_pressure,
    };
    super::super::print_stdout(&super::text::render(&res))?;
    if let Some(o) = &a.output {
        crate::util::write_atomic(o, serde_json::to_string_pretty(&res)?.as_bytes())?;
    }
    if let Some(h) = &a.html {
        let page = crate::report::html::load_page("tfbench load", &serde_json::to_value(&res)?);
        crate::util::write_atomic(h, page.as_bytes())?;
    }
    match check {
        Some(Err(e)) => {
            eprintln!("error: {e:#}");
            Ok(Outcome::CaseFailures)
        }
        _ => Ok(Outcome::Success),
    }
}

/// The engine's tokens against one-request greedy generation (`None`
/// for an HTTP target): the last run's first `--check` completed requests
/// are replayed through a fresh engine with exact f32 activations, and
/// compared with the model runtime's one-request generation, also exact,
/// on the engine's KV-cache storage (an int8 engine against int8 decoding).
/// (With int8 activations, the kernels' one-token path and their
/// several-token path round differently, so batched and one-request
/// tokens may part anywhere; exact activations leave the batching alone
/// under test.)
fn check_tokens(a: &LoadArgs, s: &Settings, setup: Setup, last: &Run) -> Option<Result<SelfCheck>> {
    let Setup { target, model, tokenizer, vocab, engine, .. } = setup;
    // Stops the engine, so its thread lets go of the model.
    drop(target);
    let (model, cfg) = (model?, engine?);
    Some(replay_check(a, s, model, cfg, tokenizer.as_deref(), vocab, last))
}

/// [`check_tokens`]'s replay and comparison.
fn replay_check(
    a: &LoadArgs,
    s: &Settings,
    mut model: Arc<Model>,
    cfg: EngineConfig,
    tokenizer: Option<&FileTokenizer>,
    vocab: usize,
    last: &Run,
) -> Result<SelfCheck> {
    let tok = tokenizer.map(|t| t as &dyn Tokenize);
    let ok = last.log.queries.iter().filter(|q| q.ok()).take(a.check as usize);
    let reqs = ok.map(|q| s.workload.request(q.id, tok, vocab)).collect::<Result<Vec<_>>>()?;
    Arc::get_mut(&mut model).context("the engine still holds the model")?.set_int8_activations(false);
    let (threads, kv) = (cfg.threads, cfg.kv);
    let got = crate::load::engine::replay(model.clone(), cfg, &reqs, a.timeout)?;
    let pairs: Vec<(&[u32], &[u32])> = reqs.iter().zip(&got).map(|(r, t)| (&r.ids[..], &t[..])).collect();
    let ctx = crate::backend::cpu::Context::new(crate::backend::cpu::Threads::Exactly(threads))?;
    ctx.install(|| crate::load::engine::self_check(&model, kv, &pairs))
}
