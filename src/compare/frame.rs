//! The second step of a stored comparison ([`super::compare_sets`]): what
//! each case is judged relative to. The machine's drift between the sides
//! ([`drift::measure`]) sets the envelope a change must leave (or, with
//! `--normalize`, the factor every ratio is divided by); the large and the
//! smaller cases each move with the others of their size; and against a
//! peer program's figures none of this applies.

use super::matching::Pending;
use super::{CompareOptions, MachineDrift, drift};
use crate::results::{Estimate, RunReport};
use crate::stats;

/// What the cases are judged relative to.
pub(super) struct Frame {
    /// The machine's drift between the sides, as the comparison records it.
    pub drift: MachineDrift,
    /// The factor every ratio is divided by (`--normalize`, drift measured).
    pub factor: Option<f64>,
    /// The drift envelope a change must leave, `(1, 1)` when normalised.
    pub envelope: (f64, f64),
    /// The large cases' median ratio, when each is judged relative to it.
    pub large_drift: Option<Estimate>,
    /// The smaller cases' median ratio, when they moved together.
    pub small_drift: Option<Estimate>,
}

/// Measures the machine's drift from the canaries and the cases' point
/// ratios and decides what each case is judged relative to; the notes a
/// reader needs for that are pushed to `notes`.
pub(super) fn frame(
    old: &[RunReport],
    new: &[RunReport],
    pending: &[Pending],
    opts: &CompareOptions,
    notes: &mut Vec<String>,
) -> Frame {
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
    let factor = if opts.normalize && peer.is_none() { normalize(&mut drift, notes) } else { None };
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
    let frame = Frame { drift, factor, envelope, large_drift, small_drift };
    drift_notes(&frame, notes);
    frame
}

/// `--normalize`: the factor the ratios are divided by (the machine's drift,
/// recorded in `drift`), or `None` with a note when the drift was not
/// measured.
fn normalize(drift: &mut MachineDrift, notes: &mut Vec<String>) -> Option<f64> {
    let factor = drift.factor();
    match factor {
        Some(f) => {
            drift.normalized_by = Some(f);
            notes.push(format!(
                "ratios normalised by the machine's drift (x{f:.4}, from the {}): they show each case relative to the machine",
                drift.judged_by
            ));
        }
        None => notes
            .push("--normalize asked for, but the machine's drift was not measured: ratios are raw".into()),
    }
    factor
}

/// The notes that say the large cases or the whole machine moved, so the
/// cases that moved with them are not called changed.
fn drift_notes(frame: &Frame, notes: &mut Vec<String>) {
    let drift = &frame.drift;
    if let Some((lo, hi)) = drift.large_envelope.filter(|_| frame.large_drift.is_some()) {
        notes.push(format!(
            "the large cases (32 MiB or more per iteration: data in the last-level cache and memory the host shares) moved together, {:+.1}% at the median [{:+.1}%, {:+.1}%]: each is judged relative to that, since the memory system, not the code, moves them all alike",
            (frame.large_drift.map_or(1.0, |e| e.point) - 1.0) * 100.0,
            (lo - 1.0) * 100.0,
            (hi - 1.0) * 100.0
        ));
    }
    if drift.beyond_band && frame.factor.is_none() {
        notes.push(format!(
            "the machine itself ran {} ({}): cases that moved with it are not called changed; a change that moves every case alike cannot be told apart from the machine (use `tfbench ab`, or --normalize to see ratios relative to the machine)",
            if drift.envelope.1 > 1.0 { "slower" } else { "faster" },
            drift.describe()
        ));
    }
}

/// `ratio` relative to the drift `g` (`ratio / g`), its interval widened by
/// `g`'s own uncertainty: on the log scale the two half-widths add in
/// quadrature on each side (the case's lower with the drift's upper).
pub(super) fn relative_ratio(ratio: &Estimate, g: &Estimate) -> Estimate {
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
