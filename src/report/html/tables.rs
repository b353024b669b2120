//! The HTML tables: machine facts, one summary row per case, target checks,
//! and medians side by side when several results files are given.

use super::labels;
use super::svg::Esc;
use crate::compare::{Comparison, Verdict};
use crate::report::summary::RunSummary;
use crate::report::{cells, failure_text};
use crate::results::{CaseResult, RunReport};
use crate::units;
use std::fmt::Write as _;

/// Facts about the machine and the run, as a definition list.
pub(crate) fn environment(out: &mut String, r: &RunReport) {
    let env = &r.environment;
    let cpu = if env.cpu_model.trim().is_empty() { "unknown CPU" } else { env.cpu_model.trim() };
    let cores = env.physical_cores.map_or(String::new(), |c| format!("{c} cores, "));
    let facts = [
        ("CPU", format!("{cpu} ({cores}{} threads; {} used)", env.logical_threads, r.harness.threads)),
        ("System", format!("{} {} ({})", env.os_name, env.kernel_release, env.arch)),
        (
            "tfbench",
            format!(
                "{} at {} ({}, {})",
                r.tfbench_version, env.git_revision, env.build_profile, env.rustc_version
            ),
        ),
        ("Started", format!("{} (wall time {:.1} s)", r.started_at, r.wall_time_secs)),
        (
            "Timer",
            format!(
                "resolution {}, read cost {}",
                units::format_time_ns(r.harness.timer_resolution_ns),
                units::format_time_ns(r.harness.timer_overhead_ns)
            ),
        ),
    ];
    out.push_str("<dl class=\"facts\">");
    for (k, v) in facts {
        let _ = write!(out, "<dt>{k}</dt><dd>{}</dd>", Esc(&v));
    }
    if let Some(l) = &r.machine_limits {
        let _ = write!(
            out,
            "<dt>Limits</dt><dd>FMA peak {} (one core {}), triad {} (one thread {})</dd>",
            Esc(&units::format_rate(l.peak_flops_all_cores, "FLOP/s")),
            Esc(&units::format_rate(l.peak_flops_one_core, "FLOP/s")),
            Esc(&units::format_rate(l.triad_bandwidth_all_threads, "B/s")),
            Esc(&units::format_rate(l.triad_bandwidth_one_thread, "B/s")),
        );
    }
    out.push_str("</dl>");
}

/// Confidence level of the first case with estimates, as a whole percentage.
fn level_of(r: &RunReport) -> Option<f64> {
    r.cases.iter().find_map(|c| c.estimates.as_ref()).map(|e| e.median.level)
}

/// The median with its interval; the level only when it differs from the
/// one in the column header.
fn median_cell(case: &CaseResult, header_level: Option<f64>) -> String {
    match &case.estimates {
        None => cells::NONE.to_string(),
        Some(e) if Some(e.median.level) != header_level => {
            format!("{} ({:.0}% CI)", units::format_time_ci(&e.median), e.median.level * 100.0)
        }
        Some(e) => units::format_time_ci(&e.median),
    }
}

/// One row per case: id (wrapping at its commas), median with CI,
/// throughput, status, samples, outliers, and references to the notes,
/// which follow the table as a numbered list (a failure's reason whole; a
/// skipped case points at its reason in the summary, given there once).
/// `k` numbers the results file, for unique anchors.
pub(crate) fn summary(out: &mut String, r: &RunReport, k: usize) {
    let level = level_of(r);
    let level_text = level.map_or(String::new(), |l| format!(" [{:.0}% CI]", l * 100.0));
    let counts = RunSummary::of(r);
    let _ = write!(
        out,
        "<div class=\"scroll\"><table class=\"summary\"><thead><tr><th>Case</th><th>Median{level_text}</th>\
         <th>Throughput</th><th>Status</th><th>Samples</th><th>Outliers</th><th>Notes</th></tr></thead><tbody>"
    );
    let mut notes: Vec<(String, String)> = Vec::new();
    for case in &r.cases {
        let (status, class) = match &case.status {
            crate::results::CaseStatus::Ok => ("ok".to_string(), "ok"),
            crate::results::CaseStatus::Failed { phase, .. } => (format!("failed ({phase})"), "fail"),
            crate::results::CaseStatus::Skipped { .. } => ("skipped".to_string(), "skip"),
        };
        let samples = case.sampling.as_ref().map_or(cells::NONE.to_string(), |s| {
            if s.samples < s.requested_samples {
                format!("{} of {}", s.samples, s.requested_samples)
            } else {
                s.samples.to_string()
            }
        });
        let _ = write!(
            out,
            "<tr class=\"{class}\"><td class=\"id\"><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td>{}",
            labels::id_html(&case.id),
            Esc(&median_cell(case, level)),
            Esc(&cells::throughput(case)),
            Esc(&status),
        );
        if let Some(g) = counts.group_of(&case.id) {
            let _ = write!(out, " <a class=\"ref\" href=\"#skip-{k}-{g}\">reason {g}</a>");
        }
        // `run --profile`: the case's flamegraph, beside its status.
        if let Some(p) = case.inside.as_ref().and_then(|i| i.profile.as_ref()) {
            let _ = write!(out, " <a class=\"ref\" href=\"{}\">flamegraph</a>", Esc(&p.svg));
        }
        let _ = write!(
            out,
            "</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">",
            Esc(&samples),
            Esc(&cells::outliers(case)),
        );
        let mut texts: Vec<String> = match &case.status {
            crate::results::CaseStatus::Failed { .. } => failure_text(&case.status).into_iter().collect(),
            _ => Vec::new(),
        };
        texts.extend(case.notes.iter().cloned());
        for (i, text) in texts.into_iter().enumerate() {
            notes.push((case.id.clone(), text));
            let n = notes.len();
            let _ = write!(
                out,
                "{}<a class=\"ref\" href=\"#note-{k}-{n}\">[{n}]</a>",
                if i > 0 { " " } else { "" }
            );
        }
        out.push_str("</td></tr>");
    }
    out.push_str("</tbody></table></div>");
    if !notes.is_empty() {
        out.push_str("<ol class=\"notes\">");
        for (n, (id, text)) in notes.iter().enumerate() {
            let _ = write!(
                out,
                "<li id=\"note-{k}-{}\"><code>{}</code>: {}</li>",
                n + 1,
                labels::id_html(id),
                Esc(text)
            );
        }
        out.push_str("</ol>");
    }
}

/// Looks up metric `name` of `case`.
fn metric(case: &CaseResult, name: &str) -> Option<f64> {
    case.metrics.iter().find(|m| m.name == name).map(|m| m.value).filter(|v| v.is_finite())
}

/// The figures an inference user looks for, for every case that reports
/// any: tokens per second (its token throughput), time to first token and
/// the per-output-token latency percentiles (the `ttft_*` and `tpot_*`
/// metrics of the prefill and decode benchmarks).
pub(crate) fn inference(out: &mut String, r: &RunReport) {
    use crate::suites::ThroughputKind;
    // (case, tokens/s, [TTFT p50, TTFT p99, per-token p50, per-token p99])
    type Row<'a> = (&'a CaseResult, Option<f64>, [Option<f64>; 4]);
    let rows: Vec<Row> = r
        .cases
        .iter()
        .filter(|c| !c.status.is_failed())
        .map(|c| {
            let tps = c.throughput.iter().find(|t| t.kind == ThroughputKind::Tokens).map(|t| t.rate.point);
            let lat = [
                metric(c, "ttft_p50_ns"),
                metric(c, "ttft_p99_ns"),
                metric(c, "tpot_p50_ns"),
                metric(c, "tpot_p99_ns"),
            ];
            (c, tps, lat)
        })
        .filter(|(_, tps, lat)| tps.is_some() || lat.iter().any(Option::is_some))
        .collect();
    if rows.is_empty() {
        return;
    }
    out.push_str(
        "<h4>Inference headlines</h4><div class=\"scroll\"><table class=\"infer\"><thead><tr><th>Case</th>\
         <th>Tokens/s</th><th>Time to first token p50</th><th>p99</th><th>Per-token latency p50</th>\
         <th>p99</th></tr></thead><tbody>",
    );
    for (c, tps, lat) in rows {
        let _ = write!(out, "<tr><td class=\"id\"><code>{}</code></td>", labels::id_html(&c.id));
        let tps = tps.map_or(cells::NONE.to_string(), |t| units::format_rate(t, "tokens/s"));
        let _ = write!(out, "<td class=\"num\">{}</td>", Esc(&tps));
        for v in lat {
            let text = v.map_or(cells::NONE.to_string(), units::format_time_ns);
            let _ = write!(out, "<td class=\"num\">{}</td>", Esc(&text));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
}

/// The run's performance target checks, if any.
pub(crate) fn targets(out: &mut String, r: &RunReport) {
    if r.targets.is_empty() {
        return;
    }
    out.push_str(
        "<div class=\"scroll\"><table><thead><tr><th>Target</th><th>Case</th><th>Measured</th>\
         <th>Limit</th><th>Ratio</th><th>Required</th><th>Met</th></tr></thead><tbody>",
    );
    for t in &r.targets {
        let _ = write!(
            out,
            "<tr class=\"{}\"><td>{}</td><td class=\"id\"><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            if t.met { "ok" } else { "fail" },
            Esc(&t.name),
            labels::id_html(&t.case_id),
            Esc(&units::format_quantity(t.measured, &t.unit)),
            Esc(&units::format_quantity(t.limit, &t.unit)),
            Esc(&units::format_percent(t.ratio * 100.0)),
            Esc(&units::format_percent(t.required * 100.0)),
            if t.met { "yes" } else { "no" },
        );
    }
    out.push_str("</tbody></table></div>");
}

/// Every case id of `reports`, first appearance first.
pub(crate) fn union_ids<'a>(reports: &[(String, &'a RunReport)]) -> Vec<&'a str> {
    let mut seen = std::collections::HashSet::new();
    reports
        .iter()
        .flat_map(|(_, r)| r.cases.iter())
        .map(|c| c.id.as_str())
        .filter(|id| seen.insert(*id))
        .collect()
}

/// The case `id` of `r`, if it has one.
pub(crate) fn find<'a>(r: &'a RunReport, id: &str) -> Option<&'a CaseResult> {
    r.cases.iter().find(|c| c.id == id)
}

/// The comparison behind a side-by-side table's colours: the indices, in
/// the files shown, of its baseline and its candidate.
#[derive(Clone, Copy)]
pub(crate) struct Judged<'a> {
    /// The comparison (`tfbench compare`'s rules and verdicts).
    pub cmp: &'a Comparison,
    /// Index of the baseline's file.
    pub baseline: usize,
    /// Index of the candidate's file.
    pub candidate: usize,
}

/// CSS class of a side-by-side ratio (a time ratio: above 1 is slower).
/// Colour follows the comparison's verdict, never the ratio alone: red
/// only for a case the comparison calls regressed, green only for one it
/// calls improved (and only when the ratio of the headline medians points
/// the same way); unchanged, inconclusive, too few samples, a ratio no
/// verdict covers, or one that disagrees with its verdict stays grey. Two
/// runs of one build differ by 0.6x or 1.3x on a busy machine: a colour by
/// direction painted that noise as change.
pub(crate) fn ratio_class(ratio: f64, verdict: Option<Verdict>) -> &'static str {
    match verdict {
        Some(Verdict::Regressed) if ratio > 1.0 => "slower",
        Some(Verdict::Improved) if ratio < 1.0 => "faster",
        _ => "same",
    }
}

/// Medians of the cases found in two files or more, one column per file
/// that has any of them, with the ratio to the baseline's column (the
/// comparison's baseline when `judged` names one shown here, else the first
/// such file): a plain ratio of medians, coloured by the comparison's
/// verdict of the candidate's column only ([`ratio_class`]; the comparison
/// section has the statistics). Cases of one file only are left out: a
/// report of every suite's run would otherwise be a table of dashes.
pub(crate) fn side_by_side(out: &mut String, all: &[(String, &RunReport)], judged: Option<Judged>) {
    let shared: Vec<&str> = union_ids(all)
        .into_iter()
        .filter(|id| all.iter().filter(|(_, r)| find(r, id).is_some()).count() > 1)
        .collect();
    if shared.is_empty() {
        out.push_str("<p class=\"muted\">No case appears in more than one results file.</p>");
        return;
    }
    let columns: Vec<(usize, &(String, &RunReport))> =
        all.iter().enumerate().filter(|(_, (_, r))| shared.iter().any(|id| find(r, id).is_some())).collect();
    // Positions among the columns of the baseline and candidate, when shown.
    let pos = |file: usize| columns.iter().position(|(k, _)| *k == file);
    let judged = judged.and_then(|j| Some((j.cmp, pos(j.baseline)?, pos(j.candidate)?)));
    let base_col = judged.map_or(0, |(_, b, _)| b);
    let _ = write!(
        out,
        "<p class=\"muted\">Ratios: each file's median over the {} median, a plain ratio of two medians. {}</p>",
        if judged.is_some() { "baseline's" } else { "first file's" },
        if judged.is_some() {
            "Red or green only where the comparison below calls the candidate's case regressed or improved; \
             every other ratio is grey, however far from 1 (a ratio alone says nothing about the noise)."
        } else {
            "No comparison judges these files (give --baseline): every ratio is grey, however far from 1 \
             (a ratio alone says nothing about the noise)."
        }
    );
    out.push_str("<div class=\"scroll\"><table class=\"side\"><thead><tr><th>Case</th>");
    for (c, (k, (label, _))) in columns.iter().enumerate() {
        let role = match judged {
            Some((_, b, _)) if b == c => " <span class=\"muted\">(baseline)</span>",
            Some((_, _, n)) if n == c => " <span class=\"muted\">(candidate)</span>",
            _ => "",
        };
        let _ = write!(
            out,
            "<th><span class=\"key s{}\"><i></i></span>{}{role}</th>",
            k % super::PALETTE,
            labels::id_html(label)
        );
    }
    out.push_str("</tr></thead><tbody>");
    for id in shared {
        let _ = write!(out, "<tr><td class=\"id\"><code>{}</code></td>", labels::id_html(id));
        let median = |c: usize| find(columns[c].1.1, id).and_then(|c| c.estimates.as_ref()).map(|e| e.median);
        let base = median(base_col).map(|m| m.point);
        for (c, (_, (_, r))) in columns.iter().enumerate() {
            let case = find(r, id);
            let text = match median(c) {
                None if case.is_some_and(|c| c.status.is_failed()) => "failed".to_string(),
                None if case.is_some_and(|c| c.status.is_skipped()) => "skipped".to_string(),
                None => cells::NONE.to_string(),
                Some(m) => match base {
                    Some(b) if c != base_col && b > 0.0 => {
                        let ratio = m.point / b;
                        let verdict = judged
                            .filter(|(_, _, n)| *n == c)
                            .and_then(|(cmp, _, _)| cmp.changes.iter().find(|ch| ch.id == id))
                            .map(|ch| ch.verdict);
                        let _ = write!(
                            out,
                            "<td class=\"num\">{} <b class=\"{}\">(×{})</b></td>",
                            Esc(&units::format_time_ci(&m)),
                            ratio_class(ratio, verdict),
                            units::sig3(ratio)
                        );
                        continue;
                    }
                    _ => units::format_time_ci(&m),
                },
            };
            let _ = write!(out, "<td class=\"num\">{}</td>", Esc(&text));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_coloured_by_verdict_not_direction() {
        // The A/A report of issue 45: 0.59x and 1.34x, both inconclusive.
        assert_eq!(ratio_class(0.59, Some(Verdict::Inconclusive)), "same");
        assert_eq!(ratio_class(1.34, Some(Verdict::Inconclusive)), "same");
        assert_eq!(ratio_class(1.34, Some(Verdict::Unchanged)), "same");
        assert_eq!(ratio_class(1.34, Some(Verdict::TooFewSamples)), "same");
        assert_eq!(ratio_class(1.34, None), "same", "no verdict, no colour");
        assert_eq!(ratio_class(0.5, None), "same");
        assert_eq!(ratio_class(1.25, Some(Verdict::Regressed)), "slower");
        assert_eq!(ratio_class(0.8, Some(Verdict::Improved)), "faster");
        // A headline ratio that points against its verdict is not coloured.
        assert_eq!(ratio_class(0.97, Some(Verdict::Regressed)), "same");
        assert_eq!(ratio_class(1.02, Some(Verdict::Improved)), "same");
    }
}
