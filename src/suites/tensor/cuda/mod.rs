//! The tensor suite on `cuda:N`: the same benchmarks and case ids as on the
//! CPU (with `device=cuda:N`) for creation, binary, unary and reduction,
//! plus the GPU-only `gpu_gemm`, `gpu_bmm`, `transfer` and `launch`.
//!
//! Every case is prepared on the cached GPU of `crate::backend::cuda` (NVRTC
//! compilation, cuBLAS handles and uploads happen here and are reported as
//! `setup_ns`), checked against the CPU suite's own f64 references before
//! it is timed, and timed through `crate::backend::cuda::workload::GpuWorkload`
//! (host clock after a stream sync, plus CUDA-event time).
//!
//! | benchmark | file | GPU work |
//! |---|---|---|
//! | `creation`, `binary`, `unary` | `elementwise.rs` | memset / own float4 grid-stride kernels |
//! | `reduction` | `reduce.rs` | two-pass sum/mean/max/argmax, one block per row for softmax/layernorm |
//! | `gpu_gemm`, `gpu_bmm` | `gemm.rs` | cuBLAS gemmEx / strided-batched, f32/tf32/f16/bf16 |
//! | `transfer`, `launch` | `transfer.rs` | H2D/D2H/D2D copies, empty-kernel launches |

use crate::backend::Device;
use crate::backend::cuda::Gpu;
use crate::plan::Case;
use crate::suites::{Workload, skip};
use anyhow::{Result, bail};
use cudarc::driver::{CudaFunction, CudaSlice};
use std::sync::Arc;
use std::time::Duration;

mod elementwise;
mod gemm;
mod reduce;
mod transfer;

#[cfg(test)]
mod tests;

pub(super) use gemm::DTYPES;
pub(super) use transfer::{DIRECTIONS, LAUNCH_MODES, MEMORY};

/// The benchmarks that run on CUDA only.
pub(super) const GPU_ONLY: &[&str] = &["gpu_gemm", "gpu_bmm", "transfer", "launch"];

/// Prepares `case` on its GPU; a GPU that is missing is a skip with the
/// driver's reason.
pub(super) fn prepare(case: &Case) -> Result<Box<dyn Workload>> {
    let Device::Cuda(n) = case.device else {
        bail!("case {}: `{}` runs on CUDA GPUs only (--device cuda)", case.id, case.benchmark);
    };
    let gpu = crate::backend::cuda::gpu(n).map_err(skip)?;
    match case.benchmark.as_str() {
        "creation" => elementwise::prepare_creation(case, gpu),
        "binary" => elementwise::prepare_binary(case, gpu),
        "unary" => elementwise::prepare_unary(case, gpu),
        "reduction" => reduce::prepare(case, gpu),
        "gpu_gemm" => gemm::prepare(case, gpu, false),
        "gpu_bmm" => gemm::prepare(case, gpu, true),
        "transfer" => transfer::prepare(case, gpu),
        "launch" => transfer::prepare_launch(case, gpu),
        other => bail!(
            "tensor/{other} has no CUDA version; on CUDA: creation, binary, unary, reduction, {}",
            GPU_ONLY.join(", ")
        ),
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
fn check_fits(gpu: &Gpu, case: &Case, bytes: u64) -> Result<()> {
    let (free, total) = gpu.memory()?;
    // Leave room for cuBLAS workspaces and the allocator's rounding.
    if bytes as f64 > 0.9 * free as f64 {
        return Err(skip(format!(
            "{}: needs {:.2} GiB of device memory, cuda:{} has {:.2} GiB free of {:.2} GiB",
            case.id,
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
fn workload<O: crate::backend::cuda::workload::GpuOp + 'static>(
    gpu: Arc<Gpu>,
    op: O,
    setup: Duration,
    device_bytes: u64,
) -> Result<Box<dyn Workload>> {
    Ok(Box::new(crate::backend::cuda::workload::GpuWorkload::new(gpu, op, setup, device_bytes)?))
}
