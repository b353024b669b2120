//! A look inside a case, beside its wall time (issue 50):
//!
//! - [`callgrind`] (and `app::count`, which drives it): **instruction counts** as a second
//!   measure (`run --measure instructions`), the method of iai-callgrind
//!   (now gungraun) and CodSpeed: each case's workload runs a fixed number
//!   of iterations under Valgrind's callgrind, which counts only the timed
//!   call (client requests start and stop its instrumentation), with a
//!   fixed cache model; the counts are deterministic, so `compare`, `ab`
//!   and the gate judge them against a small band with no statistics
//!   (`compare::counts`).
//! - [`counters`]: **hardware counters** (cycles, instructions, cache and
//!   branch misses) through `perf_event_open`, counted in an extra untimed
//!   call as allocations are, where the machine has a PMU.
//! - [`profile`]: **profiles** (`run --profile FILE`): the process sampled
//!   while one case runs, written as folded stacks and a flamegraph SVG.
//!
//! What a case gained from them is its [`Inside`] record in the results.

pub mod callgrind;
pub mod counters;
pub mod profile;

use serde::{Deserialize, Serialize};

/// What a case is measured and judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// Wall time per iteration, sampled and judged with statistics.
    #[default]
    Time,
    /// Instructions per iteration under callgrind, judged against a band.
    Instructions,
}

impl Measure {
    /// The name: `time` or `instructions`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Time => "time",
            Self::Instructions => "instructions",
        }
    }

    /// For serde: leave the default out of older-looking files.
    pub fn is_time(&self) -> bool {
        *self == Self::Time
    }
}

/// What a look inside one case found (`CaseResult::inside`); every part is
/// absent unless asked for and available.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Inside {
    /// Instruction counts under callgrind (`--measure instructions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<callgrind::Counts>,
    /// Hardware counters per iteration (where the machine has a PMU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<counters::HwCounters>,
    /// The flamegraph and folded stacks of the case (`--profile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<profile::ProfileFiles>,
}

impl Inside {
    /// True when nothing was recorded (the field is then left out).
    pub fn is_empty(&self) -> bool {
        self.counts.is_none() && self.counters.is_none() && self.profile.is_none()
    }
}

/// Formats a count with a metric suffix: `1.234 M`, `987 k`, `12`.
pub fn si(x: f64) -> String {
    let a = x.abs();
    if a >= 1e9 {
        format!("{:.3} G", x / 1e9)
    } else if a >= 1e6 {
        format!("{:.3} M", x / 1e6)
    } else if a >= 1e4 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn si_suffixes() {
        assert_eq!(super::si(12.0), "12");
        assert_eq!(super::si(98_765.0), "98.8 k");
        assert_eq!(super::si(1_234_000.0), "1.234 M");
        assert_eq!(super::si(2.5e9), "2.500 G");
    }
}
