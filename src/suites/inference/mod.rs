//! The inference suite: BERT, GPT-2 and LLaMA forward passes, generation
//! with a KV cache, batch and length scaling, f32/f16/bf16 weights.
//!
//! | benchmark | file          | what one iteration is                                   |
//! |-----------|---------------|---------------------------------------------------------|
//! | `encoder` | `encoder.rs`  | BERT forward of `batch x seq` seeded random tokens      |
//! | `embed`   | `encoder.rs`  | the same with real MiniLM-L6 weights from safetensors   |
//! | `prefill` | `generate.rs` | a prompt of `prompt` tokens into an empty KV cache, first token |
//! | `decode`  | `generate.rs` | `gen` greedy tokens after a cache holding `depth` tokens |
//! | `decode_graph` | `crate::model::cuda` | CUDA only: `decode` with each step replayed from a CUDA Graph |
//! | `gguf`    | `model_file.rs`, `model_file_encoder.rs`, `model_file_tokenize.rs` | a GGUF file or Hugging Face directory (`--model`; `model_cases.rs`): llama-bench's `load`, `ppN`, `tgN`, `pgN,M` at depth `d`; `tokenize` |
//!
//! This suite describes cases (parameters, inputs, work counts, checks);
//! the model runtime ([`crate::model`]) runs them: the transformer written
//! once and configured by shape from the shared catalogue
//! (`crate::model::config`), its kernels and weight formats, random and
//! safetensors weights and the memory plan, model files and their
//! tokenizers, the independent f64 forward pass every case is checked
//! against before it is timed (`crate::model::reference`), and the GPU
//! forward passes and workloads (`crate::model::cuda`, described here by
//! `GpuParams`).

use crate::model::config::ModelConfig;
use crate::model::{linear, transformer, weights};
use crate::plan::Case;
use crate::suites::{Limit, Suite, TargetMatch, TargetSpec, ThroughputKind, Workload};
use anyhow::{Result, bail};

pub mod accuracy;
mod encoder;
mod generate;
#[cfg(test)]
mod llamacpp_tests;
mod model_file;
mod model_file_encoder;
mod model_file_tokenize;

/// Transformer inference on the CPU.
pub struct InferenceSuite;

/// Benchmarks of `suites/inference.toml`, in file order.
pub const BENCHMARKS: &[&str] = &["encoder", "embed", "prefill", "decode", "decode_graph", "gguf"];

/// Benchmarks that run on the CPU and on CUDA GPUs (same grids and ids,
/// `device=cuda:N` added on the GPU).
const CPU_AND_CUDA: &[crate::backend::DeviceKind] =
    &[crate::backend::DeviceKind::Cpu, crate::backend::DeviceKind::Cuda];
/// Benchmarks of GPU work only ([`GPU_ONLY`]).
const CUDA_ONLY: &[crate::backend::DeviceKind] = &[crate::backend::DeviceKind::Cuda];

/// Benchmarks that run on CUDA only.
const GPU_ONLY: &[&str] = &["decode_graph"];

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
            ("gguf", "test") => {
                R::Check(|v| crate::suites::model_cases::Test::parse(&v.to_string()).map(|_| ()))
            }
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
                let mut cfg =
                    ModelConfig::preset(crate::model::config::PRESETS[0]).map_err(|e| e.to_string())?;
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
            b if GPU_ONLY.contains(&b) => CUDA_ONLY,
            _ => crate::backend::CPU_ONLY,
        }
    }
    fn prepare(&self, case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
        if case.device.kind() == crate::backend::DeviceKind::Cuda
            || GPU_ONLY.contains(&case.benchmark.as_str())
        {
            return prepare_gpu(case);
        }
        match case.benchmark.as_str() {
            "encoder" => encoder::prepare(case, ctx, false),
            "embed" => encoder::prepare(case, ctx, true),
            "prefill" => generate::prepare_prefill(case, ctx),
            "decode" => generate::prepare_decode(case, ctx),
            "gguf" => model_file::prepare(case, ctx),
            other => bail!("inference suite has no benchmark `{other}`; valid: {}", BENCHMARKS.join(", ")),
        }
    }
}

/// Prepares a case on its GPU without the `cuda` feature: there is no GPU
/// code in this build (the device's availability says so first).
#[cfg(not(feature = "cuda"))]
fn prepare_gpu(case: &Case) -> Result<Box<dyn Workload>> {
    Err(crate::suites::skip(format!("{}: this tfbench was built without the `cuda` feature", case.device)))
}

/// Prepares a case on its GPU: the model runtime's GPU workload of the
/// benchmark, over the case's parameters as this suite reads them.
#[cfg(feature = "cuda")]
fn prepare_gpu(case: &Case) -> Result<Box<dyn Workload>> {
    use crate::model::cuda::GpuBench;
    let crate::backend::Device::Cuda(n) = case.device else {
        bail!("case {}: `{}` runs on CUDA GPUs only (--device cuda)", case.id, case.benchmark);
    };
    let bench = match case.benchmark.as_str() {
        "encoder" => GpuBench::Encoder,
        "prefill" => GpuBench::Prefill,
        "decode" => GpuBench::Decode { graph: false },
        "decode_graph" => GpuBench::Decode { graph: true },
        other => {
            bail!("inference/{other} has no CUDA version; on CUDA: encoder, prefill, decode, decode_graph")
        }
    };
    crate::model::cuda::prepare(n, bench, &GpuParams(case))
}

/// A case's parameters as the GPU workloads ask for them.
#[cfg(feature = "cuda")]
struct GpuParams<'a>(&'a Case);

#[cfg(feature = "cuda")]
impl crate::model::cuda::CaseParams for GpuParams<'_> {
    fn id(&self) -> &str {
        &self.0.id
    }
    fn config(&self) -> Result<ModelConfig> {
        model_config(self.0)
    }
    fn encoder_only(&self, cfg: &ModelConfig) -> Result<()> {
        bert_only(self.0, cfg)
    }
    fn dtype(&self) -> Result<linear::DType> {
        dtype(self.0)
    }
    fn positive(&self, key: &str) -> Result<usize> {
        positive(self.0, key)
    }
    fn count(&self, key: &str) -> Result<usize> {
        self.0.usize(key)
    }
    fn seed(&self) -> u64 {
        seed(self.0)
    }
}

/// Whether `v` names a catalogue model of the family the benchmark runs
/// (BERT for the encoder, a decoder for generation); the error lists them.
fn model_choice(v: &crate::plan::ParamValue, encoder: bool) -> Result<(), String> {
    let fits = |n: &str| {
        ModelConfig::preset(n).is_ok_and(|c| (c.arch == crate::model::config::Arch::Bert) == encoder)
    };
    let valid: Vec<&str> = crate::model::config::PRESETS.iter().copied().filter(|n| fits(n)).collect();
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
    if cfg.arch != crate::model::config::Arch::Bert {
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

/// For a reduced-precision case with random weights, its accuracy against
/// the f32 model of the same seed: metrics and a note (or only a note when
/// the f32 copy would not fit).
fn accuracy_vs_f32(
    model: &transformer::Model,
    case_seed: u64,
    plan: &weights::MemoryPlan,
) -> Result<(Vec<crate::workload::Metric>, Option<String>)> {
    if model.dtype == linear::DType::F32 {
        return Ok((Vec::new(), None));
    }
    Ok(match accuracy::against_f32(model, case_seed, plan.resident(), crate::model::available_bytes())? {
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
    model: &transformer::Model,
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

#[cfg(test)]
mod tests;
