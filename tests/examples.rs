//! The CI and fleet examples work as written: these tests read the example
//! files themselves (examples/ci/*.yml, examples/k8s/*.yaml), run their shell
//! steps in the order a runner would, and check what the tfbench commands in
//! them produce.
//!
//! How a workflow is run here:
//! - `tfbench` on the PATH is a wrapper around this build that inserts a fast
//!   selection into `run` and `ab` (six tensor cases, a few short samples), so
//!   a whole workflow takes seconds; every other argument is the example's.
//! - A step whose script calls a tool a test cannot run (cargo, apt-get, gh,
//!   docker, ...) is skipped; `actions/checkout` stands in for the checkout and
//!   for the build (`target/release/tfbench` links to this build), and
//!   `actions/upload-artifact` / `download-artifact` move files between the
//!   job workspaces as GitHub does. Other `uses:` steps are skipped.
//! - Each job (each matrix entry) gets a fresh workspace; `${{ }}` expressions
//!   in `env:` and `with:` are given the values a runner would; a `run:`
//!   script must not contain any (the examples pass them through `env:`).
//! - Kubernetes containers run their `command` + `args` with the Job's
//!   environment, JOB_COMPLETION_INDEX set per index, the volume mounts and
//!   the image's /opt/tfbench mapped to folders here.
//!
//! The PR job calls `tfbench ab`; with a build that has no `ab` subcommand
//! (`tfbench ab --help` fails: an older build), that job is skipped with a
//! message.

mod common;
#[path = "examples/runner.rs"]
mod runner;
use runner::*;

use regex::Regex;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

const BIN: &str = env!("CARGO_BIN_EXE_tfbench");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Six fast tensor cases (four bit-exact binary ops on 100x100, two unary ops
/// on 1M values): at least one per shard of the examples' four.
const FILTER: &str =
    r"tensor/(binary/op=(add|sub|mul|div),shape=100x100|unary/elements=1048576,op=(relu|sqrt))$";
/// Harness settings that make each case take a fraction of a second (the
/// command line wins over the examples' configs/ci.toml).
const FAST: &str = "--sample-size 5 --warm-up-time 0.01 --measurement-time 0.05 --max-time 0.3 --no-probe";
/// The same for `ab`, which never probes (it judges paired ratios, not % of peak).
const FAST_AB: &str = "--sample-size 5 --warm-up-time 0.01 --measurement-time 0.05 --max-time 0.3";

#[test]
fn pr_job_runs_base_and_head_alternating_and_writes_the_comment() {
    let wf = yaml("examples/ci/github-actions.yml");
    let script = wf["jobs"]["pr"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["run"].as_str())
        .collect::<String>();
    assert!(
        Regex::new(r"tfbench ab --base \S+ --head \S+").unwrap().is_match(&script),
        "the PR job compares the two builds with `tfbench ab --base ... --head ...`"
    );
    if !has_ab() {
        eprintln!(
            "SKIPPED: this tfbench has no `ab` subcommand (`tfbench ab --help` fails); the PR job's ab step runs once it has"
        );
        return;
    }
    let sb = Sandbox::new("examples-pr");
    let ws = sb.workspace("pr");
    let ctx = BTreeMap::from([
        ("github.event.pull_request.base.sha", "0000000".to_string()),
        ("github.event.pull_request.number", "1".to_string()),
        ("github.token", "unused".to_string()),
    ]);
    let steps = run_github_job(&sb, &wf, "pr", &ws, &ctx);
    assert!(ran(&steps, "alternating"), "{steps:?}");
    assert!(sb.invocations().iter().any(|l| l.starts_with("ab ")), "{:?}", sb.invocations());
    let md = fs::read_to_string(ws.join("out/comparison.md"))
        .expect("the ab step writes out/comparison.md for the comment");
    for id in expected_ids() {
        assert!(md.contains(&id), "the PR comment does not name {id}:\n{md}");
    }
}

#[test]
fn nightly_job_starts_without_a_baseline_then_compares_and_keeps_history() {
    let wf = yaml("examples/ci/github-actions.yml");
    let sb = Sandbox::new("examples-nightly");
    let ctx = BTreeMap::from([("github.run_id", "1".to_string())]);
    let ids = expected_ids();

    // First night: an empty store (the cache restore found nothing).
    let ws1 = sb.workspace("night1");
    let steps = run_github_job(&sb, &wf, "nightly", &ws1, &ctx);
    assert!(ran(&steps, "record the history"), "{steps:?}");
    assert!(skipped(&steps, "Build") && skipped(&steps, "actions/cache/restore"), "{steps:?}");
    assert!(ws1.join("bench-store/nightly.json").is_file(), "the first night saves the baseline");
    assert!(!ws1.join("out/comparison.md").exists(), "nothing to compare with on the first night");
    let summary = fs::read_to_string(sb.dir.join("github/night1/summary.md")).unwrap();
    assert!(summary.contains("No stored nightly baseline yet"), "{summary}");
    assert_eq!(result_ids(&ws1.join("out/results.json")).into_iter().collect::<BTreeSet<_>>(), ids);
    assert_all_ok(&ws1.join("out/results.json"));

    // Second night: the store the cache kept.
    let ws2 = sb.workspace("night2");
    copy_tree(&ws1.join("bench-store"), &ws2.join("bench-store"));
    run_github_job(&sb, &wf, "nightly", &ws2, &BTreeMap::from([("github.run_id", "2".to_string())]));
    let md = fs::read_to_string(ws2.join("out/comparison.md")).expect("the second night compares");
    assert!(md.contains("baseline `nightly`"), "{md}");
    for id in &ids {
        assert!(md.contains(id.as_str()), "comparison does not name {id}:\n{md}");
    }
    let summary = fs::read_to_string(sb.dir.join("github/night2/summary.md")).unwrap();
    assert!(summary.contains("baseline `nightly`"), "the comparison goes to the job summary: {summary}");
    // configs/ci.toml records every run: two nights, two runs in the history.
    let history = fs::read_dir(ws2.join("bench-store/history"))
        .unwrap()
        .next()
        .expect("a history file")
        .unwrap()
        .path();
    let runs = fs::read_to_string(&history).unwrap().lines().filter(|l| !l.trim().is_empty()).count();
    assert_eq!(runs, 2, "{}", history.display());
    let table = fs::read_to_string(ws2.join("out/history.txt")).unwrap();
    for id in &ids {
        assert!(table.contains(id.as_str()), "history table lacks {id}:\n{table}");
    }
    let calls = sb.invocations();
    assert_eq!(calls.iter().filter(|l| l.starts_with("run ")).count(), 2, "{calls:?}");
    assert_eq!(calls.iter().filter(|l| l.starts_with("history ")).count(), 2, "{calls:?}");
}

/// Jobs in an order that respects `needs`.
fn job_order(wf: &Value) -> Vec<String> {
    let jobs = wf["jobs"].as_object().unwrap();
    let mut done: Vec<String> = Vec::new();
    while done.len() < jobs.len() {
        let before = done.len();
        for (name, def) in jobs {
            let needs: Vec<&str> = match &def["needs"] {
                Value::String(s) => vec![s.as_str()],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            if !done.contains(name) && needs.iter().all(|n| done.iter().any(|d| d == n)) {
                done.push(name.clone());
            }
        }
        assert!(done.len() > before, "cyclic or unknown `needs` in {:?}", jobs.keys());
    }
    done
}

#[test]
fn matrix_shards_merge_into_the_whole_plan() {
    let wf = yaml("examples/ci/github-actions-matrix.yml");
    let sb = Sandbox::new("examples-matrix");
    let order = job_order(&wf);
    assert_eq!(order, ["build", "shard", "merge"]);
    let shards: Vec<String> = wf["jobs"]["shard"]["strategy"]["matrix"]["shard"]
        .as_array()
        .expect("a shard matrix")
        .iter()
        .map(|v| v.to_string())
        .collect();
    for job in &order {
        let entries: Vec<Option<&String>> = if wf["jobs"][job]["strategy"].is_object() {
            shards.iter().map(Some).collect()
        } else {
            vec![None]
        };
        for entry in entries {
            let mut ctx = BTreeMap::from([("strategy.job-total", shards.len().to_string())]);
            if let Some(s) = entry {
                ctx.insert("matrix.shard", s.clone());
            }
            let ws = sb.workspace(&format!("{job}-{}", entry.map_or("0", |s| s.as_str())));
            run_github_job(&sb, &wf, job, &ws, &ctx);
        }
    }
    let calls = sb.invocations();
    for (i, s) in shards.iter().enumerate() {
        assert!(
            calls.iter().any(|l| l.contains(&format!("--shard {s}/{}", shards.len()))),
            "shard {i}: {calls:?}"
        );
    }
    // Every case of the unsharded plan exactly once, from disjoint shards.
    let ws = sb.dir.join("ws/merge-0");
    let mut seen = BTreeSet::new();
    for s in &shards {
        let ids = result_ids(&ws.join(format!("shards/shard-{s}.json")));
        assert!(!ids.is_empty(), "shard {s} ran no case");
        for id in ids {
            assert!(seen.insert(id.clone()), "{id} ran in two shards");
        }
    }
    let merged = result_ids(&ws.join("merged.json"));
    assert_eq!(
        merged.len(),
        merged.iter().collect::<BTreeSet<_>>().len(),
        "duplicates in merged.json: {merged:?}"
    );
    assert_eq!(merged.into_iter().collect::<BTreeSet<_>>(), expected_ids());
    assert_eq!(seen, expected_ids());
    assert_all_ok(&ws.join("merged.json"));
    let report = fs::read_to_string(ws.join("report.html")).unwrap();
    assert!(report.contains("<html") && report.contains("tensor/binary/op=add,shape=100x100"));
    // The merged files reached the uploaded artifact.
    assert!(sb.dir.join("artifacts/tfbench-merged/merged.json").is_file());
}

/// Runs a Kubernetes Job's single container as its pod would: command + args,
/// its env plus `extra`, mount paths and the image's /opt/tfbench mapped to
/// folders here.
fn run_k8s_job(sb: &Sandbox, job: &Value, volumes: &Path, extra: &[(&str, String)]) -> StepRun {
    let spec = &job["spec"]["template"]["spec"];
    let containers = spec["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    let command: Vec<&str> =
        c["command"].as_array().expect("command").iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(command, ["/bin/sh", "-c"], "the examples run a shell script");
    let mut script = c["args"][0].as_str().expect("the script in args").to_string();
    for m in c["volumeMounts"].as_array().unwrap() {
        let mount = m["mountPath"].as_str().unwrap();
        let dir = volumes.join(m["name"].as_str().unwrap());
        fs::create_dir_all(&dir).unwrap();
        script = script.replace(mount, &dir.display().to_string());
    }
    // The image's layout (Dockerfile): configs and suites under /opt/tfbench.
    script = script.replace("/opt/tfbench/", &format!("{ROOT}/"));
    let mut env = BTreeMap::new();
    for e in c["env"].as_array().map(Vec::as_slice).unwrap_or_default() {
        env.insert(e["name"].as_str().unwrap().to_string(), e["value"].as_str().unwrap().to_string());
    }
    for (k, v) in extra {
        env.insert(k.to_string(), v.clone());
    }
    let cwd = sb.workspace(&format!("pod-{}", extra.first().map_or("merge".into(), |e| e.1.clone())));
    let r = sb.shell(&command, &script, &cwd, &env);
    assert_eq!(
        r.code, 0,
        "{}:\n{script}\n--- stdout\n{}\n--- stderr\n{}",
        job["metadata"]["name"], r.stdout, r.stderr
    );
    r
}

#[test]
fn kubernetes_indexed_job_shards_merge_into_the_whole_plan() {
    let sb = Sandbox::new("examples-k8s");
    let docs = yaml_documents("examples/k8s/indexed-job.yaml");
    let jobs: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Job").collect();
    assert_eq!(jobs.len(), 1);
    let job = jobs[0];
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    let n = spec["completions"].as_u64().unwrap();
    assert_eq!(spec["parallelism"].as_u64(), Some(n), "all shards at once");
    let c = &spec["template"]["spec"]["containers"][0];
    let shards_env =
        c["env"].as_array().unwrap().iter().find(|e| e["name"] == "SHARDS").expect("SHARDS in env");
    assert_eq!(shards_env["value"].as_str(), Some(n.to_string().as_str()), "SHARDS must equal completions");
    let claim =
        spec["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"].as_str().unwrap();
    assert!(docs.iter().any(|d| d["kind"] == "PersistentVolumeClaim" && d["metadata"]["name"] == claim));

    let volumes = sb.dir.join("volumes");
    for index in 0..n {
        run_k8s_job(&sb, job, &volumes, &[("JOB_COMPLETION_INDEX", index.to_string())]);
    }
    let merge_docs = yaml_documents("examples/k8s/merge-job.yaml");
    let merge = merge_docs.iter().find(|d| d["kind"] == "Job").expect("the merge Job");
    assert_eq!(
        merge["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"].as_str(),
        Some(claim)
    );
    run_k8s_job(&sb, merge, &volumes, &[]);

    let calls = sb.invocations();
    for i in 1..=n {
        assert!(calls.iter().any(|l| l.contains(&format!("--shard {i}/{n}"))), "--shard {i}/{n}: {calls:?}");
    }
    let results = volumes.join("results");
    let mut seen = BTreeSet::new();
    for index in 0..n {
        for id in result_ids(&results.join(format!("shard-{index}.json"))) {
            assert!(seen.insert(id.clone()), "{id} ran in two shards");
        }
    }
    let merged = result_ids(&results.join("merged.json"));
    assert_eq!(merged.len(), seen.len(), "{merged:?}");
    assert_eq!(merged.into_iter().collect::<BTreeSet<_>>(), expected_ids());
    assert_all_ok(&results.join("merged.json"));
    assert!(fs::read_to_string(results.join("report.html")).unwrap().contains("<html"));
}

/// Every tfbench command in the examples sits in a step the tests above run
/// (not one skipped for calling cargo, gh, ...), so none goes unchecked.
#[test]
fn every_tfbench_command_in_the_examples_is_exercised() {
    let unrunnable = Regex::new(UNRUNNABLE).unwrap();
    let command = Regex::new(r"(?m)^\s*tfbench\s+(\w+)").unwrap();
    let mut subcommands = BTreeSet::new();
    for file in ["examples/ci/github-actions.yml", "examples/ci/github-actions-matrix.yml"] {
        let wf = yaml(file);
        for (job, def) in wf["jobs"].as_object().unwrap() {
            for step in def["steps"].as_array().unwrap() {
                let Some(script) = step["run"].as_str() else { continue };
                if command.is_match(script) {
                    assert!(
                        !unrunnable.is_match(script),
                        "{file} {job}: a step with tfbench calls a tool the test skips:\n{script}"
                    );
                }
                subcommands.extend(command.captures_iter(script).map(|c| c[1].to_string()));
            }
        }
    }
    for file in ["examples/k8s/indexed-job.yaml", "examples/k8s/merge-job.yaml"] {
        for doc in yaml_documents(file).iter().filter(|d| d["kind"] == "Job") {
            for c in doc["spec"]["template"]["spec"]["containers"].as_array().unwrap() {
                let script = c["args"][0].as_str().unwrap_or_default();
                subcommands.extend(command.captures_iter(script).map(|c| c[1].to_string()));
            }
        }
    }
    // A tfbench line anywhere else (a `run:` outside a step, a comment) is not
    // executed: every line starting with tfbench must be one of the above.
    for file in [
        "examples/ci/github-actions.yml",
        "examples/ci/github-actions-matrix.yml",
        "examples/k8s/indexed-job.yaml",
        "examples/k8s/merge-job.yaml",
    ] {
        for line in read_example(file).lines().map(str::trim).filter(|l| l.starts_with("tfbench ")) {
            let sub = line.split_whitespace().nth(1).unwrap();
            assert!(subcommands.contains(sub), "{file}: {line}");
        }
    }
    let want: BTreeSet<String> =
        ["ab", "history", "merge", "report", "run"].iter().map(|s| s.to_string()).collect();
    assert_eq!(subcommands, want);
}
