//! One scenario case: a seeded request set, the engine serving it, and
//! every run held to the tokens verified before timing.
//!
//! Each iteration is one whole run through `tfbench load`'s driver
//! ([`crate::load::driver::run`]): the same requests, and for the server
//! scenario the same seeded arrival schedule, every time. A run whose
//! counts do not add up (a request failed, or produced another number of
//! tokens than asked) is an error at once; a run whose tokens differ from
//! the verified ones is checked again against one-request greedy decoding
//! after the clock is read, and fails the case unless the difference is a
//! near-tie of the logits (the one tolerance of the check `load` makes).

use super::{Qps, SCENARIOS};
use crate::backend::cpu::Context;
use crate::load::driver::{self, Mode, QueryRecord, RunLog};
use crate::load::engine::{self, Engine, EngineConfig};
use crate::load::summary::{Slo, Summary};
use crate::load::workload::Workload as Requests;
use crate::load::{Request, schedule};
use crate::model::config::{Arch, ModelConfig};
use crate::model::linear::DType;
use crate::model::transformer::{KvStorage, Model, WorkspaceSize};
use crate::plan::Case;
use crate::suites::{Metric, Throughput, Verification, Workload};
use anyhow::{Context as _, Result, bail};
use std::sync::Arc;

/// Seed of the weights, lengths, prompts and arrivals: `tfbench load`'s
/// default, so `load --preset M --seed 1` serves the same requests.
const SEED: u64 = 1;
/// Lengths are uniform within this fraction of their means (`load`'s default).
const SPREAD: f64 = 0.5;
/// Bytes of KV cache the running requests may hold (`load`'s default, 1 GiB),
/// stored as f32 (`load --kv-cache f32`, its default).
const KV_BUDGET: u64 = 1 << 30;
/// A request with no finish this long after its scheduled time fails the
/// run; the case's `--max-time` raises it, never lowers it (a quick profile's
/// half second is a sampling budget, not a bound on one run).
const MIN_TIMEOUT_S: f64 = 60.0;

/// A prepared scenario case.
struct Scenario {
    name: &'static str,
    model: Arc<Model>,
    engine: Engine,
    reqs: Vec<Request>,
    mode: Mode,
    slo: Slo,
    timeout: f64,
    ctx: Context,
    /// The server scenario's rate (requests/s) and, for a relative one, the
    /// offline capacity it was derived from.
    rate: Option<(f64, Option<f64>)>,
    /// Every request's tokens from the verified run.
    reference: Vec<Vec<u32>>,
    /// The last run, until `after_sample` has taken what it needs.
    last: Option<RunLog>,
    /// Requests of the last run whose tokens differ from the reference.
    differing: Vec<usize>,
    /// Runs so far (for messages).
    runs: u64,
    /// Timed runs' queries, pooled for the percentiles, and their seconds.
    pooled: Vec<QueryRecord>,
    pooled_s: f64,
    /// Engine accounts of the timed runs: batch sizes summed, runs, peak KV.
    batch_sum: f64,
    timed_runs: u64,
    kv_peak: u64,
    /// Requests verified before timing, and near-ties seen (verification
    /// and later runs).
    verified: usize,
    near_ties: usize,
}

/// Prepares an `engine` case ([`build`]).
pub(super) fn prepare(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    Ok(Box::new(build(case, ctx)?))
}

/// Builds an `engine` case: the model, the requests, the engine, and for
/// a relative server rate the offline capacity it is a multiple of.
fn build(case: &Case, ctx: &Context) -> Result<Scenario> {
    let name = crate::suites::common::choice(case, "scenario", SCENARIOS)?;
    let qps = match (name, case.params.get("qps")) {
        ("server", Some(v)) => Some(super::parse_qps(v).map_err(|e| anyhow::anyhow!("qps: {e}"))?),
        ("server", None) => bail!("case {}: the server scenario needs a `qps` parameter", case.id),
        (_, Some(_)) => bail!("case {}: `qps` applies to the server scenario only", case.id),
        (_, None) => None,
    };
    let slo = super::parse_slo(case.params.get("slo").context("no `slo` parameter")?)
        .map_err(|e| anyhow::anyhow!("slo: {e}"))?;
    let count = |k: &str| -> Result<usize> {
        let n = case.usize(k)?;
        anyhow::ensure!((1..=super::MAX_COUNT as usize).contains(&n), "`{k}` = {n} is out of range");
        Ok(n)
    };
    let (n, max_batch) = (count("requests")?, count("max_batch")?);
    let requests = Requests {
        input_len: count("input_len")?,
        output_len: count("output_len")?,
        spread: SPREAD,
        seed: SEED,
    };
    requests.check()?;
    let model_name = case.str("model")?;
    let cfg = ModelConfig::preset(&model_name)?;
    if cfg.arch == Arch::Bert {
        bail!("model {model_name} is an encoder; the engine serves decoders");
    }
    let positions = requests.max_positions();
    if positions > cfg.max_positions {
        bail!(
            "input_len/output_len need up to {positions} positions, over {model_name}'s {}",
            cfg.max_positions
        );
    }
    let threads = ctx.threads();
    let size = WorkspaceSize { batch: max_batch, tokens: 1, keys: positions, threads };
    crate::model::weights::check_fits(&cfg, DType::F32, size, positions * max_batch)?;
    let model = Arc::new(crate::model::weights::random_model(&cfg, DType::F32, SEED)?);
    let reqs = (0..n).map(|i| requests.request(i, None, cfg.vocab)).collect::<Result<Vec<_>>>()?;
    let engine_cfg = EngineConfig {
        max_batch,
        kv_budget: KV_BUDGET,
        threads,
        max_positions: positions,
        kv: KvStorage::F32,
    };
    let engine = Engine::start(model.clone(), engine_cfg)?;
    let mut s = Scenario {
        name,
        model,
        engine,
        reqs,
        mode: Mode::Open(vec![0.0; n]),
        slo,
        timeout: MIN_TIMEOUT_S,
        ctx: ctx.clone(),
        rate: None,
        reference: Vec::new(),
        last: None,
        differing: Vec::new(),
        runs: 0,
        pooled: Vec::new(),
        pooled_s: 0.0,
        batch_sum: 0.0,
        timed_runs: 0,
        kv_peak: 0,
        verified: 0,
        near_ties: 0,
    };
    s.mode = match (name, qps) {
        ("single_stream", _) => Mode::Closed { group: 1, min_queries: n, min_duration: 0.0, max_queries: n },
        ("server", Some(q)) => {
            let rate = match q {
                Qps::Absolute(r) => (r, None),
                Qps::Relative(f) => {
                    let capacity = s.offline_capacity()?;
                    (f * capacity, Some(capacity))
                }
            };
            s.rate = Some(rate);
            Mode::Open(schedule::arrivals(n, rate.0, 1.0, SEED)?)
        }
        _ => Mode::Open(vec![0.0; n]),
    };
    Ok(s)
}

impl Scenario {
    /// Requests per second of the offline scenario on this request set: the
    /// better of two runs (the first also warms the engine's buffers).
    fn offline_capacity(&mut self) -> Result<f64> {
        let offline = Mode::Open(vec![0.0; self.reqs.len()]);
        let mut best = f64::INFINITY;
        for _ in 0..2 {
            let log = self.run_mode(&offline)?;
            best = best.min(log.duration_s);
        }
        Ok(self.reqs.len() as f64 / best)
    }

    /// One run of `mode`, its counts checked.
    fn run_mode(&mut self, mode: &Mode) -> Result<RunLog> {
        let reqs = &self.reqs;
        let mut make = |i: usize| reqs[i].clone();
        let log = driver::run(&mut self.engine, mode, &mut make, self.timeout);
        self.runs += 1;
        self.check_counts(&log).with_context(|| format!("{} run {}", self.name, self.runs))?;
        Ok(log)
    }

    /// Requests completed = requests sent, each with the output length it
    /// asked for, and the run's tokens = the sum of those lengths.
    fn check_counts(&self, log: &RunLog) -> Result<()> {
        let sent = log.queries.len();
        let ok = log.queries.iter().filter(|q| q.ok()).count();
        if sent != self.reqs.len() || ok != sent {
            let s = Summary::of(log, None);
            bail!(
                "{ok} of {} requests completed ({sent} sent): {}",
                self.reqs.len(),
                s.failure_examples.join("; ")
            );
        }
        for (q, r) in log.queries.iter().zip(&self.reqs) {
            if q.token_ids.len() != r.max_tokens || q.output_tokens as usize != r.max_tokens {
                bail!(
                    "request {}: {} token ids, {} counted, {} asked for",
                    q.id,
                    q.token_ids.len(),
                    q.output_tokens,
                    r.max_tokens
                );
            }
        }
        let tokens: u64 = log.queries.iter().map(|q| q.output_tokens as u64).sum();
        if tokens != self.output_tokens() {
            bail!("{tokens} tokens generated, the output lengths sum to {}", self.output_tokens());
        }
        Ok(())
    }

    fn output_tokens(&self) -> u64 {
        self.reqs.iter().map(|r| r.max_tokens as u64).sum()
    }

    /// `tfbench load`'s check: each `(request, tokens)` against the model
    /// runtime's one-request greedy decoding, in the case's threads.
    fn self_check(&self, which: &[usize], tokens: &[&[u32]]) -> Result<engine::SelfCheck> {
        let pairs: Vec<(&[u32], &[u32])> =
            which.iter().zip(tokens).map(|(&i, t)| (&self.reqs[i].ids[..], *t)).collect();
        let model = &self.model;
        self.ctx.install(|| engine::self_check(model, KvStorage::F32, &pairs))
    }

    /// Rechecks the last run's requests whose tokens differ from the
    /// verified run's (a different batch can part at a near-tie).
    fn recheck(&mut self) -> Result<()> {
        let differing = std::mem::take(&mut self.differing);
        let Some(log) = &self.last else { return Ok(()) };
        if differing.is_empty() {
            return Ok(());
        }
        let tokens: Vec<&[u32]> = differing.iter().map(|&i| &log.queries[i].token_ids[..]).collect();
        let c = self.self_check(&differing, &tokens).with_context(|| {
            format!(
                "{} run {}: tokens differ from the verified run's and from one-request greedy decoding",
                self.name, self.runs
            )
        })?;
        self.near_ties += c.near_ties;
        Ok(())
    }
}

impl Workload for Scenario {
    fn verify(&mut self) -> Result<Verification> {
        let mode = self.mode.clone();
        let log = self.run_mode(&mode)?;
        let which: Vec<usize> = (0..self.reqs.len()).collect();
        let tokens: Vec<&[u32]> = log.queries.iter().map(|q| &q.token_ids[..]).collect();
        let reference = "one-request greedy decoding of each prompt (Model::decode, f32)";
        let c = match self.self_check(&which, &tokens) {
            Ok(c) => c,
            Err(e) => return Ok(Verification::check(reference, false, format!("{e:#}"))),
        };
        self.reference = log.queries.iter().map(|q| q.token_ids.clone()).collect();
        self.verified = c.requests;
        self.near_ties = c.near_ties;
        let detail = format!(
            "{} requests, {} tokens compared: {} identical, {} parted at a near-tie; {} of {} completed, \
             {} tokens = the sum of output lengths",
            c.requests,
            c.tokens,
            c.identical,
            c.near_ties,
            log.queries.len(),
            self.reqs.len(),
            self.output_tokens()
        );
        Ok(Verification::check(reference, c.requests == self.reqs.len(), detail))
    }

    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::tokens(self.output_tokens() as f64), Throughput::items(self.reqs.len() as f64)]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            let mode = std::mem::replace(&mut self.mode, Mode::Open(Vec::new()));
            let log = self.run_mode(&mode);
            self.mode = mode;
            let log = log?;
            self.differing = (0..self.reqs.len())
                .filter(|&i| self.reference.get(i).is_none_or(|r| *r != log.queries[i].token_ids))
                .collect();
            self.last = Some(log);
        }
        Ok(())
    }

    fn fixed_iterations(&self) -> Option<u64> {
        Some(1)
    }

    fn after_sample(&mut self, measured: bool) -> Result<()> {
        self.recheck()?;
        let Some(log) = self.last.take() else { return Ok(()) };
        // A copy prepared without `verify` (`ab` verifies a case once): its
        // first run, checked in full by `recheck`, becomes the reference.
        if self.reference.is_empty() {
            self.reference = log.queries.iter().map(|q| q.token_ids.clone()).collect();
        }
        if measured {
            self.pooled_s += log.duration_s;
            self.batch_sum += log.target["mean_batch"].as_f64().unwrap_or(0.0);
            self.kv_peak = self.kv_peak.max(log.target["kv_peak_bytes"].as_u64().unwrap_or(0));
            self.timed_runs += 1;
            self.pooled.extend(log.queries);
        }
        Ok(())
    }

    fn set_time_limit(&mut self, limit: std::time::Duration) {
        self.timeout = limit.as_secs_f64().max(MIN_TIMEOUT_S);
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let pooled = RunLog {
            queries: std::mem::take(&mut self.pooled),
            duration_s: self.pooled_s,
            target: serde_json::Value::Null,
        };
        let s = Summary::of(&pooled, Some(&self.slo));
        self.pooled = pooled.queries;
        metrics_of(&s, self)
    }
}

/// The case's metrics from the timed runs' pooled summary.
fn metrics_of(s: &Summary, sc: &Scenario) -> Vec<Metric> {
    let mut m = Vec::new();
    if s.completed > 0 {
        let ns = |name: &str, ms: f64| Metric::new(name, ms * 1e6, "ns");
        for (what, d) in [("ttft", &s.ttft), ("tpot", &s.tpot), ("e2e", &s.e2e)] {
            m.push(ns(&format!("{what}_p50_ns"), d.p50));
            m.push(ns(&format!("{what}_p90_ns"), d.p90));
            m.push(ns(&format!("{what}_p99_ns"), d.p99));
        }
        m.push(ns("itl_p99_ns", s.itl.p99));
        m.push(ns("send_lag_p99_ns", s.send_lag.p99));
        m.push(Metric::new("requests_timed", s.queries as f64, ""));
        m.push(Metric::new("output_tokens_per_s", s.output_tok_per_s, "tokens/s"));
        if let Some(g) = &s.goodput {
            m.push(Metric::new("goodput_share", g.share, "ratio"));
            m.push(Metric::new("goodput_per_s", g.per_s, "req/s"));
        }
    }
    if let Some((rate, capacity)) = sc.rate {
        m.push(Metric::new("qps", rate, "req/s"));
        if let Some(c) = capacity {
            m.push(Metric::new("offline_capacity_per_s", c, "req/s"));
        }
    }
    if sc.timed_runs > 0 {
        m.push(Metric::new("mean_batch", sc.batch_sum / sc.timed_runs as f64, ""));
        m.push(Metric::new("kv_peak_bytes", sc.kv_peak as f64, "B"));
    }
    m.push(Metric::new("verified_requests", sc.verified as f64, ""));
    m.push(Metric::new("near_ties", sc.near_ties as f64, ""));
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ParamValue;
    use std::collections::BTreeMap;

    fn case(scenario: &str, qps: Option<&str>) -> Case {
        let mut p: BTreeMap<String, ParamValue> = BTreeMap::new();
        let s = |v: &str| ParamValue::Str(v.into());
        p.insert("model".into(), s("llama-tiny"));
        p.insert("scenario".into(), s(scenario));
        if let Some(q) = qps {
            p.insert("qps".into(), s(q));
        }
        for (k, v) in [("requests", 6), ("input_len", 8), ("output_len", 6), ("max_batch", 4), ("threads", 2)]
        {
            p.insert(k.into(), ParamValue::Int(v));
        }
        p.insert("slo".into(), s("ttft:2s+tpot:200ms"));
        Case::new("serving", "engine", p)
    }

    /// Every scenario verifies, runs, and reports its percentiles; the
    /// relative server rate is the measured capacity's multiple.
    #[test]
    fn each_scenario_verifies_runs_and_reports_its_metrics() {
        for (scenario, qps) in [("offline", None), ("single_stream", None), ("server", Some("0.5x"))] {
            let c = case(scenario, qps);
            let mut w = crate::suites::prepare_standalone(&super::super::ServingSuite, &c)
                .unwrap_or_else(|e| panic!("{}: {e:#}", c.id));
            let v = w.verify().unwrap();
            assert!(v.passed, "{}: {}", c.id, v.detail);
            assert!(v.detail.contains("6 requests"), "{}", v.detail);
            for measured in [false, true, true] {
                w.run(1).unwrap();
                w.after_sample(measured).unwrap();
            }
            let m: BTreeMap<String, f64> = w.metrics().into_iter().map(|m| (m.name, m.value)).collect();
            assert_eq!(m["requests_timed"], 12.0, "{m:?}");
            assert_eq!(m["verified_requests"], 6.0);
            assert!(m["ttft_p50_ns"] > 0.0 && m["ttft_p99_ns"] >= m["ttft_p50_ns"], "{m:?}");
            assert!(m["e2e_p99_ns"] >= m["ttft_p99_ns"], "{m:?}");
            assert!((0.0..=1.0).contains(&m["goodput_share"]));
            if scenario == "server" {
                assert!((m["qps"] / m["offline_capacity_per_s"] - 0.5).abs() < 1e-9, "{m:?}");
            } else {
                assert!(!m.contains_key("qps"));
            }
            if scenario == "single_stream" {
                assert_eq!(m["mean_batch"], 1.0, "one request at a time");
            }
            let tokens = w.throughput()[0].per_iteration;
            assert!((18.0..=54.0).contains(&tokens), "{tokens}");
        }
    }

    /// A wrong reference token fails the next run's check loudly, and a
    /// scenario/qps mismatch is refused at prepare.
    #[test]
    fn a_wrong_token_fails_the_case_and_misplaced_rates_are_refused() {
        let c = case("offline", None);
        let mut s = build(&c, &crate::suites::test_context(&c)).unwrap();
        assert!(s.verify().unwrap().passed);
        s.run(1).unwrap();
        s.after_sample(true).unwrap();
        let mode = s.mode.clone();
        let log = s.run_mode(&mode).unwrap();
        let mut bad = log.queries[0].token_ids.clone();
        bad[2] = (bad[2] + 1) % s.model.cfg.vocab as u32;
        s.last = Some(RunLog { queries: vec![QueryRecord { token_ids: bad, ..Default::default() }], ..log });
        s.differing = vec![0];
        let err = format!("{:#}", s.after_sample(true).unwrap_err());
        assert!(err.contains("tokens differ") && err.contains("token 2"), "{err}");
        // Unverified (as `ab`'s later copies): the first run is checked in
        // full against one-request decoding, then held as the reference.
        let mut t = build(&c, &crate::suites::test_context(&c)).unwrap();
        t.run(1).unwrap();
        assert_eq!(t.differing.len(), 6);
        t.after_sample(true).unwrap();
        assert_eq!(t.reference.len(), 6);
        t.run(1).unwrap();
        t.after_sample(true).unwrap();
        for (scenario, qps, why) in
            [("server", None, "needs a `qps`"), ("offline", Some("0.5x"), "server scenario only")]
        {
            let c = case(scenario, qps);
            let err = format!("{:#}", prepare(&c, &crate::suites::test_context(&c)).err().unwrap());
            assert!(err.contains(why), "{err}");
        }
    }
}
