//! The `Suite` and `Workload` traits and the explicit registry of suites.
//!
//! Adding a suite means adding one folder under `src/suites/`, one TOML file
//! under `suites/` (its benchmarks and default parameter grids) and one line in
//! [`registry`].

use crate::plan::Case;
use anyhow::Result;
pub use params::ParamRule;
use serde::{Deserialize, Serialize};

pub mod inference;
pub mod memory;
pub mod optim;
pub mod params;
pub mod quant;
pub mod tensor;
pub mod tokenizer;

/// A family of benchmarks (for example `tensor`), backed by a suite file that
/// names its benchmarks and their default parameter grids.
pub trait Suite: Sync {
    /// Short lowercase name used on the command line (`--suite NAME`).
    fn name(&self) -> &'static str;
    /// One-line description shown by `tfbench list`.
    fn describe(&self) -> &'static str;
    /// The suite file (`suites/<name>.toml`) embedded at compile time.
    fn spec_toml(&self) -> &'static str;
    /// The benchmark names [`Suite::prepare`] dispatches on, in the order of
    /// the suite file (a registry-wide test keeps the two in step).
    fn benchmarks(&self) -> &'static [&'static str];
    /// Build one runnable case. Allocation and setup happen here, untimed.
    fn prepare(&self, case: &Case) -> Result<Box<dyn Workload>>;
    /// What values parameter `key` of `benchmark` accepts, so a config
    /// file's bad value is refused with the choices before anything runs.
    /// `None` (the default) accepts anything and leaves it to `prepare`.
    fn param_rule(&self, _benchmark: &str, _key: &str) -> Option<ParamRule> {
        None
    }
    /// Performance targets this suite's results can be checked against
    /// (reported with the run, never used to fail it).
    fn targets(&self) -> Vec<TargetSpec> {
        Vec::new()
    }
}

/// The machine limit a target is measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Probed peak FMA throughput on all cores.
    PeakFlopsAllCores,
    /// Probed peak FMA throughput on one core.
    PeakFlopsOneCore,
    /// Probed STREAM triad bandwidth on all threads.
    TriadAllThreads,
    /// Probed STREAM triad bandwidth on one thread.
    TriadOneThread,
}

/// Which of the cases matching a [`TargetSpec`] must reach the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetMatch {
    /// The fastest matching case counts: "this machine can do it".
    Fastest,
    /// Every matching case must pass (a failed one counts as rate 0); the
    /// check reports the slowest, so a miss names the case to fix.
    Every,
}

/// A performance target: the rate of matching cases against a limit.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetSpec {
    /// What is checked, shown in reports.
    pub name: &'static str,
    /// Regex over case ids; `matching` says which of them count.
    pub case_pattern: &'static str,
    /// The fastest matching case, or every one of them.
    pub matching: TargetMatch,
    /// Which declared rate is compared.
    pub kind: ThroughputKind,
    /// The limit it is compared with.
    pub limit: Limit,
    /// Required fraction of the limit.
    pub required: f64,
}

/// One runnable benchmark case, prepared and ready to be verified and timed.
pub trait Workload: Send {
    /// Checked once before timing against an independent reference. An `Err`
    /// (or a failed [`Verification`]) marks the case failed; it is never timed.
    fn verify(&mut self) -> Result<Verification>;
    /// Work done by one iteration (FLOPs, bytes, elements, items, tokens).
    fn throughput(&self) -> Vec<Throughput>;
    /// Run `iters` iterations back to back; the harness times the whole call.
    fn run(&mut self, iters: u64) -> Result<()>;
    /// Figures to report beside the timings (accuracy against f32, memory
    /// footprints, per-step latency percentiles gathered during `run`).
    /// Called once after the last measured round.
    fn metrics(&mut self) -> Vec<crate::results::Metric> {
        Vec::new()
    }
}

/// The error a suite's `prepare` returns to refuse a case on this machine
/// (too big for its memory, no GPU, an absent input file). The case is
/// reported as skipped with this reason, not as failed, and the run goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipCase(pub String);

impl std::fmt::Display for SkipCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SkipCase {}

/// Refuses the case being prepared with `reason` (see [`SkipCase`]).
pub fn skip(reason: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(SkipCase(reason.into()))
}

/// The outcome of a workload's self-check against an independent reference.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Verification {
    /// Whether the result matched the reference within tolerance.
    pub passed: bool,
    /// What the result was checked against (e.g. "naive triple loop, 64x64").
    pub reference: String,
    /// Largest error observed, in the units of `detail`, when meaningful.
    pub max_error: Option<f64>,
    /// Human-readable detail, e.g. the tolerance, or why it failed.
    pub detail: String,
}

impl Verification {
    /// A passed check against `reference`.
    pub fn pass(reference: impl Into<String>) -> Self {
        Self { passed: true, reference: reference.into(), max_error: None, detail: String::new() }
    }

    /// Compares `got` with `want` element-wise under a mixed absolute/relative
    /// tolerance (`|g - w| <= atol + rtol * |w|`) and reports the worst error.
    pub fn compare(reference: impl Into<String>, got: &[f32], want: &[f32], atol: f64, rtol: f64) -> Self {
        let reference = reference.into();
        if got.len() != want.len() {
            return Self {
                passed: false,
                reference,
                max_error: None,
                detail: format!("length mismatch: got {} values, reference has {}", got.len(), want.len()),
            };
        }
        // Chunked and parallel: references of 16M-element cases are checked
        // in full, and this keeps that to a fraction of a second.
        const CHUNK: usize = 1 << 16;
        let check = |start: usize, got: &[f32], want: &[f32]| {
            let mut worst = 0.0f64;
            let mut first_bad: Option<(usize, f32, f32)> = None;
            for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
                let err = (g as f64 - w as f64).abs();
                // `g == w` first: equal infinities give a NaN difference but match.
                let ok = g == w || (g.is_nan() && w.is_nan()) || err <= atol + rtol * (w as f64).abs();
                if !ok {
                    first_bad.get_or_insert((start + i, g, w));
                }
                if !ok || (g != w && err > worst) {
                    worst = if err.is_nan() { f64::INFINITY } else { worst.max(err) };
                }
            }
            (worst, first_bad)
        };
        use rayon::prelude::*;
        let (worst, first_bad) = got
            .par_chunks(CHUNK)
            .zip(want.par_chunks(CHUNK))
            .enumerate()
            .map(|(k, (g, w))| check(k * CHUNK, g, w))
            .reduce(
                || (0.0, None),
                |a, b| {
                    let first = match (a.1, b.1) {
                        (Some(x), Some(y)) => Some(if x.0 <= y.0 { x } else { y }),
                        (x, y) => x.or(y),
                    };
                    (a.0.max(b.0), first)
                },
            );
        match first_bad {
            None => Self {
                passed: true,
                reference,
                max_error: Some(worst),
                detail: format!("{} values within atol {atol:e} + rtol {rtol:e}", got.len()),
            },
            Some((i, g, w)) => Self {
                passed: false,
                reference,
                max_error: Some(worst),
                detail: format!("value {i}: got {g}, reference {w} (atol {atol:e}, rtol {rtol:e})"),
            },
        }
    }

    /// Turns a failed verification into an error, keeping its detail.
    pub fn into_result(self) -> Result<Self> {
        if self.passed {
            Ok(self)
        } else {
            anyhow::bail!("verification against {} failed: {}", self.reference, self.detail)
        }
    }
}

/// Units of work one iteration performs; the harness turns them into rates.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum ThroughputKind {
    /// Floating-point operations (a fused multiply-add counts as two).
    Flops,
    /// Bytes moved to and from memory (reads plus writes).
    Bytes,
    /// Tensor elements produced.
    Elements,
    /// Generic items (e.g. sequences, requests).
    Items,
    /// Tokens processed or generated.
    Tokens,
}

impl ThroughputKind {
    /// Unit of the rate, e.g. "FLOP/s".
    pub fn rate_unit(self) -> &'static str {
        match self {
            Self::Flops => "FLOP/s",
            Self::Bytes => "B/s",
            Self::Elements => "elem/s",
            Self::Items => "items/s",
            Self::Tokens => "tokens/s",
        }
    }
}

/// Work done per iteration, of one kind.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Throughput {
    /// What is counted.
    pub kind: ThroughputKind,
    /// How many per iteration.
    pub per_iteration: f64,
}

impl Throughput {
    /// `n` floating-point operations per iteration.
    pub fn flops(n: f64) -> Self {
        Self { kind: ThroughputKind::Flops, per_iteration: n }
    }
    /// `n` bytes moved per iteration.
    pub fn bytes(n: f64) -> Self {
        Self { kind: ThroughputKind::Bytes, per_iteration: n }
    }
    /// `n` elements produced per iteration.
    pub fn elements(n: f64) -> Self {
        Self { kind: ThroughputKind::Elements, per_iteration: n }
    }
    /// `n` items per iteration.
    pub fn items(n: f64) -> Self {
        Self { kind: ThroughputKind::Items, per_iteration: n }
    }
    /// `n` tokens per iteration.
    pub fn tokens(n: f64) -> Self {
        Self { kind: ThroughputKind::Tokens, per_iteration: n }
    }
}

/// Every suite tfbench knows, in the order `list` shows them.
pub fn registry() -> &'static [&'static dyn Suite] {
    static SUITES: &[&dyn Suite] = &[
        &tensor::TensorSuite,
        &inference::InferenceSuite,
        &tokenizer::TokenizerSuite,
        &quant::QuantSuite,
        &optim::OptimSuite,
        &memory::MemorySuite,
    ];
    SUITES
}

/// Looks a suite up by name.
pub fn find(name: &str) -> Option<&'static dyn Suite> {
    registry().iter().copied().find(|s| s.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_names_are_unique_and_specs_parse() {
        let mut names: Vec<_> = registry().iter().map(|s| s.name()).collect();
        names.sort();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "duplicate suite names");
        for suite in registry() {
            let spec = crate::plan::SuiteSpec::parse(suite.name(), suite.spec_toml())
                .unwrap_or_else(|e| panic!("suites/{}.toml: {e:#}", suite.name()));
            assert!(!spec.benchmarks.is_empty(), "{} has no benchmarks", suite.name());
        }
    }

    #[test]
    fn every_suite_file_matches_its_dispatch_table_and_targets() {
        for suite in registry() {
            let name = suite.name();
            let spec = crate::plan::SuiteSpec::parse(name, suite.spec_toml()).unwrap();
            let in_file: Vec<_> = spec.benchmarks.iter().map(|b| b.name.as_str()).collect();
            assert_eq!(in_file, suite.benchmarks(), "suites/{name}.toml vs the dispatch table");
            for b in &spec.benchmarks {
                assert!(b.description.len() > 60, "{name}/{}: description too short", b.name);
            }
            // An unknown benchmark is refused with every valid name listed.
            let unknown = Case::new(name, "no-such-benchmark", Default::default());
            let err = suite.prepare(&unknown).err().map(|e| e.to_string()).unwrap_or_default();
            for b in suite.benchmarks() {
                assert!(err.contains(b), "{name}: `{err}` does not name {b}");
            }
            let ids: Vec<String> =
                spec.benchmarks.iter().flat_map(|b| crate::plan::expand(name, b)).map(|c| c.id).collect();
            for t in suite.targets() {
                let re = regex::Regex::new(t.case_pattern).unwrap();
                assert!(ids.iter().any(|id| re.is_match(id)), "{name}: target `{}` matches no case", t.name);
            }
        }
    }

    /// Every parameter of every default grid declares its valid values, and
    /// every default value passes them (so no suite can forget a parameter,
    /// and no rule is stricter than the grids it ships) while a value of the
    /// wrong kind fails them.
    #[test]
    fn every_default_parameter_has_a_rule_its_values_pass() {
        for suite in registry() {
            let spec = crate::plan::SuiteSpec::parse(suite.name(), suite.spec_toml()).unwrap();
            for b in &spec.benchmarks {
                for (key, values) in b.grids.iter().flatten() {
                    assert!(
                        suite.param_rule(&b.name, key).is_some(),
                        "{}/{}: parameter `{key}` declares no rule",
                        suite.name(),
                        b.name
                    );
                    for v in values {
                        params::check_value(*suite, &b.name, key, v).unwrap_or_else(|e| panic!("{e}"));
                    }
                    // No rule accepts everything: a boolean fits no parameter.
                    let err = params::check_value(*suite, &b.name, key, &crate::plan::ParamValue::Bool(true))
                        .expect_err(&format!("{}/{}: `{key}` accepts `true`", suite.name(), b.name));
                    let why = err.split_once("is not valid; ").map_or("", |(_, w)| w);
                    assert!(why.len() > 10, "says nothing of what is accepted: {err}");
                }
            }
        }
    }

    #[test]
    fn compare_flags_the_first_bad_value() {
        let v = Verification::compare("ref", &[1.0, 2.0, 3.5], &[1.0, 2.0, 3.0], 1e-3, 1e-3);
        assert!(!v.passed);
        assert!(v.detail.contains("value 2"), "{}", v.detail);
        assert_eq!(v.max_error, Some(0.5));
        let ok = Verification::compare("ref", &[1.0, 2.0005], &[1.0, 2.0], 1e-3, 0.0);
        assert!(ok.passed, "{}", ok.detail);
        let nan = Verification::compare("ref", &[f32::NAN], &[1.0], 1e-3, 0.0);
        assert!(!nan.passed);
        let inf = Verification::compare("ref", &[f32::INFINITY, 1.0], &[f32::INFINITY, 1.0], 1e-3, 0.0);
        assert!(inf.passed, "{}", inf.detail);
        let wrong_inf = Verification::compare("ref", &[f32::NEG_INFINITY], &[f32::INFINITY], 1e-3, 0.0);
        assert!(!wrong_inf.passed);
    }
}
