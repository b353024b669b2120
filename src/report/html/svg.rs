//! SVG primitives shared by the charts: escaping, compact numbers, a linear
//! scale, "nice" ticks labelled in human units, axes and the `<svg>` element.
//!
//! Every chart is inline SVG with a `viewBox` and no fixed size, so the page's
//! CSS makes it as wide as its container; coordinates below are viewBox units
//! (about CSS pixels at the designed width).

use std::fmt::{self, Write as _};

/// The SVG namespace: the only URL the page contains. Inline SVG in HTML does
/// not need it, but with it every `<svg>` fragment is a valid SVG file.
pub(crate) const SVG_NS: &str = "http://www.w3.org/2000/svg";

/// Font size of tick and bar labels, in viewBox units.
pub(crate) const FONT: f64 = 11.0;

/// Approximate advance of one character at [`FONT`], to size label columns
/// (no font metrics without a browser; this errs on the wide side).
pub(crate) const CHAR_W: f64 = 7.0;

/// Text escaped for HTML and XML alike (`&`, `<`, `>`, `"`, `'`), with the
/// control characters XML 1.0 forbids replaced, so the page stays well-formed
/// whatever a note or failure reason holds.
pub(crate) struct Esc<'a>(pub &'a str);

impl fmt::Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for ch in self.0.chars() {
            match ch {
                '&' => f.write_str("&amp;")?,
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '"' => f.write_str("&quot;")?,
                '\'' => f.write_str("&#39;")?,
                '\t' | '\n' | '\r' => f.write_char(ch)?,
                c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => f.write_char('\u{FFFD}')?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// A coordinate with one decimal: precise enough for the eye at any zoom a
/// report is read at, and it keeps thousands of sample dots small. Non-finite
/// values print as 0 so a bad number can never make the markup invalid.
#[derive(Clone, Copy)]
pub(crate) struct N(pub f64);

impl fmt::Display for N {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = if self.0.is_finite() { (self.0 * 10.0).round() / 10.0 } else { 0.0 };
        // `+ 0.0` turns -0.0 into 0.0, so "-0" never appears.
        let v = v + 0.0;
        if v.fract() == 0.0 { write!(f, "{v:.0}") } else { write!(f, "{v:.1}") }
    }
}

/// Maps the data interval `d0..d1` linearly onto the viewBox interval `r0..r1`
/// (`r0 > r1` for a y axis, whose pixels grow downwards).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LinearScale {
    /// Data value drawn at `r0`.
    pub d0: f64,
    /// Data value drawn at `r1`.
    pub d1: f64,
    /// Coordinate of `d0`.
    pub r0: f64,
    /// Coordinate of `d1`.
    pub r1: f64,
}

impl LinearScale {
    /// A scale over `domain`; an empty or non-finite domain is widened (by 1%
    /// of its value, or to 0..1) so the mapping stays finite.
    pub fn new(domain: (f64, f64), range: (f64, f64)) -> Self {
        let (mut d0, mut d1) = domain;
        if !d0.is_finite() || !d1.is_finite() {
            (d0, d1) = (0.0, 1.0);
        }
        if d1 <= d0 {
            let pad = if d0 == 0.0 { 1.0 } else { d0.abs() * 0.01 };
            (d0, d1) = (d0 - pad, d0 + pad);
        }
        LinearScale { d0, d1, r0: range.0, r1: range.1 }
    }

    /// Coordinate of the data value `v`.
    pub fn map(&self, v: f64) -> f64 {
        self.r0 + (v - self.d0) / (self.d1 - self.d0) * (self.r1 - self.r0)
    }

    /// A round step (1, 2 or 5 times a power of ten) giving about `target`
    /// intervals over the domain, and the multiples of it inside the domain.
    pub fn ticks(&self, target: usize) -> (f64, Vec<f64>) {
        let step = nice_step((self.d1 - self.d0) / target.max(1) as f64);
        let first = (self.d0 / step).ceil() as i64;
        let last = (self.d1 / step).floor() as i64;
        // The range is bounded by construction, the cap is a guard against a
        // pathological domain producing a huge loop.
        let ticks = (first..=last).take(64).map(|k| k as f64 * step).collect();
        (step, ticks)
    }
}

/// The smallest of 1, 2, 5, 10 times a power of ten that is about `raw`.
pub(crate) fn nice_step(raw: f64) -> f64 {
    if !raw.is_finite() || raw <= 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm < 1.5 {
        1.0
    } else if norm < 3.0 {
        2.0
    } else if norm < 7.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// `lo..hi` widened by `frac` of its span on both sides (for axes that
/// should not put the extreme data on the frame).
pub(crate) fn padded(lo: f64, hi: f64, frac: f64) -> (f64, f64) {
    let span = if hi > lo { hi - lo } else { lo.abs().max(1.0) * 0.02 };
    (lo - span * frac, hi + span * frac)
}

const TIME_STEPS: [(f64, &str); 4] = [(1.0, "ns"), (1e3, "µs"), (1e6, "ms"), (1e9, "s")];
const SI_STEPS: [(f64, &str); 5] = [(1.0, ""), (1e3, "K"), (1e6, "M"), (1e9, "G"), (1e12, "T")];

/// How tick values are labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Units {
    /// Nanoseconds, shown as ns, µs, ms or s.
    Time,
    /// A rate with a decimal prefix glued to the given unit (`GFLOP/s`).
    Rate(&'static str),
    /// A signed percentage (`+5%`).
    Percent,
}

/// Labels for `ticks` (multiples of `step`), all in one unit chosen from the
/// largest tick, with as many decimals as the step needs so neighbouring
/// labels never read the same (`107.2 µs`, `107.4 µs`).
pub(crate) fn tick_labels(ticks: &[f64], step: f64, units: Units) -> Vec<String> {
    let max = ticks.iter().fold(0f64, |m, t| m.max(t.abs()));
    let (div, prefix, suffix) = match units {
        Units::Time => {
            let (div, unit) = pick(max, &TIME_STEPS);
            (div, "", unit)
        }
        Units::Rate(unit) => {
            let (div, prefix) = pick(max, &SI_STEPS);
            (div, prefix, unit)
        }
        Units::Percent => (1.0, "", "%"),
    };
    // The small epsilon keeps log10(0.1) = -0.99999... from asking for 2 decimals.
    let decimals = (-(step / div).log10() - 1e-9).ceil().clamp(0.0, 6.0) as usize;
    let space = if matches!(units, Units::Percent) { "" } else { " " };
    ticks
        .iter()
        .map(|&t| {
            let v = t / div + 0.0;
            let sign = if matches!(units, Units::Percent) && v > 0.0 { "+" } else { "" };
            format!("{sign}{v:.decimals$}{space}{prefix}{suffix}")
        })
        .collect()
}

fn pick(value: f64, steps: &[(f64, &'static str)]) -> (f64, &'static str) {
    let mut chosen = steps[0];
    for &step in steps {
        if value >= step.0 {
            chosen = step;
        }
    }
    chosen
}

/// Opens an `<svg>` of `w` x `h` viewBox units with an accessible name; the
/// caller closes it with `</svg>`.
pub(crate) fn open(out: &mut String, class: &str, w: f64, h: f64, label: &str) {
    open_sized(out, class, w, h, label, None);
}

/// [`open`], drawn at most `max_px` CSS pixels wide: a small chart in a wide
/// cell would otherwise be scaled up to the cell's width (a one-column
/// distribution plot 1,300 px tall).
pub(crate) fn open_sized(out: &mut String, class: &str, w: f64, h: f64, label: &str, max_px: Option<f64>) {
    let style = max_px.map_or(String::new(), |m| format!(" style=\"max-width:{}px\"", N(m)));
    let _ = write!(
        out,
        "<svg xmlns=\"{SVG_NS}\" class=\"{class}\"{style} viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{}\">\
         <title>{}</title>",
        N(w),
        N(h),
        Esc(label),
        Esc(label),
    );
}

/// Horizontal grid lines with labels left of `x0` for a vertical value axis.
pub(crate) fn y_axis(out: &mut String, y: &LinearScale, x0: f64, x1: f64, units: Units) {
    let (step, ticks) = y.ticks(5);
    let labels = tick_labels(&ticks, step, units);
    out.push_str("<g class=\"axis\">");
    for (t, label) in ticks.iter().zip(&labels) {
        let py = N(y.map(*t));
        let _ = write!(
            out,
            "<line x1=\"{}\" y1=\"{py}\" x2=\"{}\" y2=\"{py}\"/>\
             <text x=\"{}\" y=\"{py}\" dy=\"0.32em\" text-anchor=\"end\">{}</text>",
            N(x0),
            N(x1),
            N(x0 - 4.0),
            Esc(label),
        );
    }
    out.push_str("</g>");
}

/// The ticks of a horizontal value axis with their labels: as many (up to
/// about 6) as leave room between the labels, which are long with a unit
/// (`250 GFLOP/s`).
fn x_ticks(x: &LinearScale, units: Units) -> Vec<(f64, String)> {
    let width = (x.r1 - x.r0).abs();
    let fits = |labels: &[String]| {
        let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
        labels.len() as f64 * (longest as f64 * CHAR_W + 10.0) <= width
    };
    let (mut step, mut ticks) = x.ticks(6);
    let mut labels = tick_labels(&ticks, step, units);
    for target in (1..6).rev() {
        if fits(&labels) {
            break;
        }
        (step, ticks) = x.ticks(target);
        labels = tick_labels(&ticks, step, units);
    }
    ticks.into_iter().zip(labels).collect()
}

/// Vertical grid lines from `y0` to `y1` with labels under `y1` for a
/// horizontal value axis.
pub(crate) fn x_axis(out: &mut String, x: &LinearScale, y0: f64, y1: f64, units: Units) {
    out.push_str("<g class=\"axis\">");
    for (t, label) in x_ticks(x, units) {
        let px = N(x.map(t));
        let _ = write!(
            out,
            "<line x1=\"{px}\" y1=\"{}\" x2=\"{px}\" y2=\"{}\"/>\
             <text x=\"{px}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            N(y0),
            N(y1),
            N(y1 + FONT + 3.0),
            Esc(&label),
        );
    }
    out.push_str("</g>");
}

/// The tick labels of [`x_axis`] alone, with their baseline at `y`: the axis
/// repeated above a long chart, so it is read where the chart starts.
pub(crate) fn x_axis_labels(out: &mut String, x: &LinearScale, y: f64, units: Units) {
    out.push_str("<g class=\"axis\">");
    for (t, label) in x_ticks(x, units) {
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            N(x.map(t)),
            N(y),
            Esc(&label)
        );
    }
    out.push_str("</g>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_forbidden_controls() {
        assert_eq!(Esc("a<b>&\"c'\u{1}").to_string(), "a&lt;b&gt;&amp;&quot;c&#39;\u{FFFD}");
    }

    #[test]
    fn numbers_are_compact_and_finite() {
        assert_eq!(N(1.25).to_string(), "1.3");
        assert_eq!(N(3.0).to_string(), "3");
        assert_eq!(N(-0.01).to_string(), "0");
        assert_eq!(N(f64::NAN).to_string(), "0");
    }

    #[test]
    fn scales_map_both_ways_and_survive_empty_domains() {
        let y = LinearScale::new((100.0, 200.0), (210.0, 10.0));
        assert_eq!(y.map(100.0), 210.0);
        assert_eq!(y.map(150.0), 110.0);
        let flat = LinearScale::new((5.0, 5.0), (0.0, 10.0));
        assert!((flat.map(5.0) - 5.0).abs() < 1e-9);
    }

    #[test]
    fn ticks_are_round_and_labels_distinct() {
        assert_eq!(nice_step(0.23), 0.2);
        assert_eq!(nice_step(4.0), 5.0);
        let y = LinearScale::new((107_100.0, 108_020.0), (0.0, 1.0));
        let (step, ticks) = y.ticks(5);
        assert_eq!(step, 200.0);
        let labels = tick_labels(&ticks, step, Units::Time);
        assert_eq!(labels[0], "107.2 µs");
        assert_eq!(tick_labels(&[0.0, 1e11, 2e11], 1e11, Units::Rate("FLOP/s"))[2], "200 GFLOP/s");
        assert_eq!(tick_labels(&[-5.0, 0.0, 5.0], 5.0, Units::Percent), ["-5%", "0%", "+5%"]);
    }
}
