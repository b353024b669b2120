//! STREAM-style memory bandwidth: read (`sum b`), copy (`c = b`) and triad (`a = b + s*c`)
//! over f32 arrays far larger than the last-level cache.
//!
//! Bytes are counted the STREAM way: every element read or written once
//! (copy 2 x 4 bytes, triad 3 x 4 bytes per element), without the extra read
//! that write-allocate caches do, so figures compare with published STREAM.
//!
//! Copy is `copy_from_slice`, i.e. the C library's memcpy, which is what
//! tensor copies in the benchmarks run (and what the compiler turns a copy
//! loop into anyway); for blocks this large it may bypass the cache with
//! streaming stores. Triad is a plain loop with ordinary stores, like the
//! element-wise kernels, so it is the ceiling for those.

use super::{Isa, run_gated};
use anyhow::{Context, Result, ensure};
use std::mem::MaybeUninit;

/// Values stay small integers, so every result is exact and checkable.
const PATTERN: usize = 1024;
const BYTES: f64 = std::mem::size_of::<f32>() as f64;

/// Best bandwidths found, bytes/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Bandwidth {
    pub read_one: f64,
    pub read_all: f64,
    pub copy_one: f64,
    pub copy_all: f64,
    pub triad_one: f64,
    pub triad_all: f64,
}

/// Elements per thread's share, rounded to whole 64-byte lines so neighbouring
/// threads do not write the same cache line.
fn chunk_len(len: usize, threads: usize) -> usize {
    len.div_ceil(threads.max(1)).next_multiple_of(16).max(16)
}

/// Allocates `len` elements and writes them from `threads` threads, so pages
/// are first touched (and placed, on NUMA machines) by the threads that use
/// them. Fails instead of aborting when the memory is not there.
fn alloc_init(len: usize, threads: usize, value: impl Fn(usize) -> f32 + Sync) -> Result<Vec<f32>> {
    let mut v: Vec<f32> = Vec::new();
    v.try_reserve_exact(len).with_context(|| format!("allocating {} MiB for STREAM", (len * 4) >> 20))?;
    let chunk = chunk_len(len, threads);
    let value = &value;
    let jobs = v.spare_capacity_mut()[..len]
        .chunks_mut(chunk)
        .enumerate()
        .map(|(k, part): (usize, &mut [MaybeUninit<f32>])| {
            move || {
                for (i, x) in part.iter_mut().enumerate() {
                    x.write(value(k * chunk + i));
                }
            }
        })
        .collect();
    run_gated(jobs)?;
    // SAFETY: run_gated returned Ok, so every job ran to completion, and the
    // chunks cover all `len` reserved elements: each one was written above.
    unsafe { v.set_len(len) };
    Ok(v)
}

fn triad_body(a: &mut [f32], b: &[f32], c: &[f32], s: f32) {
    for ((x, y), z) in a.iter_mut().zip(b).zip(c) {
        *x = y + s * z;
    }
}

// Wider vectors issue fewer loads and stores per byte, which lifts the
// bandwidth one core can reach; the body is inlined into each variant.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn triad_avx512(a: &mut [f32], b: &[f32], c: &[f32], s: f32) {
    triad_body(a, b, c, s)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn triad_avx2(a: &mut [f32], b: &[f32], c: &[f32], s: f32) {
    triad_body(a, b, c, s)
}

fn triad(isa: Isa, a: &mut [f32], b: &[f32], c: &[f32], s: f32) {
    match isa {
        // SAFETY: Isa::Avx512 / Isa::Avx2 exist only after runtime detection.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { triad_avx512(a, b, c, s) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { triad_avx2(a, b, c, s) },
        Isa::Portable => triad_body(a, b, c, s),
    }
}

fn pattern(i: usize) -> f32 {
    (i % PATTERN) as f32
}

/// Checks thread-chunk edges and a spread of interior points: a wrongly split
/// range or a skipped pass leaves the -1 sentinels or a stale scalar behind.
fn verify(a: &[f32], b: &[f32], c: &[f32], scalar: f32, threads: usize) -> Result<()> {
    let len = a.len();
    let chunk = chunk_len(len, threads);
    let edges = (0..len).step_by(chunk).flat_map(|s| [s, (s + chunk).min(len) - 1]);
    let spread = (0..64).map(|k| k * len / 64);
    for i in edges.chain(spread).filter(|&i| i < len) {
        let want = pattern(i);
        ensure!(b[i] == want && c[i] == want, "STREAM copy wrote {} at element {i}, expected {want}", c[i]);
        let want = want + scalar * want;
        ensure!(a[i] == want, "STREAM triad wrote {} at element {i}, expected {want}", a[i]);
    }
    Ok(())
}

/// Best-of-`reps` copy and triad bandwidth on one thread and on `threads`
/// threads, over three arrays of `len` f32 each, allocated once.
pub(super) fn bandwidth(isa: Isa, threads: usize, len: usize, reps: usize) -> Result<Bandwidth> {
    ensure!(len > 0, "STREAM arrays must not be empty");
    let mut a = alloc_init(len, threads, |_| -1.0)?;
    let b = alloc_init(len, threads, pattern)?;
    let mut c = alloc_init(len, threads, |_| -1.0)?;
    let (read_one, read_all) = super::levels::dram_read(isa, &b, threads, reps)?;
    let mut best =
        Bandwidth { read_one, read_all, copy_one: 0.0, copy_all: 0.0, triad_one: 0.0, triad_all: 0.0 };
    let thread_counts: &[usize] = if threads == 1 { &[1] } else { &[1, threads] };
    let mut pass = 0u32;
    for _ in 0..reps.max(1) {
        for &n in thread_counts {
            // A new scalar each pass, so verify() can tell this pass's
            // results from the previous one's.
            pass += 1;
            let scalar = (pass % 4 + 1) as f32;
            let chunk = chunk_len(len, n);
            let jobs =
                c.chunks_mut(chunk).zip(b.chunks(chunk)).map(|(c, b)| move || c.copy_from_slice(b)).collect();
            let copy_bw = 2.0 * BYTES * len as f64 / run_gated(jobs)?.wall.as_secs_f64();
            let jobs = a
                .chunks_mut(chunk)
                .zip(b.chunks(chunk))
                .zip(c.chunks(chunk))
                .map(|((a, b), c)| move || triad(isa, a, b, c, scalar))
                .collect();
            let triad_bw = 3.0 * BYTES * len as f64 / run_gated(jobs)?.wall.as_secs_f64();
            verify(&a, &b, &c, scalar, n)?;
            let (copy_best, triad_best) = if n == 1 {
                (&mut best.copy_one, &mut best.triad_one)
            } else {
                (&mut best.copy_all, &mut best.triad_all)
            };
            *copy_best = copy_best.max(copy_bw);
            *triad_best = triad_best.max(triad_bw);
        }
    }
    if threads == 1 {
        best.copy_all = best.copy_one;
        best.triad_all = best.triad_one;
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_and_align() {
        for (len, threads) in [(1, 1), (1000, 3), (1 << 20, 2), (17, 8)] {
            let chunk = chunk_len(len, threads);
            assert_eq!(chunk % 16, 0);
            assert!(chunk * threads >= len);
        }
    }

    #[test]
    fn kernels_compute_stream_results() {
        for threads in [1, 3] {
            let bw = bandwidth(Isa::detect(), threads, 10_007, 2).expect("small STREAM run");
            for v in [bw.read_one, bw.read_all, bw.copy_one, bw.copy_all, bw.triad_one, bw.triad_all] {
                assert!(v.is_finite() && v > 0.0);
            }
        }
    }

    #[test]
    fn verify_catches_a_missed_element() {
        let len = 4096;
        let b: Vec<f32> = (0..len).map(pattern).collect();
        let c = b.clone();
        let mut a: Vec<f32> = b.iter().map(|x| x * 4.0).collect();
        assert!(verify(&a, &b, &c, 3.0, 2).is_ok());
        assert!(verify(&a, &b, &c, 2.0, 2).is_err(), "stale scalar");
        a[len / 2] = -1.0;
        assert!(verify(&a, &b, &c, 3.0, 2).is_err());
    }
}
