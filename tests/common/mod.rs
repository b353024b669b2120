//! Shared helpers for the integration tests: run the real binary.
#![allow(dead_code)]

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
    let out: Output = Command::new(env!("CARGO_BIN_EXE_tfbench"))
        .args(args)
        .env("TFBENCH_CACHE_DIR", cache)
        .env("NO_COLOR", "1")
        .output()
        .expect("run tfbench");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs tfbench with an empty probe cache.
pub fn tfbench(args: &[&str]) -> Run {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("empty-cache");
    tfbench_in(&cache, args)
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
