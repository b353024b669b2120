//! Human formatting of times, rates, byte counts and counts.
//!
//! Every figure is shown with three significant digits (`1.23 µs`,
//! `27.4 GB/s`, `312 GFLOP/s`); rates use decimal SI prefixes (K, M, G, T,
//! so bytes per second are decimal GB/s), sizes use binary ones (KiB, MiB,
//! GiB, TiB). Non-finite values print as `n/a`.

use crate::results::Estimate;

/// Text shown for a value that is NaN or infinite.
pub const NOT_AVAILABLE: &str = "n/a";

/// Rounds `x` to `digits` significant digits (0 and non-finite values unchanged).
pub fn round_sig(x: f64, digits: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let magnitude = x.abs().log10().floor() as i32;
    let p = digits - 1 - magnitude;
    // Scale by an exact power of ten in the direction that keeps integers exact.
    if p >= 0 {
        let f = 10f64.powi(p);
        (x * f).round() / f
    } else {
        let f = 10f64.powi(-p);
        (x / f).round() * f
    }
}

/// `x` with three significant digits and no exponent: `1.23`, `12.3`, `123`,
/// `0.00123`. Values of 1000 and above print as whole numbers (`1234`), which
/// only happens once a unit has run out of larger prefixes.
pub fn sig3(x: f64) -> String {
    if !x.is_finite() {
        return NOT_AVAILABLE.to_string();
    }
    if x.abs() >= 999.5 {
        return format!("{x:.0}");
    }
    let r = round_sig(x, 3);
    if r == 0.0 {
        return "0".to_string();
    }
    let magnitude = r.abs().log10().floor() as i32;
    let decimals = (2 - magnitude).max(0) as usize;
    format!("{r:.decimals$}")
}

/// Picks the scale of `value` among `steps` (divisor, prefix), in increasing
/// order, from the value rounded to three significant digits so that 999.7 ns
/// becomes `1.00 µs` rather than `1000 ns`.
fn pick_scale(value: f64, steps: &[(f64, &'static str)]) -> (f64, &'static str) {
    let r = round_sig(value.abs(), 3);
    let mut chosen = steps[0];
    for &step in steps {
        if r >= step.0 {
            chosen = step;
        }
    }
    chosen
}

const TIME_STEPS: [(f64, &str); 4] = [(1.0, "ns"), (1e3, "µs"), (1e6, "ms"), (1e9, "s")];
const SI_STEPS: [(f64, &str); 5] = [(1.0, ""), (1e3, "K"), (1e6, "M"), (1e9, "G"), (1e12, "T")];
const BINARY_STEPS: [(f64, &str); 5] = [
    (1.0, "B"),
    (1024.0, "KiB"),
    (1024.0 * 1024.0, "MiB"),
    (1024.0 * 1024.0 * 1024.0, "GiB"),
    (1024.0 * 1024.0 * 1024.0 * 1024.0, "TiB"),
];

/// The display unit for a duration: `(nanoseconds per unit, unit name)`.
pub fn time_unit(ns: f64) -> (f64, &'static str) {
    pick_scale(ns, &TIME_STEPS)
}

/// A duration given in nanoseconds: `1.23 µs`, `312 ns`, `4.56 s`.
pub fn format_time_ns(ns: f64) -> String {
    if !ns.is_finite() {
        return NOT_AVAILABLE.to_string();
    }
    let (div, unit) = time_unit(ns);
    format!("{} {unit}", sig3(ns / div))
}

/// A time estimate with its interval, the bounds in the point's unit:
/// `1.23 ms [1.21, 1.25]`.
pub fn format_time_ci(est: &Estimate) -> String {
    if !est.point.is_finite() {
        return NOT_AVAILABLE.to_string();
    }
    let (div, unit) = time_unit(est.point);
    format!("{} {unit} [{}, {}]", sig3(est.point / div), sig3(est.lower / div), sig3(est.upper / div))
}

/// A rate or any SI quantity with a decimal prefix glued to `unit`:
/// `format_rate(3.12e11, "FLOP/s")` is `312 GFLOP/s`, `format_rate(2.74e10,
/// "B/s")` is `27.4 GB/s`. Prefixes stop at T.
pub fn format_rate(value: f64, unit: &str) -> String {
    if !value.is_finite() {
        return NOT_AVAILABLE.to_string();
    }
    let (div, prefix) = pick_scale(value, &SI_STEPS);
    format!("{} {prefix}{unit}", sig3(value / div))
}

/// A quantity whose unit is free text (as in target checks): nanoseconds as a
/// time, anything else through [`format_rate`].
pub fn format_quantity(value: f64, unit: &str) -> String {
    match unit {
        "ns" => format_time_ns(value),
        _ => format_rate(value, unit),
    }
}

/// A size in bytes with binary prefixes: `512 B`, `1.50 KiB`, `3.00 MiB`.
pub fn format_bytes(bytes: f64) -> String {
    if !bytes.is_finite() {
        return NOT_AVAILABLE.to_string();
    }
    let (div, unit) = pick_scale(bytes, &BINARY_STEPS);
    if div == 1.0 {
        // Whole bytes never need decimals.
        return format!("{bytes:.0} B");
    }
    format!("{} {unit}", sig3(bytes / div))
}

/// A count that may be fractional (allocations per iteration): whole
/// numbers as integers (`0`, `2`), others with three significant digits.
pub fn format_count(x: f64) -> String {
    if !x.is_finite() {
        return NOT_AVAILABLE.to_string();
    }
    if x == x.round() && x.abs() < 1e15 { format!("{x:.0}") } else { sig3(x) }
}

/// A percentage: whole percent from 10% up (`89%`), one decimal below (`4.5%`).
pub fn format_percent(pct: f64) -> String {
    if !pct.is_finite() {
        return NOT_AVAILABLE.to_string();
    }
    if pct.abs() >= 9.95 { format!("{pct:.0}%") } else { format!("{pct:.1}%") }
}

/// An integer with `,` between groups of three digits: `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_use_three_significant_digits() {
        assert_eq!(format_time_ns(1234.5), "1.23 µs");
        assert_eq!(format_time_ns(0.3125), "0.313 ns");
        assert_eq!(format_time_ns(12.0), "12.0 ns");
        assert_eq!(format_time_ns(999.0), "999 ns");
        assert_eq!(format_time_ns(999.7), "1.00 µs");
        assert_eq!(format_time_ns(107_546.0), "108 µs");
        assert_eq!(format_time_ns(1.5e6), "1.50 ms");
        assert_eq!(format_time_ns(4.56e9), "4.56 s");
        assert_eq!(format_time_ns(1.2346e12), "1235 s");
        assert_eq!(format_time_ns(0.0), "0 ns");
        assert_eq!(format_time_ns(f64::NAN), "n/a");
    }

    #[test]
    fn intervals_share_the_point_unit() {
        let e = Estimate { point: 1.234e6, lower: 1.2061e6, upper: 1.2549e6, level: 0.95 };
        assert_eq!(format_time_ci(&e), "1.23 ms [1.21, 1.25]");
        let e = Estimate { point: 1004.0, lower: 998.0, upper: 1012.0, level: 0.95 };
        assert_eq!(format_time_ci(&e), "1.00 µs [0.998, 1.01]");
    }

    #[test]
    fn rates_use_decimal_prefixes() {
        assert_eq!(format_rate(3.12e11, "FLOP/s"), "312 GFLOP/s");
        assert_eq!(format_rate(2.74e10, "B/s"), "27.4 GB/s");
        assert_eq!(format_rate(1.5e3, "elem/s"), "1.50 Kelem/s");
        assert_eq!(format_rate(850.0, "tokens/s"), "850 tokens/s");
        assert_eq!(format_rate(4.2e6, "items/s"), "4.20 Mitems/s");
        assert_eq!(format_rate(1.0e15, "FLOP/s"), "1000 TFLOP/s");
        assert_eq!(format_rate(999.96e9, "FLOP/s"), "1.00 TFLOP/s");
        assert_eq!(format_quantity(2.5e3, "ns"), "2.50 µs");
    }

    #[test]
    fn bytes_use_binary_prefixes() {
        assert_eq!(format_bytes(0.0), "0 B");
        assert_eq!(format_bytes(512.0), "512 B");
        assert_eq!(format_bytes(1536.0), "1.50 KiB");
        assert_eq!(format_bytes(3.0 * 1024.0 * 1024.0), "3.00 MiB");
        assert_eq!(format_bytes(10.0 * 1024.0 * 1024.0 * 1024.0), "10.0 GiB");
    }

    #[test]
    fn counts_percentages_and_thousands() {
        assert_eq!(format_count(0.0), "0");
        assert_eq!(format_count(2.0), "2");
        assert_eq!(format_count(0.015625), "0.0156");
        assert_eq!(format_percent(89.14), "89%");
        assert_eq!(format_percent(4.54), "4.5%");
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1234), "1,234");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(sig3(99.96), "100");
        assert_eq!(sig3(9.996), "10.0");
        assert_eq!(sig3(-1.234), "-1.23");
    }
}
