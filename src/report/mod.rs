//! Renders a [`RunReport`] for people (table, markdown) and for tools (JSON,
//! JSON Lines, CSV, libtest bencher lines, Bencher's BMF, github-action-benchmark's
//! custom JSON, llama-bench's layout of the `gguf` cases). One file per format; `units`
//! holds the human formatting of times, rates and sizes they share.
//!
//! The JSON layout is documented in `docs/json-schema.md`.

use crate::results::{CaseStatus, RunReport};

pub mod bencher;
pub mod bmf;
pub mod csv;
pub mod custom;
pub mod html;
pub mod json;
pub mod jsonl;
pub mod llamabench;
pub mod machines;
pub mod markdown;
pub mod summary;
pub mod table;

pub use json::parse_json;
pub use jsonl::case_line;

/// Output format of a run report (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned table for a terminal, with harness facts and target checks.
    Table,
    /// The whole report as pretty-printed JSON (see docs/json-schema.md).
    Json,
    /// JSON Lines: a run line, one line per case, a summary line.
    Jsonl,
    /// One row per case with every headline statistic, RFC 4180 quoting.
    Csv,
    /// GitHub-flavoured Markdown table, for PR comments.
    Markdown,
    /// libtest bencher lines (`test id ... bench: N ns/iter (+/- D)`).
    Bencher,
    /// Bencher Metric Format JSON (`bencher run --adapter json`).
    Bmf,
    /// github-action-benchmark's custom JSON for `tool: customSmallerIsBetter`
    /// (median times).
    #[value(alias = "customSmallerIsBetter")]
    CustomSmallerIsBetter,
    /// github-action-benchmark's custom JSON for `tool: customBiggerIsBetter`
    /// (headline rates of the cases that declare work).
    #[value(alias = "customBiggerIsBetter")]
    CustomBiggerIsBetter,
    /// The `gguf` cases as llama-bench's Markdown table (model, size,
    /// params, backend, threads, test, t/s mean ± sd) beside tfbench's median.
    LlamaBench,
    /// The `gguf` cases as llama-bench's `-o json` records plus tfbench's figures.
    LlamaBenchJson,
}

/// Renders `report` in `format`. The text ends with a newline, ready for
/// `print!` or a file.
pub fn render(format: Format, report: &RunReport) -> anyhow::Result<String> {
    Ok(match format {
        Format::Table => table::render(report),
        Format::Json => json::render(report)?,
        Format::Jsonl => jsonl::render(report)?,
        Format::Csv => csv::render(report),
        Format::Markdown => markdown::render(report),
        Format::Bencher => bencher::render(report),
        Format::Bmf => bmf::render(report)?,
        Format::CustomSmallerIsBetter => custom::render(report, custom::Direction::SmallerIsBetter)?,
        Format::CustomBiggerIsBetter => custom::render(report, custom::Direction::BiggerIsBetter)?,
        Format::LlamaBench => llamabench::render_markdown(report),
        Format::LlamaBenchJson => llamabench::render_json(report)?,
    })
}

pub use crate::results::primary_throughput;

/// `phase: reason` of a failed case.
pub(crate) fn failure_text(status: &CaseStatus) -> Option<String> {
    match status {
        CaseStatus::Ok => None,
        CaseStatus::Failed { phase, reason } => Some(format!("{phase}: {reason}")),
        CaseStatus::Skipped { reason } => Some(format!("skipped: {reason}")),
    }
}

/// First line of `text`, cut to at most `max` characters with an ellipsis.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or("").trim();
    let more_lines = text.trim().lines().nth(1).is_some();
    if first.chars().count() <= max && !more_lines {
        return first.to_string();
    }
    let kept: String = first.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", kept.trim_end())
}

/// Cell texts shared by the table and markdown renderers.
pub(crate) mod cells {
    use crate::results::{Bound, CaseResult};
    use crate::units;

    /// Marker for a value that does not exist (failed case, nothing declared).
    pub const NONE: &str = "-";

    /// `1.23 ms [1.21, 1.25]`, or `-`.
    pub fn median(case: &CaseResult) -> String {
        case.estimates.as_ref().map_or_else(|| NONE.into(), |e| units::format_time_ci(&e.median))
    }

    /// `ok`, `FAILED: phase: reason` or `skipped: reason`, the reason cut to
    /// `max` characters.
    pub fn status(case: &CaseResult, max: usize) -> String {
        use crate::results::CaseStatus;
        match &case.status {
            CaseStatus::Ok => "ok".into(),
            CaseStatus::Failed { .. } => {
                let text = super::failure_text(&case.status).unwrap_or_default();
                format!("FAILED: {}", super::shorten(&without_case_id(&text, &case.id), max))
            }
            CaseStatus::Skipped { reason } => {
                format!("skipped: {}", super::shorten(&without_case_id(reason, &case.id), max))
            }
        }
    }

    /// `text` without a `case <id>: ` prefix naming the row's own case:
    /// suites start their errors with it for logs, and in a narrow cell it
    /// would crowd out the part that says what to do (the valid choices).
    fn without_case_id(text: &str, id: &str) -> String {
        super::summary::without_case_id(text, id)
    }

    /// One metric as `name value unit`: times and byte counts get scaled
    /// units, other values three significant digits.
    pub fn metric(m: &crate::results::Metric) -> String {
        // Errors are often tiny: keep three significant digits in exponent form.
        let num = |x: f64| {
            if x != 0.0 && x.abs() < 1e-3 { format!("{x:.2e}") } else { units::sig3(x) }
        };
        let value = match m.unit.as_str() {
            "ns" => units::format_time_ns(m.value),
            "B" => units::format_bytes(m.value),
            "%" => units::format_percent(m.value),
            "" | "ratio" => num(m.value),
            u => format!("{} {u}", num(m.value)),
        };
        format!("{} {value}", m.name)
    }

    /// Every metric of a case, comma-separated, or `-`.
    pub fn metrics(case: &CaseResult) -> String {
        if case.metrics.is_empty() {
            return NONE.into();
        }
        case.metrics.iter().map(metric).collect::<Vec<_>>().join(", ")
    }

    /// `312 GFLOP/s (89% peak)`, `312 GFLOP/s (89% of FMA)` with a
    /// cache-aware roof, `(166% of L2: measurement problem)` above
    /// [`crate::results::SUSPECT_PCT`], or `-`.
    pub fn throughput(case: &CaseResult) -> String {
        let Some(t) = super::primary_throughput(case) else { return NONE.into() };
        let rate = units::format_rate(t.rate.point, t.kind.rate_unit());
        match (t.pct_of_peak, &case.roof) {
            (Some(p), Some(roof)) if p > crate::results::SUSPECT_PCT => {
                format!("{rate} ({} of {}: measurement problem)", units::format_percent(p), roof.name)
            }
            (Some(p), Some(roof)) => format!("{rate} ({} of {})", units::format_percent(p), roof.name),
            (Some(p), None) => format!("{rate} ({} peak)", units::format_percent(p)),
            (None, _) => rate,
        }
    }

    /// `compute`, `memory`, `latency` or `-`.
    pub fn bound(case: &CaseResult) -> String {
        match case.bound {
            Some(Bound::Compute) => "compute",
            Some(Bound::Memory) => "memory",
            Some(Bound::Latency) => "latency",
            None => NONE,
        }
        .into()
    }

    /// `3 (1 severe)`, `0`, or `-`; removed samples are mentioned.
    pub fn outliers(case: &CaseResult) -> String {
        let Some(o) = &case.outliers else { return NONE.into() };
        let severe = o.low_severe + o.high_severe;
        let mut extra = Vec::new();
        if severe > 0 {
            extra.push(format!("{severe} severe"));
        }
        if o.removed > 0 {
            extra.push(format!("{} removed", o.removed));
        }
        if extra.is_empty() { o.total().to_string() } else { format!("{} ({})", o.total(), extra.join(", ")) }
    }

    /// Allocations per iteration, or `-`.
    pub fn allocs(case: &CaseResult) -> String {
        case.alloc.as_ref().map_or_else(|| NONE.into(), |a| units::format_count(a.allocs_per_iter))
    }

    /// Peak live bytes, or `-`.
    pub fn peak(case: &CaseResult) -> String {
        case.alloc.as_ref().map_or_else(|| NONE.into(), |a| units::format_bytes(a.peak_bytes as f64))
    }

    /// Notes joined by `; `.
    pub fn notes(case: &CaseResult) -> String {
        case.notes.join("; ")
    }
}

/// A realistic report for the renderers' tests: two measured cases (one
/// with a comma, quotes and a space in its id and notes) and one failed case.
#[cfg(test)]
pub(crate) fn fixture() -> RunReport {
    use crate::results::*;
    use std::collections::BTreeMap;

    let (matmul, softmax, layernorm) =
        (fixture_cases::matmul(), fixture_cases::softmax(), fixture_cases::layernorm());
    let mut environment = crate::env::Environment::gather();
    environment.cpu_model = "AMD EPYC 7763 64-Core Processor".into();
    let mut settings = BTreeMap::new();
    settings.insert("tensor".to_string(), crate::config::Settings::default());

    RunReport {
        schema_version: SCHEMA_VERSION,
        tfbench_version: env!("CARGO_PKG_VERSION").into(),
        started_at: "2025-01-02T03:04:05Z".into(),
        wall_time_secs: 42.5,
        environment,
        harness: HarnessInfo {
            timer_resolution_ns: 20.0,
            timer_overhead_ns: 24.7,
            empty_loop_ns_per_iter: 0.31,
            min_sample_ns: 1.0e6,
            threads: 2,
            settings,
        },
        machine_limits: Some(fixture_cases::limits()),
        targets: fixture_cases::targets(&matmul.id, &softmax.id),
        cases: vec![matmul, softmax, layernorm],
        run_id: "fixture-run".into(),
        canaries: Vec::new(),
        load: Vec::new(),
    }
}

/// The fixture's cases, machine limits and targets, one function each.
#[cfg(test)]
mod fixture_cases {
    use crate::plan::{Case, ParamValue};
    use crate::probe::MachineLimits;
    use crate::results::*;
    use crate::workload::{ThroughputKind, Verification};

    /// Ten samples of `iterations` iterations around `median` ns each, in
    /// two rounds, one of them a high outlier.
    fn samples(median: f64, iterations: u64) -> Vec<Sample> {
        let spread = [0.0, -0.004, 0.003, 0.011, -0.002, 0.001, 0.25, -0.001, 0.002, 0.006];
        spread
            .iter()
            .enumerate()
            .map(|(i, d)| Sample {
                iterations,
                nanos: median * iterations as f64 * (1.0 + d),
                round: (i / 5) as u32,
            })
            .collect()
    }

    /// Estimates around `median`, its interval `[lower, upper]`.
    fn estimates(median: f64, lower: f64, upper: f64) -> Estimates {
        Estimates {
            median: Estimate { point: median, lower, upper, level: 0.95 },
            mean: Estimate {
                point: median * 1.026,
                lower: median * 1.001,
                upper: median * 1.07,
                level: 0.95,
            },
            std_dev: median * 0.075,
            mad: median * 0.003,
            min: median * 0.996,
            max: median * 1.25,
            p50: median,
            p90: median * 1.012,
            p99: median * 1.226,
            iqr_over_median: 0.0071,
        }
    }

    /// `per_iteration` units of `kind` per iteration at `e`'s median.
    fn rate(kind: ThroughputKind, per_iteration: f64, e: &Estimates, pct: Option<f64>) -> ThroughputEstimate {
        let m = &e.median;
        ThroughputEstimate {
            kind,
            per_iteration,
            rate: Estimate {
                point: per_iteration / m.point * 1e9,
                lower: per_iteration / m.upper * 1e9,
                upper: per_iteration / m.lower * 1e9,
                level: m.level,
            },
            pct_of_peak: pct,
        }
    }

    /// The case `suite/bench` with `params`.
    fn case(suite: &str, bench: &str, params: &[(&str, ParamValue)]) -> Case {
        Case::new(suite, bench, params.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
    }

    /// A GEMM 256^3 at 312 GFLOP/s, compute bound.
    pub(super) fn matmul() -> CaseResult {
        let mm = case(
            "tensor",
            "matmul",
            &[("shape", ParamValue::Str("256x256x256".into())), ("threads", ParamValue::Int(1))],
        );
        let flops = 2.0 * 256f64.powi(3);
        let mm_est = estimates(107_546.0, 107_100.0, 108_020.0);
        CaseResult {
            id: mm.id.clone(),
            suite: mm.suite,
            benchmark: mm.benchmark,
            params: mm.params,
            status: CaseStatus::Ok,
            verification: Some(Verification {
                passed: true,
                reference: "naive triple loop, 64x64x64".into(),
                max_error: Some(3.1e-6),
                detail: "4096 values within atol 1e-4 + rtol 1e-4".into(),
            }),
            sampling: Some(SamplingInfo {
                warm_up_ns: 1.0e9,
                iterations_per_sample: 28,
                samples: 10,
                requested_samples: 10,
                stopped_by: StopReason::SampleSize,
                prepare_ns: 1.5e6,
                verify_ns: 2.5e6,
                placements: None,
                timing_suspect: None,
            }),
            samples: samples(107_546.0, 28),
            throughput: vec![
                rate(ThroughputKind::Bytes, 3.0 * 256.0 * 256.0 * 4.0, &mm_est, Some(24.4)),
                rate(ThroughputKind::Flops, flops, &mm_est, Some(89.14)),
            ],
            estimates: Some(mm_est),
            outliers: Some(OutlierCounts {
                low_severe: 0,
                low_mild: 0,
                high_mild: 2,
                high_severe: 1,
                removed: 0,
            }),
            alloc: Some(AllocStats { allocs_per_iter: 0.0, bytes_per_iter: 0.0, peak_bytes: 0 }),
            bound: Some(Bound::Compute),
            notes: vec![],
            metrics: vec![],
            roof: None,
            scaling: None,
            inside: None,
        }
    }

    /// A softmax over 1024 rows of 768 at 27.4 GB/s, memory bound, noisy.
    pub(super) fn softmax() -> CaseResult {
        let sm = case(
            "tensor",
            "softmax",
            &[("note", ParamValue::Str("say \"hi\"".into())), ("rows", ParamValue::Int(1024))],
        );
        let bytes = 2.0 * 1024.0 * 768.0 * 4.0;
        let sm_est = estimates(229_615.0, 228_100.0, 231_900.0);
        CaseResult {
            id: sm.id.clone(),
            suite: sm.suite,
            benchmark: sm.benchmark,
            params: sm.params,
            status: CaseStatus::Ok,
            verification: Some(Verification::pass("f64 reference, 8 rows")),
            sampling: Some(SamplingInfo {
                warm_up_ns: 1.0e9,
                iterations_per_sample: 13,
                samples: 10,
                requested_samples: 100,
                stopped_by: StopReason::MaxTime,
                prepare_ns: 1.5e6,
                verify_ns: 2.5e6,
                placements: None,
                timing_suspect: None,
            }),
            samples: samples(229_615.0, 13),
            throughput: vec![
                rate(ThroughputKind::Elements, 1024.0 * 768.0, &sm_est, None),
                rate(ThroughputKind::Bytes, bytes, &sm_est, Some(91.3)),
            ],
            estimates: Some(sm_est),
            outliers: Some(OutlierCounts {
                low_severe: 0,
                low_mild: 0,
                high_mild: 1,
                high_severe: 0,
                removed: 0,
            }),
            alloc: Some(AllocStats {
                allocs_per_iter: 2.0,
                bytes_per_iter: bytes,
                peak_bytes: 3 * 1024 * 1024,
            }),
            bound: Some(Bound::Memory),
            notes: vec![
                "noisy: IQR/median 12.5%, above 10%".into(),
                "sampling cut by the \"max-time\" budget (10 of 100 samples)".into(),
            ],
            metrics: vec![
                crate::results::Metric::new("max_abs_error", 2.5e-7, ""),
                crate::results::Metric::new("working_set", 6291456.0, "B"),
            ],
            roof: None,
            scaling: None,
            inside: None,
        }
    }

    /// A LayerNorm that failed its self-check: never timed.
    pub(super) fn layernorm() -> CaseResult {
        let ln = case("tensor", "layernorm", &[("rows", ParamValue::Int(4096))]);
        let reason = "verification against naive loop failed: value 17: got 1.5, reference 1.25 (atol 1e-5, rtol 1e-4)";
        CaseResult {
            id: ln.id.clone(),
            suite: ln.suite,
            benchmark: ln.benchmark,
            params: ln.params,
            status: CaseStatus::Failed { phase: "verify".into(), reason: reason.into() },
            verification: Some(Verification {
                passed: false,
                reference: "naive loop".into(),
                max_error: Some(0.25),
                detail: "value 17: got 1.5, reference 1.25 (atol 1e-5, rtol 1e-4)".into(),
            }),
            sampling: None,
            samples: vec![],
            estimates: None,
            outliers: None,
            throughput: vec![],
            alloc: None,
            bound: None,
            notes: vec![],
            metrics: vec![],
            roof: None,
            scaling: None,
            inside: None,
        }
    }

    /// The probed limits of a two-thread EPYC.
    pub(super) fn limits() -> MachineLimits {
        MachineLimits {
            fingerprint: "amd-epyc-7763-2c".into(),
            measured_at: "2025-01-01T00:00:00Z".into(),
            threads: 2,
            peak_flops_one_core: 1.75e11,
            peak_flops_all_cores: 3.5e11,
            copy_bandwidth_one_thread: 2.2e10,
            copy_bandwidth_all_threads: 2.8e10,
            triad_bandwidth_one_thread: 2.4e10,
            triad_bandwidth_all_threads: 3.0e10,
            load: None,
            levels: Vec::new(),
            cores: None,
        }
    }

    /// One target met (the GEMM's) and one not (the softmax's).
    pub(super) fn targets(matmul_id: &str, softmax_id: &str) -> Vec<TargetCheck> {
        vec![
            TargetCheck {
                name: "best GEMM vs probed FMA peak (all cores)".into(),
                case_id: matmul_id.to_string(),
                measured: 3.12e11,
                limit: 3.5e11,
                unit: "FLOP/s".into(),
                ratio: 3.12e11 / 3.5e11,
                required: 0.8,
                met: true,
                caveat: None,
            },
            TargetCheck {
                name: "softmax vs triad bandwidth".into(),
                case_id: softmax_id.to_string(),
                measured: 2.74e10,
                limit: 3.0e10,
                unit: "B/s".into(),
                ratio: 2.74e10 / 3.0e10,
                required: 0.95,
                met: false,
                caveat: None,
            },
        ]
    }
}

/// Asserts two JSON values are equal, numbers up to a few ULPs: serde_json
/// without its `float_roundtrip` feature may parse a 17-digit decimal one ULP
/// away from the `f64` that was written.
#[cfg(test)]
pub(crate) fn assert_same_json(got: &serde_json::Value, want: &serde_json::Value) {
    fn walk(path: &str, got: &serde_json::Value, want: &serde_json::Value) {
        use serde_json::Value;
        match (got, want) {
            (Value::Number(g), Value::Number(w)) => {
                let (g, w) = (g.as_f64().unwrap(), w.as_f64().unwrap());
                assert!((g - w).abs() <= 4.0 * f64::EPSILON * w.abs(), "{path}: {g} != {w}");
            }
            (Value::Array(g), Value::Array(w)) => {
                assert_eq!(g.len(), w.len(), "{path}: array lengths");
                for (i, (g, w)) in g.iter().zip(w).enumerate() {
                    walk(&format!("{path}[{i}]"), g, w);
                }
            }
            (Value::Object(g), Value::Object(w)) => {
                let keys = |m: &serde_json::Map<String, Value>| m.keys().cloned().collect::<Vec<_>>();
                assert_eq!(keys(g), keys(w), "{path}: keys");
                for (k, w) in w {
                    walk(&format!("{path}.{k}"), &g[k], w);
                }
            }
            _ => assert_eq!(got, want, "{path}"),
        }
    }
    walk("$", got, want);
}

#[cfg(test)]
mod tests;
