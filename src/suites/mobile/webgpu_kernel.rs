//! `webgpu_kernel`: the WGSL kernels (src/backend/webgpu/kernels) on the
//! case's WebGPU adapter, on the same inputs, against the same f64
//! references and beside the same native code as `wasm_kernel`'s ops of the
//! same names. A benchmark of its own, not a device of `wasm_kernel`: that
//! grid is keyed by `simd` (scalar or SIMD128), which means nothing on a
//! GPU, and covers ops the WGSL kernels do not.

use super::wasm_kernel::{self, Problem};
use crate::backend::Device;
use crate::backend::webgpu::{self, Op, Program};
use crate::plan::Case;
use crate::suites::{Metric, Throughput, Verification, Workload};
use anyhow::{Result, bail};
use std::time::Instant;

/// The tolerance (absolute, relative) of `op` on a GPU. add: exact (WGSL's
/// `+` is correctly rounded); gemm: `wasm_kernel`'s (f32 sums of K
/// products, fused or not); softmax: 2e-5 relative, since WGSL's `exp` may
/// be off by 3 + 2|x| ULP (|x| <= 8 here: about 1e-6 per term) where
/// wasm_kernel's is computed exactly in the module.
fn tolerance(op: Op, wasm: (f64, f64)) -> (f64, f64) {
    match op {
        Op::Add { .. } => (0.0, 0.0),
        Op::Gemm { .. } => wasm,
        Op::Softmax { .. } => (1e-7, 2e-5),
    }
}

/// A kernel case prepared on its adapter: compiled, inputs uploaded.
pub struct WebGpuKernel {
    prog: Program,
    op: Op,
    p: Problem,
}

/// Prepares `webgpu_kernel` on the case's WebGPU device.
pub fn prepare(case: &Case) -> Result<Box<dyn Workload>> {
    let Device::WebGpu(adapter) = case.device else {
        bail!("case {}: webgpu_kernel runs on a WebGPU device (--device webgpu or webgpu:N)", case.id)
    };
    let name = case.str("op")?;
    if !webgpu::OPS.contains(&name.as_str()) {
        bail!("case {}: op must be one of {}", case.id, webgpu::OPS.join(", "));
    }
    let (key, _) = wasm_kernel::size_param(&name);
    let dims = case.shape(key)?;
    let op = Op::parse(&name, &dims).map_err(|e| anyhow::anyhow!("case {}: {e}", case.id))?;
    let p = wasm_kernel::problem(&name, &dims, 47)?;
    let inputs: Vec<Vec<f32>> = p.inputs.iter().map(|(_, b)| wasm_kernel::f32s(b)).collect();
    let refs: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
    let prog = Program::load(adapter, op, &refs)?;
    Ok(Box::new(WebGpuKernel { prog, op, p }))
}

impl WebGpuKernel {
    /// Per-dispatch time (submitted and waited for), the native code's, and
    /// their ratio.
    fn ratios(&mut self) -> Result<Vec<Metric>> {
        let prog = &mut self.prog;
        let own = wasm_kernel::per_call(|k| {
            let t = Instant::now();
            prog.dispatch(k)?;
            Ok(t.elapsed().as_nanos() as f64)
        })?;
        let native = &mut self.p.native;
        let native_ns = wasm_kernel::per_call(|k| {
            let t = Instant::now();
            for _ in 0..k {
                native();
            }
            Ok(t.elapsed().as_nanos() as f64)
        })?;
        let t = Instant::now();
        self.prog.read_output()?;
        let readback = t.elapsed().as_nanos() as f64;
        Ok(vec![
            Metric::new("execute_ns", own, "ns"),
            Metric::new("readback_ns", readback, "ns"),
            Metric::new("native_ns", native_ns, "ns"),
            Metric::new("webgpu_native_ratio", own / native_ns, "ratio"),
        ])
    }
}

impl Workload for WebGpuKernel {
    fn verify(&mut self) -> Result<Verification> {
        self.prog.dispatch(1)?;
        let got = self.prog.read_output()?;
        let want: Vec<f32> = self.p.want.iter().map(|&v| v as f32).collect();
        let (atol, rtol) = tolerance(self.op, self.p.tolerance);
        let a = self.prog.adapter();
        let emulated = if a.emulated { ", CPU-emulated: the host CPU's figures" } else { "" };
        Ok(Verification::compare(
            format!("f64 reference of {} in Rust; on {} ({}{emulated})", self.op.name(), a.name, a.backend),
            &got,
            &want,
            atol,
            rtol,
        ))
    }
    fn throughput(&self) -> Vec<Throughput> {
        self.p.throughput.clone()
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        self.prog.dispatch(iters)
    }
    fn set_time_limit(&mut self, limit: std::time::Duration) {
        self.prog.set_time_limit(limit);
    }
    fn metrics(&mut self) -> Vec<Metric> {
        let ph = self.prog.phases();
        let mut m = vec![
            Metric::new("compile_ns", ph.compile_ns, "ns"),
            Metric::new("upload_ns", ph.upload_ns, "ns"),
            Metric::new("cpu_emulated", f64::from(u8::from(self.prog.adapter().emulated)), "bool"),
        ];
        match self.ratios() {
            Ok(r) => m.extend(r),
            Err(e) => eprintln!("webgpu_kernel {}: ratios not measured: {e:#}", self.op.name()),
        }
        m
    }
}
