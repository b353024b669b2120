//! One decode step of sequences at different positions (continuous
//! batching): each sequence has its own KV cache (batch 1, its own length,
//! f32 or int8), one new token each. The projections and the FFN run over
//! all of them as one `rows = sequences` product, as [`Model::decode`] runs
//! a batch; only the rotary positions, the cache writes and attention are
//! per sequence. Both run the same layer step (`decode.rs`, the ragged
//! layout being its `Kv::Ragged`); the tests below hold the two to the same
//! logits on every model family and both cache storages. The serving engine
//! (`crate::load::engine`) drives it; its self-check holds it to
//! [`Model::decode`]'s one-request greedy tokens.

use super::decode::Kv;
use super::transformer::{KvCache, Model, Workspace};

impl Model {
    /// Feeds `ids[i]` to sequence `i` at position `caches[i].len` (each
    /// cache batch 1, f32 or int8, its own length), appending to every
    /// cache; the logits of sequence `i` go to `ws.logits[i * vocab..]`.
    /// `ws` must be sized for at least `ids.len()` rows.
    pub fn decode_ragged(&self, ws: &mut Workspace, caches: &mut [&mut KvCache], ids: &[u32]) {
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
        self.step(ws, &mut Kv::Ragged(caches), ids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::ModelConfig;
    use crate::model::linear::DType;
    use crate::model::transformer::{KvStorage, WorkspaceSize};

    /// Three sequences at different depths, stepped together, give the
    /// logits each gets stepped alone through [`Model::decode`], on caches
    /// of `storage` (an int8 cache's codes depend on each vector alone, so
    /// its ragged and one-sequence steps agree as the f32 ones do).
    fn ragged_matches_decode(model: &Model, name: &str, storage: KvStorage) {
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
        let new = || KvCache::with_storage(cfg, 1, 16, storage);
        let (mut solo, mut ragged): (Vec<KvCache>, Vec<KvCache>) = (0..3).map(|_| (new(), new())).unzip();
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
                let kind = storage.name();
                assert!(
                    worst < 1e-4 * scale,
                    "{name} {kind} step {step} seq {i}: differs by {worst} of {scale}"
                );
                assert_eq!(ragged[i].len, solo[i].len);
                assert_eq!(ragged[i].storage(), storage);
            }
        }
    }

    #[test]
    fn ragged_steps_match_one_sequence_decode() {
        for name in ["gpt2-tiny", "llama-tiny"] {
            let cfg = ModelConfig::preset(name).unwrap();
            let model = crate::model::weights::random_model(&cfg, DType::F32, 5).unwrap();
            for storage in [KvStorage::F32, KvStorage::Int8] {
                ragged_matches_decode(&model, name, storage);
            }
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
            for storage in [KvStorage::F32, KvStorage::Int8] {
                ragged_matches_decode(&model, rel, storage);
            }
        }
    }
}
