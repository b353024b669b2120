//! One case of the `command` suite: a `[[command]]` table at one point of
//! its grid, run as processes. Verification runs setup, prepare, the
//! command (its stdout kept and checked) and cleanup; each timed run is one
//! process, bracketed by prepare and cleanup outside the clock
//! ([`Workload::before_sample`] / [`Workload::after_sample`]).

use super::process::{self, Ended, Sink, Spawn, Usage, Watchdog};
use super::spec::{CommandLine, CommandSpec, TMPDIR, shell_words};
use crate::workload::{Metric, Throughput, Verification, Workload};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// A folder per case (`{tmpdir}` and the captured output), removed on drop.
struct CaseDir(PathBuf);

impl CaseDir {
    fn new() -> Result<Self> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tfbench-cmd-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tmp"))
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for CaseDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A prepared command case.
pub struct CommandWorkload {
    argv: Vec<String>,
    setup: Option<Vec<String>>,
    prepare: Option<Vec<String>>,
    cleanup: Option<Vec<String>>,
    env: Vec<(String, String)>,
    exit_code: i32,
    stdout_regex: Option<regex::Regex>,
    stdout_sha256: Option<String>,
    limit: Option<(Duration, Watchdog)>,
    /// Why the time limit could not be armed (reported by `verify`).
    limit_error: Option<String>,
    /// Usage of the runs of the current `run` call, kept until the harness
    /// says whether they were a sample.
    pending: Vec<Usage>,
    /// Usage of every measured run.
    measured: Vec<Usage>,
    dir: CaseDir,
}

impl CommandWorkload {
    /// The case of `spec` with `params` substituted.
    pub fn new(spec: &CommandSpec, params: &BTreeMap<String, String>) -> Result<Self> {
        let dir = CaseDir::new()?;
        let mut vars = params.clone();
        vars.insert(TMPDIR.into(), dir.0.join("tmp").display().to_string());
        let line = |l: &Option<CommandLine>| l.as_ref().map(|l| l.argv(&vars));
        let stdout_regex = spec
            .stdout_regex
            .as_ref()
            .map(|r| {
                let r = super::spec::substitute(r, &vars);
                regex::Regex::new(&r).with_context(|| format!("stdout_regex {r:?}"))
            })
            .transpose()?;
        Ok(Self {
            argv: spec.argv.argv(&vars),
            setup: line(&spec.setup),
            prepare: line(&spec.prepare),
            cleanup: line(&spec.cleanup),
            env: spec.env.iter().map(|(k, v)| (k.clone(), super::spec::substitute(v, &vars))).collect(),
            exit_code: spec.exit_code,
            stdout_regex,
            stdout_sha256: spec.stdout_sha256.as_ref().map(|h| h.to_ascii_lowercase()),
            limit: None,
            limit_error: None,
            pending: Vec::new(),
            measured: Vec::new(),
            dir,
        })
    }

    fn stderr_path(&self) -> PathBuf {
        self.dir.0.join("stderr")
    }

    /// Runs `argv` (the `role` command) to its end; anything but the
    /// expected exit code is an error naming the command, with the end of
    /// its stderr.
    fn run_checked(&self, role: &str, argv: &[String], stdout: Sink<'_>, expect: i32) -> Result<Usage> {
        let stderr = self.stderr_path();
        let spawn = Spawn { argv, env: &self.env, stdout, stderr: Sink::File(&stderr) };
        let shown = shell_words(argv);
        let (ended, usage) = process::run(&spawn, self.limit.as_ref().map(|(d, w)| (*d, w)))
            .with_context(|| format!("{role} command `{shown}`"))?;
        let tail = || {
            let text = std::fs::read(&stderr).unwrap_or_default();
            let text = String::from_utf8_lossy(&text);
            let lines: Vec<&str> = text.trim_end().lines().collect();
            let last = lines[lines.len().saturating_sub(3)..].join(" | ");
            if last.is_empty() { String::new() } else { format!("; stderr: {last}") }
        };
        match ended {
            Ended::Exited(c) if c == expect => Ok(usage),
            Ended::Exited(c) => {
                let hint = match c {
                    127 => " (127: the shell found no such command)",
                    126 => " (126: the shell could not execute it)",
                    _ => "",
                };
                bail!("{role} command `{shown}` exited with code {c}{hint}, expected {expect}{}", tail())
            }
            Ended::Signaled(s) => bail!("{role} command `{shown}` was killed by signal {s}{}", tail()),
            Ended::TimedOut => bail!(
                "{role} command `{shown}` was still running after {:.3} s (--max-time) and was killed with its process group",
                self.limit.as_ref().map_or(0.0, |(d, _)| d.as_secs_f64())
            ),
        }
    }

    fn hook(&self, role: &str, argv: &Option<Vec<String>>) -> Result<()> {
        match argv {
            Some(a) => self.run_checked(role, a, Sink::Null, 0).map(|_| ()),
            None => Ok(()),
        }
    }
}

/// This process's peak resident set size (`VmHWM`), bytes.
fn own_peak_rss() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024.0)
}

/// Lower-case hex SHA-256 of `bytes`, as `sha256sum` prints it.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

impl Workload for CommandWorkload {
    fn verify(&mut self) -> Result<Verification> {
        if let Some(e) = &self.limit_error {
            bail!("cannot enforce --max-time: {e}");
        }
        self.hook("setup", &self.setup)?;
        self.hook("prepare", &self.prepare)?;
        let out = self.dir.0.join("stdout");
        self.run_checked("the", &self.argv, Sink::File(&out), self.exit_code)?;
        self.hook("cleanup", &self.cleanup)?;
        let stdout = std::fs::read(&out).context("reading the command's stdout")?;
        let shown = shell_words(&self.argv);
        let mut reference = format!("`{shown}` exits with {}", self.exit_code);
        let mut detail = format!("stdout {} bytes", stdout.len());
        if let Some(re) = &self.stdout_regex {
            reference.push_str(&format!(", stdout matches /{re}/"));
            let text = String::from_utf8_lossy(&stdout);
            if !re.is_match(&text) {
                let head: String = text.chars().take(200).collect();
                return Ok(Verification {
                    passed: false,
                    reference,
                    max_error: None,
                    detail: format!("stdout of `{shown}` does not match /{re}/; it begins {head:?}"),
                });
            }
        }
        if let Some(want) = &self.stdout_sha256 {
            reference.push_str(&format!(", stdout sha256 {want}"));
            let got = sha256_hex(&stdout);
            if &got != want {
                return Ok(Verification {
                    passed: false,
                    reference,
                    max_error: None,
                    detail: format!(
                        "stdout of `{shown}` has sha256 {got}, expected {want} ({} bytes)",
                        stdout.len()
                    ),
                });
            }
        }
        if self.stdout_regex.is_none() && self.stdout_sha256.is_none() {
            detail.push_str("; no output check configured (stdout_regex, stdout_sha256)");
        }
        Ok(Verification { passed: true, reference, max_error: None, detail })
    }

    fn throughput(&self) -> Vec<Throughput> {
        Vec::new()
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            let usage = self.run_checked("the", &self.argv, Sink::Null, self.exit_code)?;
            self.pending.push(usage);
        }
        Ok(())
    }

    fn fixed_iterations(&self) -> Option<u64> {
        // One process per sample, as hyperfine times it: prepare and
        // cleanup then bracket every run.
        Some(1)
    }

    fn before_sample(&mut self) -> Result<()> {
        self.pending.clear();
        self.hook("prepare", &self.prepare)
    }

    fn after_sample(&mut self, measured: bool) -> Result<()> {
        if measured {
            self.measured.append(&mut self.pending);
        }
        self.pending.clear();
        self.hook("cleanup", &self.cleanup)
    }

    fn set_time_limit(&mut self, limit: Duration) {
        match Watchdog::new() {
            Ok(w) => self.limit = Some((limit, w)),
            Err(e) => self.limit_error = Some(format!("{e:#}")),
        }
    }

    fn metrics(&mut self) -> Vec<Metric> {
        if self.measured.is_empty() {
            return Vec::new();
        }
        let median = |f: fn(&Usage) -> f64| {
            let mut v: Vec<f64> = self.measured.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            crate::stats::quantile_sorted(&v, 0.5)
        };
        let mut out = vec![
            Metric::new("user_cpu", median(|u| u.user_ns), "ns"),
            Metric::new("system_cpu", median(|u| u.sys_ns), "ns"),
            Metric::new("peak_rss", median(|u| u.max_rss_bytes), "B"),
        ];
        // Linux carries the spawning process's peak RSS into the child's
        // at exec (the child starts on tfbench's memory), so `peak_rss` is
        // at least tfbench's own peak: reported beside it, so a figure
        // equal to it reads as "at most this", not as the command's.
        if let Some(floor) = own_peak_rss() {
            out.push(Metric::new("peak_rss_floor", floor, "B"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_matches_the_published_test_vector() {
        // FIPS 180-2, appendix B.1.
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
