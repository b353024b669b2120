//! The whole [`RunReport`] as pretty-printed JSON, and reading it back.
//!
//! Field by field documentation: `docs/json-schema.md`.

use crate::results::{RunReport, SCHEMA_VERSION};
use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The report as pretty-printed JSON, ending with a newline.
pub fn render(report: &RunReport) -> Result<String> {
    let mut text = serde_json::to_string_pretty(report).context("serializing the run report")?;
    text.push('\n');
    Ok(text)
}

/// Checks that a JSON object (a results file, or the `run` line of JSON
/// Lines output) carries the `schema_version` this build reads.
pub(crate) fn check_schema_version(value: &Value) -> Result<()> {
    match value.get("schema_version") {
        None => bail!("not a tfbench results file: missing schema_version"),
        Some(v) if v.as_u64() == Some(u64::from(SCHEMA_VERSION)) => Ok(()),
        Some(v) => bail!("unsupported schema_version {v} (this tfbench reads {SCHEMA_VERSION})"),
    }
}

/// Reads a results file written by [`render`] (`--format json`). The
/// `schema_version` is checked before anything else, so files from another
/// layout get a clear error instead of a missing-field message.
pub fn parse_json(text: &str) -> Result<RunReport> {
    let value: Value = serde_json::from_str(text).context("not a tfbench results file: invalid JSON")?;
    check_schema_version(&value)?;
    serde_json::from_value(value).context("invalid tfbench results file")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trips() {
        let report = super::super::fixture();
        let text = render(&report).unwrap();
        assert!(text.starts_with("{\n  \"schema_version\": 1,"), "{}", &text[..40]);
        let back = parse_json(&text).unwrap();
        super::super::assert_same_json(
            &serde_json::to_value(&back).unwrap(),
            &serde_json::to_value(&report).unwrap(),
        );
        assert_eq!(back.cases.len(), 3);
        assert_eq!(back.cases[1].id, report.cases[1].id);
        assert_eq!(back.failed_count(), 1);
    }

    #[test]
    fn schema_version_is_checked_first() {
        let err = parse_json(r#"{"cases": []}"#).unwrap_err().to_string();
        assert_eq!(err, "not a tfbench results file: missing schema_version");
        let err = parse_json("[1, 2]").unwrap_err().to_string();
        assert_eq!(err, "not a tfbench results file: missing schema_version");
        let err = parse_json(r#"{"schema_version": 2, "cases": "whatever"}"#).unwrap_err().to_string();
        assert_eq!(err, "unsupported schema_version 2 (this tfbench reads 1)");
        let err = parse_json(r#"{"schema_version": "1"}"#).unwrap_err().to_string();
        assert_eq!(err, "unsupported schema_version \"1\" (this tfbench reads 1)");
        let err = parse_json("{not json").unwrap_err().to_string();
        assert!(err.contains("invalid JSON"), "{err}");
        let err = format!("{:#}", parse_json(r#"{"schema_version": 1}"#).unwrap_err());
        assert!(err.starts_with("invalid tfbench results file: missing field"), "{err}");
    }
}
