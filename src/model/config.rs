//! The catalogue of transformer shapes (BERT, GPT-2, LLaMA families) shared
//! by every suite that needs a model: inference runs them, quantization
//! quantizes their weights, memory reports their footprints. The tensor list
//! ([`ModelConfig::weights`]) is the single source of truth for parameter
//! counts, so suites cannot disagree about how big a model is.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// The three architectures tfbench implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Encoder: token + position + type embeddings, post-norm LayerNorm,
    /// bidirectional attention with a padding mask, GELU FFN, pooler.
    Bert,
    /// Decoder: learned positions, pre-norm LayerNorm, causal attention,
    /// GELU FFN, LM head tied to the token embedding.
    Gpt2,
    /// Decoder: RMSNorm, rotary positions, SwiGLU FFN, grouped-query
    /// attention when `kv_heads < heads`, untied LM head.
    Llama,
}

impl Arch {
    /// Lowercase name (`bert`, `gpt2`, `llama`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Bert => "bert",
            Self::Gpt2 => "gpt2",
            Self::Llama => "llama",
        }
    }
}

/// A model's shape. Weights are not part of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Catalogue or user-given name, e.g. `bert-base`.
    pub name: String,
    /// Architecture family.
    pub arch: Arch,
    /// Transformer blocks.
    pub layers: usize,
    /// Model width (embedding size).
    pub hidden: usize,
    /// Attention (query) heads.
    pub heads: usize,
    /// Key/value heads (`< heads` means grouped-query attention).
    pub kv_heads: usize,
    /// FFN inner width.
    pub ffn: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Longest sequence the position table (BERT, GPT-2) or RoPE cache covers.
    pub max_positions: usize,
    /// Token-type vocabulary (BERT segment embeddings; 0 for decoders).
    pub type_vocab: usize,
    /// Epsilon of LayerNorm / RMSNorm.
    pub norm_eps: f32,
    /// RoPE base frequency (LLaMA).
    pub rope_theta: f32,
    /// Where a LLaMA-family decoder departs from LLaMA (the GGUF
    /// architectures `qwen2`, `qwen3`, `gemma3`, `phi3`); the default for
    /// every catalogue model.
    #[serde(default, skip_serializing_if = "Variant::is_plain")]
    pub variant: Variant,
}

/// A LLaMA-family decoder's departures from LLaMA, as the GGUF files of
/// other architectures carry them (the per-block parts, QK norms and
/// post-norms, are the block's optional tensors).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Variant {
    /// The file's architecture name (`gemma3`); empty: the family's own.
    pub name: String,
    /// Head width when it is not `hidden / heads` (a file's
    /// `attention.key_length`); 0: `hidden / heads`.
    pub head_dim: usize,
    /// Token embeddings are multiplied by this (Gemma: sqrt(hidden)); 0: by 1.
    pub embed_scale: f32,
    /// The gated FFN's activation is tanh-GELU (Gemma's GeGLU), not SiLU.
    pub gelu_gate: bool,
    /// Keys a sliding-window layer sees: positions `p - window + 1 ..= p`; 0: no window.
    pub window: usize,
    /// Which layers attend through the window (empty: none).
    pub window_layers: Vec<bool>,
    /// RoPE base of the sliding-window layers.
    pub rope_theta_window: f32,
    /// `c * tanh(logits / c)` on the output logits; 0: none.
    pub final_softcap: f32,
}

impl Variant {
    /// Whether nothing departs from the family (what serialization skips).
    pub fn is_plain(&self) -> bool {
        *self == Self::default()
    }
    /// Whether layer `l` attends through the sliding window.
    pub fn windowed(&self, l: usize) -> bool {
        self.window > 0 && self.window_layers.get(l).copied().unwrap_or(false)
    }
}

/// One weight tensor: its name (Hugging Face style) and shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightSpec {
    /// e.g. `layers.3.attn.q.weight`.
    pub name: String,
    /// Row-major shape; linear weights are `[out, in]`.
    pub shape: Vec<usize>,
}

impl WeightSpec {
    fn new(name: impl Into<String>, shape: &[usize]) -> Self {
        Self { name: name.into(), shape: shape.to_vec() }
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// True for the 2-D projection matrices of the blocks and the LM head,
    /// the tensors weight-only quantization applies to (embeddings, norms and
    /// biases stay in full precision).
    pub fn is_matrix(&self) -> bool {
        self.shape.len() == 2 && !self.name.contains("embed")
    }
}

/// Names in the catalogue, in the order `list` shows them.
pub const PRESETS: &[&str] = &[
    "bert-tiny",
    "bert-base",
    "bert-large",
    "gpt2-tiny",
    "gpt2",
    "gpt2-medium",
    "llama-tiny",
    "llama-7b",
    "llama-13b",
    "mobilebert-size",
    "distilbert",
    "tinyllama-1.1b",
];

impl ModelConfig {
    /// A catalogue entry with the published shape (the `-tiny` entries are
    /// small configs of the same architecture for fast tests and smoke runs).
    ///
    /// The mobile-class entries: `distilbert` is DistilBERT's shape (6
    /// layers, 768 wide, 12 heads; tfbench's BERT keeps the segment
    /// embeddings and pooler DistilBERT drops, 0.59M of its 66.4M
    /// parameters); `mobilebert-size` is a plain BERT encoder of MobileBERT's
    /// depth (24 layers), heads (4) and size (27.0M parameters against
    /// MobileBERT's 25.3M), not MobileBERT's bottleneck blocks and stacked
    /// FFNs, which tfbench does not implement; `tinyllama-1.1b` is
    /// TinyLlama-1.1B's shape (22 layers, 2048 wide, 32 query and 4 KV
    /// heads, FFN 5632), a ~1B-parameter on-device decoder. Weights are
    /// seeded random, as for every catalogue entry.
    pub fn preset(name: &str) -> Result<Self> {
        let bert = |layers, hidden, heads, ffn, vocab| Self {
            name: name.to_string(),
            arch: Arch::Bert,
            layers,
            hidden,
            heads,
            kv_heads: heads,
            ffn,
            vocab,
            max_positions: 512,
            type_vocab: 2,
            norm_eps: 1e-12,
            rope_theta: 0.0,
            variant: Variant::default(),
        };
        let gpt2 = |layers, hidden, heads, ffn, vocab| Self {
            name: name.to_string(),
            arch: Arch::Gpt2,
            layers,
            hidden,
            heads,
            kv_heads: heads,
            ffn,
            vocab,
            max_positions: 1024,
            type_vocab: 0,
            norm_eps: 1e-5,
            rope_theta: 0.0,
            variant: Variant::default(),
        };
        let llama = |layers, hidden, heads, kv_heads, ffn, vocab| Self {
            name: name.to_string(),
            arch: Arch::Llama,
            layers,
            hidden,
            heads,
            kv_heads,
            ffn,
            vocab,
            max_positions: 4096,
            type_vocab: 0,
            norm_eps: 1e-5,
            rope_theta: 10000.0,
            variant: Variant::default(),
        };
        Ok(match name {
            "bert-tiny" => bert(2, 128, 2, 512, 30522),
            "bert-base" => bert(12, 768, 12, 3072, 30522),
            "bert-large" => bert(24, 1024, 16, 4096, 30522),
            "gpt2-tiny" => gpt2(2, 128, 2, 512, 4096),
            "gpt2" => gpt2(12, 768, 12, 3072, 50257),
            "gpt2-medium" => gpt2(24, 1024, 16, 4096, 50257),
            "llama-tiny" => llama(2, 128, 4, 2, 352, 4096),
            "llama-7b" => llama(32, 4096, 32, 32, 11008, 32000),
            "llama-13b" => llama(40, 5120, 40, 40, 13824, 32000),
            "mobilebert-size" => bert(24, 256, 4, 1024, 30522),
            "distilbert" => bert(6, 768, 12, 3072, 30522),
            "tinyllama-1.1b" => Self { max_positions: 2048, ..llama(22, 2048, 32, 4, 5632, 32000) },
            _ => bail!("unknown model `{name}`; valid models: {}", PRESETS.join(", ")),
        })
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        if self.variant.head_dim > 0 { self.variant.head_dim } else { self.hidden / self.heads }
    }

    /// Width of the queries (and of attention's output): `heads * head_dim`,
    /// the model width unless the file sets its own head width.
    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim()
    }

    /// The architecture's name: a file's own (`qwen3`) or the family's.
    pub fn arch_name(&self) -> &str {
        if self.variant.name.is_empty() { self.arch.name() } else { &self.variant.name }
    }

    /// Checks the shape is internally consistent (heads divide the width,
    /// kv heads divide heads, nothing is zero).
    pub fn validate(&self) -> Result<()> {
        let name = &self.name;
        if [self.layers, self.hidden, self.heads, self.kv_heads, self.ffn, self.vocab, self.max_positions]
            .contains(&0)
        {
            bail!("model {name}: layers, hidden, heads, kv_heads, ffn, vocab and max_positions must be > 0");
        }
        if self.variant.head_dim == 0 && !self.hidden.is_multiple_of(self.heads) {
            bail!("model {name}: hidden {} is not a multiple of heads {}", self.hidden, self.heads);
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            bail!("model {name}: heads {} is not a multiple of kv_heads {}", self.heads, self.kv_heads);
        }
        if self.arch != Arch::Llama && self.kv_heads != self.heads {
            bail!("model {name}: grouped-query attention (kv_heads < heads) is a LLaMA feature");
        }
        if self.arch == Arch::Llama && !self.head_dim().is_multiple_of(2) {
            bail!("model {name}: rotary embeddings need an even head dimension, got {}", self.head_dim());
        }
        Ok(())
    }

    /// Every weight tensor of the model, in a fixed order. Linear weights
    /// are `[out, in]`.
    pub fn weights(&self) -> Vec<WeightSpec> {
        let (h, f, v, qd) = (self.hidden, self.ffn, self.vocab, self.q_dim());
        let kv = self.kv_heads * self.head_dim();
        let mut w = vec![WeightSpec::new("embed.tokens", &[v, h])];
        match self.arch {
            Arch::Bert => {
                w.push(WeightSpec::new("embed.positions", &[self.max_positions, h]));
                w.push(WeightSpec::new("embed.types", &[self.type_vocab, h]));
                w.push(WeightSpec::new("embed.norm.weight", &[h]));
                w.push(WeightSpec::new("embed.norm.bias", &[h]));
            }
            Arch::Gpt2 => w.push(WeightSpec::new("embed.positions", &[self.max_positions, h])),
            Arch::Llama => {}
        }
        for l in 0..self.layers {
            let p = |s: &str| format!("layers.{l}.{s}");
            let biased = self.arch != Arch::Llama;
            let mut linear = |name: &str, out: usize, inp: usize| {
                w.push(WeightSpec::new(p(&format!("{name}.weight")), &[out, inp]));
                if biased {
                    w.push(WeightSpec::new(p(&format!("{name}.bias")), &[out]));
                }
            };
            linear("attn.q", qd, h);
            linear("attn.k", kv, h);
            linear("attn.v", kv, h);
            linear("attn.o", h, qd);
            if self.arch == Arch::Llama {
                linear("ffn.gate", f, h);
            }
            linear("ffn.up", f, h);
            linear("ffn.down", h, f);
            let norms: &[&str] =
                if self.arch == Arch::Llama { &["attn_norm", "ffn_norm"] } else { &["norm1", "norm2"] };
            for n in norms {
                w.push(WeightSpec::new(p(&format!("{n}.weight")), &[h]));
                if biased {
                    w.push(WeightSpec::new(p(&format!("{n}.bias")), &[h]));
                }
            }
        }
        match self.arch {
            Arch::Bert => {
                w.push(WeightSpec::new("pooler.weight", &[h, h]));
                w.push(WeightSpec::new("pooler.bias", &[h]));
            }
            Arch::Gpt2 => {
                w.push(WeightSpec::new("final_norm.weight", &[h]));
                w.push(WeightSpec::new("final_norm.bias", &[h]));
            }
            Arch::Llama => {
                w.push(WeightSpec::new("final_norm.weight", &[h]));
                w.push(WeightSpec::new("lm_head.weight", &[v, h]));
            }
        }
        w
    }

    /// Total parameters (a tied LM head counts once).
    pub fn param_count(&self) -> u64 {
        self.weights().iter().map(|w| w.numel() as u64).sum()
    }

    /// Bytes of all weights at `bytes_per_param` (4 for f32, 2 for f16/bf16,
    /// fractional for block-quantized formats).
    pub fn weight_bytes(&self, bytes_per_param: f64) -> f64 {
        self.param_count() as f64 * bytes_per_param
    }

    /// Bytes of a KV cache holding `tokens` positions for `batch` sequences:
    /// keys and values, every layer, `kv_heads * head_dim` each.
    pub fn kv_cache_bytes(&self, batch: usize, tokens: usize, bytes_per_elem: usize) -> u64 {
        2 * self.layers as u64
            * batch as u64
            * tokens as u64
            * (self.kv_heads * self.head_dim()) as u64
            * bytes_per_elem as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_parameter_counts() {
        // Reference counts from the model cards / Hugging Face configs.
        let millions = |n: &str| ModelConfig::preset(n).unwrap().param_count() as f64 / 1e6;
        assert!((millions("bert-base") - 109.48).abs() < 0.01, "{}", millions("bert-base"));
        assert!((millions("bert-large") - 335.14).abs() < 0.01, "{}", millions("bert-large"));
        assert!((millions("gpt2") - 124.44).abs() < 0.01, "{}", millions("gpt2"));
        assert!((millions("gpt2-medium") - 354.82).abs() < 0.01, "{}", millions("gpt2-medium"));
        assert!((millions("llama-7b") - 6738.42).abs() < 0.01, "{}", millions("llama-7b"));
        assert!((millions("llama-13b") - 13015.86).abs() < 0.01, "{}", millions("llama-13b"));
        // TinyLlama-1.1B's model card count; DistilBERT's (66,362,880) plus
        // the segment embeddings (2 x 768) and pooler (768 x 768 + 768) it drops.
        let count = |n: &str| ModelConfig::preset(n).unwrap().param_count();
        assert_eq!(count("tinyllama-1.1b"), 1_100_048_384);
        assert_eq!(count("distilbert"), 66_362_880 + 2 * 768 + 768 * 768 + 768);
        // Within 7% of MobileBERT's published 25.3M.
        assert!((millions("mobilebert-size") / 25.3 - 1.0).abs() < 0.07, "{}", millions("mobilebert-size"));
    }

    #[test]
    fn presets_validate_and_unknown_names_list_the_choices() {
        for name in PRESETS {
            ModelConfig::preset(name).unwrap().validate().unwrap();
        }
        let err = ModelConfig::preset("gpt5").unwrap_err().to_string();
        assert!(err.contains("gpt5") && err.contains("llama-7b"), "{err}");
        let mut bad = ModelConfig::preset("gpt2").unwrap();
        bad.kv_heads = 4;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn kv_cache_bytes_by_hand() {
        let m = ModelConfig::preset("llama-7b").unwrap();
        // 2 (k, v) * 32 layers * 4096 * 2 bytes = 512 KiB per token in f16.
        assert_eq!(m.kv_cache_bytes(1, 1, 2), 2 * 32 * 4096 * 2);
        let tiny = ModelConfig::preset("llama-tiny").unwrap();
        assert_eq!(tiny.kv_cache_bytes(2, 10, 4), 2 * 2 * 2 * 10 * (2 * 32) * 4);
    }
}
