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
use crate::workload::ThroughputKind;
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
    /// The slowdown-injection test hook the run carried, if any: such runs
    /// are never learned from (see [`learned_spreads`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected: Option<String>,
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
    /// Headline rate ([`crate::results::primary_throughput`]), if declared.
    #[serde(default)]
    pub rate: Option<RatePoint>,
    /// Median time per iteration of each round, nanoseconds, when the run
    /// had several: how far this case's rounds of one run disagree (see
    /// [`learned_spreads`]). Absent in lines written before it was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub round_medians_ns: Vec<f64>,
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
            let rate = crate::results::primary_throughput(c)
                .map(|t| RatePoint { kind: t.kind, per_second: t.rate.point });
            let point = CasePoint {
                median_ns: e.median.point,
                lower_ns: e.median.lower,
                upper_ns: e.median.upper,
                samples,
                rate,
                round_medians_ns: round_medians(c),
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
        injected: r.environment.injected_slowdown.clone(),
    }
}

/// The median per-iteration time of each round of `c`, in round order;
/// empty when it ran one round.
fn round_medians(c: &crate::results::CaseResult) -> Vec<f64> {
    let rounds = crate::results::per_iter_by_round(&c.samples, |_| true);
    if rounds.len() < 2 {
        return Vec::new();
    }
    rounds.into_iter().filter(|r| !r.is_empty()).map(|r| crate::stats::median(&r)).collect()
}

/// A case's noise learned from a machine's history.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Run-to-run spread of the case's median (log scale, robust SD).
    pub run: f64,
    /// Runs it was learned from.
    pub runs: usize,
    /// Spread between rounds of one run (log scale, pooled SD), when at
    /// least [`MIN_RUNS_FOR_SPREAD`] - 1 degrees of freedom were recorded: a
    /// side judged on a single round carries this much luck.
    pub round: Option<f64>,
}

/// Spreads learned from history, by case id.
pub type Spreads = std::collections::HashMap<String, Spread>;

/// Fewest runs of a case in history before its spread is learned.
pub const MIN_RUNS_FOR_SPREAD: usize = 5;

/// Each case's run-to-run spread learned from a machine's history: the
/// robust standard deviation (1.4826 x MAD) of its log median across runs,
/// after removing each run's shared offset (the median over that run's
/// cases of their log deviation from their own typical level), so a run on
/// which the whole machine was slow widens no case's band: the comparison's
/// drift measurement handles that. Runs carrying an injected slowdown are
/// skipped; cases with fewer than [`MIN_RUNS_FOR_SPREAD`] runs get none.
/// Returns `(spread, runs)` by case id.
pub fn learned_spreads(h: &[HistoryEntry]) -> Spreads {
    let entries: Vec<&HistoryEntry> = h.iter().filter(|e| e.injected.is_none()).collect();
    let mut logs: BTreeMap<&str, Vec<(usize, f64)>> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        for (id, p) in &e.cases {
            if p.median_ns.is_finite() && p.median_ns > 0.0 {
                logs.entry(id.as_str()).or_default().push((i, p.median_ns.ln()));
            }
        }
    }
    let typical: BTreeMap<&str, f64> = logs
        .iter()
        .map(|(id, v)| (*id, crate::stats::median(&v.iter().map(|x| x.1).collect::<Vec<_>>())))
        .collect();
    let mut deviations: Vec<Vec<f64>> = vec![Vec::new(); entries.len()];
    for (id, v) in &logs {
        for (i, x) in v {
            deviations[*i].push(x - typical[id]);
        }
    }
    let offsets: Vec<f64> =
        deviations.iter().map(|d| if d.is_empty() { 0.0 } else { crate::stats::median(d) }).collect();
    logs.into_iter()
        .filter(|(_, v)| v.len() >= MIN_RUNS_FOR_SPREAD)
        .map(|(id, v)| {
            let residuals: Vec<f64> = v.iter().map(|(i, x)| x - offsets[*i]).collect();
            let round = round_spread(entries.iter().filter_map(|e| e.cases.get(id)));
            let spread = Spread { run: 1.4826 * crate::stats::mad(&residuals), runs: v.len(), round };
            (id.to_string(), spread)
        })
        .collect()
}

/// The pooled standard deviation of log round medians around their run's
/// mean, over the runs in `points` that recorded several rounds; `None`
/// below [`MIN_RUNS_FOR_SPREAD`] - 1 degrees of freedom. Not robust on
/// purpose: it widens intervals, and a heavy tail should widen them.
fn round_spread<'a>(points: impl Iterator<Item = &'a CasePoint>) -> Option<f64> {
    let (ss, df) = points
        .map(|p| crate::stats::log_ss(&p.round_medians_ns))
        .fold((0.0, 0usize), |(ss, df), (s, d)| (ss + s, df + d));
    (df + 1 >= MIN_RUNS_FOR_SPREAD).then(|| (ss / df as f64).sqrt())
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
        let point = |m: f64| CasePoint {
            median_ns: m,
            lower_ns: m,
            upper_ns: m,
            samples: 10,
            rate: None,
            round_medians_ns: vec![m * 0.99, m * 1.01],
        };
        HistoryEntry {
            schema_version: HISTORY_SCHEMA_VERSION,
            recorded_at: format!("2025-01-01T00:00:{rev}Z"),
            git_revision: rev.into(),
            tfbench_version: "0.1.0".into(),
            cpu_model: "cpu".into(),
            cases: cases.iter().map(|&(id, m)| (id.to_string(), point(m))).collect(),
            injected: None,
        }
    }

    #[test]
    fn spreads_are_learned_net_of_run_offsets_and_skip_injected_runs() {
        // Ten runs: every case moves with a shared offset of up to +-20%;
        // `steady` has no own spread, `jumpy` alternates +-5% on top.
        let mut h: Vec<HistoryEntry> = (0..10)
            .map(|i| {
                let offset = 1.0 + 0.2 * ((i as f64) * 1.3).sin();
                let jump = if i % 2 == 0 { 1.05 } else { 0.95 };
                let cases: Vec<(&str, f64)> = vec![
                    ("steady", 100.0 * offset),
                    ("steady2", 50.0 * offset),
                    ("jumpy", 10.0 * offset * jump),
                    ("rare", 1.0),
                ];
                entry(&format!("{i:02}"), &cases[..if i < 4 { 4 } else { 3 }])
            })
            .collect();
        let mut injected = entry("99", &[("steady", 500.0), ("steady2", 50.0), ("jumpy", 10.0)]);
        injected.injected = Some("steady=5".into());
        h.push(injected);
        let s = learned_spreads(&h);
        let Spread { run: steady, runs, round } = s["steady"];
        assert_eq!(runs, 10, "the injected run is not learned from");
        assert!(steady < 0.03, "shared offsets removed: {steady}");
        // Every run's two rounds at 0.99 and 1.01 of its median.
        let want = (1.01f64.ln() - 0.99f64.ln()) / 2f64.sqrt();
        assert!(round.is_some_and(|r| (r - want).abs() < 1e-9), "{round:?} vs {want}");
        let jumpy = s["jumpy"].run;
        assert!(jumpy > 0.03 && jumpy < 0.12, "{jumpy}");
        assert!(!s.contains_key("rare"), "4 runs are too few");
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
