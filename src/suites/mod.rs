//! The `Suite` and `Workload` traits and the explicit registry of suites.
//!
//! Adding a suite means adding one folder under `src/suites/`, one TOML file
//! under `suites/` (its benchmarks and default parameter grids) and one line in
//! [`registry`].

pub use crate::backend::cpu::{Context, Threads};
use crate::plan::Case;
use anyhow::Result;
pub use params::ParamRule;
// The vocabulary lives in `crate::workload`; suites use it from here.
pub use crate::workload::{Metric, SkipCase, Throughput, ThroughputKind, Verification, Workload, skip};

pub mod command;
pub mod common;
#[cfg(feature = "models")]
pub mod inference;
pub mod memory;
pub mod mobile;
pub mod model_cases;
pub mod nn;
pub mod optim;
pub mod params;
pub mod quant;
pub mod sci;
#[cfg(feature = "models")]
pub mod serving;
pub mod tensor;
#[cfg(feature = "models")]
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
    /// the suite file (a registry-wide test keeps the two in step). A
    /// built-in suite reads them from its one table of [`Benchmarks`].
    fn benchmarks(&self) -> Vec<&'static str>;
    /// The suite's benchmarks and default grids: the built-in suites parse
    /// their embedded file (the default); a suite whose benchmarks are data
    /// given at run time (`command`, from a config's `[[command]]` tables)
    /// builds them here.
    fn spec(&self) -> Result<crate::plan::SuiteSpec> {
        crate::plan::SuiteSpec::parse(self.name(), self.spec_toml())
    }
    /// Build one runnable case on its device ([`Case::device`], one of
    /// [`Suite::devices`]), with the threads of `ctx` (the execution
    /// context the harness built from [`Suite::threads`]; no suite asks
    /// rayon itself). Allocation, setup and compilation of device code
    /// happen here, untimed.
    fn prepare(&self, case: &Case, ctx: &Context) -> Result<Box<dyn Workload>>;
    /// What values parameter `key` of `benchmark` accepts, so a config
    /// file's bad value is refused with the choices before anything runs.
    /// `None` (the default) accepts anything and leaves it to `prepare`.
    fn param_rule(&self, _benchmark: &str, _key: &str) -> Option<ParamRule> {
        None
    }
    /// Whether the parameters of `case` work together, each value having
    /// passed [`Suite::param_rule`] alone: `Err((key, why))` names the
    /// parameter whose value cannot apply with the others (the nn suite's
    /// `algo=winograd` on a 1x1 layer). The plan drops such a case when
    /// `key` has the built-in suite file's values (its grids pair them only
    /// where they apply), and refuses the run, at the value, when a config
    /// sets `key`. `Ok` (the default) for every case.
    fn check_case(&self, _case: &Case) -> Result<(), (&'static str, String)> {
        Ok(())
    }
    /// Performance targets this suite's results can be checked against
    /// (reported with the run, never used to fail it).
    fn targets(&self) -> Vec<TargetSpec> {
        Vec::new()
    }
    /// The devices `benchmark` runs on; `prepare` finds the chosen one in
    /// [`Case::device`]. CPU only unless a suite says otherwise.
    fn devices(&self, _benchmark: &str) -> &'static [crate::backend::DeviceKind] {
        crate::backend::CPU_ONLY
    }
    /// The threads `case` asks for, from which the harness builds its
    /// [`Context`]: its `threads` parameter ([`Case::threads_request`]) by
    /// default. A case with a dedicated pool is warmed up and sampled from
    /// inside a pool of that width, where [`crate::backend::cpu::install`]
    /// runs each iteration on the calling thread instead of waking the
    /// dedicated pool's worker for it ([`crate::backend::cpu::on_pool_of`]).
    fn threads(&self, case: &Case) -> Result<Threads> {
        case.threads_request()
    }
}

/// What prepares the cases of one benchmark of a suite, with the case's
/// execution context.
pub type Prepare = fn(&Case, &Context) -> Result<Box<dyn Workload>>;

/// The one list of a built-in suite's benchmarks: each name, as its suite
/// file spells it and in that order, with the function that prepares its
/// cases. [`Suite::benchmarks`] and [`Suite::prepare`] both read it
/// ([`names`], [`dispatch`]), so a benchmark is named in code once.
pub type Benchmarks = &'static [(&'static str, Prepare)];

/// The names of `list`, in order.
pub fn names(list: Benchmarks) -> Vec<&'static str> {
    list.iter().map(|(n, _)| *n).collect()
}

/// Prepares `case` with its benchmark's function in `list`; a benchmark not
/// in it is refused with every valid name.
pub fn dispatch(suite: &str, list: Benchmarks, case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    match list.iter().find(|(n, _)| *n == case.benchmark) {
        Some((_, prepare)) => prepare(case, ctx),
        None => anyhow::bail!(
            "{suite} suite has no benchmark `{}`; valid: {}",
            case.benchmark,
            names(list).join(", ")
        ),
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

/// Every suite tfbench knows, in the order `list` shows them.
pub fn registry() -> &'static [&'static dyn Suite] {
    static SUITES: &[&dyn Suite] = &[
        &tensor::TensorSuite,
        #[cfg(feature = "models")]
        &inference::InferenceSuite,
        #[cfg(feature = "models")]
        &tokenizer::TokenizerSuite,
        &quant::QuantSuite,
        &optim::OptimSuite,
        &memory::MemorySuite,
        &mobile::MobileSuite,
        &nn::NnSuite,
        &sci::SciSuite,
        #[cfg(feature = "models")]
        &serving::ServingSuite,
    ];
    SUITES
}

/// Prepares `case` of `suite` with the execution context the harness would
/// build for it ([`Suite::threads`]): for tests and tools that prepare a case
/// outside the runner.
pub fn prepare_standalone(suite: &dyn Suite, case: &Case) -> Result<Box<dyn Workload>> {
    let ctx = Context::new(suite.threads(case)?)?;
    suite.prepare(case, &ctx)
}

/// The context the harness would build for `case` under its own
/// `threads` parameter (tests that call a benchmark's prepare directly).
#[cfg(test)]
pub(crate) fn test_context(case: &Case) -> Context {
    Context::new(case.threads_request().expect("a valid threads parameter")).expect("a pool")
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
            let err = prepare_standalone(*suite, &unknown).err().map(|e| e.to_string()).unwrap_or_default();
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
