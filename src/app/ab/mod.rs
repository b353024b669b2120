//! `tfbench ab`: a paired A/B run of two builds on one machine in one job.
//!
//! The driver starts each build as a worker (`tfbench ab-worker`, the same
//! plan options) and talks to it over its stdin/stdout, one JSON object per
//! line. The plan runs in rounds, each with a **fresh pair of worker
//! processes** (a process's luck, such as where its heap landed or which
//! core it got, can shift all its cases by several per cent, so it must be
//! a replicate, not a constant). In each round, for every case, both
//! workers prepare, verify and warm up the case; then the driver asks for
//! samples alternately, A B B A A B ..., with the same iteration count, so
//! each pair of samples was taken back to back and whatever the machine
//! does over seconds hits both alike. The pairs are judged by
//! [`crate::compare::paired`] (intervals over the rounds); the output is the
//! usual comparison and gate.
//!
//! Rounds: `--rounds N`, else at least [`DEFAULT_ROUNDS`], which then share
//! the profile's time (its rounds x its per-round times, per build), so `ab`
//! costs about twice one `run` whatever the number of rounds.
//!
//! Protocol ([`PROTOCOL`]): the worker greets with [`Hello`]; then each
//! [`protocol::Request`] gets one [`protocol::Reply`]. A build that does not speak it (built
//! before `ab` existed), or a plan that differs between the builds, is
//! refused before anything is measured.

use super::{Outcome, check_writable, compare_options};
use crate::cli::AbArgs;
use crate::compare::{self, paired::PairedCase};
use crate::config::Settings;
use anyhow::{Result, bail};
use pairing::{CaseRound, CaseRun, RoundShare, pair_case, warm_up};
use process::{Spent, Worker, check_executable, parse_env};
use rand::seq::SliceRandom;
use std::time::Instant;

mod counted;
mod pairing;
mod process;
pub(crate) mod protocol;
pub(crate) mod worker;

pub use protocol::{Hello, PROTOCOL};
use protocol::{plan_args, resolve_plan};
pub use worker::ab_worker;

/// Rounds (fresh worker pairs) when `--rounds` is not given. A process's
/// luck is the largest noise a paired ratio has here (7-10% SD on small
/// two-thread cases), so the number of rounds decides what `ab` can call:
/// at `p < 0.001` a t test over 6 rounds needs `t > 6.87`, over 12 rounds
/// `t > 4.44`, so 12 rounds call a change 2.2x smaller at the same noise.
/// With later rounds warming up briefly ([`pairing::LATER_WARM_UP`]), 12 fit
/// in the cost of about two runs; 16 did not (2.3x one `ci.toml` run).
pub const DEFAULT_ROUNDS: u32 = 12;

/// Per case: the paired times so far (with each pair's round), or why it
/// cannot be judged.
enum Tally {
    Pairs(PairedCase),
    Skipped,
    Failed(crate::compare::gate::FailedCase),
}

/// Refuses two builds that cannot be paired: another protocol, another
/// results schema, or another plan.
fn check_pairable(hb: &Hello, hh: &Hello) -> Result<()> {
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
            only(hb, hh),
            only(hh, hb),
            hb.rounds,
            hh.rounds
        );
    }
    if hb.cases.is_empty() {
        bail!("no case matches the selection; `tfbench list` shows the case ids");
    }
    Ok(())
}

/// `tfbench ab`: runs the plan with both builds alternately and judges the
/// paired ratios.
pub fn ab(args: &AbArgs) -> Result<Outcome> {
    // The driver resolves the plan first, so a bad option fails here, once.
    let threads = resolve_plan(&args.plan)?.threads;
    check_executable(&args.base, "--base")?;
    check_executable(&args.head, "--head")?;
    let base_env = parse_env(&args.base_env, "--base-env")?;
    let head_env = parse_env(&args.head_env, "--head-env")?;
    for (p, flag) in [(&args.output, "--output"), (&args.pairs_output, "--pairs-output")] {
        if let Some(p) = p {
            check_writable(p, flag)?;
        }
    }
    let d = Settings::default();
    let opts = compare_options(&args.gate, d.confidence_level, d.seed)?;
    if args.measure == crate::inside::Measure::Instructions {
        let c = counted::ab_counted(args, (&base_env, &head_env), &opts)?;
        return super::emit_comparison(&c, args.format, args.output.as_deref(), &args.gate);
    }
    let seed = args.plan.timing.seed.unwrap_or(d.seed);
    let wargs = plan_args(&args.plan);
    let start = |label: &'static str| match label {
        "base" => Worker::start(label, &args.base, &base_env, &wargs),
        _ => Worker::start(label, &args.head, &head_env, &wargs),
    };
    let started = Instant::now();
    let base = start("base")?;
    let head = start("head")?;
    let (hb, hh) = (base.hello.clone(), head.hello.clone());
    check_pairable(&hb, &hh)?;
    let rounds = args.plan.timing.rounds.unwrap_or(hb.rounds.max(DEFAULT_ROUNDS)).max(1);
    let min_sample_ns = crate::harness::timer::calibrate().min_sample_ns();
    let mut spent = Spent::default();
    let timing = Timing { rounds, seed, min_sample_ns, threads };
    let (tallies, reasons) = measure_rounds(args, (base, head), &hb, &timing, &mut spent, &start)?;
    let wall = started.elapsed();
    let sides = Sides { base: &hb, head: &hh };
    let c = judge(args, sides, tallies, reasons, &opts, (rounds, spent.describe(wall)))?;
    super::emit_comparison(&c, args.format, args.output.as_deref(), &args.gate)
}

/// How the rounds are timed.
struct Timing {
    rounds: u32,
    seed: u64,
    min_sample_ns: f64,
    threads: usize,
}

/// What each build said when it started.
#[derive(Clone, Copy)]
struct Sides<'a> {
    base: &'a Hello,
    head: &'a Hello,
}

/// Runs `t.rounds` rounds of every case, each round with a fresh pair of
/// workers (started by `start`, in alternating order) and its own case
/// order; stops the last workers; returns each case's tally and the notes
/// of skipped and failed cases.
fn measure_rounds(
    args: &AbArgs,
    (mut base, mut head): (Worker, Worker),
    hb: &Hello,
    t: &Timing,
    spent: &mut Spent,
    start: &dyn Fn(&'static str) -> Result<Worker>,
) -> Result<(Vec<Tally>, Vec<String>)> {
    let Timing { rounds, seed, min_sample_ns, threads } = *t;
    let mut tallies: Vec<Tally> = hb
        .cases
        .iter()
        .map(|(id, _)| {
            Tally::Pairs(PairedCase {
                id: id.clone(),
                base: Vec::new(),
                head: Vec::new(),
                round: Vec::new(),
                load: Vec::new(),
                suspect: Vec::new(),
            })
        })
        .collect();
    // Per case, the slower build's per-iteration time in its last round:
    // later rounds reuse it to warm up briefly.
    let mut seen: Vec<Option<f64>> = vec![None; hb.cases.len()];
    let mut reasons: Vec<String> = Vec::new();
    let total = hb.cases.len() * rounds as usize;
    let mut done = 0;
    for round in 0..rounds {
        if round > 0 {
            // A fresh pair of processes, started in alternating order.
            *spent += base.quit();
            *spent += head.quit();
            if round % 2 == 1 {
                head = start("head")?;
                base = start("base")?;
            } else {
                base = start("base")?;
                head = start("head")?;
            }
            if base.hello.cases != hb.cases || head.hello.cases != hb.cases {
                bail!("a build planned other cases in round {}: its plan is not deterministic", round + 1);
            }
        }
        // Every round in its own order, so no case always follows the same
        // neighbour (its caches, its threads' wake-up).
        let mut order: Vec<usize> = (0..hb.cases.len()).collect();
        order.shuffle(&mut crate::util::rng(seed.wrapping_add(u64::from(round))));
        for ci in order {
            let (id, suite) = &hb.cases[ci];
            done += 1;
            let Tally::Pairs(case) = &mut tallies[ci] else { continue };
            if !args.quiet {
                eprintln!("[{done}/{total}] round {}/{rounds}: {id}", round + 1);
            }
            let share =
                RoundShare::new(&hb.settings.get(suite).cloned().unwrap_or_default(), hb.rounds, rounds);
            // Round 0 verified every case still in the running, in both builds.
            let verified = round > 0;
            // Later rounds warm up briefly (see `pairing::warm_up`).
            let share = RoundShare { warm_up: warm_up(&share, seen[ci]), ..share };
            let ask =
                CaseRound { id, share, round, parity: round as usize + ci, min_sample_ns, verified, threads };
            match pair_case(&mut base, &mut head, &ask)? {
                CaseRun::Pairs(p) => {
                    seen[ci] = Some(p.per_iter);
                    case.round.extend(std::iter::repeat_n(round, p.base.len()));
                    case.base.extend(p.base);
                    case.head.extend(p.head);
                    case.load.extend(p.load);
                    case.suspect.extend(p.suspect.map(|why| (round, why)));
                }
                CaseRun::Skipped(why) => {
                    reasons.push(format!("{id}: skipped: {why}"));
                    tallies[ci] = Tally::Skipped;
                }
                CaseRun::Failed(side, why) => {
                    eprintln!("{id}: FAILED ({}): {why}", side.describe());
                    reasons.push(format!("{id}: {}: {why}", side.describe()));
                    tallies[ci] =
                        Tally::Failed(crate::compare::gate::FailedCase { id: id.clone(), side, reason: why });
                }
            }
        }
    }
    *spent += base.quit();
    *spent += head.quit();
    Ok((tallies, reasons))
}

/// The paired comparison of the tallies, with the notes of injected
/// slowdowns, skipped and failed cases and how the rounds ran; writes the
/// pairs when `--pairs-output` asks.
fn judge(
    args: &AbArgs,
    Sides { base: hb, head: hh }: Sides<'_>,
    tallies: Vec<Tally>,
    reasons: Vec<String>,
    opts: &compare::CompareOptions,
    (rounds, spent): (u32, String),
) -> Result<compare::Comparison> {
    let mut cases = Vec::new();
    let (mut failed, mut skipped) = (Vec::new(), Vec::new());
    for (t, (id, _)) in tallies.into_iter().zip(&hb.cases) {
        match t {
            Tally::Pairs(c) => cases.push(c),
            Tally::Skipped => skipped.push(id.clone()),
            Tally::Failed(f) => failed.push(f),
        }
    }
    if let Some(p) = &args.pairs_output {
        let doc = serde_json::json!({ "base": hb.build, "head": hh.build, "rounds": rounds, "cases": cases });
        crate::util::write_atomic(p, serde_json::to_string_pretty(&doc)?.as_bytes())?;
    }
    let mut c = compare::paired::compare_paired(
        &args.base.display().to_string(),
        &args.head.display().to_string(),
        &cases,
        failed,
        skipped,
        opts,
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
        "{} (head) against {} (base); {rounds} rounds, each with fresh worker processes (each build verified every case in the first round; later rounds run the same binaries on the same seeded inputs); {}",
        hh.build,
        hb.build,
        spent
    ));
    Ok(c)
}
