//! The last step of a stored comparison ([`super::compare_sets`]): the notes
//! a reader must know to trust the verdicts, from what judging the cases
//! counted ([`Tally`]) and from what the sides carry (outlier policies,
//! injected slowdowns, instruction-set caps).

use super::frame::Frame;
use super::verdict::Tally;
use super::{CaseChange, CompareOptions, disturbance, smoke};
use crate::results::RunReport;

/// The notes on the judged cases: smoke-profile bands, disturbed rounds,
/// cases not judged, cases that moved with the others of their size, and
/// assumed spreads.
pub(super) fn judging_notes(
    changes: &[CaseChange],
    tally: &Tally,
    frame: &Frame,
    opts: &CompareOptions,
    notes: &mut Vec<String>,
) {
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
    if !tally.suspects.is_empty() {
        notes.push(format!(
            "{} case(s) not judged: a run marked their samples as timing something other than the work (the harness's screening; reasons in brackets): {}",
            tally.suspects.len(),
            tally.suspects.join("; ")
        ));
    }
    if tally.moved_with_large > 0 {
        let g = frame.large_drift.map_or(1.0, |g| g.point);
        notes.push(format!(
            "{} large case(s) moved with the large cases (32 MiB or more per iteration; their median moved {:+.1}%): not called changed, since the memory system the host shares moves them together",
            tally.moved_with_large,
            (g - 1.0) * 100.0
        ));
    }
    if tally.moved_with_small > 0 {
        let g = frame.small_drift.map_or(1.0, |g| g.point);
        notes.push(format!(
            "{} smaller case(s) moved with the other smaller cases (their median moved {:+.1}%): not called changed, since the host moved them together; a change that moves most cases alike cannot be told apart from the host (use `tfbench ab`)",
            tally.moved_with_small,
            (g - 1.0) * 100.0
        ));
    }
    if tally.assumed > 0 {
        notes.push(format!(
            "{} case(s) had one run of one round on a side: nothing above the samples was replicated, so their intervals add an assumed run-to-run spread of {:.1}% per such side (record history, use --rounds, or save several runs with --append to measure it)",
            tally.assumed,
            opts.assumed_run_spread * 100.0
        ));
    }
}

/// The notes on the sides themselves: outliers removed (`removed`, baseline
/// and candidate), an injected slowdown, different instruction-set caps.
pub(super) fn side_notes(old: &[RunReport], new: &[RunReport], removed: [bool; 2], notes: &mut Vec<String>) {
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
}
