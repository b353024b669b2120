//! Measured machine limits (`tfbench sysinfo --probe`), cached per machine.
//!
//! The probe measures peak f32 FMA throughput, STREAM read/copy/triad
//! bandwidth from DRAM, and the same three kernels on working sets that sit
//! in L1, L2 and L3 (the cache-aware roofline's roofs, `levels`), on one
//! core and on all requested threads. Results are cached as
//! `probe-<fingerprint>-t<threads>.json` so `tfbench run` can report "% of
//! peak" without re-measuring; the fingerprint
//! ([`crate::env::Environment::fingerprint`]) keeps results from one machine
//! out of another's reports, and the thread count keeps a one-thread probe
//! from serving as the all-core peak of a run on more threads.

mod cache;
mod flops;
mod levels;
mod stream;

pub use cache::{cache_dir, load, load_for_this_machine, save};
#[cfg(test)]
use cache::{cache_dir_from, load_in, save_in};
pub use levels::LevelBandwidth;

use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
#[cfg(test)]
use std::ffi::OsString;
#[cfg(test)]
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The machine's measured limits, used for "% of peak" and roofline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MachineLimits {
    /// Machine fingerprint the probe belongs to.
    pub fingerprint: String,
    /// When the probe ran, RFC 3339 UTC.
    pub measured_at: String,
    /// Threads used for the all-core figures.
    pub threads: usize,
    /// Peak f32 FMA throughput on one core, FLOP/s.
    pub peak_flops_one_core: f64,
    /// Peak f32 FMA throughput on all cores, FLOP/s.
    pub peak_flops_all_cores: f64,
    /// STREAM copy bandwidth on one thread, bytes/s.
    pub copy_bandwidth_one_thread: f64,
    /// STREAM copy bandwidth on all threads, bytes/s.
    pub copy_bandwidth_all_threads: f64,
    /// STREAM triad bandwidth on one thread, bytes/s.
    pub triad_bandwidth_one_thread: f64,
    /// STREAM triad bandwidth on all threads, bytes/s.
    pub triad_bandwidth_all_threads: f64,
    /// Other work's CPU use while the probe ran; `None` when not known (a
    /// probe cached before tfbench recorded it, or a platform whose kernel
    /// does not tell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<ProbeLoad>,
    /// Bandwidth per memory level, smallest first (`L1`, `L2`, `L3`,
    /// `DRAM`): the cache-aware roofline's roofs. Empty in a probe cached
    /// by an older tfbench (re-probed where possible; a run with such a
    /// probe measures every case against DRAM triad, as before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub levels: Vec<LevelBandwidth>,
    /// Physical cores of the machine when probed: FMA units and private
    /// caches are per core, so `k` threads on `k` cores have at least k
    /// times one core's roof (absent in older probes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<usize>,
}

/// Other work's CPU use over a whole probe, from the kernel's counters
/// (`harness::load`), and the verdict of the rule that sets disturbed
/// case-rounds aside (`compare::disturbance::taken_share`). The app layer
/// reads and judges it: this module sits below both (the results embed
/// [`MachineLimits`]), so it only stores the figures and the verdict.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProbeLoad {
    /// Wall time the figures cover (the whole probe, one and all threads), ns.
    pub wall_ns: f64,
    /// CPU time other processes used on the CPUs the probe could use, ns.
    pub others_ns: f64,
    /// Time the hypervisor gave other guests on those CPUs, ns.
    pub steal_ns: f64,
    /// CPUs the probe could use.
    pub cpus: u32,
    /// The probe's threads (its all-thread figures).
    pub threads: u32,
    /// The share of one core other work took from the probe, when that
    /// made it disturbed; `None` when it ran clean.
    pub disturbed: Option<f64>,
    /// Which try of this probe it was (1 = the first).
    pub attempt: u32,
    /// The `TFBENCH_INJECT_PROBE_LOAD` test hook's value when it, not the
    /// kernel, gave these figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected: Option<String>,
}

/// What is known of the load a probe ran under.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LoadState {
    /// Not recorded (see [`MachineLimits::load`]).
    Unknown,
    /// Other work took less than the disturbance bound.
    Clean,
    /// Other work took this share of one core: the figures read low.
    Disturbed(f64),
}

/// The most tries of a probe before a disturbed one is used (uncached).
pub const MAX_TRIES: u32 = 3;

/// The pause between tries, so a burst of other work can pass.
pub const RETRY_PAUSE: Duration = Duration::from_secs(2);

/// The widest vector code this CPU runs, detected at run time so one binary
/// serves every x86-64 machine. Deliberately not capped by `TFBENCH_MAX_ISA`
/// ([`crate::isa`]): the probe measures the machine's limits and is cached
/// per machine, so a capped probe would make every later "% of peak" on
/// that machine read high; under a cap, % of peak says what the cap costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Isa {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Portable,
}

impl Isa {
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx512f") {
            return Self::Avx512;
        }
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return Self::Avx2;
        }
        Self::Portable
    }
}

/// How long and how big the probe runs.
#[derive(Debug, Clone, Copy)]
struct ProbeConfig {
    /// Length of one FMA measurement.
    fma_duration: Duration,
    /// FMA measurements per thread count; the best is kept.
    fma_reps: usize,
    /// f32 elements in each of the three STREAM arrays.
    stream_len: usize,
    /// STREAM passes per kernel and thread count; the best is kept.
    stream_reps: usize,
    /// Bytes each thread moves per cache-level measurement.
    level_budget: u64,
    /// Measurements per cache level, kernel and thread count.
    level_reps: usize,
}

impl ProbeConfig {
    /// The real probe: about 3-6 s on a desktop or small server.
    fn full(env: &crate::env::Environment) -> Self {
        const MIB: u64 = 1 << 20;
        // STREAM's rule: each array at least 4x the last-level cache, so no
        // pass is served from cache. Without a known L3, 256 MiB covers most
        // CPUs. Capped at 1 GiB per array and at a quarter of the available
        // memory for all three, so the probe never pushes the machine to swap.
        let mut bytes = env.l3_cache_bytes.map_or(256 * MIB, |l3| (4 * l3).max(64 * MIB)).min(1024 * MIB);
        if let Some(avail) = env.available_memory_bytes {
            bytes = bytes.min(avail / 12).max(16 * MIB);
        }
        Self {
            // Many short windows rather than a few long ones: on a shared
            // host a 250 ms window is always cut by other work's time
            // slices, and the probe then read 92 GFLOP/s on a core whose
            // GEMMs ran at 240 (2 cores, load 8). The best of 150 windows of
            // 2 ms is the peak as soon as one window ran alone (shorter than
            // a scheduler slice), and the same figure on a quiet machine.
            fma_duration: Duration::from_millis(2),
            fma_reps: 150,
            stream_len: (bytes / 4) as usize,
            stream_reps: 8,
            // 256 MiB: about 1 ms from L1, 3 ms from L3 on one core: short
            // windows, best of 8, for the same reason as the FMA's.
            level_budget: 256 * MIB,
            level_reps: 8,
        }
    }

    /// A tiny probe for tests: numbers are real but cache-resident.
    #[cfg(test)]
    fn quick() -> Self {
        Self {
            fma_duration: Duration::from_millis(20),
            fma_reps: 2,
            stream_len: 1 << 18,
            stream_reps: 2,
            level_budget: 1 << 20,
            level_reps: 1,
        }
    }
}

/// Measures peak f32 FMA throughput, STREAM bandwidth and the bandwidth of
/// each cache level on one core and on `threads` concurrent threads. Takes
/// a few seconds and about 12x the L3 size of memory (bounded by what is
/// available).
pub fn measure(threads: usize) -> Result<MachineLimits> {
    let env = crate::env::Environment::gather();
    let mut limits =
        measure_with(threads, &ProbeConfig::full(&env), env.fingerprint(), &levels::CacheSizes::of(&env))?;
    limits.cores = env.physical_cores;
    Ok(limits)
}

fn measure_with(
    threads: usize,
    config: &ProbeConfig,
    fingerprint: String,
    caches: &levels::CacheSizes,
) -> Result<MachineLimits> {
    ensure!(threads > 0, "the probe needs at least one thread");
    let measured_at = now_rfc3339();
    let isa = Isa::detect();
    let (peak_one, peak_all) = flops::peak(isa, threads, config.fma_duration, config.fma_reps)?;
    let bw = stream::bandwidth(isa, threads, config.stream_len, config.stream_reps)?;
    let mut levels = levels::measure_caches(isa, caches, threads, config.level_budget, config.level_reps)?;
    levels.push(LevelBandwidth {
        level: "DRAM".into(),
        capacity_bytes: None,
        per_core: false,
        capacity_source: "none".into(),
        working_set_bytes: (3 * config.stream_len * 4) as u64,
        read_one_thread: bw.read_one,
        copy_one_thread: bw.copy_one,
        triad_one_thread: bw.triad_one,
        read_all_threads: bw.read_all,
        copy_all_threads: bw.copy_all,
        triad_all_threads: bw.triad_all,
    });
    let limits = MachineLimits {
        fingerprint,
        measured_at,
        threads,
        peak_flops_one_core: peak_one,
        peak_flops_all_cores: peak_all,
        copy_bandwidth_one_thread: bw.copy_one,
        copy_bandwidth_all_threads: bw.copy_all,
        triad_bandwidth_one_thread: bw.triad_one,
        triad_bandwidth_all_threads: bw.triad_all,
        load: None,
        levels,
        cores: None,
    };
    for (name, v) in [
        ("peak FLOP/s (1 core)", limits.peak_flops_one_core),
        ("peak FLOP/s (all cores)", limits.peak_flops_all_cores),
        ("copy bandwidth (1 thread)", limits.copy_bandwidth_one_thread),
        ("copy bandwidth (all threads)", limits.copy_bandwidth_all_threads),
        ("triad bandwidth (1 thread)", limits.triad_bandwidth_one_thread),
        ("triad bandwidth (all threads)", limits.triad_bandwidth_all_threads),
    ] {
        ensure!(v.is_finite() && v > 0.0, "probe measured an implausible {name}: {v}");
    }
    for level in &limits.levels {
        for (name, v) in level.figures() {
            ensure!(
                v.is_finite() && v > 0.0,
                "probe measured an implausible {} {name} bandwidth: {v}",
                level.level
            );
        }
    }
    Ok(limits)
}

impl MachineLimits {
    /// What is known of the load the probe ran under.
    pub fn load_state(&self) -> LoadState {
        match &self.load {
            None => LoadState::Unknown,
            Some(ProbeLoad { disturbed: Some(share), .. }) => LoadState::Disturbed(*share),
            Some(_) => LoadState::Clean,
        }
    }

    /// Whether these figures may be cached: a disturbed probe's figures
    /// read low, and every later "% of peak", roofline class and target
    /// would inherit them. A probe of unknown load is cached (on a platform
    /// that cannot tell, it could never be otherwise).
    pub fn cacheable(&self) -> bool {
        !matches!(self.load_state(), LoadState::Disturbed(_))
    }

    /// The load in words, for `sysinfo` and the results table.
    pub fn load_summary(&self) -> String {
        let Some(l) = &self.load else {
            return "unknown (not recorded: cached by an older tfbench, or the platform does not tell)"
                .into();
        };
        let cores = |ns: f64| if l.wall_ns > 0.0 { ns / l.wall_ns } else { 0.0 };
        let injected =
            l.injected.as_ref().map_or(String::new(), |v| format!(", injected by the test hook ({v})"));
        let figures = format!(
            "other processes used {:.2} cores, {:.2} stolen, over {:.1} s on {} CPUs with {} probe threads{injected}",
            cores(l.others_ns),
            cores(l.steal_ns),
            l.wall_ns / 1e9,
            l.cpus,
            l.threads
        );
        match l.disturbed {
            Some(share) => {
                format!("DISTURBED: other work took {:.0}% of a core ({figures}); not cached", share * 100.0)
            }
            None => format!("clean ({figures})"),
        }
    }

    /// The load in a few words, for the results table's machine-limits line.
    pub fn load_brief(&self) -> String {
        match self.load_state() {
            LoadState::Unknown => "unknown".into(),
            LoadState::Clean => "clean".into(),
            LoadState::Disturbed(share) => {
                format!("DISTURBED, other work took {:.0}% of a core, not cached", share * 100.0)
            }
        }
    }

    /// The note for a result whose "% of peak" or roofline class comes
    /// from these figures, when the probe was disturbed; `None` otherwise.
    pub fn disturbed_note(&self) -> Option<String> {
        let LoadState::Disturbed(share) = self.load_state() else { return None };
        Some(format!(
            "probe disturbed (other work took {:.0}% of a core; not cached): % of peak reads high, roofline class uncertain",
            share * 100.0
        ))
    }

    /// Signs that the probe ran on a busy machine, as sentences for the
    /// user: with several threads the all-thread figures should exceed the
    /// one-thread ones (by at least 1.2x for FMA, whose cores do not share
    /// an execution unit), so a smaller ratio means other work took the
    /// cores, and every later "% of peak" would be inflated. Empty when the
    /// figures look consistent.
    pub fn suspicions(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.threads < 2 {
            return out;
        }
        let fma = self.peak_flops_all_cores / self.peak_flops_one_core;
        if fma < 1.2 {
            out.push(format!(
                "the {}-thread FMA peak is only {fma:.2}x the one-core peak: other work was probably running",
                self.threads
            ));
        }
        let triad = self.triad_bandwidth_all_threads / self.triad_bandwidth_one_thread;
        if triad < 0.9 {
            out.push(format!(
                "the {}-thread triad bandwidth is {triad:.2}x the one-thread figure: other work was probably running",
                self.threads
            ));
        }
        out
    }
}

/// One warning line for stderr when [`MachineLimits::suspicions`] finds
/// any, with the load average where readable; `None` otherwise.
pub fn busy_warning(limits: &MachineLimits) -> Option<String> {
    let found = limits.suspicions();
    if found.is_empty() {
        return None;
    }
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(|x| format!(" (load average {x})")))
        .unwrap_or_default();
    Some(format!(
        "warning: the probe looks disturbed{load}: {}. \"% of peak\" figures will read high; re-run `tfbench sysinfo --probe` on an idle machine.",
        found.join("; ")
    ))
}

/// Whether a cached probe should be taken again before it is used: it has
/// no per-level bandwidths (cached by a tfbench before the cache-aware
/// roofline), or its load is unknown (cached by an older tfbench) and the
/// load can now be read (`load_readable`), so a new probe would say whether
/// it is clean. Where the load cannot be read, re-probing for it would
/// never end.
pub fn needs_reprobe(cached: &MachineLimits, load_readable: bool) -> bool {
    cached.levels.is_empty() || (load_readable && cached.load_state() == LoadState::Unknown)
}

/// What [`settle`] found: the figures to use and how many tries it took.
#[derive(Debug, Clone)]
pub struct Settled {
    /// The first try that was not disturbed, or, when every try was, the
    /// least disturbed one ([`MachineLimits::cacheable`] then says no).
    pub limits: MachineLimits,
    /// Tries taken.
    pub tries: u32,
}

/// Takes a probe up to `max_tries` times (at least once) until one was not
/// disturbed, pausing `pause` between tries. `attempt(k)` takes try `k`
/// (1-based) with its load recorded; `disturbed(k, share)` hears of each
/// disturbed try that is followed by another. An error of any try ends it.
pub fn settle(
    max_tries: u32,
    pause: Duration,
    mut attempt: impl FnMut(u32) -> Result<MachineLimits>,
    mut disturbed: impl FnMut(u32, f64),
) -> Result<Settled> {
    let max_tries = max_tries.max(1);
    let mut best: Option<(f64, MachineLimits)> = None;
    for k in 1..=max_tries {
        let limits = attempt(k)?;
        let LoadState::Disturbed(share) = limits.load_state() else {
            return Ok(Settled { limits, tries: k });
        };
        if best.as_ref().is_none_or(|(b, _)| share < *b) {
            best = Some((share, limits));
        }
        if k < max_tries {
            disturbed(k, share);
            std::thread::sleep(pause);
        }
    }
    let (_, limits) = best.context("no probe try was taken")?;
    Ok(Settled { limits, tries: max_tries })
}

/// What [`run_gated`] returns: each job's result, in order, and the wall time
/// from the earliest start to the latest finish.
struct GatedRun<T> {
    results: Vec<T>,
    wall: Duration,
}

/// Runs each job on its own thread, all released together once every thread
/// exists, so thread start-up is not timed and the jobs overlap.
fn run_gated<T: Send, F: FnOnce() -> T + Send>(jobs: Vec<F>) -> Result<GatedRun<T>> {
    const WAIT: u8 = 0;
    const GO: u8 = 1;
    const ABORT: u8 = 2;
    // A spin gate rather than std's Barrier: if spawning a later thread fails,
    // a Barrier would leave the earlier ones waiting forever.
    let gate = AtomicU8::new(WAIT);
    let gate = &gate;
    std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(jobs.len());
        for (k, job) in jobs.into_iter().enumerate() {
            let spawned = std::thread::Builder::new().name(format!("tfbench-probe-{k}")).spawn_scoped(
                scope,
                move || loop {
                    match gate.load(Ordering::Acquire) {
                        WAIT => std::thread::yield_now(),
                        GO => {
                            let start = Instant::now();
                            let result = job();
                            return Some((start, Instant::now(), result));
                        }
                        _ => return None,
                    }
                },
            );
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    gate.store(ABORT, Ordering::Release);
                    return Err(e).context("spawning a probe thread");
                }
            }
        }
        gate.store(GO, Ordering::Release);
        let mut results = Vec::with_capacity(handles.len());
        let (mut first, mut last): (Option<Instant>, Option<Instant>) = (None, None);
        // Every handle is joined before reporting a panic: the scope itself
        // panics if it has to join a panicked thread we left behind.
        let joined: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        for outcome in joined {
            let Ok(Some((start, end, result))) = outcome else { bail!("a probe thread panicked") };
            first = Some(first.map_or(start, |f| f.min(start)));
            last = Some(last.map_or(end, |l| l.max(end)));
            results.push(result);
        }
        let wall = match (first, last) {
            (Some(f), Some(l)) => l.duration_since(f),
            _ => Duration::ZERO,
        };
        // A wall time of zero would turn into an infinite rate.
        Ok(GatedRun { results, wall: wall.max(Duration::from_nanos(1)) })
    })
}

/// The current time, RFC 3339 in UTC with seconds precision
/// (`2023-11-14T22:13:20Z`).
pub fn now_rfc3339() -> String {
    let secs = match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    };
    rfc3339_from_unix(secs)
}

/// Seconds since the Unix epoch as RFC 3339 UTC.
fn rfc3339_from_unix(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01,
/// after Howard Hinnant's `civil_from_days`: shift to eras of 400 years that
/// start on 1 March, so the leap day is the last day of its year.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March = 0
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests;
