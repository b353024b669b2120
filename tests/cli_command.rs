//! The `command` suite through the real binary: `[[command]]` tables from a
//! config file, timed as processes; failures that name the command while
//! the other cases still run; bad tables refused with file, line and key;
//! and the BMF and github-action-benchmark exports.

mod common;
use common::*;
use serde_json::Value;

/// A fast harness for process timing: a few samples, no warm-up to speak of.
const FAST: &[&str] = &[
    "--no-probe",
    "--no-canary",
    "--sample-size",
    "5",
    "--warm-up-time",
    "0.01",
    "--measurement-time",
    "0.3",
];

const GOOD: &str = r#"
[[command]]
name = "count"
description = "wc -l over a generated file"
argv = ["wc", "-l", "{tmpdir}/in.txt"]
setup = "seq {n} > {tmpdir}/in.txt"
stdout_regex = '^{n} '
params = { n = [10, 1000] }

[[command]]
name = "digest"
argv = ["printf", "abc"]
stdout_sha256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
"#;

fn run_config(dir: &std::path::Path, name: &str, text: &str, extra: &[&str]) -> Run {
    let cfg = write(dir, name, text);
    let mut args = vec!["run", "--config", cfg.as_str()];
    args.extend_from_slice(FAST);
    args.extend_from_slice(extra);
    tfbench(&args)
}

fn case<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no {id}: {v}"))
}

#[test]
fn checked_commands_run_as_processes_with_their_cpu_and_memory() {
    let dir = scratch("cmd-good");
    let cfg = write(&dir, "c.toml", GOOD);
    let listed = tfbench(&["list", "--config", &cfg]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    for id in ["command/count/n=10", "command/count/n=1000", "command/digest"] {
        assert!(listed.stdout.contains(id), "{}", listed.stdout);
    }
    // A config with [[command]] tables and no suite list runs only them.
    let r = run_config(&dir, "c.toml", GOOD, &["--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    assert_eq!(v["cases"].as_array().unwrap().len(), 3, "{v}");
    for id in ["command/count/n=10", "command/count/n=1000", "command/digest"] {
        let c = case(&v, id);
        assert_eq!(c["status"]["state"], "ok", "{c}");
        assert_eq!(c["verification"]["passed"], true);
        assert!(
            c["samples"].as_array().unwrap().iter().all(|s| s["iterations"] == 1),
            "one process per sample"
        );
        assert!(c["estimates"]["median"]["point"].as_f64().unwrap() > 1e4, "a process takes more than 10 us");
        assert!(metric(c, "user_cpu").is_some() && metric(c, "system_cpu").is_some(), "{c}");
        assert!(metric(c, "peak_rss").unwrap() > 1e5, "{c}");
    }
    assert!(
        case(&v, "command/count/n=1000")["verification"]["reference"].as_str().unwrap().contains("^1000 ")
    );
}

#[test]
fn failing_commands_fail_their_case_naming_the_command_and_the_rest_still_run() {
    let dir = scratch("cmd-failures");
    let text = r#"
[[command]]
name = "wrong_exit"
argv = ["sh", "-c", "echo broken >&2; exit 4"]

[[command]]
name = "missing"
argv = ["tfbench-no-such-command", "--flag"]

[[command]]
name = "hangs"
argv = ["sh", "-c", "sleep 60 & sleep 60"]

[[command]]
name = "bad_output"
argv = ["echo", "hello"]
stdout_regex = "^goodbye"

[[command]]
name = "fine"
argv = ["true"]
"#;
    let out = dir.join("results.json");
    let out_s = out.display().to_string();
    let t = std::time::Instant::now();
    let r = run_config(&dir, "f.toml", text, &["--max-time", "0.5", "--output", &out_s]);
    assert!(t.elapsed().as_secs() < 30, "the hang was cut: {:?}", t.elapsed());
    assert_eq!(r.code, 3, "case failures exit 3: {}", r.stderr);
    // With --output, stdout shows the table: every case is in the file.
    assert!(r.stdout.contains("4 failed"), "{}", r.stdout);
    let v = json_file(&out);
    let failed = |id: &str, needles: &[&str]| {
        let c = case(&v, id);
        assert_eq!(c["status"]["state"], "failed", "{c}");
        let reason = c["status"]["reason"].as_str().unwrap();
        for n in needles {
            assert!(reason.contains(n), "{id}: {reason:?} lacks {n:?}");
        }
    };
    failed(
        "command/wrong_exit",
        &["`sh -c 'echo broken >&2; exit 4'` exited with code 4, expected 0", "broken"],
    );
    failed("command/missing", &["`tfbench-no-such-command` not found"]);
    failed("command/hangs", &["`sh -c 'sleep 60 & sleep 60'` was still running after 0.500 s", "killed"]);
    failed("command/bad_output", &["does not match /^goodbye/", "hello"]);
    assert_eq!(case(&v, "command/fine")["status"]["state"], "ok");
    assert_eq!(v["cases"].as_array().unwrap().len(), 5, "nothing lost");
}

#[test]
fn bad_command_tables_name_file_line_and_key_and_write_nothing() {
    let dir = scratch("cmd-bad");
    let out = dir.join("never.json");
    let out_s = out.display().to_string();
    let bad = |name: &str, text: &str, needles: &[&str]| {
        let p = write(&dir, name, text);
        for args in [
            vec!["run", "--config", p.as_str(), "--no-probe", "--output", out_s.as_str()],
            vec!["list", "--config", p.as_str()],
        ] {
            assert_usage_error(&tfbench(&args), needles);
        }
        assert!(!out.exists(), "nothing written for {name}");
    };
    let head = "[run]\nthreads = 1\n\n[[command]]\nname = \"ok\"\nargv = [\"true\"]\n\n[[command]]\nname = \"bad\"\n";
    bad("empty.toml", &format!("{head}argv = []\n"), &["empty.toml:10:1", "`argv`", "argv is empty"]);
    bad(
        "unknown.toml",
        &format!("{head}argv = [\"true\"]\nargz = [\"x\"]\n"),
        &["unknown.toml:11:1", "unknown field `argz`", "argv"],
    );
    bad(
        "unused.toml",
        &format!("{head}argv = [\"echo\", \"n\"]\n[command.params]\nsize = [1, 2]\n"),
        &["unused.toml:12:1", "`size`", "never used"],
    );
    bad(
        "unused.yaml",
        "command:\n  - name: ok\n    argv: [\"true\"]\n  - name: bad\n    argv: [echo]\n    params:\n      size: [1]\n",
        &["unused.yaml:7:7", "`size`", "never used"],
    );
    bad(
        "nocmd.toml",
        "[run]\nsuites = [\"command\"]\n",
        &["nocmd.toml:2:1", "suite `command` has no commands"],
    );
}

#[test]
fn exports_follow_bencher_and_github_action_benchmark_field_names() {
    let dir = scratch("cmd-exports");
    // BMF: {benchmark: {measure: {value, lower_value?, upper_value?}}}.
    let r = run_config(&dir, "c.toml", GOOD, &["--format", "bmf"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    let benchmarks = v.as_object().expect("an object of benchmarks");
    assert_eq!(benchmarks.len(), 3, "{v}");
    for (name, measures) in benchmarks {
        assert!(name.starts_with("command/"), "{name}");
        let latency = &measures["latency"];
        assert!(latency["value"].as_f64().unwrap() > 0.0, "{name}: {measures}");
        assert!(latency["lower_value"].is_number() && latency["upper_value"].is_number(), "{measures}");
        for (measure, m) in measures.as_object().unwrap() {
            for (k, x) in m.as_object().unwrap() {
                assert!(["value", "lower_value", "upper_value"].contains(&k.as_str()), "{measure}.{k}");
                assert!(x.is_number());
            }
        }
        assert!(measures["peak_rss"]["value"].as_f64().unwrap() > 0.0, "{measures}");
    }
    // customSmallerIsBetter: [{name, unit, value, range?, extra?}].
    let r = run_config(&dir, "c.toml", GOOD, &["--format", "custom-smaller-is-better"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    let entries = v.as_array().expect("an array");
    assert_eq!(entries.len(), 3, "{v}");
    for e in entries {
        let o = e.as_object().unwrap();
        assert!(o.keys().all(|k| ["name", "unit", "value", "range", "extra"].contains(&k.as_str())), "{e}");
        assert_eq!(e["unit"], "ns");
        assert!(e["name"].as_str().unwrap().starts_with("command/") && e["value"].as_f64().unwrap() > 0.0);
        assert!(e["range"].as_str().unwrap().starts_with("± "), "{e}");
    }
    // The action's own spelling works too; commands declare no work, so
    // the bigger-is-better file is empty.
    let r = run_config(&dir, "c.toml", GOOD, &["--format", "customBiggerIsBetter"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json(&r), serde_json::json!([]));
}

#[test]
fn command_results_save_and_compare_as_baselines() {
    let dir = scratch("cmd-baseline");
    let base = dir.join("baselines").display().to_string();
    let text = "[[command]]\nname = \"t\"\nargv = [\"true\"]\n";
    let r = run_config(&dir, "t.toml", text, &["--baseline-dir", &base, "--save-baseline", "a", "--quiet"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = run_config(
        &dir,
        "t.toml",
        text,
        &["--baseline-dir", &base, "--baseline", "a", "--quiet", "--allow-vacuous"],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("command/t"), "{}", r.stdout);
}

#[test]
fn ab_pairs_two_builds_on_commands() {
    let dir = scratch("cmd-ab");
    let cfg = write(&dir, "t.toml", "[[command]]\nname = \"t\"\nargv = [\"true\"]\n");
    let bin = env!("CARGO_BIN_EXE_tfbench");
    let r = tfbench(&[
        "ab",
        "--base",
        bin,
        "--head",
        bin,
        "--config",
        &cfg,
        "--sample-size",
        "10",
        "--warm-up-time",
        "0.01",
        "--measurement-time",
        "0.3",
        "--format",
        "json",
        "--quiet",
    ]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v = json(&r);
    assert!(v["changes"].as_array().unwrap().iter().any(|c| c["id"] == "command/t"), "{v}");
}
