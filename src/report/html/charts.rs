//! The run charts: per-case distributions (box plot plus the raw samples)
//! and throughput bars, both with one series per results file so several
//! files compare side by side on one axis.

use super::svg::{self, CHAR_W, Esc, FONT, LinearScale, N, Units};
use crate::results::{CaseResult, Estimate};
use crate::stats::{OutlierClass, Summary, TukeyFences};
use std::fmt::Write as _;

/// Most sample dots drawn per series; more are subsampled evenly by rank
/// (keeps the page a few MB at most for a few hundred cases).
pub(crate) const MAX_DOTS: usize = 500;

/// Characters of a results file's label under a distribution column
/// (see `labels::short_paths`: cut from the left, and longer where that
/// is what keeps two labels apart).
pub(crate) const LABEL_CHARS: usize = 20;

/// One results file's view of a case in a distribution plot.
pub(crate) struct DistSeries<'a> {
    /// Results-file label, shown under the column when there are several.
    pub label: &'a str,
    /// Index of the file, for its colour.
    pub series: usize,
    /// The case in that file.
    pub case: &'a CaseResult,
    /// Its samples as drawn, `None` when it has none.
    pub dist: Option<Distribution>,
}

impl<'a> DistSeries<'a> {
    /// The series of `case` from file `series` labelled `label`.
    pub fn new(label: &'a str, series: usize, case: &'a CaseResult) -> Self {
        DistSeries { label, series, case, dist: Distribution::new(case) }
    }
}

/// Geometry of a distribution plot, shared with the tests.
pub(crate) mod dist {
    /// Total height.
    pub const H: f64 = 230.0;
    /// Top of the plotting area.
    pub const TOP: f64 = 10.0;
    /// Bottom of the plotting area.
    pub const BOTTOM: f64 = 200.0;
    /// Left margin, room for tick labels.
    pub const LEFT: f64 = 66.0;
    /// Width of one series' column.
    pub const COL: f64 = 130.0;
    /// Right margin.
    pub const RIGHT: f64 = 8.0;
}

/// What a distribution plot draws for one series, from its raw samples.
pub(crate) struct Distribution {
    /// Summary of every finite per-iteration time (nanos / iterations).
    pub summary: Summary,
    /// Fences of the same values.
    pub fences: TukeyFences,
    /// Lowest and highest value within the 1.5 IQR fences: the whisker ends.
    pub whiskers: (f64, f64),
    /// The values drawn as dots, at most [`MAX_DOTS`], ascending.
    pub drawn: Vec<f64>,
    /// Number of values before subsampling.
    pub total: usize,
}

impl Distribution {
    /// From a case's raw samples; `None` when it has no usable sample.
    pub fn new(case: &CaseResult) -> Option<Self> {
        let mut values: Vec<f64> =
            case.samples.iter().map(|s| s.per_iter()).filter(|v| v.is_finite() && *v >= 0.0).collect();
        let summary = Summary::new(&values)?;
        let fences = TukeyFences::new(&values);
        values.sort_unstable_by(f64::total_cmp);
        let inside = || values.iter().copied().filter(|&v| fences.classify(v) == OutlierClass::Normal);
        let whiskers = (inside().next().unwrap_or(summary.q1), inside().next_back().unwrap_or(summary.q3));
        let total = values.len();
        Some(Distribution { summary, fences, whiskers, drawn: subsample(&values, MAX_DOTS), total })
    }
}

/// At most `cap` of the sorted `values`, evenly spaced by rank with both
/// extremes kept, so the dots show the shape and every extreme outlier.
pub(crate) fn subsample(values: &[f64], cap: usize) -> Vec<f64> {
    let n = values.len();
    if n <= cap || cap < 2 {
        return values.iter().take(cap).copied().collect();
    }
    // (n - 1) / (cap - 1) > 1 here, so the rounded indices are distinct.
    (0..cap).map(|i| values[((i * (n - 1)) as f64 / (cap - 1) as f64).round() as usize]).collect()
}

/// Horizontal offset in -0.5..0.5 for the `i`-th dot: a golden-ratio
/// sequence, so dots spread evenly and the page is the same on every render.
fn jitter(i: usize) -> f64 {
    ((i as f64 + 1.0) * 0.618_033_988_749_895).fract() - 0.5
}

/// The y scale of a distribution plot over `dists` and `cis` (headline median intervals).
pub(crate) fn dist_scale(dists: &[&Distribution], cis: &[Estimate]) -> LinearScale {
    let vals = dists
        .iter()
        .flat_map(|d| [d.summary.min, d.summary.max])
        .chain(cis.iter().flat_map(|e| [e.lower, e.upper]))
        .filter(|v| v.is_finite());
    let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    LinearScale::new(svg::padded(lo, hi, 0.06), (dist::BOTTOM, dist::TOP))
}

/// A box plot with the raw samples beside it, one column per series, on a
/// shared linear time axis. Series without samples get an empty column
/// labelled "no samples".
pub(crate) fn distribution(out: &mut String, case_id: &str, series: &[DistSeries]) {
    use dist::*;
    let cis: Vec<Estimate> =
        series.iter().filter_map(|s| s.case.estimates.as_ref().map(|e| e.median)).collect();
    let present: Vec<&Distribution> = series.iter().filter_map(|s| s.dist.as_ref()).collect();
    let y = dist_scale(&present, &cis);
    let captions: Vec<String> = series
        .iter()
        .map(|s| match &s.dist {
            Some(d) if series.len() == 1 => format!("n = {}", d.total),
            Some(d) => format!("{} (n = {})", s.label, d.total),
            None => s.label.to_string(),
        })
        .collect();
    // Labels are never cut here (the caller shortened them so that they
    // differ): a column is as wide as its caption needs.
    let longest = captions.iter().map(|c| c.chars().count()).max().unwrap_or(0);
    let col = COL.max(longest as f64 * CHAR_W * 0.8 + 10.0);
    let w = LEFT + col * series.len() as f64 + RIGHT;
    let label = format!("Distribution of per-iteration times of {case_id}");
    svg::open_sized(out, "dist", w, H, &label, Some(w * 1.5));
    svg::y_axis(out, &y, LEFT, w - RIGHT, Units::Time);
    for (k, s) in series.iter().enumerate() {
        let d = &s.dist;
        let x0 = LEFT + col * k as f64 + (col - COL) / 2.0;
        let _ = write!(out, "<g class=\"s{}\">", s.series % super::PALETTE);
        match d {
            Some(d) => draw_series(out, &y, x0, d, s.case),
            None => {
                let _ = write!(
                    out,
                    "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"muted\">no samples</text>",
                    N(x0 + COL / 2.0),
                    N((TOP + BOTTOM) / 2.0),
                );
            }
        }
        let caption = &captions[k];
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text></g>",
            N(x0 + COL / 2.0),
            N(BOTTOM + FONT + 12.0),
            Esc(caption),
        );
    }
    out.push_str("</svg>");
}

/// Box (quartiles), median line, whiskers, headline median with its CI, and
/// the dots of one series in the column starting at `x0`.
fn draw_series(out: &mut String, y: &LinearScale, x0: f64, d: &Distribution, case: &CaseResult) {
    let s = &d.summary;
    let (bx0, bx1) = (x0 + 14.0, x0 + 50.0);
    let bxm = (bx0 + bx1) / 2.0;
    let (wlo, whi) = (y.map(d.whiskers.0), y.map(d.whiskers.1));
    let (q1, q3) = (y.map(s.q1), y.map(s.q3));
    let _ = write!(
        out,
        "<g class=\"box\">\
         <line x1=\"{m}\" y1=\"{q1}\" x2=\"{m}\" y2=\"{wlo}\"/><line x1=\"{m}\" y1=\"{q3}\" x2=\"{m}\" y2=\"{whi}\"/>\
         <line x1=\"{c0}\" y1=\"{wlo}\" x2=\"{c1}\" y2=\"{wlo}\"/><line x1=\"{c0}\" y1=\"{whi}\" x2=\"{c1}\" y2=\"{whi}\"/>\
         <rect x=\"{b0}\" y=\"{q3}\" width=\"{bw}\" height=\"{bh}\"/>\
         <line class=\"median\" x1=\"{b0}\" y1=\"{med}\" x2=\"{b1}\" y2=\"{med}\"/></g>",
        m = N(bxm),
        c0 = N(bxm - 8.0),
        c1 = N(bxm + 8.0),
        b0 = N(bx0),
        b1 = N(bx1),
        bw = N(bx1 - bx0),
        bh = N((q1 - q3).max(0.5)),
        q1 = N(q1),
        q3 = N(q3),
        wlo = N(wlo),
        whi = N(whi),
        med = N(y.map(s.median)),
    );
    if let Some(e) = &case.estimates {
        // The headline (the table's number) may differ from the box's median
        // when outliers were removed before analysis, so it is drawn apart.
        let m = &e.median;
        let cx = x0 + 58.0;
        let (py, lo, hi) = (y.map(m.point), y.map(m.lower), y.map(m.upper));
        let _ = write!(
            out,
            "<g class=\"ci\"><line x1=\"{cx}\" y1=\"{lo}\" x2=\"{cx}\" y2=\"{hi}\"/>\
             <line x1=\"{a}\" y1=\"{lo}\" x2=\"{b}\" y2=\"{lo}\"/><line x1=\"{a}\" y1=\"{hi}\" x2=\"{b}\" y2=\"{hi}\"/>\
             <path class=\"headline\" d=\"M{cx} {t}L{r} {py}L{cx} {u}L{l} {py}Z\"><title>median {}</title></path></g>",
            Esc(&crate::units::format_time_ci(m)),
            cx = N(cx),
            a = N(cx - 3.0),
            b = N(cx + 3.0),
            l = N(cx - 3.5),
            r = N(cx + 3.5),
            t = N(py - 3.5),
            u = N(py + 3.5),
            py = N(py),
            lo = N(lo),
            hi = N(hi),
        );
    }
    out.push_str("<g class=\"samples\">");
    let (dx0, dw) = (x0 + 70.0, 52.0);
    for (i, &v) in d.drawn.iter().enumerate() {
        let class = match d.fences.classify(v) {
            OutlierClass::Normal => "",
            OutlierClass::LowMild | OutlierClass::HighMild => " class=\"mild\"",
            OutlierClass::LowSevere | OutlierClass::HighSevere => " class=\"severe\"",
        };
        let cx = dx0 + dw / 2.0 + jitter(i) * dw;
        let _ = write!(out, "<circle{class} cx=\"{}\" cy=\"{}\" r=\"2\"/>", N(cx), N(y.map(v)));
    }
    out.push_str("</g>");
}

/// One row of a throughput chart: a case with its rate in each file.
pub(crate) struct RateRow<'a> {
    /// Full case id (tooltip).
    pub id: &'a str,
    /// Short label (the params), shown left of the bars.
    pub label: String,
    /// Rate per file (`None`: absent, failed or no rate in that file).
    pub rates: Vec<Option<Estimate>>,
}

/// Geometry of a throughput chart, shared with the tests.
pub(crate) mod bars {
    /// Total width.
    pub const W: f64 = 760.0;
    /// Height of one bar.
    pub const BAR: f64 = 14.0;
    /// Gap between two bars of one case.
    pub const GAP: f64 = 2.0;
    /// Gap between cases.
    pub const ROW_GAP: f64 = 10.0;
    /// Room right of the longest bar for its value label.
    pub const VALUE_W: f64 = 92.0;
    /// Top margin.
    pub const TOP: f64 = 6.0;
    /// Room under the bars for tick labels.
    pub const AXIS_H: f64 = 22.0;
    /// Rows beyond which the axis labels are repeated above the bars.
    pub const LONG: usize = 12;
}

/// Left edge of a throughput chart's bars: the longest label's width.
pub(crate) fn label_column(rows: &[RateRow]) -> f64 {
    let longest = rows.iter().map(|r| r.label.chars().count()).max().unwrap_or(0);
    (longest as f64 * CHAR_W + 10.0).max(60.0)
}

/// Width of a throughput chart: at least [`bars::W`], more for long labels.
pub(crate) fn width(rows: &[RateRow]) -> f64 {
    bars::W.max(label_column(rows) + 420.0)
}

/// The x scale of a throughput chart: zero to the highest rate or CI bound,
/// so bar lengths are proportional to the rates.
pub(crate) fn rate_scale(rows: &[RateRow], x0: f64) -> LinearScale {
    let hi = rows
        .iter()
        .flat_map(|r| r.rates.iter().flatten())
        .flat_map(|e| [e.point, e.upper])
        .filter(|v| v.is_finite())
        .fold(0f64, f64::max);
    LinearScale::new((0.0, hi * 1.02), (x0, width(rows) - bars::VALUE_W))
}

/// Horizontal bars of `rows`' rates in `unit`, one bar per file of `files`
/// (`(index of the file in the report, label)`: the index picks the colour,
/// so a file keeps its colour in every chart), the CI as an error bar, the
/// value at the end of each bar.
pub(crate) fn throughput(
    out: &mut String,
    title: &str,
    unit: &'static str,
    files: &[(usize, &str)],
    rows: &[RateRow],
) {
    use bars::*;
    // Labels are never cut (a cut label could stand for two cases): the
    // label column is as wide as the longest, and the chart as much wider.
    let x0 = label_column(rows);
    let w = width(rows);
    let per_row = files.len() as f64 * (BAR + GAP) - GAP;
    // A long chart repeats its axis labels above the bars.
    let head = if rows.len() > LONG { AXIS_H } else { 0.0 };
    let h = TOP + head + rows.len() as f64 * (per_row + ROW_GAP) + AXIS_H;
    let x = rate_scale(rows, x0);
    svg::open(out, "bars", w, h, title);
    let axis_y = h - AXIS_H;
    svg::x_axis(out, &x, TOP + head, axis_y, Units::Rate(unit));
    if head > 0.0 {
        svg::x_axis_labels(out, &x, TOP + head - 6.0, Units::Rate(unit));
    }
    for (i, row) in rows.iter().enumerate() {
        let top = TOP + head + ROW_GAP / 2.0 + i as f64 * (per_row + ROW_GAP);
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{}\" dy=\"0.32em\" text-anchor=\"end\">{}<title>{}</title></text>",
            N(x0 - 6.0),
            N(top + per_row / 2.0),
            Esc(&row.label),
            Esc(row.id),
        );
        for (k, rate) in row.rates.iter().enumerate() {
            let by = top + k as f64 * (BAR + GAP);
            let mid = N(by + BAR / 2.0);
            let Some(e) = rate.filter(|e| e.point.is_finite()) else {
                let _ = write!(
                    out,
                    "<text x=\"{}\" y=\"{mid}\" dy=\"0.32em\" class=\"muted\">-</text>",
                    N(x0 + 4.0)
                );
                continue;
            };
            let end = x.map(e.point);
            let (lo, hi) = (x.map(e.lower), x.map(e.upper));
            let text = crate::units::format_rate(e.point, unit);
            let _ = write!(
                out,
                "<g class=\"s{}\"><rect class=\"bar\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\">\
                 <title>{}: {}</title></rect>\
                 <line class=\"err\" x1=\"{}\" y1=\"{mid}\" x2=\"{}\" y2=\"{mid}\"/>\
                 <text x=\"{}\" y=\"{mid}\" dy=\"0.32em\">{}</text></g>",
                files.get(k).map_or(k, |f| f.0) % super::PALETTE,
                N(x0),
                N(by),
                N(end - x0),
                N(BAR),
                Esc(files.get(k).map_or("", |f| f.1)),
                Esc(&text),
                N(lo),
                N(hi),
                N(end.max(hi) + 4.0),
                Esc(&text),
            );
        }
    }
    out.push_str("</svg>");
}
