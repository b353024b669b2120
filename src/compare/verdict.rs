//! The third step of a stored comparison ([`super::compare_sets`]): each
//! matched case judged. Its p-value (Mann-Whitney) and q-value (over every
//! case), its noise band, its ratio's interval, and its verdict by the rule
//! in the module docs of [`super`], then set back to inconclusive where it
//! moved with the cases of its size, ran only on disturbed rounds, or was
//! marked as timing something else.

use super::frame::{Frame, relative_ratio};
use super::matching::Pending;
use super::{CaseChange, CompareOptions, Judgement, MemoryChange, Verdict, disturbance, input, smoke};
use crate::history::{Spread, Spreads};
use crate::results::{Estimate, RunReport};
use crate::stats;

/// What judging the cases counted, for the notes ([`super::notes`]).
#[derive(Default)]
pub(super) struct Tally {
    /// Large cases not called changed because they moved with the others.
    pub moved_with_large: usize,
    /// Smaller cases not called changed because they moved with the others.
    pub moved_with_small: usize,
    /// Cases whose interval adds the assumed run-to-run spread.
    pub assumed: usize,
    /// Cases not judged because a run marked their samples, with the reason.
    pub suspects: Vec<String>,
}

/// Judges every pending case; returns the changes, worst regression
/// (largest ratio) first, and what judging them counted.
pub(super) fn judge_all(
    pending: Vec<Pending>,
    spreads: &Spreads,
    frame: &Frame,
    sides: (&[RunReport], &[RunReport]),
    opts: &CompareOptions,
) -> (Vec<CaseChange>, Tally) {
    let p_values = p_values(&pending, frame.factor);
    let q_values = stats::benjamini_hochberg(&p_values);
    let mut tally = Tally::default();
    let mut changes: Vec<CaseChange> = pending
        .into_iter()
        .zip(p_values.into_iter().zip(q_values))
        .map(|(c, (p_value, q_value))| {
            let spread = spreads.get(&c.id);
            judge_case(c, (p_value, q_value), spread, frame, sides, opts, &mut tally)
        })
        .collect();
    changes.sort_by(|a, b| b.ratio.point.total_cmp(&a.ratio.point).then_with(|| a.id.cmp(&b.id)));
    (changes, tally)
}

/// Each case's two-sided Mann-Whitney p-value (exact where the pooled
/// samples allow), the candidate's times divided by the normalising
/// `factor` when there is one.
fn p_values(pending: &[Pending], factor: Option<f64>) -> Vec<f64> {
    pending
        .iter()
        .map(|c| {
            let (o, mut n) = (c.old.pooled(), c.new.pooled());
            if let Some(f) = factor {
                n.iter_mut().for_each(|v| *v /= f);
            }
            stats::mann_whitney_exact_p(&n, &o).unwrap_or_else(|| stats::mann_whitney_u(&n, &o).p_value)
        })
        .collect()
}

/// One case's change: band, interval, verdict (see the module docs), the
/// gate's limit and its memory figures.
fn judge_case(
    c: Pending,
    (p_value, q_value): (f64, f64),
    spread: Option<&Spread>,
    frame: &Frame,
    (old, new): (&[RunReport], &[RunReport]),
    opts: &CompareOptions,
    tally: &mut Tally,
) -> CaseChange {
    let (band, band_source) = band_of(&c, spread, opts);
    let (ratio, assumed) = interval_of(&c, spread, frame.factor, opts);
    if assumed {
        tally.assumed += 1;
    }
    let envelope = frame.envelope;
    let (old_samples, new_samples) = (c.old.len(), c.new.len());
    let mut verdict = if old_samples < opts.min_samples || new_samples < opts.min_samples {
        Verdict::TooFewSamples
    } else {
        Verdict::judge(&Judgement { p: p_value, q: q_value, ratio, band, envelope }, opts)
    };
    // A case is called changed only when it also changed relative
    // to the other cases of its size: otherwise it moved with them.
    let group = if c.large { frame.large_drift } else { frame.small_drift };
    let relative_to_group = group.map(|g| relative_ratio(&ratio, &g));
    if let Some(rel) = relative_to_group
        && matches!(verdict, Verdict::Regressed | Verdict::Improved)
        && Verdict::judge(&Judgement { p: p_value, q: q_value, ratio: rel, band, envelope }, opts) != verdict
    {
        verdict = Verdict::Inconclusive;
        if c.large {
            tally.moved_with_large += 1;
        } else {
            tally.moved_with_small += 1;
        }
    }
    if only_disturbed_explains(&c.aside, &ratio) && matches!(verdict, Verdict::Regressed | Verdict::Improved)
    {
        verdict = Verdict::Inconclusive;
    }
    // A side whose run caught the case's samples timing something
    // else (harness::screen) gives no evidence either way.
    let suspect = [("baseline", old), ("candidate", new)]
        .iter()
        .find_map(|(side, runs)| input::timing_suspect(runs, &c.id).map(|why| format!("{side}: {why}")));
    if let Some(why) = suspect
        && verdict != Verdict::TooFewSamples
    {
        verdict = Verdict::Inconclusive;
        tally.suspects.push(format!("{} ({why})", c.id));
    }
    // Gate on the change relative to the machine when it drifted (and,
    // for a large case, relative to the other large cases).
    let relative =
        relative_to_group.map_or(f64::INFINITY, |r| r.point).min(ratio.point / envelope.1.max(1.0));
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
        disturbed: describe_disturbance(&c.aside),
        measure: crate::inside::Measure::Time,
        id: c.id,
    }
}

/// The case's noise band half-width and where it comes from: the default,
/// `noise_k` x its spread learned from history when wider, and at least the
/// smoke profile's band when a side was measured with one.
fn band_of(c: &Pending, spread: Option<&Spread>, opts: &CompareOptions) -> (f64, String) {
    let (band, band_source) = match spread.map(|s| (s.run, s.runs)) {
        Some((s, runs)) if opts.noise_k * s > opts.noise_threshold => {
            (opts.noise_k * s, format!("history ({runs} runs)"))
        }
        Some((_, runs)) => (opts.noise_threshold, format!("default (history: {runs} runs, steadier)")),
        None => (opts.noise_threshold, "default".to_string()),
    };
    if c.smoke && band < smoke::SMOKE_BAND {
        (smoke::SMOKE_BAND, "smoke profile".to_string())
    } else {
        (band, band_source)
    }
}

/// The case's `new / old` ratio with its hierarchical bootstrap interval,
/// divided by the normalising `factor` when there is one; and whether the
/// interval added the assumed run-to-run spread (a side replicated nothing
/// above its samples and history has no spread for the case).
fn interval_of(
    c: &Pending,
    spread: Option<&Spread>,
    factor: Option<f64>,
    opts: &CompareOptions,
) -> (Estimate, bool) {
    let learned = spread.map(|s| (s.run, s.runs));
    let learned_round = spread.and_then(|s| s.round);
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
    let assumed = unreplicated > 0 && learned.is_none() && opts.assumed_run_spread > 0.0;
    let extra = run_spread * (unreplicated as f64).sqrt();
    let seed = opts.seed ^ super::fnv1a_64(c.id.as_bytes());
    let (mut point, mut lower, mut upper) =
        stats::hierarchical_ratio_ci(&c.new, &c.old, opts.confidence_level, opts.resamples, seed, extra);
    if let Some(f) = factor {
        (point, lower, upper) = (point / f, lower / f, upper / f);
    }
    (Estimate { point, lower, upper, level: opts.confidence_level }, assumed)
}

/// Whether a side ran the case only on disturbed rounds and `ratio`'s whole
/// interval lies within what that disturbance could explain: such a case is
/// unjudgeable.
fn only_disturbed_explains(aside: &[disturbance::SetAside; 2], ratio: &Estimate) -> bool {
    let worst = aside.iter().map(|a| a.worst).fold(0.0, f64::max);
    let explained = disturbance::explainable_factor(worst);
    let beyond = ratio.lower > explained || ratio.upper < 1.0 / explained;
    aside.iter().any(|a| a.all_disturbed) && !beyond
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
