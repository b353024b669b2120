//! Tensor work on `cuda:N`: the CUDA realisation of the descriptions of
//! [`crate::backend::ops`] (the tensor suite's creation, binary, unary and
//! reduction cases with `device=cuda:N`, and its GPU-only `gpu_gemm`,
//! `gpu_bmm`, `transfer` and `launch`).
//!
//! Every work item is prepared on the cached GPU of `crate::backend::cuda`
//! (NVRTC compilation, cuBLAS handles and uploads happen here and are
//! reported as `setup_ns`), checked with the suite's own check
//! ([`TensorWork::verify`]) before it is timed, and timed through
//! `crate::backend::cuda::workload::GpuWorkload` (host clock after a stream
//! sync, plus CUDA-event time). The inputs, work counts and references are
//! the suite's; the buffers, launches and the `randn` generator's own f64
//! twin are this backend's.
//!
//! | op | file | GPU work |
//! |---|---|---|
//! | fill, binary, broadcast add, unary | `elementwise.rs` | memset / own float4 grid-stride kernels |
//! | reduce | `reduce.rs` | two-pass sum/mean/max/argmax, one block per row for softmax/layernorm |
//! | gemm | `gemm.rs` | cuBLAS gemmEx / strided-batched, f32/tf32/f16/bf16 |
//! | transfer, launch | `transfer.rs` | H2D/D2H/D2D copies, empty-kernel launches |

use super::{CudaBackend, Gpu};
use crate::backend::Device;
use crate::backend::ops::{TensorOp, TensorOps, TensorWork};
use crate::workload::{Workload, skip};
use anyhow::{Result, bail};
use cudarc::driver::{CudaFunction, CudaSlice};
use std::sync::Arc;
use std::time::Duration;

mod elementwise;
mod gemm;
mod reduce;
mod transfer;

impl TensorOps for CudaBackend {
    /// Prepares `work` on its GPU; a GPU that is missing is a skip with the
    /// driver's reason.
    fn prepare(&self, device: Device, work: TensorWork) -> Result<Box<dyn Workload>> {
        let Device::Cuda(n) = device else {
            bail!("{}: {device} is not a CUDA device", work.id);
        };
        let gpu = super::gpu(n).map_err(skip)?;
        match work.op {
            TensorOp::Fill { .. }
            | TensorOp::Binary(_)
            | TensorOp::BroadcastAdd { .. }
            | TensorOp::Unary(_) => elementwise::prepare(work, gpu),
            TensorOp::Reduce { .. } => reduce::prepare(work, gpu),
            TensorOp::Gemm { .. } => gemm::prepare(work, gpu),
            TensorOp::Transfer { .. } => transfer::prepare(work, gpu),
            TensorOp::Launch { .. } => transfer::prepare_launch(work, gpu),
        }
    }
}

/// The tensor kernels' module on `gpu` and one function of it, with the
/// compile time (zero once cached).
fn function(gpu: &Gpu, name: &str) -> Result<(CudaFunction, Duration)> {
    use crate::backend::cuda::kernels::source::{TENSOR, TENSOR_MODULE};
    let (m, t) = gpu.module(TENSOR_MODULE, TENSOR)?;
    let f = m.load_function(name).map_err(|e| gpu.err(&format!("function {name}"), e))?;
    Ok((f, t))
}

/// `host` copied to a new device buffer.
fn upload<T: cudarc::driver::DeviceRepr>(gpu: &Gpu, host: &[T]) -> Result<CudaSlice<T>> {
    gpu.stream.clone_htod(host).map_err(|e| gpu.err("upload", e))
}

/// A device buffer copied back (the stream is synchronised by the copy).
fn download<T: cudarc::driver::DeviceRepr + Default + Clone>(
    gpu: &Gpu,
    dev: &CudaSlice<T>,
) -> Result<Vec<T>> {
    let v = gpu.stream.clone_dtoh(dev).map_err(|e| gpu.err("download", e))?;
    gpu.sync()?;
    Ok(v)
}

/// A zeroed device buffer of `n` elements.
fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    gpu: &Gpu,
    n: usize,
) -> Result<CudaSlice<T>> {
    gpu.stream.alloc_zeros(n).map_err(|e| gpu.err(&format!("allocating {n} elements"), e))
}

/// Refuses (as a skip) a case whose device buffers would not fit in the
/// GPU's free memory, with the figures, before anything is allocated.
fn check_fits(gpu: &Gpu, id: &str, bytes: u64) -> Result<()> {
    let (free, total) = gpu.memory()?;
    // Leave room for cuBLAS workspaces and the allocator's rounding.
    if bytes as f64 > 0.9 * free as f64 {
        return Err(skip(format!(
            "{}: needs {:.2} GiB of device memory, cuda:{} has {:.2} GiB free of {:.2} GiB",
            id,
            bytes as f64 / GIB,
            gpu.ordinal,
            free as f64 / GIB,
            total as f64 / GIB
        )));
    }
    Ok(())
}

const GIB: f64 = (1u64 << 30) as f64;

/// The workload of `op` on `gpu`: the shared harness side.
fn workload<O: super::workload::GpuOp + 'static>(
    gpu: Arc<Gpu>,
    op: O,
    setup: Duration,
    device_bytes: u64,
) -> Result<Box<dyn Workload>> {
    Ok(Box::new(super::workload::GpuWorkload::new(gpu, op, setup, device_bytes)?))
}
