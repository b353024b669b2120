//! Bencher Metric Format (BMF) JSON, for `bencher run --adapter json`
//! (<https://bencher.dev/docs/reference/bencher-metric-format/>): one
//! object keyed by benchmark name, each holding its Measures keyed by slug
//! or name, each Measure one Metric with a required `value` and optional
//! `lower_value` / `upper_value`:
//!
//! ```json
//! { "tensor/matmul/shape=256x256x256,threads=1": {
//!     "latency": { "value": 107546.0, "lower_value": 107086.0, "upper_value": 108006.0 },
//!     "throughput": { "value": 3.1e11, "lower_value": 3.09e11, "upper_value": 3.13e11 } } }
//! ```
//!
//! - `latency` (Bencher's built-in Measure, in nanoseconds): the median time
//!   per iteration with its confidence interval;
//! - `throughput` (built-in, labelled operations/second): the case's
//!   headline rate (FLOP/s, B/s, elements/s, ...; see
//!   [`crate::results::primary_throughput`]) with its interval, when the
//!   case declares work;
//! - every metric the case reports (`user_cpu`, `peak_rss`, `rmse`, ...) as
//!   a Measure of that name, value only (Bencher creates a Measure it does
//!   not know by name).
//!
//! Failed and skipped cases have no figures and are left out (Bencher has
//! no way to mark a failed benchmark); non-finite figures are left out too,
//! as JSON has no NaN.

use crate::results::{Estimate, RunReport};
use serde_json::{Map, Value, json};

fn metric(e: &Estimate) -> Option<Value> {
    if !e.point.is_finite() {
        return None;
    }
    let mut m = Map::new();
    m.insert("value".into(), json!(e.point));
    if e.lower.is_finite() && e.upper.is_finite() {
        m.insert("lower_value".into(), json!(e.lower));
        m.insert("upper_value".into(), json!(e.upper));
    }
    Some(Value::Object(m))
}

/// The report as BMF JSON (pretty-printed, ending with a newline).
pub fn render(report: &RunReport) -> anyhow::Result<String> {
    let mut benchmarks = Map::new();
    for case in report.cases.iter().filter(|c| !c.status.is_failed()) {
        let Some(e) = &case.estimates else { continue };
        let mut measures = Map::new();
        if let Some(m) = metric(&e.median) {
            measures.insert("latency".into(), m);
        }
        if let Some(m) = crate::results::primary_throughput(case).and_then(|t| metric(&t.rate)) {
            measures.insert("throughput".into(), m);
        }
        for x in case.metrics.iter().filter(|x| x.value.is_finite()) {
            measures.entry(x.name.clone()).or_insert_with(|| json!({ "value": x.value }));
        }
        if !measures.is_empty() {
            benchmarks.insert(case.id.clone(), Value::Object(measures));
        }
    }
    Ok(serde_json::to_string_pretty(&Value::Object(benchmarks))? + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The BMF JSON Schema, as published (bencher.dev/bmf.json): an object
    /// of benchmarks, each an object of measures, each an object with a
    /// number `value` (required) and optional numbers `lower_value` and
    /// `upper_value`; nothing else.
    fn check_schema(v: &Value) {
        let benchmarks = v.as_object().expect("top level is an object");
        for (name, measures) in benchmarks {
            assert!(!name.is_empty());
            let measures = measures.as_object().expect("a benchmark is an object of measures");
            assert!(!measures.is_empty(), "{name}");
            for (measure, m) in measures {
                let m = m.as_object().unwrap_or_else(|| panic!("{name}/{measure} is not an object"));
                assert!(m["value"].is_number(), "{name}/{measure}: value");
                for (k, x) in m {
                    assert!(
                        ["value", "lower_value", "upper_value"].contains(&k.as_str()),
                        "{name}/{measure}: {k}"
                    );
                    assert!(x.is_number(), "{name}/{measure}/{k}");
                }
            }
        }
    }

    #[test]
    fn bmf_follows_the_published_schema() {
        let report = super::super::fixture();
        let v: Value = serde_json::from_str(&render(&report).unwrap()).unwrap();
        check_schema(&v);
        let mm = &v["tensor/matmul/shape=256x256x256,threads=1"];
        assert_eq!(mm["latency"]["value"], json!(107_546.0));
        assert!(mm["latency"]["lower_value"].as_f64().unwrap() < 107_546.0);
        assert!(mm["latency"]["upper_value"].as_f64().unwrap() > 107_546.0);
        assert!(mm["throughput"]["value"].as_f64().unwrap() > 1e11, "FLOP/s: {mm}");
        let sm = &v["tensor/softmax/note=say \"hi\",rows=1024"];
        assert_eq!(sm["working_set"], json!({ "value": 6291456.0 }));
        // The failed case has no figures and is left out.
        assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
    }
}
