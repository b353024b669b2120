//! GitHub-flavoured Markdown for PR comments: a heading naming the machine
//! and tfbench version, a table with one row per case, the run's summary
//! (every case counted, each skip reason once with the cases it covers) and
//! the target checks.

use super::summary::{self, RunSummary};
use super::{cells, failure_text, shorten};
use crate::results::RunReport;
use crate::units;
use std::fmt::Write as _;

/// Longest failure reason shown in the status column, in characters.
const MAX_REASON: usize = 80;

/// Makes `text` safe inside a table cell: pipes escaped, line breaks as spaces.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace("\r\n", " ").replace(['\n', '\r'], " ").trim().to_string()
}

/// A case id as inline code (so `*` and `_` stay literal), or as plain text
/// when it holds a backtick.
fn code(text: &str) -> String {
    if text.contains('`') || text.is_empty() { cell(text) } else { format!("`{}`", cell(text)) }
}

fn push_row(out: &mut String, fields: &[String]) {
    out.push('|');
    for f in fields {
        out.push(' ');
        out.push_str(f);
        out.push_str(" |");
    }
    out.push('\n');
}

/// The heading, the cases table and the target checks.
pub fn render(report: &RunReport) -> String {
    let mut out = String::new();
    let cpu = report.environment.cpu_model.trim();
    let cpu = if cpu.is_empty() { "unknown CPU" } else { cpu };
    let failed = report.failed_count();
    let counts = RunSummary::of(report);
    let _ = writeln!(
        out,
        "### tfbench {} on {} ({} cases{}{}, {} threads, {})\n",
        report.tfbench_version.replace('|', "\\|"),
        cpu.replace('|', "\\|"),
        report.cases.len(),
        if failed > 0 { format!(", {failed} failed") } else { String::new() },
        if counts.skipped > 0 { format!(", {} skipped", counts.skipped) } else { String::new() },
        report.harness.threads,
        report.started_at,
    );

    let header = ["case", "status", "median [CI]", "throughput", "bound", "outliers", "allocs/iter", "notes"];
    push_row(&mut out, &header.map(String::from));
    let _ = writeln!(out, "|---|---|--:|--:|---|--:|--:|---|");
    for case in &report.cases {
        let status = match (&case.status, failure_text(&case.status)) {
            (_, None) => "ok".to_string(),
            // The reason is given once for all cases sharing it, under the table.
            (crate::results::CaseStatus::Skipped { .. }, _) => match counts.group_of(&case.id) {
                Some(k) if counts.skip_groups.len() > 1 => format!("skipped ({k})"),
                _ => "skipped".to_string(),
            },
            (_, Some(why)) => format!("**FAILED**: {}", cell(&shorten(&why, MAX_REASON))),
        };
        push_row(
            &mut out,
            &[
                code(&case.id),
                status,
                cell(&cells::median(case)),
                cell(&cells::throughput(case)),
                cell(&cells::bound(case)),
                cell(&cells::outliers(case)),
                cell(&cells::allocs(case)),
                cell(&cells::notes(case)),
            ],
        );
    }

    if !report.cases.is_empty() {
        out.push('\n');
        out.push_str(&summary::markdown(&counts));
    }

    let with_metrics: Vec<_> = report.cases.iter().filter(|c| !c.metrics.is_empty()).collect();
    if !with_metrics.is_empty() {
        out.push_str("\n**Case metrics**\n\n");
        for case in with_metrics {
            let _ = writeln!(out, "- {}: {}", code(&case.id), cell(&cells::metrics(case)));
        }
    }

    if !report.targets.is_empty() {
        out.push_str("\n**Performance targets**\n\n");
        for t in &report.targets {
            let _ = writeln!(
                out,
                "- {} {}: {} vs {} = {} (required {})",
                match (&t.caveat, t.met) {
                    (Some(_), _) => "no verdict:",
                    (None, true) => "met:",
                    (None, false) => "**NOT MET**:",
                },
                t.name,
                units::format_quantity(t.measured, &t.unit),
                units::format_quantity(t.limit, &t.unit),
                units::format_percent(t.ratio * 100.0),
                units::format_percent(t.required * 100.0),
            );
            if let Some(caveat) = &t.caveat {
                let _ = writeln!(out, "  ({caveat})");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits a GFM table row into cells, honouring `\|` escapes.
    fn split_row(line: &str) -> Vec<String> {
        let inner = line.strip_prefix('|').and_then(|l| l.strip_suffix('|')).expect(line);
        let mut cells = vec![String::new()];
        let mut chars = inner.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&'|') => {
                    chars.next();
                    cells.last_mut().unwrap().push('|');
                }
                '|' => cells.push(String::new()),
                _ => cells.last_mut().unwrap().push(c),
            }
        }
        cells.into_iter().map(|c| c.trim().to_string()).collect()
    }

    #[test]
    fn markdown_has_heading_header_and_one_row_per_case() {
        let mut report = super::super::fixture();
        report.cases[1].notes.push("a | b\nc".into());
        let text = render(&report);
        let first = text.lines().next().unwrap();
        assert!(first.starts_with("### tfbench "), "{first}");
        assert!(
            first.contains(env!("CARGO_PKG_VERSION")) && first.contains("AMD EPYC 7763 64-Core Processor")
        );
        assert!(first.contains("3 cases, 1 failed"), "{first}");

        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(rows.len(), 2 + report.cases.len(), "{text}");
        let header = split_row(rows[0]);
        assert_eq!(header[0], "case");
        assert!(rows[1].chars().all(|c| "|-: ".contains(c)));
        for (row, case) in rows[2..].iter().zip(&report.cases) {
            let cells = split_row(row);
            assert_eq!(cells.len(), header.len(), "{row}");
            assert_eq!(cells[0], format!("`{}`", case.id));
        }
        let sm = split_row(rows[3]);
        assert_eq!(sm[2], "230 µs [228, 232]");
        assert_eq!(sm[3], "27.4 GB/s (91% peak)");
        assert!(sm[7].ends_with("; a | b c"), "{}", sm[7]);
        assert!(split_row(rows[4])[1].starts_with("**FAILED**: verify: "));
        assert!(text.contains(
            "- **NOT MET**: softmax vs triad bandwidth: 27.4 GB/s vs 30.0 GB/s = 91% (required 95%)"
        ));
    }
}
