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

use super::{Outcome, check_writable, compare_options, gate_outcome, print_stdout, stdout_color};
use crate::cli::{AbArgs, AbWorkerArgs, CompareFormat, WorkerPlan};
use crate::compare::{self, paired::PairedCase};
use crate::config::{self, CliOverrides, PartialSettings, Resolved, Settings};
use crate::plan::Filter;
use crate::suites;
use crate::workload::Workload;
use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// Version of the driver-worker protocol; both builds must speak the same.
pub const PROTOCOL: u32 = 1;

/// The worker's greeting: what it will run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Hello {
    /// [`PROTOCOL`].
    pub protocol: u32,
    /// The results schema version of the build.
    pub schema_version: u32,
    /// The build: version and git revision.
    pub build: String,
    /// Case ids in plan order, with their suites.
    pub cases: Vec<(String, String)>,
    /// Harness settings per suite.
    pub settings: BTreeMap<String, Settings>,
    /// Rounds over the plan.
    pub rounds: u32,
    /// The injection test hook in force in this worker, if any.
    pub injected: Option<String>,
}

/// What the driver asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// Prepare and verify case `id`.
    Prepare(String),
    /// Warm the prepared case up for this many seconds.
    WarmUp(f64),
    /// Time one sample of this many iterations.
    Sample(u64),
    /// Drop the prepared case.
    Finish,
    /// Exit.
    Quit,
}

/// What the worker answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Done (prepare passed verification; finish).
    Ok,
    /// The case refuses to run here, with the reason.
    Skipped(String),
    /// The case failed in a phase, with the reason.
    Failed {
        /// `prepare`, `verify`, `warm_up`, `measure`.
        phase: String,
        /// What went wrong.
        reason: String,
    },
    /// Warm-up done: the last batch's time per iteration, ns.
    PerIter(f64),
    /// A sample's elapsed nanoseconds.
    Nanos(f64),
}

/// Resolves the plan both sides run from the plan options.
fn resolve_plan(p: &WorkerPlan) -> Result<Resolved> {
    let loaded = p.selection.config.as_deref().map(config::load).transpose()?;
    let cli = CliOverrides {
        suites: p.selection.suites.clone(),
        filter: Filter {
            pattern: p.selection.filter.clone(),
            exact: p.selection.exact,
            skip: p.selection.skip.clone(),
        },
        harness: PartialSettings {
            sample_size: p.sample_size,
            warm_up_time: p.warm_up_time,
            measurement_time: p.measurement_time,
            max_time: p.max_time,
            seed: p.seed,
            ..Default::default()
        },
        quick: p.selection.quick,
        threads: p.threads,
        rounds: p.rounds,
        shuffle: false,
        shard: None,
        devices: crate::device::parse_list(&p.selection.devices)?,
    };
    config::resolve(loaded.as_ref(), &cli)
}

/// The command-line words that give a worker the same plan.
fn plan_args(p: &WorkerPlan) -> Vec<String> {
    let mut a = Vec::new();
    for s in &p.selection.suites {
        a.extend(["--suite".into(), s.clone()]);
    }
    if p.selection.exact {
        a.push("--exact".into());
    }
    if let Some(s) = &p.selection.skip {
        a.extend(["--skip".into(), s.clone()]);
    }
    if let Some(c) = &p.selection.config {
        a.extend(["--config".into(), c.display().to_string()]);
    }
    if p.selection.quick {
        a.push("--quick".into());
    }
    for d in &p.selection.devices {
        a.extend(["--device".into(), d.clone()]);
    }
    let mut opt = |flag: &str, v: Option<String>| {
        if let Some(v) = v {
            a.extend([flag.to_string(), v]);
        }
    };
    opt("--sample-size", p.sample_size.map(|v| v.to_string()));
    opt("--warm-up-time", p.warm_up_time.map(|v| v.to_string()));
    opt("--measurement-time", p.measurement_time.map(|v| v.to_string()));
    opt("--max-time", p.max_time.map(|v| v.to_string()));
    opt("--rounds", p.rounds.map(|v| v.to_string()));
    opt("--threads", p.threads.map(|v| v.to_string()));
    opt("--seed", p.seed.map(|v| v.to_string()));
    if let Some(f) = &p.selection.filter {
        a.extend(["--".into(), f.clone()]);
    }
    a
}

// ---------------------------------------------------------------- worker

/// `tfbench ab-worker`: serves the driver until it says quit or closes stdin.
pub fn ab_worker(args: &AbWorkerArgs) -> Result<Outcome> {
    let plan = resolve_plan(&args.plan)?;
    let injection = crate::harness::inject::from_env()?;
    let panics = crate::harness::inject::panic_from_env()?;
    rayon::ThreadPoolBuilder::new()
        .num_threads(plan.threads)
        .build_global()
        .context("cannot build the worker thread pool")?;
    let env = crate::env::Environment::gather();
    let hello = Hello {
        protocol: PROTOCOL,
        schema_version: crate::results::SCHEMA_VERSION,
        build: format!("tfbench {} ({})", env!("CARGO_PKG_VERSION"), env.git_revision),
        cases: plan.cases.iter().map(|c| (c.id.clone(), c.suite.clone())).collect(),
        settings: plan.settings.clone(),
        rounds: plan.rounds,
        injected: injection.as_ref().map(|i| i.spec.clone()),
    };
    let mut out = std::io::stdout().lock();
    let mut send = |v: &dyn erased::Json| -> Result<()> {
        writeln!(out, "{}", v.json()?)?;
        out.flush().context("driver went away")
    };
    send(&hello)?;
    let mut workload: Option<Box<dyn Workload>> = None;
    for line in std::io::stdin().lock().lines() {
        let line = line.context("reading the driver's request")?;
        let req: Request = serde_json::from_str(&line).with_context(|| format!("bad request {line:?}"))?;
        let reply = match req {
            Request::Quit => break,
            Request::Finish => {
                workload = None;
                Reply::Ok
            }
            Request::Prepare(id) => match prepare(&plan, &id, injection.as_ref(), panics.as_ref()) {
                Ok(w) => {
                    workload = Some(w);
                    Reply::Ok
                }
                Err(r) => r,
            },
            Request::WarmUp(secs) => match workload.as_mut() {
                Some(w) => {
                    guarded("warm_up", || warm_up(w.as_mut(), secs)).map_or_else(|r| r, Reply::PerIter)
                }
                None => Reply::Failed { phase: "warm_up".into(), reason: "no case prepared".into() },
            },
            Request::Sample(iters) => match workload.as_mut() {
                Some(w) => guarded("measure", || {
                    let t = Instant::now();
                    w.run(iters)?;
                    w.sync()?;
                    Ok(t.elapsed().as_nanos() as f64)
                })
                .map_or_else(|r| r, Reply::Nanos),
                None => Reply::Failed { phase: "measure".into(), reason: "no case prepared".into() },
            },
        };
        send(&reply)?;
    }
    Ok(Outcome::Success)
}

/// Tiny object-safe JSON line helper so `send` takes both message types.
mod erased {
    pub trait Json {
        fn json(&self) -> anyhow::Result<String>;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> anyhow::Result<String> {
            Ok(serde_json::to_string(self)?)
        }
    }
}

/// Runs `f`, turning an error or a panic into a [`Reply::Failed`] of `phase`.
fn guarded<T>(phase: &str, f: impl FnOnce() -> Result<T>) -> Result<T, Reply> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Reply::Failed { phase: phase.into(), reason: format!("{e:#}") }),
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".into());
            Err(Reply::Failed { phase: phase.into(), reason: format!("panicked: {msg}") })
        }
    }
}

/// Prepares and verifies case `id` of `plan` (wrapped by the injection hook
/// when it applies).
fn prepare(
    plan: &Resolved,
    id: &str,
    inject: Option<&crate::harness::inject::Injection>,
    panics: Option<&regex::Regex>,
) -> Result<Box<dyn Workload>, Reply> {
    let fail = |phase: &str, reason: String| Reply::Failed { phase: phase.into(), reason };
    let case =
        plan.cases.iter().find(|c| c.id == id).ok_or_else(|| fail("prepare", format!("no case {id}")))?;
    case.device.availability().map_err(Reply::Skipped)?;
    let suite =
        suites::find(&case.suite).ok_or_else(|| fail("prepare", format!("no suite {}", case.suite)))?;
    let mut w = match catch_unwind(AssertUnwindSafe(|| suite.prepare(case))) {
        Ok(Ok(w)) => w,
        Ok(Err(e)) if e.downcast_ref::<suites::SkipCase>().is_some() => {
            return Err(Reply::Skipped(format!("{e:#}")));
        }
        Ok(Err(e)) => return Err(fail("prepare", format!("{e:#}"))),
        Err(_) => return Err(fail("prepare", "panicked".into())),
    };
    let v = guarded("verify", || w.verify())?;
    if !v.passed {
        return Err(fail("verify", format!("wrong result against {}: {}", v.reference, v.detail)));
    }
    if let Some(i) = inject.filter(|i| i.applies_to(id)) {
        w = Box::new(crate::harness::inject::Slowed::new(w, i.factor));
    }
    if panics.is_some_and(|p| p.is_match(id)) {
        w = Box::new(crate::harness::inject::Panicking(w));
    }
    Ok(w)
}

/// Warms `w` up for `secs` with doubling batches; returns the last batch's
/// time per iteration.
fn warm_up(w: &mut dyn Workload, secs: f64) -> Result<f64> {
    let start = Instant::now();
    let budget = Duration::from_secs_f64(secs.max(0.0));
    let mut batch = 1u64;
    loop {
        let t = Instant::now();
        w.run(batch)?;
        let per_iter = (t.elapsed().as_nanos() as f64 / batch as f64).max(0.1);
        if start.elapsed() >= budget {
            return Ok(per_iter);
        }
        let remaining = (budget - start.elapsed()).as_nanos() as f64;
        batch = batch.saturating_mul(2).min((remaining / per_iter).max(1.0) as u64).max(1);
    }
}

// ---------------------------------------------------------------- driver

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
    let text = match args.format {
        CompareFormat::Table => compare::render_table(&c, stdout_color()),
        CompareFormat::Markdown => compare::render_markdown(&c),
        CompareFormat::Json => compare::render_json(&c)?,
    };
    if let Some(p) = &args.output {
        let file_text = match p.extension().and_then(|e| e.to_str()) {
            Some("md") => compare::render_markdown(&c),
            Some("json") => compare::render_json(&c)?,
            _ if args.format == CompareFormat::Table => compare::render_table(&c, false),
            _ => text.clone(),
        };
        crate::util::write_atomic(p, file_text.as_bytes())?;
    }
    print_stdout(&text)?;
    Ok(gate_outcome(&c, &args.gate))
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
