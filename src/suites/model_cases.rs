//! The cases of a model file of the user's (`--model PATH`, or `file` in a
//! config): which suite and benchmark run it, llama-bench's tests it runs
//! ([`Test`]), and what `--model` and llama-bench's flags make of that
//! benchmark's plan ([`apply`]). The configuration asks this file, so it
//! names neither the suite nor its benchmark.

use crate::plan::{ParamValue, SuiteSpec};
use anyhow::Result;
use std::collections::BTreeMap;

/// The suite that runs a model file.
pub const SUITE: &str = "inference";
/// Its benchmark that runs a model file.
pub const BENCHMARK: &str = "gguf";
/// The benchmark's parameter naming the file.
pub const FILE_PARAM: &str = "file";

/// Whether a config's parameters of [`BENCHMARK`] (`None`: it sets none)
/// name a model file.
pub fn names_a_file<V>(params: Option<&BTreeMap<String, V>>) -> bool {
    params.is_some_and(|p| p.contains_key(FILE_PARAM))
}

/// Narrows [`SUITE`]'s spec to a model file's cases: with `file` (its path,
/// and the model's `name.type` read from its header), [`BENCHMARK`] alone on
/// that file, its cases' `model` parameter the file's; non-empty `tests` and
/// `depths` (llama-bench's flags) replace the benchmark's tests and depths.
pub fn apply(
    spec: &mut SuiteSpec,
    file: Option<(&str, Option<&str>)>,
    tests: &[String],
    depths: &[i64],
) -> Result<()> {
    if let Some((path, name)) = file {
        let mut p: BTreeMap<_, _> =
            [(FILE_PARAM.to_string(), vec![ParamValue::Str(path.to_string())])].into();
        if let Some(n) = name {
            p.insert("model".to_string(), vec![ParamValue::Str(n.to_string())]);
        }
        spec.override_params(SUITE, BENCHMARK, &p)?;
        spec.benchmarks.retain(|b| b.name == BENCHMARK);
    }
    let mut p = BTreeMap::new();
    if !tests.is_empty() {
        p.insert("test".to_string(), tests.iter().cloned().map(ParamValue::Str).collect());
    }
    if !depths.is_empty() {
        p.insert("depth".to_string(), depths.iter().copied().map(ParamValue::Int).collect());
    }
    if !p.is_empty() {
        spec.override_params(SUITE, BENCHMARK, &p)?;
    }
    Ok(())
}

/// One of llama-bench's tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// Map the file and build the model.
    Load,
    /// Encode a text with the file's tokenizer.
    Tokenize,
    /// Prompt processing of N tokens.
    Pp(usize),
    /// Generation of N tokens, one at a time.
    Tg(usize),
    /// A prompt of N then N2 generated tokens.
    Pg(usize, usize),
}

impl Test {
    /// Parses `load`, `tokenize`, `ppN`, `tgN` or `pgN,M` (spaces allowed after the letters).
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a test; write load, tokenize, pp512, tg128 or pg512,128");
        let num = |t: &str| t.trim().parse::<usize>().ok().filter(|&n| n > 0);
        let s2 = s.trim();
        if s2 == "load" {
            return Ok(Self::Load);
        }
        if s2 == "tokenize" {
            return Ok(Self::Tokenize);
        }
        if let Some(n) = s2.strip_prefix("pp") {
            return num(n).map(Self::Pp).ok_or_else(bad);
        }
        if let Some(n) = s2.strip_prefix("tg") {
            return num(n).map(Self::Tg).ok_or_else(bad);
        }
        if let Some((a, b)) = s2.strip_prefix("pg").and_then(|r| r.split_once(',')) {
            return match (num(a), num(b)) {
                (Some(a), Some(b)) => Ok(Self::Pg(a, b)),
                _ => Err(bad()),
            };
        }
        Err(bad())
    }
    /// (prompt tokens, generated tokens).
    pub fn lengths(self) -> (usize, usize) {
        match self {
            Self::Load | Self::Tokenize => (0, 0),
            Self::Pp(n) => (n, 0),
            Self::Tg(n) => (0, n),
            Self::Pg(a, b) => (a, b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tests_parse_in_llama_bench_vocabulary() {
        assert_eq!(Test::parse("pp512"), Ok(Test::Pp(512)));
        assert_eq!(Test::parse("tg 128"), Ok(Test::Tg(128)));
        assert_eq!(Test::parse("pg512,128"), Ok(Test::Pg(512, 128)));
        assert_eq!(Test::parse("load"), Ok(Test::Load));
        assert_eq!(Test::parse("tokenize"), Ok(Test::Tokenize));
        for bad in ["pp0", "tg", "pg1", "xx", "pg,3"] {
            assert!(Test::parse(bad).is_err(), "{bad}");
        }
    }
}
