//! The inference suite: BERT, GPT-2 and LLaMA forward passes, generation
//! with a KV cache, batch and length scaling, f32/f16/bf16 weights.
//!
//! | benchmark | file          | what one iteration is                                   |
//! |-----------|---------------|---------------------------------------------------------|
//! | `encoder` | `encoder.rs`  | BERT forward of `batch x seq` seeded random tokens      |
//! | `embed`   | `encoder.rs`  | the same with real MiniLM-L6 weights from safetensors   |
//! | `prefill` | `generate.rs` | a prompt of `prompt` tokens into an empty KV cache, first token |
//! | `decode`  | `generate.rs` | `gen` greedy tokens after a cache holding `depth` tokens |
//! | `decode_graph` | `cuda/` | CUDA only: `decode` with each step replayed from a CUDA Graph |
//! | `gguf`    | `file.rs`, `fileenc.rs`, `filetok.rs` | a GGUF file or Hugging Face directory (`--model`; `source.rs`, `gguf*.rs`, `hfdir.rs`): llama-bench's `load`, `ppN`, `tgN`, `pgN,M` at depth `d`; `tokenize` |
//!
//! The model (`model.rs`) is written once and configured by shape from the
//! shared catalogue (`crate::models`); `ops.rs` holds the attention, norm,
//! GELU, SwiGLU and RoPE kernels, `linear.rs` the weight formats,
//! `weights.rs` random and safetensors weights and the memory plan,
//! `reference.rs` the independent f64 forward pass every case is checked
//! against before it is timed.

use crate::models::ModelConfig;
use crate::plan::Case;
use crate::suites::{Limit, Suite, TargetMatch, TargetSpec, ThroughputKind, Workload};
use anyhow::{Result, bail};

pub mod accuracy;
pub mod cuda;
mod encoder;
pub mod file;
#[cfg(test)]
mod filecheck;
mod fileenc;
pub mod filetok;
mod generate;
pub mod gguf;
mod gguf_arch;
pub mod hfdir;
pub mod linear;
pub mod loader;
pub mod model;
pub mod ops;
pub mod reference;
pub mod source;
pub mod weights;
pub mod workspace;

/// Transformer inference on the CPU.
pub struct InferenceSuite;

/// Benchmarks of `suites/inference.toml`, in file order.
pub const BENCHMARKS: &[&str] = &["encoder", "embed", "prefill", "decode", "decode_graph", "gguf"];

/// Benchmarks that run on the CPU and on CUDA GPUs (same grids and ids,
/// `device=cuda:N` added on the GPU).
const CPU_AND_CUDA: &[crate::backend::DeviceKind] =
    &[crate::backend::DeviceKind::Cpu, crate::backend::DeviceKind::Cuda];
/// Benchmarks of GPU work only (`cuda::GPU_ONLY`).
const CUDA_ONLY: &[crate::backend::DeviceKind] = &[crate::backend::DeviceKind::Cuda];

/// Keys the `shape` parameter may override, as `key:value` pairs joined by `+`.
pub const SHAPE_KEYS: &[&str] = &["hidden", "heads", "kv_heads", "ffn", "vocab", "positions"];

impl Suite for InferenceSuite {
    fn name(&self) -> &'static str {
        "inference"
    }
    fn describe(&self) -> &'static str {
        "Transformer inference: BERT/GPT-2/LLaMA forward, prefill and KV-cache decode, batch and length scaling, f32/f16/bf16"
    }
    fn spec_toml(&self) -> &'static str {
        include_str!("../../../suites/inference.toml")
    }
    fn benchmarks(&self) -> Vec<&'static str> {
        BENCHMARKS.to_vec()
    }
    fn targets(&self) -> Vec<TargetSpec> {
        vec![TargetSpec {
            name: "GPT-2 f32 decode, batch 1: weights streamed per token >= 70% of STREAM triad",
            case_pattern: r"^inference/decode/batch=1,depth=\d+,dtype=f32,gen=\d+,layers=full,model=gpt2,shape=preset$",
            matching: TargetMatch::Fastest,
            kind: ThroughputKind::Bytes,
            limit: Limit::TriadAllThreads,
            required: 0.7,
        }]
    }
    fn param_rule(&self, benchmark: &str, key: &str) -> Option<crate::suites::ParamRule> {
        use crate::{plan::ParamValue as V, suites::ParamRule as R};
        Some(match (benchmark, key) {
            ("gguf", "file") => R::Check(|v| match v {
                V::Str(s) if !s.is_empty() => Ok(()),
                _ => {
                    Err("must be \"smollm2\", \"smollm2-q4km\", a GGUF file or a Hugging Face directory"
                        .into())
                }
            }),
            ("gguf", "test") => R::Check(|v| file::Test::parse(&v.to_string()).map(|_| ())),
            ("gguf", "model") => R::Check(|v| match v {
                V::Str(s) if !s.is_empty() => Ok(()),
                _ => Err("must be \"from-file\" or the model's name.type as tfbench reads it".into()),
            }),
            ("encoder", "model") => R::Check(|v| model_choice(v, true)),
            (_, "model") => R::Check(|v| model_choice(v, false)),
            (_, "dtype") => R::OneOf(linear::DTYPES),
            (_, "batch" | "seq" | "prompt" | "gen") => R::POSITIVE,
            (_, "depth") => R::NON_NEGATIVE,
            (_, "layers") => R::Check(|v| match v {
                V::Str(s) if s == "full" => Ok(()),
                V::Int(n) if *n >= 1 => Ok(()),
                _ => Err("must be \"full\" or a positive integer".into()),
            }),
            (_, "shape") => R::Check(|v| {
                let mut cfg = ModelConfig::preset(crate::models::PRESETS[0]).map_err(|e| e.to_string())?;
                apply_shape(&mut cfg, &v.to_string()).map_err(|e| e.to_string())
            }),
            // A name or a path; an absent file skips the case at prepare.
            (_, "weights") => R::Check(|v| match v {
                V::Str(s) if !s.is_empty() => Ok(()),
                _ => Err("must be \"minilm\" or a path to a BERT safetensors file".into()),
            }),
            _ => return None,
        })
    }
    fn devices(&self, benchmark: &str) -> &'static [crate::backend::DeviceKind] {
        match benchmark {
            "encoder" | "prefill" | "decode" => CPU_AND_CUDA,
            b if cuda::GPU_ONLY.contains(&b) => CUDA_ONLY,
            _ => crate::backend::CPU_ONLY,
        }
    }
    fn prepare(&self, case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
        if case.device.kind() == crate::backend::DeviceKind::Cuda
            || cuda::GPU_ONLY.contains(&case.benchmark.as_str())
        {
            return cuda::prepare(case);
        }
        match case.benchmark.as_str() {
            "encoder" => encoder::prepare(case, ctx, false),
            "embed" => encoder::prepare(case, ctx, true),
            "prefill" => generate::prepare_prefill(case, ctx),
            "decode" => generate::prepare_decode(case, ctx),
            "gguf" => file::prepare(case, ctx),
            other => bail!("inference suite has no benchmark `{other}`; valid: {}", BENCHMARKS.join(", ")),
        }
    }
}

/// Whether `v` names a catalogue model of the family the benchmark runs
/// (BERT for the encoder, a decoder for generation); the error lists them.
fn model_choice(v: &crate::plan::ParamValue, encoder: bool) -> Result<(), String> {
    let fits =
        |n: &str| ModelConfig::preset(n).is_ok_and(|c| (c.arch == crate::models::Arch::Bert) == encoder);
    let valid: Vec<&str> = crate::models::PRESETS.iter().copied().filter(|n| fits(n)).collect();
    crate::suites::params::one_of(v, &valid)
}

/// A reproducible seed derived from the case id (FNV-1a), without the
/// parameters that do not change the weights (batch, lengths), so every case
/// of one model sees the same weights.
fn seed(case: &Case) -> u64 {
    let model = case.params.get("model").map(|v| v.to_string()).unwrap_or_default();
    weights::fnv(&format!("{}/{model}", case.suite))
}

/// The `dtype` parameter.
fn dtype(case: &Case) -> Result<linear::DType> {
    let s = case.str("dtype")?;
    linear::DType::parse(&s).ok_or_else(|| {
        anyhow::anyhow!(
            "case {}: `dtype` = `{s}` is not valid; valid: {}",
            case.id,
            linear::DTYPES.join(", ")
        )
    })
}

/// A positive integer parameter.
fn positive(case: &Case, key: &str) -> Result<usize> {
    let n = case.usize(key)?;
    if n == 0 {
        bail!("case {}: `{key}` must be positive", case.id);
    }
    Ok(n)
}

/// The encoder benchmarks' refusal of a model that is not BERT-family.
fn bert_only(case: &Case, cfg: &ModelConfig) -> Result<()> {
    if cfg.arch != crate::models::Arch::Bert {
        bail!(
            "case {}: the encoder benchmarks run BERT-family models; `{}` is {}",
            case.id,
            cfg.name,
            cfg.arch.name()
        );
    }
    Ok(())
}

/// The model shape of a case: the `model` preset, then the `shape`
/// overrides (`preset`, or e.g. `hidden:512+heads:8+ffn:2048`), then
/// `layers` (`full`, or a count that reduces the depth; the case id says so).
fn model_config(case: &Case) -> Result<ModelConfig> {
    let name = case.str("model")?;
    let mut cfg = ModelConfig::preset(&name).map_err(|e| anyhow::anyhow!("case {}: {e}", case.id))?;
    apply_shape(&mut cfg, &case.str("shape").unwrap_or_else(|_| "preset".into()))
        .map_err(|e| anyhow::anyhow!("case {}: {e}", case.id))?;
    apply_layers(&mut cfg, case)?;
    cfg.validate()?;
    Ok(cfg)
}

fn apply_shape(cfg: &mut ModelConfig, shape: &str) -> Result<()> {
    if shape == "preset" {
        return Ok(());
    }
    for pair in shape.split('+') {
        let Some((key, value)) = pair.split_once(':') else {
            bail!(
                "`shape` = `{shape}`: `{pair}` is not key:value; write `preset` or e.g. `hidden:512+heads:8` (keys: {})",
                SHAPE_KEYS.join(", ")
            );
        };
        let v: usize = match value.parse() {
            Ok(v) if v > 0 => v,
            _ => bail!("`shape` = `{shape}`: `{key}` must be a positive integer, got `{value}`"),
        };
        match key {
            "hidden" => cfg.hidden = v,
            "heads" => {
                // Same-width heads keep MHA models MHA unless kv_heads is given.
                if cfg.kv_heads == cfg.heads {
                    cfg.kv_heads = v;
                }
                cfg.heads = v;
            }
            "kv_heads" => cfg.kv_heads = v,
            "ffn" => cfg.ffn = v,
            "vocab" => cfg.vocab = v,
            "positions" => cfg.max_positions = v,
            _ => bail!("`shape` = `{shape}`: unknown key `{key}`; valid: {}", SHAPE_KEYS.join(", ")),
        }
    }
    cfg.name = format!("{}[{shape}]", cfg.name);
    Ok(())
}

fn apply_layers(cfg: &mut ModelConfig, case: &Case) -> Result<()> {
    match case.params.get("layers") {
        None => Ok(()),
        Some(crate::plan::ParamValue::Str(s)) if s == "full" => Ok(()),
        Some(crate::plan::ParamValue::Int(n)) if *n >= 1 => {
            cfg.layers = *n as usize;
            Ok(())
        }
        Some(other) => {
            bail!("case {}: `layers` must be \"full\" or a positive integer, got {other}", case.id)
        }
    }
}

/// Refuses (as skipped) a case whose planned memory exceeds what this
/// machine has available. `TFBENCH_MEM_AVAILABLE_GIB` overrides the amount
/// read from /proc/meminfo (tests use it to play a smaller machine).
fn check_memory(
    cfg: &ModelConfig,
    dtype: linear::DType,
    size: model::WorkspaceSize,
    kv: usize,
) -> Result<weights::MemoryPlan> {
    if let Some(a) = available_bytes()
        && let Some(why) = weights::refusal(cfg, dtype, size, kv, a)
    {
        return Err(crate::suites::skip(why));
    }
    Ok(weights::plan(cfg, dtype, size, kv))
}

/// Bytes of memory available to a case: `TFBENCH_MEM_AVAILABLE_GIB` (tests
/// use it to play a smaller machine), else MemAvailable.
pub(crate) fn available_bytes() -> Option<f64> {
    std::env::var("TFBENCH_MEM_AVAILABLE_GIB")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .map(|g| g * (1u64 << 30) as f64)
        .or_else(|| crate::util::mem_available().map(|b| b as f64))
}

/// For a reduced-precision case with random weights, its accuracy against
/// the f32 model of the same seed: metrics and a note (or only a note when
/// the f32 copy would not fit).
fn accuracy_vs_f32(
    model: &model::Model,
    case_seed: u64,
    plan: &weights::MemoryPlan,
) -> Result<(Vec<crate::workload::Metric>, Option<String>)> {
    if model.dtype == linear::DType::F32 {
        return Ok((Vec::new(), None));
    }
    Ok(match accuracy::against_f32(model, case_seed, plan.resident(), available_bytes())? {
        Ok((a, what)) => (a.metrics(), Some(a.note(&what))),
        Err(why) => (Vec::new(), Some(why)),
    })
}

/// The allocator's peak while `f` builds a case, and `f`'s result: the
/// figure the memory plan is checked against.
fn measure_peak<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, Option<usize>)> {
    use crate::alloc;
    let base = alloc::reset_peak();
    let out = f()?;
    let peak = alloc::is_installed().then(|| alloc::peak().saturating_sub(base));
    Ok((out, peak))
}

/// Checks the planned bytes against the allocator's measured peak while the
/// case was built (when the counting allocator is installed, as in the
/// binary): within 5% plus 16 MiB of chunked-initialisation slack.
fn check_plan(plan: &weights::MemoryPlan, peak: Option<usize>) -> Result<String> {
    let Some(peak) = peak else {
        return Ok("allocator not installed: plan not checked".into());
    };
    // Quantized weights pass through a transient f32 copy, so the peak lies
    // between what stays resident and that plus the transient.
    let (low, want, got) = (plan.resident(), plan.total(), peak as f64);
    let slack = 0.05 * want + 16.0 * (1u64 << 20) as f64;
    if got > want + slack || got < low - slack {
        bail!(
            "memory plan {:.1} MiB (weights {:.1}, KV {:.1}, activations {:.1}) but the allocator peaked at {:.1} MiB while building the case",
            want / 1048576.0,
            plan.weights / 1048576.0,
            plan.kv_cache / 1048576.0,
            plan.activations / 1048576.0,
            got / 1048576.0
        );
    }
    Ok(format!("memory plan {:.1} MiB, allocator peak {:.1} MiB", want / 1048576.0, got / 1048576.0))
}

/// The metrics every case reports about its model and memory.
fn memory_metrics(
    model: &model::Model,
    plan: &weights::MemoryPlan,
    peak: Option<usize>,
    full_layers: usize,
) -> Vec<crate::workload::Metric> {
    use crate::workload::Metric;
    let mut m = vec![
        Metric::new("params", model.stored_params() as f64, ""),
        Metric::new("layers", model.cfg.layers as f64, ""),
        Metric::new("weight_bytes", plan.weights, "B"),
        Metric::new("kv_cache_bytes", plan.kv_cache, "B"),
        Metric::new("activation_bytes", plan.activations, "B"),
        Metric::new("planned_bytes", plan.total(), "B"),
    ];
    if plan.transient > 0.0 {
        m.push(Metric::new("build_transient_bytes", plan.transient, "B"));
    }
    if model.cfg.layers != full_layers {
        m.push(Metric::new("layers_of_full_model", full_layers as f64, ""));
    }
    if let Some(p) = peak {
        m.push(Metric::new("alloc_peak_bytes", p as f64, "B"));
    }
    m
}

/// Nearest-rank percentile of unsorted values (`q` in 0..=100).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Seeded random token ids in `[1, vocab)`, so prompts are never one token.
fn random_ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    crate::util::uniform(n, 1.0, vocab as f32, seed)
        .iter()
        .map(|&x| (x as usize).clamp(1, vocab - 1) as u32)
        .collect()
}

/// Index of the largest value.
fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests;
