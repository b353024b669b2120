//! One case's round in `tfbench ab`: both workers prepare, verify and warm
//! up the case, then give samples alternately.

use super::process::Worker;
use super::protocol::{Reply, Request};
use crate::compare::gate::FailedSide;
use crate::config::Settings;
use anyhow::{Result, bail};
use std::time::{Duration, Instant};

/// The least warm-up a round gets, seconds: enough to size the iterations.
const MIN_WARM_UP: f64 = 0.05;

/// Warm-up of a case in rounds after its first, seconds: the first round
/// already sized its iterations, so a fresh process only needs its pages
/// touched, its caches filled and its threads awake. A full warm-up in every
/// round was a fifth of `ab`'s time and bought nothing the pairs need.
pub(super) const LATER_WARM_UP: f64 = 0.01;

/// Iterations a later round's warm-up runs at least (of the per-iteration
/// time the first round saw), so a slow case still runs a few unmeasured.
const LATER_WARM_UP_ITERS: f64 = 3.0;

/// The pause before each sample, so the other build's idle threads
/// (spinning GEMM workers, rayon) are asleep when this one's clock starts.
const SETTLE: Duration = Duration::from_micros(500);

/// The least pairs a round takes.
const MIN_PAIRS: usize = 5;

/// What one round of one case may spend, per build: the profile's time over
/// its own rounds, spread evenly over `ab`'s rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct RoundShare {
    /// Warm-up, seconds.
    pub warm_up: f64,
    /// Measurement budget, seconds.
    pub measurement: f64,
    /// Hard cap on the samples' time, seconds.
    pub max_time: Option<f64>,
    /// Pairs to take (fewer if the budget runs out first).
    pub pairs: usize,
}

/// The warm-up of one case's round, seconds: the share's in its first round
/// (`seen` is `None`), else [`LATER_WARM_UP`] or a few iterations of the
/// slower build's `seen` per-iteration time (ns), whichever is longer, never
/// more than the share's.
pub(super) fn warm_up(s: &RoundShare, seen: Option<f64>) -> f64 {
    match seen {
        None => s.warm_up,
        Some(ns) => (LATER_WARM_UP_ITERS * ns * 1e-9).max(LATER_WARM_UP).min(s.warm_up),
    }
}

impl RoundShare {
    /// The share of settings `s` (made for `configured` rounds) in one of
    /// `rounds` rounds.
    pub fn new(s: &Settings, configured: u32, rounds: u32) -> Self {
        let f = f64::from(configured.max(1)) / f64::from(rounds.max(1));
        Self {
            warm_up: (s.warm_up_time * f).max(MIN_WARM_UP.min(s.warm_up_time)),
            measurement: s.measurement_time * f,
            max_time: s.max_time.map(|m| m * f),
            pairs: ((s.sample_size as f64 * f).ceil() as usize).max(MIN_PAIRS),
        }
    }
}

/// One case's round as the driver asks for it.
pub(super) struct CaseRound<'a> {
    /// The case id.
    pub id: &'a str,
    /// Its share of the profile's time.
    pub share: RoundShare,
    /// The round (0-based).
    pub round: u32,
    /// Picks which build goes first: prepares, warms up and samples first.
    pub parity: usize,
    /// The shortest sample the timer allows, ns.
    pub min_sample_ns: f64,
    /// Both builds verified the case in an earlier round.
    pub verified: bool,
    /// The plan's worker threads (what the load figures leave free).
    pub threads: usize,
}

/// A round's pairs.
pub(super) struct Pairs {
    /// The base build's per-iteration times, ns.
    pub base: Vec<f64>,
    /// The head build's, paired with `base`.
    pub head: Vec<f64>,
    /// The slower build's warm-up per-iteration time, ns.
    pub per_iter: f64,
    /// How much CPU other work took while the pairs were taken, where
    /// `/proc` could be read.
    pub load: Option<crate::results::LoadSample>,
    /// Why the round's samples timed something other than the work, when
    /// the screen caught them twice (`harness::screen`).
    pub suspect: Option<String>,
}

/// One build's samples in a round.
#[derive(Debug, Default)]
struct Taken {
    /// Per-iteration times, ns.
    per_iter: Vec<f64>,
    /// Whole samples, ns: what the tick screen reads.
    nanos: Vec<f64>,
    /// The timing thread's CPU time per sample, where the worker reports it.
    cpu: Vec<Option<f64>>,
}

impl Taken {
    fn push(&mut self, nanos: f64, cpu: Option<f64>, iters: u64) {
        self.per_iter.push(nanos / iters as f64);
        self.nanos.push(nanos);
        self.cpu.push(cpu);
    }

    /// Why the tick screen (`tick` ns, where known) catches these samples,
    /// with the timing thread's CPU time when every sample has it, else on
    /// the ticks alone, as `run` does where the CPU time is unknown.
    fn caught(&self, tick: Option<f64>) -> Option<String> {
        let cpu: Option<Vec<f64>> = self.cpu.iter().copied().collect();
        crate::harness::screen::on_tick(&self.nanos, cpu.as_deref(), tick?)
    }
}

/// What one attempt at a round's pairs gave.
enum Sampled {
    /// Both builds' samples, base first.
    Pairs([Taken; 2]),
    /// A sample failed: on which build, and why.
    Failed(FailedSide, String),
}

/// Takes up to `c.share.pairs` pairs of `iters` iterations, alternating
/// which build goes first, until `budget` is spent (after at least
/// `MIN_SAMPLES`).
fn take_pairs(
    base: &mut Worker,
    head: &mut Worker,
    c: &CaseRound,
    iters: u64,
    budget: Duration,
) -> Result<Sampled> {
    let start = Instant::now();
    let mut taken = [Taken::default(), Taken::default()];
    for i in 0..c.share.pairs {
        if i >= crate::harness::sampler::MIN_SAMPLES && start.elapsed() > budget {
            break;
        }
        let head_first = (i + c.parity) % 2 == 1;
        let order: [(usize, &mut Worker); 2] =
            if head_first { [(1, &mut *head), (0, &mut *base)] } else { [(0, &mut *base), (1, &mut *head)] };
        for (k, w) in order {
            // Let the other build's idle threads (spinning GEMM workers,
            // rayon) settle before this one's clock starts.
            match w.sample_after(SETTLE, iters)? {
                Reply::Nanos(ns) => taken[k].push(ns, None, iters),
                Reply::Timed { nanos, cpu_ns } => taken[k].push(nanos, cpu_ns, iters),
                Reply::Failed { phase, reason } => {
                    return Ok(Sampled::Failed(side_of(w), format!("{} build, {phase}: {reason}", w.label)));
                }
                other => bail!("unexpected reply {other:?}"),
            }
        }
    }
    Ok(Sampled::Pairs(taken))
}

/// What one case's round gave.
pub(super) enum CaseRun {
    /// The pairs.
    Pairs(Pairs),
    Skipped(String),
    /// The case failed: on which build, and why.
    Failed(FailedSide, String),
}

/// The side of a worker, by its label.
fn side_of(w: &Worker) -> FailedSide {
    if w.label == "base" { FailedSide::Baseline } else { FailedSide::Candidate }
}

/// Prepares, warms up and samples one case on both workers; `parity` picks
/// which build goes first in the first pair. Both builds prepare and warm
/// up even when one fails, so a failure is reported for the side(s) it
/// happened on (a failure on the head's side fails the gate). A worker that
/// dies fails the case on both sides (which one is not known) and is
/// restarted for the next one.
pub(super) fn pair_case(base: &mut Worker, head: &mut Worker, c: &CaseRound) -> Result<CaseRun> {
    let (id, s, parity, verified) = (c.id, &c.share, c.parity, c.verified);
    let outcome = (|| -> Result<CaseRun> {
        let mut per_iter = [0.0f64; 2];
        // Which build prepares and warms up first alternates with `parity`,
        // as the sample order does: in A/A runs the build that prepared
        // second ran the large memory-bound cases 2-7% faster, round after
        // round (`sqrt 16M` 0.93-0.99, `mul 4096x4096` 0.97-0.99), a bias
        // that a fixed order turns into a false verdict.
        let first_head = parity % 2 == 1;
        let sides: [(usize, &mut Worker); 2] =
            if first_head { [(1, &mut *head), (0, &mut *base)] } else { [(0, &mut *base), (1, &mut *head)] };
        let mut failed: Vec<(FailedSide, String)> = Vec::new();
        for (k, w) in sides {
            // A worker of a build that already verified this case (in an
            // earlier round) prepares it without checking it again, if it
            // can: fresh processes every round made re-verification the
            // largest part of `ab`'s overhead over two runs.
            let request = if verified && w.hello.verify_once {
                Request::PrepareVerified(id.into())
            } else {
                Request::Prepare(id.into())
            };
            match w.ask(&request)? {
                Reply::Ok => {}
                Reply::Skipped(why) => return Ok(CaseRun::Skipped(why)),
                Reply::Failed { phase, reason } => {
                    failed.push((side_of(w), format!("{} build, {phase}: {reason}", w.label)));
                    continue;
                }
                other => bail!("unexpected reply {other:?}"),
            }
            per_iter[k] = match w.ask(&Request::WarmUp(s.warm_up))? {
                Reply::PerIter(ns) => ns,
                Reply::Failed { phase, reason } => {
                    failed.push((side_of(w), format!("{} build, {phase}: {reason}", w.label)));
                    continue;
                }
                other => bail!("unexpected reply {other:?}"),
            };
        }
        if !failed.is_empty() {
            let side = if failed.len() == 2 { FailedSide::Both } else { failed[0].0 };
            let why: Vec<String> = failed.into_iter().map(|(_, w)| w).collect();
            return Ok(CaseRun::Failed(side, why.join("; ")));
        }
        // The same iterations for both, sized on the slower of the two so a
        // sample lasts what `run` would give it.
        let target = (0.9 * s.measurement * 1e9 / s.pairs as f64).max(c.min_sample_ns);
        let iters = ((target / per_iter[0].max(per_iter[1])).round() as u64).max(1);
        // Both builds' budgets: the measurement time, capped by --max-time.
        let per_build = s.max_time.map_or(s.measurement, |m| m.min(s.measurement));
        let budget = Duration::from_secs_f64(2.0 * per_build);
        // The kernel's counters around the pairs, both workers' CPU time
        // counted as the measurement's own (`harness::load`).
        let pids = [base.pid(), head.pid()];
        let before = crate::harness::load::snapshot_with(&pids);
        // Samples that timed the scheduler's tick rather than the work
        // (`harness::screen`, as `run` screens them) are taken once more;
        // caught again, the round is marked suspect and the comparison
        // sets it aside.
        let tick = crate::harness::screen::tick_ns();
        let mut suspect = None;
        let mut first_catch: Option<String> = None;
        let [tb, th] = loop {
            let taken = match take_pairs(&mut *base, &mut *head, c, iters, budget)? {
                Sampled::Pairs(t) => t,
                Sampled::Failed(side, why) => return Ok(CaseRun::Failed(side, why)),
            };
            let caught: Vec<String> = ["base", "head"]
                .iter()
                .zip(&taken)
                .filter_map(|(label, t)| t.caught(tick).map(|why| format!("{label} build: {why}")))
                .collect();
            if caught.is_empty() {
                break taken;
            }
            if first_catch.is_some() {
                suspect = Some(format!("measured twice: {}", caught.join("; ")));
                break taken;
            }
            first_catch = Some(caught.join("; "));
        };
        let after = crate::harness::load::snapshot_with(&pids);
        let load =
            before.zip(after).map(|(a, b)| crate::harness::load::between(&a, &b, id, c.round, c.threads));
        for w in [&mut *base, &mut *head] {
            w.ask(&Request::Finish)?;
        }
        Ok(CaseRun::Pairs(Pairs {
            base: tb.per_iter,
            head: th.per_iter,
            per_iter: per_iter[0].max(per_iter[1]),
            load,
            suspect,
        }))
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
            let why = format!("a worker process died: {e:#}");
            base.restart()?;
            head.restart()?;
            Ok(CaseRun::Failed(FailedSide::Both, why))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_share_the_profile_s_time() {
        let s = Settings {
            warm_up_time: 0.5,
            measurement_time: 2.0,
            max_time: Some(6.0),
            sample_size: 50,
            ..Settings::default()
        };
        // ci.toml: 2 rounds of 2 s; over 6 rounds each gets a third of that.
        let r = RoundShare::new(&s, 2, 6);
        assert!((r.measurement - 2.0 / 3.0).abs() < 1e-12 && (r.warm_up - 1.0 / 6.0).abs() < 1e-12);
        assert_eq!((r.pairs, r.max_time.map(|m| (m - 2.0).abs() < 1e-12)), (17, Some(true)));
        // A given number of rounds, as the profile's: each round in full.
        assert_eq!(RoundShare::new(&s, 6, 6).measurement, 2.0);
        // Many rounds: floors on warm-up and pairs.
        let tiny = RoundShare::new(&s, 1, 100);
        assert_eq!((tiny.warm_up, tiny.pairs), (MIN_WARM_UP, MIN_PAIRS));
    }

    #[test]
    fn later_rounds_warm_up_briefly() {
        let s = RoundShare { warm_up: 0.2, measurement: 0.5, max_time: None, pairs: 10 };
        assert_eq!(warm_up(&s, None), 0.2);
        // A 1 us case: the floor.
        assert_eq!(warm_up(&s, Some(1e3)), LATER_WARM_UP);
        // A 20 ms case: three iterations.
        assert!((warm_up(&s, Some(2e7)) - 0.06).abs() < 1e-12);
        // A 1 s case: never more than the first round's.
        assert_eq!(warm_up(&s, Some(1e9)), 0.2);
    }
}
