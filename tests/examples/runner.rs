//! The runner behind tests/examples.rs: a sandbox with a wrapper `tfbench`,
//! and GitHub-workflow and shell-step execution as a runner would do it.

use super::{BIN, FAST, FAST_AB, FILTER, ROOT, common};
use regex::Regex;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Tools a step may call that these tests cannot run (builds, package
/// installs, network, the GitHub CLI, cluster and container tools).
pub(super) const UNRUNNABLE: &str =
    r"(?m)(^|[\s;&|(])(cargo|sudo|apt-get|gh|docker|podman|kubectl|curl|wget|pip|npm)\s";

/// A scratch area with the wrapper `tfbench`, a log of its invocations, the
/// probe cache and the artifact store.
pub(super) struct Sandbox {
    pub(super) dir: PathBuf,
    pub(super) wrapper_dir: PathBuf,
    pub(super) log: PathBuf,
}

impl Sandbox {
    pub(super) fn new(name: &str) -> Sandbox {
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

    pub(super) fn workspace(&self, name: &str) -> PathBuf {
        let ws = self.dir.join("ws").join(name);
        let _ = fs::remove_dir_all(&ws);
        fs::create_dir_all(&ws).unwrap();
        ws
    }

    /// The command lines the wrapper was called with, in order.
    pub(super) fn invocations(&self) -> Vec<String> {
        fs::read_to_string(&self.log).unwrap_or_default().lines().map(str::to_string).collect()
    }

    /// Runs a script as `argv + [script]` in `cwd`, `tfbench` being the wrapper.
    pub(super) fn shell(
        &self,
        argv: &[&str],
        script: &str,
        cwd: &Path,
        env: &BTreeMap<String, String>,
    ) -> StepRun {
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

pub(super) struct StepRun {
    pub(super) code: i32,
    pub(super) stdout: String,
    pub(super) stderr: String,
}

pub(super) fn read_example(rel: &str) -> String {
    fs::read_to_string(Path::new(ROOT).join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

pub(super) fn yaml(rel: &str) -> Value {
    serde_saphyr::from_str(&read_example(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

pub(super) fn yaml_documents(rel: &str) -> Vec<Value> {
    serde_saphyr::from_multiple(&read_example(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The case ids the wrapper's selection expands to (the unsharded plan).
pub(super) fn expected_ids() -> BTreeSet<String> {
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
pub(super) fn result_ids(path: &Path) -> Vec<String> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    v["cases"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap().to_string()).collect()
}

pub(super) fn assert_all_ok(path: &Path) {
    let v: Value = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    for c in v["cases"].as_array().unwrap() {
        assert_eq!(c["status"]["state"], "ok", "{}: {}", path.display(), c["id"]);
    }
}

/// Copies a file or folder; symbolic links are recreated, not followed (the
/// build stand-in is a link to this build's binary).
pub(super) fn copy_tree(from: &Path, to: &Path) {
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
pub(super) fn expand(text: &str, ctx: &BTreeMap<&str, String>) -> String {
    let re = Regex::new(r"\$\{\{\s*(.*?)\s*\}\}").unwrap();
    re.replace_all(text, |c: &regex::Captures| {
        ctx.get(&c[1])
            .cloned()
            .unwrap_or_else(|| panic!("no value for the expression ${{{{ {} }}}} in {text:?}", &c[1]))
    })
    .into_owned()
}

pub(super) fn env_map(v: &Value, ctx: &BTreeMap<&str, String>) -> BTreeMap<String, String> {
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
pub(super) enum Step {
    Ran { name: String },
    Skipped { name: String },
}

/// Runs one job (one matrix entry) of a GitHub Actions workflow in `ws`.
/// A step must exit 0, or 1 or 4 when it has `--fail-on-regression` (a
/// regression verdict, or "could not judge": valid outcomes of the gate on a
/// noisy machine with the tests' few samples).
pub(super) fn run_github_job(
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
            r.code == 0 || (gate && (r.code == 1 || r.code == 4)),
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
pub(super) fn checkout(dir: &Path) {
    fs::create_dir_all(dir.join("target/release")).unwrap();
    for d in ["configs", "suites", "scripts", "examples"] {
        std::os::unix::fs::symlink(Path::new(ROOT).join(d), dir.join(d)).unwrap();
    }
    std::os::unix::fs::symlink(BIN, dir.join("target/release/tfbench")).unwrap();
}

pub(super) fn ran(steps: &[Step], fragment: &str) -> bool {
    steps.iter().any(|s| matches!(s, Step::Ran { name } if name.contains(fragment)))
}

pub(super) fn skipped(steps: &[Step], fragment: &str) -> bool {
    steps.iter().any(|s| matches!(s, Step::Skipped { name } if name.contains(fragment)))
}

pub(super) fn has_ab() -> bool {
    Command::new(BIN).args(["ab", "--help"]).output().map(|o| o.status.success()).unwrap_or(false)
}
