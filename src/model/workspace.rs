//! Preallocated buffers of the forward passes ([`Workspace`], sized once by
//! [`WorkspaceSize`], which also gives the memory plan its activation
//! bytes) and the per-layer [`KvCache`].

use super::linear::{DType, LinearScratch};
use super::ops::AttnScratch;
use super::transformer::Model;
use crate::model::config::{Arch, ModelConfig};

/// Preallocated activations for calls of up to `rows` tokens in total.
pub struct Workspace {
    pub(super) threads: usize,
    pub(super) rows: usize,
    pub(super) x: Vec<f32>,
    pub(super) xn: Vec<f32>,
    pub(super) q: Vec<f32>,
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
    pub(super) att: Vec<f32>,
    pub(super) tmp: Vec<f32>,
    pub(super) f1: Vec<f32>,
    pub(super) f2: Vec<f32>,
    /// Head-major K/V of one layer for the encoder (no cache).
    pub(super) enc_k: Vec<f32>,
    pub(super) enc_v: Vec<f32>,
    pub(super) last: Vec<f32>,
    /// Logits of the last position of each sequence, `[batch x vocab]`.
    pub logits: Vec<f32>,
    /// BERT pooler output `[batch x hidden]`.
    pub pooled: Vec<f32>,
    pub(super) attn: AttnScratch,
    pub(super) lin: LinearScratch,
}

/// Sizes a [`Workspace`] is built for.
#[derive(Debug, Clone, Copy)]
pub struct WorkspaceSize {
    /// Sequences per call.
    pub batch: usize,
    /// Most new tokens per sequence in one call.
    pub tokens: usize,
    /// Most key positions attention sees (cache plus new).
    pub keys: usize,
    /// Worker threads.
    pub threads: usize,
}

impl WorkspaceSize {
    /// f32 values of each buffer, in [`Workspace::new`]'s order; the memory
    /// estimate and the allocation share this list.
    fn buffers(&self, cfg: &ModelConfig, encoder: bool) -> [usize; 13] {
        let rows = self.batch * self.tokens;
        let (h, kvd, qd) = (cfg.hidden, cfg.kv_heads * cfg.head_dim(), cfg.q_dim());
        let f2 = if cfg.arch == Arch::Llama { rows * cfg.ffn } else { 0 };
        let enc = if encoder { self.batch * self.tokens * kvd } else { 0 };
        [
            rows * h,
            rows * h,
            rows * qd,
            rows * kvd,
            rows * kvd,
            rows * qd,
            rows * h,
            rows * cfg.ffn,
            f2,
            enc,
            enc,
            self.batch * h,
            self.batch * cfg.vocab,
        ]
    }

    /// Bytes [`Workspace::new`] allocates for `cfg` at this size.
    pub fn bytes(&self, cfg: &ModelConfig, dtype: DType) -> usize {
        let encoder = cfg.arch == Arch::Bert;
        let vals: usize = self.buffers(cfg, encoder).iter().sum::<usize>() + self.batch * cfg.hidden;
        let attn = self.threads.max(1) * AttnScratch::slot_len(self.tokens, self.keys, cfg.head_dim()) * 4;
        let max_dim = cfg.hidden.max(cfg.ffn).max(cfg.vocab).max(cfg.q_dim());
        let lin = LinearScratch::bytes_for(
            self.threads,
            self.batch * self.tokens,
            max_dim,
            max_dim,
            dtype.needs_scratch(),
        );
        vals * 4 + attn + lin
    }
}

impl Workspace {
    /// Buffers for `model` at `size`.
    pub fn new(model: &Model, size: WorkspaceSize) -> Self {
        let cfg = &model.cfg;
        let b = size.buffers(cfg, cfg.arch == Arch::Bert).map(|n| vec![0.0f32; n]);
        let [x, xn, q, k, v, att, tmp, f1, f2, enc_k, enc_v, last, logits] = b;
        let max_dim = cfg.hidden.max(cfg.ffn).max(cfg.vocab).max(cfg.q_dim());
        Self {
            threads: size.threads.max(1),
            rows: size.batch * size.tokens,
            x,
            xn,
            q,
            k,
            v,
            att,
            tmp,
            f1,
            f2,
            enc_k,
            enc_v,
            last,
            logits,
            pooled: vec![0.0; size.batch * cfg.hidden],
            attn: AttnScratch::new(size.threads, size.tokens, size.keys, cfg.head_dim()),
            lin: LinearScratch::new(
                size.threads,
                size.batch * size.tokens,
                max_dim,
                max_dim,
                model.dtype.needs_scratch(),
            ),
        }
    }

    /// The final hidden states of the last encoder call, `[batch*seq x hidden]`.
    pub fn hidden(&self, rows: usize, h: usize) -> &[f32] {
        &self.x[..rows * h]
    }
}

/// How a [`KvCache`] stores keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvStorage {
    /// f32 values ([`KvCache::new`]).
    #[default]
    F32,
    /// int8 codes with one f32 scale per token and head
    /// ([`KvCache::new_int8`], `lowbit.rs`).
    Int8,
}

impl KvStorage {
    /// `f32` or `int8`, as `--kv-cache` and the reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Int8 => "int8",
        }
    }

    /// Bytes a cache of this storage for `batch` sequences of up to
    /// `capacity` positions allocates ([`KvCache::bytes`]).
    pub fn bytes(self, cfg: &ModelConfig, batch: usize, capacity: usize) -> u64 {
        match self {
            Self::F32 => cfg.kv_cache_bytes(batch, capacity, 4),
            Self::Int8 => super::lowbit::int8_kv_bytes(cfg, batch, capacity),
        }
    }
}

/// Keys and values of every layer, head-major `[layer][batch][kv_heads][capacity][head_dim]`:
/// f32 ([`KvCache::new`]), or int8 codes with one scale per token and head
/// ([`KvCache::new_int8`], `lowbit.rs`), when `k` and `v` hold one layer's
/// dequantized keys and values for attention.
pub struct KvCache {
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
    pub(super) batch: usize,
    pub(super) kv_heads: usize,
    pub(super) head_dim: usize,
    /// Positions each sequence can hold.
    pub capacity: usize,
    /// Positions filled (the same for every sequence of the batch).
    pub len: usize,
    /// The int8 store of an int8 cache (`None`: f32).
    pub(super) int8: Option<super::lowbit::Int8Kv>,
}

impl KvCache {
    /// An empty cache for `batch` sequences of up to `capacity` positions.
    pub fn new(cfg: &ModelConfig, batch: usize, capacity: usize) -> Self {
        let n = cfg.layers * batch * cfg.kv_heads * capacity * cfg.head_dim();
        Self {
            k: vec![0.0; n],
            v: vec![0.0; n],
            batch,
            kv_heads: cfg.kv_heads,
            head_dim: cfg.head_dim(),
            capacity,
            len: 0,
            int8: None,
        }
    }

    /// An empty cache of `storage` for `batch` sequences of up to
    /// `capacity` positions ([`KvStorage::bytes`] of memory).
    pub fn with_storage(cfg: &ModelConfig, batch: usize, capacity: usize, storage: KvStorage) -> Self {
        match storage {
            KvStorage::F32 => Self::new(cfg, batch, capacity),
            KvStorage::Int8 => Self::new_int8(cfg, batch, capacity),
        }
    }

    /// How this cache stores keys and values.
    pub fn storage(&self) -> KvStorage {
        if self.int8.is_some() { KvStorage::Int8 } else { KvStorage::F32 }
    }

    /// Bytes held (an int8 cache: codes, scales and one layer's f32 scratch).
    pub fn bytes(&self) -> usize {
        (self.k.len() + self.v.len()) * 4 + self.int8.as_ref().map_or(0, |q| q.bytes())
    }

    pub(super) fn layer_len(&self) -> usize {
        self.batch * self.kv_heads * self.capacity * self.head_dim
    }
}
