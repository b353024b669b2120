//! Fills, binary, broadcast and unary ops on the GPU: the suite's inputs,
//! work counts and checks (`TensorWork`), computed by the kernels of
//! `crate::backend::cuda::kernels::source`.

use super::{download, function, upload, workload, zeros};
use crate::backend::cuda::Gpu;
use crate::backend::cuda::kernels::grid::{ELEMENTWISE_BLOCK, elementwise_grid};
use crate::backend::cuda::kernels::random;
use crate::backend::cuda::probe::Limit;
use crate::backend::cuda::workload::GpuOp;
use crate::backend::ops::{BinOp, Fill, Output, TensorOp, TensorWork, UnOp};
use crate::workload::{Throughput, ThroughputKind, Verification, Workload};
use anyhow::{Result, bail};
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// What one elementwise case computes.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Zeros,
    Ones,
    /// Standard normals from the counter-based kernel, fresh every launch.
    Randn,
    Binary(BinOp),
    Broadcast {
        cols: usize,
    },
    Unary(UnOp),
}

struct Elementwise {
    kind: Kind,
    /// The kernel (none for zeros: a memset).
    f: Option<CudaFunction>,
    /// The suite's description: the host inputs (for its check), the
    /// check and the work counts.
    work: TensorWork,
    dev: Vec<CudaSlice<f32>>,
    out: CudaSlice<f32>,
    n: usize,
    /// randn: the case's seed and the launches so far (each launch draws
    /// with its own seed, as the CPU case does each iteration).
    seed: u64,
    launches: u64,
}

fn config(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (elementwise_grid(n), 1, 1),
        block_dim: (ELEMENTWISE_BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Prepares a fill (zeros: cuMemsetD8Async; ones: a fill kernel; randn:
/// tfbench's counter-based generator, `random`, not the CPU case's
/// ziggurat, so checked against its own f64 twin first), a binary, a
/// broadcast add or a unary op, on the suite's inputs.
pub(super) fn prepare(work: TensorWork, gpu: Arc<Gpu>) -> Result<Box<dyn Workload>> {
    let host = &work.inputs.values;
    let (kind, n, seed) = match work.op {
        TensorOp::Fill { value: Fill::Zeros, len } => (Kind::Zeros, len, 0),
        TensorOp::Fill { value: Fill::Ones, len } => (Kind::Ones, len, 0),
        TensorOp::Fill { value: Fill::Randn { seed }, len } => (Kind::Randn, len, seed),
        TensorOp::Binary(op) => (Kind::Binary(op), operand(&work, 2)?, 0),
        TensorOp::BroadcastAdd { cols } => (Kind::Broadcast { cols }, operand(&work, 2)?, 0),
        TensorOp::Unary(op) => (Kind::Unary(op), operand(&work, 1)?, 0),
        other => bail!("{}: {} is not an elementwise op", work.id, other.name()),
    };
    let bytes = 4 * (n + host.iter().map(Vec::len).sum::<usize>()) as u64;
    super::check_fits(&gpu, &work.id, bytes)?;
    let t = std::time::Instant::now();
    let name = match kind {
        Kind::Zeros => None,
        Kind::Ones => Some("fill_f32"),
        Kind::Randn => Some("randn_f32"),
        Kind::Binary(_) => Some("binary_f32"),
        Kind::Broadcast { .. } => Some("broadcast_add_f32"),
        Kind::Unary(_) => Some("unary_f32"),
    };
    let f = name.map(|name| function(&gpu, name)).transpose()?.map(|(f, _)| f);
    let dev = host.iter().map(|h| upload(&gpu, h)).collect::<Result<Vec<_>>>()?;
    let out = zeros(&gpu, n)?;
    gpu.sync()?;
    let op = Elementwise { kind, f, work, dev, out, n, seed, launches: 0 };
    workload(gpu, op, t.elapsed(), bytes)
}

/// The output length of an op on `count` operands: the first operand's,
/// after checking the description has them (a broadcast's row divides it).
fn operand(work: &TensorWork, count: usize) -> Result<usize> {
    let v = &work.inputs.values;
    let ok = v.len() == count
        && match work.op {
            TensorOp::BroadcastAdd { cols } => {
                cols > 0 && v[1].len() == cols && v[0].len().is_multiple_of(cols)
            }
            _ => v.iter().all(|x| x.len() == v[0].len()),
        };
    if !ok {
        bail!("{}: {} needs {count} operands of matching sizes", work.id, work.op.name());
    }
    Ok(v[0].len())
}

/// The kernel's op code (the `switch` in the CUDA source).
fn code(kind: Kind) -> i32 {
    match kind {
        Kind::Binary(op) => match op {
            BinOp::Add => 0,
            BinOp::Sub => 1,
            BinOp::Mul => 2,
            BinOp::Div => 3,
        },
        Kind::Unary(op) => UnOp::ALL.iter().position(|o| *o == op).unwrap_or(0) as i32,
        _ => 0,
    }
}

impl GpuOp for Elementwise {
    fn limit(&self) -> Option<(Limit, ThroughputKind)> {
        Some((Limit::DeviceCopy, ThroughputKind::Bytes))
    }

    fn launch(&mut self, gpu: &Gpu) -> Result<()> {
        let n = self.n as u64;
        let cfg = config(self.n);
        let Some(f) = &self.f else {
            return gpu.stream.memset_zeros(&mut self.out).map_err(|e| gpu.err("memset", e));
        };
        let op = code(self.kind);
        let one = 1.0f32;
        let cols = match self.kind {
            Kind::Broadcast { cols } => cols as u64,
            _ => 0,
        };
        self.launches += 1;
        let seed = self.launch_seed();
        let mut b = gpu.stream.launch_builder(f);
        match self.kind {
            Kind::Zeros => unreachable!("zeros has no kernel"),
            Kind::Ones => b.arg(&mut self.out).arg(&n).arg(&one),
            Kind::Randn => b.arg(&mut self.out).arg(&n).arg(&seed),
            Kind::Binary(_) => b.arg(&self.dev[0]).arg(&self.dev[1]).arg(&mut self.out).arg(&n).arg(&op),
            Kind::Broadcast { .. } => {
                b.arg(&self.dev[0]).arg(&self.dev[1]).arg(&mut self.out).arg(&n).arg(&cols)
            }
            Kind::Unary(_) => b.arg(&self.dev[0]).arg(&mut self.out).arg(&n).arg(&op),
        };
        // SAFETY: the arguments match the kernel's signature in the source,
        // and every buffer holds `n` values (the row of a broadcast `cols`).
        unsafe { b.launch(cfg) }.map_err(|e| gpu.err("launch", e))?;
        Ok(())
    }

    fn verify(&mut self, gpu: &Gpu) -> Result<Verification> {
        // A NaN sentinel first, so an output the kernel never wrote fails.
        let nan = vec![f32::NAN; self.n];
        gpu.stream.memcpy_htod(&nan, &mut self.out).map_err(|e| gpu.err("upload", e))?;
        self.launch(gpu)?;
        let got = download(gpu, &self.out)?;
        Ok(match self.kind {
            Kind::Randn => self.check_randn(gpu, &got)?,
            _ => self.work.verify(Output::Values(&got)),
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        self.work.throughput.clone()
    }
}

impl Elementwise {
    /// The seed of the latest launch (randn).
    fn launch_seed(&self) -> u64 {
        self.seed.wrapping_add(self.launches.wrapping_mul(0xd1b5_4a32_d192_ed03))
    }

    /// randn's output `got` (of the latest launch) against the f64 twin of
    /// the generator: every value up to 1M, else 65 536 sampled ones,
    /// within the accuracy of f32 `logf`, `sqrtf` and `sincospif` (a few
    /// ulp of values under 6); then the suite's check (the N(0, 1) moments
    /// over all of them), and a second launch must draw other values. The
    /// twin is this backend's own reference: the generator is not the
    /// CPU's, so only its statistics are the suite's to check.
    fn check_randn(&mut self, gpu: &Gpu, got: &[f32]) -> Result<Verification> {
        let seed = self.launch_seed();
        let idx: Vec<usize> = if got.len() <= 1 << 20 {
            (0..got.len()).collect()
        } else {
            crate::util::sample_indices(got.len(), 1 << 16, seed)
        };
        let g: Vec<f32> = idx.iter().map(|&i| got[i]).collect();
        let want: Vec<f32> = idx.iter().map(|&i| random::normal_f64(seed, i as u64) as f32).collect();
        let twin = Verification::compare(
            format!("f64 Box-Muller of the kernel's own uniforms at {} of {} values", idx.len(), got.len()),
            &g,
            &want,
            4e-6,
            1e-5,
        );
        if !twin.passed {
            return Ok(twin);
        }
        let moments = self.work.verify(Output::Values(got));
        if !moments.passed {
            return Ok(moments);
        }
        self.launch(gpu)?;
        let again = download(gpu, &self.out)?;
        if again[..again.len().min(64)] == got[..got.len().min(64)] {
            return Ok(Verification::check(&twin.reference, false, "two launches drew identical values"));
        }
        Ok(Verification { detail: format!("{}; {}", twin.detail, moments.detail), ..twin })
    }
}
