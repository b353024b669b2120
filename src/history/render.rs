//! Trends for people (a table with sparklines) and for tools (JSON).

use super::{CaseTrend, ChangePoint};
use crate::units::format_time_ns;
use anyhow::{Context, Result};
use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, ContentArrangement, Table};
use serde::Serialize;

/// Sparkline glyphs from lowest to highest.
const GLYPHS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
/// Glyph of a flat series: in the middle, so it reads as "no change".
const FLAT: char = GLYPHS[3];
/// Most runs drawn in the table's sparkline (the latest ones), so that a
/// long history still fits a terminal line.
pub const MAX_SPARK_POINTS: usize = 60;

/// One glyph per value, scaled from the series' minimum (`▁`) to its
/// maximum (`█`). A constant series is all `▄`; empty input gives `""`; a
/// non-finite value is drawn as a space.
pub fn sparkline(values: &[f64]) -> String {
    let finite = values.iter().copied().filter(|v| v.is_finite());
    let min = finite.clone().fold(f64::INFINITY, f64::min);
    let max = finite.fold(f64::NEG_INFINITY, f64::max);
    let range = max - min;
    values
        .iter()
        .map(|&v| {
            if !v.is_finite() {
                ' '
            } else if !range.is_finite() || range <= 0.0 {
                FLAT
            } else {
                let level = ((v - min) / range * (GLYPHS.len() - 1) as f64).round() as usize;
                GLYPHS[level.min(GLYPHS.len() - 1)]
            }
        })
        .collect()
}

/// `step +12.3% at run 7 (abc1234), p=0.002`; runs are numbered from 1
/// among the runs that measured the case.
fn describe(cp: &ChangePoint, trend: &CaseTrend) -> String {
    let rev = trend.points.get(cp.index).map_or("?", |p| p.1.as_str());
    format!("step {:+.1}% at run {} ({rev}), p={:.3}", (cp.ratio - 1.0) * 100.0, cp.index + 1, cp.p_value)
}

/// One row per case: run count, a sparkline of the medians (the latest
/// [`MAX_SPARK_POINTS`] runs), first, last, fastest and slowest median, and
/// every change point. Ends with a newline.
pub fn render_table(trends: &[CaseTrend]) -> String {
    if trends.is_empty() {
        return "no history for the selected cases\n".to_string();
    }
    let header = ["case", "runs", "trend", "first", "last", "min", "max", "changes"];
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled)
        .force_no_tty()
        .set_header(header.to_vec());
    for i in [1, 3, 4, 5, 6] {
        if let Some(column) = table.column_mut(i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    for t in trends {
        let medians: Vec<f64> = t.points.iter().map(|p| p.2).collect();
        let shown = &medians[medians.len().saturating_sub(MAX_SPARK_POINTS)..];
        let ellipsis = if shown.len() < medians.len() { "…" } else { "" };
        let min = medians.iter().copied().fold(f64::INFINITY, f64::min);
        let max = medians.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let time = |v: Option<f64>| v.map_or_else(|| "-".to_string(), format_time_ns);
        let changes: Vec<String> = t.change_points.iter().map(|cp| describe(cp, t)).collect();
        table.add_row(vec![
            t.id.clone(),
            medians.len().to_string(),
            format!("{ellipsis}{}", sparkline(shown)),
            time(medians.first().copied()),
            time(medians.last().copied()),
            time((!medians.is_empty()).then_some(min)),
            time((!medians.is_empty()).then_some(max)),
            if changes.is_empty() { "-".to_string() } else { changes.join("\n") },
        ]);
    }
    let changed = trends.iter().filter(|t| !t.change_points.is_empty()).count();
    format!("{table}\n{} case(s), {changed} with a change in level\n", trends.len())
}

/// JSON layout of [`render_json`].
#[derive(Serialize)]
struct JsonTrends<'a> {
    schema_version: u32,
    cases: Vec<JsonCase<'a>>,
}

#[derive(Serialize)]
struct JsonCase<'a> {
    id: &'a str,
    points: Vec<JsonPoint<'a>>,
    change_points: &'a [ChangePoint],
}

#[derive(Serialize)]
struct JsonPoint<'a> {
    recorded_at: &'a str,
    git_revision: &'a str,
    median_ns: f64,
}

/// Trends as pretty-printed JSON, ending with a newline:
/// `{"schema_version": 1, "cases": [{"id", "points": [{"recorded_at",
/// "git_revision", "median_ns"}], "change_points": [{"index",
/// "before_median_ns", "after_median_ns", "ratio", "p_value"}]}]}`.
pub fn render_json(trends: &[CaseTrend]) -> Result<String> {
    let doc = JsonTrends {
        schema_version: super::HISTORY_SCHEMA_VERSION,
        cases: trends
            .iter()
            .map(|t| JsonCase {
                id: &t.id,
                points: t
                    .points
                    .iter()
                    .map(|p| JsonPoint { recorded_at: &p.0, git_revision: &p.1, median_ns: p.2 })
                    .collect(),
                change_points: &t.change_points,
            })
            .collect(),
    };
    let mut text = serde_json::to_string_pretty(&doc).context("cannot serialize history trends")?;
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparkline_scales_min_to_max() {
        assert_eq!(sparkline(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]), "▁▂▃▄▅▆▇█");
        assert_eq!(sparkline(&[8.0, 1.0]), "█▁");
        assert_eq!(sparkline(&[5.0, 5.0, 5.0]), "▄▄▄");
        assert_eq!(sparkline(&[]), "");
        assert_eq!(sparkline(&[1.0, f64::NAN, 2.0]), "▁ █");
    }

    fn stepped() -> CaseTrend {
        let points = (0..12)
            .map(|i| {
                let m = if i < 6 { 1000.0 } else { 1123.0 };
                (format!("2025-01-{:02}T00:00:00Z", i + 1), format!("rev{i:02}"), m)
            })
            .collect();
        let cp = ChangePoint {
            index: 6,
            before_median_ns: 1000.0,
            after_median_ns: 1123.0,
            ratio: 1.123,
            p_value: 0.002,
        };
        CaseTrend { id: "tensor/add/n=1024".into(), points, change_points: vec![cp] }
    }

    #[test]
    fn table_shows_sparkline_numbers_and_steps() {
        let flat = CaseTrend {
            id: "tensor/flat".into(),
            points: vec![("t".into(), "r".into(), 5.0); 3],
            change_points: vec![],
        };
        let text = render_table(&[stepped(), flat]);
        assert!(text.contains("▁▁▁▁▁▁██████"), "{text}");
        assert!(text.contains("step +12.3% at run 7 (rev06), p=0.002"), "{text}");
        assert!(text.contains("1.00 µs") && text.contains("1.12 µs"), "{text}");
        assert!(text.contains("▄▄▄") && text.contains("5.00 ns"), "{text}");
        assert!(text.contains("2 case(s), 1 with a change in level"), "{text}");
        assert!(text.ends_with('\n'));
        assert_eq!(render_table(&[]), "no history for the selected cases\n");
    }

    #[test]
    fn long_histories_show_the_latest_runs() {
        let mut t = stepped();
        t.points = (0..100).map(|i| ("t".into(), "r".into(), f64::from(i))).collect();
        t.change_points.clear();
        let text = render_table(&[t]);
        let line = text.lines().find(|l| l.contains('…')).expect("ellipsis");
        assert_eq!(line.chars().filter(|c| GLYPHS.contains(c)).count(), MAX_SPARK_POINTS);
        assert!(text.contains("100"), "{text}");
    }

    #[test]
    fn json_names_every_field() {
        let text = render_json(&[stepped()]).expect("json");
        assert!(text.ends_with('\n'));
        let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        let case = &v["cases"][0];
        assert_eq!(case["id"], "tensor/add/n=1024");
        assert_eq!(case["points"][6]["git_revision"], "rev06");
        assert_eq!(case["points"][6]["median_ns"], 1123.0);
        assert_eq!(case["change_points"][0]["index"], 6);
        assert_eq!(case["change_points"][0]["p_value"], 0.002);
    }
}
