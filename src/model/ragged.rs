//! One decode step of sequences at different positions (continuous
//! batching): each sequence has its own KV cache (batch 1, its own length),
//! one new token each. The projections and the FFN run over all of them as
//! one `rows = sequences` product, as [`Model::decode`] runs a batch; only
//! the rotary positions, the cache writes and attention are per sequence.
//! The serving engine (`crate::load::engine`) drives it; its self-check
//! holds it to [`Model::decode`]'s one-request greedy tokens. It mirrors
//! `Model::decode` step for step (the LLaMA family's variants included):
//! a change there belongs here too (the unit test below compares the two).

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
        let (hd, kvh, f, qd) = (cfg.head_dim(), cfg.kv_heads, cfg.ffn, cfg.q_dim());
        let kvd = kvh * hd;
        let pos: Vec<usize> = caches.iter().map(|c| c.len).collect();
        // Model::embed, each row at its own position.
        for (r, &id) in ids.iter().enumerate() {
            let row = &mut ws.x[r * h..(r + 1) * h];
            self.tokens.w.row_into(id as usize * h, row);
            let scale = cfg.variant.embed_scale;
            if scale != 0.0 {
                row.iter_mut().for_each(|v| *v *= scale);
            }
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
                rope.apply(&mut ws.q[..rows * qd], qd, |r| pos[r]);
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
                    window: if windowed { cfg.variant.window } else { 0 },
                };
                let (q, att) = (&ws.q[r * qd..(r + 1) * qd], &mut ws.att[r * qd..(r + 1) * qd]);
                ops::attention(shape, q, kc, vc, None, att, &mut ws.attn);
            }
            let post = blk.post_norms.as_ref();
            residual(ws, cfg.hidden, cfg.norm_eps, &blk.o, true, rows, post.map(|p| &p.0));
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
            residual(ws, cfg.hidden, cfg.norm_eps, &blk.down, false, rows, post.map(|p| &p.1));
        }
        caches.iter_mut().for_each(|c| c.len += 1);
        let head = self.lm_head.as_ref().unwrap_or(&self.tokens);
        let fnorm = self.final_norm.as_ref().expect("decoders have a final norm");
        norm(fnorm, &ws.x[..rows * h], &mut ws.last[..rows * h]);
        head.forward(t, &ws.last[..rows * h], rows, &mut ws.logits[..rows * cfg.vocab], &mut ws.lin);
        let c = cfg.variant.final_softcap;
        if c > 0.0 {
            ws.logits[..rows * cfg.vocab].iter_mut().for_each(|v| *v = c * (*v / c).tanh());
        }
    }
}

/// `Model::residual` (private to `transformer.rs`): the output projection
/// (`att`: from attention's output, else from the FFN's activations) added
/// into the residual stream, through the post-norm where there is one.
fn residual(
    ws: &mut Workspace,
    h: usize,
    eps: f32,
    proj: &Linear,
    att: bool,
    rows: usize,
    post: Option<&Norm>,
) {
    let t = ws.threads;
    let x_in = if att { &ws.att[..rows * proj.inp] } else { &ws.f1[..rows * proj.inp] };
    match post {
        None => proj.forward_add(t, x_in, rows, &mut ws.x[..rows * h], &mut ws.tmp[..rows * h], &mut ws.lin),
        Some(nm) => {
            proj.forward(t, x_in, rows, &mut ws.tmp[..rows * h], &mut ws.lin);
            ops::rms_norm_into(&ws.tmp[..rows * h], &mut ws.xn[..rows * h], &nm.w, eps);
            ops::add_into(&mut ws.x[..rows * h], &ws.xn[..rows * h]);
        }
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
    fn ragged_matches_decode(model: &Model, name: &str) {
        let cfg = &model.cfg;
        let v = cfg.vocab;
        let prompts = [
            crate::model::random_ids(3, v, 1),
            crate::model::random_ids(7, v, 2),
            crate::model::random_ids(1, v, 3),
        ];
        let size = WorkspaceSize { batch: 1, tokens: 8, keys: 16, threads: 2 };
        let mut solo_ws = Workspace::new(model, size);
        let mut ragged_ws =
            Workspace::new(model, WorkspaceSize { batch: 3, tokens: 1, keys: 16, threads: 2 });
        let (mut solo, mut ragged): (Vec<KvCache>, Vec<KvCache>) =
            (0..3).map(|_| (KvCache::new(cfg, 1, 16), KvCache::new(cfg, 1, 16))).unzip();
        for (i, p) in prompts.iter().enumerate() {
            model.decode(&mut solo_ws, &mut solo[i], p, p.len(), false);
            model.decode(&mut solo_ws, &mut ragged[i], p, p.len(), false);
        }
        for step in 0..4u32 {
            let ids: Vec<u32> = (0..3).map(|i| (10 + 7 * step + i) % v as u32).collect();
            let mut refs: Vec<&mut KvCache> = ragged.iter_mut().collect();
            model.decode_ragged(&mut ragged_ws, &mut refs, &ids);
            for i in 0..3 {
                model.decode(&mut solo_ws, &mut solo[i], &ids[i..i + 1], 1, false);
                let (a, b) = (&ragged_ws.logits[i * v..(i + 1) * v], &solo_ws.logits[..v]);
                let scale = b.iter().fold(1.0f32, |m, x| m.max(x.abs()));
                let worst = a.iter().zip(b).fold(0.0f32, |w, (x, y)| w.max((x - y).abs()));
                assert!(worst < 1e-4 * scale, "{name} step {step} seq {i}: differs by {worst} of {scale}");
                assert_eq!(ragged[i].len, solo[i].len);
            }
        }
    }

    #[test]
    fn ragged_steps_match_one_sequence_decode() {
        for name in ["gpt2-tiny", "llama-tiny"] {
            let cfg = ModelConfig::preset(name).unwrap();
            let model = crate::model::weights::random_model(&cfg, DType::F32, 5).unwrap();
            ragged_matches_decode(&model, name);
        }
    }

    /// The LLaMA family's variants (QK norms, post-norms, sliding windows,
    /// GeGLU, embedding scale) from the test data's tiny GGUF files.
    #[test]
    fn ragged_steps_match_decode_on_every_variant_file() {
        for rel in [
            "arch/gemma3-tiny.f16.gguf",
            "arch/qwen3-tiny.f32.gguf",
            "arch/qwen2-tiny.f32.gguf",
            "arch/phi3-tiny.f32.gguf",
        ] {
            let Ok(path) = crate::data::find(rel) else {
                eprintln!("skipped: {rel} not in the data folder");
                continue;
            };
            let (src, info) = crate::model::open(&path).unwrap();
            let mut model = src.load(&info, 64).unwrap();
            // Exact activations: the int8 one-token and several-token kernels round differently.
            model.set_int8_activations(false);
            ragged_matches_decode(&model, rel);
        }
    }
}
