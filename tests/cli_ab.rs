//! `tfbench ab` (paired A/B runs of two builds), the injection test hooks
//! and the comparison gate's refusals, driven through the real binary. The
//! assertions check verdicts' directions and messages, never timings.

mod common;
use common::*;
use std::path::Path;

const BIN: &str = env!("CARGO_BIN_EXE_tfbench");
/// Two cheap cases of the tensor suite.
const CASES: &str = "tensor/unary/elements=1048576,op=(relu|sqrt)$";

fn ab(extra: &[&str]) -> Run {
    let mut args = vec![
        "ab",
        "--base",
        BIN,
        "--head",
        BIN,
        "--suite",
        "tensor",
        "--quick",
        "--sample-size",
        "30",
        "--warm-up-time",
        "0.05",
        "--measurement-time",
        "0.3",
        "--format",
        "json",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    args.push(CASES);
    tfbench(&args)
}

fn change<'a>(v: &'a serde_json::Value, op: &str) -> &'a serde_json::Value {
    v["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .find(|c| c["id"].as_str().is_some_and(|id| id.ends_with(&format!("op={op}"))))
        .unwrap_or_else(|| panic!("no {op} in {v}"))
}

#[test]
fn undecided_cases_run_more_rounds_alone_and_decided_ones_do_not() {
    // A band of 0.01% no interval fits inside: a case is decided only when
    // significant beyond it, else it stays undecided and gets the extra
    // rounds (12 / 3 = 4 at a time, up to --max-rounds 16).
    let pairs = scratch("ab-extend").join("pairs.json");
    let r =
        ab(&["--noise-threshold", "0.01", "--max-rounds", "16", "--pairs-output", pairs.to_str().unwrap()]);
    assert!(matches!(r.code, 0 | 1 | 4), "{}\n{}", r.stdout, r.stderr);
    let v = json(&r);
    let p = json_file(&pairs);
    let mut extended = 0;
    for c in p["cases"].as_array().unwrap() {
        let rounds: std::collections::BTreeSet<u64> =
            c["round"].as_array().unwrap().iter().filter_map(|r| r.as_u64()).collect();
        let id = c["id"].as_str().unwrap();
        let ch = v["changes"].as_array().unwrap().iter().find(|x| x["id"] == id).unwrap();
        let verdict = ch["verdict"].as_str().unwrap();
        if rounds.len() == 16 {
            // Extended: judged at its second look's stricter level.
            extended += 1;
            assert_eq!(c["looks"], 2, "{c}");
            assert!((ch["ratio"]["level"].as_f64().unwrap() - 0.975).abs() < 1e-9, "{ch}");
        } else {
            // Decided on the planned rounds: significant beyond the band.
            assert_eq!(rounds.len(), 12, "{c}");
            assert!(verdict == "regressed" || verdict == "improved", "{ch}");
        }
    }
    let notes = v["notes"].to_string();
    if extended > 0 {
        assert!(
            notes.contains(&format!(
                "12 rounds, then 4 more for cases still undecided (4 for {extended} case(s)"
            )),
            "{notes}"
        );
    }
}

#[test]
fn a_build_against_itself_shows_no_large_change() {
    // Two processes of one binary can differ by a few percent for their
    // whole life (memory layout, the core they got): each round has fresh
    // processes and the intervals rest on the spread between rounds, so the
    // default gate holds against the build itself.
    let pairs = scratch("ab-pairs").join("pairs.json");
    // `--max-rounds 12`: the planned rounds only (extra rounds for
    // undecided cases have their own test below).
    let r = ab(&["--fail-on-regression", "--max-rounds", "12", "--pairs-output", pairs.to_str().unwrap()]);
    // Never a regression (1) nor a failure (3) of the build against itself;
    // on a machine busy enough that too many rounds are set aside the gate
    // says it could not judge (4), which is not a pass and not a verdict.
    assert!(
        r.code == 0 || (r.code == 4 && r.stderr.contains("could not judge")),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    let v = json(&r);
    assert_eq!(v["method"], "paired");
    let notes = v["notes"].to_string();
    assert!(notes.contains("12 rounds, each with fresh worker processes"), "{notes}");
    // The raw pairs: per case, one base and one head time per pair, each
    // with its round, every round represented.
    let p = json_file(&pairs);
    assert_eq!(p["rounds"], 12);
    assert_eq!(p["cases"].as_array().map(Vec::len), Some(2));
    for c in p["cases"].as_array().unwrap() {
        let len = |k: &str| c[k].as_array().map_or(0, Vec::len);
        // At least a pair per round (a round's budget may end its pairs early).
        assert!(len("base") >= 12 && len("base") == len("head") && len("head") == len("round"), "{c}");
        let rounds: std::collections::BTreeSet<u64> =
            c["round"].as_array().unwrap().iter().filter_map(|r| r.as_u64()).collect();
        assert_eq!(rounds.len(), 12, "{c}");
        assert!(c["base"].as_array().unwrap().iter().all(|t| t.as_f64().is_some_and(|t| t > 0.0)), "{c}");
        // The kernel's load figures around each round's pairs, both workers
        // counted as the measurement (Linux has /proc).
        if cfg!(target_os = "linux") {
            let load = c["load"].as_array().unwrap_or_else(|| panic!("no load figures: {c}"));
            let rounds: Vec<u64> = load.iter().filter_map(|l| l["round"].as_u64()).collect();
            assert_eq!(rounds, (0..12).collect::<Vec<u64>>(), "{c}");
            assert!(
                load.iter().all(|l| l["case"] == c["id"] && l["wall_ns"].as_f64().is_some_and(|w| w > 0.0))
            );
        }
    }
    assert!(!notes.contains("fewer than 3 rounds"), "{notes}");
    assert_eq!(v["changes"].as_array().map(Vec::len), Some(2));
    for c in v["changes"].as_array().unwrap() {
        let point = c["ratio"]["point"].as_f64().unwrap();
        assert!((0.67..1.5).contains(&point), "{c}");
        assert_eq!(c["old_samples"], c["new_samples"], "paired: one sample of each build per pair");
        assert!(c["old_samples"].as_u64().unwrap() >= 5, "{c}");
    }
}

#[test]
fn an_injected_slowdown_in_the_head_is_flagged_and_gates() {
    let r = ab(&["--fail-on-regression", "--head-env", "TFBENCH_INJECT_SLOWDOWN=op=relu=2.0"]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    let v = json(&r);
    let relu = change(&v, "relu");
    assert_eq!(relu["verdict"], "regressed", "{relu}");
    assert!(relu["ratio"]["point"].as_f64().unwrap() > 1.4, "{relu}");
    assert_ne!(change(&v, "sqrt")["verdict"], "regressed");
    let notes = v["notes"].to_string();
    assert!(notes.contains("injected slowdown"), "{notes}");
}

#[test]
fn a_panicking_case_is_reported_and_the_others_still_judged() {
    let r = ab(&["--head-env", "TFBENCH_INJECT_PANIC=op=sqrt"]);
    assert_eq!(r.code, 0, "no gate without --fail-on-regression: {}\n{}", r.stdout, r.stderr);
    let v = json(&r);
    assert_eq!(v["failed"][0].as_str().map(|s| s.ends_with("op=sqrt")), Some(true), "{v}");
    assert_eq!(v["failures"][0]["side"], "candidate", "{v}");
    assert!(v["notes"].to_string().contains("injected panic"), "{}", v["notes"]);
    assert_eq!(v["changes"].as_array().map(Vec::len), Some(1));
}

#[test]
fn a_case_failing_in_the_head_build_fails_the_gate_with_its_own_code() {
    // Issue 45: a PR that breaks a kernel must not pass the gate.
    let r = ab(&["--fail-on-regression", "--head-env", "TFBENCH_INJECT_PANIC=op=sqrt"]);
    assert_eq!(r.code, 3, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("case(s) failed on the candidate's side"), "{}", r.stderr);
    let line =
        r.stderr.lines().find(|l| l.contains("op=sqrt: failed on the candidate side")).unwrap_or_default();
    assert!(line.contains("head build") && line.contains("injected panic"), "{}", r.stderr);
    // The same failure in the base build only: the head fixed it, no code 3.
    let r = ab(&["--fail-on-regression", "--base-env", "TFBENCH_INJECT_PANIC=op=sqrt"]);
    assert!(r.code == 0 || r.code == 4, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(json(&r)["failures"][0]["side"], "baseline");
}

#[test]
fn bad_builds_are_refused_before_measuring() {
    let dir = scratch("ab-bad-builds");
    let r = tfbench(&["ab", "--base", "/nonexistent/tfbench", "--head", BIN, CASES]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--base /nonexistent/tfbench: no such file"), "{}", r.stderr);
    let plain = dir.join("plain.txt");
    std::fs::write(&plain, "not a program").unwrap();
    let r = tfbench(&["ab", "--base", BIN, "--head", plain.to_str().unwrap(), CASES]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("not an executable file"), "{}", r.stderr);
    // A program that does not speak the protocol (a build from before `ab`).
    let r = tfbench(&["ab", "--base", "/bin/true", "--head", BIN, "--suite", "tensor", "--quick", CASES]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("does not speak `tfbench ab`'s protocol"), "{}", r.stderr);
    // A build that plans other cases.
    let other = dir.join("other-plan.sh");
    std::fs::write(
        &other,
        "#!/bin/sh\necho '{\"protocol\":1,\"schema_version\":1,\"build\":\"x\",\"cases\":[[\"t/x\",\"tensor\"]],\"settings\":{},\"rounds\":1,\"injected\":null}'\ncat >/dev/null\n",
    )
    .unwrap();
    make_executable(&other);
    let r = tfbench(&[
        "ab",
        "--base",
        other.to_str().unwrap(),
        "--head",
        BIN,
        "--suite",
        "tensor",
        "--quick",
        CASES,
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("plan different cases"), "{}", r.stderr);
    let r = tfbench(&["ab", "--base", BIN, "--head", BIN, "--base-env", "NOEQUALS", CASES]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--base-env \"NOEQUALS\": expected KEY=VALUE"), "{}", r.stderr);
}

fn make_executable(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn quick_run(dir: &Path, env: &[(&str, &str)], extra: &[&str]) -> Run {
    let out = dir.join("r.json");
    let mut args = vec![
        "run",
        "--suite",
        "tensor",
        "--quick",
        "--no-probe",
        "--sample-size",
        "10",
        "--measurement-time",
        "0.2",
        "--warm-up-time",
        "0.05",
        "--baseline-dir",
        dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
    ];
    args.extend_from_slice(extra);
    args.push(CASES);
    tfbench_env(env, &args)
}

#[test]
fn the_injection_hook_is_recorded_loudly_and_checked() {
    let dir = scratch("inject-run");
    let r = quick_run(&dir, &[("TFBENCH_INJECT_SLOWDOWN", "op=relu=1.5")], &["--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json_file(&dir.join("r.json"));
    assert_eq!(v["environment"]["injected_slowdown"], "op=relu=1.5");
    let relu =
        v["cases"].as_array().unwrap().iter().find(|c| c["id"].as_str().unwrap().ends_with("relu")).unwrap();
    assert!(relu["notes"][0].as_str().unwrap().starts_with("INJECTED SLOWDOWN x1.5"), "{}", relu["notes"]);
    assert!(!v["canaries"].as_array().unwrap().is_empty(), "canaries are timed between cases");
    let bad = quick_run(&dir, &[("TFBENCH_INJECT_SLOWDOWN", "op=relu=0.5")], &[]);
    assert_eq!(bad.code, 2);
    assert!(
        bad.stderr.contains("TFBENCH_INJECT_SLOWDOWN") && bad.stderr.contains("(1, 100]"),
        "{}",
        bad.stderr
    );
    // A panicking case fails alone; the other is measured; exit 3.
    let r = quick_run(&dir, &[("TFBENCH_INJECT_PANIC", "op=sqrt")], &[]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let v = json_file(&dir.join("r.json"));
    let states: Vec<&str> =
        v["cases"].as_array().unwrap().iter().map(|c| c["status"]["state"].as_str().unwrap()).collect();
    assert_eq!(states.iter().filter(|s| **s == "ok").count(), 1, "{states:?}");
}

#[test]
fn vacuous_comparisons_fail_the_gate_unless_allowed() {
    let dir = scratch("vacuous");
    assert_eq!(quick_run(&dir, &[], &[]).code, 0);
    let file = dir.join("r.json");
    let f = file.to_str().unwrap();
    let r = tfbench(&["compare", "--baseline", f, "--against", f, "--fail-on-regression"]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("nothing to judge") && r.stderr.contains("compared with itself"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.contains("WARNING: nothing to judge"), "{}", r.stdout);
    let r = tfbench(&["compare", "--baseline", f, "--against", f, "--fail-on-regression", "--allow-vacuous"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Without the gate it is only reported.
    assert_eq!(tfbench(&["compare", "--baseline", f, "--against", f]).code, 0);
}

#[test]
fn corrupt_samples_are_refused_with_file_case_and_field() {
    let dir = scratch("strict");
    assert_eq!(quick_run(&dir, &[], &[]).code, 0);
    let file = dir.join("r.json");
    let mut v = json_file(&file);
    v["cases"][1]["samples"][2]["nanos"] = serde_json::json!(-3.0);
    let bad = dir.join("bad.json");
    std::fs::write(&bad, serde_json::to_string(&v).unwrap()).unwrap();
    let r = tfbench(&["compare", "--baseline", file.to_str().unwrap(), "--against", bad.to_str().unwrap()]);
    assert_eq!(r.code, 2);
    let id = v["cases"][1]["id"].as_str().unwrap();
    assert!(
        r.stderr.contains("bad.json") && r.stderr.contains(id) && r.stderr.contains("samples[2].nanos"),
        "{}",
        r.stderr
    );
    // A statistic written as null does not block the comparison.
    let mut v = json_file(&file);
    v["cases"][0]["estimates"]["mean"]["upper"] = serde_json::Value::Null;
    v["run_id"] = serde_json::json!("another");
    let nulls = dir.join("nulls.json");
    std::fs::write(&nulls, serde_json::to_string(&v).unwrap()).unwrap();
    let r = tfbench(&["compare", "--baseline", file.to_str().unwrap(), "--against", nulls.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn append_keeps_several_runs_of_one_build_and_refuses_others() {
    let dir = scratch("append");
    for _ in 0..2 {
        let r = quick_run(&dir, &[], &["--save-baseline", "main", "--append"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let b = json_file(&dir.join("main.json"));
    assert_eq!(b["earlier_runs"].as_array().map(Vec::len), Some(1), "two runs in the baseline");
    let r = quick_run(&dir, &[], &["--baseline", "main", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let c = tfbench(&[
        "compare",
        "--baseline-dir",
        dir.to_str().unwrap(),
        "--baseline",
        "main",
        "--against",
        dir.join("r.json").to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(c.code, 0, "{}", c.stderr);
    assert_eq!(json(&c)["runs"], serde_json::json!([2, 1]));
    // A baseline of another build: refused before running, file untouched.
    let mut b = b;
    b["report"]["environment"]["git_revision"] = serde_json::json!("0000000");
    let text = serde_json::to_string(&b).unwrap();
    std::fs::write(dir.join("main.json"), &text).unwrap();
    let r = quick_run(&dir, &[], &["--save-baseline", "main", "--append"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("cannot --append to baseline `main`"), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(dir.join("main.json")).unwrap(), text);
    // And a baseline whose runs mix builds is refused by compare.
    let c = tfbench(&[
        "compare",
        "--baseline",
        dir.join("main.json").to_str().unwrap(),
        "--against",
        dir.join("r.json").to_str().unwrap(),
    ]);
    assert_eq!(c.code, 2);
    assert!(c.stderr.contains("runs come from different builds"), "{}", c.stderr);
}
