//! `conv` and `pool`: convolutions of real networks' layers by three
//! algorithms (im2col + GEMM, direct, Winograd F(4x4, 3x3) where it applies), and pooling, each checked against the f64 loops of
//! [`crate::kernels::nn`] on sampled output planes.

use super::{check, choice, ensure_memory, sample, seed};
use crate::kernels::nn::conv::{ConvGeom, block_len, conv_direct, conv_im2col, conv_plane_f64, parse_conv};
use crate::kernels::nn::conv_nhwc::{
    block_len_nhwc, conv_direct_nhwc, conv_im2col_nhwc, pack_direct_weights, to_nchw, weights_to_planar,
};
use crate::kernels::nn::pool::{PoolGeom, PoolOp, parse_pool, pool, pool_value_f64};
use crate::kernels::nn::winograd::{
    self, WinogradWeights, conv_winograd, transform_weights, winograd_scale_f64,
};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use anyhow::{Result, bail};
use rayon::ThreadPool;
use std::sync::Arc;

/// Convolution algorithms (winograd: 3x3 stride-1 2-D layers only, see
/// [`winograd::check`]).
pub(super) const ALGOS: &[&str] = &["im2col", "direct", "winograd"];
/// Tensor layouts: planar (PyTorch's default) or channels-last.
pub(super) const LAYOUTS: &[&str] = &["nchw", "nhwc"];
/// Pooling operations.
pub(super) const POOL_OPS: &[&str] = &["max", "avg"];

/// Named layers of real networks, as `parse_conv` shapes.
pub(super) const LAYERS: &[(&str, &str)] = &[
    ("rn50_l1_3x3_b1", "1x64x56x56-k64x3x3-p1"),
    ("rn50_l1_3x3_b32", "32x64x56x56-k64x3x3-p1"),
    ("rn50_l3_3x3_b1", "1x256x14x14-k256x3x3-p1"),
    ("rn50_l3_3x3_b32", "32x256x14x14-k256x3x3-p1"),
    ("rn50_l1_1x1_b1", "1x64x56x56-k256x1x1"),
    ("rn50_l3_1x1_b1", "1x1024x14x14-k256x1x1"),
    ("rn50_l1_1x1_b32", "32x64x56x56-k256x1x1"),
    ("rn50_l3_1x1_b32", "32x1024x14x14-k256x1x1"),
    ("mbv2_dw_b1", "1x144x56x56-k144x3x3-p1-g144"),
    ("mbv2_dw_s2_b1", "1x96x112x112-k96x3x3-s2-p1-g96"),
    ("mbv2_dw_b32", "32x144x56x56-k144x3x3-p1-g144"),
    ("opbench_short", "1x256x16x16-k256x3x3"),
    ("wav2vec2_conv1d", "1x512x3199-k512x3-s2"),
    ("r3d18_block", "1x64x8x56x56-k64x3x3x3-p1"),
];

/// The geometry of `layer`: a preset's name or an explicit shape.
pub(super) fn layer_geom(layer: &str) -> Result<ConvGeom, String> {
    match LAYERS.iter().find(|(n, _)| *n == layer) {
        Some((_, spec)) => parse_conv(spec),
        None if layer.contains('-') => parse_conv(layer),
        None => Err(format!(
            "`{layer}` is neither a preset ({}) nor a shape NxCx..-kKx..[-sS][-pP][-dD][-gG]",
            LAYERS.iter().map(|l| l.0).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// Whether `algo` can compute `layer` (each value valid alone): the plan's
/// cross-parameter rule, so `algo=winograd` on a 1x1 layer is refused
/// before anything runs.
pub(super) fn check_algo(algo: &str, layer: &str) -> Result<(), String> {
    match (algo, layer_geom(layer)) {
        ("winograd", Ok(g)) => winograd::check(&g).map_err(|e| format!("layer {layer}: {e}")),
        _ => Ok(()),
    }
}

/// The algorithm of a `conv` case.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Algo {
    Im2col,
    Direct,
    Winograd,
}

struct Conv {
    g: ConvGeom,
    algo: Algo,
    nhwc: bool,
    x: Vec<f32>,
    /// Weights in the layout's order (channels-last: `K x taps x C/g`).
    w: Vec<f32>,
    /// Channels-last direct only: `w` repacked once (untimed, as a
    /// library's weight reorder is done once per model).
    wp: Vec<f32>,
    /// Winograd only: the filter transform, done once (untimed, likewise).
    wino: Option<WinogradWeights>,
    out: Vec<f32>,
    threads: usize,
    pool: Option<Arc<ThreadPool>>,
    seed: u64,
}

/// Prepares a `conv` case.
pub(super) fn prepare_conv(case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
    let algo = match choice(case, "algo", ALGOS)? {
        "direct" => Algo::Direct,
        "winograd" => Algo::Winograd,
        _ => Algo::Im2col,
    };
    let nhwc = choice(case, "layout", LAYOUTS)? == "nhwc";
    let g = layer_geom(&case.str("layer")?).map_err(|e| anyhow::anyhow!("case {}: {e}", case.id))?;
    if algo == Algo::Winograd {
        winograd::check(&g).map_err(|e| anyhow::anyhow!("case {}: {e}", case.id))?;
    }
    // The per-thread block buffers (allocated by the kernel, reused), and
    // Winograd's transformed weights (plain and packed: 2 x 36/9 x weights).
    let col = ctx.threads()
        * match (algo, nhwc) {
            (Algo::Direct, _) => 0,
            (Algo::Im2col, false) => block_len(&g),
            (Algo::Im2col, true) => block_len_nhwc(&g),
            (Algo::Winograd, _) => winograd::block_len(&g, ctx.threads()) + 8 * g.weight_len(),
        };
    ensure_memory("this convolution", 4.0 * (g.input_len() + g.weight_len() + g.output_len() + col) as f64)?;
    let seed = seed(case);
    // Kaiming-like weights keep outputs O(1) whatever the fan-in.
    let fan_in = (g.c / g.groups * g.kvol()) as f32;
    let w: Vec<f32> =
        crate::util::randn(g.weight_len(), seed ^ 1).iter().map(|v| v / fan_in.sqrt()).collect();
    let wp = if algo == Algo::Direct && nhwc { pack_direct_weights(&g, &w) } else { Vec::new() };
    let wino = (algo == Algo::Winograd).then(|| transform_weights(&g, &w, nhwc));
    Ok(Box::new(Conv {
        g,
        algo,
        nhwc,
        wp,
        wino,
        x: crate::util::randn(g.input_len(), seed),
        w,
        out: vec![f32::NAN; g.output_len()],
        threads: ctx.threads(),
        pool: ctx.pool(),
        seed,
    }))
}

impl Conv {
    fn once(&mut self) {
        let Self { g, x, w, wp, wino, out, threads, pool, algo, nhwc, .. } = self;
        crate::backend::cpu::install(pool.as_deref(), || match (*algo, *nhwc, wino) {
            (Algo::Winograd, _, Some(wt)) => conv_winograd(g, x, wt, out, *threads, *nhwc),
            (Algo::Direct, false, _) => conv_direct(g, x, w, out),
            (Algo::Direct, true, _) => conv_direct_nhwc(g, x, wp, out),
            (_, false, _) => conv_im2col(g, x, w, out, *threads),
            (_, true, _) => conv_im2col_nhwc(g, x, w, out, *threads),
        });
    }
}

impl Workload for Conv {
    fn verify(&mut self) -> Result<Verification> {
        self.out.fill(f32::NAN);
        self.once();
        // Sampled output planes: reference cost is one plane's FLOPs each.
        let plane_cost = (self.g.c / self.g.groups * self.g.kvol() * self.g.out_spatial()) as f64;
        let count = (2e8 / plane_cost).clamp(2.0, 8.0) as usize;
        let planes = sample(self.g.n * self.g.k, count, self.seed ^ 7);
        let osp = self.g.out_spatial();
        // Channels-last tensors are read through their planar copies.
        let planar = self.nhwc.then(|| {
            let g = &self.g;
            (
                to_nchw(&self.x, g.n, g.c, g.in_spatial()),
                weights_to_planar(g, &self.w),
                to_nchw(&self.out, g.n, g.k, osp),
            )
        });
        let (x, w, out) = match &planar {
            Some((x, w, o)) => (x, w, o),
            None => (&self.x, &self.w, &self.out),
        };
        let (mut got, mut want, mut mag) = (Vec::new(), Vec::new(), Vec::new());
        let wino = self.algo == Algo::Winograd;
        for &p in &planes {
            let (n, k) = (p / self.g.k, p % self.g.k);
            let (r, m) = conv_plane_f64(&self.g, x, w, n, k);
            got.extend_from_slice(&out[p * osp..(p + 1) * osp]);
            want.extend(r);
            // Winograd's rounding scales with the terms it adds, not with |w x|.
            mag.extend(if wino { winograd_scale_f64(&self.g, x, w, n, k) } else { m });
        }
        let scale = if wino { "the sum of |terms| Winograd adds" } else { "the sum of |w x|" };
        let what = format!(
            "f64 convolution loop on {} of {} output planes (bound: 1e-5 x {scale})",
            planes.len(),
            self.g.n * self.g.k
        );
        Ok(check(what, &got, &want, Some(&mag), 1e-6, 1e-5))
    }
    fn throughput(&self) -> Vec<Throughput> {
        let g = &self.g;
        // Winograd declares the FLOPs it executes: the direct count would put
        // its `% of peak` above the FMA roof (137% at rn50_l3_3x3_b1, quiet).
        let flops = if self.algo == Algo::Winograd { winograd::executed_flops(g) } else { g.flops() };
        vec![
            Throughput::flops(flops),
            Throughput::bytes(4.0 * (g.input_len() + g.weight_len() + g.output_len()) as f64),
            Throughput::elements(g.output_len() as f64),
        ]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.once();
        }
        Ok(())
    }
}

struct Pool {
    g: PoolGeom,
    op: PoolOp,
    x: Vec<f32>,
    out: Vec<f32>,
    pool: Option<Arc<ThreadPool>>,
    seed: u64,
}

/// Prepares a `pool` or `adaptive_pool` case.
pub(super) fn prepare_pool(case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
    let op = if case.benchmark == "adaptive_pool" {
        PoolOp::AdaptiveAvg
    } else if choice(case, "op", POOL_OPS)? == "max" {
        PoolOp::Max
    } else {
        PoolOp::Avg
    };
    let (g, adaptive) =
        parse_pool(&case.str("shape")?).map_err(|e| anyhow::anyhow!("case {}: {e}", case.id))?;
    if adaptive != (op == PoolOp::AdaptiveAvg) {
        let want = if adaptive { "a window -k" } else { "an adaptive output size -o" };
        bail!("case {}: {} needs a shape with {want}", case.id, case.benchmark);
    }
    ensure_memory("this pooling", 4.0 * (g.input_len() + g.output_len()) as f64)?;
    let seed = seed(case);
    Ok(Box::new(Pool {
        g,
        op,
        x: crate::util::randn(g.input_len(), seed),
        out: vec![f32::NAN; g.output_len()],
        pool: ctx.pool(),
        seed,
    }))
}

impl Workload for Pool {
    fn verify(&mut self) -> Result<Verification> {
        self.out.fill(f32::NAN);
        let Self { g, op, x, out, pool: threads, .. } = self;
        crate::backend::cpu::install(threads.as_deref(), || pool(g, *op, x, out));
        let idx = sample(self.out.len(), 512, self.seed ^ 3);
        let got: Vec<f32> = idx.iter().map(|&i| self.out[i]).collect();
        let want: Vec<f64> = idx.iter().map(|&i| pool_value_f64(&self.g, self.op, &self.x, i)).collect();
        Ok(check(format!("f64 brute-force windows at {} outputs", idx.len()), &got, &want, None, 1e-6, 1e-5))
    }
    fn throughput(&self) -> Vec<Throughput> {
        vec![
            Throughput::bytes(4.0 * (self.g.input_len() + self.g.output_len()) as f64),
            Throughput::elements(self.g.output_len() as f64),
            Throughput::flops(self.g.window_reads(self.op) as f64),
        ]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        let Self { g, op, x, out, pool: threads, .. } = self;
        crate::backend::cpu::install(threads.as_deref(), || {
            for _ in 0..iters {
                pool(g, *op, x, out);
            }
        });
        Ok(())
    }
}
