//! `gpu_gemm` and `gpu_bmm`: row-major `C = A B` through cuBLAS in f32
//! (no TF32), tf32, f16 and bf16, accumulating in f32; verified on sampled
//! entries against f64 dot products of the stored inputs, as the CPU GEMMs
//! are (`super::super::matmul::check_product_with`), with each type's
//! tolerance (`GemmDtype::tolerance`).

use super::{download, upload, workload, zeros};
use crate::backend::cuda::Gpu;
use crate::backend::cuda::kernels::gemm::{self as cugemm, Batch, ColMajorGemm, GemmDtype};
use crate::backend::cuda::probe::Limit;
use crate::backend::cuda::workload::GpuOp;
use crate::plan::Case;
use crate::suites::tensor::{choice, seed};
use crate::suites::{Throughput, ThroughputKind, Verification, Workload};
use crate::util;
use anyhow::{Result, bail};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use std::sync::Arc;

pub(in crate::suites::tensor) use cugemm::DTYPES;

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
    /// The inputs as stored on the GPU, widened to f32 (exactly), for the reference.
    a: Vec<f32>,
    b: Vec<f32>,
    bufs: Buffers,
    seed: u64,
}

/// Prepares a GEMM (`batched`: `BATCHxMxKxN`, else `MxKxN`).
pub(super) fn prepare(case: &Case, gpu: Arc<Gpu>, batched: bool) -> Result<Box<dyn Workload>> {
    let dtype = GemmDtype::parse(choice(case, "dtype", DTYPES)?)?;
    let shape = case.shape("shape")?;
    let (batch, m, k, n) = match (batched, shape.as_slice()) {
        (false, &[m, k, n]) => (1, m, k, n),
        (true, &[bt, m, k, n]) => (bt, m, k, n),
        _ => bail!("case {}: shape must be {}", case.id, if batched { "BATCHxMxKxN" } else { "MxKxN" }),
    };
    let elems = batch * (m * k + k * n + m * n);
    let bytes = (elems * dtype.bytes()) as u64;
    super::check_fits(&gpu, case, bytes)?;
    let t = std::time::Instant::now();
    let blas = gpu.blas()?;
    let s = seed(case);
    let a: Vec<f32> = util::randn(batch * m * k, s).into_iter().map(|x| dtype.store(x)).collect();
    let b: Vec<f32> = util::randn(batch * k * n, s ^ 1).into_iter().map(|x| dtype.store(x)).collect();
    let bufs = match dtype {
        GemmDtype::F32 | GemmDtype::Tf32 => {
            Buffers::F32(upload(&gpu, &a)?, upload(&gpu, &b)?, zeros(&gpu, batch * m * n)?)
        }
        GemmDtype::F16 => {
            let h = |v: &[f32]| v.iter().map(|&x| half::f16::from_f32(x)).collect::<Vec<_>>();
            Buffers::F16(upload(&gpu, &h(&a))?, upload(&gpu, &h(&b))?, zeros(&gpu, batch * m * n)?)
        }
        GemmDtype::Bf16 => {
            let h = |v: &[f32]| v.iter().map(|&x| half::bf16::from_f32(x)).collect::<Vec<_>>();
            Buffers::Bf16(upload(&gpu, &h(&a))?, upload(&gpu, &h(&b))?, zeros(&gpu, batch * m * n)?)
        }
    };
    let call = cugemm::row_major(m, k, n, false, false)?;
    let strides = if batched { Some(Batch::packed(batch, m, k, n)?) } else { None };
    let mut g = Gemm { dtype, batch, dims: (m, k, n), call, strides, blas, a, b, bufs, seed: s };
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
        let (m, k, n) = self.dims;
        let samples = if self.batch == 1 { 64 } else { 16 };
        let dt = self.dtype;
        let (mut got, mut want, mut tol, mut labels) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for t in 0..self.batch {
            let ch = super::super::matmul::check_product_with(
                &self.a[t * m * k..(t + 1) * m * k],
                &self.b[t * k * n..(t + 1) * k * n],
                &c[t * m * n..(t + 1) * m * n],
                self.dims,
                samples,
                self.seed ^ t as u64,
                |abs, w| dt.tolerance(k, abs, w),
            );
            got.extend(ch.got);
            want.extend(ch.want);
            tol.extend(ch.tol);
            labels.extend(ch.entries.into_iter().map(|(i, j)| (t, i, j)));
        }
        let what = if m * k * n <= 1 << 24 {
            "every entry".to_string()
        } else {
            format!("{samples} sampled entries")
        };
        Ok(super::super::reference::compare_bounded(
            format!("f64 dot products of the stored {dt:?} inputs, {what} per batch item ({dt:?} tolerance)"),
            &got,
            &want,
            &tol,
            |x| {
                let (t, i, j) = labels[x];
                format!("C[{t}][{i},{j}]")
            },
        ))
    }

    fn throughput(&self) -> Vec<Throughput> {
        let (m, k, n) = self.dims;
        let bt = self.batch as f64;
        vec![
            Throughput::flops(2.0 * bt * (m * n * k) as f64),
            Throughput::bytes(bt * (self.dtype.bytes() * (m * k + k * n + m * n)) as f64),
        ]
    }
}
