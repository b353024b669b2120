//! The GPU probe: measured limits of one GPU (peak cuBLAS GEMM per dtype at
//! 8192^3, device copy bandwidth, pinned and pageable host transfers, launch
//! plus synchronise latency), cached per GPU (its UUID) beside the CPU
//! probe's cache (`crate::probe::cache_dir`), written atomically.
//! `sysinfo --probe` measures it; GPU cases then report
//! `pct_of_probed_limit` from their CUDA-event time
//! (`super::workload::GpuWorkload`). NOT YET RUN ON A GPU (docs/cuda.md).

use super::Gpu;
use crate::backend::cuda::kernels::gemm as cugemm;
use crate::backend::ops::GemmDtype;
use anyhow::{Context, Result};
use cudarc::driver::{DevicePtr, DevicePtrMut};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

/// What a GPU case is measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Peak cuBLAS GEMM FLOP/s of this dtype.
    Gemm(GemmDtype),
    /// Device-to-device copy bandwidth (read + write bytes per second).
    DeviceCopy,
    /// Host-to-device bandwidth, pinned (`true`) or pageable.
    HostToDevice(bool),
    /// Device-to-host bandwidth, pinned or pageable.
    DeviceToHost(bool),
}

/// One GPU's measured limits.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GpuLimits {
    /// The GPU's UUID (hex), the cache key.
    pub uuid: String,
    /// Its name, for people.
    pub name: String,
    /// When it was measured (RFC 3339).
    pub measured_at: String,
    /// Peak GEMM FLOP/s per dtype name (f32, tf32, f16, bf16) at 8192^3.
    pub gemm_flops: BTreeMap<String, f64>,
    /// Device-to-device copy, bytes read plus written per second.
    pub d2d_bytes_per_sec: f64,
    /// Host-to-device from pinned / pageable memory, bytes per second.
    pub h2d_pinned_bytes_per_sec: f64,
    /// See `h2d_pinned_bytes_per_sec`.
    pub h2d_pageable_bytes_per_sec: f64,
    /// Device-to-host into pinned / pageable memory, bytes per second.
    pub d2h_pinned_bytes_per_sec: f64,
    /// See `d2h_pinned_bytes_per_sec`.
    pub d2h_pageable_bytes_per_sec: f64,
    /// A one-value kernel launched and synchronised, median ns.
    pub launch_sync_ns: f64,
}

impl GpuLimits {
    /// The figure `limit` is compared with (a rate per second).
    pub fn rate(&self, limit: Limit) -> Option<f64> {
        let name = |d: GemmDtype| match d {
            GemmDtype::F32 => "f32",
            GemmDtype::Tf32 => "tf32",
            GemmDtype::F16 => "f16",
            GemmDtype::Bf16 => "bf16",
        };
        let v = match limit {
            Limit::Gemm(d) => *self.gemm_flops.get(name(d))?,
            Limit::DeviceCopy => self.d2d_bytes_per_sec,
            Limit::HostToDevice(true) => self.h2d_pinned_bytes_per_sec,
            Limit::HostToDevice(false) => self.h2d_pageable_bytes_per_sec,
            Limit::DeviceToHost(true) => self.d2h_pinned_bytes_per_sec,
            Limit::DeviceToHost(false) => self.d2h_pageable_bytes_per_sec,
        };
        (v > 0.0).then_some(v)
    }
}

/// One line for `sysinfo`: the probed figures in the units people quote.
pub fn describe(device: &str, l: &GpuLimits) -> String {
    let gemm: Vec<String> = l.gemm_flops.iter().map(|(k, v)| format!("{k} {:.1}", v / 1e12)).collect();
    format!(
        "{device} probed {}: GEMM TFLOP/s {}; copy {:.0} GB/s; H2D pinned/pageable {:.1}/{:.1} GB/s; D2H {:.1}/{:.1} GB/s; launch+sync {:.1} us",
        l.measured_at,
        gemm.join(", "),
        l.d2d_bytes_per_sec / 1e9,
        l.h2d_pinned_bytes_per_sec / 1e9,
        l.h2d_pageable_bytes_per_sec / 1e9,
        l.d2h_pinned_bytes_per_sec / 1e9,
        l.d2h_pageable_bytes_per_sec / 1e9,
        l.launch_sync_ns / 1e3
    )
}

/// The UUID of `gpu` as 32 hex digits.
pub fn uuid(gpu: &Gpu) -> Result<String> {
    let u = gpu.ctx.uuid().map_err(|e| gpu.err("cuDeviceGetUuid", e))?;
    Ok(u.bytes.iter().map(|b| format!("{:02x}", *b as u8)).collect())
}

fn cache_file(uuid: &str) -> Result<std::path::PathBuf> {
    anyhow::ensure!(
        uuid.chars().all(|c| c.is_ascii_hexdigit()) && !uuid.is_empty(),
        "invalid GPU UUID {uuid:?}"
    );
    Ok(crate::probe::cache_dir().join(format!("probe-gpu-{uuid}.json")))
}

/// Writes `l` to the cache atomically and returns the path.
pub fn save(l: &GpuLimits) -> Result<std::path::PathBuf> {
    let path = cache_file(&l.uuid)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    crate::util::write_atomic(&path, (serde_json::to_string_pretty(l)? + "\n").as_bytes())?;
    Ok(path)
}

/// The cached limits of the GPU with `uuid`; `None` when there are none or
/// the file is unreadable (an optional figure never fails a run).
pub fn load(uuid: &str) -> Option<GpuLimits> {
    let text = std::fs::read_to_string(cache_file(uuid).ok()?).ok()?;
    serde_json::from_str::<GpuLimits>(&text).ok().filter(|l| l.uuid == uuid)
}

/// Seconds per call of `f` (enqueued `n` times between two events, best of 3).
fn time_events(gpu: &Gpu, n: u32, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let (start, end) = (gpu.timing_event()?, gpu.timing_event()?);
    f()?;
    gpu.sync()?;
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        start.record(&gpu.stream).map_err(|e| gpu.err("event", e))?;
        for _ in 0..n {
            f()?;
        }
        end.record(&gpu.stream).map_err(|e| gpu.err("event", e))?;
        let ms = start.elapsed_ms(&end).map_err(|e| gpu.err("event", e))?;
        best = best.min(ms as f64 / 1e3 / n as f64);
    }
    Ok(best)
}

/// Measures `gpu` (a few seconds on an H100; more on smaller GPUs).
pub fn measure(gpu: &Gpu) -> Result<GpuLimits> {
    let name = gpu.ctx.name().map_err(|e| gpu.err("name", e))?;
    let mut gemm_flops = BTreeMap::new();
    let blas = gpu.blas()?;
    let s = &gpu.stream;
    // 8192^3 when it fits in a quarter of free memory, else smaller.
    let (free, _) = gpu.memory()?;
    let mut n = 8192usize;
    while 3 * n * n * 4 > free / 4 && n > 1024 {
        n /= 2;
    }
    let call = cugemm::row_major(n, n, n, false, false)?;
    let x = crate::util::randn(n * n, 1);
    for (label, dt) in [
        ("f32", GemmDtype::F32),
        ("tf32", GemmDtype::Tf32),
        ("f16", GemmDtype::F16),
        ("bf16", GemmDtype::Bf16),
    ] {
        // Random data (zeros would draw less power and clock higher), stored
        // as the dtype's bytes: f32 words, or halves packed two to a word.
        let words: Vec<f32> = if dt.bytes() == 4 {
            x.clone()
        } else {
            let h: Vec<u16> = x
                .iter()
                .map(|&v| {
                    if dt == GemmDtype::F16 {
                        half::f16::from_f32(v).to_bits()
                    } else {
                        half::bf16::from_f32(v).to_bits()
                    }
                })
                .collect();
            h.chunks(2)
                .map(|p| f32::from_bits(p[0] as u32 | (p.get(1).copied().unwrap_or(0) as u32) << 16))
                .collect()
        };
        let a = s.clone_htod(&words).map_err(|e| gpu.err("upload", e))?;
        let b = s.clone_htod(&words).map_err(|e| gpu.err("upload", e))?;
        let mut c = s.alloc_zeros::<f32>(words.len()).map_err(|e| gpu.err("alloc", e))?;
        let secs = time_events(gpu, 5, || {
            let (pa, _ra) = a.device_ptr(s);
            let (pb, _rb) = b.device_ptr(s);
            let (pc, _rc) = c.device_ptr_mut(s);
            // SAFETY: a, b, c hold n*n elements of the dtype (halves packed).
            unsafe { cugemm::gemm(&blas, dt, &call, None, pa, pb, pc) }
        })?;
        gemm_flops.insert(label.to_string(), 2.0 * (n * n * n) as f64 / secs);
    }
    // Copies: 1 GiB device to device (or what fits), 256 MiB to and from the host.
    let copy = (1usize << 30).min(free / 4);
    let src = s.alloc_zeros::<u8>(copy).map_err(|e| gpu.err("alloc", e))?;
    let mut dst = s.alloc_zeros::<u8>(copy).map_err(|e| gpu.err("alloc", e))?;
    let d2d = time_events(gpu, 5, || s.memcpy_dtod(&src, &mut dst).map_err(|e| gpu.err("copy", e)))?;
    let host = (256usize << 20).min(copy);
    let mut pageable = vec![1u8; host];
    // SAFETY: written in full before use.
    let mut pinned =
        unsafe { gpu.ctx.alloc_pinned_with_flags::<u8>(host, 0) }.map_err(|e| gpu.err("pinned", e))?;
    pinned.as_mut_slice().map_err(|e| gpu.err("pinned", e))?.fill(1);
    let mut dev = s.alloc_zeros::<u8>(host).map_err(|e| gpu.err("alloc", e))?;
    let h2d_pageable =
        time_events(gpu, 3, || s.memcpy_htod(&pageable, &mut dev).map_err(|e| gpu.err("copy", e)))?;
    let h2d_pinned =
        time_events(gpu, 3, || s.memcpy_htod(&pinned, &mut dev).map_err(|e| gpu.err("copy", e)))?;
    let d2h_pageable =
        time_events(gpu, 3, || s.memcpy_dtoh(&dev, &mut pageable).map_err(|e| gpu.err("copy", e)))?;
    let d2h_pinned =
        time_events(gpu, 3, || s.memcpy_dtoh(&dev, &mut pinned).map_err(|e| gpu.err("copy", e)))?;
    // Launch + synchronise, host-timed: a memset of 4 bytes is the smallest
    // operation the stream runs (no module needed).
    let mut one = s.alloc_zeros::<u8>(4).map_err(|e| gpu.err("alloc", e))?;
    let mut lat = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        s.memset_zeros(&mut one).map_err(|e| gpu.err("memset", e))?;
        gpu.sync()?;
        lat.push(t.elapsed().as_nanos() as f64);
    }
    let hb = host as f64;
    Ok(GpuLimits {
        uuid: uuid(gpu)?,
        name,
        measured_at: crate::probe::now_rfc3339(),
        gemm_flops,
        d2d_bytes_per_sec: 2.0 * copy as f64 / d2d,
        h2d_pinned_bytes_per_sec: hb / h2d_pinned,
        h2d_pageable_bytes_per_sec: hb / h2d_pageable,
        d2h_pinned_bytes_per_sec: hb / d2h_pinned,
        d2h_pageable_bytes_per_sec: hb / d2h_pageable,
        launch_sync_ns: super::workload::median(&lat).unwrap_or(f64::NAN),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_pick_their_figure_and_round_trip_through_the_cache() {
        let l = GpuLimits {
            uuid: "00ff".into(),
            name: "test GPU".into(),
            measured_at: "2026-11-25T00:00:00Z".into(),
            gemm_flops: [("bf16".to_string(), 600e12)].into_iter().collect(),
            d2d_bytes_per_sec: 3e12,
            h2d_pinned_bytes_per_sec: 50e9,
            h2d_pageable_bytes_per_sec: 20e9,
            d2h_pinned_bytes_per_sec: 51e9,
            d2h_pageable_bytes_per_sec: 0.0,
            launch_sync_ns: 20e3,
        };
        assert_eq!(l.rate(Limit::Gemm(GemmDtype::Bf16)), Some(600e12));
        assert_eq!(l.rate(Limit::Gemm(GemmDtype::F16)), None);
        assert_eq!(l.rate(Limit::DeviceCopy), Some(3e12));
        assert_eq!(l.rate(Limit::HostToDevice(false)), Some(20e9));
        assert_eq!(l.rate(Limit::DeviceToHost(false)), None, "an unmeasured 0 is no limit");
        assert!(cache_file("../x").is_err());
        let dir = std::env::temp_dir().join(format!("tfbench-gpu-probe-{}", std::process::id()));
        // SAFETY of the test: tests run one at a time (RUST_TEST_THREADS=1).
        unsafe { std::env::set_var("TFBENCH_CACHE_DIR", &dir) };
        let path = save(&l).unwrap();
        assert!(path.starts_with(&dir));
        assert_eq!(load("00ff"), Some(l));
        assert_eq!(load("abcd"), None);
        unsafe { std::env::remove_var("TFBENCH_CACHE_DIR") };
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
