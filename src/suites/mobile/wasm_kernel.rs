//! `wasm_kernel`: the WebAssembly kernels (src/backend/wasm/kernels) in the
//! case's runtime, verified against f64 references and compared with
//! tfbench's native code for the same operation.

use crate::backend::Device;
use crate::backend::wasm::{self, Arg, Instance, Ret};
use crate::isa::{self, IsaLevel};
use crate::kernels::{self, Layout};
use crate::plan::Case;
use crate::suites::{Metric, Throughput, Verification, Workload};
use anyhow::{Result, bail};
use std::time::Instant;

/// The `op` parameter's values.
pub const OPS: &[&str] = &["add", "mul", "dot", "dot_i8", "gemm", "softmax", "layernorm", "gelu"];
/// The `simd` parameter's values.
pub const VARIANTS: &[&str] = &["scalar", "simd"];

/// The parameter holding `op`'s size and its dimensions: `n`, `rows`
/// (ROWSxCOLS) or `shape` (MxKxN).
pub fn size_param(op: &str) -> (&'static str, usize) {
    match op {
        "gemm" => ("shape", 3),
        "softmax" | "layernorm" => ("rows", 2),
        _ => ("n", 1),
    }
}

/// What the native counterpart's code is, for the 128-bit comparison.
#[derive(Clone, Copy, PartialEq)]
enum Native {
    /// tfbench's kernel dispatched on the ISA cap (softmax, layernorm): it
    /// is timed as the cap stands and capped at `scalar` (SSE2, 128-bit).
    Dispatched,
    /// A Rust loop built for x86-64's baseline (SSE2): 128-bit already.
    Baseline,
    /// The `gemm` crate, which dispatches on the CPU itself and ignores the
    /// cap: its widest path only, no 128-bit figure.
    WidestOnly,
}

/// What one case computes: its inputs, the export's arguments, where the
/// output lies and the reference (shared with `webgpu_kernel`, which runs
/// the same inputs against the same reference and native code).
pub(super) struct Problem {
    native_kind: Native,
    module: &'static str,
    /// Each input's offset in linear memory and its bytes, in argument order.
    pub(super) inputs: Vec<(usize, Vec<u8>)>,
    args: Vec<Arg>,
    /// Output floats at this offset (`None`: the export returns the result).
    out: Option<(usize, usize)>,
    /// The f64 reference of the output.
    pub(super) want: Vec<f64>,
    /// (absolute, relative) tolerance against `want`.
    pub(super) tolerance: (f64, f64),
    /// The work of one call.
    pub(super) throughput: Vec<Throughput>,
    /// tfbench's own code for the op, one call per invocation.
    pub(super) native: Box<dyn FnMut() + Send>,
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(super) fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn ptrs(v: &[usize]) -> Vec<Arg> {
    v.iter().map(|&p| Arg::I32(p as i32)).collect()
}

/// Builds the problem of `op` at `dims`, inputs drawn from `seed`.
pub(super) fn problem(op: &str, dims: &[usize], seed: u64) -> Result<Problem> {
    let uni = |n: usize, s: u64| crate::util::uniform(n, -1.0, 1.0, seed + s);
    let n = dims[0];
    Ok(match op {
        "add" | "mul" => {
            let (a, b) = (uni(n, 1), uni(n, 2));
            let add = op == "add";
            let want = a.iter().zip(&b).map(|(&x, &y)| if add { x + y } else { x * y } as f64).collect();
            let mut out = vec![0f32; n];
            let (na, nb) = (a.clone(), b.clone());
            Problem {
                native_kind: Native::Baseline,
                module: "elementwise",
                inputs: vec![(0, bytes(&a)), (4 * n, bytes(&b))],
                args: ptrs(&[0, 4 * n, 8 * n, n]),
                out: Some((8 * n, n)),
                want,
                tolerance: (0.0, 0.0),
                throughput: vec![Throughput::elements(n as f64), Throughput::bytes(12.0 * n as f64)],
                // Two loops, so each vectorises (a function pointer would not).
                native: Box::new(move || {
                    let pairs = out.iter_mut().zip(&na).zip(&nb);
                    if add {
                        pairs.for_each(|((o, &x), &y)| *o = x + y);
                    } else {
                        pairs.for_each(|((o, &x), &y)| *o = x * y);
                    }
                    std::hint::black_box(&mut out);
                }),
            }
        }
        "dot" => {
            let (a, b) = (uni(n, 1), uni(n, 2));
            let want = vec![a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum()];
            Problem {
                native_kind: Native::Baseline,
                module: "dot",
                inputs: vec![(0, bytes(&a)), (4 * n, bytes(&b))],
                args: ptrs(&[0, 4 * n, n]),
                out: None,
                want,
                // f32 sums of n products: error grows with sqrt(n) at worst n.
                tolerance: (1e-6 * n as f64, 1e-5),
                throughput: vec![Throughput::flops(2.0 * n as f64)],
                native: Box::new(move || {
                    std::hint::black_box(lanes_dot(&a, &b));
                }),
            }
        }
        "dot_i8" => {
            let draw = |s: u64| -> Vec<i8> { uni(n, s).iter().map(|v| (v * 127.0).round() as i8).collect() };
            let (a, b) = (draw(1), draw(2));
            let exact = a.iter().zip(&b).fold(0i32, |s, (&x, &y)| s.wrapping_add(x as i32 * y as i32));
            Problem {
                native_kind: Native::Baseline,
                module: "dot",
                inputs: vec![
                    (0, a.iter().map(|&v| v as u8).collect()),
                    (n, b.iter().map(|&v| v as u8).collect()),
                ],
                args: ptrs(&[0, n, n]),
                out: None,
                want: vec![exact as f64],
                tolerance: (0.0, 0.0),
                throughput: vec![Throughput::elements(n as f64)],
                native: Box::new(move || {
                    let s = a.iter().zip(&b).fold(0i32, |s, (&x, &y)| s.wrapping_add(x as i32 * y as i32));
                    std::hint::black_box(s);
                }),
            }
        }
        "gemm" => gemm(dims, &uni)?,
        "softmax" | "layernorm" => rows(op, dims, &uni),
        "gelu" => {
            let x: Vec<f32> = uni(n, 1).iter().map(|v| v * 6.0).collect();
            let want = x
                .iter()
                .map(|&v| {
                    let v = v as f64;
                    0.5 * v
                        * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh())
                })
                .collect();
            let mut out = vec![0f32; n];
            let nx = x.clone();
            Problem {
                native_kind: Native::Baseline,
                module: "nn",
                inputs: vec![(0, bytes(&x))],
                args: ptrs(&[0, 4 * n, n]),
                out: Some((4 * n, n)),
                want,
                tolerance: (1e-6, 1e-5),
                throughput: vec![Throughput::elements(n as f64)],
                native: Box::new(move || {
                    out.iter_mut().zip(&nx).for_each(|(o, &v)| *o = kernels::activation::gelu_f32(v));
                    std::hint::black_box(&mut out);
                }),
            }
        }
        other => bail!("unknown op `{other}`; valid: {}", OPS.join(", ")),
    })
}

fn gemm(dims: &[usize], uni: &dyn Fn(usize, u64) -> Vec<f32>) -> Result<Problem> {
    let (m, k, n) = (dims[0], dims[1], dims[2]);
    let (a, b) = (uni(m * k, 1), uni(k * n, 2));
    let mut want = vec![0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let aip = a[i * k + p] as f64;
            for j in 0..n {
                want[i * n + j] += aip * b[p * n + j] as f64;
            }
        }
    }
    let (bo, co) = (4 * m * k, 4 * (m * k + k * n));
    let mut c = vec![0f32; m * n];
    let (na, nb) = (a.clone(), b.clone());
    Ok(Problem {
        native_kind: Native::WidestOnly,
        module: "gemm",
        inputs: vec![(0, bytes(&a)), (bo, bytes(&b))],
        args: ptrs(&[0, bo, co, m, k, n]),
        out: Some((co, m * n)),
        want,
        tolerance: (1e-5 * k as f64, 1e-4),
        throughput: vec![Throughput::flops(2.0 * (m * k * n) as f64)],
        native: Box::new(move || kernels::matmul(1, (m, k, n), &na, &nb, Layout::KxN, &mut c)),
    })
}

fn rows(op: &str, dims: &[usize], uni: &dyn Fn(usize, u64) -> Vec<f32>) -> Problem {
    let (r, c) = (dims[0], dims[1]);
    let x: Vec<f32> = uni(r * c, 1).iter().map(|v| v * 4.0).collect();
    let (gamma, beta) = (uni(c, 2), uni(c, 3));
    let mut want = Vec::with_capacity(r * c);
    for row in x.chunks(c) {
        let row: Vec<f64> = row.iter().map(|&v| v as f64).collect();
        if op == "softmax" {
            let max = row.iter().cloned().fold(f64::MIN, f64::max);
            let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
            want.extend(row.iter().map(|v| (v - max).exp() / sum));
        } else {
            let mean = row.iter().sum::<f64>() / c as f64;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / c as f64;
            let rstd = 1.0 / (var + 1e-5).sqrt();
            want.extend(
                row.iter().enumerate().map(|(j, v)| (v - mean) * rstd * gamma[j] as f64 + beta[j] as f64),
            );
        }
    }
    let n = r * c;
    let mut out = vec![0f32; n];
    let nx = x.clone();
    let (g2, b2) = (gamma.clone(), beta.clone());
    let softmax = op == "softmax";
    let native: Box<dyn FnMut() + Send> = Box::new(move || {
        for (o, xr) in out.chunks_mut(c).zip(nx.chunks(c)) {
            if softmax {
                kernels::softmax::softmax_row(o, xr);
            } else {
                kernels::norm::layer_norm_row(o, xr, &g2, &b2, 1e-5);
            }
        }
        std::hint::black_box(&mut out);
    });
    let (go, bo, oo) = (4 * n, 4 * (n + c), 4 * (n + 2 * c));
    let (inputs, mut args) = if softmax {
        (vec![(0, bytes(&x))], ptrs(&[0, oo, r, c]))
    } else {
        (vec![(0, bytes(&x)), (go, bytes(&gamma)), (bo, bytes(&beta))], ptrs(&[0, go, bo, oo, r, c]))
    };
    if !softmax {
        args.push(Arg::F32(1e-5));
    }
    Problem {
        native_kind: Native::Dispatched,
        module: "nn",
        inputs,
        args,
        out: Some((oo, n)),
        want,
        tolerance: if softmax { (1e-7, 1e-5) } else { (1e-5, 1e-4) },
        throughput: vec![Throughput::elements(n as f64)],
        native,
    }
}

/// A dot product with 16 independent sums, so the compiler vectorises it
/// (a single running f32 sum cannot be reordered): native code as a
/// kernel writer would give it, not a sequential loop.
fn lanes_dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for (x, y) in a.chunks_exact(16).zip(b.chunks_exact(16)) {
        for i in 0..16 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail = a.len() - a.len() % 16;
    acc.iter().sum::<f32>() + a[tail..].iter().zip(&b[tail..]).map(|(x, y)| x * y).sum::<f32>()
}

/// A kernel case prepared in its runtime.
pub struct WasmKernel {
    inst: Box<dyn Instance>,
    export: String,
    scalar_export: Option<String>,
    p: Problem,
}

/// Prepares `wasm_kernel` on the case's WebAssembly device.
pub fn prepare(case: &Case) -> Result<Box<dyn Workload>> {
    let Device::Wasm(rt) = case.device else {
        bail!("case {}: wasm_kernel runs on a wasm device (--device wasm:wasmi|wasmtime|node)", case.id)
    };
    let op = case.str("op")?;
    let variant = case.str("simd")?;
    if !VARIANTS.contains(&variant.as_str()) {
        bail!("case {}: simd must be one of {}", case.id, VARIANTS.join(", "));
    }
    let (key, rank) = size_param(&op);
    let dims = case.shape(key)?;
    if dims.len() != rank {
        bail!("case {}: {op} takes `{key}` of {rank} dimensions, got {}", case.id, dims.len());
    }
    if op == "gemm" && (dims[0] % 4 != 0 || dims[2] % 8 != 0) {
        let [m, k, n] = [dims[0], dims[1], dims[2]];
        bail!("gemm needs M a multiple of 4 and N of 8 (the SIMD form's 4x8 tile), got {m}x{k}x{n}");
    }
    let p = problem(&op, &dims, 47)?;
    let text = wasm::source(p.module).ok_or_else(|| anyhow::anyhow!("no kernel module {}", p.module))?;
    let mut inst = wasm::load(rt, &wasm::assemble(text)?)?;
    let end =
        p.inputs.iter().map(|(o, b)| o + b.len()).chain(p.out.map(|(o, n)| o + 4 * n)).max().unwrap_or(0);
    inst.ensure_memory(end)?;
    for (offset, data) in &p.inputs {
        inst.write(*offset, data)?;
    }
    let scalar_export = (variant == "simd").then(|| format!("{op}_scalar"));
    Ok(Box::new(WasmKernel { inst, export: format!("{op}_{variant}"), scalar_export, p }))
}

/// Per-call nanoseconds of `run(k)` (which runs k calls and returns the
/// nanoseconds they took): the fastest of a few batches of about 20 ms.
pub(super) fn per_call(mut run: impl FnMut(u64) -> Result<f64>) -> Result<f64> {
    let one = run(1)?.max(1.0);
    let k = ((2e7 / one) as u64).clamp(1, 100_000);
    let reps = if one > 1e8 { 1 } else { 3 };
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        best = best.min(run(k)? / k as f64);
    }
    Ok(best)
}

impl WasmKernel {
    /// Per-call time of `export` in the runtime (Node.js: its own clock).
    fn time_export(&mut self, export: &str) -> Result<f64> {
        let (inst, args) = (&mut self.inst, &self.p.args);
        per_call(|k| {
            let t = Instant::now();
            inst.call(export, args, k)?;
            let wall = t.elapsed().as_nanos() as f64;
            Ok(inst.last_exec_ns().unwrap_or(wall))
        })
    }

    fn time_native(&mut self, cap: Option<IsaLevel>) -> Result<f64> {
        let native = &mut self.p.native;
        let _guard = cap.map(isa::override_cap);
        per_call(|k| {
            let t = Instant::now();
            for _ in 0..k {
                native();
            }
            Ok(t.elapsed().as_nanos() as f64)
        })
    }

    fn ratios(&mut self) -> Result<Vec<Metric>> {
        let own = self.time_export(&self.export.clone())?;
        let native = self.time_native(None)?;
        // Native code of SIMD128's vector width: tfbench's portable code,
        // which x86-64's baseline compiles with SSE2.
        let native128 = match self.p.native_kind {
            Native::Dispatched => Some(self.time_native(Some(IsaLevel::Scalar))?),
            Native::Baseline => Some(native),
            Native::WidestOnly => None,
        };
        let mut m = vec![
            Metric::new("execute_ns", own, "ns"),
            Metric::new("native_ns", native, "ns"),
            Metric::new("wasm_native_ratio", own / native, "ratio"),
        ];
        if let Some(n128) = native128 {
            m.push(Metric::new("native_128bit_ns", n128, "ns"));
            m.push(Metric::new("wasm_native_128bit_ratio", own / n128, "ratio"));
        }
        if let Some(scalar) = self.scalar_export.clone() {
            let s = self.time_export(&scalar)?;
            m.push(Metric::new("scalar_execute_ns", s, "ns"));
            m.push(Metric::new("simd_speedup", s / own, "ratio"));
        }
        Ok(m)
    }
}

impl Workload for WasmKernel {
    fn verify(&mut self) -> Result<Verification> {
        let ret = self.inst.call(&self.export, &self.p.args, 1)?;
        let got: Vec<f32> = match (self.p.out, ret) {
            (Some((offset, n)), _) => f32s(&self.inst.read(offset, 4 * n)?),
            (None, Ret::F32(v)) => vec![v],
            (None, Ret::I32(v)) => vec![v as f32],
            (None, Ret::None) => bail!("`{}` returned nothing", self.export),
        };
        if let (None, Ret::I32(v)) = (self.p.out, ret) {
            return Ok(Verification::equal(
                "wrapping i32 sum of the int8 products in Rust",
                &(v as f64),
                &self.p.want[0],
            ));
        }
        let want: Vec<f32> = self.p.want.iter().map(|&v| v as f32).collect();
        let (atol, rtol) = self.p.tolerance;
        Ok(Verification::compare(
            format!("f64 reference of {} in Rust", self.export),
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
        self.inst.call(&self.export, &self.p.args, iters).map(|_| ())
    }
    fn metrics(&mut self) -> Vec<Metric> {
        let ph = self.inst.phases();
        let mut m = vec![
            Metric::new("compile_ns", ph.compile_ns, "ns"),
            Metric::new("instantiate_ns", ph.instantiate_ns, "ns"),
        ];
        match self.ratios() {
            Ok(r) => m.extend(r),
            Err(e) => eprintln!("wasm_kernel {}: ratios not measured: {e:#}", self.export),
        }
        m
    }
}
