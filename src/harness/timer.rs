//! The harness's own clock: its resolution and overhead, and the cost of an
//! empty timed loop, measured once per run and reported.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Measured properties of the clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimerInfo {
    /// Smallest non-zero difference between two clock reads, ns.
    pub resolution_ns: f64,
    /// Cost of one clock read, ns.
    pub overhead_ns: f64,
    /// Cost per iteration of an empty loop run the way workloads run, ns.
    pub empty_loop_ns_per_iter: f64,
}

impl TimerInfo {
    /// Each sample must last at least this long: 100x the clock's precision
    /// (resolution or read cost, whichever is worse), so quantisation error
    /// stays under 1%.
    pub fn min_sample_ns(&self) -> f64 {
        100.0 * self.resolution_ns.max(self.overhead_ns).max(1.0)
    }
}

/// Measures the clock. Takes a few milliseconds.
pub fn calibrate() -> TimerInfo {
    // Resolution: smallest positive step seen between back-to-back reads.
    let mut resolution = f64::INFINITY;
    for _ in 0..20_000 {
        let a = Instant::now();
        let mut b = Instant::now();
        while b == a {
            b = Instant::now();
        }
        resolution = resolution.min((b - a).as_nanos() as f64);
    }
    // Overhead: average cost of a read over a long run (best of 5).
    let reads = 100_000u32;
    let mut overhead = f64::INFINITY;
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..reads {
            black_box(Instant::now());
        }
        overhead = overhead.min(start.elapsed().as_nanos() as f64 / reads as f64);
    }
    // Empty loop: the per-iteration floor every workload's loop pays.
    let iters = 1_000_000u64;
    let mut empty = f64::INFINITY;
    for _ in 0..5 {
        let start = Instant::now();
        empty_loop(black_box(iters));
        empty = empty.min(start.elapsed().as_nanos() as f64 / iters as f64);
    }
    TimerInfo { resolution_ns: resolution.max(1.0), overhead_ns: overhead, empty_loop_ns_per_iter: empty }
}

#[inline(never)]
fn empty_loop(iters: u64) {
    for i in 0..iters {
        black_box(i);
    }
}

/// Converts seconds from settings to a `Duration`, saturating on huge values.
pub fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    #[test]
    fn calibration_gives_plausible_positive_figures() {
        let t = super::calibrate();
        assert!(t.resolution_ns >= 1.0 && t.resolution_ns < 1e6, "{t:?}");
        assert!(t.overhead_ns > 0.0 && t.overhead_ns < 1e5, "{t:?}");
        assert!(t.empty_loop_ns_per_iter > 0.0 && t.empty_loop_ns_per_iter < 100.0, "{t:?}");
        assert!(t.min_sample_ns() >= 100.0 * t.resolution_ns);
    }
}
