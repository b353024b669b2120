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

use regex::Regex;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// Tools a step may call that these tests cannot run (builds, package
/// installs, network, the GitHub CLI, cluster and container tools).
const UNRUNNABLE: &str = r"(?m)(^|[\s;&|(])(cargo|sudo|apt-get|gh|docker|podman|kubectl|curl|wget|pip|npm)\s";

/// A scratch area with the wrapper `tfbench`, a log of its invocations, the
/// probe cache and the artifact store.
struct Sandbox {
    dir: PathBuf,
    wrapper_dir: PathBuf,
    log: PathBuf,
}

impl Sandbox {
    fn new(name: &str) -> Sandbox {
        let dir = common::scratch(name);
        let wrapper_dir = dir.join("wrapper");
        fs::create_dir_all(&wrapper_dir).unwrap();
        fs::create_dir_all(dir.join("artifacts")).unwrap();
        fs::create_dir_all(dir.join("cache")).unwrap();
        let log = dir.join("invocations.log");
        let wrapper = wrapper_dir.join("tfbench");
        fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\n\
                 # tests/examples.rs: this build, with a fast selection in `run` and `ab`.\n\
                 printf '%s\\n' \"$*\" >> '{log}'\n\
                 case \"$1\" in\n\
                 run) shift; exec '{BIN}' run '{FILTER}' {FAST} \"$@\" ;;\n\
                 ab) shift; exec '{BIN}' ab '{FILTER}' {FAST_AB} \"$@\" ;;\n\
                 esac\n\
                 exec '{BIN}' \"$@\"\n",
                log = log.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
        Sandbox { dir, wrapper_dir, log }
    }

    fn workspace(&self, name: &str) -> PathBuf {
        let ws = self.dir.join("ws").join(name);
        let _ = fs::remove_dir_all(&ws);
        fs::create_dir_all(&ws).unwrap();
        ws
    }

    /// The command lines the wrapper was called with, in order.
    fn invocations(&self) -> Vec<String> {
        fs::read_to_string(&self.log).unwrap_or_default().lines().map(str::to_string).collect()
    }

    /// Runs a script as `argv + [script]` in `cwd`, `tfbench` being the wrapper.
    fn shell(&self, argv: &[&str], script: &str, cwd: &Path, env: &BTreeMap<String, String>) -> StepRun {
        let path = format!("{}:{}", self.wrapper_dir.display(), std::env::var("PATH").unwrap_or_default());
        let mut cmd = Command::new(argv[0]);
        cmd.args(&argv[1..]).arg(script).current_dir(cwd).env("PATH", path);
        cmd.env("TFBENCH_CACHE_DIR", self.dir.join("cache")).env("NO_COLOR", "1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap_or_else(|e| panic!("cannot start {argv:?}: {e}"));
        StepRun {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

struct StepRun {
    code: i32,
    stdout: String,
    stderr: String,
}

fn read_example(rel: &str) -> String {
    fs::read_to_string(Path::new(ROOT).join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn yaml(rel: &str) -> Value {
    serde_saphyr::from_str(&read_example(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn yaml_documents(rel: &str) -> Vec<Value> {
    serde_saphyr::from_multiple(&read_example(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The case ids the wrapper's selection expands to (the unsharded plan).
fn expected_ids() -> BTreeSet<String> {
    let r = common::tfbench(&["list", "--suite", "tensor", "--format", "json", FILTER]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let list = common::json(&r);
    let ids: BTreeSet<String> = list["suites"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["benchmarks"].as_array().unwrap())
        .flat_map(|b| b["cases"].as_array().unwrap())
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 6, "the fast selection should be six cases: {ids:?}");
    ids
}

/// Case ids of a results file, in file order (duplicates kept).
fn result_ids(path: &Path) -> Vec<String> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    v["cases"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap().to_string()).collect()
}

fn assert_all_ok(path: &Path) {
    let v: Value = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    for c in v["cases"].as_array().unwrap() {
        assert_eq!(c["status"]["state"], "ok", "{}: {}", path.display(), c["id"]);
    }
}

/// Copies a file or folder; symbolic links are recreated, not followed (the
/// build stand-in is a link to this build's binary).
fn copy_tree(from: &Path, to: &Path) {
    let meta = fs::symlink_metadata(from).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    if meta.file_type().is_symlink() {
        let target = fs::read_link(from).unwrap();
        let _ = fs::remove_file(to);
        std::os::unix::fs::symlink(target, to).unwrap();
    } else if meta.is_dir() {
        fs::create_dir_all(to).unwrap();
        for entry in fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        fs::copy(from, to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
    }
}

/// Values a runner gives the expressions the examples use; an expression
/// missing here fails the test, so a new one gets a value deliberately.
fn expand(text: &str, ctx: &BTreeMap<&str, String>) -> String {
    let re = Regex::new(r"\$\{\{\s*(.*?)\s*\}\}").unwrap();
    re.replace_all(text, |c: &regex::Captures| {
        ctx.get(&c[1])
            .cloned()
            .unwrap_or_else(|| panic!("no value for the expression ${{{{ {} }}}} in {text:?}", &c[1]))
    })
    .into_owned()
}

fn env_map(v: &Value, ctx: &BTreeMap<&str, String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(m) = v.as_object() {
        for (k, val) in m {
            let s = match val {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            out.insert(k.clone(), expand(&s, ctx));
        }
    }
    out
}

/// What happened to each step of a job, for the tests' messages and checks.
#[derive(Debug)]
enum Step {
    Ran { name: String },
    Skipped { name: String },
}

/// Runs one job (one matrix entry) of a GitHub Actions workflow in `ws`.
/// A step must exit 0, or 1 when it has `--fail-on-regression` (a
/// regression verdict, a valid outcome of the gate on a noisy machine).
fn run_github_job(
    sb: &Sandbox,
    workflow: &Value,
    job: &str,
    ws: &Path,
    ctx: &BTreeMap<&str, String>,
) -> Vec<Step> {
    let def = &workflow["jobs"][job];
    assert!(def.is_object(), "no job {job}");
    let shell = workflow["defaults"]["run"]["shell"].as_str().or(def["defaults"]["run"]["shell"].as_str());
    assert_eq!(shell, Some("bash"), "the examples' scripts are bash (defaults.run.shell)");
    let unrunnable = Regex::new(UNRUNNABLE).unwrap();
    let mut env = env_map(&workflow["env"], ctx);
    env.extend(env_map(&def["env"], ctx));
    let files = sb.dir.join("github").join(ws.file_name().unwrap());
    fs::create_dir_all(&files).unwrap();
    for (var, file) in [
        ("GITHUB_PATH", "path"),
        ("GITHUB_STEP_SUMMARY", "summary.md"),
        ("GITHUB_OUTPUT", "output"),
        ("GITHUB_ENV", "env"),
    ] {
        let f = files.join(file);
        fs::write(&f, "").unwrap();
        env.insert(var.into(), f.display().to_string());
    }
    env.insert("GITHUB_WORKSPACE".into(), ws.display().to_string());
    env.insert("GITHUB_REPOSITORY".into(), "example/tfbench".into());
    let mut steps = Vec::new();
    for step in def["steps"].as_array().unwrap() {
        let with = |key: &str| step["with"][key].as_str().map(|s| expand(s, ctx));
        if let Some(uses) = step["uses"].as_str() {
            let name = uses.to_string();
            if uses.starts_with("actions/checkout@") {
                checkout(&ws.join(with("path").unwrap_or_default()));
            } else if uses.starts_with("actions/upload-artifact@") {
                let artifact = sb.dir.join("artifacts").join(with("name").expect("artifact name"));
                fs::create_dir_all(&artifact).unwrap();
                for p in with("path").expect("artifact path").lines().map(str::trim).filter(|p| !p.is_empty())
                {
                    let src = ws.join(p);
                    assert!(src.exists(), "{job}: upload-artifact path {p} does not exist");
                    if src.is_dir() {
                        copy_tree(&src, &artifact);
                    } else {
                        copy_tree(&src, &artifact.join(src.file_name().unwrap()));
                    }
                }
            } else if uses.starts_with("actions/download-artifact@") {
                let dest = ws.join(with("path").unwrap_or_default());
                let store = sb.dir.join("artifacts");
                if let Some(name) = with("name") {
                    let src = store.join(&name);
                    assert!(src.is_dir(), "{job}: no artifact {name} was uploaded before");
                    copy_tree(&src, &dest);
                } else {
                    let pattern = with("pattern").expect("download-artifact needs name or pattern");
                    let prefix = pattern.strip_suffix('*').expect("only `prefix*` patterns are modelled");
                    let merge = step["with"]["merge-multiple"].as_bool().unwrap_or(false);
                    let mut found = 0;
                    for entry in fs::read_dir(&store).unwrap() {
                        let entry = entry.unwrap();
                        let name = entry.file_name().to_string_lossy().into_owned();
                        if name.starts_with(prefix) {
                            found += 1;
                            copy_tree(&entry.path(), &if merge { dest.clone() } else { dest.join(&name) });
                        }
                    }
                    assert!(found > 0, "{job}: no artifact matches {pattern}");
                }
            } else {
                steps.push(Step::Skipped { name });
                continue;
            }
            steps.push(Step::Ran { name });
            continue;
        }
        let script = step["run"].as_str().expect("a step has `uses` or `run`");
        let name = step["name"].as_str().unwrap_or(script.lines().next().unwrap_or_default()).to_string();
        if unrunnable.is_match(script) {
            steps.push(Step::Skipped { name });
            continue;
        }
        assert!(!script.contains("${{"), "{job}/{name}: pass expressions through env:, not inside run:");
        let mut step_env = env.clone();
        step_env.extend(env_map(&step["env"], ctx));
        // GitHub's `shell: bash` is `bash --noprofile --norc -eo pipefail {0}`.
        let r = sb.shell(&["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"], script, ws, &step_env);
        let gate = script.contains("--fail-on-regression");
        assert!(
            r.code == 0 || (gate && r.code == 1),
            "{job}/{name} exited {}:\n{script}\n--- stdout\n{}\n--- stderr\n{}",
            r.code,
            r.stdout,
            r.stderr
        );
        steps.push(Step::Ran { name });
    }
    steps
}

/// `actions/checkout` and the skipped build: the project's files the commands
/// read, and `target/release/tfbench` linking to this build.
fn checkout(dir: &Path) {
    fs::create_dir_all(dir.join("target/release")).unwrap();
    for d in ["configs", "suites", "scripts", "examples"] {
        std::os::unix::fs::symlink(Path::new(ROOT).join(d), dir.join(d)).unwrap();
    }
    std::os::unix::fs::symlink(BIN, dir.join("target/release/tfbench")).unwrap();
}

fn ran(steps: &[Step], fragment: &str) -> bool {
    steps.iter().any(|s| matches!(s, Step::Ran { name } if name.contains(fragment)))
}

fn skipped(steps: &[Step], fragment: &str) -> bool {
    steps.iter().any(|s| matches!(s, Step::Skipped { name } if name.contains(fragment)))
}

fn has_ab() -> bool {
    Command::new(BIN).args(["ab", "--help"]).output().map(|o| o.status.success()).unwrap_or(false)
}

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
