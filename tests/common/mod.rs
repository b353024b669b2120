//! Shared helpers for the integration tests: run the real binary.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The output of one tfbench invocation.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// A per-test scratch folder under the target dir (removed and recreated).
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Runs tfbench with `args`, its probe cache in `cache` (so tests never
/// touch the user's cache and never probe unless asked).
pub fn tfbench_in(cache: &Path, args: &[&str]) -> Run {
    tfbench_in_env(cache, &[], args)
}

/// [`tfbench_in`] with extra environment variables.
fn tfbench_in_env(cache: &Path, env: &[(&str, &str)], args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tfbench"));
    // COLUMNS would narrow the results table (tests that want that set it).
    cmd.args(args).env("TFBENCH_CACHE_DIR", cache).env("NO_COLOR", "1").env_remove("COLUMNS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out: Output = cmd.output().expect("run tfbench");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs tfbench with an empty probe cache.
pub fn tfbench(args: &[&str]) -> Run {
    tfbench_env(&[], args)
}

/// Runs tfbench with an empty probe cache and extra environment variables.
pub fn tfbench_env(env: &[(&str, &str)], args: &[&str]) -> Run {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("empty-cache");
    tfbench_in_env(&cache, env, args)
}

/// The run's stdout as JSON; anything else fails the test, showing both streams.
pub fn json(r: &Run) -> Value {
    serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}\n{}", r.stdout, r.stderr))
}

/// Runs tfbench with `args` and reads its stdout as JSON (see [`json`]).
pub fn run_json(args: &[&str]) -> (Run, Value) {
    let r = tfbench(args);
    let v = json(&r);
    (r, v)
}

/// `run --suite SUITE --quick --no-probe --sample-size SAMPLES --format json`
/// with `extra` (a filter, a config, ...), its stdout read as JSON.
pub fn suite_json(suite: &str, samples: &str, extra: &[&str]) -> (Run, Value) {
    let mut args =
        vec!["run", "--suite", suite, "--quick", "--no-probe", "--sample-size", samples, "--format", "json"];
    args.extend_from_slice(extra);
    run_json(&args)
}

/// A JSON file (results, a baseline) read back.
pub fn json_file(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).expect("read")).expect("json")
}

/// The value of the case's metric `name`, if it reports one.
pub fn metric(case: &Value, name: &str) -> Option<f64> {
    case["metrics"].as_array()?.iter().find(|m| m["name"] == name)?["value"].as_f64()
}

/// A quick run of `filter` with the given extra args; `--no-probe` keeps it fast.
pub fn quick_run(filter: &str, extra: &[&str]) -> Run {
    let mut args = vec!["run", "--suite", "tensor", "--quick", "--no-probe", "--sample-size", "5", filter];
    args.extend_from_slice(extra);
    tfbench(&args)
}

/// Writes `text` to `dir/name` and returns the path as a string.
pub fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write fixture");
    p.display().to_string()
}

/// A usage error (exit 2): nothing on stdout, every needle on stderr, no panic.
pub fn assert_usage_error(r: &Run, needles: &[&str]) {
    assert_eq!(r.code, 2, "exit code; stderr: {}", r.stderr);
    assert!(r.stdout.is_empty(), "nothing on stdout on error: {}", r.stdout);
    for n in needles {
        assert!(r.stderr.contains(n), "stderr lacks {n:?}: {}", r.stderr);
    }
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

/// The skip reason the case `id` must carry on this machine, derived from
/// the CPU's features under this process's `TFBENCH_MAX_ISA` (which the
/// binary inherits), or `None` when it must run: a named int8 path
/// (`path=avx_vnni`) needs its instructions, tfbench's GEMM
/// (`impl=tfbench`) AVX2 and FMA, its packed form AVX-512F. Nothing assumes the developer's CPU.
pub fn expected_isa_skip(id: &str) -> Option<String> {
    let params = id.rsplit('/').next().unwrap_or("");
    for kv in params.split(',') {
        match kv.split_once('=') {
            Some(("path", p)) if p != "auto" => {
                let path = tfbench::kernels::quant::Int8Path::parse(p).expect("a valid int8 path");
                return path.unavailable().map(|why| format!("path={p}: {why}"));
            }
            Some(("impl", "tfbench")) => {
                return tfbench::kernels::sgemm::unavailable_reason()
                    .map(|why| format!("impl=tfbench needs AVX2 and FMA (or AVX-512F): {why}"));
            }
            Some(("impl", name @ "tfbench-packed")) => {
                return tfbench::isa::unavailable(&tfbench::kernels::sgemm::FEATURES)
                    .map(|why| format!("impl={name} needs AVX-512F: {why}"));
            }
            _ => {}
        }
    }
    None
}

/// Asserts `case` (a results JSON case) ran and verified, or was skipped
/// with exactly the reason [`expected_isa_skip`] derives for it.
pub fn assert_ok_or_isa_skip(case: &Value) {
    let id = case["id"].as_str().expect("id");
    match expected_isa_skip(id) {
        None => {
            assert_eq!(case["status"]["state"], "ok", "{id}: {}", case["status"]);
            assert_eq!(case["verification"]["passed"], true, "{id}");
        }
        Some(why) => {
            assert_eq!(case["status"]["state"], "skipped", "{id} must be skipped here: {why}");
            assert_eq!(case["status"]["reason"], why.as_str(), "{id}");
        }
    }
}

/// `sysinfo`'s CUDA section: `None` when GPUs are listed, else the reason
/// there are none (the CUDA tests branch on it).
pub fn no_gpu_reason() -> Option<String> {
    let (r, v) = run_json(&["sysinfo", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cuda = &v["cuda"];
    assert!(cuda["libraries"]["nvrtc"].is_string() && cuda["bindings_cuda_version"] == "13.0", "{cuda}");
    match cuda["gpus"].as_array().map(Vec::len) {
        Some(n) if n > 0 => None,
        _ => Some(cuda["unavailable"].as_str().expect("a reason when no GPU is listed").to_string()),
    }
}

/// Every case id of a `list --format json`.
pub fn listed_ids(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for s in v["suites"].as_array().expect("suites") {
        for b in s["benchmarks"].as_array().expect("benchmarks") {
            for c in b["cases"].as_array().expect("cases") {
                out.push(c["id"].as_str().expect("id").to_string());
            }
        }
    }
    out
}

/// Walks the results of a `run --device cpu,cuda`: every CPU case must be
/// ok; every `cuda:0` case skipped with the driver's reason where `no_gpu`
/// says there is no GPU, else ok. Returns the number of CPU cases and the
/// GPU cases, for the caller's own checks of those that ran.
pub fn cpu_and_gpu_cases<'a>(v: &'a Value, no_gpu: &Option<String>) -> (usize, Vec<&'a Value>) {
    let (mut cpu, mut gpu) = (0, Vec::new());
    for c in v["cases"].as_array().expect("cases") {
        let id = c["id"].as_str().expect("id");
        let state = c["status"]["state"].as_str().expect("state");
        if !id.contains("device=cuda:0") {
            assert_eq!(state, "ok", "{id}: {c}");
            cpu += 1;
            continue;
        }
        match no_gpu {
            Some(why) => {
                assert_eq!(state, "skipped", "{id}");
                assert_eq!(c["status"]["reason"].as_str(), Some(format!("cuda:0: {why}").as_str()), "{id}");
            }
            None => {
                assert_eq!(state, "ok", "{id}: {c}");
                assert_eq!(c["verification"]["passed"], true, "{id}");
            }
        }
        gpu.push(c);
    }
    (cpu, gpu)
}
