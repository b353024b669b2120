//! The human report: one table row per case, then the run's summary
//! (counts, skip reasons grouped), footnotes, a harness line, the machine
//! limits and the performance target checks.
//!
//! Width: [`TableView`] says how wide the output may be. With a width, the
//! table uses comfy-table's dynamic arrangement (cells wrap to fit) and the
//! lines under it are word-wrapped to the same width; long failure reasons
//! and notes are shortened in their cells and given whole in a numbered
//! footnote list under the table, and a skipped case's cell points at its
//! reason, which the summary gives once for all cases sharing it. Without a
//! width (a pipe or a file, unless `COLUMNS` is set) each case stays on one
//! line, so logs can be grepped by case id. `--wide` turns shortening off
//! too: every reason and note whole in its cell. Styling is always off, so
//! the output is the same on a TTY, in a pipe or in CI logs.

use super::cells;
use super::summary::{self, RunSummary};
use crate::results::{CaseResult, CaseStatus, RunReport};
use crate::units;
use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, ContentArrangement, Table};

/// Longest failure reason shown in the status column, in characters.
const MAX_REASON: usize = 48;

/// Longest notes text shown in the notes column, in characters; longer
/// notes get a footnote.
const MAX_NOTES: usize = 40;

/// Width used when a table must fit but nothing says how wide: a terminal
/// that reports no size.
pub const DEFAULT_WIDTH: u16 = 100;

/// Narrowest width honoured; below it the table could not show a row.
const MIN_WIDTH: u16 = 40;

/// How the table is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableView {
    /// Most characters per line; `None`: as wide as the content.
    pub width: Option<u16>,
    /// Every reason and note whole in its cell (`--wide`); implies no width.
    pub wide: bool,
}

impl TableView {
    /// The view for stdout: `--wide` wins; else `COLUMNS` when set to a
    /// number; else the terminal's width when stdout is one (or
    /// [`DEFAULT_WIDTH`] when it reports none); else (a pipe, a file) no
    /// limit, one line per case.
    pub fn for_stdout(wide: bool) -> Self {
        if wide {
            return TableView { width: None, wide: true };
        }
        let columns = std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse::<u16>().ok());
        let width = columns.or_else(|| {
            use std::io::IsTerminal;
            std::io::stdout().is_terminal().then(|| terminal_width().unwrap_or(DEFAULT_WIDTH))
        });
        TableView { width: width.map(|w| w.max(MIN_WIDTH)), wide: false }
    }
}

/// Columns of the terminal on stdout, from the kernel (TIOCGWINSZ).
fn terminal_width() -> Option<u16> {
    // SAFETY: TIOCGWINSZ fills a `winsize` we own; a failed call leaves it zeroed.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_col > 0).then_some(ws.ws_col)
}

fn new_table(header: Vec<String>, right_aligned: &[usize], view: &TableView) -> Table {
    let mut table = Table::new();
    table.load_style(UTF8_FULL_CONDENSED).force_no_tty().set_header(header);
    match view.width {
        Some(w) if !view.wide => {
            table.set_content_arrangement(ContentArrangement::Dynamic).set_width(w);
        }
        _ => {
            table.set_content_arrangement(ContentArrangement::Disabled);
        }
    }
    for &i in right_aligned {
        if let Some(column) = table.column_mut(i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}

/// Word-wraps `text` to `width` (continuation lines indented by two
/// spaces); a word longer than a line is cut. No width: unchanged.
pub(crate) fn wrap(text: &str, width: Option<u16>) -> String {
    let Some(width) = width.map(usize::from) else { return format!("{text}\n") };
    let mut out = String::new();
    let mut line = String::new();
    // Whether `line` holds no word yet (only the continuation indent).
    let mut fresh = true;
    for word in text.split_whitespace() {
        let mut word = word.to_string();
        while !word.is_empty() {
            let used = line.chars().count();
            let need = word.chars().count() + usize::from(!fresh);
            if used + need <= width {
                if !fresh {
                    line.push(' ');
                }
                line.push_str(&word);
                fresh = false;
                break;
            }
            if fresh {
                // A word longer than a whole line: cut it.
                let room = width.saturating_sub(used).max(1);
                line.extend(word.chars().take(room));
                word = word.chars().skip(room).collect();
            }
            out.push_str(&line);
            out.push('\n');
            line = "  ".to_string();
            fresh = true;
        }
    }
    if !fresh {
        out.push_str(&line);
        out.push('\n');
    }
    if out.is_empty() {
        out.push('\n');
    }
    out
}

/// Footnotes of one table: full texts of shortened cells, numbered from 1.
#[derive(Default)]
struct Footnotes(Vec<(String, String)>);

impl Footnotes {
    /// `text` whole when it fits `max`, else shortened with a `[n]` marker
    /// and the whole text kept as footnote n (about `id`).
    fn cell(&mut self, text: &str, max: usize, id: &str, view: &TableView) -> String {
        if view.wide || (text.chars().count() <= max && !text.contains('\n')) {
            return text.replace('\n', " ");
        }
        self.0.push((id.to_string(), text.replace('\n', " ")));
        format!("{} [{}]", super::shorten(text, max), self.0.len())
    }
}

/// The status cell: `ok`, `FAILED: phase: reason` (shortened with a
/// footnote) or `skipped` pointing at the summary's reason line.
fn status_cell(
    case: &CaseResult,
    s: &RunSummary,
    notes: &mut Footnotes,
    view: &TableView,
    max_reason: usize,
) -> String {
    match &case.status {
        CaseStatus::Ok => "ok".into(),
        CaseStatus::Failed { .. } if !view.wide => {
            let whole = cells::status(case, usize::MAX);
            if max_reason == 0 {
                notes.0.push((case.id.clone(), whole));
                return format!("FAILED [{}]", notes.0.len());
            }
            let short = cells::status(case, max_reason);
            if short == whole {
                short
            } else {
                notes.0.push((case.id.clone(), whole));
                format!("{short} [{}]", notes.0.len())
            }
        }
        CaseStatus::Failed { .. } => cells::status(case, usize::MAX),
        CaseStatus::Skipped { reason } if view.wide => {
            format!("skipped: {}", summary::without_case_id(reason, &case.id).replace('\n', " "))
        }
        CaseStatus::Skipped { .. } => match s.group_of(&case.id) {
            Some(k) if s.skip_groups.len() > 1 => format!("skipped ({k})"),
            _ => "skipped".into(),
        },
    }
}

/// Renders the report as wide as its content (see [`render_with`]).
pub fn render(report: &RunReport) -> String {
    render_with(report, &TableView::default())
}

/// Width below which the cases table drops the bound and outlier columns
/// and joins allocations and peak memory into one: nine columns do not fit
/// 100 characters with every case id still readable.
const COMPACT_BELOW: u16 = 150;

/// `id` broken into lines of at most `max` characters after its commas and
/// slashes (where a reader splits it anyway), cut inside a part only when
/// one part alone is longer than a line.
fn break_id(id: &str, max: usize) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = String::new();
    for ch in id.chars() {
        cur.push(ch);
        if ch == ',' || ch == '/' {
            parts.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        parts.push(cur);
    }
    let mut lines: Vec<String> = vec![String::new()];
    for part in parts {
        let mut part = part;
        loop {
            let line = lines.last_mut().expect("one line at least");
            let used = line.chars().count();
            if used + part.chars().count() <= max {
                line.push_str(&part);
                break;
            }
            if used > 0 {
                lines.push(String::new());
                continue;
            }
            line.extend(part.chars().take(max));
            part = part.chars().skip(max).collect();
            lines.push(String::new());
            if part.is_empty() {
                break;
            }
        }
    }
    lines.retain(|l| !l.is_empty());
    lines.join("\n")
}

/// Renders the cases table, the summary, footnotes, the harness line and
/// the target checks, laid out for `view`.
pub fn render_with(report: &RunReport, view: &TableView) -> String {
    let mut out = String::new();
    let summary = RunSummary::of(report);
    if report.cases.is_empty() {
        out.push_str("no cases ran\n");
    } else {
        out.push_str(&cases_section(report, &summary, view));
        out.push_str(&summary_section(&summary, view));
    }
    out.push_str(&harness_section(report, view));
    out.push_str(&targets_section(report, view));
    out
}

/// The cases table, its footnotes and the case metrics table.
fn cases_section(report: &RunReport, summary: &RunSummary, view: &TableView) -> String {
    let mut out = String::new();
    let mut footnotes = Footnotes::default();
    let compact = !view.wide && view.width.is_some_and(|w| w < COMPACT_BELOW);
    let table = cases_table(report, summary, view, compact, &mut footnotes);
    out.push_str(&table.trim_fmt());
    out.push('\n');
    if compact {
        out.push_str(&wrap("(narrow table: bound and outliers are in --wide and JSON)", view.width));
    }
    for (k, (id, text)) in footnotes.0.iter().enumerate() {
        out.push_str(&wrap(&format!("[{}] {id}: {text}", k + 1), view.width));
    }
    let with_metrics: Vec<_> = report.cases.iter().filter(|c| !c.metrics.is_empty()).collect();
    if !with_metrics.is_empty() {
        out.push_str("case metrics:\n");
        let mut table = new_table(vec!["case".into(), "metrics".into()], &[], view);
        for case in with_metrics {
            table.add_row(vec![case.id.clone(), cells::metrics(case)]);
        }
        out.push_str(&table.trim_fmt());
        out.push('\n');
    }
    out
}

/// The table of cases, one row each (`compact`: bound and outliers left
/// out, allocations and peak in one column); long status reasons and notes
/// go to `footnotes`.
fn cases_table(
    report: &RunReport,
    summary: &RunSummary,
    view: &TableView,
    compact: bool,
    footnotes: &mut Footnotes,
) -> Table {
    use comfy_table::{ColumnConstraint, Width};
    let level = report.cases.iter().find_map(|c| c.estimates.as_ref()).map(|e| e.median.level);
    let median_header = match level {
        Some(l) => format!("median [{} CI]", units::format_percent(l * 100.0)),
        None => "median [CI]".to_string(),
    };
    let header: Vec<String> = if compact {
        ["case", "status", &median_header, "throughput", "allocs/iter, peak", "notes"]
            .map(String::from)
            .to_vec()
    } else {
        [
            "case",
            "status",
            &median_header,
            "throughput",
            "bound",
            "outliers",
            "allocs/iter",
            "peak mem",
            "notes",
        ]
        .map(String::from)
        .to_vec()
    };
    let mut table = new_table(header, if compact { &[4] } else { &[5, 6, 7] }, view);
    // The case column gets a fixed share and ids break at their commas,
    // instead of comfy-table's even split cutting ids every few letters.
    let case_w = view.width.filter(|_| !view.wide).map(|w| {
        let longest = report.cases.iter().map(|c| c.id.chars().count()).max().unwrap_or(4);
        longest.clamp(12, (usize::from(w) * 3 / 10).max(12))
    });
    if let (Some(w), Some(col)) = (case_w, table.column_mut(0)) {
        col.set_constraint(ColumnConstraint::Absolute(Width::Fixed(w as u16)));
    }
    if let Some(col) = table.column_mut(1).filter(|_| view.width.is_some()) {
        col.set_constraint(ColumnConstraint::ContentWidth);
    }
    let max_reason = if compact { 0 } else { MAX_REASON };
    for case in &report.cases {
        let status = status_cell(case, summary, footnotes, view, max_reason);
        let notes = footnotes.cell(&cells::notes(case), MAX_NOTES, &case.id, view);
        let id = case_w.map_or_else(|| case.id.clone(), |w| break_id(&case.id, w));
        table.add_row(case_row(case, id, status, notes, compact));
    }
    table
}

/// One case's row of the cases table, its id, status and notes cells given.
fn case_row(case: &CaseResult, id: String, status: String, notes: String, compact: bool) -> Vec<String> {
    if compact {
        let mem = match (cells::allocs(case).as_str(), cells::peak(case)) {
            (cells::NONE, _) => cells::NONE.to_string(),
            (a, p) => format!("{a}, {p}"),
        };
        vec![id, status, cells::median(case), cells::throughput(case), mem, notes]
    } else {
        vec![
            id,
            status,
            cells::median(case),
            cells::throughput(case),
            cells::bound(case),
            cells::outliers(case),
            cells::allocs(case),
            cells::peak(case),
            notes,
        ]
    }
}

/// The summary's lines: every case counted, skip reasons once per distinct
/// reason (whole with --wide, else shortened to a line's worth).
fn summary_section(summary: &RunSummary, view: &TableView) -> String {
    let max_reason = if view.wide {
        None
    } else {
        // About two lines' worth, with room for the count and the case list.
        Some(view.width.map_or(200, |w| (usize::from(w) * 2).saturating_sub(40).max(60)))
    };
    summary::text_lines(summary, max_reason).iter().map(|line| wrap(line, view.width)).collect()
}

/// The harness line and, when the machine was probed, its limits.
fn harness_section(report: &RunReport, view: &TableView) -> String {
    let h = &report.harness;
    let line = format!(
        "harness: timer resolution {}, timer overhead {}, empty loop {}/iter; {} threads; wall time {}",
        units::format_time_ns(h.timer_resolution_ns),
        units::format_time_ns(h.timer_overhead_ns),
        units::format_time_ns(h.empty_loop_ns_per_iter),
        h.threads,
        units::format_time_ns(report.wall_time_secs * 1e9),
    );
    let mut out = wrap(&line, view.width);
    if let Some(m) = &report.machine_limits {
        let line = format!(
            "machine limits (probed {}, {} threads; load {}): FMA peak {} ({} one core), triad {} ({} one thread)",
            m.measured_at,
            m.threads,
            m.load_brief(),
            units::format_rate(m.peak_flops_all_cores, "FLOP/s"),
            units::format_rate(m.peak_flops_one_core, "FLOP/s"),
            units::format_rate(m.triad_bandwidth_all_threads, "B/s"),
            units::format_rate(m.triad_bandwidth_one_thread, "B/s"),
        );
        out.push_str(&wrap(&line, view.width));
        if !m.levels.is_empty() {
            // The cache-aware roofline's roofs, which "% of L2" and the like
            // in the throughput column refer to.
            let roofs: Vec<String> = m
                .levels
                .iter()
                .map(|l| format!("{} {}", l.level, units::format_rate(l.best_all_threads(), "B/s")))
                .collect();
            out.push_str(&wrap(
                &format!("roofs (best of read, copy, triad; all threads): {}", roofs.join(", ")),
                view.width,
            ));
        }
    }
    out
}

/// The performance targets' table and caveats (empty without targets).
fn targets_section(report: &RunReport, view: &TableView) -> String {
    let mut out = String::new();
    if report.targets.is_empty() {
        return out;
    }
    out.push_str("performance targets:\n");
    let header = ["target", "measured", "limit", "ratio", "required", "result"];
    let mut table = new_table(header.iter().map(|s| s.to_string()).collect(), &[1, 2, 3, 4], view);
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
        out.push_str(&wrap(caveat, view.width));
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
        for want in ["230 µs [228, 232]", "27.4 GB/s (91% peak)", "memory", "3.00 MiB", "noisy: IQR/median"]
        {
            assert!(sm.contains(want), "{want} not in {sm}");
        }
        // The softmax notes are too long for their cell: shortened, whole in footnote 1.
        assert!(sm.contains("… [1]"), "{sm}");
        let note = line("[1] tensor/softmax/");
        assert!(
            note.ends_with("12.5%, above 10%; sampling cut by the \"max-time\" budget (10 of 100 samples)")
        );
        let ln = line("tensor/layernorm/");
        assert!(ln.contains("FAILED: verify: verification against naive loop failed"), "{ln}");
        assert!(ln.contains("… [2]"), "long reason is shortened, whole in footnote 2: {ln}");
        assert!(line("[2] tensor/layernorm/").contains("reference 1.25 (atol 1e-5, rtol 1e-4)"));
        assert!(text.contains("median [95% CI]"));

        let harness = line("harness:");
        for want in
            ["timer resolution 20.0 ns", "timer overhead 24.7 ns", "empty loop 0.310 ns/iter", "2 threads"]
        {
            assert!(harness.contains(want), "{want} not in {harness}");
        }
        assert!(harness.contains("wall time 42.5 s"), "{harness}");
        assert!(text.lines().any(|l| l == "3 cases: 2 ok, 0 skipped, 1 failed"), "{text}");
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
        assert!(!text.contains("0 ok"), "no summary of nothing: {text}");
        assert_eq!(text.lines().count(), 2, "{text}");
    }

    /// The fixture with many long-id cases skipped for one long reason and
    /// a second reason, like the tensor suite without OpenBLAS.
    fn with_skips() -> RunReport {
        let mut report = super::super::fixture();
        let template = report.cases[2].clone();
        let reason = format!(
            "impl=openblas: no usable OpenBLAS ({}); run scripts/fetch-test-data.sh",
            "x ".repeat(280)
        );
        for shape in ["64x64x64", "256x256x256", "1024x1024x1024", "128x768x3072", "1x4096x4096"] {
            let mut c = template.clone();
            c.id = format!("tensor/matmul/impl=openblas,shape={shape},threads=all");
            c.status = CaseStatus::Skipped { reason: reason.clone() };
            report.cases.push(c);
        }
        let mut c = template;
        c.id = "quant/int8_gemm/path=avx_vnni,shape=128x768x768".into();
        c.status = CaseStatus::Skipped { reason: "this CPU has no avx_vnni instructions".into() };
        report.cases.push(c);
        report
    }

    #[test]
    fn at_100_columns_no_line_is_wider_and_every_case_is_counted() {
        let report = with_skips();
        let text = render_with(&report, &TableView { width: Some(100), wide: false });
        for l in text.lines() {
            assert!(l.chars().count() <= 100, "{} chars: {l}\n{text}", l.chars().count());
        }
        assert!(text.lines().any(|l| l == "9 cases: 2 ok, 6 skipped, 1 failed"), "{text}");
        // Each reason once, the long one shortened, with the cases it covers.
        assert_eq!(text.matches("no usable OpenBLAS").count(), 1, "{text}");
        assert!(text.contains("(1) 5 skipped: impl=openblas: no usable OpenBLAS"), "{text}");
        assert!(text.contains("(tensor/matmul/impl=openblas,threads=all,… ×5)"), "{text}");
        assert!(text.contains("(2) 1 skipped: this CPU has no avx_vnni instructions"), "{text}");
        assert!(text.contains("skipped (1)") && text.contains("skipped (2)"), "{text}");
        // Ids break at commas, never inside a parameter.
        assert!(text.contains("shape=1024x1024x1024,"), "{text}");
        assert!(text.contains("FAILED [2]"), "compact status points at the footnote: {text}");
    }

    #[test]
    fn wide_shows_every_reason_and_note_whole_in_its_row() {
        let report = with_skips();
        let text = render_with(&report, &TableView { width: None, wide: true });
        let row = text.lines().find(|l| l.contains("shape=64x64x64,threads=all")).expect("row");
        assert!(row.contains("run scripts/fetch-test-data.sh"), "{row}");
        let sm = text.lines().find(|l| l.contains("tensor/softmax/")).expect("row");
        assert!(sm.contains("(10 of 100 samples)") && !sm.contains('…'), "{sm}");
        assert!(!text.contains("[1] "), "no footnotes: {text}");
    }

    #[test]
    fn without_a_width_each_case_stays_on_one_line() {
        let report = with_skips();
        let text = render(&report);
        let cases = text.split("case metrics:").next().expect("the cases table");
        for c in &report.cases {
            let rows = cases.lines().filter(|l| l.starts_with('│') && l.contains(&c.id)).count();
            assert_eq!(rows, 1, "{}: {text}", c.id);
        }
    }

    #[test]
    fn wrap_breaks_at_spaces_and_cuts_only_overlong_words() {
        assert_eq!(wrap("a bb ccc", Some(5)), "a bb\n  ccc\n");
        assert_eq!(wrap("abcdefgh", Some(4)), "abcd\n  ef\n  gh\n");
        assert_eq!(wrap("a bb ccc", None), "a bb ccc\n");
        assert_eq!(break_id("s/b/x=1,y=22", 6), "s/b/\nx=1,\ny=22");
    }
}
