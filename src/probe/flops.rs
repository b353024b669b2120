//! Peak f32 FMA throughput: long chains of independent fused multiply-adds on
//! registers only, so neither memory nor dependencies limit the rate.

use super::{Isa, run_gated};
use anyhow::{Result, ensure};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Independent AVX-512 accumulators: FMA latency (4 cycles) x 2 FMA ports
/// needs at least 8 in flight; 16 leaves headroom and still fits the 32 zmm
/// registers next to the two constants.
#[cfg(target_arch = "x86_64")]
const ACC_AVX512: usize = 16;
/// AVX2 has only 16 ymm registers: 12 accumulators + 2 constants fit.
#[cfg(target_arch = "x86_64")]
const ACC_AVX2: usize = 12;
/// Portable accumulators, in f32 elements (the compiler vectorises them).
const ACC_PORTABLE: usize = 32;

/// f32 elements updated per kernel iteration.
pub(super) fn elements_per_iter(isa: Isa) -> u64 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => (ACC_AVX512 * 16) as u64,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => (ACC_AVX2 * 8) as u64,
        Isa::Portable => ACC_PORTABLE as u64,
    }
}

/// Floating-point operations per kernel iteration: an FMA counts as two, as
/// does the unfused multiply and add of the portable kernel.
pub(super) fn flops_per_iter(isa: Isa) -> u64 {
    2 * elements_per_iter(isa)
}

/// Runs `iters` iterations of `acc = acc * mul + add` on every accumulator
/// (all starting at 0) and returns the sum of all accumulator elements, so the
/// caller can check the work against the closed form.
pub(super) fn fma_kernel(isa: Isa, iters: u64, mul: f32, add: f32) -> f32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` is only constructed after
        // `is_x86_feature_detected!("avx512f")` returned true.
        Isa::Avx512 => unsafe { fma_avx512(iters, mul, add) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is only constructed after avx2 and fma were detected.
        Isa::Avx2 => unsafe { fma_avx2(iters, mul, add) },
        Isa::Portable => fma_portable(iters, mul, add),
    }
}

#[cfg(target_arch = "x86_64")]
// The MSRV predates these intrinsics; build.rs enables this code (via the
// cfg above) only on compilers that have them.
#[allow(clippy::incompatible_msrv)]
#[target_feature(enable = "avx512f")]
unsafe fn fma_avx512(iters: u64, mul: f32, add: f32) -> f32 {
    use std::arch::x86_64::*;
    let (m, a) = (_mm512_set1_ps(mul), _mm512_set1_ps(add));
    let mut acc = [_mm512_setzero_ps(); ACC_AVX512];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm512_fmadd_ps(*x, m, a);
        }
    }
    let total = acc.iter().fold(_mm512_setzero_ps(), |t, &x| _mm512_add_ps(t, x));
    _mm512_reduce_add_ps(total)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_avx2(iters: u64, mul: f32, add: f32) -> f32 {
    use std::arch::x86_64::*;
    let (m, a) = (_mm256_set1_ps(mul), _mm256_set1_ps(add));
    let mut acc = [_mm256_setzero_ps(); ACC_AVX2];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, m, a);
        }
    }
    let total = acc.iter().fold(_mm256_setzero_ps(), |t, &x| _mm256_add_ps(t, x));
    let mut lanes = [0.0f32; 8];
    // SAFETY: `lanes` holds exactly 8 f32, the width of one unaligned store.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), total) };
    lanes.iter().sum()
}

/// Unfused multiply and add: `f32::mul_add` would be a slow libm call on
/// targets without hardware FMA, and this path is only a fallback.
fn fma_portable(iters: u64, mul: f32, add: f32) -> f32 {
    let mut acc = [0.0f32; ACC_PORTABLE];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = *x * mul + add;
        }
    }
    acc.iter().sum()
}

/// One kernel run on an opaque input, checked: returns the FLOPs done.
fn checked_run(isa: Isa, iters: u64) -> Result<u64> {
    // Opaque constants keep the compiler from folding the FMA chain; the
    // accumulators converge to add / (1 - mul) = 1, never overflowing or
    // going subnormal however long the run.
    let (mul, add) = (black_box(0.999_999_f32), black_box(1e-6_f32));
    let sum = black_box(fma_kernel(isa, black_box(iters), mul, add));
    let limit = elements_per_iter(isa) as f32 * 1.001;
    ensure!(sum.is_finite() && sum >= 0.0 && sum <= limit, "FMA kernel produced an implausible sum {sum}");
    Ok(iters * flops_per_iter(isa))
}

/// Iterations that take about `target` on one thread.
fn calibrate(isa: Isa, target: Duration) -> Result<u64> {
    let mut iters: u64 = 1 << 10;
    loop {
        let start = Instant::now();
        checked_run(isa, iters)?;
        let elapsed = start.elapsed();
        // 1/8 of the target is long enough to extrapolate from, and all the
        // doubling costs about a quarter of one measurement.
        if elapsed >= target / 8 || iters >= 1 << 40 {
            let scale = target.as_secs_f64() / elapsed.as_secs_f64().max(1e-9);
            return Ok(((iters as f64 * scale) as u64).max(1));
        }
        iters *= 2;
    }
}

/// Peak FLOP/s on one thread and, summed, on `threads` concurrent threads
/// (best of `reps` runs of about `duration` each).
pub(super) fn peak(isa: Isa, threads: usize, duration: Duration, reps: usize) -> Result<(f64, f64)> {
    let iters = calibrate(isa, duration)?;
    let mut best = [0.0f64; 2];
    let thread_counts: &[(usize, usize)] = if threads == 1 { &[(0, 1)] } else { &[(0, 1), (1, threads)] };
    for &(slot, n) in thread_counts {
        for _ in 0..reps.max(1) {
            let runs = run_gated((0..n).map(|_| move || checked_run(isa, iters)).collect())?;
            let mut flops = 0u64;
            for r in runs.results {
                flops += r?;
            }
            // Total work over the common wall-clock window equals the sum of
            // per-thread rates when the threads really overlap, and does not
            // overstate it when the OS time-shares fewer cores.
            best[slot] = best[slot].max(flops as f64 / runs.wall.as_secs_f64());
        }
    }
    if threads == 1 {
        best[1] = best[0];
    }
    Ok((best[0], best[1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn available_isas() -> Vec<Isa> {
        #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
        let mut isas = vec![Isa::Portable];
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            isas.push(Isa::Avx2);
        }
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx512f") {
            isas.push(Isa::Avx512);
        }
        isas
    }

    #[test]
    fn kernels_match_closed_form() {
        for isa in available_isas() {
            let n = elements_per_iter(isa) as f32;
            // x_k = k when mul = add = 1: exact in f32 for these sizes.
            assert_eq!(fma_kernel(isa, 1000, 1.0, 1.0), n * 1000.0, "{isa:?}");
            // x_k = 2 (1 - 2^-k) when mul = 1/2: checks the multiply is used.
            let x10 = 2.0 * (1.0 - 0.5f32.powi(10));
            assert_eq!(fma_kernel(isa, 10, 0.5, 1.0), n * x10, "{isa:?}");
            assert_eq!(fma_kernel(isa, 0, 0.5, 1.0), 0.0, "{isa:?}");
        }
    }

    #[test]
    fn flop_counts_per_isa() {
        assert_eq!(flops_per_iter(Isa::Portable), 64);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(flops_per_iter(Isa::Avx2), 192);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(flops_per_iter(Isa::Avx512), 512);
    }

    #[test]
    fn checked_run_counts_flops() {
        assert_eq!(checked_run(Isa::Portable, 100).ok(), Some(100 * 64));
    }
}
