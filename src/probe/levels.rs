//! Bandwidth per cache level, for the cache-aware roofline (Ilic, Pratas
//! and Sousa, IEEE CAL 2014): read (`sum x`), copy (`c = b`) and triad
//! (`a = b + s*c`) over working sets sized to sit in L1, L2 or L3, on one
//! thread and on all the probe's threads. DRAM is the STREAM measurement of
//! `stream.rs`, over arrays far larger than the last-level cache.
//!
//! Working sets follow the memory suite's (`suites::memory::bandwidth`):
//! half of each thread's private L1 or L2, a quarter of the shared L3 (a
//! VM's other tenants share it), so a case sized for a level is measured
//! against the same level here. Each thread owns its arrays, allocated and
//! first touched before the gate opens, and sweeps them many times; bytes
//! are counted the STREAM way (every element read or written once).

use super::{Isa, run_gated};
use crate::env::Environment;
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use std::hint::black_box;

/// Lanes of the read kernel's accumulator: 8 AVX-512 registers, enough
/// independent add chains (4-cycle latency, 2 ports) for two loads a cycle.
const LANES: usize = 128;
const BYTES: f64 = std::mem::size_of::<f32>() as f64;
/// Values stay small integers, so sums are exact and checkable.
const PATTERN: usize = 16;

/// Cache sizes assumed where sysfs does not tell: small enough that a
/// working set sized from them sits in the cache of any x86-64 or ARM core
/// of the last decade.
const FALLBACK: [u64; 3] = [32 << 10, 256 << 10, 4 << 20];

/// One memory level's measured bandwidths, bytes/s (the cache-aware
/// roofline's slanted roofs).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LevelBandwidth {
    /// `L1`, `L2`, `L3` or `DRAM`.
    pub level: String,
    /// The level's size: per core for `L1`/`L2` ([`Self::per_core`]), the
    /// whole shared cache for `L3`; `None` for `DRAM` (no limit).
    pub capacity_bytes: Option<u64>,
    /// Whether every core has its own (so `n` threads hold `n` times it).
    pub per_core: bool,
    /// `sysfs` when the size was read from the kernel, `assumed` when it
    /// fell back to a small default.
    pub capacity_source: String,
    /// The working set each measurement covered, all arrays of one thread.
    pub working_set_bytes: u64,
    /// Read-only (a sum) on one thread.
    pub read_one_thread: f64,
    /// Copy on one thread.
    pub copy_one_thread: f64,
    /// Triad on one thread.
    pub triad_one_thread: f64,
    /// Read-only on all the probe's threads.
    pub read_all_threads: f64,
    /// Copy on all the probe's threads.
    pub copy_all_threads: f64,
    /// Triad on all the probe's threads.
    pub triad_all_threads: f64,
}

impl LevelBandwidth {
    /// The highest of the three kernels on one thread: the roof, which no
    /// access pattern of this level is expected to pass.
    pub fn best_one_thread(&self) -> f64 {
        self.read_one_thread.max(self.copy_one_thread).max(self.triad_one_thread)
    }

    /// The highest of the three kernels on all the probe's threads.
    pub fn best_all_threads(&self) -> f64 {
        self.read_all_threads.max(self.copy_all_threads).max(self.triad_all_threads)
    }

    /// Bytes this level holds for `threads` threads (per-core levels add
    /// up); `None` for DRAM.
    pub fn capacity_for(&self, threads: usize) -> Option<u64> {
        let c = self.capacity_bytes?;
        Some(if self.per_core { c.saturating_mul(threads.max(1) as u64) } else { c })
    }

    /// Every figure, named, for the probe's plausibility check.
    pub(super) fn figures(&self) -> [(&'static str, f64); 6] {
        [
            ("read (1 thread)", self.read_one_thread),
            ("copy (1 thread)", self.copy_one_thread),
            ("triad (1 thread)", self.triad_one_thread),
            ("read (all threads)", self.read_all_threads),
            ("copy (all threads)", self.copy_all_threads),
            ("triad (all threads)", self.triad_all_threads),
        ]
    }
}

/// The cache sizes the probe sizes its working sets by: L1d and L2 per
/// core, L3 whole, and where they came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct CacheSizes {
    pub l1: u64,
    pub l2: u64,
    pub l3: u64,
    pub l1_sysfs: bool,
    pub l2_sysfs: bool,
    pub l3_sysfs: bool,
}

impl CacheSizes {
    /// From sysfs (as `tfbench sysinfo` shows them), each missing or zero
    /// size replaced by [`FALLBACK`].
    pub fn of(env: &Environment) -> Self {
        Self::from_parts(env.l1d_cache_bytes, env.l2_cache_bytes, env.l3_cache_bytes)
    }

    pub fn from_parts(l1: Option<u64>, l2: Option<u64>, l3: Option<u64>) -> Self {
        let pick =
            |v: Option<u64>, k: usize| v.filter(|&b| b > 0).map_or((FALLBACK[k], false), |b| (b, true));
        let ((l1, l1_sysfs), (l2, l2_sysfs), (l3, l3_sysfs)) = (pick(l1, 0), pick(l2, 1), pick(l3, 2));
        Self { l1, l2, l3, l1_sysfs, l2_sysfs, l3_sysfs }
    }
}

/// The read kernel: a sum into [`LANES`] independent accumulators, so the
/// loads, not the add latency, set the pace.
#[inline(always)]
fn read_body(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

#[inline(always)]
fn triad_body(a: &mut [f32], b: &[f32], c: &[f32], s: f32) {
    for ((x, y), z) in a.iter_mut().zip(b).zip(c) {
        *x = y + s * z;
    }
}

/// Which kernel a measurement runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Kernel {
    Read,
    Copy,
    Triad,
}

impl Kernel {
    /// Arrays the kernel sweeps (each element read or written once).
    fn arrays(self) -> usize {
        match self {
            Self::Read => 1,
            Self::Copy => 2,
            Self::Triad => 3,
        }
    }
}

/// One thread's arrays for one kernel.
struct Arrays {
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

fn pattern(i: usize) -> f32 {
    (i % PATTERN) as f32
}

/// Runs `passes` sweeps of `k` over `arr` and returns the last sweep's
/// checksum (the read's sum; otherwise 0), so the work cannot be dropped.
#[inline(always)]
fn sweep_body(k: Kernel, arr: &mut Arrays, passes: u64, s: f32) -> f32 {
    let mut last = 0.0;
    for _ in 0..passes {
        match k {
            Kernel::Read => last = read_body(black_box(&arr.b)),
            Kernel::Copy => black_box(&mut arr.c).copy_from_slice(black_box(&arr.b)),
            Kernel::Triad => triad_body(black_box(&mut arr.a), black_box(&arr.b), black_box(&arr.c), s),
        }
    }
    last
}

// Wider vectors issue fewer loads and stores per byte, which is what limits
// L1 and L2 bandwidth; the body is inlined into each variant.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sweep_avx512(k: Kernel, arr: &mut Arrays, passes: u64, s: f32) -> f32 {
    sweep_body(k, arr, passes, s)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sweep_avx2(k: Kernel, arr: &mut Arrays, passes: u64, s: f32) -> f32 {
    sweep_body(k, arr, passes, s)
}

fn sweep(isa: Isa, k: Kernel, arr: &mut Arrays, passes: u64, s: f32) -> f32 {
    match isa {
        // SAFETY: Isa::Avx512 / Isa::Avx2 exist only after runtime detection.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { sweep_avx512(k, arr, passes, s) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { sweep_avx2(k, arr, passes, s) },
        Isa::Portable => sweep_body(k, arr, passes, s),
    }
}

/// Elements per array for a working set of `ws` bytes over `arrays`
/// arrays: whole accumulator rows, at least one.
fn elements(ws: u64, arrays: usize) -> usize {
    let n = (ws as usize / 4 / arrays) / LANES * LANES;
    n.max(LANES)
}

/// Checks one thread's arrays after a measurement with scalar `s`: every
/// element of copy and triad, and the read's exact sum.
fn verify(k: Kernel, arr: &Arrays, sum: f32, s: f32) -> Result<()> {
    match k {
        Kernel::Read => {
            let want: f64 = arr.b.iter().map(|&x| x as f64).sum();
            ensure!(sum as f64 == want, "level read kernel summed {sum}, expected {want}");
        }
        Kernel::Copy => {
            ensure!(arr.c == arr.b, "level copy kernel left the destination unlike its source");
        }
        Kernel::Triad => {
            for (i, ((&a, &b), &c)) in arr.a.iter().zip(&arr.b).zip(&arr.c).enumerate() {
                ensure!(a == b + s * c, "level triad wrote {a} at element {i}, expected {}", b + s * c);
            }
        }
    }
    Ok(())
}

/// How one level is measured.
#[derive(Debug, Clone, Copy)]
pub(super) struct LevelRun {
    /// Working set of one thread when all threads run, bytes.
    pub ws_all: u64,
    /// Working set of the single thread, bytes.
    pub ws_one: u64,
    /// Bytes each thread moves per measurement (sets the sweep count).
    pub budget: u64,
    /// Measurements per kernel and thread count; the best is kept.
    pub reps: usize,
}

/// Best bandwidth of kernel `k` on `n` threads, bytes/s.
fn measure_kernel(isa: Isa, k: Kernel, n: usize, ws: u64, run: &LevelRun) -> Result<f64> {
    let len = elements(ws, k.arrays());
    let mut sets: Vec<Arrays> = (0..n)
        .map(|_| Arrays {
            a: vec![-1.0; if k == Kernel::Triad { len } else { 0 }],
            b: (0..len).map(pattern).collect(),
            c: match k {
                Kernel::Read => Vec::new(),
                Kernel::Copy => vec![-1.0; len],
                Kernel::Triad => (0..len).map(|i| pattern(i * 7)).collect(),
            },
        })
        .collect();
    let per_pass = (k.arrays() * len) as f64 * BYTES;
    let passes = (run.budget as f64 / per_pass).ceil().max(1.0) as u64;
    let mut best = 0.0f64;
    for rep in 0..run.reps.max(1) {
        let s = (rep % 3 + 2) as f32;
        if k == Kernel::Copy {
            // A fresh destination each time, so verify() sees this run's copy.
            sets.iter_mut().for_each(|set| set.c.fill(-1.0));
        }
        let jobs = sets.iter_mut().map(|set| move || sweep(isa, k, set, passes, s)).collect();
        let done = run_gated(jobs)?;
        for (set, sum) in sets.iter().zip(&done.results) {
            verify(k, set, *sum, s)?;
        }
        best = best.max(n as f64 * passes as f64 * per_pass / done.wall.as_secs_f64());
    }
    Ok(best)
}

/// Measures one cache level with all three kernels on one and `threads`
/// threads.
pub(super) fn measure_level(
    isa: Isa,
    name: &str,
    (capacity, per_core, sysfs): (u64, bool, bool),
    threads: usize,
    run: &LevelRun,
) -> Result<LevelBandwidth> {
    let mut figures = [0.0f64; 6];
    for (slot, k) in [Kernel::Read, Kernel::Copy, Kernel::Triad].into_iter().enumerate() {
        figures[slot] = measure_kernel(isa, k, 1, run.ws_one, run)?;
        figures[slot + 3] =
            if threads == 1 { figures[slot] } else { measure_kernel(isa, k, threads, run.ws_all, run)? };
    }
    Ok(LevelBandwidth {
        level: name.to_string(),
        capacity_bytes: Some(capacity),
        per_core,
        capacity_source: if sysfs { "sysfs" } else { "assumed" }.to_string(),
        working_set_bytes: run.ws_all,
        read_one_thread: figures[0],
        copy_one_thread: figures[1],
        triad_one_thread: figures[2],
        read_all_threads: figures[3],
        copy_all_threads: figures[4],
        triad_all_threads: figures[5],
    })
}

/// L1, L2 and L3, measured with working sets of half the private caches
/// and a quarter of the shared one (per thread: that quarter split).
pub(super) fn measure_caches(
    isa: Isa,
    sizes: &CacheSizes,
    threads: usize,
    budget: u64,
    reps: usize,
) -> Result<Vec<LevelBandwidth>> {
    let t = threads.max(1) as u64;
    let plan = [
        ("L1", (sizes.l1, true, sizes.l1_sysfs), sizes.l1 / 2, sizes.l1 / 2),
        ("L2", (sizes.l2, true, sizes.l2_sysfs), sizes.l2 / 2, sizes.l2 / 2),
        ("L3", (sizes.l3, false, sizes.l3_sysfs), sizes.l3 / 4 / t, sizes.l3 / 4),
    ];
    plan.into_iter()
        .map(|(name, cap, ws_all, ws_one)| {
            measure_level(isa, name, cap, threads, &LevelRun { ws_all, ws_one, budget, reps })
        })
        .collect()
}

/// Read-only DRAM bandwidth over `b` (STREAM-sized), on one thread and on
/// `threads`, best of `reps`: the DRAM level's third kernel.
pub(super) fn dram_read(isa: Isa, b: &[f32], threads: usize, reps: usize) -> Result<(f64, f64)> {
    let want: f64 = b.iter().map(|&x| x as f64).sum();
    let mut best = [0.0f64; 2];
    let counts: &[(usize, usize)] = if threads == 1 { &[(0, 1)] } else { &[(0, 1), (1, threads)] };
    for _ in 0..reps.max(1) {
        for &(slot, n) in counts {
            let chunk = b.len().div_ceil(n).next_multiple_of(16).max(16);
            let jobs = b.chunks(chunk).map(|part| move || read_dispatch(isa, part)).collect();
            let done = run_gated(jobs)?;
            let got: f64 = done.results.iter().map(|&s| s as f64).sum();
            // Lanes of a STREAM-sized array sum past 2^24 and round in f32:
            // a 1% band still catches a skipped chunk (a thread's whole share).
            ensure!((got - want).abs() <= want * 1e-2, "DRAM read summed {got}, expected {want}");
            best[slot] = best[slot].max(b.len() as f64 * BYTES / done.wall.as_secs_f64());
        }
    }
    if threads == 1 {
        best[1] = best[0];
    }
    Ok((best[0], best[1]))
}

fn read_dispatch(isa: Isa, x: &[f32]) -> f32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Isa::Avx512 exists only after runtime detection.
        Isa::Avx512 => unsafe { read_avx512(x) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Isa::Avx2 exists only after runtime detection.
        Isa::Avx2 => unsafe { read_avx2(x) },
        Isa::Portable => read_body(x),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn read_avx512(x: &[f32]) -> f32 {
    read_body(x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn read_avx2(x: &[f32]) -> f32 {
    read_body(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_fall_back_when_sysfs_is_silent() {
        let s = CacheSizes::from_parts(Some(48 << 10), None, Some(0));
        assert_eq!((s.l1, s.l1_sysfs), (48 << 10, true));
        assert_eq!((s.l2, s.l2_sysfs), (FALLBACK[1], false));
        assert_eq!((s.l3, s.l3_sysfs), (FALLBACK[2], false), "a zero size is not a size");
    }

    #[test]
    fn read_sums_exactly_and_kernels_verify() {
        let x: Vec<f32> = (0..1000).map(pattern).collect();
        let want: f32 = x.iter().sum();
        assert_eq!(read_body(&x), want);
        assert_eq!(read_dispatch(Isa::detect(), &x), want);
        let mut arr = Arrays { a: vec![-1.0; 256], b: (0..256).map(pattern).collect(), c: vec![1.0; 256] };
        sweep(Isa::detect(), Kernel::Triad, &mut arr, 2, 3.0);
        assert!(verify(Kernel::Triad, &arr, 0.0, 3.0).is_ok());
        assert!(verify(Kernel::Triad, &arr, 0.0, 2.0).is_err(), "a stale scalar is caught");
        assert!(verify(Kernel::Copy, &arr, 0.0, 0.0).is_err(), "c was not copied");
    }

    #[test]
    fn levels_measure_positive_figures_and_capacity_scales_per_core() {
        let sizes = CacheSizes::from_parts(Some(32 << 10), Some(256 << 10), Some(1 << 20));
        let levels = measure_caches(Isa::detect(), &sizes, 2, 1 << 20, 1).expect("levels");
        assert_eq!(levels.iter().map(|l| l.level.as_str()).collect::<Vec<_>>(), ["L1", "L2", "L3"]);
        for l in &levels {
            for (name, v) in l.figures() {
                assert!(v.is_finite() && v > 0.0, "{} {name}: {v}", l.level);
            }
        }
        assert_eq!(levels[0].capacity_for(4), Some(128 << 10));
        assert_eq!(levels[2].capacity_for(4), Some(1 << 20), "L3 is shared");
        assert_eq!(levels[2].working_set_bytes, (1 << 20) / 4 / 2);
    }
}
