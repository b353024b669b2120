//! Transfers (host-to-device, device-to-host from pageable or pinned host
//! memory, device-to-device) and launches (a one-value kernel, with or
//! without a stream synchronisation after each launch), of the bytes and
//! value the suite's description names and checked by its check.

use super::{download, function, upload, workload, zeros};
use crate::backend::cuda::Gpu;
use crate::backend::cuda::probe::Limit;
use crate::backend::cuda::workload::GpuOp;
use crate::backend::ops::{DIRECTIONS, Output, TensorOp, TensorWork};
use crate::workload::{Metric, Throughput, ThroughputKind, Verification, Workload};
use anyhow::{Result, bail};
use cudarc::driver::{
    CudaFunction, CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig, PinnedHostSlice, PushKernelArg, result,
};
use std::sync::Arc;

enum Host {
    Pageable(Vec<u8>),
    /// The page-locked buffer and its address: copies use the address
    /// directly, because cudarc's safe copy from a `PinnedHostSlice` adds a
    /// `cuStreamWaitEvent` to every call, which a 4 KiB transfer would time.
    Pinned(PinnedHostSlice<u8>, usize),
}

impl Host {
    fn as_mut_slice(&mut self) -> Result<&mut [u8]> {
        match self {
            Host::Pageable(v) => Ok(v),
            Host::Pinned(p, _) => p
                .as_mut_slice()
                .map_err(|e| anyhow::anyhow!("pinned buffer: {}", crate::backend::cuda::describe(&e))),
        }
    }
}

struct Transfer {
    direction: &'static str,
    bytes: usize,
    host: Option<Host>,
    dev: CudaSlice<u8>,
    /// The second device buffer of d2d.
    dev2: Option<CudaSlice<u8>>,
    /// The suite's description: the bytes every copy must deliver
    /// (`inputs.bytes`), the check and the work counts.
    work: TensorWork,
}

pub(super) fn prepare(work: TensorWork, gpu: Arc<Gpu>) -> Result<Box<dyn Workload>> {
    let TensorOp::Transfer { direction, pinned } = work.op else {
        bail!("{}: {} is not a transfer", work.id, work.op.name());
    };
    if !DIRECTIONS.contains(&direction) {
        bail!("{}: transfer direction `{direction}`; valid: {}", work.id, DIRECTIONS.join(", "));
    }
    let bytes = work.inputs.bytes.len();
    if bytes == 0 {
        bail!("{}: a transfer needs at least one byte", work.id);
    }
    let pattern = &work.inputs.bytes;
    let d2d = direction == "d2d";
    let dev_bytes = if d2d { 2 * bytes } else { bytes } as u64;
    super::check_fits(&gpu, &work.id, dev_bytes)?;
    let t = std::time::Instant::now();
    let host = if d2d {
        None
    } else {
        Some(match pinned {
            // Written in full, so its pages are resident before timing.
            false => Host::Pageable(vec![0u8; bytes]),
            // Plain page-locked memory (flags 0, as cudaHostAlloc and
            // PyTorch's pin_memory), not write-combined (cudarc's default).
            true => {
                // SAFETY: the buffer is written in full below before any read.
                let mut p = unsafe { gpu.ctx.alloc_pinned_with_flags::<u8>(bytes, 0) }
                    .map_err(|e| gpu.err("cuMemHostAlloc", e))?;
                let slice = p.as_mut_slice().map_err(|e| gpu.err("pinned buffer", e))?;
                slice.fill(0);
                let addr = slice.as_mut_ptr() as usize;
                Host::Pinned(p, addr)
            }
        })
    };
    let mut host = host;
    // h2d sends the pattern from the host; d2h and d2d send it from the device.
    let dev = if direction == "h2d" {
        if let Some(h) = host.as_mut() {
            h.as_mut_slice()?.copy_from_slice(pattern);
        }
        zeros(&gpu, bytes)?
    } else {
        upload(&gpu, pattern)?
    };
    let dev2 = if d2d { Some(zeros(&gpu, bytes)?) } else { None };
    gpu.sync()?;
    let op = Transfer { direction, bytes, host, dev, dev2, work };
    workload(gpu, op, t.elapsed(), dev_bytes)
}

impl GpuOp for Transfer {
    fn limit(&self) -> Option<(Limit, ThroughputKind)> {
        let pinned = matches!(self.host, Some(Host::Pinned(..)));
        let limit = match self.direction {
            "h2d" => Limit::HostToDevice(pinned),
            "d2h" => Limit::DeviceToHost(pinned),
            _ => Limit::DeviceCopy,
        };
        Some((limit, ThroughputKind::Bytes))
    }

    fn launch(&mut self, gpu: &Gpu) -> Result<()> {
        let s = &gpu.stream;
        let n = self.bytes;
        let r = match (self.direction, &mut self.host, &mut self.dev2) {
            ("h2d", Some(Host::Pageable(h)), _) => s.memcpy_htod(h, &mut self.dev),
            ("h2d", Some(Host::Pinned(_, addr)), _) => {
                let (d, _keep) = self.dev.device_ptr_mut(s);
                // SAFETY: `addr` is the pinned buffer of `n` bytes this op
                // owns; the device buffer holds `n` bytes.
                unsafe {
                    result::memcpy_htod_async(
                        d,
                        std::slice::from_raw_parts(*addr as *const u8, n),
                        s.cu_stream(),
                    )
                }
            }
            ("d2h", Some(Host::Pageable(h)), _) => s.memcpy_dtoh(&self.dev, h),
            ("d2h", Some(Host::Pinned(_, addr)), _) => {
                let (d, _keep) = self.dev.device_ptr(s);
                // SAFETY: as above; nothing reads the host buffer before the
                // stream is synchronised (verify syncs before comparing).
                unsafe {
                    result::memcpy_dtoh_async(
                        std::slice::from_raw_parts_mut(*addr as *mut u8, n),
                        d,
                        s.cu_stream(),
                    )
                }
            }
            (_, _, Some(d2)) => s.memcpy_dtod(&self.dev, d2),
            _ => bail!("transfer {}: no buffers for this direction", self.direction),
        };
        r.map_err(|e| gpu.err(&format!("{} copy", self.direction), e))
    }

    fn verify(&mut self, gpu: &Gpu) -> Result<Verification> {
        // Clear the destination, copy once, and compare with the pattern.
        match self.direction {
            "h2d" => gpu.stream.memset_zeros(&mut self.dev).map_err(|e| gpu.err("memset", e))?,
            "d2h" => {
                if let Some(h) = self.host.as_mut() {
                    h.as_mut_slice()?.fill(0);
                }
            }
            _ => {
                if let Some(d2) = self.dev2.as_mut() {
                    gpu.stream.memset_zeros(d2).map_err(|e| gpu.err("memset", e))?;
                }
            }
        }
        gpu.sync()?;
        self.launch(gpu)?;
        gpu.sync()?;
        let got = match (self.direction, &mut self.host, &self.dev2) {
            ("d2h", Some(h), _) => h.as_mut_slice()?.to_vec(),
            (_, _, Some(d2)) => download(gpu, d2)?,
            _ => download(gpu, &self.dev)?,
        };
        Ok(self.work.verify(Output::Bytes(&got)))
    }

    fn throughput(&self) -> Vec<Throughput> {
        self.work.throughput.clone()
    }

    fn metrics(&self) -> Vec<Metric> {
        let pinned = matches!(self.host, Some(Host::Pinned(..)));
        vec![Metric::new("pinned_host_memory", if pinned { 1.0 } else { 0.0 }, "")]
    }
}

struct Launch {
    sync: bool,
    value: f32,
    f: CudaFunction,
    out: CudaSlice<f32>,
    /// The suite's description: the check and the work counts.
    work: TensorWork,
}

/// A launch: a kernel writing one value, 1 block of 1 thread; `sync`
/// waits for the stream after every launch (what a tiny op costs a program
/// that needs its result), else launches queue back to back.
pub(super) fn prepare_launch(work: TensorWork, gpu: Arc<Gpu>) -> Result<Box<dyn Workload>> {
    let TensorOp::Launch { sync, value } = work.op else {
        bail!("{}: {} is not a kernel launch", work.id, work.op.name());
    };
    let t = std::time::Instant::now();
    let (f, _) = function(&gpu, "fill_f32")?;
    let out = zeros(&gpu, 1)?;
    gpu.sync()?;
    workload(gpu, Launch { sync, value, f, out, work }, t.elapsed(), 4)
}

impl GpuOp for Launch {
    fn launch(&mut self, gpu: &Gpu) -> Result<()> {
        let (n, v) = (1u64, self.value);
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        let mut b = gpu.stream.launch_builder(&self.f);
        b.arg(&mut self.out).arg(&n).arg(&v);
        // SAFETY: fill_f32(float*, u64, float) over the one-value buffer.
        unsafe { b.launch(cfg) }.map_err(|e| gpu.err("launch", e))?;
        Ok(())
    }

    fn verify(&mut self, gpu: &Gpu) -> Result<Verification> {
        gpu.stream.memset_zeros(&mut self.out).map_err(|e| gpu.err("memset", e))?;
        self.launch(gpu)?;
        let got = download(gpu, &self.out)?;
        Ok(self.work.verify(Output::Values(&got)))
    }

    fn throughput(&self) -> Vec<Throughput> {
        self.work.throughput.clone()
    }

    fn sync_each_iteration(&self) -> bool {
        self.sync
    }
}
