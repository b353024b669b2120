//! STREAM kernels (copy, scale, add, triad on f64, as McCalpin's STREAM)
//! with working sets sized to sit in L1, L2, L3 or DRAM, on one thread or
//! all of them.
//!
//! Each thread owns one contiguous slice of every array and runs all of an
//! iteration batch's passes over it inside one parallel region, so in-cache
//! sizes measure the cache, not rayon's fork/join. Bytes are counted the
//! STREAM way (each element read or written once; write-allocate traffic
//! not counted), so the figures compare with published STREAM numbers.

use crate::backend::cpu::{Context, install};
use crate::plan::Case;
use crate::suites::common::choice;
use crate::suites::{Throughput, Verification, Workload, skip};
use crate::workload::Metric;
use anyhow::{Result, ensure};
use rayon::prelude::*;
use std::hint::black_box;

/// Valid `kernel` values (the STREAM kernels).
pub(super) const KERNELS: &[&str] = &["copy", "scale", "add", "triad"];
/// Levels a working set can be sized for.
pub(crate) const LEVELS: &[&str] = &["l1", "l2", "l3", "dram"];
const Q: f64 = 3.0;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kernel {
    Copy,
    Scale,
    Add,
    Triad,
}

impl Kernel {
    fn arrays(self) -> usize {
        match self {
            Self::Copy | Self::Scale => 2,
            Self::Add | Self::Triad => 3,
        }
    }
}

#[inline(always)]
fn body(k: Kernel, x: &mut [f64], y: &[f64], z: &[f64]) {
    match k {
        Kernel::Copy => x.copy_from_slice(y),
        Kernel::Scale => x.iter_mut().zip(y).for_each(|(x, &y)| *x = Q * y),
        Kernel::Add => x.iter_mut().zip(y).zip(z).for_each(|((x, &y), &z)| *x = y + z),
        Kernel::Triad => x.iter_mut().zip(y).zip(z).for_each(|((x, &y), &z)| *x = y + Q * z),
    }
}

// Wider vectors mean fewer instructions per byte, which matters in L1/L2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn body_avx512(k: Kernel, x: &mut [f64], y: &[f64], z: &[f64]) {
    body(k, x, y, z)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn body_avx2(k: Kernel, x: &mut [f64], y: &[f64], z: &[f64]) {
    body(k, x, y, z)
}

fn kernel(k: Kernel, x: &mut [f64], y: &[f64], z: &[f64]) {
    #[cfg(target_arch = "x86_64")]
    if crate::isa::has(crate::isa::Feature::Avx512f) {
        // SAFETY: the CPU supports AVX-512F.
        return unsafe { body_avx512(k, x, y, z) };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::isa::has(crate::isa::Feature::Avx2) {
        // SAFETY: the CPU supports AVX2.
        return unsafe { body_avx2(k, x, y, z) };
    }
    body(k, x, y, z)
}

/// Cache sizes from sysfs (what `tfbench sysinfo` shows): L1d, L2 per core, L3.
pub(crate) fn caches() -> (Option<u64>, Option<u64>, Option<u64>) {
    let e = crate::env::Environment::gather();
    (e.l1d_cache_bytes, e.l2_cache_bytes, e.l3_cache_bytes)
}

/// Total working-set bytes (all arrays, all threads) for `level`: half of
/// each thread's private L1 or L2, a quarter of the shared L3 (other tenants
/// share it on a VM), and for DRAM four times the L3 and at least 256 MiB.
pub(crate) fn working_set(level: &str, threads: usize) -> Result<usize> {
    let (l1, l2, l3) = caches();
    let need = |c: Option<u64>, name: &str| {
        c.map(|c| c as usize)
            .ok_or_else(|| skip(format!("the {name} size is not readable from sysfs on this machine")))
    };
    Ok(match level {
        "l1" => need(l1, "L1d")? / 2 * threads,
        "l2" => need(l2, "L2")? / 2 * threads,
        "l3" => need(l3, "L3")? / 4,
        _ => (4 * l3.unwrap_or(64 << 20) as usize).max(256 << 20),
    })
}

struct Stream {
    kernel: Kernel,
    x: Vec<f64>,
    y: Vec<f64>,
    z: Vec<f64>,
    chunk: usize,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
    working_set: usize,
}

pub(crate) fn prepare(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    let kernel = match choice(case, "kernel", KERNELS)? {
        "copy" => Kernel::Copy,
        "scale" => Kernel::Scale,
        "add" => Kernel::Add,
        _ => Kernel::Triad,
    };
    let level = choice(case, "level", LEVELS)?;
    let (pool, threads) = (ctx.pool(), ctx.threads());
    let ws = working_set(level, threads)?;
    let avail = crate::env::Environment::gather().available_memory_bytes.unwrap_or(u64::MAX) as usize;
    if ws > avail / 4 {
        return Err(skip(format!(
            "{} MiB working set needs more than a quarter of the available memory",
            ws >> 20
        )));
    }
    // Elements per array, a multiple of 8 per thread (whole cache lines each).
    let n = (ws / 8 / kernel.arrays()).next_multiple_of(8 * threads).max(8 * threads);
    let chunk = n / threads;
    let init = |f: fn(usize) -> f64| -> Vec<f64> {
        let mut v = vec![0.0; n];
        // First touch by the threads that will use each slice.
        install(pool.as_deref(), || {
            v.par_chunks_mut(chunk)
                .enumerate()
                .for_each(|(k, c)| c.iter_mut().enumerate().for_each(|(i, x)| *x = f(k * chunk + i)))
        });
        v
    };
    let x = init(|_| -1.0);
    let y = init(|i| (i % 1024) as f64);
    let z = init(|i| ((i * 7) % 1024) as f64 * 0.5);
    Ok(Box::new(Stream { kernel, x, y, z, chunk, pool, working_set: ws }))
}

impl Stream {
    fn passes(&mut self, iters: u64) {
        let (k, chunk) = (self.kernel, self.chunk);
        let (x, y, z) = (&mut self.x, &self.y, &self.z);
        install(self.pool.as_deref(), || {
            x.par_chunks_mut(chunk).zip(y.par_chunks(chunk)).zip(z.par_chunks(chunk)).for_each(
                |((x, y), z)| {
                    for _ in 0..iters {
                        kernel(k, black_box(&mut *x), black_box(y), black_box(z));
                    }
                },
            )
        });
    }
}

impl Workload for Stream {
    fn verify(&mut self) -> Result<Verification> {
        self.x.fill(-1.0);
        self.passes(1);
        for (i, &got) in self.x.iter().enumerate() {
            let (y, z) = ((i % 1024) as f64, ((i * 7) % 1024) as f64 * 0.5);
            let want = match self.kernel {
                Kernel::Copy => y,
                Kernel::Scale => Q * y,
                Kernel::Add => y + z,
                Kernel::Triad => y + Q * z,
            };
            ensure!(got == want, "element {i}: got {got}, scalar reference {want}");
        }
        Ok(Verification {
            passed: true,
            reference: "scalar f64 loop over every element".into(),
            max_error: Some(0.0),
            detail: format!("{} elements bit-exact", self.x.len()),
        })
    }
    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::bytes((self.kernel.arrays() * 8 * self.x.len()) as f64)]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        self.passes(iters);
        Ok(())
    }
    fn metrics(&mut self) -> Vec<Metric> {
        let (l1, l2, l3) = caches();
        let mut m = vec![
            Metric::new("working_set_bytes", self.working_set as f64, "B"),
            Metric::new("array_bytes", (self.x.len() * 8) as f64, "B"),
        ];
        for (name, v) in [("l1d_bytes_sysfs", l1), ("l2_bytes_sysfs", l2), ("l3_bytes_sysfs", l3)] {
            if let Some(v) = v {
                m.push(Metric::new(name, v as f64, "B"));
            }
        }
        m
    }
}
