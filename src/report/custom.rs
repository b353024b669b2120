//! github-action-benchmark's custom JSON (`tool: customSmallerIsBetter` /
//! `customBiggerIsBetter`): an array of entries with `name`, `unit` and
//! `value` and the optional strings `range` and `extra`
//! (<https://github.com/benchmark-action/github-action-benchmark>, the
//! `BenchmarkResult` interface of its `src/extract.ts`):
//!
//! ```json
//! [ { "name": "tensor/matmul/shape=256x256x256,threads=1", "unit": "ns",
//!     "value": 107546.0, "range": "± 460", "extra": "28 samples; 95% CI [107086, 108006] ns" } ]
//! ```
//!
//! - smaller is better: the median time per iteration in `ns`, `range` the
//!   half-width of its confidence interval;
//! - bigger is better: the headline rate (FLOP/s, B/s, ...) of each case
//!   that declares work, `range` the half-width of the rate's interval.
//!
//! Failed and skipped cases have no figures and are left out; a case with
//! no declared work is left out of the bigger-is-better file.

use crate::results::{CaseResult, Estimate, RunReport};
use serde_json::{Value, json};

/// Which of the two custom tools the file is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// `customSmallerIsBetter`: times.
    SmallerIsBetter,
    /// `customBiggerIsBetter`: rates.
    BiggerIsBetter,
}

fn entry(case: &CaseResult, e: &Estimate, unit: &str) -> Option<Value> {
    if !e.point.is_finite() {
        return None;
    }
    let half = (e.upper - e.lower) / 2.0;
    let range = if half.is_finite() { format!("± {}", sig(half)) } else { "± ?".into() };
    let samples = case.samples.len();
    let extra =
        format!("{samples} samples; {:.0}% CI [{}, {}] {unit}", e.level * 100.0, sig(e.lower), sig(e.upper));
    Some(json!({ "name": case.id, "unit": unit, "value": e.point, "range": range, "extra": extra }))
}

/// Four significant digits, plain notation for everyday magnitudes.
fn sig(x: f64) -> String {
    if x != 0.0 && (x.abs() >= 1e9 || x.abs() < 1e-3) {
        format!("{x:.3e}")
    } else {
        format!("{}", (x * 1e4).round() / 1e4)
    }
}

/// The report as one custom-tool JSON array (pretty-printed, ending with a
/// newline).
pub fn render(report: &RunReport, direction: Direction) -> anyhow::Result<String> {
    let entries: Vec<Value> = report
        .cases
        .iter()
        .filter(|c| !c.status.is_failed())
        .filter_map(|c| match direction {
            Direction::SmallerIsBetter => c.estimates.as_ref().and_then(|e| entry(c, &e.median, "ns")),
            Direction::BiggerIsBetter => {
                crate::results::primary_throughput(c).and_then(|t| entry(c, &t.rate, t.kind.rate_unit()))
            }
        })
        .collect();
    Ok(serde_json::to_string_pretty(&entries)? + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `BenchmarkResult` fields the action reads from a custom file:
    /// `name` (string), `value` (number), `unit` (string) required; `range`
    /// and `extra` (strings) optional; nothing else.
    fn check_fields(v: &Value) -> &Vec<Value> {
        let entries = v.as_array().expect("an array of entries");
        for e in entries {
            let o = e.as_object().expect("an entry is an object");
            assert!(o["name"].is_string() && o["unit"].is_string() && o["value"].is_number(), "{e}");
            for (k, x) in o {
                match k.as_str() {
                    "name" | "unit" | "range" | "extra" => assert!(x.is_string(), "{k}: {e}"),
                    "value" => {}
                    other => panic!("field `{other}` is not one of the action's: {e}"),
                }
            }
        }
        entries
    }

    #[test]
    fn smaller_is_better_holds_median_times() {
        let v: Value =
            serde_json::from_str(&render(&super::super::fixture(), Direction::SmallerIsBetter).unwrap())
                .unwrap();
        let entries = check_fields(&v);
        assert_eq!(entries.len(), 2, "the failed case is left out: {v}");
        let mm = &entries[0];
        assert_eq!(mm["name"], "tensor/matmul/shape=256x256x256,threads=1");
        assert_eq!((mm["unit"].as_str(), mm["value"].as_f64()), (Some("ns"), Some(107_546.0)));
        assert_eq!(mm["range"], "± 460");
    }

    #[test]
    fn bigger_is_better_holds_headline_rates() {
        let v: Value =
            serde_json::from_str(&render(&super::super::fixture(), Direction::BiggerIsBetter).unwrap())
                .unwrap();
        let entries = check_fields(&v);
        assert_eq!(entries.len(), 2, "{v}");
        assert_eq!(entries[0]["unit"], "FLOP/s");
        assert_eq!(entries[1]["unit"], "B/s", "softmax is memory-bound: its bandwidth");
        assert!(entries[0]["value"].as_f64().unwrap() > 1e11);
    }
}
