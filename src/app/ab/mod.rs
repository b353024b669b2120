//! `tfbench ab`: a paired A/B run of two builds on one machine in one job.
//!
//! The driver starts each build as a worker (`tfbench ab-worker`, the same
//! plan options) and talks to it over its stdin/stdout, one JSON object per
//! line. For every case and round both workers prepare, verify and warm up
//! the case; then the driver asks for samples alternately, A B B A A B ...,
//! with the same iteration count, so each pair of samples was taken back to
//! back and whatever the machine does over seconds hits both alike. The
//! pairs are judged by [`crate::compare::paired`]; the output is the usual
//! comparison and gate.
//!
//! Protocol ([`PROTOCOL`]): the worker greets with [`Hello`]; then each
//! [`Request`] gets one [`Reply`]. A build that does not speak it (built
//! before `ab` existed), or a plan that differs between the builds, is
//! refused before anything is measured.

use super::{Outcome, check_writable, compare_options};
use crate::cli::AbArgs;
use crate::compare::{self, paired::PairedCase};
use crate::config::Settings;
use anyhow::{Context, Result, anyhow, bail};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

mod protocol;
mod worker;

pub use protocol::{Hello, PROTOCOL, Reply, Request};
use protocol::{plan_args, resolve_plan};
pub use worker::ab_worker;

/// One running worker.
struct Worker {
    label: &'static str,
    path: std::path::PathBuf,
    env: Vec<(String, String)>,
    args: Vec<String>,
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    hello: Hello,
}

impl Worker {
    fn start(label: &'static str, path: &Path, env: &[(String, String)], args: &[String]) -> Result<Self> {
        let mut child = Command::new(path)
            .arg("ab-worker")
            .args(args)
            .envs(env.iter().cloned())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start the {label} build {}", path.display()))?;
        let (Some(input), Some(out)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("no pipes to the {label} build");
        };
        let mut output = BufReader::new(out);
        let mut line = String::new();
        output.read_line(&mut line).ok();
        let hello: Hello = serde_json::from_str(line.trim()).map_err(|_| {
            let _ = child.kill();
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            anyhow!(
                "the {label} build {} does not speak `tfbench ab`'s protocol (it {status}; built before `ab` existed, or its plan options failed: see its message above)",
                path.display()
            )
        })?;
        Ok(Self {
            label,
            path: path.into(),
            env: env.to_vec(),
            args: args.to_vec(),
            child,
            input,
            output,
            hello,
        })
    }

    /// Sends `req` and reads the reply; a dead worker is an error.
    fn ask(&mut self, req: &Request) -> Result<Reply> {
        let text = serde_json::to_string(req)?;
        writeln!(self.input, "{text}").and_then(|_| self.input.flush()).with_context(|| self.gone())?;
        let mut line = String::new();
        if self.output.read_line(&mut line).unwrap_or(0) == 0 {
            bail!("{}", self.gone());
        }
        serde_json::from_str(line.trim())
            .with_context(|| format!("bad reply from the {} build: {line:?}", self.label))
    }

    fn gone(&mut self) -> String {
        let status = self
            .child
            .try_wait()
            .ok()
            .flatten()
            .map_or("is not answering".into(), |s| format!("exited ({s})"));
        format!("the {} build {} {status}", self.label, self.path.display())
    }

    /// A fresh worker after this one died.
    fn restart(&mut self) -> Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        *self = Self::start(self.label, &self.path, &self.env, &self.args)?;
        Ok(())
    }

    fn quit(mut self) {
        let _ = self.ask(&Request::Quit);
        let _ = self.child.wait();
    }
}

fn parse_env(list: &[String], flag: &str) -> Result<Vec<(String, String)>> {
    list.iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("{flag} {kv:?}: expected KEY=VALUE"),
        })
        .collect()
}

fn check_executable(path: &Path, flag: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).with_context(|| format!("{flag} {}: no such file", path.display()))?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        bail!("{flag} {}: not an executable file", path.display());
    }
    Ok(())
}

/// Per case: the paired times so far, or why it cannot be judged.
enum Tally {
    Pairs(Vec<f64>, Vec<f64>),
    Skipped,
    Failed,
}

/// `tfbench ab`: runs the plan with both builds alternately and judges the
/// paired ratios.
pub fn ab(args: &AbArgs) -> Result<Outcome> {
    // The driver resolves the plan first, so a bad option fails here, once.
    resolve_plan(&args.plan)?;
    check_executable(&args.base, "--base")?;
    check_executable(&args.head, "--head")?;
    let base_env = parse_env(&args.base_env, "--base-env")?;
    let head_env = parse_env(&args.head_env, "--head-env")?;
    if let Some(p) = &args.output {
        check_writable(p, "--output")?;
    }
    let d = Settings::default();
    let opts = compare_options(&args.gate, d.confidence_level, d.seed)?;
    let wargs = plan_args(&args.plan);
    let mut base = Worker::start("base", &args.base, &base_env, &wargs)?;
    let mut head = Worker::start("head", &args.head, &head_env, &wargs)?;
    let (hb, hh) = (base.hello.clone(), head.hello.clone());
    if hb.protocol != hh.protocol || hb.protocol != PROTOCOL {
        bail!(
            "the builds speak protocol {} (base) and {} (head); this driver speaks {PROTOCOL}",
            hb.protocol,
            hh.protocol
        );
    }
    if hb.schema_version != hh.schema_version {
        bail!(
            "the builds write results schema {} (base) and {} (head): rebuild one of them",
            hb.schema_version,
            hh.schema_version
        );
    }
    if hb.cases != hh.cases || hb.rounds != hh.rounds {
        let only = |a: &Hello, b: &Hello| a.cases.iter().filter(|c| !b.cases.contains(c)).count();
        bail!(
            "the builds plan different cases for these options ({} only in base, {} only in head, rounds {} and {}): compare builds with the same suites",
            only(&hb, &hh),
            only(&hh, &hb),
            hb.rounds,
            hh.rounds
        );
    }
    if hb.cases.is_empty() {
        bail!("no case matches the selection; `tfbench list` shows the case ids");
    }
    let min_sample_ns = crate::harness::timer::calibrate().min_sample_ns();
    let started = Instant::now();
    let mut tallies: Vec<(String, Tally)> =
        hb.cases.iter().map(|(id, _)| (id.clone(), Tally::Pairs(Vec::new(), Vec::new()))).collect();
    let mut reasons: Vec<String> = Vec::new();
    let total = hb.cases.len() * hb.rounds as usize;
    let mut done = 0;
    for round in 0..hb.rounds {
        for (ci, (id, suite)) in hb.cases.iter().enumerate() {
            done += 1;
            if !matches!(tallies[ci].1, Tally::Pairs(..)) {
                continue;
            }
            if !args.quiet {
                eprintln!("[{done}/{total}] {id}");
            }
            let s = hb.settings.get(suite).cloned().unwrap_or_default();
            match pair_case(&mut base, &mut head, id, &s, round as usize + ci, min_sample_ns) {
                Ok(CaseRun::Pairs(b, h)) => {
                    if let Tally::Pairs(pb, ph) = &mut tallies[ci].1 {
                        pb.extend(b);
                        ph.extend(h);
                    }
                }
                Ok(CaseRun::Skipped(why)) => {
                    reasons.push(format!("{id}: skipped: {why}"));
                    tallies[ci].1 = Tally::Skipped;
                }
                Ok(CaseRun::Failed(why)) => {
                    eprintln!("{id}: FAILED: {why}");
                    reasons.push(format!("{id}: failed: {why}"));
                    tallies[ci].1 = Tally::Failed;
                }
                Err(e) => return Err(e),
            }
        }
    }
    base.quit();
    head.quit();
    let mut cases = Vec::new();
    let (mut failed, mut skipped) = (Vec::new(), Vec::new());
    for (id, t) in tallies {
        match t {
            Tally::Pairs(b, h) => cases.push(PairedCase { id, base: b, head: h }),
            Tally::Skipped => skipped.push(id),
            Tally::Failed => failed.push(id),
        }
    }
    let mut c = compare::paired::compare_paired(
        &args.base.display().to_string(),
        &args.head.display().to_string(),
        &cases,
        failed,
        skipped,
        &opts,
    );
    for (side, h) in [("base", &hb), ("head", &hh)] {
        if let Some(inj) = &h.injected {
            c.notes.push(format!(
                "WARNING: the {side} build ran with an injected slowdown ({inj}, the TFBENCH_INJECT_SLOWDOWN test hook): not a real measurement"
            ));
        }
    }
    c.notes.extend(reasons);
    c.notes.push(format!(
        "{} ({}) against {} ({}); wall time {:.1} s",
        hh.build,
        "head",
        hb.build,
        "base",
        started.elapsed().as_secs_f64()
    ));
    super::emit_comparison(&c, args.format, args.output.as_deref(), &args.gate)
}

/// What one case's round gave.
enum CaseRun {
    Pairs(Vec<f64>, Vec<f64>),
    Skipped(String),
    Failed(String),
}

/// Prepares, warms up and samples one case on both workers; `parity` picks
/// which build goes first in the first pair. A worker that dies fails the
/// case and is restarted for the next one.
fn pair_case(
    base: &mut Worker,
    head: &mut Worker,
    id: &str,
    s: &Settings,
    parity: usize,
    min_sample_ns: f64,
) -> Result<CaseRun> {
    let outcome = (|| -> Result<CaseRun> {
        let mut per_iter = [0.0f64; 2];
        for (k, w) in [&mut *base, &mut *head].into_iter().enumerate() {
            match w.ask(&Request::Prepare(id.into()))? {
                Reply::Ok => {}
                Reply::Skipped(why) => return Ok(CaseRun::Skipped(why)),
                Reply::Failed { phase, reason } => {
                    return Ok(CaseRun::Failed(format!("{} build, {phase}: {reason}", w.label)));
                }
                other => bail!("unexpected reply {other:?}"),
            }
            per_iter[k] = match w.ask(&Request::WarmUp(s.warm_up_time))? {
                Reply::PerIter(ns) => ns,
                Reply::Failed { phase, reason } => {
                    return Ok(CaseRun::Failed(format!("{} build, {phase}: {reason}", w.label)));
                }
                other => bail!("unexpected reply {other:?}"),
            };
        }
        // The same iterations for both, sized on the slower of the two so a
        // sample lasts what `run` would give it.
        let target = (0.9 * s.measurement_time * 1e9 / s.sample_size.max(1) as f64).max(min_sample_ns);
        let iters = ((target / per_iter[0].max(per_iter[1])).round() as u64).max(1);
        // Both builds' budgets: the measurement time, capped by --max-time.
        let per_build = s.max_time.map_or(s.measurement_time, |m| m.min(s.measurement_time));
        let budget = Duration::from_secs_f64(2.0 * per_build);
        let start = Instant::now();
        let (mut tb, mut th) = (Vec::new(), Vec::new());
        for i in 0..s.sample_size {
            if i >= crate::harness::sampler::MIN_SAMPLES && start.elapsed() > budget {
                break;
            }
            let head_first = (i + parity) % 2 == 1;
            let order: [&mut Worker; 2] =
                if head_first { [&mut *head, &mut *base] } else { [&mut *base, &mut *head] };
            for w in order {
                // Let the other build's idle threads (spinning GEMM workers,
                // rayon) settle before this one's clock starts.
                std::thread::sleep(Duration::from_micros(500));
                match w.ask(&Request::Sample(iters))? {
                    Reply::Nanos(ns) => {
                        if w.label == "base" {
                            tb.push(ns / iters as f64)
                        } else {
                            th.push(ns / iters as f64)
                        }
                    }
                    Reply::Failed { phase, reason } => {
                        return Ok(CaseRun::Failed(format!("{} build, {phase}: {reason}", w.label)));
                    }
                    other => bail!("unexpected reply {other:?}"),
                }
            }
        }
        for w in [&mut *base, &mut *head] {
            w.ask(&Request::Finish)?;
        }
        Ok(CaseRun::Pairs(tb, th))
    })();
    match outcome {
        Ok(r) => {
            if !matches!(r, CaseRun::Pairs(..)) {
                // Drop whatever the other build still holds.
                for w in [&mut *base, &mut *head] {
                    if w.ask(&Request::Finish).is_err() {
                        w.restart()?;
                    }
                }
            }
            Ok(r)
        }
        Err(e) => {
            // A worker died (a crash, not a panic): fail this case, start
            // both afresh so the others still run.
            let why = format!("{e:#}");
            base.restart()?;
            head.restart()?;
            Ok(CaseRun::Failed(why))
        }
    }
}
