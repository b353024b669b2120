//! The rounds of `tfbench ab`: the planned rounds over every case, then,
//! while cases remain undecided, extra rounds over those cases alone.
//!
//! Why extra rounds: a verdict needs the whole interval of a case's ratio on
//! one side of the band (or inside it). On a quiet host, 12 rounds left the
//! interval of a small case straddling the band's edge (`sum 1000x1000`
//! A/A: [-2.1%, +2.0%] against ±2%) in 3 of 4 A/A runs of
//! `scripts/ab-power.sh`, and "could not judge" then failed the gate. More
//! rounds narrow only the intervals that need it, at the cost of those
//! cases' time alone. Every extra look spends part of the error rates, so a
//! case judged for the k-th time is judged at `1 - (1 - level) / k` and
//! `alpha / k` ([`crate::compare::paired::at_look`]): the chance of a false
//! verdict either way stays within the first look's, whatever the number of
//! looks.

use super::pairing::{CaseRound, CaseRun, RoundShare, pair_case, warm_up};
use super::process::{Spent, Worker};
use super::{Hello, Tally};
use crate::cli::AbArgs;
use crate::compare::{CompareOptions, Verdict, paired::PairedCase};
use anyhow::{Result, bail};
use rand::seq::SliceRandom;

/// How the rounds are timed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    /// The planned rounds: each gets this share of the profile's time.
    pub rounds: u32,
    /// Input and shuffling seed.
    pub seed: u64,
    /// The shortest sample the timer allows, ns.
    pub min_sample_ns: f64,
    /// Worker threads of the plan.
    pub threads: usize,
}

/// What the rounds measured so far.
pub(super) struct Tallies {
    /// Per case of the plan, in the workers' order.
    pub cases: Vec<Tally>,
    /// Notes of skipped and failed cases.
    pub reasons: Vec<String>,
    /// Per case, the slower build's per-iteration time in its last round:
    /// later rounds reuse it to warm up briefly.
    seen: Vec<Option<f64>>,
    /// Rounds run so far: the next round's number.
    pub next_round: u32,
    /// The extensions: (extra rounds, cases they ran).
    pub extra: Vec<(u32, usize)>,
}

impl Tallies {
    /// How the rounds ran, for the comparison's note.
    pub fn describe(&self, planned: u32) -> String {
        if self.extra.is_empty() {
            return format!("{planned} rounds");
        }
        let steps: Vec<String> = self.extra.iter().map(|(n, c)| format!("{n} for {c} case(s)")).collect();
        format!(
            "{planned} rounds, then {} more for cases still undecided ({}; each later look judged at a stricter level, `1 - (1 - level) / looks`)",
            self.next_round - planned,
            steps.join(", ")
        )
    }
}

/// Runs rounds of the plan with one pair of builds.
pub(super) struct Rounds<'a> {
    /// The command line.
    pub args: &'a AbArgs,
    /// What the base build planned (both builds planned the same).
    pub hb: &'a Hello,
    /// The timing.
    pub t: Timing,
    /// Starts a worker of a build by its label (`base` or `head`).
    pub start: &'a dyn Fn(&'static str) -> Result<Worker>,
}

impl Rounds<'_> {
    /// Empty tallies for every case of the plan.
    pub fn tallies(&self) -> Tallies {
        let cases = self
            .hb
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
                    looks: 1,
                })
            })
            .collect();
        Tallies {
            cases,
            reasons: Vec::new(),
            seen: vec![None; self.hb.cases.len()],
            next_round: 0,
            extra: Vec::new(),
        }
    }

    /// Runs `n` rounds of the cases `only` (every case when `None`), each
    /// with a fresh pair of workers, the first with `workers` when given
    /// (the pair that greeted); stops each pair after its round.
    pub fn run(
        &self,
        mut workers: Option<(Worker, Worker)>,
        n: u32,
        only: Option<&[usize]>,
        tl: &mut Tallies,
        spent: &mut Spent,
    ) -> Result<()> {
        let cases: Vec<usize> = only.map_or_else(|| (0..self.hb.cases.len()).collect(), <[usize]>::to_vec);
        let last = tl.next_round + n;
        for round in tl.next_round..last {
            let (mut base, mut head) = match workers.take() {
                Some(w) => w,
                None => self.fresh_pair(round)?,
            };
            let outcome = self.one_round(round, last, &cases, (&mut base, &mut head), tl);
            *spent += base.quit();
            *spent += head.quit();
            outcome?;
        }
        tl.next_round = last;
        Ok(())
    }

    /// Extra rounds, `rounds / 3` (at least 2) at a time, over the cases
    /// still undecided ([`undecided`]), until none is or `max_rounds` rounds
    /// ran in all.
    pub fn extend(
        &self,
        max_rounds: u32,
        opts: &CompareOptions,
        tl: &mut Tallies,
        spent: &mut Spent,
    ) -> Result<()> {
        let step = (self.t.rounds / 3).max(2);
        while tl.next_round < max_rounds {
            let open = undecided(&tl.cases, opts);
            if open.is_empty() {
                break;
            }
            let n = step.min(max_rounds - tl.next_round);
            for &i in &open {
                if let Tally::Pairs(c) = &mut tl.cases[i] {
                    c.looks += 1;
                }
            }
            if !self.args.quiet {
                eprintln!(
                    "{} case(s) undecided after {} rounds: {n} more round(s) of those (up to {max_rounds} in all)",
                    open.len(),
                    tl.next_round
                );
            }
            tl.extra.push((n, open.len()));
            self.run(None, n, Some(&open), tl, spent)?;
        }
        Ok(())
    }

    /// A fresh pair of workers, started in the order the round's parity
    /// gives (so neither build always starts first).
    fn fresh_pair(&self, round: u32) -> Result<(Worker, Worker)> {
        let (base, head) = if round % 2 == 1 {
            let head = (self.start)("head")?;
            ((self.start)("base")?, head)
        } else {
            let base = (self.start)("base")?;
            (base, (self.start)("head")?)
        };
        if base.hello.cases != self.hb.cases || head.hello.cases != self.hb.cases {
            bail!("a build planned other cases in round {}: its plan is not deterministic", round + 1);
        }
        Ok((base, head))
    }

    /// One round of `cases` in the round's own shuffled order (so no case
    /// always follows the same neighbour: its caches, its threads' wake-up).
    fn one_round(
        &self,
        round: u32,
        last: u32,
        cases: &[usize],
        (base, head): (&mut Worker, &mut Worker),
        tl: &mut Tallies,
    ) -> Result<()> {
        let Timing { rounds, seed, min_sample_ns, threads } = self.t;
        let mut order = cases.to_vec();
        order.shuffle(&mut crate::util::rng(seed.wrapping_add(u64::from(round))));
        for (k, ci) in order.into_iter().enumerate() {
            let (id, suite) = &self.hb.cases[ci];
            let Tally::Pairs(case) = &mut tl.cases[ci] else { continue };
            if !self.args.quiet {
                eprintln!("[{}/{}] round {}/{last}: {id}", k + 1, cases.len(), round + 1);
            }
            let share = RoundShare::new(
                &self.hb.settings.get(suite).cloned().unwrap_or_default(),
                self.hb.rounds,
                rounds,
            );
            // Round 0 verified every case still in the running, in both builds.
            let verified = round > 0;
            // Later rounds warm up briefly (see `pairing::warm_up`).
            let share = RoundShare { warm_up: warm_up(&share, tl.seen[ci]), ..share };
            let ask =
                CaseRound { id, share, round, parity: round as usize + ci, min_sample_ns, verified, threads };
            match pair_case(base, head, &ask)? {
                CaseRun::Pairs(p) => {
                    tl.seen[ci] = Some(p.per_iter);
                    case.round.extend(std::iter::repeat_n(round, p.base.len()));
                    case.base.extend(p.base);
                    case.head.extend(p.head);
                    case.load.extend(p.load);
                    case.suspect.extend(p.suspect.map(|why| (round, why)));
                }
                CaseRun::Skipped(why) => {
                    tl.reasons.push(format!("{id}: skipped: {why}"));
                    tl.cases[ci] = Tally::Skipped;
                }
                CaseRun::Failed(side, why) => {
                    eprintln!("{id}: FAILED ({}): {why}", side.describe());
                    tl.reasons.push(format!("{id}: {}: {why}", side.describe()));
                    tl.cases[ci] =
                        Tally::Failed(crate::compare::gate::FailedCase { id: id.clone(), side, reason: why });
                }
            }
        }
        Ok(())
    }
}

/// The cases (indices into `cases`) that a comparison of the pairs so far
/// leaves undecided: inconclusive or with too few samples, each judged at
/// its own look.
pub(super) fn undecided(cases: &[Tally], opts: &CompareOptions) -> Vec<usize> {
    let (idx, pairs): (Vec<usize>, Vec<PairedCase>) = cases
        .iter()
        .enumerate()
        .filter_map(|(i, t)| match t {
            Tally::Pairs(c) => Some((i, c.clone())),
            _ => None,
        })
        .unzip();
    let c = crate::compare::paired::compare_paired("", "", &pairs, Vec::new(), Vec::new(), opts);
    let open = |id: &str| {
        c.changes
            .iter()
            .any(|ch| ch.id == id && matches!(ch.verdict, Verdict::Inconclusive | Verdict::TooFewSamples))
    };
    idx.into_iter().zip(&pairs).filter(|(_, p)| open(&p.id)).map(|(i, _)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::paired::at_look;

    /// Pairs over `rounds` rounds whose head is `shift` slower, each round
    /// off by a seeded luck of SD `luck`.
    fn pairs(id: &str, rounds: u32, shift: f64, luck: f64, seed: u64) -> PairedCase {
        use rand_distr::{Distribution, Normal};
        let mut rng = crate::util::rng(seed);
        let n = Normal::new(0.0, luck).unwrap_or_else(|_| unreachable!());
        let (mut base, mut head, mut round) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..rounds {
            let l = n.sample(&mut rng);
            for _ in 0..10 {
                base.push(100.0);
                head.push(100.0 * shift * l.exp());
                round.push(r);
            }
        }
        PairedCase { id: id.into(), base, head, round, load: Vec::new(), suspect: Vec::new(), looks: 1 }
    }

    #[test]
    fn only_cases_whose_interval_straddles_the_band_are_undecided() {
        let opts = CompareOptions::default();
        let cases = vec![
            Tally::Pairs(pairs("tight", 12, 1.0, 0.002, 1)),
            Tally::Pairs(pairs("loose", 12, 1.0, 0.04, 2)),
            Tally::Pairs(pairs("slow", 12, 1.3, 0.002, 3)),
            Tally::Skipped,
        ];
        assert_eq!(undecided(&cases, &opts), vec![1]);
    }

    #[test]
    fn a_later_look_is_judged_at_the_stricter_level() {
        let o = CompareOptions::default();
        let l3 = at_look(&o, 3);
        assert!((1.0 - l3.confidence_level - (1.0 - o.confidence_level) / 3.0).abs() < 1e-12);
        assert!(
            (l3.alpha - o.alpha / 3.0).abs() < 1e-15 && (l3.case_alpha - o.case_alpha / 3.0).abs() < 1e-15
        );
        assert_eq!(at_look(&o, 1), o);
        // The same pairs: an interval at the later look is wider.
        let mut c = pairs("x", 12, 1.0, 0.02, 4);
        let first =
            crate::compare::paired::compare_paired("a", "b", std::slice::from_ref(&c), vec![], vec![], &o);
        c.looks = 3;
        let third = crate::compare::paired::compare_paired("a", "b", &[c], vec![], vec![], &o);
        let (f, t) = (&first.changes[0].ratio, &third.changes[0].ratio);
        assert!(t.lower < f.lower && t.upper > f.upper, "{f:?} {t:?}");
        assert!((t.level - l3.confidence_level).abs() < 1e-12);
    }

    #[test]
    fn the_note_says_how_many_rounds_were_added_and_for_how_many_cases() {
        let mut tl = Tallies { cases: vec![], reasons: vec![], seen: vec![], next_round: 12, extra: vec![] };
        assert_eq!(tl.describe(12), "12 rounds");
        tl.extra = vec![(4, 3), (4, 1)];
        tl.next_round = 20;
        let d = tl.describe(12);
        assert!(
            d.starts_with(
                "12 rounds, then 8 more for cases still undecided (4 for 3 case(s), 4 for 1 case(s)"
            ),
            "{d}"
        );
    }
}
