//! The comparison section: % change of the median time per case as
//! horizontal bars with the ratio's interval as an error bar, coloured by
//! verdict, over the shaded noise band; then the table of every change and
//! the cases that could not be compared.

use super::svg::{self, CHAR_W, Esc, LinearScale, N, Units};
use crate::compare::{CaseChange, Comparison, Verdict};
use crate::report::units;
use std::fmt::Write as _;

/// Geometry of the comparison chart, shared with the tests.
pub(crate) mod geo {
    /// Total width.
    pub const W: f64 = 760.0;
    /// Height of one bar.
    pub const BAR: f64 = 14.0;
    /// Gap between bars.
    pub const GAP: f64 = 5.0;
    /// Top margin (room for the band's label).
    pub const TOP: f64 = 18.0;
    /// Room under the bars for tick labels.
    pub const AXIS_H: f64 = 22.0;
    /// Column right of the plot for the change and its interval.
    pub const VALUE_W: f64 = 150.0;
    /// Longest case label drawn, in characters.
    pub const MAX_LABEL: usize = 44;
}

/// CSS class of a verdict's colour.
pub(crate) fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Improved => "faster",
        Verdict::Regressed => "slower",
        Verdict::Unchanged => "same",
        Verdict::Inconclusive | Verdict::TooFewSamples => "unsure",
    }
}

/// A ratio as a signed percentage change: 1.05 is `+5`.
fn pct(ratio: f64) -> f64 {
    (ratio - 1.0) * 100.0
}

/// `+5.0%` / `-3.2%`, three significant digits.
fn pct_text(ratio: f64) -> String {
    let p = pct(ratio);
    if !p.is_finite() {
        return units::NOT_AVAILABLE.to_string();
    }
    format!("{}{}%", if p > 0.0 { "+" } else { "" }, units::sig3(p))
}

/// Left edge of the bars: the label column's width.
pub(crate) fn plot_left(changes: &[CaseChange]) -> f64 {
    let longest = changes.iter().map(|c| c.id.chars().count().min(geo::MAX_LABEL)).max().unwrap_or(0);
    (longest as f64 * CHAR_W + 10.0).clamp(60.0, 320.0)
}

/// The x scale (% change) over every finite interval, the noise band and 0.
pub(crate) fn scale(cmp: &Comparison) -> LinearScale {
    let noise = cmp.options.noise_threshold * 100.0;
    let values = cmp
        .changes
        .iter()
        .flat_map(|c| [c.ratio.point, c.ratio.lower, c.ratio.upper])
        .map(pct)
        .filter(|v| v.is_finite())
        .chain([-noise, noise, 0.0]);
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let x0 = plot_left(&cmp.changes);
    LinearScale::new(svg::padded(lo, hi, 0.05), (x0, geo::W - geo::VALUE_W))
}

/// The chart: one bar per compared case, worst regression first (the
/// comparison's order).
pub(crate) fn chart(out: &mut String, cmp: &Comparison) {
    use geo::*;
    let x = scale(cmp);
    let x0 = x.r0;
    let n = cmp.changes.len() as f64;
    let bottom = TOP + n * (BAR + GAP);
    let h = bottom + AXIS_H;
    let title = format!("Change of the median time, {} to {}", cmp.baseline, cmp.candidate);
    svg::open(out, "cmp", W, h, &title);
    svg::x_axis(out, &x, TOP, bottom, Units::Percent);
    let noise = cmp.options.noise_threshold * 100.0;
    let (b0, b1) = (x.map(-noise), x.map(noise));
    let _ = write!(
        out,
        "<rect class=\"noise\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>noise band ±{}%</title></rect>\
         <text class=\"muted\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">noise ±{}%</text>\
         <line class=\"zero\" x1=\"{z}\" y1=\"{}\" x2=\"{z}\" y2=\"{}\"/>",
        N(b0),
        N(TOP),
        N(b1 - b0),
        N(bottom - TOP),
        units::sig3(noise),
        N((b0 + b1) / 2.0),
        N(TOP - 5.0),
        units::sig3(noise),
        N(TOP),
        N(bottom),
        z = N(x.map(0.0)),
    );
    for (i, c) in cmp.changes.iter().enumerate() {
        let top = TOP + GAP / 2.0 + i as f64 * (BAR + GAP);
        let mid = N(top + BAR / 2.0);
        let _ = write!(
            out,
            "<g class=\"{}\"><text x=\"{}\" y=\"{mid}\" dy=\"0.32em\" text-anchor=\"end\">{}<title>{}</title></text>",
            verdict_class(c.verdict),
            N(x0 - 6.0),
            Esc(&svg::clip(&c.id, MAX_LABEL)),
            Esc(&c.id),
        );
        let r = &c.ratio;
        let value = format!("{} [{}, {}]", pct_text(r.point), pct_text(r.lower), pct_text(r.upper));
        if pct(r.point).is_finite() {
            let (a, b) = (x.map(0.0), x.map(pct(r.point)));
            let _ = write!(
                out,
                "<rect class=\"bar\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{}: {}</title></rect>",
                N(a.min(b)),
                N(top),
                N((b - a).abs()),
                N(BAR),
                c.verdict.as_str(),
                Esc(&value),
            );
        }
        if pct(r.lower).is_finite() && pct(r.upper).is_finite() {
            let _ = write!(
                out,
                "<line class=\"err\" x1=\"{}\" y1=\"{mid}\" x2=\"{}\" y2=\"{mid}\"/>",
                N(x.map(pct(r.lower))),
                N(x.map(pct(r.upper))),
            );
        }
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{mid}\" dy=\"0.32em\" text-anchor=\"end\">{}</text></g>",
            N(W - 4.0),
            Esc(&value),
        );
    }
    out.push_str("</svg>");
}

/// The whole comparison section.
pub(crate) fn section(out: &mut String, cmp: &Comparison) {
    let o = &cmp.options;
    let _ = write!(
        out,
        "<section id=\"comparison\"><h2>Comparison</h2><p><b>{}</b> (baseline) → <b>{}</b> (candidate): \
         {} improved, {} regressed, {} unchanged, {} inconclusive.</p><p class=\"muted\">Bars: change of \
         the median per-iteration time (right is slower) with its {:.0}% bootstrap interval; grey band: \
         the ±{}% noise band; a change counts when its q-value (Benjamini-Hochberg over all cases) is \
         under {} and its whole interval is outside the band. Regressions beyond +{} gate.</p>",
        Esc(&cmp.baseline),
        Esc(&cmp.candidate),
        cmp.count(Verdict::Improved),
        cmp.count(Verdict::Regressed),
        cmp.count(Verdict::Unchanged),
        cmp.count(Verdict::Inconclusive),
        o.confidence_level * 100.0,
        units::sig3(o.noise_threshold * 100.0),
        units::sig3(o.alpha),
        units::format_percent(o.max_regression * 100.0),
    );
    if let Some(why) = &cmp.machine_mismatch {
        let _ = write!(out, "<p class=\"warn\"><b>Different machines:</b> {}</p>", Esc(why));
    }
    if cmp.changes.is_empty() {
        out.push_str("<p class=\"muted\">No case was measured in both runs.</p>");
    } else {
        chart(out, cmp);
        table(out, cmp);
    }
    for (what, ids) in [
        ("Only in the baseline", &cmp.only_in_baseline),
        ("Only in the candidate", &cmp.only_in_candidate),
        ("Failed or without samples on either side (not compared)", &cmp.failed),
    ] {
        if ids.is_empty() {
            continue;
        }
        let _ = write!(out, "<p>{what}: ");
        for (i, id) in ids.iter().enumerate() {
            let _ = write!(out, "{}<code>{}</code>", if i > 0 { ", " } else { "" }, Esc(id));
        }
        out.push_str("</p>");
    }
    out.push_str("</section>");
}

/// One row per compared case with the statistics behind the verdict.
fn table(out: &mut String, cmp: &Comparison) {
    out.push_str(
        "<div class=\"scroll\"><table class=\"changes\"><thead><tr><th>Case</th><th>Baseline</th>\
         <th>Candidate</th><th>Change [CI]</th><th>p</th><th>q</th><th>Verdict</th><th>Memory</th></tr>\
         </thead><tbody>",
    );
    for c in &cmp.changes {
        let r = &c.ratio;
        let mut verdict = c.verdict.as_str().to_string();
        if c.beyond_limit {
            verdict.push_str(", beyond limit");
        }
        let memory = c.memory.as_ref().map_or(String::new(), |m| {
            format!(
                "peak {} → {}, allocs {} → {}{}",
                units::format_bytes(m.old_peak_bytes as f64),
                units::format_bytes(m.new_peak_bytes as f64),
                units::format_count(m.old_allocs_per_iter),
                units::format_count(m.new_allocs_per_iter),
                if m.regressed { " (regressed)" } else { "" },
            )
        });
        let _ = write!(
            out,
            "<tr class=\"{}\"><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
            verdict_class(c.verdict),
            Esc(&c.id),
            Esc(&units::format_time_ns(c.old_median_ns)),
            Esc(&units::format_time_ns(c.new_median_ns)),
            Esc(&format!("{} [{}, {}]", pct_text(r.point), pct_text(r.lower), pct_text(r.upper))),
            Esc(&units::sig3(c.p_value)),
            Esc(&units::sig3(c.q_value)),
            Esc(&verdict),
            Esc(&memory),
        );
    }
    out.push_str("</tbody></table></div>");
}
