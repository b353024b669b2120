//! The memory suite: allocators and the tensor pool, allocation patterns,
//! pool efficiency and pressure, tracking overhead, tensor buffers, model
//! footprints, bandwidth per cache level and the pointer-chasing latency
//! curve.
//!
//! | benchmark           | file            |
//! |---------------------|-----------------|
//! | `alloc`, `tracking_overhead`, `tensor_alloc`, `alloc_overhead` | `alloc_bench.rs` |
//! | `pattern`, `pool_pressure` | `patterns.rs` |
//! | (the pool) | `pool.rs`, `extents.rs` |
//! | `footprint`         | `footprint.rs`  |
//! | `bandwidth`         | `bandwidth.rs`  |
//! | `latency`, `cache_levels` | `latency.rs` |
//!
//! Every case checks itself before it is timed (contents written and read
//! back, alignment, no two live blocks overlapping, every allocation freed,
//! kernels against scalar loops, footprints against closed-form counts and
//! the counting allocator), and every timed loop is watched for leaks.

use crate::plan::Case;
use crate::suites::{
    Benchmarks, Limit, ParamRule, Suite, TargetMatch, TargetSpec, ThroughputKind, Workload, dispatch, names,
};
use anyhow::{Result, bail};

mod alloc_bench;
pub mod allocators;
mod bandwidth;
mod extents;
mod footprint;
mod latency;
mod patterns;
pub mod pool;

/// Allocators, pools, footprints, bandwidth and cache latency.
pub struct MemorySuite;

/// Benchmarks of `suites/memory.toml`, in file order, with what prepares each.
const BENCHMARKS: Benchmarks = &[
    ("alloc", |c, _| alloc_bench::prepare_alloc(c)),
    ("pattern", |c, _| patterns::prepare_pattern(c)),
    ("pool_pressure", |c, _| patterns::prepare_pressure(c)),
    ("tracking_overhead", |c, _| alloc_bench::prepare_tracking(c)),
    ("tensor_alloc", |c, _| alloc_bench::prepare_tensor_alloc(c)),
    ("alloc_overhead", |c, _| alloc_bench::prepare_overhead(c)),
    ("footprint", |c, _| footprint::prepare(c)),
    ("bandwidth", bandwidth::prepare),
    ("latency", |c, _| latency::prepare_latency(c)),
    ("cache_levels", |c, _| latency::prepare_levels(c)),
];

impl Suite for MemorySuite {
    fn name(&self) -> &'static str {
        "memory"
    }
    fn describe(&self) -> &'static str {
        "Memory: allocators vs a size-class tensor pool, patterns, fragmentation, budgets, footprints, bandwidth, cache latency"
    }
    fn spec_toml(&self) -> &'static str {
        include_str!("../../../suites/memory.toml")
    }
    fn benchmarks(&self) -> Vec<&'static str> {
        names(BENCHMARKS)
    }
    fn targets(&self) -> Vec<TargetSpec> {
        vec![
            TargetSpec {
                name: "STREAM triad in DRAM on all threads, >= 90% of the probed triad bandwidth",
                case_pattern: r"^memory/bandwidth/kernel=triad,level=dram,threads=all$",
                matching: TargetMatch::Fastest,
                kind: ThroughputKind::Bytes,
                limit: Limit::TriadAllThreads,
                required: 0.9,
            },
            TargetSpec {
                name: "STREAM triad in DRAM on one thread, >= 90% of the probed one-thread triad",
                case_pattern: r"^memory/bandwidth/kernel=triad,level=dram,threads=1$",
                matching: TargetMatch::Fastest,
                kind: ThroughputKind::Bytes,
                limit: Limit::TriadOneThread,
                required: 0.9,
            },
        ]
    }
    fn param_rule(&self, benchmark: &str, key: &str) -> Option<ParamRule> {
        Some(match (benchmark, key) {
            (_, "allocator") => ParamRule::OneOf(allocators::ALLOCATORS),
            (_, "tracker") => ParamRule::OneOf(alloc_bench::TRACKERS),
            (_, "init") => ParamRule::OneOf(alloc_bench::INITS),
            (_, "align") => ParamRule::OneOf(alloc_bench::ALIGNS),
            (_, "pattern") => ParamRule::OneOf(patterns::PATTERNS),
            (_, "model") => ParamRule::OneOf(crate::model::config::PRESETS),
            ("footprint", "dtype") => ParamRule::Check(|v| {
                crate::suites::params::one_of(v, &footprint::DTYPES.iter().map(|d| d.0).collect::<Vec<_>>())
            }),
            (_, "kernel") => ParamRule::OneOf(bandwidth::KERNELS),
            (_, "level") => ParamRule::OneOf(bandwidth::LEVELS),
            (_, "shape") => ParamRule::Shape("BATCHxSEQ"),
            // A percentage of the budget (over 100 asks for more than it holds).
            (_, "fill") => ParamRule::Int { min: 1, max: 1000 },
            // Two 64-byte lines: the shortest pointer chain.
            ("latency", "size") => ParamRule::Int { min: 128, max: i64::MAX },
            (_, "size" | "budget" | "elements" | "batch" | "context") => ParamRule::POSITIVE,
            (_, "threads") => ParamRule::Threads,
            _ => return None,
        })
    }
    fn prepare(&self, case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
        dispatch(self.name(), BENCHMARKS, case, ctx)
    }
}

/// A positive byte-size parameter (`size`, `budget`, ...).
pub(crate) fn bytes_param(case: &Case, key: &str) -> Result<usize> {
    let n = case.usize(key)?;
    if n == 0 {
        bail!("case {}: `{key}` must be a positive number of bytes", case.id);
    }
    Ok(n)
}

/// Median, p99 and max of `ns` (sorted in place), as metrics named `prefix_*`.
pub(crate) fn percentiles(prefix: &str, ns: &mut [f64]) -> Vec<crate::workload::Metric> {
    use crate::workload::Metric;
    if ns.is_empty() {
        return Vec::new();
    }
    ns.sort_by(f64::total_cmp);
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize];
    vec![
        Metric::new(format!("{prefix}_p50"), at(0.5), "ns"),
        Metric::new(format!("{prefix}_p99"), at(0.99), "ns"),
        Metric::new(format!("{prefix}_max"), at(1.0), "ns"),
    ]
}

/// The cost of reading the clock twice, so single-call timings can drop it
/// (the smallest of many back-to-back reads).
pub(crate) fn clock_overhead_ns() -> f64 {
    (0..1000)
        .map(|_| {
            let t = std::time::Instant::now();
            t.elapsed().as_nanos() as f64
        })
        .fold(f64::INFINITY, f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ParamValue, SuiteSpec, expand};
    use std::collections::BTreeMap;

    fn spec() -> SuiteSpec {
        SuiteSpec::parse("memory", MemorySuite.spec_toml()).unwrap()
    }

    #[test]
    fn every_target_matches_a_default_case() {
        for t in MemorySuite.targets() {
            let re = regex::Regex::new(t.case_pattern).unwrap();
            let n = spec()
                .benchmarks
                .iter()
                .flat_map(|b| expand("memory", b))
                .filter(|c| re.is_match(&c.id))
                .count();
            assert_eq!(n, 1, "{}", t.name);
        }
    }

    #[test]
    fn bad_params_name_the_valid_choices() {
        let err =
            crate::suites::prepare_standalone(&MemorySuite, &Case::new("memory", "nope", BTreeMap::new()))
                .err()
                .unwrap()
                .to_string();
        assert!(err.contains("valid: alloc, pattern"), "{err}");
        let mut p = BTreeMap::new();
        p.insert("allocator".to_string(), ParamValue::Str("jemalloc".into()));
        p.insert("size".to_string(), ParamValue::Int(64));
        let err = crate::suites::prepare_standalone(&MemorySuite, &Case::new("memory", "alloc", p))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("valid: system, pool, mimalloc"), "{err}");
        let mut p = BTreeMap::new();
        p.insert("kernel".to_string(), ParamValue::Str("fma".into()));
        p.insert("level".to_string(), ParamValue::Str("l1".into()));
        p.insert("threads".to_string(), ParamValue::Int(1));
        let err = crate::suites::prepare_standalone(&MemorySuite, &Case::new("memory", "bandwidth", p))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("valid: copy, scale, add, triad"), "{err}");
    }

    /// Every cheap default case prepares, verifies and runs (the big ones
    /// run in the integration test through the binary).
    #[test]
    fn small_default_cases_prepare_verify_and_run() {
        let mut checked = 0;
        for b in spec().benchmarks {
            for case in expand("memory", &b) {
                let big = case.usize("size").is_ok_and(|s| s > 1 << 20)
                    || case.str("level").is_ok_and(|l| l == "dram" || l == "l3")
                    || matches!(b.name.as_str(), "cache_levels" | "footprint" | "latency" | "alloc_overhead")
                    || case.usize("elements").is_ok_and(|e| e > 1 << 20);
                if big {
                    continue;
                }
                let mut w = match crate::suites::prepare_standalone(&MemorySuite, &case) {
                    Ok(w) => w,
                    Err(e) if e.downcast_ref::<crate::suites::SkipCase>().is_some() => continue,
                    Err(e) => panic!("{}: {e:#}", case.id),
                };
                let v = w.verify().unwrap_or_else(|e| panic!("{}: {e:#}", case.id));
                assert!(v.passed, "{}: {} {}", case.id, v.reference, v.detail);
                w.run(3).unwrap_or_else(|e| panic!("{}: {e:#}", case.id));
                assert!(!w.throughput().is_empty());
                let m = w.metrics();
                assert!(m.iter().all(|m| m.value.is_finite()), "{}: {m:?}", case.id);
                checked += 1;
            }
        }
        assert!(checked >= 30, "only {checked} cases checked");
    }
}
