//! Captures facts about the build that the binary cannot learn at run time:
//! the git revision of the source, the compiler version and the enabled cargo
//! features. `src/env.rs` reads them back with `env!`.

use std::path::Path;
use std::process::Command;

fn main() {
    // AVX-512 intrinsics and the detection of the newer AVX-512 extensions
    // were stabilised in Rust 1.89, the crate's MSRV (Cargo.toml), so that
    // code is compiled unconditionally.
    let rustc_version = rustc_version();
    println!("cargo::rustc-env=TFBENCH_RUSTC_VERSION={rustc_version}");
    println!("cargo::rustc-env=TFBENCH_GIT_REVISION={}", git_revision());
    println!("cargo::rustc-env=TFBENCH_FEATURES={}", enabled_features());
    emit_rerun_triggers();
}

/// `rustc --version` of the compiler building this crate (cargo passes it as
/// `RUSTC`, which may be a wrapper-resolved path rather than plain `rustc`).
fn rustc_version() -> String {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}

/// Short commit hash, with "-dirty" when tracked files differ from it.
fn git_revision() -> String {
    let Some(rev) = git(&["rev-parse", "--short", "HEAD"]).filter(|r| !r.is_empty()) else {
        return "unknown".to_string();
    };
    // --no-optional-locks: a build must never rewrite the user's index.
    // Untracked files are ignored, as `git describe --dirty` does.
    match git(&["--no-optional-locks", "status", "--porcelain", "--untracked-files=no"]) {
        Some(status) if !status.is_empty() => format!("{rev}-dirty"),
        _ => rev,
    }
}

/// Enabled features of this package, comma-separated, so new ones (e.g.
/// `cuda`) show up without a list to maintain. `CARGO_CFG_FEATURE` keeps the
/// original spelling; older cargo only sets `CARGO_FEATURE_<NAME>`, which is
/// upper-cased with `-` turned into `_`.
fn enabled_features() -> String {
    let mut features: Vec<String> = match std::env::var("CARGO_CFG_FEATURE") {
        Ok(list) => list.split(',').filter(|f| !f.is_empty()).map(str::to_string).collect(),
        Err(_) => std::env::vars()
            .filter_map(|(key, _)| key.strip_prefix("CARGO_FEATURE_").map(str::to_lowercase))
            .collect(),
    };
    features.sort();
    features.join(",")
}

fn emit_rerun_triggers() {
    println!("cargo::rerun-if-changed=build.rs");
    // Any explicit trigger disables cargo's default "rerun when any package
    // file changes", which the dirty marker relies on; restore it for sources.
    println!("cargo::rerun-if-changed=src");
    println!("cargo::rerun-if-changed=Cargo.toml");
    // Ask git for the paths so worktrees and a relocated GIT_DIR also work.
    let mut git_paths = vec!["HEAD".to_string(), "index".to_string(), "packed-refs".to_string()];
    if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]).filter(|r| !r.is_empty()) {
        git_paths.push(head_ref);
    }
    for name in git_paths {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            // A trigger on a missing file makes cargo rerun the script on
            // every build, so only existing files are watched.
            if Path::new(&path).exists() {
                println!("cargo::rerun-if-changed={path}");
            }
        }
    }
}
