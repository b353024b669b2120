//! History of runs per machine, and trends with change-point detection.
//!
//! Every run can be appended to `<dir>/<fingerprint>.jsonl` (one JSON line
//! per run, [`HistoryEntry`]: a compact summary of each measured case, no
//! raw samples), keyed by [`crate::env::Environment::fingerprint`] so that
//! only runs on the same machine are compared. [`trends`] turns a history
//! into one median series per case and finds the runs where a case's level
//! changed ([`changepoint`]); [`render`] shows them as sparklines and text
//! or JSON.
//!
//! - [`store`]: [`HistoryStore`] (append, load, list machines).
//! - [`changepoint`]: [`detect`], the statistical test (method in its doc).
//! - [`render`]: [`render_table`], [`render_json`], [`sparkline`].

pub mod changepoint;
pub mod render;
pub mod store;

pub use changepoint::{ChangePoint, DetectOptions, detect, detect_with};
pub use render::{render_json, render_table, sparkline};
pub use store::{History, HistoryStore};

use crate::results::{CaseStatus, RunReport};
use crate::suites::ThroughputKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Default folder of the history files, relative to the working directory.
pub const DEFAULT_DIR: &str = "baselines/history";

/// Version of the [`HistoryEntry`] line layout; bump on incompatible changes.
pub const HISTORY_SCHEMA_VERSION: u32 = 1;

/// One run as recorded in a machine's history: one JSON line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Layout version, [`HISTORY_SCHEMA_VERSION`] when written by this build.
    pub schema_version: u32,
    /// When the run started, RFC 3339 in UTC.
    pub recorded_at: String,
    /// Git revision tfbench was built from (`abc1234`, `abc1234-dirty`, `unknown`).
    pub git_revision: String,
    /// tfbench version of the run.
    pub tfbench_version: String,
    /// CPU model, for people reading the file (the file name is the key).
    pub cpu_model: String,
    /// Summary of every case that was measured, by case id; failed cases are
    /// left out so that they do not look like speed changes.
    pub cases: BTreeMap<String, CasePoint>,
}

/// Compact summary of one measured case in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CasePoint {
    /// Median time per iteration, nanoseconds.
    pub median_ns: f64,
    /// Lower bound of the median's confidence interval, nanoseconds.
    pub lower_ns: f64,
    /// Upper bound of the median's confidence interval, nanoseconds.
    pub upper_ns: f64,
    /// Samples the median was computed from.
    pub samples: usize,
    /// Headline rate ([`crate::report::primary_throughput`]), if declared.
    #[serde(default)]
    pub rate: Option<RatePoint>,
}

/// A rate at the median time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RatePoint {
    /// What is counted.
    pub kind: ThroughputKind,
    /// Units per second.
    pub per_second: f64,
}

/// The history line of a run: its measured cases, summarized.
///
/// `recorded_at` is the run's start time (so re-recording a saved report
/// keeps its date); a report without one gets the current time.
pub fn entry_from_report(r: &RunReport) -> HistoryEntry {
    let cases = r
        .cases
        .iter()
        .filter(|c| c.status == CaseStatus::Ok)
        .filter_map(|c| {
            let e = c.estimates.as_ref()?;
            let samples = c.sampling.as_ref().map_or(c.samples.len(), |s| s.samples);
            let rate = crate::report::primary_throughput(c)
                .map(|t| RatePoint { kind: t.kind, per_second: t.rate.point });
            let point = CasePoint {
                median_ns: e.median.point,
                lower_ns: e.median.lower,
                upper_ns: e.median.upper,
                samples,
                rate,
            };
            Some((c.id.clone(), point))
        })
        .collect();
    let recorded_at =
        if r.started_at.is_empty() { crate::probe::now_rfc3339() } else { r.started_at.clone() };
    HistoryEntry {
        schema_version: HISTORY_SCHEMA_VERSION,
        recorded_at,
        git_revision: r.environment.git_revision.clone(),
        tfbench_version: r.tfbench_version.clone(),
        cpu_model: r.environment.cpu_model.clone(),
        cases,
    }
}

/// The median series of one case over a history, with its change points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseTrend {
    /// Case id.
    pub id: String,
    /// `(recorded_at, git_revision, median_ns)` of every run that measured
    /// the case, in history order.
    pub points: Vec<(String, String, f64)>,
    /// Changes in level; each `index` points into `points`.
    pub change_points: Vec<ChangePoint>,
}

/// One trend per case id present in `h` (sorted by id), restricted to ids
/// matching `filter`, with change points from [`detect`] at the default
/// settings ([`DetectOptions::default`]).
pub fn trends(h: &[HistoryEntry], filter: Option<&regex::Regex>) -> Vec<CaseTrend> {
    trends_with(h, filter, &DetectOptions::default())
}

/// [`trends`] with explicit change-point settings.
pub fn trends_with(
    h: &[HistoryEntry],
    filter: Option<&regex::Regex>,
    opts: &DetectOptions,
) -> Vec<CaseTrend> {
    let mut by_id: BTreeMap<&str, Vec<(String, String, f64)>> = BTreeMap::new();
    for entry in h {
        for (id, point) in &entry.cases {
            if filter.is_some_and(|re| !re.is_match(id)) {
                continue;
            }
            // A non-finite median (hand-edited file) would poison the ranks.
            if point.median_ns.is_finite() {
                let p = (entry.recorded_at.clone(), entry.git_revision.clone(), point.median_ns);
                by_id.entry(id).or_default().push(p);
            }
        }
    }
    by_id
        .into_iter()
        .map(|(id, points)| {
            let series: Vec<f64> = points.iter().map(|p| p.2).collect();
            CaseTrend { id: id.to_string(), change_points: detect_with(&series, opts), points }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_keeps_measured_cases_only() {
        let report = crate::report::fixture();
        let entry = entry_from_report(&report);
        assert_eq!(entry.schema_version, HISTORY_SCHEMA_VERSION);
        assert_eq!(entry.recorded_at, report.started_at);
        assert_eq!(entry.cpu_model, "AMD EPYC 7763 64-Core Processor");
        assert_eq!(entry.cases.len(), 2, "the failed case is omitted");
        let mm = &entry.cases["tensor/matmul/shape=256x256x256,threads=1"];
        assert_eq!(
            (mm.median_ns, mm.lower_ns, mm.upper_ns, mm.samples),
            (107_546.0, 107_100.0, 108_020.0, 10)
        );
        let rate = mm.rate.expect("matmul declares FLOPs");
        assert_eq!(rate.kind, ThroughputKind::Flops);
        assert!((rate.per_second - 2.0 * 256f64.powi(3) / 107_546.0 * 1e9).abs() < 1.0);
    }

    fn entry(rev: &str, cases: &[(&str, f64)]) -> HistoryEntry {
        let point = |m: f64| CasePoint { median_ns: m, lower_ns: m, upper_ns: m, samples: 10, rate: None };
        HistoryEntry {
            schema_version: HISTORY_SCHEMA_VERSION,
            recorded_at: format!("2025-01-01T00:00:{rev}Z"),
            git_revision: rev.into(),
            tfbench_version: "0.1.0".into(),
            cpu_model: "cpu".into(),
            cases: cases.iter().map(|&(id, m)| (id.to_string(), point(m))).collect(),
        }
    }

    #[test]
    fn trends_follow_each_case_and_filter() {
        let h: Vec<HistoryEntry> = (0..20)
            .map(|i| {
                let step = if i < 10 { 100.0 } else { 130.0 };
                let wobble = [0.0, 0.5, -0.5, 0.25][i % 4];
                let mut cases = vec![("t/a", step + wobble), ("t/c", f64::NAN)];
                if i % 2 == 0 {
                    cases.push(("t/b", 50.0 + wobble));
                }
                entry(&format!("{i:02}"), &cases)
            })
            .collect();
        let all = trends(&h, None);
        let ids: Vec<&str> = all.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["t/a", "t/b"], "sorted; the all-NaN case has no points");
        assert_eq!(all[0].points.len(), 20);
        assert_eq!(all[0].points[3], ("2025-01-01T00:00:03Z".into(), "03".into(), 100.25));
        assert_eq!(all[0].change_points.len(), 1);
        assert_eq!(all[0].change_points[0].index, 10);
        assert_eq!(all[1].points.len(), 10);
        assert!(all[1].change_points.is_empty());
        let re = regex::Regex::new("b$").unwrap();
        let only_b = trends(&h, Some(&re));
        assert_eq!(only_b.len(), 1);
        assert_eq!(only_b[0].id, "t/b");
    }
}
