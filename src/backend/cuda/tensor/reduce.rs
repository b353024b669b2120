//! Reductions on the GPU: sum, mean, max and argmax in one launch (block
//! partials, then the last block to finish adds them), softmax and
//! layernorm with one block per row. Inputs, work counts and checks are
//! the suite's (`TensorWork`); the bound of a sum's error follows this
//! kernel's addition tree, reported with the sum ([`Output::Sum`]).

use super::{download, function, upload, workload, zeros};
use crate::backend::cuda::Gpu;
use crate::backend::cuda::kernels::grid::{reduce_grid, sum_error_levels};
use crate::backend::cuda::kernels::source::{REDUCE_BLOCK, ROW_BLOCK};
use crate::backend::cuda::probe::Limit;
use crate::backend::cuda::workload::GpuOp;
use crate::backend::ops::{Output, ReduceOp as Op, TensorOp, TensorWork};
use crate::workload::{Throughput, ThroughputKind, Verification, Workload};
use anyhow::{Result, bail};
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use std::sync::Arc;

struct Reduce {
    op: Op,
    rows: usize,
    cols: usize,
    eps: f32,
    f: CudaFunction,
    /// The suite's description: x, gamma and beta on the host (for its
    /// check), the check and the work counts.
    work: TensorWork,
    x: CudaSlice<f32>,
    /// gamma and beta (layernorm), else empty.
    params: Vec<CudaSlice<f32>>,
    /// Row outputs (softmax, layernorm), or the first pass's partials.
    out: CudaSlice<f32>,
    /// The final value (sum, mean, max, argmax's value).
    scalar: CudaSlice<f32>,
    /// argmax's partial and final indices.
    idx: CudaSlice<u64>,
    idx_final: CudaSlice<u64>,
    /// The reductions' ticket: which block finishes last (zero between launches).
    ticket: CudaSlice<u32>,
    grid: u32,
}

pub(super) fn prepare(work: TensorWork, gpu: Arc<Gpu>) -> Result<Box<dyn Workload>> {
    let TensorOp::Reduce { op, rows, cols, eps } = work.op else {
        bail!("{}: {} is not a reduction", work.id, work.op.name());
    };
    let n = rows * cols;
    let params_len = if op == Op::LayerNorm { cols } else { 0 };
    let v = &work.inputs.values;
    if v.len() != 3 || v[0].len() != n || n == 0 || v[1].len() != params_len || v[2].len() != params_len {
        bail!("{}: a reduction takes x ({rows}x{cols}), gamma and beta", work.id);
    }
    let (x_host, gamma_host, beta_host) = (&v[0], &v[1], &v[2]);
    let rowwise = matches!(op, Op::Softmax | Op::LayerNorm);
    let grid = if rowwise { u32::try_from(rows)? } else { reduce_grid(n) };
    let out_len = if rowwise { n } else { grid as usize };
    let bytes = (4 * (n + out_len + 2 * gamma_host.len() + 2) + 8 * (grid as usize + 1)) as u64;
    super::check_fits(&gpu, &work.id, bytes)?;
    let t = std::time::Instant::now();
    let name = match op {
        Op::Sum | Op::Mean | Op::Max => "reduce_f32",
        Op::Argmax => "argmax_f32",
        Op::Softmax => "softmax_rows_f32",
        Op::LayerNorm => "layernorm_rows_f32",
    };
    let (f, _) = function(&gpu, name)?;
    let x = upload(&gpu, x_host)?;
    let params = if op == Op::LayerNorm {
        vec![upload(&gpu, gamma_host)?, upload(&gpu, beta_host)?]
    } else {
        Vec::new()
    };
    let out = zeros(&gpu, out_len)?;
    let scalar = zeros(&gpu, 1)?;
    let (idx, idx_final) = (zeros(&gpu, grid as usize)?, zeros(&gpu, 1)?);
    let ticket = zeros(&gpu, 1)?;
    gpu.sync()?;
    let r = Reduce { op, rows, cols, eps, f, work, x, params, out, scalar, idx, idx_final, ticket, grid };
    workload(gpu, r, t.elapsed(), bytes)
}

fn cfg(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 }
}

impl GpuOp for Reduce {
    fn limit(&self) -> Option<(Limit, ThroughputKind)> {
        Some((Limit::DeviceCopy, ThroughputKind::Bytes))
    }

    fn launch(&mut self, gpu: &Gpu) -> Result<()> {
        let n = (self.rows * self.cols) as u64;
        let cols = self.cols as u64;
        let (kind, scale) = match self.op {
            Op::Max => (1i32, 1.0f32),
            Op::Mean => (0, 1.0 / n as f32),
            _ => (0, 1.0),
        };
        let eps = self.eps;
        let s = &gpu.stream;
        let e = |e| gpu.err("launch", e);
        // SAFETY (every launch below): arguments match the kernel signatures
        // in the source; buffers hold n inputs, `grid` partials, rows x cols outputs.
        match self.op {
            Op::Sum | Op::Mean | Op::Max => {
                let mut b = s.launch_builder(&self.f);
                b.arg(&self.x).arg(&mut self.out).arg(&mut self.scalar).arg(&n).arg(&kind).arg(&scale);
                b.arg(&mut self.ticket);
                unsafe { b.launch(cfg(self.grid, REDUCE_BLOCK)) }.map_err(e)?;
            }
            Op::Argmax => {
                let mut b = s.launch_builder(&self.f);
                b.arg(&self.x).arg(&mut self.out).arg(&mut self.idx).arg(&mut self.scalar);
                b.arg(&mut self.idx_final).arg(&n).arg(&mut self.ticket);
                unsafe { b.launch(cfg(self.grid, REDUCE_BLOCK)) }.map_err(e)?;
            }
            Op::Softmax => {
                let mut b = s.launch_builder(&self.f);
                b.arg(&self.x).arg(&mut self.out).arg(&cols);
                unsafe { b.launch(cfg(self.grid, ROW_BLOCK)) }.map_err(e)?;
            }
            Op::LayerNorm => {
                let mut b = s.launch_builder(&self.f);
                b.arg(&self.x)
                    .arg(&self.params[0])
                    .arg(&self.params[1])
                    .arg(&mut self.out)
                    .arg(&cols)
                    .arg(&eps);
                unsafe { b.launch(cfg(self.grid, ROW_BLOCK)) }.map_err(e)?;
            }
        }
        Ok(())
    }

    fn verify(&mut self, gpu: &Gpu) -> Result<Verification> {
        let nan = vec![f32::NAN; self.out.len()];
        gpu.stream.memcpy_htod(&nan, &mut self.out).map_err(|e| gpu.err("upload", e))?;
        gpu.stream.memcpy_htod(&[f32::NAN], &mut self.scalar).map_err(|e| gpu.err("upload", e))?;
        self.launch(gpu)?;
        Ok(match self.op {
            Op::Sum | Op::Mean => {
                let value = download(gpu, &self.scalar)?[0] as f64;
                let levels = sum_error_levels(self.rows * self.cols, self.grid, REDUCE_BLOCK);
                self.work.verify(Output::Sum { value, levels })
            }
            Op::Max | Op::Argmax => {
                let value = download(gpu, &self.scalar)?[0];
                let index =
                    if self.op == Op::Argmax { Some(download(gpu, &self.idx_final)?[0]) } else { None };
                self.work.verify(Output::Max { value, index })
            }
            Op::Softmax | Op::LayerNorm => self.work.verify(Output::Values(&download(gpu, &self.out)?)),
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        self.work.throughput.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `argmax_f32` on `x`: (value, index).
    fn gpu_argmax(gpu: &Gpu, x: &[f32]) -> (f32, u64) {
        let grid = reduce_grid(x.len());
        let (f, _) = function(gpu, "argmax_f32").unwrap();
        let xd = upload(gpu, x).unwrap();
        let (mut pv, mut pi) =
            (zeros::<f32>(gpu, grid as usize).unwrap(), zeros::<u64>(gpu, grid as usize).unwrap());
        let (mut v, mut i) = (zeros::<f32>(gpu, 1).unwrap(), zeros::<u64>(gpu, 1).unwrap());
        let mut ticket = zeros::<u32>(gpu, 1).unwrap();
        let n = x.len() as u64;
        let mut b = gpu.stream.launch_builder(&f);
        b.arg(&xd).arg(&mut pv).arg(&mut pi).arg(&mut v).arg(&mut i).arg(&n).arg(&mut ticket);
        // SAFETY: the arguments match argmax_f32's signature; the partials
        // hold `grid` entries.
        unsafe { b.launch(cfg(grid, REDUCE_BLOCK)) }.unwrap();
        (download(gpu, &v).unwrap()[0], download(gpu, &i).unwrap()[0])
    }

    #[test]
    fn argmax_takes_the_first_of_equal_maxima_in_lanes_threads_blocks_and_the_tail() {
        let gpu = match crate::backend::cuda::gpu(0) {
            Ok(g) => g,
            Err(why) => {
                // The suite's skip path names the same reason.
                assert_eq!(crate::backend::cuda::availability(0).err().as_deref(), Some(why.as_str()));
                eprintln!("no GPU here: {why}");
                return;
            }
        };
        // 16M + 3 values: every block and thread takes part, plus a scalar tail.
        let n = (16 << 20) + 3;
        let base: Vec<f32> = (0..n).map(|i| ((i * 2_654_435_761usize) % 1000) as f32 * 1e-3).collect();
        // (positions of the equal maxima, the index argmax must return)
        let cases: [(&[usize], usize); 5] = [
            (&[7, 5, 6], 5),                              // lanes of one float4
            (&[4 * 200 + 1, 4 * 3 + 2], 14),              // two threads of one block
            (&[n - 1, 9_000_000, 12_345_677], 9_000_000), // threads of other blocks, and the tail
            (&[n - 2, n - 1], n - 2),                     // the tail alone
            (&[0, n - 1], 0),
        ];
        for (at, want) in cases {
            let mut x = base.clone();
            for &i in at {
                x[i] = 5.0;
            }
            let (v, i) = gpu_argmax(&gpu, &x);
            assert_eq!((v, i), (5.0, want as u64), "maxima at {at:?}");
            // A plain first-maximum loop (the suite's reference) agrees.
            let first = (0..n).fold(0, |best, i| if x[i] > x[best] { i } else { best });
            assert_eq!(first, want, "the CPU reference agrees");
        }
    }
}
