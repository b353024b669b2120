//! Training speed: each model type trained from scratch on the corpus at a
//! stated vocabulary size, as `Tokenizer::train` does for a user.

use super::sources::{self, Length};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::workload::Metric;
use anyhow::{Result, bail};
use std::hint::black_box;
use tokenizers::Tokenizer;

struct Train {
    model: &'static str,
    vocab_size: usize,
    lines: Vec<String>,
    held_out: Vec<String>,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
    bytes: f64,
    reached: f64,
    bytes_per_token: f64,
}

/// Valid `model` values of `train`.
pub(super) const MODELS: &[&str] = &["bpe", "wordpiece", "unigram"];

/// `train`: `model` at `vocab_size` on the first `input_bytes` of the corpus.
pub(crate) fn prepare(case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
    let model = super::choice(case, "model", MODELS)?;
    let vocab_size = case.usize("vocab_size")?;
    if !(300..=1_000_000).contains(&vocab_size) {
        bail!("case {}: `vocab_size` must be between 300 and 1000000, got {vocab_size}", case.id);
    }
    let text = sources::corpus(case)?;
    let budget = case.usize("input_bytes")?;
    let all = sources::segments(&text, Length::Line, 0);
    let mut lines = Vec::new();
    let mut bytes = 0usize;
    let mut rest = all.into_iter();
    for l in rest.by_ref() {
        if budget > 0 && bytes >= budget {
            break;
        }
        bytes += l.len();
        lines.push(l);
    }
    // Held out: the lines after the training slice (or its start when the
    // whole corpus trains), to check the trained tokenizer on unseen text.
    // Only lines whose characters all occur in the training text: a Unigram
    // or WordPiece model maps unseen characters to <unk>, as it should.
    let seen: std::collections::HashSet<char> = lines.iter().flat_map(|l| l.chars()).collect();
    let mut held_out: Vec<String> = rest.filter(|l| l.chars().all(|c| seen.contains(&c))).take(200).collect();
    if held_out.is_empty() {
        held_out = lines.iter().take(200).cloned().collect();
    }
    let pool = ctx.pool();
    Ok(Box::new(Train {
        model,
        vocab_size,
        lines,
        held_out,
        pool,
        bytes: bytes as f64,
        reached: 0.0,
        bytes_per_token: 0.0,
    }))
}

impl Train {
    fn train(&self) -> Result<Tokenizer> {
        let lines: Vec<&str> = self.lines.iter().map(String::as_str).collect();
        super::install(self.pool.as_deref(), || sources::train_model(self.model, self.vocab_size, &lines))
    }
}

impl Workload for Train {
    fn verify(&mut self) -> Result<Verification> {
        let tok = self.train()?;
        let size = tok.get_vocab_size(true);
        // BPE and WordPiece stop early only when the corpus runs out of
        // pairs (then raise input_bytes). Unigram keeps at most the target
        // and fewer when the corpus has no more pieces worth keeping: its
        // size is reported (vocab_reached), and must be at least half.
        let (lo, hi) = match self.model {
            "unigram" => (self.vocab_size / 2, self.vocab_size),
            _ => (self.vocab_size, self.vocab_size + 8),
        };
        if size < lo || size > hi {
            bail!(
                "{} trained to {size} tokens, expected {lo}..={hi} for vocab_size {} (corpus too small? raise input_bytes)",
                self.model,
                self.vocab_size
            );
        }
        let mut tokens = 0usize;
        let mut bytes = 0usize;
        for t in &self.held_out {
            let e = tok.encode(t.as_str(), false).map_err(|e| anyhow::anyhow!("{e}"))?;
            let back = tok.decode(e.get_ids(), false).map_err(|e| anyhow::anyhow!("{e}"))?;
            let ok = match self.model {
                // Byte-level BPE is lossless; WordPiece lowercases and
                // respaces, so its decoded text must re-encode to the same ids.
                "bpe" => &back == t,
                // Unigram: the normalized text (nmt_nfkc), less the one
                // leading space the metaspace decoder strips.
                "unigram" => back == super::reference::sentencepiece_expected(&tok, t)?,
                _ => {
                    tok.encode(back.as_str(), false).map_err(|e| anyhow::anyhow!("{e}"))?.get_ids()
                        == e.get_ids()
                }
            };
            if !ok {
                bail!("{} round trip on held-out text: {t:?} came back as {back:?}", self.model);
            }
            tokens += e.len();
            bytes += t.len();
        }
        self.reached = size as f64;
        self.bytes_per_token = bytes as f64 / tokens.max(1) as f64;
        let mut v = Verification::pass(format!(
            "vocab size {size} in {lo}..={hi}; held-out round trip on {} lines",
            self.held_out.len()
        ));
        v.detail = format!("{} training lines, {} bytes", self.lines.len(), self.bytes);
        Ok(v)
    }

    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::bytes(self.bytes), Throughput::items(1.0)]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            black_box(self.train()?);
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        vec![
            Metric::new("vocab_reached", self.reached, "tokens"),
            Metric::new("held_out_bytes_per_token", self.bytes_per_token, "B/token"),
        ]
    }
}
