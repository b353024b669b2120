//! Screening a measurement before it is believed: two rules that catch
//! samples which timed something other than the work.
//!
//! - **On the tick**: most samples last a whole number of scheduler ticks
//!   (1/`CONFIG_HZ`, 4 ms at 250 Hz) while the timing thread ran for less
//!   than half of them. Such a case waited each iteration for the kernel's
//!   next tick (a wake-up that only the tick delivered) and measures the
//!   tick, not the work: issue 45's `matmul` 64x64x64 on one thread read
//!   4.00 ms per iteration, every sample within 1%, against 17 us in the
//!   runs before and after. A case whose work really takes a whole number of
//!   ticks keeps its thread busy, so the CPU-time condition spares it.
//! - **Far from the warm-up**: the samples' median per iteration and the
//!   warm-up's fastest batch (of those timed as precisely as a sample)
//!   differ more than [`DISAGREEMENT`] times, either way: one of them did
//!   not time the work the other did. The fastest, not the last batch that
//!   calibration uses: on a busy machine one batch is often preempted (one
//!   test run saw a last batch at 43 us per iteration of a 3.6 us case).
//!
//! The sampler measures a case again once when either rule fires; a case
//! still caught the second time carries the reason in its results
//! (`sampling.timing_suspect`), and `compare` does not judge it.

use std::sync::OnceLock;

/// How close to a whole number of ticks a sample must be, as a fraction of
/// one tick (2-3% below the tick is typical: the wait starts just after
/// the previous sample, and ends at a tick boundary).
pub const TICK_TOLERANCE: f64 = 0.03;
/// Most ticks a sample may span and still count as on the tick: a sample
/// of many ticks lands near a multiple by chance.
pub const MAX_TICKS: f64 = 16.0;
/// Below this share of a sample's time on the CPU, the timing thread mostly
/// waited.
pub const MAX_CPU_SHARE: f64 = 0.5;
/// Warm-up and samples further apart than this factor disagree.
pub const DISAGREEMENT: f64 = 10.0;

/// The kernel's scheduler tick, ns: the resolution of
/// `CLOCK_MONOTONIC_COARSE`, which the kernel advances once per tick
/// (`CONFIG_HZ` itself is not readable, and `sysconf(_SC_CLK_TCK)` is the
/// fixed 100 of the user-space ABI). `None` where there is no such clock or
/// it reports nothing plausible.
pub fn tick_ns() -> Option<f64> {
    static TICK: OnceLock<Option<f64>> = OnceLock::new();
    *TICK.get_or_init(coarse_resolution_ns)
}

#[cfg(target_os = "linux")]
fn coarse_resolution_ns() -> Option<f64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_getres writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    let ns = ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64;
    // CONFIG_HZ is 100 to 1000 in practice: a tick of 1 to 10 ms.
    (rc == 0 && (0.5e6..=20e6).contains(&ns)).then_some(ns)
}

#[cfg(not(target_os = "linux"))]
fn coarse_resolution_ns() -> Option<f64> {
    None
}

/// CPU time the calling thread has used so far, ns; `None` where the clock
/// is not available.
#[cfg(unix)]
pub fn thread_cpu_ns() -> Option<f64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then_some(ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64)
}

/// CPU time the calling thread has used so far: not available here.
#[cfg(not(unix))]
pub fn thread_cpu_ns() -> Option<f64> {
    None
}

/// The whole number of ticks `nanos` lasts, when it is within
/// [`TICK_TOLERANCE`] of one tick of it (1 to [`MAX_TICKS`]).
fn ticks_of(nanos: f64, tick: f64) -> Option<f64> {
    let k = (nanos / tick).round();
    ((1.0..=MAX_TICKS).contains(&k) && (nanos - k * tick).abs() <= TICK_TOLERANCE * tick).then_some(k)
}

/// Why samples lasting `nanos` (whole samples, not per iteration) measure
/// the scheduler's tick of `tick` ns rather than the work: more than half
/// of them on a whole number of ticks, and the timing thread on the CPU for
/// under [`MAX_CPU_SHARE`] of those (`cpu`: its CPU time per sample, when
/// known; unknown, the ticks alone decide). `None` when they do not.
pub fn on_tick(nanos: &[f64], cpu: Option<&[f64]>, tick: f64) -> Option<String> {
    // A tick that is not a positive number (NaN included) tells nothing.
    if nanos.len() < super::sampler::MIN_SAMPLES || tick.is_nan() || tick <= 0.0 {
        return None;
    }
    let on: Vec<usize> = (0..nanos.len()).filter(|&i| ticks_of(nanos[i], tick).is_some()).collect();
    if on.len() * 2 <= nanos.len() {
        return None;
    }
    let wall: f64 = on.iter().map(|&i| nanos[i]).sum();
    let share = cpu.filter(|c| c.len() == nanos.len()).map(|c| on.iter().map(|&i| c[i]).sum::<f64>() / wall);
    if share.is_some_and(|s| s >= MAX_CPU_SHARE) {
        return None;
    }
    let ran = match share {
        Some(s) => format!("the timing thread ran for {:.0}% of their time", s * 100.0),
        None => "the thread's CPU time is unknown here".to_string(),
    };
    Some(format!(
        "{} of {} samples last a whole number of scheduler ticks ({:.3} ms, {:.0} Hz) within {:.0}% of a tick, and {ran}: they timed waits for the tick, not the work",
        on.len(),
        nanos.len(),
        tick / 1e6,
        1e9 / tick,
        TICK_TOLERANCE * 100.0
    ))
}

/// Why the samples' median per-iteration time `samples_ns` and the warm-up's
/// `warm_up_ns` (its fastest precise batch, per iteration) cannot both have
/// timed the same work: more than [`DISAGREEMENT`] times apart. `None` when
/// they agree (or either is not a positive time).
pub fn far_from_warm_up(warm_up_ns: f64, samples_ns: f64) -> Option<String> {
    let usable = |x: f64| x.is_finite() && x > 0.0;
    if !usable(warm_up_ns) || !usable(samples_ns) {
        return None;
    }
    let ratio = samples_ns / warm_up_ns;
    let (factor, way) = if ratio > 1.0 { (ratio, "slower") } else { (1.0 / ratio, "faster") };
    (factor > DISAGREEMENT).then(|| {
        format!(
            "the samples ran {factor:.0}x {way} per iteration than the warm-up's fastest batch ({} against {})",
            crate::units::format_time_ns(samples_ns),
            crate::units::format_time_ns(warm_up_ns)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: f64 = 4e6;

    #[test]
    fn samples_on_the_tick_with_the_thread_waiting_are_caught() {
        // Issue 45: every sample within 1% of one tick, the thread idle.
        let nanos = [3.98e6, 4.01e6, 3.99e6, 4.00e6, 3.97e6, 4.02e6, 3.99e6, 4.00e6, 4.01e6, 3.98e6];
        let idle = [20e3; 10];
        let why = on_tick(&nanos, Some(&idle), TICK).expect("caught");
        assert!(why.contains("10 of 10") && why.contains("250 Hz") && why.contains("ran for 1%"), "{why}");
        // Several ticks per sample (several iterations, each waiting one),
        // and 2-3% below the tick, as a wait that starts just after one does.
        let multiples = [7.93e6, 8.01e6, 11.9e6, 8.0e6, 3.9e6, 12.05e6];
        assert!(on_tick(&multiples, Some(&[1e5; 6]), TICK).is_some());
        // Without a thread CPU clock the ticks alone decide.
        assert!(on_tick(&nanos, None, TICK).unwrap().contains("unknown"));
    }

    #[test]
    fn work_that_lasts_a_tick_on_a_busy_thread_is_not_caught() {
        let nanos = [4.0e6; 8];
        let busy = [3.9e6; 8];
        assert_eq!(on_tick(&nanos, Some(&busy), TICK), None);
        // The mean share decides: half the samples' time waiting is not yet "mostly".
        let half = [2.0e6; 8];
        assert_eq!(on_tick(&nanos, Some(&half), TICK), None);
    }

    #[test]
    fn samples_off_the_tick_or_a_minority_on_it_are_not_caught() {
        let idle = [1e3; 10];
        // Between ticks: 1.5 and 2.5 ticks.
        assert_eq!(on_tick(&[6e6, 10e6, 6e6, 10e6, 6.1e6], Some(&idle[..5]), TICK), None);
        // 4% off: outside the tolerance.
        assert_eq!(on_tick(&[4.16e6; 5], Some(&idle[..5]), TICK), None);
        // Far below one tick (a fast case), or beyond MAX_TICKS.
        assert_eq!(on_tick(&[17e3; 10], Some(&idle), TICK), None);
        assert_eq!(on_tick(&[20.0 * TICK; 5], Some(&idle[..5]), TICK), None);
        // Half on the tick is not more than half: the median is not the tick's.
        let mixed = [4e6, 4e6, 4e6, 10e3, 10e3, 10e3];
        assert_eq!(on_tick(&mixed, Some(&idle[..6]), TICK), None);
        let most = [4e6, 4e6, 4e6, 4e6, 10e3, 10e3];
        assert!(on_tick(&most, Some(&idle[..6]), TICK).unwrap().contains("4 of 6"));
        // Too few samples to say, and no tick.
        assert_eq!(on_tick(&[4e6, 4e6], Some(&idle[..2]), TICK), None);
        assert_eq!(on_tick(&[4e6; 5], Some(&idle[..5]), 0.0), None);
        // A CPU record of another length is not used.
        assert!(on_tick(&[4e6; 5], Some(&[4e6; 3]), TICK).unwrap().contains("unknown"));
    }

    #[test]
    fn warm_up_and_samples_far_apart_disagree_either_way() {
        let slower = far_from_warm_up(17.8e3, 4.0e6).expect("225x slower");
        assert!(slower.contains("225x slower"), "{slower}");
        let faster = far_from_warm_up(4.0e6, 10e3).expect("400x faster");
        assert!(faster.contains("400x faster"), "{faster}");
        // Within 10x either way: agree.
        assert_eq!(far_from_warm_up(17.8e3, 150e3), None);
        assert_eq!(far_from_warm_up(17.8e3, 2e3), None);
        assert_eq!(far_from_warm_up(17.8e3, 17.8e3 * DISAGREEMENT), None);
        // Nothing to compare.
        assert_eq!(far_from_warm_up(0.0, 1e3), None);
        assert_eq!(far_from_warm_up(1e3, f64::NAN), None);
        assert_eq!(far_from_warm_up(f64::INFINITY, 1e3), None);
    }

    use crate::backend::cpu::on_pool_of;
    use crate::config::Settings;
    use crate::harness::sampler::measure;
    use crate::harness::timer::TimerInfo;
    use crate::workload::{Throughput, Verification, Workload};
    use std::time::{Duration, Instant};

    fn spin(d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {}
    }

    /// Spins 50 us per iteration, and 150 ms more per call in the samples
    /// that follow a measured one while fewer than `slow_until` samples were
    /// measured (`None`: always): the first measurement's samples then run
    /// far slower than its warm-up (at most 72 iterations a sample: over
    /// 2 ms each), and each slow one outlasts a 100 ms max-time alone.
    struct SlowSamples {
        last_measured: bool,
        measured: usize,
        slow_until: Option<usize>,
    }
    impl Workload for SlowSamples {
        fn verify(&mut self) -> anyhow::Result<Verification> {
            Ok(Verification::pass("none"))
        }
        fn throughput(&self) -> Vec<Throughput> {
            vec![]
        }
        fn run(&mut self, iters: u64) -> anyhow::Result<()> {
            let slow = self.last_measured && self.slow_until.is_none_or(|n| self.measured < n);
            if slow {
                spin(Duration::from_millis(150));
            }
            (0..iters).for_each(|_| spin(Duration::from_micros(50)));
            Ok(())
        }
        fn after_sample(&mut self, measured: bool) -> anyhow::Result<()> {
            self.last_measured = measured;
            self.measured += measured as usize;
            Ok(())
        }
    }

    fn settings() -> Settings {
        // Samples of 3.6 ms (72 iterations, fewer if the warm-up ran slow):
        // the budget stops the first measurement at its minimum of 3.
        Settings { sample_size: 5, warm_up_time: 0.005, measurement_time: 0.02, ..Default::default() }
    }

    fn timer() -> TimerInfo {
        TimerInfo { resolution_ns: 20.0, overhead_ns: 20.0, empty_loop_ns_per_iter: 0.3 }
    }

    #[test]
    fn samples_far_from_the_warm_up_are_measured_again_and_the_second_kept() {
        let mut w = SlowSamples { last_measured: false, measured: 0, slow_until: Some(3) };
        let m = measure(&mut w, &settings(), &timer(), 0).unwrap();
        let why = m.screen.remeasured.as_deref().expect("measured again");
        assert!(why.contains("slower per iteration than the warm-up's fastest batch"), "{why}");
        assert_eq!(m.screen.suspect, None, "the second measurement was clean");
        // Two measurements ran: 3 samples discarded, then the kept ones.
        assert_eq!(w.measured, 3 + m.samples.len());
    }

    #[test]
    fn samples_caught_twice_are_marked_suspect() {
        let mut w = SlowSamples { last_measured: false, measured: 0, slow_until: None };
        let m = measure(&mut w, &settings(), &timer(), 0).unwrap();
        assert!(m.screen.remeasured.is_some());
        let why = m.screen.suspect.as_deref().expect("suspect");
        assert!(why.starts_with("measured twice: the samples ran") && why.contains("slower"), "{why}");
        // With max-time spent by the first measurement (two samples, the
        // second slow), none follows.
        let s = Settings { max_time: Some(0.1), ..settings() };
        let mut w = SlowSamples { last_measured: false, measured: 0, slow_until: None };
        let m = measure(&mut w, &s, &timer(), 0).unwrap();
        assert_eq!(m.screen.remeasured, None);
        assert!(m.screen.suspect.as_deref().is_some_and(|w| w.contains("max-time left no time")));
    }

    /// Records the thread each iteration ran on, through the suites'
    /// `install` into a one-thread pool of its own, as `matmul` does for
    /// `threads = 1`.
    struct OwnPool {
        pool: rayon::ThreadPool,
        ran_on: Vec<std::thread::ThreadId>,
    }
    impl Workload for OwnPool {
        fn verify(&mut self) -> anyhow::Result<Verification> {
            Ok(Verification::pass("none"))
        }
        fn throughput(&self) -> Vec<Throughput> {
            vec![]
        }
        fn run(&mut self, iters: u64) -> anyhow::Result<()> {
            for _ in 0..iters {
                let id = crate::backend::cpu::install(Some(&self.pool), || {
                    spin(Duration::from_micros(5));
                    std::thread::current().id()
                });
                self.ran_on.push(id);
            }
            Ok(())
        }
    }

    #[test]
    fn a_dedicated_pool_case_runs_every_iteration_on_the_timing_thread() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let mut w = OwnPool { pool, ran_on: Vec::new() };
        let s =
            Settings { sample_size: 5, warm_up_time: 0.002, measurement_time: 0.01, ..Default::default() };
        let timing = on_pool_of(Some(1), || {
            measure(&mut w, &s, &timer(), 0).unwrap();
            std::thread::current().id()
        });
        assert!(!w.ran_on.is_empty());
        // Not one iteration was handed to the pool's own worker.
        assert!(w.ran_on.iter().all(|id| *id == timing));
    }

    #[test]
    fn the_tick_is_a_plausible_kernel_tick_where_known() {
        // Linux reports 1/CONFIG_HZ (1 to 10 ms); elsewhere nothing.
        if let Some(t) = tick_ns() {
            assert!((0.5e6..=20e6).contains(&t), "{t}");
        }
        #[cfg(target_os = "linux")]
        assert!(tick_ns().is_some(), "Linux has CLOCK_MONOTONIC_COARSE");
        // The thread clock advances with work on this thread.
        if let Some(a) = thread_cpu_ns() {
            let mut x = 0u64;
            while thread_cpu_ns().is_some_and(|b| b - a < 1e6) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            assert!(x > 0);
        }
    }
}
