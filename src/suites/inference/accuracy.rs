//! Accuracy of a reduced-precision model (f16, bf16, int8, q4_0) against
//! the f32 model with the same seeded weights (random weights are drawn in
//! f32 and only then stored, so the two differ by storage rounding alone),
//! on the same short input: the error a user pays for the smaller weights.

use crate::model::config::Arch;
use crate::model::linear::DType;
use crate::model::transformer::{KvCache, Model, Workspace, WorkspaceSize};
use crate::model::weights;
use crate::workload::Metric;
use anyhow::Result;

/// Tokens of the comparison input: long enough to exercise attention,
/// short enough to cost little next to the case.
const TOKENS: usize = 16;

/// Errors of one reduced-precision output against f32.
#[derive(Debug, Clone, Copy)]
pub struct Accuracy {
    /// Largest absolute difference.
    pub max_abs: f64,
    /// That, divided by the largest absolute f32 value.
    pub max_rel: f64,
    /// Cosine similarity of the two flattened outputs.
    pub cosine: f64,
    /// Decoders: share of positions whose greedy next token agrees.
    pub top1: Option<f64>,
}

impl Accuracy {
    /// Compares `got` with `want` (`rows` rows; `vocab` set for logits).
    pub fn of(got: &[f32], want: &[f32], rows: usize, vocab: Option<usize>) -> Self {
        let scale = want.iter().fold(0.0f64, |a, &v| a.max((v as f64).abs()));
        let (mut max_abs, mut dot, mut ng, mut nw) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        for (&g, &w) in got.iter().zip(want) {
            let (g, w) = (g as f64, w as f64);
            max_abs = max_abs.max((g - w).abs());
            dot += g * w;
            ng += g * g;
            nw += w * w;
        }
        let top1 = vocab.map(|v| {
            let same = (0..rows)
                .filter(|&r| {
                    crate::model::argmax(&got[r * v..(r + 1) * v])
                        == crate::model::argmax(&want[r * v..(r + 1) * v])
                })
                .count();
            same as f64 / rows.max(1) as f64
        });
        Self {
            max_abs,
            max_rel: max_abs / scale.max(f64::MIN_POSITIVE),
            cosine: dot / (ng * nw).sqrt(),
            top1,
        }
    }

    /// Case metrics, prefixed `vs_f32_`.
    pub fn metrics(&self) -> Vec<Metric> {
        let mut m = vec![
            Metric::new("vs_f32_max_abs_error", self.max_abs, ""),
            Metric::new("vs_f32_max_rel_error", self.max_rel, ""),
            Metric::new("vs_f32_cosine", self.cosine, ""),
        ];
        if let Some(t) = self.top1 {
            m.push(Metric::new("vs_f32_top1_agreement", t, ""));
        }
        m
    }

    /// One line for the verification detail.
    pub fn note(&self, what: &str) -> String {
        let top1 = self.top1.map_or(String::new(), |t| format!(", greedy token agrees at {:.0}%", t * 100.0));
        format!(
            "vs the f32 model on {what}: max abs error {:.3e} ({:.2e} of the largest value), cosine {:.6}{top1}",
            self.max_abs, self.max_rel, self.cosine
        )
    }
}

/// The output the comparison looks at: an encoder's final hidden states, a
/// decoder's logits at every position of one prompt.
fn output(model: &Model, ids: &[u32]) -> Vec<f32> {
    let (cfg, n) = (&model.cfg, ids.len());
    let threads = crate::backend::cpu::current_threads();
    let size = WorkspaceSize { batch: 1, tokens: n, keys: n, threads };
    let mut ws = Workspace::new(model, size);
    if cfg.arch == Arch::Bert {
        model.encode(&mut ws, ids, &vec![1; n], 1, n);
        return ws.hidden(n, cfg.hidden).to_vec();
    }
    let mut cache = KvCache::new(cfg, 1, n);
    model.decode(&mut ws, &mut cache, ids, n, true).unwrap_or_default()
}

/// `model` (reduced precision, random weights from `seed`) against the f32
/// model of the same seed, or `Ok(Err(reason))` when the f32 copy would not
/// fit in `available` bytes next to what the case already holds.
pub fn against_f32(
    model: &Model,
    seed: u64,
    held: f64,
    available: Option<f64>,
) -> Result<std::result::Result<(Accuracy, String), String>> {
    let cfg = &model.cfg;
    let need = weights::weight_bytes(cfg, DType::F32);
    if let Some(a) = available
        && held + need > a * weights::BUDGET_SHARE
    {
        return Ok(Err(format!(
            "accuracy vs f32 not measured: the f32 copy needs {:.1} GiB more than the {:.1} GiB available",
            need / (1u64 << 30) as f64,
            (a * weights::BUDGET_SHARE - held).max(0.0) / (1u64 << 30) as f64
        )));
    }
    let reference = weights::random_model(cfg, DType::F32, seed)?;
    let n = TOKENS.min(cfg.max_positions);
    let ids = crate::model::random_ids(n, cfg.vocab, seed ^ 0xacc);
    let (got, want) = (output(model, &ids), output(&reference, &ids));
    let (vocab, what) = if cfg.arch == Arch::Bert {
        (None, format!("the final hidden states of {n} tokens"))
    } else {
        (Some(cfg.vocab), format!("the logits at each of {n} prompt positions"))
    };
    Ok(Ok((Accuracy::of(&got, &want, n, vocab), what)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accuracy_measures_known_differences() {
        let want = [1.0f32, 0.0, 0.0, 2.0, 0.0, 0.0];
        let got = [1.0f32, 0.5, 0.0, 0.0, 2.0, 0.0];
        let a = Accuracy::of(&got, &want, 2, Some(3));
        assert!((a.max_abs - 2.0).abs() < 1e-12 && (a.max_rel - 1.0).abs() < 1e-12);
        // dot = 1, |got| = sqrt(5.25), |want| = sqrt(5)
        assert!((a.cosine - 1.0 / (5.25f64 * 5.0).sqrt()).abs() < 1e-12);
        assert_eq!(a.top1, Some(0.5));
        let same = Accuracy::of(&want, &want, 2, None);
        assert!(same.max_abs == 0.0 && (same.cosine - 1.0).abs() < 1e-12 && same.top1.is_none());
    }

    #[test]
    fn lower_precisions_lose_accuracy_in_order() {
        let cfg = crate::model::config::ModelConfig::preset("gpt2-tiny").unwrap();
        let mut cos = Vec::new();
        for dtype in [DType::BF16, DType::Int8, DType::Q4_0] {
            let model = weights::random_model(&cfg, dtype, 11).unwrap();
            let (a, _) = against_f32(&model, 11, 0.0, None).unwrap().unwrap();
            assert!(a.cosine > 0.9 && a.cosine < 1.0, "{dtype:?}: {a:?}");
            cos.push(a.cosine);
        }
        // bf16 (8-bit mantissa) and int8 beat 4-bit codes.
        assert!(cos[0] > cos[2] && cos[1] > cos[2], "{cos:?}");
        let f32m = weights::random_model(&cfg, DType::F32, 11).unwrap();
        let (a, _) = against_f32(&f32m, 11, 0.0, None).unwrap().unwrap();
        assert!(a.max_abs < 1e-6, "the f32 model against itself: {a:?}");
        let refused = against_f32(&f32m, 11, 0.0, Some(1.0)).unwrap();
        assert!(refused.unwrap_err().contains("not measured"));
    }
}
