//! CSV: a header row and one row per case, quoted per RFC 4180.
//!
//! Times are nanoseconds per iteration, rates are units per second of the
//! primary throughput kind (FLOPs, else bytes, else elements, tokens, items),
//! numbers are written in full (no exponent) and absent values are empty.
//! `status` is `ok`, `failed` or `skipped`; a failed case's `phase: reason`
//! (or a skipped case's reason) leads its `notes`. `metrics` holds the
//! workload's own figures as `name=value unit` joined by `;`. Rows end with `\n`.

use super::{failure_text, primary_throughput};
use crate::results::{Bound, CaseResult, RunReport};
use crate::suites::ThroughputKind;
use std::borrow::Cow;

/// The header row, in column order.
pub const COLUMNS: [&str; 30] = [
    "id",
    "suite",
    "benchmark",
    "params",
    "status",
    "median_ns",
    "median_lower_ns",
    "median_upper_ns",
    "mean_ns",
    "mean_lower_ns",
    "mean_upper_ns",
    "std_dev_ns",
    "mad_ns",
    "min_ns",
    "max_ns",
    "p90_ns",
    "p99_ns",
    "samples",
    "outliers",
    "throughput_kind",
    "rate",
    "rate_lower",
    "rate_upper",
    "pct_of_peak",
    "allocs_per_iter",
    "bytes_per_iter",
    "peak_bytes",
    "bound",
    "notes",
    "metrics",
];

/// Quotes a field per RFC 4180: fields containing a comma, a double quote,
/// or a line break are wrapped in double quotes, with inner quotes doubled.
pub fn quote(field: &str) -> Cow<'_, str> {
    if field.contains([',', '"', '\n', '\r']) {
        Cow::Owned(format!("\"{}\"", field.replace('"', "\"\"")))
    } else {
        Cow::Borrowed(field)
    }
}

/// A number in full, or empty when it is absent or not finite.
fn num(x: Option<f64>) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v}"),
        _ => String::new(),
    }
}

fn kind_name(kind: ThroughputKind) -> &'static str {
    match kind {
        ThroughputKind::Flops => "flops",
        ThroughputKind::Bytes => "bytes",
        ThroughputKind::Elements => "elements",
        ThroughputKind::Items => "items",
        ThroughputKind::Tokens => "tokens",
    }
}

fn row(case: &CaseResult) -> Vec<String> {
    let e = case.estimates.as_ref();
    let t = primary_throughput(case);
    let a = case.alloc.as_ref();
    let params: Vec<String> = case.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut notes: Vec<String> = Vec::new();
    match &case.status {
        crate::results::CaseStatus::Skipped { reason } => notes.push(format!("skipped: {reason}")),
        status => {
            if let Some(why) = failure_text(status) {
                notes.push(format!("failed in {why}"));
            }
        }
    }
    notes.extend(case.notes.iter().cloned());
    let samples = case.sampling.as_ref().map_or(case.samples.len(), |s| s.samples);
    vec![
        case.id.clone(),
        case.suite.clone(),
        case.benchmark.clone(),
        params.join(";"),
        match case.status {
            crate::results::CaseStatus::Ok => "ok",
            crate::results::CaseStatus::Failed { .. } => "failed",
            crate::results::CaseStatus::Skipped { .. } => "skipped",
        }
        .to_string(),
        num(e.map(|e| e.median.point)),
        num(e.map(|e| e.median.lower)),
        num(e.map(|e| e.median.upper)),
        num(e.map(|e| e.mean.point)),
        num(e.map(|e| e.mean.lower)),
        num(e.map(|e| e.mean.upper)),
        num(e.map(|e| e.std_dev)),
        num(e.map(|e| e.mad)),
        num(e.map(|e| e.min)),
        num(e.map(|e| e.max)),
        num(e.map(|e| e.p90)),
        num(e.map(|e| e.p99)),
        samples.to_string(),
        case.outliers.as_ref().map_or_else(String::new, |o| o.total().to_string()),
        t.map_or("", |t| kind_name(t.kind)).to_string(),
        num(t.map(|t| t.rate.point)),
        num(t.map(|t| t.rate.lower)),
        num(t.map(|t| t.rate.upper)),
        num(t.and_then(|t| t.pct_of_peak)),
        num(a.map(|a| a.allocs_per_iter)),
        num(a.map(|a| a.bytes_per_iter)),
        a.map_or_else(String::new, |a| a.peak_bytes.to_string()),
        match case.bound {
            Some(Bound::Compute) => "compute",
            Some(Bound::Memory) => "memory",
            Some(Bound::Latency) => "latency",
            None => "",
        }
        .to_string(),
        notes.join("; "),
        case.metrics
            .iter()
            .map(|m| format!("{}={} {}", m.name, m.value, m.unit).trim_end().to_string())
            .collect::<Vec<_>>()
            .join(";"),
    ]
}

fn push_record<S: AsRef<str>>(out: &mut String, fields: &[S]) {
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&quote(f.as_ref()));
    }
    out.push('\n');
}

/// The header and one row per case.
pub fn render(report: &RunReport) -> String {
    let mut out = String::new();
    push_record(&mut out, &COLUMNS);
    for case in &report.cases {
        push_record(&mut out, &row(case));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small RFC 4180 reader: quoted fields may hold commas, doubled
    /// quotes and line breaks.
    fn parse(text: &str) -> Vec<Vec<String>> {
        let mut rows = Vec::new();
        let mut row = Vec::new();
        let mut field = String::new();
        let mut chars = text.chars().peekable();
        let mut quoted = false;
        while let Some(c) = chars.next() {
            if quoted {
                match c {
                    '"' if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    '"' => quoted = false,
                    _ => field.push(c),
                }
                continue;
            }
            match c {
                '"' => {
                    assert!(field.is_empty(), "quote inside an unquoted field");
                    quoted = true;
                }
                ',' => row.push(std::mem::take(&mut field)),
                '\r' => {}
                '\n' => {
                    row.push(std::mem::take(&mut field));
                    rows.push(std::mem::take(&mut row));
                }
                _ => field.push(c),
            }
        }
        assert!(!quoted, "unterminated quoted field");
        assert!(field.is_empty() && row.is_empty(), "last row lacks its newline");
        rows
    }

    #[test]
    fn quoting_follows_rfc_4180() {
        assert_eq!(quote("plain"), "plain");
        assert_eq!(quote("a,b"), "\"a,b\"");
        assert_eq!(quote("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(quote("two\nlines"), "\"two\nlines\"");
        assert_eq!(parse("a,\"b,\"\"c\"\"\",\"x\ny\"\n"), [vec!["a", "b,\"c\"", "x\ny"]]);
    }

    #[test]
    fn csv_rows_parse_back() {
        let mut report = super::super::fixture();
        report.cases[1].notes.push("line one\nline two".into());
        let text = render(&report);
        let rows = parse(&text);
        assert_eq!(rows.len(), 1 + report.cases.len());
        assert_eq!(rows[0], COLUMNS);
        assert!(rows.iter().all(|r| r.len() == COLUMNS.len()), "{rows:?}");
        let col = |name: &str| COLUMNS.iter().position(|c| *c == name).unwrap();

        let mm = &rows[1];
        assert_eq!(mm[col("id")], "tensor/matmul/shape=256x256x256,threads=1");
        assert_eq!(mm[col("params")], "shape=256x256x256;threads=1");
        assert_eq!(mm[col("status")], "ok");
        assert_eq!(mm[col("median_ns")].parse::<f64>().unwrap(), 107_546.0);
        assert_eq!(mm[col("median_upper_ns")], "108020");
        assert_eq!(mm[col("throughput_kind")], "flops");
        let rate: f64 = mm[col("rate")].parse().unwrap();
        assert!((rate - 3.12e11).abs() / 3.12e11 < 1e-3, "{rate}");
        assert_eq!(mm[col("pct_of_peak")], "89.14");
        assert_eq!(mm[col("outliers")], "3");
        assert_eq!(mm[col("samples")], "10");
        assert_eq!(mm[col("bound")], "compute");

        let sm = &rows[2];
        assert_eq!(sm[col("id")], "tensor/softmax/note=say \"hi\",rows=1024");
        assert_eq!(sm[col("median_ns")].parse::<f64>().unwrap(), 229_615.0);
        assert_eq!(sm[col("throughput_kind")], "bytes");
        assert_eq!(sm[col("peak_bytes")], "3145728");
        assert_eq!(
            sm[col("notes")],
            "noisy: IQR/median 12.5%, above 10%; sampling cut by the \"max-time\" budget (10 of 100 samples); \
             line one\nline two"
        );

        let ln = &rows[3];
        assert_eq!(ln[col("status")], "failed");
        assert_eq!(ln[col("median_ns")], "");
        assert_eq!(ln[col("samples")], "0");
        assert!(ln[col("notes")].starts_with("failed in verify: verification against naive loop failed"));
    }
}
