//! `levels`: optimisation levels O0-O3 of a built-in model on the model
//! runtime ([`crate::model`]): greedy token generation with a KV cache for
//! a decoder (`model`, `depth`, `gen`), one forward of `seq` tokens for an
//! encoder (`encoder`). Weights are seeded random (the same at every
//! level), as for every catalogue model.
//!
//! | level | weights | activations | KV cache | threads |
//! |---|---|---|---|---|
//! | O0 | f32 | f32 | f32 | 1 (the reference) |
//! | O1 | f32 | f32 | f32 | the run's |
//! | O2 | int8, one scale per output row | int8, quantized per row at run time (W8A8, the int8 GEMM) | f32 | the run's |
//! | O3 | Q4_0 (4-bit, an f16 scale per 32) | f32 (the exact dequantized product) | int8, one scale per token and head | the run's |
//!
//! Each row reports latency percentiles (`tpot_*` per token, `forward_*`
//! per encoder forward; p90 as MLPerf Mobile scores single-stream), tokens
//! per second, model, KV-cache and planned bytes, the allocator's peak, and
//! accuracy against O0 measured in the same case (`vs_o0_*`,
//! `level_accuracy.rs`). With a `profile`, the plan is checked against the
//! profile's memory budget before anything is allocated (a level that does
//! not fit is refused with the figures; one that fits says so with them),
//! threads are the profile's cores this machine has, and kernels run under
//! its ISA cap. The work and its checks: `level_run.rs`, `level_check.rs`.

use super::profile::{self, Profile};
use crate::backend::cpu::{Context, Threads};
#[cfg(feature = "models")]
use crate::isa::{self, IsaLevel};
use crate::plan::Case;
use crate::suites::Workload;
#[cfg(feature = "models")]
use crate::suites::{Metric, Throughput, Verification};
use anyhow::Result;

/// The `level` parameter's values.
pub const LEVELS: &[&str] = &["O0", "O1", "O2", "O3"];

/// Threads of a profile case: the profile's cores (all of them), as many as
/// this machine has.
fn profile_threads(p: &Profile) -> Result<usize> {
    Ok(p.cores(0)?.min(profile::machine().0).max(1))
}

/// O0 runs on one thread; the others on the profile's or the run's.
pub fn threads(case: &Case) -> Result<Threads> {
    if case.str("level")? == "O0" {
        return Ok(Threads::Exactly(1));
    }
    Ok(match case.params.get("profile") {
        Some(_) => Threads::Exactly(profile_threads(&Profile::find(&case.str("profile")?)?)?),
        None => Threads::Run,
    })
}

/// Runs `f` under `cap` when there is one.
#[cfg(feature = "models")]
fn capped<T>(cap: Option<IsaLevel>, f: impl FnOnce() -> T) -> T {
    match cap {
        Some(c) => isa::with_cap(c, f),
        None => f(),
    }
}

/// A level, ready to time.
#[cfg(feature = "models")]
pub struct Level {
    run: super::level_run::LevelRun,
    cap: Option<IsaLevel>,
    note: Option<String>,
}

/// The resolved case (its model, shape, budget) and the profile's ISA cap.
#[cfg(feature = "models")]
pub fn setup(
    case: &Case,
    threads: usize,
) -> Result<(super::level_run::Setup, Option<IsaLevel>, Option<String>)> {
    use super::level_run::{Budget, Setup, Shape, spec};
    use crate::model::config::ModelConfig;
    let (name, shape) = match case.params.get("encoder") {
        Some(_) => (case.str("encoder")?, Shape::Encode { seq: case.usize("seq")?.max(1) }),
        None => (
            case.str("model")?,
            Shape::Decode { depth: case.usize("depth")?, gen_tokens: case.usize("gen")? },
        ),
    };
    let cfg = ModelConfig::preset(&name).map_err(|e| anyhow::anyhow!("case {}: {e}", case.id))?;
    let (mut budget, mut cap, mut note) = (None, None, None);
    if case.params.contains_key("profile") {
        let p = Profile::find(&case.str("profile")?)?;
        budget = Some(Budget {
            bytes: p.memory.budget_bytes as f64,
            whose: format!("{}'s memory budget", p.name),
        });
        cap = Some(p.isa_cap());
        note = Some(p.note(threads));
    }
    let s = Setup {
        spec: spec(&case.str("level")?)?,
        cfg,
        batch: 1,
        shape,
        seed: crate::model::weights::fnv(&format!("mobile/levels/{name}")),
        threads,
        budget,
    };
    Ok((s, cap, note))
}

/// Prepares a `levels` case: budget checks, then the model under the cap.
pub fn prepare(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    #[cfg(feature = "models")]
    {
        let (s, cap, note) = setup(case, ctx.threads())?;
        let run = capped(cap, || super::level_run::LevelRun::build(s))?;
        Ok(Box::new(Level { run, cap, note }))
    }
    #[cfg(not(feature = "models"))]
    {
        let _ = (case, ctx);
        Err(crate::suites::skip(
            "the optimisation levels run the model runtime; this tfbench was built without the `models` feature",
        ))
    }
}

#[cfg(feature = "models")]
impl Level {
    /// The wrapped run (device adaptation reads its figures).
    pub fn from_run(run: super::level_run::LevelRun, cap: Option<IsaLevel>) -> Self {
        Self { run, cap, note: None }
    }
}

#[cfg(feature = "models")]
impl Workload for Level {
    fn verify(&mut self) -> Result<Verification> {
        let mut v = capped(self.cap, || self.run.verify())?;
        if let Some(n) = &self.note {
            v.reference = format!("{n}; {}", v.reference);
        }
        Ok(v)
    }
    fn throughput(&self) -> Vec<Throughput> {
        self.run.throughput()
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        capped(self.cap, || (0..iters).for_each(|_| self.run.once()));
        Ok(())
    }
    fn metrics(&mut self) -> Vec<Metric> {
        self.run.metrics()
    }
}
