//! Figures over time that a case reports as metrics: the throughput per
//! window of a sustained-load run (`window_N_flops_per_s`, with the
//! stability line at 97% of the best window, 3DMark's rule), and the
//! simulated throttling run's delivered throughput and modelled temperature
//! at each tenth of the run (`simulated_*_at_Npct`), drawn and titled as
//! simulated.

use super::svg::{self, Esc, FONT, LinearScale, N, Units};
use crate::results::{CaseResult, RunReport};
use crate::workload::Metric;
use std::fmt::Write as _;

/// Geometry of one chart.
mod geo {
    /// Total width.
    pub const W: f64 = 420.0;
    /// Total height.
    pub const H: f64 = 170.0;
    /// Left margin, room for tick labels.
    pub const LEFT: f64 = 72.0;
    /// Right margin.
    pub const RIGHT: f64 = 14.0;
    /// Top of the plotting area.
    pub const TOP: f64 = 14.0;
    /// Bottom of the plotting area (x labels under it).
    pub const BOTTOM: f64 = 140.0;
}

/// One line to draw: `(x, y)` points, the y unit and what it is.
pub(crate) struct Series {
    /// Chart title (says "simulated" for modelled figures).
    pub title: String,
    /// The x axis' label.
    pub x_label: &'static str,
    /// Points in x order.
    pub points: Vec<(f64, f64)>,
    /// How y values are labelled.
    pub units: Units,
    /// A dashed horizontal reference line and its label.
    pub reference: Option<(f64, &'static str)>,
}

/// The values of metrics named `prefix{k}suffix` (k an integer), in `k` order.
fn indexed(metrics: &[Metric], prefix: &str, suffix: &str) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = metrics
        .iter()
        .filter_map(|m| {
            let k: u32 = m.name.strip_prefix(prefix)?.strip_suffix(suffix)?.parse().ok()?;
            m.value.is_finite().then_some((f64::from(k), m.value))
        })
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// The over-time series `case` reports (none for most cases).
pub(crate) fn series_of(case: &CaseResult) -> Vec<Series> {
    let mut out = Vec::new();
    let windows = indexed(&case.metrics, "window_", "_flops_per_s");
    if windows.len() >= 2 {
        let best = windows.iter().map(|p| p.1).fold(0.0, f64::max);
        out.push(Series {
            title: "Throughput per window (measured)".into(),
            x_label: "window",
            points: windows,
            units: Units::Rate("FLOP/s"),
            reference: Some((0.97 * best, "97% of best (stable above)")),
        });
    }
    let rate = indexed(&case.metrics, "simulated_flops_per_s_at_", "pct");
    let temp = indexed(&case.metrics, "simulated_temp_c_at_", "pct");
    if rate.len() >= 2 {
        out.push(Series {
            title: "Delivered throughput (simulated throttling)".into(),
            x_label: "% of the modelled run",
            points: rate,
            units: Units::Rate("FLOP/s"),
            reference: None,
        });
    }
    if temp.len() >= 2 {
        out.push(Series {
            title: "Modelled temperature, °C (simulated)".into(),
            x_label: "% of the modelled run",
            points: temp,
            units: Units::Rate(""),
            reference: None,
        });
    }
    out
}

/// One line chart of `s`; the y axis starts at zero for rates so a sag
/// reads at its true size.
pub(crate) fn chart(out: &mut String, case_id: &str, s: &Series) {
    use geo::*;
    let (lo, hi) =
        s.points.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
    let x = LinearScale::new((lo, hi), (LEFT + 6.0, W - RIGHT - 6.0));
    let top = s.points.iter().map(|p| p.1).chain(s.reference.map(|r| r.0)).fold(0.0, f64::max);
    let y = LinearScale::new((0.0, if top > 0.0 { top * 1.08 } else { 1.0 }), (BOTTOM, TOP));
    svg::open(out, "overtime", W, H, &format!("{} of {case_id}", s.title));
    svg::y_axis(out, &y, LEFT, W - RIGHT, s.units);
    svg::x_axis(out, &x, TOP, BOTTOM, Units::Rate(""));
    let _ = write!(
        out,
        "<g class=\"axis\"><text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text></g>",
        N((LEFT + W - RIGHT) / 2.0),
        N(H - 2.0),
        Esc(s.x_label)
    );
    if let Some((v, label)) = s.reference {
        let _ = write!(
            out,
            "<g class=\"cp\"><line x1=\"{}\" y1=\"{y0}\" x2=\"{}\" y2=\"{y0}\"/>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text></g>",
            N(LEFT),
            N(W - RIGHT),
            N(W - RIGHT - 2.0),
            N(y.map(v) - FONT * 0.4),
            Esc(label),
            y0 = N(y.map(v)),
        );
    }
    out.push_str("<g class=\"s0\"><polyline points=\"");
    for (i, (px, py)) in s.points.iter().enumerate() {
        let _ = write!(out, "{}{},{}", if i > 0 { " " } else { "" }, N(x.map(*px)), N(y.map(*py)));
    }
    out.push_str("\"/>");
    for (px, py) in &s.points {
        let _ = write!(
            out,
            "<circle cx=\"{}\" cy=\"{}\" r=\"2.5\"><title>{}: {}</title></circle>",
            N(x.map(*px)),
            N(y.map(*py)),
            N(*px),
            crate::units::sig3(*py),
        );
    }
    out.push_str("</g></svg>");
}

/// Whether any case of `reports` has a figure over time.
pub(crate) fn any(reports: &[(String, &RunReport)]) -> bool {
    reports.iter().any(|(_, r)| r.cases.iter().any(|c| !series_of(c).is_empty()))
}

/// The section: per results file and case, its charts side by side.
pub(crate) fn section(out: &mut String, reports: &[(String, &RunReport)]) {
    out.push_str(
        "<section id=\"overtime\"><h2>Over time</h2><p class=\"muted\">Sustained load: the throughput \
         of each window of the run, measured on this machine, with 3DMark's stability line (worst window \
         at least 97% of the best). Throttling: the delivered throughput and the temperature of the device \
         profile's thermal model at each tenth of the modelled run. The model is simulated; only the \
         rate it scales was measured.</p>",
    );
    for (label, report) in reports {
        for case in &report.cases {
            let series = series_of(case);
            if series.is_empty() {
                continue;
            }
            let _ = write!(
                out,
                "<figure class=\"overtime\" data-case=\"{}\"><figcaption>{}{}</figcaption>",
                Esc(&case.id),
                super::case_id_html(&case.id),
                if reports.len() > 1 {
                    format!(" <span class=\"muted\">({})</span>", Esc(label))
                } else {
                    String::new()
                },
            );
            for s in &series {
                chart(out, &case.id, s);
            }
            out.push_str("</figure>");
        }
    }
    out.push_str("</section>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    fn case_with(metrics: Vec<Metric>) -> CaseResult {
        let mut c = fixture().cases[0].clone();
        c.metrics = metrics;
        c
    }

    #[test]
    fn windows_and_simulated_deciles_become_ordered_series() {
        let mut m: Vec<Metric> = (0..12)
            .rev()
            .map(|i| Metric::new(format!("window_{i}_flops_per_s"), 100.0 - i as f64, "FLOP/s"))
            .collect();
        for q in 1..=10 {
            m.push(Metric::new(format!("simulated_temp_c_at_{}pct", q * 10), 25.0 + q as f64, "C"));
            m.push(Metric::new(format!("simulated_flops_per_s_at_{}pct", q * 10), 50.0, "FLOP/s"));
        }
        m.push(Metric::new("window_x_flops_per_s", 1.0, "FLOP/s"));
        let s = series_of(&case_with(m));
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].points.len(), 12, "the malformed name is ignored");
        assert_eq!((s[0].points[0], s[0].points[11]), ((0.0, 100.0), (11.0, 89.0)), "in window order");
        assert_eq!(s[0].reference.map(|r| r.0), Some(97.0));
        assert!(s[1].title.contains("simulated") && s[2].title.contains("simulated"));
        assert_eq!(s[2].points.first(), Some(&(10.0, 26.0)));
        let mut out = String::new();
        chart(&mut out, "mobile/x", &s[0]);
        assert_eq!(out.matches("<circle").count(), 12);
        assert_eq!(out.matches("<polyline").count(), 1);
        assert!(series_of(&case_with(vec![Metric::new("rmse", 1.0, "")])).is_empty());
    }

    #[test]
    fn the_points_sit_where_the_scales_put_them() {
        let s = Series {
            title: "t".into(),
            x_label: "window",
            points: vec![(0.0, 0.0), (1.0, 50.0), (2.0, 100.0)],
            units: Units::Rate("FLOP/s"),
            reference: None,
        };
        let mut out = String::new();
        chart(&mut out, "c", &s);
        let ys: Vec<f64> = out
            .split("<circle ")
            .skip(1)
            .filter_map(|c| c.split("cy=\"").nth(1)?.split('"').next()?.parse().ok())
            .collect();
        assert_eq!(ys.len(), 3);
        // y from zero: the middle point halfway between the first and the last.
        assert!(((ys[0] + ys[2]) / 2.0 - ys[1]).abs() < 0.1, "{ys:?}");
        assert!((ys[0] - geo::BOTTOM).abs() < 0.1, "zero sits on the bottom: {ys:?}");
    }
}
