//! JSON Lines: one compact JSON object per line, each tagged by `type`.
//!
//! A full report is, in order:
//!
//! 1. one `{"type":"run", ...}` line: [`RunLine`], the run's metadata
//!    (schema_version, tfbench_version, started_at, environment, harness,
//!    machine_limits), without cases, targets or wall time;
//! 2. one `{"type":"case", ...}` line per case, in plan order: the
//!    [`CaseResult`] fields, as in the JSON report's `cases` array;
//! 3. one `{"type":"summary", ...}` line: [`SummaryLine`], case and failure
//!    counts, wall time and the target checks.
//!
//! The runner can stream the same lines as it goes: [`run_line`] first,
//! [`case_line`] as each case finishes, [`summary_line`] at the end.
//! See `docs/json-schema.md`.

use super::json::check_schema_version;
use crate::results::{CaseResult, HarnessInfo, RunReport, TargetCheck};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// Body of the first line: the run's metadata, without cases.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunLine {
    /// Layout version, as in the JSON report.
    pub schema_version: u32,
    /// The tfbench version that produced the run.
    pub tfbench_version: String,
    /// When the run started, RFC 3339 in UTC.
    pub started_at: String,
    /// The machine and toolchain.
    pub environment: crate::env::Environment,
    /// The harness's own measurements and the settings in force.
    pub harness: HarnessInfo,
    /// The machine's measured limits, when a probe was cached.
    pub machine_limits: Option<crate::probe::MachineLimits>,
    /// The run's unique id.
    #[serde(default)]
    pub run_id: String,
}

impl RunLine {
    /// The metadata of `report` (its cases, targets and wall time are ignored).
    pub fn of(report: &RunReport) -> Self {
        Self {
            schema_version: report.schema_version,
            tfbench_version: report.tfbench_version.clone(),
            started_at: report.started_at.clone(),
            environment: report.environment.clone(),
            harness: report.harness.clone(),
            machine_limits: report.machine_limits.clone(),
            run_id: report.run_id.clone(),
        }
    }
}

/// Body of the last line: what is only known once every case has run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SummaryLine {
    /// Number of cases (case lines) in the run.
    pub cases: usize,
    /// Number of failed cases.
    pub failed: usize,
    /// Number of skipped cases (absent in output of tfbench before 0.1.0's
    /// run summary: read as 0).
    #[serde(default)]
    pub skipped: usize,
    /// One entry per distinct skip reason, with the cases it covers.
    #[serde(default)]
    pub skip_reasons: Vec<SkipReason>,
    /// Wall time of the whole run in seconds.
    pub wall_time_secs: f64,
    /// Checks of the performance targets.
    pub targets: Vec<TargetCheck>,
    /// The canary timings taken between the cases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub canaries: Vec<crate::results::CanarySample>,
    /// Other work's CPU use during each case-round.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load: Vec<crate::results::LoadSample>,
}

/// Skipped cases that share a reason, in the summary line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SkipReason {
    /// The reason, whole (without a leading `case <id>: `).
    pub reason: String,
    /// Ids of the cases skipped for it.
    pub cases: Vec<String>,
}

impl SummaryLine {
    /// The summary of `report`.
    pub fn of(report: &RunReport) -> Self {
        let s = super::summary::RunSummary::of(report);
        Self {
            cases: report.cases.len(),
            failed: report.failed_count(),
            skipped: s.skipped,
            skip_reasons: s
                .skip_groups
                .into_iter()
                .map(|g| SkipReason { reason: g.reason, cases: g.ids })
                .collect(),
            wall_time_secs: report.wall_time_secs,
            targets: report.targets.clone(),
            canaries: report.canaries.clone(),
            load: report.load.clone(),
        }
    }
}

/// Borrowing twin of [`Line`], so cases are written without copies.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum LineRef<'a> {
    Run(&'a RunLine),
    Case(&'a CaseResult),
    Summary(&'a SummaryLine),
}

/// One parsed line of JSON Lines output, by its `type`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line {
    /// `{"type":"run",...}`: the first line.
    Run(Box<RunLine>),
    /// `{"type":"case",...}`: one per case.
    Case(Box<CaseResult>),
    /// `{"type":"summary",...}`: the last line.
    Summary(SummaryLine),
}

fn to_line(line: &LineRef<'_>) -> Result<String> {
    serde_json::to_string(line).context("serializing a JSON Lines record")
}

/// The `{"type":"run",...}` line for `report` (no trailing newline).
pub fn run_line(report: &RunReport) -> Result<String> {
    to_line(&LineRef::Run(&RunLine::of(report)))
}

/// The `{"type":"case",...}` line for one finished case (no trailing
/// newline), for streaming results as cases complete.
pub fn case_line(case: &CaseResult) -> Result<String> {
    to_line(&LineRef::Case(case))
}

/// The `{"type":"summary",...}` line for `report` (no trailing newline).
pub fn summary_line(report: &RunReport) -> Result<String> {
    to_line(&LineRef::Summary(&SummaryLine::of(report)))
}

/// The whole report: run line, case lines, summary line, each ending with a newline.
pub fn render(report: &RunReport) -> Result<String> {
    let mut out = run_line(report)?;
    out.push('\n');
    for case in &report.cases {
        out.push_str(&case_line(case)?);
        out.push('\n');
    }
    out.push_str(&summary_line(report)?);
    out.push('\n');
    Ok(out)
}

/// Reassembles a report from JSON Lines output: a run line (whose
/// `schema_version` is checked first), case lines, and a summary line.
/// Blank lines are ignored; a missing summary (truncated stream) is an error.
pub fn parse_jsonl(text: &str) -> Result<RunReport> {
    let mut run: Option<RunLine> = None;
    let mut cases = Vec::new();
    let mut summary: Option<SummaryLine> = None;
    for (index, raw) in text.lines().enumerate() {
        let n = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(raw).with_context(|| format!("line {n}: invalid JSON"))?;
        if run.is_none() {
            if value.get("type").and_then(|t| t.as_str()) != Some("run") {
                bail!("line {n}: not tfbench JSON Lines output: the first line must have \"type\":\"run\"");
            }
            check_schema_version(&value).with_context(|| format!("line {n}"))?;
        }
        if summary.is_some() {
            bail!("line {n}: nothing may follow the summary line");
        }
        match serde_json::from_value::<Line>(value).with_context(|| format!("line {n}"))? {
            Line::Run(r) if run.is_none() => run = Some(*r),
            Line::Run(_) => bail!("line {n}: a second run line"),
            Line::Case(c) => cases.push(*c),
            Line::Summary(s) => summary = Some(s),
        }
    }
    let Some(run) = run else { bail!("not tfbench JSON Lines output: no lines") };
    let Some(summary) = summary else { bail!("truncated JSON Lines output: no summary line") };
    Ok(RunReport {
        schema_version: run.schema_version,
        tfbench_version: run.tfbench_version,
        started_at: run.started_at,
        wall_time_secs: summary.wall_time_secs,
        environment: run.environment,
        harness: run.harness,
        machine_limits: run.machine_limits,
        cases,
        targets: summary.targets,
        run_id: run.run_id,
        canaries: summary.canaries,
        load: summary.load,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn lines_are_typed_and_cases_in_order() {
        let report = super::super::fixture();
        let text = render(&report).unwrap();
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect(l)).collect();
        assert_eq!(lines.len(), report.cases.len() + 2);
        let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["run", "case", "case", "case", "summary"]);
        assert!(text.lines().all(|l| l.starts_with("{\"type\":\"")), "type comes first");

        assert_eq!(lines[0]["schema_version"], 1);
        assert!(lines[0].get("cases").is_none() && lines[0].get("targets").is_none());
        let ids: Vec<&str> = lines[1..4].iter().map(|l| l["id"].as_str().unwrap()).collect();
        let want: Vec<&str> = report.cases.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, want);
        assert_eq!(lines[4]["failed"], 1);
        assert_eq!(lines[4]["cases"], 3);
        assert_eq!(lines[4]["wall_time_secs"], 42.5);
        assert_eq!(lines[4]["targets"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn case_line_matches_the_case_record() {
        let report = super::super::fixture();
        let line = case_line(&report.cases[1]).unwrap();
        assert!(!line.contains('\n'));
        let mut value: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["type"], "case");
        value.as_object_mut().unwrap().remove("type");
        super::super::assert_same_json(&value, &serde_json::to_value(&report.cases[1]).unwrap());
    }

    #[test]
    fn parse_jsonl_reassembles_the_report() {
        let report = super::super::fixture();
        let back = parse_jsonl(&render(&report).unwrap()).unwrap();
        super::super::assert_same_json(
            &serde_json::to_value(&back).unwrap(),
            &serde_json::to_value(&report).unwrap(),
        );

        let text = render(&report).unwrap();
        let truncated: String = text.lines().take(3).map(|l| format!("{l}\n")).collect();
        assert!(parse_jsonl(&truncated).unwrap_err().to_string().contains("no summary line"));
        let cases_only: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
        assert!(parse_jsonl(&cases_only).unwrap_err().to_string().contains("first line"));
        let newer = text.replacen("\"schema_version\":1", "\"schema_version\":7", 1);
        let err = format!("{:#}", parse_jsonl(&newer).unwrap_err());
        assert!(err.contains("unsupported schema_version 7 (this tfbench reads 1)"), "{err}");
    }
}
