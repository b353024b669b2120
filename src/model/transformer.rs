//! One transformer implementation configured by shape: BERT (post-norm
//! encoder), GPT-2 (pre-norm decoder, tied LM head) and LLaMA (RMSNorm, RoPE,
//! SwiGLU, grouped-query attention, untied head), with a KV cache for decoding.
//! The LLaMA family's variants from GGUF files (`config::Variant`: QK norms,
//! post-norms, GeGLU, sliding-window layers, soft-capped logits, a head
//! width of their own) are optional parts of the same pass.
//!
//! All tokens of a call go through each projection as one GEMM (prefill is
//! `batch * prompt` rows, a decode step `batch` rows: a batch decodes through
//! the same GEMMs, never a loop over sequences). Buffers live in a
//! [`Workspace`] sized once (`workspace.rs`, with the KV cache), so the timed
//! loop does not allocate; `loader.rs` builds a model from named tensors.
//! The encoder pass is here; the decoder's step (`Model::decode`, and the
//! ragged batch's through the same layer step) is in `decode.rs`.

use super::linear::{DType, Linear, Weights};
use super::ops::{self, AttnShape, Rope};
use crate::kernels::quant::w4a8::ActQuant;
use crate::model::config::ModelConfig;
use rayon::prelude::*;

pub use super::loader::{Getter, Tensor};
pub use super::workspace::{KvCache, KvStorage, Workspace, WorkspaceSize};

/// LayerNorm (with bias) or RMSNorm (without) weights.
pub struct Norm {
    /// Scale.
    pub w: Vec<f32>,
    /// Shift; `None` for RMSNorm.
    pub b: Option<Vec<f32>>,
}

/// One transformer block.
pub struct Block {
    /// Query projection.
    pub q: Linear,
    /// Key projection (`kv_heads * head_dim` outputs).
    pub k: Linear,
    /// Value projection.
    pub v: Linear,
    /// Attention output projection.
    pub o: Linear,
    /// SwiGLU gate (LLaMA only).
    pub gate: Option<Linear>,
    /// FFN up projection.
    pub up: Linear,
    /// FFN down projection.
    pub down: Linear,
    /// Norm before attention (pre-norm) or after it (BERT).
    pub n1: Norm,
    /// Norm before the FFN (pre-norm) or after it (BERT).
    pub n2: Norm,
    /// RMSNorms of each query and key head (over `head_dim`) before RoPE
    /// (qwen3, gemma3).
    pub qk_norm: Option<(Norm, Norm)>,
    /// RMSNorms of the attention and FFN outputs before their residual
    /// additions (gemma3's post-norms).
    pub post_norms: Option<(Norm, Norm)>,
}

/// A model with its weights.
pub struct Model {
    /// The shape.
    pub cfg: ModelConfig,
    /// Storage of the matrices and the token embedding.
    pub dtype: DType,
    /// Token embedding `[vocab, hidden]`; GPT-2's LM head is tied to it.
    pub tokens: Linear,
    /// Learned positions `[max_positions, hidden]` (BERT, GPT-2).
    pub positions: Option<Vec<f32>>,
    /// Segment embeddings `[type_vocab, hidden]` (BERT).
    pub types: Option<Vec<f32>>,
    /// LayerNorm after the embeddings (BERT).
    pub emb_norm: Option<Norm>,
    /// The blocks.
    pub blocks: Vec<Block>,
    /// Norm before the LM head (decoders).
    pub final_norm: Option<Norm>,
    /// Untied LM head (LLaMA).
    pub lm_head: Option<Linear>,
    /// BERT pooler (`tanh(W h_cls + b)`).
    pub pooler: Option<Linear>,
    /// Rotary tables (LLaMA).
    pub rope: Option<Rope>,
    /// Rotary tables of the sliding-window layers, when their base differs
    /// (gemma3: 10^4 against the global layers' 10^6).
    pub rope_window: Option<Rope>,
}

/// Copies token-major `[batch*n x kv_heads*hd]` rows into head-major
/// `[batch][kv_heads][cap][hd]` at positions `start..start+n`.
#[allow(clippy::too_many_arguments)]
pub(super) fn scatter_heads(
    src: &[f32],
    dst: &mut [f32],
    batch: usize,
    n: usize,
    kvh: usize,
    hd: usize,
    cap: usize,
    start: usize,
) {
    // One task per (sequence, head): its stretch of `dst` is contiguous and
    // its own. In parallel from a prefill's size on (a serial copy of each
    // layer's K and V held the other threads up).
    let copy = |bh: usize, head: &mut [f32]| {
        let (b, h) = (bh / kvh, bh % kvh);
        for t in 0..n {
            let from = &src[((b * n + t) * kvh + h) * hd..][..hd];
            head[(start + t) * hd..][..hd].copy_from_slice(from);
        }
    };
    let dst = &mut dst[..batch * kvh * cap * hd];
    if batch * n * kvh * hd >= PAR_SCATTER {
        dst.par_chunks_mut(cap * hd).enumerate().for_each(|(bh, head)| copy(bh, head));
    } else {
        dst.chunks_mut(cap * hd).enumerate().for_each(|(bh, head)| copy(bh, head));
    }
}

/// Floats from which [`scatter_heads`] copies in parallel (from about 85
/// tokens of a 768-wide model on; a decode step stays on one thread).
const PAR_SCATTER: usize = 1 << 16;

impl Model {
    /// Parameters actually stored (equals `cfg.param_count()`).
    pub fn stored_params(&self) -> usize {
        let lin = |l: &Linear| l.w.len() + l.bias.as_ref().map_or(0, Vec::len);
        let norm = |n: &Norm| n.w.len() + n.b.as_ref().map_or(0, Vec::len);
        let mut n = lin(&self.tokens)
            + self.positions.as_ref().map_or(0, Vec::len)
            + self.types.as_ref().map_or(0, Vec::len)
            + self.emb_norm.as_ref().map_or(0, norm)
            + self.final_norm.as_ref().map_or(0, norm)
            + self.lm_head.as_ref().map_or(0, lin)
            + self.pooler.as_ref().map_or(0, lin);
        for b in &self.blocks {
            n += [&b.q, &b.k, &b.v, &b.o, &b.up, &b.down].iter().map(|l| lin(l)).sum::<usize>();
            n += b.gate.as_ref().map_or(0, lin) + norm(&b.n1) + norm(&b.n2);
            n += b.qk_norm.iter().chain(&b.post_norms).map(|(x, y)| norm(x) + norm(y)).sum::<usize>();
        }
        n
    }

    /// Bytes of all weights as stored (plus RoPE tables).
    pub fn weight_bytes(&self) -> f64 {
        let norm = |n: &Norm| 4.0 * (n.w.len() + n.b.as_ref().map_or(0, Vec::len)) as f64;
        let mut n = self.tokens.bytes()
            + 4.0
                * (self.positions.as_ref().map_or(0, Vec::len) + self.types.as_ref().map_or(0, Vec::len))
                    as f64
            + self.emb_norm.as_ref().map_or(0.0, norm)
            + self.final_norm.as_ref().map_or(0.0, norm)
            + self.lm_head.as_ref().map_or(0.0, Linear::bytes)
            + self.pooler.as_ref().map_or(0.0, Linear::bytes);
        for b in &self.blocks {
            n += [&b.q, &b.k, &b.v, &b.o, &b.up, &b.down].iter().map(|l| l.bytes()).sum::<f64>();
            n += b.gate.as_ref().map_or(0.0, Linear::bytes) + norm(&b.n1) + norm(&b.n2);
            n += b.qk_norm.iter().chain(&b.post_norms).map(|(x, y)| norm(x) + norm(y)).sum::<f64>();
        }
        let rope = self.rope.iter().chain(&self.rope_window).map(Rope::bytes).sum::<usize>();
        n + rope as f64
    }

    /// Bytes of weights one decode step streams from memory: every block
    /// matrix and the LM head (embedding and position lookups read one row).
    pub fn decode_weight_bytes(&self) -> f64 {
        let head = self.lm_head.as_ref().unwrap_or(&self.tokens).bytes();
        let per_block: f64 = self
            .blocks
            .iter()
            .map(|b| {
                [&b.q, &b.k, &b.v, &b.o, &b.up, &b.down].iter().map(|l| l.bytes()).sum::<f64>()
                    + b.gate.as_ref().map_or(0.0, Linear::bytes)
            })
            .sum();
        head + per_block
    }

    /// Multiply-adds x2 of the projections for `tokens` tokens (attention extra).
    pub fn matrix_flops(&self, tokens: usize) -> f64 {
        let per: usize = self
            .blocks
            .iter()
            .map(|b| {
                [&b.q, &b.k, &b.v, &b.o, &b.up, &b.down].iter().map(|l| l.w.len()).sum::<usize>()
                    + b.gate.as_ref().map_or(0, |g| g.w.len())
            })
            .sum();
        2.0 * per as f64 * tokens as f64
    }

    /// Token rows into `ws.x` (scaled where the variant scales them), plus
    /// the learned position of row `r` at `pos(r)` and BERT's segment 0.
    pub(super) fn embed(&self, ws: &mut Workspace, ids: &[u32], pos: impl Fn(usize) -> usize) {
        let h = self.cfg.hidden;
        for (r, &id) in ids.iter().enumerate() {
            let row = &mut ws.x[r * h..(r + 1) * h];
            self.tokens.w.row_into(id as usize * h, row);
            let scale = self.cfg.variant.embed_scale;
            if scale != 0.0 {
                row.iter_mut().for_each(|v| *v *= scale);
            }
            if let Some(p) = &self.positions {
                let at = pos(r);
                ops::add_into(row, &p[at * h..(at + 1) * h]);
            }
            if let Some(t) = &self.types {
                ops::add_into(row, &t[..h]);
            }
        }
    }

    /// BERT forward over `batch` sequences of `seq` tokens (`ids` and
    /// `mask` are `[batch*seq]`; mask 0 = padding key). The last hidden states
    /// are left in the workspace ([`Workspace::hidden`]), the pooler output in
    /// `ws.pooled`.
    pub fn encode(&self, ws: &mut Workspace, ids: &[u32], mask: &[u8], batch: usize, seq: usize) {
        let cfg = &self.cfg;
        let (h, rows, t) = (cfg.hidden, batch * seq, ws.threads);
        assert!(rows <= ws.rows && ids.len() == rows && mask.len() == rows, "encode: workspace too small");
        let (hd, kvd) = (cfg.head_dim(), cfg.kv_heads * cfg.head_dim());
        self.embed(ws, ids, |r| r % seq);
        if let Some(nm) = &self.emb_norm {
            ops::layer_norm(&mut ws.x[..rows * h], &nm.w, nm.b.as_deref().unwrap_or(&[]), cfg.norm_eps);
        }
        let shape = AttnShape {
            batch,
            heads: cfg.heads,
            kv_heads: cfg.kv_heads,
            head_dim: hd,
            queries: seq,
            keys: seq,
            capacity: seq,
            causal: false,
            window: 0,
        };
        for blk in &self.blocks {
            let x = &ws.x[..rows * h];
            blk.q.forward(t, x, rows, &mut ws.q[..rows * h], &mut ws.lin);
            blk.k.forward(t, x, rows, &mut ws.k[..rows * kvd], &mut ws.lin);
            blk.v.forward(t, x, rows, &mut ws.v[..rows * kvd], &mut ws.lin);
            scatter_heads(&ws.k[..rows * kvd], &mut ws.enc_k, batch, seq, cfg.kv_heads, hd, seq, 0);
            scatter_heads(&ws.v[..rows * kvd], &mut ws.enc_v, batch, seq, cfg.kv_heads, hd, seq, 0);
            ops::attention(
                shape,
                &ws.q[..rows * h],
                &ws.enc_k,
                &ws.enc_v,
                Some(mask),
                &mut ws.att[..rows * h],
                &mut ws.attn,
            );
            blk.o.forward_add(
                t,
                &ws.att[..rows * h],
                rows,
                &mut ws.x[..rows * h],
                &mut ws.tmp[..rows * h],
                &mut ws.lin,
            );
            ops::layer_norm(
                &mut ws.x[..rows * h],
                &blk.n1.w,
                blk.n1.b.as_deref().unwrap_or(&[]),
                cfg.norm_eps,
            );
            let f = cfg.ffn;
            blk.up.forward(t, &ws.x[..rows * h], rows, &mut ws.f1[..rows * f], &mut ws.lin);
            ops::gelu_erf(&mut ws.f1[..rows * f], f);
            blk.down.forward_add(
                t,
                &ws.f1[..rows * f],
                rows,
                &mut ws.x[..rows * h],
                &mut ws.tmp[..rows * h],
                &mut ws.lin,
            );
            ops::layer_norm(
                &mut ws.x[..rows * h],
                &blk.n2.w,
                blk.n2.b.as_deref().unwrap_or(&[]),
                cfg.norm_eps,
            );
        }
        if let Some(p) = &self.pooler {
            for b in 0..batch {
                ws.last[b * h..(b + 1) * h].copy_from_slice(&ws.x[b * seq * h..(b * seq + 1) * h]);
            }
            p.forward(t, &ws.last[..batch * h], batch, &mut ws.pooled[..batch * h], &mut ws.lin);
            ws.pooled[..batch * h].iter_mut().for_each(|v| *v = v.tanh());
        }
    }
}

impl Model {
    /// Every linear layer: token embedding, LM head, then each block's
    /// projections (the gate where there is one).
    fn linears_mut(&mut self) -> impl Iterator<Item = &mut Linear> {
        let blocks = self.blocks.iter_mut().flat_map(|b| {
            [&mut b.q, &mut b.k, &mut b.v, &mut b.o, &mut b.up, &mut b.down]
                .into_iter()
                .chain(b.gate.as_mut())
        });
        std::iter::once(&mut self.tokens).chain(self.lm_head.as_mut()).chain(blocks)
    }

    /// Sets every 4-bit matrix to int8 (`true`, llama.cpp's decode
    /// arithmetic) or exact f32 activations.
    pub fn set_int8_activations(&mut self, on: bool) {
        for l in self.linears_mut() {
            if let Weights::Quant(q) = &mut l.w {
                q.set_int8_activations(on);
            }
        }
    }

    /// Whether any matrix's int8 decode quantizes activations by Q8_K (Q4_K
    /// and Q6_K weights, llama.cpp's 256-value blocks).
    pub fn uses_q8k(&self) -> bool {
        let q8k = |l: &Linear| matches!(&l.w, Weights::Quant(q) if q.act_quant() == ActQuant::Q8K);
        self.blocks
            .iter()
            .any(|b| [&b.q, &b.k, &b.v, &b.o, &b.up, &b.down].into_iter().chain(b.gate.as_ref()).any(&q8k))
            || q8k(&self.tokens)
            || self.lm_head.as_ref().is_some_and(q8k)
    }
}
