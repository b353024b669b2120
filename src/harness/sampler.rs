//! Timing one prepared workload: warm-up, iteration calibration, sampling.
//! No statistics beyond the stopping rule live here.

use super::alloc;
use super::timer::{TimerInfo, secs};
use crate::config::Settings;
use crate::results::{AllocStats, Sample, StopReason};
use crate::suites::Workload;
use anyhow::Result;
use std::time::{Duration, Instant};

/// Below this many samples the measurement budget does not stop sampling
/// (only `max_time` can): fewer would leave nothing to estimate a spread from.
pub const MIN_SAMPLES: usize = 3;
/// Samples needed before `target_precision` may stop sampling early.
const MIN_SAMPLES_FOR_PRECISION: usize = 5;

/// Raw timings of one case in one round.
#[derive(Debug, Clone)]
pub struct Measurement {
    /// The samples, in the order taken.
    pub samples: Vec<Sample>,
    /// Warm-up time actually spent, ns.
    pub warm_up_ns: f64,
    /// Iterations per sample chosen by calibration.
    pub iterations_per_sample: u64,
    /// Samples requested.
    pub requested: usize,
    /// Why sampling stopped.
    pub stopped_by: StopReason,
    /// Allocation figures over the sampled iterations (if counting is on).
    pub alloc: Option<AllocStats>,
    /// Time spent preparing the workload (set by the runner), ns.
    pub prepare_ns: f64,
    /// Time spent verifying it (set by the runner), ns.
    pub verify_ns: f64,
}

/// Warms up, calibrates and samples `w` under `s`. Errors from the workload
/// propagate; panics are the caller's to catch.
pub fn measure(w: &mut dyn Workload, s: &Settings, timer: &TimerInfo, round: u32) -> Result<Measurement> {
    let start = Instant::now();
    let deadline = s.max_time.map(|m| start + secs(m));
    let past = |t: Instant| deadline.is_some_and(|d| t >= d);

    // Warm-up: grow the batch until the warm-up time is spent. The last batch
    // (the warmest) gives the per-iteration estimate for calibration.
    let warm_up = secs(s.warm_up_time);
    let mut batch = 1u64;
    let per_iter_ns = loop {
        let t0 = Instant::now();
        w.run(batch)?;
        let dt = t0.elapsed();
        let per_iter = dt.as_nanos() as f64 / batch as f64;
        let spent = start.elapsed();
        if spent >= warm_up || past(Instant::now()) {
            break per_iter.max(0.1);
        }
        let remaining = (warm_up - spent).as_nanos() as f64;
        let fill = (remaining / per_iter.max(0.1)).max(1.0) as u64;
        batch = (batch.saturating_mul(2)).min(fill).max(1);
    };
    let warm_up_ns = start.elapsed().as_nanos() as f64;

    // Calibration: every sample lasts >= 100x the clock precision, and the
    // requested samples fit the measurement budget.
    let budget = secs(s.measurement_time);
    // With a hard deadline, size samples so the requested count fits what is
    // left of it, not only the measurement budget.
    let window = match deadline {
        Some(d) => budget.min(d.saturating_duration_since(Instant::now())),
        None => budget,
    };
    // Aim at 90% of the window so ordinary jitter does not cut the last samples.
    let per_sample_target =
        (0.9 * window.as_nanos() as f64 / s.sample_size as f64).max(timer.min_sample_ns());
    let iters = ((per_sample_target / per_iter_ns).round() as u64).max(1);
    let expected_sample = Duration::from_nanos((per_iter_ns * iters as f64) as u64);

    let mut samples = Vec::with_capacity(s.sample_size);
    let mut scratch: Vec<f64> = Vec::with_capacity(s.sample_size);
    let counting = alloc::is_installed();
    let before = alloc::snapshot();
    let live_before = alloc::reset_peak();
    let sampling_start = Instant::now();
    let mut stopped_by = StopReason::SampleSize;
    while samples.len() < s.sample_size {
        let now = Instant::now();
        if !samples.is_empty() && deadline.is_some_and(|d| now + expected_sample > d) {
            stopped_by = StopReason::MaxTime;
            break;
        }
        if samples.len() >= MIN_SAMPLES && now - sampling_start + expected_sample > budget {
            stopped_by = StopReason::MeasurementTime;
            break;
        }
        let t0 = Instant::now();
        w.run(iters)?;
        let nanos = t0.elapsed().as_nanos() as f64;
        samples.push(Sample { iterations: iters, nanos, round });
        if let Some(target) = s.target_precision
            && samples.len() >= MIN_SAMPLES_FOR_PRECISION
            && precise_enough(&samples, &mut scratch, s, target)
        {
            stopped_by = StopReason::TargetPrecision;
            break;
        }
    }
    let after = alloc::snapshot();
    let peak = alloc::peak().saturating_sub(live_before);
    let total_iters: u64 = samples.iter().map(|x| x.iterations).sum();
    let alloc = (counting && total_iters > 0).then(|| AllocStats {
        allocs_per_iter: (after.allocs - before.allocs) as f64 / total_iters as f64,
        bytes_per_iter: (after.bytes - before.bytes) as f64 / total_iters as f64,
        peak_bytes: peak as u64,
    });
    Ok(Measurement {
        samples,
        warm_up_ns,
        iterations_per_sample: iters,
        requested: s.sample_size,
        stopped_by,
        alloc,
        prepare_ns: 0.0,
        verify_ns: 0.0,
    })
}

/// True when the median's CI half-width is within `target` percent of it.
fn precise_enough(samples: &[Sample], scratch: &mut Vec<f64>, s: &Settings, target: f64) -> bool {
    scratch.clear();
    scratch.extend(samples.iter().map(Sample::per_iter));
    scratch.sort_by(f64::total_cmp);
    let median = crate::stats::quantile_sorted(scratch, 0.5);
    let (lo, hi) = crate::stats::median_ci(scratch, s.confidence_level);
    median > 0.0 && (hi - lo) / 2.0 / median * 100.0 <= target
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suites::{Throughput, Verification};

    /// A workload with a known cost: spins for `ns` per iteration.
    struct Spin {
        ns: u64,
        calls: u64,
    }
    impl Workload for Spin {
        fn verify(&mut self) -> Result<Verification> {
            Ok(Verification::pass("none"))
        }
        fn throughput(&self) -> Vec<Throughput> {
            vec![]
        }
        fn run(&mut self, iters: u64) -> Result<()> {
            self.calls += 1;
            for _ in 0..iters {
                let t = Instant::now();
                while t.elapsed().as_nanos() < self.ns as u128 {}
            }
            Ok(())
        }
    }

    fn timer() -> TimerInfo {
        TimerInfo { resolution_ns: 20.0, overhead_ns: 20.0, empty_loop_ns_per_iter: 0.3 }
    }

    #[test]
    fn samples_respect_count_and_minimum_duration() {
        let s = Settings { sample_size: 10, warm_up_time: 0.01, measurement_time: 0.2, ..Default::default() };
        let mut w = Spin { ns: 2_000, calls: 0 };
        let m = measure(&mut w, &s, &timer(), 0).unwrap();
        // On a quiet machine all 10 fit; on a loaded one the budget may cut
        // the last ones, and must then say so.
        match m.stopped_by {
            StopReason::SampleSize => assert_eq!(m.samples.len(), 10),
            StopReason::MeasurementTime => assert!(m.samples.len() >= MIN_SAMPLES && m.samples.len() < 10),
            other => panic!("unexpected stop: {other:?}"),
        }
        // 90% of 0.2 s over 10 samples: 18 ms, about 9000 iterations of 2 us
        // (fewer if the spin overran during warm-up on a busy machine).
        assert!(
            m.iterations_per_sample > 2000 && m.iterations_per_sample <= 9000,
            "{}",
            m.iterations_per_sample
        );
        assert!(m.samples.iter().all(|x| x.nanos >= timer().min_sample_ns()));
    }

    #[test]
    fn max_time_wins_over_sample_count() {
        let s = Settings {
            sample_size: 1000,
            warm_up_time: 0.0,
            measurement_time: 10.0,
            max_time: Some(0.05),
            ..Default::default()
        };
        let mut w = Spin { ns: 1_000_000, calls: 0 };
        let t0 = Instant::now();
        let m = measure(&mut w, &s, &timer(), 0).unwrap();
        assert_eq!(m.stopped_by, StopReason::MaxTime);
        assert!(m.samples.len() < 1000);
        // Samples are sized to fit the deadline: at most one iteration of slack.
        assert!(t0.elapsed() < Duration::from_millis(50 + 20), "{:?}", t0.elapsed());
    }

    #[test]
    fn target_precision_stops_early_on_steady_work() {
        let s = Settings {
            sample_size: 1000,
            warm_up_time: 0.0,
            measurement_time: 2.0,
            target_precision: Some(50.0),
            ..Default::default()
        };
        let mut w = Spin { ns: 1_000, calls: 0 };
        let m = measure(&mut w, &s, &timer(), 0).unwrap();
        assert_eq!(m.stopped_by, StopReason::TargetPrecision);
        assert!(m.samples.len() >= MIN_SAMPLES_FOR_PRECISION && m.samples.len() < 1000);
    }

    #[test]
    fn measurement_budget_keeps_a_minimum_of_samples() {
        let s =
            Settings { sample_size: 100, warm_up_time: 0.0, measurement_time: 0.001, ..Default::default() };
        let mut w = Spin { ns: 2_000_000, calls: 0 };
        let m = measure(&mut w, &s, &timer(), 0).unwrap();
        assert_eq!(m.samples.len(), MIN_SAMPLES);
        assert_eq!(m.stopped_by, StopReason::MeasurementTime);
    }
}
