//! Rendering a comparison (markdown, table, JSON) and validating its options.

use super::*;

#[test]
fn markdown_has_summary_rows_and_lists() {
    let md = render_markdown(&mixed());
    assert!(md.contains("1 regressed, 1 improved, 1 unchanged, 0 inconclusive"), "{md}");
    assert!(md.contains("1 over the 5% regression limit, 1 memory regression"), "{md}");
    assert_eq!(md.lines().filter(|l| l.starts_with("| `synthetic/")).count(), 3, "{md}");
    assert!(md.contains("`feature\\|x`"), "pipes escaped:\n{md}");
    assert!(
        md.contains("**regressed (over limit)**")
            && md.contains("peak 2.00 MiB (+100.0%), 2 allocs/iter (=), over limit"),
        "{md}"
    );
    assert!(md.contains("only in baseline, not compared (1): `synthetic/gone`"), "{md}");
    assert!(md.contains("only in candidate, not compared (1): `synthetic/added`"), "{md}");
    assert!(md.contains("failed in either run, not compared (1): `synthetic/broken`"), "{md}");
    assert!(
        md.contains("- FAILED `synthetic/broken`: failed on the baseline side only: verify: wrong answer"),
        "{md}"
    );
    assert!(!md.contains("WARNING"));
}

#[test]
fn table_colours_only_on_request() {
    let c = mixed();
    let plain = render_table(&c, false);
    assert!(!plain.contains('\x1b'), "{plain}");
    assert!(plain.starts_with("`feature|x` vs baseline `main`: 1 regressed, 1 improved"), "{plain}");
    for needle in ["case", "old median", "change [95% CI]", "verdict", "synthetic/slower", "<0.001"] {
        assert!(plain.contains(needle), "{needle}:\n{plain}");
    }
    assert!(plain.contains("only in candidate, not compared (1): synthetic/added"));
    assert!(plain.ends_with('\n'));
    let coloured = render_table(&c, true);
    assert!(coloured.contains('\x1b'), "{coloured}");
    let empty = compare("a", &report(vec![]), "b", &report(vec![]), &opts());
    assert!(render_table(&empty, false).contains("no case measured in both runs"));
}

#[test]
fn json_parses_back() {
    let c = mixed();
    let text = render_json(&c).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["schema_version"], COMPARISON_SCHEMA_VERSION);
    assert_eq!(value["summary"]["regressed"], 1);
    assert_eq!(value["summary"]["gating_failure"], true);
    assert_eq!(value["changes"][0]["verdict"], "regressed");
    let back: Comparison = serde_json::from_value(value).unwrap();
    assert_eq!(back, c);
    // Growth from zero is written as null and read back as infinite.
    let mut c = c;
    c.changes[0].memory = Some(MemoryChange::new(&alloc(0, 0.0), &alloc(1 << 20, 0.0), 0.2));
    let back: Comparison = serde_json::from_str(&render_json(&c).unwrap()).unwrap();
    assert_eq!(back.changes[0].memory.as_ref().map(|m| m.peak_ratio), Some(f64::INFINITY));
}

#[test]
fn options_are_validated() {
    CompareOptions::default().validate().unwrap();
    let bad = [
        CompareOptions { alpha: 0.0, ..Default::default() },
        CompareOptions { noise_threshold: -0.1, ..Default::default() },
        CompareOptions { max_regression: f64::NAN, ..Default::default() },
        CompareOptions { max_memory_regression: -1.0, ..Default::default() },
        CompareOptions { confidence_level: 1.0, ..Default::default() },
        CompareOptions { resamples: 0, ..Default::default() },
    ];
    for o in bad {
        assert!(o.validate().is_err(), "{o:?}");
    }
}
