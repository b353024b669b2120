//! Statistical comparison of a candidate with a baseline: stored result
//! sets (each side one or several runs of the same build), or a paired A/B
//! run of two builds ([`paired`]).
//!
//! Cases are matched by id. A case measured on both sides is compared on the
//! per-iteration times of its raw samples (`nanos / iterations`), after the
//! outlier policy each run itself applied (`--outliers remove` removes the
//! same samples here as in the run's own estimates):
//!
//! - **ratio**: `median(new) / median(old)` with a seeded *hierarchical*
//!   bootstrap interval ([`crate::stats::hierarchical_ratio_ci`]): runs,
//!   then rounds within a run, then samples within a round are resampled,
//!   so the interval covers run-to-run and round-to-round variation, not only
//!   the noise inside one round. A side with a single run of a single round
//!   replicates nothing above the samples; its interval then adds an assumed
//!   run-to-run spread ([`CompareOptions::assumed_run_spread`], or the case's
//!   spread learned from history) and the comparison says so.
//! - **p**: two-sided Mann-Whitney U test, exact (permutation) up to
//!   [`crate::stats::EXACT_MAX_N`] pooled samples, normal beyond.
//! - **q**: Benjamini-Hochberg adjustment over every compared case.
//! - **band**: the case's noise band, `max(noise_threshold, noise_k x the
//!   case's run-to-run spread learned from history)`.
//! - **machine drift** ([`drift`]): canaries and the cross-case median.
//! - **disturbed rounds** ([`disturbance`]): a case's round during which
//!   other work took a core from the run (the kernel's counters, recorded
//!   by `run`) is set aside when the side has a clean round of the case;
//!   with none, the case cannot be called changed.
//!
//! # Verdict rule
//!
//! A case is *significant* when `q < alpha` (false-discovery control over
//! the plan) **or** `p < case_alpha` (a per-case bar, as asv's `p < 0.002`,
//! so that a lone large change is never hidden by the size of the plan: a
//! 2x slowdown among 500 cases at 10 samples has exact `p = 1.1e-5` but
//! `q ~ 0.005`). With the case's band `b` and the machine's drift envelope
//! `[d_lo, d_hi]` (`[1, 1]` unless the drift is beyond the band):
//!
//! 1. **too few samples** when either side has fewer than
//!    [`CompareOptions::min_samples`];
//! 2. **regressed** when significant and the whole interval lies above
//!    `d_hi (1 + b)`; **improved** when significant and it lies below
//!    `d_lo (1 - b)`;
//! 3. **unchanged** only when the whole interval lies inside `[1 - b, 1 + b]`:
//!    evidence of no change, not absence of evidence;
//! 4. **inconclusive** otherwise (the interval is wider than the band, or
//!    the case moved with the machine): no evidence either way.
//!
//! Every case is also judged relative to the median ratio of the cases of
//! its size, the intervals combined on the log scale (`relative_ratio`):
//! regressed or improved only when it is so both ways, else inconclusive.
//! A *large* case (at least [`drift::LARGE_BYTES`] per iteration) moves
//! with the memory system the host shares, which the canaries cannot see;
//! the smaller ones move together over a few minutes of the host by less
//! than the canaries resolve.
//!
//! # Gating
//!
//! A regressed case is **beyond the limit** when its point change (relative
//! to the machine's drift, when that is beyond the band) exceeds
//! [`CompareOptions::max_regression`]. Memory (peak live bytes, allocations
//! per iteration) regresses when either grows by more than
//! [`CompareOptions::max_memory_regression`] and the new value is at least
//! [`PEAK_FLOOR_BYTES`] / [`ALLOCS_FLOOR`]. A comparison with nothing to
//! judge (no case in common, every case failed, a run compared with itself)
//! is [`Comparison::vacuous`]: the app fails the gate on it unless allowed.

#[cfg(test)]
mod calibration;
pub mod disturbance;
pub mod drift;
pub mod gate;
pub mod input;
mod memory;
mod options;
mod render;
mod smoke;
#[cfg(test)]
mod tests;

pub use memory::{ALLOCS_FLOOR, MemoryChange, PEAK_FLOOR_BYTES};
pub use render::{COMPARISON_SCHEMA_VERSION, render_json, render_markdown, render_table};

pub mod paired;

use crate::results::{Estimate, RunReport};
use crate::stats::{self, Levels};
pub use drift::MachineDrift;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

pub use options::{CompareOptions, Judgement, Method, Verdict};

/// The comparison of one case present and measured in both runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseChange {
    /// Case id.
    pub id: String,
    /// Median per-iteration time of the baseline's samples, ns.
    pub old_median_ns: f64,
    /// Median per-iteration time of the candidate's samples, ns.
    pub new_median_ns: f64,
    /// Samples on the baseline's side.
    #[serde(default)]
    pub old_samples: usize,
    /// Samples on the candidate's side.
    #[serde(default)]
    pub new_samples: usize,
    /// `new / old` time with its interval; above 1 is slower (normalised by
    /// the machine's drift with `--normalize`).
    pub ratio: Estimate,
    /// Two-sided p-value (Mann-Whitney; Wilcoxon signed-rank when paired).
    pub p_value: f64,
    /// Benjamini-Hochberg q-value over all compared cases.
    pub q_value: f64,
    /// The case's noise band half-width used (fraction).
    #[serde(default)]
    pub band: f64,
    /// Where the band comes from: `default` or `history (N runs)`.
    #[serde(default)]
    pub band_source: String,
    /// The verdict (see the module docs).
    pub verdict: Verdict,
    /// Regressed, and the point change exceeds the regression limit.
    pub beyond_limit: bool,
    /// Memory figures, when both runs counted allocations.
    pub memory: Option<MemoryChange>,
    /// Set when rounds of this case ran while the machine was disturbed:
    /// how many were set aside, or why the case could not be judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disturbed: Option<String>,
}

/// A candidate compared with a baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Name of the baseline (a baseline name or a file).
    pub baseline: String,
    /// Name of the candidate.
    pub candidate: String,
    /// How the sides were measured.
    #[serde(default)]
    pub method: Method,
    /// Runs on each side (baseline, candidate).
    #[serde(default)]
    pub runs: (usize, usize),
    /// Set when the runs come from different machines: describes both
    /// fingerprints and CPU models.
    pub machine_mismatch: Option<String>,
    /// The machine's drift between the sides (stored comparisons).
    #[serde(default)]
    pub drift: Option<MachineDrift>,
    /// Compared cases, worst regression (largest ratio) first.
    pub changes: Vec<CaseChange>,
    /// Cases only the baseline has.
    pub only_in_baseline: Vec<String>,
    /// Cases only the candidate has.
    pub only_in_candidate: Vec<String>,
    /// Cases in both runs that failed (or have no usable samples) on either
    /// side, hence not compared.
    pub failed: Vec<String>,
    /// Every case that failed on a side (also those only one side has), with
    /// the side and the reason: a failure on the candidate's side fails the
    /// gate ([`gate`]). Absent in comparisons written before it existed.
    #[serde(default)]
    pub failures: Vec<gate::FailedCase>,
    /// Cases skipped on either side (not run on that machine).
    #[serde(default)]
    pub skipped: Vec<String>,
    /// Why the comparison has nothing to judge, when it has not.
    #[serde(default)]
    pub vacuous: Option<String>,
    /// Things a reader must know to trust the verdicts (drift, assumed
    /// spreads, outlier policies, injected slowdowns), one line each.
    #[serde(default)]
    pub notes: Vec<String>,
    /// The options used.
    pub options: CompareOptions,
}

impl Comparison {
    /// Time regressions beyond [`CompareOptions::max_regression`].
    pub fn regressions(&self) -> Vec<&CaseChange> {
        self.changes.iter().filter(|c| c.beyond_limit).collect()
    }

    /// Cases whose memory regressed.
    pub fn memory_regressions(&self) -> Vec<&CaseChange> {
        self.changes.iter().filter(|c| c.memory.as_ref().is_some_and(|m| m.regressed)).collect()
    }

    /// True when a time regression beyond the limit, a memory regression or
    /// a case that failed on the candidate's side is present (the gate's
    /// first two reasons; [`gate::judge`] has them all).
    pub fn has_gating_failure(&self) -> bool {
        self.changes.iter().any(|c| c.beyond_limit || c.memory.as_ref().is_some_and(|m| m.regressed))
            || self.failures.iter().any(gate::FailedCase::gates)
    }

    /// Number of compared cases with verdict `v`.
    pub fn count(&self, v: Verdict) -> usize {
        self.changes.iter().filter(|c| c.verdict == v).count()
    }
}

/// Run-to-run spreads learned from history ([`crate::history::learned_spreads`]).
pub use crate::history::Spreads;

/// Compares one candidate run with one baseline run (see
/// [`compare_sets`]), without history.
pub fn compare(
    baseline_name: &str,
    old: &RunReport,
    candidate_name: &str,
    new: &RunReport,
    opts: &CompareOptions,
) -> Comparison {
    compare_sets(
        baseline_name,
        std::slice::from_ref(old),
        candidate_name,
        std::slice::from_ref(new),
        &Spreads::new(),
        opts,
    )
}

/// One case ready for judging.
struct Pending {
    id: String,
    old: Levels,
    new: Levels,
    old_alloc: Option<crate::results::AllocStats>,
    new_alloc: Option<crate::results::AllocStats>,
    /// What disturbance took from each side (baseline, candidate).
    aside: [disturbance::SetAside; 2],
    /// Moves at least [`drift::LARGE_BYTES`] per iteration on either side.
    large: bool,
    /// Measured with a smoke profile on either side ([`smoke`]).
    smoke: bool,
    /// The most threads it ran on, on either side ([`threads_of`]).
    threads: usize,
}

/// Compares the candidate's runs `new` with the baseline's runs `old`
/// (each side one or several runs of one build); `spreads` are the cases'
/// learned run-to-run spreads (empty without history). See the module docs.
pub fn compare_sets(
    baseline_name: &str,
    old: &[RunReport],
    candidate_name: &str,
    new: &[RunReport],
    spreads: &Spreads,
    opts: &CompareOptions,
) -> Comparison {
    let ids = |runs: &[RunReport]| -> Vec<String> {
        let mut seen = HashSet::new();
        runs.iter()
            .flat_map(|r| r.cases.iter())
            .map(|c| c.id.clone())
            .filter(|id| seen.insert(id.clone()))
            .collect()
    };
    let (old_ids, new_ids) = (ids(old), ids(new));
    let old_set: HashSet<&str> = old_ids.iter().map(String::as_str).collect();
    let new_set: HashSet<&str> = new_ids.iter().map(String::as_str).collect();
    let only_in_baseline: Vec<String> =
        old_ids.iter().filter(|id| !new_set.contains(id.as_str())).cloned().collect();
    let only_in_candidate: Vec<String> =
        new_ids.iter().filter(|id| !old_set.contains(id.as_str())).cloned().collect();
    let skipped_in = |runs: &[RunReport], id: &str| {
        runs.iter().flat_map(|r| r.cases.iter()).any(|c| c.id == id && c.status.is_skipped())
    };
    let alloc_of = |runs: &[RunReport], id: &str| {
        runs.iter().rev().flat_map(|r| r.cases.iter()).find(|c| c.id == id).and_then(|c| c.alloc.clone())
    };

    let (mut failed, mut skipped, mut pending) = (Vec::new(), Vec::new(), Vec::new());
    let (old_dist, new_dist): (Vec<_>, Vec<_>) =
        (old.iter().map(disturbance::disturbed).collect(), new.iter().map(disturbance::disturbed).collect());
    // Whether some run on each side removed outliers (baseline, candidate).
    let mut removed = [false, false];
    for id in new_ids.iter().filter(|id| old_set.contains(id.as_str())) {
        if skipped_in(old, id) || skipped_in(new, id) {
            skipped.push(id.clone());
            continue;
        }
        match (input::levels_of(old, &old_dist, id), input::levels_of(new, &new_dist, id)) {
            (Some((o, po, ao)), Some((n, pn, an))) => {
                let remove = crate::config::OutlierPolicy::Remove;
                removed[0] |= po.contains(&remove);
                removed[1] |= pn.contains(&remove);
                pending.push(Pending {
                    id: id.clone(),
                    old: o,
                    new: n,
                    old_alloc: alloc_of(old, id),
                    new_alloc: alloc_of(new, id),
                    aside: [ao, an],
                    large: is_large(old, id) || is_large(new, id),
                    smoke: smoke::is_smoke(old, id) || smoke::is_smoke(new, id),
                    threads: threads_of(old, id).max(threads_of(new, id)),
                })
            }
            _ => failed.push(id.clone()),
        }
    }

    let mut notes = Vec::new();
    // Points first: the cross-case drift estimate needs every case's ratio.
    let points: Vec<(f64, bool)> = pending
        .iter()
        .map(|c| (stats::median(&c.new.pooled()) / stats::median(&c.old.pooled()), c.large))
        .collect();
    let mut drift = drift::measure(old, new, &points, opts.noise_threshold, opts.confidence_level, opts.seed);
    // Between tfbench and a peer program every case may move alike for the
    // programs' sake: that shift is the comparison's point, not drift.
    let peer = old.iter().chain(new).find_map(|r| r.environment.peer.as_deref());
    if let Some(peer) = peer {
        drift.beyond_band = false;
        drift.envelope = (1.0, 1.0);
        drift.large_envelope = None;
        notes.push(format!(
            "one side holds another program's figures ({peer}): cases that move alike are the programs' difference, so none is judged relative to the machine's drift{}",
            if opts.normalize { " (--normalize does not apply)" } else { "" }
        ));
    }
    let factor = if opts.normalize && peer.is_none() { drift.factor() } else { None };
    if opts.normalize && peer.is_none() {
        match factor {
            Some(f) => {
                drift.normalized_by = Some(f);
                notes.push(format!(
                    "ratios normalised by the machine's drift (x{f:.4}, from the {}): they show each case relative to the machine",
                    drift.judged_by
                ));
            }
            None => notes.push(
                "--normalize asked for, but the machine's drift was not measured: ratios are raw".into(),
            ),
        }
    }
    let envelope = if factor.is_some() { (1.0, 1.0) } else { drift.envelope };
    // The large cases share the memory system's state between runs: each is
    // also judged relative to their median (not with --normalize, which has
    // already divided by the machine's drift, nor against a peer program).
    let large_drift = drift.large().copied().filter(|_| factor.is_none() && peer.is_none());
    // So are the smaller ones, relative to theirs, when they moved together
    // (their median's interval leaves 1): a few minutes of the host move
    // them alike, by less than the canaries can resolve. When it holds 1,
    // nothing says the host moved them, and a change in a few of them (whose
    // ratios widen that interval) is judged on its own.
    let small_drift = drift
        .small()
        .copied()
        .filter(|g| g.lower > 1.0 || g.upper < 1.0)
        .filter(|_| factor.is_none() && peer.is_none());
    let mut moved_with_large = 0usize;
    let mut moved_with_small = 0usize;
    let mut suspects: Vec<String> = Vec::new();
    if let Some((lo, hi)) = drift.large_envelope.filter(|_| large_drift.is_some()) {
        notes.push(format!(
            "the large cases (32 MiB or more per iteration: data in the last-level cache and memory the host shares) moved together, {:+.1}% at the median [{:+.1}%, {:+.1}%]: each is judged relative to that, since the memory system, not the code, moves them all alike",
            (large_drift.map_or(1.0, |e| e.point) - 1.0) * 100.0,
            (lo - 1.0) * 100.0,
            (hi - 1.0) * 100.0
        ));
    }
    if drift.beyond_band && factor.is_none() {
        notes.push(format!(
            "the machine itself ran {} ({}): cases that moved with it are not called changed; a change that moves every case alike cannot be told apart from the machine (use `tfbench ab`, or --normalize to see ratios relative to the machine)",
            if drift.envelope.1 > 1.0 { "slower" } else { "faster" },
            drift.describe()
        ));
    }

    let n_old_runs = old.len();
    let n_new_runs = new.len();
    let mut assumed = 0usize;
    let p_values: Vec<f64> = pending
        .iter()
        .map(|c| {
            let (o, mut n) = (c.old.pooled(), c.new.pooled());
            if let Some(f) = factor {
                n.iter_mut().for_each(|v| *v /= f);
            }
            stats::mann_whitney_exact_p(&n, &o).unwrap_or_else(|| stats::mann_whitney_u(&n, &o).p_value)
        })
        .collect();
    let q_values = stats::benjamini_hochberg(&p_values);
    let mut changes: Vec<CaseChange> = pending
        .into_iter()
        .zip(p_values.into_iter().zip(q_values))
        .map(|(c, (p_value, q_value))| {
            let learned = spreads.get(&c.id).map(|s| (s.run, s.runs));
            let learned_round = spreads.get(&c.id).and_then(|s| s.round);
            let (band, band_source) = match learned {
                Some((s, runs)) if opts.noise_k * s > opts.noise_threshold => {
                    (opts.noise_k * s, format!("history ({runs} runs)"))
                }
                Some((_, runs)) => {
                    (opts.noise_threshold, format!("default (history: {runs} runs, steadier)"))
                }
                None => (opts.noise_threshold, "default".to_string()),
            };
            let (band, band_source) = if c.smoke && band < smoke::SMOKE_BAND {
                (smoke::SMOKE_BAND, "smoke profile".to_string())
            } else {
                (band, band_source)
            };
            // A side replicated nothing above its samples: add its run-to-run
            // spread, measured in history or else assumed.
            let unreplicated = [&c.old, &c.new].iter().filter(|l| l.groups() == 1).count();
            let run_spread = learned.map_or(opts.assumed_run_spread, |(s, _)| s);
            // A side left with one round (its others set aside, or run with
            // --rounds 1) carries one round's luck, which the spread of run
            // medians understates when rounds of this case disagree: use the
            // spread between rounds of a run, as these sides or the history
            // measured it, when larger.
            let (ss_old, df_old) = c.old.round_log_spread_parts();
            let (ss_new, df_new) = c.new.round_log_spread_parts();
            let observed =
                if df_old + df_new > 0 { ((ss_old + ss_new) / (df_old + df_new) as f64).sqrt() } else { 0.0 };
            let round_spread = observed.max(learned_round.unwrap_or(0.0));
            let run_spread = run_spread.max(round_spread);
            if unreplicated > 0 && learned.is_none() && opts.assumed_run_spread > 0.0 {
                assumed += 1;
            }
            let extra = run_spread * (unreplicated as f64).sqrt();
            let seed = opts.seed ^ fnv1a_64(c.id.as_bytes());
            let (mut point, mut lower, mut upper) = stats::hierarchical_ratio_ci(
                &c.new,
                &c.old,
                opts.confidence_level,
                opts.resamples,
                seed,
                extra,
            );
            if let Some(f) = factor {
                (point, lower, upper) = (point / f, lower / f, upper / f);
            }
            let ratio = Estimate { point, lower, upper, level: opts.confidence_level };
            let (old_samples, new_samples) = (c.old.len(), c.new.len());
            let mut verdict = if old_samples < opts.min_samples || new_samples < opts.min_samples {
                Verdict::TooFewSamples
            } else {
                Verdict::judge(&Judgement { p: p_value, q: q_value, ratio, band, envelope }, opts)
            };
            // A case is called changed only when it also changed relative
            // to the other cases of its size: otherwise it moved with them.
            let group = if c.large { large_drift } else { small_drift };
            let relative_to_group = group.map(|g| relative_ratio(&ratio, &g));
            if let Some(rel) = relative_to_group
                && matches!(verdict, Verdict::Regressed | Verdict::Improved)
                && Verdict::judge(&Judgement { p: p_value, q: q_value, ratio: rel, band, envelope }, opts)
                    != verdict
            {
                verdict = Verdict::Inconclusive;
                if c.large {
                    moved_with_large += 1;
                } else {
                    moved_with_small += 1;
                }
            }
            let disturbed = describe_disturbance(&c.aside);
            // Unjudgeable on disturbed rounds alone, unless the whole
            // interval lies beyond what the disturbance could explain.
            let worst = c.aside.iter().map(|a| a.worst).fold(0.0, f64::max);
            let explained = disturbance::explainable_factor(worst);
            let beyond = ratio.lower > explained || ratio.upper < 1.0 / explained;
            if c.aside.iter().any(|a| a.all_disturbed)
                && matches!(verdict, Verdict::Regressed | Verdict::Improved)
                && !beyond
            {
                verdict = Verdict::Inconclusive;
            }
            // A side whose run caught the case's samples timing something
            // else (harness::screen) gives no evidence either way.
            let suspect = [("baseline", old), ("candidate", new)].iter().find_map(|(side, runs)| {
                input::timing_suspect(runs, &c.id).map(|why| format!("{side}: {why}"))
            });
            if let Some(why) = suspect
                && verdict != Verdict::TooFewSamples
            {
                verdict = Verdict::Inconclusive;
                suspects.push(format!("{} ({why})", c.id));
            }
            // Gate on the change relative to the machine when it drifted (and,
            // for a large case, relative to the other large cases).
            let relative =
                relative_to_group.map_or(f64::INFINITY, |r| r.point).min(point / envelope.1.max(1.0));
            CaseChange {
                old_median_ns: stats::median(&c.old.pooled()),
                new_median_ns: stats::median(&c.new.pooled()),
                old_samples,
                new_samples,
                ratio,
                p_value,
                q_value,
                band,
                band_source,
                verdict,
                beyond_limit: verdict == Verdict::Regressed && relative - 1.0 > opts.max_regression,
                memory: match (c.old_alloc, c.new_alloc) {
                    (Some(o), Some(n)) => {
                        Some(MemoryChange::with_threads(&o, &n, opts.max_memory_regression, c.threads))
                    }
                    _ => None,
                },
                disturbed,
                id: c.id,
            }
        })
        .collect();
    changes.sort_by(|a, b| b.ratio.point.total_cmp(&a.ratio.point).then_with(|| a.id.cmp(&b.id)));
    let smoked = changes.iter().filter(|c| c.band_source == "smoke profile").count();
    if smoked > 0 {
        notes.push(smoke::note(smoked));
    }
    let set_aside: usize = changes.iter().filter(|c| c.disturbed.is_some()).count();
    if set_aside > 0 {
        let unjudged =
            changes.iter().filter(|c| c.disturbed.as_deref().is_some_and(|d| d.contains("every"))).count();
        notes.push(format!(
            "{set_aside} case(s) had rounds measured while the machine was disturbed (other work took more than {:.0}% of a core from the run meanwhile): those rounds were set aside where a clean round remained; {unjudged} case(s) had no clean round on a side and are not called changed unless the change is beyond what the disturbance could explain (1 + 3 x the share of a core taken)",
            disturbance::DISTURBED_SHARE * 100.0
        ));
    }
    if !suspects.is_empty() {
        notes.push(format!(
            "{} case(s) not judged: a run marked their samples as timing something other than the work (the harness's screening; reasons in brackets): {}",
            suspects.len(),
            suspects.join("; ")
        ));
    }
    if moved_with_large > 0 {
        let g = large_drift.map_or(1.0, |g| g.point);
        notes.push(format!(
            "{moved_with_large} large case(s) moved with the large cases (32 MiB or more per iteration; their median moved {:+.1}%): not called changed, since the memory system the host shares moves them together",
            (g - 1.0) * 100.0
        ));
    }
    if moved_with_small > 0 {
        let g = small_drift.map_or(1.0, |g| g.point);
        notes.push(format!(
            "{moved_with_small} smaller case(s) moved with the other smaller cases (their median moved {:+.1}%): not called changed, since the host moved them together; a change that moves most cases alike cannot be told apart from the host (use `tfbench ab`)",
            (g - 1.0) * 100.0
        ));
    }
    if assumed > 0 {
        notes.push(format!(
            "{assumed} case(s) had one run of one round on a side: nothing above the samples was replicated, so their intervals add an assumed run-to-run spread of {:.1}% per such side (record history, use --rounds, or save several runs with --append to measure it)",
            opts.assumed_run_spread * 100.0
        ));
    }
    for (side, r) in ["baseline", "candidate"].iter().zip(removed) {
        if r {
            notes.push(format!("outliers removed on the {side} side, as its run did (--outliers remove)"));
        }
    }
    for (side, runs) in [("baseline", old), ("candidate", new)] {
        if let Some(inj) = runs.iter().find_map(|r| r.environment.injected_slowdown.clone()) {
            notes.push(format!(
                "WARNING: the {side} carries an injected slowdown ({inj}, the TFBENCH_INJECT_SLOWDOWN test hook): its timings are not real measurements"
            ));
        }
    }
    let caps = |runs: &[RunReport]| runs.last().map(|r| r.environment.max_isa.clone()).unwrap_or_default();
    if caps(old) != caps(new) {
        notes.push(format!(
            "WARNING: the sides ran under different instruction-set caps (TFBENCH_MAX_ISA {} against {}): kernel speeds differ by design",
            caps(old),
            caps(new)
        ));
    }
    let vacuous = vacuous_reason(old, new, &changes, &failed, &skipped);
    let failures = failures_of(old, new);
    Comparison {
        baseline: baseline_name.to_string(),
        candidate: candidate_name.to_string(),
        method: Method::Stored,
        runs: (n_old_runs, n_new_runs),
        machine_mismatch: machine_mismatch(old, new),
        drift: Some(drift),
        changes,
        only_in_baseline,
        only_in_candidate,
        failed,
        failures,
        skipped,
        vacuous,
        notes,
        options: opts.clone(),
    }
}

/// Every case that failed in some run of a side, with the side and the
/// candidate's reason (the baseline's when only it failed), in the order the
/// cases first appear.
fn failures_of(old: &[RunReport], new: &[RunReport]) -> Vec<gate::FailedCase> {
    let reason_in = |runs: &[RunReport], id: &str| {
        runs.iter().rev().flat_map(|r| r.cases.iter()).find_map(|c| match &c.status {
            crate::results::CaseStatus::Failed { phase, reason } if c.id == id => {
                Some(format!("{phase}: {reason}"))
            }
            _ => None,
        })
    };
    let mut seen = HashSet::new();
    old.iter()
        .chain(new)
        .flat_map(|r| r.cases.iter())
        .filter(|c| c.status.is_failed() && seen.insert(c.id.clone()))
        .filter_map(|c| {
            let (o, n) = (reason_in(old, &c.id), reason_in(new, &c.id));
            let side = gate::FailedSide::from_flags(o.is_some(), n.is_some())?;
            Some(gate::FailedCase { id: c.id.clone(), side, reason: n.or(o).unwrap_or_default() })
        })
        .collect()
}

/// `ratio` relative to the drift `g` (`ratio / g`), its interval widened by
/// `g`'s own uncertainty: on the log scale the two half-widths add in
/// quadrature on each side (the case's lower with the drift's upper).
fn relative_ratio(ratio: &Estimate, g: &Estimate) -> Estimate {
    let (p, gp) = (ratio.point.ln(), g.point.ln());
    let below = (p - ratio.lower.ln()).hypot(g.upper.ln() - gp);
    let above = (ratio.upper.ln() - p).hypot(gp - g.lower.ln());
    let centre = p - gp;
    Estimate {
        point: centre.exp(),
        lower: (centre - below).exp(),
        upper: (centre + above).exp(),
        level: ratio.level,
    }
}

/// Whether case `id` moves at least [`drift::LARGE_BYTES`] per iteration
/// in any run of `runs` (its declared bytes throughput).
/// The most threads case `id` ran on in `runs`: its `threads` parameter,
/// or the run's pool (`threads = "all"`, or none given).
fn threads_of(runs: &[RunReport], id: &str) -> usize {
    use crate::plan::ParamValue;
    runs.iter()
        .flat_map(|r| r.cases.iter().filter(|c| c.id == id).map(move |c| (r, c)))
        .map(|(r, c)| match c.params.get("threads") {
            Some(ParamValue::Int(n)) => usize::try_from(*n).unwrap_or(1),
            _ => r.harness.threads,
        })
        .max()
        .unwrap_or(1)
        .max(1)
}

fn is_large(runs: &[RunReport], id: &str) -> bool {
    runs.iter().flat_map(|r| r.cases.iter()).filter(|c| c.id == id).any(|c| {
        c.throughput.iter().any(|t| {
            t.kind == crate::workload::ThroughputKind::Bytes && t.per_iteration >= drift::LARGE_BYTES
        })
    })
}

/// The `disturbed` line of a case: rounds set aside per side, or that a
/// side had no clean round.
fn describe_disturbance(aside: &[disturbance::SetAside; 2]) -> Option<String> {
    let parts: Vec<String> = ["baseline", "candidate"]
        .iter()
        .zip(aside)
        .filter(|(_, a)| a.rounds > 0 || a.all_disturbed)
        .map(|(side, a)| {
            if a.all_disturbed {
                format!("every {side} round ran disturbed (up to {:.2} of a core taken)", a.worst)
            } else {
                format!("{} {side} round(s) set aside (up to {:.2} of a core taken)", a.rounds, a.worst)
            }
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Why a comparison has nothing to judge, or `None`.
fn vacuous_reason(
    old: &[RunReport],
    new: &[RunReport],
    changes: &[CaseChange],
    failed: &[String],
    skipped: &[String],
) -> Option<String> {
    if changes.is_empty() {
        return Some(if failed.is_empty() && skipped.is_empty() {
            "no case was measured in both result sets".into()
        } else {
            format!(
                "no case could be compared: {} failed and {} skipped on a side",
                failed.len(),
                skipped.len()
            )
        });
    }
    let ids = |runs: &[RunReport]| -> HashSet<String> {
        runs.iter().map(|r| r.run_id.clone()).filter(|id| !id.is_empty()).collect()
    };
    if let Some(shared) = ids(old).intersection(&ids(new)).next() {
        return Some(format!("the same run ({shared}) is on both sides: a run compared with itself"));
    }
    let same_samples = old.len() == new.len()
        && old.iter().zip(new).all(|(a, b)| {
            a.cases.len() == b.cases.len()
                && a.cases.iter().zip(&b.cases).all(|(x, y)| x.id == y.id && x.samples == y.samples)
        });
    same_samples.then(|| "both sides hold identical samples: a run compared with itself".into())
}

/// Describes the two machines when their fingerprints differ, or when
/// their GPU cases ran on different kinds of GPU (where both sides record
/// their GPUs: results from before that was recorded are not judged).
fn machine_mismatch(old: &[RunReport], new: &[RunReport]) -> Option<String> {
    let (o, n) = (old.first()?, new.first()?);
    let mut why = Vec::new();
    let (a, b) = (o.environment.fingerprint(), n.environment.fingerprint());
    if a != b {
        why.push(format!(
            "baseline ran on `{}` (fingerprint {a}), candidate on `{}` (fingerprint {b})",
            o.environment.cpu_model, n.environment.cpu_model
        ));
    }
    let (ga, gb) = (o.environment.gpu_kinds(), n.environment.gpu_kinds());
    if !ga.is_empty() && !gb.is_empty() && ga != gb {
        why.push(format!(
            "GPU cases ran on {} in the baseline, on {} in the candidate",
            ga.join(", "),
            gb.join(", ")
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// FNV-1a, 64-bit: a stable hash of case ids for per-case seeds (std's
/// hasher is randomly keyed per process, which would break reproducibility).
pub(crate) fn fnv1a_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}
