//! A [`Comparison`] for people (terminal table, Markdown for PR comments)
//! and for tools (JSON).

use super::{CaseChange, Comparison, MemoryChange, Verdict};
use crate::units;
use anyhow::{Context, Result};
use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{Cell, CellAlignment, Color, ContentArrangement, Table};
use serde::Serialize;
use std::fmt::Write as _;

/// Version of the comparison JSON layout; bump it on any incompatible change.
pub const COMPARISON_SCHEMA_VERSION: u32 = 2;

/// Marker for a value that does not exist.
const NONE: &str = "-";

/// `1 regressed, 2 improved, 3 unchanged, 0 inconclusive`, then the cases
/// without evidence kept apart from those shown unchanged.
fn summary(c: &Comparison) -> String {
    let mut s = format!(
        "{} regressed, {} improved, {} unchanged, {} inconclusive",
        c.count(Verdict::Regressed),
        c.count(Verdict::Improved),
        c.count(Verdict::Unchanged),
        c.count(Verdict::Inconclusive)
    );
    let few = c.count(Verdict::TooFewSamples);
    if few > 0 {
        let _ = write!(s, ", {few} with too few samples");
    }
    s
}

/// `no change shown: 3 (interval inside the band); no evidence: 2`.
fn evidence(c: &Comparison) -> String {
    let none = c.count(Verdict::Inconclusive) + c.count(Verdict::TooFewSamples);
    format!(
        "no change shown in {} (interval inside the band); no evidence either way in {none}",
        c.count(Verdict::Unchanged)
    )
}

/// The lines a reader must see before trusting the verdicts.
fn preamble(c: &Comparison) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(v) = &c.vacuous {
        lines.push(format!("WARNING: nothing to judge: {v}"));
    }
    if let Some(d) = &c.drift {
        lines.push(d.describe());
    }
    lines.extend(c.notes.iter().cloned());
    lines
}

/// What gates, or that nothing does: `1 over the 5% regression limit, 1 memory regression`.
fn gating(c: &Comparison) -> String {
    let (time, memory) = (c.regressions().len(), c.memory_regressions().len());
    if time == 0 && memory == 0 {
        return "no regression beyond the limits".into();
    }
    // Counts gate on their band (`compare::counts`), times on the limit.
    let counted = c.changes.iter().any(|ch| ch.measure == crate::inside::Measure::Instructions);
    let limit = if counted {
        format!("±{} instruction-count band", percent(c.options.count_band))
    } else {
        format!("{} regression limit", percent(c.options.max_regression))
    };
    let plural = if memory == 1 { "" } else { "s" };
    format!("{time} over the {limit}, {memory} memory regression{plural}")
}

/// The settings behind the verdicts, one line.
fn settings(c: &Comparison) -> String {
    let o = &c.options;
    if c.changes.iter().any(|ch| ch.measure == crate::inside::Measure::Instructions) {
        return format!(
            "instructions per iteration under callgrind, a change beyond ±{} is a change (--count-band); no statistics: counts are deterministic",
            percent(o.count_band)
        );
    }
    let interval = match c.method {
        crate::compare::Method::Stored => format!(
            "{} hierarchical bootstrap CI of the median ratio ({} resamples; runs {} vs {})",
            percent(o.confidence_level),
            o.resamples,
            c.runs.0,
            c.runs.1
        ),
        crate::compare::Method::Paired => {
            format!(
                "{} order-statistic CI of the median paired ratio; Wilcoxon signed-rank p",
                percent(o.confidence_level)
            )
        }
    };
    format!(
        "significant when q < {} (Benjamini-Hochberg) or p < {}; noise band ±{} (or {} x the case's learned spread); \
         regression limit {}; memory limit {}; at least {} samples a side; {interval}",
        o.alpha,
        o.case_alpha,
        percent(o.noise_threshold),
        o.noise_k,
        percent(o.max_regression),
        percent(o.max_memory_regression),
        o.min_samples,
    )
}

fn mismatch_warning(text: &str) -> String {
    format!("WARNING: machine mismatch: {text}; timings from different machines are not comparable")
}

/// A fraction as a percentage: `0.05` is `5%`, `0.025` is `2.5%`.
fn percent(fraction: f64) -> String {
    let pct = fraction * 100.0;
    if pct.fract() == 0.0 { format!("{pct:.0}%") } else { units::format_percent(pct) }
}

/// A ratio as a signed change: `1.102` is `+10.2%`.
fn signed_change(ratio: f64) -> String {
    if !ratio.is_finite() {
        return units::NOT_AVAILABLE.into();
    }
    // Rounded first so a tiny negative change prints `+0.0%`, not `-0.0%`.
    let pct = ((ratio - 1.0) * 1000.0).round() / 10.0;
    format!("{:+.1}%", pct + 0.0)
}

/// `+10.2% [+9.1%, +11.3%]`.
fn change_cell(c: &CaseChange) -> String {
    let r = &c.ratio;
    format!("{} [{}, {}]", signed_change(r.point), signed_change(r.lower), signed_change(r.upper))
}

/// A side's figure in the unit of the case's measure: a time, or
/// instructions per iteration.
fn value_cell(c: &CaseChange, v: f64) -> String {
    match c.measure {
        crate::inside::Measure::Time => units::format_time_ns(v),
        crate::inside::Measure::Instructions => format!("{} instr", crate::inside::si(v)),
    }
}

/// `<0.001`, `0.034`, `1.000`.
fn p_cell(p: f64) -> String {
    if !p.is_finite() {
        units::NOT_AVAILABLE.into()
    } else if p < 0.001 {
        "<0.001".into()
    } else {
        format!("{p:.3}")
    }
}

/// `±2%`, or `±6.3% (history)` when learned from history.
fn band_cell(c: &CaseChange) -> String {
    let b = format!("±{}", units::format_percent(c.band * 100.0));
    if c.band_source.starts_with("history") { format!("{b} (history)") } else { b }
}

fn verdict_cell(c: &CaseChange) -> String {
    let v = if c.beyond_limit { format!("{} (over limit)", c.verdict) } else { c.verdict.to_string() };
    match &c.disturbed {
        // Rounds measured while another process held a core: say which.
        Some(d) => format!("{v} ({d})"),
        None => v,
    }
}

/// `=`, `+50%`, `-10%`, or `new` for growth from zero.
fn growth(ratio: f64) -> String {
    if ratio == 1.0 {
        "=".into()
    } else if ratio.is_infinite() {
        "new".into()
    } else {
        signed_change(ratio)
    }
}

/// `peak 1.50 MiB (+50%), 2 allocs/iter (=)`, with `, over limit` when it gates.
fn memory_cell(m: Option<&MemoryChange>) -> String {
    let Some(m) = m else { return NONE.into() };
    format!(
        "peak {} ({}), {} allocs/iter ({}){}",
        units::format_bytes(m.new_peak_bytes as f64),
        growth(m.peak_ratio),
        units::format_count(m.new_allocs_per_iter),
        growth(m.allocs_ratio),
        if m.regressed { ", over limit" } else { "" }
    )
}

fn ci_header(c: &Comparison) -> String {
    format!("change [{} CI]", percent(c.options.confidence_level))
}

/// The lists of cases that were not compared, one line each: missing on a
/// side, failed (each with its side and reason, which the gate reads), and
/// the compared cases that could not be judged, each with why.
fn not_compared(c: &Comparison, item: impl Fn(&str) -> String) -> Vec<String> {
    let lists = [
        ("only in baseline", &c.only_in_baseline),
        ("only in candidate", &c.only_in_candidate),
        ("failed in either run", &c.failed),
    ];
    let mut out: Vec<String> = lists
        .iter()
        .filter(|(_, ids)| !ids.is_empty())
        .map(|(what, ids)| {
            let items: Vec<String> = ids.iter().map(|id| item(id)).collect();
            format!("{what}, not compared ({}): {}", ids.len(), items.join(", "))
        })
        .collect();
    for f in &c.failures {
        let gate = if f.gates() { " (fails the gate)" } else { "" };
        out.push(format!("FAILED {}: {}{gate}: {}", item(&f.id), f.side.describe(), f.reason));
    }
    let unjudged = super::gate::unjudged(c);
    if !unjudged.is_empty() {
        out.push(format!("could not judge {} of {} compared case(s):", unjudged.len(), c.changes.len()));
        out.extend(unjudged.iter().map(|(ch, why)| format!("  {}: {why}", item(&ch.id))));
    }
    out
}

/// The comparison as a terminal table: a mismatch warning first when the
/// machines differ, the summary, one row per compared case, the cases not
/// compared and the settings. Colours (red regressed, green improved) only
/// when `color` is true; the layout never depends on the terminal.
pub fn render_table(c: &Comparison, color: bool) -> String {
    let mut out = String::new();
    if let Some(m) = &c.machine_mismatch {
        let _ = writeln!(out, "{}", mismatch_warning(m));
    }
    let _ = writeln!(out, "`{}` vs baseline `{}`: {}; {}", c.candidate, c.baseline, summary(c), gating(c));
    for line in preamble(c) {
        let _ = writeln!(out, "{line}");
    }
    if c.changes.is_empty() {
        out.push_str("no case measured in both runs\n");
    } else {
        let mut table = Table::new();
        table
            .load_style(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Disabled)
            .force_no_tty();
        if color {
            table.enforce_styling();
        }
        let ci = ci_header(c);
        table.set_header(vec![
            "case",
            "old median",
            "new median",
            &ci,
            "band",
            "p",
            "q",
            "verdict",
            "memory",
        ]);
        for i in 1..=6 {
            if let Some(column) = table.column_mut(i) {
                column.set_cell_alignment(CellAlignment::Right);
            }
        }
        let paint = |text: String, colour: Option<Color>| match colour {
            Some(col) if color => Cell::new(text).fg(col),
            _ => Cell::new(text),
        };
        for ch in &c.changes {
            let verdict_colour = match ch.verdict {
                Verdict::Regressed => Some(Color::Red),
                Verdict::Improved => Some(Color::Green),
                _ => None,
            };
            let memory_colour = ch.memory.as_ref().filter(|m| m.regressed).map(|_| Color::Red);
            table.add_row(vec![
                Cell::new(&ch.id),
                Cell::new(value_cell(ch, ch.old_median_ns)),
                Cell::new(value_cell(ch, ch.new_median_ns)),
                paint(change_cell(ch), verdict_colour),
                Cell::new(band_cell(ch)),
                Cell::new(p_cell(ch.p_value)),
                Cell::new(p_cell(ch.q_value)),
                paint(verdict_cell(ch), verdict_colour),
                paint(memory_cell(ch.memory.as_ref()), memory_colour),
            ]);
        }
        out.push_str(&table.trim_fmt());
        out.push('\n');
    }
    if !c.changes.is_empty() {
        let _ = writeln!(out, "{}", evidence(c));
    }
    for line in not_compared(c, str::to_string) {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "settings: {}", settings(c));
    out
}

/// Makes `text` safe inside a Markdown table cell.
fn md_cell(text: &str) -> String {
    text.replace('|', "\\|").replace("\r\n", " ").replace(['\n', '\r'], " ").trim().to_string()
}

/// A case id as inline code, or as plain text when it holds a backtick.
fn md_code(text: &str) -> String {
    if text.contains('`') || text.is_empty() { md_cell(text) } else { format!("`{}`", md_cell(text)) }
}

/// GitHub-flavoured Markdown for a PR comment: heading, mismatch warning,
/// summary line, the table, the cases not compared and the settings.
pub fn render_markdown(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "### tfbench: {} vs baseline {}\n", md_code(&c.candidate), md_code(&c.baseline));
    if let Some(m) = &c.machine_mismatch {
        let _ = writeln!(out, "> **{}**\n", md_cell(&mismatch_warning(m)));
    }
    let _ = writeln!(out, "**{}**; {}.\n", summary(c), gating(c));
    for line in preamble(c) {
        let _ = writeln!(out, "> {}\n", md_cell(&line));
    }
    if c.changes.is_empty() {
        out.push_str("No case was measured in both runs.\n\n");
    } else {
        let _ = writeln!(out, "{}.\n", evidence(c));
        let _ = writeln!(
            out,
            "| case | old median | new median | {} | band | p | q | verdict | memory |",
            ci_header(c)
        );
        out.push_str("|---|--:|--:|--:|--:|--:|--:|---|---|\n");
        for ch in &c.changes {
            let verdict = match ch.verdict {
                Verdict::Regressed | Verdict::Improved => format!("**{}**", verdict_cell(ch)),
                _ => verdict_cell(ch),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                md_code(&ch.id),
                value_cell(ch, ch.old_median_ns),
                value_cell(ch, ch.new_median_ns),
                change_cell(ch),
                band_cell(ch),
                p_cell(ch.p_value),
                p_cell(ch.q_value),
                verdict,
                md_cell(&memory_cell(ch.memory.as_ref())),
            );
        }
        out.push('\n');
    }
    for line in not_compared(c, md_code) {
        let _ = writeln!(out, "- {line}");
    }
    let _ = writeln!(out, "\n<sub>{}</sub>", md_cell(&settings(c)));
    out
}

/// Counts for tools that only want the outcome.
#[derive(Serialize)]
struct Summary {
    regressed: usize,
    improved: usize,
    unchanged: usize,
    inconclusive: usize,
    too_few_samples: usize,
    vacuous: bool,
    over_limit: usize,
    memory_regressions: usize,
    gating_failure: bool,
}

#[derive(Serialize)]
struct Document<'a> {
    schema_version: u32,
    summary: Summary,
    #[serde(flatten)]
    comparison: &'a Comparison,
}

/// The comparison as pretty-printed JSON with a `schema_version` and a
/// `summary` of counts, ending with a newline. Non-finite numbers (e.g. a
/// memory ratio from 0) are written as `null`.
pub fn render_json(c: &Comparison) -> Result<String> {
    let doc = Document {
        schema_version: COMPARISON_SCHEMA_VERSION,
        summary: Summary {
            regressed: c.count(Verdict::Regressed),
            improved: c.count(Verdict::Improved),
            unchanged: c.count(Verdict::Unchanged),
            inconclusive: c.count(Verdict::Inconclusive),
            too_few_samples: c.count(Verdict::TooFewSamples),
            vacuous: c.vacuous.is_some(),
            over_limit: c.regressions().len(),
            memory_regressions: c.memory_regressions().len(),
            gating_failure: c.has_gating_failure(),
        },
        comparison: c,
    };
    let mut text = serde_json::to_string_pretty(&doc).context("serializing the comparison")?;
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_texts() {
        assert_eq!(signed_change(1.1023), "+10.2%");
        assert_eq!(signed_change(0.9), "-10.0%");
        assert_eq!(signed_change(0.99996), "+0.0%", "no negative zero");
        assert_eq!(signed_change(f64::NAN), "n/a");
        assert_eq!(
            (p_cell(0.0004), p_cell(0.0342), p_cell(1.0)),
            ("<0.001".into(), "0.034".into(), "1.000".into())
        );
        assert_eq!(
            (percent(0.05), percent(0.025), percent(0.95)),
            ("5%".into(), "2.5%".into(), "95%".into())
        );
        assert_eq!(
            (growth(1.0), growth(f64::INFINITY), growth(1.5)),
            ("=".into(), "new".into(), "+50.0%".into())
        );
    }
}
