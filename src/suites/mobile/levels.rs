//! `levels`: optimisation levels O0-O3 over a built-in model, as token
//! generation with a KV cache. The model runtime is the inference suite's,
//! reached through the suite registry (its `decode` benchmark, the one public
//! entry point used here, in this file only), so the mobile suite imports no
//! other suite; when the runtime moves to a module of its own, this is the
//! one place to re-point.
//!
//! | level | weights | threads | what the runtime lacks |
//! |---|---|---|---|
//! | O0 | f32 | 1 | (the reference) |
//! | O1 | f32 | the run's | |
//! | O2 | int8, one scale per row | the run's | activations stay f32: no dynamic activation quantization |
//! | O3 | Q4_0 (4-bit) | the run's | the KV cache stays f32: no int8 KV cache |
//!
//! Accuracy against O0 comes from the runtime's own comparison with the f32
//! model of the same seed (`vs_f32_cosine`, `vs_f32_max_abs_error`), the
//! latency percentiles from its per-token times (`tpot_*`), memory from the
//! counting allocator and the memory plan.

use crate::backend::cpu::{Context, Threads};
use crate::plan::{Case, ParamValue};
use crate::suites::{Metric, Throughput, Verification, Workload};
use anyhow::{Result, bail};
use std::collections::BTreeMap;

/// The `level` parameter's values.
pub const LEVELS: &[&str] = &["O0", "O1", "O2", "O3"];

/// Weight dtype and description of `level`.
fn spec(level: &str) -> Result<(&'static str, &'static str)> {
    Ok(match level {
        "O0" => ("f32", "O0: f32 weights, one thread (the reference)"),
        "O1" => ("f32", "O1: f32 weights, the run's threads"),
        "O2" => (
            "int8",
            "O2: int8 weights (per-row scales), f32 activations (no dynamic activation quantization in the runtime)",
        ),
        "O3" => ("q4_0", "O3: 4-bit Q4_0 weights; the KV cache stays f32 (the runtime has no int8 KV cache)"),
        other => bail!("unknown level `{other}`; valid: {}", LEVELS.join(", ")),
    })
}

/// O0 runs on one thread; the others on the run's pool.
pub fn threads(case: &Case) -> Result<Threads> {
    Ok(if case.str("level")? == "O0" { Threads::Exactly(1) } else { Threads::Run })
}

/// A level: the runtime's decode workload, with what the level is.
pub struct Level {
    inner: Box<dyn Workload>,
    what: &'static str,
    threads: usize,
}

/// Prepares `levels` through the inference suite's `decode` benchmark.
pub fn prepare(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    let (dtype, what) = spec(&case.str("level")?)?;
    // Absent only in a build without the `models` feature: a skip that says
    // so, as every capability a build leaves out is.
    let runtime = crate::suites::find("inference").ok_or_else(|| {
        crate::suites::skip("the optimisation levels run the model runtime; this tfbench was built without the `models` feature")
    })?;
    let mut p: BTreeMap<String, ParamValue> = BTreeMap::new();
    p.insert("model".into(), ParamValue::Str(case.str("model")?));
    for key in ["depth", "gen"] {
        p.insert(key.into(), ParamValue::Int(case.usize(key)? as i64));
    }
    p.insert("batch".into(), ParamValue::Int(1));
    p.insert("dtype".into(), ParamValue::Str(dtype.into()));
    p.insert("layers".into(), ParamValue::Str("full".into()));
    p.insert("shape".into(), ParamValue::Str("preset".into()));
    let decode = Case::new("inference", "decode", p);
    let inner = runtime.prepare(&decode, ctx)?;
    Ok(Box::new(Level { inner, what, threads: ctx.threads() }))
}

impl Workload for Level {
    fn verify(&mut self) -> Result<Verification> {
        let mut v = self.inner.verify()?;
        v.reference = format!("{}; {}", self.what, v.reference);
        Ok(v)
    }
    fn throughput(&self) -> Vec<Throughput> {
        self.inner.throughput()
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        self.inner.run(iters)
    }
    fn metrics(&mut self) -> Vec<Metric> {
        let mut m = self.inner.metrics();
        m.push(Metric::new("level_threads", self.threads as f64, ""));
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
    fn set_time_limit(&mut self, limit: std::time::Duration) {
        self.inner.set_time_limit(limit)
    }
}
