//! creation, binary and unary on the GPU: the CPU cases' inputs, work
//! counts and references (`super::super::{elementwise, unary}`), computed
//! by the kernels of `crate::kernels::cuda::source`.

use super::super::elementwise::BinOp;
use super::super::unary::{self, UnOp};
use super::{download, function, upload, workload, zeros};
use crate::cuda::Gpu;
use crate::cuda::probe::Limit;
use crate::cuda::workload::GpuOp;
use crate::kernels::cuda::grid::{ELEMENTWISE_BLOCK, elementwise_grid};
use crate::plan::Case;
use crate::suites::tensor::{choice, elements, seed, shape2};
use crate::suites::{Throughput, ThroughputKind, Verification, Workload, skip};
use anyhow::Result;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// What one elementwise case computes.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Zeros,
    Ones,
    Binary(BinOp),
    Broadcast { cols: usize },
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
        Kind::Binary(_) => Some("binary_f32"),
        Kind::Broadcast { .. } => Some("broadcast_add_f32"),
        Kind::Unary(_) => Some("unary_f32"),
    };
    let f = name.map(|name| function(&gpu, name)).transpose()?.map(|(f, _)| f);
    let dev = host.iter().map(|h| upload(&gpu, h)).collect::<Result<Vec<_>>>()?;
    let out = zeros(&gpu, n)?;
    gpu.sync()?;
    let op = Elementwise { kind, f, host, dev, out, n };
    workload(gpu, op, t.elapsed(), bytes)
}

/// `creation` on the GPU: zeros (cuMemsetD8Async) and ones (a fill
/// kernel); randn is skipped: no GPU random generator is built in.
pub(super) fn prepare_creation(case: &Case, gpu: Arc<Gpu>) -> Result<Box<dyn Workload>> {
    let kind = match choice(case, "op", super::super::creation::OPS)? {
        "zeros" => Kind::Zeros,
        "ones" => Kind::Ones,
        _ => {
            return Err(skip(format!(
                "{}: randn has no GPU kernel yet (cuRAND is not in the build)",
                case.id
            )));
        }
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
        let mut b = gpu.stream.launch_builder(f);
        match self.kind {
            Kind::Zeros => unreachable!("zeros has no kernel"),
            Kind::Ones => b.arg(&mut self.out).arg(&n).arg(&one),
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
            Kind::Zeros | Kind::Ones => vec![Throughput::elements(n), Throughput::bytes(4.0 * n)],
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
