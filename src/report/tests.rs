//! The report module's unit tests: format names, every format rendering
//! the fixture, the primary throughput, status cells, shortening.

use super::*;
use crate::workload::ThroughputKind;
use clap::ValueEnum;

#[test]
fn format_names_are_lowercase() {
    let names: Vec<_> = Format::value_variants()
        .iter()
        .map(|f| f.to_possible_value().unwrap().get_name().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "table",
            "json",
            "jsonl",
            "csv",
            "markdown",
            "bencher",
            "bmf",
            "custom-smaller-is-better",
            "custom-bigger-is-better",
            "llama-bench",
            "llama-bench-json"
        ]
    );
}

#[test]
fn every_format_renders_the_fixture_with_a_final_newline() {
    let report = fixture();
    for &format in Format::value_variants() {
        let text = render(format, &report).unwrap();
        assert!(text.ends_with('\n'), "{format:?}");
        if matches!(format, Format::LlamaBench | Format::LlamaBenchJson) {
            // Only `gguf` cases, which the fixture has none of.
            assert!(text.contains("no `gguf` cases") || text == "[]\n", "{format:?}:\n{text}");
            continue;
        }
        assert!(text.contains("tensor/matmul/shape=256x256x256,threads=1"), "{format:?}:\n{text}");
    }
}

#[test]
fn primary_throughput_prefers_flops_then_bytes() {
    let report = fixture();
    assert_eq!(primary_throughput(&report.cases[0]).unwrap().kind, ThroughputKind::Flops);
    assert_eq!(primary_throughput(&report.cases[1]).unwrap().kind, ThroughputKind::Bytes);
    assert!(primary_throughput(&report.cases[2]).is_none());
}

#[test]
fn status_cell_drops_the_own_case_id_so_the_valid_choices_fit() {
    let mut case = fixture().cases.remove(2);
    let reason = format!("case {}: `dtype` = `f8` is not valid; valid: f32, f16, bf16", case.id);
    case.status = CaseStatus::Failed { phase: "prepare".into(), reason };
    assert_eq!(
        cells::status(&case, 70),
        "FAILED: prepare: `dtype` = `f8` is not valid; valid: f32, f16, bf16"
    );
    // Another case's id is kept: it is information, not repetition.
    case.status = CaseStatus::Skipped { reason: "case other/x: needs 30 GiB".into() };
    assert_eq!(cells::status(&case, 70), "skipped: case other/x: needs 30 GiB");
}

#[test]
fn shorten_keeps_the_first_line() {
    assert_eq!(shorten("short", 10), "short");
    assert_eq!(shorten("0123456789abc", 10), "012345678…");
    assert_eq!(shorten("first\nsecond", 40), "first…");
}
