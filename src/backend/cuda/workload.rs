//! The harness side of a GPU case, written once for every GPU workload.
//!
//! A suite implements [`GpuOp`] (enqueue one iteration, check the result
//! against the CPU reference, say its work); [`GpuWorkload`] turns it into a
//! [`Workload`]: `run` enqueues the iterations between two CUDA events,
//! `sync` waits for the stream so the harness's clock read after it is
//! right, and each measured sample's event time is kept, so a case reports
//! both the host time (the harness's samples) and the device time
//! (`cuda_event_ns`, the median per iteration). Setup cost (NVRTC
//! compilation, cuBLAS handle and workspace creation, buffer uploads) and
//! the device bytes the case holds are reported as metrics too.

use super::Gpu;
use super::probe::{GpuLimits, Limit};
use crate::backend::ops::GemmDtype;
use crate::workload::{Metric, Roof, Throughput, ThroughputKind, Verification, Workload};
use anyhow::Result;
use cudarc::driver::CudaEvent;
use std::sync::Arc;
use std::time::Duration;

/// One GPU operation, as a suite writes it.
pub trait GpuOp: Send {
    /// Enqueues one iteration on the GPU's stream (no synchronisation).
    fn launch(&mut self, gpu: &Gpu) -> Result<()>;
    /// Runs the operation, waits for it, and checks it against the CPU
    /// reference (an error or a failed check fails the case loudly).
    fn verify(&mut self, gpu: &Gpu) -> Result<Verification>;
    /// Work one iteration does.
    fn throughput(&self) -> Vec<Throughput>;
    /// Whether each iteration must end with a stream synchronisation
    /// (launch latency cases time launch plus synchronise); `false` lets
    /// iterations queue back to back, as a GPU program runs them.
    fn sync_each_iteration(&self) -> bool {
        false
    }
    /// Further metrics of the operation (a transfer's memory kind).
    fn metrics(&self) -> Vec<Metric> {
        Vec::new()
    }
    /// The probed limit this operation is measured against, and which of
    /// its throughputs is compared with it (`None`: none applies).
    fn limit(&self) -> Option<(Limit, ThroughputKind)> {
        None
    }
}

/// A boxed op is an op: a suite that picks its op at run time hands the box
/// to [`GpuWorkload`], and every method (the defaults' overrides included)
/// reaches the op inside.
impl GpuOp for Box<dyn GpuOp> {
    fn launch(&mut self, gpu: &Gpu) -> Result<()> {
        (**self).launch(gpu)
    }
    fn verify(&mut self, gpu: &Gpu) -> Result<Verification> {
        (**self).verify(gpu)
    }
    fn throughput(&self) -> Vec<Throughput> {
        (**self).throughput()
    }
    fn sync_each_iteration(&self) -> bool {
        (**self).sync_each_iteration()
    }
    fn metrics(&self) -> Vec<Metric> {
        (**self).metrics()
    }
    fn limit(&self) -> Option<(Limit, ThroughputKind)> {
        (**self).limit()
    }
}

/// A [`GpuOp`] on its GPU, timed with the host clock and CUDA events.
pub struct GpuWorkload<O: GpuOp> {
    gpu: Arc<Gpu>,
    op: O,
    start: CudaEvent,
    end: CudaEvent,
    /// Iterations of the last `run` call, whose events are pending.
    pending: Option<u64>,
    /// Device time per iteration of each measured sample, in ns.
    event_ns: Vec<f64>,
    setup: Duration,
    device_bytes: u64,
    /// The GPU's cached probe (`sysinfo --probe`), if any.
    limits: Option<GpuLimits>,
}

impl<O: GpuOp> GpuWorkload<O> {
    /// Wraps `op`, prepared on `gpu` in `setup` time and holding
    /// `device_bytes` of device memory (its peak: nothing is allocated on
    /// the device while it is timed).
    pub fn new(gpu: Arc<Gpu>, op: O, setup: Duration, device_bytes: u64) -> Result<Self> {
        let start = gpu.timing_event()?;
        let end = gpu.timing_event()?;
        let limits = super::probe::uuid(&gpu).ok().and_then(|u| super::probe::load(&u));
        Ok(Self { gpu, op, start, end, pending: None, event_ns: Vec::new(), setup, device_bytes, limits })
    }
}

impl<O: GpuOp> Workload for GpuWorkload<O> {
    fn verify(&mut self) -> Result<Verification> {
        self.op.verify(&self.gpu)
    }

    fn throughput(&self) -> Vec<Throughput> {
        self.op.throughput()
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        let g = &self.gpu;
        self.start.record(&g.stream).map_err(|e| g.err("event record", e))?;
        for _ in 0..iters {
            self.op.launch(g)?;
            if self.op.sync_each_iteration() {
                g.sync()?;
            }
        }
        self.end.record(&g.stream).map_err(|e| g.err("event record", e))?;
        self.pending = Some(iters);
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        self.gpu.sync()
    }

    fn roof(&self) -> Option<Roof> {
        gpu_roof(self.limits.as_ref()?, self.op.limit()?)
    }

    fn after_sample(&mut self, measured: bool) -> Result<()> {
        if let Some(iters) = self.pending.take()
            && measured
            && iters > 0
        {
            let ms = self.start.elapsed_ms(&self.end).map_err(|e| self.gpu.err("event elapsed", e))?;
            self.event_ns.push(ms as f64 * 1e6 / iters as f64);
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let mut m = vec![
            Metric::new("setup_ns", self.setup.as_nanos() as f64, "ns"),
            Metric::new("peak_device_bytes", self.device_bytes as f64, "B"),
        ];
        if let Some(med) = median(&self.event_ns) {
            m.push(Metric::new("cuda_event_ns", med, "ns"));
            let work = |k| self.op.throughput().iter().find(|t| t.kind == k).map(|t| t.per_iteration);
            if let Some(pct) = self
                .limits
                .as_ref()
                .zip(self.op.limit())
                .and_then(|(l, (limit, kind))| pct_of_limit(work(kind)?, med, l.rate(limit)?))
            {
                m.push(Metric::new("pct_of_probed_limit", pct, "%"));
            }
        }
        m.extend(self.op.metrics());
        m
    }
}

/// A GPU case's roof from its GPU's probe: the probed limit that matches the
/// case (`GpuOp::limit`) for its kind of work, and for the other kind the
/// GPU's general figure (f32 GEMM FLOP/s, device copy bandwidth), so the
/// roofline ridge is the GPU's. `None` where the probe lacks a figure.
pub fn gpu_roof(l: &GpuLimits, (limit, kind): (Limit, ThroughputKind)) -> Option<Roof> {
    let own = l.rate(limit).filter(|&r| r > 0.0)?;
    let flops = l.rate(Limit::Gemm(GemmDtype::F32)).filter(|&r| r > 0.0);
    let copy = l.rate(Limit::DeviceCopy).filter(|&r| r > 0.0);
    match kind {
        ThroughputKind::Flops => Some(Roof { flops_per_sec: own, bytes_per_sec: copy? }),
        ThroughputKind::Bytes => Some(Roof { flops_per_sec: flops?, bytes_per_sec: own }),
        _ => None,
    }
}

/// The rate of `work` units per iteration in `ns_per_iter` nanoseconds, as
/// a percentage of `limit` units per second (device time: the CUDA-event
/// median, so host overheads the limit's probe did not pay are left out).
pub fn pct_of_limit(work: f64, ns_per_iter: f64, limit: f64) -> Option<f64> {
    (ns_per_iter > 0.0 && limit > 0.0).then(|| work / (ns_per_iter * 1e-9) / limit * 100.0)
}

/// The median of `v` (mean of the middle two for an even count).
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let h = s.len() / 2;
    Some(if s.len() % 2 == 1 { s[h] } else { (s[h - 1] + s[h]) / 2.0 })
}

#[cfg(test)]
mod tests {
    #[test]
    fn percent_of_limit_from_device_time() {
        // 1 GFLOP in 1 ms is 1 TFLOP/s: half of a 2 TFLOP/s limit.
        assert_eq!(super::pct_of_limit(1e9, 1e6, 2e12), Some(50.0));
        assert_eq!(super::pct_of_limit(1e9, 0.0, 2e12), None);
        assert_eq!(super::pct_of_limit(1e9, 1e6, 0.0), None);
    }

    #[test]
    fn a_gpu_roof_takes_the_matching_probed_limit() {
        use super::*;
        let l = GpuLimits {
            uuid: "00ff".into(),
            name: "test GPU".into(),
            measured_at: "2026-11-25T00:00:00Z".into(),
            gemm_flops: [("f32".to_string(), 50e12), ("bf16".to_string(), 800e12)].into_iter().collect(),
            d2d_bytes_per_sec: 3e12,
            h2d_pinned_bytes_per_sec: 50e9,
            h2d_pageable_bytes_per_sec: 8e9,
            d2h_pinned_bytes_per_sec: 51e9,
            d2h_pageable_bytes_per_sec: 0.0,
            launch_sync_ns: 6e3,
        };
        // A bf16 GEMM: its dtype's peak, the GPU's copy bandwidth.
        let gemm = gpu_roof(&l, (Limit::Gemm(GemmDtype::Bf16), ThroughputKind::Flops));
        assert_eq!(gemm, Some(Roof { flops_per_sec: 800e12, bytes_per_sec: 3e12 }));
        // Elementwise: the copy bandwidth, the f32 peak for its arithmetic.
        let ew = gpu_roof(&l, (Limit::DeviceCopy, ThroughputKind::Bytes));
        assert_eq!(ew, Some(Roof { flops_per_sec: 50e12, bytes_per_sec: 3e12 }));
        // A pageable upload: its own bandwidth.
        let up = gpu_roof(&l, (Limit::HostToDevice(false), ThroughputKind::Bytes));
        assert_eq!(up.map(|r| r.bytes_per_sec), Some(8e9));
        // Unmeasured figures give no roof rather than a bogus one.
        assert_eq!(gpu_roof(&l, (Limit::DeviceToHost(false), ThroughputKind::Bytes)), None);
        assert_eq!(gpu_roof(&l, (Limit::Gemm(GemmDtype::F16), ThroughputKind::Flops)), None);
    }

    #[test]
    fn a_boxed_op_forwards_every_default_it_overrides() {
        use super::*;
        struct Op;
        impl GpuOp for Op {
            fn launch(&mut self, _: &Gpu) -> Result<()> {
                anyhow::bail!("no GPU in this test")
            }
            fn verify(&mut self, _: &Gpu) -> Result<Verification> {
                anyhow::bail!("no GPU in this test")
            }
            fn throughput(&self) -> Vec<Throughput> {
                vec![Throughput::bytes(8.0)]
            }
            fn sync_each_iteration(&self) -> bool {
                true
            }
            fn metrics(&self) -> Vec<Metric> {
                vec![Metric::new("m", 1.0, "")]
            }
            fn limit(&self) -> Option<(Limit, ThroughputKind)> {
                Some((Limit::DeviceCopy, ThroughputKind::Bytes))
            }
        }
        let boxed: Box<dyn GpuOp> = Box::new(Op);
        assert!(boxed.sync_each_iteration());
        assert_eq!(boxed.limit(), Some((Limit::DeviceCopy, ThroughputKind::Bytes)));
        assert_eq!(boxed.metrics().len(), 1);
        assert_eq!(boxed.throughput()[0].per_iteration, 8.0);
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(super::median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(super::median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(super::median(&[]), None);
    }
}
