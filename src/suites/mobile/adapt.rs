//! `adapt`: device adaptation. Given a device profile, a per-token latency
//! target, a memory target and an accuracy floor, search the optimisation
//! levels (O1 f32, O2 int8 dynamic quantization, O3 4-bit weights with an
//! int8 KV cache: `levels.rs`'s, on the same runtime), thread counts (up to
//! the profile's cores on this machine) and batch sizes for the
//! configuration with the most tokens per second that meets every target.
//!
//! Each candidate is judged on figures of its own, in this order: memory
//! from the runtime's memory plan *before* anything is allocated (the
//! profile's budget, or `memory_mib` when smaller); then it is built under
//! the profile's ISA cap and verified; then timed for a short burst of
//! decode steps (p90 of the per-step latency against `latency_ms`, as MLPerf
//! Mobile scores single-stream); then its logits' cosine against the f32
//! model of the same seed against `min_cosine`. The chosen configuration is
//! the case's workload, timed by the harness as any other; every candidate,
//! with its figures and why it was rejected, is in the verification's
//! detail and in the metrics. No configuration meeting the targets is a
//! skip naming each rejection.

use super::profile::{self, Profile};
use crate::backend::cpu::Context;
#[cfg(feature = "models")]
use crate::backend::cpu::Threads;
use crate::isa;
use crate::plan::{Case, ParamValue};
use crate::suites::{Metric, Throughput, Verification, Workload, skip};
use anyhow::{Result, bail};
use std::time::{Duration, Instant};

/// Levels searched (O0 is the one-thread reference, not a deployment choice).
const LEVELS: &[&str] = &["O1", "O2", "O3"];
/// Batch sizes searched: sequences decoded together.
const BATCHES: &[usize] = &[1, 2, 4];
/// Least time each candidate's burst of decode calls runs.
const BURST: Duration = Duration::from_millis(60);
/// Untimed warm-up per candidate: by time, not one call, since the first
/// candidate also pays the process's one-time costs (page faults of fresh
/// buffers, a new pool's threads), which one call did not absorb (the first
/// candidate read 5-10x slower than its twin with one more thread).
const WARM_UP: Duration = Duration::from_millis(30);

/// One configuration of the search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Optimisation level (`O1`..`O3`).
    pub level: &'static str,
    /// Worker threads.
    pub threads: usize,
    /// Sequences per decode step.
    pub batch: usize,
}

impl Candidate {
    fn label(&self) -> String {
        format!("{} threads={} batch={}", self.level, self.threads, self.batch)
    }
}

/// What a candidate measured, and its verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    /// The configuration.
    pub cand: Candidate,
    /// Planned bytes (weights, KV cache, workspace).
    pub planned_bytes: f64,
    /// p90 of the per-step latency, when it was timed.
    pub step_p90_ns: Option<f64>,
    /// Tokens per second at the p50 step, when it was timed.
    pub tokens_per_s: Option<f64>,
    /// Cosine of its logits against the f32 model's (1 for f32).
    pub cosine: Option<f64>,
    /// `None` when it meets every target, else why not.
    pub rejected: Option<String>,
}

/// The targets of a case.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Targets {
    /// Most p90 latency of one decode step.
    pub latency_ns: f64,
    /// Most planned bytes.
    pub memory_bytes: f64,
    /// Least cosine against the f32 logits.
    pub min_cosine: f64,
}

/// The candidates for a device with `cores` usable threads here: every
/// level, threads 1, 2, 4, ... up to `cores` (and `cores` itself), every batch.
pub fn candidates(cores: usize) -> Vec<Candidate> {
    let mut threads: Vec<usize> =
        std::iter::successors(Some(1usize), |t| Some(t * 2)).take_while(|&t| t <= cores).collect();
    if threads.last() != Some(&cores) && cores >= 1 {
        threads.push(cores);
    }
    let mut out = Vec::new();
    for &level in LEVELS {
        for &t in &threads {
            for &batch in BATCHES {
                out.push(Candidate { level, threads: t, batch });
            }
        }
    }
    out
}

/// The chosen candidate: the most tokens/s among those meeting every
/// target; ties go to fewer threads, then the earlier level.
pub fn choose(judged: &[Judged]) -> Option<&Judged> {
    judged.iter().fold(None, |best: Option<&Judged>, j| if beats(j, best) { Some(j) } else { best })
}

/// Whether `j` meets the targets and is strictly faster than `best` (so
/// ties keep the earlier candidate: fewer threads, lower level).
fn beats(j: &Judged, best: Option<&Judged>) -> bool {
    j.rejected.is_none() && best.is_none_or(|b| j.tokens_per_s.unwrap_or(0.0) > b.tokens_per_s.unwrap_or(0.0))
}

/// A positive number parameter.
fn number(case: &Case, key: &str) -> Result<f64> {
    match case.params.get(key) {
        Some(ParamValue::Int(v)) if *v >= 0 => Ok(*v as f64),
        Some(ParamValue::Float(v)) if *v >= 0.0 && v.is_finite() => Ok(*v),
        other => bail!("case {}: `{key}` must be a non-negative number, got {other:?}", case.id),
    }
}

/// The targets a case asks for under profile `p`.
fn targets(case: &Case, p: &Profile) -> Result<Targets> {
    let latency_ms = number(case, "latency_ms")?;
    let min_cosine = number(case, "min_cosine")?;
    if latency_ms <= 0.0 || !(0.0..=1.0).contains(&min_cosine) {
        bail!("case {}: needs latency_ms > 0 and 0 <= min_cosine <= 1", case.id);
    }
    let asked = number(case, "memory_mib")? * 1048576.0;
    let budget = p.memory.budget_bytes as f64;
    Ok(Targets {
        latency_ns: latency_ms * 1e6,
        memory_bytes: if asked > 0.0 { asked.min(budget) } else { budget },
        min_cosine,
    })
}

/// The chosen configuration's decode, with the search it won.
pub struct Adapted {
    inner: Box<dyn Workload>,
    cap: isa::IsaLevel,
    chosen: Judged,
    judged: Vec<Judged>,
    note: String,
}

/// Prepares `adapt`: runs the search, keeps the winner.
pub fn prepare(case: &Case, _ctx: &Context) -> Result<Box<dyn Workload>> {
    let p = Profile::find(&case.str("profile")?)?;
    let t = targets(case, &p)?;
    let (have_threads, _) = profile::machine();
    let cores = p.cores(0)?.min(have_threads);
    let cap = p.isa_cap();
    let mut judged = Vec::new();
    let mut winner: Option<(usize, Box<dyn Workload>)> = None;
    for cand in candidates(cores) {
        let planned = planned_bytes(case, &cand)?;
        let mut j = Judged {
            cand,
            planned_bytes: planned,
            step_p90_ns: None,
            tokens_per_s: None,
            cosine: None,
            rejected: None,
        };
        if planned > t.memory_bytes {
            j.rejected = Some(format!(
                "needs {:.1} MiB, over the {:.1} MiB target (not allocated)",
                planned / 1048576.0,
                t.memory_bytes / 1048576.0
            ));
            judged.push(j);
            continue;
        }
        let mut w = build(case, &cand, cap)?;
        let v = isa::with_cap(cap, || w.verify())?;
        if !v.passed {
            bail!("{} failed verification: {} ({})", cand.label(), v.reference, v.detail);
        }
        measure(&mut *w, cap, case, &mut j)?;
        j.rejected = verdict(&j, &t);
        let better = beats(&j, winner.as_ref().map(|(i, _)| &judged[*i]));
        judged.push(j);
        if better {
            winner = Some((judged.len() - 1, w));
        }
    }
    let Some((i, inner)) = winner else {
        let why: Vec<String> = judged
            .iter()
            .map(|j| format!("{}: {}", j.cand.label(), j.rejected.as_deref().unwrap_or("?")))
            .collect();
        return Err(skip(format!(
            "no configuration meets the targets on {}-emulated: {}",
            p.name,
            why.join("; ")
        )));
    };
    let chosen = judged[i].clone();
    Ok(Box::new(Adapted { inner, cap, chosen, judged, note: p.note(cores) }))
}

/// Why `j` misses a target, or `None`.
fn verdict(j: &Judged, t: &Targets) -> Option<String> {
    let p90 = j.step_p90_ns.unwrap_or(f64::INFINITY);
    if p90 > t.latency_ns {
        return Some(format!("p90 step {:.2} ms, over the {:.2} ms target", p90 / 1e6, t.latency_ns / 1e6));
    }
    let cos = j.cosine.unwrap_or(1.0);
    if cos < t.min_cosine {
        return Some(format!("logit cosine {cos:.5} against f32, under the {} floor", t.min_cosine));
    }
    None
}

/// The levels' run of `cand` (the profile's budget is the search's memory
/// target, judged before this), in a pool of its threads.
#[cfg(feature = "models")]
fn candidate(case: &Case, cand: &Candidate) -> Result<super::level_run::Setup> {
    use super::level_run::{Setup, Shape, spec};
    let name = case.str("model")?;
    Ok(Setup {
        spec: spec(cand.level)?,
        cfg: crate::model::config::ModelConfig::preset(&name)?,
        batch: cand.batch,
        shape: Shape::Decode { depth: case.usize("depth")?, gen_tokens: case.usize("gen")? },
        seed: crate::model::weights::fnv(&format!("mobile/levels/{name}")),
        threads: cand.threads,
        budget: None,
    })
}

/// Builds `cand` under `cap` in a pool of its threads.
#[cfg(feature = "models")]
fn build(case: &Case, cand: &Candidate, cap: isa::IsaLevel) -> Result<Box<dyn Workload>> {
    let ctx = Context::new(Threads::Exactly(cand.threads))?;
    let s = candidate(case, cand)?;
    let run = ctx.install(|| isa::with_cap(cap, || super::level_run::LevelRun::build(s)))?;
    Ok(Box::new(InPool { inner: super::levels::Level::from_run(run, Some(cap)), ctx }))
}

#[cfg(not(feature = "models"))]
fn build(_case: &Case, _cand: &Candidate, _cap: isa::IsaLevel) -> Result<Box<dyn Workload>> {
    Err(skip("device adaptation needs the model runtime (the `models` feature)"))
}

/// A workload run inside its own thread pool.
#[cfg(feature = "models")]
struct InPool {
    inner: super::levels::Level,
    ctx: Context,
}

#[cfg(feature = "models")]
impl Workload for InPool {
    fn verify(&mut self) -> Result<Verification> {
        let (ctx, inner) = (&self.ctx, &mut self.inner);
        ctx.install(|| inner.verify())
    }
    fn throughput(&self) -> Vec<Throughput> {
        self.inner.throughput()
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        let (ctx, inner) = (&self.ctx, &mut self.inner);
        ctx.install(|| inner.run(iters))
    }
    fn metrics(&mut self) -> Vec<Metric> {
        self.inner.metrics()
    }
}

/// The levels' memory plan of `cand`, from shapes alone.
#[cfg(feature = "models")]
fn planned_bytes(case: &Case, cand: &Candidate) -> Result<f64> {
    Ok(candidate(case, cand)?.plan().total())
}

#[cfg(not(feature = "models"))]
fn planned_bytes(_case: &Case, _cand: &Candidate) -> Result<f64> {
    Err(skip("device adaptation needs the model runtime (the `models` feature)"))
}

/// Times a burst of decode calls of `w` under `cap` (after an untimed
/// warm-up) and reads into `j` the per-step latency (each call's time
/// over its `gen` steps), the tokens/s at the median call and the accuracy.
fn measure(w: &mut dyn Workload, cap: isa::IsaLevel, case: &Case, j: &mut Judged) -> Result<()> {
    let steps = case.usize("gen")?.max(1) as f64;
    let mut calls = isa::with_cap(cap, || -> Result<Vec<f64>> {
        let warm = Instant::now();
        while warm.elapsed() < WARM_UP {
            w.run(1)?;
        }
        let mut calls = Vec::new();
        let start = Instant::now();
        while start.elapsed() < BURST || calls.len() < 5 {
            let t = Instant::now();
            w.run(1)?;
            calls.push(t.elapsed().as_nanos() as f64 / steps);
        }
        Ok(calls)
    })?;
    calls.sort_by(f64::total_cmp);
    let p50 = crate::stats::summary::quantile_sorted(&calls, 0.5);
    j.step_p90_ns = Some(crate::stats::summary::quantile_sorted(&calls, 0.9));
    j.tokens_per_s = Some(j.cand.batch as f64 * 1e9 / p50);
    let m = w.metrics();
    j.cosine = Some(m.iter().find(|x| x.name == "vs_o0_cosine").map_or(1.0, |x| x.value));
    Ok(())
}

/// The level's index (`O1` = 1).
fn level_number(level: &str) -> f64 {
    level.trim_start_matches('O').parse().unwrap_or(f64::NAN)
}

impl Workload for Adapted {
    fn verify(&mut self) -> Result<Verification> {
        let mut v = isa::with_cap(self.cap, || self.inner.verify())?;
        let rows: Vec<String> = self
            .judged
            .iter()
            .map(|j| {
                let figures = format!(
                    "{:.1} MiB{}{}",
                    j.planned_bytes / 1048576.0,
                    j.step_p90_ns.map_or(String::new(), |p| format!(", p90 step {:.2} ms", p / 1e6)),
                    j.tokens_per_s.map_or(String::new(), |r| format!(", {r:.0} tokens/s")),
                );
                let verdict = match &j.rejected {
                    None if j.cand == self.chosen.cand => "chosen".to_string(),
                    None => "meets the targets, slower".to_string(),
                    Some(why) => format!("rejected: {why}"),
                };
                format!("{} ({figures}): {verdict}", j.cand.label())
            })
            .collect();
        v.reference =
            format!("adaptation chose {} on {}; {}", self.chosen.cand.label(), self.note, v.reference);
        v.detail = format!("{}; search: {}", v.detail, rows.join("; "));
        Ok(v)
    }
    fn throughput(&self) -> Vec<Throughput> {
        self.inner.throughput()
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        isa::with_cap(self.cap, || self.inner.run(iters))
    }
    fn metrics(&mut self) -> Vec<Metric> {
        let mut m = self.inner.metrics();
        let c = &self.chosen.cand;
        m.push(Metric::new("chosen_level", level_number(c.level), ""));
        m.push(Metric::new("chosen_threads", c.threads as f64, ""));
        m.push(Metric::new("chosen_batch", c.batch as f64, ""));
        m.push(Metric::new("candidates", self.judged.len() as f64, ""));
        let rejected = self.judged.iter().filter(|j| j.rejected.is_some()).count();
        m.push(Metric::new("candidates_rejected", rejected as f64, ""));
        for j in &self.judged {
            let key = format!("{}_t{}_b{}", j.cand.level, j.cand.threads, j.cand.batch);
            if let Some(r) = j.tokens_per_s {
                m.push(Metric::new(format!("search_{key}_tokens_per_s"), r, "tokens/s"));
            }
            m.push(Metric::new(format!("search_{key}_meets_targets"), f64::from(j.rejected.is_none()), ""));
        }
        m
    }
    fn sync(&mut self) -> Result<()> {
        self.inner.sync()
    }
    fn fixed_iterations(&self) -> Option<u64> {
        self.inner.fixed_iterations()
    }
    fn before_sample(&mut self) -> Result<()> {
        self.inner.before_sample()
    }
    fn after_sample(&mut self, measured: bool) -> Result<()> {
        self.inner.after_sample(measured)
    }
    fn set_time_limit(&mut self, limit: Duration) {
        self.inner.set_time_limit(limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(level: &'static str, threads: usize, rate: f64, rejected: Option<&str>) -> Judged {
        Judged {
            cand: Candidate { level, threads, batch: 1 },
            planned_bytes: 1.0,
            step_p90_ns: Some(1e6),
            tokens_per_s: Some(rate),
            cosine: Some(1.0),
            rejected: rejected.map(str::to_string),
        }
    }

    #[test]
    fn the_grid_covers_levels_threads_and_batches() {
        let c = candidates(6);
        assert_eq!(c.len(), 3 * 4 * 3, "threads 1, 2, 4, 6");
        assert!(c.iter().any(|c| c.threads == 6) && c.iter().all(|c| c.threads <= 6));
        assert_eq!(candidates(1).len(), 9);
    }

    #[test]
    fn the_fastest_candidate_meeting_every_target_wins() {
        let j = vec![
            judged("O1", 1, 100.0, None),
            judged("O2", 2, 900.0, Some("p90 over")),
            judged("O3", 2, 300.0, None),
            judged("O3", 4, 300.0, None),
        ];
        let c = choose(&j).unwrap();
        assert_eq!((c.cand.level, c.cand.threads), ("O3", 2), "ties keep the earlier, fewer threads");
        assert!(choose(&j[1..2]).is_none());
    }

    #[test]
    fn verdicts_name_the_target_missed() {
        let t = Targets { latency_ns: 2e6, memory_bytes: 1e9, min_cosine: 0.99 };
        let mut j = judged("O2", 1, 1.0, None);
        assert_eq!(verdict(&j, &t), None);
        j.step_p90_ns = Some(3e6);
        assert!(verdict(&j, &t).unwrap().contains("3.00 ms, over the 2.00 ms"));
        j.step_p90_ns = Some(1e6);
        j.cosine = Some(0.9);
        assert!(verdict(&j, &t).unwrap().contains("cosine 0.90000"));
    }
}
