//! Comparisons of smoke-profile runs (`--quick`): a tenth of a second of
//! samples in one round per case cannot resolve a change of a few per cent,
//! and two such runs of one build on a quiet 2-core host differ by tens of
//! per cent on some cases (which placement a buffer drew, which core, the
//! clock's frequency at that moment). Judged with the default 2% band, an
//! A/A pair of quick runs called seven cases regressed (issue 45). Such a
//! case is judged with a band of [`SMOKE_BAND`] instead, and the comparison
//! says so: a quick gate catches gross breakage (a case at 200x its time, a
//! kernel falling off its fast path), not a 10% slowdown, which is what
//! `configs/ci.toml` and `tfbench ab` are for.

use crate::results::RunReport;

/// A side whose measurement budget per case is under this many seconds is
/// a smoke profile (`configs/quick.toml` has 0.08 s; the defaults 3 s).
pub const SMOKE_BUDGET_SECS: f64 = 0.5;

/// The band (fraction) a case measured with a smoke profile on either side
/// is judged with: unchanged within [0.4x, 1.6x].
pub const SMOKE_BAND: f64 = 0.6;

/// Whether case `id` was measured with a smoke profile in any of `runs`.
pub fn is_smoke(runs: &[RunReport], id: &str) -> bool {
    runs.iter().any(|r| {
        r.cases
            .iter()
            .filter(|c| c.id == id)
            .any(|c| r.harness.settings.get(&c.suite).is_some_and(|s| s.measurement_time < SMOKE_BUDGET_SECS))
    })
}

/// The comparison's note when `n` cases were judged as smoke runs.
pub fn note(n: usize) -> String {
    format!(
        "{n} case(s) were measured with a smoke profile (under {SMOKE_BUDGET_SECS} s of samples per case on a side, as --quick): they are judged with a ±{:.0}% band, so only gross changes show; use configs/ci.toml or `tfbench ab` to resolve small ones",
        SMOKE_BAND * 100.0
    )
}
