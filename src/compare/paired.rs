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
//! +10% for power): at the spread (5.8% SD of a round's log-ratio)
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
    /// How many times the case was judged: 1, or more when `ab` ran extra
    /// rounds because the earlier looks left it undecided. Every look
    /// spends part of the error rates, so the last is judged at
    /// [`at_look`]'s stricter levels (Bonferroni over the looks).
    #[serde(skip_serializing_if = "is_first_look")]
    pub looks: u32,
}

fn is_first_look(n: &u32) -> bool {
    *n <= 1
}

/// The options of a case's `looks`-th judgement: interval level
/// `1 - (1 - level) / looks`, `alpha / looks` and `case_alpha / looks`, so
/// that judging a case again after more rounds (`ab`'s extension of
/// undecided cases) keeps its chance of a false verdict, either way, within
/// the first look's. The first look is judged as is.
pub fn at_look(opts: &CompareOptions, looks: u32) -> CompareOptions {
    let k = f64::from(looks.max(1));
    CompareOptions {
        confidence_level: 1.0 - (1.0 - opts.confidence_level) / k,
        alpha: opts.alpha / k,
        case_alpha: opts.case_alpha / k,
        ..opts.clone()
    }
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
    let looked: Vec<CompareOptions> = cases.iter().map(|c| at_look(opts, c.looks)).collect();
    let judged: Vec<LogJudgement> =
        logs.iter().zip(&looked).map(|(d, o)| judge_logs(d, o.confidence_level)).collect();
    let p_values: Vec<f64> = judged.iter().map(|j| j.p).collect();
    let q_values = stats::benjamini_hochberg(&p_values);
    let pooled = judged.iter().zip(&logs).filter(|(j, d)| !j.by_round && !d.is_empty()).count();
    let mut changes: Vec<CaseChange> = cases
        .iter()
        .zip(logs.iter().zip(disturbed).zip(&suspects))
        .zip(judged.iter().zip(q_values).zip(&looked))
        .map(|((c, ((d, disturbed), suspect)), ((j, q_value), opts))| {
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
#[path = "paired_tests.rs"]
mod tests;
