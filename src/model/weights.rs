//! Where weights come from (seeded random, or a Hugging Face BERT safetensors
//! file) and how much memory a case needs before anything is allocated.

use super::linear::{DType, Weights};
use super::transformer::{Model, Tensor, WorkspaceSize};
use crate::model::config::{Arch, ModelConfig};
use anyhow::{Context, Result, bail};
use half::{bf16, f16};
use std::path::{Path, PathBuf};

/// FNV-1a of a string, to give every tensor its own seed.
pub fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// A model with seeded random weights: matrices and embeddings N(0, 0.02^2)
/// (GPT-2's init), biases N(0, 0.02^2), norm scales 1 + N(0, 0.1^2) so no
/// kernel can pass verification by ignoring a scale.
pub fn random_model(cfg: &ModelConfig, dtype: DType, seed: u64) -> Result<Model> {
    let mut get = |name: &str, shape: &[usize], stored: bool| -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let s = seed ^ fnv(name);
        let (scale, shift) = if name.ends_with("norm.weight") { (0.1, 1.0) } else { (0.02, 0.0) };
        let draw = |len: usize, s: u64| {
            let mut v = crate::util::randn(len, s);
            v.iter_mut().for_each(|x| *x = *x * scale + shift);
            v
        };
        if !stored {
            return Ok(Tensor::F32(draw(n, s)));
        }
        // Matrices are drawn chunk by chunk (the same values at every dtype)
        // and stored as they come: a full f32 copy of a 32000x5120 embedding
        // would double the peak the memory estimate promises.
        const CHUNK: usize = 1 << 20;
        let chunks = (0..n.div_ceil(CHUNK)).map(|c| draw(CHUNK.min(n - c * CHUNK), s.wrapping_add(c as u64)));
        Ok(Tensor::Stored(match dtype {
            DType::F32 => {
                let mut out = Vec::with_capacity(n);
                chunks.for_each(|c| out.extend_from_slice(&c));
                // Packed for the GEMM where AVX-512 runs (the f32 copy is
                // the `MemoryPlan::transient`), else kept as drawn.
                let (rows, cols) = (shape[0], n / shape[0].max(1));
                Weights::from_f32(out, rows, cols, dtype)?
            }
            DType::F16 => {
                let mut out = Vec::with_capacity(n);
                chunks.for_each(|c| out.extend(c.iter().map(|&x| f16::from_f32(x))));
                Weights::F16(out)
            }
            DType::BF16 => {
                let mut out = Vec::with_capacity(n);
                chunks.for_each(|c| out.extend(c.iter().map(|&x| bf16::from_f32(x))));
                Weights::BF16(out)
            }
            // The quantizers take a whole matrix: its f32 copy lives only
            // while it is quantized (`MemoryPlan::transient`).
            DType::Int8 | DType::Q4_0 | DType::W8A8 => {
                let mut out = Vec::with_capacity(n);
                chunks.for_each(|c| out.extend_from_slice(&c));
                let (rows, cols) = (shape[0], n / shape[0].max(1));
                Weights::from_f32(out, rows, cols, dtype)
                    .with_context(|| format!("{}: {name} [{rows} x {cols}] in {}", cfg.name, dtype.name()))?
            }
        }))
    };
    Model::build(cfg, dtype, &mut get)
}

/// Resolves a `weights` parameter: `minilm` is the MiniLM-L6 folder that
/// `scripts/fetch-test-data.sh` fills, searched for in the data folders
/// ([`crate::data`]); otherwise a safetensors file or a folder holding
/// `model.safetensors`. `Err` says why there is no such file (where it
/// looked), for the case's skip reason.
pub fn weights_path(param: &str) -> Result<PathBuf, String> {
    let p = if param == "minilm" {
        crate::data::find("minilm/model.safetensors")?
    } else {
        let p = PathBuf::from(param);
        if p.is_dir() { p.join("model.safetensors") } else { p }
    };
    if p.is_file() { Ok(p) } else { Err(format!("no weights at {}", p.display())) }
}

/// Reads the BERT shape from the Hugging Face `config.json` beside `file`.
pub fn bert_config(file: &Path) -> Result<ModelConfig> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let num = |k: &str| -> Result<usize> {
        v[k].as_u64()
            .map(|n| n as usize)
            .with_context(|| format!("{}: `{k}` missing or not an integer", path.display()))
    };
    if let Some(t) = v["model_type"].as_str()
        && t != "bert"
    {
        bail!(
            "{}: model_type `{t}` is not supported; the real-weights path reads BERT-family models",
            path.display()
        );
    }
    if let Some(act) = v["hidden_act"].as_str()
        && act != "gelu"
    {
        bail!("{}: hidden_act `{act}` is not supported (only BERT's erf `gelu`)", path.display());
    }
    let heads = num("num_attention_heads")?;
    let cfg = ModelConfig {
        name: dir.file_name().map_or("bert".into(), |n| n.to_string_lossy().into_owned()),
        arch: Arch::Bert,
        layers: num("num_hidden_layers")?,
        hidden: num("hidden_size")?,
        heads,
        kv_heads: heads,
        ffn: num("intermediate_size")?,
        vocab: num("vocab_size")?,
        max_positions: num("max_position_embeddings")?,
        type_vocab: num("type_vocab_size")?,
        norm_eps: v["layer_norm_eps"].as_f64().unwrap_or(1e-12) as f32,
        rope_theta: 0.0,
        variant: Default::default(),
    };
    cfg.validate()?;
    Ok(cfg)
}

/// The Hugging Face BERT name of one of our tensors.
pub fn hf_bert_name(name: &str) -> String {
    let fixed = [
        ("embed.tokens", "embeddings.word_embeddings.weight"),
        ("embed.positions", "embeddings.position_embeddings.weight"),
        ("embed.types", "embeddings.token_type_embeddings.weight"),
        ("embed.norm.weight", "embeddings.LayerNorm.weight"),
        ("embed.norm.bias", "embeddings.LayerNorm.bias"),
        ("pooler.weight", "pooler.dense.weight"),
        ("pooler.bias", "pooler.dense.bias"),
    ];
    if let Some((_, hf)) = fixed.iter().find(|(ours, _)| *ours == name) {
        return hf.to_string();
    }
    let parts: Vec<&str> = name.splitn(3, '.').collect();
    let (layer, rest) = (parts.get(1).copied().unwrap_or(""), parts.get(2).copied().unwrap_or(""));
    let map = [
        ("attn.q.", "attention.self.query."),
        ("attn.k.", "attention.self.key."),
        ("attn.v.", "attention.self.value."),
        ("attn.o.", "attention.output.dense."),
        ("norm1.", "attention.output.LayerNorm."),
        ("ffn.up.", "intermediate.dense."),
        ("ffn.down.", "output.dense."),
        ("norm2.", "output.LayerNorm."),
    ];
    for (ours, hf) in map {
        if let Some(suffix) = rest.strip_prefix(ours) {
            return format!("encoder.layer.{layer}.{hf}{suffix}");
        }
    }
    name.to_string()
}

/// A BERT model from a Hugging Face safetensors file (f32, f16 or bf16
/// tensors; `bert.`-prefixed names too), its shape from `config.json`.
/// Every tensor's shape is checked against the catalogue's.
pub fn load_bert(file: &Path, dtype: DType) -> Result<Model> {
    let cfg = bert_config(file)?;
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: not a safetensors file: {e}", file.display()))?;
    let mut get = |name: &str, shape: &[usize], _stored: bool| -> Result<Tensor> {
        let hf = hf_bert_name(name);
        let view = st
            .tensor(&hf)
            .or_else(|_| st.tensor(&format!("bert.{hf}")))
            .map_err(|_| anyhow::anyhow!("{}: no tensor `{hf}` (for {name})", file.display()))?;
        if view.shape() != shape {
            bail!("{}: `{hf}` has shape {:?}, the config implies {shape:?}", file.display(), view.shape());
        }
        let data = view.data();
        let vals: Vec<f32> = match view.dtype() {
            safetensors::Dtype::F32 => {
                data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
            }
            safetensors::Dtype::F16 => {
                data.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
            }
            safetensors::Dtype::BF16 => {
                data.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
            }
            other => bail!("{}: `{hf}` has dtype {other:?}; supported: F32, F16, BF16", file.display()),
        };
        Ok(Tensor::F32(vals))
    };
    Model::build(&cfg, dtype, &mut get)
}

/// Bytes a case needs, by kind, computed from shapes alone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryPlan {
    /// Weights as stored.
    pub weights: f64,
    /// KV cache.
    pub kv_cache: f64,
    /// Activations and scratch of the workspace.
    pub activations: f64,
    /// Held only while the model is built: the f32 copy of the largest
    /// matrix while it is quantized (int8, q4_0) or packed for the GEMM
    /// (f32 on AVX-512 CPUs), else 0.
    pub transient: f64,
}

impl MemoryPlan {
    /// The most the case holds at once (an upper bound with a transient).
    pub fn total(&self) -> f64 {
        self.resident() + self.transient
    }
    /// What stays allocated once the case is built.
    pub fn resident(&self) -> f64 {
        self.weights + self.kv_cache + self.activations
    }
}

/// Bytes of `cfg`'s weights when matrices and the token embedding are
/// stored in `dtype` (everything else f32), plus RoPE tables.
pub fn weight_bytes(cfg: &ModelConfig, dtype: DType) -> f64 {
    let w: f64 = cfg
        .weights()
        .iter()
        .map(|w| {
            w.numel() as f64 * if w.is_matrix() || w.name == "embed.tokens" { dtype.bytes() } else { 4.0 }
        })
        .sum();
    let rope = if cfg.arch == Arch::Llama { (cfg.max_positions * cfg.head_dim() * 4) as f64 } else { 0.0 };
    w + rope
}

/// The memory a case will allocate: weights, a KV cache of `kv_capacity`
/// positions per sequence (decoders), and the workspace.
pub fn plan(cfg: &ModelConfig, dtype: DType, size: WorkspaceSize, kv_capacity: usize) -> MemoryPlan {
    MemoryPlan {
        weights: weight_bytes(cfg, dtype),
        kv_cache: cfg.kv_cache_bytes(size.batch, kv_capacity, 4) as f64,
        activations: size.bytes(cfg, dtype) as f64,
        transient: if dtype.quant_format().is_some()
            || (dtype == DType::F32 && crate::kernels::sgemm::available())
        {
            cfg.weights()
                .iter()
                .filter(|w| w.is_matrix() || w.name == "embed.tokens")
                .map(|w| w.numel() as f64 * 4.0)
                .fold(0.0, f64::max)
        } else {
            0.0
        },
    }
}

/// Share of available memory a case may plan to use: the rest is headroom
/// for the page cache, the allocator and the other processes.
pub const BUDGET_SHARE: f64 = 0.9;

const GIB: f64 = (1u64 << 30) as f64;

/// `None` when the case fits in `available` bytes; else the refusal reason,
/// naming what it needs and what would fit (`layers = N`, a lower precision).
pub fn refusal(
    cfg: &ModelConfig,
    dtype: DType,
    size: WorkspaceSize,
    kv_capacity: usize,
    available: f64,
) -> Option<String> {
    let need = plan(cfg, dtype, size, kv_capacity);
    let budget = available * BUDGET_SHARE;
    if need.total() <= budget {
        return None;
    }
    let fits = |c: &ModelConfig, d: DType| plan(c, d, size, kv_capacity).total() <= budget;
    let max_layers = |d: DType| {
        (1..cfg.layers).rev().find(|&l| {
            let mut c = cfg.clone();
            c.layers = l;
            fits(&c, d)
        })
    };
    let mut options = Vec::new();
    if let Some(l) = max_layers(dtype) {
        options.push(format!("`layers = {l}` (of {}) at {}", cfg.layers, dtype.name()));
    }
    if dtype == DType::F32 {
        if fits(cfg, DType::BF16) {
            options.push(format!(
                "`dtype = \"bf16\"` ({:.1} GiB)",
                plan(cfg, DType::BF16, size, kv_capacity).total() / GIB
            ));
        } else if let Some(l) = max_layers(DType::BF16) {
            options.push(format!("`dtype = \"bf16\"` with `layers = {l}`"));
        }
    }
    let fit = if options.is_empty() {
        "nothing smaller of this shape fits".to_string()
    } else {
        options.join(" or ")
    };
    Some(format!(
        "{} at {} needs {:.1} GiB (weights {:.1} GiB, KV cache {:.2} GiB, activations {:.2} GiB) but only {:.1} GiB is available ({}% of MemAvailable {:.1} GiB); would fit: {fit}",
        cfg.name,
        dtype.name(),
        need.total() / GIB,
        need.weights / GIB,
        need.kv_cache / GIB,
        need.activations / GIB,
        budget / GIB,
        (BUDGET_SHARE * 100.0) as u32,
        available / GIB,
    ))
}

/// The memory plan of a model of `cfg` in `dtype` with a workspace of
/// `size` and a KV cache of `kv` positions, or a skip (with
/// [`refusal`]'s reason) when it exceeds what this machine has available
/// ([`super::available_bytes`]).
pub fn check_fits(cfg: &ModelConfig, dtype: DType, size: WorkspaceSize, kv: usize) -> Result<MemoryPlan> {
    if let Some(a) = super::available_bytes()
        && let Some(why) = refusal(cfg, dtype, size, kv, a)
    {
        return Err(crate::workload::skip(why));
    }
    Ok(plan(cfg, dtype, size, kv))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size() -> WorkspaceSize {
        WorkspaceSize { batch: 1, tokens: 32, keys: 64, threads: 2 }
    }

    #[test]
    fn llama_13b_f32_is_refused_on_24_gib_with_what_would_fit() {
        let cfg = ModelConfig::preset("llama-13b").unwrap();
        let why = refusal(&cfg, DType::F32, size(), 64, 24.0 * GIB).expect("must refuse");
        assert!(why.contains("needs 48.") || why.contains("needs 49."), "{why}");
        assert!(why.contains("layers = ") && why.contains("bf16"), "{why}");
        // The suggestion really fits.
        let l: usize = why.split("`layers = ").nth(1).unwrap().split('`').next().unwrap().parse().unwrap();
        let mut smaller = cfg.clone();
        smaller.layers = l;
        assert!(refusal(&smaller, DType::F32, size(), 64, 24.0 * GIB).is_none());
        smaller.layers = l + 1;
        assert!(refusal(&smaller, DType::F32, size(), 64, 24.0 * GIB).is_some());
        // llama-7b in bf16 (13.5 GB) fits in 24 GiB.
        assert!(
            refusal(&ModelConfig::preset("llama-7b").unwrap(), DType::BF16, size(), 64, 24.0 * GIB).is_none()
        );
    }

    #[test]
    fn weight_bytes_follow_the_catalogue() {
        let cfg = ModelConfig::preset("gpt2").unwrap();
        assert_eq!(weight_bytes(&cfg, DType::F32), cfg.weight_bytes(4.0));
        let half = weight_bytes(&cfg, DType::BF16);
        assert!(half > cfg.weight_bytes(2.0) && half < cfg.weight_bytes(2.1), "{half}");
    }

    #[test]
    fn hf_names_map_to_bert_tensors() {
        assert_eq!(hf_bert_name("layers.3.attn.k.bias"), "encoder.layer.3.attention.self.key.bias");
        assert_eq!(hf_bert_name("layers.0.norm2.weight"), "encoder.layer.0.output.LayerNorm.weight");
        assert_eq!(hf_bert_name("embed.tokens"), "embeddings.word_embeddings.weight");
    }
}
