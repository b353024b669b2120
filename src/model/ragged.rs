//! One decode step of sequences at different positions (continuous
//! batching): each sequence has its own KV cache (batch 1, its own length),
//! one new token each. The projections and the FFN run over all of them as
//! one `rows = sequences` product, as [`Model::decode`] runs a batch; only
//! the rotary positions, the cache writes and attention are per sequence.
//! The serving engine (`crate::load::engine`) drives it; its self-check
//! holds it to [`Model::decode`]'s one-request greedy tokens.

use super::linear::Linear;
use super::ops::{self, AttnShape};
use super::transformer::{KvCache, Model, Norm, Workspace};

impl Model {
    /// Feeds `ids[i]` to sequence `i` at position `caches[i].len` (each
    /// cache batch 1), appending to every cache; the logits of sequence `i`
    /// go to `ws.logits[i * vocab..]`. `ws` must be sized for at least
    /// `ids.len()` rows.
    pub fn decode_ragged(&self, ws: &mut Workspace, caches: &mut [&mut KvCache], ids: &[u32]) {
        let cfg = &self.cfg;
        let rows = ids.len();
        assert!(
            rows == caches.len() && rows <= ws.rows,
            "decode_ragged: {rows} sequences, workspace of {}",
            ws.rows
        );
        assert!(
            caches.iter().all(|c| c.batch == 1 && c.len < c.capacity),
            "decode_ragged: every cache holds one sequence with room for a token"
        );
        let (h, t) = (cfg.hidden, ws.threads);
        let (hd, kvh, f) = (cfg.head_dim(), cfg.kv_heads, cfg.ffn);
        let kvd = kvh * hd;
        let pos: Vec<usize> = caches.iter().map(|c| c.len).collect();
        for (r, &id) in ids.iter().enumerate() {
            let row = &mut ws.x[r * h..(r + 1) * h];
            self.tokens.w.row_into(id as usize * h, row);
            if let Some(p) = &self.positions {
                ops::add_into(row, &p[pos[r] * h..(pos[r] + 1) * h]);
            }
        }
        let norm = |nm: &Norm, x: &[f32], out: &mut [f32]| match &nm.b {
            Some(b) => ops::layer_norm_into(x, out, &nm.w, b, cfg.norm_eps),
            None => ops::rms_norm_into(x, out, &nm.w, cfg.norm_eps),
        };
        for (l, blk) in self.blocks.iter().enumerate() {
            norm(&blk.n1, &ws.x[..rows * h], &mut ws.xn[..rows * h]);
            let xn = &ws.xn[..rows * h];
            let qkv: &mut [(&Linear, &mut [f32])] = &mut [
                (&blk.q, &mut ws.q[..rows * h]),
                (&blk.k, &mut ws.k[..rows * kvd]),
                (&blk.v, &mut ws.v[..rows * kvd]),
            ];
            Linear::forward_many(t, xn, rows, qkv, &mut ws.lin);
            if let Some(rope) = &self.rope {
                rope.apply(&mut ws.q[..rows * h], h, |r| pos[r]);
                rope.apply(&mut ws.k[..rows * kvd], kvd, |r| pos[r]);
            }
            for (r, c) in caches.iter_mut().enumerate() {
                let (ll, cap, p) = (c.layer_len(), c.capacity, pos[r]);
                let (kc, vc) = (&mut c.k[l * ll..(l + 1) * ll], &mut c.v[l * ll..(l + 1) * ll]);
                for head in 0..kvh {
                    let at = (head * cap + p) * hd;
                    kc[at..at + hd].copy_from_slice(&ws.k[r * kvd + head * hd..][..hd]);
                    vc[at..at + hd].copy_from_slice(&ws.v[r * kvd + head * hd..][..hd]);
                }
                let shape = AttnShape {
                    batch: 1,
                    heads: cfg.heads,
                    kv_heads: kvh,
                    head_dim: hd,
                    queries: 1,
                    keys: p + 1,
                    capacity: cap,
                    causal: true,
                };
                ops::attention(
                    shape,
                    &ws.q[r * h..(r + 1) * h],
                    kc,
                    vc,
                    None,
                    &mut ws.att[r * h..(r + 1) * h],
                    &mut ws.attn,
                );
            }
            blk.o.forward_add(
                t,
                &ws.att[..rows * h],
                rows,
                &mut ws.x[..rows * h],
                &mut ws.tmp[..rows * h],
                &mut ws.lin,
            );
            norm(&blk.n2, &ws.x[..rows * h], &mut ws.xn[..rows * h]);
            let xn = &ws.xn[..rows * h];
            match &blk.gate {
                Some(g) => {
                    let gate_up: &mut [(&Linear, &mut [f32])] =
                        &mut [(&blk.up, &mut ws.f2[..rows * f]), (g, &mut ws.f1[..rows * f])];
                    Linear::forward_many(t, xn, rows, gate_up, &mut ws.lin);
                    ops::swiglu(&mut ws.f1[..rows * f], &ws.f2[..rows * f], f);
                }
                None => {
                    blk.up.forward(t, xn, rows, &mut ws.f1[..rows * f], &mut ws.lin);
                    ops::gelu_tanh(&mut ws.f1[..rows * f], f)
                }
            }
            blk.down.forward_add(
                t,
                &ws.f1[..rows * f],
                rows,
                &mut ws.x[..rows * h],
                &mut ws.tmp[..rows * h],
                &mut ws.lin,
            );
        }
        caches.iter_mut().for_each(|c| c.len += 1);
        let head = self.lm_head.as_ref().unwrap_or(&self.tokens);
        let fnorm = self.final_norm.as_ref().expect("decoders have a final norm");
        norm(fnorm, &ws.x[..rows * h], &mut ws.last[..rows * h]);
        head.forward(t, &ws.last[..rows * h], rows, &mut ws.logits[..rows * cfg.vocab], &mut ws.lin);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::ModelConfig;
    use crate::model::linear::DType;
    use crate::model::transformer::WorkspaceSize;

    /// Three sequences at different depths, stepped together, give the
    /// logits each gets stepped alone through [`Model::decode`].
    #[test]
    fn ragged_steps_match_one_sequence_decode() {
        for name in ["gpt2-tiny", "llama-tiny"] {
            let cfg = ModelConfig::preset(name).unwrap();
            let model = crate::model::weights::random_model(&cfg, DType::F32, 5).unwrap();
            let v = cfg.vocab;
            let prompts = [
                crate::model::random_ids(3, v, 1),
                crate::model::random_ids(7, v, 2),
                crate::model::random_ids(1, v, 3),
            ];
            let size = WorkspaceSize { batch: 1, tokens: 8, keys: 16, threads: 2 };
            let mut solo_ws = Workspace::new(&model, size);
            let mut ragged_ws =
                Workspace::new(&model, WorkspaceSize { batch: 3, tokens: 1, keys: 16, threads: 2 });
            let (mut solo, mut ragged): (Vec<KvCache>, Vec<KvCache>) =
                (0..3).map(|_| (KvCache::new(&cfg, 1, 16), KvCache::new(&cfg, 1, 16))).unzip();
            for (i, p) in prompts.iter().enumerate() {
                model.decode(&mut solo_ws, &mut solo[i], p, p.len(), false);
                model.decode(&mut solo_ws, &mut ragged[i], p, p.len(), false);
            }
            for step in 0..4u32 {
                let ids: Vec<u32> = (0..3).map(|i| 10 + 7 * step + i).collect();
                let mut refs: Vec<&mut KvCache> = ragged.iter_mut().collect();
                model.decode_ragged(&mut ragged_ws, &mut refs, &ids);
                for i in 0..3 {
                    model.decode(&mut solo_ws, &mut solo[i], &ids[i..i + 1], 1, false);
                    let (a, b) = (&ragged_ws.logits[i * v..(i + 1) * v], &solo_ws.logits[..v]);
                    let worst = a.iter().zip(b).fold(0.0f32, |w, (x, y)| w.max((x - y).abs()));
                    assert!(worst < 1e-4, "{name} step {step} seq {i}: differs by {worst}");
                    assert_eq!(ragged[i].len, solo[i].len);
                }
            }
        }
    }
}
