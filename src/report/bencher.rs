//! The libtest bencher format, as parsed by github-action-benchmark's
//! `cargo` tool:
//!
//! ```text
//! test tensor/matmul/shape=256x256x256,threads=1 ... bench:     107,546 ns/iter (+/- 460)
//! test tensor/layernorm/rows=4096 ... FAILED
//! ```
//!
//! The figure is the median time per iteration rounded to whole
//! nanoseconds (so sub-nanosecond cases show 0 or 1); the `+/-` is half the
//! width of the median's confidence interval, `(upper - lower) / 2`, rounded.
//! Whitespace in ids becomes `_` so the name is one word. Failed cases are
//! kept as `test <id> ... FAILED` lines (which the parser skips), and a case
//! that is ok but has no estimates as `test <id> ... ignored`.

use crate::results::RunReport;
use crate::units::thousands;
use std::fmt::Write as _;

/// `id` with every whitespace character replaced by `_`.
pub fn bench_name(id: &str) -> String {
    id.chars().map(|c| if c.is_whitespace() { '_' } else { c }).collect()
}

/// Whole nanoseconds, never negative.
fn whole_ns(x: f64) -> u64 {
    if x.is_finite() && x > 0.0 { x.round() as u64 } else { 0 }
}

/// One line per case.
pub fn render(report: &RunReport) -> String {
    let mut out = String::new();
    for case in &report.cases {
        let name = bench_name(&case.id);
        match (&case.estimates, case.status.is_failed()) {
            (_, true) => {
                let _ = writeln!(out, "test {name} ... FAILED");
            }
            (None, false) => {
                let _ = writeln!(out, "test {name} ... ignored");
            }
            (Some(e), false) => {
                let m = &e.median;
                let _ = writeln!(
                    out,
                    "test {name} ... bench: {:>11} ns/iter (+/- {})",
                    thousands(whole_ns(m.point)),
                    thousands(whole_ns((m.upper - m.lower) / 2.0)),
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex::Regex;

    #[test]
    fn bencher_lines_match_the_libtest_format() {
        let report = super::super::fixture();
        let text = render(&report);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        let re = Regex::new(r"^test (\S+) \.\.\. bench:\s+([\d,]+) ns/iter \(\+/- ([\d,]+)\)$").unwrap();

        let c = re.captures(lines[0]).expect(lines[0]);
        assert_eq!(&c[1], "tensor/matmul/shape=256x256x256,threads=1");
        assert_eq!(&c[2], "107,546");
        assert_eq!(&c[3], "460");
        assert_eq!(
            lines[0],
            "test tensor/matmul/shape=256x256x256,threads=1 ... bench:     107,546 ns/iter (+/- 460)"
        );

        let c = re.captures(lines[1]).expect(lines[1]);
        assert_eq!(&c[1], "tensor/softmax/note=say_\"hi\",rows=1024");
        assert_eq!(&c[2], "229,615");
        assert_eq!(&c[3], "1,900");

        assert!(!re.is_match(lines[2]));
        assert_eq!(lines[2], "test tensor/layernorm/rows=4096 ... FAILED");
    }

    #[test]
    fn big_and_tiny_medians() {
        let mut report = super::super::fixture();
        report.cases.truncate(1);
        let e = report.cases[0].estimates.as_mut().unwrap();
        e.median.point = 1_234_567_890.4;
        e.median.lower = 1_234_000_000.0;
        e.median.upper = 1_236_000_000.0;
        assert!(render(&report).contains("bench: 1,234,567,890 ns/iter (+/- 1,000,000)"));
        let e = report.cases[0].estimates.as_mut().unwrap();
        e.median.point = 0.4;
        e.median.lower = 0.39;
        e.median.upper = 0.42;
        assert!(render(&report).ends_with("bench:           0 ns/iter (+/- 0)\n"));
    }
}
