//! The cache-aware roofline chart (Ilic, Pratas and Sousa, IEEE CAL 2014)
//! and the thread-scaling table, per results file with a probe.
//!
//! The roofline is log-log: arithmetic intensity (FLOP/byte) across,
//! FLOP/s up; each memory level's bandwidth is a slanted roof meeting the
//! flat FMA roof, and every case that declares FLOPs and bytes is a dot at
//! its intensity and rate. A case that declares only bytes has no
//! intensity, so it goes on the second chart, the bandwidth staircase:
//! working set across, B/s up, each level's bandwidth a step as wide as
//! the level. A case declaring neither is listed under the charts, since
//! no roof speaks of it. Dots above [`crate::results::SUSPECT_PCT`] of
//! their roof are drawn hollow and red: a measurement problem.

use super::svg::{self, Esc, N};
use crate::probe::MachineLimits;
use crate::results::{CaseResult, RunReport};
use crate::suites::ThroughputKind;
use crate::units;
use std::fmt::Write as _;

const W: f64 = 760.0;
const H: f64 = 380.0;
const LEFT: f64 = 84.0;
const RIGHT: f64 = 120.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 40.0;

/// A log10 scale from a domain of positive values to a pixel range.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogScale {
    lo: f64,
    hi: f64,
    r0: f64,
    r1: f64,
}

impl LogScale {
    /// Whole decades around `[lo, hi]` (both positive).
    pub fn new(lo: f64, hi: f64, r0: f64, r1: f64) -> Self {
        let lo = 10f64.powf(lo.max(1e-30).log10().floor());
        let hi = 10f64.powf(hi.max(lo * 10.0).log10().ceil());
        Self { lo, hi, r0, r1 }
    }

    /// Pixel position of `v`, clamped into the range.
    pub fn map(&self, v: f64) -> f64 {
        let t = (v.max(self.lo).min(self.hi).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10());
        self.r0 + t * (self.r1 - self.r0)
    }

    /// One tick per decade.
    pub fn decades(&self) -> Vec<f64> {
        let (a, b) = (self.lo.log10().round() as i32, self.hi.log10().round() as i32);
        (a..=b).map(|e| 10f64.powi(e)).collect()
    }
}

/// One dot: its label, position and whether it is suspect.
struct Dot<'a> {
    id: &'a str,
    x: f64,
    y: f64,
    roof: String,
    pct: Option<f64>,
    suspect: bool,
}

fn rate(case: &CaseResult, kind: ThroughputKind) -> Option<(f64, f64)> {
    let t = case.throughput.iter().find(|t| t.kind == kind)?;
    (t.rate.point.is_finite() && t.rate.point > 0.0).then_some((t.per_iteration, t.rate.point))
}

/// The section: one roofline and one staircase per results file with a
/// probe that measured its levels, then the scaling tables.
pub(crate) fn section(out: &mut String, reports: &[(String, &RunReport)]) {
    out.push_str("<section id=\"roofline\"><h2>Roofline</h2>");
    let mut drawn = false;
    for (label, report) in reports {
        let Some(limits) = report.machine_limits.as_ref().filter(|l| !l.levels.is_empty()) else { continue };
        drawn = true;
        if reports.len() > 1 {
            let _ = write!(out, "<h3>{}</h3>", Esc(label));
        }
        let measured: Vec<&CaseResult> =
            report.cases.iter().filter(|c| c.roof.is_some() && !c.status.is_failed()).collect();
        let mut compute = Vec::new();
        let mut memory = Vec::new();
        let mut unplaced = Vec::new();
        for c in &measured {
            let roof = c.roof.as_ref().expect("filtered on roof");
            let dot = |x: f64, y: f64| Dot {
                id: c.id.as_str(),
                x,
                y,
                roof: roof.name.clone(),
                pct: roof.pct,
                suspect: roof.suspect,
            };
            match (rate(c, ThroughputKind::Flops), rate(c, ThroughputKind::Bytes)) {
                (Some((f, fr)), Some((b, _))) => compute.push(dot(f / b, fr)),
                (_, Some((_, br))) => memory.push(dot(roof.working_set_bytes.unwrap_or(0.0), br)),
                _ => unplaced.push(c.id.as_str()),
            }
        }
        let _ = write!(
            out,
            "<p class=\"muted\">Roofs measured by the probe on {} thread(s) ({}); each case's own roof, at its \
             threads, is named in the results table. Hollow red dots are above 105% of their roof: a measurement \
             problem, not a result.</p>",
            limits.threads,
            Esc(&limits.measured_at)
        );
        out.push_str("<figure><figcaption><b>FLOP/s against arithmetic intensity</b></figcaption>");
        intensity_chart(out, limits, &compute);
        out.push_str("</figure><figure><figcaption><b>Bandwidth against working set</b></figcaption>");
        staircase_chart(out, limits, &memory);
        out.push_str("</figure>");
        if !unplaced.is_empty() {
            let _ = write!(
                out,
                "<p class=\"muted\">Not placed (they declare neither FLOPs nor bytes): {}</p>",
                Esc(&unplaced.join(", "))
            );
        }
    }
    if !drawn {
        out.push_str(
            "<p class=\"muted\">No probe with per-level bandwidths in these results (tfbench sysinfo --probe).</p>",
        );
    }
    scaling_table(out, reports);
    out.push_str("</section>");
}

fn dots(out: &mut String, x: &LogScale, y: &LogScale, dots: &[Dot]) {
    out.push_str("<g class=\"dots\">");
    for d in dots.iter().filter(|d| d.x > 0.0 && d.y > 0.0) {
        let pct = d.pct.map_or(String::new(), |p| format!(", {} of {}", units::format_percent(p), d.roof));
        let style = if d.suspect {
            "fill=\"none\" stroke=\"#c62828\""
        } else {
            "fill=\"#0072b2\" fill-opacity=\"0.7\""
        };
        let _ = write!(
            out,
            "<circle cx=\"{}\" cy=\"{}\" r=\"4\" {style}><title>{}{}</title></circle>",
            N(x.map(d.x)),
            N(y.map(d.y)),
            Esc(d.id),
            Esc(&pct)
        );
    }
    out.push_str("</g>");
}

fn axes(
    out: &mut String,
    x: &LogScale,
    y: &LogScale,
    xl: impl Fn(f64) -> String,
    yl: impl Fn(f64) -> String,
) {
    out.push_str("<g class=\"axis\">");
    for t in x.decades() {
        let px = N(x.map(t));
        let _ = write!(
            out,
            "<line x1=\"{px}\" y1=\"{}\" x2=\"{px}\" y2=\"{}\"/><text x=\"{px}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            N(TOP),
            N(H - BOTTOM),
            N(H - BOTTOM + 14.0),
            Esc(&xl(t))
        );
    }
    for t in y.decades() {
        let py = N(y.map(t));
        let _ = write!(
            out,
            "<line x1=\"{}\" y1=\"{py}\" x2=\"{}\" y2=\"{py}\"/><text x=\"{}\" y=\"{py}\" dy=\"0.32em\" text-anchor=\"end\">{}</text>",
            N(LEFT),
            N(W - RIGHT),
            N(LEFT - 4.0),
            Esc(&yl(t))
        );
    }
    out.push_str("</g>");
}

/// The roofline proper: slanted level roofs under the flat FMA roof.
fn intensity_chart(out: &mut String, l: &MachineLimits, pts: &[Dot]) {
    let peak = l.peak_flops_all_cores;
    let bws: Vec<(&str, f64)> = l.levels.iter().map(|v| (v.level.as_str(), v.best_all_threads())).collect();
    let min_bw = bws.iter().map(|b| b.1).fold(f64::INFINITY, f64::min);
    let max_bw = bws.iter().map(|b| b.1).fold(0.0, f64::max);
    let (mut ai_lo, mut ai_hi) = (peak / max_bw / 100.0, peak / min_bw * 10.0);
    let (mut y_lo, y_hi) = (min_bw * ai_lo, peak * 2.0);
    for d in pts.iter().filter(|d| d.x > 0.0 && d.y > 0.0) {
        (ai_lo, ai_hi, y_lo) = (ai_lo.min(d.x), ai_hi.max(d.x), y_lo.min(d.y));
    }
    let x = LogScale::new(ai_lo, ai_hi, LEFT, W - RIGHT);
    let y = LogScale::new(y_lo, y_hi, H - BOTTOM, TOP);
    svg::open(out, "roofline", W, H, "cache-aware roofline: FLOP/s against FLOP per byte");
    axes(out, &x, &y, units::sig3, |t| units::format_rate(t, "FLOP/s"));
    for (name, bw) in &bws {
        // The slanted roof from the left edge to where it meets the FMA roof.
        let (x0, x1) = (x.lo, (peak / bw).min(x.hi));
        let _ = write!(
            out,
            "<polyline class=\"roof\" fill=\"none\" stroke=\"#555\" points=\"{},{} {},{}\"/>\
             <text x=\"{}\" y=\"{}\" dy=\"-3\" class=\"muted\">{} {}</text>",
            N(x.map(x0)),
            N(y.map(x0 * bw)),
            N(x.map(x1)),
            N(y.map(x1 * bw)),
            N(x.map(x0) + 4.0),
            N(y.map(x0 * bw)),
            Esc(name),
            Esc(&units::format_rate(*bw, "B/s"))
        );
    }
    let from = x.map(peak / max_bw);
    let _ = write!(
        out,
        "<line stroke=\"#222\" stroke-width=\"1.5\" x1=\"{}\" y1=\"{py}\" x2=\"{}\" y2=\"{py}\"/>\
         <text x=\"{}\" y=\"{py}\" dy=\"0.32em\">FMA {}</text>",
        N(from),
        N(W - RIGHT),
        N(W - RIGHT + 4.0),
        Esc(&units::format_rate(peak, "FLOP/s")),
        py = N(y.map(peak)),
    );
    dots(out, &x, &y, pts);
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"muted\">FLOP per byte</text></svg>",
        N((LEFT + W - RIGHT) / 2.0),
        N(H - 6.0)
    );
}

/// The bandwidth staircase: each level's bandwidth as wide as the level.
fn staircase_chart(out: &mut String, l: &MachineLimits, pts: &[Dot]) {
    let threads = l.threads;
    let caps: Vec<(&str, f64, f64)> = l
        .levels
        .iter()
        .map(|v| {
            (
                v.level.as_str(),
                v.capacity_for(threads).map_or(f64::INFINITY, |c| c as f64),
                v.best_all_threads(),
            )
        })
        .collect();
    let finite_max = caps.iter().map(|c| c.1).filter(|c| c.is_finite()).fold(1.0, f64::max);
    let (mut x_lo, mut x_hi) = (caps.first().map_or(1024.0, |c| c.1 / 16.0), finite_max * 64.0);
    let (mut y_lo, mut y_hi) = (f64::INFINITY, 0.0f64);
    for c in &caps {
        (y_lo, y_hi) = (y_lo.min(c.2), y_hi.max(c.2));
    }
    for d in pts.iter().filter(|d| d.x > 0.0 && d.y > 0.0) {
        (x_lo, x_hi, y_lo, y_hi) = (x_lo.min(d.x), x_hi.max(d.x), y_lo.min(d.y), y_hi.max(d.y));
    }
    let x = LogScale::new(x_lo, x_hi, LEFT, W - RIGHT);
    let y = LogScale::new(y_lo / 2.0, y_hi * 2.0, H - BOTTOM, TOP);
    svg::open(out, "roofline", W, H, "bandwidth per memory level against working set");
    axes(out, &x, &y, units::format_bytes, |t| units::format_rate(t, "B/s"));
    let mut start = x.lo;
    for (name, cap, bw) in &caps {
        let end = cap.min(x.hi);
        let py = N(y.map(*bw));
        let _ = write!(
            out,
            "<line stroke=\"#555\" x1=\"{}\" y1=\"{py}\" x2=\"{}\" y2=\"{py}\"/>\
             <text x=\"{}\" y=\"{py}\" dy=\"-3\" class=\"muted\">{} {}</text>",
            N(x.map(start)),
            N(x.map(end)),
            N(x.map(start) + 4.0),
            Esc(name),
            Esc(&units::format_rate(*bw, "B/s"))
        );
        start = end;
    }
    dots(out, &x, &y, pts);
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"muted\">working set (on {threads} thread(s))</text></svg>",
        N((LEFT + W - RIGHT) / 2.0),
        N(H - 6.0)
    );
}

/// Speed-up, efficiency and the USL fit of every thread sweep.
fn scaling_table(out: &mut String, reports: &[(String, &RunReport)]) {
    let swept: Vec<(&str, &CaseResult)> = reports
        .iter()
        .flat_map(|(label, r)| {
            r.cases.iter().filter(|c| c.scaling.is_some()).map(move |c| (label.as_str(), c))
        })
        .collect();
    if swept.is_empty() {
        return;
    }
    out.push_str(
        "<h3 id=\"scaling\">Thread scaling</h3><div class=\"scroll\"><table class=\"side\"><tr><th>sweep</th>\
         <th>threads</th><th>speed-up</th><th>efficiency</th><th>USL fit</th></tr>",
    );
    for (label, c) in swept {
        let p = c.scaling.as_ref().expect("filtered on scaling");
        let fit = p.fit.map_or("-".to_string(), |f| {
            let peak = f.peak_threads.map_or("never peaks".to_string(), |n| format!("peaks at {:.1}x", n));
            let law = if f.kappa == 0.0 { "Amdahl, " } else { "" };
            format!("{law}σ {:.4}, κ {:.5}, R² {:.3}, {peak}", f.sigma, f.kappa, f.r_squared)
        });
        let group = if reports.len() > 1 { format!("{label}: {}", p.group) } else { p.group.clone() };
        let _ = write!(
            out,
            "<tr><td class=\"id\">{}</td><td class=\"num\">{}</td><td class=\"num\">{:.2}x</td>\
             <td class=\"num\">{}</td><td>{}</td></tr>",
            Esc(&group),
            p.threads,
            p.speedup,
            Esc(&units::format_percent(p.efficiency * 100.0)),
            Esc(&fit)
        );
    }
    out.push_str("</table></div>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_scale_spans_whole_decades_and_clamps() {
        let s = LogScale::new(3.0, 250.0, 0.0, 300.0);
        assert_eq!(s.decades(), vec![1.0, 10.0, 100.0, 1000.0]);
        assert_eq!(s.map(1.0), 0.0);
        assert_eq!(s.map(1000.0), 300.0);
        assert!((s.map(10.0) - 100.0).abs() < 1e-9);
        assert_eq!(s.map(1e9), 300.0, "clamped");
    }

    #[test]
    fn every_case_with_a_roof_is_placed_or_listed() {
        let mut report = crate::report::fixture();
        let limits = report.machine_limits.as_mut().expect("fixture has limits");
        let level = |name: &str, cap: Option<u64>, per_core: bool, bw: f64| crate::probe::LevelBandwidth {
            level: name.into(),
            capacity_bytes: cap,
            per_core,
            capacity_source: "sysfs".into(),
            working_set_bytes: 0,
            read_one_thread: bw / 2.0,
            copy_one_thread: bw / 2.0,
            triad_one_thread: bw / 2.0,
            read_all_threads: bw,
            copy_all_threads: bw,
            triad_all_threads: bw,
        };
        limits.levels = vec![level("L1", Some(48 << 10), true, 200e9), level("DRAM", None, false, 20e9)];
        let l = limits.clone();
        for c in report.cases.iter_mut() {
            let work = crate::analysis::roofline::Work::of(
                &c.throughput
                    .iter()
                    .map(|t| crate::workload::Throughput { kind: t.kind, per_iteration: t.per_iteration })
                    .collect::<Vec<_>>(),
                &c.metrics,
            );
            c.roof = crate::analysis::roofline::cpu_roof(&l, 2, &work).map(|mut roof| {
                roof.pct = Some(250.0);
                roof.suspect = true;
                roof
            });
        }
        let mut out = String::new();
        section(&mut out, &[("a.json".into(), &report)]);
        assert!(out.contains("FMA "), "{out}");
        assert!(out.contains("L1 ") && out.contains("DRAM "), "{out}");
        assert!(out.contains("stroke=\"#c62828\""), "suspect dots are hollow red: {out}");
        assert!(out.contains(&Esc(&report.cases[0].id).to_string()), "the GEMM is placed");
    }
}
