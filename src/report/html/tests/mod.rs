//! Tests of the HTML page: parsed back as XML with quick-xml into a small
//! element tree, then checked against the data and the scale functions.

mod xml;

use super::charts::{self, Distribution};
use super::svg::SVG_NS;
use super::*;
use crate::compare::{CaseChange, CompareOptions, Comparison, Verdict};
use crate::history::{CaseTrend, ChangePoint};
use crate::report::fixture;
use crate::results::Estimate;
use crate::results::Sample;
use xml::{El, parse};

fn page(reports: Vec<(String, &RunReport)>, trends: &[CaseTrend]) -> String {
    render(&HtmlInput {
        title: "tfbench <report> & \"more\"".into(),
        reports,
        comparison: None,
        sides: None,
        trends,
    })
}

const MATMUL: &str = "tensor/matmul/shape=256x256x256,threads=1";

/// The distribution figure of case `id`.
fn dist_figure<'a>(doc: &'a El, id: &str) -> &'a El {
    let found = doc.all(&|e| e.name == "figure" && e.attr("data-case") == Some(id));
    assert_eq!(found.len(), 1, "one distribution figure for {id}");
    found[0]
}

#[test]
fn page_and_every_svg_fragment_are_well_formed_xml() {
    let report = fixture();
    let html = page(vec![("a.json".into(), &report)], &[]);
    assert!(html.starts_with("<!DOCTYPE html>"));
    let doc = parse(&html);
    assert_eq!(doc.children.len(), 1);
    assert_eq!(doc.children[0].name, "html");
    // Each fragment on its own, as a tool extracting the charts would see it.
    let mut rest = html.as_str();
    let mut fragments = 0;
    while let Some(start) = rest.find("<svg") {
        let end = rest[start..].find("</svg>").expect("closed svg") + start + "</svg>".len();
        let svg = parse(&rest[start..end]);
        assert_eq!(svg.children[0].attr("xmlns"), Some(SVG_NS));
        assert!(svg.children[0].attr("viewBox").is_some());
        fragments += 1;
        rest = &rest[end..];
    }
    // Two throughput charts (matmul FLOP/s, softmax B/s) and two distributions.
    assert_eq!(fragments, 4);
}

#[test]
fn no_external_reference_and_no_script() {
    let report = fixture();
    let cmp = comparison_fixture();
    let trends = [trend_fixture()];
    let html = render(&HtmlInput {
        title: "t".into(),
        reports: vec![("a".into(), &report), ("b".into(), &report)],
        comparison: Some(&cmp),
        sides: Some((0, 1)),
        trends: &trends,
    });
    parse(&html);
    let stripped = html.replace(&format!("xmlns=\"{SVG_NS}\""), "");
    for bad in ["http://", "https://", "<script", "<link", "@import", "url(", "src="] {
        assert!(!stripped.contains(bad), "{bad}");
    }
}

#[test]
fn text_from_the_data_is_escaped() {
    let mut report = fixture();
    let evil = "<script>alert(\"x&y\")</script> it's \u{7}";
    report.cases[1].notes.push(evil.into());
    report.cases[0].id = "tensor/matmul/a<b&c>\"d\"".into();
    report.environment.cpu_model = "<b>CPU</b> & co".into();
    let html = page(vec![("<label>".into(), &report)], &[]);
    assert!(!html.contains("<script>"));
    assert!(!html.contains("<b>CPU"));
    assert!(!html.contains("<label>"));
    assert!(html.contains("&lt;script&gt;alert(&quot;x&amp;y&quot;)&lt;/script&gt; it&#39;s \u{FFFD}"));
    // Escaping loses nothing: the parsed text is the original.
    let doc = parse(&html);
    let text = doc.all_text();
    assert!(text.contains("<script>alert(\"x&y\")</script> it's"));
    assert!(text.contains("<b>CPU</b> & co"));
    assert!(text.contains("tensor/matmul/a<b&c>\"d\""));
    assert!(text.contains("tfbench <report> & \"more\""));
    // Attributes too.
    dist_figure(&doc, "tensor/matmul/a<b&c>\"d\"");
}

#[test]
fn one_circle_per_sample_with_outliers_marked() {
    let report = fixture();
    let doc = parse(&page(vec![("a".into(), &report)], &[]));
    let fig = dist_figure(&doc, MATMUL);
    let groups = fig.all(&|e| e.has_class("samples"));
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].named("circle").len(), report.cases[0].samples.len());
    assert_eq!(report.cases[0].samples.len(), 10);
    // The 25% slower sample is beyond the 3 IQR fence.
    assert_eq!(groups[0].all(&|e| e.has_class("severe")).len(), 1);
    // The failed case has no samples, so no plot.
    assert!(doc.all(&|e| e.attr("data-case") == Some("tensor/layernorm/rows=4096")).is_empty());
}

#[test]
fn large_samples_are_subsampled_to_the_cap_keeping_extremes() {
    let mut report = fixture();
    report.cases[0].samples = (0..1234)
        .map(|i| Sample { iterations: 4, nanos: 4.0 * (1000.0 + (i * 7919 % 1234) as f64), round: 0 })
        .collect();
    let html = page(vec![("a".into(), &report)], &[]);
    let doc = parse(&html);
    let fig = dist_figure(&doc, MATMUL);
    let circles = fig.named("circle");
    assert_eq!(circles.len(), charts::MAX_DOTS);
    assert!(fig.all_text().contains("showing 500 of 1234 samples"));
    let d = Distribution::new(&report.cases[0]).unwrap();
    assert_eq!((d.drawn[0], d.drawn[499]), (1000.0, 2233.0));
    let cis = [report.cases[0].estimates.as_ref().unwrap().median];
    let y = charts::dist_scale(&[&d], &cis);
    let ys: Vec<f64> = circles.iter().map(|c| c.num("cy")).collect();
    let (top, bottom) = ys.iter().fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    assert!((bottom - y.map(1000.0)).abs() < 0.06 && (top - y.map(2233.0)).abs() < 0.06);
}

#[test]
fn box_median_and_headline_median_sit_where_the_scale_puts_them() {
    let report = fixture();
    let case = &report.cases[1];
    let doc = parse(&page(vec![("a".into(), &report)], &[]));
    let fig = dist_figure(&doc, &case.id);
    let d = Distribution::new(case).unwrap();
    let est = case.estimates.as_ref().unwrap().median;
    let y = charts::dist_scale(&[&d], &[est]);
    let median = fig.all(&|e| e.has_class("median"));
    assert_eq!(median.len(), 1);
    assert!((median[0].num("y1") - y.map(d.summary.median)).abs() < 0.06);
    // Quartile box.
    let rect = &fig.all(&|e| e.has_class("box"))[0].named("rect")[0];
    assert!((rect.num("y") - y.map(d.summary.q3)).abs() < 0.06);
    assert!((rect.num("y") + rect.num("height") - y.map(d.summary.q1)).abs() < 0.12);
    // The reported median (the table's number): the diamond's centre row.
    let path = fig.all(&|e| e.has_class("headline"))[0].attr("d").unwrap().to_string();
    let coords: Vec<f64> =
        path.split(|c: char| c.is_ascii_alphabetic() || c == ' ').filter_map(|t| t.parse().ok()).collect();
    assert!((coords[3] - y.map(est.point)).abs() < 0.06, "{path}");
    // Whiskers end at samples inside the 1.5 IQR fences.
    assert!(d.whiskers.1 <= d.fences.high_mild && d.whiskers.0 >= d.fences.low_mild);
}

/// The `rect.bar` elements of the throughput chart whose caption names `group`.
fn bars<'a>(doc: &'a El, group: &str) -> Vec<&'a El> {
    let figs =
        doc.all(&|e| e.name == "figure" && e.all_text().starts_with(group) && !e.named("svg").is_empty());
    assert_eq!(figs.len(), 1, "{group}");
    figs[0].all(&|e| e.has_class("bar"))
}

fn bar_widths(doc: &El, group: &str) -> Vec<f64> {
    bars(doc, group).iter().map(|r| r.num("width")).collect()
}

#[test]
fn throughput_bars_are_proportional_to_the_rates() {
    let mut report = fixture();
    let mut slower = report.cases[1].clone();
    slower.id = "tensor/softmax/note=say \"hi\",rows=2048".into();
    for t in &mut slower.throughput {
        for v in [&mut t.rate.point, &mut t.rate.lower, &mut t.rate.upper] {
            *v *= 0.4;
        }
    }
    report.cases.push(slower);
    let doc = parse(&page(vec![("a".into(), &report)], &[]));
    let w = bar_widths(&doc, "tensor/softmax: B/s");
    assert_eq!(w.len(), 2);
    assert!((w[1] / w[0] - 0.4).abs() < 1e-3, "{w:?}");
    // And against the scale: the bar ends where the scale puts the rate.
    let rate = |c: &CaseResult| crate::report::primary_throughput(c).unwrap().rate;
    let rows: Vec<charts::RateRow> = report.cases[1..]
        .iter()
        .skip_while(|c| c.benchmark != "softmax")
        .filter(|c| c.benchmark == "softmax")
        .map(|c| charts::RateRow { id: &c.id, label: c.id.clone(), rates: vec![Some(rate(c))] })
        .collect();
    // Bars start at the label column, where the scale puts zero.
    let x0 = bars(&doc, "tensor/softmax: B/s")[0].num("x");
    let x = charts::rate_scale(&rows, x0);
    for (row, w) in rows.iter().zip(&w) {
        assert!((x.map(row.rates[0].unwrap().point) - x0 - w).abs() < 0.06);
    }
}

#[test]
fn several_files_compare_side_by_side() {
    let a = fixture();
    let mut b = fixture();
    for c in &mut b.cases {
        for t in &mut c.throughput {
            for v in [&mut t.rate.point, &mut t.rate.lower, &mut t.rate.upper] {
                *v *= 2.0;
            }
        }
    }
    let doc = parse(&page(vec![("base.json".into(), &a), ("new.json".into(), &b)], &[]));
    let w = bar_widths(&doc, "tensor/matmul: FLOP/s");
    assert_eq!(w.len(), 2);
    assert!((w[1] / w[0] - 2.0).abs() < 1e-3, "{w:?}");
    // One distribution column per file, both on one axis.
    let fig = dist_figure(&doc, MATMUL);
    assert_eq!(fig.all(&|e| e.has_class("samples")).len(), 2);
    assert!(doc.all(&|e| e.attr("id") == Some("side")).len() == 1);
    assert!(doc.all_text().contains("(×1.00)"));
}

fn trend_fixture() -> CaseTrend {
    let points = (0..12)
        .map(|i| {
            let v = if i < 7 { 100_000.0 } else { 125_000.0 } + (i % 3) as f64 * 500.0;
            (format!("2025-02-{:02}T10:00:00Z", i + 1), format!("abc{i:04}def"), v)
        })
        .collect();
    let cp = ChangePoint {
        index: 7,
        before_median_ns: 100_500.0,
        after_median_ns: 125_500.0,
        ratio: 1.249,
        p_value: 0.001,
    };
    CaseTrend { id: MATMUL.into(), points, change_points: vec![cp] }
}

#[test]
fn trend_lines_mark_change_points() {
    let report = fixture();
    let t = trend_fixture();
    let doc = parse(&page(vec![("a".into(), &report)], std::slice::from_ref(&t)));
    let figs = doc.all(&|e| e.attr("data-trend") == Some(MATMUL));
    assert_eq!(figs.len(), 1);
    let line = &figs[0].named("polyline")[0];
    let pts: Vec<(f64, f64)> = line
        .attr("points")
        .unwrap()
        .split(' ')
        .map(|p| p.split_once(',').map(|(x, y)| (x.parse().unwrap(), y.parse().unwrap())).unwrap())
        .collect();
    assert_eq!(pts.len(), 12);
    let (x, y) = trend::scales(&t);
    for (i, (px, py)) in pts.iter().enumerate() {
        assert!((px - x.map(i as f64)).abs() < 0.06 && (py - y.map(t.points[i].2)).abs() < 0.06);
    }
    let cps = figs[0].all(&|e| e.has_class("cp"));
    assert_eq!(cps.len(), 1);
    let marker = cps[0].named("line")[0].num("x1");
    assert!(marker > x.map(6.0) && marker < x.map(7.0));
    assert!(cps[0].all_text().contains("×1.25"));
    assert!(doc.all(&|e| e.has_class("changes")).len() == 1);
}

#[test]
fn empty_input_still_renders_a_valid_page() {
    let doc = parse(&page(vec![], &[]));
    assert!(doc.all_text().contains("No results file given."));
}

#[test]
fn rendering_is_deterministic() {
    let report = fixture();
    let a = page(vec![("a".into(), &report)], &[trend_fixture()]);
    assert_eq!(a, page(vec![("a".into(), &report)], &[trend_fixture()]));
}

fn comparison_fixture() -> Comparison {
    let change = |id: &str, point: f64, lower: f64, upper: f64, verdict: Verdict| CaseChange {
        id: id.into(),
        old_median_ns: 100_000.0,
        new_median_ns: 100_000.0 * point,
        ratio: Estimate { point, lower, upper, level: 0.95 },
        old_samples: 50,
        new_samples: 50,
        p_value: 0.001,
        q_value: 0.002,
        band: 0.02,
        band_source: "default".into(),
        verdict,
        beyond_limit: verdict == Verdict::Regressed,
        memory: None,
        disturbed: None,
        measure: Default::default(),
    };
    Comparison {
        baseline: "main <old>".into(),
        candidate: "pr & new".into(),
        machine_mismatch: Some("fingerprints differ: \"a\" vs <b>".into()),
        changes: vec![
            change("t/b/x=slow", 1.25, 1.2, 1.31, Verdict::Regressed),
            change("t/b/x=flat", 1.004, 0.995, 1.012, Verdict::Unchanged),
            change("t/b/x=unsure<>", 1.03, 0.99, 1.08, Verdict::Inconclusive),
            change("t/b/x=fast", 0.8, 0.78, 0.83, Verdict::Improved),
            change("t/b/x=nan", f64::NAN, f64::NAN, f64::NAN, Verdict::Inconclusive),
        ],
        only_in_baseline: vec!["t/gone".into()],
        only_in_candidate: vec!["t/new".into()],
        failed: vec!["t/broken".into()],
        failures: Vec::new(),
        skipped: Vec::new(),
        method: Default::default(),
        runs: (1, 1),
        drift: None,
        vacuous: None,
        notes: Vec::new(),
        options: CompareOptions::default(),
    }
}

#[test]
fn comparison_bars_show_change_ci_verdict_and_noise_band() {
    let report = fixture();
    let cmp = comparison_fixture();
    let html = render(&HtmlInput {
        title: "t".into(),
        reports: vec![("a".into(), &report)],
        comparison: Some(&cmp),
        sides: None,
        trends: &[],
    });
    let doc = parse(&html);
    let svgs = doc.all(&|e| e.name == "svg" && e.has_class("cmp"));
    assert_eq!(svgs.len(), 1);
    let chart = svgs[0];
    let x = comparison::scale(&cmp);
    // One bar per finite change, coloured by verdict, from 0 to the % change.
    let bars = chart.all(&|e| e.has_class("bar"));
    assert_eq!(bars.len(), 4);
    let want = [("slower", 25.0), ("same", 0.4), ("unsure", 3.0), ("faster", -20.0)];
    let groups = chart.all(&|e| e.name == "g" && !e.named("rect").is_empty());
    for ((class, pct), g) in want.iter().zip(&groups) {
        assert!(g.has_class(class), "{class}");
        let rect = g.named("rect")[0];
        let (a, b) = (x.map(0.0), x.map(*pct));
        assert!((rect.num("x") - a.min(b)).abs() < 0.06 && (rect.num("width") - (b - a).abs()).abs() < 0.1);
    }
    // The interval as an error bar.
    let err = groups[0].all(&|e| e.has_class("err"))[0];
    assert!((err.num("x1") - x.map(20.0)).abs() < 0.06 && (err.num("x2") - x.map(31.0)).abs() < 0.1);
    // The noise band: +-2% by default.
    let band = chart.all(&|e| e.has_class("noise"))[0];
    assert!((band.num("x") - x.map(-2.0)).abs() < 0.06);
    assert!((band.num("width") - (x.map(2.0) - x.map(-2.0))).abs() < 0.1);
    let text = doc.all_text();
    for needle in ["main <old>", "pr & new", "t/b/x=unsure<>", "\"a\" vs <b>", "t/gone", "t/new", "t/broken"]
    {
        assert!(text.contains(needle), "{needle}");
    }
    assert!(html.contains("href=\"#comparison\""));
}

/// The fixture with two skipped OpenBLAS cases and a decode case reporting
/// tokens/s and latency percentiles.
fn report_with_skips_and_inference() -> RunReport {
    use crate::results::{CaseStatus, Metric, ThroughputEstimate};
    let mut report = fixture();
    let template = report.cases[2].clone();
    for threads in ["1", "all"] {
        let mut c = template.clone();
        c.id = format!("tensor/matmul/impl=openblas,shape=1x4096x4096,threads={threads}");
        c.benchmark = "matmul".into();
        c.status =
            CaseStatus::Skipped { reason: format!("no usable OpenBLAS: {}", "looked in /a ".repeat(40)) };
        report.cases.push(c);
    }
    let mut decode = report.cases[0].clone();
    decode.id = "inference/decode/depth=128,gen=16,model=gpt2-tiny".into();
    decode.suite = "inference".into();
    decode.benchmark = "decode".into();
    let rate = Estimate { point: 1234.0, lower: 1200.0, upper: 1250.0, level: 0.95 };
    decode.throughput = vec![ThroughputEstimate {
        kind: crate::suites::ThroughputKind::Tokens,
        per_iteration: 16.0,
        rate,
        pct_of_peak: None,
    }];
    decode.metrics = vec![
        Metric::new("tpot_p50_ns", 810_000.0, "ns"),
        Metric::new("tpot_p99_ns", 1_930_000.0, "ns"),
        Metric::new("ttft_p50_ns", 5_100_000.0, "ns"),
    ];
    report.cases.push(decode);
    report
}

#[test]
fn the_summary_counts_every_case_and_gives_each_skip_reason_once() {
    let report = report_with_skips_and_inference();
    let html = page(vec![("run.json".into(), &report)], &[]);
    let doc = parse(&html);
    let summary = doc.all(&|e| e.attr("id") == Some("summary"));
    assert_eq!(summary.len(), 1);
    let text = summary[0].all_text();
    assert!(
        html.contains("6 cases run: <b>3 ok</b>, <b>2 skipped</b>, <b class=\"slower\">1 failed</b>"),
        "{text}"
    );
    assert!(text.contains("2 skipped: no usable OpenBLAS"), "{text}");
    // The long reason appears once on the whole page, in the summary.
    assert_eq!(html.matches("no usable OpenBLAS").count(), 1);
    // The summary comes before the results.
    assert!(html.find("id=\"summary\"").unwrap() < html.find("id=\"results\"").unwrap());
    // Skipped rows link to the reason; notes are numbered under the table.
    assert!(html.contains("href=\"#skip-0-1\">reason 1</a>"), "skipped rows point at their reason");
    let notes = doc.all(&|e| e.name == "ol" && e.has_class("notes"));
    assert_eq!(notes.len(), 1);
    let items = notes[0].named("li");
    // Two softmax notes and the layernorm failure reason.
    assert_eq!(items.len(), 3);
    assert!(items.iter().any(|li| li.all_text().contains("reference 1.25 (atol 1e-5, rtol 1e-4)")));
}

#[test]
fn inference_headlines_show_tokens_per_second_and_latency_percentiles() {
    let report = report_with_skips_and_inference();
    let doc = parse(&page(vec![("run.json".into(), &report)], &[]));
    let tables = doc.all(&|e| e.name == "table" && e.has_class("infer"));
    assert_eq!(tables.len(), 1);
    let text = tables[0].all_text();
    for want in [
        "inference/decode/depth=128,gen=16,model=gpt2-tiny",
        "1.23 Ktokens/s",
        "5.10 ms",
        "810 µs",
        "1.93 ms",
    ] {
        assert!(text.contains(want), "{want} not in {text}");
    }
    assert_eq!(tables[0].named("tr").len(), 2, "a header and the one case reporting them");
}

#[test]
fn chart_labels_keep_the_varying_params_and_never_read_alike() {
    let mut report = fixture();
    let template = report.cases[0].clone();
    report.cases.clear();
    for shape in ["1000x1000x1000", "100x100x100"] {
        for threads in ["1", "all"] {
            let mut c = template.clone();
            c.id = format!("tensor/matmul/impl=gemm,shape={shape},threads={threads}");
            report.cases.push(c);
        }
    }
    let doc = parse(&page(vec![("run.json".into(), &report)], &[]));
    let fig = doc.all(&|e| e.name == "figure" && e.all_text().starts_with("tensor/matmul: FLOP/s"));
    assert_eq!(fig.len(), 1);
    let labels: Vec<String> = fig[0]
        .all(&|e| e.name == "text" && !e.named("title").is_empty())
        .iter()
        .map(|t| t.text.clone())
        .collect();
    // Natural order (100 before 1000) and only shape and threads: impl=gemm is shared.
    assert_eq!(
        labels,
        [
            "shape=100x100x100, threads=1",
            "shape=100x100x100, threads=all",
            "shape=1000x1000x1000, threads=1",
            "shape=1000x1000x1000, threads=all"
        ]
    );
}

#[test]
fn trends_start_at_zero_and_label_runs_by_date_time_and_revision() {
    let t = trend_fixture();
    let (_, y) = trend::scales(&t);
    assert_eq!(y.d0, 0.0, "the time axis starts at zero");
    assert!(y.d1 >= 125_500.0);
    assert_eq!(trend::run_label("2025-02-01T10:00:07Z", "abc0000def"), "2025-02-01 10:00:07 abc0000");
    assert_eq!(trend::run_label("2025-02-01", "abc"), "2025-02-01 abc");
}

#[test]
fn comparison_has_a_key_memory_columns_and_a_chart_per_benchmark() {
    use crate::compare::MemoryChange;
    let mut cmp = comparison_fixture();
    cmp.changes[0].id = "u/other/x=1".into();
    cmp.changes[1].memory = Some(MemoryChange {
        old_peak_bytes: 1 << 20,
        new_peak_bytes: 3 << 20,
        old_allocs_per_iter: 2.0,
        new_allocs_per_iter: 5.0,
        peak_ratio: 3.0,
        allocs_ratio: 2.5,
        regressed: true,
    });
    let report = fixture();
    let html = render(&HtmlInput {
        title: "t".into(),
        reports: vec![("a".into(), &report)],
        comparison: Some(&cmp),
        sides: None,
        trends: &[],
    });
    let doc = parse(&html);
    assert_eq!(doc.all(&|e| e.name == "svg" && e.has_class("cmp")).len(), 2, "u/other and t/b");
    let key = doc.all(&|e| e.has_class("verdict-key"));
    assert_eq!(key.len(), 1);
    for v in ["regressed", "improved", "inconclusive", "unchanged"] {
        assert!(key[0].all_text().contains(v), "{v}");
    }
    let row = doc.all(&|e| e.name == "tr" && e.all_text().contains("x=flat"))[0];
    let cells: Vec<String> = row.named("td").iter().map(|td| td.all_text()).collect();
    assert_eq!(cells[7], "1.00 MiB → 3.00 MiB (regressed)");
    assert_eq!(cells[8], "2 → 5");
    // The summary counts the verdicts.
    let summary = doc.all(&|e| e.attr("id") == Some("summary"))[0].all_text();
    assert!(summary.contains("1 regressed") && summary.contains("2 inconclusive"), "{summary}");
}

/// A sustained-load case's windows and a throttling case's simulated
/// deciles are drawn in their own section, linked from the navigation, as
/// well-formed SVG, the simulated ones titled so.
#[test]
fn figures_over_time_get_their_section() {
    let mut report = fixture();
    assert!(!page(vec![("a.json".into(), &report)], &[]).contains("id=\"overtime\""));
    let c = &mut report.cases[0];
    c.metrics = (0..6)
        .map(|i| crate::workload::Metric::new(format!("window_{i}_flops_per_s"), 1e9, "FLOP/s"))
        .collect();
    for q in 1..=10 {
        c.metrics.push(crate::workload::Metric::new(format!("simulated_temp_c_at_{}pct", q * 10), 30.0, "C"));
    }
    let html = page(vec![("a.json".into(), &report)], &[]);
    let doc = parse(&html);
    assert!(html.contains("href=\"#overtime\""));
    let figs = doc.all(&|e| e.name == "figure" && e.has_class("overtime"));
    assert_eq!(figs.len(), 1);
    let charts = figs[0].named("svg");
    assert_eq!(charts.len(), 2, "windows and modelled temperature");
    assert!(charts[1].attr("aria-label").unwrap().contains("simulated"));
}
