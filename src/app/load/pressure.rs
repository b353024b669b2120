//! `tfbench load --memory-pressure SHARE`: the scenario again while a
//! share of RAM is taken ([`crate::load::pressure`]), against the run just
//! made without it.

use super::imp::{Run, Settings, Setup, run_once};
use crate::cli::load::LoadArgs;
use crate::load::pressure::{Balloon, cgroup_unavailable};
use anyhow::Result;
use serde_json::json;

/// Runs the scenario under pressure, appends the run to `runs` (after the
/// unpressured one) and returns the comparison.
pub(super) fn pressured_run(
    a: &LoadArgs,
    s: &Settings,
    setup: &mut Setup,
    share: f64,
    runs: &mut Vec<Run>,
) -> Result<serde_json::Value> {
    let cgroup = cgroup_unavailable();
    let (balloon, report) = Balloon::inflate(share)?;
    eprintln!(
        "memory pressure: balloon of {} MiB asked, {} MiB mapped, {} MiB resident{}",
        report.requested_bytes >> 20,
        report.mapped_bytes >> 20,
        report.held_bytes_start >> 20,
        report.capped.as_deref().map_or(String::new(), |c| format!(" ({c})"))
    );
    let run = run_once(a, s, setup, a.qps);
    let held_end = balloon.resident();
    drop(balloon);
    let mut run = run?;
    run.memory_pressure = Some(share);
    let Some(base) = runs.last().map(|r| &r.summary) else {
        anyhow::bail!("no unpressured run to compare with")
    };
    let p = &run.summary;
    let ratio = |num: f64, den: f64| (num > 0.0 && den > 0.0).then(|| num / den);
    let value = json!({
        "share": share,
        "method": "balloon (anonymous pages written, resident measured by mincore)",
        "cgroup": cgroup,
        "mem_total_bytes": report.mem_total_bytes,
        "mem_available_before": report.mem_available_before,
        "requested_bytes": report.requested_bytes,
        "mapped_bytes": report.mapped_bytes,
        "held_bytes_start": report.held_bytes_start,
        "held_bytes_end": held_end,
        "capped": report.capped,
        "unpressured": {"completed": base.completed, "queries": base.queries,
            "output_tok_per_s": base.output_tok_per_s, "e2e_p50_ms": base.e2e.p50},
        "pressured": {"completed": p.completed, "queries": p.queries,
            "output_tok_per_s": p.output_tok_per_s, "e2e_p50_ms": p.e2e.p50},
        "slowdown_output_tok_per_s": ratio(base.output_tok_per_s, p.output_tok_per_s),
        "slowdown_e2e_p50": ratio(p.e2e.p50, base.e2e.p50),
        "completed": p.failed == 0 && p.completed == p.queries,
        "note": "slowdowns above 1 mean slower under pressure; on a busy host they also hold the host's own drift",
    });
    runs.push(run);
    Ok(value)
}
