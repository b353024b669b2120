//! The `gguf` cases laid out as llama-bench lays out its runs, beside
//! tfbench's own statistics: Markdown with llama-bench's columns (model,
//! size, params, backend, threads, test, t/s as mean ± sd over the samples)
//! plus tfbench's median rate and its interval; JSON with llama-bench's
//! `-o json` field names (`n_prompt`, `n_gen`, `n_depth`, `avg_ts`,
//! `stddev_ts`, `samples_ts`...) plus a `tfbench` object.
//!
//! t/s per sample is tokens per iteration over the sample's time per
//! iteration; llama-bench averages its repetitions the same way. Other
//! cases (and `load`, which has no tokens) are left out.

use crate::plan::ParamValue;
use crate::results::{CaseResult, RunReport};
use crate::workload::ThroughputKind;
use serde_json::json;
use std::fmt::Write as _;

/// One gguf case with tokens per iteration.
struct Row<'a> {
    case: &'a CaseResult,
    model: String,
    test: String,
    n_prompt: u64,
    n_gen: u64,
    depth: u64,
    tokens: f64,
    ts: Vec<f64>,
}

fn param<'a>(c: &'a CaseResult, k: &str) -> Option<&'a ParamValue> {
    c.params.get(k)
}

fn metric(c: &CaseResult, name: &str) -> Option<f64> {
    c.metrics.iter().find(|m| m.name == name).map(|m| m.value)
}

fn rows(report: &RunReport) -> Vec<Row<'_>> {
    let mut out = Vec::new();
    for c in report.cases.iter().filter(|c| c.suite == "inference" && c.benchmark == "gguf") {
        let Some(tokens) =
            c.throughput.iter().find(|t| t.kind == ThroughputKind::Tokens).map(|t| t.per_iteration)
        else {
            continue;
        };
        let test = param(c, "test").map(|v| v.to_string()).unwrap_or_default();
        let depth = match param(c, "depth") {
            Some(ParamValue::Int(d)) => (*d).max(0) as u64,
            _ => 0,
        };
        let (n_prompt, n_gen) = lengths(&test);
        let file = param(c, "file").map(|v| v.to_string()).unwrap_or_default();
        let model = std::path::Path::new(&file)
            .file_stem()
            .map_or(file.clone(), |s| s.to_string_lossy().into_owned());
        let ts = c
            .samples
            .iter()
            .filter(|s| s.nanos > 0.0)
            .map(|s| tokens * s.iterations as f64 * 1e9 / s.nanos)
            .collect();
        out.push(Row { case: c, model, test, n_prompt, n_gen, depth, tokens, ts });
    }
    out
}

/// (prompt, generated) tokens of `ppN`, `tgN`, `pgN,M`; (0, 0) otherwise.
fn lengths(test: &str) -> (u64, u64) {
    let num = |s: &str| s.trim().parse::<u64>().unwrap_or(0);
    if let Some(n) = test.strip_prefix("pp") {
        (num(n), 0)
    } else if let Some(n) = test.strip_prefix("tg") {
        (0, num(n))
    } else if let Some((a, b)) = test.strip_prefix("pg").and_then(|r| r.split_once(',')) {
        (num(a), num(b))
    } else {
        (0, 0)
    }
}

/// Mean and sample standard deviation.
fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let m = v.iter().sum::<f64>() / n;
    let sd =
        if v.len() > 1 { (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() } else { 0.0 };
    (m, sd)
}

/// llama-bench's test label: `pp512`, `tg128`, `pp512+tg128`, with ` @ dN` at depth.
fn label(r: &Row) -> String {
    let base = match (r.n_prompt, r.n_gen) {
        (p, 0) if p > 0 => format!("pp{p}"),
        (0, g) if g > 0 => format!("tg{g}"),
        (p, g) if p > 0 => format!("pp{p}+tg{g}"),
        _ => r.test.clone(),
    };
    if r.depth > 0 { format!("{base} @ d{}", r.depth) } else { base }
}

/// The Markdown table.
pub fn render_markdown(report: &RunReport) -> String {
    let threads = report.harness.threads;
    let mut out = String::from(
        "| model | size | params | backend | threads | test | t/s | tfbench median t/s [interval] |\n\
         | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n",
    );
    let rows = rows(report);
    if rows.is_empty() {
        out.push_str("\n(no `gguf` cases in this report: run `--suite inference --model FILE`)\n");
    }
    for r in rows {
        let size = metric(r.case, "model_bytes").map_or("?".into(), |b| format!("{:.2} MiB", b / 1048576.0));
        let params = metric(r.case, "params").map_or("?".into(), |p| format!("{:.2} M", p / 1e6));
        let (m, sd) = mean_sd(&r.ts);
        let tf = match r.case.throughput.iter().find(|t| t.kind == ThroughputKind::Tokens) {
            Some(t) if r.case.estimates.is_some() => format!(
                "{:.2} [{:.2}, {:.2}] ({:.0}%)",
                t.rate.point,
                t.rate.lower,
                t.rate.upper,
                t.rate.level * 100.0
            ),
            _ => crate::report::failure_text(&r.case.status).unwrap_or_else(|| "-".into()),
        };
        let ts = if r.ts.is_empty() { "-".into() } else { format!("{m:.2} ± {sd:.2}") };
        let _ = writeln!(
            out,
            "| {} | {size} | {params} | CPU | {threads} | {} | {ts} | {tf} |",
            r.model,
            label(&r)
        );
    }
    out
}

/// The JSON array.
pub fn render_json(report: &RunReport) -> anyhow::Result<String> {
    let threads = report.harness.threads;
    let v: Vec<serde_json::Value> = rows(report)
        .iter()
        .map(|r| {
            let (m, sd) = mean_sd(&r.ts);
            let ns: Vec<f64> = r.case.samples.iter().map(|s| s.nanos / s.iterations.max(1) as f64).collect();
            let (mns, sdns) = mean_sd(&ns);
            let t = r.case.throughput.iter().find(|t| t.kind == ThroughputKind::Tokens);
            json!({
                "model_filename": param(r.case, "file").map(|v| v.to_string()),
                "model_size": metric(r.case, "model_bytes"),
                "model_n_params": metric(r.case, "params"),
                "backends": "CPU",
                "n_threads": threads,
                "n_prompt": r.n_prompt,
                "n_gen": r.n_gen,
                "n_depth": r.depth,
                "test": label(r),
                "tokens_per_iteration": r.tokens,
                "avg_ns": finite(mns),
                "stddev_ns": finite(sdns),
                "avg_ts": finite(m),
                "stddev_ts": finite(sd),
                "samples_ns": ns,
                "samples_ts": r.ts,
                "tfbench": {
                    "id": r.case.id,
                    "status": crate::report::failure_text(&r.case.status).unwrap_or_else(|| "ok".into()),
                    "median_ts": t.filter(|_| r.case.estimates.is_some()).map(|t| t.rate.point),
                    "interval_ts": t.filter(|_| r.case.estimates.is_some()).map(|t| [t.rate.lower, t.rate.upper]),
                    "level": t.map(|t| t.rate.level),
                    "verified": r.case.verification.as_ref().map(|v| v.passed),
                },
            })
        })
        .collect();
    Ok(serde_json::to_string_pretty(&v)? + "\n")
}

/// JSON has no NaN: a missing figure is null.
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Case, ParamValue};
    use crate::results::Sample;
    use crate::workload::Metric;

    /// The fixture's first case turned into a `pp512` gguf case at depth 512.
    fn report() -> RunReport {
        let mut r = super::super::fixture();
        let mut c = r.cases[0].clone();
        let case = Case::new(
            "inference",
            "gguf",
            [
                ("depth".to_string(), ParamValue::Int(512)),
                ("file".to_string(), ParamValue::Str("/m/SmolLM2.Q4_1.gguf".into())),
                ("test".to_string(), ParamValue::Str("pp512".into())),
            ]
            .into_iter()
            .collect(),
        );
        (c.id, c.suite, c.benchmark, c.params) = (case.id, case.suite, case.benchmark, case.params);
        c.samples =
            [1.0e9, 2.0e9, 1.0e9].iter().map(|&n| Sample { iterations: 2, nanos: n, round: 0 }).collect();
        c.throughput[0].kind = ThroughputKind::Tokens;
        c.throughput[0].per_iteration = 512.0;
        c.metrics = vec![Metric::new("params", 134.5e6, ""), Metric::new("model_bytes", 96576768.0, "B")];
        r.cases = vec![c, r.cases[1].clone()];
        r
    }

    #[test]
    fn markdown_has_llama_bench_columns_and_mean_sd_of_per_sample_rates() {
        let r = report();
        let md = render_markdown(&r);
        let lines: Vec<&str> = md.lines().collect();
        assert!(lines[0].starts_with("| model | size | params | backend | threads | test | t/s |"), "{md}");
        assert_eq!(lines.len(), 3, "one row: other suites are left out\n{md}");
        // Samples of 2 iterations: 1024 tokens in 1 s, 2 s, 1 s -> 1024, 512, 1024 t/s.
        let row = lines[2];
        assert!(row.starts_with("| SmolLM2.Q4_1 | 92.10 MiB | 134.50 M | CPU |"), "{row}");
        assert!(row.contains("| pp512 @ d512 | 853.33 ± 295.60 |"), "{row}");
    }

    #[test]
    fn json_uses_llama_bench_field_names() {
        let j: serde_json::Value = serde_json::from_str(&render_json(&report()).unwrap()).unwrap();
        let a = &j[0];
        assert_eq!(
            (a["n_prompt"].as_u64(), a["n_gen"].as_u64(), a["n_depth"].as_u64()),
            (Some(512), Some(0), Some(512))
        );
        assert_eq!(a["samples_ts"].as_array().unwrap().len(), 3);
        assert!((a["avg_ts"].as_f64().unwrap() - 853.333).abs() < 1e-2);
        assert_eq!(a["avg_ns"].as_f64(), Some(2.0e9 / 3.0));
        assert!(a["tfbench"]["median_ts"].as_f64().is_some());
        assert_eq!(lengths("pg32,8"), (32, 8));
        assert_eq!(lengths("tokenize"), (0, 0));
    }
}
