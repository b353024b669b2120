//! Timing one prepared workload: warm-up, iteration calibration, sampling.
//! No statistics beyond the stopping rule live here.

use super::screen;
use super::timer::{TimerInfo, secs};
use crate::alloc;
use crate::config::Settings;
use crate::results::{AllocStats, Sample, StopReason};
use crate::workload::Workload;
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
    /// Allocation figures from a counted, untimed pass of one sample's
    /// iterations after sampling (when the counting allocator is installed).
    pub alloc: Option<AllocStats>,
    /// Time spent preparing the workload (set by the runner), ns.
    pub prepare_ns: f64,
    /// Time spent verifying it (set by the runner), ns.
    pub verify_ns: f64,
    /// Copies of the case the samples were taken from in turn (set by the
    /// runner; see `harness::placement`).
    pub placements: usize,
    /// What screening the samples found (see [`super::screen`]).
    pub screen: Screen,
    /// Hardware counters and a profile of the case, set by the runner
    /// when asked for ([`crate::inside`]).
    pub inside: crate::inside::Inside,
}

/// What [`measure`]'s screening of the samples found ([`super::screen`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Screen {
    /// Why these samples cannot be taken as they are: they were caught
    /// again after one re-measurement (or no time was left for one).
    pub suspect: Option<String>,
    /// Why a first measurement was discarded and the case measured again,
    /// when it was.
    pub remeasured: Option<String>,
}

/// Warms up, calibrates and samples `w` under `s`, and screens the samples
/// ([`super::screen`]): caught, the case is measured once more, and the
/// second measurement kept (marked suspect if it is caught too, or if
/// `max_time` left no time for it). Errors from the workload propagate;
/// panics are the caller's to catch.
pub fn measure(w: &mut dyn Workload, s: &Settings, timer: &TimerInfo, round: u32) -> Result<Measurement> {
    let deadline = s.max_time.map(|m| Instant::now() + secs(m));
    let (first, caught) = measure_once(w, s, timer, round, deadline)?;
    let Some(why) = caught else { return Ok(first) };
    if deadline.is_some_and(|d| Instant::now() >= d) {
        let suspect = Some(format!("{why} (max-time left no time to measure again)"));
        return Ok(Measurement { screen: Screen { suspect, remeasured: None }, ..first });
    }
    let (mut second, again) = measure_once(w, s, timer, round, deadline)?;
    second.screen = match again {
        Some(still) => Screen { suspect: Some(format!("measured twice: {still}")), remeasured: Some(why) },
        None => Screen { suspect: None, remeasured: Some(why) },
    };
    Ok(second)
}

/// One warm-up, calibration and sampling under `s` (sampling ends by
/// `deadline` when set), and why screening caught the samples, if it did.
fn measure_once(
    w: &mut dyn Workload,
    s: &Settings,
    timer: &TimerInfo,
    round: u32,
    deadline: Option<Instant>,
) -> Result<(Measurement, Option<String>)> {
    let start = Instant::now();
    // Warm-up and samples run with allocation counting off (see
    // `alloc::set_counting`); allocations are counted in a pass of their own.
    let counting = alloc::is_installed();
    let uncounted = alloc::set_counting(false);
    let past = |t: Instant| deadline.is_some_and(|d| t >= d);

    // Warm-up: grow the batch until the warm-up time is spent. The last batch
    // (the warmest) gives the per-iteration estimate for calibration.
    let warm_up = secs(s.warm_up_time);
    // A workload that fixes its iterations per call (an external process:
    // one run per sample, with untimed hooks around it) keeps them here too.
    let fixed = w.fixed_iterations().map(|n| n.max(1));
    let mut batch = fixed.unwrap_or(1);
    // The fastest batch timed as precisely as a sample, for screening: a
    // lone disturbed batch (the last one included) must not count as the
    // warm-up's speed.
    let mut fastest: Option<f64> = None;
    let per_iter_ns = loop {
        w.before_sample()?;
        let t0 = Instant::now();
        w.run(batch)?;
        w.sync()?;
        let dt = t0.elapsed();
        w.after_sample(false)?;
        let per_iter = dt.as_nanos() as f64 / batch as f64;
        if dt.as_nanos() as f64 >= timer.min_sample_ns() {
            fastest = Some(fastest.map_or(per_iter, |f| f.min(per_iter)));
        }
        let spent = start.elapsed();
        if spent >= warm_up || past(Instant::now()) {
            break per_iter.max(0.1);
        }
        let remaining = (warm_up - spent).as_nanos() as f64;
        let fill = (remaining / per_iter.max(0.1)).max(1.0) as u64;
        batch = fixed.unwrap_or_else(|| (batch.saturating_mul(2)).min(fill).max(1));
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
    let iters = fixed.unwrap_or_else(|| ((per_sample_target / per_iter_ns).round() as u64).max(1));
    let expected_sample = Duration::from_nanos((per_iter_ns * iters as f64) as u64);

    let mut samples = Vec::with_capacity(s.sample_size);
    // The timing thread's CPU time per sample, read outside the timed region.
    let mut cpu: Option<Vec<f64>> = screen::thread_cpu_ns().map(|_| Vec::with_capacity(s.sample_size));
    let mut scratch: Vec<f64> = Vec::with_capacity(s.sample_size);
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
        w.before_sample()?;
        let cpu0 = cpu.as_ref().and_then(|_| screen::thread_cpu_ns());
        let t0 = Instant::now();
        w.run(iters)?;
        // The device finishes before the clock is read (a no-op on the CPU).
        w.sync()?;
        let nanos = t0.elapsed().as_nanos() as f64;
        match (cpu0, screen::thread_cpu_ns()) {
            (Some(a), Some(b)) => cpu.iter_mut().for_each(|c| c.push(b - a)),
            _ => cpu = None,
        }
        w.after_sample(true)?;
        samples.push(Sample { iterations: iters, nanos, round });
        if let Some(target) = s.target_precision
            && samples.len() >= MIN_SAMPLES_FOR_PRECISION
            && precise_enough(&samples, &mut scratch, s, target)
        {
            stopped_by = StopReason::TargetPrecision;
            break;
        }
    }
    drop(uncounted);
    let alloc = if counting { count_allocations(w, iters, expected_sample, deadline)? } else { None };
    let caught = screened(&samples, cpu.as_deref(), fastest, &mut scratch);
    let m = Measurement {
        samples,
        warm_up_ns,
        iterations_per_sample: iters,
        requested: s.sample_size,
        stopped_by,
        alloc,
        prepare_ns: 0.0,
        verify_ns: 0.0,
        placements: 1,
        screen: Screen::default(),
        inside: Default::default(),
    };
    Ok((m, caught))
}

/// Why [`super::screen`]'s rules catch `samples` (`cpu`: the timing
/// thread's CPU time per sample; `warm`: the warm-up's fastest precise
/// batch per iteration), if they do.
fn screened(
    samples: &[Sample],
    cpu: Option<&[f64]>,
    warm: Option<f64>,
    scratch: &mut Vec<f64>,
) -> Option<String> {
    let nanos: Vec<f64> = samples.iter().map(|x| x.nanos).collect();
    let on_tick = screen::tick_ns().and_then(|tick| screen::on_tick(&nanos, cpu, tick));
    scratch.clear();
    scratch.extend(samples.iter().map(Sample::per_iter));
    scratch.sort_by(f64::total_cmp);
    let median = (!scratch.is_empty()).then(|| crate::stats::quantile_sorted(scratch, 0.5));
    let far = warm.zip(median).and_then(|(w, m)| screen::far_from_warm_up(w, m));
    match (on_tick, far) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    }
}

/// Allocation figures from one untimed sample's worth of iterations with
/// counting on (one iteration when a full sample would overrun `deadline`;
/// none when not even that fits).
fn count_allocations(
    w: &mut dyn Workload,
    iters: u64,
    expected_sample: Duration,
    deadline: Option<Instant>,
) -> Result<Option<AllocStats>> {
    let per_iter = Duration::from_secs_f64(expected_sample.as_secs_f64() / iters.max(1) as f64);
    let fits = |d: Duration| deadline.is_none_or(|end| Instant::now() + d <= end);
    let n = if fits(expected_sample) {
        iters
    } else if fits(per_iter) {
        1
    } else {
        return Ok(None);
    };
    // A fixed iteration count is kept here too (its hooks expect it).
    let n = w.fixed_iterations().map_or(n, |f| f.max(1));
    w.before_sample()?;
    let before = alloc::snapshot();
    let base = alloc::reset_peak();
    w.run(n)?;
    let after = alloc::snapshot();
    let peak = alloc::peak().saturating_sub(base);
    w.after_sample(false)?;
    Ok(Some(AllocStats {
        allocs_per_iter: (after.allocs - before.allocs) as f64 / n as f64,
        bytes_per_iter: (after.bytes - before.bytes) as f64 / n as f64,
        peak_bytes: peak as u64,
    }))
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
    use crate::workload::{Throughput, Verification};

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
        // (several times fewer if the spin overran during warm-up on a busy
        // machine: it spins on wall-clock time, so preemption inflates it).
        assert!(
            m.iterations_per_sample > 900 && m.iterations_per_sample <= 9000,
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

    /// Records the order of hook and run calls (one iteration fixed per call).
    #[derive(Default)]
    struct Hooked {
        log: Vec<&'static str>,
        measured: usize,
        bad_iters: bool,
    }
    impl Workload for Hooked {
        fn verify(&mut self) -> Result<Verification> {
            Ok(Verification::pass("none"))
        }
        fn throughput(&self) -> Vec<Throughput> {
            vec![]
        }
        fn run(&mut self, iters: u64) -> Result<()> {
            self.bad_iters |= iters != 1;
            self.log.push("run");
            std::thread::sleep(Duration::from_micros(200));
            Ok(())
        }
        fn fixed_iterations(&self) -> Option<u64> {
            Some(1)
        }
        fn before_sample(&mut self) -> Result<()> {
            self.log.push("before");
            Ok(())
        }
        fn after_sample(&mut self, measured: bool) -> Result<()> {
            self.log.push("after");
            self.measured += measured as usize;
            Ok(())
        }
    }

    #[test]
    fn fixed_iterations_bracket_every_run_with_the_hooks() {
        let s = Settings { sample_size: 8, warm_up_time: 0.005, measurement_time: 0.5, ..Default::default() };
        let mut w = Hooked::default();
        let m = measure(&mut w, &s, &timer(), 0).unwrap();
        assert!(!w.bad_iters, "every run call had one iteration");
        assert_eq!(m.iterations_per_sample, 1);
        // Only samples are reported as measured: those kept, and those of a
        // first measurement that screening caught (a 200 us sleep can wake
        // late on a busy machine) and discarded.
        match m.screen.remeasured {
            None => assert_eq!(w.measured, m.samples.len(), "only samples are reported as measured"),
            Some(_) => assert!(w.measured > m.samples.len()),
        }
        // before, run, after, before, run, after, ...: no run outside the hooks.
        assert_eq!(w.log.len() % 3, 0);
        for triple in w.log.chunks(3) {
            assert_eq!(triple, ["before", "run", "after"]);
        }
        assert!(w.log.len() / 3 > m.samples.len(), "warm-up calls are bracketed too");
    }

    /// Allocates one 1000-byte buffer per iteration and records whether the
    /// allocator was counting while it ran.
    struct Allocating {
        counted_runs: u64,
        uncounted_runs: u64,
    }
    impl Workload for Allocating {
        fn verify(&mut self) -> Result<Verification> {
            Ok(Verification::pass("none"))
        }
        fn throughput(&self) -> Vec<Throughput> {
            vec![]
        }
        fn run(&mut self, iters: u64) -> Result<()> {
            if alloc::counting() {
                self.counted_runs += 1;
            } else {
                self.uncounted_runs += 1;
            }
            for _ in 0..iters {
                std::hint::black_box(vec![7u8; 1000]);
            }
            Ok(())
        }
    }

    #[test]
    fn samples_are_timed_uncounted_and_allocations_counted_in_a_pass_of_their_own() {
        let s =
            Settings { sample_size: 10, warm_up_time: 0.01, measurement_time: 0.05, ..Default::default() };
        let mut w = Allocating { counted_runs: 0, uncounted_runs: 0 };
        let m = measure(&mut w, &s, &timer(), 0).unwrap();
        let a = m.alloc.expect("the lib tests install the counting allocator");
        assert_eq!(a.allocs_per_iter, 1.0);
        assert_eq!(a.bytes_per_iter, 1000.0);
        assert_eq!(a.peak_bytes, 1000);
        // Warm-up batches and every sample ran uncounted; one counted pass.
        assert_eq!(w.counted_runs, 1);
        assert!(w.uncounted_runs > m.samples.len() as u64);
        assert!(alloc::counting(), "counting is back on after measuring");
    }
}
