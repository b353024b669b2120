//! The decoder's step, written once: [`Model::decode`] (a batch of
//! sequences at one depth, `n` new tokens each) and
//! [`Model::decode_ragged`](super::ragged) (one token for each of several
//! sequences at their own depths, continuous batching) both run
//! [`Model::step`], whose per-layer work (norms, the QKV projections, QK
//! norms, rotary, attention, the output projection, the FFN, post-norms)
//! is [`Model::layer`]. What differs between the two is a [`Kv`]: where a
//! row's position comes from, where its new keys and values are written,
//! and which keys and values its attention reads. How a cache stores them
//! (f32, or `lowbit.rs`'s int8 codes with one scale per token and head) is
//! the cache's own ([`KvCache::store_layer`]), so both layouts take either.

use super::linear::{Linear, LinearScratch};
use super::ops::{self, AttnShape};
use super::transformer::{KvCache, Model, Norm, Workspace};

/// The varying part of a decode step: the layout of the caches it appends
/// to. An enum rather than a trait: there are exactly two layouts, both
/// here and closed to callers, and the layer step is compiled once (a
/// generic over a trait would compile every layer's code per layout, a
/// `dyn` would hide a two-way choice behind a vtable); the match costs one
/// branch per layer beside that layer's products.
pub(super) enum Kv<'a, 'c> {
    /// One cache of `cache.batch` sequences at one depth: `n` new tokens
    /// each, rows token-major sequence by sequence, row `r` at position
    /// `cache.len + r % n` ([`Model::decode`]).
    Batch {
        /// The cache appended to.
        cache: &'a mut KvCache,
        /// New tokens per sequence.
        n: usize,
    },
    /// One batch-1 cache per row: row `r` is one token of its own
    /// sequence at position `caches[r].len` ([`Model::decode_ragged`]).
    Ragged(&'a mut [&'c mut KvCache]),
}

impl Kv<'_, '_> {
    /// The position of row `r` (before this step's tokens are appended).
    fn position(&self, r: usize) -> usize {
        match self {
            Kv::Batch { cache, n } => cache.len + r % n,
            Kv::Ragged(caches) => caches[r].len,
        }
    }

    /// `(sequences, new tokens per sequence)`.
    fn shape(&self) -> (usize, usize) {
        match self {
            Kv::Batch { cache, n } => (cache.batch, *n),
            Kv::Ragged(caches) => (caches.len(), 1),
        }
    }

    /// Stores layer `l`'s new keys and values (`ws.k`, `ws.v`, token-major)
    /// and runs attention of `ws.q` over each sequence's keys into `ws.att`.
    /// `base` carries the heads, widths and window; the rest is set here.
    fn attend(&mut self, l: usize, ws: &mut Workspace, rows: usize, base: AttnShape) {
        let (qd, kvd) = (base.heads * base.head_dim, base.kv_heads * base.head_dim);
        let (q, k, v, att, scratch) = (&ws.q, &ws.k, &ws.v, &mut ws.att, &mut ws.attn);
        match self {
            Kv::Batch { cache, n } => {
                let (n, past, capacity, batch) = (*n, cache.len, cache.capacity, cache.batch);
                let (kc, vc) = cache.store_layer(l, &k[..rows * kvd], &v[..rows * kvd], n, past);
                let shape = AttnShape { batch, queries: n, keys: past + n, capacity, ..base };
                ops::attention(shape, &q[..rows * qd], kc, vc, None, &mut att[..rows * qd], scratch);
            }
            Kv::Ragged(caches) => {
                for (r, c) in caches.iter_mut().enumerate() {
                    let (p, capacity) = (c.len, c.capacity);
                    let (kr, vr) = (&k[r * kvd..(r + 1) * kvd], &v[r * kvd..(r + 1) * kvd]);
                    let (kc, vc) = c.store_layer(l, kr, vr, 1, p);
                    let shape = AttnShape { batch: 1, queries: 1, keys: p + 1, capacity, ..base };
                    let (qr, ar) = (&q[r * qd..(r + 1) * qd], &mut att[r * qd..(r + 1) * qd]);
                    ops::attention(shape, qr, kc, vc, None, ar, scratch);
                }
            }
        }
    }

    /// Every cache now holds this step's tokens.
    fn advance(&mut self) {
        match self {
            Kv::Batch { cache, n } => cache.len += *n,
            Kv::Ragged(caches) => caches.iter_mut().for_each(|c| c.len += 1),
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
    /// Decoder forward of `n` new tokens per sequence (`ids` `[batch*n]`) at
    /// positions `cache.len..cache.len+n`, appending to the cache (f32 or
    /// int8). Logits of each sequence's last new position go to
    /// `ws.logits`; with `all_logits`, the logits of every new position are
    /// also returned (verification only: that path allocates).
    pub fn decode(
        &self,
        ws: &mut Workspace,
        cache: &mut KvCache,
        ids: &[u32],
        n: usize,
        all_logits: bool,
    ) -> Option<Vec<f32>> {
        let rows = cache.batch * n;
        assert!(rows <= ws.rows && ids.len() == rows, "decode: workspace too small");
        assert!(
            cache.len + n <= cache.capacity,
            "decode: cache holds {} positions, asked for {}",
            cache.capacity,
            cache.len + n
        );
        self.step(ws, &mut Kv::Batch { cache, n }, ids);
        all_logits.then(|| {
            let (h, t, vocab) = (self.cfg.hidden, ws.threads, self.cfg.vocab);
            let head = self.lm_head.as_ref().unwrap_or(&self.tokens);
            let fnorm = self.final_norm.as_ref().expect("decoders have a final norm");
            let mut normed = vec![0.0; rows * h];
            self.norm(fnorm, &ws.x[..rows * h], &mut normed);
            let mut out = vec![0.0; rows * vocab];
            let mut scratch =
                LinearScratch::new(t, rows, h.max(vocab), h.max(vocab), self.dtype.needs_scratch());
            head.forward(t, &normed, rows, &mut out, &mut scratch);
            softcap(&mut out, self.cfg.variant.final_softcap);
            out
        })
    }

    /// One decode step of `ids` (one per row) through every layer,
    /// appending to the caches of `kv`; the logits of each sequence's last
    /// new row go to `ws.logits`, the final hidden states stay in `ws.x`.
    pub(super) fn step(&self, ws: &mut Workspace, kv: &mut Kv, ids: &[u32]) {
        let rows = ids.len();
        self.embed(ws, ids, |r| kv.position(r));
        for l in 0..self.blocks.len() {
            self.layer(ws, kv, l, rows);
        }
        kv.advance();
        let (batch, n) = kv.shape();
        self.last_logits(ws, batch, n);
    }

    /// Block `l` over the `rows` rows of `ws.x`: the per-layer work that
    /// [`Model::decode`] and [`Model::decode_ragged`] share, `kv` deciding
    /// positions, cache writes and attention's keys.
    fn layer(&self, ws: &mut Workspace, kv: &mut Kv, l: usize, rows: usize) {
        let (cfg, blk, t) = (&self.cfg, &self.blocks[l], ws.threads);
        let (h, f, hd, qd) = (cfg.hidden, cfg.ffn, cfg.head_dim(), cfg.q_dim());
        let kvd = cfg.kv_heads * hd;
        self.norm(&blk.n1, &ws.x[..rows * h], &mut ws.xn[..rows * h]);
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
            let kv = &*kv;
            rope.apply(&mut ws.q[..rows * qd], qd, |r| kv.position(r));
            rope.apply(&mut ws.k[..rows * kvd], kvd, |r| kv.position(r));
        }
        let base = AttnShape {
            batch: 0,
            heads: cfg.heads,
            kv_heads: cfg.kv_heads,
            head_dim: hd,
            queries: 0,
            keys: 0,
            capacity: 0,
            causal: true,
            window: if windowed { cfg.variant.window } else { 0 },
        };
        kv.attend(l, ws, rows, base);
        let post = blk.post_norms.as_ref();
        self.residual(ws, &blk.o, Input::Att, rows, post.map(|p| &p.0));
        self.norm(&blk.n2, &ws.x[..rows * h], &mut ws.xn[..rows * h]);
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

    /// LayerNorm (with a bias) or RMSNorm of each row of `x` into `out`.
    fn norm(&self, nm: &Norm, x: &[f32], out: &mut [f32]) {
        match &nm.b {
            Some(b) => ops::layer_norm_into(x, out, &nm.w, b, self.cfg.norm_eps),
            None => ops::rms_norm_into(x, out, &nm.w, self.cfg.norm_eps),
        }
    }

    /// The LM head over the last of each sequence's `n` rows (a generator
    /// never needs the others' logits) into `ws.logits`.
    fn last_logits(&self, ws: &mut Workspace, batch: usize, n: usize) {
        let (h, t, vocab) = (self.cfg.hidden, ws.threads, self.cfg.vocab);
        let head = self.lm_head.as_ref().unwrap_or(&self.tokens);
        let fnorm = self.final_norm.as_ref().expect("decoders have a final norm");
        let last = if n == 1 {
            // Every row is its sequence's last: no gather.
            &ws.x[..batch * h]
        } else {
            for b in 0..batch {
                let r = b * n + n - 1;
                ws.tmp[b * h..(b + 1) * h].copy_from_slice(&ws.x[r * h..(r + 1) * h]);
            }
            &ws.tmp[..batch * h]
        };
        self.norm(fnorm, last, &mut ws.last[..batch * h]);
        head.forward(t, &ws.last[..batch * h], batch, &mut ws.logits[..batch * vocab], &mut ws.lin);
        softcap(&mut ws.logits[..batch * vocab], self.cfg.variant.final_softcap);
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
