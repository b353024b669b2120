//! A level's accuracy against O0, measured in the same case: the level's
//! model (with its own KV cache kind) and O0's (f32 weights of the same
//! seed, f32 cache; random weights are drawn in f32 and only then stored,
//! so the two differ by the level's rounding alone) on one 16-token input:
//! a decoder's logits at every position, an encoder's final hidden states.
//! O1 is compared with its own weights run on one thread.
//!
//! The O0 copy must fit next to what the case holds, within the profile's
//! budget and this machine's available memory (the f32 copy of a 1B
//! decoder is 4.4 GB). When it does not, both models are rebuilt with the
//! first `L` blocks only (the most that fit; embeddings and head are the
//! same tensors) and compared on those: a shorter reference, named in the
//! note and in `vs_o0_reference_layers`. Nothing is built past the budget.

use super::level_check::cosine_max;
use super::level_run::{LevelRun, Setup, Shape, mib, new_cache};
use crate::backend::cpu::{Context, Threads};
use crate::model::config::{Arch, ModelConfig};
use crate::model::linear::DType;
use crate::model::transformer::{KvCache, Model, Workspace, WorkspaceSize};
use crate::model::weights;
use crate::suites::Metric;
use anyhow::Result;

/// Tokens of the comparison input.
const TOKENS: usize = 16;

/// The compared output of `model` on `ids` (`int8_kv`: through the level's cache).
fn output(model: &Model, s: &Setup, ids: &[u32], level_cache: bool) -> Vec<f32> {
    let (cfg, n) = (&model.cfg, ids.len());
    let threads = crate::backend::cpu::current_threads();
    let mut ws = Workspace::new(model, WorkspaceSize { batch: 1, tokens: n, keys: n, threads });
    if cfg.arch == Arch::Bert {
        model.encode(&mut ws, ids, &vec![1; n], 1, n);
        return ws.hidden(n, cfg.hidden).to_vec();
    }
    let mut cache = if level_cache { new_cache(s, 1, n) } else { KvCache::new(cfg, 1, n) };
    model.decode(&mut ws, &mut cache, ids, n, true).unwrap_or_default()
}

/// Bytes to build a model of `cfg` in `dtype` and run the comparison.
fn need(cfg: &ModelConfig, dtype: DType) -> f64 {
    let size = WorkspaceSize { batch: 1, tokens: TOKENS, keys: TOKENS, threads: 1 };
    weights::plan(cfg, dtype, size, TOKENS).total()
}

/// Bytes the comparison may use beside what the case holds.
fn room(r: &LevelRun) -> Option<f64> {
    let host = crate::model::available_bytes().map(|a| a * weights::BUDGET_SHARE);
    let budget = r.s.budget.as_ref().map(|b| b.bytes);
    let limit = [host, budget].into_iter().flatten().reduce(f64::min)?;
    Some(limit - r.plan.total())
}

/// Metrics (`vs_o0_*`) and a note of the comparison.
pub fn against_o0(r: &LevelRun) -> Result<(Vec<Metric>, String)> {
    let s = &r.s;
    if s.spec.name == "O0" {
        return Ok((Vec::new(), "accuracy: O0 is the reference".into()));
    }
    let n = TOKENS.min(s.cfg.max_positions);
    let ids = crate::model::random_ids(n, s.cfg.vocab, s.seed ^ 0xacc);
    let (got, want, layers) = if s.spec.dtype == DType::F32 {
        let one = Context::new(Threads::Exactly(1))?;
        let want = one.install(|| output(&r.model, s, &ids, false));
        (output(&r.model, s, &ids, true), want, s.cfg.layers)
    } else {
        let room = room(r).unwrap_or(f64::INFINITY);
        let fits = |l: usize| {
            let c = ModelConfig { layers: l, ..s.cfg.clone() };
            let extra = if l == s.cfg.layers { 0.0 } else { need(&c, s.spec.dtype) };
            need(&c, DType::F32) + extra <= room
        };
        let Some(layers) = (1..=s.cfg.layers).rev().find(|&l| fits(l)) else {
            let why = format!(
                "accuracy vs O0 not measured: not even one block of the f32 model fits the {} left",
                mib(room.max(0.0))
            );
            return Ok((Vec::new(), why));
        };
        let cfg = ModelConfig { layers, ..s.cfg.clone() };
        let reference = weights::random_model(&cfg, DType::F32, s.seed)?;
        let want = output(&reference, s, &ids, false);
        drop(reference);
        let got = if layers == s.cfg.layers {
            output(&r.model, s, &ids, true)
        } else {
            output(&weights::random_model(&cfg, s.spec.dtype, s.seed)?, s, &ids, true)
        };
        (got, want, layers)
    };
    let (cos, max) = cosine_max(&got, &want);
    let scale = want.iter().fold(0.0f64, |a, &v| a.max((v as f64).abs()));
    let mut m = vec![
        Metric::new("vs_o0_cosine", cos, ""),
        Metric::new("vs_o0_max_abs_error", max, ""),
        Metric::new("vs_o0_max_rel_error", max / scale.max(f64::MIN_POSITIVE), ""),
        Metric::new("vs_o0_reference_layers", layers as f64, ""),
    ];
    let what = if let Shape::Decode { .. } = s.shape {
        let v = s.cfg.vocab;
        let same = (0..n)
            .filter(|&i| {
                crate::model::argmax(&got[i * v..(i + 1) * v])
                    == crate::model::argmax(&want[i * v..(i + 1) * v])
            })
            .count();
        m.push(Metric::new("vs_o0_top1_agreement", same as f64 / n as f64, ""));
        format!("the logits at each of {n} positions (greedy token agrees at {}/{n})", same)
    } else {
        format!("the final hidden states of {n} tokens")
    };
    let shorter = if layers < s.cfg.layers {
        format!(
            " on the first {layers} of {} blocks (a shorter reference: the full f32 copy does not fit beside the case within its budget)",
            s.cfg.layers
        )
    } else {
        String::new()
    };
    let against = if s.spec.dtype == DType::F32 {
        "O0 (the same weights on one thread)"
    } else {
        "O0 (f32, same seed)"
    };
    Ok((m, format!("accuracy vs {against}{shorter} on {what}: cosine {cos:.6}, max abs error {max:.3e}")))
}
