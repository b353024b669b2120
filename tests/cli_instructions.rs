//! `run --measure instructions` (issue 50): cases counted under Valgrind's
//! callgrind, through the real binary. Counts are deterministic, so the
//! assertions are exact where the method promises it (two counts of one
//! case agree within a tiny band; an injected 2% of extra instructions is
//! flagged), and never about time. Skipped, saying why, where `valgrind`
//! is not on PATH.

mod common;
use common::*;
use std::path::Path;

/// Two tiny cases (a few thousand instructions each under callgrind).
const CASES: &str = "tensor/creation/elements=1024,op=(ones|randn)$";

fn valgrind_missing() -> Option<String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path).any(|d| d.join("valgrind").is_file());
    (!found).then(|| "valgrind is not on PATH".to_string())
}

/// Counts CASES into `out` (JSON), with `env` (a test hook) set.
fn count(out: &Path, env: &[(&str, &str)]) -> Run {
    let o = out.display().to_string();
    let r = tfbench_env(
        env,
        &["run", "--suite", "tensor", "--measure", "instructions", "--no-live", "-q", "-o", &o, CASES],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    r
}

fn instructions(v: &serde_json::Value, op: &str) -> f64 {
    let case = v["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["id"].as_str().is_some_and(|id| id.ends_with(&format!("op={op}"))))
        .unwrap_or_else(|| panic!("no {op} in {v}"));
    let counts = &case["inside"]["counts"];
    assert_eq!(counts["iterations"], 1, "{counts}");
    assert!(counts["isa"].as_str().is_some_and(|s| !s.is_empty()), "the ISA is recorded: {counts}");
    assert!(counts["estimated_cycles"].as_f64().is_some_and(|c| c > 0.0), "{counts}");
    counts["instructions"].as_f64().expect("instructions")
}

#[test]
fn counts_are_positive_deterministic_and_an_injected_two_percent_is_flagged() {
    if let Some(why) = valgrind_missing() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = scratch("cli-instructions");
    let (a, b, c) = (dir.join("a.json"), dir.join("b.json"), dir.join("c.json"));
    count(&a, &[]);
    count(&b, &[]);
    let injected = count(&c, &[("TFBENCH_INJECT_INSTRUCTIONS", "op=randn$=1.02")]);
    assert!(injected.stderr.contains("TFBENCH_INJECT_INSTRUCTIONS"), "{}", injected.stderr);
    let (va, vb, vc) = (json_file(&a), json_file(&b), json_file(&c));
    for op in ["ones", "randn"] {
        let (x, y) = (instructions(&va, op), instructions(&vb, op));
        assert!(x > 0.0, "{op}: {x} instructions");
        assert!((y / x - 1.0).abs() < 0.001, "{op}: {x} then {y} instructions");
    }
    let (plain, burned) = (instructions(&va, "randn"), instructions(&vc, "randn"));
    assert!((burned / plain - 1.02).abs() < 0.002, "x{} for x1.02", burned / plain);
    let (sa, sb, sc) = (a.display().to_string(), b.display().to_string(), c.display().to_string());

    // A/A: nothing flagged, the gate passes; every verdict says its measure.
    let r = tfbench(&["compare", "--baseline", &sa, "--against", &sb, "--fail-on-regression", "-f", "json"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v = json(&r);
    for ch in v["changes"].as_array().expect("changes") {
        assert_eq!(ch["verdict"], "unchanged", "{ch}");
        assert_eq!(ch["measure"], "instructions", "{ch}");
    }
    // The injected case regresses and fails the gate; the other does not.
    let r = tfbench(&["compare", "--baseline", &sa, "--against", &sc, "--fail-on-regression", "-f", "json"]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    let v = json(&r);
    for ch in v["changes"].as_array().expect("changes") {
        let want =
            if ch["id"].as_str().is_some_and(|i| i.ends_with("randn")) { "regressed" } else { "unchanged" };
        assert_eq!(ch["verdict"], want, "{ch}");
    }
    // A 3% band lets the 2% through.
    let r = tfbench(&[
        "compare",
        "--baseline",
        &sa,
        "--against",
        &sc,
        "--fail-on-regression",
        "--count-band",
        "3",
    ]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
}

#[test]
fn counts_and_timings_are_not_compared() {
    if let Some(why) = valgrind_missing() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = scratch("cli-instructions-mixed");
    let counted = dir.join("counted.json");
    count(&counted, &[]);
    let timed = dir.join("timed.json").display().to_string();
    let r = tfbench(&[
        "run",
        "--suite",
        "tensor",
        "--quick",
        "--no-probe",
        "--no-live",
        "--sample-size",
        "5",
        "-q",
        "-o",
        &timed,
        CASES,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = tfbench(&["compare", "--baseline", &counted.display().to_string(), "--against", &timed]);
    assert_usage_error(&r, &["cannot compare instruction counts with timings"]);
}

#[test]
fn what_cannot_be_counted_is_refused_before_anything_runs() {
    // A device Valgrind cannot count (exit 2 whether or not valgrind is here:
    // the device is checked first only when valgrind exists, so accept both
    // messages).
    let r = tfbench(&[
        "run",
        "--suite",
        "tensor",
        "--measure",
        "instructions",
        "--device",
        "cuda",
        "--no-live",
        CASES,
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("CPU cases only") || r.stderr.contains("no case matches"), "{}", r.stderr);
    // No valgrind on PATH: the error names it.
    let r = tfbench_env(
        &[("PATH", "/nonexistent")],
        &["run", "--suite", "tensor", "--measure", "instructions", "--no-live", CASES],
    );
    assert_usage_error(&r, &["no `valgrind` is on PATH"]);
    // --profile with counts.
    let r = tfbench(&[
        "run",
        "--suite",
        "tensor",
        "--measure",
        "instructions",
        "--profile",
        "/tmp/x.svg",
        "--no-live",
        CASES,
    ]);
    assert_usage_error(&r, &["--profile"]);
}

#[test]
fn a_case_too_long_under_valgrind_is_cut_and_the_others_go_on() {
    if let Some(why) = valgrind_missing() {
        eprintln!("skipped: {why}");
        return;
    }
    // Valgrind's start-up alone takes longer than 0.2 s: every case is cut,
    // each says so, and the run still ends with its results (exit 0).
    let r = tfbench(&[
        "run",
        "--suite",
        "tensor",
        "--measure",
        "instructions",
        "--max-time",
        "0.2",
        "--no-live",
        "-f",
        "json",
        CASES,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    let cases = v["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 2);
    for c in cases {
        assert_eq!(c["status"]["state"], "skipped", "{c}");
        assert!(c["status"]["reason"].as_str().is_some_and(|s| s.contains("cut at --max-time")), "{c}");
    }
}
