//! creation, binary and unary on the GPU: the CPU cases' inputs, work
//! counts and references (`super::super::{elementwise, unary}`), computed
//! by the kernels of `crate::backend::cuda::kernels::source`.

use super::super::elementwise::BinOp;
use super::super::unary::{self, UnOp};
use super::{download, function, upload, workload, zeros};
use crate::backend::cuda::Gpu;
use crate::backend::cuda::kernels::grid::{ELEMENTWISE_BLOCK, elementwise_grid};
use crate::backend::cuda::kernels::random;
use crate::backend::cuda::probe::Limit;
use crate::backend::cuda::workload::GpuOp;
use crate::plan::Case;
use crate::suites::tensor::{choice, elements, seed, shape2};
use crate::suites::{Throughput, ThroughputKind, Verification, Workload};
use anyhow::Result;
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
    /// Host copies of the inputs, for the reference.
    host: Vec<Vec<f32>>,
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

fn build(gpu: Arc<Gpu>, case: &Case, kind: Kind, n: usize, host: Vec<Vec<f32>>) -> Result<Box<dyn Workload>> {
    let bytes = 4 * (n + host.iter().map(Vec::len).sum::<usize>()) as u64;
    super::check_fits(&gpu, case, bytes)?;
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
    let op = Elementwise { kind, f, host, dev, out, n, seed: seed(case), launches: 0 };
    workload(gpu, op, t.elapsed(), bytes)
}

/// `creation` on the GPU: zeros (cuMemsetD8Async), ones (a fill kernel)
/// and randn (tfbench's counter-based generator, `random`; not the CPU
/// case's ziggurat, so checked against its own f64 twin and the moments).
pub(super) fn prepare_creation(case: &Case, gpu: Arc<Gpu>) -> Result<Box<dyn Workload>> {
    let kind = match choice(case, "op", super::super::creation::OPS)? {
        "zeros" => Kind::Zeros,
        "ones" => Kind::Ones,
        _ => Kind::Randn,
    };
    let n = elements(case)?;
    build(gpu, case, kind, n, Vec::new())
}

/// `binary` on the GPU, with the CPU case's inputs.
pub(super) fn prepare_binary(case: &Case, gpu: Arc<Gpu>) -> Result<Box<dyn Workload>> {
    let op = super::super::elementwise::op_of(case)?;
    let (rows, cols) = shape2(case)?;
    let n = rows * cols;
    // The CPU case's operands, from the same function.
    let (a, b) = super::super::elementwise::inputs(op, rows, cols, seed(case));
    let kind = match op {
        Some(op) => Kind::Binary(op),
        None => Kind::Broadcast { cols },
    };
    build(gpu, case, kind, n, vec![a, b])
}

/// `unary` on the GPU, with the CPU case's inputs.
pub(super) fn prepare_unary(case: &Case, gpu: Arc<Gpu>) -> Result<Box<dyn Workload>> {
    let name = choice(case, "op", unary::OPS)?;
    let op = unary::ALL[unary::OPS.iter().position(|o| *o == name).unwrap_or(0)];
    let n = elements(case)?;
    build(gpu, case, Kind::Unary(op), n, vec![unary::inputs(op, n, seed(case))])
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
        Kind::Unary(op) => unary::ALL.iter().position(|o| *o == op).unwrap_or(0) as i32,
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
        let h = &self.host;
        Ok(match self.kind {
            Kind::Zeros | Kind::Ones => {
                let v = if matches!(self.kind, Kind::Zeros) { 0.0 } else { 1.0 };
                Verification::compare("every value equal to the fill value", &got, &vec![v; self.n], 0.0, 0.0)
            }
            Kind::Randn => self.check_randn(gpu, &got)?,
            Kind::Binary(op) => {
                let want: Vec<f32> =
                    h[0].iter().zip(&h[1]).map(|(&x, &y)| op.f64(x as f64, y as f64) as f32).collect();
                Verification::compare(
                    "f64 arithmetic rounded to f32, exact (IEEE + - * / on the GPU)",
                    &got,
                    &want,
                    0.0,
                    0.0,
                )
            }
            Kind::Broadcast { cols } => {
                let want: Vec<f32> = h[0]
                    .iter()
                    .enumerate()
                    .map(|(i, &x)| (x as f64 + h[1][i % cols] as f64) as f32)
                    .collect();
                Verification::compare("f64 arithmetic rounded to f32, exact", &got, &want, 0.0, 0.0)
            }
            Kind::Unary(op) => {
                let want: Vec<f32> =
                    h[0].iter().map(|&v| unary::reference_f64(op, v as f64) as f32).collect();
                let (atol, rtol) = unary::tolerance(op);
                Verification::compare(
                    format!("f64 std {op:?} over all inputs (CPU tolerance)"),
                    &got,
                    &want,
                    atol,
                    rtol,
                )
            }
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        let n = self.n as f64;
        match self.kind {
            Kind::Zeros | Kind::Ones | Kind::Randn => {
                vec![Throughput::elements(n), Throughput::bytes(4.0 * n)]
            }
            Kind::Binary(_) => {
                vec![Throughput::flops(n), Throughput::bytes(12.0 * n), Throughput::elements(n)]
            }
            Kind::Broadcast { cols } => {
                vec![
                    Throughput::flops(n),
                    Throughput::bytes(8.0 * n + 4.0 * cols as f64),
                    Throughput::elements(n),
                ]
            }
            Kind::Unary(_) => vec![Throughput::elements(n), Throughput::bytes(8.0 * n)],
        }
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
    /// ulp of values under 6); then the N(0, 1) moments over all of them,
    /// and a second launch must draw other values.
    fn check_randn(&mut self, gpu: &Gpu, got: &[f32]) -> Result<Verification> {
        let seed = self.launch_seed();
        let idx: Vec<usize> = if got.len() <= 1 << 20 {
            (0..got.len()).collect()
        } else {
            super::super::reference::sample_indices(got.len(), 1 << 16, seed)
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
        let moments = super::super::reference::check_standard_normal(got, 1);
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
