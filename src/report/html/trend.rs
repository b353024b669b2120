//! Trend charts from a machine's history: the median of every run as a
//! line, the detected change points as dashed markers with the segment
//! levels on either side, and a table of the change points.

use super::svg::{self, Esc, FONT, LinearScale, N, Units};
use crate::history::CaseTrend;
use crate::units;
use std::fmt::Write as _;

/// Geometry of a trend chart, shared with the tests.
pub(crate) mod geo {
    /// Total width.
    pub const W: f64 = 600.0;
    /// Total height.
    pub const H: f64 = 190.0;
    /// Left margin, room for tick labels.
    pub const LEFT: f64 = 66.0;
    /// Right margin.
    pub const RIGHT: f64 = 16.0;
    /// Top of the plotting area (change-point labels above it).
    pub const TOP: f64 = 20.0;
    /// Bottom of the plotting area (run labels under it).
    pub const BOTTOM: f64 = 160.0;
    /// Runs beyond which points are drawn as the line only.
    pub const MAX_DOTS: usize = 300;
}

/// The x scale (run index) and y scale (median time) of `t`'s chart.
pub(crate) fn scales(t: &CaseTrend) -> (LinearScale, LinearScale) {
    use geo::*;
    let last = t.points.len().saturating_sub(1) as f64;
    let x = LinearScale::new((0.0, last), (LEFT + 10.0, W - RIGHT - 10.0));
    let values = t
        .points
        .iter()
        .map(|p| p.2)
        .chain(t.change_points.iter().flat_map(|c| [c.before_median_ns, c.after_median_ns]))
        .filter(|v| v.is_finite());
    // From zero: a 730-738 ns series must not look as dramatic as one from
    // 1.0 to 1.8 us (each chart zoomed to its own range did exactly that).
    let hi = values.fold(0f64, f64::max);
    (x, LinearScale::new((0.0, if hi > 0.0 { hi * 1.08 } else { 1.0 }), (BOTTOM, TOP)))
}

/// A run's short name: its date and time (runs of one day differ in it) and
/// the first 7 characters of its revision.
pub(crate) fn run_label(recorded_at: &str, rev: &str) -> String {
    let date = recorded_at.get(..10).unwrap_or(recorded_at);
    // To the second: runs recorded within one minute (a CI matrix, a loop)
    // must not read alike.
    let time = recorded_at.get(11..19).filter(|t| t.as_bytes().get(2) == Some(&b':'));
    let rev: String = rev.chars().take(7).collect();
    match time {
        Some(t) => format!("{date} {t} {rev}"),
        None => format!("{date} {rev}"),
    }
}

/// One chart: the median line, dots (up to [`geo::MAX_DOTS`] runs), change
/// points and the levels between them.
pub(crate) fn chart(out: &mut String, t: &CaseTrend) {
    use geo::*;
    let (x, y) = scales(t);
    svg::open(out, "trend", W, H, &format!("Median per run of {}", t.id));
    svg::y_axis(out, &y, LEFT, W - RIGHT, Units::Time);
    let n = t.points.len();
    // Run labels at evenly spaced runs, first and last included, as many as
    // fit side by side (labels are "YYYY-MM-DD HH:MM:SS abcdef0").
    let fit = ((W - LEFT - RIGHT) / (27.0 * svg::CHAR_W + 12.0)).floor().max(1.0) as usize;
    let shown = n.min(fit);
    out.push_str("<g class=\"axis\">");
    for k in 0..shown {
        let i = if shown > 1 { k * (n - 1) / (shown - 1) } else { 0 };
        let (at, rev, _) = &t.points[i];
        // The outer labels hang inwards so they stay inside the viewBox.
        let anchor = match (k, shown) {
            (_, 1) => "middle",
            (0, _) => "start",
            (k, s) if k + 1 == s => "end",
            _ => "middle",
        };
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text>",
            N(x.map(i as f64)),
            N(BOTTOM + FONT + 6.0),
            Esc(&run_label(at, rev)),
        );
    }
    out.push_str("</g>");

    let mut prev = 0;
    for (k, c) in t.change_points.iter().enumerate().filter(|(_, c)| c.index > 0 && c.index < n) {
        let cx = N((x.map(c.index as f64 - 1.0) + x.map(c.index as f64)) / 2.0);
        let next = t.change_points.get(k + 1).map_or(n, |d| d.index.min(n));
        let level = |from: usize, to: usize, v: f64| {
            format!(
                "<line class=\"level\" x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\"/>",
                N(x.map(from as f64)),
                N(x.map(to.saturating_sub(1).max(from) as f64)),
                y = N(y.map(v)),
            )
        };
        if k == 0 {
            out.push_str(&level(prev, c.index, c.before_median_ns));
        }
        out.push_str(&level(c.index, next, c.after_median_ns));
        let (at, rev, _) = &t.points[c.index];
        let _ = write!(
            out,
            "<g class=\"cp\"><line x1=\"{cx}\" y1=\"{}\" x2=\"{cx}\" y2=\"{}\"/>\
             <text x=\"{cx}\" y=\"{}\" text-anchor=\"middle\">×{}<title>change at {}: {} → {}, p = {}</title></text></g>",
            N(TOP - 6.0),
            N(BOTTOM),
            N(TOP - 8.0),
            units::sig3(c.ratio),
            Esc(&run_label(at, rev)),
            Esc(&units::format_time_ns(c.before_median_ns)),
            Esc(&units::format_time_ns(c.after_median_ns)),
            units::sig3(c.p_value),
        );
        prev = c.index;
    }

    out.push_str("<g class=\"s0\"><polyline points=\"");
    for (i, p) in t.points.iter().enumerate() {
        let _ = write!(out, "{}{},{}", if i > 0 { " " } else { "" }, N(x.map(i as f64)), N(y.map(p.2)));
    }
    out.push_str("\"/>");
    if n <= MAX_DOTS {
        for (i, (at, rev, v)) in t.points.iter().enumerate() {
            let _ = write!(
                out,
                "<circle cx=\"{}\" cy=\"{}\" r=\"2.5\"><title>{}: {}</title></circle>",
                N(x.map(i as f64)),
                N(y.map(*v)),
                Esc(&run_label(at, rev)),
                Esc(&units::format_time_ns(*v)),
            );
        }
    }
    out.push_str("</g></svg>");
}

/// The trends section: a table of every change point, then one chart per
/// case with at least one run.
pub(crate) fn section(out: &mut String, trends: &[CaseTrend]) {
    out.push_str(
        "<section id=\"trends\"><h2>Trends</h2><p class=\"muted\">Median per-iteration time of each \
         recorded run on this machine, in history order, labelled by date, time (UTC) and revision; the time axis \
         starts at zero. Dashed red lines: change points (the ratio is \
         the later segment's median over the earlier one's; above 1 is slower); dashed grey lines: the \
         segment medians.</p>",
    );
    let changes: Vec<_> = trends.iter().flat_map(|t| t.change_points.iter().map(move |c| (t, c))).collect();
    if changes.is_empty() {
        out.push_str("<p>No change point detected.</p>");
    } else {
        out.push_str(
            "<div class=\"scroll\"><table class=\"changes\"><thead><tr><th>Case</th><th>From run</th>\
             <th>Before</th><th>After</th><th>Ratio</th><th>p</th></tr></thead><tbody>",
        );
        for (t, c) in changes {
            let run = t.points.get(c.index).map_or(String::new(), |(at, rev, _)| run_label(at, rev));
            let _ = write!(
                out,
                "<tr class=\"{}\"><td><code>{}</code></td><td>{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">×{}</td><td class=\"num\">{}</td></tr>",
                if c.ratio > 1.0 { "slower" } else { "faster" },
                Esc(&t.id),
                Esc(&run),
                Esc(&units::format_time_ns(c.before_median_ns)),
                Esc(&units::format_time_ns(c.after_median_ns)),
                units::sig3(c.ratio),
                units::sig3(c.p_value),
            );
        }
        out.push_str("</tbody></table></div>");
    }
    out.push_str("<div class=\"grid\" style=\"grid-template-columns:repeat(auto-fill,minmax(520px,1fr))\">");
    let mut sorted: Vec<&CaseTrend> = trends.iter().filter(|t| !t.points.is_empty()).collect();
    sorted.sort_by(|a, b| super::labels::natural_cmp(&a.id, &b.id));
    for t in sorted {
        let _ = write!(out, "<figure class=\"case\" data-trend=\"{}\">", Esc(&t.id));
        chart(out, t);
        let _ = write!(
            out,
            "<figcaption><code>{}</code> <span class=\"muted\">({} runs)</span></figcaption></figure>",
            super::labels::id_html(&t.id),
            t.points.len()
        );
    }
    out.push_str("</div></section>");
}
