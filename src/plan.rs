//! Suites x benchmarks x parameter grids -> the list of cases to run.
//!
//! A suite file (`suites/<name>.toml`) lists benchmarks, each with one or more
//! grids; every grid expands to the cartesian product of its parameters.

use anyhow::{Context, Result, bail};
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A parameter value of a case: integer, float, boolean or string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ParamValue {
    /// Boolean parameter.
    Bool(bool),
    /// Integer parameter.
    Int(i64),
    /// Floating-point parameter.
    Float(f64),
    /// String parameter (shapes such as `128x768x768`, dtypes, names).
    Str(String),
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bool(b) => write!(f, "{b}"),
            Self::Int(i) => write!(f, "{i}"),
            Self::Float(x) => write!(f, "{x}"),
            Self::Str(s) => f.write_str(s),
        }
    }
}

/// One benchmark of a suite file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkSpec {
    /// Name, unique within the suite.
    pub name: String,
    /// What the benchmark measures.
    pub description: String,
    /// Parameter grids; each expands to a cartesian product.
    #[serde(default, rename = "grid")]
    pub grids: Vec<BTreeMap<String, Vec<ParamValue>>>,
}

/// A parsed suite file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteSpec {
    /// Benchmarks in declaration order.
    #[serde(rename = "benchmark")]
    pub benchmarks: Vec<BenchmarkSpec>,
}

impl SuiteSpec {
    /// Parses the TOML text of `suites/<suite>.toml`.
    pub fn parse(suite: &str, text: &str) -> Result<Self> {
        let spec: SuiteSpec = toml::from_str(text).with_context(|| format!("suites/{suite}.toml"))?;
        for b in &spec.benchmarks {
            for g in &b.grids {
                for (k, v) in g {
                    if v.is_empty() {
                        bail!("suites/{suite}.toml: benchmark {}: parameter {k} has no values", b.name);
                    }
                }
            }
        }
        Ok(spec)
    }

    /// Replaces parameter values of the named benchmark in every grid that has
    /// the parameter. Unknown benchmarks or parameters are errors naming the
    /// valid choices.
    pub fn override_params(
        &mut self,
        suite: &str,
        bench: &str,
        params: &BTreeMap<String, Vec<ParamValue>>,
    ) -> Result<()> {
        let names: Vec<_> = self.benchmarks.iter().map(|b| b.name.clone()).collect();
        let Some(b) = self.benchmarks.iter_mut().find(|b| b.name == bench) else {
            bail!("suite {suite} has no benchmark `{bench}`; valid: {}", names.join(", "));
        };
        for (key, values) in params {
            if values.is_empty() {
                bail!("benchmark {suite}/{bench}: parameter `{key}` needs at least one value");
            }
            let mut found = false;
            for g in b.grids.iter_mut() {
                if let Some(slot) = g.get_mut(key) {
                    *slot = values.clone();
                    found = true;
                }
            }
            if !found {
                let mut valid: Vec<_> = b.grids.iter().flat_map(|g| g.keys().cloned()).collect();
                valid.sort();
                valid.dedup();
                bail!("benchmark {suite}/{bench} has no parameter `{key}`; valid: {}", valid.join(", "));
            }
        }
        Ok(())
    }
}

/// One runnable case: a benchmark with one value for each parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Case {
    /// `suite/benchmark/param=value,...` (params in name order).
    pub id: String,
    /// Suite name.
    pub suite: String,
    /// Benchmark name.
    pub benchmark: String,
    /// Parameter values.
    pub params: BTreeMap<String, ParamValue>,
    /// Where it runs; part of the id unless it is the CPU.
    #[serde(default)]
    pub device: crate::backend::Device,
}

impl Case {
    /// The same case on `device`: the id gains `device=...` unless it is
    /// the CPU, so results of two devices never share an id.
    pub fn on(mut self, device: crate::backend::Device) -> Self {
        if device != crate::backend::Device::Cpu {
            let sep = if self.params.is_empty() { '/' } else { ',' };
            self.id = format!("{}{sep}device={device}", self.id);
        }
        self.device = device;
        self
    }

    /// Builds a case and its id.
    pub fn new(suite: &str, benchmark: &str, params: BTreeMap<String, ParamValue>) -> Self {
        let mut id = format!("{suite}/{benchmark}");
        if !params.is_empty() {
            let joined: Vec<_> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            id.push('/');
            id.push_str(&joined.join(","));
        }
        Self { id, suite: suite.into(), benchmark: benchmark.into(), params, device: Default::default() }
    }

    fn param(&self, key: &str) -> Result<&ParamValue> {
        self.params.get(key).with_context(|| format!("case {} has no parameter `{key}`", self.id))
    }

    /// A string parameter (numbers are rendered as strings).
    pub fn str(&self, key: &str) -> Result<String> {
        Ok(self.param(key)?.to_string())
    }

    /// A non-negative integer parameter.
    pub fn usize(&self, key: &str) -> Result<usize> {
        match self.param(key)? {
            ParamValue::Int(i) if *i >= 0 => Ok(*i as usize),
            other => bail!("case {}: parameter `{key}` must be a non-negative integer, got {other}", self.id),
        }
    }

    /// A shape parameter written `AxBxC` (or a single integer), as dimensions.
    pub fn shape(&self, key: &str) -> Result<Vec<usize>> {
        parse_shape(&self.str(key)?).with_context(|| format!("case {}: parameter `{key}`", self.id))
    }

    /// The `threads` parameter as a request for the execution context: an
    /// integer is a dedicated pool of that many, `all` (or none) the run's
    /// own pool.
    pub fn threads_request(&self) -> Result<crate::backend::cpu::Threads> {
        use crate::backend::cpu::Threads;
        match self.params.get("threads") {
            None => Ok(Threads::Run),
            Some(ParamValue::Str(s)) if s == "all" => Ok(Threads::Run),
            Some(ParamValue::Int(n)) if *n >= 1 => Ok(Threads::Exactly(*n as usize)),
            Some(other) => {
                bail!("case {}: `threads` must be a positive integer or \"all\", got {other}", self.id)
            }
        }
    }
}

/// `--threads`: one count (the run's worker pool) or a sweep such as
/// `1,2,4,8`, which makes the thread count a dimension of the plan
/// ([`sweep_threads`]) and the run's pool as wide as its largest step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadCounts(Vec<usize>);

/// The most threads `--threads` accepts per step: far above any CPU, low
/// enough that a typo cannot ask for millions of OS threads.
pub const MAX_THREADS: usize = 4096;

impl std::str::FromStr for ThreadCounts {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut counts = Vec::new();
        for word in s.split(',') {
            match word.trim().parse::<usize>() {
                Ok(n) if (1..=MAX_THREADS).contains(&n) => {
                    if !counts.contains(&n) {
                        counts.push(n);
                    }
                }
                _ => {
                    return Err(format!(
                        "`{s}` is not a thread count or a sweep like 1,2,4 (whole numbers from 1 to {MAX_THREADS}, comma-separated)"
                    ));
                }
            }
        }
        counts.sort_unstable();
        Ok(Self(counts))
    }
}

impl fmt::Display for ThreadCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words: Vec<String> = self.0.iter().map(usize::to_string).collect();
        f.write_str(&words.join(","))
    }
}

impl ThreadCounts {
    /// One count, no sweep.
    pub fn single(n: usize) -> Self {
        Self(vec![n.clamp(1, MAX_THREADS)])
    }

    /// The widest step: the run's worker pool.
    pub fn max(&self) -> usize {
        self.0.last().copied().unwrap_or(1)
    }

    /// The steps of a sweep, smallest first; empty for a single count.
    pub fn sweep(&self) -> Vec<usize> {
        if self.0.len() > 1 { self.0.clone() } else { Vec::new() }
    }
}

/// The steps of a thread sweep of `case`: one copy per count in `counts`
/// with its `threads` parameter set to it (replacing the suite's value,
/// such as `all`), each with its own id. A case on a device other than the
/// CPU, or an empty sweep, is left as it is.
pub fn sweep_threads(case: Case, counts: &[usize]) -> Vec<Case> {
    if counts.is_empty() || case.device != crate::backend::Device::Cpu {
        return vec![case];
    }
    counts
        .iter()
        .map(|&n| {
            let mut params = case.params.clone();
            params.insert("threads".into(), ParamValue::Int(n as i64));
            Case::new(&case.suite, &case.benchmark, params)
        })
        .collect()
}

/// [`sweep_threads`] over a plan: every case's steps, in order, each id
/// once (a suite's `threads = [1, "all"]` becomes the same steps twice).
pub fn sweep_all(cases: Vec<Case>, counts: &[usize]) -> Vec<Case> {
    let mut seen = std::collections::HashSet::new();
    cases.into_iter().flat_map(|c| sweep_threads(c, counts)).filter(|c| seen.insert(c.id.clone())).collect()
}

/// Parses `128x768x3072` into `[128, 768, 3072]`.
pub fn parse_shape(s: &str) -> Result<Vec<usize>> {
    let dims: Result<Vec<usize>, _> = s.split('x').map(|d| d.trim().parse::<usize>()).collect();
    match dims {
        Ok(d) if !d.is_empty() && d.iter().all(|&x| x > 0) => Ok(d),
        _ => bail!("`{s}` is not a shape like 128x768 (positive integers joined by x)"),
    }
}

/// Expands one benchmark's grids into cases, dropping duplicates.
pub fn expand(suite: &str, bench: &BenchmarkSpec) -> Vec<Case> {
    let mut out: Vec<Case> = Vec::new();
    let grids: Vec<BTreeMap<String, Vec<ParamValue>>> =
        if bench.grids.is_empty() { vec![BTreeMap::new()] } else { bench.grids.clone() };
    for grid in &grids {
        let mut combos: Vec<BTreeMap<String, ParamValue>> = vec![BTreeMap::new()];
        for (key, values) in grid {
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    values.iter().map(move |v| {
                        let mut c = c.clone();
                        c.insert(key.clone(), v.clone());
                        c
                    })
                })
                .collect();
        }
        for params in combos {
            let case = Case::new(suite, &bench.name, params);
            if !out.iter().any(|c| c.id == case.id) {
                out.push(case);
            }
        }
    }
    out
}

/// Which cases of the expanded plan to keep.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    /// Keep ids matching this regex (or equal to it with `exact`).
    pub pattern: Option<String>,
    /// Match whole ids literally instead of as a regex.
    pub exact: bool,
    /// Drop ids matching this regex.
    pub skip: Option<String>,
}

impl Filter {
    /// Compiles the filter; a bad regex is an error that shows the regex error.
    pub fn compile(&self) -> Result<CompiledFilter> {
        let compile = |what: &str, re: &str| {
            Regex::new(re).map_err(|e| anyhow::anyhow!("invalid {what} regex `{re}`:\n{e}"))
        };
        let keep = match (&self.pattern, self.exact) {
            (Some(p), false) => Some(compile("filter", p)?),
            _ => None,
        };
        let skip = self.skip.as_deref().map(|s| compile("--skip", s)).transpose()?;
        Ok(CompiledFilter { keep, exact: if self.exact { self.pattern.clone() } else { None }, skip })
    }
}

/// A filter with its regexes compiled.
#[derive(Debug)]
pub struct CompiledFilter {
    keep: Option<Regex>,
    exact: Option<String>,
    skip: Option<Regex>,
}

impl CompiledFilter {
    /// Whether the case id passes the filter.
    pub fn matches(&self, id: &str) -> bool {
        if let Some(e) = &self.exact
            && id != e
        {
            return false;
        }
        if let Some(k) = &self.keep
            && !k.is_match(id)
        {
            return false;
        }
        !self.skip.as_ref().is_some_and(|s| s.is_match(id))
    }
}

/// Test-only: a `suite/bench` case from `(name, value)` pairs, the one
/// case builder every suite's tests share.
#[cfg(test)]
pub(crate) fn test_case(suite: &str, bench: &str, params: &[(&str, ParamValue)]) -> Case {
    Case::new(suite, bench, params.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SuiteSpec {
        SuiteSpec::parse(
            "t",
            r#"
[[benchmark]]
name = "mm"
description = "matmul"
[[benchmark.grid]]
shape = ["2x2x2", "4x4x4"]
threads = [1, "all"]
[[benchmark.grid]]
shape = ["2x2x2"]
threads = [1]
"#,
        )
        .unwrap()
    }

    #[test]
    fn grids_expand_to_products_without_duplicates() {
        let cases = expand("t", &spec().benchmarks[0]);
        let ids: Vec<_> = cases.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "t/mm/shape=2x2x2,threads=1",
                "t/mm/shape=2x2x2,threads=all",
                "t/mm/shape=4x4x4,threads=1",
                "t/mm/shape=4x4x4,threads=all"
            ]
        );
    }

    #[test]
    fn overrides_replace_values_and_reject_unknown_names() {
        let mut s = spec();
        let mut p = BTreeMap::new();
        p.insert("shape".to_string(), vec![ParamValue::Str("8x8x8".into())]);
        s.override_params("t", "mm", &p).unwrap();
        assert_eq!(expand("t", &s.benchmarks[0]).len(), 2);
        let err = s.override_params("t", "nope", &p).unwrap_err().to_string();
        assert!(err.contains("valid: mm"), "{err}");
        p.insert("bogus".into(), vec![ParamValue::Int(1)]);
        let err = s.override_params("t", "mm", &p).unwrap_err().to_string();
        assert!(err.contains("bogus") && err.contains("valid: shape, threads"), "{err}");
    }

    #[test]
    fn filters_keep_exact_and_skip() {
        let f = Filter { pattern: Some("mm/.*4x4".into()), ..Default::default() }.compile().unwrap();
        assert!(f.matches("t/mm/shape=4x4x4,threads=1"));
        assert!(!f.matches("t/mm/shape=2x2x2,threads=1"));
        let f = Filter { pattern: Some("t/mm/shape=2x2x2,threads=1".into()), exact: true, skip: None }
            .compile()
            .unwrap();
        assert!(f.matches("t/mm/shape=2x2x2,threads=1"));
        assert!(!f.matches("t/mm/shape=2x2x2,threads=all"));
        let f = Filter { pattern: None, exact: false, skip: Some("threads=all".into()) }.compile().unwrap();
        assert!(!f.matches("t/mm/shape=2x2x2,threads=all"));
        let err = Filter { pattern: Some("(".into()), ..Default::default() }.compile().unwrap_err();
        assert!(err.to_string().contains("invalid filter regex"));
    }

    #[test]
    fn thread_counts_parse_sort_and_sweep() {
        let t: ThreadCounts = "4,1,2,2".parse().unwrap();
        assert_eq!((t.max(), t.sweep(), t.to_string()), (4, vec![1, 2, 4], "1,2,4".to_string()));
        let one: ThreadCounts = "8".parse().unwrap();
        assert_eq!((one.max(), one.sweep()), (8, vec![]));
        for bad in ["0", "1,,2", "x", "", "1,-2", "5000"] {
            let err = bad.parse::<ThreadCounts>().unwrap_err();
            assert!(err.contains("sweep like 1,2,4"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_sweep_makes_threads_a_dimension_of_cpu_cases() {
        let cases = expand("t", &spec().benchmarks[0]);
        let swept = sweep_all(cases, &[1, 2]);
        let ids: Vec<_> = swept.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "t/mm/shape=2x2x2,threads=1",
                "t/mm/shape=2x2x2,threads=2",
                "t/mm/shape=4x4x4,threads=1",
                "t/mm/shape=4x4x4,threads=2",
            ]
        );
        let none = Case::new("s", "b", BTreeMap::new());
        assert_eq!(
            sweep_threads(none.clone(), &[2, 4])[1].id,
            "s/b/threads=4",
            "a case without threads gains it"
        );
        assert_eq!(sweep_threads(none.clone(), &[]), vec![none.clone()]);
        let gpu = none.on(crate::backend::Device::Cuda(0));
        assert_eq!(sweep_threads(gpu.clone(), &[1, 2]), vec![gpu], "only CPU cases are swept");
    }

    #[test]
    fn shapes_parse_or_explain() {
        assert_eq!(parse_shape("128x768x3072").unwrap(), vec![128, 768, 3072]);
        assert_eq!(parse_shape("1000").unwrap(), vec![1000]);
        assert!(parse_shape("12xx3").is_err());
        assert!(parse_shape("0x3").is_err());
    }

    #[test]
    fn a_device_other_than_the_cpu_is_part_of_the_id() {
        use crate::backend::Device;
        let mut p = BTreeMap::new();
        p.insert("n".to_string(), ParamValue::Int(4));
        let c = Case::new("s", "b", p.clone());
        assert_eq!(c.clone().on(Device::Cpu).id, "s/b/n=4");
        assert_eq!(c.on(Device::Cuda(1)).id, "s/b/n=4,device=cuda:1");
        assert_eq!(
            Case::new("s", "b", BTreeMap::new()).on(Device::Wasm(crate::backend::WasmRuntime::Node)).id,
            "s/b/device=wasm:node"
        );
    }
}
