//! The optim suite: optimizer steps, learning-rate schedulers, ZeRO sharding
//! simulated in one process, and training steps with hand-written backward
//! passes.
//!
//! | benchmark         | file            | what                                                    |
//! |-------------------|-----------------|---------------------------------------------------------|
//! | `optimizer_step`  | `step.rs`       | SGD (plain, wd, momentum, Nesterov), Adam, AdamW, Lion, Adafactor; fused vs unfused |
//! | `state_memory`    | `step.rs`       | optimizer-state bytes per parameter, from the allocator |
//! | `mixed_precision` | `mixed.rs`      | bf16/f16 params, f32 master weights, dynamic loss scaling |
//! | `scheduler`       | `schedulers.rs` | step, exponential, cosine, warm-up + cosine/linear, one-cycle |
//! | `zero`            | `zero.rs`       | ZeRO stages 0-3 over N simulated ranks (threads)        |
//! | `train_step`, `grad_accum`, `checkpointing` | `train.rs` (`nn.rs`, `model.rs`) | MLP and transformer-block training |
//!
//! The optimizer math lives in `optimizers.rs` with an f64 reference beside
//! the f32 kernels; every workload checks itself against it (or against
//! closed forms, finite differences, the unsharded optimizer) before timing.

use crate::plan::Case;
use crate::suites::{
    Benchmarks, Limit, ParamRule, Suite, TargetMatch, TargetSpec, ThroughputKind, Workload, dispatch, names,
};
use anyhow::{Result, bail};

pub mod optimizers;
pub mod schedulers;

mod mixed;
mod model;
mod nn;
mod step;
mod train;
mod zero;

/// Optimizers, schedulers, ZeRO simulation and training steps.
pub struct OptimSuite;

/// Benchmarks of `suites/optim.toml`, in file order, with what prepares each.
const BENCHMARKS: Benchmarks = &[
    ("optimizer_step", step::prepare_step),
    ("state_memory", |c, _| step::prepare_memory(c)),
    ("mixed_precision", mixed::prepare),
    ("scheduler", |c, _| schedulers::prepare(c)),
    ("zero", |c, _| zero::prepare(c)),
    ("train_step", train::prepare),
    ("grad_accum", train::prepare),
    ("checkpointing", train::prepare),
];

impl Suite for OptimSuite {
    fn name(&self) -> &'static str {
        "optim"
    }
    fn describe(&self) -> &'static str {
        "Optimizers (fused/unfused, mixed precision, state memory), LR schedulers, simulated ZeRO 1-3, \
         MLP and transformer-block training steps"
    }
    fn spec_toml(&self) -> &'static str {
        include_str!("../../../suites/optim.toml")
    }
    fn benchmarks(&self) -> Vec<&'static str> {
        names(BENCHMARKS)
    }
    fn targets(&self) -> Vec<TargetSpec> {
        vec![TargetSpec {
            name: "fused AdamW, 100M f32 params (beyond the caches), >= 60% of STREAM triad",
            case_pattern: r"^optim/optimizer_step/form=fused,optimizer=adamw,params=100000000,threads=all$",
            matching: TargetMatch::Fastest,
            kind: ThroughputKind::Bytes,
            limit: Limit::TriadAllThreads,
            required: 0.6,
        }]
    }
    fn param_rule(&self, benchmark: &str, key: &str) -> Option<ParamRule> {
        Some(match (benchmark, key) {
            (_, "optimizer") => ParamRule::OneOf(optimizers::NAMES),
            (_, "form") => ParamRule::OneOf(step::FORMS),
            (_, "dtype") => ParamRule::OneOf(mixed::DTYPES),
            (_, "kind") => ParamRule::OneOf(schedulers::KINDS),
            (_, "model") => ParamRule::OneOf(train::MODELS),
            (_, "mode") => ParamRule::OneOf(train::MODES),
            (_, "stage") => ParamRule::Int { min: 0, max: 3 },
            (_, "params" | "ranks" | "batch" | "micro") => ParamRule::POSITIVE,
            (_, "threads") => ParamRule::Threads,
            _ => return None,
        })
    }
    fn prepare(&self, case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
        dispatch(self.name(), BENCHMARKS, case, ctx)
    }
}

/// A reproducible seed derived from the case id (FNV-1a).
pub(crate) fn seed(case: &Case) -> u64 {
    crate::suites::common::seed(case)
}

/// The string parameter `key`, which must be one of `valid`.
pub(crate) fn choice<'a>(case: &Case, key: &str, valid: &[&'a str]) -> Result<&'a str> {
    crate::suites::common::choice(case, key, valid)
}

/// The positive integer parameter `key`.
pub(crate) fn positive(case: &Case, key: &str) -> Result<usize> {
    let n = case.usize(key)?;
    if n == 0 {
        bail!("case {}: `{key}` must be positive", case.id);
    }
    Ok(n)
}

/// Refuses (as skipped) a case whose buffers would not fit in the memory
/// the machine has available now, with room to spare for other processes.
pub(crate) fn ensure_memory(bytes: f64) -> Result<()> {
    let available = crate::util::mem_available().map(|b| b as f64);
    match available {
        Some(avail) if bytes > 0.8 * avail => Err(crate::suites::skip(format!(
            "needs {:.1} GB, only {:.1} GB of memory available",
            bytes / 1e9,
            avail / 1e9
        ))),
        _ => Ok(()),
    }
}

pub(crate) use crate::backend::cpu::install;

/// Bytes of memory that became live while `f` ran (allocator counters are
/// process-wide; cases run one at a time, so the delta is `f`'s own).
/// `None` when the counting allocator is not installed (library tests).
pub(crate) fn live_delta<R>(f: impl FnOnce() -> R) -> (R, Option<usize>) {
    use crate::alloc;
    let before = alloc::snapshot().live;
    let r = f();
    let after = alloc::snapshot().live;
    (r, alloc::is_installed().then(|| after.saturating_sub(before)))
}

/// Slack allowed between allocator-measured and computed bytes: other
/// threads (progress display, pool start-up) allocate a few KiB meanwhile.
pub(crate) const ALLOC_SLACK: usize = 64 << 10;

/// Whether `got` bytes (from the allocator) match the computed `want`.
pub(crate) fn bytes_match(got: usize, want: usize) -> bool {
    got.abs_diff(want) <= ALLOC_SLACK
}

/// Peak live bytes above the starting level while `f` ran (see [`live_delta`]).
pub(crate) fn peak_during<R>(f: impl FnOnce() -> R) -> (R, Option<usize>) {
    use crate::alloc;
    let base = alloc::reset_peak();
    let r = f();
    let peak = alloc::peak();
    (r, alloc::is_installed().then(|| peak.saturating_sub(base)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ParamValue, SuiteSpec, expand};
    use std::collections::BTreeMap;

    fn spec() -> SuiteSpec {
        SuiteSpec::parse("optim", OptimSuite.spec_toml()).unwrap()
    }

    #[test]
    fn the_target_matches_a_default_case() {
        for t in OptimSuite.targets() {
            let re = regex::Regex::new(t.case_pattern).unwrap();
            let n = spec()
                .benchmarks
                .iter()
                .flat_map(|b| expand("optim", b))
                .filter(|c| re.is_match(&c.id))
                .count();
            assert_eq!(n, 1, "{}", t.name);
        }
    }

    #[test]
    fn unknown_benchmarks_and_bad_params_name_the_valid_choices() {
        let err =
            crate::suites::prepare_standalone(&OptimSuite, &Case::new("optim", "nope", BTreeMap::new()))
                .err()
                .unwrap()
                .to_string();
        assert!(err.contains("valid: optimizer_step, state_memory"), "{err}");
        let mut p = BTreeMap::new();
        p.insert("optimizer".to_string(), ParamValue::Str("rmsprop".into()));
        p.insert("form".to_string(), ParamValue::Str("fused".into()));
        p.insert("params".to_string(), ParamValue::Int(1000));
        p.insert("threads".to_string(), ParamValue::Int(1));
        let err = crate::suites::prepare_standalone(&OptimSuite, &Case::new("optim", "optimizer_step", p))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("valid: sgd, sgd_wd"), "{err}");
        let mut p = BTreeMap::new();
        p.insert("kind".to_string(), ParamValue::Str("poly".into()));
        let err = crate::suites::prepare_standalone(&OptimSuite, &Case::new("optim", "scheduler", p))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("valid: step, exponential"), "{err}");
    }
}
