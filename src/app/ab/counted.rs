//! `tfbench ab --measure instructions`: each build counts every case once
//! (`run --measure instructions`, under callgrind); the counts are judged
//! against the count band (`compare::counts`). Counts are deterministic,
//! so there are no rounds to alternate and no pairs: the machine's drift
//! cannot move them.

use crate::cli::AbArgs;
use crate::compare::{self, CompareOptions, Comparison};
use crate::results::RunReport;
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;

/// `KEY=VALUE` pairs set in one build's environment.
type Env = [(String, String)];

/// Counts the plan with both builds and compares the counts.
pub(super) fn ab_counted(
    args: &AbArgs,
    (base_env, head_env): (&Env, &Env),
    opts: &CompareOptions,
) -> Result<Comparison> {
    let dir = std::env::temp_dir().join(format!("tfbench-ab-counted-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let counted = (|| -> Result<(RunReport, RunReport)> {
        let base = count_with("base", &args.base, base_env, args, &dir.join("base.json"))?;
        let head = count_with("head", &args.head, head_env, args, &dir.join("head.json"))?;
        Ok((base, head))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    let (base, head) = counted?;
    let (old, new) = (std::slice::from_ref(&base), std::slice::from_ref(&head));
    compare::counts::check(old, new).map_err(anyhow::Error::msg)?;
    let mut c = compare::counts::compare(
        &args.base.display().to_string(),
        old,
        &args.head.display().to_string(),
        new,
        opts,
    );
    c.notes.push(format!(
        "each build counted every case once under callgrind (tfbench {} base, tfbench {} head)",
        base.tfbench_version, head.tfbench_version
    ));
    Ok(c)
}

/// Runs `exe run --measure instructions` on the plan, writing `out`, and
/// reads it back.
fn count_with(
    label: &str,
    exe: &Path,
    env: &[(String, String)],
    args: &AbArgs,
    out: &Path,
) -> Result<RunReport> {
    let mut words = vec![
        "run".to_string(),
        "--measure".into(),
        "instructions".into(),
        "--no-live".into(),
        "--no-probe".into(),
        "-o".into(),
        out.display().to_string(),
    ];
    if args.quiet {
        words.push("-q".into());
    }
    words.extend(super::protocol::plan_args(&args.plan));
    if !args.quiet {
        eprintln!("{label}: counting instructions with {} ...", exe.display());
    }
    let status = Command::new(exe)
        .args(&words)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(std::process::Stdio::null())
        .status()
        .with_context(|| format!("starting the {label} build {}", exe.display()))?;
    // 0: counted; 3: some case failed, the results were still written.
    if !matches!(status.code(), Some(0 | 3)) || !out.is_file() {
        bail!(
            "the {label} build ({}) could not count the plan ({status}); a build from before --measure instructions cannot",
            exe.display()
        );
    }
    crate::baseline::load_results(out)
}
