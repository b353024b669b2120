//! The model runtime on `cuda:N` (through [`crate::backend::cuda`]): the
//! forward passes (`net.rs`) and the workloads of the inference suite's
//! `encoder`, `prefill` and `decode` (with the CPU cases' grids and ids plus
//! `device=cuda:N`) and of the GPU-only `decode_graph`. The suite describes
//! each case ([`CaseParams`], [`GpuBench`]); this module realises it.
//!
//! | benchmark | file | GPU work per iteration |
//! |---|---|---|
//! | `encoder` | `encoder.rs` | BERT forward of `batch x seq` tokens |
//! | `prefill` | `generate.rs` | the whole prompt in one pass into an empty KV cache, first token |
//! | `decode` | `generate.rs` | `gen` greedy steps from `depth`, launched kernel by kernel |
//! | `decode_graph` | `generate.rs` | the same steps, each step one CUDA Graph replay |
//!
//! **Why `decode_graph` is its own benchmark** and not a `graph = on|off`
//! parameter of `decode`: a benchmark's grid is shared by every device it
//! runs on (`Suite::devices`), so a `graph` parameter would add a
//! meaningless axis to the CPU cases and change their ids (and with them
//! every stored baseline). A GPU-only benchmark with the same parameters
//! keeps the CPU ids as they are and pairs each graph case with the
//! launch-by-launch `decode` case of the same id but the benchmark name.
//!
//! The model on the GPU is the CPU model of the same case (same seeded
//! weights, uploaded as stored: matrices and token embedding in the dtype,
//! norms, biases and positions f32) with activations and KV cache in the
//! dtype and f32 arithmetic everywhere: cuBLAS GEMMs (`cublasGemmEx`, f32
//! accumulation, no TF32 for f32) and tfbench's kernels for the rest
//! (`crate::backend::cuda::kernels::transformer`). Every case is checked before it is
//! timed against the f64 reference forward (`crate::model::reference`) and against the CPU
//! model on the full case shape ([`Tolerance`]); NVRTC compilation, the
//! cuBLAS handle and workspace, uploads, the KV-cache fill and graph
//! capture are setup (`setup_ns`), never in a sample. A case that would not
//! fit in the GPU's free memory is refused before anything is allocated,
//! with the figures ([`DevicePlan`]). int8 and q4_0 weights have no GPU
//! kernels here: those cases are skipped with that reason.

use crate::backend::cuda::workload::GpuWorkload;
use crate::backend::ops::GemmDtype;
use crate::model::config::{Arch, ModelConfig};
use crate::model::linear::DType;
use crate::workload::{Workload, skip};
use anyhow::{Result, bail};

mod encoder;
mod generate;
mod net;
mod timer;

#[cfg(test)]
mod tests;

/// Bytes of the cuBLAS workspace each case sets on its handle (set
/// explicitly so that graph capture never sees cuBLAS allocate).
pub(super) const BLAS_WORKSPACE: usize = 32 << 20;

/// The GPU workloads this runtime builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuBench {
    /// A BERT forward of `batch x seq` tokens.
    Encoder,
    /// A prompt in one pass into an empty KV cache, and the first token.
    Prefill,
    /// Greedy steps from a filled cache; `graph`: each step one CUDA Graph replay.
    Decode {
        /// Replay each step from a captured CUDA Graph.
        graph: bool,
    },
}

/// A GPU case's parameters as the benchmark that describes it reads them:
/// the runtime reads no case parameters itself, it asks for them in the
/// order its checks need them (so a case is refused for the same reason,
/// whichever device it runs on).
pub trait CaseParams {
    /// The case id, for messages.
    fn id(&self) -> &str;
    /// The model's shape, checked (preset, overrides, layers).
    fn config(&self) -> Result<ModelConfig>;
    /// Refuses a model an encoder benchmark does not run.
    fn encoder_only(&self, cfg: &ModelConfig) -> Result<()>;
    /// The weights' storage.
    fn dtype(&self) -> Result<DType>;
    /// A positive integer parameter.
    fn positive(&self, key: &str) -> Result<usize>;
    /// A non-negative integer parameter.
    fn count(&self, key: &str) -> Result<usize>;
    /// The seed of the case's weights.
    fn seed(&self) -> u64;
}

/// Prepares `bench` on the GPU `cuda:ordinal`; a missing GPU is a skip with
/// the driver's reason.
pub fn prepare(ordinal: u32, bench: GpuBench, case: &dyn CaseParams) -> Result<Box<dyn Workload>> {
    let gpu = crate::backend::cuda::gpu(ordinal).map_err(skip)?;
    let (op, setup, bytes): (Box<dyn crate::backend::cuda::workload::GpuOp>, _, _) = match bench {
        GpuBench::Encoder => encoder::prepare(case, &gpu)?,
        GpuBench::Prefill => generate::prepare_prefill(case, &gpu)?,
        GpuBench::Decode { graph } => generate::prepare_decode(case, &gpu, graph)?,
    };
    Ok(Box::new(GpuWorkload::new(gpu, op, setup, bytes)?))
}

/// The GEMM type of a weight dtype on the GPU, or why it has none.
pub(super) fn gemm_dtype(d: DType) -> Result<GemmDtype, String> {
    match d {
        DType::F32 => Ok(GemmDtype::F32),
        DType::F16 => Ok(GemmDtype::F16),
        DType::BF16 => Ok(GemmDtype::Bf16),
        other => {
            Err(format!("dtype {} has no GPU kernels in tfbench (on CUDA: f32, f16, bf16)", other.name()))
        }
    }
}

/// What a GPU case holds on the device, by kind, computed from shapes
/// alone before anything is allocated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DevicePlan {
    /// Weights as uploaded: matrices and the token embedding in the dtype
    /// (GPT-2's LM head is the embedding), norms, biases, positions and
    /// RoPE tables in f32.
    pub weights: f64,
    /// Keys and values of every layer, in the dtype.
    pub kv_cache: f64,
    /// Activation buffers (dtype) and token ids, positions and mask (int).
    pub activations: f64,
    /// The cuBLAS workspace ([`BLAS_WORKSPACE`]).
    pub workspace: f64,
}

impl DevicePlan {
    /// Everything the case allocates on the device.
    pub fn total(&self) -> f64 {
        self.weights + self.kv_cache + self.activations + self.workspace
    }
}

/// The device plan of `cfg` in `dtype` (element size `el`), for activations
/// of `rows` tokens, `batch` sequences and a KV cache of `capacity`
/// positions per sequence (0: none, the encoder).
pub fn device_plan(cfg: &ModelConfig, el: usize, rows: usize, batch: usize, capacity: usize) -> DevicePlan {
    let weights: f64 = cfg
        .weights()
        .iter()
        .map(|w| w.numel() as f64 * if w.is_matrix() || w.name == "embed.tokens" { el as f64 } else { 4.0 })
        .sum::<f64>()
        + if cfg.arch == Arch::Llama { (cfg.max_positions * cfg.head_dim() * 4) as f64 } else { 0.0 };
    let (h, kvd) = (cfg.hidden, cfg.kv_heads * cfg.head_dim());
    let ffn_out = if cfg.arch == Arch::Llama { 3 * cfg.ffn } else { cfg.ffn };
    // x, xn, att, y (h each), the fused qkv, the FFN buffers; last, pooled
    // and logits per sequence; ids and mask per token, pos.
    let per_row = 4 * h + h + 2 * kvd + ffn_out;
    let act = (rows * per_row + batch * (2 * h + cfg.vocab)) as f64 * el as f64 + (rows * 12 + 16) as f64;
    DevicePlan {
        weights,
        kv_cache: cfg.kv_cache_bytes(batch, capacity, el) as f64,
        activations: act,
        workspace: BLAS_WORKSPACE as f64,
    }
}

/// Share of the free device memory a case may plan to use (the rest is
/// headroom for cuBLAS's own allocations and the allocator's rounding).
pub const DEVICE_SHARE: f64 = 0.9;

const GIB: f64 = (1u64 << 30) as f64;

/// `None` when `plan` fits in [`DEVICE_SHARE`] of `free` bytes; else the
/// refusal, with the figures.
pub fn device_refusal(plan: &DevicePlan, device: &str, free: usize, total: usize) -> Option<String> {
    (plan.total() > DEVICE_SHARE * free as f64).then(|| {
        format!(
            "needs {:.2} GiB of device memory (weights {:.2}, KV cache {:.2}, activations {:.2}, cuBLAS workspace {:.2}), {device} has {:.2} GiB free of {:.2} GiB (a case may use {:.0}%)",
            plan.total() / GIB,
            plan.weights / GIB,
            plan.kv_cache / GIB,
            plan.activations / GIB,
            plan.workspace / GIB,
            free as f64 / GIB,
            total as f64 / GIB,
            DEVICE_SHARE * 100.0
        )
    })
}

/// How close a GPU result must be to its reference, per dtype. The GPU
/// rounds every activation to the dtype (the CPU model keeps activations
/// f32), so errors grow with the number of roundings and scale with the
/// values: the bound is relative to the reference's largest magnitude, and
/// the cosine similarity of the whole vector catches structural mistakes
/// (a wrong head, position or mask moves it far more than any rounding).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Largest allowed |got - want| as a share of max |want|.
    pub rel_to_max: f64,
    /// Smallest allowed cosine similarity of got and want.
    pub min_cosine: f64,
}

impl Tolerance {
    /// f32: the CPU cases' 1e-3 (cuBLAS without TF32, f32 kernels); f16:
    /// 11-bit significands through ~100 roundings; bf16: 8-bit ones.
    pub fn of(d: GemmDtype) -> Self {
        match d {
            GemmDtype::F32 | GemmDtype::Tf32 => Self { rel_to_max: 1e-3, min_cosine: 0.999_999 },
            GemmDtype::F16 => Self { rel_to_max: 2e-2, min_cosine: 0.9995 },
            GemmDtype::Bf16 => Self { rel_to_max: 1e-1, min_cosine: 0.995 },
        }
    }

    /// Checks `got` against `want`: the maximum error, the scale, the
    /// cosine and the verdict, with the first offending index.
    pub fn check(self, what: &str, got: &[f32], want: &[f32]) -> Result<Comparison> {
        if got.len() != want.len() {
            bail!("{what}: {} values against a reference of {}", got.len(), want.len());
        }
        if let Some(i) = got.iter().position(|x| !x.is_finite()) {
            bail!("{what}: value {i} of {} is {}", got.len(), got[i]);
        }
        let scale = want.iter().fold(0.0f64, |m, &w| m.max((w as f64).abs()));
        let (mut worst, mut at) = (0.0f64, 0);
        let (mut dot, mut gg, mut ww) = (0.0f64, 0.0f64, 0.0f64);
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let (g, w) = (g as f64, w as f64);
            if (g - w).abs() > worst {
                worst = (g - w).abs();
                at = i;
            }
            dot += g * w;
            gg += g * g;
            ww += w * w;
        }
        let cosine = if gg > 0.0 && ww > 0.0 { dot / (gg.sqrt() * ww.sqrt()) } else { f64::from(gg == ww) };
        let c = Comparison { max_error: worst, scale, cosine, values: got.len() };
        let bound = self.rel_to_max * scale.max(1e-30);
        if worst > bound || cosine < self.min_cosine {
            bail!(
                "{what} differs from the reference: max |error| {worst:.3e} at value {at} (got {}, want {}), bound {bound:.3e} ({} of max |want| {scale:.3e}); cosine {cosine:.7} (at least {})",
                got[at],
                want[at],
                self.rel_to_max,
                self.min_cosine
            );
        }
        Ok(c)
    }
}

/// The figures of one passed comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// Largest |got - want|.
    pub max_error: f64,
    /// Largest |want|.
    pub scale: f64,
    /// Cosine similarity of got and want.
    pub cosine: f64,
    /// Values compared.
    pub values: usize,
}

impl Comparison {
    /// One line for the verification detail.
    pub fn describe(&self, what: &str) -> String {
        format!(
            "{what}: {} values, max error {:.2e} ({:.1e} of max |ref| {:.2e}), cosine {:.7}",
            self.values,
            self.max_error,
            self.max_error / self.scale.max(1e-30),
            self.scale,
            self.cosine
        )
    }
}
