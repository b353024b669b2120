//! Memory figures of a case in both runs, and when their growth counts as
//! a regression.

use crate::results::AllocStats;
use serde::{Deserialize, Deserializer, Serialize};

/// Peak-memory growth below this new value (bytes) is never a regression.
pub const PEAK_FLOOR_BYTES: u64 = 4096;
/// Allocation growth below this new value (per iteration) is never a regression.
pub const ALLOCS_FLOOR: f64 = 1.0;

/// Memory figures of one case in both runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryChange {
    /// Peak live bytes in the baseline.
    pub old_peak_bytes: u64,
    /// Peak live bytes in the candidate.
    pub new_peak_bytes: u64,
    /// Allocations per iteration in the baseline.
    pub old_allocs_per_iter: f64,
    /// Allocations per iteration in the candidate.
    pub new_allocs_per_iter: f64,
    /// `new / old` peak; 1 when both are 0, infinite (`null` in JSON) when
    /// only the old one is.
    #[serde(deserialize_with = "null_as_infinity")]
    pub peak_ratio: f64,
    /// `new / old` allocations, with the same conventions.
    #[serde(deserialize_with = "null_as_infinity")]
    pub allocs_ratio: f64,
    /// Either figure grew beyond the limit and above its floor.
    pub regressed: bool,
}

impl MemoryChange {
    /// Compares the allocation figures of one case; `max_growth` is
    /// [`super::CompareOptions::max_memory_regression`].
    pub fn new(old: &AllocStats, new: &AllocStats, max_growth: f64) -> Self {
        Self::with_threads(old, new, max_growth, 1)
    }

    /// As [`MemoryChange::new`] for a case that ran on up to `threads`
    /// threads: the same allocations per iteration may then be live at once
    /// on each thread or one after another, as the scheduler had it (an A/A
    /// pair of a 2-thread matrixmultiply case beside busy loops read peak
    /// 1.04 MiB and 2.08 MiB, allocations unchanged). While the allocations
    /// per iteration did not grow, the peak regresses only beyond `threads`
    /// times the old one and the limit.
    pub fn with_threads(old: &AllocStats, new: &AllocStats, max_growth: f64, threads: usize) -> Self {
        let (old_peak, new_peak) = (old.peak_bytes as f64, new.peak_bytes as f64);
        let grew = |o: f64, n: f64, floor: f64| n > o * (1.0 + max_growth) && n >= floor;
        let overlap = if new.allocs_per_iter <= old.allocs_per_iter * (1.0 + max_growth) {
            threads.max(1) as f64
        } else {
            1.0
        };
        Self {
            old_peak_bytes: old.peak_bytes,
            new_peak_bytes: new.peak_bytes,
            old_allocs_per_iter: old.allocs_per_iter,
            new_allocs_per_iter: new.allocs_per_iter,
            peak_ratio: growth_ratio(old_peak, new_peak),
            allocs_ratio: growth_ratio(old.allocs_per_iter, new.allocs_per_iter),
            regressed: grew(old_peak * overlap, new_peak, PEAK_FLOOR_BYTES as f64)
                || grew(old.allocs_per_iter, new.allocs_per_iter, ALLOCS_FLOOR),
        }
    }
}

fn growth_ratio(old: f64, new: f64) -> f64 {
    if old > 0.0 {
        new / old
    } else if new > 0.0 {
        f64::INFINITY
    } else {
        1.0
    }
}

/// serde_json writes non-finite numbers as `null`; the only non-finite
/// memory ratio is the infinite one (growth from 0).
fn null_as_infinity<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(peak_bytes: u64, allocs_per_iter: f64) -> AllocStats {
        AllocStats { peak_bytes, allocs_per_iter, ..Default::default() }
    }

    #[test]
    fn threads_may_overlap_the_same_allocations_but_not_more() {
        let (one, two) = (stats(1 << 20, 2.0), stats(2 << 20, 2.0));
        assert!(MemoryChange::with_threads(&one, &two, 0.2, 1).regressed, "one thread: a doubled peak");
        assert!(!MemoryChange::with_threads(&one, &two, 0.2, 2).regressed, "two threads overlapping");
        assert!(MemoryChange::with_threads(&one, &stats(3 << 20, 2.0), 0.2, 2).regressed, "beyond two");
        assert!(MemoryChange::with_threads(&one, &stats(2 << 20, 4.0), 0.2, 2).regressed, "more allocations");
    }
}
