//! The human report: one table row per case, then a harness line, the
//! machine limits and the performance target checks.
//!
//! The layout never depends on the terminal: content arrangement is disabled
//! (columns as wide as their content) and styling is off, so the output is
//! the same on a TTY, in a pipe or in CI logs.

use super::{cells, units};
use crate::results::RunReport;
use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, ContentArrangement, Table};
use std::fmt::Write as _;

/// Longest failure reason shown in the status column, in characters.
const MAX_REASON: usize = 48;

fn new_table(header: Vec<String>, right_aligned: &[usize]) -> Table {
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled)
        .force_no_tty()
        .set_header(header);
    for &i in right_aligned {
        if let Some(column) = table.column_mut(i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}

/// Renders the cases table, the harness line and the target checks.
pub fn render(report: &RunReport) -> String {
    let mut out = String::new();
    if report.cases.is_empty() {
        out.push_str("no cases ran\n");
    } else {
        let level = report.cases.iter().find_map(|c| c.estimates.as_ref()).map(|e| e.median.level);
        let median_header = match level {
            Some(l) => format!("median [{} CI]", units::format_percent(l * 100.0)),
            None => "median [CI]".to_string(),
        };
        let header = [
            "case",
            "status",
            &median_header,
            "throughput",
            "bound",
            "outliers",
            "allocs/iter",
            "peak mem",
            "notes",
        ];
        let mut table = new_table(header.iter().map(|s| s.to_string()).collect(), &[5, 6, 7]);
        for case in &report.cases {
            table.add_row(vec![
                case.id.clone(),
                cells::status(case, MAX_REASON),
                cells::median(case),
                cells::throughput(case),
                cells::bound(case),
                cells::outliers(case),
                cells::allocs(case),
                cells::peak(case),
                cells::notes(case),
            ]);
        }
        out.push_str(&table.trim_fmt());
        out.push('\n');
        let with_metrics: Vec<_> = report.cases.iter().filter(|c| !c.metrics.is_empty()).collect();
        if !with_metrics.is_empty() {
            out.push_str("case metrics:\n");
            let mut table = new_table(vec!["case".into(), "metrics".into()], &[]);
            for case in with_metrics {
                table.add_row(vec![case.id.clone(), cells::metrics(case)]);
            }
            out.push_str(&table.trim_fmt());
            out.push('\n');
        }
    }

    let h = &report.harness;
    let failed = report.failed_count();
    let _ = writeln!(
        out,
        "harness: timer resolution {}, timer overhead {}, empty loop {}/iter; {} threads; wall time {}; {}",
        units::format_time_ns(h.timer_resolution_ns),
        units::format_time_ns(h.timer_overhead_ns),
        units::format_time_ns(h.empty_loop_ns_per_iter),
        h.threads,
        units::format_time_ns(report.wall_time_secs * 1e9),
        if failed == 0 {
            format!("{} cases, none failed", report.cases.len())
        } else {
            format!("{failed} of {} cases FAILED", report.cases.len())
        },
    );

    if let Some(m) = &report.machine_limits {
        let _ = writeln!(
            out,
            "machine limits (probed {}, {} threads): FMA peak {} ({} one core), triad {} ({} one thread)",
            m.measured_at,
            m.threads,
            units::format_rate(m.peak_flops_all_cores, "FLOP/s"),
            units::format_rate(m.peak_flops_one_core, "FLOP/s"),
            units::format_rate(m.triad_bandwidth_all_threads, "B/s"),
            units::format_rate(m.triad_bandwidth_one_thread, "B/s"),
        );
    }

    if !report.targets.is_empty() {
        out.push_str("performance targets:\n");
        let header = ["target", "measured", "limit", "ratio", "required", "result"];
        let mut table = new_table(header.iter().map(|s| s.to_string()).collect(), &[1, 2, 3, 4]);
        for t in &report.targets {
            table.add_row(vec![
                format!("{} ({})", t.name, t.case_id),
                units::format_quantity(t.measured, &t.unit),
                units::format_quantity(t.limit, &t.unit),
                units::format_percent(t.ratio * 100.0),
                format!(">= {}", units::format_percent(t.required * 100.0)),
                match (&t.caveat, t.met) {
                    (Some(_), _) => "no verdict",
                    (None, true) => "met",
                    (None, false) => "NOT MET",
                }
                .to_string(),
            ]);
        }
        out.push_str(&table.trim_fmt());
        out.push('\n');
        for caveat in report.targets.iter().filter_map(|t| t.caveat.as_ref()) {
            let _ = writeln!(out, "{caveat}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shows_each_case_and_the_harness_and_targets() {
        let report = super::super::fixture();
        let text = render(&report);
        // One table line per case, found by id, in order.
        let positions: Vec<usize> = report.cases.iter().map(|c| text.find(&c.id).expect(&c.id)).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{text}");

        let line =
            |needle: &str| text.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle}"));
        let metrics = text.split("case metrics:").nth(1).expect("a case-metrics table");
        assert!(metrics.contains("max_abs_error 2.50e-7"), "{metrics}");
        assert!(metrics.contains("working_set 6.00 MiB"), "{metrics}");
        let mm = line("tensor/matmul/");
        for want in ["ok", "108 µs [107, 108]", "312 GFLOP/s (89% peak)", "compute", "3 (1 severe)", "0 B"] {
            assert!(mm.contains(want), "{want} not in {mm}");
        }
        let sm = line("tensor/softmax/");
        for want in
            ["230 µs [228, 232]", "27.4 GB/s (91% peak)", "memory", "3.00 MiB", "12.5%, above 10%; sampling"]
        {
            assert!(sm.contains(want), "{want} not in {sm}");
        }
        let ln = line("tensor/layernorm/");
        assert!(ln.contains("FAILED: verify: verification against naive loop failed"), "{ln}");
        assert!(ln.contains('…'), "long reason is shortened: {ln}");
        assert!(text.contains("median [95% CI]"));

        let harness = line("harness:");
        for want in
            ["timer resolution 20.0 ns", "timer overhead 24.7 ns", "empty loop 0.310 ns/iter", "2 threads"]
        {
            assert!(harness.contains(want), "{want} not in {harness}");
        }
        assert!(harness.contains("wall time 42.5 s") && harness.contains("1 of 3 cases FAILED"), "{harness}");
        assert!(line("machine limits").contains("FMA peak 350 GFLOP/s"));

        let gemm = line("best GEMM");
        for want in ["312 GFLOP/s", "350 GFLOP/s", "89%", ">= 80%", "met"] {
            assert!(gemm.contains(want), "{want} not in {gemm}");
        }
        assert!(line("softmax vs triad").contains("NOT MET"));
        assert!(text.lines().all(|l| l == l.trim_end()), "no trailing spaces");
    }

    #[test]
    fn a_target_with_a_caveat_shows_no_verdict_and_why() {
        let mut report = super::super::fixture();
        report.targets[0].met = false;
        report.targets[0].caveat = Some("no verdict: the probe ran while the machine was busy".into());
        let text = render(&report);
        let gemm = text.lines().find(|l| l.contains("best GEMM")).expect("the GEMM target row");
        assert!(gemm.contains("no verdict") && !gemm.contains("NOT MET"), "{gemm}");
        assert!(text.lines().any(|l| l == "no verdict: the probe ran while the machine was busy"), "{text}");
        let md = super::super::markdown::render(&report);
        assert!(md.contains("- no verdict: best GEMM") && md.contains("(no verdict: the probe ran"), "{md}");
    }

    #[test]
    fn empty_reports_say_so() {
        let mut report = super::super::fixture();
        report.cases.clear();
        report.targets.clear();
        report.machine_limits = None;
        let text = render(&report);
        assert!(text.starts_with("no cases ran\n"), "{text}");
        assert_eq!(text.lines().count(), 2, "{text}");
    }
}
