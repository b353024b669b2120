//! Saved baselines: a named [`RunReport`] kept on disk for later comparison.
//!
//! A baseline is one JSON file, `<dir>/<name>.json`, holding a [`Baseline`]:
//! the full report (raw samples, environment with tfbench version and git
//! revision, start time) wrapped with its name, when it was saved and the
//! fingerprint of the machine it ran on. [`Store`] saves, loads, lists and
//! deletes them; [`load_results`] reads either a baseline file or a plain
//! results file (`tfbench run --output x.json`) so `compare` accepts both.
//!
//! Every error names the file involved and what is wrong with it; nothing
//! here panics on bad input.

mod store;
#[cfg(test)]
mod tests;

pub use store::{BaselineInfo, MAX_NAME_LEN, Store, validate_name};

use crate::results::RunReport;
use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

/// Version of the baseline file layout (the wrapper around the report);
/// bump it on any incompatible change. The embedded report carries its own
/// [`crate::results::SCHEMA_VERSION`], checked separately.
pub const BASELINE_SCHEMA_VERSION: u32 = 1;

/// One saved baseline, as stored in `<dir>/<name>.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Baseline {
    /// Layout version, [`BASELINE_SCHEMA_VERSION`] when written by this build.
    pub schema_version: u32,
    /// The name it was saved under (also the file stem).
    pub name: String,
    /// When it was saved, RFC 3339 in UTC.
    pub saved_at: String,
    /// [`crate::env::Environment::fingerprint`] of the machine the report
    /// ran on, kept at the top so listings need not recompute it.
    pub machine_fingerprint: String,
    /// The run itself (the newest one), with raw samples.
    pub report: RunReport,
    /// Earlier runs of the same build on the same machine, oldest first
    /// (`run --save-baseline NAME --append`): with several runs, a
    /// comparison measures the baseline's run-to-run noise instead of
    /// assuming it. Readers that predate the field see the newest run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_runs: Vec<RunReport>,
}

impl Baseline {
    /// Wraps `report` as baseline `name`, stamped with the current time.
    pub fn new(name: &str, report: &RunReport) -> Self {
        Self {
            schema_version: BASELINE_SCHEMA_VERSION,
            name: name.to_string(),
            saved_at: crate::probe::now_rfc3339(),
            machine_fingerprint: report.environment.fingerprint(),
            report: report.clone(),
            earlier_runs: Vec::new(),
        }
    }

    /// Every run, oldest first.
    pub fn runs(&self) -> Vec<RunReport> {
        self.earlier_runs.iter().chain(std::iter::once(&self.report)).cloned().collect()
    }
}

/// Checks that `runs` can stand together on one side of a comparison: one
/// build (version and git revision) on one machine. The error names
/// `source` and the two that differ.
pub fn check_same_build_and_machine(source: &str, runs: &[RunReport]) -> Result<()> {
    let Some(first) = runs.first() else { return Ok(()) };
    let build = |r: &RunReport| format!("tfbench {} ({})", r.tfbench_version, r.environment.git_revision);
    for r in &runs[1..] {
        if build(r) != build(first) {
            bail!(
                "{source}: its runs come from different builds ({} and {}); compare one build's runs",
                build(first),
                build(r)
            );
        }
        let (a, b) = (first.environment.fingerprint(), r.environment.fingerprint());
        if a != b {
            bail!("{source}: its runs come from different machines (fingerprints {a} and {b})");
        }
        let (ga, gb) = (first.environment.gpu_kinds(), r.environment.gpu_kinds());
        if !ga.is_empty() && !gb.is_empty() && ga != gb {
            bail!("{source}: its runs come from different GPUs ({} and {})", ga.join(", "), gb.join(", "));
        }
    }
    Ok(())
}

/// Reads a run's results from `path` as every run it holds (a baseline file
/// may hold several), checked to be one build on one machine.
pub fn load_runs(path: &Path) -> Result<Vec<RunReport>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| {
        anyhow!(
            "cannot load results from {}: not a tfbench results or baseline file: invalid JSON: {e}",
            path.display()
        )
    })?;
    let runs = if value.get("report").is_some() {
        parse_baseline(&text).with_context(|| format!("cannot load results from {}", path.display()))?.runs()
    } else {
        vec![load_results(path)?]
    };
    check_same_build_and_machine(&path.display().to_string(), &runs)?;
    Ok(runs)
}

/// Parses the text of a baseline file. The versions are checked before the
/// fields so a file from another layout gets a version error rather than a
/// confusing missing-field message. The error does not name the file; the
/// callers add it.
pub(crate) fn parse_baseline(text: &str) -> Result<Baseline> {
    let value: Value = serde_json::from_str(text).context("not a tfbench baseline: invalid JSON")?;
    check_baseline_value(&value)?;
    serde_json::from_value(value).context("invalid tfbench baseline")
}

/// Checks the wrapper's and the embedded report's `schema_version`.
fn check_baseline_value(value: &Value) -> Result<()> {
    match value.get("schema_version") {
        None => bail!("not a tfbench baseline: missing schema_version"),
        Some(v) if v.as_u64() == Some(u64::from(BASELINE_SCHEMA_VERSION)) => {}
        Some(v) => {
            bail!("unsupported baseline schema_version {v} (this tfbench reads {BASELINE_SCHEMA_VERSION})")
        }
    }
    match value.get("report") {
        None => bail!("not a tfbench baseline: missing report"),
        Some(report) => crate::report::json::check_schema_version(report).context("in its report"),
    }
}

/// Reads a run's results from `path`: either a results file written by
/// `tfbench run --output x.json` or a baseline file (recognised by its
/// top-level `report` key). Errors name the file.
pub fn load_results(path: &Path) -> Result<RunReport> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse_results(&text).with_context(|| format!("cannot load results from {}", path.display()))
}

fn parse_results(text: &str) -> Result<RunReport> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| anyhow!("not a tfbench results or baseline file: invalid JSON: {e}"))?;
    if value.get("report").is_some() {
        check_baseline_value(&value)?;
        let baseline: Baseline = serde_json::from_value(value).context("invalid tfbench baseline")?;
        return Ok(baseline.report);
    }
    // Parsed again by the results reader so its messages stay the same
    // as everywhere else results files are read.
    crate::report::parse_json(text)
}
