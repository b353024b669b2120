//! The probe's cache: one file per machine and thread count, written
//! atomically.

use super::MachineLimits;
use anyhow::{Context, Result, ensure};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Where probe results are cached: `$TFBENCH_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/tfbench`, else `$HOME/.cache/tfbench`, else
/// `./.tfbench-cache`.
pub fn cache_dir() -> PathBuf {
    cache_dir_from(|key| std::env::var_os(key))
}

pub(super) fn cache_dir_from(var: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    let var = |key| var(key).filter(|v| !v.is_empty());
    if let Some(dir) = var("TFBENCH_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    // The XDG spec says relative values are invalid and must be ignored.
    if let Some(dir) = var("XDG_CACHE_HOME").map(PathBuf::from).filter(|p| p.is_absolute()) {
        return dir.join("tfbench");
    }
    if let Some(home) = var("HOME") {
        return PathBuf::from(home).join(".cache").join("tfbench");
    }
    PathBuf::from(".tfbench-cache")
}

fn cache_file(dir: &Path, fingerprint: &str, threads: usize) -> Result<PathBuf> {
    // The fingerprint becomes part of a file name; one read back from a file
    // or typed by a user must not be able to point outside the cache.
    ensure!(
        !fingerprint.is_empty()
            && fingerprint.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
        "invalid machine fingerprint {fingerprint:?}"
    );
    ensure!(threads > 0, "a probe has at least one thread");
    Ok(dir.join(format!("probe-{fingerprint}-t{threads}.json")))
}

/// Writes `limits` to the cache as `probe-<fingerprint>-t<threads>.json` and returns the
/// path. The write is atomic: readers see the old file or the new one, never
/// a partial one.
pub fn save(limits: &MachineLimits) -> Result<PathBuf> {
    save_in(&cache_dir(), limits)
}

pub(super) fn save_in(dir: &Path, limits: &MachineLimits) -> Result<PathBuf> {
    use std::io::Write;
    let path = cache_file(dir, &limits.fingerprint, limits.threads)?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating cache directory {}", dir.display()))?;
    let json = serde_json::to_string_pretty(limits).context("serialising machine limits")?;
    // Same directory as the target so the rename cannot cross file systems;
    // pid and time keep concurrent probes from sharing a temp file.
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(".probe-{}.{}.{nanos}.tmp", limits.fingerprint, std::process::id()));
    let written = (|| -> std::io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(json.as_bytes())?;
        file.write_all(b"\n")?;
        // Flushed before the rename, or a crash could leave an empty file
        // under the final name.
        file.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", path.display()));
    }
    Ok(path)
}

/// Loads the cached limits for `fingerprint` probed on `threads` threads:
/// `Ok(None)` when there are none, an error naming the file when it cannot
/// be read or parsed. A probe on other thread counts never answers: its
/// all-core figures are another machine's, as far as this run goes.
pub fn load(fingerprint: &str, threads: usize) -> Result<Option<MachineLimits>> {
    load_in(&cache_dir(), fingerprint, threads)
}

pub(super) fn load_in(dir: &Path, fingerprint: &str, threads: usize) -> Result<Option<MachineLimits>> {
    let path = cache_file(dir, fingerprint, threads)?;
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let limits: MachineLimits = serde_json::from_str(&text)
        .with_context(|| format!("corrupt probe cache {} (delete it or re-run the probe)", path.display()))?;
    ensure!(
        limits.fingerprint == fingerprint,
        "probe cache {} belongs to machine {}, not {fingerprint}",
        path.display(),
        limits.fingerprint
    );
    ensure!(
        limits.threads == threads,
        "probe cache {} holds a {}-thread probe, not a {threads}-thread one",
        path.display(),
        limits.threads
    );
    Ok(Some(limits))
}

/// The cached limits of this machine probed on `threads` threads, if any;
/// errors count as "none" because a run must not fail over an optional
/// figure.
pub fn load_for_this_machine(threads: usize) -> Option<MachineLimits> {
    load(&crate::env::Environment::gather().fingerprint(), threads).ok().flatten()
}
