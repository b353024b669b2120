//! The `gpt2` and `bert` architectures from a GGUF file, with llama.cpp's
//! tensor names (its `src/models/gpt2.cpp` and `bert.cpp` at 0c1e570, the
//! build tfbench is checked against):
//!
//! - gpt2: `token_embd`, `position_embd`, per block `attn_norm` (+bias),
//!   `attn_qkv` (fused, or `attn_q/k/v`) (+bias), `attn_output` (+bias),
//!   `ffn_norm` (+bias), `ffn_up` (+bias), `ffn_down` (+bias); then
//!   `output_norm` (+bias) and `output` (absent: tied to the embedding).
//! - bert: `token_embd`, `token_types` (row 0 added, "sentence A", as
//!   llama.cpp), `position_embd`, `token_embd_norm` (+bias), per block
//!   `attn_q/k/v` (or `attn_qkv`), `attn_output`, `attn_output_norm`,
//!   `ffn_up`, `ffn_down`, `layer_output_norm`, biases where present. No
//!   pooler: llama.cpp's converter drops it; the model's output is the last
//!   hidden states.
//!
//! Each matrix stays in the file's type through the kernel library, as for
//! `llama`; a fused QKV is split by rows, which moves whole rows and is
//! exact for every row-wise format.
//!
//! [`Kind`] names every GGUF architecture tfbench runs, with the tensors
//! each needs ([`required`]); the LLaMA family is built in `gguf_llama.rs`.

use super::gguf::Loader;
use crate::model::config::{Arch, ModelConfig};
use crate::model::linear::{DType, Linear};
use crate::model::transformer::{Block, Model, Norm};
use anyhow::Result;

impl Loader<'_> {
    /// `{name}.weight` with `{name}.bias` when the file has it.
    fn biased(&self, name: &str, rows: usize, cols: usize) -> Result<Linear> {
        let mut l = self.linear(&format!("{name}.weight"), rows, cols, None)?;
        l.bias = self.bias(name, rows)?;
        Ok(l)
    }

    /// `{name}.bias` as `len` values, when the file has it.
    pub(super) fn bias(&self, name: &str, len: usize) -> Result<Option<Vec<f32>>> {
        let b = format!("{name}.bias");
        Ok(if self.has(&b) { Some(self.vector(&b, len)?) } else { None })
    }

    /// A LayerNorm: `{name}.weight` and `{name}.bias`, both required.
    fn layer_norm(&self, name: &str, len: usize) -> Result<Norm> {
        let w = self.vector(&format!("{name}.weight"), len)?;
        Ok(Norm { w, b: Some(self.vector(&format!("{name}.bias"), len)?) })
    }

    /// The first `rows` rows of a `[cols, n]` table (learned positions).
    fn table(&self, name: &str, rows: usize, cols: usize) -> Result<Vec<f32>> {
        let t = self.tensor(name)?;
        let have = t.dims.get(1).copied().unwrap_or(0) as usize;
        if t.dims.first() != Some(&(cols as u64)) || t.dims.len() != 2 || have < rows {
            anyhow::bail!("tensor `{name}` has dims {:?}, expected [{cols}, at least {rows}]", t.dims);
        }
        let mut v = self.vector(name, have * cols)?;
        v.truncate(rows * cols);
        Ok(v)
    }

    /// Q, K and V of block `i`: a fused `attn_qkv` split by rows (and its
    /// bias by values), or three tensors.
    pub(super) fn qkv(&self, i: usize, cfg: &ModelConfig) -> Result<[Linear; 3]> {
        let (h, qd, kvd) = (cfg.hidden, cfg.q_dim(), cfg.kv_heads * cfg.head_dim());
        let fused = format!("blk.{i}.attn_qkv");
        if !self.has(&format!("{fused}.weight")) {
            let p = |s: &str| format!("blk.{i}.{s}");
            return Ok([
                self.biased(&p("attn_q"), qd, h)?,
                self.biased(&p("attn_k"), kvd, h)?,
                self.biased(&p("attn_v"), kvd, h)?,
            ]);
        }
        let total = qd + 2 * kvd;
        let bias = self.bias(&fused, total)?;
        let w = format!("{fused}.weight");
        let part = |start: usize, rows: usize| -> Result<Linear> {
            let mut l = self.rows(&w, total, h, start, rows)?;
            l.bias = bias.as_ref().map(|b| b[start..start + rows].to_vec());
            Ok(l)
        };
        Ok([part(0, qd)?, part(qd, kvd)?, part(qd + kvd, kvd)?])
    }
}

/// A GGUF architecture tfbench runs (`general.architecture`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `llama` (and Mistral's files, which are `llama` ones).
    Llama,
    /// `gpt2`.
    Gpt2,
    /// `bert`.
    Bert,
    /// `qwen2`: LLaMA with Q/K/V biases.
    Qwen2,
    /// `qwen3`: LLaMA with QK norms and its own head width.
    Qwen3,
    /// `gemma3` (`gguf_llama.rs` lists its parts).
    Gemma3,
    /// `phi3`: fused QKV and gate/up.
    Phi3,
}

/// Every architecture tfbench runs, by its GGUF name.
pub const KINDS: &[(&str, Kind)] = &[
    ("llama", Kind::Llama),
    ("gpt2", Kind::Gpt2),
    ("bert", Kind::Bert),
    ("qwen2", Kind::Qwen2),
    ("qwen3", Kind::Qwen3),
    ("gemma3", Kind::Gemma3),
    ("phi3", Kind::Phi3),
];

impl Kind {
    /// The architecture named `name`, if tfbench runs it.
    pub fn parse(name: &str) -> Option<Self> {
        KINDS.iter().find(|k| k.0 == name).map(|k| k.1)
    }
    /// Its GGUF name.
    pub fn name(self) -> &'static str {
        KINDS.iter().find(|k| k.1 == self).map_or("llama", |k| k.0)
    }
    /// The runtime's family: every decoder with RMSNorm and RoPE is [`Arch::Llama`].
    pub fn family(self) -> Arch {
        match self {
            Self::Gpt2 => Arch::Gpt2,
            Self::Bert => Arch::Bert,
            _ => Arch::Llama,
        }
    }
}

/// Every tensor the architecture needs (optional ones left out), so a file
/// missing one is refused by name before anything is loaded. `cfg.layers`
/// must already be bounded by the tensors present (`gguf::shape` does).
pub(super) fn required(cfg: &ModelConfig, kind: Kind, has: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out = outside_blocks(kind);
    for i in 0..cfg.layers {
        out.extend(block_tensors(kind, i, &has));
    }
    out
}

/// The tensors the architecture needs outside its blocks.
pub(super) fn outside_blocks(kind: Kind) -> Vec<String> {
    let w = |n: &str| format!("{n}.weight");
    let wb = |n: &str| [format!("{n}.weight"), format!("{n}.bias")];
    let mut out = vec![w("token_embd")];
    match kind.family() {
        Arch::Llama => out.push(w("output_norm")),
        Arch::Gpt2 => {
            out.push(w("position_embd"));
            out.extend(wb("output_norm"));
        }
        Arch::Bert => {
            out.push(w("position_embd"));
            out.extend(wb("token_embd_norm"));
        }
    }
    out
}

/// The tensors block `i` needs: a fused `attn_qkv` (every architecture but
/// `llama`, whose Q/K rows are un-permuted one by one) when `has` says the
/// file holds one, else separate Q, K and V. With `has` always true, the
/// fewest any block of the architecture needs.
pub(super) fn block_tensors(kind: Kind, i: usize, has: impl Fn(&str) -> bool) -> Vec<String> {
    let w = |n: &str| format!("{n}.weight");
    let wb = |n: &str| [format!("{n}.weight"), format!("{n}.bias")];
    let p = |s: &str| format!("blk.{i}.{s}");
    let mut out = Vec::new();
    if kind != Kind::Llama && has(&w(&p("attn_qkv"))) {
        out.push(w(&p("attn_qkv")));
    } else {
        out.extend(["attn_q", "attn_k", "attn_v"].map(|n| w(&p(n))));
    }
    out.extend(["attn_output", "ffn_up", "ffn_down"].map(|n| w(&p(n))));
    let extra: &[&str] = match kind {
        Kind::Qwen3 => &["attn_q_norm", "attn_k_norm"],
        Kind::Gemma3 => &["attn_q_norm", "attn_k_norm", "post_attention_norm", "post_ffw_norm"],
        _ => &[],
    };
    out.extend(extra.iter().map(|n| w(&p(n))));
    match kind.family() {
        Arch::Llama if kind == Kind::Phi3 => out.extend(["attn_norm", "ffn_norm"].map(|n| w(&p(n)))),
        Arch::Llama => out.extend(["ffn_gate", "attn_norm", "ffn_norm"].map(|n| w(&p(n)))),
        Arch::Gpt2 => ["attn_norm", "ffn_norm"].iter().for_each(|n| out.extend(wb(&p(n)))),
        Arch::Bert => ["attn_output_norm", "layer_output_norm"].iter().for_each(|n| out.extend(wb(&p(n)))),
    }
    out
}

/// A GGUF model's common frame: f32 activations, the token table and the
/// blocks, every optional part empty for the architecture to fill in.
pub(super) fn model(cfg: &ModelConfig, tokens: Linear, blocks: Vec<Block>) -> Model {
    Model {
        cfg: cfg.clone(),
        dtype: DType::F32,
        tokens,
        positions: None,
        types: None,
        emb_norm: None,
        blocks,
        final_norm: None,
        lm_head: None,
        pooler: None,
        rope: None,
        rope_window: None,
    }
}

/// The blocks gpt2 and bert share (biased Q/K/V, output and two-matrix FFN,
/// two LayerNorms), which differ only in their norms' names (`norms`: the
/// first and second, whichever side of the sub-layer they sit on).
fn biased_blocks(l: &Loader, cfg: &ModelConfig, norms: [&str; 2]) -> Result<Vec<Block>> {
    let (h, f) = (cfg.hidden, cfg.ffn);
    (0..cfg.layers)
        .map(|i| {
            let p = |s: &str| format!("blk.{i}.{s}");
            let [q, k, v] = l.qkv(i, cfg)?;
            Ok(Block {
                q,
                k,
                v,
                o: l.biased(&p("attn_output"), h, h)?,
                gate: None,
                up: l.biased(&p("ffn_up"), f, h)?,
                down: l.biased(&p("ffn_down"), h, f)?,
                n1: l.layer_norm(&p(norms[0]), h)?,
                n2: l.layer_norm(&p(norms[1]), h)?,
                qk_norm: None,
                post_norms: None,
            })
        })
        .collect()
}

/// A `gpt2` GGUF model: pre-norm LayerNorm blocks, learned positions,
/// tanh-GELU FFN, tied or untied output.
pub(super) fn gpt2(l: &Loader, cfg: &ModelConfig) -> Result<Model> {
    let (h, v) = (cfg.hidden, cfg.vocab);
    let tokens = l.linear("token_embd.weight", v, h, None)?;
    let mut m = model(cfg, tokens, biased_blocks(l, cfg, ["attn_norm", "ffn_norm"])?);
    m.positions = Some(l.table("position_embd.weight", cfg.max_positions, h)?);
    m.final_norm = Some(l.layer_norm("output_norm", h)?);
    if l.has("output.weight") {
        m.lm_head = Some(l.linear("output.weight", v, h, None)?);
    }
    Ok(m)
}

/// A `bert` GGUF model: post-norm encoder, erf-GELU FFN, no pooler.
pub(super) fn bert(l: &Loader, cfg: &ModelConfig) -> Result<Model> {
    let (h, v) = (cfg.hidden, cfg.vocab);
    let tokens = l.linear("token_embd.weight", v, h, None)?;
    let mut m = model(cfg, tokens, biased_blocks(l, cfg, ["attn_output_norm", "layer_output_norm"])?);
    m.positions = Some(l.table("position_embd.weight", cfg.max_positions, h)?);
    if cfg.type_vocab > 0 {
        m.types = Some(l.table("token_types.weight", cfg.type_vocab, h)?);
    }
    m.emb_norm = Some(l.layer_norm("token_embd_norm", h)?);
    Ok(m)
}
