//! `run`'s llama-bench flags for a model of the user's (`--model PATH`, or a
//! config's `[suites.inference.benchmarks.gguf] file`): which tests, at
//! which depths, how many repetitions. Parsing only: the values feed the
//! same `test` and `depth` parameters a config file sets (`config::resolve`).
//!
//! The spellings are llama-bench's (`-p 512 -n 128 -pg 512,128 -d 0,512 -r
//! 5`), comma-separated lists included, plus `--tests` for tfbench's own
//! `load` and `tokenize` tests; `--pg` takes two dashes (a clap short flag is
//! one letter).

use clap::Args;

/// The tests, depths and repetitions of the model's `gguf` benchmark.
#[derive(Debug, Args, Clone, Default)]
pub struct LlamaBenchFlags {
    /// The model's tests, comma-separated: load, tokenize, ppN, tgN, pgN,M
    /// (e.g. `load,pp512,pg512,128`); with -p, -n and --pg they add up and
    /// replace the default list (load, tokenize, pp512, tg128).
    #[arg(long = "tests", value_name = "LIST", value_parser = parse_tests, help_heading = MODEL)]
    pub tests: Vec<TestList>,
    /// Prompt processing tests ppN, comma-separated (llama-bench's -p).
    #[arg(short = 'p', long = "n-prompt", value_name = "N", value_delimiter = ',',
          value_parser = |s: &str| parse_count(s, "--n-prompt", "pp"), help_heading = MODEL)]
    pub n_prompt: Vec<String>,
    /// Text generation tests tgN, comma-separated (llama-bench's -n).
    #[arg(short = 'n', long = "n-gen", value_name = "N", value_delimiter = ',',
          value_parser = |s: &str| parse_count(s, "--n-gen", "tg"), help_heading = MODEL)]
    pub n_gen: Vec<String>,
    /// A prompt of N tokens then M generated, pgN,M (llama-bench's -pg; repeatable).
    #[arg(long = "pg", value_name = "N,M", value_parser = parse_pg, help_heading = MODEL)]
    pub pg: Vec<String>,
    /// Tokens already in the KV cache before each test, comma-separated
    /// (llama-bench's -d) [default: 0].
    #[arg(short = 'd', long = "n-depth", value_name = "D", value_delimiter = ',',
          value_parser = parse_depth, help_heading = MODEL)]
    pub n_depth: Vec<i64>,
    /// Timed repetitions of each test (llama-bench's -r): --sample-size N,
    /// at least 2 for a spread (a sample of a short test may hold several runs).
    #[arg(short = 'r', long = "repetitions", value_name = "N", conflicts_with = "sample_size",
          value_parser = clap::value_parser!(u32).range(2..), help_heading = MODEL)]
    pub repetitions: Option<u32>,
}

/// The `--help` heading of these flags.
const MODEL: &str = "Model tests (with --model, as llama-bench)";

/// One `--tests` value: tests in their case-id spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestList(pub Vec<String>);

impl LlamaBenchFlags {
    /// Every test the flags name, in the order given, each once, spelled as
    /// the `test` parameter (`pp512`, `pg512,128`); empty when none were given.
    pub fn test_list(&self) -> Vec<String> {
        let all = self.tests.iter().flat_map(|l| l.0.iter()).chain(&self.n_prompt).chain(&self.n_gen);
        let mut out: Vec<String> = Vec::new();
        for t in all.chain(&self.pg) {
            if !out.contains(t) {
                out.push(t.clone());
            }
        }
        out
    }

    /// The first of these flags given on the command line, for messages
    /// about them (`None`: none given).
    pub fn first_flag(&self) -> Option<&'static str> {
        [
            (!self.tests.is_empty(), "--tests"),
            (!self.n_prompt.is_empty(), "--n-prompt"),
            (!self.n_gen.is_empty(), "--n-gen"),
            (!self.pg.is_empty(), "--pg"),
            (!self.n_depth.is_empty(), "--n-depth"),
            (self.repetitions.is_some(), "--repetitions"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }
}

/// The valid forms, in every message about a bad value.
const FORMS: &str = "load, tokenize, ppN, tgN or pgN,M with N, M at least 1 (e.g. pp512,tg128,pg512,128)";

/// A positive token count.
fn count(s: &str) -> Option<usize> {
    s.trim().parse::<usize>().ok().filter(|&n| n > 0)
}

/// One test in the benchmark's spelling (`load`, `tokenize`, `ppN`, `tgN`,
/// `pgN,M`, `pg` with its second number already joined), checked by the
/// benchmark's own parser so the flags and a config accept the same tests.
fn one_test(t: &str) -> Result<String, String> {
    let t = t.trim();
    match crate::suites::model_cases::Test::parse(t) {
        Ok(_) if !t.contains(' ') => Ok(t.to_string()),
        _ => Err(format!("`{t}` is not a test; valid: {FORMS}")),
    }
}

/// `--tests LIST`: comma-separated tests, where a bare number after `pgN`
/// is that test's M (`pg512,128,tg128` is pg512,128 and tg128).
fn parse_tests(s: &str) -> Result<TestList, String> {
    let mut out: Vec<String> = Vec::new();
    for part in s.split(',').map(str::trim) {
        let joins = part.chars().all(|c| c.is_ascii_digit()) && !part.is_empty();
        match out.last_mut() {
            Some(last) if joins && last.starts_with("pg") && !last.contains(',') => {
                last.push(',');
                last.push_str(part);
            }
            _ => out.push(part.to_string()),
        }
    }
    if out.is_empty() || out.iter().any(String::is_empty) {
        return Err(format!("`{s}` has an empty test; valid: {FORMS}"));
    }
    Ok(TestList(out.iter().map(|t| one_test(t)).collect::<Result<_, _>>()?))
}

/// `-p N` / `-n N`: one count of a list, as the test `{prefix}N`.
fn parse_count(s: &str, flag: &str, prefix: &str) -> Result<String, String> {
    match count(s) {
        Some(n) => Ok(format!("{prefix}{n}")),
        None => Err(format!(
            "`{s}` is not a token count for {flag}: a whole number at least 1 (leave {flag} out for no {prefix} test)"
        )),
    }
}

/// `--pg N,M`.
fn parse_pg(s: &str) -> Result<String, String> {
    let pair = s.split(',').map(str::trim).collect::<Vec<_>>().join(",");
    one_test(&format!("pg{pair}")).map_err(|_| {
        format!("`{s}` is not a prompt and generation pair for --pg: N,M with both at least 1 (e.g. 512,128)")
    })
}

/// `-d D`: a non-negative count of cached positions.
fn parse_depth(s: &str) -> Result<i64, String> {
    s.trim().parse::<u32>().map(i64::from).map_err(|_| {
        format!(
            "`{s}` is not a depth for --n-depth: a whole number of tokens already in the KV cache, 0 or more"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_lists_join_pg_pairs_and_refuse_bad_tests() {
        let l = parse_tests("load, pp512,pg512,128,tg128,tokenize").unwrap();
        assert_eq!(l.0, ["load", "pp512", "pg512,128", "tg128", "tokenize"]);
        for bad in ["xx5", "pp0", "pg512", "pg512,0", "tg", "pp512,,tg1", "", "128"] {
            let e = parse_tests(bad).unwrap_err();
            assert!(e.contains("valid: load, tokenize, ppN"), "{bad}: {e}");
        }
        assert_eq!(parse_count("64", "--n-prompt", "pp").unwrap(), "pp64");
        assert!(parse_count("0", "--n-gen", "tg").unwrap_err().contains("--n-gen"));
        assert_eq!(parse_pg("16, 8").unwrap(), "pg16,8");
        assert!(parse_pg("16").unwrap_err().contains("N,M"));
        assert_eq!(parse_depth("0"), Ok(0));
        assert!(parse_depth("x").unwrap_err().contains("--n-depth"));
        assert!(parse_depth("-1").is_err());
    }

    #[test]
    fn flags_add_up_in_order_each_test_once() {
        let m = LlamaBenchFlags {
            tests: vec![TestList(vec!["load".into(), "pp16".into()])],
            n_prompt: vec!["pp16".into(), "pp32".into()],
            n_gen: vec!["tg8".into()],
            pg: vec!["pg4,2".into()],
            ..Default::default()
        };
        assert_eq!(m.test_list(), ["load", "pp16", "pp32", "tg8", "pg4,2"]);
        assert_eq!(m.first_flag(), Some("--tests"));
        assert_eq!(LlamaBenchFlags::default().first_flag(), None);
        let d = LlamaBenchFlags { n_depth: vec![0], ..Default::default() };
        assert_eq!((d.first_flag(), d.test_list().len()), (Some("--n-depth"), 0));
    }
}
