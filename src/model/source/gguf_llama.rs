//! The LLaMA family of GGUF architectures: `llama` and the decoders that
//! differ from it in a few parts, each as llama.cpp 0c1e570 builds its
//! graph (`src/models/<arch>.cpp`):
//!
//! - `qwen2`: biases on Q, K and V (optional in every member, as
//!   llama.cpp's `create_tensor_qkv` takes them wherever present).
//! - `qwen3`: a per-head RMSNorm of Q and K before RoPE (`attn_q_norm`,
//!   `attn_k_norm`), its own head width (`attention.key_length`).
//! - `gemma3`: the embedding scaled by sqrt(width); QK norms; RMSNorms of
//!   the attention and FFN outputs before each residual addition
//!   (`post_attention_norm`, `post_ffw_norm`); a tanh-GELU gated FFN;
//!   sliding-window attention on five layers of every six
//!   (`attention.sliding_window`, `attention.sliding_window_pattern`) with
//!   their own RoPE base (`rope.freq_base_swa`, 10^4 when absent); an
//!   optional final logit soft-cap. Its norm weights are stored as llama.cpp's
//!   converter writes them, `1 + w`, and used as they are.
//! - `phi3`: fused `attn_qkv` and a fused `ffn_up` holding the gate's rows
//!   then the up projection's (`ggml_swiglu` activates the first half);
//!   llama.cpp runs it without a sliding window (disabled in 0c1e570), so
//!   does tfbench.
//!
//! Mistral's files are `llama` ones (llama.cpp's converter writes Mistral 7B
//! as `llama`, and its `llama` graph has no sliding window either).
//!
//! Rotary pairs: llama.cpp's converter permutes `llama`'s Q and K rows for
//! ggml's adjacent-pair rotation (un-permuted here); the other members use
//! ggml's NEOX rotation, which pairs `i` with `i + head_dim/2` as
//! tfbench's [`Rope`] does, so their rows are taken as stored.

use super::gguf::Loader;
use super::gguf_arch::Kind;
use crate::model::config::{ModelConfig, Variant};
use crate::model::gguf::{Header, Value};
use crate::model::linear::Linear;
use crate::model::ops::Rope;
use crate::model::transformer::{Block, Model, Norm};
use anyhow::{Result, bail};

/// The architecture's departures from `llama` read from the header (the
/// head width is [`super::gguf`]'s `shape`, checked against the tensors).
/// A window or pattern only masks keys, so no count here sizes anything.
pub(super) fn variant(h: &Header, kind: Kind, cfg: &ModelConfig) -> Result<Variant> {
    let arch = kind.name();
    let k = |s: &str| format!("{arch}.{s}");
    let mut v = cfg.variant.clone();
    if kind != Kind::Llama {
        v.name = arch.to_string();
    }
    if kind != Kind::Gemma3 {
        return Ok(v);
    }
    v.embed_scale = (cfg.hidden as f32).sqrt();
    v.gelu_gate = true;
    v.final_softcap = h.get(&k("final_logit_softcapping")).and_then(Value::as_f64).unwrap_or(0.0) as f32;
    if !(v.final_softcap >= 0.0 && v.final_softcap.is_finite()) {
        bail!(
            "metadata `{}` is {}: it must be a finite value >= 0",
            k("final_logit_softcapping"),
            v.final_softcap
        );
    }
    v.window = h
        .get(&k("attention.sliding_window"))
        .and_then(Value::as_u64)
        .map_or(0, |w| usize::try_from(w).unwrap_or(usize::MAX));
    if v.window > 0 {
        let pk = k("attention.sliding_window_pattern");
        v.window_layers = match h.get(&pk) {
            // llama.cpp's `load_swa_pattern`: an array of per-layer flags...
            Some(Value::Array(a)) => {
                if a.len() != cfg.layers {
                    bail!("metadata `{pk}` has {} entries for {} blocks", a.len(), cfg.layers);
                }
                a.iter()
                    .map(|x| match x {
                        Value::Bool(b) => Ok(*b),
                        _ => bail!("metadata `{pk}` holds a value that is not a bool"),
                    })
                    .collect::<Result<_>>()?
            }
            // ...or a period n: layer l is windowed unless l % n == n - 1 (6 by default).
            other => {
                let n = match other {
                    None => 6,
                    Some(x) => {
                        x.as_u64().ok_or_else(|| anyhow::anyhow!("metadata `{pk}` is not an integer"))?
                    }
                };
                (0..cfg.layers as u64).map(|l| n == 0 || l % n < n - 1).collect()
            }
        };
        v.rope_theta_window =
            h.get(&k("rope.freq_base_swa")).and_then(Value::as_f64).unwrap_or(10000.0) as f32;
    }
    Ok(v)
}

impl Loader<'_> {
    /// An RMSNorm's weights.
    fn rms(&self, name: &str, len: usize) -> Result<Norm> {
        Ok(Norm { w: self.vector(name, len)?, b: None })
    }

    /// Q, K and V of block `i`: separate tensors (a `llama`'s Q/K rows
    /// un-permuted) or a fused `attn_qkv` split by rows, biases where the
    /// file has them.
    fn family_qkv(&self, i: usize, cfg: &ModelConfig, kind: Kind) -> Result<[Linear; 3]> {
        let (h, qd, kvd) = (cfg.hidden, cfg.q_dim(), cfg.kv_heads * cfg.head_dim());
        if self.has(&format!("blk.{i}.attn_qkv.weight")) {
            return self.qkv(i, cfg);
        }
        let p = |s: &str| format!("blk.{i}.{s}");
        let perm = |heads: usize| (kind == Kind::Llama).then_some(heads);
        let mut q = self.linear(&p("attn_q.weight"), qd, h, perm(cfg.heads))?;
        let mut k = self.linear(&p("attn_k.weight"), kvd, h, perm(cfg.kv_heads))?;
        let mut v = self.linear(&p("attn_v.weight"), kvd, h, None)?;
        if kind == Kind::Llama && ["attn_q.bias", "attn_k.bias"].iter().any(|b| self.has(&p(b))) {
            bail!("tensor `{}`: Q/K biases of a `llama` file are not supported", p("attn_q.bias"));
        }
        q.bias = self.bias(&p("attn_q"), qd)?;
        k.bias = self.bias(&p("attn_k"), kvd)?;
        v.bias = self.bias(&p("attn_v"), kvd)?;
        Ok([q, k, v])
    }

    /// Gate and up projections of block `i`: `ffn_gate` and `ffn_up`, or
    /// phi3's fused `ffn_up` (gate rows first).
    fn gate_up(&self, i: usize, cfg: &ModelConfig, kind: Kind) -> Result<(Linear, Linear)> {
        let (h, f) = (cfg.hidden, cfg.ffn);
        let up = format!("blk.{i}.ffn_up.weight");
        if kind == Kind::Phi3 {
            return Ok((self.rows(&up, 2 * f, h, 0, f)?, self.rows(&up, 2 * f, h, f, f)?));
        }
        Ok((self.linear(&format!("blk.{i}.ffn_gate.weight"), f, h, None)?, self.linear(&up, f, h, None)?))
    }
}

/// A model of the LLaMA family from its GGUF file; `positions` sizes the
/// RoPE tables.
pub(super) fn load(l: &Loader, cfg: &ModelConfig, kind: Kind, positions: usize) -> Result<Model> {
    let (h, f, v, hd, qd) = (cfg.hidden, cfg.ffn, cfg.vocab, cfg.head_dim(), cfg.q_dim());
    let tokens = l.linear("token_embd.weight", v, h, None)?;
    let mut blocks = Vec::with_capacity(cfg.layers);
    for i in 0..cfg.layers {
        let p = |s: &str| format!("blk.{i}.{s}");
        let [q, k, vv] = l.family_qkv(i, cfg, kind)?;
        let (gate, up) = l.gate_up(i, cfg, kind)?;
        let mut o = l.linear(&p("attn_output.weight"), h, qd, None)?;
        o.bias = l.bias(&p("attn_output"), h)?;
        let qk_norm = if matches!(kind, Kind::Qwen3 | Kind::Gemma3) {
            let mut qn = l.rms(&p("attn_q_norm.weight"), hd)?;
            // Gemma 3 27B scales queries by 1/sqrt(hidden/heads), not
            // 1/sqrt(head_dim) (llama.cpp's `f_attention_scale` for its 62
            // layers): the ratio folds into the query norm's weights, which
            // only ever multiply the queries before attention.
            if kind == Kind::Gemma3 && cfg.layers == 62 {
                let c = ((hd as f64) / (h as f64 / cfg.heads as f64)).sqrt() as f32;
                qn.w.iter_mut().for_each(|w| *w *= c);
            }
            Some((qn, l.rms(&p("attn_k_norm.weight"), hd)?))
        } else {
            None
        };
        let post_norms = if kind == Kind::Gemma3 {
            Some((l.rms(&p("post_attention_norm.weight"), h)?, l.rms(&p("post_ffw_norm.weight"), h)?))
        } else {
            None
        };
        blocks.push(Block {
            q,
            k,
            v: vv,
            o,
            gate: Some(gate),
            up,
            down: l.linear(&p("ffn_down.weight"), h, f, None)?,
            n1: l.rms(&p("attn_norm.weight"), h)?,
            n2: l.rms(&p("ffn_norm.weight"), h)?,
            qk_norm,
            post_norms,
        });
    }
    let mut m = super::gguf_arch::model(cfg, tokens, blocks);
    m.final_norm = Some(l.rms("output_norm.weight", h)?);
    // Tied output (SmolLM2, Gemma 3): no `output.weight`, the LM head is the embedding.
    if l.has("output.weight") {
        let mut head = l.linear("output.weight", v, h, None)?;
        head.bias = l.bias("output", v)?;
        m.lm_head = Some(head);
    } else if l.has("output.bias") {
        bail!("tensor `output.bias` without `output.weight` (a bias on a tied output) is not supported");
    }
    let n = positions.clamp(1, cfg.max_positions);
    m.rope = Some(Rope::new(n, hd, cfg.rope_theta));
    let var = &cfg.variant;
    if var.window > 0 && var.window_layers.iter().any(|&w| w) && var.rope_theta_window != cfg.rope_theta {
        m.rope_window = Some(Rope::new(n, hd, var.rope_theta_window));
    }
    Ok(m)
}
