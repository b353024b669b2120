//! `run --measure instructions`: each case counted under Valgrind's
//! callgrind (see `inside::callgrind` for the counting, docs/inside.md for
//! the method).
//!
//! The run re-executes its own binary under Valgrind once per case, as a
//! hidden `count-worker` (the way `ab` drives its workers): the worker
//! resolves the same plan, prepares and checks the case exactly as `run`
//! does (`harness::runner::prepare_case`), runs one uncounted warm-up
//! call, then the counted call of `--count-iterations` iterations between
//! client requests that zero the counts and stop instrumentation, and writes
//! what it found to a JSON file; the parent reads callgrind's totals from
//! its output file. A case that runs past `--max-time` (given on the
//! command line; else [`DEFAULT_COUNT_LIMIT`]) under Valgrind is cut
//! (skipped, saying so) and the others go on.

use super::Outcome;
use crate::backend::Device;
use crate::cli::{CountWorkerArgs, RunArgs, WorkerPlan};
use crate::config::Resolved;
use crate::harness::inject::{self, Injection};
use crate::harness::runner::Observer;
use crate::inside::callgrind::{self, Counts};
use crate::plan::Case;
use crate::results::{CaseResult, CaseStatus};
use crate::workload::{Throughput, Verification};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What the worker writes for the parent.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WorkerReport {
    /// `ok`, `skipped` or `failed`.
    status: String,
    /// The failed phase, or empty.
    #[serde(default)]
    phase: String,
    /// Why it was skipped or failed, or empty.
    #[serde(default)]
    reason: String,
    verification: Option<Verification>,
    #[serde(default)]
    throughput: Vec<Throughput>,
    /// Iterations counted.
    iterations: u64,
    /// The ISA level dispatched to and its features.
    isa: String,
    features: Vec<String>,
    /// The run pool's threads.
    threads: usize,
}

/// Refuses what cannot be counted, before anything runs (exit 2): no
/// `valgrind` on PATH, a case on a device callgrind cannot see into (CUDA,
/// WebAssembly), `--model`, `--profile`, an architecture without client
/// requests.
pub(super) fn check(args: &RunArgs, plan: &Resolved) -> Result<()> {
    if !callgrind::SUPPORTED {
        bail!(
            "--measure instructions needs x86-64 or arm64 (Valgrind's client requests); this build is for another architecture"
        );
    }
    if args.inside.profile.is_some() {
        bail!("--profile samples a timed run; it cannot be combined with --measure instructions");
    }
    if args.model.is_some() {
        bail!("--measure instructions does not count --model runs yet; leave out --model, or measure time");
    }
    if let Some(c) = plan.cases.iter().find(|c| c.device != Device::Cpu) {
        bail!(
            "--measure instructions counts CPU cases only: {} runs on {}, whose work Valgrind cannot count; select --device cpu",
            c.id,
            c.device
        );
    }
    valgrind_path()?;
    Ok(())
}

/// The `valgrind` on PATH, or an error saying it is missing.
fn valgrind_path() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join("valgrind")).find(|p| p.is_file()).ok_or_else(|| {
        anyhow::anyhow!(
            "--measure instructions needs Valgrind, and no `valgrind` is on PATH (Debian/Ubuntu: apt-get install valgrind)"
        )
    })
}

/// Counts every case of `plan` in plan order (one round; counts do not
/// vary). `instructions` is the instruction-burning test hook, when set.
pub(super) fn execute(
    args: &RunArgs,
    plan: &Resolved,
    obs: &mut dyn Observer,
    instructions: Option<&Injection>,
) -> Vec<CaseResult> {
    let n = plan.cases.len();
    obs.run_started(n, 1);
    let mut out = Vec::with_capacity(n);
    for (i, case) in plan.cases.iter().enumerate() {
        obs.case_started(&case.id, 0, i, n);
        let r = count_case(args, case, instructions);
        obs.case_finished(&r);
        out.push(r);
    }
    out
}

/// How one counted run of a case ended.
enum Ran {
    Counted(Box<WorkerReport>, Counts),
    Skipped(String),
    Failed(String, String),
}

/// The result of counting `case`: once, or twice when the instruction-
/// burning hook applies (plain, to learn the count; then burning).
fn count_case(args: &RunArgs, case: &Case, instructions: Option<&Injection>) -> CaseResult {
    let burn = instructions.filter(|i| i.applies_to(&case.id));
    let mut ran = run_worker(args, case, 0);
    let mut notes = Vec::new();
    if let (Some(i), Ran::Counted(_, c)) = (burn, &ran) {
        let steps = inject::burn_steps(i.factor, c.instructions);
        ran = run_worker(args, case, steps);
        notes.push(format!(
            "INJECTED EXTRA INSTRUCTIONS x{} ({} test hook): not a real measurement",
            i.factor,
            inject::INSTRUCTIONS_VAR
        ));
    }
    let mut r = CaseResult {
        id: case.id.clone(),
        suite: case.suite.clone(),
        benchmark: case.benchmark.clone(),
        params: case.params.clone(),
        status: CaseStatus::Ok,
        verification: None,
        sampling: None,
        samples: Vec::new(),
        estimates: None,
        outliers: None,
        throughput: Vec::new(),
        alloc: None,
        bound: None,
        notes,
        metrics: Vec::new(),
        roof: None,
        scaling: None,
        inside: None,
    };
    match ran {
        Ran::Counted(w, counts) => {
            r.verification = w.verification;
            r.notes.push(counts.brief());
            r.inside = Some(crate::inside::Inside { counts: Some(counts), ..Default::default() });
        }
        Ran::Skipped(reason) => r.status = CaseStatus::Skipped { reason },
        Ran::Failed(phase, reason) => r.status = CaseStatus::Failed { phase, reason },
    }
    r
}

/// Runs the worker for `case` under callgrind and reads what it found.
fn run_worker(args: &RunArgs, case: &Case, burn_steps: u64) -> Ran {
    let dir =
        std::env::temp_dir().join(format!("tfbench-count-{}-{}", std::process::id(), rand::random::<u32>()));
    let ran = run_worker_in(&dir, args, case, burn_steps);
    let _ = std::fs::remove_dir_all(&dir);
    ran.unwrap_or_else(|e| Ran::Failed("count".into(), format!("{e:#}")))
}

fn run_worker_in(dir: &Path, args: &RunArgs, case: &Case, burn_steps: u64) -> Result<Ran> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (out_file, report, log) =
        (dir.join("callgrind.out"), dir.join("worker.json"), dir.join("valgrind.log"));
    let exe = std::env::current_exe().context("finding tfbench's own executable")?;
    let mut cmd = Command::new(valgrind_path()?);
    cmd.args(["--tool=callgrind", "--instr-atstart=no", "--cache-sim=yes", "--dump-instr=no", "-q"])
        .args(callgrind::CACHE_MODEL)
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(&exe)
        .args(worker_args(args, case, burn_steps, &report))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).context("creating the Valgrind log")?);
    if let Some(place) =
        crate::data::lookup().places.first().filter(|p| p.source == crate::data::Source::Flag)
    {
        cmd.env(crate::data::ENV, &place.dir);
    }
    let mut child = cmd.spawn().context("starting valgrind")?;
    let limit = Duration::from_secs_f64(count_limit(args));
    let started = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().context("waiting for valgrind")? {
            break st;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Ran::Skipped(format!(
                "cut at --max-time ({} s) under Valgrind, which runs code 20-100x slower: raise --max-time or count fewer iterations",
                limit.as_secs_f64()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let w: WorkerReport = match std::fs::read_to_string(&report) {
        Ok(text) => serde_json::from_str(&text).context("reading the worker's report")?,
        Err(_) => {
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: String = tail
                .lines()
                .rev()
                .take(6)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join(" | ");
            return Ok(Ran::Failed(
                "count".into(),
                format!("the counted worker exited with {status} and wrote no report: {tail}"),
            ));
        }
    };
    match w.status.as_str() {
        "skipped" => return Ok(Ran::Skipped(w.reason)),
        "failed" => return Ok(Ran::Failed(w.phase, w.reason)),
        _ => {}
    }
    let text = std::fs::read_to_string(&out_file).context("reading callgrind's output file")?;
    let totals = callgrind::parse(&text).map_err(|e| anyhow::anyhow!("callgrind's output file: {e}"))?;
    if totals.get("Ir") == 0 {
        bail!("callgrind counted no instructions: the worker's client requests did not reach it");
    }
    let counts = Counts::from_totals(&totals, w.iterations, w.isa.clone(), w.features.clone(), w.threads);
    Ok(Ran::Counted(Box::new(w), counts))
}

/// Seconds a case may run under Valgrind before it is cut: `--max-time`
/// when given on the command line, else [`DEFAULT_COUNT_LIMIT`] (a config's
/// `max_time` is sized for timed runs, and Valgrind runs code 20-100x
/// slower, its start-up on tfbench's binary alone about 1-2 s).
fn count_limit(args: &RunArgs) -> f64 {
    args.timing.max_time.unwrap_or(DEFAULT_COUNT_LIMIT)
}

/// The budget of one counted case when `--max-time` is not given, seconds.
pub const DEFAULT_COUNT_LIMIT: f64 = 300.0;

/// The worker's command line: the run's plan narrowed to `case` (one
/// thread unless `-j` says otherwise, one round).
fn worker_args(args: &RunArgs, case: &Case, burn_steps: u64, report: &Path) -> Vec<String> {
    let mut selection = args.selection.clone();
    selection.filter = Some(case.id.clone());
    selection.exact = true;
    let mut timing = args.timing.clone();
    // The counted worker runs one case (a sweep's step carries its own
    // `threads`): its pool is the widest the run asked for, else one.
    timing.threads = Some(crate::plan::ThreadCounts::single(timing.threads.as_ref().map_or(1, |t| t.max())));
    timing.rounds = Some(1);
    let plan = WorkerPlan { selection, timing };
    let mut a = vec![
        "count-worker".to_string(),
        "--case".into(),
        case.id.clone(),
        "--iterations".into(),
        args.inside.count_iterations.unwrap_or(1).to_string(),
        "--burn-steps".into(),
        burn_steps.to_string(),
        "--report".into(),
        report.display().to_string(),
    ];
    a.extend(super::ab::protocol::plan_args(&plan));
    a
}

/// `tfbench count-worker`: prepares, checks and counts one case (under
/// callgrind), writing a [`WorkerReport`].
pub fn count_worker(a: &CountWorkerArgs) -> Result<Outcome> {
    if !callgrind::on_valgrind() {
        bail!("count-worker runs under Valgrind (tfbench run --measure instructions starts it)");
    }
    let plan = super::ab::protocol::resolve_plan(&a.plan)?;
    crate::backend::cpu::configure_run_pool(plan.threads).context("cannot build the worker thread pool")?;
    let report = crate::harness::runner::quiet_panics(|| count_one(&plan, a));
    let text = serde_json::to_string(&report)?;
    crate::util::write_atomic(&a.report, text.as_bytes())?;
    Ok(Outcome::Success)
}

/// The isa level name kernels dispatch to here, and their features.
fn isa_here() -> (String, Vec<String>) {
    use crate::isa::{Feature, has};
    let level = if has(Feature::Avx512f) {
        "avx512"
    } else if has(Feature::Avx2) {
        "avx2"
    } else {
        "scalar"
    };
    (level.to_string(), crate::isa::usable().iter().map(|s| s.to_string()).collect())
}

fn count_one(plan: &Resolved, a: &CountWorkerArgs) -> WorkerReport {
    let (isa, features) = isa_here();
    let mut rep = WorkerReport {
        status: "ok".into(),
        phase: String::new(),
        reason: String::new(),
        verification: None,
        throughput: Vec::new(),
        iterations: a.iterations,
        isa,
        features,
        threads: plan.threads,
    };
    let panics = crate::harness::inject::panic_from_env().ok().flatten();
    let (mut w, width) = match super::ab::worker::prepare(plan, &a.case, None, panics.as_ref(), true) {
        Ok(ready) => ready,
        Err(super::ab::protocol::Reply::Skipped(why)) => {
            rep.status = "skipped".into();
            rep.reason = why;
            return rep;
        }
        Err(super::ab::protocol::Reply::Failed { phase, reason }) => {
            rep.status = "failed".into();
            (rep.phase, rep.reason) = (phase, reason);
            return rep;
        }
        Err(other) => {
            rep.status = "failed".into();
            (rep.phase, rep.reason) = ("prepare".into(), format!("unexpected reply {other:?}"));
            return rep;
        }
    };
    rep.verification = Some(Verification::pass("checked before counting"));
    rep.throughput = w.throughput();
    if a.burn_steps > 0 {
        w = Box::new(inject::Burned::new(w, a.burn_steps));
    }
    let per_call = w.fixed_iterations().map_or(a.iterations, |f| f.max(1));
    let calls = a.iterations.div_ceil(per_call).max(1);
    rep.iterations = calls * per_call;
    let counted = super::ab::worker::guarded("count", || {
        crate::backend::cpu::on_pool_of(width, || -> Result<()> {
            // One uncounted call first: lazy set-up (packed weights,
            // scratch buffers, page faults) is not the case's work. It is
            // instrumented, so the simulated caches are warm after it.
            callgrind::start_instrumentation();
            w.before_sample()?;
            w.run(per_call)?;
            w.sync()?;
            w.after_sample(false)?;
            for call in 0..calls {
                w.before_sample()?;
                counted_call(w.as_mut(), per_call, call == 0)?;
                w.after_sample(true)?;
            }
            Ok(())
        })
    });
    callgrind::stop_instrumentation();
    if let Err(super::ab::protocol::Reply::Failed { phase, reason }) = counted {
        rep.status = "failed".into();
        (rep.phase, rep.reason) = (phase, reason);
    }
    rep
}

/// The counted region: counts zeroed (the first call, instrumentation
/// already on since the warm-up) or instrumentation on again, the call and
/// its sync, instrumentation off.
#[inline(never)]
fn counted_call(w: &mut dyn crate::workload::Workload, iters: u64, first: bool) -> Result<()> {
    if first {
        callgrind::zero_stats();
    } else {
        callgrind::start_instrumentation();
    }
    let r = w.run(iters).and_then(|()| w.sync());
    callgrind::stop_instrumentation();
    r
}
