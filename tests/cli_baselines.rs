//! Baselines, compare, history, merge and the HTML report through the binary.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

const SMALL: &str = "tensor/binary/op=(add|mul),shape=100x100$";

/// Runs the two small cases with `extra` args in `dir` (baselines under it).
fn run_in(dir: &Path, extra: &[&str]) -> Run {
    run_in_env(dir, &[], extra)
}

/// [`run_in`] with extra environment variables.
fn run_in_env(dir: &Path, env: &[(&str, &str)], extra: &[&str]) -> Run {
    let bdir = dir.join("baselines").display().to_string();
    let mut args =
        vec!["run", "--quick", "--no-probe", "--sample-size", "20", "--baseline-dir", &bdir, SMALL];
    args.extend_from_slice(extra);
    tfbench_env(env, &args)
}

/// Writes a copy of results `src` whose samples are replaced by 30
/// deterministic ones (1 us +- 1.5%) scaled by `factor`: comparisons of these
/// files do not depend on how noisy the machine was during the run.
fn synthetic_copy(src: &Path, dst: &Path, factor: f64) {
    let mut v = json_file(src);
    for c in v["cases"].as_array_mut().unwrap() {
        let samples: Vec<Value> = (0..30)
            .map(|k| {
                let per_iter = 1000.0 * (1.0 + 0.005 * (k % 7) as f64 - 0.015) * factor;
                serde_json::json!({"iterations": 100, "nanos": per_iter * 100.0, "round": 0})
            })
            .collect();
        c["samples"] = Value::Array(samples);
    }
    // A synthetic run of its own, not the source run again (a comparison of
    // a run with itself is refused as vacuous).
    v["run_id"] = Value::String(format!("synthetic-x{factor}"));
    // Nor does it carry the machine state of the run it was copied from: the
    // source run's load figures (other work on a busy machine) would set its
    // rounds aside as disturbed, and its canaries would measure a drift the
    // synthetic samples do not have. Set both explicitly: no load taken,
    // no canaries, so the verdicts depend on the samples above alone.
    v["load"] = Value::Array(Vec::new());
    v["canaries"] = Value::Array(Vec::new());
    // Thirty samples as a full profile takes them, not the --quick run's
    // budget (a comparison judges smoke-profile runs with a wide band).
    for s in v["harness"]["settings"].as_object_mut().unwrap().values_mut() {
        s["measurement_time"] = serde_json::json!(3.0);
    }
    std::fs::write(dst, serde_json::to_string(&v).unwrap()).unwrap();
}

#[test]
fn save_list_show_delete() {
    let dir = scratch("baseline-crud");
    let r = run_in(&dir, &["--save-baseline", "main", "-q"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let file = dir.join("baselines/main.json");
    let v = json_file(&file);
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["name"], "main");
    assert!(v["machine_fingerprint"].as_str().is_some_and(|f| !f.is_empty()));
    assert_eq!(v["report"]["cases"].as_array().unwrap().len(), 2);
    assert!(v["report"]["cases"][0]["samples"].as_array().unwrap().len() >= 3, "raw samples kept");

    let bdir = dir.join("baselines").display().to_string();
    let list = tfbench(&["baseline", "list", "--baseline-dir", &bdir]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    // The row names the baseline, its machine fingerprint and its case count.
    let fingerprint = v["machine_fingerprint"].as_str().unwrap();
    let row = list.stdout.lines().find(|l| l.contains(" main ")).unwrap_or_else(|| panic!("{}", list.stdout));
    assert!(row.contains(fingerprint), "{row}");
    let cells: Vec<&str> = row.split(['│', '┆']).map(str::trim).collect();
    assert!(cells.contains(&"2"), "case count in {row}");
    let show = tfbench(&["baseline", "show", "main", "--baseline-dir", &bdir]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(show.stdout.contains("tensor/binary/op=add,shape=100x100"));
    let del = tfbench(&["baseline", "delete", "main", "--baseline-dir", &bdir]);
    assert_eq!(del.code, 0);
    assert!(!file.exists());
    let gone = tfbench(&["baseline", "show", "main", "--baseline-dir", &bdir]);
    assert_eq!(gone.code, 2);
    assert!(gone.stderr.contains("not found"), "{}", gone.stderr);
}

#[test]
fn missing_and_corrupt_baselines_are_clear_errors() {
    let dir = scratch("baseline-errors");
    assert_eq!(run_in(&dir, &["--save-baseline", "good", "-q"]).code, 0);
    // A missing baseline fails before running and names the available ones.
    let r = run_in(&dir, &["--baseline", "nope"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("`nope` not found") && r.stderr.contains("good"), "{}", r.stderr);
    assert!(!r.stderr.contains("[1/"), "nothing ran");
    // A truncated file is named, never a panic.
    let bad = dir.join("baselines/bad.json");
    std::fs::write(&bad, "{\"schema_version\": 1, \"name\": \"bad\", \"rep").unwrap();
    let r = run_in(&dir, &["--baseline", "bad"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("bad.json") && !r.stderr.contains("panicked"), "{}", r.stderr);
    // Listing still works and flags the bad file.
    let bdir = dir.join("baselines").display().to_string();
    let list = tfbench(&["baseline", "list", "--baseline-dir", &bdir]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    assert!(list.stdout.contains("good") && list.stdout.contains("bad"), "{}", list.stdout);
    // Bad baseline names are refused before running.
    let r = run_in(&dir, &["--save-baseline", "../escape"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn compare_detects_a_slowdown_and_gates() {
    let dir = scratch("compare-gate");
    // Its own history folder: the default (baselines/history under the
    // working directory) may hold a developer's runs, which would lend
    // these comparisons a learned band.
    let hist = dir.join("history").display().to_string();
    let run = dir.join("run.json");
    assert_eq!(run_in(&dir, &["--output", &run.display().to_string(), "-q"]).code, 0);
    let base = dir.join("base.json");
    synthetic_copy(&run, &base, 1.0);
    let b = base.display().to_string();
    let slow = dir.join("slow.json");
    synthetic_copy(&run, &slow, 1.25);
    let s = slow.display().to_string();

    // A file against itself is a vacuous gate (issue 28): it fails unless
    // explicitly allowed, and then every case is unchanged.
    let vacuous = tfbench(&[
        "compare",
        "--history-dir",
        &hist,
        "--baseline",
        &b,
        "--against",
        &b,
        "--fail-on-regression",
        "-f",
        "json",
    ]);
    assert_eq!(vacuous.code, 1, "{}", vacuous.stderr);
    assert!(vacuous.stderr.contains("compared with itself"), "{}", vacuous.stderr);
    let same = tfbench(&[
        "compare",
        "--history-dir",
        &hist,
        "--baseline",
        &b,
        "--against",
        &b,
        "--fail-on-regression",
        "--allow-vacuous",
        "-f",
        "json",
    ]);
    assert_eq!(same.code, 0, "{}", same.stderr);
    let v = json(&same);
    // Identical samples give a ratio of exactly 1; one round of one run a
    // side replicates nothing above the samples, so the interval carries an
    // assumed run-to-run spread and the verdict claims no evidence either way
    // (issue 28: no "unchanged" whose interval leaves the band).
    for c in v["changes"].as_array().unwrap() {
        assert_eq!(c["ratio"]["point"], 1.0, "{c}");
        assert_eq!(c["verdict"], "inconclusive", "{c}");
    }

    let worse =
        tfbench(&["compare", "--history-dir", &hist, "--baseline", &b, "--against", &s, "-f", "json"]);
    assert_eq!(worse.code, 0, "no gate without --fail-on-regression: {}", worse.stderr);
    let v = json(&worse);
    for c in v["changes"].as_array().unwrap() {
        assert_eq!(c["verdict"], "regressed", "{c}");
        assert!((c["ratio"]["point"].as_f64().unwrap() - 1.25).abs() < 1e-6);
    }
    let gated = tfbench(&[
        "compare",
        "--history-dir",
        &hist,
        "--baseline",
        &b,
        "--against",
        &s,
        "--fail-on-regression",
    ]);
    assert_eq!(gated.code, 1, "{}", gated.stderr);
    assert!(gated.stdout.contains("regressed"), "{}", gated.stdout);
    // A slowdown under the limit is reported but does not gate.
    let lenient = tfbench(&[
        "compare",
        "--history-dir",
        &hist,
        "--baseline",
        &b,
        "--against",
        &s,
        "--fail-on-regression",
        "--max-regression",
        "30",
    ]);
    assert_eq!(lenient.code, 0, "{}", lenient.stderr);
    // The other direction is an improvement; markdown is PR-ready.
    let md = dir.join("cmp.md");
    let better = tfbench(&[
        "compare",
        "--history-dir",
        &hist,
        "--baseline",
        &s,
        "--against",
        &b,
        "-f",
        "markdown",
        "-o",
        &md.display().to_string(),
    ]);
    assert_eq!(better.code, 0);
    assert!(better.stdout.contains("2 improved"), "{}", better.stdout);
    assert_eq!(std::fs::read_to_string(&md).unwrap(), better.stdout);
}

/// `compare --fail-on-regression` of `base` against `cand` (files) with
/// `extra` args, in a history folder of its own.
fn gate(dir: &Path, base: &Path, cand: &Path, extra: &[&str]) -> Run {
    let hist = dir.join("history").display().to_string();
    let (b, c) = (base.display().to_string(), cand.display().to_string());
    let mut args =
        vec!["compare", "--history-dir", &hist, "--baseline", &b, "--against", &c, "--fail-on-regression"];
    args.extend_from_slice(extra);
    tfbench(&args)
}

#[test]
fn the_gate_fails_on_a_broken_candidate_case_and_on_cases_it_could_not_judge() {
    let dir = scratch("compare-gate-codes");
    let run = dir.join("run.json");
    assert_eq!(run_in(&dir, &["--output", &run.display().to_string(), "-q"]).code, 0);
    let (base, same, slow) = (dir.join("base.json"), dir.join("same.json"), dir.join("slow.json"));
    synthetic_copy(&run, &base, 1.0);
    synthetic_copy(&run, &same, 1.0001);
    synthetic_copy(&run, &slow, 1.25);

    // A wrong result on the candidate's side fails the gate with exit 3,
    // naming the case, the side and the reason, even beside a regression.
    let broken = dir.join("broken.json");
    let mut v = json_file(&slow);
    v["run_id"] = Value::String("synthetic-broken".into());
    let case = &mut v["cases"][0];
    case["status"] = serde_json::json!({"state": "failed", "phase": "verify", "reason": "max error 3.1 > tolerance 1e-6 (test)"});
    case["samples"] = Value::Array(Vec::new());
    let id = case["id"].as_str().unwrap().to_string();
    std::fs::write(&broken, serde_json::to_string(&v).unwrap()).unwrap();
    let r = gate(&dir, &base, &broken, &[]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!("{id}: failed on the candidate side: verify: max error 3.1")),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("regressed beyond the limits"), "the regression is named too: {}", r.stderr);
    assert!(r.stdout.contains(&format!("FAILED {id}")), "{}", r.stdout);
    // The same case broken in the baseline only: the candidate fixed it
    // (and the other case improved from 1.25 to 1).
    let r = gate(&dir, &broken, &base, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("failed on the baseline side only"), "{}", r.stdout);

    // Two synthetic single-round runs a hair apart: the interval carries an
    // assumed run-to-run spread, so no case is judged, and "could not
    // judge" is exit 4, never a pass; the comment says which and why.
    let md = dir.join("unjudged.md");
    let r = gate(&dir, &base, &same, &["-f", "markdown", "-o", &md.display().to_string()]);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(r.stderr.contains("could not judge 2 of 2 cases"), "{}", r.stderr);
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("could not judge 2 of 2") && text.contains("neither inside the band"), "{text}");
    assert_eq!(gate(&dir, &base, &same, &["--allow-inconclusive"]).code, 0);
    assert_eq!(gate(&dir, &base, &same, &["--max-unjudged", "100"]).code, 0);
    // A judged comparison passes; a --require'd case that is missing fails it.
    let r = gate(&dir, &base, &slow, &["--max-regression", "30"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = gate(&dir, &base, &slow, &["--max-regression", "30", "--require", "op=nosuch"]);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(r.stderr.contains("no case matches --require"), "{}", r.stderr);
    let r = gate(&dir, &base, &slow, &["--require", "("]);
    assert_eq!(r.code, 2, "a bad --require regex is a usage error: {}", r.stderr);
}

#[test]
fn run_with_baseline_gates_a_failing_case_with_exit_3() {
    let dir = scratch("run-baseline-failure");
    assert_eq!(run_in(&dir, &["--save-baseline", "main", "-q"]).code, 0);
    let gate = ["--baseline", "main", "--fail-on-regression", "--allow-inconclusive", "-q"];
    let r = run_in_env(&dir, &[("TFBENCH_INJECT_PANIC", "op=mul")], &gate);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("op=mul,shape=100x100: failed on the candidate side"), "{}", r.stderr);
}

#[test]
fn run_with_baseline_compares_in_one_go() {
    let dir = scratch("run-baseline");
    assert_eq!(run_in(&dir, &["--save-baseline", "main", "-q"]).code, 0);
    let md = dir.join("pr.md");
    let r = run_in(&dir, &["--baseline", "main", "--comparison-output", &md.display().to_string(), "-q"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("verdict"), "comparison table after the results: {}", r.stdout);
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("tensor/binary/op=add,shape=100x100"), "{text}");
}

#[test]
fn other_machines_warn_and_strict_refuses() {
    let dir = scratch("compare-machine");
    // Its own history folder: the default (baselines/history under the
    // working directory) may hold a developer's runs, which would lend
    // these comparisons a learned band.
    let hist = dir.join("history").display().to_string();
    let base = dir.join("base.json");
    let b = base.display().to_string();
    assert_eq!(run_in(&dir, &["--output", &b, "-q"]).code, 0);
    let mut v = json_file(&base);
    v["environment"]["cpu_model"] = serde_json::json!("Some Other CPU 9000");
    let other = dir.join("other.json");
    std::fs::write(&other, v.to_string()).unwrap();
    let o = other.display().to_string();
    let warn = tfbench(&["compare", "--history-dir", &hist, "--baseline", &o, "--against", &b]);
    assert_eq!(warn.code, 0, "{}", warn.stderr);
    assert!(warn.stderr.contains("different machines"), "{}", warn.stderr);
    let strict =
        tfbench(&["compare", "--history-dir", &hist, "--baseline", &o, "--against", &b, "--strict-machine"]);
    assert_eq!(strict.code, 2);
    assert!(strict.stderr.contains("--strict-machine"), "{}", strict.stderr);
}

#[test]
fn shards_merge_into_the_whole_plan() {
    let dir = scratch("shards");
    let filter = "tensor/binary/op=(add|mul|sub),shape=100x100$";
    let mut files = Vec::new();
    for i in 1..=2 {
        let f = dir.join(format!("shard{i}.json")).display().to_string();
        let shard = format!("{i}/2");
        let r = tfbench(&["run", "--quick", "--no-probe", "-q", "--shard", &shard, "--output", &f, filter]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        files.push(f);
    }
    let n1 = json_file(Path::new(&files[0]))["cases"].as_array().unwrap().len();
    let n2 = json_file(Path::new(&files[1]))["cases"].as_array().unwrap().len();
    assert_eq!((n1, n2), (2, 1));
    let all = dir.join("all.json").display().to_string();
    let m = tfbench(&["merge", &files[0], &files[1], "-o", &all]);
    assert_eq!(m.code, 0, "{}", m.stderr);
    let v = json_file(Path::new(&all));
    let mut ids: Vec<&str> =
        v["cases"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(
        ids,
        [
            "tensor/binary/op=add,shape=100x100",
            "tensor/binary/op=mul,shape=100x100",
            "tensor/binary/op=sub,shape=100x100"
        ]
    );
    // Overlapping shards are refused.
    let dup = tfbench(&["merge", &files[0], &files[0], "-o", &all]);
    assert_eq!(dup.code, 2);
    assert!(dup.stderr.contains("both"), "{}", dup.stderr);
}

#[test]
fn history_after_three_runs_and_html_report() {
    let dir = scratch("history");
    let hdir = dir.join("hist").display().to_string();
    for _ in 0..3 {
        let r = run_in(&dir, &["--history", "--history-dir", &hdir, "-q"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let files: Vec<_> = std::fs::read_dir(dir.join("hist")).unwrap().flatten().collect();
    assert_eq!(files.len(), 1, "one history file per machine");
    let lines = std::fs::read_to_string(files[0].path()).unwrap();
    assert_eq!(lines.lines().count(), 3);
    let h = tfbench(&["history", "--history-dir", &hdir, "-f", "json", "op=add"]);
    assert_eq!(h.code, 0, "{}", h.stderr);
    let v = json(&h);
    let trends = v["cases"].as_array().expect("trend list");
    assert_eq!(trends.len(), 1);
    assert_eq!(trends[0]["points"].as_array().unwrap().len(), 3);
    let t = tfbench(&["history", "--history-dir", &hdir]);
    assert!(t.stdout.chars().any(|c| ('\u{2581}'..='\u{2588}').contains(&c)), "sparkline: {}", t.stdout);

    let res = dir.join("r.json").display().to_string();
    assert_eq!(run_in(&dir, &["--output", &res, "-q"]).code, 0);
    let html = dir.join("report.html");
    let r = tfbench(&["report", &res, "--html", &html.display().to_string(), "--history-dir", &hdir]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") || page.starts_with("<!doctype html>"), "{}", &page[..80]);
    assert!(page.contains("<svg") && page.contains("tensor/binary/op=add,shape=100x100"));
    assert!(!page.contains("<script") && !page.contains("https://"));
}
