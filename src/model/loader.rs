//! Building a [`Model`] from named tensors (seeded random or a safetensors
//! file): the catalogue's names and shapes, each matrix stored in the
//! model's dtype as it arrives.

use super::linear::{DType, Linear, Weights};
use super::ops::Rope;
use super::transformer::{Block, Model, Norm};
use crate::model::config::{Arch, ModelConfig};
use std::collections::HashMap;

impl Model {
    /// Builds a model from a function giving each tensor by name and shape
    /// (names and shapes from [`ModelConfig::weights`]); matrices and the
    /// token embedding are stored in `dtype`.
    pub fn build(cfg: &ModelConfig, dtype: DType, get: &mut Getter<'_>) -> anyhow::Result<Self> {
        let specs = cfg.weights();
        let shapes = specs.iter().map(|w| (w.name.as_str(), w.shape.as_slice())).collect();
        let mut l = Loader { shapes, get, dtype, model: &cfg.name };
        let tokens = l.linear("embed.tokens")?;
        let positions = l.vector("embed.positions")?;
        let types = l.vector("embed.types")?;
        let emb_norm = l.norm("embed.norm")?;
        let llama = cfg.arch == Arch::Llama;
        let mut blocks = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            let p = |s: &str| format!("layers.{i}.{s}");
            let (a, b) = if llama { ("attn_norm", "ffn_norm") } else { ("norm1", "norm2") };
            blocks.push(Block {
                q: l.linear(&p("attn.q"))?,
                k: l.linear(&p("attn.k"))?,
                v: l.linear(&p("attn.v"))?,
                o: l.linear(&p("attn.o"))?,
                gate: if llama { Some(l.linear(&p("ffn.gate"))?) } else { None },
                up: l.linear(&p("ffn.up"))?,
                down: l.linear(&p("ffn.down"))?,
                n1: l
                    .norm(&p(a))?
                    .ok_or_else(|| anyhow::anyhow!("model {}: layer {i} lacks {a}", cfg.name))?,
                n2: l
                    .norm(&p(b))?
                    .ok_or_else(|| anyhow::anyhow!("model {}: layer {i} lacks {b}", cfg.name))?,
                qk_norm: None,
                post_norms: None,
            });
        }
        let final_norm = l.norm("final_norm")?;
        let lm_head = if l.has("lm_head.weight") { Some(l.linear("lm_head")?) } else { None };
        let pooler = if l.has("pooler.weight") { Some(l.linear("pooler")?) } else { None };
        let rope = llama.then(|| Rope::new(cfg.max_positions, cfg.head_dim(), cfg.rope_theta));
        Ok(Self {
            cfg: cfg.clone(),
            dtype,
            tokens,
            positions,
            types,
            emb_norm,
            blocks,
            final_norm,
            lm_head,
            pooler,
            rope,
            rope_window: None,
        })
    }
}

/// Gives one tensor by name and shape, and whether it is stored in the
/// model's `dtype` (matrices, token embedding) or stays f32.
pub type Getter<'a> = dyn FnMut(&str, &[usize], bool) -> anyhow::Result<Tensor> + 'a;

struct Loader<'a, 'b> {
    /// Each tensor's shape by name (a model looks up every one).
    shapes: HashMap<&'a str, &'a [usize]>,
    get: &'a mut Getter<'b>,
    dtype: DType,
    model: &'a str,
}

impl Loader<'_, '_> {
    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.shapes.get(name).map(|s| s.to_vec())
    }
    fn has(&self, name: &str) -> bool {
        self.shape(name).is_some()
    }
    fn vector(&mut self, name: &str) -> anyhow::Result<Option<Vec<f32>>> {
        match self.shape(name) {
            Some(s) => Ok(Some((self.get)(name, &s, false)?.into_f32())),
            None => Ok(None),
        }
    }
    fn norm(&mut self, prefix: &str) -> anyhow::Result<Option<Norm>> {
        Ok(match self.vector(&format!("{prefix}.weight"))? {
            Some(w) => Some(Norm { w, b: self.vector(&format!("{prefix}.bias"))? }),
            None => None,
        })
    }
    fn linear(&mut self, prefix: &str) -> anyhow::Result<Linear> {
        // The token embedding is named without `.weight` in the catalogue.
        let name = if self.has(prefix) { prefix.to_string() } else { format!("{prefix}.weight") };
        let shape =
            self.shape(&name).ok_or_else(|| anyhow::anyhow!("model {}: no tensor {name}", self.model))?;
        let w = (self.get)(&name, &shape, true)?.into_weights(self.dtype, shape[0], shape[1])?;
        let bias = self.vector(&format!("{prefix}.bias"))?;
        Ok(Linear { out: shape[0], inp: shape[1], w, bias })
    }
}

/// A tensor handed to [`Model::build`]: f32 values, or already stored in the
/// target precision (random init writes halves directly, never holding a
/// full f32 copy of a large matrix).
pub enum Tensor {
    /// f32 values.
    F32(Vec<f32>),
    /// Values already in their storage format.
    Stored(Weights),
}

impl Tensor {
    fn into_f32(self) -> Vec<f32> {
        match self {
            Self::F32(v) => v,
            Self::Stored(w) => w.to_f32(),
        }
    }
    fn into_weights(self, dtype: DType, rows: usize, cols: usize) -> anyhow::Result<Weights> {
        match self {
            Self::F32(v) => Weights::from_f32(v, rows, cols, dtype),
            Self::Stored(w) => Ok(w),
        }
    }
}
