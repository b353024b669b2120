//! GEMMs and batched GEMMs on the GPU: row-major `C = A B` through cuBLAS
//! in f32 (no TF32), tf32, f16 and bf16, accumulating in f32, on the
//! suite's inputs (already rounded as the dtype stores them) and checked by
//! the suite's check (`TensorWork`), which compares with f64 dot products.

use super::{download, upload, workload, zeros};
use crate::backend::cuda::Gpu;
use crate::backend::cuda::kernels::gemm::{self as cugemm, Batch, ColMajorGemm};
use crate::backend::cuda::probe::Limit;
use crate::backend::cuda::workload::GpuOp;
use crate::backend::ops::{GemmDtype, Output, TensorOp, TensorWork};
use crate::workload::{Throughput, ThroughputKind, Verification, Workload};
use anyhow::{Result, bail};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use std::sync::Arc;

/// Device buffers of one element type.
enum Buffers {
    F32(CudaSlice<f32>, CudaSlice<f32>, CudaSlice<f32>),
    F16(CudaSlice<half::f16>, CudaSlice<half::f16>, CudaSlice<half::f16>),
    Bf16(CudaSlice<half::bf16>, CudaSlice<half::bf16>, CudaSlice<half::bf16>),
}

struct Gemm {
    dtype: GemmDtype,
    batch: usize,
    dims: (usize, usize, usize),
    call: ColMajorGemm,
    strides: Option<Batch>,
    blas: CudaBlas,
    /// The suite's description: A and B as stored on the GPU, widened to
    /// f32 (exactly), for its check; the check and the work counts.
    work: TensorWork,
    bufs: Buffers,
}

/// Prepares a GEMM (`batched`: strided-batched, else one `gemmEx`).
pub(super) fn prepare(work: TensorWork, gpu: Arc<Gpu>) -> Result<Box<dyn Workload>> {
    let TensorOp::Gemm { dtype, batched, batch, m, k, n } = work.op else {
        bail!("{}: {} is not a GEMM", work.id, work.op.name());
    };
    let v = &work.inputs.values;
    if v.len() != 2 || v[0].len() != batch * m * k || v[1].len() != batch * k * n {
        bail!("{}: a {batch}x{m}x{k}x{n} GEMM takes A and B of matching sizes", work.id);
    }
    let elems = batch * (m * k + k * n + m * n);
    let bytes = (elems * dtype.bytes()) as u64;
    super::check_fits(&gpu, &work.id, bytes)?;
    let t = std::time::Instant::now();
    let blas = gpu.blas()?;
    let (a, b) = (&v[0], &v[1]);
    let bufs = match dtype {
        GemmDtype::F32 | GemmDtype::Tf32 => {
            Buffers::F32(upload(&gpu, a)?, upload(&gpu, b)?, zeros(&gpu, batch * m * n)?)
        }
        GemmDtype::F16 => {
            let h = |v: &[f32]| v.iter().map(|&x| half::f16::from_f32(x)).collect::<Vec<_>>();
            Buffers::F16(upload(&gpu, &h(a))?, upload(&gpu, &h(b))?, zeros(&gpu, batch * m * n)?)
        }
        GemmDtype::Bf16 => {
            let h = |v: &[f32]| v.iter().map(|&x| half::bf16::from_f32(x)).collect::<Vec<_>>();
            Buffers::Bf16(upload(&gpu, &h(a))?, upload(&gpu, &h(b))?, zeros(&gpu, batch * m * n)?)
        }
    };
    let call = cugemm::row_major(m, k, n, false, false)?;
    let strides = if batched { Some(Batch::packed(batch, m, k, n)?) } else { None };
    let mut g = Gemm { dtype, batch, dims: (m, k, n), call, strides, blas, work, bufs };
    // One call in setup: cuBLAS picks its kernel and allocates its
    // workspace on first use, which belongs to setup, not to the samples.
    g.launch(&gpu)?;
    gpu.sync()?;
    workload(gpu, g, t.elapsed(), bytes)
}

impl GpuOp for Gemm {
    fn limit(&self) -> Option<(Limit, ThroughputKind)> {
        Some((Limit::Gemm(self.dtype), ThroughputKind::Flops))
    }

    fn launch(&mut self, gpu: &Gpu) -> Result<()> {
        let s = &gpu.stream;
        // SAFETY: the buffers hold batch x (m x k, k x n, m x n) elements of
        // the dtype, as `call` and `strides` address them, and live in self.
        unsafe {
            match &mut self.bufs {
                Buffers::F32(a, b, c) => {
                    let (pa, _ra) = a.device_ptr(s);
                    let (pb, _rb) = b.device_ptr(s);
                    let (pc, _rc) = c.device_ptr_mut(s);
                    cugemm::gemm(&self.blas, self.dtype, &self.call, self.strides, pa, pb, pc)
                }
                Buffers::F16(a, b, c) => {
                    let (pa, _ra) = a.device_ptr(s);
                    let (pb, _rb) = b.device_ptr(s);
                    let (pc, _rc) = c.device_ptr_mut(s);
                    cugemm::gemm(&self.blas, self.dtype, &self.call, self.strides, pa, pb, pc)
                }
                Buffers::Bf16(a, b, c) => {
                    let (pa, _ra) = a.device_ptr(s);
                    let (pb, _rb) = b.device_ptr(s);
                    let (pc, _rc) = c.device_ptr_mut(s);
                    cugemm::gemm(&self.blas, self.dtype, &self.call, self.strides, pa, pb, pc)
                }
            }
        }
    }

    fn verify(&mut self, gpu: &Gpu) -> Result<Verification> {
        // NaN sentinel in C, the product, then C back as f32.
        let len = self.batch * self.dims.0 * self.dims.2;
        let c: Vec<f32> = match &mut self.bufs {
            Buffers::F32(_, _, c) => {
                gpu.stream.memcpy_htod(&vec![f32::NAN; len], c).map_err(|e| gpu.err("upload", e))?;
                self.launch(gpu)?;
                match &self.bufs {
                    Buffers::F32(_, _, c) => download(gpu, c)?,
                    _ => unreachable!(),
                }
            }
            Buffers::F16(_, _, c) => {
                gpu.stream.memcpy_htod(&vec![half::f16::NAN; len], c).map_err(|e| gpu.err("upload", e))?;
                self.launch(gpu)?;
                match &self.bufs {
                    Buffers::F16(_, _, c) => download(gpu, c)?.into_iter().map(f32::from).collect(),
                    _ => unreachable!(),
                }
            }
            Buffers::Bf16(_, _, c) => {
                gpu.stream.memcpy_htod(&vec![half::bf16::NAN; len], c).map_err(|e| gpu.err("upload", e))?;
                self.launch(gpu)?;
                match &self.bufs {
                    Buffers::Bf16(_, _, c) => download(gpu, c)?.into_iter().map(f32::from).collect(),
                    _ => unreachable!(),
                }
            }
        };
        Ok(self.work.verify(Output::Values(&c)))
    }

    fn throughput(&self) -> Vec<Throughput> {
        self.work.throughput.clone()
    }
}
