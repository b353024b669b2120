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
//! costs about twice one `run` whatever the number of rounds. Cases those
//! rounds leave undecided then run more rounds, alone, up to `--max-rounds`
//! (twice the rounds by default), each later look judged at a stricter
//! level ([`rounds`]).
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
use process::{Spent, Worker, check_executable, parse_env};
use rounds::{Rounds, Timing};
use std::time::Instant;

mod counted;
mod pairing;
mod process;
pub(crate) mod protocol;
mod rounds;
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
    let max_rounds = args.max_rounds.unwrap_or(2 * rounds).max(rounds);
    let mut spent = Spent::default();
    let runner = Rounds { args, hb: &hb, t: Timing { rounds, seed, min_sample_ns, threads }, start: &start };
    let mut tl = runner.tallies();
    runner.run(Some((base, head)), rounds, None, &mut tl, &mut spent)?;
    runner.extend(max_rounds, &opts, &mut tl, &mut spent)?;
    let wall = started.elapsed();
    let sides = Sides { base: &hb, head: &hh };
    let how = tl.describe(rounds);
    let c = judge(args, sides, tl.cases, tl.reasons, &opts, (&how, tl.next_round, spent.describe(wall)))?;
    super::emit_comparison(&c, args.format, args.output.as_deref(), &args.gate)
}

/// What each build said when it started.
#[derive(Clone, Copy)]
struct Sides<'a> {
    base: &'a Hello,
    head: &'a Hello,
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
    (how, rounds, spent): (&str, u32, String),
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
        "{} (head) against {} (base); {how}, each with fresh worker processes (each build verified every case in the first round; later rounds run the same binaries on the same seeded inputs); {}",
        hh.build,
        hb.build,
        spent
    ));
    Ok(c)
}
