//! The comparison section: % change of the median time per case as
//! horizontal bars with the ratio's interval as an error bar, coloured by
//! verdict, over the shaded noise band, one chart per benchmark on one
//! shared axis (labelled above and below each chart), under a colour key of
//! the verdicts; then the table of every change and the cases that could not
//! be compared.
//!
//! Verdicts are read through `Verdict::as_str`, so a verdict added to the
//! comparison later still gets a colour (the "unsure" one) and a count.

use super::svg::{self, CHAR_W, Esc, LinearScale, N, Units};
use crate::compare::{CaseChange, Comparison, Verdict};
use crate::units;
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
}

/// CSS class of a verdict's colour.
pub(crate) fn verdict_class(v: Verdict) -> &'static str {
    verdict_class_of(v.as_str())
}

/// CSS class of the verdict named `v` (`Verdict::as_str`).
pub(crate) fn verdict_class_of(v: &str) -> &'static str {
    match v {
        "improved" => "faster",
        "regressed" => "slower",
        "unchanged" => "same",
        "inconclusive" => "unsure",
        // "too few samples" and any verdict added later.
        _ => "few",
    }
}

/// Order of verdicts in keys and counts: what needs attention first.
pub(crate) fn verdict_rank(v: &str) -> u8 {
    match v {
        "regressed" => 0,
        "improved" => 1,
        "inconclusive" => 2,
        "unchanged" => 3,
        _ => 4,
    }
}

/// What each verdict's colour means, for the key above the charts.
fn verdict_meaning(v: &str) -> &'static str {
    match v {
        "regressed" => "slower, beyond the noise band and significant",
        "improved" => "faster, beyond the noise band and significant",
        "inconclusive" => "the interval crosses the noise band's edge: not enough evidence either way",
        "unchanged" => "inside the noise band",
        "too few samples" => "fewer samples than a verdict needs: measure longer",
        _ => "not judged (see the table)",
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

/// Left edge of the bars: the label column's width, as wide as the
/// longest label of any group (labels are never cut: a cut label could
/// stand for two cases), so every chart shares one axis.
pub(crate) fn plot_left(changes: &[CaseChange]) -> f64 {
    let longest = groups(changes)
        .iter()
        .flat_map(|(_, members)| members.iter().map(|(_, l)| l.chars().count()))
        .max()
        .unwrap_or(0);
    (longest as f64 * CHAR_W + 10.0).max(60.0)
}

/// Total width: the label column plus room for the bars and values.
pub(crate) fn width(changes: &[CaseChange]) -> f64 {
    geo::W.max(plot_left(changes) + 440.0)
}

/// The changes grouped by `suite/benchmark` (first appearance first), each
/// with its bar labels: only the parameters that vary in the group.
pub(crate) fn groups(changes: &[CaseChange]) -> Vec<(String, Vec<(&CaseChange, String)>)> {
    let mut out: Vec<(String, Vec<&CaseChange>)> = Vec::new();
    for c in changes {
        let bench = crate::report::summary::split_id(&c.id).0.to_string();
        match out.iter_mut().find(|(b, _)| *b == bench) {
            Some((_, v)) => v.push(c),
            None => out.push((bench, vec![c])),
        }
    }
    out.into_iter()
        .map(|(bench, members)| {
            // Inside a group the comparison's own order (worst change first) is kept.
            let ids: Vec<&str> = members.iter().map(|c| c.id.as_str()).collect();
            let labels = super::labels::varying_labels(&ids);
            (bench, members.into_iter().zip(labels).collect())
        })
        .collect()
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
    LinearScale::new(svg::padded(lo, hi, 0.05), (x0, width(&cmp.changes) - geo::VALUE_W))
}

/// The charts: one per benchmark, bars labelled by the parameters that vary
/// in it, all on the comparison's one x scale with the axis labelled above
/// and below the bars.
pub(crate) fn chart(out: &mut String, cmp: &Comparison) {
    let x = scale(cmp);
    for (bench, members) in groups(&cmp.changes) {
        let _ = write!(out, "<figure class=\"cmpgroup\"><figcaption><b>{}</b></figcaption>", Esc(&bench));
        group_chart(out, cmp, &x, &bench, &members);
        out.push_str("</figure>");
    }
}

/// One benchmark's chart.
fn group_chart(
    out: &mut String,
    cmp: &Comparison,
    x: &LinearScale,
    bench: &str,
    members: &[(&CaseChange, String)],
) {
    use geo::*;
    let x0 = x.r0;
    let w = width(&cmp.changes);
    let n = members.len() as f64;
    // Tick labels above the bars too, so a long chart's axis is read at its top.
    let top = TOP + AXIS_H;
    let bottom = top + n * (BAR + GAP);
    let h = bottom + AXIS_H;
    let title = format!("Change of the median time of {bench}, {} to {}", cmp.baseline, cmp.candidate);
    svg::open(out, "cmp", w, h, &title);
    svg::x_axis(out, x, top, bottom, Units::Percent);
    svg::x_axis_labels(out, x, top - 6.0, Units::Percent);
    let noise = cmp.options.noise_threshold * 100.0;
    let (b0, b1) = (x.map(-noise), x.map(noise));
    let _ = write!(
        out,
        "<rect class=\"noise\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>noise band ±{}%</title></rect>\
         <text class=\"muted\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">noise ±{}%</text>\
         <line class=\"zero\" x1=\"{z}\" y1=\"{}\" x2=\"{z}\" y2=\"{}\"/>",
        N(b0),
        N(top),
        N(b1 - b0),
        N(bottom - top),
        units::sig3(noise),
        N((b0 + b1) / 2.0),
        N(TOP - 5.0),
        units::sig3(noise),
        N(top),
        N(bottom),
        z = N(x.map(0.0)),
    );
    for (i, (c, label)) in members.iter().enumerate() {
        let bar_top = top + GAP / 2.0 + i as f64 * (BAR + GAP);
        let mid = N(bar_top + BAR / 2.0);
        let _ = write!(
            out,
            "<g class=\"{}\"><text x=\"{}\" y=\"{mid}\" dy=\"0.32em\" text-anchor=\"end\">{}<title>{}</title></text>",
            verdict_class(c.verdict),
            N(x0 - 6.0),
            Esc(label),
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
                N(bar_top),
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
            N(w - 4.0),
            Esc(&value),
        );
    }
    out.push_str("</svg>");
}

/// The colour key of the verdicts present, with what each means.
fn key(out: &mut String, cmp: &Comparison) {
    let mut seen: Vec<&str> = Vec::new();
    for c in &cmp.changes {
        if !seen.contains(&c.verdict.as_str()) {
            seen.push(c.verdict.as_str());
        }
    }
    seen.sort_by_key(|v| verdict_rank(v));
    out.push_str("<p class=\"verdict-key\">");
    for v in seen {
        let _ = write!(
            out,
            "<span class=\"key {}\"><i></i><span><b>{}</b>: {}</span></span> ",
            verdict_class_of(v),
            Esc(v),
            verdict_meaning(v)
        );
    }
    out.push_str("<span class=\"key muted\"><i style=\"opacity:.2\"></i><span>grey band: the noise band</span></span></p>");
}

/// The whole comparison section.
pub(crate) fn section(out: &mut String, cmp: &Comparison) {
    let o = &cmp.options;
    let _ = write!(
        out,
        "<section id=\"comparison\"><h2>Comparison</h2><p><b>{}</b> (baseline) → <b>{}</b> (candidate): \
         {} improved, {} regressed, {} unchanged, {} inconclusive{}.</p><p class=\"muted\">Bars: change of \
         the median per-iteration time (right is slower) with its {:.0}% bootstrap interval; grey band: \
         the ±{}% noise band; a change counts when its q-value (Benjamini-Hochberg over all cases) is \
         under {} and its whole interval is outside the band. Regressions beyond +{} gate.</p>",
        Esc(&cmp.baseline),
        Esc(&cmp.candidate),
        cmp.count(Verdict::Improved),
        cmp.count(Verdict::Regressed),
        cmp.count(Verdict::Unchanged),
        cmp.count(Verdict::Inconclusive),
        {
            // Verdicts beyond the four above (added later) are counted too.
            let other = cmp.changes.len()
                - [Verdict::Improved, Verdict::Regressed, Verdict::Unchanged, Verdict::Inconclusive]
                    .iter()
                    .map(|v| cmp.count(*v))
                    .sum::<usize>();
            if other > 0 { format!(", {other} other (see the table)") } else { String::new() }
        },
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
        key(out, cmp);
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
            let _ =
                write!(out, "{}<code>{}</code>", if i > 0 { ", " } else { "" }, super::labels::id_html(id));
        }
        out.push_str("</p>");
    }
    out.push_str("</section>");
}

/// One row per compared case with the statistics behind the verdict; peak
/// memory and allocations per iteration in columns of their own.
fn table(out: &mut String, cmp: &Comparison) {
    out.push_str(
        "<div class=\"scroll\"><table class=\"changes\"><thead><tr><th>Case</th><th>Baseline</th>\
         <th>Candidate</th><th>Change [CI]</th><th>p</th><th>q</th><th>Verdict</th><th>Peak memory</th>\
         <th>Allocs/iter</th></tr></thead><tbody>",
    );
    for c in &cmp.changes {
        let r = &c.ratio;
        let mut verdict = c.verdict.as_str().to_string();
        if c.beyond_limit {
            verdict.push_str(", beyond limit");
        }
        let (peak, allocs) = c.memory.as_ref().map_or((String::new(), String::new()), |m| {
            let flag = if m.regressed { " (regressed)" } else { "" };
            (
                format!(
                    "{} → {}{flag}",
                    units::format_bytes(m.old_peak_bytes as f64),
                    units::format_bytes(m.new_peak_bytes as f64)
                ),
                format!(
                    "{} → {}",
                    units::format_count(m.old_allocs_per_iter),
                    units::format_count(m.new_allocs_per_iter)
                ),
            )
        });
        let _ = write!(
            out,
            "<tr class=\"{}\"><td class=\"id\"><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            verdict_class(c.verdict),
            super::labels::id_html(&c.id),
            Esc(&units::format_time_ns(c.old_median_ns)),
            Esc(&units::format_time_ns(c.new_median_ns)),
            Esc(&format!("{} [{}, {}]", pct_text(r.point), pct_text(r.lower), pct_text(r.upper))),
            Esc(&units::sig3(c.p_value)),
            Esc(&units::sig3(c.q_value)),
            Esc(&verdict),
            Esc(&peak),
            Esc(&allocs),
        );
    }
    out.push_str("</tbody></table></div>");
}
