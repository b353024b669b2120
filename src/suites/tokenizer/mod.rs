//! The tokenizer suite: the Hugging Face `tokenizers` crate on real
//! vocabularies (GPT-2 byte-level BPE, BERT WordPiece, LLaMA-style
//! SentencePiece BPE) and a SentencePiece-style Unigram trained on the corpus,
//! over real text (the King James Bible, a multilingual sample).
//!
//! | benchmark        | file          | what                                                    |
//! |------------------|---------------|---------------------------------------------------------|
//! | `encode`         | `encode.rs`   | one text at a time, one thread                          |
//! | `encode_batch`   | `encode.rs`   | `encode_batch_char_offsets`, 1 or all threads           |
//! | `decode`         | `encode.rs`   | ids back to text                                        |
//! | `offsets`        | `encode.rs`   | encode without offsets, with byte or char offsets       |
//! | `special_tokens` | `encode.rs`   | specials + truncation + padding to `max_length`         |
//! | `normalize`      | `text.rs`     | NFC, NFKC, lowercase, strip accents, BERT normalizer    |
//! | `pretokenize`    | `text.rs`     | byte-level (GPT-2 regex), whitespace, metaspace         |
//! | `train`          | `train.rs`    | BPE, WordPiece, Unigram trainers at a vocab size        |
//!
//! Inputs come from `sources.rs`; independent references (known ids, a GPT-2
//! splitter on another regex engine, the byte-to-unicode table) from
//! `reference.rs`. A real vocabulary whose files are absent is replaced in
//! the default grid by `NAME-trained` (a tokenizer of the same kind trained on
//! the corpus), so the case id says what is measured.

use crate::plan::Case;
use crate::suites::{Benchmarks, ParamRule, Suite, Workload, dispatch, names};
use anyhow::{Result, bail};

mod encode;
mod reference;
mod sources;
mod text;
mod train;

pub use sources::{Length, segments};

/// Tokenizer benchmarks on real vocabularies and text.
pub struct TokenizerSuite;

/// Benchmarks of `suites/tokenizer.toml`, in file order, with what prepares each.
const BENCHMARKS: Benchmarks = &[
    ("encode", encode::prepare_encode),
    ("encode_batch", encode::prepare_batch),
    ("decode", encode::prepare_decode),
    ("offsets", encode::prepare_offsets),
    ("special_tokens", encode::prepare_special),
    ("normalize", |c, _| text::prepare_normalize(c)),
    ("pretokenize", |c, _| text::prepare_pretokenize(c)),
    ("train", train::prepare),
];

/// The suite file as written, before absent real vocabularies are swapped
/// for their trained fallbacks.
const SPEC: &str = include_str!("../../../suites/tokenizer.toml");

impl Suite for TokenizerSuite {
    fn name(&self) -> &'static str {
        "tokenizer"
    }
    fn describe(&self) -> &'static str {
        "Tokenizers on real vocabularies and text: BPE, WordPiece, SentencePiece; encode, batch, decode, normalize, train"
    }
    fn spec_toml(&self) -> &'static str {
        static SPEC_FOR_THIS_MACHINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        SPEC_FOR_THIS_MACHINE.get_or_init(|| sources::with_fallbacks(SPEC, &crate::data::lookup()))
    }
    fn benchmarks(&self) -> Vec<&'static str> {
        names(BENCHMARKS)
    }
    fn param_rule(&self, benchmark: &str, key: &str) -> Option<ParamRule> {
        Some(match (benchmark, key) {
            (_, "vocab") => ParamRule::Check(|v| {
                if sources::vocab_is_valid(&v.to_string()) {
                    Ok(())
                } else {
                    Err(format!("valid: {}", sources::VOCAB_NAMES))
                }
            }),
            (_, "corpus") => ParamRule::Check(|v| {
                if sources::corpus_is_valid(&v.to_string()) {
                    Ok(())
                } else {
                    Err(format!("valid: {}", sources::CORPUS_NAMES))
                }
            }),
            (_, "length") => ParamRule::OneOf(sources::Length::NAMES),
            (_, "offsets") => ParamRule::OneOf(encode::OFFSETS),
            (_, "form") => ParamRule::OneOf(text::FORMS),
            (_, "kind") => ParamRule::OneOf(text::KINDS),
            (_, "model") => ParamRule::OneOf(train::MODELS),
            // 0 means the whole corpus.
            (_, "input_bytes") => ParamRule::NON_NEGATIVE,
            (_, "max_length") => ParamRule::Int { min: 8, max: i64::MAX },
            (_, "vocab_size") => ParamRule::Int { min: 300, max: 1_000_000 },
            (_, "threads") => ParamRule::Threads,
            _ => return None,
        })
    }
    /// A dedicated pool of the case's `threads`, one thread when it names
    /// none (single-text benchmarks are sequential by definition), the
    /// run's pool for `all`.
    fn threads(&self, case: &Case) -> Result<crate::backend::cpu::Threads> {
        match case.params.get("threads") {
            None => Ok(crate::backend::cpu::Threads::Exactly(1)),
            Some(_) => case.threads_request(),
        }
    }
    fn prepare(&self, case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
        dispatch(self.name(), BENCHMARKS, case, ctx)
    }
}

/// The string parameter `key`, which must be one of `valid`.
pub(crate) fn choice<'a>(case: &Case, key: &str, valid: &[&'a str]) -> Result<&'a str> {
    let got = case.str(key)?;
    match valid.iter().find(|v| **v == got) {
        Some(v) => Ok(v),
        None => bail!("case {}: `{key}` = `{got}` is not valid; valid: {}", case.id, valid.join(", ")),
    }
}

/// Runs `f` inside `pool`, or on the current (global) pool when `None`; on
/// the calling thread when that is a worker of a pool as wide (see
/// [`crate::backend::cpu::install`]).
pub(crate) fn install<R: Send>(pool: Option<&rayon::ThreadPool>, f: impl FnOnce() -> R + Send) -> R {
    crate::backend::cpu::install(pool, f)
}

#[cfg(test)]
mod tests;
