//! One self-contained HTML page for people: summary tables, distribution
//! plots, throughput bars, comparison and trend charts.
//!
//! The page needs nothing but a browser: inline CSS, inline SVG, no script,
//! no font or stylesheet to fetch; the only URL in it is the SVG namespace.
//! It is also well-formed XML (void tags self-closed, every piece of data
//! escaped by [`svg::Esc`]), so tools and the tests can parse it as such.
//!
//! - `tables`: machine facts, per-case summary, targets, medians side by side.
//! - `charts`: distribution (box plot and raw samples) and throughput bars.
//! - `comparison`: % change per case with its interval, by verdict.
//! - `trend`: median per run from the history, change points marked.
//! - `roofline`: the cache-aware roofline and the thread-scaling table.
//! - `svg`: scales, ticks in human units, axes, escaping.

mod charts;
mod comparison;
mod labels;
mod machines;
mod over_time;
mod roofline;
mod serving;
mod svg;
mod tables;
#[cfg(test)]
mod tests;
mod trend;

use crate::report::summary::{RunSummary, describe_ids};
use crate::results::{CaseResult, Estimate, RunReport};
use crate::suites::ThroughputKind;
pub use serving::load_page;
use std::fmt::Write as _;
use svg::Esc;

/// Number of series colours (`.s0` .. `.s7` in the stylesheet); files beyond
/// that reuse them in order.
const PALETTE: usize = 8;

/// What [`render`] puts on the page.
pub struct HtmlInput<'a> {
    /// Page title and heading.
    pub title: String,
    /// Results files with their labels (usually the file names), in the
    /// order they are shown; several files are compared side by side.
    pub reports: Vec<(String, &'a RunReport)>,
    /// A baseline/candidate comparison (`tfbench compare`), if any.
    pub comparison: Option<&'a crate::compare::Comparison>,
    /// Where the comparison's sides are among `reports`: `(baseline,
    /// candidate)` indices, when both are shown. The side-by-side table then
    /// gives ratios to the baseline and colours the candidate's by the
    /// comparison's verdicts; without it no ratio is coloured.
    pub sides: Option<(usize, usize)>,
    /// Case trends over a machine's history (`tfbench history`), if any.
    pub trends: &'a [crate::history::CaseTrend],
}

/// The stylesheet: kept free of `<` and `&` so the page stays valid XML.
const CSS: &str = "\
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#222;margin:0 auto;\
max-width:1200px;padding:0 16px 48px}\
h1{font-size:1.6em;margin:.8em 0 .2em}h2{margin-top:2em;border-bottom:1px solid #ddd}\
h3{margin:1.4em 0 .4em}code{font:12px ui-monospace,Menlo,Consolas,monospace}\
.muted{color:#777;fill:#888}nav a{margin-right:1em}\
.scroll{overflow-x:auto}table{border-collapse:collapse;margin:.5em 0}\
th,td{padding:3px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}\
table.summary,table.changes,table.side,table.infer{width:100%}td.id{min-width:14em}\
table.changes td.num,table.side td.num{white-space:normal}\
th{background:#f6f6f6}td.num{text-align:right;white-space:nowrap}\
ol.notes{font-size:12px;margin:.3em 0 1em;padding-left:2.2em;overflow-wrap:anywhere}\
.summary-box{background:#f6f8fa;border:1px solid #e1e4e8;padding:8px 14px;margin:1em 0}\
.summary-box li{overflow-wrap:anywhere}.ref{font-size:11px;vertical-align:super}\
tr.fail td{background:#fff1f0}tr.fail td:nth-child(4){color:#b00;font-weight:600}\
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:.5em 0}\
dl.facts dt{color:#666}dl.facts dd{margin:0}\
.grid{display:grid;gap:12px 16px}figure{margin:0}figcaption{font-size:12px;overflow-wrap:anywhere}\
svg{display:block;width:100%;height:auto;font-family:system-ui,sans-serif;font-size:11px}\
svg.bars,svg.cmp,svg.trend,svg.roofline{max-width:1000px}\
svg text{fill:#333}.axis line{stroke:#e4e4e4}.axis text{fill:#666}\
.key{display:inline-block;margin-right:1em}.key i{display:inline-block;width:.8em;height:.8em;\
margin-right:.3em;background:currentColor;vertical-align:-.05em}.key span{color:#222}\
.box rect{fill:currentColor;fill-opacity:.15;stroke:currentColor}.box line{stroke:currentColor}\
.box .median{stroke-width:2.5}.ci line{stroke:#222}.headline{fill:#222}\
.samples circle{fill:currentColor;fill-opacity:.5}.samples .mild{fill:none;stroke:currentColor}\
.samples .severe{fill:none;stroke:#c00}\
.bar{fill:currentColor;fill-opacity:.85}.err{stroke:#222;stroke-width:1.2}\
.noise{fill:#000;fill-opacity:.07}.warn{background:#fff7e0;padding:6px 10px}.zero{stroke:#888}\
.faster{color:#1a7f37}.slower{color:#c62828}.same{color:#888}.unsure{color:#b58900}.few{color:#7b61c4}\
.trend polyline{fill:none;stroke:currentColor;stroke-width:1.5}.trend circle{fill:currentColor}\
.cp line{stroke:#c62828;stroke-dasharray:4 3}.cp text{fill:#c62828}.level{stroke:#555;stroke-dasharray:2 2}\
.s0{color:#0072b2}.s1{color:#e69f00}.s2{color:#009e73}.s3{color:#cc79a7}\
.s4{color:#56b4e9}.s5{color:#d55e00}.s6{color:#7f7f7f}.s7{color:#000}";

/// What `tfbench serve` adds to the report it serves (see `crate::live`):
/// the page stays the same static report, with a live section above it and
/// a script that only refreshes that section (progressive enhancement).
pub struct Served<'a> {
    /// HTML placed above the summary: a `<section id="live">`.
    pub top: &'a str,
    /// Extra stylesheet rules (free of `<` and `&`).
    pub css: &'a str,
    /// Inline script, placed at the end of the body.
    pub script: &'a str,
    /// Reload the page every this many seconds when scripts are off (a
    /// `<noscript>` refresh while a run is streaming).
    pub refresh_without_script: Option<u32>,
}

/// Text escaped for HTML (and XML): what the report uses for every datum.
pub fn escape(text: &str) -> String {
    Esc(text).to_string()
}

/// A case id escaped for HTML, with break opportunities after `/` and `,`.
pub fn case_id_html(id: &str) -> String {
    labels::id_html(id)
}

/// The whole page. Never fails: missing data shows as `-` or is left out.
pub fn render(input: &HtmlInput) -> String {
    render_page(input, None, None)
}

/// [`render`] with a section comparing the machines the results came from
/// (`tfbench report` over several machines' results, or with prices).
pub fn render_with_machines(
    input: &HtmlInput,
    machines: Option<&crate::report::machines::Machines>,
) -> String {
    render_page(input, None, machines)
}

/// The whole page with what a dashboard adds ([`Served`]).
pub fn render_served(input: &HtmlInput, served: &Served) -> String {
    render_page(input, Some(served), None)
}

fn render_page(
    input: &HtmlInput,
    served: Option<&Served>,
    machines: Option<&crate::report::machines::Machines>,
) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let refresh = served.and_then(|s| s.refresh_without_script).map_or(String::new(), |secs| {
        format!("<noscript><meta http-equiv=\"refresh\" content=\"{secs}\"/></noscript>")
    });
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>{refresh}\
         <title>{t}</title><style>{CSS}{extra_css}</style></head><body><header><h1>{t}</h1>\
         <p class=\"muted\">tfbench {} report of {} results file(s). Times are per iteration; \
         intervals are confidence intervals of the median.</p><nav>",
        env!("CARGO_PKG_VERSION"),
        input.reports.len(),
        t = Esc(&input.title),
        extra_css = served.map_or("", |s| s.css),
    );
    let mut sections: Vec<(&str, &str)> = vec![("summary", "Summary"), ("results", "Results")];
    if served.is_some() {
        sections.insert(0, ("live", "Live run"));
    }
    if input.reports.len() > 1 {
        sections.push(("side", "Side by side"));
    }
    if machines.is_some() {
        sections.push(("machines", "Machines"));
    }
    if input.comparison.is_some() {
        sections.push(("comparison", "Comparison"));
    }
    if !input.trends.is_empty() {
        sections.push(("trends", "Trends"));
    }
    sections.extend([
        ("throughput", "Throughput"),
        ("roofline", "Roofline"),
        ("distributions", "Distributions"),
    ]);
    if over_time::any(&input.reports) {
        sections.push(("overtime", "Over time"));
    }
    for (anchor, name) in &sections {
        let _ = write!(out, "<a href=\"#{anchor}\">{name}</a>");
    }
    out.push_str("</nav></header>");

    if let Some(s) = served {
        out.push_str(s.top);
    }
    summary_section(&mut out, input);
    results_section(&mut out, input);
    if input.reports.len() > 1 {
        out.push_str("<section id=\"side\"><h2>Side by side</h2>");
        legend(&mut out, &input.reports);
        let judged = input.comparison.zip(input.sides).map(|(cmp, (baseline, candidate))| tables::Judged {
            cmp,
            baseline,
            candidate,
        });
        tables::side_by_side(&mut out, &input.reports, judged);
        out.push_str("</section>");
    }
    if let Some(m) = machines {
        machines::section(&mut out, m);
    }
    if let Some(cmp) = input.comparison {
        comparison::section(&mut out, cmp);
    }
    if !input.trends.is_empty() {
        trend::section(&mut out, input.trends);
    }
    throughput_section(&mut out, &input.reports);
    roofline::section(&mut out, &input.reports);
    distribution_section(&mut out, &input.reports);
    if over_time::any(&input.reports) {
        over_time::section(&mut out, &input.reports);
    }
    if let Some(s) = served {
        let _ = write!(out, "<script>{}</script>", s.script);
    }
    out.push_str("</body></html>\n");
    out
}

/// The page at a glance: per results file, every case counted with each
/// skip reason once (and the cases it covers); the comparison's verdicts.
fn summary_section(out: &mut String, input: &HtmlInput) {
    out.push_str("<section id=\"summary\" class=\"summary-box\"><h2 style=\"margin-top:.3em\">Summary</h2>");
    for (k, (label, report)) in input.reports.iter().enumerate() {
        let s = RunSummary::of(report);
        let _ = write!(
            out,
            "<p><b>{}</b>: {} case{} run: <b>{} ok</b>, <b>{} skipped</b>, <b{}>{} failed</b>; wall time {:.1} s.</p>",
            Esc(label),
            s.total,
            if s.total == 1 { "" } else { "s" },
            s.ok,
            s.skipped,
            if s.failed > 0 { " class=\"slower\"" } else { "" },
            s.failed,
            report.wall_time_secs,
        );
        if !s.skip_groups.is_empty() {
            out.push_str("<ol>");
            for (g_index, g) in s.skip_groups.iter().enumerate() {
                let _ = write!(
                    out,
                    "<li id=\"skip-{k}-{}\">{} skipped: {} <span class=\"muted\">({})</span><details><summary>cases\
                     </summary>",
                    g_index + 1,
                    g.ids.len(),
                    Esc(&g.reason),
                    Esc(&describe_ids(&g.ids)),
                );
                for (i, id) in g.ids.iter().enumerate() {
                    let _ =
                        write!(out, "{}<code>{}</code>", if i > 0 { ", " } else { "" }, labels::id_html(id));
                }
                out.push_str("</details></li>");
            }
            out.push_str("</ol>");
        }
    }
    if let Some(cmp) = input.comparison {
        let mut verdicts: Vec<(&str, usize)> = Vec::new();
        for c in &cmp.changes {
            match verdicts.iter_mut().find(|(v, _)| *v == c.verdict.as_str()) {
                Some((_, n)) => *n += 1,
                None => verdicts.push((c.verdict.as_str(), 1)),
            }
        }
        verdicts.sort_by_key(|(v, _)| comparison::verdict_rank(v));
        let _ = write!(out, "<p><b>Comparison</b> {} → {}: ", Esc(&cmp.baseline), Esc(&cmp.candidate));
        for (i, (v, n)) in verdicts.iter().enumerate() {
            let _ = write!(
                out,
                "{}<b class=\"{}\">{n} {}</b>",
                if i > 0 { ", " } else { "" },
                comparison::verdict_class_of(v),
                Esc(v)
            );
        }
        if verdicts.is_empty() {
            out.push_str("no case measured in both");
        }
        let _ = write!(
            out,
            "; {} only in the baseline, {} only in the candidate, {} not compared (failed or no samples).</p>",
            cmp.only_in_baseline.len(),
            cmp.only_in_candidate.len(),
            cmp.failed.len()
        );
    }
    out.push_str("</section>");
}

/// Per results file: machine facts, the summary table and target checks.
fn results_section(out: &mut String, input: &HtmlInput) {
    out.push_str("<section id=\"results\"><h2>Results</h2>");
    if input.reports.is_empty() {
        out.push_str("<p class=\"muted\">No results file given.</p>");
    }
    for (k, (label, report)) in input.reports.iter().enumerate() {
        let counts = RunSummary::of(report);
        let _ = write!(out, "<h3>{}</h3><p>{}.</p>", Esc(label), Esc(&counts.counts_line()));
        tables::environment(out, report);
        tables::summary(out, report, k);
        tables::inference(out, report);
        tables::targets(out, report);
    }
    out.push_str("</section>");
}

/// Colour keys of the results files.
fn legend(out: &mut String, reports: &[(String, &RunReport)]) {
    out.push_str("<p>");
    for (k, (label, _)) in reports.iter().enumerate() {
        let _ = write!(out, "<span class=\"key s{}\"><i></i><span>{}</span></span>", k % PALETTE, Esc(label));
    }
    out.push_str("</p>");
}

/// The rate of `kind` in `case` when it was measured.
fn rate_of(case: &CaseResult, kind: ThroughputKind) -> Option<Estimate> {
    if case.status.is_failed() {
        return None;
    }
    case.throughput.iter().find(|t| t.kind == kind).map(|t| t.rate)
}

/// A throughput chart's key: suite, benchmark and the kind of the first
/// headline rate seen for the case.
type GroupKey<'a> = (&'a str, &'a str, ThroughputKind);

/// One bar chart per benchmark and rate unit (rates of different kinds
/// share no axis), each case's headline rate, one bar per file.
fn throughput_section(out: &mut String, reports: &[(String, &RunReport)]) {
    out.push_str("<section id=\"throughput\"><h2>Throughput</h2>");
    if reports.len() > 1 {
        legend(out, reports);
    }
    let mut groups: Vec<(GroupKey, Vec<&str>)> = Vec::new();
    for id in tables::union_ids(reports) {
        let headline = reports.iter().filter_map(|(_, r)| tables::find(r, id)).find_map(|c| {
            let t = crate::report::primary_throughput(c).filter(|_| !c.status.is_failed())?;
            Some((c.suite.as_str(), c.benchmark.as_str(), t.kind))
        });
        let Some(key) = headline else { continue };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, ids)) => ids.push(id),
            None => groups.push((key, vec![id])),
        }
    }
    if groups.is_empty() {
        out.push_str("<p class=\"muted\">No measured case declares a throughput.</p>");
    }
    for ((suite, bench, kind), mut ids) in groups {
        ids.sort_by(|a, b| labels::natural_cmp(a, b));
        let names = labels::varying_labels(&ids);
        // Only the files that have a case of this group get a bar slot: a
        // report of every suite's run would otherwise draw rows of empty slots.
        let present: Vec<(usize, &str)> = reports
            .iter()
            .enumerate()
            .filter(|(_, (_, r))| ids.iter().any(|id| tables::find(r, id).is_some()))
            .map(|(k, (l, _))| (k, l.as_str()))
            .collect();
        let rows: Vec<charts::RateRow> = ids
            .iter()
            .zip(names)
            .map(|(id, label)| charts::RateRow {
                id,
                label,
                rates: present
                    .iter()
                    .map(|(k, _)| tables::find(reports[*k].1, id).and_then(|c| rate_of(c, kind)))
                    .collect(),
            })
            .collect();
        let title = format!("{suite}/{bench}: {}", kind.rate_unit());
        let _ = write!(out, "<figure><figcaption><b>{}</b></figcaption>", Esc(&title));
        charts::throughput(out, &title, kind.rate_unit(), &present, &rows);
        out.push_str("</figure>");
    }
    out.push_str("</section>");
}

/// One plot per case with samples, one column per file that has the case.
fn distribution_section(out: &mut String, reports: &[(String, &RunReport)]) {
    let _ = write!(
        out,
        "<section id=\"distributions\"><h2>Distributions</h2><p class=\"muted\">Per-iteration time of every \
         raw sample (nanoseconds over iterations of the sample) on a linear axis. Box: quartiles with the \
         median line; whiskers: the furthest samples within the Tukey fences (1.5 × IQR beyond the \
         quartiles); dots: the samples, jittered sideways, hollow beyond the fences (red beyond 3 × IQR); \
         diamond with bars: the reported median and its confidence interval. At most {} dots per \
         column: larger samples are subsampled evenly by rank, keeping both extremes.</p>",
        charts::MAX_DOTS
    );
    if reports.len() > 1 {
        legend(out, reports);
    }
    // Column captions are narrow: paths cut from the left, file names kept.
    let names: Vec<&str> = reports.iter().map(|(l, _)| l.as_str()).collect();
    let short = labels::short_paths(&names, charts::LABEL_CHARS);
    // As many columns as the most files sharing one case, not the number of
    // files: a report of every suite's run has one file per case.
    let columns = tables::union_ids(reports)
        .iter()
        .map(|id| reports.iter().filter(|(_, r)| tables::find(r, id).is_some()).count())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let min_width = 220.0 + 110.0 * (columns - 1.0);
    let _ = write!(
        out,
        "<div class=\"grid\" style=\"grid-template-columns:repeat(auto-fill,minmax({min_width:.0}px,1fr))\">"
    );
    let mut any = false;
    let mut ids = tables::union_ids(reports);
    ids.sort_by(|a, b| labels::natural_cmp(a, b));
    for id in ids {
        let series: Vec<charts::DistSeries> = reports
            .iter()
            .enumerate()
            .filter_map(|(k, (_, r))| {
                tables::find(r, id).map(|case| charts::DistSeries::new(&short[k], k, case))
            })
            .collect();
        if series.iter().all(|s| s.dist.is_none()) {
            continue;
        }
        any = true;
        let drawn: Vec<String> = series
            .iter()
            .filter_map(|s| s.dist.as_ref())
            .filter(|d| d.total > d.drawn.len())
            .map(|d| format!("showing {} of {} samples", d.drawn.len(), d.total))
            .collect();
        let _ = write!(out, "<figure class=\"case\" data-case=\"{}\">", Esc(id));
        charts::distribution(out, id, &series);
        let _ = write!(out, "<figcaption><code>{}</code>", labels::id_html(id));
        if !drawn.is_empty() {
            let _ = write!(out, " <span class=\"muted\">({})</span>", drawn.join("; "));
        }
        out.push_str("</figcaption></figure>");
    }
    out.push_str("</div>");
    if !any {
        out.push_str("<p class=\"muted\">No case has samples.</p>");
    }
    out.push_str("</section>");
}
