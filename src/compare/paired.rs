//! Judging two builds measured alternately on one machine (`tfbench ab`).
//!
//! Each case yields pairs of samples taken back to back, one per build, in
//! the order A B B A A B ... (so neither build always goes first). Whatever
//! the machine does over seconds or minutes (a neighbour, a frequency
//! change) hits both samples of a pair alike and cancels in their ratio.
//!
//! What pairs cannot cancel is the luck of a process: two processes of one
//! binary can differ by several per cent on every pair (where the heap and
//! stack landed, which core each got). So every round runs with a fresh
//! pair of worker processes, and the round, not the pair, is the replicate.
//! For each case, with `d = ln(head_i / base_i)` and `m_r` the median of `d`
//! within round `r`:
//!
//! - **ratio**: `exp` of the mean of `m_r` with the Student t interval over
//!   the rounds, which holds the process-to-process spread. Rounds come in
//!   two orders (which build starts and prepares first flips every round),
//!   and on large memory-bound cases the order alone moved a round's ratio
//!   by 5-10%, the same way each time: so the mean is that of the two
//!   orders' means and the spread is pooled within each order
//!   ([`crate::stats::blocked_t`], `df = rounds - 2`), falling back to the
//!   plain one-sample t test ([`crate::stats::one_sample_t`]) when an order
//!   has fewer than two rounds;
//! - **p**: that t test of "the mean log-ratio is 0";
//! - with fewer than [`MIN_ROUNDS`] rounds nothing is replicated above the
//!   pairs: the ratio is `exp(median d)` with the order-statistic interval
//!   and the Wilcoxon signed-rank test of the pairs, and a note says the
//!   interval omits the process-to-process spread;
//! - **q** and the verdict: as for stored comparisons (see the parent
//!   module), with the plain noise band and no drift envelope, since drift
//!   cancels within the pairs. The rule needs significance (`q < alpha` or
//!   `p < case_alpha`) *and* the whole interval beyond the band.
//!
//! # Why `ab`'s `--alpha` defaults to 0.05, not 0.01
//!
//! [`DEFAULT_ALPHA`]. One `ab` of four cases, `add 4096x4096` slowed by an
//! injected 10% over 12 rounds, read +6.4% [+2.5%, +10.5%], `p = 0.004`,
//! `q = 0.016`: the whole interval above the 2% band, yet "inconclusive",
//! because significance at the stored comparisons' `alpha = 0.01` needs
//! `q < 0.01`, i.e. for the case with the smallest `p` among `m`,
//! `p < 0.01 / m` (0.0025 here; `t > 4.1` at the blocked test's 10 df),
//! and the per-case bar `p < 0.001` needs `t > 4.6`. The interval's own
//! bar (95%, lower end above 1.02) was `t > 3.4` at that spread.
//!
//! The stored comparisons' strict `alpha` answers a test that overstates
//! its evidence (Mann-Whitney over samples that share their run). Here `p`
//! comes from a t test over fresh-process rounds, the replicates, and is
//! calibrated: in 30 quiet-host runs, 1 of 1280 null `p` values fell
//! below 0.001 where 1.3 were expected (docs/verdicts.md, 2026-11-27). So
//! the usual false-discovery level applies. What it costs in an A/A run,
//! where every case is null: Benjamini-Hochberg at level `alpha` then
//! rejects anything at all with probability at most `alpha`, whatever the
//! number of cases `m` (with all nulls true the false-discovery rate is
//! the chance of any rejection), so at most 5% of A/A runs have a case
//! significant either way; a gate failure also needs the slower direction
//! (half of that), the whole interval above the band and the point beyond
//! `--max-regression`. The per-case bar adds at most `m x 0.0005`.
//! Simulated with this rule (normal round luck, 12 rounds; one case at
//! +10% for power): at the issue's spread (5.8% SD of a round's log-ratio)
//! A/A runs fail the gate in 0.2% (4 cases) and 1.0% (47 cases), at 10%
//! spread in 1.4% and 2.6%; a lone +10% case among 4 is caught in 98%
//! (90.5% at `alpha = 0.01`), among 47 in 83% (81%). The tests below check
//! the goals on seeded synthetic rounds: a lone 10% slowdown caught in at
//! least 9 of 10 runs, A/A failing at most 1 in 10.

use super::{CaseChange, CompareOptions, Comparison, Judgement, Method, Verdict};
use crate::results::Estimate;
use crate::stats;

/// One case's paired per-iteration times (`base[i]` and `head[i]` were
/// taken back to back).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PairedCase {
    /// Case id.
    pub id: String,
    /// The base build's per-iteration times, ns.
    pub base: Vec<f64>,
    /// The head build's per-iteration times, ns, paired with `base`.
    pub head: Vec<f64>,
    /// The round (the pair of worker processes) each pair was taken in.
    pub round: Vec<u32>,
    /// How much CPU other work took while each round's pairs were taken
    /// (one entry per round, where `/proc` could be read): rounds that ran
    /// disturbed are set aside while enough clean ones remain.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub load: Vec<crate::results::LoadSample>,
    /// Rounds whose samples the harness's screen caught timing something
    /// other than the work twice (`harness::screen`: the scheduler's tick),
    /// with why: set aside while enough other rounds remain, else the case
    /// is not judged.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub suspect: Vec<(u32, String)>,
}

/// One case's log-ratios by round after its disturbed and suspect rounds
/// were dealt with, and what the comparison says about them.
struct CleanLogs {
    logs: Vec<(u32, f64)>,
    /// The case's `disturbed` line, when any round ran disturbed or timed
    /// something other than the work.
    disturbed: Option<String>,
    /// Such rounds were set aside.
    set_aside: bool,
    /// Some round ran disturbed (the kernel's counters).
    disturbed_rounds: bool,
    /// Why the case cannot be judged: rounds whose samples timed something
    /// other than the work were kept, as too few others remain.
    suspect: Option<String>,
}

/// Sets aside the rounds of `d` that `load` shows disturbed (the rule of
/// [`super::disturbance`], the same as for stored comparisons) and those
/// the screen marked `suspect`, as long as [`MIN_ROUNDS`] other rounds
/// remain; otherwise keeps them all and says so (a kept suspect round
/// leaves the case unjudged). Pairs cancel what a disturbance does to both
/// builds alike; what it does to one sample and not the next lands in that
/// round's median, and one such round was each of the two paired misses of
/// docs/verdicts.md (2026-11-27: a round 15-45% slower in both processes,
/// the ratio thrown off with it).
fn set_aside_rounds(
    d: Vec<(u32, f64)>,
    load: &[crate::results::LoadSample],
    suspect: &[(u32, String)],
) -> CleanLogs {
    use std::collections::{BTreeMap, BTreeSet};
    let flagged: BTreeMap<u32, f64> =
        load.iter().filter_map(|l| super::disturbance::taken_share(l).map(|s| (l.round, s))).collect();
    let rounds: BTreeSet<u32> = d.iter().map(|&(r, _)| r).collect();
    let odd: BTreeMap<u32, &str> =
        suspect.iter().filter(|(r, _)| rounds.contains(r)).map(|(r, why)| (*r, why.as_str())).collect();
    let hit: Vec<f64> = rounds.iter().filter_map(|r| flagged.get(r).copied()).collect();
    let bad: BTreeSet<u32> =
        rounds.iter().copied().filter(|r| flagged.contains_key(r) || odd.contains_key(r)).collect();
    if bad.is_empty() {
        return CleanLogs {
            logs: d,
            disturbed: None,
            set_aside: false,
            disturbed_rounds: false,
            suspect: None,
        };
    }
    let worst = hit.iter().copied().fold(0.0, f64::max);
    let why_odd =
        odd.values().next().map(|w| format!("the samples of {} timed something else ({w})", odd.len()));
    let clean = rounds.len() - bad.len();
    if clean < MIN_ROUNDS {
        let mut parts = Vec::new();
        if !hit.is_empty() {
            parts.push(format!(
                "{} of {} rounds ran disturbed, up to {worst:.2} of a core taken",
                hit.len(),
                rounds.len()
            ));
        }
        parts.extend(why_odd.clone().map(|w| format!("in {} of {} rounds {w}", odd.len(), rounds.len())));
        let line = format!("{}; kept, as fewer than {MIN_ROUNDS} clean rounds remain", parts.join("; "));
        let suspect = why_odd.map(|w| format!("rounds kept where {w}"));
        return CleanLogs {
            logs: d,
            disturbed: Some(line),
            set_aside: false,
            disturbed_rounds: !hit.is_empty(),
            suspect,
        };
    }
    let logs = d.into_iter().filter(|(r, _)| !bad.contains(r)).collect();
    let mut parts = Vec::new();
    if !hit.is_empty() {
        parts.push(format!("{} round(s) set aside, up to {worst:.2} of a core taken", hit.len()));
    }
    parts.extend(why_odd.map(|w| format!("{} round(s) set aside: {w}", odd.len())));
    CleanLogs {
        logs,
        disturbed: Some(parts.join("; ")),
        set_aside: true,
        disturbed_rounds: !hit.is_empty(),
        suspect: None,
    }
}

/// Rounds needed to judge on the spread between rounds.
pub const MIN_ROUNDS: usize = 3;

/// `ab`'s default significance level (`--alpha`) for the Benjamini-Hochberg
/// `q`: the usual false-discovery level, since a paired `p` is calibrated
/// (see the module docs for why and what it costs A/A runs). Stored
/// comparisons keep 0.01.
pub const DEFAULT_ALPHA: f64 = 0.05;

/// One case's log-ratio judgement: the interval of the log-ratio and its p.
struct LogJudgement {
    point: f64,
    lower: f64,
    upper: f64,
    p: f64,
    /// Judged over rounds (true) or over pooled pairs.
    by_round: bool,
}

/// Judges one case's log-ratios `d` taken in rounds `round` (see the module
/// docs for the rule).
fn judge_logs(d: &[(u32, f64)], level: f64) -> LogJudgement {
    let mut by_round: std::collections::BTreeMap<u32, Vec<f64>> = Default::default();
    for &(r, v) in d {
        by_round.entry(r).or_default().push(v);
    }
    let medians: Vec<f64> = by_round.values().map(|v| stats::median(v)).collect();
    // Which build starts and prepares first flips from round to round: judge
    // with that order as a block when each order has two rounds or more.
    let (even, odd): (Vec<_>, Vec<_>) =
        by_round.iter().map(|(r, v)| (r % 2 == 0, stats::median(v))).partition(|x| x.0);
    let (even, odd): (Vec<f64>, Vec<f64>) =
        (even.into_iter().map(|x| x.1).collect(), odd.into_iter().map(|x| x.1).collect());
    let t = if medians.len() >= MIN_ROUNDS {
        stats::blocked_t(&even, &odd, level).or_else(|| stats::one_sample_t(&medians, level))
    } else {
        None
    };
    if let Some(t) = t {
        return LogJudgement { point: t.mean, lower: t.lower, upper: t.upper, p: t.p_value, by_round: true };
    }
    let mut sorted: Vec<f64> = d.iter().map(|&(_, v)| v).collect();
    let p = stats::wilcoxon_signed_rank(&sorted).p_value;
    sorted.sort_unstable_by(f64::total_cmp);
    let (lower, upper) = stats::median_ci(&sorted, level);
    LogJudgement { point: stats::quantile_sorted(&sorted, 0.5), lower, upper, p, by_round: false }
}

/// Builds the comparison of a paired run. `failed` (with the build that
/// failed) and `skipped` are the cases that could not be judged.
pub fn compare_paired(
    base_label: &str,
    head_label: &str,
    cases: &[PairedCase],
    failed: Vec<super::gate::FailedCase>,
    skipped: Vec<String>,
    opts: &CompareOptions,
) -> Comparison {
    let cleaned: Vec<CleanLogs> = cases
        .iter()
        .map(|c| {
            let d = c
                .base
                .iter()
                .zip(&c.head)
                .zip(c.round.iter().copied().chain(std::iter::repeat(0)))
                .filter(|((b, h), _)| **b > 0.0 && **h > 0.0)
                .map(|((b, h), r)| (r, (h / b).ln()))
                .filter(|(_, d)| d.is_finite())
                .collect();
            set_aside_rounds(d, &c.load, &c.suspect)
        })
        .collect();
    let (set_aside, kept_disturbed) = (
        cleaned.iter().filter(|c| c.disturbed_rounds && c.set_aside).count(),
        cleaned.iter().filter(|c| c.disturbed_rounds && !c.set_aside).count(),
    );
    let disturbed: Vec<Option<String>> = cleaned.iter().map(|c| c.disturbed.clone()).collect();
    let suspects: Vec<Option<String>> = cleaned.iter().map(|c| c.suspect.clone()).collect();
    let logs: Vec<Vec<(u32, f64)>> = cleaned.into_iter().map(|c| c.logs).collect();
    let judged: Vec<LogJudgement> = logs.iter().map(|d| judge_logs(d, opts.confidence_level)).collect();
    let p_values: Vec<f64> = judged.iter().map(|j| j.p).collect();
    let q_values = stats::benjamini_hochberg(&p_values);
    let pooled = judged.iter().zip(&logs).filter(|(j, d)| !j.by_round && !d.is_empty()).count();
    let mut changes: Vec<CaseChange> = cases
        .iter()
        .zip(logs.iter().zip(disturbed).zip(&suspects))
        .zip(judged.iter().zip(q_values))
        .map(|((c, ((d, disturbed), suspect)), (j, q_value))| {
            let ratio = Estimate {
                point: j.point.exp(),
                lower: j.lower.exp(),
                upper: j.upper.exp(),
                level: opts.confidence_level,
            };
            let band = opts.noise_threshold;
            let p_value = j.p;
            let verdict = if d.len() < opts.min_samples {
                Verdict::TooFewSamples
            } else if suspect.is_some() {
                // Samples that timed the tick give no evidence either way.
                Verdict::Inconclusive
            } else {
                Verdict::judge(&Judgement { p: p_value, q: q_value, ratio, band, envelope: (1.0, 1.0) }, opts)
            };
            CaseChange {
                id: c.id.clone(),
                old_median_ns: stats::median(&c.base),
                new_median_ns: stats::median(&c.head),
                old_samples: c.base.len(),
                new_samples: c.head.len(),
                ratio,
                p_value,
                q_value,
                band,
                band_source: "default".into(),
                verdict,
                beyond_limit: verdict == Verdict::Regressed && ratio.point - 1.0 > opts.max_regression,
                memory: None,
                disturbed,
                measure: crate::inside::Measure::Time,
            }
        })
        .collect();
    changes.sort_by(|a, b| b.ratio.point.total_cmp(&a.ratio.point).then_with(|| a.id.cmp(&b.id)));
    let vacuous = changes.is_empty().then(|| {
        if failed.is_empty() && skipped.is_empty() {
            "no case was run by both builds".to_string()
        } else {
            format!("no case could be compared: {} failed and {} skipped", failed.len(), skipped.len())
        }
    });
    Comparison {
        baseline: base_label.to_string(),
        candidate: head_label.to_string(),
        method: Method::Paired,
        runs: (1, 1),
        machine_mismatch: None,
        drift: None,
        changes,
        only_in_baseline: Vec::new(),
        only_in_candidate: Vec::new(),
        failed: failed.iter().map(|f| f.id.clone()).collect(),
        failures: failed,
        skipped,
        vacuous,
        notes: {
            let mut n = vec![
                "paired A/B: both builds ran each case alternately (A B B A ...) on this machine in this job, with a fresh pair of worker processes each round; verdicts rest on the paired ratios, so the machine's drift cancels, and their intervals on the spread between rounds, so a process's luck does not pass for a change".into(),
            ];
            if set_aside + kept_disturbed > 0 {
                n.push(format!(
                    "{} case(s) had rounds taken while other work used more than {:.0}% of a core beyond the CPUs the run left free (the kernel's counters, as for stored comparisons): {set_aside} were judged on their clean rounds; {kept_disturbed} kept them, having fewer than {MIN_ROUNDS} clean rounds",
                    set_aside + kept_disturbed,
                    100.0 * super::disturbance::DISTURBED_SHARE
                ));
            }
            let odd: Vec<String> = cases
                .iter()
                .zip(&suspects)
                .filter_map(|(c, s)| s.as_ref().map(|why| format!("{} ({why})", c.id)))
                .collect();
            if !odd.is_empty() {
                n.push(format!(
                    "{} case(s) not judged: the harness's screen caught their samples timing something other than the work in rounds that could not be set aside (reasons in brackets): {}",
                    odd.len(),
                    odd.join("; ")
                ));
            }
            if pooled > 0 {
                n.push(format!(
                    "{pooled} case(s) ran in fewer than {MIN_ROUNDS} rounds: judged on their pooled pairs, whose interval omits the spread between worker processes (run more rounds to include it)"
                ));
            }
            n
        },
        options: opts.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_distr::{Distribution, Normal};

    /// Paired samples with a drifting machine: each pair shares a level that
    /// wanders by +-20%, the head is `shift` slower, and the pairs fall in
    /// `rounds` rounds whose head process is off by its own luck, drawn
    /// from N(0, `luck`).
    fn drifting(id: &str, n: usize, shift: f64, rounds: usize, luck: f64, seed: u64) -> PairedCase {
        let mut rng = crate::util::rng(seed);
        let noise = Normal::new(0.0, 0.01).unwrap();
        let offsets: Vec<f64> =
            (0..rounds).map(|_| 1.0 + luck * Normal::new(0.0, 1.0).unwrap().sample(&mut rng)).collect();
        let (mut base, mut head, mut round) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..n {
            let r = i * rounds / n;
            let level = 100.0 * (1.0 + 0.2 * (i as f64 / 7.0).sin());
            base.push(level * (1.0 + noise.sample(&mut rng)));
            head.push(level * shift * offsets[r] * (1.0 + noise.sample(&mut rng)));
            round.push(r as u32);
        }
        PairedCase { id: id.into(), base, head, round, load: Vec::new(), suspect: Vec::new() }
    }

    #[test]
    fn drift_cancels_in_the_pairs() {
        let o = CompareOptions { resamples: 100, ..Default::default() };
        let cases = [
            drifting("same", 120, 1.0, 6, 0.002, 1),
            drifting("slow", 120, 1.10, 6, 0.002, 2),
            drifting("fast", 120, 0.95, 6, 0.002, 3),
        ];
        let c = compare_paired("base", "head", &cases, vec![], vec!["x".into()], &o);
        let get = |id: &str| c.changes.iter().find(|ch| ch.id == id).unwrap();
        assert_eq!(get("same").verdict, Verdict::Unchanged, "{:?}", get("same"));
        assert_eq!(get("slow").verdict, Verdict::Regressed);
        assert!(get("slow").beyond_limit && c.has_gating_failure());
        assert!((get("slow").ratio.point - 1.10).abs() < 0.01);
        assert_eq!(get("fast").verdict, Verdict::Improved);
        assert_eq!(c.method, Method::Paired);
        assert_eq!(c.skipped, ["x"]);
        assert!(c.vacuous.is_none());
        assert_eq!(c.notes.len(), 1, "every case had rounds to judge on: {:?}", c.notes);
    }

    #[test]
    fn a_process_s_luck_is_not_a_change() {
        // One pair of processes whose head is 6% off by luck: judged on its
        // pairs alone, that reads as a regression past the limit...
        let o = CompareOptions::default();
        let lucky = PairedCase { round: vec![0; 100], ..drifting("lucky", 100, 1.06, 1, 0.0, 4) };
        let c = compare_paired("a", "b", std::slice::from_ref(&lucky), vec![], vec![], &o);
        assert_eq!(c.changes[0].verdict, Verdict::Regressed);
        assert!(c.notes.iter().any(|n| n.contains("fewer than 3 rounds")), "{:?}", c.notes);
        // ...while over rounds with fresh processes, each off by 6% (SD) of
        // luck and no real change, no plan of 20 null cases gates.
        for seed in 0..20 {
            let cases: Vec<PairedCase> =
                (0..20).map(|k| drifting(&format!("c{k}"), 60, 1.0, 6, 0.06, 100 * seed + k)).collect();
            let c = compare_paired("a", "b", &cases, vec![], vec![], &o);
            assert!(
                !c.has_gating_failure(),
                "seed {seed}: {:?}",
                c.changes.iter().map(|x| x.verdict).collect::<Vec<_>>()
            );
        }
        // A real 15% slowdown still stands out over that luck.
        let slow = drifting("slow", 60, 1.15, 6, 0.01, 7);
        let c = compare_paired("a", "b", &[slow], vec![], vec![], &o);
        assert_eq!(c.changes[0].verdict, Verdict::Regressed, "{:?}", c.changes[0]);
    }

    #[test]
    fn an_order_effect_between_rounds_is_not_noise() {
        // Each round's pairs share the order effect of its parity (+-6%) and
        // a little luck; the head is 5% slower. Judged as one spread, the
        // alternation hides the change; blocked by order, it stands out.
        let o = CompareOptions::default();
        let mut rng = crate::util::rng(11);
        let luck = Normal::new(0.0, 0.005).unwrap();
        let (mut base, mut head, mut round) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..12u32 {
            let order = if r % 2 == 0 { 1.06 } else { 1.0 / 1.06 };
            let l = 1.0 + luck.sample(&mut rng);
            for _ in 0..9 {
                base.push(100.0);
                head.push(100.0 * 1.05 * order * l);
                round.push(r);
            }
        }
        let case =
            PairedCase { id: "ordered".into(), base, head, round, load: Vec::new(), suspect: Vec::new() };
        let c = compare_paired("a", "b", std::slice::from_ref(&case), vec![], vec![], &o);
        let ch = &c.changes[0];
        assert_eq!(ch.verdict, Verdict::Regressed, "{ch:?}");
        assert!((ch.ratio.point - 1.05).abs() < 0.01 && ch.ratio.upper - ch.ratio.lower < 0.02, "{ch:?}");
        // The same with no change: unchanged, not a false call either way.
        let same = PairedCase { head: case.head.iter().map(|h| h / 1.05).collect(), ..case };
        let c = compare_paired("a", "b", &[same], vec![], vec![], &o);
        assert_eq!(c.changes[0].verdict, Verdict::Unchanged, "{:?}", c.changes[0]);
    }

    /// What other work took in `round` of a one-thread run on 2 CPUs: `taken`
    /// cores beyond the spare one, over 1 s.
    fn load(case: &str, round: u32, taken: f64) -> crate::results::LoadSample {
        crate::results::LoadSample {
            case: case.into(),
            round,
            wall_ns: 1e9,
            others_ns: (1.0 + taken) * 1e9,
            steal_ns: 0.0,
            cpus: 2,
            threads: 1,
        }
    }

    #[test]
    fn a_disturbed_round_is_set_aside_while_enough_clean_ones_remain() {
        let o = CompareOptions::default();
        // Twelve rounds, no change; in round 3 the head's samples ran 30%
        // slow while another process held a core.
        let mut case = drifting("x", 108, 1.0, 12, 0.004, 21);
        for (h, r) in case.head.iter_mut().zip(&case.round) {
            if *r == 3 {
                *h *= 1.3;
            }
        }
        let loud = compare_paired("a", "b", std::slice::from_ref(&case), vec![], vec![], &o);
        assert_ne!(loud.changes[0].verdict, Verdict::Unchanged, "{:?}", loud.changes[0]);
        assert!(loud.changes[0].disturbed.is_none());
        // With the kernel's figures for every round (round 3 disturbed,
        // another round with background noise only), round 3 goes.
        case.load = (0..12).map(|r| load("x", r, if r == 3 { 0.8 } else { 0.01 })).collect();
        let c = compare_paired("a", "b", std::slice::from_ref(&case), vec![], vec![], &o);
        let ch = &c.changes[0];
        assert_eq!(ch.verdict, Verdict::Unchanged, "{ch:?}");
        assert_eq!(ch.disturbed.as_deref(), Some("1 round(s) set aside, up to 0.80 of a core taken"));
        assert!(c.notes.iter().any(|n| n.contains("1 were judged on their clean rounds")), "{:?}", c.notes);
        // Too few clean rounds left: every round is kept, and the case says so.
        let short = drifting("y", 27, 1.0, 3, 0.004, 22);
        let short = PairedCase { load: vec![load("y", 1, 0.5)], ..short };
        let c = compare_paired("a", "b", &[short], vec![], vec![], &o);
        let line = c.changes[0].disturbed.as_deref().unwrap_or_default();
        assert!(line.starts_with("1 of 3 rounds ran disturbed") && line.contains("kept"), "{line}");
        assert!(c.notes.iter().any(|n| n.contains("1 kept them")), "{:?}", c.notes);
    }

    #[test]
    fn a_round_that_timed_the_tick_is_set_aside_or_leaves_the_case_unjudged() {
        let o = CompareOptions::default();
        // Twelve rounds, no change; in round 5 the head's samples timed
        // the scheduler's tick (4 ms each) and the screen said so twice.
        let mut case = drifting("x", 108, 1.0, 12, 0.004, 23);
        for (h, r) in case.head.iter_mut().zip(&case.round) {
            if *r == 5 {
                *h *= 40.0;
            }
        }
        let why = "measured twice: head build: 9 of 9 samples last a whole number of scheduler ticks";
        case.suspect = vec![(5, why.into())];
        let c = compare_paired("a", "b", std::slice::from_ref(&case), vec![], vec![], &o);
        let ch = &c.changes[0];
        assert_eq!(ch.verdict, Verdict::Unchanged, "{ch:?}");
        let line = ch.disturbed.as_deref().unwrap_or_default();
        assert!(line.starts_with("1 round(s) set aside: the samples of 1 timed something else"), "{line}");
        // The disturbance note counts only rounds the kernel's counters flagged.
        assert!(!c.notes.iter().any(|n| n.contains("judged on their clean rounds")), "{:?}", c.notes);
        // Three rounds, one suspect: nothing to set it aside for, so the
        // case is not judged, whatever its ratio, and a note names it.
        let mut short = drifting("y", 27, 1.0, 3, 0.004, 24);
        for (h, r) in short.head.iter_mut().zip(&short.round) {
            if *r == 1 {
                *h *= 40.0;
            }
        }
        short.suspect = vec![(1, why.into())];
        let c = compare_paired("a", "b", &[short], vec![], vec![], &o);
        assert_eq!(c.changes[0].verdict, Verdict::Inconclusive, "{:?}", c.changes[0]);
        assert!(
            c.notes
                .iter()
                .any(|n| n.starts_with("1 case(s) not judged: the harness's screen") && n.contains("y (")),
            "{:?}",
            c.notes
        );
    }

    /// `ab`'s options as its command line gives them by default.
    fn ab_defaults() -> CompareOptions {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(["tfbench", "ab", "--base", "a", "--head", "b"]).unwrap();
        let crate::cli::Command::Ab(args) = cli.command else { panic!("not ab") };
        let g = &args.gate;
        CompareOptions {
            alpha: g.alpha,
            case_alpha: g.case_alpha,
            noise_threshold: g.noise_threshold / 100.0,
            max_regression: g.max_regression / 100.0,
            ..Default::default()
        }
    }

    #[test]
    fn ab_s_alpha_defaults_to_the_paired_level_and_compare_s_does_not() {
        use clap::Parser;
        assert_eq!(ab_defaults().alpha, DEFAULT_ALPHA);
        let cli = crate::cli::Cli::try_parse_from(["tfbench", "compare", "--baseline", "a"]).unwrap();
        let crate::cli::Command::Compare(args) = cli.command else { panic!("not compare") };
        assert_eq!(args.gate.alpha, CompareOptions::default().alpha);
        let cli = crate::cli::Cli::try_parse_from([
            "tfbench", "ab", "--base", "a", "--head", "b", "--alpha", "0.01",
        ]);
        let crate::cli::Command::Ab(args) = cli.unwrap().command else { panic!("not ab") };
        assert_eq!(args.gate.alpha, 0.01, "--alpha still sets it");
    }

    #[test]
    fn the_issue_s_case_is_regressed_on_ab_s_defaults() {
        // Issue 45: +6.4% [+2.5%, +10.5%], p 0.004, q 0.016 over 12 rounds:
        // inconclusive at alpha 0.01, regressed (and gating) at ab's.
        let ratio = Estimate { point: 1.064, lower: 1.025, upper: 1.105, level: 0.95 };
        let j = Judgement { p: 0.004, q: 0.016, ratio, band: 0.02, envelope: (1.0, 1.0) };
        let old = CompareOptions::default();
        assert_eq!(Verdict::judge(&j, &old), Verdict::Inconclusive);
        let o = ab_defaults();
        assert_eq!(Verdict::judge(&j, &o), Verdict::Regressed);
        assert!(ratio.point - 1.0 > o.max_regression);
        // Not significant at all (p 0.2): still inconclusive, interval or not.
        assert_eq!(Verdict::judge(&Judgement { p: 0.2, q: 0.2, ..j }, &o), Verdict::Inconclusive);
    }

    /// One simulated `ab` of `m` cases over 12 rounds of 9 pairs: each
    /// round's head process off by its own luck (`luck`, SD of the round's
    /// ratio), the first case `shift` slower.
    fn simulated_ab(m: usize, shift: f64, luck: f64, seed: u64) -> Comparison {
        let cases: Vec<PairedCase> = (0..m)
            .map(|k| {
                drifting(
                    &format!("c{k}"),
                    108,
                    if k == 0 { shift } else { 1.0 },
                    12,
                    luck,
                    seed * 1000 + k as u64,
                )
            })
            .collect();
        compare_paired("a", "b", &cases, vec![], vec![], &ab_defaults())
    }

    #[test]
    fn ab_s_defaults_catch_a_lone_10pct_slowdown_and_pass_a_a() {
        // The spread of the issue's run: its interval over 12 rounds was
        // +-3.8% (log), a round's ratio off by 5.8% SD. Goals (issue 45): a
        // lone 10% slowdown caught in >= 9 of 10 runs, A/A failing in <= 1
        // of 10. Seeded, so each count is a fixed fact of this rule.
        let runs = 40;
        let caught = (0..runs)
            .filter(|&s| {
                let c = simulated_ab(4, 1.10, 0.058, s);
                let slow = c.changes.iter().find(|x| x.id == "c0").unwrap();
                slow.verdict == Verdict::Regressed && slow.beyond_limit
            })
            .count();
        eprintln!("a lone +10% among 4 cases gated in {caught} of {runs} runs");
        assert!(caught >= 36, "a lone +10% gated in {caught} of {runs} runs");
        for (m, luck) in [(4, 0.058), (46, 0.058), (46, 0.10)] {
            let failed =
                (0..runs).filter(|&s| simulated_ab(m, 1.0, luck, 500 + s).has_gating_failure()).count();
            eprintln!("A/A of {m} cases at {luck} luck failed the gate in {failed} of {runs} runs");
            assert!(
                failed <= 4,
                "A/A of {m} cases at {luck} luck failed the gate in {failed} of {runs} runs"
            );
        }
    }

    #[test]
    fn few_pairs_and_nothing_to_compare() {
        let o = CompareOptions::default();
        let c = compare_paired("a", "b", &[drifting("short", 3, 2.0, 3, 0.0, 1)], vec![], vec![], &o);
        assert_eq!(c.changes[0].verdict, Verdict::TooFewSamples);
        let f = crate::compare::gate::FailedCase {
            id: "f".into(),
            side: crate::compare::gate::FailedSide::Candidate,
            reason: "verify: wrong".into(),
        };
        let c = compare_paired("a", "b", &[], vec![f], vec![], &o);
        assert!(c.vacuous.as_deref().is_some_and(|v| v.contains("1 failed")), "{:?}", c.vacuous);
        assert_eq!(c.failed, ["f"]);
        assert!(c.has_gating_failure(), "a case the head build failed gates");
    }
}
