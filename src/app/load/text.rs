//! The summary `tfbench load` prints: one line per run, the search's
//! answer, the self-check, utilisation, energy and cost.

use super::imp::{Results, Run};
use crate::load::usage::Price;
use std::fmt::Write;

/// One run's verdict, for the search's progress lines.
pub fn verdict(r: &Run) -> String {
    let s = &r.summary;
    let head = match r.valid {
        Some(true) => "valid  ".to_string(),
        Some(false) => "INVALID".to_string(),
        None => String::new(),
    };
    let mut line = format!(
        "{head} {}/{} done, p99 TTFT {:.0} ms, p99 TPOT {:.1} ms, p99 E2E {:.0} ms",
        s.completed, s.queries, s.ttft.p99, s.tpot.p99, s.e2e.p99
    );
    if !r.why.is_empty() {
        let _ = write!(line, " ({})", r.why.join("; "));
    }
    line
}

/// Money per million output tokens and per thousand completed queries.
pub fn cost(p: &Price, wall_s: f64, runs: &[Run]) -> serde_json::Value {
    let tokens: u64 = runs.iter().map(|r| r.summary.output_tokens).sum();
    let done: usize = runs.iter().map(|r| r.summary.completed).sum();
    let spent = p.of(wall_s);
    let per = |n: f64, unit: f64| (n > 0.0).then(|| spent / n * unit);
    serde_json::json!({
        "price": p,
        "wall_s": wall_s,
        "spent": spent,
        "per_million_output_tokens": per(tokens as f64, 1e6),
        "per_thousand_queries": per(done as f64, 1e3),
        "note": "the machine's price over the command's wall time (every run), divided by what it completed",
    })
}

fn run_line(out: &mut String, r: &Run) {
    let s = &r.summary;
    let qps = r.qps.map_or("-".to_string(), |q| format!("{q:.3}"));
    let valid = match r.valid {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "-",
    };
    let good = s.goodput.as_ref().map_or("-".to_string(), |g| format!("{:.0}%", 100.0 * g.share));
    let _ = writeln!(
        out,
        "{qps:>8} {valid:>5} {:>5}/{:<4} {:>8.0} {:>8.0} {:>7.1} {:>7.1} {:>7.1} {:>8.0} {:>8.0} {:>8.1} {:>7}",
        s.completed,
        s.failed,
        s.ttft.p50,
        s.ttft.p99,
        s.tpot.p50,
        s.tpot.p99,
        s.itl.p99,
        s.e2e.p50,
        s.e2e.p99,
        s.output_tok_per_s,
        good
    );
}

/// The printed summary.
pub fn render(res: &Results) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "tfbench load: {} scenario against {}", res.scenario, res.target);
    let _ = writeln!(
        out,
        "{} on {} ({} logical CPUs), load average {} before, {} after",
        res.date_utc,
        res.cpu,
        res.logical_cpus,
        res.loadavg_before.as_deref().unwrap_or("?"),
        res.loadavg_after.as_deref().unwrap_or("?")
    );
    let _ = writeln!(
        out,
        "{:>8} {:>5} {:>10} {:>8} {:>8} {:>7} {:>7} {:>7} {:>8} {:>8} {:>8} {:>7}",
        "qps",
        "valid",
        "done/fail",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TPOT p99",
        "ITL p99",
        "E2E p50",
        "E2E p99",
        "out tok/s",
        "goodput"
    );
    let _ = writeln!(
        out,
        "{:>8} {:>5} {:>10} {:>8} {:>8} {:>7} {:>7} {:>7} {:>8} {:>8} {:>8} {:>7}",
        "", "", "", "ms", "ms", "ms", "ms", "ms", "ms", "ms", "", ""
    );
    res.runs.iter().for_each(|r| run_line(&mut out, r));
    for r in &res.runs {
        for (reason, n) in &r.summary.failures {
            let _ = writeln!(
                out,
                "  failed ({reason}): {n} request(s), e.g. {}",
                r.summary.failure_examples.first().map_or("", String::as_str)
            );
        }
    }
    if let Some(last) = res.runs.last()
        && let Some(q) = &last.summary.query_latency
    {
        let _ = writeln!(out, "multi-stream query latency: p90 {:.0} ms, p99 {:.0} ms", q.p90, q.p99);
    }
    if let Some(p) = &res.peak {
        let found = p.qps.map_or("none valid".to_string(), |q| format!("{q:.3} QPS"));
        let _ = writeln!(
            out,
            "peak: {found} (first invalid: {}; {} runs in {:.1} s; {})",
            p.first_invalid.map_or("none".to_string(), |q| format!("{q:.3} QPS")),
            p.steps.len(),
            res.wall_s,
            if p.converged { "converged" } else { "NOT converged: step limit" }
        );
    }
    if let Some(c) = &res.self_check {
        let _ = writeln!(
            out,
            "self-check (replayed with exact f32 activations, {} KV cache): {} request(s), {} tokens: {} identical to one-request greedy generation, {} parted at a near-tie",
            c.kv_cache, c.requests, c.tokens, c.identical, c.near_ties
        );
    }
    if let Some(c) = &res.server_tokens {
        let _ = writeln!(
            out,
            "server tokens vs one-request greedy generation (exact f32): {} request(s), {} identical, {} parted at a near-tie, {} differ{}",
            c.requests,
            c.identical,
            c.near_ties,
            c.differing,
            c.first_difference.as_deref().map_or(String::new(), |d| format!(" (first: {d})"))
        );
    }
    if let Some(p) = &res.memory_pressure {
        let f = |k: &str| p[k].as_f64().map_or("-".to_string(), |v| format!("{v:.2}x"));
        let _ = writeln!(
            out,
            "memory pressure {:.1}% of RAM: {} MiB held at the start, {} MiB at the end; slowdown {} (output tok/s), {} (E2E p50); pressured run {}",
            100.0 * p["share"].as_f64().unwrap_or(0.0),
            p["held_bytes_start"].as_u64().unwrap_or(0) >> 20,
            p["held_bytes_end"].as_u64().unwrap_or(0) >> 20,
            f("slowdown_output_tok_per_s"),
            f("slowdown_e2e_p50"),
            if p["completed"].as_bool() == Some(true) { "completed" } else { "did NOT complete" }
        );
        if let Some(c) = p["cgroup"].as_str() {
            let _ = writeln!(out, "  cgroup limit: {c}");
        }
    }
    if let Some(t) = res.runs.last().map(|r| &r.log.target)
        && let Some(cpu) = t.get("client_cpu_us_per_request")
    {
        let _ = writeln!(
            out,
            "client overhead: {:.0} us CPU per request (p50), {:.0} us (p99)",
            cpu["p50"].as_f64().unwrap_or(0.0),
            cpu["p99"].as_f64().unwrap_or(0.0)
        );
    }
    let u = &res.usage;
    let _ = writeln!(
        out,
        "CPU (this process): user {:.1} s + system {:.1} s over {:.1} s wall on {} CPUs = {:.0}% utilisation",
        u.user_s,
        u.system_s,
        u.wall_s,
        u.cores,
        100.0 * u.utilisation
    );
    if let Some((us, sy, util)) = u.server {
        let _ = writeln!(
            out,
            "CPU (server process): user {us:.1} s + system {sy:.1} s = {:.0}% utilisation",
            100.0 * util
        );
    }
    match &u.energy {
        Ok(zones) => {
            let j: f64 = zones.iter().map(|(_, j)| j).sum();
            let _ = writeln!(
                out,
                "energy: {j:.1} J, {:.1} W mean ({} zones)",
                u.watts.unwrap_or(0.0),
                zones.len()
            );
        }
        Err(why) => {
            let _ = writeln!(out, "energy: {why} (no figure, none estimated)");
        }
    }
    if let Some(c) = &res.cost {
        let cur = c["price"]["currency"].as_str().unwrap_or("");
        let f = |k: &str| c[k].as_f64().map_or("-".to_string(), |v| format!("{v:.4} {cur}"));
        let _ = writeln!(
            out,
            "cost: {} per million output tokens, {} per thousand queries",
            f("per_million_output_tokens"),
            f("per_thousand_queries")
        );
    }
    out
}
