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

use super::linear::{DType, Linear, LinearScratch, Weights};
use super::ops::{self, AttnShape, Rope};
use crate::kernels::quant::w4a8::ActQuant;
use crate::model::config::ModelConfig;
use rayon::prelude::*;

pub use super::loader::{Getter, Tensor};
pub use super::workspace::{KvCache, Workspace, WorkspaceSize};

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

    fn embed(&self, ws: &mut Workspace, ids: &[u32], n: usize, start: usize) {
        let h = self.cfg.hidden;
        for (r, &id) in ids.iter().enumerate() {
            let row = &mut ws.x[r * h..(r + 1) * h];
            self.tokens.w.row_into(id as usize * h, row);
            let scale = self.cfg.variant.embed_scale;
            if scale != 0.0 {
                row.iter_mut().for_each(|v| *v *= scale);
            }
            if let Some(p) = &self.positions {
                let pos = start + r % n;
                ops::add_into(row, &p[pos * h..(pos + 1) * h]);
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
        self.embed(ws, ids, seq, 0);
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

    /// Decoder forward of `n` new tokens per sequence (`ids` `[batch*n]`) at
    /// positions `cache.len..cache.len+n`, appending to the cache. Logits of
    /// each sequence's last new position go to `ws.logits`; with
    /// `all_logits`, the logits of every new position are also returned
    /// (verification only: that path allocates).
    pub fn decode(
        &self,
        ws: &mut Workspace,
        cache: &mut KvCache,
        ids: &[u32],
        n: usize,
        all_logits: bool,
    ) -> Option<Vec<f32>> {
        let cfg = &self.cfg;
        let batch = cache.batch;
        let (h, rows, t, past) = (cfg.hidden, batch * n, ws.threads, cache.len);
        assert!(rows <= ws.rows && ids.len() == rows, "decode: workspace too small");
        assert!(
            past + n <= cache.capacity,
            "decode: cache holds {} positions, asked for {}",
            cache.capacity,
            past + n
        );
        let (hd, kvd, f, qd) = (cfg.head_dim(), cfg.kv_heads * cfg.head_dim(), cfg.ffn, cfg.q_dim());
        self.embed(ws, ids, n, past);
        let shape = AttnShape {
            batch,
            heads: cfg.heads,
            kv_heads: cfg.kv_heads,
            head_dim: hd,
            queries: n,
            keys: past + n,
            capacity: cache.capacity,
            causal: true,
            window: 0,
        };
        let norm = |nm: &Norm, x: &[f32], out: &mut [f32]| match &nm.b {
            Some(b) => ops::layer_norm_into(x, out, &nm.w, b, cfg.norm_eps),
            None => ops::rms_norm_into(x, out, &nm.w, cfg.norm_eps),
        };
        for (l, blk) in self.blocks.iter().enumerate() {
            norm(&blk.n1, &ws.x[..rows * h], &mut ws.xn[..rows * h]);
            let xn = &ws.xn[..rows * h];
            let qkv: &mut [(&Linear, &mut [f32])] = &mut [
                (&blk.q, &mut ws.q[..rows * qd]),
                (&blk.k, &mut ws.k[..rows * kvd]),
                (&blk.v, &mut ws.v[..rows * kvd]),
            ];
            Linear::forward_many(t, xn, rows, qkv, &mut ws.lin);
            if let Some((qn, kn)) = &blk.qk_norm {
                ops::rms_norm(&mut ws.q[..rows * qd], &qn.w, cfg.norm_eps);
                ops::rms_norm(&mut ws.k[..rows * kvd], &kn.w, cfg.norm_eps);
            }
            let windowed = cfg.variant.windowed(l);
            let rope =
                if windowed { self.rope_window.as_ref().or(self.rope.as_ref()) } else { self.rope.as_ref() };
            if let Some(rope) = rope {
                rope.apply(&mut ws.q[..rows * qd], qd, |r| past + r % n);
                rope.apply(&mut ws.k[..rows * kvd], kvd, |r| past + r % n);
            }
            // The new keys and values into the cache; layer l's keys and
            // values as attention reads them (f32, or an int8 cache's dequantized).
            let (kc, vc) = cache.store_layer(l, &ws.k[..rows * kvd], &ws.v[..rows * kvd], n, past);
            let shape = AttnShape { window: if windowed { cfg.variant.window } else { 0 }, ..shape };
            ops::attention(shape, &ws.q[..rows * qd], kc, vc, None, &mut ws.att[..rows * qd], &mut ws.attn);
            let post = blk.post_norms.as_ref();
            self.residual(ws, &blk.o, Input::Att, rows, post.map(|p| &p.0));
            norm(&blk.n2, &ws.x[..rows * h], &mut ws.xn[..rows * h]);
            let xn = &ws.xn[..rows * h];
            match &blk.gate {
                Some(g) => {
                    let gate_up: &mut [(&Linear, &mut [f32])] =
                        &mut [(&blk.up, &mut ws.f2[..rows * f]), (g, &mut ws.f1[..rows * f])];
                    Linear::forward_many(t, xn, rows, gate_up, &mut ws.lin);
                    if cfg.variant.gelu_gate {
                        ops::geglu(&mut ws.f1[..rows * f], &ws.f2[..rows * f], f);
                    } else {
                        ops::swiglu(&mut ws.f1[..rows * f], &ws.f2[..rows * f], f);
                    }
                }
                None => {
                    blk.up.forward(t, xn, rows, &mut ws.f1[..rows * f], &mut ws.lin);
                    ops::gelu_tanh(&mut ws.f1[..rows * f], f)
                }
            }
            self.residual(ws, &blk.down, Input::Ffn, rows, post.map(|p| &p.1));
        }
        cache.len += n;
        let head = self.lm_head.as_ref().unwrap_or(&self.tokens);
        let fnorm = self.final_norm.as_ref().expect("decoders have a final norm");
        // Only the last position of each sequence feeds the LM head: a
        // generator never needs the others.
        for b in 0..batch {
            let r = b * n + n - 1;
            ws.tmp[b * h..(b + 1) * h].copy_from_slice(&ws.x[r * h..(r + 1) * h]);
        }
        norm(fnorm, &ws.tmp[..batch * h], &mut ws.last[..batch * h]);
        head.forward(t, &ws.last[..batch * h], batch, &mut ws.logits[..batch * cfg.vocab], &mut ws.lin);
        softcap(&mut ws.logits[..batch * cfg.vocab], cfg.variant.final_softcap);
        all_logits.then(|| {
            let mut normed = vec![0.0; rows * h];
            norm(fnorm, &ws.x[..rows * h], &mut normed);
            let mut out = vec![0.0; rows * cfg.vocab];
            let mut scratch =
                LinearScratch::new(t, rows, h.max(cfg.vocab), h.max(cfg.vocab), self.dtype.needs_scratch());
            head.forward(t, &normed, rows, &mut out, &mut scratch);
            softcap(&mut out, cfg.variant.final_softcap);
            out
        })
    }

    /// `x += proj(input)`, the projection's output first RMS-normed by
    /// `post` where the block has post-norms (gemma3).
    fn residual(&self, ws: &mut Workspace, proj: &Linear, input: Input, rows: usize, post: Option<&Norm>) {
        let (h, t) = (self.cfg.hidden, ws.threads);
        let x_in = match input {
            Input::Att => &ws.att[..rows * proj.inp],
            Input::Ffn => &ws.f1[..rows * proj.inp],
        };
        match post {
            None => {
                proj.forward_add(t, x_in, rows, &mut ws.x[..rows * h], &mut ws.tmp[..rows * h], &mut ws.lin)
            }
            Some(nm) => {
                proj.forward(t, x_in, rows, &mut ws.tmp[..rows * h], &mut ws.lin);
                ops::rms_norm_into(&ws.tmp[..rows * h], &mut ws.xn[..rows * h], &nm.w, self.cfg.norm_eps);
                ops::add_into(&mut ws.x[..rows * h], &ws.xn[..rows * h]);
            }
        }
    }
}

/// Which workspace buffer feeds a residual projection.
#[derive(Clone, Copy)]
enum Input {
    /// Attention's output (`ws.att`), into the output projection.
    Att,
    /// The FFN's activations (`ws.f1`), into the down projection.
    Ffn,
}

/// Gemma's final logit soft-capping, `c * tanh(x / c)` (nothing for `c = 0`).
fn softcap(x: &mut [f32], c: f32) {
    if c > 0.0 {
        x.iter_mut().for_each(|v| *v = c * (*v / c).tanh());
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
